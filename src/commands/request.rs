//! One command as a handler receives it, and the signature every handler
//! has. Below every handler, the registry and the dispatch in `mod.rs`.

use bson::Document;
use bytes::Bytes;
use futures::future::BoxFuture;

use super::state::{ConnectionInfo, ServerState};
use crate::error::Result;

/// One command to run.
pub struct Request<'a> {
    pub state: &'a ServerState,
    pub conn: &'a ConnectionInfo,
    /// The command's name, as sent (its first field).
    pub name: String,
    /// The database it runs against (`$db`).
    pub db: String,
    pub body: Document,
    /// Document sequences sent beside the body (OP_MSG kind 1), as
    /// validated BSON: `insert`'s `documents`, `update`'s `updates` …
    pub sequences: Vec<(String, Vec<Bytes>)>,
}

impl Request<'_> {
    /// The raw documents of a sequence, if the client sent one by that name.
    pub fn sequence(&self, name: &str) -> Option<&[Bytes]> {
        self.sequences
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, docs)| docs.as_slice())
    }
}

/// The signature every command implements.
pub type Handler = for<'a> fn(&'a Request<'a>) -> BoxFuture<'a, Result<Document>>;
