//! One client connection: read a message, run it, write the reply.
//!
//! A malformed frame ends only this connection; a command that fails is
//! an error reply and the connection goes on. Shutdown is noticed only
//! between requests, so a reply in flight is always finished.

use std::net::SocketAddr;

use bson::{doc, Bson, Document};
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::codec::Framed;

use crate::commands::{self, ConnectionInfo, ServerState};
use crate::error::{Error, ErrorCode};
use crate::wire::message::checked_document;
use crate::wire::{BsonCheckError, Command, Message, MessageCodec, Reply};

pub async fn serve(
    socket: TcpStream,
    peer: SocketAddr,
    state: ServerState,
    mut stop: watch::Receiver<bool>,
) {
    let conn = ConnectionInfo::open(&state, peer);
    tracing::info!(conn = conn.id, %peer, "connection opened");
    let mut framed = Framed::new(socket, MessageCodec);
    let reason = loop {
        let next = tokio::select! {
            _ = stop.changed() => break "server shutting down",
            next = framed.next() => next,
        };
        let message = match next {
            None => break "closed by client",
            Some(Err(e)) => {
                tracing::warn!(conn = conn.id, "bad message, closing: {e}");
                break "bad message";
            }
            Some(Ok(m)) => m,
        };
        let reply = match message {
            Message::Msg(msg) => {
                let body = match msg.command() {
                    Ok(cmd) => commands::handle(&state, &conn, cmd).await,
                    Err(e) => error_reply(&bson_error(&e)),
                };
                if msg.more_to_come() {
                    continue;
                }
                encode(&body).map(|body| Reply::Msg {
                    response_to: msg.request_id,
                    body,
                })
            }
            Message::Query(q) => {
                let body = match legacy_command(&q.full_collection_name, &q.query) {
                    Ok(body) => {
                        let cmd = Command {
                            body,
                            sequences: Vec::new(),
                        };
                        commands::handle(&state, &conn, cmd).await
                    }
                    Err(e) => error_reply(&e),
                };
                encode(&body).map(|body| Reply::Legacy {
                    response_to: q.request_id,
                    body,
                })
            }
        };
        let Some(reply) = reply else {
            break "reply could not be encoded";
        };
        if let Err(e) = framed.send(reply).await {
            tracing::debug!(conn = conn.id, "write failed: {e}");
            break "write failed";
        }
    };
    tracing::info!(conn = conn.id, %peer, reason, "connection closed");
}

fn encode(doc: &Document) -> Option<Vec<u8>> {
    match doc.to_vec() {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!("cannot encode reply: {e}");
            None
        }
    }
}

fn bson_error(e: &BsonCheckError) -> Error {
    match e {
        BsonCheckError::TooDeep => Error::new(ErrorCode::Overflow, e.to_string()),
        BsonCheckError::Invalid(_) => Error::new(ErrorCode::InvalidBSON, e.to_string()),
    }
}

fn error_reply(e: &Error) -> Document {
    let mut d = doc! {"ok": 0.0};
    d.extend(e.to_reply_fields());
    d
}

/// Turns an OP_QUERY on `db.$cmd` into a command document with `$db`.
fn legacy_command(full_name: &str, query: &[u8]) -> Result<Document, Error> {
    let Some(db) = full_name.strip_suffix(".$cmd") else {
        return Err(Error::new(
            ErrorCode::CommandNotSupported,
            format!("OP_QUERY is only supported for commands, not for {full_name}; use OP_MSG"),
        ));
    };
    let mut cmd = checked_document(query).map_err(|e| bson_error(&e))?;
    // Old drivers wrap the command as {$query: {...}, $readPreference: ...}.
    if let Some(Bson::Document(inner)) = cmd.get("$query") {
        cmd = inner.clone();
    }
    cmd.insert("$db", db);
    Ok(cmd)
}
