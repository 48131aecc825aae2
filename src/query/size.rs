//! BSON sizes, and the limits on the values a request builds.
//!
//! Pure logic below everything that builds values: expressions, accumulators
//! and stages ask here how large the string, array or document they are
//! about to build would be, and fail with MongoDB's error *before* building
//! it. No request can then make the server allocate without bound, and
//! nothing it builds nests deeper than the recursive code that later copies,
//! encodes and drops it can handle.
//!
//! The limits are MongoDB's: a string shorter than 16 MiB (`16493`), a
//! document or array of at most 16 MiB + 16 KiB encoded (`BSONObjectTooLarge`,
//! the internal size MongoDB lets intermediate documents reach), nesting of at
//! most 200 levels (`Overflow`), and 100 MB for the memory an accumulator such
//! as `$push` may hold (`ExceededMemoryLimit`). Filters and expressions are
//! refused before parsing when they nest deeper than 200 levels.

use bson::{Bson, Document};

use crate::error::{Error, ErrorCode, Result};

pub use crate::base::limits::{MAX_BSON_OBJECT_SIZE, MAX_INTERNAL_OBJECT_SIZE};

/// The longest string an expression may build: MongoDB refuses a string
/// whose bytes, terminator and 16-byte header reach 16 MiB.
pub const MAX_STRING_BYTES: usize = MAX_BSON_OBJECT_SIZE - 18;

/// The deepest nesting of a value a query may build (MongoDB's
/// `BSONDepth::getMaxAllowableDepth()`).
pub const MAX_VALUE_DEPTH: usize = 200;

/// The deepest nesting a filter or an expression may have when parsed:
/// parsing recurses once per level, so deeper ones are rejected rather
/// than risking the stack (MongoDB documents nest at most 100 deep).
pub const MAX_NESTING: usize = 200;

