//! Counters of this process's devices, published to other processes (`uroce stat`).
//!
//! A uroce device lives inside the application (embedded mode, docs/architecture.md §5), so there
//! is no sysfs `hw_counters` directory and no kernel `rdma stat` to ask. Instead every process
//! that uses uroce publishes its counters on a Unix socket, and `uroce stat` (another
//! process) connects to each socket it finds and reads one JSON [`Snapshot`].
//!
//! # Endpoint
//!
//! * Path: `DIR/<pid>.sock`, where `DIR` is `$UROCE_STATS_DIR` if set, else
//!   `$XDG_RUNTIME_DIR/uroce`, else `/tmp/uroce-<uid>` ([`publish_dir`]). The directory is
//!   created with mode 0700 and must be owned by this user: only this user (and root) can
//!   read the counters, as with a private runtime directory.
//! * Protocol: connect; the process writes one JSON [`Snapshot`] followed by a newline and
//!   closes. Nothing is read from the client, so a client cannot make it misbehave.
//! * Cost: one thread blocked in `accept()` — no timer, no periodic wake-up; an idle device
//!   stays at ≈ 0 % CPU (docs/architecture.md §8). A snapshot is built only when a client connects.
//! * Started once by [`crate::init`] (so by every program that uses the facade, including
//!   the C `libibverbs.so.1` under perftest). `UROCE_STATS=0` (or `off`) turns it off.
//!
//! # Lifetime of the socket file
//!
//! The socket is bound under a temporary name and renamed into place only once it
//! listens, so a `<pid>.sock` that refuses connections is always stale. At normal exit an
//! `atexit` handler removes it (only in the process that created it, not in a forked
//! child). A process killed by a signal leaves it behind; [`collect`] removes every socket
//! that refuses connections (`ECONNREFUSED`: nothing listens, its process is gone).
//!
//! # Counters
//!
//! Port counters are [`nic::PortCounters`] under rxe's `hw_counters` names followed by the
//! engine's own (IB PMA `port_xmit_packets`, ...); per-QP counters are
//! [`nic::DeviceHandle::qp_counters`]. The nic's public API has no list of live QPNs, so
//! the snapshot finds them by looking up QPNs in the range the device hands out, stopping
//! as soon as it has found as many as [`nic::DeviceHandle::stats`] reports. Per-CQ counters
//! ([`nic::DeviceHandle::cq_counters`]: `lost_cqes`, completions a full CQ lost) list every
//! live CQ by handle.

use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Version of the snapshot format; bumped when a field changes meaning.
pub const SNAPSHOT_VERSION: u32 = 1;

/// Environment variable naming the directory of the sockets (tests use a private one).
pub const DIR_ENV: &str = "UROCE_STATS_DIR";

/// Environment variable that turns publishing off (`0`, `off`, `no`, `false`).
pub const ENABLE_ENV: &str = "UROCE_STATS";

/// Environment variable that makes a publishing process leave its last snapshot behind at
/// exit (`1`, `on`, `yes`, `true`): `DIR/<pid>.exit.json`, read by `uroce stat --exited`
/// ([`exited_in`]). Off by default, so that ordinary runs leave no files.
pub const KEEP_ENV: &str = "UROCE_STATS_KEEP";

/// Largest exit snapshot read back (a hostile file cannot make the reader allocate more).
const EXIT_SNAPSHOT_MAX: u64 = 16 << 20;

/// The lowest QPN probed: QPNs 0 and 1 are special (SMI/GSI) and never handed out.
const FIRST_PROBED_QPN: u32 = 2;

/// Largest snapshot a client accepts (a device with every QP of `max_qp` in use is far
/// smaller); a limit so a misbehaving peer cannot make `uroce stat` allocate without bound.
const SNAPSHOT_BYTES_MAX: u64 = 64 << 20;

/// How long the publisher waits for a slow reader before giving up on it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------
// The snapshot format

/// Named counters in a fixed order, serialized as a JSON object (`{"sent_pkts": 1, ...}`)
/// whose key order is kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterSet(pub Vec<(String, u64)>);

