//! String operators: $concat, $substr, $toLower, ..., $regexMatch, $replaceAll.
//!
//! Positions are in UTF-8 bytes for the `Bytes` operators and in code
//! points for the `CP` ones, as in MongoDB. `$toLower`, `$toUpper` and
//! `$strcasecmp` change ASCII letters only, as MongoDB does.

use std::borrow::Cow;

use bson::{Bson, Document};

use super::args::{check_at_most, index_bounds, int32_of, named_args, value_text};
use super::{is_nullish, op, owned, type_of, Arity, Evaluation, Node, Operator, Scope, Value};
use crate::error::{Error, ErrorCode, Result};
use crate::query::size::{check_string_len, SizeBudget};

/// This family's operators, sorted by name.
pub(super) static OPERATORS: &[Operator] = &[
    op("$concat", Arity::Any, Evaluation::Values(op_concat)),
    op(
        "$indexOfBytes",
        Arity::AtLeast(2),
        Evaluation::Values(op_index_of_bytes),
    ),
    op(
        "$indexOfCP",
        Arity::AtLeast(2),
        Evaluation::Values(op_index_of_cp),
    ),
    Operator {
        name: "$ltrim",
        arity: Arity::Exactly(2),
        evaluation: Evaluation::Lazy(op_ltrim),
        parse_args: Some(ltrim_args),
    },
    Operator {
        name: "$regexFind",
        arity: Arity::Exactly(3),
        evaluation: Evaluation::Values(op_regex_find),
        parse_args: Some(regex_find_args),
    },
    Operator {
        name: "$regexFindAll",
        arity: Arity::Exactly(3),
        evaluation: Evaluation::Values(op_regex_find_all),
        parse_args: Some(regex_find_all_args),
    },
    Operator {
        name: "$regexMatch",
        arity: Arity::Exactly(3),
        evaluation: Evaluation::Values(op_regex_match),
        parse_args: Some(regex_match_args),
    },
    Operator {
        name: "$replaceAll",
        arity: Arity::Exactly(3),
        evaluation: Evaluation::Values(op_replace_all),
        parse_args: Some(replace_all_args),
    },
    Operator {
        name: "$replaceOne",
        arity: Arity::Exactly(3),
        evaluation: Evaluation::Values(op_replace_one),
        parse_args: Some(replace_one_args),
    },
    Operator {
        name: "$rtrim",
        arity: Arity::Exactly(2),
        evaluation: Evaluation::Lazy(op_rtrim),
        parse_args: Some(rtrim_args),
    },
    op("$split", Arity::Exactly(2), Evaluation::Values(op_split)),
    op(
        "$strLenBytes",
        Arity::Exactly(1),
        Evaluation::Values(op_str_len_bytes),
    ),
    op(
        "$strLenCP",
        Arity::Exactly(1),
        Evaluation::Values(op_str_len_cp),
    ),
    op(
        "$strcasecmp",
        Arity::Exactly(2),
        Evaluation::Values(op_strcasecmp),
    ),
    op(
        "$substr",
        Arity::Exactly(3),
        Evaluation::Values(op_substr_bytes),
    ),
    op(
        "$substrBytes",
        Arity::Exactly(3),
        Evaluation::Values(op_substr_bytes),
    ),
    op(
        "$substrCP",
        Arity::Exactly(3),
        Evaluation::Values(op_substr_cp),
    ),
    op(
        "$toLower",
        Arity::Exactly(1),
        Evaluation::Values(op_to_lower),
    ),
    op(
        "$toUpper",
        Arity::Exactly(1),
        Evaluation::Values(op_to_upper),
    ),
    Operator {
        name: "$trim",
        arity: Arity::Exactly(2),
        evaluation: Evaluation::Lazy(op_trim),
        parse_args: Some(trim_args),
    },
];

/// MongoDB's `coerceToString`: null and missing become `""`, numbers,
/// dates and timestamps their text.
fn coerce_to_string<'v>(v: &'v Value<'_>, op: &str) -> Result<Cow<'v, str>> {
    match v.as_deref() {
        None | Some(Bson::Null | Bson::Undefined) => Ok(Cow::Borrowed("")),
        Some(Bson::String(s) | Bson::Symbol(s)) => Ok(Cow::Borrowed(s.as_str())),
        Some(Bson::Int32(i)) => Ok(Cow::Owned(i.to_string())),
        Some(Bson::Int64(i)) => Ok(Cow::Owned(i.to_string())),
        Some(Bson::Double(d)) => Ok(Cow::Owned(format_double(*d))),
        Some(Bson::Decimal128(d)) => Ok(Cow::Owned(d.to_string())),
        Some(Bson::DateTime(d)) => Ok(Cow::Owned(iso_date(d.timestamp_millis()))),
        Some(Bson::Timestamp(t)) => Ok(Cow::Owned(format!(
            "Timestamp({}, {})",
            t.time, t.increment
        ))),
        Some(other) => Err(Error::new(
            ErrorCode::CoerceToStringUnsupported,
            format!(
                "{op}: can't convert from BSON type {} to String",
                super::type_name(other)
            ),
        )),
    }
}

