//! `$jsonSchema`: MongoDB's JSON Schema (draft 4 with `bsonType`) as a
//! filter operator, parsed once and matched against whole documents.
//!
//! MongoDB translates a schema into match expressions; this module keeps
//! the keywords instead and gives each the meaning that translation has:
//!
//! - A keyword that constrains one type (`minimum` numbers, `minLength`
//!   strings, `minItems` arrays, `required` objects, ...) holds for values
//!   of other types and for missing values. When the schema states exactly
//!   one type and it is not the keyword's, the keyword is dropped at parse
//!   time, as MongoDB drops it (it cannot fail without the type failing too,
//!   and it never shows in failure details).
//! - `type` and `bsonType` look at the value itself: an array is not
//!   traversed, and a missing value has no type. JSON Schema semantics, not
//!   the query language's implicit array traversal, apply everywhere.
//! - The top-level schema applies to the document. Keywords about scalars
//!   and arrays have no effect there, `type` only matters when it excludes
//!   `object` (then nothing matches), and `enum` compares whole documents.
//!   Schemas under `allOf`, `anyOf`, `oneOf`, `not` and `dependencies` stay
//!   at the level of the schema holding them.
//! - `enum`, `uniqueItems` and duplicate checks compare documents without
//!   regard to field order, like MongoDB's unordered comparator.
//!
//! Keywords are kept in the order MongoDB evaluates (and reports) them:
//! string and number keywords, array keywords, object keywords, logical
//! keywords, then the type. [`super::details`] walks the same structure to
//! explain a failure.

use std::borrow::Cow;
use std::cmp::Ordering;

use bson::{doc, Bson, Document};

use super::{compare_matches, CmpOp, QueryRegex, TypeSet, TYPE_ALIASES};
use crate::error::Result;
use crate::query::compare::{compare, f64_fits_i64, type_name, DecimalValue, Number};
use crate::query::path::field;
use crate::query::regex::compile_regex;

/// A parsed schema: one level of keywords.
#[derive(Debug, Clone)]
pub(super) struct Schema {
    /// `title` and `description`, which failure details repeat.
    pub(super) annotations: Document,
    /// `type` or `bsonType`; checked after every other keyword.
    pub(super) stated_type: Option<StatedType>,
    pub(super) keywords: Vec<Keyword>,
    /// A top-level schema whose type excludes `object`: matches nothing.
    /// Holds the schema for the details (`{$jsonSchema: <schema>}`).
    pub(super) never: Option<Document>,
}

/// Whether a schema applies to the document itself or to a value in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    Top,
    Nested,
}

#[derive(Debug, Clone)]
pub(super) struct StatedType {
    /// `type` or `bsonType`, as the details name it.
    pub(super) keyword: &'static str,
    /// `{type: <as written>}`.
    pub(super) spec: Document,
    pub(super) types: TypeSet,
}

/// The type a keyword constrains; values of other types pass it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Applies {
    Number,
    String,
    Array,
    Object,
}

impl Applies {
    fn of(value: &Bson) -> Option<Applies> {
        match value {
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
                Some(Applies::Number)
            }
            Bson::String(_) => Some(Applies::String),
            Bson::Array(_) => Some(Applies::Array),
            Bson::Document(_) => Some(Applies::Object),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub(super) enum Keyword {
    Pattern {
        regex: Box<QueryRegex>,
        spec: Document,
    },
    MaxLength {
        limit: i64,
        spec: Document,
    },
    MinLength {
        limit: i64,
        spec: Document,
    },
    MultipleOf {
        divisor: DecimalValue,
        spec: Document,
    },
    Maximum {
        limit: Bson,
        exclusive: bool,
        spec: Document,
    },
    Minimum {
        limit: Bson,
        exclusive: bool,
        spec: Document,
    },
    MinItems {
        limit: i64,
        spec: Document,
    },
    MaxItems {
        limit: i64,
        spec: Document,
    },
    UniqueItems {
        spec: Document,
    },
    /// `items: {schema}`: every element.
    Items {
        schema: Box<Schema>,
    },
    /// `items: [schemas]`: element `i` against schema `i`.
    ItemsTuple {
        schemas: Vec<Schema>,
    },
    /// `additionalItems` after an `items` array of `start` schemas.
    AdditionalItems {
        start: usize,
        rule: Additional,
        spec: Document,
    },
    Properties {
        properties: Vec<Property>,
    },
    /// `patternProperties` and `additionalProperties`, which MongoDB
    /// checks (and reports) together.
    AllowedProperties {
        names: Vec<String>,
        patterns: Vec<PatternProperty>,
        additional: Additional,
    },
    Required {
        /// Sorted, as MongoDB reports missing properties.
        names: Vec<String>,
        spec: Document,
    },
    MinProperties {
        limit: i64,
        spec: Document,
    },
    MaxProperties {
        limit: i64,
        spec: Document,
    },
    Dependencies {
        dependencies: Vec<Dependency>,
        /// `title` and `description` written inside `dependencies`.
        annotations: Document,
    },
    AllOf(Vec<Schema>),
    AnyOf(Vec<Schema>),
    OneOf(Vec<Schema>),
    Not(Box<Schema>),
    Enum {
        /// With their fields sorted. At the top level, only the documents
        /// (other values can never equal one); none there matches nothing.
        values: Vec<Bson>,
        spec: Document,
    },
}

impl Keyword {
    /// The type this keyword constrains, `None` for keywords that apply
    /// to every value.
    pub(super) fn applies_to(&self) -> Option<Applies> {
        Some(match self {
            Keyword::Pattern { .. } | Keyword::MaxLength { .. } | Keyword::MinLength { .. } => {
                Applies::String
            }
            Keyword::MultipleOf { .. } | Keyword::Maximum { .. } | Keyword::Minimum { .. } => {
                Applies::Number
            }
            Keyword::MinItems { .. }
            | Keyword::MaxItems { .. }
            | Keyword::UniqueItems { .. }
            | Keyword::Items { .. }
            | Keyword::ItemsTuple { .. }
            | Keyword::AdditionalItems { .. } => Applies::Array,
            Keyword::Properties { .. }
            | Keyword::AllowedProperties { .. }
            | Keyword::Required { .. }
            | Keyword::MinProperties { .. }
            | Keyword::MaxProperties { .. }
            | Keyword::Dependencies { .. } => Applies::Object,
            Keyword::AllOf(_)
            | Keyword::AnyOf(_)
            | Keyword::OneOf(_)
            | Keyword::Not(_)
            | Keyword::Enum { .. } => return None,
        })
    }
}

/// What `additionalItems` or `additionalProperties` asks of the rest.
#[derive(Debug, Clone)]
pub(super) enum Additional {
    Allowed,
    Forbidden,
    Schema(Box<Schema>),
}

#[derive(Debug, Clone)]
pub(super) struct Property {
    pub(super) name: String,
    pub(super) required: bool,
    pub(super) schema: Schema,
}

#[derive(Debug, Clone)]
pub(super) struct PatternProperty {
    pub(super) pattern: String,
    /// `None` for a pattern that does not compile: MongoDB accepts it and
    /// it matches no property name.
    pub(super) regex: Option<regex::Regex>,
    pub(super) schema: Schema,
}

impl PatternProperty {
    pub(super) fn matches_name(&self, name: &str) -> bool {
        self.regex.as_ref().is_some_and(|r| r.is_match(name))
    }
}

#[derive(Debug, Clone)]
pub(super) struct Dependency {
    pub(super) property: String,
    pub(super) requires: Requires,
}

#[derive(Debug, Clone)]
pub(super) enum Requires {
    Schema(Box<Schema>),
    Properties(Vec<String>),
}

/// What a keyword is checked against: the document (top level) or a
/// value that may be missing.
#[derive(Debug, Clone, Copy)]
pub(super) enum Subject<'a> {
    Document(&'a Document),
    Value(Option<&'a Bson>),
}

impl<'a> Subject<'a> {
    pub(super) fn object(self) -> Option<&'a Document> {
        match self {
            Subject::Document(d) | Subject::Value(Some(Bson::Document(d))) => Some(d),
            Subject::Value(_) => None,
        }
    }

    fn value(self) -> Option<&'a Bson> {
        match self {
            Subject::Value(v) => v,
            Subject::Document(_) => None,
        }
    }
}

// ---------------------------------------------------------------------------
// Parsing.

/// Keywords MongoDB knows; anything else is an unknown keyword.
const KEYWORDS: &[&str] = &[
    "additionalItems",
    "additionalProperties",
    "allOf",
    "anyOf",
    "bsonType",
    "dependencies",
    "description",
    "encrypt",
    "encryptMetadata",
    "enum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "items",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "multipleOf",
    "not",
    "oneOf",
    "pattern",
    "patternProperties",
    "properties",
    "required",
    "title",
    "type",
    "uniqueItems",
];

/// JSON Schema keywords MongoDB refuses by name.
const UNSUPPORTED: &[&str] = &["$ref", "$schema", "default", "definitions", "format", "id"];

/// JSON Schema's types (`type`); `number` is every numeric BSON type.
const JSON_TYPES: &[(&str, i32)] = &[
    ("array", 4),
    ("boolean", 8),
    ("null", 10),
    ("object", 3),
    ("string", 2),
];

/// Parses the argument of `$jsonSchema`.
pub(super) fn parse(arg: &Bson) -> Result<Schema> {
    let Bson::Document(schema) = arg else {
        crate::bail!(TypeMismatch, "$jsonSchema must be an object");
    };
    parse_schema(schema, Level::Top)
}

/// One schema level, checked in MongoDB's order so that the first error
/// reported is the one MongoDB reports.
fn parse_schema(schema: &Document, level: Level) -> Result<Schema> {
    for key in schema.keys() {
        if UNSUPPORTED.contains(&key.as_str()) {
            crate::bail!(
                FailedToParse,
                "$jsonSchema keyword '{key}' is not currently supported"
            );
        }
        if !KEYWORDS.contains(&key.as_str()) {
            crate::bail!(FailedToParse, "Unknown $jsonSchema keyword: {key}");
        }
    }
    let annotations = parse_annotations(schema)?;
    let stated_type = parse_stated_type(schema)?;
    let single = stated_type.as_ref().and_then(|t| t.single);
    let mut keywords = Vec::new();
    parse_scalar_keywords(schema, level, &mut keywords)?;
    parse_array_keywords(schema, level, &mut keywords)?;
    refuse_encryption(schema)?;
    parse_object_keywords(schema, level, &mut keywords)?;
    parse_logical_keywords(schema, level, &mut keywords)?;
    // A keyword for another type than the one stated can only fail where
    // the type fails: MongoDB drops it, and so do we.
    keywords.retain(|k| match (k.applies_to(), single) {
        (Some(applies), Some(stated)) => stated == Some(applies),
        _ => true,
    });
    let stated_type = stated_type.map(|t| t.stated);
    let never = (level == Level::Top
        && stated_type
            .as_ref()
            .is_some_and(|t| !t.types.contains_code(3)))
    .then(|| schema.clone());
    Ok(Schema {
        annotations,
        stated_type,
        keywords,
        never,
    })
}

/// `description` then `title` must be strings; details carry them as
/// `title` then `description`.
fn parse_annotations(schema: &Document) -> Result<Document> {
    for keyword in ["description", "title"] {
        if schema
            .get(keyword)
            .is_some_and(|v| !matches!(v, Bson::String(_)))
        {
            crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword '{keyword}' must be of type string"
            );
        }
    }
    Ok(annotations_of(schema))
}

