//! MongoDB's hashed-index hash function.
//!
//! Hashed indexes, hashed shard keys, the shell's `convertShardKeyToHashed()`
//! and the `$toHashedIndexKey` aggregation operator all map one BSON value to a
//! signed 64-bit integer with `BSONElementHasher::hash64` (seed 0) from
//! MongoDB's `src/mongo/db/hasher.cpp`. Chunk boundaries of a hashed shard key
//! live in that hash space, so Shardgate has to reproduce the function bit for
//! bit: an "almost right" hash routes documents to the wrong chunk and answers
//! equality queries from the wrong range, silently.
//!
//! # The algorithm
//!
//! The hash is the first eight bytes, read as a little-endian `i64`, of an MD5
//! digest over:
//!
//! 1. the seed, as a little-endian `i32`;
//! 2. the value, fed recursively as
//!    * its *canonical type* (`canonicalizeBSONType`), a little-endian `i32`.
//!      This is the sort-order class rather than the BSON type byte, which is
//!      why `Int32`, `Int64`, `Double` and `Decimal128` can collide and why a
//!      `String` and a `Symbol` with the same text hash alike;
//!    * for an element nested in a document or array (never for the top-level
//!      value): its field name followed by the NUL terminator. Array elements
//!      are named by their decimal index, `"0"`, `"1"`, ...;
//!    * the value itself:
//!      - numbers as a little-endian `i64` (see [Numbers](#numbers));
//!      - documents and arrays as their elements in order, followed by the
//!        end-of-object marker, which contributes only its canonical type
//!        (`0`). The embedded document's own length prefix is *not* hashed;
//!      - JavaScript code with scope as the code's bytes plus NUL (without
//!        either length prefix), then the scope document as above;
//!      - every other type as its raw BSON value bytes exactly as they appear
//!        on the wire. A string therefore contributes its `i32` length prefix
//!        (which counts the NUL), its UTF-8 bytes and the NUL terminator.
//!
//! # Numbers
//!
//! Numbers are squashed to an `i64` before hashing so that `42`,
//! `NumberLong(42)` and `42.0` land in the same bucket, matching the equality
//! semantics of queries. The conversion (`BSONElement::safeNumberLongForHash`)
//! is:
//!
//! * `Int32` / `Int64`: the value itself;
//! * `Double`: truncated toward zero, so `42.7` hashes like `42`. NaN hashes
//!   as `0`; values at or beyond ±2^63 (including the infinities) saturate to
//!   `i64::MAX` / `i64::MIN`, *except* exactly `2^63`, which hashes as
//!   `i64::MIN`: older servers cast it with an overflowing conversion that
//!   wrapped around, and the quirk is kept so existing indexes stay valid;
//! * `Decimal128`: rounded to the nearest integer with ties to even (the
//!   default mode of `Decimal128::toLong`), **not** truncated, so
//!   `NumberDecimal("42.7")` hashes like `43` while the double `42.7` hashes
//!   like `42`. NaN hashes as `0`; out-of-range values and the infinities
//!   saturate to `i64::MAX` / `i64::MIN`.
//!
//! # Missing fields
//!
//! A document that lacks the hashed field is indexed under the hash of `null`
//! (see [`hash_missing`]), and `$toHashedIndexKey` of a missing path returns
//! the same value. Sparse hashed indexes skip such documents instead; that is
//! the caller's decision, not this module's.
//!
//! # Scope
//!
//! The functions hash exactly the value they are given. Two things that the
//! server does around the hash are left to callers:
//!
//! * hashed indexes with a non-simple collation hash a string's collation key
//!   rather than the string itself;
//! * hashed indexes reject arrays (error 16766), although
//!   `convertShardKeyToHashed()` and `$toHashedIndexKey` hash them happily, as
//!   does [`hash_value`].
//!
//! Values that real BSON cannot carry (a document key containing a NUL byte, a
//! string longer than `i32::MAX` bytes) are hashed on a best-effort basis
//! instead of panicking; no server could have produced a hash to compare them
//! with.

