//! `uroce trace`: each command a context sends a uroce device — the verb with its handles
//! and key arguments, the result, on failure the errno with the control plane's reason, and
//! the time it took — one line each (docs/operations.md §2).
//!
//! * `uroce trace [-o FILE] -- CMD ARGS...`: run CMD with `UROCE_TRACE` set.
//! * `uroce trace [-p PID... | -d DEV] [--fast] [-o FILE]`: beside programs already running,
//!   attached through their attach sockets (`abi::attach`, docs/operations.md §4); `--fast`
//!   adds sampled fast-path events (doorbells, WQEs, CQEs).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::attach_client;

/// Arguments of `uroce trace`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Each line: `uroce-trace TIME pid=PID DEVICE ctx=N VERB ARGS = RESULT`, where RESULT is `ok` \
and the new handles/keys (pd=, mr= lkey= rkey=, cq=, qp= qpn=, ...), or the errno, its \
number and the control plane's reason with its rule, e.g.

  uroce-trace 1764633600.123456 pid=4242 uroce0 ctx=1 MODIFY_QP qp=1 mask=STATE state=RTS \
= EINVAL (errno 22): modify_qp: RESET -> RTS: ... [ILLEGAL_TRANSITION]

MODIFY_QP shows its attribute mask and each attribute the mask names (states, port, access, \
dgid, path MTU, dest QPN, PSNs, timers); CM commands (CM_LISTEN, CM_CONNECT, CM_ACCEPT, ...) \
show their IDs, peers and service IDs. A closed context shows as CLOSE_CONTEXT.

The same without this command: UROCE_TRACE=stderr|stdout|FILE CMD ARGS... (%p in FILE \
becomes the process ID). Exit status: the command's (128 + signal if a signal ended it).

Beside running programs (no `-- CMD`): attaches to every uroce process of this user with a \
device (-d DEV: with a device of that name; -p PID: those processes), and to such processes \
as they start, printing their lines on stdout (or FILE) until Ctrl-C/SIGTERM or the -p \
processes' exit. --fast adds `uroce-fast TIME pid=PID DEVICE` lines for doorbells, WQEs and \
CQEs (with status), at most --fast-rate a second per process (a SAMPLED line counts the rest). \
Each process queues at most 4096 lines for the tool and drops (and counts) beyond that.")]
pub struct Args {
    /// Write the trace to FILE (emptied first; every process of CMD appends whole lines; %p
    /// becomes each process's ID) instead of stderr.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub select: attach_client::Select,
    /// Beside a running program: add sampled fast-path events (doorbells, WQEs, CQEs).
    #[arg(long)]
    pub fast: bool,
    /// Fast-path events shown per second and process at most.
    #[arg(long, default_value_t = abi::attach::DEFAULT_FAST_RATE, value_parser = clap::value_parser!(u32).range(1..))]
    pub fast_rate: u32,
    /// The command to run, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.command.is_empty() {
        return attach_mode(&args);
    }
    if args.select.given() || args.fast {
        eprintln!(
            "uroce trace: -p, -d and --fast are for tracing beside a running program (without `-- CMD`)"
        );
        return Ok(ExitCode::from(2));
    }
    let dest: OsString = match &args.output {
        Some(p) => {
            crate::run_with::empty_unless_templated(p)?;
            p.clone().into_os_string()
        }
        None => "stderr".into(),
    };
    crate::run_with::run(&args.command, &[(nic::trace::ENV, dest)])
}

/// `uroce trace` beside running programs.
fn attach_mode(args: &Args) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    let mut out: Box<dyn Write> = match &args.output {
        Some(p) => {
            Box::new(std::fs::File::create(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?)
        }
        None => Box::new(std::io::stdout()),
    };
    let mut req = abi::attach::Request::new(abi::attach::Kind::Trace);
    req.fast = args.fast;
    req.fast_rate = args.fast_rate;
    let mut session = match attach_client::Session::new("trace", &args.select, req) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("uroce trace: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    loop {
        match session.next() {
            Ok(Some(attach_client::Got::Lines(text))) => {
                if out
                    .write_all(text.as_bytes())
                    .and_then(|_| out.flush())
                    .is_err()
                {
                    break;
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                eprintln!("uroce trace: {e}");
                return Ok(ExitCode::from(1));
            }
        }
    }
    eprintln!(
        "uroce trace: {} processes traced; {} lines lost by their trace queues",
        session.processes(),
        session.lost()
    );
    Ok(ExitCode::SUCCESS)
}
