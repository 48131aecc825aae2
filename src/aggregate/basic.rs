//! Streaming stages and simple blocking ones: `$match`, `$project`,
//! `$addFields`/`$set`, `$unset`, `$replaceRoot`/`$replaceWith`, `$unwind`,
//! `$skip`, `$limit`, `$count`, `$sort`, `$sample`, `$documents`.
//!
//! Streaming stages map documents one by one and run unchanged on every
//! partition. `$sort` is blocking and bounded by the memory limit (spilling
//! through [`super::spill`]); with a folded `$limit` it keeps only the top
//! k. `$limit` and `$count` run per partition and again at the router.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use rand::Rng;

use super::spill::{doc_size, park, sort_memory_error, KeyedSort, MergedRuns, SpillRun};
use super::{Context, DocStream, InputStream, ParseContext, Split, Stage, StageParser};
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::{type_name, Number};
use crate::query::expr::Expr;
use crate::query::filter::{Filter, MatchDetails};
use crate::query::path::get_in_documents;
use crate::query::projection::Projection;
use crate::query::size::{measure, Shape, SizeBudget};
use crate::query::sort::SortSpec;
use crate::query::text;

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] = &[
    ("$addFields", parse_add_fields),
    ("$count", parse_count),
    ("$documents", parse_documents),
    ("$limit", parse_limit),
    ("$match", parse_match),
    ("$project", parse_project),
    ("$replaceRoot", parse_replace_root),
    ("$replaceWith", parse_replace_with),
    ("$sample", parse_sample),
    ("$set", parse_set),
    ("$skip", parse_skip),
    ("$sort", parse_sort),
    ("$unset", parse_unset),
    ("$unwind", parse_unwind),
];

fn loc(code: ErrorCode, message: impl Into<String>) -> Error {
    Error::new(code, message)
}

/// Evaluates with the pipeline's `let` variables when there are any.
pub(super) fn eval(expr: &Expr, doc: &Document, vars: &Document) -> Result<Option<Bson>> {
    if vars.is_empty() {
        expr.evaluate_value(doc)
    } else {
        expr.evaluate_with_vars(doc, vars)
    }
}

/// Maps every document of a stream, passing errors through.
fn map_docs(
    input: DocStream,
    f: impl Fn(Document) -> Result<Option<Document>> + Send + 'static,
) -> DocStream {
    Box::new(input.filter_map(move |d| match d {
        Ok(d) => f(d).transpose(),
        Err(e) => Some(Err(e)),
    }))
}

// ---------------------------------------------------------------------------
// $match

struct Match {
    filter: Arc<Filter>,
    spec: Document,
}

/// The operators a `$match` refuses at its top level, before its filter
/// is parsed (the router's leading `$match` checks them first too).
pub fn check_match_clauses(spec: &Document) -> Result<()> {
    for key in ["$where", "$near", "$nearSphere"] {
        if spec.contains_key(key) {
            return Err(loc(
                ErrorCode::MatchOperatorInExpression,
                format!("{key} is not allowed inside of a $match aggregation expression"),
            ));
        }
    }
    Ok(())
}

fn parse_match(arg: &Bson, ctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(loc(
            ErrorCode::MatchNotObject,
            "the match filter must be an expression in an object",
        ));
    };
    check_match_clauses(spec)?;
    // A leading `$match` is the query the pipeline reads with; this one
    // is a later stage.
    if crate::query::text::split_text(spec)?.1.is_some() {
        return Err(loc(
            ErrorCode::Location(17313),
            "$match with $text is only allowed as the first pipeline stage",
        ));
    }
    Ok(Box::new(Match {
        filter: Arc::new(Filter::parse_in_pipeline_collated(
            spec,
            ctx.collation.as_ref(),
        )?),
        spec: spec.clone(),
    }))
}

impl Stage for Match {
    fn name(&self) -> &'static str {
        "$match"
    }
    fn apply(&self, input: DocStream, _: &Arc<dyn Context>) -> Result<DocStream> {
        let filter = self.filter.clone();
        Ok(map_docs(input, move |d| {
            Ok(filter.try_matches(&d)?.then_some(d))
        }))
    }
    fn split(&self) -> Split {
        Split::Streaming
    }
    fn explain(&self) -> Document {
        doc! {"$match": self.spec.clone()}
    }
}

// ---------------------------------------------------------------------------
// $project, $unset

struct Project {
    projection: Arc<Projection>,
    name: &'static str,
    spec: Bson,
}

fn parse_project(arg: &Bson, _: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(loc(
            ErrorCode::ProjectNotObject,
            "$project specification must be an object",
        ));
    };
    if spec.is_empty() {
        return Err(loc(
            ErrorCode::EmptyProjection,
            "Invalid $project :: caused by :: projection specification must have at least one \
             field",
        ));
    }
    let rewritten = aggregation_projection(spec)?;
    let projection = Projection::parse(&rewritten).map_err(|e| {
        if e.message.starts_with("Invalid $project") {
            e
        } else {
            Error::new(
                e.code,
                format!("Invalid $project :: caused by :: {}", e.message),
            )
        }
    })?;
    Ok(Box::new(Project {
        projection: Arc::new(projection),
        name: "$project",
        spec: arg.clone(),
    }))
}

/// Turns an aggregation `$project` into the `find` projection language:
/// find-only operators are refused, and `$slice` is always the
/// expression (wrapped so the find parser does not read it as its own).
fn aggregation_projection(spec: &Document) -> Result<Document> {
    let mut out = Document::new();
    for (name, value) in spec {
        if name.ends_with(".$") || name == "$" {
            return Err(loc(
                ErrorCode::AggregatePositionalProject,
                "Invalid $project :: caused by :: Cannot use positional projection in \
                 aggregation projection",
            ));
        }
        let value = match value {
            Bson::Document(sub) if sub.len() == 1 => match sub.iter().next() {
                Some((op, _)) if op == "$elemMatch" => {
                    return Err(loc(
                        ErrorCode::AggregateElemMatchProject,
                        "Invalid $project :: caused by :: Cannot use $elemMatch projection in \
                         aggregation projection",
                    ))
                }
                Some((op, _)) if op == "$slice" => {
                    Bson::Document(doc! {"$cond": [true, Bson::Document(sub.clone()), Bson::Null]})
                }
                Some((op, _)) if !op.starts_with('$') => {
                    Bson::Document(aggregation_projection(sub)?)
                }
                _ => value.clone(),
            },
            Bson::Document(sub) if sub.keys().all(|k| !k.starts_with('$')) => {
                Bson::Document(aggregation_projection(sub)?)
            }
            other => other.clone(),
        };
        out.insert(name.clone(), value);
    }
    Ok(out)
}

