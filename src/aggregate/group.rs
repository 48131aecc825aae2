//! `$group` and its accumulators, with partial groups per partition and a
//! final group at the router; `$bucket`, `$bucketAuto`, and `$sortByCount`
//! (a `$group` then a `$sort`).
//!
//! Every accumulator has a *state* that takes documents one at a time, can
//! be written out as a partial value (a BSON value) and can absorb another
//! state's partial value. That one mechanism serves three purposes:
//! - the per-partition `$group` emits `{_id, field: partial}` and the
//!   router's final `$group` merges partials (sums of sums, `$avg` as
//!   `{sum, count}`, standard deviations as `{n, mean, m2}`, ...);
//! - a `$group` past its memory limit spills partial states sorted by
//!   group key and merges the runs when read;
//! - `$bucket` and `$bucketAuto` reuse the accumulators.
//!
//! Order-sensitive accumulators (`$first`, `$last`, `$firstN`, `$lastN`,
//! `$push`, `$mergeObjects`) only merge correctly in input order, which a
//! spill keeps but partitions do not: a `$group` using them runs whole at
//! the router.
//!
//! Group keys compare with MongoDB's equality (`1`, `1.0` and
//! `NumberLong(1)` group together) through the order-preserving key
//! encoding of `storage::keystring`.

use std::collections::{HashMap, HashSet};
use std::iter::Peekable;
use std::sync::Arc;

use bson::{doc, Binary, Bson, Document, RawBsonRef, RawDocument};

use super::basic::{eval, Chain};
use super::spill::{
    approx_size, bucket_auto_memory_error, group_memory_error, park, KeyedSort, KeyedStream,
    MergedRuns, SpillRun,
};
use super::{Context, DocStream, InputDoc, InputStream, ParseContext, Split, Stage, StageParser};
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::{compare, type_name, DecimalValue, Number};
use crate::query::expr::{Expr, RawValue};
use crate::query::js::{JsFunction, ScopeBuilder};
use crate::query::keystring::{encode_id, encode_value};
use crate::query::size::{
    accumulator_memory_error, field_size, SizeBudget, ACCUMULATOR_MEMORY_LIMIT,
};
use crate::query::sort::SortSpec;

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] = &[
    ("$bucket", parse_bucket),
    ("$bucketAuto", parse_bucket_auto),
    ("$group", parse_group),
    ("$sortByCount", parse_sort_by_count),
];

fn loc(code: ErrorCode, message: impl Into<String>) -> Error {
    Error::new(code, message)
}

/// Bytes charged per group and per accumulator state besides their values.
const GROUP_OVERHEAD: usize = 64;

// ---------------------------------------------------------------------------
// Accumulators

#[derive(Debug, Clone)]
enum Op {
    Sum,
    Avg,
    Min,
    Max,
    First,
    Last,
    Push,
    AddToSet,
    Count,
    MergeObjects,
    StdDevPop,
    StdDevSamp,
    /// `$top`/`$bottom` (`n: None`, one value) and `$topN`/`$bottomN`.
    Sorted {
        sort: SortSpec,
        n: Option<usize>,
        bottom: bool,
    },
    FirstN(usize),
    LastN(usize),
    MaxN(usize),
    MinN(usize),
    /// `$accumulator`: JavaScript's `init`, `accumulate`, `merge` and
    /// `finalize`.
    Js(Arc<JsAccumulator>),
    /// `$_internalJsReduce`: `mapReduce`'s reduce function over the
    /// values emitted for one key.
    JsReduce(JsFunction),
}

/// Values one `$_internalJsReduce` state holds before it reduces them
/// to one (MongoDB reduces in batches under a document's size too).
const REDUCE_BATCH_BYTES: usize = 4 << 20;

/// `$_internalJsReduce: {data: <expression giving {k, v}>, eval: <reduce>}`.
fn parse_js_reduce(arg: &Bson) -> Result<(Op, Expr)> {
    let code = |n: i32, message: String| Error::new(ErrorCode::from_number(n), message);
    let Bson::Document(spec) = arg else {
        return Err(code(
            31326,
            format!(
                "$_internalJsReduce requires a document argument, but found {}",
                type_name(arg)
            ),
        ));
    };
    let (mut source, mut data) = (None, None);
    for (name, value) in spec {
        match name.as_str() {
            "eval" => match value {
                Bson::String(s) | Bson::JavaScriptCode(s) => source = Some(s.clone()),
                other => {
                    return Err(code(
                        31244,
                        format!(
                            "$_internalJsReduce requires the 'eval' argument to be of type string, or code but found {}",
                            type_name(other)
                        ),
                    ))
                }
            },
            "data" => data = Some(Expr::parse(value)?),
            "_internalScope" => {}
            _ => {
                return Err(code(
                    31243,
                    format!("Invalid argument specified to $_internalJsReduce: {name}"),
                ))
            }
        }
    }
    let Some(source) = source else {
        return Err(code(
            31245,
            "$_internalJsReduce requires 'eval' argument".into(),
        ));
    };
    let Some(data) = data else {
        return Err(code(
            31349,
            "$_internalJsReduce requires 'data' argument".into(),
        ));
    };
    if !crate::query::js::enabled() {
        return Err(crate::query::js::map_reduce_disabled_error());
    }
    let globals = match spec.get("_internalScope") {
        Some(Bson::Document(d)) => d.clone(),
        _ => Document::new(),
    };
    let mut builder = ScopeBuilder::new(globals);
    builder.add(&source);
    let function = builder
        .finish()
        .pop()
        .ok_or_else(|| Error::internal("no reduce function"))?;
    function.check()?;
    Ok((Op::JsReduce(function), data))
}

/// `reduce(key, values)`.
fn js_reduce(function: &JsFunction, key: &Option<Bson>, values: Vec<Bson>) -> Result<Bson> {
    let key = key.clone().unwrap_or(Bson::Null);
    function.call(None, &[key, Bson::Array(values)])
}

/// The functions of an `$accumulator`, compiled in one scope, and its
/// `initArgs` (evaluated on each group's first document).
#[derive(Debug)]
struct JsAccumulator {
    init: JsFunction,
    init_args: Expr,
    accumulate: JsFunction,
    merge: JsFunction,
    finalize: Option<JsFunction>,
}

/// `$accumulator: {init, initArgs, accumulate, accumulateArgs, merge,
/// finalize, lang: "js"}`, with MongoDB's checks and codes.
fn parse_js_accumulator(arg: &Bson) -> Result<(Op, Expr)> {
    let code = |n: i32, message: String| Error::new(ErrorCode::from_number(n), message);
    let Bson::Document(spec) = arg else {
        return Err(code(
            4544703,
            format!(
                "$accumulator expects an object as an argument; found: {}",
                type_name(arg)
            ),
        ));
    };
    let mut builder = ScopeBuilder::new(Document::new());
    let (mut init, mut accumulate, mut merge, mut finalize) = (None, None, None, None);
    let (mut init_args, mut accumulate_args) = (None, None);
    for (name, value) in spec {
        let mut function = |field: &str| -> Result<usize> {
            let parsed = Expr::parse(value)?;
            if !parsed.is_constant() {
                return Err(code(
                    4544701,
                    format!("$accumulator '{field}' must be a constant expression"),
                ));
            }
            match parsed.evaluate(&Document::new())? {
                Bson::String(s) | Bson::JavaScriptCode(s) => Ok(builder.add(&s)),
                _ => Err(code(
                    4544702,
                    format!("$accumulator '{field}' must be a String or Code"),
                )),
            }
        };
        match name.as_str() {
            "init" => init = Some(function("init")?),
            "accumulate" => accumulate = Some(function("accumulate")?),
            "merge" => merge = Some(function("merge")?),
            "finalize" => finalize = Some(function("finalize")?),
            "initArgs" => init_args = Some(Expr::parse(value)?),
            "accumulateArgs" => accumulate_args = Some(Expr::parse(value)?),
            "lang" => match value {
                Bson::String(lang) if lang == "js" => {}
                Bson::String(_) => {
                    return Err(code(
                        4544705,
                        "$accumulator only supports lang: 'js'".into(),
                    ))
                }
                other => {
                    return Err(code(
                        4544704,
                        format!(
                            "$accumulator lang must be a string; found: {}",
                            type_name(other)
                        ),
                    ))
                }
            },
            other => {
                return Err(code(
                    4544706,
                    format!("$accumulator got an unexpected field: {other}"),
                ))
            }
        }
    }
    let Some(init) = init else {
        return Err(code(
            4544707,
            "$accumulator missing required argument 'init'".into(),
        ));
    };
    let Some(accumulate) = accumulate else {
        return Err(code(
            4544708,
            "$accumulator missing required argument 'accumulate'".into(),
        ));
    };
    let Some(merge) = merge else {
        return Err(code(
            4544709,
            "$accumulator missing required argument 'merge'".into(),
        ));
    };
    let Some(accumulate_args) = accumulate_args else {
        return Err(code(
            4544710,
            "$accumulator missing required argument 'accumulateArgs'".into(),
        ));
    };
    if !crate::query::js::enabled() {
        return Err(crate::query::js::function_disabled_error());
    }
    let functions = builder.finish();
    let get = |i: usize| {
        functions
            .get(i)
            .cloned()
            .ok_or_else(|| Error::internal("$accumulator function missing"))
    };
    let js = JsAccumulator {
        init: get(init)?,
        init_args: match init_args {
            Some(e) => e,
            None => Expr::parse(&Bson::Array(Vec::new()))?,
        },
        accumulate: get(accumulate)?,
        merge: get(merge)?,
        finalize: finalize.map(get).transpose()?,
    };
    for f in [&js.init, &js.accumulate, &js.merge]
        .into_iter()
        .chain(js.finalize.as_ref())
    {
        f.check()?;
    }
    Ok((Op::Js(Arc::new(js)), accumulate_args))
}

impl JsAccumulator {
    /// A group's first state: `init(...initArgs)`.
    fn start(&self, init_args: Option<Bson>) -> Result<Bson> {
        let args = match init_args {
            Some(Bson::Array(items)) => items,
            other => {
                return Err(Error::new(
                    ErrorCode::from_number(4544711),
                    format!(
                        "$accumulator initArgs must evaluate to an array: {}",
                        other.map_or("missing".to_string(), |v| v.to_string())
                    ),
                ))
            }
        };
        self.init.call(None, &args)
    }

    /// `accumulate(state, ...accumulateArgs)`.
    fn accumulate(&self, state: Bson, args: Option<Bson>) -> Result<Bson> {
        let mut call = vec![state];
        match args {
            Some(Bson::Array(items)) => call.extend(items),
            other => {
                return Err(Error::new(
                    ErrorCode::from_number(4544712),
                    format!(
                        "$accumulator accumulateArgs must evaluate to an array: {}",
                        other.map_or("missing".to_string(), |v| v.to_string())
                    ),
                ))
            }
        }
        self.accumulate.call(None, &call)
    }
}

impl Op {
    fn order_sensitive(&self) -> bool {
        matches!(
            self,
            Op::First | Op::Last | Op::Push | Op::MergeObjects | Op::FirstN(_) | Op::LastN(_)
        )
    }
}

#[derive(Debug, Clone)]
struct Accumulator {
    field: String,
    op: Op,
    /// The input (`$sum: <expr>`) or `output` expression.
    arg: Expr,
}

/// The accumulator names, for the unknown-operator error and for
/// generators of test pipelines.
pub const ACCUMULATORS: &[&str] = &[
    "$addToSet",
    "$avg",
    "$bottom",
    "$bottomN",
    "$count",
    "$first",
    "$firstN",
    "$last",
    "$lastN",
    "$max",
    "$maxN",
    "$mergeObjects",
    "$min",
    "$minN",
    "$push",
    "$stdDevPop",
    "$stdDevSamp",
    "$sum",
    "$top",
    "$topN",
];

