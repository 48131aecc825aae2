//! One client connection: read a message, run it, write the reply.
//!
//! A malformed frame ends only this connection; a command that fails is
//! an error reply and the connection goes on. Shutdown is noticed only
//! between requests, so a reply in flight is always finished.
//!
//! A streaming `hello` (OP_MSG's `exhaustAllowed`, from drivers' server
//! monitors) is answered again and again without the client asking: each
//! reply says `moreToCome` and the next answers it, until a reply ends
//! the stream or the client hangs up. `hello` itself waits between them
//! (see `commands::handshake`).
//!
//! An idle client may stay as long as it likes (as with mongod), but once
//! a message's first bytes arrive the rest must follow within
//! `--partial-message-timeout-secs`, so a client cannot hold a connection
//! (and the buffer its message header asked for) by trickling bytes.
//!
//! The codec learns what compressors `hello` agreed on after each request
//! (it reads [`ConnectionInfo::compressors`]), so the next frame may use
//! them.
//!
//! While a command runs, its operation asks [`client_connected`] every so
//! often whether the client is still there, and stops if it is not; the
//! socket is shared ([`SharedSocket`]) so it can be asked from any thread
//! while this task is busy. Under TLS the same TCP socket is asked.
//!
//! Before the first message, the first bytes say whether the client
//! speaks TLS; by `--tls-mode` the connection goes on in plain text,
//! shakes hands (see [`super::tls`]) or is closed (docs/TLS.md).
//!
//! The next request is read only once the last reply is sent: a client
//! that stops reading holds one reply, and is cut off when it has not
//! taken it within `--reply-timeout-secs`.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bson::{Bson, Document};
use futures::{FutureExt, SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::codec::Framed;

use super::tls::{self, Opening, TlsSetup};
use super::WarnLimit;
use crate::base::Compressor;
use crate::commands::state::Traffic;
use crate::commands::{self, CommandReply, ConnectionInfo, ServerState};
use crate::config::TlsMode;
use crate::error::{Error, ErrorCode};
use crate::query::interrupt::Probe;
use crate::wire::message::{checked_body, next_request_id, ReplyFormat};
use crate::wire::{BsonCheckError, Command, Message, MessageCodec, Reply, WireError};

/// Bad frames from many connections (a fuzzer, a confused client) would
/// otherwise log a warning each.
static BAD_MESSAGE_WARNINGS: WarnLimit = WarnLimit::new();

pub async fn serve(
    socket: TcpStream,
    peer: SocketAddr,
    state: ServerState,
    mut stop: watch::Receiver<bool>,
    tls: Option<Arc<TlsSetup>>,
) {
    let socket = SharedSocket(Arc::new(socket), state.counters.traffic.clone());
    let probe = socket.probe();
    let partial_limit = state.config.partial_message_timeout();
    let (transport, tls_peer_subject) =
        match open_transport(socket, peer, tls.as_deref(), &mut stop, partial_limit).await {
            Ok(opened) => opened,
            Err(reason) => {
                tracing::debug!(%peer, reason, "connection closed before its first message");
                return;
            }
        };
    let mut conn = ConnectionInfo::open(&state, peer, Some(probe));
    let tls_on = matches!(transport, Transport::Tls(_));
    conn.tls_peer_subject = tls_peer_subject;
    match (tls_on, conn.tls_peer_subject.as_deref()) {
        (false, _) => tracing::info!(conn = conn.id, %peer, "connection opened"),
        (true, None) => tracing::info!(conn = conn.id, %peer, tls = true, "connection opened"),
        (true, Some(subject)) => {
            tracing::info!(conn = conn.id, %peer, tls = true, subject, "connection opened")
        }
    }
    let reply_limit = state.config.reply_timeout();
    let mut framed = Framed::new(transport, MessageCodec::default());
    // One wait for shutdown for the connection's whole life: made anew
    // for every request, it would join and leave the watch's waiters
    // (a lock each) every time.
    let stopping = stop.changed();
    tokio::pin!(stopping);
    // A streaming `hello` that goes on: the connection answers it again,
    // unasked, until a reply ends the stream.
    let mut stream: Option<Stream> = None;
    let reason = loop {
        let answer = if let Some(asked) = stream.take() {
            let answer = continue_stream(&state, &conn, asked).await;
            if !client_connected(framed.get_ref().tcp()) {
                break "closed by client";
            }
            answer
        } else {
            let next = read_message(&mut framed, stopping.as_mut(), partial_limit, &conn, peer);
            let message = match next.await {
                Ok(message) => message,
                Err(reason) => break reason,
            };
            state
                .counters
                .traffic
                .requests
                .fetch_add(1, Ordering::Relaxed);
            respond(&state, &conn, message).await
        };
        if conn.closing() {
            break "closed by the failCommand fail point";
        }
        framed.codec_mut().accept(conn.compressors());
        let reply = match answer {
            Answer::Nothing => continue,
            Answer::Unencodable => break "reply could not be encoded",
            Answer::Reply(reply, next) => {
                stream = next;
                reply
            }
        };
        // The next request is read only once this reply is sent, so a
        // client that stops reading holds one reply, not a queue of them.
        let sent = match reply_limit {
            Some(limit) => tokio::time::timeout(limit, framed.send(reply)).await,
            None => Ok(framed.send(reply).await),
        };
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(conn = conn.id, "write failed: {e}");
                break "write failed";
            }
            Err(_) => {
                if let Some(suppressed) = BAD_MESSAGE_WARNINGS.admit() {
                    tracing::warn!(
                        conn = conn.id,
                        %peer,
                        suppressed,
                        "reply unread after {:?}, closing",
                        reply_limit.unwrap_or_default()
                    );
                }
                break "reply timed out";
            }
        }
    };
    tracing::info!(conn = conn.id, %peer, reason, "connection closed");
}

