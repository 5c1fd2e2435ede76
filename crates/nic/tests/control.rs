//! The control plane over a real socketpair with raw ABI commands: attributes, object
//! lifecycles, and hostile input (wrong handles, another context's handles, bad lengths,
//! illegal transitions) — each answered with the right errno while the plane survives.

mod common;

use abi::cmd::{encode_extended, encode_legacy, Command};
use abi::fastpath::{recv_wqe_size, send_wqe_size, CQE_BYTES};
use abi::ring::RingLayout;
use abi::uverbs::*;
use abi::{AccessFlags, Errno, QpAttrMask, QpType, Request};
use common::*;
use zerocopy::{FromBytes, IntoBytes};

const IP: &str = "127.77.3.1";

fn dev() -> nic::DeviceHandle {
    device("ctl0", IP)
}

#[test]
fn device_port_gid_and_pkey_attributes_are_rxe_like() {
    let d = dev();
    let mut c = Client::connect(&d);
    let r = c
        .call(&Request::QueryDevice(QueryDevice::default()))
        .unwrap();
    let q = QueryDeviceResp::read_from_bytes(&r).unwrap();
    assert_eq!((q.vendor_id, q.vendor_part_id), (0xff_ffff, 0));
    assert_eq!(q.phys_port_cnt, 1);
    assert_eq!(q.max_qp_rd_atom, 128);
    assert_eq!(q.max_sge, 32);
    assert_eq!(q.max_pkeys, 1);
    assert_eq!(q.atomic_cap, abi::AtomicCap::HCA.0);
    // EUI-64 of 02:00:127.77.3.1.
    assert_eq!(q.node_guid.get(), 0x0000_7fff_fe4d_0301);

    let r = c
        .call(&Request::QueryPort(QueryPort {
            port_num: 1,
            ..Default::default()
        }))
        .unwrap();
    let p = QueryPortResp::read_from_bytes(&r).unwrap();
    assert_eq!(p.state, abi::PortState::ACTIVE.0 as u8);
    assert_eq!(p.link_layer, abi::LinkLayer::ETHERNET.0);
    assert_eq!(p.active_mtu, abi::Mtu::Mtu1024.raw() as u8);
    assert_eq!(p.max_mtu, abi::Mtu::Mtu4096.raw() as u8);
    assert_eq!((p.gid_tbl_len, p.pkey_tbl_len, p.lid), (1, 1, 0));
    let e = c
        .call(&Request::QueryPort(QueryPort {
            port_num: 2,
            ..Default::default()
        }))
        .unwrap_err();
    assert_eq!(e, Errno::EINVAL);

    let g = |c: &mut Client, index| {
        c.call(&Request::QueryGid(QueryGid {
            port_num: 1,
            index,
            ..Default::default()
        }))
    };
    let r = g(&mut c, 0).unwrap();
    let gid0 = QueryGidResp::read_from_bytes(&r).unwrap();
    assert_eq!(gid0.gid, gid(IP));
    assert_eq!(gid0.gid[10..12], [0xff, 0xff]);
    assert_eq!(gid0.gid_type, abi::GidType::ROCE_V2.0);
    assert_eq!(gid0.flags, QueryGidResp::FLAG_VALID);
    assert_eq!(g(&mut c, 1).unwrap_err(), Errno::EINVAL);

    let r = c
        .call(&Request::QueryPkey(QueryPkey {
            port_num: 1,
            index: 0,
            ..Default::default()
        }))
        .unwrap();
    assert_eq!(QueryPkeyResp::read_from_bytes(&r).unwrap().pkey, 0xffff);
}

#[test]
fn mtu_comes_from_the_device_configuration() {
    let mut cfg = nic::DeviceConfig::new("ctl_mtu", "127.77.3.9".parse().unwrap());
    cfg.active_mtu = 4096;
    let d = nic::start_device(cfg).unwrap();
    let mut c = Client::connect(&d);
    let r = c
        .call(&Request::QueryPort(QueryPort {
            port_num: 1,
            ..Default::default()
        }))
        .unwrap();
    assert_eq!(
        QueryPortResp::read_from_bytes(&r).unwrap().active_mtu,
        abi::Mtu::Mtu4096.raw() as u8
    );
    let mut bad = nic::DeviceConfig::new("ctl_badmtu", "127.77.3.10".parse().unwrap());
    bad.active_mtu = 1500;
    assert!(nic::start_device(bad).is_err());
    // Same name, other address: refused.
    assert!(nic::start_device(nic::DeviceConfig::new(
        "ctl_mtu",
        "127.77.3.11".parse().unwrap()
    ))
    .is_err());
}

