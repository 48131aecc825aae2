//! Stages that read other collections: `$lookup`, `$unionWith`.

use super::StageParser;

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] = &[];
