//! MongoDB's total order over BSON values.
//!
//! Everything that orders or equates values goes through here: filters
//! (`$eq`, `$lt`, `$in`), sorts, aggregation comparisons and the index key
//! encoder (through [`canonical_type_rank`]). Values of different types order
//! by their canonical type rank; numbers of every BSON numeric type form one
//! class and compare by exact numeric value.
//!
//! Decimal128 values are unpacked into [`DecimalValue`] (coefficient and
//! exponent) and compared exactly against each other, against integers and
//! against doubles (the double's exact binary value, as MongoDB does), so no
//! comparison here rounds.
//!
//! One documented departure from MongoDB: `undefined` and `null` share a rank
//! and compare equal (MongoDB ranks `undefined` just below `null`). The
//! deprecated `undefined` type is rare and queries treat the two alike.

use std::cmp::Ordering;

use std::cell::RefCell;
use std::sync::Arc;

use bson::{Bson, Decimal128, Document, RawBsonRef};

/// An order over strings other than by their bytes: a collation
/// ([`crate::query::collation`]).
pub trait StringOrder: Send + Sync {
    fn compare_strs(&self, a: &str, b: &str) -> Ordering;
}

thread_local! {
    /// The string order [`with_string_order`] made current on this thread.
    static STRING_ORDER: RefCell<Option<Arc<dyn StringOrder>>> = const { RefCell::new(None) };
}

/// Runs `f` with `order` current on this thread (`None`: bytes), then
/// restores the previous one. `f` must not await: the order is the
/// thread's, not a task's.
pub fn with_string_order<R>(order: Option<Arc<dyn StringOrder>>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<dyn StringOrder>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            STRING_ORDER.with(|c| *c.borrow_mut() = previous);
        }
    }
    let previous = STRING_ORDER.with(|c| c.replace(order));
    let _restore = Restore(previous);
    f()
}

/// True when a string order other than bytes is current on this thread.
pub fn has_string_order() -> bool {
    STRING_ORDER.with(|c| c.borrow().is_some())
}

/// Orders two strings by the current string order, or by bytes.
pub fn compare_strings(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    STRING_ORDER.with(|c| match &*c.borrow() {
        Some(order) => order.compare_strs(a, b),
        None => a.as_bytes().cmp(b.as_bytes()),
    })
}

/// The rank of a value's type in MongoDB's comparison order: values of
/// different ranks order by rank alone. All numeric types share one rank,
/// as do strings and symbols, and `null` and `undefined`.
pub fn canonical_type_rank(value: &Bson) -> u8 {
    match value {
        Bson::MinKey => 0,
        Bson::Undefined | Bson::Null => 5,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => 10,
        Bson::String(_) | Bson::Symbol(_) => 15,
        Bson::Document(_) => 20,
        Bson::Array(_) => 25,
        Bson::Binary(_) => 30,
        Bson::ObjectId(_) => 35,
        Bson::Boolean(_) => 40,
        Bson::DateTime(_) => 45,
        Bson::Timestamp(_) => 47,
        Bson::RegularExpression(_) => 50,
        Bson::DbPointer(_) => 55,
        Bson::JavaScriptCode(_) => 60,
        Bson::JavaScriptCodeWithScope(_) => 65,
        Bson::MaxKey => 127,
    }
}

/// The rank [`canonical_type_rank`] gives every number.
pub const NUMBER_RANK: u8 = 10;

/// The rank [`canonical_type_rank`] gives strings and symbols.
pub const STRING_RANK: u8 = 15;

/// [`compare`] of `value` with the string `s`, without building a `Bson`
/// for it: scans compare the strings of documents still in BSON form.
pub fn compare_to_str(value: &Bson, s: &str) -> Ordering {
    match value {
        Bson::String(x) | Bson::Symbol(x) => compare_strings(x, s),
        other => canonical_type_rank(other).cmp(&STRING_RANK),
    }
}

/// True for the four BSON numeric types.
pub fn is_number(value: &Bson) -> bool {
    matches!(
        value,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
    )
}

/// True for a double or decimal NaN.
pub fn is_nan(value: &Bson) -> bool {
    match value {
        Bson::Double(d) => d.is_nan(),
        Bson::Decimal128(d) => matches!(DecimalValue::from_decimal128(d), DecimalValue::NaN),
        _ => false,
    }
}

/// Compares two values in MongoDB's BSON comparison order.
pub fn compare(a: &Bson, b: &Bson) -> Ordering {
    let (rank_a, rank_b) = (canonical_type_rank(a), canonical_type_rank(b));
    if rank_a != rank_b {
        return rank_a.cmp(&rank_b);
    }
    compare_same_rank(a, b)
}

/// Numbers without a decimal compare without unpacking anything; this is
/// the hot path of filters and sorts.
fn compare_bson_numbers(a: &Bson, b: &Bson) -> Ordering {
    match (a, b) {
        (Bson::Int32(x), Bson::Int32(y)) => x.cmp(y),
        (Bson::Int64(x), Bson::Int64(y)) => x.cmp(y),
        (Bson::Int32(x), Bson::Int64(y)) => i64::from(*x).cmp(y),
        (Bson::Int64(x), Bson::Int32(y)) => x.cmp(&i64::from(*y)),
        (Bson::Double(x), Bson::Double(y)) => compare_doubles(*x, *y),
        (Bson::Int32(x), Bson::Double(y)) => compare_doubles(f64::from(*x), *y),
        (Bson::Double(x), Bson::Int32(y)) => compare_doubles(*x, f64::from(*y)),
        (Bson::Int64(x), Bson::Double(y)) => compare_i64_f64(*x, *y),
        (Bson::Double(x), Bson::Int64(y)) => compare_i64_f64(*y, *x).reverse(),
        _ => compare_with_decimal(a, b),
    }
}

#[cold]
fn compare_with_decimal(a: &Bson, b: &Bson) -> Ordering {
    match (Number::of(a), Number::of(b)) {
        (Some(x), Some(y)) => compare_numbers(x, y),
        _ => Ordering::Equal,
    }
}

/// True when MongoDB considers the two values equal (`1 == 1.0 == NumberLong(1)`).
pub fn values_equal(a: &Bson, b: &Bson) -> bool {
    compare(a, b) == Ordering::Equal
}

/// A borrowed value that orders and compares as MongoDB does (`1`, `1.0`
/// and `NumberLong(1)` are one value), so sets of values can be ordered
/// trees: looking a value up among n costs O(log n), not O(n).
#[derive(Debug, Clone, Copy)]
pub struct Canonical<'a>(pub &'a Bson);

impl PartialEq for Canonical<'_> {
    fn eq(&self, other: &Self) -> bool {
        compare(self.0, other.0) == Ordering::Equal
    }
}

impl Eq for Canonical<'_> {}

impl PartialOrd for Canonical<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Canonical<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        compare(self.0, other.0)
    }
}

/// Compares two documents field by field: each pair of fields orders first
/// by the type rank of the values, then by field name, then by value; a
/// document that is a prefix of the other is smaller.
pub fn compare_documents(a: &Document, b: &Document) -> Ordering {
    let mut left = a.iter();
    let mut right = b.iter();
    loop {
        match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((ka, va)), Some((kb, vb))) => {
                let by_rank = canonical_type_rank(va).cmp(&canonical_type_rank(vb));
                if by_rank != Ordering::Equal {
                    return by_rank;
                }
                let by_name = ka.as_bytes().cmp(kb.as_bytes());
                if by_name != Ordering::Equal {
                    return by_name;
                }
                let by_value = compare_same_rank(va, vb);
                if by_value != Ordering::Equal {
                    return by_value;
                }
            }
        }
    }
}

/// Compares two arrays element by element; a prefix is smaller.
pub fn compare_arrays(a: &[Bson], b: &[Bson]) -> Ordering {
    for (x, y) in a.iter().zip(b.iter()) {
        let ord = compare(x, y);
        if ord != Ordering::Equal {
            return ord;
        }
    }
    a.len().cmp(&b.len())
}

/// Compares two values already known to share a canonical type rank.
fn compare_same_rank(a: &Bson, b: &Bson) -> Ordering {
    match (a, b) {
        (
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_),
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_),
        ) => compare_bson_numbers(a, b),
        (Bson::String(x) | Bson::Symbol(x), Bson::String(y) | Bson::Symbol(y)) => {
            compare_strings(x, y)
        }
        (Bson::Document(x), Bson::Document(y)) => compare_documents(x, y),
        (Bson::Array(x), Bson::Array(y)) => compare_arrays(x, y),
        (Bson::Binary(x), Bson::Binary(y)) => x
            .bytes
            .len()
            .cmp(&y.bytes.len())
            .then_with(|| u8::from(x.subtype).cmp(&u8::from(y.subtype)))
            .then_with(|| x.bytes.cmp(&y.bytes)),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => {
            (x.time, x.increment).cmp(&(y.time, y.increment))
        }
        (Bson::RegularExpression(x), Bson::RegularExpression(y)) => x
            .pattern
            .as_str()
            .as_bytes()
            .cmp(y.pattern.as_str().as_bytes())
            .then_with(|| x.options.as_str().cmp(y.options.as_str())),
        (Bson::DbPointer(_), Bson::DbPointer(_)) => compare_db_pointers(a, b),
        (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => x
            .code
            .as_bytes()
            .cmp(y.code.as_bytes())
            .then_with(|| compare_documents(&x.scope, &y.scope)),
        // MinKey, MaxKey, null and undefined: one value per rank.
        _ => Ordering::Equal,
    }
}

