//! perftest's console output, compared with the lab's console files: header blocks,
//! banner, bandwidth and latency tables (also `--report_gbits`, `-a`, mixed units).

mod support;

use oob::console::{
    bw_line, bw_table_header, header_block, lat_line, lat_table_header, AtomicType, BwUnits,
    HeaderInfo, LatReport, PcieRelaxed, INLINE_DISABLED_STDERR, POST_LIST_NOTICE, RESULT_LINE,
    WAITING_BANNER,
};
use oob::perftest::{BwReport, Connection, Mtu, Role, TestKind, Verb};
use support::console;

/// The header block as printed: from the RESULT_LINE before the title line to the next.
fn header_of(text: &str) -> &str {
    let title = text.find("\n                    ").expect("title line") + 1;
    let start = title - RESULT_LINE.len();
    let end = title + text[title..].find(RESULT_LINE).expect("closing line") + RESULT_LINE.len();
    &text[start..end]
}

fn h(verb: Verb, kind: TestKind, role: Role, f: impl FnOnce(&mut HeaderInfo)) -> HeaderInfo {
    let mut info = HeaderInfo::lab_defaults(verb, kind, role);
    f(&mut info);
    info
}

#[test]
fn header_blocks_match_every_console_file() {
    use Role::{Client, Server};
    use TestKind::{Bw, Lat};
    use Verb::{Atomic, Read, Send, Write};
    let cases: Vec<(&str, HeaderInfo)> = vec![
        ("pt_write_bw.pcap.client.txt", h(Write, Bw, Client, |_| {})),
        ("pt_write_bw.pcap.server.txt", h(Write, Bw, Server, |_| {})),
        (
            "pt_write_bw_gbits.pcap.client.txt",
            h(Write, Bw, Client, |_| {}),
        ),
        (
            "pt_write_bw_no_x.pcap.server.txt",
            h(Write, Bw, Server, |_| {}),
        ),
        (
            "console_mixed_units.client.txt",
            h(Write, Bw, Client, |_| {}),
        ),
        (
            "console_mixed_units.server.txt",
            h(Write, Bw, Server, |_| {}),
        ),
        (
            "fake_client_write_bw_full.pcap.server.txt",
            h(Write, Bw, Server, |_| {}),
        ),
        (
            "neg_short_keymsg.pcap.server.txt",
            h(Write, Bw, Server, |_| {}),
        ),
        (
            "neg_gid_type_mismatch.pcap.server.txt",
            h(Write, Bw, Server, |_| {}),
        ),
        (
            "mtu_512_from_peer.pcap.server.txt",
            h(Write, Bw, Server, |i| i.mtu = Mtu::Mtu512),
        ),
        (
            "pt_write_bw_bidir.pcap.client.txt",
            h(Write, Bw, Client, |i| i.bidirectional = true),
        ),
        (
            "pt_write_bw_bidir.pcap.server.txt",
            h(Write, Bw, Server, |i| i.bidirectional = true),
        ),
        (
            "pt_write_bw_q2.pcap.client.txt",
            h(Write, Bw, Client, |i| i.num_qps = 2),
        ),
        (
            "pt_write_bw_q2.pcap.server.txt",
            h(Write, Bw, Server, |i| i.num_qps = 2),
        ),
        (
            "pt_write_bw_postlist.pcap.client.txt",
            h(Write, Bw, Client, |i| {
                i.post_list = 5;
                i.cq_mod = 5;
            }),
        ),
        (
            "pt_write_bw_postlist.pcap.server.txt",
            h(Write, Bw, Server, |i| {
                i.post_list = 5;
                i.cq_mod = 5;
            }),
        ),
        (
            "pt_write_bw_all.pcap.client.txt",
            h(Write, Bw, Client, |i| i.cq_mod = 5),
        ),
        (
            "pt_write_bw_all.pcap.server.txt",
            h(Write, Bw, Server, |i| i.cq_mod = 5),
        ),
        (
            "pt_write_lat.pcap.client.txt",
            h(Write, Lat, Client, |i| i.pcie_relaxed = PcieRelaxed::Off),
        ),
        (
            "pt_write_lat.pcap.server.txt",
            h(Write, Lat, Server, |i| i.pcie_relaxed = PcieRelaxed::Off),
        ),
        ("pt_read_bw.pcap.client.txt", h(Read, Bw, Client, |_| {})),
        ("pt_read_bw.pcap.server.txt", h(Read, Bw, Server, |_| {})),
        (
            "pt_read_bw_bidir.pcap.server.txt",
            h(Read, Bw, Server, |i| i.bidirectional = true),
        ),
        ("pt_read_lat.pcap.client.txt", h(Read, Lat, Client, |_| {})),
        ("pt_read_lat.pcap.server.txt", h(Read, Lat, Server, |_| {})),
        ("pt_send_bw.pcap.client.txt", h(Send, Bw, Client, |_| {})),
        ("pt_send_bw.pcap.server.txt", h(Send, Bw, Server, |_| {})),
        (
            "pt_send_bw_ud.pcap.server.txt",
            h(Send, Bw, Server, |i| {
                i.connection = Connection::Ud;
                i.cq_mod = 5;
            }),
        ),
        (
            "pt_send_bw_events.pcap.client.txt",
            h(Send, Bw, Client, |i| {
                i.use_event = true;
                i.cq_mod = 5;
            }),
        ),
        (
            "pt_send_bw_events.pcap.server.txt",
            h(Send, Bw, Server, |i| {
                i.use_event = true;
                i.cq_mod = 5;
            }),
        ),
        (
            "pt_send_bw_bidir.pcap.client.txt",
            h(Send, Bw, Client, |i| i.bidirectional = true),
        ),
        (
            "pt_send_bw_all_ud.pcap.server.txt",
            h(Send, Bw, Server, |i| {
                i.connection = Connection::Ud;
                i.cq_mod = 5;
                i.rx_depth = 5;
            }),
        ),
        ("pt_send_lat.pcap.client.txt", h(Send, Lat, Client, |_| {})),
        ("pt_send_lat.pcap.server.txt", h(Send, Lat, Server, |_| {})),
        (
            "pt_atomic_bw.pcap.client.txt",
            h(Atomic, Bw, Client, |i| {
                i.cq_mod = 5;
                i.atomic_type = AtomicType::FetchAndAdd;
            }),
        ),
        (
            "pt_atomic_bw.pcap.server.txt",
            h(Atomic, Bw, Server, |i| i.cq_mod = 5),
        ),
    ];
    for (file, info) in &cases {
        let text = console(file);
        assert_eq!(header_block(info), header_of(&text), "{file}");
    }
    // Built from a test configuration.
    let mut cfg = oob::perftest::BenchConfig::new(Write, Bw);
    cfg.num_qps = 2;
    let info = HeaderInfo::for_test(&cfg, Server, "rxe0", Mtu::Mtu1024);
    assert_eq!(
        header_block(&info),
        header_of(&console("pt_write_bw_q2.pcap.server.txt"))
    );
    // A CMP_AND_SWAP title and a latency title, for the other branches.
    let cas = header_block(&h(Atomic, Bw, Client, |i| {
        i.atomic_type = AtomicType::CmpAndSwap
    }));
    assert!(cas.contains("\n                    Atomic CMP_AND_SWAP BW Test\n"));
}

