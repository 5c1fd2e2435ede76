//! QP 1 of the device — the General Services Interface (IBTA Vol 1 §13.5) — and the
//! Communication Manager that runs on it (the `cm` crate; the kernel's
//! `drivers/infiniband/core/cm.c` and the MAD layer under it).
//!
//! On RoCEv2, CM MADs are UD SEND Only packets to destination QP 1 with DETH Q_Key
//! 0x8001_0000 and source QP 1, P_Key 0xFFFF, carrying the whole 256-byte MAD (rxe and the
//! Linux MAD layer send and accept exactly that). This module turns such packets into
//! [`Cm::handle_mad`] calls, the CM's output into packets (internal loopback for this
//! device's own address, UDP otherwise), and keeps the CM's deadline in the engine's timer
//! heap under the index [`GSI_TIMER`].

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};

use abi::uverbs::{cm_event, CmEventDesc};
use cm::{Cm, CmConfig, CmEvent, CmId};
use transport::wire::cm::{pd_len, CmMadRepr, CmMsg, MsgRef, RejRepr};
use zerocopy::IntoBytes;

use crate::state::{ip_to_gid, CtxId};
use transport::wire::bth::BthRepr;
use transport::wire::mad::MAD_LEN;
use transport::wire::{DethRepr, Opcode, Psn, Qkey, Qpn, RocePacketRepr};
use transport::Time;

/// The engine timer-heap index of the CM's deadline (never a QP index: QP slabs stop far
/// below it).
pub(crate) const GSI_TIMER: u32 = u32::MAX;

/// Events the consumer has not taken yet, at most this many (the oldest are dropped and
/// counted beyond it: a consumer that never looks must not grow the device without bound).
const EVENTS_MAX: usize = 4096;

/// The device's QP 1.
#[derive(Debug)]
pub(crate) struct Gsi {
    pub(crate) cm: Cm,
    /// PSN of the next MAD we send (IB_MAD_SEND_Q_PSN starts at 0 and counts per MAD).
    psn: Psn,
    /// The deadline queued in the engine's timer heap, if any.
    armed: Option<Time>,
    /// Events of IDs no context owns ([`crate::DeviceHandle::with_cm`] users).
    events: VecDeque<CmEvent>,
    /// Which context owns each CM ID created through UROCE_CM.
    pub(crate) owners: HashMap<u32, CtxId>,
    /// Each context's CM event channel (our end).
    pub(crate) chans: HashMap<CtxId, OwnedFd>,
    pub(crate) counters: GsiCounters,
    /// A consumer's last word (REJ, DREQ/DREP) is queued: the control plane sees it leave
    /// before it answers the command (`crate::ctrl`).
    pub(crate) flush_before_reply: bool,
}

/// QP 1 counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct GsiCounters {
    /// CM MADs received (well-formed or not).
    pub(crate) mads_rcvd: u64,
    /// CM MADs sent.
    pub(crate) mads_sent: u64,
    /// QP 1 packets that were not a UD SEND Only with the GSI Q_Key.
    pub(crate) bad_packets: u64,
    /// Events dropped because the consumer did not take them.
    pub(crate) events_dropped: u64,
}

impl Gsi {
    pub(crate) fn new(ca_guid: u64, id_seed: u64) -> Gsi {
        Gsi {
            cm: Cm::new(CmConfig::linux_defaults(ca_guid, id_seed)),
            psn: Psn::new(0),
            armed: None,
            events: VecDeque::new(),
            owners: HashMap::new(),
            flush_before_reply: false,
            chans: HashMap::new(),
            counters: GsiCounters::default(),
        }
    }

    /// Give every CM ID this device allocates from now on the daemon's prefix
    /// (`cm::CmConfig::id_prefix_bits`). Called before any ID exists.
    pub(crate) fn set_id_prefix(&mut self, bits: u8, prefix: u32) {
        let mut cfg = *self.cm.config();
        cfg.id_prefix_bits = bits;
        cfg.id_prefix = prefix;
        self.cm = Cm::new(cfg);
    }

    /// A packet for QP 1 arrived from `src`.
    pub(crate) fn receive(&mut self, now: Time, pkt: &RocePacketRepr<'_>, src: IpAddr) {
        let ok =
            pkt.bth.opcode == Opcode::UD_SEND_ONLY && pkt.deth.is_some_and(|d| d.qkey == Qkey::GSI);
        if !ok {
            self.counters.bad_packets += 1;
            return;
        }
        self.counters.mads_rcvd += 1;
        // A truncated MAD goes to the CM too, which drops it and counts it as malformed
        // (Cm::stats().mads_malformed), like every other MAD it cannot use.
        let mad = pkt.payload.get(..MAD_LEN).unwrap_or(pkt.payload);
        self.cm.handle_mad(now, src, mad);
        self.collect();
    }

    /// Hand the CM's new events to their consumers: the event channel of the context that
    /// owns the ID (a new connection belongs to its listener's context), or the local queue.
    pub(crate) fn collect(&mut self) {
        while let Some(e) = self.cm.poll_event() {
            let owner = match &e {
                CmEvent::ConnectRequest { listen, id, .. }
                | CmEvent::SidrRequest { listen, id, .. } => {
                    let o = self.owners.get(&listen.0).copied();
                    if let Some(o) = o {
                        self.owners.insert(id.0, o);
                    }
                    o
                }
                other => self.owners.get(&other.id().0).copied(),
            };
            match owner {
                Some(ctx) => {
                    let sent = self.chans.get(&ctx).is_some_and(|fd| {
                        crate::sys::send_message(fd.as_fd(), describe(&e).as_bytes()).is_ok()
                    });
                    if !sent {
                        self.counters.events_dropped += 1;
                    }
                }
                None => {
                    if self.events.len() >= EVENTS_MAX {
                        self.events.pop_front();
                        self.counters.events_dropped += 1;
                    }
                    self.events.push_back(e);
                }
            }
        }
    }