/// DBPointer fields are private in the `bson` crate; MongoDB orders them by
/// value size and then bytes, which is what comparing the encodings of
/// `{"": pointer}` gives.
fn compare_db_pointers(a: &Bson, b: &Bson) -> Ordering {
    let encode = |v: &Bson| {
        let mut d = Document::new();
        d.insert("", v.clone());
        d.to_vec().unwrap_or_default()
    };
    let (x, y) = (encode(a), encode(b));
    x.len().cmp(&y.len()).then_with(|| x.cmp(&y))
}

/// A BSON number, borrowed from a value for comparison and arithmetic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Int32(i32),
    Int64(i64),
    Double(f64),
    Decimal(DecimalValue),
}

impl Number {
    /// The number a value holds, or `None` for non-numeric values.
    pub fn of(value: &Bson) -> Option<Number> {
        match value {
            Bson::Int32(i) => Some(Number::Int32(*i)),
            Bson::Int64(i) => Some(Number::Int64(*i)),
            Bson::Double(d) => Some(Number::Double(*d)),
            Bson::Decimal128(d) => Some(Number::Decimal(DecimalValue::from_decimal128(d))),
            _ => None,
        }
    }

    /// [`Number::of`] a value still in BSON form.
    pub fn of_raw(value: RawBsonRef<'_>) -> Option<Number> {
        match value {
            RawBsonRef::Int32(i) => Some(Number::Int32(i)),
            RawBsonRef::Int64(i) => Some(Number::Int64(i)),
            RawBsonRef::Double(d) => Some(Number::Double(d)),
            RawBsonRef::Decimal128(d) => Some(Number::Decimal(DecimalValue::from_decimal128(&d))),
            _ => None,
        }
    }

    /// The nearest double (decimals round to nearest).
    pub fn to_f64(self) -> f64 {
        match self {
            Number::Int32(i) => f64::from(i),
            Number::Int64(i) => i as f64,
            Number::Double(d) => d,
            Number::Decimal(d) => d.to_f64(),
        }
    }

    /// The number as a decimal; doubles round to 15 significant digits
    /// (see [`DecimalValue::from_f64`]).
    pub fn to_decimal(self) -> DecimalValue {
        match self {
            Number::Int32(i) => DecimalValue::from_i64(i64::from(i)),
            Number::Int64(i) => DecimalValue::from_i64(i),
            Number::Double(d) => DecimalValue::from_f64(d),
            Number::Decimal(d) => d,
        }
    }

    pub fn into_bson(self) -> Bson {
        match self {
            Number::Int32(i) => Bson::Int32(i),
            Number::Int64(i) => Bson::Int64(i),
            Number::Double(d) => Bson::Double(d),
            Number::Decimal(d) => Bson::Decimal128(d.to_decimal128()),
        }
    }

    pub fn is_nan(self) -> bool {
        match self {
            Number::Double(d) => d.is_nan(),
            Number::Decimal(d) => matches!(d, DecimalValue::NaN),
            _ => false,
        }
    }

    /// The integer an int32 or int64 holds; `None` for doubles and decimals.
    pub fn integral(self) -> Option<i64> {
        match self {
            Number::Int32(i) => Some(i64::from(i)),
            Number::Int64(i) => Some(i),
            _ => None,
        }
    }

    /// Arithmetic with MongoDB's promotion: decimal when either side is a
    /// decimal, else double when either is a double, else integer (int32
    /// when both are and the result fits, int64 otherwise). `None` when
    /// the integer operation overflows int64, which updates refuse.
    pub fn combine_checked(
        self,
        other: Number,
        int_op: fn(i64, i64) -> Option<i64>,
        float_op: fn(f64, f64) -> f64,
        decimal_op: fn(&DecimalValue, &DecimalValue) -> DecimalValue,
    ) -> Option<Number> {
        match (self, other) {
            (Number::Decimal(_), _) | (_, Number::Decimal(_)) => Some(Number::Decimal(decimal_op(
                &self.to_decimal(),
                &other.to_decimal(),
            ))),
            (Number::Double(_), _) | (_, Number::Double(_)) => {
                Some(Number::Double(float_op(self.to_f64(), other.to_f64())))
            }
            (Number::Int32(a), Number::Int32(b)) => {
                // Two int32s always fit in an int64; narrow back when possible.
                let wide = int_op(i64::from(a), i64::from(b))?;
                Some(i32::try_from(wide).map_or(Number::Int64(wide), Number::Int32))
            }
            _ => {
                let (a, b) = (self.integral().unwrap_or(0), other.integral().unwrap_or(0));
                int_op(a, b).map(Number::Int64)
            }
        }
    }

    /// [`Number::combine_checked`] where an int64 overflow gives the double
    /// result instead, as aggregation expressions do.
    pub fn combine_widening(
        self,
        other: Number,
        int_op: fn(i64, i64) -> Option<i64>,
        float_op: fn(f64, f64) -> f64,
        decimal_op: fn(&DecimalValue, &DecimalValue) -> DecimalValue,
    ) -> Number {
        self.combine_checked(other, int_op, float_op, decimal_op)
            .unwrap_or_else(|| Number::Double(float_op(self.to_f64(), other.to_f64())))
    }
}

impl Number {
    /// Addition as `$add`, `$sum` and `$avg` do it: the wider type wins,
    /// two int32s give an int32 when the sum fits and an int64 otherwise,
    /// and an int64 overflow gives the double sum.
    pub fn add_widening(self, other: Number) -> Number {
        self.combine_widening(other, i64::checked_add, |x, y| x + y, DecimalValue::add)
    }

    /// Addition as `$inc` does it: [`Number::add_widening`], except that an int64
    /// overflow is `None` (updates refuse it rather than lose precision).
    pub fn checked_add(self, other: Number) -> Option<Number> {
        self.combine_checked(other, i64::checked_add, |x, y| x + y, DecimalValue::add)
    }

    /// True for every kind of zero, `-0.0` and `-0E+3` included.
    pub fn is_zero(self) -> bool {
        match self {
            Number::Int32(i) => i == 0,
            Number::Int64(i) => i == 0,
            Number::Double(d) => d == 0.0,
            Number::Decimal(d) => d.is_zero(),
        }
    }

    /// The remainder of a truncating division, with the dividend's sign
    /// (`$mod`): decimal when either side is one (exact, as MongoDB's
    /// decimal `fmod`), else double when either is one, else int32 for
    /// two int32s and int64 otherwise. `None` when the divisor is zero.
    pub fn checked_rem(self, divisor: Number) -> Option<Number> {
        if divisor.is_zero() {
            return None;
        }
        Some(match (self, divisor) {
            (Number::Decimal(_), _) | (_, Number::Decimal(_)) => {
                Number::Decimal(self.to_decimal().rem(&divisor.to_decimal()))
            }
            (Number::Double(_), _) | (_, Number::Double(_)) => {
                Number::Double(self.to_f64() % divisor.to_f64())
            }
            // wrapping_rem gives 0 for MIN % -1 instead of overflowing.
            (Number::Int32(a), Number::Int32(b)) => Number::Int32(a.wrapping_rem(b)),
            _ => Number::Int64(
                self.integral()
                    .unwrap_or(0)
                    .wrapping_rem(divisor.integral().unwrap_or(1)),
            ),
        })
    }

    /// The number truncated toward zero to an int64, as MongoDB coerces
    /// query arguments (`$mod`'s divisor and remainder).
    pub fn truncate_to_i64(self) -> std::result::Result<i64, NotIntegral> {
        match self {
            Number::Int32(i) => Ok(i64::from(i)),
            Number::Int64(i) => Ok(i),
            other => {
                let f = other.to_f64();
                if !f.is_finite() {
                    return Err(NotIntegral::NotFinite);
                }
                let whole = f.trunc();
                if !f64_fits_i64(whole) {
                    return Err(NotIntegral::OutOfRange);
                }
                // In range, so the cast is exact.
                Ok(whole as i64)
            }
        }
    }
}

/// Why a number has no int64 value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotIntegral {
    /// NaN or an infinity.
    NotFinite,
    /// Beyond the int64 range.
    OutOfRange,
}

/// Compares two numbers exactly across types. NaN equals NaN and is below
/// every other number.
pub fn compare_numbers(a: Number, b: Number) -> Ordering {
    use Number::*;
    match (a, b) {
        (Int32(x), Int32(y)) => x.cmp(&y),
        (Int32(x), Int64(y)) => i64::from(x).cmp(&y),
        (Int64(x), Int32(y)) => x.cmp(&i64::from(y)),
        (Int64(x), Int64(y)) => x.cmp(&y),
        (Double(x), Double(y)) => compare_doubles(x, y),
        (Int32(x), Double(y)) => compare_doubles(f64::from(x), y),
        (Double(x), Int32(y)) => compare_doubles(x, f64::from(y)),
        (Int64(x), Double(y)) => compare_i64_f64(x, y),
        (Double(x), Int64(y)) => compare_i64_f64(y, x).reverse(),
        (Decimal(x), Double(y)) => x.compare_f64(y),
        (Double(x), Decimal(y)) => y.compare_f64(x).reverse(),
        (Decimal(x), y) => x.compare(&y.to_decimal()),
        (x, Decimal(y)) => x.to_decimal().compare(&y),
    }
}

