//! Entry point of the `oob_exchange` fuzz target, also run on random input by a stable
//! test: every decoder, and both sides of every exchange, fed arbitrary peer bytes.
//! A panic (or a broken round-trip assertion) is a finding.

use std::io::{self, Read, Write};

use crate::perftest::msg::{self, BwReport, KeyMessage, ReportLayout};
use crate::perftest::{
    run_exchange, BenchConfig, BenchHooks, Connection, HookError, LocalSystem, Negotiated,
    Perftest, Role, TestKind, Verb,
};
use crate::pingpong::{self, PpDest, Variant};

/// An in-memory peer: reads come from `input` (at most `chunk` bytes per call), writes
/// are counted and dropped.
#[derive(Debug)]
pub struct MemStream<'a> {
    input: &'a [u8],
    pos: usize,
    chunk: usize,
    /// Number of `write()` calls.
    pub writes: usize,
    /// Bytes written.
    pub written: usize,
}

impl<'a> MemStream<'a> {
    /// A stream whose reads return `input`, `chunk` (≥ 1) bytes at a time.
    pub fn new(input: &'a [u8], chunk: usize) -> MemStream<'a> {
        MemStream {
            input,
            pos: 0,
            chunk: chunk.max(1),
            writes: 0,
            written: 0,
        }
    }
}

impl Read for MemStream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let rest = self.input.get(self.pos..).unwrap_or(&[]);
        let n = rest.len().min(buf.len()).min(self.chunk);
        if let (Some(dst), Some(src)) = (buf.get_mut(..n), rest.get(..n)) {
            dst.copy_from_slice(src);
        }
        self.pos += n;
        Ok(n)
    }
}

impl Write for MemStream<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writes += 1;
        self.written += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Hooks that answer every RDMA-side step with fixed values: `qps` KEYs with the
/// `pt_write_bw` client's values (QPN counting up), and a fixed report per run.
#[derive(Debug, Default)]
pub struct FixedHooks {
    /// Number of KEYs to hand out.
    pub qps: usize,
    /// Number of `run` calls seen.
    pub runs: usize,
}

impl BenchHooks for FixedHooks {
    fn sleep(&mut self, _duration: std::time::Duration) {}

    fn negotiated(&mut self, _n: &Negotiated) -> Result<Vec<KeyMessage>, HookError> {
        Ok((0..self.qps)
            .map(|i| KeyMessage {
                qpn: 0x11 + u32::try_from(i).unwrap_or(0),
                psn: 0x30_8158,
                rkey: 0x27a,
                vaddr: 0x7f23_fc61_f000,
                gid: crate::gid::gid_from_ipv4([10, 77, 0, 12].into()),
                out_reads: 1,
                ..KeyMessage::default()
            })
            .collect())
    }

    fn connect(&mut self, _remote: &[KeyMessage]) -> Result<(), HookError> {
        Ok(())
    }

    fn run(&mut self, size: u64) -> Result<Option<BwReport>, HookError> {
        self.runs += 1;
        Ok(Some(BwReport {
            size,
            iters: 5,
            bw_peak: 1.0,
            bw_avg: 0.5,
            msg_rate: 0.001,
            ..BwReport::default()
        }))
    }
}

/// A configuration picked by one byte: verb, kind, `-b`, `-a`, `-q 2`, UD, role.
pub fn pick_config(selector: u8) -> (BenchConfig, Role) {
    let verb = match selector & 3 {
        0 => Verb::Send,
        1 => Verb::Write,
        2 => Verb::Read,
        _ => Verb::Atomic,
    };
    let kind = if selector & 4 == 0 {
        TestKind::Bw
    } else {
        TestKind::Lat
    };
    let mut cfg = BenchConfig::new(verb, kind);
    cfg.bidirectional = selector & 8 != 0 && kind == TestKind::Bw;
    cfg.run_all = selector & 16 != 0;
    if selector & 32 != 0 && kind == TestKind::Bw {
        cfg.num_qps = 2;
    }
    if selector & 64 != 0 && verb == Verb::Send {
        cfg.connection = Connection::Ud;
    }
    let role = if selector & 128 == 0 {
        Role::Client
    } else {
        Role::Server
    };
    (cfg, role)
}

