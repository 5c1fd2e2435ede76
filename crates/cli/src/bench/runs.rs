//! The measurement loops, after perftest's `run_iter_bw`, `run_iter_bw_server`,
//! `run_iter_lat_write`, `run_iter_lat_send` and `run_iter_lat`
//! (`src/perftest_resources.c`), with the same signalling, address cycling and timing:
//!
//! * bandwidth: keep up to TX depth operations in flight per QP, post lists of `-l`,
//!   request a completion every `-Q` operations, time each post and each completion;
//!   perftest's formulas turn those times into peak/average/message rate
//!   ([`oob::console::bw_report`]). The send receiver times first to last receive.
//! * latency: ping-pong (WRITE: poll the last byte of the peer's message in memory;
//!   SEND: wait for the receive) or one READ/atomic at a time; the samples are the times
//!   between consecutive posts ([`oob::console::LatReport`]).
//!
//! Timestamps are `CLOCK_MONOTONIC` nanoseconds (vDSO: no system call).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use oob::console::{bw_report, AtomicType, BwSamples, LatReport};
use oob::perftest::{BwReport, Connection, Role, TestKind, Verb};
use uroce::{SendWr, Sge, Wc, WcStatus, GRH_BYTES};

use super::params::Params;
use super::side::{split_wr_id, tx_wr_id, Res, Side};
use super::util::{now_ns, wait_cq, Watchdog};
use super::{verify, volatile};

/// Post timestamps allocated up front in latency tests (perftest allocates all of
/// `tposted`; beyond this the vector grows).
const LAT_PREALLOC: u64 = 1 << 24;
/// Completions taken per poll (perftest's `CTX_POLL_BATCH`).
const POLL_BATCH: usize = 16;

/// Runs one measurement of `size`-byte messages on `side`; bandwidth tests return this
/// side's report.
pub fn run(side: &mut Side, size: u64) -> Result<Option<BwReport>> {
    let p = side.p.clone();
    let mut prog = Progress::new(side.progress, &p, size);
    // Both ends in this process, both polling: they share the cores with one engine, so
    // an idle poll yields now and then. Where only the requester polls (a WRITE, READ or
    // ATOMIC bandwidth test: the server waits on its TCP connection, as perftest's does),
    // one spinning thread needs no yield, and a yield would be a system call per wait once
    // anything (a tracer, a short-lived job) preempted it. A client or server alone polls
    // the way perftest does (a pure spin), so that its figures and stock perftest's on the
    // drop-in library compare like for like.
    let one_poller = p.cfg.kind == TestKind::Bw && p.cfg.verb != Verb::Send && !p.cfg.duplex();
    let mut dog = Watchdog::new(side.stall(), side.in_process && !one_poller);
    let role = side.role;
    let res = side
        .res
        .as_mut()
        .ok_or_else(|| anyhow!("run before setup"))?;
    let mut failures = Vec::new();
    let out = match (p.cfg.kind, p.cfg.verb) {
        (TestKind::Bw, Verb::Send) if role == Role::Server && !p.cfg.duplex() => {
            let mut rx = RecvState::new(res, &p, size);
            let r = bw_receiver(res, &p, &mut rx, &mut prog, &mut dog, &mut failures)?;
            Run::Bw(r)
        }
        (TestKind::Bw, verb) => {
            let mut rx =
                (verb == Verb::Send && p.cfg.duplex()).then(|| RecvState::new(res, &p, size));
            let r = bw_requester(
                res,
                &p,
                size,
                rx.as_mut(),
                &mut prog,
                &mut dog,
                &mut failures,
            )?;
            Run::Bw(r)
        }
        (TestKind::Lat, Verb::Write) => {
            write_lat(res, &p, size, role, &mut prog, &mut dog, &mut failures)?
        }
        (TestKind::Lat, Verb::Send) => {
            send_lat(res, &p, size, role, &mut prog, &mut dog, &mut failures)?
        }
        (TestKind::Lat, Verb::Read | Verb::Atomic) => {
            rdma_lat(res, &p, size, &mut prog, &mut dog, &mut failures)?
        }
    };
    prog.finish();
    side.failures.append(&mut failures);
    Ok(match out {
        Run::Bw(r) => Some(r),
        Run::Lat(r) => {
            side.push_lat(&r);
            None
        }
        Run::LatDuration { iters, t_avg, tps } => {
            side.push_lat_duration(size, iters, t_avg, tps);
            None
        }
    })
}

