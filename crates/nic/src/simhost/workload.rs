//! A checked RC workload on two real devices (`uroce sim --device`): device A posts a
//! seeded random mix — SEND and RDMA WRITE (each ± immediate), RDMA READ, fetch-and-add and
//! compare-and-swap — to device B through POST_SEND, over the host's wire with the loss,
//! duplication, reordering and corruption asked for, and everything is verified where it
//! lands:
//!
//! * every send completion at A comes once, in posting order, successful — or, after the wire
//!   is cut (`partition_at_ns`), successful up to one "transport retry counter exceeded"
//!   and "Work Request Flushed Error" for everything after it, including work posted once
//!   the QP is in ERR;
//! * a WRITE's bytes are at B when its completion arrives; a READ's bytes are in A's buffer;
//!   an atomic's original value is the one a model of B's words predicts, and B's words
//!   equal the model at the end;
//! * every SEND and WRITE WITH IMM consumes B's receives in order, with the right length,
//!   immediate and bytes.
//!
//! A run that stops making progress with work outstanding is a stall. Violations are
//! counted and described, never panicked on.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::Ipv4Addr;

use abi::uverbs::{AtomicWr, Wc};
use abi::{SendFlags, WcFlags, WcStatus, WrOpcode};

use super::{all_access, rdma_wr, send_wr, sge, Host, RcOpts};
use crate::Limits;

const A: Ipv4Addr = Ipv4Addr::new(127, 99, 1, 1);
const B: Ipv4Addr = Ipv4Addr::new(127, 99, 1, 2);
const ATOMIC_WORDS: u64 = 16;
const MAX_DETAILS: usize = 20;

/// What to run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Drives every random choice (wire and workload).
    pub seed: u64,
    /// Work requests A posts.
    pub messages: u64,
    /// Smallest SEND/WRITE/READ (bytes).
    pub size_min: u32,
    /// Largest SEND/WRITE/READ (bytes).
    pub size_max: u32,
    /// The mix: SEND, WRITE, READ, atomics (each on or off).
    pub ops: [bool; 4],
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram arrives twice.
    pub dup: f64,
    /// Probability a datagram is held back (others overtake it).
    pub reorder: f64,
    /// The longest a held-back datagram is held (ns).
    pub reorder_ns: u64,
    /// Probability a byte of a datagram is flipped.
    pub corrupt: f64,
    /// One-way delay (ns).
    pub delay_ns: u64,
    /// Work requests outstanding at once (at most 64).
    pub window: u32,
    /// Cut the wire for good at this virtual time (ns).
    pub partition_at_ns: Option<u64>,
    /// Transport retry count (IBTA: 0–7).
    pub retry_cnt: u8,
    /// RNR retry count (7: forever). With fewer and `recv_delay_ns`, "RNR retry counter
    /// exceeded" may end the run, as a cut wire does.
    pub rnr_retry: u8,
    /// Path MTU as an `ibv_mtu` code (1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    /// Selective repeat instead of go-back-N on both ends.
    pub selective_repeat: bool,
    /// Receives B keeps posted (0: twice the window).
    pub recv_depth: u32,
    /// B re-posts a consumed receive this long after its completion (0: at once); with a
    /// small `recv_depth` B runs dry and answers with RNR NAKs.
    pub recv_delay_ns: u64,
    /// Local ACK timeout exponent (4.096 µs × 2^N).
    pub timeout: u8,
    /// Work requests posted after A's QP reached ERR (each must be flushed).
    pub after_error_posts: u32,
    /// Test hook: flip a byte of every N-th SEND in B's memory before it is checked (0:
    /// off), to prove the checker catches what it is there to catch.
    pub sabotage_every: u64,
}

