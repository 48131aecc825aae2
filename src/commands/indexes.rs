//! Index commands: `createIndexes`, `listIndexes`, `dropIndexes`, and the
//! `index` option of `collMod`.

use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::args::{check_fields, collection_namespace, document_list};
use super::request::Request;
use crate::cursor::{cursor_batch_size, reply_with_cursor};
use crate::error::{Error, ErrorCode, Result};
use crate::index::{parse_expire_after, Index, ID_INDEX_NAME};
use crate::router::indexes::show_key;
use crate::router::Namespace;
use crate::{bail, err};

pub async fn create_indexes(req: &Request<'_>) -> Result<Document> {
    let ns = collection_namespace("createIndexes", &req.db, &req.body)?;
    super::views::refuse(&req.state.router, &ns).await?;
    let specs = document_list(req, "indexes")?;
    if specs.is_empty() {
        bail!(BadValue, "Must specify at least one index to create");
    }
    let router = &req.state.router;
    // An index without its own collation takes the collection's default.
    let mut specs = specs;
    if let Some(default) = super::collation::collection_default(router, &ns)? {
        for spec in specs.iter_mut().filter(|s| !s.contains_key("collation")) {
            spec.insert("collation", default.spec().clone());
        }
    }
    let created = router.create_indexes(&ns, &specs).await?;
    router.durable(created.seq).await?;
    let mut reply = doc! {
        "numIndexesBefore": created.before as i32,
        "numIndexesAfter": created.after as i32,
    };
    if created.before == created.after {
        reply.insert("note", "all indexes already exist");
    } else {
        reply.insert("createdCollectionAutomatically", created.created_collection);
    }
    Ok(reply)
}

/// The `_id` index as `listIndexes` shows it.
fn id_index_spec() -> Document {
    doc! {"v": 2, "key": {"_id": 1}, "name": ID_INDEX_NAME}
}

pub async fn list_indexes(req: &Request<'_>) -> Result<Document> {
    let ns = collection_namespace("listIndexes", &req.db, &req.body)?;
    super::views::refuse(&req.state.router, &ns).await?;
    let Some(coll) = req.state.router.collection(&ns) else {
        return Err(Error::new(
            ErrorCode::NamespaceNotFound,
            format!("ns does not exist: {ns}"),
        ));
    };
    let batch_size = cursor_batch_size("listIndexes", &req.body)?;
    let options = coll.options();
    // A time-series collection has no `_id` index; a clustered one's is
    // the clustered index.
    let mut specs = match (&options.timeseries, options.document.get("clusteredIndex")) {
        (Some(_), _) => Vec::new(),
        (None, Some(clustered)) => {
            let mut spec = id_index_spec();
            if let Some(name) = clustered.as_document().and_then(|c| c.get_str("name").ok()) {
                spec.insert("name", name);
            }
            spec.insert("unique", true);
            spec.insert("clustered", true);
            vec![spec]
        }
        (None, None) => vec![id_index_spec()],
    };
    specs.extend(coll.indexes().iter().map(|i| i.spec()));
    reply_with_cursor(
        &req.state.cursors,
        req.cursor_opener(),
        ns.full(),
        specs,
        batch_size,
    )
}