/// What a run produced.
enum Run {
    Bw(BwReport),
    Lat(LatReport),
    LatDuration { iters: u64, t_avg: f64, tps: f64 },
}

/// Progress on stderr for runs longer than a few seconds: a self-overwriting line on a
/// terminal, one line every few seconds otherwise.
struct Progress {
    on: bool,
    tty: bool,
    start: Instant,
    next: Instant,
    label: String,
    shown: bool,
    calls: u32,
}

/// Quiet for this long; after it, progress appears.
const PROGRESS_AFTER: Duration = Duration::from_secs(3);

impl Progress {
    fn new(on: bool, p: &Params, size: u64) -> Progress {
        let start = Instant::now();
        Progress {
            on,
            tty: std::io::stderr().is_terminal(),
            start,
            next: start + PROGRESS_AFTER,
            label: format!("{} {size} B", p.tool()),
            shown: false,
            calls: 0,
        }
    }

    /// `done` of `total` operations (`total` 0: a duration run).
    fn tick(&mut self, done: u64, total: u64) {
        self.calls = self.calls.wrapping_add(1);
        if !self.on || self.calls % 64 != 0 {
            return;
        }
        let now = Instant::now();
        if now < self.next {
            return;
        }
        let secs = now.duration_since(self.start).as_secs_f64();
        let text = if total > 0 {
            format!(
                "uroce bench: {}: {done}/{total} ({:.0}%) after {secs:.0} s",
                self.label,
                done as f64 * 100.0 / total as f64
            )
        } else {
            format!(
                "uroce bench: {}: {done} operations after {secs:.0} s",
                self.label
            )
        };
        if self.tty {
            eprint!("\r{text}\x1b[K");
            self.next = now + Duration::from_millis(250);
        } else {
            eprintln!("{text}");
            self.next = now + Duration::from_secs(5);
        }
        self.shown = true;
    }

    fn finish(&mut self) {
        if self.shown && self.tty {
            eprint!("\r\x1b[K");
        }
    }
}

/// `-D`: warm-up, sample window, end (perftest's START → SAMPLE → STOP_SAMPLE → END).
#[derive(Clone, Copy)]
struct Window {
    sample_start: u64,
    sample_end: u64,
    end: u64,
}

impl Window {
    fn new(p: &Params) -> Option<Window> {
        let (d, margin) = p.duration?;
        let t0 = now_ns();
        let ns = |x: Duration| u64::try_from(x.as_nanos()).unwrap_or(u64::MAX);
        Some(Window {
            sample_start: t0 + ns(margin),
            sample_end: t0 + ns(d.saturating_sub(margin)),
            end: t0 + ns(d),
        })
    }

    fn sampling(&self, t: u64) -> bool {
        t >= self.sample_start && t < self.sample_end
    }

    fn secs(&self) -> f64 {
        (self.sample_end - self.sample_start) as f64 / 1e9
    }
}

/// Post and completion times of a bandwidth run (perftest's `tposted` / `tcompleted`).
struct Times {
    posted: Vec<u64>,
    completed: Vec<u64>,
    no_peak: bool,
    first_post: Option<u64>,
    last_done: u64,
}

impl Times {
    fn new(total: u64, no_peak: bool) -> Times {
        let n = if no_peak { 0 } else { total as usize };
        Times {
            posted: vec![0; n],
            completed: vec![0; n],
            no_peak,
            first_post: None,
            last_done: 0,
        }
    }

    fn post(&mut self, index: u64, n: u64, t: u64) {
        self.first_post.get_or_insert(t);
        if !self.no_peak {
            for i in index..index + n {
                if let Some(s) = self.posted.get_mut(i as usize) {
                    *s = t;
                }
            }
        }
    }

    /// Operations `from..to` (global count) completed at `t`.
    fn complete(&mut self, from: u64, to: u64, t: u64) {
        self.last_done = t;
        if !self.no_peak {
            for i in from..to {
                if let Some(s) = self.completed.get_mut(i as usize) {
                    *s = t;
                }
            }
        }
    }

