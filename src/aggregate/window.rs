//! `$setWindowFields`: window functions over sorted partitions of the
//! input.
//!
//! The stage is what MongoDB rewrites it into: a `$sort` by the partition
//! key and `sortBy` (the key first computed into a temporary field when
//! `partitionBy` is an expression other than a field path), then the
//! window computation over the sorted stream. On a partitioned collection
//! the sort runs on every partition and the router merges the sorted
//! streams in order; the window computation runs once, after the merge,
//! as a mongos runs it.
//!
//! The computation reads one partition at a time through a [`Cache`] of
//! the documents some window still needs. A window bounded on both sides
//! by document offsets keeps only its width; a window open to the left
//! keeps a running state instead of its documents (`$sum` over
//! `["unbounded", "current"]`, `$rank`, `$expMovingAvg`, `$locf`); only
//! windows open to the right, or range windows reaching far, hold their
//! whole partition. Past the memory limit the cache moves to a spill file
//! with `allowDiskUse`, and fails with MongoDB's 5643011 without it.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::basic::{eval, sort, Chain};
use super::group::{WindowAccumulator, WindowState};
use super::spill::doc_size;
use super::{Context, DocStream, Limits, ParseContext, Split, Stage, StageParser};
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::{compare, is_nan, type_name, DecimalValue, Number};
use crate::query::expr::{Expr, TimeUnit};
use crate::query::sort::SortSpec;

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] = &[("$setWindowFields", parse_set_window_fields)];

/// Where a computed partition key waits between the sort and the window
/// computation (MongoDB's own name for it).
const PARTITION_KEY_FIELD: &str = "__internal_setWindowFields_partition_key";

/// The window functions that are not accumulators of `$group`.
const WINDOW_FUNCTIONS: &[&str] = &[
    "$covariancePop",
    "$covarianceSamp",
    "$denseRank",
    "$derivative",
    "$documentNumber",
    "$expMovingAvg",
    "$integral",
    "$linearFill",
    "$locf",
    "$rank",
    "$shift",
];

fn is_function(name: &str) -> bool {
    WINDOW_FUNCTIONS.contains(&name) || WindowAccumulator::is_accumulator(name)
}

fn parse_error(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::FailedToParse, message)
}

// ---------------------------------------------------------------------------
// Parsing

/// One end of a window.
#[derive(Debug, Clone)]
enum Bound<T> {
    Unbounded,
    Current,
    At(T),
}

/// `window: {documents: [lo, hi]}` or `{range: [lo, hi], unit}`.
#[derive(Debug, Clone)]
enum Window {
    Documents(Bound<i64>, Bound<i64>),
    Range {
        lower: Bound<Bson>,
        upper: Bound<Bson>,
        unit: Option<TimeUnit>,
    },
}

impl Window {
    const UNBOUNDED: Window = Window::Documents(Bound::Unbounded, Bound::Unbounded);

    fn lower_unbounded(&self) -> bool {
        matches!(
            self,
            Window::Documents(Bound::Unbounded, _)
                | Window::Range {
                    lower: Bound::Unbounded,
                    ..
                }
        )
    }
}

/// What the window functions need to know of `sortBy`.
struct SortInfo<'a> {
    spec: Option<&'a SortSpec>,
}

impl SortInfo<'_> {
    fn single(&self) -> Option<(&str, bool)> {
        match self.spec.map(SortSpec::fields) {
            Some([f]) => Some((f.path(), f.ascending())),
            _ => None,
        }
    }
}

fn parse_bound<T>(value: &Bson, number: impl Fn(&Bson) -> Result<T>) -> Result<Bound<T>> {
    match value {
        Bson::String(s) if s == "unbounded" => Ok(Bound::Unbounded),
        Bson::String(s) if s == "current" => Ok(Bound::Current),
        Bson::String(_) => Err(parse_error(
            "Window bounds must be 'unbounded', 'current', or a number.",
        )),
        other => {
            let expr = Expr::parse(other)?;
            if !expr.is_constant() {
                return Err(parse_error("Window bounds expression must be a constant."));
            }
            number(&expr.evaluate(&Document::new())?).map(Bound::At)
        }
    }
}

/// Requires `lower <= upper`, `current` counting as 0 (5339900).
fn check_forward<T: Clone>(
    lower: &Bound<T>,
    upper: &Bound<T>,
    zero: T,
    le: impl Fn(&T, &T) -> bool,
    show: impl Fn(&T) -> String,
) -> Result<()> {
    let value = |b: &Bound<T>| match b {
        Bound::Current => Some(zero.clone()),
        Bound::At(v) => Some(v.clone()),
        Bound::Unbounded => None,
    };
    if let (Some(lo), Some(hi)) = (value(lower), value(upper)) {
        if !le(&lo, &hi) {
            return Err(Error::new(
                ErrorCode::WindowBoundsInverted,
                format!(
                    "Lower bound must not exceed upper bound: [{}, {}]",
                    show(&lo),
                    show(&hi)
                ),
            ));
        }
    }
    Ok(())
}

fn two_bounds(value: &Bson) -> Result<(&Bson, &Bson)> {
    match value {
        Bson::Array(items) if items.len() == 2 => Ok((&items[0], &items[1])),
        other => Err(parse_error(format!(
            "Window bounds must be a 2-element array: {other}"
        ))),
    }
}

fn parse_window(value: &Bson, sort: &SortInfo<'_>) -> Result<Window> {
    let Bson::Document(spec) = value else {
        return Err(parse_error("'window' field must be an object"));
    };
    let documents = spec.get("documents");
    let range = spec.get("range");
    let unit = spec.get("unit");
    if documents.is_some() && range.is_some() {
        return Err(parse_error(
            "Window bounds can specify either 'documents' or 'unit', not both.",
        ));
    }
    if range.is_none() && unit.is_some() {
        return Err(parse_error(
            "Window bounds can only specify 'unit' with range-based bounds.",
        ));
    }
    if let Some(documents) = documents {
        if spec.len() != 1 {
            return Err(parse_error(
                "'window' field that specifies documents cannot have other fields",
            ));
        }
        let (lo, hi) = two_bounds(documents)?;
        let int = |v: &Bson| -> Result<i64> {
            Number::of(v)
                .and_then(Number::integral)
                .filter(|n| i32::try_from(*n).is_ok())
                .ok_or_else(|| parse_error("Numeric document-based bounds must be an integer"))
        };
        let lower = parse_bound(lo, int)?;
        let upper = parse_bound(hi, int)?;
        check_forward(&lower, &upper, 0, |a, b| a <= b, i64::to_string)?;
        let window = Window::Documents(lower, upper);
        if !matches!(
            window,
            Window::Documents(Bound::Unbounded, Bound::Unbounded)
        ) && sort.spec.is_none()
        {
            return Err(Error::new(
                ErrorCode::WindowDocumentBoundsNeedSortBy,
                "Document-based bounds require a sortBy",
            ));
        }
        return Ok(window);
    }
    let Some(range) = range else {
        if !spec.is_empty() {
            return Err(parse_error(
                "'window' field can only contain 'documents' as the only argument or 'range' \
                 with an optional 'unit' field",
            ));
        }
        return Ok(Window::UNBOUNDED);
    };
    let (lo, hi) = two_bounds(range)?;
    let unit = match unit {
        Some(unit) => {
            if spec.len() != 2 {
                return Err(parse_error(
                    "'window' field that specifies unit cannot have other fields besides 'range'",
                ));
            }
            let Bson::String(unit) = unit else {
                return Err(parse_error("'unit' must be a string"));
            };
            Some(TimeUnit::parse(unit)?)
        }
        None => {
            if spec.len() != 1 {
                return Err(parse_error(
                    "'window' field that specifies range cannot have other fields besides 'unit'",
                ));
            }
            None
        }
    };
    let number = |v: &Bson| -> Result<Bson> {
        let n = Number::of(v);
        match (unit, n) {
            (Some(_), Some(n)) if n.integral().is_some() => Ok(v.clone()),
            (Some(_), _) => Err(parse_error(
                "With 'unit', range-based bounds must be an integer",
            )),
            (None, Some(_)) => Ok(v.clone()),
            (None, None) => Err(parse_error(
                "Range-based bounds expression must be a number",
            )),
        }
    };
    let lower = parse_bound(lo, number)?;
    let upper = parse_bound(hi, number)?;
    check_forward(
        &lower,
        &upper,
        Bson::Int32(0),
        |a, b| compare(a, b) != Ordering::Greater,
        Bson::to_string,
    )?;
    match sort.single() {
        None => Err(Error::new(
            ErrorCode::WindowRangeBoundsNeedOneSortField,
            "Range-based bounds require sortBy a single field",
        )),
        Some((_, false)) => Err(Error::new(
            ErrorCode::WindowRangeNeedsAscendingSort,
            "Range-based bounds require an ascending sortBy",
        )),
        Some(_) => Ok(Window::Range { lower, upper, unit }),
    }
}

/// A window function with what it reads.
enum Function {
    /// A `$group` accumulator over the window.
    Accumulator(WindowAccumulator),
    DocumentNumber,
    /// `$rank` / `$denseRank` of the `sortBy` value.
    Rank {
        key: Expr,
        dense: bool,
    },
    Shift {
        output: Expr,
        by: i64,
        default: Bson,
    },
    ExpMovingAvg {
        input: Expr,
        alpha: DecimalValue,
    },
    Derivative {
        input: Expr,
        time: Expr,
        unit_ms: Option<i64>,
    },
    Integral {
        input: Expr,
        time: Expr,
        unit_ms: Option<i64>,
    },
    Covariance {
        input: Expr,
        sample: bool,
    },
    Locf(Expr),
    LinearFill {
        input: Expr,
        time: Expr,
    },
}

/// One field of `output`.
struct Output {
    path: Vec<String>,
    function: Function,
    window: Window,
    /// The one `sortBy` field, which range windows measure.
    sort_time: Option<Expr>,
}

impl Output {
    /// Whether the window's documents are folded into a state that is
    /// kept from one document to the next.
    fn runs_from_left(&self) -> bool {
        matches!(
            self.function,
            Function::Accumulator(_) | Function::Integral { .. } | Function::Covariance { .. }
        ) && self.window.lower_unbounded()
    }
}

