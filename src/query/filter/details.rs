//! Why a document fails a filter, in the words MongoDB 7.0 uses for a
//! collection validator's rejection (error 121, `errInfo.details`).
//!
//! MongoDB explains a failure by walking the validator as parsed, before
//! any simplification: a filter with several conditions is an implicit
//! `$and` (one condition stands alone), `$ne`, `$nin` and `$exists: false`
//! are negations reported under their own names, and `$jsonSchema` is the
//! tree its keywords translate into. The filter's own tree flattens some of
//! that, so [`Check`] is built again from the filter as written.
//!
//! Each node explains itself in a normal or an inverted sense: under
//! `$not` and `$nor` a condition fails by matching ("comparison
//! succeeded"). Which children a logical node explains follows MongoDB:
//! an `$and` names the clauses that failed (all of them when inverted), an
//! `$or` all of them (those that matched when inverted), a `$nor` those
//! that matched. A schema is only ever explained in the normal sense:
//! `not` reports "child expression matched", and a schema that matched
//! where it should not reports "schema matched".

use std::collections::BTreeSet;
use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::schema::{
    self, additional_holds, dependency_holds, first_duplicate, keyword_holds, Additional, Keyword,
    Requires, Schema, Subject,
};
use super::{
    element_true_value, is_operator_document, parse_all, parse_operator, path_node, FieldPath,
    MatchContext, Node, Pred, QueryRegex,
};
use crate::error::Result;
use crate::query::compare::type_name;
use crate::query::expr::Expr;
use crate::query::path::{field, walk, Container, Part};

/// How many values a leaf reports in `consideredValues`
/// (`internalQueryMaxDocValidationErrorConsideredValues`).
const MAX_CONSIDERED_VALUES: usize = 10;

/// The `details` of a document-validation failure (error 121's
/// `errInfo.details`), as MongoDB 7.0 explains why `doc` does not match
/// `filter`, a filter document that [`super::Filter::parse`] accepted. Called
/// only for documents that do not match.
pub fn failure_details(filter: &Document, doc: &Document) -> Document {
    match build_document(filter) {
        Ok(check) => explain(&check, doc, Sense::Normal).unwrap_or_default(),
        // The filter parsed once already, so this cannot happen.
        Err(_) => doc! {"reason": "failed to generate document validation error"},
    }
}

// ---------------------------------------------------------------------------
// The validator as MongoDB parses it.

enum Check {
    /// `$and`, explicit or implied by several conditions.
    And(Vec<Check>),
    Or(Vec<Check>),
    Nor(Vec<Check>),
    /// `$not`, which reports the condition it negates.
    Not(Box<Check>),
    /// `$ne`, `$nin`, `$exists: false`: a negation the leaf inside names.
    Negated(Box<Check>),
    Leaf(Box<Leaf>),
    Expr {
        expr: Box<Expr>,
        spec: Document,
    },
    /// `$alwaysTrue`, `$alwaysFalse`, `$all: []`.
    Always {
        value: bool,
        operator: String,
        spec: Document,
    },
    Schema(Box<Schema>),
}

/// A condition on one path.
struct Leaf {
    operator: String,
    /// `specifiedAs`: the condition as written, under its path.
    spec: Document,
    parts: Vec<Part>,
    /// What decides the condition (the filter's own node).
    node: Node,
    rule: Rule,
}

/// How an operator words its failure.
#[derive(Clone, Copy)]
struct Rule {
    normal: &'static str,
    inverted: &'static str,
    /// The types a value must have for the operator to apply; when none
    /// does, the reason is "type did not match". Empty: any type.
    expected: &'static [&'static str],
    /// Whether an array at the end of the path offers its elements
    /// rather than itself.
    expand_leaf: bool,
    shape: Shape,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Values, then the reason.
    Path,
    /// The reason alone.
    Exists,
    /// Values and their types.
    Type,
}

const NUMBERS: &[&str] = &["decimal", "double", "int", "long"];

fn rule(operator: &str) -> Rule {
    let path = |normal, inverted, expected, expand_leaf| Rule {
        normal,
        inverted,
        expected,
        expand_leaf,
        shape: Shape::Path,
    };
    match operator {
        "$in" | "$nin" => path(
            "no matching value found in array",
            "matching value found in array",
            &[],
            true,
        ),
        "$exists" => Rule {
            shape: Shape::Exists,
            ..path("path does not exist", "path does exist", &[], true)
        },
        "$type" => Rule {
            shape: Shape::Type,
            ..path("type did not match", "type did match", &[], true)
        },
        "$regex" => path(
            "regular expression did not match",
            "regular expression did match",
            &["regex", "string", "symbol"],
            true,
        ),
        "$mod" => path(
            "$mod did not evaluate to expected remainder",
            "$mod did evaluate to expected remainder",
            NUMBERS,
            true,
        ),
        "$bitsAllSet" | "$bitsAnySet" | "$bitsAllClear" | "$bitsAnyClear" => path(
            "bitwise operator failed to match",
            "bitwise operator matched successfully",
            &["binData", "decimal", "double", "int", "long"],
            true,
        ),
        "$size" => path(
            "array length was not equal to given size",
            "array length was equal to given size",
            &["array"],
            false,
        ),
        "$elemMatch" => path(
            "array did not satisfy the child predicate",
            "array did satisfy the child predicate",
            &["array"],
            false,
        ),
        "$all" => path(
            "array did not contain all specified values",
            "array did contain all specified values",
            &[],
            false,
        ),
        // $eq, $ne, $lt, $lte, $gt, $gte.
        _ => path("comparison failed", "comparison succeeded", &[], true),
    }
}

/// A document level: one condition stands alone, several are an `$and`.
fn build_document(filter: &Document) -> Result<Check> {
    let mut checks = Vec::new();
    for (key, value) in filter {
        if key.starts_with('$') {
            if let Some(check) = build_top_level(key, value)? {
                checks.push(check);
            }
        } else {
            build_field(key, value, &mut checks)?;
        }
    }
    Ok(collapse(checks))
}

fn collapse(mut checks: Vec<Check>) -> Check {
    if checks.len() == 1 {
        if let Some(only) = checks.pop() {
            return only;
        }
    }
    Check::And(checks)
}

fn build_top_level(key: &str, value: &Bson) -> Result<Option<Check>> {
    let spec = || doc! { key: value.clone() };
    Ok(Some(match key {
        "$and" | "$or" | "$nor" => {
            let mut clauses = Vec::new();
            if let Bson::Array(items) = value {
                for item in items {
                    if let Bson::Document(clause) = item {
                        clauses.push(build_document(clause)?);
                    }
                }
            }
            match key {
                "$and" => Check::And(clauses),
                "$or" => Check::Or(clauses),
                _ => Check::Nor(clauses),
            }
        }
        "$expr" => Check::Expr {
            expr: Box::new(Expr::parse(value)?),
            spec: spec(),
        },
        "$comment" => return Ok(None),
        "$alwaysTrue" | "$alwaysFalse" => Check::Always {
            value: key == "$alwaysTrue",
            operator: key.to_string(),
            spec: spec(),
        },
        "$jsonSchema" => Check::Schema(Box::new(schema::parse(value)?)),
        // DBRef fields: equalities.
        _ => leaf(
            key,
            "$eq",
            spec(),
            path_node_for(
                key,
                Pred::Compare {
                    op: super::CmpOp::Eq,
                    value: value.clone(),
                },
            ),
        ),
    }))
}

fn path_node_for(path: &str, pred: Pred) -> Node {
    path_node(&Arc::new(FieldPath::new(path)), pred)
}

fn leaf(path: &str, operator: &str, spec: Document, node: Node) -> Check {
    Check::Leaf(Box::new(Leaf {
        operator: operator.to_string(),
        spec,
        parts: FieldPath::new(path).parts,
        node,
        rule: rule(operator),
    }))
}

/// `{path: value}`: operators each give a condition; anything else is an
/// equality (or a regex).
fn build_field(path: &str, value: &Bson, out: &mut Vec<Check>) -> Result<()> {
    let field_path = Arc::new(FieldPath::new(path));
    let spec = doc! { path: value.clone() };
    match value {
        Bson::Document(ops) if is_operator_document(ops, false) => {
            for (op, arg) in ops {
                if let Some(check) = build_operator(&field_path, op, arg, ops)? {
                    out.push(check);
                }
            }
        }
        Bson::RegularExpression(r) => {
            let regex = QueryRegex::new(r.pattern.as_str(), r.options.as_str())?;
            out.push(leaf(
                path,
                "$regex",
                spec,
                path_node(&field_path, Pred::Regex(Box::new(regex))),
            ));
        }
        _ => {
            let node = path_node(&field_path, super::equality(value)?);
            out.push(leaf(path, "$eq", spec, node));
        }
    }
    Ok(())
}

fn build_operator(
    path: &Arc<FieldPath>,
    op: &str,
    arg: &Bson,
    siblings: &Document,
) -> Result<Option<Check>> {
    let dotted = path.dotted.as_str();
    let spec = doc! { dotted: { op: arg.clone() } };
    let decided_by = |as_op: &str| -> Result<Node> {
        parse_operator(path, as_op, arg, siblings)?
            .ok_or_else(|| crate::err!(BadValue, "{op} has no condition of its own"))
    };
    Ok(Some(match op {
        "$options" => return Ok(None),
        "$regex" => {
            let mut regex_spec = Document::new();
            for (key, value) in siblings {
                if key == "$regex" || key == "$options" {
                    regex_spec.insert(key, value.clone());
                }
            }
            leaf(dotted, op, doc! { dotted: regex_spec }, decided_by(op)?)
        }
        "$ne" => Check::Negated(Box::new(leaf(dotted, op, spec, decided_by("$eq")?))),
        "$nin" => Check::Negated(Box::new(leaf(dotted, op, spec, decided_by("$in")?))),
        "$exists" => {
            let exists = leaf(dotted, op, spec, path_node(path, Pred::Exists));
            if element_true_value(arg) {
                exists
            } else {
                Check::Negated(Box::new(exists))
            }
        }
        "$not" => Check::Not(Box::new(build_not(path, arg)?)),
        "$all" => match parse_all(path, arg)? {
            Node::Always(value) => Check::Always {
                value,
                operator: op.to_string(),
                spec,
            },
            node => leaf(dotted, op, spec, node),
        },
        _ => leaf(dotted, op, spec, decided_by(op)?),
    }))
}

/// What `$not` negates: a regex, or the operators of a document (several
/// are an `$and`).
fn build_not(path: &Arc<FieldPath>, arg: &Bson) -> Result<Check> {
    match arg {
        Bson::Document(ops) => {
            let mut checks = Vec::new();
            for (op, inner) in ops {
                if let Some(check) = build_operator(path, op, inner, ops)? {
                    checks.push(check);
                }
            }
            Ok(collapse(checks))
        }
        other => {
            let mut checks = Vec::new();
            build_field(&path.dotted, other, &mut checks)?;
            Ok(collapse(checks))
        }
    }
}

// ---------------------------------------------------------------------------
// Matching, as the explanation needs it.

/// Whether `check` matches; `Err` when a `$expr` fails to evaluate.
fn evaluate(check: &Check, doc: &Document) -> std::result::Result<bool, ()> {
    Ok(match check {
        Check::And(children) => {
            for child in children {
                if !evaluate(child, doc)? {
                    return Ok(false);
                }
            }
            true
        }
        Check::Or(children) => {
            for child in children {
                if evaluate(child, doc)? {
                    return Ok(true);
                }
            }
            false
        }
        Check::Nor(children) => {
            for child in children {
                if evaluate(child, doc)? {
                    return Ok(false);
                }
            }
            true
        }
        Check::Not(child) | Check::Negated(child) => !evaluate(child, doc)?,
        Check::Leaf(leaf) => MatchContext::default().eval(&leaf.node, Container::Doc(doc), false),
        Check::Expr { expr, .. } => expr.evaluate_truthy(doc).map_err(|_| ())?,
        Check::Always { value, .. } => *value,
        Check::Schema(schema) => schema.matches_document(doc),
    })
}

