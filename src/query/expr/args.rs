//! How operators read their arguments, shared by the operator families
//! (array, string, date, types) so that none of them reaches into another.
//!
//! Two shapes of named arguments exist. [`named_args`] reads an object of
//! named arguments into a fixed array when the expression is parsed.
//! [`object_form`] turns an object form (`$convert: {input, to, ...}`)
//! into an argument list: a marker, then one expression per known field,
//! with a marker for fields not given; [`object_fields`] reads it back at
//! evaluation.

use bson::{Bson, Document};

use super::{eval, type_of, Node, Scope, Value};
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::DecimalValue;

/// First element of an argument list built from an object form. A symbol
/// cannot come from a parsed expression in practice (the type is
/// deprecated and no driver sends it), so it cannot be confused with a
/// user's array argument.
const OBJECT_FORM: &str = "\u{0}object-form";
/// A field of the object form that was not given.
const ABSENT: &str = "\u{0}absent";

/// The marker that opens an object-form argument list, for operators that
/// build theirs by hand (`$switch`, `$let`).
pub(super) fn object_form_marker() -> Bson {
    Bson::Symbol(OBJECT_FORM.to_string())
}

/// An object-form field that was not given.
pub(super) fn absent_field() -> Bson {
    Bson::Symbol(ABSENT.to_string())
}

/// The argument list for an object form with these `fields` (in this
/// order); any other key is an error made by `unknown`.
pub(super) fn object_form(
    doc: &Document,
    fields: &[&str],
    unknown: impl Fn(&str) -> Error,
) -> Result<Vec<Bson>> {
    let mut out = Vec::with_capacity(fields.len() + 1);
    out.push(object_form_marker());
    out.extend(fields.iter().map(|_| absent_field()));
    for (key, value) in doc {
        match fields.iter().position(|f| f == key) {
            Some(i) => out[i + 1] = value.clone(),
            None => return Err(unknown(key)),
        }
    }
    Ok(out)
}

/// The field expressions of an object-form argument list, or `None` when
/// the operator was given something other than an object.
pub(super) fn object_fields(args: &[Node]) -> Option<&[Node]> {
    match args.first() {
        Some(Node::Literal(Bson::Symbol(s))) if s == OBJECT_FORM => Some(&args[1..]),
        _ => None,
    }
}

/// True when an object-form field was not given.
pub(super) fn field_absent(node: &Node) -> bool {
    matches!(node, Node::Literal(Bson::Symbol(s)) if s == ABSENT)
}

/// Evaluates field `i`: `None` when it was not given.
pub(super) fn eval_field<'a>(
    fields: &'a [Node],
    i: usize,
    scope: &Scope<'a>,
) -> Result<Option<Value<'a>>> {
    match fields.get(i) {
        Some(node) if !field_absent(node) => Ok(Some(eval(node, scope)?)),
        _ => Ok(None),
    }
}

/// True when field `i` of an argument list built by [`object_form`] was
/// given.
pub(super) fn field_given(args: &[Bson], i: usize) -> bool {
    !matches!(args.get(i + 1), Some(Bson::Symbol(s)) if s == ABSENT)
}

/// Reads an operator's named arguments in the order of `names`; a field
/// not among them is an error built by `unknown`.
pub(super) fn named_args<const N: usize>(
    doc: &Document,
    names: [&str; N],
    unknown: impl Fn(&str) -> Error,
) -> Result<[Option<Bson>; N]> {
    let mut out: [Option<Bson>; N] = std::array::from_fn(|_| None);
    for (key, value) in doc {
        match names.iter().position(|n| n == key) {
            Some(i) => out[i] = Some(value.clone()),
            None => return Err(unknown(key)),
        }
    }
    Ok(out)
}

/// A number that is exactly a 32-bit integer (`2.0` is, `2.5` is not).
pub(super) fn int32_of(v: &Bson) -> Option<i32> {
    match v {
        Bson::Int32(i) => Some(*i),
        Bson::Int64(i) => i32::try_from(*i).ok(),
        Bson::Double(d)
            if d.fract() == 0.0 && *d >= f64::from(i32::MIN) && *d <= f64::from(i32::MAX) =>
        {
            Some(*d as i32)
        }
        Bson::Decimal128(d) => DecimalValue::from_decimal128(d)
            .to_i64_exact()
            .and_then(|i| i32::try_from(i).ok()),
        _ => None,
    }
}

/// A value as error messages show it.
pub(super) fn value_text(v: &Value<'_>) -> String {
    v.as_deref()
        .map_or_else(|| "missing".to_string(), |b| b.to_string())
}

/// MongoDB's arity error for operators taking a range of argument counts
/// (the table checks only the minimum).
pub(super) fn check_at_most(args: &[Value<'_>], op: &str, min: usize, max: usize) -> Result<()> {
    if args.len() > max {
        return Err(Error::new(
            ErrorCode::ExpressionWrongNumberOfArgs,
            format!(
                "Expression {op} takes at least {min} arguments, and at most {max}, but {} were \
                 passed in.",
                args.len()
            ),
        ));
    }
    Ok(())
}

/// The optional start and end index arguments of the `$indexOf*`
/// operators.
pub(super) fn index_bounds(args: &[Value<'_>], op: &str) -> Result<(usize, Option<usize>)> {
    let read = |i: usize, name: &str| -> Result<Option<usize>> {
        let Some(v) = args.get(i) else {
            return Ok(None);
        };
        let Some(n) = v.as_deref().and_then(int32_of) else {
            return Err(Error::new(
                ErrorCode::IndexOfBoundNotInt32,
                format!(
                    "{op} requires an integral {name}, found a value of type: {}, with value: {}",
                    type_of(v),
                    value_text(v)
                ),
            ));
        };
        if n < 0 {
            return Err(Error::new(
                ErrorCode::IndexOfBoundNegative,
                format!("{op} requires a nonnegative {name}, found: {n}"),
            ));
        }
        Ok(Some(n as usize))
    };
    let start = read(2, "starting index")?.unwrap_or(0);
    let end = read(3, "ending index")?;
    Ok((start, end))
}
