//! Array and object operators ($size is in the main table): $arrayElemAt, $filter, $map, $reduce, ... and $mergeObjects, $objectToArray, ...
//!
//! Operators with named arguments (`$filter: {input, as, cond}`) turn
//! them into a fixed argument list when parsed; an optional argument that
//! was not given is `$$REMOVE` there. `$filter`, `$map` and `$reduce`
//! evaluate their body once per element with the element bound as a
//! variable (`$$this`, `$$value` or the `as` name) on top of the
//! enclosing variables.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BTreeSet;

use bson::{Bson, Document};

use super::args::{check_at_most, index_bounds, int32_of, named_args, value_text};
use super::{
    compare_values, eval, is_nullish, op, owned, truthy, type_of, Arity, Evaluation, Node,
    Operator, Scope, Value,
};
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::{compare, type_name, Canonical, DecimalValue};
use crate::query::size::{
    field_size, measure, Shape, SizeBudget, ACCUMULATOR_MEMORY_LIMIT, MAX_INTERNAL_OBJECT_SIZE,
};

/// This family's operators, sorted by name.
pub(super) static OPERATORS: &[Operator] = &[
    op(
        "$allElementsTrue",
        Arity::Exactly(1),
        Evaluation::Values(op_all_elements_true),
    ),
    op(
        "$anyElementTrue",
        Arity::Exactly(1),
        Evaluation::Values(op_any_element_true),
    ),
    op(
        "$arrayElemAt",
        Arity::Exactly(2),
        Evaluation::Values(op_array_elem_at),
    ),
    op(
        "$arrayToObject",
        Arity::Exactly(1),
        Evaluation::Values(op_array_to_object),
    ),
    op(
        "$concatArrays",
        Arity::Any,
        Evaluation::Values(op_concat_arrays),
    ),
    Operator {
        name: "$filter",
        arity: Arity::Exactly(4),
        evaluation: Evaluation::Lazy(op_filter),
        parse_args: Some(filter_args),
    },
    op("$first", Arity::Exactly(1), Evaluation::Values(op_first)),
    Operator {
        name: "$firstN",
        arity: Arity::Exactly(2),
        evaluation: Evaluation::Values(op_first_n),
        parse_args: Some(n_args),
    },
    Operator {
        name: "$getField",
        arity: Arity::AtLeast(1),
        evaluation: Evaluation::Lazy(op_get_field),
        parse_args: Some(get_field_args),
    },
    op(
        "$indexOfArray",
        Arity::AtLeast(2),
        Evaluation::Values(op_index_of_array),
    ),
    op(
        "$isArray",
        Arity::Exactly(1),
        Evaluation::Values(op_is_array),
    ),
    op("$last", Arity::Exactly(1), Evaluation::Values(op_last)),
    Operator {
        name: "$lastN",
        arity: Arity::Exactly(2),
        evaluation: Evaluation::Values(op_last_n),
        parse_args: Some(n_args),
    },
    Operator {
        name: "$map",
        arity: Arity::Exactly(3),
        evaluation: Evaluation::Lazy(op_map),
        parse_args: Some(map_args),
    },
    Operator {
        name: "$maxN",
        arity: Arity::Exactly(2),
        evaluation: Evaluation::Values(op_max_n),
        parse_args: Some(n_args),
    },
    op(
        "$mergeObjects",
        Arity::Any,
        Evaluation::Values(op_merge_objects),
    ),
    Operator {
        name: "$minN",
        arity: Arity::Exactly(2),
        evaluation: Evaluation::Values(op_min_n),
        parse_args: Some(n_args),
    },
    op(
        "$objectToArray",
        Arity::Exactly(1),
        Evaluation::Values(op_object_to_array),
    ),
    op("$range", Arity::AtLeast(2), Evaluation::Values(op_range)),
    Operator {
        name: "$reduce",
        arity: Arity::Exactly(3),
        evaluation: Evaluation::Lazy(op_reduce),
        parse_args: Some(reduce_args),
    },
    op(
        "$reverseArray",
        Arity::Exactly(1),
        Evaluation::Values(op_reverse_array),
    ),
    op(
        "$setDifference",
        Arity::Exactly(2),
        Evaluation::Values(op_set_difference),
    ),
    op(
        "$setEquals",
        Arity::AtLeast(2),
        Evaluation::Values(op_set_equals),
    ),
    Operator {
        name: "$setField",
        arity: Arity::Exactly(3),
        evaluation: Evaluation::Values(op_set_field),
        parse_args: Some(set_field_args),
    },
    op(
        "$setIntersection",
        Arity::Any,
        Evaluation::Values(op_set_intersection),
    ),
    op(
        "$setIsSubset",
        Arity::Exactly(2),
        Evaluation::Values(op_set_is_subset),
    ),
    op("$setUnion", Arity::Any, Evaluation::Values(op_set_union)),
    op("$slice", Arity::AtLeast(2), Evaluation::Values(op_slice)),
    Operator {
        name: "$sortArray",
        arity: Arity::Exactly(2),
        evaluation: Evaluation::Values(op_sort_array),
        parse_args: Some(sort_array_args),
    },
    Operator {
        name: "$unsetField",
        arity: Arity::Exactly(3),
        evaluation: Evaluation::Values(op_set_field),
        parse_args: Some(unset_field_args),
    },
    Operator {
        name: "$zip",
        arity: Arity::Exactly(3),
        evaluation: Evaluation::Values(op_zip),
        parse_args: Some(zip_args),
    },
];

// ---------------------------------------------------------------------------
// Helpers.

/// Stands for an optional named argument that was not given.
const ABSENT: &str = "$$REMOVE";

fn absent() -> Bson {
    Bson::String(ABSENT.to_string())
}

/// A value that is not an expression (a variable name, a sort pattern).
fn literal(v: Bson) -> Bson {
    let mut doc = Document::new();
    doc.insert("$literal", v);
    Bson::Document(doc)
}

fn array_of<'v>(v: &'v Value<'_>) -> Option<&'v [Bson]> {
    match v.as_deref() {
        Some(Bson::Array(items)) => Some(items.as_slice()),
        _ => None,
    }
}

/// MongoDB's rule for user variable names (`as`): a lowercase letter or a
/// non-ASCII character first, then letters, digits and `_`.
fn variable_name(value: Option<Bson>, op: &str, default: &str) -> Result<Bson> {
    let name = match value {
        None => default.to_string(),
        Some(Bson::String(s)) => s,
        Some(other) => {
            return Err(Error::new(
                ErrorCode::FailedToParse,
                format!("{op}: 'as' must be a string, found {}", type_name(&other)),
            ))
        }
    };
    super::types::validate_variable_name(&name)?;
    Ok(literal(Bson::String(name)))
}

/// The name a `literal(variable_name(..))` argument parsed to.
fn bound_name(node: &Node) -> &str {
    match node {
        Node::Literal(Bson::String(s)) => s,
        _ => "this",
    }
}

fn is_absent(node: &Node) -> bool {
    matches!(node, Node::Variable { name, path } if name == "REMOVE" && path.is_empty())
}

/// The enclosing variables, to add bindings to.
fn enclosing_vars(scope: &Scope<'_>) -> Document {
    scope.vars.cloned().unwrap_or_default()
}

// ---------------------------------------------------------------------------
// Element access.

fn elem_at<'a>(array: &Value<'a>, index: &Value<'a>, op: &str) -> Result<Value<'a>> {
    if is_nullish(array) || is_nullish(index) {
        return owned(Bson::Null);
    }
    let Some(items) = array_of(array) else {
        return Err(Error::new(
            ErrorCode::ArrayElemAtNotArray,
            format!(
                "{op}'s first argument must be an array, but is {}",
                type_of(array)
            ),
        ));
    };
    if index
        .as_deref()
        .and_then(crate::query::compare::Number::of)
        .is_none()
    {
        return Err(Error::new(
            ErrorCode::ArrayElemAtIndexNotNumeric,
            format!(
                "{op}'s second argument must be a numeric value, but is {}",
                type_of(index)
            ),
        ));
    }
    let Some(i) = index.as_deref().and_then(int32_of) else {
        return Err(Error::new(
            ErrorCode::ArrayElemAtIndexNotInt32,
            format!(
                "{op}'s second argument must be representable as a 32-bit integer: {}",
                value_text(index)
            ),
        ));
    };
    let position = if i < 0 {
        items.len().checked_sub(i.unsigned_abs() as usize)
    } else {
        Some(i as usize)
    };
    Ok(position
        .and_then(|p| items.get(p))
        .map(|v| Cow::Owned(v.clone())))
}

fn op_array_elem_at<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    elem_at(&args[0], &args[1], "$arrayElemAt")
}

/// `$first` and `$last` of an array: null for null or missing, missing
/// for an empty array.
fn first_or_last<'a>(args: &[Value<'a>], op: &str, last: bool) -> Result<Value<'a>> {
    if is_nullish(&args[0]) {
        return owned(Bson::Null);
    }
    let Some(items) = array_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::ArrayElemAtNotArray,
            format!(
                "{op}'s argument must be an array, but is {}",
                type_of(&args[0])
            ),
        ));
    };
    let item = if last { items.last() } else { items.first() };
    Ok(item.map(|v| Cow::Owned(v.clone())))
}

