//! `--verify`: deterministic payload patterns, so that the receiving side of every
//! operation can check the bytes end to end.
//!
//! * WRITE and SEND payloads: [`fill_op`] — a function of (QP index, operation number,
//!   message size), so a stale, misplaced or corrupted message is caught. In `write_lat`
//!   the last byte is the operation counter the peer polls on (perftest's protocol).
//! * READ targets: [`fill_static`] — a function of (QP index, byte offset); a READ of
//!   `len` bytes at offset `o` must return exactly those bytes.
//! * Atomics: counters start at zero; FETCH_AND_ADD returns how many earlier adds hit the
//!   same 8 bytes, and the target finally holds the number of adds per slot.

/// SplitMix64's output for state `z`: a cheap, well-mixed function of its input.
fn mix(mut z: u64) -> u64 {
    nic::splitmix64(&mut z)
}

/// The 8-byte word `w` of operation `op` of QP `qp` with `size`-byte messages.
fn op_word(qp: usize, op: u64, size: usize, w: usize) -> [u8; 8] {
    let key = mix(((qp as u64) << 48) ^ ((size as u64) << 24) ^ op);
    mix(key ^ w as u64).to_le_bytes()
}

/// Where `buf` differs from operation `op`'s payload (no `counter_last`), for an error
/// message: the first differing byte, how many 8-byte words differ, and, for the first
/// differing word, which nearby operation's payload it holds if any (a stale or misplaced
/// packet) — or that it holds none (corruption).
pub fn describe_mismatch(buf: &[u8], qp: usize, op: u64) -> String {
    let size = buf.len();
    let differs = |w: usize, chunk: &[u8], o: u64| {
        chunk != op_word(qp, o, size, w).get(..chunk.len()).unwrap_or(&[])
    };
    let bad: Vec<usize> = buf
        .chunks(8)
        .enumerate()
        .filter(|(w, c)| differs(*w, c, op))
        .map(|(w, _)| w)
        .collect();
    let Some(&first) = bad.first() else {
        return "no difference".to_string();
    };
    let chunk = buf.chunks(8).nth(first).unwrap_or(&[]);
    let lo = op.saturating_sub(4096);
    let holder = (lo..op + 4096).find(|&o| o != op && !differs(first, chunk, o));
    let last = bad.last().copied().unwrap_or(first);
    let mut want = [0u8; 8];
    want[..chunk.len()].copy_from_slice(&op_word(qp, op, size, first)[..chunk.len()]);
    let mut got = [0u8; 8];
    got[..chunk.len()].copy_from_slice(chunk);
    let xor = u64::from_le_bytes(want) ^ u64::from_le_bytes(got);
    format!(
        "first difference at byte {} ({} of {} words differ, bytes {}..{}; xor {xor:#018x}); that word is {}",
        first * 8,
        bad.len(),
        size.div_ceil(8),
        first * 8,
        (last + 1) * 8,
        holder.map_or("no nearby operation's".to_string(), |o| format!(
            "operation {o}'s"
        ))
    )
}

/// Fills `buf` with the payload of operation `op` (see the module docs); with
/// `counter_last`, the last byte is `op` truncated to a byte (`write_lat`'s poll byte).
pub fn fill_op(buf: &mut [u8], qp: usize, op: u64, counter_last: bool) {
    let size = buf.len();
    for (w, chunk) in buf.chunks_mut(8).enumerate() {
        let word = op_word(qp, op, size, w);
        chunk.copy_from_slice(word.get(..chunk.len()).unwrap_or(&[]));
    }
    if counter_last {
        if let Some(last) = buf.last_mut() {
            *last = op as u8;
        }
    }
}

/// Whether `buf` holds the payload of operation `op` ([`fill_op`]).
pub fn check_op(buf: &[u8], qp: usize, op: u64, counter_last: bool) -> bool {
    let size = buf.len();
    let body = if counter_last {
        size.saturating_sub(1)
    } else {
        size
    };
    for (w, chunk) in buf.chunks(8).enumerate() {
        let word = op_word(qp, op, size, w);
        let n = chunk.len().min(body.saturating_sub(w * 8));
        if chunk.get(..n) != word.get(..n) {
            return false;
        }
    }
    !counter_last || buf.last() == Some(&(op as u8))
}

/// The byte at `offset` of QP `qp`'s READ target.
fn static_byte(qp: usize, offset: usize) -> u8 {
    mix(((qp as u64) << 56) ^ (offset / 8) as u64).to_le_bytes()[offset % 8]
}

/// Fills a READ target (the bytes of QP `qp`'s region from offset 0).
pub fn fill_static(buf: &mut [u8], qp: usize) {
    for (w, chunk) in buf.chunks_mut(8).enumerate() {
        let word = mix(((qp as u64) << 56) ^ w as u64).to_le_bytes();
        chunk.copy_from_slice(word.get(..chunk.len()).unwrap_or(&[]));
    }
}

