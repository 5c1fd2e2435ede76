//! The simulated network: endpoints with their QPs and memory, a virtual clock that jumps to
//! the next event, and links that drop, duplicate, reorder, delay (with jitter), corrupt and
//! partition — all decided by one seeded PRNG.
//!
//! Frames are real bytes: each packet a QP transmits is wrapped with
//! [`wire::frame::build_l3`] (IPv4, UDP, ICRC); corruption flips bits of those bytes; receivers
//! parse with [`wire::frame::parse_l3`] and drop frames whose ICRC (or IPv4 header checksum)
//! fails — the same path a NIC takes. The simulator knows which bytes it flipped, so a flip in
//! an ICRC-covered byte that is nonetheless accepted is reported as an undetected corruption.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr};

use transport::wire::{
    self, BthRepr, DethRepr, IpRepr, Opcode, Psn, Qkey, Qpn, RocePacketRepr, UdpRepr,
};
use transport::{Grh, Qp, QpConfig, RecvQueue, RxMeta, Srq, Time};

use crate::rng::Rng;
use crate::SimMemory;

/// Link behaviour (the same for every directed pair of endpoints).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// Probability a frame is dropped.
    pub loss: f64,
    /// Probability a frame is delivered twice.
    pub dup: f64,
    /// Probability a frame is held back by an extra delay (so later frames overtake it).
    pub reorder: f64,
    /// Probability 1–3 bits of a frame are flipped.
    pub corrupt: f64,
    /// One-way propagation delay.
    pub delay_ns: u64,
    /// Extra uniform delay in `[0, jitter_ns]` (frames still arrive in order unless reordered).
    pub jitter_ns: u64,
    /// Extra delay range for reordered frames.
    pub reorder_delay_ns: (u64, u64),
    /// Egress line rate in bits per nanosecond (Gbit/s); 0 = infinitely fast.
    pub rate_gbps: u64,
    /// From this virtual time on every link is cut, for good.
    pub partition_at: Option<Time>,
    /// A congested switch port in front of every endpoint (`None`: none).
    pub bottleneck: Option<Bottleneck>,
}

/// A switch egress port in front of each endpoint, shared by every frame to that endpoint:
/// a FIFO drained at `rate_mbps`, dropping a frame that would take it above `queue_bytes`
/// (tail drop) and marking an ECN-capable frame CE (RFC 3168) when more than `mark_bytes`
/// wait ahead of it (a step marking threshold, DCTCP-style, as a switch with
/// Kmin = Kmax does for DCQCN). Frames reach the port after the link delay and leave it for
/// the endpoint at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bottleneck {
    /// Drain rate (Mbit/s, Ethernet framing included as on the egress links).
    pub rate_mbps: u64,
    /// Queue limit (bytes).
    pub queue_bytes: u64,
    /// Marking threshold (bytes queued ahead of the frame).
    pub mark_bytes: u64,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay_ns: 2_000,
            jitter_ns: 500,
            reorder_delay_ns: (1_000, 20_000),
            rate_gbps: 25,
            partition_at: None,
            bottleneck: None,
        }
    }
}

/// What the network did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Frames put on a link.
    pub frames_sent: u64,
    /// Frames handed to a QP.
    pub frames_delivered: u64,
    /// Frames dropped by loss.
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Frames held back.
    pub reordered: u64,
    /// Frames with flipped bits.
    pub corrupted: u64,
    /// Corrupted frames the receiver rejected (ICRC, IP checksum or parse).
    pub corrupt_detected: u64,
    /// Corrupted frames whose flips were all in fields the ICRC deliberately excludes (and the
    /// IPv4 checksum did not catch); delivered, harmless to the transport.
    pub corrupt_masked_delivered: u64,
    /// Corrupted frames with a flip in an ICRC-covered byte that were accepted: a violation.
    pub undetected_corruption: u64,
    /// Frames dropped by the partition.
    pub partition_drops: u64,
    /// Frames rejected without having been corrupted, or not for any QP: a violation.
    pub malformed: u64,
    /// Bottleneck: frames dropped at a full queue.
    pub tail_dropped: u64,
    /// Bottleneck: frames marked CE.
    pub ce_marked: u64,
    /// Bottleneck: frames above the marking threshold that were not ECN-capable.
    pub nonect: u64,
    /// Bottleneck: the most bytes ever queued at one port (since the last
    /// [`Sim::reset_max_queue`]).
    pub max_queue_bytes: u64,
}

