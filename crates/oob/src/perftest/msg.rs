//! The perftest message catalogue (docs/perftest.md §2): encoders that
//! produce perftest's exact bytes, and decoders of untrusted bytes that never panic.
//!
//! | id | message | bytes | here |
//! | --- | --- | --- | --- |
//! | M1 | VERSION | 16 | [`encode_version`], [`decode_version`] |
//! | M2 | CYCLE_BUFFER | 4 | [`encode_i32`], [`decode_i32`] |
//! | M3 | CACHE_LINE | 4 | [`encode_i32`], [`decode_i32`] |
//! | M4 | MTU | 2 | [`encode_mtu`], [`decode_mtu`] |
//! | M5 | KEY (also INIT and every SYNC) | 108 (59 without GID) | [`KeyMessage`] |
//! | M6 | REPORT | 5 (or 9) × 8 | [`BwReport`] |
//! | M7 | DONE | 5 | [`DONE`] |

use crate::cfmt;
use crate::gid::Gid;

/// perftest's internal version string for 4.5-0.17, the one sent in M1.
pub const VERSION: &str = "6.06";
/// Length of M1 (`MAX_VERSION`).
pub const VERSION_LEN: usize = 16;
/// Length of M2 and M3 (a C `int`).
pub const SYS_DATA_LEN: usize = 4;
/// Length of M4 from a peer of version ≥ 5.31 (`sizeof(char[2])`).
pub const MTU_LEN: usize = 2;
/// Length of M4 to a peer older than 5.31 (`sizeof(int)`).
pub const MTU_LEN_LEGACY: usize = 4;
/// Length of the KEY message with a GID (`KEY_MSG_SIZE_GID`).
pub const KEY_LEN: usize = 108;
/// Length of the KEY message without a GID (`KEY_MSG_SIZE`), used only when no GID is in
/// use, which never happens on RoCE.
pub const KEY_LEN_NO_GID: usize = 59;
/// M5 with `-R` (rdma_cm): perftest's `struct pingpong_dest` sent as one SEND over the
/// rdma_cm connection (docs/perftest.md §8.2).
pub const KEY_LEN_CM: usize = 56;
/// Length of one REPORT field exchange.
pub const REPORT_FIELD_LEN: usize = 8;
/// Length of the REPORT `iters` field to a peer older than 5.33.
pub const REPORT_ITERS_LEN_LEGACY: usize = 4;
/// M7: `"done"` with its NUL.
pub const DONE: &[u8; 5] = b"done\0";

/// Why a message could not be encoded or decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MsgError {
    /// The message has the wrong length.
    #[error("{what}: {got} bytes, expected {expected}")]
    WrongLength {
        /// Which message.
        what: &'static str,
        /// Required length.
        expected: usize,
        /// Length seen.
        got: usize,
    },
    /// A value does not fit the field's width.
    #[error("{field} value {value:#x} does not fit (max {max:#x})")]
    TooWide {
        /// Field name.
        field: &'static str,
        /// The value.
        value: u64,
        /// Largest allowed value.
        max: u64,
    },
    /// A field is empty or holds something other than hexadecimal digits.
    #[error("{field} field {text:?} is not a hexadecimal number")]
    NotHex {
        /// Field name.
        field: &'static str,
        /// The field's text (lossy).
        text: String,
    },
    /// The `:` that must end a field is missing.
    #[error("no ':' after the {field} field")]
    MissingColon {
        /// Field name.
        field: &'static str,
    },
    /// GID byte 15 must be exactly two characters followed by `:` (perftest's reader skips
    /// exactly three bytes there).
    #[error("GID byte 15 field {text:?} is not exactly two hex digits")]
    BadLastGidByte {
        /// The field's text (lossy).
        text: String,
    },
    /// The version string does not fit the 16-byte message with its NUL.
    #[error("version string {0:?} longer than 15 bytes")]
    VersionTooLong(String),
    /// MTU enum value outside 1..=5.
    #[error("MTU enum value {0} is not 1..=5")]
    BadMtu(u8),
}

/// M1: the version string, NUL-padded to 16 bytes.
pub fn encode_version(version: &str) -> Result<[u8; VERSION_LEN], MsgError> {
    let bytes = version.as_bytes();
    if bytes.len() >= VERSION_LEN || bytes.contains(&0) {
        return Err(MsgError::VersionTooLong(version.to_string()));
    }
    let mut out = [0u8; VERSION_LEN];
    for (slot, &b) in out.iter_mut().zip(bytes) {
        *slot = b;
    }
    Ok(out)
}

