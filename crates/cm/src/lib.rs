//! A sans-IO InfiniBand Communication Manager for one RoCEv2 device (IBTA Vol 1 §12: the
//! connection establishment, disconnection and Service ID Resolution protocols), the part the
//! Linux kernel's `drivers/infiniband/core/cm.c` plays under rdma_cm.
//!
//! [`Cm`] holds every communication ID of a device — listeners, connections on either side,
//! SIDR lookups — and never touches a socket, a thread or a clock. Its driver feeds it:
//!
//! * MADs received on QP1 with [`Cm::handle_mad`] (the sender's IP address, taken from the
//!   RoCEv2 packet, is where answers go);
//! * time with [`Cm::handle_timeout`] at [`Cm::poll_timeout`];
//! * the consumer's calls: [`Cm::listen`], [`Cm::connect`], [`Cm::accept`], [`Cm::establish`],
//!   [`Cm::reject`], [`Cm::disconnect`], [`Cm::destroy`], [`Cm::sidr_request`],
//!   [`Cm::sidr_reply`];
//!
//! and drains MADs to send with [`Cm::poll_transmit`] (each a UD SEND to QP 1 of the peer, Q_Key
//! 0x8001_0000) and consumer events with [`Cm::poll_event`].
//!
//! Call order: any input in any order; after each input drain `poll_transmit` and `poll_event`
//! and re-read `poll_timeout`. Time must not go backwards.
//!
//! What the state machine guarantees, whatever the link loses, duplicates or reorders:
//! an active connect ends in exactly one of `ConnectResponse` (then the consumer establishes),
//! `Rejected` or `Unreachable`; a passive connection in `Established`, `Rejected` or
//! `Unreachable`; a disconnect in `Disconnected` then `TimewaitExit`. Every retransmitted
//! message is bounded by the retry count of its sender (IBTA Vol 1 §12.7.27 Max CM Retries).

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::IpAddr;

use transport::Time;
use wire::cm::{
    iba_time_to_ms, linux_style_tid, pd_len, CmMadRepr, CmMsg, CmPath, CmaHdr, DrepRepr, DreqRepr,
    Ece, MraRepr, MsgRef, RejReason, RejRepr, RepRepr, ReqRepr, RtuRepr, ServiceId, SidrRepRepr,
    SidrReqRepr, SidrStatus,
};
use wire::mad::MAD_LEN;
use wire::{Psn, Qkey, Qpn};

/// A communication ID: the Local Comm ID of a connection, the Request ID of a SIDR lookup, or
/// the handle of a listener. Never 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmId(pub u32);

/// Timer and identity settings of one device's CM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// The device's CA GUID (REQ/REP Local CA GUID).
    pub ca_guid: u64,
    /// Local CA ACK delay (IBA time exponent) sent as the REP's Target ACK Delay.
    pub local_ack_delay: u8,
    /// Packet life time of the path (IBA time exponent). Linux rdma_cm on RoCE uses 18 or 16.
    pub packet_life_time: u8,
    /// CM response timeout sent in REQs (IBA time exponent; rdma_cm uses 20 ≈ 4.3 s).
    pub cm_response_timeout: u8,
    /// Max CM retries sent in REQs and used for our own retransmissions (≤ 15).
    pub max_cm_retries: u8,
    /// Service timeout sent in MRAs (IBA time exponent; rdma_cm uses 24).
    pub mra_service_timeout: u8,
    /// High half of the transaction IDs of unsolicited messages (the MAD agent number on Linux).
    pub tid_hi: u32,
    /// Seed of the Local Comm ID generator: give each device start a different random value so
    /// IDs do not repeat across restarts (peers keep old IDs in their tables for a while).
    pub id_seed: u64,
    /// With a daemon sharing the device among processes (docs/daemon.md), the top
    /// `id_prefix_bits` bits of every ID this CM allocates are `id_prefix`, so the daemon can
    /// route answers (which carry our ID as their Remote Comm ID or Request ID) to this
    /// process. 0 bits: no prefix.
    pub id_prefix_bits: u8,
    /// See `id_prefix_bits`.
    pub id_prefix: u32,
}

impl CmConfig {
    /// rdma_cm's values on a Linux RoCE device (kernel cma.c `CMA_CM_RESPONSE_TIMEOUT`,
    /// `CMA_MAX_CM_RETRIES`, `CMA_CM_MRA_SETTING`, `CMA_IBOE_PACKET_LIFETIME`; rxe's ACK delay).
    pub const fn linux_defaults(ca_guid: u64, id_seed: u64) -> CmConfig {
        CmConfig {
            ca_guid,
            local_ack_delay: 15,
            packet_life_time: 18,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            mra_service_timeout: 24,
            tid_hi: 2,
            id_seed,
            id_prefix_bits: 0,
            id_prefix: 0,
        }
    }
}

/// What the active side asks for (the fields of a REQ; IBTA Vol 1 §12.6.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// Where the peer's QP1 is (the IP address of its GID).
    pub peer: IpAddr,
    pub service_id: ServiceId,
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    pub local_qpn: Qpn,
    /// Our receive PSN: the first PSN the peer will send.
    pub starting_psn: Psn,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// Clamped to 7.
    pub retry_count: u8,
    /// Clamped to 7.
    pub rnr_retry_count: u8,
    /// IBTA MTU code.
    pub path_mtu: u8,
    /// 0 = RC, 1 = UC.
    pub transport_type: u8,
    pub srq: bool,
    pub flow_label: u32,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// Private data, at most 92 bytes (rdma_cm puts its 36-byte header first).
    pub private_data: Vec<u8>,
    /// Enhanced Connection Establishment offered: the REQ's Vendor ID (24 bits) and its MAD's
    /// Attribute Modifier ([`Ece::NONE`]: both 0, as a CM without ECE sends).
    pub ece: Ece,
}

/// What the passive side answers with (the fields of a REP; IBTA Vol 1 §12.6.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    pub local_qpn: Qpn,
    /// Our receive PSN.
    pub starting_psn: Psn,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// Clamped to 7.
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// At most 196 bytes.
    pub private_data: Vec<u8>,
    /// Enhanced Connection Establishment answered: the REP's Vendor ID and its MAD's
    /// Attribute Modifier ([`Ece::NONE`]: both 0).
    pub ece: Ece,
}

