//! Pure functions of rdma-core's API that need no device: the `*_str` names and the rate
//! conversions. Their results must be byte-identical to rdma-core 44's (the pingpongs print
//! `ibv_wc_status_str`), which `tests/compat/abi-check.sh` verifies by running one C program
//! against the system library and against ours and comparing the output.

use core::ffi::{c_char, c_int, CStr};

/// `ibv_wc_status_str` texts, indexed by status (must equal `abi::WcStatus::as_str`; a unit
/// test checks that, so the two tables cannot drift).
const WC_STATUS: &[&CStr] = &[
    c"success",
    c"local length error",
    c"local QP operation error",
    c"local EE context operation error",
    c"local protection error",
    c"Work Request Flushed Error",
    c"memory management operation error",
    c"bad response error",
    c"local access error",
    c"remote invalid request error",
    c"remote access error",
    c"remote operation error",
    c"transport retry counter exceeded",
    c"RNR retry counter exceeded",
    c"local RDD violation error",
    c"remote invalid RD request",
    c"aborted error",
    c"invalid EE context number",
    c"invalid EE context state",
    c"fatal error",
    c"response timeout error",
    c"general error",
    c"TM error",
    c"TM software rendezvous",
];

/// `ibv_port_state_str` texts (`abi::PortState::as_str`), indexed by state.
const PORT_STATE: &[&CStr] = &[
    c"no state change (NOP)",
    c"down",
    c"init",
    c"armed",
    c"active",
    c"active defer",
];

/// `ibv_node_type_str` texts, indexed by `enum ibv_node_type` (CA = 1 …).
const NODE_TYPE: &[&CStr] = &[
    c"unknown",
    c"InfiniBand channel adapter",
    c"InfiniBand switch",
    c"InfiniBand router",
    c"iWARP NIC",
    c"usNIC",
    c"usNIC UDP",
    c"unspecified",
];

/// `ibv_event_type_str` texts, indexed by `enum ibv_event_type`.
const EVENT_TYPE: &[&CStr] = &[
    c"CQ error",
    c"local work queue catastrophic error",
    c"invalid request local work queue error",
    c"local access violation work queue error",
    c"communication established",
    c"send queue drained",
    c"path migrated",
    c"path migration request error",
    c"local catastrophic error",
    c"port active",
    c"port error",
    c"LID change",
    c"P_Key change",
    c"SM change",
    c"SRQ catastrophic error",
    c"SRQ limit reached",
    c"last WQE reached",
    c"client reregistration",
    c"GID table change",
    c"WQ fatal",
];

const UNKNOWN: &CStr = c"unknown";

fn pick(table: &[&'static CStr], index: c_int) -> *const c_char {
    usize::try_from(index)
        .ok()
        .and_then(|i| table.get(i))
        .copied()
        .unwrap_or(UNKNOWN)
        .as_ptr()
}

/// `ibv_wc_status_str(enum ibv_wc_status)`: a static string, "unknown" out of range.
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    pick(WC_STATUS, status)
}

/// `ibv_port_state_str(enum ibv_port_state)`.
pub extern "C" fn ibv_port_state_str(state: c_int) -> *const c_char {
    pick(PORT_STATE, state)
}

/// `ibv_node_type_str(enum ibv_node_type)`; `IBV_NODE_UNKNOWN` is −1.
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    pick(NODE_TYPE, node_type)
}

/// `ibv_event_type_str(enum ibv_event_type)`.
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    pick(EVENT_TYPE, event)
}

/// `enum ibv_rate` → (multiple of 2.5 Gb/s, Mb/s). Values from verbs.h; the Mb/s column is
/// the exact per-lane encoding rate that rdma-core reports (e.g. FDR10 14 Gb/s → 14062).
const RATES: &[(c_int, c_int, c_int)] = &[
    // (enum value, mult, mbps)
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, -1, 14062),
    (12, -1, 56250),
    (13, -1, 112500),
    (14, -1, 168750),
    (15, -1, 25781),
    (16, -1, 103125),
    (17, -1, 206250),
    (18, -1, 309375),
    (19, 11, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
];

/// `IBV_RATE_MAX`.
const IBV_RATE_MAX: c_int = 0;

/// `ibv_rate_to_mult(enum ibv_rate)`: the rate as a multiple of 2.5 Gb/s (rounded as
/// rdma-core does for the newer rates), −1 for the FDR/EDR encodings it has no multiple for.
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

/// `mult_to_ibv_rate(int mult)`: `IBV_RATE_MAX` (0) when no rate matches.
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult > 0)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

/// `ibv_rate_to_mbps(enum ibv_rate)`: −1 for unknown rates.
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate(int mbps)`: `IBV_RATE_MAX` (0) when no rate matches.
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.2 == mbps)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi::{PortState, WcStatus};

    fn s(p: *const c_char) -> &'static str {
        // SAFETY: every pointer these functions return is one of the 'static C strings above.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn wc_status_matches_abi_table() {
        for code in 0..40u32 {
            let ours = s(ibv_wc_status_str(code as c_int));
            assert_eq!(ours, WcStatus::str_of_raw(code), "status {code}");
        }
        assert_eq!(s(ibv_wc_status_str(-1)), "unknown");
        assert_eq!(s(ibv_wc_status_str(5)), "Work Request Flushed Error");
    }

    #[test]
    fn port_state_matches_abi_table() {
        for code in 0..10u32 {
            assert_eq!(
                s(ibv_port_state_str(code as c_int)),
                PortState(code).as_str()
            );
        }
    }

    #[test]
    fn other_names() {
        assert_eq!(s(ibv_node_type_str(1)), "InfiniBand channel adapter");
        assert_eq!(s(ibv_node_type_str(-1)), "unknown");
        assert_eq!(s(ibv_event_type_str(4)), "communication established");
        assert_eq!(s(ibv_event_type_str(99)), "unknown");
    }

    #[test]
    fn rates_round_trip() {
        for &(rate, mult, mbps) in RATES {
            assert_eq!(ibv_rate_to_mbps(rate), mbps);
            assert_eq!(mbps_to_ibv_rate(mbps), rate);
            assert_eq!(ibv_rate_to_mult(rate), mult);
            if mult > 0 {
                assert_eq!(mult_to_ibv_rate(mult), rate);
            }
        }
        assert_eq!(ibv_rate_to_mult(0), -1);
        assert_eq!(mult_to_ibv_rate(3), IBV_RATE_MAX);
        assert_eq!(mbps_to_ibv_rate(1), IBV_RATE_MAX);
        assert_eq!(ibv_rate_to_mbps(99), -1);
    }
}
