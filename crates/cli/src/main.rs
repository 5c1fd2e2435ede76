//! `uroce`: the command line of the user-space RoCEv2 stack.
//!
//! Each subcommand lives in its own module with a clap `Args` struct and a
//! `run` function returning the process exit code.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod attach_client;
mod bench;
mod capture_cmd;
mod decode;
mod devinfo;
mod doctor;
mod pingpong;
mod run_with;
mod sim;
mod stat;
mod trace_cmd;

#[derive(Debug, Parser)]
#[command(
    name = "uroce",
    version,
    about = "RDMA over Converged Ethernet v2, in user space"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode the RoCEv2 packets of a pcap file, one line (or JSON object) per packet.
    Decode(decode::Args),
    /// Run a workload between two endpoints in the deterministic network simulator.
    Sim(sim::Args),
    /// Show the devices' attributes, like rdma-core's ibv_devinfo.
    Devinfo(devinfo::Args),
    /// Ping-pong over RC, UD or SRQ QPs, like rdma-core's ibv_{rc,ud,srq}_pingpong.
    Pingpong(pingpong::Args),
    /// perftest-compatible benchmarks (write_bw, read_lat, ...) and `bench compare`.
    Bench(bench::Args),
    /// Port and per-QP counters of the running uroce processes, like `rdma statistic`.
    Stat(stat::Args),
    /// Check this host against the RoCE deployment checklist: PASS/WARN/FAIL with fixes.
    Doctor(doctor::Args),
    /// Run a command with its uroce devices writing every RoCEv2 packet to a pcap file.
    Capture(capture_cmd::Args),
    /// Run a command printing each verbs command its contexts send (args, result, reason).
    Trace(trace_cmd::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(args) => decode::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Devinfo(args) => devinfo::run(args),
        Command::Pingpong(args) => pingpong::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Stat(args) => stat::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Capture(args) => capture_cmd::run(args),
        Command::Trace(args) => trace_cmd::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("uroce: {err:#}");
            ExitCode::from(2)
        }
    }
}
