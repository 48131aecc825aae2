//! Type conversion operators (`$convert`, `$toString`, `$toInt`, ...), the
//! remaining arithmetic (`$ceil`, `$floor`, `$round`, `$trunc`, `$pow`,
//! `$sqrt`, `$exp`, `$ln`, `$log`, `$log10`) and the conditionals that bind
//! or branch (`$switch`, `$let`).
//!
//! Operators with an object form (`$convert: {input, to, ...}`) read it
//! through [`super::args::object_form`].

use std::borrow::Cow;

use bson::oid::ObjectId;
use bson::{Bson, DateTime};

use super::args::{
    absent_field, eval_field, field_absent, field_given, object_fields, object_form,
    object_form_marker,
};
use super::date::{format_date, parse_date_string, TimeZone, DEFAULT_FORMAT};
use super::{
    eval, is_nullish, number_of, owned, type_of, Arity, Evaluation, Node, Operator, Scope, Value,
};
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::{f64_fits_i64, type_name, DecimalValue, Number};

/// This family's operators, sorted by name.
pub(super) static OPERATORS: &[Operator] = &[
    unary("$ceil", op_ceil),
    Operator {
        name: "$convert",
        arity: Arity::Any,
        evaluation: Evaluation::Lazy(op_convert),
        parse_args: Some(convert_args),
    },
    unary("$exp", op_exp),
    unary("$floor", op_floor),
    unary("$isNumber", op_is_number),
    Operator {
        name: "$let",
        arity: Arity::Any,
        evaluation: Evaluation::Lazy(op_let),
        parse_args: Some(let_args),
    },
    unary("$ln", op_ln),
    super::op("$log", Arity::Exactly(2), Evaluation::Values(op_log)),
    unary("$log10", op_log10),
    super::op("$pow", Arity::Exactly(2), Evaluation::Values(op_pow)),
    super::op("$round", Arity::AtLeast(1), Evaluation::Values(op_round)),
    unary("$sqrt", op_sqrt),
    Operator {
        name: "$switch",
        arity: Arity::Any,
        evaluation: Evaluation::Lazy(op_switch),
        parse_args: Some(switch_args),
    },
    unary("$toBool", op_to_bool),
    unary("$toDate", op_to_date),
    unary("$toDecimal", op_to_decimal),
    unary("$toDouble", op_to_double),
    unary("$toInt", op_to_int),
    unary("$toLong", op_to_long),
    unary("$toObjectId", op_to_object_id),
    unary("$toString", op_to_string),
    super::op("$trunc", Arity::AtLeast(1), Evaluation::Values(op_trunc)),
];

type ValuesFn = for<'a> fn(&[Value<'a>]) -> Result<Value<'a>>;

const fn unary(name: &'static str, f: ValuesFn) -> Operator {
    super::op(name, Arity::Exactly(1), Evaluation::Values(f))
}

// ---------------------------------------------------------------------------
// Arithmetic.

/// The numeric argument of a one-argument math operator, `None` for null.
fn numeric_arg(name: &str, v: &Value<'_>, code: ErrorCode) -> Result<Option<Number>> {
    if is_nullish(v) {
        return Ok(None);
    }
    number_of(v).map(Some).ok_or_else(|| {
        Error::new(
            code,
            format!("{name} only supports numeric types, not {}", type_of(v)),
        )
    })
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Rounding {
    HalfEven,
    Trunc,
    Floor,
    Ceil,
}

/// Rounds a decimal to `place` digits after the point (negative places
/// round to tens, hundreds, ...).
fn round_decimal(d: DecimalValue, place: i64, mode: Rounding) -> DecimalValue {
    let DecimalValue::Finite {
        negative,
        coefficient,
        exponent,
    } = d
    else {
        return d;
    };
    let target = -place;
    let exponent64 = i64::from(exponent);
    if exponent64 >= target {
        return d;
    }
    let drop = target - exponent64;
    let (quotient, remainder, divisor) = if drop > 38 {
        (0u128, coefficient, None)
    } else {
        let divisor = 10u128.pow(drop as u32);
        (coefficient / divisor, coefficient % divisor, Some(divisor))
    };
    let round_up = match mode {
        Rounding::Trunc => false,
        Rounding::Floor => negative && remainder != 0,
        Rounding::Ceil => !negative && remainder != 0,
        Rounding::HalfEven => match divisor {
            // More digits dropped than a coefficient holds: below a half.
            None => false,
            Some(div) => {
                let twice = remainder.saturating_mul(2);
                twice > div || (twice == div && quotient % 2 == 1)
            }
        },
    };
    let quotient = quotient + u128::from(round_up);
    let exponent = i32::try_from(target).unwrap_or(i32::MAX);
    DecimalValue::round_finite(negative, quotient, exponent, false)
}

/// The shortest decimal that reads back as the double (what rounding a
/// double to decimal places works on).
fn double_to_decimal(f: f64) -> DecimalValue {
    if !f.is_finite() {
        return DecimalValue::from_f64(f);
    }
    DecimalValue::parse(&format!("{f:e}")).unwrap_or(DecimalValue::NaN)
}

fn round_number(n: Number, place: i64, mode: Rounding) -> Bson {
    match n {
        Number::Double(f) => {
            if !f.is_finite() {
                return Bson::Double(f);
            }
            let rounded = match mode {
                Rounding::Floor if place == 0 => f.floor(),
                Rounding::Ceil if place == 0 => f.ceil(),
                Rounding::Trunc if place == 0 => f.trunc(),
                _ => round_decimal(double_to_decimal(f), place, mode).to_f64(),
            };
            Bson::Double(rounded)
        }
        Number::Decimal(d) => Bson::Decimal128(round_decimal(d, place, mode).to_decimal128()),
        Number::Int32(_) | Number::Int64(_) if place >= 0 => n.into_bson(),
        Number::Int32(i) => widen(round_int(i128::from(i), place, mode), true),
        Number::Int64(i) => widen(round_int(i128::from(i), place, mode), false),
    }
}

fn round_int(v: i128, place: i64, mode: Rounding) -> i128 {
    let digits = (-place).min(30) as u32;
    let divisor = 10i128.pow(digits);
    let (q, r) = (v / divisor, v % divisor);
    let adjust = match mode {
        Rounding::Trunc => 0,
        Rounding::Floor => -i128::from(r < 0),
        Rounding::Ceil => i128::from(r > 0),
        Rounding::HalfEven => {
            let twice = r.abs() * 2;
            if twice > divisor || (twice == divisor && q % 2 != 0) {
                v.signum()
            } else {
                0
            }
        }
    };
    (q + adjust) * divisor
}

/// An integer result: int when the input was an int and it fits, then
/// long, then double.
fn widen(v: i128, from_int: bool) -> Bson {
    if from_int {
        if let Ok(i) = i32::try_from(v) {
            return Bson::Int32(i);
        }
    }
    match i64::try_from(v) {
        Ok(i) => Bson::Int64(i),
        Err(_) => Bson::Double(v as f64),
    }
}

fn op_ceil<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    match numeric_arg("$ceil", &args[0], ErrorCode::SingleNumericArgNotNumeric)? {
        Some(n) => owned(round_number(n, 0, Rounding::Ceil)),
        None => owned(Bson::Null),
    }
}