/// What the consumer learns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ matched listener `listen`; `id` is the new passive connection, waiting for
    /// [`Cm::accept`] or [`Cm::reject`].
    ConnectRequest {
        listen: CmId,
        id: CmId,
        peer: IpAddr,
        req: Box<ReqRepr>,
        /// The REQ's ECE: its Vendor ID and its MAD's Attribute Modifier.
        ece: Ece,
    },
    /// The passive side accepted (a REP arrived): move the QP to RTR/RTS with `rep`'s values,
    /// then call [`Cm::establish`] (which sends the RTU), or [`Cm::reject`].
    ConnectResponse {
        id: CmId,
        rep: Box<RepRepr>,
        /// The REP's ECE: its Vendor ID and its MAD's Attribute Modifier.
        ece: Ece,
    },
    /// Passive side: the RTU arrived (or [`Cm::established_by_data`] was called).
    Established { id: CmId },
    /// The peer refused (or, on the passive side, the active side gave up after our REP).
    Rejected {
        id: CmId,
        reason: RejReason,
        private_data: Box<[u8; pd_len::REJ]>,
    },
    /// No answer within the retries (REQ, REP or SIDR_REQ).
    Unreachable { id: CmId },
    /// The connection is down: a DREQ arrived, our DREQ was answered, or it was never answered
    /// (`timed_out`).
    Disconnected { id: CmId, timed_out: bool },
    /// Timewait is over; the QP may be reused.
    TimewaitExit { id: CmId },
    /// A SIDR_REQ matched listener `listen`; answer with [`Cm::sidr_reply`].
    SidrRequest {
        listen: CmId,
        id: CmId,
        peer: IpAddr,
        req: Box<SidrReqRepr>,
    },
    /// The answer to our [`Cm::sidr_request`].
    SidrReply { id: CmId, rep: Box<SidrRepRepr> },
}

impl CmEvent {
    /// The ID the event concerns.
    pub fn id(&self) -> CmId {
        match self {
            CmEvent::ConnectRequest { id, .. }
            | CmEvent::ConnectResponse { id, .. }
            | CmEvent::Established { id }
            | CmEvent::Rejected { id, .. }
            | CmEvent::Unreachable { id }
            | CmEvent::Disconnected { id, .. }
            | CmEvent::TimewaitExit { id }
            | CmEvent::SidrRequest { id, .. }
            | CmEvent::SidrReply { id, .. } => *id,
        }
    }
}

/// Why a consumer call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmError {
    /// No such ID (never existed, destroyed, or its protocol already ended).
    UnknownId,
    /// The call does not fit the ID's state (e.g. accept on an active connection).
    InvalidState,
    /// Private data longer than the message carries.
    PrivateDataTooLong,
    /// Another listener already has this Service ID and address.
    AddressInUse,
}

impl CmError {
    /// The errno Linux's rdma_cm / ib_cm return for the same refusal.
    pub const fn errno(self) -> i32 {
        match self {
            CmError::UnknownId => 22,          // EINVAL
            CmError::InvalidState => 22,       // EINVAL
            CmError::PrivateDataTooLong => 22, // EINVAL
            CmError::AddressInUse => 98,       // EADDRINUSE
        }
    }
}

impl fmt::Display for CmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CmError::UnknownId => "unknown CM ID",
            CmError::InvalidState => "call not valid in the CM ID's state",
            CmError::PrivateDataTooLong => "private data longer than the CM message carries",
            CmError::AddressInUse => "a listener already uses this service ID and address",
        })
    }
}

impl std::error::Error for CmError {}

/// A MAD to send to QP 1 of `to`.
#[derive(Clone, PartialEq, Eq)]
pub struct Transmit {
    pub to: IpAddr,
    pub mad: Box<[u8; MAD_LEN]>,
}

impl fmt::Debug for Transmit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let attr = u16::from_be_bytes([self.mad[16], self.mad[17]]);
        f.debug_struct("Transmit")
            .field("to", &self.to)
            .field("attr", &format_args!("{attr:#06x}"))
            .finish()
    }
}

/// Counters of one CM (named after what they count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmStats {
    pub mads_sent: u64,
    pub mads_received: u64,
    /// Received MADs that were not CM Sends, were truncated or carried an unknown attribute.
    pub mads_malformed: u64,
    /// Well-formed MADs that matched no ID in a state that takes them.
    pub mads_unmatched: u64,
    pub retransmits: u64,
    pub rej_sent: u64,
    pub rej_received: u64,
    pub mra_sent: u64,
    pub timeouts: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Active: REQ sent, waiting for REP/REJ/MRA.
    ReqSent,
    /// Active: an MRA for our REQ arrived; waiting longer.
    MraReqRcvd,
    /// Passive: REQ delivered to the consumer, not yet accepted.
    ReqRcvd,
    /// Passive: we told the active side to wait (MRA) for the consumer.
    MraReqSent,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Passive: the active side asked us to wait (MRA for our REP).
    MraRepRcvd,
    /// Active: REP received, waiting for the consumer to establish.
    RepRcvd,
    Established,
    DreqSent,
    DreqRcvd,
    Timewait,
    SidrReqSent,
    SidrReqRcvd,
}

#[derive(Debug)]
struct Conn {
    state: State,
    peer: IpAddr,
    remote_id: u32,
    remote_guid: u64,
    /// TID of the REQ: REP, RTU, MRA and REJ reuse it.
    tid: u64,
    local_qpn: Qpn,
    remote_qpn: Qpn,
    /// The message retransmitted on timeout, if any.
    last: Option<Box<[u8; MAD_LEN]>>,
    retries_left: u8,
    /// Retransmission period of `last`.
    period_ms: u64,
    deadline: Option<Time>,
    /// The DREQ's TID, echoed in our DREP.
    dreq_tid: u64,
    /// The consumer destroyed the ID: the protocol finishes without events.
    orphan: bool,
    service_id: ServiceId,
    /// The REQ's max CM retries and local response timeout (passive side).
    peer_retries: u8,
    peer_response_timeout: u8,
}

#[derive(Debug)]
struct Listener {
    service_id: ServiceId,
    bind: Option<IpAddr>,
}

/// The CM of one device. See the crate documentation.
#[derive(Debug)]
pub struct Cm {
    cfg: CmConfig,
    id_xor: u32,
    next_id: u32,
    conns: BTreeMap<u32, Conn>,
    listeners: BTreeMap<u32, Listener>,
    out: VecDeque<Transmit>,
    events: VecDeque<CmEvent>,
    stats: CmStats,
}

fn ms(n: u64) -> u64 {
    n.saturating_mul(1_000_000)
}

fn copy_pd<const N: usize>(pd: &[u8]) -> Result<[u8; N], CmError> {
    if pd.len() > N {
        return Err(CmError::PrivateDataTooLong);
    }
    let mut a = [0u8; N];
    a[..pd.len()].copy_from_slice(pd);
    Ok(a)
}

impl Cm {
    pub fn new(cfg: CmConfig) -> Cm {
        // splitmix64 of the seed: the XOR operand and the counter's start (kernel cm.c keeps
        // cyclic IDs XOR a random operand chosen at load).
        let mut z = cfg.id_seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Cm {
            cfg,
            id_xor: z as u32,
            next_id: (z >> 32) as u32,
            conns: BTreeMap::new(),
            listeners: BTreeMap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: CmStats::default(),
        }
    }

    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    pub fn stats(&self) -> CmStats {
        self.stats
    }

    /// Number of live IDs (listeners, connections, lookups, timewait included).
    pub fn live_ids(&self) -> usize {
        self.conns.len() + self.listeners.len()
    }

