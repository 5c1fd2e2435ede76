//! The perftest exchange as a sans-IO state machine (docs/perftest.md §4).
//!
//! [`Perftest::poll`] says what to do next: sleep, write one message (with **one**
//! `write()`), read exactly N bytes (then hand them to [`Perftest::received`]), or handle
//! an [`Event`] that needs the RDMA side (QP numbers, connecting QPs, running the test).
//! The machine never touches a socket or a clock; [`super::run_exchange`] drives it over a
//! `Read + Write` stream.
//!
//! Every exchange is lock-step: the client writes its message first, the server reads it
//! and then writes its own (docs/perftest.md §1 "order"). The sequence of exchanges per test,
//! and the checks and aborts between them, follow perftest 4.5-0.17's `*_bw.c`/`*_lat.c`.

use std::collections::VecDeque;
use std::time::Duration;

use super::config::{BenchConfig, Connection, LocalSystem, Role, TestKind, Verb};
use super::error::{
    Context, MsgClass, PerftestError, CACHE, CLOSE, CLOSE_SEND_BW, CLOSE_SEND_LAT, PAGE, SYNC, X,
    X_SP,
};
use super::msg::{
    decode_i32, decode_mtu, decode_version, encode_i32, encode_mtu, encode_version,
    encode_version_offering_sr, offers_selective_repeat, BwReport, KeyMessage, Mtu, PeerVersion,
    ReportLayout, DONE, KEY_LEN, KEY_LEN_CM, KEY_LEN_NO_GID, MTU_LEN, MTU_LEN_LEGACY, SYS_DATA_LEN,
    VERSION, VERSION_LEN,
};
use crate::gid::is_v4_mapped;

/// `ib_write_bw`'s sleep after the TCP connect.
pub const WRITE_BW_PAUSE: Duration = Duration::from_secs(1);

/// The oldest peer version perftest 6.06 accepts.
pub const MIN_PEER_VERSION: f64 = 5.70;

/// What the caller must do next.
#[derive(Debug, PartialEq)]
pub enum Action {
    /// Sleep this long (only `ib_write_bw`, right after the TCP connect).
    Sleep(Duration),
    /// Write these bytes with a single `write()` call. perftest reads each message with
    /// one `read()` and fails on a short one, so a message must never be split.
    Write(Vec<u8>),
    /// Read exactly this many bytes (looping over short reads), then pass them to
    /// [`Perftest::received`]. On EOF or error, build the error with
    /// [`Perftest::read_failed`].
    Read(usize),
    /// Something only the caller can do; see [`Event`].
    Event(Event),
    /// The exchange is complete: close the socket (without reading the peer's DONE; the
    /// reset the kernel then sends is normal, docs/perftest.md §4 "Connection end").
    Finished,
}

/// Values settled by M1–M4.
#[derive(Clone, Debug, PartialEq)]
pub struct Negotiated {
    /// The peer's version.
    pub peer_version: PeerVersion,
    /// The cycle buffer adopted: max(own page size, peer's) (docs/perftest.md §3 M2).
    pub cycle_buffer: i32,
    /// The cache line size adopted: max(own, peer's).
    pub cache_line: i32,
    /// The peer's page size, if exchanged.
    pub peer_cycle_buffer: Option<i32>,
    /// The peer's cache line size, if exchanged.
    pub peer_cache_line: Option<i32>,
    /// The number the peer sent as its MTU, if exchanged (may be invalid: it is ignored
    /// then).
    pub peer_mtu: Option<i64>,
    /// The MTU both QPs use: the peer's if valid and smaller than ours, else ours.
    pub mtu: Mtu,
    /// Both sides offered selective repeat in M1 (docs/perftest.md §10): create the RC QPs
    /// with it. Never true toward stock perftest.
    pub selective_repeat: bool,
    /// The message size after the UD clamp to the MTU.
    pub size: u64,
    /// perftest's stderr note when it clamped a UD size (` Max msg size in UD is MTU …`).
    pub notice: Option<String>,
}

