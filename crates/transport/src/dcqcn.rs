//! DCQCN congestion control (docs/wire.md §11): the reaction point's rate state machine and
//! pacer, and the notification point's CNP rate limit — sans-IO and deterministic: no clock
//! is read here, every call carries the caller's [`Time`].
//!
//! The algorithm is the one of Zhu et al., "Congestion Control for Large-Scale RDMA
//! Deployments" (SIGCOMM 2015, §3: the RP algorithm, Figure 8), with the parameter names and
//! defaults of the Linux mlx5 driver's congestion parameters
//! (`drivers/infiniband/hw/mlx5/cong.c`: `rp_*`, `np_*`); the CNP itself is IBTA RoCEv2
//! Annex A17 (A17.9).
//!
//! Timer-driven parts (the α update every `alpha_period`, the rate-increase timer every
//! `time_reset`, the deferred cut at most once per `rate_reduce_period`) are evaluated
//! lazily: every call first advances the state, event by event in time order, to the
//! caller's `now`. That is exactly what eager timers would have computed, but a QP whose rate
//! is not limited costs no wake-ups; the only deadline a QP asks for is the pacer's next
//! departure while it has something to send.

use crate::time::Time;

/// Rates are in bits per second.
const MBPS: u64 = 1_000_000;
/// α and the gain `g` are fixed point: 1024 ≙ 1.
const ONE: u32 = 1024;

/// DCQCN parameters (per device; every QP copies them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcqcnParams {
    /// `rp_max_rate`: the highest rate, and the rate at which a QP stops being limited (bit/s).
    pub max_rate: u64,
    /// `rp_min_rate`: never paced below this (bit/s).
    pub min_rate: u64,
    /// `rp_rate_to_set_on_first_cnp` (bit/s). 0: a software NIC has no fixed line rate to start
    /// from, so the first CNP starts from the QP's measured sending rate, or the caller's
    /// delivery-rate estimate if lower ([`Dcqcn::on_cnp_with_hint`]).
    pub rate_on_first_cnp: u64,
    /// `rp_dce_tcp_g`: α gain, in 1/1024 (α ← g·α + (1 − g) after a period with a CNP).
    pub g: u32,
    /// `rp_initial_alpha_value`, in 1/1024.
    pub initial_alpha: u32,
    /// `rp_dce_tcp_rtt`: the α update period (ns).
    pub alpha_period_ns: u64,
    /// `rp_rate_reduce_monitor_period`: at most one rate cut per period (ns).
    pub rate_reduce_period_ns: u64,
    /// A CNP within `rate_reduce_period` of the last cut makes a cut at the period's end
    /// (`true`), or only counts for α (`false`).
    pub defer_cut: bool,
    /// `rp_gd`: a cut is Rc·α / 2^gd with α in 1/1024 (11: the paper's Rc·α/2).
    pub gd: u32,
    /// `rp_min_dec_fac`: a cut leaves at least this percentage of the rate.
    pub min_dec_fac: u32,
    /// `rp_time_reset`: the rate-increase timer period (ns).
    pub time_reset_ns: u64,
    /// `rp_byte_reset`: bytes sent per byte-counter increase event.
    pub byte_reset: u64,
    /// `rp_threshold` (the paper's F): stages of fast recovery before additive increase.
    pub threshold: u32,
    /// `rp_ai_rate`: additive increase step (bit/s).
    pub ai_rate: u64,
    /// `rp_hai_rate`: hyper increase step (bit/s).
    pub hai_rate: u64,
    /// `rp_clamp_tgt_rate`: every cut sets the target rate to the current rate.
    pub clamp_tgt_rate: bool,
    /// `rp_clamp_tgt_rate_ati`: a cut after a timer-driven increase sets the target rate to
    /// the current rate.
    pub clamp_tgt_rate_ati: bool,
    /// `np_min_time_between_cnps`: a notification point sends a QP at most one CNP per this
    /// (ns).
    pub min_time_between_cnps_ns: u64,
    /// The pacer may send this far ahead of its schedule after a late wake-up (ns): its burst
    /// is `rate × burst_ns` (at least one packet).
    pub pacer_burst_ns: u64,
    /// The window over which the sending rate is measured for the first CNP (ns).
    pub measure_ns: u64,
}

