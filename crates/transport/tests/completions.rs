//! Two QPs wired back to back: what the completions say (the SE bit of received messages,
//! caller-queued failures), the current PSNs QUERY reports, and inline WRs that carry
//! their bytes in a fixed array.

use transport::wire::{Lkey, Psn, Qkey, Qpn, Rkey, RocePacketRepr};
use transport::{
    bring_up, AccessFlags, AtomicOp, Completion, InlineData, LocalData, MemError, Memory, Mtu, Qp,
    QpAttr, QpConfig, QpEvent, QpState, RecvWr, RemoteAccess, RxMeta, SendFlags, SendWr, Service,
    Sge, SgeList, Time, UdDest, WcOpcode, WcStatus, WrOpcode,
};

const VA: u64 = 0x10_000;
const KEY: u32 = 0x77;

/// One registered region under key [`KEY`] (lkey = rkey), everything allowed.
struct Mem(Vec<u8>);

impl Mem {
    fn at(&mut self, key: u32, addr: u64, len: usize) -> Result<&mut [u8], MemError> {
        if key != KEY {
            return Err(MemError::InvalidKey);
        }
        let off = addr.checked_sub(VA).ok_or(MemError::OutOfBounds)? as usize;
        self.0.get_mut(off..off + len).ok_or(MemError::OutOfBounds)
    }
}

impl Memory for Mem {
    fn read_local(&mut self, lkey: Lkey, addr: u64, dst: &mut [u8]) -> Result<(), MemError> {
        dst.copy_from_slice(self.at(lkey.0, addr, dst.len())?);
        Ok(())
    }
    fn write_local(&mut self, lkey: Lkey, addr: u64, src: &[u8]) -> Result<(), MemError> {
        self.at(lkey.0, addr, src.len())?.copy_from_slice(src);
        Ok(())
    }
    fn check_remote(
        &mut self,
        rkey: Rkey,
        va: u64,
        len: u64,
        _: RemoteAccess,
    ) -> Result<(), MemError> {
        self.at(rkey.0, va, len as usize).map(|_| ())
    }
    fn read_remote(&mut self, rkey: Rkey, va: u64, dst: &mut [u8]) -> Result<(), MemError> {
        dst.copy_from_slice(self.at(rkey.0, va, dst.len())?);
        Ok(())
    }
    fn write_remote(&mut self, rkey: Rkey, va: u64, src: &[u8]) -> Result<(), MemError> {
        self.at(rkey.0, va, src.len())?.copy_from_slice(src);
        Ok(())
    }
    fn atomic_remote(&mut self, rkey: Rkey, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        let w = self.at(rkey.0, va, 8)?;
        let old = u64::from_ne_bytes(w.try_into().map_err(|_| MemError::OutOfBounds)?);
        let new = match op {
            AtomicOp::FetchAdd { add } => old.wrapping_add(add),
            AtomicOp::CompareSwap { compare, swap } if old == compare => swap,
            AtomicOp::CompareSwap { .. } => old,
        };
        w.copy_from_slice(&new.to_ne_bytes());
        Ok(old)
    }
    fn invalidate(&mut self, _: Rkey) -> Result<(), MemError> {
        Err(MemError::InvalidateDenied)
    }
}

struct End {
    qp: Qp,
    mem: Mem,
}

fn pair(ty: Service) -> (End, End) {
    let mk = |qpn: u32| {
        let mut cfg = QpConfig::new(Qpn::new(qpn), ty);
        cfg.caps.max_send_wr = 16;
        cfg.caps.max_recv_wr = 16;
        cfg.caps.max_inline_data = 128;
        End {
            qp: Qp::new(cfg),
            mem: Mem(vec![0; 0x4000]),
        }
    };
    let (mut a, mut b) = (mk(0x11), mk(0x12));
    let attr = QpAttr {
        qp_access_flags: AccessFlags(0xF),
        qkey: 0x1234,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        timeout: 14,
        retry_cnt: 3,
        rnr_retry: 3,
        ..QpAttr::default()
    };
    bring_up(
        &mut a.qp,
        Qpn::new(0x12),
        Psn::new(500),
        Psn::new(100),
        Mtu::Mtu256,
        &attr,
    )
    .unwrap();
    bring_up(
        &mut b.qp,
        Qpn::new(0x11),
        Psn::new(100),
        Psn::new(500),
        Mtu::Mtu256,
        &attr,
    )
    .unwrap();
    (a, b)
}