fn parse_unset(arg: &Bson, _: &ParseContext) -> Result<Box<dyn Stage>> {
    let fields: Vec<String> = match arg {
        Bson::String(s) => vec![s.clone()],
        Bson::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                let Bson::String(s) = item else {
                    return Err(loc(
                        ErrorCode::StageUnsetArrElementInvalidType,
                        "$unset specification must be a string or an array containing only \
                         string values",
                    ));
                };
                out.push(s.clone());
            }
            out
        }
        _ => {
            return Err(loc(
                ErrorCode::StageUnsetInvalidType,
                "$unset specification must be a string or an array",
            ))
        }
    };
    if fields.is_empty() {
        return Err(loc(
            ErrorCode::StageUnsetNoPath,
            "$unset specification must be a string or an array with at least one field",
        ));
    }
    let mut spec = Document::new();
    for f in &fields {
        if f.is_empty() {
            return Err(loc(
                ErrorCode::EmptyFieldPath,
                "FieldPath cannot be constructed with empty string",
            ));
        }
        if f.starts_with('$') {
            return Err(loc(
                ErrorCode::FieldPathDollarPrefixed,
                "FieldPath field names may not start with '$'.",
            ));
        }
        spec.insert(f.clone(), 0);
    }
    Ok(Box::new(Project {
        projection: Arc::new(Projection::parse(&spec)?),
        name: "$unset",
        spec: arg.clone(),
    }))
}

impl Stage for Project {
    fn name(&self) -> &'static str {
        self.name
    }
    fn apply(&self, input: DocStream, _: &Arc<dyn Context>) -> Result<DocStream> {
        let p = self.projection.clone();
        Ok(map_docs(input, move |d| {
            let text_score = text::score_of(&d);
            let details = MatchDetails {
                text_score,
                ..MatchDetails::default()
            };
            let mut out = p.apply(&d, &details)?;
            if let Some(score) = text_score {
                out.insert(text::SCORE_FIELD, score);
            }
            Ok(Some(out))
        }))
    }
    fn split(&self) -> Split {
        Split::Streaming
    }
    fn explain(&self) -> Document {
        let mut d = Document::new();
        d.insert(self.name, self.spec.clone());
        d
    }
}

// ---------------------------------------------------------------------------
// $addFields / $set

/// A field to set: its dotted path and the expression.
type FieldSetter = (Vec<String>, Expr);

struct AddFields {
    name: &'static str,
    fields: Arc<Vec<FieldSetter>>,
    vars: Arc<Document>,
    spec: Document,
}

pub(super) fn parse_add_fields(arg: &Bson, ctx: &ParseContext) -> Result<Box<dyn Stage>> {
    parse_add_fields_as("$addFields", arg, ctx)
}

fn parse_set(arg: &Bson, ctx: &ParseContext) -> Result<Box<dyn Stage>> {
    parse_add_fields_as("$set", arg, ctx)
}

fn parse_add_fields_as(
    name: &'static str,
    arg: &Bson,
    ctx: &ParseContext,
) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(loc(
            ErrorCode::StageSpecificationNotObject,
            format!(
                "{name} specification stage must be an object, got {}",
                type_name(arg)
            ),
        ));
    };
    let mut fields = Vec::new();
    collect_setters(spec, &mut Vec::new(), &mut fields)?;
    Ok(Box::new(AddFields {
        name,
        fields: Arc::new(fields),
        vars: Arc::new(ctx.vars.clone()),
        spec: spec.clone(),
    }))
}

/// Flattens `{a: {b: expr}}` into `a.b: expr`; an object whose first key
/// is an operator is an expression.
fn collect_setters(
    spec: &Document,
    prefix: &mut Vec<String>,
    out: &mut Vec<FieldSetter>,
) -> Result<()> {
    for (name, value) in spec {
        if name.is_empty() {
            return Err(loc(
                ErrorCode::EmptyFieldPath,
                "FieldPath cannot be constructed with empty string",
            ));
        }
        if name.starts_with('$') {
            return Err(loc(
                ErrorCode::FieldPathDollarPrefixed,
                "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
            ));
        }
        let parts: Vec<String> = name.split('.').map(str::to_string).collect();
        if parts.iter().any(String::is_empty) {
            return Err(loc(
                ErrorCode::FieldPathEmptyComponent,
                "FieldPath field names may not be empty strings.",
            ));
        }
        let depth = prefix.len();
        prefix.extend(parts);
        match value {
            Bson::Document(sub)
                if !sub.is_empty() && !sub.keys().next().is_some_and(|k| k.starts_with('$')) =>
            {
                collect_setters(sub, prefix, out)?;
            }
            _ => out.push((prefix.clone(), Expr::parse(value)?)),
        }
        prefix.truncate(depth);
    }
    Ok(())
}

/// Sets `path` in `doc` (an array on the way sets it in every element;
/// a scalar on the way is replaced by a document). A missing value
/// removes the field. Every copy made is charged to `copies` first.
fn set_path(
    doc: &mut Document,
    path: &[String],
    value: &Option<Bson>,
    copies: &mut Copies,
) -> Result<()> {
    let Some((first, rest)) = path.split_first() else {
        return Ok(());
    };
    if rest.is_empty() {
        match value {
            Some(v) => {
                copies.charge(first)?;
                doc.insert(first.clone(), v.clone());
            }
            None => {
                doc.remove(first);
            }
        }
        return Ok(());
    }
    match doc.get_mut(first) {
        Some(Bson::Document(sub)) => set_path(sub, rest, value, copies),
        Some(Bson::Array(items)) => set_in_array(items, rest, value, copies),
        _ => {
            if value.is_none() {
                return Ok(());
            }
            let mut sub = Document::new();
            set_path(&mut sub, rest, value, copies)?;
            doc.insert(first.clone(), sub);
            Ok(())
        }
    }
}

fn set_in_array(
    items: &mut [Bson],
    path: &[String],
    value: &Option<Bson>,
    copies: &mut Copies,
) -> Result<()> {
    for item in items.iter_mut() {
        match item {
            Bson::Document(sub) => set_path(sub, path, value, copies)?,
            Bson::Array(inner) => set_in_array(inner, path, value, copies)?,
            other => {
                let mut sub = Document::new();
                set_path(&mut sub, path, value, copies)?;
                *other = Bson::Document(sub);
            }
        }
    }
    Ok(())
}

/// The copies of computed values one document receives. A path through
/// an array puts a copy in every element, so a large value and a long
/// array would multiply; the copies are bounded by the document size
/// limit before each is made.
struct Copies {
    shape: Shape,
    made: SizeBudget,
}

impl Copies {
    fn new() -> Copies {
        Copies {
            shape: Shape { size: 0, depth: 1 },
            made: SizeBudget::new(),
        }
    }

    /// Starts placing `value`.
    fn of(&mut self, value: &Option<Bson>) {
        self.shape = value.as_ref().map_or(Shape { size: 0, depth: 1 }, measure);
    }

    fn charge(&mut self, key: &str) -> Result<()> {
        self.made.charge(2 + key.len(), self.shape)
    }
}

impl Stage for AddFields {
    fn name(&self) -> &'static str {
        self.name
    }
    fn apply(&self, input: DocStream, _: &Arc<dyn Context>) -> Result<DocStream> {
        let fields = self.fields.clone();
        let vars = self.vars.clone();
        Ok(map_docs(input, move |d| {
            let mut values = Vec::with_capacity(fields.len());
            for (_, expr) in fields.iter() {
                values.push(eval(expr, &d, &vars)?);
            }
            let mut out = d;
            let mut copies = Copies::new();
            for ((path, _), value) in fields.iter().zip(values) {
                copies.of(&value);
                set_path(&mut out, path, &value, &mut copies)?;
            }
            Ok(Some(out))
        }))
    }
    fn split(&self) -> Split {
        Split::Streaming
    }
    fn explain(&self) -> Document {
        let mut d = Document::new();
        d.insert(self.name, self.spec.clone());
        d
    }
}

