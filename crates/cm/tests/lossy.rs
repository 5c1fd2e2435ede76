//! Deterministic simulations of two (or three) CMs over a seeded link that drops, duplicates,
//! reorders and delays MADs, on a virtual clock that jumps to the next deadline. Each run is
//! replayed exactly by its seed (printed on failure).
//!
//! The consumers are scripted: a passive side accepts every request (or rejects, or never
//! answers), an active side establishes on every response. After the run every connection
//! must have ended consistently on both sides — established on both, or failed on both
//! (rejected/unreachable) — never half-open, and after disconnect and destroy no ID is left.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use cm::{AcceptParams, Cm, CmConfig, CmEvent, CmId, ConnectParams, Transmit};
use transport::Time;
use wire::cm::{CmaHdr, Ece, PortSpace, RejReason, ServiceId, SidrStatus, CMA_HDR_LEN};
use wire::{Psn, Qkey, Qpn};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() % 1_000_000) as f64 / 1_000_000.0 < p
    }
}

#[derive(Clone, Copy)]
struct Link {
    loss: f64,
    dup: f64,
    /// Extra delay drawn uniformly below this (reordering).
    jitter_ms: u64,
    base_ms: u64,
}

const CLEAN: Link = Link {
    loss: 0.0,
    dup: 0.0,
    jitter_ms: 0,
    base_ms: 1,
};

struct Node {
    addr: IpAddr,
    cm: Cm,
    events: Vec<CmEvent>,
    /// Drop everything to and from this node (a dead host).
    dead: bool,
}

struct Net {
    now: Time,
    rng: Rng,
    link: Link,
    nodes: Vec<Node>,
    /// (arrival, sequence) → (to node, from addr, MAD).
    wire: BTreeMap<(Time, u64), (usize, IpAddr, Vec<u8>)>,
    seq: u64,
    sent: u64,
    /// Every event every node delivered, in order.
    log: Vec<(usize, CmEvent)>,
}

fn addr(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))
}

fn gid(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl Net {
    fn new(seed: u64, link: Link, n: u8) -> Net {
        let nodes = (1..=n)
            .map(|i| Node {
                addr: addr(i),
                cm: Cm::new(CmConfig::linux_defaults(
                    0x0200_00FF_FE00_0000 | u64::from(i),
                    seed ^ u64::from(i),
                )),
                events: Vec::new(),
                dead: false,
            })
            .collect();
        Net {
            now: Time::ZERO,
            rng: Rng(seed | 1),
            link,
            nodes,
            wire: BTreeMap::new(),
            seq: 0,
            sent: 0,
            log: Vec::new(),
        }
    }

    fn index_of(&self, a: IpAddr) -> Option<usize> {
        self.nodes.iter().position(|n| n.addr == a)
    }

    /// Moves every node's output onto the wire.
    fn flush(&mut self) {
        for from in 0..self.nodes.len() {
            while let Some(Transmit { to, mad }) = self.nodes[from].cm.poll_transmit() {
                self.sent += 1;
                let Some(dst) = self.index_of(to) else {
                    continue;
                };
                if self.nodes[from].dead || self.nodes[dst].dead {
                    continue;
                }
                let copies = if self.rng.chance(self.link.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    if self.rng.chance(self.link.loss) {
                        continue;
                    }
                    let jitter = if self.link.jitter_ms > 0 {
                        self.rng.next() % self.link.jitter_ms
                    } else {
                        0
                    };
                    let at = self
                        .now
                        .add_nanos((self.link.base_ms + jitter) * 1_000_000 + self.seq % 1000);
                    self.seq += 1;
                    let from_addr = self.nodes[from].addr;
                    self.wire
                        .insert((at, self.seq), (dst, from_addr, mad.to_vec()));
                }
            }
            while let Some(e) = self.nodes[from].cm.poll_event() {
                self.nodes[from].events.push(e);
            }
        }
    }

    /// Runs until nothing is in flight and no timer is due before `until`; the scripted
    /// consumer `react` answers each new event.
    fn run(&mut self, until: Time, react: &mut dyn FnMut(&mut Net, usize, &CmEvent)) {
        loop {
            self.flush();
            // Let consumers react to new events.
            let mut pending = Vec::new();
            for (i, n) in self.nodes.iter_mut().enumerate() {
                for e in n.events.drain(..) {
                    pending.push((i, e));
                }
            }
            if !pending.is_empty() {
                for (i, e) in &pending {
                    react(self, *i, e);
                }
                self.log.extend(pending);
                continue;
            }
            let next_wire = self.wire.keys().next().map(|k| k.0);
            let next_timer = self.nodes.iter().filter_map(|n| n.cm.poll_timeout()).min();
            let next = match (next_wire, next_timer) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => return,
            };
            if next > until {
                return;
            }
            assert!(next >= self.now, "time went backwards");
            self.now = next;
            if next_wire == Some(next) {
                let key = *self.wire.keys().next().expect("in flight");
                let (dst, from, mad) = self.wire.remove(&key).expect("in flight");
                let now = self.now;
                self.nodes[dst].cm.handle_mad(now, from, &mad);
            } else {
                let now = self.now;
                for n in &mut self.nodes {
                    if n.cm.poll_timeout().is_some_and(|t| t <= now) {
                        n.cm.handle_timeout(now);
                    }
                }
            }
        }
    }
}