#[test]
fn banner_and_notices() {
    let server = console("pt_write_bw.pcap.server.txt");
    assert!(server.starts_with(WAITING_BANNER));
    let post = console("pt_write_bw_postlist.pcap.server.txt");
    assert!(post.starts_with(&format!("{POST_LIST_NOTICE}{WAITING_BANNER}")));
    // stderr first, then stdout's RESULT_LINE, then the banner.
    let read = console("pt_read_bw.pcap.server.txt");
    assert!(read.starts_with(&format!(
        "{INLINE_DISABLED_STDERR}{RESULT_LINE}{WAITING_BANNER}"
    )));
}

/// Parses a printed bandwidth line back into numbers (to re-print them).
fn parse_bw(line: &str) -> BwReport {
    let f: Vec<&str> = line.split_whitespace().collect();
    BwReport {
        size: f[0].parse().expect("size"),
        iters: f[1].parse().expect("iters"),
        bw_peak: f[2].parse().expect("peak"),
        bw_avg: f[3].parse().expect("avg"),
        msg_rate: f[4].parse().expect("rate"),
        ..BwReport::default()
    }
}

/// Every result line of a console file, reprinted from its own numbers.
fn check_bw_table(file: &str, units: BwUnits, min_lines: usize) {
    let text = console(file);
    let header = bw_table_header(units, false);
    let start = text.find(&header).expect("table header") + header.len();
    let body = &text[start..text.len() - RESULT_LINE.len()];
    let mut count = 0;
    for line in body.lines() {
        assert_eq!(bw_line(&parse_bw(line), None, units), line, "{file}");
        count += 1;
    }
    assert!(count >= min_lines, "{file}: {count} lines");
    assert!(text.ends_with(RESULT_LINE));
}

