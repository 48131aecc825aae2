//! Order-preserving byte encoding of BSON values: the keys of `_id` and
//! secondary indexes, so that the storage engine can order and range-scan
//! them with plain byte comparison.
//!
//! The promise, checked by the property tests below: for any values `a`, `b`,
//! `encode_id(a).cmp(&encode_id(b)) == query::compare::compare(a, b)`. Values
//! MongoDB considers equal encode to the same bytes (`1`, `1.0`,
//! `NumberLong(1)` and `NumberDecimal("1.00")` all do), so an equality lookup
//! is one key lookup. The encoding is not decoded; the original value is
//! stored beside it.
//!
//! Layout of one value: a type byte, then a payload.
//!
//! * Type bytes follow MongoDB's canonical type order (MinKey, null, numbers,
//!   string/symbol, object, array, binData, ObjectId, bool, date, timestamp,
//!   regex, DBPointer, code, code-with-scope, MaxKey). `0x00` is reserved to
//!   end a document or array, so a shorter container sorts first.
//! * Numbers (int32, int64, double, Decimal128 alike): a class byte (NaN <
//!   −∞ < negative < zero < positive < +∞), then for finite non-zero values
//!   the exact binary value `±1.f × 2^e`: `e` as a biased big-endian `u16`,
//!   then the fraction bits `f` in groups of seven, each group followed by a
//!   "more groups follow" bit, trailing zero groups dropped. Negative values
//!   have these bytes inverted. Every int64 and double is exact. A Decimal128
//!   that is not a dyadic rational (`0.1`) gets its first 128 fraction bits
//!   plus a sticky bit that says "something non-zero follows"; that places it
//!   exactly among all doubles and int64s, and two distinct Decimal128 values
//!   always differ within those bits (they differ by at least `2^(e−113)`), so
//!   the order of decimals is exact too. Only Decimal128 values that are not
//!   canonical (coefficient above 10^34 − 1) are read as zero, as the
//!   Decimal128 specification says. Cost: a decimal with a small exponent
//!   (`123.45`) encodes in about a microsecond; the extremes of the exponent
//!   range (`1E-6176`) need big-integer division over ~14 000 bits, a few
//!   hundred microseconds.
//! * Strings (and symbols, code, field names, regex parts): the UTF-8 bytes
//!   with each `0x00` written `0x00 0xFF`, ended by `0x00 0x00`: bytewise
//!   order, shorter first, embedded NULs allowed.
//! * Documents: per field, the value's type byte, the field name, the
//!   payload; then `0x00`. Arrays: each element's full encoding; then `0x00`.
//! * binData: length (`u32` BE), subtype, bytes — MongoDB orders by length
//!   first. Dates are sign-flipped big-endian; timestamps are `(t, i)` BE.
//!
//! Every value's encoding is prefix-free (no encoding is a proper prefix of
//! another), which is what lets [`encode_key`] concatenate components and
//! invert descending ones and still order compound keys component by
//! component.

use bson::{Bson, Decimal128, Document};

use crate::query::compare::DecimalValue;

/// Type bytes, in MongoDB's canonical order of types.
mod ty {
    /// Ends a document or an array: below every type byte.
    pub const END: u8 = 0x00;
    pub const MIN_KEY: u8 = 0x0A;
    /// Null and undefined share a rank and compare equal.
    pub const NULL: u8 = 0x14;
    pub const NUMBER: u8 = 0x1E;
    /// Strings and symbols share a rank and compare by content.
    pub const STRING: u8 = 0x28;
    pub const OBJECT: u8 = 0x32;
    pub const ARRAY: u8 = 0x3C;
    pub const BINARY: u8 = 0x46;
    pub const OBJECT_ID: u8 = 0x50;
    pub const BOOL: u8 = 0x5A;
    pub const DATE: u8 = 0x64;
    pub const TIMESTAMP: u8 = 0x6E;
    pub const REGEX: u8 = 0x78;
    pub const DB_POINTER: u8 = 0x82;
    pub const CODE: u8 = 0x8C;
    pub const CODE_WITH_SCOPE: u8 = 0x96;
    pub const MAX_KEY: u8 = 0xF0;
}

/// Number classes, the first payload byte of every number.
mod class {
    pub const NAN: u8 = 0x10;
    pub const NEG_INFINITY: u8 = 0x20;
    pub const NEGATIVE: u8 = 0x30;
    pub const ZERO: u8 = 0x40;
    pub const POSITIVE: u8 = 0x50;
    pub const POS_INFINITY: u8 = 0x60;
}

/// Added to the binary exponent so it encodes as an unsigned `u16`. Binary
/// exponents of Decimal128 values lie within about ±20 600.
const EXPONENT_BIAS: i64 = 0x8000;

/// Appends the encoding of `v` to `out`.
pub fn encode_value(v: &Bson, out: &mut Vec<u8>) {
    out.push(type_byte(v));
    encode_payload(v, out);
}

