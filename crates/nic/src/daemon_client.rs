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
        // The reply: a header and an AttachResp, the UDP socket with its first byte.
        let mut buf = vec![0u8; 8 + size_of::<AttachResp>()];
        let (n, fds) = sys::recv_with_fds(ctl.as_fd(), &mut buf)?;
        if n == 0 {
            return Err(other(format!(
                "{}: the daemon closed the connection",
                socket.display()
            )));
        }
        let mut got = n;
        // An error reply is shorter than an ATTACH reply; read what its header announces.
        let want = |b: &[u8]| -> usize {
            let len = b
                .get(4..8)
                .and_then(|x| x.try_into().ok())
                .map_or(0, u32::from_le_bytes) as usize;
            8 + len.min(proto::MAX_BODY as usize)
        };
        while got < 8 {
            let k = (&ctl).read(&mut buf[got..])?;
            if k == 0 {
                return Err(other("the daemon closed the connection".into()));
            }
            got += k;
        }
        let total = want(&buf);
        buf.resize(total.max(got), 0);
        while got < total {
            let k = (&ctl).read(&mut buf[got..total])?;
            if k == 0 {
                return Err(other("the daemon closed the connection".into()));
            }
            got += k;
        }
        buf.truncate(total);
        match proto::decode(&buf) {
            Ok(Msg::Attached(grant)) => {
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
            Ok(Msg::Error(e)) => Err(e.to_io()),
            Ok(m) => Err(other(format!("unexpected answer to ATTACH: {m:?}"))),
            Err(e) => Err(other(format!("bad answer to ATTACH: {e:?}"))),
        }
    }

    fn call(&self, m: &Msg) -> io::Result<()> {
        if self.fatal.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let mut s = self.ctl.lock().unwrap_or_else(PoisonError::into_inner);
        io::Write::write_all(&mut *s, &proto::encode(m))?;
        match proto::read_msg(&mut *s)? {
            Msg::Done(_) => Ok(()),
            Msg::Error(e) => Err(io::Error::from_raw_os_error(e.errno)),
            other_msg => Err(other(format!("unexpected answer: {other_msg:?}"))),
        }
    }

    /// A packet ring to the client in `slot` (docs/daemon.md §2.1): the ring's memfd and
    /// that client's wake-up eventfd.
    pub(crate) fn peer(&self, slot: u32) -> io::Result<(OwnedFd, OwnedFd)> {
        if self.fatal.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let s = self.ctl.lock().unwrap_or_else(PoisonError::into_inner);
        io::Write::write_all(
            &mut &*s,
            &proto::encode(&Msg::Peer(proto::PeerReq { slot, reserved: 0 })),
        )?;
        // The reply is an 8-byte header (+ an error body); descriptors come with its first byte.
        let mut hdr = [0u8; 8];
        let (n, fds) = sys::recv_with_fds(s.as_fd(), &mut hdr)?;
        if n == 0 {
            return Err(other("the daemon closed the connection".into()));
        }
        let mut got = n;
        while got < 8 {
            let k = (&*s).read(&mut hdr[got..])?;
            if k == 0 {
                return Err(other("the daemon closed the connection".into()));
            }
            got += k;
        }
        let len = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]).min(proto::MAX_BODY);
        let mut all = hdr.to_vec();
        all.resize(8 + len as usize, 0);
        (&*s).read_exact(&mut all[8..])?;
        match proto::decode(&all) {
            Ok(Msg::Done(proto::op::PEER)) => {
                let mut it = fds.into_iter();
                match (it.next(), it.next()) {
                    (Some(ring), Some(wake)) => Ok((ring, wake)),
                    _ => Err(other("PEER reply without its descriptors".into())),
                }
            }
            Ok(Msg::Error(e)) => Err(e.to_io()),
            other_msg => Err(other(format!("unexpected answer to PEER: {other_msg:?}"))),
        }
    }

    /// Claim a CM service ID (EADDRINUSE if another process holds it).
    pub(crate) fn listen(&self, service_id: u64) -> io::Result<()> {
        self.call(&Msg::Listen(ListenReq { service_id }))
    }

    /// Release a CM service ID.
    pub(crate) fn unlisten(&self, service_id: u64) {
        let _ = self.call(&Msg::Unlisten(ListenReq { service_id }));
    }
}

/// The daemon device for `addr`, if a daemon serves one (and the daemon is not turned off).
pub(crate) fn lookup(addr: std::net::IpAddr) -> Option<PathBuf> {
    proto::lookup(addr).map(|d| d.socket)
}