    fn alloc_id(&mut self) -> u32 {
        loop {
            self.next_id = self.next_id.wrapping_add(1);
            let mut id = self.next_id ^ self.id_xor;
            let bits = u32::from(self.cfg.id_prefix_bits.min(31));
            if bits > 0 {
                let low = u32::MAX >> bits;
                id = (id & low) | (self.cfg.id_prefix << (32 - bits));
            }
            if id != 0 && !self.conns.contains_key(&id) && !self.listeners.contains_key(&id) {
                return id;
            }
        }
    }

    /// Listens on `service_id`, for REQs (and SIDR_REQs) whose rdma_cm header names `bind` as
    /// destination, or any address when `bind` is `None`.
    pub fn listen(&mut self, service_id: ServiceId, bind: Option<IpAddr>) -> Result<CmId, CmError> {
        let clash = self.listeners.values().any(|l| {
            l.service_id == service_id && (l.bind.is_none() || bind.is_none() || l.bind == bind)
        });
        if clash {
            return Err(CmError::AddressInUse);
        }
        let id = self.alloc_id();
        self.listeners.insert(id, Listener { service_id, bind });
        Ok(CmId(id))
    }

    /// Whether some listener is on `service_id`.
    pub fn is_listening(&self, service_id: ServiceId) -> bool {
        self.listeners.values().any(|l| l.service_id == service_id)
    }

    /// The service IDs listened on (each once).
    pub fn listening(&self) -> Vec<ServiceId> {
        let mut v: Vec<ServiceId> = self.listeners.values().map(|l| l.service_id).collect();
        v.sort_by_key(|s| s.0);
        v.dedup();
        v
    }

    /// Sends a REQ. The connection ends in `ConnectResponse`, `Rejected` or `Unreachable`.
    pub fn connect(&mut self, now: Time, p: &ConnectParams) -> Result<CmId, CmError> {
        let private_data = copy_pd::<{ pd_len::REQ }>(&p.private_data)?;
        let id = self.alloc_id();
        let path = CmPath {
            local_lid: 0xFFFF,
            remote_lid: 0xFFFF,
            local_gid: p.local_gid,
            remote_gid: p.remote_gid,
            flow_label: p.flow_label & 0xF_FFFF,
            packet_rate: 0,
            traffic_class: p.traffic_class,
            hop_limit: p.hop_limit,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: self.ack_timeout(),
        };
        let req = ReqRepr {
            local_comm_id: id,
            vendor_id: p.ece.vendor_id & 0xFF_FFFF,
            service_id: p.service_id,
            local_ca_guid: self.cfg.ca_guid,
            local_qkey: Qkey(0),
            local_qpn: p.local_qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: self.cfg.cm_response_timeout,
            transport_type: p.transport_type & 0x3,
            e2e_flow_control: false,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: self.cfg.cm_response_timeout,
            retry_count: p.retry_count.min(7),
            pkey: 0xFFFF,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count.min(7),
            max_cm_retries: self.cfg.max_cm_retries.min(15),
            srq: p.srq,
            extended_transport_type: 0,
            primary: path,
            alternate: CmPath::default(),
            sap_supported: false,
            private_data,
        };
        let tid = linux_style_tid(self.cfg.tid_hi, id);
        let period_ms = self.req_period_ms();
        let mut conn = Conn {
            state: State::ReqSent,
            peer: p.peer,
            remote_id: 0,
            remote_guid: 0,
            tid,
            service_id: p.service_id,
            local_qpn: p.local_qpn,
            remote_qpn: Qpn::new(0),
            last: None,
            retries_left: self.cfg.max_cm_retries.min(15),
            period_ms,
            deadline: None,
            dreq_tid: 0,
            orphan: false,
            peer_retries: self.cfg.max_cm_retries.min(15),
            peer_response_timeout: self.cfg.cm_response_timeout,
        };
        let mad = self.build_with(tid, p.ece.options, CmMsg::Req(Box::new(req)));
        self.send_reliably(now, &mut conn, mad);
        self.conns.insert(id, conn);
        Ok(CmId(id))
    }

    /// Accepts a connection delivered by `ConnectRequest`: sends the REP. It ends in
    /// `Established`, `Rejected` or `Unreachable`.
    pub fn accept(&mut self, now: Time, id: CmId, p: &AcceptParams) -> Result<(), CmError> {
        let private_data = copy_pd::<{ pd_len::REP }>(&p.private_data)?;
        let ack_delay = self.cfg.local_ack_delay;
        let guid = self.cfg.ca_guid;
        let mut conn = self.conns.remove(&id.0).ok_or(CmError::UnknownId)?;
        if !matches!(conn.state, State::ReqRcvd | State::MraReqSent) || conn.orphan {
            self.conns.insert(id.0, conn);
            return Err(CmError::InvalidState);
        }
        let rep = RepRepr {
            local_comm_id: id.0,
            remote_comm_id: conn.remote_id,
            local_qkey: Qkey(0),
            local_qpn: p.local_qpn,
            vendor_id: p.ece.vendor_id & 0xFF_FFFF,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: ack_delay,
            failover_accepted: 0,
            e2e_flow_control: false,
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: p.srq,
            local_ca_guid: guid,
            private_data,
        };
        conn.local_qpn = p.local_qpn;
        conn.state = State::RepSent;
        conn.retries_left = conn.peer_retries;
        conn.period_ms = iba_time_to_ms(conn.peer_response_timeout);
        let mad = self.build_with(conn.tid, p.ece.options, CmMsg::Rep(Box::new(rep)));
        self.send_reliably(now, &mut conn, mad);
        self.conns.insert(id.0, conn);
        Ok(())
    }

    /// Active side, after `ConnectResponse` and the QP's move to RTS: sends the RTU
    /// (rdma_establish).
    pub fn establish(&mut self, _now: Time, id: CmId) -> Result<(), CmError> {
        let conn = self.conns.get(&id.0).ok_or(CmError::UnknownId)?;
        if conn.state != State::RepRcvd || conn.orphan {
            return Err(CmError::InvalidState);
        }
        let (tid, peer, remote_id) = (conn.tid, conn.peer, conn.remote_id);
        let mad = self.build(
            tid,
            CmMsg::Rtu(Box::new(RtuRepr {
                local_comm_id: id.0,
                remote_comm_id: remote_id,
                private_data: [0; pd_len::RTU],
            })),
        );
        self.push(peer, mad);
        if let Some(conn) = self.conns.get_mut(&id.0) {
            conn.state = State::Established;
            conn.last = None;
            conn.deadline = None;
        }
        Ok(())
    }