fn parse_accumulator(field: &str, spec: &Bson) -> Result<Accumulator> {
    let Bson::Document(spec) = spec else {
        return Err(loc(
            ErrorCode::StageGroupInvalidAccumulator,
            format!("The field '{field}' must be an accumulator object"),
        ));
    };
    if spec.len() != 1 {
        return Err(loc(
            ErrorCode::StageGroupMultipleAccumulator,
            format!("The field '{field}' must specify one accumulator"),
        ));
    }
    let Some((name, arg)) = spec.iter().next() else {
        return Err(loc(
            ErrorCode::StageGroupMultipleAccumulator,
            format!("The field '{field}' must specify one accumulator"),
        ));
    };
    if name == "$accumulator" || name == "$_internalJsReduce" {
        let (op, arg) = if name == "$accumulator" {
            parse_js_accumulator(arg)?
        } else {
            parse_js_reduce(arg)?
        };
        return Ok(Accumulator {
            field: field.to_string(),
            op,
            arg,
        });
    }
    if !ACCUMULATORS.contains(&name.as_str()) {
        return Err(loc(
            ErrorCode::GroupUnknownOperator,
            format!("unknown group operator '{name}'"),
        ));
    }
    let unary = |arg: &Bson| -> Result<Expr> {
        if matches!(arg, Bson::Array(_)) {
            return Err(loc(
                ErrorCode::StageGroupUnaryOperator,
                format!("The {name} accumulator is a unary operator"),
            ));
        }
        Expr::parse(arg)
    };
    let (op, arg) = match name.as_str() {
        "$sum" => (Op::Sum, unary(arg)?),
        "$avg" => (Op::Avg, unary(arg)?),
        "$min" => (Op::Min, unary(arg)?),
        "$max" => (Op::Max, unary(arg)?),
        "$first" => (Op::First, unary(arg)?),
        "$last" => (Op::Last, unary(arg)?),
        "$push" => (Op::Push, unary(arg)?),
        "$addToSet" => (Op::AddToSet, unary(arg)?),
        "$mergeObjects" => (Op::MergeObjects, unary(arg)?),
        "$stdDevPop" => (Op::StdDevPop, unary(arg)?),
        "$stdDevSamp" => (Op::StdDevSamp, unary(arg)?),
        "$count" => {
            if !matches!(arg, Bson::Document(d) if d.is_empty()) {
                return Err(Error::new(
                    ErrorCode::BadValue,
                    "$count takes no arguments, i.e. $count:{}",
                ));
            }
            (Op::Count, Expr::parse(&Bson::Int32(1))?)
        }
        "$top" | "$bottom" | "$topN" | "$bottomN" => {
            let with_n = name.ends_with('N');
            let args = n_args(name, arg, &["n", "sortBy", "output"])?;
            let n = if with_n {
                Some(parse_n(name, args.get("n"))?)
            } else {
                if args.contains_key("n") {
                    return Err(loc(
                        ErrorCode::NAccumulatorUnexpectedN,
                        format!("Unknown argument for '{name}' operator: n"),
                    ));
                }
                None
            };
            let Some(Bson::Document(sort)) = args.get("sortBy") else {
                return Err(loc(
                    ErrorCode::NAccumulatorSortByNotObject,
                    format!("{name} requires 'sortBy' to be an object"),
                ));
            };
            let Some(output) = args.get("output") else {
                return Err(loc(
                    ErrorCode::NAccumulatorMissingOutput,
                    format!("Missing value for 'output' in {name}"),
                ));
            };
            (
                Op::Sorted {
                    sort: SortSpec::parse(sort)?,
                    n,
                    bottom: name.starts_with("$bottom"),
                },
                Expr::parse(output)?,
            )
        }
        "$firstN" | "$lastN" | "$maxN" | "$minN" => {
            let args = n_args(name, arg, &["n", "input"])?;
            let n = parse_n(name, args.get("n"))?;
            let Some(input) = args.get("input") else {
                return Err(loc(
                    ErrorCode::NAccumulatorMissingInput,
                    format!("Missing value for 'input' in {name}"),
                ));
            };
            let op = match name.as_str() {
                "$firstN" => Op::FirstN(n),
                "$lastN" => Op::LastN(n),
                "$maxN" => Op::MaxN(n),
                _ => Op::MinN(n),
            };
            (op, Expr::parse(input)?)
        }
        other => {
            return Err(loc(
                ErrorCode::GroupUnknownOperator,
                format!("unknown group operator '{other}'"),
            ))
        }
    };
    Ok(Accumulator {
        field: field.to_string(),
        op,
        arg,
    })
}

fn n_args<'a>(name: &str, arg: &'a Bson, allowed: &[&str]) -> Result<&'a Document> {
    let Bson::Document(args) = arg else {
        return Err(loc(
            ErrorCode::NAccumulatorNotObject,
            format!(
                "specification must be an object; found {arg} of type {}",
                type_name(arg)
            ),
        ));
    };
    for k in args.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(loc(
                ErrorCode::NAccumulatorUnknownArgument,
                format!("Unknown argument for '{name}' operator: {k}"),
            ));
        }
    }
    Ok(args)
}

/// `n` of the N-accumulators: a constant positive integer.
fn parse_n(name: &str, n: Option<&Bson>) -> Result<usize> {
    let Some(n) = n else {
        return Err(loc(
            ErrorCode::NAccumulatorMissingN,
            format!("Missing value for 'n' in {name}"),
        ));
    };
    let value = Expr::parse(n)?.evaluate(&Document::new())?;
    let int = match Number::of(&value) {
        Some(Number::Int32(i)) => i64::from(i),
        Some(Number::Int64(i)) => i,
        Some(x) if x.to_f64().fract() == 0.0 && x.to_f64().abs() < 9.0e18 => x.to_f64() as i64,
        _ => {
            return Err(loc(
                ErrorCode::NAccumulatorNNotIntegral,
                format!("Value for 'n' must be of integral type, but found {value}"),
            ))
        }
    };
    if int <= 0 {
        return Err(loc(
            ErrorCode::NAccumulatorNNotPositive,
            format!("'n' must be greater than 0, found {int}"),
        ));
    }
    Ok(usize::try_from(int).unwrap_or(usize::MAX))
}

/// A running `$sum` (and `$avg`'s sum), added up with [`Number::add_widening`]:
/// integers are held as int64 and widen to a double when that overflows,
/// and a double or decimal input makes the total one (decimals stay
/// exact). Like MongoDB, the result is an int32 when every integer input
/// was one and the total fits.
#[derive(Debug, Clone, Copy)]
struct SumAcc {
    total: Number,
    /// An int64 was added: an integer total stays an int64.
    long_input: bool,
}

impl Default for SumAcc {
    fn default() -> Self {
        SumAcc {
            total: Number::Int64(0),
            long_input: false,
        }
    }
}

impl SumAcc {
    fn add(&mut self, n: Number) {
        let n = match n {
            Number::Int32(i) => Number::Int64(i64::from(i)),
            Number::Int64(i) => {
                self.long_input = true;
                Number::Int64(i)
            }
            other => other,
        };
        self.total = self.total.add_widening(n);
    }

    /// Adds another running sum.
    fn merge(&mut self, other: SumAcc) {
        self.long_input |= other.long_input;
        self.total = self.total.add_widening(other.total);
    }

    /// The partial value's type tag: 0 int, 1 long, 2 double, 3 decimal.
    fn kind(&self) -> i32 {
        match self.total {
            Number::Int32(_) => 0,
            Number::Int64(_) if !self.long_input => 0,
            Number::Int64(_) => 1,
            Number::Double(_) => 2,
            Number::Decimal(_) => 3,
        }
    }

    /// The running sum as a partial value: its type and value.
    fn partial(self) -> Bson {
        let value = match self.total {
            Number::Int32(i) => Bson::Int64(i64::from(i)),
            other => other.into_bson(),
        };
        Bson::Document(doc! {"t": self.kind(), "v": value})
    }

    fn from_partial(partial: &Bson) -> Option<SumAcc> {
        let Bson::Document(d) = partial else {
            return None;
        };
        let kind = d.get_i32("t").ok()?;
        let total = match (kind, d.get("v")?) {
            (0 | 1, Bson::Int64(l)) => Number::Int64(*l),
            (2, Bson::Double(f)) => Number::Double(*f),
            (3, Bson::Decimal128(x)) => Number::Decimal(DecimalValue::from_decimal128(x)),
            _ => return None,
        };
        Some(SumAcc {
            total,
            long_input: kind == 1,
        })
    }

    fn to_f64(self) -> f64 {
        self.total.to_f64()
    }

    fn into_bson(self) -> Bson {
        match self.total {
            Number::Int64(l) if !self.long_input => {
                i32::try_from(l).map_or(Bson::Int64(l), Bson::Int32)
            }
            other => other.into_bson(),
        }
    }
}

/// One accumulator's running state for one group.
#[derive(Debug, Clone)]
enum State {
    Sum(SumAcc),
    Avg(SumAcc, i64),
    /// `$min`/`$max`: the extreme so far, ignoring null and missing.
    Extreme(Option<Bson>),
    First(Option<Bson>),
    Last(Option<Bson>),
    /// The values and the bytes they hold.
    Push(Vec<Bson>, usize),
    AddToSet(Vec<Bson>, HashSet<Vec<u8>>, usize),
    Count(i64),
    /// The merged document and its encoded size.
    Merge(Document, SizeBudget),
    StdDev {
        n: f64,
        mean: f64,
        m2: f64,
    },
    /// Top/bottom: (sort key, output), unsorted until trimmed, and the
    /// bytes they hold.
    Sorted(Vec<(Vec<Bson>, Bson)>, usize),
    Values(Vec<Bson>, usize),
    /// `$accumulator`'s state, once `init` made it.
    Js(Option<Bson>),
    /// `$_internalJsReduce`: the key, the values not yet reduced and
    /// their bytes.
    JsReduce(Option<Bson>, Vec<Bson>, usize),
}

fn new_state(op: &Op) -> State {
    match op {
        Op::Sum => State::Sum(SumAcc::default()),
        Op::Avg => State::Avg(SumAcc::default(), 0),
        Op::Min | Op::Max => State::Extreme(None),
        Op::First => State::First(None),
        Op::Last => State::Last(None),
        Op::Push => State::Push(Vec::new(), 0),
        Op::AddToSet => State::AddToSet(Vec::new(), HashSet::new(), 0),
        Op::Count => State::Count(0),
        Op::MergeObjects => State::Merge(Document::new(), SizeBudget::new()),
        Op::StdDevPop | Op::StdDevSamp => State::StdDev {
            n: 0.0,
            mean: 0.0,
            m2: 0.0,
        },
        Op::Sorted { .. } => State::Sorted(Vec::new(), 0),
        Op::FirstN(_) | Op::LastN(_) | Op::MaxN(_) | Op::MinN(_) => State::Values(Vec::new(), 0),
        Op::Js(_) => State::Js(None),
        Op::JsReduce(_) => State::JsReduce(None, Vec::new(), 0),
    }
}

fn is_nullish(v: &Option<Bson>) -> bool {
    matches!(v, None | Some(Bson::Null) | Some(Bson::Undefined))
}

/// A `$top`/`$bottom` candidate: its sort key and its output.
type Ranked = (Vec<Bson>, Bson);

/// Orders top/bottom items: ascending by the sort for `$top`, reversed
/// for `$bottom` (so both keep the first `n`).
fn sorted_order(
    sort: &SortSpec,
    bottom: bool,
) -> impl Fn(&Ranked, &Ranked) -> std::cmp::Ordering + '_ {
    move |a, b| {
        let o = sort.compare_keys(&a.0, &b.0);
        if bottom {
            o.reverse()
        } else {
            o
        }
    }
}

/// Keeps a bounded collection bounded: trims to `n` once it doubles.
fn trim_sorted(items: &mut Vec<(Vec<Bson>, Bson)>, sort: &SortSpec, n: usize, bottom: bool) {
    items.sort_by(sorted_order(sort, bottom));
    items.truncate(n);
}

/// Keeps only what an `N` accumulator can still return: the last `n` for
/// `$lastN`, the `n` largest or smallest for `$maxN`/`$minN`.
fn trim_n(items: &mut Vec<Bson>, op: &Op) {
    match op {
        Op::LastN(n) => {
            let drop = items.len().saturating_sub(*n);
            items.drain(..drop);
        }
        Op::MaxN(n) => trim_values(items, *n, true),
        Op::MinN(n) => trim_values(items, *n, false),
        _ => {}
    }
}

fn trim_values(items: &mut Vec<Bson>, n: usize, max: bool) {
    items.sort_by(|a, b| {
        let o = compare(a, b);
        if max {
            o.reverse()
        } else {
            o
        }
    });
    items.truncate(n);
}

fn merge_object(into: &mut Document, size: &mut SizeBudget, v: Option<Bson>) -> Result<()> {
    match v {
        None | Some(Bson::Null) | Some(Bson::Undefined) => Ok(()),
        Some(Bson::Document(d)) => {
            for (k, v) in d {
                // The merged document must stay a document MongoDB could
                // send: sized before each field goes in.
                if let Some(old) = into.get(&k) {
                    size.release(field_size(&k, old));
                }
                size.add_field(&k, &v)?;
                into.insert(k, v);
            }
            Ok(())
        }
        Some(other) => Err(loc(
            ErrorCode::MergeObjectsNotObject,
            format!(
                "$mergeObjects requires object inputs, but input {other} is of type {}",
                type_name(&other)
            ),
        )),
    }
}

/// The name an accumulator has in a pipeline, for its errors.
fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Sum => "$sum",
        Op::Avg => "$avg",
        Op::Min => "$min",
        Op::Max => "$max",
        Op::First => "$first",
        Op::Last => "$last",
        Op::Push => "$push",
        Op::AddToSet => "$addToSet",
        Op::Count => "$count",
        Op::MergeObjects => "$mergeObjects",
        Op::StdDevPop => "$stdDevPop",
        Op::StdDevSamp => "$stdDevSamp",
        Op::Sorted {
            n: None,
            bottom: false,
            ..
        } => "$top",
        Op::Sorted {
            n: None,
            bottom: true,
            ..
        } => "$bottom",
        Op::Sorted {
            n: Some(_),
            bottom: false,
            ..
        } => "$topN",
        Op::Sorted {
            n: Some(_),
            bottom: true,
            ..
        } => "$bottomN",
        Op::FirstN(_) => "$firstN",
        Op::LastN(_) => "$lastN",
        Op::MaxN(_) => "$maxN",
        Op::MinN(_) => "$minN",
        Op::Js(_) => "$accumulator",
        Op::JsReduce(_) => "$_internalJsReduce",
    }
}

/// MongoDB's error for an accumulator holding more than its memory limit
/// for one group, which no spilling can reduce.
fn accumulator_limit_error(op: &Op) -> Error {
    match op {
        Op::Push | Op::AddToSet => accumulator_memory_error(op_name(op)),
        _ => Error::new(
            ErrorCode::ExceededMemoryLimit,
            format!(
                "{} used too much memory and spilling to disk cannot reduce memory consumption \
                 any further. Memory limit: {ACCUMULATOR_MEMORY_LIMIT} bytes",
                op_name(op)
            ),
        ),
    }
}

/// Adds `bytes` to what one accumulator holds; past the limit, fails.
fn hold(held: &mut usize, bytes: usize, op: &Op) -> Result<()> {
    *held = held.saturating_add(bytes);
    if *held >= ACCUMULATOR_MEMORY_LIMIT {
        return Err(accumulator_limit_error(op));
    }
    Ok(())
}

/// The bytes top/bottom candidates hold.
fn ranked_bytes(items: &[Ranked]) -> usize {
    items
        .iter()
        .map(|(k, v)| approx_size(v) + k.iter().map(approx_size).sum::<usize>())
        .sum()
}

fn values_bytes(items: &[Bson]) -> usize {
    items.iter().map(approx_size).sum()
}

fn std_dev_add(n: &mut f64, mean: &mut f64, m2: &mut f64, x: f64) {
    *n += 1.0;
    let delta = x - *mean;
    *mean += delta / *n;
    *m2 += delta * (x - *mean);
}