impl CounterSet {
    /// From `(name, value)` pairs.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, u64)>) -> CounterSet {
        CounterSet(pairs.into_iter().map(|(n, v)| (n.to_string(), v)).collect())
    }

    /// One counter by name.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// The counters in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.0.iter().map(|(n, v)| (n.as_str(), *v))
    }
}

impl Serialize for CounterSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (n, v) in &self.0 {
            m.serialize_entry(n, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for CounterSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CounterSet, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CounterSet;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of counter names to unsigned integers")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CounterSet, A::Error> {
                let mut v = Vec::with_capacity(map.size_hint().unwrap_or(0).min(256));
                while let Some((name, value)) = map.next_entry::<String, u64>()? {
                    v.push((name, value));
                }
                Ok(CounterSet(v))
            }
        }
        d.deserialize_map(V)
    }
}

/// One QP's counters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpSnapshot {
    /// The QP number.
    pub qpn: u32,
    /// The transport's per-QP counters (rxe `hw_counters` names).
    pub counters: CounterSet,
    /// The QP runs selective repeat (docs/wire.md §5.6): both ends agreed to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub selective_repeat: bool,
}

/// One CQ's counters (`lost_cqes`: completions lost because it was full).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CqSnapshot {
    /// The CQ's handle on its device.
    pub cq: u32,
    /// Its counters.
    pub counters: CounterSet,
}

/// Live objects on a device (what `rdma resource` counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ObjectCounts {
    /// Open contexts.
    pub contexts: u64,
    /// Protection domains.
    pub pds: u64,
    /// Memory regions.
    pub mrs: u64,
    /// Completion queues.
    pub cqs: u64,
    /// Queue pairs.
    pub qps: u64,
    /// Shared receive queues.
    pub srqs: u64,
    /// Address handles.
    pub ahs: u64,
    /// Completion channels.
    pub comp_channels: u64,
}

/// One device of a process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSnapshot {
    /// Device name (`uroce0`).
    pub name: String,
    /// The address it sends and receives RoCEv2 on.
    pub addr: IpAddr,
    /// Port number (every uroce device has port 1).
    pub port: u8,
    /// Port counters: rxe's `hw_counters` summed over every QP the device had, then the
    /// engine's own.
    pub counters: CounterSet,
    /// Live objects.
    #[serde(default)]
    pub objects: ObjectCounts,
    /// Per-QP counters of the live QPs, by ascending QPN.
    #[serde(default)]
    pub qps: Vec<QpSnapshot>,
    /// Per-CQ counters of the live CQs, by ascending handle.
    #[serde(default)]
    pub cqs: Vec<CqSnapshot>,
}

/// What one process publishes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// [`SNAPSHOT_VERSION`] of the writer.
    pub version: u32,
    /// Process id.
    pub pid: u32,
    /// Program name (base name of `argv[0]`).
    pub program: String,
    /// The command line.
    #[serde(default)]
    pub cmdline: Vec<String>,
    /// When the snapshot was taken, in milliseconds since the Unix epoch (for rates).
    pub time_ms: u64,
    /// The process's running devices.
    pub devices: Vec<DeviceSnapshot>,
    /// Written at the process's exit ([`KEEP_ENV`]): the process is gone, and QPs it
    /// destroyed before exiting are no longer listed (their traffic stays in the port
    /// counters).
    #[serde(default)]
    pub exited: bool,
}

impl Snapshot {
    /// The device called `name`.
    pub fn device(&self, name: &str) -> Option<&DeviceSnapshot> {
        self.devices.iter().find(|d| d.name == name)
    }
}