fn op_floor<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    match numeric_arg("$floor", &args[0], ErrorCode::SingleNumericArgNotNumeric)? {
        Some(n) => owned(round_number(n, 0, Rounding::Floor)),
        None => owned(Bson::Null),
    }
}

fn op_round<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    round_or_trunc("$round", args, Rounding::HalfEven)
}

fn op_trunc<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    round_or_trunc("$trunc", args, Rounding::Trunc)
}

fn round_or_trunc<'a>(name: &str, args: &[Value<'a>], mode: Rounding) -> Result<Value<'a>> {
    if args.len() > 2 {
        return Err(Error::new(
            ErrorCode::ExpressionWrongNumberOfArgs,
            format!(
                "Expression {name} takes at least 1 arguments, and at most 2, but {} were passed \
                 in.",
                args.len()
            ),
        ));
    }
    let Some(n) = numeric_arg(name, &args[0], ErrorCode::RoundTruncNotNumeric)? else {
        return owned(Bson::Null);
    };
    let place = match args.get(1) {
        None => 0,
        Some(p) if is_nullish(p) => return owned(Bson::Null),
        Some(p) => {
            let place = number_of(p).and_then(integral).ok_or_else(|| {
                Error::new(
                    ErrorCode::RoundPrecisionNotIntegral,
                    format!("precision argument to  {name} must be a integral value"),
                )
            })?;
            if !(-20..=100).contains(&place) {
                return Err(Error::new(
                    ErrorCode::RoundPrecisionOutOfRange,
                    format!(
                        "cannot apply {name} with precision value {place} value must be in \
                         [-20, 100]"
                    ),
                ));
            }
            place
        }
    };
    owned(round_number(n, place, mode))
}

/// The value of an integral number (any numeric type) that fits a long.
fn integral(n: Number) -> Option<i64> {
    match n {
        Number::Int32(i) => Some(i64::from(i)),
        Number::Int64(i) => Some(i),
        Number::Double(d) => (d.fract() == 0.0 && f64_fits_i64(d)).then_some(d as i64),
        Number::Decimal(d) => d.to_i64_exact(),
    }
}

/// Applies a double function, keeping decimals decimal.
fn float_result(n: Number, f: fn(f64) -> f64) -> Bson {
    match n {
        Number::Decimal(d) => Bson::Decimal128(decimal_result(f(d.to_f64())).to_decimal128()),
        other => Bson::Double(f(other.to_f64())),
    }
}

/// A decimal result computed through doubles: integral results stay
/// exact (`$sqrt` of 25 is `5`), others keep 15 significant digits.
fn decimal_result(f: f64) -> DecimalValue {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        DecimalValue::from_i64(f as i64)
    } else {
        DecimalValue::from_f64(f)
    }
}

fn positive_only<'a>(
    name: &str,
    args: &[Value<'a>],
    code: ErrorCode,
    allow_zero: bool,
    f: fn(f64) -> f64,
) -> Result<Value<'a>> {
    let Some(n) = numeric_arg(name, &args[0], ErrorCode::SingleNumericArgNotNumeric)? else {
        return owned(Bson::Null);
    };
    let x = n.to_f64();
    let bad = if allow_zero { x < 0.0 } else { x <= 0.0 };
    if bad {
        let message = if allow_zero {
            format!("{name}'s argument must be greater than or equal to 0")
        } else {
            format!(
                "{name}'s argument must be a positive number, but is {}",
                display_number(n)
            )
        };
        return Err(Error::new(code, message));
    }
    owned(float_result(n, f))
}

fn display_number(n: Number) -> String {
    match n {
        Number::Double(d) => format_double(d),
        other => other.into_bson().to_string(),
    }
}

fn op_sqrt<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    positive_only("$sqrt", args, ErrorCode::SqrtNegative, true, f64::sqrt)
}

fn op_ln<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    positive_only("$ln", args, ErrorCode::LnNotPositive, false, f64::ln)
}

fn op_log10<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    positive_only(
        "$log10",
        args,
        ErrorCode::Log10NotPositive,
        false,
        f64::log10,
    )
}

fn op_exp<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    match numeric_arg("$exp", &args[0], ErrorCode::SingleNumericArgNotNumeric)? {
        Some(n) => owned(float_result(n, f64::exp)),
        None => owned(Bson::Null),
    }
}

fn op_log<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let (value, base) = (&args[0], &args[1]);
    if is_nullish(value) || is_nullish(base) {
        return owned(Bson::Null);
    }
    let Some(x) = number_of(value) else {
        return Err(Error::new(
            ErrorCode::LogArgumentNotNumeric,
            format!("$log's argument must be numeric, not {}", type_of(value)),
        ));
    };
    let Some(b) = number_of(base) else {
        return Err(Error::new(
            ErrorCode::LogBaseNotNumeric,
            format!("$log's base must be numeric, not {}", type_of(base)),
        ));
    };
    if x.to_f64() <= 0.0 {
        return Err(Error::new(
            ErrorCode::LogArgumentNotPositive,
            format!(
                "$log's argument must be a positive number, but is {}",
                display_number(x)
            ),
        ));
    }
    if b.to_f64() <= 0.0 || b.to_f64() == 1.0 {
        return Err(Error::new(
            ErrorCode::LogBaseInvalid,
            format!(
                "$log's base must be a positive number not equal to 1, but is {}",
                display_number(b)
            ),
        ));
    }
    let result = x.to_f64().ln() / b.to_f64().ln();
    if matches!(x, Number::Decimal(_)) || matches!(b, Number::Decimal(_)) {
        return owned(Bson::Decimal128(decimal_result(result).to_decimal128()));
    }
    owned(Bson::Double(result))
}