    /// Passive side: the first packet arrived on the QP before the RTU (IBTA Vol 1 §12.9.6;
    /// rdma_notify with IBV_EVENT_COMM_EST).
    pub fn established_by_data(&mut self, id: CmId) -> Result<(), CmError> {
        let conn = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId)?;
        if !matches!(conn.state, State::RepSent | State::MraRepRcvd) {
            return Err(CmError::InvalidState);
        }
        conn.state = State::Established;
        conn.last = None;
        conn.deadline = None;
        let orphan = conn.orphan;
        self.event(orphan, CmEvent::Established { id });
        Ok(())
    }

    /// Refuses a connection: a passive one before it is established (REJ for the REQ), or an
    /// active one after `ConnectResponse` (REJ for the REP). The ID's protocol ends.
    pub fn reject(
        &mut self,
        _now: Time,
        id: CmId,
        reason: RejReason,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let pd = copy_pd::<{ pd_len::REJ }>(private_data)?;
        let conn = self.conns.get(&id.0).ok_or(CmError::UnknownId)?;
        let rejected = match conn.state {
            State::ReqRcvd | State::MraReqSent => MsgRef::REQ,
            State::RepRcvd => MsgRef::REP,
            _ => return Err(CmError::InvalidState),
        };
        let (tid, peer, remote_id) = (conn.tid, conn.peer, conn.remote_id);
        self.send_rej(tid, peer, id.0, remote_id, rejected, reason, &[], pd);
        self.conns.remove(&id.0);
        Ok(())
    }

    /// Disconnects an established connection (DREQ), or answers the peer's DREQ (DREP). Ends in
    /// `Disconnected` (unless the peer's DREQ already gave it) and `TimewaitExit`.
    pub fn disconnect(&mut self, now: Time, id: CmId) -> Result<(), CmError> {
        let mut conn = self.conns.remove(&id.0).ok_or(CmError::UnknownId)?;
        let r = match conn.state {
            State::Established | State::RepSent | State::MraRepRcvd => {
                self.send_dreq(now, id.0, &mut conn);
                Ok(())
            }
            State::DreqRcvd => {
                self.send_drep(id.0, &conn);
                self.enter_timewait(now, &mut conn);
                Ok(())
            }
            State::DreqSent | State::Timewait => Ok(()),
            _ => Err(CmError::InvalidState),
        };
        self.conns.insert(id.0, conn);
        r
    }

    /// The consumer lets go of `id`: a listener stops; a connection in progress is refused
    /// (REJ: timeout for an active REQ, consumer-defined otherwise); an established one is
    /// disconnected, and its DREQ/timewait run to the end without events. Never fails.
    pub fn destroy(&mut self, now: Time, id: CmId) {
        if self.listeners.remove(&id.0).is_some() {
            return;
        }
        let Some(mut conn) = self.conns.remove(&id.0) else {
            return;
        };
        let guid = self.cfg.ca_guid.to_be_bytes();
        let keep = match conn.state {
            State::ReqSent | State::MraReqRcvd => {
                self.send_rej(
                    conn.tid,
                    conn.peer,
                    id.0,
                    0,
                    MsgRef::REQ,
                    RejReason::TIMEOUT,
                    &guid,
                    [0; pd_len::REJ],
                );
                false
            }
            State::ReqRcvd | State::MraReqSent | State::RepSent | State::MraRepRcvd => {
                self.send_rej(
                    conn.tid,
                    conn.peer,
                    id.0,
                    conn.remote_id,
                    MsgRef::REQ,
                    RejReason::CONSUMER_DEFINED,
                    &[],
                    [0; pd_len::REJ],
                );
                false
            }
            State::RepRcvd => {
                self.send_rej(
                    conn.tid,
                    conn.peer,
                    id.0,
                    conn.remote_id,
                    MsgRef::REP,
                    RejReason::CONSUMER_DEFINED,
                    &[],
                    [0; pd_len::REJ],
                );
                false
            }
            State::Established => {
                self.send_dreq(now, id.0, &mut conn);
                true
            }
            State::DreqRcvd => {
                self.send_drep(id.0, &conn);
                self.enter_timewait(now, &mut conn);
                true
            }
            State::DreqSent | State::Timewait => true,
            State::SidrReqSent | State::SidrReqRcvd => false,
        };
        if keep {
            conn.orphan = true;
            self.conns.insert(id.0, conn);
        }
        self.events.retain(|e| e.id() != id);
    }

    /// Sends a SIDR_REQ (UD service resolution). Ends in `SidrReply` or `Unreachable`.
    pub fn sidr_request(
        &mut self,
        now: Time,
        peer: IpAddr,
        service_id: ServiceId,
        private_data: &[u8],
    ) -> Result<CmId, CmError> {
        let pd = copy_pd::<{ pd_len::SIDR_REQ }>(private_data)?;
        let id = self.alloc_id();
        let tid = linux_style_tid(self.cfg.tid_hi, id);
        let mut conn = Conn {
            state: State::SidrReqSent,
            peer,
            remote_id: 0,
            remote_guid: 0,
            tid,
            service_id,
            local_qpn: Qpn::new(0),
            remote_qpn: Qpn::new(0),
            last: None,
            retries_left: self.cfg.max_cm_retries.min(15),
            period_ms: iba_time_to_ms(self.cfg.cm_response_timeout),
            deadline: None,
            dreq_tid: 0,
            orphan: false,
            peer_retries: 0,
            peer_response_timeout: 0,
        };
        let mad = self.build(
            tid,
            CmMsg::SidrReq(Box::new(SidrReqRepr {
                request_id: id,
                pkey: 0xFFFF,
                service_id,
                private_data: pd,
            })),
        );
        self.send_reliably(now, &mut conn, mad);
        self.conns.insert(id, conn);
        Ok(CmId(id))
    }

    /// Answers a `SidrRequest`. The ID's protocol ends.
    pub fn sidr_reply(
        &mut self,
        _now: Time,
        id: CmId,
        status: SidrStatus,
        qpn: Qpn,
        qkey: Qkey,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let pd = copy_pd::<{ pd_len::SIDR_REP }>(private_data)?;
        let conn = self.conns.get(&id.0).ok_or(CmError::UnknownId)?;
        if conn.state != State::SidrReqRcvd {
            return Err(CmError::InvalidState);
        }
        let (tid, peer, request_id, service_id) =
            (conn.tid, conn.peer, conn.remote_id, conn.service_id);
        self.conns.remove(&id.0);
        let mad = self.build(
            tid,
            CmMsg::SidrRep(Box::new(SidrRepRepr {
                request_id,
                status,
                additional_info_len: 0,
                vendor_id: 0,
                qpn,
                service_id,
                qkey,
                additional_info: [0; pd_len::ARI],
                private_data: pd,
            })),
        );
        self.push(peer, mad);
        Ok(())
    }
}

// Receive path.
impl Cm {
    /// A MAD arrived on QP1 from `from`. Malformed MADs are dropped and counted
    /// ([`CmStats::mads_malformed`]); well-formed ones that match nothing are answered as Linux
    /// answers them (REJ 8 for an unknown Service ID, DREP for an unknown DREQ, SIDR_REP status
    /// 1) or dropped and counted.
    pub fn handle_mad(&mut self, now: Time, from: IpAddr, bytes: &[u8]) {
        self.stats.mads_received += 1;
        let Ok(m) = CmMadRepr::parse(bytes) else {
            self.stats.mads_malformed += 1;
            return;
        };
        let tid = m.tid;
        let ece_options = m.attr_mod;
        match m.msg {
            CmMsg::Req(req) => self.on_req(from, tid, req, ece_options),
            CmMsg::Mra(mra) => self.on_mra(now, &mra),
            CmMsg::Rej(rej) => self.on_rej(from, rej),
            CmMsg::Rep(rep) => self.on_rep(from, rep, ece_options),
            CmMsg::Rtu(rtu) => self.on_rtu(&rtu),
            CmMsg::Dreq(dreq) => self.on_dreq(now, from, tid, &dreq),
            CmMsg::Drep(drep) => self.on_drep(now, &drep),
            CmMsg::SidrReq(req) => self.on_sidr_req(from, tid, req),
            CmMsg::SidrRep(rep) => self.on_sidr_rep(rep),
        }
    }

