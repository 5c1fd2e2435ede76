//! The checked RC workload behind `uroce sim --transport`.
//!
//! Two endpoints, one RC QP each, connected to each other; both directions carry a random mix
//! of SEND (± immediate), RDMA WRITE (± immediate), RDMA READ and atomics (CAS / FAA) with
//! sizes drawn from a range, some WRs unsignaled. Payloads are a deterministic function of
//! (seed, direction, message index), so every byte is verified where it lands:
//!
//! * SEND / WRITE WITH IMM — at the receiver: receive completions in posting order, exactly
//!   once, right opcode, length, immediate and bytes;
//! * WRITE — in the target memory when the sender's completion arrives;
//! * READ — in the initiator's buffer against the (static) source region;
//! * atomics — the returned original value against a model of the target words, and the
//!   final memory against the model.
//!
//! Completions must arrive exactly once, in order, with the expected status: success on a
//! healthy (if lossy) network; with a partition, success until the first error, which must be
//! "transport retry counter exceeded", then "Work Request Flushed Error" for everything else,
//! including work posted after the QP reached ERR. A run that stops with work outstanding and
//! nothing scheduled is a hang; a run with no completion for a long virtual time is a stall.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::net::Ipv4Addr;

use transport::wire::{Psn, Qpn};
use transport::{
    bring_up, AccessFlags, Completion, Counters, LocalData, Mtu, QpAttr, QpConfig, QpState, RecvWr,
    SendFlags, SendWr, Service, Sge, SgeList, Time, WcOpcode, WcStatus, WrOpcode,
};

use crate::net::{LinkConfig, NetStats, Sim, Step};
use crate::rng::{check_stream, fill_stream, splitmix64, Rng};
use crate::MrAccess;

/// Operation classes a workload mixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// SEND or SEND WITH IMMEDIATE.
    Send,
    /// RDMA WRITE or RDMA WRITE WITH IMMEDIATE.
    Write,
    /// RDMA READ.
    Read,
    /// Compare-and-swap or fetch-and-add.
    Atomic,
}

impl Op {
    /// Parse "send", "write", "read" or "atomic".
    pub fn parse(s: &str) -> Option<Op> {
        match s.trim().to_ascii_lowercase().as_str() {
            "send" => Some(Op::Send),
            "write" => Some(Op::Write),
            "read" => Some(Op::Read),
            "atomic" => Some(Op::Atomic),
            _ => None,
        }
    }
}

/// Workload parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadConfig {
    /// Drives every random choice (network and workload).
    pub seed: u64,
    /// Messages (work requests) in total, split over the two directions.
    pub messages: u64,
    /// Smallest message (bytes) for SEND/WRITE/READ.
    pub size_min: u32,
    /// Largest message (bytes).
    pub size_max: u32,
    /// Operation mix (uniform over the list).
    pub ops: Vec<Op>,
    /// Link behaviour (loss, duplication, reordering, corruption, partition, timing).
    pub link: LinkConfig,
    /// Path MTU.
    pub mtu: Mtu,
    /// Transport retry count; `None` = 7 (rxe: retry forever) without a partition, 3 with one.
    pub retry_cnt: Option<u8>,
    /// RNR retry count (7 = forever).
    pub rnr_retry: u8,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// RNR NAK timer code the responders send.
    pub min_rnr_timer: u8,
    /// Work requests outstanding per direction.
    pub window: u32,
    /// Receive WQEs each side keeps posted.
    pub recv_depth: u32,
    /// Delay before a consumed receive WQE is posted again (0 = at once); with a small
    /// `recv_depth` this makes the responder run dry and exercises RNR NAKs.
    pub recv_delay_ns: u64,
    /// Initiator depth and responder resources.
    pub max_rd_atomic: u8,
    /// Work requests posted after a QP reached ERR (each must be flushed).
    pub after_error_posts: u32,
    /// A run with work outstanding and no completion for this long (virtual) is a stall.
    pub stall_ns: u64,
    /// Run traffic in both directions (each QP is requester and responder at once).
    pub bidirectional: bool,
    /// Test hook: flip one byte of every N-th delivered SEND before it is checked (0 = off),
    /// to prove the checker catches corrupted delivery.
    pub sabotage_every: u64,
    /// The requesters' unacknowledged-PSN window. Go-back-N resends up to this many packets
    /// after a timeout, so the default (32) stays near the simulated path's bandwidth-delay
    /// product; the NIC default is rxe's 128.
    pub max_unacked_psns: u32,
    /// Selective repeat (docs/wire.md §5.6) on side 0 and side 1. Negotiation turns it on at
    /// both ends or neither; one side alone is a test of the forced, unagreed case.
    pub selective_repeat: [bool; 2],
}

