//! Packet capture of a device (`UROCE_CAPTURE`; docs/operations.md §1): every RoCEv2
//! packet a device sends or receives, written to a classic pcap file as Ethernet frames —
//! also the packets that never touch a socket (same-device loopback), for which the
//! Ethernet, IP and UDP headers are synthesized with the device's address and port 4791 and
//! the ICRC is computed as it would be on the wire (docs/wire.md §3).
//!
//! * **Where**: `UROCE_CAPTURE=PATH` (`%p` → process ID, `%d` → device name, `%%` → `%`);
//!   `UROCE_CAPTURE_SNAPLEN=N` keeps the first N bytes of each frame (default 65535).
//!   Devices of a process that resolve to one path share one writer; a packet between two
//!   of them is recorded once, when sent (as one capture point on a shared wire would see
//!   it). The file is opened for appending and its header written under an exclusive
//!   `flock` only if it is empty, so several processes may name one file: each appends
//!   whole batches of records with single `write`s (`uroce capture` empties the file first).
//! * **Cost**: the engine's hooks test an `Option` (`DevIo::tap`); with capture on, a
//!   packet costs one copy into a record and a non-blocking send to a bounded queue
//!   ([`QUEUE`] records) that a writer thread drains in batches. A full queue drops the
//!   record and counts it ([`Sink::dropped`]); the engine never waits for the file.
//! * **Exit**: an `atexit` hook waits (≤ 2 s) for the writer to drain the queue and reports
//!   dropped records on stderr. Each batch is written as soon as the queue runs dry, so a
//!   killed process loses at most what was still queued.
//! * **Headers**: Ethernet II with locally administered MACs made from the IP address
//!   (`02:00:` + the last four address bytes), IPv4 with DF, TTL 64, TOS 0 and the
//!   Identification the ICRC was computed for (what the socket sends:
//!   `engine::port::plan_sends`), or IPv6 with hop limit 64; UDP from and to 4791, or from
//!   the sender's port for received datagrams, with the checksum a Linux UDP socket
//!   computes (mandatory over IPv6). Received IPv4 packets show the Identification the
//!   receive check solved for (0 when the ICRC did not match).

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use capture::pcap::{self as pcapf, FileHeader, LinkType, PcapWriter, TsResolution};
use transport::wire::icrc::{self, ICRC_LEN};
use transport::wire::ip::{IpRepr, UdpRepr, UDP_HEADER_LEN};
use transport::wire::ROCE_V2_PORT;

use crate::sys;

/// The environment variable naming the capture file.
pub const ENV_PATH: &str = "UROCE_CAPTURE";
/// The environment variable giving the snap length.
pub const ENV_SNAPLEN: &str = "UROCE_CAPTURE_SNAPLEN";
/// Bytes of each frame kept unless [`ENV_SNAPLEN`] says otherwise.
pub const DEFAULT_SNAPLEN: u32 = 65535;
/// Records the queue to the writer thread holds before new ones are dropped (at most about
/// 35 MB of frames at a 4096-byte MTU).
pub const QUEUE: usize = 8192;
/// Bytes of records the writer gathers before a `write`.
const BATCH_BYTES: usize = 1 << 20;
const ETH_HEADER_LEN: usize = 14;

/// One record on its way to the file.
struct Rec {
    ts: Duration,
    orig_len: u32,
    frame: Vec<u8>,
}

/// One destination of records and the thread that writes them: a capture file of this
/// process (`UROCE_CAPTURE`), or a tool attached through the attach socket
/// (`crate::attach`, docs/operations.md §4).
pub(crate) struct Sink {
    /// The file, for a file sink (devices naming the same file share its sink).
    path: Option<PathBuf>,
    snaplen: u32,
    tx: SyncSender<Rec>,
    /// Records handed to the writer.
    queued: AtomicU64,
    /// Records the writer has dealt with (written, or lost to a write error).
    done: AtomicU64,
    /// Records dropped because the queue was full.
    pub(crate) dropped: AtomicU64,
    /// Records lost to write errors.
    write_errors: AtomicU64,
    /// Addresses of this process's devices writing here: their packets to each other are
    /// recorded when sent, not again when received.
    locals: RwLock<Vec<IpAddr>>,
    /// Also record packets received through a peer ring (`Tap::ring_received`).
    ring_rx: bool,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("path", &self.path)
            .field("snaplen", &self.snaplen)
            .finish()
    }
}

