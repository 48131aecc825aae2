//! `update`: a batch of update statements, each with a filter, an update
//! (operators or a replacement), `multi`, `upsert` and `arrayFilters`.
//! Counts follow MongoDB: `n` is matched plus upserted, `nModified` the
//! documents that really changed, `upserted` lists `{index, _id}`.

use std::sync::atomic::Ordering;

use bson::{doc, Bson, Document};

use super::args::count_i32;
use super::args::{bool_or, check_batch_size, collection_namespace, document_list, opt_array};
use super::request::Request;
use crate::aggregate::parse_update;
use crate::error::{Error, Result};
use crate::query::filter::Filter;
use crate::router::timeseries::TimeSeries;
use crate::router::{DocumentValidation, UpdateStatement};

/// Parses one entry of `updates`.
pub fn parse_statement(entry: &Document) -> Result<UpdateStatement> {
    let filter = match entry.get("q") {
        Some(Bson::Document(q)) => Filter::parse(q)?,
        Some(other) => {
            return Err(Error::type_mismatch(format!(
                "BSON field 'update.updates.q' is the wrong type '{}', expected type 'object'",
                super::args::type_name(other)
            )))
        }
        None => {
            return Err(Error::new(
                crate::error::ErrorCode::MissingField,
                "BSON field 'update.updates.q' is missing but a required field",
            ))
        }
    };
    let Some(u) = entry.get("u") else {
        return Err(Error::new(
            crate::error::ErrorCode::MissingField,
            "BSON field 'update.updates.u' is missing but a required field",
        ));
    };
    let array_filters = match opt_array("update.updates", entry, "arrayFilters")? {
        None => None,
        Some(items) => {
            let mut filters = Vec::with_capacity(items.len());
            for f in items {
                match f {
                    Bson::Document(d) => filters.push(d.clone()),
                    other => {
                        return Err(Error::type_mismatch(format!(
                            "BSON field 'update.updates.arrayFilters' is the wrong type '{}', expected type 'object'",
                            super::args::type_name(other)
                        )))
                    }
                }
            }
            Some(filters)
        }
    };
    let update = parse_update(u, array_filters.as_deref())?;
    let multi = bool_or("update.updates", entry, "multi", false)?;
    let upsert = bool_or("update.updates", entry, "upsert", false)?;
    if multi && update.is_replacement() {
        return Err(Error::failed_to_parse(
            "multi update is not supported for replacement-style update",
        ));
    }
    Ok(UpdateStatement {
        filter,
        update,
        multi,
        upsert,
        sort: None,
        return_documents: false,
        validation: DocumentValidation::Enforce,
    })
}

