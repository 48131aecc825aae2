//! Aggregation expressions: `$expr` in filters today, the whole aggregation
//! language later.
//!
//! An expression is parsed once into an [`Expr`] tree and evaluated against
//! a document. Operators live in one table, [`OPERATORS`], sorted by name:
//! each entry says how many arguments the operator takes and how it
//! evaluates, either from its already-evaluated arguments (most operators)
//! or from the unevaluated argument expressions (`$cond`, `$and`, ...,
//! which short-circuit). Adding an operator is adding a row and a function.
//!
//! Evaluation distinguishes a *missing* value (a field that is not there,
//! `$$REMOVE`) from `null`, as MongoDB does: `$type` says `"missing"`,
//! object expressions drop missing fields, and comparisons order missing
//! below `null`. Values borrow from the document where they can.
//!
//! Most expression errors carry MongoDB's numbered assertion codes, which
//! clients see as `Location16554` and so on; [`ErrorCode`] names each by
//! its meaning, and every error is built with [`Error::new`].

use std::borrow::Cow;
use std::cmp::Ordering;

use bson::{Bson, DateTime, Document, RawBsonRef, RawDocument};

use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::{compare, f64_fits_i64, type_name, DecimalValue, Number};
use crate::query::js::JsFunction;
use crate::query::path::{expression_value, expression_value_in, raw_leaf, RawLeaf};
use crate::query::size::{nesting_exceeds, SizeBudget, MAX_NESTING};

mod args;
mod array;
mod date;
mod string;
mod types;

pub use date::TimeUnit;

/// A parsed aggregation expression.
#[derive(Debug, Clone)]
pub struct Expr {
    node: Node,
}

impl Expr {
    /// Parses an expression: a literal, a `"$field.path"`, a `"$$variable"`,
    /// an array or object of expressions, or `{$operator: args}`.
    pub fn parse(expr: &Bson) -> Result<Expr> {
        if nesting_exceeds(std::iter::once(expr), MAX_NESTING) {
            crate::bail!(
                BadValue,
                "exceeded maximum expression nesting depth of {MAX_NESTING}"
            );
        }
        Ok(Expr {
            node: parse_node(expr)?,
        })
    }

    /// Evaluates against `root` (`$$ROOT` and `$$CURRENT`). A missing
    /// result is returned as `null`; see [`Expr::evaluate_value`].
    pub fn evaluate(&self, root: &Document) -> Result<Bson> {
        Ok(self.evaluate_value(root)?.unwrap_or(Bson::Null))
    }

    /// Evaluates, returning `None` for a missing value.
    pub fn evaluate_value(&self, root: &Document) -> Result<Option<Bson>> {
        let scope = Scope { root, vars: None };
        Ok(eval(&self.node, &scope)?.map(Cow::into_owned))
    }

    /// Evaluates with user variables (`$$name`) bound, as `$let`, `let`
    /// options and pipeline stages will provide.
    pub fn evaluate_with_vars(&self, root: &Document, vars: &Document) -> Result<Option<Bson>> {
        let scope = Scope {
            root,
            vars: Some(vars),
        };
        Ok(eval(&self.node, &scope)?.map(Cow::into_owned))
    }

    /// Evaluates to a boolean by aggregation truthiness, without copying
    /// the result (what `$expr` needs).
    pub fn evaluate_truthy(&self, root: &Document) -> Result<bool> {
        let scope = Scope { root, vars: None };
        Ok(eval(&self.node, &scope)?.as_deref().is_some_and(truthy))
    }

    /// True when the expression is a constant (no paths or variables).
    pub fn is_constant(&self) -> bool {
        self.node.is_constant()
    }

    /// True when the expression calls `$rand` somewhere (which collection
    /// validators refuse).
    pub fn uses_rand(&self) -> bool {
        self.node.uses_rand()
    }

    /// The first JavaScript operator the expression calls (`$function`
    /// or `$_internalJsEmit`), which collection validators refuse.
    pub fn script_operator(&self) -> Option<&'static str> {
        self.node.script_operator()
    }

    /// True when the expression only reads field paths: a literal, a
    /// `"$a.b"`, or an object of these, which [`Expr::evaluate_raw`] can
    /// evaluate on a document still in BSON form.
    pub fn reads_fields_only(&self) -> bool {
        self.node.reads_fields_only()
    }

    /// Evaluates an expression that only reads field paths on a document
    /// still in BSON form, without decoding it: what
    /// [`Expr::evaluate_value`] gives on the decoded document. `None`
    /// when only the decoded document can tell (any other expression, an
    /// array on a path, a field named twice, an object past the size
    /// limit, which the evaluator refuses).
    pub fn evaluate_raw<'a>(&'a self, doc: &'a RawDocument) -> Option<RawValue<'a>> {
        raw_value(&self.node, doc)
    }
}

/// What an expression gives on a document still in BSON form
/// ([`Expr::evaluate_raw`]).
#[derive(Debug, Clone)]
pub enum RawValue<'a> {
    /// Missing: the path leads nowhere.
    Missing,
    /// A value of the document, not decoded.
    Field(RawBsonRef<'a>),
    /// A value the expression holds or built.
    Built(Cow<'a, Bson>),
}

fn raw_value<'a>(node: &'a Node, doc: &'a RawDocument) -> Option<RawValue<'a>> {
    match node {
        Node::Literal(v) => Some(RawValue::Built(Cow::Borrowed(v))),
        Node::FieldPath(path) => match raw_leaf(doc, path) {
            RawLeaf::Missing => Some(RawValue::Missing),
            RawLeaf::Value(v) => Some(RawValue::Field(v)),
            RawLeaf::Unknown => None,
        },
        Node::Object(fields) => {
            let mut out = Document::new();
            let mut budget = SizeBudget::new();
            for (key, value) in fields {
                let v = match raw_value(value, doc)? {
                    RawValue::Missing => continue,
                    RawValue::Field(v) => Bson::try_from(v).ok()?,
                    RawValue::Built(v) => v.into_owned(),
                };
                budget.add_field(key, &v).ok()?;
                out.insert(key.clone(), v);
            }
            Some(RawValue::Built(Cow::Owned(Bson::Document(out))))
        }
        Node::Variable { .. }
        | Node::Array(_)
        | Node::Operator { .. }
        | Node::Function { .. }
        | Node::Emit { .. } => None,
    }
}

/// MongoDB aggregation truthiness: `false`, `null`, `undefined` and numeric
/// zero are false; everything else (including `""`, `[]` and NaN) is true.
/// A missing value is false too (callers pass `Option::is_some_and`).
pub fn truthy(value: &Bson) -> bool {
    match value {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        Bson::Int32(i) => *i != 0,
        Bson::Int64(i) => *i != 0,
        Bson::Double(d) => *d != 0.0,
        Bson::Decimal128(d) => !DecimalValue::from_decimal128(d).is_zero(),
        _ => true,
    }
}

/// A value during evaluation: `None` is missing; borrowed from the
/// document or the expression when possible.
pub(super) type Value<'a> = Option<Cow<'a, Bson>>;

pub(super) struct Scope<'a> {
    pub(super) root: &'a Document,
    pub(super) vars: Option<&'a Document>,
}

#[derive(Debug, Clone)]
pub(super) enum Node {
    Literal(Bson),
    /// `"$a.b"`: a path from `$$CURRENT`.
    FieldPath(Vec<String>),
    /// `"$$name.a.b"`.
    Variable {
        name: String,
        path: Vec<String>,
    },
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
    Operator {
        op: &'static Operator,
        args: Vec<Node>,
    },
    /// `$function`: JavaScript called with its evaluated `args`.
    Function {
        function: JsFunction,
        args: Box<Node>,
    },
    /// `$_internalJsEmit`: `mapReduce`'s map function called on `this`,
    /// giving what it emitted as `[{k, v}, ...]`.
    Emit {
        function: JsFunction,
        this: Box<Node>,
    },
}

impl Node {
    fn reads_fields_only(&self) -> bool {
        match self {
            Node::Literal(_) | Node::FieldPath(_) => true,
            Node::Object(fields) => fields.iter().all(|(_, n)| n.reads_fields_only()),
            Node::Variable { .. }
            | Node::Array(_)
            | Node::Operator { .. }
            | Node::Function { .. }
            | Node::Emit { .. } => false,
        }
    }

    fn is_constant(&self) -> bool {
        match self {
            Node::Literal(_) => true,
            Node::FieldPath(_) | Node::Variable { .. } => false,
            Node::Array(items) => items.iter().all(Node::is_constant),
            Node::Object(fields) => fields.iter().all(|(_, n)| n.is_constant()),
            // `$rand` gives a new value each time it is evaluated.
            Node::Operator { op, args } => !op.is_random() && args.iter().all(Node::is_constant),
            // A script may read the clock or random numbers.
            Node::Function { .. } | Node::Emit { .. } => false,
        }
    }