impl DeviceSnapshot {
    /// The QP numbered `qpn`.
    pub fn qp(&self, qpn: u32) -> Option<&QpSnapshot> {
        self.qps.iter().find(|q| q.qpn == qpn)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn cmdline() -> Vec<String> {
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

fn program_name(cmdline: &[String]) -> String {
    let from_argv = cmdline
        .first()
        .and_then(|a| Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty());
    from_argv
        .or_else(|| {
            fs::read_to_string("/proc/self/comm")
                .ok()
                .map(|s| s.trim_end().to_string())
        })
        .unwrap_or_default()
}

/// The live QPs of `dev`: looks up QPNs from [`FIRST_PROBED_QPN`] through the top of the
/// range the device hands out, stopping once `live` QPs have been found.
fn live_qps(dev: &nic::DeviceHandle, live: usize) -> Vec<QpSnapshot> {
    let mut qps = Vec::with_capacity(live.min(4096));
    if live == 0 {
        return qps;
    }
    // nic hands out QPNs from 16 up to 16 + max_qp (rxe's pool range); probe a little
    // below in case that start changes. A QPN is 24 bits.
    let end = dev.config().limits.max_qp.saturating_add(16).min(1 << 24);
    for qpn in FIRST_PROBED_QPN..end {
        if let Some(c) = dev.qp_counters(qpn) {
            qps.push(QpSnapshot {
                qpn,
                counters: CounterSet::from_pairs(c.iter()),
                selective_repeat: dev.qp_selective_repeat(qpn).unwrap_or(false),
            });
            if qps.len() >= live {
                break;
            }
        }
    }
    qps
}

fn device_snapshot(dev: &nic::DeviceHandle) -> DeviceSnapshot {
    let s = dev.stats();
    let objects = ObjectCounts {
        contexts: s.contexts as u64,
        pds: s.pds as u64,
        mrs: s.mrs as u64,
        cqs: s.cqs as u64,
        qps: s.qps as u64,
        srqs: s.srqs as u64,
        ahs: s.ahs as u64,
        comp_channels: s.comp_channels as u64,
    };
    DeviceSnapshot {
        name: dev.name().to_string(),
        addr: dev.config().addr,
        port: 1,
        counters: CounterSet::from_pairs(dev.port_counters().iter().chain([(
            // Packets a capture of this device (UROCE_CAPTURE or an attached `uroce
            // capture`) lost to a full queue or a failed write.
            "capture_lost",
            nic::attach::capture_lost(dev.name()),
        )])),
        objects,
        qps: live_qps(dev, s.qps),
        cqs: dev
            .cq_counters()
            .into_iter()
            .map(|c| CqSnapshot {
                cq: c.cq,
                counters: CounterSet::from_pairs(c.iter()),
            })
            .collect(),
    }
}

/// The snapshot of this process: every running device with its port and QP counters.
pub fn snapshot() -> Snapshot {
    let cmdline = cmdline();
    let devices = nic::device_names()
        .iter()
        .filter_map(|n| nic::device(n))
        .map(|d| device_snapshot(&d))
        .collect();
    Snapshot {
        version: SNAPSHOT_VERSION,
        pid: std::process::id(),
        program: program_name(&cmdline),
        cmdline,
        time_ms: now_ms(),
        devices,
        exited: false,
    }
}

// ---------------------------------------------------------------------------------------
// Directories

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail (POSIX).
    unsafe { libc::getuid() }
}

/// Where this process publishes: `$UROCE_STATS_DIR`, else `$XDG_RUNTIME_DIR/uroce`, else
/// `/tmp/uroce-<uid>`.
pub fn publish_dir() -> PathBuf {
    search_dirs().into_iter().next().unwrap_or_else(tmp_dir)
}

fn tmp_dir() -> PathBuf {
    PathBuf::from(format!("/tmp/uroce-{}", uid()))
}

/// Where [`collect`] looks: `$UROCE_STATS_DIR` alone if set; otherwise
/// `$XDG_RUNTIME_DIR/uroce` (if that variable is set) and `/tmp/uroce-<uid>`, so that a
/// `uroce stat` started without the publisher's `XDG_RUNTIME_DIR` still finds it.
pub fn search_dirs() -> Vec<PathBuf> {
    if let Some(d) = std::env::var_os(DIR_ENV).filter(|d| !d.is_empty()) {
        return vec![PathBuf::from(d)];
    }
    let mut dirs = Vec::with_capacity(2);
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| Path::new(x).is_absolute()) {
        dirs.push(Path::new(&x).join("uroce"));
    }
    dirs.push(tmp_dir());
    dirs
}

/// Create `dir` (mode 0700) if needed and check that it is a real directory owned by this
/// user, not a symlink or someone else's directory planted in `/tmp`; tighten its mode to
/// 0700 if it is looser.
fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let md = fs::symlink_metadata(dir)?;
    if !md.is_dir() || md.uid() != uid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a directory owned by uid {}",
                dir.display(),
                uid()
            ),
        ));
    }
    if md.mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Publisher

