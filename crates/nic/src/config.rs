//! Device configuration: name, address, MTU and resource limits.
//!
//! The limits default to Linux rxe's (`rxe_param.h`, docs/abi.md §10) where the
//! layouts of this project allow them, and are what QUERY_DEVICE reports.

use std::net::IpAddr;

use abi::provider::DeviceSpec;

/// Resource limits of one device (what QUERY_DEVICE reports and the control plane enforces).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Queue pairs (device-wide).
    pub max_qp: u32,
    /// Work requests per send or receive queue (ring slots).
    pub max_qp_wr: u32,
    /// SGEs per work request (≤ [`abi::fastpath::MAX_SGE`]).
    pub max_sge: u32,
    /// Inline bytes per send WQE (≤ [`abi::fastpath::MAX_INLINE_DATA`]).
    pub max_inline_data: u32,
    /// Completion queues.
    pub max_cq: u32,
    /// Entries per CQ (ring slots; a power of two).
    pub max_cqe: u32,
    /// Memory regions.
    pub max_mr: u32,
    /// Protection domains.
    pub max_pd: u32,
    /// Address handles.
    pub max_ah: u32,
    /// Shared receive queues.
    pub max_srq: u32,
    /// Work requests per SRQ.
    pub max_srq_wr: u32,
    /// SGEs per SRQ work request.
    pub max_srq_sge: u32,
    /// Outstanding RDMA READ / atomic per QP (both directions; rxe: 128).
    pub max_qp_rd_atom: u32,
    /// Completion channels per context.
    pub max_comp_channels: u32,
    /// Open contexts (command connections) per device.
    pub max_contexts: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_qp: 0x1_0000,
            max_qp_wr: 0x4000,
            max_sge: abi::fastpath::MAX_SGE,
            max_inline_data: abi::fastpath::MAX_INLINE_DATA,
            max_cq: 0x4000,
            // libfabric's ofi_rxm sizes each MSG CQ as (tx + rx size) × FI_UNIVERSE_SIZE:
            // 1024 × 256 with the verbs provider's defaults (rxe's 32767 is too small).
            max_cqe: 1 << 18,
            max_mr: 0x4000,
            max_pd: 0x7ffc,
            max_ah: 0x3ffe,
            max_srq: 0x3ff,
            max_srq_wr: 0x4000,
            max_srq_sge: abi::fastpath::MAX_SGE,
            max_qp_rd_atom: u32::from(transport::MAX_RD_ATOMIC),
            max_comp_channels: 64,
            max_contexts: 256,
        }
    }
}

/// Everything needed to start a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Device name (`ibv_get_device_name`).
    pub name: String,
    /// The address the device sends and receives RoCEv2 on (UDP 4791); its GID index 0.
    pub addr: IpAddr,
    /// Port active MTU in bytes: 256, 512, 1024 (default), 2048 or 4096.
    pub active_mtu: u32,
    /// Resource limits.
    pub limits: Limits,
    /// Run this device on its own engine thread instead of the process-wide shared one
    /// (docs/architecture.md §4: on a 2-core machine, more spinning threads than cores hurt).
    pub dedicated_engine: bool,
    /// How long the engine keeps polling without progress before it parks, in µs, at
    /// least: the start and minimum of its adaptive spin window (`spin` module docs).
    pub spin_us: u32,
    /// Cap of the adaptive spin window, in µs: parks that end in a wake-up sooner than
    /// this double the window up to it (default 20 ms).
    pub max_spin_us: u32,
    /// While the application is mid-work (it owes a signaled send WQE, or has completions
    /// it has not consumed: it is descheduled, not idle), the engine keeps polling this
    /// long after the last progress, in µs, instead of parking and making every later
    /// doorbell a system call: the floor of a second adaptive window (default 50 ms).
    pub busy_spin_us: u32,
    /// Cap of that mid-work window, in µs (default 1 s).
    ///
    /// The price of these windows: on a machine with more runnable threads than cores, a
    /// spinning engine takes CPU time its application could have used (measured on a
    /// loaded 2-core box: about half the bulk WRITE throughput of an engine that parks
    /// after 50 µs). Set all four to the same small value for a fixed window, or see
    /// [`DeviceConfig::yield_when_idle`].
    pub max_busy_spin_us: u32,
    /// While spinning idle, yield the core after a few µs (`sched_yield`). Helps when
    /// threads outnumber cores (the application may be waiting for the engine's core),
    /// at the price of system calls while idle-spinning; off by default so a busy
    /// application thread with its own core sees no engine system calls at all.
    pub yield_when_idle: bool,
    /// When the engine notices it was descheduled in the middle of an idle spin (more
    /// runnable threads than cores), it parks after a few µs of idle for a while, whatever
    /// the windows above say (`spin` module, "Oversubscribed cores"): a doorbell then costs
    /// a system call, where spinning would cost the other threads scheduler slices (on a
    /// quiet 2-core VM, a two-process `uroce pingpong` round trip takes about 0.4 ms with
    /// it and about 8 ms without). On by default; turn it off to keep the windows
    /// regardless of the load.
    pub park_when_contended: bool,
    /// While the engine is parked, a library thread that finds its CQ empty or rings a
    /// doorbell does the engine's work itself instead of waking it (`poll_cq` and
    /// `post_send` run a pass; `abi::doorbell::Progress`), as rxe's `post_send` transmits
    /// in the caller's context. On by default: with more runnable threads than cores, a
    /// busy-polling application otherwise waits for the scheduler to give the engine its
    /// core. Off: the library only ever wakes the engine.
    pub app_progress: bool,
    /// ECN congestion control (docs/wire.md §11), on by default as on RoCE NICs with
    /// DCQCN: packets leave ECN-capable (ECT(0)), a CE-marked packet makes the receiving QP
    /// send its peer a CNP, and a CNP makes the sending QP cut its rate (DCQCN, paced).
    /// Off: packets leave not-ECT, and CE marks and CNPs are only counted. The environment
    /// variable `UROCE_ECN=0` (or `off`) makes it off in every [`DeviceConfig::new`] of the
    /// process (so for every device a program starts, from `UROCE_DEVICES` or its own
    /// configuration); setting the field afterwards overrides it.
    pub ecn: bool,
    /// DCQCN's parameters (used when `ecn` is on). [`DeviceConfig::new`] applies
    /// `UROCE_DCQCN` (mlx5's names and units, `rp_ai_rate=1,rp_time_reset=3000`,
    /// [`transport::DcqcnParams::apply`]) to the defaults; a malformed value is reported on
    /// stderr once and ignored.
    pub dcqcn: transport::DcqcnParams,
}