fn op_pow<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let (base, exponent) = (&args[0], &args[1]);
    if is_nullish(base) || is_nullish(exponent) {
        return owned(Bson::Null);
    }
    let Some(b) = number_of(base) else {
        return Err(Error::new(
            ErrorCode::PowBaseNotNumeric,
            format!("$pow's base must be numeric, not {}", type_of(base)),
        ));
    };
    let Some(e) = number_of(exponent) else {
        return Err(Error::new(
            ErrorCode::PowExponentNotNumeric,
            format!("$pow's exponent must be numeric, not {}", type_of(exponent)),
        ));
    };
    let (bf, ef) = (b.to_f64(), e.to_f64());
    if bf == 0.0 && ef < 0.0 {
        return Err(Error::new(
            ErrorCode::PowZeroToNegative,
            "$pow cannot take a base of 0 and a negative exponent".to_string(),
        ));
    }
    if matches!(b, Number::Decimal(_)) || matches!(e, Number::Decimal(_)) {
        return owned(Bson::Decimal128(
            decimal_result(bf.powf(ef)).to_decimal128(),
        ));
    }
    let both_int = matches!(b, Number::Int32(_)) && matches!(e, Number::Int32(_));
    let (Some(bi), Some(ei)) = (int_of(b), int_of(e)) else {
        return owned(Bson::Double(bf.powf(ef)));
    };
    if ei < 0 {
        return owned(match bi {
            1 => widen(1, both_int),
            -1 => widen(if ei % 2 == 0 { 1 } else { -1 }, both_int),
            _ => Bson::Double(bf.powf(ef)),
        });
    }
    let exact = u32::try_from(ei).ok().and_then(|ei| bi.checked_pow(ei));
    owned(match exact {
        Some(v) => widen(i128::from(v), both_int),
        None => Bson::Double(bf.powf(ef)),
    })
}

fn int_of(n: Number) -> Option<i64> {
    match n {
        Number::Int32(i) => Some(i64::from(i)),
        Number::Int64(i) => Some(i),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// $switch and $let.

/// `{branches: [{case, then}, ...], default}` as
/// `[marker, default, case1, then1, case2, then2, ...]`.
fn switch_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Ok(None);
    };
    let mut default = absent_field();
    let mut branches = Vec::new();
    for (key, value) in doc {
        match key.as_str() {
            "branches" => {
                let Bson::Array(items) = value else {
                    return Err(Error::new(
                        ErrorCode::SwitchBranchesNotArray,
                        format!(
                            "$switch expected an array for 'branches', found: {}",
                            type_name(value)
                        ),
                    ));
                };
                for item in items {
                    let Bson::Document(branch) = item else {
                        return Err(Error::new(
                            ErrorCode::SwitchBranchNotObject,
                            format!(
                                "$switch expected each branch to be an object, found: {}",
                                type_name(item)
                            ),
                        ));
                    };
                    let (mut case, mut then) = (None, None);
                    for (k, v) in branch {
                        match k.as_str() {
                            "case" => case = Some(v.clone()),
                            "then" => then = Some(v.clone()),
                            other => {
                                return Err(Error::new(
                                    ErrorCode::SwitchBranchUnknownArgument,
                                    format!(
                                        "$switch found an unknown argument to a branch: {other}"
                                    ),
                                ))
                            }
                        }
                    }
                    let case = case.ok_or_else(|| {
                        Error::new(
                            ErrorCode::SwitchBranchMissingCase,
                            "$switch requires each branch have a 'case' expression".to_string(),
                        )
                    })?;
                    let then = then.ok_or_else(|| {
                        Error::new(
                            ErrorCode::SwitchBranchMissingThen,
                            "$switch requires each branch have a 'then' expression.".to_string(),
                        )
                    })?;
                    branches.push(case);
                    branches.push(then);
                }
            }
            "default" => default = value.clone(),
            other => {
                return Err(Error::new(
                    ErrorCode::SwitchUnknownArgument,
                    format!("$switch found an unknown argument: {other}"),
                ))
            }
        }
    }
    if branches.is_empty() {
        return Err(Error::new(
            ErrorCode::SwitchNoBranches,
            "$switch requires at least one branch.".to_string(),
        ));
    }
    let mut out = vec![object_form_marker(), default];
    out.extend(branches);
    Ok(Some(out))
}

fn op_switch<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    let Some(fields) = object_fields(args) else {
        return Err(Error::new(
            ErrorCode::SwitchNotObject,
            "$switch requires an object as an argument".to_string(),
        ));
    };
    let Some((default, branches)) = fields.split_first() else {
        return owned(Bson::Null);
    };
    for branch in branches.chunks(2) {
        if let [case, then] = branch {
            if eval(case, scope)?.as_deref().is_some_and(super::truthy) {
                return eval(then, scope);
            }
        }
    }
    if field_absent(default) {
        return Err(Error::new(
            ErrorCode::SwitchNoMatchingBranch,
            "$switch could not find a matching branch for an input, and no default was \
             specified."
                .to_string(),
        ));
    }
    eval(default, scope)
}

/// `{vars: {name: expr, ...}, in: expr}` as
/// `[marker, in, name1, expr1, name2, expr2, ...]` (names as symbols).
fn let_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Ok(None);
    };
    let (mut vars, mut body) = (None, None);
    for (key, value) in doc {
        match key.as_str() {
            "vars" => vars = Some(value),
            "in" => body = Some(value.clone()),
            other => {
                return Err(Error::new(
                    ErrorCode::LetUnknownParameter,
                    format!("Unrecognized parameter to $let: {other}"),
                ))
            }
        }
    }
    let vars = vars.ok_or_else(|| {
        Error::new(
            ErrorCode::LetMissingVars,
            "Missing 'vars' parameter to $let".to_string(),
        )
    })?;
    let body = body.ok_or_else(|| {
        Error::new(
            ErrorCode::LetMissingIn,
            "Missing 'in' parameter to $let".to_string(),
        )
    })?;
    let Bson::Document(vars) = vars else {
        return Err(Error::new(
            ErrorCode::ExpectedObject,
            format!(
                "invalid parameter: expected an object (vars), found {}",
                type_name(vars)
            ),
        ));
    };
    let mut out = vec![object_form_marker(), body];
    for (name, value) in vars {
        validate_variable_name(name)?;
        out.push(Bson::Symbol(name.clone()));
        out.push(value.clone());
    }
    Ok(Some(out))
}

/// MongoDB's rule for user variable names (`$let`, `as`): a lowercase
/// or non-ASCII first character, then letters, digits and `_`.
pub(super) fn validate_variable_name(name: &str) -> Result<()> {
    let Some(first) = name.chars().next() else {
        return Err(Error::new(
            ErrorCode::VariableNameEmpty,
            "empty variable names are not allowed".to_string(),
        ));
    };
    if first.is_ascii() && !first.is_ascii_lowercase() {
        return Err(Error::new(
            ErrorCode::VariableNameBadStart,
            format!("'{name}' starts with an invalid character for a user variable name"),
        ));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_alphanumeric() || *c == '_')) {
        return Err(Error::new(
            ErrorCode::VariableNameBadCharacter,
            format!("'{name}' contains an invalid character for a variable name: '{bad}'"),
        ));
    }
    Ok(())
}