/// Bytes 8..16 of M1 when a uroce side offers selective repeat (docs/perftest.md §10): after
/// the version's NUL, where perftest's `atof` and `printf` never look.
pub const SR_OFFER: [u8; 8] = *b"uroce-sr";

/// M1 carrying the selective-repeat offer; `None` if the version does not leave bytes
/// 8..16 free (7 characters at most).
pub fn encode_version_offering_sr(version: &str) -> Option<[u8; VERSION_LEN]> {
    let mut out = encode_version(version).ok()?;
    if version.len() >= 8 {
        return None;
    }
    out[8..].copy_from_slice(&SR_OFFER);
    Some(out)
}

/// Whether a peer's M1 offers selective repeat: a NUL before byte 8 and [`SR_OFFER`] in
/// bytes 8..16.
pub fn offers_selective_repeat(bytes: &[u8]) -> bool {
    bytes.len() == VERSION_LEN
        && bytes.iter().take(8).any(|&b| b == 0)
        && bytes.get(8..) == Some(&SR_OFFER[..])
}

/// The peer's M1 as perftest reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerVersion {
    /// The text up to the first NUL (lossy UTF-8), for messages.
    pub text: String,
    /// `atof()` of it: what perftest compares with its thresholds.
    pub value: f64,
}

/// Decodes M1 (exactly 16 bytes). Any content is a valid version; `atof` decides.
pub fn decode_version(bytes: &[u8]) -> Result<PeerVersion, MsgError> {
    check_len("VERSION", bytes, VERSION_LEN)?;
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let text = String::from_utf8_lossy(bytes.get(..end).unwrap_or(&[])).into_owned();
    Ok(PeerVersion {
        text,
        value: cfmt::atof(bytes),
    })
}

/// M2/M3: a C `int` in network byte order.
pub fn encode_i32(value: i32) -> [u8; SYS_DATA_LEN] {
    value.to_be_bytes()
}

/// Decodes M2/M3 (exactly 4 bytes).
pub fn decode_i32(bytes: &[u8]) -> Result<i32, MsgError> {
    let arr: [u8; SYS_DATA_LEN] = bytes.try_into().map_err(|_| MsgError::WrongLength {
        what: "CYCLE_BUFFER/CACHE_LINE",
        expected: SYS_DATA_LEN,
        got: bytes.len(),
    })?;
    Ok(i32::from_be_bytes(arr))
}

/// The MTU perftest's M4 carries: an `ibv_mtu` value (1 = 256 … 5 = 4096 bytes), the type
/// the verbs use.
pub use abi::Mtu;

/// From the enum value M4 carries; `None` outside 1..=5 (perftest's `valid_mtu_size`).
pub fn mtu_from_enum(value: i64) -> Option<Mtu> {
    u32::try_from(value).ok().and_then(Mtu::from_raw)
}

/// M4: `sprintf("%d", mtu)` sent as `len` bytes (2 to a peer ≥ 5.31, 4 to an older one):
/// one ASCII digit and a NUL, padded with NULs.
pub fn encode_mtu(own: Mtu, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len.max(2)];
    if let Some(first) = out.first_mut() {
        *first = b'0' + own as u8;
    }
    out.truncate(len.max(2));
    out
}

/// Decodes the peer's M4 as perftest does: `strtol(text, NULL, 10)` over the bytes up to
/// the first NUL. Returns the number read (0 when there is none); perftest silently
/// ignores values outside 1..=5 (see [`mtu_from_enum`]).
pub fn decode_mtu(bytes: &[u8]) -> Result<i64, MsgError> {
    if bytes.len() != MTU_LEN && bytes.len() != MTU_LEN_LEGACY {
        return Err(MsgError::WrongLength {
            what: "MTU",
            expected: MTU_LEN,
            got: bytes.len(),
        });
    }
    Ok(strtol10(bytes))
}

/// `strtol(s, NULL, 10)` over the bytes up to the first NUL, saturating.
fn strtol10(bytes: &[u8]) -> i64 {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let s = bytes.get(..end).unwrap_or(&[]);
    let mut i = 0;
    while s
        .get(i)
        .is_some_and(|&b| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
    {
        i += 1;
    }
    let mut negative = false;
    if let Some(&c) = s.get(i) {
        if c == b'+' || c == b'-' {
            negative = c == b'-';
            i += 1;
        }
    }
    let mut value: i64 = 0;
    while let Some(d) = s.get(i).and_then(|&c| char::from(c).to_digit(10)) {
        value = value.saturating_mul(10).saturating_add(i64::from(d));
        i += 1;
    }
    if negative {
        -value
    } else {
        value
    }
}

/// M5: one QP's address, the 108-byte KEY message (docs/perftest.md §2.1). The same bytes serve
/// as INIT and as every SYNC message (always QP0's).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct KeyMessage {
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding RDMA READ/atomic operations this side serves as responder: 1 for write
    /// and send tests; the device's `max_qp_rd_atom` (or `-o`) for read and atomic.
    pub out_reads: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Start PSN (24 bits).
    pub psn: u32,
    /// rkey of the data MR.
    pub rkey: u32,
    /// Remote-access target address for this QP.
    pub vaddr: u64,
    /// The GID, wire order.
    pub gid: Gid,
    /// SRQ number (0 except XRC and DC).
    pub srqn: u32,
}

