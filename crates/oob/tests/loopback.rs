//! Our client and server sequences against each other over a real TCP connection on
//! 127.0.0.1 (ephemeral port).

use std::net::{Ipv4Addr, SocketAddr};
use std::thread;
use std::time::Duration;

use oob::gid::gid_from_ipv4;
use oob::perftest::{
    self, accept_one, listen, run_exchange, BenchConfig, BenchHooks, BwReport, Connection,
    HookError, KeyMessage, LocalSystem, Mtu, Negotiated, Perftest, PerftestError, Role, TestKind,
    Verb,
};
use oob::pingpong::{self, PpDest, Variant};

#[derive(Debug, Default, Clone)]
struct Side {
    base_qpn: u32,
    report: BwReport,
    negotiated: Option<Negotiated>,
    remote: Vec<KeyMessage>,
    runs: Vec<u64>,
    reports: Vec<(Option<BwReport>, BwReport)>,
    sleeps: Vec<Duration>,
    qps: usize,
}

impl Side {
    fn keys(&self) -> Vec<KeyMessage> {
        (0..self.qps)
            .map(|i| KeyMessage {
                lid: 0,
                out_reads: 0x80,
                qpn: self.base_qpn + i as u32,
                psn: 0x123456 + self.base_qpn,
                rkey: 0x1000 + self.base_qpn,
                vaddr: 0x7f00_0000_0000 + 0x10000 * i as u64,
                gid: gid_from_ipv4(Ipv4Addr::LOCALHOST),
                srqn: 0,
            })
            .collect()
    }
}

impl BenchHooks for Side {
    fn sleep(&mut self, d: Duration) {
        self.sleeps.push(d);
    }

    fn negotiated(&mut self, n: &Negotiated) -> Result<Vec<KeyMessage>, HookError> {
        self.negotiated = Some(n.clone());
        Ok(self.keys())
    }

    fn connect(&mut self, remote: &[KeyMessage]) -> Result<(), HookError> {
        self.remote = remote.to_vec();
        Ok(())
    }

    fn run(&mut self, size: u64) -> Result<Option<BwReport>, HookError> {
        self.runs.push(size);
        Ok(Some(BwReport {
            size,
            ..self.report
        }))
    }

    fn report(&mut self, mine: Option<&BwReport>, peer: &BwReport) {
        self.reports.push((mine.copied(), *peer));
    }
}

fn run_pair(
    cfg: &BenchConfig,
    client_sys: LocalSystem,
    server_sys: LocalSystem,
) -> (Result<Side, PerftestError>, Result<Side, PerftestError>) {
    run_pair_with(cfg, cfg, client_sys, server_sys)
}

/// Client and server with configurations of their own.
fn run_pair_with(
    cfg: &BenchConfig,
    server_cfg: &BenchConfig,
    client_sys: LocalSystem,
    server_sys: LocalSystem,
) -> (Result<Side, PerftestError>, Result<Side, PerftestError>) {
    let listener = listen(Some(Ipv4Addr::LOCALHOST), 0).expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let qps = cfg.qps();
    let server_cfg = server_cfg.clone();
    let server = thread::spawn(move || {
        let (mut stream, _) = accept_one(listener).expect("accept");
        let mut side = Side {
            base_qpn: 0x200,
            qps,
            report: BwReport {
                iters: 5,
                bw_peak: 2.0,
                bw_avg: 1.0,
                msg_rate: 0.5,
                ..BwReport::default()
            },
            ..Side::default()
        };
        let mut ex = Perftest::new(server_cfg, Role::Server, server_sys);
        run_exchange(&mut stream, &mut ex, &mut side).map(|()| side)
    });
    let mut stream = perftest::connect("127.0.0.1", port).expect("connect");
    let mut side = Side {
        base_qpn: 0x100,
        qps,
        report: BwReport {
            iters: 5,
            bw_peak: 20.0,
            bw_avg: 10.0,
            msg_rate: 5.0,
            ..BwReport::default()
        },
        ..Side::default()
    };
    let mut ex = Perftest::new(cfg.clone(), Role::Client, client_sys);
    let client = run_exchange(&mut stream, &mut ex, &mut side).map(|()| side);
    drop(stream);
    let server = server.join().expect("server thread");
    (client, server)
}

#[test]
fn perftest_client_and_server_over_tcp() {
    let mut configs = Vec::new();
    for verb in [Verb::Write, Verb::Read, Verb::Send, Verb::Atomic] {
        for kind in [TestKind::Bw, TestKind::Lat] {
            configs.push(BenchConfig::new(verb, kind));
        }
        let mut b = BenchConfig::new(verb, TestKind::Bw);
        b.bidirectional = true;
        b.num_qps = 3;
        configs.push(b);
    }
    let mut all = BenchConfig::new(Verb::Write, TestKind::Bw);
    all.run_all = true;
    all.bidirectional = true;
    configs.push(all);
    let mut ud = BenchConfig::new(Verb::Send, TestKind::Bw);
    ud.connection = Connection::Ud;
    ud.run_all = true;
    configs.push(ud);

    for cfg in &configs {
        let name = cfg.tool_name();
        let (client, server) = run_pair(cfg, LocalSystem::default(), LocalSystem::default());
        let client = client.unwrap_or_else(|e| panic!("{name} client: {e}"));
        let server = server.unwrap_or_else(|e| panic!("{name} server: {e}"));
        assert_eq!(
            client.remote,
            server.keys(),
            "{name}: client got the server's KEYs"
        );
        assert_eq!(
            server.remote,
            client.keys(),
            "{name}: server got the client's KEYs"
        );
        assert_eq!(client.sleeps.len(), usize::from(cfg.pauses_after_connect()));
        assert!(!client.runs.is_empty(), "{name}: the client always runs");
        if cfg.duplex() {
            assert_eq!(client.runs, server.runs, "{name}");
            assert_eq!(
                client.reports.len(),
                client.runs.len(),
                "{name}: a REPORT per size"
            );
            let (mine, peer) = client.reports[0];
            assert_eq!(mine.map(|m| m.bw_avg), Some(10.0));
            assert_eq!(peer.bw_avg, 1.0, "{name}: the server's own report");
        } else if cfg.kind == TestKind::Bw && cfg.verb != Verb::Send {
            assert!(server.runs.is_empty(), "{name}: the server only waits");
            assert_eq!(server.reports.len(), 1);
            assert_eq!(
                server.reports[0].1.bw_avg, 10.0,
                "{name}: the client's report"
            );
            assert_eq!(server.reports[0].1.size, *client.runs.last().expect("ran"));
        }
    }
}