#[test]
fn bandwidth_tables() {
    // Multi-line `-a` output in Gb/s: six decimals below 0.1, two from 0.1 on.
    check_bw_table("pt_write_bw_all.pcap.client.txt", BwUnits::Gbps, 23);
    check_bw_table("pt_write_bw_all.pcap.server.txt", BwUnits::Gbps, 1);
    check_bw_table("pt_send_bw_all_ud.pcap.client.txt", BwUnits::MiBps, 10);
    check_bw_table("pt_send_bw_all_ud.pcap.server.txt", BwUnits::MiBps, 10);
    check_bw_table("pt_write_bw_gbits.pcap.client.txt", BwUnits::Gbps, 1);
    check_bw_table("pt_send_bw.pcap.server.txt", BwUnits::MiBps, 1);
    check_bw_table("pt_atomic_bw.pcap.client.txt", BwUnits::MiBps, 1);

    // The switch happens on the own average: 0.099999 stays six-decimal, 0.1 does not.
    let r = |avg: f64| BwReport {
        size: 65536,
        iters: 5,
        bw_peak: avg,
        bw_avg: avg,
        msg_rate: 0.000143,
        ..BwReport::default()
    };
    assert_eq!(
        bw_line(&r(0.099999), None, BwUnits::Gbps),
        " 65536      5           0.099999            0.099999            0.000143"
    );
    assert_eq!(
        bw_line(&r(0.1), None, BwUnits::Gbps),
        " 65536      5                0.10               0.10   \t\t   0.000143"
    );
    // With -b the own average decides, the printed figures are sums.
    assert_eq!(
        bw_line(&r(0.06), Some(&r(0.06)), BwUnits::Gbps),
        " 65536      5           0.120000            0.120000            0.000286"
    );
}

#[test]
fn mixed_units_server_labels_client_gbits_as_mb() {
    let client = console("console_mixed_units.client.txt");
    let server = console("console_mixed_units.server.txt");
    let report = BwReport {
        size: 65536,
        iters: 5,
        bw_peak: 0.1812,
        bw_avg: 0.1809,
        msg_rate: 0.000347,
        ..BwReport::default()
    };
    let cline = bw_line(&report, None, BwUnits::Gbps);
    let sline = bw_line(&report, None, BwUnits::MiBps);
    assert_eq!(cline, sline, "same figures, only the label differs");
    assert!(client.contains(&format!(
        "{}{cline}\n",
        bw_table_header(BwUnits::Gbps, false)
    )));
    assert!(server.contains(&format!(
        "{}{sline}\n",
        bw_table_header(BwUnits::MiBps, false)
    )));
}

#[test]
fn latency_tables() {
    for file in [
        "pt_write_lat.pcap.client.txt",
        "pt_write_lat.pcap.server.txt",
        "pt_read_lat.pcap.client.txt",
        "pt_send_lat.pcap.client.txt",
        "pt_send_lat.pcap.server.txt",
    ] {
        let text = console(file);
        let header = lat_table_header();
        let start = text.find(&header).expect("latency header") + header.len();
        let line = text[start..].lines().next().expect("result line");
        let f: Vec<f64> = line
            .split_whitespace()
            .map(|x| x.parse().expect("number"))
            .collect();
        let r = LatReport {
            size: f[0] as u64,
            iters: f[1] as u64,
            t_min: f[2],
            t_max: f[3],
            t_typical: f[4],
            t_avg: f[5],
            t_stdev: f[6],
            p99: f[7],
            p999: f[8],
        };
        assert_eq!(lat_line(&r), line, "{file}");
        assert!(text[start..].starts_with(&format!("{line}\n{RESULT_LINE}")));
    }
    // read_lat's server prints no result, only the closing line after its addresses.
    let server = console("pt_read_lat.pcap.server.txt");
    assert!(!server.contains(&lat_table_header()));
    assert!(server.ends_with(&format!("10:77:00:12\n{RESULT_LINE}")));
}