impl State {
    /// Takes one document's value; returns the bytes it now holds more.
    fn add(&mut self, op: &Op, value: Option<Bson>, doc: &Document) -> Result<usize> {
        match (self, op) {
            (State::Sum(s), _) => {
                if let Some(n) = value.as_ref().and_then(Number::of) {
                    s.add(n);
                }
            }
            (State::Avg(s, c), _) => {
                if let Some(n) = value.as_ref().and_then(Number::of) {
                    s.add(n);
                    *c += 1;
                }
            }
            (State::Extreme(cur), op) => {
                if !is_nullish(&value) {
                    if let Some(v) = value {
                        let replace = match cur.as_ref() {
                            None => true,
                            Some(c) => {
                                let o = compare(&v, c);
                                if matches!(op, Op::Max) {
                                    o.is_gt()
                                } else {
                                    o.is_lt()
                                }
                            }
                        };
                        if replace {
                            let size = approx_size(&v);
                            *cur = Some(v);
                            return Ok(size);
                        }
                    }
                }
            }
            (State::First(cur), _) => {
                if cur.is_none() {
                    let v = value.unwrap_or(Bson::Null);
                    let size = approx_size(&v);
                    *cur = Some(v);
                    return Ok(size);
                }
            }
            (State::Last(cur), _) => {
                *cur = Some(value.unwrap_or(Bson::Null));
            }
            (State::Push(items, held), op) => {
                if let Some(v) = value {
                    let size = approx_size(&v);
                    hold(held, size, op)?;
                    items.push(v);
                    return Ok(size);
                }
            }
            (State::AddToSet(items, seen, held), op) => {
                if let Some(v) = value {
                    // Values equal under the pipeline's collation are one.
                    let key = match crate::query::collation::scoped_key(&v) {
                        Some(collated) => encode_id(&collated),
                        None => encode_id(&v),
                    };
                    if !seen.contains(&key) {
                        let size = 2 * approx_size(&v);
                        hold(held, size, op)?;
                        seen.insert(key);
                        items.push(v);
                        return Ok(size);
                    }
                }
            }
            (State::Count(c), _) => *c += 1,
            (State::Merge(d, size), _) => merge_object(d, size, value)?,
            (State::StdDev { n, mean, m2 }, _) => {
                if let Some(x) = value.as_ref().and_then(Number::of) {
                    std_dev_add(n, mean, m2, x.to_f64());
                }
            }
            (State::Sorted(items, held), op @ Op::Sorted { sort, n, bottom }) => {
                let key = sort.key_for(doc);
                let v = value.unwrap_or(Bson::Null);
                let size = approx_size(&v) + key.iter().map(approx_size).sum::<usize>();
                items.push((key, v));
                let n = n.unwrap_or(1);
                *held = held.saturating_add(size);
                if items.len() >= n.saturating_mul(2).max(16) || *held >= ACCUMULATOR_MEMORY_LIMIT {
                    trim_sorted(items, sort, n, *bottom);
                    *held = 0;
                    hold(held, ranked_bytes(items), op)?;
                }
                return Ok(size);
            }
            (State::Values(items, held), op) => {
                let before = items.len();
                match op {
                    Op::FirstN(n) if items.len() < *n => {
                        items.push(value.unwrap_or(Bson::Null));
                    }
                    Op::LastN(_) => {
                        items.push(value.unwrap_or(Bson::Null));
                    }
                    Op::MaxN(_) | Op::MinN(_) if !is_nullish(&value) => {
                        if let Some(v) = value {
                            items.push(v);
                        }
                    }
                    _ => {}
                }
                if items.len() == before {
                    return Ok(0);
                }
                let size = items.last().map_or(0, approx_size);
                *held = held.saturating_add(size);
                let n = match op {
                    Op::FirstN(n) | Op::LastN(n) | Op::MaxN(n) | Op::MinN(n) => *n,
                    _ => usize::MAX,
                };
                if items.len() >= n.saturating_mul(2).max(16) || *held >= ACCUMULATOR_MEMORY_LIMIT {
                    trim_n(items, op);
                    *held = 0;
                    hold(held, values_bytes(items), op)?;
                }
                return Ok(size);
            }
            (State::Js(state), Op::Js(js)) => {
                let Some(current) = state.take() else {
                    return Err(Error::internal("$accumulator state not started"));
                };
                let next = js.accumulate(current, value)?;
                let size = approx_size(&next);
                *state = Some(next);
                return Ok(size);
            }
            (State::JsReduce(key, values, held), Op::JsReduce(function)) => {
                let Some(value) = value else {
                    return Ok(0);
                };
                let Bson::Document(data) = value else {
                    return Err(Error::new(
                        ErrorCode::from_number(31242),
                        format!(
                            "$_internalJsReduce requires a document argument, but found {}",
                            type_name(&value)
                        ),
                    ));
                };
                let (Some(k), Some(v), 2) = (data.get("k"), data.get("v"), data.len()) else {
                    return Err(Error::new(
                        ErrorCode::from_number(31251),
                        format!(
                            "$_internalJsReduce requires the 'data' argument to have a 'k' and 'v' field. Instead found{data}"
                        ),
                    ));
                };
                *key = Some(k.clone());
                let size = approx_size(v);
                values.push(v.clone());
                *held = held.saturating_add(size);
                if *held > REDUCE_BATCH_BYTES && values.len() > 1 {
                    let reduced = js_reduce(function, key, std::mem::take(values))?;
                    *held = approx_size(&reduced);
                    values.push(reduced);
                }
                return Ok(size);
            }
            (State::Sorted(..), _) | (State::Js(_), _) | (State::JsReduce(..), _) => {}
        }
        Ok(0)
    }

    /// Starts an `$accumulator`'s state with `init`, on its group's first
    /// document (`initArgs` evaluated on it); other states need no start.
    fn start(&mut self, op: &Op, doc: &Document, vars: &Document) -> Result<()> {
        if let (State::Js(state @ None), Op::Js(js)) = (self, op) {
            let init_args = eval(&js.init_args, doc, vars)?;
            *state = Some(js.start(init_args)?);
        }
        Ok(())
    }

    /// The state as a partial value another group can merge.
    fn partial(self, op: &Op) -> Bson {
        match self {
            State::Sum(s) => s.partial(),
            State::Avg(s, c) => Bson::Document(doc! {"sum": s.partial(), "count": c}),
            State::Extreme(v) => v.unwrap_or(Bson::Null),
            State::First(v) | State::Last(v) => v.unwrap_or(Bson::Null),
            State::Push(items, _) | State::AddToSet(items, ..) => Bson::Array(items),
            State::Count(c) => Bson::Int64(c),
            State::Merge(d, _) => Bson::Document(d),
            State::StdDev { n, mean, m2 } => Bson::Document(doc! {"n": n, "mean": mean, "m2": m2}),
            State::Sorted(mut items, _) => {
                if let Op::Sorted { sort, n, bottom } = op {
                    trim_sorted(&mut items, sort, n.unwrap_or(1), *bottom);
                }
                Bson::Array(
                    items
                        .into_iter()
                        .map(|(k, v)| Bson::Document(doc! {"k": k, "v": v}))
                        .collect(),
                )
            }
            State::Values(mut items, _) => {
                trim_n(&mut items, op);
                Bson::Array(items)
            }
            State::Js(state) => state.unwrap_or(Bson::Null),
            State::JsReduce(key, values, _) => {
                Bson::Document(doc! {"k": key.unwrap_or(Bson::Null), "vs": values})
            }
        }
    }

    /// Absorbs a partial value (from a partition or a spilled run that
    /// came later in input order).
    fn merge_partial(&mut self, op: &Op, partial: &Bson) -> Result<usize> {
        let bad = || Error::internal("malformed partial group state");
        match self {
            State::Sum(s) => s.merge(SumAcc::from_partial(partial).ok_or_else(bad)?),
            State::Avg(s, c) => {
                let Bson::Document(d) = partial else {
                    return Err(bad());
                };
                let sum = d
                    .get("sum")
                    .and_then(SumAcc::from_partial)
                    .ok_or_else(bad)?;
                s.merge(sum);
                *c += d
                    .get("count")
                    .and_then(Number::of)
                    .map_or(0, |n| n.to_f64() as i64);
            }
            State::Extreme(_) | State::Last(_) => {
                return self.add(op, Some(partial.clone()), &Document::new());
            }
            State::First(cur) => {
                if cur.is_none() {
                    *cur = Some(partial.clone());
                }
            }
            State::Push(items, held) => {
                let Bson::Array(more) = partial else {
                    return Err(bad());
                };
                let size = values_bytes(more);
                hold(held, size, op)?;
                items.extend(more.iter().cloned());
                return Ok(size);
            }
            State::AddToSet(..) => {
                let Bson::Array(more) = partial else {
                    return Err(bad());
                };
                let mut size = 0;
                for v in more {
                    size += self.add(op, Some(v.clone()), &Document::new())?;
                }
                return Ok(size);
            }
            State::Count(c) => {
                *c += Number::of(partial).map_or(0, |n| n.to_f64() as i64);
            }
            State::Merge(d, size) => merge_object(d, size, Some(partial.clone()))?,
            State::StdDev { n, mean, m2 } => {
                let Bson::Document(p) = partial else {
                    return Err(bad());
                };
                let get = |k: &str| p.get(k).and_then(Number::of).map_or(0.0, Number::to_f64);
                let (nb, mb, m2b) = (get("n"), get("mean"), get("m2"));
                if nb > 0.0 {
                    let total = *n + nb;
                    let delta = mb - *mean;
                    *m2 += m2b + delta * delta * *n * nb / total;
                    *mean += delta * nb / total;
                    *n = total;
                }
            }
            State::Sorted(items, held) => {
                let Bson::Array(more) = partial else {
                    return Err(bad());
                };
                let mut size = 0;
                for item in more {
                    let Bson::Document(d) = item else {
                        return Err(bad());
                    };
                    let Some(Bson::Array(k)) = d.get("k") else {
                        return Err(bad());
                    };
                    let v = d.get("v").cloned().unwrap_or(Bson::Null);
                    size += approx_size(item);
                    items.push((k.clone(), v));
                    *held = held.saturating_add(approx_size(item));
                    if let Op::Sorted { sort, n, bottom } = op {
                        let n = n.unwrap_or(1);
                        if items.len() >= n.saturating_mul(2).max(16)
                            || *held >= ACCUMULATOR_MEMORY_LIMIT
                        {
                            trim_sorted(items, sort, n, *bottom);
                            *held = 0;
                            hold(held, ranked_bytes(items), op)?;
                        }
                    }
                }
                return Ok(size);
            }
            State::Values(items, held) => {
                let Bson::Array(more) = partial else {
                    return Err(bad());
                };
                match op {
                    Op::FirstN(n) => {
                        for v in more {
                            if items.len() < *n {
                                items.push(v.clone());
                            }
                        }
                    }
                    Op::LastN(_) | Op::MaxN(_) | Op::MinN(_) => {
                        items.extend(more.iter().cloned());
                        trim_n(items, op);
                    }
                    _ => {}
                }
                *held = 0;
                hold(held, values_bytes(items), op)?;
                return Ok(more.iter().map(approx_size).sum());
            }
            State::Js(state) => {
                let Op::Js(js) = op else {
                    return Err(bad());
                };
                // A partition's (or spilled run's) state: merged into
                // this one, or this one's start.
                let next = match state.take() {
                    None => partial.clone(),
                    Some(current) => js.merge.call(None, &[current, partial.clone()])?,
                };
                let size = approx_size(&next);
                *state = Some(next);
                return Ok(size);
            }
            State::JsReduce(key, values, held) => {
                let Op::JsReduce(function) = op else {
                    return Err(bad());
                };
                let Bson::Document(p) = partial else {
                    return Err(bad());
                };
                let Some(Bson::Array(more)) = p.get("vs") else {
                    return Err(bad());
                };
                if key.is_none() {
                    *key = p.get("k").cloned();
                }
                let size = values_bytes(more);
                values.extend(more.iter().cloned());
                *held = held.saturating_add(size);
                if *held > REDUCE_BATCH_BYTES && values.len() > 1 {
                    let reduced = js_reduce(function, key, std::mem::take(values))?;
                    *held = approx_size(&reduced);
                    values.push(reduced);
                }
                return Ok(size);
            }
        }
        Ok(0)
    }

    /// The accumulator's result.
    fn finish(self, op: &Op) -> Result<Bson> {
        Ok(match self {
            State::Sum(s) => s.into_bson(),
            State::Avg(s, c) => {
                if c == 0 {
                    Bson::Null
                } else if let Number::Decimal(sum) = s.total {
                    match sum.div(&DecimalValue::from_i64(c)) {
                        Some(d) => Bson::Decimal128(d.to_decimal128()),
                        None => Bson::Null,
                    }
                } else {
                    Bson::Double(s.to_f64() / c as f64)
                }
            }
            State::Count(c) => i32::try_from(c).map_or(Bson::Int64(c), Bson::Int32),
            State::StdDev { n, m2, .. } => {
                let samp = matches!(op, Op::StdDevSamp);
                if n == 0.0 || (samp && n < 2.0) {
                    Bson::Null
                } else {
                    let d = if samp { n - 1.0 } else { n };
                    Bson::Double((m2.max(0.0) / d).sqrt())
                }
            }
            State::Sorted(mut items, _) => {
                let Op::Sorted { sort, n, bottom } = op else {
                    return Ok(Bson::Null);
                };
                trim_sorted(&mut items, sort, n.unwrap_or(1), *bottom);
                if *bottom {
                    items.reverse();
                }
                match n {
                    None => items.into_iter().next().map_or(Bson::Null, |(_, v)| v),
                    Some(_) => Bson::Array(items.into_iter().map(|(_, v)| v).collect()),
                }
            }
            State::Js(state) => {
                let state = state.unwrap_or(Bson::Null);
                match op {
                    Op::Js(js) => match &js.finalize {
                        Some(finalize) => finalize.call(None, &[state])?,
                        None => state,
                    },
                    _ => state,
                }
            }
            State::JsReduce(key, values, _) => match op {
                // No values (every `data` missing): no value, as MongoDB.
                Op::JsReduce(_) if values.is_empty() => Bson::Null,
                Op::JsReduce(function) => js_reduce(function, &key, values)?,
                _ => Bson::Null,
            },
            other => other.partial(op),
        })
    }
}