/// The `$`-named function of a window function specification and its
/// argument.
fn function_of(spec: &Document) -> Result<(&str, &Bson)> {
    for (k, v) in spec {
        if k.starts_with('$') {
            if is_function(k) {
                return Ok((k, v));
            }
            return Err(parse_error(format!("Unrecognized window function, {k}")));
        }
    }
    Err(parse_error(match spec.keys().next() {
        Some(first) if !first.is_empty() => {
            format!("Expected a $-prefixed window function, {first}")
        }
        _ => "Expected a $-prefixed window function".to_string(),
    }))
}

/// The arguments beside the function: `window` only.
fn window_argument(spec: &Document, name: &str, sort: &SortInfo<'_>) -> Result<Window> {
    let mut window = None;
    for (k, v) in spec {
        if k == "window" {
            if window.is_some() {
                return Err(parse_error(format!(
                    "saw multiple 'window' fields in '{name}' expression"
                )));
            }
            window = Some(parse_window(v, sort)?);
        } else if k != name {
            if is_function(k) {
                return Err(parse_error(
                    "Cannot specify two functions in window function spec",
                ));
            }
            return Err(parse_error(format!(
                "Window function found an unknown argument: {k}"
            )));
        }
    }
    Ok(window.unwrap_or(Window::UNBOUNDED))
}

/// Refuses any argument beside the function (`$locf`, `$linearFill`).
fn no_window(spec: &Document, name: &str) -> Result<()> {
    for k in spec.keys() {
        if k == "window" {
            return Err(parse_error(format!(
                "'window' field is not allowed in {name}"
            )));
        }
        if k != name {
            if is_function(k) {
                return Err(parse_error(
                    "Cannot specify two functions in window function spec",
                ));
            }
            return Err(parse_error(format!(
                "Window function found an unknown argument: {k}"
            )));
        }
    }
    Ok(())
}

fn field_expr(path: &str) -> Result<Expr> {
    Expr::parse(&Bson::String(format!("${path}")))
}

/// `$derivative` and `$integral` need one plain `sortBy` field.
fn time_of(name: &str, sort: &SortInfo<'_>) -> Result<Expr> {
    let Some(spec) = sort.spec else {
        return Err(parse_error(format!("{name} requires a sortBy")));
    };
    let [field] = spec.fields() else {
        return Err(parse_error(format!(
            "{name} requires a non-compound sortBy"
        )));
    };
    field_expr(field.path())
}

/// `{input, unit}` of `$derivative` / `$integral`.
fn input_and_unit(name: &str, arg: &Bson) -> Result<(Expr, Option<i64>)> {
    let Bson::Document(args) = arg else {
        return Err(parse_error(format!(
            "{name} expects an object, but got a {}: {arg}",
            type_name(arg)
        )));
    };
    let mut input = None;
    let mut unit_ms = None;
    for (k, v) in args {
        match k.as_str() {
            "input" => input = Some(Expr::parse(v)?),
            "unit" => {
                let Bson::String(unit) = v else {
                    return Err(parse_error(format!(
                        "unit' must be a string, but got {}",
                        type_name(v)
                    )));
                };
                let Some(ms) = TimeUnit::parse(unit)?.millis() else {
                    return Err(Error::new(
                        ErrorCode::WindowUnitTooLarge,
                        "unit must be 'week' or smaller",
                    ));
                };
                unit_ms = Some(ms);
            }
            other => {
                return Err(parse_error(format!(
                    "{name} got unexpected argument: {other}"
                )))
            }
        }
    }
    let input =
        input.ok_or_else(|| parse_error(format!("{name} requires an 'input' expression")))?;
    Ok((input, unit_ms))
}

fn parse_shift(spec: &Document, arg: &Bson, sort: &SortInfo<'_>) -> Result<Function> {
    for k in spec.keys() {
        if k == "window" {
            return Err(parse_error("$shift does not accept a 'window' field"));
        }
        if k != "$shift" {
            return Err(parse_error(format!(
                "Window function found an unknown argument: {k}"
            )));
        }
    }
    let Bson::Document(args) = arg else {
        return Err(parse_error("Argument to $shift must be an object"));
    };
    let (mut output, mut by, mut default) = (None, None, Bson::Null);
    for (k, v) in args {
        match k.as_str() {
            "output" => output = Some(Expr::parse(v)?),
            "default" => {
                let expr = Expr::parse(v)?;
                if !expr.is_constant() {
                    return Err(parse_error(
                        "'$shift:default' expression must yield a constant value.",
                    ));
                }
                default = expr.evaluate(&Document::new())?;
            }
            "by" => {
                let n = Number::of(v)
                    .and_then(Number::integral)
                    .filter(|n| i32::try_from(*n).is_ok());
                let Some(n) = n else {
                    return Err(parse_error(format!(
                        "'$shift:by' field must be an integer, but found  by: {v}"
                    )));
                };
                by = Some(n);
            }
            _ => return Err(parse_error("Unknown argument in $shift")),
        }
    }
    let output = output.ok_or_else(|| parse_error("$shift requires an 'output' expression."))?;
    let by = by.ok_or_else(|| parse_error("$shift requires 'by' as an integer value."))?;
    if sort.spec.is_none() {
        return Err(parse_error("'$shift' requires a sortBy"));
    }
    Ok(Function::Shift {
        output,
        by,
        default,
    })
}

fn parse_exp_moving_avg(spec: &Document, arg: &Bson, sort: &SortInfo<'_>) -> Result<Function> {
    let Bson::Document(args) = arg else {
        return Err(parse_error(
            "$expMovingAvg must have exactly one argument that is an object",
        ));
    };
    if spec.len() != 1 {
        return Err(parse_error(
            "$expMovingAvg must have exactly one argument that is an object",
        ));
    }
    let shape = "$expMovingAvg sub object must have exactly two fields: An 'input' field, and \
                 either an 'N' field or an 'alpha' field";
    let Some(input) = args.get("input").filter(|_| args.len() == 2) else {
        return Err(parse_error(shape));
    };
    if sort.spec.is_none() {
        return Err(parse_error("$expMovingAvg requires an explicit 'sortBy'"));
    }
    let input = Expr::parse(input)?;
    let alpha = if let Some(n) = args.get("N") {
        let Some(number) = Number::of(n) else {
            return Err(parse_error(format!(
                "'N' field must be an integer, but found type {}",
                type_name(n)
            )));
        };
        let Some(n) = number.integral() else {
            return Err(parse_error(format!(
                "'N' field must be an integer, but found  {n}. To use a non-integer, use the \
                 'alpha' argument instead"
            )));
        };
        if n <= 0 {
            return Err(parse_error(format!(
                "'N' must be greater than zero. Got {n}"
            )));
        }
        DecimalValue::from_i64(2)
            .div(&DecimalValue::from_i64(n.saturating_add(1)))
            .ok_or_else(|| parse_error("'N' is out of range"))?
    } else if let Some(alpha) = args.get("alpha") {
        let Some(number) = Number::of(alpha) else {
            return Err(parse_error("'alpha' must be a number"));
        };
        let a = number.to_decimal();
        let zero = DecimalValue::from_i64(0);
        let one = DecimalValue::from_i64(1);
        if a.compare(&zero) != Ordering::Greater || a.compare(&one) != Ordering::Less {
            return Err(parse_error(format!(
                "'alpha' must be between 0 and 1 (exclusive), found alpha: {alpha}"
            )));
        }
        a
    } else {
        return Err(parse_error(format!(
            "Got unrecognized field in $expMovingAvg{shape}"
        )));
    };
    Ok(Function::ExpMovingAvg { input, alpha })
}

fn parse_output(spec: &Document, sort: &SortInfo<'_>) -> Result<(Function, Window)> {
    let (name, arg) = function_of(spec)?;
    let fixed = Window::Documents(Bound::Unbounded, Bound::Current);
    Ok(match name {
        "$documentNumber" | "$rank" | "$denseRank" => {
            if spec.len() != 1 {
                return Err(Error::new(
                    ErrorCode::WindowRankTakesNoArguments,
                    "Rank style window functions take no other arguments",
                ));
            }
            if !matches!(arg, Bson::Document(d) if d.is_empty()) {
                return Err(Error::new(
                    ErrorCode::WindowRankArgumentNotEmpty,
                    format!("{name} must be specified with '{{}}' as the value"),
                ));
            }
            let Some((path, _)) = sort.single() else {
                return Err(Error::new(
                    ErrorCode::WindowRankNeedsOneSortField,
                    format!(
                        "{name} must be specified with a top level sortBy expression with \
                         exactly one element"
                    ),
                ));
            };
            let function = match name {
                "$documentNumber" => Function::DocumentNumber,
                _ => Function::Rank {
                    key: field_expr(path)?,
                    dense: name == "$denseRank",
                },
            };
            (function, fixed)
        }
        "$shift" => (parse_shift(spec, arg, sort)?, fixed),
        "$expMovingAvg" => (parse_exp_moving_avg(spec, arg, sort)?, fixed),
        "$locf" => {
            no_window(spec, name)?;
            (Function::Locf(Expr::parse(arg)?), fixed)
        }
        "$linearFill" => {
            no_window(spec, name)?;
            let Some((path, _)) = sort.single() else {
                return Err(Error::new(
                    ErrorCode::WindowLinearFillNeedsOneSortField,
                    "$linearFill must be specified with a top level sortBy expression with \
                     exactly one element",
                ));
            };
            let function = Function::LinearFill {
                input: Expr::parse(arg)?,
                time: field_expr(path)?,
            };
            (function, Window::UNBOUNDED)
        }
        "$derivative" | "$integral" => {
            let time = time_of(name, sort)?;
            let mut window = None;
            for (k, v) in spec {
                if k == "window" {
                    if window.is_some() {
                        return Err(parse_error(format!(
                            "There can be only one 'window' field for {name}"
                        )));
                    }
                    window = Some(parse_window(v, sort)?);
                } else if k != name {
                    return Err(parse_error(format!("{name} got unexpected argument: {k}")));
                }
            }
            let (input, unit_ms) = input_and_unit(name, arg)?;
            if name == "$derivative" {
                let Some(window) = window else {
                    return Err(parse_error("$derivative requires explicit window bounds"));
                };
                let function = Function::Derivative {
                    input,
                    time,
                    unit_ms,
                };
                (function, window)
            } else {
                let function = Function::Integral {
                    input,
                    time,
                    unit_ms,
                };
                (function, window.unwrap_or(Window::UNBOUNDED))
            }
        }
        "$covariancePop" | "$covarianceSamp" => {
            let window = window_argument(spec, name, sort)?;
            let function = Function::Covariance {
                input: Expr::parse(arg)?,
                sample: name == "$covarianceSamp",
            };
            (function, window)
        }
        _ => {
            let window = window_argument(spec, name, sort)?;
            let mut only = Document::new();
            only.insert(name, arg.clone());
            (
                Function::Accumulator(WindowAccumulator::parse(name, &only)?),
                window,
            )
        }
    })
}