/// Looks at the connection's first bytes and, by `--tls-mode`, goes on
/// in plain text, shakes hands in TLS (giving the verified client
/// certificate's subject), or says why the connection ends.
async fn open_transport(
    socket: SharedSocket,
    peer: SocketAddr,
    tls: Option<&TlsSetup>,
    stop: &mut watch::Receiver<bool>,
    partial_limit: Option<Duration>,
) -> Result<(Transport, Option<String>), &'static str> {
    let limit = partial_limit.unwrap_or(HANDSHAKE_TIMEOUT);
    let opening = tokio::select! {
        _ = stop.changed() => return Err("server shutting down"),
        opening = first_bytes(&socket.0, limit) => opening?,
    };
    let Some(tls) = tls else {
        if opening == Opening::Tls {
            if let Some(suppressed) = BAD_MESSAGE_WARNINGS.admit() {
                tracing::warn!(
                    %peer,
                    suppressed,
                    "TLS handshake on a port without TLS (--tls-mode disabled), closing"
                );
            }
            return Err("TLS handshake without --tls-mode");
        }
        return Ok((Transport::Plain(socket), None));
    };
    if opening != Opening::Tls {
        if tls.mode == TlsMode::RequireTls {
            if let Some(suppressed) = BAD_MESSAGE_WARNINGS.admit() {
                tracing::warn!(
                    %peer,
                    suppressed,
                    "plain connection refused: --tls-mode requireTLS, closing"
                );
            }
            return Err("plain connection with requireTLS");
        }
        return Ok((Transport::Plain(socket), None));
    }
    let handshake = tokio::time::timeout(limit, tls.acceptor().accept(socket));
    let stream = match handshake.await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            if let Some(suppressed) = BAD_MESSAGE_WARNINGS.admit() {
                tracing::warn!(%peer, suppressed, "TLS handshake failed, closing: {e}");
            }
            return Err("TLS handshake failed");
        }
        Err(_) => {
            if let Some(suppressed) = BAD_MESSAGE_WARNINGS.admit() {
                tracing::warn!(%peer, suppressed, "TLS handshake incomplete after {limit:?}, closing");
            }
            return Err("TLS handshake timed out");
        }
    };
    let subject = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|cert| tls::subject_rfc2253(cert));
    Ok((Transport::Tls(Box::new(stream)), subject))
}