/// The sense a condition is explained in: failing, or (under `$not` and
/// `$nor`) matching.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sense {
    Normal,
    Inverted,
}

impl Sense {
    fn flip(self) -> Sense {
        match self {
            Sense::Normal => Sense::Inverted,
            Sense::Inverted => Sense::Normal,
        }
    }

    fn pick(self, normal: &'static str, inverted: &'static str) -> &'static str {
        match self {
            Sense::Normal => normal,
            Sense::Inverted => inverted,
        }
    }
}

/// Whether a clause explained in `sense` contributes: it must have failed
/// (normal) or matched (inverted); one that cannot be evaluated does.
fn contributes(check: &Check, doc: &Document, sense: Sense) -> bool {
    match evaluate(check, doc) {
        Ok(matched) => matched == (sense == Sense::Inverted),
        Err(()) => true,
    }
}

// ---------------------------------------------------------------------------
// Explaining query operators.

fn explain(check: &Check, doc: &Document, sense: Sense) -> Option<Document> {
    Some(match check {
        Check::And(children) => {
            let (key, only_contributing) = match sense {
                Sense::Normal => ("clausesNotSatisfied", true),
                Sense::Inverted => ("clausesSatisfied", false),
            };
            clauses("$and", key, children, doc, sense, only_contributing)
        }
        Check::Or(children) => {
            let (key, only_contributing) = match sense {
                Sense::Normal => ("clausesNotSatisfied", false),
                Sense::Inverted => ("clausesSatisfied", true),
            };
            clauses("$or", key, children, doc, sense, only_contributing)
        }
        Check::Nor(children) => {
            let (key, only_contributing) = match sense {
                Sense::Normal => ("clausesSatisfied", true),
                Sense::Inverted => ("clausesNotSatisfied", false),
            };
            clauses("$nor", key, children, doc, sense.flip(), only_contributing)
        }
        Check::Not(child) => {
            let mut out = doc! {"operatorName": "$not"};
            if let Some(details) = explain(child, doc, sense.flip()) {
                out.insert("details", details);
            }
            out
        }
        Check::Negated(child) => return explain(child, doc, sense.flip()),
        Check::Leaf(leaf) => explain_leaf(leaf, doc, sense),
        Check::Expr { expr, spec } => explain_expr(expr, spec, doc, sense),
        Check::Always { operator, spec, .. } => always(operator, spec.clone(), sense),
        Check::Schema(schema) => explain_schema(schema, doc, sense),
    })
}

/// A logical operator's explanation: `{operatorName, <key>: [{index,
/// details}]}` over the clauses that contribute.
fn clauses(
    operator: &str,
    key: &str,
    children: &[Check],
    doc: &Document,
    child_sense: Sense,
    only_contributing: bool,
) -> Document {
    let mut entries = Vec::new();
    for (index, child) in children.iter().enumerate() {
        if only_contributing && !contributes(child, doc, child_sense) {
            continue;
        }
        let Some(details) = explain(child, doc, child_sense) else {
            continue;
        };
        let mut entry = doc! {"index": index_number(index)};
        if let Check::Schema(schema) = child {
            entry.extend(schema.annotations.clone());
        }
        entry.insert("details", details);
        entries.push(Bson::Document(entry));
    }
    doc! {"operatorName": operator, key: entries}
}

/// Indexes are small integers (MongoDB's `appendNumber`).
fn index_number(index: usize) -> Bson {
    match i32::try_from(index) {
        Ok(i) => Bson::Int32(i),
        Err(_) => Bson::Int64(i64::try_from(index).unwrap_or(i64::MAX)),
    }
}

fn always(operator: &str, spec: Document, sense: Sense) -> Document {
    doc! {
        "operatorName": operator,
        "specifiedAs": spec,
        "reason": sense.pick(
            "expression always evaluates to false",
            "expression always evaluates to true",
        ),
    }
}

fn explain_expr(expr: &Expr, spec: &Document, doc: &Document, sense: Sense) -> Document {
    let mut out = doc! {"operatorName": "$expr", "specifiedAs": spec.clone()};
    match expr.evaluate_value(doc) {
        Ok(result) => {
            out.insert(
                "reason",
                sense.pick("expression did not match", "expression did match"),
            );
            if let Some(result) = result {
                out.insert("expressionResult", result);
            }
        }
        Err(error) => {
            out.insert("reason", "failed to evaluate aggregation expression");
            out.insert(
                "details",
                doc! {
                    "code": error.code.number(),
                    "codeName": error.code.name().as_ref(),
                    "errmsg": error.message,
                },
            );
        }
    }
    out
}

fn explain_leaf(leaf: &Leaf, doc: &Document, sense: Sense) -> Document {
    let rule = leaf.rule;
    let mut out = doc! {
        "operatorName": leaf.operator.as_str(),
        "specifiedAs": leaf.spec.clone(),
    };
    if rule.shape == Shape::Exists {
        out.insert("reason", sense.pick(rule.normal, rule.inverted));
        return out;
    }
    let considered = considered_values(doc, &leaf.parts, rule.expand_leaf);
    match &considered {
        None => {
            out.insert("reason", "field was missing");
        }
        Some(c) if rule.shape == Shape::Path && !rule.expected.is_empty() => {
            let any_expected = c
                .values
                .iter()
                .any(|v| rule.expected.contains(&type_name(v)));
            if !any_expected {
                out.insert("reason", "type did not match");
                append_considered_types(&mut out, &c.values);
                append_names(&mut out, "expectedType", "expectedTypes", rule.expected);
            }
        }
        Some(_) => {}
    }
    if !out.contains_key("reason") {
        out.insert("reason", sense.pick(rule.normal, rule.inverted));
    }
    if let Some(c) = &considered {
        append_considered_values(&mut out, c);
        if rule.shape == Shape::Type {
            append_considered_types(&mut out, &c.values);
        }
    }
    out
}

/// The values a path reaches, as a leaf reports them.
struct Considered {
    values: Vec<Bson>,
    truncated: bool,
}

/// The values `parts` reaches in `doc`, arrays on the way traversed and a
/// trailing array offering its elements (`expand_leaf`) or itself; `None`
/// when the path does not exist.
fn considered_values(doc: &Document, parts: &[Part], expand_leaf: bool) -> Option<Considered> {
    let mut values = Vec::new();
    if let Some((head, rest)) = parts.split_first() {
        if let Some(value) = field(doc, &head.name) {
            collect_values(value, rest, expand_leaf, &mut values);
        }
    }
    if values.is_empty() && !path_exists(doc, parts) {
        return None;
    }
    let truncated = values.len() > MAX_CONSIDERED_VALUES;
    values.truncate(MAX_CONSIDERED_VALUES);
    Some(Considered { values, truncated })
}

/// Collects up to one value more than reported, to know about truncation.
fn collect_values(value: &Bson, rest: &[Part], expand_leaf: bool, out: &mut Vec<Bson>) {
    if out.len() > MAX_CONSIDERED_VALUES {
        return;
    }
    let Some((head, tail)) = rest.split_first() else {
        match value {
            Bson::Array(items) if expand_leaf => out.extend(
                items
                    .iter()
                    .take(MAX_CONSIDERED_VALUES + 1 - out.len())
                    .cloned(),
            ),
            other => out.push(other.clone()),
        }
        return;
    };
    match value {
        Bson::Document(d) => {
            if let Some(next) = field(d, &head.name) {
                collect_values(next, tail, expand_leaf, out);
            }
        }
        Bson::Array(items) => {
            for item in items {
                if let Bson::Document(d) = item {
                    if let Some(next) = field(d, &head.name) {
                        collect_values(next, tail, expand_leaf, out);
                    }
                }
            }
            if let Some(item) = head.index.and_then(|i| items.get(i)) {
                collect_values(item, tail, expand_leaf, out);
            }
        }
        _ => {}
    }
}

fn path_exists(doc: &Document, parts: &[Part]) -> bool {
    walk(Container::Doc(doc), parts, true, &mut |value, _| {
        value.is_some()
    })
}

fn append_considered_values(out: &mut Document, considered: &Considered) {
    match considered.values.as_slice() {
        [one] => {
            out.insert("consideredValue", one.clone());
        }
        values => {
            out.insert("consideredValues", values.to_vec());
        }
    }
    if considered.truncated {
        out.insert("consideredValuesTruncated", true);
    }
}

/// `consideredType` (one distinct type) or `consideredTypes` (sorted).
fn append_considered_types(out: &mut Document, values: &[Bson]) {
    let types: BTreeSet<&str> = values.iter().map(type_name).collect();
    let types: Vec<&str> = types.into_iter().collect();
    if !types.is_empty() {
        append_names(out, "consideredType", "consideredTypes", &types);
    }
}

fn append_names(out: &mut Document, one: &str, many: &str, names: &[&str]) {
    match names {
        [name] => {
            out.insert(one, *name);
        }
        names => {
            out.insert(many, names.to_vec());
        }
    }
}

// ---------------------------------------------------------------------------
// Explaining `$jsonSchema`.

fn explain_schema(schema: &Schema, doc: &Document, sense: Sense) -> Document {
    if let Some(written) = &schema.never {
        return always("$jsonSchema", doc! {"$jsonSchema": written.clone()}, sense);
    }
    if sense == Sense::Inverted {
        return doc! {"operatorName": "$jsonSchema", "reason": "schema matched"};
    }
    let mut out = doc! {"operatorName": "$jsonSchema"};
    out.extend(schema.annotations.clone());
    out.insert(
        "schemaRulesNotSatisfied",
        rule_errors(schema, Subject::Document(doc)),
    );
    out
}

/// What a schema below `$jsonSchema` reports: the errors of its rules, or
/// (a top-level schema whose type excludes objects) one object.
fn subschema_details(schema: &Schema, subject: Subject<'_>) -> Bson {
    match &schema.never {
        Some(written) => Bson::Document(always(
            "$jsonSchema",
            doc! {"$jsonSchema": written.clone()},
            Sense::Normal,
        )),
        None => Bson::Array(rule_errors(schema, subject)),
    }
}

/// One entry per failed keyword, in MongoDB's order, then the type.
fn rule_errors(schema: &Schema, subject: Subject<'_>) -> Vec<Bson> {
    let mut errors = Vec::new();
    for keyword in &schema.keywords {
        if !keyword_holds(keyword, subject) {
            keyword_errors(keyword, subject, &mut errors);
        }
    }
    if let (Some(stated), Subject::Value(Some(value))) = (&schema.stated_type, subject) {
        if !stated.types.contains(value) {
            errors.push(Bson::Document(doc! {
                "operatorName": stated.keyword,
                "specifiedAs": stated.spec.clone(),
                "reason": "type did not match",
                "consideredValue": value.clone(),
                "consideredType": type_name(value),
            }));
        }
    }
    errors
}

/// `{operatorName, specifiedAs, reason, consideredValue}`.
fn value_error(operator: &str, spec: &Document, reason: &str, value: &Bson) -> Document {
    doc! {
        "operatorName": operator,
        "specifiedAs": spec.clone(),
        "reason": reason,
        "consideredValue": value.clone(),
    }
}

