//! Two connected QPs in one process: on one device (internal loopback) or on two devices
//! (RoCEv2 over UDP between their addresses). What ibv_rc_pingpong's out-of-band exchange
//! does, without the TCP socket.

use verbs::{
    AccessFlags, CompChannel, ConnectOpts, Context, Cq, Device, Gid, Pd, Qp, QpCap, QpEndpoint,
    QpInitAttr, QpType, Result, PORT,
};

/// One end: its context, PD, CQ (for both directions), optional completion channel, QP,
/// and the GID peers use to reach it.
#[derive(Clone, Debug)]
pub struct End {
    /// The context (shared by both ends when they are on the same device).
    pub ctx: Context,
    /// This end's PD.
    pub pd: Pd,
    /// CQ for sends and receives.
    pub cq: Cq,
    /// Completion channel of `cq`, when [`PairOpts::channel`] asked for one.
    pub channel: Option<CompChannel>,
    /// The QP.
    pub qp: Qp,
    /// GID index 0 of this end's device.
    pub gid: Gid,
}

impl End {
    /// This end as the peer sees it (QPN, first PSN, GID).
    pub fn endpoint(&self, psn: u32) -> QpEndpoint {
        self.qp.endpoint(psn, self.gid)
    }
}

/// How to build a pair.
#[derive(Clone, Copy, Debug)]
pub struct PairOpts {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// QP capacities (both ends).
    pub cap: QpCap,
    /// CQ entries (both ends).
    pub cqe: u32,
    /// Give each CQ a completion channel.
    pub channel: bool,
    /// Signal every send WR.
    pub sq_sig_all: bool,
    /// Connection attributes (RC/UC); `sq_psn` is per end: A uses it, B uses it + 1000.
    pub connect: ConnectOpts,
    /// Q_Key (UD).
    pub qkey: u32,
}

impl Default for PairOpts {
    fn default() -> PairOpts {
        PairOpts {
            qp_type: QpType::Rc,
            cap: QpCap {
                max_send_wr: 128,
                max_recv_wr: 128,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            cqe: 256,
            channel: false,
            sq_sig_all: false,
            connect: ConnectOpts::default(),
            qkey: 0x1111_1111,
        }
    }
}

fn end(ctx: &Context, o: &PairOpts) -> Result<End> {
    let pd = ctx.alloc_pd()?;
    let channel = if o.channel {
        Some(ctx.create_comp_channel()?)
    } else {
        None
    };
    let cq = ctx.create_cq(o.cqe, channel.as_ref(), 0)?;
    let mut attr = QpInitAttr::new(o.qp_type, &cq, o.cap);
    attr.sq_sig_all = o.sq_sig_all;
    let qp = pd.create_qp(&attr)?;
    let gid = ctx.query_gid(o.connect.port, u32::from(o.connect.sgid_index))?;
    Ok(End {
        ctx: ctx.clone(),
        pd,
        cq,
        channel,
        qp,
        gid,
    })
}

/// Open `a` and `b` (one context if they are the same device), create an end on each and
/// bring both QPs to RTS: connected to each other for RC/UC, ready with `qkey` for UD.
pub fn connect(a: &Device, b: &Device, o: &PairOpts) -> Result<(End, End)> {
    let ctx_a = a.open()?;
    let ctx_b = if a.name() == b.name() && a.addr() == b.addr() {
        ctx_a.clone()
    } else {
        b.open()?
    };
    connect_in(&ctx_a, &ctx_b, o)
}

/// [`connect`] in contexts already open (the same one for both ends if wanted): many
/// pairs on one device need not open a context each.
pub fn connect_in(ctx_a: &Context, ctx_b: &Context, o: &PairOpts) -> Result<(End, End)> {
    let ea = end(ctx_a, o)?;
    let eb = end(ctx_b, o)?;
    let (psn_a, psn_b) = (
        o.connect.sq_psn,
        o.connect.sq_psn.wrapping_add(1000) & 0xff_ffff,
    );
    match o.qp_type {
        QpType::Ud => {
            ea.qp.ready_ud(o.connect.port, o.qkey, psn_a)?;
            eb.qp.ready_ud(o.connect.port, o.qkey, psn_b)?;
        }
        _ => {
            let mut oa = o.connect;
            oa.sq_psn = psn_a;
            let mut ob = o.connect;
            ob.sq_psn = psn_b;
            ea.qp.connect(&eb.endpoint(psn_b), &oa)?;
            eb.qp.connect(&ea.endpoint(psn_a), &ob)?;
        }
    }
    Ok((ea, eb))
}

/// Access flags for a buffer a peer may read, write and update atomically.
pub const ALL_ACCESS: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

/// The port every uroce device has.
pub const DEFAULT_PORT: u8 = PORT;
