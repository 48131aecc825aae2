//! Fuzz targets for every parser a client reaches, and a runner for them
//! that works on stable Rust.
//!
//! Sits outside the server, like `compat-tests`: it calls the same
//! library functions a request reaches ([`targets`]) with generated
//! ([`generate`]) and mutated ([`mutate`]) input, starting from a seed
//! corpus recorded from the driver tests (`fuzz/corpus/<target>/`).
//!
//! Two engines run the same targets:
//! - the `shardgate-fuzz` binary ([`runner`]): time-budgeted, one child
//!   process per target so that an abort or a stack overflow is caught
//!   and its input kept, allocations bounded by [`guard`]; CI runs it;
//! - `cargo fuzz` (nightly, libFuzzer, coverage-guided) through the
//!   `fuzz_targets/` binaries, behind the `libfuzzer` feature, for long
//!   runs. See docs/ROBUSTNESS.md.

pub mod generate;
pub mod guard;
pub mod mutate;
pub mod runner;
pub mod targets;

/// Decodes BSON bytes into a document without trusting the declared
/// length: `Document::from_reader` reserves whatever the first four
/// bytes say (up to 2 GiB) before reading.
pub fn decode_document(bytes: &[u8]) -> Option<bson::Document> {
    let raw = bson::RawDocument::from_bytes(bytes).ok()?;
    bson::Document::try_from(raw).ok()
}

/// Entry points for the libFuzzer binaries.
pub mod libfuzzer {
    use crate::generate::Gen;
    use crate::targets;

    /// Runs `data` through the target called `name`.
    pub fn run(name: &str, data: &[u8]) {
        if let Some(t) = targets::find(name) {
            t.execute(data);
        }
    }

    /// A structure-aware mutation of `data[..size]` written back into
    /// `data`; `None` when the mutant does not fit (the caller then
    /// falls back to libFuzzer's own mutation).
    pub fn mutate(
        name: &str,
        data: &mut [u8],
        size: usize,
        max_size: usize,
        seed: u32,
    ) -> Option<usize> {
        let t = targets::find(name)?;
        let mut g = Gen::new(seed as u64);
        let pool = vec![data.get(..size)?.to_vec()];
        let out = crate::mutate::next_input(t, &pool, &mut g);
        if out.len() > max_size.min(data.len()) {
            return None;
        }
        data[..out.len()].copy_from_slice(&out);
        Some(out.len())
    }
}