    fn report(
        &self,
        p: &Params,
        size: u64,
        iters: u64,
        qps: u64,
        cq_mod: u64,
        pl: u64,
    ) -> Result<BwReport> {
        let first = self.first_post.unwrap_or(0);
        let (posted, completed): (Vec<u64>, Vec<u64>) = if self.no_peak {
            (vec![first], vec![self.last_done.max(first + 1)])
        } else {
            (self.posted.clone(), self.completed.clone())
        };
        bw_report(&BwSamples {
            size,
            iters,
            num_qps: qps,
            tposted: &posted,
            tcompleted: &completed,
            ticks_per_sec: 1e9,
            cq_mod: cq_mod.max(1),
            post_list: pl.max(1),
            no_peak: self.no_peak,
            units: p.units,
        })
        .ok_or_else(|| anyhow!("the run took no measurable time"))
    }
}

/// A report from a count of operations in a `-D` sample window.
fn duration_report(p: &Params, size: u64, count: u64, w: &Window) -> BwReport {
    let secs = w.secs().max(1e-9);
    BwReport {
        size,
        iters: count,
        bw_peak: 0.0,
        bw_avg: size as f64 * count as f64 / secs / p.units.bytes_per_unit(),
        msg_rate: count as f64 / secs / 1e6,
        ..BwReport::default()
    }
}

fn wc_error(w: &Wc, what: &str) -> anyhow::Error {
    let (qp, seq) = split_wr_id(w.wr_id);
    anyhow!(
        "Completion with error at {what}: QP {qp} operation {seq}: {} ({}), vendor error {:#x}",
        w.status.as_str(),
        w.status.raw(),
        w.vendor_err
    )
}

/// Receive side of send tests (perftest's `run_iter_bw_server` bookkeeping).
struct RecvState {
    /// Messages received per QP.
    rcnt: Vec<u64>,
    /// Messages expected per QP (`u64::MAX` in duration mode).
    total: u64,
    first: Option<u64>,
    grh: usize,
    inc: u64,
    len: u64,
    size: u64,
    window_count: u64,
}

impl RecvState {
    fn new(res: &Res, p: &Params, size: u64) -> RecvState {
        let grh = if p.cfg.connection == Connection::Ud {
            GRH_BYTES
        } else {
            0
        };
        let len = size + grh as u64;
        RecvState {
            rcnt: vec![0; res.qps.len()],
            total: if p.duration.is_some() {
                u64::MAX
            } else {
                p.iters
            },
            first: None,
            grh,
            inc: verify::inc(len, res.cache_line),
            len,
            size,
            window_count: 0,
        }
    }

    fn done(&self) -> bool {
        self.rcnt.iter().all(|&c| c >= self.total)
    }

    fn received(&self) -> u64 {
        self.rcnt.iter().sum()
    }

    /// Takes what the receive CQ holds: checks, counts, reposts. Returns how many.
    fn poll(
        &mut self,
        res: &mut Res,
        p: &Params,
        window: Option<&Window>,
        failures: &mut Vec<String>,
    ) -> Result<usize> {
        let mut wc = [Wc::default(); POLL_BATCH];
        let n = res.rcq.poll(&mut wc)?;
        if n == 0 {
            return Ok(0);
        }
        let t = now_ns();
        self.first.get_or_insert(t);
        let Res {
            rx,
            qps,
            rx_posted,
            rx_slice,
            ..
        } = res;
        let rx = rx.as_ref().ok_or_else(|| anyhow!("no receive buffer"))?;
        for w in wc.iter().take(n) {
            if w.status != WcStatus::Success {
                return Err(wc_error(w, "receive"));
            }
            let (i, slot) = split_wr_id(w.wr_id);
            let seq = self
                .rcnt
                .get(i)
                .copied()
                .ok_or_else(|| anyhow!("receive for unknown QP {i}"))?;
            let off = i * *rx_slice + (slot * self.inc) as usize;
            if p.verify && failures.len() < 8 {
                let start = off + self.grh;
                let got = rx
                    .as_slice()
                    .get(start..start + self.size as usize)
                    .unwrap_or(&[]);
                if u64::from(w.byte_len) != self.len {
                    failures.push(format!(
                        "verify: QP {i} receive {seq}: {} bytes, expected {}",
                        w.byte_len, self.len
                    ));
                } else if !verify::check_op(got, i, seq, false) {
                    failures.push(format!(
                        "verify: QP {i} receive {seq} ({} bytes) differs from what was sent: {}",
                        self.size,
                        verify::describe_mismatch(got, i, seq)
                    ));
                }
            }
            if let Some(c) = self.rcnt.get_mut(i) {
                *c += 1;
            }
            if window.is_some_and(|w| w.sampling(t)) {
                self.window_count += 1;
            }
            // Repost into the slot just checked while more messages are expected.
            if let Some(posted) = rx_posted.get_mut(i) {
                if *posted < self.total {
                    let sge = [rx.sge(off, self.len as u32)];
                    let qp = qps.get(i).ok_or_else(|| anyhow!("no QP {i}"))?;
                    qp.post_recv(&[uroce::RecvWr::new(w.wr_id, &sge)])
                        .map_err(|e| anyhow!("Couldn't post recv Qp={i} rcnt={seq}: {e}"))?;
                    *posted += 1;
                }
            }
        }
        Ok(n)
    }
}