/// The `title` and `description` strings of a schema (or of a
/// `dependencies` object), in that order.
fn annotations_of(schema: &Document) -> Document {
    let mut out = Document::new();
    for keyword in ["title", "description"] {
        if let Some(Bson::String(s)) = schema.get(keyword) {
            out.insert(keyword, s.clone());
        }
    }
    out
}

struct ParsedType {
    stated: StatedType,
    /// `Some` when exactly one type is stated (`number` counting as one):
    /// the type-specific keywords that survive are that type's, none when
    /// no keyword constrains it (`bool`).
    single: Option<Option<Applies>>,
}

fn parse_stated_type(schema: &Document) -> Result<Option<ParsedType>> {
    let type_arg = schema.get("type");
    let bson_type_arg = schema.get("bsonType");
    let encrypt = schema.contains_key("encrypt");
    let (keyword, arg) = match (type_arg, bson_type_arg) {
        (Some(_), Some(_)) => crate::bail!(
            FailedToParse,
            "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'"
        ),
        (Some(arg), None) => ("type", arg),
        (None, Some(arg)) => ("bsonType", arg),
        (None, None) => return Ok(None),
    };
    if encrypt {
        crate::bail!(
            FailedToParse,
            "$jsonSchema keyword 'encrypt' cannot be used in conjunction with '{keyword}', \
             'encrypt' implies type 'bsonType::BinData'"
        );
    }
    let aliases = type_aliases(keyword, arg)?;
    let mut bits = 0u32;
    let mut codes: Vec<i32> = Vec::new();
    let mut all_numbers = false;
    for alias in &aliases {
        if alias == "number" {
            all_numbers = true;
            bits |= TypeSet::NUMBER_BITS;
            continue;
        }
        let code = if keyword == "type" {
            JSON_TYPES.iter().find(|(name, _)| name == alias)
        } else {
            TYPE_ALIASES.iter().find(|(name, _)| name == alias)
        };
        let Some((_, code)) = code else {
            if alias == "missing" {
                crate::bail!(
                    BadValue,
                    "'missing' is not a legal type name. To query for non-existence of a \
                     field, use {{$exists:false}}."
                );
            }
            crate::bail!(BadValue, "Unknown type name alias: {alias}");
        };
        bits |= TypeSet::bit_for_code(*code).unwrap_or(0);
        if !codes.contains(code) {
            codes.push(*code);
        }
    }
    if bits == 0 {
        crate::bail!(
            FailedToParse,
            "$jsonSchema keyword '{keyword}' must name at least one type"
        );
    }
    let single = match (all_numbers, codes.as_slice()) {
        (true, []) => Some(Some(Applies::Number)),
        (false, [code]) => Some(match code {
            1 | 16 | 18 | 19 => Some(Applies::Number),
            2 => Some(Applies::String),
            3 => Some(Applies::Object),
            4 => Some(Applies::Array),
            _ => None,
        }),
        _ => None,
    };
    Ok(Some(ParsedType {
        stated: StatedType {
            keyword,
            spec: doc! { keyword: arg.clone() },
            types: TypeSet { bits },
        },
        single,
    }))
}

/// The type names of `type`/`bsonType`: a string or an array of distinct
/// strings; `integer` is refused.
fn type_aliases(keyword: &str, arg: &Bson) -> Result<Vec<String>> {
    let refuse_integer = |alias: &str| -> Result<()> {
        if alias == "integer" {
            crate::bail!(
                FailedToParse,
                "$jsonSchema type 'integer' is not currently supported."
            );
        }
        Ok(())
    };
    match arg {
        Bson::String(alias) => {
            refuse_integer(alias)?;
            Ok(vec![alias.clone()])
        }
        Bson::Array(items) => {
            let mut aliases: Vec<String> = Vec::with_capacity(items.len());
            for item in items {
                let Bson::String(alias) = item else {
                    crate::bail!(
                        TypeMismatch,
                        "$jsonSchema keyword '{keyword}' array elements must be strings"
                    );
                };
                refuse_integer(alias)?;
                if aliases.contains(alias) {
                    crate::bail!(
                        FailedToParse,
                        "$jsonSchema keyword '{keyword}' has duplicate value: {alias}"
                    );
                }
                aliases.push(alias.clone());
            }
            Ok(aliases)
        }
        _ => crate::bail!(
            TypeMismatch,
            "$jsonSchema keyword '{keyword}' must be either a string or an array of strings"
        ),
    }
}

/// `{keyword: value}`, the `specifiedAs` of most keywords.
fn spec(keyword: &str, value: &Bson) -> Document {
    doc! { keyword: value.clone() }
}

