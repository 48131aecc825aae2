//! Index commands. Every collection has its `_id` index (records are
//! keyed by `_id`); secondary indexes are not built yet, so
//! `createIndexes` validates the specs and acknowledges them without
//! building anything, and `listIndexes` shows the `_id` index only.

use bson::{doc, Bson, Document};

use super::args::{collection_namespace, document_list};
use super::Request;
use crate::cursor::first_batch_reply;
use crate::error::{Error, ErrorCode, Result};

pub async fn create_indexes(req: &Request<'_>) -> Result<Document> {
    let ns = collection_namespace("createIndexes", &req.db, &req.body)?;
    let specs = document_list(req, "indexes")?;
    for spec in &specs {
        match spec.get("key") {
            Some(Bson::Document(k)) if !k.is_empty() => {}
            _ => {
                return Err(Error::new(
                    ErrorCode::CannotCreateIndex,
                    "index specification must have a non-empty 'key' document",
                ))
            }
        }
        if !matches!(spec.get("name"), Some(Bson::String(_))) {
            return Err(Error::new(
                ErrorCode::CannotCreateIndex,
                "index specification must have a 'name' string",
            ));
        }
    }
    let router = &req.state.router;
    let existed = router.catalog.get(&ns).is_some();
    let (_, seq) = tokio::task::block_in_place(|| router.collection_for_write(&ns))?;
    router.durable(seq).await?;
    Ok(doc! {
        "numIndexesBefore": 1,
        "numIndexesAfter": 1,
        "createdCollectionAutomatically": !existed,
        "note": "secondary indexes are not built yet; queries scan the collection",
    })
}

pub async fn list_indexes(req: &Request<'_>) -> Result<Document> {
    let ns = collection_namespace("listIndexes", &req.db, &req.body)?;
    if req.state.router.catalog.get(&ns).is_none() {
        return Err(Error::new(
            ErrorCode::NamespaceNotFound,
            format!("ns does not exist: {ns}"),
        ));
    }
    let id_index = doc! {"v": 2, "key": {"_id": 1}, "name": "_id_"};
    Ok(first_batch_reply(
        0,
        &ns.full(),
        vec![Bson::Document(id_index)],
    ))
}

pub async fn drop_indexes(req: &Request<'_>) -> Result<Document> {
    let ns = collection_namespace("dropIndexes", &req.db, &req.body)?;
    if req.state.router.catalog.get(&ns).is_none() {
        return Err(Error::new(
            ErrorCode::NamespaceNotFound,
            format!("ns not found {ns}"),
        ));
    }
    match req.body.get("index") {
        Some(Bson::String(s)) if s == "*" => {
            Ok(doc! {"nIndexesWas": 1, "msg": "non-_id indexes dropped for collection"})
        }
        Some(Bson::String(s)) if s == "_id_" => Err(Error::new(
            ErrorCode::InvalidOptions,
            "cannot drop _id index",
        )),
        Some(Bson::String(s)) => Err(Error::new(
            ErrorCode::IndexNotFound,
            format!("index not found with name [{s}]"),
        )),
        Some(Bson::Document(k)) if k == &doc! {"_id": 1} => Err(Error::new(
            ErrorCode::InvalidOptions,
            "cannot drop _id index",
        )),
        Some(Bson::Document(k)) => Err(Error::new(
            ErrorCode::IndexNotFound,
            format!("can't find index with key: {k}"),
        )),
        _ => Err(Error::type_mismatch(
            "dropIndexes 'index' must be a string or a document",
        )),
    }
}
