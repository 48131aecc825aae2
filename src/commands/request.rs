//! One command as a handler receives it, and the signature every handler
//! has. Below every handler, the registry and the dispatch in `mod.rs`.

use bson::{Document, RawDocumentBuf};
use bytes::Bytes;
use futures::future::BoxFuture;

use super::state::{ConnectionInfo, ServerState, UserName};
use super::transactions::Entered;
use crate::cursor::Opener;
use crate::error::Result;
use crate::router::SharedRouter;

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
    /// The client would take a stream of replies (OP_MSG's
    /// `exhaustAllowed`); only the streaming `hello` gives one.
    pub exhaust_allowed: bool,
    /// The transaction it runs in, if any.
    pub transaction: Entered,
}

impl Request<'_> {
    /// The user logged in on the connection under `--auth`; `None`
    /// without access control.
    pub fn user(&self) -> Option<UserName> {
        if !self.state.security.enabled {
            return None;
        }
        self.conn.auth.lock().user.clone()
    }

    /// The router the command runs on: its transaction's, inside one.
    pub fn router(&self) -> &SharedRouter {
        match &self.transaction {
            Entered::Statement(running) => running.router(),
            _ => &self.state.router,
        }
    }

    /// Who opens a cursor this command leaves open: the connection, and
    /// under `--auth` its user, the only one that may read on.
    pub fn cursor_opener(&self) -> Opener {
        Opener {
            conn: self.conn.id,
            user: self.user(),
        }
    }

    /// The raw documents of a sequence, if the client sent one by that name.
    pub fn sequence(&self, name: &str) -> Option<&[Bytes]> {
        self.sequences
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, docs)| docs.as_slice())
    }
}

/// The signature every command implements.
pub type Handler = for<'a> fn(&'a Request<'a>) -> BoxFuture<'a, Result<CommandReply>>;

/// What a command answers.
#[derive(Debug)]
pub enum CommandReply {
    /// A reply document; `ok: 1` is added when it has none.
    Document(Document),
    /// A reply already encoded, `ok` included: a point read's, built
    /// around the stored document's bytes without decoding them.
    Encoded(RawDocumentBuf),
}

impl From<Document> for CommandReply {
    fn from(doc: Document) -> CommandReply {
        CommandReply::Document(doc)
    }
}

impl CommandReply {
    /// The reply as a document, decoding an encoded one.
    pub fn into_document(self) -> Result<Document> {
        match self {
            CommandReply::Document(doc) => Ok(doc),
            CommandReply::Encoded(raw) => Document::try_from(raw.as_ref()).map_err(|e| {
                crate::error::Error::internal(format!("a reply is not valid BSON: {e}"))
            }),
        }
    }
}
