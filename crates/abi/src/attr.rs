//! QP attributes: the one shape of `struct ibv_qp_attr` every layer uses — the verbs API
//! hands it out, the control plane decodes MODIFY_QP into it and the transport keeps it —
//! with its codecs ([`ModifyQp`], [`QueryQpResp`], the address vector [`QpDest`]), the
//! copy of the fields a [`QpAttrMask`] selects, and the range checks of `ib_modify_qp`
//! (docs/wire.md §6.2). Adding an attribute touches this file and the C layer's copy to and
//! from `ibv_qp_attr`.

use core::fmt;
use std::net::{IpAddr, Ipv6Addr};

use crate::uverbs::{
    AhAttr as WireAhAttr, GlobalRoute as WireGlobalRoute, ModifyQp, QpDest, QueryQpResp,
};
use crate::verbs_consts::{AccessFlags, Mtu, QpAttrMask, QpState};

/// A GID: 16 bytes; for RoCEv2 the IPv4-mapped or IPv6 address of the device.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The address this GID stands for (IPv4-mapped GIDs give an IPv4 address).
    pub fn to_ip(&self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    /// Whether all bytes are zero (an empty GID table slot).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl From<IpAddr> for Gid {
    /// RoCEv2 GID of an address: `::ffff:a.b.c.d` for IPv4, the address itself for IPv6.
    fn from(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }
}

impl fmt::Display for Gid {
    /// As `ibv_devinfo -v` prints GIDs: eight groups of four hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks_exact(2).enumerate() {
            if i > 0 {
                write!(f, ":")?;
            }
            if let [a, b] = pair {
                write!(f, "{a:02x}{b:02x}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self} = {})", self.to_ip())
    }
}

/// The GRH part of an address vector (`struct ibv_global_route`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalRoute {
    /// Destination GID (RoCEv2: the peer device's address).
    pub dgid: Gid,
    /// Flow label (20 bits; feeds the UDP source port).
    pub flow_label: u32,
    /// Source GID index (0 = the device's address).
    pub sgid_index: u8,
    /// Hop limit / IPv4 TTL.
    pub hop_limit: u8,
    /// Traffic class / DSCP+ECN.
    pub traffic_class: u8,
}

/// An address vector (`struct ibv_ah_attr`), for UD address handles and connected QPs'
/// paths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AhAttr {
    /// Global route (always used on RoCE).
    pub grh: GlobalRoute,
    /// Destination LID (0 on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Whether `grh` is valid (RoCE requires it).
    pub is_global: bool,
    /// Port (1).
    pub port_num: u8,
}

impl AhAttr {
    /// A RoCEv2 address vector to `dgid` from source GID `sgid_index` on `port`
    /// (hop limit 64, as rdma-core's examples use).
    pub fn roce(dgid: Gid, sgid_index: u8, port: u8) -> AhAttr {
        AhAttr {
            grh: GlobalRoute {
                dgid,
                flow_label: 0,
                sgid_index,
                hop_limit: 64,
                traffic_class: 0,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: true,
            port_num: port,
        }
    }
}

impl From<&AhAttr> for QpDest {
    fn from(a: &AhAttr) -> QpDest {
        QpDest {
            dgid: a.grh.dgid.0,
            flow_label: a.grh.flow_label,
            dlid: a.dlid,
            reserved: 0,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
            sl: a.sl,
            src_path_bits: a.src_path_bits,
            static_rate: a.static_rate,
            is_global: u8::from(a.is_global),
            port_num: a.port_num,
        }
    }
}

impl From<&QpDest> for AhAttr {
    fn from(d: &QpDest) -> AhAttr {
        AhAttr {
            grh: GlobalRoute {
                dgid: Gid(d.dgid),
                flow_label: d.flow_label,
                sgid_index: d.sgid_index,
                hop_limit: d.hop_limit,
                traffic_class: d.traffic_class,
            },
            dlid: d.dlid,
            sl: d.sl,
            src_path_bits: d.src_path_bits,
            static_rate: d.static_rate,
            is_global: d.is_global != 0,
            port_num: d.port_num,
        }
    }
}

impl From<&AhAttr> for WireAhAttr {
    fn from(a: &AhAttr) -> WireAhAttr {
        WireAhAttr {
            grh: WireGlobalRoute {
                dgid: a.grh.dgid.0,
                flow_label: a.grh.flow_label,
                sgid_index: a.grh.sgid_index,
                hop_limit: a.grh.hop_limit,
                traffic_class: a.grh.traffic_class,
                reserved: 0,
            },
            dlid: a.dlid,
            sl: a.sl,
            src_path_bits: a.src_path_bits,
            static_rate: a.static_rate,
            is_global: u8::from(a.is_global),
            port_num: a.port_num,
            reserved: 0,
        }
    }
}

impl From<&WireAhAttr> for AhAttr {
    fn from(a: &WireAhAttr) -> AhAttr {
        AhAttr {
            grh: GlobalRoute {
                dgid: Gid(a.grh.dgid),
                flow_label: a.grh.flow_label,
                sgid_index: a.grh.sgid_index,
                hop_limit: a.grh.hop_limit,
                traffic_class: a.grh.traffic_class,
            },
            dlid: a.dlid,
            sl: a.sl,
            src_path_bits: a.src_path_bits,
            static_rate: a.static_rate,
            is_global: a.is_global != 0,
            port_num: a.port_num,
        }
    }
}

/// Queue capacities (`struct ibv_qp_cap`): requested at creation, granted in return.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCap {
    /// Outstanding send WRs.
    pub max_send_wr: u32,
    /// Outstanding receive WRs.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
}

