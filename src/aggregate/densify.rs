//! Gap filling: `$densify` and `$fill`.
//!
//! `$densify` is what MongoDB desugars it into: a `$sort` by the
//! partition fields (unless the bounds are `"full"`) and the field, then
//! the densification over the sorted stream (`$_internalDensify`). On a
//! partitioned collection the sort runs on every partition, the router
//! merges the sorted streams, and the densification runs once after the
//! merge, as a mongos runs it.
//!
//! Values are generated on a grid of `step`s: from the lowest value of
//! the field over all documents (`"full"`), from each partition's lowest
//! (`"partition"`), or from the lower bound (`[lo, hi]`, generating below
//! `hi` only). Each partition keeps the next grid value it lacks; a
//! document with the field on the grid fills that point, one off the
//! grid is passed along between the generated documents. What is left
//! after the input ends — up to the highest value seen for `"full"`
//! (itself included when on the grid), up to `hi` for bounds — comes
//! last, partition by partition in the order they first appeared (MongoDB
//! keeps them in a hash table). Documents whose field is null or missing
//! pass through unchanged. Generated documents hold the partition fields
//! and the field only.
//!
//! `$fill` is MongoDB's rewrite too: `$setWindowFields` with `$locf` or
//! `$linearFill` for the `method` outputs, then `$addFields` with
//! `$ifNull` for the `value` outputs.

use std::collections::HashMap;
use std::sync::Arc;

use bson::{doc, Bson, DateTime, Document};

use super::basic::{parse_add_fields, sort, Chain};
use super::lookup::validate_field_path;
use super::spill::approx_size;
use super::window::parse_set_window_fields;
use super::{Context, DocStream, InputStream, ParseContext, Split, Stage, StageParser};
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::{compare, type_name, Number};
use crate::query::expr::{Expr, TimeUnit};
use crate::query::keystring::encode_value;
use crate::query::path::get_in_documents;
use crate::query::sort::SortSpec;

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] =
    &[("$densify", parse_densify), ("$fill", parse_fill)];

/// Most documents one `$densify` may generate (MongoDB's
/// `internalQueryMaxAllowedDensifyDocs`).
const MAX_GENERATED: usize = 500_000;

fn wrong_type(path: &str, value: &Bson, expected: &str) -> Error {
    Error::type_mismatch(format!(
        "BSON field '{path}' is the wrong type '{}', expected type '{expected}'",
        type_name(value)
    ))
}

/// `partitionByFields`: an array of field names, each a string.
fn field_names(field: &str, value: &Bson) -> Result<Vec<String>> {
    let Bson::Array(items) = value else {
        return Err(wrong_type(field, value, "array"));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Bson::String(s) => Ok(s.clone()),
            other => Err(wrong_type(&format!("{field}.{i}"), other, "string")),
        })
        .collect()
}

fn unknown_field(path: &str) -> Error {
    Error::new(
        ErrorCode::UnknownField,
        format!("BSON field '{path}' is an unknown field."),
    )
}

fn missing_field(path: &str) -> Error {
    Error::new(
        ErrorCode::MissingField,
        format!("BSON field '{path}' is missing but a required field"),
    )
}

/// A field path as MongoDB's `FieldPath` takes it.
fn field_path(path: &str) -> Result<()> {
    if path.is_empty() {
        return Err(Error::new(
            ErrorCode::EmptyFieldPath,
            "FieldPath cannot be constructed with empty string",
        ));
    }
    validate_field_path(path)
}

// ---------------------------------------------------------------------------
// $densify: parsing

#[derive(Debug, Clone)]
enum Bounds {
    Full,
    Partition,
    Explicit(Box<(Bson, Bson)>),
}

#[derive(Debug, Clone)]
struct Range {
    step: Bson,
    unit: Option<(TimeUnit, i64, String)>,
    bounds: Bounds,
}

impl Range {
    fn spec(&self) -> Document {
        let mut spec = doc! {"step": self.step.clone()};
        spec.insert(
            "bounds",
            match &self.bounds {
                Bounds::Full => Bson::String("full".into()),
                Bounds::Partition => Bson::String("partition".into()),
                Bounds::Explicit(b) => Bson::Array(vec![b.0.clone(), b.1.clone()]),
            },
        );
        if let Some((_, _, name)) = &self.unit {
            spec.insert("unit", name.clone());
        }
        spec
    }

    /// `value` plus one step.
    fn add(&self, value: &Bson) -> Result<Bson> {
        match (value, &self.unit) {
            (Bson::DateTime(d), Some((unit, step, _))) => unit
                .add(d.timestamp_millis(), *step)
                .map(|ms| Bson::DateTime(DateTime::from_millis(ms)))
                .ok_or_else(|| Error::new(ErrorCode::Overflow, "date overflow in $densify")),
            _ => match (Number::of(value), Number::of(&self.step)) {
                (Some(a), Some(b)) => Ok(a.add_widening(b).into_bson()),
                _ => Err(Error::internal(
                    "$densify stepped a value that is no number",
                )),
            },
        }
    }
}

/// A step that is a whole number, as `integral64Bit` asks.
fn whole(n: Number) -> Option<i64> {
    match n {
        Number::Int32(i) => Some(i64::from(i)),
        Number::Int64(i) => Some(i),
        Number::Double(d) => {
            (d.fract() == 0.0 && crate::query::compare::f64_fits_i64(d)).then_some(d as i64)
        }
        Number::Decimal(d) => d.to_i64_exact(),
    }
}

