//! String operators: $concat, $substr, $toLower, ..., $regexMatch, $replaceAll.

use super::Operator;

/// This family's operators, sorted by name.
pub(super) static OPERATORS: &[Operator] = &[];
