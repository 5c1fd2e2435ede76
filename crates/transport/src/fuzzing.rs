//! Hostile-input driver shared by the `transport_packets` cargo-fuzz target and the stable
//! property tests: arbitrary byte strings become packet sequences fed to a responder and to a
//! requester with work outstanding, interleaved with transmits and timer firings.
//!
//! [`drive`] panics (a fuzz finding) if an invariant breaks:
//! * every memory access the transport makes is validated by the [`Memory`] implementation;
//!   the transport never asks for a local (SGE) range it has not checked against the WQE —
//!   so no local access is ever refused — and on RC a refused remote access always leaves the
//!   responder in ERR (it NAKed, it did not carry on; UC drops the message);
//! * every packet the QPs emit parses back and matches its opcode's header set;
//! * no QP ever emits more completions than work requests were posted.

use crate::state::XrcRole;
use wire::{Lkey, Psn, Qpn, Rkey, RocePacketRepr};

use crate::{
    bring_up, AccessFlags, AtomicOp, LocalData, MemError, Memory, Mtu, Qp, QpAttr, QpConfig,
    QpState, RecvWr, RemoteAccess, RxMeta, SendWr, Service, Sge, SgeList, Time, WrOpcode,
};

/// Base address and size of the one valid region.
const VA: u64 = 0x1_0000;
const LEN: usize = 0x4000;
const LKEY: Lkey = Lkey(0x101);
const RKEY: Rkey = Rkey(0x181);

/// A one-region memory that counts what it refused.
#[derive(Debug)]
pub struct RecordingMemory {
    /// The region's bytes.
    pub bytes: Vec<u8>,
    /// Local accesses refused.
    pub refused_local: u64,
    /// Remote accesses refused.
    pub refused_remote: u64,
    /// Accesses granted.
    pub granted: u64,
}

impl Default for RecordingMemory {
    fn default() -> Self {
        RecordingMemory {
            bytes: vec![0; LEN],
            refused_local: 0,
            refused_remote: 0,
            granted: 0,
        }
    }
}

impl RecordingMemory {
    fn range(&self, addr: u64, len: usize) -> Option<usize> {
        let off = addr.checked_sub(VA)?;
        let end = off.checked_add(len as u64)?;
        (end <= LEN as u64).then_some(off as usize)
    }

    fn local(&mut self, lkey: Lkey, addr: u64, len: usize) -> Result<usize, MemError> {
        match self.range(addr, len) {
            Some(o) if lkey == LKEY => {
                self.granted += 1;
                Ok(o)
            }
            _ => {
                self.refused_local += 1;
                Err(MemError::OutOfBounds)
            }
        }
    }

    fn remote(&mut self, rkey: Rkey, va: u64, len: usize) -> Result<usize, MemError> {
        match self.range(va, len) {
            Some(o) if rkey == RKEY => {
                self.granted += 1;
                Ok(o)
            }
            _ => {
                self.refused_remote += 1;
                Err(MemError::InvalidKey)
            }
        }
    }
}

impl Memory for RecordingMemory {
    fn read_local(&mut self, lkey: Lkey, addr: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let o = self.local(lkey, addr, dst.len())?;
        dst.copy_from_slice(&self.bytes[o..o + dst.len()]);
        Ok(())
    }
    fn write_local(&mut self, lkey: Lkey, addr: u64, src: &[u8]) -> Result<(), MemError> {
        let o = self.local(lkey, addr, src.len())?;
        self.bytes[o..o + src.len()].copy_from_slice(src);
        Ok(())
    }
    fn check_remote(
        &mut self,
        rkey: Rkey,
        va: u64,
        len: u64,
        _: RemoteAccess,
    ) -> Result<(), MemError> {
        let len = usize::try_from(len).map_err(|_| MemError::OutOfBounds)?;
        self.remote(rkey, va, len).map(|_| ())
    }
    fn read_remote(&mut self, rkey: Rkey, va: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let o = self.remote(rkey, va, dst.len())?;
        dst.copy_from_slice(&self.bytes[o..o + dst.len()]);
        Ok(())
    }
    fn write_remote(&mut self, rkey: Rkey, va: u64, src: &[u8]) -> Result<(), MemError> {
        let o = self.remote(rkey, va, src.len())?;
        self.bytes[o..o + src.len()].copy_from_slice(src);
        Ok(())
    }
    fn atomic_remote(&mut self, rkey: Rkey, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        if va % 8 != 0 {
            self.refused_remote += 1;
            return Err(MemError::Misaligned);
        }
        let o = self.remote(rkey, va, 8)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes[o..o + 8]);
        let orig = u64::from_ne_bytes(b);
        self.bytes[o..o + 8].copy_from_slice(&op.apply(orig).to_ne_bytes());
        Ok(orig)
    }
    fn invalidate(&mut self, _: Rkey) -> Result<(), MemError> {
        self.refused_remote += 1;
        Err(MemError::InvalidateDenied)
    }
}

