//! How a daemon could reach the memory an unmodified program registers (docs/daemon.md §2):
//! the candidates measured side by side in one run, as ratios to an in-process `memcpy`.
//!
//! ```text
//! cargo run --release -p nic --example dma_candidates [-- CHUNK_KIB [TOTAL_MIB]]
//! ```
//!
//! A child process owns a buffer (as an application owns its registered memory); this
//! process copies it out and back in 64 KiB chunks (the size of a perftest message) with:
//! * `memcpy` within one process (the per-process engine: what uroce does),
//! * `process_vm_readv` / `process_vm_writev` (a daemon with ptrace rights over the client),
//! * `pread` / `pwrite` on `/proc/<pid>/mem` (a descriptor the client could hand over),
//! * `memcpy` through a `memfd` both processes map (registered pages moved onto a memfd).

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::time::Instant;

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
    let span = 16usize << 20; // the child's buffer; copied over and over up to `total`
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

    // SAFETY: killing and reaping our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    println!(
        "chunk {} KiB, {} MiB per candidate",
        chunk / 1024,
        total >> 20
    );
    println!("{:<34} {:>8} {:>8}", "candidate", "GB/s", "ratio");
    for (name, v) in [
        ("memcpy in one process (baseline)", memcpy),
        ("memcpy from a shared memfd", memfd),
        ("process_vm_readv", vm_read),
        ("process_vm_writev", vm_write),
        ("pread /proc/<pid>/mem", proc_read),
        ("pwrite /proc/<pid>/mem", proc_write),
    ] {
        println!("{name:<34} {v:>8.2} {:>8.2}", v / memcpy);
    }
}