static STARTED: AtomicBool = AtomicBool::new(false);

/// `(pid, path)` of the socket this process published, for the exit handler.
static PUBLISHED: OnceLock<(u32, PathBuf)> = OnceLock::new();

/// Whether environment variable `name` is set to one of `words` (case and surrounding
/// blanks ignored).
fn env_is(name: &str, words: &[&str]) -> bool {
    std::env::var(name).is_ok_and(|v| words.contains(&v.trim().to_ascii_lowercase().as_str()))
}

fn disabled_by_env() -> bool {
    env_is(ENABLE_ENV, &["0", "off", "no", "false"])
}

/// Start publishing this process's counters (once per process; later calls return at
/// once). Failures — no writable directory, a path too long for a Unix socket — leave
/// the process without a stats endpoint and are otherwise ignored: counters are a
/// diagnostic, never a reason for an application to fail.
///
/// A child created by `fork()` after this does not publish (the thread is not copied).
pub fn start() {
    if STARTED.swap(true, Ordering::AcqRel) || disabled_by_env() {
        return;
    }
    let _ = publish(&publish_dir());
}

/// Returns where this process publishes, if it does.
pub fn published_path() -> Option<&'static Path> {
    PUBLISHED.get().map(|(_, p)| p.as_path())
}

fn publish(dir: &Path) -> io::Result<()> {
    ensure_private_dir(dir)?;
    let pid = std::process::id();
    let path = dir.join(format!("{pid}.sock"));
    let tmp = dir.join(format!("{pid}.sock.tmp"));
    // A leftover of an earlier process with this pid.
    let _ = fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp)?;
    // Only a listening socket appears under the name clients look for, so a `.sock` that
    // refuses connections is always stale.
    if let Err(e) = fs::rename(&tmp, &path) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    // The attach socket of `uroce capture` / `uroce trace` (nic::attach), in place before
    // the stats socket that announces the process.
    let attach_path = dir.join(format!("{pid}.attach"));
    let attach_tmp = dir.join(format!("{pid}.attach.tmp"));
    let _ = fs::remove_file(&attach_tmp);
    let attach = UnixListener::bind(&attach_tmp).and_then(|l| {
        fs::rename(&attach_tmp, &attach_path)?;
        Ok(l)
    });
    if attach.is_err() {
        let _ = fs::remove_file(&attach_tmp);
    }
    let attach = attach.ok();
    let _ = PUBLISHED.set((pid, path.clone()));
    // SAFETY: `remove_at_exit` is an `extern "C" fn()` that never unwinds (it only reads a
    // OnceLock and calls remove_file, neither of which panics), as atexit requires.
    unsafe {
        libc::atexit(remove_at_exit);
    }
    let spawned = std::thread::Builder::new()
        .name("uroce-stats".into())
        .spawn(move || serve(&listener, attach.as_ref()));
    if let Err(e) = spawned {
        let _ = fs::remove_file(&path);
        return Err(e);
    }
    Ok(())
}

extern "C" fn remove_at_exit() {
    if let Some((pid, path)) = PUBLISHED.get() {
        // A forked child inherits this handler; the socket is its parent's.
        if *pid == std::process::id() {
            if keep_by_env() {
                // Unwinding out of an atexit handler is undefined behaviour: a failure in
                // the device code only loses the exit snapshot.
                let _ = std::panic::catch_unwind(|| write_exit_snapshot(path));
            }
            let _ = fs::remove_file(path);
            let _ = fs::remove_file(path.with_extension("attach"));
        }
    }
}

fn keep_by_env() -> bool {
    env_is(KEEP_ENV, &["1", "on", "yes", "true"])
}

/// The exit snapshot's path for the socket `sock` (`DIR/<pid>.sock` → `DIR/<pid>.exit.json`).
fn exit_path(sock: &Path) -> PathBuf {
    sock.with_extension("exit.json")
}