// ---------------------------------------------------------------------------
// $replaceRoot / $replaceWith

struct ReplaceRoot {
    name: &'static str,
    expr: Arc<Expr>,
    vars: Arc<Document>,
    spec: Bson,
}

fn parse_replace_root(arg: &Bson, ctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(loc(
            ErrorCode::ReplaceRootSpecNotObject,
            format!(
                "expected an object as specification for $replaceRoot stage, got {}",
                type_name(arg)
            ),
        ));
    };
    let mut new_root = None;
    for (k, v) in spec {
        if k == "newRoot" {
            new_root = Some(v);
        } else {
            return Err(Error::new(
                ErrorCode::UnknownField,
                format!("BSON field '$replaceRoot.{k}' is an unknown field."),
            ));
        }
    }
    let Some(new_root) = new_root else {
        return Err(Error::new(
            ErrorCode::MissingField,
            "BSON field '$replaceRoot.newRoot' is missing but a required field",
        ));
    };
    Ok(Box::new(ReplaceRoot {
        name: "$replaceRoot",
        expr: Arc::new(Expr::parse(new_root)?),
        vars: Arc::new(ctx.vars.clone()),
        spec: arg.clone(),
    }))
}

fn parse_replace_with(arg: &Bson, ctx: &ParseContext) -> Result<Box<dyn Stage>> {
    Ok(Box::new(ReplaceRoot {
        name: "$replaceWith",
        expr: Arc::new(Expr::parse(arg)?),
        vars: Arc::new(ctx.vars.clone()),
        spec: arg.clone(),
    }))
}

impl Stage for ReplaceRoot {
    fn name(&self) -> &'static str {
        self.name
    }
    fn apply(&self, input: DocStream, _: &Arc<dyn Context>) -> Result<DocStream> {
        let expr = self.expr.clone();
        let vars = self.vars.clone();
        Ok(map_docs(input, move |d| match eval(&expr, &d, &vars)? {
            Some(Bson::Document(mut root)) => {
                // The new root keeps the document's score.
                if let Some(score) = text::score_of(&d) {
                    root.insert(text::SCORE_FIELD, score);
                }
                Ok(Some(root))
            }
            other => {
                let (value, ty) = match &other {
                    Some(v) => (v.to_string(), type_name(v)),
                    None => ("MISSING".to_string(), "missing"),
                };
                Err(Error::new(
                    ErrorCode::ReplaceRootNotObject,
                    format!(
                        "'newRoot' expression must evaluate to an object, but resulting value \
                         was: {value}. Type of resulting value: '{ty}'. Input document: {d}"
                    ),
                ))
            }
        }))
    }
    fn split(&self) -> Split {
        Split::Streaming
    }
    fn explain(&self) -> Document {
        let mut d = Document::new();
        d.insert(self.name, self.spec.clone());
        d
    }
}

// ---------------------------------------------------------------------------
// $unwind

struct Unwind {
    path: Vec<String>,
    index_field: Option<String>,
    preserve: bool,
}

fn parse_unwind(arg: &Bson, _: &ParseContext) -> Result<Box<dyn Stage>> {
    let (path, index_field, preserve) = match arg {
        Bson::String(path) => (path.clone(), None, false),
        Bson::Document(spec) => {
            let mut path = None;
            let mut index = None;
            let mut preserve = false;
            for (k, v) in spec {
                match k.as_str() {
                    "path" => match v {
                        Bson::String(s) => path = Some(s.clone()),
                        _ => {
                            return Err(loc(
                                ErrorCode::StageUnwindPathNotString,
                                format!(
                                    "expected a string as the path for $unwind stage, got {}",
                                    type_name(v)
                                ),
                            ))
                        }
                    },
                    "includeArrayIndex" => match v {
                        Bson::String(s) => {
                            if s.starts_with('$') {
                                return Err(loc(
                                    ErrorCode::StageUnwindIndexFieldDollar,
                                    format!(
                                        "includeArrayIndex option to $unwind stage should not \
                                         be prefixed with a '$': {s}"
                                    ),
                                ));
                            }
                            index = Some(s.clone());
                        }
                        _ => {
                            return Err(loc(
                                ErrorCode::StageUnwindIndexFieldBad,
                                format!(
                                    "expected a non-empty string for the includeArrayIndex \
                                     option to $unwind stage, got {}",
                                    type_name(v)
                                ),
                            ))
                        }
                    },
                    "preserveNullAndEmptyArrays" => match v {
                        Bson::Boolean(b) => preserve = *b,
                        _ => {
                            return Err(loc(
                                ErrorCode::StageUnwindPreserveNotBool,
                                format!(
                                    "expected a boolean for the preserveNullAndEmptyArrays \
                                     option to $unwind stage, got {}",
                                    type_name(v)
                                ),
                            ))
                        }
                    },
                    other => {
                        return Err(loc(
                            ErrorCode::StageUnwindUnknownOption,
                            format!("unrecognized option to $unwind stage: {other}"),
                        ))
                    }
                }
            }
            let Some(path) = path else {
                return Err(loc(
                    ErrorCode::StageUnwindNoPath,
                    "no path specified to $unwind stage",
                ));
            };
            (path, index.filter(|s| !s.is_empty()), preserve)
        }
        other => {
            return Err(loc(
                ErrorCode::StageUnwindWrongType,
                format!(
                    "expected either a string or an object as specification for $unwind \
                     stage, got {}",
                    type_name(other)
                ),
            ))
        }
    };
    let Some(field) = path.strip_prefix('$') else {
        return Err(loc(
            ErrorCode::StageUnwindNoPrefix,
            format!("path option to $unwind stage should be prefixed with a '$': {path}"),
        ));
    };
    if field.is_empty() || field.split('.').any(str::is_empty) {
        return Err(loc(
            ErrorCode::EmptyFieldPath,
            "FieldPath cannot be constructed with empty string",
        ));
    }
    if field.starts_with('$') {
        return Err(loc(
            ErrorCode::FieldPathDollarPrefixed,
            "FieldPath field names may not start with '$'.",
        ));
    }
    Ok(Box::new(Unwind {
        path: field.split('.').map(str::to_string).collect(),
        index_field: index_field.clone(),
        preserve,
    }))
}

/// The documents one input document unwinds into.
type Unwound = Box<dyn Iterator<Item = Result<Document>> + Send>;

