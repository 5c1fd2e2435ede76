//! The control-plane thread of a device: it serves every command connection of the device
//! (one per context) with epoll, reads one command at a time, has the device state execute
//! it, and writes exactly one reply (abi::cmd framing).
//!
//! Framing is the uverbs header's: legacy `in_words × 4` bytes in total, or the extended
//! form's 24 header bytes + `(in_words + provider_in_words) × 8`. Both are bounded by the
//! u16 counts (at most [`abi::cmd::MAX_REQUEST_BYTES`]). A header that cannot frame a
//! message (legacy `in_words` < 2) closes the connection. Closing a connection — or the
//! library dying — destroys everything the context owns before our end is closed, so a
//! library that waits for EOF knows its memory is no longer referenced.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use abi::cmd::{CmdHdr, ExCmdHdr, CMD_FLAG_EXTENDED};
use zerocopy::FromBytes;

use crate::device::{CommandIntake, Device};
use crate::dma::{self, AddressSpace};
use crate::state::CtxId;
use crate::sys::{self, Epoll, EPOLLHUP_ERR, EPOLLIN, EPOLLOUT};

/// Connections handed over by `open` and the eventfd that announces them.
#[derive(Debug)]
pub(crate) struct CtrlShared {
    pending: Mutex<Vec<UnixStream>>,
    notify: OwnedFd,
    epoll: Epoll,
}

impl CtrlShared {
    pub(crate) fn new() -> io::Result<CtrlShared> {
        let notify = sys::eventfd()?;
        let epoll = Epoll::new()?;
        epoll.add(notify.as_raw_fd(), 0, EPOLLIN)?;
        Ok(CtrlShared {
            pending: Mutex::new(Vec::new()),
            notify,
            epoll,
        })
    }
}

/// Start the control-plane thread of `dev`.
impl CommandIntake for CtrlShared {
    /// Give the control-plane thread a new connection (the device's end of a socketpair).
    fn add(&self, stream: UnixStream) {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(stream);
        sys::eventfd_signal(self.notify.as_fd());
    }
}

/// Start `dev`'s control-plane thread, which serves the connections `shared` takes.
pub(crate) fn start(dev: Arc<Device>, shared: Arc<CtrlShared>) -> io::Result<()> {
    std::thread::Builder::new()
        .name(format!("uroce-ctl-{}", dev.cfg.name))
        .spawn(move || run(&dev, &shared))
        .map(|_| ())
}

struct Conn {
    stream: UnixStream,
    ctx: CtxId,
    inbuf: Vec<u8>,
    have: usize,
    out: Vec<u8>,
    outpos: usize,
    /// EPOLLOUT is armed (a reply is stuck in a full socket buffer).
    out_armed: bool,
}

/// How much of a command the bytes received so far frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    /// At least this many bytes in total are needed.
    More(usize),
    /// The first command is this many bytes (all here).
    Complete(usize),
    /// The header cannot frame a message (legacy `in_words` < 2): close the connection.
    Unframeable,
}

impl Conn {
    fn need(&self) -> Need {
        match self.inbuf.get(..self.have) {
            Some(head) => need(head),
            None => Need::Unframeable,
        }
    }
}

/// Frame the first command of `head` (the bytes received so far) by its uverbs header.
pub(crate) fn need(head: &[u8]) -> Need {
    let Ok((hdr, rest)) = CmdHdr::read_from_prefix(head) else {
        return Need::More(CmdHdr::SIZE);
    };
    let total = if hdr.command & CMD_FLAG_EXTENDED != 0 {
        let Ok((ex, _)) = ExCmdHdr::read_from_prefix(rest) else {
            return Need::More(CmdHdr::SIZE + ExCmdHdr::SIZE);
        };
        CmdHdr::SIZE
            + ExCmdHdr::SIZE
            + (usize::from(hdr.in_words) + usize::from(ex.provider_in_words)) * 8
    } else {
        let total = usize::from(hdr.in_words) * 4;
        if total < CmdHdr::SIZE {
            return Need::Unframeable;
        }
        total
    };
    if head.len() < total {
        Need::More(total)
    } else {
        Need::Complete(total)
    }
}

enum Step {
    Keep,
    Close,
}