/// The errors of a keyword that failed on `subject`.
fn keyword_errors(keyword: &Keyword, subject: Subject<'_>, out: &mut Vec<Bson>) {
    let value = match subject {
        Subject::Value(v) => v,
        Subject::Document(_) => None,
    };
    let object = subject.object();
    let entry = match (keyword, value, object) {
        (Keyword::Pattern { spec, .. }, Some(v), _) => Some(value_error(
            "pattern",
            spec,
            "regular expression did not match",
            v,
        )),
        (Keyword::MaxLength { spec, .. }, Some(v), _) => Some(length_error("maxLength", spec, v)),
        (Keyword::MinLength { spec, .. }, Some(v), _) => Some(length_error("minLength", spec, v)),
        (Keyword::MultipleOf { spec, .. }, Some(v), _) => Some(value_error(
            "multipleOf",
            spec,
            "considered value is not a multiple of the specified value",
            v,
        )),
        (Keyword::Maximum { spec, .. }, Some(v), _) => {
            Some(value_error("maximum", spec, "comparison failed", v))
        }
        (Keyword::Minimum { spec, .. }, Some(v), _) => {
            Some(value_error("minimum", spec, "comparison failed", v))
        }
        (Keyword::MinItems { spec, .. }, Some(v), _) => {
            Some(items_count_error("minItems", spec, v))
        }
        (Keyword::MaxItems { spec, .. }, Some(v), _) => {
            Some(items_count_error("maxItems", spec, v))
        }
        (Keyword::UniqueItems { spec }, Some(v @ Bson::Array(items)), _) => {
            let mut error = value_error("uniqueItems", spec, "found a duplicate item", v);
            if let Some(index) = first_duplicate(items) {
                if let Some(duplicate) = items.get(index) {
                    error.insert("duplicatedValue", duplicate.clone());
                }
            }
            Some(error)
        }
        (Keyword::Items { schema }, Some(Bson::Array(items)), _) => items
            .iter()
            .position(|item| !schema.matches_value(Some(item)))
            .and_then(|index| {
                let item = items.get(index)?;
                Some(item_error(
                    "items",
                    schema,
                    "At least one item did not match the sub-schema",
                    index_number(index),
                    item,
                ))
            }),
        (Keyword::ItemsTuple { schemas }, Some(Bson::Array(items)), _) => {
            Some(items_tuple_error(schemas, items))
        }
        (Keyword::AdditionalItems { start, rule, spec }, Some(Bson::Array(items)), _) => {
            additional_items_error(*start, rule, spec, items)
        }
        (Keyword::Properties { properties }, _, Some(object)) => {
            properties_error(properties, object)
        }
        (
            Keyword::AllowedProperties {
                names,
                patterns,
                additional,
            },
            _,
            Some(object),
        ) => {
            allowed_properties_errors(names, patterns, additional, object, out);
            None
        }
        (Keyword::Required { names, spec }, _, Some(object)) => Some(doc! {
            "operatorName": "required",
            "specifiedAs": spec.clone(),
            "missingProperties": missing(names, object),
        }),
        (Keyword::MinProperties { spec, .. }, _, Some(object)) => {
            Some(properties_count_error("minProperties", spec, object))
        }
        (Keyword::MaxProperties { spec, .. }, _, Some(object)) => {
            Some(properties_count_error("maxProperties", spec, object))
        }
        (
            Keyword::Dependencies {
                dependencies,
                annotations,
            },
            _,
            Some(object),
        ) => {
            let failing: Vec<Bson> = dependencies
                .iter()
                .filter(|d| !dependency_holds(d, object, subject))
                .map(|d| {
                    let mut entry = doc! {"conditionalProperty": d.property.as_str()};
                    match &d.requires {
                        Requires::Schema(schema) => {
                            entry.insert("details", subschema_details(schema, subject));
                        }
                        Requires::Properties(names) => {
                            let names: Vec<&str> = names
                                .iter()
                                .filter(|n| field(object, n).is_none())
                                .map(String::as_str)
                                .collect();
                            entry.insert("missingProperties", names);
                        }
                    }
                    Bson::Document(entry)
                })
                .collect();
            let mut error = doc! {"operatorName": "dependencies"};
            error.extend(annotations.clone());
            error.insert("failingDependencies", failing);
            Some(error)
        }
        (Keyword::AllOf(schemas), _, _) => Some(schemas_error("allOf", schemas, subject, |s| {
            !s.matches(subject)
        })),
        (Keyword::AnyOf(schemas), _, _) => Some(schemas_error("anyOf", schemas, subject, |_| true)),
        (Keyword::OneOf(schemas), _, _) => Some(one_of_error(schemas, subject)),
        (Keyword::Not(_), _, _) => Some(doc! {
            "operatorName": "not",
            "reason": "child expression matched",
        }),
        (Keyword::Enum { values, spec }, _, _) => enum_error(values, spec, subject),
        _ => None,
    };
    if let Some(entry) = entry {
        out.push(Bson::Document(entry));
    }
}

fn length_error(operator: &str, spec: &Document, value: &Bson) -> Document {
    value_error(
        operator,
        spec,
        "specified string length was not satisfied",
        value,
    )
}

fn items_count_error(operator: &str, spec: &Document, value: &Bson) -> Document {
    let mut error = value_error(
        operator,
        spec,
        "array did not match specified length",
        value,
    );
    if let Bson::Array(items) = value {
        error.insert("numberOfItems", count_number(items.len()));
    }
    error
}

fn properties_count_error(operator: &str, spec: &Document, object: &Document) -> Document {
    doc! {
        "operatorName": operator,
        "specifiedAs": spec.clone(),
        "reason": "specified number of properties was not satisfied",
        "numberOfProperties": count_number(object.len()),
    }
}

/// A count MongoDB reports as an int.
fn count_number(n: usize) -> Bson {
    index_number(n)
}

/// `items: {schema}` and `additionalItems: {schema}`: the first element
/// that fails, and why.
fn item_error(operator: &str, schema: &Schema, reason: &str, index: Bson, item: &Bson) -> Document {
    let mut error = doc! {"operatorName": operator};
    error.extend(schema.annotations.clone());
    error.insert("reason", reason);
    error.insert("itemIndex", index);
    error.insert(
        "details",
        subschema_details(schema, Subject::Value(Some(item))),
    );
    error
}

/// `items: [schemas]`: every position whose element fails its schema.
fn items_tuple_error(schemas: &[Schema], items: &[Bson]) -> Document {
    let failing: Vec<Bson> = schemas
        .iter()
        .zip(items)
        .enumerate()
        .filter(|(_, (schema, item))| !schema.matches_value(Some(item)))
        .map(|(index, (schema, item))| {
            Bson::Document(doc! {
                "itemIndex": i64::try_from(index).unwrap_or(i64::MAX),
                "details": subschema_details(schema, Subject::Value(Some(item))),
            })
        })
        .collect();
    doc! {"operatorName": "items", "details": failing}
}

fn additional_items_error(
    start: usize,
    rule: &Additional,
    spec: &Document,
    items: &[Bson],
) -> Option<Document> {
    let rest = items.get(start..).unwrap_or(&[]);
    match rule {
        Additional::Allowed => None,
        Additional::Forbidden => Some(doc! {
            "operatorName": "additionalItems",
            "specifiedAs": spec.clone(),
            "reason": "found additional items",
            "additionalItems": rest.to_vec(),
        }),
        Additional::Schema(schema) => {
            let offset = rest
                .iter()
                .position(|item| !schema.matches_value(Some(item)))?;
            let item = rest.get(offset)?;
            Some(item_error(
                "additionalItems",
                schema,
                "At least one additional item did not match the sub-schema",
                index_number(start + offset),
                item,
            ))
        }
    }
}

/// `properties`: each property whose schema fails and says why; nothing
/// when none says anything (a missing required property is `required`'s).
fn properties_error(properties: &[schema::Property], object: &Document) -> Option<Document> {
    let mut entries = Vec::new();
    for property in properties {
        let value = field(object, &property.name);
        if value.is_none() && !property.required {
            continue;
        }
        let subject = Subject::Value(value);
        if property.schema.matches(subject) {
            continue;
        }
        let errors = rule_errors(&property.schema, subject);
        if errors.is_empty() {
            continue;
        }
        let mut entry = doc! {"propertyName": property.name.as_str()};
        entry.extend(property.schema.annotations.clone());
        entry.insert("details", errors);
        entries.push(Bson::Document(entry));
    }
    (!entries.is_empty()).then(|| {
        doc! {"operatorName": "properties", "propertiesNotSatisfied": entries}
    })
}

/// `additionalProperties` and `patternProperties`, which fail together:
/// an entry for each that has something to say.
fn allowed_properties_errors(
    names: &[String],
    patterns: &[schema::PatternProperty],
    additional: &Additional,
    object: &Document,
    out: &mut Vec<Bson>,
) {
    let additional_names: Vec<&str> = object
        .keys()
        .filter(|k| !names.contains(k) && !patterns.iter().any(|p| p.matches_name(k)))
        .map(String::as_str)
        .collect();
    match additional {
        Additional::Allowed => {}
        Additional::Forbidden => {
            if !additional_names.is_empty() {
                out.push(Bson::Document(doc! {
                    "operatorName": "additionalProperties",
                    "specifiedAs": {"additionalProperties": false},
                    "additionalProperties": additional_names,
                }));
            }
        }
        Additional::Schema(schema) => {
            let failing = additional_names.iter().find_map(|name| {
                let value = field(object, name)?;
                (!additional_holds(additional, std::iter::once(value))).then_some((name, value))
            });
            if let Some((name, value)) = failing {
                let mut error = doc! {"operatorName": "additionalProperties"};
                error.extend(schema.annotations.clone());
                error.insert(
                    "reason",
                    "at least one additional property did not match the subschema",
                );
                error.insert("failingProperty", *name);
                error.insert(
                    "details",
                    subschema_details(schema, Subject::Value(Some(value))),
                );
                out.push(Bson::Document(error));
            }
        }
    }
    let mut pattern_errors = Vec::new();
    for pattern in patterns {
        let failing = object.iter().find(|(name, value)| {
            pattern.matches_name(name) && !pattern.schema.matches_value(Some(value))
        });
        if let Some((name, value)) = failing {
            let mut entry = doc! {"propertyName": name.as_str()};
            entry.extend(pattern.schema.annotations.clone());
            entry.insert("regexMatched", pattern.pattern.as_str());
            entry.insert(
                "details",
                subschema_details(&pattern.schema, Subject::Value(Some(value))),
            );
            pattern_errors.push(Bson::Document(entry));
        }
    }
    if !pattern_errors.is_empty() {
        out.push(Bson::Document(doc! {
            "operatorName": "patternProperties",
            "details": pattern_errors,
        }));
    }
}

/// The names missing from `object`, in the order given.
fn missing<'a>(names: &'a [String], object: &Document) -> Vec<&'a str> {
    names
        .iter()
        .filter(|n| field(object, n).is_none())
        .map(String::as_str)
        .collect()
}

/// `allOf`/`anyOf`/`oneOf`: `{index, details}` for the subschemas `pick`
/// selects.
fn schemas_error(
    operator: &str,
    schemas: &[Schema],
    subject: Subject<'_>,
    pick: impl Fn(&Schema) -> bool,
) -> Document {
    let entries: Vec<Bson> = schemas
        .iter()
        .enumerate()
        .filter(|(_, s)| pick(s))
        .map(|(index, s)| {
            let mut entry = doc! {"index": index_number(index)};
            entry.extend(s.annotations.clone());
            entry.insert("details", subschema_details(s, subject));
            Bson::Document(entry)
        })
        .collect();
    doc! {"operatorName": operator, "schemasNotSatisfied": entries}
}

/// `oneOf` fails either because several subschemas matched (reported by
/// index) or because none did (each explained).
fn one_of_error(schemas: &[Schema], subject: Subject<'_>) -> Document {
    let matching: Vec<Bson> = schemas
        .iter()
        .enumerate()
        .filter(|(_, s)| s.matches(subject))
        .map(|(index, _)| index_number(index))
        .collect();
    if matching.is_empty() {
        return schemas_error("oneOf", schemas, subject, |_| true);
    }
    doc! {
        "operatorName": "oneOf",
        "reason": "more than one subschema matched",
        "matchingSchemaIndexes": matching,
    }
}

fn enum_error(values: &[Bson], spec: &Document, subject: Subject<'_>) -> Option<Document> {
    let considered = match subject {
        Subject::Document(doc) => {
            if values.is_empty() {
                return Some(always("enum", spec.clone(), Sense::Normal));
            }
            Bson::Document(doc.clone())
        }
        Subject::Value(value) => value?.clone(),
    };
    Some(value_error(
        "enum",
        spec,
        "value was not found in enum",
        &considered,
    ))
}