impl Unwind {
    /// Unwinds one document lazily. The array is taken out of the document
    /// once and each output copies only the rest of the document, so an
    /// array of n elements costs O(n) (copying the whole document for every
    /// element made 40,000 elements take most of a minute).
    fn unwind(&self, mut doc: Document) -> Unwound {
        let index_field = self.index_field.clone();
        let with_index = move |mut d: Document, i: Option<i64>| {
            if let Some(f) = &index_field {
                d.insert(f.clone(), i.map_or(Bson::Null, Bson::Int64));
            }
            d
        };
        let one = |d: Document| -> Unwound { Box::new(std::iter::once(Ok(d))) };
        match get_in_documents(&doc, &self.path) {
            Some(Bson::Array(items)) if !items.is_empty() => {
                let Some(Bson::Array(items)) = take_path(&mut doc, &self.path) else {
                    return Box::new(std::iter::empty());
                };
                let path = self.path.clone();
                Box::new(items.into_iter().enumerate().map(move |(i, item)| {
                    let mut d = doc.clone();
                    put_path(&mut d, &path, item);
                    Ok(with_index(d, Some(i as i64)))
                }))
            }
            Some(Bson::Array(_)) => {
                if self.preserve {
                    // Removing copies nothing and cannot fail.
                    let _ = set_path(&mut doc, &self.path, &None, &mut Copies::new());
                    one(with_index(doc, None))
                } else {
                    Box::new(std::iter::empty())
                }
            }
            None | Some(Bson::Null) | Some(Bson::Undefined) => {
                if self.preserve {
                    one(with_index(doc, None))
                } else {
                    Box::new(std::iter::empty())
                }
            }
            Some(_) => one(with_index(doc, None)),
        }
    }
}

/// Takes the value at a path through documents, leaving `null` in its
/// place so that the field keeps its position.
fn take_path(doc: &mut Document, path: &[String]) -> Option<Bson> {
    let (last, parents) = path.split_last()?;
    let mut current = doc;
    for part in parents {
        match current.get_mut(part) {
            Some(Bson::Document(sub)) => current = sub,
            _ => return None,
        }
    }
    current
        .get_mut(last)
        .map(|slot| std::mem::replace(slot, Bson::Null))
}

/// Puts a value back where [`take_path`] took one, without copying it.
fn put_path(doc: &mut Document, path: &[String], value: Bson) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = doc;
    for part in parents {
        match current.get_mut(part) {
            Some(Bson::Document(sub)) => current = sub,
            _ => return,
        }
    }
    if let Some(slot) = current.get_mut(last) {
        *slot = value;
    }
}

impl Stage for Unwind {
    fn name(&self) -> &'static str {
        "$unwind"
    }
    fn apply(&self, input: DocStream, _: &Arc<dyn Context>) -> Result<DocStream> {
        let this = Unwind {
            path: self.path.clone(),
            index_field: self.index_field.clone(),
            preserve: self.preserve,
        };
        Ok(Box::new(input.flat_map(move |d| -> Unwound {
            match d {
                Ok(d) => this.unwind(d),
                Err(e) => Box::new(std::iter::once(Err(e))),
            }
        })))
    }
    fn split(&self) -> Split {
        Split::Streaming
    }
    fn explain(&self) -> Document {
        let mut spec = doc! {"path": format!("${}", self.path.join("."))};
        if let Some(f) = &self.index_field {
            spec.insert("includeArrayIndex", f.clone());
        }
        if self.preserve {
            spec.insert("preserveNullAndEmptyArrays", true);
        }
        doc! {"$unwind": spec}
    }
}

// ---------------------------------------------------------------------------
// $skip, $limit

/// A non-negative integral count (`$skip`, `$limit`).
fn parse_count_arg(arg: &Bson) -> std::result::Result<i64, String> {
    let Some(n) = Number::of(arg) else {
        return Err(format!(
            "Expected an integer value, but found type: {}",
            type_name(arg)
        ));
    };
    let f = n.to_f64();
    let i = match n {
        Number::Int32(i) => i64::from(i),
        Number::Int64(i) => i,
        _ if f.fract() == 0.0 && crate::query::compare::f64_fits_i64(f) => f as i64,
        _ => return Err(format!("Expected an integer, but found: {}", n.into_bson())),
    };
    if i < 0 {
        return Err(format!("Expected a non-negative number, but found: {i}"));
    }
    Ok(i)
}

struct Skip(u64);

fn parse_skip(arg: &Bson, _: &ParseContext) -> Result<Box<dyn Stage>> {
    let n = parse_count_arg(arg).map_err(|m| {
        loc(
            ErrorCode::StageSkipBadValue,
            format!("invalid argument to $skip stage: {m}"),
        )
    })?;
    Ok(Box::new(Skip(n as u64)))
}

impl Stage for Skip {
    fn name(&self) -> &'static str {
        "$skip"
    }
    fn apply(&self, input: DocStream, _: &Arc<dyn Context>) -> Result<DocStream> {
        let n = usize::try_from(self.0).unwrap_or(usize::MAX);
        Ok(Box::new(input.skip(n)))
    }
    fn split(&self) -> Split {
        Split::RouterOnly
    }
    fn explain(&self) -> Document {
        doc! {"$skip": self.0 as i64}
    }
}

pub(super) struct Limit(pub(super) u64);

fn parse_limit(arg: &Bson, _: &ParseContext) -> Result<Box<dyn Stage>> {
    let n = parse_count_arg(arg).map_err(|m| {
        loc(
            ErrorCode::StageLimitBadValue,
            format!("invalid argument to $limit stage: {m}"),
        )
    })?;
    if n == 0 {
        return Err(loc(
            ErrorCode::StageLimitNotPositive,
            "the limit must be positive",
        ));
    }
    Ok(Box::new(Limit(n as u64)))
}

impl Stage for Limit {
    fn name(&self) -> &'static str {
        "$limit"
    }
    fn apply(&self, input: DocStream, _: &Arc<dyn Context>) -> Result<DocStream> {
        let n = usize::try_from(self.0).unwrap_or(usize::MAX);
        Ok(Box::new(input.take(n)))
    }
    fn split(&self) -> Split {
        Split::Blocking {
            partition: Box::new(Limit(self.0)),
            router: Some(Box::new(Limit(self.0))),
            merge_sort: None,
        }
    }
    fn explain(&self) -> Document {
        doc! {"$limit": self.0 as i64}
    }
}

// ---------------------------------------------------------------------------
// $count

struct Count {
    field: String,
    /// At the router: sums the partitions' counts instead of counting.
    sum_partials: bool,
}

fn parse_count(arg: &Bson, _: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::String(field) = arg else {
        return Err(loc(
            ErrorCode::StageCountNotString,
            "the count field must be a non-empty string",
        ));
    };
    if field.is_empty() {
        return Err(loc(
            ErrorCode::StageCountNotString,
            "the count field must be a non-empty string",
        ));
    }
    if field.starts_with('$') {
        return Err(loc(
            ErrorCode::StageCountBadPrefix,
            "the count field cannot be a $-prefixed path",
        ));
    }
    if field.contains('\0') {
        return Err(loc(
            ErrorCode::StageCountNullByte,
            "the count field cannot contain a null byte",
        ));
    }
    if field.contains('.') {
        return Err(loc(
            ErrorCode::StageCountContainsDot,
            "the count field cannot contain '.'",
        ));
    }
    Ok(Box::new(Count {
        field: field.clone(),
        sum_partials: false,
    }))
}

fn count_value(n: i64) -> Bson {
    i32::try_from(n).map_or(Bson::Int64(n), Bson::Int32)
}

