//! Replays every perftest exchange capture in `testdata/exchange-captures/`:
//! (a) every message of each direction decodes, to the values the tools printed;
//! (b) re-encoding the decoded values gives the captured bytes exactly;
//! (c) our client (server) sequence against the captured server (client) bytes writes
//!     exactly the captured bytes, message by message, in the same order;
//! and the negative captures end with the abort perftest made, with its message.

mod support;

use oob::console::{address_block, address_lines, bw_line, BwUnits, Side, RESULT_LINE};
use oob::perftest::msg::{self, decode_i32, decode_mtu, decode_version};
use oob::perftest::{
    describe_plan, run_exchange, BenchConfig, BenchHooks, BwReport, Connection, HookError,
    KeyMessage, LocalSystem, Mtu, Negotiated, Perftest, PerftestError, ReportLayout, Role,
    TestKind, Verb,
};
use support::{console, ScriptedPeer, TcpCapture};

/// One direction of a perftest capture, decoded message by message.
#[derive(Debug, Default)]
struct Decoded {
    version: String,
    cycle_buffer: i32,
    cache_line: i32,
    mtu: i64,
    /// Every KEY message in order (K rounds, INIT, SYNCs, CLOSE).
    keys: Vec<KeyMessage>,
    reports: Vec<BwReport>,
    done: bool,
}

/// Decodes one direction (each captured segment is one `write()`), checking that every
/// message re-encodes to its exact bytes.
fn decode_direction(writes: &[Vec<u8>]) -> Decoded {
    let mut d = Decoded::default();
    let mut it = writes.iter().peekable();
    let v = it.next().expect("VERSION");
    let pv = decode_version(v).expect("VERSION decodes");
    assert_eq!(
        msg::encode_version(&pv.text).expect("fits").as_slice(),
        v.as_slice()
    );
    d.version = pv.text;
    let c = it.next().expect("CYCLE_BUFFER");
    d.cycle_buffer = decode_i32(c).expect("CYCLE_BUFFER decodes");
    assert_eq!(msg::encode_i32(d.cycle_buffer).as_slice(), c.as_slice());
    let l = it.next().expect("CACHE_LINE");
    d.cache_line = decode_i32(l).expect("CACHE_LINE decodes");
    assert_eq!(msg::encode_i32(d.cache_line).as_slice(), l.as_slice());
    let m = it.next().expect("MTU");
    d.mtu = decode_mtu(m).expect("MTU decodes");
    if let Some(mtu) = oob::perftest::mtu_from_enum(d.mtu) {
        assert_eq!(msg::encode_mtu(mtu, m.len()), *m);
    }
    while let Some(w) = it.next() {
        match w.len() {
            msg::KEY_LEN => {
                let k = KeyMessage::decode(w).expect("KEY decodes");
                assert_eq!(k.encode().expect("encodes").as_slice(), w.as_slice());
                d.keys.push(k);
            }
            msg::REPORT_FIELD_LEN => {
                let mut fields = vec![w.clone()];
                for _ in 0..4 {
                    fields.push(it.next().expect("5 REPORT fields").clone());
                }
                let all = fields.concat();
                let r = BwReport::decode(&all, ReportLayout::STANDARD).expect("REPORT decodes");
                assert_eq!(r.encode_fields(ReportLayout::STANDARD), fields);
                d.reports.push(r);
            }
            5 => {
                assert_eq!(w.as_slice(), msg::DONE);
                d.done = true;
            }
            n => panic!("unexpected {n}-byte message"),
        }
    }
    d
}

#[derive(Debug)]
struct Case {
    pcap: &'static str,
    cfg: BenchConfig,
    client_units: BwUnits,
    server_units: BwUnits,
}

fn case(pcap: &'static str, verb: Verb, kind: TestKind, f: impl FnOnce(&mut Case)) -> Case {
    let mut c = Case {
        pcap,
        cfg: BenchConfig::new(verb, kind),
        client_units: BwUnits::MiBps,
        server_units: BwUnits::MiBps,
    };
    f(&mut c);
    c
}