/// How long a TLS handshake, or the first bytes after the first one,
/// may take when `--partial-message-timeout-secs` is 0.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits, as long as it takes, for the client's first byte, then up to
/// `limit` for enough to tell TLS from plain text; the bytes stay in the
/// socket for whoever reads next.
async fn first_bytes(socket: &TcpStream, limit: Duration) -> Result<Opening, &'static str> {
    let mut started = None;
    loop {
        socket.readable().await.map_err(|_| "read failed")?;
        let mut first = [0u8; 3];
        let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
        match rustix::net::recv(socket, &mut first[..], flags) {
            // Closed before a byte: the plain path says so as usual.
            Ok((0, _)) => return Ok(Opening::Plain),
            Ok((n, _)) => match tls::opening(&first[..n]) {
                Opening::Unknown => {}
                known => return Ok(known),
            },
            Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => {
                // Stale readiness: clear it and wait for the next.
                let _ = socket.try_io(Interest::READABLE, || {
                    Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock))
                });
                continue;
            }
            Err(_) => return Err("read failed"),
        }
        // Some bytes, too few to tell; the rest must come in time.
        let since = *started.get_or_insert_with(std::time::Instant::now);
        if since.elapsed() > limit {
            return Err("first bytes timed out");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Reads the next message, waiting as long as it takes for one to
/// begin; `Err` says why the connection ends instead.
async fn read_message<F: std::future::Future>(
    framed: &mut Framed<Transport, MessageCodec>,
    mut stopping: Pin<&mut F>,
    partial_limit: Option<Duration>,
    conn: &ConnectionInfo,
    peer: SocketAddr,
) -> Result<Message, &'static str> {
    let next = loop {
        if framed.read_buffer().is_empty() {
            // Idle: wait as long as it takes for the next message to begin.
            tokio::select! {
                _ = &mut stopping => return Err("server shutting down"),
                ready = framed.get_mut().readable() => if ready.is_err() {
                    return Err("read failed");
                },
            }
        }
        match framed.next().now_or_never() {
            Some(next) => break next,
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
                    _ = &mut stopping => return Err("server shutting down"),
                    rest = rest => match rest {
                        Some(next) => break next,
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
                            return Err("partial message timed out");
                        }
                    },
                }
            }
        }
    };
    match next {
        None => Err("closed by client"),
        // A client that hangs up between messages without TLS's
        // `close_notify` (most do), or with data of ours unread (a reset),
        // has simply left.
        Some(Err(WireError::Io(e)))
            if matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
            ) && framed.read_buffer().is_empty() =>
        {
            Err("closed by client")
        }
        Some(Err(e)) => {
            if let Some(suppressed) = BAD_MESSAGE_WARNINGS.admit() {
                tracing::warn!(conn = conn.id, %peer, suppressed, "bad message, closing: {e}");
            }
            Err("bad message")
        }
        Some(Ok(m)) => Ok(m),
    }
}

/// What the connection sends after one request.
enum Answer {
    /// Nothing: the request said `moreToCome` (a `w: 0` write).
    Nothing,
    /// A reply, and the request it streams on to when more replies
    /// follow unasked.
    Reply(Reply, Option<Stream>),
    /// The reply could not be encoded.
    Unencodable,
}

/// A streaming `hello` to answer again: the request to run, and what
/// the next reply answers (the last reply's id) and is compressed with.
struct Stream {
    body: Document,
    response_to: i32,
    compressor: Option<Compressor>,
}

