//! The attach protocol: how `uroce capture` and `uroce trace` attach to the devices of a
//! running process (docs/operations.md §4) without opening a device of their own.
//!
//! Every process with a uroce device listens on `DIR/<pid>.attach` (beside the `uroce stat`
//! socket `DIR/<pid>.sock`, same directory and permissions). A tool connects and writes one
//! request line; the process answers with one line, then streams frames until the tool
//! closes the connection (which detaches it) or the process exits:
//!
//! ```text
//! tool    → process:  capture [device=NAME] [snaplen=N] [ring_rx=0|1]\n
//!                     trace [device=NAME] [fast=0|1] [fast_rate=N]\n
//! process → tool:     ok pid=PID devices=NAME[,NAME...]\n        |  error TEXT\n
//!                     frame*   (kind: u8, length: u32 little-endian, body)
//! ```
//!
//! Frames: [`FRAME_RECORDS`] — classic pcap records (16-byte little-endian record headers
//! with nanosecond timestamps, then the Ethernet frame), as many as fit; [`FRAME_LINES`] —
//! UTF-8 text, whole lines; [`FRAME_DROPPED`] — a `u64` little-endian: how many records or
//! lines this attachment has lost so far because its bounded queue was full (the device
//! never waits for a tool).
//!
//! Everything here parses bytes from another process: lengths are bounded, and malformed
//! input is an error, never a panic (fuzz target `attach_protocol`).

use std::fmt;

/// Longest request or reply line accepted, newline included.
pub const MAX_LINE: usize = 512;
/// Largest frame body accepted.
pub const MAX_FRAME: usize = 4 << 20;
/// Frame header: kind and length.
pub const FRAME_HEADER: usize = 5;
/// Frame: pcap records.
pub const FRAME_RECORDS: u8 = 1;
/// Frame: text lines.
pub const FRAME_LINES: u8 = 2;
/// Frame: total records or lines dropped (u64 LE).
pub const FRAME_DROPPED: u8 = 3;
/// Longest device name accepted.
pub const MAX_NAME: usize = 64;
/// Largest snap length (as pcap's record limit in the capture crate).
pub const MAX_SNAPLEN: u32 = 262_144;

/// What a tool attaches for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Packets, as pcap records.
    Capture,
    /// Command trace lines (and fast-path events with `fast`).
    Trace,
}

/// A request line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Capture or trace.
    pub kind: Kind,
    /// Only this device of the process (all of them if `None`).
    pub device: Option<String>,
    /// Capture: bytes of each frame kept.
    pub snaplen: u32,
    /// Capture: also record the packets that arrive through a peer ring from another
    /// process of a daemon device (their sender records them too, so a tool that attaches
    /// to every process of the device leaves this off).
    pub ring_rx: bool,
    /// Trace: add sampled fast-path events (doorbells, WQEs, CQEs).
    pub fast: bool,
    /// Trace: at most this many fast-path events a second per device.
    pub fast_rate: u32,
}

/// Defaults of the optional fields.
pub const DEFAULT_SNAPLEN: u32 = 65535;
/// Default fast-path event budget per device and second.
pub const DEFAULT_FAST_RATE: u32 = 1000;

impl Request {
    /// A request of `kind` with every option at its default.
    pub fn new(kind: Kind) -> Request {
        Request {
            kind,
            device: None,
            snaplen: DEFAULT_SNAPLEN,
            ring_rx: true,
            fast: false,
            fast_rate: DEFAULT_FAST_RATE,
        }
    }

    /// The request line, newline included.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        match self.kind {
            Kind::Capture => {
                s.push_str("capture");
                s.push_str(&format!(
                    " snaplen={} ring_rx={}",
                    self.snaplen,
                    u8::from(self.ring_rx)
                ));
            }
            Kind::Trace => {
                s.push_str("trace");
                s.push_str(&format!(
                    " fast={} fast_rate={}",
                    u8::from(self.fast),
                    self.fast_rate
                ));
            }
        }
        if let Some(d) = &self.device {
            s.push_str(" device=");
            s.push_str(d);
        }
        s.push('\n');
        s
    }

    /// Parse one request line (with or without its newline).
    pub fn parse(line: &[u8]) -> Result<Request, AttachError> {
        let text = line_text(line)?;
        let mut words = text.split(' ').filter(|w| !w.is_empty());
        let kind = match words.next() {
            Some("capture") => Kind::Capture,
            Some("trace") => Kind::Trace,
            Some(w) => return Err(AttachError::new(format!("unknown request {w:?}"))),
            None => return Err(AttachError::new("empty request")),
        };
        let mut r = Request::new(kind);
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| AttachError::new(format!("{w:?} is not key=value")))?;
            match (kind, k) {
                (_, "device") => {
                    check_name(v)?;
                    r.device = Some(v.to_string());
                }
                (Kind::Capture, "snaplen") => {
                    r.snaplen = number(k, v)?;
                    if r.snaplen == 0 || r.snaplen > MAX_SNAPLEN {
                        return Err(AttachError::new(format!(
                            "snaplen {} is not in 1..={MAX_SNAPLEN}",
                            r.snaplen
                        )));
                    }
                }
                (Kind::Capture, "ring_rx") => r.ring_rx = flag(k, v)?,
                (Kind::Trace, "fast") => r.fast = flag(k, v)?,
                (Kind::Trace, "fast_rate") => {
                    r.fast_rate = number(k, v)?;
                    if r.fast_rate == 0 {
                        return Err(AttachError::new("fast_rate must be at least 1"));
                    }
                }
                _ => return Err(AttachError::new(format!("unknown option {k:?}"))),
            }
        }
        Ok(r)
    }
}