/// Checks an `output` field name as a field path.
fn output_path(name: &str) -> Result<Vec<String>> {
    if name.is_empty() {
        return Err(Error::new(
            ErrorCode::EmptyFieldPath,
            "FieldPath cannot be constructed with empty string",
        ));
    }
    if name.starts_with('$') {
        return Err(Error::new(
            ErrorCode::FieldPathDollarPrefixed,
            format!("FieldPath field names may not start with '$'. Given FieldPath: {name}"),
        ));
    }
    let parts: Vec<String> = name.split('.').map(str::to_string).collect();
    if parts.iter().any(String::is_empty) {
        return Err(Error::new(
            ErrorCode::FieldPathEmptyComponent,
            "FieldPath field names may not be empty strings.",
        ));
    }
    Ok(parts)
}

/// How documents are assigned to partitions.
#[derive(Debug, Clone)]
enum Partitioning {
    /// One partition (no `partitionBy`, or a constant one).
    Whole,
    /// By a field path, sorted on directly.
    Field(String),
    /// By an expression, computed into [`PARTITION_KEY_FIELD`] first.
    Computed(Expr),
}

pub(super) fn parse_set_window_fields(arg: &Bson, ctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(parse_error(format!(
            "the $setWindowFields stage specification must be an object, found {}",
            type_name(arg)
        )));
    };
    let (mut partition_by, mut sort_by, mut output) = (None, None, None);
    for (k, v) in spec {
        let object = || match v {
            Bson::Document(d) => Ok(d),
            other => Err(Error::new(
                ErrorCode::TypeMismatch,
                format!(
                    "BSON field '$setWindowFields.{k}' is the wrong type '{}', expected type \
                     'object'",
                    type_name(other)
                ),
            )),
        };
        match k.as_str() {
            "partitionBy" => partition_by = Some(v),
            "sortBy" => sort_by = Some(object()?),
            "output" => output = Some(object()?),
            _ => {
                return Err(Error::new(
                    ErrorCode::UnknownField,
                    format!("BSON field '$setWindowFields.{k}' is an unknown field."),
                ))
            }
        }
    }
    let Some(output) = output else {
        return Err(Error::new(
            ErrorCode::MissingField,
            "BSON field '$setWindowFields.output' is missing but a required field",
        ));
    };
    let sort_spec = sort_by.map(SortSpec::parse).transpose()?;
    let partitioning = match partition_by {
        None => Partitioning::Whole,
        Some(Bson::String(s)) if s.starts_with('$') && !s.starts_with("$$") => {
            Partitioning::Field(s[1..].to_string())
        }
        Some(value) => {
            let expr = Expr::parse(value)?;
            if expr.is_constant() {
                if let Bson::Array(_) =
                    eval(&expr, &Document::new(), &ctx.vars)?.unwrap_or(Bson::Null)
                {
                    return Err(Error::type_mismatch(
                        "An expression used to partition cannot evaluate to value of type array",
                    ));
                }
                Partitioning::Whole
            } else {
                Partitioning::Computed(expr)
            }
        }
    };
    let sort = SortInfo {
        spec: sort_spec.as_ref(),
    };
    let mut outputs: Vec<Output> = Vec::with_capacity(output.len());
    for (name, value) in output {
        let path = output_path(name)?;
        let conflict = outputs.iter().any(|o| {
            let n = o.path.len().min(path.len());
            o.path[..n] == path[..n]
        });
        if conflict {
            return Err(Error::new(
                ErrorCode::WindowOutputPathsConflict,
                "$setWindowFields 'output' specification contains two conflicting paths",
            ));
        }
        let Bson::Document(fspec) = value else {
            return Err(parse_error(format!("The field '{name}' must be an object")));
        };
        let (function, window) = parse_output(fspec, &sort)?;
        let sort_time = match sort.single() {
            Some((path, _)) => Some(field_expr(path)?),
            None => None,
        };
        outputs.push(Output {
            path,
            function,
            window,
            sort_time,
        });
    }
    // The sort MongoDB puts before the computation: the partition key,
    // then `sortBy` without the partition key.
    let mut order = Document::new();
    let key_path = match &partitioning {
        Partitioning::Whole => None,
        Partitioning::Field(path) => Some(path.clone()),
        Partitioning::Computed(_) => Some(PARTITION_KEY_FIELD.to_string()),
    };
    if let Some(path) = &key_path {
        order.insert(path.clone(), 1);
    }
    if let Some(spec) = &sort_spec {
        for f in spec.fields() {
            if key_path.as_deref() != Some(f.path()) {
                order.insert(f.path(), if f.ascending() { 1 } else { -1 });
            }
        }
    }
    let order = if order.is_empty() {
        None
    } else {
        Some(SortSpec::parse(&order)?)
    };
    let key = match &partitioning {
        Partitioning::Whole => None,
        Partitioning::Field(path) => Some(field_expr(path)?),
        Partitioning::Computed(_) => Some(field_expr(PARTITION_KEY_FIELD)?),
    };
    Ok(Box::new(SetWindowFields {
        partitioning,
        order,
        compute: Arc::new(Compute {
            key,
            outputs: Arc::new(outputs),
            vars: Arc::new(ctx.vars.clone()),
        }),
        vars: Arc::new(ctx.vars.clone()),
        spec: spec.clone(),
    }))
}

// ---------------------------------------------------------------------------
// The stage and its parts

struct SetWindowFields {
    partitioning: Partitioning,
    /// The sort before the computation, if any.
    order: Option<SortSpec>,
    compute: Arc<Compute>,
    vars: Arc<Document>,
    spec: Document,
}

impl SetWindowFields {
    /// The part before the computation: the computed key, the sort.
    fn before(&self) -> Vec<Box<dyn Stage>> {
        let mut stages: Vec<Box<dyn Stage>> = Vec::new();
        if let Partitioning::Computed(expr) = &self.partitioning {
            stages.push(Box::new(PartitionKey {
                expr: expr.clone(),
                vars: self.vars.clone(),
            }));
        }
        if let Some(order) = &self.order {
            stages.push(sort(order.clone()));
        }
        stages
    }
}

impl Stage for SetWindowFields {
    fn name(&self) -> &'static str {
        "$setWindowFields"
    }
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let mut stream = input;
        for stage in self.before() {
            stream = stage.apply(stream, ctx)?;
        }
        self.compute.apply(stream, ctx)
    }
    fn split(&self) -> Split {
        let Some(order) = &self.order else {
            return Split::RouterOnly;
        };
        Split::Blocking {
            partition: Box::new(Chain {
                name: "$setWindowFields",
                stages: self.before(),
                spec: doc! {"$sort": {"sortKey": sort_key_document(order)}},
            }),
            router: Some(Box::new(ComputeStage(self.compute.clone()))),
            merge_sort: Some(order.clone()),
        }
    }
    fn explain(&self) -> Document {
        doc! {"$setWindowFields": self.spec.clone()}
    }
}

fn sort_key_document(spec: &SortSpec) -> Document {
    let mut d = Document::new();
    for f in spec.fields() {
        d.insert(f.path(), if f.ascending() { 1 } else { -1 });
    }
    d
}

/// Sets [`PARTITION_KEY_FIELD`] to the `partitionBy` expression's value.
struct PartitionKey {
    expr: Expr,
    vars: Arc<Document>,
}

impl Stage for PartitionKey {
    fn name(&self) -> &'static str {
        "$setWindowFields"
    }
    fn apply(&self, input: DocStream, _: &Arc<dyn Context>) -> Result<DocStream> {
        let expr = self.expr.clone();
        let vars = self.vars.clone();
        Ok(Box::new(input.map(move |d| {
            let mut d = d?;
            if let Some(v) = eval(&expr, &d, &vars)? {
                d.insert(PARTITION_KEY_FIELD, v);
            }
            Ok(d)
        })))
    }
    fn split(&self) -> Split {
        Split::Streaming
    }
    fn explain(&self) -> Document {
        doc! {"$set": {PARTITION_KEY_FIELD: "<partitionBy>"}}
    }
}

/// The window computation over sorted input.
struct Compute {
    /// The partition key of a document (`None`: one partition).
    key: Option<Expr>,
    outputs: Arc<Vec<Output>>,
    vars: Arc<Document>,
}

impl Compute {
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        Ok(Box::new(Windows {
            cache: Cache::new(
                input,
                self.key.clone(),
                self.vars.clone(),
                ctx.limits().clone(),
            ),
            outputs: self.outputs.clone(),
            states: Vec::new(),
            vars: self.vars.clone(),
            current: 0,
            started: false,
            done: false,
        }))
    }
}

/// The computation as the router runs it after merging sorted partitions.
struct ComputeStage(Arc<Compute>);

impl Stage for ComputeStage {
    fn name(&self) -> &'static str {
        "$setWindowFields"
    }
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        self.0.apply(input, ctx)
    }
    fn split(&self) -> Split {
        Split::RouterOnly
    }
    fn explain(&self) -> Document {
        doc! {"$_internalSetWindowFields": {"output": self.0.outputs.len() as i64}}
    }
}

// ---------------------------------------------------------------------------
// The partition cache

/// Distinguishes this process's window spill files.
static NEXT_FILE: AtomicU64 = AtomicU64::new(0);

/// Documents of a partition moved to a file, read back by offset.
struct Spilled {
    file: File,
    path: PathBuf,
    /// Where each document starts; the first is document `base`.
    offsets: Vec<u64>,
    base: usize,
    len: u64,
}