    fn uses_rand(&self) -> bool {
        match self {
            Node::Literal(_) | Node::FieldPath(_) | Node::Variable { .. } => false,
            Node::Array(items) => items.iter().any(Node::uses_rand),
            Node::Object(fields) => fields.iter().any(|(_, n)| n.uses_rand()),
            Node::Operator { op, args } => op.is_random() || args.iter().any(Node::uses_rand),
            Node::Function { args, .. } => args.uses_rand(),
            Node::Emit { this, .. } => this.uses_rand(),
        }
    }

    fn script_operator(&self) -> Option<&'static str> {
        match self {
            Node::Literal(_) | Node::FieldPath(_) | Node::Variable { .. } => None,
            Node::Array(items) => items.iter().find_map(Node::script_operator),
            Node::Object(fields) => fields.iter().find_map(|(_, n)| n.script_operator()),
            Node::Operator { args, .. } => args.iter().find_map(Node::script_operator),
            Node::Function { .. } => Some("$function"),
            Node::Emit { .. } => Some("$_internalJsEmit"),
        }
    }
}

/// How an operator evaluates.
#[derive(Clone, Copy)]
pub(super) enum Evaluation {
    /// From its evaluated arguments.
    Values(for<'a> fn(&[Value<'a>]) -> Result<Value<'a>>),
    /// From its argument expressions, evaluating only what it needs.
    Lazy(for<'a> fn(&'a [Node], &Scope<'a>) -> Result<Value<'a>>),
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Arity {
    Exactly(usize),
    AtLeast(usize),
    Any,
}

/// Reads an operator's object-form argument into an argument list, or
/// `None` to treat the argument as a single expression.
pub(super) type ArgsParser = fn(&Bson) -> Result<Option<Vec<Bson>>>;

/// One row of the operator table.
pub(super) struct Operator {
    pub(super) name: &'static str,
    pub(super) arity: Arity,
    pub(super) evaluation: Evaluation,
    /// Turns a non-array argument into the argument list, for operators
    /// with an object form (`$cond: {if, then, else}`).
    pub(super) parse_args: Option<ArgsParser>,
}

impl Operator {
    /// `$rand`, whose value is new at every evaluation: never a constant.
    fn is_random(&self) -> bool {
        self.name == "$rand"
    }
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// The expression operators, sorted by name for binary search. Arity is
/// checked when an expression is parsed, so the operator functions index
/// their arguments directly.
static OPERATORS: &[Operator] = &[
    op("$abs", Arity::Exactly(1), Evaluation::Values(op_abs)),
    op("$add", Arity::Any, Evaluation::Values(op_add)),
    op("$and", Arity::Any, Evaluation::Lazy(op_and)),
    op("$cmp", Arity::Exactly(2), Evaluation::Values(op_cmp)),
    Operator {
        name: "$cond",
        arity: Arity::Exactly(3),
        evaluation: Evaluation::Lazy(op_cond),
        parse_args: Some(cond_object_args),
    },
    op("$divide", Arity::Exactly(2), Evaluation::Values(op_divide)),
    op("$eq", Arity::Exactly(2), Evaluation::Values(op_eq)),
    op("$gt", Arity::Exactly(2), Evaluation::Values(op_gt)),
    op("$gte", Arity::Exactly(2), Evaluation::Values(op_gte)),
    op("$ifNull", Arity::AtLeast(2), Evaluation::Lazy(op_if_null)),
    op("$in", Arity::Exactly(2), Evaluation::Values(op_in)),
    op("$lt", Arity::Exactly(2), Evaluation::Values(op_lt)),
    op("$lte", Arity::Exactly(2), Evaluation::Values(op_lte)),
    op("$mod", Arity::Exactly(2), Evaluation::Values(op_mod)),
    op("$multiply", Arity::Any, Evaluation::Values(op_multiply)),
    op("$ne", Arity::Exactly(2), Evaluation::Values(op_ne)),
    op("$not", Arity::Exactly(1), Evaluation::Values(op_not)),
    op("$or", Arity::Any, Evaluation::Lazy(op_or)),
    op("$rand", Arity::Exactly(0), Evaluation::Values(op_rand)),
    op("$size", Arity::Exactly(1), Evaluation::Values(op_size)),
    op(
        "$subtract",
        Arity::Exactly(2),
        Evaluation::Values(op_subtract),
    ),
    op(
        "$toHashedIndexKey",
        Arity::Exactly(1),
        Evaluation::Values(op_to_hashed_index_key),
    ),
    op("$type", Arity::Exactly(1), Evaluation::Values(op_type)),
];

pub(super) const fn op(name: &'static str, arity: Arity, evaluation: Evaluation) -> Operator {
    Operator {
        name,
        arity,
        evaluation,
        parse_args: None,
    }
}

/// Every operator table: this file's and one per family of operators
/// (each sorted by name).
static TABLES: &[&[Operator]] = &[
    OPERATORS,
    array::OPERATORS,
    date::OPERATORS,
    string::OPERATORS,
    types::OPERATORS,
];

fn find_operator(name: &str) -> Option<&'static Operator> {
    TABLES.iter().find_map(|table| {
        table
            .binary_search_by(|o| o.name.cmp(name))
            .ok()
            .map(|i| &table[i])
    })
}

/// The names of the supported expression operators, sorted.
pub fn operator_names() -> impl Iterator<Item = &'static str> {
    let mut names: Vec<&'static str> = TABLES
        .iter()
        .flat_map(|t| t.iter().map(|o| o.name))
        .collect();
    names.sort_unstable();
    names.into_iter()
}

// ---------------------------------------------------------------------------
// Parsing.

/// `$function: {body, args, lang: "js"}`, with MongoDB's checks in its
/// order; the body is compiled now, so a syntax error fails the command
/// before it reads anything.
fn parse_function(arg: &Bson) -> Result<Node> {
    let loc = |code: i32, message: String| Error::new(ErrorCode::from_number(code), message);
    let Bson::Document(spec) = arg else {
        return Err(loc(
            31260,
            format!(
                "$function requires an object as an argument, found: {}",
                type_name(arg)
            ),
        ));
    };
    let Some(body) = spec.get("body") else {
        return Err(loc(31261, "The body function must be specified.".into()));
    };
    let body = match parse_node(body)? {
        Node::Literal(v) => v,
        _ => {
            return Err(loc(
                31432,
                "The body function must be a constant expression".into(),
            ))
        }
    };
    let source = match body {
        Bson::String(s) | Bson::JavaScriptCode(s) => s,
        _ => {
            return Err(loc(
                31262,
                "The body function must evaluate to type string or code".into(),
            ))
        }
    };
    let Some(args) = spec.get("args") else {
        return Err(loc(31263, "The args field must be specified.".into()));
    };
    let args = parse_node(args)?;
    match spec.get("lang") {
        None => return Err(loc(31418, "The lang field must be specified.".into())),
        Some(Bson::String(lang)) if lang == "js" => {}
        Some(_) => {
            return Err(loc(
                31419,
                "Currently the only supported language specifier is 'js'.".into(),
            ))
        }
    }
    if !crate::query::js::enabled() {
        return Err(crate::query::js::function_disabled_error());
    }
    let function = scoped_function(&source, spec.get("_internalScope"))?;
    Ok(Node::Function {
        function,
        args: Box::new(args),
    })
}

/// A function with `mapReduce`'s `scope` as its globals, compiled now.
fn scoped_function(source: &str, scope: Option<&Bson>) -> Result<JsFunction> {
    let globals = match scope {
        Some(Bson::Document(d)) => d.clone(),
        _ => Document::new(),
    };
    let mut builder = crate::query::js::ScopeBuilder::new(globals);
    builder.add(source);
    let function = builder
        .finish()
        .pop()
        .ok_or_else(|| Error::internal("no function"))?;
    function.check()?;
    Ok(function)
}