/// A device's capture point: the sinks its packets go to. The engine asks [`Tap::active`]
/// (one relaxed load) before it builds anything, so a device nobody captures pays one test
/// per packet.
#[derive(Debug)]
pub(crate) struct Tap {
    addr: IpAddr,
    on: AtomicBool,
    sinks: RwLock<Vec<Arc<Sink>>>,
    /// Records lost by sinks since removed from this device.
    lost_gone: AtomicU64,
}

static SINKS: Mutex<Vec<Arc<Sink>>> = Mutex::new(Vec::new());

/// `PATH` with `%p` (process ID), `%d` (device name) and `%%` replaced.
pub fn expand_path(pattern: &str, pid: u32, device: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&pid.to_string()),
            Some('d') => out.push_str(device),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// The capture point of device `name` on `addr`, writing to the file `UROCE_CAPTURE` names
/// if it names one. Problems (a file that cannot be opened, or holds something other than
/// an Ethernet pcap) are reported on stderr and the device runs without that file.
pub(crate) fn for_device(name: &str, addr: IpAddr, from_env: bool) -> Arc<Tap> {
    let tap = Arc::new(Tap {
        addr,
        on: AtomicBool::new(false),
        sinks: RwLock::new(Vec::new()),
        lost_gone: AtomicU64::new(0),
    });
    if let Some(sink) = from_env.then(|| env_sink(name)).flatten() {
        sink.locals
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(addr);
        tap.add(sink);
    }
    tap
}

fn env_sink(name: &str) -> Option<Arc<Sink>> {
    let pattern = std::env::var(ENV_PATH).ok().filter(|s| !s.is_empty())?;
    let snaplen = match std::env::var(ENV_SNAPLEN) {
        Err(_) => DEFAULT_SNAPLEN,
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(n) if n >= 1 => n.min(pcapf::MAX_RECORD_LEN),
            _ => {
                eprintln!(
                    "uroce: {ENV_SNAPLEN}={v:?} is not a positive number; using {DEFAULT_SNAPLEN}"
                );
                DEFAULT_SNAPLEN
            }
        },
    };
    let path = PathBuf::from(expand_path(&pattern, std::process::id(), name));
    let mut sinks = SINKS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(s) = sinks.iter().find(|s| s.path.as_ref() == Some(&path)) {
        return Some(s.clone());
    }
    match Sink::open(path.clone(), snaplen) {
        Ok(s) => {
            if sinks.is_empty() {
                sys::at_exit(drain_at_exit);
            }
            sinks.push(s.clone());
            Some(s)
        }
        Err(e) => {
            eprintln!(
                "uroce: {ENV_PATH}: cannot capture to {}: {e}; not capturing",
                path.display()
            );
            None
        }
    }
}

impl Sink {
    fn new(path: Option<PathBuf>, snaplen: u32, ring_rx: bool) -> (Arc<Sink>, Receiver<Rec>) {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let sink = Arc::new(Sink {
            path,
            snaplen,
            tx,
            queued: AtomicU64::new(0),
            done: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            locals: RwLock::new(Vec::new()),
            ring_rx,
        });
        (sink, rx)
    }

    fn open(path: PathBuf, snaplen: u32) -> io::Result<Arc<Sink>> {
        let mut file = File::options()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        sys::flock_exclusive(file.as_fd())?;
        let resolution = header(&mut file, snaplen);
        sys::funlock(file.as_fd());
        let resolution = resolution?;
        // A file sink records what arrives through peer rings too: with several processes
        // appending to one file, a packet between two of them is then there twice, sent
        // and received, as two merged host captures show it (docs/operations.md §1).
        let (sink, rx) = Sink::new(Some(path), snaplen, true);
        let s = sink.clone();
        std::thread::Builder::new()
            .name("uroce-capture".into())
            .spawn(move || writer(&s, file, rx, resolution))?;
        Ok(sink)
    }

