//! A device of this process attached to `uroced` (docs/daemon.md): the daemon owns the
//! address's UDP port 4791, the QP-number space and the CM's service IDs; this process keeps
//! its own control plane and engine for its own objects (rings, MRs, QPs: its DMA stays
//! in-process, so the fast path makes no system call), as an SR-IOV virtual function has
//! its own queues behind the physical function that owns the port.
//!
//! What attaching changes:
//! * the UDP socket is the daemon's (a copy of its descriptor): this process sends on it
//!   directly; it never reads it — the daemon forwards this process's datagrams (those to
//!   its QP numbers, and the CM MADs for its IDs) on the `data` socket;
//! * QP numbers come from the window the daemon assigned; packets for the device's own
//!   address take the internal loopback only when their QP is in that window;
//! * CM IDs carry the daemon-assigned prefix; a listen claims its service ID at the daemon.
//!
//! If the daemon goes away the device becomes fatal ([`DaemonLink::fatal`]): every QP is
//! flushed, each context gets `IBV_EVENT_DEVICE_FATAL`, and every further command that is
//! not a destroy fails with EIO.

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use abi::daemon::{self as proto, AttachReq, AttachResp, ListenReq, Msg};

use crate::sys;

/// The link to the daemon of one attached device.
#[derive(Debug)]
pub(crate) struct DaemonLink {
    /// The device socket.
    pub(crate) socket: PathBuf,
    /// Requests (and the lifeline: the daemon reclaims when it closes).
    ctl: Mutex<UnixStream>,
    /// Datagrams the daemon forwards to this process.
    pub(crate) data: OwnedFd,
    /// What the daemon granted.
    pub(crate) grant: AttachResp,
    /// The daemon went away.
    pub(crate) fatal: AtomicBool,
}

fn other(msg: String) -> io::Error {
    io::Error::other(msg)
}

impl DaemonLink {
    /// Attach to the device served on `socket`. Returns the link and the device's UDP
    /// socket.
    pub(crate) fn attach(socket: &Path, wake: BorrowedFd<'_>) -> io::Result<(DaemonLink, OwnedFd)> {
        let ctl = UnixStream::connect(socket).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot open {} (the uroced device node): {e}",
                    socket.display()
                ),
            )
        })?;
        ctl.set_read_timeout(Some(Duration::from_secs(10)))?;
        let (ours, theirs) = sys::seqpacket_pair()?;
        sys::set_bufs(ours.as_fd(), 4 << 20);
        let req = proto::encode(&Msg::Attach(AttachReq {
            pid: std::process::id(),
            reserved: 0,
        }));
        sys::send_with_fds(ctl.as_fd(), &req, &[theirs.as_fd(), wake], 0)?;
        drop(theirs);
        // The reply, the UDP socket with its first byte.
        let (reply, fds) = read_reply(&ctl)?;
        match reply {
            Msg::Attached(grant) => {
                let udp = fds
                    .into_iter()
                    .next()
                    .ok_or_else(|| other("the daemon sent no UDP socket".into()))?;
                ctl.set_read_timeout(Some(Duration::from_secs(10)))?;
                Ok((
                    DaemonLink {
                        socket: socket.to_path_buf(),
                        ctl: Mutex::new(ctl),
                        data: ours,
                        grant,
                        fatal: AtomicBool::new(false),
                    },
                    udp,
                ))
            }
            Msg::Error(e) => Err(e.to_io()),
            m => Err(other(format!("unexpected answer to ATTACH: {m:?}"))),
        }
    }

    /// Send `m` and read its `Done` reply, with the descriptors it carried.
    fn call(&self, m: &Msg) -> io::Result<Vec<OwnedFd>> {
        if self.fatal.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let s = self.ctl.lock().unwrap_or_else(PoisonError::into_inner);
        io::Write::write_all(&mut &*s, &proto::encode(m))?;
        match read_reply(&s)? {
            (Msg::Done(_), fds) => Ok(fds),
            (Msg::Error(e), _) => Err(io::Error::from_raw_os_error(e.errno)),
            (other_msg, _) => Err(other(format!("unexpected answer: {other_msg:?}"))),
        }
    }

    /// A packet ring to the client in `slot` (docs/daemon.md §2.1): the ring's memfd and
    /// that client's wake-up eventfd.
    pub(crate) fn peer(&self, slot: u32) -> io::Result<(OwnedFd, OwnedFd)> {
        let mut it = self
            .call(&Msg::Peer(proto::PeerReq { slot, reserved: 0 }))?
            .into_iter();
        match (it.next(), it.next()) {
            (Some(ring), Some(wake)) => Ok((ring, wake)),
            _ => Err(other("PEER reply without its descriptors".into())),
        }
    }

    /// Claim a CM service ID (EADDRINUSE if another process holds it).
    pub(crate) fn listen(&self, service_id: u64) -> io::Result<()> {
        self.call(&Msg::Listen(ListenReq { service_id })).map(drop)
    }

    /// Release a CM service ID.
    pub(crate) fn unlisten(&self, service_id: u64) {
        let _ = self.call(&Msg::Unlisten(ListenReq { service_id }));
    }
}

/// One reply from the daemon on `ctl` and the descriptors that came with its first byte:
/// the 8-byte header (with the descriptors), then the body it announces.
fn read_reply(ctl: &UnixStream) -> io::Result<(Msg, Vec<OwnedFd>)> {
    let closed = || other("the daemon closed the connection".into());
    let mut hdr = [0u8; 8];
    let (n, fds) = sys::recv_with_fds(ctl.as_fd(), &mut hdr)?;
    if n == 0 {
        return Err(closed());
    }
    let mut got = n;
    while got < hdr.len() {
        match (&*ctl).read(&mut hdr[got..])? {
            0 => return Err(closed()),
            k => got += k,
        }
    }
    let len = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]).min(proto::MAX_BODY);
    let mut all = hdr.to_vec();
    all.resize(8 + len as usize, 0);
    (&*ctl).read_exact(&mut all[8..])?;
    let m = proto::decode(&all).map_err(|e| other(format!("bad answer from the daemon: {e:?}")))?;
    Ok((m, fds))
}

/// The daemon device for `addr`, if a daemon serves one (and the daemon is not turned off).
pub(crate) fn lookup(addr: std::net::IpAddr) -> Option<PathBuf> {
    proto::lookup(addr).map(|d| d.socket)
}