/// `$_internalJsEmit: {eval: <map function>, this: <expression>}`, how
/// `mapReduce` calls its map function (MongoDB's own translation).
fn parse_emit(arg: &Bson) -> Result<Node> {
    let loc = |code: i32, message: String| Error::new(ErrorCode::from_number(code), message);
    let Bson::Document(spec) = arg else {
        return Err(loc(
            31221,
            format!(
                "$_internalJsEmit requires an object as an argument, found: {}",
                type_name(arg)
            ),
        ));
    };
    let source = match spec.get("eval") {
        Some(Bson::String(s) | Bson::JavaScriptCode(s)) => s.clone(),
        Some(_) => {
            return Err(loc(
                31224,
                "The map function must be of type string or code".into(),
            ))
        }
        None => return Err(loc(31222, "The map function must be specified.".into())),
    };
    let Some(this) = spec.get("this") else {
        return Err(loc(31223, "The 'this' field must be specified.".into()));
    };
    if !crate::query::js::enabled() {
        return Err(crate::query::js::map_reduce_disabled_error());
    }
    Ok(Node::Emit {
        function: scoped_function(&source, spec.get("_internalScope"))?,
        this: Box::new(parse_node(this)?),
    })
}

pub(super) fn parse_node(expr: &Bson) -> Result<Node> {
    match expr {
        Bson::String(s) if s.starts_with("$$") => parse_variable(&s[2..]),
        Bson::String(s) if s.starts_with('$') => Ok(Node::FieldPath(parse_path(&s[1..], s)?)),
        Bson::Array(items) => Ok(Node::Array(
            items.iter().map(parse_node).collect::<Result<_>>()?,
        )),
        Bson::Document(doc) => parse_object(doc),
        other => Ok(Node::Literal(other.clone())),
    }
}

fn parse_path(path: &str, original: &str) -> Result<Vec<String>> {
    if path.is_empty() {
        return Err(Error::new(
            ErrorCode::FieldPathDollarAlone,
            format!("'{original}' by itself is not a valid FieldPath"),
        ));
    }
    path.split('.')
        .map(|part| {
            if part.is_empty() {
                return Err(Error::new(
                    ErrorCode::FieldPathEmptyComponent,
                    "FieldPath field names may not be empty strings.".to_string(),
                ));
            }
            if part.starts_with('$') {
                return Err(Error::new(
                    ErrorCode::FieldPathDollarPrefixed,
                    format!(
                        "FieldPath field names may not start with '$'. Given FieldPath: {path}"
                    ),
                ));
            }
            Ok(part.to_string())
        })
        .collect()
}

fn parse_variable(text: &str) -> Result<Node> {
    let (name, rest) = match text.split_once('.') {
        Some((n, r)) => (n, Some(r)),
        None => (text, None),
    };
    let valid_start = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || !c.is_ascii() || c.is_ascii_uppercase());
    let valid = valid_start && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    if !valid {
        crate::bail!(
            FailedToParse,
            "'{name}' starts with an invalid character for a user variable name"
        );
    }
    if name.starts_with(|c: char| c.is_ascii_uppercase())
        && !matches!(name, "ROOT" | "CURRENT" | "REMOVE" | "NOW")
    {
        return Err(Error::new(
            ErrorCode::UndefinedVariable,
            format!("Use of undefined variable: {name}"),
        ));
    }
    let path = match rest {
        Some(r) => parse_path(r, text)?,
        None => Vec::new(),
    };
    Ok(Node::Variable {
        name: name.to_string(),
        path,
    })
}

fn parse_object(doc: &Document) -> Result<Node> {
    let first_is_operator = doc.keys().next().is_some_and(|k| k.starts_with('$'));
    if first_is_operator {
        if doc.len() != 1 {
            return Err(Error::new(
                ErrorCode::ExpressionWrongLenOfFields,
                format!(
                    "an expression specification must contain exactly one field, the name of \
                     the expression. Found {} fields in {doc}",
                    doc.len()
                ),
            ));
        }
        let Some((name, arg)) = doc.iter().next() else {
            return Ok(Node::Object(Vec::new()));
        };
        return parse_operator(name, arg);
    }
    let mut fields = Vec::with_capacity(doc.len());
    for (key, value) in doc {
        if key.starts_with('$') {
            crate::bail!(
                FieldPathDollarPrefixed,
                "FieldPath field names may not start with '$'. Given FieldPath: {key}"
            );
        }
        if key.contains('.') {
            return Err(Error::new(
                ErrorCode::FieldPathContainsDot,
                format!("FieldPath field names may not contain '.'. Given: {key}"),
            ));
        }
        fields.push((key.clone(), parse_node(value)?));
    }
    Ok(Node::Object(fields))
}

fn parse_operator(name: &str, arg: &Bson) -> Result<Node> {
    if name == "$literal" {
        return Ok(Node::Literal(arg.clone()));
    }
    if name == "$function" {
        return parse_function(arg);
    }
    if name == "$meta" {
        return parse_meta(arg);
    }
    if name == "$_internalJsEmit" {
        return parse_emit(arg);
    }
    let Some(op) = find_operator(name) else {
        // MongoDB's InvalidPipelineOperator, which has no name in our table.
        return Err(Error::new(
            ErrorCode::InvalidPipelineOperator,
            format!("Unrecognized expression '{name}'"),
        ));
    };
    if op.is_random() {
        // `{$rand: {}}` (or `[]`, which `BSONElement::Obj()` also reads):
        // any argument is refused, a scalar as not an object at all.
        return match arg {
            Bson::Document(d) if d.is_empty() => Ok(Node::Operator {
                op,
                args: Vec::new(),
            }),
            Bson::Array(a) if a.is_empty() => Ok(Node::Operator {
                op,
                args: Vec::new(),
            }),
            Bson::Document(_) | Bson::Array(_) => Err(Error::new(
                ErrorCode::RandTakesNoArguments,
                "$rand does not currently accept arguments",
            )),
            _ => Err(Error::new(
                ErrorCode::ExpectedObject,
                "invalid parameter: expected an object ($rand)",
            )),
        };
    }
    let from_object = match (op.parse_args, arg) {
        (Some(parse), Bson::Document(_)) => parse(arg)?,
        _ => None,
    };
    let args: Vec<Node> = match (from_object, arg) {
        (Some(items), _) => items.iter().map(parse_node).collect::<Result<_>>()?,
        (None, Bson::Array(items)) => items.iter().map(parse_node).collect::<Result<_>>()?,
        (None, single) => vec![parse_node(single)?],
    };
    let count = args.len();
    let ok = match op.arity {
        Arity::Exactly(n) => count == n,
        Arity::AtLeast(n) => count >= n,
        Arity::Any => true,
    };
    if !ok {
        let message = match op.arity {
            Arity::Exactly(n) => {
                format!("Expression {name} takes exactly {n} arguments. {count} were passed in.")
            }
            Arity::AtLeast(n) => {
                format!(
                    "Expression {name} takes at least {n} arguments, and {count} were passed in."
                )
            }
            Arity::Any => String::new(),
        };
        return Err(Error::new(ErrorCode::OperatorWrongLenOfArgs, message));
    }
    Ok(Node::Operator { op, args })
}

/// `{$meta: "textScore"}` reads the score a `$text` match gave the
/// document ([`crate::query::text::SCORE_FIELD`]). The other kinds of
/// metadata MongoDB names (Atlas Search scores, record ids, ...) exist
/// on no document here, so they are missing.
fn parse_meta(arg: &Bson) -> Result<Node> {
    const MISSING: [&str; 11] = [
        "randVal",
        "searchScore",
        "searchHighlights",
        "searchScoreDetails",
        "searchSequenceToken",
        "geoNearDistance",
        "geoNearPoint",
        "recordId",
        "indexKey",
        "sortKey",
        "vectorSearchScore",
    ];
    let Bson::String(kind) = arg else {
        return Err(Error::new(
            ErrorCode::Location(17307),
            "$meta only supports string arguments",
        ));
    };
    if kind == "textScore" {
        return Ok(Node::FieldPath(vec![
            crate::query::text::SCORE_FIELD.to_string()
        ]));
    }
    if MISSING.contains(&kind.as_str()) {
        return Ok(Node::Variable {
            name: "REMOVE".to_string(),
            path: Vec::new(),
        });
    }
    Err(Error::new(
        ErrorCode::Location(17308),
        format!("Unsupported argument to $meta: {kind}"),
    ))
}

/// `$cond: {if, then, else}` as the three-element argument list.
fn cond_object_args(arg: &Bson) -> Result<Option<Vec<Bson>>> {
    let Bson::Document(doc) = arg else {
        return Ok(None);
    };
    let (mut cond, mut then, mut otherwise) = (None, None, None);
    for (key, value) in doc {
        match key.as_str() {
            "if" => cond = Some(value.clone()),
            "then" => then = Some(value.clone()),
            "else" => otherwise = Some(value.clone()),
            other => {
                return Err(Error::new(
                    ErrorCode::CondUnknownParameter,
                    format!("Unrecognized parameter to $cond: {other}"),
                ))
            }
        }
    }
    let missing = |code: ErrorCode, name: &str| {
        Error::new(code, format!("Missing '{name}' parameter to $cond"))
    };
    let cond = cond.ok_or_else(|| missing(ErrorCode::CondMissingIf, "if"))?;
    let then = then.ok_or_else(|| missing(ErrorCode::CondMissingThen, "then"))?;
    let otherwise = otherwise.ok_or_else(|| missing(ErrorCode::CondMissingElse, "else"))?;
    Ok(Some(vec![cond, then, otherwise]))
}