/// QP attributes (`struct ibv_qp_attr`). With a [`QpAttrMask`] saying which fields count,
/// the argument of a modify; in full, the answer of a query.
///
/// [`Default`] is a new QP as uroce's transport starts it (RESET, MTU 1024, port 1, one
/// outstanding READ each way, local ACK timeout 14 (67 ms), 7 retries of each kind, RNR
/// timer 12 (0.64 ms)), so a modify that leaves a field out of its mask keeps a usable
/// value; every other field is 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// Target state (with [`QpAttrMask::STATE`]); in a query, the current state.
    pub qp_state: QpState,
    /// The current state the caller asserts (with [`QpAttrMask::CUR_STATE`]).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Path migration state (`ibv_mig_state`: 0 MIGRATED, 1 REARM, 2 ARMED).
    pub path_mig_state: u8,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Expected PSN of the first incoming request (24 bits).
    pub rq_psn: u32,
    /// PSN of the first outgoing request (24 bits).
    pub sq_psn: u32,
    /// Remote QP number (connected QPs; 24 bits).
    pub dest_qp_num: u32,
    /// Remote access the QP grants (REMOTE_WRITE / READ / ATOMIC).
    pub qp_access_flags: AccessFlags,
    /// Capacities (query only).
    pub cap: QpCap,
    /// Primary path.
    pub ah_attr: AhAttr,
    /// Alternate path.
    pub alt_ah_attr: AhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// Raise SQ_DRAINED when SQD is reached.
    pub en_sqd_async_notify: bool,
    /// Whether the SQ is still draining (query only).
    pub sq_draining: bool,
    /// Initiator depth: outstanding READs/atomics this QP may have (RC).
    pub max_rd_atomic: u8,
    /// Responder resources: READ/atomic results kept for duplicates (RC).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code the responder advertises (0..=31).
    pub min_rnr_timer: u8,
    /// Port.
    pub port_num: u8,
    /// Local ACK timeout code (4.096 µs × 2^timeout; 0 = infinite; 0..=31).
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7; 7 = infinite).
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate local ACK timeout code.
    pub alt_timeout: u8,
    /// Signal all send WRs (query only).
    pub sq_sig_all: bool,
}

impl Default for QpAttr {
    fn default() -> QpAttr {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu1024,
            path_mig_state: 0,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qp_num: 0,
            qp_access_flags: AccessFlags(0),
            cap: QpCap::default(),
            ah_attr: AhAttr::default(),
            alt_ah_attr: AhAttr::default(),
            pkey_index: 0,
            alt_pkey_index: 0,
            en_sqd_async_notify: false,
            sq_draining: false,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            port_num: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            alt_port_num: 0,
            alt_timeout: 0,
            sq_sig_all: false,
        }
    }
}

/// What a device allows, for [`QpAttr::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttrLimits {
    /// `max_qp_rd_atom` / `max_qp_init_rd_atom`: the bound of both READ/atomic depths.
    pub max_rd_atomic: u32,
    /// Entries in the P_Key table (`pkey_tbl_len`).
    pub pkey_tbl_len: u16,
}

