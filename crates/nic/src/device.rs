//! A device: its configuration, its state behind the device lock, its socket, and the
//! engine and control plane that serve it (reached through `state::EngineLink` and
//! [`CommandIntake`], so this module depends on neither). Devices are started and kept by
//! `crate::registry`.

use std::io;
use std::net::UdpSocket;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::config::DeviceConfig;
use crate::counters::PortCounters;
use crate::dma::AddressSpace;
use crate::state::{DevState, EngineLink};
use crate::sys;

/// Where a device's new command connections go: its control plane (`crate::ctrl`).
pub(crate) trait CommandIntake: Send + Sync + std::fmt::Debug {
    /// Serve `stream` from now on.
    fn add(&self, stream: UnixStream);
}

/// One software RoCE device.
#[derive(Debug)]
pub(crate) struct Device {
    /// Process-unique id (the engine's epoll token for its socket).
    pub(crate) id: u64,
    pub(crate) cfg: DeviceConfig,
    /// How command addresses name memory (as `DevState::space`, readable without the lock).
    pub(crate) space: AddressSpace,
    /// GSO sends to IPv4 loopback peers, for a device on an IPv4 loopback address: how the
    /// kernel numbers their IDs (`sys::loopback_gso_ids`; `None`: no GSO). Probed here, at
    /// start, not on the engine thread, whose sockets would otherwise come and go under a
    /// running application.
    pub(crate) gso: Option<sys::GsoIds>,
    /// Packet capture point (`crate::tap`: `UROCE_CAPTURE` and attached tools), handed to
    /// the engine's `DevIo`.
    pub(crate) tap: Arc<crate::tap::Tap>,
    /// A sealed device (the fuzz harness): never captured or traced.
    pub(crate) hermetic: bool,
    /// Taken only through [`Device::lock_cp`], [`Device::lock_engine`] and
    /// [`Device::try_lock_state`] (set here by `crate::registry` when it starts the device).
    pub(crate) state: Mutex<DevState>,
    /// Control-plane threads waiting for the lock: the engine lets them in between passes.
    pub(crate) cp_waiting: AtomicU32,
    pub(crate) sock: UdpSocket,
    /// The daemon this device is attached to (`crate::daemon_client`), if any.
    pub(crate) daemon: Option<Arc<crate::daemon_client::DaemonLink>>,
    pub(crate) engine: Arc<dyn EngineLink>,
    /// The control plane, which takes each new command connection.
    pub(crate) ctrl: Arc<dyn CommandIntake>,
    pub(crate) next_ctx: AtomicU64,
}

impl Device {
    /// The process's tracer if anything traces (never for a sealed device).
    #[inline]
    pub(crate) fn tracer(&self) -> Option<&'static crate::trace::Tracer> {
        if self.hermetic {
            None
        } else {
            crate::trace::active()
        }
    }

    /// The state, for the control plane (announces itself so the engine yields).
    pub(crate) fn lock_cp(&self) -> MutexGuard<'_, DevState> {
        self.cp_waiting.fetch_add(1, Ordering::SeqCst);
        let g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.cp_waiting.fetch_sub(1, Ordering::SeqCst);
        g
    }

    /// The state if nobody holds it (the exit hook, which must never wait).
    pub(crate) fn try_lock_state(&self) -> std::sync::TryLockResult<MutexGuard<'_, DevState>> {
        self.state.try_lock()
    }

    /// The state, for the engine: a spinning engine re-locks constantly, so it steps aside
    /// (briefly, bounded) while a control-plane thread is waiting — the slow path must not
    /// starve behind the fast path.
    pub(crate) fn lock_engine(&self) -> MutexGuard<'_, DevState> {
        let mut n = 0;
        while self.cp_waiting.load(Ordering::SeqCst) > 0 && n < 1000 {
            std::thread::yield_now();
            n += 1;
        }
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A started device.
#[derive(Debug, Clone)]
pub struct DeviceHandle(pub(crate) Arc<Device>);

