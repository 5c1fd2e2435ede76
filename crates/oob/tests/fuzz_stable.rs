//! The stable stand-in of the `oob_exchange` fuzz target: random and mutated bytes into
//! every decoder and both sides of every exchange. Nothing may panic; decoders that
//! accept must round-trip (asserted inside `oob::fuzzing::exchange`).

mod support;

use oob::fuzzing::{self, FixedHooks, MemStream};
use oob::perftest::{run_exchange, KeyMessage, LocalSystem, Perftest};
use oob::pingpong::PpDest;
use proptest::prelude::*;
use support::TcpCapture;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        fuzzing::exchange(&data);
    }

    #[test]
    fn random_key_text_never_panics(text in "[0-9a-fA-F:\\x00g ]{100,110}") {
        let mut bytes = text.into_bytes();
        bytes.resize(108, 0);
        if let Ok(k) = KeyMessage::decode(&bytes) {
            prop_assert_eq!(KeyMessage::decode(&k.encode().expect("re-encodes")), Ok(k));
        }
        bytes.truncate(52);
        if let Ok(d) = PpDest::decode(&bytes) {
            prop_assert_eq!(PpDest::decode(&d.encode().expect("re-encodes")), Ok(d));
        }
    }
}

/// xorshift64*: deterministic mutations without a dependency; a failure names the
/// generator state that produced the input.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(5) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v.truncate(i);
            }
            2 => {
                let i = rng.below(v.len() + 1);
                v.insert(i, rng.next() as u8);
            }
            3 if !v.is_empty() => {
                let i = rng.below(v.len());
                v.remove(i);
            }
            _ if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = [0, b':', b'0', b'f', 0xff][rng.below(5)];
            }
            _ => {}
        }
    }
    v
}

#[test]
fn mutated_captures_never_panic() {
    let pcaps = [
        "pt_write_bw.pcap",
        "pt_write_bw_bidir.pcap",
        "pt_write_bw_q2.pcap",
        "pt_write_bw_all.pcap",
        "pt_write_lat.pcap",
        "pt_read_bw.pcap",
        "pt_read_lat.pcap",
        "pt_send_bw.pcap",
        "pt_send_bw_bidir.pcap",
        "pt_send_bw_all_ud.pcap",
        "pt_send_lat.pcap",
        "pt_atomic_bw.pcap",
        "pp_rc.pcap",
        "pp_srq.pcap",
    ];
    let mut rng = Rng(0x5eed_0ddb_a11c_afe5);
    let mut finished = 0;
    for pcap in pcaps {
        let cap = TcpCapture::load(pcap);
        for from_client in [true, false] {
            let stream = cap.stream(from_client);
            // Unmutated, under every configuration and role: no panic, and some finish.
            for selector in 0..=255u8 {
                let (cfg, role) = fuzzing::pick_config(selector);
                let qps = cfg.qps();
                let mut ex = Perftest::new(cfg, role, LocalSystem::default());
                let mut s = MemStream::new(&stream, 1 + usize::from(selector % 9));
                let mut hooks = FixedHooks { qps, runs: 0 };
                if run_exchange(&mut s, &mut ex, &mut hooks).is_ok() {
                    finished += 1;
                }
            }
            for round in 0..40 {
                let seed = rng.0;
                let mutated = mutate(&mut rng, &stream);
                let mut data = vec![rng.next() as u8, rng.next() as u8];
                data.extend_from_slice(&mutated);
                let run = std::panic::catch_unwind(|| fuzzing::exchange(&data));
                assert!(
                    run.is_ok(),
                    "{pcap} round {round}: panicked (rng state {seed:#x})"
                );
            }
        }
    }
    assert!(
        finished > 0,
        "the captured streams complete some configurations"
    );
}
