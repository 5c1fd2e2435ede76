//! Property tests: arbitrary and hostile packet sequences fed to a responder and to a
//! requester never panic, never produce a malformed packet, and never touch memory outside
//! the ranges they were given — every out-of-range access the transport asks for is refused
//! by the Memory implementation and the transport reacts (NAK + ERR), never assumes
//! (`transport::fuzzing::drive` asserts these invariants; the cargo-fuzz target
//! `transport_packets` runs the same function).

use proptest::prelude::*;
use transport::fuzzing::{ctl, drive, sample_requests, script};
use transport::wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, IethRepr, ImmDt, Msn, Opcode,
    Psn, Qkey, Qpn, RethRepr, Rkey, RocePacketRepr, Syndrome,
};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 128,
        ..ProptestConfig::default()
    }
}

/// An arbitrary packet whose headers agree with its opcode (so it can be emitted); field
/// values are biased toward the subjects' real keys and addresses so deep paths are reached.
fn arb_packet() -> impl Strategy<Value = Vec<u8>> {
    let ops: Vec<Opcode> = Opcode::all_known().collect();
    (
        proptest::sample::select(ops),
        any::<u32>(),
        prop_oneof![Just(0x181u32), any::<u32>()],
        prop_oneof![Just(0x1_1000u64), 0x1_0000u64..0x1_5000, any::<u64>()],
        prop_oneof![0u32..3000, any::<u32>()],
        any::<u8>(),
        proptest::collection::vec(any::<u8>(), 0..1100),
        any::<(u64, u64, bool, bool)>(),
    )
        .prop_map(
            |(op, psn, rkey, va, len, syn, payload, (a, b, ackreq, se))| {
                let info = op.info().expect("known");
                let h = info.headers;
                let mut bth = BthRepr::new(op, Qpn::new(0x12), Psn::new(psn));
                bth.ack_req = ackreq;
                bth.solicited = se;
                let payload: &[u8] = if info.has_payload { &payload } else { &[] };
                let mut r = RocePacketRepr::new(bth, payload);
                if h.has_xrceth() {
                    // Mostly the XRC target's SRQ (5), sometimes none of its domain.
                    r.xrceth = Some(wire::XrcEthRepr {
                        srqn: if se { 5 } else { len & 0xff_ffff },
                    });
                }
                if h.has_deth() {
                    r.deth = Some(DethRepr {
                        qkey: Qkey(if se { 0x1111 } else { rkey }),
                        src_qp: Qpn::new(psn),
                    });
                }
                if h.has_reth() {
                    r.reth = Some(RethRepr {
                        va,
                        rkey: Rkey(rkey),
                        len,
                    });
                }
                if h.has_atomic_eth() {
                    r.atomic_eth = Some(AtomicEthRepr {
                        va,
                        rkey: Rkey(rkey),
                        swap_add: a,
                        compare: b,
                    });
                }
                if h.has_aeth() {
                    r.aeth = Some(AethRepr {
                        syndrome: Syndrome(syn),
                        msn: Msn::new(len),
                    });
                }
                if h.has_atomic_ack_eth() {
                    r.atomic_ack = Some(AtomicAckEthRepr { orig: a });
                }
                if h.has_immdt() {
                    r.immdt = Some(ImmDt(psn));
                }
                if h.has_ieth() {
                    r.ieth = Some(IethRepr { rkey: Rkey(rkey) });
                }
                let mut buf = vec![0u8; r.buffer_len()];
                let n = r.emit(&mut buf).expect("consistent repr emits");
                buf.truncate(n);
                buf
            },
        )
}