/// Runs one message.
async fn respond(state: &ServerState, conn: &ConnectionInfo, message: Message) -> Answer {
    let (body, asked) = match &message {
        Message::Msg(msg) => {
            let (body, asked) = match msg.command() {
                Ok(cmd) => {
                    let asked = cmd.exhaust_allowed.then(|| cmd.body.clone());
                    (commands::handle(state, conn, cmd).await, asked)
                }
                Err(e) => (commands::error_document(&bson_error(&e)).into(), None),
            };
            if msg.more_to_come() {
                return Answer::Nothing;
            }
            (body, asked)
        }
        Message::Query(q) => match legacy_command(&q.full_collection_name, &q.query) {
            Ok(body) => {
                let cmd = Command {
                    body,
                    ..Command::default()
                };
                (commands::handle(state, conn, cmd).await, None)
            }
            Err(e) => (commands::error_document(&e).into(), None),
        },
    };
    let next = asked.and_then(|asked| commands::next_in_stream(&asked, &body));
    let Some(encoded) = encode_reply(state, body) else {
        return Answer::Unencodable;
    };
    let reply = Reply::to(&message, encoded);
    streamed(reply, next)
}

/// Answers a streaming `hello` again, as a reply to the last reply.
async fn continue_stream(state: &ServerState, conn: &ConnectionInfo, asked: Stream) -> Answer {
    let cmd = Command {
        body: asked.body.clone(),
        exhaust_allowed: true,
        ..Command::default()
    };
    let body = commands::handle(state, conn, cmd).await;
    let next = commands::next_in_stream(&asked.body, &body);
    let Some(encoded) = encode_reply(state, body) else {
        return Answer::Unencodable;
    };
    let reply = Reply {
        request_id: next_request_id(),
        response_to: asked.response_to,
        more_to_come: false,
        format: ReplyFormat::Msg,
        body: encoded,
        compressor: asked.compressor,
    };
    streamed(reply, next)
}

/// `reply`, flagged `moreToCome` when `next` streams on from it.
fn streamed(mut reply: Reply, next: Option<Document>) -> Answer {
    let Some(body) = next else {
        return Answer::Reply(reply, None);
    };
    reply.more_to_come = true;
    let stream = Stream {
        body,
        response_to: reply.request_id,
        compressor: reply.compressor,
    };
    Answer::Reply(reply, Some(stream))
}

/// Over `--max-connections` (or `--max-connections-per-address`): answers the connection's first message with
/// an error, then closes it. mongod only closes such a connection; an
/// answer tells the client why instead of leaving it to guess. A client
/// that sends nothing within `wait` is closed without one.
pub async fn refuse(socket: TcpStream, why: String, wait: Duration) {
    // A TLS client cannot read a plain answer: it is closed without one.
    let mut first = [0u8; 3];
    if let Ok(Ok(n)) = tokio::time::timeout(wait, socket.peek(&mut first)).await {
        if tls::opening(&first[..n]) != Opening::Plain {
            return;
        }
    }
    let mut framed = Framed::new(socket, MessageCodec::default());
    let Ok(Some(Ok(message))) = tokio::time::timeout(wait, framed.next()).await else {
        return;
    };
    let error = Error::new(ErrorCode::HostUnreachable, why);
    let Some(body) = encode(&commands::error_document(&error)) else {
        return;
    };
    let reply = Reply::to(&message, body);
    let _ = tokio::time::timeout(wait, framed.send(reply)).await;
}

/// What a connection's messages travel over: the socket itself, or TLS
/// over it.
enum Transport {
    Plain(SharedSocket),
    Tls(Box<tokio_rustls::server::TlsStream<SharedSocket>>),
}

impl Transport {
    /// The TCP socket underneath, for [`client_connected`].
    fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(socket) => &socket.0,
            Transport::Tls(tls) => &tls.get_ref().0 .0,
        }
    }

    /// Waits until a read would find something: bytes on the socket, or
    /// (under TLS) text already decrypted from records read earlier.
    async fn readable(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(socket) => socket.0.readable().await,
            Transport::Tls(tls) => {
                let (socket, session) = tls.get_mut();
                match session.process_new_packets() {
                    // A bad record or a peer's close: the read says so.
                    Err(_) => return Ok(()),
                    Ok(io) if io.plaintext_bytes_to_read() > 0 || io.peer_has_closed() => {
                        return Ok(())
                    }
                    Ok(_) => {}
                }
                socket.0.readable().await
            }
        }
    }
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(socket) => Pin::new(socket).poll_read(cx, buf),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(socket) => Pin::new(socket).poll_write(cx, buf),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(socket) => Pin::new(socket).poll_flush(cx),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(socket) => Pin::new(socket).poll_shutdown(cx),
            Transport::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The connection's socket, shared with the probe its operations ask
