//! libFuzzer entry for the `bson` target (see src/targets.rs), with the
//! structure-aware mutator; `scripts/fuzz --libfuzzer bson` runs it.
#![no_main]

use libfuzzer_sys::{fuzz_mutator, fuzz_target};

fuzz_target!(|data: &[u8]| shardgate_fuzz::libfuzzer::run("bson", data));

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    shardgate_fuzz::libfuzzer::mutate("bson", data, size, max_size, seed)
        .unwrap_or_else(|| libfuzzer_sys::fuzzer_mutate(data, size, max_size))
});
