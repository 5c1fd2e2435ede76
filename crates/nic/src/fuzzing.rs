//! Entry points shared by the `nic_commands` cargo-fuzz target and the stable random-input
//! test (`tests/fuzz_commands.rs`): arbitrary command sequences against a live control
//! plane context, through the framing (`ctrl::need`) and the dispatch
//! (`DevState::execute`) the control-plane thread uses for a library's commands — called
//! from the fuzzing thread, so a command costs no thread hand-off and a panic anywhere in
//! the command path is the fuzzer's to see (the control-plane thread would turn it into
//! EIO). The engine thread runs as usual and works on whatever the commands post.
//!
//! [`execute`] opens a context on a dedicated device, runs the input's commands one by one
//! and checks each reply, then closes the context (as a closed connection does) and checks
//! that the device reclaimed everything it created. It panics — a fuzz finding — if a
//! reply is malformed, anything survives the context, a file descriptor leaks, or the
//! engine caught a panic.
//!
//! # The device
//!
//! `nicfuzz0` on 127.77.9.1 is sealed (`DevState::hermetic`): its packets never leave it,
//! and its commands name memory as offsets into a 1 MiB window the harness owns
//! (`dma::AddressSpace::Window`), so no hostile command can make the device touch any
//! other memory of the process — the contract a library normally keeps. Its resource
//! limits are small, so exhaustion paths are reachable. With no context open its handles
//! and keys start over, so every input sees the same numbers.
//!
//! # Input format
//!
//! Byte 0 chooses a prelude the harness runs first: `% 3` = 0: GET_CONTEXT only (doorbell
//! page at window offset [`DOORBELL_AT`]); 1: also a PD (handle 1), an MR over
//! [`MR_AT`]`..+`[`MR_LEN`] with every access right (handle 1, lkey = rkey =
//! [`MR_KEY`]) and a 64-entry CQ (handle 1); 2: also two RC QPs (handles = QPNs 16 and 17,
//! 16 WRs, 4 SGEs, 64 inline bytes) connected to each other and in RTS. Then chunks follow,
//! each a little-endian `u16` header and that many bytes (low 12 bits; truncated at the end
//! of the input) forming one command:
//! * normally its uverbs header is rewritten to frame exactly these bytes;
//! * header bit 15 keeps the header as it is: the message is padded or cut to what it
//!   declares, and one that cannot be framed closes the connection (which ends the input);
//! * header bit 14 first gives the engine ~20 µs to work on what earlier commands posted.
//!
//! Set `NIC_FUZZ_TRACE` to print every command and its result (replaying a finding).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use abi::cmd::{Command, Reply, CMD_FLAG_EXTENDED};
use abi::doorbell::DoorbellLayout;
use abi::fastpath::{recv_wqe_size, send_wqe_size, CQE_BYTES};
use abi::ring::RingLayout;
use abi::shm::SharedMem;
use abi::uverbs::*;
use abi::{AccessFlags, QpAttrMask, Request, SendFlags, WrOpcode};
use zerocopy::{FromBytes, IntoBytes};

use crate::ctrl::{need, Need};
use crate::device::{Device, DeviceHandle};
use crate::dma::AddressSpace;
use crate::registry::start_device_in;
use crate::state::CtxId;
use crate::{sys, DeviceConfig, Limits};

/// Bytes of the memory window the fuzz device's commands address.
pub const WINDOW_LEN: usize = 1 << 20;
/// Window offset of the prelude's doorbell page.
pub const DOORBELL_AT: u64 = 0x1000;
/// Window offset of the prelude's CQ ring (64 CQEs).
pub const CQ_AT: u64 = 0x2000;
/// Window offset where the prelude's QP rings start.
pub const QP_RINGS_AT: u64 = 0x4000;
/// Window offset (and iova) of the prelude's MR.
pub const MR_AT: u64 = 0x1_0000;
/// Length of the prelude's MR.
pub const MR_LEN: u64 = 0x4_0000;
/// The prelude MR's lkey and rkey: the first key of a sealed device (`crate::keys`).
pub const MR_KEY: u32 = 0x106b_2879;
/// QPNs (= handles) of the prelude's two QPs.
pub const QPNS: [u32; 2] = [16, 17];

/// Window offset of the samples' resized CQ ring (128 CQEs).
const RESIZE_AT: u64 = 0x8_0000;
const _: () = assert!(MR_AT + MR_LEN <= RESIZE_AT && RESIZE_AT + 0x4000 <= WINDOW_LEN as u64);
/// Window offset of the samples' XRC rings (an SQ, an XRC SRQ ring, another SQ).
const XRC_AT: u64 = 0x9_0000;
const _: () = assert!(RESIZE_AT + 0x4000 <= XRC_AT && XRC_AT + 0x3_0000 <= WINDOW_LEN as u64);

const NAME: &str = "nicfuzz0";
const ADDR: Ipv4Addr = Ipv4Addr::new(127, 77, 9, 1);
const DOORBELL_SLOTS: u32 = 64;
const QP_DEPTH: u32 = 16;
const RAW: u16 = 0x8000;
const PAUSE: u16 = 0x4000;
const LEN_MASK: u16 = 0x0fff;