/// `pattern`, `maxLength`, `minLength`, `multipleOf`, `maximum`,
/// `minimum`: their arguments are checked everywhere, and they only take
/// effect below the top level (MongoDB stores only documents).
fn parse_scalar_keywords(schema: &Document, level: Level, out: &mut Vec<Keyword>) -> Result<()> {
    let nested = level == Level::Nested;
    if let Some(arg) = schema.get("pattern") {
        let Bson::String(pattern) = arg else {
            crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword 'pattern' must be a string"
            );
        };
        let regex = QueryRegex::new(pattern, "")?;
        if nested {
            out.push(Keyword::Pattern {
                regex: Box::new(regex),
                spec: spec("pattern", arg),
            });
        }
    }
    if let Some(arg) = schema.get("maxLength") {
        let limit = non_negative_integer("maxLength", arg)?;
        if nested {
            out.push(Keyword::MaxLength {
                limit,
                spec: spec("maxLength", arg),
            });
        }
    }
    if let Some(arg) = schema.get("minLength") {
        let limit = non_negative_integer("minLength", arg)?;
        if nested {
            out.push(Keyword::MinLength {
                limit,
                spec: spec("minLength", arg),
            });
        }
    }
    if let Some(arg) = schema.get("multipleOf") {
        let Some(divisor) = Number::of(arg) else {
            crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword 'multipleOf' must be a number"
            );
        };
        let divisor = divisor.to_decimal();
        let positive = match divisor {
            DecimalValue::Finite { negative, .. } => !negative && !divisor.is_zero(),
            DecimalValue::Infinity { negative } => !negative,
            DecimalValue::NaN => true,
        };
        if !positive {
            crate::bail!(
                FailedToParse,
                "$jsonSchema keyword 'multipleOf' must have a positive value"
            );
        }
        if nested {
            out.push(Keyword::MultipleOf {
                divisor,
                spec: spec("multipleOf", arg),
            });
        }
    }
    for (keyword, exclusive_keyword) in [
        ("maximum", "exclusiveMaximum"),
        ("minimum", "exclusiveMinimum"),
    ] {
        let exclusive_arg = schema.get(exclusive_keyword);
        let Some(limit) = schema.get(keyword) else {
            if exclusive_arg.is_some() {
                crate::bail!(
                    FailedToParse,
                    "$jsonSchema keyword '{keyword}' must be a present if {exclusive_keyword} \
                     is present"
                );
            }
            continue;
        };
        let exclusive = match exclusive_arg {
            None => false,
            Some(Bson::Boolean(b)) => *b,
            Some(_) => crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword '{exclusive_keyword}' must be a boolean"
            ),
        };
        if Number::of(limit).is_none() {
            crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword '{keyword}' must be a number"
            );
        }
        if !nested {
            continue;
        }
        let mut spec = spec(keyword, limit);
        if exclusive {
            spec.insert(exclusive_keyword, true);
        }
        let limit = limit.clone();
        out.push(if keyword == "maximum" {
            Keyword::Maximum {
                limit,
                exclusive,
                spec,
            }
        } else {
            Keyword::Minimum {
                limit,
                exclusive,
                spec,
            }
        });
    }
    Ok(())
}

/// `minItems`, `maxItems`, `uniqueItems`, `items`, `additionalItems`.
fn parse_array_keywords(schema: &Document, level: Level, out: &mut Vec<Keyword>) -> Result<()> {
    let nested = level == Level::Nested;
    for keyword in ["minItems", "maxItems"] {
        if let Some(arg) = schema.get(keyword) {
            let limit = non_negative_integer(keyword, arg)?;
            let spec = spec(keyword, arg);
            if nested {
                out.push(if keyword == "minItems" {
                    Keyword::MinItems { limit, spec }
                } else {
                    Keyword::MaxItems { limit, spec }
                });
            }
        }
    }
    if let Some(arg) = schema.get("uniqueItems") {
        let Bson::Boolean(unique) = arg else {
            crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword 'uniqueItems' must be a boolean"
            );
        };
        if nested && *unique {
            out.push(Keyword::UniqueItems {
                spec: spec("uniqueItems", arg),
            });
        }
    }
    let mut tuple_length = None;
    if let Some(arg) = schema.get("items") {
        match arg {
            Bson::Array(items) => {
                let mut schemas = Vec::with_capacity(items.len());
                for item in items {
                    let Bson::Document(sub) = item else {
                        crate::bail!(
                            TypeMismatch,
                            "$jsonSchema keyword 'items' requires that each element of the \
                             array is an object, but found a {}",
                            type_name(item)
                        );
                    };
                    schemas.push(parse_schema(sub, Level::Nested)?);
                }
                tuple_length = Some(schemas.len());
                if nested {
                    out.push(Keyword::ItemsTuple { schemas });
                }
            }
            Bson::Document(sub) => {
                let schema = parse_schema(sub, Level::Nested)?;
                if nested {
                    out.push(Keyword::Items {
                        schema: Box::new(schema),
                    });
                }
            }
            other => crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword 'items' must be an array or an object, not {}",
                type_name(other)
            ),
        }
    }
    if let Some(arg) = schema.get("additionalItems") {
        let rule = match arg {
            Bson::Boolean(true) => Additional::Allowed,
            Bson::Boolean(false) => Additional::Forbidden,
            Bson::Document(sub) => Additional::Schema(Box::new(parse_schema(sub, Level::Nested)?)),
            other => crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword 'additionalItems' must be either an object or a boolean, \
                 but got a {}",
                type_name(other)
            ),
        };
        // Only an `items` array leaves items over.
        if let (true, Some(start)) = (nested, tuple_length) {
            if !matches!(rule, Additional::Allowed) {
                out.push(Keyword::AdditionalItems {
                    start,
                    rule,
                    spec: spec("additionalItems", arg),
                });
            }
        }
    }
    Ok(())
}

/// Client-side field level encryption is not offered.
fn refuse_encryption(schema: &Document) -> Result<()> {
    for keyword in ["encrypt", "encryptMetadata"] {
        if schema.contains_key(keyword) {
            crate::bail!(
                FailedToParse,
                "$jsonSchema keyword '{keyword}' is not currently supported"
            );
        }
    }
    Ok(())
}

/// `required`, `properties`, `patternProperties`, `additionalProperties`,
/// `minProperties`, `maxProperties`, `dependencies`.
fn parse_object_keywords(schema: &Document, level: Level, out: &mut Vec<Keyword>) -> Result<()> {
    let required = match schema.get("required") {
        Some(arg) => Some((parse_required(arg)?, arg)),
        None => None,
    };
    let is_required = |name: &str| {
        required
            .as_ref()
            .is_some_and(|(names, _)| names.iter().any(|n| n == name))
    };
    let mut property_names: Vec<String> = Vec::new();
    if let Some(arg) = schema.get("properties") {
        let Bson::Document(properties) = arg else {
            crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword 'properties' must be an object"
            );
        };
        let mut parsed = Vec::with_capacity(properties.len());
        for (name, sub) in properties {
            let Bson::Document(sub) = sub else {
                crate::bail!(
                    TypeMismatch,
                    "Nested schema for $jsonSchema property '{name}' must be an object"
                );
            };
            parsed.push(Property {
                name: name.clone(),
                required: is_required(name),
                schema: parse_schema(sub, Level::Nested)?,
            });
            property_names.push(name.clone());
        }
        out.push(Keyword::Properties { properties: parsed });
    }
    let pattern_arg = schema.get("patternProperties");
    let additional_arg = schema.get("additionalProperties");
    if pattern_arg.is_some() || additional_arg.is_some() {
        let patterns = parse_pattern_properties(pattern_arg)?;
        let additional = match additional_arg {
            None | Some(Bson::Boolean(true)) => Additional::Allowed,
            Some(Bson::Boolean(false)) => Additional::Forbidden,
            Some(Bson::Document(sub)) => {
                Additional::Schema(Box::new(parse_schema(sub, Level::Nested)?))
            }
            Some(_) => crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword 'additionalProperties' must be an object or a boolean"
            ),
        };
        out.push(Keyword::AllowedProperties {
            names: property_names,
            patterns,
            additional,
        });
    }
    if let Some((mut names, arg)) = required {
        names.sort();
        out.push(Keyword::Required {
            names,
            spec: spec("required", arg),
        });
    }
    for keyword in ["minProperties", "maxProperties"] {
        if let Some(arg) = schema.get(keyword) {
            let limit = non_negative_integer(keyword, arg)?;
            let spec = spec(keyword, arg);
            out.push(if keyword == "minProperties" {
                Keyword::MinProperties { limit, spec }
            } else {
                Keyword::MaxProperties { limit, spec }
            });
        }
    }
    if let Some(arg) = schema.get("dependencies") {
        out.push(parse_dependencies(arg, level)?);
    }
    Ok(())
}

