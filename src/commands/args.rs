//! Reading command arguments with MongoDB's type rules and errors.

pub use crate::query::compare::type_name;
use bson::{Bson, Document};

use crate::error::{Error, ErrorCode, Result};
use crate::router::{DocumentValidation, Namespace};
use crate::wire::message::checked_document;

use super::request::Request;

fn wrong_type(cmd: &str, field: &str, v: &Bson, expected: &str) -> Error {
    Error::type_mismatch(format!(
        "BSON field '{cmd}.{field}' is the wrong type '{}', expected type '{expected}'",
        type_name(v)
    ))
}

/// The namespace named by the command's first field (`{find: "coll"}`).
pub fn collection_namespace(cmd: &str, db: &str, body: &Document) -> Result<Namespace> {
    match body.get(cmd) {
        Some(Bson::String(coll)) => Namespace::new(db, coll),
        Some(other) => Err(Error::new(
            ErrorCode::InvalidNamespace,
            format!("collection name has invalid type {}", type_name(other)),
        )),
        None => Err(Error::failed_to_parse(format!(
            "missing collection name for {cmd}"
        ))),
    }
}

/// An optional document field.
pub fn opt_document<'a>(
    cmd: &str,
    body: &'a Document,
    field: &str,
) -> Result<Option<&'a Document>> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Document(d)) => Ok(Some(d)),
        Some(other) => Err(wrong_type(cmd, field, other, "object")),
    }
}

/// An optional array field.
pub fn opt_array<'a>(cmd: &str, body: &'a Document, field: &str) -> Result<Option<&'a Vec<Bson>>> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Array(a)) => Ok(Some(a)),
        Some(other) => Err(wrong_type(cmd, field, other, "array")),
    }
}

/// A boolean field; numbers count as booleans as MongoDB allows.
pub fn bool_or(cmd: &str, body: &Document, field: &str, default: bool) -> Result<bool> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(default),
        Some(Bson::Boolean(b)) => Ok(*b),
        Some(Bson::Int32(n)) => Ok(*n != 0),
        Some(Bson::Int64(n)) => Ok(*n != 0),
        Some(Bson::Double(n)) => Ok(*n != 0.0),
        Some(other) => Err(wrong_type(cmd, field, other, "bool")),
    }
}

/// Whether a write command checks documents against the collection's
/// validator: `bypassDocumentValidation: true` skips it.
pub fn document_validation(cmd: &str, body: &Document) -> Result<DocumentValidation> {
    Ok(
        match bool_or(cmd, body, "bypassDocumentValidation", false)? {
            true => DocumentValidation::Bypass,
            false => DocumentValidation::Enforce,
        },
    )
}

/// An optional integral number field (int, long, or a whole double).
pub fn opt_i64(cmd: &str, body: &Document, field: &str) -> Result<Option<i64>> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(v) => number_as_i64(v)
            .map(Some)
            .ok_or_else(|| wrong_type(cmd, field, v, "long")),
    }
}

pub use crate::query::compare::number_as_i64;

/// A non-negative integral field such as `skip` or `batchSize`.
pub fn opt_non_negative(cmd: &str, body: &Document, field: &str) -> Result<Option<u64>> {
    match opt_i64(cmd, body, field)? {
        None => Ok(None),
        Some(n) if n < 0 => Err(Error::new(
            ErrorCode::ValueNegative,
            format!("BSON field '{field}' value must be >= 0, actual value '{n}'"),
        )),
        Some(n) => Ok(Some(n as u64)),
    }
}

/// A string field.
pub fn opt_str<'a>(cmd: &str, body: &'a Document, field: &str) -> Result<Option<&'a str>> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s)),
        Some(other) => Err(wrong_type(cmd, field, other, "string")),
    }
}

/// Arguments every command accepts (MongoDB's generic arguments).
pub const GENERIC_FIELDS: &[&str] = &[
    "apiDeprecationErrors",
    "apiStrict",
    "apiVersion",
    "autocommit",
    "clientOperationKey",
    "comment",
    "lsid",
    "maxTimeMS",
    "mayBypassWriteBlocking",
    "readConcern",
    "startTransaction",
    "stmtId",
    "txnNumber",
    "txnRetryCounter",
    "writeConcern",
];

/// Refuses a field the command does not know, as MongoDB's command
/// parsers do: `{find: "c", frobnicate: 1}` is an error, not ignored.
/// `$`-prefixed fields (`$db`, `$clusterTime`, `$readPreference` …) are
/// for the server and drivers and always pass.
pub fn check_fields(req: &Request<'_>, known: &[&str]) -> Result<()> {
    for key in req.body.keys().skip(1) {
        if key.starts_with('$')
            || known.contains(&key.as_str())
            || GENERIC_FIELDS.contains(&key.as_str())
        {
            continue;
        }
        return Err(Error::new(
            ErrorCode::UnknownField,
            format!("BSON field '{}.{key}' is an unknown field.", req.name),
        ));
    }
    Ok(())
}

fn missing(cmd: &str, field: &str) -> Error {
    Error::new(
        ErrorCode::MissingField,
        format!("BSON field '{cmd}.{field}' is missing but a required field"),
    )
}