use crate::query::compare::{canonical_type_rank, DecimalValue};
use bson::raw::{cstr, RawDocumentBuf};
use bson::spec::BinarySubtype;
use bson::{Binary, Bson, DbPointer, Decimal128, Document};
use md5::{Digest, Md5};

/// The seed MongoDB uses for hashed indexes and hashed shard keys
/// (`BSONElementHasher::DEFAULT_HASH_SEED`). Indexes built with another seed
/// are not supported by the server's sharding code, so neither are they here.
const DEFAULT_HASH_SEED: i32 = 0;

/// Canonical type of the end-of-object marker that closes every document.
const END_OF_OBJECT: i32 = 0;

/// MongoDB's hashed-index hash of one BSON value (seed 0).
///
/// This is the value a hashed index stores for a document whose indexed field
/// holds `value`, and what `convertShardKeyToHashed(value)` and
/// `{$toHashedIndexKey: value}` return.
pub fn hash_value(value: &Bson) -> i64 {
    let mut hasher = ElementHasher::new(DEFAULT_HASH_SEED);
    hasher.top_level_element(value);
    hasher.finish()
}

/// The hash of a missing field (hashes as null).
///
/// Hashed indexes have stored missing fields under the hash of `null` since
/// their first release, and the query planner relies on null and missing
/// sharing one index key, so the two are indistinguishable in hash space.
pub fn hash_missing() -> i64 {
    hash_value(&Bson::Null)
}

/// The hash a document with shard-key value `value` (`None`: the field
/// is missing) is stored under.
pub fn hash_of(value: Option<&Bson>) -> i64 {
    value.map_or_else(hash_missing, hash_value)
}

/// `canonicalizeBSONType` from `src/mongo/bson/bsontypes.h`: the
/// comparison class of [`canonical_type_rank`], except that MinKey is -1
/// and `undefined` is 0 of its own (comparison folds it into null's class).
fn canonical_type(value: &Bson) -> i32 {
    match value {
        Bson::MinKey => -1,
        Bson::Undefined => 0,
        other => i32::from(canonical_type_rank(other)),
    }
}

/// Incremental MD5 over the byte stream described in the module docs.
///
/// Feeding the digest directly, rather than serialising the value to BSON and
/// walking the bytes, keeps hashing infallible and allocation-light while
/// producing the very bytes the server feeds its own MD5.
struct ElementHasher {
    md5: Md5,
}

impl ElementHasher {
    fn new(seed: i32) -> Self {
        let mut md5 = Md5::new();
        md5.update(seed.to_le_bytes());
        Self { md5 }
    }

    /// The first half of the digest as a little-endian `i64`.
    fn finish(self) -> i64 {
        let digest = self.md5.finalize();
        let mut first_half = [0_u8; 8];
        for (dst, src) in first_half.iter_mut().zip(digest.iter()) {
            *dst = *src;
        }
        i64::from_le_bytes(first_half)
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.md5.update(bytes);
    }

    fn int32(&mut self, value: i32) {
        self.bytes(&value.to_le_bytes());
    }

    fn int64(&mut self, value: i64) {
        self.bytes(&value.to_le_bytes());
    }

    /// Text followed by a NUL terminator, as BSON stores field names, regex
    /// patterns and the code of a code-with-scope.
    fn cstring(&mut self, text: &str) {
        self.bytes(text.as_bytes());
        self.bytes(&[0]);
    }

    /// A BSON `string`: `i32` byte length counting the NUL, bytes, NUL.
    fn string(&mut self, text: &str) {
        self.int32(bson_length(text.len().saturating_add(1)));
        self.cstring(text);
    }

    /// The value being hashed; `hash64` hashes it without a field name.
    fn top_level_element(&mut self, value: &Bson) {
        self.int32(canonical_type(value));
        self.value(value);
    }

    /// A field inside a document, array or scope: its name is part of the hash.
    fn nested_element(&mut self, name: &str, value: &Bson) {
        self.int32(canonical_type(value));
        self.cstring(name);
        self.value(value);
    }

