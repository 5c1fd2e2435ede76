//! The send queue's storage: a ring of WQE slots reused in place.
//!
//! A [`SendWqe`] is a few hundred bytes (its WR carries up to [`crate::MAX_INLINE_DATA`]
//! inline bytes). A `VecDeque` would move each one in when it is posted and out when it
//! retires, and a fresh slot would have its inline array written whole before the WQE's
//! own bytes. Here a slot stays where it is: posting resets its small fields and keeps the
//! storage of its payload for the next WR to overwrite, and retiring copies out only what
//! the completion needs ([`Retired`]). A device that takes millions of small WQEs a second
//! from a ring spends its time on the WQEs, not on moving them (docs/architecture.md §3).

use wire::{Psn, Qpn};

use crate::qp::SendWqe;
use crate::wr::{SendWr, WrOpcode};

/// What a send WQE leaves behind when it leaves the queue: what its completion reports
/// and where its PSNs ended.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retired {
    pub(crate) wr_id: u64,
    pub(crate) opcode: WrOpcode,
    pub(crate) imm_data: u32,
    pub(crate) len: u32,
    pub(crate) signaled: bool,
    pub(crate) last_psn: Psn,
    /// A UD WR's destination QP.
    pub(crate) ud_qpn: Option<Qpn>,
}

impl Retired {
    fn of(w: &SendWqe) -> Retired {
        Retired {
            wr_id: w.wr.wr_id,
            opcode: w.wr.opcode,
            imm_data: w.wr.imm_data,
            len: w.len,
            signaled: w.signaled,
            last_psn: w.last_psn,
            ud_qpn: w.wr.ud.map(|u| u.remote_qpn),
        }
    }
}

/// Posted send WQEs, oldest first, in slots that are reused in place.
#[derive(Debug)]
pub(crate) struct SendRing {
    slots: Vec<SendWqe>,
    head: usize,
    len: usize,
}