fn compare_doubles(x: f64, y: f64) -> Ordering {
    match x.partial_cmp(&y) {
        Some(ord) => ord,
        None => match (x.is_nan(), y.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Less,
            _ => Ordering::Greater,
        },
    }
}

/// True when a double's integer part fits in an `i64` (so `as i64`
/// truncates without saturating). NaN and infinities are out of range.
pub fn f64_fits_i64(f: f64) -> bool {
    (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f)
}

/// Exact comparison of a long with a double, including values near ±2^63
/// where converting the long to a double would round.
fn compare_i64_f64(x: i64, y: f64) -> Ordering {
    if y.is_nan() {
        return Ordering::Greater;
    }
    // 2^63 as a double; every long is strictly below it.
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if y >= TWO_POW_63 {
        return Ordering::Less;
    }
    if y < -TWO_POW_63 {
        return Ordering::Greater;
    }
    let whole = y.trunc();
    // In range, so the truncated double is an exact long.
    let whole_int = whole as i64;
    match x.cmp(&whole_int) {
        Ordering::Equal => {
            let frac = y - whole;
            if frac > 0.0 {
                Ordering::Less
            } else if frac < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        ord => ord,
    }
}

/// The largest coefficient a Decimal128 holds (34 nines).
pub(crate) const MAX_COEFFICIENT: u128 = 9_999_999_999_999_999_999_999_999_999_999_999;
const MAX_DIGITS: u32 = 34;
/// Decimal128 exponent limits.
const MAX_EXPONENT: i32 = 6111;
const MIN_EXPONENT: i32 = -6176;

/// A Decimal128 unpacked into sign, coefficient and base-10 exponent, for
/// exact comparison and arithmetic (the `bson` crate only offers strings).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DecimalValue {
    NaN,
    Infinity {
        negative: bool,
    },
    /// `(-1)^negative * coefficient * 10^exponent`; the coefficient has at
    /// most 34 digits.
    Finite {
        negative: bool,
        coefficient: u128,
        exponent: i32,
    },
}

impl DecimalValue {
    pub const ZERO: DecimalValue = DecimalValue::Finite {
        negative: false,
        coefficient: 0,
        exponent: 0,
    };

    /// The one Decimal128 decoder: hashing, key strings, comparison and
    /// arithmetic all read decimals through it.
    pub fn from_decimal128(d: &Decimal128) -> DecimalValue {
        DecimalValue::from_bits(u128::from_le_bytes(d.bytes()))
    }

    /// Decodes an IEEE 754-2008 decimal128 in binary integer decimal (BID)
    /// encoding, the format BSON stores. Non-canonical encodings (a
    /// coefficient above 10^34 − 1) denote zero, as the standard says.
    pub fn from_bits(bits: u128) -> DecimalValue {
        const EXPONENT_BIAS: i32 = 6176;
        const EXPONENT_MASK: u128 = 0x3fff;
        const COEFFICIENT_MASK: u128 = (1 << 113) - 1;
        let negative = bits >> 127 == 1;
        // The five bits after the sign select the special values and the
        // layout of exponent and coefficient.
        match (bits >> 122) & 0b1_1111 {
            0b1_1111 => return DecimalValue::NaN,
            0b1_1110 => return DecimalValue::Infinity { negative },
            _ => {}
        }
        let (biased_exponent, coefficient) = if (bits >> 125) & 0b11 == 0b11 {
            // The "large coefficient" form has an implicit `100` prefix,
            // which puts every coefficient above 10^34 − 1: non-canonical.
            ((bits >> 111) & EXPONENT_MASK, 0)
        } else {
            let coefficient = bits & COEFFICIENT_MASK;
            let coefficient = if coefficient > MAX_COEFFICIENT {
                0
            } else {
                coefficient
            };
            ((bits >> 113) & EXPONENT_MASK, coefficient)
        };
        // The mask keeps the stored exponent within 14 bits, so it fits.
        let biased_exponent = i32::try_from(biased_exponent).unwrap_or(i32::MAX);
        DecimalValue::Finite {
            negative,
            coefficient,
            exponent: biased_exponent - EXPONENT_BIAS,
        }
    }

    /// Parses the string forms Decimal128 prints (`-1.5E+3`, `0.001`,
    /// `NaN`, `-Infinity`). Returns `None` for anything else.
    pub fn parse(s: &str) -> Option<DecimalValue> {
        let (negative, rest) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let lower = rest.to_ascii_lowercase();
        match lower.as_str() {
            "nan" | "snan" => return Some(DecimalValue::NaN),
            "inf" | "infinity" => return Some(DecimalValue::Infinity { negative }),
            _ => {}
        }
        let (mantissa, exp) = match lower.split_once('e') {
            Some((m, e)) => (m, e.parse::<i64>().ok()?),
            None => (lower.as_str(), 0),
        };
        let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let mut coefficient: u128 = 0;
        let mut exponent = exp;
        let mut digits = 0u32;
        let mut dropped_nonzero = false;
        for (i, c) in int_part.chars().chain(frac_part.chars()).enumerate() {
            let d = c.to_digit(10)?;
            let in_fraction = i >= int_part.len();
            if coefficient == 0 && d == 0 {
                if in_fraction {
                    exponent -= 1;
                }
                continue;
            }
            if digits < MAX_DIGITS + 4 {
                coefficient = coefficient * 10 + u128::from(d);
                digits += 1;
                if in_fraction {
                    exponent -= 1;
                }
            } else {
                dropped_nonzero |= d != 0;
                if !in_fraction {
                    exponent += 1;
                }
            }
        }
        let exponent =
            i32::try_from(exponent.clamp(i64::from(i32::MIN), i64::from(i32::MAX))).unwrap_or(0);
        Some(DecimalValue::round_finite(
            negative,
            coefficient,
            exponent,
            dropped_nonzero,
        ))
    }

    pub fn from_i64(i: i64) -> DecimalValue {
        DecimalValue::Finite {
            negative: i < 0,
            coefficient: u128::from(i.unsigned_abs()),
            exponent: 0,
        }
    }

    /// Converts a double to a decimal rounded to 15 significant digits,
    /// as MongoDB's arithmetic does when it mixes doubles and decimals
    /// (`0.1` becomes `0.100000000000000`).
    pub fn from_f64(f: f64) -> DecimalValue {
        if f.is_nan() {
            return DecimalValue::NaN;
        }
        if f.is_infinite() {
            return DecimalValue::Infinity { negative: f < 0.0 };
        }
        DecimalValue::parse(&format!("{f:.14e}")).unwrap_or(DecimalValue::NaN)
    }

    /// The nearest double.
    /// The value as an int64 when it is integral and fits.
    pub fn to_i64_exact(&self) -> Option<i64> {
        let DecimalValue::Finite {
            negative,
            coefficient,
            exponent,
        } = *self
        else {
            return None;
        };
        let mut value = coefficient;
        let mut exponent = exponent;
        while exponent > 0 {
            value = value.checked_mul(10)?;
            exponent -= 1;
        }
        while exponent < 0 {
            if value % 10 != 0 {
                return None;
            }
            value /= 10;
            exponent += 1;
        }
        let value = i128::try_from(value).ok()?;
        i64::try_from(if negative { -value } else { value }).ok()
    }

    pub fn to_f64(&self) -> f64 {
        match *self {
            DecimalValue::NaN => f64::NAN,
            DecimalValue::Infinity { negative } => {
                if negative {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }
            }
            DecimalValue::Finite {
                negative,
                coefficient,
                exponent,
            } => {
                let sign = if negative { "-" } else { "" };
                format!("{sign}{coefficient}e{exponent}")
                    .parse::<f64>()
                    .unwrap_or(f64::NAN)
            }
        }
    }

    /// Packs the value into a Decimal128: the one encoder, the inverse of
    /// [`DecimalValue::from_decimal128`].
    pub fn to_decimal128(&self) -> Decimal128 {
        Decimal128::from_bytes(self.to_bits().to_le_bytes())
    }

