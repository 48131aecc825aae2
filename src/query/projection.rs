//! `find` projections: which fields of a matched document go back to the
//! client, with MongoDB 7.0's rules.
//!
//! A projection is parsed into a tree of path components, like MongoDB's
//! projection AST, and is either an inclusion (`{a: 1}`) or an exclusion
//! (`{a: 0}`); `_id` may be excluded from an inclusion and is included unless
//! it says otherwise. Applying keeps the document's field order, whatever
//! the projection's order, and walks arrays of documents element by element.
//!
//! The find-only operators behave as in MongoDB 4.4+:
//! - `$slice` and the positional `field.$` keep the field where it is and
//!   then cut its array;
//! - `$elemMatch` and expressions (`{x: "$a"}`, `{x: {$add: ...}}`,
//!   evaluated by [`Expr`]) are computed fields, added after the included
//!   ones in projection order.

use crate::query::compare::{type_name, DecimalValue};
use std::sync::Arc;

use bson::{Bson, Document};

use crate::error::{Error, ErrorCode, Result};
use crate::query::expr::Expr;
use crate::query::filter::{Filter, MatchDetails};
use crate::query::path;
use crate::query::size::SizeBudget;

/// Recursion bound for walking documents and nested arrays; MongoDB's own
/// documents nest at most 100 levels, so deeper data is left as is.
const MAX_DEPTH: usize = 200;

/// A parsed `find` projection.
#[derive(Debug, Clone)]
pub struct Projection {
    root: PathNode,
    kind: Kind,
    /// `{}`: documents come back unchanged.
    is_empty: bool,
    has_positional: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Inclusion,
    Exclusion,
}

/// An inner node: children in the order the projection named them (the
/// order computed fields are added in).
#[derive(Debug, Clone, Default)]
struct PathNode {
    children: Vec<(String, ProjNode)>,
}

#[derive(Debug, Clone)]
enum ProjNode {
    Path(PathNode),
    /// `1`/`true` or `0`/`false`.
    Include(bool),
    /// Find's `$slice`: `n` (limit only) or `[skip, limit]`.
    Slice {
        skip: Option<i32>,
        limit: i32,
    },
    /// `field.$`: the element the query matched.
    Positional,
    /// `{field: {$elemMatch: ...}}`, as a filter over `{field: [element]}`.
    ElemMatch(Arc<Filter>),
    Expr(Arc<Expr>),
    /// `{$meta: "textScore"}`: the document's `$text` score.
    TextScore,
}

impl PathNode {
    fn get(&self, name: &str) -> Option<&ProjNode> {
        self.children
            .iter()
            .find(|(child, _)| child == name)
            .map(|(_, node)| node)
    }

    fn has_computed(&self) -> bool {
        self.children.iter().any(|(_, node)| match node {
            ProjNode::Expr(_) | ProjNode::ElemMatch(_) => true,
            ProjNode::Path(path) => path.has_computed(),
            _ => false,
        })
    }
}

/// The code of a projection error as a number, for the tests' tables.
#[cfg(test)]
fn location(code: i32) -> ErrorCode {
    ErrorCode::from_number(code)
}

fn proj_err(code: ErrorCode, message: impl Into<String>) -> Error {
    Error::new(code, message)
}

#[derive(Default)]
struct ParseContext {
    kind: Option<Kind>,
    id_specified: bool,
    id_included_entirely: bool,
    id_excluded_entirely: bool,
    has_positional: bool,
    has_elem_match: bool,
    has_find_slice: bool,
}

impl Projection {
    pub fn parse(spec: &Document) -> Result<Projection> {
        let mut ctx = ParseContext::default();
        let mut root = PathNode::default();
        for (name, value) in spec {
            if name == "_id" || name.starts_with("_id.") {
                ctx.id_specified = true;
            }
            parse_element(&mut ctx, name, value, &mut root, true)?;
        }
        let kind = ctx.kind.unwrap_or(if ctx.has_find_slice {
            if ctx.id_included_entirely {
                Kind::Inclusion
            } else {
                Kind::Exclusion
            }
        } else if ctx.has_elem_match || ctx.id_included_entirely {
            Kind::Inclusion
        } else {
            Kind::Exclusion
        });
        if !ctx.id_specified && kind == Kind::Inclusion {
            add_node_at_path(&mut root, &["_id".to_string()], ProjNode::Include(true))?;
        }
        if kind == Kind::Exclusion && ctx.id_included_entirely {
            root.children.retain(|(name, _)| name != "_id");
        }
        Ok(Projection {
            root,
            kind,
            is_empty: spec.is_empty(),
            has_positional: ctx.has_positional,
        })
    }

    /// Whether the projection shows `{$meta: "textScore"}`, which needs a
    /// `$text` query.
    pub fn wants_text_score(&self) -> bool {
        fn walk(node: &PathNode) -> bool {
            node.children.iter().any(|(_, n)| match n {
                ProjNode::TextScore => true,
                ProjNode::Path(inner) => walk(inner),
                _ => false,
            })
        }
        walk(&self.root)
    }

    /// Whether `apply` needs the query's match details (`field.$`).
    pub fn has_positional(&self) -> bool {
        self.has_positional
    }

    /// Whether only the named fields come back (`{a: 1}`), as opposed to all
    /// but the named ones (`{a: 0}`).
    pub fn is_inclusion(&self) -> bool {
        self.kind == Kind::Inclusion && !self.is_empty
    }

    /// Projects `doc`; `details` carries the array position for `field.$`.
    pub fn apply(&self, doc: &Document, details: &MatchDetails) -> Result<Document> {
        if self.is_empty {
            return Ok(doc.clone());
        }
        let mut out = match self.kind {
            Kind::Inclusion => {
                let mut out = include_document(&self.root, doc, 0);
                add_computed(&self.root, doc, &mut out, 0, &mut SizeBudget::new())?;
                out
            }
            Kind::Exclusion => exclude_document(&self.root, doc, doc, 0),
        };
        apply_find_operators(&self.root, &mut out, details, &mut Vec::new())?;
        Ok(out)
    }
}

