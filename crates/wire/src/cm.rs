//! Communication Manager messages (IBTA Vol 1 §12.6, Tables 106–113 and 119–120) and the
//! conventions rdma_cm carries inside them (IBTA Annex A11 "RDMA IP CM Service"; kernel
//! `drivers/infiniband/core/cma.c`).
//!
//! A CM message is the attribute data of a [`mad`](crate::mad) whose header is a CM Send
//! ([`MadHeader::is_cm_send`]). [`CmMadRepr::parse`] checks the header, dispatches on the
//! attribute ID and returns one of the message reprs; [`CmMadRepr::emit`] writes a whole 256-byte
//! MAD with every reserved bit zero.
//!
//! Field positions follow the IBTA tables as the kernel writes them in
//! `include/rdma/ibta_vol1_c12.h`: byte offsets from the start of the attribute data, and bit
//! positions counted from the most significant bit of that byte (see [`crate::mad`]'s
//! `get_bits`). Every field is big-endian. Parsing never fails on field values: a CM decides
//! what to do with an unexpected value (e.g. answer with a REJ), the codec only refuses bytes
//! that are not a CM MAD at all.
//!
//! [`MadHeader::is_cm_send`]: crate::mad::MadHeader::is_cm_send

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::mad::{self, get_bits, set_bits, MadHeader, DATA_LEN, MAD_LEN};
use crate::num::{Psn, Qkey, Qpn};
use crate::{Error, Result};

/// CM attribute IDs (kernel `include/rdma/ib_cm.h`).
pub mod attr {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001A;
}

/// Private-data sizes of each message (IBTA Vol 1 §12.6; kernel `enum ib_cm_data_size`).
pub mod pd_len {
    pub const REQ: usize = 92;
    pub const MRA: usize = 222;
    pub const REJ: usize = 148;
    pub const REP: usize = 196;
    pub const RTU: usize = 224;
    pub const DREQ: usize = 220;
    pub const DREP: usize = 224;
    pub const SIDR_REQ: usize = 216;
    pub const SIDR_REP: usize = 136;
    /// REJ Additional Rejection Information and SIDR_REP Additional Information.
    pub const ARI: usize = 72;
}

/// REJ reasons (IBTA Vol 1 Table 112; kernel `enum ib_cm_rej_reason`), as an open newtype:
/// unknown values survive a round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RejReason(pub u16);

impl RejReason {
    pub const NO_QP: RejReason = RejReason(1);
    pub const NO_EEC: RejReason = RejReason(2);
    pub const NO_RESOURCES: RejReason = RejReason(3);
    /// The ARI carries the rejecting CA's GUID (8 bytes).
    pub const TIMEOUT: RejReason = RejReason(4);
    pub const UNSUPPORTED: RejReason = RejReason(5);
    pub const INVALID_COMM_ID: RejReason = RejReason(6);
    pub const INVALID_COMM_INSTANCE: RejReason = RejReason(7);
    /// Nobody listens on the Service ID.
    pub const INVALID_SERVICE_ID: RejReason = RejReason(8);
    pub const INVALID_TRANSPORT_TYPE: RejReason = RejReason(9);
    pub const STALE_CONN: RejReason = RejReason(10);
    pub const RDC_NOT_EXIST: RejReason = RejReason(11);
    pub const INVALID_GID: RejReason = RejReason(12);
    pub const INVALID_LID: RejReason = RejReason(13);
    pub const INVALID_SL: RejReason = RejReason(14);
    pub const INVALID_TRAFFIC_CLASS: RejReason = RejReason(15);
    pub const INVALID_HOP_LIMIT: RejReason = RejReason(16);
    pub const INVALID_PACKET_RATE: RejReason = RejReason(17);
    pub const PORT_CM_REDIRECT: RejReason = RejReason(24);
    pub const PORT_REDIRECT: RejReason = RejReason(25);
    pub const INVALID_MTU: RejReason = RejReason(26);
    pub const INSUFFICIENT_RESP_RESOURCES: RejReason = RejReason(27);
    /// The consumer (application or rdma_cm) refused.
    pub const CONSUMER_DEFINED: RejReason = RejReason(28);
    pub const INVALID_RNR_RETRY: RejReason = RejReason(29);
    pub const DUPLICATE_LOCAL_COMM_ID: RejReason = RejReason(30);
    pub const INVALID_CLASS_VERSION: RejReason = RejReason(31);
    pub const INVALID_FLOW_LABEL: RejReason = RejReason(32);
    pub const INVALID_ALT_FLOW_LABEL: RejReason = RejReason(33);
    /// Enhanced Connection Establishment: the vendor option is not supported.
    pub const VENDOR_OPTION_NOT_SUPPORTED: RejReason = RejReason(35);
}

/// Enhanced Connection Establishment (IBTA Vol 1 §12.6: the REQ's and REP's Vendor ID,
/// 24 bits, and the MAD header's Attribute Modifier as the vendor's options; kernel cm.c
/// `cm_format_mad_ece_hdr`, librdmacm's `rdma_set_local_ece` / `rdma_get_remote_ece`).
/// Vendor ID 0 means the sender uses no ECE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Ece {
    /// 24 bits.
    pub vendor_id: u32,
    /// The vendor's option bits (the Attribute Modifier of the REQ/REP MAD).
    pub options: u32,
}

impl Ece {
    /// No ECE: vendor ID 0, no options (what a CM that uses no ECE sends, rxe's among them).
    pub const NONE: Ece = Ece {
        vendor_id: 0,
        options: 0,
    };

    /// uroce's own options, with its vendor ID.
    pub const fn uroce(options: u32) -> Ece {
        Ece {
            vendor_id: UROCE_ECE_VENDOR_ID,
            options,
        }
    }
}