#[test]
fn get_context_rules() {
    let d = dev();
    let mut s = d.open_context().unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    // Nothing but GET_CONTEXT before a context exists.
    assert_eq!(
        call_on(&mut s, &Request::AllocPd(AllocPd::default())).unwrap_err(),
        Errno::EINVAL
    );
    // Wrong ABI version; doorbell page that is not mapped; bad slot counts.
    let mk = |abi_version, slots, addr, len| {
        Request::GetContext(
            GetContext::default(),
            UroceGetContext {
                abi_version,
                doorbell_slots: slots,
                doorbell_addr: addr,
                doorbell_len: len,
            },
        )
    };
    let page = abi::shm::SharedMem::new_zeroed(4096).unwrap();
    let a = page.addr();
    assert_eq!(
        call_on(&mut s, &mk(99, 64, a, 4096)).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        call_on(&mut s, &mk(UROCE_ABI_VERSION, 63, a, 4096)).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        call_on(&mut s, &mk(UROCE_ABI_VERSION, 64, a, 64)).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        call_on(&mut s, &mk(UROCE_ABI_VERSION, 64, 0x40, 4096)).unwrap_err(),
        Errno::EFAULT
    );
    assert_eq!(
        call_on(&mut s, &mk(UROCE_ABI_VERSION, 64, a + 8, 4096)).unwrap_err(),
        Errno::EINVAL
    );
    // Then a good one, and a second one is refused.
    let mut c = Client::from_stream(s);
    let again = mk(UROCE_ABI_VERSION, 64, a, 4096);
    assert_eq!(c.call(&again).unwrap_err(), Errno::EINVAL);
    c.close();
    drop(page);
}

fn valid_cq_request(mem: &abi::shm::SharedMem, layout: RingLayout) -> Request<'static> {
    Request::CreateCq(
        CreateCq {
            cqe: layout.slots(),
            comp_channel: -1,
            ..Default::default()
        },
        UroceCreateCq {
            ring: layout.desc(mem.addr()),
            ..Default::default()
        },
    )
}

#[test]
fn refusals_carry_reasons() {
    let d = dev();
    let mut c = Client::connect(&d);
    let mut other = Client::connect(&d);
    let pd = c.alloc_pd();
    let pd_other = other.alloc_pd();
    // A handle of another context, and one that names nothing.
    for h in [pd_other, pd + 1000] {
        let (e, why) = c.refusal(&Request::DeallocPd(DeallocPd { pd_handle: h }));
        assert_eq!(e, Errno::EINVAL);
        assert_eq!(
            why,
            Some((
                abi::Rule::BAD_HANDLE,
                format!("dealloc_pd: pd_handle {h} names no such object of this context")
            ))
        );
    }
    // Malformed bytes: the decoder's own words.
    let mut bytes = Vec::new();
    Request::AllocPd(AllocPd::default())
        .encode(&mut bytes)
        .unwrap();
    bytes.extend_from_slice(&[1, 0, 0, 0]);
    let words = (bytes.len() / 4) as u16;
    bytes[4..6].copy_from_slice(&words.to_ne_bytes());
    let r = c.raw(&bytes).unwrap();
    let reply = abi::Reply::parse(&r).unwrap();
    assert_eq!(reply.result, Err(Errno::EINVAL));
    let why = reply.reason.unwrap();
    assert_eq!(why.rule, abi::Rule::MALFORMED);
    assert!(why.text.starts_with("alloc_pd: "), "{}", why.text);
    // Before GET_CONTEXT.
    let mut fresh = d.open_context().unwrap();
    let mut bytes = Vec::new();
    Request::AllocPd(AllocPd::default())
        .encode(&mut bytes)
        .unwrap();
    let r = raw_on(&mut fresh, &bytes).unwrap();
    let reply = abi::Reply::parse(&r).unwrap();
    assert_eq!(reply.result, Err(Errno::EINVAL));
    assert_eq!(reply.reason.unwrap().rule, abi::Rule::NO_CONTEXT);
}

