//! Array and object operators ($size is in the main table): $arrayElemAt, $filter, $map, $reduce, ... and $mergeObjects, $objectToArray, ...

use super::Operator;

/// This family's operators, sorted by name.
pub(super) static OPERATORS: &[Operator] = &[];
