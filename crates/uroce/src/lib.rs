//! uroce: RoCEv2 in user space. This is the crate applications depend on.
//!
//! It re-exports the [`verbs`] API (libibverbs' object model in Rust) and installs the
//! embedded software NIC from the `nic` crate as the provider, so a program needs nothing
//! else running: the device's control plane and engine start inside the process on first
//! use (docs/architecture.md §5, embedded mode).
//!
//! ```no_run
//! use uroce::*;
//!
//! let ctx = uroce::open_device(None)?; // uroce0=127.0.0.1 unless UROCE_DEVICES says otherwise
//! let pd = ctx.alloc_pd()?;
//! let mut buf = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
//! buf[..5].copy_from_slice(b"hello");
//! let cq = ctx.create_cq(16, None, 0)?;
//! let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, QpCap {
//!     max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64,
//! }))?;
//! # Ok::<(), uroce::Error>(())
//! ```
//!
//! Devices come from `UROCE_DEVICES` (comma-separated `name=address`, default
//! `uroce0=127.0.0.1`) or are named programmatically with [`device`]; several devices in
//! one process (e.g. 127.0.0.1 and 127.0.0.2) talk RoCEv2 over UDP, two QPs on one device
//! use the device's internal loopback. [`pair`] connects two QPs in one process, which is
//! what the examples, tests and loopback benchmarks need.

use std::net::IpAddr;
use std::sync::Arc;

pub use verbs::*;

pub mod metrics;
pub mod pair;
pub mod stats;

/// Install the embedded NIC as the process-wide provider (once) and return the installed
/// provider. Every other function here calls it; call it yourself only if you use
/// [`verbs`] functions directly.
pub fn init() -> Arc<dyn Provider> {
    // Publish this process's counters for `uroce stat` (once; a thread parked in accept).
    stats::start();
    verbs::set_provider(Arc::new(nic::EmbeddedProvider::new()));
    // A provider is installed now: ours, or one someone installed before us.
    verbs::provider().unwrap_or_else(|| Arc::new(nic::EmbeddedProvider::new()))
}

/// The configured devices (`UROCE_DEVICES`, default `uroce0=127.0.0.1`).
pub fn devices() -> Result<Vec<Device>> {
    init();
    verbs::devices()
}

/// Open the configured device `name`, or the first one.
pub fn open_device(name: Option<&str>) -> Result<Context> {
    init();
    verbs::open_device(name)
}

/// A device called `name` bound to `addr`, whether or not `UROCE_DEVICES` lists it.
pub fn device(name: &str, addr: IpAddr) -> Device {
    Device::new(
        DeviceSpec {
            name: name.to_string(),
            addr,
        },
        init(),
    )
}

/// The two devices of a `--pair` option: `None` → the first configured device twice
/// (loopback on one device); `Some("A,B")` → devices `uroce0`=A and `uroce1`=B.
pub fn pair_devices(pair: Option<&str>) -> Result<(Device, Device)> {
    let bad = |what: String| Error::local("pair_devices", Errno::EINVAL, what);
    match pair {
        None => {
            let d = devices()?
                .into_iter()
                .next()
                .ok_or_else(|| bad("no devices configured".into()))?;
            Ok((d.clone(), d))
        }
        Some(list) => {
            let (a, b) = list
                .split_once(',')
                .ok_or_else(|| bad(format!("--pair wants ADDR1,ADDR2, got `{list}`")))?;
            let a: IpAddr = a
                .trim()
                .parse()
                .map_err(|_| bad(format!("bad address `{a}`")))?;
            let b: IpAddr = b
                .trim()
                .parse()
                .map_err(|_| bad(format!("bad address `{b}`")))?;
            Ok((device("uroce0", a), device("uroce1", b)))
        }
    }
}
