//! The contract between a library and `uroced`, the daemon that shares one device among every
//! process of a host (docs/daemon.md) — what the kernel's `/dev/infiniband/uverbsN` node and
//! its `open()` are to rdma-core.
//!
//! # Device nodes
//!
//! The daemon serves each device on a Unix stream socket `uverbsN` in its directory
//! ([`default_dir`]: `/run/uroce` for root, `$XDG_RUNTIME_DIR/uroce` or `/tmp/uroce-<uid>`
//! otherwise; `UROCE_DAEMON=PATH` names another), with a world-readable `uverbsN.dev` beside
//! it: one line `name address mtu` ([`DevFile`]), so that listing devices needs no access to
//! the socket (as `ibv_get_device_list` reads sysfs, and only opening `uverbs0` needs its
//! mode). [`find`] lists the live devices of the first directory that has any.
//!
//! # Messages
//!
//! Every message is a [`Hdr`] `{op, len}` followed by `len` body bytes. A client sends a
//! request and reads exactly one reply, whose `op` is the request's with [`REPLY`] set, or
//! [`op::ERROR`] with an [`ErrorBody`] (an errno and a sentence). Requests:
//!
//! * [`op::QUERY`] → [`DeviceInfo`].
//! * [`op::ATTACH`] [`AttachReq`] with two descriptors (`SCM_RIGHTS`): the client's end of a
//!   `SOCK_SEQPACKET` pair on which the daemon forwards the client's datagrams, each a
//!   [`DataHdr`] and the UDP payload, and the eventfd that wakes the client's engine → [`AttachResp`] with one descriptor: the device's UDP
//!   socket (bound to `addr:4791`), which the client sends on directly. A connection that
//!   attached is the client's lifeline: when it closes the daemon reclaims everything the
//!   client held, as closing `uverbs0` makes the kernel do.
//! * [`op::LISTEN`] / [`op::UNLISTEN`] [`ListenReq`]: claim or release a CM service ID, so
//!   REQs and SIDR_REQs for it reach this client (EADDRINUSE if another client holds it).
//! * [`op::PEER`] [`PeerReq`]: a packet ring to the client in `slot` → empty reply with two
//!   descriptors: the ring's memfd and that client's engine wake-up eventfd; the daemon
//!   hands the ring to that client on its data socket ([`DataHdr::RING`]).
//! * [`op::STATS`] → UTF-8 text, one `key value` pair per line ([`parse_stats`]).
//!
//! Decoding never panics and checks every length ([`decode`]; fuzzed by the
//! `daemon_messages` target).

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv6Addr};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The environment variable naming the daemon's directory (or one device socket in it);
/// `0`/`off`/`no`/`false` (or empty) means never use a daemon.
pub const DAEMON_ENV: &str = "UROCE_DAEMON";

/// Set in a reply's `op`.
pub const REPLY: u32 = 0x8000_0000;

/// Largest body accepted (the stats text is the longest message).
pub const MAX_BODY: u32 = 1 << 20;

/// Message kinds.
pub mod op {
    /// Which device this is.
    pub const QUERY: u32 = 1;
    /// Become a client of the device (one per process and device).
    pub const ATTACH: u32 = 2;
    /// Claim a CM service ID.
    pub const LISTEN: u32 = 3;
    /// Release a CM service ID.
    pub const UNLISTEN: u32 = 4;
    /// The daemon's counters for this device.
    pub const STATS: u32 = 5;
    /// A packet ring to another client (its slot): for QPs of two processes on one device.
    pub const PEER: u32 = 6;
    /// A refusal ([`super::ErrorBody`]).
    pub const ERROR: u32 = 0xffff_ffff;
}

/// Every message's header.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct Hdr {
    /// [`op`], with [`REPLY`] in replies.
    pub op: u32,
    /// Body bytes that follow.
    pub len: u32,
}

/// A device as the daemon serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct DeviceInfo {
    /// NUL-padded device name (`uroce0`).
    pub name: [u8; 64],
    /// The device's address as a GID (IPv4-mapped or IPv6).
    pub gid: [u8; 16],
    /// Active MTU in bytes.
    pub mtu: u32,
    /// 1 if ECN congestion control is on.
    pub ecn: u32,
    /// The daemon's process ID.
    pub daemon_pid: u32,
    /// Reserved, 0.
    pub reserved: u32,
}