fn sge(addr: u64, length: u32) -> SgeList {
    SgeList::single(Sge {
        addr,
        length,
        lkey: LKEY,
    })
}

/// A QP under test with its memory and bookkeeping.
struct Subject {
    qp: Qp,
    mem: RecordingMemory,
    posted: u64,
    completed: u64,
    /// XRC (kind 1): the target's one XRC SRQ, named by [`XRC_SRQN`]; any other number in
    /// a request's XRCETH names no SRQ of the domain.
    srq: Option<crate::Srq>,
}

/// The XRC SRQ number the kind-1 requester names and the target serves.
const XRC_SRQN: u32 = 5;

impl Subject {
    fn new(
        qpn: u32,
        peer: u32,
        ty: Service,
        mtu: Mtu,
        cc: bool,
        xrc: Option<XrcRole>,
        sr: bool,
    ) -> Subject {
        let mut cfg = QpConfig::new(Qpn::new(qpn), ty);
        cfg.cc = cc.then(crate::DcqcnParams::default);
        cfg.xrc = xrc;
        cfg.selective_repeat = sr;
        cfg.uses_srq = xrc == Some(XrcRole::Target);
        cfg.caps.max_send_wr = 16;
        cfg.caps.max_recv_wr = 16;
        let mut qp = Qp::new(cfg);
        let attr = QpAttr {
            qp_access_flags: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            timeout: 5,
            retry_cnt: 3,
            rnr_retry: 3,
            qkey: 0x1111,
            ..QpAttr::default()
        };
        let r = bring_up(
            &mut qp,
            Qpn::new(peer),
            Psn::new(0),
            Psn::new(0),
            mtu,
            &attr,
        );
        assert!(r.is_ok(), "bring-up failed: {r:?}");
        Subject {
            qp,
            mem: RecordingMemory::default(),
            posted: 0,
            completed: 0,
            srq: (xrc == Some(XrcRole::Target)).then(|| crate::Srq::new(16, 4)),
        }
    }

    fn post_recvs(&mut self, n: u64) {
        for i in 0..n {
            let wr = RecvWr {
                wr_id: i,
                sges: sge(VA + 0x2000 + (i % 4) * 0x800, 0x800),
            };
            let ok = match self.srq.as_mut() {
                Some(s) => s.post(wr).is_ok(),
                None => self.qp.post_recv(wr).is_ok(),
            };
            if ok {
                self.posted += 1;
            }
        }
    }

    fn post_sends(&mut self, ty: Service) {
        let ops: &[WrOpcode] = match ty {
            Service::Rc => &[
                WrOpcode::Send,
                WrOpcode::RdmaWrite,
                WrOpcode::RdmaRead,
                WrOpcode::AtomicCmpAndSwp,
                WrOpcode::AtomicFetchAndAdd,
                WrOpcode::SendWithImm,
                WrOpcode::RdmaRead,
            ],
            Service::Uc => &[WrOpcode::Send, WrOpcode::RdmaWriteWithImm],
            Service::Ud => &[WrOpcode::Send, WrOpcode::SendWithImm],
        };
        for (i, &op) in ops.iter().enumerate() {
            let mut wr = SendWr::new(i as u64, op);
            let len = match ty {
                _ if op.is_atomic() => 8,
                Service::Ud => 100 + 50 * i as u32,
                _ => 300 + 700 * (i as u32 % 3),
            };
            wr.local = LocalData::Sges(sge(VA + (i as u64) * 0x100, len));
            wr.remote_addr = VA + 0x1000;
            wr.rkey = RKEY;
            wr.xrc_srqn = XRC_SRQN;
            if ty == Service::Ud {
                wr.ud = Some(crate::UdDest {
                    ah: 0,
                    remote_qpn: Qpn::new(0x12),
                    remote_qkey: wire::Qkey(0x1111),
                });
            }
            if self.qp.post_send(wr).is_ok() {
                self.posted += 1;
            }
        }
    }

    /// Transmit everything; check each packet parses and matches its opcode.
    fn drain(&mut self, now: Time, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while let Some(t) = self.qp.poll_transmit(now, &mut self.mem, buf) {
            let pkt = RocePacketRepr::parse(&buf[..t.len]).expect("emitted packets parse");
            pkt.validate().expect("emitted packets match their opcode");
            n += 1;
            assert!(n < 10_000, "runaway transmitter");
        }
        while self.qp.poll_completion().is_some() {
            self.completed += 1;
        }
        assert!(
            self.completed <= self.posted,
            "more completions than work requests"
        );
        assert_eq!(
            self.mem.refused_local, 0,
            "a local access outside the WQE's SGEs"
        );
        n
    }

