//! Which IPv4 Identification values to believe when the ICRC is checked.
//!
//! The RoCEv2 ICRC (IBTA Vol 1 Annex A17.3.3) covers the IPv4 Identification and the DF
//! bit, which a UDP socket never shows its reader. The receive path first checks the ICRC
//! for the Identification the sender most likely used (0 with DF: what Linux gives an
//! unconnected UDP socket with path MTU discovery, `ip_select_ident_segs` in
//! include/net/ip.h; or a GSO send's numbering on loopback). When that fails it *solves*
//! for the 17 hidden bits (`wire::icrc::verify_udp_v4_unseen_ident`): senders such as
//! Linux rxe take their Identification from the kernel's per-destination counter
//! (`__ip_select_ident` in net/ipv4/route.c), which the receiver cannot know.
//!
//! Solving weakens the check: a corrupted packet whose CRC syndrome happens to lie in the
//! span of the 17 hidden bits' contributions "verifies" with some Identification — one
//! corrupted packet in 2^15. On a link that corrupts 1 % of packets that is one undetected
//! corruption every few million packets, which a bulk transfer reaches in minutes. So a
//! solved Identification is believed only when it is plausible for the sender:
//!
//! * a sender never heard from before: believed (the first packet of an rxe peer);
//! * a sender whose last verified packet was also solved (a counting sender such as
//!   rxe): believed when the Identification is at most [`WINDOW`] plus the milliseconds
//!   since that packet ahead of the latest one, or at most [`BEHIND`] behind it, and DF is
//!   unchanged — the kernel's counter moves by one per packet and, after an idle spell,
//!   jumps by a random amount below the idle time in jiffies (`ip_idents_reserve` in
//!   net/ipv4/route.c; a jiffy is at least a millisecond), and packets numbered in
//!   different contexts may leave slightly out of order;
//! * a counting sender whose counter passes the expected Identification (rxe's counter
//!   reaches 0 once every 65,536 packets, and 0 with DF is what the fast path checks
//!   first): that packet verifies on the fast path and the sender stays a counting one,
//!   so its next packet, solved to 1, is believed;
//! * a loopback sender: an Identification below [`GSO_IDS`] with DF (a GSO send whose
//!   coalesced receive did not line up with the guess);
//! * otherwise — in particular a sender whose packets verify with the expected
//!   Identification (another uroce) — only when a second packet corroborates it: the
//!   previous unverifiable packet's solved Identification is 1 to [`WINDOW`] behind (not
//!   equal: a bit flip at a place whose CRC syndrome the hidden bits happen to span solves
//!   to the same Identification in every packet of that length: a bulk transfer of
//!   1024-byte packets on a link that flips a bit in 1 % of them hits the one such place
//!   of that layout about once per 840,000 packets, wire::icrc's tests).
//!
//! A packet refused here is dropped and counted as an ICRC error, as a corrupted packet
//! is; an honest counting sender whose counter jumped loses one packet to a retransmission.
//! For a uroce peer a corrupted packet now needs two independent 2^-15 coincidences in a
//! row; for a counting peer one 2^-15 coincidence and an Identification inside a window of
//! about 2^11 of 2^17 values (about 2^-21 per corrupted packet).

use std::collections::HashMap;
use std::net::Ipv4Addr;

/// How far (forward, modulo 2^16) a counting sender's Identification may move between two
/// of its packets we see back to back; an idle spell adds one per millisecond.
pub(crate) const WINDOW: u16 = 2048;
/// The most an idle spell widens [`WINDOW`] to: half the counter, so "ahead" and "behind"
/// stay apart.
const WINDOW_MAX: u16 = 1 << 15;
/// How far a counting sender's packets may arrive out of Identification order: the kernel
/// numbers a packet when it builds its header, and rxe's requester, responder and CM
/// build theirs in different contexts, so one may leave a few packets after a later
/// numbered one (seen against rxe: 1 and 2 behind).
pub(crate) const BEHIND: u16 = 256;
/// Identifications a GSO send numbers on loopback (`sys::GsoIds::Counting`): at most this
/// many datagrams per send.
pub(crate) const GSO_IDS: u16 = 64;
/// Senders remembered at most; past this the table starts over (a flood of spoofed source
/// addresses cannot grow it).
const MAX_PEERS: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ident {
    id: u16,
    df: bool,
}

