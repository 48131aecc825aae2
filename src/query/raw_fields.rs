//! Finding one field of a document still in BSON form.
//!
//! Scans decide filters and read group keys on stored bytes
//! ([`crate::query::path::raw_leaf`]). To agree with the decoded document
//! they must know that a field name appears once (decoding keeps the
//! last value of a repeated name, in the first place), so a lookup steps
//! over every element of the document. The `bson` crate's iterator checks
//! each name as UTF-8 and builds each element as it goes; stepping over
//! an element here reads its type, finds the end of its name and reads
//! its length: a few bytes per element. Only the element found is read
//! as a value, through the `bson` crate for the rarer types. Names are
//! compared as bytes and not checked as UTF-8: a stored document was
//! checked whole when it was written.

use bson::oid::ObjectId;
use bson::{DateTime, Decimal128, RawBsonRef, RawDocument};

/// The value of the one element of `doc` named `name`: `Some(None)` when
/// there is none, `None` when the name appears twice or the bytes do not
/// read as BSON.
pub fn unique_field<'a>(doc: &'a RawDocument, name: &str) -> Option<Option<RawBsonRef<'a>>> {
    let bytes = doc.as_bytes();
    // One independent read per cache line: the lines load together,
    // where the walk below would wait for each in turn.
    let mut touched = 0u8;
    for line in bytes.iter().step_by(64) {
        touched ^= *line;
    }
    std::hint::black_box(touched);
    // A document is its length, its elements and a 0 byte.
    let end = bytes.len().checked_sub(1)?;
    let mut at = 4;
    let mut found: Option<(u8, usize, usize)> = None;
    while at < end {
        let kind = bytes[at];
        let key_start = at + 1;
        let key_len = bytes.get(key_start..end)?.iter().position(|&b| b == 0)?;
        let value_start = key_start + key_len + 1;
        let value_len = value_len(kind, bytes.get(value_start..end)?)?;
        let next = value_start.checked_add(value_len)?;
        if next > end {
            return None;
        }
        if &bytes[key_start..key_start + key_len] == name.as_bytes() {
            if found.is_some() {
                return None;
            }
            found = Some((kind, value_start, next));
        }
        at = next;
    }
    if at != end || bytes[end] != 0 {
        return None;
    }
    let Some((kind, start, stop)) = found else {
        return Some(None);
    };
    let value = match value_of(kind, &bytes[start..stop]) {
        Some(value) => value,
        // The one element of that name, read by the `bson` crate.
        None => doc.get(name).ok()??,
    };
    Some(Some(value))
}

fn read_i32(bytes: &[u8]) -> Option<i32> {
    Some(i32::from_le_bytes(bytes.get(..4)?.try_into().ok()?))
}

/// A length prefix that cannot be negative or below `min`.
fn read_len(bytes: &[u8], min: usize) -> Option<usize> {
    usize::try_from(read_i32(bytes)?).ok().filter(|&n| n >= min)
}

fn cstring_len(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == 0)
}

/// The bytes the value of an element of type `kind` takes at the start
/// of `rest`.
fn value_len(kind: u8, rest: &[u8]) -> Option<usize> {
    Some(match kind {
        // double, date, timestamp, int64
        0x01 | 0x09 | 0x11 | 0x12 => 8,
        // string, code, symbol: length (with its 0 byte), then the bytes
        0x02 | 0x0D | 0x0E => 4 + read_len(rest, 1)?,
        // document, array, code with scope: the length counts itself
        0x03 | 0x04 => read_len(rest, 5)?,
        0x0F => read_len(rest, 14)?,
        // binary: length, subtype, bytes
        0x05 => 5 + read_len(rest, 0)?,
        // undefined, null, MinKey, MaxKey
        0x06 | 0x0A | 0xFF | 0x7F => 0,
        0x07 => 12,
        0x08 => 1,
        0x10 => 4,
        0x13 => 16,
        // regex: two C strings
        0x0B => {
            let pattern = cstring_len(rest)? + 1;
            pattern + cstring_len(rest.get(pattern..)?)? + 1
        }
        // DBPointer: a string, then an ObjectId
        0x0C => 4 + read_len(rest, 1)? + 12,
        _ => return None,
    })
}