impl Default for WorkloadConfig {
    fn default() -> WorkloadConfig {
        WorkloadConfig {
            seed: 1,
            messages: 1000,
            size_min: 1,
            size_max: 4096,
            ops: vec![Op::Send, Op::Write, Op::Read, Op::Atomic],
            link: LinkConfig::default(),
            mtu: Mtu::Mtu1024,
            retry_cnt: None,
            rnr_retry: 7,
            timeout: 8,
            min_rnr_timer: 1,
            window: 32,
            recv_depth: 128,
            recv_delay_ns: 0,
            max_rd_atomic: 16,
            after_error_posts: 4,
            stall_ns: 10_000_000_000,
            bidirectional: true,
            max_unacked_psns: 16,
            sabotage_every: 0,
            selective_repeat: [false; 2],
        }
    }
}

/// NAKs received by the requesters, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Naks {
    /// PSN sequence error.
    pub seq: u64,
    /// Receiver not ready.
    pub rnr: u64,
    /// Invalid request.
    pub invalid_request: u64,
    /// Remote access error.
    pub remote_access: u64,
    /// Remote operational error.
    pub remote_op: u64,
}

/// The outcome of a run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Work requests posted.
    pub messages_posted: u64,
    /// Work requests that completed successfully (data verified).
    pub messages_completed: u64,
    /// Bytes checked against the expected contents.
    pub bytes_verified: u64,
    /// Packets the posted messages take at the path MTU (request packets of SEND/WRITE,
    /// response packets of READ, one per ATOMIC): what a lossless path carries once.
    pub payload_packets: u64,
    /// Packets retransmitted by the requesters.
    pub retransmissions: u64,
    /// Retransmission-timer probes (resends before the local ACK timeout).
    pub rto_probes: u64,
    /// NAKs received, by kind.
    pub naks: Naks,
    /// Duplicate requests the responders saw.
    pub duplicates_received: u64,
    /// Local ACK timeouts that fired.
    pub timeouts: u64,
    /// Send and receive completions by status (`ibv_wc_status_str` text).
    pub status_counts: BTreeMap<&'static str, u64>,
    /// Number of integrity violations (0 = pass).
    pub violations: u64,
    /// The first violations, described.
    pub violation_details: Vec<String>,
    /// Virtual time at the end.
    pub virtual_time_ns: u64,
    /// Virtual time of the last completion (the end of the transfer; timers may run later).
    pub last_completion_ns: u64,
    /// Network statistics.
    pub net: NetStats,
    /// Final QP states of the two sides.
    pub final_states: [QpState; 2],
    /// Per-QP transport counters of the two sides.
    pub counters: [Counters; 2],
    /// Memory accesses the transports made that the MR tables refused.
    pub refused_memory_accesses: u64,
}

impl Report {
    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.violations == 0
    }
}

const MAX_DETAILS: usize = 20;
const ATOMIC_WORDS: usize = 16;
const VA_STRIDE: u64 = 0x1_0000_0000;