impl Drop for Spilled {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn io_error(e: std::io::Error) -> Error {
    Error::internal(format!("window spill file: {e}"))
}

impl Spilled {
    fn create(dir: &std::path::Path, base: usize) -> Result<Spilled> {
        std::fs::create_dir_all(dir).map_err(io_error)?;
        let n = NEXT_FILE.fetch_add(1, AtomicOrdering::Relaxed);
        let path = dir.join(format!("window-{}-{n}.bson", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_error)?;
        Ok(Spilled {
            file,
            path,
            offsets: Vec::new(),
            base,
            len: 0,
        })
    }

    fn end(&self) -> usize {
        self.base + self.offsets.len()
    }

    fn append(&mut self, docs: impl Iterator<Item = Document>) -> Result<()> {
        (&self.file).seek(SeekFrom::End(0)).map_err(io_error)?;
        let mut out = BufWriter::new(&self.file);
        for d in docs {
            let mut bytes = Vec::new();
            d.to_writer(&mut bytes)
                .map_err(|e| Error::internal(format!("window spill file: {e}")))?;
            out.write_all(&bytes).map_err(io_error)?;
            self.offsets.push(self.len);
            self.len += bytes.len() as u64;
        }
        out.flush().map_err(io_error)
    }

    fn read(&self, index: usize) -> Result<Document> {
        let Some(&offset) = index
            .checked_sub(self.base)
            .and_then(|i| self.offsets.get(i))
        else {
            return Err(Error::internal("window spill file: document not spilled"));
        };
        let mut file = &self.file;
        file.seek(SeekFrom::Start(offset)).map_err(io_error)?;
        Document::from_reader(&mut file)
            .map_err(|e| Error::internal(format!("window spill file: {e}")))
    }
}

/// The documents of the current partition that some window still needs,
/// read from the input on demand.
struct Cache {
    input: DocStream,
    key: Option<Expr>,
    vars: Arc<Document>,
    limits: Limits,
    /// The first document of the next partition and its key, read ahead.
    next: Option<(Document, Bson)>,
    input_done: bool,
    /// The current partition's key.
    current_key: Bson,
    /// No more documents in the current partition.
    ended: bool,
    /// Documents `mem_base..` of the partition.
    mem: VecDeque<Document>,
    mem_base: usize,
    bytes: usize,
    spilled: Option<Spilled>,
}

impl Cache {
    fn new(input: DocStream, key: Option<Expr>, vars: Arc<Document>, limits: Limits) -> Cache {
        Cache {
            input,
            key,
            vars,
            limits,
            next: None,
            input_done: false,
            current_key: Bson::Null,
            ended: true,
            mem: VecDeque::new(),
            mem_base: 0,
            bytes: 0,
            spilled: None,
        }
    }

    /// The number of documents of the partition read so far.
    fn end(&self) -> usize {
        self.mem_base + self.mem.len()
    }

    fn key_of(&self, doc: &Document) -> Result<Bson> {
        let Some(expr) = &self.key else {
            return Ok(Bson::Null);
        };
        // Missing and null are one partition, as they sort together.
        match eval(expr, doc, &self.vars)?.unwrap_or(Bson::Null) {
            Bson::Array(_) => Err(Error::type_mismatch(
                "Cannot 'partitionBy' an expression of type array",
            )),
            key => Ok(key),
        }
    }

    fn read_input(&mut self) -> Result<Option<(Document, Bson)>> {
        if self.input_done {
            return Ok(None);
        }
        match self.input.next() {
            None => {
                self.input_done = true;
                Ok(None)
            }
            Some(d) => {
                let d = d?;
                let key = self.key_of(&d)?;
                Ok(Some((d, key)))
            }
        }
    }

    /// Starts the next partition; false at the end of the input.
    fn next_partition(&mut self) -> Result<bool> {
        self.mem.clear();
        self.mem_base = 0;
        self.bytes = 0;
        self.spilled = None;
        let first = match self.next.take() {
            Some(first) => Some(first),
            None => self.read_input()?,
        };
        let Some((doc, key)) = first else {
            self.ended = true;
            return Ok(false);
        };
        self.current_key = key;
        self.ended = false;
        self.push(doc)?;
        Ok(true)
    }

    fn push(&mut self, doc: Document) -> Result<()> {
        self.bytes += doc_size(&doc);
        self.mem.push_back(doc);
        if self.bytes > self.limits.max_blocking_bytes {
            if !self.limits.allow_disk_use {
                return Err(Error::new(
                    ErrorCode::WindowCacheExceededMemory,
                    "Exceeded max memory. Set 'allowDiskUse: true' to spill to disk",
                ));
            }
            let spilled = match self.spilled.take() {
                Some(s) => s,
                None => Spilled::create(&self.limits.spill_dir, self.mem_base)?,
            };
            let mut spilled = spilled;
            if spilled.end() != self.mem_base {
                // Documents were freed since the last spill: start afresh.
                spilled = Spilled::create(&self.limits.spill_dir, self.mem_base)?;
            }
            spilled.append(self.mem.drain(..))?;
            self.mem_base = spilled.end();
            self.bytes = 0;
            self.spilled = Some(spilled);
        }
        Ok(())
    }

    /// Reads until document `index` of the partition is present; false
    /// when the partition ends first.
    fn ensure(&mut self, index: usize) -> Result<bool> {
        while self.end() <= index {
            if self.ended {
                return Ok(false);
            }
            match self.read_input()? {
                None => self.ended = true,
                Some((doc, key)) => {
                    if compare(&key, &self.current_key) != Ordering::Equal {
                        self.next = Some((doc, key));
                        self.ended = true;
                    } else {
                        self.push(doc)?;
                    }
                }
            }
        }
        Ok(true)
    }

    /// Reads the whole partition; its last index.
    fn ensure_all(&mut self) -> Result<usize> {
        while self.ensure(self.end())? {}
        Ok(self.end().saturating_sub(1))
    }

    /// Document `index`, which [`Cache::ensure`] must have read.
    fn get(&self, index: usize) -> Result<Cow<'_, Document>> {
        if index >= self.mem_base {
            return self
                .mem
                .get(index - self.mem_base)
                .map(Cow::Borrowed)
                .ok_or_else(|| Error::internal("window document not read yet"));
        }
        match &self.spilled {
            Some(s) if index >= s.base && index < s.end() => Ok(Cow::Owned(s.read(index)?)),
            _ => Err(Error::internal("window document already released")),
        }
    }

    /// Releases the documents before `index` held in memory.
    fn release_before(&mut self, index: usize) {
        while self.mem_base < index {
            let Some(d) = self.mem.pop_front() else {
                break;
            };
            self.bytes = self.bytes.saturating_sub(doc_size(&d));
            self.mem_base += 1;
        }
    }
}

// ---------------------------------------------------------------------------
// Computing

/// What one output keeps from one document of its partition to the next.
#[derive(Default)]
struct OutputState {
    /// A window open to the left: the running aggregate and the first
    /// document not yet in it.
    running: Option<Aggregate>,
    added: usize,
    /// Where the next range window's lower and upper scans start.
    lower_hint: usize,
    upper_hint: usize,
    /// A range window open to the left has found its first document.
    lower_known: bool,
    /// `$rank`: the last key, its rank and how many share it; `$denseRank`.
    last_key: Option<Bson>,
    rank: i64,
    same: i64,
    /// `$expMovingAvg`: the average so far and whether any input was a decimal.
    average: Option<DecimalValue>,
    decimal: bool,
    /// `$locf`: the last non-null value.
    last_value: Option<Bson>,
    /// `$linearFill`: the last sort value, the last known point and the next.
    last_time: Option<Bson>,
    before: Option<(Bson, Bson)>,
    after: Option<(Bson, Bson)>,
}

/// The running aggregate of a window.
#[derive(Clone)]
enum Aggregate {
    Accumulator(Box<WindowState>),
    Integral(Box<IntegralState>),
    Covariance {
        n: f64,
        mean_x: f64,
        mean_y: f64,
        c: f64,
    },
}

/// `$integral`'s points so far, the last of them, the area and whether
/// any point was NaN.
#[derive(Clone)]
struct IntegralState {
    points: usize,
    previous: Option<(Bson, Bson)>,
    sum: Bson,
    nan: bool,
}

/// `$add`, `$subtract`, `$multiply`, `$divide` with the expression
/// language's own types and errors.
fn arith(op: &str, a: &Bson, b: &Bson) -> Result<Bson> {
    let mut d = Document::new();
    d.insert(
        op,
        vec![
            Bson::Document(doc! {"$literal": a.clone()}),
            Bson::Document(doc! {"$literal": b.clone()}),
        ],
    );
    Expr::parse(&Bson::Document(d))?.evaluate(&Document::new())
}

fn is_nullish(v: &Option<Bson>) -> bool {
    matches!(v, None | Some(Bson::Null) | Some(Bson::Undefined))
}

impl Aggregate {
    fn start(function: &Function) -> Aggregate {
        match function {
            Function::Accumulator(acc) => Aggregate::Accumulator(Box::new(acc.start())),
            Function::Integral { .. } => Aggregate::Integral(Box::new(IntegralState {
                points: 0,
                previous: None,
                sum: Bson::Int32(0),
                nan: false,
            })),
            _ => Aggregate::Covariance {
                n: 0.0,
                mean_x: 0.0,
                mean_y: 0.0,
                c: 0.0,
            },
        }
    }

    fn add(&mut self, function: &Function, doc: &Document, vars: &Document) -> Result<()> {
        match (self, function) {
            (Aggregate::Accumulator(state), Function::Accumulator(acc)) => {
                acc.add(state, doc, vars)
            }
            (
                Aggregate::Integral(integral),
                Function::Integral {
                    input,
                    time,
                    unit_ms,
                },
            ) => {
                let IntegralState {
                    points,
                    previous,
                    sum,
                    nan,
                } = &mut **integral;
                let x = eval(time, doc, vars)?.unwrap_or(Bson::Null);
                let y = eval(input, doc, vars)?.unwrap_or(Bson::Null);
                let x_ok = Number::of(&x).is_some() || matches!(x, Bson::DateTime(_));
                if Number::of(&y).is_none() || !x_ok {
                    return Err(Error::new(
                        ErrorCode::WindowIntegralInputInvalid,
                        "The input value of $integral window function must be a vector of 2 \
                         value, the first value must be numeric or date type and the second \
                         must be numeric.",
                    ));
                }
                if unit_ms.is_some() && !matches!(x, Bson::DateTime(_)) {
                    return Err(Error::new(
                        ErrorCode::WindowIntegralUnitNeedsDate,
                        "$integral with 'outputUnit' expects the sortBy field to be a Date",
                    ));
                }
                if unit_ms.is_none() && Number::of(&x).is_none() {
                    return Err(Error::new(
                        ErrorCode::WindowIntegralNeedsNumber,
                        "$integral (with no 'outputUnit') expects the sortBy field to be numeric",
                    ));
                }
                if is_nan(&x) || is_nan(&y) {
                    *nan = true;
                }
                if let Some((px, py)) = previous.take() {
                    if !(is_nan(&px) || is_nan(&py) || is_nan(&x) || is_nan(&y)) {
                        let delta = arith("$subtract", &x, &px)?;
                        let height = arith("$add", &y, &py)?;
                        let area = arith("$multiply", &height, &delta)?;
                        let area = arith("$divide", &area, &Bson::Double(2.0))?;
                        *sum = arith("$add", sum, &area)?;
                    }
                }
                *previous = Some((x, y));
                *points += 1;
                Ok(())
            }
            (
                Aggregate::Covariance {
                    n,
                    mean_x,
                    mean_y,
                    c,
                },
                Function::Covariance { input, .. },
            ) => {
                let value = eval(input, doc, vars)?;
                let Some(Bson::Array(pair)) = value else {
                    return Ok(());
                };
                let (Some(x), Some(y)) = (
                    pair.first().and_then(Number::of),
                    pair.get(1).and_then(Number::of),
                ) else {
                    return Ok(());
                };
                if pair.len() != 2 {
                    return Ok(());
                }
                let (x, y) = (x.to_f64(), y.to_f64());
                *n += 1.0;
                let dx = x - *mean_x;
                *mean_x += dx / *n;
                *mean_y += (y - *mean_y) / *n;
                *c += dx * (y - *mean_y);
                Ok(())
            }
            _ => Err(Error::internal("window aggregate of another function")),
        }
    }