fn op_first<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    first_or_last(args, "$first", false)
}

fn op_last<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    first_or_last(args, "$last", true)
}

fn op_is_array<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    owned(Bson::Boolean(array_of(&args[0]).is_some()))
}

fn op_slice<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    check_at_most(args, "$slice", 2, 3)?;
    if args.iter().any(is_nullish) {
        return owned(Bson::Null);
    }
    let Some(items) = array_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::ArraySliceNotArray,
            format!(
                "First argument to $slice must be an array, but is of type: {}",
                type_of(&args[0])
            ),
        ));
    };
    let number =
        |v: &Value<'_>, code_type: ErrorCode, code_int: ErrorCode, which: &str| -> Result<i32> {
            if v.as_deref()
                .and_then(crate::query::compare::Number::of)
                .is_none()
            {
                return Err(Error::new(
                    code_type,
                    format!(
                        "{which} argument to $slice must be numeric, but is of type: {}",
                        type_of(v)
                    ),
                ));
            }
            v.as_deref().and_then(int32_of).ok_or_else(|| {
                Error::new(
                    code_int,
                    format!(
                        "{which} argument to $slice can't be represented as a 32-bit integer: {}",
                        value_text(v)
                    ),
                )
            })
        };
    let len = items.len();
    let second = number(
        &args[1],
        ErrorCode::ArraySliceSecondNotNumeric,
        ErrorCode::ArraySliceSecondNotInt32,
        "Second",
    )?;
    let (start, count) = match args.get(2) {
        None => {
            if second >= 0 {
                (0, second as usize)
            } else {
                let n = second.unsigned_abs() as usize;
                (len.saturating_sub(n), n)
            }
        }
        Some(third) => {
            let n = number(
                third,
                ErrorCode::ArraySliceThirdNotNumeric,
                ErrorCode::ArraySliceThirdNotInt32,
                "Third",
            )?;
            if n <= 0 {
                return Err(Error::new(
                    ErrorCode::ArraySliceThirdNotPositive,
                    format!("Third argument to $slice must be positive: {n}"),
                ));
            }
            let start = if second >= 0 {
                (second as usize).min(len)
            } else {
                len.saturating_sub(second.unsigned_abs() as usize)
            };
            (start, n as usize)
        }
    };
    let start = start.min(len);
    let end = start.saturating_add(count).min(len);
    owned(Bson::Array(items[start..end].to_vec()))
}

fn op_concat_arrays<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let mut inputs = Vec::with_capacity(args.len());
    for arg in args {
        if is_nullish(arg) {
            return owned(Bson::Null);
        }
        let Some(items) = array_of(arg) else {
            return Err(Error::new(
                ErrorCode::ConcatArraysNotArray,
                format!("$concatArrays only supports arrays, not {}", type_of(arg)),
            ));
        };
        inputs.push(items);
    }
    // Sized before anything is copied: repeating a large array must fail,
    // not allocate.
    let mut budget = SizeBudget::new();
    let mut len = 0;
    for item in inputs.iter().flat_map(|items| items.iter()) {
        budget.add_element(len, item)?;
        len += 1;
    }
    let mut out = Vec::with_capacity(len);
    for items in inputs {
        out.extend_from_slice(items);
    }
    owned(Bson::Array(out))
}

fn op_reverse_array<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    if is_nullish(&args[0]) {
        return owned(Bson::Null);
    }
    let Some(items) = array_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::ReverseArrayNotArray,
            format!(
                "The argument to $reverseArray must be an array, but was of type: {}",
                type_of(&args[0])
            ),
        ));
    };
    owned(Bson::Array(items.iter().rev().cloned().collect()))
}

/// The bytes MongoDB counts for a `$range` result: a vector header and
/// 16 bytes an element.
fn range_memory(length: usize) -> usize {
    24usize.saturating_add(length.saturating_mul(16))
}

/// The encoded size of an array of `count` int32 elements.
fn int_array_size(count: usize) -> usize {
    let mut size = 5usize;
    let mut digits = 1;
    let mut start = 0usize;
    while start < count {
        // Indexes with `digits` digits: [10^(digits-1), 10^digits).
        let end = 10usize.saturating_pow(digits as u32).min(count);
        size = size.saturating_add((end - start).saturating_mul(2 + digits + 4));
        start = end;
        digits += 1;
    }
    size
}

fn op_range<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    check_at_most(args, "$range", 2, 3)?;
    let read =
        |v: &Value<'_>, numeric_code: ErrorCode, int_code: ErrorCode, what: &str| -> Result<i64> {
            if v.as_deref()
                .and_then(crate::query::compare::Number::of)
                .is_none()
            {
                return Err(Error::new(
                    numeric_code,
                    format!(
                        "$range requires a numeric {what}, found value of type: {}",
                        type_of(v)
                    ),
                ));
            }
            v.as_deref()
                .and_then(int32_of)
                .map(i64::from)
                .ok_or_else(|| {
                    Error::new(
                        int_code,
                        format!(
                        "$range requires a {what} that can be represented as a 32-bit integer, \
                         found value: {}",
                        value_text(v)
                    ),
                    )
                })
        };
    let start = read(
        &args[0],
        ErrorCode::RangeStartNotNumeric,
        ErrorCode::RangeStartNotInt32,
        "starting value",
    )?;
    let end = read(
        &args[1],
        ErrorCode::RangeEndNotNumeric,
        ErrorCode::RangeEndNotInt32,
        "ending value",
    )?;
    let step = match args.get(2) {
        Some(v) => read(
            v,
            ErrorCode::RangeStepNotNumeric,
            ErrorCode::RangeStepNotInt32,
            "step value",
        )?,
        None => 1,
    };
    if step == 0 {
        return Err(Error::new(
            ErrorCode::RangeStepZero,
            "$range requires a non-zero step value".to_string(),
        ));
    }
    let count = if (step > 0 && start < end) || (step < 0 && start > end) {
        ((end - start).unsigned_abs().div_ceil(step.unsigned_abs())) as usize
    } else {
        0
    };
    // MongoDB's estimate, which counts one element more than it makes.
    let steps = (end - start) / step;
    let length = if steps >= 0 { steps as usize + 1 } else { 0 };
    let needed = range_memory(length);
    if needed >= ACCUMULATOR_MEMORY_LIMIT {
        return Err(Error::new(
            ErrorCode::ExceededMemoryLimit,
            format!(
                "$range would use too much memory ({needed} bytes) and cannot spill to disk. \
                 Memory limit: {ACCUMULATOR_MEMORY_LIMIT} bytes"
            ),
        ));
    }
    // Beyond MongoDB's check: the array must also fit in a document, which
    // keeps what one expression holds far below the memory limit.
    let size = int_array_size(count);
    if size > MAX_INTERNAL_OBJECT_SIZE {
        return Err(crate::query::size::object_too_large(size));
    }
    let out = (0..count as i64)
        .map(|i| Bson::Int32((start + i * step) as i32))
        .collect();
    owned(Bson::Array(out))
}

fn op_index_of_array<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    check_at_most(args, "$indexOfArray", 2, 4)?;
    if is_nullish(&args[0]) {
        return owned(Bson::Null);
    }
    let Some(items) = array_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::IndexOfArrayNotArray,
            format!(
                "$indexOfArray requires an array as a first argument, found: {}",
                type_of(&args[0])
            ),
        ));
    };
    let (start, end) = index_bounds(args, "$indexOfArray")?;
    let end = end.unwrap_or(items.len()).min(items.len());
    let found = (start..end)
        .find(|&i| compare_values(&Some(Cow::Borrowed(&items[i])), &args[1]) == Ordering::Equal);
    owned(Bson::Int32(found.map_or(-1, |i| i as i32)))
}

// ---------------------------------------------------------------------------
// $filter, $map, $reduce.

fn filter_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::FilterNotObject,
            "$filter only supports an object as its argument".to_string(),
        ));
    };
    let [input, as_, cond, limit] = named_args(doc, ["input", "as", "cond", "limit"], |k| {
        Error::new(
            ErrorCode::FilterUnknownParameter,
            format!("Unrecognized parameter to $filter: {k}"),
        )
    })?;
    let input = input.ok_or_else(|| {
        Error::new(
            ErrorCode::FilterMissingInput,
            "Missing 'input' parameter to $filter",
        )
    })?;
    let cond = cond.ok_or_else(|| {
        Error::new(
            ErrorCode::FilterMissingCond,
            "Missing 'cond' parameter to $filter",
        )
    })?;
    let name = variable_name(as_, "$filter", "this")?;
    Ok(Some(vec![input, name, cond, limit.unwrap_or_else(absent)]))
}