    /// The listener a REQ/SIDR_REQ for `sid` reaches: `Ok(id)`, or `Err(true)` when listeners
    /// exist for the Service ID but none for the destination address (rdma_cm: REJ 28), or
    /// `Err(false)` when nobody listens (REJ 8).
    fn find_listener(&self, sid: ServiceId, pd: &[u8]) -> Result<u32, bool> {
        let mut any = false;
        let dst = if sid.is_rdma_ip() {
            CmaHdr::parse(pd).ok().map(|h| h.dst)
        } else {
            None
        };
        let mut wildcard = None;
        for (id, l) in &self.listeners {
            if l.service_id != sid {
                continue;
            }
            any = true;
            match (l.bind, dst) {
                (None, _) => wildcard = Some(*id),
                (Some(b), Some(d)) if b == d => return Ok(*id),
                _ => {}
            }
        }
        // An rdma_cm REQ without a usable cma_hdr reaches no IP listener (cma.c rejects it).
        if sid.is_rdma_ip() && dst.is_none() {
            return Err(any);
        }
        wildcard.ok_or(any)
    }

    fn on_req(&mut self, from: IpAddr, tid: u64, req: Box<ReqRepr>, ece_options: u32) {
        // A duplicate: same (Local Comm ID, CA GUID) as a connection we know (cm.c cm_match_req).
        let dup = self
            .conns
            .iter()
            .find(|(_, c)| {
                c.remote_id == req.local_comm_id
                    && c.remote_guid == req.local_ca_guid
                    && !matches!(c.state, State::SidrReqRcvd | State::SidrReqSent)
            })
            .map(|(id, c)| (*id, c.state));
        if let Some((id, state)) = dup {
            match state {
                State::ReqRcvd | State::MraReqSent => self.send_mra(id, MsgRef::REQ),
                State::Timewait => {
                    let c = &self.conns[&id];
                    let (tid, peer, remote) = (c.tid, c.peer, c.remote_id);
                    self.send_rej(
                        tid,
                        peer,
                        id,
                        remote,
                        MsgRef::REQ,
                        RejReason::STALE_CONN,
                        &[],
                        [0; pd_len::REJ],
                    );
                }
                // REP_SENT: our REP timer retransmits; later states: the REQ is old news.
                _ => self.stats.mads_unmatched += 1,
            }
            return;
        }
        // A stale connection: the peer's QP is still connected to us under another ID.
        let stale = self.conns.values().any(|c| {
            c.remote_guid == req.local_ca_guid
                && c.remote_qpn == req.local_qpn
                && matches!(
                    c.state,
                    State::Established | State::RepSent | State::MraRepRcvd | State::RepRcvd
                )
        });
        if stale {
            self.send_rej(
                tid,
                from,
                0,
                req.local_comm_id,
                MsgRef::REQ,
                RejReason::STALE_CONN,
                &[],
                [0; pd_len::REJ],
            );
            return;
        }
        let listen = match self.find_listener(req.service_id, &req.private_data) {
            Ok(l) => l,
            Err(any) => {
                let reason = if any {
                    RejReason::CONSUMER_DEFINED
                } else {
                    RejReason::INVALID_SERVICE_ID
                };
                self.send_rej(
                    tid,
                    from,
                    0,
                    req.local_comm_id,
                    MsgRef::REQ,
                    reason,
                    &[],
                    [0; pd_len::REJ],
                );
                return;
            }
        };
        let id = self.alloc_id();
        let conn = Conn {
            state: State::ReqRcvd,
            peer: from,
            remote_id: req.local_comm_id,
            remote_guid: req.local_ca_guid,
            tid,
            service_id: req.service_id,
            local_qpn: Qpn::new(0),
            remote_qpn: req.local_qpn,
            last: None,
            retries_left: 0,
            period_ms: 0,
            deadline: None,
            dreq_tid: 0,
            orphan: false,
            peer_retries: req.max_cm_retries.min(15),
            peer_response_timeout: req.local_cm_response_timeout,
        };
        self.conns.insert(id, conn);
        let ece = Ece {
            vendor_id: req.vendor_id,
            options: ece_options,
        };
        self.events.push_back(CmEvent::ConnectRequest {
            listen: CmId(listen),
            id: CmId(id),
            peer: from,
            req,
            ece,
        });
    }

    fn on_rep(&mut self, from: IpAddr, rep: Box<RepRepr>, ece_options: u32) {
        let id = rep.remote_comm_id;
        let Some(conn) = self.conns.get_mut(&id) else {
            self.stats.mads_unmatched += 1;
            return;
        };
        match conn.state {
            State::ReqSent | State::MraReqRcvd => {
                conn.state = State::RepRcvd;
                conn.remote_id = rep.local_comm_id;
                conn.remote_guid = rep.local_ca_guid;
                conn.remote_qpn = rep.local_qpn;
                conn.peer = from;
                conn.last = None;
                conn.deadline = None;
                let orphan = conn.orphan;
                let ece = Ece {
                    vendor_id: rep.vendor_id,
                    options: ece_options,
                };
                self.event(
                    orphan,
                    CmEvent::ConnectResponse {
                        id: CmId(id),
                        rep,
                        ece,
                    },
                );
            }
            // The consumer has not established yet: ask the passive side to wait.
            State::RepRcvd if conn.remote_id == rep.local_comm_id => self.send_mra(id, MsgRef::REP),
            // Our RTU was lost: send it again.
            State::Established if conn.remote_id == rep.local_comm_id => {
                let (tid, peer, remote) = (conn.tid, conn.peer, conn.remote_id);
                let mad = self.build(
                    tid,
                    CmMsg::Rtu(Box::new(RtuRepr {
                        local_comm_id: id,
                        remote_comm_id: remote,
                        private_data: [0; pd_len::RTU],
                    })),
                );
                self.push(peer, mad);
            }
            _ => self.stats.mads_unmatched += 1,
        }
    }

    fn on_rtu(&mut self, rtu: &RtuRepr) {
        let id = rtu.remote_comm_id;
        match self.conns.get_mut(&id) {
            Some(c)
                if c.remote_id == rtu.local_comm_id
                    && matches!(c.state, State::RepSent | State::MraRepRcvd) =>
            {
                c.state = State::Established;
                c.last = None;
                c.deadline = None;
                let orphan = c.orphan;
                self.event(orphan, CmEvent::Established { id: CmId(id) });
            }
            _ => self.stats.mads_unmatched += 1,
        }
    }