const MAX_24: u64 = 0x00ff_ffff;

impl KeyMessage {
    fn check_widths(&self) -> Result<(), MsgError> {
        for (field, value) in [("QPN", self.qpn), ("PSN", self.psn)] {
            if u64::from(value) > MAX_24 {
                return Err(MsgError::TooWide {
                    field,
                    value: u64::from(value),
                    max: MAX_24,
                });
            }
        }
        Ok(())
    }

    /// The exact 108-byte template
    /// `%04x:%04x:%06x:%06x:%08x:%016llx:` + 16 × `%02x:` + `%08x:` + NUL.
    /// Fails only when QPN or PSN exceeds 24 bits (which would overflow the template).
    pub fn encode(&self) -> Result<[u8; KEY_LEN], MsgError> {
        self.check_widths()?;
        let mut text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid {
            text.push_str(&format!("{b:02x}:"));
        }
        text.push_str(&format!("{:08x}:", self.srqn));
        let mut out = [0u8; KEY_LEN];
        if text.len() != KEY_LEN - 1 {
            // Unreachable with the width checks above; kept so no input can panic.
            return Err(MsgError::WrongLength {
                what: "KEY (encoded)",
                expected: KEY_LEN - 1,
                got: text.len(),
            });
        }
        for (slot, b) in out.iter_mut().zip(text.bytes()) {
            *slot = b;
        }
        Ok(out)
    }

