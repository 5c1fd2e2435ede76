//! Packet captures for uroce: classic pcap files in and out, and the decoding of the
//! RoCEv2 packets inside them.
//!
//! * [`pcap`] — read (both byte orders, micro- and nanosecond magics) and write classic
//!   pcap files; every length is checked and records are capped at
//!   [`pcap::MAX_RECORD_LEN`], so no file content can make the reader panic or allocate
//!   without bound.
//! * [`link`] — Ethernet II (+ up to two VLAN tags), Linux cooked (SLL, SLL2) and raw IP
//!   link layers down to the IP packet.
//! * [`frame`] — per frame: a RoCEv2 packet (parsed by [`wire::frame::parse_l3`]), "not
//!   RoCE" (skipped, with the reason), or "garbled" (with the reason).
//! * [`decode`] — [`DecodeRecord`], the text line and JSON object of `uroce decode`, and the
//!   [`Decoder`] iterator with its [`Summary`] counts.
//! * [`fuzzing`] — the function the `pcap_decode` fuzz target drives.
#![forbid(unsafe_code)]

pub mod decode;
pub mod frame;
pub mod fuzzing;
pub mod link;
pub mod pcap;

pub use decode::{decode_all, DecodeRecord, Decoded, Decoder, IcrcStatus, Outcome, Summary};
pub use frame::{classify, Frame, FrameKind, Frames, Garbled, NotRoce, RoceFrame};
pub use pcap::{LinkType, PcapError, PcapReader, PcapWriter, Record, TsResolution};
