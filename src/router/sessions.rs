//! Session records: what a logical session's latest retryable write or
//! transaction did, kept in storage so a retry after a restart is
//! answered as the first attempt was and applies nothing twice.
//!
//! A retryable write runs inside [`retryable_write`]: every batch it
//! commits also marks the session's record with the write's transaction
//! number, in the same atomic batch, so whatever of the write survives a
//! crash, the mark survives with it. Its reply is recorded right after
//! ([`Router::record_reply`]), before it is sent. A retry finds the reply, or, if the server
//! stopped between the write and its reply's record, the mark alone: the
//! write is not run again. A transaction's commit writes its record in
//! its own batch. Records idle longer than a session lives are trimmed
//! ([`Router::run_session_trimmer`]). A store whose catalog commits
//! apart from its data (the PostgreSQL fleet) keeps no records: there
//! retries are answered from memory only.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, DateTime, Document};

use super::Router;
use crate::error::{Error, Result};
use crate::storage::{CatalogKey, WriteBatch, WriteOp};

tokio::task_local! {
    /// Set while a retryable write runs: its session's record key and
    /// the mark its batches carry.
    static RETRYING: (CatalogKey, Vec<u8>);
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
/// marks the session's record in the same atomic batch.
pub async fn retryable_write<F: std::future::Future>(
    session: &[u8],
    txn_number: i64,
    write: F,
) -> F::Output {
    let mark = SessionRecord::new(txn_number, Outcome::Applied).encode();
    RETRYING
        .scope((CatalogKey::Session(session.to_vec()), mark), write)
        .await
}

/// Adds the running retryable write's mark to `batch`, if one runs.
pub(super) fn mark(batch: &mut WriteBatch) {
    let _ = RETRYING.try_with(|(key, mark)| {
        batch.push(WriteOp::PutMeta(key.clone(), mark.clone()));
    });
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

    /// Records the reply of retryable write `txn_number` of `session`,
    /// so that it survives a crash of the process; it does not wait for
    /// the journal's sync. Lost with the machine, it leaves the write's
    /// mark, which still keeps a retry from applying the write again.
    pub fn record_reply(&self, session: &[u8], txn_number: i64, reply: &Document) -> Result<()> {
        if !self.store.records_sessions() {
            return Ok(());
        }
        let record = SessionRecord::new(txn_number, Outcome::Replied(reply.clone()));
        let mut batch = WriteBatch::default();
        batch.put_meta(CatalogKey::Session(session.to_vec()), record.encode());
        super::write::maybe_blocking(self.inline(true), || {
            let seq = crate::storage::blocking::wait(self.store.apply(batch))?;
            crate::storage::blocking::wait(self.store.written(seq))
        })?;
        Ok(())
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
    async fn a_retryable_write_marks_each_batch() {
        let mut plain = WriteBatch::default();
        mark(&mut plain);
        assert!(plain.is_empty());
        let marked = retryable_write(b"s1", 4, async {
            let mut batch = WriteBatch::default();
            mark(&mut batch);
            batch
        })
        .await;
        let [WriteOp::PutMeta(CatalogKey::Session(id), value)] = &marked.ops[..] else {
            panic!("{marked:?}");
        };
        assert_eq!(id, b"s1");
        let record = SessionRecord::decode(value).unwrap();
        assert_eq!((record.txn_number, record.outcome), (4, Outcome::Applied));
    }
}