/// uroce's ECE vendor ID (docs/wire.md §5.6): `02 75 72`. Its first octet has the IEEE
/// "locally administered" bit (0x02) set and is not a CID (low nibble 0xA), so it is no
/// OUI or CID the IEEE hands out, and it is above 0xFFFF, so it is no PCI vendor ID either
/// (what mlx5 puts there: `PCI_VENDOR_ID_MELLANOX`, 0x02c9).
pub const UROCE_ECE_VENDOR_ID: u32 = 0x02_7572;

/// uroce ECE option: selective repeat (docs/wire.md §5.6) for the connection's RC QPs.
pub const ECE_SELECTIVE_REPEAT: u32 = 1 << 0;

/// Every uroce ECE option this implementation knows.
pub const UROCE_ECE_OPTIONS: u32 = ECE_SELECTIVE_REPEAT;

/// Which message an MRA or REJ answers (IBTA Vol 1 Tables 107 and 108).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MsgRef(pub u8);

impl MsgRef {
    pub const REQ: MsgRef = MsgRef(0);
    pub const REP: MsgRef = MsgRef(1);
    pub const OTHER: MsgRef = MsgRef(2);
}

/// SIDR_REP status (IBTA Vol 1 Table 120; kernel `enum ib_cm_sidr_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrStatus(pub u8);

impl SidrStatus {
    pub const SUCCESS: SidrStatus = SidrStatus(0);
    /// No listener for the Service ID.
    pub const UNSUPPORTED: SidrStatus = SidrStatus(1);
    pub const REJECT: SidrStatus = SidrStatus(2);
    pub const NO_QP: SidrStatus = SidrStatus(3);
    pub const REDIRECT: SidrStatus = SidrStatus(4);
    pub const UNSUPPORTED_VERSION: SidrStatus = SidrStatus(5);
}

/// One field: byte offset in the attribute data, bit offset below that byte's MSB, width.
type F = (usize, usize, usize);

fn get(d: &[u8], f: F) -> u64 {
    get_bits(d, f.0, f.1, f.2)
}
fn set(d: &mut [u8], f: F, v: u64) {
    set_bits(d, f.0, f.1, f.2, v)
}
fn get_arr<const N: usize>(d: &[u8], off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&d[off..off + N]);
    a
}

/// One path of a REQ (primary at offset 52, alternate at 96; IBTA Vol 1 Table 106).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmPath {
    pub local_lid: u16,
    pub remote_lid: u16,
    /// The sender's port GID (on RoCE the IPv4-mapped or IPv6 address).
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    pub flow_label: u32,
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub sl: u8,
    pub subnet_local: bool,
    pub local_ack_timeout: u8,
}

impl CmPath {
    fn parse(d: &[u8], base: usize) -> CmPath {
        CmPath {
            local_lid: get(d, (base, 0, 16)) as u16,
            remote_lid: get(d, (base + 2, 0, 16)) as u16,
            local_gid: get_arr(d, base + 4),
            remote_gid: get_arr(d, base + 20),
            flow_label: get(d, (base + 36, 0, 20)) as u32,
            packet_rate: get(d, (base + 39, 2, 6)) as u8,
            traffic_class: get(d, (base + 40, 0, 8)) as u8,
            hop_limit: get(d, (base + 41, 0, 8)) as u8,
            sl: get(d, (base + 42, 0, 4)) as u8,
            subnet_local: get(d, (base + 42, 4, 1)) != 0,
            local_ack_timeout: get(d, (base + 43, 0, 5)) as u8,
        }
    }

    fn emit(&self, d: &mut [u8], base: usize) {
        set(d, (base, 0, 16), u64::from(self.local_lid));
        set(d, (base + 2, 0, 16), u64::from(self.remote_lid));
        d[base + 4..base + 20].copy_from_slice(&self.local_gid);
        d[base + 20..base + 36].copy_from_slice(&self.remote_gid);
        set(d, (base + 36, 0, 20), u64::from(self.flow_label));
        set(d, (base + 39, 2, 6), u64::from(self.packet_rate));
        set(d, (base + 40, 0, 8), u64::from(self.traffic_class));
        set(d, (base + 41, 0, 8), u64::from(self.hop_limit));
        set(d, (base + 42, 0, 4), u64::from(self.sl));
        set(d, (base + 42, 4, 1), u64::from(self.subnet_local));
        set(d, (base + 43, 0, 5), u64::from(self.local_ack_timeout));
    }
}

/// REQ: Connection Request (attribute 0x0010, IBTA Vol 1 Table 106).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReqRepr {
    pub local_comm_id: u32,
    /// Enhanced Connection Establishment vendor ID (24 bits; 0 when ECE is not used).
    pub vendor_id: u32,
    pub service_id: ServiceId,
    pub local_ca_guid: u64,
    pub local_qkey: Qkey,
    pub local_qpn: Qpn,
    pub responder_resources: u8,
    pub local_eecn: u32,
    pub initiator_depth: u8,
    pub remote_eecn: u32,
    pub remote_cm_response_timeout: u8,
    /// 0 = RC, 1 = UC, 3 = XRC (with `extended_transport_type` 1).
    pub transport_type: u8,
    pub e2e_flow_control: bool,
    /// The sender's receive PSN: the peer's first send PSN.
    pub starting_psn: Psn,
    pub local_cm_response_timeout: u8,
    pub retry_count: u8,
    pub pkey: u16,
    /// IBTA MTU code (1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    pub rdc_exists: bool,
    pub rnr_retry_count: u8,
    pub max_cm_retries: u8,
    pub srq: bool,
    pub extended_transport_type: u8,
    pub primary: CmPath,
    pub alternate: CmPath,
    pub sap_supported: bool,
    pub private_data: [u8; pd_len::REQ],
}