#[test]
fn selective_repeat_only_when_both_offer_it() {
    for connection in [Connection::Rc, Connection::Ud] {
        for (offer_c, offer_s) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut c = BenchConfig::new(Verb::Send, TestKind::Bw);
            c.connection = connection;
            let mut s = c.clone();
            c.offer_selective_repeat = offer_c;
            s.offer_selective_repeat = offer_s;
            let (client, server) =
                run_pair_with(&c, &s, LocalSystem::default(), LocalSystem::default());
            let (client, server) = (client.expect("client"), server.expect("server"));
            let want = offer_c && offer_s && connection == Connection::Rc;
            for (who, side) in [("client", &client), ("server", &server)] {
                let n = side.negotiated.as_ref().expect("negotiated");
                assert_eq!(
                    n.selective_repeat, want,
                    "{who}: {connection:?} offers {offer_c}/{offer_s}"
                );
                assert_eq!(n.peer_version.text, "6.06", "the offer hides after the NUL");
            }
        }
    }
}

#[test]
fn mtu_negotiation_over_tcp() {
    let cfg = BenchConfig::new(Verb::Send, TestKind::Lat);
    let small = LocalSystem {
        mtu: Mtu::Mtu512,
        page_size: 16384,
        cache_line: 128,
    };
    let (client, server) = run_pair(&cfg, LocalSystem::default(), small);
    let (client, server) = (client.expect("client"), server.expect("server"));
    for side in [&client, &server] {
        let n = side.negotiated.as_ref().expect("negotiated");
        assert_eq!(n.mtu, Mtu::Mtu512, "both use the smaller MTU");
        assert_eq!(
            (n.cycle_buffer, n.cache_line),
            (16384, 128),
            "both adopt the max"
        );
    }
}

#[test]
fn mismatched_bidirectional_option_goes_unnoticed_like_in_perftest() {
    // Client unidirectional, server `-b`: nobody compares the options (docs/perftest.md §3), and
    // here the message lengths happen to line up (the client's SYNC-END meets the
    // server's SYNC-PRE), so both exchanges complete: a silent desync, as with perftest.
    let listener = listen(Some(Ipv4Addr::LOCALHOST), 0).expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let server = thread::spawn(move || {
        let (mut stream, _) = accept_one(listener).expect("accept");
        let mut cfg = BenchConfig::new(Verb::Read, TestKind::Bw);
        cfg.bidirectional = true;
        let mut side = Side {
            qps: 1,
            base_qpn: 2,
            ..Side::default()
        };
        let mut ex = Perftest::new(cfg, Role::Server, LocalSystem::default());
        run_exchange(&mut stream, &mut ex, &mut side)
    });
    let mut stream = perftest::connect("127.0.0.1", port).expect("connect");
    let mut side = Side {
        qps: 1,
        base_qpn: 1,
        ..Side::default()
    };
    let mut ex = Perftest::new(
        BenchConfig::new(Verb::Read, TestKind::Bw),
        Role::Client,
        LocalSystem::default(),
    );
    let client = run_exchange(&mut stream, &mut ex, &mut side);
    drop(stream);
    let server = server.join().expect("joins");
    assert!(client.is_ok() && server.is_ok(), "{client:?} {server:?}");
    assert!(side.runs.len() == 1, "the client ran once");
}

#[test]
fn connect_to_nothing_says_what_perftest_says() {
    let listener = listen(Some(Ipv4Addr::LOCALHOST), 0).expect("listen");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let err = perftest::connect("127.0.0.1", port).expect_err("nothing listens");
    assert_eq!(
        err.to_string(),
        format!("Couldn't connect to 127.0.0.1:{port}\nUnable to open file descriptor for socket connection Unable to init the socket connection")
    );
}

#[test]
fn pingpong_over_tcp() {
    for variant in [Variant::Rc, Variant::Ud, Variant::Srq] {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        let q = if variant == Variant::Srq { 16 } else { 1 };
        let dest = |base: u32, i: usize| PpDest {
            lid: 0,
            qpn: base + i as u32,
            psn: 0xab0000 + i as u32,
            gid: gid_from_ipv4(Ipv4Addr::LOCALHOST),
        };
        let server_local: Vec<PpDest> = (0..q).map(|i| dest(0x40, i)).collect();
        let client_local: Vec<PpDest> = (0..q).map(|i| dest(0x80, i)).collect();
        let sl = server_local.clone();
        let server = thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            pingpong::server_exchange(&mut s, variant, &sl, |r| {
                assert_eq!(r.len(), sl.len());
                Ok(())
            })
        });
        let mut s = pingpong::connect("127.0.0.1", addr.port()).expect("connect");
        let got = pingpong::client_exchange(&mut s, variant, &client_local).expect("client");
        drop(s);
        let server_got = server.join().expect("joins").expect("server");
        assert_eq!(got, server_local, "{variant:?}");
        assert_eq!(server_got, client_local, "{variant:?}");
    }
}