    /// The 59-byte variant without GID, `%04x:%04x:%06x:%06x:%08x:%016llx:%08x` + NUL
    /// (only when no GID is in use: an InfiniBand link without `-x`; never on RoCE).
    pub fn encode_no_gid(&self) -> Result<[u8; KEY_LEN_NO_GID], MsgError> {
        self.check_widths()?;
        let text = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:{:08x}",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr, self.srqn
        );
        let mut out = [0u8; KEY_LEN_NO_GID];
        if text.len() != KEY_LEN_NO_GID - 1 {
            return Err(MsgError::WrongLength {
                what: "KEY without GID (encoded)",
                expected: KEY_LEN_NO_GID - 1,
                got: text.len(),
            });
        }
        for (slot, b) in out.iter_mut().zip(text.bytes()) {
            *slot = b;
        }
        Ok(out)
    }

    /// Decodes a 108-byte KEY message from an untrusted peer.
    ///
    /// Follows perftest's reader (`ethernet_read_keys`): the text up to the first NUL is
    /// split at `:` and each field read as hexadecimal, so field *widths* are not enforced.
    /// Unlike perftest (which would read out of bounds or wrap silently), this refuses
    /// empty or non-hex fields, values too wide for their field (QPN and PSN are 24 bits)
    /// and a missing `:`; GID byte 15 must be exactly two characters followed by `:`, as
    /// perftest's pointer arithmetic assumes. Bytes after the SRQN's `:` are ignored.
    pub fn decode(bytes: &[u8]) -> Result<KeyMessage, MsgError> {
        check_len("KEY", bytes, KEY_LEN)?;
        let mut rest = c_text(bytes);
        let lid = hex_field(take_field(&mut rest, "LID")?, "LID", 0xffff)?;
        let out_reads = hex_field(take_field(&mut rest, "OUT_READS")?, "OUT_READS", 0xffff)?;
        let qpn = hex_field(take_field(&mut rest, "QPN")?, "QPN", MAX_24)?;
        let psn = hex_field(take_field(&mut rest, "PSN")?, "PSN", MAX_24)?;
        let rkey = hex_field(take_field(&mut rest, "RKEY")?, "RKEY", u64::from(u32::MAX))?;
        let vaddr = hex_field(take_field(&mut rest, "VADDR")?, "VADDR", u64::MAX)?;
        let mut gid = [0u8; 16];
        for (i, slot) in gid.iter_mut().enumerate() {
            let field = take_field(&mut rest, GID_FIELDS.get(i).copied().unwrap_or("GID"))?;
            if i == 15 && field.len() != 2 {
                return Err(MsgError::BadLastGidByte {
                    text: String::from_utf8_lossy(field).into_owned(),
                });
            }
            let v = hex_field(field, GID_FIELDS.get(i).copied().unwrap_or("GID"), 0xff)?;
            *slot = u8::try_from(v).unwrap_or(0);
        }
        let srqn = hex_field(take_field(&mut rest, "SRQN")?, "SRQN", u64::from(u32::MAX))?;
        Ok(KeyMessage {
            lid: u16::try_from(lid).unwrap_or(0),
            out_reads: u16::try_from(out_reads).unwrap_or(0),
            qpn: u32::try_from(qpn).unwrap_or(0),
            psn: u32::try_from(psn).unwrap_or(0),
            rkey: u32::try_from(rkey).unwrap_or(0),
            vaddr,
            gid,
            srqn: u32::try_from(srqn).unwrap_or(0),
        })
    }

    /// The 56-byte binary form perftest sends with `-R` (`rdma_write_keys`): its
    /// `struct pingpong_dest` with every integer big-endian — LID, OUT_READS, QPN, PSN and
    /// RKEY as 32-bit words at 0–19, 4 bytes of padding, VADDR (64 bits) at 24, the GID at
    /// 32, SRQN at 48, the GID index (0) at 52 (docs/perftest.md §8.2).
    pub fn encode_cm(&self) -> [u8; KEY_LEN_CM] {
        let mut b = [0u8; KEY_LEN_CM];
        let words = [
            u32::from(self.lid),
            u32::from(self.out_reads),
            self.qpn,
            self.psn,
            self.rkey,
        ];
        for (i, w) in words.iter().enumerate() {
            if let Some(slot) = b.get_mut(i * 4..i * 4 + 4) {
                slot.copy_from_slice(&w.to_be_bytes());
            }
        }
        if let Some(slot) = b.get_mut(24..32) {
            slot.copy_from_slice(&self.vaddr.to_be_bytes());
        }
        if let Some(slot) = b.get_mut(32..48) {
            slot.copy_from_slice(&self.gid);
        }
        if let Some(slot) = b.get_mut(48..52) {
            slot.copy_from_slice(&self.srqn.to_be_bytes());
        }
        b
    }

    /// Decodes the 56-byte `-R` form as perftest's `rdma_read_keys` does: the five 32-bit
    /// words, VADDR and the GID; SRQN and the GID index are not read (perftest leaves its own
    /// there). LID and OUT_READS wider than 16 bits, QPN and PSN wider than 24 are refused.
    pub fn decode_cm(bytes: &[u8]) -> Result<KeyMessage, MsgError> {
        check_len("KEY (rdma_cm)", bytes, KEY_LEN_CM)?;
        let word = |i: usize| {
            bytes
                .get(i * 4..i * 4 + 4)
                .and_then(|s| <[u8; 4]>::try_from(s).ok())
                .map_or(0, u32::from_be_bytes)
        };
        let narrow = |field: &'static str, value: u32, max: u64| {
            if u64::from(value) > max {
                Err(MsgError::TooWide {
                    field,
                    value: u64::from(value),
                    max,
                })
            } else {
                Ok(value)
            }
        };
        let lid = narrow("LID", word(0), 0xffff)?;
        let out_reads = narrow("OUT_READS", word(1), 0xffff)?;
        let qpn = narrow("QPN", word(2), MAX_24)?;
        let psn = narrow("PSN", word(3), MAX_24)?;
        let vaddr = bytes
            .get(24..32)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map_or(0, u64::from_be_bytes);
        let mut gid = [0u8; 16];
        if let Some(s) = bytes.get(32..48) {
            gid.copy_from_slice(s);
        }
        Ok(KeyMessage {
            lid: u16::try_from(lid).unwrap_or(0),
            out_reads: u16::try_from(out_reads).unwrap_or(0),
            qpn,
            psn,
            rkey: word(4),
            vaddr,
            gid,
            srqn: 0,
        })
    }

    /// Decodes the 59-byte variant as perftest's `sscanf(KEY_PRINT_FMT)` does: seven fields
    /// of at most 4, 4, 6, 6, 8, 16, 8 hex digits separated by `:`. The GID is all zeros.
    pub fn decode_no_gid(bytes: &[u8]) -> Result<KeyMessage, MsgError> {
        check_len("KEY without GID", bytes, KEY_LEN_NO_GID)?;
        let text = c_text(bytes);
        let mut pos = 0usize;
        let mut values = [0u64; 7];
        const WIDTHS: [(usize, &str); 7] = [
            (4, "LID"),
            (4, "OUT_READS"),
            (6, "QPN"),
            (6, "PSN"),
            (8, "RKEY"),
            (16, "VADDR"),
            (8, "SRQN"),
        ];
        for (i, (width, name)) in WIDTHS.iter().enumerate() {
            if i > 0 {
                if text.get(pos) != Some(&b':') {
                    return Err(MsgError::MissingColon {
                        field: WIDTHS.get(i - 1).map_or("KEY", |w| w.1),
                    });
                }
                pos += 1;
            }
            let start = pos;
            while pos - start < *width && text.get(pos).is_some_and(u8::is_ascii_hexdigit) {
                pos += 1;
            }
            let field = text.get(start..pos).unwrap_or(&[]);
            if let Some(slot) = values.get_mut(i) {
                *slot = hex_field(field, name, u64::MAX)?;
            }
        }
        let [lid, out_reads, qpn, psn, rkey, vaddr, srqn] = values;
        Ok(KeyMessage {
            lid: u16::try_from(lid).unwrap_or(0),
            out_reads: u16::try_from(out_reads).unwrap_or(0),
            qpn: u32::try_from(qpn).unwrap_or(0),
            psn: u32::try_from(psn).unwrap_or(0),
            rkey: u32::try_from(rkey).unwrap_or(0),
            vaddr,
            gid: [0; 16],
            srqn: u32::try_from(srqn).unwrap_or(0),
        })
    }
}

