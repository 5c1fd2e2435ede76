//! A stable fuzz-style test: random and mutated command bytes thrown at a live control
//! plane that has real objects (connected QPs doing real work). Every message either gets
//! exactly one well-formed reply (an errno or a response) or, if its header cannot frame
//! a message, the connection is closed; nothing panics or hangs, and the device keeps
//! serving. Seeded and reproducible: set `NIC_FUZZ_SEED` to replay a failure.
//!
//! Memory safety of the process under test is part of the contract: seed commands only
//! name memory that is registered with the device (or unmapped addresses), so whatever the
//! mutations do, the device can only touch memory this test owns or reject the command.

mod common;

use abi::cmd::{Command, Reply, CMD_FLAG_EXTENDED};
use abi::fastpath::CQE_BYTES;
use abi::ring::RingLayout;
use abi::uverbs::*;
use abi::{AccessFlags, QpAttrMask, QpType, Request, SendFlags, WrOpcode};
use common::*;
use zerocopy::IntoBytes;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const IP: &str = "127.77.4.1";
const UNMAPPED: u64 = 0x0000_1000_0000_0000;

fn enc(r: &Request<'_>) -> Vec<u8> {
    let mut v = Vec::new();
    r.encode(&mut v).unwrap();
    v
}

/// Valid commands naming this context's real objects.
fn seeds(c: &mut Client, arena: &mut [u8]) -> Vec<Vec<u8>> {
    let all = AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0;
    let pd = c.alloc_pd();
    let mr = c.reg_mr(pd, arena, all).unwrap();
    let base = arena.as_ptr() as u64;
    let cq = c.create_cq(64, -1, 1).unwrap();
    let (a, b) = c.connected(pd, (cq.handle, cq.handle), QpType::Rc, 16, IP);
    let srq = c.create_srq(pd, 8);
    let ah = c.create_ah(pd, IP).unwrap();
    let cq_l = RingLayout::for_depth(8, CQE_BYTES).unwrap();
    let bad_ring = cq_l.desc(UNMAPPED);

    let sg = sge(base + 64, 256, mr.lkey);
    let mut wr = SendWr {
        wr_id: 1,
        num_sge: 1,
        opcode: WrOpcode::RdmaWrite.raw(),
        send_flags: SendFlags::SIGNALED.0,
        ..Default::default()
    };
    wr.set_rdma(RdmaWr {
        remote_addr: base + 4096,
        rkey: mr.rkey,
        reserved: 0,
    });
    let mut send = wr;
    send.opcode = WrOpcode::Send.raw();
    send.send_flags |= SendFlags::INLINE.0;
    let rwr = RecvWr {
        wr_id: 2,
        num_sge: 1,
        reserved: 0,
    };
    let rsg = sge(base + 8192, 512, mr.lkey);
    let post = |qp: u32, w: &SendWr, s: &Sge| {
        enc(&Request::PostSend(
            PostSend {
                qp_handle: qp,
                wr_count: 1,
                sge_count: 1,
                wqe_size: SendWr::SIZE as u32,
                ..Default::default()
            },
            WrList {
                wrs: w.as_bytes(),
                sges: s.as_bytes(),
                wqe_size: SendWr::SIZE,
            },
        ))
    };
    let mut m = ModifyQp {
        qp_handle: a.handle,
        attr_mask: QpAttrMask::STATE.0 | QpAttrMask::MIN_RNR_TIMER.0,
        qp_state: 3,
        min_rnr_timer: 2,
        ..Default::default()
    };
    let rts_rts = enc(&Request::ModifyQp(m));
    m.attr_mask = QpAttrMask::STATE.0
        | QpAttrMask::AV.0
        | QpAttrMask::PATH_MTU.0
        | QpAttrMask::DEST_QPN.0
        | QpAttrMask::RQ_PSN.0
        | QpAttrMask::MAX_DEST_RD_ATOMIC.0
        | QpAttrMask::MIN_RNR_TIMER.0;
    m.qp_state = 2;
    m.path_mtu = 3;
    m.dest_qp_num = b.qpn;
    m.dest.dgid = gid(IP);
    m.dest.is_global = 1;
    let rtr = enc(&Request::ModifyQp(m));
    vec![
        enc(&Request::QueryDevice(QueryDevice::default())),
        enc(&Request::QueryPort(QueryPort {
            port_num: 1,
            ..Default::default()
        })),
        enc(&Request::QueryGid(QueryGid {
            port_num: 1,
            ..Default::default()
        })),
        enc(&Request::QueryPkey(QueryPkey {
            port_num: 1,
            ..Default::default()
        })),
        enc(&Request::AllocPd(AllocPd::default())),
        enc(&Request::DeallocPd(DeallocPd { pd_handle: pd })),
        enc(&Request::RegMr(RegMr {
            start: UNMAPPED,
            length: 4096,
            hca_va: UNMAPPED,
            pd_handle: pd,
            access_flags: all,
            ..Default::default()
        })),
        enc(&Request::DeregMr(DeregMr {
            mr_handle: mr.handle,
        })),
        enc(&Request::CreateCq(
            CreateCq {
                cqe: 8,
                comp_channel: -1,
                ..Default::default()
            },
            UroceCreateCq {
                ring: bad_ring,
                ..Default::default()
            },
        )),
        enc(&Request::ResizeCq(
            ResizeCq {
                cq_handle: cq.handle,
                cqe: 8,
                ..Default::default()
            },
            UroceResizeCq { ring: bad_ring },
        )),
        enc(&Request::PollCq(PollCq {
            cq_handle: cq.handle,
            ne: 4,
            ..Default::default()
        })),
        enc(&Request::ReqNotifyCq(ReqNotifyCq {
            cq_handle: cq.handle,
            solicited_only: 1,
        })),
        enc(&Request::DestroyCq(DestroyCq {
            cq_handle: cq.handle,
            ..Default::default()
        })),
        enc(&Request::CreateQp(
            CreateQp {
                pd_handle: pd,
                send_cq_handle: cq.handle,
                recv_cq_handle: cq.handle,
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                qp_type: 2,
                ..Default::default()
            },
            UroceCreateQp {
                sq: bad_ring,
                rq: bad_ring,
                ..UroceCreateQp::default()
            },
        )),
        enc(&Request::QueryQp(QueryQp {
            qp_handle: a.handle,
            attr_mask: !0,
            ..Default::default()
        })),
        rts_rts,
        rtr,
        enc(&Request::DestroyQp(DestroyQp {
            qp_handle: b.handle,
            ..Default::default()
        })),
        post(a.handle, &wr, &sg),
        post(b.handle, &send, &sg),
        enc(&Request::PostRecv(
            PostRecv {
                qp_handle: b.handle,
                wr_count: 1,
                sge_count: 1,
                wqe_size: RecvWr::SIZE as u32,
                ..Default::default()
            },
            WrList {
                wrs: rwr.as_bytes(),
                sges: rsg.as_bytes(),
                wqe_size: RecvWr::SIZE,
            },
        )),
        enc(&Request::PostSrqRecv(
            PostSrqRecv {
                srq_handle: srq.handle,
                wr_count: 1,
                sge_count: 1,
                wqe_size: RecvWr::SIZE as u32,
                ..Default::default()
            },
            WrList {
                wrs: rwr.as_bytes(),
                sges: rsg.as_bytes(),
                wqe_size: RecvWr::SIZE,
            },
        )),
        enc(&Request::CreateSrq(
            CreateSrq {
                pd_handle: pd,
                max_wr: 4,
                max_sge: 1,
                ..Default::default()
            },
            UroceCreateSrq { ring: bad_ring },
        )),
        enc(&Request::ModifySrq(ModifySrq {
            srq_handle: srq.handle,
            attr_mask: abi::SrqAttrMask::LIMIT.0,
            max_wr: 0,
            srq_limit: 2,
        })),
        enc(&Request::QuerySrq(QuerySrq {
            srq_handle: srq.handle,
            ..Default::default()
        })),
        enc(&Request::DestroySrq(DestroySrq {
            srq_handle: srq.handle,
            ..Default::default()
        })),
        enc(&Request::DestroyAh(DestroyAh { ah_handle: ah })),
        enc(&Request::CreateCompChannel(CreateCompChannel::default())),
    ]
}

