//! One client connection: read a message, run it, write the reply.
//!
//! A malformed frame ends only this connection; a command that fails is
//! an error reply and the connection goes on. Shutdown is noticed only
//! between requests, so a reply in flight is always finished.
//!
//! An idle client may stay as long as it likes (as with mongod), but once
//! a message's first bytes arrive the rest must follow within
//! `--partial-message-timeout-secs`, so a client cannot hold a connection
//! (and the buffer its message header asked for) by trickling bytes.
//!
//! While a command runs, its operation asks [`client_connected`] every so
//! often whether the client is still there, and stops if it is not.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document};
use futures::{FutureExt, SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::codec::Framed;

use super::WarnLimit;
use crate::commands::{self, ConnectionInfo, ServerState};
use crate::error::{Error, ErrorCode};
use crate::query::interrupt::Probe;
use crate::wire::message::checked_document;
use crate::wire::{BsonCheckError, Command, Message, MessageCodec, Reply};

/// Bad frames from many connections (a fuzzer, a confused client) would
/// otherwise log a warning each.
static BAD_MESSAGE_WARNINGS: WarnLimit = WarnLimit::new();

pub async fn serve(
    socket: TcpStream,
    peer: SocketAddr,
    state: ServerState,
    mut stop: watch::Receiver<bool>,
) {
    let conn = ConnectionInfo::open(&state, peer, probe(&socket));
    tracing::info!(conn = conn.id, %peer, "connection opened");
    let partial_limit = state.config.partial_message_timeout();
    let mut framed = Framed::new(socket, MessageCodec);
    let reason = loop {
        if framed.read_buffer().is_empty() {
            // Idle: wait as long as it takes for the next message to begin.
            tokio::select! {
                _ = stop.changed() => break "server shutting down",
                ready = framed.get_ref().readable() => if ready.is_err() {
                    break "read failed";
                },
            }
        }
        let next = match framed.next().now_or_never() {
            Some(next) => next,
            // Woken, but nothing arrived: idle again.
            None if framed.read_buffer().is_empty() => continue,
            // Part of a message is here; the rest must come in time.
            None => {
                let rest = async {
                    match partial_limit {
                        Some(limit) => tokio::time::timeout(limit, framed.next()).await.ok(),
                        None => Some(framed.next().await),
                    }
                };
                tokio::select! {
                    _ = stop.changed() => break "server shutting down",
                    rest = rest => match rest {
                        Some(next) => next,
                        None => {
                            if let Some(suppressed) = BAD_MESSAGE_WARNINGS.admit() {
                                tracing::warn!(
                                    conn = conn.id,
                                    %peer,
                                    suppressed,
                                    "message incomplete after {:?}, closing",
                                    partial_limit.unwrap_or_default()
                                );
                            }
                            break "partial message timed out";
                        }
                    },
                }
            }
        };
        let message = match next {
            None => break "closed by client",
            Some(Err(e)) => {
                if let Some(suppressed) = BAD_MESSAGE_WARNINGS.admit() {
                    tracing::warn!(conn = conn.id, %peer, suppressed, "bad message, closing: {e}");
                }
                break "bad message";
            }
            Some(Ok(m)) => m,
        };
        let Some(reply) = respond(&state, &conn, message).await else {
            continue;
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

/// Runs one message; `None` when it wants no reply (`moreToCome`), `Some(None)`
/// when the reply could not be encoded.
async fn respond(
    state: &ServerState,
    conn: &ConnectionInfo,
    message: Message,
) -> Option<Option<Reply>> {
    match message {
        Message::Msg(msg) => {
            let body = match msg.command() {
                Ok(cmd) => commands::handle(state, conn, cmd).await,
                Err(e) => error_reply(&bson_error(&e)),
            };
            if msg.more_to_come() {
                return None;
            }
            Some(encode(&body).map(|body| Reply::Msg {
                response_to: msg.request_id,
                body,
            }))
        }
        Message::Query(q) => {
            let body = match legacy_command(&q.full_collection_name, &q.query) {
                Ok(body) => {
                    let cmd = Command {
                        body,
                        sequences: Vec::new(),
                    };
                    commands::handle(state, conn, cmd).await
                }
                Err(e) => error_reply(&e),
            };
            Some(encode(&body).map(|body| Reply::Legacy {
                response_to: q.request_id,
                body,
            }))
        }
    }
}

/// Over `--max-connections`: answers the connection's first message with
/// an error, then closes it. mongod only closes such a connection; an
/// answer tells the client why instead of leaving it to guess. A client
/// that sends nothing within `wait` is closed without one.
pub async fn refuse(socket: TcpStream, open: usize, wait: Duration) {
    let mut framed = Framed::new(socket, MessageCodec);
    let Ok(Some(Ok(message))) = tokio::time::timeout(wait, framed.next()).await else {
        return;
    };
    let error = Error::new(
        ErrorCode::HostUnreachable,
        format!("connection refused because too many open connections: {open}"),
    );
    let Some(body) = encode(&error_reply(&error)) else {
        return;
    };
    let reply = match message {
        Message::Msg(m) => Reply::Msg {
            response_to: m.request_id,
            body,
        },
        Message::Query(q) => Reply::Legacy {
            response_to: q.request_id,
            body,
        },
    };
    let _ = tokio::time::timeout(wait, framed.send(reply)).await;
}

/// A probe that asks the socket, without reading from it, whether the
/// client is still connected: through a duplicate of its descriptor, so
/// it can be asked from any thread while the connection's task is busy.
#[cfg(unix)]
fn probe(socket: &TcpStream) -> Option<Probe> {
    use std::os::fd::AsFd;
    let fd = socket.as_fd().try_clone_to_owned().ok()?;
    let stream = std::net::TcpStream::from(fd);
    // Shared with the original (one open file), so already non-blocking.
    stream.set_nonblocking(true).ok()?;
    Some(Arc::new(move || client_connected(&stream)))
}

#[cfg(not(unix))]
fn probe(_socket: &TcpStream) -> Option<Probe> {
    None
}

/// False once the peer has closed its end (or the socket failed). Data
/// waiting to be read means the client is still there.
fn client_connected(stream: &std::net::TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match stream.peek(&mut byte) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
        ),
    }
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