/// Move packets both ways until neither side has anything to send; returns how many.
fn shuttle(a: &mut End, b: &mut End) -> usize {
    shuttle_runs(a, b, 1).0
}

fn completions(q: &mut Qp) -> Vec<Completion> {
    std::iter::from_fn(|| q.poll_completion()).collect()
}

fn sges(off: u64, len: u32) -> SgeList {
    SgeList::single(Sge {
        addr: VA + off,
        length: len,
        lkey: Lkey(KEY),
    })
}

fn sge(off: u64, len: u32) -> LocalData {
    LocalData::Sges(sges(off, len))
}

fn recv(q: &mut Qp, id: u64) {
    q.post_recv(RecvWr {
        wr_id: id,
        sges: sges(0x1000 + id * 0x400, 0x400),
    })
    .unwrap();
}

#[test]
fn receive_completions_carry_the_solicited_event_bit() {
    for ty in [Service::Rc, Service::Uc] {
        let (mut a, mut b) = pair(ty);
        for id in 0..4 {
            recv(&mut b.qp, id);
        }
        // SEND, SEND solicited (multi-packet: the SE bit rides on the last one), WRITE
        // WITH IMMEDIATE solicited, SEND WITH IMMEDIATE unsolicited.
        let mut wrs = Vec::new();
        let mut s = SendWr::new(1, WrOpcode::Send);
        s.local = sge(0, 8);
        wrs.push(s.clone());
        s.wr_id = 2;
        s.local = sge(0, 600);
        s.flags = SendFlags::SIGNALED | SendFlags::SOLICITED;
        wrs.push(s.clone());
        let mut w = SendWr::new(3, WrOpcode::RdmaWriteWithImm);
        w.local = sge(0, 16);
        w.remote_addr = VA + 0x400;
        w.rkey = Rkey(KEY);
        w.flags = SendFlags::SOLICITED;
        wrs.push(w);
        s.wr_id = 4;
        s.opcode = WrOpcode::SendWithImm;
        s.local = sge(0, 4);
        s.flags = SendFlags::SIGNALED;
        wrs.push(s);
        for wr in wrs {
            a.qp.post_send(wr).unwrap();
        }
        shuttle(&mut a, &mut b);
        let got: Vec<(u64, WcOpcode, bool)> = completions(&mut b.qp)
            .iter()
            .map(|c| {
                assert_eq!(c.status, WcStatus::Success, "{ty:?}: {c:?}");
                assert_eq!(c.fires_solicited(), c.solicited);
                (c.wr_id, c.opcode, c.solicited)
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (0, WcOpcode::Recv, false),
                (1, WcOpcode::Recv, true),
                (2, WcOpcode::RecvRdmaWithImm, true),
                (3, WcOpcode::Recv, false),
            ],
            "{ty:?}"
        );
        // Send-side completions never count as solicited.
        assert!(completions(&mut a.qp).iter().all(|c| !c.solicited));
    }
}

