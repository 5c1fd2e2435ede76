//! Counters as Prometheus metrics: the text exposition format (version 0.0.4) of the
//! snapshots [`crate::stats`] collects, and a small HTTP endpoint serving it.
//!
//! # Names
//!
//! Every counter keeps its Linux name (rxe `hw_counters`, IB PMA port counters, the
//! engine's own) under the prefix `uroce_` and the suffix `_total`, as Prometheus and
//! OpenMetrics name counters:
//!
//! * port counters: `uroce_<name>_total{device, port, pid, process}` — e.g.
//!   `uroce_sent_pkts_total`, `uroce_rcvd_icrc_err_total`, `uroce_cq_overflow_total`;
//! * per-QP counters: `uroce_qp_<name>_total{device, port, pid, process, qp}` — a family of
//!   its own, so summing a port family never counts a packet twice;
//! * per-CQ counters: `uroce_cq_<name>_total{device, port, pid, process, cq}` —
//!   `uroce_cq_lost_cqes_total`, the completions a full CQ lost (the port's
//!   `uroce_cq_overflow_total` is their sum over every CQ the device had);
//! * live objects: the gauge `uroce_objects{device, port, pid, process, kind}` (`kind` =
//!   contexts, pds, mrs, cqs, qps, srqs, ahs, comp_channels).
//!
//! `process` is the program name (`comm`). Label values are escaped (`\\`, `\"`, `\n`);
//! counter names from a snapshot are reduced to `[a-zA-Z0-9_]`.
//!
//! # Endpoint
//!
//! [`serve`] answers `GET /metrics` (and `GET /`) on a TCP listener with the exposition
//! built at that moment; anything else gets 404 or 405. One request per connection, read
//! with a deadline and a size limit, so a slow or hostile client costs a few seconds and
//! a few kilobytes at most.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use crate::stats::Snapshot;

/// The `Content-Type` of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Prefix of every metric name.
pub const PREFIX: &str = "uroce_";

/// What a port counter counts, for its `# HELP` line (names not listed get a generic one).
fn port_help(name: &str) -> &'static str {
    match name {
        "sent_pkts" => "Packets transmitted by the device's QPs (rxe hw_counters sent_pkts).",
        "rcvd_pkts" => "Packets received and accepted by the device's QPs (rxe rcvd_pkts).",
        "duplicate_request" => "Duplicate requests received by responders (rxe).",
        "out_of_seq_request" => "Requests ahead of the expected PSN: sequence errors seen by responders (rxe).",
        "rcvd_rnr_err" => "RNR NAKs received by requesters (rxe).",
        "send_rnr_err" => "RNR NAKs sent by responders (rxe).",
        "rcvd_seq_err" => "PSN sequence error NAKs received by requesters (rxe).",
        "retry_exceeded_err" => "Work requests failed with the transport retry count exceeded (rxe).",
        "retry_rnr_exceeded_err" => "Work requests failed with the RNR retry count exceeded (rxe).",
        "completer_retry_err" => "Retries started by a NAK or implied NAK (rxe).",
        "retransmissions" => "Packets sent again.",
        "local_ack_timeouts" => "Local ACK timeouts that fired with work outstanding.",
        "rcvd_icrc_err" => "Received packets dropped because their ICRC did not verify.",
        "port_rcv_errors" => "Received packets dropped as malformed, truncated or with a bad ICRC (IB PMA PortRcvErrors).",
        "port_xmit_packets" => "Packets sent (IB PMA PortXmitPkts).",
        "port_rcv_packets" => "Packets received (IB PMA PortRcvPkts).",
        "port_xmit_data" => "Bytes sent in 4-byte words (IB PMA PortXmitData).",
        "port_rcv_data" => "Bytes received in 4-byte words (IB PMA PortRcvData).",
        "cq_overflow" => "Completions lost because a CQ was full (the QP went to ERR).",
        "rcvd_cnp" => "Congestion notification packets received.",
        "np_ecn_marked_roce_packets" => "Received RoCEv2 packets whose IP ECN field was CE (mlx5 name).",
        "np_cnp_sent" => "CNPs sent in answer to CE-marked packets, at most one per QP per np_min_time_between_cnps (mlx5 name).",
        "rp_cnp_handled" => "CNPs that drove a DCQCN rate decrease at this sender (mlx5 name).",
        "rp_cnp_ignored" => "CNPs ignored: congestion control off, a UD QP, or a QP not sending (mlx5 name).",
        _ => "uroce device counter (Linux rxe / IB PMA name).",
    }
}