/// A QP living at an endpoint.
#[derive(Debug)]
pub struct SimQp {
    /// The transport state machine.
    pub qp: Qp,
    /// Endpoint of the connected peer (RC/UC); for UD the WR's AH names the endpoint.
    pub peer_ep: usize,
    timer_at: Option<Time>,
}

/// The Communication Manager on an endpoint's QP 1 ([`Sim::enable_cm`]; the `cm` crate, IBTA
/// Vol 1 §12): its MADs travel as RoCEv2 UD SEND Only frames to QP 1 with the GSI Q_Key, over
/// the same links as the data. The caller drives the consumer side: it calls the CM (then
/// [`Sim::kick`]) and takes [`SimCm::events`].
#[derive(Debug)]
pub struct SimCm {
    /// The state machines.
    pub cm: cm::Cm,
    /// Events the CM reported, oldest first, not yet taken by the caller.
    pub events: Vec<cm::CmEvent>,
    timer_at: Option<Time>,
    psn: u32,
}

/// One host: an IP address, QPs, registered memory, optionally an SRQ.
#[derive(Debug)]
pub struct Endpoint {
    /// The endpoint's address.
    pub ip: Ipv4Addr,
    /// Its QPs.
    pub qps: Vec<SimQp>,
    /// Its registered memory (the NIC's MR table and DMA checks).
    pub mem: SimMemory,
    /// Its shared receive queue, for QPs created with `uses_srq`.
    pub srq: Option<Srq>,
    /// Its Communication Manager, if enabled.
    pub cm: Option<SimCm>,
    tx_free_at: Time,
    tx_ready_at: Option<Time>,
    rr: usize,
}

impl Endpoint {
    /// Index of the QP numbered `qpn`.
    pub fn qp_index(&self, qpn: wire::Qpn) -> Option<usize> {
        self.qps.iter().position(|q| q.qp.qpn() == qpn)
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Deliver the frame in `frames[slot]` to endpoint `to`.
    Deliver {
        to: u32,
        slot: u32,
        flipped: bool,
        covered: bool,
    },
    Timer {
        ep: u32,
        qp: u32,
    },
    TxReady {
        ep: u32,
    },
    /// The CM deadline of endpoint `ep`.
    CmTimer {
        ep: u32,
    },
    /// The frame in `frames[slot]` reaches the bottleneck port in front of `to`.
    Enqueue {
        to: u32,
        slot: u32,
        flipped: bool,
        covered: bool,
    },
}

#[derive(Debug)]
struct Event {
    at: Time,
    seq: u64,
    kind: Kind,
}

impl PartialEq for Event {
    fn eq(&self, o: &Event) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Event) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    // Min-heap on (time, sequence number): ties resolve in scheduling order, deterministically.
    fn cmp(&self, o: &Event) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// What one [`Sim::step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// No events left.
    Idle,
    /// An event touched this endpoint (completions may be waiting).
    Touched(usize),
    /// A stale event was discarded.
    Nothing,
}

/// The simulator.
#[derive(Debug)]
pub struct Sim {
    now: Time,
    /// The endpoints.
    pub endpoints: Vec<Endpoint>,
    link: LinkConfig,
    queue: BinaryHeap<Event>,
    seq: u64,
    rng: Rng,
    /// Frames in flight, indexed by `Kind::Deliver::slot`; `free` lists unused slots.
    frames: Vec<Vec<u8>>,
    free: Vec<u32>,
    txbuf: Vec<u8>,
    /// Latest scheduled in-order arrival per (src, dst), so jitter never reorders.
    fifo: Vec<Vec<Time>>,
    /// Bottleneck: when each endpoint's port has sent everything queued.
    port_free: Vec<Time>,
    stats: NetStats,
}

/// Buffer big enough for any packet at MTU 4096.
const TXBUF_LEN: usize = 4096 + transport::MAX_HEADER_LEN + 64;