/// The send-test server: only receives (perftest's `run_iter_bw_server`).
fn bw_receiver(
    res: &mut Res,
    p: &Params,
    rx: &mut RecvState,
    prog: &mut Progress,
    dog: &mut Watchdog,
    failures: &mut Vec<String>,
) -> Result<BwReport> {
    let window = Window::new(p);
    let q = res.qps.len() as u64;
    let total = p.iters * q;
    loop {
        if let Some(w) = &window {
            if now_ns() >= w.end {
                break;
            }
        } else if rx.done() {
            break;
        }
        let n = rx.poll(res, p, window.as_ref(), failures)?;
        if n == 0 && p.use_event && window.is_none() {
            // Sleep until the receive CQ reports something (-e).
            let what = || format!("receives ({} of {total})", rx.received());
            wait_event(res, true, dog, &what)?;
            continue;
        }
        if n > 0 {
            dog.progress();
            prog.tick(rx.received(), total);
        } else {
            let what = || format!("receives ({} of {total})", rx.received());
            dog.idle(&what)?;
        }
    }
    if let Some(w) = &window {
        return Ok(duration_report(p, rx.size, rx.window_count, w));
    }
    // perftest: from the first receive (`set_on_first_rx_packet`) to the end of the loop.
    let first = rx.first.unwrap_or(0);
    let end = now_ns().max(first + 1);
    bw_report(&BwSamples {
        size: rx.size,
        iters: p.iters,
        num_qps: q,
        tposted: &[first],
        tcompleted: &[end],
        ticks_per_sec: 1e9,
        cq_mod: 1,
        post_list: 1,
        no_peak: true,
        units: p.units,
    })
    .ok_or_else(|| anyhow!("the run took no measurable time"))
}

/// Blocks on the completion channel until `cq` (send or receive CQ) has something.
fn wait_event(res: &Res, recv: bool, dog: &mut Watchdog, what: &dyn Fn() -> String) -> Result<()> {
    let cq = if recv { &res.rcq } else { &res.scq };
    let ch = res.channel.as_ref();
    cq.req_notify(false)?;
    let left = dog.remaining();
    if left.is_zero() {
        bail!("no progress while waiting for {}", what());
    }
    if let Some(ch) = ch {
        if let Some(ev) = ch.get_event(Some(left.min(Duration::from_millis(100))))? {
            ev.ack_events(1);
        }
    }
    Ok(())
}