impl Stage for Count {
    fn name(&self) -> &'static str {
        "$count"
    }
    fn apply(&self, input: DocStream, _: &Arc<dyn Context>) -> Result<DocStream> {
        let mut n = 0i64;
        for d in input {
            let d = d?;
            n += if self.sum_partials {
                d.get(&self.field)
                    .and_then(Number::of)
                    .map_or(0, |v| v.to_f64() as i64)
            } else {
                1
            };
        }
        if n == 0 {
            return Ok(Box::new(std::iter::empty()));
        }
        let mut out = Document::new();
        out.insert(self.field.clone(), count_value(n));
        Ok(Box::new(std::iter::once(Ok(out))))
    }
    fn split(&self) -> Split {
        Split::Blocking {
            partition: Box::new(Count {
                field: self.field.clone(),
                sum_partials: false,
            }),
            router: Some(Box::new(Count {
                field: self.field.clone(),
                sum_partials: true,
            })),
            merge_sort: None,
        }
    }
    fn explain(&self) -> Document {
        doc! {"$count": self.field.clone()}
    }
}

// ---------------------------------------------------------------------------
// $sort

pub(super) struct Sort {
    spec: SortSpec,
    limit: Option<usize>,
}

/// `$sort` with a following `$limit` folded in: every partition keeps
/// only its top `limit` documents. The pipeline planner, which folds
/// `$sort` + `$limit`, is its caller.
#[allow(dead_code)]
pub fn sort_with_limit(spec: SortSpec, limit: usize) -> Box<dyn Stage> {
    Box::new(Sort {
        spec,
        limit: Some(limit),
    })
}

/// `$sort` without a limit.
pub fn sort(spec: SortSpec) -> Box<dyn Stage> {
    Box::new(Sort { spec, limit: None })
}

fn parse_sort(arg: &Bson, ctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(loc(
            ErrorCode::SortNotObject,
            "the $sort key specification must be an object",
        ));
    };
    if spec.is_empty() {
        return Err(loc(
            ErrorCode::SortMissingKey,
            "$sort stage must have at least one sort key",
        ));
    }
    Ok(sort(
        SortSpec::parse(spec)?.with_collation(ctx.collation.clone()),
    ))
}

fn sort_key_document(spec: &SortSpec) -> Document {
    let mut d = Document::new();
    for f in spec.fields() {
        d.insert(f.path(), if f.ascending() { 1 } else { -1 });
    }
    d
}

/// Sorts `docs` stably by their keys.
fn sort_keyed(spec: &SortSpec, docs: &mut [(Vec<Bson>, Document)]) {
    docs.sort_by(|a, b| spec.compare_keys(&a.0, &b.0));
}

impl Sort {
    fn run(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let limits = ctx.limits().clone();
        let spec = self.spec.clone();
        let mut buffer: Vec<(Vec<Bson>, Document)> = Vec::new();
        let mut bytes = 0usize;
        let mut runs: Vec<SpillRun> = Vec::new();
        for d in input {
            let d = d?;
            bytes += doc_size(&d);
            buffer.push((spec.key_for(&d), d));
            if let Some(k) = self.limit {
                if buffer.len() >= k.saturating_mul(2).max(64) {
                    sort_keyed(&spec, &mut buffer);
                    buffer.truncate(k);
                    bytes = buffer.iter().map(|(_, d)| doc_size(d)).sum();
                }
            }
            if bytes > limits.max_blocking_bytes {
                if self.limit.is_some_and(|k| buffer.len() > k) {
                    sort_keyed(&spec, &mut buffer);
                    buffer.truncate(self.limit.unwrap_or(usize::MAX));
                    bytes = buffer.iter().map(|(_, d)| doc_size(d)).sum();
                    if bytes <= limits.max_blocking_bytes {
                        continue;
                    }
                }
                if !limits.allow_disk_use {
                    return Err(sort_memory_error(limits.max_blocking_bytes));
                }
                sort_keyed(&spec, &mut buffer);
                let docs = std::mem::take(&mut buffer).into_iter().map(|(_, d)| d);
                runs.push(SpillRun::write(&limits.spill_dir, docs)?);
                bytes = 0;
            }
        }
        sort_keyed(&spec, &mut buffer);
        if let Some(k) = self.limit {
            buffer.truncate(k);
            bytes = buffer.iter().map(|(_, d)| doc_size(d)).sum();
        }
        // What is left in memory is parked: a cursor may keep it.
        let last = park(
            buffer.into_iter().map(|(_, d)| d).collect(),
            bytes,
            &limits.spill_dir,
        )?;
        if runs.is_empty() {
            return Ok(last);
        }
        let mut sources: Vec<DocStream> = Vec::with_capacity(runs.len() + 1);
        for run in runs {
            sources.push(Box::new(run.into_reader()?));
        }
        sources.push(last);
        let key_spec = spec.clone();
        let merged = MergedRuns::new(
            sources,
            Box::new(move |d: &Document| key_spec.key_for(d)),
            Box::new(move |a: &Vec<Bson>, b: &Vec<Bson>| spec.compare_keys(a, b)),
        );
        Ok(match self.limit {
            Some(k) => Box::new(merged.take(k)),
            None => Box::new(merged),
        })
    }
}

impl Stage for Sort {
    fn name(&self) -> &'static str {
        "$sort"
    }
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        self.run(input, ctx)
    }
    fn split(&self) -> Split {
        Split::Blocking {
            partition: Box::new(Sort {
                spec: self.spec.clone(),
                limit: self.limit,
            }),
            router: self
                .limit
                .map(|k| Box::new(Limit(k as u64)) as Box<dyn Stage>),
            merge_sort: Some(self.spec.clone()),
        }
    }
    fn explain(&self) -> Document {
        let mut spec = doc! {"sortKey": sort_key_document(&self.spec)};
        if let Some(k) = self.limit {
            spec.insert("limit", k as i64);
        }
        doc! {"$sort": spec}
    }
    fn sort_order(&self) -> Option<&SortSpec> {
        Some(&self.spec)
    }
}

// ---------------------------------------------------------------------------
// Chains

/// Stages run one after the other as one (`$sortByCount` is `$group`
/// then `$sort`).
pub(super) struct Chain {
    pub(super) name: &'static str,
    pub(super) stages: Vec<Box<dyn Stage>>,
    pub(super) spec: Document,
}

impl Stage for Chain {
    fn name(&self) -> &'static str {
        self.name
    }
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let mut stream = input;
        for s in &self.stages {
            stream = s.apply(stream, ctx)?;
        }
        Ok(stream)
    }
    fn apply_input(&self, input: InputStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let Some((first, rest)) = self.stages.split_first() else {
            return Ok(super::decoded(input));
        };
        let mut stream = first.apply_input(input, ctx)?;
        for s in rest {
            stream = s.apply(stream, ctx)?;
        }
        Ok(stream)
    }
    fn split(&self) -> Split {
        Split::RouterOnly
    }
    fn explain(&self) -> Document {
        self.spec.clone()
    }
}

// ---------------------------------------------------------------------------
// $documents

struct Documents {
    docs: Arc<Vec<Document>>,
    spec: Bson,
}