/// Egress queue: frames may be built up to this far ahead of their departure (a NIC's small
/// transmit FIFO), so one wake-up sends a few frames.
const TX_HORIZON_NS: u64 = 2_000;

/// Bytes of an IPv4 RoCEv2 frame the ICRC deliberately excludes (docs/wire.md §3.2): TOS (1),
/// TTL (8), IPv4 header checksum (10, 11), UDP checksum (26, 27), BTH byte 4 (32). A flip
/// there is not the ICRC's to catch (the IPv4 checksum catches most TOS/TTL flips; the rest are
/// fields the transport ignores).
fn icrc_masked(off: usize) -> bool {
    matches!(off, 1 | 8 | 10 | 11 | 26 | 27 | 32)
}

impl Sim {
    /// A network with no endpoints; `seed` drives every random choice the network makes.
    pub fn new(seed: u64, link: LinkConfig) -> Sim {
        Sim {
            now: Time::ZERO,
            endpoints: Vec::new(),
            link,
            queue: BinaryHeap::new(),
            seq: 0,
            rng: Rng::fork(seed, 0x4E45_5457),
            frames: Vec::new(),
            free: Vec::new(),
            txbuf: vec![0; TXBUF_LEN],
            fifo: Vec::new(),
            port_free: Vec::new(),
            stats: NetStats::default(),
        }
    }

    /// Current virtual time.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Network statistics.
    pub fn stats(&self) -> &NetStats {
        &self.stats
    }

    /// The link configuration.
    pub fn link(&self) -> &LinkConfig {
        &self.link
    }

    /// Start measuring [`NetStats::max_queue_bytes`] afresh (e.g. after a warm-up).
    pub fn reset_max_queue(&mut self) {
        self.stats.max_queue_bytes = 0;
    }

    /// Bytes queued now at the bottleneck port in front of endpoint `ep`.
    pub fn queued_bytes(&self, ep: usize) -> u64 {
        match (self.link.bottleneck, self.port_free.get(ep)) {
            (Some(b), Some(&free)) => backlog_bytes(free.nanos_since(self.now), b.rate_mbps),
            _ => 0,
        }
    }

    /// Add an endpoint with address `ip`; returns its index.
    pub fn add_endpoint(&mut self, ip: Ipv4Addr) -> usize {
        self.endpoints.push(Endpoint {
            ip,
            qps: Vec::new(),
            mem: SimMemory::new(),
            srq: None,
            cm: None,
            tx_free_at: Time::ZERO,
            tx_ready_at: None,
            rr: 0,
        });
        let n = self.endpoints.len();
        for row in &mut self.fifo {
            row.push(Time::ZERO);
        }
        self.fifo.push(vec![Time::ZERO; n]);
        self.port_free.push(Time::ZERO);
        n - 1
    }

    /// Create a QP at endpoint `ep` whose peer lives at `peer_ep`; returns its index there.
    pub fn add_qp(&mut self, ep: usize, cfg: QpConfig, peer_ep: usize) -> usize {
        let e = &mut self.endpoints[ep];
        e.qps.push(SimQp {
            qp: Qp::new(cfg),
            peer_ep,
            timer_at: None,
        });
        e.qps.len() - 1
    }

    /// Give endpoint `ep` a Communication Manager on its QP 1.
    pub fn enable_cm(&mut self, ep: usize, cfg: cm::CmConfig) {
        self.endpoints[ep].cm = Some(SimCm {
            cm: cm::Cm::new(cfg),
            events: Vec::new(),
            timer_at: None,
            psn: 0,
        });
    }

    /// The QP `qp` of endpoint `ep`.
    pub fn qp_mut(&mut self, ep: usize, qp: usize) -> &mut Qp {
        &mut self.endpoints[ep].qps[qp].qp
    }

    /// Time of the next event, if any.
    pub fn next_event_at(&self) -> Option<Time> {
        self.queue.peek().map(|e| e.at)
    }

    /// Move the clock forward to `t` (for application timers between network events). Never
    /// moves backwards and never past a pending event.
    pub fn advance_to(&mut self, t: Time) {
        let limit = self.next_event_at().unwrap_or(Time::NEVER);
        self.now = self.now.max(t.min(limit));
    }