impl Default for DcqcnParams {
    /// Software-path time scales (docs/wire.md §11.4): the mlx5 defaults
    /// ([`DcqcnParams::mlx5`]) with the periods stretched to round trips of milliseconds —
    /// a uroce device's path through the kernel, namespaces, VMs or a congested software
    /// switch — where the mlx5 periods (a few µs) would cut the rate many times per round
    /// trip for one congestion event: α updated every 3.3 ms, at most one cut per 3 ms (later
    /// CNPs only feed α), increase timer 4 ms with steps of 2 and 20 Mbit/s (chosen with
    /// `sim`'s 100 Mbit/s scenario and netfault, docs/wire.md §11.7). The notification
    /// point still sends a CNP at most every 50 µs per QP.
    fn default() -> DcqcnParams {
        DcqcnParams {
            alpha_period_ns: 3_300_000,
            rate_reduce_period_ns: 3_000_000,
            defer_cut: false,
            time_reset_ns: 4_000_000,
            ai_rate: 2 * MBPS,
            hai_rate: 20 * MBPS,
            ..DcqcnParams::mlx5()
        }
    }
}

impl DcqcnParams {
    /// The Linux mlx5 defaults (`drivers/infiniband/hw/mlx5/cong.c`, NVIDIA's DCQCN
    /// parameter documentation) for hardware round trips of microseconds, with the DCQCN
    /// paper's α period (55 µs) and N = 50 µs between CNPs: what the simulator's data-centre
    /// scenario runs.
    pub fn mlx5() -> DcqcnParams {
        DcqcnParams {
            max_rate: 100_000 * MBPS,
            min_rate: MBPS,
            rate_on_first_cnp: 0,
            g: 1019,
            initial_alpha: 1023,
            alpha_period_ns: 55_000,
            rate_reduce_period_ns: 4_000,
            defer_cut: true,
            gd: 11,
            min_dec_fac: 50,
            time_reset_ns: 300_000,
            byte_reset: 32_767 * 64,
            threshold: 1,
            ai_rate: 5 * MBPS,
            hai_rate: 50 * MBPS,
            clamp_tgt_rate: false,
            clamp_tgt_rate_ati: true,
            min_time_between_cnps_ns: 50_000,
            pacer_burst_ns: 1_000_000,
            measure_ns: 1_000_000,
        }
    }

    /// Apply `name=value` settings separated by commas, with mlx5's congestion parameter
    /// names and units (`drivers/infiniband/hw/mlx5/cong.c`: rates in Mbit/s, times in µs,
    /// `rp_byte_reset` in bytes here) plus `pacer_burst_us` and `measure_us`; e.g.
    /// `rp_ai_rate=1,rp_time_reset=3000`. On an error nothing is changed and the message
    /// names the setting.
    pub fn apply(&mut self, settings: &str) -> Result<(), String> {
        let mut p = *self;
        for item in settings.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| format!("`{item}`: expected name=value"))?;
            let (name, value) = (name.trim(), value.trim());
            let v: u64 = value
                .parse()
                .map_err(|_| format!("`{name}`: `{value}` is not a non-negative integer"))?;
            let mbps = |v: u64| v.checked_mul(MBPS).ok_or(format!("`{name}`: too large"));
            let us = |v: u64| v.checked_mul(1_000).ok_or(format!("`{name}`: too large"));
            let small = |v: u64, max: u64| {
                if v <= max {
                    Ok(v as u32)
                } else {
                    Err(format!("`{name}`: {v} is above {max}"))
                }
            };
            let flag = |v: u64| match v {
                0 | 1 => Ok(v == 1),
                _ => Err(format!("`{name}`: 0 or 1")),
            };
            match name {
                "rp_max_rate" => p.max_rate = mbps(v)?,
                "rp_min_rate" => p.min_rate = mbps(v)?,
                "rp_rate_to_set_on_first_cnp" => p.rate_on_first_cnp = mbps(v)?,
                "rp_dce_tcp_g" => p.g = small(v, u64::from(ONE))?,
                "rp_initial_alpha_value" => p.initial_alpha = small(v, u64::from(ONE))?,
                "rp_dce_tcp_rtt" => p.alpha_period_ns = us(v)?,
                "rp_rate_reduce_monitor_period" => p.rate_reduce_period_ns = us(v)?,
                "rp_gd" => p.gd = small(v, 31)?,
                "rp_min_dec_fac" => p.min_dec_fac = small(v, 100)?,
                "rp_time_reset" => p.time_reset_ns = us(v)?,
                "rp_byte_reset" => p.byte_reset = v,
                "rp_threshold" => p.threshold = small(v, 1 << 16)?,
                "rp_ai_rate" => p.ai_rate = mbps(v)?,
                "rp_hai_rate" => p.hai_rate = mbps(v)?,
                "rp_clamp_tgt_rate" => p.clamp_tgt_rate = flag(v)?,
                "rp_clamp_tgt_rate_ati" => p.clamp_tgt_rate_ati = flag(v)?,
                "np_min_time_between_cnps" => p.min_time_between_cnps_ns = us(v)?,
                "pacer_burst_us" => p.pacer_burst_ns = us(v)?,
                "measure_us" => p.measure_ns = us(v)?,
                "defer_cut" => p.defer_cut = flag(v)?,
                _ => return Err(format!("unknown DCQCN parameter `{name}`")),
            }
        }
        if p.min_rate > p.max_rate {
            return Err("rp_min_rate is above rp_max_rate".into());
        }
        *self = p;
        Ok(())
    }
}