#[test]
fn hostile_commands_get_errnos_and_the_plane_survives() {
    let d = dev();
    let mut buf = vec![0u8; 8192];
    let mut c = Client::connect(&d);
    let mut other = Client::connect(&d);
    let pd = c.alloc_pd();
    let pd_other = other.alloc_pd();
    let ba = buf.as_mut_ptr() as u64;

    // Handles that do not exist, or belong to another context: EINVAL.
    for h in [pd + 1000, pd_other] {
        let e = c
            .call(&Request::DeallocPd(DeallocPd { pd_handle: h }))
            .unwrap_err();
        assert_eq!(e, Errno::EINVAL, "handle {h}");
        assert_eq!(
            c.reg_mr_raw(h, ba, 4096, ba, AccessFlags::LOCAL_WRITE.0)
                .err(),
            Some(Errno::EINVAL)
        );
    }
    let cq_other = other.create_cq(8, -1, 0).unwrap();
    let e = c
        .create_qp(pd, cq_other.handle, cq_other.handle, QpType::Rc, 4, None)
        .err();
    assert_eq!(e, Some(Errno::EINVAL));
    let e = c
        .call(&Request::PollCq(PollCq {
            response: 0,
            cq_handle: cq_other.handle,
            ne: 1,
        }))
        .unwrap_err();
    assert_eq!(e, Errno::EINVAL);

    // REG_MR: access rules, page offsets, unmapped memory.
    let lw = AccessFlags::LOCAL_WRITE.0;
    assert_eq!(
        c.reg_mr_raw(pd, ba, 4096, ba, AccessFlags::REMOTE_WRITE.0)
            .err(),
        Some(Errno::EINVAL),
        "remote write without local write"
    );
    assert_eq!(
        c.reg_mr_raw(pd, ba, 4096, ba, 1 << 15).err(),
        Some(Errno::EINVAL)
    );
    assert_eq!(
        c.reg_mr_raw(pd, ba, 4096, ba, AccessFlags::ZERO_BASED.0)
            .err(),
        Some(Errno::EOPNOTSUPP)
    );
    assert_eq!(
        c.reg_mr_raw(pd, ba, 4096, ba + 1, lw).err(),
        Some(Errno::EINVAL)
    );
    assert_eq!(c.reg_mr_raw(pd, ba, 0, ba, lw).err(), Some(Errno::EINVAL));
    assert_eq!(
        c.reg_mr_raw(pd, 0x1000, 4096, 0x1000, lw).err(),
        Some(Errno::EFAULT)
    );
    assert_eq!(
        c.reg_mr_raw(pd, u64::MAX - 10, 100, 0, lw).err(),
        Some(Errno::EINVAL)
    );
    // The optional range is ignored (perftest sets RELAXED_ORDERING).
    let mr = c
        .reg_mr_raw(pd, ba, 8192, ba, lw | AccessFlags::RELAXED_ORDERING.0)
        .unwrap();
    assert_eq!(mr.lkey, mr.rkey);
    assert_eq!(
        c.call(&Request::DeallocPd(DeallocPd { pd_handle: pd }))
            .unwrap_err(),
        Errno::EBUSY
    );

    // Rings: misaligned, unmapped, too small, wrong geometry.
    let layout = RingLayout::for_depth(8, CQE_BYTES).unwrap();
    let mem = ring_mem(layout);
    let bad_cq = |desc: RingDesc, cqe: u32| {
        Request::CreateCq(
            CreateCq {
                cqe,
                comp_channel: -1,
                ..Default::default()
            },
            UroceCreateCq {
                ring: desc,
                ..Default::default()
            },
        )
    };
    let mut desc = layout.desc(mem.addr());
    desc.addr += 8;
    assert_eq!(c.call(&bad_cq(desc, 8)).unwrap_err(), Errno::EINVAL);
    let mut desc = layout.desc(mem.addr());
    desc.addr = 0x40_0000_0000;
    assert_eq!(c.call(&bad_cq(desc, 8)).unwrap_err(), Errno::EFAULT);
    let desc = layout.desc(mem.addr());
    assert_eq!(
        c.call(&bad_cq(desc, 9)).unwrap_err(),
        Errno::EINVAL,
        "cqe > slots"
    );
    assert_eq!(c.call(&bad_cq(desc, 0)).unwrap_err(), Errno::EINVAL);
    let mut desc = layout.desc(mem.addr());
    desc.slots = 6;
    assert_eq!(c.call(&bad_cq(desc, 4)).unwrap_err(), Errno::EINVAL);
    let mut desc = layout.desc(mem.addr());
    desc.len = 64;
    assert_eq!(c.call(&bad_cq(desc, 4)).unwrap_err(), Errno::EINVAL);
    // A completion channel fd that is not ours.
    let mut req = valid_cq_request(&mem, layout);
    if let Request::CreateCq(ref mut cc, _) = req {
        cc.comp_channel = 0;
    }
    assert_eq!(c.call(&req).unwrap_err(), Errno::EBADF);
    let cq = c.create_cq(8, -1, 1).unwrap();

    // CREATE_QP: unsupported types, caps beyond the ring.
    let sq_l = RingLayout::for_depth(4, send_wqe_size(1, 0).unwrap()).unwrap();
    let rq_l = RingLayout::for_depth(4, recv_wqe_size(1).unwrap()).unwrap();
    let (sqm, rqm) = (ring_mem(sq_l), ring_mem(rq_l));
    let qp_req = |ty: u8, send_wr: u32, send_sge: u32| {
        Request::CreateQp(
            CreateQp {
                pd_handle: pd,
                send_cq_handle: cq.handle,
                recv_cq_handle: cq.handle,
                max_send_wr: send_wr,
                max_recv_wr: 4,
                max_send_sge: send_sge,
                max_recv_sge: 1,
                qp_type: ty,
                ..Default::default()
            },
            UroceCreateQp {
                sq: sq_l.desc(sqm.addr()),
                rq: rq_l.desc(rqm.addr()),
                ..UroceCreateQp::default()
            },
        )
    };
    assert_eq!(
        c.call(&qp_req(QpType::RawPacket.raw() as u8, 4, 1))
            .unwrap_err(),
        Errno::EOPNOTSUPP
    );
    assert_eq!(c.call(&qp_req(77, 4, 1)).unwrap_err(), Errno::EINVAL);
    assert_eq!(
        c.call(&qp_req(2, 5, 1)).unwrap_err(),
        Errno::EINVAL,
        "more WRs than slots"
    );
    assert_eq!(
        c.call(&qp_req(2, 4, 9)).unwrap_err(),
        Errno::EINVAL,
        "more SGEs than fit"
    );
    let r = c.call(&qp_req(2, 4, 1)).unwrap();
    let qp = read_prefix::<CreateQpResp>(&r, "qp").unwrap().0;
    assert!(qp.qpn >= 16);

    // Illegal transitions and missing attributes: EINVAL, state unchanged.
    let modify = |state: u32, mask: u32| ModifyQp {
        qp_handle: qp.qp_handle,
        attr_mask: mask,
        qp_state: state as u8,
        port_num: 1,
        ..Default::default()
    };
    let st = QpAttrMask::STATE.0;
    assert_eq!(
        c.modify(&modify(2, st)).unwrap_err(),
        Errno::EINVAL,
        "RESET->RTR"
    );
    assert_eq!(
        c.modify(&modify(6, st)).unwrap_err(),
        Errno::EINVAL,
        "RESET->ERR"
    );
    assert_eq!(
        c.modify(&modify(1, st)).unwrap_err(),
        Errno::EINVAL,
        "missing attrs"
    );
    assert_eq!(
        c.modify(&modify(9, st)).unwrap_err(),
        Errno::EINVAL,
        "no such state"
    );
    let init = QpAttrMask::STATE.0
        | QpAttrMask::PKEY_INDEX.0
        | QpAttrMask::PORT.0
        | QpAttrMask::ACCESS_FLAGS.0;
    let mut m = modify(1, init);
    m.pkey_index = 1;
    assert_eq!(c.modify(&m).unwrap_err(), Errno::EINVAL, "pkey index");
    let mut m = modify(1, init);
    m.port_num = 2;
    assert_eq!(c.modify(&m).unwrap_err(), Errno::EINVAL, "port");
    assert_eq!(c.query_qp(qp.qp_handle).qp_state, 0);
    c.modify(&modify(1, init)).unwrap();
    assert_eq!(c.query_qp(qp.qp_handle).qp_state, 1);
    assert_eq!(
        c.modify(&modify(3, st)).unwrap_err(),
        Errno::EINVAL,
        "INIT->RTS"
    );
    // An AV without a GRH, or with a GID of the other family.
    let rtr = QpAttrMask::STATE.0
        | QpAttrMask::AV.0
        | QpAttrMask::PATH_MTU.0
        | QpAttrMask::DEST_QPN.0
        | QpAttrMask::RQ_PSN.0
        | QpAttrMask::MAX_DEST_RD_ATOMIC.0
        | QpAttrMask::MIN_RNR_TIMER.0;
    let mut m = modify(2, rtr);
    m.path_mtu = 3;
    m.dest.dgid = gid(IP);
    assert_eq!(c.modify(&m).unwrap_err(), Errno::EINVAL, "no GRH");
    m.dest.is_global = 1;
    m.dest.dgid = gid("fe80::1");
    assert_eq!(
        c.modify(&m).unwrap_err(),
        Errno::EINVAL,
        "IPv6 GID on an IPv4 device"
    );
    m.dest.dgid = gid(IP);
    m.dest_qp_num = 1 << 24;
    assert_eq!(c.modify(&m).unwrap_err(), Errno::EINVAL, "QPN > 24 bits");
    m.dest_qp_num = qp.qpn;
    m.max_dest_rd_atomic = 200;
    assert_eq!(c.modify(&m).unwrap_err(), Errno::EINVAL, "rd atomic");
    m.max_dest_rd_atomic = 1;
    m.path_mtu = 6;
    assert_eq!(c.modify(&m).unwrap_err(), Errno::EINVAL, "mtu");

    // Posting in the wrong state: sends before RTS, receives in RESET.
    let swr = SendWr {
        wr_id: 1,
        opcode: abi::WrOpcode::Send.raw(),
        ..Default::default()
    };
    let post = Request::PostSend(
        PostSend {
            qp_handle: qp.qp_handle,
            wr_count: 1,
            wqe_size: SendWr::SIZE as u32,
            ..Default::default()
        },
        WrList {
            wrs: swr.as_bytes(),
            sges: &[],
            wqe_size: SendWr::SIZE,
        },
    );
    assert_eq!(c.call(&post).unwrap_err(), Errno::EINVAL);

    // Busy objects.
    assert_eq!(
        c.call(&Request::DestroyCq(DestroyCq {
            cq_handle: cq.handle,
            ..Default::default()
        }))
        .unwrap_err(),
        Errno::EBUSY
    );

    // Framing-level errors: truncated core struct (ENOSPC), response buffer too small
    // (ENOSPC), nonzero unknown driver data (EINVAL), extended and unknown commands
    // (EOPNOTSUPP), stray command bits (EINVAL).
    let mut v = Vec::new();
    encode_legacy(Command::ALLOC_PD, &[0u8; 4], &[], 4, &mut v).unwrap();
    assert_eq!(errno_of(&c.raw(&v).unwrap()), Some(Errno::ENOSPC));
    encode_legacy(Command::ALLOC_PD, &[0u8; 8], &[], 0, &mut v).unwrap();
    assert_eq!(errno_of(&c.raw(&v).unwrap()), Some(Errno::ENOSPC));
    encode_legacy(Command::ALLOC_PD, &[0u8; 8], &[1, 0, 0, 0], 4, &mut v).unwrap();
    assert_eq!(errno_of(&c.raw(&v).unwrap()), Some(Errno::EINVAL));
    encode_extended(Command::QUERY_DEVICE, &[0u8; 8], &[], 176, 0, &mut v).unwrap();
    assert_eq!(errno_of(&c.raw(&v).unwrap()), Some(Errno::EOPNOTSUPP));
    encode_legacy(Command(0x7e), &[0u8; 8], &[], 4, &mut v).unwrap();
    assert_eq!(errno_of(&c.raw(&v).unwrap()), Some(Errno::EOPNOTSUPP));
    encode_legacy(Command::ALLOC_PD, &[0u8; 8], &[], 4, &mut v).unwrap();
    v[2] = 0x40; // bit 22 of the command word
    assert_eq!(errno_of(&c.raw(&v).unwrap()), Some(Errno::EINVAL));

    // Still alive and consistent.
    let r = c
        .call(&Request::QueryDevice(QueryDevice::default()))
        .unwrap();
    assert_eq!(r.len(), QueryDeviceResp::SIZE);
    c.close();
    other.close();
}