fn cases() -> Vec<Case> {
    use TestKind::{Bw, Lat};
    use Verb::{Atomic, Read, Send, Write};
    vec![
        case("pt_write_bw.pcap", Write, Bw, |_| {}),
        case("pt_write_bw_gbits.pcap", Write, Bw, |c| {
            c.client_units = BwUnits::Gbps;
            c.server_units = BwUnits::Gbps;
        }),
        case("pt_write_bw_bidir.pcap", Write, Bw, |c| {
            c.cfg.bidirectional = true
        }),
        case("pt_write_bw_q2.pcap", Write, Bw, |c| c.cfg.num_qps = 2),
        case("pt_write_bw_postlist.pcap", Write, Bw, |_| {}),
        case("pt_write_bw_no_x.pcap", Write, Bw, |_| {}),
        case("pt_write_bw_all.pcap", Write, Bw, |c| {
            c.cfg.run_all = true;
            c.client_units = BwUnits::Gbps;
            c.server_units = BwUnits::Gbps;
        }),
        case("pt_write_lat.pcap", Write, Lat, |_| {}),
        case("pt_read_bw.pcap", Read, Bw, |_| {}),
        case("pt_read_bw_bidir.pcap", Read, Bw, |c| {
            c.cfg.bidirectional = true
        }),
        case("pt_read_lat.pcap", Read, Lat, |_| {}),
        case("pt_send_bw.pcap", Send, Bw, |_| {}),
        case("pt_send_bw_ud.pcap", Send, Bw, |c| {
            c.cfg.connection = Connection::Ud
        }),
        case("pt_send_bw_events.pcap", Send, Bw, |_| {}),
        case("pt_send_bw_bidir.pcap", Send, Bw, |c| {
            c.cfg.bidirectional = true
        }),
        case("pt_send_bw_all_ud.pcap", Send, Bw, |c| {
            c.cfg.connection = Connection::Ud;
            c.cfg.run_all = true;
        }),
        case("pt_send_lat.pcap", Send, Lat, |_| {}),
        case("pt_atomic_bw.pcap", Atomic, Bw, |_| {}),
    ]
}

/// Test hooks: hand out given KEYs and reports, record what the machine asked for.
#[derive(Debug, Default)]
struct Recorder {
    keys: Vec<KeyMessage>,
    report: Option<BwReport>,
    sleeps: usize,
    negotiated: Option<Negotiated>,
    connected: Option<Vec<KeyMessage>>,
    addresses: Option<(Vec<KeyMessage>, Vec<KeyMessage>)>,
    prepares: Vec<u64>,
    runs: Vec<u64>,
    reports: Vec<(Option<BwReport>, BwReport)>,
    fail_connect: bool,
}

impl BenchHooks for Recorder {
    fn sleep(&mut self, d: std::time::Duration) {
        assert_eq!(d, std::time::Duration::from_secs(1));
        self.sleeps += 1;
    }

    fn negotiated(&mut self, n: &Negotiated) -> Result<Vec<KeyMessage>, HookError> {
        self.negotiated = Some(n.clone());
        Ok(self.keys.clone())
    }

    fn connect(&mut self, remote: &[KeyMessage]) -> Result<(), HookError> {
        self.connected = Some(remote.to_vec());
        if self.fail_connect {
            return Err("Failed to modify QP 0 to RTR".into());
        }
        Ok(())
    }

    fn addresses(&mut self, local: &[KeyMessage], remote: &[KeyMessage]) {
        self.addresses = Some((local.to_vec(), remote.to_vec()));
    }

    fn prepare(&mut self, size: u64) -> Result<(), HookError> {
        self.prepares.push(size);
        Ok(())
    }

