//! `uroced`: one device shared by every process of a host (docs/daemon.md).
//!
//! The daemon plays the part of the kernel that a process cannot: it owns each device's
//! address and UDP port 4791, hands each client process a window of QP numbers and a CM ID
//! prefix, forwards every received datagram to the process that owns its destination QP
//! (QP 1's MADs by service ID for REQ/SIDR_REQ, by ID prefix otherwise), and reclaims a
//! client's share when its connection closes. Each client runs its own control plane and
//! engine for its own objects (`crate::daemon_client`), so the fast path stays in the
//! client's process; the daemon's own CM answers what no client claims (a REQ for a service
//! nobody listens on gets REJ 8, as Linux's CM sends).
//!
//! One thread, one epoll set: the UDP sockets, the device sockets, the client connections
//! and a signalfd for SIGINT/SIGTERM. It sleeps in `epoll_wait` when idle.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use abi::daemon::{self as proto, AttachResp, DataHdr, DeviceInfo, ErrorBody, Msg};
use transport::wire::cm::{CmMadRepr, CmMsg};
use transport::wire::mad::MAD_LEN;
use transport::wire::ROCE_V2_PORT;
use transport::Time;
use zerocopy::IntoBytes;

use crate::config::DeviceConfig;
use crate::sys::{self, Epoll, MsgBatch, EPOLLIN};

/// QP numbers per client window; window 0 (QP 0, QP 1, …) is the daemon's.
pub const WINDOW_BITS: u32 = 14;
/// Client slots per device (1 ..= 1023): the top 10 bits of a CM ID name the slot.
pub const SLOTS: u32 = 1 << (24 - WINDOW_BITS);
const PREFIX_BITS: u32 = 32 - 22;

/// A raw client of a daemon device: what a device of another process holds
/// (`crate::daemon_client`), for tests and tools that talk to the daemon directly.
#[derive(Debug)]
pub struct RawClient {
    link: crate::daemon_client::DaemonLink,
    /// The device's UDP socket, as the daemon handed it over.
    pub udp: OwnedFd,
    /// The wake-up eventfd handed to the daemon.
    pub wake: OwnedFd,
}

impl RawClient {
    /// Attach to the device socket `path` as a new client.
    pub fn attach(path: &Path) -> io::Result<RawClient> {
        let wake = sys::eventfd()?;
        let (link, udp) = crate::daemon_client::DaemonLink::attach(path, wake.as_fd())?;
        Ok(RawClient { link, udp, wake })
    }

    /// Ask for a packet ring to the client in `slot`.
    pub fn peer(&self, slot: u32) -> io::Result<()> {
        self.link.peer(slot).map(|_| ())
    }

    /// What the daemon granted.
    pub fn grant(&self) -> AttachResp {
        self.link.grant
    }

    /// Claim a CM service ID.
    pub fn listen(&self, service_id: u64) -> io::Result<()> {
        self.link.listen(service_id)
    }

    /// Release a CM service ID (the daemon answers even if this client does not hold it).
    pub fn try_unlisten(&self, service_id: u64) {
        self.link.unlisten(service_id)
    }
}

/// How the daemon is run.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// The devices to serve.
    pub devices: Vec<DeviceConfig>,
    /// Where the device sockets go.
    pub dir: PathBuf,
    /// Mode of each device socket (e.g. 0o660).
    pub mode: u32,
    /// Group of each device socket (a gid), if it should be changed.
    pub group: Option<u32>,
}

/// Counters of one device, as `STATS` reports them.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    rcvd_datagrams: u64,
    forwarded: u64,
    forward_drops: u64,
    unknown_qpn: u64,
    bad_packets: u64,
    mads_routed: u64,
    mads_answered: u64,
    clients_attached: u64,
    clients_reclaimed: u64,
    listens_reclaimed: u64,
    rings: u64,
}

struct Client {
    dev: usize,
    ctl: UnixStream,
    inbuf: Vec<u8>,
    /// Attached: the data socket, pid and slot.
    attached: Option<Attached>,
}

struct Attached {
    data: OwnedFd,
    /// The client engine's wake-up eventfd (given to its ring producers).
    wake: OwnedFd,
    pid: u32,
    slot: u32,
    listens: HashSet<u64>,
    since: Instant,
}