/// The process's answer line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Attached to these devices of process `pid`.
    Ok {
        /// The process.
        pid: u32,
        /// Its devices the attachment covers.
        devices: Vec<String>,
    },
    /// Refused, and why.
    Refused(String),
}

impl Answer {
    /// The answer line, newline included.
    pub fn encode(&self) -> String {
        match self {
            Answer::Ok { pid, devices } => format!("ok pid={pid} devices={}\n", devices.join(",")),
            Answer::Refused(why) => {
                let clean: String = why
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .take(MAX_LINE - 16)
                    .collect();
                format!("error {clean}\n")
            }
        }
    }

    /// Parse an answer line.
    pub fn parse(line: &[u8]) -> Result<Answer, AttachError> {
        let text = line_text(line)?;
        if let Some(why) = text.strip_prefix("error ") {
            return Ok(Answer::Refused(why.to_string()));
        }
        let rest = text
            .strip_prefix("ok ")
            .ok_or_else(|| AttachError::new("answer is neither ok nor error"))?;
        let mut pid = None;
        let mut devices = None;
        for w in rest.split(' ').filter(|w| !w.is_empty()) {
            match w.split_once('=') {
                Some(("pid", v)) => pid = Some(number("pid", v)?),
                Some(("devices", v)) => {
                    let list: Vec<String> = v
                        .split(',')
                        .filter(|d| !d.is_empty())
                        .map(str::to_string)
                        .collect();
                    for d in &list {
                        check_name(d)?;
                    }
                    devices = Some(list);
                }
                _ => return Err(AttachError::new(format!("unexpected {w:?} in answer"))),
            }
        }
        match (pid, devices) {
            (Some(pid), Some(devices)) => Ok(Answer::Ok { pid, devices }),
            _ => Err(AttachError::new("answer lacks pid or devices")),
        }
    }
}

/// Read one request or answer line from `r`, newline included, a byte at a time so that
/// nothing after it (the frames) is consumed. A line longer than [`MAX_LINE`] is returned
/// cut at `MAX_LINE + 1` bytes, which the parsers refuse; end of stream before a newline is
/// `UnexpectedEof`.
pub fn read_line(r: &mut impl std::io::Read) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::with_capacity(64);
    let mut b = [0u8; 1];
    while line.len() <= MAX_LINE {
        match r.read(&mut b) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {
                line.push(b[0]);
                if b[0] == b'\n' {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(line)
}

/// Append a frame of `kind` with `body` to `out`.
pub fn encode_frame(kind: u8, body: &[u8], out: &mut Vec<u8>) {
    out.push(kind);
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(body);
}

/// A whole frame found at the start of a buffer: its kind, its body, and the bytes it took.
pub type FrameAt<'a> = (u8, &'a [u8], usize);

/// One frame at the start of `buf`: `Ok(Some((kind, body, consumed)))`, `Ok(None)` if more
/// bytes are needed, or an error for an unknown kind or an oversized length.
pub fn split_frame(buf: &[u8]) -> Result<Option<FrameAt<'_>>, AttachError> {
    let Some(head) = buf.get(..FRAME_HEADER) else {
        return Ok(None);
    };
    let kind = head[0];
    if !matches!(kind, FRAME_RECORDS | FRAME_LINES | FRAME_DROPPED) {
        return Err(AttachError::new(format!("unknown frame kind {kind}")));
    }
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME {
        return Err(AttachError::new(format!("frame of {len} bytes")));
    }
    if kind == FRAME_DROPPED && len != 8 {
        return Err(AttachError::new("dropped-count frame is not 8 bytes"));
    }
    let end = FRAME_HEADER + len;
    match buf.get(FRAME_HEADER..end) {
        Some(body) => Ok(Some((kind, body, end))),
        None => Ok(None),
    }
}

/// A malformed request, answer or frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachError(pub String);

