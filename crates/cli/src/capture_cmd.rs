//! `uroce capture -o FILE [--snaplen N] -- CMD ARGS...`: run CMD with `UROCE_CAPTURE` set,
//! so every uroce device it starts (the embedded devices of `uroce` itself, of Rust programs
//! and of C programs on the drop-in libibverbs) records each RoCEv2 packet it sends and
//! receives — same-device loopback packets included, with synthesized headers and the ICRC
//! the wire would carry — as Ethernet frames in a classic pcap file (docs/operations.md §1).

use std::ffi::OsString;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;

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

Records are queued to a writer thread; when the queue is full a record is dropped, never \
waited for, and the count is reported on stderr when the process exits. Exit status: the \
command's (128 + signal if a signal ended it); after it, a summary line on stderr.")]
pub struct Args {
    /// The pcap file to write (%p: process ID, %d: device name).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Bytes of each frame to keep (the rest is cut; the original length is recorded).
    #[arg(long, default_value_t = nic::CAPTURE_DEFAULT_SNAPLEN, value_parser = clap::value_parser!(u32).range(1..=262144))]
    pub snaplen: u32,
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
    let pattern = args.output.to_string_lossy().into_owned();
    let templated = pattern.contains('%');
    crate::run_with::empty_unless_templated(&args.output)?;
    let code = crate::run_with::run(
        &args.command,
        &[
            (nic::CAPTURE_ENV, args.output.clone().into_os_string()),
            (nic::CAPTURE_SNAPLEN_ENV, args.snaplen.to_string().into()),
        ],
    )?;
    if !templated {
        summarize(&args.output);
    }
    Ok(code)
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