impl Ident {
    /// `next` is at most `ahead` in front of `self` (equal: a duplicate) or at most
    /// [`BEHIND`] behind it, with the same DF.
    fn leads_to(self, next: Ident, ahead: u16) -> bool {
        self.df == next.df
            && (next.id.wrapping_sub(self.id) <= ahead || self.id.wrapping_sub(next.id) <= BEHIND)
    }

    /// `next` is a later packet of a counting sender that numbered `self`: strictly ahead,
    /// at most [`WINDOW`], same DF. Not equal: a corrupted packet solves to an
    /// Identification that depends only on where its bit flipped relative to the one it
    /// carried, so flips at the same place in same-length packets from a sender that
    /// always carries the same Identification solve to the same value again and again.
    fn corroborated_by(self, next: Ident) -> bool {
        self.df == next.df && (1..=WINDOW).contains(&next.id.wrapping_sub(self.id))
    }

    /// The later of two Identifications `leads_to` relates.
    fn later(self, other: Ident) -> Ident {
        if other.id.wrapping_sub(self.id) <= WINDOW_MAX {
            other
        } else {
            self
        }
    }
}

/// How far ahead a counting sender's Identification may be `idle_ns` after its last packet
/// we believed: [`WINDOW`] plus one per millisecond (a jiffy is 1 to 10 ms), at most
/// [`WINDOW_MAX`].
fn ahead_after(idle_ns: u64) -> u16 {
    let ms = (idle_ns / 1_000_000).min(u64::from(WINDOW_MAX));
    WINDOW.saturating_add(ms as u16).min(WINDOW_MAX)
}

#[derive(Clone, Copy, Debug)]
struct Peer {
    /// The last verified packet's Identification if it had to be solved for (or continued
    /// a counting sender's numbering), and when (nanoseconds, the caller's clock) a packet
    /// of the sender was last believed; `None` if it carried the expected one.
    last_solved: Option<(Ident, u64)>,
    /// The last packet whose solved Identification was not believed.
    doubted: Option<Ident>,
}

/// Per-sender memory of IPv4 Identifications (one per device).
#[derive(Debug, Default)]
pub(crate) struct IdentGuard {
    peers: HashMap<Ipv4Addr, Peer>,
    /// A sender the table already records as sending the expected Identification: the
    /// per-packet cost of [`IdentGuard::expected`] for a steady uroce peer is one compare.
    hot: Option<Ipv4Addr>,
}

impl IdentGuard {
    fn remember(&mut self, src: Ipv4Addr, p: Peer) {
        if self.peers.len() >= MAX_PEERS && !self.peers.contains_key(&src) {
            self.peers.clear();
            self.hot = None;
        }
        self.peers.insert(src, p);
    }

    /// A packet from `src` verified with the Identification it was expected to carry, `id`
    /// with DF, at `now_ns`.
    pub(crate) fn expected(&mut self, src: Ipv4Addr, id: u16, now_ns: u64) {
        if self.hot == Some(src) {
            return;
        }
        let now = Ident { id, df: true };
        match self.peers.get_mut(&src) {
            // A counting sender whose counter just passed the expected Identification:
            // still counting (its next packet solves to the one after). Strictly ahead, so
            // a sender that keeps carrying the expected one drops back to `None` next time.
            Some(p) if p.last_solved.is_some_and(|(l, _)| l.corroborated_by(now)) => {
                p.last_solved = Some((now, now_ns));
                return;
            }
            Some(p) => p.last_solved = None,
            None => self.remember(
                src,
                Peer {
                    last_solved: None,
                    doubted: None,
                },
            ),
        }
        self.hot = Some(src);
    }