fn op_let<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    let Some(fields) = object_fields(args) else {
        return Err(Error::new(
            ErrorCode::LetNotObject,
            "$let only supports an object as its argument".to_string(),
        ));
    };
    let Some((body, bindings)) = fields.split_first() else {
        return owned(Bson::Null);
    };
    let mut vars = scope.vars.cloned().unwrap_or_default();
    // All values are evaluated in the outer scope before any is bound.
    let mut bound = Vec::with_capacity(bindings.len() / 2);
    for binding in bindings.chunks(2) {
        if let [Node::Literal(Bson::Symbol(name)), expr] = binding {
            // A missing value binds as null: a variables document cannot
            // hold "missing".
            let value = eval(expr, scope)?.map_or(Bson::Null, Cow::into_owned);
            bound.push((name.clone(), value));
        }
    }
    for (name, value) in bound {
        vars.insert(name, value);
    }
    let inner = Scope {
        root: scope.root,
        vars: Some(&vars),
    };
    Ok(eval(body, &inner)?.map(|v| Cow::Owned(v.into_owned())))
}

// ---------------------------------------------------------------------------
// Conversions.

/// A `$convert` target type.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Target {
    Double,
    String,
    ObjectId,
    Bool,
    Date,
    Int,
    Long,
    Decimal,
    /// A real BSON type no conversion produces (`"array"`, ...).
    Unsupported(&'static str),
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Double => "double",
            Target::String => "string",
            Target::ObjectId => "objectId",
            Target::Bool => "bool",
            Target::Date => "date",
            Target::Int => "int",
            Target::Long => "long",
            Target::Decimal => "decimal",
            Target::Unsupported(name) => name,
        }
    }

    fn from_code(code: i64) -> Option<Target> {
        Some(match code {
            1 => Target::Double,
            2 => Target::String,
            7 => Target::ObjectId,
            8 => Target::Bool,
            9 => Target::Date,
            16 => Target::Int,
            18 => Target::Long,
            19 => Target::Decimal,
            3 => Target::Unsupported("object"),
            4 => Target::Unsupported("array"),
            5 => Target::Unsupported("binData"),
            6 => Target::Unsupported("undefined"),
            10 => Target::Unsupported("null"),
            11 => Target::Unsupported("regex"),
            12 => Target::Unsupported("dbPointer"),
            13 => Target::Unsupported("javascript"),
            14 => Target::Unsupported("symbol"),
            15 => Target::Unsupported("javascriptWithScope"),
            17 => Target::Unsupported("timestamp"),
            -1 => Target::Unsupported("minKey"),
            127 => Target::Unsupported("maxKey"),
            _ => return None,
        })
    }

    fn from_name(name: &str) -> Option<Target> {
        let code = match name {
            "double" => 1,
            "string" => 2,
            "object" => 3,
            "array" => 4,
            "binData" => 5,
            "undefined" => 6,
            "objectId" => 7,
            "bool" => 8,
            "date" => 9,
            "null" => 10,
            "regex" => 11,
            "dbPointer" => 12,
            "javascript" => 13,
            "symbol" => 14,
            "javascriptWithScope" => 15,
            "int" => 16,
            "timestamp" => 17,
            "long" => 18,
            "decimal" => 19,
            "minKey" => -1,
            "maxKey" => 127,
            _ => return None,
        };
        Target::from_code(code)
    }
}

/// Reads `to`: `Ok(None)` for null.
fn target_of(to: &Value<'_>) -> Result<Option<Target>> {
    if is_nullish(to) {
        return Ok(None);
    }
    match to.as_deref() {
        Some(Bson::String(name)) => Target::from_name(name)
            .map(Some)
            .ok_or_else(|| Error::new(ErrorCode::BadValue, format!("Unknown type name: {name}"))),
        Some(v) => match Number::of(v) {
            Some(n) => integral(n)
                .and_then(Target::from_code)
                .map(Some)
                .ok_or_else(|| {
                    Error::new(
                        ErrorCode::FailedToParse,
                        format!(
                        "In $convert, numeric value for 'to' does not correspond to a BSON type: \
                         {}",
                        display_number(n)
                    ),
                    )
                }),
            None => Err(Error::new(
                ErrorCode::FailedToParse,
                format!(
                    "$convert's 'to' argument must be a string or number, but is {}",
                    type_name(v)
                ),
            )),
        },
        None => Ok(None),
    }
}

/// MongoDB's ConversionFailure (241), which has no name in our table.
fn conversion_failure(message: String) -> Error {
    Error::new(
        ErrorCode::ConversionFailure,
        format!("{message} in $convert with no onError value"),
    )
}

fn unsupported(from: &Bson, to: Target) -> Error {
    conversion_failure(format!(
        "Unsupported conversion from {} to {}",
        type_name(from),
        to.name()
    ))
}

fn overflow() -> Error {
    conversion_failure("Conversion would overflow target type".to_string())
}

/// Converts a non-null value; errors are conversion failures (code 241).
fn convert(value: &Bson, to: Target) -> Result<Bson> {
    match to {
        Target::Double => to_double(value),
        Target::String => to_string(value),
        Target::ObjectId => match value {
            Bson::ObjectId(_) => Ok(value.clone()),
            Bson::String(s) => {
                if s.len() != 24 {
                    return Err(Error::new(
                        ErrorCode::ConversionFailure,
                        format!(
                            "Failed to parse objectId '{s}' in $convert with no onError value: \
                             Invalid string length for parsing to OID, expected 24 but found {}",
                            s.len()
                        ),
                    ));
                }
                ObjectId::parse_str(s).map(Bson::ObjectId).map_err(|_| {
                    Error::new(
                        ErrorCode::ConversionFailure,
                        format!(
                            "Failed to parse objectId '{s}' in $convert with no onError value: \
                             Invalid character found in hex string"
                        ),
                    )
                })
            }
            other => Err(unsupported(other, to)),
        },
        Target::Bool => match value {
            Bson::Boolean(_) => Ok(value.clone()),
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                Ok(Bson::Boolean(super::truthy(value)))
            }
            // Every other type converts to true.
            _ => Ok(Bson::Boolean(true)),
        },
        Target::Date => to_date(value),
        Target::Int => {
            let v = to_integer(value, to)?;
            i32::try_from(v).map(Bson::Int32).map_err(|_| overflow())
        }
        Target::Long => to_integer(value, to).map(Bson::Int64),
        Target::Decimal => to_decimal(value),
        Target::Unsupported(_) => Err(unsupported(value, to)),
    }
}