/// Make the header frame exactly this message (as most mutants should be), unless
/// `keep_header`; pad or trim so the control plane never waits for bytes we don't send.
fn frame(mut m: Vec<u8>, keep_header: bool) -> Vec<u8> {
    if m.len() < 8 {
        m.resize(8, 0);
    }
    let word = u32::from_ne_bytes(m[0..4].try_into().unwrap());
    if word & CMD_FLAG_EXTENDED != 0 {
        if m.len() < 24 {
            m.resize(24, 0);
        }
        if !keep_header {
            m.resize(24 + (m.len() - 24).div_ceil(8) * 8, 0);
            let words = ((m.len() - 24) / 8).min(0xffff) as u16;
            m[4..6].copy_from_slice(&words.to_ne_bytes());
            m[16..18].copy_from_slice(&0u16.to_ne_bytes());
            m.truncate(24 + usize::from(words) * 8);
        }
        let in_w = u16::from_ne_bytes([m[4], m[5]]) as usize;
        let prov = u16::from_ne_bytes([m[16], m[17]]) as usize;
        m.resize(24 + (in_w + prov) * 8, 0);
    } else {
        if !keep_header {
            m.resize(m.len().div_ceil(4) * 4, 0);
            let words = (m.len() / 4).min(0xffff) as u16;
            m[4..6].copy_from_slice(&words.to_ne_bytes());
            m.truncate(usize::from(words) * 4);
        }
        let in_w = u16::from_ne_bytes([m[4], m[5]]) as usize;
        if in_w >= 2 {
            m.resize(in_w * 4, 0);
        }
    }
    m
}