mod req {
    use super::F;
    pub const LOCAL_COMM_ID: F = (0, 0, 32);
    pub const VENDOR_ID: F = (5, 0, 24);
    pub const SERVICE_ID: F = (8, 0, 64);
    pub const LOCAL_CA_GUID: F = (16, 0, 64);
    pub const LOCAL_QKEY: F = (28, 0, 32);
    pub const LOCAL_QPN: F = (32, 0, 24);
    pub const RESPONDER_RESOURCES: F = (35, 0, 8);
    pub const LOCAL_EECN: F = (36, 0, 24);
    pub const INITIATOR_DEPTH: F = (39, 0, 8);
    pub const REMOTE_EECN: F = (40, 0, 24);
    pub const REMOTE_CM_RESPONSE_TIMEOUT: F = (43, 0, 5);
    pub const TRANSPORT_TYPE: F = (43, 5, 2);
    pub const E2E_FLOW_CONTROL: F = (43, 7, 1);
    pub const STARTING_PSN: F = (44, 0, 24);
    pub const LOCAL_CM_RESPONSE_TIMEOUT: F = (47, 0, 5);
    pub const RETRY_COUNT: F = (47, 5, 3);
    pub const PKEY: F = (48, 0, 16);
    pub const PATH_MTU: F = (50, 0, 4);
    pub const RDC_EXISTS: F = (50, 4, 1);
    pub const RNR_RETRY_COUNT: F = (50, 5, 3);
    pub const MAX_CM_RETRIES: F = (51, 0, 4);
    pub const SRQ: F = (51, 4, 1);
    pub const EXTENDED_TRANSPORT_TYPE: F = (51, 5, 3);
    pub const PRIMARY: usize = 52;
    pub const ALTERNATE: usize = 96;
    pub const SAP_SUPPORTED: F = (139, 5, 1);
    pub const PRIVATE_DATA: usize = 140;
}

impl ReqRepr {
    fn parse(d: &[u8]) -> ReqRepr {
        ReqRepr {
            local_comm_id: get(d, req::LOCAL_COMM_ID) as u32,
            vendor_id: get(d, req::VENDOR_ID) as u32,
            service_id: ServiceId(get(d, req::SERVICE_ID)),
            local_ca_guid: get(d, req::LOCAL_CA_GUID),
            local_qkey: Qkey(get(d, req::LOCAL_QKEY) as u32),
            local_qpn: Qpn::new(get(d, req::LOCAL_QPN) as u32),
            responder_resources: get(d, req::RESPONDER_RESOURCES) as u8,
            local_eecn: get(d, req::LOCAL_EECN) as u32,
            initiator_depth: get(d, req::INITIATOR_DEPTH) as u8,
            remote_eecn: get(d, req::REMOTE_EECN) as u32,
            remote_cm_response_timeout: get(d, req::REMOTE_CM_RESPONSE_TIMEOUT) as u8,
            transport_type: get(d, req::TRANSPORT_TYPE) as u8,
            e2e_flow_control: get(d, req::E2E_FLOW_CONTROL) != 0,
            starting_psn: Psn::new(get(d, req::STARTING_PSN) as u32),
            local_cm_response_timeout: get(d, req::LOCAL_CM_RESPONSE_TIMEOUT) as u8,
            retry_count: get(d, req::RETRY_COUNT) as u8,
            pkey: get(d, req::PKEY) as u16,
            path_mtu: get(d, req::PATH_MTU) as u8,
            rdc_exists: get(d, req::RDC_EXISTS) != 0,
            rnr_retry_count: get(d, req::RNR_RETRY_COUNT) as u8,
            max_cm_retries: get(d, req::MAX_CM_RETRIES) as u8,
            srq: get(d, req::SRQ) != 0,
            extended_transport_type: get(d, req::EXTENDED_TRANSPORT_TYPE) as u8,
            primary: CmPath::parse(d, req::PRIMARY),
            alternate: CmPath::parse(d, req::ALTERNATE),
            sap_supported: get(d, req::SAP_SUPPORTED) != 0,
            private_data: get_arr(d, req::PRIVATE_DATA),
        }
    }

    fn emit(&self, d: &mut [u8]) {
        set(d, req::LOCAL_COMM_ID, u64::from(self.local_comm_id));
        set(d, req::VENDOR_ID, u64::from(self.vendor_id));
        set(d, req::SERVICE_ID, self.service_id.0);
        set(d, req::LOCAL_CA_GUID, self.local_ca_guid);
        set(d, req::LOCAL_QKEY, u64::from(self.local_qkey.0));
        set(d, req::LOCAL_QPN, u64::from(self.local_qpn.value()));
        set(
            d,
            req::RESPONDER_RESOURCES,
            u64::from(self.responder_resources),
        );
        set(d, req::LOCAL_EECN, u64::from(self.local_eecn));
        set(d, req::INITIATOR_DEPTH, u64::from(self.initiator_depth));
        set(d, req::REMOTE_EECN, u64::from(self.remote_eecn));
        set(
            d,
            req::REMOTE_CM_RESPONSE_TIMEOUT,
            u64::from(self.remote_cm_response_timeout),
        );
        set(d, req::TRANSPORT_TYPE, u64::from(self.transport_type));
        set(d, req::E2E_FLOW_CONTROL, u64::from(self.e2e_flow_control));
        set(d, req::STARTING_PSN, u64::from(self.starting_psn.value()));
        set(
            d,
            req::LOCAL_CM_RESPONSE_TIMEOUT,
            u64::from(self.local_cm_response_timeout),
        );
        set(d, req::RETRY_COUNT, u64::from(self.retry_count));
        set(d, req::PKEY, u64::from(self.pkey));
        set(d, req::PATH_MTU, u64::from(self.path_mtu));
        set(d, req::RDC_EXISTS, u64::from(self.rdc_exists));
        set(d, req::RNR_RETRY_COUNT, u64::from(self.rnr_retry_count));
        set(d, req::MAX_CM_RETRIES, u64::from(self.max_cm_retries));
        set(d, req::SRQ, u64::from(self.srq));
        set(
            d,
            req::EXTENDED_TRANSPORT_TYPE,
            u64::from(self.extended_transport_type),
        );
        self.primary.emit(d, req::PRIMARY);
        self.alternate.emit(d, req::ALTERNATE);
        set(d, req::SAP_SUPPORTED, u64::from(self.sap_supported));
        d[req::PRIVATE_DATA..req::PRIVATE_DATA + pd_len::REQ].copy_from_slice(&self.private_data);
    }
}