/// Write the last snapshot next to the socket, under a temporary name first so a reader
/// never sees half a file.
fn write_exit_snapshot(sock: &Path) {
    let mut snap = snapshot();
    snap.exited = true;
    let Ok(mut body) = serde_json::to_string(&snap) else {
        return;
    };
    body.push('\n');
    let path = exit_path(sock);
    let tmp = path.with_extension("json.tmp");
    if fs::write(&tmp, body).is_ok() && fs::rename(&tmp, &path).is_err() {
        let _ = fs::remove_file(&tmp);
    }
}

/// The exit snapshots (`<pid>.exit.json`, [`KEEP_ENV`]) in `dirs`, by ascending pid, and
/// the files that could not be read or parsed, with the reason.
pub fn exited_in(dirs: &[PathBuf]) -> (Vec<Snapshot>, Vec<Unanswered>) {
    let mut snaps = Vec::new();
    let mut bad = Vec::new();
    for dir in dirs {
        let Ok(rd) = fs::read_dir(dir) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(pid) = name.to_str().and_then(|n| pid_file_name(n, ".exit.json")) else {
                continue;
            };
            let path = e.path();
            match read_exit_snapshot(&path) {
                Ok(s) => snaps.push(s),
                Err(reason) => bad.push(Unanswered { pid, path, reason }),
            }
        }
    }
    snaps.sort_by_key(|s| s.pid);
    (snaps, bad)
}

fn read_exit_snapshot(path: &Path) -> Result<Snapshot, String> {
    let f = fs::File::open(path).map_err(|e| e.to_string())?;
    let mut text = String::new();
    f.take(EXIT_SNAPSHOT_MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > EXIT_SNAPSHOT_MAX {
        return Err(format!("larger than {EXIT_SNAPSHOT_MAX} bytes"));
    }
    let mut s: Snapshot =
        serde_json::from_str(&text).map_err(|e| format!("not a snapshot: {e}"))?;
    s.exited = true;
    Ok(s)
}

/// The publisher thread: blocked in `poll()` on the stats and attach sockets until a client
/// comes. A stats client gets one snapshot (serving one at a time bounds the work a burst of
/// clients can cause); an attach client gets a thread of its own for as long as it stays
/// (`nic::attach::serve`).
fn serve(listener: &UnixListener, attach: Option<&UnixListener>) {
    use std::os::fd::AsRawFd;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: attach.map_or(-1, |a| a.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a live array of two pollfd structures (a negative fd is ignored).
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if r < 0 {
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        }
        if fds[0].revents != 0 {
            serve_stats(listener);
        }
        if let (Some(a), true) = (attach, fds[1].revents != 0) {
            serve_attach(a);
        }
    }
}

fn serve_stats(listener: &UnixListener) {
    match listener.accept() {
        Ok((mut conn, _)) => {
            let _ = conn.set_write_timeout(Some(WRITE_TIMEOUT));
            // A failure in the device code must not end the publisher.
            if let Ok(mut body) = std::panic::catch_unwind(snapshot_json) {
                body.push('\n');
                let _ = conn.write_all(body.as_bytes());
            }
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
        // E.g. EMFILE: back off instead of spinning on the error.
        Err(_) => std::thread::sleep(Duration::from_millis(100)),
    }
}

fn serve_attach(listener: &UnixListener) {
    match listener.accept() {
        Ok((conn, _)) => {
            let _ = std::thread::Builder::new()
                .name("uroce-attach".into())
                .spawn(move || {
                    let _ = std::panic::catch_unwind(move || nic::attach::serve(conn));
                });
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
        Err(_) => std::thread::sleep(Duration::from_millis(100)),
    }
}

fn snapshot_json() -> String {
    serde_json::to_string(&snapshot()).unwrap_or_else(|_| String::from("{}"))
}

// ---------------------------------------------------------------------------------------
// Client

/// A published socket found in a stats directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The publisher's process id (from the file name).
    pub pid: u32,
    /// The socket's path.
    pub path: PathBuf,
}

/// The published sockets in `dir` (`<pid>.sock`), by ascending pid. A missing directory
/// has none.
pub fn endpoints(dir: &Path) -> io::Result<Vec<Endpoint>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut eps: Vec<Endpoint> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let pid = pid_file_name(name.to_str()?, ".sock")?;
            Some(Endpoint {
                pid,
                path: e.path(),
            })
        })
        .collect();
    eps.sort_by_key(|e| e.pid);
    Ok(eps)
}

