//! Classic libpcap files: reader and writer.
//!
//! Format (draft-ietf-opsawg-pcap, "PCAP Capture File Format"): a 24-byte file header
//! (magic, version 2.4, reserved, snaplen, link type), then records of a 16-byte header
//! (seconds, sub-second fraction, captured length, original length) followed by the
//! captured bytes. The magic number says the byte order of every later field and whether
//! the fraction counts microseconds (`0xA1B2C3D4`) or nanoseconds (`0xA1B23C4D`).
//!
//! Written by hand rather than with the `pcap-file` crate: the format is small, and owning
//! the parser lets us guarantee what the decoder needs on hostile input — every length is
//! checked before use, no record allocates more than [`MAX_RECORD_LEN`], and a damaged
//! file ends iteration with an error that names the record, never with a panic.
//! (`pcap-file` 2.0 also rejects records whose original length exceeds the snaplen, which
//! real capture tools write.)

use std::io::{self, Read, Write};
use std::time::Duration;

/// Largest captured length of one record that we read or write (256 KiB).
///
/// libpcap's own limit for Ethernet is 256 KiB (`MAXIMUM_SNAPLEN`); a larger length field is
/// a damaged file, and refusing it keeps a hostile file from making us allocate gigabytes.
pub const MAX_RECORD_LEN: u32 = 256 * 1024;

/// Snaplen we write in file headers (libpcap's `MAXIMUM_SNAPLEN`).
pub const WRITE_SNAPLEN: u32 = MAX_RECORD_LEN;

const MAGIC_MICRO: u32 = 0xA1B2_C3D4;
const MAGIC_NANO: u32 = 0xA1B2_3C4D;
/// pcapng section header block type, so we can say what the file is instead of "bad magic".
const PCAPNG_SHB: u32 = 0x0A0D_0D0A;
const FILE_HEADER_LEN: usize = 24;
/// Bytes of a record header.
pub const RECORD_HEADER_LEN: usize = 16;

/// A pcap link-layer header type (LINKTYPE_* value, <https://www.tcpdump.org/linktypes.html>).
///
/// Open newtype: unknown values are kept and printed as numbers.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct LinkType(pub u16);

impl LinkType {
    /// `LINKTYPE_ETHERNET`: Ethernet II / 802.3 frames without the FCS.
    pub const ETHERNET: LinkType = LinkType(1);
    /// `LINKTYPE_RAW`: a raw IPv4 or IPv6 packet (version nibble tells which).
    pub const RAW: LinkType = LinkType(101);
    /// `LINKTYPE_LINUX_SLL`: Linux "cooked" capture v1 (16-byte header, `tcpdump -i any`).
    pub const LINUX_SLL: LinkType = LinkType(113);
    /// `LINKTYPE_IPV4`: raw IPv4.
    pub const IPV4: LinkType = LinkType(228);
    /// `LINKTYPE_IPV6`: raw IPv6.
    pub const IPV6: LinkType = LinkType(229);
    /// `LINKTYPE_LINUX_SLL2`: Linux "cooked" capture v2 (20-byte header).
    pub const LINUX_SLL2: LinkType = LinkType(276);

    /// Short name for messages.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            LinkType::ETHERNET => "Ethernet",
            LinkType::RAW => "raw IP",
            LinkType::LINUX_SLL => "Linux cooked (SLL)",
            LinkType::IPV4 => "raw IPv4",
            LinkType::IPV6 => "raw IPv6",
            LinkType::LINUX_SLL2 => "Linux cooked v2 (SLL2)",
            _ => return None,
        })
    }
}

impl std::fmt::Display for LinkType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name} ({})", self.0),
            None => write!(f, "link type {}", self.0),
        }
    }
}

/// Unit of the sub-second timestamp field, chosen by the magic number.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TsResolution {
    /// Fraction counts microseconds (magic `0xA1B2C3D4`).
    Micro,
    /// Fraction counts nanoseconds (magic `0xA1B23C4D`).
    Nano,
}