    /// A sink for an attached tool: the caller (`crate::attach`) drains the receiver.
    pub(crate) fn stream(
        snaplen: u32,
        ring_rx: bool,
        locals: Vec<IpAddr>,
    ) -> (Arc<Sink>, StreamRecords) {
        let (sink, rx) = Sink::new(None, snaplen.clamp(1, pcapf::MAX_RECORD_LEN), ring_rx);
        *sink.locals.write().unwrap_or_else(PoisonError::into_inner) = locals;
        let w = PcapWriter::continuing(Vec::with_capacity(BATCH_BYTES), TsResolution::Nano);
        (sink, StreamRecords { rx, w })
    }

    /// Hand a frame (cut to the snap length) to the writer, or count it dropped.
    fn push(&self, mut frame: Vec<u8>) {
        let orig_len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        frame.truncate(self.snaplen as usize);
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        match self.tx.try_send(Rec {
            ts,
            orig_len,
            frame,
        }) {
            Ok(()) => {
                self.queued.fetch_add(1, Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Relaxed);
            }
        }
    }
}

/// The records queued for an attached tool, read out as batches of pcap records.
pub(crate) struct StreamRecords {
    rx: Receiver<Rec>,
    w: PcapWriter<Vec<u8>>,
}

impl StreamRecords {
    /// Wait up to `timeout` for records; then the pcap records (no file header) of
    /// everything queued, up to about 1 MiB. Empty on timeout.
    pub(crate) fn next_batch(&mut self, timeout: Duration) -> &[u8] {
        self.w.get_mut().clear();
        let mut next = self.rx.recv_timeout(timeout).ok();
        while let Some(r) = next.take() {
            let _ = self.w.write_frame_cut(r.ts, &r.frame, r.orig_len);
            if self.w.get_mut().len() < BATCH_BYTES {
                next = self.rx.try_recv().ok();
            }
        }
        self.w.get_mut()
    }
}

/// Under the file lock: write the header of an empty file, or check an existing one is an
/// Ethernet pcap (its timestamp resolution is then kept).
fn header(file: &mut File, snaplen: u32) -> io::Result<TsResolution> {
    let len = file.metadata()?.len();
    if len == 0 {
        file.write_all(&pcapf::file_header(
            LinkType::ETHERNET,
            TsResolution::Nano,
            snaplen,
        ))?;
        return Ok(TsResolution::Nano);
    }
    let mut head = [0u8; 24];
    file.seek(io::SeekFrom::Start(0))?;
    file.read_exact(&mut head)?;
    match FileHeader::parse(&head) {
        Ok(h) if h.link_type == LinkType::ETHERNET && h.endian == pcapf::Endian::Little => {
            Ok(h.resolution)
        }
        Ok(_) => Err(io::Error::other(
            "it is a pcap file of another link type or byte order (remove it, or name another file)",
        )),
        Err(e) => Err(io::Error::other(format!(
            "it is not a pcap file ({e}); remove it, or name another file"
        ))),
    }
}

/// The writer thread, for the life of the process: gather what is queued into one buffer of
/// whole records, append it with one `write`, repeat.
fn writer(sink: &Sink, mut file: File, rx: Receiver<Rec>, resolution: TsResolution) {
    let mut w = PcapWriter::continuing(Vec::with_capacity(BATCH_BYTES), resolution);
    let mut warned = false;
    while let Ok(first) = rx.recv() {
        let mut n = 0u64;
        let mut next = Some(first);
        while let Some(r) = next.take() {
            // A record the pcap format cannot hold (never: frames are cut to the snaplen).
            let _ = w.write_frame_cut(r.ts, &r.frame, r.orig_len);
            n += 1;
            if w.get_mut().len() < BATCH_BYTES {
                next = rx.try_recv().ok();
            }
        }
        let buf = w.get_mut();
        if let Err(e) = file.write_all(buf) {
            sink.write_errors.fetch_add(n, Relaxed);
            if !warned {
                eprintln!("uroce: capture {}: {e}", sink.shown_path());
                warned = true;
            }
        }
        buf.clear();
        sink.done.fetch_add(n, Relaxed);
    }
}