const GID_FIELDS: [&str; 16] = [
    "GID[0]", "GID[1]", "GID[2]", "GID[3]", "GID[4]", "GID[5]", "GID[6]", "GID[7]", "GID[8]",
    "GID[9]", "GID[10]", "GID[11]", "GID[12]", "GID[13]", "GID[14]", "GID[15]",
];

fn check_len(what: &'static str, bytes: &[u8], expected: usize) -> Result<(), MsgError> {
    if bytes.len() == expected {
        Ok(())
    } else {
        Err(MsgError::WrongLength {
            what,
            expected,
            got: bytes.len(),
        })
    }
}

/// The bytes up to the first NUL: the C string the tools' parsers see.
fn c_text(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    bytes.get(..end).unwrap_or(&[])
}

/// Splits off the text before the next `:` and moves `rest` past it.
fn take_field<'a>(rest: &mut &'a [u8], field: &'static str) -> Result<&'a [u8], MsgError> {
    let colon = rest
        .iter()
        .position(|&b| b == b':')
        .ok_or(MsgError::MissingColon { field })?;
    let value = rest.get(..colon).unwrap_or(&[]);
    *rest = rest.get(colon + 1..).unwrap_or(&[]);
    Ok(value)
}

/// A non-empty run of hex digits (any width, leading zeros allowed) whose value is ≤ `max`.
pub(crate) fn hex_field(field: &[u8], name: &'static str, max: u64) -> Result<u64, MsgError> {
    if field.is_empty() || !field.iter().all(u8::is_ascii_hexdigit) {
        return Err(MsgError::NotHex {
            field: name,
            text: String::from_utf8_lossy(field).into_owned(),
        });
    }
    let first_nonzero = field.iter().position(|&b| b != b'0').unwrap_or(field.len());
    let significant = field.get(first_nonzero..).unwrap_or(&[]);
    if significant.len() > 16 {
        return Err(MsgError::TooWide {
            field: name,
            value: u64::MAX,
            max,
        });
    }
    let mut value = 0u64;
    for &b in significant {
        let d = char::from(b).to_digit(16).unwrap_or(0);
        value = (value << 4) | u64::from(d);
    }
    if value > max {
        return Err(MsgError::TooWide {
            field: name,
            value,
            max,
        });
    }
    Ok(value)
}

/// M6: one side's bandwidth report (docs/perftest.md §2.2). The byte order on the wire is
/// big-endian for the integers and for the IEEE-754 doubles.
///
/// The bandwidth figures are in the *sender's* unit (MiB/s, or Gb/s with
/// `--report_gbits`); nothing on the wire says which.
#[derive(Copy, Clone, Debug, PartialEq, Default)]
pub struct BwReport {
    /// Message size in bytes.
    pub size: u64,
    /// Iterations × number of QPs.
    pub iters: u64,
    /// Peak bandwidth.
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Message rate in Mpps.
    pub msg_rate: f64,
    /// `--report-per-port`: port 1 average bandwidth.
    pub bw_avg_p1: f64,
    /// `--report-per-port`: port 1 message rate.
    pub msg_rate_p1: f64,
    /// `--report-per-port`: port 2 average bandwidth.
    pub bw_avg_p2: f64,
    /// `--report-per-port`: port 2 message rate.
    pub msg_rate_p2: f64,
}