/// The requester of bandwidth tests (perftest's `run_iter_bw`), also receiving when a
/// send test runs with `-b`.
fn bw_requester(
    res: &mut Res,
    p: &Params,
    size: u64,
    mut rx: Option<&mut RecvState>,
    prog: &mut Progress,
    dog: &mut Watchdog,
    failures: &mut Vec<String>,
) -> Result<BwReport> {
    let verb = p.cfg.verb;
    let q = res.qps.len();
    let window = Window::new(p);
    let per_qp = if window.is_some() { u64::MAX } else { p.iters };
    let total = p.iters * q as u64;
    let inc = verify::inc(size, res.cache_line);
    let rslots = verify::cycle_slots(size, inc, res.cycle_buffer);
    let tx_depth = u64::from(p.tx_depth);
    let lslots = if p.verify {
        (res.src_slice as u64 / inc).clamp(1, tx_depth)
    } else {
        rslots
    };
    let depth = if p.verify {
        tx_depth.min(lslots)
    } else {
        tx_depth
    };
    let pl = u64::from(p.post_list).min(depth).max(1);
    let cq_mod = u64::from(p.cq_mod).min(depth).max(1);
    let inline = verb != Verb::Read && verb != Verb::Atomic && size <= u64::from(res.inline);
    let mut scnt = vec![0u64; q];
    let mut ccnt = vec![0u64; q];
    let mut last_signaled = vec![0u64; q];
    let mut tot_s = 0u64;
    let mut tot_c = 0u64;
    let mut window_count = 0u64;
    let mut times = Times::new(total, p.no_peak || window.is_some());
    let mut wc = [Wc::default(); POLL_BATCH];
    let mut sges: Vec<[Sge; 1]> = Vec::with_capacity(pl as usize);
    let mut ended = false;
    let grh_ud = p.cfg.connection == Connection::Ud;
    loop {
        let now = now_ns();
        if let Some(w) = &window {
            if now >= w.end {
                ended = true;
            }
        }
        let sends_done = if window.is_some() {
            ended && ccnt.iter().zip(&last_signaled).all(|(c, s)| c >= s)
        } else {
            tot_c >= total
        };
        let recv_done = rx.as_ref().is_none_or(|r| r.done() || ended);
        if sends_done && recv_done {
            break;
        }
        let mut posted_any = false;
        for i in 0..q {
            while !ended
                && scnt[i] < per_qp
                && scnt[i] - ccnt[i] + pl.min(per_qp - scnt[i]) <= depth
            {
                let n = pl.min(per_qp - scnt[i]);
                let first = scnt[i];
                let src_base = i * res.src_slice;
                // --verify: each operation's own payload, in its own slot.
                if p.verify && (verb == Verb::Write || verb == Verb::Send) {
                    let buf = res.src.as_mut_slice();
                    for k in first..first + n {
                        let off = src_base + ((k % lslots) * inc) as usize;
                        if let Some(s) = buf.get_mut(off..off + size as usize) {
                            verify::fill_op(s, i, k, false);
                        }
                    }
                }
                sges.clear();
                for k in first..first + n {
                    let off = src_base + ((k % lslots) * inc) as usize;
                    let len = if verb == Verb::Atomic { 8 } else { size as u32 };
                    sges.push([res.src.sge(off, len)]);
                }
                let rem = res
                    .remote
                    .get(i)
                    .ok_or_else(|| anyhow!("no remote QP {i}"))?;
                let mut wrs: Vec<SendWr<'_>> = Vec::with_capacity(n as usize);
                for (j, sge) in sges.iter().enumerate() {
                    let k = first + j as u64;
                    let raddr = rem.vaddr + (k % rslots) * inc;
                    let id = tx_wr_id(i, k);
                    let wr = match verb {
                        Verb::Write => SendWr::write(id, sge, raddr, rem.rkey),
                        Verb::Read => SendWr::read(id, sge, raddr, rem.rkey),
                        Verb::Atomic => match p.atomic {
                            AtomicType::FetchAndAdd => {
                                SendWr::fetch_add(id, &sge[0], raddr, rem.rkey, 1)
                            }
                            AtomicType::CmpAndSwap => {
                                SendWr::compare_swap(id, &sge[0], raddr, rem.rkey, 0, 0)
                            }
                        },
                        Verb::Send => {
                            if grh_ud {
                                let ah =
                                    res.ahs.get(i).ok_or_else(|| anyhow!("no AH for QP {i}"))?;
                                SendWr::ud_send(id, sge, ah, rem.qpn, res.qkey)
                            } else {
                                SendWr::send(id, sge)
                            }
                        }
                    };
                    let wr = if inline {
                        let off = src_base + ((k % lslots) * inc) as usize;
                        wr.inline(res.src.get(off..off + size as usize).unwrap_or(&[]))
                    } else {
                        wr
                    };
                    // Exactly perftest's signaling (run_iter_bw): every cq_mod-th WR and
                    // the last one of an iterations run. cq_mod <= depth (clamped above), so
                    // every window holds a signaled WR. Signaling more often (say, whenever
                    // the window fills) lets the window refill sooner, and for latency-bound
                    // operations such as atomics would report a higher message rate than
                    // perftest's on the same device.
                    let last_of_run = window.is_none() && k + 1 == per_qp;
                    let wr = if (k + 1) % cq_mod == 0 || last_of_run {
                        last_signaled[i] = k + 1;
                        wr.signaled()
                    } else {
                        wr
                    };
                    wrs.push(wr);
                }
                times.post(tot_s, n, now_ns());
                let qp = res.qps.get(i).ok_or_else(|| anyhow!("no QP {i}"))?;
                qp.post_send(&wrs)
                    .map_err(|e| anyhow!("Couldn't post send: qp {i} scnt={}: {e}", scnt[i]))?;
                scnt[i] += n;
                tot_s += n;
                posted_any = true;
            }
        }
        let mut progressed = posted_any;
        if let Some(r) = rx.as_deref_mut() {
            if r.poll(res, p, window.as_ref(), failures)? > 0 {
                progressed = true;
            }
        }
        let k = res.scq.poll(&mut wc)?;
        if k > 0 {
            let t = now_ns();
            for w in wc.iter().take(k) {
                if w.status != WcStatus::Success {
                    return Err(wc_error(w, "send"));
                }
                let (i, seq) = split_wr_id(w.wr_id);
                let done = seq + 1;
                let before = ccnt
                    .get(i)
                    .copied()
                    .ok_or_else(|| anyhow!("completion for unknown QP {i}"))?;
                if done <= before {
                    continue;
                }
                if p.verify && failures.len() < 8 {
                    check_completed(res, p, i, before, done, size, inc, rslots, lslots, failures);
                }
                let newly = done - before;
                ccnt[i] = done;
                times.complete(tot_c, tot_c + newly, t);
                if window.is_some_and(|w| w.sampling(t)) {
                    window_count += newly;
                }
                tot_c += newly;
            }
            progressed = true;
            prog.tick(tot_c, total);
        }
        if progressed {
            dog.progress();
        } else if p.use_event && rx.is_none() && window.is_none() {
            let what = || format!("completions ({tot_c} of {total})");
            wait_event(res, false, dog, &what)?;
        } else {
            let what = || {
                format!(
                    "completions ({tot_c} of {total}{})",
                    rx.as_ref()
                        .map(|r| format!(", {} received", r.received()))
                        .unwrap_or_default()
                )
            };
            dog.idle(&what)?;
        }
    }
    if let Some(w) = &window {
        return Ok(duration_report(p, size, window_count, w));
    }
    times.report(p, size, p.iters, q as u64, cq_mod, pl)
}