fn op_filter<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    let input = eval(&args[0], scope)?;
    if is_nullish(&input) {
        return owned(Bson::Null);
    }
    let Some(items) = array_of(&input) else {
        return Err(Error::new(
            ErrorCode::FilterInputNotArray,
            format!("input to $filter must be an array not {}", type_of(&input)),
        ));
    };
    let limit = if is_absent(&args[3]) {
        None
    } else {
        let v = eval(&args[3], scope)?;
        if is_nullish(&v) {
            None
        } else {
            let Some(n) = v.as_deref().and_then(int32_of) else {
                return Err(Error::new(
                    ErrorCode::FilterLimitNotInt32,
                    format!(
                        "$filter: limit must be represented as a 32-bit integral value: {}",
                        value_text(&v)
                    ),
                ));
            };
            if n < 1 {
                return Err(Error::new(
                    ErrorCode::FilterLimitNotPositive,
                    format!("$filter: limit must be greater than 0: {n}"),
                ));
            }
            Some(n as usize)
        }
    };
    let name = bound_name(&args[1]);
    let mut vars = enclosing_vars(scope);
    let mut out = Vec::new();
    for item in items {
        crate::query::interrupt::check()?;
        if limit.is_some_and(|n| out.len() >= n) {
            break;
        }
        vars.insert(name, item.clone());
        let inner = Scope {
            root: scope.root,
            vars: Some(&vars),
        };
        if eval(&args[2], &inner)?.as_deref().is_some_and(truthy) {
            out.push(item.clone());
        }
    }
    owned(Bson::Array(out))
}

fn map_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::MapNotObject,
            "$map only supports an object as its argument".to_string(),
        ));
    };
    let [input, as_, body] = named_args(doc, ["input", "as", "in"], |k| {
        Error::new(
            ErrorCode::MapUnknownParameter,
            format!("Unrecognized parameter to $map: {k}"),
        )
    })?;
    let input = input.ok_or_else(|| {
        Error::new(
            ErrorCode::MapMissingInput,
            "Missing 'input' parameter to $map",
        )
    })?;
    let body =
        body.ok_or_else(|| Error::new(ErrorCode::MapMissingIn, "Missing 'in' parameter to $map"))?;
    let name = variable_name(as_, "$map", "this")?;
    Ok(Some(vec![input, name, body]))
}

fn op_map<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    let input = eval(&args[0], scope)?;
    if is_nullish(&input) {
        return owned(Bson::Null);
    }
    let Some(items) = array_of(&input) else {
        return Err(Error::new(
            ErrorCode::MapInputNotArray,
            format!("input to $map must be an array not {}", type_of(&input)),
        ));
    };
    let name = bound_name(&args[1]);
    let mut vars = enclosing_vars(scope);
    let mut out = Vec::with_capacity(items.len());
    let mut budget = SizeBudget::new();
    for item in items {
        crate::query::interrupt::check()?;
        vars.insert(name, item.clone());
        let inner = Scope {
            root: scope.root,
            vars: Some(&vars),
        };
        let v = eval(&args[2], &inner)?.map_or(Bson::Null, Cow::into_owned);
        budget.add_element(out.len(), &v)?;
        out.push(v);
    }
    owned(Bson::Array(out))
}

fn reduce_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::ReduceNotObject,
            format!(
                "$reduce requires an object as an argument, found: {}",
                type_name(arg)
            ),
        ));
    };
    let [input, initial, body] = named_args(doc, ["input", "initialValue", "in"], |k| {
        Error::new(
            ErrorCode::ReduceUnknownArgument,
            format!("$reduce found an unknown argument: {k}"),
        )
    })?;
    let required = |v: Option<Bson>, code: ErrorCode, name: &str| {
        v.ok_or_else(|| Error::new(code, format!("$reduce requires '{name}' to be specified")))
    };
    Ok(Some(vec![
        required(input, ErrorCode::ReduceMissingInput, "input")?,
        required(
            initial,
            ErrorCode::ReduceMissingInitialValue,
            "initialValue",
        )?,
        required(body, ErrorCode::ReduceMissingIn, "in")?,
    ]))
}

fn op_reduce<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    let input = eval(&args[0], scope)?;
    if is_nullish(&input) {
        return owned(Bson::Null);
    }
    let Some(items) = array_of(&input) else {
        return Err(Error::new(
            ErrorCode::ReduceInputNotArray,
            format!(
                "$reduce requires that 'input' be an array, found: {}",
                value_text(&input)
            ),
        ));
    };
    let mut value: Option<Bson> = eval(&args[1], scope)?.map(Cow::into_owned);
    let mut vars = enclosing_vars(scope);
    for item in items {
        crate::query::interrupt::check()?;
        vars.insert("this", item.clone());
        match value.take() {
            Some(v) => vars.insert("value", v),
            None => vars.remove("value"),
        };
        let inner = Scope {
            root: scope.root,
            vars: Some(&vars),
        };
        value = eval(&args[2], &inner)?.map(Cow::into_owned);
    }
    Ok(value.map(Cow::Owned))
}

// ---------------------------------------------------------------------------
// $zip, $sortArray.

fn zip_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::ZipNotObject,
            format!(
                "$zip only supports an object as an argument, found {}",
                type_name(arg)
            ),
        ));
    };
    let [inputs, longest, defaults] =
        named_args(doc, ["inputs", "useLongestLength", "defaults"], |k| {
            Error::new(
                ErrorCode::ZipUnknownArgument,
                format!("$zip found an unknown argument: {k}"),
            )
        })?;
    let inputs = match inputs {
        Some(Bson::Array(items)) if !items.is_empty() => items,
        Some(Bson::Array(_)) | None => {
            return Err(Error::new(
                ErrorCode::ZipMissingInputs,
                "$zip requires at least one input array",
            ))
        }
        Some(other) => {
            return Err(Error::new(
                ErrorCode::ZipInputsNotArray,
                format!(
                    "inputs must be an array of expressions, found {}",
                    type_name(&other)
                ),
            ))
        }
    };
    let longest = match longest {
        None => false,
        Some(Bson::Boolean(b)) => b,
        Some(other) => {
            return Err(Error::new(
                ErrorCode::ZipUseLongestLengthNotBool,
                format!(
                    "useLongestLength must be a bool, found {}",
                    type_name(&other)
                ),
            ))
        }
    };
    let defaults = match defaults {
        None => Vec::new(),
        Some(Bson::Array(items)) => items,
        Some(other) => {
            return Err(Error::new(
                ErrorCode::ZipDefaultsNotArray,
                format!(
                    "defaults must be an array of expressions, found {}",
                    type_name(&other)
                ),
            ))
        }
    };
    if !defaults.is_empty() && !longest {
        return Err(Error::new(
            ErrorCode::ZipDefaultsWithoutUseLongestLength,
            "cannot specify defaults unless useLongestLength is true",
        ));
    }
    if !defaults.is_empty() && defaults.len() != inputs.len() {
        return Err(Error::new(
            ErrorCode::ZipDefaultsLengthMismatch,
            "defaults and inputs must have the same length",
        ));
    }
    Ok(Some(vec![
        Bson::Array(inputs),
        Bson::Boolean(longest),
        Bson::Array(defaults),
    ]))
}

fn op_zip<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let inputs = array_of(&args[0]).unwrap_or_default();
    let longest = matches!(args[1].as_deref(), Some(Bson::Boolean(true)));
    let defaults = array_of(&args[2]).unwrap_or_default();
    let mut arrays = Vec::with_capacity(inputs.len());
    for input in inputs {
        match input {
            Bson::Null | Bson::Undefined => return owned(Bson::Null),
            Bson::Array(items) => arrays.push(items),
            other => {
                return Err(Error::new(
                    ErrorCode::ZipInputNotArray,
                    format!("$zip found a non-array expression in input: {other}"),
                ))
            }
        }
    }
    let lengths = arrays.iter().map(|a| a.len());
    let len = if longest {
        lengths.max().unwrap_or(0)
    } else {
        lengths.min().unwrap_or(0)
    };
    // Defaults repeat for every missing element, so the result can be far
    // larger than the inputs: each row is sized before it is copied.
    let null = Bson::Null;
    let mut budget = SizeBudget::new();
    let mut out = Vec::new();
    for i in 0..len {
        let mut row_budget = SizeBudget::new();
        let cells: Vec<&Bson> = arrays
            .iter()
            .enumerate()
            .map(|(j, a)| a.get(i).or_else(|| defaults.get(j)).unwrap_or(&null))
            .collect();
        for (j, cell) in cells.iter().enumerate() {
            row_budget.add_element(j, cell)?;
        }
        budget.charge(element_header(i), row_budget.shape())?;
        out.push(Bson::Array(cells.into_iter().cloned().collect()));
    }
    owned(Bson::Array(out))
}

/// The bytes an array element takes besides its value.
fn element_header(index: usize) -> usize {
    crate::query::size::element_size(index, &Bson::Null)
}

/// `1` or `-1`, as a sort direction.
fn direction(v: &Bson) -> Option<Ordering> {
    let d = crate::query::compare::Number::of(v)?.to_f64();
    if d == 1.0 {
        Some(Ordering::Less)
    } else if d == -1.0 {
        Some(Ordering::Greater)
    } else {
        None
    }
}