    fn run(&mut self, size: u64) -> Result<Option<BwReport>, HookError> {
        self.runs.push(size);
        Ok(self.report)
    }

    fn report(&mut self, mine: Option<&BwReport>, peer: &BwReport) {
        self.reports.push((mine.copied(), *peer));
    }
}

/// Replays one side against the captured other side.
fn replay(
    cap: &TcpCapture,
    cfg: &BenchConfig,
    role: Role,
    hooks: &mut Recorder,
    preset_report: Option<BwReport>,
    chunk: usize,
) -> (ScriptedPeer, Perftest, Result<(), PerftestError>) {
    let mut peer = ScriptedPeer::new(cap, role == Role::Client, chunk);
    let mut ex = Perftest::new(cfg.clone(), role, LocalSystem::default());
    if let Some(r) = preset_report {
        ex.set_report(r);
    }
    let result = run_exchange(&mut peer, &mut ex, hooks);
    (peer, ex, result)
}

fn assert_contains(text: &str, needle: &str, what: &str) {
    assert!(
        text.contains(needle),
        "{what}: expected to find\n{needle:?}\nin\n{text}"
    );
}

#[test]
fn every_pt_capture_decodes_reencodes_and_replays() {
    for c in cases() {
        let cap = TcpCapture::load(c.pcap);
        let client_writes = cap.writes(true);
        let server_writes = cap.writes(false);
        let cd = decode_direction(&client_writes);
        let sd = decode_direction(&server_writes);
        let n = c.cfg.qps();
        let name = c.pcap;

        // (a) values: version, system data, MTU as the lab had them.
        for d in [&cd, &sd] {
            assert_eq!(d.version, "6.06", "{name}");
            assert_eq!(
                (d.cycle_buffer, d.cache_line, d.mtu),
                (4096, 64, 3),
                "{name}"
            );
        }
        assert_eq!(
            cd.keys.len(),
            sd.keys.len(),
            "{name}: KEY count per direction"
        );
        let client_keys = cd.keys[..n].to_vec();
        let server_keys = sd.keys[..n].to_vec();
        // The K rounds go through the QPs in order; INIT/SYNC/CLOSE are QP0's KEY again,
        // byte for byte; the count and order follow the plan.
        for role in [Role::Client, Role::Server] {
            let (d, keys) = match role {
                Role::Client => (&cd, &client_keys),
                Role::Server => (&sd, &server_keys),
            };
            let mut expected = Vec::new();
            for step in describe_plan(&c.cfg, role, Mtu::Mtu1024) {
                match step.as_str() {
                    "K" | "INIT" | "SYNC" | "CLOSE" => expected.push(keys[0]),
                    s if s.starts_with("K×") => expected.extend(keys.iter().copied()),
                    _ => {}
                }
            }
            assert_eq!(d.keys, expected, "{name}: {role} KEY sequence");
        }
        // Address lines as printed by both sides.
        let ctxt = console(&format!("{name}.client.txt"));
        let stxt = console(&format!("{name}.server.txt"));
        for k in &client_keys {
            assert_contains(
                &ctxt,
                &address_lines(Side::Local, c.cfg.verb, k, true),
                name,
            );
            assert_contains(
                &stxt,
                &address_lines(Side::Remote, c.cfg.verb, k, true),
                name,
            );
        }
        for k in &server_keys {
            assert_contains(
                &stxt,
                &address_lines(Side::Local, c.cfg.verb, k, true),
                name,
            );
            assert_contains(
                &ctxt,
                &address_lines(Side::Remote, c.cfg.verb, k, true),
                name,
            );
        }
        assert_contains(&ctxt, " Mtu             : 1024[B]\n", name);
        // The whole block, all local lines before all remote lines (`-q 2`).
        let block = address_block(c.cfg.verb, &client_keys, &server_keys, true);
        assert_contains(&ctxt, &format!("{RESULT_LINE}{block}{RESULT_LINE}"), name);
        let block = address_block(c.cfg.verb, &server_keys, &client_keys, true);
        assert_contains(&stxt, &format!("{RESULT_LINE}{block}{RESULT_LINE}"), name);
        // REPORT values as printed.
        let duplex = c.cfg.duplex();
        match (cd.reports.as_slice(), sd.reports.as_slice()) {
            ([], []) => assert!(
                c.cfg.verb == Verb::Send && !duplex || c.cfg.kind == TestKind::Lat,
                "{name}: only unidirectional send and latency tests have no REPORT"
            ),
            ([cr], [sr]) if duplex => {
                assert_contains(&ctxt, &bw_line(cr, Some(sr), c.client_units), name);
                assert_contains(&stxt, &bw_line(sr, Some(cr), c.server_units), name);
            }
            ([cr], [_garbage]) => {
                assert_eq!(cr.iters, 5 * n as u64, "{name}: iters × QPs");
                assert_contains(&ctxt, &bw_line(cr, None, c.client_units), name);
                assert_contains(&stxt, &bw_line(cr, None, c.server_units), name);
            }
            other => panic!("{name}: unexpected reports {other:?}"),
        }
        assert_eq!(cd.done, sd.done, "{name}");
        assert_eq!(
            cd.done,
            c.cfg.kind == TestKind::Bw || c.cfg.verb != Verb::Write
        );

        // (c) our client against the captured server, and our server against the client.
        for chunk in [1, 7, 4096] {
            let mut hooks = Recorder {
                keys: client_keys.clone(),
                report: cd.reports.first().copied(),
                ..Recorder::default()
            };
            let (peer, ex, result) = replay(&cap, &c.cfg, Role::Client, &mut hooks, None, chunk);
            result.unwrap_or_else(|e| panic!("{name} client: {e}"));
            assert!(ex.is_finished());
            assert_eq!(peer.writes, client_writes, "{name}: client writes");
            assert_eq!(
                peer.unread(),
                usize::from(sd.done) * 5,
                "{name}: only DONE unread"
            );
            check_hooks(&c, &hooks, &server_keys, Role::Client);
            if duplex {
                assert_eq!(hooks.reports.len(), 1, "{name}");
                assert!(hooks.reports[0].1.bits_eq(&sd.reports[0]), "{name}");
            }

            let mut hooks = Recorder {
                keys: server_keys.clone(),
                report: sd.reports.first().copied(),
                ..Recorder::default()
            };
            let preset = if duplex {
                None
            } else {
                sd.reports.first().copied()
            };
            let (peer, ex, result) = replay(&cap, &c.cfg, Role::Server, &mut hooks, preset, chunk);
            result.unwrap_or_else(|e| panic!("{name} server: {e}"));
            assert!(ex.is_finished());
            assert_eq!(peer.writes, server_writes, "{name}: server writes");
            assert_eq!(peer.unread(), usize::from(cd.done) * 5, "{name}");
            check_hooks(&c, &hooks, &client_keys, Role::Server);
            if !duplex && !cd.reports.is_empty() {
                // The unidirectional server learns the client's report and prints it.
                assert_eq!(hooks.reports.len(), 1, "{name}");
                assert_eq!(hooks.reports[0].0, None);
                assert!(hooks.reports[0].1.bits_eq(&cd.reports[0]), "{name}");
                assert_contains(
                    &stxt,
                    &bw_line(&hooks.reports[0].1, None, c.server_units),
                    name,
                );
            }
        }
    }
}