/// `--verify` on the requester: READ data and atomic return values of operations
/// `from..to` of QP `i`, before their slots are reused.
#[allow(clippy::too_many_arguments)]
fn check_completed(
    res: &Res,
    p: &Params,
    i: usize,
    from: u64,
    to: u64,
    size: u64,
    inc: u64,
    rslots: u64,
    lslots: u64,
    failures: &mut Vec<String>,
) {
    let src = res.src.as_slice();
    for k in from..to {
        let off = i * res.src_slice + ((k % lslots) * inc) as usize;
        match p.cfg.verb {
            Verb::Read => {
                let roff = ((k % rslots) * inc) as usize;
                let got = src.get(off..off + size as usize).unwrap_or(&[]);
                if !verify::check_static(got, i, roff) {
                    failures.push(format!(
                        "verify: QP {i} READ {k} ({size} bytes at offset {roff}) returned other bytes"
                    ));
                    return;
                }
            }
            Verb::Atomic => {
                let got = src
                    .get(off..off + 8)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map(u64::from_ne_bytes);
                let want = match p.atomic {
                    AtomicType::FetchAndAdd => k / rslots,
                    AtomicType::CmpAndSwap => 0,
                };
                if got != Some(want) {
                    failures.push(format!(
                        "verify: QP {i} atomic {k} returned {got:?}, expected {want}"
                    ));
                    return;
                }
            }
            Verb::Write | Verb::Send => {}
        }
    }
}

/// Waits for one send completion.
fn wait_send(res: &Res, p: &Params, dog: &mut Watchdog, what: &dyn Fn() -> String) -> Result<Wc> {
    let mut wc = [Wc::default(); 1];
    let ch = if p.use_event {
        res.channel.as_ref()
    } else {
        None
    };
    wait_cq(&res.scq, ch, &mut wc, dog, what)?;
    let w = wc[0];
    if w.status != WcStatus::Success {
        return Err(wc_error(&w, "send"));
    }
    Ok(w)
}

fn lat_result(size: u64, tposted: &[u64], rtt: u32) -> Result<Run> {
    LatReport::from_post_times(size, tposted, 1000.0, rtt)
        .map(Run::Lat)
        .ok_or_else(|| anyhow!("too few iterations for latency statistics"))
}

fn lat_duration(w: &Window, count: u64, rtt: u32) -> Run {
    let secs = w.secs().max(1e-9);
    let t_avg = if count == 0 {
        0.0
    } else {
        secs * 1e6 / f64::from(rtt) / count as f64
    };
    Run::LatDuration {
        iters: count,
        t_avg,
        tps: count as f64 / secs,
    }
}

