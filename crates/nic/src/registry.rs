//! The process's devices: started once per name ([`start_device`], or on first
//! [`abi::provider::Provider::open`] through [`EmbeddedProvider`]) — the UDP socket bound to
//! `addr:4791` (or the daemon's device attached), the control-plane thread started, the
//! device joined to an engine (the shared one unless [`DeviceConfig::dedicated_engine`]) —
//! and kept for as long as the process runs.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use abi::provider::{DeviceSpec, Provider};
use transport::wire::ROCE_V2_PORT;

use crate::config::DeviceConfig;
use crate::ctrl::{self, CtrlShared};
use crate::device::{Device, DeviceHandle};
use crate::dma::AddressSpace;
use crate::engine::EngineShared;
use crate::state::DevState;
use crate::sys;

static REGISTRY: Mutex<Vec<Arc<Device>>> = Mutex::new(Vec::new());
static SHARED_ENGINE: Mutex<Option<Arc<EngineShared>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// The process the registry's devices run in (0: none yet).
static REGISTRY_PID: AtomicU32 = AtomicU32::new(0);

/// The running devices. A child of `fork` inherits the parent's devices without the
/// threads that run them (engine, control plane) — pyverbs' rdma_cm tests open a device in
/// the parent, then connect from two forked children. So the first call in a new process
/// forgets them (leaked, not dropped: their threads and locks are not this process's) and
/// the shared engine, and the child's first open starts (or attaches) its own device, as
/// a forked rdma-core process opens its own contexts.
fn registry() -> MutexGuard<'static, Vec<Arc<Device>>> {
    let mut reg = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
    let pid = std::process::id();
    if REGISTRY_PID.swap(pid, Ordering::SeqCst) != pid {
        for d in reg.drain(..) {
            std::mem::forget(d);
        }
        let mut e = SHARED_ENGINE.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = e.take() {
            std::mem::forget(e);
        }
    }
    reg
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Start a device (or return the running one of that name, if its address matches).
pub fn start_device(cfg: DeviceConfig) -> io::Result<DeviceHandle> {
    start_device_in(cfg, AddressSpace::Process, false)
}

/// [`start_device`] with a given address space and sealing (`DevState::hermetic`); the
/// fuzz harness's device (`crate::fuzzing`). An existing device of that name is returned
/// as it is.
pub(crate) fn start_device_in(
    cfg: DeviceConfig,
    space: AddressSpace,
    hermetic: bool,
) -> io::Result<DeviceHandle> {
    cfg.validate().map_err(invalid)?;
    let mut reg = registry();
    // A device whose daemon died is gone for good: a new open attaches afresh.
    reg.retain(|d| {
        !d.daemon
            .as_ref()
            .is_some_and(|l| l.fatal.load(Ordering::SeqCst))
    });
    if let Some(d) = reg.iter().find(|d| d.cfg.name == cfg.name) {
        if d.cfg.addr != cfg.addr {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "device {} already runs on {}, not {}",
                    cfg.name, d.cfg.addr, cfg.addr
                ),
            ));
        }
        return Ok(DeviceHandle(d.clone()));
    }
    if let Some(d) = reg.iter().find(|d| d.cfg.addr == cfg.addr) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("address {} is already device {}", cfg.addr, d.cfg.name),
        ));
    }
    let engine = if cfg.dedicated_engine {
        EngineShared::start(&cfg.name)?
    } else {
        let mut e = SHARED_ENGINE.lock().unwrap_or_else(PoisonError::into_inner);
        match &*e {
            Some(e) => e.clone(),
            None => {
                let s = EngineShared::start("shared")?;
                *e = Some(s.clone());
                s
            }
        }
    };
    // A daemon serving this address owns its port: attach to it (docs/daemon.md).
    let mut cfg = cfg;
    let link = match (!hermetic)
        .then(|| crate::daemon_client::lookup(cfg.addr))
        .flatten()
    {
        Some(path) => Some(crate::daemon_client::DaemonLink::attach(
            &path,
            engine.wake_fd(),
        )?),
        None => None,
    };
    let (sock, daemon) = match link {
        Some((link, udp)) => {
            cfg.active_mtu = link.grant.info.mtu;
            cfg.ecn = link.grant.info.ecn != 0;
            cfg.limits.max_qp = cfg.limits.max_qp.min(link.grant.qpn_count);
            (UdpSocket::from(udp), Some(Arc::new(link)))
        }
        None => {
            let sock = sys::bind_roce_udp(SocketAddr::new(cfg.addr, ROCE_V2_PORT))?;
            sys::set_ecn(&sock, cfg.ecn)?;
            (sock, None)
        }
    };
    if !hermetic {
        crate::trace::start_from_env();
    }
    let ctrl_shared = Arc::new(CtrlShared::new()?);
    let dev = Arc::new(Device {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        state: Mutex::new({
            let mut st = DevState::new(cfg.clone(), engine.clone());
            st.space = space;
            st.hermetic = hermetic;
            if let Some(l) = &daemon {
                st.attach_to_daemon(l.clone());
            }
            st
        }),
        gso: match cfg.addr {
            std::net::IpAddr::V4(a) if a.is_loopback() => sys::loopback_gso_ids(),
            _ => None,
        },
        // A sealed device (the fuzz harness) is never captured or traced.
        tap: crate::tap::for_device(&cfg.name, cfg.addr, !hermetic),
        hermetic,
        cfg,
        space,
        cp_waiting: AtomicU32::new(0),
        sock,
        daemon,
        engine: engine.clone(),
        ctrl: ctrl_shared.clone(),
        next_ctx: AtomicU64::new(1),
    });
    ctrl::start(dev.clone(), ctrl_shared)?;
    engine.add_device(dev.clone())?;
    reg.push(dev.clone());
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    AT_EXIT.call_once(|| sys::at_exit(flush_at_exit));
    Ok(DeviceHandle(dev))
}