fn check_decoders(data: &[u8]) {
    if let Some(bytes) = data.get(..msg::KEY_LEN) {
        if let Ok(k) = KeyMessage::decode(bytes) {
            let again = k.encode().map(|e| KeyMessage::decode(&e));
            assert_eq!(again, Ok(Ok(k)), "KEY decode/encode/decode round-trips");
        }
    }
    if let Some(bytes) = data.get(..msg::KEY_LEN_NO_GID) {
        if let Ok(k) = KeyMessage::decode_no_gid(bytes) {
            let again = k.encode_no_gid().map(|e| KeyMessage::decode_no_gid(&e));
            assert_eq!(again, Ok(Ok(k)), "short KEY round-trips");
        }
    }
    if let Some(bytes) = data.get(..msg::KEY_LEN_CM) {
        if let Ok(k) = KeyMessage::decode_cm(bytes) {
            let again = KeyMessage::decode_cm(&k.encode_cm());
            assert_eq!(again, Ok(k), "-R KEY decode/encode/decode round-trips");
        }
    }
    if let Some(bytes) = data.get(..pingpong::MSG_LEN) {
        if let Ok(d) = PpDest::decode(bytes) {
            let again = d.encode().map(|e| PpDest::decode(&e));
            assert_eq!(again, Ok(Ok(d)), "pingpong address round-trips");
            let _ = (
                pingpong::local_line(Variant::Ud, &d),
                pingpong::remote_line(&d),
            );
        }
    }
    if let Some(bytes) = data.get(..msg::VERSION_LEN) {
        let _ = msg::decode_version(bytes);
    }
    if let Some(bytes) = data.get(..msg::MTU_LEN) {
        let _ = msg::decode_mtu(bytes);
    }
    if let Some(bytes) = data.get(..msg::SYS_DATA_LEN) {
        let _ = msg::decode_i32(bytes);
    }
    if let Some(bytes) = data.get(..40) {
        if let Ok(r) = BwReport::decode(bytes, ReportLayout::STANDARD) {
            let enc = r.encode_fields(ReportLayout::STANDARD).concat();
            assert_eq!(enc.as_slice(), bytes, "REPORT bytes round-trip exactly");
            let _ = crate::console::bw_line(&r, Some(&r), crate::console::BwUnits::Gbps);
        }
    }
    let _ = crate::cfmt::atof(data);
    let _ = KeyMessage::decode(data);
    let _ = PpDest::decode(data);
}

/// Runs everything over `data`: byte 0 picks the perftest test and role, byte 1 the read
/// chunk size and the pingpong variant; the rest is the peer's byte stream. Returns the
/// number of bytes this side wrote in the perftest exchange.
pub fn exchange(data: &[u8]) -> usize {
    check_decoders(data);
    let selector = data.first().copied().unwrap_or(0);
    let knobs = data.get(1).copied().unwrap_or(0);
    let peer = data.get(2..).unwrap_or(&[]);
    let chunk = usize::from(knobs & 0x0f) + 1;

    let (mut cfg, role) = pick_config(selector);
    // Knob bit 4: perftest's -R exchange (binary KEYs, zero KEY pairs, no DONE).
    cfg.rdma_cm = knobs & 0x10 != 0;
    let qps = cfg.qps();
    let mut ex = Perftest::new(cfg, role, LocalSystem::default());
    let mut stream = MemStream::new(peer, chunk);
    let mut hooks = FixedHooks { qps, runs: 0 };
    let result = run_exchange(&mut stream, &mut ex, &mut hooks);
    if let Err(e) = &result {
        let _ = (e.to_string(), e.exit_status());
    }
    // A finished exchange wrote at least the four negotiation messages.
    if result.is_ok() {
        assert!(stream.writes >= 4, "a finished exchange wrote M1–M4");
    }

    let variant = match knobs >> 6 {
        0 => Variant::Rc,
        1 => Variant::Ud,
        _ => Variant::Srq,
    };
    let local = [PpDest {
        qpn: 0x21,
        psn: 0x86_3d34,
        ..PpDest::default()
    }];
    let mut s = MemStream::new(peer, chunk);
    if knobs & 0x20 == 0 {
        let _ = pingpong::client_exchange(&mut s, variant, &local);
    } else {
        let _ = pingpong::server_exchange(&mut s, variant, &local, |_| Ok(()));
    }
    stream.written
}