/// At exit: let each writer drain its queue (≤ 2 s in all), then report losses.
extern "C" fn drain_at_exit() {
    let sinks: Vec<Arc<Sink>> = match SINKS.try_lock() {
        Ok(s) => s.clone(),
        Err(_) => return,
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    for s in &sinks {
        while s.done.load(Relaxed) < s.queued.load(Relaxed) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let lost = s.dropped.load(Relaxed)
            + s.write_errors.load(Relaxed)
            + s.queued.load(Relaxed).saturating_sub(s.done.load(Relaxed));
        if lost > 0 {
            eprintln!(
                "uroce: capture {}: {lost} packets not recorded ({} with the queue full, {} write errors)",
                s.shown_path(),
                s.dropped.load(Relaxed),
                s.write_errors.load(Relaxed)
            );
        }
    }
}

/// A locally administered MAC for `ip`: `02:00:` and the last four bytes of the address.
fn mac_of(ip: IpAddr) -> [u8; 6] {
    let tail: [u8; 4] = match ip {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => {
            let o = a.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    [0x02, 0x00, tail[0], tail[1], tail[2], tail[3]]
}

/// The IP header a device's socket sends from `src` to `dst` (IPv4: `ident`, and DF as
/// a device's socket sets it).
fn ip_repr(src: IpAddr, dst: IpAddr, ident: u16, dont_frag: bool) -> Option<IpRepr> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Some(IpRepr::V4 {
            src: s,
            dst: d,
            dscp_ecn: 0,
            ttl: 64,
            ident,
            dont_frag,
        }),
        (IpAddr::V6(s), IpAddr::V6(d)) => Some(IpRepr::V6 {
            src: s,
            dst: d,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        }),
        _ => None,
    }
}

/// An Ethernet frame around `udp_payload` (BTH .. ICRC); `fill` may complete the payload
/// (same-device packets whose data is still in the source MR) and `icrc_too` recomputes the
/// ICRC (same-device packets carry none). The UDP checksum is computed, as the device's
/// socket does when it sends (a received datagram's own checksum is not visible to a
/// socket: the kernel checked it). `None` if the headers cannot be built.
fn frame(
    ip: &IpRepr,
    src_port: u16,
    udp_payload: &[u8],
    fill: impl FnOnce(&mut [u8]) -> bool,
    icrc_too: bool,
) -> Option<Vec<u8>> {
    let ip_len = ip.header_len();
    let l4 = ETH_HEADER_LEN + ip_len;
    let at = l4 + UDP_HEADER_LEN;
    let mut f = vec![0u8; at + udp_payload.len()];
    let (src, dst, ethertype) = match ip {
        IpRepr::V4 { src, dst, .. } => (IpAddr::V4(*src), IpAddr::V4(*dst), 0x0800u16),
        IpRepr::V6 { src, dst, .. } => (IpAddr::V6(*src), IpAddr::V6(*dst), 0x86DD),
    };
    f.get_mut(0..6)?.copy_from_slice(&mac_of(dst));
    f.get_mut(6..12)?.copy_from_slice(&mac_of(src));
    f.get_mut(12..14)?.copy_from_slice(&ethertype.to_be_bytes());
    let udp = UdpRepr {
        src_port,
        dst_port: ROCE_V2_PORT,
        checksum: 0,
    };
    ip.emit(
        f.get_mut(ETH_HEADER_LEN..l4)?,
        UDP_HEADER_LEN + udp_payload.len(),
    )
    .ok()?;
    udp.emit(f.get_mut(l4..at)?, udp_payload.len()).ok()?;
    let payload = f.get_mut(at..)?;
    payload.copy_from_slice(udp_payload);
    if !fill(payload) {
        return None;
    }
    if icrc_too {
        let t = payload.len().checked_sub(ICRC_LEN)?;
        // The ICRC covers the UDP checksum as all ones (masked), so it is computed first.
        let crc = icrc::compute_for(ip, &udp, payload.get(..t)?).ok()?;
        payload
            .get_mut(t..)?
            .copy_from_slice(&icrc::icrc_wire_bytes(crc));
    }
    let sum = udp_checksum(src, dst, f.get(l4..)?);
    f.get_mut(l4 + 6..l4 + 8)?
        .copy_from_slice(&sum.to_be_bytes());
    Some(f)
}

/// The UDP checksum of `udp` (header with checksum 0, then payload) from `src` to `dst`
/// (RFC 768; RFC 8200 §8.1 for IPv6), as the sending socket computes it; 0 comes out as
/// 0xffff.
fn udp_checksum(src: IpAddr, dst: IpAddr, udp: &[u8]) -> u16 {
    fn words(b: &[u8]) -> u64 {
        b.chunks(2)
            .map(|w| u64::from(u16::from_be_bytes([w[0], w.get(1).copied().unwrap_or(0)])))
            .sum()
    }
    let len = udp.len() as u64;
    let mut sum = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => words(&s.octets()) + words(&d.octets()),
        (s, d) => words(&to16(s)) + words(&to16(d)),
    };
    sum += 17 + (len & 0xffff) + (len >> 16) + words(udp);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    match !(sum as u16) {
        0 => 0xffff,
        c => c,
    }
}