fn parse_documents(arg: &Bson, ctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let value = eval(&Expr::parse(arg)?, &Document::new(), &ctx.vars)?;
    let Some(Bson::Array(items)) = value else {
        return Err(loc(ErrorCode::ArrayExpected, "an array is expected"));
    };
    let mut docs = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Bson::Document(d) => docs.push(d),
            other => {
                return Err(Error::new(
                    ErrorCode::ReplaceRootNotObject,
                    format!(
                        "'newRoot' expression must evaluate to an object, but resulting value \
                         was: {other}. Type of resulting value: '{}'. Input document: {{}}",
                        type_name(&other)
                    ),
                ))
            }
        }
    }
    Ok(Box::new(Documents {
        docs: Arc::new(docs),
        spec: arg.clone(),
    }))
}

impl Stage for Documents {
    fn name(&self) -> &'static str {
        "$documents"
    }
    fn apply(&self, _input: DocStream, _: &Arc<dyn Context>) -> Result<DocStream> {
        let docs: Vec<Document> = self.docs.as_ref().clone();
        Ok(Box::new(docs.into_iter().map(Ok)))
    }
    fn split(&self) -> Split {
        Split::RouterOnly
    }
    fn explain(&self) -> Document {
        doc! {"$documents": self.spec.clone()}
    }
}

// ---------------------------------------------------------------------------
// $sample

struct Sample(usize);

fn parse_sample(arg: &Bson, _: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(loc(
            ErrorCode::StageSampleNotObject,
            "the $sample stage specification must be an object",
        ));
    };
    let mut size = None;
    for (k, v) in spec {
        if k != "size" {
            return Err(loc(
                ErrorCode::StageSampleUnknownOption,
                format!("unrecognized option to $sample: {k}"),
            ));
        }
        let Some(n) = Number::of(v) else {
            return Err(loc(
                ErrorCode::StageSampleSizeNotNumber,
                "size argument to $sample must be a number",
            ));
        };
        let f = n.to_f64();
        if f < 0.0 {
            return Err(loc(
                ErrorCode::StageSampleSizeNegative,
                "size argument to $sample must not be negative",
            ));
        }
        size = Some(if f >= usize::MAX as f64 {
            usize::MAX
        } else {
            f as usize
        });
    }
    let Some(size) = size else {
        return Err(loc(
            ErrorCode::StageSampleMissingSize,
            "$sample stage must specify a size",
        ));
    };
    Ok(Box::new(Sample(size)))
}