/// The documents of an array field (`documents`, `updates`, `deletes`),
/// whether sent in the body or as a document sequence.
pub fn document_list(req: &Request<'_>, field: &str) -> Result<Vec<Document>> {
    let cmd = req.name.as_str();
    if let Some(docs) = req.sequence(field) {
        return docs
            .iter()
            .map(|d| {
                checked_document(d).map_err(|e| Error::new(ErrorCode::InvalidBSON, e.to_string()))
            })
            .collect();
    }
    let Some(items) = opt_array(cmd, &req.body, field)? else {
        return Err(missing(cmd, field));
    };
    let mut docs = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match item {
            Bson::Document(d) => docs.push(d.clone()),
            other => {
                return Err(Error::type_mismatch(format!(
                    "BSON field '{cmd}.{field}.{i}' is the wrong type '{}', expected type 'object'",
                    type_name(other)
                )))
            }
        }
    }
    Ok(docs)
}

/// The documents of an array field as BSON bytes, without building
/// documents when they came as a document sequence.
pub fn raw_document_list(req: &Request<'_>, field: &str) -> Result<Vec<Vec<u8>>> {
    if let Some(docs) = req.sequence(field) {
        return Ok(docs.iter().map(|d| d.to_vec()).collect());
    }
    document_list(req, field)?
        .iter()
        .map(|d| {
            d.to_vec()
                .map_err(|e| Error::bad_value(format!("cannot encode document: {e}")))
        })
        .collect()
}

/// A count as MongoDB reports it in write replies: an int32.
pub fn count_i32(n: u64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Checks the size of a write batch against `maxWriteBatchSize`.
pub fn check_batch_size(n: usize) -> Result<()> {
    if n > crate::wire::MAX_WRITE_BATCH_SIZE {
        return Err(Error::new(
            ErrorCode::InvalidLength,
            format!(
                "Write batch sizes must be between 1 and {}. Got {n} operations.",
                crate::wire::MAX_WRITE_BATCH_SIZE
            ),
        ));
    }
    if n == 0 {
        return Err(Error::new(
            ErrorCode::InvalidLength,
            format!(
                "Write batch sizes must be between 1 and {}. Got 0 operations.",
                crate::wire::MAX_WRITE_BATCH_SIZE
            ),
        ));
    }
    Ok(())
}

/// Sizes live with the pure BSON logic; commands keep their old names.
pub use crate::query::size::{bson_size, document_size};

/// A command's `let`: each variable's expression evaluated once, over no
/// document (so `$$NOW` and literals, not fields), as MongoDB does.
pub fn let_variables(cmd: &str, body: &Document) -> Result<Document> {
    let mut vars = Document::new();
    if let Some(lets) = opt_document(cmd, body, "let")? {
        for (name, value) in lets {
            let v = crate::query::expr::Expr::parse(value)?.evaluate(&Document::new())?;
            vars.insert(name.clone(), v);
        }
    }
    Ok(vars)
}

/// `filter` with the `let` variables bound where a query reads them:
/// inside its `$expr` clauses (at the top or under `$and`, `$or`,
/// `$nor`). Elsewhere `"$$name"` is a plain string, as in MongoDB.
pub fn bind_in_filter(filter: &Document, vars: &Document) -> Document {
    if vars.is_empty() {
        return filter.clone();
    }
    filter
        .iter()
        .map(|(key, value)| {
            let bound = match (key.as_str(), value) {
                ("$expr", v) => crate::aggregate::bind_variables(v, vars),
                ("$and" | "$or" | "$nor", Bson::Array(clauses)) => Bson::Array(
                    clauses
                        .iter()
                        .map(|c| match c {
                            Bson::Document(c) => Bson::Document(bind_in_filter(c, vars)),
                            other => other.clone(),
                        })
                        .collect(),
                ),
                (_, v) => v.clone(),
            };
            (key.clone(), bound)
        })
        .collect()
}

/// An update statement (`q`, `u`, …) with the `let` variables bound in
/// its filter and, for a pipeline update, in its stages.
pub fn bind_in_statement(entry: &Document, vars: &Document, q: &str, u: &str) -> Document {
    if vars.is_empty() {
        return entry.clone();
    }
    let mut bound = entry.clone();
    if let Ok(filter) = entry.get_document(q) {
        bound.insert(q, bind_in_filter(filter, vars));
    }
    if let Some(Bson::Array(stages)) = entry.get(u) {
        let stages: Vec<Bson> = stages
            .iter()
            .map(|s| crate::aggregate::bind_variables(s, vars))
            .collect();
        bound.insert(u, stages);
    }
    bound
}

/// A count as mongod writes it: an int while it fits one, else a long.
pub fn int_or_long(n: impl TryInto<i64>) -> Bson {
    let n: i64 = n.try_into().unwrap_or(i64::MAX);
    match i32::try_from(n) {
        Ok(small) => Bson::Int32(small),
        Err(_) => Bson::Int64(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn wrong_types_name_the_field() {
        let body = doc! {"find": "c", "filter": 3};
        let e = opt_document("find", &body, "filter").unwrap_err();
        assert_eq!(e.code, ErrorCode::TypeMismatch);
        assert!(e.message.contains("find.filter"));
        let e = collection_namespace("find", "db", &doc! {"find": 1}).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidNamespace);
    }
}