    fn value(&self, function: &Function) -> Result<Bson> {
        Ok(match (self, function) {
            (Aggregate::Accumulator(state), Function::Accumulator(acc)) => acc.value(state)?,
            (Aggregate::Integral(integral), Function::Integral { unit_ms, .. }) => {
                let IntegralState {
                    points, sum, nan, ..
                } = &**integral;
                if *points == 0 {
                    Bson::Null
                } else if *nan {
                    Bson::Double(f64::NAN)
                } else if let Some(ms) = unit_ms {
                    arith("$divide", sum, &Bson::Int64(*ms))?
                } else {
                    sum.clone()
                }
            }
            (Aggregate::Covariance { n, c, .. }, Function::Covariance { sample, .. }) => {
                let d = if *sample { *n - 1.0 } else { *n };
                if *n == 0.0 || d <= 0.0 {
                    Bson::Null
                } else {
                    Bson::Double(*c / d)
                }
            }
            _ => Bson::Null,
        })
    }
}

/// The iterator over the stage's output.
struct Windows {
    cache: Cache,
    outputs: Arc<Vec<Output>>,
    states: Vec<OutputState>,
    vars: Arc<Document>,
    /// The index of the next document to emit within its partition.
    current: usize,
    started: bool,
    done: bool,
}

impl Iterator for Windows {
    type Item = Result<Document>;
    fn next(&mut self) -> Option<Result<Document>> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(d)) => Some(Ok(d)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Sets `path` in `doc`, making documents on the way; a missing value
/// removes the field.
fn set_path(doc: &mut Document, path: &[String], value: Option<Bson>) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        match value {
            Some(v) => {
                doc.insert(first.clone(), v);
            }
            None => {
                doc.remove(first);
            }
        }
        return;
    }
    if !matches!(doc.get(first), Some(Bson::Document(_))) {
        if value.is_none() {
            return;
        }
        doc.insert(first.clone(), Document::new());
    }
    if let Some(Bson::Document(sub)) = doc.get_mut(first) {
        set_path(sub, rest, value);
    }
}

impl Windows {
    fn step(&mut self) -> Result<Option<Document>> {
        if !self.started || !self.cache.ensure(self.current)? {
            if !self.cache.next_partition()? {
                return Ok(None);
            }
            self.started = true;
            self.current = 0;
            self.states = self
                .outputs
                .iter()
                .map(|_| OutputState::default())
                .collect();
        }
        let i = self.current;
        let outputs = self.outputs.clone();
        let mut values = Vec::with_capacity(outputs.len());
        let mut keep_from = i;
        for (o, output) in outputs.iter().enumerate() {
            let Some(state) = self.states.get_mut(o) else {
                return Err(Error::internal("window state missing"));
            };
            let (value, needed) = compute(output, state, &mut self.cache, i, &self.vars)?;
            keep_from = keep_from.min(needed);
            values.push(value);
        }
        let mut doc = self.cache.get(i)?.into_owned();
        for (output, value) in outputs.iter().zip(values) {
            set_path(&mut doc, &output.path, value);
        }
        doc.remove(PARTITION_KEY_FIELD);
        self.current = i + 1;
        self.cache.release_before(keep_from.min(self.current));
        Ok(Some(doc))
    }
}

/// The value of `output` for document `i`, and the first document it
/// still needs for the documents after `i`.
fn compute(
    output: &Output,
    state: &mut OutputState,
    cache: &mut Cache,
    i: usize,
    vars: &Document,
) -> Result<(Option<Bson>, usize)> {
    let next = i + 1;
    match &output.function {
        Function::DocumentNumber => Ok((Some(int_or_long(next as i64)), next)),
        Function::Rank { key, dense } => {
            let doc = cache.get(i)?;
            let value = eval(key, &doc, vars)?.unwrap_or(Bson::Null);
            let same = state
                .last_key
                .as_ref()
                .is_some_and(|last| compare(last, &value) == Ordering::Equal);
            if !same {
                if *dense {
                    state.rank += 1;
                } else {
                    state.rank += state.same.max(if state.last_key.is_none() { 1 } else { 0 });
                    state.same = 0;
                }
                state.last_key = Some(value);
            }
            state.same += 1;
            Ok((Some(int_or_long(state.rank)), next))
        }
        Function::Shift {
            output: expr,
            by,
            default,
        } => {
            let target = i as i64 + by;
            let needed = if *by < 0 {
                usize::try_from(next as i64 + by).unwrap_or(0)
            } else {
                next
            };
            let Ok(target) = usize::try_from(target) else {
                return Ok((Some(default.clone()), needed));
            };
            if !cache.ensure(target)? {
                return Ok((Some(default.clone()), needed));
            }
            let doc = cache.get(target)?;
            Ok((eval(expr, &doc, vars)?, needed))
        }
        Function::ExpMovingAvg { input, alpha } => {
            let doc = cache.get(i)?;
            if let Some(value) = eval(input, &doc, vars)? {
                if let Some(n) = Number::of(&value) {
                    if matches!(n, Number::Decimal(_)) {
                        state.decimal = true;
                    }
                    let x = n.to_decimal();
                    state.average = Some(match &state.average {
                        None => x,
                        Some(avg) => {
                            let one_minus = DecimalValue::from_i64(1).sub(alpha);
                            x.mul(alpha).add(&avg.mul(&one_minus))
                        }
                    });
                }
            }
            let value = match &state.average {
                None => Bson::Null,
                Some(avg) if state.decimal => Bson::Decimal128(avg.to_decimal128()),
                Some(avg) => Bson::Double(avg.to_f64()),
            };
            Ok((Some(value), next))
        }
        Function::Locf(input) => {
            let doc = cache.get(i)?;
            let value = eval(input, &doc, vars)?;
            if !is_nullish(&value) {
                state.last_value = value;
            }
            Ok((Some(state.last_value.clone().unwrap_or(Bson::Null)), next))
        }
        Function::LinearFill { input, time } => {
            linear_fill(input, time, state, cache, i, vars).map(|v| (Some(v), next))
        }
        Function::Derivative {
            input,
            time,
            unit_ms,
        } => {
            let ends = endpoints(output, state, cache, i, vars)?;
            let needed = lower_needed(&output.window, state, next);
            let Some((lo, hi)) = ends else {
                return Ok((Some(Bson::Null), needed));
            };
            let (left, right) = (cache.get(lo)?.into_owned(), cache.get(hi)?.into_owned());
            derivative(input, time, *unit_ms, &left, &right, vars).map(|v| (Some(v), needed))
        }
        Function::Accumulator(_) | Function::Integral { .. } | Function::Covariance { .. } => {
            let ends = endpoints(output, state, cache, i, vars)?;
            if output.runs_from_left() {
                let running = state
                    .running
                    .get_or_insert_with(|| Aggregate::start(&output.function));
                let Some((lo, hi)) = ends else {
                    let empty = Aggregate::start(&output.function);
                    return Ok((Some(empty.value(&output.function)?), state.added));
                };
                let from = state.added.max(lo);
                for j in from..=hi {
                    let doc = cache.get(j)?;
                    running.add(&output.function, &doc, vars)?;
                }
                state.added = state.added.max(hi + 1);
                let value = running.value(&output.function)?;
                return Ok((Some(value), state.added));
            }
            let needed = lower_needed(&output.window, state, next);
            let mut aggregate = Aggregate::start(&output.function);
            if let Some((lo, hi)) = ends {
                for j in lo..=hi {
                    let doc = cache.get(j)?;
                    aggregate.add(&output.function, &doc, vars)?;
                }
            }
            Ok((Some(aggregate.value(&output.function)?), needed))
        }
    }
}

fn int_or_long(n: i64) -> Bson {
    i32::try_from(n).map_or(Bson::Int64(n), Bson::Int32)
}

/// The first document a window may still need for the documents after
/// the current one.
fn lower_needed(window: &Window, state: &OutputState, next: usize) -> usize {
    match window {
        Window::Documents(lower, _) => match lower {
            Bound::Unbounded => 0,
            Bound::Current => next,
            Bound::At(k) => usize::try_from(next as i64 + k).unwrap_or(0),
        },
        Window::Range { .. } => state.lower_hint,
    }
}

