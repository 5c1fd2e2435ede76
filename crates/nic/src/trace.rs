//! The command trace of a process (`UROCE_TRACE`; docs/operations.md §2): one line per
//! command a context sends to a device — the verb, its handles and key arguments, and the
//! result (the new handles and keys) or the errno with the control plane's reason record —
//! as `strace` shows a process's system calls. Written by the control-plane thread after it
//! executed the command, from the request and reply bytes (the same decoders as the
//! control plane and the library: `abi::decode_request`, `abi::Reply::parse`), so tracing
//! changes nothing the command does, and costs one `Option` check per command when off.
//!
//! `UROCE_TRACE` = `stderr` | `stdout` | a file path (appended to; `%p` becomes the process
//! ID). Every device of the process writes to the same destination, whole lines each.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use abi::uverbs::{self, cm_op, QpDest};
use abi::{Command, QpAttrMask, QpState, Reply, Request};

use crate::state::CtxId;

/// The environment variable that switches tracing on.
pub const ENV: &str = "UROCE_TRACE";

/// Lines queued for one attached tool before new ones are dropped (counted).
pub(crate) const SUB_QUEUE: usize = 4096;

/// Where `UROCE_TRACE` lines go.
enum Out {
    Stderr,
    Stdout,
    File(File),
}

/// A `uroce trace` attached to this process (`crate::attach`): the lines it wants, queued.
pub(crate) struct Sub {
    /// Only this device's lines.
    device: Option<String>,
    /// Fast-path events too, at most `fast_rate` a second.
    fast: bool,
    fast_rate: u32,
    tx: SyncSender<String>,
    /// Lines lost because the queue was full.
    pub(crate) dropped: AtomicU64,
    /// Fast-path sampling: the current one-second window, events taken and skipped in it.
    window: Mutex<(Option<Instant>, u32, u64)>,
}

impl Sub {
    fn wants(&self, dev: &str) -> bool {
        self.device.as_deref().is_none_or(|d| d == dev)
    }

    fn push(&self, line: String) {
        if self.tx.try_send(line).is_err() {
            self.dropped.fetch_add(1, Relaxed);
        }
    }
}

/// The process's tracer, shared by its devices: the `UROCE_TRACE` destination and the
/// attached tools. [`active`] is one relaxed load when neither is there.
pub(crate) struct Tracer {
    on: AtomicBool,
    env: Mutex<Option<Out>>,
    env_tried: AtomicBool,
    subs: RwLock<Vec<Arc<Sub>>>,
}

static TRACER: Tracer = Tracer {
    on: AtomicBool::new(false),
    env: Mutex::new(None),
    env_tried: AtomicBool::new(false),
    subs: RwLock::new(Vec::new()),
};

/// Whether an attached tool wants fast-path events (the engine's only test otherwise).
static FAST_ON: AtomicBool = AtomicBool::new(false);

/// Open the destination `UROCE_TRACE` names, once per process (on the first device's
/// start); a destination that cannot be opened is reported on stderr and not used.
pub(crate) fn start_from_env() {
    if TRACER.env_tried.swap(true, Relaxed) {
        return;
    }
    let Some(spec) = std::env::var(ENV).ok().filter(|s| !s.is_empty()) else {
        return;
    };
    let pid = std::process::id();
    let out = match spec.as_str() {
        "stderr" | "2" | "-" => Out::Stderr,
        "stdout" | "1" => Out::Stdout,
        path => {
            let path = path.replace("%p", &pid.to_string());
            match File::options().append(true).create(true).open(&path) {
                Ok(f) => Out::File(f),
                Err(e) => {
                    eprintln!("uroce: {ENV}={spec}: cannot open {path}: {e}; not tracing");
                    return;
                }
            }
        }
    };
    *TRACER.env.lock().unwrap_or_else(PoisonError::into_inner) = Some(out);
    TRACER.refresh();
}

