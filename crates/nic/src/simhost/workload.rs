//! A checked RC workload on two real devices (`uroce sim`): device A posts a
//! seeded random mix — SEND and RDMA WRITE (each ± immediate), RDMA READ, fetch-and-add and
//! compare-and-swap — to device B through POST_SEND (and, with `two_way`, B to A at the same
//! time, each QP requester and responder at once), over the host's wire with the loss,
//! duplication, reordering and corruption asked for, and everything is verified where it
//! lands. For each direction:
//!
//! * every send completion comes once, in posting order, successful — or, after the wire
//!   is cut (`partition_at_ns`) or receives came too late for finite RNR retries, successful
//!   up to one "transport retry counter exceeded" (or "RNR retry counter exceeded") and
//!   "Work Request Flushed Error" for everything after it, including work posted once the
//!   QP is in ERR;
//! * a WRITE's bytes are at the target when its completion arrives; a READ's bytes are in
//!   the sender's buffer; an atomic's original value is the one a model of the target's
//!   words predicts, and those words equal the model at the end;
//! * every SEND and WRITE WITH IMM consumes the receiver's receives in order, with the right
//!   length, immediate and bytes.
//!
//! A run that stops making progress with work outstanding is a stall. Violations are
//! counted and described, never panicked on.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::Ipv4Addr;

use abi::uverbs::{AtomicWr, Wc};
use abi::{SendFlags, WcFlags, WcStatus, WrOpcode};

use super::{all_access, rdma_wr, send_wr, sge, Cq, DevId, Host, Mr, Qp, RcOpts};
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
    /// Work requests outstanding at once (at most 128, perftest's default depth).
    pub window: u32,
    /// Each device's link rate (Mbit/s; `None`: no serialisation delay).
    pub link_mbps: Option<u64>,
    /// Cut the wire for good at this virtual time (ns).
    pub partition_at_ns: Option<u64>,
    /// Transport retry count (IBTA: 0–7).
    pub retry_cnt: u8,
    /// RNR retry count (7: forever). With fewer and `recv_delay_ns`, "RNR retry counter
    /// exceeded" may end the run, as a cut wire does.
    pub rnr_retry: u8,
    /// Path MTU.
    pub path_mtu: abi::Mtu,
    /// Selective repeat instead of go-back-N, per end (A's, B's): on both is what the CM's
    /// negotiation agrees to; on one end only it never does, and the transfer must still
    /// be correct.
    pub selective_repeat: [bool; 2],
    /// Receives B keeps posted (0: twice the window).
    pub recv_depth: u32,
    /// B re-posts a consumed receive this long after its completion (0: at once); with a
    /// small `recv_depth` B runs dry and answers with RNR NAKs.
    pub recv_delay_ns: u64,
    /// Local ACK timeout exponent (4.096 µs × 2^N).
    pub timeout: u8,
    /// Work requests posted after A's QP reached ERR (each must be flushed).
    pub after_error_posts: u32,
    /// Test hook: flip a byte of every N-th SEND in the receiver's memory before it is
    /// checked (0: off), to prove the checker catches what it is there to catch.
    pub sabotage_every: u64,
    /// Traffic both ways: B posts to A as A posts to B, the messages split between them
    /// (each QP is requester and responder at once).
    pub two_way: bool,
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
            link_mbps: None,
            partition_at_ns: None,
            retry_cnt: 7,
            rnr_retry: 7,
            path_mtu: abi::Mtu::Mtu1024,
            selective_repeat: [false; 2],
            recv_depth: 0,
            recv_delay_ns: 0,
            timeout: 8,
            after_error_posts: 4,
            sabotage_every: 0,
            two_way: false,
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
    /// Each device's port counters at the end (A's first).
    pub counters: Vec<crate::PortCounters>,
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

/// One device of the run: its QP, its two CQs (sends and receives apart, so that a flushed
/// receive is never mistaken for a send) and the one MR all traffic uses.
struct End {
    dev: DevId,
    qp: Qp,
    scq: Cq,
    rcq: Cq,
    mr: Mr,
}