/// A double as MongoDB's string builder writes it: C's `%g`, six
/// significant digits (`2.5`, `0.333333`, `1e-05`, `1.23457e+06`).
fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "nan".to_string();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // The exponent after rounding to six significant digits.
    let scientific = format!("{d:.5e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let strip = |text: &str| -> String {
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            text.to_string()
        }
    };
    if !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip(mantissa), exponent.abs())
    } else {
        let decimals = usize::try_from(5 - exponent).unwrap_or(0);
        strip(&format!("{d:.decimals$}"))
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, MongoDB's text for a date.
fn iso_date(millis: i64) -> String {
    let days = millis.div_euclid(86_400_000);
    let ms_of_day = millis.rem_euclid(86_400_000);
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000
    )
}

fn string_of<'v>(v: &'v Value<'_>) -> Option<&'v str> {
    match v.as_deref() {
        Some(Bson::String(s)) => Some(s.as_str()),
        _ => None,
    }
}

fn int32(v: i64) -> Bson {
    i32::try_from(v).map_or(Bson::Int64(v), Bson::Int32)
}

// ---------------------------------------------------------------------------

fn op_concat<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let mut parts = Vec::with_capacity(args.len());
    for arg in args {
        if is_nullish(arg) {
            return owned(Bson::Null);
        }
        let Some(s) = string_of(arg) else {
            return Err(Error::new(
                ErrorCode::ConcatNotString,
                format!("$concat only supports strings, not {}", type_of(arg)),
            ));
        };
        parts.push(s);
    }
    // Sized before it is built: `$reduce` doubling a string must stop at
    // the limit, not allocate gigabytes.
    let len = parts
        .iter()
        .fold(0usize, |total, p| total.saturating_add(p.len()));
    check_string_len(len)?;
    let mut out = String::with_capacity(len);
    for p in parts {
        out.push_str(p);
    }
    owned(Bson::String(out))
}

fn op_to_lower<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    owned(Bson::String(
        coerce_to_string(&args[0], "$toLower")?.to_ascii_lowercase(),
    ))
}

fn op_to_upper<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    owned(Bson::String(
        coerce_to_string(&args[0], "$toUpper")?.to_ascii_uppercase(),
    ))
}

fn op_strcasecmp<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let a = coerce_to_string(&args[0], "$strcasecmp")?.to_ascii_lowercase();
    let b = coerce_to_string(&args[1], "$strcasecmp")?.to_ascii_lowercase();
    owned(Bson::Int32(match a.cmp(&b) {
        std::cmp::Ordering::Less => -1,
        std::cmp::Ordering::Equal => 0,
        std::cmp::Ordering::Greater => 1,
    }))
}

/// A numeric argument truncated to a long, as `coerceToLong` does.
fn long_of(v: &Value<'_>) -> Option<i64> {
    match v.as_deref()? {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(d) if d.is_nan() => Some(0),
        Bson::Double(d) => Some(d.trunc().clamp(i64::MIN as f64, i64::MAX as f64) as i64),
        Bson::Decimal128(d) => {
            let f = crate::query::compare::DecimalValue::from_decimal128(d).to_f64();
            Some(if f.is_nan() {
                0
            } else {
                f.trunc().clamp(i64::MIN as f64, i64::MAX as f64) as i64
            })
        }
        _ => None,
    }
}

fn op_substr_bytes<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let text = coerce_to_string(&args[0], "$substrBytes")?;
    let bytes = text.as_bytes();
    let lower = long_of(&args[1]).ok_or_else(|| {
        Error::new(
            ErrorCode::SubstrBytesStartNotNumeric,
            format!(
                "$substrBytes: starting index must be a numeric type (is BSON type {})",
                type_of(&args[1])
            ),
        )
    })?;
    let length = long_of(&args[2]).ok_or_else(|| {
        Error::new(
            ErrorCode::SubstrBytesLengthNotNumeric,
            format!(
                "$substrBytes: length must be a numeric type (is BSON type {})",
                type_of(&args[2])
            ),
        )
    })?;
    if lower < 0 {
        return Err(Error::new(
            ErrorCode::SubstrBytesStartNegative,
            format!("$substrBytes: starting index must be non-negative (got: {lower})"),
        ));
    }
    let lower = usize::try_from(lower).unwrap_or(usize::MAX);
    let length = if length < 0 {
        bytes.len()
    } else {
        usize::try_from(length).unwrap_or(usize::MAX)
    };
    let continuation = |i: usize| bytes.get(i).is_some_and(|b| b & 0xC0 == 0x80);
    if lower < bytes.len() && continuation(lower) {
        return Err(Error::new(
            ErrorCode::SubstrBytesStartInsideCharacter,
            "$substrBytes:  Invalid range, starting index is a UTF-8 continuation byte."
                .to_string(),
        ));
    }
    let end = lower.saturating_add(length);
    if end < bytes.len() && continuation(end) {
        return Err(Error::new(
            ErrorCode::SubstrBytesEndInsideCharacter,
            "$substrBytes:  Invalid range, ending index is in the middle of a UTF-8 character."
                .to_string(),
        ));
    }
    if lower >= bytes.len() {
        return owned(Bson::String(String::new()));
    }
    let end = end.min(bytes.len());
    owned(Bson::String(text[lower..end].to_string()))
}