// ---------------------------------------------------------------------------
// Accumulators over windows

/// An accumulator as `$setWindowFields` uses it: started afresh for a
/// window (or kept running for a window open to the left), fed the
/// window's documents in order, and read without being consumed.
#[derive(Debug, Clone)]
pub(super) struct WindowAccumulator(Accumulator);

/// The running state of a [`WindowAccumulator`].
#[derive(Debug, Clone)]
pub(super) struct WindowState(State);

impl WindowAccumulator {
    /// Parses `{$sum: <expr>}` (the window function without its `window`).
    pub(super) fn parse(field: &str, spec: &Document) -> Result<WindowAccumulator> {
        parse_accumulator(field, &Bson::Document(spec.clone())).map(WindowAccumulator)
    }

    /// Whether `name` is an accumulator a window can run.
    pub(super) fn is_accumulator(name: &str) -> bool {
        name != "$mergeObjects" && ACCUMULATORS.contains(&name)
    }

    pub(super) fn start(&self) -> WindowState {
        WindowState(new_state(&self.0.op))
    }

    /// Adds one document of the window.
    pub(super) fn add(
        &self,
        state: &mut WindowState,
        doc: &Document,
        vars: &Document,
    ) -> Result<()> {
        let value = eval(&self.0.arg, doc, vars)?;
        state.0.add(&self.0.op, value, doc).map(|_| ())
    }

    /// The value over what was added so far.
    pub(super) fn value(&self, state: &WindowState) -> Result<Bson> {
        state.0.clone().finish(&self.0.op)
    }
}

// ---------------------------------------------------------------------------
// The group engine

/// How documents map to group keys.
#[derive(Debug, Clone)]
enum KeyFn {
    Expr(Expr),
    /// `$bucket`: the lower boundary of the bucket `group_by` falls in,
    /// or the default.
    Bucket {
        group_by: Expr,
        boundaries: Vec<Bson>,
        default: Option<Bson>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Documents in, results out.
    Full,
    /// Documents in, `{_id, field: partial}` out (per partition).
    Partial,
    /// Partials in, results out (at the router).
    Final,
}

struct GroupSpec {
    key: KeyFn,
    accs: Vec<Accumulator>,
    vars: Document,
    /// Keys equal under the collation are one group (`None`: simple).
    collation: Option<Arc<crate::query::collation::Collation>>,
}

struct Group {
    spec: Arc<GroupSpec>,
    mode: Mode,
    /// The stage as written, for explain.
    explain: Document,
    /// `$bucket`: sort the output by `_id`.
    sort_output: bool,
}

struct GroupEntry {
    key: Bson,
    states: Vec<State>,
}

impl GroupSpec {
    fn key_of(&self, doc: &Document, mode: Mode) -> Result<Bson> {
        if mode == Mode::Final {
            return Ok(doc.get("_id").cloned().unwrap_or(Bson::Null));
        }
        match &self.key {
            KeyFn::Expr(e) => Ok(eval(e, doc, &self.vars)?.unwrap_or(Bson::Null)),
            KeyFn::Bucket {
                group_by,
                boundaries,
                default,
            } => {
                let v = eval(group_by, doc, &self.vars)?.unwrap_or(Bson::Null);
                let at = boundaries.windows(2).find(|w| {
                    compare(&v, &w[0]).is_ge() && compare(&v, &w[1]).is_lt() && same_type(&v, &w[0])
                });
                match (at, default) {
                    (Some(w), _) => Ok(w[0].clone()),
                    (None, Some(d)) => Ok(d.clone()),
                    (None, None) => Err(loc(
                        ErrorCode::SwitchNoMatchingBranch,
                        "$switch could not find a matching branch for an input, and no \
                         default was specified.",
                    )),
                }
            }
        }
    }

    fn output(&self, key: Bson, states: Vec<State>, mode: Mode) -> Result<Document> {
        let mut out = doc! {"_id": key};
        for (acc, state) in self.accs.iter().zip(states) {
            let v = if mode == Mode::Partial {
                state.partial(&acc.op)
            } else {
                state.finish(&acc.op)?
            };
            out.insert(acc.field.clone(), v);
        }
        Ok(out)
    }

    fn new_states(&self) -> Vec<State> {
        self.accs.iter().map(|a| new_state(&a.op)).collect()
    }
}

fn same_type(a: &Bson, b: &Bson) -> bool {
    crate::query::compare::canonical_type_rank(a) == crate::query::compare::canonical_type_rank(b)
}

impl GroupSpec {
    /// True when documents still in BSON form can be grouped without
    /// decoding them: the key and every accumulator's input only read
    /// field paths, and no accumulator sorts by the document.
    fn reads_raw(&self) -> bool {
        matches!(&self.key, KeyFn::Expr(e) if e.reads_fields_only())
            && self.accs.iter().all(|a| {
                a.arg.reads_fields_only()
                    && !matches!(a.op, Op::Sorted { .. } | Op::Js(_) | Op::JsReduce(_))
            })
    }
}

/// The value an accumulator takes from a field of a document still in
/// BSON form: what [`eval`] gives on the decoded document, or, for the
/// accumulators that only add numbers, the number alone (they take
/// anything else as they take a missing value).
fn raw_input(op: &Op, value: RawValue<'_>) -> Option<Option<Bson>> {
    let field = match value {
        RawValue::Missing => return Some(None),
        RawValue::Built(v) => return Some(Some(v.into_owned())),
        RawValue::Field(field) => field,
    };
    match op {
        Op::Count => Some(None),
        Op::Sum | Op::Avg | Op::StdDevPop | Op::StdDevSamp => Some(match field {
            RawBsonRef::Int32(i) => Some(Bson::Int32(i)),
            RawBsonRef::Int64(i) => Some(Bson::Int64(i)),
            RawBsonRef::Double(d) => Some(Bson::Double(d)),
            RawBsonRef::Decimal128(d) => Some(Bson::Decimal128(d)),
            _ => None,
        }),
        _ => Bson::try_from(field).ok().map(Some),
    }
}

/// The groups of one run of a `$group`, with their states, the memory
/// they hold and the runs spilled so far.
struct Groups {
    spec: Arc<GroupSpec>,
    mode: Mode,
    limits: super::Limits,
    index: HashMap<Vec<u8>, usize>,
    groups: Vec<GroupEntry>,
    bytes: usize,
    runs: Vec<SpillRun>,
    /// The encoded key of the document at hand.
    key_bytes: Vec<u8>,
    /// The accumulators' inputs of the document at hand.
    inputs: Vec<Option<Bson>>,
}

impl Groups {
    fn new(spec: Arc<GroupSpec>, mode: Mode, limits: super::Limits) -> Groups {
        Groups {
            spec,
            mode,
            limits,
            index: HashMap::new(),
            groups: Vec::new(),
            bytes: 0,
            runs: Vec::new(),
            key_bytes: Vec::new(),
            inputs: Vec::new(),
        }
    }

    /// The position of the group of `key`, made when new.
    fn group_of(&mut self, key: Bson) -> usize {
        self.key_bytes.clear();
        match &self.spec.collation {
            Some(c) => encode_value(&c.collate_value(&key), &mut self.key_bytes),
            None => encode_value(&key, &mut self.key_bytes),
        }
        if let Some(&at) = self.index.get(self.key_bytes.as_slice()) {
            return at;
        }
        let kb = self.key_bytes.clone();
        self.bytes +=
            2 * kb.len() + approx_size(&key) + GROUP_OVERHEAD * (1 + self.spec.accs.len());
        self.index.insert(kb, self.groups.len());
        self.groups.push(GroupEntry {
            key,
            states: self.spec.new_states(),
        });
        self.groups.len() - 1
    }

    /// Adds a decoded document (a partial group's output, in final mode).
    fn add_document(&mut self, d: &Document) -> Result<()> {
        let spec = self.spec.clone();
        let key = spec.key_of(d, self.mode)?;
        let at = self.group_of(key);
        let Some(entry) = self.groups.get_mut(at) else {
            return Err(Error::internal("group index out of range"));
        };
        for (acc, state) in spec.accs.iter().zip(entry.states.iter_mut()) {
            self.bytes += if self.mode == Mode::Final {
                state.merge_partial(&acc.op, d.get(&acc.field).unwrap_or(&Bson::Null))?
            } else {
                state.start(&acc.op, d, &spec.vars)?;
                let v = eval(&acc.arg, d, &spec.vars)?;
                state.add(&acc.op, v, d)?
            };
        }
        self.spill_if_full()
    }

    /// Adds a document still in BSON form without decoding it, as
    /// [`Groups::add_document`] would add it decoded; false (and nothing
    /// added) when only the decoded document can tell
    /// ([`Expr::evaluate_raw`]). Only for [`GroupSpec::reads_raw`].
    fn add_raw(&mut self, doc: &RawDocument) -> Result<bool> {
        let spec = self.spec.clone();
        let KeyFn::Expr(key_expr) = &spec.key else {
            return Ok(false);
        };
        let Some(key) = key_expr.evaluate_raw(doc) else {
            return Ok(false);
        };
        self.inputs.clear();
        for acc in &spec.accs {
            let input = acc
                .arg
                .evaluate_raw(doc)
                .and_then(|v| raw_input(&acc.op, v));
            match input {
                Some(input) => self.inputs.push(input),
                None => return Ok(false),
            }
        }
        let key = match key {
            RawValue::Missing => Bson::Null,
            RawValue::Built(v) => v.into_owned(),
            RawValue::Field(v) => match Bson::try_from(v) {
                Ok(v) => v,
                Err(_) => return Ok(false),
            },
        };
        let at = self.group_of(key);
        let Some(entry) = self.groups.get_mut(at) else {
            return Err(Error::internal("group index out of range"));
        };
        // Only `$top`/`$bottom` read the document, and they read no raw.
        let unread = Document::new();
        for ((acc, state), input) in spec
            .accs
            .iter()
            .zip(entry.states.iter_mut())
            .zip(self.inputs.drain(..))
        {
            self.bytes += state.add(&acc.op, input, &unread)?;
        }
        self.spill_if_full()?;
        Ok(true)
    }

    fn spill_if_full(&mut self) -> Result<()> {
        if self.bytes > self.limits.max_blocking_bytes {
            if !self.limits.allow_disk_use {
                return Err(group_memory_error());
            }
            self.runs.push(spill_groups(
                &self.spec,
                &self.limits.spill_dir,
                &mut self.index,
                &mut self.groups,
            )?);
            self.bytes = 0;
        }
        Ok(())
    }