fn sort_array_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::SortArrayNotObject,
            format!(
                "$sortArray requires an object as an argument, found: {}",
                type_name(arg)
            ),
        ));
    };
    let [input, sort_by] = named_args(doc, ["input", "sortBy"], |k| {
        Error::new(
            ErrorCode::SortArrayUnknownArgument,
            format!("$sortArray found an unknown argument: {k}"),
        )
    })?;
    let input = input.ok_or_else(|| {
        Error::new(
            ErrorCode::SortArrayMissingInput,
            "$sortArray requires 'input' to be specified",
        )
    })?;
    let sort_by = sort_by.ok_or_else(|| {
        Error::new(
            ErrorCode::SortArrayMissingSortBy,
            "$sortArray requires 'sortBy' to be specified",
        )
    })?;
    let valid = match &sort_by {
        Bson::Document(pattern) => {
            !pattern.is_empty() && pattern.values().all(|v| direction(v).is_some())
        }
        other => direction(other).is_some(),
    };
    if !valid {
        return Err(Error::new(
            ErrorCode::SortArrayBadSortBy,
            format!(
                "$sortArray requires sortBy to be either 1, -1 or a sort pattern of 1s and -1s, \
                 found: {sort_by}"
            ),
        ));
    }
    Ok(Some(vec![input, literal(sort_by)]))
}

fn op_sort_array<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    if is_nullish(&args[0]) {
        return owned(Bson::Null);
    }
    let Some(items) = array_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::SortArrayInputNotArray,
            format!(
                "The input argument to $sortArray must be an array, but was of type: {}",
                type_of(&args[0])
            ),
        ));
    };
    let mut sorted = items.to_vec();
    match args[1].as_deref() {
        Some(Bson::Document(pattern)) => {
            let keys: Vec<(Vec<&str>, bool)> = pattern
                .iter()
                .map(|(k, v)| {
                    (
                        k.split('.').collect(),
                        direction(v) == Some(Ordering::Greater),
                    )
                })
                .collect();
            sorted.sort_by(|a, b| {
                for (path, descending) in &keys {
                    let order = compare_values(
                        &sort_key(a, path, *descending),
                        &sort_key(b, path, *descending),
                    );
                    let order = if *descending { order.reverse() } else { order };
                    if order != Ordering::Equal {
                        return order;
                    }
                }
                Ordering::Equal
            });
        }
        Some(v) if direction(v) == Some(Ordering::Greater) => {
            sorted.sort_by(|a, b| compare(b, a));
        }
        _ => sorted.sort_by(compare),
    }
    owned(Bson::Array(sorted))
}

/// The value a sort pattern's path selects in an element, as `$sort`
/// sees it: non-document elements have no fields, and an array sorts by
/// its smallest element ascending and its largest descending (an empty
/// one as `undefined`).
fn sort_key<'v>(item: &'v Bson, path: &[&str], descending: bool) -> Value<'v> {
    let current = crate::query::path::value_in_documents(item, path)?;
    match current {
        Bson::Array(items) => {
            let pick = if descending {
                items.iter().max_by(|a, b| compare(a, b))
            } else {
                items.iter().min_by(|a, b| compare(a, b))
            };
            Some(pick.map_or(Cow::Owned(Bson::Undefined), Cow::Borrowed))
        }
        other => Some(Cow::Borrowed(other)),
    }
}

// ---------------------------------------------------------------------------
// $allElementsTrue, $anyElementTrue and the set operators.

fn op_all_elements_true<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let Some(items) = array_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::AllElementsTrueNotArray,
            format!(
                "$allElementsTrue's argument must be an array, but is {}",
                type_of(&args[0])
            ),
        ));
    };
    owned(Bson::Boolean(items.iter().all(truthy)))
}

fn op_any_element_true<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let Some(items) = array_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::AnyElementTrueNotArray,
            format!(
                "$anyElementTrue's argument must be an array, but is {}",
                type_of(&args[0])
            ),
        ));
    };
    owned(Bson::Boolean(items.iter().any(truthy)))
}

/// The distinct elements in first-seen order, and a tree of them for
/// lookups: inserting and finding are O(log n), so sets of 100,000
/// elements take milliseconds.
struct ValueSet<'v> {
    ordered: Vec<&'v Bson>,
    seen: BTreeSet<Canonical<'v>>,
}

impl<'v> ValueSet<'v> {
    fn new() -> ValueSet<'v> {
        ValueSet {
            ordered: Vec::new(),
            seen: BTreeSet::new(),
        }
    }

    fn of(items: &'v [Bson]) -> ValueSet<'v> {
        let mut set = ValueSet::new();
        for item in items {
            set.insert(item);
        }
        set
    }

    fn len(&self) -> usize {
        self.ordered.len()
    }

    fn contains(&self, value: &'v Bson) -> bool {
        self.seen.contains(&Canonical(value))
    }

    fn insert(&mut self, value: &'v Bson) {
        if self.seen.insert(Canonical(value)) {
            self.ordered.push(value);
        }
    }

    fn is_subset_of(&self, other: &ValueSet<'v>) -> bool {
        self.ordered.iter().all(|v| other.contains(v))
    }

    fn into_bson(self) -> Bson {
        Bson::Array(self.ordered.into_iter().cloned().collect())
    }
}

fn op_set_union<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let mut set = ValueSet::new();
    for arg in args {
        if is_nullish(arg) {
            return owned(Bson::Null);
        }
        let Some(items) = array_of(arg) else {
            return Err(Error::new(
                ErrorCode::SetUnionNotArray,
                format!(
                    "All operands of $setUnion must be arrays. One argument is of type: {}",
                    type_of(arg)
                ),
            ));
        };
        for item in items {
            set.insert(item);
        }
    }
    owned(set.into_bson())
}

fn op_set_intersection<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let mut result: Option<ValueSet> = None;
    for arg in args {
        if is_nullish(arg) {
            return owned(Bson::Null);
        }
        let Some(items) = array_of(arg) else {
            return Err(Error::new(
                ErrorCode::SetIntersectionNotArray,
                format!(
                    "All operands of $setIntersection must be arrays. One argument is of type: {}",
                    type_of(arg)
                ),
            ));
        };
        let next = ValueSet::of(items);
        result = Some(match result {
            None => next,
            Some(current) => {
                let mut kept = ValueSet::new();
                for v in current.ordered.iter().filter(|v| next.contains(v)) {
                    kept.insert(v);
                }
                kept
            }
        });
    }
    owned(result.map_or(Bson::Array(Vec::new()), ValueSet::into_bson))
}

fn op_set_difference<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    if is_nullish(&args[0]) || is_nullish(&args[1]) {
        return owned(Bson::Null);
    }
    let Some(first) = array_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::SetDifferenceFirstNotArray,
            format!(
                "both operands of $setDifference must be arrays. First argument is of type: {}",
                type_of(&args[0])
            ),
        ));
    };
    let Some(second) = array_of(&args[1]) else {
        return Err(Error::new(
            ErrorCode::SetDifferenceSecondNotArray,
            format!(
                "both operands of $setDifference must be arrays. Second argument is of type: {}",
                type_of(&args[1])
            ),
        ));
    };
    let exclude = ValueSet::of(second);
    let mut out = ValueSet::new();
    for item in first.iter().filter(|v| !exclude.contains(v)) {
        out.insert(item);
    }
    owned(out.into_bson())
}

fn op_set_equals<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let mut sets = Vec::with_capacity(args.len());
    for arg in args {
        let Some(items) = array_of(arg) else {
            return Err(Error::new(
                ErrorCode::SetEqualsNotArray,
                format!(
                    "All operands of $setEquals must be arrays. One argument is of type: {}",
                    type_of(arg)
                ),
            ));
        };
        sets.push(ValueSet::of(items));
    }
    let equal = sets
        .windows(2)
        .all(|w| w[0].len() == w[1].len() && w[0].is_subset_of(&w[1]));
    owned(Bson::Boolean(equal))
}

fn op_set_is_subset<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let Some(first) = array_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::SetIsSubsetFirstNotArray,
            format!(
                "both operands of $setIsSubset must be arrays. First argument is of type: {}",
                type_of(&args[0])
            ),
        ));
    };
    let Some(second) = array_of(&args[1]) else {
        return Err(Error::new(
            ErrorCode::SetIsSubsetSecondNotArray,
            format!(
                "both operands of $setIsSubset must be arrays. Second argument is of type: {}",
                type_of(&args[1])
            ),
        ));
    };
    owned(Bson::Boolean(
        ValueSet::of(first).is_subset_of(&ValueSet::of(second)),
    ))
}

// ---------------------------------------------------------------------------
// Objects.

