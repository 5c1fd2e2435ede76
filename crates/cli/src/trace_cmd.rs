//! `uroce trace [-o FILE] -- CMD ARGS...`: run CMD with `UROCE_TRACE` set, so every uroce
//! device it starts prints each command a context sends it — the verb with its handles and
//! key arguments, the result, and on failure the errno with the control plane's reason —
//! one line each (docs/operations.md §2).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

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
becomes the process ID). Exit status: the command's (128 + signal if a signal ended it).")]
pub struct Args {
    /// Write the trace to FILE (emptied first; every process of CMD appends whole lines; %p
    /// becomes each process's ID) instead of stderr.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The command to run, after `--`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let dest: OsString = match &args.output {
        Some(p) => {
            crate::run_with::empty_unless_templated(p)?;
            p.clone().into_os_string()
        }
        None => "stderr".into(),
    };
    crate::run_with::run(&args.command, &[(nic::trace::ENV, dest)])
}