// ---------------------------------------------------------------------------
// Evaluation.

pub(super) fn eval<'a>(node: &'a Node, scope: &Scope<'a>) -> Result<Value<'a>> {
    match node {
        Node::Literal(v) => Ok(Some(Cow::Borrowed(v))),
        Node::FieldPath(path) => Ok(expression_value_in(scope.root, path)),
        Node::Variable { name, path } => eval_variable(name, path, scope),
        Node::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            let mut budget = SizeBudget::new();
            for item in items {
                // Missing elements become null inside arrays.
                let v = eval(item, scope)?.unwrap_or(Cow::Owned(Bson::Null));
                budget.add_element(out.len(), &v)?;
                out.push(v.into_owned());
            }
            Ok(Some(Cow::Owned(Bson::Array(out))))
        }
        Node::Object(fields) => {
            let mut out = Document::new();
            let mut budget = SizeBudget::new();
            for (key, value) in fields {
                if let Some(v) = eval(value, scope)? {
                    budget.add_field(key, &v)?;
                    out.insert(key.clone(), v.into_owned());
                }
            }
            Ok(Some(Cow::Owned(Bson::Document(out))))
        }
        Node::Operator { op, args } => match op.evaluation {
            Evaluation::Lazy(f) => f(args, scope),
            Evaluation::Values(f) => {
                let mut values = Vec::with_capacity(args.len());
                for arg in args {
                    values.push(eval(arg, scope)?);
                }
                f(&values)
            }
        },
        Node::Function { function, args } => {
            let args = match eval(args, scope)?.as_deref() {
                Some(Bson::Array(items)) => items.clone(),
                _ => {
                    return Err(Error::new(
                        ErrorCode::from_number(31266),
                        "The args field must be of type array",
                    ))
                }
            };
            Ok(Some(Cow::Owned(function.call(None, &args)?)))
        }
        Node::Emit { function, this } => {
            let this = eval(this, scope)?;
            let Some(Bson::Document(doc)) = this.as_deref() else {
                return Err(Error::new(
                    ErrorCode::from_number(31225),
                    "'this' must be an object.",
                ));
            };
            let emitted = function.call_map(doc)?;
            let mut budget = SizeBudget::new();
            let mut out = Vec::with_capacity(emitted.len());
            for (k, v) in emitted {
                let pair = Bson::Document(bson::doc! {"k": k, "v": v});
                budget.add_element(out.len(), &pair)?;
                out.push(pair);
            }
            Ok(Some(Cow::Owned(Bson::Array(out))))
        }
    }
}

fn eval_variable<'a>(name: &str, path: &[String], scope: &Scope<'a>) -> Result<Value<'a>> {
    match name {
        "ROOT" | "CURRENT" => {
            if path.is_empty() {
                // The document as a value, without the score it carries.
                let mut root = scope.root.clone();
                crate::query::text::strip_score(&mut root);
                Ok(Some(Cow::Owned(Bson::Document(root))))
            } else {
                Ok(expression_value_in(scope.root, path))
            }
        }
        "REMOVE" => Ok(None),
        "NOW" => Ok(Some(Cow::Owned(Bson::DateTime(DateTime::now())))),
        user => {
            let Some(value) = scope.vars.and_then(|vars| vars.get(user)) else {
                return Err(Error::new(
                    ErrorCode::UndefinedVariable,
                    format!("Use of undefined variable: {user}"),
                ));
            };
            Ok(expression_value(value, path))
        }
    }
}

fn owned<'a>(v: Bson) -> Result<Value<'a>> {
    Ok(Some(Cow::Owned(v)))
}

fn is_nullish(v: &Value<'_>) -> bool {
    match v {
        None => true,
        Some(b) => matches!(b.as_ref(), Bson::Null | Bson::Undefined),
    }
}

fn type_of(v: &Value<'_>) -> &'static str {
    v.as_deref().map_or("missing", type_name)
}

/// The full BSON order, with missing below everything but MinKey.
fn compare_values(a: &Value<'_>, b: &Value<'_>) -> Ordering {
    match (a.as_deref(), b.as_deref()) {
        (None, None) => Ordering::Equal,
        (None, Some(Bson::MinKey)) => Ordering::Greater,
        (None, Some(_)) => Ordering::Less,
        (Some(Bson::MinKey), None) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => compare(x, y),
    }
}

fn comparison<'a>(args: &[Value<'a>], accept: fn(Ordering) -> bool) -> Result<Value<'a>> {
    owned(Bson::Boolean(accept(compare_values(&args[0], &args[1]))))
}

fn op_eq<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    comparison(args, |o| o == Ordering::Equal)
}

fn op_ne<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    comparison(args, |o| o != Ordering::Equal)
}

fn op_gt<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    comparison(args, |o| o == Ordering::Greater)
}

fn op_gte<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    comparison(args, |o| o != Ordering::Less)
}

fn op_lt<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    comparison(args, |o| o == Ordering::Less)
}

fn op_lte<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    comparison(args, |o| o != Ordering::Greater)
}

fn op_cmp<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let n = match compare_values(&args[0], &args[1]) {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    };
    owned(Bson::Int32(n))
}

fn op_and<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    for arg in args {
        if !eval(arg, scope)?.as_deref().is_some_and(truthy) {
            return owned(Bson::Boolean(false));
        }
    }
    owned(Bson::Boolean(true))
}

fn op_or<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    for arg in args {
        if eval(arg, scope)?.as_deref().is_some_and(truthy) {
            return owned(Bson::Boolean(true));
        }
    }
    owned(Bson::Boolean(false))
}

fn op_not<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    owned(Bson::Boolean(!args[0].as_deref().is_some_and(truthy)))
}

fn op_cond<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    if eval(&args[0], scope)?.as_deref().is_some_and(truthy) {
        eval(&args[1], scope)
    } else {
        eval(&args[2], scope)
    }
}

/// The first argument that is neither null nor missing; the last one is
/// the replacement, returned as it is.
fn op_if_null<'a>(args: &'a [Node], scope: &Scope<'a>) -> Result<Value<'a>> {
    let Some((last, candidates)) = args.split_last() else {
        return Ok(None);
    };
    for arg in candidates {
        let v = eval(arg, scope)?;
        if !is_nullish(&v) {
            return Ok(v);
        }
    }
    eval(last, scope)
}

fn op_in<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let Some(Bson::Array(items)) = args[1].as_deref() else {
        return Err(Error::new(
            ErrorCode::InSecondArgNotArray,
            format!(
                "$in requires an array as a second argument, found: {}",
                type_of(&args[1])
            ),
        ));
    };
    let found = items
        .iter()
        .any(|item| compare_values(&args[0], &Some(Cow::Borrowed(item))) == Ordering::Equal);
    owned(Bson::Boolean(found))
}

fn op_size<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let Some(Bson::Array(items)) = args[0].as_deref() else {
        return Err(Error::new(
            ErrorCode::SizeNotArray,
            format!(
                "The argument to $size must be an array. Type of the argument was: {}",
                type_of(&args[0])
            ),
        ));
    };
    let n = i32::try_from(items.len())
        .map(Bson::Int32)
        .unwrap_or_else(|_| Bson::Int64(items.len() as i64));
    owned(n)
}

/// MongoDB's hashed-index hash of the value, as a long; a missing value
/// hashes as null.
fn op_to_hashed_index_key<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let hash = match args[0].as_deref() {
        Some(v) => crate::query::hash::hash_value(v),
        None => crate::query::hash::hash_missing(),
    };
    owned(Bson::Int64(hash))
}

fn op_type<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    owned(Bson::String(type_of(&args[0]).to_string()))
}

// ---------------------------------------------------------------------------
// Arithmetic: int + int stays int unless it overflows (then long), long
// overflow becomes double, any double makes a double, any decimal makes a
// decimal.

fn number_of(v: &Value<'_>) -> Option<Number> {
    v.as_deref().and_then(Number::of)
}

/// Milliseconds for date arithmetic: doubles and decimals round to the
/// nearest integer.
fn acc_to_millis(acc: Number) -> Option<i64> {
    match acc {
        Number::Int32(i) => Some(i64::from(i)),
        Number::Int64(i) => Some(i),
        other => {
            let f = other.to_f64().round();
            if f64_fits_i64(f) {
                Some(f as i64)
            } else {
                None
            }
        }
    }
}