struct Dev {
    cfg: DeviceConfig,
    sock: UdpSocket,
    listener: UnixListener,
    path: PathBuf,
    devfile: PathBuf,
    /// slot → client token.
    slots: HashMap<u32, u64>,
    next_slot: u32,
    /// service ID → client token.
    listens: HashMap<u64, u64>,
    gsi: crate::gsi::Gsi,
    c: Counters,
}

const TOK_SIGNAL: u64 = 1;
const TOK_UDP: u64 = 1 << 40;
const TOK_LISTEN: u64 = 2 << 40;
const TOK_CLIENT: u64 = 3 << 40;

fn now(epoch: Instant) -> Time {
    Time(u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

fn log(msg: &str) {
    let _ = writeln!(io::stderr(), "uroced: {msg}");
}

/// Bind the device socket at `path`, refusing if a live daemon answers there.
fn bind_node(path: &Path) -> io::Result<UnixListener> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{} is served by a running daemon", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    UnixListener::bind(path)
}

fn chown_group(path: &Path, gid: u32) -> io::Result<()> {
    std::os::unix::fs::chown(path, None, Some(gid))
}

impl Dev {
    fn info(&self) -> DeviceInfo {
        DeviceInfo::new(
            &self.cfg.name,
            self.cfg.addr,
            self.cfg.active_mtu,
            self.cfg.ecn,
            std::process::id(),
        )
    }

    fn stats(&self, clients: &HashMap<u64, Client>) -> String {
        let c = &self.c;
        let mut s = format!(
            "device {}\naddr {}\nclients {}\nclients_attached {}\nclients_reclaimed {}\n\
             listens {}\nlistens_reclaimed {}\nrcvd_datagrams {}\nforwarded {}\n\
             forward_drops {}\nunknown_qpn {}\nbad_packets {}\nmads_routed {}\nmads_answered {}\n\
             peer_rings_made {}\n",
            self.cfg.name,
            self.cfg.addr,
            self.slots.len(),
            c.clients_attached,
            c.clients_reclaimed,
            self.listens.len(),
            c.listens_reclaimed,
            c.rcvd_datagrams,
            c.forwarded,
            c.forward_drops,
            c.unknown_qpn,
            c.bad_packets,
            c.mads_routed,
            c.mads_answered,
            c.rings
        );
        let mut attached: Vec<&Attached> = self
            .slots
            .values()
            .filter_map(|t| clients.get(t)?.attached.as_ref())
            .collect();
        attached.sort_by_key(|a| a.slot);
        for a in attached {
            s.push_str(&format!(
                "client pid {} slot {} qpns {:#x}-{:#x} listens {} up_s {}\n",
                a.pid,
                a.slot,
                a.slot << WINDOW_BITS,
                ((a.slot + 1) << WINDOW_BITS) - 1,
                a.listens.len(),
                a.since.elapsed().as_secs()
            ));
        }
        s
    }

    /// A free slot, in rotation (a slot a client just left is reused last).
    fn take_slot(&mut self, token: u64) -> Option<u32> {
        for k in 0..SLOTS {
            let slot = 1 + (self.next_slot + k) % (SLOTS - 1);
            if let std::collections::hash_map::Entry::Vacant(e) = self.slots.entry(slot) {
                e.insert(token);
                self.next_slot = slot % (SLOTS - 1);
                return Some(slot);
            }
        }
        None
    }
}

/// Run the daemon until SIGINT/SIGTERM (which this thread blocks and reads from a signalfd).
pub fn run(cfg: DaemonConfig) -> io::Result<()> {
    run_with_signals(cfg, signals()?)
}

/// Block SIGINT and SIGTERM in this thread (and the threads it starts afterwards) and return
/// a signalfd that reports them, for [`run_with_signals`].
pub fn signals() -> io::Result<OwnedFd> {
    sys::signal_fd()
}

/// [`run`] with the signalfd of [`signals`] (so the caller can start threads in between
/// that never take the signals themselves).
pub fn run_with_signals(cfg: DaemonConfig, sig: OwnedFd) -> io::Result<()> {
    serve_devices(cfg, Some(sig), &AtomicBool::new(false))
}

/// Run the daemon in this thread until `stop` is set (checked at least every 100 ms): a
/// daemon inside a test process.
pub fn run_until(cfg: DaemonConfig, stop: &AtomicBool) -> io::Result<()> {
    serve_devices(cfg, None, stop)
}

fn serve_devices(cfg: DaemonConfig, sig: Option<OwnedFd>, stop: &AtomicBool) -> io::Result<()> {
    if cfg.devices.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no devices to serve",
        ));
    }
    std::fs::create_dir_all(&cfg.dir)?;
    let dir_mode = if cfg.mode & 0o077 != 0 { 0o755 } else { 0o700 };
    let _ = std::fs::set_permissions(&cfg.dir, std::fs::Permissions::from_mode(dir_mode));
    let epoll = Epoll::new()?;
    if let Some(sig) = &sig {
        epoll.add(sig.as_raw_fd(), TOK_SIGNAL, EPOLLIN)?;
    }
    let epoch = Instant::now();
    let mut devs: Vec<Dev> = Vec::new();
    for (i, dc) in cfg.devices.iter().enumerate() {
        dc.validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let sock = sys::bind_roce_udp(SocketAddr::new(dc.addr, ROCE_V2_PORT)).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{}: cannot bind {}:{ROCE_V2_PORT}: {e}", dc.name, dc.addr),
            )
        })?;
        sys::set_ecn(&sock, dc.ecn)?;
        let path = cfg.dir.join(format!("uverbs{i}"));
        let devfile = cfg.dir.join(format!("uverbs{i}.dev"));
        let listener = bind_node(&path)?;
        listener.set_nonblocking(true)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(cfg.mode))?;
        if let Some(g) = cfg.group {
            chown_group(&path, g)?;
        }
        let df = proto::DevFile {
            name: dc.name.clone(),
            addr: dc.addr,
            mtu: dc.active_mtu,
        };
        std::fs::write(&devfile, df.render())?;
        let _ = std::fs::set_permissions(&devfile, std::fs::Permissions::from_mode(0o644));
        let i64 = i as u64;
        epoll.add(sock.as_raw_fd(), TOK_UDP | i64, EPOLLIN)?;
        epoll.add(listener.as_raw_fd(), TOK_LISTEN | i64, EPOLLIN)?;
        log(&format!(
            "serving {} on {} (UDP {}:{ROCE_V2_PORT}, MTU {}, ECN {})",
            dc.name,
            path.display(),
            dc.addr,
            dc.active_mtu,
            if dc.ecn { "on" } else { "off" }
        ));
        devs.push(Dev {
            gsi: crate::gsi::Gsi::new(abi::provider::node_guid(dc.addr), crate::gsi::id_seed()),
            cfg: dc.clone(),
            sock,
            listener,
            path,
            devfile,
            slots: HashMap::new(),
            next_slot: 0,
            listens: HashMap::new(),
            c: Counters::default(),
        });
    }
    let mut d = Daemon {
        reply_fds: Vec::new(),
        rings: HashMap::new(),
        epoll,
        epoch,
        devs,
        clients: HashMap::new(),
        next_token: 0,
        rx: MsgBatch::new(32),
        rx_bufs: (0..32).map(|_| vec![0u8; 1 << 16]).collect(),
    };
    let r = d.serve(sig.as_ref().map(|s| s.as_fd()), stop);
    for dev in &d.devs {
        let _ = std::fs::remove_file(&dev.path);
        let _ = std::fs::remove_file(&dev.devfile);
    }
    log("stopped");
    r
}