struct Harness {
    dev: DeviceHandle,
    /// Keeps the window mapped for the device's lifetime (the process's).
    _window: Arc<SharedMem>,
}

static HARNESS: OnceLock<Harness> = OnceLock::new();
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn harness() -> &'static Harness {
    HARNESS.get_or_init(|| {
        let window = Arc::new(SharedMem::new_zeroed(WINDOW_LEN).expect("fuzz window"));
        let mut cfg = DeviceConfig::new(NAME, IpAddr::V4(ADDR));
        // Commands, not a data stream: a briefly spinning engine leaves the cores to the
        // harness and the control plane.
        cfg.spin_us = 20;
        cfg.max_spin_us = 20;
        cfg.busy_spin_us = 20;
        cfg.max_busy_spin_us = 20;
        cfg.limits = Limits {
            max_qp: 8,
            max_qp_wr: 64,
            max_cq: 8,
            max_cqe: 256,
            max_mr: 8,
            max_pd: 8,
            max_ah: 8,
            max_srq: 4,
            max_srq_wr: 64,
            max_comp_channels: 4,
            max_contexts: 2,
            ..Limits::default()
        };
        let space = AddressSpace::Window {
            base: window.addr() as usize,
            len: WINDOW_LEN,
        };
        let dev = start_device_in(cfg, space, true)
            .unwrap_or_else(|e| panic!("cannot start the fuzz device {NAME} on {ADDR}: {e}"));
        Harness {
            dev,
            _window: window,
        }
    })
}

/// What one [`execute`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Commands answered (prelude included).
    pub replies: u32,
    /// Of those, answered with an errno.
    pub errors: u32,
    /// The control plane closed the connection on an unframeable command.
    pub closed: bool,
}

/// Run one input (module docs) against the fuzz device; panic on a finding.
pub fn execute(data: &[u8]) -> Outcome {
    let h = harness();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let dev = h.dev.dev();
    let fds_before = open_fds();
    // A new context, as a new connection to the control plane gets.
    let ctx = dev.next_ctx.fetch_add(1, Ordering::Relaxed);
    let mut out = Outcome::default();
    let level = data.first().map_or(0, |b| b % 3);
    for cmd in prelude(level) {
        run_checked(dev, ctx, &cmd, &mut out);
    }
    let mut rest = data.get(1..).unwrap_or(&[]);
    while let Some((hdr, tail)) = rest.split_first_chunk::<2>() {
        let hdr = u16::from_le_bytes(*hdr);
        let n = usize::from(hdr & LEN_MASK).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        if hdr & PAUSE != 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
        let msg = if hdr & RAW != 0 {
            frame_as_declared(body)
        } else {
            Some(frame_exactly(body))
        };
        let Some(msg) = msg else {
            out.closed = true;
            break;
        };
        run_checked(dev, ctx, &msg, &mut out);
    }
    // The connection closes: everything the context owns goes (ctrl.rs does the same).
    dev.lock_cp().destroy_context(ctx);
    dev.engine.kick();
    let left = dev.lock_cp().leftovers();
    assert!(left.is_empty(), "closing the context left {left:?}");
    // A panic caught by the engine (the pass is retried) is still a bug.
    let panics = h.dev.port_counters().engine.engine_panics;
    assert_eq!(panics, 0, "the engine panicked");
    let fds_after = open_fds();
    assert_eq!(fds_before, fds_after, "file descriptors leaked");
    out
}

/// Execute one framed command, check its reply, and take ownership of any file descriptor
/// it hands the library.
fn run_checked(dev: &Device, ctx: CtxId, msg: &[u8], out: &mut Outcome) {
    assert_eq!(need(msg), Need::Complete(msg.len()), "harness framing");
    let mut reply = Vec::new();
    let kick = dev.lock_cp().execute(ctx, msg, &mut reply);
    if kick {
        dev.engine.kick();
    }
    let r = Reply::parse(&reply).unwrap_or_else(|e| panic!("malformed reply {reply:02x?}: {e}"));
    let word = msg.first_chunk::<4>().map_or(0, |w| u32::from_ne_bytes(*w));
    assert_eq!(r.command, word, "the reply must echo the command word");
    out.replies += 1;
    // The trace line `uroce trace` would print for it (crate::trace): any command, any
    // reply, never a panic; a refusal shows its errno.
    let line = crate::trace::describe(msg, &reply);
    if let Err(errno) = r.result {
        assert!(line.contains(&format!("(errno {})", errno.0)), "{line}");
    }
    if std::env::var_os("NIC_FUZZ_TRACE").is_some() {
        let cmd = Command(word & abi::cmd::CMD_COMMAND_MASK);
        eprintln!("nic fuzz: {cmd:?} → {:?}", r.result.map(<[u8]>::len));
    }
    match r.result {
        Err(errno) => {
            out.errors += 1;
            // Every refusal says why, in a sentence that names the verb.
            let why = r
                .reason
                .unwrap_or_else(|| panic!("refusal {errno} without a reason: {msg:02x?}"));
            assert!(
                why.rule != abi::Rule::UNSPECIFIED && !why.text.is_empty(),
                "empty reason for {errno}: {why:?}"
            );
        }
        Ok(resp) => close_handed_fds(word, msg, resp),
    }
}