/// `"<pid><suffix>"` (`.sock`, `.exit.json`) → pid.
fn pid_file_name(name: &str, suffix: &str) -> Option<u32> {
    let digits = name.strip_suffix(suffix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|p| *p > 0)
}

/// Whether process `pid` exists (in this pid namespace); `None` if that cannot be told
/// (no `/proc`).
fn pid_alive(pid: u32) -> Option<bool> {
    if !Path::new("/proc/self").exists() {
        return None;
    }
    Some(Path::new(&format!("/proc/{pid}")).exists())
}

/// What asking one endpoint gave.
#[derive(Debug)]
pub enum Probe {
    /// The process answered.
    Live(Box<Snapshot>),
    /// The socket refused the connection (its process is gone): the file was removed
    /// (`true`) or removing it failed (`false`).
    Stale(bool),
    /// The file vanished meanwhile (its process exited).
    Gone,
    /// Connected, but no valid snapshot came (a stopped process, a read timeout, ...).
    NoAnswer(String),
}

/// Ask one endpoint for its snapshot, waiting at most `timeout` for the answer, and remove
/// the socket if it is stale.
pub fn probe(ep: &Endpoint, timeout: Duration) -> Probe {
    // Only the connection decides, not the pid: a process that is gone no longer listens
    // (ECONNREFUSED), and a pid seen from another pid namespace may not be the publisher's.
    let mut conn = match UnixStream::connect(&ep.path) {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            return Probe::Stale(fs::remove_file(&ep.path).is_ok())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Probe::Gone,
        Err(e) => return Probe::NoAnswer(format!("connect: {e}")),
    };
    if let Err(e) = conn.set_read_timeout(Some(timeout)) {
        return Probe::NoAnswer(format!("set_read_timeout: {e}"));
    }
    let mut body = Vec::new();
    if let Err(e) = Read::take(&mut conn, SNAPSHOT_BYTES_MAX).read_to_end(&mut body) {
        return Probe::NoAnswer(format!("read: {e}"));
    }
    match serde_json::from_slice::<Snapshot>(&body) {
        Ok(s) => Probe::Live(Box::new(s)),
        Err(e) if body.is_empty() => Probe::NoAnswer(format!("empty answer ({e})")),
        Err(e) => Probe::NoAnswer(format!("bad snapshot: {e}")),
    }
}

/// A process that did not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unanswered {
    /// Its pid.
    pub pid: u32,
    /// Its socket.
    pub path: PathBuf,
    /// Why.
    pub reason: String,
}

/// Everything [`collect`] found.
#[derive(Clone, Debug, Default)]
pub struct Collected {
    /// The directories searched.
    pub dirs: Vec<PathBuf>,
    /// Snapshots of the live processes, by ascending pid.
    pub processes: Vec<Snapshot>,
    /// Stale sockets removed.
    pub removed: Vec<PathBuf>,
    /// Sockets that did not answer.
    pub unanswered: Vec<Unanswered>,
}

/// Ask every process publishing in [`search_dirs`] (except this one) for its snapshot,
/// removing stale sockets on the way. `timeout` bounds the wait for each answer.
pub fn collect(timeout: Duration) -> Collected {
    collect_in(&search_dirs(), timeout)
}

/// [`collect`] over the given directories.
pub fn collect_in(dirs: &[PathBuf], timeout: Duration) -> Collected {
    let me = std::process::id();
    let mut out = Collected {
        dirs: dirs.to_vec(),
        ..Collected::default()
    };
    for dir in dirs {
        let eps = match endpoints(dir) {
            Ok(e) => e,
            Err(e) => {
                out.unanswered.push(Unanswered {
                    pid: 0,
                    path: dir.clone(),
                    reason: format!("reading the directory: {e}"),
                });
                continue;
            }
        };
        for ep in eps.into_iter().filter(|e| e.pid != me) {
            match probe(&ep, timeout) {
                Probe::Live(s) => out.processes.push(*s),
                Probe::Stale(true) => out.removed.push(ep.path),
                Probe::Stale(false) => out.unanswered.push(Unanswered {
                    pid: ep.pid,
                    path: ep.path,
                    reason: "stale, and removing it failed".into(),
                }),
                Probe::Gone => {}
                Probe::NoAnswer(reason) => out.unanswered.push(Unanswered {
                    pid: ep.pid,
                    path: ep.path,
                    reason,
                }),
            }
        }
        remove_dead_temporaries(dir);
    }
    out.processes.sort_by_key(|s| s.pid);
    out
}

