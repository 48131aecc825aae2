//! `$facet`: several sub-pipelines over one input.

use super::StageParser;

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] = &[];