/// The reaction point of one QP: DCQCN's rate state and the pacer that applies it.
#[derive(Clone, Debug)]
pub struct Dcqcn {
    p: DcqcnParams,
    /// Limited (a CNP arrived and the rate has not recovered to `max_rate`).
    active: bool,
    /// Current rate Rc and target rate Rt (bit/s).
    rc: u64,
    rt: u64,
    alpha: u32,
    /// A CNP arrived in the current α period.
    cnp_in_alpha: bool,
    next_alpha: Time,
    /// When the last cut was made; a CNP within `rate_reduce_period` of it waits.
    last_cut: Option<Time>,
    /// A CNP waiting for its period: the cut happens at this time.
    pending_cut: Option<Time>,
    /// Increase stages since the last cut: timer (T) and byte counter (BC).
    t_stage: u32,
    bc_stage: u32,
    next_increase: Time,
    bytes_since_stage: u64,
    /// A timer-driven increase happened since the last cut (for `clamp_tgt_rate_ati`).
    timer_inc_since_cut: bool,
    /// A byte-counter increase happened since the last cut.
    byte_inc_since_cut: bool,
    /// Pacer: the earliest departure of the next packet.
    next_tx: Time,
    /// Sending-rate measurement: bytes in the current window, its start, the last window's
    /// rate.
    win_start: Time,
    win_bytes: u64,
    measured: u64,
    /// Cuts made and increase events seen (for tests and counters).
    cuts: u64,
}