    /// A packet from `src` at `now_ns` verifies only with Identification `id` and DF `df`:
    /// believe it?
    pub(crate) fn believe_solved(&mut self, src: Ipv4Addr, id: u16, df: bool, now_ns: u64) -> bool {
        let now = Ident { id, df };
        let believed = Peer {
            last_solved: Some((now, now_ns)),
            doubted: None,
        };
        let Some(p) = self.peers.get_mut(&src) else {
            self.remember(src, believed);
            return true;
        };
        let counting = p
            .last_solved
            .filter(|&(l, at)| l.leads_to(now, ahead_after(now_ns.saturating_sub(at))))
            .map(|(l, _)| l);
        let plausible = counting.is_some()
            || (src.is_loopback() && df && id < GSO_IDS)
            || p.doubted.is_some_and(|d| d.corroborated_by(now));
        if plausible {
            // A packet numbered a little earlier does not move the reference back.
            *p = Peer {
                last_solved: Some((counting.map_or(now, |l| l.later(now)), now_ns)),
                ..believed
            };
            if self.hot == Some(src) {
                self.hot = None;
            }
        } else {
            p.doubted = Some(now);
        }
        plausible
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEER: Ipv4Addr = Ipv4Addr::new(10, 1, 2, 3);

    #[test]
    fn a_new_sender_is_believed_then_held_to_its_counter() {
        let mut g = IdentGuard::default();
        assert!(g.believe_solved(PEER, 40_000, true, 0));
        assert!(g.believe_solved(PEER, 40_001, true, 0));
        assert!(g.believe_solved(PEER, 40_001, true, 0), "a duplicate");
        assert!(
            g.believe_solved(PEER, 40_001 + WINDOW, true, 0),
            "an idle jump"
        );
        // A little behind (numbered earlier, sent later): believed, and the reference
        // stays at the latest.
        let at = 40_001 + WINDOW;
        assert!(g.believe_solved(PEER, at - 2, true, 0));
        assert!(g.believe_solved(PEER, at - BEHIND, true, 0));
        assert!(
            g.believe_solved(PEER, at + WINDOW, true, 0),
            "measured from the latest"
        );
        // Far ahead, far behind, or with DF flipped: not believed.
        let at = at + WINDOW;
        assert!(!g.believe_solved(PEER, at.wrapping_add(WINDOW + 1), true, 0));
        assert!(!g.believe_solved(PEER, at.wrapping_sub(BEHIND + 1), true, 0));
        assert!(!g.believe_solved(PEER, at.wrapping_add(1), false, 0));
        // The counter wraps.
        let mut g = IdentGuard::default();
        assert!(g.believe_solved(PEER, 65_530, true, 0));
        assert!(g.believe_solved(PEER, 3, true, 0));
    }

    #[test]
    fn a_sender_that_sends_the_expected_id_needs_corroboration() {
        let mut g = IdentGuard::default();
        g.expected(PEER, 0, 0);
        // A corrupted packet that happens to solve: refused, whatever the ID.
        assert!(!g.believe_solved(PEER, 1, true, 0));
        g.expected(PEER, 0, 0);
        assert!(!g.believe_solved(PEER, 9_000, true, 0));
        // ... unless the next unverifiable packet agrees with it (the sender really
        // switched to counting IDs).
        assert!(g.believe_solved(PEER, 9_001, true, 0));
        assert!(g.believe_solved(PEER, 9_002, true, 0));
        // Back to the expected ID: solved ones need corroboration again.
        g.expected(PEER, 0, 0);
        assert!(!g.believe_solved(PEER, 9_003, true, 0));
    }

    #[test]
    fn the_same_solved_id_again_is_no_corroboration() {
        let mut g = IdentGuard::default();
        g.expected(PEER, 0, 0);
        for _ in 0..3 {
            assert!(!g.believe_solved(PEER, 0x1234, true, 0));
            g.expected(PEER, 0, 0);
        }
        // A solution behind the doubted one is none either.
        assert!(!g.believe_solved(PEER, 0x1233, true, 0));
    }

    #[test]
    fn a_jumped_counter_costs_one_packet() {
        let mut g = IdentGuard::default();
        assert!(g.believe_solved(PEER, 100, true, 0));
        assert!(!g.believe_solved(PEER, 30_000, true, 0));
        assert!(g.believe_solved(PEER, 30_001, true, 0));
        assert!(g.believe_solved(PEER, 30_002, true, 0));
    }

    #[test]
    fn an_idle_spell_widens_the_window_by_a_step_per_millisecond() {
        const MS: u64 = 1_000_000;
        let mut g = IdentGuard::default();
        assert!(g.believe_solved(PEER, 1_000, true, 0));
        // Three seconds idle: the kernel may have moved the counter by up to 3,000.
        assert!(g.believe_solved(PEER, 1_000 + WINDOW + 2_999, true, 3_000 * MS));
        // Back to back again: the plain window, measured from the new packet.
        let at = 1_000 + WINDOW + 2_999;
        assert!(!g.believe_solved(PEER, at + WINDOW + 1, true, 3_000 * MS));
        // Past the widening: refused (then corroborated by the next one).
        let mut g = IdentGuard::default();
        assert!(g.believe_solved(PEER, 1_000, true, 0));
        assert!(!g.believe_solved(PEER, 1_000 + WINDOW + 11, true, 10 * MS));
        assert!(g.believe_solved(PEER, 1_000 + WINDOW + 12, true, 10 * MS));
        // A very long idle spell widens it to half the counter, no further.
        assert_eq!(ahead_after(u64::MAX), WINDOW_MAX);
        assert_eq!(ahead_after(0), WINDOW);
    }

    #[test]
    fn a_counting_sender_passing_the_expected_id_keeps_counting() {
        // rxe's counter runs through 0; ID 0 with DF verifies on the fast path.
        let mut g = IdentGuard::default();
        assert!(g.believe_solved(PEER, 65_534, true, 0));
        assert!(g.believe_solved(PEER, 65_535, true, 0));
        g.expected(PEER, 0, 0);
        assert!(g.believe_solved(PEER, 1, true, 0), "the packet after 0");
        assert!(g.believe_solved(PEER, 2, true, 0));
        // A sender behind the expected ID that then carries it (a GSO peer on loopback
        // after a solved packet) is an expected-ID sender again.
        let lo = Ipv4Addr::new(127, 0, 0, 9);
        let mut g = IdentGuard::default();
        assert!(g.believe_solved(lo, 5, true, 0));
        g.expected(lo, 0, 0);
        assert!(!g.believe_solved(lo, 500, true, 0));
        // ... and one that keeps carrying it drops back after one packet.
        let mut g = IdentGuard::default();
        assert!(g.believe_solved(PEER, 65_535, true, 0));
        g.expected(PEER, 0, 0);
        g.expected(PEER, 0, 0);
        assert!(!g.believe_solved(PEER, 1, true, 0));
    }

    #[test]
    fn loopback_gso_numbering_is_believed() {
        let lo = Ipv4Addr::new(127, 0, 0, 7);
        let mut g = IdentGuard::default();
        g.expected(lo, 0, 0);
        assert!(g.believe_solved(lo, 5, true, 0));
        assert!(g.believe_solved(lo, 0, true, 0));
        g.expected(lo, 0, 0);
        assert!(g.believe_solved(lo, GSO_IDS - 1, true, 0));
        g.expected(lo, 0, 0);
        assert!(
            !g.believe_solved(lo, GSO_IDS, true, 0),
            "past a GSO send's numbering"
        );
        assert!(!g.believe_solved(lo, 7, false, 0), "GSO sends carry DF");
    }

    #[test]
    fn the_table_is_bounded() {
        let mut g = IdentGuard::default();
        for i in 0..(MAX_PEERS as u32 * 3) {
            g.expected(Ipv4Addr::from(0x0a00_0000 + i), 0, 0);
        }
        assert!(g.peers.len() <= MAX_PEERS);
    }
}