struct Daemon {
    /// Descriptors to send with the next reply.
    reply_fds: Vec<OwnedFd>,
    /// Packet rings between clients: (producer, consumer) → memfd.
    rings: HashMap<(u64, u64), OwnedFd>,
    epoll: Epoll,
    epoch: Instant,
    devs: Vec<Dev>,
    clients: HashMap<u64, Client>,
    next_token: u64,
    rx: MsgBatch,
    rx_bufs: Vec<Vec<u8>>,
}

impl Daemon {
    fn serve(&mut self, sig: Option<BorrowedFd<'_>>, stop: &AtomicBool) -> io::Result<()> {
        let mut events = Vec::new();
        loop {
            if stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            let mut t = self.next_deadline_ms();
            if sig.is_none() && !(0..=100).contains(&t) {
                t = 100;
            }
            self.epoll.wait(&mut events, t)?;
            for &(tok, _) in events.clone().iter() {
                match tok {
                    TOK_SIGNAL => {
                        if let Some(sig) = sig {
                            sys::drain_fd(sig);
                        }
                        return Ok(());
                    }
                    t if t & !0xffff_ffff == TOK_UDP => self.on_udp((t & 0xffff_ffff) as usize),
                    t if t & !0xffff_ffff == TOK_LISTEN => {
                        self.on_accept((t & 0xffff_ffff) as usize)
                    }
                    t if t & !0xffff_ffff == TOK_CLIENT => self.on_client(t),
                    _ => {}
                }
            }
            let n = now(self.epoch);
            for i in 0..self.devs.len() {
                let due = self.devs[i].gsi.cm.poll_timeout().is_some_and(|d| d <= n);
                if due {
                    self.devs[i].gsi.cm.handle_timeout(n);
                }
                self.flush_gsi(i);
            }
        }
    }

