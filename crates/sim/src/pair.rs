//! Two QPs wired back to back with a hand-controlled packet pipe — for conformance tests that
//! need to drop, duplicate, hold back, rewrite or forge individual packets (quinn `Pair` style).
//!
//! Packets travel as transport bytes (BTH .. pad); the ICRC path is exercised by [`crate::net`].
//! Time only moves when the test says so ([`Pair::advance`], [`Pair::run`]).

use std::collections::VecDeque;

use transport::wire::{Psn, Qpn, RocePacketRepr};
use transport::{
    bring_up, AccessFlags, Completion, Grh, Mtu, Qp, QpAttr, QpConfig, RecvQueue, RxMeta, Service,
    Srq, Time,
};

use crate::{MrAccess, SimMemory};

/// What a filter does with one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Deliver it.
    Deliver,
    /// Lose it.
    Drop,
    /// Deliver it twice.
    Duplicate,
}

/// A packet that went over the pipe.
#[derive(Clone, Debug)]
pub struct Logged {
    /// Sending side.
    pub from: usize,
    /// Transport bytes.
    pub bytes: Vec<u8>,
    /// What happened to it.
    pub fate: Fate,
}

impl Logged {
    /// The parsed packet.
    pub fn repr(&self) -> RocePacketRepr<'_> {
        RocePacketRepr::parse(&self.bytes).expect("logged packets were emitted by a QP")
    }
}

/// Base virtual address of each side's scratch region.
pub const BUF_VA: u64 = 0x10_0000;
/// Size of each side's scratch region.
pub const BUF_LEN: usize = 1 << 20;

/// Two QPs, their memory, and the pipe between them.
#[derive(Debug)]
pub struct Pair {
    /// Current time.
    pub now: Time,
    /// Side 0 and side 1.
    pub qps: [Qp; 2],
    /// Each side's memory; region 0 is a 1 MiB scratch buffer at [`BUF_VA`] with every access.
    pub mem: [SimMemory; 2],
    /// Packets in flight toward each side.
    pub pipe: [VecDeque<Vec<u8>>; 2],
    /// Every packet sent, in order.
    pub log: Vec<Logged>,
    /// Completions collected from each side.
    pub completions: [Vec<Completion>; 2],
    /// A shared receive queue per side, for QPs created with `uses_srq`.
    pub srq: [Option<Srq>; 2],
    buf: Vec<u8>,
}

/// QPNs of the two sides.
pub const QPN: [u32; 2] = [0x11, 0x12];

impl Pair {
    /// Two connected QPs of type `ty`, brought up to RTS with `attr` (path MTU `mtu`), the
    /// requester PSN of side `i` being `psn[i]`; `tweak` may adjust each side's config.
    pub fn new(
        ty: Service,
        mtu: Mtu,
        attr: &QpAttr,
        psn: [u32; 2],
        mut tweak: impl FnMut(usize, &mut QpConfig),
    ) -> Pair {
        let mk = |side: usize, tweak: &mut dyn FnMut(usize, &mut QpConfig)| {
            let mut cfg = QpConfig::new(Qpn::new(QPN[side]), ty);
            tweak(side, &mut cfg);
            let mut qp = Qp::new(cfg);
            let r = bring_up(
                &mut qp,
                Qpn::new(QPN[1 - side]),
                Psn::new(psn[1 - side]),
                Psn::new(psn[side]),
                mtu,
                attr,
            );
            assert_eq!(r, Ok(()), "bring-up of side {side}");
            qp
        };
        let qps = [mk(0, &mut tweak), mk(1, &mut tweak)];
        let mem = [0, 1].map(|_| {
            let mut m = SimMemory::new();
            m.register(
                BUF_VA,
                BUF_LEN,
                MrAccess::LOCAL_WRITE
                    | MrAccess::REMOTE_WRITE
                    | MrAccess::REMOTE_READ
                    | MrAccess::REMOTE_ATOMIC,
            );
            m
        });
        Pair {
            now: Time::ZERO,
            qps,
            mem,
            pipe: [VecDeque::new(), VecDeque::new()],
            log: Vec::new(),
            completions: [Vec::new(), Vec::new()],
            srq: [None, None],
            buf: vec![0; 8192],
        }
    }

    /// An RC pair at MTU 1024 with every remote access granted, timeout 10 (4.2 ms),
    /// retry_cnt 7 (infinite, rxe), rnr_retry 7, both PSNs 0.
    pub fn rc() -> Pair {
        Pair::new(
            Service::Rc,
            Mtu::Mtu1024,
            &Pair::rc_attr(),
            [0, 0],
            |_, _| {},
        )
    }

    /// The attributes [`Pair::rc`] uses.
    pub fn rc_attr() -> QpAttr {
        QpAttr {
            qp_access_flags: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            ..QpAttr::default()
        }
    }

    /// Local key of side `side`'s scratch region.
    pub fn lkey(&self, side: usize) -> transport::wire::Lkey {
        self.mem[side].region(0).lkey
    }

