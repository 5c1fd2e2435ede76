//! `uroce decode`: print the RoCEv2 packets of a pcap file.
//!
//! Text mode (default) prints one line per RoCEv2 packet on stdout, then a summary line on
//! stdout. `--json` prints JSON Lines on stdout — one object per RoCEv2 packet and nothing
//! else — and the summary on stderr. In both modes a garbled frame (damaged headers, or a
//! RoCEv2 packet that does not parse) is reported on stderr as
//! `uroce: frame N: garbled: REASON`, so stdout stays one packet per line.
//!
//! Exit status: 0 when the whole file was read (bad ICRCs and garbled frames are reported,
//! not failures); 1 when the file is damaged part-way (everything before the damage is
//! printed, then the reason); 2 when the file cannot be opened or is not a pcap file.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use capture::{Decoder, Outcome};

/// Arguments of `uroce decode`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Text mode prints one line per RoCEv2 packet, then a summary line. Garbled frames are \
reported on stderr as `uroce: frame N: garbled: REASON`.

Exit status: 0 the whole file was read (bad ICRCs and garbled frames are reported, not \
failures); 1 the file is damaged part-way (what came before is printed); 2 the file cannot \
be opened or is not a classic pcap file.")]
pub struct Args {
    /// Print one JSON object per RoCEv2 packet (JSON Lines); the summary goes to stderr.
    #[arg(long)]
    pub json: bool,
    /// Classic pcap file to decode (link type Ethernet, Linux cooked or raw IP).
    pub file: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let path = &args.file;
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut decoder = Decoder::new(BufReader::new(file))
        .with_context(|| format!("cannot read {}", path.display()))?;

    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match print_all(&mut decoder, &mut out, args.json) {
        Ok(damage) => {
            if let Some(e) = &damage {
                ignore_broken_pipe(out.flush())?;
                eprintln!("uroce: {}: {e}", path.display());
            }
            let summary = decoder.summary();
            if args.json {
                // Flush the packets first so the two streams interleave sensibly.
                ignore_broken_pipe(out.flush())?;
                eprintln!("{summary}");
            } else {
                ignore_broken_pipe(writeln!(out, "{summary}").and_then(|()| out.flush()))?;
            }
            Ok(if damage.is_some() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        // A closed pipe (`uroce decode f | head`) is the reader's choice, not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e).context("cannot write to stdout"),
    }
}

/// Prints every frame's outcome; returns the error that stopped reading part-way, if any.
fn print_all<R: io::Read, W: Write>(
    decoder: &mut Decoder<R>,
    out: &mut W,
    json: bool,
) -> io::Result<Option<capture::PcapError>> {
    for item in decoder.by_ref() {
        let decoded = match item {
            Ok(d) => d,
            Err(e) => return Ok(Some(e)),
        };
        match &decoded.outcome {
            Outcome::Packet(record) if json => writeln!(out, "{}", record.to_json())?,
            Outcome::Packet(record) => writeln!(out, "{record}")?,
            Outcome::NotRoce(_) => {}
            Outcome::Garbled(why) => {
                // Keep stderr in step with stdout when both go to a terminal.
                out.flush()?;
                eprintln!("uroce: frame {}: garbled: {why}", decoded.frame);
            }
        }
    }
    Ok(None)
}

fn ignore_broken_pipe(result: io::Result<()>) -> anyhow::Result<()> {
    match result {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e).context("cannot write to stdout"),
        _ => Ok(()),
    }
}