/// The common scalars and documents, read from their bytes; `None` for
/// the types left to the `bson` crate (arrays among them).
fn value_of(kind: u8, v: &[u8]) -> Option<RawBsonRef<'_>> {
    let eight = || -> Option<[u8; 8]> { v.try_into().ok() };
    Some(match kind {
        0x01 => RawBsonRef::Double(f64::from_le_bytes(eight()?)),
        0x02 => {
            let (nul, text) = v.get(4..)?.split_last()?;
            if *nul != 0 {
                return None;
            }
            RawBsonRef::String(std::str::from_utf8(text).ok()?)
        }
        0x03 => RawBsonRef::Document(RawDocument::from_bytes(v).ok()?),
        0x06 => RawBsonRef::Undefined,
        0x07 => RawBsonRef::ObjectId(ObjectId::from_bytes(v.try_into().ok()?)),
        0x08 => match v {
            [0] => RawBsonRef::Boolean(false),
            [1] => RawBsonRef::Boolean(true),
            _ => return None,
        },
        0x09 => RawBsonRef::DateTime(DateTime::from_millis(i64::from_le_bytes(eight()?))),
        0x0A => RawBsonRef::Null,
        0x10 => RawBsonRef::Int32(read_i32(v)?),
        0x12 => RawBsonRef::Int64(i64::from_le_bytes(eight()?)),
        0x13 => RawBsonRef::Decimal128(Decimal128::from_bytes(v.try_into().ok()?)),
        0xFF => RawBsonRef::MinKey,
        0x7F => RawBsonRef::MaxKey,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Binary, Bson, Regex, Timestamp};

    fn every_type() -> bson::Document {
        doc! {
            "double": 1.5,
            "string": "héllo",
            "empty": "",
            "doc": {"x": 1},
            "array": [1, "two"],
            "binary": Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2] },
            "undefined": Bson::Undefined,
            "oid": ObjectId::from_bytes([7; 12]),
            "bool": true,
            "date": DateTime::from_millis(-5),
            "null": null,
            "regex": Regex { pattern: "^a".try_into().unwrap(), options: "i".try_into().unwrap() },
            "code": Bson::JavaScriptCode("f()".into()),
            "symbol": Bson::Symbol("s".into()),
            "int32": -7,
            "timestamp": Timestamp { time: 3, increment: 4 },
            "int64": 1i64 << 40,
            "decimal": Bson::Decimal128("1.25".parse().unwrap()),
            "min": Bson::MinKey,
            "max": Bson::MaxKey,
        }
    }

    #[test]
    fn every_type_reads_as_the_bson_crate_reads_it() {
        let d = every_type();
        let bytes = d.to_vec().unwrap();
        let raw = RawDocument::from_bytes(&bytes).unwrap();
        for (name, value) in &d {
            let found = unique_field(raw, name).unwrap().unwrap();
            assert_eq!(Bson::try_from(found).unwrap(), *value, "{name}");
        }
        assert!(matches!(unique_field(raw, "nothing"), Some(None)));
    }

    #[test]
    fn repeated_names_and_bad_bytes_are_refused() {
        let mut twice = bson::RawDocumentBuf::new();
        let key = <&bson::raw::CStr>::try_from("k").unwrap();
        twice.append(key, "a");
        twice.append(<&bson::raw::CStr>::try_from("j").unwrap(), 1);
        twice.append(key, 2);
        assert!(unique_field(&twice, "k").is_none());
        assert!(matches!(
            unique_field(&twice, "j"),
            Some(Some(RawBsonRef::Int32(1)))
        ));

        let bytes = doc! {"a": "xyz", "b": 1}.to_vec().unwrap();
        // Every truncation and every corrupted byte: no panic, and no
        // value unless the bytes still read.
        for cut in 5..bytes.len() {
            let mut short = bytes[..cut].to_vec();
            short[..4].copy_from_slice(&(cut as i32).to_le_bytes());
            short.push(0);
            if let Ok(raw) = RawDocument::from_bytes(&short) {
                let _ = unique_field(raw, "b");
            }
        }
        for at in 4..bytes.len() {
            for byte in [0u8, 1, 0x7F, 0xFF, 0x80] {
                let mut bad = bytes.clone();
                bad[at] = byte;
                if let Ok(raw) = RawDocument::from_bytes(&bad) {
                    let _ = unique_field(raw, "a");
                    let _ = unique_field(raw, "b");
                }
            }
        }
    }
}