/// Where things are in each device's MR (byte offsets), the same on both devices.
#[derive(Clone, Copy, Debug)]
struct Layout {
    /// Bytes per slot.
    slot: u64,
    /// Work requests outstanding per flow.
    w: u64,
    /// Receives kept posted.
    recvs: u64,
    /// `w` slots: SEND and WRITE sources, READ and atomic destinations.
    send: u64,
    /// `recvs` slots: receive buffers.
    recv: u64,
    /// `w` slots: WRITE targets.
    wtarget: u64,
    /// READ source (`rsrc_len` bytes of a known pattern).
    rsrc: u64,
    rsrc_len: u64,
    /// [`ATOMIC_WORDS`] words the atomics work on.
    atom: u64,
    /// The MR's length.
    len: u64,
}

/// Traffic from one device to the other, and what it is still owed.
#[derive(Debug, Default)]
struct Flow {
    from: usize,
    to: usize,
    /// Distinguishes the two flows' message keys.
    tag: u64,
    /// Work requests this flow posts (before an error).
    messages: u64,
    posted: u64,
    done: u64,
    checks: VecDeque<(u64, Check)>,
    arrivals: VecDeque<Arrival>,
    /// WRs that consume a receive; those of them that arrived; those the sender saw succeed.
    consuming: BTreeSet<u64>,
    arrived: BTreeSet<u64>,
    succeeded: Vec<u64>,
    /// What the destination's atomic words must hold.
    model: Vec<u64>,
    /// The destination's READ source.
    source: Vec<u8>,
    next_recv: u64,
    /// Consumed receives waiting to be posted again: (when, wr_id, receive slot).
    reposts: VecDeque<(u64, u64, u64)>,
    error_seen: bool,
    after_error: u32,
}

impl Flow {
    /// Everything posted is answered, and nothing more is to be posted.
    fn finished(&self) -> bool {
        self.checks.is_empty() && (self.error_seen || self.done >= self.messages)
    }
}

