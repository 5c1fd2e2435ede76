//! The `nic_commands` fuzz target's entry point, `nic::fuzzing::execute`, on seeded random
//! and mutated command sequences: every command gets one well-formed reply (or the
//! connection closes on an unframeable header), nothing panics, and closing each context
//! reclaims every object and file descriptor. Seeded and reproducible: set
//! `NIC_FUZZ_SEED` to replay a failure; `NIC_FUZZ_RUNS` to run longer. Set
//! `NIC_FUZZ_CORPUS` to a directory to write the sample inputs there (a starting corpus
//! for `cargo fuzz run nic_commands`).
//!
//! Its own test binary (own process): the fuzz device is sealed, but it is still a device
//! of the process.

use nic::fuzzing::{execute, sample_inputs, Outcome};

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

/// Mutate an input the way a fuzzer would: bit flips, interesting bytes, random bytes,
/// truncation, duplicated or spliced ranges, appended random chunks.
fn mutate(rng: &mut Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut m = seed.to_vec();
    for _ in 0..=rng.below(6) {
        let len = m.len().max(1) as u64;
        match rng.below(8) {
            0 | 1 => {
                let i = rng.below(len) as usize;
                if let Some(b) = m.get_mut(i) {
                    *b ^= 1 << rng.below(8);
                }
            }
            2 => {
                let i = rng.below(len) as usize;
                if let Some(b) = m.get_mut(i) {
                    *b = [0, 0xff, 0x80, 1, 0x7f, 0x10, 0x40][rng.below(7) as usize];
                }
            }
            3 => {
                let i = rng.below(len) as usize;
                if let Some(b) = m.get_mut(i) {
                    *b = rng.next() as u8;
                }
            }
            4 => m.truncate(1 + rng.below(len) as usize),
            5 => {
                // Splice a range of another input in.
                let a = rng.below(other.len().max(1) as u64) as usize;
                let b = (a + rng.below(200) as usize).min(other.len());
                let at = rng.below(len) as usize;
                let tail = m.split_off(at.min(m.len()));
                m.extend_from_slice(other.get(a..b).unwrap_or(&[]));
                m.extend_from_slice(&tail);
            }
            6 => {
                // Overwrite a 4-byte word with a small number (handles, offsets, keys).
                let i = rng.below(len) as usize;
                let v = [
                    0u32,
                    1,
                    16,
                    17,
                    nic::fuzzing::MR_KEY,
                    0x1000,
                    0x1_0000,
                    u32::MAX,
                ][rng.below(8) as usize]
                    .to_ne_bytes();
                for (k, b) in v.iter().enumerate() {
                    if let Some(d) = m.get_mut(i + k) {
                        *d = *b;
                    }
                }
            }
            _ => {
                let n = rng.below(120) as usize;
                let flags = (rng.next() as u16) & 0xc000;
                m.extend_from_slice(&(flags | n as u16).to_le_bytes());
                let cmd = rng.below(0x30) as u32;
                m.extend_from_slice(&cmd.to_ne_bytes());
                m.extend((4..n).map(|_| rng.next() as u8));
            }
        }
    }
    m
}

#[test]
fn random_and_mutated_command_sequences_find_no_panic_and_leak_nothing() {
    let seed: u64 = std::env::var("NIC_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x0dd_c0ffee);
    let runs: u32 = std::env::var("NIC_FUZZ_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    println!("NIC_FUZZ_SEED={seed} NIC_FUZZ_RUNS={runs}");
    let samples = sample_inputs();
    if let Ok(dir) = std::env::var("NIC_FUZZ_CORPUS") {
        std::fs::create_dir_all(&dir).unwrap();
        for (i, s) in samples.iter().enumerate() {
            std::fs::write(format!("{dir}/sample-{i}"), s).unwrap();
        }
    }

    // The samples themselves: real work, mostly successful commands.
    let outs: Vec<Outcome> = samples.iter().map(|s| execute(s)).collect();
    println!("samples: {outs:?}");
    assert!(
        outs[0].replies >= 20 && outs[0].errors == 0,
        "{:?}",
        outs[0]
    );
    assert!(
        outs[1].errors >= 2,
        "teardown in use must be refused: {:?}",
        outs[1]
    );
    assert!(
        outs[2].replies >= 20 && outs[2].errors == 0,
        "{:?}",
        outs[2]
    );
    assert!(outs.last().unwrap().closed);

    let mut rng = Rng(seed | 1);
    let (mut replies, mut errors, mut closes) = (0u64, 0u64, 0u64);
    for _ in 0..runs {
        let input = match rng.below(5) {
            0 => (0..rng.below(400)).map(|_| rng.next() as u8).collect(),
            _ => {
                let s = &samples[rng.below(samples.len() as u64) as usize];
                let o = &samples[rng.below(samples.len() as u64) as usize];
                mutate(&mut rng, s, o)
            }
        };
        let out = execute(&input);
        replies += u64::from(out.replies);
        errors += u64::from(out.errors);
        closes += u64::from(out.closed);
    }
    println!("replies {replies}, errors {errors}, closes {closes}");
    assert!(replies > u64::from(runs) * 5);
    assert!(errors > 0 && errors < replies);

    // The device still serves, from a clean slate: the full prelude succeeds.
    let out = execute(&[2]);
    assert_eq!((out.replies, out.errors, out.closed), (12, 0, false));
}