    fn on_mra(&mut self, now: Time, mra: &MraRepr) {
        let id = mra.remote_comm_id;
        let wait_ms = iba_time_to_ms(mra.service_timeout)
            + iba_time_to_ms(self.cfg.packet_life_time.saturating_add(1));
        match self.conns.get_mut(&id) {
            Some(c) if mra.message_mraed == MsgRef::REQ && c.state == State::ReqSent => {
                c.state = State::MraReqRcvd;
                c.deadline = Some(now.add_nanos(ms(wait_ms)));
            }
            Some(c)
                if mra.message_mraed == MsgRef::REP
                    && c.state == State::RepSent
                    && c.remote_id == mra.local_comm_id =>
            {
                c.state = State::MraRepRcvd;
                c.deadline = Some(now.add_nanos(ms(wait_ms)));
            }
            _ => self.stats.mads_unmatched += 1,
        }
    }

    fn on_rej(&mut self, from: IpAddr, rej: Box<RejRepr>) {
        self.stats.rej_received += 1;
        let by_id = self.conns.get(&rej.remote_comm_id).is_some_and(|c| {
            // A REJ of our REQ carries our ID; the peer may not have had one for it yet.
            matches!(c.state, State::ReqSent | State::MraReqRcvd)
                || (c.remote_id == rej.local_comm_id
                    && matches!(
                        c.state,
                        State::RepSent
                            | State::MraRepRcvd
                            | State::RepRcvd
                            | State::ReqRcvd
                            | State::MraReqSent
                            | State::Established
                    ))
        });
        let id = if by_id {
            Some(rej.remote_comm_id)
        } else {
            // An active side that gave up before it knew our ID rejects with Remote Comm ID 0
            // (reason timeout, its GUID in the ARI): find the connection by its ID and sender
            // (kernel cm.c cm_acquire_rejected_id looks it up in the remote-ID table).
            self.conns
                .iter()
                .find(|(_, c)| {
                    c.remote_id == rej.local_comm_id
                        && c.peer == from
                        && matches!(
                            c.state,
                            State::ReqRcvd | State::MraReqSent | State::RepSent | State::MraRepRcvd
                        )
                })
                .map(|(id, _)| *id)
        };
        let Some(id) = id else {
            self.stats.mads_unmatched += 1;
            return;
        };
        if let Some(c) = self.conns.remove(&id) {
            let orphan = c.orphan;
            self.event(
                orphan,
                CmEvent::Rejected {
                    id: CmId(id),
                    reason: rej.reason,
                    private_data: Box::new(rej.private_data),
                },
            );
        }
    }

    fn on_dreq(&mut self, now: Time, from: IpAddr, tid: u64, dreq: &DreqRepr) {
        let id = dreq.remote_comm_id;
        let known = self
            .conns
            .get(&id)
            .filter(|c| c.remote_id == dreq.local_comm_id)
            .map(|c| (c.state, c.local_qpn));
        let Some((state, qpn)) = known else {
            // Unknown IDs still get a DREP (cm.c cm_issue_drep), TID echoed.
            let mad = self.build(
                tid,
                CmMsg::Drep(Box::new(DrepRepr {
                    local_comm_id: dreq.remote_comm_id,
                    remote_comm_id: dreq.local_comm_id,
                    private_data: [0; pd_len::DREP],
                })),
            );
            self.push(from, mad);
            return;
        };
        if dreq.remote_qpn != qpn {
            // Linux ignores a DREQ that does not name our QP (cm.c cm_dreq_handler).
            self.stats.mads_unmatched += 1;
            return;
        }
        let Some(mut conn) = self.conns.remove(&id) else {
            return;
        };
        conn.dreq_tid = tid;
        match state {
            State::Established | State::RepSent | State::MraRepRcvd => {
                if state != State::Established {
                    self.event(conn.orphan, CmEvent::Established { id: CmId(id) });
                }
                conn.state = State::DreqRcvd;
                conn.last = None;
                conn.deadline = None;
                if conn.orphan {
                    // Nobody will answer for the consumer: answer now.
                    self.send_drep(id, &conn);
                    self.enter_timewait(now, &mut conn);
                } else {
                    self.event(
                        false,
                        CmEvent::Disconnected {
                            id: CmId(id),
                            timed_out: false,
                        },
                    );
                }
            }
            // Both sides disconnected at once.
            State::DreqSent => {
                self.send_drep(id, &conn);
                self.enter_timewait(now, &mut conn);
                self.event(
                    conn.orphan,
                    CmEvent::Disconnected {
                        id: CmId(id),
                        timed_out: false,
                    },
                );
            }
            // Our DREP was lost.
            State::Timewait => self.send_drep(id, &conn),
            _ => self.stats.mads_unmatched += 1,
        }
        self.conns.insert(id, conn);
    }

    fn on_drep(&mut self, now: Time, drep: &DrepRepr) {
        let id = drep.remote_comm_id;
        let Some(mut conn) = self.conns.remove(&id) else {
            self.stats.mads_unmatched += 1;
            return;
        };
        if conn.state == State::DreqSent && conn.remote_id == drep.local_comm_id {
            self.enter_timewait(now, &mut conn);
            self.event(
                conn.orphan,
                CmEvent::Disconnected {
                    id: CmId(id),
                    timed_out: false,
                },
            );
        } else {
            self.stats.mads_unmatched += 1;
        }
        self.conns.insert(id, conn);
    }

    fn on_sidr_req(&mut self, from: IpAddr, tid: u64, req: Box<SidrReqRepr>) {
        // A duplicate: (Request ID, sender) already waiting for the consumer.
        let dup = self.conns.values().any(|c| {
            c.state == State::SidrReqRcvd && c.remote_id == req.request_id && c.peer == from
        });
        if dup {
            self.stats.mads_unmatched += 1;
            return;
        }
        let listen = match self.find_listener(req.service_id, &req.private_data) {
            Ok(l) => l,
            Err(any) => {
                let status = if any {
                    SidrStatus::REJECT
                } else {
                    SidrStatus::UNSUPPORTED
                };
                let mad = self.build(
                    tid,
                    CmMsg::SidrRep(Box::new(SidrRepRepr {
                        request_id: req.request_id,
                        status,
                        additional_info_len: 0,
                        vendor_id: 0,
                        qpn: Qpn::new(0),
                        service_id: req.service_id,
                        qkey: Qkey(0),
                        additional_info: [0; pd_len::ARI],
                        private_data: [0; pd_len::SIDR_REP],
                    })),
                );
                self.push(from, mad);
                return;
            }
        };
        let id = self.alloc_id();
        self.conns.insert(
            id,
            Conn {
                state: State::SidrReqRcvd,
                peer: from,
                remote_id: req.request_id,
                remote_guid: 0,
                tid,
                service_id: req.service_id,
                local_qpn: Qpn::new(0),
                remote_qpn: Qpn::new(0),
                last: None,
                retries_left: 0,
                period_ms: 0,
                deadline: None,
                dreq_tid: 0,
                orphan: false,
                peer_retries: 0,
                peer_response_timeout: 0,
            },
        );
        self.events.push_back(CmEvent::SidrRequest {
            listen: CmId(listen),
            id: CmId(id),
            peer: from,
            req,
        });
    }