    /// Encodes as an IEEE 754-2008 decimal128 in binary integer decimal
    /// (BID): sign bit, 14-bit exponent biased by 6176, 113-bit
    /// coefficient. Every canonical coefficient (at most 34 digits) is
    /// below 2^113, so the "large coefficient" form is never needed. A
    /// value built outside Decimal128's range is rounded into it first.
    pub fn to_bits(&self) -> u128 {
        const EXPONENT_BIAS: i32 = 6176;
        const SIGN: u128 = 1 << 127;
        const INFINITY: u128 = 0b1_1110 << 122;
        const NAN: u128 = 0b1_1111 << 122;
        let (negative, coefficient, exponent) = match *self {
            DecimalValue::NaN => return NAN,
            DecimalValue::Infinity { negative } => {
                return INFINITY | if negative { SIGN } else { 0 };
            }
            DecimalValue::Finite {
                negative,
                coefficient,
                exponent,
            } => (negative, coefficient, exponent),
        };
        let in_range =
            coefficient <= MAX_COEFFICIENT && (MIN_EXPONENT..=MAX_EXPONENT).contains(&exponent);
        if !in_range {
            let rounded = DecimalValue::round_finite(negative, coefficient, exponent, false);
            return match rounded {
                // `round_finite` always lands in range; the check keeps a
                // bug there from recursing forever.
                DecimalValue::Finite {
                    coefficient,
                    exponent,
                    ..
                } if coefficient > MAX_COEFFICIENT
                    || !(MIN_EXPONENT..=MAX_EXPONENT).contains(&exponent) =>
                {
                    NAN
                }
                other => other.to_bits(),
            };
        }
        // In range, so the biased exponent is within 0..=12287 (14 bits).
        let biased = u128::from((exponent + EXPONENT_BIAS).unsigned_abs());
        let sign = if negative { SIGN } else { 0 };
        sign | (biased << 113) | coefficient
    }

    pub fn is_zero(&self) -> bool {
        matches!(self, DecimalValue::Finite { coefficient: 0, .. })
    }

    pub fn is_negative(&self) -> bool {
        match *self {
            DecimalValue::Infinity { negative } => negative,
            DecimalValue::Finite {
                negative,
                coefficient,
                ..
            } => negative && coefficient != 0,
            DecimalValue::NaN => false,
        }
    }

    pub fn negate(&self) -> DecimalValue {
        match *self {
            DecimalValue::NaN => DecimalValue::NaN,
            DecimalValue::Infinity { negative } => DecimalValue::Infinity {
                negative: !negative,
            },
            DecimalValue::Finite {
                negative,
                coefficient,
                exponent,
            } => DecimalValue::Finite {
                negative: !negative,
                coefficient,
                exponent,
            },
        }
    }