/// Run `cfg` to the end and report.
pub fn run(cfg: &RunConfig) -> RunReport {
    let mut r = RunReport {
        seed: cfg.seed,
        ..RunReport::default()
    };
    let w = u64::from(cfg.window.clamp(1, 128));
    let slot = u64::from(cfg.size_max.max(8)).next_multiple_of(4096);
    let recvs = match cfg.recv_depth {
        0 => 2 * w,
        d => u64::from(d.min(4096)),
    };
    let recv = w * slot;
    let wtarget = recv + recvs * slot;
    let rsrc = wtarget + w * slot;
    let rsrc_len = slot.max(4096);
    let atom = rsrc + rsrc_len;
    let lay = Layout {
        slot,
        w,
        recvs,
        send: 0,
        recv,
        wtarget,
        rsrc,
        rsrc_len,
        atom,
        len: atom + ATOMIC_WORDS * 8,
    };
    let mut h = Host::new(cfg.seed);
    h.window = (lay.len as usize + (1 << 20)).next_multiple_of(1 << 20);
    h.delay_ns = cfg.delay_ns;
    h.link_mbps = cfg.link_mbps;
    h.loss = cfg.loss;
    h.dup = cfg.dup;
    h.reorder = cfg.reorder;
    h.reorder_ns = cfg.reorder_ns.max(1);
    h.corrupt = cfg.corrupt;
    let opts = RcOpts {
        timeout: cfg.timeout,
        retry_cnt: cfg.retry_cnt,
        rnr_retry: cfg.rnr_retry,
        path_mtu: cfg.path_mtu,
        ..RcOpts::default()
    };
    let opts_of = |end: usize| RcOpts {
        selective_repeat: cfg.selective_repeat[end],
        ..opts
    };
    let setup = (|| {
        let mut ends = Vec::new();
        for addr in [A, B] {
            let dev = h.add_device(addr, Limits::default())?;
            let scq = h.create_cq(dev, 2 * w as u32 + 8)?;
            let rcq = h.create_cq(dev, 2 * recvs as u32 + 8)?;
            let qp = h.create_rc_qp(dev, &scq, &rcq, (2 * w).max(recvs) as u32)?;
            let mr = h.reg_mr(dev, lay.len, all_access())?;
            ends.push(End {
                dev,
                qp,
                scq,
                rcq,
                mr,
            });
        }
        let (a, b) = (&ends[0], &ends[1]);
        h.connect_rc_with(a.dev, a.qp, b.dev, b.qp.qpn, opts_of(0))?;
        h.connect_rc_with(b.dev, b.qp, a.dev, a.qp.qpn, opts_of(1))?;
        Ok::<_, super::Refused>(ends)
    })();
    let mut ends = match setup {
        Ok(v) => v,
        Err(e) => {
            r.violation(format!("setting up the two devices failed: {e:?}"));
            return r;
        }
    };
    let mut dice = Dice(cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    // A to B always; B to A too with `two_way`, the messages split between the two.
    let mut flows = vec![Flow {
        from: 0,
        to: 1,
        messages: if cfg.two_way {
            cfg.messages.div_ceil(2)
        } else {
            cfg.messages
        },
        ..Flow::default()
    }];
    if cfg.two_way {
        flows.push(Flow {
            from: 1,
            to: 0,
            tag: 1,
            messages: cfg.messages / 2,
            ..Flow::default()
        });
    }
    for f in &mut flows {
        let to = &ends[f.to];
        f.source = pattern(cfg.seed ^ 0xabc ^ f.tag << 40, rsrc_len as usize);
        h.write(to.dev, to.mr.addr + rsrc, &f.source);
        f.model = (0..ATOMIC_WORDS).map(|_| dice.next()).collect();
        for (k, v) in f.model.iter().enumerate() {
            h.write(to.dev, to.mr.addr + atom + k as u64 * 8, &v.to_le_bytes());
        }
        let posts: Vec<_> = (0..recvs)
            .map(|i| (i, sge(&to.mr, recv + i * slot, slot as u32)))
            .collect();
        if let Err(e) = h.post_recv(to.dev, to.qp, &posts) {
            r.violation(format!("posting receives failed: {e:?}"));
            return r;
        }
        f.next_recv = recvs;
    }
    let ops: Vec<u64> = (0..4u64).filter(|&i| cfg.ops[i as usize]).collect();
    // A run may end in the errors its settings allow — a cut wire: retries exhausted; late
    // receives with finite RNR retries: RNR retries exhausted — and, once one QP is in
    // error, its peer's retries exhausted too (nobody answers it any more); then flushes.
    let fatal = |status: u32, any_error: bool| {
        status == WcStatus::RetryExcErr.raw() && (cfg.partition_at_ns.is_some() || any_error)
            || status == WcStatus::RnrRetryExcErr.raw()
                && cfg.rnr_retry < 7
                && cfg.recv_delay_ns > 0
    };
    loop {
        if cfg
            .partition_at_ns
            .is_some_and(|t| h.now() >= t && h.loss < 1.0)
        {
            h.loss = 1.0;
        }
        for f in &mut flows {
            if !post(&mut h, &mut r, cfg, &lay, &ends, f, &ops, &mut dice) {
                return r;
            }
        }
        if flows.iter().all(Flow::finished) {
            break;
        }
        let partition = cfg.partition_at_ns;
        let repost_due = flows
            .iter()
            .filter_map(|f| f.reposts.front().map(|x| x.0))
            .min();
        h.alarm = repost_due;
        let moved = h.run_until(10_000_000_000, |h| {
            ends.iter_mut().any(|e| e.scq.pending() || e.rcq.pending())
                || partition.is_some_and(|t| h.now() >= t && h.loss < 1.0)
                || repost_due.is_some_and(|t| h.now() >= t)
        });
        h.alarm = None;
        if !moved {
            let done: u64 = flows.iter().map(|f| f.done).sum();
            let posted: u64 = flows.iter().map(|f| f.posted).sum();
            r.violation(format!(
                "stall: {done} of {posted} WRs completed, nothing happened for 10 s (virtual)"
            ));
            break;
        }
        // Send completions first (all of them), so that an error is known before the
        // receives its QP flushed are looked at.
        for fi in 0..flows.len() {
            loop {
                let wcs = h.poll_cq(&mut ends[flows[fi].from].scq, 64);
                if wcs.is_empty() {
                    break;
                }
                for wc in wcs {
                    let any_error = flows.iter().any(|f| f.error_seen);
                    let f = &mut flows[fi];
                    sent(
                        &mut h,
                        &mut r,
                        &lay,
                        &ends,
                        f,
                        &wc,
                        fatal(wc.status, any_error),
                    );
                }
            }
        }
        let any_error = flows.iter().any(|f| f.error_seen);
        for f in &mut flows {
            take_receives(
                &mut h,
                &mut r,
                &mut ends[f.to],
                &lay,
                f,
                any_error,
                cfg,
                true,
            );
            let to = &ends[f.to];
            while f.reposts.front().is_some_and(|x| x.0 <= h.now()) {
                let Some((_, wr_id, at)) = f.reposts.pop_front() else {
                    break;
                };
                let again = (wr_id, sge(&to.mr, recv + at * slot, slot as u32));
                if let Err(e) = h.post_recv(to.dev, to.qp, &[again]) {
                    r.violation(format!("re-posting a receive failed: {e:?}"));
                }
            }
        }
        if flows
            .iter()
            .all(|f| f.error_seen && f.after_error >= cfg.after_error_posts && f.checks.is_empty())
        {
            break;
        }
    }
    // What the receivers still owe may yet come (the last receive completions of the run).
    let any_error = flows.iter().any(|f| f.error_seen);
    for f in &mut flows {
        let rcq = &mut ends[f.to].rcq;
        h.run_until(1_000_000_000, |_| rcq.pending());
        take_receives(
            &mut h,
            &mut r,
            &mut ends[f.to],
            &lay,
            f,
            any_error,
            cfg,
            false,
        );
    }
    for f in &flows {
        // Every SEND or WRITE WITH IMM the sender saw succeed consumed its receive.
        let missing: Vec<u64> = f
            .succeeded
            .iter()
            .copied()
            .filter(|i| !f.arrived.contains(i))
            .collect();
        if !missing.is_empty() {
            r.violation(format!(
                "completed at {}, never received: WRs {missing:?}",
                name(f.from)
            ));
        }
        // After an error, atomics posted before it may have been flushed or lost: the
        // model holds only for a flow without one.
        if !f.error_seen {
            let to = &ends[f.to];
            for (k, v) in f.model.iter().enumerate() {
                let got = h.read(to.dev, to.mr.addr + atom + k as u64 * 8, 8);
                if got != v.to_le_bytes() {
                    r.violation(format!(
                        "atomic word {k} at {} is {got:02x?}, the model says {v:#x}",
                        name(f.to)
                    ));
                }
            }
            let completed = f.done;
            if completed != f.messages {
                r.violation(format!(
                    "{} to {}: {completed} of {} WRs completed",
                    name(f.from),
                    name(f.to),
                    f.messages
                ));
            }
        }
    }
    r.lost = h.lost;
    r.delivered = h.delivered;
    for e in &ends {
        let pc = h.port_counters(e.dev);
        r.retransmissions += pc.transport.retransmissions;
        r.timeouts += pc.transport.local_ack_timeouts;
        r.rnr_naks += pc.transport.rcvd_rnr_err;
        r.icrc_errors += pc.engine.rcvd_icrc_err;
        r.counters.push(pc);
    }
    r.virtual_time_ns = h.now();
    r
}

fn name(end: usize) -> &'static str {
    if end == 0 {
        "A"
    } else {
        "B"
    }
}

