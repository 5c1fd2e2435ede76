//! Fuzz the command reply decoder (header, errno, reason record), as the library sees bytes
//! from a control plane it trusts less than a kernel. The same function runs in `abi`'s
//! stable tests on random inputs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = abi::fuzzing::decode_reply(data);
});