fn sid(port: u16) -> ServiceId {
    ServiceId::rdma_ip(PortSpace::TCP, port)
}

fn pd_for(src: IpAddr, dst: IpAddr, user: &[u8]) -> Vec<u8> {
    let mut pd = vec![0u8; CMA_HDR_LEN];
    CmaHdr {
        cma_version: 0,
        src_port: 40000,
        src,
        dst,
    }
    .emit(&mut pd)
    .expect("cma_hdr");
    pd.extend_from_slice(user);
    pd
}

fn params(net: &Net, from: usize, to: usize, port: u16, qpn: u32) -> ConnectParams {
    let (a, b) = (net.nodes[from].addr, net.nodes[to].addr);
    ConnectParams {
        peer: b,
        service_id: sid(port),
        local_gid: gid(a),
        remote_gid: gid(b),
        local_qpn: Qpn::new(qpn),
        starting_psn: Psn::new(qpn * 7),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: 3,
        transport_type: 0,
        srq: false,
        flow_label: 0,
        traffic_class: 0,
        hop_limit: 64,
        private_data: pd_for(a, b, b"hello"),
        ece: Ece::NONE,
    }
}

fn accept_params(qpn: u32) -> AcceptParams {
    AcceptParams {
        local_qpn: Qpn::new(qpn),
        starting_psn: Psn::new(qpn * 3),
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        private_data: b"welcome".to_vec(),
        ece: Ece::NONE,
    }
}

/// The scripted consumers of a connect test: node 1 (index 1) accepts every request with a QP
/// numbered after the request, node 0 establishes on every response.
fn accept_all(net: &mut Net, node: usize, e: &CmEvent) {
    let now = net.now;
    match e {
        CmEvent::ConnectRequest { id, req, .. } => {
            let qpn = 0x1000 + req.local_qpn.value();
            net.nodes[node]
                .cm
                .accept(now, *id, &accept_params(qpn))
                .expect("accept");
        }
        CmEvent::ConnectResponse { id, .. } => {
            net.nodes[node].cm.establish(now, *id).expect("establish");
        }
        _ => {}
    }
}

fn secs(s: u64) -> Time {
    Time::from_millis(s * 1000)
}