    fn next_deadline_ms(&self) -> i32 {
        let n = now(self.epoch);
        self.devs
            .iter()
            .filter_map(|d| d.gsi.cm.poll_timeout())
            .map(|t| t.nanos_since(n) / 1_000_000 + 1)
            .min()
            .map_or(-1, |ms| i32::try_from(ms).unwrap_or(i32::MAX))
    }

    fn on_accept(&mut self, i: usize) {
        let Some(dev) = self.devs.get(i) else {
            return;
        };
        while let Ok((s, _)) = dev.listener.accept() {
            if s.set_nonblocking(true).is_err() {
                continue;
            }
            self.next_token += 1;
            let tok = TOK_CLIENT | self.next_token;
            if self.epoll.add(s.as_raw_fd(), tok, EPOLLIN).is_err() {
                continue;
            }
            self.clients.insert(
                tok,
                Client {
                    dev: i,
                    ctl: s,
                    inbuf: Vec::new(),
                    attached: None,
                },
            );
        }
    }

    fn on_client(&mut self, tok: u64) {
        let mut closed = false;
        let mut fds: Vec<OwnedFd> = Vec::new();
        if let Some(c) = self.clients.get_mut(&tok) {
            let mut buf = [0u8; 4096];
            loop {
                match sys::recv_with_fds(c.ctl.as_fd(), &mut buf) {
                    Ok((0, _)) => {
                        closed = true;
                        break;
                    }
                    Ok((n, fd)) => {
                        c.inbuf.extend_from_slice(&buf[..n]);
                        fds.extend(fd);
                        if c.inbuf.len() > 1 << 16 {
                            closed = true; // a client that floods us is dropped
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        closed = true;
                        break;
                    }
                }
            }
        }
        let mut fds = fds.into_iter();
        // Whole messages.
        loop {
            let Some(c) = self.clients.get_mut(&tok) else {
                return;
            };
            if c.inbuf.len() < 8 {
                break;
            }
            let len = u32::from_le_bytes([c.inbuf[4], c.inbuf[5], c.inbuf[6], c.inbuf[7]]);
            if len > proto::MAX_BODY {
                closed = true;
                break;
            }
            let total = 8 + len as usize;
            if c.inbuf.len() < total {
                break;
            }
            let msg: Vec<u8> = c.inbuf.drain(..total).collect();
            let reply = match proto::decode(&msg) {
                Ok(m) => self.handle(tok, m, &mut fds),
                Err(e) => Some(Msg::Error(ErrorBody::new(
                    libc::EINVAL,
                    &format!("malformed request: {e:?}"),
                ))),
            };
            let Some(reply) = reply else { continue };
            let Some(c) = self.clients.get_mut(&tok) else {
                return;
            };
            let bytes = proto::encode(&reply);
            let pass = std::mem::take(&mut self.reply_fds);
            let sent = if pass.is_empty() {
                send_blocking(&c.ctl, &bytes)
            } else {
                let b: Vec<BorrowedFd<'_>> = pass.iter().map(|f| f.as_fd()).collect();
                send_blocking_with_fds(&c.ctl, &bytes, &b)
            };
            if sent.is_err() {
                closed = true;
                break;
            }
        }
        if closed {
            self.drop_client(tok);
        }
    }

    fn handle(&mut self, tok: u64, m: Msg, fds: &mut impl Iterator<Item = OwnedFd>) -> Option<Msg> {
        let dev_i = self.clients.get(&tok)?.dev;
        let err = |e: i32, s: &str| Some(Msg::Error(ErrorBody::new(e, s)));
        match m {
            Msg::Query => Some(Msg::Info(self.devs[dev_i].info())),
            Msg::Stats => Some(Msg::StatsText(self.devs[dev_i].stats(&self.clients))),
            Msg::Attach(a) => {
                if self.clients.get(&tok)?.attached.is_some() {
                    return err(libc::EBUSY, "this connection is attached already");
                }
                let (Some(data), Some(wake)) = (fds.next(), fds.next()) else {
                    return err(libc::EINVAL, "ATTACH without its data socket and eventfd");
                };
                sys::set_bufs(data.as_fd(), 4 << 20);
                let dev = &mut self.devs[dev_i];
                let Some(slot) = dev.take_slot(tok) else {
                    return err(libc::EUSERS, "every client slot of the device is taken");
                };
                dev.c.clients_attached += 1;
                let grant = AttachResp {
                    info: dev.info(),
                    slot,
                    qpn_base: slot << WINDOW_BITS,
                    qpn_count: 1 << WINDOW_BITS,
                    id_prefix_bits: PREFIX_BITS,
                    id_prefix: slot,
                    reserved: 0,
                };
                match dev.sock.try_clone() {
                    Ok(u) => self.reply_fds = vec![OwnedFd::from(u)],
                    Err(e) => {
                        dev.slots.remove(&slot);
                        return err(libc::EMFILE, &format!("cannot pass the UDP socket: {e}"));
                    }
                }
                log(&format!(
                    "{}: pid {} attached (slot {slot}, QPNs {:#x}-{:#x})",
                    dev.cfg.name,
                    a.pid,
                    grant.qpn_base,
                    grant.qpn_base + grant.qpn_count - 1
                ));
                let c = self.clients.get_mut(&tok)?;
                c.attached = Some(Attached {
                    data,
                    wake,
                    pid: a.pid,
                    slot,
                    listens: HashSet::new(),
                    since: Instant::now(),
                });
                Some(Msg::Attached(grant))
            }
            Msg::Peer(p) => self.peer(tok, dev_i, p.slot),
            Msg::Listen(l) => {
                if self.clients.get(&tok)?.attached.is_none() {
                    return err(libc::EINVAL, "LISTEN before ATTACH");
                }
                let dev = &mut self.devs[dev_i];
                match dev.listens.get(&l.service_id) {
                    Some(&o) if o != tok => {
                        return err(libc::EADDRINUSE, "another process listens on it");
                    }
                    _ => {}
                }
                dev.listens.insert(l.service_id, tok);
                let a = self.clients.get_mut(&tok)?.attached.as_mut()?;
                a.listens.insert(l.service_id);
                Some(Msg::Done(proto::op::LISTEN))
            }
            Msg::Unlisten(l) => {
                let dev = &mut self.devs[dev_i];
                if dev.listens.get(&l.service_id) == Some(&tok) {
                    dev.listens.remove(&l.service_id);
                }
                if let Some(a) = self.clients.get_mut(&tok)?.attached.as_mut() {
                    a.listens.remove(&l.service_id);
                }
                Some(Msg::Done(proto::op::UNLISTEN))
            }
            _ => err(libc::EINVAL, "not a request"),
        }
    }

    /// `PEER`: the ring from client `tok` to the client in `slot`, made on first use and
    /// handed to that client on its data socket; the reply carries the ring and that
    /// client's wake-up eventfd.
    fn peer(&mut self, tok: u64, dev_i: usize, slot: u32) -> Option<Msg> {
        let err = |e: i32, s: &str| Some(Msg::Error(ErrorBody::new(e, s)));
        let me = self.clients.get(&tok)?.attached.as_ref()?.slot;
        let Some(&to) = self.devs[dev_i].slots.get(&slot) else {
            return err(libc::ENOENT, "no client holds that slot");
        };
        if to == tok {
            return err(
                libc::EINVAL,
                "a ring to oneself (use the internal loopback)",
            );
        }
        let consumer = self.clients.get(&to)?.attached.as_ref()?;
        if let std::collections::hash_map::Entry::Vacant(slot_entry) = self.rings.entry((tok, to)) {
            let ring = match crate::peer_ring::create() {
                Ok(r) => r,
                Err(e) => return err(libc::ENOMEM, &format!("peer ring: {e}")),
            };
            let hdr = DataHdr {
                flags: DataHdr::RING,
                first_index: u16::try_from(me).unwrap_or(0),
                ..DataHdr::default()
            };
            if let Err(e) = sys::send_with_fds(
                consumer.data.as_fd(),
                hdr.as_bytes(),
                &[ring.as_fd()],
                libc::MSG_DONTWAIT,
            ) {
                return err(
                    libc::EAGAIN,
                    &format!("cannot hand the ring to its consumer: {e}"),
                );
            }
            slot_entry.insert(ring);
            self.devs[dev_i].c.rings += 1;
        }
        let ring = self.rings.get(&(tok, to))?;
        match (ring.try_clone(), consumer.wake.try_clone()) {
            (Ok(r), Ok(w)) => self.reply_fds = vec![r, w],
            _ => return err(libc::EMFILE, "cannot pass the ring"),
        }
        Some(Msg::Done(proto::op::PEER))
    }

    fn drop_client(&mut self, tok: u64) {
        self.rings.retain(|(a, b), _| *a != tok && *b != tok);
        let Some(c) = self.clients.remove(&tok) else {
            return;
        };
        let _ = self.epoll.delete(c.ctl.as_raw_fd());
        let Some(a) = c.attached else {
            return;
        };
        let dev = &mut self.devs[c.dev];
        dev.slots.remove(&a.slot);
        let n = a.listens.len();
        dev.listens.retain(|_, t| *t != tok);
        dev.c.clients_reclaimed += 1;
        dev.c.listens_reclaimed += n as u64;
        log(&format!(
            "{}: pid {} detached; reclaimed slot {} (QPNs {:#x}-{:#x}) and {n} listen(s)",
            dev.cfg.name,
            a.pid,
            a.slot,
            a.slot << WINDOW_BITS,
            ((a.slot + 1) << WINDOW_BITS) - 1
        ));
    }

    fn on_udp(&mut self, i: usize) {
        for _ in 0..8 {
            let Some(dev) = self.devs.get(i) else {
                return;
            };
            let n = self
                .rx
                .recv(dev.sock.as_fd(), &mut self.rx_bufs)
                .unwrap_or(0);
            for k in 0..n {
                let Some(m) = self.rx.received(k) else {
                    continue;
                };
                let Some(buf) = self.rx_bufs.get(k) else {
                    continue;
                };
                let data = &buf[..m.len.min(buf.len())];
                if m.truncated {
                    self.devs[i].c.bad_packets += 1;
                    continue;
                }
                route(&mut self.devs[i], &self.clients, data, &m, now(self.epoch));
            }
            if n < self.rx_bufs.len() {
                break;
            }
        }
        self.flush_gsi(i);
    }

    /// Send what the daemon's own CM queued (answers to MADs no client claims).
    fn flush_gsi(&mut self, i: usize) {
        let Some(dev) = self.devs.get_mut(i) else {
            return;
        };
        let mut buf = vec![0u8; 512];
        while let Some((to, len)) = dev.gsi.next_packet(&mut buf) {
            let dest = crate::state::Dest::roce(to);
            if crate::datapath::seal_datagram(dev.cfg.addr, &dest, &mut buf, len).is_ok() {
                let _ = dev.sock.send_to(
                    &buf[..len + transport::wire::icrc::ICRC_LEN],
                    SocketAddr::new(to, ROCE_V2_PORT),
                );
                dev.c.mads_answered += 1;
            }
        }
    }
}

fn send_blocking(s: &UnixStream, bytes: &[u8]) -> io::Result<()> {
    s.set_nonblocking(false)?;
    let r = (&mut &*s).write_all(bytes);
    s.set_nonblocking(true)?;
    r
}

fn send_blocking_with_fds(s: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    s.set_nonblocking(false)?;
    let r = sys::send_with_fds(s.as_fd(), bytes, fds, 0);
    s.set_nonblocking(true)?;
    r
}

/// The destination QP of a RoCEv2 UDP payload (BTH bytes 5–7), if it has a BTH.
fn dest_qpn(d: &[u8]) -> Option<u32> {
    (d.len() >= 8).then(|| crate::datapath::bth_dest_qpn(d))
}

/// Where a received datagram goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// To the client with this token (its QP-number window, its service ID, its ID prefix).
    Client(u64),
    /// No client owns its QP number.
    Unowned,
    /// A QP 1 MAD no client claims: the daemon's own CM answers it.
    DaemonCm,
    /// Not a RoCEv2 packet with a BTH.
    Bad,
}