/// How a REPORT is laid out for a given peer and options.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReportLayout {
    /// `iters` is 8 bytes (peer version ≥ 5.33) rather than 4.
    pub wide_iters: bool,
    /// Four extra fields for `--report-per-port`.
    pub per_port: bool,
}

impl ReportLayout {
    /// The layout perftest 6.06 uses with another 6.06: five 8-byte fields.
    pub const STANDARD: ReportLayout = ReportLayout {
        wide_iters: true,
        per_port: false,
    };

    /// Number of field exchanges.
    pub fn fields(self) -> usize {
        if self.per_port {
            9
        } else {
            5
        }
    }

    /// Length of field `index`.
    pub fn field_len(self, index: usize) -> usize {
        if index == 1 && !self.wide_iters {
            REPORT_ITERS_LEN_LEGACY
        } else {
            REPORT_FIELD_LEN
        }
    }
}

impl BwReport {
    /// The field exchanges, in wire order: size, iters, bw_peak, bw_avg, msg_rate, then
    /// (per port) bw_avg_p1, msg_rate_p1, bw_avg_p2, msg_rate_p2.
    pub fn encode_fields(&self, layout: ReportLayout) -> Vec<Vec<u8>> {
        let mut out = vec![self.size.to_be_bytes().to_vec()];
        if layout.wide_iters {
            out.push(self.iters.to_be_bytes().to_vec());
        } else {
            // `hton_int` of the (truncated) iteration count.
            out.push((self.iters as u32).to_be_bytes().to_vec());
        }
        out.push(self.bw_peak.to_bits().to_be_bytes().to_vec());
        out.push(self.bw_avg.to_bits().to_be_bytes().to_vec());
        out.push(self.msg_rate.to_bits().to_be_bytes().to_vec());
        if layout.per_port {
            for v in [
                self.bw_avg_p1,
                self.msg_rate_p1,
                self.bw_avg_p2,
                self.msg_rate_p2,
            ] {
                out.push(v.to_bits().to_be_bytes().to_vec());
            }
        }
        out
    }

    /// Stores field `index` (wire order, see [`BwReport::encode_fields`]) read from the
    /// peer. Every bit pattern is accepted (the doubles keep their exact bits).
    pub fn set_field(&mut self, index: usize, bytes: &[u8]) -> Result<(), MsgError> {
        let as_u64 = |bytes: &[u8]| -> Result<u64, MsgError> {
            match bytes.len() {
                8 => {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(bytes);
                    Ok(u64::from_be_bytes(a))
                }
                4 => {
                    let mut a = [0u8; 4];
                    a.copy_from_slice(bytes);
                    Ok(u64::from(u32::from_be_bytes(a)))
                }
                got => Err(MsgError::WrongLength {
                    what: "REPORT field",
                    expected: REPORT_FIELD_LEN,
                    got,
                }),
            }
        };
        let v = as_u64(bytes)?;
        if index != 1 && bytes.len() != REPORT_FIELD_LEN {
            return Err(MsgError::WrongLength {
                what: "REPORT field",
                expected: REPORT_FIELD_LEN,
                got: bytes.len(),
            });
        }
        let f = f64::from_bits(v);
        match index {
            0 => self.size = v,
            1 => self.iters = v,
            2 => self.bw_peak = f,
            3 => self.bw_avg = f,
            4 => self.msg_rate = f,
            5 => self.bw_avg_p1 = f,
            6 => self.msg_rate_p1 = f,
            7 => self.bw_avg_p2 = f,
            8 => self.msg_rate_p2 = f,
            _ => {
                return Err(MsgError::WrongLength {
                    what: "REPORT field index",
                    expected: 9,
                    got: index,
                })
            }
        }
        Ok(())
    }

    /// Decodes a whole REPORT direction (the concatenated field bytes).
    pub fn decode(bytes: &[u8], layout: ReportLayout) -> Result<BwReport, MsgError> {
        let total: usize = (0..layout.fields()).map(|i| layout.field_len(i)).sum();
        check_len("REPORT", bytes, total)?;
        let mut report = BwReport::default();
        let mut pos = 0;
        for i in 0..layout.fields() {
            let len = layout.field_len(i);
            report.set_field(i, bytes.get(pos..pos + len).unwrap_or(&[]))?;
            pos += len;
        }
        Ok(report)
    }