fn op_substr_cp<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let text = coerce_to_string(&args[0], "$substrCP")?;
    let numeric = |v: &Value<'_>| v.as_deref().and_then(crate::query::compare::Number::of);
    if numeric(&args[1]).is_none() {
        return Err(Error::new(
            ErrorCode::SubstrCpStartNotNumeric,
            format!(
                "$substrCP: starting index must be a numeric type (is BSON type {})",
                type_of(&args[1])
            ),
        ));
    }
    let Some(start) = args[1].as_deref().and_then(int32_of) else {
        return Err(Error::new(
            ErrorCode::SubstrCpStartNotInt32,
            format!(
                "$substrCP: starting index cannot be represented as a 32-bit integral value: {}",
                value_text(&args[1])
            ),
        ));
    };
    if numeric(&args[2]).is_none() {
        return Err(Error::new(
            ErrorCode::SubstrCpLengthNotNumeric,
            format!(
                "$substrCP: length must be a numeric type (is BSON type {})",
                type_of(&args[2])
            ),
        ));
    }
    let Some(length) = args[2].as_deref().and_then(int32_of) else {
        return Err(Error::new(
            ErrorCode::SubstrCpLengthNotInt32,
            format!(
                "$substrCP: length cannot be represented as a 32-bit integral value: {}",
                value_text(&args[2])
            ),
        ));
    };
    if length < 0 {
        return Err(Error::new(
            ErrorCode::SubstrCpLengthNegative,
            "$substrCP: length must be a nonnegative integer.".to_string(),
        ));
    }
    if start < 0 {
        return Err(Error::new(
            ErrorCode::SubstrCpStartNegative,
            "$substrCP: the starting index must be nonnegative integer.".to_string(),
        ));
    }
    let out: String = text
        .chars()
        .skip(start as usize)
        .take(length as usize)
        .collect();
    owned(Bson::String(out))
}

fn op_str_len_bytes<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let Some(s) = string_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::StrLenBytesNotString,
            format!(
                "$strLenBytes requires a string argument, found: {}",
                type_of(&args[0])
            ),
        ));
    };
    owned(int32(s.len() as i64))
}

fn op_str_len_cp<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let Some(s) = string_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::StrLenCpNotString,
            format!(
                "$strLenCP requires a string argument, found: {}",
                type_of(&args[0])
            ),
        ));
    };
    owned(int32(s.chars().count() as i64))
}

fn op_split<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    if is_nullish(&args[0]) || is_nullish(&args[1]) {
        return owned(Bson::Null);
    }
    let Some(input) = string_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::SplitInputNotString,
            format!(
                "$split requires an expression that evaluates to a string as a first argument, \
                 found: {}",
                type_of(&args[0])
            ),
        ));
    };
    let Some(separator) = string_of(&args[1]) else {
        return Err(Error::new(
            ErrorCode::SplitSeparatorNotString,
            format!(
                "$split requires an expression that evaluates to a string as a second argument, \
                 found: {}",
                type_of(&args[1])
            ),
        ));
    };
    if separator.is_empty() {
        return Err(Error::new(
            ErrorCode::SplitSeparatorEmpty,
            "$split requires a non-empty separator".to_string(),
        ));
    }
    // A short separator makes many small strings from one long one: the
    // array is sized before it is built.
    let mut budget = SizeBudget::new();
    let mut count = 0;
    for (i, part) in input.split(separator).enumerate() {
        budget.add_bytes(split_piece_size(i, part.len()))?;
        count += 1;
    }
    let mut parts = Vec::with_capacity(count);
    parts.extend(input.split(separator).map(|p| Bson::String(p.to_string())));
    owned(Bson::Array(parts))
}

/// The encoded bytes of a string element of `len` bytes at `index`.
fn split_piece_size(index: usize, len: usize) -> usize {
    crate::query::size::element_size(index, &Bson::Null).saturating_add(5 + len)
}

/// `$indexOfBytes` and `$indexOfCP`: `[string, substring, start?, end?]`.
fn index_of<'a>(args: &[Value<'a>], op: &str, code_points: bool) -> Result<Value<'a>> {
    check_at_most(args, op, 2, 4)?;
    let (first_code, second_code) = if code_points {
        (
            ErrorCode::IndexOfCpInputNotString,
            ErrorCode::IndexOfCpTokenNotString,
        )
    } else {
        (
            ErrorCode::IndexOfBytesInputNotString,
            ErrorCode::IndexOfBytesTokenNotString,
        )
    };
    if is_nullish(&args[0]) {
        return owned(Bson::Null);
    }
    let Some(input) = string_of(&args[0]) else {
        return Err(Error::new(
            first_code,
            format!(
                "{op} requires a string as the first argument, found: {}",
                type_of(&args[0])
            ),
        ));
    };
    let Some(token) = string_of(&args[1]) else {
        return Err(Error::new(
            second_code,
            format!(
                "{op} requires a string as the second argument, found: {}",
                type_of(&args[1])
            ),
        ));
    };
    let (start, end) = index_bounds(args, op)?;
    let found = if code_points {
        // Code point positions become byte positions, searched as bytes.
        let len = input.chars().count();
        let end = end.unwrap_or(len).min(len);
        let byte_at = |cp: usize| input.char_indices().nth(cp).map_or(input.len(), |(b, _)| b);
        if start > end {
            None
        } else {
            let (from, to) = (byte_at(start), byte_at(end));
            find_within(input, token, from, to).map(|b| start + input[from..b].chars().count())
        }
    } else {
        let end = end.unwrap_or(input.len()).min(input.len());
        if start > end {
            None
        } else if token.is_empty() {
            Some(start)
        } else {
            find_within(input, token, start, end)
        }
    };
    owned(int32(found.map_or(-1, |i| i as i64)))
}