/// Regions at one side.
#[derive(Clone, Copy, Debug)]
struct Regions {
    /// Requester: payload source, READ/atomic destination (one slot per window entry).
    lsrc: usize,
    /// Responder: receive buffers (one slot per receive WQE).
    recv: usize,
    /// Responder: WRITE targets (one slot per window entry of the peer).
    wtarget: usize,
    /// Responder: static READ source.
    rsrc: usize,
    /// Responder: atomic words.
    atom: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecvKind {
    Send,
    WriteImm,
}

/// A receive completion the destination must produce, in order.
#[derive(Clone, Copy, Debug)]
struct Expect {
    idx: u64,
    kind: RecvKind,
    size: u32,
    key: u64,
    imm: Option<u32>,
}

/// A posted send WR.
#[derive(Clone, Copy, Debug)]
struct Posted {
    idx: u64,
    op: WrOpcode,
    size: u32,
    slot: u32,
    signaled: bool,
    key: u64,
    remote_off: u64,
    expect_orig: u64,
    /// Posted after the QP reached ERR: must be flushed.
    after_error: bool,
}

/// One direction of traffic: requester at `src`, responder at `dst` (side indices).
#[derive(Debug)]
struct Dir {
    src: usize,
    dst: usize,
    total: u64,
    next_msg: u64,
    outstanding: VecDeque<Posted>,
    expects: VecDeque<Expect>,
    atom_model: Vec<u64>,
    rng: Rng,
    error_seen: bool,
    after_error_posted: u32,
}

/// A run in progress.
#[derive(Debug)]
pub struct Workload {
    cfg: WorkloadConfig,
    sim: Sim,
    regions: [Regions; 2],
    dirs: Vec<Dir>,
    slot: u64,
    rsrc_len: u64,
    rsrc_key: u64,
    reposts: BinaryHeap<Reverse<(Time, u64, usize, u32)>>,
    repost_seq: u64,
    last_progress: Time,
    /// The error a run may legitimately end in: "transport retry counter exceeded" with a
    /// partition; "RNR retry counter exceeded" with a finite RNR retry count and late
    /// receive re-posting.
    allowed_error: Option<WcStatus>,
    /// Sides whose completions must be drained after the current one is serviced.
    service_later: Vec<usize>,
    /// A receive WQE was posted since the last kick (the responder may now answer an RNR).
    repost_kick: bool,
    partition: bool,
    report: Report,
}

fn payload_key(seed: u64, dir: usize, idx: u64) -> u64 {
    let mut s = seed ^ ((dir as u64) << 62) ^ idx.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    splitmix64(&mut s)
}

impl Workload {
    /// Set up endpoints, memory, QPs and posted receives.
    pub fn new(cfg: WorkloadConfig) -> Workload {
        let mut cfg = cfg;
        if cfg.ops.is_empty() {
            cfg.ops = vec![Op::Send];
        }
        if cfg.size_min > cfg.size_max {
            std::mem::swap(&mut cfg.size_min, &mut cfg.size_max);
        }
        cfg.window = cfg.window.clamp(1, 1024);
        cfg.recv_depth = cfg.recv_depth.clamp(1, 4096);
        let partition = cfg.link.partition_at.is_some();
        let retry_cnt = cfg
            .retry_cnt
            .unwrap_or(if partition { 3 } else { 7 })
            .min(7);
        let mut sim = Sim::new(cfg.seed, cfg.link);
        let slot = u64::from(cfg.size_max.max(8)).div_ceil(8) * 8;
        let rsrc_len = slot * 4;
        let rsrc_key = payload_key(cfg.seed, 3, u64::MAX);
        let mut regions = Vec::new();
        for side in 0..2u32 {
            let ep = sim.add_endpoint(Ipv4Addr::new(10, 0, 0, side as u8 + 1));
            let mem = &mut sim.endpoints[ep].mem;
            let base = VA_STRIDE * (u64::from(side) * 8 + 1);
            let w = u64::from(cfg.window);
            let r = Regions {
                lsrc: mem.register(base, (slot * w) as usize, MrAccess::LOCAL_WRITE),
                recv: mem.register(
                    base + VA_STRIDE,
                    (slot * u64::from(cfg.recv_depth)) as usize,
                    MrAccess::LOCAL_WRITE,
                ),
                // Remote writes and atomics need LOCAL_WRITE too (REG_MR's rule).
                wtarget: mem.register(
                    base + 2 * VA_STRIDE,
                    (slot * w) as usize,
                    MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE,
                ),
                rsrc: mem.register(
                    base + 3 * VA_STRIDE,
                    rsrc_len as usize,
                    MrAccess::REMOTE_READ,
                ),
                atom: mem.register(
                    base + 4 * VA_STRIDE,
                    ATOMIC_WORDS * 8,
                    MrAccess::LOCAL_WRITE | MrAccess::REMOTE_ATOMIC,
                ),
            };
            let mut src = vec![0; rsrc_len as usize];
            fill_stream(rsrc_key ^ u64::from(side), &mut src);
            mem.write(r.rsrc, 0, &src);
            regions.push(r);
        }
        let qpns = [Qpn::new(0x11), Qpn::new(0x12)];
        for side in 0..2 {
            let mut qc = QpConfig::new(qpns[side], Service::Rc);
            qc.caps.max_send_wr = cfg.window + cfg.after_error_posts + 1;
            qc.caps.max_recv_wr = cfg.recv_depth;
            qc.caps.max_send_sge = 1;
            qc.caps.max_recv_sge = 1;
            qc.max_unacked_psns = cfg.max_unacked_psns;
            qc.selective_repeat = cfg.selective_repeat[side];
            sim.add_qp(side, qc, 1 - side);
            let attr = QpAttr {
                qp_access_flags: AccessFlags::LOCAL_WRITE
                    | AccessFlags::REMOTE_WRITE
                    | AccessFlags::REMOTE_READ
                    | AccessFlags::REMOTE_ATOMIC,
                max_rd_atomic: cfg.max_rd_atomic,
                max_dest_rd_atomic: cfg.max_rd_atomic,
                min_rnr_timer: cfg.min_rnr_timer,
                timeout: cfg.timeout,
                retry_cnt,
                rnr_retry: cfg.rnr_retry,
                ..QpAttr::default()
            };
            // Both sides start at PSN 0xFFFFF0 so every run crosses the 24-bit wrap.
            let psn = Psn::new(0xFF_FFF0);
            let r = bring_up(
                sim.qp_mut(side, 0),
                qpns[1 - side],
                psn,
                psn,
                cfg.mtu,
                &attr,
            );
            debug_assert!(r.is_ok(), "bring-up: {r:?}");
        }
        let regions = [regions[0], regions[1]];
        let n = cfg.messages;
        let (t0, t1) = if cfg.bidirectional {
            (n - n / 2, n / 2)
        } else {
            (n, 0)
        };
        let dirs = [(0usize, 1usize, t0), (1, 0, t1)]
            .into_iter()
            .enumerate()
            .map(|(d, (src, dst, total))| Dir {
                src,
                dst,
                total,
                next_msg: 0,
                outstanding: VecDeque::new(),
                expects: VecDeque::new(),
                atom_model: vec![0; ATOMIC_WORDS],
                rng: Rng::fork(cfg.seed, 0x574B_0000 + d as u64),
                error_seen: false,
                after_error_posted: 0,
            })
            .collect();
        let allowed_error = if partition {
            Some(WcStatus::RetryExcErr)
        } else if cfg.rnr_retry < 7 && cfg.recv_delay_ns > 0 {
            Some(WcStatus::RnrRetryExcErr)
        } else {
            None
        };
        let mut w = Workload {
            report: Report {
                seed: cfg.seed,
                ..Report::default()
            },
            cfg,
            sim,
            regions,
            dirs,
            slot,
            rsrc_len,
            rsrc_key,
            reposts: BinaryHeap::new(),
            repost_seq: 0,
            last_progress: Time::ZERO,
            allowed_error,
            repost_kick: false,
            service_later: Vec::new(),
            partition,
        };
        for side in 0..2 {
            for s in 0..w.cfg.recv_depth {
                w.post_recv(side, s);
            }
        }
        w
    }