/// Whether `buf` holds the READ target bytes of QP `qp` starting at `offset`.
pub fn check_static(buf: &[u8], qp: usize, offset: usize) -> bool {
    buf.iter()
        .enumerate()
        .all(|(i, &b)| b == static_byte(qp, offset + i))
}

#[cfg(test)]
/// Where operation `k` lands in a region cycled the perftest way (`increase_rem_addr` /
/// `increase_loc_addr`): slot `k % (cycle_buffer / inc)` of `inc` bytes while the message
/// fits half the cycle buffer, otherwise always offset 0.
pub fn cycled_offset(k: u64, size: u64, inc: u64, cycle_buffer: u64) -> u64 {
    let slots = cycle_slots(size, inc, cycle_buffer);
    (k % slots) * inc
}

/// How many slots the perftest cycling uses (1 when it does not cycle).
pub fn cycle_slots(size: u64, inc: u64, cycle_buffer: u64) -> u64 {
    if inc == 0 || size > cycle_buffer / 2 {
        1
    } else {
        (cycle_buffer / inc).max(1)
    }
}

/// perftest's `INC(size, cache_line)`: the message size rounded up to the cache line,
/// at least one cache line.
pub fn inc(size: u64, cache_line: u64) -> u64 {
    let cl = cache_line.max(1);
    if size > cl {
        size.div_ceil(cl) * cl
    } else {
        cl
    }
}

/// For a target written by `ops` operations cycled over `slots` slots: the last
/// operation that wrote each slot (`None` for slots no operation reached).
pub fn last_writer(ops: u64, slots: u64, slot: u64) -> Option<u64> {
    if slot >= slots || slot >= ops {
        return None;
    }
    let rounds = (ops - 1 - slot) / slots;
    Some(slot + rounds * slots)
}

/// How many of `ops` operations cycled over `slots` slots hit `slot`.
pub fn hits(ops: u64, slots: u64, slot: u64) -> u64 {
    if slot >= slots || slot >= ops {
        return 0;
    }
    (ops - 1 - slot) / slots + 1
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_mismatch_names_where_and_whose_bytes() {
        let mut buf = vec![0u8; 4096];
        fill_op(&mut buf, 0, 7, false);
        assert_eq!(describe_mismatch(&buf, 0, 7), "no difference");
        let mut other = vec![0u8; 4096];
        fill_op(&mut other, 0, 5, false);
        buf[1024..2048].copy_from_slice(&other[1024..2048]);
        let d = describe_mismatch(&buf, 0, 7);
        assert!(
            d.starts_with("first difference at byte 1024 (128 of 512 words"),
            "{d}"
        );
        assert!(d.ends_with("operation 5's"), "{d}");
        buf[8] ^= 1;
        let d = describe_mismatch(&buf, 0, 7);
        assert!(
            d.starts_with("first difference at byte 8 (129 of 512"),
            "{d}"
        );
        assert!(d.ends_with("no nearby operation's"), "{d}");
    }

    use super::*;

    #[test]
    fn op_patterns_round_trip_and_differ() {
        for size in [1usize, 2, 7, 8, 9, 100, 4096] {
            let mut a = vec![0u8; size];
            fill_op(&mut a, 0, 5, false);
            assert!(check_op(&a, 0, 5, false));
            if size >= 4 {
                assert!(!check_op(&a, 0, 6, false), "op 5 vs 6, size {size}");
                assert!(!check_op(&a, 1, 5, false), "qp 0 vs 1, size {size}");
            }
            fill_op(&mut a, 2, 300, true);
            assert_eq!(a.last(), Some(&(300u64 as u8)));
            assert!(check_op(&a, 2, 300, true));
            if let Some(b) = a.first_mut() {
                *b ^= 1;
            }
            assert!(!check_op(&a, 2, 300, true) || size == 1);
        }
    }

    #[test]
    fn static_pattern_by_offset() {
        let mut t = vec![0u8; 1000];
        fill_static(&mut t, 3);
        assert!(check_static(&t[100..300], 3, 100));
        assert!(!check_static(&t[100..300], 3, 108));
        assert!(!check_static(&t[100..300], 2, 100));
    }

    #[test]
    fn perftest_cycling() {
        assert_eq!(inc(2, 64), 64);
        assert_eq!(inc(65, 64), 128);
        assert_eq!(cycle_slots(64, 64, 4096), 64);
        assert_eq!(cycle_slots(3000, 3008, 4096), 1);
        assert_eq!(cycled_offset(65, 64, 64, 4096), 64);
        assert_eq!(cycled_offset(7, 65536, 65536, 4096), 0);
        // 5 ops over 3 slots: slot 0 ← ops 0, 3; slot 1 ← 1, 4; slot 2 ← 2.
        assert_eq!(last_writer(5, 3, 0), Some(3));
        assert_eq!(last_writer(5, 3, 1), Some(4));
        assert_eq!(last_writer(5, 3, 2), Some(2));
        assert_eq!(last_writer(2, 3, 2), None);
        assert_eq!((hits(5, 3, 0), hits(5, 3, 2), hits(2, 3, 2)), (2, 1, 0));
    }
}