/// At process exit: let each device's engine send the CM messages still queued (a DREQ or
/// REJ a program issued just before returning from `main`), waiting at most ~100 ms per
/// device. The kernel's CM outlives a process; an embedded device does not, and a peer
/// would otherwise wait for a DREQ that never left. Then publish what waits staged in the
/// device's peer rings (ACKs held back for company, docs/daemon.md §2.1): the other
/// process may be waiting for the last of them.
///
/// Never blocks on a lock: `exit` may run inside a signal handler (libfabric's psm
/// providers call it on SIGTERM) that interrupted this very thread inside the engine, with
/// the device state locked; and a forked child's registry holds its parent's devices.
extern "C" fn flush_at_exit() {
    let devs: Vec<Arc<Device>> = match REGISTRY.try_lock() {
        Ok(r) if REGISTRY_PID.load(Ordering::SeqCst) == std::process::id() => r.clone(),
        _ => return,
    };
    for d in devs {
        for _ in 0..100 {
            let pending = match d.try_lock_state() {
                Ok(st) => st.gsi.cm.has_transmits(),
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().gsi.cm.has_transmits(),
                // Held (by the engine, or by this thread under a signal handler): try
                // again shortly; a hundred misses end the wait.
                Err(std::sync::TryLockError::WouldBlock) => true,
            };
            if !pending {
                break;
            }
            d.engine.kick();
            d.engine.drive();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        for _ in 0..100 {
            match d.try_lock_state() {
                Ok(mut st) => st.publish_peer_rings(),
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().publish_peer_rings(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
            }
            break;
        }
    }
}

/// The running device called `name`, if any.
pub fn device(name: &str) -> Option<DeviceHandle> {
    registry()
        .iter()
        .find(|d| d.cfg.name == name)
        .map(|d| DeviceHandle(d.clone()))
}

/// The running devices a tool may attach to (sealed ones excluded).
pub(crate) fn attachable() -> Vec<Arc<Device>> {
    registry().iter().filter(|d| !d.hermetic).cloned().collect()
}

/// Names of the running devices.
pub fn device_names() -> Vec<String> {
    registry().iter().map(|d| d.cfg.name.clone()).collect()
}

/// The embedded-mode provider: devices run inside this process, started on first open.
///
/// Devices named in [`EmbeddedProvider::with_config`] use that configuration; others get
/// [`DeviceConfig::from_spec`] defaults.
#[derive(Debug, Default)]
pub struct EmbeddedProvider {
    configs: Vec<DeviceConfig>,
}

impl EmbeddedProvider {
    /// A provider with default device configurations.
    pub fn new() -> EmbeddedProvider {
        EmbeddedProvider::default()
    }

    /// Use `cfg` when the device of that name is started through this provider.
    pub fn with_config(mut self, cfg: DeviceConfig) -> EmbeddedProvider {
        self.configs.retain(|c| c.name != cfg.name);
        self.configs.push(cfg);
        self
    }
}

impl Provider for EmbeddedProvider {
    fn open(&self, spec: &DeviceSpec) -> io::Result<UnixStream> {
        let cfg = self
            .configs
            .iter()
            .find(|c| c.name == spec.name && c.addr == spec.addr)
            .cloned()
            .unwrap_or_else(|| DeviceConfig::from_spec(spec));
        start_device(cfg)?.open_context()
    }

    fn progress(&self, spec: &DeviceSpec) -> Option<Arc<dyn abi::doorbell::Progress>> {
        let dev = registry()
            .iter()
            .find(|d| d.cfg.name == spec.name && d.cfg.addr == spec.addr)
            .cloned()?;
        if !dev.cfg.app_progress {
            return None;
        }
        dev.engine.progress_for(dev.id)
    }
}