    fn violation(&mut self, msg: String) {
        self.report.violations += 1;
        if self.report.violation_details.len() < MAX_DETAILS {
            let t = self.sim.now();
            self.report.violation_details.push(format!("[t={t}] {msg}"));
        }
    }

    fn post_recv(&mut self, side: usize, slot: u32) {
        let r = self.regions[side];
        let mem = &self.sim.endpoints[side].mem;
        let reg = mem.region(r.recv);
        let sge = Sge {
            addr: reg.va + u64::from(slot) * self.slot,
            length: self.slot as u32,
            lkey: reg.lkey,
        };
        let wr = RecvWr {
            wr_id: u64::from(slot),
            sges: SgeList::single(sge),
        };
        self.repost_kick = true;
        let qp = self.sim.qp_mut(side, 0);
        if qp.state() == QpState::Err {
            return;
        }
        if let Err(e) = qp.post_recv(wr) {
            self.violation(format!("side {side}: post_recv refused: {e}"));
        }
    }

    /// Post work in direction `d` until its window is full.
    fn fill_window(&mut self, d: usize) {
        loop {
            let dir = &self.dirs[d];
            let state = self.sim.endpoints[dir.src].qps[0].qp.state();
            if state == QpState::Err {
                if self.allowed_error.is_some()
                    && dir.error_seen
                    && dir.after_error_posted < self.cfg.after_error_posts
                {
                    self.post_one(d, true);
                    continue;
                }
                return;
            }
            if dir.next_msg >= dir.total || dir.outstanding.len() >= self.cfg.window as usize {
                return;
            }
            self.post_one(d, false);
        }
    }

