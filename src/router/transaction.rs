//! Multi-document transactions, as the router runs them.
//!
//! A transaction is a router over a store transaction
//! ([`crate::storage::Transaction`]): every operation plans, targets and
//! fans out as it does outside one, and reads one snapshot of every
//! partition with the transaction's own writes over it, while its writes
//! wait. Commit takes the write locks of the collections written, in id
//! order, so it is checked and written whole between any two other
//! writes of those collections; it is one atomic batch, whichever
//! partitions and collections it spans.

use std::sync::Arc;

use super::changes::Stamp;
use super::write::maybe_blocking;
use super::{Router, SharedRouter};
use crate::error::{Error, ErrorCode, Result};
use crate::storage::{blocking, Transaction as StoreTransaction, WriteBatch};

/// A running transaction.
pub struct Transaction {
    router: SharedRouter,
    store: Arc<dyn StoreTransaction>,
}

impl Router {
    /// Begins transaction `number` of `session` over everything committed
    /// so far; `None` when the store keeps no transactions.
    pub fn begin_transaction(&self, session: &[u8], number: i64) -> Option<Transaction> {
        let store = self.store.clone().begin()?;
        let mut router = self.clone();
        router.store = store.clone().as_store();
        let id = bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: session.to_vec(),
        };
        router.transaction = Some(Arc::new(Stamp {
            lsid: bson::doc! {"id": id},
            txn_number: number,
        }));
        Some(Transaction {
            router: Arc::new(router),
            store,
        })
    }
}

impl Transaction {
    /// The router its operations run on.
    pub fn router(&self) -> &SharedRouter {
        &self.router
    }

    /// Commits it, durably (or, inside
    /// [`super::without_journal_wait`], once it survives a crash of the
    /// process), with the record that transaction `number` of `session`
    /// committed when it wrote anything. Fails with 112 `WriteConflict`
    /// when another write got to a document it wrote first, or a
    /// collection it wrote was dropped.
    pub async fn commit(&self, session: &[u8], number: i64) -> Result<()> {
        if !self.writes() {
            return Ok(());
        }
        let mut record = WriteBatch::default();
        record.push(Router::committed_record(session, number));
        let seq = maybe_blocking(false, || {
            blocking::wait(self.store.apply(record))?;
            self.commit_locked()
        })?;
        self.router.durable(seq).await
    }

    /// Drops its writes.
    pub fn abort(&self) {
        self.store.abort();
    }

    /// Whether it has written anything.
    fn writes(&self) -> bool {
        !self.store.collections().is_empty()
    }

    fn commit_locked(&self) -> Result<u64> {
        let catalog = &self.router.catalog;
        let ids = self.store.collections();
        let mut written: Vec<_> = catalog
            .list()
            .into_iter()
            .filter(|c| ids.binary_search(&c.id).is_ok())
            .collect();
        written.sort_by_key(|c| c.id);
        let _changing = catalog.changing();
        let mut guards = Vec::with_capacity(written.len());
        for coll in &written {
            guards.push(catalog.lock_writes(coll)?);
        }
        if written.len() < ids.len() || written.iter().any(|c| c.is_dropped()) {
            self.store.abort();
            return Err(Error::new(
                ErrorCode::WriteConflict,
                "Write conflict: a collection this transaction wrote to was dropped or \
                 renamed while it ran. Please retry your multi-document transaction.",
            ));
        }
        Ok(blocking::wait(self.store.commit())?)
    }
}