fn to16(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

impl Sink {
    fn shown_path(&self) -> String {
        self.path
            .as_ref()
            .map_or_else(|| "(attached tool)".into(), |p| p.display().to_string())
    }

    fn is_local(&self, ip: IpAddr) -> bool {
        self.locals
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&ip)
    }
}

impl Tap {
    /// Whether any sink listens: the engine's only test when nobody captures.
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// Send this device's packets to `sink` too.
    pub(crate) fn add(&self, sink: Arc<Sink>) {
        let mut g = self.sinks.write().unwrap_or_else(PoisonError::into_inner);
        g.push(sink);
        self.on.store(true, Relaxed);
    }

    /// Stop sending to `sink`; with no sink left the device is back to one test a packet.
    pub(crate) fn remove(&self, sink: &Arc<Sink>) {
        let mut g = self.sinks.write().unwrap_or_else(PoisonError::into_inner);
        g.retain(|s| !Arc::ptr_eq(s, sink));
        self.on.store(!g.is_empty(), Relaxed);
        self.lost_gone.fetch_add(
            sink.dropped.load(Relaxed) + sink.write_errors.load(Relaxed),
            Relaxed,
        );
    }

    /// Records lost by the sinks of this device, present and past (queue full or write
    /// errors).
    pub(crate) fn lost(&self) -> u64 {
        self.lost_gone.load(Relaxed)
            + self
                .sinks
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|s| s.dropped.load(Relaxed) + s.write_errors.load(Relaxed))
                .sum::<u64>()
    }

    /// Give the frame `build` makes (only if some sink accepts it: `want`) to every such
    /// sink, copied for all but the last.
    fn deliver(&self, want: impl Fn(&Sink) -> bool, build: impl FnOnce() -> Option<Vec<u8>>) {
        let g = self.sinks.read().unwrap_or_else(PoisonError::into_inner);
        let mut targets = g.iter().filter(|s| want(s)).peekable();
        if targets.peek().is_none() {
            return;
        }
        let Some(frame) = build() else {
            return;
        };
        let mut frame = Some(frame);
        while let Some(s) = targets.next() {
            if targets.peek().is_some() {
                if let Some(f) = &frame {
                    s.push(f.clone());
                }
            } else if let Some(f) = frame.take() {
                s.push(f);
            }
        }
    }

    /// A datagram the socket took: `bytes` (BTH .. ICRC) to `dst`, its ICRC made for IPv4
    /// Identification `ident`.
    pub(crate) fn sent(&self, dst: SocketAddr, ident: u16, bytes: &[u8]) {
        self.deliver(
            |_| true,
            || {
                let ip = ip_repr(self.addr, dst.ip(), ident, true)?;
                frame(&ip, ROCE_V2_PORT, bytes, |_| true, false)
            },
        );
    }

    /// A datagram from the socket: `bytes` (BTH .. ICRC) from `from`, whose IPv4
    /// Identification and DF bit the ICRC check found to be `ident` and `dont_frag`.
    /// Skipped by a sink the sender (a device of this process) also writes to: it recorded
    /// the packet.
    pub(crate) fn received(&self, from: SocketAddr, ident: u16, dont_frag: bool, bytes: &[u8]) {
        let other_dev = from.ip() != self.addr;
        self.deliver(
            |s| !(other_dev && s.is_local(from.ip())),
            || {
                let ip = ip_repr(from.ip(), self.addr, ident, dont_frag)?;
                frame(&ip, from.port(), bytes, |_| true, false)
            },
        );
    }

    /// A same-device packet (never on a socket): `pkt` (BTH .. payload, no ICRC), whose
    /// deferred payload `fill` copies in; the ICRC is computed for the synthesized headers.
    pub(crate) fn looped(&self, pkt: &[u8], fill: impl FnOnce(&mut [u8]) -> bool) {
        self.deliver(|_| true, || same_device_frame(self.addr, pkt, fill));
    }

    /// A packet another process of the daemon's device put into this device's peer ring
    /// (its sender recorded it as a same-device packet): for the sinks that want those.
    pub(crate) fn ring_received(&self, pkt: &[u8]) {
        self.deliver(
            |s| s.ring_rx,
            || same_device_frame(self.addr, pkt, |_| true),
        );
    }
}