/// Which rule an attribute value broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrErrorKind {
    /// Outside the values the field may hold (an enum number it does not name, a code
    /// above its field's range, a port that does not exist).
    OutOfRange,
    /// A P_Key index past the end of the P_Key table ([`AttrLimits::pkey_tbl_len`]).
    BadIndex,
    /// A READ/atomic depth above the device's `max_qp_rd_atom` ([`AttrLimits::max_rd_atomic`]).
    OverLimit,
}

/// An attribute value a modify may not carry: the field, its value and the rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttrError {
    /// The `ibv_qp_attr` field.
    pub field: &'static str,
    /// The value given.
    pub value: u32,
    /// The rule broken.
    pub kind: AttrErrorKind,
    /// The bound it broke: the largest allowed value, or the table length for
    /// [`AttrErrorKind::BadIndex`]; `None` for an enum number that names nothing.
    pub bound: Option<u32>,
}

impl fmt::Display for AttrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (field, v) = (self.field, self.value);
        match (self.kind, self.bound) {
            (AttrErrorKind::BadIndex, Some(len)) => write!(f, "{field} {v} >= pkey_tbl_len {len}"),
            (AttrErrorKind::OverLimit, Some(max)) => {
                write!(f, "{field} {v} > max_qp_rd_atom {max}")
            }
            (_, Some(max)) => write!(f, "{field} {v} is out of range (at most {max})"),
            (_, None) => write!(f, "{field} {v} is out of range"),
        }
    }
}

impl std::error::Error for AttrError {}

fn out_of_range(field: &'static str, value: u32, bound: Option<u32>) -> AttrError {
    AttrError {
        field,
        value,
        kind: AttrErrorKind::OutOfRange,
        bound,
    }
}

/// An enum field sent as a number: decoded when the mask names it (an unknown number is
/// an error), left at `fallback` when it does not (its bytes are not read, as the kernel
/// ignores fields outside the mask).
fn pick<T>(
    on: bool,
    field: &'static str,
    raw: u8,
    decode: impl Fn(u32) -> Option<T>,
    fallback: T,
) -> Result<T, AttrError> {
    if !on {
        return Ok(fallback);
    }
    decode(u32::from(raw)).ok_or_else(|| out_of_range(field, u32::from(raw), None))
}

impl QpAttr {
    /// Copy into `self` the fields `mask` selects from `from` (what a successful modify
    /// stores). `STATE` and `CUR_STATE` are not copied: the state changes through the
    /// transition its owner runs. The PSNs and the remote QPN keep their low 24 bits.
    pub fn apply(&mut self, from: &QpAttr, mask: QpAttrMask) {
        let on = |m: QpAttrMask| mask.contains(m);
        if on(QpAttrMask::PATH_MTU) {
            self.path_mtu = from.path_mtu;
        }
        if on(QpAttrMask::PATH_MIG_STATE) {
            self.path_mig_state = from.path_mig_state;
        }
        if on(QpAttrMask::QKEY) {
            self.qkey = from.qkey;
        }
        if on(QpAttrMask::RQ_PSN) {
            self.rq_psn = from.rq_psn & 0xff_ffff;
        }
        if on(QpAttrMask::SQ_PSN) {
            self.sq_psn = from.sq_psn & 0xff_ffff;
        }
        if on(QpAttrMask::DEST_QPN) {
            self.dest_qp_num = from.dest_qp_num & 0xff_ffff;
        }
        if on(QpAttrMask::ACCESS_FLAGS) {
            self.qp_access_flags = from.qp_access_flags;
        }
        if on(QpAttrMask::AV) {
            self.ah_attr = from.ah_attr;
        }
        if on(QpAttrMask::ALT_PATH) {
            self.alt_ah_attr = from.alt_ah_attr;
            self.alt_pkey_index = from.alt_pkey_index;
            self.alt_port_num = from.alt_port_num;
            self.alt_timeout = from.alt_timeout;
        }
        if on(QpAttrMask::PKEY_INDEX) {
            self.pkey_index = from.pkey_index;
        }
        if on(QpAttrMask::EN_SQD_ASYNC_NOTIFY) {
            self.en_sqd_async_notify = from.en_sqd_async_notify;
        }
        if on(QpAttrMask::MAX_QP_RD_ATOMIC) {
            self.max_rd_atomic = from.max_rd_atomic;
        }
        if on(QpAttrMask::MAX_DEST_RD_ATOMIC) {
            self.max_dest_rd_atomic = from.max_dest_rd_atomic;
        }
        if on(QpAttrMask::MIN_RNR_TIMER) {
            self.min_rnr_timer = from.min_rnr_timer;
        }
        if on(QpAttrMask::PORT) {
            self.port_num = from.port_num;
        }
        if on(QpAttrMask::TIMEOUT) {
            self.timeout = from.timeout;
        }
        if on(QpAttrMask::RETRY_CNT) {
            self.retry_cnt = from.retry_cnt;
        }
        if on(QpAttrMask::RNR_RETRY) {
            self.rnr_retry = from.rnr_retry;
        }
    }

