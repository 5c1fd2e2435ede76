//! `uroce capture`: every RoCEv2 packet uroce devices send and receive — same-device loopback
//! packets included, with synthesized headers and the ICRC the wire would carry — as
//! Ethernet frames in a classic pcap file (docs/operations.md §1).
//!
//! * `uroce capture -o FILE [--snaplen N] -- CMD ARGS...`: run CMD with `UROCE_CAPTURE` set,
//!   so every uroce device it starts records its packets.
//! * `uroce capture [-d DEV | -p PID...] [-w FILE|-] [-c COUNT] [FILTER]`: beside programs
//!   already running, as `uroce stat` is — attach to their devices through their attach
//!   sockets (`abi::attach`, docs/operations.md §4), never opening a device of its own.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufReader, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::attach_client;

/// Arguments of `uroce capture`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
The command's uroce devices write every RoCEv2 packet they send and receive to FILE (classic \
pcap, Ethernet, nanosecond timestamps), including same-device loopback packets that never \
touch a socket: their Ethernet/IP/UDP headers are synthesized with the device's address and \
port 4791, and the ICRC is the one the wire would carry. Open it with \
`uroce decode FILE` or `tshark -r FILE` (UDP 4791 is dissected as RoCEv2).

Without %p, FILE is emptied first and every process of CMD appends whole batches of records \
to it (the header is written once, under a file lock); devices of one process share a writer, \
and a packet between two of them is recorded once, when sent. In FILE, %p becomes each \
process's ID and %d the device name (one file each; those are not emptied first).

The same without this command: UROCE_CAPTURE=FILE [UROCE_CAPTURE_SNAPLEN=N] CMD ARGS...

Beside running programs (no `-- CMD`): attaches to every uroce process of this user that has a device (-d DEV: a device of that name, e.g. a uroced device with all its client processes; -p PID: those processes), and to such processes as they start, until Ctrl-C/SIGTERM, -c COUNT packets, or the -p processes' exit. Without -w, one `uroce decode` line per packet on stdout; -w FILE writes a pcap (-w - to stdout: `uroce capture -w - | tshark -r -`). FILTER words: `host A`, `src A`, `dst A`, `qp N`, `op WORD` (opcode name contains WORD: send, write, read, ack, atomic, cnp), `cm` (QP 1), `badicrc`, joined by `and` (or nothing) and `or`, each negated by `not`. A packet between two processes of one uroced device is recorded once, by its sender. Each process queues at most 8192 records for the tool and drops (and counts) beyond that; the count is printed at the end.

Records are queued to a writer thread; when the queue is full a record is dropped, never \
waited for, and the count is reported on stderr when the process exits. Exit status: the \
command's (128 + signal if a signal ended it); after it, a summary line on stderr.")]
pub struct Args {
    /// Run CMD with its devices writing to FILE (%p: process ID, %d: device name).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Beside a running program: write the pcap to FILE (`-` for standard output, e.g.
    /// `| tshark -r -`); without it, one decoded line per packet on standard output.
    #[arg(short = 'w', value_name = "FILE", conflicts_with = "output")]
    pub write: Option<PathBuf>,
    #[command(flatten)]
    pub select: attach_client::Select,
    /// Stop after COUNT packets (that pass the filter).
    #[arg(short = 'c', long = "count", value_name = "COUNT")]
    pub count: Option<u64>,
    /// Decoded lines as JSON objects (as `uroce decode --json`).
    #[arg(long)]
    pub json: bool,
    /// Bytes of each frame to keep (the rest is cut; the original length is recorded).
    #[arg(long, default_value_t = nic::CAPTURE_DEFAULT_SNAPLEN, value_parser = clap::value_parser!(u32).range(1..=262144))]
    pub snaplen: u32,
    /// Beside a running program: which packets to keep, e.g. `qp 0x11`, `host 127.0.0.2
    /// and not ack`, `cm or op read` (see below).
    #[arg(value_name = "FILTER")]
    pub filter: Vec<String>,
    /// The command to run, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.command.is_empty() {
        if args.output.is_some() {
            eprintln!(
                "uroce capture: -o FILE captures a command given after `--`; to capture a \
                 program that is already running use -w FILE"
            );
            return Ok(ExitCode::from(2));
        }
        return attach_mode(&args);
    }
    let Some(output) = args.output.clone() else {
        eprintln!("uroce capture: running a command needs -o FILE");
        return Ok(ExitCode::from(2));
    };
    if args.write.is_some()
        || args.select.given()
        || args.count.is_some()
        || !args.filter.is_empty()
    {
        eprintln!(
            "uroce capture: -w, -d, -p, -c and filters are for capturing beside a running \
             program (without `-- CMD`)"
        );
        return Ok(ExitCode::from(2));
    }
    let pattern = output.to_string_lossy().into_owned();
    let templated = pattern.contains('%');
    crate::run_with::empty_unless_templated(&output)?;
    let code = crate::run_with::run(
        &args.command,
        &[
            (nic::CAPTURE_ENV, output.clone().into_os_string()),
            (nic::CAPTURE_SNAPLEN_ENV, args.snaplen.to_string().into()),
        ],
    )?;
    if !templated {
        summarize(&output);
    }
    Ok(code)
}