fn parse_range(value: &Bson) -> Result<Range> {
    let Bson::Document(spec) = value else {
        return Err(wrong_type("$densify.range", value, "object"));
    };
    let (mut step, mut unit, mut bounds) = (None, None, None);
    for (k, v) in spec {
        match k.as_str() {
            "step" => {
                if Number::of(v).is_none() {
                    return Err(Error::type_mismatch(format!(
                        "BSON field '$densify.range.step' is the wrong type '{}', expected types \
                         '[long, int, decimal, double]'",
                        type_name(v)
                    )));
                }
                step = Some(v.clone());
            }
            "unit" => match v {
                Bson::String(s) => unit = Some(s.clone()),
                other => return Err(wrong_type("$densify.range.unit", other, "string")),
            },
            "bounds" => bounds = Some(v.clone()),
            _ => return Err(unknown_field(&format!("$densify.range.{k}"))),
        }
    }
    let step = step.ok_or_else(|| missing_field("$densify.range.step"))?;
    let bounds = bounds.ok_or_else(|| missing_field("$densify.range.bounds"))?;
    // RangeStatement::parse.
    let step_number = Number::of(&step).filter(|n| !n.is_nan() && !n.is_zero());
    let positive = step_number.is_some_and(|n| compare(&n.into_bson(), &Bson::Int32(0)).is_gt());
    if !positive {
        return Err(Error::new(
            ErrorCode::DensifyStepNotPositive,
            "The step parameter in a range statement must be a strictly positive numeric value",
        ));
    }
    let unit = match unit {
        None => None,
        Some(name) => {
            let Some(amount) = step_number.and_then(whole) else {
                return Err(Error::new(
                    ErrorCode::DensifyDateStepNotIntegral,
                    "The step parameter in a range statement must be a whole number when \
                     densifying a date range",
                ));
            };
            Some((TimeUnit::parse(&name)?, amount, name))
        }
    };
    let bounds =
        match &bounds {
            Bson::Array(items) => {
                let [lo, hi] = items.as_slice() else {
                    return Err(Error::new(
                        ErrorCode::DensifyBoundsNotTwo,
                        "A bounding array in a range statement must have exactly two elements",
                    ));
                };
                if compare(lo, hi).is_gt() {
                    return Err(Error::new(
                        ErrorCode::DensifyBoundsNotAscending,
                        "A bounding array must be an ascending array of either two dates or two \
                     numbers",
                    ));
                }
                if Number::of(lo).is_some() {
                    if unit.is_some() {
                        return Err(Error::new(
                            ErrorCode::DensifyNumericBoundsWithUnit,
                            "Numeric bounds may not have unit parameter",
                        ));
                    }
                    if Number::of(hi).is_none() {
                        return Err(Error::new(
                            ErrorCode::DensifyBoundsNumberMixed,
                            "A bounding array must contain either both dates or both numeric types",
                        ));
                    }
                    let kind = std::mem::discriminant;
                    if kind(lo) != kind(hi) || kind(lo) != kind(&step) {
                        return Err(Error::new(
                            ErrorCode::DensifyBoundsStepTypesDiffer,
                            "Upper bound, lower bound, and step must all have the same type",
                        ));
                    }
                } else if matches!(lo, Bson::DateTime(_)) {
                    if !matches!(hi, Bson::DateTime(_)) {
                        return Err(Error::new(
                            ErrorCode::DensifyBoundsDateMixed,
                            "A bounding array must contain either both dates or both numeric types",
                        ));
                    }
                    if unit.is_none() {
                        return Err(Error::new(
                            ErrorCode::DensifyDateBoundsNeedUnit,
                            "A bounding array of dates must specify a unit",
                        ));
                    }
                } else {
                    return Err(Error::new(
                        ErrorCode::DensifyBoundsNotNumbersOrDates,
                        "Explicit bounds must be numeric or dates",
                    ));
                }
                Bounds::Explicit(Box::new((lo.clone(), hi.clone())))
            }
            Bson::String(s) if s == "full" => Bounds::Full,
            Bson::String(s) if s == "partition" => Bounds::Partition,
            Bson::String(_) => {
                return Err(Error::new(
                    ErrorCode::DensifyBoundsUnknownString,
                    "Bounds string must either be 'full' or 'partition'",
                ))
            }
            _ => return Err(Error::new(
                ErrorCode::DensifyBoundsWrongType,
                "The bounds in a range statement must be the string 'full', 'partition', or an \
                 ascending array of two numbers or two dates",
            )),
        };
    Ok(Range { step, unit, bounds })
}

/// What both halves of `$densify` share.
struct Spec {
    field: String,
    field_parts: Vec<String>,
    partitions: Vec<String>,
    /// `{p: "$p", x: {y: "$x.y"}}`: a document's partition.
    partition_expr: Option<Expr>,
    range: Range,
}

struct Densify {
    spec: Arc<Spec>,
    /// The sort MongoDB puts first.
    order: SortSpec,
    source: Document,
}

fn parse_densify(arg: &Bson, _: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::failed_to_parse(format!(
            "The $densify stage specification must be an object, found {}",
            type_name(arg)
        )));
    };
    let (mut field, mut partitions, mut range) = (None, None, None);
    for (k, v) in spec {
        match k.as_str() {
            "field" => match v {
                Bson::String(s) => field = Some(s.clone()),
                other => return Err(wrong_type("$densify.field", other, "string")),
            },
            "partitionByFields" => {
                partitions = Some(field_names("$densify.partitionByFields", v)?);
            }
            "range" => range = Some(parse_range(v)?),
            _ => return Err(unknown_field(&format!("$densify.{k}"))),
        }
    }
    let field = field.ok_or_else(|| missing_field("$densify.field"))?;
    let range = range.ok_or_else(|| missing_field("$densify.range"))?;
    let partitions = partitions.unwrap_or_default();
    for p in &partitions {
        field_path(p)?;
    }
    field_path(&field)?;
    if matches!(range.bounds, Bounds::Partition) && partitions.is_empty() {
        return Err(Error::new(
            ErrorCode::DensifyPartitionBoundsNeedFields,
            "One cannot specify the bounds as 'partition' without specifying a non-empty array \
             of partitionByFields. You may have meant to specify 'full' bounds.",
        ));
    }
    // The sort: the partition fields (not for "full"), then the field.
    let mut order = Document::new();
    if !matches!(range.bounds, Bounds::Full) {
        for p in &partitions {
            order.insert(p.clone(), 1);
        }
    }
    order.insert(field.clone(), 1);
    let order = SortSpec::parse(&order)?;
    let partition_expr = if partitions.is_empty() {
        None
    } else {
        let mut object = Document::new();
        for p in &partitions {
            nest(&mut object, p, Bson::String(format!("${p}")));
        }
        Some(Expr::parse(&Bson::Document(object))?)
    };
    Ok(Box::new(Densify {
        spec: Arc::new(Spec {
            field_parts: field.split('.').map(str::to_string).collect(),
            field,
            partitions,
            partition_expr,
            range,
        }),
        order,
        source: spec.clone(),
    }))
}