#[cfg(test)]
mod tests {
    use bson::{doc, Binary, Bson, Document, Regex};

    use crate::query::filter::Filter;

    /// The details for a document the filter rejects.
    fn details(filter: Document, doc: Document) -> Document {
        let parsed = Filter::parse(&filter).unwrap_or_else(|e| panic!("{filter}: {e}"));
        assert!(!parsed.matches(&doc), "{filter} matches {doc}");
        super::failure_details(&filter, &doc)
    }

    fn re(pattern: &str) -> Bson {
        Bson::RegularExpression(Regex {
            pattern: pattern.try_into().unwrap(),
            options: "".try_into().unwrap(),
        })
    }

    /// `{operatorName, specifiedAs: <filter>, reason, consideredValue}`.
    fn leaf(op: &str, filter: &Document, reason: &str, value: impl Into<Bson>) -> Document {
        doc! {"operatorName": op, "specifiedAs": filter.clone(), "reason": reason,
        "consideredValue": value.into()}
    }

    fn leaf_values(op: &str, filter: &Document, reason: &str, values: Vec<Bson>) -> Document {
        doc! {"operatorName": op, "specifiedAs": filter.clone(), "reason": reason,
        "consideredValues": values}
    }

    fn missing(op: &str, filter: &Document) -> Document {
        doc! {"operatorName": op, "specifiedAs": filter.clone(), "reason": "field was missing"}
    }

    #[test]
    fn comparisons() {
        for (op, arg, value) in [
            ("$eq", 2, 1),
            ("$lt", 0, 1),
            ("$lte", 0, 1),
            ("$gt", 3, 0),
            ("$gte", 3, 0),
        ] {
            let f = doc! {"a": {op: arg}};
            assert_eq!(
                details(f.clone(), doc! {"a": value}),
                leaf(op, &f, "comparison failed", value)
            );
            assert_eq!(details(f.clone(), doc! {"b": 1}), missing(op, &f));
        }
        let f = doc! {"a": 2};
        assert_eq!(
            details(f.clone(), doc! {"a": 1}),
            leaf("$eq", &f, "comparison failed", 1)
        );
    }

    #[test]
    fn values_reached_through_arrays() {
        let f = doc! {"a": {"$eq": 2}};
        assert_eq!(
            details(f.clone(), doc! {"a": [3, 4, 5]}),
            leaf_values(
                "$eq",
                &f,
                "comparison failed",
                vec![3.into(), 4.into(), 5.into()]
            )
        );
        let f = doc! {"a.b": {"$eq": 2}};
        assert_eq!(
            details(f.clone(), doc! {"a": [{"b": 3}]}),
            leaf("$eq", &f, "comparison failed", 3)
        );
        let f = doc! {"a.b": {"$eq": 0}};
        assert_eq!(
            details(f.clone(), doc! {"a": [{"b": [1, 2]}, {"b": [3, 4]}]}),
            leaf_values(
                "$eq",
                &f,
                "comparison failed",
                vec![1.into(), 2.into(), 3.into(), 4.into()]
            )
        );
        let f = doc! {"a": {"$eq": [1, 2]}};
        assert_eq!(
            details(f.clone(), doc! {"a": []}),
            leaf_values("$eq", &f, "comparison failed", vec![])
        );
        let f = doc! {"a": {"$gte": 3}};
        assert_eq!(
            details(f.clone(), doc! {"a": []}),
            leaf_values("$gte", &f, "comparison failed", vec![])
        );
    }

    #[test]
    fn considered_values_are_truncated_at_ten() {
        let f = doc! {"a": {"$lt": 0}};
        let values: Vec<Bson> = (0..1000).map(Bson::Int32).collect();
        let mut expected = leaf_values("$lt", &f, "comparison failed", values[..10].to_vec());
        expected.insert("consideredValuesTruncated", true);
        assert_eq!(details(f.clone(), doc! {"a": values}), expected);
        let ten: Vec<Bson> = (0..10).map(Bson::Int32).collect();
        assert!(!details(f, doc! {"a": ten}).contains_key("consideredValuesTruncated"));
    }

    #[test]
    fn negations_name_their_operator() {
        let f = doc! {"a": {"$ne": 2}};
        assert_eq!(
            details(f.clone(), doc! {"a": 2}),
            leaf("$ne", &f, "comparison succeeded", 2)
        );
        assert_eq!(
            details(f.clone(), doc! {"a": [1, 2, 3]}),
            leaf_values(
                "$ne",
                &f,
                "comparison succeeded",
                vec![1.into(), 2.into(), 3.into()]
            )
        );
        let f = doc! {"a": {"$nin": [1, 2, 3]}};
        assert_eq!(
            details(f.clone(), doc! {"a": 3}),
            leaf("$nin", &f, "matching value found in array", 3)
        );
        let f = doc! {"a.b": {"$nin": [1, [2, 3, 4]]}};
        assert_eq!(
            details(f.clone(), doc! {"a": [{"b": [1, 2]}, {"b": [3, 4]}]}),
            leaf_values(
                "$nin",
                &f,
                "matching value found in array",
                vec![1.into(), 2.into(), 3.into(), 4.into()]
            )
        );
        let f = doc! {"a": {"$nin": [re("^v"), re("^b"), re("^c")]}};
        assert_eq!(
            details(f.clone(), doc! {"a": "berry"}),
            leaf("$nin", &f, "matching value found in array", "berry")
        );
        let f = doc! {"a": {"$exists": false}};
        assert_eq!(
            details(f.clone(), doc! {"a": 1}),
            doc! {"operatorName": "$exists", "specifiedAs": f, "reason": "path does exist"}
        );
    }

    #[test]
    fn in_and_exists() {
        let f = doc! {"a": {"$in": [1, 2, 3]}};
        assert_eq!(
            details(f.clone(), doc! {"a": 4}),
            leaf("$in", &f, "no matching value found in array", 4)
        );
        assert_eq!(
            details(f, doc! {"b": 1}),
            missing("$in", &doc! {"a": {"$in": [1, 2, 3]}})
        );
        let f = doc! {"a.b": {"$in": [5, 6, 7, [2, 3, 4]]}};
        assert_eq!(
            details(f.clone(), doc! {"a": [{"b": [1, 2]}, {"b": [3, 4]}]}),
            leaf_values(
                "$in",
                &f,
                "no matching value found in array",
                vec![1.into(), 2.into(), 3.into(), 4.into()]
            )
        );
        let f = doc! {"a": {"$in": [re("^v"), re("^b"), re("^c")]}};
        assert_eq!(
            details(f.clone(), doc! {"a": "Validation"}),
            leaf("$in", &f, "no matching value found in array", "Validation")
        );
        let f = doc! {"a": {"$exists": true}};
        assert_eq!(
            details(f.clone(), doc! {"b": 1}),
            doc! {"operatorName": "$exists", "specifiedAs": f, "reason": "path does not exist"}
        );
    }

    #[test]
    fn logical_operators() {
        let failing = doc! {"a": {"$lt": 10}};
        let f = doc! {"$and": [{"b": {"$gt": 0}}, failing.clone()]};
        assert_eq!(
            details(f, doc! {"a": 11, "b": 2}),
            doc! {"operatorName": "$and", "clausesNotSatisfied": [
            {"index": 1, "details": leaf("$lt", &failing, "comparison failed", 11)}]}
        );
        // Several conditions on one path are an implicit $and.
        let f = doc! {"a": {"$gt": 0, "$lt": 10}};
        assert_eq!(
            details(f, doc! {"a": 11}),
            doc! {"operatorName": "$and", "clausesNotSatisfied": [
            {"index": 1, "details": leaf("$lt", &failing, "comparison failed", 11)}]}
        );
        let f = doc! {"$and": [{"$and": [{"a": 1}]}, {"$and": [{"b": 1}]}]};
        assert_eq!(
            details(f, doc! {"a": 1, "b": 2}),
            doc! {"operatorName": "$and", "clausesNotSatisfied": [{"index": 1, "details": {
            "operatorName": "$and", "clausesNotSatisfied": [{"index": 0, "details":
                leaf("$eq", &doc! {"b": 1}, "comparison failed", 2)}]}}]}
        );
        let f = doc! {"$or": [failing.clone()]};
        assert_eq!(
            details(f, doc! {"a": 11}),
            doc! {"operatorName": "$or", "clausesNotSatisfied": [
            {"index": 0, "details": leaf("$lt", &failing, "comparison failed", 11)}]}
        );
        let first = doc! {"a": {"$gt": 10}};
        let second = doc! {"b": {"$lt": 10}};
        let f = doc! {"$nor": [first, second.clone()]};
        assert_eq!(
            details(f, doc! {"a": 9, "b": 9}),
            doc! {"operatorName": "$nor", "clausesSatisfied": [
            {"index": 1, "details": leaf("$lt", &second, "comparison succeeded", 9)}]}
        );
    }

    #[test]
    fn not() {
        let f = doc! {"a": {"$not": {"$lt": 10}}};
        assert_eq!(
            details(f, doc! {"a": 9}),
            doc! {"operatorName": "$not", "details":
            leaf("$lt", &doc! {"a": {"$lt": 10}}, "comparison succeeded", 9)}
        );
        let f = doc! {"a": {"$not": {"$lt": 20, "$gt": 5}}};
        assert_eq!(
            details(f, doc! {"a": 10}),
            doc! {"operatorName": "$not", "details": {
            "operatorName": "$and", "clausesSatisfied": [
                {"index": 0, "details":
                    leaf("$lt", &doc! {"a": {"$lt": 20}}, "comparison succeeded", 10)},
                {"index": 1, "details":
                    leaf("$gt", &doc! {"a": {"$gt": 5}}, "comparison succeeded", 10)}]}}
        );
        let f = doc! {"a": {"$not": {"$not": {"$lt": 10}}}};
        assert_eq!(
            details(f, doc! {"a": 11}),
            doc! {"operatorName": "$not", "details": {"operatorName": "$not", "details":
            leaf("$lt", &doc! {"a": {"$lt": 10}}, "comparison failed", 11)}}
        );
        let f = doc! {"a": {"$not": re("^S")}};
        assert_eq!(
            details(f, doc! {"a": "S"}),
            doc! {"operatorName": "$not", "details":
            leaf("$regex", &doc! {"a": re("^S")}, "regular expression did match", "S")}
        );
    }

    #[test]
    fn nested_logical_operators() {
        let f = doc! {"$and": [
        {"$or": [{"price": {"$gt": 50}}, {"price": {"$lt": 20}}]},
        {"qty": {"$gt": 0}},
        {"qty": {"$lt": 10}}]};
        assert_eq!(
            details(f, doc! {"price": 30, "qty": 30}),
            doc! {"operatorName": "$and", "clausesNotSatisfied": [
            {"index": 0, "details": {"operatorName": "$or", "clausesNotSatisfied": [
                {"index": 0, "details": leaf("$gt", &doc! {"price": {"$gt": 50}},
                    "comparison failed", 30)},
                {"index": 1, "details": leaf("$lt", &doc! {"price": {"$lt": 20}},
                    "comparison failed", 30)}]}},
            {"index": 2, "details": leaf("$lt", &doc! {"qty": {"$lt": 10}},
                "comparison failed", 30)}]}
        );
        let f = doc! {"$and": [
        {"$or": [{"price": {"$lt": 20}}]},
        {"$nor": [{"qty": {"$gt": 30}}, {"qty": {"$not": {"$lt": 20}}}]}]};
        assert_eq!(
            details(f, doc! {"price": 10, "qty": 25}),
            doc! {"operatorName": "$and", "clausesNotSatisfied": [
            {"index": 1, "details": {"operatorName": "$nor", "clausesSatisfied": [
                {"index": 1, "details": {"operatorName": "$not", "details":
                    leaf("$lt", &doc! {"qty": {"$lt": 20}}, "comparison failed", 25)}}]}}]}
        );
    }