fn check_hooks(c: &Case, hooks: &Recorder, peer_keys: &[KeyMessage], role: Role) {
    let name = c.pcap;
    assert_eq!(
        hooks.sleeps,
        usize::from(c.cfg.pauses_after_connect()),
        "{name}: only ib_write_bw pauses"
    );
    let neg = hooks.negotiated.as_ref().expect("negotiated");
    assert_eq!(
        (neg.mtu, neg.cycle_buffer, neg.cache_line),
        (Mtu::Mtu1024, 4096, 64)
    );
    assert_eq!(neg.peer_version.text, "6.06");
    if c.cfg.connection == Connection::Ud {
        assert_eq!(neg.size, 1024, "{name}: UD size clamped to the MTU");
        assert!(neg
            .notice
            .as_deref()
            .is_some_and(|n| n.contains("MTU 1024")));
    }
    assert_eq!(
        hooks.connected.as_deref(),
        Some(peer_keys),
        "{name}: connect"
    );
    let (_, remote) = hooks.addresses.as_ref().expect("addresses");
    assert_eq!(remote.as_slice(), peer_keys, "{name}: addresses");
    let expect_runs: Vec<u64> = match (c.cfg.kind, c.cfg.verb, role) {
        (TestKind::Bw, Verb::Write | Verb::Read | Verb::Atomic, Role::Server)
            if !c.cfg.duplex() =>
        {
            vec![]
        }
        (TestKind::Lat, Verb::Read | Verb::Atomic, Role::Server) => vec![],
        _ => c.cfg.sweep_sizes(Mtu::Mtu1024, neg.size),
    };
    assert_eq!(hooks.runs, expect_runs, "{name}: runs");
    assert_eq!(hooks.prepares, expect_runs, "{name}: prepares");
}