/// Post flow `f`'s next work requests while its window has room (and, after an error, the
/// few that must be flushed); `false` if the run cannot go on.
#[allow(clippy::too_many_arguments)]
fn post(
    h: &mut Host,
    r: &mut RunReport,
    cfg: &RunConfig,
    lay: &Layout,
    ends: &[End],
    f: &mut Flow,
    ops: &[u64],
    dice: &mut Dice,
) -> bool {
    let (from, to) = (&ends[f.from], &ends[f.to]);
    let signaled = SendFlags::SIGNALED.0;
    while f.posted - f.done < lay.w
        && (f.posted < f.messages && !f.error_seen
            || f.error_seen && f.after_error < cfg.after_error_posts)
    {
        let idx = f.posted;
        let at = lay.send + (idx % lay.w) * lay.slot;
        let key = cfg.seed << 32 | f.tag << 31 | idx;
        let len = u64::from(cfg.size_min)
            + dice.below(u64::from(cfg.size_max - cfg.size_min.min(cfg.size_max)) + 1);
        let len = len as usize;
        let op = ops[dice.below(ops.len() as u64) as usize];
        let with_imm = dice.below(2) == 0;
        let (wr, sg, check, arrival) = match op {
            0 => {
                h.write(from.dev, from.mr.addr + at, &pattern(key, len));
                let opc = if with_imm {
                    WrOpcode::SendWithImm
                } else {
                    WrOpcode::Send
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
                (wr, sge(&from.mr, at, len as u32), Check::Nothing, Some(arr))
            }
            1 => {
                h.write(from.dev, from.mr.addr + at, &pattern(key, len));
                let target = lay.wtarget + (idx % lay.w) * lay.slot;
                let opc = if with_imm {
                    WrOpcode::RdmaWriteWithImm
                } else {
                    WrOpcode::RdmaWrite
                };
                let mut wr = rdma_wr(idx, opc, signaled, to.mr.addr + target, to.mr.rkey);
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
                (wr, sge(&from.mr, at, len as u32), check, arr)
            }
            2 => {
                let len = len.min(lay.rsrc_len as usize);
                let src = dice.below(lay.rsrc_len - len as u64 + 1);
                let remote = to.mr.addr + lay.rsrc + src;
                let wr = rdma_wr(idx, WrOpcode::RdmaRead, signaled, remote, to.mr.rkey);
                let check = Check::Read {
                    slot: at,
                    from: src,
                    len,
                };
                (wr, sge(&from.mr, at, len as u32), check, None)
            }
            _ => {
                let k = dice.below(ATOMIC_WORDS) as usize;
                let orig = f.model[k];
                let cas = dice.below(2) == 0;
                let opc = if cas {
                    WrOpcode::AtomicCmpAndSwp
                } else {
                    WrOpcode::AtomicFetchAndAdd
                };
                let mut wr = send_wr(idx, opc, signaled);
                let (compare_add, swap) = if cas {
                    let compare = if dice.below(2) == 0 { orig } else { orig ^ 1 };
                    (compare, dice.next())
                } else {
                    (dice.next(), 0)
                };
                if !f.error_seen {
                    // Flushed atomics never execute: only live ones move the model (one
                    // that is lost to a cut may or may not have run; see the end checks).
                    f.model[k] = match (cas, compare_add == orig) {
                        (true, true) => swap,
                        (true, false) => orig,
                        (false, _) => orig.wrapping_add(compare_add),
                    };
                }
                wr.set_atomic(AtomicWr {
                    remote_addr: to.mr.addr + lay.atom + k as u64 * 8,
                    compare_add,
                    swap,
                    rkey: to.mr.rkey,
                    reserved: 0,
                });
                (
                    wr,
                    sge(&from.mr, at, 8),
                    Check::Atomic { slot: at, orig },
                    None,
                )
            }
        };
        if let Err(e) = h.post_send(from.dev, from.qp, &[(wr, vec![sg])]) {
            r.violation(format!(
                "{} WR {idx}: POST_SEND refused: {e:?}",
                name(f.from)
            ));
            return false;
        }
        if f.error_seen {
            f.after_error += 1;
        }
        f.checks.push_back((idx, check));
        if arrival.is_some() {
            f.consuming.insert(idx);
        }
        f.arrivals.extend(arrival);
        f.posted += 1;
        r.posted += 1;
    }
    true
}

/// A send completion of flow `f`: in order, with the status it may have, and its data
/// where it landed. `fatal`: the status is an error this run may end in.
fn sent(
    h: &mut Host,
    r: &mut RunReport,
    lay: &Layout,
    ends: &[End],
    f: &mut Flow,
    wc: &Wc,
    fatal: bool,
) {
    f.done += 1;
    *r.statuses.entry(wc.status).or_default() += 1;
    let Some((idx, check)) = f.checks.pop_front() else {
        r.violation(format!("a completion no WR asked for: {wc:?}"));
        return;
    };
    if wc.wr_id != idx {
        r.violation(format!(
            "{}: completion for WR {} where {idx} was due",
            name(f.from),
            wc.wr_id
        ));
        return;
    }
    if f.error_seen {
        if wc.status != WcStatus::WrFlushErr.raw() {
            r.violation(format!(
                "{} WR {idx} after the error: status {}",
                name(f.from),
                wc.status
            ));
        }
        return;
    }
    if fatal {
        f.error_seen = true;
        return;
    }
    if wc.status != WcStatus::Success.raw() {
        r.violation(format!("{} WR {idx}: status {}", name(f.from), wc.status));
        f.error_seen = true;
        return;
    }
    r.completed += 1;
    if f.consuming.contains(&idx) {
        f.succeeded.push(idx);
    }
    verify(h, r, (&ends[f.from], &ends[f.to]), lay, f, idx, &check);
}

/// A successful completion's data, where it landed.
fn verify(
    h: &mut Host,
    r: &mut RunReport,
    (from, to): (&End, &End),
    lay: &Layout,
    f: &Flow,
    idx: u64,
    check: &Check,
) {
    let who = name(f.from);
    match *check {
        Check::Written { at, key, len } => {
            if h.read(to.dev, to.mr.addr + at, len) != pattern(key, len) {
                r.violation(format!("{who} WRITE {idx}: wrong bytes at the target"));
            } else {
                r.bytes_verified += len as u64;
            }
        }
        Check::Read {
            slot,
            from: src,
            len,
        } => {
            let want = f.source.get(src as usize..src as usize + len);
            if want != Some(&h.read(from.dev, from.mr.addr + slot, len)[..]) {
                r.violation(format!(
                    "{who} READ {idx}: wrong bytes (from the peer's {:#x})",
                    lay.rsrc + src
                ));
            } else {
                r.bytes_verified += len as u64;
            }
        }
        Check::Atomic { slot, orig } => {
            if h.read(from.dev, from.mr.addr + slot, 8) != orig.to_le_bytes() {
                r.violation(format!(
                    "{who} atomic {idx}: original value is not {orig:#x}"
                ));
            } else {
                r.bytes_verified += 8;
            }
        }
        Check::Nothing => {}
    }
}

/// A receive completion against what the receiver is owed.
/// Check the receive completions waiting on `to`'s receive CQ against what flow `f` sent,
/// in order; with `repost`, schedule each consumed receive to be posted again
/// `recv_delay_ns` later. Receives flushed after an error (`any_error`) are skipped.
#[allow(clippy::too_many_arguments)]
fn take_receives(
    h: &mut Host,
    r: &mut RunReport,
    to: &mut End,
    lay: &Layout,
    f: &mut Flow,
    any_error: bool,
    cfg: &RunConfig,
    repost: bool,
) {
    for wc in h.poll_cq(&mut to.rcq, 64) {
        if wc.status == WcStatus::WrFlushErr.raw() && any_error {
            // A receive its QP flushed when the QP went to ERR.
            continue;
        }
        let Some(x) = f.arrivals.pop_front() else {
            r.violation(format!("a receive nobody sent: {wc:?}"));
            continue;
        };
        received(h, r, to, lay, &wc, &x, cfg.sabotage_every);
        f.arrived.insert(x.idx);
        if repost {
            f.reposts.push_back((
                h.now() + cfg.recv_delay_ns,
                f.next_recv,
                wc.wr_id % lay.recvs,
            ));
            f.next_recv += 1;
        }
    }
}

fn received(
    h: &mut Host,
    r: &mut RunReport,
    to: &End,
    lay: &Layout,
    wc: &Wc,
    x: &Arrival,
    sabotage: u64,
) {
    if wc.status != WcStatus::Success.raw() || wc.byte_len != x.len {
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
        let at = to.mr.addr + lay.recv + wc.wr_id % lay.recvs * lay.slot;
        if sabotage != 0 && x.idx % sabotage == sabotage - 1 && x.len > 0 {
            let mut byte = h.read(to.dev, at, 1);
            byte[0] ^= 0x40;
            h.write(to.dev, at, &byte);
        }
        if h.read(to.dev, at, x.len as usize) != pattern(x.key, x.len as usize) {
            r.violation(format!(
                "SEND {}: wrong bytes in receive {}",
                x.idx, wc.wr_id
            ));
        } else {
            r.bytes_verified += u64::from(x.len);
        }
    }
}