/// `<pid>.sock.tmp` files of processes that died between bind and rename (a live
/// process's temporary refuses connections too, so here the pid decides), and the attach
/// sockets (`<pid>.attach`, `<pid>.attach.tmp`) of processes that are gone.
fn remove_dead_temporaries(dir: &Path) {
    let Ok(rd) = fs::read_dir(dir) else {
        return;
    };
    for e in rd.filter_map(|e| e.ok()) {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|f| {
            [".sock.tmp", ".attach.tmp", ".attach"]
                .into_iter()
                .find_map(|suffix| pid_file_name(f, suffix))
        }) else {
            continue;
        };
        if pid_alive(pid) == Some(false) {
            let _ = fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn temp_dir(tag: &str) -> PathBuf {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "uroce-stats-unit-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn counter_set_keeps_order_through_json() {
        let c = CounterSet::from_pairs([("sent_pkts", 3), ("rcvd_pkts", 2), ("a", 1)]);
        let j = serde_json::to_string(&c).unwrap();
        assert_eq!(j, r#"{"sent_pkts":3,"rcvd_pkts":2,"a":1}"#);
        let back: CounterSet = serde_json::from_str(&j).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.get("rcvd_pkts"), Some(2));
        assert_eq!(back.get("nope"), None);
        assert!(serde_json::from_str::<CounterSet>(r#"{"x":-1}"#).is_err());
        assert!(serde_json::from_str::<CounterSet>("[1]").is_err());
    }

    #[test]
    fn socket_names() {
        assert_eq!(pid_file_name("123.sock", ".sock"), Some(123));
        assert_eq!(pid_file_name("0.sock", ".sock"), None);
        assert_eq!(pid_file_name(".sock", ".sock"), None);
        assert_eq!(pid_file_name("12a.sock", ".sock"), None);
        assert_eq!(pid_file_name("+12.sock", ".sock"), None);
        assert_eq!(pid_file_name("123.sock.tmp", ".sock"), None);
        assert_eq!(pid_file_name("99999999999999.sock", ".sock"), None);
    }

    #[test]
    fn snapshot_lists_a_started_device_with_its_qps() {
        // A device with no traffic: counters present under rxe's names, zero QPs.
        let dev = nic::start_device(nic::DeviceConfig::new(
            "statunit0",
            "127.77.91.1".parse().unwrap(),
        ))
        .unwrap();
        let s = snapshot();
        assert_eq!(s.pid, std::process::id());
        assert_eq!(s.version, SNAPSHOT_VERSION);
        assert!(!s.program.is_empty());
        let d = s.device("statunit0").expect("device listed");
        assert_eq!(d.addr, dev.config().addr);
        assert_eq!(d.port, 1);
        let names: Vec<&str> = d.counters.iter().map(|(n, _)| n).collect();
        assert_eq!(names.first(), Some(&"sent_pkts"));
        assert!(names.contains(&"rcvd_pkts") && names.contains(&"port_xmit_packets"));
        assert_eq!(d.objects.qps as usize, d.qps.len());
        // Round trip through the wire format.
        let j = serde_json::to_string(&s).unwrap();
        let back: Snapshot = serde_json::from_str(&j).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn snapshot_finds_live_qps_and_their_traffic() {
        use crate::pair::{connect, PairOpts, ALL_ACCESS};
        use crate::{AccessFlags, SendWr, Wc, WcStatus};
        let d = crate::device("statunit1", "127.77.91.2".parse().unwrap());
        let (a, b) = connect(&d, &d, &PairOpts::default()).unwrap();
        let src = a.pd.alloc_mr(8, AccessFlags::LOCAL_WRITE).unwrap();
        let dst = b.pd.alloc_mr(8, ALL_ACCESS).unwrap();
        let rm = dst.remote();
        let sge = [src.sge(0, 8)];
        a.qp.post_send(&[SendWr::write(1, &sge, rm.addr, rm.rkey).signaled()])
            .unwrap();
        let mut wc = [Wc::default(); 1];
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while a.cq.poll(&mut wc).unwrap() == 0 {
            assert!(std::time::Instant::now() < deadline, "no completion");
            std::thread::yield_now();
        }
        assert_eq!(wc[0].status, WcStatus::Success);
        let s = snapshot();
        let dev = s.device("statunit1").expect("device listed");
        let qpns: Vec<u32> = dev.qps.iter().map(|q| q.qpn).collect();
        let mut want = vec![a.qp.qp_num(), b.qp.qp_num()];
        want.sort_unstable();
        assert_eq!(qpns, want);
        let qa = dev.qp(a.qp.qp_num()).unwrap();
        assert!(qa.counters.get("sent_pkts").unwrap() >= 1);
        assert!(qa.counters.get("rdma_sends").unwrap() >= 1);
        let qb = dev.qp(b.qp.qp_num()).unwrap();
        assert!(qb.counters.get("rcvd_pkts").unwrap() >= 1);
        assert!(dev.counters.get("sent_pkts").unwrap() >= 2, "WRITE + ACK");
        assert_eq!(dev.objects.qps, 2);
    }

    #[test]
    fn publish_probe_and_stale_cleanup() {
        let dir = temp_dir("pub");
        // A listener like the publisher's, served on a thread of this test.
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&dir).unwrap();
        let mode = fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700, "directory tightened to 0700");
        let live = dir.join("1.sock"); // pid 1 exists (init): only the connection decides.
        let listener = UnixListener::bind(&live).unwrap();
        std::thread::spawn(move || serve(&listener, None));
        // A socket nobody listens on, under a live pid: ECONNREFUSED → stale.
        let refused = dir.join(format!("{}.sock", std::process::id()));
        drop(UnixListener::bind(&refused).unwrap());
        // A socket of a dead process.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = child.id();
        child.wait().unwrap();
        let dead = dir.join(format!("{dead_pid}.sock"));
        drop(UnixListener::bind(&dead).unwrap());
        // Noise that is not an endpoint.
        fs::write(dir.join("notes.txt"), b"x").unwrap();

        let found = endpoints(&dir).unwrap();
        assert_eq!(found.len(), 3, "{found:?}");
        match probe(&found[0], Duration::from_secs(10)) {
            Probe::Live(s) => assert_eq!(s.pid, std::process::id()),
            other => panic!("{other:?}"),
        }
        // collect_in skips its own pid, so probe the refused one directly.
        let own = Endpoint {
            pid: std::process::id(),
            path: refused.clone(),
        };
        assert!(matches!(
            probe(&own, Duration::from_secs(1)),
            Probe::Stale(true)
        ));
        assert!(!refused.exists());
        let c = collect_in(std::slice::from_ref(&dir), Duration::from_secs(10));
        assert_eq!(c.removed, vec![dead.clone()]);
        assert!(!dead.exists());
        assert_eq!(c.processes.len(), 1);
        assert!(c.unanswered.is_empty(), "{:?}", c.unanswered);
        assert!(live.exists());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn garbage_answer_is_no_answer() {
        let dir = temp_dir("garbage");
        ensure_private_dir(&dir).unwrap();
        let path = dir.join("1.sock");
        let listener = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            for c in listener.incoming().flatten().take(1) {
                let mut c = c;
                let _ = c.write_all(b"{\"version\": \"x\"");
            }
        });
        let ep = Endpoint { pid: 1, path };
        assert!(matches!(
            probe(&ep, Duration::from_secs(10)),
            Probe::NoAnswer(_)
        ));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn missing_dir_has_no_endpoints() {
        let dir = temp_dir("missing");
        assert_eq!(endpoints(&dir).unwrap(), Vec::new());
        let c = collect_in(&[dir], Duration::from_secs(1));
        assert!(c.processes.is_empty() && c.removed.is_empty() && c.unanswered.is_empty());
    }
}
