//! Checking BSON from the wire before anything recursive touches it.
//!
//! Converting BSON into a `Document` recurses once per nesting level, so
//! a hostile message nested thousands of levels deep could overflow a
//! thread's stack. [`check_document`] walks the bytes with an explicit
//! stack instead: it validates every element (lengths, types, UTF-8) and
//! refuses nesting deeper than [`MAX_NESTING`].

use bson::raw::{RawBsonRef, RawDocument, RawIter};

/// Deepest nesting accepted in a message. MongoDB stores documents up to
/// 100 levels and allows a little more in commands that wrap them.
pub const MAX_NESTING: usize = 180;

/// Why bytes are not an acceptable document.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BsonCheckError {
    #[error("invalid BSON: {0}")]
    Invalid(String),
    #[error("BSON nesting is deeper than the allowed {MAX_NESTING} levels")]
    TooDeep,
}

/// Validates a whole document without recursion; returns its depth.
pub fn check_document(bytes: &[u8]) -> Result<usize, BsonCheckError> {
    let invalid = |e: bson::error::Error| BsonCheckError::Invalid(e.to_string());
    let root = RawDocument::from_bytes(bytes).map_err(invalid)?;
    let mut stack: Vec<RawIter<'_>> = vec![root.iter_elements()];
    let mut deepest = 1;
    while let Some(top) = stack.last_mut() {
        let value = match top.next() {
            None => {
                stack.pop();
                continue;
            }
            Some(element) => element.and_then(|e| e.value()).map_err(invalid)?,
        };
        let child = match value {
            RawBsonRef::Document(d) => d.iter_elements(),
            RawBsonRef::Array(a) => a.iter_elements(),
            RawBsonRef::JavaScriptCodeWithScope(c) => c.scope.iter_elements(),
            _ => continue,
        };
        if stack.len() >= MAX_NESTING {
            return Err(BsonCheckError::TooDeep);
        }
        stack.push(child);
        deepest = deepest.max(stack.len());
    }
    Ok(deepest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn nested(depth: usize) -> Vec<u8> {
        // Built by hand: the bson crate would recurse to encode it.
        let mut inner = vec![5, 0, 0, 0, 0];
        for _ in 1..depth {
            let mut d = Vec::new();
            let len = 4 + 1 + 2 + inner.len() + 1;
            d.extend((len as i32).to_le_bytes());
            d.push(0x03);
            d.extend(b"a\0");
            d.extend(&inner);
            d.push(0);
            inner = d;
        }
        inner
    }

    #[test]
    fn accepts_ordinary_documents() {
        let d = doc! {"a": [1, {"b": "x"}], "c": {"d": null}};
        assert_eq!(check_document(&d.to_vec().unwrap()), Ok(3));
    }

    #[test]
    fn refuses_deep_nesting_without_recursing() {
        assert!(check_document(&nested(MAX_NESTING)).is_ok());
        assert_eq!(
            check_document(&nested(100_000)),
            Err(BsonCheckError::TooDeep)
        );
    }

    #[test]
    fn refuses_broken_elements() {
        let mut bytes = doc! {"s": "hello"}.to_vec().unwrap();
        // Corrupt the string length.
        bytes[7] = 200;
        assert!(matches!(
            check_document(&bytes),
            Err(BsonCheckError::Invalid(_))
        ));
        let mut bytes = doc! {"s": "hello"}.to_vec().unwrap();
        // Invalid UTF-8 inside the string.
        bytes[11] = 0xff;
        assert!(check_document(&bytes).is_err());
    }
}