    /// The groups' results (or partial states), in the order they were
    /// first met; merged back from disk when some were spilled.
    fn finish(mut self, sort_output: bool) -> Result<DocStream> {
        let (spec, mode) = (self.spec.clone(), self.mode);
        if self.runs.is_empty() {
            let mut out: Vec<Document> = self
                .groups
                .into_iter()
                .map(|g| spec.output(g.key, g.states, mode))
                .collect::<Result<_>>()?;
            if sort_output {
                out.sort_by(|a, b| {
                    compare(
                        a.get("_id").unwrap_or(&Bson::Null),
                        b.get("_id").unwrap_or(&Bson::Null),
                    )
                });
            }
            return park(out, self.bytes, &self.limits.spill_dir);
        }
        if !self.groups.is_empty() {
            self.runs.push(spill_groups(
                &spec,
                &self.limits.spill_dir,
                &mut self.index,
                &mut self.groups,
            )?);
        }
        let mut sources: Vec<DocStream> = Vec::with_capacity(self.runs.len());
        for run in self.runs {
            sources.push(Box::new(run.into_reader()?));
        }
        let merged = MergedRuns::new(
            sources,
            Box::new(|d: &Document| match d.get("k") {
                Some(Bson::Binary(b)) => b.bytes.clone(),
                _ => Vec::new(),
            }),
            Box::new(|a: &Vec<u8>, b: &Vec<u8>| a.cmp(b)),
        );
        // Spilled runs come back in key order, which is `_id` order.
        Ok(Box::new(SpilledGroups {
            spec,
            mode,
            runs: merged.peekable(),
        }))
    }
}

impl Group {
    /// Groups a collection's documents; those still in BSON form are
    /// grouped without decoding when the key and inputs allow
    /// ([`GroupSpec::reads_raw`]).
    fn run(&self, input: InputStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let mut groups = Groups::new(self.spec.clone(), self.mode, ctx.limits().clone());
        let raw = self.mode != Mode::Final && self.spec.reads_raw();
        // `$min`, `$max` and `$addToSet` compare strings by the
        // pipeline's collation.
        crate::query::collation::scoped(self.spec.collation.as_ref(), || -> Result<()> {
            for item in input {
                match item? {
                    InputDoc::Raw(doc) if raw => {
                        if !groups.add_raw(&doc)? {
                            groups.add_document(&InputDoc::Raw(doc).into_document()?)?;
                        }
                    }
                    other => groups.add_document(&other.into_document()?)?,
                }
            }
            Ok(())
        })?;
        groups.finish(self.sort_output)
    }
}

/// Writes every group's partial state, sorted by key, as one run.
fn spill_groups(
    spec: &GroupSpec,
    dir: &std::path::Path,
    index: &mut HashMap<Vec<u8>, usize>,
    groups: &mut Vec<GroupEntry>,
) -> Result<SpillRun> {
    let mut keyed: Vec<(Vec<u8>, GroupEntry)> = Vec::with_capacity(groups.len());
    let mut by_index: Vec<Option<Vec<u8>>> = (0..groups.len()).map(|_| None).collect();
    for (kb, at) in index.drain() {
        if let Some(slot) = by_index.get_mut(at) {
            *slot = Some(kb);
        }
    }
    for (entry, kb) in groups.drain(..).zip(by_index) {
        keyed.push((kb.unwrap_or_default(), entry));
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let docs = keyed.into_iter().map(|(kb, entry)| {
        let states: Vec<Bson> = spec
            .accs
            .iter()
            .zip(entry.states)
            .map(|(acc, s)| s.partial(&acc.op))
            .collect();
        doc! {
            "k": Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: kb },
            "_id": entry.key,
            "s": states,
        }
    });
    SpillRun::write(dir, docs)
}

/// Reads spilled runs, merging the partial states of equal keys.
struct SpilledGroups {
    spec: Arc<GroupSpec>,
    mode: Mode,
    runs: Peekable<MergedRuns<Vec<u8>>>,
}

fn run_key(d: &Document) -> Option<&[u8]> {
    match d.get("k") {
        Some(Bson::Binary(b)) => Some(&b.bytes),
        _ => None,
    }
}

impl SpilledGroups {
    fn next_group(&mut self) -> Result<Option<Document>> {
        let Some(first) = self.runs.next().transpose()? else {
            return Ok(None);
        };
        let kb = run_key(&first).map(<[u8]>::to_vec).unwrap_or_default();
        let key = first.get("_id").cloned().unwrap_or(Bson::Null);
        let mut states = self.spec.new_states();
        let absorb = |d: &Document, states: &mut Vec<State>| -> Result<()> {
            let Some(Bson::Array(partials)) = d.get("s") else {
                return Err(Error::internal("malformed spilled group"));
            };
            for ((acc, state), p) in self.spec.accs.iter().zip(states.iter_mut()).zip(partials) {
                state.merge_partial(&acc.op, p)?;
            }
            Ok(())
        };
        absorb(&first, &mut states)?;
        loop {
            let same = match self.runs.peek() {
                Some(Ok(d)) => run_key(d) == Some(kb.as_slice()),
                Some(Err(_)) => true,
                None => false,
            };
            if !same {
                break;
            }
            if let Some(d) = self.runs.next().transpose()? {
                absorb(&d, &mut states)?;
            }
        }
        Ok(Some(self.spec.output(key, states, self.mode)?))
    }
}

impl Iterator for SpilledGroups {
    type Item = Result<Document>;
    fn next(&mut self) -> Option<Result<Document>> {
        self.next_group().transpose()
    }
}

impl Stage for Group {
    fn name(&self) -> &'static str {
        match self.spec.key {
            KeyFn::Bucket { .. } => "$bucket",
            KeyFn::Expr(_) => "$group",
        }
    }
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        self.run(Box::new(input.map(|d| d.map(InputDoc::Decoded))), ctx)
    }
    fn apply_input(&self, input: InputStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        self.run(input, ctx)
    }
    fn split(&self) -> Split {
        if self.mode != Mode::Full
            || self.sort_output
            || self.spec.accs.iter().any(|a| a.op.order_sensitive())
        {
            return Split::RouterOnly;
        }
        Split::Blocking {
            partition: Box::new(Group {
                spec: self.spec.clone(),
                mode: Mode::Partial,
                explain: self.explain.clone(),
                sort_output: false,
            }),
            router: Some(Box::new(Group {
                spec: self.spec.clone(),
                mode: Mode::Final,
                explain: self.explain.clone(),
                sort_output: false,
            })),
            merge_sort: None,
        }
    }
    fn explain(&self) -> Document {
        self.explain.clone()
    }
}

fn parse_accumulators<'a>(
    fields: impl Iterator<Item = (&'a String, &'a Bson)>,
) -> Result<Vec<Accumulator>> {
    let mut accs: Vec<Accumulator> = Vec::new();
    for (name, spec) in fields {
        if name.is_empty() {
            return Err(loc(
                ErrorCode::EmptyFieldPath,
                "FieldPath cannot be constructed with empty string",
            ));
        }
        if name.starts_with('$') {
            return Err(loc(
                ErrorCode::StageGroupFieldIsOperator,
                format!("The field name '{name}' cannot be an operator name"),
            ));
        }
        if name.contains('.') {
            return Err(loc(
                ErrorCode::StageGroupFieldContainsDot,
                format!("The field name '{name}' cannot contain '.'"),
            ));
        }
        if accs.iter().any(|a| &a.field == name) {
            return Err(loc(
                ErrorCode::GroupDuplicateFieldName,
                format!("duplicate field name specified: {name}"),
            ));
        }
        accs.push(parse_accumulator(name, spec)?);
    }
    Ok(accs)
}

fn parse_group(arg: &Bson, ctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(loc(
            ErrorCode::StageGroupInvalidFields,
            "a group's fields must be specified in an object",
        ));
    };
    let Some(id) = spec.get("_id") else {
        return Err(Error::new(
            ErrorCode::StageGroupMissingId,
            "a group specification must include an _id",
        ));
    };
    let key = KeyFn::Expr(Expr::parse(id)?);
    let accs = parse_accumulators(spec.iter().filter(|(k, _)| k.as_str() != "_id"))?;
    Ok(Box::new(Group {
        spec: Arc::new(GroupSpec {
            key,
            accs,
            vars: ctx.vars.clone(),
            collation: ctx.collation.clone(),
        }),
        mode: Mode::Full,
        explain: doc! {"$group": spec.clone()},
        sort_output: false,
    }))
}

fn parse_sort_by_count(arg: &Bson, ctx: &ParseContext) -> Result<Box<dyn Stage>> {
    match arg {
        Bson::String(s) if s.starts_with('$') => {}
        Bson::Document(d)
            if d.keys().next().is_some_and(|k| k.starts_with('$')) && d.len() == 1 => {}
        Bson::Document(_) => {
            return Err(Error::new(
                ErrorCode::SortByCountNotExpression,
                "the sortByCount field must be defined as a $-prefixed path or an expression",
            ))
        }
        _ => {
            return Err(Error::new(
                ErrorCode::SortByCountFieldPath,
                "the sortByCount field must be defined as a $-prefixed path or an expression",
            ))
        }
    }
    sort_by_count(arg, ctx)
}

/// `$sortByCount: expr`: `$group {_id: expr, count: {$sum: 1}}` then
/// `$sort {count: -1}`. Splits as the group does, the sort at the router.
fn sort_by_count(arg: &Bson, ctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let group = parse_group(
        &Bson::Document(doc! {"_id": arg.clone(), "count": {"$sum": 1}}),
        ctx,
    )?;
    let sort = super::basic::sort(SortSpec::parse(&doc! {"count": -1})?);
    Ok(Box::new(SortByCount {
        chain: Chain {
            name: "$sortByCount",
            stages: vec![group, sort],
            spec: doc! {"$sortByCount": arg.clone()},
        },
        arg: arg.clone(),
        vars: ctx.vars.clone(),
    }))
}

struct SortByCount {
    chain: Chain,
    arg: Bson,
    vars: Document,
}

impl Stage for SortByCount {
    fn name(&self) -> &'static str {
        "$sortByCount"
    }
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        self.chain.apply(input, ctx)
    }
    fn split(&self) -> Split {
        let ctx = ParseContext {
            vars: self.vars.clone(),
            ..ParseContext::default()
        };
        let Ok(group) = parse_group(
            &Bson::Document(doc! {"_id": self.arg.clone(), "count": {"$sum": 1}}),
            &ctx,
        ) else {
            return Split::RouterOnly;
        };
        let Split::Blocking {
            partition,
            router: Some(router),
            ..
        } = group.split()
        else {
            return Split::RouterOnly;
        };
        let Ok(order) = SortSpec::parse(&doc! {"count": -1}) else {
            return Split::RouterOnly;
        };
        Split::Blocking {
            partition,
            router: Some(Box::new(Chain {
                name: "$sortByCount",
                stages: vec![router, super::basic::sort(order)],
                spec: self.chain.spec.clone(),
            })),
            merge_sort: None,
        }
    }
    fn explain(&self) -> Document {
        self.chain.explain()
    }
}

// ---------------------------------------------------------------------------
// $bucket

fn parse_bucket(arg: &Bson, ctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(loc(
            ErrorCode::BucketNotObject,
            format!(
                "Argument to $bucket stage must be an object, but found type: {}.",
                type_name(arg)
            ),
        ));
    };
    let (mut group_by, mut boundaries, mut default, mut output) = (None, None, None, None);
    for (k, v) in spec {
        match k.as_str() {
            "groupBy" => group_by = Some(v),
            "boundaries" => boundaries = Some(v),
            "default" => default = Some(v),
            "output" => output = Some(v),
            other => {
                return Err(loc(
                    ErrorCode::BucketUnknownOption,
                    format!("Unrecognized option to $bucket: {other}."),
                ))
            }
        }
    }
    let (Some(group_by), Some(boundaries)) = (group_by, boundaries) else {
        return Err(loc(
            ErrorCode::BucketMissingRequired,
            "$bucket requires 'groupBy' and 'boundaries' to be specified.",
        ));
    };
    check_group_by(group_by, ErrorCode::BucketGroupByNotExpression, "$bucket")?;
    let Bson::Array(raw) = boundaries else {
        return Err(loc(
            ErrorCode::BucketBoundariesNotArray,
            format!(
                "The $bucket 'boundaries' field must be an array, but found type: {}.",
                type_name(boundaries)
            ),
        ));
    };
    let mut bounds = Vec::with_capacity(raw.len());
    for b in raw {
        let e = Expr::parse(b)?;
        if !e.is_constant() {
            return Err(loc(
                ErrorCode::BucketNotObject,
                format!(
                    "The $bucket 'boundaries' field must be an array of constant values, but \
                     found value: {b}."
                ),
            ));
        }
        bounds.push(e.evaluate(&Document::new())?);
    }
    if bounds.len() < 2 {
        return Err(loc(
            ErrorCode::BucketTooFewBoundaries,
            format!(
                "The $bucket 'boundaries' field must have at least 2 values, but found {} \
                 value(s).",
                bounds.len()
            ),
        ));
    }
    for w in bounds.windows(2) {
        if !same_type(&w[0], &w[1]) {
            return Err(loc(
                ErrorCode::BucketBoundariesMixedTypes,
                format!(
                    "All values in the the 'boundaries' option to $bucket must have the same \
                     type. Found conflicting types {} and {}.",
                    type_name(&w[0]),
                    type_name(&w[1])
                ),
            ));
        }
        if !compare(&w[0], &w[1]).is_lt() {
            return Err(loc(
                ErrorCode::BucketBoundariesNotSorted,
                format!(
                    "The 'boundaries' option to $bucket must be sorted in ascending order, but \
                     elements {} and {} are not in ascending order ({} is not less than {}).",
                    w[0], w[1], w[0], w[1]
                ),
            ));
        }
    }
    let default = match default {
        Some(d) => {
            let e = Expr::parse(d)?;
            if !e.is_constant() {
                return Err(loc(
                    ErrorCode::BucketDefaultNotConstant,
                    format!("The $bucket 'default' field must be a constant expression, but found: {d}."),
                ));
            }
            let v = e.evaluate(&Document::new())?;
            let (lo, hi) = (&bounds[0], &bounds[bounds.len() - 1]);
            if same_type(&v, lo) && compare(&v, lo).is_ge() && compare(&v, hi).is_lt() {
                return Err(loc(
                    ErrorCode::BucketDefaultInsideBoundaries,
                    "The $bucket 'default' field must be less than the lowest boundary or \
                     greater than or equal to the highest boundary.",
                ));
            }
            Some(v)
        }
        None => None,
    };
    let accs = bucket_output(output, ErrorCode::BucketOutputNotObject, "$bucket")?;
    Ok(Box::new(Group {
        spec: Arc::new(GroupSpec {
            key: KeyFn::Bucket {
                group_by: Expr::parse(group_by)?,
                boundaries: bounds,
                default,
            },
            accs,
            vars: ctx.vars.clone(),
            collation: ctx.collation.clone(),
        }),
        mode: Mode::Full,
        explain: doc! {"$bucket": spec.clone()},
        sort_output: true,
    }))
}

fn check_group_by(group_by: &Bson, code: ErrorCode, stage: &str) -> Result<()> {
    let ok = match group_by {
        Bson::String(s) => s.starts_with('$'),
        Bson::Document(d) => d.len() == 1 && d.keys().all(|k| k.starts_with('$')),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(loc(
            code,
            format!(
                "The {stage} 'groupBy' field must be defined as a $-prefixed path or an \
                 expression, but found: {group_by}."
            ),
        ))
    }
}

/// `output` of `$bucket`/`$bucketAuto`: accumulators, `{count: {$sum: 1}}`
/// when absent.
fn bucket_output(output: Option<&Bson>, code: ErrorCode, stage: &str) -> Result<Vec<Accumulator>> {
    match output {
        None => Ok(vec![parse_accumulator(
            "count",
            &Bson::Document(doc! {"$sum": 1}),
        )?]),
        Some(Bson::Document(d)) => parse_accumulators(d.iter()),
        Some(other) => Err(loc(
            code,
            format!(
                "The {stage} 'output' field must be an object, but found type: {}.",
                type_name(other)
            ),
        )),
    }
}

// ---------------------------------------------------------------------------
// $bucketAuto

/// `$bucketAuto`: sorts its input by `groupBy` through
/// [`KeyedSort`](super::spill::KeyedSort), which spills past the memory
/// limit with `allowDiskUse` (and fails with 292 without), counting it on
/// the way; then [`BucketFiller`] streams the buckets out of the sorted
/// input, so memory stays bounded either way.
struct BucketAuto {
    group_by: Expr,
    /// Shared with the output stream, which outlives `&self`.
    spec: Arc<BucketAutoSpec>,
    explain: Document,
}