fn op_merge_objects<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let mut out = Document::new();
    let mut budget = SizeBudget::new();
    for arg in args {
        match arg.as_deref() {
            None | Some(Bson::Null | Bson::Undefined) => {}
            Some(Bson::Document(doc)) => {
                for (k, v) in doc {
                    insert_within(&mut out, &mut budget, k, v)?;
                }
            }
            Some(other) => {
                return Err(Error::new(
                    ErrorCode::MergeObjectsNotObject,
                    format!(
                        "$mergeObjects requires object inputs, but input {other} is of type {}",
                        type_name(other)
                    ),
                ))
            }
        }
    }
    owned(Bson::Document(out))
}

/// Inserts a field into a document being built, replacing an earlier one
/// of the same name, after checking the document stays within its size.
fn insert_within(
    out: &mut Document,
    budget: &mut SizeBudget,
    key: &str,
    value: &Bson,
) -> Result<()> {
    if let Some(old) = out.get(key) {
        budget.release(field_size(key, old));
    }
    budget.add_field(key, value)?;
    out.insert(key.to_string(), value.clone());
    Ok(())
}

fn op_object_to_array<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    if is_nullish(&args[0]) {
        return owned(Bson::Null);
    }
    let Some(Bson::Document(doc)) = args[0].as_deref() else {
        return Err(Error::new(
            ErrorCode::ObjectToArrayNotObject,
            format!(
                "$objectToArray requires a document input, found: {}",
                type_of(&args[0])
            ),
        ));
    };
    // Every field becomes a `{k, v}` document: the result outgrows its input.
    let mut budget = SizeBudget::new();
    let mut out = Vec::with_capacity(doc.len());
    for (i, (k, v)) in doc.iter().enumerate() {
        let value = measure(v);
        let pair = Shape {
            // {k: <string>, v: <value>}
            size: (5 + 3 + 5 + k.len() + 1 + 3).saturating_add(value.size),
            depth: value.depth + 1,
        };
        budget.charge(element_header(i), pair)?;
        let mut pair = Document::new();
        pair.insert("k", k.clone());
        pair.insert("v", v.clone());
        out.push(Bson::Document(pair));
    }
    owned(Bson::Array(out))
}

fn op_array_to_object<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    if is_nullish(&args[0]) {
        return owned(Bson::Null);
    }
    let Some(items) = array_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::ArrayToObjectNotArray,
            format!(
                "$arrayToObject requires an array input, found: {}",
                type_of(&args[0])
            ),
        ));
    };
    let pairs_are_arrays = match items.first() {
        None => return owned(Bson::Document(Document::new())),
        Some(Bson::Array(_)) => true,
        Some(Bson::Document(_)) => false,
        Some(other) => {
            return Err(Error::new(
                ErrorCode::ArrayToObjectElementWrongType,
                format!(
                    "Unrecognised input type format for $arrayToObject: {}",
                    type_name(other)
                ),
            ))
        }
    };
    let mut out = Document::new();
    let mut budget = SizeBudget::new();
    for item in items {
        let (key, value) = match item {
            Bson::Array(pair) if pairs_are_arrays => {
                if pair.len() != 2 {
                    return Err(Error::new(
                        ErrorCode::ArrayToObjectArrayNotPair,
                        format!(
                            "$arrayToObject requires an array of size 2 arrays,found array of \
                             size: {}",
                            pair.len()
                        ),
                    ));
                }
                let Bson::String(k) = &pair[0] else {
                    return Err(Error::new(
                        ErrorCode::ArrayToObjectArrayKeyNotString,
                        format!(
                            "$arrayToObject requires an array of key-value pairs, where the key \
                             must be of type string. Found key type: {}",
                            type_name(&pair[0])
                        ),
                    ));
                };
                (k, &pair[1])
            }
            Bson::Document(pair) if !pairs_are_arrays => {
                if pair.len() != 2 {
                    return Err(Error::new(
                        ErrorCode::ArrayToObjectPairWrongKeyCount,
                        format!(
                            "$arrayToObject requires an object keys of 'k' and 'v'. Found \
                             incorrect number of keys:{}",
                            pair.len()
                        ),
                    ));
                }
                let (Some(k), Some(v)) = (pair.get("k"), pair.get("v")) else {
                    return Err(Error::new(
                        ErrorCode::ArrayToObjectPairMissingKOrV,
                        format!(
                            "$arrayToObject requires an object with keys 'k' and 'v'. Missing \
                             either or both keys from: {pair}"
                        ),
                    ));
                };
                let Bson::String(k) = k else {
                    return Err(Error::new(
                        ErrorCode::ArrayToObjectPairKeyNotString,
                        format!(
                            "$arrayToObject requires an object with keys 'k' and 'v', where the \
                             value of 'k' must be of type string. Found type: {}",
                            type_name(k)
                        ),
                    ));
                };
                (k, v)
            }
            other => {
                return Err(Error::new(
                    ErrorCode::ArrayToObjectMixedForms,
                    format!(
                        "$arrayToObject requires a consistent input format. Elements must all \
                         be arrays or all be objects. Found: {}",
                        type_name(other)
                    ),
                ))
            }
        };
        if key.contains('\0') {
            return Err(Error::new(
                ErrorCode::ArrayToObjectKeyNullByte,
                "Key field cannot contain an embedded null byte".to_string(),
            ));
        }
        insert_within(&mut out, &mut budget, key, value)?;
    }
    owned(Bson::Document(out))
}

/// `$getField: {field, input}` or `$getField: "name"` (input `$$CURRENT`).
/// A document whose first key is an operator (`{$literal: "$price"}`,
/// how a `$`-prefixed name is written) is the short form too.
fn get_field_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Ok(None);
    };
    if doc.keys().next().is_some_and(|k| k.starts_with('$')) {
        return Ok(Some(vec![
            arg.clone(),
            Bson::String("$$CURRENT".to_string()),
        ]));
    }
    let [field, input] = named_args(doc, ["field", "input"], |k| {
        Error::new(
            ErrorCode::GetFieldUnknownArgument,
            format!("$getField found an unknown argument: {k}"),
        )
    })?;
    let field = field.ok_or_else(|| {
        Error::new(
            ErrorCode::GetFieldMissingField,
            "$getField requires 'field' to be specified",
        )
    })?;
    let input = input.unwrap_or_else(|| Bson::String("$$CURRENT".to_string()));
    Ok(Some(vec![field, input]))
}

fn op_get_field<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    if args.len() > 2 {
        return Err(Error::new(
            ErrorCode::GetFieldTooManyArguments,
            "$getField only supports an object or a string as its argument".to_string(),
        ));
    }
    let field = eval(&args[0], scope)?;
    let Some(Bson::String(field)) = field.as_deref() else {
        return Err(Error::new(
            ErrorCode::GetFieldFieldNotString,
            format!(
                "$getField requires 'field' to evaluate to type String, but got {}",
                type_of(&field)
            ),
        ));
    };
    // The string form reads from `$$CURRENT`.
    let input = match args.get(1) {
        Some(node) => eval(node, scope)?,
        None => None,
    };
    let input_doc = match (args.get(1), input.as_deref()) {
        (None, _) => scope.root,
        (Some(_), None) => return Ok(None),
        (Some(_), Some(Bson::Null | Bson::Undefined)) => return owned(Bson::Null),
        (Some(_), Some(Bson::Document(doc))) => doc,
        (Some(_), Some(other)) => {
            return Err(Error::new(
                ErrorCode::GetFieldInputNotObject,
                format!(
                    "$getField requires 'input' to evaluate to type Object, but got {}",
                    type_name(other)
                ),
            ))
        }
    };
    Ok(input_doc.get(field).map(|v| Cow::Owned(v.clone())))
}

fn set_field_object_args(arg: &Bson, op: &str, with_value: bool) -> Result<Vec<Bson>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::SetFieldNotObject,
            format!("{op} only supports an object as its argument"),
        ));
    };
    let unknown = |k: &str| {
        Error::new(
            ErrorCode::SetFieldUnknownArgument,
            format!("{op} found an unknown argument: {k}"),
        )
    };
    let [field, input, value] = if with_value {
        named_args(doc, ["field", "input", "value"], unknown)?
    } else {
        let [field, input] = named_args(doc, ["field", "input"], unknown)?;
        [field, input, None]
    };
    let field = field.ok_or_else(|| {
        Error::new(
            ErrorCode::SetFieldMissingField,
            format!("{op} requires 'field' to be specified"),
        )
    })?;
    let input = input.ok_or_else(|| {
        Error::new(
            ErrorCode::SetFieldMissingInput,
            format!("{op} requires 'input' to be specified"),
        )
    })?;
    let value = if with_value {
        value.ok_or_else(|| {
            Error::new(
                ErrorCode::SetFieldMissingValue,
                format!("{op} requires 'value' to be specified"),
            )
        })?
    } else {
        absent()
    };
    // The field name must be a constant string; a path (`"$a"`) is not one.
    let name = match &field {
        Bson::String(s) if !s.starts_with('$') => field.clone(),
        Bson::Document(d) => match d.get("$literal") {
            Some(Bson::String(s)) if d.len() == 1 => Bson::String(s.clone()),
            _ => {
                return Err(Error::new(
                    ErrorCode::SetFieldFieldNotConstant,
                    format!("{op} requires 'field' to evaluate to a constant, but got a non-constant argument"),
                ))
            }
        },
        Bson::String(_) => {
            return Err(Error::new(
                ErrorCode::SetFieldFieldIsPath,
                format!("A field path reference which is not allowed in this context. Did you mean {{$literal: '{field}'}}?"),
            ))
        }
        other => {
            return Err(Error::new(
                ErrorCode::SetFieldFieldNotString,
                format!("{op} requires 'field' to evaluate to type String, but got {}", type_name(other)),
            ))
        }
    };
    Ok(vec![literal(name), input, value])
}