#[test]
fn clean_link_connect_disconnect_without_retransmission() {
    let mut net = Net::new(1, CLEAN, 2);
    let listen = net.nodes[1].cm.listen(sid(7174), None).expect("listen");
    let p = params(&net, 0, 1, 7174, 0x30);
    let active = net.nodes[0].cm.connect(Time::ZERO, &p).expect("connect");
    net.run(secs(1), &mut accept_all);
    // Active: ConnectResponse with the REP's values; passive: request, then established.
    let resp = net
        .log
        .iter()
        .find_map(|(n, e)| match e {
            CmEvent::ConnectResponse { id, rep, .. } if *n == 0 => Some((*id, rep.clone())),
            _ => None,
        })
        .expect("connect response");
    assert_eq!(resp.0, active);
    assert_eq!(resp.1.local_qpn, Qpn::new(0x1030));
    assert_eq!(resp.1.starting_psn, Psn::new(0x1030 * 3));
    assert_eq!(&resp.1.private_data[..7], b"welcome");
    let (passive, req) = net
        .log
        .iter()
        .find_map(|(n, e)| match e {
            CmEvent::ConnectRequest {
                id, req, listen: l, ..
            } if *n == 1 => {
                assert_eq!(*l, listen);
                Some((*id, req.clone()))
            }
            _ => None,
        })
        .expect("request");
    assert_eq!(req.local_qpn, Qpn::new(0x30));
    assert_eq!(req.starting_psn, Psn::new(0x30 * 7));
    let hdr = CmaHdr::parse(&req.private_data).expect("cma_hdr");
    assert_eq!(hdr.dst, addr(2));
    assert_eq!(&req.private_data[CMA_HDR_LEN..CMA_HDR_LEN + 5], b"hello");
    assert!(net
        .log
        .iter()
        .any(|(n, e)| *n == 1 && *e == CmEvent::Established { id: passive }));

    // Disconnect from the passive side this time.
    let now = net.now;
    net.nodes[1]
        .cm
        .disconnect(now, passive)
        .expect("disconnect");
    let mut answer = |net: &mut Net, node: usize, e: &CmEvent| {
        if let CmEvent::Disconnected { id, .. } = e {
            let now = net.now;
            net.nodes[node].cm.disconnect(now, *id).expect("drep");
        }
    };
    net.run(secs(10), &mut answer);
    for (node, id) in [(0, active), (1, passive)] {
        let evs: Vec<&CmEvent> = net
            .log
            .iter()
            .filter(|(n, e)| *n == node && e.id() == id)
            .map(|(_, e)| e)
            .collect();
        assert!(
            evs.iter().any(|e| matches!(
                e,
                CmEvent::Disconnected {
                    timed_out: false,
                    ..
                }
            )),
            "node {node}: {evs:?}"
        );
        assert!(evs
            .iter()
            .any(|e| matches!(e, CmEvent::TimewaitExit { .. })));
    }
    for n in &mut net.nodes {
        assert_eq!(n.cm.stats().retransmits, 0);
        assert_eq!(n.cm.stats().mads_unmatched, 0);
    }
    net.nodes[0].cm.destroy(net.now, active);
    net.nodes[1].cm.destroy(net.now, passive);
    net.nodes[1].cm.destroy(net.now, listen);
    assert_eq!(net.nodes[0].cm.live_ids() + net.nodes[1].cm.live_ids(), 0);
    // REQ, REP, RTU, DREQ, DREP: five MADs in all.
    assert_eq!(net.sent, 5);
}

#[test]
fn no_listener_is_rej_8_and_wrong_address_is_rej_28() {
    let mut net = Net::new(2, CLEAN, 2);
    let p = params(&net, 0, 1, 7174, 0x30);
    let a = net.nodes[0].cm.connect(Time::ZERO, &p).expect("connect");
    net.run(secs(1), &mut accept_all);
    assert!(net.log.iter().any(|(n, e)| *n == 0
        && matches!(e, CmEvent::Rejected { id, reason, .. }
            if *id == a && *reason == RejReason::INVALID_SERVICE_ID)));

    // A listener bound to another address of the host.
    net.nodes[1]
        .cm
        .listen(sid(7174), Some(addr(99)))
        .expect("listen");
    let b = net.nodes[0].cm.connect(net.now, &p).expect("connect");
    net.run(secs(2), &mut accept_all);
    assert!(net.log.iter().any(|(n, e)| *n == 0
        && matches!(e, CmEvent::Rejected { id, reason, .. }
            if *id == b && *reason == RejReason::CONSUMER_DEFINED)));
    assert_eq!(net.nodes[0].cm.live_ids(), 0);
    assert_eq!(net.nodes[1].cm.live_ids(), 1, "only the listener");

    // Two listeners on one Service ID must name different addresses.
    assert!(net.nodes[1].cm.listen(sid(7174), Some(addr(99))).is_err());
    assert!(net.nodes[1].cm.listen(sid(7174), None).is_err());
    assert!(net.nodes[1].cm.listen(sid(7174), Some(addr(2))).is_ok());
}