/// MRA: Message Receipt Acknowledgement (attribute 0x0011, IBTA Vol 1 Table 107).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MraRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_mraed: MsgRef,
    /// IBA time exponent: the sender needs 4.096 µs × 2^t more.
    pub service_timeout: u8,
    pub private_data: [u8; pd_len::MRA],
}

/// REJ: Reject (attribute 0x0012, IBTA Vol 1 Table 108).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RejRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_rejected: MsgRef,
    /// How many bytes of `ari` are meaningful (7 bits on the wire; at most 72 make sense).
    pub reject_info_len: u8,
    pub reason: RejReason,
    pub ari: [u8; pd_len::ARI],
    pub private_data: [u8; pd_len::REJ],
}

/// REP: Reply to a REQ (attribute 0x0013, IBTA Vol 1 Table 110).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: Qkey,
    pub local_qpn: Qpn,
    /// ECE vendor ID, 24 bits (spread over three bytes on the wire).
    pub vendor_id: u32,
    /// For XRC the target QPN goes here.
    pub local_eecn: u32,
    pub starting_psn: Psn,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub failover_accepted: u8,
    pub e2e_flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: [u8; pd_len::REP],
}

/// RTU: Ready To Use (attribute 0x0014, IBTA Vol 1 Table 111).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RtuRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; pd_len::RTU],
}

/// DREQ: Disconnect Request (attribute 0x0015, IBTA Vol 1 Table 113).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DreqRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// The receiver's QPN; Linux ignores a DREQ whose value is not its QP (cm.c
    /// cm_dreq_handler).
    pub remote_qpn: Qpn,
    pub private_data: [u8; pd_len::DREQ],
}

/// DREP: Disconnect Reply (attribute 0x0016, IBTA Vol 1 Table 114).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DrepRepr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; pd_len::DREP],
}

/// SIDR_REQ: Service ID Resolution Request (attribute 0x0017, IBTA Vol 1 Table 119).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SidrReqRepr {
    pub request_id: u32,
    pub pkey: u16,
    pub service_id: ServiceId,
    pub private_data: [u8; pd_len::SIDR_REQ],
}

/// SIDR_REP: Service ID Resolution Response (attribute 0x0018, IBTA Vol 1 Table 120).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SidrRepRepr {
    pub request_id: u32,
    pub status: SidrStatus,
    pub additional_info_len: u8,
    /// ECE vendor ID, 24 bits (16 + 8 on the wire, around the QPN).
    pub vendor_id: u32,
    pub qpn: Qpn,
    pub service_id: ServiceId,
    pub qkey: Qkey,
    pub additional_info: [u8; pd_len::ARI],
    pub private_data: [u8; pd_len::SIDR_REP],
}

fn ids(d: &[u8]) -> (u32, u32) {
    (get(d, (0, 0, 32)) as u32, get(d, (4, 0, 32)) as u32)
}
fn set_ids(d: &mut [u8], local: u32, remote: u32) {
    set(d, (0, 0, 32), u64::from(local));
    set(d, (4, 0, 32), u64::from(remote));
}

impl MraRepr {
    fn parse(d: &[u8]) -> MraRepr {
        let (local_comm_id, remote_comm_id) = ids(d);
        MraRepr {
            local_comm_id,
            remote_comm_id,
            message_mraed: MsgRef(get(d, (8, 0, 2)) as u8),
            service_timeout: get(d, (9, 0, 5)) as u8,
            private_data: get_arr(d, 10),
        }
    }
    fn emit(&self, d: &mut [u8]) {
        set_ids(d, self.local_comm_id, self.remote_comm_id);
        set(d, (8, 0, 2), u64::from(self.message_mraed.0));
        set(d, (9, 0, 5), u64::from(self.service_timeout));
        d[10..10 + pd_len::MRA].copy_from_slice(&self.private_data);
    }
}

impl RejRepr {
    fn parse(d: &[u8]) -> RejRepr {
        let (local_comm_id, remote_comm_id) = ids(d);
        RejRepr {
            local_comm_id,
            remote_comm_id,
            message_rejected: MsgRef(get(d, (8, 0, 2)) as u8),
            reject_info_len: get(d, (9, 0, 7)) as u8,
            reason: RejReason(get(d, (10, 0, 16)) as u16),
            ari: get_arr(d, 12),
            private_data: get_arr(d, 84),
        }
    }
    fn emit(&self, d: &mut [u8]) {
        set_ids(d, self.local_comm_id, self.remote_comm_id);
        set(d, (8, 0, 2), u64::from(self.message_rejected.0));
        set(d, (9, 0, 7), u64::from(self.reject_info_len));
        set(d, (10, 0, 16), u64::from(self.reason.0));
        d[12..12 + pd_len::ARI].copy_from_slice(&self.ari);
        d[84..84 + pd_len::REJ].copy_from_slice(&self.private_data);
    }
}