    fn push(&mut self, at: Time, kind: Kind) {
        self.seq += 1;
        self.queue.push(Event {
            at,
            seq: self.seq,
            kind,
        });
    }

    /// After the application posted work at `ep`: transmit what can go and re-arm timers.
    pub fn kick(&mut self, ep: usize) {
        self.pump(ep);
    }

    /// Process the next event.
    pub fn step(&mut self) -> Step {
        let Some(ev) = self.queue.pop() else {
            return Step::Idle;
        };
        self.now = self.now.max(ev.at);
        match ev.kind {
            Kind::Deliver {
                to,
                slot,
                flipped,
                covered,
            } => {
                let frame = std::mem::take(&mut self.frames[slot as usize]);
                self.deliver(to as usize, &frame, flipped, covered);
                self.frames[slot as usize] = frame;
                self.free.push(slot);
                self.pump(to as usize);
                Step::Touched(to as usize)
            }
            Kind::Timer { ep, qp } => {
                let (ep, qp) = (ep as usize, qp as usize);
                let q = &mut self.endpoints[ep].qps[qp];
                if q.timer_at != Some(ev.at) {
                    return Step::Nothing;
                }
                // Timers are scheduled lazily: the QP may have moved its deadline later since;
                // `handle_timeout` does nothing early, and `pump` re-arms at the new deadline.
                q.timer_at = None;
                q.qp.handle_timeout(self.now);
                self.pump(ep);
                Step::Touched(ep)
            }
            Kind::Enqueue {
                to,
                slot,
                flipped,
                covered,
            } => {
                self.enqueue(to as usize, slot, flipped, covered);
                Step::Nothing
            }
            Kind::CmTimer { ep } => {
                let ep = ep as usize;
                let now = self.now;
                let Some(c) = self.endpoints[ep].cm.as_mut() else {
                    return Step::Nothing;
                };
                if c.timer_at != Some(ev.at) {
                    return Step::Nothing;
                }
                c.timer_at = None;
                c.cm.handle_timeout(now);
                while let Some(e) = c.cm.poll_event() {
                    c.events.push(e);
                }
                self.pump(ep);
                Step::Touched(ep)
            }
            Kind::TxReady { ep } => {
                let ep = ep as usize;
                if self.endpoints[ep].tx_ready_at != Some(ev.at) {
                    return Step::Nothing;
                }
                self.endpoints[ep].tx_ready_at = None;
                self.pump(ep);
                Step::Touched(ep)
            }
        }
    }

    /// A free frame slot (reusing its buffer).
    fn alloc_frame(&mut self) -> u32 {
        match self.free.pop() {
            Some(s) => s,
            None => {
                self.frames.push(Vec::new());
                (self.frames.len() - 1) as u32
            }
        }
    }

    fn deliver(&mut self, to: usize, frame: &[u8], flipped: bool, covered: bool) {
        let parsed = match wire::parse_l3(frame) {
            Ok(p) if p.icrc_ok && p.ip_checksum_ok => p,
            _ => {
                if flipped {
                    self.stats.corrupt_detected += 1;
                } else {
                    self.stats.malformed += 1;
                }
                return;
            }
        };
        if flipped {
            if covered {
                self.stats.undetected_corruption += 1;
            } else {
                self.stats.corrupt_masked_delivered += 1;
            }
        }
        let now = self.now;
        let e = &mut self.endpoints[to];
        if parsed.packet.bth.dest_qp == Qpn::GSI {
            if let Some(c) = e.cm.as_mut() {
                let gsi = parsed.packet.bth.opcode == Opcode::UD_SEND_ONLY
                    && parsed.packet.deth.is_some_and(|d| d.qkey == Qkey::GSI);
                let src = match parsed.ip {
                    IpRepr::V4 { src, .. } => Some(IpAddr::V4(src)),
                    _ => None,
                };
                match (gsi, src) {
                    (true, Some(src)) => {
                        self.stats.frames_delivered += 1;
                        c.cm.handle_mad(now, src, parsed.packet.payload);
                        while let Some(ev) = c.cm.poll_event() {
                            c.events.push(ev);
                        }
                    }
                    _ => self.stats.malformed += 1,
                }
                return;
            }
        }
        let Some(qi) = e.qp_index(parsed.packet.bth.dest_qp) else {
            self.stats.malformed += 1;
            return;
        };
        let mut hdr = [0u8; 20];
        if let Some(h) = frame.get(..20) {
            hdr.copy_from_slice(h);
        }
        let meta = RxMeta {
            grh: Grh::V4(hdr),
            ce: hdr[1] & 3 == 3,
        };
        self.stats.frames_delivered += 1;
        let srq = e.srq.as_mut().map(|s| s as &mut dyn RecvQueue);
        let qp = &mut e.qps[qi].qp;
        let mut mem = e.mem.for_qp(qp.qpn());
        qp.handle_packet(now, &parsed.packet, &meta, &mut mem, srq);
    }