/// Where attach mode puts packets.
enum Sink {
    Pcap(Box<dyn Write>),
    Lines(Box<dyn Write>),
}

/// `uroce capture` beside running programs: attach, filter, write; until the count, a stop
/// signal, or (with `-p`) the processes' exit.
fn attach_mode(args: &Args) -> anyhow::Result<ExitCode> {
    let filter = match Filter::parse(&args.filter) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("uroce capture: filter: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut sink = match &args.write {
        Some(p) if p.as_os_str() == "-" => Sink::Pcap(Box::new(std::io::stdout())),
        Some(p) => Sink::Pcap(Box::new(
            File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => Sink::Lines(Box::new(std::io::stdout())),
    };
    if let Sink::Pcap(w) = &mut sink {
        w.write_all(&capture::pcap::file_header(
            capture::pcap::LinkType::ETHERNET,
            capture::pcap::TsResolution::Nano,
            args.snaplen,
        ))?;
        w.flush()?;
    }
    let mut req = abi::attach::Request::new(abi::attach::Kind::Capture);
    req.snaplen = args.snaplen;
    // A packet between two processes of one device is recorded by its sender; only a
    // capture of given processes wants what their peer rings bring in as well.
    req.ring_rx = !args.select.pid.is_empty();
    let mut session = match attach_client::Session::new("capture", &args.select, req) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("uroce capture: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut kept = 0u64;
    let mut seen = 0u64;
    while args.count.is_none_or(|c| kept < c) {
        let bytes = match session.next() {
            Ok(Some(attach_client::Got::Records(b))) => b,
            Ok(Some(_)) => continue,
            Ok(None) => break,
            Err(e) => {
                eprintln!("uroce capture: {e}");
                return Ok(ExitCode::from(1));
            }
        };
        let mut out = Vec::with_capacity(bytes.len());
        for (rec, frame) in capture::frame::stream_records(&bytes) {
            seen += 1;
            let decoded = capture::Decoded::from_frame(&frame);
            if !filter.matches(&decoded.outcome) {
                continue;
            }
            kept += 1;
            match &mut sink {
                Sink::Pcap(_) => out.extend_from_slice(rec),
                Sink::Lines(_) => {
                    if let capture::Outcome::Packet(mut r) = decoded.outcome {
                        r.frame = kept;
                        if args.json {
                            let _ = writeln!(out, "{}", r.to_json());
                        } else {
                            let _ = writeln!(out, "{r}");
                        }
                    } else {
                        let _ = writeln!(out, "{kept}  (not a RoCEv2 packet)");
                    }
                }
            }
            if args.count.is_some_and(|c| kept >= c) {
                break;
            }
        }
        let w = match &mut sink {
            Sink::Pcap(w) | Sink::Lines(w) => w,
        };
        if w.write_all(&out).and_then(|_| w.flush()).is_err() {
            // The reader (e.g. `| head`) is gone.
            break;
        }
    }
    eprintln!(
        "uroce capture: {kept} packets captured ({seen} seen) from {} processes; {} lost by the processes' capture queues",
        session.processes(),
        session.lost()
    );
    Ok(ExitCode::SUCCESS)
}

/// A capture filter: alternatives (`or`) of conjunctions (`and`, or nothing between) of
/// primitives, each optionally negated with `not`:
/// `host A`, `src A`, `dst A` (IP address), `qp N` (BTH destination QP, decimal or 0x..),
/// `op WORD` (the opcode's name contains WORD, e.g. `write`, `read`, `ack`, `send`, `cnp`),
/// `cm` (QP 1: CM MADs), `badicrc`. An empty filter keeps everything.
#[derive(Debug, Default)]
pub struct Filter {
    any_of: Vec<Vec<(bool, Prim)>>,
}

#[derive(Debug)]
enum Prim {
    Host(IpAddr),
    Src(IpAddr),
    Dst(IpAddr),
    Qp(u32),
    Op(String),
    Cm,
    BadIcrc,
}

impl Filter {
    pub fn parse(words: &[String]) -> Result<Filter, String> {
        let words: Vec<&str> = words.iter().flat_map(|w| w.split_whitespace()).collect();
        let mut f = Filter::default();
        let mut conj = Vec::new();
        let mut i = 0;
        let mut negate = false;
        let mut want_prim = true;
        while i < words.len() {
            let w = words[i];
            match w {
                "or" if !want_prim => {
                    f.any_of.push(std::mem::take(&mut conj));
                    want_prim = true;
                    i += 1;
                    continue;
                }
                "and" if !want_prim => {
                    want_prim = true;
                    i += 1;
                    continue;
                }
                "not" | "!" => {
                    negate = !negate;
                    i += 1;
                    continue;
                }
                _ => {}
            }
            let mut arg = || {
                i += 1;
                words
                    .get(i)
                    .copied()
                    .ok_or_else(|| format!("`{w}` needs a value"))
            };
            let ip = |v: &str| {
                v.parse::<IpAddr>()
                    .map_err(|_| format!("{v:?} is not an IP address"))
            };
            let p = match w {
                "host" => Prim::Host(ip(arg()?)?),
                "src" => Prim::Src(ip(arg()?)?),
                "dst" => Prim::Dst(ip(arg()?)?),
                "qp" => {
                    let v = arg()?;
                    let n = match v.strip_prefix("0x") {
                        Some(h) => u32::from_str_radix(h, 16),
                        None => v.parse(),
                    }
                    .map_err(|_| format!("{v:?} is not a QP number"))?;
                    Prim::Qp(n)
                }
                "op" => Prim::Op(arg()?.to_ascii_uppercase()),
                "cm" => Prim::Cm,
                "badicrc" => Prim::BadIcrc,
                other => return Err(format!("unknown word {other:?}")),
            };
            conj.push((negate, p));
            negate = false;
            want_prim = false;
            i += 1;
        }
        if want_prim && !(conj.is_empty() && f.any_of.is_empty()) {
            return Err("ends with an operator".into());
        }
        if !conj.is_empty() {
            f.any_of.push(conj);
        }
        Ok(f)
    }

    pub fn matches(&self, o: &capture::Outcome) -> bool {
        if self.any_of.is_empty() {
            return true;
        }
        let capture::Outcome::Packet(r) = o else {
            return false;
        };
        self.any_of.iter().any(|c| {
            c.iter().all(|(neg, p)| {
                let hit = match p {
                    Prim::Host(a) => r.src == *a || r.dst == *a,
                    Prim::Src(a) => r.src == *a,
                    Prim::Dst(a) => r.dst == *a,
                    Prim::Qp(n) => r.dest_qp == *n,
                    Prim::Op(w) => r.opcode_name.contains(w.as_str()),
                    Prim::Cm => r.dest_qp == 1,
                    Prim::BadIcrc => r.icrc == capture::IcrcStatus::Bad,
                };
                hit != *neg
            })
        })
    }
}

/// One line on stderr: what the file holds.
fn summarize(path: &std::path::Path) {
    let Ok(f) = File::open(path) else {
        return;
    };
    if f.metadata().map(|m| m.len()).unwrap_or(0) == 0 {
        eprintln!(
            "uroce capture: {}: empty (the command started no uroce device)",
            path.display()
        );
        return;
    }
    match capture::Decoder::new(BufReader::new(f)) {
        Ok(mut d) => {
            for _ in d.by_ref() {}
            eprintln!("uroce capture: {}: {}", path.display(), d.summary());
        }
        Err(e) => eprintln!("uroce capture: {}: {e}", path.display()),
    }
}