/// (through a weak reference, so the socket closes with the connection).
/// Reads and writes are tokio's own, through its readiness calls.
struct SharedSocket(Arc<TcpStream>, Arc<Traffic>);

impl SharedSocket {
    fn probe(&self) -> Probe {
        let socket = Arc::downgrade(&self.0);
        Arc::new(move || socket.upgrade().is_some_and(|s| client_connected(&s)))
    }
}

impl AsyncRead for SharedSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            let room = buf.remaining();
            let mut read = None;
            // A read that did not fill the buffer drained the socket: the
            // closure reports `WouldBlock` so that readiness is cleared
            // now, as tokio's own `TcpStream` does, rather than by one
            // more `recv` that finds nothing (one per request otherwise).
            let drained = self.0.try_io(Interest::READABLE, || {
                let n = self.0.try_read_buf(buf)?;
                self.1.bytes_in.fetch_add(n as u64, Ordering::Relaxed);
                read = Some(n);
                if 0 < n && n < room {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(())
                }
            });
            match (read, drained) {
                (Some(_), _) | (None, Ok(())) => return Poll::Ready(Ok(())),
                // Readiness was stale and is cleared: wait for the next.
                (None, Err(e)) if e.kind() == io::ErrorKind::WouldBlock => continue,
                (None, Err(e)) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for SharedSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(buf) {
                Ok(n) => {
                    self.1.bytes_out.fetch_add(n as u64, Ordering::Relaxed);
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(
            rustix::net::shutdown(&*self.0, rustix::net::Shutdown::Write).map_err(io::Error::from),
        )
    }
}

/// False once the peer has closed its end (or the socket failed): a peek
/// that does not wait and takes nothing from the socket. Data waiting to
/// be read means the client is still there.
fn client_connected(socket: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
    match rustix::net::recv(socket, &mut byte[..], flags) {
        Ok((0, _)) => false,
        Ok(_) => true,
        Err(e) => e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR,
    }
}

/// A command's reply, with the cluster time every reply carries.
fn encode_reply(state: &ServerState, reply: CommandReply) -> Option<Vec<u8>> {
    match commands::encode_reply(state, reply) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!("cannot encode reply: {e}");
            None
        }
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

/// Turns an OP_QUERY on `db.$cmd` into a command document with `$db`.
fn legacy_command(full_name: &str, query: &[u8]) -> Result<Document, Error> {
    let Some(db) = full_name.strip_suffix(".$cmd") else {
        return Err(Error::new(
            ErrorCode::CommandNotSupported,
            format!("OP_QUERY is only supported for commands, not for {full_name}; use OP_MSG"),
        ));
    };
    let mut cmd = checked_body(query).map_err(|e| bson_error(&e))?;
    // Old drivers wrap the command as {$query: {...}, $readPreference: ...}.
    if let Some(Bson::Document(inner)) = cmd.get("$query") {
        cmd = inner.clone();
    }
    cmd.insert("$db", db);
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, SharedSocket) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, SharedSocket(Arc::new(server), Arc::default()))
    }

    #[tokio::test]
    async fn the_probe_sees_a_closed_peer_and_leaves_pending_data_alone() {
        let (mut client, mut socket) = pair().await;
        let probe = socket.probe();
        assert!(probe());
        client.write_all(b"hi").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(probe());
        let mut got = [0u8; 2];
        socket.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hi");
        drop(client);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!probe());
        // Once the connection is gone, so is the client.
        let (_client, socket) = pair().await;
        let probe = socket.probe();
        drop(socket);
        assert!(!probe());
    }
}