#[test]
fn consumer_reject_carries_private_data() {
    let mut net = Net::new(3, CLEAN, 2);
    net.nodes[1].cm.listen(sid(1), None).expect("listen");
    let p = params(&net, 0, 1, 1, 5);
    let a = net.nodes[0].cm.connect(Time::ZERO, &p).expect("connect");
    let mut refuse = |net: &mut Net, node: usize, e: &CmEvent| {
        if let CmEvent::ConnectRequest { id, .. } = e {
            let now = net.now;
            net.nodes[node]
                .cm
                .reject(now, *id, RejReason::CONSUMER_DEFINED, b"go away")
                .expect("reject");
        }
    };
    net.run(secs(1), &mut refuse);
    let pd = net
        .log
        .iter()
        .find_map(|(n, e)| match e {
            CmEvent::Rejected {
                id,
                reason,
                private_data,
            } if *n == 0 && *id == a => {
                assert_eq!(*reason, RejReason::CONSUMER_DEFINED);
                Some(private_data.clone())
            }
            _ => None,
        })
        .expect("rejected");
    assert_eq!(&pd[..7], b"go away");
    assert_eq!(net.nodes[0].cm.live_ids(), 0);
    assert_eq!(net.nodes[1].cm.live_ids(), 1);
}

#[test]
fn unreachable_peer_gives_up_after_the_retries() {
    let mut net = Net::new(4, CLEAN, 2);
    net.nodes[1].dead = true;
    let p = params(&net, 0, 1, 1, 5);
    let a = net.nodes[0].cm.connect(Time::ZERO, &p).expect("connect");
    net.run(secs(3600), &mut accept_all);
    let at = net.now;
    assert_eq!(
        net.log,
        vec![(0, CmEvent::Unreachable { id: a })],
        "only one event"
    );
    // rdma_cm's timers: 16 REQs every 2 × 1.024 s + 4.096 s = 6.144 s.
    assert_eq!(at, Time::from_millis(16 * 6144));
    assert_eq!(net.nodes[0].cm.stats().retransmits, 15);
    assert_eq!(net.nodes[0].cm.live_ids(), 0);
}

#[test]
fn peer_killed_while_connected_ends_in_disconnected_and_no_leak() {
    let mut net = Net::new(5, CLEAN, 2);
    net.nodes[1].cm.listen(sid(1), None).expect("listen");
    let p = params(&net, 0, 1, 1, 5);
    let a = net.nodes[0].cm.connect(Time::ZERO, &p).expect("connect");
    net.run(secs(1), &mut accept_all);
    net.nodes[1].dead = true;
    let now = net.now;
    net.nodes[0].cm.disconnect(now, a).expect("disconnect");
    net.run(secs(3600), &mut accept_all);
    let evs: Vec<&CmEvent> = net
        .log
        .iter()
        .filter(|(n, e)| *n == 0 && e.id() == a)
        .map(|(_, e)| e)
        .collect();
    assert!(matches!(
        evs[evs.len() - 2],
        CmEvent::Disconnected {
            timed_out: true,
            ..
        }
    ));
    assert!(matches!(evs[evs.len() - 1], CmEvent::TimewaitExit { .. }));
    net.nodes[0].cm.destroy(net.now, a);
    assert_eq!(net.nodes[0].cm.live_ids(), 0);
    // destroy of an unknown or already destroyed ID is harmless.
    net.nodes[0].cm.destroy(net.now, a);
    net.nodes[0].cm.destroy(net.now, CmId(12345));
}

#[test]
fn destroy_while_established_disconnects_the_peer() {
    let mut net = Net::new(6, CLEAN, 2);
    net.nodes[1].cm.listen(sid(1), None).expect("listen");
    let p = params(&net, 0, 1, 1, 5);
    let a = net.nodes[0].cm.connect(Time::ZERO, &p).expect("connect");
    net.run(secs(1), &mut accept_all);
    let now = net.now;
    net.nodes[0].cm.destroy(now, a);
    let mut answer = |net: &mut Net, node: usize, e: &CmEvent| {
        if let CmEvent::Disconnected { id, .. } = e {
            let now = net.now;
            net.nodes[node].cm.disconnect(now, *id).expect("drep");
        }
    };
    net.run(secs(60), &mut answer);
    // The destroyed side delivers nothing more; the peer sees the disconnect.
    assert!(net
        .log
        .iter()
        .filter(|(n, _)| *n == 0)
        .all(|(_, e)| matches!(e, CmEvent::ConnectResponse { .. })));
    assert!(net.log.iter().any(|(n, e)| *n == 1
        && matches!(
            e,
            CmEvent::Disconnected {
                timed_out: false,
                ..
            }
        )));
    assert_eq!(net.nodes[0].cm.live_ids(), 0);
}