impl Default for RunConfig {
    fn default() -> RunConfig {
        RunConfig {
            seed: 1,
            messages: 1000,
            size_min: 1,
            size_max: 4096,
            ops: [true; 4],
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            reorder_ns: 50_000,
            corrupt: 0.0,
            delay_ns: 1_000,
            window: 32,
            partition_at_ns: None,
            retry_cnt: 7,
            rnr_retry: 7,
            path_mtu: 3,
            selective_repeat: false,
            recv_depth: 0,
            recv_delay_ns: 0,
            timeout: 8,
            after_error_posts: 4,
            sabotage_every: 0,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// Work requests posted.
    pub posted: u64,
    /// Work requests that completed successfully (their data verified).
    pub completed: u64,
    /// Bytes checked against the expected contents.
    pub bytes_verified: u64,
    /// Send completions by status (`ibv_wc_status` value).
    pub statuses: BTreeMap<u32, u64>,
    /// Datagrams the wire lost (on purpose, or by the cut).
    pub lost: u64,
    /// Datagrams the wire delivered.
    pub delivered: u64,
    /// Packets A's requester sent again.
    pub retransmissions: u64,
    /// Local ACK timeouts at A.
    pub timeouts: u64,
    /// RNR NAKs A received (B had no receive posted).
    pub rnr_naks: u64,
    /// Datagrams B's ICRC check dropped.
    pub icrc_errors: u64,
    /// Integrity violations (0 = pass).
    pub violations: u64,
    /// The first violations, described.
    pub details: Vec<String>,
    /// Virtual time at the end (ns).
    pub virtual_time_ns: u64,
}

impl RunReport {
    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.violations == 0
    }

    fn violation(&mut self, what: String) {
        self.violations += 1;
        if self.details.len() < MAX_DETAILS {
            self.details.push(what);
        }
    }
}

/// A seeded source of choices (xorshift64*).
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The bytes message `key` carries: a function of the key and the offset.
pub fn pattern(key: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (key.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8)
        .collect()
}

/// What A's completion of a WR must show, and what to check then.
#[derive(Debug)]
enum Check {
    Written { at: u64, key: u64, len: usize },
    Read { slot: u64, from: u64, len: usize },
    Atomic { slot: u64, orig: u64 },
    Nothing,
}

/// A receive completion B owes, in order.
#[derive(Debug)]
struct Arrival {
    idx: u64,
    key: u64,
    len: u32,
    imm: Option<u32>,
    is_send: bool,
}

/// Run `cfg` to the end and report.
pub fn run(cfg: &RunConfig) -> RunReport {
    let mut r = RunReport {
        seed: cfg.seed,
        ..RunReport::default()
    };
    let w = u64::from(cfg.window.clamp(1, 64));
    let slot = u64::from(cfg.size_max.max(8)).next_multiple_of(4096);
    let recvs = match cfg.recv_depth {
        0 => 2 * w,
        d => u64::from(d.min(4096)),
    };
    // A run may end in the one error its settings allow (a cut wire: retries exhausted;
    // late receives with finite RNR retries: RNR retries exhausted), then flushes.
    let fatal = |status: u32| {
        status == WcStatus::RETRY_EXC_ERR.0 && cfg.partition_at_ns.is_some()
            || status == WcStatus::RNR_RETRY_EXC_ERR.0 && cfg.rnr_retry < 7 && cfg.recv_delay_ns > 0
    };
    let wtarget = recvs * slot;
    let rsrc = wtarget + w * slot;
    let rsrc_len = slot.max(4096);
    let atom = rsrc + rsrc_len;
    let mr_b = atom + ATOMIC_WORDS * 8;
    let mr_a = w * slot;
    let mut h = Host::new(cfg.seed);
    h.window = (mr_b.max(mr_a) as usize + (1 << 20)).next_multiple_of(1 << 20);
    h.delay_ns = cfg.delay_ns;
    h.loss = cfg.loss;
    h.dup = cfg.dup;
    h.reorder = cfg.reorder;
    h.reorder_ns = cfg.reorder_ns.max(1);
    h.corrupt = cfg.corrupt;
    let setup = (|| {
        let a = h.add_device(A, Limits::default())?;
        let b = h.add_device(B, Limits::default())?;
        let cqa = h.create_cq(a, 2 * w as u32 + 8)?;
        let cqb = h.create_cq(b, 2 * recvs as u32 + 8)?;
        let qa = h.create_rc_qp(a, &cqa, &cqa, 2 * w as u32)?;
        let qb = h.create_rc_qp(b, &cqb, &cqb, recvs as u32)?;
        let opts = RcOpts {
            timeout: cfg.timeout,
            retry_cnt: cfg.retry_cnt,
            rnr_retry: cfg.rnr_retry,
            path_mtu: cfg.path_mtu,
            selective_repeat: cfg.selective_repeat,
            ..RcOpts::default()
        };
        h.connect_rc_with(a, qa, b, qb.qpn, opts)?;
        h.connect_rc_with(b, qb, a, qa.qpn, opts)?;
        let ma = h.reg_mr(a, mr_a, all_access())?;
        let mb = h.reg_mr(b, mr_b, all_access())?;
        Ok::<_, super::Refused>((a, b, cqa, cqb, qa, qb, ma, mb))
    })();
    let (a, b, mut cqa, mut cqb, qa, qb, ma, mb) = match setup {
        Ok(v) => v,
        Err(e) => {
            r.violation(format!("setting up the two devices failed: {e:?}"));
            return r;
        }
    };
    let mut dice = Dice(cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let source = pattern(cfg.seed ^ 0xabc, rsrc_len as usize);
    h.write(b, mb.addr + rsrc, &source);
    let mut model: Vec<u64> = (0..ATOMIC_WORDS).map(|_| dice.next()).collect();
    for (k, v) in model.iter().enumerate() {
        h.write(b, mb.addr + atom + k as u64 * 8, &v.to_le_bytes());
    }
    let posts: Vec<_> = (0..recvs)
        .map(|i| (i, sge(&mb, i * slot, slot as u32)))
        .collect();
    if let Err(e) = h.post_recv(b, qb, &posts) {
        r.violation(format!("posting B's receives failed: {e:?}"));
        return r;
    }
    let ops: Vec<u64> = (0..4u64).filter(|&i| cfg.ops[i as usize]).collect();
    let signaled = SendFlags::SIGNALED.0;
    let mut next_recv = recvs;
    let mut checks: VecDeque<(u64, Check)> = VecDeque::new();
    let mut arrivals: VecDeque<Arrival> = VecDeque::new();
    // WRs that consume a receive at B; those of them that arrived; those A saw succeed.
    let mut consuming = BTreeSet::new();
    let mut arrived = BTreeSet::new();
    let mut succeeded = Vec::new();
    let mut error_seen = false;
    let mut after_error = 0u32;
    let mut done = 0u64;
    // Consumed receives waiting to be posted again: (when, wr_id, slot).
    let mut reposts: VecDeque<(u64, u64, u64)> = VecDeque::new();
    loop {
        if cfg
            .partition_at_ns
            .is_some_and(|t| h.now() >= t && h.loss < 1.0)
        {
            h.loss = 1.0;
        }
        // Post while the window has room (and, after an error, the few flush probes).
        while r.posted - done < w
            && (r.posted < cfg.messages && !error_seen
                || error_seen && after_error < cfg.after_error_posts)
        {
            let idx = r.posted;
            let at = (idx % w) * slot;
            let key = cfg.seed << 32 | idx;
            let len = u64::from(cfg.size_min)
                + dice.below(u64::from(cfg.size_max - cfg.size_min.min(cfg.size_max)) + 1);
            let len = len as usize;
            let op = ops[dice.below(ops.len() as u64) as usize];
            let with_imm = dice.below(2) == 0;
            let (wr, sg, check, arrival) = match op {
                0 => {
                    h.write(a, ma.addr + at, &pattern(key, len));
                    let opc = if with_imm {
                        WrOpcode::SEND_WITH_IMM
                    } else {
                        WrOpcode::SEND
                    };
                    let mut wr = send_wr(idx, opc, signaled);
                    let imm = with_imm.then_some(idx as u32 ^ 0x5a5a);
                    if let Some(i) = imm {
                        wr.set_imm_data(i);
                    }
                    let arr = Arrival {
                        idx,
                        key,
                        len: len as u32,
                        imm,
                        is_send: true,
                    };
                    (wr, sge(&ma, at, len as u32), Check::Nothing, Some(arr))
                }
                1 => {
                    h.write(a, ma.addr + at, &pattern(key, len));
                    let target = wtarget + at;
                    let opc = if with_imm {
                        WrOpcode::RDMA_WRITE_WITH_IMM
                    } else {
                        WrOpcode::RDMA_WRITE
                    };
                    let mut wr = rdma_wr(idx, opc, signaled, mb.addr + target, mb.rkey);
                    let arr = with_imm.then(|| {
                        wr.set_imm_data(idx as u32);
                        Arrival {
                            idx,
                            key,
                            len: len as u32,
                            imm: Some(idx as u32),
                            is_send: false,
                        }
                    });
                    let check = Check::Written {
                        at: target,
                        key,
                        len,
                    };
                    (wr, sge(&ma, at, len as u32), check, arr)
                }
                2 => {
                    let len = len.min(rsrc_len as usize);
                    let from = dice.below(rsrc_len - len as u64 + 1);
                    let remote = mb.addr + rsrc + from;
                    let wr = rdma_wr(idx, WrOpcode::RDMA_READ, signaled, remote, mb.rkey);
                    let check = Check::Read {
                        slot: at,
                        from,
                        len,
                    };
                    (wr, sge(&ma, at, len as u32), check, None)
                }
                _ => {
                    let k = dice.below(ATOMIC_WORDS) as usize;
                    let orig = model[k];
                    let cas = dice.below(2) == 0;
                    let opc = if cas {
                        WrOpcode::ATOMIC_CMP_AND_SWP
                    } else {
                        WrOpcode::ATOMIC_FETCH_AND_ADD
                    };
                    let mut wr = send_wr(idx, opc, signaled);
                    let (compare_add, swap) = if cas {
                        let compare = if dice.below(2) == 0 { orig } else { orig ^ 1 };
                        (compare, dice.next())
                    } else {
                        (dice.next(), 0)
                    };
                    if !error_seen {
                        // Flushed atomics never execute: only live ones move the model
                        // (one that is lost to a cut may or may not have run; see below).
                        model[k] = match (cas, compare_add == orig) {
                            (true, true) => swap,
                            (true, false) => orig,
                            (false, _) => orig.wrapping_add(compare_add),
                        };
                    }
                    wr.set_atomic(AtomicWr {
                        remote_addr: mb.addr + atom + k as u64 * 8,
                        compare_add,
                        swap,
                        rkey: mb.rkey,
                        reserved: 0,
                    });
                    (wr, sge(&ma, at, 8), Check::Atomic { slot: at, orig }, None)
                }
            };
            if let Err(e) = h.post_send(a, qa, &[(wr, vec![sg])]) {
                r.violation(format!("WR {idx}: POST_SEND refused: {e:?}"));
                break;
            }
            if error_seen {
                after_error += 1;
            }
            checks.push_back((idx, check));
            if arrival.is_some() {
                consuming.insert(idx);
            }
            arrivals.extend(arrival);
            r.posted += 1;
        }
        // Everything posted is answered, and nothing more is to be posted.
        if checks.is_empty() && (error_seen || done >= cfg.messages) {
            break;
        }
        let (ca, cb) = (&mut cqa, &mut cqb);
        let partition = cfg.partition_at_ns;
        let repost_due = reposts.front().map(|r| r.0);
        h.alarm = repost_due;
        let moved = h.run_until(10_000_000_000, |h| {
            ca.pending()
                || cb.pending()
                || partition.is_some_and(|t| h.now() >= t && h.loss < 1.0)
                || repost_due.is_some_and(|t| h.now() >= t)
        });
        h.alarm = None;
        if !moved {
            r.violation(format!(
                "stall: {} of {} WRs completed, nothing happened for 10 s (virtual)",
                done, r.posted
            ));
            break;
        }
        for wc in h.poll_cq(&mut cqa, 64) {
            done += 1;
            *r.statuses.entry(wc.status).or_default() += 1;
            let Some((idx, check)) = checks.pop_front() else {
                r.violation(format!("a completion no WR asked for: {wc:?}"));
                continue;
            };
            if wc.wr_id != idx {
                r.violation(format!(
                    "completion for WR {} where {idx} was due",
                    wc.wr_id
                ));
                continue;
            }
            let flushed = WcStatus::WR_FLUSH_ERR.0;
            if error_seen {
                if wc.status != flushed {
                    r.violation(format!("WR {idx} after the error: status {}", wc.status));
                }
                continue;
            }
            if fatal(wc.status) {
                error_seen = true;
                continue;
            }
            if wc.status != WcStatus::SUCCESS.0 {
                r.violation(format!("WR {idx}: status {}", wc.status));
                error_seen = true;
                continue;
            }
            r.completed += 1;
            if consuming.contains(&idx) {
                succeeded.push(idx);
            }
            verify(
                &mut h,
                &mut r,
                (a, b),
                (&ma, &mb),
                idx,
                &check,
                &source,
                rsrc,
            );
        }
        for wc in h.poll_cq(&mut cqb, 64) {
            let Some(x) = arrivals.pop_front() else {
                r.violation(format!("B received what nobody sent: {wc:?}"));
                continue;
            };
            received(
                &mut h,
                &mut r,
                b,
                &mb,
                &wc,
                &x,
                recvs,
                slot,
                cfg.sabotage_every,
            );
            arrived.insert(x.idx);
            reposts.push_back((h.now() + cfg.recv_delay_ns, next_recv, wc.wr_id % recvs));
            next_recv += 1;
        }
        while reposts.front().is_some_and(|r| r.0 <= h.now()) {
            let Some((_, wr_id, at)) = reposts.pop_front() else {
                break;
            };
            let again = (wr_id, sge(&mb, at * slot, slot as u32));
            if let Err(e) = h.post_recv(b, qb, &[again]) {
                r.violation(format!("re-posting a receive at B failed: {e:?}"));
            }
        }
        if error_seen && after_error >= cfg.after_error_posts && checks.is_empty() {
            break;
        }
    }
    // What B still owes may yet come (the last receive completions of the run).
    let cb = &mut cqb;
    h.run_until(1_000_000_000, |_| cb.pending());
    for wc in h.poll_cq(&mut cqb, 64) {
        if let Some(x) = arrivals.pop_front() {
            received(
                &mut h,
                &mut r,
                b,
                &mb,
                &wc,
                &x,
                recvs,
                slot,
                cfg.sabotage_every,
            );
            arrived.insert(x.idx);
        }
    }
    // Every SEND or WRITE WITH IMM A saw succeed consumed its receive at B.
    let missing: Vec<u64> = succeeded
        .iter()
        .copied()
        .filter(|i| !arrived.contains(i))
        .collect();
    if !missing.is_empty() {
        r.violation(format!(
            "completed at A, never received at B: WRs {missing:?}"
        ));
    }
    // After an error, atomics posted before it may have been flushed or lost: the model
    // holds only for a run without one.
    if !error_seen {
        for (k, v) in model.iter().enumerate() {
            let got = h.read(b, mb.addr + atom + k as u64 * 8, 8);
            if got != v.to_le_bytes() {
                r.violation(format!(
                    "atomic word {k} is {got:02x?}, the model says {v:#x}"
                ));
            }
        }
        if r.completed != cfg.messages {
            r.violation(format!("{} of {} WRs completed", r.completed, cfg.messages));
        }
    }
    r.lost = h.lost;
    r.delivered = h.delivered;
    let pa = h.port_counters(a);
    r.retransmissions = pa.transport.retransmissions;
    r.timeouts = pa.transport.local_ack_timeouts;
    r.rnr_naks = pa.transport.rcvd_rnr_err;
    r.icrc_errors = h.port_counters(b).engine.rcvd_icrc_err;
    r.virtual_time_ns = h.now();
    r
}

/// A successful completion's data, where it landed.
#[allow(clippy::too_many_arguments)]
fn verify(
    h: &mut Host,
    r: &mut RunReport,
    (a, b): (usize, usize),
    (ma, mb): (&super::Mr, &super::Mr),
    idx: u64,
    check: &Check,
    source: &[u8],
    rsrc: u64,
) {
    match *check {
        Check::Written { at, key, len } => {
            if h.read(b, mb.addr + at, len) != pattern(key, len) {
                r.violation(format!("WRITE {idx}: wrong bytes at B"));
            } else {
                r.bytes_verified += len as u64;
            }
        }
        Check::Read { slot, from, len } => {
            let want = source.get(from as usize..from as usize + len);
            if want != Some(&h.read(a, ma.addr + slot, len)[..]) {
                r.violation(format!(
                    "READ {idx}: wrong bytes (from B's {:#x})",
                    rsrc + from
                ));
            } else {
                r.bytes_verified += len as u64;
            }
        }
        Check::Atomic { slot, orig } => {
            if h.read(a, ma.addr + slot, 8) != orig.to_le_bytes() {
                r.violation(format!("atomic {idx}: original value is not {orig:#x}"));
            } else {
                r.bytes_verified += 8;
            }
        }
        Check::Nothing => {}
    }
}

/// A receive completion at B against what it owes.
#[allow(clippy::too_many_arguments)]
fn received(
    h: &mut Host,
    r: &mut RunReport,
    b: usize,
    mb: &super::Mr,
    wc: &Wc,
    x: &Arrival,
    recvs: u64,
    slot: u64,
    sabotage: u64,
) {
    if wc.status != WcStatus::SUCCESS.0 || wc.byte_len != x.len {
        r.violation(format!("receive for WR {}: {wc:?}", x.idx));
        return;
    }
    let imm = (wc.wc_flags & WcFlags::WITH_IMM.0 != 0).then(|| wc.imm_data());
    if imm != x.imm {
        r.violation(format!(
            "receive for WR {}: immediate {imm:?}, not {:?}",
            x.idx, x.imm
        ));
    }
    if x.is_send {
        let at = wc.wr_id % recvs * slot;
        if sabotage != 0 && x.idx % sabotage == sabotage - 1 && x.len > 0 {
            let mut byte = h.read(b, mb.addr + at, 1);
            byte[0] ^= 0x40;
            h.write(b, mb.addr + at, &byte);
        }
        if h.read(b, mb.addr + at, x.len as usize) != pattern(x.key, x.len as usize) {
            r.violation(format!(
                "SEND {}: wrong bytes in receive {}",
                x.idx, wc.wr_id
            ));
        } else {
            r.bytes_verified += u64::from(x.len);
        }
    }
}