    /// The value checks of a modify (`ib_modify_qp` and `rxe_qp_chk_attr`): every field the
    /// mask selects holds a value its field allows and the device supports. Which fields a
    /// transition needs or forbids is the transition table's business (the transport's
    /// `state::check_modify`); whether an address vector resolves is the device's.
    pub fn check(&self, mask: QpAttrMask, limits: &AttrLimits) -> Result<(), AttrError> {
        let on = |m: QpAttrMask| mask.contains(m);
        let at_most = |field, v: u8, max: u8| {
            if v > max {
                Err(out_of_range(field, v.into(), Some(max.into())))
            } else {
                Ok(())
            }
        };
        let over = |field, v: u8| {
            if u32::from(v) > limits.max_rd_atomic {
                Err(AttrError {
                    field,
                    value: v.into(),
                    kind: AttrErrorKind::OverLimit,
                    bound: Some(limits.max_rd_atomic),
                })
            } else {
                Ok(())
            }
        };
        let index = |field, v: u16| {
            if v >= limits.pkey_tbl_len {
                Err(AttrError {
                    field,
                    value: v.into(),
                    kind: AttrErrorKind::BadIndex,
                    bound: Some(limits.pkey_tbl_len.into()),
                })
            } else {
                Ok(())
            }
        };
        let port = |field, v: u8| {
            if v != 1 {
                Err(out_of_range(field, v.into(), Some(1)))
            } else {
                Ok(())
            }
        };
        if on(QpAttrMask::PKEY_INDEX) {
            index("pkey_index", self.pkey_index)?;
        }
        if on(QpAttrMask::PORT) {
            port("port_num", self.port_num)?;
        }
        if on(QpAttrMask::DEST_QPN) && self.dest_qp_num > 0xff_ffff {
            return Err(out_of_range(
                "dest_qp_num",
                self.dest_qp_num,
                Some(0xff_ffff),
            ));
        }
        if on(QpAttrMask::ACCESS_FLAGS) && self.qp_access_flags.0 & !0xf != 0 {
            // Only LOCAL_WRITE/REMOTE_WRITE/REMOTE_READ/REMOTE_ATOMIC mean anything on a QP.
            return Err(out_of_range(
                "qp_access_flags",
                self.qp_access_flags.0,
                Some(0xf),
            ));
        }
        if on(QpAttrMask::PATH_MIG_STATE) {
            at_most("path_mig_state", self.path_mig_state, 2)?;
        }
        if on(QpAttrMask::MAX_QP_RD_ATOMIC) {
            over("max_rd_atomic", self.max_rd_atomic)?;
        }
        if on(QpAttrMask::MAX_DEST_RD_ATOMIC) {
            over("max_dest_rd_atomic", self.max_dest_rd_atomic)?;
        }
        if on(QpAttrMask::MIN_RNR_TIMER) {
            at_most("min_rnr_timer", self.min_rnr_timer, 31)?;
        }
        if on(QpAttrMask::TIMEOUT) {
            at_most("timeout", self.timeout, 31)?;
        }
        if on(QpAttrMask::RETRY_CNT) {
            at_most("retry_cnt", self.retry_cnt, 7)?;
        }
        if on(QpAttrMask::RNR_RETRY) {
            at_most("rnr_retry", self.rnr_retry, 7)?;
        }
        if on(QpAttrMask::ALT_PATH) {
            index("alt_pkey_index", self.alt_pkey_index)?;
            port("alt_port_num", self.alt_port_num)?;
            at_most("alt_timeout", self.alt_timeout, 31)?;
        }
        Ok(())
    }
}