/// True when documents and arrays in `values` nest deeper than `limit`,
/// checked without recursion.
pub fn nesting_exceeds<'a>(values: impl Iterator<Item = &'a Bson>, limit: usize) -> bool {
    let mut stack: Vec<(&Bson, usize)> = values.map(|v| (v, 1)).collect();
    while let Some((value, depth)) = stack.pop() {
        if depth > limit {
            return true;
        }
        match value {
            Bson::Document(d) => stack.extend(d.values().map(|v| (v, depth + 1))),
            Bson::Array(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    false
}

/// Memory one `$push`, `$addToSet`, `$firstN`, `$topN`, ... accumulator
/// may hold for one group (MongoDB's `internalQueryMaxPushBytes`,
/// `internalQueryMaxAddToSetBytes`, `internalQueryTopNAccumulatorBytes`),
/// and the memory a `$range` result may take (`internalQueryMaxRangeBytes`).
pub const ACCUMULATOR_MEMORY_LIMIT: usize = 100 * 1024 * 1024;

/// The encoded size of a value without its field name, computed without
/// encoding it.
pub fn bson_size(v: &Bson) -> usize {
    measure(v).size
}

/// The encoded size of a document, computed without encoding it.
pub fn document_size(d: &Document) -> usize {
    d.iter()
        .fold(5, |total, (k, v)| total.saturating_add(field_size(k, v)))
}

/// The bytes a field takes in its document: type, name, terminator, value.
pub fn field_size(key: &str, value: &Bson) -> usize {
    (2 + key.len()).saturating_add(bson_size(value))
}

/// The bytes the element at `index` takes in its array.
pub fn element_size(index: usize, value: &Bson) -> usize {
    (2 + decimal_len(index)).saturating_add(bson_size(value))
}

/// A value's encoded size and how deeply it nests (1 for a scalar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub size: usize,
    pub depth: usize,
}

/// Size and depth in one walk, with an explicit stack so that even a value
/// deeper than any limit cannot overflow the thread's stack.
pub fn measure(value: &Bson) -> Shape {
    let mut size = 0usize;
    let mut deepest = 1;
    let mut stack: Vec<(&Bson, usize)> = vec![(value, 1)];
    while let Some((v, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        size = size.saturating_add(scalar_size(v));
        match v {
            Bson::Document(d) => {
                for (k, child) in d {
                    size = size.saturating_add(2 + k.len());
                    stack.push((child, depth + 1));
                }
            }
            Bson::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    size = size.saturating_add(2 + decimal_len(i));
                    stack.push((child, depth + 1));
                }
            }
            Bson::JavaScriptCodeWithScope(c) => {
                size = size.saturating_add(document_size(&c.scope));
            }
            _ => {}
        }
    }
    Shape {
        size,
        depth: deepest,
    }
}

/// A value's own bytes, not counting the elements of a document or array.
fn scalar_size(v: &Bson) -> usize {
    match v {
        Bson::Double(_) | Bson::Int64(_) | Bson::DateTime(_) | Bson::Timestamp(_) => 8,
        Bson::Int32(_) => 4,
        Bson::Boolean(_) => 1,
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => 0,
        Bson::String(s) | Bson::Symbol(s) | Bson::JavaScriptCode(s) => 5 + s.len(),
        Bson::ObjectId(_) => 12,
        Bson::Decimal128(_) => 16,
        Bson::Binary(b) => 5 + b.bytes.len(),
        Bson::Document(_) | Bson::Array(_) => 5,
        Bson::RegularExpression(r) => r.pattern.len() + r.options.len() + 2,
        Bson::JavaScriptCodeWithScope(c) => 14 + c.code.len(),
        Bson::DbPointer(_) => 30,
    }
}

fn decimal_len(mut i: usize) -> usize {
    let mut n = 1;
    while i >= 10 {
        i /= 10;
        n += 1;
    }
    n
}

/// MongoDB's error for a string that would reach 16 MiB.
pub fn string_too_long() -> Error {
    Error::new(
        ErrorCode::StringTooLong,
        format!(
            "Tried to create string longer than {}MB",
            MAX_BSON_OBJECT_SIZE / 1024 / 1024
        ),
    )
}

/// Fails unless a string of `len` bytes may be built.
pub fn check_string_len(len: usize) -> Result<()> {
    if len > MAX_STRING_BYTES {
        return Err(string_too_long());
    }
    Ok(())
}

/// MongoDB's error for a document or array past the size limit.
pub fn object_too_large(size: usize) -> Error {
    Error::new(
        ErrorCode::BSONObjectTooLarge,
        format!(
            "BSONObj size: {size} (0x{size:X}) is invalid. Size must be between 0 and \
             {MAX_INTERNAL_OBJECT_SIZE}({}MB)",
            MAX_BSON_OBJECT_SIZE / 1024 / 1024
        ),
    )
}

/// MongoDB's error for a value nested deeper than [`MAX_VALUE_DEPTH`].
pub fn nested_too_deep() -> Error {
    Error::new(
        ErrorCode::Overflow,
        format!(
            "cannot convert document to BSON because it exceeds the limit of {MAX_VALUE_DEPTH} \
             levels of nesting"
        ),
    )
}

/// MongoDB's error for an accumulator past [`ACCUMULATOR_MEMORY_LIMIT`]
/// (`$push`, `$addToSet`).
pub fn accumulator_memory_error(op: &str) -> Error {
    Error::new(
        ErrorCode::ExceededMemoryLimit,
        format!(
            "{op} used too much memory and cannot spill to disk. Memory limit: \
             {ACCUMULATOR_MEMORY_LIMIT} bytes"
        ),
    )
}

/// The running size of a document or array being built, checked as each
/// piece is added, before the piece is copied in.
#[derive(Debug, Clone)]
pub struct SizeBudget {
    size: usize,
    depth: usize,
}

impl Default for SizeBudget {
    fn default() -> Self {
        SizeBudget::new()
    }
}

impl SizeBudget {
    /// An empty document or array (5 bytes encoded).
    pub fn new() -> SizeBudget {
        SizeBudget { size: 5, depth: 1 }
    }

    /// The encoded size so far.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The size and depth of what was built, to charge it to the value
    /// that will hold it.
    pub fn shape(&self) -> Shape {
        Shape {
            size: self.size,
            depth: self.depth,
        }
    }

    /// Charges the element at `index` of an array being built.
    pub fn add_element(&mut self, index: usize, value: &Bson) -> Result<()> {
        let shape = measure(value);
        self.charge(2 + decimal_len(index), shape)
    }

    /// Charges a field of a document being built.
    pub fn add_field(&mut self, key: &str, value: &Bson) -> Result<()> {
        let shape = measure(value);
        self.charge(2 + key.len(), shape)
    }

    /// Charges an already measured value with `header` bytes around it.
    pub fn charge(&mut self, header: usize, shape: Shape) -> Result<()> {
        if shape.depth >= MAX_VALUE_DEPTH {
            return Err(nested_too_deep());
        }
        self.depth = self.depth.max(shape.depth + 1);
        self.add_bytes(header.saturating_add(shape.size))
    }

    /// Charges raw bytes (a piece whose shape is already known).
    pub fn add_bytes(&mut self, bytes: usize) -> Result<()> {
        self.size = self.size.saturating_add(bytes);
        if self.size > MAX_INTERNAL_OBJECT_SIZE {
            return Err(object_too_large(self.size));
        }
        Ok(())
    }

    /// Gives back bytes (a field that a later one replaces).
    pub fn release(&mut self, bytes: usize) {
        self.size = self.size.saturating_sub(bytes).max(5);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn computed_size_matches_encoding() {
        let d = doc! {
            "_id": 1, "s": "hello", "a": [1, 2.5, "x", {"n": null}], "o": {"t": true},
            "long": (0..120).collect::<Vec<i32>>(),
        };
        assert_eq!(document_size(&d), d.to_vec().unwrap().len());
        assert_eq!(
            bson_size(&Bson::Document(d.clone())),
            d.to_vec().unwrap().len()
        );
        // The document, the array, the document in it, the null in that.
        assert_eq!(measure(&Bson::Document(d)).depth, 4);
    }

    #[test]
    fn deep_values_are_measured_without_recursion() {
        let mut v = Bson::Int32(1);
        for _ in 0..100_000 {
            v = Bson::Array(vec![v]);
        }
        assert_eq!(measure(&v).depth, 100_001);
        let mut budget = SizeBudget::new();
        assert_eq!(
            budget.add_element(0, &v).unwrap_err().code,
            ErrorCode::Overflow
        );
        // Dropping it recursively would overflow the stack too.
        let mut v = v;
        while let Bson::Array(mut items) = v {
            v = items.pop().unwrap_or(Bson::Null);
        }
    }

    #[test]
    fn budgets_fail_past_the_internal_size() {
        let mut budget = SizeBudget::new();
        let big = Bson::String("x".repeat(MAX_BSON_OBJECT_SIZE / 2 + 8 * 1024));
        budget.add_field("a", &big).unwrap();
        let e = budget.add_field("b", &big).unwrap_err();
        assert_eq!(e.code.number(), 10334);
        assert!(e.message.contains("16793600"), "{}", e.message);
        assert!(check_string_len(MAX_STRING_BYTES).is_ok());
        assert_eq!(
            check_string_len(MAX_STRING_BYTES + 1).unwrap_err().code,
            ErrorCode::StringTooLong
        );
    }
}