#[derive(Debug, Clone, Copy)]
enum Granularity {
    PowersOf2,
    /// A preferred-number series within one decade (`[1, 10)`).
    Series(&'static [f64]),
}

const R5: &[f64] = &[1.0, 1.6, 2.5, 4.0, 6.3];
const R10: &[f64] = &[1.0, 1.25, 1.6, 2.0, 2.5, 3.15, 4.0, 5.0, 6.3, 8.0];
const R20: &[f64] = &[
    1.0, 1.12, 1.25, 1.4, 1.6, 1.8, 2.0, 2.24, 2.5, 2.8, 3.15, 3.55, 4.0, 4.5, 5.0, 5.6, 6.3, 7.1,
    8.0, 9.0,
];
const E6: &[f64] = &[1.0, 1.5, 2.2, 3.3, 4.7, 6.8];
const E12: &[f64] = &[1.0, 1.2, 1.5, 1.8, 2.2, 2.7, 3.3, 3.9, 4.7, 5.6, 6.8, 8.2];
const E24: &[f64] = &[
    1.0, 1.1, 1.2, 1.3, 1.5, 1.6, 1.8, 2.0, 2.2, 2.4, 2.7, 3.0, 3.3, 3.6, 3.9, 4.3, 4.7, 5.1, 5.6,
    6.2, 6.8, 7.5, 8.2, 9.1,
];
const ONE_TWO_FIVE: &[f64] = &[1.0, 2.0, 5.0];

impl Granularity {
    fn parse(name: &str) -> Result<Granularity> {
        Ok(match name {
            "POWERSOF2" => Granularity::PowersOf2,
            "R5" => Granularity::Series(R5),
            "R10" => Granularity::Series(R10),
            "R20" => Granularity::Series(R20),
            "E6" => Granularity::Series(E6),
            "E12" => Granularity::Series(E12),
            "E24" => Granularity::Series(E24),
            "1-2-5" => Granularity::Series(ONE_TWO_FIVE),
            other => {
                return Err(loc(
                    ErrorCode::BucketAutoUnknownGranularity,
                    format!("Rounding granularity not recognized: {other}"),
                ))
            }
        })
    }

    fn number(v: &Bson) -> Result<f64> {
        let Some(n) = Number::of(v) else {
            return Err(loc(
                ErrorCode::BucketAutoGranularityNonNumeric,
                format!(
                    "$bucketAuto can specify a 'granularity' with numeric boundaries only, but \
                     found a value with type: {}",
                    type_name(v)
                ),
            ));
        };
        let f = n.to_f64();
        if f.is_nan() {
            return Err(loc(
                ErrorCode::BucketAutoGranularityNaN,
                "$bucketAuto can specify a 'granularity' with numeric boundaries only, but found \
                 a NaN",
            ));
        }
        if f < 0.0 {
            return Err(loc(
                ErrorCode::BucketAutoGranularityNegative,
                "$bucketAuto can specify a 'granularity' with non-negative numbers only, but \
                 found a negative number",
            ));
        }
        Ok(f)
    }

    /// The smallest granularity value strictly above `v` (0 stays 0).
    fn round_up(self, v: &Bson) -> Result<Bson> {
        let f = Self::number(v)?;
        // No series value lies beyond infinity: it stays itself (the
        // search below would never end).
        if f == 0.0 || f.is_infinite() {
            return Ok(Bson::Double(f));
        }
        Ok(Bson::Double(match self {
            Granularity::PowersOf2 => {
                let mut p = 2f64.powi(f.log2().floor() as i32);
                while p <= f {
                    p *= 2.0;
                }
                p
            }
            Granularity::Series(series) => {
                let mut scale = 10f64.powi(f.log10().floor() as i32 - 1);
                loop {
                    if let Some(x) = series.iter().map(|s| s * scale).find(|x| *x > f) {
                        break x;
                    }
                    scale *= 10.0;
                }
            }
        }))
    }

    /// The largest granularity value strictly below `v` (0 stays 0).
    fn round_down(self, v: &Bson) -> Result<Bson> {
        let f = Self::number(v)?;
        // No series value lies beyond infinity: it stays itself (the
        // search below would never end).
        if f == 0.0 || f.is_infinite() {
            return Ok(Bson::Double(f));
        }
        Ok(Bson::Double(match self {
            Granularity::PowersOf2 => {
                let mut p = 2f64.powi(f.log2().ceil() as i32);
                while p >= f {
                    p /= 2.0;
                }
                p
            }
            Granularity::Series(series) => {
                let mut scale = 10f64.powi(f.log10().floor() as i32 + 1);
                loop {
                    if let Some(x) = series.iter().rev().map(|s| s * scale).find(|x| *x < f) {
                        break x;
                    }
                    scale /= 10.0;
                }
            }
        }))
    }
}

fn parse_bucket_auto(arg: &Bson, ctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(loc(
            ErrorCode::BucketAutoNotObject,
            format!(
                "The argument to $bucketAuto must be an object, but found type: {}.",
                type_name(arg)
            ),
        ));
    };
    let (mut group_by, mut buckets, mut output, mut granularity) = (None, None, None, None);
    for (k, v) in spec {
        match k.as_str() {
            "groupBy" => group_by = Some(v),
            "buckets" => buckets = Some(v),
            "output" => output = Some(v),
            "granularity" => granularity = Some(v),
            other => {
                return Err(loc(
                    ErrorCode::BucketAutoUnknownOption,
                    format!("Unrecognized option to $bucketAuto: {other}."),
                ))
            }
        }
    }
    let (Some(group_by), Some(buckets)) = (group_by, buckets) else {
        return Err(loc(
            ErrorCode::BucketAutoMissingRequired,
            "$bucketAuto requires 'groupBy' and 'buckets' to be specified",
        ));
    };
    check_group_by(
        group_by,
        ErrorCode::BucketAutoGroupByNotExpression,
        "$bucketAuto",
    )?;
    let Some(n) = Number::of(buckets) else {
        return Err(loc(
            ErrorCode::BucketAutoBucketsNotNumber,
            format!(
                "The $bucketAuto 'buckets' field must be a numeric value, but found type: {}.",
                type_name(buckets)
            ),
        ));
    };
    let f = n.to_f64();
    if f.fract() != 0.0 || f < f64::from(i32::MIN) || f > f64::from(i32::MAX) {
        return Err(loc(
            ErrorCode::BucketAutoBucketsNotInt32,
            format!(
                "The $bucketAuto 'buckets' field must be representable as a 32-bit integer, \
                 but found {buckets}."
            ),
        ));
    }
    if f <= 0.0 {
        return Err(loc(
            ErrorCode::BucketAutoBucketsNotPositive,
            format!("The $bucketAuto 'buckets' field must be greater than 0, but found: {f}."),
        ));
    }
    let granularity = match granularity {
        None => None,
        Some(Bson::String(s)) => Some(Granularity::parse(s)?),
        Some(other) => {
            return Err(loc(
                ErrorCode::BucketAutoGranularityNotString,
                format!(
                    "The $bucketAuto 'granularity' field must be a string, but found type: {}.",
                    type_name(other)
                ),
            ))
        }
    };
    Ok(Box::new(BucketAuto {
        group_by: Expr::parse(group_by)?,
        spec: Arc::new(BucketAutoSpec {
            buckets: f as usize,
            accs: bucket_output(output, ErrorCode::BucketAutoOutputNotObject, "$bucketAuto")?,
            granularity,
            vars: ctx.vars.clone(),
        }),
        explain: doc! {"$bucketAuto": spec.clone()},
    }))
}

impl BucketAuto {
    /// Sorts the input by its `groupBy` value (spilling past the memory
    /// limit) and counts it: filling buckets needs the total.
    fn sorted_input(
        &self,
        input: DocStream,
        ctx: &Arc<dyn Context>,
    ) -> Result<(usize, KeyedStream)> {
        let mut sorted = KeyedSort::new(ctx.limits(), compare, bucket_auto_memory_error);
        for d in input {
            let d = d?;
            let v = eval(&self.group_by, &d, &self.spec.vars)?.unwrap_or(Bson::Null);
            if self.spec.granularity.is_some() {
                Granularity::number(&v)?;
            }
            sorted.push(v, d)?;
        }
        let total = sorted.len();
        Ok((total, sorted.finish()?))
    }
}

/// Builds `$bucketAuto`'s buckets, one per `next`, from its input sorted
/// by `groupBy` value in one pass: it holds one bucket's accumulators and
/// looks one document ahead.
struct BucketFiller {
    spec: Arc<BucketAutoSpec>,
    items: Peekable<KeyedStream>,
    total: usize,
    /// About how many documents go in each bucket.
    per_bucket: usize,
    taken: usize,
    emitted: usize,
    previous_max: Option<Bson>,
}

/// What filling buckets needs of the stage, shared with the output stream.
struct BucketAutoSpec {
    buckets: usize,
    accs: Vec<Accumulator>,
    granularity: Option<Granularity>,
    vars: Document,
}

impl BucketFiller {
    /// The next document's `groupBy` value, if any.
    fn peek_key(&mut self) -> Result<Option<&Bson>> {
        if let Some(Err(_)) = self.items.peek() {
            if let Some(Err(e)) = self.items.next() {
                return Err(e);
            }
        }
        Ok(match self.items.peek() {
            Some(Ok((v, _))) => Some(v),
            _ => None,
        })
    }

    /// Takes the next document into `states`, returning its value.
    fn take(&mut self, states: &mut [State]) -> Result<Option<Bson>> {
        let Some((v, d)) = self.items.next().transpose()? else {
            return Ok(None);
        };
        self.taken += 1;
        for (acc, state) in self.spec.accs.iter().zip(states.iter_mut()) {
            state.start(&acc.op, &d, &self.spec.vars)?;
            let value = eval(&acc.arg, &d, &self.spec.vars)?;
            state.add(&acc.op, value, &d)?;
        }
        Ok(Some(v))
    }

    fn next_bucket(&mut self) -> Result<Option<Document>> {
        let spec = Arc::clone(&self.spec);
        let mut states: Vec<State> = spec.accs.iter().map(|a| new_state(&a.op)).collect();
        let Some(first) = self.take(&mut states)? else {
            return Ok(None);
        };
        let last_bucket = self.emitted + 1 >= spec.buckets;
        let end = if last_bucket {
            self.total
        } else {
            (self.taken - 1 + self.per_bucket).min(self.total)
        };
        let mut last = first.clone();
        while self.taken < end {
            match self.take(&mut states)? {
                Some(v) => last = v,
                None => break,
            }
        }
        // Equal values stay in one bucket.
        while self.peek_key()?.is_some_and(|v| compare(&last, v).is_eq()) {
            if let Some(v) = self.take(&mut states)? {
                last = v;
            }
        }
        let (min, max) = if let Some(g) = spec.granularity {
            let min = match &self.previous_max {
                Some(p) => p.clone(),
                None => g.round_down(&first)?,
            };
            let bound = g.round_up(&last)?;
            while self.peek_key()?.is_some_and(|v| compare(&bound, v).is_gt()) {
                self.take(&mut states)?;
            }
            let max = match self.peek_key()? {
                Some(next) if Number::of(&bound).is_some_and(|n| n.to_f64() == 0.0) => {
                    let next = next.clone();
                    g.round_down(&next)?
                }
                _ => bound,
            };
            self.previous_max = Some(max.clone());
            (min, max)
        } else {
            let max = self.peek_key()?.cloned().unwrap_or(last);
            (first, max)
        };
        let mut doc = doc! {"_id": {"min": min, "max": max}};
        for (acc, state) in spec.accs.iter().zip(states) {
            doc.insert(acc.field.clone(), state.finish(&acc.op)?);
        }
        self.emitted += 1;
        Ok(Some(doc))
    }
}

impl Iterator for BucketFiller {
    type Item = Result<Document>;
    fn next(&mut self) -> Option<Result<Document>> {
        self.next_bucket().transpose()
    }
}