/// `$ty { $field: $value, …, <shared>: $src.<shared>, … }` where the shared fields are the
/// attributes [`QpAttr`], [`ModifyQp`] and [`QueryQpResp`] all carry under one name and one
/// type — so a codec names only the fields whose shape differs.
macro_rules! with_shared_fields {
    ($ty:ident { $($field:ident: $value:expr),* $(,)? } from $src:expr) => {{
        let src = $src;
        $ty {
            $($field: $value,)*
            path_mig_state: src.path_mig_state,
            qkey: src.qkey,
            rq_psn: src.rq_psn,
            sq_psn: src.sq_psn,
            dest_qp_num: src.dest_qp_num,
            pkey_index: src.pkey_index,
            alt_pkey_index: src.alt_pkey_index,
            max_rd_atomic: src.max_rd_atomic,
            max_dest_rd_atomic: src.max_dest_rd_atomic,
            min_rnr_timer: src.min_rnr_timer,
            port_num: src.port_num,
            timeout: src.timeout,
            retry_cnt: src.retry_cnt,
            rnr_retry: src.rnr_retry,
            alt_port_num: src.alt_port_num,
            alt_timeout: src.alt_timeout,
        }
    }};
}

impl ModifyQp {
    /// The command that applies the fields of `attr` that `mask` selects to QP `handle`,
    /// with [`ModifyQp::flags`] `modify_flags`.
    pub fn new(handle: u32, attr: &QpAttr, mask: QpAttrMask, modify_flags: u8) -> ModifyQp {
        with_shared_fields!(ModifyQp {
            dest: QpDest::from(&attr.ah_attr),
            alt_dest: QpDest::from(&attr.alt_ah_attr),
            qp_handle: handle,
            attr_mask: mask.bits(),
            qp_access_flags: attr.qp_access_flags.bits(),
            qp_state: attr.qp_state as u8,
            cur_qp_state: attr.cur_qp_state as u8,
            path_mtu: attr.path_mtu as u8,
            en_sqd_async_notify: u8::from(attr.en_sqd_async_notify),
            flags: modify_flags,
            reserved: 0,
        } from attr)
    }

    /// The attributes carried. An enum field the mask selects must hold a number its enum
    /// names; one the mask leaves out keeps [`QpAttr::default`]'s value whatever its bytes
    /// say. Values are not range-checked here ([`QpAttr::check`] does that).
    pub fn attr(&self) -> Result<QpAttr, AttrError> {
        let on = |m: QpAttrMask| self.mask().contains(m);
        let d = QpAttr::default();
        Ok(with_shared_fields!(QpAttr {
            qp_state: pick(
                on(QpAttrMask::STATE),
                "qp_state",
                self.qp_state,
                QpState::from_raw,
                d.qp_state,
            )?,
            cur_qp_state: pick(
                on(QpAttrMask::CUR_STATE),
                "cur_qp_state",
                self.cur_qp_state,
                QpState::from_raw,
                d.cur_qp_state,
            )?,
            path_mtu: pick(
                on(QpAttrMask::PATH_MTU),
                "path_mtu",
                self.path_mtu,
                Mtu::from_raw,
                d.path_mtu,
            )?,
            qp_access_flags: AccessFlags(self.qp_access_flags),
            cap: QpCap::default(),
            ah_attr: AhAttr::from(&self.dest),
            alt_ah_attr: AhAttr::from(&self.alt_dest),
            en_sqd_async_notify: self.en_sqd_async_notify != 0,
            sq_draining: false,
            sq_sig_all: false,
        } from self))
    }
}

impl From<&QpAttr> for QueryQpResp {
    /// The reply to QUERY_QP (`en_sqd_async_notify` has no place in it, as in the kernel's).
    fn from(a: &QpAttr) -> QueryQpResp {
        with_shared_fields!(QueryQpResp {
            dest: QpDest::from(&a.ah_attr),
            alt_dest: QpDest::from(&a.alt_ah_attr),
            max_send_wr: a.cap.max_send_wr,
            max_recv_wr: a.cap.max_recv_wr,
            max_send_sge: a.cap.max_send_sge,
            max_recv_sge: a.cap.max_recv_sge,
            max_inline_data: a.cap.max_inline_data,
            qp_access_flags: a.qp_access_flags.bits(),
            qp_state: a.qp_state as u8,
            cur_qp_state: a.cur_qp_state as u8,
            path_mtu: a.path_mtu as u8,
            sq_draining: u8::from(a.sq_draining),
            sq_sig_all: u8::from(a.sq_sig_all),
            reserved: [0; 5],
        } from a)
    }
}