/// Replays our server against a capture whose client is a fake or whose run ends early,
/// returning what it wrote and how it ended.
fn server_against(pcap: &str, cfg: BenchConfig) -> (Vec<Vec<u8>>, Recorder, PerftestError) {
    let cap = TcpCapture::load(pcap);
    // The server's own KEY if it got as far as sending one, else any IPv4-mapped one.
    let key = cap
        .writes(false)
        .iter()
        .find(|w| w.len() == msg::KEY_LEN)
        .map(|w| KeyMessage::decode(w).expect("server KEY decodes"))
        .unwrap_or(KeyMessage {
            qpn: 0x11,
            gid: oob::gid::gid_from_ipv4([10, 77, 0, 11].into()),
            ..KeyMessage::default()
        });
    let mut hooks = Recorder {
        keys: vec![key],
        ..Recorder::default()
    };
    let (peer, _, result) = replay(&cap, &cfg, Role::Server, &mut hooks, None, 5);
    let err = result.expect_err("this capture ends in an abort");
    (peer.writes, hooks, err)
}

fn write_bw() -> BenchConfig {
    BenchConfig::new(Verb::Write, TestKind::Bw)
}

/// The stderr lines perftest printed come first in the console files.
fn assert_stderr(err: &PerftestError, txt_name: &str) {
    let txt = console(txt_name);
    let expected = format!("{err}\n");
    assert!(
        txt.starts_with(&expected),
        "{txt_name}: expected it to start with\n{expected:?}\nbut it is\n{txt:?}"
    );
}

#[test]
fn neg_version_560_server_replies_then_aborts() {
    let (writes, hooks, err) = server_against("neg_version_5.60.pcap", write_bw());
    assert_eq!(
        writes,
        TcpCapture::load("neg_version_5.60.pcap").writes(false)
    );
    assert_eq!(writes, vec![b"6.06\0\0\0\0\0\0\0\0\0\0\0\0".to_vec()]);
    assert!(matches!(&err, PerftestError::VersionTooOld { peer } if peer == "5.60"));
    assert!(hooks.negotiated.is_none());
    assert_eq!(err.exit_status(), 1);
    assert_stderr(&err, "neg_version_5.60.pcap.server.txt");
}

#[test]
fn neg_short_version_fails_reading_reports() {
    let (writes, _, err) = server_against("neg_short_version.pcap", write_bw());
    assert!(writes.is_empty());
    assert!(matches!(
        err,
        PerftestError::Read {
            got: 8,
            want: 16,
            ..
        }
    ));
    assert_stderr(&err, "neg_short_version.pcap.server.txt");
}