    fn value(&mut self, value: &Bson) {
        match value {
            Bson::Int32(number) => self.int64(i64::from(*number)),
            Bson::Int64(number) => self.int64(*number),
            Bson::Double(number) => self.int64(double_to_hash_integer(*number)),
            Bson::Decimal128(number) => self.int64(decimal_to_hash_integer(number)),
            Bson::String(text) | Bson::Symbol(text) | Bson::JavaScriptCode(text) => {
                self.string(text)
            }
            Bson::Document(document) => self.document(document),
            Bson::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    self.nested_element(&index.to_string(), item);
                }
                self.int32(END_OF_OBJECT);
            }
            Bson::JavaScriptCodeWithScope(code_with_scope) => {
                self.cstring(&code_with_scope.code);
                self.document(&code_with_scope.scope);
            }
            Bson::Binary(binary) => self.binary(binary),
            Bson::ObjectId(id) => self.bytes(&id.bytes()),
            Bson::Boolean(flag) => self.bytes(&[u8::from(*flag)]),
            Bson::DateTime(date) => self.int64(date.timestamp_millis()),
            Bson::Timestamp(timestamp) => {
                // On the wire a timestamp is one little-endian u64 with the
                // increment in the low half and the seconds in the high half.
                self.bytes(&timestamp.increment.to_le_bytes());
                self.bytes(&timestamp.time.to_le_bytes());
            }
            Bson::RegularExpression(regex) => {
                self.cstring(regex.pattern.as_str());
                self.cstring(regex.options.as_str());
            }
            Bson::DbPointer(pointer) => self.db_pointer(pointer),
            Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => {}
        }
    }

    fn document(&mut self, document: &Document) {
        for (name, value) in document {
            self.nested_element(name, value);
        }
        self.int32(END_OF_OBJECT);
    }

    /// Binary data: `i32` length, subtype byte, payload. The deprecated
    /// subtype 2 nests a second length prefix inside the payload on the wire;
    /// the `bson` crate strips it on decoding, so it is put back here.
    fn binary(&mut self, binary: &Binary) {
        let payload_len = binary.bytes.len();
        if binary.subtype == BinarySubtype::BinaryOld {
            self.int32(bson_length(payload_len.saturating_add(4)));
            self.bytes(&[u8::from(binary.subtype)]);
            self.int32(bson_length(payload_len));
        } else {
            self.int32(bson_length(payload_len));
            self.bytes(&[u8::from(binary.subtype)]);
        }
        self.bytes(&binary.bytes);
    }

    /// The deprecated DBPointer type: a BSON string (the namespace) followed
    /// by a 12-byte ObjectId.
    ///
    /// `bson::DbPointer` keeps its fields private, so the wire bytes are taken
    /// from a one-element raw document `{"": pointer}`, whose layout is fixed:
    /// a 4-byte length, the type byte and the empty key's NUL, then the value,
    /// then the document's closing NUL.
    fn db_pointer(&mut self, pointer: &DbPointer) {
        const VALUE_START: usize = 4 + 1 + 1;
        let mut wrapper = RawDocumentBuf::new();
        wrapper.append(cstr!(""), pointer.clone());
        let encoded = wrapper.as_bytes();
        let value_end = encoded.len().saturating_sub(1);
        if let Some(value) = encoded.get(VALUE_START..value_end) {
            self.bytes(value);
        }
    }
}

/// A length as BSON's `i32`. Real BSON values are capped at 16 MiB, so the
/// saturation only matters for inputs no server could hold.
fn bson_length(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}

/// `safeNumberLongForHash` for doubles: truncate toward zero, NaN to zero,
/// saturate out-of-range values, and map exactly 2^63 to `i64::MIN`.
fn double_to_hash_integer(value: f64) -> i64 {
    /// 2^63, the smallest double too large for an `i64`.
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

    if value == TWO_POW_63 {
        // Historical wrap-around of the overflowing cast, preserved on purpose.
        i64::MIN
    } else {
        // Rust's float-to-int `as` truncates toward zero, maps NaN to 0 and
        // saturates at the `i64` bounds: exactly `safeNumberLong`'s contract.
        value as i64
    }
}