/// The byte position of the first `token` lying wholly within
/// `input[from..to]`, found in linear time (`str::find`): comparing at
/// every position made a long token in a long input take hours. A match
/// of a whole UTF-8 token starts and ends on character boundaries, so the
/// window shrinks to those.
fn find_within(input: &str, token: &str, from: usize, to: usize) -> Option<usize> {
    let from = (from..=input.len()).find(|&i| input.is_char_boundary(i))?;
    let to = (0..=to.min(input.len()))
        .rev()
        .find(|&i| input.is_char_boundary(i))?;
    if from > to {
        return None;
    }
    input[from..to].find(token).map(|i| from + i)
}

fn op_index_of_bytes<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    index_of(args, "$indexOfBytes", false)
}

fn op_index_of_cp<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    index_of(args, "$indexOfCP", true)
}

// ---------------------------------------------------------------------------
// $trim, $ltrim, $rtrim: `{input, chars}`.

/// The characters trimmed when `chars` is not given.
const WHITESPACE: &[char] = &[
    '\0', ' ', '\t', '\n', '\u{0B}', '\u{0C}', '\r', '\u{A0}', '\u{1680}', '\u{2000}', '\u{2001}',
    '\u{2002}', '\u{2003}', '\u{2004}', '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}', '\u{2009}',
    '\u{200A}', '\u{2028}', '\u{2029}', '\u{202F}', '\u{205F}', '\u{3000}',
];

/// Stands for an optional argument that was not given.
const ABSENT: &str = "$$REMOVE";

fn is_absent(node: &Node) -> bool {
    matches!(node, Node::Variable { name, path } if name == "REMOVE" && path.is_empty())
}

fn trim_object_args(arg: &Bson, op: &str) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::TrimNotObject,
            format!("{op} only supports an object as its argument"),
        ));
    };
    let [input, chars] = named_args(doc, ["input", "chars"], |k| {
        Error::new(
            ErrorCode::TrimUnknownArgument,
            format!("Unrecognized argument to {op}: {k}"),
        )
    })?;
    let input = input.ok_or_else(|| {
        Error::new(
            ErrorCode::TrimMissingInput,
            format!("{op} requires an 'input' parameter"),
        )
    })?;
    let chars = chars.unwrap_or_else(|| Bson::String(ABSENT.to_string()));
    Ok(Some(vec![input, chars]))
}

fn trim_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    trim_object_args(arg, "$trim")
}

fn ltrim_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    trim_object_args(arg, "$ltrim")
}

fn rtrim_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    trim_object_args(arg, "$rtrim")
}

fn trim<'a>(
    args: &'a [Node],
    scope: &Scope<'a>,
    op: &str,
    left: bool,
    right: bool,
) -> Result<Value<'a>> {
    let input = super::eval(&args[0], scope)?;
    if is_nullish(&input) {
        return owned(Bson::Null);
    }
    let Some(text) = string_of(&input) else {
        return Err(Error::new(
            ErrorCode::TrimInputNotString,
            format!(
                "{op} requires its input to be a string, got {} (of type {}) instead.",
                value_text(&input),
                type_of(&input)
            ),
        ));
    };
    let custom: Vec<char>;
    let chars: &[char] = if is_absent(&args[1]) {
        WHITESPACE
    } else {
        let chars = super::eval(&args[1], scope)?;
        if is_nullish(&chars) {
            return owned(Bson::Null);
        }
        let Some(c) = string_of(&chars) else {
            return Err(Error::new(
                ErrorCode::TrimCharsNotString,
                format!(
                    "{op} requires 'chars' to be a string, got {} (of type {}) instead.",
                    value_text(&chars),
                    type_of(&chars)
                ),
            ));
        };
        custom = c.chars().collect();
        &custom
    };
    let mut out = text;
    if left {
        out = out.trim_start_matches(chars);
    }
    if right {
        out = out.trim_end_matches(chars);
    }
    owned(Bson::String(out.to_string()))
}

fn op_trim<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    trim(args, scope, "$trim", true, true)
}

fn op_ltrim<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    trim(args, scope, "$ltrim", true, false)
}

fn op_rtrim<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    trim(args, scope, "$rtrim", false, true)
}

// ---------------------------------------------------------------------------
// $regexMatch, $regexFind, $regexFindAll: `{input, regex, options}`.

fn regex_object_args(arg: &Bson, op: &str) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::RegexOperatorNotObject,
            format!("{op} expects an object of named arguments but found: {arg}"),
        ));
    };
    let [input, regex, options] = named_args(doc, ["input", "regex", "options"], |k| {
        Error::new(
            ErrorCode::RegexOperatorUnknownArgument,
            format!("{op} found an unknown argument: {k}"),
        )
    })?;
    let input = input.ok_or_else(|| {
        Error::new(
            ErrorCode::RegexOperatorMissingInput,
            format!("{op} requires 'input' parameter"),
        )
    })?;
    let regex = regex.ok_or_else(|| {
        Error::new(
            ErrorCode::RegexOperatorMissingRegex,
            format!("{op} requires 'regex' parameter"),
        )
    })?;
    let options = options.unwrap_or_else(|| Bson::String(ABSENT.to_string()));
    Ok(Some(vec![input, regex, options]))
}