#[test]
fn sidr_resolves_a_ud_service_and_reports_a_missing_one() {
    let mut net = Net::new(7, CLEAN, 2);
    let udp = ServiceId::rdma_ip(PortSpace::UDP, 7174);
    let (a0, a1) = (net.nodes[0].addr, net.nodes[1].addr);
    let q = net.nodes[0]
        .cm
        .sidr_request(Time::ZERO, a1, udp, &pd_for(a0, a1, b"x"))
        .expect("sidr");
    net.run(secs(1), &mut accept_all);
    assert!(net.log.iter().any(|(n, e)| *n == 0
        && matches!(e, CmEvent::SidrReply { id, rep } if *id == q && rep.status == SidrStatus::UNSUPPORTED)));

    net.nodes[1].cm.listen(udp, None).expect("listen");
    let q = net.nodes[0]
        .cm
        .sidr_request(net.now, a1, udp, &pd_for(a0, a1, b"x"))
        .expect("sidr");
    let mut reply = |net: &mut Net, node: usize, e: &CmEvent| {
        if let CmEvent::SidrRequest { id, .. } = e {
            let now = net.now;
            net.nodes[node]
                .cm
                .sidr_reply(
                    now,
                    *id,
                    SidrStatus::SUCCESS,
                    Qpn::new(0x77),
                    Qkey(0x0123_4567),
                    b"ud",
                )
                .expect("reply");
        }
    };
    net.run(secs(2), &mut reply);
    let rep = net
        .log
        .iter()
        .find_map(|(n, e)| match e {
            CmEvent::SidrReply { id, rep } if *n == 0 && *id == q => Some(rep.clone()),
            _ => None,
        })
        .expect("reply");
    assert_eq!(rep.status, SidrStatus::SUCCESS);
    assert_eq!(rep.qpn, Qpn::new(0x77));
    assert_eq!(rep.qkey, Qkey(0x0123_4567));
    assert_eq!(rep.service_id, udp);
    assert_eq!(&rep.private_data[..2], b"ud");
    assert_eq!(net.nodes[0].cm.live_ids(), 0);
    assert_eq!(net.nodes[1].cm.live_ids(), 1);
}

#[test]
fn malformed_mads_are_dropped_and_counted() {
    let mut net = Net::new(8, CLEAN, 2);
    let now = Time::ZERO;
    let cm = &mut net.nodes[1].cm;
    cm.handle_mad(now, addr(1), &[0u8; 10]);
    cm.handle_mad(now, addr(1), &[0u8; 256]);
    let mut lap = [0u8; 256];
    lap[..4].copy_from_slice(&[1, 7, 2, 3]);
    lap[17] = 0x19;
    cm.handle_mad(now, addr(1), &lap);
    assert_eq!(cm.stats().mads_malformed, 3);
    assert!(cm.poll_transmit().is_none());
    assert!(cm.poll_event().is_none());
}

/// Connection outcome on one side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Up,
    Failed,
    Nothing,
}