    fn post_one(&mut self, d: usize, after_error: bool) {
        let cfg_ops_len = self.cfg.ops.len() as u64;
        let (size_min, size_max) = (self.cfg.size_min, self.cfg.size_max);
        let seed = self.cfg.seed;
        let slot_bytes = self.slot;
        let window = u64::from(self.cfg.window);
        let rsrc_len = self.rsrc_len;
        let dir = &mut self.dirs[d];
        let idx = if after_error {
            dir.after_error_posted += 1;
            dir.total + u64::from(dir.after_error_posted)
        } else {
            let i = dir.next_msg;
            dir.next_msg += 1;
            i
        };
        let op = self.cfg.ops[dir.rng.below(cfg_ops_len) as usize];
        let slot = (idx % window) as u32;
        let key = payload_key(seed, d, idx);
        let (src, dst) = (dir.src, dir.dst);
        let (lr, rr) = (self.regions[src], self.regions[dst]);
        let size = if op == Op::Atomic {
            8
        } else {
            dir.rng.range(u64::from(size_min), u64::from(size_max)) as u32
        };
        let last = !after_error && idx + 1 == dir.total;
        // Some SEND/WRITEs are unsignaled; the WR that fills the window is always signaled
        // (an application waiting for a slot needs a completion to come).
        let fills_window = dir.outstanding.len() + 1 >= window as usize;
        let signaled = matches!(op, Op::Read | Op::Atomic)
            || last
            || after_error
            || fills_window
            || !dir.rng.chance(0.125);
        let with_extra = dir.rng.chance(0.5);
        let (lreg_va, lkey) = {
            let reg = self.sim.endpoints[src].mem.region(lr.lsrc);
            (reg.va, reg.lkey)
        };
        let (rkey_w, va_w, rkey_r, va_r, rkey_a, va_a) = {
            let m = &self.sim.endpoints[dst].mem;
            let (w, r, a) = (m.region(rr.wtarget), m.region(rr.rsrc), m.region(rr.atom));
            (w.rkey, w.va, r.rkey, r.va, a.rkey, a.va)
        };
        let local_off = u64::from(slot) * slot_bytes;
        let opcode = match (op, with_extra) {
            (Op::Send, false) => WrOpcode::Send,
            (Op::Send, true) => WrOpcode::SendWithImm,
            (Op::Write, false) => WrOpcode::RdmaWrite,
            (Op::Write, true) => WrOpcode::RdmaWriteWithImm,
            (Op::Read, _) => WrOpcode::RdmaRead,
            (Op::Atomic, false) => WrOpcode::AtomicFetchAndAdd,
            (Op::Atomic, true) => WrOpcode::AtomicCmpAndSwp,
        };
        let mut wr = SendWr::new(idx, opcode);
        wr.flags = if signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::default()
        };
        wr.local = LocalData::Sges(SgeList::single(Sge {
            addr: lreg_va + local_off,
            length: size,
            lkey,
        }));
        wr.imm_data = idx as u32;
        let mut posted = Posted {
            idx,
            op: opcode,
            size,
            slot,
            signaled,
            key,
            remote_off: 0,
            expect_orig: 0,
            after_error,
        };
        let mut atomic_word = 0usize;
        match op {
            Op::Send | Op::Write => {
                let mut b = vec![0; size as usize];
                fill_stream(key, &mut b);
                self.sim.endpoints[src].mem.write(lr.lsrc, local_off, &b);
                if op == Op::Write {
                    posted.remote_off = u64::from(slot) * slot_bytes;
                    wr.remote_addr = va_w + posted.remote_off;
                    wr.rkey = rkey_w;
                }
            }
            Op::Read => {
                posted.remote_off = dir.rng.below(rsrc_len - u64::from(size) + 1);
                wr.remote_addr = va_r + posted.remote_off;
                wr.rkey = rkey_r;
                // Poison the destination so a READ that moved nothing cannot pass.
                let mut b = vec![0; size as usize];
                fill_stream(!key, &mut b);
                self.sim.endpoints[src].mem.write(lr.lsrc, local_off, &b);
            }
            Op::Atomic => {
                atomic_word = dir.rng.below(ATOMIC_WORDS as u64) as usize;
                wr.remote_addr = va_a + atomic_word as u64 * 8;
                wr.rkey = rkey_a;
                let mut b = [0; 8];
                fill_stream(!key, &mut b);
                self.sim.endpoints[src].mem.write(lr.lsrc, local_off, &b);
            }
        }
        let dir = &mut self.dirs[d];
        if op == Op::Atomic {
            let orig = dir.atom_model[atomic_word];
            if opcode == WrOpcode::AtomicFetchAndAdd {
                wr.compare_add = dir.rng.next_u64();
                if !after_error {
                    dir.atom_model[atomic_word] = orig.wrapping_add(wr.compare_add);
                }
            } else {
                wr.compare_add = if dir.rng.chance(0.5) {
                    orig
                } else {
                    dir.rng.next_u64()
                };
                wr.swap = dir.rng.next_u64();
                if !after_error && wr.compare_add == orig {
                    dir.atom_model[atomic_word] = wr.swap;
                }
            }
            posted.expect_orig = orig;
        }
        if !after_error
            && matches!(
                opcode,
                WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm
            )
        {
            dir.expects.push_back(Expect {
                idx,
                kind: if opcode == WrOpcode::RdmaWriteWithImm {
                    RecvKind::WriteImm
                } else {
                    RecvKind::Send
                },
                size,
                key,
                imm: opcode.has_imm().then_some(idx as u32),
            });
        }
        dir.outstanding.push_back(posted);
        self.report.messages_posted += 1;
        let r = self.sim.qp_mut(src, 0).post_send(wr);
        if r.is_ok() {
            self.report.payload_packets += u64::from(size.div_ceil(self.cfg.mtu.bytes()).max(1));
        }
        if let Err(e) = r {
            self.violation(format!("dir {d}: post_send of wr {idx} refused: {e}"));
            self.dirs[d].outstanding.pop_back();
        }
    }

    fn count_status(&mut self, s: WcStatus) {
        *self.report.status_counts.entry(s.as_str()).or_insert(0) += 1;
    }