fn parse_failure(s: &str, why: &str) -> Error {
    Error::new(
        ErrorCode::ConversionFailure,
        format!("Failed to parse number '{s}' in $convert with no onError value: {why}"),
    )
}

fn to_double(value: &Bson) -> Result<Bson> {
    match value {
        Bson::Double(_) => Ok(value.clone()),
        Bson::Int32(i) => Ok(Bson::Double(f64::from(*i))),
        Bson::Int64(i) => Ok(Bson::Double(*i as f64)),
        Bson::Decimal128(d) => {
            let dv = DecimalValue::from_decimal128(d);
            let f = dv.to_f64();
            if f.is_infinite() && matches!(dv, DecimalValue::Finite { .. }) {
                return Err(overflow());
            }
            Ok(Bson::Double(f))
        }
        Bson::Boolean(b) => Ok(Bson::Double(if *b { 1.0 } else { 0.0 })),
        Bson::DateTime(d) => Ok(Bson::Double(d.timestamp_millis() as f64)),
        Bson::String(s) => {
            let valid = !s.is_empty()
                && !s.starts_with(char::is_whitespace)
                && !s.ends_with(char::is_whitespace)
                && !s.to_ascii_lowercase().contains('x');
            match s.parse::<f64>() {
                Ok(f) if valid => Ok(Bson::Double(f)),
                _ => Err(parse_failure(s, "Did not consume whole string.")),
            }
        }
        other => Err(unsupported(other, Target::Double)),
    }
}

fn to_integer(value: &Bson, to: Target) -> Result<i64> {
    let from_float = |f: f64| -> Result<i64> {
        if f.is_nan() {
            return Err(conversion_failure(
                "Attempt to convert NaN value to integer type".to_string(),
            ));
        }
        if f.is_infinite() {
            return Err(conversion_failure(
                "Attempt to convert infinity value to integer type".to_string(),
            ));
        }
        let t = f.trunc();
        if !f64_fits_i64(t) {
            return Err(overflow());
        }
        Ok(t as i64)
    };
    match value {
        Bson::Int32(i) => Ok(i64::from(*i)),
        Bson::Int64(i) => Ok(*i),
        Bson::Double(f) => from_float(*f),
        Bson::Decimal128(d) => match DecimalValue::from_decimal128(d) {
            DecimalValue::NaN => from_float(f64::NAN),
            DecimalValue::Infinity { .. } => from_float(f64::INFINITY),
            finite => round_decimal(finite, 0, Rounding::Trunc)
                .to_i64_exact()
                .ok_or_else(overflow),
        },
        Bson::Boolean(b) => Ok(i64::from(*b)),
        Bson::DateTime(d) if to == Target::Long => Ok(d.timestamp_millis()),
        Bson::String(s) => {
            let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(parse_failure(s, "Did not consume whole string."));
            }
            let n = s.parse::<i64>().map_err(|_| parse_failure(s, "Overflow"))?;
            if to == Target::Int && i32::try_from(n).is_err() {
                return Err(parse_failure(s, "Overflow"));
            }
            Ok(n)
        }
        other => Err(unsupported(other, to)),
    }
}

fn to_decimal(value: &Bson) -> Result<Bson> {
    let d = match value {
        Bson::Decimal128(_) => return Ok(value.clone()),
        Bson::Int32(i) => DecimalValue::from_i64(i64::from(*i)),
        Bson::Int64(i) => DecimalValue::from_i64(*i),
        Bson::Double(f) => DecimalValue::from_f64(*f),
        Bson::Boolean(b) => DecimalValue::from_i64(i64::from(*b)),
        Bson::DateTime(d) => DecimalValue::from_i64(d.timestamp_millis()),
        Bson::String(s) => DecimalValue::parse(s)
            .filter(|_| !s.is_empty() && !s.contains(char::is_whitespace))
            .ok_or_else(|| parse_failure(s, "Failed to parse string to decimal"))?,
        other => return Err(unsupported(other, Target::Decimal)),
    };
    Ok(Bson::Decimal128(d.to_decimal128()))
}

fn to_date(value: &Bson) -> Result<Bson> {
    let millis = match value {
        Bson::DateTime(_) => return Ok(value.clone()),
        Bson::Int64(i) => *i,
        Bson::Double(_) | Bson::Decimal128(_) => to_integer(value, Target::Long)?,
        Bson::Timestamp(t) => i64::from(t.time) * 1000,
        Bson::ObjectId(o) => o.timestamp().timestamp_millis(),
        Bson::String(s) => parse_date_string(s, TimeZone::UTC)?.0,
        other => return Err(unsupported(other, Target::Date)),
    };
    Ok(Bson::DateTime(DateTime::from_millis(millis)))
}

fn to_string(value: &Bson) -> Result<Bson> {
    let text = match value {
        Bson::String(_) => return Ok(value.clone()),
        Bson::Double(f) => format_double(*f),
        Bson::Int32(i) => i.to_string(),
        Bson::Int64(i) => i.to_string(),
        Bson::Decimal128(d) => d.to_string(),
        Bson::Boolean(b) => b.to_string(),
        Bson::ObjectId(o) => o.to_hex(),
        Bson::DateTime(d) => format_date(DEFAULT_FORMAT, d.timestamp_millis(), TimeZone::UTC)?,
        other => return Err(unsupported(other, Target::String)),
    };
    Ok(Bson::String(text))
}

/// Formats a double the way MongoDB's `$toString` does (`{fmt}`'s `{}`):
/// the shortest round-trip digits, in exponent form below 1e-4 and from
/// 1e16 up.
pub(super) fn format_double(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f < 0.0 { "-Infinity" } else { "Infinity" }.to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..16).contains(&exponent) {
        format!("{f}")
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    }
}

/// `{input, to, onError, onNull}` as `[marker, input, to, onError, onNull]`.
fn convert_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Ok(None);
    };
    let args = object_form(doc, &["input", "to", "onError", "onNull"], |f| {
        Error::new(
            ErrorCode::FailedToParse,
            format!("$convert found an unknown argument: {f}"),
        )
    })?;
    for (i, name) in [(0, "input"), (1, "to")] {
        if !field_given(&args, i) {
            crate::bail!(FailedToParse, "Missing '{name}' parameter to $convert");
        }
    }
    Ok(Some(args))
}