    fn feed(&mut self, now: Time, pkt: &RocePacketRepr<'_>, ce: bool) {
        let before = self.mem.refused_remote;
        let meta = RxMeta {
            ce,
            ..RxMeta::default()
        };
        // An XRC target gets its SRQ only when the XRCETH names it (as the engine does).
        let named = pkt.xrceth.is_some_and(|x| x.srqn == XRC_SRQN);
        match self.srq.as_mut().filter(|_| named) {
            Some(s) => self
                .qp
                .handle_packet(now, pkt, &meta, &mut self.mem, Some(s)),
            None => self.qp.handle_packet(now, pkt, &meta, &mut self.mem, None),
        }
        // RC: a refused remote access is a NAK and ERR (class C/J). UC drops the message
        // silently and stays up (docs/wire.md §5.4).
        if self.mem.refused_remote > before && self.qp.service() == Service::Rc {
            assert_eq!(
                self.qp.state(),
                QpState::Err,
                "a refused remote access must end in a NAK and ERR"
            );
        }
    }
}

/// Script step kinds for [`script`]: the low 3 bits of a control byte.
pub mod ctl {
    /// Feed the packet to the responder (QPN forced to it, PSN folded into 0..32).
    pub const TO_RESPONDER: u8 = 0;
    /// Feed the packet to the requester.
    pub const TO_REQUESTER: u8 = 8;
    /// Keep the packet's own destination QPN.
    pub const RAW_QPN: u8 = 0x10;
    /// Keep the packet's own PSN.
    pub const RAW_PSN: u8 = 0x20;
    /// The packet arrived with the IP ECN field CE (congestion control runs for kinds 2–4).
    pub const CE: u8 = 0x40;
    /// Advance time and fire timers.
    pub const TICK: u8 = 6;
    /// Post two more receive WQEs at the responder.
    pub const POST_RECV: u8 = 7;
}

/// Build a [`drive`] script: `kind` selects the transport (0 = RC at MTU 256, 1 = XRC at MTU
/// 256 (initiator and target, the target's one SRQ numbered 5), 5 = RC at
/// MTU 1024, 6 = UC, 7 = UD; 2–4: RC at MTU 256 with DCQCN on both QPs; plus 8: the same
/// with selective repeat on both QPs where it applies, RC without XRC, docs/wire.md §5.6);
/// each step is a control byte ([`ctl`]) and packet bytes.
pub fn script(kind: u8, steps: &[(u8, &[u8])]) -> Vec<u8> {
    let mut out = vec![kind];
    for (c, bytes) in steps {
        let len = bytes.len().min(usize::from(u16::MAX));
        out.push(*c);
        out.extend_from_slice(&(len as u16).to_be_bytes());
        out.extend_from_slice(&bytes[..len]);
    }
    out
}

/// The valid request packets the requester of a `kind` script sends first (for mutation).
pub fn sample_requests(kind: u8) -> Vec<Vec<u8>> {
    let (ty, mtu, cc, xrc, sr) = kind_of(kind);
    let mut req = requester(ty, mtu, cc, xrc, sr);
    req.post_sends(ty);
    let mut buf = vec![0u8; 4096 + 64];
    let mut out = Vec::new();
    while let Some(t) = req.qp.poll_transmit(Time::ZERO, &mut req.mem, &mut buf) {
        out.push(buf[..t.len].to_vec());
    }
    out
}

/// (transport, path MTU, DCQCN, XRC, selective repeat) of a script kind: bit 3 turns
/// selective repeat on at both ends (RC without XRC only).
fn kind_of(kind: u8) -> (Service, Mtu, bool, bool, bool) {
    let (ty, mtu, cc, xrc) = match kind % 8 {
        0 => (Service::Rc, Mtu::Mtu256, false, false),
        1 => (Service::Rc, Mtu::Mtu256, false, true),
        2..=4 => (Service::Rc, Mtu::Mtu256, true, false),
        5 => (Service::Rc, Mtu::Mtu1024, false, false),
        6 => (Service::Uc, Mtu::Mtu256, false, false),
        _ => (Service::Ud, Mtu::Mtu256, false, false),
    };
    (ty, mtu, cc, xrc, kind & 8 != 0 && ty == Service::Rc && !xrc)
}

/// The requester subject of a script (QPN 0x11 toward 0x12).
fn requester(ty: Service, mtu: Mtu, cc: bool, xrc: bool, sr: bool) -> Subject {
    Subject::new(
        0x11,
        0x12,
        ty,
        mtu,
        cc,
        xrc.then_some(XrcRole::Initiator),
        sr,
    )
}