/// A step that needs the caller.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// M1–M4 are done. Create the QPs and buffers (size the buffer from
    /// `cycle_buffer`), print the header block, then call [`Perftest::set_local_keys`]
    /// with one [`KeyMessage`] per QP before polling again.
    Negotiated(Negotiated),
    /// The first KEY round is done and the GID types agree: bring the QPs to RTR (and
    /// RTS where this side sends) with the peer's values, one per QP.
    Connect {
        /// The peer's KEY per QP.
        remote: Vec<KeyMessage>,
    },
    /// The second KEY round is done: perftest prints the local and remote address lines
    /// here (see [`crate::console::address_lines`]).
    Addresses {
        /// This side's KEY per QP.
        local: Vec<KeyMessage>,
        /// The peer's KEY per QP (as received in this round).
        remote: Vec<KeyMessage>,
    },
    /// Prepare the run of `size` bytes: set up send WQEs, and post receives in send tests.
    /// The pre-test SYNC (if any) follows, so the peer does not send before the receives
    /// are posted.
    Prepare {
        /// Message size.
        size: u64,
    },
    /// Run the measurement for `size` bytes, then call [`Perftest::run_complete`] (with
    /// this side's [`BwReport`] in bandwidth tests) before polling again. perftest prints
    /// its result line at this point, except in `-b` bandwidth tests (see
    /// [`Event::Report`]).
    Run {
        /// Message size.
        size: u64,
    },
    /// A REPORT exchange is done. Unidirectional write/read/atomic server: `mine` is
    /// `None` and perftest prints the client's `peer` line verbatim. `-b`: perftest prints
    /// one line with its own size and iterations and the sums of both sides' rates.
    Report {
        /// This side's report (`-b` only).
        mine: Option<BwReport>,
        /// The peer's report.
        peer: BwReport,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Wait {
    Nothing,
    Read(usize),
    LocalKeys,
    RunResult,
    Done,
    Failed,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Target {
    Version,
    CycleBuffer,
    CacheLine,
    Mtu,
    Key(usize),
    ReportField(usize),
    /// `-R`'s KEY pairs around the QPs' connection: read and dropped.
    Handshake,
}

#[derive(Clone, Debug)]
struct Pair {
    mine: Vec<u8>,
    peer_len: usize,
    target: Target,
    context: Context,
    class: MsgClass,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Nothing done for the front pair yet.
    Start,
    /// Client: wrote, must read.
    Wrote,
    /// Server: read, must write.
    GotRead,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum ReportEvent {
    None,
    PeerOnly,
    Both,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum After {
    VersionCheck,
    SysMax,
    MtuPick,
    Report(ReportEvent),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Op {
    Pause,
    Versions,
    SysData,
    MtuExchange,
    Negotiated,
    /// KEY messages: one pair per QP for a K round, QP0's only for INIT, SYNC, CLOSE.
    Keys {
        label: KeyLabel,
        context: Context,
    },
    GidCheck,
    Connect,
    Addresses,
    Prepare(u64),
    Run(u64),
    Report {
        event: ReportEvent,
    },
    Done {
        context: Context,
    },
    Finish,
}

/// What a KEY exchange is for (docs/perftest.md §4 "Exchange names").
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum KeyLabel {
    /// A K round: every QP's KEY, interleaved with the peer's.
    Round,
    /// INIT (latency tests): QP0's KEY before the K rounds.
    Init,
    /// SYNC-RTR, SYNC-PRE, SYNC-POST, SYNC-END: QP0's KEY.
    Sync,
    /// CLOSE: QP0's KEY, then DONE.
    Close,
    /// `-R` only: a KEY pair of zeros before and after the rdma_cm connection of the QPs
    /// (perftest's `create_rdma_cm_connection` sends its still-empty `my_dest[0]`).
    Handshake,
}

#[derive(Copy, Clone, Debug)]
struct LastWrite {
    class: MsgClass,
    context: Context,
}

/// One side of a perftest out-of-band exchange. See the module documentation.
#[derive(Debug)]
pub struct Perftest {
    cfg: BenchConfig,
    role: Role,
    sys: LocalSystem,
    ops: VecDeque<Op>,
    pairs: VecDeque<Pair>,
    phase: Phase,
    after: Option<After>,
    wait: Wait,
    last_write: Option<LastWrite>,
    peer_version: Option<PeerVersion>,
    /// The peer's M1 carried the selective-repeat offer.
    peer_offers_sr: bool,
    peer_cycle_buffer: Option<i32>,
    peer_cache_line: Option<i32>,
    peer_mtu: Option<i64>,
    cycle_buffer: i32,
    cache_line: i32,
    mtu: Mtu,
    size: u64,
    local_keys: Vec<KeyMessage>,
    remote_keys: Vec<KeyMessage>,
    my_report: BwReport,
    peer_report: BwReport,
    layout: ReportLayout,
}

impl Perftest {
    /// A new exchange for this side. Nothing happens until [`Perftest::poll`].
    pub fn new(cfg: BenchConfig, role: Role, sys: LocalSystem) -> Perftest {
        let mut ops = VecDeque::new();
        if cfg.pauses_after_connect() {
            ops.push_back(Op::Pause);
        }
        ops.push_back(Op::Versions);
        ops.push_back(Op::SysData);
        ops.push_back(Op::MtuExchange);
        let handshake = Op::Keys {
            label: KeyLabel::Handshake,
            context: X,
        };
        if cfg.rdma_cm {
            // perftest connects the QPs by rdma_cm between two KEY pairs of zeros; the
            // caller does that connection in its answer to Negotiated.
            ops.push_back(handshake);
            ops.push_back(Op::Negotiated);
            ops.push_back(handshake);
        } else {
            ops.push_back(Op::Negotiated);
        }
        let qps = cfg.qps();
        let size = cfg.size;
        Perftest {
            layout: ReportLayout {
                wide_iters: true,
                per_port: cfg.report_per_port,
            },
            cfg,
            role,
            sys,
            ops,
            pairs: VecDeque::new(),
            phase: Phase::Start,
            after: None,
            wait: Wait::Nothing,
            last_write: None,
            peer_version: None,
            peer_offers_sr: false,
            peer_cycle_buffer: None,
            peer_cache_line: None,
            peer_mtu: None,
            cycle_buffer: sys.page_size,
            cache_line: sys.cache_line,
            mtu: sys.mtu,
            size,
            local_keys: Vec::new(),
            remote_keys: vec![KeyMessage::default(); qps],
            my_report: BwReport::default(),
            peer_report: BwReport::default(),
        }
    }

    /// This side's role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The test configuration.
    pub fn config(&self) -> &BenchConfig {
        &self.cfg
    }

    /// The peer's KEY per QP as last received (SYNC messages update QP0, as in perftest).
    pub fn remote_keys(&self) -> &[KeyMessage] {
        &self.remote_keys
    }

    /// This side's KEY per QP.
    pub fn local_keys(&self) -> &[KeyMessage] {
        &self.local_keys
    }

    /// The negotiated MTU (this side's own until M4 is done).
    pub fn mtu(&self) -> Mtu {
        self.mtu
    }

    /// The last REPORT received from the peer.
    pub fn peer_report(&self) -> &BwReport {
        &self.peer_report
    }

    /// Whether the exchange has finished.
    pub fn is_finished(&self) -> bool {
        self.wait == Wait::Done
    }

    /// Sets the report this side sends in the next REPORT exchange. Normally it comes
    /// from [`Perftest::run_complete`]; the unidirectional write/read/atomic server, which
    /// runs nothing, sends zeros unless this is called (perftest sends stack garbage there,
    /// which the client ignores).
    pub fn set_report(&mut self, report: BwReport) {
        self.my_report = report;
    }

    /// Answers [`Event::Negotiated`]: this side's KEY per QP (exactly
    /// `config().qps()` of them; QPN and PSN must fit 24 bits).
    pub fn set_local_keys(&mut self, keys: Vec<KeyMessage>) -> Result<(), PerftestError> {
        if self.wait != Wait::LocalKeys {
            return Err(PerftestError::Misuse(
                "set_local_keys without Event::Negotiated",
            ));
        }
        if keys.len() != self.cfg.qps() {
            return Err(PerftestError::Misuse(
                "set_local_keys: one KEY per QP required",
            ));
        }
        for k in &keys {
            if k.encode().is_err() {
                return Err(PerftestError::Misuse(
                    "set_local_keys: QPN or PSN wider than 24 bits",
                ));
            }
        }
        self.local_keys = keys;
        self.wait = Wait::Nothing;
        Ok(())
    }

    /// Answers [`Event::Run`]: the run is over; `report` is this side's bandwidth report
    /// (bandwidth tests), sent in the REPORT exchange that may follow.
    pub fn run_complete(&mut self, report: Option<BwReport>) -> Result<(), PerftestError> {
        if self.wait != Wait::RunResult {
            return Err(PerftestError::Misuse("run_complete without Event::Run"));
        }
        if let Some(r) = report {
            self.my_report = r;
        }
        self.wait = Wait::Nothing;
        Ok(())
    }

    fn fail(&mut self, e: PerftestError) -> PerftestError {
        self.wait = Wait::Failed;
        e
    }

    fn key_bytes(&self, qp: usize) -> Vec<u8> {
        let key = self.local_keys.get(qp).copied().unwrap_or_default();
        if self.cfg.rdma_cm {
            return key.encode_cm().to_vec();
        }
        let encoded = if self.cfg.use_gid {
            key.encode().map(|b| b.to_vec())
        } else {
            key.encode_no_gid().map(|b| b.to_vec())
        };
        // Keys were validated in set_local_keys.
        encoded.unwrap_or_default()
    }

    fn key_len(&self) -> usize {
        if self.cfg.rdma_cm {
            KEY_LEN_CM
        } else if self.cfg.use_gid {
            KEY_LEN
        } else {
            KEY_LEN_NO_GID
        }
    }

    /// The next thing to do. Repeats `Read(n)` until [`Perftest::received`] is called.
    pub fn poll(&mut self) -> Result<Action, PerftestError> {
        match self.wait {
            Wait::Read(n) => return Ok(Action::Read(n)),
            Wait::LocalKeys => {
                return Err(PerftestError::Misuse(
                    "set_local_keys must answer Negotiated",
                ))
            }
            Wait::RunResult => return Err(PerftestError::Misuse("run_complete must answer Run")),
            Wait::Done => return Ok(Action::Finished),
            Wait::Failed => return Err(PerftestError::Misuse("poll after a failure")),
            Wait::Nothing => {}
        }
        loop {
            if let Some(pair) = self.pairs.front() {
                match (self.role, self.phase) {
                    (Role::Client, Phase::Start) => {
                        self.phase = Phase::Wrote;
                        self.last_write = Some(LastWrite {
                            class: pair.class,
                            context: pair.context,
                        });
                        return Ok(Action::Write(pair.mine.clone()));
                    }
                    (Role::Client, Phase::Wrote) | (Role::Server, Phase::Start) => {
                        self.wait = Wait::Read(pair.peer_len);
                        return Ok(Action::Read(pair.peer_len));
                    }
                    (Role::Server, Phase::GotRead) => {
                        self.last_write = Some(LastWrite {
                            class: pair.class,
                            context: pair.context,
                        });
                        let mine = pair.mine.clone();
                        self.pairs.pop_front();
                        self.phase = Phase::Start;
                        return Ok(Action::Write(mine));
                    }
                    (Role::Server, Phase::Wrote) | (Role::Client, Phase::GotRead) => {
                        // Not reachable: the phases are role-specific.
                        self.phase = Phase::Start;
                        continue;
                    }
                }
            }
            if let Some(after) = self.after.take() {
                if let Some(action) = self.run_after(after)? {
                    return Ok(action);
                }
                continue;
            }
            let Some(op) = self.ops.pop_front() else {
                self.wait = Wait::Done;
                return Ok(Action::Finished);
            };
            if let Some(action) = self.start_op(op)? {
                return Ok(action);
            }
        }
    }

    fn push_pair(&mut self, mine: Vec<u8>, peer_len: usize, target: Target, context: Context) {
        let class = match target {
            Target::Key(_) => MsgClass::Keys,
            _ => MsgClass::Data,
        };
        self.pairs.push_back(Pair {
            mine,
            peer_len,
            target,
            context,
            class,
        });
    }

    fn peer_version_value(&self) -> f64 {
        self.peer_version.as_ref().map_or(0.0, |v| v.value)
    }

    fn start_op(&mut self, op: Op) -> Result<Option<Action>, PerftestError> {
        match op {
            Op::Pause => return Ok(Some(Action::Sleep(WRITE_BW_PAUSE))),
            Op::Versions => {
                if self.cfg.dont_xchg_versions {
                    // rem_version stays empty: atof("") = 0 < 5.70 (docs/perftest.md §3).
                    let e = PerftestError::VersionTooOld {
                        peer: String::new(),
                    };
                    return Err(self.fail(e));
                }
                let mine = if self.cfg.offer_selective_repeat {
                    encode_version_offering_sr(VERSION).map(|b| b.to_vec())
                } else {
                    encode_version(VERSION).ok().map(|b| b.to_vec())
                }
                .unwrap_or_default();
                self.push_pair(mine, VERSION_LEN, Target::Version, X_SP);
                self.after = Some(After::VersionCheck);
            }
            Op::SysData => {
                // check_sys_data: only for peers ≥ 5.32 (double comparison).
                if !self.cfg.dont_xchg_versions && self.peer_version_value() >= 5.32 {
                    self.push_pair(
                        encode_i32(self.sys.page_size).to_vec(),
                        SYS_DATA_LEN,
                        Target::CycleBuffer,
                        PAGE,
                    );
                    self.push_pair(
                        encode_i32(self.sys.cache_line).to_vec(),
                        SYS_DATA_LEN,
                        Target::CacheLine,
                        CACHE,
                    );
                    self.after = Some(After::SysMax);
                }
            }
            Op::MtuExchange => {
                // check_mtu compares a float copy of atof(peer version).
                let v = self.peer_version_value() as f32;
                if !self.cfg.dont_xchg_versions && f64::from(v) >= 5.1 {
                    let len = if f64::from(v) >= 5.31 {
                        MTU_LEN
                    } else {
                        MTU_LEN_LEGACY
                    };
                    self.push_pair(encode_mtu(self.sys.mtu, len), len, Target::Mtu, X_SP);
                    self.after = Some(After::MtuPick);
                }
                // xchg_bw_reports takes the peer version as a float, too.
                self.layout.wide_iters = f64::from(v) >= 5.33;
            }
            Op::Negotiated => {
                let mut notice = None;
                if self.cfg.connection == Connection::Ud && self.size > u64::from(self.mtu.bytes())
                {
                    if self.cfg.run_all || !self.cfg.size_explicit {
                        notice = Some(format!(
                            " Max msg size in UD is MTU {}\n Changing to this MTU",
                            self.mtu.bytes()
                        ));
                        self.size = u64::from(self.mtu.bytes());
                    } else {
                        let e = PerftestError::UdSizeAboveMtu {
                            mtu: u64::from(self.mtu.bytes()),
                        };
                        return Err(self.fail(e));
                    }
                }
                self.build_plan();
                self.wait = Wait::LocalKeys;
                return Ok(Some(Action::Event(Event::Negotiated(Negotiated {
                    peer_version: self.peer_version.clone().unwrap_or(PeerVersion {
                        text: String::new(),
                        value: 0.0,
                    }),
                    cycle_buffer: self.cycle_buffer,
                    cache_line: self.cache_line,
                    peer_cycle_buffer: self.peer_cycle_buffer,
                    peer_cache_line: self.peer_cache_line,
                    peer_mtu: self.peer_mtu,
                    mtu: self.mtu,
                    size: self.size,
                    notice,
                    selective_repeat: self.cfg.offer_selective_repeat
                        && self.peer_offers_sr
                        && self.cfg.connection == Connection::Rc,
                }))));
            }
            Op::Keys {
                label: KeyLabel::Handshake,
                context,
            } => {
                self.push_pair(vec![0; KEY_LEN_CM], KEY_LEN_CM, Target::Handshake, context);
            }
            Op::Keys { label, context } => {
                let n = if label == KeyLabel::Round {
                    self.cfg.qps()
                } else {
                    1
                };
                for qp in 0..n {
                    let mine = self.key_bytes(qp);
                    self.push_pair(mine, self.key_len(), Target::Key(qp), context);
                }
            }
            Op::GidCheck => {
                let mine = self.local_keys.first().map(|k| is_v4_mapped(&k.gid));
                let peer = self.remote_keys.first().map(|k| is_v4_mapped(&k.gid));
                if mine != peer {
                    return Err(self.fail(PerftestError::GidTypeMismatch));
                }
            }
            Op::Connect => {
                return Ok(Some(Action::Event(Event::Connect {
                    remote: self.remote_keys.clone(),
                })))
            }
            Op::Addresses => {
                return Ok(Some(Action::Event(Event::Addresses {
                    local: self.local_keys.clone(),
                    remote: self.remote_keys.clone(),
                })))
            }
            Op::Prepare(size) => return Ok(Some(Action::Event(Event::Prepare { size }))),
            Op::Run(size) => {
                self.wait = Wait::RunResult;
                return Ok(Some(Action::Event(Event::Run { size })));
            }
            Op::Report { event } => {
                for (i, field) in self
                    .my_report
                    .encode_fields(self.layout)
                    .into_iter()
                    .enumerate()
                {
                    let len = self.layout.field_len(i);
                    self.push_pair(field, len, Target::ReportField(i), X_SP);
                }
                self.peer_report = BwReport::default();
                self.after = Some(After::Report(event));
            }
            Op::Done { context } => {
                self.last_write = Some(LastWrite {
                    class: MsgClass::Done,
                    context,
                });
                return Ok(Some(Action::Write(DONE.to_vec())));
            }
            Op::Finish => {
                self.ops.clear();
                self.wait = Wait::Done;
                return Ok(Some(Action::Finished));
            }
        }
        Ok(None)
    }

    fn run_after(&mut self, after: After) -> Result<Option<Action>, PerftestError> {
        match after {
            After::VersionCheck => {
                let value = self.peer_version_value();
                // `atof(rem_version) < 5.70`: NaN passes, as in C.
                if value < MIN_PEER_VERSION {
                    let peer = self
                        .peer_version
                        .as_ref()
                        .map(|v| v.text.clone())
                        .unwrap_or_default();
                    return Err(self.fail(PerftestError::VersionTooOld { peer }));
                }
            }
            After::SysMax => {
                if let Some(p) = self.peer_cycle_buffer {
                    self.cycle_buffer = self.cycle_buffer.max(p);
                }
                if let Some(p) = self.peer_cache_line {
                    self.cache_line = self.cache_line.max(p);
                }
            }
            After::MtuPick => {
                // The peer's value wins only if valid and smaller (docs/perftest.md §3 M4).
                if let Some(peer) = self.peer_mtu.and_then(super::msg::mtu_from_enum) {
                    if peer < self.sys.mtu {
                        self.mtu = peer;
                    }
                }
            }
            After::Report(event) => {
                let peer = self.peer_report;
                match event {
                    ReportEvent::None => {}
                    ReportEvent::PeerOnly => {
                        return Ok(Some(Action::Event(Event::Report { mine: None, peer })))
                    }
                    ReportEvent::Both => {
                        return Ok(Some(Action::Event(Event::Report {
                            mine: Some(self.my_report),
                            peer,
                        })))
                    }
                }
            }
        }
        Ok(None)
    }

    /// Hands over the bytes of the read requested by `Action::Read(n)` (exactly `n`).
    pub fn received(&mut self, bytes: &[u8]) -> Result<(), PerftestError> {
        let Wait::Read(n) = self.wait else {
            return Err(PerftestError::Misuse("received without Action::Read"));
        };
        if bytes.len() != n {
            return Err(PerftestError::Misuse(
                "received: length differs from Action::Read",
            ));
        }
        let Some(pair) = self.pairs.front() else {
            return Err(self.fail(PerftestError::Misuse("received with no exchange pending")));
        };
        let (target, context) = (pair.target, pair.context);
        self.wait = Wait::Nothing;
        match target {
            Target::Version => {
                let v = decode_version(bytes).map_err(|_| PerftestError::Misuse("VERSION length"));
                self.peer_offers_sr = offers_selective_repeat(bytes);
                match v {
                    Ok(v) => self.peer_version = Some(v),
                    Err(e) => return Err(self.fail(e)),
                }
            }
            Target::CycleBuffer => self.peer_cycle_buffer = decode_i32(bytes).ok(),
            Target::CacheLine => self.peer_cache_line = decode_i32(bytes).ok(),
            Target::Mtu => self.peer_mtu = decode_mtu(bytes).ok(),
            Target::Handshake => {}
            Target::Key(qp) => {
                let decoded = if self.cfg.rdma_cm {
                    KeyMessage::decode_cm(bytes)
                } else if self.cfg.use_gid {
                    KeyMessage::decode(bytes)
                } else {
                    KeyMessage::decode_no_gid(bytes)
                };
                match decoded {
                    Ok(k) => {
                        if let Some(slot) = self.remote_keys.get_mut(qp) {
                            *slot = k;
                        }
                    }
                    Err(error) => {
                        let e = PerftestError::BadKey {
                            role: self.role,
                            context,
                            error,
                        };
                        return Err(self.fail(e));
                    }
                }
            }
            Target::ReportField(i) => {
                // Any bit pattern is a valid report field.
                let _ = self.peer_report.set_field(i, bytes);
            }
        }
        match self.role {
            Role::Client => {
                self.pairs.pop_front();
                self.phase = Phase::Start;
            }
            Role::Server => self.phase = Phase::GotRead,
        }
        Ok(())
    }

    /// The error for a read that ended after `got` bytes (`cause`: the I/O error, or
    /// `None` when the peer closed). The exchange is over after this.
    pub fn read_failed(&mut self, got: usize, cause: Option<std::io::Error>) -> PerftestError {
        let (class, context, want) = match self.pairs.front() {
            Some(p) => (p.class, p.context, p.peer_len),
            None => (MsgClass::Data, X, 0),
        };
        let e = PerftestError::Read {
            class,
            role: self.role,
            context,
            got,
            want,
            cause: cause.map(|c| c.to_string()),
        };
        self.fail(e)
    }

    /// Reports a failed write of the last `Action::Write`. A reset or broken pipe while
    /// writing DONE is success: the peer has already written its own DONE and closed
    /// (docs/perftest.md §4 "Connection end"). Anything else ends the exchange with an error.
    pub fn write_failed(&mut self, err: std::io::Error) -> Result<(), PerftestError> {
        use std::io::ErrorKind;
        let last = self.last_write.unwrap_or(LastWrite {
            class: MsgClass::Data,
            context: X,
        });
        if last.class == MsgClass::Done
            && matches!(
                err.kind(),
                ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            )
        {
            return Ok(());
        }
        let e = PerftestError::Write {
            class: last.class,
            role: self.role,
            context: last.context,
            cause: err.to_string(),
        };
        Err(self.fail(e))
    }

    /// Appends everything after M1–M4 for this test and role (docs/perftest.md §4.1; perftest's
    /// `main()` of each tool).
    fn build_plan(&mut self) {
        let cfg = &self.cfg;
        let client = self.role == Role::Client;
        let duplex = cfg.duplex();
        let sizes = cfg.sweep_sizes(self.mtu, self.size);
        let mut plan: Vec<Op> = Vec::new();
        let keys = |context| Op::Keys {
            label: KeyLabel::Round,
            context,
        };
        let sync = |context| Op::Keys {
            label: KeyLabel::Sync,
            context,
        };
        let init = |context| Op::Keys {
            label: KeyLabel::Init,
            context,
        };
        let close = |context| Op::Keys {
            label: KeyLabel::Close,
            context,
        };
        match (cfg.kind, cfg.verb) {
            (TestKind::Bw, Verb::Write | Verb::Read | Verb::Atomic) => {
                let first = if cfg.verb == Verb::Write { X_SP } else { X };
                plan.extend([
                    keys(first),
                    Op::GidCheck,
                    Op::Connect,
                    keys(X_SP),
                    Op::Addresses,
                    sync(first), // SYNC-RTR
                ]);
                if !client && !duplex {
                    // The server only waits for the client's end of test.
                    plan.extend([
                        sync(X_SP), // SYNC-END
                        Op::Report {
                            event: ReportEvent::PeerOnly,
                        },
                        close(CLOSE),
                        Op::Done { context: CLOSE },
                        Op::Finish,
                    ]);
                } else {
                    let sweep = cfg.run_all && cfg.verb != Verb::Atomic;
                    for &size in &sizes {
                        plan.push(Op::Prepare(size));
                        if duplex {
                            plan.push(sync(SYNC)); // SYNC-PRE
                        }
                        plan.push(Op::Run(size));
                        if duplex && sweep {
                            plan.push(sync(SYNC)); // SYNC-POST
                        }
                        if duplex {
                            plan.push(Op::Report {
                                event: ReportEvent::Both,
                            });
                        }
                    }
                    if client && !duplex {
                        plan.extend([
                            sync(X_SP), // SYNC-END
                            Op::Report {
                                event: ReportEvent::None,
                            },
                        ]);
                    }
                    plan.extend([close(CLOSE), Op::Done { context: CLOSE }, Op::Finish]);
                }
            }
            (TestKind::Bw, Verb::Send) => {
                plan.extend([
                    keys(X),
                    Op::GidCheck,
                    Op::Connect,
                    sync(X), // SYNC-RTR
                    keys(X_SP),
                    Op::Addresses,
                ]);
                for &size in &sizes {
                    plan.extend([Op::Prepare(size), sync(X), Op::Run(size)]); // SYNC-PRE
                    if duplex && !cfg.duration {
                        plan.push(Op::Report {
                            event: ReportEvent::Both,
                        });
                    }
                    if cfg.run_all {
                        plan.push(sync(X)); // SYNC-POST
                    }
                }
                plan.extend([
                    close(CLOSE_SEND_BW),
                    Op::Done {
                        context: CLOSE_SEND_BW,
                    },
                    Op::Finish,
                ]);
            }
            (TestKind::Lat, Verb::Write) => {
                plan.extend([
                    init(X), // INIT
                    keys(X),
                    Op::GidCheck,
                    Op::Connect,
                    keys(X_SP),
                    Op::Addresses,
                    sync(X), // SYNC-RTR
                ]);
                for &size in &sizes {
                    plan.extend([Op::Prepare(size), Op::Run(size)]);
                }
                // ib_write_lat ends with a plain close: no CLOSE, no DONE.
                plan.push(Op::Finish);
            }
            (TestKind::Lat, Verb::Read | Verb::Atomic) => {
                plan.extend([
                    init(X), // INIT
                    keys(X),
                    Op::GidCheck,
                    Op::Connect,
                    keys(X_SP),
                    Op::Addresses,
                    sync(X), // SYNC-RTR
                ]);
                if client {
                    for &size in &sizes {
                        plan.extend([Op::Prepare(size), Op::Run(size)]);
                    }
                }
                plan.extend([close(CLOSE), Op::Done { context: CLOSE }, Op::Finish]);
            }
            (TestKind::Lat, Verb::Send) => {
                plan.extend([
                    keys(X),
                    Op::GidCheck,
                    Op::Connect,
                    sync(X), // SYNC-RTR
                    keys(X_SP),
                    Op::Addresses,
                ]);
                for &size in &sizes {
                    plan.extend([Op::Prepare(size), sync(X), Op::Run(size)]); // SYNC-PRE
                }
                plan.extend([
                    close(CLOSE_SEND_LAT),
                    Op::Done {
                        context: CLOSE_SEND_LAT,
                    },
                    Op::Finish,
                ]);
            }
        }
        if cfg.rdma_cm {
            // rdma_cm connected the QPs already: no GID check, no QP transitions, and the
            // exchange ends without DONE (ctx_close_connection writes it only over TCP).
            plan.retain(|op| !matches!(op, Op::GidCheck | Op::Connect | Op::Done { .. }));
        }
        self.ops.extend(plan);
    }
}

/// The list of exchanges (both directions as one pair) this side will make after M1–M4,
/// by name, for a peer of version 6.06 and the given MTU: a readable form of the plan,
/// for documentation and tests. Names: `K` (KEY round, `×N` for N QPs), `INIT`, `SYNC`,
/// `CLOSE`, `REPORT`, `DONE` (this side's write only), `run(size)`.
pub fn describe_plan(cfg: &BenchConfig, role: Role, mtu: Mtu) -> Vec<String> {
    let sys = LocalSystem {
        mtu,
        ..LocalSystem::default()
    };
    let mut p = Perftest::new(cfg.clone(), role, sys);
    p.peer_version = Some(PeerVersion {
        text: VERSION.to_string(),
        value: 6.06,
    });
    p.build_plan();
    let n = cfg.qps();
    let mut out = Vec::new();
    for op in &p.ops {
        match op {
            Op::Keys { label, .. } => out.push(match label {
                KeyLabel::Round if n > 1 => format!("K×{n}"),
                KeyLabel::Round => "K".to_string(),
                KeyLabel::Init => "INIT".to_string(),
                KeyLabel::Sync => "SYNC".to_string(),
                KeyLabel::Close => "CLOSE".to_string(),
                KeyLabel::Handshake => "HS".to_string(),
            }),
            Op::Run(size) => out.push(format!("run({size})")),
            Op::Report { .. } => out.push("REPORT".to_string()),
            Op::Done { .. } => out.push("DONE".to_string()),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes one side writes, from the plan (docs/perftest.md §4.1 "Byte totals").
    fn bytes(cfg: &BenchConfig, role: Role) -> usize {
        let n = cfg.qps();
        26 + describe_plan(cfg, role, Mtu::Mtu1024)
            .iter()
            .map(|s| match s.as_str() {
                "INIT" | "SYNC" | "CLOSE" | "K" => 108,
                s if s.starts_with("K×") => 108 * n,
                "REPORT" => 40,
                "DONE" => 5,
                _ => 0,
            })
            .sum::<usize>()
    }

    fn cfg(verb: Verb, kind: TestKind, f: impl FnOnce(&mut BenchConfig)) -> BenchConfig {
        let mut c = BenchConfig::new(verb, kind);
        f(&mut c);
        c
    }

    #[test]
    fn byte_totals_of_the_reference() {
        use TestKind::{Bw, Lat};
        use Verb::{Atomic, Read, Send, Write};
        let cases = [
            (cfg(Write, Bw, |_| {}), 611),
            (cfg(Write, Bw, |c| c.num_qps = 2), 827),
            (cfg(Write, Bw, |c| c.bidirectional = true), 611),
            (cfg(Write, Bw, |c| c.run_all = true), 611),
            (cfg(Read, Bw, |_| {}), 611),
            (cfg(Atomic, Bw, |_| {}), 611),
            (cfg(Send, Bw, |_| {}), 571),
            (cfg(Send, Bw, |c| c.connection = Connection::Ud), 571),
            (cfg(Send, Bw, |c| c.bidirectional = true), 611),
            (
                cfg(Send, Bw, |c| {
                    c.connection = Connection::Ud;
                    c.run_all = true;
                }),
                2623,
            ),
            (cfg(Write, Lat, |_| {}), 458),
            (cfg(Read, Lat, |_| {}), 571),
            (cfg(Send, Lat, |_| {}), 571),
        ];
        for (c, total) in &cases {
            for role in [Role::Client, Role::Server] {
                assert_eq!(bytes(c, role), *total, "{} {role}", c.tool_name());
            }
        }
    }

    #[test]
    fn plans_read_like_the_reference() {
        let plan = |c: &BenchConfig, r| describe_plan(c, r, Mtu::Mtu1024).join(" ");
        let w = cfg(Verb::Write, TestKind::Bw, |_| {});
        assert_eq!(
            plan(&w, Role::Client),
            "K K SYNC run(65536) SYNC REPORT CLOSE DONE"
        );
        assert_eq!(plan(&w, Role::Server), "K K SYNC SYNC REPORT CLOSE DONE");
        let wb = cfg(Verb::Write, TestKind::Bw, |c| {
            c.bidirectional = true;
            c.num_qps = 2;
        });
        assert_eq!(
            plan(&wb, Role::Server),
            "K×2 K×2 SYNC SYNC run(65536) REPORT CLOSE DONE"
        );
        let wab = cfg(Verb::Write, TestKind::Bw, |c| {
            c.bidirectional = true;
            c.run_all = true;
        });
        assert!(plan(&wab, Role::Client)
            .starts_with("K K SYNC SYNC run(2) SYNC REPORT SYNC run(4) SYNC REPORT"));
        let s = cfg(Verb::Send, TestKind::Bw, |_| {});
        assert_eq!(
            plan(&s, Role::Server),
            "K SYNC K SYNC run(65536) CLOSE DONE"
        );
        let sd = cfg(Verb::Send, TestKind::Bw, |c| {
            c.bidirectional = true;
            c.duration = true;
        });
        assert_eq!(
            plan(&sd, Role::Client),
            "K SYNC K SYNC run(65536) CLOSE DONE"
        );
        let wl = cfg(Verb::Write, TestKind::Lat, |_| {});
        assert_eq!(plan(&wl, Role::Client), "INIT K K SYNC run(2)");
        let rl = cfg(Verb::Read, TestKind::Lat, |_| {});
        assert_eq!(plan(&rl, Role::Server), "INIT K K SYNC CLOSE DONE");
        assert_eq!(plan(&rl, Role::Client), "INIT K K SYNC run(2) CLOSE DONE");
        let al = cfg(Verb::Atomic, TestKind::Lat, |c| c.run_all = true);
        assert_eq!(plan(&al, Role::Client), "INIT K K SYNC run(8) CLOSE DONE");
        let sl = cfg(Verb::Send, TestKind::Lat, |c| c.run_all = true);
        assert!(plan(&sl, Role::Client).starts_with("K SYNC K SYNC run(2) SYNC run(4)"));
        assert!(plan(&sl, Role::Client).ends_with("SYNC run(8388608) CLOSE DONE"));
    }

    #[test]
    fn misuse_is_an_error_not_a_panic() {
        let mut p = Perftest::new(
            BenchConfig::new(Verb::Send, TestKind::Lat),
            Role::Client,
            LocalSystem::default(),
        );
        assert!(matches!(
            p.received(&[0; 16]),
            Err(PerftestError::Misuse(_))
        ));
        assert!(matches!(
            p.set_local_keys(vec![]),
            Err(PerftestError::Misuse(_))
        ));
        assert!(matches!(
            p.run_complete(None),
            Err(PerftestError::Misuse(_))
        ));
        let first = p.poll().expect("first action");
        assert!(
            matches!(&first, Action::Write(b) if b.as_slice() == b"6.06\0\0\0\0\0\0\0\0\0\0\0\0")
        );
        assert_eq!(p.poll().expect("read"), Action::Read(16));
        assert_eq!(p.poll().expect("still read"), Action::Read(16));
        assert!(matches!(
            p.received(&[0; 15]),
            Err(PerftestError::Misuse(_))
        ));
        // A peer version of NaN passes the 5.70 check (as in C) and then skips M2–M4.
        p.received(b"nan\0\0\0\0\0\0\0\0\0\0\0\0\0")
            .expect("accepted");
        let next = p.poll().expect("negotiated");
        let Action::Event(Event::Negotiated(n)) = next else {
            panic!("expected Negotiated, got {next:?}");
        };
        assert!(n.peer_version.value.is_nan());
        assert_eq!((n.peer_cycle_buffer, n.peer_mtu), (None, None));
        assert!(matches!(p.poll(), Err(PerftestError::Misuse(_))));
        let too_wide = KeyMessage {
            qpn: 1 << 24,
            ..KeyMessage::default()
        };
        assert!(p.set_local_keys(vec![too_wide]).is_err());
        p.set_local_keys(vec![KeyMessage::default()])
            .expect("one key");
        assert!(matches!(p.poll(), Ok(Action::Write(b)) if b.len() == KEY_LEN));
    }

    #[test]
    fn ud_size_above_mtu() {
        let mut c = BenchConfig::new(Verb::Send, TestKind::Bw);
        c.connection = Connection::Ud;
        c.size = 4096;
        c.size_explicit = true;
        let mut peer = b"6.06\0\0\0\0\0\0\0\0\0\0\0\0".to_vec();
        peer.extend([0, 0, 16, 0, 0, 0, 0, 64, b'3', 0]);
        let mut stream = crate::fuzzing::MemStream::new(&peer, 3);
        let mut hooks = crate::fuzzing::FixedHooks { qps: 1, runs: 0 };
        let mut p = Perftest::new(c.clone(), Role::Server, LocalSystem::default());
        let e = super::super::run_exchange(&mut stream, &mut p, &mut hooks)
            .expect_err("4096 > 1024 with an explicit -s");
        assert_eq!(stream.writes, 4, "M1–M4 were exchanged first");
        assert!(matches!(e, PerftestError::UdSizeAboveMtu { mtu: 1024 }));
        assert_eq!(
            e.to_string(),
            " Max message size in UD cannot be greater than MTU \n Couldn't get context for the device"
        );
        // Without an explicit size (or with -a) the size is clamped instead.
        c.size_explicit = false;
        let mut stream = crate::fuzzing::MemStream::new(&peer, 3);
        let mut p = Perftest::new(c, Role::Server, LocalSystem::default());
        let e = super::super::run_exchange(&mut stream, &mut p, &mut hooks)
            .expect_err("then the peer has nothing more to say");
        assert!(matches!(
            e,
            PerftestError::Read {
                class: MsgClass::Keys,
                got: 0,
                ..
            }
        ));
    }

    /// Drives a client and a server machine against each other in memory; returns the
    /// lengths each wrote, in order, and both machines.
    fn cross_drive(cfg: &BenchConfig) -> (Vec<usize>, Vec<usize>, Perftest, Perftest) {
        let key = |qpn: u32| KeyMessage {
            lid: 0,
            out_reads: 1,
            qpn,
            psn: 0x12345,
            rkey: 0xabcd,
            vaddr: 0x7f00_0000_1000,
            gid: [
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, qpn as u8,
            ],
            srqn: 0,
        };
        let mut m = [
            Perftest::new(cfg.clone(), Role::Client, LocalSystem::default()),
            Perftest::new(cfg.clone(), Role::Server, LocalSystem::default()),
        ];
        let mut wire: [VecDeque<Vec<u8>>; 2] = [VecDeque::new(), VecDeque::new()];
        let mut lens: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
        let mut finished = [false, false];
        for _ in 0..10_000 {
            if finished == [true, true] {
                break;
            }
            for side in 0..2 {
                if finished[side] {
                    continue;
                }
                let action = m[side].poll().expect("no error");
                match action {
                    Action::Sleep(_) => {}
                    Action::Write(b) => {
                        lens[side].push(b.len());
                        wire[1 - side].push_back(b);
                    }
                    Action::Read(n) => {
                        if let Some(b) = wire[side].pop_front() {
                            assert_eq!(b.len(), n, "side {side} read");
                            m[side].received(&b).expect("received");
                        }
                    }
                    Action::Event(Event::Negotiated(_)) => {
                        let k = (0..cfg.qps()).map(|i| key(0x20 * (side as u32 + 1) + i as u32));
                        m[side].set_local_keys(k.collect()).expect("keys");
                    }
                    Action::Event(Event::Run { .. }) => m[side].run_complete(None).expect("run"),
                    Action::Event(_) => {}
                    Action::Finished => finished[side] = true,
                }
            }
        }
        assert_eq!(finished, [true, true], "both sides finish");
        let [c, s] = m;
        let [lc, ls] = lens;
        (lc, ls, c, s)
    }

    #[test]
    fn rdma_cm_exchange_is_binary_keys_around_the_cm_connection_without_done() {
        // ib_write_bw -R: M1–M4, HS, (QPs connected by rdma_cm), HS, K, K, SYNC-RTR, run,
        // SYNC-END, REPORT, CLOSE — every KEY 56 bytes, no DONE (docs/perftest.md §8).
        let cm = cfg(Verb::Write, TestKind::Bw, |c| c.rdma_cm = true);
        let (client, server, c, s) = cross_drive(&cm);
        let expect = [16, 4, 4, 2, 56, 56, 56, 56, 56, 56, 8, 8, 8, 8, 8, 56];
        assert_eq!(client, expect);
        assert_eq!(server, expect);
        assert_eq!(c.remote_keys()[0].qpn, 0x40);
        assert_eq!(s.remote_keys()[0].qpn, 0x20);
        assert_eq!(s.remote_keys()[0].gid[15], 0x20);
        let plan = describe_plan(&cm, Role::Client, Mtu::Mtu1024);
        assert_eq!(plan.first().map(String::as_str), Some("HS"));
        assert!(!plan.iter().any(|s| s == "DONE"), "{plan:?}");
        // The same test over TCP ends with DONE and 108-byte keys.
        let tcp = cfg(Verb::Write, TestKind::Bw, |_| {});
        let (client, _, _, _) = cross_drive(&tcp);
        assert_eq!(client.last(), Some(&5));
        assert!(client.contains(&108));
    }

    #[test]
    fn rdma_cm_key_round_trips_and_refuses_wide_fields() {
        let k = KeyMessage {
            lid: 0,
            out_reads: 16,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234_5678,
            vaddr: 0x7f12_3456_7000,
            gid: [1; 16],
            srqn: 0,
        };
        let b = k.encode_cm();
        assert_eq!(&b[8..12], &[0, 0, 0, 0x11]);
        assert_eq!(&b[24..32], &0x7f12_3456_7000u64.to_be_bytes());
        assert_eq!(KeyMessage::decode_cm(&b), Ok(k));
        let mut wide = b;
        wide[8] = 1; // QPN 0x01000011
        assert!(KeyMessage::decode_cm(&wide).is_err());
        assert!(KeyMessage::decode_cm(&b[..55]).is_err());
    }
}