/// Encodes a compound index key; a component marked descending (`true`) has
/// its bytes inverted, so it sorts in reverse while the key stays ordered
/// component by component.
pub fn encode_key(values: &[(&Bson, bool)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 * values.len());
    for &(value, descending) in values {
        let start = out.len();
        encode_value(value, &mut out);
        if descending {
            invert(&mut out[start..]);
        }
    }
    out
}

/// Encodes an `_id`: a single ascending component.
pub fn encode_id(v: &Bson) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    encode_value(v, &mut out);
    out
}

fn invert(bytes: &mut [u8]) {
    for b in bytes {
        *b = !*b;
    }
}

fn type_byte(v: &Bson) -> u8 {
    match v {
        Bson::MinKey => ty::MIN_KEY,
        Bson::Null | Bson::Undefined => ty::NULL,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => ty::NUMBER,
        Bson::String(_) | Bson::Symbol(_) => ty::STRING,
        Bson::Document(_) => ty::OBJECT,
        Bson::Array(_) => ty::ARRAY,
        Bson::Binary(_) => ty::BINARY,
        Bson::ObjectId(_) => ty::OBJECT_ID,
        Bson::Boolean(_) => ty::BOOL,
        Bson::DateTime(_) => ty::DATE,
        Bson::Timestamp(_) => ty::TIMESTAMP,
        Bson::RegularExpression(_) => ty::REGEX,
        Bson::DbPointer(_) => ty::DB_POINTER,
        Bson::JavaScriptCode(_) => ty::CODE,
        Bson::JavaScriptCodeWithScope(_) => ty::CODE_WITH_SCOPE,
        Bson::MaxKey => ty::MAX_KEY,
    }
}