fn set_field_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    set_field_object_args(arg, "$setField", true).map(Some)
}

fn unset_field_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    set_field_object_args(arg, "$unsetField", false).map(Some)
}

/// `$setField` and `$unsetField` (whose value is always missing): a
/// missing value removes the field.
fn op_set_field<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let Some(Bson::String(field)) = args[0].as_deref() else {
        return owned(Bson::Null);
    };
    let mut doc = match args[1].as_deref() {
        None | Some(Bson::Null | Bson::Undefined) => return owned(Bson::Null),
        Some(Bson::Document(doc)) => {
            if let Some(v) = args[2].as_deref() {
                let mut budget = SizeBudget::new();
                budget.add_bytes(crate::query::size::document_size(doc).saturating_sub(5))?;
                if let Some(old) = doc.get(field) {
                    budget.release(field_size(field, old));
                }
                budget.add_field(field, v)?;
            }
            doc.clone()
        }
        Some(other) => {
            return Err(Error::new(
                ErrorCode::SetFieldInputNotObject,
                format!(
                    "$setField requires 'input' to evaluate to type Object, but got {}",
                    type_name(other)
                ),
            ))
        }
    };
    match args[2].as_deref() {
        Some(v) => {
            doc.insert(field.clone(), v.clone());
        }
        None => {
            doc.remove(field);
        }
    }
    owned(Bson::Document(doc))
}

// ---------------------------------------------------------------------------
// $firstN, $lastN, $maxN, $minN on arrays: `{n, input}`.

fn n_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Err(Error::new(
            ErrorCode::NAccumulatorNotObject,
            "Expected an object with 'n' and 'input'".to_string(),
        ));
    };
    let [n, input] = named_args(doc, ["n", "input"], |k| {
        Error::new(
            ErrorCode::NAccumulatorUnknownArgument,
            format!("Unknown argument for 'n' operator: {k}"),
        )
    })?;
    let n =
        n.ok_or_else(|| Error::new(ErrorCode::NAccumulatorMissingN, "Missing value for 'n'"))?;
    let input = input.ok_or_else(|| {
        Error::new(
            ErrorCode::NAccumulatorMissingInput,
            "Missing value for 'input'",
        )
    })?;
    Ok(Some(vec![n, input]))
}

/// The validated `n` and input array of an `N` operator.
fn n_and_input<'v>(args: &'v [Value<'_>], op: &str) -> Result<(usize, &'v [Bson])> {
    let n = &args[0];
    let count = match n.as_deref() {
        Some(v) if crate::query::compare::Number::of(v).is_some() => {
            let exact = match v {
                Bson::Double(d) if d.fract() == 0.0 => Some(*d as i64),
                Bson::Decimal128(d) => DecimalValue::from_decimal128(d).to_i64_exact(),
                Bson::Int32(i) => Some(i64::from(*i)),
                Bson::Int64(i) => Some(*i),
                _ => None,
            };
            exact.ok_or_else(|| {
                Error::new(
                    ErrorCode::NAccumulatorNNotIntegral,
                    format!("Value for 'n' must be of integral type, but found {v}"),
                )
            })?
        }
        _ => {
            return Err(Error::new(
                ErrorCode::NAccumulatorNNotIntegral,
                format!(
                    "Value for 'n' must be of integral type, but found {}",
                    value_text(n)
                ),
            ))
        }
    };
    if count < 1 {
        return Err(Error::new(
            ErrorCode::NAccumulatorNNotPositive,
            format!("'n' must be greater than 0, found {count}"),
        ));
    }
    let Some(items) = array_of(&args[1]) else {
        return Err(Error::new(
            ErrorCode::NOperatorInputNotArray,
            format!(
                "Input to {op} must be an array, but found: {}",
                type_of(&args[1])
            ),
        ));
    };
    Ok((usize::try_from(count).unwrap_or(usize::MAX), items))
}

fn op_first_n<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let (n, items) = n_and_input(args, "$firstN")?;
    owned(Bson::Array(items.iter().take(n).cloned().collect()))
}

fn op_last_n<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let (n, items) = n_and_input(args, "$lastN")?;
    let skip = items.len().saturating_sub(n);
    owned(Bson::Array(items[skip..].to_vec()))
}

/// `$maxN` and `$minN`: the `n` largest or smallest non-null elements,
/// largest (or smallest) first.
fn extreme_n<'a>(args: &[Value<'a>], op: &str, largest: bool) -> Result<Value<'a>> {
    let (n, items) = n_and_input(args, op)?;
    let mut kept: Vec<Bson> = items
        .iter()
        .filter(|v| !matches!(v, Bson::Null | Bson::Undefined))
        .cloned()
        .collect();
    if largest {
        kept.sort_by(|a, b| compare(b, a));
    } else {
        kept.sort_by(compare);
    }
    kept.truncate(n);
    owned(Bson::Array(kept))
}

fn op_max_n<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    extreme_n(args, "$maxN", true)
}