fn close_handed_fds(word: u32, msg: &[u8], resp: &[u8]) {
    if word == Command::GET_CONTEXT.word() {
        if let Ok((c, rest)) = GetContextResp::read_from_prefix(resp) {
            sys::close_handed_fd(c.async_fd as i32);
            if let Ok((d, _)) = UroceGetContextResp::read_from_prefix(rest) {
                sys::close_handed_fd(d.wake_fd);
            }
        }
    } else if word == Command::CREATE_COMP_CHANNEL.word() {
        if let Ok((c, _)) = CreateCompChannelResp::read_from_prefix(resp) {
            sys::close_handed_fd(c.fd as i32);
        }
    } else if word == Command::UROCE_CM.word() {
        let creates = msg
            .get(abi::cmd::CmdHdr::SIZE..)
            .and_then(|b| CmCmd::read_from_prefix(b).ok())
            .is_some_and(|(c, _)| c.op == cm_op::CREATE_CHANNEL);
        if let (true, Ok((r, _))) = (creates, CmCmdResp::read_from_prefix(resp)) {
            sys::close_handed_fd(r.fd as i32);
        }
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn word_at(m: &[u8], at: usize) -> u32 {
    m.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_ne_bytes)
}

fn set_u16(m: &mut [u8], at: usize, v: u16) {
    if let Some(d) = m.get_mut(at..at + 2) {
        d.copy_from_slice(&v.to_ne_bytes());
    }
}

/// Rewrite the header so it frames exactly `body` (padded to its word size): legacy
/// `in_words` counts 4-byte words of the whole message; the extended form's `in_words`
/// counts the 8-byte words after its 24-byte header (`provider_in_words` set to 0).
fn frame_exactly(body: &[u8]) -> Vec<u8> {
    let mut m = body.to_vec();
    if m.len() < 8 {
        m.resize(8, 0);
    }
    if word_at(&m, 0) & CMD_FLAG_EXTENDED != 0 {
        if m.len() < 24 {
            m.resize(24, 0);
        }
        let words = ((m.len() - 24).div_ceil(8)).min(0xffff);
        m.resize(24 + words * 8, 0);
        set_u16(&mut m, 4, words as u16);
        set_u16(&mut m, 16, 0);
    } else {
        let words = m.len().div_ceil(4).min(0xffff);
        m.resize(words * 4, 0);
        set_u16(&mut m, 4, words as u16);
    }
    m
}

/// Keep the header: the first command its header frames, padded with zeros to the length
/// it declares if `body` is shorter (the control plane would wait for those bytes);
/// `None` if the header cannot frame a message (the control plane closes the connection).
fn frame_as_declared(body: &[u8]) -> Option<Vec<u8>> {
    let mut m = body.to_vec();
    loop {
        match need(&m) {
            Need::Complete(total) => {
                m.truncate(total);
                return Some(m);
            }
            Need::More(total) => m.resize(total, 0),
            Need::Unframeable => return None,
        }
    }
}

fn enc(r: &Request<'_>) -> Vec<u8> {
    let mut v = Vec::new();
    // Every request built here is valid by construction.
    let _ = r.encode(&mut v);
    v
}

fn all_access() -> u32 {
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0
}

fn gid(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// Ring geometry of the prelude's objects.
fn cq_layout() -> RingLayout {
    RingLayout::for_depth(64, CQE_BYTES).unwrap_or_else(|_| unreachable!("64 × 64 B ring"))
}

fn sq_layout() -> RingLayout {
    let elem = send_wqe_size(4, 64).unwrap_or(512);
    RingLayout::for_depth(QP_DEPTH, elem).unwrap_or_else(|_| unreachable!("valid SQ ring"))
}

fn rq_layout() -> RingLayout {
    let elem = recv_wqe_size(4).unwrap_or(128);
    RingLayout::for_depth(QP_DEPTH, elem).unwrap_or_else(|_| unreachable!("valid RQ ring"))
}

/// Window offsets of the two prelude QPs' SQ and RQ rings (each on its own 4 KiB).
fn qp_rings(i: u64) -> (u64, u64) {
    let step = (sq_layout().bytes().max(rq_layout().bytes()) as u64).next_multiple_of(0x1000);
    let sq = QP_RINGS_AT + 2 * i * step;
    (sq, sq + step)
}

fn create_qp(qp_type: abi::QpType, sq_at: u64, rq: RingDesc, srq: Option<u32>) -> Vec<u8> {
    enc(&Request::CreateQp(
        CreateQp {
            user_handle: 0x9000,
            pd_handle: 1,
            send_cq_handle: 1,
            recv_cq_handle: 1,
            srq_handle: srq.unwrap_or(0),
            max_send_wr: QP_DEPTH,
            max_recv_wr: if srq.is_some() { 0 } else { QP_DEPTH },
            max_send_sge: 4,
            max_recv_sge: if srq.is_some() { 0 } else { 4 },
            max_inline_data: 64,
            qp_type: qp_type.raw() as u8,
            is_srq: u8::from(srq.is_some()),
            ..CreateQp::default()
        },
        UroceCreateQp {
            sq: sq_layout().desc(sq_at),
            rq,
            ..UroceCreateQp::default()
        },
    ))
}

/// RESET → INIT → RTR → RTS of an RC QP toward `dest_qpn` on the fuzz device.
fn connect_rc(qp: u32, dest_qpn: u32) -> Vec<Vec<u8>> {
    crate::simhost::rts_steps(transport::Service::Rc)
        .iter()
        .map(|&(state, mask)| {
            let mut q = ModifyQp {
                qp_handle: qp,
                attr_mask: mask,
                qp_state: state,
                qp_access_flags: all_access(),
                port_num: 1,
                path_mtu: 1, // 256 bytes: multi-packet messages are cheap
                dest_qp_num: dest_qpn,
                rq_psn: 100,
                sq_psn: 100,
                max_dest_rd_atomic: 4,
                max_rd_atomic: 4,
                min_rnr_timer: 1,
                timeout: 10,
                retry_cnt: 3,
                rnr_retry: 2,
                ..ModifyQp::default()
            };
            q.dest.dgid = gid(ADDR);
            q.dest.is_global = 1;
            q.dest.hop_limit = 64;
            q.dest.port_num = 1;
            enc(&Request::ModifyQp(q))
        })
        .collect()
}

/// The commands of prelude `level` (module docs).
fn prelude(level: u8) -> Vec<Vec<u8>> {
    let db = DoorbellLayout::new(DOORBELL_SLOTS).unwrap_or_else(|_| unreachable!("64 slots"));
    let mut v = vec![enc(&Request::GetContext(
        GetContext::default(),
        UroceGetContext {
            abi_version: UROCE_ABI_VERSION,
            doorbell_slots: db.slots(),
            doorbell_addr: DOORBELL_AT,
            doorbell_len: db.bytes() as u64,
        },
    ))];
    if level == 0 {
        return v;
    }
    v.push(enc(&Request::AllocPd(AllocPd::default())));
    v.push(enc(&Request::RegMr(RegMr {
        start: MR_AT,
        length: MR_LEN,
        hca_va: MR_AT,
        pd_handle: 1,
        access_flags: all_access(),
        ..RegMr::default()
    })));
    v.push(enc(&Request::CreateCq(
        CreateCq {
            user_handle: 0xc0,
            cqe: 64,
            comp_channel: -1,
            ..CreateCq::default()
        },
        UroceCreateCq {
            ring: cq_layout().desc(CQ_AT),
            ..Default::default()
        },
    )));
    if level == 1 {
        return v;
    }
    for i in 0..2u64 {
        let (sq, rq) = qp_rings(i);
        v.push(create_qp(abi::QpType::Rc, sq, rq_layout().desc(rq), None));
    }
    v.extend(connect_rc(QPNS[0], QPNS[1]));
    v.extend(connect_rc(QPNS[1], QPNS[0]));
    v
}

/// One chunk of an input: header + command bytes.
fn chunk(flags: u16, cmd: &[u8]) -> Vec<u8> {
    let n = cmd.len().min(usize::from(LEN_MASK));
    let mut v = (flags | n as u16).to_le_bytes().to_vec();
    v.extend_from_slice(&cmd[..n]);
    v
}

fn post_send(qp: u32, wrs: &[SendWr], sges: &[Sge]) -> Vec<u8> {
    let mut w = Vec::new();
    for wr in wrs {
        w.extend_from_slice(wr.as_bytes());
    }
    let mut s = Vec::new();
    for sg in sges {
        s.extend_from_slice(sg.as_bytes());
    }
    enc(&Request::PostSend(
        PostSend {
            qp_handle: qp,
            wr_count: wrs.len() as u32,
            sge_count: sges.len() as u32,
            wqe_size: SendWr::SIZE as u32,
            ..PostSend::default()
        },
        WrList {
            wrs: &w,
            sges: &s,
            wqe_size: SendWr::SIZE,
        },
    ))
}

fn recv_list(n: u64, at: u64) -> (Vec<u8>, Vec<u8>) {
    let mut w = Vec::new();
    let mut s = Vec::new();
    for i in 0..n {
        let wr = RecvWr {
            wr_id: 100 + i,
            num_sge: 1,
            reserved: 0,
        };
        w.extend_from_slice(wr.as_bytes());
        let sg = Sge {
            addr: at + i * 0x400,
            length: 0x400,
            lkey: MR_KEY,
        };
        s.extend_from_slice(sg.as_bytes());
    }
    (w, s)
}

fn post_recv(qp: u32, n: u64) -> Vec<u8> {
    let (w, s) = recv_list(n, MR_AT + 0x2_0000);
    enc(&Request::PostRecv(
        PostRecv {
            qp_handle: qp,
            wr_count: n as u32,
            sge_count: n as u32,
            wqe_size: RecvWr::SIZE as u32,
            ..PostRecv::default()
        },
        WrList {
            wrs: &w,
            sges: &s,
            wqe_size: RecvWr::SIZE,
        },
    ))
}

fn wr(id: u64, op: WrOpcode, flags: u32, num_sge: u32) -> SendWr {
    SendWr {
        wr_id: id,
        num_sge,
        opcode: op.raw(),
        send_flags: flags,
        ..SendWr::default()
    }
}

fn rdma(mut w: SendWr, remote: u64) -> SendWr {
    w.set_rdma(RdmaWr {
        remote_addr: remote,
        rkey: MR_KEY,
        reserved: 0,
    });
    w
}

fn sge(off: u64, len: u32) -> Sge {
    Sge {
        addr: MR_AT + off,
        length: len,
        lkey: MR_KEY,
    }
}

/// The `trace_describe` fuzz target's body: `data[0]` splits the rest into a request and a
/// reply, formatted as `uroce trace` would (`crate::trace::describe`); returns the line.
/// Arbitrary bytes must never panic it, and the line always has its ` = ` result part.
pub fn describe_pair(data: &[u8]) -> String {
    let (split, rest) = data
        .split_first()
        .map_or((0, data), |(s, r)| (usize::from(*s), r));
    let (req, reply) = rest.split_at(split.min(rest.len()));
    let line = crate::trace::describe(req, reply);
    assert!(line.contains(" = "), "{line}");
    line
}

/// Valid inputs that walk through every command with real work for the engine: the
/// stable test's mutation seeds, and a starting corpus for the fuzzer.
pub fn sample_inputs() -> Vec<Vec<u8>> {
    let sig = SendFlags::SIGNALED.0;
    let (qa, qb) = (QPNS[0], QPNS[1]);
    let poll = enc(&Request::PollCq(PollCq {
        cq_handle: 1,
        ne: 16,
        ..PollCq::default()
    }));
    let mut inputs = Vec::new();

    // 1. RC traffic of every opcode, polled by command.
    let mut atomic = wr(5, WrOpcode::AtomicFetchAndAdd, sig, 1);
    atomic.set_atomic(AtomicWr {
        remote_addr: MR_AT + 0x3_0000,
        compare_add: 3,
        swap: 0,
        rkey: MR_KEY,
        reserved: 0,
    });
    let mut imm = rdma(wr(6, WrOpcode::RdmaWriteWithImm, sig, 1), MR_AT + 0x3_1000);
    imm.set_imm_data(0x1234);
    let mut inline = wr(7, WrOpcode::Send, sig | SendFlags::INLINE.0, 1);
    inline.send_flags |= SendFlags::SOLICITED.0;
    let cmds = [
        post_recv(qb, 4),
        post_send(
            qa,
            &[rdma(wr(1, WrOpcode::RdmaWrite, 0, 1), MR_AT + 0x1_0000)],
            &[sge(0, 1000)],
        ),
        post_send(
            qa,
            &[rdma(wr(2, WrOpcode::RdmaRead, sig, 1), MR_AT + 0x1_0000)],
            &[sge(0x8000, 700)],
        ),
        post_send(
            qa,
            &[
                wr(3, WrOpcode::Send, sig, 2),
                wr(4, WrOpcode::SendWithImm, 0, 0),
            ],
            &[sge(0, 300), sge(0x400, 300)],
        ),
        post_send(qa, &[atomic, imm], &[sge(0x9000, 8), sge(0, 16)]),
        post_send(qa, &[inline], &[sge(0x100, 40)]),
        enc(&Request::ReqNotifyCq(ReqNotifyCq {
            cq_handle: 1,
            solicited_only: 1,
        })),
        poll.clone(),
        enc(&Request::QueryQp(QueryQp {
            qp_handle: qa,
            attr_mask: !0,
            ..QueryQp::default()
        })),
        poll.clone(),
    ];
    let mut input = vec![2u8];
    for (i, c) in cmds.iter().enumerate() {
        input.extend(chunk(if i > 5 { PAUSE } else { 0 }, c));
    }
    inputs.push(input);

    // 2. Errors: a bad rkey, a READ into an MR of the wrong key, then ERR, flushes,
    //    destroys with work outstanding, and objects torn down in use.
    let mut bad_rkey = wr(9, WrOpcode::RdmaWrite, sig, 1);
    bad_rkey.set_rdma(RdmaWr {
        remote_addr: MR_AT,
        rkey: MR_KEY ^ 0x80,
        reserved: 0,
    });
    let cmds = [
        post_recv(qb, 2),
        post_send(qa, &[bad_rkey], &[sge(0, 64)]),
        post_send(
            qb,
            &[rdma(wr(10, WrOpcode::RdmaRead, sig, 1), MR_AT)],
            &[Sge {
                lkey: 0x999,
                ..sge(0, 64)
            }],
        ),
        poll.clone(),
        enc(&Request::ModifyQp(ModifyQp {
            qp_handle: qa,
            attr_mask: QpAttrMask::STATE.0,
            qp_state: 6,
            ..ModifyQp::default()
        })),
        post_recv(qa, 3),
        poll.clone(),
        enc(&Request::DeregMr(DeregMr { mr_handle: 1 })),
        enc(&Request::DestroyCq(DestroyCq {
            cq_handle: 1,
            ..DestroyCq::default()
        })),
        enc(&Request::DestroyQp(DestroyQp {
            qp_handle: qb,
            ..DestroyQp::default()
        })),
        enc(&Request::DeallocPd(DeallocPd { pd_handle: 1 })),
    ];
    let mut input = vec![2u8];
    for c in &cmds {
        input.extend(chunk(PAUSE, c));
    }
    inputs.push(input);

    // 3. SRQ, UD QP with an AH, completion channel, CQ resize, queries.
    let (sq, rq) = qp_rings(2);
    let (xrc_sq, xrc_rq, xrc_sq2) = (XRC_AT, XRC_AT + 0x1_0000, XRC_AT + 0x2_0000);
    let srq_ring = RingLayout::for_depth(8, recv_wqe_size(1).unwrap_or(64))
        .unwrap_or_else(|_| unreachable!("valid SRQ ring"));
    let mut ud = wr(11, WrOpcode::Send, sig, 1);
    ud.set_ud(UdWr {
        ah: 1,
        remote_qpn: 16,
        remote_qkey: 0x1111,
        reserved: 0,
    });
    let (rw, rs) = recv_list(2, MR_AT + 0x2_0000);
    let cmds = [
        enc(&Request::CreateCompChannel(CreateCompChannel::default())),
        enc(&Request::CreateSrq(
            CreateSrq {
                user_handle: 0x5,
                pd_handle: 1,
                max_wr: 8,
                max_sge: 1,
                ..CreateSrq::default()
            },
            UroceCreateSrq {
                ring: srq_ring.desc(rq),
            },
        )),
        enc(&Request::PostSrqRecv(
            PostSrqRecv {
                srq_handle: 1,
                wr_count: 2,
                sge_count: 2,
                wqe_size: RecvWr::SIZE as u32,
                ..PostSrqRecv::default()
            },
            WrList {
                wrs: &rw,
                sges: &rs,
                wqe_size: RecvWr::SIZE,
            },
        )),
        enc(&Request::ModifySrq(ModifySrq {
            srq_handle: 1,
            attr_mask: abi::SrqAttrMask::LIMIT.0,
            max_wr: 0,
            srq_limit: 1,
        })),
        enc(&Request::QuerySrq(QuerySrq {
            srq_handle: 1,
            ..QuerySrq::default()
        })),
        create_qp(abi::QpType::Ud, sq, RingDesc::default(), Some(1)),
        enc(&Request::ModifyQp(ModifyQp {
            qp_handle: 16,
            attr_mask: QpAttrMask::STATE.0
                | QpAttrMask::PKEY_INDEX.0
                | QpAttrMask::PORT.0
                | QpAttrMask::QKEY.0,
            qp_state: 1,
            port_num: 1,
            qkey: 0x1111,
            ..ModifyQp::default()
        })),
        enc(&Request::ModifyQp(ModifyQp {
            qp_handle: 16,
            attr_mask: QpAttrMask::STATE.0,
            qp_state: 2,
            ..ModifyQp::default()
        })),
        enc(&Request::ModifyQp(ModifyQp {
            qp_handle: 16,
            attr_mask: QpAttrMask::STATE.0 | QpAttrMask::SQ_PSN.0,
            qp_state: 3,
            ..ModifyQp::default()
        })),
        enc(&Request::CreateAh(CreateAh {
            user_handle: 7,
            pd_handle: 1,
            attr: AhAttr {
                grh: GlobalRoute {
                    dgid: gid(ADDR),
                    hop_limit: 64,
                    ..GlobalRoute::default()
                },
                is_global: 1,
                port_num: 1,
                ..AhAttr::default()
            },
            ..CreateAh::default()
        })),
        post_send(16, &[ud], &[sge(0, 64)]),
        enc(&Request::ResizeCq(
            ResizeCq {
                cq_handle: 1,
                cqe: 128,
                ..ResizeCq::default()
            },
            UroceResizeCq {
                ring: RingLayout::for_depth(128, CQE_BYTES)
                    .unwrap_or_else(|_| unreachable!("valid CQ ring"))
                    .desc(RESIZE_AT),
            },
        )),
        poll,
        enc(&Request::QueryDevice(QueryDevice::default())),
        enc(&Request::QueryPort(QueryPort {
            port_num: 1,
            ..QueryPort::default()
        })),
        enc(&Request::QueryGid(QueryGid {
            port_num: 1,
            ..QueryGid::default()
        })),
        enc(&Request::QueryPkey(QueryPkey {
            port_num: 1,
            ..QueryPkey::default()
        })),
        enc(&Request::DestroyAh(DestroyAh { ah_handle: 1 })),
        // XRC: an anonymous domain, an XRC SRQ of it completing to CQ 1, a target QP of the
        // domain (its pd_handle names the XRCD) and an initiator QP.
        enc(&Request::OpenXrcd(
            OpenXrcd {
                fd: u32::MAX,
                ..OpenXrcd::default()
            },
            UroceOpenXrcd::default(),
        )),
        enc(&Request::CreateXsrq(
            CreateXsrq {
                user_handle: 0x6,
                srq_type: SRQT_XRC,
                pd_handle: 1,
                max_wr: 8,
                max_sge: 1,
                xrcd_handle: 1,
                cq_handle: 1,
                ..CreateXsrq::default()
            },
            UroceCreateSrq {
                ring: srq_ring.desc(xrc_rq),
            },
        )),
        create_qp(abi::QpType::XrcRecv, xrc_sq, RingDesc::default(), None),
        create_qp(abi::QpType::XrcSend, xrc_sq2, RingDesc::default(), None),
    ];
    let mut input = vec![1u8];
    for c in &cmds {
        input.extend(chunk(PAUSE, c));
    }
    inputs.push(input);

    // 4. The CM: a channel, a listener, a connection from prelude QP 16 to the device itself
    // (internal loopback) offering selective repeat in its ECE, its answer agreeing, ECE on
    // an operation that takes none, an ID that is not the context's, and selective repeat
    // asked of a QP already connected.
    let cm = |op: u32, f: &dyn Fn(&mut CmCmd)| {
        let mut c = CmCmd {
            op,
            ..CmCmd::default()
        };
        f(&mut c);
        enc(&Request::Cm(c))
    };
    let me = std::net::Ipv4Addr::new(127, 77, 9, 1)
        .to_ipv6_mapped()
        .octets();
    let sid = 0x0106_1C06u64;
    let cmds = [
        cm(cm_op::CREATE_CHANNEL, &|_| {}),
        cm(cm_op::LISTEN, &|c| c.service_id = sid),
        cm(cm_op::CONNECT, &|c| {
            c.service_id = sid;
            c.peer = me;
            c.local_gid = me;
            c.remote_gid = me;
            c.qpn = QPNS[0];
            c.path_mtu = 3;
            c.hop_limit = 64;
            c.flags = CmCmd::FLAG_ECE;
            c.qkey = transport::wire::cm::ECE_SELECTIVE_REPEAT;
        }),
        cm(cm_op::ACCEPT, &|c| {
            c.id = 1;
            c.qpn = QPNS[1];
            c.flags = CmCmd::FLAG_ECE;
            c.qkey = transport::wire::cm::ECE_SELECTIVE_REPEAT;
        }),
        cm(cm_op::SIDR_REQUEST, &|c| {
            c.service_id = sid;
            c.peer = me;
            c.flags = CmCmd::FLAG_ECE;
        }),
        cm(cm_op::DESTROY, &|c| c.id = 7),
        cm(99, &|_| {}),
        // Selective repeat goes only with a move from INIT to RTR: refused for a prelude QP
        // that is already connected.
        enc(&Request::ModifyQp(ModifyQp {
            qp_handle: 1,
            attr_mask: QpAttrMask::STATE.0,
            qp_state: 2,
            flags: MODIFY_QP_SELECTIVE_REPEAT,
            ..ModifyQp::default()
        })),
    ];
    let mut input = vec![2u8];
    for c in &cmds {
        input.extend(chunk(PAUSE, c));
    }
    inputs.push(input);

    // 5. REREG_MR: access taken away under a remote write, a second PD and back, a new
    //    translation inside the window, and the refusals (no flags, unknown flags, a bad
    //    PD, a range outside the window).
    let rereg = |flags, f: &dyn Fn(&mut ReregMr)| {
        let mut r = ReregMr {
            mr_handle: 1,
            flags,
            ..ReregMr::default()
        };
        f(&mut r);
        enc(&Request::ReregMr(r))
    };
    let lw = AccessFlags::LOCAL_WRITE.0;
    let cmds = [
        rereg(ReregMr::CHANGE_ACCESS, &|r| r.access_flags = lw),
        post_send(
            qa,
            &[rdma(wr(20, WrOpcode::RdmaWrite, sig, 1), MR_AT + 0x1_0000)],
            &[sge(0, 64)],
        ),
        enc(&Request::PollCq(PollCq {
            cq_handle: 1,
            ne: 16,
            ..PollCq::default()
        })),
        rereg(ReregMr::CHANGE_ACCESS, &|r| r.access_flags = all_access()),
        enc(&Request::AllocPd(AllocPd::default())),
        rereg(ReregMr::CHANGE_PD, &|r| r.pd_handle = 2),
        rereg(ReregMr::CHANGE_PD, &|r| r.pd_handle = 1),
        rereg(ReregMr::CHANGE_TRANSLATION, &|r| {
            (r.start, r.length, r.hca_va) = (MR_AT + 0x1000, 0x1000, MR_AT + 0x1000)
        }),
        rereg(0, &|_| {}),
        rereg(8, &|_| {}),
        rereg(ReregMr::CHANGE_PD, &|r| r.pd_handle = 77),
        rereg(ReregMr::CHANGE_TRANSLATION, &|r| {
            (r.start, r.length, r.hca_va) = (MR_AT, WINDOW_LEN as u64, MR_AT)
        }),
    ];
    let mut input = vec![2u8];
    for c in &cmds {
        input.extend(chunk(PAUSE, c));
    }
    inputs.push(input);

    // 6. Memory windows: both types allocated, a bad type, LOCAL_INV of an unbound type 2
    //    window and of a type 1 window (LOC_QP_OP_ERR), SEND_WITH_INV naming a window, a
    //    BIND_MW refused on the command path, deallocation.
    // The windows' first R_Keys: the sealed device's next keys after the prelude MR's.
    let mut keys = crate::keys::KeyGen::default();
    let _prelude_mr = keys.draw(true, |_| false);
    let (mw1, mw2) = (
        keys.draw(true, |_| false) & !0xff,
        keys.draw(true, |_| false) & !0xff,
    );
    let mut inv = wr(30, WrOpcode::LocalInv, sig, 0);
    inv.ex = mw1;
    let mut sinv = wr(31, WrOpcode::SendWithInv, sig, 1);
    sinv.ex = mw2;
    let cmds = [
        enc(&Request::AllocMw(AllocMw {
            pd_handle: 1,
            mw_type: 1,
            ..AllocMw::default()
        })),
        enc(&Request::AllocMw(AllocMw {
            pd_handle: 1,
            mw_type: 2,
            ..AllocMw::default()
        })),
        enc(&Request::AllocMw(AllocMw {
            pd_handle: 1,
            mw_type: 3,
            ..AllocMw::default()
        })),
        post_recv(qb, 2),
        post_send(qa, &[sinv], &[sge(0, 16)]),
        post_send(qa, &[inv], &[]),
        post_send(qa, &[wr(32, WrOpcode::BindMw, sig, 0)], &[]),
        enc(&Request::PollCq(PollCq {
            cq_handle: 1,
            ne: 16,
            ..PollCq::default()
        })),
        enc(&Request::DeregMr(DeregMr { mr_handle: 1 })),
        enc(&Request::DeallocMw(DeallocMw {
            mw_handle: 1,
            ..DeallocMw::default()
        })),
        enc(&Request::DeallocMw(DeallocMw {
            mw_handle: 2,
            ..DeallocMw::default()
        })),
    ];
    let mut input = vec![2u8];
    for c in &cmds {
        input.extend(chunk(PAUSE, c));
    }
    inputs.push(input);

    // 7. Framing: a legacy header that cannot frame a message closes the connection.
    let mut input = vec![0u8];
    input.extend(chunk(0, &enc(&Request::AllocPd(AllocPd::default()))));
    input.extend(chunk(RAW, &[1, 0, 0, 0, 1, 0, 0, 0]));
    inputs.push(input);
    inputs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u16_at(m: &[u8], at: usize) -> usize {
        usize::from(u16::from_ne_bytes([m[at], m[at + 1]]))
    }

    #[test]
    fn framing_rewrites_and_keeps_headers() {
        // Legacy: in_words counts 4-byte words of the whole message.
        let m = frame_exactly(&[3, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 2, 3]);
        assert_eq!(m.len(), 12);
        assert_eq!(u16_at(&m, 4), 3);
        // Extended: 24-byte header, then 8-byte words; provider words cleared.
        let mut e = vec![0u8; 30];
        e[..4].copy_from_slice(&(CMD_FLAG_EXTENDED | 2).to_ne_bytes());
        e[16] = 9;
        let m = frame_exactly(&e);
        assert_eq!((m.len(), u16_at(&m, 4), u16_at(&m, 16)), (32, 1, 0));
        // Declared lengths are honoured; a legacy in_words < 2 cannot frame.
        let m = frame_as_declared(&[3, 0, 0, 0, 4, 0, 0, 0, 9]).unwrap();
        assert_eq!(m.len(), 16);
        let m = frame_as_declared(&[3, 0, 0, 0, 2, 0, 0, 0, 9, 9]).unwrap();
        assert_eq!(m.len(), 8);
        assert!(frame_as_declared(&[3, 0, 0, 0, 1, 0, 0, 0]).is_none());
        assert_eq!(frame_as_declared(&[3]).map(|m| m.len()), None);
        let mut e = vec![0u8; 8];
        e[..4].copy_from_slice(&CMD_FLAG_EXTENDED.to_ne_bytes());
        e[4] = 1;
        assert_eq!(frame_as_declared(&e).map(|m| m.len()), Some(32));
        // Chunks: header length, flags, truncation.
        let c = chunk(PAUSE, &[7; 5]);
        assert_eq!(c, [5, 0x40, 7, 7, 7, 7, 7]);
    }

    #[test]
    fn prelude_objects_fit_the_window_without_overlap() {
        let db = DoorbellLayout::new(DOORBELL_SLOTS).unwrap();
        assert!(DOORBELL_AT + db.bytes() as u64 <= CQ_AT);
        assert!(CQ_AT + cq_layout().bytes() as u64 <= QP_RINGS_AT);
        let (_, rq1) = qp_rings(1);
        assert!(rq1 + rq_layout().bytes() as u64 <= MR_AT);
        let (sq2, rq2) = qp_rings(2);
        assert!(sq2 >= rq1 + rq_layout().bytes() as u64);
        assert!(rq2 + 0x1000 <= MR_AT);
        assert_eq!(prelude(0).len(), 1);
        assert_eq!(prelude(1).len(), 4);
        assert_eq!(prelude(2).len(), 12);
    }
}