/// Stored documents for property tests of what reads stored bytes
/// (filters, groups): arrays, nested documents, every numeric type
/// around its edges, NaN, null, undefined, and field names repeated as a
/// client may send them.
#[cfg(test)]
pub mod arbitrary {
    use bson::{Bson, RawArrayBuf, RawBson, RawDocumentBuf, Regex};
    use proptest::prelude::*;

    /// A stored value as written, field names possibly repeated.
    #[derive(Debug, Clone)]
    pub enum Stored {
        Leaf(Bson),
        Doc(Vec<(&'static str, Stored)>),
        Arr(Vec<Stored>),
    }

    impl Stored {
        pub fn raw(&self) -> RawBson {
            match self {
                Stored::Leaf(v) => RawBson::try_from(v.clone()).expect("a test value encodes"),
                Stored::Doc(fields) => {
                    let mut d = RawDocumentBuf::new();
                    for (k, v) in fields {
                        d.append(
                            <&bson::raw::CStr>::try_from(*k).expect("a test name"),
                            v.raw(),
                        );
                    }
                    RawBson::Document(d)
                }
                Stored::Arr(items) => {
                    let mut a = RawArrayBuf::new();
                    for v in items {
                        a.push(v.raw());
                    }
                    RawBson::Array(a)
                }
            }
        }

        /// The document of these top-level fields.
        pub fn document(fields: Vec<(&'static str, Stored)>) -> RawDocumentBuf {
            match Stored::Doc(fields).raw() {
                RawBson::Document(d) => d,
                _ => unreachable!("a document builds a document"),
            }
        }
    }

    /// Scalars of every kind a comparison treats apart: numbers of the
    /// four types around their edges, NaN, null, strings and symbols,
    /// MinKey and MaxKey.
    pub fn scalar() -> impl Strategy<Value = Bson> {
        let decimal = |s: &str| Bson::Decimal128(s.parse().expect("a test decimal"));
        prop_oneof![
            Just(Bson::Null),
            Just(Bson::MinKey),
            Just(Bson::MaxKey),
            (-2i32..3).prop_map(Bson::Int32),
            prop_oneof![
                Just(i64::MIN),
                Just(-1i64),
                Just(2),
                Just(9_007_199_254_740_993),
                Just(i64::MAX)
            ]
            .prop_map(Bson::Int64),
            prop_oneof![
                Just(f64::NAN),
                Just(-0.0),
                Just(0.5),
                Just(1.0),
                Just(2.0),
                Just(9_007_199_254_740_992.0),
                Just(f64::NEG_INFINITY)
            ]
            .prop_map(Bson::Double),
            prop_oneof![
                Just(decimal("1.00")),
                Just(decimal("-0.5")),
                Just(decimal("NaN")),
                Just(decimal("9007199254740993"))
            ],
            "[ab]{0,2}".prop_map(Bson::String),
            "[ab]{0,2}".prop_map(Bson::Symbol),
            any::<bool>().prop_map(Bson::Boolean),
            (0i64..3).prop_map(|ms| Bson::DateTime(bson::DateTime::from_millis(ms))),
        ]
    }

    pub fn name() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just("a"), Just("b"), Just("c"), Just("0"), Just("1")]
    }

    /// A stored value: a scalar (undefined and a regex too), or arrays
    /// and documents of them.
    pub fn stored() -> impl Strategy<Value = Stored> {
        let regex = Bson::RegularExpression(Regex {
            pattern: "^a".try_into().expect("a test pattern"),
            options: "".try_into().expect("no options"),
        });
        let leaf = prop_oneof![
            scalar().prop_map(Stored::Leaf),
            Just(Stored::Leaf(Bson::Undefined)),
            Just(Stored::Leaf(regex)),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec((name(), inner.clone()), 0..4).prop_map(Stored::Doc),
                proptest::collection::vec(inner, 0..3).prop_map(Stored::Arr),
            ]
        })
    }
}