impl DeviceHandle {
    /// The device's name.
    pub fn name(&self) -> &str {
        &self.0.cfg.name
    }

    /// Its configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.0.cfg
    }

    /// The `uroced` device socket this device is attached to (docs/daemon.md), or `None`
    /// for an embedded device that owns its address itself.
    pub fn daemon_socket(&self) -> Option<&std::path::Path> {
        self.0.daemon.as_ref().map(|l| l.socket.as_path())
    }

    /// Open a command channel (a new context): the library's end of a fresh socketpair
    /// whose other end the device's control plane serves. Closing it destroys everything
    /// the context created; the control plane closes its end once that is done.
    pub fn open_context(&self) -> io::Result<UnixStream> {
        let (lib, ours) = UnixStream::pair()?;
        self.0.ctrl.add(ours);
        Ok(lib)
    }

    /// Port counters: every QP's transport counters (live and destroyed) plus the engine's.
    pub fn port_counters(&self) -> PortCounters {
        self.0.lock_cp().port_counters()
    }

    /// One QP's transport counters, by QPN.
    pub fn qp_counters(&self, qpn: u32) -> Option<transport::Counters> {
        let st = self.0.lock_cp();
        st.qps.get(qpn).map(|q| *q.qp.counters())
    }

    /// Whether a QP runs selective repeat (docs/wire.md §5.6), by QPN.
    pub fn qp_selective_repeat(&self, qpn: u32) -> Option<bool> {
        let st = self.0.lock_cp();
        st.qps.get(qpn).map(|q| q.qp.selective_repeat())
    }

    /// Counters of every live CQ, by ascending handle.
    pub fn cq_counters(&self) -> Vec<crate::CqCounters> {
        let st = self.0.lock_cp();
        st.res
            .cqs
            .iter()
            .map(|(cq, c)| crate::CqCounters {
                cq,
                slots: c.layout.slots(),
                lost_cqes: c.lost_cqes,
            })
            .collect()
    }

    /// The device itself (the fuzz harness drives its dispatch directly).
    /// Runs `f` on the device's Communication Manager (QP 1) with the engine's clock, under
    /// the device lock, then wakes the engine so the MADs `f` queued leave and the CM's
    /// timers are watched. Events come from [`DeviceHandle::cm_poll_event`].
    pub fn with_cm<R>(&self, f: impl FnOnce(&mut cm::Cm, transport::Time) -> R) -> R {
        let mut st = self.0.lock_cp();
        let now = self.0.engine.now();
        let r = f(&mut st.gsi.cm, now);
        st.gsi.collect();
        st.arm_gsi();
        drop(st);
        self.0.engine.kick();
        r
    }

    /// The next event of the device's Communication Manager, if any.
    pub fn cm_poll_event(&self) -> Option<cm::CmEvent> {
        self.0.lock_cp().gsi.poll_event()
    }

    pub(crate) fn dev(&self) -> &Device {
        &self.0
    }

    /// Live objects, for tests and `uroce` diagnostics.
    pub fn stats(&self) -> DeviceStats {
        let st = self.0.lock_cp();
        DeviceStats {
            contexts: st.res.ctxs.len(),
            pds: st.res.pds.len(),
            mrs: st.res.mrs.len(),
            cqs: st.res.cqs.len(),
            qps: st.qps.len(),
            srqs: st.res.srqs.len(),
            ahs: st.res.ahs.len(),
            comp_channels: st.res.chans.len(),
        }
    }
}

/// Counts of live objects on a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Open contexts (after GET_CONTEXT).
    pub contexts: usize,
    /// Protection domains.
    pub pds: usize,
    /// Memory regions.
    pub mrs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Queue pairs.
    pub qps: usize,
    /// Shared receive queues.
    pub srqs: usize,
    /// Address handles.
    pub ahs: usize,
    /// Completion channels.
    pub comp_channels: usize,
}