/// The tracer, if anything traces this process.
#[inline]
pub(crate) fn active() -> Option<&'static Tracer> {
    TRACER.on.load(Relaxed).then_some(&TRACER)
}

/// Whether fast-path events are wanted (one relaxed load).
#[inline]
pub(crate) fn fast_on() -> bool {
    FAST_ON.load(Relaxed)
}

/// A fast-path event of device `dev`: `what` (built only if some tool takes it) is the
/// text after the prefix, e.g. `CQE cq=1 qpn=0x11 wr_id=7 status=SUCCESS`.
pub(crate) fn fast(dev: &str, what: impl FnOnce() -> String) {
    let subs = TRACER.subs.read().unwrap_or_else(PoisonError::into_inner);
    let mut what = Some(what);
    let mut text: Option<String> = None;
    for s in subs.iter().filter(|s| s.fast && s.wants(dev)) {
        let now = Instant::now();
        let skipped_before = {
            let mut w = s.window.lock().unwrap_or_else(PoisonError::into_inner);
            let fresh =
                w.0.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1));
            let skipped = if fresh {
                let k = w.2;
                *w = (Some(now), 0, 0);
                k
            } else {
                0
            };
            if w.1 >= s.fast_rate {
                w.2 += 1;
                continue;
            }
            w.1 += 1;
            skipped
        };
        if text.is_none() {
            text = what.take().map(|f| f());
        }
        let body = text.as_deref().unwrap_or("");
        if skipped_before > 0 {
            s.push(format!(
                "{}SAMPLED {skipped_before} fast-path events not shown in the last second (fast_rate {})\n",
                prefix_fast(dev),
                s.fast_rate
            ));
        }
        s.push(format!("{}{body}\n", prefix_fast(dev)));
    }
}

fn prefix_fast(dev: &str) -> String {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "uroce-fast {}.{:06} pid={} {} ",
        t.as_secs(),
        t.subsec_micros(),
        std::process::id(),
        dev
    )
}

/// Attach a tool: lines of `device` (every device if `None`), and fast-path events if
/// `fast`, queued (bounded) on the returned receiver until [`unsubscribe`].
pub(crate) fn subscribe(
    device: Option<String>,
    fast: bool,
    fast_rate: u32,
) -> (Arc<Sub>, Receiver<String>) {
    let (tx, rx) = mpsc::sync_channel(SUB_QUEUE);
    let sub = Arc::new(Sub {
        device,
        fast,
        fast_rate: fast_rate.max(1),
        tx,
        dropped: AtomicU64::new(0),
        window: Mutex::new((None, 0, 0)),
    });
    TRACER
        .subs
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .push(sub.clone());
    TRACER.refresh();
    (sub, rx)
}

/// Detach a tool attached by [`subscribe`].
pub(crate) fn unsubscribe(sub: &Arc<Sub>) {
    TRACER
        .subs
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .retain(|s| !Arc::ptr_eq(s, sub));
    TRACER.refresh();
}

impl Tracer {
    fn refresh(&self) {
        let subs = self.subs.read().unwrap_or_else(PoisonError::into_inner);
        let env = self
            .env
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        FAST_ON.store(subs.iter().any(|s| s.fast), Relaxed);
        self.on.store(env || !subs.is_empty(), Relaxed);
    }

    fn emit(&self, dev: &str, line: &str) {
        {
            let mut g = self.env.lock().unwrap_or_else(PoisonError::into_inner);
            // One write per line (O_APPEND files: lines of several processes do not
            // interleave).
            let _ = match &mut *g {
                None => Ok(()),
                Some(Out::Stderr) => io::stderr().lock().write_all(line.as_bytes()),
                Some(Out::Stdout) => {
                    let mut o = io::stdout().lock();
                    o.write_all(line.as_bytes()).and_then(|_| o.flush())
                }
                Some(Out::File(f)) => f.write_all(line.as_bytes()),
            };
        }
        let subs = self.subs.read().unwrap_or_else(PoisonError::into_inner);
        for s in subs.iter().filter(|s| s.wants(dev)) {
            s.push(line.to_string());
        }
    }