#[test]
fn neg_short_keymsg_fails_reading_keys() {
    let (writes, hooks, err) = server_against("neg_short_keymsg.pcap", write_bw());
    assert_eq!(
        writes,
        TcpCapture::load("neg_short_keymsg.pcap").writes(false)
    );
    assert_eq!(writes.len(), 4, "M1–M4 only");
    assert!(hooks.negotiated.is_some());
    assert!(matches!(
        err,
        PerftestError::Read {
            got: 100,
            want: 108,
            ..
        }
    ));
    assert_stderr(&err, "neg_short_keymsg.pcap.server.txt");
}

#[test]
fn neg_gid_type_mismatch_aborts_after_first_key_round() {
    let (writes, hooks, err) = server_against("neg_gid_type_mismatch.pcap", write_bw());
    assert_eq!(
        writes,
        TcpCapture::load("neg_gid_type_mismatch.pcap").writes(false)
    );
    assert_eq!(writes.len(), 5, "M1–M4 and its own KEY");
    assert!(matches!(err, PerftestError::GidTypeMismatch));
    assert!(
        hooks.connected.is_none(),
        "no QP connect after the mismatch"
    );
    assert_stderr(&err, "neg_gid_type_mismatch.pcap.server.txt");
}

#[test]
fn mtu_from_peer_smaller_is_adopted_invalid_is_ignored() {
    for (pcap, mtu) in [
        ("mtu_512_from_peer.pcap", Mtu::Mtu512),
        ("mtu_invalid_from_peer.pcap", Mtu::Mtu1024),
    ] {
        let (writes, hooks, err) = server_against(pcap, write_bw());
        let cap = TcpCapture::load(pcap);
        assert_eq!(writes, cap.writes(false), "{pcap}");
        assert_eq!(writes[3], b"3\0", "{pcap}: a side sends its own MTU");
        let neg = hooks.negotiated.expect("negotiated");
        assert_eq!(neg.mtu, mtu, "{pcap}");
        assert_contains(
            &console(&format!("{pcap}.server.txt")),
            &format!(" Mtu             : {}[B]\n", mtu.bytes()),
            pcap,
        );
        // The fake client stopped after its first KEY: the second round's read fails.
        assert!(hooks.connected.is_some());
        assert!(matches!(
            err,
            PerftestError::Read {
                got: 0,
                want: 108,
                ..
            }
        ));
        assert_stderr(&err, &format!("{pcap}.server.txt"));
    }
}

#[test]
fn neg_dont_xchg_versions_both_sides_abort() {
    let cap = TcpCapture::load("neg_dont_xchg_versions.pcap");
    assert!(cap.segments.is_empty(), "nothing was exchanged");
    let mut cfg = write_bw();
    cfg.dont_xchg_versions = true;
    for (role, txt) in [
        (Role::Client, "neg_dont_xchg_versions.pcap.client.txt"),
        (Role::Server, "neg_dont_xchg_versions.pcap.server.txt"),
    ] {
        let mut hooks = Recorder::default();
        let (peer, _, result) = replay(&cap, &cfg, role, &mut hooks, None, 16);
        let err = result.expect_err("aborts");
        assert!(peer.writes.is_empty());
        assert_eq!(hooks.sleeps, 1, "ib_write_bw still pauses first");
        assert!(matches!(&err, PerftestError::VersionTooOld { peer } if peer.is_empty()));
        assert_stderr(&err, txt);
    }
}