impl RepRepr {
    fn parse(d: &[u8]) -> RepRepr {
        let (local_comm_id, remote_comm_id) = ids(d);
        let vendor_id =
            ((get(d, (15, 0, 8)) << 16) | (get(d, (19, 0, 8)) << 8) | get(d, (23, 0, 8))) as u32;
        RepRepr {
            local_comm_id,
            remote_comm_id,
            local_qkey: Qkey(get(d, (8, 0, 32)) as u32),
            local_qpn: Qpn::new(get(d, (12, 0, 24)) as u32),
            vendor_id,
            local_eecn: get(d, (16, 0, 24)) as u32,
            starting_psn: Psn::new(get(d, (20, 0, 24)) as u32),
            responder_resources: get(d, (24, 0, 8)) as u8,
            initiator_depth: get(d, (25, 0, 8)) as u8,
            target_ack_delay: get(d, (26, 0, 5)) as u8,
            failover_accepted: get(d, (26, 5, 2)) as u8,
            e2e_flow_control: get(d, (26, 7, 1)) != 0,
            rnr_retry_count: get(d, (27, 0, 3)) as u8,
            srq: get(d, (27, 3, 1)) != 0,
            local_ca_guid: get(d, (28, 0, 64)),
            private_data: get_arr(d, 36),
        }
    }
    fn emit(&self, d: &mut [u8]) {
        set_ids(d, self.local_comm_id, self.remote_comm_id);
        set(d, (8, 0, 32), u64::from(self.local_qkey.0));
        set(d, (12, 0, 24), u64::from(self.local_qpn.value()));
        set(d, (15, 0, 8), u64::from(self.vendor_id >> 16));
        set(d, (16, 0, 24), u64::from(self.local_eecn));
        set(d, (19, 0, 8), u64::from(self.vendor_id >> 8));
        set(d, (20, 0, 24), u64::from(self.starting_psn.value()));
        set(d, (23, 0, 8), u64::from(self.vendor_id));
        set(d, (24, 0, 8), u64::from(self.responder_resources));
        set(d, (25, 0, 8), u64::from(self.initiator_depth));
        set(d, (26, 0, 5), u64::from(self.target_ack_delay));
        set(d, (26, 5, 2), u64::from(self.failover_accepted));
        set(d, (26, 7, 1), u64::from(self.e2e_flow_control));
        set(d, (27, 0, 3), u64::from(self.rnr_retry_count));
        set(d, (27, 3, 1), u64::from(self.srq));
        set(d, (28, 0, 64), self.local_ca_guid);
        d[36..36 + pd_len::REP].copy_from_slice(&self.private_data);
    }
}

impl RtuRepr {
    fn parse(d: &[u8]) -> RtuRepr {
        let (local_comm_id, remote_comm_id) = ids(d);
        RtuRepr {
            local_comm_id,
            remote_comm_id,
            private_data: get_arr(d, 8),
        }
    }
    fn emit(&self, d: &mut [u8]) {
        set_ids(d, self.local_comm_id, self.remote_comm_id);
        d[8..8 + pd_len::RTU].copy_from_slice(&self.private_data);
    }
}

impl DreqRepr {
    fn parse(d: &[u8]) -> DreqRepr {
        let (local_comm_id, remote_comm_id) = ids(d);
        DreqRepr {
            local_comm_id,
            remote_comm_id,
            remote_qpn: Qpn::new(get(d, (8, 0, 24)) as u32),
            private_data: get_arr(d, 12),
        }
    }
    fn emit(&self, d: &mut [u8]) {
        set_ids(d, self.local_comm_id, self.remote_comm_id);
        set(d, (8, 0, 24), u64::from(self.remote_qpn.value()));
        d[12..12 + pd_len::DREQ].copy_from_slice(&self.private_data);
    }
}

impl DrepRepr {
    fn parse(d: &[u8]) -> DrepRepr {
        let (local_comm_id, remote_comm_id) = ids(d);
        DrepRepr {
            local_comm_id,
            remote_comm_id,
            private_data: get_arr(d, 8),
        }
    }
    fn emit(&self, d: &mut [u8]) {
        set_ids(d, self.local_comm_id, self.remote_comm_id);
        d[8..8 + pd_len::DREP].copy_from_slice(&self.private_data);
    }
}

impl SidrReqRepr {
    fn parse(d: &[u8]) -> SidrReqRepr {
        SidrReqRepr {
            request_id: get(d, (0, 0, 32)) as u32,
            pkey: get(d, (4, 0, 16)) as u16,
            service_id: ServiceId(get(d, (8, 0, 64))),
            private_data: get_arr(d, 16),
        }
    }
    fn emit(&self, d: &mut [u8]) {
        set(d, (0, 0, 32), u64::from(self.request_id));
        set(d, (4, 0, 16), u64::from(self.pkey));
        set(d, (8, 0, 64), self.service_id.0);
        d[16..16 + pd_len::SIDR_REQ].copy_from_slice(&self.private_data);
    }
}

impl SidrRepRepr {
    fn parse(d: &[u8]) -> SidrRepRepr {
        SidrRepRepr {
            request_id: get(d, (0, 0, 32)) as u32,
            status: SidrStatus(get(d, (4, 0, 8)) as u8),
            additional_info_len: get(d, (5, 0, 8)) as u8,
            vendor_id: ((get(d, (6, 0, 16)) << 8) | get(d, (11, 0, 8))) as u32,
            qpn: Qpn::new(get(d, (8, 0, 24)) as u32),
            service_id: ServiceId(get(d, (12, 0, 64))),
            qkey: Qkey(get(d, (20, 0, 32)) as u32),
            additional_info: get_arr(d, 24),
            private_data: get_arr(d, 96),
        }
    }
    fn emit(&self, d: &mut [u8]) {
        set(d, (0, 0, 32), u64::from(self.request_id));
        set(d, (4, 0, 8), u64::from(self.status.0));
        set(d, (5, 0, 8), u64::from(self.additional_info_len));
        set(d, (6, 0, 16), u64::from(self.vendor_id >> 8));
        set(d, (8, 0, 24), u64::from(self.qpn.value()));
        set(d, (11, 0, 8), u64::from(self.vendor_id));
        set(d, (12, 0, 64), self.service_id.0);
        set(d, (20, 0, 32), u64::from(self.qkey.0));
        d[24..24 + pd_len::ARI].copy_from_slice(&self.additional_info);
        d[96..96 + pd_len::SIDR_REP].copy_from_slice(&self.private_data);
    }
}

/// One CM message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CmMsg {
    Req(Box<ReqRepr>),
    Mra(Box<MraRepr>),
    Rej(Box<RejRepr>),
    Rep(Box<RepRepr>),
    Rtu(Box<RtuRepr>),
    Dreq(Box<DreqRepr>),
    Drep(Box<DrepRepr>),
    SidrReq(Box<SidrReqRepr>),
    SidrRep(Box<SidrRepRepr>),
}