    /// Exact comparison; NaN equals NaN and is below everything else.
    pub fn compare(&self, other: &DecimalValue) -> Ordering {
        use DecimalValue::*;
        match (*self, *other) {
            (NaN, NaN) => Ordering::Equal,
            (NaN, _) => Ordering::Less,
            (_, NaN) => Ordering::Greater,
            (Infinity { negative: a }, Infinity { negative: b }) => b.cmp(&a),
            (Infinity { negative }, _) => {
                if negative {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
            (_, Infinity { negative }) => {
                if negative {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            (
                Finite {
                    negative: na,
                    coefficient: ca,
                    exponent: ea,
                },
                Finite {
                    negative: nb,
                    coefficient: cb,
                    exponent: eb,
                },
            ) => {
                let sign_a = signum(na, ca);
                let sign_b = signum(nb, cb);
                if sign_a != sign_b || sign_a == 0 {
                    return sign_a.cmp(&sign_b);
                }
                let magnitude = compare_magnitudes(ca, ea, cb, eb);
                if sign_a < 0 {
                    magnitude.reverse()
                } else {
                    magnitude
                }
            }
        }
    }

    /// Exact comparison with a double's binary value, as MongoDB compares
    /// decimals with doubles (`NumberDecimal("0.1") < 0.1`).
    pub fn compare_f64(&self, f: f64) -> Ordering {
        if f.is_nan() {
            return if matches!(self, DecimalValue::NaN) {
                Ordering::Equal
            } else {
                Ordering::Greater
            };
        }
        if f.is_infinite() {
            return self.compare(&DecimalValue::Infinity { negative: f < 0.0 });
        }
        let (negative, coefficient, exponent) = match *self {
            DecimalValue::Finite {
                negative,
                coefficient,
                exponent,
            } => (negative, coefficient, exponent),
            other => return other.compare(&DecimalValue::ZERO),
        };
        let sign_a = signum(negative, coefficient);
        let sign_b: i8 = if f > 0.0 {
            1
        } else if f < 0.0 {
            -1
        } else {
            0
        };
        if sign_a != sign_b || sign_a == 0 {
            return sign_a.cmp(&sign_b);
        }
        let magnitude = compare_decimal_with_binary(coefficient, exponent, f.abs());
        if sign_a < 0 {
            magnitude.reverse()
        } else {
            magnitude
        }
    }

    /// Builds a finite value, rounding the coefficient half-to-even to 34
    /// digits and clamping the exponent to Decimal128's range. `sticky`
    /// says nonzero digits below the coefficient were already dropped.
    pub fn round_finite(
        negative: bool,
        coefficient: u128,
        exponent: i32,
        sticky: bool,
    ) -> DecimalValue {
        let mut c = coefficient;
        let mut e = i64::from(exponent);
        let mut sticky = sticky;
        // The most significant digit dropped so far decides the rounding;
        // any nonzero digit below it breaks ties.
        let mut round_digit: Option<u128> = None;
        while c > MAX_COEFFICIENT || (e < i64::from(MIN_EXPONENT) && c != 0) {
            if let Some(d) = round_digit {
                sticky |= d != 0;
            }
            round_digit = Some(c % 10);
            c /= 10;
            e += 1;
        }
        if let Some(d) = round_digit {
            if d > 5 || (d == 5 && (sticky || c % 2 == 1)) {
                c += 1;
                if c > MAX_COEFFICIENT {
                    c /= 10;
                    e += 1;
                }
            }
        }
        if c == 0 {
            e = e.clamp(i64::from(MIN_EXPONENT), i64::from(MAX_EXPONENT));
        }
        // Large exponents fold into the coefficient while it has room
        // (clamping), beyond that the value overflows to infinity.
        while e > i64::from(MAX_EXPONENT) {
            if c == 0 {
                e = i64::from(MAX_EXPONENT);
                break;
            }
            if c.checked_mul(10).is_some_and(|v| v <= MAX_COEFFICIENT) {
                c *= 10;
                e -= 1;
            } else {
                return DecimalValue::Infinity { negative };
            }
        }
        DecimalValue::Finite {
            negative,
            coefficient: c,
            exponent: i32::try_from(e).unwrap_or(0),
        }
    }
}

/// Decimal arithmetic, exact up to the final rounding to 34 digits
/// (half to even), which is what IEEE 754-2008 decimal128 specifies.
impl DecimalValue {
    pub fn add(&self, other: &DecimalValue) -> DecimalValue {
        use DecimalValue::*;
        let (x, y) = (self.normalized(), other.normalized());
        match (x, y) {
            (NaN, _) | (_, NaN) => NaN,
            (Infinity { negative: a }, Infinity { negative: b }) => {
                if a == b {
                    Infinity { negative: a }
                } else {
                    NaN
                }
            }
            (inf @ Infinity { .. }, _) | (_, inf @ Infinity { .. }) => inf,
            (
                Finite {
                    negative: na,
                    coefficient: ca,
                    exponent: ea,
                },
                Finite {
                    negative: nb,
                    coefficient: cb,
                    exponent: eb,
                },
            ) => {
                if ca == 0 && cb == 0 {
                    return Finite {
                        negative: na && nb,
                        coefficient: 0,
                        exponent: ea.min(eb),
                    };
                }
                if ca == 0 {
                    return y;
                }
                if cb == 0 {
                    return x;
                }
                // Align the operand with the larger exponent down to the
                // smaller one. When they are far apart the small operand
                // only decides rounding, so it becomes a one-unit nudge.
                let ((nh, ch, eh), (nl, cl, el)) = if ea >= eb {
                    ((na, ca, ea), (nb, cb, eb))
                } else {
                    ((nb, cb, eb), (na, ca, ea))
                };
                let diff = i64::from(eh) - i64::from(el);
                let (high, low, exponent) = if diff > 80 {
                    let mut high = BigUint::from_u128(ch);
                    high.mul_pow10(40);
                    (high, BigUint::from_u128(1), i64::from(eh) - 40)
                } else {
                    let mut high = BigUint::from_u128(ch);
                    high.mul_pow10(diff as u32);
                    (high, BigUint::from_u128(cl), i64::from(el))
                };
                let (negative, magnitude) = if nh == nl {
                    let mut sum = high;
                    sum.add(&low);
                    (nh, sum)
                } else if high >= low {
                    let mut d = high;
                    d.sub(&low);
                    (nh, d)
                } else {
                    let mut d = low;
                    d.sub(&high);
                    (nl, d)
                };
                let negative = negative && !magnitude.is_zero();
                DecimalValue::from_big(negative, &magnitude, exponent, false)
            }
        }
    }

    pub fn sub(&self, other: &DecimalValue) -> DecimalValue {
        self.add(&other.negate())
    }

    pub fn mul(&self, other: &DecimalValue) -> DecimalValue {
        use DecimalValue::*;
        match (self.normalized(), other.normalized()) {
            (NaN, _) | (_, NaN) => NaN,
            (Infinity { negative: a }, Infinity { negative: b }) => Infinity { negative: a != b },
            (Infinity { negative: a }, f @ Finite { .. })
            | (f @ Finite { .. }, Infinity { negative: a }) => {
                if f.is_zero() {
                    NaN
                } else {
                    Infinity {
                        negative: a != f.is_negative(),
                    }
                }
            }
            (
                Finite {
                    negative: na,
                    coefficient: ca,
                    exponent: ea,
                },
                Finite {
                    negative: nb,
                    coefficient: cb,
                    exponent: eb,
                },
            ) => {
                let product = BigUint::from_u128(ca).mul(&BigUint::from_u128(cb));
                DecimalValue::from_big(na != nb, &product, i64::from(ea) + i64::from(eb), false)
            }
        }
    }

    /// The remainder of a truncating division, sign of the dividend
    /// (IEEE 754 `fmod`): exact, at the smaller of the two exponents.
    /// A zero divisor or an infinite dividend gives NaN; an infinite
    /// divisor leaves the dividend as it is.
    pub fn rem(&self, other: &DecimalValue) -> DecimalValue {
        use DecimalValue::*;
        match (self.normalized(), other.normalized()) {
            (NaN, _) | (_, NaN) | (Infinity { .. }, _) => NaN,
            (x, Infinity { .. }) => x,
            (_, y) if y.is_zero() => NaN,
            (
                x @ Finite {
                    negative,
                    coefficient: ca,
                    exponent: ea,
                },
                y @ Finite {
                    coefficient: cb,
                    exponent: eb,
                    ..
                },
            ) => {
                let exponent = ea.min(eb);
                // The divisor at the common exponent; the dividend's
                // extra digits are folded in one at a time, so no
                // intermediate exceeds ten times the divisor.
                let exact = pow10_u128(eb - exponent)
                    .and_then(|scale| cb.checked_mul(scale))
                    .and_then(|divisor| {
                        let mut r = ca % divisor;
                        for _ in 0..(ea - exponent) {
                            r = r.checked_mul(10)? % divisor;
                        }
                        Some(r)
                    });
                match exact {
                    Some(r) => DecimalValue::round_finite(negative, r, exponent, false),
                    // Magnitudes too far apart for 128 bits: through doubles.
                    None => DecimalValue::from_f64(x.to_f64() % y.to_f64()),
                }
            }
        }
    }

    /// Division; `None` when dividing by zero (callers report their own
    /// error, as `$divide` does).
    pub fn div(&self, other: &DecimalValue) -> Option<DecimalValue> {
        use DecimalValue::*;
        if other.is_zero() {
            return None;
        }
        Some(match (self.normalized(), other.normalized()) {
            (NaN, _) | (_, NaN) => NaN,
            (Infinity { .. }, Infinity { .. }) => NaN,
            (Infinity { negative: a }, b) => Infinity {
                negative: a != b.is_negative(),
            },
            (a, Infinity { negative: b }) => Finite {
                negative: a.is_negative() != b,
                coefficient: 0,
                exponent: 0,
            },
            (
                Finite {
                    negative: na,
                    coefficient: ca,
                    exponent: ea,
                },
                Finite {
                    negative: nb,
                    coefficient: cb,
                    exponent: eb,
                },
            ) => {
                let ideal = i64::from(ea) - i64::from(eb);
                if ca == 0 {
                    return Some(DecimalValue::round_finite(
                        na != nb,
                        0,
                        ideal.clamp(i64::from(MIN_EXPONENT), i64::from(MAX_EXPONENT)) as i32,
                        false,
                    ));
                }
                // Long division digit by digit: the remainder stays below
                // the divisor (< 10^34), so `rem * 10 + digit` fits a u128.
                let scale = (38 + decimal_digits(cb)).saturating_sub(decimal_digits(ca));
                let dividend = ca.to_string();
                let mut quotient = String::new();
                let mut rem: u128 = 0;
                for digit in dividend
                    .bytes()
                    .map(|b| u128::from(b - b'0'))
                    .chain(std::iter::repeat_n(0, scale as usize))
                {
                    rem = rem * 10 + digit;
                    let q = rem / cb;
                    rem %= cb;
                    if !(quotient.is_empty() && q == 0) {
                        quotient.push(char::from(b'0' + q as u8));
                    }
                }
                let mut exponent = ideal - i64::from(scale);
                let exact = rem == 0;
                // An exact quotient takes the exponent closest to the ideal
                // one (1/4 is 0.25, not 0.2500...).
                if exact {
                    while exponent < ideal && quotient.len() > 1 && quotient.ends_with('0') {
                        quotient.pop();
                        exponent += 1;
                    }
                }
                DecimalValue::from_digits(na != nb, &quotient, exponent, !exact)
            }
        })
    }

    /// The value with its coefficient within 34 digits (values built by
    /// hand may exceed it; everything here relies on the bound).
    fn normalized(&self) -> DecimalValue {
        match *self {
            DecimalValue::Finite {
                negative,
                coefficient,
                exponent,
            } if coefficient > MAX_COEFFICIENT => {
                DecimalValue::round_finite(negative, coefficient, exponent, false)
            }
            other => other,
        }
    }

    fn from_big(negative: bool, magnitude: &BigUint, exponent: i64, sticky: bool) -> DecimalValue {
        DecimalValue::from_digits(negative, &magnitude.to_decimal_string(), exponent, sticky)
    }

    /// Rounds a decimal digit string to 34 digits (half to even, `sticky`
    /// meaning nonzero digits beyond the string) and packs it.
    fn from_digits(negative: bool, digits: &str, exponent: i64, sticky: bool) -> DecimalValue {
        let digits = digits.trim_start_matches('0');
        if digits.is_empty() {
            let e = exponent.clamp(i64::from(MIN_EXPONENT), i64::from(MAX_EXPONENT)) as i32;
            return DecimalValue::Finite {
                negative,
                coefficient: 0,
                exponent: e,
            };
        }
        let keep = digits.len().min(MAX_DIGITS as usize + 1);
        let dropped = &digits[keep..];
        let sticky = sticky || dropped.bytes().any(|b| b != b'0');
        let coefficient: u128 = digits[..keep].parse().unwrap_or(0);
        let exponent = exponent + dropped.len() as i64;
        let exponent = exponent.clamp(i64::from(i32::MIN) / 2, i64::from(i32::MAX) / 2) as i32;
        DecimalValue::round_finite(negative, coefficient, exponent, sticky)
    }
}

/// 10^n, when it fits 128 bits.
fn pow10_u128(n: i32) -> Option<u128> {
    10u128.checked_pow(u32::try_from(n).ok()?)
}

fn signum(negative: bool, coefficient: u128) -> i8 {
    if coefficient == 0 {
        0
    } else if negative {
        -1
    } else {
        1
    }
}

pub(crate) fn decimal_digits(c: u128) -> u32 {
    if c == 0 {
        1
    } else {
        c.ilog10() + 1
    }
}

/// Compares `ca * 10^ea` with `cb * 10^eb` (both nonnegative).
fn compare_magnitudes(ca: u128, ea: i32, cb: u128, eb: i32) -> Ordering {
    match (ca == 0, cb == 0) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Less,
        (false, true) => return Ordering::Greater,
        _ => {}
    }
    let (da, db) = (decimal_digits(ca), decimal_digits(cb));
    let adjusted_a = i64::from(ea) + i64::from(da);
    let adjusted_b = i64::from(eb) + i64::from(db);
    if adjusted_a != adjusted_b {
        return adjusted_a.cmp(&adjusted_b);
    }
    // Same magnitude: pad the shorter coefficient to the same digit count.
    let (mut xa, mut xb) = (BigUint::from_u128(ca), BigUint::from_u128(cb));
    if da < db {
        xa.mul_pow10(db - da);
    } else {
        xb.mul_pow10(da - db);
    }
    xa.cmp(&xb)
}

/// Compares `coefficient * 10^exponent` (nonzero) with a positive finite
/// double exactly, with big-integer arithmetic when the magnitudes are close.
fn compare_decimal_with_binary(coefficient: u128, exponent: i32, f: f64) -> Ordering {
    // Rough magnitudes first: the decimal lies in [10^adj, 10^(adj+1)).
    let adjusted = i64::from(exponent) + i64::from(decimal_digits(coefficient)) - 1;
    if adjusted > 310 {
        return Ordering::Greater;
    }
    if adjusted < -330 {
        return Ordering::Less;
    }
    let (mantissa, bin_exp) = decompose_f64(f);
    // Compare c * 10^q with m * 2^e by clearing negative exponents.
    let q = i64::from(exponent);
    let mut left = BigUint::from_u128(coefficient);
    let mut right = BigUint::from_u128(u128::from(mantissa));
    if q >= 0 {
        left.mul_pow10(q as u32);
    } else {
        right.mul_pow10((-q) as u32);
    }
    if bin_exp >= 0 {
        right.shl(bin_exp as u32);
    } else {
        left.shl((-bin_exp) as u32);
    }
    left.cmp(&right)
}

/// Splits a positive finite double into `mantissa * 2^exponent`.
fn decompose_f64(f: f64) -> (u64, i32) {
    let bits = f.to_bits();
    let exp_bits = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1u64 << 52) - 1);
    if exp_bits == 0 {
        (frac, -1074)
    } else {
        (frac | (1u64 << 52), exp_bits - 1075)
    }
}

/// Just enough unsigned big-integer arithmetic for exact decimal/binary
/// comparison and decimal arithmetic: little-endian base-2^32 limbs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BigUint {
    limbs: Vec<u32>,
}