impl Default for DeviceInfo {
    fn default() -> DeviceInfo {
        DeviceInfo {
            name: [0; 64],
            gid: [0; 16],
            mtu: 0,
            ecn: 0,
            daemon_pid: 0,
            reserved: 0,
        }
    }
}

impl DeviceInfo {
    /// A device called `name` on `addr`.
    pub fn new(name: &str, addr: IpAddr, mtu: u32, ecn: bool, daemon_pid: u32) -> DeviceInfo {
        let mut d = DeviceInfo {
            gid: gid_of(addr),
            mtu,
            ecn: u32::from(ecn),
            daemon_pid,
            ..DeviceInfo::default()
        };
        let n = name.as_bytes();
        let k = n.len().min(d.name.len() - 1);
        d.name[..k].copy_from_slice(&n[..k]);
        d
    }

    /// The name (up to the first NUL; lossy UTF-8).
    pub fn name(&self) -> String {
        let end = self
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.name.len());
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }

    /// The address.
    pub fn addr(&self) -> IpAddr {
        addr_of_gid(self.gid)
    }
}

/// `ATTACH` request body.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct AttachReq {
    /// The client's process ID (for the daemon's log and `uroce stat`).
    pub pid: u32,
    /// Reserved, 0.
    pub reserved: u32,
}

/// `ATTACH` reply body: what the client's part of the device may use.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct AttachResp {
    /// The device.
    pub info: DeviceInfo,
    /// The client's slot (≥ 1): its QPN window and CM ID prefix derive from it.
    pub slot: u32,
    /// First QP number of the client's window.
    pub qpn_base: u32,
    /// QP numbers in the window.
    pub qpn_count: u32,
    /// The top `id_prefix_bits` bits of every CM Local Comm ID / SIDR Request ID the client
    /// allocates are `id_prefix`, so the daemon can route the answers.
    pub id_prefix_bits: u32,
    /// See `id_prefix_bits`.
    pub id_prefix: u32,
    /// Reserved, 0.
    pub reserved: u32,
}

/// `LISTEN` / `UNLISTEN` request body.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct ListenReq {
    /// The CM service ID (rdma_cm: port space << 16 | port).
    pub service_id: u64,
}

/// `PEER` request body.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct PeerReq {
    /// The slot of the client to send to.
    pub slot: u32,
    /// Reserved, 0.
    pub reserved: u32,
}

/// `ERROR` reply body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct ErrorBody {
    /// A positive errno.
    pub errno: i32,
    /// NUL-padded UTF-8 sentence.
    pub msg: [u8; 124],
}

impl ErrorBody {
    /// An error with a reason (truncated to fit).
    pub fn new(errno: i32, msg: &str) -> ErrorBody {
        let mut e = ErrorBody {
            errno,
            msg: [0; 124],
        };
        let b = msg.as_bytes();
        let k = b.len().min(e.msg.len() - 1);
        e.msg[..k].copy_from_slice(&b[..k]);
        e
    }

    /// The sentence.
    pub fn message(&self) -> String {
        let end = self
            .msg
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.msg.len());
        String::from_utf8_lossy(&self.msg[..end]).into_owned()
    }

    /// As an `io::Error` carrying the errno and the sentence.
    pub fn to_io(&self) -> io::Error {
        let os = io::Error::from_raw_os_error(self.errno);
        io::Error::new(os.kind(), format!("{} ({os})", self.message()))
    }
}

/// Header of each datagram the daemon forwards to a client (then the UDP payload).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
#[repr(C)]
pub struct DataHdr {
    /// Source address as a GID (IPv4-mapped or IPv6).
    pub src: [u8; 16],
    /// Source UDP port.
    pub src_port: u16,
    /// IPv4 TOS / IPv6 traffic class as received (ECN in the low two bits).
    pub tos: u8,
    /// [`DataHdr::TOS_VALID`].
    pub flags: u8,
    /// UDP GRO segment size when the payload is several datagrams back to back (0: one).
    pub segment: u16,
    /// The first datagram's place in the GRO message the daemon received (the daemon
    /// splits a message whose datagrams go to different processes): the IPv4 ID a
    /// counting kernel gave it in a GSO send.
    pub first_index: u16,
}