    fn prefix(&self, dev: &str, ctx: CtxId) -> String {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        format!(
            "uroce-trace {}.{:06} pid={} {} ctx={} ",
            t.as_secs(),
            t.subsec_micros(),
            std::process::id(),
            dev,
            ctx
        )
    }

    /// Trace one executed command: `request` as received, `reply` as answered, `took` the
    /// time the control plane spent on it (shown as strace -T does: ` <seconds>`).
    pub(crate) fn command(
        &self,
        dev: &str,
        ctx: CtxId,
        request: &[u8],
        reply: &[u8],
        took: Duration,
    ) {
        let mut line = self.prefix(dev, ctx);
        line.push_str(&describe(request, reply));
        let _ = writeln!(line, " <{:.6}>", took.as_secs_f64());
        self.emit(dev, &line);
    }

    /// Trace the end of a context (its connection closed: everything it held is destroyed).
    pub(crate) fn close(&self, dev: &str, ctx: CtxId) {
        let mut line = self.prefix(dev, ctx);
        line.push_str("CLOSE_CONTEXT (connection closed: its objects are destroyed) = ok\n");
        self.emit(dev, &line);
    }
}

/// `VERB args = result`: the words of one trace line after its prefix.
pub fn describe(request: &[u8], reply: &[u8]) -> String {
    let mut s = String::new();
    let req = abi::decode_request(request);
    match &req {
        Ok((_, r)) => {
            let _ = write!(s, "{}", verb(r));
            args(&mut s, r);
        }
        Err(e) => {
            let word = request
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_ne_bytes);
            let _ = write!(
                s,
                "{} (undecodable: {e})",
                Command(word & abi::cmd::CMD_COMMAND_MASK)
            );
        }
    }
    s.push_str(" = ");
    match Reply::parse(reply) {
        Ok(Reply {
            result: Ok(body), ..
        }) => {
            s.push_str("ok");
            if let Ok((_, r)) = &req {
                result(&mut s, r, body);
            }
        }
        Ok(Reply {
            result: Err(errno),
            reason,
            ..
        }) => {
            let _ = write!(s, "{errno} (errno {})", errno.0);
            match reason {
                Some(r) => {
                    let _ = write!(s, ": {} [{}]", r.text, r.rule);
                }
                None => s.push_str(" (no reason given)"),
            }
        }
        Err(e) => {
            let _ = write!(s, "? (reply undecodable: {e})");
        }
    }
    s
}

fn verb(r: &Request<'_>) -> String {
    match r {
        Request::Cm(c) => format!("CM_{}", cm_op_name(c.op)),
        r => r.command().to_string(),
    }
}

fn cm_op_name(op: u32) -> String {
    match op {
        cm_op::CREATE_CHANNEL => "CREATE_CHANNEL".into(),
        cm_op::LISTEN => "LISTEN".into(),
        cm_op::CONNECT => "CONNECT".into(),
        cm_op::ACCEPT => "ACCEPT".into(),
        cm_op::REJECT => "REJECT".into(),
        cm_op::ESTABLISH => "ESTABLISH".into(),
        cm_op::DISCONNECT => "DISCONNECT".into(),
        cm_op::DESTROY => "DESTROY".into(),
        cm_op::SIDR_REQUEST => "SIDR_REQUEST".into(),
        cm_op::SIDR_REPLY => "SIDR_REPLY".into(),
        cm_op::NOTIFY => "NOTIFY".into(),
        other => format!("OP_{other}"),
    }
}