impl BigUint {
    pub(crate) fn from_u128(v: u128) -> BigUint {
        let mut limbs = Vec::with_capacity(4);
        let mut v = v;
        while v != 0 {
            limbs.push(v as u32);
            v >>= 32;
        }
        BigUint { limbs }
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.limbs.is_empty()
    }

    fn trim(&mut self) {
        while self.limbs.last() == Some(&0) {
            self.limbs.pop();
        }
    }

    pub(crate) fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for limb in &mut self.limbs {
            let v = u64::from(*limb) * u64::from(m) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.limbs.push(carry as u32);
        }
        self.trim();
    }

    pub(crate) fn mul_pow10(&mut self, mut n: u32) {
        while n >= 9 {
            self.mul_small(1_000_000_000);
            n -= 9;
        }
        if n > 0 {
            self.mul_small(10u32.pow(n));
        }
    }

    pub(crate) fn shl(&mut self, n: u32) {
        if self.is_zero() {
            return;
        }
        let words = (n / 32) as usize;
        let bits = n % 32;
        if bits > 0 {
            let mut carry = 0u32;
            for limb in &mut self.limbs {
                let v = (*limb << bits) | carry;
                carry = *limb >> (32 - bits);
                *limb = v;
            }
            if carry != 0 {
                self.limbs.push(carry);
            }
        }
        if words > 0 {
            let mut shifted = vec![0u32; words];
            shifted.extend_from_slice(&self.limbs);
            self.limbs = shifted;
        }
    }

    pub(crate) fn add(&mut self, other: &BigUint) {
        let mut carry = 0u64;
        for i in 0..self.limbs.len().max(other.limbs.len()) {
            let a = u64::from(self.limbs.get(i).copied().unwrap_or(0));
            let b = u64::from(other.limbs.get(i).copied().unwrap_or(0));
            let v = a + b + carry;
            if i < self.limbs.len() {
                self.limbs[i] = v as u32;
            } else {
                self.limbs.push(v as u32);
            }
            carry = v >> 32;
        }
        if carry != 0 {
            self.limbs.push(carry as u32);
        }
    }

    /// `self -= other`; requires `self >= other`.
    pub(crate) fn sub(&mut self, other: &BigUint) {
        let mut borrow = 0i64;
        for i in 0..self.limbs.len() {
            let b = i64::from(other.limbs.get(i).copied().unwrap_or(0));
            let mut v = i64::from(self.limbs[i]) - b - borrow;
            if v < 0 {
                v += 1 << 32;
                borrow = 1;
            } else {
                borrow = 0;
            }
            self.limbs[i] = v as u32;
        }
        self.trim();
    }

    pub(crate) fn mul(&self, other: &BigUint) -> BigUint {
        let mut out = vec![0u32; self.limbs.len() + other.limbs.len()];
        for (i, &a) in self.limbs.iter().enumerate() {
            let mut carry = 0u64;
            for (j, &b) in other.limbs.iter().enumerate() {
                let v = u64::from(out[i + j]) + u64::from(a) * u64::from(b) + carry;
                out[i + j] = v as u32;
                carry = v >> 32;
            }
            let mut k = i + other.limbs.len();
            while carry != 0 && k < out.len() {
                let v = u64::from(out[k]) + carry;
                out[k] = v as u32;
                carry = v >> 32;
                k += 1;
            }
        }
        let mut r = BigUint { limbs: out };
        r.trim();
        r
    }

    /// Divides in place by a small divisor, returning the remainder.
    pub(crate) fn div_small(&mut self, d: u32) -> u32 {
        let mut rem = 0u64;
        for limb in self.limbs.iter_mut().rev() {
            let v = (rem << 32) | u64::from(*limb);
            *limb = (v / u64::from(d)) as u32;
            rem = v % u64::from(d);
        }
        self.trim();
        rem as u32
    }

    /// The decimal digits, most significant first (`"0"` for zero).
    pub(crate) fn to_decimal_string(&self) -> String {
        if self.is_zero() {
            return "0".to_string();
        }
        let mut n = self.clone();
        let mut chunks = Vec::new();
        while !n.is_zero() {
            chunks.push(n.div_small(1_000_000_000));
        }
        let mut s = String::new();
        for (i, chunk) in chunks.iter().rev().enumerate() {
            if i == 0 {
                s.push_str(&chunk.to_string());
            } else {
                s.push_str(&format!("{chunk:09}"));
            }
        }
        s
    }
}

impl PartialOrd for BigUint {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for BigUint {
    fn cmp(&self, other: &Self) -> Ordering {
        self.limbs
            .len()
            .cmp(&other.limbs.len())
            .then_with(|| self.limbs.iter().rev().cmp(other.limbs.iter().rev()))
    }
}

/// The BSON type name MongoDB uses in `$type` and error messages.
pub fn type_name(value: &Bson) -> &'static str {
    match value {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Binary(_) => "binData",
        Bson::Undefined => "undefined",
        Bson::ObjectId(_) => "objectId",
        Bson::Boolean(_) => "bool",
        Bson::DateTime(_) => "date",
        Bson::Null => "null",
        Bson::RegularExpression(_) => "regex",
        Bson::DbPointer(_) => "dbPointer",
        Bson::JavaScriptCode(_) => "javascript",
        Bson::Symbol(_) => "symbol",
        Bson::JavaScriptCodeWithScope(_) => "javascriptWithScope",
        Bson::Int32(_) => "int",
        Bson::Timestamp(_) => "timestamp",
        Bson::Int64(_) => "long",
        Bson::Decimal128(_) => "decimal",
        Bson::MinKey => "minKey",
        Bson::MaxKey => "maxKey",
    }
}

/// The BSON type number (`$type: 2`); MinKey is -1 and MaxKey 127.
pub fn type_code(value: &Bson) -> i32 {
    match value {
        Bson::MinKey => -1,
        Bson::MaxKey => 127,
        other => i32::from(other.element_type() as u8),
    }
}