/// What a per-CQ counter counts.
fn cq_help(name: &str) -> &'static str {
    match name {
        "lost_cqes" => {
            "Completions lost because this CQ was full (its QP went to ERR). Per CQ; the port's cq_overflow is their sum."
        }
        _ => "uroce CQ counter. Per CQ.",
    }
}

/// A metric name part reduced to `[a-zA-Z0-9_]` (never empty).
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "_".to_string()
    } else {
        s
    }
}

/// A label value escaped for the text format.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Metric families in first-seen order, each with its samples.
#[derive(Default)]
struct Families {
    order: Vec<(String, &'static str, String)>,
    index: HashMap<String, usize>,
    samples: Vec<Vec<String>>,
}

impl Families {
    fn add(&mut self, name: String, kind: &'static str, help: String, sample: String) {
        let i = match self.index.get(&name) {
            Some(&i) => i,
            None => {
                self.order.push((name.clone(), kind, help));
                self.samples.push(Vec::new());
                self.index.insert(name, self.order.len() - 1);
                self.order.len() - 1
            }
        };
        if let Some(s) = self.samples.get_mut(i) {
            s.push(sample);
        }
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for ((name, kind, help), samples) in self.order.iter().zip(&self.samples) {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for s in samples {
                out.push_str(s);
                out.push('\n');
            }
        }
        out
    }
}

/// The text exposition of `processes`' port counters, per-QP counters and object counts.
pub fn exposition(processes: &[Snapshot]) -> String {
    let mut f = Families::default();
    for p in processes {
        let process = escape_label(&p.program);
        for d in &p.devices {
            let base = format!(
                "device=\"{}\",port=\"{}\",pid=\"{}\",process=\"{process}\"",
                escape_label(&d.name),
                d.port,
                p.pid
            );
            for (n, v) in d.counters.iter() {
                let name = format!("{PREFIX}{}_total", sanitize(n));
                let help = format!("{} Per port.", port_help(n));
                f.add(
                    name.clone(),
                    "counter",
                    help,
                    format!("{name}{{{base}}} {v}"),
                );
            }
            let o = &d.objects;
            for (kind, v) in [
                ("contexts", o.contexts),
                ("pds", o.pds),
                ("mrs", o.mrs),
                ("cqs", o.cqs),
                ("qps", o.qps),
                ("srqs", o.srqs),
                ("ahs", o.ahs),
                ("comp_channels", o.comp_channels),
            ] {
                let name = format!("{PREFIX}objects");
                f.add(
                    name.clone(),
                    "gauge",
                    "Live verbs objects on the device, by kind.".to_string(),
                    format!("{name}{{{base},kind=\"{kind}\"}} {v}"),
                );
            }
            for c in &d.cqs {
                for (n, v) in c.counters.iter() {
                    let name = format!("{PREFIX}cq_{}_total", sanitize(n));
                    f.add(
                        name.clone(),
                        "counter",
                        cq_help(n).to_string(),
                        format!("{name}{{{base},cq=\"{}\"}} {v}", c.cq),
                    );
                }
            }
            for q in &d.qps {
                for (n, v) in q.counters.iter() {
                    let name = format!("{PREFIX}qp_{}_total", sanitize(n));
                    let help = format!("{} Per QP.", port_help(n));
                    f.add(
                        name.clone(),
                        "counter",
                        help,
                        format!("{name}{{{base},qp=\"{}\"}} {v}", q.qpn),
                    );
                }
            }
        }
    }
    f.render()
}

/// The text exposition of what `uroced` says of its devices (docs/daemon.md §5, `STATS`):
/// `(device, [(counter, value)])`. `clients` and `listens` are gauges
/// (`uroce_daemon_clients{device}`), every other counter `uroce_daemon_<name>_total`.
pub fn daemon_exposition(devices: &[(String, Vec<(String, u64)>)]) -> String {
    let mut f = Families::default();
    for (dev, kv) in devices {
        let label = format!("device=\"{}\"", escape_label(dev));
        for (k, v) in kv {
            let k = sanitize(k);
            let (name, kind, help) = match k.as_str() {
                "clients" => (
                    format!("{PREFIX}daemon_clients"),
                    "gauge",
                    "Processes attached to the daemon's device.".to_string(),
                ),
                "listens" => (
                    format!("{PREFIX}daemon_listens"),
                    "gauge",
                    "CM service IDs claimed on the daemon's device.".to_string(),
                ),
                _ => (
                    format!("{PREFIX}daemon_{k}_total"),
                    "counter",
                    format!("uroced's {k} counter of the device (docs/daemon.md)."),
                ),
            };
            f.add(name.clone(), kind, help, format!("{name}{{{label}}} {v}"));
        }
    }
    f.render()
}

/// Longest request head read from a scraper.
const REQUEST_MAX: usize = 8 << 10;

/// How long a scraper may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Serve `GET /metrics` on `listener` until accepting fails, one connection at a time, with
/// the exposition `render` builds for each request.
pub fn serve(listener: &TcpListener, render: impl Fn() -> String) -> io::Result<()> {
    loop {
        let (stream, _) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
            Err(e) => return Err(e),
        };
        // A client that misbehaves costs its own connection only.
        let _ = answer(stream, &render);
    }
}

