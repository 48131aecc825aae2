//! Open cursors: the rest of a query's results, served by `getMore`.
//!
//! Sits below `commands` and above the router: it knows result streams
//! ([`DocStream`]) and its own registry, never the commands that open
//! cursors; they hand in what it needs (the registry, a connection id,
//! [`CursorLimits`]) as plain values.
//!
//! A cursor keeps the lazy result stream the router returned, so a
//! `getMore` continues where the last batch stopped without running the
//! query again. Cursors idle for ten minutes are closed by a background
//! task, as MongoDB does.
//!
//! An open cursor holds little: streams read storage lazily, and blocking
//! sorts and stages park their finished output in spill files
//! ([`crate::aggregate::spill::park`]). What remains is capped
//! ([`CursorLimits`]): cursors per connection, cursors in total, and the
//! result bytes held in memory. A cursor remembers the connection that
//! opened it, but outlives it: drivers may continue a cursor from any
//! connection of their pool.
//!
//! Batches follow MongoDB's sizing: the first document always goes, the
//! others while the batch stays within 16 MiB; a single document larger
//! than a reply may carry fails with 10334 `BSONObjectTooLarge`.

use std::io::Write;
use std::iter::Peekable;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::raw::{cstr, CStr};
use bson::{doc, Bson, Document, RawDocumentBuf};
use dashmap::DashMap;
use parking_lot::Mutex;

use crate::aggregate::spill::held_bytes;
use crate::aggregate::DocStream;
use crate::base::limits::{MAX_BSON_OBJECT_SIZE, MAX_INTERNAL_OBJECT_SIZE};
use crate::base::UserName;
use crate::error::{Error, ErrorCode, Result};
use crate::query::size::document_size;
use crate::router::capped::Tail;
use crate::router::change_stream::ChangeStream;
use crate::router::{Collection, Found, StoredStream};

/// A result stream that can tell whether anything is left: documents,
/// or stored documents whose bytes go into replies undecoded.
pub enum CursorStream {
    Documents(Peekable<DocStream>),
    Stored(Peekable<StoredStream>),
    /// A tailable cursor's: reaching the end leaves it open.
    Tail(Box<TailStream>),
    /// A change stream's: open until invalidated.
    Changes(Box<ChangeStream>),
}

impl From<ChangeStream> for CursorStream {
    fn from(stream: ChangeStream) -> CursorStream {
        CursorStream::Changes(Box::new(stream))
    }
}

/// A tailable cursor's documents, with the one a full batch left over.
pub struct TailStream {
    tail: Tail,
    held: Option<Document>,
}

impl From<Tail> for CursorStream {
    fn from(tail: Tail) -> CursorStream {
        CursorStream::Tail(Box::new(TailStream { tail, held: None }))
    }
}

impl From<DocStream> for CursorStream {
    fn from(docs: DocStream) -> CursorStream {
        CursorStream::Documents(docs.peekable())
    }
}

impl From<Found> for CursorStream {
    fn from(found: Found) -> CursorStream {
        match found {
            Found::Stored(stored) => CursorStream::Stored(stored.peekable()),
            Found::Documents(docs) => docs.into(),
        }
    }
}

/// How long a cursor may sit unused before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// Documents in a first batch when the client names no batch size.
pub const DEFAULT_FIRST_BATCH: usize = 101;
/// Bytes of documents in one batch after its first document: MongoDB's
/// `BSONObjMaxUserSize`, so the reply stays within what it may carry.
const MAX_BATCH_BYTES: usize = MAX_BSON_OBJECT_SIZE;
/// What one document adds to a batch array beyond its own bytes (type
/// byte, index key, NUL), at most, as MongoDB counts it.
const PER_DOCUMENT_OVERHEAD: usize = 7;

/// Caps on what open cursors may hold; past one, opening a cursor fails
/// with 146 `ExceededMemoryLimit` (MongoDB's error for a server-side
/// memory bound: every cap here bounds memory that idle cursors keep).
#[derive(Debug, Clone)]
pub struct CursorLimits {
    /// Cursors opened by one connection and still open.
    pub per_connection: usize,
    /// Cursors open in the whole server.
    pub total: usize,
    /// Bytes of results held in memory ([`held_bytes`]).
    pub memory_bytes: usize,
}

impl Default for CursorLimits {
    fn default() -> Self {
        CursorLimits {
            per_connection: DEFAULT_MAX_CURSORS_PER_CONNECTION,
            total: DEFAULT_MAX_OPEN_CURSORS,
            memory_bytes: DEFAULT_MAX_CURSOR_MEMORY_BYTES,
        }
    }
}

