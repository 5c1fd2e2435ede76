//! The tool side of the attach protocol (`abi::attach`, docs/operations.md §4), shared by
//! `uroce capture` and `uroce trace` when they run beside a program instead of starting it:
//! find the uroce processes (`uroce stat`'s directories), connect to each one's attach
//! socket, and turn what arrives into [`Event`]s on one channel.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use abi::attach::{self, Answer, Request};

/// Which running processes a tool attaches to (shared by `uroce capture` and `uroce trace`).
#[derive(Debug, clap::Args)]
pub struct Select {
    /// Beside a running program: attach to this process (repeatable); ends when they exit.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: Vec<u32>,
    /// Beside a running program: attach to every process with a device of this name (a
    /// uroced device: every client process), including processes that start later.
    #[arg(short = 'd', long = "device", value_name = "DEV")]
    pub device: Option<String>,
}

impl Select {
    /// Whether any selection was given.
    pub fn given(&self) -> bool {
        !self.pid.is_empty() || self.device.is_some()
    }
}

/// A process to attach to.
#[derive(Clone, Debug)]
pub struct Target {
    pub pid: u32,
    pub program: String,
    pub path: PathBuf,
}

/// What the attachments report.
#[derive(Debug)]
pub enum Event {
    /// Attached to these devices of the process.
    Attached {
        pid: u32,
        program: String,
        devices: Vec<String>,
    },
    /// The process refused (no such device, bad request) or could not be reached.
    Refused { pid: u32, why: String },
    /// pcap records (no file header).
    Records { bytes: Vec<u8> },
    /// Text lines.
    Lines { text: String },
    /// The process's total of records/lines its queue dropped for this attachment.
    Dropped { pid: u32, total: u64 },
    /// The attachment ended (the process exited, or the stream broke).
    Closed { pid: u32, why: Option<String> },
}

/// The uroce processes (of this user) to attach to: `pids` if given, else those with a
/// device named `device` (every process with a device if `None`). `skip` are already
/// attached.
pub fn find_targets(pids: &[u32], device: Option<&str>, skip: &[u32]) -> Vec<Target> {
    let me = std::process::id();
    let mut out = Vec::new();
    for dir in uroce::stats::search_dirs() {
        // Only processes not yet attached are asked for their snapshot (their devices).
        let eps = uroce::stats::endpoints(&dir).unwrap_or_default();
        for ep in eps.into_iter().filter(|e| {
            e.pid != me && !skip.contains(&e.pid) && (pids.is_empty() || pids.contains(&e.pid))
        }) {
            let uroce::stats::Probe::Live(s) = uroce::stats::probe(&ep, Duration::from_millis(500))
            else {
                continue;
            };
            let has = match device {
                Some(d) => s.devices.iter().any(|x| x.name == d),
                None => !s.devices.is_empty(),
            };
            let path = ep.path.with_extension("attach");
            if has && path.exists() && !out.iter().any(|t: &Target| t.pid == s.pid) {
                out.push(Target {
                    pid: s.pid,
                    program: s.program,
                    path,
                });
            }
        }
    }
    out
}

/// Attach to `t` with `req` on a thread of its own; everything it learns goes to `tx`.
pub fn attach(t: Target, req: Request, tx: Sender<Event>) {
    let _ = std::thread::Builder::new()
        .name(format!("attach-{}", t.pid))
        .spawn(move || {
            let pid = t.pid;
            let why = run(&t, &req, &tx).err();
            let _ = tx.send(Event::Closed { pid, why });
        });
}

fn run(t: &Target, req: &Request, tx: &Sender<Event>) -> Result<(), String> {
    let mut s = UnixStream::connect(&t.path).map_err(|e| format!("{}: {e}", t.path.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(req.encode().as_bytes())
        .map_err(|e| e.to_string())?;
    // The answer line (frames follow it at once).
    let line = attach::read_line(&mut s).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => "closed before answering".to_string(),
        _ => e.to_string(),
    })?;
    match Answer::parse(&line).map_err(|e| e.to_string())? {
        Answer::Refused(why) => {
            let _ = tx.send(Event::Refused { pid: t.pid, why });
            return Ok(());
        }
        Answer::Ok { pid, devices } => {
            let _ = tx.send(Event::Attached {
                pid,
                program: t.program.clone(),
                devices,
            });
        }
    }
    s.set_read_timeout(None).map_err(|e| e.to_string())?;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        let n = match s.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.to_string()),
        };
        buf.extend_from_slice(chunk.get(..n).unwrap_or(&[]));
        let mut at = 0;
        while let Some((kind, body, used)) =
            attach::split_frame(buf.get(at..).unwrap_or(&[])).map_err(|e| e.to_string())?
        {
            let ev = match kind {
                attach::FRAME_RECORDS => Event::Records {
                    bytes: body.to_vec(),
                },
                attach::FRAME_LINES => Event::Lines {
                    text: String::from_utf8_lossy(body).into_owned(),
                },
                _ => Event::Dropped {
                    pid: t.pid,
                    total: body.try_into().map(u64::from_le_bytes).unwrap_or_default(),
                },
            };
            if tx.send(ev).is_err() {
                return Ok(());
            }
            at += used;
        }
        buf.drain(..at);
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Make SIGINT and SIGTERM end the tool cleanly (checked with [`stopped`]).
pub fn catch_stop_signals() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
    }
}