/// A 16-byte GID/address as an IP address (IPv4-mapped shown as IPv4).
fn gid(g: &[u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(*g);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

fn dest(s: &mut String, d: &QpDest) {
    let _ = write!(s, " dgid={} sgid_index={}", gid(&d.dgid), d.sgid_index);
    if d.hop_limit != 0 {
        let _ = write!(s, " hop_limit={}", d.hop_limit);
    }
    if d.traffic_class != 0 {
        let _ = write!(s, " tclass={}", d.traffic_class);
    }
}

fn args(s: &mut String, r: &Request<'_>) {
    let _ = match r {
        Request::GetContext(..) | Request::QueryDevice(_) | Request::CreateCompChannel(_) => Ok(()),
        Request::QueryPort(q) => write!(s, " port={}", q.port_num),
        Request::AllocPd(_) => Ok(()),
        Request::DeallocPd(p) => write!(s, " pd={}", p.pd_handle),
        Request::CreateAh(a) => write!(s, " pd={}", a.pd_handle),
        Request::DestroyAh(a) => write!(s, " ah={}", a.ah_handle),
        Request::RegMr(m) => write!(
            s,
            " pd={} addr={:#x} len={} iova={:#x} access={}",
            m.pd_handle,
            m.start,
            m.length,
            m.hca_va,
            abi::AccessFlags(m.access_flags)
        ),
        Request::ReregMr(m) => write!(
            s,
            " mr={} flags={:#x} pd={} addr={:#x} len={} iova={:#x} access={}",
            m.mr_handle,
            m.flags,
            m.pd_handle,
            m.start,
            m.length,
            m.hca_va,
            abi::AccessFlags(m.access_flags)
        ),
        Request::DeregMr(m) => write!(s, " mr={}", m.mr_handle),
        Request::AllocMw(m) => write!(s, " pd={} type={}", m.pd_handle, m.mw_type),
        Request::DeallocMw(m) => write!(s, " mw={}", m.mw_handle),
        Request::CreateCq(c, _) => write!(
            s,
            " cqe={} comp_channel={} comp_vector={}",
            c.cqe, c.comp_channel, c.comp_vector
        ),
        Request::ResizeCq(c, _) => write!(s, " cq={} cqe={}", c.cq_handle, c.cqe),
        Request::DestroyCq(c) => write!(s, " cq={}", c.cq_handle),
        Request::PollCq(c) => write!(s, " cq={} ne={}", c.cq_handle, c.ne),
        Request::ReqNotifyCq(c) => {
            write!(s, " cq={} solicited_only={}", c.cq_handle, c.solicited_only)
        }
        Request::CreateQp(q, _) => {
            let _ = write!(
                s,
                " pd={} type={} send_cq={} recv_cq={}",
                q.pd_handle,
                abi::QpType::raw_name(u32::from(q.qp_type)),
                q.send_cq_handle,
                q.recv_cq_handle
            );
            if q.is_srq != 0 {
                let _ = write!(s, " srq={}", q.srq_handle);
            }
            write!(
                s,
                " max_send_wr={} max_recv_wr={} max_send_sge={} max_recv_sge={} max_inline={} sq_sig_all={}",
                q.max_send_wr,
                q.max_recv_wr,
                q.max_send_sge,
                q.max_recv_sge,
                q.max_inline_data,
                q.sq_sig_all
            )
        }
        Request::QueryQp(q) => write!(s, " qp={} mask={}", q.qp_handle, QpAttrMask(q.attr_mask)),
        Request::ModifyQp(m) => {
            modify_qp(s, m);
            Ok(())
        }
        Request::DestroyQp(q) => write!(s, " qp={}", q.qp_handle),
        Request::PostSend(p, _) => write!(s, " qp={} wrs={}", p.qp_handle, p.wr_count),
        Request::PostRecv(p, _) => write!(s, " qp={} wrs={}", p.qp_handle, p.wr_count),
        Request::PostSrqRecv(p, _) => write!(s, " srq={} wrs={}", p.srq_handle, p.wr_count),
        Request::CreateSrq(c, _) => write!(
            s,
            " pd={} max_wr={} max_sge={} limit={}",
            c.pd_handle, c.max_wr, c.max_sge, c.srq_limit
        ),
        Request::ModifySrq(m) => write!(
            s,
            " srq={} mask={:#x} max_wr={} limit={}",
            m.srq_handle, m.attr_mask, m.max_wr, m.srq_limit
        ),
        Request::QuerySrq(q) => write!(s, " srq={}", q.srq_handle),
        Request::DestroySrq(d) => write!(s, " srq={}", d.srq_handle),
        Request::OpenXrcd(c, _) => write!(s, " fd={} oflags={:#o}", c.fd as i32, c.oflags),
        Request::CloseXrcd(c) => write!(s, " xrcd={}", c.xrcd_handle),
        Request::CreateXsrq(c, _) => write!(
            s,
            " type={} pd={} xrcd={} cq={} max_wr={} max_sge={} limit={}",
            c.srq_type, c.pd_handle, c.xrcd_handle, c.cq_handle, c.max_wr, c.max_sge, c.srq_limit
        ),
        Request::QueryGid(g) => write!(s, " port={} index={}", g.port_num, g.index),
        Request::QueryPkey(p) => write!(s, " port={} index={}", p.port_num, p.index),
        Request::Cm(c) => {
            cm(s, c);
            Ok(())
        }
    };
}

fn modify_qp(s: &mut String, m: &uverbs::ModifyQp) {
    let mask = m.mask();
    let _ = write!(s, " qp={} mask={}", m.qp_handle, mask);
    if m.flags & uverbs::MODIFY_QP_SELECTIVE_REPEAT != 0 {
        let _ = write!(s, " selective_repeat");
    }
    if mask.contains(QpAttrMask::CUR_STATE) {
        let _ = write!(s, " cur_state={}", QpState::raw_name(m.cur_qp_state.into()));
    }
    if mask.contains(QpAttrMask::STATE) {
        let _ = write!(s, " state={}", QpState::raw_name(m.qp_state.into()));
    }
    if mask.contains(QpAttrMask::PORT) {
        let _ = write!(s, " port={}", m.port_num);
    }
    if mask.contains(QpAttrMask::PKEY_INDEX) {
        let _ = write!(s, " pkey_index={}", m.pkey_index);
    }
    if mask.contains(QpAttrMask::ACCESS_FLAGS) {
        let _ = write!(s, " access={}", abi::AccessFlags(m.qp_access_flags));
    }
    if mask.contains(QpAttrMask::QKEY) {
        let _ = write!(s, " qkey={:#x}", m.qkey);
    }
    if mask.contains(QpAttrMask::AV) {
        dest(s, &m.dest);
    }
    if mask.contains(QpAttrMask::PATH_MTU) {
        let _ = write!(s, " path_mtu={}", abi::Mtu::raw_name(m.path_mtu.into()));
    }
    if mask.contains(QpAttrMask::DEST_QPN) {
        let _ = write!(s, " dest_qpn={:#x}", m.dest_qp_num);
    }
    if mask.contains(QpAttrMask::RQ_PSN) {
        let _ = write!(s, " rq_psn={:#x}", m.rq_psn);
    }
    if mask.contains(QpAttrMask::SQ_PSN) {
        let _ = write!(s, " sq_psn={:#x}", m.sq_psn);
    }
    if mask.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) {
        let _ = write!(s, " max_dest_rd_atomic={}", m.max_dest_rd_atomic);
    }
    if mask.contains(QpAttrMask::MAX_QP_RD_ATOMIC) {
        let _ = write!(s, " max_rd_atomic={}", m.max_rd_atomic);
    }
    if mask.contains(QpAttrMask::MIN_RNR_TIMER) {
        let _ = write!(s, " min_rnr_timer={}", m.min_rnr_timer);
    }
    if mask.contains(QpAttrMask::TIMEOUT) {
        let _ = write!(s, " timeout={}", m.timeout);
    }
    if mask.contains(QpAttrMask::RETRY_CNT) {
        let _ = write!(s, " retry_cnt={}", m.retry_cnt);
    }
    if mask.contains(QpAttrMask::RNR_RETRY) {
        let _ = write!(s, " rnr_retry={}", m.rnr_retry);
    }
}

fn cm(s: &mut String, c: &uverbs::CmCmd) {
    if c.id != 0 {
        let _ = write!(s, " id={}", c.id);
    }
    match c.op {
        cm_op::LISTEN => {
            let _ = write!(s, " service_id={:#x} bind={}", c.service_id, gid(&c.bind));
        }
        cm_op::CONNECT => {
            let _ = write!(
                s,
                " peer={} service_id={:#x} qpn={:#x} psn={:#x} private_data={}B",
                gid(&c.peer),
                c.service_id,
                c.qpn,
                c.psn,
                c.pd_len
            );
        }
        cm_op::SIDR_REQUEST => {
            let _ = write!(s, " peer={} service_id={:#x}", gid(&c.peer), c.service_id);
        }
        cm_op::ACCEPT => {
            let _ = write!(
                s,
                " qpn={:#x} psn={:#x} private_data={}B",
                c.qpn, c.psn, c.pd_len
            );
        }
        cm_op::REJECT => {
            let _ = write!(s, " reason={}", c.reason);
        }
        cm_op::SIDR_REPLY => {
            let _ = write!(
                s,
                " status={} qpn={:#x} qkey={:#x}",
                c.status, c.qpn, c.qkey
            );
        }
        _ => {}
    }
    if c.flags & uverbs::CmCmd::FLAG_ECE != 0 {
        let _ = write!(s, " ece_options={:#x}", c.qkey);
    }
}

/// The interesting words of a successful response.
fn result(s: &mut String, r: &Request<'_>, body: &[u8]) {
    fn read<T: zerocopy::FromBytes>(body: &[u8]) -> Option<T> {
        T::read_from_prefix(body).ok().map(|(v, _)| v)
    }
    let _ = match r {
        Request::AllocPd(_) => match read::<uverbs::AllocPdResp>(body) {
            Some(p) => write!(s, " pd={}", p.pd_handle),
            None => Ok(()),
        },
        Request::RegMr(_) => match read::<uverbs::RegMrResp>(body) {
            Some(m) => write!(
                s,
                " mr={} lkey={:#x} rkey={:#x}",
                m.mr_handle, m.lkey, m.rkey
            ),
            None => Ok(()),
        },
        Request::AllocMw(_) => match read::<uverbs::AllocMwResp>(body) {
            Some(m) => write!(s, " mw={} rkey={:#x}", m.mw_handle, m.rkey),
            None => Ok(()),
        },
        Request::ReregMr(_) => match read::<uverbs::ReregMrResp>(body) {
            Some(m) => write!(s, " lkey={:#x} rkey={:#x}", m.lkey, m.rkey),
            None => Ok(()),
        },
        Request::CreateCq(..) => match read::<uverbs::CreateCqResp>(body) {
            Some(c) => write!(s, " cq={} cqe={}", c.cq_handle, c.cqe),
            None => Ok(()),
        },
        Request::CreateQp(..) => match read::<uverbs::CreateQpResp>(body) {
            Some(q) => write!(
                s,
                " qp={} qpn={:#x} max_send_wr={} max_recv_wr={} max_inline={}",
                q.qp_handle, q.qpn, q.max_send_wr, q.max_recv_wr, q.max_inline_data
            ),
            None => Ok(()),
        },
        Request::OpenXrcd(..) => match read::<uverbs::OpenXrcdResp>(body) {
            Some(x) => write!(s, " xrcd={}", x.xrcd_handle),
            None => Ok(()),
        },
        Request::CreateSrq(..) | Request::CreateXsrq(..) => {
            match read::<uverbs::CreateSrqResp>(body) {
                Some(q) => write!(s, " srq={} srqn={:#x}", q.srq_handle, q.srqn),
                None => Ok(()),
            }
        }
        Request::CreateAh(_) => match read::<uverbs::CreateAhResp>(body) {
            Some(a) => write!(s, " ah={}", a.ah_handle),
            None => Ok(()),
        },
        Request::CreateCompChannel(_) => match read::<uverbs::CreateCompChannelResp>(body) {
            Some(c) => write!(s, " fd={}", c.fd),
            None => Ok(()),
        },
        Request::QueryQp(_) => match read::<uverbs::QueryQpResp>(body) {
            Some(q) => write!(s, " state={}", QpState::raw_name(q.qp_state.into())),
            None => Ok(()),
        },
        Request::PollCq(_) => match read::<uverbs::PollCqResp>(body) {
            Some(p) => write!(s, " count={}", p.count),
            None => Ok(()),
        },
        Request::Cm(c) => match read::<uverbs::CmCmdResp>(body) {
            Some(r) if c.op == cm_op::CREATE_CHANNEL => write!(s, " fd={}", r.fd),
            Some(r) if r.id != 0 => write!(s, " id={}", r.id),
            _ => Ok(()),
        },
        _ => Ok(()),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi::uverbs::ModifyQp;
    use abi::{Errno, Rule};
    use zerocopy::IntoBytes;

    fn modify_rts() -> Vec<u8> {
        let m = ModifyQp {
            qp_handle: 3,
            attr_mask: (QpAttrMask::STATE | QpAttrMask::SQ_PSN).0,
            qp_state: QpState::Rts.raw() as u8,
            sq_psn: 0x42,
            ..Default::default()
        };
        let mut req = Vec::new();
        abi::cmd::encode_legacy(Command::MODIFY_QP, m.as_bytes(), &[], 0, &mut req).unwrap();
        req
    }

    #[test]
    fn a_refused_modify_qp_shows_mask_states_errno_and_reason() {
        let req = modify_rts();
        let mut reply = Vec::new();
        abi::cmd::encode_refusal(
            Command::MODIFY_QP.word(),
            Errno::EINVAL,
            Rule::ILLEGAL_TRANSITION,
            "modify_qp: RESET -> RTS is not a legal QP state transition",
            &mut reply,
        );
        assert_eq!(
            describe(&req, &reply),
            "MODIFY_QP qp=3 mask=STATE | SQ_PSN state=RTS sq_psn=0x42 = EINVAL (errno 22): \
             modify_qp: RESET -> RTS is not a legal QP state transition [ILLEGAL_TRANSITION]"
        );
        let mut ok = Vec::new();
        abi::cmd::encode_reply(Command::MODIFY_QP.word(), Ok(&[]), 0, &mut ok);
        assert!(describe(&req, &ok).ends_with("sq_psn=0x42 = ok"));
    }

    #[test]
    fn garbage_is_described_never_panics() {
        let req = modify_rts();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..20_000usize {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut r = req.clone();
            let flips = (x % 5) as usize;
            for k in 0..flips {
                let at = ((x >> (8 * k)) as usize) % r.len();
                r[at] ^= (x >> (3 * k)) as u8 | 1;
            }
            r.truncate(r.len() - (i % 7) * (i % 3));
            let reply: Vec<u8> = (0..(i % 40)).map(|j| (x >> (j % 8)) as u8).collect();
            let line = describe(&r, &reply);
            assert!(line.contains(" = "), "{line}");
            let mut pair = vec![(x % 200) as u8];
            pair.extend_from_slice(&r);
            pair.extend_from_slice(&reply);
            let _ = crate::fuzzing::describe_pair(&pair);
        }
    }
}
