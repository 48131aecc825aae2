//! Streaming stages and simple blocking ones: `$match`, `$project`, `$addFields`/`$set`, `$unset`, `$replaceRoot`/`$replaceWith`, `$unwind`, `$skip`, `$limit`, `$count`, `$sort`, `$sortByCount`, `$sample`, `$documents`.

use super::StageParser;

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] = &[];