/// A whole number as i64, or `None` if the value is not one.
pub fn number_as_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(n) => Some(*n as i64),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) if f.fract() == 0.0 && f.is_finite() && f.abs() < 9.2e18 => Some(*f as i64),
        Bson::Decimal128(d) => DecimalValue::from_decimal128(d).to_i64_exact(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId, Binary, DateTime, Regex, Timestamp};
    use proptest::prelude::*;
    use std::str::FromStr;

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(Decimal128::from_str(s).unwrap())
    }

    fn regex(p: &str, o: &str) -> Bson {
        Bson::RegularExpression(Regex {
            pattern: p.try_into().unwrap(),
            options: o.try_into().unwrap(),
        })
    }

    #[test]
    fn type_order_is_mongodb_order() {
        let ordered = vec![
            Bson::MinKey,
            Bson::Null,
            Bson::Int32(5),
            Bson::String("a".into()),
            Bson::Document(doc! {}),
            Bson::Array(vec![]),
            Bson::Binary(Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: vec![],
            }),
            Bson::ObjectId(ObjectId::from_bytes([0; 12])),
            Bson::Boolean(false),
            Bson::DateTime(DateTime::from_millis(0)),
            Bson::Timestamp(Timestamp {
                time: 0,
                increment: 0,
            }),
            regex("a", ""),
            Bson::JavaScriptCode("x".into()),
            Bson::MaxKey,
        ];
        for (i, a) in ordered.iter().enumerate() {
            for (j, b) in ordered.iter().enumerate() {
                assert_eq!(compare(a, b), i.cmp(&j), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn numbers_compare_across_types() {
        assert!(values_equal(&Bson::Int32(1), &Bson::Double(1.0)));
        assert!(values_equal(&Bson::Int64(1), &dec("1.000")));
        assert!(values_equal(&Bson::Double(-0.0), &Bson::Int32(0)));
        assert_eq!(
            compare(
                &Bson::Int64(i64::MAX),
                &Bson::Double(9_223_372_036_854_775_808.0)
            ),
            Ordering::Less
        );
        assert_eq!(
            compare(&Bson::Int64(i64::MAX - 1), &Bson::Int64(i64::MAX)),
            Ordering::Less
        );
        assert_eq!(
            compare(
                &Bson::Int64(i64::MIN),
                &Bson::Double(-9_223_372_036_854_775_808.0)
            ),
            Ordering::Equal
        );
        assert_eq!(
            compare(
                &Bson::Int64((1 << 53) + 1),
                &Bson::Double((1u64 << 53) as f64)
            ),
            Ordering::Greater
        );
        assert_eq!(compare(&Bson::Int32(2), &Bson::Double(2.5)), Ordering::Less);
        assert_eq!(
            compare(&Bson::Int64(-3), &Bson::Double(-2.5)),
            Ordering::Less
        );
        assert_eq!(compare(&dec("0.1"), &Bson::Double(0.1)), Ordering::Less);
        assert_eq!(compare(&dec("0.5"), &Bson::Double(0.5)), Ordering::Equal);
        assert_eq!(
            compare(&dec("1E+400"), &Bson::Double(f64::MAX)),
            Ordering::Greater
        );
        assert_eq!(
            compare(&dec("-Infinity"), &Bson::Double(f64::NEG_INFINITY)),
            Ordering::Equal
        );
        assert_eq!(
            compare(&dec("9223372036854775807"), &Bson::Int64(i64::MAX)),
            Ordering::Equal
        );
        assert_eq!(compare(&dec("1.5"), &dec("1.50")), Ordering::Equal);
        assert_eq!(compare(&dec("-2"), &dec("1E-10")), Ordering::Less);
    }

    #[test]
    fn nan_is_below_all_numbers_and_equals_nan() {
        let nan = Bson::Double(f64::NAN);
        assert_eq!(
            compare(&nan, &Bson::Double(f64::NEG_INFINITY)),
            Ordering::Less
        );
        assert_eq!(compare(&nan, &Bson::Int64(i64::MIN)), Ordering::Less);
        assert_eq!(compare(&nan, &dec("NaN")), Ordering::Equal);
        assert_eq!(compare(&nan, &nan), Ordering::Equal);
        assert_eq!(compare(&dec("NaN"), &dec("-Infinity")), Ordering::Less);
        assert_eq!(compare(&nan, &Bson::Null), Ordering::Greater);
    }

    #[test]
    fn strings_and_symbols_compare_bytewise() {
        assert!(values_equal(
            &Bson::String("abc".into()),
            &Bson::Symbol("abc".into())
        ));
        assert_eq!(
            compare(&Bson::String("B".into()), &Bson::String("a".into())),
            Ordering::Less
        );
        assert_eq!(
            compare(&Bson::String("ab".into()), &Bson::String("abc".into())),
            Ordering::Less
        );
        assert_eq!(
            compare(&Bson::String("é".into()), &Bson::String("z".into())),
            Ordering::Greater
        );
    }

    #[test]
    fn documents_compare_type_then_name_then_value() {
        // The type of the value decides before the field name.
        assert_eq!(
            compare_documents(&doc! {"b": 1}, &doc! {"a": "x"}),
            Ordering::Less
        );
        assert_eq!(
            compare_documents(&doc! {"a": 1}, &doc! {"b": 1}),
            Ordering::Less
        );
        assert_eq!(
            compare_documents(&doc! {"a": 2}, &doc! {"a": 1, "b": 1}),
            Ordering::Greater
        );
        assert_eq!(
            compare_documents(&doc! {"a": 1}, &doc! {"a": 1, "b": 1}),
            Ordering::Less
        );
        assert_eq!(
            compare_documents(&doc! {"a": 1, "b": 2.0}, &doc! {"a": 1i64, "b": 2}),
            Ordering::Equal
        );
    }

    #[test]
    fn arrays_binary_regex_timestamp() {
        assert_eq!(
            compare(
                &Bson::Array(vec![1.into(), 2.into()]),
                &Bson::Array(vec![1.into(), 3.into()])
            ),
            Ordering::Less
        );
        assert_eq!(
            compare(
                &Bson::Array(vec![1.into()]),
                &Bson::Array(vec![1.into(), 0.into()])
            ),
            Ordering::Less
        );
        let bin = |st: u8, bytes: Vec<u8>| {
            Bson::Binary(Binary {
                subtype: st.into(),
                bytes,
            })
        };
        assert_eq!(
            compare(&bin(5, vec![9]), &bin(0, vec![1, 1])),
            Ordering::Less
        );
        assert_eq!(
            compare(&bin(5, vec![1]), &bin(0, vec![9])),
            Ordering::Greater
        );
        assert_eq!(compare(&bin(0, vec![1]), &bin(0, vec![2])), Ordering::Less);
        assert_eq!(compare(&regex("a", "i"), &regex("a", "m")), Ordering::Less);
        assert_eq!(
            compare(&regex("b", ""), &regex("a", "m")),
            Ordering::Greater
        );
        let ts = |time, increment| Bson::Timestamp(Timestamp { time, increment });
        assert_eq!(compare(&ts(1, 5), &ts(2, 0)), Ordering::Less);
        assert_eq!(compare(&ts(u32::MAX, 0), &ts(1, 0)), Ordering::Greater);
        assert_eq!(
            compare(
                &Bson::DateTime(DateTime::from_millis(-5)),
                &Bson::DateTime(DateTime::from_millis(3))
            ),
            Ordering::Less
        );
        assert!(values_equal(&Bson::Null, &Bson::Undefined));
    }

    #[test]
    fn decimal_round_trips_and_rounds() {
        let d = DecimalValue::parse("1.23E+5").unwrap();
        assert_eq!(
            d,
            DecimalValue::Finite {
                negative: false,
                coefficient: 123,
                exponent: 3
            }
        );
        assert_eq!(d.to_decimal128().to_string(), "1.23E+5");
        let long = DecimalValue::parse("1234567890123456789012345678901234567").unwrap();
        assert_eq!(
            long,
            DecimalValue::Finite {
                negative: false,
                coefficient: 1234567890123456789012345678901235,
                exponent: 3
            }
        );
        assert_eq!(
            DecimalValue::from_f64(0.1).to_decimal128().to_string(),
            "0.100000000000000"
        );
        assert_eq!(type_code(&Bson::MinKey), -1);
        assert_eq!(type_code(&Bson::Int64(1)), 18);
    }

    /// The encoder writes exactly the bytes `bson` parses a literal into,
    /// and the decoder reads them back to the same value.
    #[test]
    fn decimal128_encoding_matches_bson_bytes() {
        for text in [
            "0",
            "-0",
            "1",
            "-1",
            "1.5",
            "-1.5",
            "0.001",
            "1E+6144",
            "1E-6176",
            "-1E-6176",
            "0E+6111",
            "0E-6176",
            "9999999999999999999999999999999999",
            "-9999999999999999999999999999999999",
            "9.999999999999999999999999999999999E+6144",
            "1234567890123456789012345678901234E-6176",
            "NaN",
            "Infinity",
            "-Infinity",
            "123.456E+20",
            "18446744073709551616",
        ] {
            let bytes = Decimal128::from_str(text).unwrap();
            let value = DecimalValue::from_decimal128(&bytes);
            assert_eq!(value.to_decimal128().bytes(), bytes.bytes(), "{text}");
            assert_eq!(DecimalValue::from_bits(value.to_bits()), value, "{text}");
        }
        // Out-of-range values round into range on the way out.
        let clamped = DecimalValue::Finite {
            negative: false,
            coefficient: 1,
            exponent: 6112,
        };
        assert_eq!(clamped.to_decimal128().to_string(), "1.0E+6112");
        let tiny = DecimalValue::Finite {
            negative: true,
            coefficient: 1,
            exponent: -6200,
        };
        assert_eq!(tiny.to_decimal128().to_string(), "-0E-6176");
        let huge = DecimalValue::Finite {
            negative: false,
            coefficient: MAX_COEFFICIENT,
            exponent: 6111,
        };
        assert_eq!(
            huge.to_bits(),
            DecimalValue::parse("9.999999999999999999999999999999999E+6144")
                .unwrap()
                .to_bits()
        );
    }

    fn d(s: &str) -> DecimalValue {
        DecimalValue::parse(s).unwrap()
    }

    #[test]
    fn number_arithmetic_promotes_like_mongodb() {
        let add = |a: Number, b: Number| {
            a.combine_checked(b, i64::checked_add, |x, y| x + y, DecimalValue::add)
        };
        assert!(matches!(
            add(Number::Int32(1), Number::Int32(2)),
            Some(Number::Int32(3))
        ));
        assert!(matches!(
            add(Number::Int32(i32::MAX), Number::Int32(1)),
            Some(Number::Int64(2_147_483_648))
        ));
        assert!(matches!(
            add(Number::Int64(1), Number::Int32(2)),
            Some(Number::Int64(3))
        ));
        assert!(
            matches!(add(Number::Int64(1), Number::Double(0.5)), Some(Number::Double(x)) if x == 1.5)
        );
        assert!(matches!(
            add(
                Number::Double(1.0),
                Number::Decimal(DecimalValue::from_i64(2))
            ),
            Some(Number::Decimal(_))
        ));
        assert!(add(Number::Int64(i64::MAX), Number::Int32(1)).is_none());
        let widened = Number::Int64(i64::MAX).combine_widening(
            Number::Int32(1),
            i64::checked_add,
            |x, y| x + y,
            DecimalValue::add,
        );
        assert!(matches!(widened, Number::Double(x) if x == 9_223_372_036_854_775_808.0));
        assert_eq!(Number::Int32(4).integral(), Some(4));
        assert_eq!(Number::Double(4.0).integral(), None);
    }

    #[test]
    fn number_add_widens_and_checked_add_refuses_overflow() {
        let int_max = Number::Int32(i32::MAX);
        assert_eq!(
            int_max.add_widening(Number::Int32(1)),
            Number::Int64(2_147_483_648)
        );
        assert_eq!(
            Number::Int32(1).add_widening(Number::Int32(2)),
            Number::Int32(3)
        );
        assert_eq!(
            Number::Int64(i64::MAX).add_widening(Number::Int64(1)),
            Number::Double(9_223_372_036_854_775_808.0)
        );
        assert_eq!(
            Number::Int64(1).add_widening(Number::Double(0.5)),
            Number::Double(1.5)
        );
        assert_eq!(
            Number::Decimal(d("0.1")).add_widening(Number::Int32(1)),
            Number::Decimal(d("1.1"))
        );
        assert_eq!(
            Number::Decimal(d("1")).add_widening(Number::Double(0.1)),
            Number::Decimal(d("1.100000000000000"))
        );
        assert_eq!(Number::Int64(i64::MAX).checked_add(Number::Int32(1)), None);
        assert_eq!(
            Number::Int64(-1).checked_add(Number::Int32(1)),
            Some(Number::Int64(0))
        );
    }

    #[test]
    fn number_zero_and_truncation() {
        assert!(Number::Double(-0.0).is_zero());
        assert!(Number::Decimal(d("-0E+3")).is_zero());
        assert!(!Number::Int64(1).is_zero());
        assert_eq!(Number::Double(-4.9).truncate_to_i64(), Ok(-4));
        assert_eq!(Number::Decimal(d("7.99")).truncate_to_i64(), Ok(7));
        assert_eq!(Number::Int64(i64::MIN).truncate_to_i64(), Ok(i64::MIN));
        assert_eq!(
            Number::Double(f64::NAN).truncate_to_i64(),
            Err(NotIntegral::NotFinite)
        );
        assert_eq!(
            Number::Decimal(DecimalValue::Infinity { negative: true }).truncate_to_i64(),
            Err(NotIntegral::NotFinite)
        );
        assert_eq!(
            Number::Double(1e19).truncate_to_i64(),
            Err(NotIntegral::OutOfRange)
        );
    }

    #[test]
    fn number_rem_follows_the_dividend_and_the_wider_type() {
        assert_eq!(
            Number::Int32(7).checked_rem(Number::Int32(3)),
            Some(Number::Int32(1))
        );
        assert_eq!(
            Number::Int32(-7).checked_rem(Number::Int32(3)),
            Some(Number::Int32(-1))
        );
        assert_eq!(
            Number::Int32(7).checked_rem(Number::Int32(-3)),
            Some(Number::Int32(1))
        );
        assert_eq!(
            Number::Int64(7).checked_rem(Number::Int32(3)),
            Some(Number::Int64(1))
        );
        assert_eq!(
            Number::Int64(i64::MIN).checked_rem(Number::Int64(-1)),
            Some(Number::Int64(0))
        );
        assert_eq!(
            Number::Double(7.5).checked_rem(Number::Int32(2)),
            Some(Number::Double(1.5))
        );
        assert_eq!(Number::Int32(1).checked_rem(Number::Int32(0)), None);
        assert_eq!(Number::Int32(1).checked_rem(Number::Double(-0.0)), None);
        assert_eq!(
            Number::Int32(1).checked_rem(Number::Decimal(d("0E-5"))),
            None
        );
        let dec_rem =
            |a: &str, b: &str| match Number::Decimal(d(a)).checked_rem(Number::Decimal(d(b))) {
                Some(Number::Decimal(r)) => r.to_decimal128().to_string(),
                other => panic!("{other:?}"),
            };
        assert_eq!(dec_rem("7.5", "2"), "1.5");
        assert_eq!(dec_rem("-7.5", "2"), "-1.5");
        assert_eq!(dec_rem("10", "0.3"), "0.1");
        assert_eq!(dec_rem("1E+20", "7"), "2");
        assert_eq!(dec_rem("5", "7.00"), "5.00");
        assert_eq!(dec_rem("Infinity", "7"), "NaN");
        assert_eq!(dec_rem("5", "-Infinity"), "5");
        assert_eq!(
            Number::Int32(7).checked_rem(Number::Decimal(d("2"))),
            Some(Number::Decimal(d("1")))
        );
    }

    #[test]
    fn decimal_arithmetic() {
        let show = |v: DecimalValue| v.to_decimal128().to_string();
        assert_eq!(show(d("0.1").add(&d("0.2"))), "0.3");
        assert_eq!(
            show(d("1").add(&DecimalValue::from_f64(0.1))),
            "1.100000000000000"
        );
        assert_eq!(
            show(d("1E+50").add(&d("1E-50"))),
            "1.000000000000000000000000000000000E+50"
        );
        assert_eq!(show(d("5").sub(&d("7.5"))), "-2.5");
        assert_eq!(show(d("1.5").mul(&d("-2"))), "-3.0");
        assert_eq!(show(d("1").div(&d("4")).unwrap()), "0.25");
        assert_eq!(show(d("10").div(&d("2")).unwrap()), "5");
        assert_eq!(
            show(d("1").div(&d("3")).unwrap()),
            "0.3333333333333333333333333333333333"
        );
        assert_eq!(
            show(d("2").div(&d("3")).unwrap()),
            "0.6666666666666666666666666666666667"
        );
        assert!(d("1").div(&d("0")).is_none());
        assert_eq!(show(d("Infinity").add(&d("-Infinity"))), "NaN");
        assert_eq!(
            show(d("9999999999999999999999999999999999").add(&d("1"))),
            "1.000000000000000000000000000000000E+34"
        );
    }

    fn arb_bson() -> impl Strategy<Value = Bson> {
        let leaf = prop_oneof![
            Just(Bson::Null),
            Just(Bson::MinKey),
            Just(Bson::MaxKey),
            Just(Bson::Undefined),
            any::<i32>().prop_map(Bson::Int32),
            any::<i64>().prop_map(Bson::Int64),
            any::<f64>().prop_map(Bson::Double),
            prop_oneof![Just(i64::MAX), Just(i64::MIN), Just(1 << 53), Just(0)]
                .prop_map(Bson::Int64),
            prop_oneof![
                Just(9_223_372_036_854_775_808.0),
                Just(-9_223_372_036_854_775_808.0),
                Just(0.5),
                Just(f64::NAN)
            ]
            .prop_map(Bson::Double),
            (any::<i64>(), -20i32..20).prop_map(|(c, e)| dec(&format!("{c}E{e}"))),
            "[a-c]{0,3}".prop_map(Bson::String),
            "[a-c]{0,3}".prop_map(Bson::Symbol),
            any::<bool>().prop_map(Bson::Boolean),
            any::<i64>().prop_map(|m| Bson::DateTime(DateTime::from_millis(m))),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
                prop::collection::vec(("[ab]", inner), 0..3).prop_map(|fields| {
                    let mut d = Document::new();
                    for (k, v) in fields {
                        d.insert(k, v);
                    }
                    Bson::Document(d)
                }),
            ]
        })
    }

    proptest! {
        #[test]
        fn compare_is_antisymmetric(a in arb_bson(), b in arb_bson()) {
            prop_assert_eq!(compare(&a, &b), compare(&b, &a).reverse());
            prop_assert_eq!(compare(&a, &a), Ordering::Equal);
        }

        #[test]
        fn strings_in_place_compare_as_decoded(a in arb_bson(), s in "[a-c]{0,3}") {
            prop_assert_eq!(compare_to_str(&a, &s), compare(&a, &Bson::String(s.clone())));
        }

        #[test]
        fn raw_numbers_are_the_decoded_numbers(a in arb_bson()) {
            let doc = doc! {"v": a.clone()};
            let bytes = doc.to_vec().unwrap();
            let raw = bson::RawDocument::from_bytes(&bytes).unwrap();
            let value = raw.get("v").unwrap().unwrap();
            // Debug output, so that NaN equals NaN.
            prop_assert_eq!(format!("{:?}", Number::of_raw(value)), format!("{:?}", Number::of(&a)));
        }

        #[test]
        fn compare_is_transitive(a in arb_bson(), b in arb_bson(), c in arb_bson()) {
            let mut v = [a, b, c];
            v.sort_by(compare);
            prop_assert_ne!(compare(&v[0], &v[1]), Ordering::Greater);
            prop_assert_ne!(compare(&v[1], &v[2]), Ordering::Greater);
            prop_assert_ne!(compare(&v[0], &v[2]), Ordering::Greater);
        }

        #[test]
        fn decimal128_encoding_round_trips(c in any::<u128>(), e in -6176i32..=6111, negative in any::<bool>()) {
            let text = format!("{}{}E{}", if negative { "-" } else { "" }, c % (MAX_COEFFICIENT + 1), e);
            let bytes = Decimal128::from_str(&text).unwrap();
            let value = DecimalValue::from_decimal128(&bytes);
            prop_assert_eq!(value.to_decimal128().bytes(), bytes.bytes());
        }

        #[test]
        fn numeric_compare_is_transitive(a in any::<i64>(), b in any::<f64>(), c in (any::<i64>(), -5i32..5)) {
            let v = [Bson::Int64(a), Bson::Double(b), dec(&format!("{}E{}", c.0, c.1))];
            for x in &v {
                for y in &v {
                    for z in &v {
                        if compare(x, y) != Ordering::Greater && compare(y, z) != Ordering::Greater {
                            prop_assert_ne!(compare(x, z), Ordering::Greater);
                        }
                    }
                }
            }
        }
    }
}