    /// Verify a send WR that completed successfully (explicitly or, if unsignaled, implied
    /// by a later completion).
    fn verify_success(&mut self, d: usize, p: Posted) {
        let (src, dst) = (self.dirs[d].src, self.dirs[d].dst);
        let (lr, rr) = (self.regions[src], self.regions[dst]);
        let size = p.size as usize;
        let ok = match p.op {
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => {
                // The receiver must already have completed it (the ACK follows execution).
                let delivered = self.dirs[d].expects.front().is_none_or(|e| e.idx > p.idx);
                if !delivered {
                    self.violation(format!(
                        "dir {d}: wr {} completed at the sender but the receiver never got it",
                        p.idx
                    ));
                }
                if p.op == WrOpcode::RdmaWriteWithImm {
                    let b = self.sim.endpoints[dst]
                        .mem
                        .read(rr.wtarget, p.remote_off, size);
                    check_stream(p.key, &b)
                } else {
                    true
                }
            }
            WrOpcode::RdmaWrite => {
                let b = self.sim.endpoints[dst]
                    .mem
                    .read(rr.wtarget, p.remote_off, size);
                check_stream(p.key, &b)
            }
            WrOpcode::RdmaRead => {
                let lo = u64::from(p.slot) * self.slot;
                let got = self.sim.endpoints[src].mem.read(lr.lsrc, lo, size);
                let want = self.sim.endpoints[dst]
                    .mem
                    .read(rr.rsrc, p.remote_off, size);
                got == want
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                let lo = u64::from(p.slot) * self.slot;
                let got = self.sim.endpoints[src].mem.read(lr.lsrc, lo, 8);
                got == p.expect_orig.to_ne_bytes()
            }
            // The workload posts none of these (it binds no memory windows, and the
            // transport refuses the opcodes uroce does not implement).
            WrOpcode::SendWithInv
            | WrOpcode::LocalInv
            | WrOpcode::BindMw
            | WrOpcode::Tso
            | WrOpcode::Flush
            | WrOpcode::AtomicWrite => true,
        };
        if ok {
            if p.op.is_write() || p.op.is_read_or_atomic() {
                self.report.bytes_verified += size as u64;
            }
        } else {
            self.violation(format!(
                "dir {d}: wr {} ({:?}, {} bytes): data mismatch",
                p.idx, p.op, p.size
            ));
        }
        self.report.messages_completed += 1;
        self.last_progress = self.sim.now();
    }

    fn on_send_completion(&mut self, d: usize, c: Completion) {
        // Unsignaled WRs before this one completed successfully without a completion.
        loop {
            let Some(front) = self.dirs[d].outstanding.front().copied() else {
                self.violation(format!(
                    "dir {d}: completion for wr {} with nothing outstanding",
                    c.wr_id
                ));
                return;
            };
            if front.idx == c.wr_id {
                break;
            }
            if !front.signaled && front.idx < c.wr_id {
                // No completion, and a later WR completed: it succeeded (a flushed or failed
                // WR always reports, signaled or not — IBA 10.7.3.1).
                self.dirs[d].outstanding.pop_front();
                self.verify_success(d, front);
                continue;
            }
            self.violation(format!(
                "dir {d}: completion for wr {} ({}) but wr {} is next: lost, duplicated or reordered",
                c.wr_id, c.status, front.idx
            ));
            // Resynchronise if the WR is further back; otherwise drop the completion.
            if self.dirs[d].outstanding.iter().any(|p| p.idx == c.wr_id) {
                while self.dirs[d]
                    .outstanding
                    .front()
                    .is_some_and(|p| p.idx != c.wr_id)
                {
                    self.dirs[d].outstanding.pop_front();
                }
                continue;
            }
            return;
        }
        let Some(p) = self.dirs[d].outstanding.pop_front() else {
            return;
        };
        self.count_status(c.status);
        self.last_progress = self.sim.now();
        let want_op = p.op.wc_opcode();
        if c.opcode != want_op {
            self.violation(format!(
                "dir {d}: wr {}: completion opcode {:?}, want {:?}",
                p.idx, c.opcode, want_op
            ));
        }
        let dir_err = self.dirs[d].error_seen;
        match c.status {
            WcStatus::Success if !dir_err && !p.after_error => {
                if c.byte_len != p.size {
                    self.violation(format!(
                        "dir {d}: wr {}: byte_len {} want {}",
                        p.idx, c.byte_len, p.size
                    ));
                }
                self.verify_success(d, p);
            }
            s if !dir_err && Some(s) == self.allowed_error => {
                self.dirs[d].error_seen = true;
                let now = self.sim.now();
                if self.cfg.link.partition_at.is_some_and(|t| now < t) {
                    self.violation(format!("dir {d}: \"{s}\" before the partition"));
                }
                if s == WcStatus::RnrRetryExcErr {
                    self.tear_down_peer(d);
                }
            }
            WcStatus::WrFlushErr if dir_err => {}
            s => {
                self.violation(format!(
                    "dir {d}: wr {} ({:?}): unexpected status \"{}\"{}",
                    p.idx,
                    p.op,
                    s,
                    if dir_err {
                        " after the first error"
                    } else {
                        ""
                    }
                ));
                if s != WcStatus::Success {
                    self.dirs[d].error_seen = true;
                }
            }
        }
    }