impl CmMsg {
    /// The attribute ID this message is sent under.
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMsg::Req(_) => attr::REQ,
            CmMsg::Mra(_) => attr::MRA,
            CmMsg::Rej(_) => attr::REJ,
            CmMsg::Rep(_) => attr::REP,
            CmMsg::Rtu(_) => attr::RTU,
            CmMsg::Dreq(_) => attr::DREQ,
            CmMsg::Drep(_) => attr::DREP,
            CmMsg::SidrReq(_) => attr::SIDR_REQ,
            CmMsg::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// Short name as the IBTA tables spell it.
    pub fn name(&self) -> &'static str {
        match self {
            CmMsg::Req(_) => "REQ",
            CmMsg::Mra(_) => "MRA",
            CmMsg::Rej(_) => "REJ",
            CmMsg::Rep(_) => "REP",
            CmMsg::Rtu(_) => "RTU",
            CmMsg::Dreq(_) => "DREQ",
            CmMsg::Drep(_) => "DREP",
            CmMsg::SidrReq(_) => "SIDR_REQ",
            CmMsg::SidrRep(_) => "SIDR_REP",
        }
    }
}

/// A whole CM MAD: the header fields a CM uses plus one message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CmMadRepr {
    pub tid: u64,
    /// Attribute modifier (carries ECE options in REQ/REP; 0 otherwise).
    pub attr_mod: u32,
    pub msg: CmMsg,
}

impl CmMadRepr {
    /// Parses a MAD received on QP1.
    ///
    /// Errors: [`Error::Truncated`] for fewer than 256 bytes, [`Error::NotCm`] when the header
    /// is not what the Linux CM agent accepts (base version 1, class 0x07, class version 2,
    /// method Send), [`Error::UnknownAttribute`] for an attribute this CM does not handle
    /// (ClassPortInfo, LAP, APR and unassigned IDs: Linux drops those too).
    pub fn parse(bytes: &[u8]) -> Result<CmMadRepr> {
        let p = mad::Packet::new_checked(bytes)?;
        let h = MadHeader::parse(&p)?;
        if !h.is_cm_send() {
            return Err(Error::NotCm);
        }
        let d = p.data();
        let msg = match h.attr_id {
            attr::REQ => CmMsg::Req(Box::new(ReqRepr::parse(d))),
            attr::MRA => CmMsg::Mra(Box::new(MraRepr::parse(d))),
            attr::REJ => CmMsg::Rej(Box::new(RejRepr::parse(d))),
            attr::REP => CmMsg::Rep(Box::new(RepRepr::parse(d))),
            attr::RTU => CmMsg::Rtu(Box::new(RtuRepr::parse(d))),
            attr::DREQ => CmMsg::Dreq(Box::new(DreqRepr::parse(d))),
            attr::DREP => CmMsg::Drep(Box::new(DrepRepr::parse(d))),
            attr::SIDR_REQ => CmMsg::SidrReq(Box::new(SidrReqRepr::parse(d))),
            attr::SIDR_REP => CmMsg::SidrRep(Box::new(SidrRepRepr::parse(d))),
            _ => return Err(Error::UnknownAttribute),
        };
        Ok(CmMadRepr {
            tid: h.tid,
            attr_mod: h.attr_mod,
            msg,
        })
    }

    /// Writes the whole 256-byte MAD into `out[..256]`: header, message, and zeros in every
    /// reserved bit and unused byte.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        if out.len() < MAD_LEN {
            return Err(Error::BufferTooSmall);
        }
        let out = &mut out[..MAD_LEN];
        out.fill(0);
        let mut p = mad::Packet::new_unchecked(&mut *out);
        MadHeader::cm(self.msg.attr_id(), self.tid, self.attr_mod).emit(&mut p);
        let d = p.data_mut();
        debug_assert_eq!(d.len(), DATA_LEN);
        match &self.msg {
            CmMsg::Req(m) => m.emit(d),
            CmMsg::Mra(m) => m.emit(d),
            CmMsg::Rej(m) => m.emit(d),
            CmMsg::Rep(m) => m.emit(d),
            CmMsg::Rtu(m) => m.emit(d),
            CmMsg::Dreq(m) => m.emit(d),
            CmMsg::Drep(m) => m.emit(d),
            CmMsg::SidrReq(m) => m.emit(d),
            CmMsg::SidrRep(m) => m.emit(d),
        }
        Ok(())
    }

    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }
}

/// A CM Service ID (64 bits). rdma_cm's IP services are `0x0000_0000_01 << 24 | ps << 16 |
/// port` (IBTA Annex A11; kernel cma.c rdma_get_service_id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceId(pub u64);

/// rdma_cm port spaces (librdmacm `enum rdma_port_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortSpace(pub u16);

impl PortSpace {
    pub const IPOIB: PortSpace = PortSpace(0x0002);
    /// Reliable connected (RC) services: rping, ucmatose, perftest -R.
    pub const TCP: PortSpace = PortSpace(0x0106);
    /// Unreliable datagram (UD) services resolved with SIDR: udaddy.
    pub const UDP: PortSpace = PortSpace(0x0111);
    pub const IB: PortSpace = PortSpace(0x013F);
}

impl ServiceId {
    const RDMA_IP_PREFIX: u64 = 0x0000_0000_0100_0000;
    const RDMA_IP_MASK: u64 = 0xFFFF_FFFF_FF00_0000;

    /// The Service ID of rdma_cm port `port` in port space `ps`.
    pub const fn rdma_ip(ps: PortSpace, port: u16) -> ServiceId {
        ServiceId(Self::RDMA_IP_PREFIX | ((ps.0 as u64) << 16) | port as u64)
    }

    /// True when the ID is in the RDMA IP CM service range.
    pub const fn is_rdma_ip(self) -> bool {
        self.0 & Self::RDMA_IP_MASK == Self::RDMA_IP_PREFIX
    }