impl Stage for BucketAuto {
    fn name(&self) -> &'static str {
        "$bucketAuto"
    }
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let (total, items) = self.sorted_input(input, ctx)?;
        let per_bucket = if total == 0 {
            1
        } else {
            ((total as f64 / self.spec.buckets as f64).round() as usize).max(1)
        };
        Ok(Box::new(BucketFiller {
            spec: Arc::clone(&self.spec),
            items: items.peekable(),
            total,
            per_bucket,
            taken: 0,
            emitted: 0,
            previous_max: None,
        }))
    }
    fn split(&self) -> Split {
        Split::RouterOnly
    }
    fn explain(&self) -> Document {
        self.explain.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::basic::tests::{ctx, ctx_with, err_code, run, run_in};

    fn sales() -> Vec<Document> {
        vec![
            doc! {"_id": 1, "item": "a", "price": 10, "qty": 2, "tags": ["x", "y"], "o": {"p": 1}},
            doc! {"_id": 2, "item": "b", "price": 20.5, "qty": 1, "tags": ["y"], "o": {"q": 2}},
            doc! {"_id": 3, "item": "a", "price": 5, "qty": 10_i64, "tags": [], "o": {"p": 3}},
            doc! {"_id": 4, "item": "c", "price": 7, "qty": 3, "o": null},
            doc! {"_id": 5, "item": "a", "price": 1, "qty": 4, "tags": ["z"]},
            doc! {"_id": 6, "item": "b", "qty": 5, "tags": ["x"]},
        ]
    }

    fn by_id(mut docs: Vec<Document>) -> Vec<Document> {
        docs.sort_by(|a, b| compare(a.get("_id").unwrap(), b.get("_id").unwrap()));
        docs
    }

    fn group_a(spec: Document) -> Document {
        let mut g = doc! {"_id": "$item"};
        g.extend(spec);
        let out = by_id(run(vec![doc! {"$group": g}], sales()).unwrap());
        out.into_iter().next().unwrap()
    }

    #[test]
    fn table_is_sorted() {
        assert!(STAGES.windows(2).all(|w| w[0].0 < w[1].0));
    }

    /// What a stage gives, or the code of its error, as text (so that NaN
    /// equals NaN).
    fn outcome(result: Result<DocStream>) -> String {
        match result.and_then(|s| s.collect::<Result<Vec<Document>>>()) {
            Ok(docs) => format!("{docs:?}"),
            Err(e) => format!("error {}", e.code.number()),
        }
    }

    /// The stage's output from documents still in BSON form and from the
    /// same documents decoded.
    fn raw_and_decoded(stage: &dyn Stage, raws: &[bson::RawDocumentBuf]) -> (String, String) {
        let decoded: Vec<Document> = raws
            .iter()
            .map(|r| Document::try_from(r.as_ref()).unwrap())
            .collect();
        let owned: Vec<bson::RawDocumentBuf> = raws.to_vec();
        let raw_input: super::super::InputStream =
            Box::new(owned.into_iter().map(|r| Ok(InputDoc::Raw(r))));
        (
            outcome(stage.apply_input(raw_input, &ctx())),
            outcome(stage.apply(Box::new(decoded.into_iter().map(Ok)), &ctx())),
        )
    }

    #[test]
    fn stored_bytes_group_without_decoding_as_decoded_documents_do() {
        let raws: Vec<bson::RawDocumentBuf> = sales()
            .iter()
            .map(|d| bson::RawDocumentBuf::try_from(d).unwrap())
            .collect();
        let spec = doc! {
            "_id": {"item": "$item", "p": "$o.p"},
            "n": {"$sum": 1},
            "total": {"$sum": "$price"},
            "avg": {"$avg": "$qty"},
            "lo": {"$min": "$price"},
            "hi": {"$max": "$tags"},
            "first": {"$first": "$o"},
            "last": {"$last": "$price"},
            "count": {"$count": {}},
        };
        let stage = parse_group(&Bson::Document(spec), &ParseContext::default()).unwrap();
        let (raw, decoded) = raw_and_decoded(&*stage, &raws);
        assert_eq!(raw, decoded);
        assert!(raw.contains("total"), "{raw}");
        let stage = parse_sort_by_count(&Bson::from("$item"), &ParseContext::default()).unwrap();
        let (raw, decoded) = raw_and_decoded(&*stage, &raws);
        assert_eq!(raw, decoded);
        assert!(raw.contains("\"count\": Int32(3)"), "{raw}");
    }

    fn arb_group_spec() -> impl proptest::strategy::Strategy<Value = Document> {
        use proptest::prelude::*;
        let key = prop_oneof![
            Just(Bson::from("$a")),
            Just(Bson::from("$a.b")),
            Just(Bson::from("$zz")),
            Just(Bson::Null),
            Just(Bson::Int32(5)),
            Just(Bson::Document(doc! {"x": "$a", "y": "$b.c"})),
            Just(Bson::Document(doc! {"$add": ["$b", 1]})),
        ];
        let accs = proptest::sample::subsequence(
            vec![
                ("n", doc! {"$sum": 1}),
                ("s", doc! {"$sum": "$b"}),
                ("av", doc! {"$avg": "$b"}),
                ("mn", doc! {"$min": "$b"}),
                ("mx", doc! {"$max": "$a"}),
                ("f", doc! {"$first": "$b"}),
                ("l", doc! {"$last": "$a.b"}),
                ("c", doc! {"$count": {}}),
                ("p", doc! {"$push": "$c"}),
                ("ts", doc! {"$addToSet": "$a"}),
                ("sd", doc! {"$stdDevSamp": "$b"}),
                ("mo", doc! {"$mergeObjects": "$c"}),
                ("t", doc! {"$top": {"sortBy": {"b": 1}, "output": "$a"}}),
                ("e", doc! {"$sum": {"$add": ["$b", 1]}}),
            ],
            0..5,
        );
        (key, accs).prop_map(|(key, accs)| {
            let mut spec = doc! {"_id": key};
            for (name, acc) in accs {
                spec.insert(name, acc);
            }
            spec
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]

        #[test]
        fn groups_of_stored_bytes_are_the_groups_of_decoded_documents(
            spec in arb_group_spec(),
            docs in proptest::collection::vec(
                proptest::collection::vec(
                    (
                        crate::query::raw_fields::arbitrary::name(),
                        crate::query::raw_fields::arbitrary::stored(),
                    ),
                    0..4,
                ),
                0..8,
            ),
        ) {
            let raws: Vec<bson::RawDocumentBuf> = docs
                .into_iter()
                .map(crate::query::raw_fields::arbitrary::Stored::document)
                .collect();
            let stage = parse_group(&Bson::Document(spec.clone()), &ParseContext::default()).unwrap();
            let (raw, decoded) = raw_and_decoded(&*stage, &raws);
            proptest::prop_assert_eq!(raw, decoded, "{}", spec);
            if let Split::Blocking { partition, .. } = stage.split() {
                let (raw, decoded) = raw_and_decoded(&*partition, &raws);
                proptest::prop_assert_eq!(raw, decoded, "partial {}", spec);
            }
        }
    }

    #[test]
    fn granularity_of_infinity_ends() {
        for name in ["POWERSOF2", "R5", "E24", "1-2-5"] {
            let g = Granularity::parse(name).unwrap();
            let inf = Bson::Double(f64::INFINITY);
            assert_eq!(g.round_up(&inf).unwrap(), inf, "{name}");
            assert_eq!(g.round_down(&inf).unwrap(), inf, "{name}");
            assert_eq!(
                g.round_up(&Bson::Double(3.0)).unwrap(),
                match name {
                    "POWERSOF2" => Bson::Double(4.0),
                    "R5" => Bson::Double(4.0),
                    "E24" => Bson::Double(3.3),
                    _ => Bson::Double(5.0),
                },
                "{name}"
            );
        }
    }

    #[test]
    fn simple_accumulators() {
        let a = group_a(doc! {
            "sum": {"$sum": "$price"}, "n": {"$sum": 1}, "q": {"$sum": "$qty"},
            "avg": {"$avg": "$price"}, "min": {"$min": "$price"}, "max": {"$max": "$price"},
            "first": {"$first": "$_id"}, "last": {"$last": "$_id"}, "c": {"$count": {}},
            "push": {"$push": "$_id"}, "set": {"$addToSet": "$qty"},
            "m": {"$mergeObjects": "$o"},
        });
        assert_eq!(
            a,
            doc! {"_id": "a", "sum": 16, "n": 3, "q": 16_i64,
            "avg": 16.0 / 3.0, "min": 1, "max": 10, "first": 1, "last": 5, "c": 3,
            "push": [1, 3, 5], "set": [2, 10_i64, 4], "m": {"p": 3}}
        );
    }

    #[test]
    fn accumulators_stop_at_their_memory_limit() {
        let big: Vec<Document> = (0..11)
            .map(|i| doc! {"_id": i, "s": format!("{i}{}", "x".repeat(10 * 1024 * 1024))})
            .collect();
        let code = |acc: Document| {
            let e = run(vec![doc! {"$group": {"_id": null, "r": acc}}], big.clone()).unwrap_err();
            (e.code.number(), e.message)
        };
        let (c, m) = code(doc! {"$push": "$s"});
        assert_eq!(c, 146);
        assert_eq!(
            m,
            "$push used too much memory and cannot spill to disk. Memory limit: 104857600 bytes"
        );
        assert_eq!(code(doc! {"$addToSet": "$s"}).0, 146);
        let (c, m) = code(doc! {"$firstN": {"n": 100, "input": "$s"}});
        assert_eq!(c, 146);
        assert!(m.starts_with("$firstN used too much memory"), "{m}");
        assert_eq!(
            code(doc! {"$topN": {"n": 100, "sortBy": {"_id": 1}, "output": "$s"}}).0,
            146
        );
        // A merged document past 16 MB, with fields of different names.
        let (c, _) = code(doc! {"$mergeObjects": {"$arrayToObject": [[["$s", 1]]]}});
        assert_eq!(c, 10334);
        // Under the limit it works: $lastN keeps only its last n.
        let out = run(
            vec![doc! {"$group": {"_id": null, "r": {"$lastN": {"n": 2, "input": "$_id"}}}}],
            big,
        )
        .unwrap();
        assert_eq!(out, vec![doc! {"_id": null, "r": [9, 10]}]);
    }

    #[test]
    fn sum_widening_and_missing() {
        let out = run(
            vec![doc! {"$group": {"_id": null, "s": {"$sum": "$v"}, "a": {"$avg": "$none"}, "mn": {"$min": "$none"}}}],
            vec![doc! {"v": i32::MAX}, doc! {"v": 1}],
        )
        .unwrap();
        assert_eq!(
            out,
            vec![doc! {"_id": null, "s": i64::from(i32::MAX) + 1, "a": null, "mn": null}]
        );
        let out = run(
            vec![doc! {"$group": {"_id": null, "s": {"$sum": "$v"}}}],
            vec![doc! {"v": 1}, doc! {"v": 0.5}, doc! {"v": "x"}],
        )
        .unwrap();
        assert_eq!(out, vec![doc! {"_id": null, "s": 1.5}]);
    }

    #[test]
    fn std_dev() {
        let input: Vec<Document> = [2, 4, 4, 4, 5, 5, 7, 9]
            .iter()
            .map(|v| doc! {"v": *v})
            .collect();
        let out = run(
            vec![doc! {"$group": {"_id": null, "p": {"$stdDevPop": "$v"}, "s": {"$stdDevSamp": "$v"}}}],
            input,
        )
        .unwrap();
        assert_eq!(out[0].get_f64("p").unwrap(), 2.0);
        assert!((out[0].get_f64("s").unwrap() - 2.138_089_935_299_395).abs() < 1e-12);
        let out = run(
            vec![doc! {"$group": {"_id": null, "s": {"$stdDevSamp": "$v"}}}],
            vec![doc! {"v": 1}],
        )
        .unwrap();
        assert_eq!(out, vec![doc! {"_id": null, "s": null}]);
    }

    #[test]
    fn n_accumulators() {
        let a = group_a(doc! {
            "top": {"$top": {"sortBy": {"price": -1}, "output": "$_id"}},
            "bottom": {"$bottom": {"sortBy": {"price": -1}, "output": "$_id"}},
            "topN": {"$topN": {"n": 2, "sortBy": {"price": 1}, "output": ["$_id", "$price"]}},
            "bottomN": {"$bottomN": {"n": 2, "sortBy": {"price": 1}, "output": "$_id"}},
            "firstN": {"$firstN": {"n": 2, "input": "$_id"}},
            "lastN": {"$lastN": {"n": 2, "input": "$_id"}},
            "maxN": {"$maxN": {"n": 2, "input": "$price"}},
            "minN": {"$minN": {"n": 5, "input": "$price"}},
        });
        assert_eq!(
            a,
            doc! {"_id": "a", "top": 1, "bottom": 5, "topN": [[5, 1], [3, 5]],
            "bottomN": [3, 1], "firstN": [1, 3], "lastN": [3, 5], "maxN": [10, 5],
            "minN": [1, 5, 10]}
        );
    }

    #[test]
    fn keys_use_mongodb_equality() {
        let out = run(
            vec![doc! {"$group": {"_id": "$k", "n": {"$sum": 1}}}],
            vec![
                doc! {"k": 1},
                doc! {"k": 1.0},
                doc! {"k": 1_i64},
                doc! {"k": {"a": 1}},
                doc! {"k": {"a": 1.0}},
                doc! {},
                doc! {"k": null},
            ],
        )
        .unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"_id": 1, "n": 3},
                doc! {"_id": {"a": 1}, "n": 2},
                doc! {"_id": null, "n": 2}
            ]
        );
        let out = run(
            vec![doc! {"$group": {"_id": {"i": "$item", "big": {"$gt": ["$price", 6]}}, "n": {"$sum": 1}}}],
            sales(),
        )
        .unwrap();
        assert_eq!(out.len(), 5);
    }

    #[test]
    fn group_errors() {
        let e = |g: Document| err_code(vec![doc! {"$group": g}], vec![]);
        assert_eq!(err_code(vec![doc! {"$group": 1}], vec![]), 15947);
        assert_eq!(e(doc! {"n": {"$sum": 1}}), 15955);
        assert_eq!(e(doc! {"_id": null, "n": {"$foo": 1}}), 15952);
        assert_eq!(e(doc! {"_id": null, "n": 1}), 40234);
        assert_eq!(e(doc! {"_id": null, "n": {"$sum": 1, "$avg": 1}}), 40238);
        assert_eq!(e(doc! {"_id": null, "a.b": {"$sum": 1}}), 40235);
        assert_eq!(e(doc! {"_id": null, "$a": {"$sum": 1}}), 40236);
        assert_eq!(e(doc! {"_id": null, "a": {"$sum": [1, 2]}}), 40237);
        assert_eq!(e(doc! {"_id": null, "a": {"$count": 1}}), 2);
        assert_eq!(
            e(doc! {"_id": null, "a": {"$topN": {"n": 0, "sortBy": {"a": 1}, "output": 1}}}),
            5787908
        );
        assert_eq!(e(doc! {"_id": null, "a": {"$firstN": {"n": 1}}}), 5787907);
        assert_eq!(
            err_code(
                vec![doc! {"$group": {"_id": null, "m": {"$mergeObjects": "$a"}}}],
                vec![doc! {"a": 1}]
            ),
            40400
        );
    }

    /// Runs `stage` split: partition part over each of three parts, then
    /// the router part over all partials.
    fn split_run(spec: Document, input: &[Document]) -> Vec<Document> {
        let stages = vec![Bson::Document(spec)];
        let p = crate::aggregate::Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        let stage = &p.stages[0];
        let c = ctx();
        match stage.split() {
            Split::Blocking {
                partition, router, ..
            } => {
                let mut partials = Vec::new();
                for part in input.chunks(input.len().div_ceil(3)) {
                    let s = partition
                        .apply(
                            Box::new(part.iter().cloned().map(Ok).collect::<Vec<_>>().into_iter()),
                            &c,
                        )
                        .unwrap();
                    partials.extend(s.map(|d| d.unwrap()));
                }
                let router = router.unwrap();
                router
                    .apply(Box::new(partials.into_iter().map(Ok)), &c)
                    .unwrap()
                    .map(|d| d.unwrap())
                    .collect()
            }
            _ => panic!("not blocking"),
        }
    }

    #[test]
    fn js_accumulators_split_into_partial_states_and_merge() {
        let input: Vec<Document> = (0..30).map(|i| doc! {"g": i % 3, "v": i}).collect();
        let spec = doc! {"$group": {"_id": "$g", "avg": {"$accumulator": {
            "init": "function(base) { return {n: 0, sum: base}; }",
            "initArgs": [100],
            "accumulate": "function(s, v) { return {n: s.n + 1, sum: s.sum + v}; }",
            "accumulateArgs": ["$v"],
            "merge": "function(a, b) { return {n: a.n + b.n, sum: a.sum + b.sum - 100}; }",
            "finalize": "function(s) { return (s.sum - 100) / s.n; }",
            "lang": "js",
        }}}};
        let single = by_id(run(vec![spec.clone()], input.clone()).unwrap());
        assert_eq!(
            single,
            vec![
                doc! {"_id": 0, "avg": 13.5},
                doc! {"_id": 1, "avg": 14.5},
                doc! {"_id": 2, "avg": 15.5},
            ]
        );
        assert_eq!(by_id(split_run(spec, &input)), single);
        let no_finalize = doc! {"$group": {"_id": null, "s": {"$accumulator": {
            "init": "function() { return 0; }",
            "accumulate": "function(s, v) { return s + v; }",
            "accumulateArgs": ["$v"],
            "merge": "function(a, b) { return a + b; }",
            "lang": "js",
        }}}};
        assert_eq!(
            run(vec![no_finalize], input).unwrap(),
            vec![doc! {"_id": null, "s": 435.0}]
        );
    }

    #[test]
    fn js_accumulator_arguments_are_checked() {
        let e = |acc: Bson| {
            err_code(
                vec![doc! {"$group": {"_id": null, "a": {"$accumulator": acc}}}],
                vec![doc! {}],
            )
        };
        let full = doc! {
            "init": "function() { return 0; }",
            "accumulate": "function(s) { return s; }",
            "accumulateArgs": [],
            "merge": "function(a, b) { return a; }",
            "lang": "js",
        };
        let without = |k: &str| {
            let mut d = full.clone();
            d.remove(k);
            Bson::Document(d)
        };
        let with = |k: &str, v: Bson| {
            let mut d = full.clone();
            d.insert(k, v);
            Bson::Document(d)
        };
        assert_eq!(e(Bson::Int32(1)), 4544703);
        assert_eq!(e(with("init", Bson::Int32(1))), 4544702);
        assert_eq!(e(with("init", Bson::String("$x".into()))), 4544701);
        assert_eq!(e(with("lang", Bson::Int32(1))), 4544704);
        assert_eq!(e(with("lang", Bson::String("py".into()))), 4544705);
        assert_eq!(e(with("other", Bson::Int32(1))), 4544706);
        assert_eq!(e(without("init")), 4544707);
        assert_eq!(e(without("accumulate")), 4544708);
        assert_eq!(e(without("merge")), 4544709);
        assert_eq!(e(without("accumulateArgs")), 4544710);
        assert_eq!(e(with("initArgs", Bson::Int32(1))), 4544711);
        assert_eq!(e(with("accumulateArgs", Bson::Int32(1))), 4544712);
        assert_eq!(
            e(with(
                "accumulate",
                Bson::String("function() { throw 1; }".into())
            )),
            139
        );
    }

    #[test]
    fn partial_and_final_equal_single_group() {
        let input: Vec<Document> = (0..30)
            .map(|i| doc! {"g": i % 4, "v": i, "w": (i * 7) % 11, "d": f64::from(i) / 3.0})
            .collect();
        let spec = doc! {"$group": {
            "_id": "$g",
            "sum": {"$sum": "$v"}, "avg": {"$avg": "$w"}, "min": {"$min": "$w"},
            "max": {"$max": "$w"}, "n": {"$count": {}}, "set": {"$addToSet": "$w"},
            "pop": {"$stdDevPop": "$d"}, "samp": {"$stdDevSamp": "$d"},
            "top": {"$top": {"sortBy": {"w": -1, "v": 1}, "output": "$v"}},
            "bottom": {"$bottom": {"sortBy": {"w": -1, "v": 1}, "output": "$v"}},
            "topN": {"$topN": {"n": 3, "sortBy": {"w": 1, "v": 1}, "output": "$v"}},
            "bottomN": {"$bottomN": {"n": 3, "sortBy": {"w": 1, "v": 1}, "output": "$v"}},
            "maxN": {"$maxN": {"n": 2, "input": "$w"}},
            "minN": {"$minN": {"n": 2, "input": "$w"}},
        }};
        let single = by_id(run(vec![spec.clone()], input.clone()).unwrap());
        let split = by_id(split_run(spec, &input));
        assert_eq!(single.len(), 4);
        for (a, b) in single.iter().zip(&split) {
            for (k, v) in a {
                match (k.as_str(), v) {
                    ("set", Bson::Array(x)) => {
                        let mut x: Vec<i32> = x.iter().map(|v| v.as_i32().unwrap()).collect();
                        let mut y: Vec<i32> = b
                            .get_array("set")
                            .unwrap()
                            .iter()
                            .map(|v| v.as_i32().unwrap())
                            .collect();
                        x.sort();
                        y.sort();
                        assert_eq!(x, y);
                    }
                    (_, Bson::Double(x)) => {
                        assert!((x - b.get_f64(k).unwrap()).abs() < 1e-9, "{k}")
                    }
                    _ => assert_eq!(Some(v), b.get(k), "{k}"),
                }
            }
        }
    }

    #[test]
    fn partial_sums_keep_int_type() {
        let input = vec![
            doc! {"v": i32::MAX},
            doc! {"v": i32::MAX},
            doc! {"v": i32::MIN},
            doc! {"v": i32::MIN},
            doc! {"v": 2},
            doc! {"v": 0},
        ];
        let spec = doc! {"$group": {"_id": null, "s": {"$sum": "$v"}, "a": {"$avg": "$v"}}};
        let single = run(vec![spec.clone()], input.clone()).unwrap();
        assert_eq!(single, vec![doc! {"_id": null, "s": 0, "a": 0.0}]);
        assert_eq!(split_run(spec, &input), single);
    }

    #[test]
    fn order_sensitive_groups_run_at_router() {
        let stages = vec![Bson::Document(
            doc! {"$group": {"_id": null, "p": {"$push": 1}}},
        )];
        let p = crate::aggregate::Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        assert!(matches!(p.stages[0].split(), Split::RouterOnly));
        assert_eq!(
            p.stages[0].explain(),
            doc! {"$group": {"_id": null, "p": {"$push": 1}}}
        );
    }

    #[test]
    fn group_spills_or_fails() {
        let dir = tempfile::tempdir().unwrap();
        let input: Vec<Document> = (0..400).map(|i| doc! {"g": i % 100, "v": i}).collect();
        let spec = doc! {"$group": {"_id": "$g", "s": {"$sum": "$v"}, "p": {"$push": "$v"}, "f": {"$first": "$v"}}};
        let no_disk = ctx_with(2_000, false, dir.path());
        let e = run_in(&no_disk, vec![spec.clone()], input.clone()).unwrap_err();
        assert_eq!(e.code.number(), 292);
        assert_eq!(
            e.message,
            "Exceeded memory limit for $group, but didn't allow external sort. Pass allowDiskUse:true to opt in."
        );
        let disk = ctx_with(2_000, true, dir.path());
        let spilled = run_in(&disk, vec![spec.clone()], input.clone()).unwrap();
        let expected = by_id(run(vec![spec], input).unwrap());
        assert_eq!(spilled, expected);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn bucket() {
        let input: Vec<Document> = [1, 5, 12, 25, 30, 100]
            .iter()
            .map(|v| doc! {"v": *v})
            .collect();
        let out = run(
            vec![doc! {"$bucket": {"groupBy": "$v", "boundaries": [0, 10, 20, 30], "default": "other"}}],
            input.clone(),
        )
        .unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"_id": 0, "count": 2},
                doc! {"_id": 10, "count": 1},
                doc! {"_id": 20, "count": 1},
                doc! {"_id": "other", "count": 2},
            ]
        );
        let out = run(
            vec![doc! {"$bucket": {"groupBy": "$v", "boundaries": [0, 50, 200], "output": {"s": {"$sum": "$v"}}}}],
            input.clone(),
        )
        .unwrap();
        assert_eq!(
            out,
            vec![doc! {"_id": 0, "s": 73}, doc! {"_id": 50, "s": 100}]
        );
        assert_eq!(
            err_code(
                vec![doc! {"$bucket": {"groupBy": "$v", "boundaries": [0, 10]}}],
                input
            ),
            40066
        );
        let e = |b: Document| err_code(vec![doc! {"$bucket": b}], vec![]);
        assert_eq!(e(doc! {"groupBy": "$v"}), 40198);
        assert_eq!(e(doc! {"groupBy": "$v", "boundaries": [0]}), 40192);
        assert_eq!(e(doc! {"groupBy": "$v", "boundaries": [0, "a"]}), 40193);
        assert_eq!(e(doc! {"groupBy": "$v", "boundaries": [5, 1]}), 40194);
        assert_eq!(
            e(doc! {"groupBy": "$v", "boundaries": [0, 10], "default": 5}),
            40199
        );
        assert_eq!(e(doc! {"groupBy": "v", "boundaries": [0, 10]}), 40202);
        assert_eq!(e(doc! {"groupBy": "$v", "boundaries": 1}), 40200);
        assert_eq!(
            e(doc! {"groupBy": "$v", "boundaries": [0, 1], "x": 1}),
            40197
        );
        assert_eq!(
            e(doc! {"groupBy": "$v", "boundaries": [0, 1], "output": 1}),
            40196
        );
    }

    #[test]
    fn bucket_auto() {
        let input: Vec<Document> = (1..=10).map(|v| doc! {"v": v}).collect();
        let out = run(
            vec![doc! {"$bucketAuto": {"groupBy": "$v", "buckets": 3}}],
            input.clone(),
        )
        .unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"_id": {"min": 1, "max": 4}, "count": 3},
                doc! {"_id": {"min": 4, "max": 7}, "count": 3},
                doc! {"_id": {"min": 7, "max": 10}, "count": 4},
            ]
        );
        let out = run(
            vec![doc! {"$bucketAuto": {"groupBy": "$v", "buckets": 2, "granularity": "POWERSOF2", "output": {"s": {"$sum": "$v"}}}}],
            input,
        )
        .unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"_id": {"min": 0.5, "max": 8.0}, "s": 28},
                doc! {"_id": {"min": 8.0, "max": 16.0}, "s": 27},
            ]
        );
        let e = |b: Document| err_code(vec![doc! {"$bucketAuto": b}], vec![]);
        assert_eq!(e(doc! {"groupBy": "$v"}), 40246);
        assert_eq!(e(doc! {"groupBy": "$v", "buckets": 0}), 40243);
        assert_eq!(e(doc! {"groupBy": "$v", "buckets": "x"}), 40241);
        assert_eq!(e(doc! {"groupBy": "$v", "buckets": 1.5}), 40242);
        assert_eq!(e(doc! {"groupBy": "$v", "buckets": 2, "x": 1}), 40245);
        assert_eq!(
            e(doc! {"groupBy": "$v", "buckets": 2, "granularity": "X"}),
            40257
        );
        assert_eq!(
            err_code(
                vec![doc! {"$bucketAuto": {"groupBy": "$v", "buckets": 2, "granularity": "R5"}}],
                vec![doc! {"v": "a"}]
            ),
            40258
        );
    }

    #[test]
    fn bucket_auto_spills_or_fails() {
        let dir = tempfile::tempdir().unwrap();
        // Many ties (30 distinct values), so equal values meet across runs.
        let input: Vec<Document> = (0..600)
            .map(|i| doc! {"_id": i, "v": (i * 7) % 30, "pad": "x".repeat(20)})
            .collect();
        let specs = [
            doc! {"$bucketAuto": {"groupBy": "$v", "buckets": 7, "output": {
                "n": {"$sum": 1}, "ids": {"$push": "$_id"}, "f": {"$first": "$_id"},
            }}},
            doc! {"$bucketAuto": {"groupBy": {"$add": ["$v", 1]}, "buckets": 4,
            "granularity": "R10", "output": {"l": {"$last": "$_id"}}}},
            doc! {"$bucketAuto": {"groupBy": "$v", "buckets": 100}},
        ];
        for spec in specs {
            let expected = run(vec![spec.clone()], input.clone()).unwrap();
            let no_disk = ctx_with(2_000, false, dir.path());
            let e = run_in(&no_disk, vec![spec.clone()], input.clone()).unwrap_err();
            assert_eq!(e.code.number(), 292);
            assert_eq!(
                e.message,
                "Sort exceeded memory limit of 2000 bytes, but did not opt in to external sorting."
            );
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

            let disk = ctx_with(2_000, true, dir.path());
            let p = crate::aggregate::Pipeline::parse(
                &[Bson::Document(spec.clone())],
                &ParseContext::default(),
            )
            .unwrap();
            let out = p
                .run(Box::new(input.clone().into_iter().map(Ok)), &disk)
                .unwrap();
            // The sorted input waits on disk until the buckets are read.
            assert!(std::fs::read_dir(dir.path()).unwrap().count() > 1, "{spec}");
            let spilled: Vec<Document> = out.map(|d| d.unwrap()).collect();
            assert_eq!(spilled, expected, "{spec}");
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }

    #[test]
    fn bucket_auto_spilled_and_abandoned_leaves_no_files() {
        let dir = tempfile::tempdir().unwrap();
        let input: Vec<Document> = (0..300).map(|i| doc! {"v": i % 17}).collect();
        let disk = ctx_with(1_000, true, dir.path());
        let p = crate::aggregate::Pipeline::parse(
            &[Bson::Document(
                doc! {"$bucketAuto": {"groupBy": "$v", "buckets": 5}},
            )],
            &ParseContext::default(),
        )
        .unwrap();
        let mut out = p.run(Box::new(input.into_iter().map(Ok)), &disk).unwrap();
        assert!(out.next().unwrap().is_ok());
        drop(out);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