    /// After an RNR retry exhaustion the connection is dead, as an application would see it:
    /// the peer QP is moved to ERR too (otherwise its requester, which retries forever,
    /// would keep resending to a QP that drops everything). Its work is then flushed.
    fn tear_down_peer(&mut self, d: usize) {
        let peer = self.dirs[d].dst;
        let err = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        if self
            .sim
            .qp_mut(peer, 0)
            .modify(&err, transport::QpAttrMask::STATE)
            .is_err()
        {
            self.violation(format!("side {peer}: modify to ERR refused"));
        }
        for dir in &mut self.dirs {
            if dir.src == peer {
                dir.error_seen = true;
            }
        }
        self.service_later.push(peer);
    }

    fn on_recv_completion(&mut self, d: usize, c: Completion) {
        let side = self.dirs[d].dst;
        self.count_status(c.status);
        if c.status != WcStatus::Success {
            let state = self.sim.endpoints[side].qps[0].qp.state();
            if !(c.status == WcStatus::WrFlushErr
                && state == QpState::Err
                && self.allowed_error.is_some())
            {
                self.violation(format!(
                    "side {side}: receive wr {} completed with \"{}\"",
                    c.wr_id, c.status
                ));
            }
            return;
        }
        self.last_progress = self.sim.now();
        let Some(e) = self.dirs[d].expects.pop_front() else {
            self.violation(format!(
                "side {side}: receive completion with no message outstanding (duplicate delivery)"
            ));
            return;
        };
        let want_op = match e.kind {
            RecvKind::Send => WcOpcode::Recv,
            RecvKind::WriteImm => WcOpcode::RecvRdmaWithImm,
        };
        if c.opcode != want_op || c.byte_len != e.size || c.imm_data != e.imm {
            self.violation(format!(
                "side {side}: receive for message {}: got {:?}/{} bytes/imm {:?}, want {:?}/{}/{:?} (lost, duplicated or reordered)",
                e.idx, c.opcode, c.byte_len, c.imm_data, want_op, e.size, e.imm
            ));
        } else if e.kind == RecvKind::Send {
            let r = self.regions[side];
            let lo = c.wr_id * self.slot;
            let mem = &mut self.sim.endpoints[side].mem;
            let len = mem.region(r.recv).len;
            let n = self.cfg.sabotage_every;
            if n > 0 && e.idx % n == 0 && e.size > 0 && lo < len {
                let b = mem.read(r.recv, lo, 1)[0];
                mem.write(r.recv, lo, &[b ^ 0x40]);
            }
            let ok = lo
                .checked_add(u64::from(e.size))
                .is_some_and(|end| end <= len)
                && check_stream(e.key, &mem.read(r.recv, lo, e.size as usize));
            if ok {
                self.report.bytes_verified += u64::from(e.size);
            } else {
                self.violation(format!(
                    "side {side}: message {}: received bytes differ",
                    e.idx
                ));
            }
        }
        // Keep the receive queue stocked (possibly late, to exercise RNR).
        let slot = c.wr_id as u32;
        if self.cfg.recv_delay_ns == 0 {
            self.post_recv(side, slot);
        } else {
            self.repost_seq += 1;
            let at = self.sim.now().add_nanos(self.cfg.recv_delay_ns);
            self.reposts
                .push(Reverse((at, self.repost_seq, side, slot)));
        }
    }

    /// Drain the completions of one side and refill its windows.
    fn service(&mut self, side: usize) {
        while let Some(c) = self.sim.qp_mut(side, 0).poll_completion() {
            if c.is_recv() {
                let d = if self.dirs[0].dst == side { 0 } else { 1 };
                self.on_recv_completion(d, c);
            } else {
                let d = if self.dirs[0].src == side { 0 } else { 1 };
                self.on_send_completion(d, c);
            }
        }
        let posted_before = self.report.messages_posted;
        for d in 0..self.dirs.len() {
            if self.dirs[d].src == side {
                self.fill_window(d);
            }
        }
        // Posting in ERR completes at once: drain again.
        if self.sim.endpoints[side].qps[0].qp.state() == QpState::Err {
            while let Some(c) = self.sim.qp_mut(side, 0).poll_completion() {
                if c.is_recv() {
                    let d = if self.dirs[0].dst == side { 0 } else { 1 };
                    self.on_recv_completion(d, c);
                } else {
                    let d = if self.dirs[0].src == side { 0 } else { 1 };
                    self.on_send_completion(d, c);
                }
            }
        }
        if self.report.messages_posted != posted_before || self.repost_kick {
            self.repost_kick = false;
            self.sim.kick(side);
        }
    }

    fn outstanding_work(&self) -> bool {
        self.dirs
            .iter()
            .any(|d| !d.outstanding.is_empty() || d.next_msg < d.total)
    }