/// Sets `path` in `doc`, making documents on the way.
fn nest(doc: &mut Document, path: &str, value: Bson) {
    match path.split_once('.') {
        None => {
            doc.insert(path, value);
        }
        Some((head, rest)) => {
            if !matches!(doc.get(head), Some(Bson::Document(_))) {
                doc.insert(head, Document::new());
            }
            if let Some(Bson::Document(inner)) = doc.get_mut(head) {
                nest(inner, rest, value);
            }
        }
    }
}

impl Spec {
    fn explain(&self) -> Document {
        doc! {
            "field": self.field.clone(),
            "partitionByFields": self.partitions.clone(),
            "range": self.range.spec(),
        }
    }
}

impl Stage for Densify {
    fn name(&self) -> &'static str {
        "$densify"
    }
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let sorted = sort(self.order.clone()).apply(input, ctx)?;
        Ok(densify(self.spec.clone(), sorted, ctx))
    }
    fn apply_input(&self, input: InputStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let sorted = sort(self.order.clone()).apply_input(input, ctx)?;
        Ok(densify(self.spec.clone(), sorted, ctx))
    }
    /// The sort splits across partitions; the densification runs after
    /// the merge, on the whole sorted stream.
    fn split(&self) -> Split {
        Split::Blocking {
            partition: sort(self.order.clone()),
            router: Some(Box::new(InternalDensify(self.spec.clone()))),
            merge_sort: Some(self.order.clone()),
        }
    }
    fn explain(&self) -> Document {
        doc! {"$densify": self.source.clone()}
    }
}

/// The densification over sorted input (`$_internalDensify`).
struct InternalDensify(Arc<Spec>);

impl Stage for InternalDensify {
    fn name(&self) -> &'static str {
        "$densify"
    }
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        Ok(densify(self.0.clone(), input, ctx))
    }
    fn split(&self) -> Split {
        Split::RouterOnly
    }
    fn explain(&self) -> Document {
        doc! {"$_internalDensify": self.0.explain()}
    }
}

// ---------------------------------------------------------------------------
// $densify: running

/// One partition (or the whole input): its key document and the next
/// grid value it lacks.
struct Line {
    include: Document,
    next: Option<Bson>,
}

/// Where a run of generated values stops.
#[derive(Clone)]
enum Stop {
    Below(Bson),
    AtMost(Bson),
}

impl Stop {
    fn admits(&self, value: &Bson) -> bool {
        match self {
            Stop::Below(limit) => compare(value, limit).is_lt(),
            Stop::AtMost(limit) => compare(value, limit).is_le(),
        }
    }
}

/// Generated values pending on one line, then (for a document that
/// caused them) the document itself.
struct Run {
    line: usize,
    stop: Stop,
    then: Option<(Document, Bson)>,
}

struct Densifier {
    spec: Arc<Spec>,
    input: DocStream,
    lines: Vec<Line>,
    index: HashMap<Vec<u8>, usize>,
    /// The lowest and highest values seen (`"full"` bounds).
    min: Option<Bson>,
    max: Option<Bson>,
    run: Option<Run>,
    /// The runs that finish the lines once the input is over.
    tails: Option<std::vec::IntoIter<Run>>,
    generated: usize,
    table_bytes: usize,
    limit: usize,
    done: bool,
}

fn densify(spec: Arc<Spec>, input: DocStream, ctx: &Arc<dyn Context>) -> DocStream {
    let mut lines = Vec::new();
    if spec.partition_expr.is_none() {
        // The whole input is one line; with bounds it exists before any
        // document (an empty input still gets the whole range).
        let next = match &spec.range.bounds {
            Bounds::Explicit(b) => Some(b.0.clone()),
            _ => None,
        };
        lines.push(Line {
            include: Document::new(),
            next,
        });
    }
    Box::new(Densifier {
        spec,
        input,
        lines,
        index: HashMap::new(),
        min: None,
        max: None,
        run: None,
        tails: None,
        generated: 0,
        table_bytes: 0,
        limit: ctx.limits().max_blocking_bytes,
        done: false,
    })
}

impl Densifier {
    /// The value to densify on, checked as MongoDB's `getDensifyValue`.
    fn value_of(&self, doc: &Document) -> Result<Option<Bson>> {
        let value = get_in_documents(doc, &self.spec.field_parts);
        let value = match value {
            None | Some(Bson::Null) | Some(Bson::Undefined) => return Ok(None),
            Some(v) => v,
        };
        let number = Number::of(value).is_some();
        if !number && !matches!(value, Bson::DateTime(_)) {
            return Err(Error::new(
                ErrorCode::DensifyValueNotNumericOrDate,
                "Densify field type must be numeric or a date",
            ));
        }
        let has_unit = self.spec.range.unit.is_some();
        if number == has_unit {
            return Err(Error::new(
                ErrorCode::DensifyValueUnitMismatch,
                if number {
                    "Encountered numeric densify value in collection when step has a date unit."
                } else {
                    "Encountered date densify value in collection when step does not have a \
                     date unit."
                },
            ));
        }
        Ok(Some(value.clone()))
    }

    /// The line of `doc`, made when new.
    fn line_of(&mut self, doc: &Document, value: &Bson) -> Result<usize> {
        let Some(expr) = &self.spec.partition_expr else {
            let line = &mut self.lines[0];
            if line.next.is_none() {
                // "full" or "partition" without partitions: the grid
                // starts at the first value.
                line.next = Some(value.clone());
            }
            return Ok(0);
        };
        let key = match expr.evaluate_value(doc)? {
            Some(Bson::Document(d)) => d,
            _ => Document::new(),
        };
        let mut bytes = Vec::new();
        encode_value(&Bson::Document(key.clone()), &mut bytes);
        if let Some(&at) = self.index.get(&bytes) {
            return Ok(at);
        }
        self.table_bytes += 2 * bytes.len() + approx_size(value);
        if self.table_bytes > self.limit {
            return Err(Error::new(
                ErrorCode::DensifyMemoryExceeded,
                format!("$densify exceeded memory limit of {}", self.limit),
            ));
        }
        let next = match &self.spec.range.bounds {
            Bounds::Explicit(b) => b.0.clone(),
            Bounds::Full => self.min.clone().unwrap_or_else(|| value.clone()),
            Bounds::Partition => value.clone(),
        };
        self.index.insert(bytes, self.lines.len());
        self.lines.push(Line {
            include: key,
            next: Some(next),
        });
        Ok(self.lines.len() - 1)
    }