/// Where `d` (a RoCEv2 UDP payload) goes, given the service IDs listened on
/// (`service ID → client`) and the attached clients (`slot → client`): QP 1 MADs by
/// service ID (REQ, SIDR_REQ) or by the ID prefix of the Comm ID / Request ID they answer,
/// other packets by the window of their destination QP. Never panics (fuzzed by the
/// `daemon_messages` target).
pub fn classify(d: &[u8], listens: &HashMap<u64, u64>, slots: &HashMap<u32, u64>) -> Route {
    match dest_qpn(d) {
        None => Route::Bad,
        Some(1) => match mad_owner(listens, slots, d) {
            Some(t) => Route::Client(t),
            None => Route::DaemonCm,
        },
        Some(q) => slots
            .get(&(q >> WINDOW_BITS))
            .map_or(Route::Unowned, |&t| Route::Client(t)),
    }
}

fn mad_owner(listens: &HashMap<u64, u64>, slots: &HashMap<u32, u64>, d: &[u8]) -> Option<u64> {
    let (pkt, _) = transport::wire::roce::parse_datagram(d).ok()?;
    let mad = pkt.payload.get(..MAD_LEN)?;
    let m = CmMadRepr::parse(mad).ok()?;
    let by_id = |id: u32| slots.get(&(id >> (32 - PREFIX_BITS))).copied();
    match &m.msg {
        CmMsg::Req(r) => listens.get(&r.service_id.0).copied(),
        CmMsg::SidrReq(r) => listens.get(&r.service_id.0).copied(),
        CmMsg::SidrRep(r) => by_id(r.request_id),
        CmMsg::Rep(r) => by_id(r.remote_comm_id),
        CmMsg::Rtu(r) => by_id(r.remote_comm_id),
        CmMsg::Rej(r) => by_id(r.remote_comm_id),
        CmMsg::Mra(r) => by_id(r.remote_comm_id),
        CmMsg::Dreq(r) => by_id(r.remote_comm_id),
        CmMsg::Drep(r) => by_id(r.remote_comm_id),
    }
}