/// The first and last document of document `i`'s window, `None` when it
/// is empty. Reads the input as far as the window reaches.
fn endpoints(
    output: &Output,
    state: &mut OutputState,
    cache: &mut Cache,
    i: usize,
    vars: &Document,
) -> Result<Option<(usize, usize)>> {
    match &output.window {
        Window::Documents(lower, upper) => {
            let i = i as i64;
            let lo = match lower {
                Bound::Unbounded => 0,
                Bound::Current => i,
                Bound::At(k) => i + k,
            };
            let last = match upper {
                Bound::Unbounded => cache.ensure_all()? as i64,
                Bound::Current => i,
                Bound::At(k) => {
                    let hi = i + k;
                    if hi < 0 {
                        return Ok(None);
                    }
                    cache.ensure(hi as usize)?;
                    hi.min(cache.end() as i64 - 1)
                }
            };
            let lo = lo.max(0);
            if lo > last {
                return Ok(None);
            }
            Ok(Some((lo as usize, last as usize)))
        }
        Window::Range { lower, upper, unit } => {
            // Range windows are parsed only with one `sortBy` field.
            let Some(time) = &output.sort_time else {
                return Err(Error::internal("range window without a sortBy field"));
            };
            range_endpoints(lower, upper, *unit, time, state, cache, i, vars)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn range_endpoints(
    lower: &Bound<Bson>,
    upper: &Bound<Bson>,
    unit: Option<TimeUnit>,
    time: &Expr,
    state: &mut OutputState,
    cache: &mut Cache,
    i: usize,
    vars: &Document,
) -> Result<Option<(usize, usize)>> {
    let value_at = |cache: &Cache, j: usize| -> Result<Bson> {
        Ok(eval(time, &*cache.get(j)?, vars)?.unwrap_or(Bson::Null))
    };
    let base = value_at(cache, i)?;
    match unit {
        Some(_) if !matches!(base, Bson::DateTime(_)) => {
            return Err(Error::new(
                ErrorCode::WindowRangeUnitNeedsDate,
                format!(
                    "Invalid range: Expected the sortBy field to be a Date, but it was {}",
                    type_name(&base)
                ),
            ))
        }
        None if matches!(base, Bson::DateTime(_)) => {
            return Err(Error::new(
                ErrorCode::WindowRangeDateNeedsUnit,
                "Invalid range: For windows that involve date or time ranges, a unit must be \
                 provided.",
            ))
        }
        None if Number::of(&base).is_none() => {
            return Err(Error::new(
                ErrorCode::WindowRangeNeedsNumber,
                format!(
                    "Invalid range: Expected the sortBy field to be a number, but it was {}",
                    type_name(&base)
                ),
            ))
        }
        _ => {}
    }
    let expected = |v: &Bson| match unit {
        Some(_) => matches!(v, Bson::DateTime(_)),
        None => Number::of(v).is_some(),
    };
    let shifted = |delta: &Bson| -> Result<Bson> {
        match (unit, &base) {
            (Some(unit), Bson::DateTime(d)) => {
                let amount = Number::of(delta).and_then(Number::integral).unwrap_or(0);
                unit.add(d.timestamp_millis(), amount)
                    .map(|ms| Bson::DateTime(bson::DateTime::from_millis(ms)))
                    .ok_or_else(|| Error::bad_value("window bound is out of the range of dates"))
            }
            _ => {
                let (Some(b), Some(d)) = (Number::of(&base), Number::of(delta)) else {
                    return Err(Error::internal("range bound is not a number"));
                };
                Ok(Bson::Decimal128(
                    b.to_decimal().add(&d.to_decimal()).to_decimal128(),
                ))
            }
        }
    };
    let lo = match lower {
        Bound::Current => i,
        Bound::Unbounded if state.lower_known => state.lower_hint,
        Bound::Unbounded => {
            let mut j = state.lower_hint;
            loop {
                if !cache.ensure(j)? {
                    state.lower_hint = j;
                    return Ok(None);
                }
                if expected(&value_at(cache, j)?) {
                    state.lower_known = true;
                    break j;
                }
                j += 1;
            }
        }
        Bound::At(delta) => {
            let threshold = shifted(delta)?;
            let mut j = state.lower_hint;
            loop {
                if !cache.ensure(j)? {
                    state.lower_hint = j;
                    return Ok(None);
                }
                let v = value_at(cache, j)?;
                if compare(&v, &threshold) != Ordering::Less {
                    state.lower_hint = j;
                    if !expected(&v) {
                        return Ok(None);
                    }
                    break j;
                }
                j += 1;
            }
        }
    };
    if matches!(lower, Bound::Unbounded) {
        state.lower_hint = lo;
    }
    let start = lo.max(state.upper_hint);
    let hi = match upper {
        Bound::Current => i,
        Bound::Unbounded => {
            let mut j = start.max(i);
            loop {
                if !cache.ensure(j)? || !expected(&value_at(cache, j)?) {
                    break j - 1;
                }
                j += 1;
            }
        }
        Bound::At(delta) => {
            let threshold = shifted(delta)?;
            let mut j = start;
            loop {
                if !cache.ensure(j)? {
                    break j.saturating_sub(1);
                }
                if compare(&threshold, &value_at(cache, j)?) == Ordering::Less {
                    if j == start {
                        return Ok(None);
                    }
                    break j - 1;
                }
                j += 1;
            }
        }
    };
    state.upper_hint = hi;
    if hi < lo {
        return Ok(None);
    }
    Ok(Some((lo, hi)))
}

fn derivative(
    input: &Expr,
    time: &Expr,
    unit_ms: Option<i64>,
    left: &Document,
    right: &Document,
    vars: &Document,
) -> Result<Bson> {
    let left_time = eval(time, left, vars)?.unwrap_or(Bson::Null);
    let right_time = eval(time, right, vars)?.unwrap_or(Bson::Null);
    let dates = matches!(left_time, Bson::DateTime(_)) && matches!(right_time, Bson::DateTime(_));
    if unit_ms.is_some() {
        if !dates {
            return Err(Error::new(
                ErrorCode::WindowDerivativeUnitNeedsDate,
                "$derivative with 'unit' expects the sortBy field to be a Date",
            ));
        }
    } else {
        if matches!(left_time, Bson::DateTime(_)) || matches!(right_time, Bson::DateTime(_)) {
            return Err(Error::new(
                ErrorCode::WindowDerivativeDateNeedsUnit,
                "$derivative where the sortBy is a Date requires an 'unit'",
            ));
        }
        if Number::of(&left_time).is_none() || Number::of(&right_time).is_none() {
            return Err(Error::new(
                ErrorCode::WindowDerivativeNeedsNumber,
                "$derivative (with no 'unit') expects the sortBy field to be numeric",
            ));
        }
    }
    let run = arith("$subtract", &right_time, &left_time)?;
    let right_value = eval(input, right, vars)?.unwrap_or(Bson::Null);
    let left_value = eval(input, left, vars)?.unwrap_or(Bson::Null);
    let rise = arith("$subtract", &right_value, &left_value)?;
    if matches!(rise, Bson::Null | Bson::Undefined) {
        return Err(Error::new(
            ErrorCode::WindowDerivativeInputNullish,
            "$derivative input must not be null or missing",
        ));
    }
    if Number::of(&run).is_some_and(Number::is_zero) {
        return Ok(Bson::Null);
    }
    let result = arith("$divide", &rise, &run)?;
    match unit_ms {
        Some(ms) => arith("$multiply", &result, &Bson::Int64(ms)),
        None => Ok(result),
    }
}

fn linear_fill(
    input: &Expr,
    time: &Expr,
    state: &mut OutputState,
    cache: &mut Cache,
    i: usize,
    vars: &Document,
) -> Result<Bson> {
    let (value, x) = {
        let doc = cache.get(i)?;
        (
            eval(input, &doc, vars)?.unwrap_or(Bson::Null),
            eval(time, &doc, vars)?.unwrap_or(Bson::Null),
        )
    };
    let nullish = matches!(value, Bson::Null | Bson::Undefined);
    if Number::of(&value).is_none() && !nullish {
        return Err(Error::type_mismatch(format!(
            "Value to be filled must be numeric or nullish, but found {}",
            type_name(&value)
        )));
    }
    let date_like = |v: &Bson| {
        matches!(
            v,
            Bson::DateTime(_) | Bson::Timestamp(_) | Bson::ObjectId(_)
        )
    };
    if Number::of(&x).is_none() && !date_like(&x) {
        return Err(Error::type_mismatch(format!(
            "Value of the sortBy field must be numeric or a date, but found {}",
            type_name(&x)
        )));
    }
    if let Some(last) = &state.last_time {
        if compare(last, &x) == Ordering::Equal {
            return Err(Error::new(
                ErrorCode::WindowLinearFillRepeatedSortValue,
                "There can be no repeated values in the sort field",
            ));
        }
        let same_kind = (date_like(last) && date_like(&x))
            || (Number::of(last).is_some() && Number::of(&x).is_some());
        if !same_kind {
            return Err(Error::type_mismatch(format!(
                "Conflicting sort value types, previously received type {}, but found {}",
                type_name(last),
                type_name(&x)
            )));
        }
    }
    state.last_time = Some(x.clone());
    if !nullish {
        state.before = state.after.take().or(Some((x, value.clone())));
        return Ok(value);
    }
    let Some((x1, y1)) = state.before.clone() else {
        return Ok(Bson::Null);
    };
    if state.after.is_none() {
        let mut j = i + 1;
        while cache.ensure(j)? {
            let doc = cache.get(j)?;
            let y = eval(input, &doc, vars)?.unwrap_or(Bson::Null);
            if !matches!(y, Bson::Null | Bson::Undefined) {
                let xj = eval(time, &doc, vars)?.unwrap_or(Bson::Null);
                if !matches!(xj, Bson::Null | Bson::Undefined) {
                    state.after = Some((xj, y));
                    break;
                }
            }
            j += 1;
        }
    }
    let Some((x2, y2)) = state.after.clone() else {
        return Ok(Bson::Null);
    };
    // y1 + (x - x1) * ((y2 - y1) / (x2 - x1))
    let slope = arith(
        "$divide",
        &arith("$subtract", &y2, &y1)?,
        &arith("$subtract", &x2, &x1)?,
    )?;
    let offset = arith("$multiply", &arith("$subtract", &x, &x1)?, &slope)?;
    arith("$add", &y1, &offset)
}

#[cfg(test)]
mod tests {
    use bson::{doc, Bson, DateTime, Document};

    use super::*;
    use crate::aggregate::basic::tests::{ctx, ctx_with, err_code, run, run_in};
    use crate::aggregate::Pipeline;

    fn date(s: &str) -> Bson {
        Bson::DateTime(DateTime::parse_rfc3339_str(s).expect("test date"))
    }

    /// MongoDB's `cakeSales` documentation collection.
    fn cake_sales() -> Vec<Document> {
        vec![
            doc! {"_id": 0, "type": "chocolate", "orderDate": date("2020-05-18T14:10:30Z"),
            "state": "CA", "price": 13, "quantity": 120},
            doc! {"_id": 1, "type": "chocolate", "orderDate": date("2021-03-20T11:30:05Z"),
            "state": "WA", "price": 14, "quantity": 140},
            doc! {"_id": 2, "type": "vanilla", "orderDate": date("2021-01-11T06:31:15Z"),
            "state": "CA", "price": 12, "quantity": 145},
            doc! {"_id": 3, "type": "vanilla", "orderDate": date("2020-02-08T13:13:23Z"),
            "state": "WA", "price": 13, "quantity": 104},
            doc! {"_id": 4, "type": "strawberry", "orderDate": date("2019-05-18T16:09:01Z"),
            "state": "CA", "price": 41, "quantity": 162},
            doc! {"_id": 5, "type": "strawberry", "orderDate": date("2019-01-08T06:12:03Z"),
            "state": "WA", "price": 43, "quantity": 134},
        ]
    }

    /// `(_id, field)` of each output document, in order.
    fn pairs(docs: &[Document], field: &str) -> Vec<(i32, Bson)> {
        docs.iter()
            .map(|d| {
                (
                    d.get_i32("_id").unwrap_or(-1),
                    d.get(field).cloned().unwrap_or(Bson::Undefined),
                )
            })
            .collect()
    }

    fn swf(spec: Document) -> Vec<Document> {
        vec![doc! {"$setWindowFields": spec}]
    }

    #[test]
    fn cumulative_sum_per_state() {
        let out = run(
            swf(doc! {"partitionBy": "$state", "sortBy": {"orderDate": 1},
            "output": {"cumulativeQuantityForState": {"$sum": "$quantity",
                "window": {"documents": ["unbounded", "current"]}}}}),
            cake_sales(),
        )
        .unwrap();
        assert_eq!(
            pairs(&out, "cumulativeQuantityForState"),
            vec![
                (4, Bson::Int32(162)),
                (0, Bson::Int32(282)),
                (2, Bson::Int32(427)),
                (5, Bson::Int32(134)),
                (3, Bson::Int32(238)),
                (1, Bson::Int32(378)),
            ]
        );
    }

    #[test]
    fn moving_average_by_computed_year() {
        let out = run(
            swf(
                doc! {"partitionBy": {"$year": "$orderDate"}, "sortBy": {"orderDate": 1},
                "output": {"averageQuantity": {"$avg": "$quantity",
                    "window": {"documents": [-1, 0]}}}},
            ),
            cake_sales(),
        )
        .unwrap();
        assert_eq!(
            pairs(&out, "averageQuantity"),
            vec![
                (5, Bson::Double(134.0)),
                (4, Bson::Double(148.0)),
                (3, Bson::Double(104.0)),
                (0, Bson::Double(112.0)),
                (2, Bson::Double(145.0)),
                (1, Bson::Double(142.5)),
            ]
        );
        // The temporary partition key does not reach the output.
        assert!(out.iter().all(|d| !d.contains_key(PARTITION_KEY_FIELD)));
    }

    #[test]
    fn range_window_sums_similar_prices() {
        let out = run(
            swf(doc! {"partitionBy": "$state", "sortBy": {"price": 1},
            "output": {"quantityFromSimilarOrders": {"$sum": "$quantity",
                "window": {"range": [-10, 10]}}}}),
            cake_sales(),
        )
        .unwrap();
        assert_eq!(
            pairs(&out, "quantityFromSimilarOrders"),
            vec![
                (2, Bson::Int32(265)),
                (0, Bson::Int32(265)),
                (4, Bson::Int32(162)),
                (3, Bson::Int32(244)),
                (1, Bson::Int32(244)),
                (5, Bson::Int32(134)),
            ]
        );
    }

    #[test]
    fn time_range_with_unit() {
        let out = run(
            swf(doc! {"partitionBy": "$state", "sortBy": {"orderDate": 1},
            "output": {"recentOrders": {"$push": "$orderDate",
                "window": {"range": ["unbounded", 10], "unit": "month"}}}}),
            cake_sales(),
        )
        .unwrap();
        let got = pairs(&out, "recentOrders");
        assert_eq!(got[0], (4, Bson::Array(vec![date("2019-05-18T16:09:01Z")])));
        assert_eq!(
            got[1],
            (
                0,
                Bson::Array(vec![
                    date("2019-05-18T16:09:01Z"),
                    date("2020-05-18T14:10:30Z"),
                    date("2021-01-11T06:31:15Z")
                ])
            )
        );
    }

    #[test]
    fn rank_dense_rank_document_number() {
        let input = vec![
            doc! {"_id": 1, "s": 10},
            doc! {"_id": 2, "s": 20},
            doc! {"_id": 3, "s": 20},
            doc! {"_id": 4, "s": 30},
        ];
        let out = run(
            swf(doc! {"sortBy": {"s": 1}, "output": {
            "r": {"$rank": {}}, "d": {"$denseRank": {}}, "n": {"$documentNumber": {}}}}),
            input,
        )
        .unwrap();
        let col =
            |f: &str| -> Vec<Bson> { out.iter().map(|d| d.get(f).cloned().unwrap()).collect() };
        assert_eq!(
            col("r"),
            vec![
                Bson::Int32(1),
                Bson::Int32(2),
                Bson::Int32(2),
                Bson::Int32(4)
            ]
        );
        assert_eq!(
            col("d"),
            vec![
                Bson::Int32(1),
                Bson::Int32(2),
                Bson::Int32(2),
                Bson::Int32(3)
            ]
        );
        assert_eq!(
            col("n"),
            vec![
                Bson::Int32(1),
                Bson::Int32(2),
                Bson::Int32(3),
                Bson::Int32(4)
            ]
        );
    }

    #[test]
    fn shift_with_default() {
        let out = run(
            swf(doc! {"partitionBy": "$state", "sortBy": {"quantity": -1},
            "output": {"shiftQuantityForState": {"$shift": {
                "output": "$quantity", "by": 1, "default": "Not available"}}}}),
            cake_sales(),
        )
        .unwrap();
        assert_eq!(
            pairs(&out, "shiftQuantityForState"),
            vec![
                (4, Bson::Int32(145)),
                (2, Bson::Int32(120)),
                (0, Bson::String("Not available".into())),
                (1, Bson::Int32(134)),
                (5, Bson::Int32(104)),
                (3, Bson::String("Not available".into())),
            ]
        );
    }

    #[test]
    fn exp_moving_avg_derivative_integral() {
        let input = vec![
            doc! {"_id": 0, "t": 0, "v": 13},
            doc! {"_id": 1, "t": 1, "v": 14},
            doc! {"_id": 2, "t": 3, "v": 8},
        ];
        let out = run(
            swf(doc! {"sortBy": {"t": 1}, "output": {
                "ema": {"$expMovingAvg": {"input": "$v", "N": 2}},
                "alpha": {"$expMovingAvg": {"input": "$v", "alpha": 0.5}},
                "rate": {"$derivative": {"input": "$v"}, "window": {"documents": [-1, 0]}},
                "area": {"$integral": {"input": "$v"}, "window": {"documents": ["unbounded", "current"]}},
            }}),
            input,
        )
        .unwrap();
        assert_eq!(pairs(&out, "ema")[0].1, Bson::Double(13.0));
        assert_eq!(pairs(&out, "ema")[1].1, Bson::Double(13.666666666666666));
        assert_eq!(
            pairs(&out, "alpha"),
            vec![
                (0, Bson::Double(13.0)),
                (1, Bson::Double(13.5)),
                (2, Bson::Double(10.75))
            ]
        );
        assert_eq!(
            pairs(&out, "rate"),
            vec![
                (0, Bson::Null),
                (1, Bson::Double(1.0)),
                (2, Bson::Double(-3.0))
            ]
        );
        assert_eq!(
            pairs(&out, "area"),
            vec![
                (0, Bson::Int32(0)),
                (1, Bson::Double(13.5)),
                (2, Bson::Double(35.5))
            ]
        );
    }

    #[test]
    fn derivative_with_unit_over_dates() {
        let input = vec![
            doc! {"_id": 0, "t": date("2020-01-01T00:00:00Z"), "miles": 0},
            doc! {"_id": 1, "t": date("2020-01-01T00:30:00Z"), "miles": 30},
        ];
        let out = run(
            swf(doc! {"sortBy": {"t": 1}, "output": {
            "mph": {"$derivative": {"input": "$miles", "unit": "hour"},
                    "window": {"range": [-30, 0], "unit": "minute"}}}}),
            input.clone(),
        )
        .unwrap();
        assert_eq!(pairs(&out, "mph")[1].1, Bson::Double(60.0));
        let no_unit = swf(doc! {"sortBy": {"t": 1}, "output": {
        "r": {"$derivative": {"input": "$miles"}, "window": {"documents": [-1, 0]}}}});
        assert_eq!(err_code(no_unit, input), 5624901);
    }

    #[test]
    fn covariance_std_dev_and_n_accumulators() {
        let input: Vec<Document> = (1..=3)
            .map(|i| doc! {"_id": i, "x": i, "y": 2 * i})
            .collect();
        let out = run(
            swf(doc! {"sortBy": {"x": 1}, "output": {
                "pop": {"$covariancePop": ["$x", "$y"]},
                "samp": {"$covarianceSamp": ["$x", "$y"]},
                "sd": {"$stdDevPop": "$x", "window": {"documents": ["unbounded", "current"]}},
                "top2": {"$maxN": {"input": "$x", "n": 2}},
                "firstX": {"$first": "$x", "window": {"documents": [1, 1]}},
                "all": {"$push": "$x", "window": {"documents": [-1, 1]}},
                "count": {"$count": {}},
            }}),
            input,
        )
        .unwrap();
        assert_eq!(out[0].get("pop"), Some(&Bson::Double(4.0 / 3.0)));
        assert_eq!(out[0].get("samp"), Some(&Bson::Double(2.0)));
        assert_eq!(out[0].get("sd"), Some(&Bson::Double(0.0)));
        assert_eq!(out[1].get("sd"), Some(&Bson::Double(0.5)));
        assert_eq!(
            out[0].get("top2"),
            Some(&Bson::Array(vec![Bson::Int32(3), Bson::Int32(2)]))
        );
        assert_eq!(out[0].get("firstX"), Some(&Bson::Int32(2)));
        assert_eq!(out[2].get("firstX"), Some(&Bson::Null));
        assert_eq!(
            out[0].get("all"),
            Some(&Bson::Array(vec![Bson::Int32(1), Bson::Int32(2)]))
        );
        assert_eq!(out[2].get("count"), Some(&Bson::Int32(3)));
    }

    #[test]
    fn locf_and_linear_fill() {
        let input = vec![
            doc! {"_id": 0, "t": 0, "v": 10},
            doc! {"_id": 1, "t": 1, "v": Bson::Null},
            doc! {"_id": 2, "t": 2},
            doc! {"_id": 3, "t": 3, "v": 16},
            doc! {"_id": 4, "t": 4, "v": Bson::Null},
        ];
        let out = run(
            swf(doc! {"sortBy": {"t": 1}, "output": {
            "locf": {"$locf": "$v"}, "lin": {"$linearFill": "$v"}}}),
            input,
        )
        .unwrap();
        assert_eq!(
            pairs(&out, "locf")
                .into_iter()
                .map(|p| p.1)
                .collect::<Vec<_>>(),
            vec![
                Bson::Int32(10),
                Bson::Int32(10),
                Bson::Int32(10),
                Bson::Int32(16),
                Bson::Int32(16)
            ]
        );
        assert_eq!(
            pairs(&out, "lin")
                .into_iter()
                .map(|p| p.1)
                .collect::<Vec<_>>(),
            vec![
                Bson::Int32(10),
                Bson::Double(12.0),
                Bson::Double(14.0),
                Bson::Int32(16),
                Bson::Null
            ]
        );
    }

    #[test]
    fn nested_output_paths_and_null_partitions() {
        let input = vec![
            doc! {"_id": 0, "g": Bson::Null, "v": 1},
            doc! {"_id": 1, "v": 2},
            doc! {"_id": 2, "g": 1, "v": 3},
            doc! {"_id": 3, "g": 1.0, "v": 4},
        ];
        let out = run(
            swf(doc! {"partitionBy": "$g", "sortBy": {"_id": 1},
            "output": {"s.total": {"$sum": "$v"}}}),
            input,
        )
        .unwrap();
        let totals: Vec<Bson> = out
            .iter()
            .map(|d| d.get_document("s").unwrap().get("total").cloned().unwrap())
            .collect();
        assert_eq!(
            totals,
            vec![
                Bson::Int32(3),
                Bson::Int32(3),
                Bson::Int32(7),
                Bson::Int32(7)
            ]
        );
    }

    #[test]
    fn parse_errors_carry_mongodb_codes() {
        let one = || vec![doc! {"_id": 1, "a": 1}];
        let cases: Vec<(Document, i32)> = vec![
            (
                doc! {"sortBy": {"a": 1}, "output": {"x": {"$sum": "$a", "window": {"documents": [1, 0]}}}},
                5339900,
            ),
            (
                doc! {"output": {"x": {"$sum": "$a", "window": {"documents": [-1, 0]}}}},
                5339901,
            ),
            (
                doc! {"output": {"x": {"$sum": "$a", "window": {"range": [-1, 0]}}}},
                5339902,
            ),
            (
                doc! {"sortBy": {"a": -1}, "output": {"x": {"$sum": "$a", "window": {"range": [-1, 0]}}}},
                8947401,
            ),
            (doc! {"output": {"x": {"$rank": {}}}}, 5371602),
            (
                doc! {"sortBy": {"a": 1}, "output": {"x": {"$rank": 1}}},
                5371603,
            ),
            (
                doc! {"sortBy": {"a": 1}, "output": {"x": {"$rank": {}, "window": {}}}},
                5371601,
            ),
            (doc! {"output": {"x": {"$summ": "$a"}}}, 9),
            (doc! {"output": {"x": {"a": 1}}}, 9),
            (doc! {"output": {"x": 1}}, 9),
            (
                doc! {"output": {"x": {"$sum": 1}, "x.y": {"$sum": 1}}},
                6307900,
            ),
            (doc! {"output": {"x": {"$sum": 1}}, "bogus": 1}, 40415),
            (doc! {"sortBy": {"a": 1}}, 40414),
            (doc! {"sortBy": 1, "output": {}}, 14),
            (
                doc! {"output": {"x": {"$shift": {"output": "$a", "by": 1}}}},
                9,
            ),
            (
                doc! {"sortBy": {"a": 1}, "output": {"x": {"$shift": {"output": "$a", "by": 1.5}}}},
                9,
            ),
            (
                doc! {"sortBy": {"a": 1}, "output": {"x": {"$derivative": {"input": "$a"}}}},
                9,
            ),
            (
                doc! {"sortBy": {"a": 1}, "output": {"x": {"$derivative": {"input": "$a", "unit": "month"}, "window": {"documents": [-1, 0]}}}},
                5490710,
            ),
            (
                doc! {"sortBy": {"a": 1}, "output": {"x": {"$expMovingAvg": {"input": "$a", "alpha": 1}}}},
                9,
            ),
            (doc! {"output": {"x": {"$linearFill": "$a"}}}, 605001),
            (
                doc! {"sortBy": {"a": 1}, "output": {"x": {"$locf": "$a", "window": {}}}},
                9,
            ),
            (doc! {"partitionBy": [1], "output": {"x": {"$sum": 1}}}, 14),
        ];
        for (spec, code) in cases {
            assert_eq!(err_code(swf(spec.clone()), one()), code, "{spec}");
        }
        assert_eq!(err_code(vec![doc! {"$setWindowFields": 1}], one()), 9);
    }

    #[test]
    fn evaluation_errors_carry_mongodb_codes() {
        let strings = vec![doc! {"_id": 1, "a": "x"}];
        let range = swf(
            doc! {"sortBy": {"a": 1}, "output": {"x": {"$sum": 1, "window": {"range": [-1, 0]}}}},
        );
        assert_eq!(err_code(range, strings), 5429414);
        let dates = vec![doc! {"_id": 1, "a": date("2020-01-01T00:00:00Z")}];
        let range = swf(
            doc! {"sortBy": {"a": 1}, "output": {"x": {"$sum": 1, "window": {"range": [-1, 0]}}}},
        );
        assert_eq!(err_code(range, dates), 5429413);
        let arrays = vec![doc! {"_id": 1, "g": [1]}];
        assert_eq!(
            err_code(
                swf(doc! {"partitionBy": "$g", "output": {"x": {"$sum": 1}}}),
                arrays
            ),
            14
        );
        let repeated = vec![
            doc! {"_id": 1, "t": 1, "v": 1},
            doc! {"_id": 2, "t": 1, "v": 2},
        ];
        assert_eq!(
            err_code(
                swf(doc! {"sortBy": {"t": 1}, "output": {"x": {"$linearFill": "$v"}}}),
                repeated
            ),
            6050106
        );
    }

    fn padded(n: i32) -> Vec<Document> {
        (0..n)
            .map(|i| doc! {"_id": i, "pad": "x".repeat(1000)})
            .collect()
    }

    #[test]
    fn cache_spills_with_disk_use_or_fails_without() {
        let dir = tempfile::tempdir().unwrap();
        // No sortBy and no partitionBy: no sort before the window, so the
        // window's own cache meets the limit.
        let spec = swf(doc! {"output": {"n": {"$count": {}}}});
        let small = ctx_with(20_000, false, dir.path());
        assert_eq!(
            run_in(&small, spec.clone(), padded(100))
                .unwrap_err()
                .code
                .number(),
            5643011
        );
        let spilling = ctx_with(20_000, true, dir.path());
        let out = run_in(&spilling, spec, padded(100)).unwrap();
        assert_eq!(out.len(), 100);
        assert!(out.iter().all(|d| d.get("n") == Some(&Bson::Int32(100))));
        assert_eq!(out[57].get_i32("_id").unwrap(), 57);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn bounded_windows_stream_in_bounded_memory() {
        // A 20 KB limit and 100 KB of input: a sliding document window
        // holds only its width.
        let dir = tempfile::tempdir().unwrap();
        let small = ctx_with(20_000, false, dir.path());
        let spec = swf(doc! {"output": {
            "n": {"$documentNumber": {}},
            "run": {"$sum": 1, "window": {"documents": ["unbounded", "current"]}},
            "near": {"$sum": 1, "window": {"documents": [-2, 2]}},
        }});
        // Document windows need a sortBy; a constant one sorts nothing away.
        let mut spec = spec;
        if let Some(Bson::Document(s)) = spec[0].get_mut("$setWindowFields") {
            s.insert("sortBy", doc! {"_id": 1});
        }
        let input = padded(100);
        let stage = Pipeline::parse(
            &spec.iter().cloned().map(Bson::Document).collect::<Vec<_>>(),
            &ParseContext::default(),
        )
        .unwrap();
        // Run only the computation (the sort before it is blocking on its own).
        let Split::Blocking {
            router: Some(router),
            ..
        } = stage.stages[0].split()
        else {
            panic!("$setWindowFields with a sort splits");
        };
        let out: Vec<Document> = router
            .apply(Box::new(input.into_iter().map(Ok)), &small)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(out.len(), 100);
        assert_eq!(out[99].get("run"), Some(&Bson::Int32(100)));
        assert_eq!(out[50].get("near"), Some(&Bson::Int32(5)));
        assert_eq!(out[0].get("near"), Some(&Bson::Int32(3)));
    }

    #[test]
    fn split_sorts_on_partitions_and_computes_after_the_merge() {
        let stages = vec![Bson::Document(doc! {"$setWindowFields": {
        "partitionBy": "$state", "sortBy": {"orderDate": 1},
        "output": {"c": {"$sum": "$quantity", "window": {"documents": ["unbounded", "current"]}}}}})];
        let p = Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        let c = ctx();
        let Split::Blocking {
            partition,
            router: Some(router),
            merge_sort: Some(order),
        } = p.stages[0].split()
        else {
            panic!("not blocking");
        };
        assert_eq!(sort_key_document(&order), doc! {"state": 1, "orderDate": 1});
        let mut streams: Vec<Vec<Document>> = Vec::new();
        for part in cake_sales().chunks(2) {
            let s = partition
                .apply(
                    Box::new(part.iter().cloned().map(Ok).collect::<Vec<_>>().into_iter()),
                    &c,
                )
                .unwrap();
            streams.push(s.map(|d| d.unwrap()).collect());
        }
        let mut merged: Vec<Document> = streams.concat();
        merged.sort_by(|a, b| order.compare(a, b));
        let out: Vec<Document> = router
            .apply(Box::new(merged.into_iter().map(Ok)), &c)
            .unwrap()
            .map(|d| d.unwrap())
            .collect();
        let whole = run(
            stages
                .iter()
                .map(|s| s.as_document().unwrap().clone())
                .collect(),
            cake_sales(),
        )
        .unwrap();
        assert_eq!(out, whole);
    }

    #[test]
    fn table_is_sorted() {
        assert!(STAGES.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(WINDOW_FUNCTIONS.windows(2).all(|w| w[0] < w[1]));
    }
}