fn op_min_n<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    extreme_n(args, "$minN", false)
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc, Bson, Document};

    use super::super::Expr;

    /// The document every case is evaluated against.
    fn root() -> Document {
        doc! {
            "a": [1, 2, 3, 4],
            "n": null,
            "o": {"x": 1, "y": {"z": 2}},
            "people": [{"name": "b", "age": 30}, {"name": "a", "age": 40}, {"name": "c", "age": 20}],
            "k": 2,
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

    fn missing(expr: Bson) {
        let e = Expr::parse(&expr).unwrap();
        assert_eq!(e.evaluate_value(&root()).unwrap(), None, "{expr}");
    }

    #[test]
    fn element_access() {
        check(vec![
            (bson!({"$arrayElemAt": ["$a", 0]}), Ok(bson!(1))),
            (bson!({"$arrayElemAt": ["$a", -1]}), Ok(bson!(4))),
            (bson!({"$arrayElemAt": ["$a", 1.0]}), Ok(bson!(2))),
            (bson!({"$arrayElemAt": ["$a", 9]}), Ok(Bson::Null)),
            (bson!({"$arrayElemAt": [null, 0]}), Ok(Bson::Null)),
            (bson!({"$arrayElemAt": ["$a", "$missing"]}), Ok(Bson::Null)),
            (bson!({"$arrayElemAt": [1, 0]}), Err(28689)),
            (bson!({"$arrayElemAt": ["$a", "0"]}), Err(28690)),
            (bson!({"$arrayElemAt": ["$a", 1.5]}), Err(28691)),
            (bson!({"$first": "$a"}), Ok(bson!(1))),
            (bson!({"$last": "$a"}), Ok(bson!(4))),
            (bson!({"$first": "$missing"}), Ok(Bson::Null)),
            (bson!({"$last": 1}), Err(28689)),
            (bson!({"$isArray": "$a"}), Ok(bson!(true))),
            (bson!({"$isArray": ["$n"]}), Ok(bson!(false))),
            (bson!({"$isArray": "$missing"}), Ok(bson!(false))),
            (bson!({"$slice": ["$a", 2]}), Ok(bson!([1, 2]))),
            (bson!({"$slice": ["$a", -2]}), Ok(bson!([3, 4]))),
            (bson!({"$slice": ["$a", -9]}), Ok(bson!([1, 2, 3, 4]))),
            (bson!({"$slice": ["$a", 1, 2]}), Ok(bson!([2, 3]))),
            (bson!({"$slice": ["$a", -3, 2]}), Ok(bson!([2, 3]))),
            (bson!({"$slice": ["$a", 9, 2]}), Ok(bson!([]))),
            (bson!({"$slice": [null, 1]}), Ok(Bson::Null)),
            (bson!({"$slice": [1, 1]}), Err(28724)),
            (bson!({"$slice": ["$a", "1"]}), Err(28725)),
            (bson!({"$slice": ["$a", 1.5]}), Err(28726)),
            (bson!({"$slice": ["$a", 1, "1"]}), Err(28727)),
            (bson!({"$slice": ["$a", 1, 0]}), Err(28729)),
            (bson!({"$slice": ["$a", 1, 1, 1]}), Err(28667)),
            (bson!({"$range": [0, 1, 1, 1]}), Err(28667)),
            (bson!({"$indexOfArray": ["$a", 3]}), Ok(bson!(2))),
            (bson!({"$indexOfArray": ["$a", 3.0, 1, 3]}), Ok(bson!(2))),
            (bson!({"$indexOfArray": ["$a", 3, 3]}), Ok(bson!(-1))),
            (bson!({"$indexOfArray": ["$a", 9]}), Ok(bson!(-1))),
            (bson!({"$indexOfArray": [null, 9]}), Ok(Bson::Null)),
            (bson!({"$indexOfArray": [1, 9]}), Err(40090)),
            (bson!({"$indexOfArray": ["$a", 1, -1]}), Err(40097)),
        ]);
        missing(bson!({"$arrayElemAt": ["$a", 9]}));
        missing(bson!({"$first": [[]]}));
    }

    #[test]
    fn building_arrays() {
        check(vec![
            (
                bson!({"$concatArrays": ["$a", [5], []]}),
                Ok(bson!([1, 2, 3, 4, 5])),
            ),
            (bson!({"$concatArrays": ["$a", null]}), Ok(Bson::Null)),
            (bson!({"$concatArrays": ["$a", 1]}), Err(28664)),
            (bson!({"$reverseArray": "$a"}), Ok(bson!([4, 3, 2, 1]))),
            (bson!({"$reverseArray": "$missing"}), Ok(Bson::Null)),
            (bson!({"$reverseArray": 1}), Err(34435)),
            (bson!({"$range": [0, 5, 2]}), Ok(bson!([0, 2, 4]))),
            (bson!({"$range": [5, 0, -2]}), Ok(bson!([5, 3, 1]))),
            (bson!({"$range": [0, 3]}), Ok(bson!([0, 1, 2]))),
            (bson!({"$range": [3, 0]}), Ok(bson!([]))),
            (bson!({"$range": [null, 3]}), Err(34443)),
            (bson!({"$range": [0.5, 3]}), Err(34444)),
            (bson!({"$range": [0, "3"]}), Err(34445)),
            (bson!({"$range": [0, 3, 0]}), Err(34449)),
            (bson!({"$range": [0, i32::MAX]}), Err(146)),
            (
                bson!({"$zip": {"inputs": ["$a", ["x", "y"]]}}),
                Ok(bson!([[1, "x"], [2, "y"]])),
            ),
            (
                bson!({"$zip": {"inputs": [[1, 2], ["x"]], "useLongestLength": true,
                                "defaults": [0, "d"]}}),
                Ok(bson!([[1, "x"], [2, "d"]])),
            ),
            (
                bson!({"$zip": {"inputs": [[1, 2], ["x"]], "useLongestLength": true}}),
                Ok(bson!([[1, "x"], [2, null]])),
            ),
            (
                bson!({"$zip": {"inputs": [[1], "$missing"]}}),
                Ok(Bson::Null),
            ),
            (bson!({"$zip": {"inputs": [[1], 1]}}), Err(34468)),
            (bson!({"$zip": {"inputs": []}}), Err(34465)),
            (bson!({"$zip": {"inputs": "$a"}}), Err(34461)),
            (
                bson!({"$zip": {"inputs": [[1]], "defaults": [1]}}),
                Err(34466),
            ),
            (
                bson!({"$zip": {"inputs": [[1]], "useLongestLength": true, "defaults": [1, 2]}}),
                Err(34467),
            ),
            (
                bson!({"$zip": {"inputs": [[1]], "useLongestLength": 1}}),
                Err(34463),
            ),
            (bson!({"$zip": {"inputs": [[1]], "x": 1}}), Err(34464)),
        ]);
    }

    #[test]
    fn filter_map_reduce() {
        check(vec![
            (
                bson!({"$filter": {"input": "$a", "cond": {"$gt": ["$$this", 2]}}}),
                Ok(bson!([3, 4])),
            ),
            (
                bson!({"$filter": {"input": "$a", "as": "v", "cond": {"$gte": ["$$v", "$k"]},
                                   "limit": 2}}),
                Ok(bson!([2, 3])),
            ),
            (
                bson!({"$filter": {"input": "$a", "cond": true, "limit": null}}),
                Ok(bson!([1, 2, 3, 4])),
            ),
            (
                bson!({"$filter": {"input": null, "cond": true}}),
                Ok(Bson::Null),
            ),
            (bson!({"$filter": {"input": 1, "cond": true}}), Err(28651)),
            (bson!({"$filter": {"cond": true}}), Err(28648)),
            (bson!({"$filter": {"input": "$a"}}), Err(28650)),
            (
                bson!({"$filter": {"input": "$a", "cond": true, "x": 1}}),
                Err(28647),
            ),
            (
                bson!({"$filter": {"input": "$a", "cond": true, "limit": 0}}),
                Err(327392),
            ),
            (
                bson!({"$filter": {"input": "$a", "cond": true, "limit": 1.5}}),
                Err(327391),
            ),
            (
                bson!({"$filter": {"input": "$a", "as": "Bad", "cond": true}}),
                Err(16867),
            ),
            (
                bson!({"$map": {"input": "$a", "as": "x", "in": {"$multiply": ["$$x", "$k"]}}}),
                Ok(bson!([2, 4, 6, 8])),
            ),
            (
                bson!({"$map": {"input": "$people", "in": "$$this.name"}}),
                Ok(bson!(["b", "a", "c"])),
            ),
            (
                bson!({"$map": {"input": [1], "in": "$$this.nope"}}),
                Ok(bson!([null])),
            ),
            (
                bson!({"$map": {"input": "$missing", "in": 1}}),
                Ok(Bson::Null),
            ),
            (bson!({"$map": {"input": "x", "in": 1}}), Err(16883)),
            (bson!({"$map": {"in": 1}}), Err(16880)),
            (bson!({"$map": {"input": []}}), Err(16882)),
            (bson!({"$map": {"input": [], "in": 1, "x": 1}}), Err(16879)),
            (
                bson!({"$reduce": {"input": "$a", "initialValue": 0,
                                   "in": {"$add": ["$$value", "$$this"]}}}),
                Ok(bson!(10)),
            ),
            (
                bson!({"$reduce": {"input": [[1], [2, 3]], "initialValue": [],
                                   "in": {"$concatArrays": ["$$value", "$$this"]}}}),
                Ok(bson!([1, 2, 3])),
            ),
            (
                bson!({"$reduce": {"input": [], "initialValue": "x", "in": 1}}),
                Ok(bson!("x")),
            ),
            (
                bson!({"$reduce": {"input": null, "initialValue": 0, "in": 1}}),
                Ok(Bson::Null),
            ),
            (
                bson!({"$reduce": {"input": 1, "initialValue": 0, "in": 1}}),
                Err(40080),
            ),
            (bson!({"$reduce": {"initialValue": 0, "in": 1}}), Err(40077)),
            (bson!({"$reduce": {"input": [], "in": 1}}), Err(40078)),
            (
                bson!({"$reduce": {"input": [], "initialValue": 0}}),
                Err(40079),
            ),
            (
                bson!({"$reduce": {"input": [], "initialValue": 0, "in": 1, "x": 1}}),
                Err(40076),
            ),
            // Nested bindings see the outer ones.
            (
                bson!({"$map": {"input": [1, 2], "as": "o", "in": {
                    "$map": {"input": [10], "in": {"$add": ["$$o", "$$this"]}}}}}),
                Ok(bson!([[11], [12]])),
            ),
        ]);
        // The bound name is not visible outside.
        assert!(Expr::parse(&bson!({"$concatArrays": [
            {"$map": {"input": [1], "as": "q", "in": "$$q"}}, "$$q"]}))
        .unwrap()
        .evaluate(&root())
        .is_err());
    }

    #[test]
    fn sort_array() {
        check(vec![
            (
                bson!({"$sortArray": {"input": [3, 1, "a", 2], "sortBy": 1}}),
                Ok(bson!([1, 2, 3, "a"])),
            ),
            (
                bson!({"$sortArray": {"input": "$a", "sortBy": -1}}),
                Ok(bson!([4, 3, 2, 1])),
            ),
            (
                bson!({"$sortArray": {"input": "$people", "sortBy": {"age": -1}}}),
                Ok(bson!([{"name": "a", "age": 40}, {"name": "b", "age": 30},
                          {"name": "c", "age": 20}])),
            ),
            (
                bson!({"$sortArray": {"input": [{"p": {"q": 2}}, {"p": {"q": 1}}, 5],
                                      "sortBy": {"p.q": 1}}}),
                Ok(bson!([5, {"p": {"q": 1}}, {"p": {"q": 2}}])),
            ),
            (
                bson!({"$sortArray": {"input": [{"v": [5, 1]}, {"v": 3}], "sortBy": {"v": 1}}}),
                Ok(bson!([{"v": [5, 1]}, {"v": 3}])),
            ),
            (
                bson!({"$sortArray": {"input": [{"v": [5, 1]}, {"v": 3}], "sortBy": {"v": -1}}}),
                Ok(bson!([{"v": [5, 1]}, {"v": 3}])),
            ),
            (
                bson!({"$sortArray": {"input": null, "sortBy": 1}}),
                Ok(Bson::Null),
            ),
            (
                bson!({"$sortArray": {"input": 1, "sortBy": 1}}),
                Err(2942504),
            ),
            (
                bson!({"$sortArray": {"input": [], "sortBy": 2}}),
                Err(2942505),
            ),
            (bson!({"$sortArray": {"sortBy": 1}}), Err(2942502)),
            (bson!({"$sortArray": {"input": []}}), Err(2942503)),
            (
                bson!({"$sortArray": {"input": [], "sortBy": 1, "x": 1}}),
                Err(2942501),
            ),
        ]);
    }

    #[test]
    fn sets_and_element_truth() {
        check(vec![
            (
                bson!({"$allElementsTrue": [[1, true, "x"]]}),
                Ok(bson!(true)),
            ),
            (bson!({"$allElementsTrue": [[1, 0]]}), Ok(bson!(false))),
            (bson!({"$allElementsTrue": [[]]}), Ok(bson!(true))),
            (
                bson!({"$anyElementTrue": [[0, null, false]]}),
                Ok(bson!(false)),
            ),
            (bson!({"$anyElementTrue": [[0, [0]]]}), Ok(bson!(true))),
            (bson!({"$allElementsTrue": null}), Err(17040)),
            (bson!({"$anyElementTrue": "$missing"}), Err(17041)),
            (
                bson!({"$setUnion": [[1, 2, 1], [2.0, 3]]}),
                Ok(bson!([1, 2, 3])),
            ),
            (bson!({"$setUnion": []}), Ok(bson!([]))),
            (bson!({"$setUnion": [[1], null]}), Ok(Bson::Null)),
            (bson!({"$setUnion": [[1], 1]}), Err(17043)),
            (
                bson!({"$setIntersection": [[1, 2, 3, 3], [3, 2, 5]]}),
                Ok(bson!([2, 3])),
            ),
            (bson!({"$setIntersection": []}), Ok(bson!([]))),
            (
                bson!({"$setIntersection": ["$missing", [1]]}),
                Ok(Bson::Null),
            ),
            (bson!({"$setIntersection": [[1], "x"]}), Err(17047)),
            (
                bson!({"$setDifference": [[1, 2, 2, 3], [2]]}),
                Ok(bson!([1, 3])),
            ),
            (bson!({"$setDifference": [null, [2]]}), Ok(Bson::Null)),
            (bson!({"$setDifference": [1, [2]]}), Err(17048)),
            (bson!({"$setDifference": [[1], 2]}), Err(17049)),
            (
                bson!({"$setEquals": [[1, 2, 2], [2, 1], [1, 2.0]]}),
                Ok(bson!(true)),
            ),
            (bson!({"$setEquals": [[1], [1, 2]]}), Ok(bson!(false))),
            (bson!({"$setEquals": [[1], null]}), Err(17044)),
            (bson!({"$setEquals": [[1]]}), Err(16020)),
            (bson!({"$setIsSubset": [[1, 1], [1, 2]]}), Ok(bson!(true))),
            (bson!({"$setIsSubset": [[3], [1, 2]]}), Ok(bson!(false))),
            (bson!({"$setIsSubset": [null, [1]]}), Err(17046)),
            (bson!({"$setIsSubset": [[1], null]}), Err(17042)),
        ]);
    }

    #[test]
    fn objects() {
        check(vec![
            (
                bson!({"$mergeObjects": ["$o", null, {"x": 5, "w": 1}, "$missing"]}),
                Ok(bson!({"x": 5, "y": {"z": 2}, "w": 1})),
            ),
            (bson!({"$mergeObjects": []}), Ok(bson!({}))),
            (bson!({"$mergeObjects": ["$n"]}), Ok(bson!({}))),
            (bson!({"$mergeObjects": [{}, 1]}), Err(40400)),
            (
                bson!({"$objectToArray": "$o"}),
                Ok(bson!([{"k": "x", "v": 1}, {"k": "y", "v": {"z": 2}}])),
            ),
            (bson!({"$objectToArray": null}), Ok(Bson::Null)),
            (bson!({"$objectToArray": [[1]]}), Err(40390)),
            (
                bson!({"$arrayToObject": [[["a", 1], ["b", 2], ["a", 3]]]}),
                Ok(bson!({"a": 3, "b": 2})),
            ),
            (
                bson!({"$arrayToObject": [[{"k": "a", "v": 1}, {"v": 2, "k": "b"}]]}),
                Ok(bson!({"a": 1, "b": 2})),
            ),
            (bson!({"$arrayToObject": [[]]}), Ok(bson!({}))),
            (bson!({"$arrayToObject": "$missing"}), Ok(Bson::Null)),
            (bson!({"$arrayToObject": 1}), Err(40386)),
            (bson!({"$arrayToObject": [[1]]}), Err(40398)),
            (
                bson!({"$arrayToObject": [[["a", 1], {"k": "b", "v": 1}]]}),
                Err(40391),
            ),
            (bson!({"$arrayToObject": [[["a"]]]}), Err(40397)),
            (bson!({"$arrayToObject": [[[1, 2]]]}), Err(40395)),
            (bson!({"$arrayToObject": [[{"k": "a"}]]}), Err(40392)),
            (
                bson!({"$arrayToObject": [[{"k": "a", "x": 1}]]}),
                Err(40393),
            ),
            (bson!({"$arrayToObject": [[{"k": 1, "v": 1}]]}), Err(40394)),
            (bson!({"$getField": "k"}), Ok(bson!(2))),
            (
                bson!({"$getField": {"field": "x", "input": "$o"}}),
                Ok(bson!(1)),
            ),
            (
                bson!({"$getField": {"field": "a.b", "input": {"$literal": {"a.b": 7}}}}),
                Ok(bson!(7)),
            ),
            (
                bson!({"$getField": {"field": "x", "input": null}}),
                Ok(Bson::Null),
            ),
            (
                bson!({"$getField": {"field": "x", "input": 1}}),
                Err(3041705),
            ),
            (
                bson!({"$getField": {"field": 1, "input": {}}}),
                Err(5654602),
            ),
            (bson!({"$getField": {"input": {}}}), Err(3041702)),
            (bson!({"$getField": {"field": "x", "y": 1}}), Err(3041701)),
            (
                bson!({"$setField": {"field": "x", "input": "$o", "value": 9}}),
                Ok(bson!({"x": 9, "y": {"z": 2}})),
            ),
            (
                bson!({"$setField": {"field": "new", "input": {}, "value": "$k"}}),
                Ok(bson!({"new": 2})),
            ),
            (
                bson!({"$setField": {"field": "x", "input": "$o", "value": "$$REMOVE"}}),
                Ok(bson!({"y": {"z": 2}})),
            ),
            (
                bson!({"$setField": {"field": {"$literal": "$p"}, "input": {}, "value": 1}}),
                Ok(bson!({"$p": 1})),
            ),
            (
                bson!({"$setField": {"field": "x", "input": null, "value": 1}}),
                Ok(Bson::Null),
            ),
            (
                bson!({"$setField": {"field": "x", "input": 1, "value": 1}}),
                Err(4161105),
            ),
            (
                bson!({"$setField": {"field": 1, "input": {}, "value": 1}}),
                Err(4161107),
            ),
            (
                bson!({"$setField": {"input": {}, "value": 1}}),
                Err(4161102),
            ),
            (
                bson!({"$setField": {"field": "x", "value": 1}}),
                Err(4161103),
            ),
            (
                bson!({"$setField": {"field": "x", "input": {}}}),
                Err(4161104),
            ),
            (
                bson!({"$unsetField": {"field": "x", "input": "$o"}}),
                Ok(bson!({"y": {"z": 2}})),
            ),
            (
                bson!({"$unsetField": {"field": "x", "input": "$o", "value": 1}}),
                Err(4161101),
            ),
        ]);
        missing(bson!({"$getField": "nope"}));
    }

    #[test]
    fn n_operators() {
        check(vec![
            (
                bson!({"$firstN": {"n": 2, "input": "$a"}}),
                Ok(bson!([1, 2])),
            ),
            (
                bson!({"$firstN": {"n": 9, "input": "$a"}}),
                Ok(bson!([1, 2, 3, 4])),
            ),
            (
                bson!({"$lastN": {"n": "$k", "input": "$a"}}),
                Ok(bson!([3, 4])),
            ),
            (
                bson!({"$maxN": {"n": 2, "input": [3, null, 7, 1]}}),
                Ok(bson!([7, 3])),
            ),
            (
                bson!({"$minN": {"n": 2.0, "input": [3, null, 7, 1]}}),
                Ok(bson!([1, 3])),
            ),
            (bson!({"$firstN": {"n": 0, "input": "$a"}}), Err(5787908)),
            (bson!({"$firstN": {"n": 1.5, "input": "$a"}}), Err(5787902)),
            (bson!({"$lastN": {"n": 1, "input": 5}}), Err(5788200)),
            (bson!({"$firstN": {"n": 1}}), Err(5787907)),
            (bson!({"$firstN": {"input": []}}), Err(5787906)),
            (
                bson!({"$firstN": {"n": 1, "input": [], "x": 1}}),
                Err(5787901),
            ),
        ]);
    }
}