/// Default of `--max-cursors-per-connection`.
pub const DEFAULT_MAX_CURSORS_PER_CONNECTION: usize = 1_000;
/// Default of `--max-open-cursors`.
pub const DEFAULT_MAX_OPEN_CURSORS: usize = 50_000;
/// Default of `--max-cursor-memory-bytes` (1 GiB).
pub const DEFAULT_MAX_CURSOR_MEMORY_BYTES: usize = 1 << 30;

/// Who opened a cursor: the connection, whose cap it counts against,
/// and under `--auth` the user logged in on it, the only one that may
/// read on or close it (from any connection: drivers pool them).
#[derive(Clone, Debug)]
pub struct Opener {
    pub conn: u64,
    pub user: Option<UserName>,
}

pub struct OpenCursor {
    /// The namespace it reads (`db.coll`), for `getMore` checks.
    pub ns: String,
    owner: Opener,
    stream: CursorStream,
    last_used: Instant,
}

#[derive(Default)]
pub struct CursorRegistry {
    cursors: DashMap<i64, Arc<Mutex<OpenCursor>>>,
    /// Open cursors per connection that opened them.
    per_connection: DashMap<u64, usize>,
    limits: CursorLimits,
    opened: AtomicU64,
    timed_out: AtomicU64,
}

/// One batch of results and whether the stream has more.
pub struct Batch {
    pub docs: BatchDocs,
    pub exhausted: bool,
    /// A change stream's `postBatchResumeToken`.
    pub resume_token: Option<Document>,
}

/// What a `getMore` that found nothing new waits for.
pub enum Wake {
    /// Inserts into a capped collection.
    Appended(Arc<Collection>),
    /// The change log's newest commit passing a time.
    Changes(tokio::sync::watch::Receiver<u64>, u64),
}

/// The documents of a batch, as its stream gave them.
pub enum BatchDocs {
    Documents(Vec<Bson>),
    Stored(Vec<RawDocumentBuf>),
}

