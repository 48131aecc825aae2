//! `delete`: a batch of `{q, limit}` statements; `limit` 1 deletes the
//! first match, 0 every match.

use std::sync::atomic::Ordering;

use bson::{doc, Bson, Document};

use super::args::count_i32;
use super::args::{bool_or, check_batch_size, collection_namespace, document_list, number_as_i64};
use super::request::Request;
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::Filter;

/// One `deletes` entry, checked for shape; the filter is parsed when it
/// runs, so a bad filter is that statement's write error.
struct Statement<'a> {
    q: &'a Document,
    multi: bool,
    collation: Option<&'a Bson>,
}

fn check_statement(entry: &Document) -> Result<Statement<'_>> {
    if let Some(field) = entry
        .keys()
        .find(|k| !["q", "limit", "hint", "collation", "sampleId"].contains(&k.as_str()))
    {
        return Err(Error::new(
            ErrorCode::UnknownField,
            format!("BSON field 'delete.deletes.{field}' is an unknown field."),
        ));
    }
    let q = match entry.get("q") {
        Some(Bson::Document(q)) => q,
        Some(other) => {
            return Err(Error::type_mismatch(format!(
                "BSON field 'delete.deletes.q' is the wrong type '{}', expected type 'object'",
                super::args::type_name(other)
            )))
        }
        None => {
            return Err(Error::new(
                ErrorCode::MissingField,
                "BSON field 'delete.deletes.q' is missing but a required field",
            ))
        }
    };
    let limit = match entry.get("limit") {
        None => {
            return Err(Error::new(
                ErrorCode::MissingField,
                "BSON field 'delete.deletes.limit' is missing but a required field",
            ))
        }
        Some(v) => number_as_i64(v).ok_or_else(|| {
            Error::type_mismatch("BSON field 'delete.deletes.limit' must be a number")
        })?,
    };
    if limit != 0 && limit != 1 {
        return Err(Error::failed_to_parse(format!(
            "The limit field in delete objects must be 0 or 1. Got {limit}"
        )));
    }
    Ok(Statement {
        q,
        multi: limit == 0,
        collation: entry.get("collation"),
    })
}

pub async fn run(req: &Request<'_>) -> Result<Document> {
    super::args::check_fields(req, &["deletes", "ordered", "let"])?;
    let ns = collection_namespace("delete", &req.db, &req.body)?;
    super::views::refuse(req.router(), &ns).await?;
    let entries = document_list(req, "deletes")?;
    check_batch_size(entries.len())?;
    let ordered = bool_or("delete", &req.body, "ordered", true)?;
    let mut n = 0i64;
    let mut errors = Vec::new();
    let statements = entries
        .iter()
        .map(check_statement)
        .collect::<Result<Vec<_>>>()?;
    let vars = super::args::let_variables("delete", &req.body)?;
    for (i, st) in statements.iter().enumerate() {
        req.state.counters.op_delete.fetch_add(1, Ordering::Relaxed);
        let parsed = super::collation::effective(req.router(), &ns, st.collation).and_then(|c| {
            Filter::parse_collated(&super::args::bind_in_filter(st.q, &vars), c.as_ref())
        });
        let result = match parsed {
            Ok(filter) => req.router().delete(&ns, &filter, st.multi, None).await,
            Err(e) => Err(e),
        };
        match result {
            Ok((deleted, _)) => n += deleted as i64,
            Err(e) => {
                errors.push(Bson::Document(e.to_write_error(i)));
                if ordered {
                    break;
                }
            }
        }
    }
    let mut reply = doc! {"n": count_i32(n as u64)};
    if !errors.is_empty() {
        reply.insert("writeErrors", errors);
    }
    Ok(reply)
}
