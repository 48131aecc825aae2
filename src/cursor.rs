//! Open cursors: the rest of a query's results, served by `getMore`.
//!
//! A cursor keeps the lazy result stream the router returned, so a
//! `getMore` continues where the last batch stopped without running the
//! query again. Cursors idle for ten minutes are closed by a background
//! task, as MongoDB does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use dashmap::DashMap;
use parking_lot::Mutex;

use crate::commands::args::document_size;
use crate::commands::ServerState;
use crate::error::{Error, ErrorCode, Result};
use crate::router::DocStream;

/// A result stream that can tell whether anything is left.
pub type CursorStream = std::iter::Peekable<DocStream>;

/// How long a cursor may sit unused before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// Documents in a first batch when the client names no batch size.
pub const DEFAULT_FIRST_BATCH: usize = 101;
/// Bytes of documents in one batch (a reply must stay under 16 MiB).
const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024 - 64 * 1024;

pub struct OpenCursor {
    /// The namespace it reads (`db.coll`), for `getMore` checks.
    pub ns: String,
    stream: CursorStream,
    last_used: Instant,
}

#[derive(Default)]
pub struct CursorRegistry {
    cursors: DashMap<i64, Arc<Mutex<OpenCursor>>>,
}

/// One batch of results and whether the stream has more.
pub struct Batch {
    pub docs: Vec<Bson>,
    pub exhausted: bool,
}

/// Pulls up to `max_docs` documents (and at most ~16 MiB) from a stream.
pub fn next_batch(stream: &mut CursorStream, max_docs: Option<usize>) -> Result<Batch> {
    let mut docs = Vec::new();
    let mut bytes = 0usize;
    loop {
        if max_docs.is_some_and(|m| docs.len() >= m) {
            let exhausted = stream.peek().is_none();
            return Ok(Batch { docs, exhausted });
        }
        match stream.next() {
            None => {
                return Ok(Batch {
                    docs,
                    exhausted: true,
                })
            }
            Some(doc) => {
                let doc = doc?;
                bytes += document_size(&doc);
                docs.push(Bson::Document(doc));
                if bytes >= MAX_BATCH_BYTES {
                    let exhausted = stream.peek().is_none();
                    return Ok(Batch { docs, exhausted });
                }
            }
        }
    }
}

impl CursorRegistry {
    /// Keeps `stream` open and returns the new cursor's id.
    pub fn open(&self, ns: String, stream: CursorStream) -> i64 {
        let cursor = Arc::new(Mutex::new(OpenCursor {
            ns,
            stream,
            last_used: Instant::now(),
        }));
        loop {
            let id = rand::random::<i64>() & i64::MAX;
            if id == 0 {
                continue;
            }
            if let dashmap::mapref::entry::Entry::Vacant(v) = self.cursors.entry(id) {
                v.insert(cursor);
                return id;
            }
        }
    }

    /// Runs `f` on the cursor, then closes it if `f` says it is exhausted.
    pub fn with_cursor<T>(
        &self,
        id: i64,
        ns: &str,
        f: impl FnOnce(&mut CursorStream) -> Result<(T, bool)>,
    ) -> Result<T> {
        let Some(cursor) = self.cursors.get(&id).map(|c| c.clone()) else {
            return Err(Error::new(
                ErrorCode::CursorNotFound,
                format!("cursor id {id} not found"),
            ));
        };
        let mut open = cursor.lock();
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
            self.cursors.remove(&id);
        }
        result.map(|(t, _)| t)
    }

    /// Closes a cursor; true if it was open.
    pub fn kill(&self, id: i64) -> bool {
        self.cursors.remove(&id).is_some()
    }

    pub fn len(&self) -> usize {
        self.cursors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cursors.is_empty()
    }

    fn reap(&self, idle: Duration) -> usize {
        let before = self.cursors.len();
        self.cursors.retain(|_, c| match c.try_lock() {
            Some(open) => open.last_used.elapsed() < idle,
            None => true,
        });
        before - self.cursors.len()
    }
}

/// Closes idle cursors every minute until shutdown.
pub async fn reap_idle(state: ServerState, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {
                let n = state.cursors.reap(IDLE_TIMEOUT);
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
pub fn with_time_limit(stream: DocStream, max_time_ms: Option<u64>) -> DocStream {
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
        if n % 64 == 0 && Instant::now() >= deadline {
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
            Some(v) => match crate::commands::args::number_as_i64(v) {
                Some(n) if n >= 0 => Ok(Some(n as usize)),
                _ => Err(Error::new(
                    ErrorCode::Location51024,
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
/// through `getMore`.
pub fn reply_with_cursor(
    req: &crate::commands::Request<'_>,
    ns: String,
    docs: Vec<Document>,
    batch_size: Option<usize>,
) -> Document {
    let stream: DocStream = Box::new(docs.into_iter().map(Ok));
    let mut stream = stream.peekable();
    let (batch_docs, exhausted) = match next_batch(&mut stream, batch_size) {
        Ok(b) => (b.docs, b.exhausted),
        Err(_) => (Vec::new(), true),
    };
    let id = if exhausted {
        0
    } else {
        req.state.cursors.open(ns.clone(), stream)
    };
    first_batch_reply(id, &ns, batch_docs)
}

/// The `cursor` sub-document of a `find`/`aggregate` reply.
pub fn first_batch_reply(id: i64, ns: &str, docs: Vec<Bson>) -> Document {
    doc! {"cursor": {"firstBatch": docs, "id": id, "ns": ns}}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(n: i32) -> CursorStream {
        let s: DocStream = Box::new((0..n).map(|i| Ok(doc! {"_id": i})));
        s.peekable()
    }

    #[test]
    fn batches_follow_the_size_and_close_when_done() {
        let reg = CursorRegistry::default();
        let id = reg.open("t.c".into(), stream(25));
        let mut seen = 0;
        loop {
            let (n, exhausted) = reg
                .with_cursor(id, "t.c", |s| {
                    let b = next_batch(s, Some(10))?;
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
        let e = reg.with_cursor(id, "t.c", |_| Ok(((), false))).unwrap_err();
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
        let mut limited = with_time_limit(slow, Some(5)).peekable();
        let e = next_batch(&mut limited, None).err().unwrap();
        assert_eq!(e.code, ErrorCode::MaxTimeMSExpired);
        let fast: DocStream = Box::new((0..100).map(|i| Ok(doc! {"_id": i})));
        assert_eq!(with_time_limit(fast, Some(60_000)).count(), 100);
    }

    #[test]
    fn idle_cursors_are_reaped_and_wrong_namespace_refused() {
        let reg = CursorRegistry::default();
        let id = reg.open("t.c".into(), stream(5));
        let e = reg
            .with_cursor(id, "t.other", |_| Ok(((), false)))
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Unauthorized);
        assert_eq!(reg.reap(Duration::from_secs(600)), 0);
        assert_eq!(reg.reap(Duration::ZERO), 1);
        assert!(!reg.kill(id));
    }
}