/// The frame of a packet between two QPs of one address, with the ICRC computed.
fn same_device_frame(
    addr: IpAddr,
    pkt: &[u8],
    fill: impl FnOnce(&mut [u8]) -> bool,
) -> Option<Vec<u8>> {
    let ip = ip_repr(addr, addr, 0, true)?;
    let mut with_icrc = Vec::with_capacity(pkt.len() + ICRC_LEN);
    with_icrc.extend_from_slice(pkt);
    with_icrc.extend_from_slice(&[0; ICRC_LEN]);
    frame(&ip, ROCE_V2_PORT, &with_icrc, fill, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_patterns() {
        assert_eq!(
            expand_path("/t/c-%p-%d.pcap", 42, "uroce0"),
            "/t/c-42-uroce0.pcap"
        );
        assert_eq!(expand_path("a%%b%x%", 1, "d"), "a%b%x%");
        assert_eq!(expand_path("plain", 1, "d"), "plain");
    }

    #[test]
    fn synthesized_frames_carry_the_wire_icrc() {
        let ip: IpAddr = "127.0.0.9".parse().unwrap();
        let repr = ip_repr(ip, ip, 0, true).unwrap();
        // A BTH (SEND Only to QP 0x11) and 8 payload bytes the fill supplies.
        let mut pkt = vec![0u8; 12 + 8];
        pkt[0] = 0x04;
        pkt[3] = 0xff; // P_Key 0xffff
        pkt[2] = 0xff;
        pkt[7] = 0x11;
        let mut with_icrc = pkt.clone();
        with_icrc.extend_from_slice(&[0; 4]);
        let f = frame(
            &repr,
            ROCE_V2_PORT,
            &with_icrc,
            |p| {
                p[12..20].copy_from_slice(b"payload!");
                true
            },
            true,
        )
        .unwrap();
        // Ethernet, then an L3 frame the wire parser accepts with a good ICRC.
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        let parsed = transport::wire::frame::parse_l3(&f[14..]).unwrap();
        assert!(parsed.check_icrc().is_ok());
        assert_eq!(&f[f.len() - 12..f.len() - 4], b"payload!");
        // The UDP checksum verifies: the one's complement sum over the pseudo-header and the
        // datagram is all ones.
        assert_ne!(&f[40..42], &[0, 0]);
        assert_eq!(udp_checksum(ip, ip, &f[34..]), 0xffff);
        // IPv6: the same, with the checksum RFC 8200 makes mandatory.
        let ip6: IpAddr = "fd00::7".parse().unwrap();
        let r6 = ip_repr(ip6, "fd00::8".parse().unwrap(), 0, true).unwrap();
        let f6 = frame(&r6, 4791, &with_icrc, |_| true, true).unwrap();
        assert_eq!(&f6[12..14], &[0x86, 0xdd]);
        assert!(transport::wire::frame::parse_l3(&f6[14..])
            .unwrap()
            .check_icrc()
            .is_ok());
        let d6: IpAddr = "fd00::8".parse().unwrap();
        assert_eq!(udp_checksum(ip6, d6, &f6[54..]), 0xffff);
        // A failing fill records nothing.
        assert!(frame(&repr, ROCE_V2_PORT, &with_icrc, |_| false, true).is_none());
    }
}