    #[test]
    fn type_operator() {
        let f = doc! {"a": {"$type": "int"}};
        let mut expected = leaf("$type", &f, "type did not match", "one");
        expected.insert("consideredType", "string");
        assert_eq!(details(f, doc! {"a": "one"}), expected);
        let f = doc! {"a": {"$not": {"$type": "string"}}};
        let mut inner = leaf(
            "$type",
            &doc! {"a": {"$type": "string"}},
            "type did match",
            "words",
        );
        inner.insert("consideredType", "string");
        assert_eq!(
            details(f, doc! {"a": "words"}),
            doc! {"operatorName": "$not", "details": inner}
        );
        let f = doc! {"a": {"$type": "double"}};
        assert_eq!(details(f.clone(), doc! {"b": 1}), missing("$type", &f));
        let mut expected = leaf_values(
            "$type",
            &f,
            "type did not match",
            vec!["x".into(), "y".into(), "z".into()],
        );
        expected.insert("consideredType", "string");
        assert_eq!(details(f.clone(), doc! {"a": ["x", "y", "z"]}), expected);
        assert_eq!(
            details(f.clone(), doc! {"a": []}),
            leaf_values("$type", &f, "type did not match", vec![])
        );
        let mut expected = leaf_values(
            "$type",
            &f,
            "type did not match",
            vec![1.into(), "x".into()],
        );
        expected.insert("consideredTypes", vec!["int", "string"]);
        assert_eq!(details(f, doc! {"a": [1, "x"]}), expected);
    }

    #[test]
    fn expr() {
        let f = doc! {"$expr": {"$eq": ["$a", "$b"]}};
        let expected = doc! {"operatorName": "$expr", "specifiedAs": f.clone(),
        "reason": "expression did not match", "expressionResult": false};
        assert_eq!(details(f.clone(), doc! {"a": 1, "b": 2}), expected);
        assert_eq!(details(f, doc! {"a": [0, 1, 2], "b": [3, 4, 5]}), expected);
        let f = doc! {"$expr": 0};
        assert_eq!(
            details(f.clone(), doc! {"a": 1}),
            doc! {"operatorName": "$expr", "specifiedAs": f,
            "reason": "expression did not match", "expressionResult": 0}
        );
        let clause = doc! {"$expr": {"$eq": ["$a", "$b"]}};
        let f = doc! {"$nor": [clause.clone()]};
        assert_eq!(
            details(f, doc! {"a": 1, "b": 1}),
            doc! {"operatorName": "$nor", "clausesSatisfied": [{"index": 0, "details": {
            "operatorName": "$expr", "specifiedAs": clause,
            "reason": "expression did match", "expressionResult": true}}]}
        );
        let clause = doc! {"$expr": {"$literal": {"b": 1}}};
        let f = doc! {"$nor": [clause.clone()]};
        assert_eq!(
            details(f, doc! {"a": 1}),
            doc! {"operatorName": "$nor", "clausesSatisfied": [{"index": 0, "details": {
            "operatorName": "$expr", "specifiedAs": clause,
            "reason": "expression did match", "expressionResult": {"b": 1}}}]}
        );
    }

    #[test]
    fn expr_that_fails_to_evaluate() {
        let f = doc! {"$expr": {"$divide": [10, 0]}};
        let parsed = Filter::parse(&f).unwrap();
        assert!(parsed.try_matches(&doc! {}).is_err());
        let got = super::failure_details(&f, &doc! {});
        assert_eq!(got.get_str("operatorName").unwrap(), "$expr");
        assert_eq!(got.get_document("specifiedAs").unwrap(), &f);
        assert_eq!(
            got.get_str("reason").unwrap(),
            "failed to evaluate aggregation expression"
        );
        let error = got.get_document("details").unwrap();
        assert_eq!(error.get_i32("code").unwrap(), 16608);
        assert_eq!(error.get_str("codeName").unwrap(), "Location16608");
        // Under $and, every clause that fails to evaluate is reported.
        let f = doc! {"$and": [{"$expr": {"$concat": ["$a", "$b"]}},
        {"$expr": {"$divide": [10, 0]}}]};
        assert!(Filter::parse(&f).is_ok());
        let ok = super::failure_details(&f, &doc! {"a": "x", "b": "y"});
        let clauses = ok.get_array("clausesNotSatisfied").unwrap();
        assert_eq!(clauses.len(), 1);
        let failing = super::failure_details(&f, &doc! {"a": "x", "b": 1});
        let clauses = failing.get_array("clausesNotSatisfied").unwrap();
        assert_eq!(clauses.len(), 2);
    }

    #[test]
    fn modulo() {
        let f = doc! {"a": {"$mod": [2, 1]}};
        assert_eq!(
            details(f.clone(), doc! {"a": 2}),
            leaf("$mod", &f, "$mod did not evaluate to expected remainder", 2)
        );
        assert_eq!(details(f.clone(), doc! {"b": 2}), missing("$mod", &f));
        assert_eq!(
            details(f.clone(), doc! {"a": [0, 2, 4]}),
            leaf_values(
                "$mod",
                &f,
                "$mod did not evaluate to expected remainder",
                vec![0.into(), 2.into(), 4.into()]
            )
        );
        assert_eq!(
            details(f.clone(), doc! {"a": "two"}),
            doc! {"operatorName": "$mod", "specifiedAs": f.clone(), "reason": "type did not match",
            "consideredType": "string",
            "expectedTypes": ["decimal", "double", "int", "long"],
            "consideredValue": "two"}
        );
        assert_eq!(
            details(f.clone(), doc! {"a": ["zero", "two", "four"]}),
            doc! {"operatorName": "$mod", "specifiedAs": f.clone(), "reason": "type did not match",
            "consideredType": "string",
            "expectedTypes": ["decimal", "double", "int", "long"],
            "consideredValues": ["zero", "two", "four"]}
        );
        assert_eq!(
            details(f.clone(), doc! {"a": [0, "two", "four"]}),
            leaf_values(
                "$mod",
                &f,
                "$mod did not evaluate to expected remainder",
                vec![0.into(), "two".into(), "four".into()]
            )
        );
        let f = doc! {"a": {"$not": {"$mod": [2, 0]}}};
        assert_eq!(
            details(f, doc! {"a": 2}),
            doc! {"operatorName": "$not", "details": leaf("$mod",
            &doc! {"a": {"$mod": [2, 0]}}, "$mod did evaluate to expected remainder", 2)}
        );
    }

    #[test]
    fn regex() {
        let f = doc! {"a": {"$regex": re("/myRegex/"), "$options": ""}};
        assert_eq!(
            details(f.clone(), doc! {"a": "one"}),
            leaf("$regex", &f, "regular expression did not match", "one")
        );
        assert_eq!(
            details(f.clone(), doc! {"b": "myRegex"}),
            missing("$regex", &f)
        );
        assert_eq!(
            details(f.clone(), doc! {"a": 1}),
            doc! {"operatorName": "$regex", "specifiedAs": f.clone(),
            "reason": "type did not match", "consideredType": "int",
            "expectedTypes": ["regex", "string", "symbol"], "consideredValue": 1}
        );
        assert_eq!(
            details(f.clone(), doc! {"a": [0, 1, 2]}),
            doc! {"operatorName": "$regex", "specifiedAs": f.clone(),
            "reason": "type did not match", "consideredType": "int",
            "expectedTypes": ["regex", "string", "symbol"], "consideredValues": [0, 1, 2]}
        );
        assert_eq!(
            details(f.clone(), doc! {"a": ["x", 1, 2]}),
            leaf_values(
                "$regex",
                &f,
                "regular expression did not match",
                vec!["x".into(), 1.into(), 2.into()]
            )
        );
        let f = doc! {"a": re("^S")};
        assert_eq!(
            details(f.clone(), doc! {"a": "so sorry; not capitalized"}),
            leaf(
                "$regex",
                &f,
                "regular expression did not match",
                "so sorry; not capitalized"
            )
        );
        let f = doc! {"a": {"$not": {"$regex": re("myRegex"), "$options": ""}}};
        assert_eq!(
            details(f, doc! {"a": "myRegex"}),
            doc! {"operatorName": "$not", "details": leaf("$regex",
            &doc! {"a": {"$regex": re("myRegex"), "$options": ""}},
            "regular expression did match", "myRegex")}
        );
    }

    #[test]
    fn bit_tests() {
        let mask = Bson::Binary(Binary {
            subtype: bson::spec::BinarySubtype::Generic,
            bytes: vec![0x02],
        });
        for (f, value) in [
            (doc! {"a": {"$bitsAllClear": 2}}, 7),
            (doc! {"a": {"$bitsAllClear": [1]}}, 7),
            (doc! {"a": {"$bitsAllClear": mask.clone()}}, 7),
            (doc! {"a": {"$bitsAllSet": 2}}, 5),
            (doc! {"a": {"$bitsAllSet": [1]}}, 5),
            (doc! {"a": {"$bitsAnyClear": 3}}, 7),
            (doc! {"a": {"$bitsAnyClear": [1, 0]}}, 7),
            (doc! {"a": {"$bitsAnySet": 3}}, 0),
            (doc! {"a": {"$bitsAnySet": [1, 0]}}, 0),
        ] {
            let op = f.get_document("a").unwrap().keys().next().unwrap().clone();
            assert_eq!(
                details(f.clone(), doc! {"a": value}),
                leaf(&op, &f, "bitwise operator failed to match", value)
            );
        }
        let f = doc! {"a": {"$not": {"$bitsAllClear": 2}}};
        assert_eq!(
            details(f, doc! {"a": 5}),
            doc! {"operatorName": "$not", "details": leaf("$bitsAllClear",
            &doc! {"a": {"$bitsAllClear": 2}}, "bitwise operator matched successfully", 5)}
        );
        let f = doc! {"a": {"$bitsAnyClear": 3}};
        assert_eq!(
            details(f.clone(), doc! {"a": "someString"}),
            doc! {"operatorName": "$bitsAnyClear", "specifiedAs": f.clone(),
            "reason": "type did not match", "consideredType": "string",
            "expectedTypes": ["binData", "decimal", "double", "int", "long"],
            "consideredValue": "someString"}
        );
        let f = doc! {"a": {"$bitsAllClear": 2}};
        assert_eq!(
            details(f.clone(), doc! {"a": [7, 3]}),
            leaf_values(
                "$bitsAllClear",
                &f,
                "bitwise operator failed to match",
                vec![7.into(), 3.into()]
            )
        );
    }

    #[test]
    fn array_operators() {
        let f = doc! {"a": {"$size": 2}};
        assert_eq!(
            details(f.clone(), doc! {"a": [1, 2, 3]}),
            leaf(
                "$size",
                &f,
                "array length was not equal to given size",
                vec![1, 2, 3]
            )
        );
        assert_eq!(
            details(f.clone(), doc! {"a": 3}),
            doc! {"operatorName": "$size", "specifiedAs": f.clone(),
            "reason": "type did not match", "consideredType": "int",
            "expectedType": "array", "consideredValue": 3}
        );
        assert_eq!(details(f.clone(), doc! {"b": 3}), missing("$size", &f));
        assert_eq!(
            details(doc! {"a": {"$not": {"$size": 2}}}, doc! {"a": [1, 2]}),
            doc! {"operatorName": "$not", "details": leaf("$size", &f,
            "array length was equal to given size", vec![1, 2])}
        );
        let f = doc! {"a": {"$all": [1, 2, 3]}};
        assert_eq!(
            details(f.clone(), doc! {"a": [1, 2, 4]}),
            leaf(
                "$all",
                &f,
                "array did not contain all specified values",
                vec![1, 2, 4]
            )
        );
        assert_eq!(
            details(f.clone(), doc! {"b": [1, 2, 3]}),
            missing("$all", &f)
        );
        assert_eq!(
            details(
                doc! {"a": {"$not": {"$all": [1, 2, 3]}}},
                doc! {"a": [1, 2, 3]}
            ),
            doc! {"operatorName": "$not", "details": leaf("$all", &f,
            "array did contain all specified values", vec![1, 2, 3])}
        );
        let f = doc! {"a": {"$all": [re("^a"), re("^b")]}};
        assert_eq!(
            details(f.clone(), doc! {"a": ["abc", "cbc"]}),
            leaf(
                "$all",
                &f,
                "array did not contain all specified values",
                vec!["abc", "cbc"]
            )
        );
        let f = doc! {"a": {"$all": []}};
        assert_eq!(
            details(f.clone(), doc! {"a": [1, 2, 3]}),
            doc! {"operatorName": "$all", "specifiedAs": f,
            "reason": "expression always evaluates to false"}
        );
    }

