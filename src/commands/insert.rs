//! `insert`: ordered or unordered batches; each failed document is a
//! `writeErrors` entry with its batch index.

use std::sync::atomic::Ordering;

use bson::{doc, Bson, Document};

use super::args::count_i32;
use super::args::{bool_or, check_batch_size, collection_namespace, raw_document_list};
use super::request::Request;
use crate::error::Result;

pub async fn run(req: &Request<'_>) -> Result<Document> {
    super::args::check_fields(req, &["documents", "ordered", "bypassDocumentValidation"])?;
    let ns = collection_namespace("insert", &req.db, &req.body)?;
    super::views::refuse(req.router(), &ns).await?;
    let docs = raw_document_list(req, "documents")?;
    check_batch_size(docs.len())?;
    let ordered = bool_or("insert", &req.body, "ordered", true)?;
    let count = docs.len() as u64;
    let validation = super::args::document_validation("insert", &req.body)?;
    let outcome = req.router().insert(&ns, docs, ordered, validation).await?;
    req.state
        .counters
        .op_insert
        .fetch_add(count, Ordering::Relaxed);
    let mut reply = doc! {"n": count_i32(outcome.inserted)};
    if !outcome.errors.is_empty() {
        let errors: Vec<Bson> = outcome
            .errors
            .iter()
            .map(|(i, e)| Bson::Document(e.to_write_error(*i)))
            .collect();
        reply.insert("writeErrors", errors);
    }
    Ok(reply)
}
