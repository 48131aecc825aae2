//! `distinct`: the distinct values of a field among matching documents.
//! Array values contribute their elements, as in MongoDB.

use bson::{doc, Bson, Document};

use super::args::{collection_namespace, opt_document, opt_str};
use super::request::Request;
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::compare;
use crate::query::filter::Filter;
use crate::router::{DocStream, FindSpec};

/// Collects the values at a dotted path, descending into arrays.
fn collect_values(v: &Bson, path: &[&str], out: &mut Vec<Bson>) {
    match (path.split_first(), v) {
        (None, Bson::Array(items)) => out.extend(items.iter().cloned()),
        (None, v) => out.push(v.clone()),
        (Some((head, rest)), Bson::Document(d)) => {
            if let Some(child) = d.get(*head) {
                collect_values(child, rest, out);
            }
        }
        (Some((head, rest)), Bson::Array(items)) => {
            if let Ok(i) = head.parse::<usize>() {
                if let Some(child) = items.get(i) {
                    collect_values(child, rest, out);
                }
            }
            for item in items {
                if let Bson::Document(_) = item {
                    collect_values(item, path, out);
                }
            }
        }
        _ => {}
    }
}

pub async fn run(req: &Request<'_>) -> Result<Document> {
    super::args::check_fields(req, &["key", "query", "collation", "hint"])?;
    let b = &req.body;
    let ns = collection_namespace("distinct", &req.db, b)?;
    let Some(key) = opt_str("distinct", b, "key")? else {
        return Err(Error::new(
            ErrorCode::MissingField,
            "BSON field 'distinct.key' is missing but a required field",
        ));
    };
    if key.is_empty() {
        return Err(Error::bad_value("distinct key cannot be empty"));
    }
    let path: Vec<&str> = key.split('.').collect();
    let collation = super::collation::effective(req.router(), &ns, b.get("collation"))?;
    let filter = opt_document("distinct", b, "query")?
        .filter(|q| !q.is_empty())
        .map(|q| Filter::parse_collated(q, collation.as_ref()))
        .transpose()?;
    let spec = FindSpec {
        filter,
        ..FindSpec::default()
    };
    let router = req.router().clone();
    let values = match super::views::resolve(&router, &ns).await? {
        Some(view) => {
            let stages = match opt_document("distinct", b, "query")?.filter(|q| !q.is_empty()) {
                Some(q) => vec![doc! {"$match": q.clone()}],
                None => Vec::new(),
            };
            super::aggregate::read_view(req, &view, stages, |docs| distinct_values(docs, &path))
                .await?
        }
        None => {
            // Values equal under the collation are one value.
            router
                .find(&ns, spec, |found| {
                    crate::query::collation::scoped(collation.as_ref(), || {
                        distinct_values(found.documents(), &path)
                    })
                })
                .await?
        }
    };
    Ok(doc! {"values": values})
}

/// The distinct values of `path` in `docs`, sorted.
fn distinct_values(docs: DocStream, path: &[&str]) -> Result<Vec<Bson>> {
    let mut values = Vec::new();
    // Duplicates go whenever the list doubles, so memory follows the
    // distinct values, which may not pass 16 MB.
    let mut unique = 0usize;
    for d in docs {
        collect_values(&Bson::Document(d?), path, &mut values);
        if values.len() >= unique.saturating_mul(2).max(1024) {
            unique = dedup(&mut values)?;
        }
    }
    dedup(&mut values)?;
    Ok(values)
}

/// Sorts and removes duplicate values; fails as MongoDB does once the
/// distinct values pass 16 MB.
fn dedup(values: &mut Vec<Bson>) -> Result<usize> {
    values.sort_by(compare);
    values.dedup_by(|a, b| compare(a, b).is_eq());
    let bytes: usize = values
        .iter()
        .map(|v| super::args::bson_size(v).saturating_add(8))
        .sum();
    if bytes > crate::wire::MAX_BSON_OBJECT_SIZE {
        return Err(Error::new(
            ErrorCode::DistinctTooBig,
            "distinct too big, 16mb cap",
        ));
    }
    Ok(values.len())
}