    #[test]
    fn elem_match() {
        let f = doc! {"a": {"$elemMatch": {"$gt": 0, "$lt": 10}}};
        assert_eq!(
            details(f.clone(), doc! {"a": [10, 11, 12]}),
            leaf(
                "$elemMatch",
                &f,
                "array did not satisfy the child predicate",
                vec![10, 11, 12]
            )
        );
        assert_eq!(
            details(f.clone(), doc! {"b": [10]}),
            missing("$elemMatch", &f)
        );
        assert_eq!(
            details(f.clone(), doc! {"a": 5}),
            doc! {"operatorName": "$elemMatch", "specifiedAs": f.clone(),
            "reason": "type did not match", "consideredType": "int",
            "expectedType": "array", "consideredValue": 5}
        );
        assert_eq!(
            details(
                doc! {"a": {"$not": {"$elemMatch": {"$gt": 0, "$lt": 10}}}},
                doc! {"a": [3, 4, 5]}
            ),
            doc! {"operatorName": "$not", "details": leaf("$elemMatch", &f,
            "array did satisfy the child predicate", vec![3, 4, 5])}
        );
        let f = doc! {"a": {"$elemMatch": {"b": {"$gt": 0}, "c": {"$lt": 0}}}};
        let value = vec![doc! {"b": 0, "c": 0}, doc! {"b": 1, "c": 1}];
        assert_eq!(
            details(f.clone(), doc! {"a": value.clone()}),
            leaf(
                "$elemMatch",
                &f,
                "array did not satisfy the child predicate",
                value.clone()
            )
        );
        let f = doc! {"a": {"$all": [{"$elemMatch": {"b": {"$gte": 0}}},
        {"$elemMatch": {"c": {"$lt": 0}}}]}};
        assert_eq!(
            details(f.clone(), doc! {"a": value.clone()}),
            leaf(
                "$all",
                &f,
                "array did not contain all specified values",
                value
            )
        );
    }

    #[test]
    fn always_false() {
        let f = doc! {"$alwaysFalse": 1};
        assert_eq!(
            details(f.clone(), doc! {"a": 1}),
            doc! {"operatorName": "$alwaysFalse", "specifiedAs": f,
            "reason": "expression always evaluates to false"}
        );
        let f = doc! {"$nor": [{"$alwaysTrue": 1}]};
        assert_eq!(
            details(f, doc! {"a": 1}),
            doc! {"operatorName": "$nor", "clausesSatisfied": [{"index": 0, "details": {
            "operatorName": "$alwaysTrue", "specifiedAs": {"$alwaysTrue": 1},
            "reason": "expression always evaluates to true"}}]}
        );
    }

    #[test]
    fn comments_do_not_count_as_conditions() {
        let f = doc! {"a": {"$gt": 5}, "$comment": "why"};
        assert_eq!(
            details(f, doc! {"a": 3}),
            leaf("$gt", &doc! {"a": {"$gt": 5}}, "comparison failed", 3)
        );
    }

    // -----------------------------------------------------------------------
    // $jsonSchema, from MongoDB's doc_validation_error_json_schema_test.cpp.

    fn schema_details(schema: Document, doc: Document) -> Document {
        details(doc! {"$jsonSchema": schema}, doc)
    }

    /// `{operatorName: '$jsonSchema', schemaRulesNotSatisfied: rules}`.
    fn rules(rules: Vec<Document>) -> Document {
        doc! {"operatorName": "$jsonSchema", "schemaRulesNotSatisfied": rules}
    }

    /// `{operatorName: 'properties', propertiesNotSatisfied: [{propertyName, details}]}`.
    fn property(name: &str, details: Vec<Document>) -> Document {
        doc! {"operatorName": "properties", "propertiesNotSatisfied": [
        {"propertyName": name, "details": details}]}
    }

    fn keyword(op: &str, spec: Document, reason: &str, value: impl Into<Bson>) -> Document {
        doc! {"operatorName": op, "specifiedAs": spec, "reason": reason,
        "consideredValue": value.into()}
    }

    fn type_error(op: &str, spec: Document, value: impl Into<Bson>, type_name: &str) -> Document {
        let mut error = keyword(op, spec, "type did not match", value);
        error.insert("consideredType", type_name);
        error
    }

    fn required(names: Vec<&str>, missing: Vec<&str>) -> Document {
        doc! {"operatorName": "required", "specifiedAs": {"required": names},
        "missingProperties": missing}
    }

    fn schema_matched() -> Document {
        doc! {"operatorName": "$jsonSchema", "reason": "schema matched"}
    }

    fn nor_of_schema(schema: Document, doc: Document) -> Document {
        details(doc! {"$nor": [{"$jsonSchema": schema}]}, doc)
    }

    fn nor_satisfied(details: Document) -> Document {
        doc! {"operatorName": "$nor", "clausesSatisfied": [{"index": 0, "details": details}]}
    }

    const NOT_MATCHED: &str = "child expression matched";

