//! Commands on sessions and their transactions: `commitTransaction`,
//! `abortTransaction`, `endSessions` and `killSessions`
//! ([`super::transactions`] keeps the sessions).

use bson::{doc, Bson, Document};

use super::request::Request;
use super::transactions::Entered;
use crate::error::{Error, ErrorCode, Result};

/// `commitTransaction`.
pub async fn commit_transaction(req: &Request<'_>) -> Result<Document> {
    match &req.transaction {
        Entered::Statement(running) => req.state.sessions.commit(running).await,
        Entered::Committed => Ok(Document::new()),
        Entered::Alone => Err(Error::new(
            ErrorCode::InvalidOptions,
            "commitTransaction must be run within a transaction",
        )),
    }
}

/// `abortTransaction`.
pub async fn abort_transaction(req: &Request<'_>) -> Result<Document> {
    match &req.transaction {
        Entered::Statement(running) => {
            req.state.sessions.abort(running);
            Ok(Document::new())
        }
        Entered::Committed => Err(Error::new(
            ErrorCode::TransactionCommitted,
            "Transaction has been committed: it cannot be aborted",
        )),
        Entered::Alone => Err(Error::new(
            ErrorCode::InvalidOptions,
            "abortTransaction must be run within a transaction",
        )),
    }
}

/// `endSessions` / `killSessions`: `[{id: <uuid>}, ...]`.
pub async fn end_sessions(req: &Request<'_>) -> Result<Document> {
    let ids: Vec<Vec<u8>> = match req.body.get(&req.name) {
        Some(Bson::Array(sessions)) => sessions
            .iter()
            .filter_map(Bson::as_document)
            .filter_map(|s| match s.get("id") {
                Some(Bson::Binary(b)) => Some(b.bytes.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    req.state.sessions.end_sessions(&ids);
    Ok(doc! {})
}