fn encode_payload(v: &Bson, out: &mut Vec<u8>) {
    match v {
        Bson::MinKey | Bson::MaxKey | Bson::Null | Bson::Undefined => {}
        Bson::Int32(i) => encode_i64(i64::from(*i), out),
        Bson::Int64(i) => encode_i64(*i, out),
        Bson::Double(d) => encode_f64(*d, out),
        Bson::Decimal128(d) => encode_decimal(d, out),
        Bson::String(s) | Bson::Symbol(s) | Bson::JavaScriptCode(s) => {
            encode_str(s.as_bytes(), out)
        }
        Bson::Document(doc) => encode_document(doc, out),
        Bson::Array(items) => {
            for item in items {
                encode_value(item, out);
            }
            out.push(ty::END);
        }
        Bson::Binary(bin) => {
            out.extend_from_slice(&length_u32(bin.bytes.len()).to_be_bytes());
            out.push(u8::from(bin.subtype));
            out.extend_from_slice(&bin.bytes);
        }
        Bson::ObjectId(oid) => out.extend_from_slice(&oid.bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::DateTime(dt) => out.extend_from_slice(&flip_sign(dt.timestamp_millis())),
        Bson::Timestamp(ts) => {
            out.extend_from_slice(&ts.time.to_be_bytes());
            out.extend_from_slice(&ts.increment.to_be_bytes());
        }
        Bson::RegularExpression(re) => {
            encode_str(re.pattern.as_str().as_bytes(), out);
            encode_str(re.options.as_str().as_bytes(), out);
        }
        Bson::DbPointer(_) => {
            // MongoDB orders DBPointers by namespace length, then namespace,
            // then ObjectId.
            let (namespace, oid) = db_pointer_parts(v).unwrap_or_default();
            out.extend_from_slice(&length_u32(namespace.len()).to_be_bytes());
            out.extend_from_slice(&namespace);
            out.extend_from_slice(&oid);
        }
        Bson::JavaScriptCodeWithScope(cws) => {
            encode_str(cws.code.as_bytes(), out);
            encode_document(&cws.scope, out);
        }
    }
}

fn encode_document(doc: &Document, out: &mut Vec<u8>) {
    for (name, value) in doc {
        out.push(type_byte(value));
        encode_str(name.as_bytes(), out);
        encode_payload(value, out);
    }
    out.push(ty::END);
}

/// Bytes in order, each `0x00` escaped as `0x00 0xFF`, ended by `0x00 0x00`.
fn encode_str(bytes: &[u8], out: &mut Vec<u8>) {
    let mut parts = bytes.split(|&b| b == 0);
    if let Some(first) = parts.next() {
        out.extend_from_slice(first);
    }
    for part in parts {
        out.extend_from_slice(&[0x00, 0xFF]);
        out.extend_from_slice(part);
    }
    out.extend_from_slice(&[0x00, 0x00]);
}

/// BSON lengths are `i32`, so this never saturates for a value that came
/// off the wire; saturating keeps an absurd in-memory value from panicking.
fn length_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn flip_sign(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

/// The namespace bytes and ObjectId of a DBPointer, whose fields the `bson`
/// crate keeps private: read back from the value's own BSON encoding.
fn db_pointer_parts(v: &Bson) -> Option<(Vec<u8>, [u8; 12])> {
    let mut doc = Document::new();
    doc.insert("", v.clone());
    let bytes = doc.to_vec().ok()?;
    // int32 document length, type byte 0x0C, empty name "\0", then the value:
    // int32 string length (with its NUL), the namespace, NUL, 12-byte ObjectId.
    let value = bytes.get(6..)?;
    let len = usize::try_from(i32::from_le_bytes(value.get(..4)?.try_into().ok()?)).ok()?;
    let namespace = value.get(4..(4 + len).checked_sub(1)?)?.to_vec();
    let oid: [u8; 12] = value.get(4 + len..4 + len + 12)?.try_into().ok()?;
    Some((namespace, oid))
}

/// A finite, non-zero number `±(1 + fraction/2^128 + sticky/2^129) × 2^exponent`
/// with `sticky` standing for "some non-zero bits beyond the 128th".
struct Binary {
    negative: bool,
    exponent: i64,
    fraction: u128,
    sticky: bool,
}

fn encode_i64(v: i64, out: &mut Vec<u8>) {
    if v == 0 {
        out.push(class::ZERO);
        return;
    }
    let magnitude = v.unsigned_abs();
    let top = 63 - magnitude.leading_zeros();
    encode_binary(
        Binary {
            negative: v < 0,
            exponent: i64::from(top),
            fraction: below_leading_bit(magnitude, top),
            sticky: false,
        },
        out,
    );
}

fn encode_f64(v: f64, out: &mut Vec<u8>) {
    if v.is_nan() {
        out.push(class::NAN);
        return;
    }
    if v == 0.0 {
        out.push(class::ZERO);
        return;
    }
    if v.is_infinite() {
        out.push(if v < 0.0 {
            class::NEG_INFINITY
        } else {
            class::POS_INFINITY
        });
        return;
    }
    let bits = v.to_bits();
    let biased = ((bits >> 52) & 0x7FF) as i64;
    let mantissa = bits & ((1 << 52) - 1);
    let (exponent, fraction) = if biased == 0 {
        // Subnormal: mantissa × 2^-1074, normalised at its highest set bit.
        let top = 63 - mantissa.leading_zeros();
        (i64::from(top) - 1074, below_leading_bit(mantissa, top))
    } else {
        (biased - 1023, u128::from(mantissa) << 76)
    };
    encode_binary(
        Binary {
            negative: v < 0.0,
            exponent,
            fraction,
            sticky: false,
        },
        out,
    );
}

/// The `top` bits of `magnitude` below its leading one (at bit `top`),
/// left-aligned in a `u128`.
fn below_leading_bit(magnitude: u64, top: u32) -> u128 {
    let rest = u128::from(magnitude) & ((1u128 << top) - 1);
    rest.checked_shl(128 - top).unwrap_or(0)
}

fn encode_decimal(d: &Decimal128, out: &mut Vec<u8>) {
    let (negative, coefficient, exponent10) = match DecimalValue::from_decimal128(d) {
        DecimalValue::NaN => {
            out.push(class::NAN);
            return;
        }
        DecimalValue::Infinity { negative } => {
            out.push(if negative {
                class::NEG_INFINITY
            } else {
                class::POS_INFINITY
            });
            return;
        }
        DecimalValue::Finite {
            negative,
            coefficient,
            exponent,
        } => (negative, coefficient, i64::from(exponent)),
    };
    if coefficient == 0 {
        out.push(class::ZERO);
        return;
    }
    let (exponent, fraction, sticky) = decimal_to_binary(coefficient, exponent10);
    encode_binary(
        Binary {
            negative,
            exponent,
            fraction,
            sticky,
        },
        out,
    );
}

/// `coefficient × 10^exponent10` (coefficient > 0) as binary exponent,
/// 128 fraction bits and sticky bit. Since `10^q = 5^q × 2^q`, only powers of
/// five need big integers.
fn decimal_to_binary(coefficient: u128, exponent10: i64) -> (i64, u128, bool) {
    let five_power = exponent10.unsigned_abs();
    if exponent10 >= 0 {
        let n = Big::from_u128(coefficient).mul(&Big::pow5(five_power));
        let (top, fraction, sticky) = n.normalised();
        (top + exponent10, fraction, sticky)
    } else {
        let (top, fraction, sticky) = Big::from_u128(coefficient).divide(&Big::pow5(five_power));
        (top + exponent10, fraction, sticky)
    }
}

fn encode_binary(b: Binary, out: &mut Vec<u8>) {
    out.push(if b.negative {
        class::NEGATIVE
    } else {
        class::POSITIVE
    });
    let start = out.len();
    let biased = (b.exponent + EXPONENT_BIAS).clamp(0, i64::from(u16::MAX)) as u16;
    out.extend_from_slice(&biased.to_be_bytes());
    encode_fraction(b.fraction, b.sticky, out);
    if b.negative {
        invert(&mut out[start..]);
    }
}

/// The 129-bit string `fraction ‖ sticky` in groups of seven bits, high to
/// low, each shifted left with a low bit set when another group follows;
/// trailing zero groups are dropped, but at least one group is written.
/// Shorter (= zero-padded) strings sort first, and the last byte's clear
/// low bit makes the encoding prefix-free.
fn encode_fraction(fraction: u128, sticky: bool, out: &mut Vec<u8>) {
    // Group g holds bits 7g..7g+7; the last group (18) is fraction bits 126
    // and 127, then the sticky bit.
    let group = |g: u32| -> u8 {
        if g < 18 {
            ((fraction >> (121 - 7 * g)) & 0x7F) as u8
        } else {
            (((fraction & 0b11) as u8) << 5) | (u8::from(sticky) << 4)
        }
    };
    let last_one = if sticky {
        Some(128)
    } else if fraction != 0 {
        Some(127 - fraction.trailing_zeros())
    } else {
        None
    };
    let groups = last_one.map_or(1, |i| i / 7 + 1);
    for g in 0..groups {
        out.push((group(g) << 1) | u8::from(g + 1 < groups));
    }
}

/// A small unsigned big integer (little-endian `u32` limbs, no high zero
/// limbs), just enough to place a Decimal128 among binary numbers exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn from_u128(mut v: u128) -> Big {
        let mut limbs = Vec::with_capacity(4);
        while v != 0 {
            limbs.push(v as u32);
            v >>= 32;
        }
        Big(limbs)
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    /// 5^n, multiplying by 5^13 (the largest power of five in a `u32`) at a time.
    fn pow5(mut n: u64) -> Big {
        const FIVE_13: u32 = 1_220_703_125;
        let mut r = Big::from_u128(1);
        while n >= 13 {
            r.mul_small(FIVE_13);
            n -= 13;
        }
        r.mul_small(5u32.pow(n as u32));
        r
    }

    fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for limb in &mut self.0 {
            let p = u64::from(*limb) * u64::from(m) + carry;
            *limb = p as u32;
            carry = p >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
        self.trim();
    }

    fn mul(&self, other: &Big) -> Big {
        let mut r = vec![0u32; self.0.len() + other.0.len()];
        for (i, &a) in self.0.iter().enumerate() {
            let mut carry = 0u64;
            for (j, &b) in other.0.iter().enumerate() {
                let t = u64::from(r[i + j]) + u64::from(a) * u64::from(b) + carry;
                r[i + j] = t as u32;
                carry = t >> 32;
            }
            r[i + other.0.len()] = carry as u32;
        }
        let mut r = Big(r);
        r.trim();
        r
    }

    fn bits(&self) -> u64 {
        match self.0.last() {
            None => 0,
            Some(&top) => 32 * (self.0.len() as u64 - 1) + u64::from(32 - top.leading_zeros()),
        }
    }

    fn bit(&self, i: u64) -> bool {
        let limb = usize::try_from(i / 32).unwrap_or(usize::MAX);
        self.0.get(limb).is_some_and(|l| (l >> (i % 32)) & 1 == 1)
    }

    fn shl(&self, n: u64) -> Big {
        let limbs = usize::try_from(n / 32).unwrap_or(0);
        let bits = (n % 32) as u32;
        let mut r = vec![0u32; limbs];
        r.reserve(self.0.len() + 1);
        let mut carry = 0u32;
        for &l in &self.0 {
            if bits == 0 {
                r.push(l);
            } else {
                r.push((l << bits) | carry);
                carry = l >> (32 - bits);
            }
        }
        if carry != 0 {
            r.push(carry);
        }
        let mut r = Big(r);
        r.trim();
        r
    }

    fn shr1(&mut self) {
        let mut carry = 0u32;
        for limb in self.0.iter_mut().rev() {
            let next = *limb & 1;
            *limb = (*limb >> 1) | (carry << 31);
            carry = next;
        }
        self.trim();
    }

    fn cmp_big(&self, other: &Big) -> std::cmp::Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    /// `self -= other`; callers guarantee `self >= other`.
    fn sub_assign(&mut self, other: &Big) {
        let mut borrow = 0i64;
        for (i, limb) in self.0.iter_mut().enumerate() {
            let o = i64::from(other.0.get(i).copied().unwrap_or(0));
            let mut t = i64::from(*limb) - o - borrow;
            borrow = 0;
            if t < 0 {
                t += 1 << 32;
                borrow = 1;
            }
            *limb = t as u32;
        }
        self.trim();
    }

    /// `(e, fraction, sticky)` with `self = (1 + fraction/2^128 + …) × 2^e`;
    /// `self` is non-zero.
    fn normalised(&self) -> (i64, u128, bool) {
        let top = self.bits().saturating_sub(1);
        let mut fraction = 0u128;
        for k in 1..=128u64 {
            if top >= k && self.bit(top - k) {
                fraction |= 1 << (128 - k);
            }
        }
        let sticky = top > 128 && (0..top - 128).any(|i| self.bit(i));
        (top as i64, fraction, sticky)
    }

    /// The quotient `self / divisor` (both non-zero) in the same form as
    /// [`Big::normalised`], by restoring long division over 129 bits.
    fn divide(&self, divisor: &Big) -> (i64, u128, bool) {
        let bits_gap = self.bits() as i64 - divisor.bits() as i64;
        // The quotient lies in [2^(gap-1), 2^(gap+1)); find which binade.
        let at_least = |e: i64| -> bool {
            if e >= 0 {
                self.cmp_big(&divisor.shl(e as u64)).is_ge()
            } else {
                self.shl(e.unsigned_abs()).cmp_big(divisor).is_ge()
            }
        };
        let top = if at_least(bits_gap) {
            bits_gap
        } else {
            bits_gap - 1
        };
        // Scale so that the integer quotient has exactly 129 bits.
        let low = top - 128;
        let (mut remainder, divisor) = if low < 0 {
            (self.shl(low.unsigned_abs()), divisor.clone())
        } else {
            (self.clone(), divisor.shl(low as u64))
        };
        let mut step = divisor.shl(128);
        let mut fraction = 0u128;
        for i in (0..=128u32).rev() {
            if remainder.cmp_big(&step).is_ge() {
                remainder.sub_assign(&step);
                if i < 128 {
                    fraction |= 1 << i;
                }
            }
            step.shr1();
        }
        (top, fraction, !remainder.is_zero())
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;
    use std::str::FromStr;

    use bson::oid::ObjectId;
    use bson::spec::BinarySubtype;
    use bson::{doc, Binary, DateTime, JavaScriptCodeWithScope, Regex, Timestamp};
    use proptest::prelude::*;

    use super::*;
    use crate::query::compare::{canonical_type_rank, compare};

    /// 2^63, just above `i64::MAX`: exactly representable as a double.
    const TWO_63: f64 = (1u64 << 63) as f64;

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(Decimal128::from_str(s).expect("valid decimal literal"))
    }

    fn regex(pattern: &str, options: &str) -> Bson {
        Bson::RegularExpression(Regex {
            pattern: pattern.try_into().expect("pattern without NUL"),
            options: options.try_into().expect("options without NUL"),
        })
    }

    fn binary(subtype: u8, bytes: &[u8]) -> Bson {
        Bson::Binary(Binary {
            subtype: BinarySubtype::from(subtype),
            bytes: bytes.to_vec(),
        })
    }

    /// Groups of values in ascending MongoDB order; values within a group
    /// are equal. Independent of `compare`, so it holds the encoding to
    /// MongoDB's documented order even while `compare` is being written.
    fn ladder() -> Vec<Vec<Bson>> {
        let two53 = 9_007_199_254_740_992_i64;
        vec![
            vec![Bson::MinKey],
            vec![Bson::Null, Bson::Undefined],
            vec![Bson::Double(f64::NAN), dec("NaN"), dec("-NaN")],
            vec![Bson::Double(f64::NEG_INFINITY), dec("-Infinity")],
            vec![dec("-1E+6144")],
            vec![Bson::Double(f64::MIN)],
            vec![Bson::Int64(i64::MIN), Bson::Double(-TWO_63)],
            vec![Bson::Int64(-two53 - 1)],
            vec![Bson::Int64(-two53), Bson::Double(-two53 as f64)],
            vec![Bson::Int32(-2), Bson::Double(-2.0), dec("-2.000")],
            vec![dec("-1.5"), Bson::Double(-1.5)],
            vec![
                Bson::Int32(-1),
                Bson::Int64(-1),
                Bson::Double(-1.0),
                dec("-1"),
            ],
            vec![Bson::Double(-0.1)],
            vec![dec("-0.1")],
            vec![Bson::Double(-f64::MIN_POSITIVE)],
            vec![Bson::Double(-5e-324)],
            vec![dec("-1E-6176")],
            vec![
                Bson::Int32(0),
                Bson::Int64(0),
                Bson::Double(0.0),
                Bson::Double(-0.0),
                dec("0"),
                dec("-0"),
                dec("0E+300"),
                dec("-0.000"),
            ],
            vec![dec("1E-6176")],
            vec![Bson::Double(5e-324)],
            vec![Bson::Double(1e-310)],
            vec![Bson::Double(f64::MIN_POSITIVE)],
            vec![dec("0.1")],
            vec![Bson::Double(0.1)],
            vec![dec("0.1000000000000000055511151231257828")],
            vec![dec("0.3333333333333333333333333333333333")],
            vec![Bson::Double(0.5), dec("0.5"), dec("0.50000")],
            vec![dec("0.9999999999999999999999999999999999")],
            vec![
                Bson::Int32(1),
                Bson::Int64(1),
                Bson::Double(1.0),
                dec("1"),
                dec("1.0"),
                dec("0.01E+2"),
            ],
            vec![dec("1.000000000000000000000000000000001")],
            vec![Bson::Double(1.0 + f64::EPSILON)],
            vec![Bson::Int32(i32::MAX), Bson::Double(f64::from(i32::MAX))],
            vec![
                Bson::Int64(two53),
                Bson::Double(two53 as f64),
                dec("9007199254740992"),
            ],
            vec![Bson::Int64(two53 + 1), dec("9007199254740993")],
            vec![Bson::Int64(two53 + 2), Bson::Double((two53 + 2) as f64)],
            vec![Bson::Int64(i64::MAX - 1)],
            vec![Bson::Int64(i64::MAX), dec("9223372036854775807")],
            vec![Bson::Double(TWO_63), dec("9223372036854775808")],
            vec![dec("9223372036854775808.000000000000001")],
            vec![Bson::Double(1e300)],
            vec![Bson::Double(f64::MAX)],
            vec![dec("9.999999999999999999999999999999999E+6144")],
            vec![Bson::Double(f64::INFINITY), dec("Infinity")],
            vec![Bson::String(String::new()), Bson::Symbol(String::new())],
            vec![Bson::String("\0".into())],
            vec![Bson::String("\0\0".into())],
            vec![Bson::String("\u{1}".into())],
            vec![Bson::String("A".into())],
            vec![Bson::String("a".into()), Bson::Symbol("a".into())],
            vec![Bson::String("a\0".into())],
            vec![Bson::String("a\0b".into())],
            vec![Bson::String("a\u{1}".into())],
            vec![Bson::String("ab".into())],
            vec![Bson::String("b".into())],
            vec![Bson::String("é".into())],
            vec![Bson::Document(doc! {})],
            vec![Bson::Document(doc! { "a": Bson::MinKey })],
            vec![
                Bson::Document(doc! { "a": 1 }),
                Bson::Document(doc! { "a": 1.0 }),
            ],
            vec![Bson::Document(doc! { "a": 1, "b": 1 })],
            vec![Bson::Document(doc! { "a": 2 })],
            // Per field MongoDB compares the value's type before the name.
            vec![Bson::Document(doc! { "b": 0 })],
            vec![Bson::Document(doc! { "a": "x" })],
            vec![Bson::Array(vec![])],
            vec![Bson::Array(vec![Bson::Null])],
            vec![
                Bson::Array(vec![Bson::Int32(1)]),
                Bson::Array(vec![Bson::Int64(1)]),
            ],
            vec![Bson::Array(vec![Bson::Int32(1), Bson::Int32(0)])],
            vec![Bson::Array(vec![Bson::Int32(2)])],
            vec![Bson::Array(vec![Bson::String(String::new())])],
            vec![binary(0x80, b"")],
            vec![binary(0, b"z")],
            vec![binary(4, b"a")],
            vec![binary(0, b"aa")],
            vec![Bson::ObjectId(ObjectId::from_bytes([0; 12]))],
            vec![Bson::ObjectId(ObjectId::from_bytes([0xFF; 12]))],
            vec![Bson::Boolean(false)],
            vec![Bson::Boolean(true)],
            vec![Bson::DateTime(DateTime::from_millis(i64::MIN))],
            vec![Bson::DateTime(DateTime::from_millis(-1))],
            vec![Bson::DateTime(DateTime::from_millis(0))],
            vec![Bson::DateTime(DateTime::from_millis(i64::MAX))],
            vec![Bson::Timestamp(Timestamp {
                time: 0,
                increment: 0,
            })],
            vec![Bson::Timestamp(Timestamp {
                time: 1,
                increment: 0,
            })],
            vec![Bson::Timestamp(Timestamp {
                time: 1,
                increment: u32::MAX,
            })],
            vec![Bson::Timestamp(Timestamp {
                time: u32::MAX,
                increment: 0,
            })],
            vec![regex("", "")],
            vec![regex("a", "")],
            vec![regex("a", "i")],
            vec![regex("b", "")],
            vec![Bson::JavaScriptCode(String::new())],
            vec![Bson::JavaScriptCode("x".into())],
            vec![Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                code: "x".into(),
                scope: doc! {},
            })],
            vec![Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                code: "x".into(),
                scope: doc! { "a": 1 },
            })],
            vec![Bson::MaxKey],
        ]
    }

    #[test]
    fn ladder_orders_as_mongodb_does() {
        let groups = ladder();
        let mut previous: Option<(Vec<u8>, &Bson)> = None;
        for group in &groups {
            let first = encode_id(&group[0]);
            for v in &group[1..] {
                assert_eq!(encode_id(v), first, "{v:?} should encode as {:?}", group[0]);
            }
            if let Some((prev, prev_value)) = &previous {
                assert!(
                    prev < &first,
                    "{prev_value:?} should sort before {:?}",
                    group[0]
                );
            }
            previous = Some((first, &group[0]));
        }
    }

    #[test]
    fn ladder_agrees_with_compare() {
        let values: Vec<Bson> = ladder().into_iter().flatten().collect();
        for a in &values {
            for b in &values {
                assert_eq!(
                    encode_id(a).cmp(&encode_id(b)),
                    compare(a, b),
                    "encode order vs compare for {a:?} and {b:?}"
                );
            }
        }
    }

    /// The type bytes are our on-disk format, so they are constants here
    /// rather than read from `compare`; this keeps the two in step.
    #[test]
    fn type_bytes_follow_canonical_rank() {
        let one_of_each: Vec<Bson> = ladder().into_iter().map(|g| g[0].clone()).collect();
        for a in &one_of_each {
            for b in &one_of_each {
                assert_eq!(
                    type_byte(a).cmp(&type_byte(b)),
                    canonical_type_rank(a).cmp(&canonical_type_rank(b)),
                    "type bytes of {a:?} and {b:?}"
                );
            }
        }
    }

    #[test]
    fn descending_components_reverse_only_themselves() {
        let k = |a: i32, b: &str| {
            encode_key(&[(&Bson::Int32(a), false), (&Bson::String(b.into()), true)])
        };
        assert!(k(1, "z") < k(1, "a"));
        assert!(k(1, "a") < k(2, "z"));
        assert!(k(1, "ab") < k(1, "a"));
        assert_eq!(
            encode_key(&[(&Bson::Int32(7), false)]),
            encode_id(&Bson::Double(7.0))
        );
    }

    #[test]
    fn db_pointer_parts_read_back() {
        // bson offers no constructor for DBPointer; build one from raw bytes.
        let mut raw = Vec::new();
        let ns = b"db.coll";
        let body_len = 1 + 1 + 4 + ns.len() + 1 + 12 + 1;
        raw.extend_from_slice(&(4 + body_len as i32).to_le_bytes());
        raw.push(0x0C);
        raw.push(0);
        raw.extend_from_slice(&(ns.len() as i32 + 1).to_le_bytes());
        raw.extend_from_slice(ns);
        raw.push(0);
        raw.extend_from_slice(&[7; 12]);
        raw.push(0);
        let doc = Document::from_reader(&raw[..]).expect("well-formed DBPointer document");
        let v = doc.get("").expect("the field").clone();
        assert_eq!(db_pointer_parts(&v), Some((ns.to_vec(), [7; 12])));
    }

    #[test]
    fn big_division_places_one_tenth() {
        // 0.1 = 1.6 × 2^-4; 0.6 in binary is 0.1001 1001 …, never ending.
        let (e, fraction, sticky) = decimal_to_binary(1, -1);
        assert_eq!(e, -4);
        assert_eq!(fraction, 0x9999_9999_9999_9999_9999_9999_9999_9999);
        assert!(sticky);
    }

    /// Numbers that sit on the edges where encodings go wrong.
    fn edge_number() -> impl Strategy<Value = Bson> {
        let two53 = 1i64 << 53;
        prop_oneof![
            prop::sample::select(vec![
                i64::MIN,
                i64::MIN + 1,
                -two53 - 1,
                -two53,
                -1,
                0,
                1,
                two53 - 1,
                two53,
                two53 + 1,
                i64::MAX - 1,
                i64::MAX,
            ])
            .prop_map(Bson::Int64),
            prop::sample::select(vec![
                f64::NAN,
                f64::NEG_INFINITY,
                f64::MIN,
                -TWO_63,
                -9_007_199_254_740_992.0,
                -1.0,
                -0.0,
                0.0,
                5e-324,
                f64::MIN_POSITIVE,
                0.1,
                0.5,
                1.0,
                9_007_199_254_740_992.0,
                TWO_63,
                f64::MAX,
                f64::INFINITY,
            ])
            .prop_map(Bson::Double),
            prop::sample::select(vec![
                "NaN",
                "-Infinity",
                "-1E+6144",
                "-1",
                "-0",
                "0",
                "1E-6176",
                "0.1",
                "0.5",
                "1",
                "1.0",
                "9007199254740993",
                "9223372036854775807",
                "9223372036854775808",
                "Infinity",
            ])
            .prop_map(dec),
        ]
    }

    fn any_number() -> impl Strategy<Value = Bson> {
        prop_oneof![
            edge_number(),
            any::<i32>().prop_map(Bson::Int32),
            any::<i64>().prop_map(Bson::Int64),
            (-1000i64..1000).prop_map(Bson::Int64),
            any::<f64>().prop_map(Bson::Double),
            (-1000i32..1000, 0u32..4)
                .prop_map(|(n, k)| Bson::Double(f64::from(n) / f64::from(1 << k))),
            (any::<i64>(), -20i32..20).prop_map(|(c, q)| dec(&format!("{c}E{q}"))),
            (-1000i32..1000, -3i32..3).prop_map(|(c, q)| dec(&format!("{c}E{q}"))),
            (any::<u64>(), any::<u64>(), -6176i32..6111, any::<bool>()).prop_map(
                |(hi, lo, q, neg)| {
                    let c = ((u128::from(hi) << 64) | u128::from(lo))
                        % (crate::query::compare::MAX_COEFFICIENT + 1);
                    dec(&format!("{}{c}E{q}", if neg { "-" } else { "" }))
                }
            ),
        ]
    }

    fn leaf() -> impl Strategy<Value = Bson> {
        prop_oneof![
            4 => any_number(),
            1 => Just(Bson::MinKey),
            1 => Just(Bson::MaxKey),
            1 => Just(Bson::Null),
            1 => Just(Bson::Undefined),
            1 => any::<bool>().prop_map(Bson::Boolean),
            1 => "[a-c\u{0}\u{1}é]{0,4}".prop_map(Bson::String),
            1 => "[ab]{0,2}".prop_map(Bson::Symbol),
            1 => any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(ObjectId::from_bytes(b))),
            1 => any::<i64>().prop_map(|ms| Bson::DateTime(DateTime::from_millis(ms))),
            1 => (any::<u32>(), any::<u32>()).prop_map(|(time, increment)| Bson::Timestamp(Timestamp { time, increment })),
            1 => (0u8..6, prop::collection::vec(any::<u8>(), 0..4)).prop_map(|(s, b)| binary(s, &b)),
            1 => ("[ab]{0,2}", "[im]{0,1}").prop_map(|(p, o)| regex(&p, &o)),
            1 => "[ab]{0,2}".prop_map(Bson::JavaScriptCode),
        ]
    }

    fn any_value() -> impl Strategy<Value = Bson> {
        leaf().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
                prop::collection::vec(("[ab]{0,2}", inner), 0..4)
                    .prop_map(|fields| { Bson::Document(fields.into_iter().collect()) }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn numbers_encode_in_compare_order(a in any_number(), b in any_number()) {
            prop_assert_eq!(encode_id(&a).cmp(&encode_id(&b)), compare(&a, &b), "{:?} vs {:?}", a, b);
        }

        #[test]
        fn values_encode_in_compare_order(a in any_value(), b in any_value()) {
            prop_assert_eq!(encode_id(&a).cmp(&encode_id(&b)), compare(&a, &b), "{:?} vs {:?}", a, b);
        }

        #[test]
        fn compound_keys_order_by_component(
            a in prop::collection::vec(any_value(), 2),
            b in prop::collection::vec(any_value(), 2),
            desc in prop::collection::vec(any::<bool>(), 2),
        ) {
            let key = |v: &[Bson]| encode_key(&[(&v[0], desc[0]), (&v[1], desc[1])]);
            let directed = |i: usize| {
                let o = compare(&a[i], &b[i]);
                if desc[i] { o.reverse() } else { o }
            };
            let expected = directed(0).then_with(|| directed(1));
            prop_assert_eq!(key(&a).cmp(&key(&b)), expected);
        }

        /// Independent of `compare`: int64 and double ordered exactly.
        #[test]
        fn int64_and_double_order_exactly(i in any::<i64>(), d in any::<f64>()) {
            prop_assume!(!d.is_nan());
            let expected = exact_i64_f64(i, d);
            prop_assert_eq!(encode_id(&Bson::Int64(i)).cmp(&encode_id(&Bson::Double(d))), expected);
        }

        /// Independent of `compare`: decimals against decimals, checked with
        /// integer arithmetic on small exponents.
        #[test]
        fn small_decimals_order_exactly(
            c1 in -999_999_999_999_999_999i64..=999_999_999_999_999_999, q1 in -8i32..=8,
            c2 in -999_999_999_999_999_999i64..=999_999_999_999_999_999, q2 in -8i32..=8,
        ) {
            let lo = q1.min(q2);
            let scaled = |c: i64, q: i32| i128::from(c) * 10i128.pow((q - lo) as u32);
            let expected = scaled(c1, q1).cmp(&scaled(c2, q2));
            let a = dec(&format!("{c1}E{q1}"));
            let b = dec(&format!("{c2}E{q2}"));
            prop_assert_eq!(encode_id(&a).cmp(&encode_id(&b)), expected);
        }
    }

    fn exact_i64_f64(i: i64, d: f64) -> Ordering {
        if d >= TWO_63 {
            return Ordering::Less;
        }
        if d < -TWO_63 {
            return Ordering::Greater;
        }
        // |d| < 2^63, so its integer part fits an i64 exactly.
        let whole = d.trunc() as i64;
        i.cmp(&whole).then_with(|| {
            let rest = d - d.trunc();
            0.0f64.partial_cmp(&rest).unwrap_or(Ordering::Equal)
        })
    }
}