fn unframeable(m: &[u8]) -> bool {
    let word = u32::from_ne_bytes(m[0..4].try_into().unwrap());
    word & CMD_FLAG_EXTENDED == 0 && u16::from_ne_bytes([m[4], m[5]]) < 2
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut m = seed.to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(6) {
            0 | 1 => {
                let i = rng.below(m.len() as u64) as usize;
                m[i] ^= 1 << rng.below(8);
            }
            2 => {
                let i = rng.below(m.len() as u64) as usize;
                m[i] = [0, 0xff, 0x80, 1, 0x7f][rng.below(5) as usize];
            }
            3 => {
                let i = rng.below(m.len() as u64) as usize;
                m[i] = rng.next() as u8;
            }
            4 => {
                let n = 8 + rng.below(m.len() as u64) as usize;
                m.truncate(n);
            }
            _ => {
                let extra = rng.below(64) as usize;
                for _ in 0..extra {
                    m.push(rng.next() as u8);
                }
            }
        }
    }
    m
}

#[test]
fn random_and_mutated_commands_never_break_the_control_plane() {
    let seed: u64 = std::env::var("NIC_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234_abcd);
    println!("NIC_FUZZ_SEED={seed}");
    let mut rng = Rng(seed | 1);
    let dev = device("fuzz0", IP);
    let mut arena = vec![0u8; 64 * 1024];
    let (mut replies, mut errors, mut closes) = (0u32, 0u32, 0u32);
    for _round in 0..24 {
        let mut c = Client::connect(&dev);
        let seeds = seeds(&mut c, &mut arena);
        for _ in 0..300 {
            let msg = match rng.below(10) {
                0 => {
                    let n = rng.below(120) as usize;
                    let mut m: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                    if m.len() >= 4 && rng.below(2) == 0 {
                        // Mostly plausible command numbers.
                        let cmd = rng.below(0x90) as u32;
                        m[0..4].copy_from_slice(&cmd.to_ne_bytes());
                    }
                    frame(m, rng.below(8) == 0)
                }
                _ => {
                    let s = &seeds[rng.below(seeds.len() as u64) as usize];
                    frame(mutate(&mut rng, s), rng.below(10) == 0)
                }
            };
            match c.raw(&msg) {
                Ok(reply) => {
                    let r = Reply::parse(&reply).expect("well-formed reply");
                    let word = u32::from_ne_bytes(msg[0..4].try_into().unwrap());
                    assert_eq!(r.command, word, "reply echoes the command word");
                    replies += 1;
                    match r.result {
                        Err(_) => errors += 1,
                        Ok(resp) => {
                            if word == Command::CREATE_COMP_CHANNEL.word() && resp.len() >= 4 {
                                // We own the new fd: close it.
                                let fd = i32::from_ne_bytes(resp[0..4].try_into().unwrap());
                                // SAFETY: the reply transferred this descriptor to us.
                                drop(unsafe {
                                    <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(
                                        fd,
                                    )
                                });
                            }
                        }
                    }
                }
                Err(e) => {
                    assert!(
                        unframeable(&msg),
                        "connection dropped on a framable message {msg:02x?}: {e}"
                    );
                    closes += 1;
                    break;
                }
            }
        }
        c.close();
    }
    println!("replies {replies}, errors {errors}, closes {closes}");
    assert!(replies > 1000);
    assert!(errors > 100 && errors < replies);
    // Everything was torn down with the connections, and the device still serves.
    let s = dev.stats();
    assert_eq!(s, nic::DeviceStats::default(), "{s:?}");
    let mut c = Client::connect(&dev);
    let r = c
        .call(&Request::QueryDevice(QueryDevice::default()))
        .unwrap();
    assert_eq!(r.len(), QueryDeviceResp::SIZE);
    c.close();
    drop(arena);
}
