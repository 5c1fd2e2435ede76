//! rdma-core 44's `ibv_rc_pingpong`, `ibv_ud_pingpong` and `ibv_srq_pingpong`: the address
//! message, the exchange over TCP port 18515 and the console lines (reference
//! docs/perftest.md §7).
//!
//! The message is `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, the GID as 32 hex digits in wire
//! order) plus its NUL: 52 bytes. rc and ud exchange one each way and the client ends with
//! `"done\0"`; srq sends 256 records each way (one `write()` per record) whatever `-q` is.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};

use crate::cfmt;
use crate::gid::{has_interface_id, inet_ntop6, Gid};
use crate::perftest::msg::hex_field;
use crate::perftest::{read_message, write_message, HookError, MsgError};

/// Length of one address message (`sizeof "0000:000000:000000:" + 32 hex digits`).
pub const MSG_LEN: usize = 52;
/// `ibv_srq_pingpong` always sends this many records (`MAX_QP`).
pub const SRQ_RECORDS: usize = 256;
/// `-q` may be at most this for srq.
pub const SRQ_MAX_QPS: usize = 255;
/// The client's last message.
pub const DONE: &[u8; 5] = b"done\0";
/// rdma-core's default port.
pub const DEFAULT_PORT: u16 = 18515;
/// UD Q_Key of `ibv_ud_pingpong` (both the QP's and the remote one).
pub const UD_QKEY: u32 = 0x1111_1111;

/// Which tool.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// `ibv_rc_pingpong`.
    Rc,
    /// `ibv_ud_pingpong`.
    Ud,
    /// `ibv_srq_pingpong`.
    Srq,
}

/// One QP's address (`struct pingpong_dest`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct PpDest {
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Start PSN (24 bits).
    pub psn: u32,
    /// The GID, wire order; all zeros without `-g`.
    pub gid: Gid,
}

const MAX_24: u64 = 0x00ff_ffff;

impl PpDest {
    /// The 52-byte message. Fails only if QPN or PSN exceeds 24 bits.
    pub fn encode(&self) -> Result<[u8; MSG_LEN], MsgError> {
        for (field, value) in [("QPN", self.qpn), ("PSN", self.psn)] {
            if u64::from(value) > MAX_24 {
                return Err(MsgError::TooWide {
                    field,
                    value: u64::from(value),
                    max: MAX_24,
                });
            }
        }
        let mut text = format!("{:04x}:{:06x}:{:06x}:", self.lid, self.qpn, self.psn);
        for b in self.gid {
            text.push_str(&format!("{b:02x}"));
        }
        let mut out = [0u8; MSG_LEN];
        for (slot, b) in out.iter_mut().zip(text.bytes()) {
            *slot = b;
        }
        Ok(out)
    }

    /// Decodes a 52-byte message from an untrusted peer. Like rdma-core's
    /// `sscanf("%x:%x:%x:%s")` the three numbers may have any width; unlike it, this refuses
    /// non-hex text, QPN/PSN above 24 bits, and a GID that is not exactly 32 hex digits
    /// ending the string (rdma-core would overflow its buffer or misread).
    pub fn decode(bytes: &[u8]) -> Result<PpDest, MsgError> {
        if bytes.len() != MSG_LEN {
            return Err(MsgError::WrongLength {
                what: "pingpong address",
                expected: MSG_LEN,
                got: bytes.len(),
            });
        }
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        let text = bytes.get(..end).unwrap_or(&[]);
        let mut fields = text.splitn(4, |&b| b == b':');
        let mut next =
            |name: &'static str| fields.next().ok_or(MsgError::MissingColon { field: name });
        let lid = hex_field(next("LID")?, "LID", 0xffff)?;
        let qpn = hex_field(next("QPN")?, "QPN", MAX_24)?;
        let psn = hex_field(next("PSN")?, "PSN", MAX_24)?;
        let gid_text = next("PSN")?;
        if gid_text.len() != 32 || !gid_text.iter().all(u8::is_ascii_hexdigit) {
            return Err(MsgError::NotHex {
                field: "GID",
                text: String::from_utf8_lossy(gid_text).into_owned(),
            });
        }
        let mut gid = [0u8; 16];
        for (slot, pair) in gid.iter_mut().zip(gid_text.chunks_exact(2)) {
            *slot = u8::try_from(hex_field(pair, "GID", 0xff)?).unwrap_or(0);
        }
        Ok(PpDest {
            lid: u16::try_from(lid).unwrap_or(0),
            qpn: u32::try_from(qpn).unwrap_or(0),
            psn: u32::try_from(psn).unwrap_or(0),
            gid,
        })
    }