fn date_overflow(op: &str) -> Error {
    Error::new(ErrorCode::Overflow, format!("date overflow in {op}"))
}

fn op_add<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let mut total = Number::Int32(0);
    let mut date: Option<i64> = None;
    for arg in args {
        if is_nullish(arg) {
            return owned(Bson::Null);
        }
        match arg.as_deref() {
            Some(Bson::DateTime(d)) => {
                if date.is_some() {
                    return Err(Error::new(
                        ErrorCode::AddMoreThanOneDate,
                        "only one date allowed in an $add expression".to_string(),
                    ));
                }
                date = Some(d.timestamp_millis());
            }
            Some(other) => match Number::of(other) {
                Some(n) => {
                    total =
                        total.combine_widening(n, i64::checked_add, |a, b| a + b, DecimalValue::add)
                }
                None => {
                    return Err(Error::new(
                        ErrorCode::AddNotNumericOrDate,
                        format!(
                            "$add only supports numeric or date types, not {}",
                            type_name(other)
                        ),
                    ));
                }
            },
            None => return owned(Bson::Null),
        }
    }
    match date {
        Some(ms) => {
            let millis = acc_to_millis(total)
                .and_then(|delta| ms.checked_add(delta))
                .ok_or_else(|| date_overflow("$add"))?;
            owned(Bson::DateTime(DateTime::from_millis(millis)))
        }
        None => owned(total.into_bson()),
    }
}

/// `$rand`: a double drawn uniformly from [0, 1).
fn op_rand<'a>(_: &[Value<'a>]) -> Result<Value<'a>> {
    owned(Bson::Double(rand::random::<f64>()))
}

fn op_multiply<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let mut product = Number::Int32(1);
    for arg in args {
        if is_nullish(arg) {
            return owned(Bson::Null);
        }
        let Some(n) = number_of(arg) else {
            return Err(Error::new(
                ErrorCode::MultiplyNotNumeric,
                format!(
                    "$multiply only supports numeric types, not {}",
                    type_of(arg)
                ),
            ));
        };
        product = product.combine_widening(n, i64::checked_mul, |a, b| a * b, DecimalValue::mul);
    }
    owned(product.into_bson())
}

fn op_subtract<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let (lhs, rhs) = (&args[0], &args[1]);
    if is_nullish(lhs) || is_nullish(rhs) {
        return owned(Bson::Null);
    }
    match (lhs.as_deref(), rhs.as_deref()) {
        (Some(Bson::DateTime(a)), Some(Bson::DateTime(b))) => {
            let diff = a
                .timestamp_millis()
                .checked_sub(b.timestamp_millis())
                .ok_or_else(|| date_overflow("$subtract"))?;
            owned(Bson::Int64(diff))
        }
        (Some(Bson::DateTime(a)), Some(b)) if Number::of(b).is_some() => {
            let millis = Number::of(b)
                .and_then(acc_to_millis)
                .and_then(|delta| a.timestamp_millis().checked_sub(delta))
                .ok_or_else(|| date_overflow("$subtract"))?;
            owned(Bson::DateTime(DateTime::from_millis(millis)))
        }
        (Some(a), Some(b)) => match (Number::of(a), Number::of(b)) {
            (Some(x), Some(y)) => owned(
                x.combine_widening(y, i64::checked_sub, |p, q| p - q, DecimalValue::sub)
                    .into_bson(),
            ),
            _ => Err(Error::new(
                ErrorCode::SubtractBadTypes,
                format!("can't $subtract {} from {}", type_name(b), type_name(a)),
            )),
        },
        _ => owned(Bson::Null),
    }
}

fn op_divide<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let (lhs, rhs) = (&args[0], &args[1]);
    if is_nullish(lhs) || is_nullish(rhs) {
        return owned(Bson::Null);
    }
    let (Some(x), Some(y)) = (number_of(lhs), number_of(rhs)) else {
        return Err(Error::new(
            ErrorCode::DivideNotNumeric,
            format!(
                "$divide only supports numeric types, not {} and {}",
                type_of(lhs),
                type_of(rhs)
            ),
        ));
    };
    let divide_by_zero =
        || Error::new(ErrorCode::DivideByZero, "can't $divide by zero".to_string());
    if matches!(x, Number::Decimal(_)) || matches!(y, Number::Decimal(_)) {
        let quotient = x
            .to_decimal()
            .div(&y.to_decimal())
            .ok_or_else(divide_by_zero)?;
        return owned(Bson::Decimal128(quotient.to_decimal128()));
    }
    let divisor = y.to_f64();
    if divisor == 0.0 {
        return Err(divide_by_zero());
    }
    owned(Bson::Double(x.to_f64() / divisor))
}

fn op_mod<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    let (lhs, rhs) = (&args[0], &args[1]);
    if is_nullish(lhs) || is_nullish(rhs) {
        return owned(Bson::Null);
    }
    let (Some(x), Some(y)) = (number_of(lhs), number_of(rhs)) else {
        return Err(Error::new(
            ErrorCode::ModNotNumeric,
            format!(
                "$mod only supports numeric types, not {} and {}",
                type_of(lhs),
                type_of(rhs)
            ),
        ));
    };
    let Some(result) = x.checked_rem(y) else {
        return Err(Error::new(
            ErrorCode::ModByZero,
            "can't $mod by zero".to_string(),
        ));
    };
    owned(result.into_bson())
}