/// The environment variable with DCQCN parameter settings for every device of the process.
pub const DCQCN_ENV: &str = "UROCE_DCQCN";

fn dcqcn_from_env() -> transport::DcqcnParams {
    let mut p = transport::DcqcnParams::default();
    if let Ok(v) = std::env::var(DCQCN_ENV) {
        if let Err(e) = p.apply(&v) {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| eprintln!("uroce: {DCQCN_ENV} ignored: {e}"));
        }
    }
    p
}

/// The environment variable that turns ECN congestion control off (`0`, `off`, `false`,
/// `no`) or on (anything else) for devices started from `UROCE_DEVICES`.
pub const ECN_ENV: &str = "UROCE_ECN";

/// Whether an `UROCE_ECN` value turns ECN on.
pub fn ecn_setting(v: &str) -> bool {
    !matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "0" | "off" | "false" | "no"
    )
}

impl DeviceConfig {
    /// Defaults for a device `name` bound to `addr`.
    pub fn new(name: impl Into<String>, addr: IpAddr) -> DeviceConfig {
        DeviceConfig {
            name: name.into(),
            addr,
            active_mtu: 1024,
            limits: Limits::default(),
            dedicated_engine: false,
            spin_us: 50,
            max_spin_us: 20_000,
            busy_spin_us: 50_000,
            max_busy_spin_us: 1_000_000,
            yield_when_idle: false,
            park_when_contended: true,
            app_progress: true,
            ecn: std::env::var(ECN_ENV).map_or(true, |v| ecn_setting(&v)),
            dcqcn: dcqcn_from_env(),
        }
    }

    /// Defaults for a device from a `UROCE_DEVICES` entry.
    pub fn from_spec(spec: &DeviceSpec) -> DeviceConfig {
        DeviceConfig::new(spec.name.clone(), spec.addr)
    }

    /// The active MTU as the transport's enum, if the configured value is legal.
    pub fn mtu(&self) -> Option<transport::Mtu> {
        transport::Mtu::from_bytes(self.active_mtu)
    }

    /// Check the configuration; the error says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() || self.name.len() > 63 {
            return Err(format!("bad device name `{}`", self.name));
        }
        if self.mtu().is_none() {
            return Err(format!(
                "active MTU {} is not 256, 512, 1024, 2048 or 4096",
                self.active_mtu
            ));
        }
        let l = &self.limits;
        if l.max_sge > abi::fastpath::MAX_SGE
            || l.max_srq_sge > abi::fastpath::MAX_SGE
            || l.max_inline_data > abi::fastpath::MAX_INLINE_DATA
            || l.max_qp_wr > abi::ring::MAX_RING_SLOTS
            || l.max_srq_wr > abi::ring::MAX_RING_SLOTS
            || l.max_cqe > abi::ring::MAX_RING_SLOTS
            || l.max_qp_rd_atom > u32::from(transport::MAX_RD_ATOMIC)
            || l.max_qp > (1 << 24) - 16
        {
            return Err("limits exceed what the ABI layouts or the transport allow".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_mtu_does_not() {
        let mut c = DeviceConfig::new("uroce0", "127.0.0.1".parse().unwrap());
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.mtu(), Some(transport::Mtu::Mtu1024));
        c.active_mtu = 1500;
        assert!(c.validate().is_err());
        c.active_mtu = 4096;
        c.limits.max_sge = 33;
        assert!(c.validate().is_err());
    }

    #[test]
    fn ecn_is_on_by_default_and_the_switch_reads_off_values() {
        if std::env::var_os(ECN_ENV).is_none() {
            assert!(DeviceConfig::new("uroce0", "127.0.0.1".parse().unwrap()).ecn);
        }
        for off in ["0", "off", "OFF", "false", "no", " 0 "] {
            assert!(!ecn_setting(off), "{off}");
        }
        for on in ["1", "on", "yes", ""] {
            assert!(ecn_setting(on), "{on}");
        }
    }
}