#[test]
fn ud_receives_carry_the_solicited_event_bit() {
    let (mut a, mut b) = pair(Service::Ud);
    for id in 0..2 {
        recv(&mut b.qp, id);
    }
    for (id, flags) in [(1, SendFlags::SOLICITED), (2, SendFlags::default())] {
        let mut s = SendWr::new(id, WrOpcode::Send);
        s.local = sge(0, 8);
        s.flags = flags;
        s.ud = Some(UdDest {
            ah: 0,
            remote_qpn: Qpn::new(0x12),
            remote_qkey: Qkey(0x1234),
        });
        a.qp.post_send(s).unwrap();
    }
    shuttle(&mut a, &mut b);
    let got: Vec<(u64, bool)> = completions(&mut b.qp)
        .iter()
        .map(|c| (c.wr_id, c.solicited))
        .collect();
    assert_eq!(got, vec![(0, true), (1, false)]);
}

#[test]
fn query_reports_the_current_psns() {
    let (mut a, mut b) = pair(Service::Rc);
    assert_eq!((a.qp.query().sq_psn, a.qp.query().rq_psn), (100, 500));
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite);
    w.local = sge(0, 600); // 3 packets at MTU 256
    w.remote_addr = VA + 0x400;
    w.rkey = Rkey(KEY);
    a.qp.post_send(w).unwrap();
    shuttle(&mut a, &mut b);
    assert_eq!(a.qp.sq_psn(), Psn::new(103));
    assert_eq!(a.qp.query().sq_psn, 103);
    assert_eq!(b.qp.rq_psn(), Psn::new(103));
    assert_eq!(b.qp.query().rq_psn, 103);
    // The other direction is untouched.
    assert_eq!((b.qp.query().sq_psn, a.qp.query().rq_psn), (500, 500));
    assert_eq!(&b.mem.0[0x400..0x400 + 600], &a.mem.0[..600]);
}

#[test]
fn inline_data_travels_in_the_wr() {
    let (mut a, mut b) = pair(Service::Rc);
    recv(&mut b.qp, 0);
    let text = b"inline payload in a fixed array, longer than one 256-byte MTU? no: 66";
    let mut s = SendWr::new(9, WrOpcode::Send);
    s.local = LocalData::InlineData(InlineData::from_slice(text).unwrap());
    a.qp.post_send(s).unwrap();
    // Longer than max_inline_data: refused like the Vec form.
    let mut long = SendWr::new(10, WrOpcode::Send);
    long.local = LocalData::InlineData(InlineData::from_slice(&[1; 129]).unwrap());
    assert_eq!(
        a.qp.post_send(long),
        Err(transport::PostError::InlineTooLong)
    );
    shuttle(&mut a, &mut b);
    let c = completions(&mut b.qp);
    assert_eq!(
        (c[0].status, c[0].byte_len),
        (WcStatus::Success, text.len() as u32)
    );
    assert_eq!(&b.mem.0[0x1000..0x1000 + text.len()], &text[..]);
    assert_eq!(completions(&mut a.qp)[0].wr_id, 9);
}

#[test]
fn a_failed_send_joins_the_ordered_completion_stream() {
    let (mut a, _b) = pair(Service::Rc);
    for id in 1..=2 {
        let mut w = SendWr::new(id, WrOpcode::RdmaWrite);
        w.local = sge(0, 8);
        w.rkey = Rkey(KEY);
        w.remote_addr = VA;
        w.flags = SendFlags::default(); // unsignaled: flushed anyway
        a.qp.post_send(w).unwrap();
    }
    a.qp.fail_send(3, Some(WrOpcode::RdmaRead), WcStatus::LocQpOpErr);
    assert_eq!(a.qp.state(), QpState::Err);
    assert_eq!(a.qp.poll_event(), Some(QpEvent::Fatal));
    let got: Vec<(u64, WcStatus, WcOpcode)> = completions(&mut a.qp)
        .iter()
        .map(|c| (c.wr_id, c.status, c.opcode))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::WrFlushErr, WcOpcode::RdmaWrite),
            (2, WcStatus::WrFlushErr, WcOpcode::RdmaWrite),
            (3, WcStatus::LocQpOpErr, WcOpcode::RdmaRead),
        ]
    );
    // Already in ERR: no second fatal event; an unknown opcode completes as SEND.
    a.qp.fail_send(4, None, WcStatus::LocQpOpErr);
    assert_eq!(a.qp.poll_event(), None);
    let c = completions(&mut a.qp);
    assert_eq!((c[0].wr_id, c[0].opcode), (4, WcOpcode::Send));
    assert!(c[0].fires_solicited());
}

