//! Type conversion operators: $convert, $toString, $toInt, ... and remaining arithmetic ($ceil, $floor, $round, ...).

use super::Operator;

/// This family's operators, sorted by name.
pub(super) static OPERATORS: &[Operator] = &[];