impl BatchDocs {
    pub fn len(&self) -> usize {
        match self {
            BatchDocs::Documents(docs) => docs.len(),
            BatchDocs::Stored(docs) => docs.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batch as documents, stored ones decoded.
    pub fn into_documents(self) -> Result<Vec<Bson>> {
        match self {
            BatchDocs::Documents(docs) => Ok(docs),
            BatchDocs::Stored(docs) => docs
                .iter()
                .map(|raw| {
                    Document::try_from(raw.as_ref())
                        .map(Bson::Document)
                        .map_err(|e| {
                            Error::internal(format!("a stored document is not valid BSON: {e}"))
                        })
                })
                .collect(),
        }
    }
}

impl CursorStream {
    /// Pulls up to `max_docs` documents, as many as fit a reply: the
    /// first always, the next while the batch stays within 16 MiB; the
    /// one that would pass it waits for the next batch.
    pub fn next_batch(&mut self, max_docs: Option<usize>) -> Result<Batch> {
        let batch = self.fill_batch(max_docs)?;
        let n = batch.docs.len() as u64;
        crate::router::charge::count(|w| w.returned += n);
        Ok(batch)
    }

    fn fill_batch(&mut self, max_docs: Option<usize>) -> Result<Batch> {
        match self {
            CursorStream::Documents(docs) => {
                let (docs, exhausted) = fill(docs, max_docs, |doc| {
                    let size = document_size(doc);
                    if size > MAX_INTERNAL_OBJECT_SIZE {
                        return Err(Error::bson_object_too_large(size, doc));
                    }
                    Ok(size)
                })?;
                let docs = BatchDocs::Documents(docs.into_iter().map(Bson::Document).collect());
                Ok(Batch {
                    docs,
                    exhausted,
                    resume_token: None,
                })
            }
            CursorStream::Tail(t) => Ok(Batch {
                docs: BatchDocs::Documents(t.next_documents(max_docs)?),
                exhausted: false,
                resume_token: None,
            }),
            CursorStream::Changes(changes) => {
                let batch = changes.next_batch(max_docs)?;
                Ok(Batch {
                    docs: BatchDocs::Stored(batch.events),
                    exhausted: batch.closed,
                    resume_token: Some(batch.resume_token),
                })
            }
            // Stored documents were checked against the size limit when
            // they were written.
            CursorStream::Stored(stored) => {
                let (docs, exhausted) = fill(stored, max_docs, |doc| Ok(doc.as_bytes().len()))?;
                Ok(Batch {
                    docs: BatchDocs::Stored(docs),
                    exhausted,
                    resume_token: None,
                })
            }
        }
    }
}

impl CursorStream {
    /// For a tailable `awaitData` cursor or a change stream, what it
    /// waits for when a `getMore` finds nothing new.
    pub fn awaits(&self) -> Option<Wake> {
        match self {
            CursorStream::Tail(t) if t.tail.await_data => {
                Some(Wake::Appended(t.tail.collection().clone()))
            }
            CursorStream::Changes(changes) => {
                changes.wake().map(|(log, seen)| Wake::Changes(log, seen))
            }
            _ => None,
        }
    }
}

impl Wake {
    /// Waits up to `limit` for what may have made something new.
    pub async fn wait(self, limit: Duration) {
        match self {
            Wake::Appended(coll) => {
                let _ = tokio::time::timeout(limit, coll.appended.notified()).await;
            }
            Wake::Changes(mut log, seen) => {
                let _ = tokio::time::timeout(limit, log.wait_for(|&newest| newest > seen)).await;
            }
        }
    }
}

impl TailStream {
    /// The next documents, sized as [`CursorStream::next_batch`] sizes
    /// them; fewer (or none) when nothing newer is there yet.
    fn next_documents(&mut self, max_docs: Option<usize>) -> Result<Vec<Bson>> {
        self.tail.resume();
        let mut docs = Vec::new();
        let mut bytes = 0usize;
        while max_docs.is_none_or(|m| docs.len() < m) {
            let doc = match self.held.take() {
                Some(doc) => doc,
                None => match self.tail.next_document() {
                    Some(doc) => doc?,
                    None => break,
                },
            };
            let size = document_size(&doc);
            if size > MAX_INTERNAL_OBJECT_SIZE {
                return Err(Error::bson_object_too_large(size, &doc));
            }
            let with_overhead = size.saturating_add(PER_DOCUMENT_OVERHEAD);
            if !docs.is_empty() && bytes.saturating_add(with_overhead) > MAX_BATCH_BYTES {
                self.held = Some(doc);
                break;
            }
            docs.push(Bson::Document(doc));
            bytes = bytes.saturating_add(with_overhead);
        }
        Ok(docs)
    }
}

/// The next batch of `stream` (see [`CursorStream::next_batch`]), each
/// item measured by `size`, and whether the stream ended.
fn fill<T>(
    stream: &mut Peekable<Box<dyn Iterator<Item = Result<T>> + Send>>,
    max_docs: Option<usize>,
    size: impl Fn(&T) -> Result<usize>,
) -> Result<(Vec<T>, bool)> {
    let mut docs = Vec::new();
    let mut bytes = 0usize;
    loop {
        if max_docs.is_some_and(|m| docs.len() >= m) {
            let exhausted = stream.peek().is_none();
            return Ok((docs, exhausted));
        }
        let size = match stream.peek() {
            None => return Ok((docs, true)),
            Some(Ok(doc)) => size(doc)?,
            Some(Err(_)) => match stream.next() {
                Some(Err(e)) => return Err(e),
                _ => return Err(Error::internal("a result stream changed while read")),
            },
        };
        let with_overhead = size.saturating_add(PER_DOCUMENT_OVERHEAD);
        if !docs.is_empty() && bytes.saturating_add(with_overhead) > MAX_BATCH_BYTES {
            return Ok((docs, false));
        }
        match stream.next() {
            Some(Ok(doc)) => docs.push(doc),
            Some(Err(e)) => return Err(e),
            None => return Err(Error::internal("a result stream changed while read")),
        }
        bytes = bytes.saturating_add(with_overhead);
    }
}

/// mongod's answer to a user that reads on or closes another's cursor.
fn not_the_opener(id: i64) -> Error {
    Error::new(
        ErrorCode::Unauthorized,
        format!("cursor id {id} was not created by the authenticated user"),
    )
}

fn cap_error(message: String) -> Error {
    Error::new(ErrorCode::ExceededMemoryLimit, message)
}

impl CursorRegistry {
    pub fn new(limits: CursorLimits) -> CursorRegistry {
        CursorRegistry {
            limits,
            ..CursorRegistry::default()
        }
    }

    /// Fails if connection `conn` may not open another cursor now. Only a
    /// query that leaves results for `getMore` needs one: one answered in
    /// its first batch runs whatever the caps.
    pub fn admit(&self, conn: u64) -> Result<()> {
        let mine = self.per_connection.get(&conn).map_or(0, |n| *n);
        if mine >= self.limits.per_connection {
            return Err(cap_error(format!(
                "cannot open another cursor: this connection already has {mine} open cursors, \
                 the limit (--max-cursors-per-connection); read them to the end or close \
                 them with killCursors"
            )));
        }
        let total = self.cursors.len();
        if total >= self.limits.total {
            return Err(cap_error(format!(
                "cannot open another cursor: the server has {total} open cursors, the limit \
                 (--max-open-cursors); read them to the end or close them with killCursors"
            )));
        }
        let held = held_bytes();
        if held > self.limits.memory_bytes {
            return Err(cap_error(format!(
                "cannot open another cursor: open cursors hold {held} bytes of results in \
                 memory, more than the limit of {} bytes (--max-cursor-memory-bytes); read \
                 them to the end or close them with killCursors",
                self.limits.memory_bytes
            )));
        }
        Ok(())
    }

    /// Keeps `stream` open for `owner` and returns the new cursor's id,
    /// or fails (dropping the stream) past a cap.
    pub fn open(&self, ns: String, stream: CursorStream, owner: Opener) -> Result<i64> {
        let conn = owner.conn;
        self.admit(conn)?;
        let cursor = Arc::new(Mutex::new(OpenCursor {
            ns,
            owner,
            stream,
            last_used: Instant::now(),
        }));
        *self.per_connection.entry(conn).or_insert(0) += 1;
        self.opened.fetch_add(1, Ordering::Relaxed);
        loop {
            let id = rand::random::<i64>() & i64::MAX;
            if id == 0 {
                continue;
            }
            if let dashmap::mapref::entry::Entry::Vacant(v) = self.cursors.entry(id) {
                v.insert(cursor);
                return Ok(id);
            }
        }
    }

    /// Removes a cursor and gives its connection's count back.
    fn remove(&self, id: i64) -> bool {
        let Some((_, cursor)) = self.cursors.remove(&id) else {
            return false;
        };
        let owner = cursor.lock().owner.conn;
        if let dashmap::mapref::entry::Entry::Occupied(mut n) = self.per_connection.entry(owner) {
            *n.get_mut() = n.get().saturating_sub(1);
            if *n.get() == 0 {
                n.remove();
            }
        }
        // Closing a stream may delete its spill file and free a large
        // buffer: that is blocking work, kept off the async workers so a
        // `killCursors` of hundreds does not stall other connections.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || drop(cursor))),
            Err(_) => drop(cursor),
        }
        true
    }

    /// Cursors opened since the server started.
    pub fn total_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Cursors closed for sitting idle too long.
    pub fn timed_out(&self) -> u64 {
        self.timed_out.load(Ordering::Relaxed)
    }

    /// Runs `f` on the cursor for `user` (who must be the one that
    /// opened it), then closes it if `f` says it is exhausted.
    pub fn with_cursor<T>(
        &self,
        id: i64,
        ns: &str,
        user: Option<&UserName>,
        f: impl FnOnce(&mut CursorStream) -> Result<(T, bool)>,
    ) -> Result<T> {
        let Some(cursor) = self.cursors.get(&id).map(|c| c.clone()) else {
            return Err(Error::new(
                ErrorCode::CursorNotFound,
                format!("cursor id {id} not found"),
            ));
        };
        let mut open = cursor.lock();
        if open.owner.user.as_ref() != user {
            return Err(not_the_opener(id));
        }
        if open.ns != ns {
            return Err(Error::new(
                ErrorCode::Unauthorized,
                format!(
                    "Requested getMore on namespace '{ns}', but cursor belongs to a different namespace {}",
                    open.ns
                ),
            ));
        }
        open.last_used = Instant::now();
        let result = f(&mut open.stream);
        let close = match &result {
            Ok((_, exhausted)) => *exhausted,
            Err(_) => true,
        };
        drop(open);
        if close {
            self.remove(id);
        }
        result.map(|(t, _)| t)
    }

    /// Closes a cursor for `user` (who must be the one that opened it);
    /// false if it was not open.
    pub fn kill(&self, id: i64, user: Option<&UserName>) -> Result<bool> {
        let Some(cursor) = self.cursors.get(&id).map(|c| c.clone()) else {
            return Ok(false);
        };
        if cursor.lock().owner.user.as_ref() != user {
            return Err(not_the_opener(id));
        }
        Ok(self.remove(id))
    }

    pub fn len(&self) -> usize {
        self.cursors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cursors.is_empty()
    }

    fn reap(&self, idle: Duration) -> usize {
        let stale: Vec<i64> = self
            .cursors
            .iter()
            .filter(|c| {
                c.value()
                    .try_lock()
                    .is_some_and(|open| open.last_used.elapsed() >= idle)
            })
            .map(|c| *c.key())
            .collect();
        let closed = stale.into_iter().filter(|&id| self.remove(id)).count();
        self.timed_out.fetch_add(closed as u64, Ordering::Relaxed);
        closed
    }
}

/// Closes idle cursors every minute until shutdown.
pub async fn reap_idle(cursors: &CursorRegistry, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {
                let n = cursors.reap(IDLE_TIMEOUT);
                if n > 0 {
                    tracing::info!(closed = n, "closed idle cursors");
                }
            }
        }
    }
}