    #[test]
    fn schema_minimum_and_maximum() {
        assert_eq!(
            schema_details(doc! {"properties": {"a": {"minimum": 1}}}, doc! {"a": 0}),
            rules(vec![property(
                "a",
                vec![keyword(
                    "minimum",
                    doc! {"minimum": 1},
                    "comparison failed",
                    0
                )]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"minimum": 1, "exclusiveMinimum": true}}},
                doc! {"a": 1}
            ),
            rules(vec![property(
                "a",
                vec![keyword(
                    "minimum",
                    doc! {"minimum": 1, "exclusiveMinimum": true},
                    "comparison failed",
                    1
                )]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"maximum": 1, "exclusiveMaximum": true}}},
                doc! {"a": 1}
            ),
            rules(vec![property(
                "a",
                vec![keyword(
                    "maximum",
                    doc! {"maximum": 1, "exclusiveMaximum": true},
                    "comparison failed",
                    1
                )]
            )])
        );
        // Keywords report in MongoDB's order: maximum before minimum.
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"properties": {"b": {"minimum": 10, "maximum": -10}}}}},
                doc! {"a": {"b": 5}}
            ),
            rules(vec![property(
                "a",
                vec![property(
                    "b",
                    vec![
                        keyword("maximum", doc! {"maximum": -10}, "comparison failed", 5),
                        keyword("minimum", doc! {"minimum": 10}, "comparison failed", 5),
                    ]
                )]
            )])
        );
    }

    #[test]
    fn schema_type_failures_hide_the_keywords_of_that_type() {
        let mut entry = doc! {"propertyName": "a", "title": "property a",
        "description": "a >= 1"};
        entry.insert(
            "details",
            vec![type_error("type", doc! {"type": "number"}, "foo", "string")],
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"type": "number", "minimum": 1,
                "title": "property a", "description": "a >= 1"}}},
                doc! {"a": "foo"}
            ),
            rules(vec![
                doc! {"operatorName": "properties", "propertiesNotSatisfied": [entry]}
            ])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"bsonType": "int", "minimum": 1}}},
                doc! {"a": 1.1}
            ),
            rules(vec![property(
                "a",
                vec![type_error(
                    "bsonType",
                    doc! {"bsonType": "int"},
                    1.1,
                    "double"
                )]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"maximum": 1, "type": "number"}}},
                doc! {"a": []}
            ),
            rules(vec![property(
                "a",
                vec![type_error(
                    "type",
                    doc! {"type": "number"},
                    Bson::Array(vec![]),
                    "array"
                )]
            )])
        );
        // A keyword for another type than the one stated is never reported.
        assert_eq!(
            schema_details(
                doc! {"type": "object", "properties": {"a": {"type": "string", "minimum": 5}}},
                doc! {"a": 4}
            ),
            rules(vec![property(
                "a",
                vec![type_error("type", doc! {"type": "string"}, 4, "int")]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"type": "string"}}},
                doc! {"a": ["Mihai", "was", "here"]}
            ),
            rules(vec![property(
                "a",
                vec![type_error(
                    "type",
                    doc! {"type": "string"},
                    vec!["Mihai", "was", "here"],
                    "array"
                )]
            )])
        );
    }

    #[test]
    fn schema_missing_required_properties_are_only_required_errors() {
        for sub in [
            doc! {"minimum": 1},
            doc! {"type": "number", "minimum": 1},
            doc! {"minLength": 1},
            doc! {"type": "string", "pattern": "^S"},
            doc! {"multipleOf": 2},
            doc! {"enum": [1, 2, 3]},
            doc! {"type": "array", "minItems": 2},
            doc! {"items": [{"type": "number"}, {"type": "string"}]},
            doc! {"type": "object", "minProperties": 10},
        ] {
            assert_eq!(
                schema_details(
                    doc! {"required": ["a"], "properties": {"a": sub.clone()}},
                    doc! {}
                ),
                rules(vec![required(vec!["a"], vec!["a"])]),
                "{sub}"
            );
        }
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"minimum": 2, "bsonType": "int"}},
                "required": ["a", "b"]},
                doc! {"a": 1, "b": 1}
            ),
            rules(vec![property(
                "a",
                vec![keyword(
                    "minimum",
                    doc! {"minimum": 2},
                    "comparison failed",
                    1
                )]
            )])
        );
        assert_eq!(
            schema_details(doc! {"required": ["a", "b", "c"]}, doc! {"c": 1, "d": 2}),
            rules(vec![required(vec!["a", "b", "c"], vec!["a", "b"])])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"minimum": 2}, "d": {"maximum": 5}},
                "required": ["a", "b", "c"]},
                doc! {"c": 1, "b": 2}
            ),
            rules(vec![required(vec!["a", "b", "c"], vec!["a"])])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"t": {"required": ["a", "b", "c"]}}},
                doc! {"t": {"c": 1, "d": 2}}
            ),
            rules(vec![property(
                "t",
                vec![required(vec!["a", "b", "c"], vec!["a", "b"])]
            )])
        );
    }

    #[test]
    fn schema_string_keywords() {
        let mut entry = doc! {"propertyName": "a", "title": "property a",
        "description": "a min length is 4"};
        entry.insert(
            "details",
            vec![keyword(
                "minLength",
                doc! {"minLength": 4},
                "specified string length was not satisfied",
                "foo",
            )],
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"type": "string", "minLength": 4,
                "title": "property a", "description": "a min length is 4"}}},
                doc! {"a": "foo"}
            ),
            rules(vec![
                doc! {"operatorName": "properties", "propertiesNotSatisfied": [entry]}
            ])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"maxLength": 4}}},
                doc! {"a": "foo, bar"}
            ),
            rules(vec![property(
                "a",
                vec![keyword(
                    "maxLength",
                    doc! {"maxLength": 4},
                    "specified string length was not satisfied",
                    "foo, bar"
                )]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"type": "string", "minLength": 4}}},
                doc! {"a": 1}
            ),
            rules(vec![property(
                "a",
                vec![type_error("type", doc! {"type": "string"}, 1, "int")]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"pattern": "^S"}}},
                doc! {"a": "slow"}
            ),
            rules(vec![property(
                "a",
                vec![keyword(
                    "pattern",
                    doc! {"pattern": "^S"},
                    "regular expression did not match",
                    "slow"
                )]
            )])
        );
    }

    #[test]
    fn schema_multiple_of() {
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"type": "number", "multipleOf": 2.1}}},
                doc! {"a": 1.1}
            ),
            rules(vec![property(
                "a",
                vec![keyword(
                    "multipleOf",
                    doc! {"multipleOf": 2.1},
                    "considered value is not a multiple of the specified value",
                    1.1
                )]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"required": ["a"], "properties": {"a": {"type": "number", "multipleOf": 2}}},
                doc! {"a": 3}
            ),
            rules(vec![property(
                "a",
                vec![keyword(
                    "multipleOf",
                    doc! {"multipleOf": 2},
                    "considered value is not a multiple of the specified value",
                    3
                )]
            )])
        );
    }

    #[test]
    fn schema_matching_where_it_should_not() {
        for schema in [
            doc! {"minimum": 1},
            doc! {"maximum": 1},
            doc! {"minLength": 1},
            doc! {"pattern": "^S"},
            doc! {"multipleOf": 1},
            doc! {"minItems": 2},
            doc! {"uniqueItems": true},
            doc! {"items": {"type": "string"}},
            doc! {"items": [{}]},
            doc! {"items": [{"type": "object"}], "additionalItems": false},
        ] {
            assert_eq!(
                nor_of_schema(schema.clone(), doc! {"a": "Slow"}),
                nor_satisfied(schema_matched()),
                "{schema}"
            );
        }
        assert_eq!(
            nor_of_schema(
                doc! {"properties": {"a": {"oneOf": [{"minimum": 1}, {"maximum": 3}]}}},
                doc! {"a": 4}
            ),
            nor_satisfied(schema_matched())
        );
    }

    #[test]
    fn schema_not() {
        let not = doc! {"operatorName": "not", "reason": NOT_MATCHED};
        for (schema, doc) in [
            (
                doc! {"not": {"properties": {"a": {"minimum": 3}}}},
                doc! {"a": 6},
            ),
            (
                doc! {"not": {"properties": {"a": {"minimum": 3}}}},
                doc! {"a": "foo"},
            ),
            (
                doc! {"not": {"properties": {"a": {"minimum": 3}}}},
                doc! {"b": 6},
            ),
            (
                doc! {"not": {"not": {"properties": {"a": {"minimum": 3}}}}},
                doc! {"a": 1},
            ),
            (doc! {"not": {}}, doc! {}),
        ] {
            assert_eq!(schema_details(schema, doc), rules(vec![not.clone()]));
        }
        assert_eq!(
            schema_details(doc! {"properties": {"a": {"not": {}}}}, doc! {"a": "foo"}),
            rules(vec![property("a", vec![not.clone()])])
        );
        let mut entry = doc! {"propertyName": "a", "title": "not title"};
        entry.insert("details", vec![not]);
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"not": {"type": "number", "title": "type title"},
                "title": "not title"}}},
                doc! {"a": 1}
            ),
            rules(vec![
                doc! {"operatorName": "properties", "propertiesNotSatisfied": [entry]}
            ])
        );
    }

    #[test]
    fn schema_all_of_and_any_of() {
        assert_eq!(
            schema_details(
                doc! {"allOf": [{"properties": {"a": {"minimum": 1}}},
                {"properties": {"b": {"minimum": 2}}}]},
                doc! {"a": 1, "b": 0}
            ),
            rules(vec![
                doc! {"operatorName": "allOf", "schemasNotSatisfied": [
                {"index": 1, "details": [property("b", vec![
                    keyword("minimum", doc! {"minimum": 2}, "comparison failed", 0)])]}]}
            ])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"anyOf": [{"type": "string"}, {"maximum": 3}]}}},
                doc! {"a": 4}
            ),
            rules(vec![property(
                "a",
                vec![doc! {"operatorName": "anyOf",
                "schemasNotSatisfied": [
                    {"index": 0, "details": [
                        type_error("type", doc! {"type": "string"}, 4, "int")]},
                    {"index": 1, "details": [
                        keyword("maximum", doc! {"maximum": 3}, "comparison failed", 4)]}]}]
            )])
        );
        let mut entry = doc! {"propertyName": "a", "description": "property a"};
        entry.insert(
            "details",
            vec![doc! {"operatorName": "anyOf", "schemasNotSatisfied": [
            {"index": 0, "description": "number?", "details": [
                type_error("bsonType", doc! {"bsonType": "number"}, doc! {}, "object")]},
            {"index": 1, "details": [
                type_error("bsonType", doc! {"bsonType": "string"}, doc! {}, "object")]}]}],
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"description": "property a", "anyOf": [
                {"bsonType": "number", "description": "number?"},
                {"bsonType": "string"}]}}},
                doc! {"a": {}}
            ),
            rules(vec![
                doc! {"operatorName": "properties", "propertiesNotSatisfied": [entry]}
            ])
        );
    }

    #[test]
    fn schema_one_of() {
        let mut entry = doc! {"propertyName": "a", "description": "oneOf description"};
        entry.insert(
            "details",
            vec![
                doc! {"operatorName": "oneOf", "reason": "more than one subschema matched",
                "matchingSchemaIndexes": [0, 1]},
            ],
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"oneOf": [{"minimum": 1}, {"maximum": 3}],
                "description": "oneOf description"}}},
                doc! {"a": 2}
            ),
            rules(vec![
                doc! {"operatorName": "properties", "propertiesNotSatisfied": [entry]}
            ])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"oneOf": [
                {"minimum": 4}, {"maximum": 1}, {"bsonType": "int"}]}}},
                doc! {"a": 2.1}
            ),
            rules(vec![property(
                "a",
                vec![doc! {"operatorName": "oneOf",
                "schemasNotSatisfied": [
                    {"index": 0, "details": [
                        keyword("minimum", doc! {"minimum": 4}, "comparison failed", 2.1)]},
                    {"index": 1, "details": [
                        keyword("maximum", doc! {"maximum": 1}, "comparison failed", 2.1)]},
                    {"index": 2, "details": [
                        type_error("bsonType", doc! {"bsonType": "int"}, 2.1, "double")]}]}]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"allOf": [{"bsonType": "int"},
                {"oneOf": [{"minimum": 1}, {"enum": [6, 7, 8]}]}]}}},
                doc! {"a": 0}
            ),
            rules(vec![property(
                "a",
                vec![doc! {"operatorName": "allOf",
                "schemasNotSatisfied": [{"index": 1, "details": [{"operatorName": "oneOf",
                    "schemasNotSatisfied": [
                        {"index": 0, "details": [
                            keyword("minimum", doc! {"minimum": 1}, "comparison failed", 0)]},
                        {"index": 1, "details": [keyword("enum", doc! {"enum": [6, 7, 8]},
                            "value was not found in enum", 0)]}]}]}]}]
            )])
        );
    }

    #[test]
    fn schema_enum() {
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"enum": [1, 2, 3]}}},
                doc! {"a": 0}
            ),
            rules(vec![property(
                "a",
                vec![keyword(
                    "enum",
                    doc! {"enum": [1, 2, 3]},
                    "value was not found in enum",
                    0
                )]
            )])
        );
        let schema = doc! {"enum": [{"a": 1, "b": 1}, {"a": 0, "b": {"c": [1, 2, 3]}}]};
        assert_eq!(
            schema_details(schema.clone(), doc! {"a": 0, "b": 1, "_id": 1}),
            rules(vec![keyword(
                "enum",
                schema,
                "value was not found in enum",
                doc! {"a": 0, "b": 1, "_id": 1}
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"type": "array", "enum": [[1]]}}},
                doc! {"a": []}
            ),
            rules(vec![property(
                "a",
                vec![keyword(
                    "enum",
                    doc! {"enum": [[1]]},
                    "value was not found in enum",
                    Bson::Array(vec![])
                )]
            )])
        );
        // At the top level, an enum without documents can match nothing.
        assert_eq!(
            schema_details(doc! {"enum": [1, 2]}, doc! {"_id": 1}),
            rules(vec![
                doc! {"operatorName": "enum", "specifiedAs": {"enum": [1, 2]},
                "reason": "expression always evaluates to false"}
            ])
        );
    }

    #[test]
    fn schema_whose_type_excludes_objects() {
        let schema = doc! {"type": "number",
        "properties": {"a": {"properties": {"b": {"minimum": 1}}}}};
        assert_eq!(
            schema_details(schema.clone(), doc! {"a": {"b": 1}}),
            doc! {"operatorName": "$jsonSchema", "specifiedAs": {"$jsonSchema": schema},
            "reason": "expression always evaluates to false"}
        );
    }

    #[test]
    fn schemas_under_query_operators() {
        let a = doc! {"properties": {"a": {"minimum": 1}}};
        let c = doc! {"properties": {"c": {"minimum": 1}}};
        assert_eq!(
            details(
                doc! {"$and": [{"$jsonSchema": a}, {"$jsonSchema":
                {"properties": {"b": {"minimum": 1}}}}, {"$jsonSchema": c}]},
                doc! {"a": 0, "b": 2, "c": -1}
            ),
            doc! {"operatorName": "$and", "clausesNotSatisfied": [
            {"index": 0, "details": rules(vec![property("a", vec![
                keyword("minimum", doc! {"minimum": 1}, "comparison failed", 0)])])},
            {"index": 2, "details": rules(vec![property("c", vec![
                keyword("minimum", doc! {"minimum": 1}, "comparison failed", -1)])])}]}
        );
        // A schema's title and description head its report.
        assert_eq!(
            schema_details(
                doc! {"title": "t", "description": "d", "required": ["x"]},
                doc! {}
            ),
            doc! {"operatorName": "$jsonSchema", "title": "t", "description": "d",
            "schemaRulesNotSatisfied": [required(vec!["x"], vec!["x"])]}
        );
    }

    #[test]
    fn schema_array_keywords() {
        assert_eq!(
            schema_details(doc! {"properties": {"a": {"minItems": 2}}}, doc! {"a": [1]}),
            rules(vec![property(
                "a",
                vec![doc! {"operatorName": "minItems",
                "specifiedAs": {"minItems": 2},
                "reason": "array did not match specified length",
                "consideredValue": [1], "numberOfItems": 1}]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"maxItems": 2}}},
                doc! {"a": [1, 2, 3]}
            ),
            rules(vec![property(
                "a",
                vec![doc! {"operatorName": "maxItems",
                "specifiedAs": {"maxItems": 2},
                "reason": "array did not match specified length",
                "consideredValue": [1, 2, 3], "numberOfItems": 3}]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"type": "array", "uniqueItems": true}}},
                doc! {"a": [1, 2, 3, 3, 4, 4]}
            ),
            rules(vec![property(
                "a",
                vec![doc! {"operatorName": "uniqueItems",
                "specifiedAs": {"uniqueItems": true}, "reason": "found a duplicate item",
                "consideredValue": [1, 2, 3, 3, 4, 4], "duplicatedValue": 3}]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"type": "array", "minItems": 2}}},
                doc! {"a": 1}
            ),
            rules(vec![property(
                "a",
                vec![type_error("type", doc! {"type": "array"}, 1, "int")]
            )])
        );
        // A passing `items` adds nothing next to a failing `minItems`.
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"items": [{"type": "number"}, {"type": "string"}],
                "minItems": 5}}},
                doc! {"a": [1]}
            ),
            rules(vec![property(
                "a",
                vec![doc! {"operatorName": "minItems",
                "specifiedAs": {"minItems": 5},
                "reason": "array did not match specified length",
                "consideredValue": [1], "numberOfItems": 1}]
            )])
        );
    }

    #[test]
    fn schema_items() {
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"items": {"type": "string",
                "description": "elements must be of string type"}}}},
                doc! {"a": [1, "A", {}]}
            ),
            rules(vec![property(
                "a",
                vec![doc! {"operatorName": "items",
                "description": "elements must be of string type",
                "reason": "At least one item did not match the sub-schema",
                "itemIndex": 0,
                "details": [type_error("type", doc! {"type": "string"}, 1, "int")]}]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"items": {"items": {"minimum": 0}}}}},
                doc! {"a": [[1], [], [2, 4], [-1]]}
            ),
            rules(vec![property(
                "a",
                vec![doc! {"operatorName": "items",
                "reason": "At least one item did not match the sub-schema", "itemIndex": 3,
                "details": [{"operatorName": "items",
                    "reason": "At least one item did not match the sub-schema",
                    "itemIndex": 0,
                    "details": [keyword("minimum", doc! {"minimum": 0},
                        "comparison failed", -1)]}]}]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"items": {"required": ["b"],
                "properties": {"b": {"minItems": 2}}}}}},
                doc! {"a": [{}]}
            ),
            rules(vec![property(
                "a",
                vec![doc! {"operatorName": "items",
                "reason": "At least one item did not match the sub-schema", "itemIndex": 0,
                "details": [required(vec!["b"], vec!["b"])]}]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"items": [{"type": "number"}, {"type": "string"}]}}},
                doc! {"a": [1, 2]}
            ),
            rules(vec![property(
                "a",
                vec![doc! {"operatorName": "items", "details": [
                {"itemIndex": 1i64, "details": [
                    type_error("type", doc! {"type": "string"}, 2, "int")]}]}]
            )])
        );
    }

    #[test]
    fn schema_additional_items() {
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"type": "array",
                "items": [{"type": "number"}, {"type": "string"}],
                "additionalItems": {"type": "object"}}}},
                doc! {"a": ["1", 2, {}, {"b": 1}, "Fail"]}
            ),
            rules(vec![property(
                "a",
                vec![
                    doc! {"operatorName": "items", "details": [
                    {"itemIndex": 0i64, "details": [
                        type_error("type", doc! {"type": "number"}, "1", "string")]},
                    {"itemIndex": 1i64, "details": [
                        type_error("type", doc! {"type": "string"}, 2, "int")]}]},
                    doc! {"operatorName": "additionalItems",
                    "reason": "At least one additional item did not match the sub-schema",
                    "itemIndex": 4, "details": [
                        type_error("type", doc! {"type": "object"}, "Fail", "string")]}
                ]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"items": [{"type": "number"}, {"type": "string"}],
                "additionalItems": false}}},
                doc! {"a": [1, "First", "Extra element"]}
            ),
            rules(vec![property(
                "a",
                vec![doc! {"operatorName": "additionalItems",
                "specifiedAs": {"additionalItems": false}, "reason": "found additional items",
                "additionalItems": ["Extra element"]}]
            )])
        );
    }

    #[test]
    fn schema_property_counts() {
        assert_eq!(
            schema_details(
                doc! {"minProperties": 10},
                doc! {"_id": 1, "a": 1, "b": 2, "c": 3}
            ),
            rules(vec![doc! {"operatorName": "minProperties",
            "specifiedAs": {"minProperties": 10},
            "reason": "specified number of properties was not satisfied",
            "numberOfProperties": 4}])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"maxProperties": 1}}},
                doc! {"a": {"b": 1, "c": 2}}
            ),
            rules(vec![property(
                "a",
                vec![doc! {"operatorName": "maxProperties",
                "specifiedAs": {"maxProperties": 1},
                "reason": "specified number of properties was not satisfied",
                "numberOfProperties": 2}]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"minProperties": 10, "type": "object"}}},
                doc! {"a": ["clearly", "not", "an", "object"]}
            ),
            rules(vec![property(
                "a",
                vec![type_error(
                    "type",
                    doc! {"type": "object"},
                    vec!["clearly", "not", "an", "object"],
                    "array"
                )]
            )])
        );
    }

    #[test]
    fn schema_dependencies() {
        assert_eq!(
            schema_details(
                doc! {"dependencies": {"a": ["b", "c"], "title": "a needs b and c"}},
                doc! {"a": 1, "b": 2}
            ),
            rules(vec![
                doc! {"operatorName": "dependencies", "title": "a needs b and c",
                "failingDependencies": [
                    {"conditionalProperty": "a", "missingProperties": ["c"]}]}
            ])
        );
        assert_eq!(
            schema_details(
                doc! {"dependencies": {"a": ["b", "c", "d"], "b": ["c", "d"], "e": ["c", "d"]}},
                doc! {"a": 1, "b": 2, "e": 3}
            ),
            rules(vec![
                doc! {"operatorName": "dependencies", "failingDependencies": [
                {"conditionalProperty": "a", "missingProperties": ["c", "d"]},
                {"conditionalProperty": "b", "missingProperties": ["c", "d"]},
                {"conditionalProperty": "e", "missingProperties": ["c", "d"]}]}
            ])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"obj": {"dependencies": {"a": ["b", "c"]}}}},
                doc! {"obj": {"a": 1, "b": 2}}
            ),
            rules(vec![property(
                "obj",
                vec![doc! {"operatorName": "dependencies",
                "failingDependencies": [
                    {"conditionalProperty": "a", "missingProperties": ["c"]}]}]
            )])
        );
        assert_eq!(
            schema_details(
                doc! {"dependencies": {"a": {"properties": {"b": {"type": "number"}}},
                "b": ["a", "c"]}},
                doc! {"a": [0, 1, 2, 3], "b": "foo"}
            ),
            rules(vec![
                doc! {"operatorName": "dependencies", "failingDependencies": [
                {"conditionalProperty": "a", "details": [property("b", vec![
                    type_error("type", doc! {"type": "number"}, "foo", "string")])]},
                {"conditionalProperty": "b", "missingProperties": ["c"]}]}
            ])
        );
        assert_eq!(
            schema_details(
                doc! {"required": ["a"], "dependencies": {"a": ["b", "c"]}},
                doc! {}
            ),
            rules(vec![required(vec!["a"], vec!["a"])])
        );
    }

    #[test]
    fn schema_additional_properties() {
        assert_eq!(
            schema_details(
                doc! {"properties": {"b": {"type": "number"}}, "additionalProperties": false},
                doc! {"_id": 0, "a": 1, "b": 2}
            ),
            rules(vec![doc! {"operatorName": "additionalProperties",
            "specifiedAs": {"additionalProperties": false},
            "additionalProperties": ["_id", "a"]}])
        );
        assert_eq!(
            schema_details(
                doc! {"required": ["a"], "properties": {"b": {"type": "number"}},
                "additionalProperties": false},
                doc! {"_id": 0, "b": 2}
            ),
            rules(vec![
                doc! {"operatorName": "additionalProperties",
                "specifiedAs": {"additionalProperties": false},
                "additionalProperties": ["_id"]},
                required(vec!["a"], vec!["a"]),
            ])
        );
        assert_eq!(
            schema_details(
                doc! {"additionalProperties": false, "properties": {"_id": {},
                "a": {"type": "object", "additionalProperties": false}}},
                doc! {"_id": 1, "a": {"b": 1}, "c": 1}
            ),
            rules(vec![
                property(
                    "a",
                    vec![doc! {"operatorName": "additionalProperties",
                    "specifiedAs": {"additionalProperties": false},
                    "additionalProperties": ["b"]}]
                ),
                doc! {"operatorName": "additionalProperties",
                "specifiedAs": {"additionalProperties": false},
                "additionalProperties": ["c"]},
            ])
        );
        assert_eq!(
            schema_details(
                doc! {"properties": {"a": {"type": "number"}},
                "additionalProperties": {"type": "string"}},
                doc! {"a": 1, "b": "not this one", "c": "nor this", "d": 1}
            ),
            rules(vec![doc! {"operatorName": "additionalProperties",
            "reason": "at least one additional property did not match the subschema",
            "failingProperty": "d",
            "details": [type_error("type", doc! {"type": "string"}, 1, "int")]}])
        );
        assert_eq!(
            schema_details(
                doc! {"minProperties": 100, "additionalProperties": true},
                doc! {"_id": 0, "a": 1, "b": 2}
            ),
            rules(vec![doc! {"operatorName": "minProperties",
            "specifiedAs": {"minProperties": 100},
            "reason": "specified number of properties was not satisfied",
            "numberOfProperties": 3}])
        );
    }

    #[test]
    fn schema_pattern_properties() {
        let slow = |value: Bson, type_name: &str| {
            doc! {"propertyName": "Slow", "regexMatched": "^S", "details": [
            type_error("type", doc! {"type": "number"}, value, type_name)]}
        };
        assert_eq!(
            schema_details(
                doc! {"patternProperties": {"^S": {"type": "number"}}},
                doc! {"Super": 1, "Slow": "67"}
            ),
            rules(vec![doc! {"operatorName": "patternProperties",
            "details": [slow("67".into(), "string")]}])
        );
        assert_eq!(
            schema_details(
                doc! {"patternProperties": {"^a": {"patternProperties": {"b+": {"type": "string"}}}}},
                doc! {"a": {"bbbbb": 1}}
            ),
            rules(vec![
                doc! {"operatorName": "patternProperties", "details": [
                {"propertyName": "a", "regexMatched": "^a", "details": [
                    {"operatorName": "patternProperties", "details": [
                        {"propertyName": "bbbbb", "regexMatched": "b+", "details": [
                            type_error("type", doc! {"type": "string"}, 1, "int")]}]}]}]}
            ])
        );
        assert_eq!(
            schema_details(
                doc! {"patternProperties": {"^a": {"minimum": 3}, "b$": {"maximum": 1}}},
                doc! {"a": 45, "b": 0, "ab": 2}
            ),
            rules(vec![
                doc! {"operatorName": "patternProperties", "details": [
                {"propertyName": "ab", "regexMatched": "^a", "details": [
                    keyword("minimum", doc! {"minimum": 3}, "comparison failed", 2)]},
                {"propertyName": "ab", "regexMatched": "b$", "details": [
                    keyword("maximum", doc! {"maximum": 1}, "comparison failed", 2)]}]}
            ])
        );
        assert_eq!(
            schema_details(
                doc! {"patternProperties": {"^S": {"type": "number"}},
                "additionalProperties": false},
                doc! {"Super": 1, "Slow": "oh no a string", "b": 1, "_id": 1}
            ),
            rules(vec![
                doc! {"operatorName": "additionalProperties",
                "specifiedAs": {"additionalProperties": false},
                "additionalProperties": ["b", "_id"]},
                doc! {"operatorName": "patternProperties",
                "details": [slow("oh no a string".into(), "string")]},
            ])
        );
        assert_eq!(
            schema_details(
                doc! {"patternProperties": {"^S": {"type": "number",
                  "title": "properties starting with S",
                  "description": "property should be of integer type"}},
                "additionalProperties": {"type": "string",
                  "title": "additional properties",
                  "description": "additional properties are strings"}},
                doc! {"Super": 1, "Slow": "oh no a string", "b": 1}
            ),
            rules(vec![
                doc! {"operatorName": "additionalProperties",
                "title": "additional properties",
                "description": "additional properties are strings",
                "reason": "at least one additional property did not match the subschema",
                "failingProperty": "b",
                "details": [type_error("type", doc! {"type": "string"}, 1, "int")]},
                doc! {"operatorName": "patternProperties", "details": [
                {"propertyName": "Slow", "title": "properties starting with S",
                 "description": "property should be of integer type",
                 "regexMatched": "^S", "details": [type_error("type",
                    doc! {"type": "number"}, "oh no a string", "string")]}]},
            ])
        );
        assert_eq!(
            schema_details(
                doc! {"minProperties": 10,
                "patternProperties": {"^_id": {}, "^S": {"type": "number"}},
                "additionalProperties": false},
                doc! {"_id": 1, "Super": 1, "Slow": 2}
            ),
            rules(vec![doc! {"operatorName": "minProperties",
            "specifiedAs": {"minProperties": 10},
            "reason": "specified number of properties was not satisfied",
            "numberOfProperties": 3}])
        );
    }
}