    /// Remote key of side `side`'s scratch region.
    pub fn rkey(&self, side: usize) -> transport::wire::Rkey {
        self.mem[side].region(0).rkey
    }

    /// Bytes of side `side`'s scratch region at `va`.
    pub fn bytes(&self, side: usize, va: u64, len: usize) -> Vec<u8> {
        self.mem[side].read(0, va - BUF_VA, len)
    }

    /// Write bytes into side `side`'s scratch region at `va`.
    pub fn fill(&mut self, side: usize, va: u64, data: &[u8]) {
        self.mem[side].write(0, va - BUF_VA, data);
    }

    /// Let side `side` transmit everything it can now; returns how many packets.
    pub fn transmit(&mut self, side: usize) -> usize {
        let mut n = 0;
        while let Some(t) = self.qps[side].poll_transmit(
            self.now,
            &mut self.mem[side].for_qp(Qpn::new(QPN[side])),
            &mut self.buf,
        ) {
            self.pipe[1 - side].push_back(self.buf[..t.len].to_vec());
            n += 1;
            assert!(n < 100_000, "runaway transmitter");
        }
        n
    }

    /// Hand raw transport bytes to side `to`.
    pub fn deliver_bytes(&mut self, to: usize, bytes: &[u8]) {
        if let Ok(pkt) = RocePacketRepr::parse(bytes) {
            let meta = RxMeta {
                grh: Grh::V4([0x45; 20]),
                ce: false,
            };
            let srq = self.srq[to].as_mut().map(|s| s as &mut dyn RecvQueue);
            let mut mem = self.mem[to].for_qp(Qpn::new(QPN[to]));
            self.qps[to].handle_packet(self.now, &pkt, &meta, &mut mem, srq);
        }
    }

    /// Emit `pkt` and hand it to side `to` (for forged packets).
    pub fn inject(&mut self, to: usize, pkt: &RocePacketRepr<'_>) {
        let mut b = vec![0u8; pkt.buffer_len()];
        let n = pkt
            .emit(&mut b)
            .expect("forged packet must be consistent with its opcode");
        b.truncate(n);
        self.deliver_bytes(to, &b);
    }

    /// Transmit on both sides and deliver everything in flight, repeatedly, until the pipe is
    /// empty. `filter(to, packet)` decides each packet's fate. Time does not move.
    pub fn exchange(&mut self, filter: &mut dyn FnMut(usize, &RocePacketRepr<'_>) -> Fate) {
        for _ in 0..100_000 {
            self.transmit(0);
            self.transmit(1);
            if self.pipe[0].is_empty() && self.pipe[1].is_empty() {
                return;
            }
            for to in 0..2 {
                while let Some(b) = self.pipe[to].pop_front() {
                    let fate = match RocePacketRepr::parse(&b) {
                        Ok(p) => filter(to, &p),
                        Err(_) => Fate::Drop,
                    };
                    match fate {
                        Fate::Deliver => self.deliver_bytes(to, &b),
                        Fate::Duplicate => {
                            self.deliver_bytes(to, &b);
                            self.deliver_bytes(to, &b);
                        }
                        Fate::Drop => {}
                    }
                    self.log.push(Logged {
                        from: 1 - to,
                        bytes: b,
                        fate,
                    });
                }
            }
        }
        panic!("exchange did not settle");
    }

    /// Move time forward by `ns` and fire due timers.
    pub fn advance(&mut self, ns: u64) {
        self.now = self.now.add_nanos(ns);
        for q in &mut self.qps {
            q.handle_timeout(self.now);
        }
    }

    /// Exchange, then jump to the next timer and fire it, until nothing is pending or
    /// `max_steps` timer jumps happened. Returns the number of timer jumps.
    pub fn run(
        &mut self,
        max_steps: usize,
        filter: &mut dyn FnMut(usize, &RocePacketRepr<'_>) -> Fate,
    ) -> usize {
        for step in 0..max_steps {
            self.exchange(filter);
            let next = [self.qps[0].poll_timeout(), self.qps[1].poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let Some(t) = next else {
                return step;
            };
            self.now = self.now.max(t);
            for q in &mut self.qps {
                q.handle_timeout(self.now);
            }
        }
        max_steps
    }

    /// [`Pair::run`] with every packet delivered.
    pub fn run_clean(&mut self) -> usize {
        self.run(10_000, &mut |_, _| Fate::Deliver)
    }

    /// Drain both sides' completion queues into [`Pair::completions`] and return side
    /// `side`'s collected completions.
    pub fn collect(&mut self, side: usize) -> &[Completion] {
        for s in 0..2 {
            while let Some(c) = self.qps[s].poll_completion() {
                self.completions[s].push(c);
            }
        }
        &self.completions[side]
    }

    /// Packets side `from` sent whose opcode is `op`.
    pub fn sent(&self, from: usize, op: transport::wire::Opcode) -> usize {
        self.log
            .iter()
            .filter(|l| l.from == from && l.repr().bth.opcode == op)
            .count()
    }
}