/// [`shuttle`] with the requester building runs of up to `max` packets
/// (`Qp::poll_transmit_run`) and the responder taking them with `Qp::handle_run`, as the
/// device does between two of its own QPs. Returns (buffers moved, packets they stood for).
fn shuttle_runs(a: &mut End, b: &mut End, max: u32) -> (usize, u64) {
    let mut buf = vec![0u8; 64 * 1024];
    fn one_way(from: &mut End, to: &mut End, buf: &mut [u8], max: u32) -> (usize, u64) {
        let (mut n, mut pkts) = (0, 0);
        while let Some(t) = from.qp.poll_transmit_run(Time(0), &mut from.mem, buf, max) {
            let pkt = RocePacketRepr::parse(&buf[..t.len]).unwrap();
            let meta = RxMeta::default();
            to.qp
                .handle_run(Time(0), &pkt, t.run, &meta, &mut to.mem, None);
            n += 1;
            pkts += u64::from(t.pkts());
        }
        (n, pkts)
    }
    let (mut n, mut pkts) = (0, 0);
    loop {
        let (n1, p1) = one_way(a, b, &mut buf, max);
        let (n2, p2) = one_way(b, a, &mut buf, max);
        if n1 + n2 == 0 {
            return (n, pkts);
        }
        n += n1 + n2;
        pkts += p1 + p2;
    }
}

/// What two QPs end up with: both memories, both sides' completions, PSNs and counters.
type Outcome = (
    Vec<u8>,
    Vec<Completion>,
    Vec<Completion>,
    [u32; 4],
    [u64; 4],
);

fn outcome(a: &mut End, b: &mut End) -> Outcome {
    let psns = [
        a.qp.query().sq_psn,
        a.qp.query().rq_psn,
        b.qp.query().sq_psn,
        b.qp.query().rq_psn,
    ];
    let (ca, cb) = (a.qp.counters(), b.qp.counters());
    let counters = [ca.sent_pkts, cb.rcvd_pkts, cb.ack_deferred, ca.rcvd_pkts];
    let (wa, wb) = (completions(&mut a.qp), completions(&mut b.qp));
    (b.mem.0.clone(), wa, wb, psns, counters)
}

#[test]
fn a_run_has_the_outcome_of_its_packets() {
    // At MTU 256: WRITEs and SENDs of many packets, one ending in immediate data (its last
    // packet goes alone), one solicited, one starting in the middle of the window.
    let post = |a: &mut End, b: &mut End| {
        for (i, x) in a.mem.0.iter_mut().take(0x1000).enumerate() {
            *x = (i * 7 + i / 256) as u8;
        }
        for id in 0..4 {
            recv(&mut b.qp, id);
        }
        let write = |id, op, len, to: u64| {
            let mut w = SendWr::new(id, op);
            w.local = sge(0x10 * id, len);
            w.remote_addr = VA + to;
            w.rkey = Rkey(KEY);
            w.imm_data = 0xfeed;
            w.flags = SendFlags::SIGNALED;
            w
        };
        let wrs = [
            write(1, WrOpcode::RdmaWrite, 3000, 0x2000),
            write(2, WrOpcode::Send, 1000, 0),
            write(3, WrOpcode::SendWithImm, 900, 0),
            write(4, WrOpcode::RdmaWriteWithImm, 700, 0x3000),
            write(5, WrOpcode::RdmaWrite, 513, 0x3400),
        ];
        for mut wr in wrs {
            if wr.wr_id == 2 {
                wr.flags |= SendFlags::SOLICITED;
            }
            a.qp.post_send(wr).unwrap();
        }
    };
    let mut seen: Vec<(u32, Outcome)> = Vec::new();
    for max in [1, 2, 5, 64] {
        let (mut a, mut b) = pair(Service::Rc);
        post(&mut a, &mut b);
        let (moved, pkts) = shuttle_runs(&mut a, &mut b, max);
        if max > 1 {
            assert!(
                moved < pkts as usize,
                "max {max}: no run was built ({moved}/{pkts})"
            );
        } else {
            assert_eq!(moved as u64, pkts);
        }
        let o = outcome(&mut a, &mut b);
        assert_eq!(o.1.len(), 5, "{:?}", o.1);
        assert!(o
            .1
            .iter()
            .chain(&o.2)
            .all(|c| c.status == WcStatus::Success));
        assert_eq!(&o.0[0x2000..0x2000 + 3000], &a.mem.0[0x10..0x10 + 3000]);
        seen.push((max, o));
    }
    for (max, o) in &seen[1..] {
        assert_eq!(
            o, &seen[0].1,
            "runs of up to {max} packets differ from single packets"
        );
    }
}