    /// A context closed: let go of every CM ID it owned and of its channel.
    pub(crate) fn close_context(&mut self, ctx: CtxId, now: Time) {
        let ids: Vec<u32> = self
            .owners
            .iter()
            .filter(|(_, c)| **c == ctx)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.cm.destroy(now, CmId(id));
            self.owners.remove(&id);
        }
        self.chans.remove(&ctx);
        self.collect();
    }

    /// The next event for the consumer.
    pub(crate) fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// The deadline to queue in the engine's heap, if it is earlier than the one queued
    /// (one entry at a time, as for QPs: a later deadline is picked up when the armed entry
    /// fires).
    pub(crate) fn arm(&mut self) -> Option<Time> {
        let t = self.cm.poll_timeout()?;
        if self.armed.is_none_or(|a| t < a) {
            self.armed = Some(t);
            return Some(t);
        }
        None
    }

    /// The heap entry for `t` fired: run the CM's timers if due. Returns whether it did.
    pub(crate) fn fire(&mut self, t: Time, now: Time) -> bool {
        if self.armed != Some(t) {
            return false; // stale entry
        }
        self.armed = None;
        let due = self.cm.poll_timeout().is_some_and(|d| d <= now);
        if due {
            self.cm.handle_timeout(now);
            self.collect();
        }
        due
    }

    /// The next MAD to send as a RoCEv2 packet: `(destination, length)` with the packet
    /// (BTH, DETH, MAD; no ICRC) written into `buf`.
    pub(crate) fn next_packet(&mut self, buf: &mut [u8]) -> Option<(IpAddr, usize)> {
        loop {
            let t = self.cm.poll_transmit()?;
            let bth = BthRepr::new(Opcode::UD_SEND_ONLY, Qpn::GSI, self.psn);
            let pkt = RocePacketRepr {
                deth: Some(DethRepr {
                    qkey: Qkey::GSI,
                    src_qp: Qpn::GSI,
                }),
                ..RocePacketRepr::new(bth, &t.mad[..])
            };
            match pkt.emit(buf) {
                Ok(len) => {
                    self.psn = self.psn.next();
                    self.counters.mads_sent += 1;
                    return Some((t.to, len));
                }
                // A buffer too small for a MAD cannot happen with the engine's packet
                // buffers; drop the MAD rather than stall QP 1 (the CM retransmits).
                Err(_) => continue,
            }
        }
    }
}

/// A seed for the CM's Local Comm IDs that differs at every device start (peers remember
/// old IDs for a while; kernel cm.c draws its XOR operand at random for the same reason):
/// 8 bytes of the kernel's random pool, or the clock and process ID if it cannot be read.
pub(crate) fn id_seed() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if random.is_ok() {
        return u64::from_ne_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ (u64::from(std::process::id()) << 32)
}

/// An event as the channel carries it: kind, IDs, peer, and the message behind it.
fn describe(e: &CmEvent) -> CmEventDesc {
    let mut d = CmEventDesc {
        id: e.id().0,
        ..CmEventDesc::default()
    };
    let mut msg = None;
    // The REQ's or REP's ECE options travel in the MAD header, as on the wire.
    let mut attr_mod = 0;
    match e {
        CmEvent::ConnectRequest {
            listen,
            peer,
            req,
            ece,
            ..
        } => {
            d.kind = cm_event::CONNECT_REQUEST;
            d.listen = listen.0;
            d.peer = ip_to_gid(*peer);
            msg = Some(CmMsg::Req(req.clone()));
            attr_mod = ece.options;
        }
        CmEvent::ConnectResponse { rep, ece, .. } => {
            d.kind = cm_event::CONNECT_RESPONSE;
            msg = Some(CmMsg::Rep(rep.clone()));
            attr_mod = ece.options;
        }
        CmEvent::Established { .. } => d.kind = cm_event::ESTABLISHED,
        CmEvent::Rejected {
            reason,
            private_data,
            ..
        } => {
            d.kind = cm_event::REJECTED;
            msg = Some(CmMsg::Rej(Box::new(RejRepr {
                local_comm_id: 0,
                remote_comm_id: 0,
                message_rejected: MsgRef::REQ,
                reject_info_len: 0,
                reason: *reason,
                ari: [0; pd_len::ARI],
                private_data: **private_data,
            })));
        }
        CmEvent::Unreachable { .. } => d.kind = cm_event::UNREACHABLE,
        CmEvent::Disconnected { timed_out, .. } => {
            d.kind = cm_event::DISCONNECTED;
            if *timed_out {
                d.flags |= CmEventDesc::FLAG_TIMED_OUT;
            }
        }
        CmEvent::TimewaitExit { .. } => d.kind = cm_event::TIMEWAIT_EXIT,
        CmEvent::SidrRequest {
            listen, peer, req, ..
        } => {
            d.kind = cm_event::SIDR_REQUEST;
            d.listen = listen.0;
            d.peer = ip_to_gid(*peer);
            msg = Some(CmMsg::SidrReq(req.clone()));
        }
        CmEvent::SidrReply { rep, .. } => {
            d.kind = cm_event::SIDR_REPLY;
            msg = Some(CmMsg::SidrRep(rep.clone()));
        }
    }
    if let Some(msg) = msg {
        let m = CmMadRepr {
            tid: 0,
            attr_mod,
            msg,
        };
        if m.emit(d.mad.as_flattened_mut()).is_ok() {
            d.flags |= CmEventDesc::FLAG_MAD;
        }
    }
    d
}
