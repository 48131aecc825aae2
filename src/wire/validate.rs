//! Checking BSON from the wire before anything recursive touches it.
//!
//! Converting BSON into a `Document` recurses once per nesting level, so
//! a hostile message nested thousands of levels deep could overflow a
//! thread's stack. [`check_document`] walks the bytes with an explicit
//! stack instead: it validates every element (lengths, types, UTF-8) and
//! refuses nesting deeper than [`MAX_NESTING`]. [`to_document`] converts
//! and validates in one walk, counting the levels it descends, for bytes
//! that become a document anyway.

use bson::raw::{RawArray, RawBsonRef, RawDocument, RawIter};
use bson::{Bson, Document};

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

/// Validates bytes and turns them into a document, refusing nesting
/// deeper than [`MAX_NESTING`] before it descends that far. Each element
/// is validated as it is converted; `skip` names top-level fields left
/// out of the document (they are still validated).
pub fn to_document(bytes: &[u8], skip: Option<&str>) -> Result<Document, BsonCheckError> {
    let raw = RawDocument::from_bytes(bytes).map_err(invalid)?;
    let mut doc = Document::new();
    for element in raw {
        let (key, value) = element.map_err(invalid)?;
        if skip == Some(key.as_str()) {
            check_value(value)?;
        } else {
            doc.insert(key.as_str(), to_bson(value, 1)?);
        }
    }
    Ok(doc)
}

fn invalid(e: bson::error::Error) -> BsonCheckError {
    BsonCheckError::Invalid(e.to_string())
}

/// Converts a value found `depth` levels down. The recursion is bounded
/// by [`MAX_NESTING`], a few kilobytes of stack.
fn to_bson(value: RawBsonRef<'_>, depth: usize) -> Result<Bson, BsonCheckError> {
    match value {
        RawBsonRef::Document(d) => {
            let depth = deeper(depth)?;
            let mut doc = Document::new();
            for element in d {
                let (key, value) = element.map_err(invalid)?;
                doc.insert(key.as_str(), to_bson(value, depth)?);
            }
            Ok(Bson::Document(doc))
        }
        RawBsonRef::Array(a) => array(a, deeper(depth)?),
        RawBsonRef::JavaScriptCodeWithScope(c) => {
            if depth + check_document(c.scope.as_bytes())? > MAX_NESTING {
                return Err(BsonCheckError::TooDeep);
            }
            Bson::try_from(value).map_err(invalid)
        }
        scalar => Bson::try_from(scalar).map_err(invalid),
    }
}

fn array(a: &RawArray, depth: usize) -> Result<Bson, BsonCheckError> {
    let mut items = Vec::new();
    for value in a {
        items.push(to_bson(value.map_err(invalid)?, depth)?);
    }
    Ok(Bson::Array(items))
}

fn deeper(depth: usize) -> Result<usize, BsonCheckError> {
    if depth >= MAX_NESTING {
        return Err(BsonCheckError::TooDeep);
    }
    Ok(depth + 1)
}

/// Validates a value left out of a conversion.
fn check_value(value: RawBsonRef<'_>) -> Result<(), BsonCheckError> {
    let bytes = match value {
        RawBsonRef::Document(d) => d.as_bytes(),
        RawBsonRef::Array(a) => a.as_bytes(),
        RawBsonRef::JavaScriptCodeWithScope(c) => c.scope.as_bytes(),
        _ => return Ok(()),
    };
    if check_document(bytes)? >= MAX_NESTING {
        return Err(BsonCheckError::TooDeep);
    }
    Ok(())
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
    fn converts_as_the_bson_crate_does_to_the_same_depth_it_checks() {
        let d = doc! {
            "a": [1, {"b": "x", "c": [[]]}],
            "d": {"e": null, "f": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2] }},
            "g": bson::JavaScriptCodeWithScope { code: "x".into(), scope: doc! {"y": {"z": 1}} },
        };
        let bytes = d.to_vec().unwrap();
        assert_eq!(to_document(&bytes, None), Ok(d.clone()));
        let mut without = d.clone();
        without.remove("d");
        assert_eq!(to_document(&bytes, Some("d")), Ok(without));
        assert!(to_document(&nested(MAX_NESTING), None).is_ok());
        assert_eq!(
            to_document(&nested(MAX_NESTING + 1), None),
            Err(BsonCheckError::TooDeep)
        );
        assert_eq!(
            to_document(&nested(100_000), Some("a")),
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
        assert!(matches!(
            to_document(&bytes, None),
            Err(BsonCheckError::Invalid(_))
        ));
        let mut inner = doc! {"skipped": {"s": "hello"}}.to_vec().unwrap();
        // Invalid UTF-8 inside a field left out of the conversion.
        let at = inner.len() - 4;
        inner[at] = 0xff;
        assert!(matches!(
            to_document(&inner, Some("skipped")),
            Err(BsonCheckError::Invalid(_))
        ));
    }
}
