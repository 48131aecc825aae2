//! Session records: what a logical session's latest retryable write or
//! transaction did, kept in storage so a retry after a restart is
//! answered as the first attempt was and applies nothing twice.
//!
//! A retryable write runs inside [`retryable_write`]: every batch it
//! commits also marks the session's record with the write's transaction
//! number, in the same atomic batch, so whatever of the write survives a
//! crash, the mark survives with it. Its reply is recorded right after,
//! and the write waits for durability once, for both, before it is
//! answered ([`Router::finish_retryable_write`]). A retry finds the reply, or, if the server
//! stopped between the write and its reply's record, the mark alone: the
//! write is not run again. A transaction's commit writes its record in
//! its own batch. Records idle longer than a session lives are trimmed
//! ([`Router::run_session_trimmer`]). A store whose catalog commits
//! apart from its data (the PostgreSQL fleet) keeps no records: there
//! retries are answered from memory only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, DateTime, Document};

use super::Router;
use crate::error::{Error, Result};
use crate::storage::{CatalogKey, WriteBatch, WriteOp};

tokio::task_local! {
    /// Set while a retryable write runs.
    static RETRYING: Retrying;
}

struct Retrying {
    /// Its session's record key and the mark its batches carry.
    key: CatalogKey,
    mark: Vec<u8>,
    /// The newest commit it made: it waits for that commit's durability
    /// once, with its reply's record ([`Router::finish_retryable_write`]).
    pending: AtomicU64,
}

/// What a session's latest retryable write or transaction came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The write was applied (at least in part); its reply was not
    /// recorded.
    Applied,
    /// The write's reply.
    Replied(Document),
    /// The transaction committed.
    Committed,
}

/// A session's stored record.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    pub txn_number: i64,
    pub outcome: Outcome,
    /// When it was written, for expiry.
    pub at: DateTime,
}

