//! Stages that write: `$out`, `$merge`.

use super::StageParser;

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] = &[];