    /// A generated document at `value` on `line`.
    fn generate(&mut self, line: usize, value: Bson) -> Result<Document> {
        self.generated += 1;
        if self.generated > MAX_GENERATED {
            return Err(Error::new(
                ErrorCode::DensifyTooManyDocuments,
                format!(
                    "Generated {} documents in $densify, which is over the limit of \
                     {MAX_GENERATED}. Increase the 'internalQueryMaxAllowedDensifyDocs' \
                     parameter to allow more generated documents",
                    self.generated
                ),
            ));
        }
        let mut doc = self.lines[line].include.clone();
        set_generated(&mut doc, &self.spec.field_parts, value)?;
        Ok(doc)
    }

    /// The next document of the current run, or `None` when it is over.
    fn step_run(&mut self) -> Result<Option<Document>> {
        let Some(run) = self.run.as_mut() else {
            return Ok(None);
        };
        let line = run.line;
        let next = self.lines[line].next.clone();
        if let Some(next) = next.filter(|n| run.stop.admits(n)) {
            self.lines[line].next = Some(self.spec.range.add(&next)?);
            return self.generate(line, next).map(Some);
        }
        let run = self.run.take();
        let Some((doc, value)) = run.and_then(|r| r.then) else {
            return Ok(None);
        };
        // A document on the grid fills its point.
        if let Some(next) = &self.lines[line].next {
            if compare(next, &value).is_eq() {
                self.lines[line].next = Some(self.spec.range.add(next)?);
            }
        }
        Ok(Some(doc))
    }

    /// What finishes each line once the input is over.
    fn tails(&self) -> Vec<Run> {
        let stop = match &self.spec.range.bounds {
            Bounds::Explicit(b) => Stop::Below(b.1.clone()),
            // Up to the highest value, itself included when on the grid
            // (a value off the grid is never equal to a generated one).
            Bounds::Full => match &self.max {
                Some(max) => Stop::AtMost(max.clone()),
                None => return Vec::new(),
            },
            Bounds::Partition => return Vec::new(),
        };
        (0..self.lines.len())
            .map(|line| Run {
                line,
                stop: stop.clone(),
                then: None,
            })
            .collect()
    }

    fn next_doc(&mut self) -> Result<Option<Document>> {
        loop {
            if let Some(doc) = self.step_run()? {
                return Ok(Some(doc));
            }
            if let Some(tails) = &mut self.tails {
                match tails.next() {
                    Some(run) => {
                        self.run = Some(run);
                        continue;
                    }
                    None => return Ok(None),
                }
            }
            let Some(doc) = self.input.next().transpose()? else {
                self.tails = Some(self.tails().into_iter());
                continue;
            };
            let Some(value) = self.value_of(&doc)? else {
                return Ok(Some(doc));
            };
            if self.min.is_none() {
                self.min = Some(value.clone());
            }
            self.max = Some(value.clone());
            let line = self.line_of(&doc, &value)?;
            // Generate below the document (and below `hi`), then the
            // document.
            let stop = match &self.spec.range.bounds {
                Bounds::Explicit(b) if compare(&b.1, &value).is_lt() => Stop::Below(b.1.clone()),
                _ => Stop::Below(value.clone()),
            };
            self.run = Some(Run {
                line,
                stop,
                then: Some((doc, value)),
            });
        }
    }
}

impl Iterator for Densifier {
    type Item = Result<Document>;
    fn next(&mut self) -> Option<Result<Document>> {
        if self.done {
            return None;
        }
        match self.next_doc() {
            Ok(Some(doc)) => Some(Ok(doc)),
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

/// Sets the densified field of a generated document: never through an
/// array (5733307) or over a value that is not a document (5733308).
fn set_generated(doc: &mut Document, parts: &[String], value: Bson) -> Result<()> {
    let Some((head, rest)) = parts.split_first() else {
        return Ok(());
    };
    if rest.is_empty() {
        doc.insert(head.clone(), value);
        return Ok(());
    }
    match doc.get_mut(head.as_str()) {
        None => {
            let mut inner = Document::new();
            set_generated(&mut inner, rest, value)?;
            doc.insert(head.clone(), inner);
            Ok(())
        }
        Some(Bson::Document(inner)) => set_generated(inner, rest, value),
        Some(Bson::Array(_)) => Err(Error::new(
            ErrorCode::DensifyFieldInArray,
            "$densify cannot generate fields nested inside arrays",
        )),
        Some(_) => Err(Error::new(
            ErrorCode::DensifyOverwritesNonObject,
            "$densify cannot overwrite non-object values with objects",
        )),
    }
}

// ---------------------------------------------------------------------------
// $fill

/// A stage shared between the whole `$fill` and the parts of its split.
struct Shared(Arc<dyn Stage>);

impl Stage for Shared {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        self.0.apply(input, ctx)
    }
    fn apply_input(&self, input: InputStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        self.0.apply_input(input, ctx)
    }
    fn split(&self) -> Split {
        self.0.split()
    }
    fn explain(&self) -> Document {
        self.0.explain()
    }
}

struct Fill {
    /// `$setWindowFields` for the `method` outputs.
    window: Option<Arc<dyn Stage>>,
    /// `$addFields` for the `value` outputs.
    values: Option<Arc<dyn Stage>>,
    source: Document,
}

fn parse_fill(arg: &Bson, pctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::failed_to_parse(format!(
            "The $fill stage specification must be an object, found {}",
            type_name(arg)
        )));
    };
    let (mut sort_by, mut partition_by, mut partition_by_fields, mut output) =
        (None, None, None, None);
    for (k, v) in spec {
        match k.as_str() {
            "sortBy" => match v {
                Bson::Document(d) => sort_by = Some(d.clone()),
                other => return Err(wrong_type("$fill.sortBy", other, "object")),
            },
            "partitionBy" => match v {
                Bson::Document(_) | Bson::String(_) => partition_by = Some(v.clone()),
                other => {
                    return Err(Error::type_mismatch(format!(
                        "BSON field '$fill.partitionBy' is the wrong type '{}', expected types \
                         '[object, string]'",
                        type_name(other)
                    )))
                }
            },
            "partitionByFields" => {
                partition_by_fields = Some(field_names("$fill.partitionByFields", v)?);
            }
            "output" => match v {
                Bson::Document(d) => output = Some(d.clone()),
                other => return Err(wrong_type("$fill.output", other, "object")),
            },
            _ => return Err(unknown_field(&format!("$fill.{k}"))),
        }
    }
    let output = output.ok_or_else(|| missing_field("$fill.output"))?;
    if output.is_empty() {
        return Err(Error::new(
            ErrorCode::FillOutputEmpty,
            "The output field in '$fill' must contain an object with at least one element",
        ));
    }
    let mut window_output = Document::new();
    let mut add_fields = Document::new();
    for (name, field_spec) in &output {
        let Bson::Document(field_spec) = field_spec else {
            return Err(Error::new(
                ErrorCode::FillOutputNotObject,
                "Each fill output specification must be an object with exactly one field",
            ));
        };
        let (mut method, mut value) = (None, None);
        for (k, v) in field_spec {
            match k.as_str() {
                "method" => match v {
                    Bson::String(s) => method = Some(s.clone()),
                    other => return Err(wrong_type("$fill.method", other, "string")),
                },
                "value" => value = Some(v.clone()),
                _ => return Err(unknown_field(&format!("$fill.{k}"))),
            }
        }
        if let Some(method) = method {
            if value.is_some() {
                return Err(Error::new(
                    ErrorCode::FillMethodAndValue,
                    "Each fill output specification must have exactly one of 'method' or \
                     'value' fields, not both",
                ));
            }
            let function = match method.as_str() {
                "locf" => "$locf",
                "linear" => "$linearFill",
                _ => {
                    return Err(Error::new(
                        ErrorCode::FillUnknownMethod,
                        "Method must be either locf or linear",
                    ))
                }
            };
            window_output.insert(name.clone(), doc! {function: format!("${name}")});
        }
        if let Some(value) = value {
            add_fields.insert(name.clone(), doc! {"$ifNull": [format!("${name}"), value]});
        }
    }
    let mut window_spec = doc! {"output": window_output.clone()};
    if let Some(sort_by) = sort_by {
        window_spec.insert("sortBy", sort_by);
    }
    if let Some(partition_by) = partition_by {
        if partition_by_fields.is_some() {
            return Err(Error::new(
                ErrorCode::FillPartitionByTwice,
                "Maximum one of 'partitionBy' and 'partitionByFields can be specified in '$fill'",
            ));
        }
        window_spec.insert("partitionBy", partition_by);
    }
    if let Some(fields) = partition_by_fields {
        let mut key = Document::new();
        for f in fields {
            key.insert(f.clone(), format!("${f}"));
        }
        window_spec.insert("partitionBy", key);
    }
    let window = if window_output.is_empty() {
        None
    } else {
        Some(Arc::from(parse_set_window_fields(
            &Bson::Document(window_spec),
            pctx,
        )?))
    };
    let values = if add_fields.is_empty() {
        None
    } else {
        Some(Arc::from(parse_add_fields(
            &Bson::Document(add_fields),
            pctx,
        )?))
    };
    Ok(Box::new(Fill {
        window,
        values,
        source: spec.clone(),
    }))
}

