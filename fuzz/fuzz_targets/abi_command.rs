//! Fuzz the uverbs command decoder (framing + payloads), as the control plane sees
//! untrusted bytes from a client. The same function runs in `abi`'s stable tests on random
//! inputs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = abi::fuzzing::decode_command(data);
});