#[test]
fn unframeable_input_closes_the_connection_only() {
    let d = dev();
    let mut c = Client::connect(&d);
    // in_words = 1: shorter than the header itself.
    let bytes = [3u8, 0, 0, 0, 1, 0, 1, 0];
    assert!(c.raw(&bytes).is_err(), "connection should be closed");
    // The device still serves other connections.
    let mut c2 = Client::connect(&d);
    c2.alloc_pd();
    c2.close();
}

#[test]
fn objects_of_a_closed_context_are_gone_and_handles_do_not_leak_across() {
    let d = device("ctl_iso", "127.77.3.2");
    let mut a = Client::connect(&d);
    let pd = a.alloc_pd();
    a.close();
    let mut b = Client::connect(&d);
    // The freed handle number may be reused, but not the old object.
    assert_eq!(
        b.call(&Request::DeallocPd(DeallocPd { pd_handle: pd }))
            .unwrap_err(),
        Errno::EINVAL
    );
    let s = d.stats();
    assert_eq!((s.contexts, s.pds), (1, 0));
    b.close();
    assert_eq!(d.stats(), nic::DeviceStats::default());
}

/// XRC commands (OPEN_XRCD, CLOSE_XRCD, CREATE_XSRQ, CREATE_QP of the XRC types) with hostile
/// or wrong arguments get the kernel's errnos: a descriptor naming no file EBADF, a file
/// without its domain and no O_CREAT EINVAL, O_EXCL on an existing one EINVAL, handles that
/// are not XRCDs (or another context's) EINVAL, a tag-matching SRQ EOPNOTSUPP, an unknown
/// SRQ type EINVAL, closing a domain in use EBUSY; an XRC target is made from an XRCD only.
#[test]
fn xrc_commands_refuse_hostile_input() {
    let d = dev();
    let mut c = Client::connect(&d);
    let mut other = Client::connect(&d);
    let open = |c: &mut Client, fd: u32, oflags: u32, dev: u64, ino: u64| {
        c.call(&Request::OpenXrcd(
            OpenXrcd {
                response: 0,
                fd,
                oflags,
            },
            UroceOpenXrcd { dev, ino },
        ))
        .map(|r| OpenXrcdResp::read_from_prefix(&r).unwrap().0.xrcd_handle)
    };
    const O_CREAT: u32 = 0o100;
    const O_EXCL: u32 = 0o200;
    let anon = open(&mut c, u32::MAX, 0, 0, 0).unwrap();
    assert_eq!(open(&mut c, 7, O_CREAT, 0, 0), Err(Errno::EBADF));
    assert_eq!(open(&mut c, u32::MAX, 0, 1, 2), Err(Errno::EINVAL));
    assert_eq!(open(&mut c, 7, 0, 5, 99), Err(Errno::EINVAL), "no O_CREAT");
    let f1 = open(&mut c, 7, O_CREAT, 5, 99).unwrap();
    assert_eq!(
        open(&mut c, 7, O_CREAT | O_EXCL, 5, 99),
        Err(Errno::EINVAL),
        "O_EXCL on an existing domain"
    );
    let f2 = open(&mut other, 9, 0, 5, 99).unwrap();
    assert_ne!(f1, anon);

    let pd = c.alloc_pd();
    let cq = c.create_cq(8, -1, 0).unwrap();
    let layout = RingLayout::for_depth(4, recv_wqe_size(1).unwrap()).unwrap();
    let mem = ring_mem(layout);
    let xsrq = |c: &mut Client, srq_type: u32, xrcd: u32, cq: u32| {
        c.call(&Request::CreateXsrq(
            CreateXsrq {
                srq_type,
                pd_handle: pd,
                max_wr: 4,
                max_sge: 1,
                xrcd_handle: xrcd,
                cq_handle: cq,
                ..Default::default()
            },
            UroceCreateSrq {
                ring: layout.desc(mem.addr()),
            },
        ))
    };
    assert_eq!(
        xsrq(&mut c, SRQT_TM, anon, cq.handle).unwrap_err(),
        Errno::EOPNOTSUPP
    );
    assert_eq!(xsrq(&mut c, 7, anon, cq.handle).unwrap_err(), Errno::EINVAL);
    assert_eq!(
        xsrq(&mut c, SRQT_XRC, f2, cq.handle).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        xsrq(&mut c, SRQT_XRC, anon + 100, cq.handle).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        xsrq(&mut c, SRQT_XRC, anon, cq.handle + 100).unwrap_err(),
        Errno::EINVAL
    );
    let r = xsrq(&mut c, SRQT_XRC, anon, cq.handle).unwrap();
    let srq = CreateSrqResp::read_from_prefix(&r).unwrap().0;
    assert_eq!(srq.srqn, srq.srq_handle);

    // Domains in use do not close; another context's handle is not ours to close.
    let close = |c: &mut Client, h: u32| c.call(&Request::CloseXrcd(CloseXrcd { xrcd_handle: h }));
    assert_eq!(close(&mut c, anon).unwrap_err(), Errno::EBUSY);
    assert_eq!(close(&mut c, f2).unwrap_err(), Errno::EINVAL);
    assert_eq!(
        c.call(&Request::DestroyCq(DestroyCq {
            cq_handle: cq.handle,
            ..Default::default()
        }))
        .unwrap_err(),
        Errno::EBUSY,
        "the XRC SRQ's CQ"
    );

    // An XRC target's pd_handle names an XRCD of the context.
    let tgt = |c: &mut Client, h: u32, is_srq: bool| {
        c.create_qp(
            h,
            0,
            0,
            QpType::XrcRecv,
            1,
            is_srq.then_some(srq.srq_handle),
        )
    };
    let e = c
        .call(&Request::CreateQp(
            CreateQp {
                pd_handle: pd + 1000,
                qp_type: QpType::XrcRecv.raw() as u8,
                max_send_wr: 1,
                ..Default::default()
            },
            UroceCreateQp::default(),
        ))
        .unwrap_err();
    assert_eq!(e, Errno::EINVAL);
    assert_eq!(
        tgt(&mut c, anon, true).err(),
        Some(Errno::EINVAL),
        "an SRQ on an XRC QP"
    );
    let q = tgt(&mut c, anon, false);
    assert_eq!(
        q.as_ref().err(),
        Some(&Errno::EINVAL),
        "an RQ ring on an XRC QP"
    );
    // With no receive ring, as the library sends it.
    let sq_layout = RingLayout::for_depth(1, send_wqe_size(1, 0).unwrap()).unwrap();
    let sq_mem = ring_mem(sq_layout);
    let mk = |c: &mut Client, h: u32| {
        c.call(&Request::CreateQp(
            CreateQp {
                pd_handle: h,
                qp_type: QpType::XrcRecv.raw() as u8,
                max_send_wr: 1,
                max_send_sge: 1,
                ..Default::default()
            },
            UroceCreateQp {
                sq: sq_layout.desc(sq_mem.addr()),
                rq: RingDesc::default(),
                ..UroceCreateQp::default()
            },
        ))
    };
    assert_eq!(
        mk(&mut c, f1 + 100).unwrap_err(),
        Errno::EINVAL,
        "no such XRCD"
    );
    assert_eq!(
        mk(&mut c, f2).unwrap_err(),
        Errno::EINVAL,
        "another context's XRCD"
    );
    let qr = mk(&mut c, f1).unwrap();
    let qh = CreateQpResp::read_from_prefix(&qr).unwrap().0.qp_handle;
    assert_eq!(
        close(&mut c, f1).unwrap_err(),
        Errno::EBUSY,
        "its target QP"
    );
    c.call(&Request::DestroyQp(DestroyQp {
        qp_handle: qh,
        ..Default::default()
    }))
    .unwrap();
    close(&mut c, f1).unwrap();
    close(&mut other, f2).unwrap();
    c.call(&Request::DestroySrq(DestroySrq {
        srq_handle: srq.srq_handle,
        ..Default::default()
    }))
    .unwrap();
    close(&mut c, anon).unwrap();
    assert_eq!(
        close(&mut c, anon).unwrap_err(),
        Errno::EINVAL,
        "closed twice"
    );
}