    pub const fn port_space(self) -> PortSpace {
        PortSpace(((self.0 >> 16) & 0xFFFF) as u16)
    }

    pub const fn port(self) -> u16 {
        (self.0 & 0xFFFF) as u16
    }
}

/// Length of rdma_cm's header at the start of REQ and SIDR_REQ private data.
pub const CMA_HDR_LEN: usize = 36;

/// rdma_cm's header in REQ/SIDR_REQ private data (kernel cma.c `struct cma_hdr`).
///
/// ```text
/// 0      cma_version (0)
/// 1      ip_version in bits 7..4 (4 or 6)
/// 2..4   source port of the active side
/// 4..20  source address (IPv4 in the last 4 bytes)
/// 20..36 destination address, the listener's
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHdr {
    pub cma_version: u8,
    pub src_port: u16,
    pub src: IpAddr,
    pub dst: IpAddr,
}

impl CmaHdr {
    /// The only version the kernel accepts (`CMA_VERSION`).
    pub const VERSION: u8 = 0;

    /// Parses the first 36 bytes of `pd`. [`Error::Truncated`] when shorter, [`Error::BadVersion`]
    /// when the IP version nibble is neither 4 nor 6 (the kernel then rejects the REQ).
    pub fn parse(pd: &[u8]) -> Result<CmaHdr> {
        if pd.len() < CMA_HDR_LEN {
            return Err(Error::Truncated);
        }
        let addr = |at: usize| -> [u8; 16] { get_arr(pd, at) };
        let (src, dst) = match pd[1] >> 4 {
            4 => {
                let v4 = |a: [u8; 16]| IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]));
                (v4(addr(4)), v4(addr(20)))
            }
            6 => (
                IpAddr::V6(Ipv6Addr::from(addr(4))),
                IpAddr::V6(Ipv6Addr::from(addr(20))),
            ),
            _ => return Err(Error::BadVersion),
        };
        Ok(CmaHdr {
            cma_version: pd[0],
            src_port: u16::from_be_bytes([pd[2], pd[3]]),
            src,
            dst,
        })
    }

    /// Writes the header into `pd[..36]`. Both addresses must be of one family
    /// ([`Error::BadVersion`] otherwise).
    pub fn emit(&self, pd: &mut [u8]) -> Result<()> {
        if pd.len() < CMA_HDR_LEN {
            return Err(Error::BufferTooSmall);
        }
        let put = |a: IpAddr| -> [u8; 16] {
            match a {
                IpAddr::V4(v4) => {
                    let mut b = [0u8; 16];
                    b[12..].copy_from_slice(&v4.octets());
                    b
                }
                IpAddr::V6(v6) => v6.octets(),
            }
        };
        let ver = match (self.src, self.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4u8,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6u8,
            _ => return Err(Error::BadVersion),
        };
        pd[0] = self.cma_version;
        pd[1] = ver << 4;
        pd[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        pd[4..20].copy_from_slice(&put(self.src));
        pd[20..36].copy_from_slice(&put(self.dst));
        Ok(())
    }
}

/// The transaction ID Linux gives unsolicited messages (REQ, DREQ, SIDR_REQ): the MAD agent's
/// high word over the Local Comm ID as the kernel stores it (a big-endian value cast to u64, so on
/// little-endian hosts the comm ID's bytes appear reversed; kernel cm.c cm_form_tid). Peers only
/// echo TIDs, so any value works; this one makes captures look like Linux's.
pub const fn linux_style_tid(agent_hi: u32, local_comm_id: u32) -> u64 {
    ((agent_hi as u64) << 32) | local_comm_id.swap_bytes() as u64
}