    /// Whether a side gives its address vector toward this peer a GRH: only when the
    /// peer's GID has a non-zero interface ID (docs/perftest.md §7.1). On RoCE without `-g` the
    /// GID is zero, and moving the QP to RTR then fails.
    pub fn needs_grh(&self) -> bool {
        has_interface_id(&self.gid)
    }
}

/// Why a pingpong exchange failed; `Display` is the tool's stderr text (the `perror`
/// lines with a stale `errno` are left out).
#[derive(Debug, thiserror::Error)]
pub enum PingpongError {
    /// Client: writing its address failed.
    #[error("Couldn't send local address")]
    SendLocal(#[source] io::Error),
    /// rc/ud client: reading the server's address or writing `done` failed.
    #[error("Couldn't read/write remote address")]
    ClientReadWrite {
        /// Bytes of the address received.
        got: usize,
        /// The I/O error (None: the server closed).
        #[source]
        cause: Option<io::Error>,
    },
    /// rc/ud server: the client's address was short.
    #[error("{got}/{want}: Couldn't read remote address")]
    ServerRead {
        /// Bytes received.
        got: usize,
        /// 52.
        want: usize,
    },
    /// srq: record `index` was short (either side).
    #[error("{got}/{want}: Couldn't read remote address [{index}]")]
    SrqRead {
        /// Bytes of this record received.
        got: usize,
        /// 52.
        want: usize,
        /// Record index.
        index: usize,
    },
    /// Server: the caller could not connect its QPs with the client's values.
    #[error("Couldn't connect to remote QP")]
    ConnectQp(String),
    /// rc/ud server: writing its address or reading `done` failed.
    #[error("Couldn't send/recv local address")]
    ServerSendRecv,
    /// srq: writing `done` (client) or reading it (server) failed; the tools `perror`
    /// this as "client write".
    #[error("client write: {0}")]
    SrqDone(String),
    /// The peer's address message does not parse.
    #[error("bad remote address [{index}]: {error}")]
    BadAddress {
        /// Record index.
        index: usize,
        /// What is wrong.
        error: MsgError,
    },
    /// The local addresses are not usable (count, or a field too wide).
    #[error("bad local addresses: {0}")]
    BadLocal(&'static str),
}

fn check_local(variant: Variant, local: &[PpDest]) -> Result<(), PingpongError> {
    let ok = match variant {
        Variant::Rc | Variant::Ud => local.len() == 1,
        Variant::Srq => (1..=SRQ_MAX_QPS).contains(&local.len()),
    };
    if !ok {
        return Err(PingpongError::BadLocal(
            "rc/ud take one address, srq 1..=255",
        ));
    }
    if local.iter().any(|d| d.encode().is_err()) {
        return Err(PingpongError::BadLocal("QPN or PSN wider than 24 bits"));
    }
    Ok(())
}

/// The records this side sends: its addresses, then (srq) zero records up to 256.
fn records(variant: Variant, local: &[PpDest]) -> Vec<[u8; MSG_LEN]> {
    let count = match variant {
        Variant::Srq => SRQ_RECORDS,
        Variant::Rc | Variant::Ud => 1,
    };
    (0..count)
        .map(|i| {
            local
                .get(i)
                .copied()
                .unwrap_or_default()
                .encode()
                .unwrap_or([0; MSG_LEN])
        })
        .collect()
}

fn decode_used(raw: &[u8], used: usize) -> Result<Vec<PpDest>, PingpongError> {
    raw.chunks_exact(MSG_LEN)
        .take(used)
        .enumerate()
        .map(|(index, chunk)| {
            PpDest::decode(chunk).map_err(|error| PingpongError::BadAddress { index, error })
        })
        .collect()
}

/// Reads the peer's srq records, reporting a short record as the tool does.
fn read_srq_records<S: Read + ?Sized>(s: &mut S) -> Result<Vec<u8>, PingpongError> {
    let mut raw = vec![0u8; SRQ_RECORDS * MSG_LEN];
    for (index, chunk) in raw.chunks_exact_mut(MSG_LEN).enumerate() {
        read_message(s, chunk).map_err(|(got, _)| PingpongError::SrqRead {
            got,
            want: MSG_LEN,
            index,
        })?;
    }
    Ok(raw)
}

/// The client side (docs/perftest.md §7.2): write this side's address(es), read the server's,
/// write `done`. Returns the server's address per local QP. The caller then moves its
/// QPs to RTR/RTS and closes the socket.
pub fn client_exchange<S: Read + Write + ?Sized>(
    s: &mut S,
    variant: Variant,
    local: &[PpDest],
) -> Result<Vec<PpDest>, PingpongError> {
    check_local(variant, local)?;
    for rec in records(variant, local) {
        write_message(s, &rec).map_err(PingpongError::SendLocal)?;
    }
    let raw = match variant {
        Variant::Rc | Variant::Ud => {
            let mut buf = vec![0u8; MSG_LEN];
            read_message(s, &mut buf)
                .map_err(|(got, cause)| PingpongError::ClientReadWrite { got, cause })?;
            write_message(s, DONE).map_err(|e| PingpongError::ClientReadWrite {
                got: MSG_LEN,
                cause: Some(e),
            })?;
            buf
        }
        Variant::Srq => {
            let raw = read_srq_records(s)?;
            write_message(s, DONE).map_err(|e| PingpongError::SrqDone(e.to_string()))?;
            raw
        }
    };
    decode_used(&raw, local.len())
}

/// The server side (docs/perftest.md §7.2): read the client's address(es), call `connect` with
/// them (the QPs must reach RTR/RTS *before* the reply, as the tools do), write this
/// side's, then read the client's 5-byte `done` (its content is not checked, as in
/// rdma-core). Returns the client's address per local QP.
pub fn server_exchange<S, F>(
    s: &mut S,
    variant: Variant,
    local: &[PpDest],
    connect: F,
) -> Result<Vec<PpDest>, PingpongError>
where
    S: Read + Write + ?Sized,
    F: FnOnce(&[PpDest]) -> Result<(), HookError>,
{
    check_local(variant, local)?;
    let raw = match variant {
        Variant::Rc | Variant::Ud => {
            let mut buf = vec![0u8; MSG_LEN];
            read_message(s, &mut buf)
                .map_err(|(got, _)| PingpongError::ServerRead { got, want: MSG_LEN })?;
            buf
        }
        Variant::Srq => read_srq_records(s)?,
    };
    let remote = decode_used(&raw, local.len())?;
    connect(&remote).map_err(|e| PingpongError::ConnectQp(e.to_string()))?;
    for rec in records(variant, local) {
        write_message(s, &rec).map_err(|e| match variant {
            Variant::Srq => PingpongError::SendLocal(e),
            Variant::Rc | Variant::Ud => PingpongError::ServerSendRecv,
        })?;
    }
    let mut done = [0u8; 5];
    read_message(s, &mut done).map_err(|(got, cause)| match variant {
        Variant::Srq => PingpongError::SrqDone(match cause {
            Some(e) => e.to_string(),
            None => format!("peer closed after {got} of 5 bytes of \"done\""),
        }),
        Variant::Rc | Variant::Ud => PingpongError::ServerSendRecv,
    })?;
    Ok(remote)
}

/// The pingpong client connect: any address family (AF_UNSPEC), each address tried once.
pub fn connect(host: &str, port: u16) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect(addr) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(io::Error::new(
        last.kind(),
        format!("Couldn't connect to {host}:{port}"),
    ))
}

/// Accepts one connection on `addr` (the tools bind the first passive address, in the lab
/// `0.0.0.0`) and closes the listener.
pub fn accept_one(addr: SocketAddr) -> io::Result<TcpStream> {
    let listener = std::net::TcpListener::bind(addr)?;
    let (s, _) = listener.accept()?;
    Ok(s)
}

/// `  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s` (ud: `PSN 0x%06x: GID`).
pub fn local_line(variant: Variant, d: &PpDest) -> String {
    let sep = if variant == Variant::Ud { ":" } else { "," };
    format!(
        "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}",
        d.lid,
        d.qpn,
        d.psn,
        inet_ntop6(&d.gid)
    )
}

/// `  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s`.
pub fn remote_line(d: &PpDest) -> String {
    format!(
        "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        d.lid,
        d.qpn,
        d.psn,
        inet_ntop6(&d.gid)
    )
}

/// The two result lines, computed as the tools do from the elapsed microseconds
/// (`gettimeofday` difference) held in a C `float`:
/// `%lld bytes in %.2f seconds = %.2f Mbit/sec` (bytes = size × iters × 2) and
/// `%d iters in %.2f seconds = %.2f usec/iter`.
pub fn result_lines(size: u64, iters: u32, elapsed_usec: i64) -> [String; 2] {
    let usec = elapsed_usec as f32;
    let bytes = size.wrapping_mul(u64::from(iters)).wrapping_mul(2) as i64;
    let seconds = f64::from(usec) / 1_000_000.0;
    let mbit = bytes as f64 * 8.0 / f64::from(usec);
    let per_iter = if iters == 0 {
        f64::from(usec / 0.0)
    } else {
        f64::from(usec / iters as f32)
    };
    [
        format!(
            "{bytes} bytes in {} seconds = {} Mbit/sec",
            cfmt::fixed(seconds, 2),
            cfmt::fixed(mbit, 2)
        ),
        format!(
            "{iters} iters in {} seconds = {} usec/iter",
            cfmt::fixed(seconds, 2),
            cfmt::fixed(per_iter, 2)
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const RC_CLIENT: &[u8; 52] = b"0000:000021:863d34:00000000000000000000ffff0a4d000c\0";

    #[test]
    fn message_round_trip() {
        let d = PpDest::decode(RC_CLIENT).expect("decodes");
        assert_eq!((d.lid, d.qpn, d.psn), (0, 0x21, 0x863d34));
        assert_eq!(inet_ntop6(&d.gid), "::ffff:10.77.0.12");
        assert!(d.needs_grh());
        assert_eq!(&d.encode().expect("encodes"), RC_CLIENT);
        let zero = PpDest::default().encode().expect("encodes");
        assert_eq!(
            &zero[..],
            &b"0000:000000:000000:00000000000000000000000000000000\0"[..]
        );
        assert!(!PpDest::decode(&zero).expect("decodes").needs_grh());
    }

    #[test]
    fn decode_refuses_garbage() {
        assert!(PpDest::decode(&RC_CLIENT[..51]).is_err());
        let mut short_gid = *b"0:21:863d34:00000000000000000000ffff0a4d000\0\0\0\0\0\0\0\0\0";
        assert!(PpDest::decode(&short_gid).is_err());
        short_gid[2] = b'x';
        assert!(PpDest::decode(&short_gid).is_err());
        let narrow = *b"0:21:863d34:00000000000000000000ffff0a4d000c\0\0\0\0\0\0\0\0";
        assert_eq!(PpDest::decode(&narrow).map(|d| d.qpn), Ok(0x21));
        let mut tail = *RC_CLIENT;
        tail[51] = b'x';
        assert!(PpDest::decode(&tail).is_err(), "GID must end the string");
        let big = PpDest {
            psn: 0x100_0000,
            ..PpDest::default()
        };
        assert!(big.encode().is_err());
    }

    #[test]
    fn lines() {
        let d = PpDest::decode(RC_CLIENT).expect("decodes");
        assert_eq!(
            local_line(Variant::Ud, &d),
            "  local address:  LID 0x0000, QPN 0x000021, PSN 0x863d34: GID ::ffff:10.77.0.12"
        );
        assert_eq!(
            remote_line(&d),
            "  remote address: LID 0x0000, QPN 0x000021, PSN 0x863d34, GID ::ffff:10.77.0.12"
        );
        let [a, b] = result_lines(4096, 5, 25948);
        assert_eq!(a, "40960 bytes in 0.03 seconds = 12.63 Mbit/sec");
        assert_eq!(b, "5 iters in 0.03 seconds = 5189.60 usec/iter");
    }
}