impl AttachError {
    fn new(s: impl Into<String>) -> AttachError {
        AttachError(s.into())
    }
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AttachError {}

fn line_text(line: &[u8]) -> Result<&str, AttachError> {
    if line.len() > MAX_LINE {
        return Err(AttachError::new("line too long"));
    }
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let text = std::str::from_utf8(line).map_err(|_| AttachError::new("line is not UTF-8"))?;
    if text.chars().any(char::is_control) {
        return Err(AttachError::new("line has control characters"));
    }
    Ok(text)
}

/// Whether `v` is a device name a request may carry (letters, digits, `_`, `-`, `.`; at
/// most [`MAX_NAME`] bytes).
pub fn check_name(v: &str) -> Result<(), AttachError> {
    let ok = !v.is_empty()
        && v.len() <= MAX_NAME
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(AttachError::new(format!("{v:?} is not a device name")))
    }
}

fn number(k: &str, v: &str) -> Result<u32, AttachError> {
    v.parse()
        .map_err(|_| AttachError::new(format!("{k}={v:?} is not a number")))
}

fn flag(k: &str, v: &str) -> Result<bool, AttachError> {
    match v {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(AttachError::new(format!("{k}={v:?} is not 0 or 1"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let mut c = Request::new(Kind::Capture);
        c.device = Some("uroce0".into());
        c.snaplen = 128;
        c.ring_rx = false;
        assert_eq!(Request::parse(c.encode().as_bytes()).unwrap(), c);
        let mut t = Request::new(Kind::Trace);
        t.fast = true;
        t.fast_rate = 50;
        assert_eq!(Request::parse(t.encode().as_bytes()).unwrap(), t);
        assert_eq!(
            Request::parse(b"capture\n").unwrap(),
            Request::new(Kind::Capture)
        );
    }

    #[test]
    fn bad_requests_are_errors() {
        for bad in [
            &b""[..],
            b"dump\n",
            b"capture snaplen=0",
            b"capture snaplen=999999999",
            b"capture snaplen=x",
            b"capture fast=1",
            b"trace snaplen=10",
            b"trace fast=2",
            b"trace fast_rate=0",
            b"capture device=../etc",
            b"capture device=",
            b"capture nokey",
            b"capture\x00",
            b"capture \xff",
        ] {
            assert!(Request::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Request::parse(&[b'a'; MAX_LINE + 1]).is_err());
    }

    #[test]
    fn answers_round_trip() {
        let a = Answer::Ok {
            pid: 42,
            devices: vec!["uroce0".into(), "uroce1".into()],
        };
        assert_eq!(Answer::parse(a.encode().as_bytes()).unwrap(), a);
        let r = Answer::Refused("no device \"x\"".into());
        assert_eq!(Answer::parse(r.encode().as_bytes()).unwrap(), r);
        assert!(Answer::parse(b"ok pid=1\n").is_err());
        assert!(Answer::parse(b"maybe\n").is_err());
        // Control characters in a reason are blanked, so the line stays one line.
        let nl = Answer::Refused("a\nb".into()).encode();
        assert_eq!(nl.matches('\n').count(), 1);
    }

    #[test]
    fn lines_are_read_up_to_their_newline_only() {
        let mut r: &[u8] = b"ok pid=1 devices=a\n\x01rest";
        assert_eq!(read_line(&mut r).unwrap(), b"ok pid=1 devices=a\n");
        assert_eq!(r, b"\x01rest");
        let long = vec![b'a'; 2 * MAX_LINE];
        let cut = read_line(&mut long.as_slice()).unwrap();
        assert_eq!(cut.len(), MAX_LINE + 1);
        assert!(Request::parse(&cut).is_err());
        let mut short: &[u8] = b"no newline";
        assert_eq!(
            read_line(&mut short).unwrap_err().kind(),
            std::io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn frames_split_whole_or_wait() {
        let mut out = Vec::new();
        encode_frame(FRAME_LINES, b"hello\n", &mut out);
        encode_frame(FRAME_DROPPED, &7u64.to_le_bytes(), &mut out);
        let (k, body, n) = split_frame(&out).unwrap().unwrap();
        assert_eq!((k, body), (FRAME_LINES, &b"hello\n"[..]));
        let (k, body, m) = split_frame(&out[n..]).unwrap().unwrap();
        assert_eq!(k, FRAME_DROPPED);
        assert_eq!(u64::from_le_bytes(body.try_into().unwrap()), 7);
        assert_eq!(n + m, out.len());
        assert_eq!(split_frame(&out[..3]).unwrap(), None);
        assert_eq!(split_frame(&out[..n - 1]).unwrap(), None);
        assert!(split_frame(&[9, 0, 0, 0, 0]).is_err());
        assert!(split_frame(&[FRAME_RECORDS, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(split_frame(&[FRAME_DROPPED, 4, 0, 0, 0, 1, 2, 3, 4]).is_err());
    }
}