/// The kernel's conversion of an IBA time exponent (4.096 µs × 2^t) to milliseconds:
/// `1 << max(t − 8, 0)` (kernel cm.c cm_convert_to_ms).
pub const fn iba_time_to_ms(t: u8) -> u64 {
    let t = if t > 31 { 31 } else { t };
    if t <= 8 {
        1
    } else {
        1u64 << (t - 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(m: &CmMadRepr) {
        let mut buf = [0xAAu8; MAD_LEN];
        m.emit(&mut buf).expect("emit");
        assert_eq!(&CmMadRepr::parse(&buf).expect("parse"), m);
    }

    #[test]
    fn service_ids_of_rdma_cm() {
        let s = ServiceId::rdma_ip(PortSpace::TCP, 7174);
        assert_eq!(s.0, 0x0000_0000_0106_1C06);
        assert!(s.is_rdma_ip());
        assert_eq!(s.port_space(), PortSpace::TCP);
        assert_eq!(s.port(), 7174);
        assert_eq!(ServiceId::rdma_ip(PortSpace::UDP, 7174).0, 0x0111_1C06);
        assert_eq!(ServiceId::rdma_ip(PortSpace::TCP, 18515).0, 0x0106_4853);
        assert!(!ServiceId(0x1234_0000_0106_1C06).is_rdma_ip());
    }

    #[test]
    fn every_message_round_trips() {
        let mut pd = [0u8; 224];
        for (i, b) in pd.iter_mut().enumerate() {
            *b = i as u8;
        }
        let mut req = ReqRepr::parse(&[0u8; DATA_LEN]);
        req.local_comm_id = 0x30C4_CAD3;
        req.vendor_id = 0x00AB_CDEF;
        req.service_id = ServiceId::rdma_ip(PortSpace::TCP, 1);
        req.local_qpn = Qpn::new(0x30);
        req.starting_psn = Psn::new(0xCE65AA);
        req.transport_type = 1;
        req.e2e_flow_control = true;
        req.retry_count = 7;
        req.rnr_retry_count = 6;
        req.srq = true;
        req.primary.flow_label = 0xF_FFFF;
        req.primary.packet_rate = 0x3F;
        req.primary.subnet_local = true;
        req.alternate.local_ack_timeout = 31;
        req.sap_supported = true;
        req.private_data.copy_from_slice(&pd[..pd_len::REQ]);
        let msgs = vec![
            CmMsg::Req(Box::new(req)),
            CmMsg::Mra(Box::new(MraRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                message_mraed: MsgRef::REP,
                service_timeout: 24,
                private_data: get_arr(&pd, 0),
            })),
            CmMsg::Rej(Box::new(RejRepr {
                local_comm_id: 0,
                remote_comm_id: 9,
                message_rejected: MsgRef::REQ,
                reject_info_len: 8,
                reason: RejReason::INVALID_SERVICE_ID,
                ari: get_arr(&pd, 1),
                private_data: get_arr(&pd, 2),
            })),
            CmMsg::Rep(Box::new(RepRepr {
                local_comm_id: 3,
                remote_comm_id: 4,
                local_qkey: Qkey(0),
                local_qpn: Qpn::new(0x56),
                vendor_id: 0x12_3456,
                local_eecn: 0xFF_FFFF,
                starting_psn: Psn::new(0x77E52C),
                responder_resources: 1,
                initiator_depth: 1,
                target_ack_delay: 15,
                failover_accepted: 2,
                e2e_flow_control: true,
                rnr_retry_count: 7,
                srq: true,
                local_ca_guid: 0x5054_00FF_FE77_000B,
                private_data: get_arr(&pd, 3),
            })),
            CmMsg::Rtu(Box::new(RtuRepr {
                local_comm_id: 5,
                remote_comm_id: 6,
                private_data: get_arr(&pd, 0),
            })),
            CmMsg::Dreq(Box::new(DreqRepr {
                local_comm_id: 7,
                remote_comm_id: 8,
                remote_qpn: Qpn::new(0x56),
                private_data: get_arr(&pd, 4),
            })),
            CmMsg::Drep(Box::new(DrepRepr {
                local_comm_id: 8,
                remote_comm_id: 7,
                private_data: get_arr(&pd, 0),
            })),
            CmMsg::SidrReq(Box::new(SidrReqRepr {
                request_id: 0xDEAD_BEEF,
                pkey: 0xFFFF,
                service_id: ServiceId::rdma_ip(PortSpace::UDP, 7174),
                private_data: get_arr(&pd, 5),
            })),
            CmMsg::SidrRep(Box::new(SidrRepRepr {
                request_id: 0xDEAD_BEEF,
                status: SidrStatus::SUCCESS,
                additional_info_len: 0,
                vendor_id: 0xAB_CDEF,
                qpn: Qpn::new(0x1234),
                service_id: ServiceId::rdma_ip(PortSpace::UDP, 7174),
                qkey: Qkey(0x0123_4567),
                additional_info: get_arr(&pd, 6),
                private_data: get_arr(&pd, 7),
            })),
        ];
        for msg in msgs {
            roundtrip(&CmMadRepr {
                tid: 0x0000_0002_D3CA_C430,
                attr_mod: 0,
                msg,
            });
        }
    }

    #[test]
    fn refuses_what_is_not_a_cm_send() {
        let m = CmMadRepr {
            tid: 1,
            attr_mod: 0,
            msg: CmMsg::Rtu(Box::new(RtuRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                private_data: [0; pd_len::RTU],
            })),
        };
        let mut buf = [0u8; MAD_LEN];
        m.emit(&mut buf).expect("emit");
        assert_eq!(CmMadRepr::parse(&buf[..255]), Err(Error::Truncated));
        for (at, v) in [(0, 2u8), (1, 0x04), (2, 1), (3, 0x01), (3, 0x83)] {
            let mut bad = buf;
            bad[at] = v;
            assert_eq!(
                CmMadRepr::parse(&bad),
                Err(Error::NotCm),
                "byte {at} = {v:#x}"
            );
        }
        for a in [attr::CLASS_PORT_INFO, attr::LAP, attr::APR, 0x0042] {
            let mut bad = buf;
            bad[16..18].copy_from_slice(&a.to_be_bytes());
            assert_eq!(CmMadRepr::parse(&bad), Err(Error::UnknownAttribute));
        }
        let mut small = [0u8; 200];
        assert_eq!(m.emit(&mut small), Err(Error::BufferTooSmall));
    }

    #[test]
    fn cma_hdr_both_families() {
        let h = CmaHdr {
            cma_version: 0,
            src_port: 42276,
            src: IpAddr::V4(Ipv4Addr::new(10, 77, 0, 12)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 77, 0, 11)),
        };
        let mut pd = [0xFFu8; 56];
        h.emit(&mut pd).expect("emit");
        assert_eq!(&pd[..4], &[0x00, 0x40, 0xA5, 0x24]);
        assert_eq!(&pd[4..16], &[0u8; 12]);
        assert_eq!(&pd[16..20], &[10, 77, 0, 12]);
        assert_eq!(&pd[32..36], &[10, 77, 0, 11]);
        assert_eq!(CmaHdr::parse(&pd).expect("parse"), h);
        let h6 = CmaHdr {
            src: "fe80::1".parse().expect("v6"),
            dst: "fe80::2".parse().expect("v6"),
            ..h
        };
        h6.emit(&mut pd).expect("emit");
        assert_eq!(pd[1], 0x60);
        assert_eq!(CmaHdr::parse(&pd).expect("parse"), h6);
        let mixed = CmaHdr { dst: h.dst, ..h6 };
        assert_eq!(mixed.emit(&mut pd), Err(Error::BadVersion));
        pd[1] = 0x50;
        assert_eq!(CmaHdr::parse(&pd), Err(Error::BadVersion));
        assert_eq!(CmaHdr::parse(&pd[..35]), Err(Error::Truncated));
    }

    #[test]
    fn time_conversion_and_tid() {
        assert_eq!(iba_time_to_ms(20), 4096);
        assert_eq!(iba_time_to_ms(18), 1024);
        assert_eq!(iba_time_to_ms(3), 1);
        assert_eq!(linux_style_tid(2, 0x30C4_CAD3), 0x0000_0002_D3CA_C430);
    }
}