impl DataHdr {
    /// `tos` was reported by the socket.
    pub const TOS_VALID: u8 = 1;
    /// No datagram: the message carries (`SCM_RIGHTS`) a packet ring from the client whose
    /// slot is `first_index` (docs/daemon.md §2.1).
    pub const RING: u8 = 2;
}

/// A decoded message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// `QUERY` request.
    Query,
    /// `QUERY` reply.
    Info(DeviceInfo),
    /// `ATTACH` request.
    Attach(AttachReq),
    /// `ATTACH` reply.
    Attached(AttachResp),
    /// `LISTEN` request.
    Listen(ListenReq),
    /// `UNLISTEN` request.
    Unlisten(ListenReq),
    /// `LISTEN` / `UNLISTEN` success.
    Done(u32),
    /// `PEER` request.
    Peer(PeerReq),
    /// `STATS` request.
    Stats,
    /// `STATS` reply.
    StatsText(String),
    /// A refusal.
    Error(ErrorBody),
}

/// Why bytes are not a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the header or its `len` promise.
    Truncated,
    /// More bytes than the header's `len`.
    Trailing,
    /// An unknown `op`, or a body of the wrong size for it.
    Malformed,
}

fn body<T: FromBytes + KnownLayout + Immutable + Copy>(b: &[u8]) -> Result<T, DecodeError> {
    T::read_from_bytes(b).map_err(|_| DecodeError::Malformed)
}

/// Decode one whole message (header and body).
pub fn decode(bytes: &[u8]) -> Result<Msg, DecodeError> {
    let (h, rest) = Hdr::read_from_prefix(bytes).map_err(|_| DecodeError::Truncated)?;
    let len = h.len as usize;
    if h.len > MAX_BODY || rest.len() < len {
        return Err(DecodeError::Truncated);
    }
    if rest.len() > len {
        return Err(DecodeError::Trailing);
    }
    Ok(match h.op {
        op::QUERY if len == 0 => Msg::Query,
        op::STATS if len == 0 => Msg::Stats,
        op::ATTACH => Msg::Attach(body(rest)?),
        op::LISTEN => Msg::Listen(body(rest)?),
        op::UNLISTEN => Msg::Unlisten(body(rest)?),
        op::PEER => Msg::Peer(body(rest)?),
        x if x == op::QUERY | REPLY => Msg::Info(body(rest)?),
        x if x == op::ATTACH | REPLY => Msg::Attached(body(rest)?),
        x if x == op::LISTEN | REPLY && len == 0 => Msg::Done(op::LISTEN),
        x if x == op::UNLISTEN | REPLY && len == 0 => Msg::Done(op::UNLISTEN),
        x if x == op::PEER | REPLY && len == 0 => Msg::Done(op::PEER),
        x if x == op::STATS | REPLY => {
            Msg::StatsText(String::from_utf8(rest.to_vec()).map_err(|_| DecodeError::Malformed)?)
        }
        op::ERROR => Msg::Error(body(rest)?),
        _ => return Err(DecodeError::Malformed),
    })
}

fn frame(op: u32, body: &[u8]) -> Vec<u8> {
    let h = Hdr {
        op,
        len: u32::try_from(body.len()).unwrap_or(u32::MAX),
    };
    let mut v = Vec::with_capacity(8 + body.len());
    v.extend_from_slice(h.as_bytes());
    v.extend_from_slice(body);
    v
}

/// Encode a message.
pub fn encode(m: &Msg) -> Vec<u8> {
    match m {
        Msg::Query => frame(op::QUERY, &[]),
        Msg::Stats => frame(op::STATS, &[]),
        Msg::Info(i) => frame(op::QUERY | REPLY, i.as_bytes()),
        Msg::Attach(a) => frame(op::ATTACH, a.as_bytes()),
        Msg::Attached(a) => frame(op::ATTACH | REPLY, a.as_bytes()),
        Msg::Listen(l) => frame(op::LISTEN, l.as_bytes()),
        Msg::Unlisten(l) => frame(op::UNLISTEN, l.as_bytes()),
        Msg::Peer(p) => frame(op::PEER, p.as_bytes()),
        Msg::Done(o) => frame(o | REPLY, &[]),
        Msg::StatsText(s) => frame(op::STATS | REPLY, s.as_bytes()),
        Msg::Error(e) => frame(op::ERROR, e.as_bytes()),
    }
}

