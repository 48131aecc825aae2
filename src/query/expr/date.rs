//! Date operators: $year, $month, ..., $dateToString, $dateFromString, $dateTrunc, $dateAdd, $dateDiff.

use super::Operator;

/// This family's operators, sorted by name.
pub(super) static OPERATORS: &[Operator] = &[];