fn parse_required(arg: &Bson) -> Result<Vec<String>> {
    let Bson::Array(items) = arg else {
        crate::bail!(
            TypeMismatch,
            "$jsonSchema keyword 'required' must be an array, but found an element of type {}",
            type_name(arg)
        );
    };
    let mut names: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Bson::String(name) = item else {
            crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword 'required' must be an array of strings, but found an \
                 element of type: {}",
                type_name(item)
            );
        };
        if names.contains(name) {
            crate::bail!(
                FailedToParse,
                "$jsonSchema keyword 'required' array cannot contain duplicate values"
            );
        }
        names.push(name.clone());
    }
    if names.is_empty() {
        crate::bail!(
            FailedToParse,
            "$jsonSchema keyword 'required' cannot be an empty array"
        );
    }
    Ok(names)
}

fn parse_pattern_properties(arg: Option<&Bson>) -> Result<Vec<PatternProperty>> {
    let Some(arg) = arg else {
        return Ok(Vec::new());
    };
    let Bson::Document(patterns) = arg else {
        crate::bail!(
            TypeMismatch,
            "$jsonSchema keyword 'patternProperties' must be an object"
        );
    };
    let mut out = Vec::with_capacity(patterns.len());
    for (pattern, sub) in patterns {
        let Bson::Document(sub) = sub else {
            crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword 'patternProperties' has property '{pattern}' which is not \
                 an object"
            );
        };
        out.push(PatternProperty {
            pattern: pattern.clone(),
            regex: compile_regex(pattern, "").ok(),
            schema: parse_schema(sub, Level::Nested)?,
        });
    }
    Ok(out)
}

fn parse_dependencies(arg: &Bson, level: Level) -> Result<Keyword> {
    let Bson::Document(entries) = arg else {
        crate::bail!(
            TypeMismatch,
            "$jsonSchema keyword 'dependencies' must be an object"
        );
    };
    let mut dependencies = Vec::with_capacity(entries.len());
    for (property, requirement) in entries {
        let requires = match requirement {
            Bson::Document(sub) => Requires::Schema(Box::new(parse_schema(sub, level)?)),
            Bson::Array(items) => Requires::Properties(parse_property_dependency(property, items)?),
            Bson::String(_) if property == "title" || property == "description" => continue,
            _ => crate::bail!(
                TypeMismatch,
                "property '{property}' in $jsonSchema keyword 'dependencies' must be either an \
                 object or an array"
            ),
        };
        dependencies.push(Dependency {
            property: property.clone(),
            requires,
        });
    }
    Ok(Keyword::Dependencies {
        dependencies,
        annotations: annotations_of(entries),
    })
}

fn parse_property_dependency(property: &str, items: &[Bson]) -> Result<Vec<String>> {
    if items.is_empty() {
        crate::bail!(
            FailedToParse,
            "property '{property}' in $jsonSchema keyword 'dependencies' cannot be an empty array"
        );
    }
    let mut names: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Bson::String(name) = item else {
            crate::bail!(
                TypeMismatch,
                "array '{property}' in $jsonSchema keyword 'dependencies' can only contain \
                 strings, but found element of type: {}",
                type_name(item)
            );
        };
        if names.contains(name) {
            crate::bail!(
                FailedToParse,
                "array '{property}' in $jsonSchema keyword 'dependencies' contains duplicate \
                 element: {name}"
            );
        }
        names.push(name.clone());
    }
    Ok(names)
}

/// `allOf`, `anyOf`, `oneOf`, `not`, `enum`.
fn parse_logical_keywords(schema: &Document, level: Level, out: &mut Vec<Keyword>) -> Result<()> {
    for keyword in ["allOf", "anyOf", "oneOf"] {
        if let Some(arg) = schema.get(keyword) {
            let schemas = parse_schema_list(keyword, arg, level)?;
            out.push(match keyword {
                "allOf" => Keyword::AllOf(schemas),
                "anyOf" => Keyword::AnyOf(schemas),
                _ => Keyword::OneOf(schemas),
            });
        }
    }
    if let Some(arg) = schema.get("not") {
        let Bson::Document(sub) = arg else {
            crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword 'not' must be an object, but found an element of type {}",
                type_name(arg)
            );
        };
        out.push(Keyword::Not(Box::new(parse_schema(sub, level)?)));
    }
    if let Some(arg) = schema.get("enum") {
        out.push(parse_enum(arg, level)?);
    }
    Ok(())
}

fn parse_schema_list(keyword: &str, arg: &Bson, level: Level) -> Result<Vec<Schema>> {
    let Bson::Array(items) = arg else {
        crate::bail!(
            TypeMismatch,
            "$jsonSchema keyword '{keyword}' must be an array"
        );
    };
    if items.is_empty() {
        crate::bail!(
            BadValue,
            "$jsonSchema keyword '{keyword}' must be a non-empty array"
        );
    }
    let mut schemas = Vec::with_capacity(items.len());
    for item in items {
        let Bson::Document(sub) = item else {
            crate::bail!(
                TypeMismatch,
                "$jsonSchema keyword '{keyword}' must be an array of objects, but found an \
                 element of type {}",
                type_name(item)
            );
        };
        schemas.push(parse_schema(sub, level)?);
    }
    Ok(schemas)
}

fn parse_enum(arg: &Bson, level: Level) -> Result<Keyword> {
    let Bson::Array(items) = arg else {
        crate::bail!(
            TypeMismatch,
            "$jsonSchema keyword 'enum' must be an array, but found an element of type {}",
            type_name(arg)
        );
    };
    if items.is_empty() {
        crate::bail!(
            FailedToParse,
            "$jsonSchema keyword 'enum' cannot be an empty array"
        );
    }
    if first_duplicate(items).is_some() {
        crate::bail!(
            FailedToParse,
            "$jsonSchema keyword 'enum' array cannot contain duplicate values."
        );
    }
    // Kept with sorted fields, ready for the unordered comparison.
    let values = items
        .iter()
        .filter(|v| level == Level::Nested || matches!(v, Bson::Document(_)))
        .map(|v| sorted_fields(v).into_owned())
        .collect();
    Ok(Keyword::Enum {
        values,
        spec: spec("enum", arg),
    })
}

/// MongoDB's `parseIntegerElementToNonNegativeLong`, for lengths and
/// counts: an integral number (of any numeric type) that is not negative.
fn non_negative_integer(keyword: &str, arg: &Bson) -> Result<i64> {
    let shown = format!("{keyword}: {arg}");
    let value = match arg {
        Bson::Int32(i) => i64::from(*i),
        Bson::Int64(i) => *i,
        Bson::Double(d) => {
            if d.is_nan() {
                crate::bail!(
                    FailedToParse,
                    "Expected an integer, but found NaN in: {shown}"
                );
            }
            if !f64_fits_i64(*d) {
                crate::bail!(
                    FailedToParse,
                    "Cannot represent as a 64-bit integer: {shown}"
                );
            }
            if d.trunc() != *d {
                crate::bail!(FailedToParse, "Expected an integer: {shown}");
            }
            // In range and integral, so the cast is exact.
            *d as i64
        }
        Bson::Decimal128(d) => {
            let decimal = DecimalValue::from_decimal128(d);
            match decimal.to_i64_exact() {
                Some(i) => i,
                None if decimal.rem(&DecimalValue::from_i64(1)).is_zero() => {
                    crate::bail!(
                        FailedToParse,
                        "Cannot represent as a 64-bit integer: {shown}"
                    )
                }
                None => crate::bail!(FailedToParse, "Expected an integer: {shown}"),
            }
        }
        _ => crate::bail!(FailedToParse, "Expected a number in: {shown}"),
    };
    if value < 0 {
        crate::bail!(FailedToParse, "Expected a positive number in: {shown}");
    }
    Ok(value)
}

// ---------------------------------------------------------------------------
// Matching.

impl Schema {
    /// True when the document satisfies this top-level schema.
    pub(super) fn matches_document(&self, doc: &Document) -> bool {
        self.matches(Subject::Document(doc))
    }

    pub(super) fn matches(&self, subject: Subject<'_>) -> bool {
        if self.never.is_some() {
            return false;
        }
        self.keywords.iter().all(|k| keyword_holds(k, subject)) && self.type_holds(subject)
    }

    /// The stated type, which only values below the top level have to meet.
    pub(super) fn type_holds(&self, subject: Subject<'_>) -> bool {
        match (&self.stated_type, subject) {
            (None, _) | (_, Subject::Document(_)) => true,
            (Some(stated), Subject::Value(value)) => {
                value.is_some_and(|v| stated.types.contains(v))
            }
        }
    }