    /// Transmit while the endpoint's egress queue has room (at most [`TX_HORIZON_NS`] of
    /// frames waiting to serialise) and some QP has a packet; then re-arm the QP timers.
    fn pump(&mut self, ep: usize) {
        let now = self.now;
        let horizon = now.add_nanos(TX_HORIZON_NS);
        loop {
            let e = &mut self.endpoints[ep];
            if e.tx_free_at > horizon {
                let at = e.tx_free_at.min(Time::NEVER).max(now);
                let at = Time::from_nanos(at.as_nanos().saturating_sub(TX_HORIZON_NS)).max(now);
                if e.tx_ready_at.is_none_or(|t| t > at) {
                    e.tx_ready_at = Some(at);
                    self.push(at, Kind::TxReady { ep: ep as u32 });
                }
                break;
            }
            let n = e.qps.len();
            let mut sent = None;
            for k in 0..n {
                let i = (e.rr + k) % n;
                let qp = &mut e.qps[i].qp;
                let mut mem = e.mem.for_qp(qp.qpn());
                if let Some(t) = qp.poll_transmit(now, &mut mem, &mut self.txbuf) {
                    e.rr = i + 1;
                    sent = Some((i, t));
                    break;
                }
            }
            let Some((qi, t)) = sent else { break };
            let dst = match t.ah {
                Some(ah) => ah as usize,
                None => self.endpoints[ep].qps[qi].peer_ep,
            };
            let lqpn = self.endpoints[ep].qps[qi].qp.qpn();
            self.send_frame(ep, lqpn, dst, t.len);
        }
        self.pump_cm(ep);
        for qi in 0..self.endpoints[ep].qps.len() {
            let q = &mut self.endpoints[ep].qps[qi];
            if let Some(w) = q.qp.poll_timeout() {
                let w = w.max(now);
                // Only an earlier deadline needs a new event; a later one is picked up when
                // the pending event fires.
                if q.timer_at.is_none_or(|t| w < t) {
                    q.timer_at = Some(w);
                    self.push(
                        w,
                        Kind::Timer {
                            ep: ep as u32,
                            qp: qi as u32,
                        },
                    );
                }
            }
        }
    }

    /// Send the CM's MADs of endpoint `ep` (UD SEND Only to QP 1 of the endpoint with the
    /// MAD's address; one to an address no endpoint has is lost) and re-arm its timer.
    fn pump_cm(&mut self, ep: usize) {
        let now = self.now;
        loop {
            let Some(c) = self.endpoints[ep].cm.as_mut() else {
                return;
            };
            let Some(t) = c.cm.poll_transmit() else { break };
            let psn = c.psn;
            c.psn = (c.psn + 1) & 0x00ff_ffff;
            let dst = self.endpoints.iter().position(|e| IpAddr::V4(e.ip) == t.to);
            let Some(dst) = dst else {
                self.stats.dropped += 1;
                continue;
            };
            let mut pkt = RocePacketRepr::new(
                BthRepr::new(Opcode::UD_SEND_ONLY, Qpn::GSI, Psn::new(psn)),
                &t.mad[..],
            );
            pkt.deth = Some(DethRepr {
                qkey: Qkey::GSI,
                src_qp: Qpn::GSI,
            });
            let Ok(len) = pkt.emit(&mut self.txbuf) else {
                self.stats.malformed += 1;
                continue;
            };
            self.send_frame(ep, Qpn::GSI, dst, len);
        }
        if let Some(c) = self.endpoints[ep].cm.as_mut() {
            if let Some(w) = c.cm.poll_timeout() {
                let w = w.max(now);
                if c.timer_at.is_none_or(|t| w < t) {
                    c.timer_at = Some(w);
                    self.push(w, Kind::CmTimer { ep: ep as u32 });
                }
            }
        }
    }