impl Stage for Sample {
    fn name(&self) -> &'static str {
        "$sample"
    }
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        // As MongoDB does: the documents with the `size` smallest random
        // keys, through the blocking sort, so a sample as large as the
        // collection is bounded by the memory limit (spilling with
        // `allowDiskUse`) and parked for its cursor.
        let mut rng = rand::rng();
        let mut sample = KeyedSort::new(
            ctx.limits(),
            crate::query::compare::compare,
            sort_memory_error,
        )
        .keep(self.0)
        .park_output();
        for d in input {
            sample.push(Bson::Double(rng.random::<f64>()), d?)?;
        }
        Ok(Box::new(sample.finish()?.map(|r| r.map(|(_, d)| d))))
    }
    fn split(&self) -> Split {
        Split::RouterOnly
    }
    fn explain(&self) -> Document {
        doc! {"$sample": {"size": self.0 as i64}}
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::aggregate::{Limits, MergeSpec, Pipeline};

    pub struct TestContext {
        pub limits: Limits,
    }

    impl Context for TestContext {
        fn db(&self) -> &str {
            "test"
        }
        fn aggregate(&self, _: &str, _: &str, _: &[Document], _: &Document) -> Result<DocStream> {
            Ok(Box::new(std::iter::empty()))
        }
        fn replace_collection(&self, _: &str, _: &str, _: Vec<Document>) -> Result<()> {
            Ok(())
        }
        fn merge_into(&self, _: &str, _: &str, _: &MergeSpec, _: Vec<Document>) -> Result<()> {
            Ok(())
        }
        fn limits(&self) -> &Limits {
            &self.limits
        }
    }

    pub fn ctx_with(max: usize, allow_disk_use: bool, dir: &std::path::Path) -> Arc<dyn Context> {
        Arc::new(TestContext {
            limits: Limits {
                max_blocking_bytes: max,
                allow_disk_use,
                spill_dir: dir.to_path_buf(),
            },
        })
    }

    pub fn ctx() -> Arc<dyn Context> {
        ctx_with(
            crate::aggregate::DEFAULT_MAX_BLOCKING_BYTES,
            false,
            &std::env::temp_dir(),
        )
    }

    pub fn run(pipeline: Vec<Document>, input: Vec<Document>) -> Result<Vec<Document>> {
        run_in(&ctx(), pipeline, input)
    }

    pub fn run_in(
        ctx: &Arc<dyn Context>,
        pipeline: Vec<Document>,
        input: Vec<Document>,
    ) -> Result<Vec<Document>> {
        let stages: Vec<Bson> = pipeline.into_iter().map(Bson::Document).collect();
        let p = Pipeline::parse(&stages, &ParseContext::default())?;
        p.run(Box::new(input.into_iter().map(Ok)), ctx)?.collect()
    }

    pub fn err_code(pipeline: Vec<Document>, input: Vec<Document>) -> i32 {
        run(pipeline, input).unwrap_err().code.number()
    }

    #[test]
    fn table_is_sorted() {
        assert!(STAGES.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn match_filters_and_expr() {
        let input = vec![doc! {"a": 1}, doc! {"a": 2}, doc! {"a": 3}];
        let out = run(vec![doc! {"$match": {"a": {"$gte": 2}}}], input.clone()).unwrap();
        assert_eq!(out, vec![doc! {"a": 2}, doc! {"a": 3}]);
        let out = run(
            vec![doc! {"$match": {"$expr": {"$eq": ["$a", 1]}}}],
            input.clone(),
        )
        .unwrap();
        assert_eq!(out, vec![doc! {"a": 1}]);
        assert_eq!(err_code(vec![doc! {"$match": 1}], vec![]), 15959);
        assert_eq!(
            err_code(vec![doc! {"$match": {"$expr": {"$add": ["x", 1]}}}], input),
            16554
        );
    }

    #[test]
    fn project_inclusion_exclusion_computed() {
        let input = vec![doc! {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2, 3]}];
        let out = run(vec![doc! {"$project": {"a": 1}}], input.clone()).unwrap();
        assert_eq!(out, vec![doc! {"_id": 1, "a": 1}]);
        let out = run(vec![doc! {"$project": {"_id": 0, "b.c": 1}}], input.clone()).unwrap();
        assert_eq!(out, vec![doc! {"b": {"c": 2}}]);
        let out = run(vec![doc! {"$project": {"b": 0, "e": 0}}], input.clone()).unwrap();
        assert_eq!(out, vec![doc! {"_id": 1, "a": 1}]);
        let out = run(
            vec![doc! {"$project": {"x": {"$add": ["$a", 10]}, "y": "$b.d", "_id": 0}}],
            input.clone(),
        )
        .unwrap();
        assert_eq!(out, vec![doc! {"x": 11, "y": 3}]);
        let out = run(
            vec![doc! {"$project": {"s": {"$slice": ["$e", 2]}, "_id": 0}}],
            input.clone(),
        )
        .unwrap();
        assert_eq!(out, vec![doc! {"s": [1, 2]}]);
        assert_eq!(err_code(vec![doc! {"$project": {}}], vec![]), 51272);
        assert_eq!(err_code(vec![doc! {"$project": 1}], vec![]), 15969);
        assert_eq!(
            err_code(vec![doc! {"$project": {"a": 1, "b": 0}}], vec![]),
            31254
        );
        assert_eq!(
            err_code(vec![doc! {"$project": {"a": 0, "b": 1}}], vec![]),
            31253
        );
        assert_eq!(err_code(vec![doc! {"$project": {"a.$": 1}}], vec![]), 31324);
    }

    #[test]
    fn add_fields_set_unset() {
        let input = vec![doc! {"_id": 1, "a": 1, "b": {"c": 2}, "arr": [{"x": 1}, {"x": 2}]}];
        let out = run(
            vec![doc! {"$addFields": {"t": {"$add": ["$a", "$b.c"]}, "b.d": 5, "a": "$$REMOVE"}}],
            input.clone(),
        )
        .unwrap();
        assert_eq!(
            out,
            vec![doc! {"_id": 1, "b": {"c": 2, "d": 5}, "arr": [{"x": 1}, {"x": 2}], "t": 3}]
        );
        let out = run(
            vec![doc! {"$set": {"arr.y": 0, "b": {"e": 1}}}],
            input.clone(),
        )
        .unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"_id": 1, "a": 1, "b": {"c": 2, "e": 1}, "arr": [{"x": 1, "y": 0}, {"x": 2, "y": 0}]}
            ]
        );
        let out = run(vec![doc! {"$unset": ["a", "b.c"]}], input.clone()).unwrap();
        assert_eq!(
            out,
            vec![doc! {"_id": 1, "b": {}, "arr": [{"x": 1}, {"x": 2}]}]
        );
        let out = run(vec![doc! {"$unset": "arr"}], input).unwrap();
        assert_eq!(out, vec![doc! {"_id": 1, "a": 1, "b": {"c": 2}}]);
        assert_eq!(err_code(vec![doc! {"$unset": 1}], vec![]), 31002);
        assert_eq!(err_code(vec![doc! {"$unset": [1]}], vec![]), 31120);
        assert_eq!(err_code(vec![doc! {"$set": 1}], vec![]), 40272);
    }

    #[test]
    fn replace_root_and_with() {
        let input = vec![doc! {"a": {"b": 1}, "c": 2}];
        let out = run(
            vec![doc! {"$replaceRoot": {"newRoot": "$a"}}],
            input.clone(),
        )
        .unwrap();
        assert_eq!(out, vec![doc! {"b": 1}]);
        let out = run(vec![doc! {"$replaceWith": {"x": "$c"}}], input.clone()).unwrap();
        assert_eq!(out, vec![doc! {"x": 2}]);
        assert_eq!(
            err_code(vec![doc! {"$replaceWith": "$c"}], input.clone()),
            40228
        );
        assert_eq!(
            err_code(vec![doc! {"$replaceRoot": {"newRoot": "$zz"}}], input),
            40228
        );
        assert_eq!(err_code(vec![doc! {"$replaceRoot": {}}], vec![]), 40414);
        assert_eq!(
            err_code(vec![doc! {"$replaceRoot": {"x": 1}}], vec![]),
            40415
        );
    }

    #[test]
    fn unwind_is_linear_over_100k_elements() {
        let n = 100_000;
        let input = vec![doc! {
            "_id": 1,
            "pad": "p".repeat(1000),
            "o": {"a": (0..n).collect::<Vec<i32>>(), "z": 1},
        }];
        let out = run(
            vec![doc! {"$unwind": {"path": "$o.a", "includeArrayIndex": "i"}}],
            input,
        )
        .unwrap();
        assert_eq!(out.len(), n as usize);
        assert_eq!(
            out[n as usize - 1],
            doc! {"_id": 1, "pad": "p".repeat(1000), "o": {"a": n - 1, "z": 1}, "i": (n - 1) as i64}
        );
    }

    #[test]
    fn unwind_forms() {
        let input = vec![
            doc! {"_id": 1, "a": [1, 2]},
            doc! {"_id": 2, "a": []},
            doc! {"_id": 3, "a": null},
            doc! {"_id": 4},
            doc! {"_id": 5, "a": 7},
        ];
        let out = run(vec![doc! {"$unwind": "$a"}], input.clone()).unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"_id": 1, "a": 1},
                doc! {"_id": 1, "a": 2},
                doc! {"_id": 5, "a": 7}
            ]
        );
        let out = run(
            vec![doc! {"$unwind": {"path": "$a", "includeArrayIndex": "i", "preserveNullAndEmptyArrays": true}}],
            input,
        )
        .unwrap();
        assert_eq!(
            out,
            vec![
                doc! {"_id": 1, "a": 1, "i": 0_i64},
                doc! {"_id": 1, "a": 2, "i": 1_i64},
                doc! {"_id": 2, "i": null},
                doc! {"_id": 3, "a": null, "i": null},
                doc! {"_id": 4, "i": null},
                doc! {"_id": 5, "a": 7, "i": null},
            ]
        );
        assert_eq!(err_code(vec![doc! {"$unwind": "a"}], vec![]), 28818);
        assert_eq!(err_code(vec![doc! {"$unwind": 1}], vec![]), 15981);
        assert_eq!(err_code(vec![doc! {"$unwind": {}}], vec![]), 28812);
        assert_eq!(
            err_code(vec![doc! {"$unwind": {"path": "$a", "x": 1}}], vec![]),
            28811
        );
        assert_eq!(
            err_code(
                vec![doc! {"$unwind": {"path": "$a", "preserveNullAndEmptyArrays": 1}}],
                vec![]
            ),
            28809
        );
        assert_eq!(
            err_code(
                vec![doc! {"$unwind": {"path": "$a", "includeArrayIndex": "$i"}}],
                vec![]
            ),
            28822
        );
    }

    #[test]
    fn skip_limit_count() {
        let input: Vec<Document> = (0..5).map(|i| doc! {"i": i}).collect();
        let out = run(vec![doc! {"$skip": 1}, doc! {"$limit": 2}], input.clone()).unwrap();
        assert_eq!(out, vec![doc! {"i": 1}, doc! {"i": 2}]);
        let out = run(vec![doc! {"$count": "n"}], input.clone()).unwrap();
        assert_eq!(out, vec![doc! {"n": 5}]);
        let out = run(vec![doc! {"$count": "n"}], vec![]).unwrap();
        assert!(out.is_empty());
        assert_eq!(err_code(vec![doc! {"$limit": 0}], vec![]), 15958);
        assert_eq!(err_code(vec![doc! {"$limit": -1}], vec![]), 5107201);
        assert_eq!(err_code(vec![doc! {"$skip": "x"}], vec![]), 5107200);
        assert_eq!(err_code(vec![doc! {"$count": ""}], vec![]), 40156);
        assert_eq!(err_code(vec![doc! {"$count": "$n"}], vec![]), 40158);
        assert_eq!(err_code(vec![doc! {"$count": "a.b"}], vec![]), 40160);
    }

    #[test]
    fn count_and_limit_split() {
        let input: Vec<Document> = (0..10).map(|i| doc! {"i": i}).collect();
        let stage = parse_count(&Bson::String("n".into()), &ParseContext::default()).unwrap();
        let Split::Blocking {
            partition,
            router: Some(router),
            ..
        } = stage.split()
        else {
            panic!("count splits")
        };
        let c = ctx();
        let mut partials = Vec::new();
        for part in input.chunks(4) {
            let s = partition
                .apply(
                    Box::new(part.iter().cloned().map(Ok).collect::<Vec<_>>().into_iter()),
                    &c,
                )
                .unwrap();
            partials.extend(s.map(|d| d.unwrap()));
        }
        let out: Vec<Document> = router
            .apply(Box::new(partials.into_iter().map(Ok)), &c)
            .unwrap()
            .map(|d| d.unwrap())
            .collect();
        assert_eq!(out, vec![doc! {"n": 10}]);
        assert_eq!(Limit(3).explain(), doc! {"$limit": 3_i64});
    }

    #[test]
    fn sort_and_top_k() {
        let input: Vec<Document> = [3, 1, 2, 5, 4]
            .iter()
            .map(|i| doc! {"a": *i, "b": i % 2})
            .collect();
        let out = run(vec![doc! {"$sort": {"b": 1, "a": -1}}], input.clone()).unwrap();
        let a: Vec<i32> = out.iter().map(|d| d.get_i32("a").unwrap()).collect();
        assert_eq!(a, vec![4, 2, 5, 3, 1]);
        let stage = sort_with_limit(SortSpec::parse(&doc! {"a": 1}).unwrap(), 2);
        assert_eq!(
            stage.explain(),
            doc! {"$sort": {"sortKey": {"a": 1}, "limit": 2_i64}}
        );
        let out: Vec<Document> = stage
            .apply(Box::new(input.clone().into_iter().map(Ok)), &ctx())
            .unwrap()
            .map(|d| d.unwrap())
            .collect();
        assert_eq!(out, vec![doc! {"a": 1, "b": 1}, doc! {"a": 2, "b": 0}]);
        assert!(matches!(
            stage.split(),
            Split::Blocking {
                merge_sort: Some(_),
                router: Some(_),
                ..
            }
        ));
        assert_eq!(err_code(vec![doc! {"$sort": {}}], vec![]), 15976);
        assert_eq!(err_code(vec![doc! {"$sort": 1}], vec![]), 15973);
    }

    #[test]
    fn sort_spills_or_fails() {
        let dir = tempfile::tempdir().unwrap();
        let input: Vec<Document> = (0..500)
            .map(|i| doc! {"a": (i * 7919) % 500, "pad": "xxxxxxxxxxxxxxxxxxxx"})
            .collect();
        let no_disk = ctx_with(2_000, false, dir.path());
        let e = run_in(&no_disk, vec![doc! {"$sort": {"a": 1}}], input.clone()).unwrap_err();
        assert_eq!(e.code.number(), 292);
        assert_eq!(
            e.message,
            "Sort exceeded memory limit of 2000 bytes, but did not opt in to external sorting."
        );
        let disk = ctx_with(2_000, true, dir.path());
        let stages = vec![Bson::Document(doc! {"$sort": {"a": 1}})];
        let p = Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        let mut stream = p
            .run(Box::new(input.clone().into_iter().map(Ok)), &disk)
            .unwrap();
        assert!(std::fs::read_dir(dir.path()).unwrap().count() > 1);
        let first = stream.next().unwrap().unwrap();
        assert_eq!(first.get_i32("a").unwrap(), 0);
        let rest: Vec<i32> = stream.map(|d| d.unwrap().get_i32("a").unwrap()).collect();
        assert_eq!(rest, (1..500).collect::<Vec<_>>());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // With a limit the top k stays in memory.
        let top = sort_with_limit(SortSpec::parse(&doc! {"a": -1}).unwrap(), 3);
        let out: Vec<i32> = top
            .apply(Box::new(input.into_iter().map(Ok)), &no_disk)
            .unwrap()
            .map(|d| d.unwrap().get_i32("a").unwrap())
            .collect();
        assert_eq!(out, vec![499, 498, 497]);
    }

    #[test]
    fn sort_by_count_documents_sample() {
        let input = vec![doc! {"a": "x"}, doc! {"a": "y"}, doc! {"a": "x"}];
        let out = run(vec![doc! {"$sortByCount": "$a"}], input.clone()).unwrap();
        assert_eq!(
            out,
            vec![doc! {"_id": "x", "count": 2}, doc! {"_id": "y", "count": 1}]
        );
        assert_eq!(err_code(vec![doc! {"$sortByCount": "a"}], vec![]), 40148);
        assert_eq!(
            err_code(vec![doc! {"$sortByCount": {"a": 1}}], vec![]),
            40147
        );
        let out = run(vec![doc! {"$documents": [{"a": 1}, {"a": 2}]}], vec![]).unwrap();
        assert_eq!(out, vec![doc! {"a": 1}, doc! {"a": 2}]);
        let out = run(
            vec![doc! {"$documents": {"$concatArrays": [[{"a": 1}], [{"b": 1}]]}}],
            vec![],
        )
        .unwrap();
        assert_eq!(out, vec![doc! {"a": 1}, doc! {"b": 1}]);
        assert_eq!(err_code(vec![doc! {"$documents": 1}], vec![]), 5858203);
        assert_eq!(err_code(vec![doc! {"$documents": [1]}], vec![]), 40228);
        let input: Vec<Document> = (0..20).map(|i| doc! {"i": i}).collect();
        let out = run(vec![doc! {"$sample": {"size": 5}}], input.clone()).unwrap();
        assert_eq!(out.len(), 5);
        let mut ids: Vec<i32> = out.iter().map(|d| d.get_i32("i").unwrap()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 5);
        let out = run(vec![doc! {"$sample": {"size": 50}}], input).unwrap();
        assert_eq!(out.len(), 20);
        assert_eq!(err_code(vec![doc! {"$sample": {}}], vec![]), 28749);
        assert_eq!(
            err_code(vec![doc! {"$sample": {"size": -1}}], vec![]),
            28747
        );
        assert_eq!(err_code(vec![doc! {"$sample": {"x": 1}}], vec![]), 28748);
    }

    #[test]
    fn large_sample_is_bounded_by_the_memory_limit() {
        let dir = tempfile::tempdir().unwrap();
        let input: Vec<Document> = (0..3000)
            .map(|i| doc! {"_id": i, "pad": "q".repeat(100)})
            .collect();
        let no_disk = ctx_with(50_000, false, dir.path());
        let e = run_in(
            &no_disk,
            vec![doc! {"$sample": {"size": 5000}}],
            input.clone(),
        )
        .unwrap_err();
        assert_eq!(e.code.number(), 292);
        let disk = ctx_with(50_000, true, dir.path());
        let out = run_in(&disk, vec![doc! {"$sample": {"size": 5000}}], input.clone()).unwrap();
        let mut ids: Vec<i32> = out.iter().map(|d| d.get_i32("_id").unwrap()).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..3000).collect::<Vec<_>>());
        // A small sample holds only its size.
        let out = run_in(&no_disk, vec![doc! {"$sample": {"size": 10}}], input).unwrap();
        assert_eq!(out.len(), 10);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