    /// Bitwise equality (the doubles compared by their bits, so NaN garbage compares).
    pub fn bits_eq(&self, other: &BwReport) -> bool {
        self.size == other.size
            && self.iters == other.iters
            && [
                (self.bw_peak, other.bw_peak),
                (self.bw_avg, other.bw_avg),
                (self.msg_rate, other.msg_rate),
                (self.bw_avg_p1, other.bw_avg_p1),
                (self.msg_rate_p1, other.msg_rate_p1),
                (self.bw_avg_p2, other.bw_avg_p2),
                (self.msg_rate_p2, other.msg_rate_p2),
            ]
            .iter()
            .all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn selective_repeat_offer_hides_behind_the_nul() {
        let plain = encode_version(VERSION).unwrap();
        let offer = encode_version_offering_sr(VERSION).unwrap();
        assert_eq!(&offer[..8], &plain[..8]);
        assert_eq!(&offer[8..], b"uroce-sr");
        let v = decode_version(&offer).unwrap();
        assert_eq!((v.text.as_str(), v.value), ("6.06", 6.06));
        assert!(offers_selective_repeat(&offer));
        assert!(!offers_selective_repeat(&plain));
        // The marker inside the version text, or cut short, is no offer.
        let mut inside = *b"uroce-sruroce-sr";
        assert!(!offers_selective_repeat(&inside));
        inside[3] = 0;
        assert!(offers_selective_repeat(&inside));
        assert!(!offers_selective_repeat(&offer[..15]));
        assert_eq!(encode_version_offering_sr("1234.678"), None);
    }

    use super::*;

    const WRITE_BW_CLIENT_KEY: &[u8; 108] = b"0000:0001:000011:308158:0000027a:00007f23fc61f000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:0c:00000000:\0";

    #[test]
    fn key_round_trip_of_the_reference_example() {
        let k = KeyMessage::decode(WRITE_BW_CLIENT_KEY).expect("decodes");
        assert_eq!(k.lid, 0);
        assert_eq!(k.out_reads, 1);
        assert_eq!(k.qpn, 0x11);
        assert_eq!(k.psn, 0x308158);
        assert_eq!(k.rkey, 0x27a);
        assert_eq!(k.vaddr, 0x7f23_fc61_f000);
        assert_eq!(k.gid, crate::gid::gid_from_ipv4([10, 77, 0, 12].into()));
        assert_eq!(k.srqn, 0);
        assert_eq!(&k.encode().expect("encodes"), WRITE_BW_CLIENT_KEY);
    }

    #[test]
    fn key_colons_at_documented_offsets() {
        let bytes = KeyMessage {
            qpn: 0xff_ffff,
            psn: 0xab_cdef,
            rkey: u32::MAX,
            vaddr: u64::MAX,
            gid: [0xff; 16],
            srqn: u32::MAX,
            lid: u16::MAX,
            out_reads: u16::MAX,
        }
        .encode()
        .expect("encodes");
        let colons: Vec<usize> = bytes
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b':')
            .map(|(i, _)| i)
            .collect();
        let mut expected = vec![4, 9, 16, 23, 32, 49];
        expected.extend((52..=94).step_by(3));
        expected.extend([97, 106]);
        assert_eq!(colons, expected);
        assert_eq!(bytes[107], 0);
    }

    #[test]
    fn key_decode_is_tolerant_of_widths_but_not_garbage() {
        let mut narrow =
            b"0:1:11:308158:27a:7f23fc61f000:0:0:0:0:0:0:0:0:0:0:ff:ff:a:4d:0:0c:0:".to_vec();
        narrow.resize(KEY_LEN, 0);
        let k = KeyMessage::decode(&narrow).expect("narrow fields decode");
        assert_eq!(
            (k.qpn, k.rkey, k.gid[12], k.gid[15]),
            (0x11, 0x27a, 0x0a, 0x0c)
        );

        let mut bad = WRITE_BW_CLIENT_KEY.to_vec();
        bad[10] = b'g';
        assert!(matches!(
            KeyMessage::decode(&bad),
            Err(MsgError::NotHex { field: "QPN", .. })
        ));
        let mut wide = b"0:1:1000000:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:00:0:".to_vec();
        wide.resize(KEY_LEN, 0);
        assert!(matches!(
            KeyMessage::decode(&wide),
            Err(MsgError::TooWide {
                field: "QPN",
                value: 0x100_0000,
                ..
            })
        ));
        let mut no_trailing = WRITE_BW_CLIENT_KEY.to_vec();
        no_trailing[106] = 0;
        assert_eq!(
            KeyMessage::decode(&no_trailing),
            Err(MsgError::MissingColon { field: "SRQN" })
        );
        let mut one_char =
            b"0:1:11:308158:27a:7f23fc61f000:0:0:0:0:0:0:0:0:0:0:ff:ff:a:4d:0:c:0:".to_vec();
        one_char.resize(KEY_LEN, 0);
        assert!(matches!(
            KeyMessage::decode(&one_char),
            Err(MsgError::BadLastGidByte { .. })
        ));
        assert!(matches!(
            KeyMessage::decode(&WRITE_BW_CLIENT_KEY[..100]),
            Err(MsgError::WrongLength { got: 100, .. })
        ));
        let big_qpn = KeyMessage {
            qpn: 0x100_0000,
            ..KeyMessage::default()
        };
        assert!(matches!(
            big_qpn.encode(),
            Err(MsgError::TooWide { field: "QPN", .. })
        ));
    }