/// Move everything between `a` and `b` as a wire would, and record the request packets
/// `a` sends: with `max` > 1, `a` builds runs and each is cut into its packets
/// (`transport::Run::packet`, what the device does toward another address), which `b` takes
/// one by one. Returns the packets' bytes and whether any run was built.
fn wire_packets(a: &mut End, b: &mut End, max: u32) -> (Vec<Vec<u8>>, bool) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut sent = Vec::new();
    let mut runs = false;
    loop {
        let mut moved = 0;
        while let Some(t) = a.qp.poll_transmit_run(Time(0), &mut a.mem, &mut buf, max) {
            moved += 1;
            let pkt = RocePacketRepr::parse(&buf[..t.len]).unwrap();
            let pkts: Vec<Vec<u8>> = match t.run {
                None => vec![buf[..t.len].to_vec()],
                Some(run) => {
                    runs = true;
                    (0..run.pkts)
                        .map(|i| {
                            let p = run.packet(&pkt, i, 256).expect("a run's first packet");
                            let mut d = vec![0u8; 512];
                            let hl = p.header_len();
                            d[hl..hl + p.payload.len()].copy_from_slice(p.payload);
                            let hdr = RocePacketRepr { payload: &[], ..p };
                            let n = transport::finish_in_place(&hdr, p.payload.len(), &mut d)
                                .expect("room");
                            d.truncate(n);
                            d
                        })
                        .collect()
                }
            };
            // What congestion control counts as sent: the datagrams' bytes, ICRCs included.
            let on_wire: usize = pkts.iter().map(|p| p.len() + 4).sum();
            assert_eq!(t.wire_len(), on_wire, "{:?}", t.run);
            for bytes in pkts {
                let p = RocePacketRepr::parse(&bytes).unwrap();
                b.qp.handle_packet(Time(0), &p, &RxMeta::default(), &mut b.mem, None);
                sent.push(bytes);
            }
        }
        while let Some(t) = b.qp.poll_transmit(Time(0), &mut b.mem, &mut buf) {
            moved += 1;
            let pkt = RocePacketRepr::parse(&buf[..t.len]).unwrap();
            a.qp.handle_packet(Time(0), &pkt, &RxMeta::default(), &mut a.mem, None);
        }
        if moved == 0 {
            return (sent, runs);
        }
    }
}