fn run(dev: &Device, shared: &CtrlShared) {
    let mut conns: HashMap<u64, Conn> = HashMap::new();
    let mut next_token: u64 = 1;
    let mut events = Vec::new();
    loop {
        if shared.epoll.wait(&mut events, -1).is_err() {
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        for &(token, ev) in events.iter() {
            if token == 0 {
                sys::eventfd_drain(shared.notify.as_fd());
                let new: Vec<UnixStream> = std::mem::take(
                    &mut *shared
                        .pending
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                );
                for stream in new {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let tok = next_token;
                    next_token += 1;
                    if shared
                        .epoll
                        .add(stream.as_raw_fd(), tok, EPOLLIN | EPOLLHUP_ERR)
                        .is_err()
                    {
                        continue;
                    }
                    let ctx = dev.next_ctx.fetch_add(1, Ordering::Relaxed);
                    conns.insert(
                        tok,
                        Conn {
                            stream,
                            ctx,
                            inbuf: Vec::new(),
                            have: 0,
                            out: Vec::new(),
                            outpos: 0,
                            out_armed: false,
                        },
                    );
                }
                continue;
            }
            let Some(conn) = conns.get_mut(&token) else {
                continue;
            };
            let step = serve(dev, shared, token, conn, ev);
            if let Step::Close = step {
                if let Some(conn) = conns.remove(&token) {
                    let _ = shared.epoll.delete(conn.stream.as_raw_fd());
                    dev.lock_cp().destroy_context(conn.ctx);
                    if let Some(t) = dev.tracer() {
                        t.close(&dev.cfg.name, conn.ctx);
                    }
                    dev.engine.kick();
                    drop(conn);
                }
            }
        }
    }
}

fn serve(dev: &Device, shared: &CtrlShared, token: u64, conn: &mut Conn, ev: u32) -> Step {
    if ev & EPOLLOUT != 0 || conn.outpos < conn.out.len() {
        match flush(shared, token, conn) {
            Ok(true) => {}
            Ok(false) => return Step::Keep,
            Err(_) => return Step::Close,
        }
    }
    loop {
        // One outstanding reply at a time: read the next command only once it is out.
        if conn.outpos < conn.out.len() {
            return Step::Keep;
        }
        let target = match conn.need() {
            Need::Unframeable => return Step::Close,
            Need::Complete(total) => {
                let started = dev.tracer().map(|_| std::time::Instant::now());
                let kick = {
                    let bytes = conn.inbuf.get(..total).unwrap_or(&[]);
                    // Read the mappings a range check needs before taking the lock the
                    // engine needs for every pass (a failed read leaves the check to read
                    // them itself, and fail the same way). Decoding outside bytes: as
                    // below, a bug must not cost the control plane.
                    let checks = dev.space == AddressSpace::Process
                        && std::panic::catch_unwind(|| crate::cmds::checks_mappings(bytes))
                            .unwrap_or(false);
                    let maps = checks.then(dma::Maps::read).and_then(Result::ok);
                    let mut st = dev.lock_cp();
                    st.maps = maps;
                    let (ctx, out) = (conn.ctx, &mut conn.out);
                    // A bug must cost one command (EIO), not the device's control plane.
                    let kick = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        st.execute(ctx, bytes, out)
                    }))
                    .unwrap_or_else(|_| {
                        st.res.counters.engine_panics += 1;
                        let word = bytes
                            .get(..4)
                            .and_then(|b| b.try_into().ok())
                            .map_or(0, u32::from_ne_bytes);
                        abi::cmd::encode_refusal(
                            word,
                            abi::Errno::EIO,
                            abi::Rule::INTERNAL,
                            "the control plane panicked executing this command",
                            out,
                        );
                        false
                    });
                    st.maps = None;
                    kick
                };
                if let Some(t) = dev.tracer() {
                    t.command(
                        &dev.cfg.name,
                        conn.ctx,
                        conn.inbuf.get(..total).unwrap_or(&[]),
                        &conn.out,
                        started.map(|t0| t0.elapsed()).unwrap_or_default(),
                    );
                }
                if kick {
                    dev.engine.kick();
                    flush_last_word(dev);
                }
                conn.outpos = 0;
                conn.have = 0;
                match flush(shared, token, conn) {
                    Ok(_) => continue,
                    Err(_) => return Step::Close,
                }
            }
            Need::More(t) => t,
        };
        if conn.inbuf.len() < target {
            conn.inbuf.resize(target, 0);
        }
        let Some(dst) = conn.inbuf.get_mut(conn.have..target) else {
            return Step::Close;
        };
        match conn.stream.read(dst) {
            Ok(0) => return Step::Close,
            Ok(n) => conn.have += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Keep,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Step::Close,
        }
    }
}

/// Write what is left of the reply; `Ok(true)` once all of it is out.
fn flush(shared: &CtrlShared, token: u64, conn: &mut Conn) -> io::Result<bool> {
    while conn.outpos < conn.out.len() {
        let rest = conn.out.get(conn.outpos..).unwrap_or(&[]);
        match conn.stream.write(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => conn.outpos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if !conn.out_armed {
                    shared.epoll.modify(
                        conn.stream.as_raw_fd(),
                        token,
                        EPOLLIN | EPOLLOUT | EPOLLHUP_ERR,
                    )?;
                    conn.out_armed = true;
                }
                return Ok(false);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    conn.out.clear();
    conn.outpos = 0;
    if conn.out_armed {
        shared
            .epoll
            .modify(conn.stream.as_raw_fd(), token, EPOLLIN | EPOLLHUP_ERR)?;
        conn.out_armed = false;
    }
    Ok(true)
}

/// After `rdma_reject` or `rdma_disconnect` a consumer may leave at once — a forked child
/// ends with `_exit`, which runs no exit handler (`crate::device`'s flush) — where the
/// kernel's CM would still send the REJ or DREQ. So the reply to those commands waits (at
/// most ~100 ms) until the engine has taken the MADs they queued.
fn flush_last_word(dev: &Device) {
    if !std::mem::take(&mut dev.lock_cp().gsi.flush_before_reply) {
        return;
    }
    for _ in 0..1000 {
        if !dev.lock_cp().gsi.cm.has_transmits() {
            return;
        }
        dev.engine.kick();
        dev.engine.drive();
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
}