#[test]
fn fake_client_full_sequence_both_ways() {
    let pcap = "fake_client_write_bw_full.pcap";
    let cap = TcpCapture::load(pcap);
    let cd = decode_direction(&cap.writes(true));
    let sd = decode_direction(&cap.writes(false));
    let fake_report = BwReport {
        size: 65536,
        iters: 5,
        bw_peak: 1.5,
        bw_avg: 1.25,
        msg_rate: 0.002,
        ..BwReport::default()
    };
    assert!(cd.reports[0].bits_eq(&fake_report));
    assert_eq!(cd.keys[0].qpn, 0x123);
    assert_eq!(cd.keys[0].psn, 0xabcdef);

    // Our server in place of the real one.
    let mut hooks = Recorder {
        keys: vec![sd.keys[0]],
        ..Recorder::default()
    };
    let (peer, _, result) = replay(
        &cap,
        &write_bw(),
        Role::Server,
        &mut hooks,
        sd.reports.first().copied(),
        3,
    );
    result.expect("the real server exited 0");
    assert_eq!(peer.writes, cap.writes(false));
    assert_eq!(hooks.reports.len(), 1);
    let printed = bw_line(&hooks.reports[0].1, None, BwUnits::MiBps);
    assert_eq!(
        printed,
        " 65536      5                1.50               1.25   \t\t   0.002000"
    );
    assert_contains(&console(&format!("{pcap}.server.txt")), &printed, pcap);

    // Our client in place of the fake one.
    let mut hooks = Recorder {
        keys: vec![cd.keys[0]],
        report: Some(fake_report),
        ..Recorder::default()
    };
    let (peer, _, result) = replay(&cap, &write_bw(), Role::Client, &mut hooks, None, 64);
    result.expect("completes");
    assert_eq!(peer.writes, cap.writes(true));
}

#[test]
fn fake_server_against_real_client() {
    let pcap = "fake_server_vs_real_client_write_bw.pcap";
    let cap = TcpCapture::load(pcap);
    let cd = decode_direction(&cap.writes(true));
    let sd = decode_direction(&cap.writes(false));
    assert_eq!(sd.keys[0].qpn, 0x456);

    // Our client: the real client's bytes up to SYNC-RTR, then (after the run) its
    // SYNC-END, which the fake server never answered.
    let mut hooks = Recorder {
        keys: vec![cd.keys[0]],
        report: Some(BwReport::default()),
        ..Recorder::default()
    };
    let (peer, _, result) = replay(&cap, &write_bw(), Role::Client, &mut hooks, None, 9);
    let captured = cap.writes(true);
    assert_eq!(&peer.writes[..captured.len()], captured.as_slice());
    assert_eq!(peer.writes.len(), captured.len() + 1);
    assert_eq!(
        peer.writes.last(),
        Some(&cd.keys[0].encode().expect("encodes").to_vec())
    );
    assert_eq!(hooks.runs, vec![65536]);
    let err = result.expect_err("the fake server closed");
    assert!(matches!(
        err,
        PerftestError::Read {
            got: 0,
            want: 108,
            role: Role::Client,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "ethernet_read_keys: Couldn't read remote address\n Unable to read from socket/rdma_cm\n Failed to exchange data between server and clients"
    );

    // Our server in place of the fake one writes what it wrote.
    let (writes, _, err) = server_against(pcap, write_bw());
    assert_eq!(writes, cap.writes(false));
    assert!(matches!(
        err,
        PerftestError::Read {
            got: 0,
            want: 108,
            role: Role::Server,
            ..
        }
    ));
}

#[test]
fn connect_failure_is_reported_like_perftest() {
    let cap = TcpCapture::load("pt_write_bw.pcap");
    let sd = decode_direction(&cap.writes(false));
    let mut hooks = Recorder {
        keys: vec![sd.keys[0]],
        fail_connect: true,
        ..Recorder::default()
    };
    let (peer, _, result) = replay(&cap, &write_bw(), Role::Server, &mut hooks, None, 16);
    let err = result.expect_err("connect fails");
    assert_eq!(
        err.to_string(),
        "Failed to modify QP 0 to RTR\n Unable to Connect the HCA's through the link"
    );
    assert_eq!(peer.writes.len(), 5, "stopped after the first KEY round");
}