fn op_abs<'a>(args: &[Value<'a>]) -> Result<Value<'a>> {
    if is_nullish(&args[0]) {
        return owned(Bson::Null);
    }
    let Some(n) = number_of(&args[0]) else {
        return Err(Error::new(
            ErrorCode::SingleNumericArgNotNumeric,
            format!(
                "$abs only supports numeric types, not {}",
                type_of(&args[0])
            ),
        ));
    };
    let result = match n {
        Number::Int32(i) => i
            .checked_abs()
            .map_or(Bson::Int64(i64::from(i).abs()), Bson::Int32),
        Number::Int64(i) => match i.checked_abs() {
            Some(v) => Bson::Int64(v),
            None => {
                return Err(Error::new(
                    ErrorCode::AbsOfLongMin,
                    "can't take $abs of long long min".to_string(),
                ))
            }
        },
        Number::Double(d) => Bson::Double(d.abs()),
        Number::Decimal(d) => {
            let v = if d.is_negative() { d.negate() } else { d };
            Bson::Decimal128(v.to_decimal128())
        }
    };
    owned(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use std::str::FromStr;

    #[test]
    fn every_operator_table_is_sorted_and_names_are_unique() {
        for table in TABLES {
            assert!(table.windows(2).all(|w| w[0].name < w[1].name));
        }
        let names: Vec<&str> = operator_names().collect();
        assert!(names.windows(2).all(|w| w[0] != w[1]), "{names:?}");
    }

    fn eval_on(expr: Bson, root: Document) -> Result<Bson> {
        Expr::parse(&expr)?.evaluate(&root)
    }

    #[test]
    fn only_field_reading_expressions_evaluate_raw() {
        let raw = bson::RawDocumentBuf::try_from(&doc! {"a": {"b": 1}, "l": [{"b": 2}]}).unwrap();
        let value = |e: Bson| {
            Expr::parse(&e)
                .unwrap()
                .evaluate_raw(&raw)
                .map(|v| match v {
                    RawValue::Missing => None,
                    RawValue::Field(f) => Some(Bson::try_from(f).unwrap()),
                    RawValue::Built(b) => Some(b.into_owned()),
                })
        };
        assert_eq!(value(Bson::from("$a.b")), Some(Some(Bson::Int32(1))));
        assert_eq!(value(Bson::from("$a.c")), Some(None));
        assert_eq!(value(Bson::from("$l")), Some(Some(bson::bson!([{"b": 2}]))));
        assert_eq!(
            value(bson::bson!({"x": "$a.b", "y": "$zz", "z": 3})),
            Some(Some(bson::bson!({"x": 1, "z": 3})))
        );
        // An array on the way maps the rest of the path: decoded only.
        assert_eq!(value(Bson::from("$l.b")), None);
        assert_eq!(value(Bson::from("$$ROOT")), None);
        assert_eq!(value(bson::bson!({"$add": ["$a.b", 1]})), None);
        assert!(!Expr::parse(&bson::bson!(["$a"]))
            .unwrap()
            .reads_fields_only());
        assert!(Expr::parse(&bson::bson!({"k": "$a", "n": {"m": 1}}))
            .unwrap()
            .reads_fields_only());
    }

    proptest::proptest! {
        #[test]
        fn raw_field_paths_are_the_decoded_values(
            fields in proptest::collection::vec(
                (crate::query::raw_fields::arbitrary::name(), crate::query::raw_fields::arbitrary::stored()),
                0..5,
            ),
            path in proptest::prop_oneof![
                proptest::strategy::Just("$a"),
                proptest::strategy::Just("$a.b"),
                proptest::strategy::Just("$a.0"),
                proptest::strategy::Just("$b.c.a"),
                proptest::strategy::Just("$0"),
            ],
        ) {
            let raw = crate::query::raw_fields::arbitrary::Stored::document(fields);
            let decoded = Document::try_from(raw.as_ref()).unwrap();
            for expr in [Bson::from(path), bson::bson!({"x": path, "y": "$b", "z": 1}), Bson::Int32(7)] {
                let e = Expr::parse(&expr).unwrap();
                if let Some(v) = e.evaluate_raw(&raw) {
                    let v = match v {
                        RawValue::Missing => None,
                        RawValue::Field(f) => Some(Bson::try_from(f).unwrap()),
                        RawValue::Built(b) => Some(b.into_owned()),
                    };
                    // Debug output, so that NaN equals NaN.
                    proptest::prop_assert_eq!(
                        format!("{v:?}"),
                        format!("{:?}", e.evaluate_value(&decoded).unwrap())
                    );
                }
            }
        }
    }

    fn ev(expr: Bson) -> Bson {
        eval_on(expr, doc! {}).unwrap()
    }

    fn dec(s: &str) -> Bson {
        Bson::Decimal128(bson::Decimal128::from_str(s).unwrap())
    }

    #[test]
    fn operator_table_is_sorted() {
        let names: Vec<_> = operator_names().collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
    }

    #[test]
    fn field_paths_and_variables() {
        let root = doc! {"a": {"b": 5}, "arr": [{"x": 1}, {"y": 2}, {"x": 3}, 7, [{"x": 9}]]};
        assert_eq!(
            eval_on(Bson::from("$a.b"), root.clone()).unwrap(),
            Bson::Int32(5)
        );
        assert_eq!(
            eval_on(Bson::from("$arr.x"), root.clone()).unwrap(),
            Bson::Array(vec![1.into(), 3.into()])
        );
        assert_eq!(
            eval_on(Bson::from("$$ROOT.a.b"), root.clone()).unwrap(),
            Bson::Int32(5)
        );
        assert_eq!(
            eval_on(Bson::from("$$CURRENT"), doc! {"q": 1}).unwrap(),
            Bson::Document(doc! {"q": 1})
        );
        let missing = Expr::parse(&Bson::from("$nope")).unwrap();
        assert_eq!(missing.evaluate_value(&root).unwrap(), None);
        assert_eq!(missing.evaluate(&root).unwrap(), Bson::Null);
        assert_eq!(ev(Bson::from("$$REMOVE")), Bson::Null);
        let e = Expr::parse(&Bson::from("$$x")).unwrap();
        assert_eq!(
            e.evaluate_with_vars(&doc! {}, &doc! {"x": {"y": 2}})
                .unwrap(),
            Some(Bson::Document(doc! {"y": 2}))
        );
        assert!(e.evaluate(&doc! {}).is_err());
        assert!(Expr::parse(&Bson::from("$")).is_err());
        assert!(Expr::parse(&Bson::from("$a..b")).is_err());
        assert!(Expr::parse(&Bson::from("$$FOO")).is_err());
    }

    #[test]
    fn literals_arrays_objects() {
        assert_eq!(ev(Bson::from(5)), Bson::Int32(5));
        assert_eq!(
            ev(Bson::Document(doc! {"$literal": "$a"})),
            Bson::String("$a".into())
        );
        assert_eq!(
            eval_on(
                Bson::Array(vec!["$a".into(), "$missing".into()]),
                doc! {"a": 1}
            )
            .unwrap(),
            Bson::Array(vec![1.into(), Bson::Null])
        );
        assert_eq!(
            eval_on(
                Bson::Document(doc! {"x": "$a", "y": "$missing"}),
                doc! {"a": 1}
            )
            .unwrap(),
            Bson::Document(doc! {"x": 1})
        );
        assert!(Expr::parse(&Bson::Document(doc! {"$add": [1], "b": 1})).is_err());
        assert!(Expr::parse(&Bson::Document(doc! {"$foo": 1})).is_err());
        assert!(Expr::parse(&Bson::Document(doc! {"a.b": 1})).is_err());
    }

    #[test]
    fn comparisons_use_full_order() {
        assert_eq!(
            ev(Bson::Document(doc! {"$eq": [1, 1.0]})),
            Bson::Boolean(true)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$gt": ["a", 5]})),
            Bson::Boolean(true)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$lt": [null, 0]})),
            Bson::Boolean(true)
        );
        assert_eq!(ev(Bson::Document(doc! {"$cmp": [2, 1]})), Bson::Int32(1));
        assert_eq!(
            ev(Bson::Document(doc! {"$cmp": ["a", "b"]})),
            Bson::Int32(-1)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$ne": [[1], [1]]})),
            Bson::Boolean(false)
        );
        // Missing is not null.
        assert_eq!(
            ev(Bson::Document(doc! {"$eq": ["$missing", null]})),
            Bson::Boolean(false)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$lt": ["$missing", null]})),
            Bson::Boolean(true)
        );
        let e = Expr::parse(&Bson::Document(doc! {"$eq": [1]})).unwrap_err();
        assert_eq!(e.code.number(), 16020);
        let e = Expr::parse(&Bson::Document(doc! {"$nope": 1})).unwrap_err();
        assert_eq!(e.code.number(), 168);
    }

    #[test]
    fn boolean_and_conditional() {
        assert_eq!(
            ev(Bson::Document(doc! {"$and": [1, "x", []]})),
            Bson::Boolean(true)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$and": [1, 0]})),
            Bson::Boolean(false)
        );
        assert_eq!(ev(Bson::Document(doc! {"$and": []})), Bson::Boolean(true));
        assert_eq!(
            ev(Bson::Document(doc! {"$or": [null, "$missing"]})),
            Bson::Boolean(false)
        );
        assert_eq!(ev(Bson::Document(doc! {"$not": [0]})), Bson::Boolean(true));
        assert_eq!(
            ev(Bson::Document(doc! {"$not": true})),
            Bson::Boolean(false)
        );
        // Short-circuit: the error in the second branch is never evaluated.
        assert_eq!(
            ev(Bson::Document(doc! {"$and": [false, {"$add": ["x"]}]})),
            Bson::Boolean(false)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$cond": [true, 1, 2]})),
            Bson::Int32(1)
        );
        assert_eq!(
            ev(Bson::Document(
                doc! {"$cond": {"if": 0, "then": 1, "else": 2}}
            )),
            Bson::Int32(2)
        );
        assert!(Expr::parse(&Bson::Document(doc! {"$cond": {"if": 0, "then": 1}})).is_err());
        assert!(Expr::parse(&Bson::Document(
            doc! {"$cond": {"if": 0, "then": 1, "else": 2, "x": 1}}
        ))
        .is_err());
        assert_eq!(
            eval_on(
                Bson::Document(doc! {"$ifNull": ["$a", "$b", 3]}),
                doc! {"a": null, "b": 2}
            )
            .unwrap(),
            Bson::Int32(2)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$ifNull": ["$a", null]})),
            Bson::Null
        );
        assert!(Expr::parse(&Bson::Document(doc! {"$ifNull": ["$a"]})).is_err());
    }

    #[test]
    fn truthiness() {
        for falsy in [
            Bson::Boolean(false),
            Bson::Null,
            Bson::Undefined,
            Bson::Int32(0),
            Bson::Int64(0),
            Bson::Double(-0.0),
            dec("0.00"),
        ] {
            assert!(!truthy(&falsy), "{falsy:?}");
        }
        for t in [
            Bson::String(String::new()),
            Bson::Array(vec![]),
            Bson::Double(f64::NAN),
            Bson::Int32(-1),
            dec("1E-10"),
        ] {
            assert!(truthy(&t), "{t:?}");
        }
    }

    #[test]
    fn arithmetic_promotion() {
        assert_eq!(ev(Bson::Document(doc! {"$add": [1, 2]})), Bson::Int32(3));
        assert_eq!(
            ev(Bson::Document(doc! {"$add": [i32::MAX, 1]})),
            Bson::Int64(2_147_483_648)
        );
        assert_eq!(ev(Bson::Document(doc! {"$add": [1, 2i64]})), Bson::Int64(3));
        assert_eq!(
            ev(Bson::Document(doc! {"$add": [i64::MAX, 1i64]})),
            Bson::Double(9_223_372_036_854_775_808.0)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$add": [1, 0.5]})),
            Bson::Double(1.5)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$add": [dec("0.1"), dec("0.2")]})),
            dec("0.3")
        );
        assert_eq!(ev(Bson::Document(doc! {"$add": []})), Bson::Int32(0));
        assert_eq!(ev(Bson::Document(doc! {"$add": [1, null]})), Bson::Null);
        assert_eq!(
            ev(Bson::Document(doc! {"$add": [1, "$missing"]})),
            Bson::Null
        );
        let date = Bson::DateTime(DateTime::from_millis(1000));
        assert_eq!(
            ev(Bson::Document(doc! {"$add": [date.clone(), 500, 0.6]})),
            Bson::DateTime(DateTime::from_millis(1501))
        );
        let e = eval_on(Bson::Document(doc! {"$add": [1, "x"]}), doc! {}).unwrap_err();
        assert_eq!(e.code, ErrorCode::AddNotNumericOrDate);
        assert!(e.message.contains("only supports numeric or date types"));
        assert!(eval_on(
            Bson::Document(doc! {"$add": [date.clone(), date.clone()]}),
            doc! {}
        )
        .is_err());

        assert_eq!(
            ev(Bson::Document(doc! {"$subtract": [5, 7]})),
            Bson::Int32(-2)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$subtract": [i32::MIN, 1]})),
            Bson::Int64(-2_147_483_649)
        );
        assert_eq!(
            ev(Bson::Document(
                doc! {"$subtract": [Bson::DateTime(DateTime::from_millis(5000)), date.clone()]}
            )),
            Bson::Int64(4000)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$subtract": [date.clone(), 1]})),
            Bson::DateTime(DateTime::from_millis(999))
        );
        assert!(eval_on(
            Bson::Document(doc! {"$subtract": [1, date.clone()]}),
            doc! {}
        )
        .is_err());

        assert_eq!(
            ev(Bson::Document(doc! {"$multiply": [3, 4]})),
            Bson::Int32(12)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$multiply": [i32::MAX, 2]})),
            Bson::Int64(4_294_967_294)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$multiply": [2, 1.5]})),
            Bson::Double(3.0)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$multiply": [i64::MAX, 2i64]})),
            Bson::Double(1.8446744073709552e19)
        );

        assert_eq!(
            ev(Bson::Document(doc! {"$divide": [1, 4]})),
            Bson::Double(0.25)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$divide": [dec("1"), 4]})),
            dec("0.25")
        );
        let e = eval_on(Bson::Document(doc! {"$divide": [1, 0]}), doc! {}).unwrap_err();
        assert!(e.message.contains("divide by zero"));
        assert_eq!(e.code.number(), 16608);

        assert_eq!(ev(Bson::Document(doc! {"$mod": [7, 3]})), Bson::Int32(1));
        assert_eq!(ev(Bson::Document(doc! {"$mod": [-7, 3]})), Bson::Int32(-1));
        assert_eq!(ev(Bson::Document(doc! {"$mod": [7i64, 3]})), Bson::Int64(1));
        assert_eq!(
            ev(Bson::Document(doc! {"$mod": [7.5, 2]})),
            Bson::Double(1.5)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$mod": [i64::MIN, -1i64]})),
            Bson::Int64(0)
        );
        assert!(eval_on(Bson::Document(doc! {"$mod": [1, 0]}), doc! {}).is_err());

        assert_eq!(ev(Bson::Document(doc! {"$abs": -5})), Bson::Int32(5));
        assert_eq!(
            ev(Bson::Document(doc! {"$abs": i32::MIN})),
            Bson::Int64(2_147_483_648)
        );
        assert_eq!(ev(Bson::Document(doc! {"$abs": dec("-1.5")})), dec("1.5"));
        assert_eq!(ev(Bson::Document(doc! {"$abs": null})), Bson::Null);
        assert!(eval_on(Bson::Document(doc! {"$abs": i64::MIN}), doc! {}).is_err());
        assert!(eval_on(Bson::Document(doc! {"$abs": "x"}), doc! {}).is_err());
    }

    #[test]
    fn in_size_type() {
        assert_eq!(
            ev(Bson::Document(doc! {"$in": [2, [1, 2.0]]})),
            Bson::Boolean(true)
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$in": [3, [1, 2]]})),
            Bson::Boolean(false)
        );
        assert!(eval_on(Bson::Document(doc! {"$in": [3, "$missing"]}), doc! {}).is_err());
        assert_eq!(
            ev(Bson::Document(doc! {"$size": [[1, 2, 3]]})),
            Bson::Int32(3)
        );
        assert_eq!(
            eval_on(Bson::Document(doc! {"$size": "$a"}), doc! {"a": [1]}).unwrap(),
            Bson::Int32(1)
        );
        assert!(eval_on(Bson::Document(doc! {"$size": "$a"}), doc! {"a": 1}).is_err());
        assert_eq!(
            ev(Bson::Document(doc! {"$type": "$missing"})),
            Bson::String("missing".into())
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$type": 1i64})),
            Bson::String("long".into())
        );
        assert_eq!(
            ev(Bson::Document(doc! {"$type": [[]]})),
            Bson::String("array".into())
        );
    }

    #[test]
    fn truthy_evaluation_without_copy() {
        let e = Expr::parse(&Bson::Document(doc! {"$gt": ["$a", 1]})).unwrap();
        assert!(e.evaluate_truthy(&doc! {"a": 2}).unwrap());
        assert!(!e.evaluate_truthy(&doc! {"a": 0}).unwrap());
        assert!(!Expr::parse(&Bson::from("$x"))
            .unwrap()
            .evaluate_truthy(&doc! {})
            .unwrap());
        assert!(!e.is_constant());
        assert!(Expr::parse(&Bson::Document(doc! {"$add": [1, 2]}))
            .unwrap()
            .is_constant());
    }

    /// The error code an expression fails with over `root`.
    fn code_on(expr: Bson, root: &Document) -> i32 {
        match Expr::parse(&expr).and_then(|e| e.evaluate(root)) {
            Ok(v) => panic!("{expr}: expected an error, got a value of {} bytes", {
                crate::query::size::bson_size(&v)
            }),
            Err(e) => e.code.number(),
        }
    }

    #[test]
    fn growing_strings_stop_at_the_limit() {
        // Doubling a string 30 times asked for 2 GB and aborted the process.
        let doubling = bson::bson!({"$reduce": {
            "input": {"$range": [0, 30]},
            "initialValue": "ab",
            "in": {"$concat": ["$$value", "$$value"]},
        }});
        assert_eq!(code_on(doubling, &doc! {}), 16493);
        let big = doc! {"s": "x".repeat(9 * 1024 * 1024)};
        assert_eq!(code_on(bson::bson!({"$concat": ["$s", "$s"]}), &big), 16493);
        // An empty `find` matches between every character.
        let replace = bson::bson!({"$replaceAll": {
            "input": {"$substrBytes": ["$s", 0, 1_000_000]}, "find": "", "replacement": "abcdefghijklmnopq",
        }});
        assert_eq!(code_on(replace, &big), 16493);
        let format = bson::bson!({"$dateToString": {"date": "$$NOW", "format": {
            "$reduce": {"input": {"$range": [0, 22]}, "initialValue": "%z", "in": {"$concat": ["$$value", "$$value"]}},
        }}});
        assert_eq!(code_on(format, &doc! {}), 16493);
        // A string just under the limit is fine.
        let ok = doc! {"s": "x".repeat(crate::query::size::MAX_STRING_BYTES - 1)};
        let v = Expr::parse(&bson::bson!({"$concat": ["$s", "y"]}))
            .unwrap()
            .evaluate(&ok)
            .unwrap();
        assert_eq!(
            crate::query::size::bson_size(&v),
            5 + crate::query::size::MAX_STRING_BYTES
        );
    }

    #[test]
    fn growing_arrays_and_documents_stop_at_the_limit() {
        let root = doc! {"s": "x".repeat(3 * 1024 * 1024), "a": (0..1000).collect::<Vec<i32>>()};
        let cases = [
            // Literal arrays and objects of large values.
            bson::bson!(["$s", "$s", "$s", "$s", "$s", "$s"]),
            bson::bson!({"a": "$s", "b": "$s", "c": "$s", "d": "$s", "e": "$s", "f": "$s"}),
            bson::bson!({"$concatArrays": [["$s", "$s", "$s"], ["$s", "$s", "$s"]]}),
            bson::bson!({"$map": {"input": "$a", "in": "$$ROOT"}}),
            bson::bson!({"$zip": {"inputs": ["$a", []], "useLongestLength": true, "defaults": [0, "$s"]}}),
            bson::bson!({"$mergeObjects": [{"a": "$s"}, {"b": "$s"}, {"c": "$s"}, {"d": "$s"}, {"e": "$s"}, {"f": "$s"}]}),
            bson::bson!({"$setField": {"field": "x", "input": {"a": "$s", "b": "$s", "c": "$s", "d": "$s", "e": "$s"}, "value": "$s"}}),
            bson::bson!({"$arrayToObject": [[["a", "$s"], ["b", "$s"], ["c", "$s"], ["d", "$s"], ["e", "$s"], ["f", "$s"]]]}),
            bson::bson!({"$split": [{"$substrBytes": ["$s", 0, 2_000_000]}, "x"]}),
            bson::bson!({"$regexFindAll": {"input": {"$substrBytes": ["$s", 0, 1_000_000]}, "regex": ""}}),
            bson::bson!({"$regexFind": {"input": "$s", "regex": "((((((x*))))))"}}),
            bson::bson!({"$range": [0, 2_000_000]}),
            // The same array doubled until it is too large.
            bson::bson!({"$reduce": {"input": {"$range": [0, 40]}, "initialValue": ["x"], "in": {"$concatArrays": ["$$value", "$$value"]}}}),
        ];
        for case in cases {
            assert_eq!(code_on(case.clone(), &root), 10334, "{case}");
        }
        // Replacing a field does not count it twice.
        let v = Expr::parse(&bson::bson!({"$mergeObjects": [{"a": "$s"}, {"a": "$s"}, {"a": "$s"}, {"a": "$s"}, {"a": "$s"}, {"a": "$s"}]}))
            .unwrap()
            .evaluate(&root)
            .unwrap();
        assert_eq!(v.as_document().map(Document::len), Some(1));
    }

    #[test]
    fn ranges_and_nesting_have_mongodb_limits() {
        let e = Expr::parse(&bson::bson!({"$range": [0, 7_000_000]}))
            .unwrap()
            .evaluate(&doc! {})
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::ExceededMemoryLimit);
        assert_eq!(
            e.message,
            "$range would use too much memory (112000040 bytes) and cannot spill to disk. \
             Memory limit: 104857600 bytes"
        );
        // Nesting one level per element would build a value deeper than any
        // recursion can copy or drop.
        let nest = bson::bson!({"$reduce": {"input": {"$range": [0, 100_000]}, "initialValue": [], "in": ["$$value"]}});
        assert_eq!(code_on(nest, &doc! {}), 15);
        let nest = bson::bson!({"$reduce": {"input": {"$range": [0, 100_000]}, "initialValue": {}, "in": {"a": "$$value"}}});
        assert_eq!(code_on(nest, &doc! {}), 15);
    }

    #[test]
    fn substring_search_is_linear() {
        // Comparing at every position made this take about 10^12 steps.
        let root = doc! {
            "s": format!("{}b", "a".repeat(4 * 1024 * 1024)),
            "t": format!("{}b", "a".repeat(2 * 1024 * 1024)),
            "u": "héllo wörld",
        };
        let at = |expr: Bson| Expr::parse(&expr).unwrap().evaluate(&root).unwrap();
        let expected = Bson::Int32(2 * 1024 * 1024);
        assert_eq!(at(bson::bson!({"$indexOfBytes": ["$s", "$t"]})), expected);
        assert_eq!(at(bson::bson!({"$indexOfCP": ["$s", "$t"]})), expected);
        // Positions in code points and in bytes, with bounds.
        assert_eq!(at(bson::bson!({"$indexOfCP": ["$u", "ö"]})), Bson::Int32(7));
        assert_eq!(
            at(bson::bson!({"$indexOfBytes": ["$u", "ö"]})),
            Bson::Int32(8)
        );
        assert_eq!(
            at(bson::bson!({"$indexOfBytes": ["$u", "l", 2]})),
            Bson::Int32(3)
        );
        assert_eq!(
            at(bson::bson!({"$indexOfBytes": ["$u", "ll", 2, 4]})),
            Bson::Int32(-1)
        );
        assert_eq!(
            at(bson::bson!({"$indexOfCP": ["$u", "o", 5, 9]})),
            Bson::Int32(-1)
        );
        assert_eq!(
            at(bson::bson!({"$indexOfCP": ["$u", "", 4]})),
            Bson::Int32(4)
        );
    }

    #[test]
    fn array_operators_are_linear_over_100k_elements() {
        let n = 100_000;
        let root = doc! {
            "a": (0..n).collect::<Vec<i32>>(),
            "b": (0..n).map(|i| i * 2).collect::<Vec<i32>>(),
        };
        let len = |expr: Bson| -> usize {
            match Expr::parse(&expr).unwrap().evaluate(&root).unwrap() {
                Bson::Array(items) => items.len(),
                other => panic!("{expr}: {other}"),
            }
        };
        assert_eq!(len(bson::bson!({"$setUnion": ["$a", "$b"]})), 150_000);
        assert_eq!(len(bson::bson!({"$setIntersection": ["$a", "$b"]})), 50_000);
        assert_eq!(len(bson::bson!({"$setDifference": ["$a", "$b"]})), 50_000);
        assert_eq!(len(bson::bson!({"$concatArrays": ["$a", "$b"]})), 200_000);
        assert_eq!(
            len(bson::bson!({"$filter": {"input": "$a", "cond": {"$gte": ["$$this", 50_000]}}})),
            50_000
        );
        assert_eq!(
            len(bson::bson!({"$map": {"input": "$a", "in": {"$add": ["$$this", 1]}}})),
            100_000
        );
        assert_eq!(len(bson::bson!({"$slice": ["$a", 10, 99_000]})), 99_000);
        assert_eq!(len(bson::bson!({"$reverseArray": "$a"})), 100_000);
        assert_eq!(
            len(bson::bson!({"$sortArray": {"input": "$b", "sortBy": -1}})),
            100_000
        );
        assert_eq!(
            len(bson::bson!({"$zip": {"inputs": ["$a", "$b"]}})),
            100_000
        );
        assert_eq!(
            len(bson::bson!({"$lastN": {"n": 99_999, "input": "$a"}})),
            99_999
        );
        assert_eq!(
            len(
                bson::bson!({"$objectToArray": {"$arrayToObject": {"$map": {"input": "$a", "in": [{"$toString": "$$this"}, "$$this"]}}}})
            ),
            100_000
        );
        assert_eq!(
            Expr::parse(&bson::bson!({"$setEquals": ["$a", {"$reverseArray": "$a"}]}))
                .unwrap()
                .evaluate(&root)
                .unwrap(),
            Bson::Boolean(true)
        );
    }
}