/// Ends a stream with `MaxTimeMSExpired` once `max_time_ms` has passed.
/// The clock is read every 64 documents, so the check costs nothing
/// per document. Work inside the stream (a sort, a group, a scan) stops at
/// the deadline too, in this request and in every `getMore` after it.
pub fn with_time_limit<T: 'static>(
    stream: Box<dyn Iterator<Item = Result<T>> + Send>,
    max_time_ms: Option<u64>,
) -> Box<dyn Iterator<Item = Result<T>> + Send> {
    let Some(ms) = max_time_ms.filter(|&ms| ms > 0) else {
        return stream;
    };
    let deadline = Instant::now() + Duration::from_millis(ms);
    let mut stream = stream;
    let mut n = 0u32;
    let mut expired = false;
    Box::new(std::iter::from_fn(move || {
        if expired {
            return None;
        }
        crate::query::interrupt::limit_to(deadline);
        n = n.wrapping_add(1);
        if n.is_multiple_of(64) && Instant::now() >= deadline {
            expired = true;
            return Some(Err(Error::new(
                ErrorCode::MaxTimeMSExpired,
                "operation exceeded time limit",
            )));
        }
        stream.next()
    }))
}

/// `cursor.batchSize` of a command that answers with a cursor.
pub fn cursor_batch_size(cmd: &str, body: &Document) -> Result<Option<usize>> {
    match body.get("cursor") {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Document(c)) => match c.get("batchSize") {
            None => Ok(None),
            Some(v) => match crate::query::compare::number_as_i64(v) {
                Some(n) if n >= 0 => Ok(Some(n as usize)),
                _ => Err(Error::new(
                    ErrorCode::ValueNegative,
                    format!("BSON field 'batchSize' value must be >= 0, actual value '{v}'"),
                )),
            },
        },
        Some(_) => Err(Error::type_mismatch(format!(
            "BSON field '{cmd}.cursor' is the wrong type, expected type 'object'"
        ))),
    }
}

