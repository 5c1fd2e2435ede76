//! Fuzz the transport with hostile packet sequences: a responder and a requester with work
//! outstanding receive arbitrary packets, timer firings and receive posts.
//! `transport::fuzzing::drive` asserts the invariants (no out-of-range memory access taken for
//! granted, every emitted packet well-formed, no phantom completions); the stable property
//! test `fuzz_entry_on_random_inputs` in crates/transport runs the same function.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = transport::fuzzing::drive(data);
});