    /// Run to the end and check everything.
    pub fn run(mut self) -> Report {
        for side in 0..2 {
            self.service(side);
        }
        loop {
            let next_net = self.sim.next_event_at();
            if let Some(Reverse((t, _, side, slot))) = self.reposts.peek().copied() {
                if next_net.is_none_or(|n| t <= n) {
                    self.reposts.pop();
                    self.sim.advance_to(t);
                    self.post_recv(side, slot);
                    self.service(side);
                    continue;
                }
            }
            match self.sim.step() {
                Step::Idle => break,
                Step::Touched(side) => {
                    self.service(side);
                    while let Some(other) = self.service_later.pop() {
                        self.service(other);
                    }
                }
                Step::Nothing => {}
            }
            if self.outstanding_work()
                && self.sim.now().nanos_since(self.last_progress) > self.cfg.stall_ns
            {
                let ms = self.cfg.stall_ns / 1_000_000;
                self.violation(format!(
                    "stall: no completion for {ms} virtual ms with work outstanding"
                ));
                break;
            }
        }
        self.finish()
    }

    fn finish(mut self) -> Report {
        for d in 0..self.dirs.len() {
            let dir = &self.dirs[d];
            let n_out = dir.outstanding.len();
            let unposted = dir.total - dir.next_msg;
            let state = self.sim.endpoints[dir.src].qps[0].qp.state();
            if n_out > 0 && std::env::var_os("UROCE_SIM_DEBUG").is_some() {
                eprintln!("{:#?}", self.sim.endpoints[dir.src].qps[0].qp);
                eprintln!("{:#?}", self.sim.endpoints[dir.dst].qps[0].qp);
            }
            if n_out > 0 {
                self.violation(format!(
                    "hang: dir {d}: {n_out} work requests never completed (QP {state}, nothing scheduled)"
                ));
            }
            if unposted > 0 && state != QpState::Err {
                self.violation(format!("hang: dir {d}: {unposted} messages never posted"));
            }
            let dir = &self.dirs[d];
            let (n_exp, first_exp) = (dir.expects.len(), dir.expects.front().map_or(0, |e| e.idx));
            let (error_seen, after_posted, unfinished) = (
                dir.error_seen,
                dir.after_error_posted,
                dir.next_msg < dir.total,
            );
            if !error_seen && n_exp > 0 && (self.allowed_error.is_none() || state != QpState::Err) {
                self.violation(format!(
                    "dir {d}: {n_exp} messages never delivered (first: {first_exp})"
                ));
            }
            if self.allowed_error.is_some() {
                if error_seen {
                    if state != QpState::Err {
                        self.violation(format!(
                            "dir {d}: QP in {state} after retry exceeded, want ERR"
                        ));
                    }
                    if after_posted < self.cfg.after_error_posts {
                        self.violation(format!("dir {d}: work after the error was not accepted"));
                    }
                } else if unfinished && self.partition {
                    self.violation(format!("dir {d}: partition never detected"));
                }
            }
            if !self.partition && !error_seen {
                // Atomic targets must hold exactly what the model says.
                let dir = &self.dirs[d];
                let dst = dir.dst;
                let reg = self.regions[dst].atom;
                let model = dir.atom_model.clone();
                let bytes = self.sim.endpoints[dst].mem.read(reg, 0, ATOMIC_WORDS * 8);
                for (k, want) in model.iter().enumerate() {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&bytes[k * 8..k * 8 + 8]);
                    if u64::from_ne_bytes(b) != *want {
                        self.violation(format!("dir {d}: atomic word {k} differs from the model"));
                    }
                }
            }
        }
        let net = *self.sim.stats();
        if net.undetected_corruption > 0 {
            let n = net.undetected_corruption;
            self.violation(format!("{n} corrupted frames passed the ICRC"));
        }
        if net.malformed > 0 {
            let n = net.malformed;
            self.violation(format!("{n} frames malformed without corruption"));
        }
        let mut r = self.report;
        r.net = net;
        r.virtual_time_ns = self.sim.now().as_nanos();
        r.last_completion_ns = self.last_progress.as_nanos();
        let _ = self.rsrc_key;
        for side in 0..2 {
            let e = &self.sim.endpoints[side];
            let q = &e.qps[0].qp;
            r.final_states[side] = q.state();
            let c = *q.counters();
            r.counters[side] = c;
            r.retransmissions += c.retransmissions;
            r.naks.seq += c.rcvd_seq_err;
            r.naks.rnr += c.rcvd_rnr_err;
            r.naks.invalid_request += c.rcvd_nak_invalid_request;
            r.naks.remote_access += c.rcvd_nak_remote_access;
            r.naks.remote_op += c.rcvd_nak_remote_op;
            r.duplicates_received += c.duplicate_request;
            r.timeouts += c.local_ack_timeouts;
            r.rto_probes += c.rto_probes;
            r.refused_memory_accesses += e.mem.stats.refused;
        }
        if r.refused_memory_accesses > 0 {
            r.violations += 1;
            r.violation_details.push(format!(
                "{} memory accesses refused by the MR table (the workload only uses valid keys)",
                r.refused_memory_accesses
            ));
        }
        r
    }
}

/// Run a workload.
pub fn run(cfg: WorkloadConfig) -> Report {
    Workload::new(cfg).run()
}