/// What a [`drive`] run did (so tests can check they reached deep paths).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriveStats {
    /// Completions the responder produced.
    pub responder_completions: u64,
    /// Completions the requester produced.
    pub requester_completions: u64,
    /// Memory accesses granted at the responder.
    pub responder_granted: u64,
    /// Remote accesses the responder's memory refused.
    pub responder_refused: u64,
    /// Packets the responder transmitted.
    pub responder_packets: u64,
    /// Final responder state.
    pub responder_state: Option<QpState>,
    /// CNPs the responder sent (CE-marked packets, kinds 2–4).
    pub responder_cnps: u64,
    /// CNPs the requester's congestion control handled.
    pub requester_cnps_handled: u64,
}

/// Interpret `data` as a script of hostile packets and actions against a responder and a
/// requester (RC, or UC/UD by the first byte); panic on any broken invariant.
pub fn drive(data: &[u8]) -> DriveStats {
    let kind = data.first().copied().unwrap_or(0);
    let (ty, mtu, cc, xrc, sr) = kind_of(kind);
    let mut resp = Subject::new(0x12, 0x11, ty, mtu, cc, xrc.then_some(XrcRole::Target), sr);
    let mut req = requester(ty, mtu, cc, xrc, sr);
    resp.post_recvs(6);
    req.post_sends(ty);
    let mut buf = vec![0u8; 4096 + 64];
    let mut now = Time::ZERO;
    req.drain(now, &mut buf);
    let mut rest = data.get(1..).unwrap_or(&[]);
    let mut steps = 0;
    let mut resp_pkts = 0;
    while rest.len() >= 3 && steps < 256 {
        steps += 1;
        let ctl = rest[0];
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
        rest = &rest[3..];
        let take = len.min(rest.len());
        let (chunk, tail) = rest.split_at(take);
        rest = tail;
        match ctl & 7 {
            // Advance time past any timer and fire it.
            6 => {
                now = now.add_nanos(4_096 << 6);
                req.qp.handle_timeout(now);
                resp.qp.handle_timeout(now);
            }
            7 => {
                resp.post_recvs(2);
            }
            _ => {
                let Ok(mut pkt) = RocePacketRepr::parse(chunk) else {
                    continue;
                };
                // Aim most packets at the subjects (right QPN, PSN near the live window).
                if ctl & 0x10 == 0 {
                    pkt.bth.dest_qp = if ctl & 8 == 0 {
                        Qpn::new(0x12)
                    } else {
                        Qpn::new(0x11)
                    };
                }
                if ctl & 0x20 == 0 {
                    pkt.bth.psn = Psn::new(pkt.bth.psn.value() % 32);
                }
                let ce = ctl & ctl::CE != 0;
                if ctl & 8 == 0 {
                    resp.feed(now, &pkt, ce);
                } else {
                    req.feed(now, &pkt, ce);
                }
            }
        }
        resp_pkts += resp.drain(now, &mut buf) as u64;
        req.drain(now, &mut buf);
    }
    DriveStats {
        responder_completions: resp.completed,
        requester_completions: req.completed,
        responder_granted: resp.mem.granted,
        responder_refused: resp.mem.refused_remote,
        responder_packets: resp_pkts,
        responder_state: Some(resp.qp.state()),
        responder_cnps: resp.qp.counters().np_cnp_sent,
        requester_cnps_handled: req.qp.counters().rp_cnp_handled,
    }
}

/// Fuzz body for DCQCN's settings string (`UROCE_DCQCN`, [`crate::DcqcnParams::apply`]) and
/// the reaction point run with whatever it accepted: the first line of `data` is the
/// settings, each later byte an event (CNP, packet sent, pacer check) at a time that moves
/// forward by an amount from the byte. Panics if a refused setting changed anything, if an
/// accepted one broke an invariant, or if the state machine panics or leaves its bounds.
pub fn dcqcn_settings(data: &[u8]) {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let (text, events) = data.split_at(split);
    let text = String::from_utf8_lossy(text);
    let mut p = crate::DcqcnParams::default();
    let before = p;
    if p.apply(&text).is_err() {
        assert_eq!(p, before, "a refused setting changed nothing");
    }
    assert!(p.min_rate <= p.max_rate && p.g <= 1024 && p.initial_alpha <= 1024);
    assert!(p.min_dec_fac <= 100);
    let mut d = crate::Dcqcn::new(p);
    let mut now = Time::ZERO;
    for &b in events.iter().skip(1).take(4096) {
        now = now.add_nanos(u64::from(b) << (b % 24));
        match b % 3 {
            0 => d.on_cnp_with_hint(now, Some(u64::from(b) << 20)),
            1 => d.on_sent(now, usize::from(b) * 17),
            _ => {
                let _ = d.may_send(now);
            }
        }
        assert!(d.alpha() <= 1024);
        if d.is_active() {
            assert!(
                d.rate() >= p.min_rate.max(1).min(p.max_rate),
                "{}",
                d.rate()
            );
            assert!(d.rate() <= p.max_rate.max(1));
        }
    }
}