#[test]
fn a_run_cut_into_packets_is_the_packets_built_one_by_one() {
    // Sizes that end a message on a full packet, on a padded one (PadCnt) and in the middle
    // of a run's room; WRITEs (RETH on the first) and SENDs.
    let mut seen = Vec::new();
    for max in [1, 3, 64] {
        let (mut a, mut b) = pair(Service::Rc);
        for (i, x) in a.mem.0.iter_mut().take(0x1000).enumerate() {
            *x = (i * 13 + i / 256) as u8;
        }
        for id in 0..6 {
            recv(&mut b.qp, id);
        }
        let ops = [
            (WrOpcode::RdmaWrite, 2048u32),
            (WrOpcode::RdmaWrite, 1025),
            (WrOpcode::Send, 1023),
            (WrOpcode::RdmaWrite, 3001),
            (WrOpcode::Send, 770),
        ];
        // A window of 12 packets: an ACK request every 6 (half the window) falls inside
        // messages, and so does the packet that fills the window.
        a.qp.set_max_unacked_psns(12);
        for (id, (op, len)) in ops.iter().chain(&ops).chain(&ops).copied().enumerate() {
            let mut w = SendWr::new(id as u64, op);
            w.local = sge(0x10 * id as u64, len);
            w.remote_addr = VA + 0x2000;
            w.rkey = Rkey(KEY);
            w.flags = SendFlags::SIGNALED;
            a.qp.post_send(w).unwrap();
        }
        let (pkts, runs) = wire_packets(&mut a, &mut b, max);
        assert_eq!(runs, max > 1, "max {max}");
        let o = outcome(&mut a, &mut b);
        assert_eq!(o.1.len(), 15, "{:?}", o.1);
        assert!(o
            .1
            .iter()
            .chain(&o.2)
            .all(|c| c.status == WcStatus::Success));
        seen.push((max, pkts, o.0, o.1, o.2));
    }
    let (_, pkts, mem, wa, wb) = &seen[0];
    assert!(pkts.len() > 64, "{} packets", pkts.len());
    for (max, p, m, a, b) in &seen[1..] {
        assert_eq!(p, pkts, "max {max}: the packets differ");
        assert_eq!((m, a, b), (mem, wa, wb), "max {max}: the outcome differs");
    }
}

#[test]
fn a_run_that_fails_fails_as_its_packets_do() {
    // The target range ends past the region: the first packet's R_Key check fails
    // (REMOTE_ACCESS_ERROR NAK), and every later packet meets a QP in ERR.
    let mut seen = Vec::new();
    for max in [1, 64] {
        let (mut a, mut b) = pair(Service::Rc);
        let mut w = SendWr::new(9, WrOpcode::RdmaWrite);
        w.local = sge(0, 3000);
        w.remote_addr = VA + 0x3800;
        w.rkey = Rkey(KEY);
        w.flags = SendFlags::SIGNALED;
        a.qp.post_send(w).unwrap();
        shuttle_runs(&mut a, &mut b, max);
        let o = outcome(&mut a, &mut b);
        assert_eq!(o.1.first().map(|c| c.status), Some(WcStatus::RemAccessErr));
        assert_eq!(b.qp.state(), QpState::Err);
        seen.push(o);
    }
    assert_eq!(seen[0], seen[1]);
}

#[test]
fn a_run_claiming_more_packets_than_its_payload_is_one_packet() {
    // Runs come only from this device's own requester, but a wrong count must not make the
    // responder walk billions of empty packets: it is taken as the packet it is.
    let (mut a, mut b) = pair(Service::Rc);
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite);
    w.local = sge(0, 600); // FIRST, MIDDLE, LAST at MTU 256
    w.remote_addr = VA + 0x400;
    w.rkey = Rkey(KEY);
    a.qp.post_send(w).unwrap();
    let mut buf = vec![0u8; 4096];
    let t = a.qp.poll_transmit(Time(0), &mut a.mem, &mut buf).unwrap();
    let pkt = RocePacketRepr::parse(&buf[..t.len]).unwrap();
    assert_eq!(pkt.bth.opcode, transport::wire::Opcode::RC_RDMA_WRITE_FIRST);
    let run = transport::Run {
        pkts: u32::MAX,
        ends_message: true,
        ack_req: true,
    };
    b.qp.handle_run(
        Time(0),
        &pkt,
        Some(run),
        &RxMeta::default(),
        &mut b.mem,
        None,
    );
    assert_eq!(
        b.qp.rq_psn(),
        Psn::new(101),
        "taken as the one WRITE FIRST it is"
    );
    shuttle(&mut a, &mut b);
    let c = completions(&mut a.qp);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].status, WcStatus::Success);
}