    /// A schema below the top level, applied to a value.
    pub(super) fn matches_value(&self, value: Option<&Bson>) -> bool {
        self.matches(Subject::Value(value))
    }
}

/// Whether one keyword holds. Type-specific keywords hold for values of
/// other types and for missing values.
pub(super) fn keyword_holds(keyword: &Keyword, subject: Subject<'_>) -> bool {
    if let Some(applies) = keyword.applies_to() {
        let applicable = match subject {
            Subject::Document(_) => applies == Applies::Object,
            Subject::Value(value) => value.and_then(Applies::of) == Some(applies),
        };
        if !applicable {
            return true;
        }
    }
    match keyword {
        Keyword::AllOf(schemas) => schemas.iter().all(|s| s.matches(subject)),
        Keyword::AnyOf(schemas) => schemas.iter().any(|s| s.matches(subject)),
        Keyword::OneOf(schemas) => schemas.iter().filter(|s| s.matches(subject)).count() == 1,
        Keyword::Not(schema) => !schema.matches(subject),
        Keyword::Enum { values, .. } => enum_holds(values, subject),
        Keyword::Properties { .. }
        | Keyword::AllowedProperties { .. }
        | Keyword::Required { .. }
        | Keyword::MinProperties { .. }
        | Keyword::MaxProperties { .. }
        | Keyword::Dependencies { .. } => subject
            .object()
            .is_none_or(|object| object_keyword_holds(keyword, object, subject)),
        other => subject
            .value()
            .is_none_or(|value| value_keyword_holds(other, value)),
    }
}

fn enum_holds(values: &[Bson], subject: Subject<'_>) -> bool {
    match subject {
        Subject::Document(doc) => {
            let doc = Bson::Document(sorted_document(doc));
            values.iter().any(|v| compare(v, &doc) == Ordering::Equal)
        }
        Subject::Value(value) => value.is_some_and(|v| {
            let v = sorted_fields(v);
            values.iter().any(|e| compare(e, &v) == Ordering::Equal)
        }),
    }
}

/// The string, number and array keywords, on a value of their type.
fn value_keyword_holds(keyword: &Keyword, value: &Bson) -> bool {
    match keyword {
        Keyword::Pattern { regex, .. } => regex.matches(value),
        Keyword::MaxLength { limit, .. } => string_length(value).is_some_and(|n| n <= *limit),
        Keyword::MinLength { limit, .. } => string_length(value).is_some_and(|n| n >= *limit),
        Keyword::MultipleOf { divisor, .. } => is_multiple(value, divisor),
        Keyword::Maximum {
            limit, exclusive, ..
        } => compare_matches(
            if *exclusive { CmpOp::Lt } else { CmpOp::Lte },
            Some(value),
            limit,
        ),
        Keyword::Minimum {
            limit, exclusive, ..
        } => compare_matches(
            if *exclusive { CmpOp::Gt } else { CmpOp::Gte },
            Some(value),
            limit,
        ),
        Keyword::MinItems { limit, .. } => array_length(value).is_some_and(|n| n >= *limit),
        Keyword::MaxItems { limit, .. } => array_length(value).is_some_and(|n| n <= *limit),
        Keyword::UniqueItems { .. } => match value {
            Bson::Array(items) => first_duplicate(items).is_none(),
            _ => false,
        },
        Keyword::Items { schema } => match value {
            Bson::Array(items) => items.iter().all(|item| schema.matches_value(Some(item))),
            _ => false,
        },
        Keyword::ItemsTuple { schemas } => match value {
            Bson::Array(items) => items
                .iter()
                .zip(schemas)
                .all(|(item, schema)| schema.matches_value(Some(item))),
            _ => false,
        },
        Keyword::AdditionalItems { start, rule, .. } => match value {
            Bson::Array(items) => {
                let rest = items.get(*start..).unwrap_or(&[]);
                additional_holds(rule, rest.iter())
            }
            _ => false,
        },
        _ => true,
    }
}

/// Whether every value meets `additionalItems`/`additionalProperties`.
pub(super) fn additional_holds<'a>(
    rule: &Additional,
    mut values: impl Iterator<Item = &'a Bson>,
) -> bool {
    match rule {
        Additional::Allowed => true,
        Additional::Forbidden => values.next().is_none(),
        Additional::Schema(schema) => values.all(|v| schema.matches_value(Some(v))),
    }
}

/// The object keywords, on an object (the document at the top level).
fn object_keyword_holds(keyword: &Keyword, object: &Document, subject: Subject<'_>) -> bool {
    match keyword {
        Keyword::Properties { properties } => properties.iter().all(|p| {
            let value = field(object, &p.name);
            (value.is_none() && !p.required) || p.schema.matches_value(value)
        }),
        Keyword::AllowedProperties {
            names,
            patterns,
            additional,
        } => object
            .iter()
            .all(|(name, value)| allowed_property_holds(names, patterns, additional, name, value)),
        Keyword::Required { names, .. } => names.iter().all(|n| field(object, n).is_some()),
        Keyword::MinProperties { limit, .. } => count(object.len()) >= *limit,
        Keyword::MaxProperties { limit, .. } => count(object.len()) <= *limit,
        Keyword::Dependencies { dependencies, .. } => dependencies
            .iter()
            .all(|d| dependency_holds(d, object, subject)),
        _ => true,
    }
}

/// One property against `patternProperties` (every pattern its name
/// matches) and, when neither `properties` nor a pattern names it,
/// `additionalProperties`.
pub(super) fn allowed_property_holds(
    names: &[String],
    patterns: &[PatternProperty],
    additional: &Additional,
    name: &str,
    value: &Bson,
) -> bool {
    let mut additional_applies = !names.iter().any(|n| n == name);
    for pattern in patterns {
        if pattern.matches_name(name) {
            additional_applies = false;
            if !pattern.schema.matches_value(Some(value)) {
                return false;
            }
        }
    }
    !additional_applies || additional_holds(additional, std::iter::once(value))
}

