//! Counters per port (device) and per QP, under the names Linux exposes.
//!
//! Per QP: the transport's [`transport::Counters`] (rxe `hw_counters` names: `sent_pkts`,
//! `rcvd_pkts`, `duplicate_request`, `out_of_seq_request`, `rcvd_rnr_err`, `send_rnr_err`,
//! `rcvd_seq_err`, `ack_deferred`, `retry_exceeded_err`, `retry_rnr_exceeded_err`,
//! `completer_retry_err`, `send_err`, `rdma_sends`, `rdma_recvs`, ...). Per port: the sum
//! over every QP the device ever had, plus the engine's own [`EngineCounters`] (IB PMA port
//! counters and the drops only the engine sees, such as bad ICRCs).

/// What the engine counts itself (per device).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineCounters {
    /// Packets put on the wire or on the internal loopback (IB PMA `PortXmitPkts`).
    pub port_xmit_packets: u64,
    /// Packets received from the wire or the internal loopback (`PortRcvPkts`).
    pub port_rcv_packets: u64,
    /// Bytes sent (BTH through ICRC) in 4-byte words, as IB PMA `PortXmitData` counts.
    pub port_xmit_data: u64,
    /// Bytes received, in 4-byte words (`PortRcvData`).
    pub port_rcv_data: u64,
    /// Received packets dropped as malformed, truncated or with a bad ICRC (`PortRcvErrors`).
    pub port_rcv_errors: u64,
    /// Received packets whose ICRC did not verify (dropped; a subset of `port_rcv_errors`).
    pub rcvd_icrc_err: u64,
    /// Received packets for a QPN with no QP on this device (dropped).
    pub rcvd_unknown_qp: u64,
    /// RC/UC packets whose source address is not the QP's destination (dropped, as rxe's
    /// `check_addr` does).
    pub rcvd_addr_mismatch: u64,
    /// Packets delivered through the internal loopback (same-device traffic).
    pub loopback_pkts: u64,
    /// Packets the UDP socket refused (e.g. EMSGSIZE: larger than the route MTU with DF set).
    pub xmit_discards: u64,
    /// Packets without a route (UD address handle destroyed while the WR was queued).
    pub xmit_no_route: u64,
    /// Completions lost because a CQ was full (the QP then went to ERR).
    pub cq_overflow: u64,
    /// Send WQEs rejected by the engine (malformed, bad opcode or AH): LOC_QP_OP_ERR.
    pub bad_wqe: u64,
    /// Times a ring's indices broke the ring protocol (the library's bug).
    pub ring_corrupt: u64,
    /// Completion or async events dropped because the event socket was full or closed.
    pub event_drops: u64,
    /// Internal errors caught in the engine or the control plane (a bug; the device
    /// keeps running).
    pub engine_panics: u64,
    /// Engine passes done on an application thread while the engine slept (in `poll_cq`
    /// or `post_send`, `abi::doorbell::Progress`): the work it did not have to be woken for.
    pub app_passes: u64,
    /// Payload bytes the device copied into or out of registered memory: from an MR into
    /// a packet for the wire, from a packet into an MR, or from one MR straight into
    /// another (a packet that stays on the device) — each copy once. With
    /// [`EngineCounters::socket_bytes`], what `uroce bench compare` counts as copies.
    /// (Counted by the MR table where the copies are made; a device's counter snapshot
    /// reads it from there.)
    pub mem_copy_bytes: u64,
    /// Datagram bytes (BTH through ICRC) the device handed to its UDP socket or took from
    /// it: what the kernel copied in and out of its socket buffers for the device.
    pub socket_bytes: u64,
}

impl EngineCounters {
    /// `(name, value)` pairs in a fixed order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("port_xmit_packets", self.port_xmit_packets),
            ("port_rcv_packets", self.port_rcv_packets),
            ("port_xmit_data", self.port_xmit_data),
            ("port_rcv_data", self.port_rcv_data),
            ("port_rcv_errors", self.port_rcv_errors),
            ("rcvd_icrc_err", self.rcvd_icrc_err),
            ("rcvd_unknown_qp", self.rcvd_unknown_qp),
            ("rcvd_addr_mismatch", self.rcvd_addr_mismatch),
            ("loopback_pkts", self.loopback_pkts),
            ("xmit_discards", self.xmit_discards),
            ("xmit_no_route", self.xmit_no_route),
            ("cq_overflow", self.cq_overflow),
            ("bad_wqe", self.bad_wqe),
            ("ring_corrupt", self.ring_corrupt),
            ("event_drops", self.event_drops),
            ("engine_panics", self.engine_panics),
            ("app_passes", self.app_passes),
            ("mem_copy_bytes", self.mem_copy_bytes),
            ("socket_bytes", self.socket_bytes),
        ]
        .into_iter()
    }
}

/// One live CQ's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqCounters {
    /// The CQ's handle (unique on its device while it lives).
    pub cq: u32,
    /// Its ring's slots (the `cqe` it was created or resized with, rounded up).
    pub slots: u32,
    /// Completions lost because this CQ was full (each moved its QP to ERR; the device's
    /// `cq_overflow` is the sum over every CQ it had).
    pub lost_cqes: u64,
}

impl CqCounters {
    /// `(name, value)` pairs in a fixed order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [("lost_cqes", self.lost_cqes)].into_iter()
    }
}

/// A port's counters: the transport counters summed over its QPs (live and destroyed) and
/// the engine's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Sum of every QP's transport counters.
    pub transport: transport::Counters,
    /// The engine's counters.
    pub engine: EngineCounters,
}

impl PortCounters {
    /// All counters as `(name, value)`: the rxe `hw_counters` names first, then the engine's.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.transport.iter().chain(self.engine.iter())
    }

    /// One counter by name.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_lookup_works() {
        let mut p = PortCounters::default();
        p.engine.rcvd_icrc_err = 3;
        p.transport.sent_pkts = 9;
        let names: Vec<_> = p.iter().map(|(n, _)| n).collect();
        let mut dedup = names.clone();
        dedup.sort_unstable();
        dedup.dedup();
        assert_eq!(names.len(), dedup.len());
        assert_eq!(p.get("rcvd_icrc_err"), Some(3));
        assert_eq!(p.get("sent_pkts"), Some(9));
        assert_eq!(p.get("nope"), None);
    }
}