pub async fn run(req: &Request<'_>) -> Result<Document> {
    super::args::check_fields(
        req,
        &["updates", "ordered", "bypassDocumentValidation", "let"],
    )?;
    let ns = collection_namespace("update", &req.db, &req.body)?;
    super::views::refuse(req.router(), &ns).await?;
    let entries = document_list(req, "updates")?;
    check_batch_size(entries.len())?;
    let ordered = bool_or("update", &req.body, "ordered", true)?;
    let validation = super::args::document_validation("update", &req.body)?;
    let mut n = 0i64;
    let mut modified = 0i64;
    let mut upserted = Vec::new();
    let mut errors = Vec::new();
    // A statement without `q` or `u` fails the whole command; a bad
    // filter or update fails only its statement.
    for entry in &entries {
        // As MongoDB 7.0's parser: `sort`, which 8.0 added, is unknown here.
        if let Some(field) = entry
            .keys()
            .find(|k| !STATEMENT_FIELDS.contains(&k.as_str()))
        {
            return Err(Error::new(
                crate::error::ErrorCode::UnknownField,
                format!("BSON field 'update.updates.{field}' is an unknown field."),
            ));
        }
        for field in ["q", "u"] {
            match entry.get(field) {
                Some(Bson::Document(_)) => {}
                Some(Bson::Array(_)) if field == "u" => {}
                Some(other) => {
                    return Err(Error::type_mismatch(format!(
                        "BSON field 'update.updates.{field}' is the wrong type '{}', expected type 'object'",
                        super::args::type_name(other)
                    )))
                }
                None => {
                    return Err(Error::new(
                        crate::error::ErrorCode::MissingField,
                        format!("BSON field 'update.updates.{field}' is missing but a required field"),
                    ))
                }
            }
        }
    }
    let vars = super::args::let_variables("update", &req.body)?;
    let timeseries = req
        .router()
        .collection(&ns)
        .and_then(|c| c.options().timeseries.clone());
    for (i, entry) in entries.iter().enumerate() {
        req.state.counters.op_update.fetch_add(1, Ordering::Relaxed);
        let checked = match &timeseries {
            Some(ts) => check_time_series_update(ts, entry),
            None => Ok(()),
        };
        let entry = &statement_with_variables(entry, &vars)?;
        let result = match checked.and_then(|()| parse_statement(entry)) {
            Ok(stmt) => match collated_filter(req, &ns, entry) {
                Ok(filter) => {
                    let filter = filter.unwrap_or(stmt.filter);
                    let stmt = UpdateStatement {
                        validation,
                        filter,
                        ..stmt
                    };
                    req.router().update(&ns, &stmt).await
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        match result {
            Ok(outcome) => {
                n += outcome.matched as i64;
                modified += outcome.modified as i64;
                if let Some(id) = outcome.upserted_id {
                    n += 1;
                    upserted.push(Bson::Document(doc! {"index": i as i32, "_id": id}));
                }
            }
            Err(e) => {
                errors.push(Bson::Document(e.to_write_error(i)));
                if ordered {
                    break;
                }
            }
        }
    }
    let mut reply = doc! {"n": count_i32(n as u64), "nModified": count_i32(modified as u64)};
    if !upserted.is_empty() {
        reply.insert("upserted", upserted);
    }
    if !errors.is_empty() {
        reply.insert("writeErrors", errors);
    }
    Ok(reply)
}

/// The statement's filter under its collation (or its collection's
/// default), when that is not the simple one.
fn collated_filter(
    req: &Request<'_>,
    ns: &crate::router::Namespace,
    entry: &Document,
) -> Result<Option<Filter>> {
    let collation = super::collation::effective(req.router(), ns, entry.get("collation"))?;
    match (collation, entry.get("q")) {
        (Some(c), Some(Bson::Document(q))) => Ok(Some(Filter::parse_collated(q, Some(&c))?)),
        _ => Ok(None),
    }
}

/// The fields of an update statement MongoDB 7.0 knows.
const STATEMENT_FIELDS: [&str; 11] = [
    "q",
    "u",
    "c",
    "arrayFilters",
    "multi",
    "upsert",
    "upsertSupplied",
    "hint",
    "collation",
    "sampleId",
    "allowShardKeyUpdatesWithoutFullShardKeyInQuery",
];

/// A statement with the command's `let` variables, and its own
/// constants (`c`, for a pipeline update), bound.
fn statement_with_variables(entry: &Document, vars: &Document) -> Result<Document> {
    let mut vars = vars.clone();
    if let Some(constants) = super::args::opt_document("update.updates", entry, "c")? {
        vars.extend(constants.clone());
    }
    Ok(super::args::bind_in_statement(entry, &vars, "q", "u"))
}

/// An update statement on a time-series collection, checked against
/// MongoDB 7.0's rules ([`TimeSeries::check_update`]).
fn check_time_series_update(ts: &TimeSeries, entry: &Document) -> Result<()> {
    let q = entry.get_document("q").cloned().unwrap_or_default();
    let u = entry.get("u").cloned().unwrap_or(Bson::Null);
    let multi = bool_or("update", entry, "multi", false)?;
    let upsert = bool_or("update", entry, "upsert", false)?;
    ts.check_update(&q, &u, multi, upsert)
}