fn arb_ctl() -> impl Strategy<Value = u8> {
    prop_oneof![
        8 => prop_oneof![Just(ctl::TO_RESPONDER), Just(ctl::TO_REQUESTER)],
        2 => Just(ctl::TO_RESPONDER | ctl::RAW_PSN),
        1 => prop_oneof![Just(ctl::TO_RESPONDER | ctl::CE), Just(ctl::TO_REQUESTER | ctl::CE)],
        1 => Just(ctl::TICK),
        1 => Just(ctl::POST_RECV),
        1 => any::<u8>(),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// The `dcqcn_settings` fuzz target's body: random settings text (often valid names)
    /// followed by random events.
    #[test]
    fn dcqcn_settings_on_random_inputs(
        names in proptest::collection::vec(prop_oneof![
            Just("rp_ai_rate="), Just("rp_min_rate="), Just("rp_max_rate="), Just("rp_gd="),
            Just("rp_dce_tcp_g="), Just("rp_min_dec_fac="), Just("rp_time_reset="),
            Just("np_min_time_between_cnps="), Just("defer_cut="), Just("bogus="),
        ], 0..6),
        values in proptest::collection::vec(any::<u64>(), 6),
        events in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut text = String::new();
        for (n, v) in names.iter().zip(&values) {
            text.push_str(n);
            text.push_str(&(v % 1_000_000).to_string());
            text.push(',');
        }
        let mut data = text.into_bytes();
        data.push(b'\n');
        data.extend_from_slice(&events);
        transport::fuzzing::dcqcn_settings(&data);
    }

    /// The fuzz target's body on random bytes.
    #[test]
    fn fuzz_entry_on_random_inputs(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        drive(&data);
    }

    /// Sequences of arbitrary (well-formed, hostile) packets to both roles.
    #[test]
    fn arbitrary_packet_sequences(
        kind in 0u8..16,
        steps in proptest::collection::vec((arb_ctl(), arb_packet()), 1..40),
    ) {
        let steps: Vec<(u8, &[u8])> = steps.iter().map(|(c, p)| (*c, &p[..])).collect();
        drive(&script(kind, &steps));
    }

    /// Real request packets with mutations: bit flips, truncation, opcode swaps, replays.
    #[test]
    fn mutated_valid_requests(
        kind in 0u8..16,
        picks in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u16>(), any::<u8>(), 0u8..5), 1..60),
    ) {
        let base = sample_requests(kind);
        prop_assume!(!base.is_empty());
        let mut packets = Vec::new();
        for (idx, pos, val, how) in &picks {
            let mut p = base[idx.index(base.len())].clone();
            let at = usize::from(*pos) % p.len();
            match how {
                0 => {}
                1 => p[at] ^= 1 << (val % 8),
                2 => p.truncate(at.max(12)),
                3 => p[0] = *val,
                _ => p[at] = *val,
            }
            packets.push(p);
        }
        let steps: Vec<(u8, &[u8])> = packets.iter().map(|p| (ctl::TO_RESPONDER | ctl::RAW_PSN, &p[..])).collect();
        drive(&script(kind, &steps));
    }
}

#[test]
fn sample_requests_are_the_standard_mix() {
    let rc = sample_requests(5);
    let ops: Vec<Opcode> = rc
        .iter()
        .map(|b| RocePacketRepr::parse(b).expect("parses").bth.opcode)
        .collect();
    assert!(ops.contains(&Opcode::RC_RDMA_READ_REQUEST));
    assert!(ops.contains(&Opcode::RC_COMPARE_SWAP));
    assert!(ops.contains(&Opcode::RC_SEND_LAST_WITH_IMMEDIATE));
    // Feeding them, in order, to the responder executes them (no refusal, no error): two
    // receive completions (SEND, SEND WITH IMM), responses for everything.
    let steps: Vec<(u8, &[u8])> = rc
        .iter()
        .map(|p| (ctl::TO_RESPONDER | ctl::RAW_PSN, &p[..]))
        .collect();
    let st = drive(&script(5, &steps));
    assert_eq!(st.responder_refused, 0);
    assert_eq!(st.responder_completions, 2);
    assert!(st.responder_granted >= 7, "{st:?}");
    assert!(st.responder_packets >= 5, "{st:?}");
    assert_eq!(st.responder_state, Some(transport::QpState::Rts));
    // The same for UC and UD.
    for kind in [6, 7] {
        let reqs = sample_requests(kind);
        let steps: Vec<(u8, &[u8])> = reqs
            .iter()
            .map(|p| (ctl::TO_RESPONDER | ctl::RAW_PSN, &p[..]))
            .collect();
        let st = drive(&script(kind, &steps));
        assert_eq!(st.responder_completions, 2, "kind {kind}: {st:?}");
    }
}

