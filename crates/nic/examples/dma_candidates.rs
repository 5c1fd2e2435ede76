//! How a daemon could reach the memory an unmodified program registers (docs/daemon.md §2):
//! the candidates measured side by side in one run, as ratios to an in-process `memcpy`.
//!
//! ```text
//! cargo run --release -p nic --example dma_candidates [-- CHUNK_KIB [TOTAL_MIB [SPAN_KIB]]]
//! ```
//!
//! SPAN_KIB (default 16384) is the size of the buffer the chunks are taken from in turn: the
//! default streams from memory; a span of one chunk keeps the source in cache.
//!
//! A child process owns a buffer (as an application owns its registered memory); this
//! process copies it out and back in 64 KiB chunks (the size of a perftest message) with:
//! * `memcpy` within one process (the per-process engine: what uroce does),
//! * `process_vm_readv` / `process_vm_writev` (a daemon with ptrace rights over the client),
//! * `pread` / `pwrite` on `/proc/<pid>/mem` (a descriptor the client could hand over),
//! * `memcpy` through a `memfd` both processes map (registered pages moved onto a memfd),
//! * a pipeline through a ring both processes map: this process copies each chunk into a
//!   slot, another process copies it out at the same time (two copies, what packets
//!   between two processes on one daemon device cost at the least: docs/daemon.md §2.1).

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Slots of the two-process ring (each one chunk).
const RING_SLOTS: usize = 8;
/// Bytes before the ring's slots: its head and tail indices, a 64-byte line each.
const RING_HEADER: usize = 128;

fn gbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let chunk = args
        .get(1)
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(64)
        * 1024;
    let total = args
        .get(2)
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(256)
        << 20;
    // The child's buffer, copied over and over up to `total` (whole chunks).
    let span = (args
        .get(3)
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(16 << 10)
        * 1024)
        .max(chunk)
        / chunk
        * chunk;
    let mut local = vec![0u8; chunk];

    // The child's buffer: private anonymous memory (heap-like) and a shared memfd.
    let mut private = vec![0u8; span];
    for (i, b) in private.iter_mut().enumerate() {
        *b = i as u8;
    }
    // SAFETY: plain system calls; the memfd mapping is `span` bytes, unmapped at exit.
    let (memfd_map, pid) = unsafe {
        let fd = libc::memfd_create(c"uroce-dma".as_ptr(), 0);
        assert!(fd >= 0, "memfd_create");
        assert_eq!(libc::ftruncate(fd, span as libc::off_t), 0);
        let m = libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        assert_ne!(m, libc::MAP_FAILED);
        std::ptr::write_bytes(m.cast::<u8>(), 7, span);
        let pid = libc::fork();
        if pid == 0 {
            // The child keeps its memory alive until killed.
            loop {
                libc::pause();
            }
        }
        (m.cast::<u8>(), pid)
    };
    let addr = private.as_ptr() as usize; // same address in the child (fork)
    let rounds = total / chunk;

    // The best of three passes (the first also warms caches and page tables).
    let time = |f: &mut dyn FnMut(usize)| {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                for r in 0..rounds {
                    f((r * chunk) % span);
                }
                gbps(rounds * chunk, t.elapsed().as_secs_f64())
            })
            .fold(0.0, f64::max)
    };

    let src = private.clone();
    let memcpy = time(&mut |off| local.copy_from_slice(&src[off..off + chunk]));

    let vm = |write: bool, local: &mut [u8], off: usize| {
        let l = libc::iovec {
            iov_base: local.as_mut_ptr().cast(),
            iov_len: chunk,
        };
        let r = libc::iovec {
            iov_base: (addr + off) as *mut libc::c_void,
            iov_len: chunk,
        };
        // SAFETY: both iovecs describe `chunk` bytes: ours live, the child's mapped.
        let n = unsafe {
            if write {
                libc::process_vm_writev(pid, &l, 1, &r, 1, 0)
            } else {
                libc::process_vm_readv(pid, &l, 1, &r, 1, 0)
            }
        };
        assert_eq!(
            n,
            chunk as isize,
            "process_vm_{}v",
            if write { "write" } else { "read" }
        );
    };
    let vm_read = time(&mut |off| vm(false, &mut local, off));
    let vm_write = time(&mut |off| vm(true, &mut local, off));

    let mem = OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .expect("open /proc/<child>/mem");
    let proc_read = time(&mut |off| {
        mem.read_exact_at(&mut local, (addr + off) as u64)
            .expect("pread /proc/pid/mem")
    });
    let proc_write = time(&mut |off| {
        mem.write_all_at(&local, (addr + off) as u64)
            .expect("pwrite /proc/pid/mem")
    });

    // SAFETY: the mapping is `span` bytes long; chunks stay inside it.
    let shared = unsafe { std::slice::from_raw_parts_mut(memfd_map, span) };
    let memfd = time(&mut |off| local.copy_from_slice(&shared[off..off + chunk]));

    let ring = ring_pipeline(chunk, rounds, &src);

    // SAFETY: killing and reaping our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    println!(
        "chunk {} KiB, {} MiB per candidate, taken from {} KiB",
        chunk / 1024,
        total >> 20,
        span / 1024
    );
    println!("{:<34} {:>8} {:>8}", "candidate", "GB/s", "ratio");
    for (name, v) in [
        ("memcpy in one process (baseline)", memcpy),
        ("memcpy from a shared memfd", memfd),
        ("process_vm_readv", vm_read),
        ("process_vm_writev", vm_write),
        ("pread /proc/<pid>/mem", proc_read),
        ("pwrite /proc/<pid>/mem", proc_write),
        ("two processes through a shared ring", ring),
    ] {
        println!("{name:<34} {v:>8.2} {:>8.2}", v / memcpy);
    }
}