/// Answers with a cursor over `docs`: the first batch now, the rest
/// through `getMore` by `opener`.
pub fn reply_with_cursor(
    cursors: &CursorRegistry,
    opener: Opener,
    ns: String,
    docs: Vec<Document>,
    batch_size: Option<usize>,
) -> Result<Document> {
    let docs: DocStream = Box::new(docs.into_iter().map(Ok));
    let mut stream = CursorStream::from(docs);
    let batch = stream.next_batch(batch_size)?;
    let id = if batch.exhausted {
        0
    } else {
        cursors.open(ns.clone(), stream, opener)?
    };
    Ok(first_batch_reply(id, &ns, batch.docs.into_documents()?))
}

/// The `cursor` sub-document of a `find`/`aggregate` reply.
pub fn first_batch_reply(id: i64, ns: &str, docs: Vec<Bson>) -> Document {
    doc! {"cursor": {"firstBatch": docs, "id": id, "ns": ns}}
}

/// A change stream's batch: `{cursor: {<batch>: [...],
/// postBatchResumeToken, id, ns}}`.
pub fn change_batch_reply(
    batch: &CStr,
    id: i64,
    ns: &str,
    docs: Vec<Bson>,
    resume_token: Document,
) -> Document {
    let mut cursor = Document::new();
    cursor.insert(batch.as_str(), docs);
    cursor.insert("postBatchResumeToken", resume_token);
    cursor.insert("id", id);
    cursor.insert("ns", ns);
    doc! {"cursor": cursor}
}

/// The field of a query's first batch in its reply.
pub const FIRST_BATCH: &CStr = cstr!("firstBatch");
/// The field of a `getMore`'s batch in its reply.
pub const NEXT_BATCH: &CStr = cstr!("nextBatch");