/// `safeNumberLong` for decimals: NaN to zero, round half to even, saturate
/// at the `i64` bounds.
fn decimal_to_hash_integer(value: &Decimal128) -> i64 {
    match DecimalValue::from_decimal128(value) {
        DecimalValue::NaN => 0,
        DecimalValue::Infinity { negative: false } => i64::MAX,
        DecimalValue::Infinity { negative: true } => i64::MIN,
        DecimalValue::Finite {
            negative,
            coefficient,
            exponent,
        } => {
            let magnitude = round_half_even(coefficient, exponent)
                .and_then(|magnitude| i128::try_from(magnitude).ok())
                .unwrap_or(i128::MAX);
            let signed = if negative { -magnitude } else { magnitude };
            i64::try_from(signed).unwrap_or(if negative { i64::MIN } else { i64::MAX })
        }
    }
}

/// `coefficient * 10^exponent` rounded to the nearest integer, ties to even;
/// `None` if the result does not fit a `u128` (it then saturates anyway).
fn round_half_even(coefficient: u128, exponent: i32) -> Option<u128> {
    if coefficient == 0 {
        return Some(0);
    }
    if exponent >= 0 {
        let scale = 10_u128.checked_pow(exponent.unsigned_abs())?;
        return coefficient.checked_mul(scale);
    }

    // Coefficients stay below 10^34, so a divisor too large for `u128` leaves
    // a value far below one half.
    let Some(divisor) = 10_u128.checked_pow(exponent.unsigned_abs()) else {
        return Some(0);
    };
    let quotient = coefficient / divisor;
    let remainder = coefficient % divisor;
    // `remainder` against `divisor - remainder` compares the fraction with one
    // half without any risk of overflow.
    let round_up = match remainder.cmp(&(divisor - remainder)) {
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => quotient % 2 == 1,
        std::cmp::Ordering::Greater => true,
    };
    Some(quotient + u128::from(round_up))
}

#[cfg(test)]
mod tests {
    //! Pinned values come from MongoDB's own sources:
    //!
    //! * `src/mongo/db/hasher_test.cpp` (BSONElementHasher unit tests, which
    //!   call `hash64(element, 0)` and describe their values as "consistent
    //!   across platforms and server versions");
    //! * `src/mongo/db/exec/expression/evaluate_index_test.cpp`
    //!   (`ExpressionToHashedIndexKeyTest`, the `$toHashedIndexKey` unit
    //!   tests; the same cases lived in `pipeline/expression_test.cpp` before
    //!   the expression code was split up);
    //! * the MongoDB manual page for `$toHashedIndexKey`.

    use super::*;
    use crate::query::compare::MAX_COEFFICIENT;
    use bson::oid::ObjectId;
    use bson::{doc, DateTime, JavaScriptCodeWithScope, Regex, Timestamp};
    use std::str::FromStr;

    fn oid(hex: &str) -> Bson {
        Bson::ObjectId(ObjectId::parse_str(hex).unwrap())
    }

    fn decimal(text: &str) -> Bson {
        Bson::Decimal128(Decimal128::from_str(text).unwrap())
    }

    fn regex(pattern: &str, options: &str) -> Bson {
        Bson::RegularExpression(Regex {
            pattern: pattern.to_owned().try_into().unwrap(),
            options: options.to_owned().try_into().unwrap(),
        })
    }

    fn binary(subtype: BinarySubtype, bytes: &[u8]) -> Bson {
        Bson::Binary(Binary {
            subtype,
            bytes: bytes.to_vec(),
        })
    }

    /// `bson::DbPointer` can only be obtained by decoding BSON, so build the
    /// document `{p: DBPointer(namespace, id)}` by hand and decode it.
    fn db_pointer(namespace: &str, id_hex: &str) -> Bson {
        let mut value = Vec::new();
        value.extend_from_slice(&(namespace.len() as i32 + 1).to_le_bytes());
        value.extend_from_slice(namespace.as_bytes());
        value.push(0);
        value.extend_from_slice(&ObjectId::parse_str(id_hex).unwrap().bytes());

        let mut body = vec![0x0C, b'p', 0];
        body.extend_from_slice(&value);
        body.push(0);
        let mut bytes = ((body.len() + 4) as i32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&body);

        let document = Document::from_reader(bytes.as_slice()).unwrap();
        let pointer = document.get("p").unwrap().clone();
        assert!(matches!(pointer, Bson::DbPointer(_)));
        pointer
    }