impl Dcqcn {
    /// An unlimited reaction point.
    pub fn new(p: DcqcnParams) -> Dcqcn {
        Dcqcn {
            p,
            active: false,
            rc: p.max_rate,
            rt: p.max_rate,
            alpha: p.initial_alpha.min(ONE),
            cnp_in_alpha: false,
            next_alpha: Time::ZERO,
            last_cut: None,
            pending_cut: None,
            t_stage: 0,
            bc_stage: 0,
            next_increase: Time::NEVER,
            bytes_since_stage: 0,
            timer_inc_since_cut: false,
            byte_inc_since_cut: false,
            next_tx: Time::ZERO,
            win_start: Time::ZERO,
            win_bytes: 0,
            measured: 0,
            cuts: 0,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &DcqcnParams {
        &self.p
    }

    /// Whether the rate is limited (the pacer is on).
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Current rate Rc (bit/s); `max_rate` while not limited.
    pub fn rate(&self) -> u64 {
        self.rc
    }

    /// Target rate Rt (bit/s).
    pub fn target_rate(&self) -> u64 {
        self.rt
    }

    /// α in 1/1024.
    pub fn alpha(&self) -> u32 {
        self.alpha
    }

    /// Rate cuts made so far.
    pub fn cuts(&self) -> u64 {
        self.cuts
    }

    /// A CNP for this QP arrived at `now`.
    pub fn on_cnp(&mut self, now: Time) {
        self.on_cnp_with_hint(now, None);
    }

    /// A CNP arrived at `now`; `delivery_rate` is the caller's estimate of what the path
    /// delivers for this QP (bit/s; the requester's bytes in flight over its smoothed round
    /// trip), which bounds the start rate of the first CNP when `rate_on_first_cnp` is 0.
    pub fn on_cnp_with_hint(&mut self, now: Time, delivery_rate: Option<u64>) {
        self.advance(now);
        if !self.active {
            // First CNP: start from `rate_on_first_cnp`, else the measured sending rate.
            self.active = true;
            self.alpha = self.p.initial_alpha.min(ONE);
            let start = if self.p.rate_on_first_cnp != 0 {
                self.p.rate_on_first_cnp
            } else {
                let m = self.current_measure(now);
                delivery_rate.filter(|&r| r > 0).map_or(m, |r| r.min(m))
            };
            self.rc = start.clamp(self.p.min_rate.max(1), self.p.max_rate.max(1));
            self.rt = self.rc;
            self.next_alpha = now.add_nanos(self.p.alpha_period_ns.max(1));
            self.cnp_in_alpha = false;
            self.next_tx = now;
            self.last_cut = None;
            self.pending_cut = None;
        }
        self.cnp_in_alpha = true;
        let due = match self.last_cut {
            Some(t) => t.add_nanos(self.p.rate_reduce_period_ns),
            None => now,
        };
        if due <= now {
            self.cut(now);
        } else if self.p.defer_cut && self.pending_cut.is_none() {
            self.pending_cut = Some(due);
        }
    }

    /// `bytes` (a packet, headers included) left at `now`.
    pub fn on_sent(&mut self, now: Time, bytes: usize) {
        let bytes = bytes as u64;
        // Measure the sending rate (used by the first CNP).
        let since = now.nanos_since(self.win_start);
        if since >= self.p.measure_ns.max(1) {
            self.measured = rate_of(self.win_bytes, since);
            self.win_start = now;
            self.win_bytes = 0;
        }
        self.win_bytes = self.win_bytes.saturating_add(bytes);
        if !self.active {
            return;
        }
        self.advance(now);
        if !self.active {
            return;
        }
        // Pacer: the next departure is this one's serialisation time later, but a late
        // sender catches up at most `pacer_burst_ns` (and one packet) of its schedule.
        let burst = self.p.pacer_burst_ns.max(tx_ns(bytes, self.rc));
        let from = self
            .next_tx
            .max(Time::from_nanos(now.as_nanos().saturating_sub(burst)));
        self.next_tx = from.add_nanos(tx_ns(bytes, self.rc));
        // Byte counter: every `byte_reset` bytes is an increase event.
        self.bytes_since_stage = self.bytes_since_stage.saturating_add(bytes);
        while self.active && self.p.byte_reset > 0 && self.bytes_since_stage >= self.p.byte_reset {
            self.bytes_since_stage -= self.p.byte_reset;
            self.bc_stage = self.bc_stage.saturating_add(1);
            self.increase(false);
        }
    }

    /// Whether the pacer lets a packet leave at `now`.
    pub fn may_send(&mut self, now: Time) -> bool {
        if !self.active {
            return true;
        }
        self.advance(now);
        !self.active || self.next_tx <= now
    }

    /// When the pacer next lets a packet leave (`None`: not limited).
    pub fn next_departure(&self) -> Option<Time> {
        self.active.then_some(self.next_tx)
    }

    /// The sending rate measured over the current or last window (bit/s).
    fn current_measure(&self, now: Time) -> u64 {
        let since = now.nanos_since(self.win_start);
        let cur = if since >= self.p.measure_ns / 4 && since > 0 {
            rate_of(self.win_bytes, since)
        } else {
            0
        };
        let m = self.measured.max(cur);
        if m == 0 {
            self.p.max_rate
        } else {
            m
        }
    }

    /// Run every timer event due at or before `now`, in time order.
    fn advance(&mut self, now: Time) {
        // Bounded: each step moves one of three deadlines forward, and α ticks with nothing
        // else due are folded into one step.
        for _ in 0..100_000 {
            if !self.active {
                return;
            }
            let cut_at = self.pending_cut.unwrap_or(Time::NEVER);
            let next = self.next_alpha.min(cut_at).min(self.next_increase);
            if next > now {
                return;
            }
            if cut_at == next {
                self.pending_cut = None;
                self.cut(cut_at);
            } else if self.next_alpha == next {
                // α ticks up to the next other event (or `now`), at once.
                let other = cut_at.min(self.next_increase).min(now.add_nanos(1));
                let period = self.p.alpha_period_ns.max(1);
                let ticks = 1 + other.nanos_since(next).saturating_sub(1) / period;
                let g = self.p.g.min(ONE);
                for i in 0..ticks.min(4096) {
                    let decayed = (u64::from(self.alpha) * u64::from(g) / u64::from(ONE)) as u32;
                    self.alpha = if i == 0 && self.cnp_in_alpha {
                        (decayed + (ONE - g)).min(ONE - 1)
                    } else {
                        decayed
                    };
                    if self.alpha == 0 && i > 0 {
                        break;
                    }
                }
                self.cnp_in_alpha = false;
                self.next_alpha = next.add_nanos(ticks.saturating_mul(period));
            } else {
                self.next_increase = next.add_nanos(self.p.time_reset_ns.max(1));
                self.t_stage = self.t_stage.saturating_add(1);
                self.increase(true);
            }
        }
    }

    /// Cut the rate (a CNP in this monitoring period).
    fn cut(&mut self, now: Time) {
        if self.p.clamp_tgt_rate
            || (self.p.clamp_tgt_rate_ati && self.timer_inc_since_cut)
            || self.byte_inc_since_cut
        {
            self.rt = self.rc;
        }
        let by_alpha =
            u64::try_from((u128::from(self.rc) * u128::from(self.alpha)) >> self.p.gd.min(63))
                .unwrap_or(u64::MAX);
        let by_floor = self.rc / 100 * u64::from(100 - self.p.min_dec_fac.min(100));
        self.rc = self
            .rc
            .saturating_sub(by_alpha.min(by_floor))
            .max(self.p.min_rate.max(1));
        self.rt = self.rt.max(self.rc);
        self.last_cut = Some(now);
        self.cuts += 1;
        self.t_stage = 0;
        self.bc_stage = 0;
        self.bytes_since_stage = 0;
        self.timer_inc_since_cut = false;
        self.byte_inc_since_cut = false;
        self.next_increase = now.add_nanos(self.p.time_reset_ns.max(1));
    }

    /// A rate-increase event (timer or byte counter): fast recovery, additive or hyper
    /// increase of the target rate, then Rc halfway to it. Back at `max_rate`: unlimited.
    fn increase(&mut self, by_timer: bool) {
        let f = self.p.threshold;
        let (lo, hi) = (
            self.t_stage.min(self.bc_stage),
            self.t_stage.max(self.bc_stage),
        );
        if lo > f {
            self.rt = self.rt.saturating_add(self.p.hai_rate);
        } else if hi >= f && hi > 0 {
            self.rt = self.rt.saturating_add(self.p.ai_rate);
        }
        self.rt = self.rt.min(self.p.max_rate);
        // Halfway, rounded up so that Rc reaches Rt.
        self.rc = if self.rt >= self.rc {
            self.rc + (self.rt - self.rc).div_ceil(2)
        } else {
            self.rt
        };
        self.timer_inc_since_cut |= by_timer;
        self.byte_inc_since_cut |= !by_timer;
        if self.rc >= self.p.max_rate {
            self.active = false;
            self.rc = self.p.max_rate;
            self.rt = self.p.max_rate;
            self.pending_cut = None;
            self.next_increase = Time::NEVER;
        }
    }
}

/// Nanoseconds `bytes` take at `rate` bit/s.
fn tx_ns(bytes: u64, rate: u64) -> u64 {
    let r = u128::from(rate.max(1));
    u64::try_from((u128::from(bytes) * 8 * 1_000_000_000).div_ceil(r)).unwrap_or(u64::MAX)
}

/// The rate (bit/s) of `bytes` over `ns`.
fn rate_of(bytes: u64, ns: u64) -> u64 {
    u64::try_from(u128::from(bytes) * 8 * 1_000_000_000 / u128::from(ns.max(1))).unwrap_or(u64::MAX)
}

/// The notification point of one QP: at most one CNP per `min_time_between_cnps`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CnpGate {
    last: Option<Time>,
}

impl CnpGate {
    /// A CE-marked packet arrived at `now`: whether a CNP may go (and it is then counted as
    /// sent at `now`).
    pub fn allow(&mut self, now: Time, min_gap_ns: u64) -> bool {
        match self.last {
            Some(t) if now.nanos_since(t) < min_gap_ns && now >= t => false,
            _ => {
                self.last = Some(now);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = MBPS;

    fn params() -> DcqcnParams {
        DcqcnParams {
            max_rate: 1000 * M,
            rate_on_first_cnp: 800 * M,
            ..DcqcnParams::mlx5()
        }
    }

    fn us(v: u64) -> Time {
        Time::from_micros(v)
    }

    #[test]
    fn unlimited_until_the_first_cnp() {
        let mut d = Dcqcn::new(params());
        assert!(!d.is_active());
        assert!(d.may_send(us(1)));
        d.on_sent(us(1), 1_000_000);
        assert!(d.may_send(us(1)), "an unlimited QP is never paced");
        assert_eq!(d.next_departure(), None);
    }

    #[test]
    fn first_cnp_sets_the_start_rate_and_cuts_by_alpha() {
        let mut d = Dcqcn::new(params());
        d.on_cnp(us(10));
        assert!(d.is_active());
        // α = 1023/1024: Rc·α/2 ≈ 400 Mb/s off 800 (min_dec_fac 50 % allows it).
        assert_eq!(d.target_rate(), 800 * M);
        let want = 800 * M - ((800 * M * 1023) >> 11);
        assert_eq!(d.rate(), want);
        assert_eq!(d.cuts(), 1);
    }

    #[test]
    fn min_dec_fac_bounds_one_cut() {
        let mut d = Dcqcn::new(DcqcnParams {
            min_dec_fac: 80,
            ..params()
        });
        d.on_cnp(us(10));
        assert_eq!(d.rate(), 640 * M, "a cut leaves at least 80 %");
    }

    #[test]
    fn at_most_one_cut_per_monitor_period() {
        let mut d = Dcqcn::new(params());
        d.on_cnp(us(10));
        let r1 = d.rate();
        d.on_cnp(us(11));
        d.on_cnp(us(12));
        assert_eq!(d.rate(), r1, "within 4 µs of the cut: deferred");
        assert_eq!(d.cuts(), 1);
        assert!(d.may_send(us(14)));
        assert_eq!(d.cuts(), 2, "the deferred cut happens at the period's end");
        assert!(d.rate() < r1);
        d.may_send(us(100));
        assert_eq!(d.cuts(), 2, "several CNPs in one period make one cut");
    }

    #[test]
    fn alpha_rises_with_cnps_and_decays_without() {
        let mut d = Dcqcn::new(DcqcnParams {
            initial_alpha: 512,
            ..params()
        });
        d.on_cnp(us(0));
        assert_eq!(d.alpha(), 512);
        // CNP in the first period: α = g·α + (1 − g).
        d.may_send(us(55));
        assert_eq!(d.alpha(), (512 * 1019 / 1024) + 5);
        let a = d.alpha();
        // Ten quiet periods: α decays geometrically.
        d.may_send(us(55 * 11));
        let mut want = a;
        for _ in 0..10 {
            want = want * 1019 / 1024;
        }
        assert_eq!(d.alpha(), want);
    }

    #[test]
    fn lazy_timers_equal_eager_ones() {
        // The same CNP/send schedule, evaluated with calls every microsecond and only at the
        // events, ends in the same state.
        let events: Vec<(u64, bool)> = (0..200)
            .map(|i| (i * 37 % 5000 + i * 53, i % 7 == 0))
            .collect();
        let mut sorted = events.clone();
        sorted.sort();
        let run = |eager: bool| {
            let mut d = Dcqcn::new(params());
            let mut t = 0;
            for &(at, cnp) in &sorted {
                if eager {
                    while t < at {
                        d.may_send(us(t));
                        t += 1;
                    }
                }
                if cnp {
                    d.on_cnp(us(at));
                } else {
                    d.on_sent(us(at), 1000);
                }
            }
            d.may_send(us(6000));
            (
                d.rate(),
                d.target_rate(),
                d.alpha(),
                d.cuts(),
                d.is_active(),
            )
        };
        assert_eq!(run(false), run(true));
    }

    #[test]
    fn recovery_fast_then_additive_then_hyper_back_to_unlimited() {
        let mut d = Dcqcn::new(DcqcnParams {
            threshold: 2,
            byte_reset: 10_000,
            ..params()
        });
        d.on_cnp(us(0));
        let rc0 = d.rate();
        let rt0 = d.target_rate();
        // Fast recovery: one timer event halves the distance to Rt; Rt unchanged.
        d.may_send(us(300));
        assert_eq!(d.target_rate(), rt0);
        assert_eq!(d.rate(), rc0 + (rt0 - rc0).div_ceil(2));
        // Second timer stage (T = 2 ≥ F): additive increase.
        d.may_send(us(600));
        assert_eq!(d.target_rate(), rt0 + 5 * M);
        // T = 3 > F, and byte stages above F too: hyper increase.
        d.may_send(us(900));
        assert_eq!(d.target_rate(), rt0 + 10 * M);
        for _ in 0..2 {
            d.on_sent(us(901), 10_000);
        }
        assert_eq!(d.target_rate(), rt0 + 20 * M, "BC = 2: not above F yet");
        d.on_sent(us(901), 10_000);
        assert_eq!(d.target_rate(), rt0 + 70 * M);
        // With no more CNPs it returns to unlimited.
        d.may_send(us(2_000_000));
        assert!(!d.is_active());
        assert_eq!(d.rate(), 1000 * M);
    }

    #[test]
    fn pacer_spaces_packets_at_the_rate() {
        let mut d = Dcqcn::new(DcqcnParams {
            rate_on_first_cnp: 80 * M,
            min_dec_fac: 100,
            gd: 63, // no cut: Rc stays 80 Mb/s
            pacer_burst_ns: 0,
            ..params()
        });
        d.on_cnp(us(0));
        assert_eq!(d.rate(), 80 * M);
        assert!(d.may_send(us(0)));
        d.on_sent(us(0), 1000); // 100 µs at 80 Mb/s
        assert!(!d.may_send(us(99)));
        assert_eq!(d.next_departure(), Some(us(100)));
        assert!(d.may_send(us(100)));
    }

    #[test]
    fn first_cnp_without_a_start_rate_uses_the_measured_rate() {
        let mut d = Dcqcn::new(DcqcnParams {
            rate_on_first_cnp: 0,
            measure_ns: 1_000_000,
            ..params()
        });
        // 100 Mb/s: 12.5 kB per ms.
        for i in 0..30 {
            d.on_sent(us(i * 80), 1000);
        }
        d.on_cnp(us(2400));
        assert_eq!(d.target_rate(), 100 * M);
        // A lower delivery-rate estimate wins.
        let mut d = Dcqcn::new(DcqcnParams {
            rate_on_first_cnp: 0,
            ..params()
        });
        for i in 0..30 {
            d.on_sent(us(i * 80), 1000);
        }
        d.on_cnp_with_hint(us(2400), Some(40 * M));
        assert_eq!(d.target_rate(), 40 * M);
    }

    #[test]
    fn settings_use_mlx5_names_and_units_and_reject_nonsense() {
        let mut p = DcqcnParams::mlx5();
        p.apply("rp_ai_rate=2, rp_time_reset=3000,np_min_time_between_cnps=4,rp_clamp_tgt_rate=1")
            .unwrap();
        assert_eq!(p.ai_rate, 2 * M);
        assert_eq!(p.time_reset_ns, 3_000_000);
        assert_eq!(p.min_time_between_cnps_ns, 4_000);
        assert!(p.clamp_tgt_rate);
        let before = p;
        for bad in [
            "rp_ai_rate",
            "rp_ai_rate=-1",
            "rp_ai_rate=x",
            "rp_dce_tcp_g=2000",
            "rp_min_dec_fac=101",
            "rp_clamp_tgt_rate=2",
            "nope=1",
            "rp_max_rate=18446744073709551615",
            "rp_min_rate=5,rp_max_rate=1",
            "rp_ai_rate=1,bogus",
        ] {
            assert!(p.apply(bad).is_err(), "{bad}");
            assert_eq!(p, before, "{bad}: nothing changed");
        }
        assert_eq!(p.apply(""), Ok(()));
    }

    #[test]
    fn settings_parser_never_panics() {
        // A deterministic spread of hostile strings (the parser sees the environment).
        let pieces = [
            "rp_ai_rate",
            "=",
            ",",
            "1",
            "18446744073709551616",
            "rp_gd=",
            "np_min_time_between_cnps",
            " ",
            "\u{0}",
            "é",
            "rp_dce_tcp_g=1024",
            "-",
            "0x10",
        ];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..5000 {
            let mut s = String::new();
            for _ in 0..(x % 9) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                s.push_str(pieces[(x % pieces.len() as u64) as usize]);
            }
            let mut p = DcqcnParams::default();
            let _ = p.apply(&s);
            assert!(p.min_rate <= p.max_rate && p.g <= ONE && p.min_dec_fac <= 100);
        }
    }

    #[test]
    fn cnp_gate_spaces_cnps() {
        let mut g = CnpGate::default();
        assert!(g.allow(us(0), 50_000));
        assert!(!g.allow(us(49), 50_000));
        assert!(g.allow(us(50), 50_000));
        assert!(!g.allow(us(60), 50_000));
    }
}
