//! Fuzz DCQCN's settings string (`UROCE_DCQCN`, read from the environment) and the reaction
//! point run with the parameters it accepted. `transport::fuzzing::dcqcn_settings` asserts
//! the invariants; the stable test `dcqcn_settings_on_random_inputs` in crates/transport runs
//! the same function.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    transport::fuzzing::dcqcn_settings(data);
});