    // --- MongoDB manual ---------------------------------------------------

    /// Manual, `$toHashedIndexKey`, "Example" section.
    #[test]
    fn manual_string_example() {
        assert_eq!(
            hash_value(&Bson::from("string to hash")),
            763543691661428748
        );
    }

    // --- hasher_test.cpp: HashIntOrLongOrDouble ---------------------------

    #[test]
    fn int_long_and_double_hash_alike() {
        let expected = -944302157085130861;
        assert_eq!(hash_value(&Bson::Int32(42)), expected);
        assert_eq!(hash_value(&Bson::Int64(42)), expected);
        assert_eq!(hash_value(&Bson::Double(42.0)), expected);
        assert_eq!(hash_value(&Bson::Double(42.123)), expected);
        // The brief's own example: fractions are truncated toward zero.
        assert_eq!(hash_value(&Bson::Double(42.7)), expected);
    }

    #[test]
    fn small_numbers() {
        for zero in [Bson::Int32(0), Bson::Int64(0), Bson::Double(0.456)] {
            assert_eq!(hash_value(&zero), 4854801880128277513);
        }
        for one in [Bson::Int32(1), Bson::Int64(1), Bson::Double(1.987)] {
            assert_eq!(hash_value(&one), 5902408780260971510);
        }
        for minus_one in [Bson::Int32(-1), Bson::Int64(-1), Bson::Double(-1.789)] {
            assert_eq!(hash_value(&minus_one), 1140205862565771219);
        }
    }

    #[test]
    fn nan_hashes_as_zero() {
        // hasher_test.cpp: "NAN is treated as zero" (signaling and quiet).
        assert_eq!(hash_value(&Bson::Double(f64::NAN)), 4854801880128277513);
        let signaling_nan = f64::from_bits(0x7ff4_0000_0000_0000);
        assert!(signaling_nan.is_nan());
        assert_eq!(
            hash_value(&Bson::Double(signaling_nan)),
            4854801880128277513
        );
    }

    #[test]
    fn int32_limits() {
        let min = i32::MIN;
        for value in [
            Bson::Int32(min),
            Bson::Int64(min.into()),
            Bson::Double(min.into()),
        ] {
            assert_eq!(hash_value(&value), 6165898260261354870);
        }
        let max = i32::MAX;
        for value in [
            Bson::Int32(max),
            Bson::Int64(max.into()),
            Bson::Double(max.into()),
        ] {
            assert_eq!(hash_value(&value), 1143184177162245883);
        }
    }

    #[test]
    fn out_of_range_doubles_saturate() {
        assert_eq!(hash_value(&Bson::Int64(i64::MAX)), 921523596458303250);
        assert_eq!(hash_value(&Bson::Double(f64::MAX)), 921523596458303250);
        assert_eq!(hash_value(&Bson::Int64(i64::MIN)), 4532067210535695462);
        assert_eq!(hash_value(&Bson::Double(-f64::MAX)), 4532067210535695462);
        // hasher_test.cpp, VeryLargeAndSmallDoubles: maxInt^2 and -(maxInt^2).
        let huge = (i64::MAX as f64) * (i64::MAX as f64);
        assert_eq!(hash_value(&Bson::Double(huge)), 921523596458303250);
        assert_eq!(hash_value(&Bson::Double(-huge)), 4532067210535695462);
        assert_eq!(hash_value(&Bson::Double(f64::INFINITY)), 921523596458303250);
        assert_eq!(
            hash_value(&Bson::Double(f64::NEG_INFINITY)),
            4532067210535695462
        );
    }