/// Byte order of a pcap file's header fields.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Endian {
    /// Little-endian (written by x86 hosts, and by [`PcapWriter`]).
    Little,
    /// Big-endian.
    Big,
}

/// The 24-byte file header, decoded.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// Byte order of the file.
    pub endian: Endian,
    /// Timestamp fraction unit.
    pub resolution: TsResolution,
    /// Major version (always 2 for files we accept).
    pub version_major: u16,
    /// Minor version (4 in practice; older minors are read the same way).
    pub version_minor: u16,
    /// Largest captured length the writer promised (informational; not enforced on read,
    /// as tools disagree about it — [`MAX_RECORD_LEN`] is the enforced limit).
    pub snaplen: u32,
    /// Link-layer type of every record (low 16 bits of the link-type field).
    pub link_type: LinkType,
    /// Length in bytes of a frame check sequence at the end of every frame, when the
    /// header's FCS bits announce one (bit 26 set; bits 28–31 give the length in 16-bit
    /// units). `None` when not announced.
    pub fcs_len: Option<u8>,
}

/// One record of a pcap file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Capture time since the Unix epoch (nanosecond precision; microsecond files are
    /// scaled). A fraction field out of range is carried into the seconds, not rejected.
    pub timestamp: Duration,
    /// Length of the frame on the wire; larger than `data.len()` when the capture was cut
    /// short by the snaplen.
    pub orig_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

impl Record {
    /// True when the capture kept fewer bytes than the frame had on the wire.
    pub fn is_cut_short(&self) -> bool {
        u64::try_from(self.data.len()).is_ok_and(|len| u64::from(self.orig_len) > len)
    }
}

/// Why a pcap file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    /// The underlying reader or writer failed.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The file is shorter than the 24-byte pcap file header.
    #[error("not a pcap file: only {have} bytes, a pcap file header needs 24")]
    TruncatedFileHeader {
        /// Bytes present.
        have: usize,
    },
    /// The file is a pcapng file, which we do not read.
    #[error(
        "this is a pcapng file, not a classic pcap file; convert it with `editcap -F pcap IN OUT` \
         or capture with `tcpdump -w` / `dumpcap -P`"
    )]
    Pcapng,
    /// The magic number is not one of the four classic-pcap magics.
    #[error("not a pcap file: unknown magic number 0x{magic:08x}")]
    BadMagic {
        /// The first four bytes, read big-endian.
        magic: u32,
    },
    /// A major version other than 2.
    #[error("unsupported pcap version {major}.{minor} (expected 2.x)")]
    BadVersion {
        /// Major version.
        major: u16,
        /// Minor version.
        minor: u16,
    },
    /// The file ends inside a record header.
    #[error("file truncated: record {record} header has {have} of 16 bytes")]
    TruncatedRecordHeader {
        /// 1-based record number.
        record: u64,
        /// Bytes present.
        have: usize,
    },
    /// The file ends inside a record's data.
    #[error("file truncated: record {record} has {have} of {need} captured bytes")]
    TruncatedRecordData {
        /// 1-based record number.
        record: u64,
        /// Bytes present.
        have: usize,
        /// Captured length announced by the record header.
        need: u32,
    },
    /// A record announces more captured bytes than [`MAX_RECORD_LEN`].
    #[error(
        "record {record}: captured length {len} exceeds the limit of {max} bytes (damaged file?)"
    )]
    RecordTooLong {
        /// 1-based record number.
        record: u64,
        /// The announced captured length.
        len: u64,
        /// [`MAX_RECORD_LEN`].
        max: u32,
    },
    /// A timestamp does not fit a pcap record (seconds beyond `u32::MAX`).
    #[error("timestamp {0:?} does not fit in a pcap record")]
    TimestampOutOfRange(Duration),
}