fn regex_match_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    regex_object_args(arg, "$regexMatch")
}

fn regex_find_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    regex_object_args(arg, "$regexFind")
}

fn regex_find_all_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    regex_object_args(arg, "$regexFindAll")
}

/// The compiled regex and the input, or `None` when input or regex is
/// null or missing.
fn regex_inputs<'v>(args: &'v [Value<'_>], op: &str) -> Result<Option<(regex::Regex, &'v str)>> {
    let (input, pattern_arg, options_arg) = (&args[0], &args[1], &args[2]);
    if !is_nullish(input) && string_of(input).is_none() {
        return Err(Error::new(
            ErrorCode::RegexOperatorInputNotString,
            format!("{op} needs 'input' to be of type string"),
        ));
    }
    let (pattern, mut options) = match pattern_arg.as_deref() {
        None | Some(Bson::Null | Bson::Undefined) => (None, String::new()),
        Some(Bson::String(s)) => (Some(s.clone()), String::new()),
        Some(Bson::RegularExpression(r)) => (Some(r.pattern.to_string()), r.options.to_string()),
        Some(_) => {
            return Err(Error::new(
                ErrorCode::RegexOperatorRegexWrongType,
                format!("{op} needs 'regex' to be of type string or regex"),
            ))
        }
    };
    match options_arg.as_deref() {
        None | Some(Bson::Null | Bson::Undefined) => {}
        Some(Bson::String(s)) => {
            if !options.is_empty() && !s.is_empty() {
                return Err(Error::new(
                    ErrorCode::RegexOperatorOptionsTwice,
                    format!(
                        "{op} found regex option(s) specified in both 'regex' and 'option' fields"
                    ),
                ));
            }
            if !s.is_empty() {
                options = s.clone();
            }
        }
        Some(_) => {
            return Err(Error::new(
                ErrorCode::RegexOperatorOptionsNotString,
                format!("{op} needs 'options' to be of type string"),
            ))
        }
    }
    let mut flags = String::new();
    for flag in options.chars() {
        match flag {
            'i' | 'm' | 's' | 'x' => flags.push(flag),
            'u' => {}
            other => {
                return Err(Error::new(
                    ErrorCode::RegexBadOption,
                    format!("{op} invalid flag in regex options: {other}"),
                ))
            }
        }
    }
    let Some(pattern) = pattern else {
        return Ok(None);
    };
    if pattern.contains('\0') {
        return Err(Error::new(
            ErrorCode::RegexOperatorNullByte,
            format!("{op}: regular expression cannot contain an embedded null byte"),
        ));
    }
    let Some(input) = string_of(input) else {
        return Ok(None);
    };
    // PCRE syntax, translated as `$regex` in a filter does.
    let compiled = crate::query::regex::compile_regex(&pattern, &flags).map_err(|e| {
        Error::new(
            ErrorCode::RegexOperatorInvalid,
            format!("Invalid Regex in {op}: {}", e.message),
        )
    })?;
    Ok(Some((compiled, input)))
}

/// `{match, idx, captures}` for one match, `idx` being the code points
/// before it. Nested groups each copy what they capture, so the document
/// is sized (into `budget`, the result holding it) before it is built.
fn match_document(
    caps: &regex::Captures<'_>,
    idx: usize,
    budget: &mut SizeBudget,
    index: usize,
) -> Result<Bson> {
    let Some(whole) = caps.get(0) else {
        return Ok(Bson::Null);
    };
    let mut size = SizeBudget::new();
    // match, idx, captures and the captures array.
    size.add_bytes(8 + whole.len() + 5 + 8 + 14)?;
    for (i, c) in caps.iter().skip(1).enumerate() {
        size.add_bytes(split_piece_size(i, c.map_or(0, |m| m.len())))?;
    }
    budget.charge(
        crate::query::size::element_size(index, &Bson::Null),
        crate::query::size::Shape {
            size: size.size(),
            depth: 2,
        },
    )?;
    let captures = caps
        .iter()
        .skip(1)
        .map(|c| c.map_or(Bson::Null, |m| Bson::String(m.as_str().to_string())))
        .collect();
    let mut doc = Document::new();
    doc.insert("match", whole.as_str());
    doc.insert("idx", int32(idx as i64));
    doc.insert("captures", Bson::Array(captures));
    Ok(Bson::Document(doc))
}

fn op_regex_match<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let matched = match regex_inputs(args, "$regexMatch")? {
        Some((re, input)) => re.is_match(input),
        None => false,
    };
    owned(Bson::Boolean(matched))
}

fn op_regex_find<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let found = match regex_inputs(args, "$regexFind")? {
        Some((re, input)) => match re.captures(input) {
            Some(c) => {
                let idx = c.get(0).map_or(0, |m| input[..m.start()].chars().count());
                match_document(&c, idx, &mut SizeBudget::new(), 0)?
            }
            None => Bson::Null,
        },
        None => Bson::Null,
    };
    owned(found)
}