    #[test]
    fn two_pow_63_keeps_its_historical_wrap_around() {
        // bsonelement.h, safeNumberLongForHash: exactly 2^63 hashes as -2^63.
        assert_eq!(
            double_to_hash_integer(9_223_372_036_854_775_808.0),
            i64::MIN
        );
        assert_eq!(
            hash_value(&Bson::Double(9_223_372_036_854_775_808.0)),
            hash_value(&Bson::Int64(i64::MIN))
        );
        assert_eq!(
            double_to_hash_integer(-9_223_372_036_854_775_808.0),
            i64::MIN
        );
        assert_eq!(
            double_to_hash_integer(18_446_744_073_709_551_616.0),
            i64::MAX
        );
    }

    // --- hasher_test.cpp: the other types ---------------------------------

    #[test]
    fn min_and_max_key() {
        assert_eq!(hash_value(&Bson::MinKey), 7961148599568647290);
        assert_eq!(hash_value(&Bson::MaxKey), 5504842513779440750);
    }

    #[test]
    fn undefined_and_null() {
        assert_eq!(hash_value(&Bson::Undefined), 40158834000849533);
        assert_eq!(hash_value(&Bson::Null), 2338878944348059895);
    }

    #[test]
    fn strings_and_symbols() {
        assert_eq!(hash_value(&Bson::from("abc")), 8478485326885698097);
        assert_eq!(
            hash_value(&Bson::Symbol("abc".to_owned())),
            8478485326885698097
        );
        assert_eq!(hash_value(&Bson::from("")), 2049396243249673340);
        assert_eq!(
            hash_value(&Bson::Symbol(String::new())),
            2049396243249673340
        );
    }

    #[test]
    fn embedded_documents() {
        let document = doc! { "a": "abc", "b": 123_i64 };
        assert_eq!(hash_value(&Bson::Document(document)), 4771603801758380216);
        assert_eq!(hash_value(&Bson::Document(doc! {})), 7980500913326740417);
    }

    #[test]
    fn arrays() {
        let array = Bson::Array(vec!["bar".into(), "baz".into(), "qux".into()]);
        assert_eq!(hash_value(&array), -2938911267422831539);
        assert_eq!(hash_value(&Bson::Array(Vec::new())), 8849948234993459283);
    }

    #[test]
    fn binary_data() {
        let bytes = [0, 1, 2, 3, 4, 6];
        assert_eq!(
            hash_value(&binary(BinarySubtype::Generic, &bytes)),
            7252465090394235301
        );
        // bdtCustom is subtype 128, the first user-defined subtype.
        assert_eq!(
            hash_value(&binary(BinarySubtype::UserDefined(128), &bytes)),
            5736670452907618262
        );
        let uuid: Vec<u8> = (0..16).collect();
        assert_eq!(
            hash_value(&binary(BinarySubtype::Uuid, &uuid)),
            6084661258071355978
        );
    }

    #[test]
    fn object_ids() {
        assert_eq!(
            hash_value(&oid("010203040506070809101112")),
            -5588663249627035708
        );
        assert_eq!(
            hash_value(&oid("000000000000000000000000")),
            -4293118519463489418
        );
    }

    #[test]
    fn booleans() {
        assert_eq!(hash_value(&Bson::Boolean(true)), 6405873908747105701);
        assert_eq!(hash_value(&Bson::Boolean(false)), 6289544573401934092);
    }

    #[test]
    fn dates() {
        let date = DateTime::from_millis(0x5566_7788_1122_3344);
        assert_eq!(hash_value(&Bson::DateTime(date)), 4476222765095560467);
        let epoch = DateTime::from_millis(0);
        assert_eq!(hash_value(&Bson::DateTime(epoch)), -1178696894582842035);
    }

    #[test]
    fn regular_expressions() {
        assert_eq!(hash_value(&regex("mongodb", "")), -7275792090268217043);
        assert_eq!(hash_value(&regex(".*", "i")), 7095855029187981886);
    }

    #[test]
    fn db_pointers() {
        let id = "010203040506070809101112";
        assert_eq!(hash_value(&db_pointer("c", id)), 940175826736461384);
        assert_eq!(hash_value(&db_pointer("db.c", id)), 2426768198104018194);
    }