    fn send_frame(&mut self, src: usize, lqpn: Qpn, dst: usize, len: usize) {
        let Some(dst_ip) = self.endpoints.get(dst).map(|e| e.ip) else {
            self.stats.malformed += 1;
            return;
        };
        let slot = self.alloc_frame();
        let Ok(pkt) = RocePacketRepr::parse(&self.txbuf[..len]) else {
            self.stats.malformed += 1;
            self.free.push(slot);
            return;
        };
        let e = &self.endpoints[src];
        let ip = IpRepr::v4_socket(e.ip, dst_ip, 0x02, 64);
        let udp = UdpRepr::roce(wire::udp_sport_for_qp(lqpn, pkt.bth.dest_qp, 0));
        let mut frame = std::mem::take(&mut self.frames[slot as usize]);
        frame.clear();
        frame.resize(wire::frame::l3_len(&ip, &pkt), 0);
        let Ok(n) = wire::build_l3(&ip, &udp, &pkt, &mut frame) else {
            self.stats.malformed += 1;
            self.frames[slot as usize] = frame;
            self.free.push(slot);
            return;
        };
        frame.truncate(n);
        self.stats.frames_sent += 1;
        let now = self.now;
        // Egress serialisation (Ethernet header + FCS + preamble/IFG ≈ 38 bytes on the wire).
        let ser_ns = if self.link.rate_gbps == 0 {
            0
        } else {
            ((n as u64 + 38) * 8).div_ceil(self.link.rate_gbps)
        };
        let start = self.endpoints[src].tx_free_at.max(now);
        let done = start.add_nanos(ser_ns);
        self.endpoints[src].tx_free_at = done;

        let cut = |t: Time, l: &LinkConfig| l.partition_at.is_some_and(|p| t >= p);
        if cut(now, &self.link) || self.rng.chance(self.link.loss) {
            if cut(now, &self.link) {
                self.stats.partition_drops += 1;
            } else {
                self.stats.dropped += 1;
            }
            self.frames[slot as usize] = frame;
            self.free.push(slot);
            return;
        }
        let copies = if self.rng.chance(self.link.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for c in 0..copies {
            let (fslot, mut f) = if c + 1 == copies {
                (slot, std::mem::take(&mut frame))
            } else {
                let d_slot = self.alloc_frame();
                let mut d = std::mem::take(&mut self.frames[d_slot as usize]);
                d.clear();
                d.extend_from_slice(&frame);
                (d_slot, d)
            };
            let (mut flipped, mut covered) = (false, false);
            let mut flips = [u32::MAX; 3];
            if self.rng.chance(self.link.corrupt) {
                self.stats.corrupted += 1;
                flipped = true;
                let nflips = self.rng.range(1, 3);
                // Distinct bit positions, so flips never cancel each other.
                let mut k = 0;
                while k < nflips as usize {
                    let off = self.rng.below(f.len() as u64) as usize;
                    let bit = self.rng.below(8) as u32;
                    let pos = (off as u32) << 3 | bit;
                    if flips[..k].contains(&pos) {
                        continue;
                    }
                    flips[k] = pos;
                    k += 1;
                    if let Some(b) = f.get_mut(off) {
                        *b ^= 1 << bit;
                    }
                    covered |= !icrc_masked(off);
                }
            }
            let mut at =
                done.add_nanos(self.link.delay_ns + self.rng.below(self.link.jitter_ns + 1));
            if self.rng.chance(self.link.reorder) {
                self.stats.reordered += 1;
                let (lo, hi) = self.link.reorder_delay_ns;
                at = at.add_nanos(self.rng.range(lo, hi));
            } else {
                let floor = &mut self.fifo[src][dst];
                at = at.max(*floor);
                *floor = at;
            }
            self.frames[fslot as usize] = f;
            if cut(at, &self.link) {
                self.stats.partition_drops += 1;
                self.free.push(fslot);
                continue;
            }
            let to = dst as u32;
            let kind = if self.link.bottleneck.is_some() {
                Kind::Enqueue {
                    to,
                    slot: fslot,
                    flipped,
                    covered,
                }
            } else {
                Kind::Deliver {
                    to,
                    slot: fslot,
                    flipped,
                    covered,
                }
            };
            self.push(at, kind);
        }
    }
}

/// Ethernet header, FCS, preamble and inter-frame gap around an IP packet (bytes).
const ETH_OVERHEAD: u64 = 38;

/// Bytes a port draining at `rate_mbps` still holds when it is busy for `ns` more.
fn backlog_bytes(ns: u64, rate_mbps: u64) -> u64 {
    u64::try_from(u128::from(ns) * u128::from(rate_mbps) / 8_000).unwrap_or(u64::MAX)
}

/// Set the ECN field of the IPv4 header at the start of `frame` to CE and fix the header
/// checksum. Returns whether the frame was ECN-capable (ECT(0) or ECT(1)) and so was marked.
fn mark_ce(frame: &mut [u8]) -> bool {
    let Some(h) = frame.get_mut(..20) else {
        return false;
    };
    if h[0] >> 4 != 4 || !matches!(h[1] & 3, 1 | 2) {
        return false;
    }
    h[1] |= 3;
    h[10] = 0;
    h[11] = 0;
    let ihl = usize::from(h[0] & 0xF) * 4;
    let mut sum: u32 = 0;
    for w in h.get(..ihl.min(20)).unwrap_or(&[]).chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    let c = !(sum as u16);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    true
}

impl Sim {
    /// A frame reaches the bottleneck port in front of `to`: drop it at a full queue, mark
    /// it above the threshold, else queue it behind what is there and deliver it when it has
    /// been sent.
    fn enqueue(&mut self, to: usize, slot: u32, flipped: bool, covered: bool) {
        let Some(b) = self.link.bottleneck else {
            return;
        };
        let now = self.now;
        let free = self.port_free.get(to).copied().unwrap_or(now).max(now);
        let backlog = backlog_bytes(free.nanos_since(now), b.rate_mbps);
        let len = self.frames[slot as usize].len() as u64 + ETH_OVERHEAD;
        if backlog + len > b.queue_bytes {
            self.stats.tail_dropped += 1;
            self.free.push(slot);
            return;
        }
        if backlog > b.mark_bytes {
            if mark_ce(&mut self.frames[slot as usize]) {
                self.stats.ce_marked += 1;
            } else {
                self.stats.nonect += 1;
            }
        }
        self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(backlog + len);
        let ser = (u128::from(len) * 8_000).div_ceil(u128::from(b.rate_mbps.max(1)));
        let done = free.add_nanos(u64::try_from(ser).unwrap_or(u64::MAX));
        if let Some(p) = self.port_free.get_mut(to) {
            *p = done;
        }
        self.push(
            done,
            Kind::Deliver {
                to: to as u32,
                slot,
                flipped,
                covered,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ce_mark_keeps_the_ip_checksum_valid_and_skips_not_ect() {
        let ip = IpRepr::v4_socket(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            2,
            64,
        );
        let mut h = [0u8; 20];
        ip.emit(&mut h, 40).unwrap();
        assert!(mark_ce(&mut h));
        assert_eq!(h[1] & 3, 3);
        let sum = h
            .chunks(2)
            .fold(0u32, |s, w| s + u32::from(u16::from_be_bytes([w[0], w[1]])));
        assert_eq!((sum & 0xFFFF) + (sum >> 16), 0xFFFF, "checksum verifies");
        let ip = IpRepr::v4_socket(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            0,
            64,
        );
        ip.emit(&mut h, 40).unwrap();
        assert!(!mark_ce(&mut h), "not-ECT is never marked");
        assert_eq!(h[1] & 3, 0);
    }

    #[test]
    fn backlog_is_rate_times_time() {
        // 1 ms at 100 Mbit/s is 12.5 kB.
        assert_eq!(backlog_bytes(1_000_000, 100), 12_500);
    }
}