impl Stage for Fill {
    fn name(&self) -> &'static str {
        "$fill"
    }
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let mut stream = input;
        for stage in self.window.iter().chain(self.values.iter()) {
            stream = stage.apply(stream, ctx)?;
        }
        Ok(stream)
    }
    /// As its parts split: only `value` outputs stream through every
    /// partition; a window sorts on the partitions and computes after
    /// the merge, the values then following it at the router.
    fn split(&self) -> Split {
        let Some(window) = &self.window else {
            return Split::Streaming;
        };
        match window.split() {
            Split::Blocking {
                partition,
                router,
                merge_sort,
            } => {
                let mut stages: Vec<Box<dyn Stage>> = Vec::new();
                stages.extend(router);
                if let Some(values) = &self.values {
                    stages.push(Box::new(Shared(values.clone())));
                }
                Split::Blocking {
                    partition,
                    router: Some(Box::new(Chain {
                        name: "$fill",
                        stages,
                        spec: doc! {"$fill": self.source.clone()},
                    })),
                    merge_sort,
                }
            }
            Split::Streaming => Split::Streaming,
            Split::RouterOnly => Split::RouterOnly,
        }
    }
    fn explain(&self) -> Document {
        doc! {"$fill": self.source.clone()}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::basic::tests::{ctx_with, err_code, run};
    use crate::aggregate::Pipeline;

    fn date(s: &str) -> Bson {
        Bson::DateTime(DateTime::parse_rfc3339_str(s).unwrap())
    }

    fn densify_stage(spec: Document) -> Vec<Document> {
        vec![doc! {"$densify": spec}]
    }

    fn weather() -> Vec<Document> {
        ["00", "04", "08", "12"]
            .iter()
            .zip([12, 11, 11, 12])
            .map(|(h, t)| {
                doc! {"metadata": {"sensorId": 5578, "type": "temperature"},
                "timestamp": date(&format!("2021-05-18T{h}:00:00Z")), "temp": t}
            })
            .collect()
    }

    fn coffee() -> Vec<Document> {
        vec![
            doc! {"_id": 1, "altitude": 600, "variety": "Arabica Typica", "score": 68.3},
            doc! {"_id": 2, "altitude": 750, "variety": "Arabica Typica", "score": 69.5},
            doc! {"_id": 3, "altitude": 950, "variety": "Arabica Typica", "score": 70.5},
            doc! {"_id": 4, "altitude": 1250, "variety": "Gesha", "score": 88.15},
            doc! {"_id": 5, "altitude": 1700, "variety": "Gesha", "score": 95.5, "price": 1029},
        ]
    }

    /// `_id` of an input document, or the generated `(variety, altitude)`.
    fn shape(docs: &[Document]) -> Vec<String> {
        docs.iter()
            .map(|d| match d.get("_id") {
                Some(id) => format!("#{id}"),
                None => format!(
                    "{}@{}",
                    d.get_str("variety").unwrap_or("-"),
                    d.get("altitude").map(|v| v.to_string()).unwrap_or_default()
                ),
            })
            .collect()
    }

    #[test]
    fn table_is_sorted() {
        assert!(STAGES.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn time_series_with_explicit_bounds() {
        let out = run(
            densify_stage(
                doc! {"field": "timestamp", "range": {"step": 1, "unit": "hour",
                "bounds": [date("2021-05-18T00:00:00Z"), date("2021-05-18T08:00:00Z")]}},
            ),
            weather(),
        )
        .unwrap();
        let hours: Vec<(String, bool)> = out
            .iter()
            .map(|d| {
                let t = d
                    .get_datetime("timestamp")
                    .unwrap()
                    .try_to_rfc3339_string()
                    .unwrap();
                (t[11..13].to_string(), d.contains_key("temp"))
            })
            .collect();
        let want: Vec<(String, bool)> = [
            ("00", true),
            ("01", false),
            ("02", false),
            ("03", false),
            ("04", true),
            ("05", false),
            ("06", false),
            ("07", false),
            ("08", true),
            ("12", true),
        ]
        .iter()
        .map(|(h, real)| (h.to_string(), *real))
        .collect();
        assert_eq!(hours, want);
        assert_eq!(out[1], doc! {"timestamp": date("2021-05-18T01:00:00Z")});
    }

    #[test]
    fn full_range_over_partitions() {
        let out = run(
            densify_stage(doc! {"field": "altitude", "partitionByFields": ["variety"],
            "range": {"bounds": "full", "step": 200}}),
            coffee(),
        )
        .unwrap();
        assert_eq!(
            shape(&out),
            [
                "#1",
                "#2",
                "Arabica Typica@800",
                "#3",
                "Gesha@600",
                "Gesha@800",
                "Gesha@1000",
                "Gesha@1200",
                "#4",
                "Gesha@1400",
                "Gesha@1600",
                "#5",
                "Arabica Typica@1000",
                "Arabica Typica@1200",
                "Arabica Typica@1400",
                "Arabica Typica@1600",
            ]
        );
        // Generated documents: the partition fields, then the field.
        assert_eq!(out[2], doc! {"variety": "Arabica Typica", "altitude": 800});
    }

    #[test]
    fn partition_range() {
        let out = run(
            densify_stage(doc! {"field": "altitude", "partitionByFields": ["variety"],
            "range": {"bounds": "partition", "step": 200}}),
            coffee(),
        )
        .unwrap();
        assert_eq!(
            shape(&out),
            [
                "#1",
                "#2",
                "Arabica Typica@800",
                "#3",
                "#4",
                "Gesha@1450",
                "Gesha@1650",
                "#5"
            ]
        );
    }

    #[test]
    fn numeric_full_and_bounds_without_partitions() {
        let input = vec![
            doc! {"_id": 1, "x": 0},
            doc! {"_id": 2, "x": 5},
            doc! {"_id": 3},
        ];
        let out = run(
            densify_stage(doc! {"field": "x", "range": {"step": 2, "bounds": "full"}}),
            input.clone(),
        )
        .unwrap();
        // The document without the field passes first (null sorts low).
        assert_eq!(
            out,
            vec![
                doc! {"_id": 3},
                doc! {"_id": 1, "x": 0},
                doc! {"x": 2},
                doc! {"x": 4},
                doc! {"_id": 2, "x": 5},
            ]
        );
        let out = run(
            densify_stage(doc! {"field": "x", "range": {"step": 2, "bounds": [-3, 9]}}),
            input,
        )
        .unwrap();
        let xs: Vec<Option<i32>> = out.iter().map(|d| d.get_i32("x").ok()).collect();
        assert_eq!(
            xs,
            [
                None,
                Some(-3),
                Some(-1),
                Some(0),
                Some(1),
                Some(3),
                Some(5),
                Some(7)
            ]
        );
        // An empty input still gets the whole explicit range.
        let out = run(
            densify_stage(doc! {"field": "x", "range": {"step": 1, "bounds": [0, 3]}}),
            vec![],
        )
        .unwrap();
        assert_eq!(out, vec![doc! {"x": 0}, doc! {"x": 1}, doc! {"x": 2}]);
    }

    #[test]
    fn explicit_bounds_per_partition_finish_at_the_end() {
        let input = vec![
            doc! {"_id": 1, "p": "a", "x": 1},
            doc! {"_id": 2, "p": "b", "x": 2},
        ];
        let out = run(
            densify_stage(doc! {"field": "x", "partitionByFields": ["p"],
            "range": {"step": 1, "bounds": [0, 4]}}),
            input,
        )
        .unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"p": "a", "x": 0},
                doc! {"_id": 1, "p": "a", "x": 1},
                doc! {"p": "b", "x": 0},
                doc! {"p": "b", "x": 1},
                doc! {"_id": 2, "p": "b", "x": 2},
                doc! {"p": "a", "x": 2},
                doc! {"p": "a", "x": 3},
                doc! {"p": "b", "x": 3},
            ]
        );
    }

    #[test]
    fn months_and_nested_fields() {
        let out = run(
            densify_stage(doc! {"field": "m.t", "range": {"step": 1, "unit": "month",
            "bounds": "full"}}),
            vec![
                doc! {"_id": 1, "m": {"t": date("2021-01-31T00:00:00Z")}},
                doc! {"_id": 2, "m": {"t": date("2021-04-30T00:00:00Z")}},
            ],
        )
        .unwrap();
        let got: Vec<String> = out
            .iter()
            .map(|d| {
                let t = d.get_document("m").unwrap().get_datetime("t").unwrap();
                t.try_to_rfc3339_string().unwrap()[..10].to_string()
            })
            .collect();
        // Each step adds a month to the last value, clamping the day.
        assert_eq!(
            got,
            [
                "2021-01-31",
                "2021-02-28",
                "2021-03-28",
                "2021-04-28",
                "2021-04-30"
            ]
        );
    }

    #[test]
    fn parse_errors_carry_mongodb_codes() {
        let cases: Vec<(Bson, i32)> = vec![
            (Bson::Int32(1), 9),
            (doc! {"range": {"step": 1, "bounds": "full"}}.into(), 40414),
            (doc! {"field": "a", "range": {"step": 1}}.into(), 40414),
            (doc! {"field": "a", "range": {"bounds": "full"}}.into(), 40414),
            (doc! {"field": 1, "range": {"step": 1, "bounds": "full"}}.into(), 14),
            (doc! {"field": "a", "range": {"step": "x", "bounds": "full"}}.into(), 14),
            (doc! {"field": "a", "partitionByFields": "b",
                "range": {"step": 1, "bounds": "full"}}.into(), 14),
            (doc! {"field": "a", "range": {"step": 1, "bounds": "full", "x": 1}}.into(), 40415),
            (doc! {"field": "a", "y": 1, "range": {"step": 1, "bounds": "full"}}.into(), 40415),
            (doc! {"field": "a", "range": {"step": 1, "bounds": [1]}}.into(), 5733403),
            (doc! {"field": "a", "range": {"step": 1, "bounds": [0, 1, 2]}}.into(), 5733403),
            (doc! {"field": "a", "range": {"step": -1, "bounds": [0, 1]}}.into(), 5733401),
            (doc! {"field": "a", "range": {"step": 0, "bounds": "full"}}.into(), 5733401),
            (doc! {"field": "$a", "range": {"step": 1, "bounds": [0, 1]}}.into(), 16410),
            (doc! {"field": "a", "partitionByFields": ["$b"],
                "range": {"step": 1, "bounds": [0, 1]}}.into(), 16410),
            (doc! {"field": "a", "range": {"step": 1, "bounds": "partition"}}.into(), 5733408),
            (doc! {"field": "a", "partitionByFields": [],
                "range": {"step": 1, "bounds": "partition"}}.into(), 5733408),
            (doc! {"field": "a", "range": {"step": 1, "bounds": [2, 1]}}.into(), 5733402),
            (doc! {"field": "a", "range": {"step": 1, "bounds": [1, 2], "unit": "second"}}
                .into(), 5733409),
            (doc! {"field": "a", "range": {"step": 1, "bounds": [1, date("2020-01-01T00:00:00Z")]}}
                .into(), 5733406),
            (doc! {"field": "a", "range": {"step": 1,
                "bounds": [date("2020-01-01T00:00:00Z"), 1], "unit": "second"}}.into(), 5733402),
            (doc! {"field": "a", "range": {"step": 1.5, "unit": "second",
                "bounds": [date("2020-01-01T00:00:00Z"), date("2020-01-02T00:00:00Z")]}}
                .into(), 6586400),
            (doc! {"field": "a", "range": {"step": 1,
                "bounds": [date("2020-01-01T00:00:00Z"), date("2020-01-02T00:00:00Z")]}}
                .into(), 5733410),
            (doc! {"field": "a", "range": {"step": 1, "bounds": ["a", "b"]}}.into(), 5946800),
            (doc! {"field": "a", "range": {"step": 1, "bounds": "some"}}.into(), 5946802),
            (doc! {"field": "a", "range": {"step": 1, "bounds": 3}}.into(), 5733404),
            (doc! {"field": "a", "range": {"step": 1.0, "bounds": [0, 1]}}.into(), 5876900),
            (doc! {"field": "a", "range": {"step": 1, "unit": "fortnight", "bounds": "full"}}
                .into(), 9),
        ];
        for (spec, code) in cases {
            let stages = vec![Bson::Document(doc! {"$densify": spec.clone()})];
            let got = Pipeline::parse(&stages, &ParseContext::default())
                .err()
                .map(|e| e.code.number());
            assert_eq!(got, Some(code), "{spec}");
        }
    }

    #[test]
    fn run_errors_carry_mongodb_codes() {
        let spec = doc! {"field": "a", "range": {"step": 1, "bounds": "full"}};
        assert_eq!(
            err_code(densify_stage(spec.clone()), vec![doc! {"a": "x"}]),
            5733201
        );
        assert_eq!(
            err_code(
                densify_stage(spec),
                vec![doc! {"a": date("2020-01-01T00:00:00Z")}]
            ),
            6053600
        );
        let dated = doc! {"field": "a", "range": {"step": 1, "unit": "day", "bounds": "full"}};
        assert_eq!(err_code(densify_stage(dated), vec![doc! {"a": 1}]), 6053600);
        // Too many generated documents.
        let wide = doc! {"field": "a", "range": {"step": 1, "bounds": "full"}};
        let e = run(
            densify_stage(wide),
            vec![doc! {"a": 0}, doc! {"a": 600_000}],
        )
        .unwrap_err();
        assert_eq!(e.code.number(), 5897900);
        assert!(
            e.message
                .starts_with("Generated 500001 documents in $densify"),
            "{e}"
        );
        // A document whose field lies under an array passes through (the
        // path reaches nothing); an array value is no number.
        let nested = doc! {"field": "a.b", "range": {"step": 1, "bounds": "full"}};
        let out = run(densify_stage(nested.clone()), vec![doc! {"a": [{"b": 1}]}]).unwrap();
        assert_eq!(out, vec![doc! {"a": [{"b": 1}]}]);
        assert_eq!(
            err_code(densify_stage(nested), vec![doc! {"a": {"b": [1]}}]),
            5733201
        );
        let mut into = Document::new();
        assert_eq!(
            set_generated(&mut into, &["a".into(), "b".into()], Bson::Int32(1)).map(|_| into),
            Ok(doc! {"a": {"b": 1}})
        );
        let mut scalar = doc! {"a": 1};
        let e = set_generated(&mut scalar, &["a".into(), "b".into()], Bson::Int32(1)).unwrap_err();
        assert_eq!(e.code.number(), 5733308);
        let mut array = doc! {"a": [1]};
        let e = set_generated(&mut array, &["a".into(), "b".into()], Bson::Int32(1)).unwrap_err();
        assert_eq!(e.code.number(), 5733307);
    }

    #[test]
    fn partition_table_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx_with(2048, true, dir.path());
        let stages = vec![Bson::Document(doc! {"$densify": {"field": "x",
        "partitionByFields": ["p"], "range": {"step": 1, "bounds": "partition"}}})];
        let p = Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        let input: Vec<Document> = (0..200).map(|i| doc! {"p": i, "x": 1}).collect();
        let e = p
            .run(Box::new(input.into_iter().map(Ok)), &ctx)
            .unwrap()
            .collect::<Result<Vec<_>>>()
            .unwrap_err();
        assert_eq!(e.code.number(), 6007200);
        assert_eq!(e.message, "$densify exceeded memory limit of 2048");
    }

    #[test]
    fn densify_splits_into_sort_and_merge() {
        let stages = vec![Bson::Document(doc! {"$densify": {"field": "x",
        "partitionByFields": ["p"], "range": {"step": 1, "bounds": "partition"}}})];
        let p = Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        let Split::Blocking {
            partition,
            router,
            merge_sort,
        } = p.stages[0].split()
        else {
            panic!("not blocking");
        };
        assert_eq!(
            partition.explain(),
            doc! {"$sort": {"sortKey": {"p": 1, "x": 1}}}
        );
        assert_eq!(
            router.unwrap().explain(),
            doc! {"$_internalDensify": {"field": "x", "partitionByFields": ["p"],
            "range": {"step": 1, "bounds": "partition"}}}
        );
        assert!(merge_sort.is_some());
        // "full" bounds sort by the field alone.
        let stages = vec![Bson::Document(doc! {"$densify": {"field": "x",
        "partitionByFields": ["p"], "range": {"step": 1, "bounds": "full"}}})];
        let p = Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        let Split::Blocking { partition, .. } = p.stages[0].split() else {
            panic!("not blocking");
        };
        assert_eq!(partition.explain(), doc! {"$sort": {"sortKey": {"x": 1}}});
    }

    fn stock() -> Vec<Document> {
        let prices = [Some(500), None, Some(515), None, None, Some(485)];
        prices
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut d = doc! {"_id": i as i32,
                "time": date(&format!("2021-03-08T{:02}:00:00Z", 9 + i))};
                if let Some(p) = p {
                    d.insert("price", *p);
                }
                d
            })
            .rev()
            .collect()
    }

    #[test]
    fn fill_linear_locf_and_values() {
        let out = run(
            vec![
                doc! {"$fill": {"sortBy": {"time": 1}, "output": {"price": {"method": "linear"}}}},
            ],
            stock(),
        )
        .unwrap();
        let prices: Vec<Bson> = out
            .iter()
            .map(|d| d.get("price").unwrap().clone())
            .collect();
        assert_eq!(
            prices,
            vec![
                Bson::Int32(500),
                Bson::Double(507.5),
                Bson::Int32(515),
                Bson::Double(505.0),
                Bson::Double(495.0),
                Bson::Int32(485)
            ]
        );
        let out = run(
            vec![doc! {"$fill": {"sortBy": {"time": 1},
            "output": {"price": {"method": "locf"}, "seen": {"value": false}}}}],
            stock(),
        )
        .unwrap();
        let prices: Vec<i32> = out.iter().map(|d| d.get_i32("price").unwrap()).collect();
        assert_eq!(prices, [500, 500, 515, 515, 515, 485]);
        assert!(out.iter().all(|d| d.get_bool("seen").ok() == Some(false)));
        // Values alone: no sort, the input order stays.
        let out = run(
            vec![doc! {"$fill": {"output": {"price": {"value": {"$multiply": [2, "$_id"]}}}}}],
            stock(),
        )
        .unwrap();
        let prices: Vec<i32> = out.iter().map(|d| d.get_i32("price").unwrap()).collect();
        assert_eq!(prices, [485, 8, 6, 515, 2, 500]);
    }

    #[test]
    fn fill_partitions() {
        let input = vec![
            doc! {"_id": 1, "r": "a", "t": 1, "s": 90},
            doc! {"_id": 2, "r": "b", "t": 1, "s": 75},
            doc! {"_id": 3, "r": "a", "t": 2},
            doc! {"_id": 4, "r": "b", "t": 2},
            doc! {"_id": 5, "r": "b", "t": 3, "s": 68},
        ];
        for partition in [
            doc! {"partitionBy": {"r": "$r"}},
            doc! {"partitionByFields": ["r"]},
            doc! {"partitionBy": "$r"},
        ] {
            let mut spec = doc! {"sortBy": {"t": 1}, "output": {"s": {"method": "locf"}}};
            spec.extend(partition);
            let out = run(vec![doc! {"$fill": spec}], input.clone()).unwrap();
            let got: Vec<(i32, i32)> = out
                .iter()
                .map(|d| (d.get_i32("_id").unwrap(), d.get_i32("s").unwrap()))
                .collect();
            assert_eq!(got, [(1, 90), (3, 90), (2, 75), (4, 75), (5, 68)]);
        }
    }

    #[test]
    fn fill_parse_errors() {
        let cases: Vec<(Bson, i32)> = vec![
            (Bson::String("x".into()), 9),
            (doc! {}.into(), 40414),
            (doc! {"output": {}}.into(), 6050203),
            (doc! {"output": {"a": {"method": "random"}}}.into(), 6050202),
            (doc! {"output": {"a": "random"}}.into(), 6050200),
            (
                doc! {"output": {"a": {"method": "locf", "second": "locf"}}}.into(),
                40415,
            ),
            (
                doc! {"output": {"a": {"method": "locf", "value": 1}}}.into(),
                6050201,
            ),
            (doc! {"output": {"a": {"method": 1}}}.into(), 14),
            (
                doc! {"output": {"a": {"method": "locf"}}, "partitionBy": {"a": "$a"},
                "partitionByFields": ["a"]}
                .into(),
                6050204,
            ),
            (
                doc! {"output": {"a": {"method": "linear"}}, "partitionBy": {"p": "$p"}}.into(),
                605001,
            ),
            (
                doc! {"output": {"a": {"method": "locf"}}, "sortBy": 1}.into(),
                14,
            ),
            (
                doc! {"output": {"a": {"method": "locf"}}, "partitionBy": 1}.into(),
                14,
            ),
            (
                doc! {"output": {"a": {"method": "locf"}}, "bogus": 1}.into(),
                40415,
            ),
        ];
        for (spec, code) in cases {
            let stages = vec![Bson::Document(doc! {"$fill": spec.clone()})];
            let got = Pipeline::parse(&stages, &ParseContext::default())
                .err()
                .map(|e| e.code.number());
            assert_eq!(got, Some(code), "{spec}");
        }
    }

    #[test]
    fn fill_splits_like_its_parts() {
        let parse = |spec: Document| {
            let stages = vec![Bson::Document(doc! {"$fill": spec})];
            Pipeline::parse(&stages, &ParseContext::default()).unwrap()
        };
        let p = parse(doc! {"output": {"a": {"value": 0}}});
        assert!(matches!(p.stages[0].split(), Split::Streaming));
        let p = parse(
            doc! {"sortBy": {"t": 1}, "output": {"a": {"method": "locf"}, "b": {"value": 0}}},
        );
        let Split::Blocking {
            partition, router, ..
        } = p.stages[0].split()
        else {
            panic!("not blocking");
        };
        assert_eq!(partition.name(), "$setWindowFields");
        assert_eq!(router.unwrap().name(), "$fill");
    }
}