impl SessionRecord {
    fn new(txn_number: i64, outcome: Outcome) -> SessionRecord {
        SessionRecord {
            txn_number,
            outcome,
            at: DateTime::now(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut d = doc! {"txnNumber": self.txn_number, "at": self.at};
        match &self.outcome {
            Outcome::Applied => {}
            Outcome::Replied(reply) => {
                d.insert("reply", reply.clone());
            }
            Outcome::Committed => {
                d.insert("committed", true);
            }
        }
        // A reply is a document the server built: it encodes.
        d.to_vec().unwrap_or_default()
    }

    fn decode(bytes: &[u8]) -> Result<SessionRecord> {
        let d = Document::from_reader(bytes)
            .map_err(|e| Error::internal(format!("a stored session record is not BSON: {e}")))?;
        let txn_number = d
            .get_i64("txnNumber")
            .map_err(|e| Error::internal(format!("a stored session record: {e}")))?;
        let outcome = match (d.get_document("reply"), d.get_bool("committed")) {
            (Ok(reply), _) => Outcome::Replied(reply.clone()),
            (_, Ok(true)) => Outcome::Committed,
            _ => Outcome::Applied,
        };
        let at = d.get_datetime("at").copied().unwrap_or(DateTime::MIN);
        Ok(SessionRecord {
            txn_number,
            outcome,
            at,
        })
    }
}

/// Runs retryable write `txn_number` of `session`: each batch it commits
/// marks the session's record in the same atomic batch, and waits for no
/// durability; returns what it returned and the newest commit it made,
/// for [`Router::finish_retryable_write`].
pub async fn retryable_write<F: std::future::Future>(
    session: &[u8],
    txn_number: i64,
    write: F,
) -> (F::Output, u64) {
    let retrying = Retrying {
        key: CatalogKey::Session(session.to_vec()),
        mark: SessionRecord::new(txn_number, Outcome::Applied).encode(),
        pending: AtomicU64::new(0),
    };
    RETRYING
        .scope(retrying, async {
            let output = write.await;
            let pending = RETRYING.with(|r| r.pending.load(Ordering::Relaxed));
            (output, pending)
        })
        .await
}

/// Adds the running retryable write's mark to `batch`, if one runs.
pub(super) fn mark(batch: &mut WriteBatch) {
    let _ = RETRYING.try_with(|r| {
        batch.push(WriteOp::PutMeta(r.key.clone(), r.mark.clone()));
    });
}

/// Inside a retryable write, notes that commit `seq` is still to be made
/// durable and returns true; false outside one.
pub(super) fn defer_durability(seq: u64) -> bool {
    RETRYING
        .try_with(|r| r.pending.fetch_max(seq, Ordering::Relaxed))
        .is_ok()
}

impl Router {
    /// The stored record of `session`, if any.
    pub async fn session_record(&self, session: &[u8]) -> Result<Option<SessionRecord>> {
        if !self.store.records_sessions() {
            return Ok(None);
        }
        let key = CatalogKey::Session(session.to_vec());
        match self.store.meta().get(&key).await? {
            Some(bytes) => SessionRecord::decode(&bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Ends retryable write `txn_number` of `session`: records its reply
    /// (unless `reply` is `None`: it failed) and waits, once, until that
    /// and `pending`, its newest commit, are durable (with `journal`
    /// false, until they survive a crash of the process).
    pub async fn finish_retryable_write(
        &self,
        session: &[u8],
        txn_number: i64,
        reply: Option<&Document>,
        pending: u64,
        journal: bool,
    ) -> Result<()> {
        let mut seq = pending;
        if let (Some(reply), true) = (reply, self.store.records_sessions()) {
            let record = SessionRecord::new(txn_number, Outcome::Replied(reply.clone()));
            let mut batch = WriteBatch::default();
            batch.put_meta(CatalogKey::Session(session.to_vec()), record.encode());
            let recorded = super::write::maybe_blocking(self.inline(true), || {
                crate::storage::blocking::wait(self.store.apply(batch))
            })?;
            seq = seq.max(recorded);
        }
        if seq == 0 {
            return Ok(());
        }
        match journal {
            true => Ok(self.store.durable(seq).await?),
            false => Ok(self.store.written(seq).await?),
        }
    }

    /// The write of a committed transaction's record, for its commit batch.
    pub(super) fn committed_record(session: &[u8], txn_number: i64) -> WriteOp {
        WriteOp::PutMeta(
            CatalogKey::Session(session.to_vec()),
            SessionRecord::new(txn_number, Outcome::Committed).encode(),
        )
    }

    /// Deletes the records last written more than `idle` ago; returns how
    /// many.
    pub async fn trim_sessions(&self, idle: Duration) -> Result<usize> {
        let cutoff = DateTime::now().timestamp_millis() - idle.as_millis() as i64;
        let mut batch = WriteBatch::default();
        for (id, bytes) in self.store.meta().sessions().await? {
            let old =
                SessionRecord::decode(&bytes).map_or(true, |r| r.at.timestamp_millis() < cutoff);
            if old {
                batch.push(WriteOp::DeleteMeta(CatalogKey::Session(id)));
            }
        }
        let trimmed = batch.ops.len();
        if trimmed > 0 {
            self.store.apply(batch).await?;
        }
        Ok(trimmed)
    }

    /// Trims idle session records every `every`, until the router is
    /// dropped by everyone else.
    pub async fn run_session_trimmer(self: Arc<Self>, idle: Duration, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            if let Err(e) = self.trim_sessions(idle).await {
                tracing::warn!("trimming session records failed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_keep_their_outcome() {
        for outcome in [
            Outcome::Applied,
            Outcome::Replied(doc! {"n": 1, "ok": 1.0}),
            Outcome::Committed,
        ] {
            let record = SessionRecord::new(7, outcome);
            assert_eq!(SessionRecord::decode(&record.encode()).unwrap(), record);
        }
    }

    #[tokio::test]
    async fn a_retryable_write_marks_each_batch_and_defers_its_sync() {
        let mut plain = WriteBatch::default();
        mark(&mut plain);
        assert!(plain.is_empty());
        assert!(!defer_durability(3));
        let (marked, pending) = retryable_write(b"s1", 4, async {
            let mut batch = WriteBatch::default();
            mark(&mut batch);
            assert!(defer_durability(9) && defer_durability(5));
            batch
        })
        .await;
        assert_eq!(pending, 9);
        let [WriteOp::PutMeta(CatalogKey::Session(id), value)] = &marked.ops[..] else {
            panic!("{marked:?}");
        };
        assert_eq!(id, b"s1");
        let record = SessionRecord::decode(value).unwrap();
        assert_eq!((record.txn_number, record.outcome), (4, Outcome::Applied));
    }
}
