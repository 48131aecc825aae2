//! `$group` and its accumulators, with partial groups per partition and a final group at the router; `$bucket`, `$bucketAuto`.

use super::StageParser;

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] = &[];