/// A dependency holds when its property is absent, or when the object
/// meets what it requires.
pub(super) fn dependency_holds(
    dependency: &Dependency,
    object: &Document,
    subject: Subject<'_>,
) -> bool {
    if field(object, &dependency.property).is_none() {
        return true;
    }
    match &dependency.requires {
        Requires::Schema(schema) => schema.matches(subject),
        Requires::Properties(names) => names.iter().all(|n| field(object, n).is_some()),
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A string's length in code points, as MongoDB counts it.
pub(super) fn string_length(value: &Bson) -> Option<i64> {
    match value {
        Bson::String(s) => Some(count(s.chars().count())),
        _ => None,
    }
}

fn array_length(value: &Bson) -> Option<i64> {
    match value {
        Bson::Array(items) => Some(count(items.len())),
        _ => None,
    }
}

/// `multipleOf`: the remainder in decimal arithmetic is zero (a double
/// becomes a 15-digit decimal first, so `0.3` is a multiple of `0.1`).
fn is_multiple(value: &Bson, divisor: &DecimalValue) -> bool {
    Number::of(value).is_some_and(|n| n.to_decimal().rem(divisor).is_zero())
}

/// The index of the first element equal (fields in any order) to an
/// earlier one, found in O(n log n): the value `uniqueItems` reports.
pub(super) fn first_duplicate(items: &[Bson]) -> Option<usize> {
    let canonical: Vec<Cow<'_, Bson>> = items.iter().map(sorted_fields).collect();
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| compare(&canonical[a], &canonical[b]).then(a.cmp(&b)));
    // In each run of equal values (sorted by index), the second index is
    // the first repeat of that value.
    let mut first: Option<usize> = None;
    let mut run_start = 0;
    for position in 1..=order.len() {
        let run_ends = position == order.len()
            || compare(&canonical[order[run_start]], &canonical[order[position]])
                != Ordering::Equal;
        if run_ends {
            if position - run_start >= 2 {
                let repeat = order[run_start + 1];
                first = Some(first.map_or(repeat, |f| f.min(repeat)));
            }
            run_start = position;
        }
    }
    first
}

/// The document with its fields (and its subdocuments' fields) sorted by
/// name: what MongoDB's unordered comparator compares.
fn sorted_document(doc: &Document) -> Document {
    let mut fields: Vec<(&String, Cow<'_, Bson>)> =
        doc.iter().map(|(k, v)| (k, sorted_fields(v))).collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    fields
        .into_iter()
        .map(|(k, v)| (k.clone(), v.into_owned()))
        .collect()
}

/// The value with every document's fields sorted by name, borrowed when
/// nothing needs sorting.
fn sorted_fields(value: &Bson) -> Cow<'_, Bson> {
    match value {
        Bson::Document(doc) => Cow::Owned(Bson::Document(sorted_document(doc))),
        Bson::Array(items)
            if items
                .iter()
                .any(|i| matches!(i, Bson::Document(_) | Bson::Array(_))) =>
        {
            Cow::Owned(Bson::Array(
                items
                    .iter()
                    .map(|i| sorted_fields(i).into_owned())
                    .collect(),
            ))
        }
        other => Cow::Borrowed(other),
    }
}

#[cfg(test)]
mod tests {
    use bson::{doc, Bson, Document};

    use crate::error::ErrorCode;
    use crate::query::filter::Filter;

    fn schema_filter(schema: Document) -> Filter {
        let filter = doc! {"$jsonSchema": schema};
        Filter::parse(&filter).unwrap_or_else(|e| panic!("{filter}: {e}"))
    }

    /// Whether `doc` satisfies `schema`.
    fn m(schema: Document, doc: Document) -> bool {
        schema_filter(schema).matches(&doc)
    }

    fn parse_error(schema: Bson) -> (i32, String) {
        match Filter::parse(&doc! {"$jsonSchema": schema.clone()}) {
            Ok(_) => panic!("{schema} parsed"),
            Err(e) => (e.code.number(), e.message),
        }
    }

    fn code(schema: Document) -> i32 {
        parse_error(Bson::Document(schema)).0
    }

    #[test]
    fn the_argument_must_be_an_object() {
        assert_eq!(
            parse_error(Bson::Int32(1)),
            (14, "$jsonSchema must be an object".to_string())
        );
        assert_eq!(parse_error(Bson::Array(vec![])).0, 14);
    }

    #[test]
    fn unknown_and_unsupported_keywords_are_refused() {
        assert_eq!(
            parse_error(Bson::Document(doc! {"unknown": 1})),
            (9, "Unknown $jsonSchema keyword: unknown".to_string())
        );
        for keyword in ["$ref", "$schema", "default", "definitions", "format", "id"] {
            assert_eq!(
                parse_error(Bson::Document(doc! {keyword: "x"})),
                (
                    9,
                    format!("$jsonSchema keyword '{keyword}' is not currently supported")
                )
            );
        }
        // Nested schemas are checked too.
        assert_eq!(code(doc! {"properties": {"a": {"format": "date"}}}), 9);
        assert_eq!(code(doc! {"items": {"foo": 1}}), 9);
        assert_eq!(code(doc! {"encrypt": {}}), 9);
        assert_eq!(code(doc! {"encryptMetadata": {}}), 9);
        assert_eq!(code(doc! {"type": "object", "encrypt": {}}), 9);
    }

    #[test]
    fn type_keywords_are_checked() {
        assert_eq!(code(doc! {"type": 1}), 14);
        assert_eq!(code(doc! {"bsonType": {}}), 14);
        assert_eq!(code(doc! {"type": [1]}), 14);
        assert_eq!(
            parse_error(Bson::Document(doc! {"type": "integer"})),
            (
                9,
                "$jsonSchema type 'integer' is not currently supported.".to_string()
            )
        );
        assert_eq!(code(doc! {"bsonType": ["integer"]}), 9);
        assert_eq!(code(doc! {"type": ["object", "object"]}), 9);
        assert_eq!(
            parse_error(Bson::Document(doc! {"type": "int"})),
            (2, "Unknown type name alias: int".to_string())
        );
        assert_eq!(code(doc! {"bsonType": "boolean"}), 2);
        assert_eq!(code(doc! {"bsonType": "missing"}), 2);
        assert_eq!(code(doc! {"type": []}), 9);
        assert_eq!(
            parse_error(Bson::Document(
                doc! {"type": "object", "bsonType": "object"}
            )),
            (
                9,
                "Cannot specify both $jsonSchema keywords 'type' and 'bsonType'".to_string()
            )
        );
        assert_eq!(code(doc! {"title": 1}), 14);
        assert_eq!(code(doc! {"description": {}}), 14);
    }

    #[test]
    fn keyword_arguments_have_mongodb_codes() {
        let cases: Vec<(Document, i32)> = vec![
            (doc! {"minimum": "1"}, 14),
            (doc! {"maximum": {}}, 14),
            (doc! {"minimum": 1, "exclusiveMinimum": 1}, 14),
            (doc! {"exclusiveMinimum": true}, 9),
            (doc! {"exclusiveMaximum": false}, 9),
            (doc! {"multipleOf": "2"}, 14),
            (doc! {"multipleOf": 0}, 9),
            (doc! {"multipleOf": -1.5}, 9),
            (doc! {"minLength": "1"}, 9),
            (doc! {"maxLength": -1}, 9),
            (doc! {"minLength": 1.5}, 9),
            (doc! {"maxItems": f64::NAN}, 9),
            (doc! {"minProperties": 1e300}, 9),
            (doc! {"pattern": 1}, 14),
            (doc! {"pattern": "("}, 51091),
            (doc! {"uniqueItems": 1}, 14),
            (doc! {"items": 1}, 14),
            (doc! {"items": [1]}, 14),
            (doc! {"additionalItems": 1}, 14),
            (doc! {"required": "a"}, 14),
            (doc! {"required": [1]}, 14),
            (doc! {"required": []}, 9),
            (doc! {"required": ["a", "a"]}, 9),
            (doc! {"properties": 1}, 14),
            (doc! {"properties": {"a": 1}}, 14),
            (doc! {"patternProperties": 1}, 14),
            (doc! {"patternProperties": {"a": 1}}, 14),
            (doc! {"additionalProperties": 1}, 14),
            (doc! {"dependencies": 1}, 14),
            (doc! {"dependencies": {"a": 1}}, 14),
            (doc! {"dependencies": {"a": []}}, 9),
            (doc! {"dependencies": {"a": [1]}}, 14),
            (doc! {"dependencies": {"a": ["b", "b"]}}, 9),
            (doc! {"allOf": {}}, 14),
            (doc! {"anyOf": []}, 2),
            (doc! {"oneOf": [1]}, 14),
            (doc! {"not": []}, 14),
            (doc! {"enum": 1}, 14),
            (doc! {"enum": []}, 9),
            (doc! {"enum": [1, 1.0]}, 9),
            (doc! {"enum": [{"a": 1, "b": 2}, {"b": 2, "a": 1}]}, 9),
        ];
        for (schema, expected) in cases {
            assert_eq!(code(schema.clone()), expected, "{schema}");
        }
        assert_eq!(
            parse_error(Bson::Document(doc! {"exclusiveMaximum": true})).1,
            "$jsonSchema keyword 'maximum' must be a present if exclusiveMaximum is present"
        );
        assert_eq!(
            parse_error(Bson::Document(doc! {"maxLength": -1})).1,
            "Expected a positive number in: maxLength: -1"
        );
        assert_eq!(
            parse_error(Bson::Document(doc! {"properties": {"a": 1}})).1,
            "Nested schema for $jsonSchema property 'a' must be an object"
        );
    }

    #[test]
    fn keywords_are_checked_even_where_they_have_no_effect() {
        // Top-level scalar keywords do nothing, but their arguments count.
        assert!(m(doc! {"minimum": 5}, doc! {"a": 1}));
        assert_eq!(code(doc! {"minimum": "5"}), 14);
        // So does a keyword a stated type makes irrelevant.
        assert_eq!(
            code(doc! {"properties": {"a": {"type": "string", "minItems": "x"}}}),
            9
        );
        // `title` and `description` inside `dependencies` are annotations.
        assert!(m(
            doc! {"dependencies": {"title": "t", "description": "d", "a": ["b"]}},
            doc! {"b": 1}
        ));
    }

    #[test]
    fn bson_type_and_type() {
        let s = doc! {"properties": {"a": {"bsonType": "int"}}};
        assert!(m(s.clone(), doc! {"a": 1}));
        assert!(!m(s.clone(), doc! {"a": 1i64}));
        assert!(!m(s.clone(), doc! {"a": [1]}));
        assert!(m(s, doc! {}));
        let s = doc! {"properties": {"a": {"bsonType": "number"}}};
        for value in [Bson::Int32(1), Bson::Int64(1), Bson::Double(1.5)] {
            assert!(m(s.clone(), doc! {"a": value}));
        }
        assert!(!m(s, doc! {"a": "1"}));
        let s = doc! {"properties": {"a": {"type": ["string", "null"]}}};
        assert!(m(s.clone(), doc! {"a": Bson::Null}));
        assert!(m(s.clone(), doc! {"a": "x"}));
        assert!(!m(s, doc! {"a": 1}));
        // Arrays are values of type array, not lists of candidates.
        let s = doc! {"properties": {"a": {"type": "array"}}};
        assert!(m(s.clone(), doc! {"a": [1]}));
        assert!(!m(s, doc! {"a": {"0": 1}}));
        let s = doc! {"properties": {"a": {"type": "boolean"}}};
        assert!(m(s.clone(), doc! {"a": false}));
        assert!(!m(s, doc! {"a": 0}));
        let s = doc! {"properties": {"a": {"bsonType": ["minKey", "maxKey"]}}};
        assert!(m(s.clone(), doc! {"a": Bson::MaxKey}));
        assert!(!m(s, doc! {"a": 0}));
    }

    #[test]
    fn the_top_level_type_only_matters_when_it_excludes_objects() {
        assert!(m(doc! {"type": "object"}, doc! {"a": 1}));
        assert!(m(doc! {"bsonType": ["object", "int"]}, doc! {"a": 1}));
        assert!(!m(doc! {"type": "string"}, doc! {"a": 1}));
        assert!(!m(doc! {"bsonType": "number"}, doc! {}));
        // So do the schemas of allOf, anyOf, not and dependencies.
        assert!(!m(doc! {"allOf": [{"type": "array"}]}, doc! {}));
        assert!(m(doc! {"not": {"type": "array"}}, doc! {}));
    }

    #[test]
    fn numeric_keywords_apply_to_numbers_only() {
        let s = doc! {"properties": {"a": {"minimum": 2, "maximum": 5}}};
        assert!(m(s.clone(), doc! {"a": 2}));
        assert!(m(s.clone(), doc! {"a": 5.0}));
        assert!(!m(s.clone(), doc! {"a": 1}));
        assert!(!m(s.clone(), doc! {"a": 5.5}));
        assert!(m(s.clone(), doc! {"a": "x"}));
        assert!(m(s.clone(), doc! {"a": [0, 100]}));
        assert!(m(s.clone(), doc! {}));
        assert!(!m(s, doc! {"a": f64::NAN}));
        let s = doc! {"properties": {"a": {"minimum": 2, "exclusiveMinimum": true,
        "maximum": 5, "exclusiveMaximum": true}}};
        assert!(!m(s.clone(), doc! {"a": 2}));
        assert!(m(s.clone(), doc! {"a": 3}));
        assert!(!m(s, doc! {"a": 5i64}));
        let s = doc! {"properties": {"a": {"multipleOf": 0.1}}};
        assert!(m(s.clone(), doc! {"a": 0.3}));
        assert!(!m(s.clone(), doc! {"a": 0.35}));
        assert!(m(s.clone(), doc! {"a": 3}));
        assert!(!m(s.clone(), doc! {"a": f64::INFINITY}));
        assert!(m(s, doc! {"a": "0.35"}));
        let s = doc! {"properties": {"a": {"multipleOf": 3}}};
        assert!(m(s.clone(), doc! {"a": 9i64}));
        assert!(!m(s, doc! {"a": 10}));
    }

    #[test]
    fn string_keywords_count_code_points() {
        let s = doc! {"properties": {"a": {"minLength": 2, "maxLength": 3}}};
        assert!(m(s.clone(), doc! {"a": "ab"}));
        assert!(m(s.clone(), doc! {"a": "日本語"}));
        assert!(!m(s.clone(), doc! {"a": "a"}));
        assert!(!m(s.clone(), doc! {"a": "abcd"}));
        assert!(m(s, doc! {"a": 1}));
        let s = doc! {"properties": {"a": {"pattern": "^b"}}};
        assert!(m(s.clone(), doc! {"a": "bc"}));
        assert!(!m(s.clone(), doc! {"a": "ab"}));
        assert!(m(s.clone(), doc! {"a": 1}));
        assert!(m(s, doc! {"a": ["ab"]}));
        // Unanchored, as in JSON Schema.
        assert!(m(
            doc! {"properties": {"a": {"pattern": "c"}}},
            doc! {"a": "abcd"}
        ));
    }

    #[test]
    fn array_keywords() {
        let s = doc! {"properties": {"a": {"minItems": 1, "maxItems": 2}}};
        assert!(m(s.clone(), doc! {"a": [1]}));
        assert!(!m(s.clone(), doc! {"a": []}));
        assert!(!m(s.clone(), doc! {"a": [1, 2, 3]}));
        assert!(m(s, doc! {"a": "123"}));
        let s = doc! {"properties": {"a": {"uniqueItems": true}}};
        assert!(m(s.clone(), doc! {"a": [1, 2, "1"]}));
        assert!(!m(s.clone(), doc! {"a": [1, 2, 1.0]}));
        assert!(!m(
            s.clone(),
            doc! {"a": [{"x": 1, "y": 2}, {"y": 2, "x": 1}]}
        ));
        assert!(m(s, doc! {"a": [[1, 2], [2, 1]]}));
        assert!(m(
            doc! {"properties": {"a": {"uniqueItems": false}}},
            doc! {"a": [1, 1]}
        ));
        let s = doc! {"properties": {"a": {"items": {"bsonType": "int"}}}};
        assert!(m(s.clone(), doc! {"a": [1, 2]}));
        assert!(m(s.clone(), doc! {"a": []}));
        assert!(!m(s.clone(), doc! {"a": [1, "2"]}));
        assert!(m(s, doc! {"a": "x"}));
        let s = doc! {"properties": {"a": {"items": [{"type": "string"}, {"type": "number"}]}}};
        assert!(m(s.clone(), doc! {"a": ["x", 1, {}]}));
        assert!(m(s.clone(), doc! {"a": ["x"]}));
        assert!(!m(s, doc! {"a": [1, "x"]}));
        let s = doc! {"properties": {"a": {"items": [{}], "additionalItems": false}}};
        assert!(m(s.clone(), doc! {"a": [1]}));
        assert!(!m(s, doc! {"a": [1, 2]}));
        let s = doc! {"properties": {"a": {"items": [{}], "additionalItems": {"type": "string"}}}};
        assert!(m(s.clone(), doc! {"a": [1, "x"]}));
        assert!(!m(s, doc! {"a": [1, 2]}));
        // Without an `items` array there are no additional items.
        assert!(m(
            doc! {"properties": {"a": {"items": {}, "additionalItems": false}}},
            doc! {"a": [1, 2]}
        ));
        assert!(m(
            doc! {"properties": {"a": {"additionalItems": false}}},
            doc! {"a": [1, 2]}
        ));
    }

    #[test]
    fn object_keywords_at_the_top_and_below() {
        let s = doc! {"required": ["a", "b"]};
        assert!(m(s.clone(), doc! {"a": 1, "b": Bson::Null}));
        assert!(!m(s, doc! {"a": 1}));
        let s = doc! {"properties": {"o": {"required": ["x"]}}};
        assert!(m(s.clone(), doc! {"o": {"x": 1}}));
        assert!(!m(s.clone(), doc! {"o": {"y": 1}}));
        assert!(m(s.clone(), doc! {"o": 1}));
        assert!(m(s, doc! {"o": [{"y": 1}]}));
        let s = doc! {"minProperties": 2, "maxProperties": 3};
        assert!(!m(s.clone(), doc! {"_id": 1}));
        assert!(m(s.clone(), doc! {"_id": 1, "a": 1}));
        assert!(!m(s, doc! {"_id": 1, "a": 1, "b": 1, "c": 1}));
        let s = doc! {"properties": {"o": {"maxProperties": 1}}};
        assert!(!m(s.clone(), doc! {"o": {"a": 1, "b": 2}}));
        assert!(m(s, doc! {"o": "ab"}));
    }

    #[test]
    fn properties_apply_when_present_or_required() {
        let s = doc! {"properties": {"a": {"bsonType": "string"}}};
        assert!(m(s.clone(), doc! {}));
        assert!(m(s.clone(), doc! {"a": "x"}));
        assert!(!m(s, doc! {"a": Bson::Null}));
        let s = doc! {"properties": {"a": {"bsonType": "string"}}, "required": ["a"]};
        assert!(!m(s, doc! {}));
        // A required property with no type and a missing value fails only
        // through `required`.
        let s = doc! {"properties": {"a": {"minimum": 1}}, "required": ["a"]};
        assert!(!m(s.clone(), doc! {}));
        assert!(m(s, doc! {"a": 1}));
    }

    #[test]
    fn additional_and_pattern_properties() {
        let s = doc! {"properties": {"_id": {}, "a": {}}, "additionalProperties": false};
        assert!(m(s.clone(), doc! {"_id": 1, "a": 1}));
        assert!(!m(s, doc! {"_id": 1, "b": 1}));
        let s = doc! {"additionalProperties": {"type": "string"}, "properties": {"_id": {}}};
        assert!(m(s.clone(), doc! {"_id": 1, "b": "x"}));
        assert!(!m(s, doc! {"_id": 1, "b": 1}));
        let s = doc! {"patternProperties": {"^a": {"type": "string"}, "b$": {"type": "number"}}};
        assert!(m(s.clone(), doc! {"a": "x", "cb": 1, "z": true}));
        assert!(!m(s.clone(), doc! {"a": 1}));
        // Every pattern a name matches applies.
        assert!(!m(s, doc! {"ab": "x"}));
        let s = doc! {"patternProperties": {"^x": {}}, "properties": {"_id": {}},
        "additionalProperties": false};
        assert!(m(s.clone(), doc! {"_id": 1, "xyz": 1}));
        assert!(!m(s, doc! {"_id": 1, "y": 1}));
        // A pattern that does not compile matches no name.
        let s = doc! {"patternProperties": {"(": {"type": "string"}}};
        assert!(m(s, doc! {"(": 1}));
        // Below the top level, only objects are constrained.
        let s = doc! {"properties": {"o": {"additionalProperties": false}}};
        assert!(!m(s.clone(), doc! {"o": {"x": 1}}));
        assert!(m(s.clone(), doc! {"o": {}}));
        assert!(m(s, doc! {"o": [1]}));
    }

    #[test]
    fn dependencies() {
        let s = doc! {"dependencies": {"a": ["b", "c"]}};
        assert!(m(s.clone(), doc! {}));
        assert!(m(s.clone(), doc! {"a": 1, "b": 1, "c": 1}));
        assert!(!m(s.clone(), doc! {"a": 1, "b": 1}));
        assert!(m(s, doc! {"b": 1}));
        let s = doc! {"dependencies": {"a": {"required": ["b"]}}};
        assert!(!m(s.clone(), doc! {"a": 1}));
        assert!(m(s, doc! {"a": 1, "b": 2}));
        let s = doc! {"properties": {"o": {"dependencies": {"a": {"properties": {"b": {"type": "string"}}}}}}};
        assert!(m(s.clone(), doc! {"o": {"a": 1, "b": "x"}}));
        assert!(!m(s.clone(), doc! {"o": {"a": 1, "b": 1}}));
        assert!(m(s, doc! {"o": {"b": 1}}));
    }

    #[test]
    fn logical_keywords() {
        let s = doc! {"properties": {"a": {"allOf": [{"minimum": 1}, {"maximum": 3}]}}};
        assert!(m(s.clone(), doc! {"a": 2}));
        assert!(!m(s, doc! {"a": 4}));
        let s = doc! {"properties": {"a": {"anyOf": [{"type": "string"}, {"minimum": 3}]}}};
        assert!(m(s.clone(), doc! {"a": "x"}));
        assert!(m(s.clone(), doc! {"a": 4}));
        assert!(!m(s, doc! {"a": 1}));
        let s = doc! {"properties": {"a": {"oneOf": [{"minimum": 0}, {"maximum": 10}]}}};
        assert!(m(s.clone(), doc! {"a": -1}));
        assert!(m(s.clone(), doc! {"a": 11}));
        assert!(!m(s, doc! {"a": 5}));
        let s = doc! {"properties": {"a": {"not": {"type": "string"}}}};
        assert!(m(s.clone(), doc! {"a": 1}));
        assert!(!m(s, doc! {"a": "x"}));
        // At the top level the subschemas apply to the document.
        assert!(m(
            doc! {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
            doc! {"b": 1}
        ));
        assert!(!m(doc! {"not": {"required": ["a"]}}, doc! {"a": 1}));
    }

    #[test]
    fn enum_compares_without_field_order_or_traversal() {
        let s = doc! {"properties": {"a": {"enum": [1, "x", {"p": 1, "q": 2}, [1, 2]]}}};
        assert!(m(s.clone(), doc! {"a": 1.0}));
        assert!(m(s.clone(), doc! {"a": "x"}));
        assert!(m(s.clone(), doc! {"a": {"q": 2, "p": 1}}));
        assert!(m(s.clone(), doc! {"a": [1, 2]}));
        assert!(!m(s.clone(), doc! {"a": [1]}));
        assert!(!m(s.clone(), doc! {"a": [[1, 2]]}));
        assert!(!m(s.clone(), doc! {"a": 2}));
        assert!(m(s, doc! {}));
        // At the top level, the whole document is compared.
        let s = doc! {"enum": [{"_id": 1, "a": 1}, 5]};
        assert!(m(s.clone(), doc! {"a": 1, "_id": 1}));
        assert!(!m(s, doc! {"_id": 1}));
        assert!(!m(doc! {"enum": [1, 2]}, doc! {"_id": 1}));
    }

    #[test]
    fn keywords_of_another_stated_type_are_dropped() {
        // `minimum` cannot fail for a string, and a number fails the type.
        let s = doc! {"properties": {"a": {"type": "string", "minimum": 5}}};
        assert!(!m(s.clone(), doc! {"a": 4}));
        assert!(m(s, doc! {"a": "x"}));
        let s = doc! {"properties": {"a": {"bsonType": "int", "minimum": 5}}};
        assert!(!m(s.clone(), doc! {"a": 4}));
        assert!(m(s, doc! {"a": 5}));
    }

    #[test]
    fn schemas_combine_with_query_operators() {
        let f = Filter::parse(&doc! {
            "$or": [{"$jsonSchema": {"required": ["a"]}}, {"b": 1}],
            "c": {"$ne": 2},
        })
        .unwrap();
        assert!(f.matches(&doc! {"a": 1}));
        assert!(f.matches(&doc! {"b": 1}));
        assert!(!f.matches(&doc! {"b": 2}));
        assert!(!f.matches(&doc! {"a": 1, "c": 2}));
        let f = Filter::parse(&doc! {"$nor": [{"$jsonSchema": {"required": ["a"]}}]}).unwrap();
        assert!(f.matches(&doc! {}));
        assert!(!f.matches(&doc! {"a": 1}));
        // Inside `$elemMatch`, each element is a document to check.
        let f = Filter::parse(&doc! {"arr": {"$elemMatch": {"$jsonSchema": {"required": ["x"]}}}})
            .unwrap();
        assert!(f.matches(&doc! {"arr": [1, {"x": 1}]}));
        assert!(!f.matches(&doc! {"arr": [{"y": 1}]}));
    }

    #[test]
    fn the_raw_test_leaves_schemas_undecided() {
        let f = schema_filter(doc! {"required": ["a"]});
        let bytes = doc! {"b": 1}.to_vec().unwrap();
        let raw = bson::RawDocument::from_bytes(&bytes).unwrap();
        assert_eq!(f.matches_raw(raw), None);
        assert!(f.may_match_raw(raw));
        // A conjunction it can decide without the schema still decides.
        let f = Filter::parse(&doc! {"$jsonSchema": {"required": ["a"]}, "b": 2}).unwrap();
        assert_eq!(f.matches_raw(raw), Some(false));
    }

    #[test]
    fn deep_schemas_are_refused_before_they_nest_too_far() {
        let mut schema = doc! {"type": "object"};
        for _ in 0..300 {
            schema = doc! {"properties": {"a": schema}};
        }
        let error = Filter::parse(&doc! {"$jsonSchema": schema}).unwrap_err();
        assert_eq!(error.code, ErrorCode::BadValue);
        let mut schema = doc! {"type": "object"};
        for _ in 0..60 {
            schema = doc! {"not": {"allOf": [schema]}};
        }
        let f = schema_filter(schema);
        assert!(f.matches(&doc! {}));
    }
}