/// Many connections between three nodes over a hostile link, then disconnect all: for every
/// seed both sides agree (up/up or failed/failed), every disconnect completes, nothing leaks.
#[test]
fn lossy_duplicating_reordering_link_never_leaves_half_open_connections() {
    let link = Link {
        loss: 0.2,
        dup: 0.1,
        jitter_ms: 3000,
        base_ms: 1,
    };
    for seed in 1..=60u64 {
        let mut net = Net::new(seed * 0x9E37_79B9, link, 3);
        for n in 0..3 {
            net.nodes[n].cm.listen(sid(100), None).expect("listen");
        }
        // 4 connections from every node to every other node.
        let mut actives = Vec::new();
        for from in 0..3 {
            for to in 0..3 {
                if from == to {
                    continue;
                }
                for k in 0..4 {
                    let qpn = 0x100 * (from as u32 + 1) + 0x10 * (to as u32 + 1) + k;
                    let p = params(&net, from, to, 100, qpn);
                    let id = net.nodes[from].cm.connect(Time::ZERO, &p).expect("connect");
                    actives.push((from, to, id, qpn));
                }
            }
        }
        let mut react = |net: &mut Net, node: usize, e: &CmEvent| accept_all(net, node, e);
        net.run(secs(3600), &mut react);

        // Active outcome by ID; passive outcome by the active's QPN in the REQ.
        let mut active_end: BTreeMap<(usize, CmId), End> = BTreeMap::new();
        let mut passive_of: BTreeMap<(usize, u32), CmId> = BTreeMap::new();
        let mut passive_end: BTreeMap<(usize, CmId), End> = BTreeMap::new();
        for (n, e) in &net.log {
            match e {
                CmEvent::ConnectResponse { id, .. } => {
                    active_end.insert((*n, *id), End::Up);
                }
                CmEvent::ConnectRequest { id, req, .. } => {
                    let prev = passive_of.insert((*n, req.local_qpn.value()), *id);
                    assert!(prev.is_none(), "seed {seed}: one request delivered twice");
                    passive_end.insert((*n, *id), End::Nothing);
                }
                CmEvent::Established { id } => {
                    passive_end.insert((*n, *id), End::Up);
                }
                CmEvent::Rejected { id, .. } | CmEvent::Unreachable { id } => {
                    let key = (*n, *id);
                    if let Some(end) = passive_end.get_mut(&key) {
                        *end = End::Failed;
                    } else {
                        active_end.insert(key, End::Failed);
                    }
                }
                _ => {}
            }
        }
        let mut up = Vec::new();
        for &(from, to, id, qpn) in &actives {
            let a = active_end.get(&(from, id)).copied().unwrap_or(End::Nothing);
            let p = passive_of
                .get(&(to, qpn))
                .map(|pid| passive_end[&(to, *pid)])
                .unwrap_or(End::Nothing);
            assert_ne!(a, End::Nothing, "seed {seed}: active {id:?} never ended");
            match (a, p) {
                (End::Up, End::Up) => up.push((from, id, to, passive_of[&(to, qpn)])),
                (End::Failed, End::Failed | End::Nothing) => {}
                other => panic!("seed {seed}: half-open {from}->{to} qpn {qpn:#x}: {other:?}"),
            }
        }
        assert!(
            !up.is_empty(),
            "seed {seed}: nothing connected at 20 % loss"
        );

        // Disconnect every connection from a random side; answer every DREQ.
        let start = net.log.len();
        for &(from, a, to, p) in &up {
            let (node, id) = if net.rng.chance(0.5) {
                (from, a)
            } else {
                (to, p)
            };
            let now = net.now;
            net.nodes[node].cm.disconnect(now, id).expect("disconnect");
        }
        let mut answer = |net: &mut Net, node: usize, e: &CmEvent| {
            if let CmEvent::Disconnected { id, .. } = e {
                let now = net.now;
                net.nodes[node].cm.disconnect(now, *id).expect("drep");
            }
        };
        let until = net.now.add_nanos(3_600_000_000_000);
        net.run(until, &mut answer);
        let after: BTreeSet<(usize, CmId, bool)> = net.log[start..]
            .iter()
            .filter_map(|(n, e)| match e {
                CmEvent::Disconnected { id, .. } => Some((*n, *id, false)),
                CmEvent::TimewaitExit { id } => Some((*n, *id, true)),
                _ => None,
            })
            .collect();
        for &(from, a, to, p) in &up {
            for (n, id) in [(from, a), (to, p)] {
                assert!(
                    after.contains(&(n, id, false)) && after.contains(&(n, id, true)),
                    "seed {seed}: node {n} id {id:?} did not finish its disconnect"
                );
            }
        }
        // Destroy everything; no ID may remain once the timers ran out.
        let ids: Vec<(usize, CmId)> = net
            .log
            .iter()
            .map(|(n, e)| (*n, e.id()))
            .chain(actives.iter().map(|&(f, _, id, _)| (f, id)))
            .collect();
        for (n, id) in ids {
            let now = net.now;
            net.nodes[n].cm.destroy(now, id);
        }
        let until = net.now.add_nanos(3_600_000_000_000);
        net.run(until, &mut |_, _, _| {});
        for (i, n) in net.nodes.iter().enumerate() {
            assert_eq!(
                n.cm.live_ids(),
                1,
                "seed {seed}: node {i} leaks IDs (listener only)"
            );
        }
    }
}