#[test]
fn runs_and_single_packets_agree_on_random_traffic() {
    // Random WRITEs and SENDs (with and without immediate data, solicited or not, of 0 to
    // ~4,000 bytes) at MTU 256: runs of a random bound give exactly what single packets give.
    let mut seed = 0x5eed_u64;
    let mut next = move |n: u64| {
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    };
    let mut runs_saved = 0u64;
    for round in 0..200 {
        let nwr = 1 + next(6);
        let mut wrs = Vec::new();
        for id in 0..nwr {
            let op = [
                WrOpcode::RdmaWrite,
                WrOpcode::RdmaWriteWithImm,
                WrOpcode::Send,
                WrOpcode::SendWithImm,
            ][next(4) as usize];
            let len = if op.is_send() { next(1025) } else { next(4001) } as u32;
            let mut w = SendWr::new(id, op);
            w.local = sge(next(0x1000), len);
            w.remote_addr = VA + 0x2000 + next(0x2000 - u64::from(len) + 1);
            w.rkey = Rkey(KEY);
            w.imm_data = id as u32;
            w.flags = SendFlags::SIGNALED;
            if next(3) == 0 {
                w.flags |= SendFlags::SOLICITED;
            }
            wrs.push(w);
        }
        let max = 2 + next(20) as u32;
        let mut seen: Vec<Outcome> = Vec::new();
        for m in [1, max] {
            let (mut a, mut b) = pair(Service::Rc);
            for (i, x) in a.mem.0.iter_mut().take(0x2000).enumerate() {
                *x = (i as u64 * 31 + round) as u8;
            }
            // A receive for every WR (SENDs and WRITEs with immediate data take one).
            for id in 0..6 {
                recv(&mut b.qp, id);
            }
            for w in &wrs {
                a.qp.post_send(w.clone()).unwrap();
            }
            let (moved, pkts) = shuttle_runs(&mut a, &mut b, m);
            if m > 1 {
                runs_saved += pkts - moved as u64;
            }
            let o = outcome(&mut a, &mut b);
            assert_eq!(o.1.len(), wrs.len(), "round {round}: {:?}", o.1);
            seen.push(o);
        }
        assert_eq!(
            seen[0], seen[1],
            "round {round}, runs of up to {max} packets"
        );
    }
    assert!(
        runs_saved > 1000,
        "runs were built: {runs_saved} packets needed no buffer"
    );
}