/// Reads `buf.len()` bytes unless the stream ends first; returns how many were read.
fn read_full<R: Read>(reader: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while let Some(rest) = buf.get_mut(filled..) {
        if rest.is_empty() {
            break;
        }
        match reader.read(rest) {
            Ok(0) => break,
            Ok(n) => filled += n.min(rest.len()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

fn u16_at(bytes: &[u8], at: usize, endian: Endian) -> u16 {
    let mut b = [0u8; 2];
    if let Some(src) = bytes.get(at..at + 2) {
        b.copy_from_slice(src);
    }
    match endian {
        Endian::Little => u16::from_le_bytes(b),
        Endian::Big => u16::from_be_bytes(b),
    }
}

fn u32_at(bytes: &[u8], at: usize, endian: Endian) -> u32 {
    let mut b = [0u8; 4];
    if let Some(src) = bytes.get(at..at + 4) {
        b.copy_from_slice(src);
    }
    match endian {
        Endian::Little => u32::from_le_bytes(b),
        Endian::Big => u32::from_be_bytes(b),
    }
}

impl FileHeader {
    /// Decodes a 24-byte file header.
    pub fn parse(bytes: &[u8]) -> Result<FileHeader, PcapError> {
        if bytes.len() < FILE_HEADER_LEN {
            return Err(PcapError::TruncatedFileHeader { have: bytes.len() });
        }
        let magic_be = u32_at(bytes, 0, Endian::Big);
        let (endian, resolution) = match (magic_be, magic_be.swap_bytes()) {
            (MAGIC_MICRO, _) => (Endian::Big, TsResolution::Micro),
            (MAGIC_NANO, _) => (Endian::Big, TsResolution::Nano),
            (_, MAGIC_MICRO) => (Endian::Little, TsResolution::Micro),
            (_, MAGIC_NANO) => (Endian::Little, TsResolution::Nano),
            (PCAPNG_SHB, _) => return Err(PcapError::Pcapng),
            _ => return Err(PcapError::BadMagic { magic: magic_be }),
        };
        let version_major = u16_at(bytes, 4, endian);
        let version_minor = u16_at(bytes, 6, endian);
        if version_major != 2 {
            return Err(PcapError::BadVersion {
                major: version_major,
                minor: version_minor,
            });
        }
        let snaplen = u32_at(bytes, 16, endian);
        let link_field = u32_at(bytes, 20, endian);
        // Link-type field: bits 0–15 link type, bit 26 "FCS length present", bits 28–31 FCS
        // length in 16-bit words (pcap draft §4, "LinkType and additional information").
        let fcs_len = if link_field & (1 << 26) != 0 {
            // The value is at most 15 words = 30 bytes, so it fits a u8.
            u8::try_from((link_field >> 28) * 2).ok()
        } else {
            None
        };
        Ok(FileHeader {
            endian,
            resolution,
            version_major,
            version_minor,
            snaplen,
            link_type: LinkType((link_field & 0xFFFF) as u16),
            fcs_len,
        })
    }
}

/// Streaming reader of a classic pcap file.
///
/// Iterating yields `Ok(Record)` per record, then `None` at a clean end of file. A damaged
/// record yields one `Err` (naming the 1-based record number) and then `None`: the reader
/// never resynchronises inside a damaged file, because record boundaries are lost.
#[derive(Debug)]
pub struct PcapReader<R> {
    reader: R,
    header: FileHeader,
    records_read: u64,
    done: bool,
}

impl<R: Read> PcapReader<R> {
    /// Reads and checks the file header.
    pub fn new(mut reader: R) -> Result<Self, PcapError> {
        let mut buf = [0u8; FILE_HEADER_LEN];
        let have = read_full(&mut reader, &mut buf)?;
        let header = FileHeader::parse(buf.get(..have).unwrap_or(&[]))?;
        Ok(PcapReader {
            reader,
            header,
            records_read: 0,
            done: false,
        })
    }

    /// A reader of records only, for a stream whose file header is known from elsewhere
    /// (the counterpart of [`PcapWriter::continuing`]; e.g. the record batches of the attach
    /// protocol).
    pub fn continuing(reader: R, header: FileHeader) -> Self {
        PcapReader {
            reader,
            header,
            records_read: 0,
            done: false,
        }
    }

    /// The file header.
    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// Link type of every record.
    pub fn link_type(&self) -> LinkType {
        self.header.link_type
    }

    /// Number of records returned so far (so the last one returned has this 1-based number).
    pub fn records_read(&self) -> u64 {
        self.records_read
    }

    /// Reads the next record: `Ok(None)` at a clean end of file.
    pub fn next_record(&mut self) -> Result<Option<Record>, PcapError> {
        if self.done {
            return Ok(None);
        }
        let result = self.read_one();
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result
    }

    fn read_one(&mut self) -> Result<Option<Record>, PcapError> {
        let record = self.records_read + 1;
        let endian = self.header.endian;
        let mut hdr = [0u8; RECORD_HEADER_LEN];
        let have = read_full(&mut self.reader, &mut hdr)?;
        if have == 0 {
            return Ok(None);
        }
        if have < RECORD_HEADER_LEN {
            return Err(PcapError::TruncatedRecordHeader { record, have });
        }
        let ts_sec = u32_at(&hdr, 0, endian);
        let ts_frac = u32_at(&hdr, 4, endian);
        let incl_len = u32_at(&hdr, 8, endian);
        let orig_len = u32_at(&hdr, 12, endian);
        if incl_len > MAX_RECORD_LEN {
            return Err(PcapError::RecordTooLong {
                record,
                len: u64::from(incl_len),
                max: MAX_RECORD_LEN,
            });
        }
        // Bounded by MAX_RECORD_LEN above, so this allocation is at most 256 KiB.
        let mut data = vec![0u8; incl_len as usize];
        let got = read_full(&mut self.reader, &mut data)?;
        if got < data.len() {
            return Err(PcapError::TruncatedRecordData {
                record,
                have: got,
                need: incl_len,
            });
        }
        let nanos = match self.header.resolution {
            TsResolution::Micro => u64::from(ts_frac) * 1_000,
            TsResolution::Nano => u64::from(ts_frac),
        };
        // Sums of a u32 and a u64 carry of at most ~4.3e12 cannot overflow a Duration.
        let timestamp = Duration::from_secs(u64::from(ts_sec)) + Duration::from_nanos(nanos);
        self.records_read = record;
        Ok(Some(Record {
            timestamp,
            orig_len,
            data,
        }))
    }
}

impl<R: Read> Iterator for PcapReader<R> {
    type Item = Result<Record, PcapError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// The 24-byte header of a little-endian classic pcap file (version 2.4) with `link_type`,
/// timestamps at `resolution` and `snaplen`.
pub fn file_header(link_type: LinkType, resolution: TsResolution, snaplen: u32) -> [u8; 24] {
    let magic = match resolution {
        TsResolution::Micro => MAGIC_MICRO,
        TsResolution::Nano => MAGIC_NANO,
    };
    let mut hdr = [0u8; FILE_HEADER_LEN];
    hdr[0..4].copy_from_slice(&magic.to_le_bytes());
    hdr[4..6].copy_from_slice(&2u16.to_le_bytes());
    hdr[6..8].copy_from_slice(&4u16.to_le_bytes());
    // bytes 8..16: thiszone and sigfigs, both 0 (pcap draft: "SHOULD be 0").
    hdr[16..20].copy_from_slice(&snaplen.to_le_bytes());
    hdr[20..24].copy_from_slice(&u32::from(link_type.0).to_le_bytes());
    hdr
}

/// Writer of classic pcap files: little-endian, version 2.4, snaplen [`WRITE_SNAPLEN`].
///
/// Used by `uroce capture` to record the frames the NIC sends and receives; every file it
/// writes is readable by [`PcapReader`], tcpdump and Wireshark.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    writer: W,
    resolution: TsResolution,
    records_written: u64,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header for `link_type` with timestamps at `resolution`.
    pub fn new(
        writer: W,
        link_type: LinkType,
        resolution: TsResolution,
    ) -> Result<Self, PcapError> {
        Self::with_snaplen(writer, link_type, resolution, WRITE_SNAPLEN)
    }

    /// [`PcapWriter::new`] announcing `snaplen` in the file header (the writer does not cut
    /// frames itself: pass the first `snaplen` bytes to [`PcapWriter::write_frame_cut`]).
    pub fn with_snaplen(
        mut writer: W,
        link_type: LinkType,
        resolution: TsResolution,
        snaplen: u32,
    ) -> Result<Self, PcapError> {
        writer.write_all(&file_header(link_type, resolution, snaplen))?;
        Ok(PcapWriter {
            writer,
            resolution,
            records_written: 0,
        })
    }

    /// A writer of records only, for a file whose header is already written (or is being
    /// assembled elsewhere, e.g. records batched in memory and appended to a shared file).
    pub fn continuing(writer: W, resolution: TsResolution) -> Self {
        PcapWriter {
            writer,
            resolution,
            records_written: 0,
        }
    }

    /// The writer underneath (to take out what was written to an in-memory buffer).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.writer
    }

    /// Writes an Ethernet-type pcap file with nanosecond timestamps (what `uroce capture`
    /// produces).
    pub fn ethernet(writer: W) -> Result<Self, PcapError> {
        Self::new(writer, LinkType::ETHERNET, TsResolution::Nano)
    }

    /// Appends one whole frame captured at `timestamp` (time since the Unix epoch).
    pub fn write_frame(&mut self, timestamp: Duration, frame: &[u8]) -> Result<(), PcapError> {
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        self.write_frame_cut(timestamp, frame, len)
    }

    /// Appends the first bytes of a frame whose length on the wire was `orig_len`
    /// (`orig_len` is raised to `frame.len()` if smaller).
    pub fn write_frame_cut(
        &mut self,
        timestamp: Duration,
        frame: &[u8],
        orig_len: u32,
    ) -> Result<(), PcapError> {
        let record = self.records_written + 1;
        let incl_len = match u32::try_from(frame.len()) {
            Ok(len) if len <= MAX_RECORD_LEN => len,
            _ => {
                return Err(PcapError::RecordTooLong {
                    record,
                    len: u64::try_from(frame.len()).unwrap_or(u64::MAX),
                    max: MAX_RECORD_LEN,
                })
            }
        };
        let ts_sec = u32::try_from(timestamp.as_secs())
            .map_err(|_| PcapError::TimestampOutOfRange(timestamp))?;
        let ts_frac = match self.resolution {
            TsResolution::Micro => timestamp.subsec_micros(),
            TsResolution::Nano => timestamp.subsec_nanos(),
        };
        let mut hdr = [0u8; RECORD_HEADER_LEN];
        hdr[0..4].copy_from_slice(&ts_sec.to_le_bytes());
        hdr[4..8].copy_from_slice(&ts_frac.to_le_bytes());
        hdr[8..12].copy_from_slice(&incl_len.to_le_bytes());
        hdr[12..16].copy_from_slice(&orig_len.max(incl_len).to_le_bytes());
        self.writer.write_all(&hdr)?;
        self.writer.write_all(frame)?;
        self.records_written = record;
        Ok(())
    }

    /// Number of records written.
    pub fn records_written(&self) -> u64 {
        self.records_written
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> Result<(), PcapError> {
        self.writer.flush()?;
        Ok(())
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> Result<W, PcapError> {
        self.writer.flush()?;
        Ok(self.writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_bytes(magic: u32, endian: Endian, link: u32) -> Vec<u8> {
        let mut v = Vec::new();
        let put32 = |v: &mut Vec<u8>, x: u32| match endian {
            Endian::Little => v.extend_from_slice(&x.to_le_bytes()),
            Endian::Big => v.extend_from_slice(&x.to_be_bytes()),
        };
        let put16 = |v: &mut Vec<u8>, x: u16| match endian {
            Endian::Little => v.extend_from_slice(&x.to_le_bytes()),
            Endian::Big => v.extend_from_slice(&x.to_be_bytes()),
        };
        put32(&mut v, magic);
        put16(&mut v, 2);
        put16(&mut v, 4);
        put32(&mut v, 0);
        put32(&mut v, 0);
        put32(&mut v, 65535);
        put32(&mut v, link);
        v
    }

    fn record_bytes(endian: Endian, sec: u32, frac: u32, data: &[u8], orig: u32) -> Vec<u8> {
        let mut v = Vec::new();
        for x in [sec, frac, data.len() as u32, orig] {
            match endian {
                Endian::Little => v.extend_from_slice(&x.to_le_bytes()),
                Endian::Big => v.extend_from_slice(&x.to_be_bytes()),
            }
        }
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn reads_all_four_magics() {
        for (magic, res) in [
            (MAGIC_MICRO, TsResolution::Micro),
            (MAGIC_NANO, TsResolution::Nano),
        ] {
            for endian in [Endian::Little, Endian::Big] {
                let mut file = header_bytes(magic, endian, 1);
                file.extend(record_bytes(endian, 7, 250, b"abc", 60));
                let mut r = PcapReader::new(&file[..]).expect("header");
                assert_eq!(r.header().endian, endian);
                assert_eq!(r.header().resolution, res);
                assert_eq!(r.link_type(), LinkType::ETHERNET);
                let rec = r.next_record().expect("ok").expect("one record");
                assert_eq!(rec.data, b"abc");
                assert_eq!(rec.orig_len, 60);
                assert!(rec.is_cut_short());
                let nanos = if res == TsResolution::Micro {
                    250_000
                } else {
                    250
                };
                assert_eq!(rec.timestamp, Duration::new(7, nanos));
                assert!(r.next_record().expect("clean eof").is_none());
                assert_eq!(r.records_read(), 1);
            }
        }
    }

    #[test]
    fn header_errors() {
        assert!(matches!(
            PcapReader::new(&b"\xd4\xc3\xb2"[..]),
            Err(PcapError::TruncatedFileHeader { have: 3 })
        ));
        let mut ng = header_bytes(PCAPNG_SHB, Endian::Big, 1);
        ng.truncate(24);
        assert!(matches!(PcapReader::new(&ng[..]), Err(PcapError::Pcapng)));
        let bad = header_bytes(0x1234_5678, Endian::Big, 1);
        assert!(matches!(
            PcapReader::new(&bad[..]),
            Err(PcapError::BadMagic { magic: 0x1234_5678 })
        ));
        let mut v3 = header_bytes(MAGIC_MICRO, Endian::Little, 1);
        v3[4] = 3;
        assert!(matches!(
            PcapReader::new(&v3[..]),
            Err(PcapError::BadVersion { major: 3, minor: 4 })
        ));
    }

    #[test]
    fn fcs_bits_and_link_type_mask() {
        // FCS present, 2 words = 4 bytes, link type Ethernet.
        let link = 1 | (1 << 26) | (2 << 28);
        let h =
            FileHeader::parse(&header_bytes(MAGIC_MICRO, Endian::Little, link)).expect("header");
        assert_eq!(h.link_type, LinkType::ETHERNET);
        assert_eq!(h.fcs_len, Some(4));
    }

    #[test]
    fn truncation_and_absurd_lengths_are_errors() {
        let mut file = header_bytes(MAGIC_MICRO, Endian::Little, 1);
        file.extend(record_bytes(Endian::Little, 1, 0, &[1, 2, 3, 4], 4));
        let whole = file.clone();

        // Cut inside the second record's header.
        let mut cut = whole.clone();
        cut.extend_from_slice(&[0u8; 5]);
        let mut r = PcapReader::new(&cut[..]).expect("header");
        assert!(r.next().expect("first").is_ok());
        assert!(matches!(
            r.next(),
            Some(Err(PcapError::TruncatedRecordHeader { record: 2, have: 5 }))
        ));
        assert!(r.next().is_none(), "iteration stops after an error");

        // Cut inside the first record's data.
        let cut = &whole[..whole.len() - 1];
        let mut r = PcapReader::new(cut).expect("header");
        assert!(matches!(
            r.next(),
            Some(Err(PcapError::TruncatedRecordData {
                record: 1,
                have: 3,
                need: 4
            }))
        ));

        // Absurd captured length: refused before allocating.
        let mut huge = header_bytes(MAGIC_MICRO, Endian::Little, 1);
        huge.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        let mut r = PcapReader::new(&huge[..]).expect("header");
        assert!(matches!(
            r.next(),
            Some(Err(PcapError::RecordTooLong { record: 1, .. }))
        ));
    }

    #[test]
    fn writer_round_trip_both_resolutions() {
        let frames: Vec<(Duration, Vec<u8>)> = vec![
            (Duration::new(1_796_050_403, 460_021_000), vec![0xAA; 60]),
            (
                Duration::new(1_796_050_404, 123_456_789),
                (0..=255u8).collect(),
            ),
            (Duration::new(0, 0), Vec::new()),
        ];
        for res in [TsResolution::Micro, TsResolution::Nano] {
            let mut w = PcapWriter::new(Vec::new(), LinkType::ETHERNET, res).expect("header");
            for (ts, data) in &frames {
                w.write_frame(*ts, data).expect("write");
            }
            w.write_frame_cut(Duration::new(5, 0), &[1, 2], 1500)
                .expect("write cut");
            assert_eq!(w.records_written(), 4);
            let bytes = w.into_inner().expect("flush");
            let r = PcapReader::new(&bytes[..]).expect("header");
            assert_eq!(r.header().resolution, res);
            assert_eq!(r.header().snaplen, WRITE_SNAPLEN);
            let got: Vec<Record> = r.collect::<Result<_, _>>().expect("records");
            assert_eq!(got.len(), 4);
            for ((ts, data), rec) in frames.iter().zip(&got) {
                assert_eq!(&rec.data, data);
                assert_eq!(rec.orig_len as usize, data.len());
                let want = match res {
                    TsResolution::Nano => *ts,
                    TsResolution::Micro => Duration::new(ts.as_secs(), ts.subsec_micros() * 1000),
                };
                assert_eq!(rec.timestamp, want);
            }
            assert_eq!(got[3].orig_len, 1500);
            assert!(got[3].is_cut_short());
        }
    }

    #[test]
    fn writer_refuses_what_the_reader_would_refuse() {
        let mut w = PcapWriter::ethernet(Vec::new()).expect("header");
        let big = vec![0u8; MAX_RECORD_LEN as usize + 1];
        assert!(matches!(
            w.write_frame(Duration::ZERO, &big),
            Err(PcapError::RecordTooLong { .. })
        ));
        let far = Duration::from_secs(u64::from(u32::MAX) + 1);
        assert!(matches!(
            w.write_frame(far, &[0]),
            Err(PcapError::TimestampOutOfRange(_))
        ));
        assert_eq!(w.records_written(), 0);
        let max = vec![0u8; MAX_RECORD_LEN as usize];
        w.write_frame(Duration::ZERO, &max)
            .expect("largest allowed record");
        let bytes = w.into_inner().expect("flush");
        let recs: Vec<Record> = PcapReader::new(&bytes[..])
            .expect("hdr")
            .collect::<Result<_, _>>()
            .expect("read");
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].data.len(), MAX_RECORD_LEN as usize);
    }
}