fn op_convert<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    let Some(fields) = object_fields(args) else {
        crate::bail!(
            FailedToParse,
            "$convert expects an object of named arguments but found: {}",
            if args.len() == 1 {
                "single value"
            } else {
                "array"
            }
        );
    };
    let input = eval_field(fields, 0, scope)?.flatten();
    let to = eval_field(fields, 1, scope)?.flatten();
    let target = target_of(&to)?;
    if is_nullish(&input) {
        return match eval_field(fields, 3, scope)? {
            Some(v) => Ok(v),
            None => owned(Bson::Null),
        };
    }
    let (Some(target), Some(value)) = (target, input.as_deref()) else {
        return owned(Bson::Null);
    };
    match convert(value, target) {
        Ok(v) => owned(v),
        Err(e) if e.code.number() == 241 => match eval_field(fields, 2, scope)? {
            Some(v) => Ok(v),
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

fn shorthand<'a>(args: &[Value<'a>], target: Target) -> Result<Value<'a>> {
    match args[0].as_deref() {
        None | Some(Bson::Null | Bson::Undefined) => owned(Bson::Null),
        Some(v) => owned(convert(v, target)?),
    }
}

fn op_to_bool<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    shorthand(args, Target::Bool)
}

fn op_to_date<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    shorthand(args, Target::Date)
}

fn op_to_decimal<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    shorthand(args, Target::Decimal)
}

fn op_to_double<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    shorthand(args, Target::Double)
}

fn op_to_int<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    shorthand(args, Target::Int)
}

fn op_to_long<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    shorthand(args, Target::Long)
}

fn op_to_object_id<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    shorthand(args, Target::ObjectId)
}

fn op_to_string<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    shorthand(args, Target::String)
}

fn op_is_number<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    owned(Bson::Boolean(number_of(&args[0]).is_some()))
}

#[cfg(test)]
mod tests {
    use super::super::Expr;
    use bson::{doc, oid::ObjectId, Bson, DateTime, Decimal128, Document};
    use std::str::FromStr;