/// MODIFY_QP's selective-repeat flag (docs/wire.md §5.6): taken with an RC QP's move from
/// INIT to RTR (the device then runs it), refused anywhere else and for other QP types;
/// unknown flag bits and a nonzero reserved byte are refused.
#[test]
fn selective_repeat_flag_goes_with_init_to_rtr_only() {
    let d = dev();
    let mut c = Client::connect(&d);
    let pd = c.alloc_pd();
    // The CQ's ring stays alive with `cq_ring` for as long as the device uses it.
    let cq_ring = c.create_cq(16, -1, 0).unwrap();
    let cq = cq_ring.handle;
    let qp = |c: &mut Client, ty| c.create_qp(pd, cq, cq, ty, 4, None).unwrap();
    let a = qp(&mut c, QpType::Rc);
    let b = qp(&mut c, QpType::Rc);
    let u = qp(&mut c, QpType::Ud);
    let step = |h: u32, ty: QpType, dest: u32, i: usize, flags: u8, reserved: u8| {
        let (state, mask) = init_rtr_rts(ty)[i];
        let mut m = ModifyQp {
            qp_handle: h,
            attr_mask: mask,
            qp_state: state as u8,
            qp_access_flags: AccessFlags::LOCAL_WRITE.0,
            port_num: 1,
            path_mtu: abi::Mtu::Mtu1024.raw() as u8,
            dest_qp_num: dest,
            max_dest_rd_atomic: 1,
            qkey: 0x1111,
            flags,
            reserved,
            ..ModifyQp::default()
        };
        m.dest.dgid = gid(IP);
        m.dest.is_global = 1;
        m.dest.hop_limit = 64;
        m.dest.port_num = 1;
        m
    };
    let sr = MODIFY_QP_SELECTIVE_REPEAT;
    let inval = |c: &mut Client, m: &ModifyQp, what: &str| {
        assert_eq!(c.modify(m).unwrap_err(), Errno::EINVAL, "{what}");
    };
    inval(
        &mut c,
        &step(a.handle, QpType::Rc, b.qpn, 0, sr, 0),
        "RESET->INIT",
    );
    c.modify(&step(a.handle, QpType::Rc, b.qpn, 0, 0, 0))
        .unwrap();
    inval(
        &mut c,
        &step(a.handle, QpType::Rc, b.qpn, 1, 0x80, 0),
        "unknown flag",
    );
    inval(
        &mut c,
        &step(a.handle, QpType::Rc, b.qpn, 1, 0, 1),
        "reserved",
    );
    assert_eq!(d.qp_selective_repeat(a.qpn), Some(false));
    c.modify(&step(a.handle, QpType::Rc, b.qpn, 1, sr, 0))
        .unwrap();
    assert_eq!(d.qp_selective_repeat(a.qpn), Some(true), "on at RTR");
    inval(
        &mut c,
        &step(a.handle, QpType::Rc, b.qpn, 2, sr, 0),
        "RTR->RTS",
    );
    c.modify(&step(a.handle, QpType::Rc, b.qpn, 2, 0, 0))
        .unwrap();
    assert_eq!(d.qp_selective_repeat(a.qpn), Some(true), "stays on at RTS");

    // Without the flag a QP keeps go-back-N.
    for i in 0..3 {
        c.modify(&step(b.handle, QpType::Rc, a.qpn, i, 0, 0))
            .unwrap();
    }
    assert_eq!(d.qp_selective_repeat(b.qpn), Some(false));

    // UD: refused, and the QP is still in INIT (the refused modify changed nothing).
    c.modify(&step(u.handle, QpType::Ud, 0, 0, 0, 0)).unwrap();
    inval(&mut c, &step(u.handle, QpType::Ud, 0, 1, sr, 0), "UD");
    assert_eq!(c.query_qp(u.handle).qp_state, 1);
    assert_eq!(d.qp_selective_repeat(u.qpn), Some(false));
}