#[test]
fn requests_built_as_headers_only_are_the_packets_built_as_bytes() {
    // The same work on two pairs of QPs, one whose requester builds bytes and one whose
    // requester hands over headers (`Qp::set_headers_only`): each request's headers and
    // payload are what the other's bytes parse to, and the outcomes are the same. The
    // atomic has an extension header the headers-only form leaves out: it stays bytes.
    let post = |a: &mut End, b: &mut End| {
        for (i, x) in a.mem.0.iter_mut().take(0x1000).enumerate() {
            *x = (i * 13 + i / 256) as u8;
        }
        for id in 0..4 {
            recv(&mut b.qp, id);
        }
        let wr = |id, op, len, to: u64| {
            let mut w = SendWr::new(id, op);
            w.local = sge(0x10 * id, len);
            w.remote_addr = VA + to;
            w.rkey = Rkey(KEY);
            w.imm_data = 0xbeef;
            w.flags = SendFlags::SIGNALED;
            w
        };
        let mut inline = wr(7, WrOpcode::Send, 0, 0);
        inline.local = LocalData::InlineData(InlineData::from_slice(b"thirteen byte").unwrap());
        let mut faa = wr(8, WrOpcode::AtomicFetchAndAdd, 8, 0x3800);
        faa.compare_add = 5;
        let wrs = [
            wr(1, WrOpcode::RdmaWrite, 3000, 0x2000),
            wr(2, WrOpcode::Send, 1000, 0),
            wr(3, WrOpcode::SendWithImm, 901, 0),
            wr(4, WrOpcode::RdmaWriteWithImm, 700, 0x3000),
            wr(5, WrOpcode::RdmaWrite, 513, 0x3400),
            wr(6, WrOpcode::RdmaRead, 600, 0x2000),
            inline,
            faa,
        ];
        for w in wrs {
            a.qp.post_send(w).unwrap();
        }
    };
    for max in [1, 64] {
        let (mut xa, mut xb) = pair(Service::Rc);
        let (mut ya, mut yb) = pair(Service::Rc);
        post(&mut xa, &mut xb);
        post(&mut ya, &mut yb);
        ya.qp.set_headers_only(true);
        let (mut xbuf, mut ybuf) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
        let (mut built, mut as_bytes) = (0, 0);
        loop {
            let mut moved = 0;
            loop {
                let x = xa
                    .qp
                    .poll_transmit_run(Time(0), &mut xa.mem, &mut xbuf, max);
                let y = ya
                    .qp
                    .poll_transmit_run(Time(0), &mut ya.mem, &mut ybuf, max);
                let (Some(x), Some(y)) = (x, y) else {
                    assert_eq!(x.is_none(), y.is_none(), "one side had more to send");
                    break;
                };
                assert_eq!((x.len, x.run, x.dest_qpn), (y.len, y.run, y.dest_qpn));
                assert_eq!(x.hdr, None);
                let px = RocePacketRepr::parse(&xbuf[..x.len]).unwrap();
                let py = match y.hdr {
                    Some(h) => {
                        built += 1;
                        let at = h.header_len();
                        h.repr(&ybuf[at..at + h.payload_len(y.len)])
                    }
                    None => {
                        as_bytes += 1;
                        RocePacketRepr::parse(&ybuf[..y.len]).unwrap()
                    }
                };
                assert_eq!(px, py);
                let meta = RxMeta::default();
                xb.qp
                    .handle_run(Time(0), &px, x.run, &meta, &mut xb.mem, None);
                yb.qp
                    .handle_run(Time(0), &py, y.run, &meta, &mut yb.mem, None);
                moved += 1;
            }
            // Responses go back as bytes on both pairs.
            let back = shuttle_one_way(&mut xb, &mut xa, &mut xbuf)
                + shuttle_one_way(&mut yb, &mut ya, &mut ybuf);
            if moved + back == 0 {
                break;
            }
        }
        assert!(built >= 8, "max {max}: {built} requests built as headers");
        assert_eq!(as_bytes, 1, "max {max}: the atomic stays bytes");
        let (ox, oy) = (outcome(&mut xa, &mut xb), outcome(&mut ya, &mut yb));
        assert_eq!(ox.1.len(), 8, "{:?}", ox.1);
        assert!(ox.1.iter().all(|c| c.status == WcStatus::Success));
        assert_eq!(ox, oy);
        assert_eq!(
            xa.mem.0, ya.mem.0,
            "the READ's data and the atomic's result"
        );
    }
}

/// Move every packet `from` has to `to` as bytes; returns how many.
fn shuttle_one_way(from: &mut End, to: &mut End, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while let Some(t) = from.qp.poll_transmit(Time(0), &mut from.mem, buf) {
        let pkt = RocePacketRepr::parse(&buf[..t.len]).unwrap();
        to.qp
            .handle_run(Time(0), &pkt, t.run, &RxMeta::default(), &mut to.mem, None);
        n += 1;
    }
    n
}