/// Bytes a reply keeps free for the fields the server adds to every
/// reply on its way out (`$clusterTime`, `operationTime`: about 130).
const REPLY_HEADROOM: usize = 256;

/// The whole reply to a batch of stored documents, `ok` included:
/// `{cursor: {<batch>: [...], postBatchResumeToken?, id, ns}, ok: 1}`,
/// the reply
/// [`first_batch_reply`] gives for a first batch. It is written straight
/// into one buffer of its final size: through the `bson` crate's builders
/// each level of nesting would copy the documents once more.
pub fn stored_batch_reply(
    batch: &CStr,
    id: i64,
    ns: &str,
    docs: Vec<RawDocumentBuf>,
    resume_token: Option<&Document>,
) -> Result<RawDocumentBuf> {
    const DOCUMENT: u8 = 0x03;
    const ARRAY: u8 = 0x04;
    const STRING: u8 = 0x02;
    const INT64: u8 = 0x12;
    const DOUBLE: u8 = 0x01;
    // Each document adds its type, its index as a name (at most 20
    // digits) and the name's NUL.
    let docs_len: usize = docs.iter().map(|d| d.as_bytes().len() + 22).sum();
    let mut out = Vec::with_capacity(docs_len + ns.len() + 64 + REPLY_HEADROOM);
    let reply = open_document(&mut out);
    put_name(&mut out, DOCUMENT, "cursor");
    let cursor = open_document(&mut out);
    put_name(&mut out, ARRAY, batch.as_str());
    let array = open_document(&mut out);
    for (i, doc) in docs.iter().enumerate() {
        out.push(DOCUMENT);
        // An array's names are its indexes in decimal.
        write!(out, "{i}\0").map_err(|e| Error::internal(e.to_string()))?;
        out.extend_from_slice(doc.as_bytes());
    }
    close_document(&mut out, array)?;
    if let Some(token) = resume_token {
        // A change stream's `postBatchResumeToken`.
        put_name(&mut out, DOCUMENT, "postBatchResumeToken");
        token
            .to_writer(&mut out)
            .map_err(|e| Error::internal(format!("a resume token does not encode: {e}")))?;
    }
    put_name(&mut out, INT64, "id");
    out.extend_from_slice(&id.to_le_bytes());
    put_name(&mut out, STRING, "ns");
    out.extend_from_slice(&length(ns.len() + 1)?.to_le_bytes());
    out.extend_from_slice(ns.as_bytes());
    out.push(0);
    close_document(&mut out, cursor)?;
    put_name(&mut out, DOUBLE, "ok");
    out.extend_from_slice(&1.0f64.to_le_bytes());
    close_document(&mut out, reply)?;
    RawDocumentBuf::from_bytes(out)
        .map_err(|e| Error::internal(format!("a batch reply is not valid BSON: {e}")))
}

/// Starts a document at the end of `out`: where its length goes.
fn open_document(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    start
}