/// Forward one received message (maybe several GRO-coalesced datagrams) to the clients
/// owning its destination QPs; QP 1 MADs nobody claims go to the daemon's CM.
fn route(dev: &mut Dev, clients: &HashMap<u64, Client>, data: &[u8], m: &sys::Received, now: Time) {
    let seg = m.segment.unwrap_or(data.len()).max(1);
    let segs: Vec<&[u8]> = data.chunks(seg).collect();
    dev.c.rcvd_datagrams += segs.len() as u64;
    let mut j = 0;
    while j < segs.len() {
        let r = classify(segs[j], &dev.listens, &dev.slots);
        let owner = match r {
            Route::Bad => {
                dev.c.bad_packets += 1;
                j += 1;
                continue;
            }
            Route::DaemonCm => {
                // The daemon's CM: REJ for a REQ nobody listens for, etc.
                match transport::wire::roce::parse_datagram(segs[j]) {
                    Ok((pkt, _)) => dev.gsi.receive(now, &pkt, m.from.ip()),
                    Err(_) => dev.c.bad_packets += 1,
                }
                j += 1;
                continue;
            }
            Route::Unowned => None,
            Route::Client(t) => Some(t),
        };
        // A run of datagrams for the same client (QP 1 MADs go one by one) is one message.
        let mut end = j + 1;
        if dest_qpn(segs[j]) == Some(1) {
            dev.c.mads_routed += 1;
        } else {
            while end < segs.len()
                && dest_qpn(segs[end]).is_some_and(|q| q != 1)
                && classify(segs[end], &dev.listens, &dev.slots) == r
            {
                end += 1;
            }
        }
        let Some(a) = owner.and_then(|t| clients.get(&t)?.attached.as_ref()) else {
            dev.c.unknown_qpn += (end - j) as u64;
            j = end;
            continue;
        };
        let run = &segs[j..end];
        let hdr = DataHdr {
            src: proto::gid_of(m.from.ip()),
            src_port: m.from.port(),
            tos: m.tos.unwrap_or(0),
            flags: if m.tos.is_some() {
                DataHdr::TOS_VALID
            } else {
                0
            },
            segment: if run.len() > 1 {
                u16::try_from(seg).unwrap_or(0)
            } else {
                0
            },
            first_index: u16::try_from(j).unwrap_or(0),
        };
        let start = j * seg;
        let stop = (start + run.iter().map(|s| s.len()).sum::<usize>()).min(data.len());
        match sys::send_two(a.data.as_fd(), hdr.as_bytes(), &data[start..stop]) {
            Ok(()) => dev.c.forwarded += (end - j) as u64,
            Err(_) => dev.c.forward_drops += (end - j) as u64,
        }
        j = end;
    }
}