/// Read one message from a stream: the header, then its body.
pub fn read_msg(r: &mut impl Read) -> io::Result<Msg> {
    let mut h = [0u8; 8];
    r.read_exact(&mut h)?;
    let hdr = Hdr::read_from_bytes(&h[..]).map_err(|_| bad("short header"))?;
    if hdr.len > MAX_BODY {
        return Err(bad("message body too long"));
    }
    let mut all = h.to_vec();
    all.resize(8 + hdr.len as usize, 0);
    r.read_exact(&mut all[8..])?;
    decode(&all).map_err(|e| bad(&format!("bad message from the daemon: {e:?}")))
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// An IP address as a GID.
pub fn gid_of(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// A GID as an IP address (IPv4-mapped GIDs as IPv4).
pub fn addr_of_gid(gid: [u8; 16]) -> IpAddr {
    Ipv6Addr::from(gid).to_canonical()
}

/// Whether a `UROCE_DAEMON` value turns the daemon off.
pub fn is_off(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "" | "0" | "off" | "no" | "false"
    )
}

fn uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

/// Where a daemon run by this user puts its sockets: `/run/uroce` for root,
/// `$XDG_RUNTIME_DIR/uroce`, else `/tmp/uroce-<uid>`.
pub fn default_dir() -> PathBuf {
    if uid() == 0 {
        return PathBuf::from("/run/uroce");
    }
    user_dir()
}

fn user_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|x| Path::new(x).is_absolute()) {
        Some(x) => Path::new(&x).join("uroce"),
        None => PathBuf::from(format!("/tmp/uroce-{}", uid())),
    }
}

/// The directories a library looks in, in order: `UROCE_DAEMON` alone if set (a socket
/// path names its directory), else the user's directory and `/run/uroce`.
pub fn search_dirs() -> Vec<PathBuf> {
    match std::env::var(DAEMON_ENV) {
        Ok(v) if is_off(&v) => Vec::new(),
        Ok(v) => {
            let p = PathBuf::from(v.trim());
            if p.is_dir() {
                vec![p]
            } else {
                p.parent().map(Path::to_path_buf).into_iter().collect()
            }
        }
        Err(_) => {
            let mut v = vec![user_dir(), PathBuf::from("/run/uroce")];
            v.dedup();
            v
        }
    }
}

/// The `uverbsN.dev` file: the device's name, address and MTU, readable by everyone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevFile {
    /// Device name.
    pub name: String,
    /// Its address.
    pub addr: IpAddr,
    /// Active MTU.
    pub mtu: u32,
}

impl DevFile {
    /// The file's text.
    pub fn render(&self) -> String {
        format!("{} {} {}\n", self.name, self.addr, self.mtu)
    }

    /// Parse the file's text.
    pub fn parse(s: &str) -> Option<DevFile> {
        let mut it = s.split_whitespace();
        let name = it.next()?.to_string();
        let addr = it.next()?.parse().ok()?;
        let mtu = it.next()?.parse().ok()?;
        Some(DevFile { name, addr, mtu })
    }
}

/// One device a daemon serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonDevice {
    /// The device socket (the device node).
    pub socket: PathBuf,
    /// What its `.dev` file says.
    pub dev: DevFile,
}

/// The devices served in `dir`, by socket number; sockets nobody answers on (a daemon that
/// died) are skipped. A socket this user may not open still counts (opening it then fails
/// with EACCES, as opening `uverbs0` would).
pub fn devices_in(dir: &Path) -> Vec<DaemonDevice> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u32, DaemonDevice)> = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(n) = name.to_str().and_then(|s| s.strip_prefix("uverbs")) else {
            continue;
        };
        let Some(num) = n.strip_suffix(".dev").and_then(|k| k.parse::<u32>().ok()) else {
            continue;
        };
        let socket = dir.join(format!("uverbs{num}"));
        let Some(dev) = std::fs::read_to_string(e.path())
            .ok()
            .and_then(|s| DevFile::parse(&s))
        else {
            continue;
        };
        let alive = match UnixStream::connect(&socket) {
            Ok(_) => true,
            Err(e) => e.kind() == io::ErrorKind::PermissionDenied,
        };
        if alive {
            found.push((num, DaemonDevice { socket, dev }));
        }
    }
    found.sort_by_key(|(n, _)| *n);
    found.into_iter().map(|(_, d)| d).collect()
}