impl QueryQpResp {
    /// The attributes reported; an error for a state or MTU number its enum does not name.
    pub fn attr(&self) -> Result<QpAttr, AttrError> {
        let d = QpAttr::default();
        Ok(with_shared_fields!(QpAttr {
            qp_state: pick(true, "qp_state", self.qp_state, QpState::from_raw, d.qp_state)?,
            cur_qp_state: pick(
                true,
                "cur_qp_state",
                self.cur_qp_state,
                QpState::from_raw,
                d.qp_state,
            )?,
            path_mtu: pick(true, "path_mtu", self.path_mtu, Mtu::from_raw, d.path_mtu)?,
            qp_access_flags: AccessFlags(self.qp_access_flags),
            cap: QpCap {
                max_send_wr: self.max_send_wr,
                max_recv_wr: self.max_recv_wr,
                max_send_sge: self.max_send_sge,
                max_recv_sge: self.max_recv_sge,
                max_inline_data: self.max_inline_data,
            },
            ah_attr: AhAttr::from(&self.dest),
            alt_ah_attr: AhAttr::from(&self.alt_dest),
            en_sqd_async_notify: false,
            sq_draining: self.sq_draining != 0,
            sq_sig_all: self.sq_sig_all != 0,
        } from self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> QpAttr {
        QpAttr {
            qp_state: QpState::Rtr,
            cur_qp_state: QpState::Init,
            path_mtu: Mtu::Mtu4096,
            path_mig_state: 1,
            qkey: 0x1111_2222,
            rq_psn: 0x12_3456,
            sq_psn: 0xab_cdef,
            dest_qp_num: 0x42,
            qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            cap: QpCap::default(),
            ah_attr: AhAttr::roce(Gid::from(IpAddr::from([10, 0, 0, 2])), 0, 1),
            alt_ah_attr: AhAttr::roce(Gid::from(IpAddr::from([10, 0, 0, 3])), 0, 1),
            pkey_index: 0,
            alt_pkey_index: 0,
            en_sqd_async_notify: true,
            sq_draining: false,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 8,
            min_rnr_timer: 18,
            port_num: 1,
            timeout: 17,
            retry_cnt: 6,
            rnr_retry: 5,
            alt_port_num: 1,
            alt_timeout: 9,
            sq_sig_all: false,
        }
    }

    #[test]
    fn modify_round_trips_every_field_it_carries() {
        let a = sample();
        let m = ModifyQp::new(7, &a, QpAttrMask(u32::MAX), 0);
        assert_eq!(
            (m.qp_handle, m.mask(), m.flags),
            (7, QpAttrMask(u32::MAX), 0)
        );
        assert_eq!(m.attr().unwrap(), a);
    }

    #[test]
    fn query_round_trips_every_field_it_carries() {
        let a = QpAttr {
            en_sqd_async_notify: false,
            sq_draining: true,
            sq_sig_all: true,
            cap: QpCap {
                max_send_wr: 1,
                max_recv_wr: 2,
                max_send_sge: 3,
                max_recv_sge: 4,
                max_inline_data: 5,
            },
            ..sample()
        };
        assert_eq!(QueryQpResp::from(&a).attr().unwrap(), a);
    }

    #[test]
    fn enum_fields_are_decoded_only_under_the_mask() {
        let mut m = ModifyQp::new(1, &sample(), QpAttrMask::STATE, 0);
        m.path_mtu = 9;
        m.cur_qp_state = 77;
        let a = m.attr().unwrap();
        assert_eq!((a.path_mtu, a.cur_qp_state), (Mtu::Mtu1024, QpState::Reset));
        m.attr_mask |= QpAttrMask::PATH_MTU.bits();
        let e = m.attr().unwrap_err();
        assert_eq!(
            (e.field, e.value, e.kind),
            ("path_mtu", 9, AttrErrorKind::OutOfRange)
        );
        m.qp_state = 7;
        assert_eq!(m.attr().unwrap_err().field, "qp_state");
        let mut r = QueryQpResp::from(&sample());
        r.cur_qp_state = 9;
        assert_eq!(r.attr().unwrap_err().field, "cur_qp_state");
    }

    #[test]
    fn apply_copies_exactly_the_masked_fields() {
        let from = sample();
        let mut to = QpAttr::default();
        to.apply(
            &from,
            QpAttrMask::TIMEOUT | QpAttrMask::DEST_QPN | QpAttrMask::STATE,
        );
        assert_eq!(
            to,
            QpAttr {
                timeout: 17,
                dest_qp_num: 0x42,
                ..QpAttr::default()
            }
        );
        let mut all = QpAttr::default();
        all.apply(&from, QpAttrMask(u32::MAX));
        assert_eq!(
            all,
            QpAttr {
                qp_state: QpState::Reset,
                cur_qp_state: QpState::Reset,
                ..from
            }
        );
        let wide = QpAttr {
            sq_psn: 0x1ff_ffff,
            ..from
        };
        to.apply(&wide, QpAttrMask::SQ_PSN);
        assert_eq!(to.sq_psn, 0xff_ffff);
    }

    #[test]
    fn check_names_the_field_and_the_rule() {
        let lim = AttrLimits {
            max_rd_atomic: 16,
            pkey_tbl_len: 1,
        };
        let all = QpAttrMask(u32::MAX);
        assert_eq!(sample().check(all, &lim), Ok(()));
        let cases: [(QpAttr, &str, AttrErrorKind); 12] = [
            (
                QpAttr {
                    timeout: 32,
                    ..sample()
                },
                "timeout",
                AttrErrorKind::OutOfRange,
            ),
            (
                QpAttr {
                    retry_cnt: 8,
                    ..sample()
                },
                "retry_cnt",
                AttrErrorKind::OutOfRange,
            ),
            (
                QpAttr {
                    rnr_retry: 8,
                    ..sample()
                },
                "rnr_retry",
                AttrErrorKind::OutOfRange,
            ),
            (
                QpAttr {
                    min_rnr_timer: 32,
                    ..sample()
                },
                "min_rnr_timer",
                AttrErrorKind::OutOfRange,
            ),
            (
                QpAttr {
                    max_rd_atomic: 17,
                    ..sample()
                },
                "max_rd_atomic",
                AttrErrorKind::OverLimit,
            ),
            (
                QpAttr {
                    max_dest_rd_atomic: 17,
                    ..sample()
                },
                "max_dest_rd_atomic",
                AttrErrorKind::OverLimit,
            ),
            (
                QpAttr {
                    port_num: 2,
                    ..sample()
                },
                "port_num",
                AttrErrorKind::OutOfRange,
            ),
            (
                QpAttr {
                    pkey_index: 1,
                    ..sample()
                },
                "pkey_index",
                AttrErrorKind::BadIndex,
            ),
            (
                QpAttr {
                    path_mig_state: 3,
                    ..sample()
                },
                "path_mig_state",
                AttrErrorKind::OutOfRange,
            ),
            (
                QpAttr {
                    dest_qp_num: 1 << 24,
                    ..sample()
                },
                "dest_qp_num",
                AttrErrorKind::OutOfRange,
            ),
            (
                QpAttr {
                    qp_access_flags: AccessFlags(0x10),
                    ..sample()
                },
                "qp_access_flags",
                AttrErrorKind::OutOfRange,
            ),
            (
                QpAttr {
                    alt_timeout: 32,
                    ..sample()
                },
                "alt_timeout",
                AttrErrorKind::OutOfRange,
            ),
        ];
        for (a, field, kind) in cases {
            let e = a.check(all, &lim).unwrap_err();
            assert_eq!((e.field, e.kind), (field, kind), "{e}");
            // Outside the mask, nothing is checked.
            assert_eq!(a.check(QpAttrMask::STATE, &lim), Ok(()));
        }
        let e = QpAttr {
            max_rd_atomic: 17,
            ..sample()
        }
        .check(all, &lim)
        .unwrap_err();
        assert_eq!(e.to_string(), "max_rd_atomic 17 > max_qp_rd_atom 16");
    }
}