/// Read one request head and answer it.
fn answer(mut s: TcpStream, render: &impl Fn() -> String) -> io::Result<()> {
    s.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    s.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(buf.get(..n).unwrap_or(&[]));
        if head.len() > REQUEST_MAX {
            return respond(
                &mut s,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
            );
        }
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics" | "/") => {
            let body = render();
            let body = if method == "HEAD" {
                String::new()
            } else {
                body
            };
            respond(&mut s, "200 OK", CONTENT_TYPE, &body)
        }
        (_, "/metrics" | "/") => respond(
            &mut s,
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics\n",
        ),
        _ => respond(&mut s, "404 Not Found", "text/plain", "GET /metrics\n"),
    }
}

fn respond(s: &mut TcpStream, status: &str, ctype: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    s.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{CounterSet, CqSnapshot, DeviceSnapshot, ObjectCounts, QpSnapshot};

    fn snap() -> Snapshot {
        let c = CounterSet::from_pairs([("sent_pkts", 5), ("rcvd_icrc_err", 1)]);
        Snapshot {
            version: 1,
            pid: 42,
            program: "we\"ird\\name\n".into(),
            cmdline: vec![],
            time_ms: 0,
            devices: vec![DeviceSnapshot {
                name: "uroce0".into(),
                addr: "127.0.0.1".parse().unwrap(),
                port: 1,
                counters: c.clone(),
                objects: ObjectCounts {
                    qps: 2,
                    ..ObjectCounts::default()
                },
                qps: vec![QpSnapshot {
                    qpn: 17,
                    counters: CounterSet::from_pairs([("sent_pkts", 3), ("bad-name", 1)]),
                    selective_repeat: false,
                }],
                cqs: vec![CqSnapshot {
                    cq: 3,
                    counters: CounterSet::from_pairs([("lost_cqes", 4)]),
                }],
            }],
            exited: false,
        }
    }

    #[test]
    fn families_are_grouped_typed_and_escaped() {
        let two = [snap(), Snapshot { pid: 43, ..snap() }];
        let t = exposition(&two);
        let lbl = r#"device="uroce0",port="1",pid="42",process="we\"ird\\name\n""#;
        assert!(
            t.contains(&format!("uroce_sent_pkts_total{{{lbl}}} 5\n")),
            "{t}"
        );
        assert!(t.contains(&format!("uroce_qp_sent_pkts_total{{{lbl},qp=\"17\"}} 3\n")));
        assert!(t.contains(&format!("uroce_objects{{{lbl},kind=\"qps\"}} 2\n")));
        assert!(t.contains(&format!("uroce_cq_lost_cqes_total{{{lbl},cq=\"3\"}} 4\n")));
        assert!(t.contains("# TYPE uroce_qp_bad_name_total counter\n"));
        assert!(t.contains("# TYPE uroce_objects gauge\n"));
        // Each family once, its samples together right after its TYPE line.
        for fam in ["uroce_sent_pkts_total", "uroce_rcvd_icrc_err_total"] {
            assert_eq!(t.matches(&format!("# TYPE {fam} counter\n")).count(), 1);
            let lines: Vec<&str> = t.lines().collect();
            let at = lines
                .iter()
                .position(|l| *l == format!("# TYPE {fam} counter"))
                .unwrap();
            assert!(lines[at + 1].starts_with(&format!("{fam}{{")));
            assert!(lines[at + 2].starts_with(&format!("{fam}{{")));
            assert!(lines[at + 2].contains("pid=\"43\""));
        }
        assert_eq!(exposition(&[]), "");
    }

    #[test]
    fn endpoint_answers_get_metrics_only() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || serve(&l, || "uroce_x_total 1\n".to_string()));
        let ask = |req: &str| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(req.as_bytes()).unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let r = ask("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.0 200 OK\r\n"), "{r}");
        assert!(
            r.contains(CONTENT_TYPE) && r.ends_with("\r\n\r\nuroce_x_total 1\n"),
            "{r}"
        );
        assert!(ask("GET /nope HTTP/1.0\r\n\r\n").starts_with("HTTP/1.0 404"));
        assert!(ask("POST /metrics HTTP/1.0\r\n\r\n").starts_with("HTTP/1.0 405"));
    }
}
