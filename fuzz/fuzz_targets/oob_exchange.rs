//! Fuzz the out-of-band exchanges: every perftest and pingpong decoder, and both sides of
//! every perftest test and pingpong variant, fed arbitrary peer bytes.
//! `oob::fuzzing::exchange` asserts the decoders' round trips; a panic is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = oob::fuzzing::exchange(data);
});
