//! What this machine can copy with the footprint of the 1,000-QP figure of `uroce bench
//! ratios` (docs/perftest.md §9): 64 KiB chunks from one 64 MiB buffer into another, as
//! perftest's `-q 1000 -s 65536` gives each QP its own 64 KiB on each side — on one core
//! and on two, with ordinary stores (what `memcpy` does at this size) and with
//! non-temporal ones (the destination bypasses the caches, as a NIC's DMA writes to
//! memory), beside the same copy within one 64 KiB pair of buffers (one QP's, which stays
//! in the caches).
//!
//! ```text
//! cargo run --release -p nic --example copy_ceiling [-- SECS]
//! ```
//!
//! Each line is the bytes copied per second, all threads together. The 1,000-QP goal asks
//! the device to move 0.8 × the one-QP figure; a device has to make that copy and do its
//! other work besides, so the lines here bound what any design on this machine can reach.

use std::time::{Duration, Instant};

const CHUNK: usize = 64 << 10;

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let dur = Duration::from_secs_f64(secs);
    println!("copies of 64 KiB chunks, MB/s, {secs} s each");
    for (name, span, threads, nt) in [
        ("within one 64 KiB pair (one QP), 1 core", CHUNK, 1, false),
        (
            "64 MiB -> 64 MiB, 1 core, ordinary stores",
            64 << 20,
            1,
            false,
        ),
        (
            "64 MiB -> 64 MiB, 1 core, non-temporal stores",
            64 << 20,
            1,
            true,
        ),
        (
            "64 MiB -> 64 MiB, 2 cores, ordinary stores",
            64 << 20,
            2,
            false,
        ),
        (
            "64 MiB -> 64 MiB, 2 cores, non-temporal stores",
            64 << 20,
            2,
            true,
        ),
    ] {
        let total: f64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|_| s.spawn(move || copy_rate(span, nt, dur)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        println!("{name:<50} {total:>9.0}");
    }
}

/// MB/s one thread copies `CHUNK`s from a buffer of `span` bytes into another for `dur`.
fn copy_rate(span: usize, nt: bool, dur: Duration) -> f64 {
    let src = vec![1u8; span + 64];
    let mut dst = vec![2u8; span + 64];
    // 64-byte aligned starts, so that the non-temporal stores are aligned.
    let (so, d_off) = (src.as_ptr().align_offset(64), dst.as_ptr().align_offset(64));
    let (mut off, mut bytes) = (0usize, 0u64);
    let start = Instant::now();
    while start.elapsed() < dur {
        for _ in 0..64 {
            let s = &src[so + off..so + off + CHUNK];
            let d = &mut dst[d_off + off..d_off + off + CHUNK];
            if nt {
                stream_copy(d, s);
            } else {
                d.copy_from_slice(s);
            }
            off = (off + CHUNK) % span;
            bytes += CHUNK as u64;
        }
    }
    std::hint::black_box(&dst);
    bytes as f64 / start.elapsed().as_secs_f64() / 1e6
}

/// Copy with non-temporal stores (SSE2, 16 bytes at a time); `d` is 16-byte aligned and as
/// long as `s`, a multiple of 64 bytes.
fn stream_copy(d: &mut [u8], s: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let n = d.len().min(s.len()) / 16;
        let (dp, sp) = (
            d.as_mut_ptr().cast::<__m128i>(),
            s.as_ptr().cast::<__m128i>(),
        );
        // SAFETY: `n` 16-byte blocks lie within both slices; `d` is 16-byte aligned (the
        // caller's 64-byte aligned start plus multiples of 64 KiB); the fence orders the
        // streaming stores before what follows.
        unsafe {
            for i in 0..n {
                _mm_stream_si128(dp.add(i), _mm_loadu_si128(sp.add(i)));
            }
            _mm_sfence();
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    d.copy_from_slice(s);
}