    fn on_sidr_rep(&mut self, rep: Box<SidrRepRepr>) {
        let id = rep.request_id;
        match self.conns.get(&id) {
            Some(c) if c.state == State::SidrReqSent => {
                self.conns.remove(&id);
                self.events
                    .push_back(CmEvent::SidrReply { id: CmId(id), rep });
            }
            _ => self.stats.mads_unmatched += 1,
        }
    }
}

// Timers and sending.
impl Cm {
    /// The earliest deadline of any ID.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.conns.values().filter_map(|c| c.deadline).min()
    }

    /// Runs every timer due at `now`: retransmissions, the end of retries, timewait.
    pub fn handle_timeout(&mut self, now: Time) {
        let due: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let Some(mut conn) = self.conns.remove(&id) else {
                continue;
            };
            let keep = self.expire(now, id, &mut conn);
            if keep {
                self.conns.insert(id, conn);
            }
        }
    }

    /// One due timer of `conn`; false when the ID's protocol ended.
    fn expire(&mut self, now: Time, id: u32, conn: &mut Conn) -> bool {
        if conn.state == State::Timewait {
            self.event(conn.orphan, CmEvent::TimewaitExit { id: CmId(id) });
            return false;
        }
        // After an MRA's wait the message goes again, with the retries it had left.
        if matches!(conn.state, State::MraReqRcvd | State::MraRepRcvd) {
            conn.state = if conn.state == State::MraReqRcvd {
                State::ReqSent
            } else {
                State::RepSent
            };
        }
        if conn.retries_left > 0 {
            if let Some(mad) = conn.last.clone() {
                conn.retries_left -= 1;
                self.stats.retransmits += 1;
                self.stats.mads_sent += 1;
                self.out.push_back(Transmit { to: conn.peer, mad });
                conn.deadline = Some(now.add_nanos(ms(conn.period_ms)));
                return true;
            }
        }
        self.stats.timeouts += 1;
        conn.last = None;
        conn.deadline = None;
        match conn.state {
            State::DreqSent => {
                self.event(
                    conn.orphan,
                    CmEvent::Disconnected {
                        id: CmId(id),
                        timed_out: true,
                    },
                );
                self.enter_timewait(now, conn);
                true
            }
            State::ReqSent | State::RepSent | State::SidrReqSent => {
                if conn.state != State::SidrReqSent {
                    // Tell the other side we gave up (kernel cm.c: REJ with reason timeout and
                    // our GUID as ARI), so it cannot stay half-open if it is alive.
                    let guid = self.cfg.ca_guid.to_be_bytes();
                    let (remote, what) = if conn.state == State::ReqSent {
                        (0, MsgRef::REQ)
                    } else {
                        (conn.remote_id, MsgRef::REP)
                    };
                    self.send_rej(
                        conn.tid,
                        conn.peer,
                        id,
                        remote,
                        what,
                        RejReason::TIMEOUT,
                        &guid,
                        [0; pd_len::REJ],
                    );
                }
                self.event(conn.orphan, CmEvent::Unreachable { id: CmId(id) });
                false
            }
            _ => true,
        }
    }

    /// Whether MADs wait in the output queue.
    pub fn has_transmits(&self) -> bool {
        !self.out.is_empty()
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.pop_front()
    }

    /// The next event for the consumer.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    fn event(&mut self, orphan: bool, e: CmEvent) {
        if !orphan {
            self.events.push_back(e);
        }
    }

    /// The QP Local ACK Timeout the REQ proposes: kernel cm.c cm_ack_timeout(ack delay,
    /// 2 × packet life time), IBA time exponents.
    fn ack_timeout(&self) -> u8 {
        let ca = self.cfg.local_ack_delay;
        let plt = self.cfg.packet_life_time.saturating_add(1);
        let t = if ca > plt { ca } else { plt };
        let t = if ca.abs_diff(plt) <= 1 { t + 1 } else { t };
        t.min(31)
    }

    /// REQ retransmission period: 2 × packet life time + the peer's CM response timeout (kernel
    /// cm.c ib_send_cm_req).
    fn req_period_ms(&self) -> u64 {
        2 * iba_time_to_ms(self.cfg.packet_life_time) + iba_time_to_ms(self.cfg.cm_response_timeout)
    }

    fn build(&self, tid: u64, msg: CmMsg) -> Box<[u8; MAD_LEN]> {
        self.build_with(tid, 0, msg)
    }

    /// A MAD whose Attribute Modifier is `attr_mod` (a REQ's or REP's ECE options).
    fn build_with(&self, tid: u64, attr_mod: u32, msg: CmMsg) -> Box<[u8; MAD_LEN]> {
        let mut mad = Box::new([0u8; MAD_LEN]);
        let repr = CmMadRepr { tid, attr_mod, msg };
        // The buffer is exactly one MAD long, the only way emit can fail.
        let _ = repr.emit(&mut mad[..]);
        mad
    }

    fn push(&mut self, to: IpAddr, mad: Box<[u8; MAD_LEN]>) {
        self.stats.mads_sent += 1;
        self.out.push_back(Transmit { to, mad });
    }

    fn send_reliably(&mut self, now: Time, conn: &mut Conn, mad: Box<[u8; MAD_LEN]>) {
        conn.last = Some(mad.clone());
        conn.deadline = Some(now.add_nanos(ms(conn.period_ms)));
        self.push(conn.peer, mad);
    }

    #[allow(clippy::too_many_arguments)]
    fn send_rej(
        &mut self,
        tid: u64,
        to: IpAddr,
        local: u32,
        remote: u32,
        rejected: MsgRef,
        reason: RejReason,
        ari: &[u8],
        private_data: [u8; pd_len::REJ],
    ) {
        let mut a = [0u8; pd_len::ARI];
        let n = ari.len().min(pd_len::ARI);
        a[..n].copy_from_slice(&ari[..n]);
        let mad = self.build(
            tid,
            CmMsg::Rej(Box::new(RejRepr {
                local_comm_id: local,
                remote_comm_id: remote,
                message_rejected: rejected,
                reject_info_len: n as u8,
                reason,
                ari: a,
                private_data,
            })),
        );
        self.stats.rej_sent += 1;
        self.push(to, mad);
    }

    fn send_mra(&mut self, id: u32, what: MsgRef) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if what == MsgRef::REQ {
            c.state = State::MraReqSent;
        }
        let (tid, peer, remote) = (c.tid, c.peer, c.remote_id);
        let mad = self.build(
            tid,
            CmMsg::Mra(Box::new(MraRepr {
                local_comm_id: id,
                remote_comm_id: remote,
                message_mraed: what,
                service_timeout: self.cfg.mra_service_timeout,
                private_data: [0; pd_len::MRA],
            })),
        );
        self.stats.mra_sent += 1;
        self.push(peer, mad);
    }

    fn send_dreq(&mut self, now: Time, id: u32, conn: &mut Conn) {
        let tid = linux_style_tid(self.cfg.tid_hi, id);
        let mad = self.build(
            tid,
            CmMsg::Dreq(Box::new(DreqRepr {
                local_comm_id: id,
                remote_comm_id: conn.remote_id,
                remote_qpn: conn.remote_qpn,
                private_data: [0; pd_len::DREQ],
            })),
        );
        conn.state = State::DreqSent;
        conn.retries_left = self.cfg.max_cm_retries.min(15);
        conn.period_ms = self.req_period_ms();
        self.send_reliably(now, conn, mad);
    }

    fn send_drep(&mut self, id: u32, conn: &Conn) {
        let mad = self.build(
            conn.dreq_tid,
            CmMsg::Drep(Box::new(DrepRepr {
                local_comm_id: id,
                remote_comm_id: conn.remote_id,
                private_data: [0; pd_len::DREP],
            })),
        );
        self.push(conn.peer, mad);
    }

    /// Timewait: the QP stays out of use for about one packet lifetime so that stray packets
    /// of the old connection die (IBTA Vol 1 §12.9.7; kernel cm.c cm_enter_timewait).
    fn enter_timewait(&mut self, now: Time, conn: &mut Conn) {
        conn.state = State::Timewait;
        conn.last = None;
        let t = iba_time_to_ms(self.ack_timeout());
        conn.deadline = Some(now.add_nanos(ms(t)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_the_daemon_prefix_and_listeners_are_listed() {
        let mut cfg = CmConfig::linux_defaults(1, 42);
        cfg.id_prefix_bits = 10;
        cfg.id_prefix = 0x2a5;
        let mut cm = Cm::new(cfg);
        let mut seen = std::collections::BTreeSet::new();
        for port in 0..500u64 {
            let id = cm.listen(ServiceId(0x0106_0000 + port), None).unwrap();
            assert_eq!(id.0 >> 22, 0x2a5, "{:#x}", id.0);
            assert!(seen.insert(id.0), "ID {:#x} handed out twice", id.0);
        }
        assert!(cm.is_listening(ServiceId(0x0106_0001)));
        assert!(!cm.is_listening(ServiceId(0x0106_9999)));
        assert_eq!(cm.listening().len(), 500);
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    fn connect_params(ece: Ece) -> ConnectParams {
        let mut pd = vec![0u8; wire::cm::CMA_HDR_LEN];
        CmaHdr {
            cma_version: 0,
            src_port: 40000,
            src: ip(1),
            dst: ip(2),
        }
        .emit(&mut pd)
        .expect("cma_hdr");
        ConnectParams {
            peer: ip(2),
            service_id: ServiceId(0x0106_1d4f),
            local_gid: [1; 16],
            remote_gid: [2; 16],
            local_qpn: Qpn::new(0x11),
            starting_psn: Psn::new(0x1234),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: 3,
            transport_type: 0,
            srq: false,
            flow_label: 0,
            traffic_class: 0,
            hop_limit: 64,
            private_data: pd,
            ece,
        }
    }

    fn accept_params(ece: Ece) -> AcceptParams {
        AcceptParams {
            local_qpn: Qpn::new(0x22),
            starting_psn: Psn::new(0x5678),
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            srq: false,
            private_data: Vec::new(),
            ece,
        }
    }

    /// The REQ and REP MADs of one exchange with `req_ece` / `rep_ece`, and the ECE each
    /// side's event reported.
    fn exchange(req_ece: Ece, rep_ece: Ece) -> ([u8; MAD_LEN], [u8; MAD_LEN], Ece, Ece) {
        let t = Time::ZERO;
        let mut a = Cm::new(CmConfig::linux_defaults(0xa, 1));
        let mut b = Cm::new(CmConfig::linux_defaults(0xb, 2));
        b.listen(ServiceId(0x0106_1d4f), None).expect("listen");
        a.connect(t, &connect_params(req_ece)).expect("connect");
        let req = a.poll_transmit().expect("REQ");
        b.handle_mad(t, ip(1), &req.mad[..]);
        let (id, seen_req) = match b.poll_event() {
            Some(CmEvent::ConnectRequest { id, ece, .. }) => (id, ece),
            e => panic!("expected a request, got {e:?}"),
        };
        b.accept(t, id, &accept_params(rep_ece)).expect("accept");
        let rep = b.poll_transmit().expect("REP");
        a.handle_mad(t, ip(2), &rep.mad[..]);
        let seen_rep = match a.poll_event() {
            Some(CmEvent::ConnectResponse { ece, .. }) => ece,
            e => panic!("expected the response, got {e:?}"),
        };
        (*req.mad, *rep.mad, seen_req, seen_rep)
    }

    /// Byte offsets (in the MAD) where two MADs differ.
    fn diff(x: &[u8; MAD_LEN], y: &[u8; MAD_LEN]) -> Vec<usize> {
        (0..MAD_LEN).filter(|&i| x[i] != y[i]).collect()
    }

    #[test]
    fn req_and_rep_carry_ece_in_the_vendor_id_and_attribute_modifier() {
        let sr = Ece::uroce(wire::cm::ECE_SELECTIVE_REPEAT);
        let (req, rep, seen_req, seen_rep) = exchange(sr, sr);
        assert_eq!((seen_req, seen_rep), (sr, sr));
        for m in [&req, &rep] {
            let p = CmMadRepr::parse(m).expect("parse");
            assert_eq!(p.attr_mod, 1, "options in the Attribute Modifier");
        }
        // REQ: Vendor ID in data bytes 5..8 (MAD 29..32); REP: data bytes 15, 19 and 23.
        assert_eq!(&req[20..24], &[0, 0, 0, 1]);
        assert_eq!(&req[29..32], &[0x02, 0x75, 0x72]);
        assert_eq!([rep[39], rep[43], rep[47]], [0x02, 0x75, 0x72]);

        // Without ECE the same exchange differs only there, where it has zeros: what a CM
        // without ECE (rxe's peer) sends and expects.
        let (req0, rep0, seen_req0, seen_rep0) = exchange(Ece::NONE, Ece::NONE);
        assert_eq!((seen_req0, seen_rep0), (Ece::NONE, Ece::NONE));
        assert_eq!(diff(&req, &req0), vec![23, 29, 30, 31]);
        assert_eq!(diff(&rep, &rep0), vec![23, 39, 43, 47]);
        assert!(diff(&req, &req0).iter().all(|&i| req0[i] == 0));
        assert!(diff(&rep, &rep0).iter().all(|&i| rep0[i] == 0));

        // A REP without ECE to a REQ with it (a peer that does not know uroce's options).
        let (_, _, seen_req, seen_rep) = exchange(sr, Ece::NONE);
        assert_eq!((seen_req, seen_rep), (sr, Ece::NONE));
        // Vendor IDs keep 24 bits.
        let wide = Ece {
            vendor_id: 0xff02_7572,
            options: 0x8000_0001,
        };
        let (_, _, seen_req, _) = exchange(wide, Ece::NONE);
        assert_eq!(
            seen_req,
            Ece {
                vendor_id: 0x02_7572,
                options: 0x8000_0001
            }
        );
    }
}