/// Whether a stop signal came.
pub fn stopped() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// How often the tools look for new processes when not bound to given pids.
pub const RESCAN: Duration = Duration::from_secs(1);

/// How often the tools' loops look at signals and counts while nothing arrives.
pub const POLL: Duration = Duration::from_millis(100);

/// One run of a tool beside running programs: finds and attaches to processes (again every
/// [`RESCAN`] unless bound to pids), reports attachments on stderr, and hands out the
/// records and lines; ends on a stop signal or, with pids, when they have all gone.
pub struct Session {
    tool: &'static str,
    pids: Vec<u32>,
    device: Option<String>,
    req: Request,
    tx: Sender<Event>,
    rx: std::sync::mpsc::Receiver<Event>,
    attached: Vec<u32>,
    live: usize,
    ever: bool,
    dropped: std::collections::HashMap<u32, u64>,
    last_scan: Option<std::time::Instant>,
    started: std::time::Instant,
    said_waiting: bool,
}

/// How long `-p PID` waits for a process that has not started its device yet.
const PID_GRACE: Duration = Duration::from_secs(3);

/// What a [`Session`] hands out.
pub enum Got {
    /// pcap records (capture).
    Records(Vec<u8>),
    /// Text lines (trace).
    Lines(String),
    /// Nothing yet; ask again.
    Nothing,
}

impl Session {
    /// Start attaching `req` to the processes `sel` names. `Err`: a malformed device name.
    pub fn new(tool: &'static str, sel: &Select, mut req: Request) -> Result<Session, String> {
        if let Some(d) = &sel.device {
            abi::attach::check_name(d).map_err(|e| format!("-d {d}: {e}"))?;
        }
        req.device = sel.device.clone();
        catch_stop_signals();
        let (tx, rx) = std::sync::mpsc::channel();
        Ok(Session {
            tool,
            pids: sel.pid.clone(),
            device: sel.device.clone(),
            req,
            tx,
            rx,
            attached: Vec::new(),
            live: 0,
            ever: false,
            dropped: Default::default(),
            last_scan: None,
            started: std::time::Instant::now(),
            said_waiting: false,
        })
    }

    /// The next records or lines; `Ok(None)` when the session is over, `Err` with a message
    /// when none of the given pids is a uroce process with a device.
    pub fn next(&mut self) -> Result<Option<Got>, String> {
        if stopped() {
            return Ok(None);
        }
        let bound = !self.pids.is_empty();
        let rescan = if self.attached.is_empty() {
            Duration::from_millis(200)
        } else {
            RESCAN
        };
        if self.last_scan.is_none_or(|t| t.elapsed() >= rescan)
            && (!bound || self.attached.is_empty())
        {
            self.last_scan = Some(std::time::Instant::now());
            for t in find_targets(&self.pids, self.device.as_deref(), &self.attached) {
                self.attached.push(t.pid);
                self.live += 1;
                attach(t, self.req.clone(), self.tx.clone());
            }
            if self.attached.is_empty() {
                if bound && self.started.elapsed() >= PID_GRACE {
                    return Err(format!(
                        "no uroce process with a device among pids {:?}",
                        self.pids
                    ));
                }
                if !bound && !self.said_waiting {
                    self.said_waiting = true;
                    eprintln!(
                        "uroce {}: waiting for a uroce process{} (Ctrl-C to stop)",
                        self.tool,
                        self.device
                            .as_deref()
                            .map(|d| format!(" with device {d}"))
                            .unwrap_or_default()
                    );
                }
            }
        }
        if bound && self.ever && self.live == 0 {
            return Ok(None);
        }
        let Ok(ev) = self.rx.recv_timeout(POLL) else {
            return Ok(Some(Got::Nothing));
        };
        Ok(Some(match ev {
            Event::Attached {
                pid,
                program,
                devices,
            } => {
                self.ever = true;
                eprintln!(
                    "uroce {}: attached to {program} (pid {pid}): {}",
                    self.tool,
                    devices.join(", ")
                );
                Got::Nothing
            }
            Event::Refused { pid, why } => {
                eprintln!("uroce {}: pid {pid}: {why}", self.tool);
                Got::Nothing
            }
            Event::Closed { pid, why } => {
                self.live = self.live.saturating_sub(1);
                self.ever = true;
                if let Some(w) = why {
                    eprintln!("uroce {}: pid {pid}: {w}", self.tool);
                }
                Got::Nothing
            }
            Event::Dropped { pid, total } => {
                self.dropped.insert(pid, total);
                Got::Nothing
            }
            Event::Records { bytes } => Got::Records(bytes),
            Event::Lines { text } => Got::Lines(text),
        }))
    }

    /// Processes attached so far.
    pub fn processes(&self) -> usize {
        self.attached.len()
    }

    /// What the processes' queues dropped for this tool.
    pub fn lost(&self) -> u64 {
        self.dropped.values().sum()
    }
}