fn op_regex_find_all<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let mut found = Vec::new();
    if let Some((re, input)) = regex_inputs(args, "$regexFindAll")? {
        // An empty match at every position of a long input makes millions
        // of documents: the array is bounded as it grows.
        // Code points are counted from the previous match, not from the
        // start, so many matches cost linear time.
        let mut budget = SizeBudget::new();
        let (mut counted_to, mut idx) = (0, 0);
        for c in re.captures_iter(input) {
            let start = c.get(0).map_or(counted_to, |m| m.start());
            idx += input[counted_to..start].chars().count();
            counted_to = start;
            let doc = match_document(&c, idx, &mut budget, found.len())?;
            found.push(doc);
        }
    }
    owned(Bson::Array(found))
}

// ---------------------------------------------------------------------------
// $replaceOne, $replaceAll: `{input, find, replacement}`.

fn replace_object_args(arg: &Bson, op: &str) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::ReplaceNotObject,
            format!("{op} requires an object as an argument, found: {arg}"),
        ));
    };
    let [input, find, replacement] = named_args(doc, ["input", "find", "replacement"], |k| {
        Error::new(
            ErrorCode::ReplaceUnknownArgument,
            format!("{op} found an unknown argument: {k}"),
        )
    })?;
    let required = |v: Option<Bson>, code: ErrorCode, name: &str| {
        v.ok_or_else(|| Error::new(code, format!("{op} requires '{name}' to be specified")))
    };
    Ok(Some(vec![
        required(input, ErrorCode::ReplaceMissingInput, "input")?,
        required(find, ErrorCode::ReplaceMissingFind, "find")?,
        required(
            replacement,
            ErrorCode::ReplaceMissingReplacement,
            "replacement",
        )?,
    ]))
}

fn replace_one_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    replace_object_args(arg, "$replaceOne")
}

fn replace_all_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    replace_object_args(arg, "$replaceAll")
}

fn replace<'a>(args: &[Value<'a>], op: &str, all: bool) -> Result<Value<'a>> {
    for (v, name, code) in [
        (&args[0], "input", ErrorCode::ReplaceInputNotString),
        (&args[1], "find", ErrorCode::ReplaceFindNotString),
        (
            &args[2],
            "replacement",
            ErrorCode::ReplaceReplacementNotString,
        ),
    ] {
        if !is_nullish(v) && string_of(v).is_none() {
            return Err(Error::new(
                code,
                format!(
                    "{op} requires that '{name}' be a string, found: {}",
                    value_text(v)
                ),
            ));
        }
    }
    let (Some(input), Some(find), Some(replacement)) = (
        string_of(&args[0]),
        string_of(&args[1]),
        string_of(&args[2]),
    ) else {
        return owned(Bson::Null);
    };
    // Each match may grow the string (an empty `find` matches between
    // every character): the result is sized before it is built.
    let matches = if find.is_empty() {
        input.chars().count() + 1
    } else {
        input.matches(find).count()
    };
    let matches = if all { matches } else { matches.min(1) };
    let len = input
        .len()
        .saturating_sub(matches.saturating_mul(find.len()))
        .saturating_add(matches.saturating_mul(replacement.len()));
    check_string_len(len)?;
    let out = if all {
        input.replace(find, replacement)
    } else {
        input.replacen(find, replacement, 1)
    };
    owned(Bson::String(out))
}

fn op_replace_one<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    replace(args, "$replaceOne", false)
}