impl SendRing {
    /// A ring with room for `n` WQEs before it first grows.
    pub(crate) fn with_capacity(n: usize) -> SendRing {
        SendRing {
            slots: Vec::with_capacity(n),
            head: 0,
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The slot of the `i`-th WQE from the front.
    fn at(&self, i: usize) -> usize {
        let s = self.head + i;
        if s >= self.slots.len() {
            s - self.slots.len()
        } else {
            s
        }
    }

    pub(crate) fn get(&self, i: usize) -> Option<&SendWqe> {
        if i >= self.len {
            return None;
        }
        self.slots.get(self.at(i))
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut SendWqe> {
        if i >= self.len {
            return None;
        }
        let s = self.at(i);
        self.slots.get_mut(s)
    }

    pub(crate) fn front(&self) -> Option<&SendWqe> {
        self.get(0)
    }

    pub(crate) fn back(&self) -> Option<&SendWqe> {
        self.len.checked_sub(1).and_then(|i| self.get(i))
    }

    pub(crate) fn back_mut(&mut self) -> Option<&mut SendWqe> {
        self.len.checked_sub(1).and_then(|i| self.get_mut(i))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &SendWqe> {
        (0..self.len).filter_map(|i| self.get(i))
    }

    /// Append a WQE and return it: `SendWr::new(0, Send)`'s fields, not yet signaled or
    /// started, its payload empty (an earlier WR's inline storage may remain, empty, for
    /// the new one to fill).
    pub(crate) fn push_back(&mut self) -> &mut SendWqe {
        if self.len == self.slots.len() {
            // Full (or never used): make the ring contiguous from slot 0 and add a slot.
            self.slots.rotate_left(self.head);
            self.head = 0;
            self.slots.push(SendWqe::new());
        } else {
            let s = self.at(self.len);
            if let Some(w) = self.slots.get_mut(s) {
                w.reset();
            }
        }
        self.len += 1;
        let s = self.at(self.len - 1);
        &mut self.slots[s]
    }

    pub(crate) fn pop_front(&mut self) -> Option<Retired> {
        let r = Retired::of(self.front()?);
        self.head = self.at(1);
        self.len -= 1;
        if self.len == 0 {
            self.head = 0;
        }
        Some(r)
    }

    pub(crate) fn pop_back(&mut self) -> Option<Retired> {
        let r = Retired::of(self.back()?);
        self.len -= 1;
        Some(r)
    }
}

impl SendWqe {
    fn new() -> SendWqe {
        SendWqe {
            wr: SendWr::new(0, WrOpcode::Send),
            len: 0,
            signaled: false,
            started: false,
            first_psn: Psn::new(0),
            last_psn: Psn::new(0),
            ssn: wire::Msn::new(0),
        }
    }

    /// What [`SendWqe::new`] makes, keeping the WR's payload storage (emptied).
    fn reset(&mut self) {
        let SendWqe {
            wr,
            len,
            signaled,
            started,
            first_psn,
            last_psn,
            ssn,
        } = self;
        wr.reset();
        *len = 0;
        *signaled = false;
        *started = false;
        *first_psn = Psn::new(0);
        *last_psn = Psn::new(0);
        *ssn = wire::Msn::new(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::LocalData;

    fn post(r: &mut SendRing, id: u64) {
        let w = r.push_back();
        assert_eq!(w.wr.wr_id, 0);
        assert!(w.wr.local.is_empty());
        w.wr.wr_id = id;
        w.wr.local = LocalData::InlineData(crate::wr::InlineData::from_slice(&[7; 9]).unwrap());
        w.len = 9;
    }

    #[test]
    fn fifo_across_wraps_and_growth() {
        let mut r = SendRing::with_capacity(3);
        let mut next = 0u64;
        let mut oldest = 0u64;
        // Fill to various depths, wrap many times, and grow past the first capacity.
        for round in 0..50usize {
            let depth = 1 + round % 6;
            while r.len() < depth {
                post(&mut r, next);
                next += 1;
            }
            let ids: Vec<u64> = r.iter().map(|w| w.wr.wr_id).collect();
            let want: Vec<u64> = (oldest..next).collect();
            assert_eq!(ids, want);
            assert_eq!(r.back().map(|w| w.wr.wr_id), next.checked_sub(1));
            let pops = 1 + round % 4;
            for _ in 0..pops.min(r.len()) {
                let done = r.pop_front().unwrap();
                assert_eq!(done.wr_id, oldest);
                assert_eq!(done.len, 9);
                oldest += 1;
            }
        }
        while let Some(d) = r.pop_front() {
            assert_eq!(d.wr_id, oldest);
            oldest += 1;
        }
        assert_eq!(oldest, next);
        assert_eq!(r.len(), 0);
        assert!(r.front().is_none() && r.get(0).is_none());
    }

    #[test]
    fn a_reused_slot_keeps_no_earlier_field() {
        let mut r = SendRing::with_capacity(1);
        {
            let w = r.push_back();
            w.wr.wr_id = 5;
            w.wr.imm_data = 9;
            w.wr.remote_addr = 0x1000;
            w.wr.ud = Some(crate::wr::UdDest {
                ah: 1,
                remote_qpn: Qpn::new(3),
                remote_qkey: wire::Qkey(4),
            });
            w.wr.local = LocalData::InlineData(crate::wr::InlineData::from_slice(b"abc").unwrap());
            w.signaled = true;
            w.started = true;
            w.last_psn = Psn::new(77);
        }
        let gone = r.pop_back().unwrap();
        assert_eq!(
            (gone.wr_id, gone.imm_data, gone.last_psn),
            (5, 9, Psn::new(77))
        );
        assert_eq!(gone.ud_qpn, Some(Qpn::new(3)));
        let w = r.push_back();
        let fresh = SendWr::new(0, WrOpcode::Send);
        assert_eq!(w.wr.local.len(), 0);
        assert_eq!(w.wr.local.inline_bytes(), Some(&[][..]));
        w.wr.local = LocalData::default();
        assert_eq!(w.wr, fresh);
        assert!(!w.signaled && !w.started);
        assert_eq!(w.last_psn, Psn::new(0));
    }
}