/// `write_lat` (perftest's `run_iter_lat_write`): each side WRITEs `size` bytes whose
/// last byte is its counter, then polls its own region's last byte for the peer's next
/// counter; the server sends first.
fn write_lat(
    res: &mut Res,
    p: &Params,
    size: u64,
    role: Role,
    prog: &mut Progress,
    dog: &mut Watchdog,
    failures: &mut Vec<String>,
) -> Result<Run> {
    let window = Window::new(p);
    let iters = if window.is_some() { u64::MAX } else { p.iters };
    let sz = size as usize;
    let rem = *res.remote.first().ok_or_else(|| anyhow!("no remote QP"))?;
    let inline = size <= u64::from(res.inline);
    let mut tposted = Vec::with_capacity(p.iters.min(LAT_PREALLOC) as usize);
    let (mut scnt, mut ccnt, mut rcnt) = (0u64, 0u64, 0u64);
    let mut window_count = 0u64;
    let server = role == Role::Server;
    loop {
        let ended = window.is_some_and(|w| now_ns() >= w.end);
        if ended || (scnt >= iters && ccnt >= iters && rcnt >= iters) {
            break;
        }
        if rcnt < iters && !(scnt < 1 && server) {
            rcnt += 1;
            let want = rcnt as u8;
            loop {
                if volatile::load_u8(&res.dst, sz - 1) == Some(want) {
                    break;
                }
                if window.is_some_and(|w| now_ns() >= w.end) {
                    break;
                }
                let what = || format!("the peer's WRITE {rcnt}");
                dog.idle(&what)?;
            }
            dog.progress();
            if p.verify && failures.len() < 8 {
                let got = res.dst.get(..sz).unwrap_or(&[]);
                if !verify::check_op(got, 0, rcnt, true) {
                    failures.push(format!(
                        "verify: WRITE {rcnt} ({size} bytes) arrived with other bytes"
                    ));
                }
            }
        }
        if scnt < iters && window.is_none_or(|w| now_ns() < w.end) {
            let t = now_ns();
            if window.is_none() {
                tposted.push(t);
            } else if window.is_some_and(|w| w.sampling(t)) {
                window_count += 1;
            }
            scnt += 1;
            {
                let buf = res.src.as_mut_slice();
                if let Some(s) = buf.get_mut(..sz) {
                    if p.verify {
                        verify::fill_op(s, 0, scnt, true);
                    } else if let Some(last) = s.last_mut() {
                        *last = scnt as u8;
                    }
                }
            }
            let sge = [res.src.sge(0, size as u32)];
            let wr = SendWr::write(tx_wr_id(0, scnt - 1), &sge, rem.vaddr, rem.rkey).signaled();
            let wr = if inline {
                wr.inline(res.src.get(..sz).unwrap_or(&[]))
            } else {
                wr
            };
            let qp = res.qps.first().ok_or_else(|| anyhow!("no QP"))?;
            qp.post_send(&[wr])
                .map_err(|e| anyhow!("Couldn't post send: scnt={scnt}: {e}"))?;
        }
        if ccnt < scnt {
            let what = || format!("the completion of WRITE {scnt}");
            wait_send(res, p, dog, &what)?;
            ccnt += 1;
            prog.tick(ccnt, p.iters);
        }
    }
    match &window {
        Some(w) => Ok(lat_duration(w, window_count, 2)),
        None => lat_result(size, &tposted, 2),
    }
}