/// GB/s of a producer (this process) and a consumer (a forked child) moving `rounds`
/// chunks (taken in turn from `src`, whole chunks long) through a ring of [`RING_SLOTS`]
/// chunk-sized slots in shared memory: each chunk copied in by one process and out by the
/// other, concurrently. The best of three passes.
fn ring_pipeline(chunk: usize, rounds: usize, src: &[u8]) -> f64 {
    let bytes = RING_HEADER + RING_SLOTS * chunk;
    // SAFETY: a fresh shared anonymous mapping of `bytes`, checked, inherited by the child
    // and unmapped here at the end; the words at its start are only used atomically.
    let base = unsafe {
        let m = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(m, libc::MAP_FAILED);
        m.cast::<u8>()
    };
    // SAFETY: two 8-byte words of the page-aligned mapping, each on a cache line of its own.
    let (head, tail) = unsafe {
        (
            &*base.cast::<AtomicU64>(),
            &*base.add(RING_HEADER / 2).cast::<AtomicU64>(),
        )
    };
    // SAFETY: slot `i % RING_SLOTS` lies inside the mapping.
    let slot = |i: u64| unsafe { base.add(RING_HEADER + (i as usize % RING_SLOTS) * chunk) };
    let total = 3 * rounds as u64;
    // SAFETY: the child only copies out of the shared ring and exits with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let mut out = vec![0u8; chunk];
        for i in 0..total {
            while head.load(Ordering::Acquire) <= i {
                std::hint::spin_loop();
            }
            // SAFETY: slot `i` was published (head > i) and is not reused before tail > i.
            unsafe { std::ptr::copy_nonoverlapping(slot(i), out.as_mut_ptr(), chunk) };
            std::hint::black_box(&mut out);
            tail.store(i + 1, Ordering::Release);
        }
        // SAFETY: leave without running the parent's exit handlers.
        unsafe { libc::_exit(0) };
    }
    let mut best = 0.0f64;
    let mut i = 0u64;
    for _ in 0..3 {
        let t = Instant::now();
        for r in 0..rounds {
            while i - tail.load(Ordering::Acquire) >= RING_SLOTS as u64 {
                std::hint::spin_loop();
            }
            let off = (r * chunk) % src.len();
            // SAFETY: the consumer is done with slot `i` (tail > i - RING_SLOTS).
            unsafe { std::ptr::copy_nonoverlapping(src[off..].as_ptr(), slot(i), chunk) };
            i += 1;
            head.store(i, Ordering::Release);
        }
        while tail.load(Ordering::Acquire) < i {
            std::hint::spin_loop();
        }
        best = best.max(gbps(rounds * chunk, t.elapsed().as_secs_f64()));
    }
    // SAFETY: reaping our child, then unmapping the ring it no longer uses.
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        libc::munmap(base.cast(), bytes);
    }
    best
}