    #[test]
    fn javascript_code() {
        let code = "func f() { return 1; }";
        assert_eq!(
            hash_value(&Bson::JavaScriptCode(code.to_owned())),
            6861638109178014270
        );
        let with_scope = Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
            code: code.to_owned(),
            scope: doc! { "c": true },
        });
        assert_eq!(hash_value(&with_scope), 501342939894575968);
    }

    // --- evaluate_index_test.cpp: $toHashedIndexKey -----------------------

    #[test]
    fn to_hashed_index_key_cases() {
        assert_eq!(
            hash_value(&Bson::from("hashThisStringLiteral")),
            -5776344739422278694
        );
        assert_eq!(hash_value(&Bson::Int32(123)), -6548868637522515075);
        let origin = Timestamp {
            time: 0,
            increment: 0,
        };
        assert_eq!(hash_value(&Bson::Timestamp(origin)), -7867208682377458672);
        assert_eq!(
            hash_value(&oid("47cc67093475061e3d95369d")),
            1576265281381834298
        );
        assert_eq!(
            hash_value(&Bson::DateTime(DateTime::from_millis(0))),
            -1178696894582842035
        );
        // {$pow: [2, 4]} evaluates to the int 16.
        assert_eq!(hash_value(&Bson::Int32(16)), 2598032665634823220);
        assert_eq!(hash_value(&Bson::Undefined), 40158834000849533);
    }

    #[test]
    fn missing_hashes_as_null() {
        // evaluate_index_test.cpp, MissingInputValueSucceeds / NullInputSucceeds.
        assert_eq!(hash_missing(), 2338878944348059895);
        assert_eq!(hash_missing(), hash_value(&Bson::Null));
    }

    // --- Properties following from the source -----------------------------

    #[test]
    fn timestamps_no_longer_collide_with_dates() {
        // Old hasher_test.cpp versions expected Timestamp(0x55667788 s,
        // inc 0x11223344) to equal the date 0x5566778811223344, because both
        // types once shared canonical type 45. Timestamps now sort as 47.
        let timestamp = Timestamp {
            time: 0x5566_7788,
            increment: 0x1122_3344,
        };
        assert_ne!(hash_value(&Bson::Timestamp(timestamp)), 4476222765095560467);
    }

    #[test]
    fn nested_numbers_are_squashed_recursively() {
        // hasher_test.cpp, RecursiveSquashingIntsAndDoubles.
        let ints = doc! { "a": 3, "b": [3.1, { "c": 3 }] };
        let doubles = doc! { "a": 3.1, "b": [3, { "c": 3.0 }] };
        assert_eq!(
            hash_value(&Bson::Document(ints)),
            hash_value(&Bson::Document(doubles))
        );
    }

    #[test]
    fn structure_matters() {
        // hasher_test.cpp, ArrayAndSubobjectHashesDiffer and
        // SubDocumentGroupingHashesDiffer.
        let object = doc! { "0": 0, "1": 1 };
        let array = Bson::Array(vec![Bson::Int32(0), Bson::Int32(1)]);
        assert_ne!(hash_value(&Bson::Document(object)), hash_value(&array));

        let grouped = doc! { "a": {}, "b": 1 };
        let nested = doc! { "a": { "b": 1 } };
        assert_ne!(
            hash_value(&Bson::Document(grouped)),
            hash_value(&Bson::Document(nested))
        );
    }

    #[test]
    fn code_with_scope_squashes_scope_numbers() {
        // hasher_test.cpp, CodeWithScopeSquashesScopeIntsAndDoubles.
        let code = "print('this is some stupid code')";
        let with = |scope: Document| {
            hash_value(&Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                code: code.to_owned(),
                scope,
            }))
        };
        assert_eq!(with(doc! { "a": 3 }), with(doc! { "a": 3.1 }));
        assert_ne!(with(doc! { "a": 3 }), with(doc! { "a": 4 }));
    }

    #[test]
    fn old_binary_subtype_keeps_its_inner_length() {
        // Subtype 2 is hashed as its wire form, which repeats the length.
        let old = binary(BinarySubtype::BinaryOld, &[1, 2, 3]);
        let generic = binary(BinarySubtype::Generic, &[1, 2, 3]);
        assert_ne!(hash_value(&old), hash_value(&generic));

        let mut expected = ElementHasher::new(0);
        expected.int32(30);
        expected.int32(7);
        expected.bytes(&[2]);
        expected.int32(3);
        expected.bytes(&[1, 2, 3]);
        assert_eq!(hash_value(&old), expected.finish());
    }

    #[test]
    fn decimals_round_half_to_even() {
        assert_eq!(hash_value(&decimal("42")), hash_value(&Bson::Int32(42)));
        assert_eq!(hash_value(&decimal("4.2E+1")), hash_value(&Bson::Int32(42)));
        assert_eq!(hash_value(&decimal("42.000")), hash_value(&Bson::Int32(42)));
        // Unlike doubles, decimals round to nearest rather than truncate.
        assert_eq!(hash_value(&decimal("42.7")), hash_value(&Bson::Int32(43)));
        assert_eq!(hash_value(&decimal("42.5")), hash_value(&Bson::Int32(42)));
        assert_eq!(hash_value(&decimal("43.5")), hash_value(&Bson::Int32(44)));
        assert_eq!(hash_value(&decimal("-2.5")), hash_value(&Bson::Int32(-2)));
        assert_eq!(hash_value(&decimal("-2.51")), hash_value(&Bson::Int32(-3)));
        assert_eq!(hash_value(&decimal("0.5")), hash_value(&Bson::Int32(0)));
        assert_eq!(hash_value(&decimal("-0")), hash_value(&Bson::Int32(0)));
        assert_eq!(hash_value(&decimal("1E-6176")), hash_value(&Bson::Int32(0)));
        assert_eq!(
            hash_value(&decimal("0.4999999999999999999999999999999999")),
            hash_value(&Bson::Int32(0))
        );
    }

    #[test]
    fn decimal_special_values_and_saturation() {
        let max = hash_value(&Bson::Int64(i64::MAX));
        let min = hash_value(&Bson::Int64(i64::MIN));
        assert_eq!(hash_value(&decimal("NaN")), hash_value(&Bson::Int32(0)));
        assert_eq!(hash_value(&decimal("-NaN")), hash_value(&Bson::Int32(0)));
        assert_eq!(hash_value(&decimal("Infinity")), max);
        assert_eq!(hash_value(&decimal("-Infinity")), min);
        assert_eq!(hash_value(&decimal("1E+30")), max);
        assert_eq!(hash_value(&decimal("-1E+6111")), min);
        assert_eq!(hash_value(&decimal("9223372036854775807")), max);
        assert_eq!(hash_value(&decimal("9223372036854775807.5")), max);
        assert_eq!(hash_value(&decimal("9223372036854775808")), max);
        assert_eq!(hash_value(&decimal("-9223372036854775808")), min);
        assert_eq!(hash_value(&decimal("-9223372036854775808.5")), min);
        assert_eq!(
            hash_value(&decimal("9223372036854775806.5")),
            hash_value(&Bson::Int64(i64::MAX - 1))
        );
    }

    #[test]
    fn decimal_decoding() {
        assert_eq!(
            DecimalValue::from_decimal128(&Decimal128::from_str("-12.5").unwrap()),
            DecimalValue::Finite {
                negative: true,
                coefficient: 125,
                exponent: -1,
            }
        );
        // Non-canonical encodings denote zero: a coefficient above 10^34 - 1
        // in the normal form, and anything in the "large coefficient" form.
        let too_big = (6176_u128 << 113) | (MAX_COEFFICIENT + 1);
        assert!(matches!(
            DecimalValue::from_bits(too_big),
            DecimalValue::Finite { coefficient: 0, .. }
        ));
        let large_form = (0b11_u128 << 125) | (6176_u128 << 111) | 5;
        assert!(matches!(
            DecimalValue::from_bits(large_form),
            DecimalValue::Finite { coefficient: 0, .. }
        ));
        assert_eq!(
            decimal_to_hash_integer(&Decimal128::from_bytes(too_big.to_le_bytes())),
            0
        );
    }
}