    fn run(expr: Document, root: &Document) -> crate::error::Result<Bson> {
        Expr::parse(&Bson::Document(expr))?.evaluate(root)
    }

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(Decimal128::from_str(s).unwrap())
    }

    /// Each case: the expression, then the expected value or error code.
    fn check(cases: Vec<(Document, std::result::Result<Bson, i32>)>) {
        let root = doc! {"n": null, "five": 5, "s": "abc", "arr": [1, 2]};
        for (expr, expected) in cases {
            let got = run(expr.clone(), &root);
            match (&got, &expected) {
                (Ok(v), Ok(want)) => assert_eq!(v, want, "{expr}"),
                (Err(e), Err(code)) => assert_eq!(e.code.number(), *code, "{expr}: {e:?}"),
                _ => panic!("{expr}: got {got:?}, want {expected:?}"),
            }
        }
    }

    #[test]
    fn rounding() {
        check(vec![
            (doc! {"$ceil": 1.2}, Ok(Bson::Double(2.0))),
            (doc! {"$ceil": -1.2}, Ok(Bson::Double(-1.0))),
            (doc! {"$ceil": 5}, Ok(Bson::Int32(5))),
            (doc! {"$ceil": dec("1.01")}, Ok(dec("2"))),
            (doc! {"$ceil": null}, Ok(Bson::Null)),
            (doc! {"$ceil": "$missing"}, Ok(Bson::Null)),
            (doc! {"$ceil": "x"}, Err(28765)),
            (doc! {"$floor": -1.2}, Ok(Bson::Double(-2.0))),
            (doc! {"$floor": dec("-1.5")}, Ok(dec("-2"))),
            (doc! {"$floor": 7i64}, Ok(Bson::Int64(7))),
            (doc! {"$floor": [[1]]}, Err(28765)),
            (doc! {"$round": [2.5]}, Ok(Bson::Double(2.0))),
            (doc! {"$round": [3.5]}, Ok(Bson::Double(4.0))),
            (doc! {"$round": [-2.5]}, Ok(Bson::Double(-2.0))),
            (doc! {"$round": [1.2345, 2]}, Ok(Bson::Double(1.23))),
            (doc! {"$round": [19.25, 1]}, Ok(Bson::Double(19.2))),
            (doc! {"$round": [1234, -2]}, Ok(Bson::Int32(1200))),
            (doc! {"$round": [1250, -2]}, Ok(Bson::Int32(1200))),
            (doc! {"$round": [1350, -2]}, Ok(Bson::Int32(1400))),
            (doc! {"$round": [-1351, -2]}, Ok(Bson::Int32(-1400))),
            (
                doc! {"$round": [i32::MAX, -1]},
                Ok(Bson::Int64(2_147_483_650)),
            ),
            (doc! {"$round": [dec("1.2345"), 2]}, Ok(dec("1.23"))),
            (doc! {"$round": [dec("1.235"), 2]}, Ok(dec("1.24"))),
            (doc! {"$round": [5, null]}, Ok(Bson::Null)),
            (doc! {"$round": [null, 2]}, Ok(Bson::Null)),
            (doc! {"$round": ["a"]}, Err(51081)),
            (doc! {"$round": [1.5, 1.5]}, Err(51082)),
            (doc! {"$round": [1.5, 101]}, Err(51083)),
            (doc! {"$round": [1, 2, 3]}, Err(28667)),
            (doc! {"$trunc": [1.789, 1]}, Ok(Bson::Double(1.7))),
            (doc! {"$trunc": [-1.789]}, Ok(Bson::Double(-1.0))),
            (doc! {"$trunc": 1.9}, Ok(Bson::Double(1.0))),
            (doc! {"$trunc": [1299, -2]}, Ok(Bson::Int32(1200))),
            (doc! {"$trunc": [dec("-1.99"), 1]}, Ok(dec("-1.9"))),
            (doc! {"$trunc": ["x"]}, Err(51081)),
        ]);
    }

    #[test]
    fn powers_and_logarithms() {
        check(vec![
            (doc! {"$pow": [2, 10]}, Ok(Bson::Int32(1024))),
            (doc! {"$pow": [2, 40]}, Ok(Bson::Int64(1_099_511_627_776))),
            (doc! {"$pow": [2i64, 3]}, Ok(Bson::Int64(8))),
            (doc! {"$pow": [2, 100]}, Ok(Bson::Double(2f64.powi(100)))),
            (doc! {"$pow": [2, -1]}, Ok(Bson::Double(0.5))),
            (doc! {"$pow": [-1, -3]}, Ok(Bson::Int32(-1))),
            (doc! {"$pow": [4, 0.5]}, Ok(Bson::Double(2.0))),
            (doc! {"$pow": [dec("2"), 2]}, Ok(dec("4"))),
            (doc! {"$pow": [0, -1]}, Err(28764)),
            (doc! {"$pow": ["a", 1]}, Err(28762)),
            (doc! {"$pow": [1, "a"]}, Err(28763)),
            (doc! {"$pow": [null, 1]}, Ok(Bson::Null)),
            (doc! {"$sqrt": 25}, Ok(Bson::Double(5.0))),
            (doc! {"$sqrt": -1}, Err(28714)),
            (doc! {"$sqrt": "x"}, Err(28765)),
            (doc! {"$sqrt": null}, Ok(Bson::Null)),
            (doc! {"$exp": 0}, Ok(Bson::Double(1.0))),
            (doc! {"$exp": "$n"}, Ok(Bson::Null)),
            (doc! {"$ln": 1}, Ok(Bson::Double(0.0))),
            (doc! {"$ln": 0}, Err(28766)),
            (doc! {"$log10": 1000}, Ok(Bson::Double(3.0))),
            (doc! {"$log10": -1}, Err(28761)),
            (doc! {"$log10": [true]}, Err(28765)),
            (doc! {"$log": [8, 2]}, Ok(Bson::Double(3.0))),
            (doc! {"$log": [8, 1]}, Err(28759)),
            (doc! {"$log": [-8, 2]}, Err(28758)),
            (doc! {"$log": ["a", 2]}, Err(28756)),
            (doc! {"$log": [8, "b"]}, Err(28757)),
            (doc! {"$log": [8, null]}, Ok(Bson::Null)),
        ]);
    }

    #[test]
    fn switch_and_let() {
        check(vec![
            (
                doc! {"$switch": {"branches": [
                    {"case": {"$gt": ["$five", 10]}, "then": "big"},
                    {"case": {"$gt": ["$five", 1]}, "then": "medium"},
                ], "default": "small"}},
                Ok(Bson::String("medium".into())),
            ),
            (
                doc! {"$switch": {"branches": [{"case": false, "then": 1}], "default": "d"}},
                Ok(Bson::String("d".into())),
            ),
            (
                doc! {"$switch": {"branches": [{"case": false, "then": 1}]}},
                Err(40066),
            ),
            // Branches after the match are not evaluated.
            (
                doc! {"$switch": {"branches": [
                    {"case": true, "then": 1},
                    {"case": {"$add": ["x"]}, "then": 2},
                ]}},
                Ok(Bson::Int32(1)),
            ),
            (doc! {"$switch": {"branches": []}}, Err(40068)),
            (doc! {"$switch": {"branches": 1}}, Err(40061)),
            (doc! {"$switch": {"branches": [1]}}, Err(40062)),
            (doc! {"$switch": {"branches": [{"case": true}]}}, Err(40065)),
            (doc! {"$switch": {"branches": [{"then": true}]}}, Err(40064)),
            (
                doc! {"$switch": {"branches": [{"case": 1, "then": 1, "x": 1}]}},
                Err(40063),
            ),
            (
                doc! {"$switch": {"branches": [{"case": 1, "then": 1}], "x": 1}},
                Err(40067),
            ),
            (doc! {"$switch": [1, 2]}, Err(40060)),
            (
                doc! {"$let": {"vars": {"a": 2, "b": "$five"}, "in": {"$multiply": ["$$a", "$$b"]}}},
                Ok(Bson::Int32(10)),
            ),
            (
                doc! {"$let": {"vars": {"a": 1}, "in": {"$let": {
                    "vars": {"b": {"$add": ["$$a", 1]}},
                    "in": {"$add": ["$$a", "$$b"]},
                }}}},
                Ok(Bson::Int32(3)),
            ),
            (
                doc! {"$let": {"vars": {"a": {"x": [1]}}, "in": "$$a.x"}},
                Ok(Bson::Array(vec![Bson::Int32(1)])),
            ),
            (doc! {"$let": {"vars": {"A": 1}, "in": 1}}, Err(16867)),
            (doc! {"$let": {"vars": {}, "in": "$$zz"}}, Err(17276)),
            (doc! {"$let": {"in": 1}}, Err(16876)),
            (doc! {"$let": {"vars": {}}}, Err(16877)),
            (doc! {"$let": {"vars": {}, "in": 1, "x": 1}}, Err(16875)),
            (doc! {"$let": {"vars": 1, "in": 1}}, Err(10065)),
            (doc! {"$let": 1}, Err(16874)),
        ]);
    }

    #[test]
    fn let_shadows_outer_variables() {
        let e = Expr::parse(&Bson::Document(
            doc! {"$let": {"vars": {"x": 2}, "in": {"$add": ["$$x", "$$y"]}}},
        ))
        .unwrap();
        let got = e
            .evaluate_with_vars(&doc! {}, &doc! {"x": 100, "y": 10})
            .unwrap();
        assert_eq!(got, Some(Bson::Int32(12)));
    }

    #[test]
    fn conversions() {
        let oid = ObjectId::parse_str("5ab9c3da31c2ab715d421285").unwrap();
        let date = Bson::DateTime(DateTime::from_millis(1_522_127_400_000));
        check(vec![
            (doc! {"$toInt": "42"}, Ok(Bson::Int32(42))),
            (doc! {"$toInt": "-7"}, Ok(Bson::Int32(-7))),
            (doc! {"$toInt": 2.9}, Ok(Bson::Int32(2))),
            (doc! {"$toInt": -2.9}, Ok(Bson::Int32(-2))),
            (doc! {"$toInt": true}, Ok(Bson::Int32(1))),
            (doc! {"$toInt": 5i64}, Ok(Bson::Int32(5))),
            (doc! {"$toInt": dec("7.9")}, Ok(Bson::Int32(7))),
            (doc! {"$toInt": 3_000_000_000i64}, Err(241)),
            (doc! {"$toInt": "1.5"}, Err(241)),
            (doc! {"$toInt": "abc"}, Err(241)),
            (doc! {"$toInt": "99999999999"}, Err(241)),
            (doc! {"$toInt": f64::NAN}, Err(241)),
            (doc! {"$toInt": date.clone()}, Err(241)),
            (doc! {"$toInt": null}, Ok(Bson::Null)),
            (doc! {"$toInt": "$missing"}, Ok(Bson::Null)),
            (
                doc! {"$toLong": date.clone()},
                Ok(Bson::Int64(1_522_127_400_000)),
            ),
            (doc! {"$toLong": "123"}, Ok(Bson::Int64(123))),
            (doc! {"$toLong": 1e19}, Err(241)),
            (doc! {"$toDouble": "1.5"}, Ok(Bson::Double(1.5))),
            (doc! {"$toDouble": "1e3"}, Ok(Bson::Double(1000.0))),
            (doc! {"$toDouble": " 1"}, Err(241)),
            (doc! {"$toDouble": 5}, Ok(Bson::Double(5.0))),
            (doc! {"$toDouble": false}, Ok(Bson::Double(0.0))),
            (
                doc! {"$toDouble": date.clone()},
                Ok(Bson::Double(1.5221274e12)),
            ),
            (doc! {"$toDouble": [[1]]}, Err(241)),
            (doc! {"$toDecimal": 5}, Ok(dec("5"))),
            (doc! {"$toDecimal": "1.25"}, Ok(dec("1.25"))),
            (doc! {"$toDecimal": 2.5}, Ok(dec("2.50000000000000"))),
            (doc! {"$toDecimal": "x"}, Err(241)),
            (doc! {"$toBool": 0}, Ok(Bson::Boolean(false))),
            (doc! {"$toBool": 0.5}, Ok(Bson::Boolean(true))),
            (doc! {"$toBool": ""}, Ok(Bson::Boolean(true))),
            (doc! {"$toBool": "false"}, Ok(Bson::Boolean(true))),
            (doc! {"$toBool": date.clone()}, Ok(Bson::Boolean(true))),
            (doc! {"$toBool": null}, Ok(Bson::Null)),
            (doc! {"$toString": 1.5}, Ok(Bson::String("1.5".into()))),
            (doc! {"$toString": 2.0}, Ok(Bson::String("2".into()))),
            (doc! {"$toString": 1e20}, Ok(Bson::String("1e+20".into()))),
            (
                doc! {"$toString": 0.00001},
                Ok(Bson::String("1e-05".into())),
            ),
            (
                doc! {"$toString": 0.0001},
                Ok(Bson::String("0.0001".into())),
            ),
            (doc! {"$toString": 42}, Ok(Bson::String("42".into()))),
            (
                doc! {"$toString": dec("1.50")},
                Ok(Bson::String("1.50".into())),
            ),
            (doc! {"$toString": true}, Ok(Bson::String("true".into()))),
            (
                doc! {"$toString": oid},
                Ok(Bson::String("5ab9c3da31c2ab715d421285".into())),
            ),
            (
                doc! {"$toString": date.clone()},
                Ok(Bson::String("2018-03-27T05:10:00.000Z".into())),
            ),
            (doc! {"$toString": {"$literal": {"a": 1}}}, Err(241)),
            (
                doc! {"$toObjectId": "5ab9c3da31c2ab715d421285"},
                Ok(Bson::ObjectId(oid)),
            ),
            (doc! {"$toObjectId": "5ab9"}, Err(241)),
            (doc! {"$toObjectId": "zzb9c3da31c2ab715d421285"}, Err(241)),
            (doc! {"$toDate": "2018-03-27T05:10:00Z"}, Ok(date.clone())),
            (
                doc! {"$toDate": "2018-03-27T07:10:00+02:00"},
                Ok(date.clone()),
            ),
            (doc! {"$toDate": 1_522_127_400_000i64}, Ok(date.clone())),
            (doc! {"$toDate": 1.5221274e12}, Ok(date.clone())),
            (doc! {"$toDate": 5}, Err(241)),
            (doc! {"$toDate": "not a date"}, Err(241)),
            (
                doc! {"$toDate": oid},
                Ok(Bson::DateTime(DateTime::from_millis(1_522_123_738_000))),
            ),
            (doc! {"$isNumber": 1}, Ok(Bson::Boolean(true))),
            (doc! {"$isNumber": dec("1")}, Ok(Bson::Boolean(true))),
            (doc! {"$isNumber": "1"}, Ok(Bson::Boolean(false))),
            (doc! {"$isNumber": "$missing"}, Ok(Bson::Boolean(false))),
        ]);
    }

    #[test]
    fn convert_object_form() {
        check(vec![
            (
                doc! {"$convert": {"input": "5", "to": "int"}},
                Ok(Bson::Int32(5)),
            ),
            (
                doc! {"$convert": {"input": "5", "to": 16}},
                Ok(Bson::Int32(5)),
            ),
            (
                doc! {"$convert": {"input": "5", "to": 18.0}},
                Ok(Bson::Int64(5)),
            ),
            (
                doc! {"$convert": {"input": 5, "to": "string"}},
                Ok(Bson::String("5".into())),
            ),
            (
                doc! {"$convert": {"input": "x", "to": "int", "onError": -1}},
                Ok(Bson::Int32(-1)),
            ),
            (
                doc! {"$convert": {"input": null, "to": "int", "onNull": 0}},
                Ok(Bson::Int32(0)),
            ),
            (
                doc! {"$convert": {"input": "$missing", "to": "int", "onNull": "none"}},
                Ok(Bson::String("none".into())),
            ),
            (
                doc! {"$convert": {"input": null, "to": "int"}},
                Ok(Bson::Null),
            ),
            (doc! {"$convert": {"input": 1, "to": null}}, Ok(Bson::Null)),
            (doc! {"$convert": {"input": "x", "to": "int"}}, Err(241)),
            (doc! {"$convert": {"input": 1, "to": "array"}}, Err(241)),
            (
                doc! {"$convert": {"input": 1, "to": "array", "onError": "e"}},
                Ok(Bson::String("e".into())),
            ),
            // A bad 'to' is not a conversion failure: onError does not apply.
            (
                doc! {"$convert": {"input": 1, "to": "nope", "onError": 0}},
                Err(2),
            ),
            (doc! {"$convert": {"input": 1, "to": 99}}, Err(9)),
            (doc! {"$convert": {"input": 1, "to": true}}, Err(9)),
            (doc! {"$convert": {"to": "int"}}, Err(9)),
            (doc! {"$convert": {"input": 1}}, Err(9)),
            (doc! {"$convert": {"input": 1, "to": "int", "x": 1}}, Err(9)),
            (doc! {"$convert": 1}, Err(9)),
        ]);
    }

    #[test]
    fn double_formatting() {
        assert_eq!(super::format_double(123456789.0), "123456789");
        assert_eq!(super::format_double(-0.5), "-0.5");
        assert_eq!(super::format_double(1e15), "1000000000000000");
        assert_eq!(super::format_double(1e16), "1e+16");
        assert_eq!(super::format_double(1.5e-7), "1.5e-07");
        assert_eq!(super::format_double(f64::NEG_INFINITY), "-Infinity");
    }
}