/// The devices of the first daemon directory ([`search_dirs`]) that serves any.
pub fn find() -> Vec<DaemonDevice> {
    for d in search_dirs() {
        let v = devices_in(&d);
        if !v.is_empty() {
            return v;
        }
    }
    Vec::new()
}

/// The daemon device bound to `addr`, if a daemon serves one.
pub fn lookup(addr: IpAddr) -> Option<DaemonDevice> {
    find().into_iter().find(|d| d.dev.addr == addr)
}

/// Connect to a device socket and exchange one request for its reply (no descriptors):
/// `QUERY`, `STATS`.
pub fn request(socket: &Path, m: &Msg) -> io::Result<Msg> {
    let mut s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(&encode(m))?;
    match read_msg(&mut s)? {
        Msg::Error(e) => Err(e.to_io()),
        r => Ok(r),
    }
}

/// Parse the `STATS` text into `(key, value)` pairs (lines that are not `key value` with
/// an integer value are skipped; `client` lines are returned whole under the key `client`).
pub fn parse_stats(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_bad_bytes_are_refused() {
        let info = DeviceInfo::new("uroce0", "127.0.0.1".parse().unwrap(), 1024, true, 7);
        let msgs = [
            Msg::Query,
            Msg::Info(info),
            Msg::Attach(AttachReq {
                pid: 9,
                reserved: 0,
            }),
            Msg::Attached(AttachResp {
                info,
                slot: 3,
                qpn_base: 3 << 14,
                qpn_count: 1 << 14,
                id_prefix_bits: 10,
                id_prefix: 3,
                reserved: 0,
            }),
            Msg::Listen(ListenReq {
                service_id: 0x0106_4e20,
            }),
            Msg::Unlisten(ListenReq { service_id: 1 }),
            Msg::Done(op::LISTEN),
            Msg::Peer(PeerReq {
                slot: 4,
                reserved: 0,
            }),
            Msg::Done(op::PEER),
            Msg::Stats,
            Msg::StatsText("clients 2\n".into()),
            Msg::Error(ErrorBody::new(98, "service ID in use")),
        ];
        for m in &msgs {
            let b = encode(m);
            assert_eq!(decode(&b).as_ref(), Ok(m));
            assert_eq!(read_msg(&mut &b[..]).ok().as_ref(), Some(m));
            for cut in 0..b.len() {
                assert!(decode(&b[..cut]).is_err(), "{m:?} cut at {cut} decoded");
            }
            let mut longer = b.clone();
            longer.push(0);
            assert_eq!(decode(&longer), Err(DecodeError::Trailing));
        }
        assert_eq!(info.name(), "uroce0");
        assert_eq!(info.addr(), "127.0.0.1".parse::<IpAddr>().unwrap());
        // An unknown op and a body of the wrong size for a known one.
        assert_eq!(decode(&frame(77, &[])), Err(DecodeError::Malformed));
        assert_eq!(
            decode(&frame(op::LISTEN, &[1, 2, 3])),
            Err(DecodeError::Malformed)
        );
        assert_eq!(decode(&frame(op::QUERY, &[0])), Err(DecodeError::Malformed));
    }

    #[test]
    fn dev_files_parse_and_off_values_turn_the_daemon_off() {
        let d = DevFile {
            name: "uroce0".into(),
            addr: "::1".parse().unwrap(),
            mtu: 4096,
        };
        assert_eq!(DevFile::parse(&d.render()), Some(d));
        assert_eq!(DevFile::parse("uroce0 not-an-address 1024"), None);
        for v in ["0", "off", "", " no "] {
            assert!(is_off(v));
        }
        assert!(!is_off("/run/uroce"));
    }
}