    #[test]
    fn key_without_gid() {
        let k = KeyMessage {
            lid: 0x12,
            out_reads: 0x80,
            qpn: 0xabc,
            psn: 0x123456,
            rkey: 0xdead,
            vaddr: 0x7f00_0000_1000,
            gid: [0; 16],
            srqn: 7,
        };
        let bytes = k.encode_no_gid().expect("encodes");
        assert_eq!(
            &bytes[..],
            &b"0012:0080:000abc:123456:0000dead:00007f0000001000:00000007\0"[..]
        );
        assert_eq!(KeyMessage::decode_no_gid(&bytes), Ok(k));
        let mut bad = bytes;
        bad[4] = b'x';
        assert!(KeyMessage::decode_no_gid(&bad).is_err());
    }

    #[test]
    fn version_mtu_sys() {
        assert_eq!(
            &encode_version(VERSION).expect("fits"),
            b"6.06\0\0\0\0\0\0\0\0\0\0\0\0"
        );
        assert!(encode_version("0123456789abcdef").is_err());
        let v = decode_version(b"5.60\0\0\0\0\0\0\0\0\0\0\0\0").expect("16 bytes");
        assert_eq!((v.text.as_str(), v.value), ("5.60", 5.60));
        assert!(decode_version(b"6.06\0\0\0\0").is_err());
        assert_eq!(encode_i32(4096), [0, 0, 0x10, 0]);
        assert_eq!(decode_i32(&[0, 0, 0, 0x40]), Ok(64));
        assert!(decode_i32(&[0, 0, 0]).is_err());
        assert_eq!(encode_mtu(Mtu::Mtu1024, MTU_LEN), b"3\0");
        assert_eq!(encode_mtu(Mtu::Mtu1024, MTU_LEN_LEGACY), b"3\0\0\0");
        assert_eq!(decode_mtu(b"2\0"), Ok(2));
        assert_eq!(decode_mtu(b"9\0"), Ok(9));
        assert_eq!(decode_mtu(b"x\0"), Ok(0));
        assert_eq!(decode_mtu(b"-3"), Ok(-3));
        assert!(decode_mtu(b"333").is_err());
        assert_eq!(mtu_from_enum(9), None);
        assert_eq!(mtu_from_enum(2).map(Mtu::bytes), Some(512));
        assert_eq!(Mtu::from_bytes(4096), Some(Mtu::Mtu4096));
    }

    #[test]
    fn report_fields_of_the_reference_example() {
        let r = BwReport {
            size: 65536,
            iters: 5,
            bw_peak: f64::from_bits(0x402c152be9f3b50e),
            bw_avg: f64::from_bits(0x402b45944a1fa26f),
            msg_rate: f64::from_bits(0x3f2c98b76944051b),
            ..BwReport::default()
        };
        let fields = r.encode_fields(ReportLayout::STANDARD);
        assert_eq!(fields.len(), 5);
        assert_eq!(fields[0], 65536u64.to_be_bytes());
        assert_eq!(fields[2], [0x40, 0x2c, 0x15, 0x2b, 0xe9, 0xf3, 0xb5, 0x0e]);
        let all: Vec<u8> = fields.concat();
        let back = BwReport::decode(&all, ReportLayout::STANDARD).expect("40 bytes");
        assert!(back.bits_eq(&r));
        assert_eq!(cfmt::fixed(back.bw_peak, 2), "14.04");
        let legacy = ReportLayout {
            wide_iters: false,
            per_port: true,
        };
        let f = r.encode_fields(legacy);
        assert_eq!(f.len(), 9);
        assert_eq!(f[1], 5u32.to_be_bytes());
        let back = BwReport::decode(&f.concat(), legacy).expect("68 bytes");
        assert!(back.bits_eq(&r));
        assert!(BwReport::decode(&all[..39], ReportLayout::STANDARD).is_err());
        let mut x = BwReport::default();
        assert!(x.set_field(9, &[0; 8]).is_err());
        assert!(x.set_field(2, &[0; 4]).is_err());
    }
}