/// Ends the document started at `start`, writing its length.
fn close_document(out: &mut Vec<u8>, start: usize) -> Result<()> {
    out.push(0);
    let len = length(out.len() - start)?;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// An element's type and name.
fn put_name(out: &mut Vec<u8>, kind: u8, name: &str) {
    out.push(kind);
    out.extend_from_slice(name.as_bytes());
    out.push(0);
}

fn length(len: usize) -> Result<i32> {
    i32::try_from(len).map_err(|_| Error::internal("a batch reply is larger than BSON allows"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(n: i32) -> CursorStream {
        let s: DocStream = Box::new((0..n).map(|i| Ok(doc! {"_id": i})));
        s.into()
    }

    fn stored(docs: &[Document]) -> CursorStream {
        let raw: Vec<Result<RawDocumentBuf>> = docs
            .iter()
            .map(|d| Ok(RawDocumentBuf::try_from(d).unwrap()))
            .collect();
        let s: StoredStream = Box::new(raw.into_iter());
        Found::Stored(s).into()
    }

    #[test]
    fn a_batch_of_stored_documents_is_the_reply_the_encoder_gives() {
        let mut docs = vec![doc! {"_id": 1, "a": {"b": [1, 2]}}, doc! {"_id": "x"}];
        // Two-digit indexes too.
        docs.extend((2..12).map(|i| doc! {"_id": i, "s": "é".repeat(i as usize)}));
        let batch = stored(&docs).next_batch(None).unwrap();
        assert!(batch.exhausted);
        let BatchDocs::Stored(raw) = batch.docs else {
            panic!("a stored stream gave decoded documents");
        };
        let reply = stored_batch_reply(FIRST_BATCH, 7, "db.c", raw.clone(), None).unwrap();
        let as_bson = || docs.iter().cloned().map(Bson::from).collect::<Vec<_>>();
        let mut expected = first_batch_reply(7, "db.c", as_bson());
        expected.insert("ok", 1.0);
        assert_eq!(reply.into_bytes(), expected.to_vec().unwrap());
        let reply = stored_batch_reply(NEXT_BATCH, 0, "d.ü", raw.clone(), None).unwrap();
        let expected =
            doc! {"cursor": {"nextBatch": as_bson(), "id": 0i64, "ns": "d.ü"}, "ok": 1.0};
        assert_eq!(reply.into_bytes(), expected.to_vec().unwrap());
        // A change stream's batch: its resume token after the batch.
        let token = doc! {"_data": "01AB"};
        let reply = stored_batch_reply(NEXT_BATCH, 5, "d.c", raw, Some(&token)).unwrap();
        let mut expected = change_batch_reply(NEXT_BATCH, 5, "d.c", as_bson(), token);
        expected.insert("ok", 1.0);
        assert_eq!(reply.into_bytes(), expected.to_vec().unwrap());
        let empty = stored_batch_reply(FIRST_BATCH, 0, "db.c", Vec::new(), None).unwrap();
        let mut expected = first_batch_reply(0, "db.c", Vec::new());
        expected.insert("ok", 1.0);
        assert_eq!(empty.into_bytes(), expected.to_vec().unwrap());
    }

    #[test]
    fn stored_batches_follow_the_count_and_decode_on_request() {
        let docs: Vec<Document> = (0..5).map(|i| doc! {"_id": i, "v": "x"}).collect();
        let mut s = stored(&docs);
        let first = s.next_batch(Some(3)).unwrap();
        assert!(!first.exhausted);
        assert_eq!(first.docs.len(), 3);
        let rest = s.next_batch(Some(3)).unwrap();
        assert!(rest.exhausted);
        let decoded = rest.docs.into_documents().unwrap();
        assert_eq!(
            decoded,
            vec![Bson::from(docs[3].clone()), docs[4].clone().into()]
        );
    }

    /// An opener on connection `n`, without access control.
    fn conn(n: u64) -> Opener {
        Opener {
            conn: n,
            user: None,
        }
    }

    #[test]
    fn only_the_user_that_opened_a_cursor_reads_on_or_closes_it() {
        let reg = CursorRegistry::default();
        let alice = UserName::new("alice", "admin");
        let bob = UserName::new("bob", "admin");
        let opener = Opener {
            conn: 1,
            user: Some(alice.clone()),
        };
        let id = reg.open("t.c".into(), stream(5), opener).unwrap();
        for user in [Some(&bob), None] {
            let e = reg
                .with_cursor(id, "t.c", user, |_| Ok(((), false)))
                .unwrap_err();
            assert_eq!(e.code, ErrorCode::Unauthorized);
            assert_eq!(
                e.message,
                format!("cursor id {id} was not created by the authenticated user")
            );
            assert_eq!(
                reg.kill(id, user).unwrap_err().code,
                ErrorCode::Unauthorized
            );
        }
        // Alice reads on from another connection, and closes it.
        reg.with_cursor(id, "t.c", Some(&alice), |s| {
            Ok((s.next_batch(Some(1))?.docs.len(), false))
        })
        .unwrap();
        assert!(reg.kill(id, Some(&alice)).unwrap());
        assert!(reg.is_empty());
    }

    #[test]
    fn batches_follow_the_size_and_close_when_done() {
        let reg = CursorRegistry::default();
        let id = reg.open("t.c".into(), stream(25), conn(1)).unwrap();
        let mut seen = 0;
        loop {
            let (n, exhausted) = reg
                .with_cursor(id, "t.c", None, |s| {
                    let b = s.next_batch(Some(10))?;
                    Ok(((b.docs.len(), b.exhausted), b.exhausted))
                })
                .unwrap();
            seen += n;
            if exhausted {
                break;
            }
        }
        assert_eq!(seen, 25);
        assert!(reg.is_empty());
        let e = reg
            .with_cursor(id, "t.c", None, |_| Ok(((), false)))
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::CursorNotFound);
    }

    #[test]
    fn time_limit_ends_a_slow_stream_with_max_time_ms_expired() {
        let slow: DocStream = Box::new((0..10_000).map(|i| {
            if i % 64 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(doc! {"_id": i})
        }));
        let mut limited = CursorStream::from(with_time_limit(slow, Some(5)));
        let e = limited.next_batch(None).err().unwrap();
        assert_eq!(e.code, ErrorCode::MaxTimeMSExpired);
        let fast: DocStream = Box::new((0..100).map(|i| Ok(doc! {"_id": i})));
        assert_eq!(with_time_limit(fast, Some(60_000)).count(), 100);
    }

    #[test]
    fn idle_cursors_are_reaped_and_wrong_namespace_refused() {
        let reg = CursorRegistry::default();
        let id = reg.open("t.c".into(), stream(5), conn(1)).unwrap();
        let e = reg
            .with_cursor(id, "t.other", None, |_| Ok(((), false)))
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Unauthorized);
        assert_eq!(reg.reap(Duration::from_secs(600)), 0);
        assert_eq!(reg.reap(Duration::ZERO), 1);
        assert!(!reg.kill(id, None).unwrap());
    }

    fn big(n: usize, mib: usize) -> CursorStream {
        let s: DocStream =
            Box::new((0..n).map(move |i| Ok(doc! {"_id": i as i32, "s": "x".repeat(mib << 20)})));
        s.into()
    }

    #[test]
    fn batches_stop_before_16_mib_but_always_take_one_document() {
        let mut s = big(3, 7);
        let b = s.next_batch(None).unwrap();
        assert_eq!((b.docs.len(), b.exhausted), (2, false));
        let b = s.next_batch(None).unwrap();
        assert_eq!((b.docs.len(), b.exhausted), (1, true));
        // A document of nearly 16 MiB goes alone.
        let s: DocStream = Box::new(
            (0..2).map(|i| Ok(doc! {"_id": i, "s": "x".repeat(MAX_BSON_OBJECT_SIZE - 100)})),
        );
        let mut s = CursorStream::from(s);
        assert_eq!(s.next_batch(None).unwrap().docs.len(), 1);
        assert_eq!(s.next_batch(Some(5)).unwrap().docs.len(), 1);
    }

    #[test]
    fn a_document_larger_than_a_reply_fails_with_10334() {
        let mut s = big(1, 17);
        let e = s.next_batch(None).err().unwrap();
        assert_eq!(e.code, ErrorCode::BSONObjectTooLarge);
        assert!(
            e.message.starts_with("BSONObj size: 17825814 (0x1100016) is invalid. Size must be between 0 and 16793600(16MB) First element: _id: 0"),
            "{}",
            e.message
        );
    }

    #[test]
    fn caps_count_per_connection_and_in_total() {
        let reg = CursorRegistry::new(CursorLimits {
            per_connection: 2,
            total: 3,
            memory_bytes: usize::MAX,
        });
        let a = reg.open("t.c".into(), stream(5), conn(1)).unwrap();
        reg.open("t.c".into(), stream(5), conn(1)).unwrap();
        let e = reg.open("t.c".into(), stream(5), conn(1)).unwrap_err();
        assert_eq!(e.code.number(), 146);
        assert!(e.message.contains("--max-cursors-per-connection"));
        // Another connection is not held back by the first one's cap …
        reg.open("t.c".into(), stream(5), conn(2)).unwrap();
        // … but by the total.
        let e = reg.admit(3).unwrap_err();
        assert!(e.message.contains("--max-open-cursors"));
        // Closing one gives its connection (and the server) room again.
        assert!(reg.kill(a, None).unwrap());
        reg.open("t.c".into(), stream(5), conn(1)).unwrap();
        assert_eq!(reg.len(), 3);
        assert_eq!(reg.reap(Duration::ZERO), 3);
        assert!(reg.per_connection.is_empty());
        assert_eq!(reg.timed_out(), 3);
        assert_eq!(reg.total_opened(), 4);
    }

    #[test]
    fn memory_cap_refuses_new_cursors() {
        let reg = CursorRegistry::new(CursorLimits {
            memory_bytes: 0,
            ..CursorLimits::default()
        });
        let _held = crate::aggregate::spill::Held::new(1);
        let e = reg.open("t.c".into(), stream(5), conn(1)).unwrap_err();
        assert_eq!(e.code, ErrorCode::ExceededMemoryLimit);
        assert!(e.message.contains("--max-cursor-memory-bytes"));
        assert!(reg.is_empty());
    }
}