#[cfg(test)]
mod rand_tests {
    use super::*;
    use bson::doc;

    fn parse(arg: Bson) -> Result<Expr> {
        Expr::parse(&Bson::Document(doc! {"$rand": arg}))
    }

    #[test]
    fn rand_is_a_fresh_double_in_the_unit_interval() {
        let e = parse(Bson::Document(doc! {})).unwrap();
        assert!(!e.is_constant() && e.uses_rand());
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let Bson::Double(x) = e.evaluate(&doc! {}).unwrap() else {
                panic!("not a double");
            };
            assert!((0.0..1.0).contains(&x));
            seen.insert(x.to_bits());
        }
        assert!(seen.len() > 990);
        // An empty array is the same call; inside another expression too.
        assert!(parse(Bson::Array(vec![])).is_ok());
        let e = Expr::parse(&Bson::Document(doc! {"$multiply": [{"$rand": {}}, 10]})).unwrap();
        assert!(!e.is_constant());
        assert!(!Expr::parse(&Bson::Int32(1)).unwrap().uses_rand());
    }

    #[test]
    fn rand_refuses_arguments() {
        for (arg, code, message) in [
            (
                Bson::Document(doc! {"x": 1}),
                3040501,
                "$rand does not currently accept arguments",
            ),
            (
                Bson::Array(vec![Bson::Int32(1)]),
                3040501,
                "$rand does not currently accept arguments",
            ),
            (
                Bson::Int32(1),
                10065,
                "invalid parameter: expected an object ($rand)",
            ),
            (
                Bson::Null,
                10065,
                "invalid parameter: expected an object ($rand)",
            ),
        ] {
            let e = parse(arg.clone()).unwrap_err();
            assert_eq!(
                (e.code.number(), e.message.as_str()),
                (code, message),
                "{arg}"
            );
        }
    }
}
