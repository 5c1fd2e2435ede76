//! Fuzz the whole `uroce decode` pipeline: pcap parsing, decapsulation, RoCEv2 parsing,
//! decode records and their text/JSON forms. `capture::fuzzing::decode_bytes` asserts the
//! pipeline's invariants; a panic anywhere is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = capture::fuzzing::decode_bytes(data);
});