/// XRC (kind 1): the initiator's requests carry XRC opcodes and an XRCETH naming SRQ 5; the
/// target executes them all from that SRQ (two receive completions); the same requests
/// naming another SRQ number are NAKed Invalid Request and end the target in ERR.
#[test]
fn xrc_requests_run_from_the_named_srq_and_others_are_naked() {
    let reqs = sample_requests(1);
    for b in &reqs {
        let p = RocePacketRepr::parse(b).expect("parses");
        let info = p.bth.opcode.info().expect("known");
        assert_eq!(
            info.transport,
            transport::wire::Transport::Xrc,
            "{}",
            p.bth.opcode
        );
        assert_eq!(p.xrceth.map(|x| x.srqn), Some(5));
    }
    let steps: Vec<(u8, &[u8])> = reqs
        .iter()
        .map(|p| (ctl::TO_RESPONDER | ctl::RAW_PSN, &p[..]))
        .collect();
    let st = drive(&script(1, &steps));
    assert_eq!(st.responder_refused, 0);
    assert_eq!(st.responder_completions, 2, "{st:?}");
    assert_eq!(st.responder_state, Some(transport::QpState::Rts));
    // The first request with its SRQ number changed (offset 12..16 is the XRCETH).
    let mut bad = reqs[0].clone();
    bad[15] ^= 0x40;
    let st = drive(&script(1, &[(ctl::TO_RESPONDER | ctl::RAW_PSN, &bad[..])]));
    assert_eq!(st.responder_state, Some(transport::QpState::Err));
    assert_eq!(st.responder_packets, 1, "the NAK");
    assert_eq!(st.responder_completions, 0);
}

#[test]
fn out_of_range_write_is_refused_and_naked() {
    // A WRITE whose RETH points past the region: the Memory refuses, the responder NAKs
    // (drive asserts it ends in ERR) — and nothing outside the region exists to be touched.
    let mut bth = BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, Qpn::new(0x12), Psn::new(0));
    bth.ack_req = true;
    let r = RocePacketRepr {
        reth: Some(RethRepr {
            va: 0x1_3FFC,
            rkey: Rkey(0x181),
            len: 8,
        }),
        ..RocePacketRepr::new(bth, &[1; 8])
    };
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b).unwrap();
    let st = drive(&script(5, &[(ctl::TO_RESPONDER | ctl::RAW_PSN, &b)]));
    assert_eq!(st.responder_refused, 1);
    assert_eq!(st.responder_state, Some(transport::QpState::Err));
    assert_eq!(st.responder_packets, 1, "the NAK");
}

/// Congestion control (kinds 2–4): CE-marked requests make the responder send CNPs (spaced:
/// all arrive at one instant, so one CNP), and CNPs fed to the requester are handled; every
/// emitted packet parses and matches its opcode (`drive` checks).
#[test]
fn ce_marks_and_cnps_reach_the_congestion_control() {
    let reqs = sample_requests(2);
    let mut cnp_bth = BthRepr::new(Opcode::CNP, Qpn::new(0x11), Psn::new(0));
    cnp_bth.becn = true;
    let cnp = RocePacketRepr::new(cnp_bth, &[]);
    let mut cnp_bytes = vec![0u8; cnp.buffer_len()];
    let n = cnp.emit(&mut cnp_bytes).unwrap();
    cnp_bytes.truncate(n);
    let mut steps: Vec<(u8, &[u8])> = reqs
        .iter()
        .take(3)
        .map(|r| (ctl::TO_RESPONDER | ctl::RAW_PSN | ctl::CE, &r[..]))
        .collect();
    steps.push((ctl::TO_REQUESTER, &cnp_bytes));
    steps.push((ctl::TICK, &[]));
    let st = drive(&script(2, &steps));
    assert_eq!(st.responder_cnps, 1, "{st:?}");
    assert_eq!(st.requester_cnps_handled, 1, "{st:?}");
    // Without congestion control (kind 0): counted, not answered.
    let st = drive(&script(0, &steps));
    assert_eq!(
        (st.responder_cnps, st.requester_cnps_handled),
        (0, 0),
        "{st:?}"
    );
}