impl Projection {
    /// For a plain inclusion (`{a: 1, "b.c": 1}`): the included dotted
    /// paths other than `_id`, and whether `_id` is included. `None` for
    /// an empty projection, exclusions, computed fields, `$slice`,
    /// `$elemMatch` and the positional `$`. The query planner uses it to
    /// tell whether an index alone can answer a query.
    pub fn included_paths(&self) -> Option<(Vec<String>, bool)> {
        if self.is_empty || self.kind != Kind::Inclusion || self.has_positional {
            return None;
        }
        let mut paths = Vec::new();
        let mut id_included = false;
        for (name, node) in &self.root.children {
            match (name.as_str(), node) {
                ("_id", ProjNode::Include(included)) => id_included = *included,
                (_, ProjNode::Include(true)) => paths.push(name.clone()),
                (_, ProjNode::Path(inner)) => {
                    if !included_paths_under(inner, name, &mut paths) {
                        return None;
                    }
                }
                _ => return None,
            }
        }
        Some((paths, id_included))
    }
}

/// Adds the included paths below `prefix`; false when anything but a
/// plain inclusion is there.
fn included_paths_under(node: &PathNode, prefix: &str, out: &mut Vec<String>) -> bool {
    for (name, child) in &node.children {
        let path = format!("{prefix}.{name}");
        match child {
            ProjNode::Include(true) => out.push(path),
            ProjNode::Path(inner) => {
                if !included_paths_under(inner, &path, out) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

fn parse_element(
    ctx: &mut ParseContext,
    name: &str,
    value: &Bson,
    parent: &mut PathNode,
    parent_is_root: bool,
) -> Result<()> {
    let positional = name.ends_with(".$");
    if name.contains(".$.") {
        return Err(proj_err(
            ErrorCode::PositionalNotAtEnd,
            "As of 4.4, it's illegal to specify positional operator in the middle of a path.\
             Positional projection may only be used at the end, for example: a.b.$. If the \
             query previously used a form like a.b.$.d, remove the parts following the '$' and \
             the results will be equivalent.",
        ));
    }
    match value {
        Bson::Document(sub) => {
            if positional {
                return Err(proj_err(
                    ErrorCode::PositionalWithExpression,
                    "positional projection cannot be used with an expression or sub object",
                ));
            }
            parse_sub_object(ctx, name, sub, parent, parent_is_root)
        }
        Bson::Boolean(_)
        | Bson::Int32(_)
        | Bson::Int64(_)
        | Bson::Double(_)
        | Bson::Decimal128(_) => {
            if truthy(value) {
                parse_inclusion(ctx, name, parent, parent_is_root, positional)
            } else {
                if positional {
                    return Err(proj_err(
                        ErrorCode::ExclusionPositionalProjection,
                        "positional projection cannot be used with exclusion",
                    ));
                }
                parse_exclusion(ctx, name, parent, parent_is_root)
            }
        }
        _ => {
            if positional {
                return Err(proj_err(
                    ErrorCode::PositionalWithLiteral,
                    "positional projection cannot be used with a literal",
                ));
            }
            let expr = Expr::parse(value)?;
            let path = field_path(name)?;
            add_node_at_path(parent, &path, ProjNode::Expr(Arc::new(expr)))?;
            if ctx.kind == Some(Kind::Exclusion) {
                return Err(proj_err(
                    ErrorCode::ExclusionWithExpression,
                    format!(
                        "Cannot use an expression {name}: {} in an exclusion projection",
                        value
                    ),
                ));
            }
            ctx.kind = Some(Kind::Inclusion);
            Ok(())
        }
    }
}

fn truthy(value: &Bson) -> bool {
    match value {
        Bson::Boolean(b) => *b,
        Bson::Int32(n) => *n != 0,
        Bson::Int64(n) => *n != 0,
        Bson::Double(d) => *d != 0.0,
        Bson::Decimal128(d) => !DecimalValue::from_decimal128(d).is_zero(),
        _ => false,
    }
}

fn parse_inclusion(
    ctx: &mut ParseContext,
    name: &str,
    parent: &mut PathNode,
    parent_is_root: bool,
    positional: bool,
) -> Result<()> {
    let is_top_level_id = name == "_id" && parent_is_root;
    if !positional {
        let path = field_path(name)?;
        add_node_at_path(parent, &path, ProjNode::Include(true))?;
        if is_top_level_id {
            ctx.id_included_entirely = true;
        }
    } else {
        if ctx.has_positional {
            return Err(proj_err(
                ErrorCode::PositionalMoreThanOne,
                "Cannot specify more than one positional projection per query.",
            ));
        }
        if ctx.has_elem_match {
            return Err(proj_err(
                ErrorCode::ElemMatchWithPositional,
                "Cannot specify positional operator and $elemMatch.",
            ));
        }
        if name == ".$" {
            return Err(proj_err(
                ErrorCode::ProjectionFieldInvalid,
                format!("Projection on field {name} is invalid"),
            ));
        }
        let path = field_path(&name[..name.len() - 2])?;
        add_node_at_path(parent, &path, ProjNode::Positional)?;
        ctx.has_positional = true;
    }
    if !is_top_level_id {
        if ctx.kind == Some(Kind::Exclusion) {
            return Err(proj_err(
                ErrorCode::ProjectionInclusionInExclusion,
                format!("Cannot do inclusion on field {name} in exclusion projection"),
            ));
        }
        ctx.kind = Some(Kind::Inclusion);
    }
    Ok(())
}

fn parse_exclusion(
    ctx: &mut ParseContext,
    name: &str,
    parent: &mut PathNode,
    parent_is_root: bool,
) -> Result<()> {
    let path = field_path(name)?;
    add_node_at_path(parent, &path, ProjNode::Include(false))?;
    if name == "_id" && parent_is_root {
        ctx.id_excluded_entirely = true;
        return Ok(());
    }
    if ctx.kind == Some(Kind::Inclusion) {
        return Err(proj_err(
            ErrorCode::ProjectionExclusionInInclusion,
            format!("Cannot do exclusion on field {name} in inclusion projection"),
        ));
    }
    ctx.kind = Some(Kind::Exclusion);
    Ok(())
}

fn parse_sub_object(
    ctx: &mut ParseContext,
    name: &str,
    sub: &Document,
    parent: &mut PathNode,
    parent_is_root: bool,
) -> Result<()> {
    if sub.is_empty() {
        return Err(proj_err(
            ErrorCode::EmptySubProjection,
            format!("Invalid empty sub-projection: {name}"),
        ));
    }
    let path = field_path(name)?;
    if sub.len() == 1 {
        if let Some((operator, argument)) = sub.iter().next() {
            if operator.starts_with('$') {
                return parse_operator(
                    ctx,
                    name,
                    &path,
                    operator,
                    argument,
                    sub,
                    parent,
                    parent_is_root,
                );
            }
        }
    }
    let inner = find_or_add_inner(parent, &path)?;
    for (child_name, child_value) in sub {
        parse_element(ctx, child_name, child_value, inner, false)?;
    }
    Ok(())
}

/// `{name: {$op: argument}}`: find's `$slice` and `$elemMatch`, or an
/// aggregation expression.
#[allow(clippy::too_many_arguments)]
fn parse_operator(
    ctx: &mut ParseContext,
    name: &str,
    path: &[String],
    operator: &str,
    argument: &Bson,
    sub: &Document,
    parent: &mut PathNode,
    parent_is_root: bool,
) -> Result<()> {
    match operator {
        "$slice" => match parse_find_slice(argument) {
            Ok((skip, limit)) => {
                add_node_at_path(parent, path, ProjNode::Slice { skip, limit })?;
                ctx.has_find_slice = true;
                Ok(())
            }
            Err(find_error) => {
                // Not find's syntax: perhaps the aggregation $slice.
                parse_expression(ctx, path, sub, parent).map_err(|e| {
                    Error::new(
                        e.code,
                        format!(
                            "Invalid $slice syntax. The given syntax {sub} did not match the \
                             find() syntax because :: {} :: The given syntax did not match the \
                             expression $slice syntax. :: caused by :: {}",
                            find_error.message, e.message
                        ),
                    )
                })
            }
        },
        "$elemMatch" => {
            let Bson::Document(condition) = argument else {
                return Err(proj_err(
                    ErrorCode::ElemMatchProjectionNotObject,
                    format!(
                        "elemMatch: Invalid argument, object required, but got {}",
                        type_name(argument)
                    ),
                ));
            };
            if ctx.has_positional {
                return Err(proj_err(
                    ErrorCode::PositionalWithElemMatch,
                    "Cannot specify positional operator and $elemMatch.",
                ));
            }
            if path.len() != 1 || !parent_is_root {
                return Err(proj_err(
                    ErrorCode::ElemMatchProjectionNested,
                    "Cannot use $elemMatch projection on a nested field.",
                ));
            }
            let mut elem_match = Document::new();
            elem_match.insert("$elemMatch", condition.clone());
            let mut filter = Document::new();
            filter.insert(name, elem_match);
            let filter = Filter::parse(&filter)?;
            add_node_at_path(parent, path, ProjNode::ElemMatch(Arc::new(filter)))?;
            ctx.has_elem_match = true;
            Ok(())
        }
        _ => parse_expression(ctx, path, sub, parent),
    }
}

fn parse_expression(
    ctx: &mut ParseContext,
    path: &[String],
    sub: &Document,
    parent: &mut PathNode,
) -> Result<()> {
    let is_meta = sub.keys().next().is_some_and(|key| key == "$meta");
    if is_meta && sub.len() == 1 && sub.get_str("$meta").ok() == Some("textScore") {
        return add_node_at_path(parent, path, ProjNode::TextScore);
    }
    if ctx.kind == Some(Kind::Exclusion) && !is_meta {
        return Err(proj_err(
            ErrorCode::ExclusionExpression,
            "Cannot use expression other than $meta in exclusion projection",
        ));
    }
    if !is_meta && ctx.kind.is_none() {
        ctx.kind = Some(Kind::Inclusion);
    }
    let expr = Expr::parse(&Bson::Document(sub.clone()))?;
    add_node_at_path(parent, path, ProjNode::Expr(Arc::new(expr)))
}

/// Find's `$slice`: a number, or `[skip, limit]` with a positive limit.
fn parse_find_slice(argument: &Bson) -> Result<(Option<i32>, i32)> {
    if is_number(argument) {
        return Ok((None, safe_number_int(argument)));
    }
    let Bson::Array(array) = argument else {
        return Err(proj_err(
            ErrorCode::SliceWrongType,
            "$slice only supports numbers and [skip, limit] arrays",
        ));
    };
    let [skip, limit] = array.as_slice() else {
        return Err(proj_err(
            ErrorCode::SliceArrayWrongShape,
            "$slice array argument should be of form [skip, limit]",
        ));
    };
    if !is_number(skip) {
        return Err(proj_err(
            ErrorCode::SliceSkipNotNumber,
            format!(
                "$slice expects the skip argument to be a number, got {}",
                type_name(skip)
            ),
        ));
    }
    if !is_number(limit) {
        return Err(proj_err(
            ErrorCode::SliceLimitNotNumber,
            format!(
                "$slice expects the limit argument to be a number, got {}",
                type_name(limit)
            ),
        ));
    }
    let limit = safe_number_int(limit);
    if limit <= 0 {
        return Err(proj_err(
            ErrorCode::SliceLimitNotPositive,
            format!("$slice limit must be positive, got {limit}"),
        ));
    }
    Ok((Some(safe_number_int(skip)), limit))
}

fn is_number(value: &Bson) -> bool {
    matches!(
        value,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
    )
}

/// MongoDB's `safeNumberInt`: saturating, NaN as 0.
fn safe_number_int(value: &Bson) -> i32 {
    match value {
        Bson::Int32(n) => *n,
        Bson::Int64(n) => i32::try_from(*n).unwrap_or(if *n < 0 { i32::MIN } else { i32::MAX }),
        // `as` saturates and maps NaN to 0.
        Bson::Double(d) => *d as i32,
        Bson::Decimal128(d) => DecimalValue::from_decimal128(d).to_f64() as i32,
        _ => 0,
    }
}

/// Splits and checks a projected path (MongoDB's `FieldPath`).
fn field_path(name: &str) -> Result<Vec<String>> {
    if name.is_empty() {
        return Err(proj_err(
            ErrorCode::EmptyFieldPath,
            "FieldPath cannot be constructed with empty string",
        ));
    }
    if name.ends_with('.') {
        return Err(proj_err(
            ErrorCode::FieldPathTrailingDot,
            "FieldPath must not end with a '.'.",
        ));
    }
    let mut parts = Vec::new();
    for part in name.split('.') {
        if part.is_empty() {
            return Err(proj_err(
                ErrorCode::FieldPathEmptyComponent,
                "FieldPath field names may not be empty strings.",
            ));
        }
        if part.starts_with('$') && !matches!(part, "$id" | "$ref" | "$db") {
            return Err(proj_err(
                ErrorCode::FieldPathDollarPrefixed,
                "FieldPath field names may not start with '$'. Consider using $getField or \
                 $setField.",
            ));
        }
        if part.contains('\0') {
            return Err(proj_err(
                ErrorCode::FieldPathNullByte,
                "FieldPath field names may not contain '\\0'.",
            ));
        }
        parts.push(part.to_string());
    }
    Ok(parts)
}

/// Adds `node` at `path` under `root`, creating inner nodes; a path that
/// ends on, or passes through, an existing leaf collides.
fn add_node_at_path(root: &mut PathNode, path: &[String], node: ProjNode) -> Result<()> {
    let Some((last, inner)) = path.split_last() else {
        return Ok(());
    };
    let full = path.join(".");
    let mut current = root;
    for part in inner {
        let index = match current.children.iter().position(|(name, _)| name == part) {
            Some(index) => index,
            None => {
                current
                    .children
                    .push((part.clone(), ProjNode::Path(PathNode::default())));
                current.children.len() - 1
            }
        };
        current = match &mut current.children[index].1 {
            ProjNode::Path(path_node) => path_node,
            _ => {
                return Err(proj_err(
                    ErrorCode::ProjectionPathCollision,
                    format!(
                        "Path collision at {full} remaining portion {}",
                        path[1..].join(".")
                    ),
                ))
            }
        };
    }
    if current.get(last).is_some() {
        return Err(proj_err(
            ErrorCode::ProjectionPathOverwrite,
            format!("Path collision at {full}"),
        ));
    }
    current.children.push((last.clone(), node));
    Ok(())
}

/// The inner node at `path` for a sub-object projection, reusing one that
/// an earlier dotted path created.
fn find_or_add_inner<'a>(root: &'a mut PathNode, path: &[String]) -> Result<&'a mut PathNode> {
    let exists = {
        let mut current = Some(&*root);
        for part in path {
            current = match current.and_then(|node| node.get(part)) {
                Some(ProjNode::Path(inner)) => Some(inner),
                _ => None,
            };
        }
        current.is_some()
    };
    if !exists {
        add_node_at_path(root, path, ProjNode::Path(PathNode::default()))?;
    }
    let mut current = root;
    for part in path {
        let found = current
            .children
            .iter_mut()
            .find(|(name, _)| name == part)
            .map(|(_, node)| node);
        current = match found {
            Some(ProjNode::Path(inner)) => inner,
            _ => return Err(Error::internal("projection node vanished")),
        };
    }
    Ok(current)
}

// ---------------------------------------------------------------------------
// Applying
// ---------------------------------------------------------------------------

/// The included fields of `doc`, in the document's order.
fn include_document(node: &PathNode, doc: &Document, depth: usize) -> Document {
    let mut out = Document::new();
    for (name, value) in doc {
        match node.get(name) {
            Some(ProjNode::Include(true) | ProjNode::Slice { .. } | ProjNode::Positional) => {
                out.insert(name.clone(), value.clone());
            }
            Some(ProjNode::Path(inner)) => {
                if let Some(projected) = include_value(inner, value, depth + 1) {
                    out.insert(name.clone(), projected);
                }
            }
            _ => {}
        }
    }
    out
}

/// A sub-projection of one value: documents are projected, arrays element by
/// element, anything else is dropped.
fn include_value(node: &PathNode, value: &Bson, depth: usize) -> Option<Bson> {
    if depth > MAX_DEPTH {
        return None;
    }
    match value {
        Bson::Document(doc) => Some(Bson::Document(include_document(node, doc, depth))),
        Bson::Array(array) => Some(Bson::Array(
            array
                .iter()
                .filter_map(|element| include_value(node, element, depth + 1))
                .collect(),
        )),
        _ => None,
    }
}

/// Adds `$elemMatch` results and expression values, in projection order.
/// `root` is the whole input document, which expressions see. A computed
/// field under an array is evaluated once per element, so what the
/// document receives is charged to `added`, bounded like a document.
fn add_computed(
    node: &PathNode,
    root: &Document,
    out: &mut Document,
    depth: usize,
    added: &mut SizeBudget,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    for (name, child) in &node.children {
        match child {
            ProjNode::Expr(expr) => {
                // A missing result (`$$REMOVE`, a missing path) leaves the
                // field out.
                if let Some(value) = expr.evaluate_value(root)? {
                    added.add_field(name, &value)?;
                    out.insert(name.clone(), value);
                }
            }
            ProjNode::ElemMatch(filter) => {
                if let Some(value) = elem_match(root, name, filter) {
                    out.insert(name.clone(), value);
                }
            }
            ProjNode::Path(inner) if inner.has_computed() => match out.get_mut(name) {
                Some(Bson::Document(sub)) => add_computed(inner, root, sub, depth + 1, added)?,
                Some(Bson::Array(array)) => {
                    add_computed_to_array(inner, root, array, depth + 1, added)?
                }
                _ => {
                    // A scalar or nothing: the computed fields make a new document.
                    let mut sub = Document::new();
                    add_computed(inner, root, &mut sub, depth + 1, added)?;
                    out.insert(name.clone(), sub);
                }
            },
            _ => {}
        }
    }
    Ok(())
}

fn add_computed_to_array(
    node: &PathNode,
    root: &Document,
    array: &mut [Bson],
    depth: usize,
    added: &mut SizeBudget,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    for element in array {
        match element {
            Bson::Document(sub) => add_computed(node, root, sub, depth + 1, added)?,
            Bson::Array(inner) => add_computed_to_array(node, root, inner, depth + 1, added)?,
            other => {
                let mut sub = Document::new();
                add_computed(node, root, &mut sub, depth + 1, added)?;
                *other = Bson::Document(sub);
            }
        }
    }
    Ok(())
}

/// The first element of `doc[name]` matching the `$elemMatch`, as a
/// one-element array; nothing when there is none.
fn elem_match(doc: &Document, name: &str, filter: &Filter) -> Option<Bson> {
    let Some(Bson::Array(array)) = path::field(doc, name) else {
        return None;
    };
    array.iter().find_map(|element| {
        let mut probe = Document::new();
        probe.insert(name, Bson::Array(vec![element.clone()]));
        filter
            .matches(&probe)
            .then(|| Bson::Array(vec![element.clone()]))
    })
}

/// `doc` without the excluded fields. `root` is the whole input document,
/// for `$elemMatch`.
fn exclude_document(node: &PathNode, doc: &Document, root: &Document, depth: usize) -> Document {
    let mut out = Document::new();
    for (name, value) in doc {
        match node.get(name) {
            Some(ProjNode::Include(false)) => {}
            Some(ProjNode::Path(inner)) => {
                out.insert(name.clone(), exclude_value(inner, value, root, depth + 1));
            }
            Some(ProjNode::ElemMatch(filter)) => {
                if let Some(value) = elem_match(root, name, filter) {
                    out.insert(name.clone(), value);
                }
            }
            _ => {
                out.insert(name.clone(), value.clone());
            }
        }
    }
    out
}

fn exclude_value(node: &PathNode, value: &Bson, root: &Document, depth: usize) -> Bson {
    if depth > MAX_DEPTH {
        return value.clone();
    }
    match value {
        Bson::Document(doc) => Bson::Document(exclude_document(node, doc, root, depth)),
        Bson::Array(array) => Bson::Array(
            array
                .iter()
                .map(|element| exclude_value(node, element, root, depth + 1))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Applies `$slice` and `field.$` to the projected document, in
/// projection order.
fn apply_find_operators(
    node: &PathNode,
    out: &mut Document,
    details: &MatchDetails,
    path: &mut Vec<String>,
) -> Result<()> {
    if path.len() > MAX_DEPTH {
        return Ok(());
    }
    for (name, child) in &node.children {
        path.push(name.clone());
        let result = match child {
            ProjNode::Slice { skip, limit } => {
                // Through documents and arrays of documents to each array
                // at the end of the path.
                path::for_each_value_mut(out, path, &mut |value| {
                    if let Bson::Array(array) = value {
                        slice_array(array, *skip, *limit);
                    }
                });
                Ok(())
            }
            ProjNode::Positional => positional_at(out, path, details),
            ProjNode::Path(inner) => apply_find_operators(inner, out, details, path),
            // A query without `$text` is refused before it runs (40218);
            // a pipeline document past `$group` has no score: missing.
            ProjNode::TextScore => {
                if let Some(score) = details.text_score {
                    set_in_documents(out, path, Bson::Double(score));
                }
                Ok(())
            }
            _ => Ok(()),
        };
        path.pop();
        result?;
    }
    Ok(())
}

/// Sets `path` to `value` through documents, making the missing ones
/// (a scalar or array on the way is replaced, as a computed field does).
fn set_in_documents(out: &mut Document, path: &[String], value: Bson) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut doc = out;
    for part in parents {
        if !matches!(doc.get(part), Some(Bson::Document(_))) {
            doc.insert(part.clone(), Document::new());
        }
        let Some(Bson::Document(inner)) = doc.get_mut(part) else {
            return;
        };
        doc = inner;
    }
    doc.insert(last.clone(), value);
}

fn slice_array(array: &mut Vec<Bson>, skip: Option<i32>, limit: i32) {
    let len = array.len() as i64;
    let limit = i64::from(limit);
    let (start, end) = match skip {
        None if limit >= 0 => (0, limit.min(len)),
        None => (len - (-limit).min(len), len),
        Some(skip) => {
            let skip = i64::from(skip);
            let start = if skip >= 0 {
                skip.min(len)
            } else {
                (len + skip).max(0)
            };
            (start, (start + limit).min(len))
        }
    };
    // Both bounds are within 0..=len.
    let (start, end) = (start as usize, end as usize);
    array.truncate(end);
    array.drain(..start);
}

/// `field.$`: the first array on the path is cut to the element the query
/// matched.
fn positional_at(out: &mut Document, path: &[String], details: &MatchDetails) -> Result<()> {
    let Some(array) = path::first_array_mut(out, path) else {
        return Ok(());
    };
    let Some(position) = details.array_position else {
        return Err(proj_err(
            ErrorCode::PositionalNoMatchingElement,
            "positional operator '.$' couldn't find a matching element in the array",
        ));
    };
    let Some(element) = array.get(position).cloned() else {
        return Err(proj_err(
            ErrorCode::PositionalElementMismatch,
            "positional operator '.$' element mismatch",
        ));
    };
    *array = vec![element];
    Ok(())
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    fn project(spec: Document, doc: Document) -> Document {
        project_at(spec, doc, None)
    }

    fn project_at(spec: Document, doc: Document, position: Option<usize>) -> Document {
        let projection = match Projection::parse(&spec) {
            Ok(p) => p,
            Err(e) => panic!("parse failed: {e}"),
        };
        let details = MatchDetails {
            matched: true,
            array_position: position,
            text_score: None,
        };
        match projection.apply(&doc, &details) {
            Ok(out) => out,
            Err(e) => panic!("apply failed: {e}"),
        }
    }

    /// Compares with field order, which `Document`'s `==` ignores.
    fn assert_doc(actual: &Document, expected: &Document) {
        assert_eq!(
            format!("{actual}"),
            format!("{expected}"),
            "\n  actual: {actual}\nexpected: {expected}"
        );
    }

    fn parse_error(spec: Document) -> Error {
        match Projection::parse(&spec) {
            Ok(p) => panic!("expected an error, got {p:?}"),
            Err(e) => e,
        }
    }

    fn assert_code(e: &Error, code: i32) {
        assert_eq!(e.code, location(code), "{e}");
    }

    fn sample() -> Document {
        doc! {"_id": 1, "b": 2, "a": 1, "c": {"x": 1, "y": 2}, "d": [1, 2, 3]}
    }

    #[test]
    fn empty_projection_is_identity() {
        assert_doc(&project(doc! {}, sample()), &sample());
    }

    #[test]
    fn inclusion_keeps_document_order_and_id() {
        assert_doc(
            &project(doc! {"a": 1, "b": true}, sample()),
            &doc! {"_id": 1, "b": 2, "a": 1},
        );
        assert_doc(&project(doc! {"a": 1, "_id": 0}, sample()), &doc! {"a": 1});
        assert_doc(&project(doc! {"_id": 1}, sample()), &doc! {"_id": 1});
        // Non-zero numbers include.
        assert_doc(
            &project(doc! {"a": -2.5, "b": 5i64}, sample()),
            &doc! {"_id": 1, "b": 2, "a": 1},
        );
        assert_doc(&project(doc! {"missing": 1}, sample()), &doc! {"_id": 1});
    }

    #[test]
    fn exclusion() {
        assert_doc(
            &project(doc! {"a": 0, "c.x": false}, sample()),
            &doc! {"_id": 1, "b": 2, "c": {"y": 2}, "d": [1, 2, 3]},
        );
        assert_doc(
            &project(doc! {"_id": 0}, sample()),
            &doc! {"b": 2, "a": 1, "c": {"x": 1, "y": 2}, "d": [1, 2, 3]},
        );
        // `_id: 1` is allowed in an exclusion and changes nothing.
        assert_doc(
            &project(doc! {"a": 0, "_id": 1}, sample()),
            &doc! {"_id": 1, "b": 2, "c": {"x": 1, "y": 2}, "d": [1, 2, 3]},
        );
    }

    #[test]
    fn dotted_inclusion_through_arrays() {
        let doc = doc! {"_id": 1, "a": [{"b": 1, "c": 2}, {"c": 3}, 5, [{"b": 4, "c": 5}]], "e": 5};
        assert_doc(
            &project(doc! {"a.b": 1}, doc.clone()),
            &doc! {"_id": 1, "a": [{"b": 1}, {}, [{"b": 4}]]},
        );
        assert_doc(
            &project(doc! {"a.b": 0}, doc.clone()),
            &doc! {"_id": 1, "a": [{"c": 2}, {"c": 3}, 5, [{"c": 5}]], "e": 5},
        );
        // A scalar where a document was expected disappears.
        assert_doc(&project(doc! {"e.f": 1}, doc), &doc! {"_id": 1});
        // A document without the field stays, empty.
        assert_doc(
            &project(doc! {"c.z": 1}, sample()),
            &doc! {"_id": 1, "c": {}},
        );
    }

    #[test]
    fn nested_sub_projection() {
        assert_doc(
            &project(doc! {"c": {"y": 1}}, sample()),
            &doc! {"_id": 1, "c": {"y": 2}},
        );
        assert_doc(
            &project(doc! {"c": {"y": 1}, "c.x": 1}, sample()),
            &doc! {"_id": 1, "c": {"x": 1, "y": 2}},
        );
        let e = parse_error(doc! {"c": {}});
        assert_code(&e, 51270);
        assert_eq!(e.code.number(), 51270);
    }

    #[test]
    fn mixing_inclusion_and_exclusion() {
        let e = parse_error(doc! {"a": 1, "b": 0});
        assert_eq!(e.code.number(), 31254);
        assert_eq!(
            e.message,
            "Cannot do exclusion on field b in inclusion projection"
        );
        let e = parse_error(doc! {"a": 0, "b": 1});
        assert_code(&e, 31253);
        assert_eq!(
            e.message,
            "Cannot do inclusion on field b in exclusion projection"
        );
        let e = parse_error(doc! {"c": {"x": 1, "y": 0}});
        assert_eq!(e.code.number(), 31254);
    }

    #[test]
    fn path_collisions() {
        let e = parse_error(doc! {"a": 1, "a.b": 1});
        assert_code(&e, 31249);
        assert_eq!(e.message, "Path collision at a.b remaining portion b");
        let e = parse_error(doc! {"a.b": 1, "a": 1});
        assert_code(&e, 31250);
        assert_eq!(e.message, "Path collision at a");
    }

    #[test]
    fn bad_field_paths() {
        let e = parse_error(doc! {"$a": 1});
        assert_eq!(e.code.number(), 16410);
        let e = parse_error(doc! {"": 1});
        assert_eq!(e.code.number(), 40352);
        let e = parse_error(doc! {"a..b": 1});
        assert_code(&e, 15998);
        let e = parse_error(doc! {"a.": 1});
        assert_code(&e, 40353);
    }

    #[test]
    fn slice() {
        let doc = doc! {"_id": 1, "a": [1, 2, 3, 4, 5], "b": 1, "c": {"d": [1, 2, 3]}};
        // Alone, $slice is an exclusion: everything else stays.
        assert_doc(
            &project(doc! {"a": {"$slice": 2}}, doc.clone()),
            &doc! {"_id": 1, "a": [1, 2], "b": 1, "c": {"d": [1, 2, 3]}},
        );
        assert_doc(
            &project(doc! {"a": {"$slice": -2}, "b": 0}, doc.clone()),
            &doc! {"_id": 1, "a": [4, 5], "c": {"d": [1, 2, 3]}},
        );
        assert_doc(
            &project(doc! {"a": {"$slice": [1, 2]}}, doc.clone()),
            &doc! {"_id": 1, "a": [2, 3], "b": 1, "c": {"d": [1, 2, 3]}},
        );
        assert_doc(
            &project(doc! {"a": {"$slice": [-2, 5]}}, doc.clone()),
            &doc! {"_id": 1, "a": [4, 5], "b": 1, "c": {"d": [1, 2, 3]}},
        );
        assert_doc(
            &project(doc! {"a": {"$slice": [10, 1]}}, doc.clone()),
            &doc! {"_id": 1, "a": [], "b": 1, "c": {"d": [1, 2, 3]}},
        );
        // In an inclusion the sliced field keeps its place.
        assert_doc(
            &project(doc! {"b": 1, "a": {"$slice": 1}}, doc.clone()),
            &doc! {"_id": 1, "a": [1], "b": 1},
        );
        // Nested: in an inclusion only the sliced field of the sub-document.
        assert_doc(
            &project(doc! {"b": 1, "c.d": {"$slice": 1}}, doc.clone()),
            &doc! {"_id": 1, "b": 1, "c": {"d": [1]}},
        );
        // `_id: 1` makes a lone $slice an inclusion.
        assert_doc(
            &project(doc! {"_id": 1, "a": {"$slice": 1}}, doc),
            &doc! {"_id": 1, "a": [1]},
        );
    }

    #[test]
    fn slice_errors() {
        // Neither find's `[skip, limit]` nor the expression's arguments.
        let e = parse_error(doc! {"a": {"$slice": "x"}});
        assert!(e.message.contains("Invalid $slice syntax"), "{e}");
        let e = parse_error(doc! {"a": {"$slice": [1]}});
        assert!(e.message.contains("should be of form [skip, limit]"), "{e}");
    }

    #[test]
    fn elem_match_is_added_after_included_fields() {
        let doc = doc! {
            "_id": 1,
            "games": [{"game": "abc", "score": 8}, {"game": "xyz", "score": 5}],
            "joined": 1,
            "lastLogin": 2,
        };
        assert_doc(
            &project(
                doc! {"games": {"$elemMatch": {"score": {"$gt": 5}}}, "joined": 1, "lastLogin": 1},
                doc.clone(),
            ),
            &doc! {"_id": 1, "joined": 1, "lastLogin": 2,
            "games": [{"game": "abc", "score": 8}]},
        );
        // No match: the field is left out.
        assert_doc(
            &project(doc! {"games": {"$elemMatch": {"score": {"$gt": 50}}}}, doc),
            &doc! {"_id": 1},
        );
        let e = parse_error(doc! {"a.b": {"$elemMatch": {"x": 1}}});
        assert_code(&e, 31275);
        let e = parse_error(doc! {"a": {"$elemMatch": 1}});
        assert_code(&e, 31274);
    }

    #[test]
    fn positional() {
        let doc = doc! {"_id": 1, "a": [10, 20, 30], "b": 1, "c": [{"d": [1, 2]}]};
        assert_doc(
            &project_at(doc! {"a.$": 1}, doc.clone(), Some(1)),
            &doc! {"_id": 1, "a": [20]},
        );
        assert_doc(
            &project_at(doc! {"b": 1, "c.d.$": 1}, doc.clone(), Some(0)),
            &doc! {"_id": 1, "b": 1, "c": [{"d": [1, 2]}]},
        );
        let projection = Projection::parse(&doc! {"a.$": 1}).unwrap();
        assert!(projection.has_positional());
        let e = projection
            .apply(&doc, &MatchDetails::default())
            .unwrap_err();
        assert_code(&e, 51246);
        let e = projection
            .apply(
                &doc,
                &MatchDetails {
                    matched: true,
                    array_position: Some(7),
                    text_score: None,
                },
            )
            .unwrap_err();
        assert_code(&e, 51247);
        // Not an array: the field comes back whole.
        assert_doc(
            &project_at(doc! {"b.$": 1}, doc, Some(0)),
            &doc! {"_id": 1, "b": 1},
        );
    }

    #[test]
    fn positional_errors() {
        assert_code(&parse_error(doc! {"a.$": 1, "b.$": 1}), 31276);
        assert_code(&parse_error(doc! {"a.$.b": 1}), 31394);
        assert_code(&parse_error(doc! {"a.$": 0}), 31395);
        assert_code(&parse_error(doc! {"a.$": "x"}), 31308);
        assert_code(&parse_error(doc! {"a.$": {"x": 1}}), 31271);
        assert_code(
            &parse_error(doc! {"a": {"$elemMatch": {"x": 1}}, "b.$": 1}),
            31256,
        );
        assert_code(
            &parse_error(doc! {"b.$": 1, "a": {"$elemMatch": {"x": 1}}}),
            31255,
        );
        assert_code(&parse_error(doc! {".$": 1}), 5392900);
    }

    #[test]
    fn literal_in_exclusion_is_refused() {
        let e = parse_error(doc! {"a": 0, "b": "x"});
        assert_code(&e, 31310);
    }

    #[test]
    fn expressions_are_computed_after_included_fields() {
        let doc = doc! {"_id": 1, "a": 5, "b": 2};
        assert_doc(
            &project(doc! {"x": "$a", "b": 1}, doc.clone()),
            &doc! {"_id": 1, "b": 2, "x": 5},
        );
        assert_doc(
            &project(doc! {"x": {"$add": ["$a", 1]}, "_id": 0}, doc.clone()),
            &doc! {"x": 6},
        );
        assert_doc(
            &project(doc! {"c.z": {"$literal": 1}}, sample()),
            &doc! {"_id": 1, "c": {"z": 1}},
        );
        // A scalar under a computed sub-field becomes a document.
        assert_doc(
            &project(doc! {"a.z": {"$literal": 1}}, doc),
            &doc! {"_id": 1, "a": {"z": 1}},
        );
        assert_code(&parse_error(doc! {"a": 0, "x": {"$add": [1, 2]}}), 31252);
        assert_eq!(
            parse_error(doc! {"x": {"$add": [1, 2]}, "a": 0})
                .code
                .number(),
            31254
        );
    }

    #[test]
    fn projections_are_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Projection>();
    }

    #[test]
    fn truthiness() {
        assert!(truthy(&Bson::Decimal128("1.5".parse().unwrap())));
        assert!(!truthy(&Bson::Decimal128("0.00".parse().unwrap())));
        assert!(!truthy(&Bson::Decimal128("-0E+3".parse().unwrap())));
        assert!(truthy(&Bson::Double(f64::NAN)));
    }

    #[test]
    fn deep_arrays_do_not_overflow_the_stack() {
        let mut value = Bson::Document(doc! {"b": 1});
        for _ in 0..1_000 {
            value = Bson::Array(vec![value]);
        }
        let doc = doc! {"_id": 1, "a": value};
        let projection = Projection::parse(&doc! {"a.b": 1}).unwrap();
        assert!(projection.apply(&doc, &MatchDetails::default()).is_ok());
        let projection = Projection::parse(&doc! {"a.b": 0}).unwrap();
        assert!(projection.apply(&doc, &MatchDetails::default()).is_ok());
    }

    mod props {
        use proptest::prelude::*;

        use super::*;

        fn value() -> impl Strategy<Value = Bson> {
            let leaf = prop_oneof![
                any::<i32>().prop_map(Bson::Int32),
                any::<bool>().prop_map(Bson::Boolean),
                Just(Bson::Double(0.0)),
                "[a$]{0,2}".prop_map(Bson::String),
                Just(Bson::Null),
            ];
            leaf.prop_recursive(3, 12, 3, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
                    proptest::collection::vec((key(), inner), 0..3)
                        .prop_map(|fields| Bson::Document(fields.into_iter().collect())),
                ]
            })
        }

        fn key() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("a".to_string()),
                Just("b".to_string()),
                Just("_id".to_string()),
                Just("a.b".to_string()),
                Just("a.$".to_string()),
                Just("$slice".to_string()),
                Just("$elemMatch".to_string()),
                Just("$literal".to_string()),
                Just("".to_string()),
            ]
        }

        proptest! {
            #[test]
            fn never_panics(
                spec in proptest::collection::vec((key(), value()), 0..4),
                doc in proptest::collection::vec((key(), value()), 0..4),
                position in proptest::option::of(0usize..3),
            ) {
                let spec: Document = spec.into_iter().collect();
                let doc: Document = doc.into_iter().collect();
                if let Ok(projection) = Projection::parse(&spec) {
                    let details = MatchDetails { matched: true, array_position: position, text_score: None };
                    let _ = projection.apply(&doc, &details);
                }
            }
        }
    }
}

#[cfg(test)]
mod planner_tests {
    use super::*;
    use bson::doc;

    fn paths(p: Document) -> Option<(Vec<String>, bool)> {
        Projection::parse(&p).unwrap().included_paths()
    }

    #[test]
    fn included_paths_of_plain_inclusions() {
        assert_eq!(
            paths(doc! {"a": 1, "b.c": true}),
            Some((vec!["a".into(), "b.c".into()], true))
        );
        assert_eq!(
            paths(doc! {"a": {"x": 1, "y": 1}, "_id": 0}),
            Some((vec!["a.x".into(), "a.y".into()], false))
        );
        assert_eq!(paths(doc! {"_id": 1}), Some((vec![], true)));
        assert_eq!(paths(doc! {}), None);
        assert_eq!(paths(doc! {"a": 0}), None);
        assert_eq!(paths(doc! {"_id": 0}), None);
        assert_eq!(paths(doc! {"a": 1, "b": "$a"}), None);
        assert_eq!(paths(doc! {"a": {"$slice": 2}, "b": 1}), None);
        assert_eq!(paths(doc! {"a": {"$elemMatch": {"x": 1}}}), None);
        assert_eq!(paths(doc! {"a.$": 1}), None);
    }
}