/// `send_lat` (perftest's `run_iter_lat_send`): the client sends first; each side waits
/// for the peer's message before sending its next.
fn send_lat(
    res: &mut Res,
    p: &Params,
    size: u64,
    role: Role,
    prog: &mut Progress,
    dog: &mut Watchdog,
    failures: &mut Vec<String>,
) -> Result<Run> {
    let window = Window::new(p);
    let iters = if window.is_some() { u64::MAX } else { p.iters };
    let rem = *res.remote.first().ok_or_else(|| anyhow!("no remote QP"))?;
    let inline = size <= u64::from(res.inline);
    let sz = size as usize;
    let mut rx = RecvState::new(res, p, size);
    let mut tposted = Vec::with_capacity(p.iters.min(LAT_PREALLOC) as usize);
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let mut window_count = 0u64;
    let client = role == Role::Client;
    let ud = p.cfg.connection == Connection::Ud;
    loop {
        let ended = window.is_some_and(|w| now_ns() >= w.end);
        if ended || (scnt >= iters && rcnt >= iters) {
            break;
        }
        if rcnt < iters && !(scnt < 1 && client) {
            loop {
                let got = rx.poll(res, p, window.as_ref(), failures)?;
                if got > 0 {
                    rcnt += got as u64;
                    break;
                }
                if window.is_some_and(|w| now_ns() >= w.end) {
                    break;
                }
                let what = || format!("the peer's SEND {}", rcnt + 1);
                if p.use_event {
                    wait_event(res, true, dog, &what)?;
                } else {
                    dog.idle(&what)?;
                }
            }
            dog.progress();
        }
        if scnt < iters && window.is_none_or(|w| now_ns() < w.end) {
            let t = now_ns();
            if window.is_none() {
                tposted.push(t);
            } else if window.is_some_and(|w| w.sampling(t)) {
                window_count += 1;
            }
            if p.verify {
                if let Some(s) = res.src.as_mut_slice().get_mut(..sz) {
                    verify::fill_op(s, 0, scnt, false);
                }
            }
            let sge = [res.src.sge(0, size as u32)];
            let id = tx_wr_id(0, scnt);
            let wr = if ud {
                let ah = res.ahs.first().ok_or_else(|| anyhow!("no AH"))?;
                SendWr::ud_send(id, &sge, ah, rem.qpn, res.qkey)
            } else {
                SendWr::send(id, &sge)
            };
            let wr = if inline {
                wr.inline(res.src.get(..sz).unwrap_or(&[]))
            } else {
                wr
            };
            scnt += 1;
            let qp = res.qps.first().ok_or_else(|| anyhow!("no QP"))?;
            qp.post_send(&[wr.signaled()])
                .map_err(|e| anyhow!("Couldn't post send: scnt={scnt}: {e}"))?;
            let what = || format!("the completion of SEND {scnt}");
            wait_send(res, p, dog, &what)?;
            prog.tick(scnt, p.iters);
        }
    }
    match &window {
        Some(w) => Ok(lat_duration(w, window_count, 2)),
        None => lat_result(size, &tposted, 2),
    }
}

/// `read_lat` / `atomic_lat` (perftest's `run_iter_lat`): one operation at a time, each
/// waited for; the full round trip is reported.
fn rdma_lat(
    res: &mut Res,
    p: &Params,
    size: u64,
    prog: &mut Progress,
    dog: &mut Watchdog,
    failures: &mut Vec<String>,
) -> Result<Run> {
    let window = Window::new(p);
    let iters = if window.is_some() { u64::MAX } else { p.iters };
    let rem = *res.remote.first().ok_or_else(|| anyhow!("no remote QP"))?;
    let mut tposted = Vec::with_capacity(p.iters.min(LAT_PREALLOC) as usize);
    let mut window_count = 0u64;
    let len = if p.cfg.verb == Verb::Atomic {
        8
    } else {
        size as u32
    };
    let mut k = 0u64;
    while k < iters {
        let t = now_ns();
        if let Some(w) = &window {
            if t >= w.end {
                break;
            }
            if w.sampling(t) {
                window_count += 1;
            }
        } else {
            tposted.push(t);
        }
        let sge = [res.src.sge(0, len)];
        let id = tx_wr_id(0, k);
        let wr = match (p.cfg.verb, p.atomic) {
            (Verb::Read, _) => SendWr::read(id, &sge, rem.vaddr, rem.rkey),
            (_, AtomicType::FetchAndAdd) => SendWr::fetch_add(id, &sge[0], rem.vaddr, rem.rkey, 1),
            (_, AtomicType::CmpAndSwap) => {
                SendWr::compare_swap(id, &sge[0], rem.vaddr, rem.rkey, 0, 0)
            }
        };
        let qp = res.qps.first().ok_or_else(|| anyhow!("no QP"))?;
        qp.post_send(&[wr.signaled()])
            .map_err(|e| anyhow!("Couldn't post send: scnt={k}: {e}"))?;
        let what = || format!("the completion of operation {}", k + 1);
        wait_send(res, p, dog, &what)?;
        if p.verify && failures.len() < 8 {
            check_completed(res, p, 0, k, k + 1, size, 0, 1, 1, failures);
        }
        k += 1;
        prog.tick(k, p.iters);
    }
    match &window {
        Some(w) => Ok(lat_duration(w, window_count, 1)),
        None => lat_result(size, &tposted, 1),
    }
}