/// The index numbers `dropIndexes`' `index` field names.
fn pick_dropped(ns: &Namespace, which: &Bson, indexes: &[Arc<Index>]) -> Result<Vec<u32>> {
    let by_name = |name: &str| -> Result<u32> {
        if name == ID_INDEX_NAME {
            bail!(InvalidOptions, "cannot drop _id index");
        }
        indexes
            .iter()
            .find(|i| i.name == name)
            .map(|i| i.number)
            .ok_or_else(|| err!(IndexNotFound, "index not found with name [{name}]"))
    };
    match which {
        Bson::String(s) if s == "*" => Ok(indexes.iter().map(|i| i.number).collect()),
        Bson::String(s) => Ok(vec![by_name(s)?]),
        Bson::Array(names) => names
            .iter()
            .map(|n| match n {
                Bson::String(s) if s != "*" => by_name(s),
                _ => Err(err!(
                    TypeMismatch,
                    "dropIndexes 'index' array must hold index names (strings)"
                )),
            })
            .collect(),
        Bson::Document(key) => {
            if key == &doc! {"_id": 1} {
                bail!(InvalidOptions, "cannot drop _id index");
            }
            let matching: Vec<&Arc<Index>> =
                indexes.iter().filter(|i| &i.key == key).collect();
            match matching.as_slice() {
                [] => bail!(
                    IndexNotFound,
                    "can't find index with key: {} in {ns}",
                    show_key(key)
                ),
                [one] => Ok(vec![one.number]),
                _ => bail!(
                    AmbiguousIndexKeyPattern,
                    "{} indexes found for key: {}, identify by name instead. Conflicting indexes: {}",
                    matching.len(),
                    show_key(key),
                    matching
                        .iter()
                        .map(|i| show_key(&i.spec()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
        _ => bail!(
            TypeMismatch,
            "BSON field 'dropIndexes.index' is the wrong type, expected a string, an array of strings or an object"
        ),
    }
}

pub async fn drop_indexes(req: &Request<'_>) -> Result<Document> {
    let ns = collection_namespace("dropIndexes", &req.db, &req.body)?;
    super::views::refuse(&req.state.router, &ns).await?;
    check_fields(req, &["index"])?;
    let Some(which) = req.body.get("index") else {
        bail!(
            FailedToParse,
            "BSON field 'dropIndexes.index' is missing but a required field"
        );
    };
    let router = &req.state.router;
    let dropped = router
        .drop_indexes(&ns, |indexes| pick_dropped(&ns, which, indexes))
        .await?;
    let Some((was, seq)) = dropped else {
        return Err(Error::new(
            ErrorCode::NamespaceNotFound,
            format!("ns not found {ns}"),
        ));
    };
    router.durable(seq).await?;
    let mut reply = doc! {"nIndexesWas": was as i32};
    if matches!(which, Bson::String(s) if s == "*") {
        reply.insert("msg", "non-_id indexes dropped for collection");
    }
    Ok(reply)
}

/// The `index` part of `collMod`: changes `expireAfterSeconds` or
/// `hidden` of one index, named by `keyPattern` or `name`; returns the
/// reply's fields saying what changed.
pub async fn modify_index(req: &Request<'_>, ns: &Namespace, spec: &Bson) -> Result<Document> {
    let router = &req.state.router;
    let Bson::Document(spec) = spec else {
        bail!(
            TypeMismatch,
            "BSON field 'collMod.index' is the wrong type, expected type 'object'"
        );
    };
    for key in spec.keys() {
        if !matches!(
            key.as_str(),
            "keyPattern" | "name" | "expireAfterSeconds" | "hidden"
        ) {
            return Err(Error::new(
                ErrorCode::UnknownField,
                format!("BSON field 'collMod.index.{key}' is an unknown field."),
            ));
        }
    }
    let pick: Box<dyn Fn(&Index) -> bool + Send + Sync> =
        match (spec.get("keyPattern"), spec.get("name")) {
            (Some(_), Some(_)) => {
                bail!(InvalidOptions, "Cannot specify both key pattern and name.")
            }
            (Some(Bson::Document(k)), None) => {
                let k = k.clone();
                Box::new(move |i: &Index| i.key == k)
            }
            (None, Some(Bson::String(n))) => {
                let n = n.clone();
                Box::new(move |i: &Index| i.name == n)
            }
            _ => bail!(
                InvalidOptions,
                "collMod 'index' needs either 'keyPattern' (an object) or 'name' (a string)"
            ),
        };
    let expire = spec
        .get("expireAfterSeconds")
        .map(parse_expire_after)
        .transpose()?;
    let hidden = match spec.get("hidden") {
        None => None,
        Some(Bson::Boolean(b)) => Some(*b),
        Some(_) => bail!(
            TypeMismatch,
            "BSON field 'collMod.index.hidden' is the wrong type, expected type 'bool'"
        ),
    };
    if expire.is_none() && hidden.is_none() {
        bail!(
            InvalidOptions,
            "no expireAfterSeconds or hidden field to change"
        );
    }
    if router.collection(ns).is_none() {
        bail!(NamespaceNotFound, "ns does not exist: {ns}");
    }
    let changed = router
        .modify_index(ns, &pick, |index| {
            if expire.is_some() && index.fields.len() > 1 {
                bail!(
                    InvalidOptions,
                    "TTL indexes are single-field indexes, compound indexes do not support TTL"
                );
            }
            Ok(index.with_options(
                expire.or(index.expire_after_secs),
                hidden.unwrap_or(index.hidden),
            ))
        })
        .await?;
    let Some((before, after, seq)) = changed else {
        let named = spec
            .get("keyPattern")
            .map(|k| k.to_string())
            .or_else(|| spec.get_str("name").ok().map(str::to_string))
            .unwrap_or_default();
        bail!(IndexNotFound, "cannot find index {named} for ns {ns}");
    };
    router.durable(seq).await?;
    let mut reply = Document::new();
    if expire.is_some() {
        if let Some(old) = before.expire_after_secs {
            reply.insert("expireAfterSeconds_old", old);
        }
        if let Some(new) = after.expire_after_secs {
            reply.insert("expireAfterSeconds_new", new);
        }
    }
    if hidden.is_some() {
        reply.insert("hidden_old", before.hidden);
        reply.insert("hidden_new", after.hidden);
    }
    Ok(reply)
}

/// `validate`: checks the collection's indexes against its documents.
pub async fn validate(req: &Request<'_>) -> Result<Document> {
    let ns = collection_namespace("validate", &req.db, &req.body)?;
    super::views::refuse(&req.state.router, &ns).await?;
    let router = &req.state.router;
    let Some(coll) = router.collection(&ns) else {
        bail!(
            NamespaceNotFound,
            "Collection '{ns}' does not exist to validate."
        );
    };
    let report = router.validate(&coll).await?;
    let mut keys_per_index = Document::new();
    let mut details = Document::new();
    for (name, n) in &report.keys_per_index {
        keys_per_index.insert(name.clone(), *n as i64);
        let valid = !report.missing.iter().any(|m| &m.0 == name)
            && !report.extra.iter().any(|e| &e.0 == name);
        details.insert(name.clone(), doc! {"valid": valid});
    }
    let mut errors = Vec::new();
    if !report.missing.is_empty() {
        errors.push(Bson::String(format!(
            "{} index entries are missing: documents without the entries their keys call for",
            report.missing.len()
        )));
    }
    if !report.extra.is_empty() {
        errors.push(Bson::String(format!(
            "{} extra index entries: entries without a document that gives them",
            report.extra.len()
        )));
    }
    if !report.corrupt_records.is_empty() {
        errors.push(Bson::String(format!(
            "{} records cannot be read as BSON documents",
            report.corrupt_records.len()
        )));
    }
    let missing: Vec<Bson> = report
        .missing
        .iter()
        .map(|(index, id, key)| {
            Bson::Document(doc! {"indexName": index, "recordId": id.clone(), "key": key.clone()})
        })
        .collect();
    let extra: Vec<Bson> = report
        .extra
        .iter()
        .map(|(index, key)| Bson::Document(doc! {"indexName": index, "key": key.clone()}))
        .collect();
    let corrupt: Vec<Bson> = report
        .corrupt_records
        .iter()
        .map(|k| {
            Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: k.clone(),
            })
        })
        .collect();
    Ok(doc! {
        "ns": ns.full(),
        "uuid": coll.uuid.clone(),
        "nInvalidDocuments": corrupt.len() as i64,
        "nNonCompliantDocuments": 0,
        "nrecords": report.records as i64,
        "nIndexes": report.keys_per_index.len() as i32,
        "keysPerIndex": keys_per_index,
        "indexDetails": details,
        "valid": report.valid(),
        "repaired": false,
        "warnings": [],
        "errors": errors,
        "extraIndexEntries": extra,
        "missingIndexEntries": missing,
        "corruptRecords": corrupt,
    })
}

/// `nindexes` and `indexSizes` of `collStats`: every index by name. Index
/// sizes are not tracked; each shows 0 bytes.
pub fn index_counts(coll: &crate::router::Collection) -> (i32, Document) {
    let mut sizes = doc! {ID_INDEX_NAME: 0_i64};
    for index in coll.indexes().iter() {
        sizes.insert(index.name.clone(), 0_i64);
    }
    (sizes.len() as i32, sizes)
}