fn op_replace_all<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    replace(args, "$replaceAll", true)
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc, Bson, DateTime};

    use super::super::Expr;

    fn re(pattern: &str, options: &str) -> bson::Regex {
        bson::Regex {
            pattern: pattern.try_into().unwrap(),
            options: options.try_into().unwrap(),
        }
    }

    /// The document every case is evaluated against.
    fn root() -> bson::Document {
        doc! {
            "s": "Hello World",
            "e": "é∂x",
            "n": null,
            "num": 5,
            "ws": " \t hi \u{A0}\n",
        }
    }

    /// Runs a table of `(expression, Ok(result) or Err(code))` cases.
    fn check(cases: Vec<(Bson, std::result::Result<Bson, i32>)>) {
        for (expr, expected) in cases {
            let got = Expr::parse(&expr).and_then(|e| e.evaluate(&root()));
            match (got, expected) {
                (Ok(v), Ok(want)) => assert_eq!(v, want, "{expr}"),
                (Err(e), Err(code)) => assert_eq!(e.code.number(), code, "{expr}: {e:?}"),
                (got, want) => panic!("{expr}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn concat_case_and_comparison() {
        check(vec![
            (
                bson!({"$concat": ["a", "$s", "!"]}),
                Ok(bson!("aHello World!")),
            ),
            (bson!({"$concat": []}), Ok(bson!(""))),
            (bson!({"$concat": ["a", null]}), Ok(Bson::Null)),
            (bson!({"$concat": ["a", "$missing"]}), Ok(Bson::Null)),
            (bson!({"$concat": ["a", 1]}), Err(16702)),
            (bson!({"$toLower": "$s"}), Ok(bson!("hello world"))),
            (bson!({"$toUpper": ["$s"]}), Ok(bson!("HELLO WORLD"))),
            (bson!({"$toUpper": "é"}), Ok(bson!("é"))),
            (bson!({"$toLower": null}), Ok(bson!(""))),
            (bson!({"$toLower": "$missing"}), Ok(bson!(""))),
            (bson!({"$toUpper": 12}), Ok(bson!("12"))),
            (bson!({"$toUpper": 2.5}), Ok(bson!("2.5"))),
            (bson!({"$toUpper": 0.00001}), Ok(bson!("1E-05"))),
            (bson!({"$toLower": 1234567.0}), Ok(bson!("1.23457e+06"))),
            (bson!({"$toLower": 3.0}), Ok(bson!("3"))),
            (bson!({"$toLower": -0.125}), Ok(bson!("-0.125"))),
            (bson!({"$toLower": 123456.0}), Ok(bson!("123456"))),
            (
                bson!({"$toLower": Bson::DateTime(DateTime::from_millis(1_000))}),
                Ok(bson!("1970-01-01t00:00:01.000z")),
            ),
            (bson!({"$toLower": [[1]]}), Err(16007)),
            (bson!({"$strcasecmp": ["ABC", "abc"]}), Ok(bson!(0))),
            (bson!({"$strcasecmp": ["abd", "ABC"]}), Ok(bson!(1))),
            (bson!({"$strcasecmp": [null, "a"]}), Ok(bson!(-1))),
            (bson!({"$strcasecmp": ["a"]}), Err(16020)),
        ]);
    }

    #[test]
    fn substrings_and_lengths() {
        check(vec![
            (bson!({"$substr": ["$s", 0, 5]}), Ok(bson!("Hello"))),
            (bson!({"$substrBytes": ["$s", 6, -1]}), Ok(bson!("World"))),
            (bson!({"$substrBytes": ["$s", 20, 2]}), Ok(bson!(""))),
            (bson!({"$substrBytes": [null, 0, 2]}), Ok(bson!(""))),
            (bson!({"$substrBytes": [12345, 1, 2]}), Ok(bson!("23"))),
            (bson!({"$substrBytes": ["$e", 1, 1]}), Err(28656)),
            (bson!({"$substrBytes": ["$e", 0, 1]}), Err(28657)),
            (bson!({"$substrBytes": ["$s", "a", 1]}), Err(16034)),
            (bson!({"$substrBytes": ["$s", 0, "a"]}), Err(16035)),
            (bson!({"$substrBytes": ["$s", -1, 1]}), Err(50752)),
            (bson!({"$substrCP": ["$e", 1, 2]}), Ok(bson!("∂x"))),
            (bson!({"$substrCP": ["$e", 1, 10]}), Ok(bson!("∂x"))),
            (bson!({"$substrCP": ["$missing", 0, 1]}), Ok(bson!(""))),
            (bson!({"$substrCP": ["$e", null, 1]}), Err(34450)),
            (bson!({"$substrCP": ["$e", 1.5, 1]}), Err(34451)),
            (bson!({"$substrCP": ["$e", 0, "1"]}), Err(34452)),
            (bson!({"$substrCP": ["$e", 0, -1]}), Err(34454)),
            (bson!({"$substrCP": ["$e", -1, 1]}), Err(34455)),
            (bson!({"$strLenBytes": "$e"}), Ok(bson!(6))),
            (bson!({"$strLenCP": "$e"}), Ok(bson!(3))),
            (bson!({"$strLenCP": ""}), Ok(bson!(0))),
            (bson!({"$strLenCP": null}), Err(34471)),
            (bson!({"$strLenBytes": "$missing"}), Err(34473)),
        ]);
    }

    #[test]
    fn split_and_index_of() {
        check(vec![
            (
                bson!({"$split": ["a,b,,c", ","]}),
                Ok(bson!(["a", "b", "", "c"])),
            ),
            (bson!({"$split": ["abc", "x"]}), Ok(bson!(["abc"]))),
            (bson!({"$split": [null, ","]}), Ok(Bson::Null)),
            (bson!({"$split": ["a", "$missing"]}), Ok(Bson::Null)),
            (bson!({"$split": [1, ","]}), Err(40085)),
            (bson!({"$split": ["a", 1]}), Err(40086)),
            (bson!({"$split": ["a", ""]}), Err(40087)),
            (bson!({"$indexOfBytes": ["$s", "o"]}), Ok(bson!(4))),
            (bson!({"$indexOfBytes": ["$s", "o", 5]}), Ok(bson!(7))),
            (bson!({"$indexOfBytes": ["$s", "o", 5, 7]}), Ok(bson!(-1))),
            (bson!({"$indexOfBytes": ["$s", "", 3]}), Ok(bson!(3))),
            (bson!({"$indexOfBytes": ["$s", "o", 50]}), Ok(bson!(-1))),
            (bson!({"$indexOfBytes": ["$e", "x"]}), Ok(bson!(5))),
            (bson!({"$indexOfCP": ["$e", "x"]}), Ok(bson!(2))),
            (bson!({"$indexOfCP": ["$e", "∂", 2]}), Ok(bson!(-1))),
            (bson!({"$indexOfCP": [null, "x"]}), Ok(Bson::Null)),
            (bson!({"$indexOfCP": [1, "x"]}), Err(40093)),
            (bson!({"$indexOfCP": ["a", null]}), Err(40094)),
            (bson!({"$indexOfBytes": [1, "x"]}), Err(40091)),
            (bson!({"$indexOfBytes": ["a", 1]}), Err(40092)),
            (bson!({"$indexOfBytes": ["a", "a", 1.5]}), Err(40096)),
            (bson!({"$indexOfBytes": ["a", "a", -1]}), Err(40097)),
            (bson!({"$indexOfCP": ["a", "a", 0, 1, 1]}), Err(28667)),
        ]);
    }

    #[test]
    fn trims() {
        check(vec![
            (bson!({"$trim": {"input": "$ws"}}), Ok(bson!("hi"))),
            (
                bson!({"$ltrim": {"input": "$ws"}}),
                Ok(bson!("hi \u{A0}\n")),
            ),
            (bson!({"$rtrim": {"input": "$ws"}}), Ok(bson!(" \t hi"))),
            (
                bson!({"$trim": {"input": "xxhixy", "chars": "xy"}}),
                Ok(bson!("hi")),
            ),
            (
                bson!({"$ltrim": {"input": "éého", "chars": "é"}}),
                Ok(bson!("ho")),
            ),
            (bson!({"$trim": {"input": null}}), Ok(Bson::Null)),
            (bson!({"$trim": {"input": "$missing"}}), Ok(Bson::Null)),
            (
                bson!({"$trim": {"input": "a", "chars": null}}),
                Ok(Bson::Null),
            ),
            (bson!({"$trim": {"input": 1}}), Err(50699)),
            (bson!({"$trim": {"input": "a", "chars": 1}}), Err(50700)),
            (bson!({"$trim": {"chars": "a"}}), Err(50695)),
            (bson!({"$trim": {"input": "a", "x": 1}}), Err(50694)),
        ]);
    }

    #[test]
    fn regexes() {
        check(vec![
            (
                bson!({"$regexMatch": {"input": "$s", "regex": "^hello", "options": "i"}}),
                Ok(bson!(true)),
            ),
            (
                bson!({"$regexMatch": {"input": "$s", "regex": "^hello"}}),
                Ok(bson!(false)),
            ),
            (
                bson!({"$regexMatch": {"input": "$s", "regex": Bson::RegularExpression(
                    re("world$", "i"))}}),
                Ok(bson!(true)),
            ),
            (
                bson!({"$regexMatch": {"input": null, "regex": "a"}}),
                Ok(bson!(false)),
            ),
            (
                bson!({"$regexFind": {"input": "$e", "regex": "(∂)(y)?"}}),
                Ok(bson!({"match": "∂", "idx": 1, "captures": ["∂", null]})),
            ),
            (
                bson!({"$regexFind": {"input": "abc", "regex": "z"}}),
                Ok(Bson::Null),
            ),
            (
                bson!({"$regexFind": {"input": "$missing", "regex": "z"}}),
                Ok(Bson::Null),
            ),
            (
                bson!({"$regexFindAll": {"input": "a1b22", "regex": "[0-9]+"}}),
                Ok(bson!([
                    {"match": "1", "idx": 1, "captures": []},
                    {"match": "22", "idx": 3, "captures": []},
                ])),
            ),
            (
                bson!({"$regexFindAll": {"input": null, "regex": "a"}}),
                Ok(bson!([])),
            ),
            (
                bson!({"$regexMatch": {"input": 1, "regex": "a"}}),
                Err(51104),
            ),
            (
                bson!({"$regexMatch": {"input": "a", "regex": 1}}),
                Err(51105),
            ),
            (
                bson!({"$regexMatch": {"input": "a", "regex": "a", "options": 1}}),
                Err(51106),
            ),
            (
                bson!({"$regexMatch": {"input": "a", "regex": Bson::RegularExpression(
                    re("a", "i")), "options": "m"}}),
                Err(51107),
            ),
            (
                bson!({"$regexMatch": {"input": "a", "regex": "a", "options": "z"}}),
                Err(51108),
            ),
            (
                bson!({"$regexMatch": {"input": "a", "regex": "("}}),
                Err(51111),
            ),
            (bson!({"$regexMatch": {"regex": "a"}}), Err(31022)),
            (bson!({"$regexMatch": {"input": "a"}}), Err(31023)),
            (
                bson!({"$regexMatch": {"input": "a", "regex": "a", "x": 1}}),
                Err(31024),
            ),
        ]);
    }

    #[test]
    fn replacements() {
        check(vec![
            (
                bson!({"$replaceOne": {"input": "a-b-c", "find": "-", "replacement": "+"}}),
                Ok(bson!("a+b-c")),
            ),
            (
                bson!({"$replaceAll": {"input": "a-b-c", "find": "-", "replacement": "+"}}),
                Ok(bson!("a+b+c")),
            ),
            (
                bson!({"$replaceAll": {"input": "abc", "find": "x", "replacement": "y"}}),
                Ok(bson!("abc")),
            ),
            (
                bson!({"$replaceAll": {"input": null, "find": "x", "replacement": "y"}}),
                Ok(Bson::Null),
            ),
            (
                bson!({"$replaceOne": {"input": "a", "find": "$missing", "replacement": "y"}}),
                Ok(Bson::Null),
            ),
            (
                bson!({"$replaceAll": {"input": 1, "find": "x", "replacement": "y"}}),
                Err(51746),
            ),
            (
                bson!({"$replaceAll": {"input": null, "find": 1, "replacement": "y"}}),
                Err(51745),
            ),
            (
                bson!({"$replaceAll": {"input": "a", "find": "a", "replacement": 1}}),
                Err(51744),
            ),
            (
                bson!({"$replaceAll": {"find": "a", "replacement": "b"}}),
                Err(51749),
            ),
            (
                bson!({"$replaceAll": {"input": "a", "find": "a", "replacement": "b", "x": 1}}),
                Err(51750),
            ),
        ]);
    }
}
