//! Multi-document transactions over a [`KvStore`].
//!
//! A transaction reads one engine snapshot, taken when it begins, with
//! its own writes laid over it; its writes are held in memory until
//! [`Transaction::commit`] writes them all in one atomic batch. That is
//! snapshot isolation with the first committer winning: a transaction
//! that writes a record, `_id` entry or index entry another commit
//! changed since its snapshot fails with [`StorageError::Conflict`],
//! when it writes the key if the change is already there, or else at
//! commit. Usage counters are not conflicts: what the transaction added
//! to them is added to what they hold at commit.
//!
//! Commit checks and writes without a lock of its own: the caller holds
//! the write locks of every collection the transaction wrote, as every
//! other writer of those collections does.

use std::collections::{BTreeMap, BTreeSet};
use std::iter::Peekable;
use std::sync::Arc;

use parking_lot::Mutex;

use super::kv::{raw_ops, KvOp, KvRead, KvStore, KvView, ScanIter, Space, ValueFilter};
use super::layout::{KeyRange, Usage};
use super::{
    ChangeLog, CommitSeq, MetaStore, PartitionOf, SharedView, StorageError, StorageResult, Store,
    StoreFuture, StoreLock, Transaction, WriteBatch, WriteOp,
};

/// Writes of one space, by key; `None` deletes.
type SpaceWrites = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// One held write: a key and its new value (`None` deletes).
type Held = (Vec<u8>, Option<Vec<u8>>);

#[derive(Default)]
struct Pending {
    writes: BTreeMap<Space, SpaceWrites>,
    /// Change-log entries, given their time at commit.
    changes: Vec<Vec<u8>>,
    collections: BTreeSet<u64>,
    ended: bool,
}

pub(super) struct KvTransaction {
    store: Arc<KvStore>,
    snapshot: Arc<dyn KvRead>,
    pending: Arc<Mutex<Pending>>,
}

impl KvTransaction {
    pub(super) fn begin(store: Arc<KvStore>) -> KvTransaction {
        KvTransaction {
            snapshot: store.engine().snapshot(),
            store,
            pending: Arc::default(),
        }
    }

    fn overlay(&self) -> SharedView {
        KvView::over(Arc::new(Overlay {
            snapshot: self.snapshot.clone(),
            pending: self.pending.clone(),
        }))
    }

    /// Holds `batch` for commit. A key written for the first time fails
    /// at once if a commit has changed it since the snapshot.
    fn hold(&self, batch: WriteBatch) -> StorageResult<()> {
        let mut pending = self.pending.lock();
        if pending.ended {
            return Err(ended());
        }
        let mut ops = Vec::with_capacity(batch.ops.len());
        for op in batch.ops {
            match op {
                WriteOp::PutChange(entry) => pending.changes.push(entry),
                op => {
                    if let Some(collection) = collection_of(&op) {
                        pending.collections.insert(collection);
                    }
                    ops.push(op);
                }
            }
        }
        let live = self.store.engine().live();
        for op in raw_ops(WriteBatch { ops }, 0) {
            let (space, key, value) = match op {
                KvOp::Put { space, key, value } => (space, key, Some(value)),
                KvOp::Delete { space, key } => (space, key, None),
            };
            let writes = pending.writes.entry(space).or_default();
            if space != Space::Usage && !writes.contains_key(&key) {
                check_unchanged(&*self.snapshot, &*live, space, &key)?;
            }
            writes.insert(key, value);
        }
        Ok(())
    }

    fn commit_now(&self) -> StorageResult<CommitSeq> {
        let (writes, changes) = {
            let mut pending = self.pending.lock();
            if pending.ended {
                return Err(ended());
            }
            pending.ended = true;
            (
                std::mem::take(&mut pending.writes),
                std::mem::take(&mut pending.changes),
            )
        };
        if writes.values().all(|w| w.is_empty()) && changes.is_empty() {
            return Ok(0);
        }
        let live = self.store.engine().live();
        let mut ops = Vec::new();
        for (space, writes) in writes {
            for (key, value) in writes {
                if space == Space::Usage {
                    ops.extend(self.merge_usage(&*live, key, value)?);
                    continue;
                }
                check_unchanged(&*self.snapshot, &*live, space, &key)?;
                ops.push(match value {
                    Some(value) => KvOp::Put { space, key, value },
                    None => KvOp::Delete { space, key },
                });
            }
        }
        self.store.write_with_changes(ops, changes)
    }

    /// The write of a usage counter the transaction changed: what it
    /// added since its snapshot, added to what the counter holds now. A
    /// counter that existed and is gone (its partition split, its
    /// logical partition emptied) is a conflict.
    fn merge_usage(
        &self,
        live: &dyn KvRead,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    ) -> StorageResult<Option<KvOp>> {
        let before = self.snapshot.get(Space::Usage, &key)?;
        let now = live.get(Space::Usage, &key)?;
        if before.is_some() && now.is_none() {
            return Err(conflict());
        }
        let decode = |v: &Option<Vec<u8>>| v.as_deref().map(Usage::decode).unwrap_or_default();
        let (before_u, now_u, mine) = (decode(&before), decode(&now), decode(&value));
        let merged = Usage {
            count: (now_u.count + mine.count).saturating_sub(before_u.count),
            bytes: (now_u.bytes + mine.bytes).saturating_sub(before_u.bytes),
        };
        let empty = merged.count == 0 && merged.bytes == 0;
        Ok(match (value.is_none() && empty, now.is_some()) {
            (true, true) => Some(KvOp::Delete {
                space: Space::Usage,
                key,
            }),
            (true, false) => None,
            (false, _) => Some(KvOp::Put {
                space: Space::Usage,
                key,
                value: merged.encode(),
            }),
        })
    }
}

fn ended() -> StorageError {
    StorageError::Format("the transaction has already committed or aborted".into())
}

fn conflict() -> StorageError {
    StorageError::Conflict(
        "Write conflict during plan execution: a document this transaction writes was \
         changed by another operation since the transaction began. Please retry your \
         operation or multi-document transaction."
            .into(),
    )
}

/// Fails when a commit since the snapshot changed the value at `key`.
fn check_unchanged(
    snapshot: &dyn KvRead,
    live: &dyn KvRead,
    space: Space,
    key: &[u8],
) -> StorageResult<()> {
    if snapshot.get(space, key)? == live.get(space, key)? {
        Ok(())
    } else {
        Err(conflict())
    }
}

/// The collection an operation writes to, when it writes to one.
fn collection_of(op: &WriteOp) -> Option<u64> {
    match op {
        WriteOp::PutRecord(key, _) | WriteOp::DeleteRecord(key) => Some(key.collection),
        WriteOp::PutIndexEntry(key, _) | WriteOp::DeleteIndexEntry(key) => Some(key.collection),
        WriteOp::PutIdEntry { collection, .. }
        | WriteOp::DeleteIdEntry { collection, .. }
        | WriteOp::PutUsage { collection, .. }
        | WriteOp::DeleteUsage { collection, .. }
        | WriteOp::PutPartitionTotal { collection, .. }
        | WriteOp::DeletePartitionTotal { collection, .. }
        | WriteOp::PutPartition { collection, .. }
        | WriteOp::DeletePartition { collection, .. } => Some(*collection),
        WriteOp::PutMeta(..) | WriteOp::DeleteMeta(_) | WriteOp::PutChange(_) => None,
    }
}

impl Store for KvTransaction {
    fn view(&self) -> SharedView {
        self.overlay()
    }

    fn live(&self) -> SharedView {
        self.overlay()
    }

    fn meta(&self) -> &dyn MetaStore {
        self.store.meta()
    }

    fn apply(&self, batch: WriteBatch) -> StoreFuture<CommitSeq> {
        let held = self.hold(batch).map(|()| 0);
        Box::pin(async move { held })
    }

    fn durable(&self, seq: CommitSeq) -> StoreFuture<()> {
        self.store.durable(seq)
    }

    fn written(&self, seq: CommitSeq) -> StoreFuture<()> {
        self.store.written(seq)
    }

    fn clear_collection(&self, _collection: u64) -> StoreFuture<CommitSeq> {
        Box::pin(async { Err(StorageError::Format("not inside a transaction".into())) })
    }

    fn clear_index(&self, _collection: u64, _index: u32) -> StoreFuture<CommitSeq> {
        Box::pin(async { Err(StorageError::Format("not inside a transaction".into())) })
    }

    fn ensure_format(&self, _partition_of: PartitionOf<'_>) -> StorageResult<()> {
        Ok(())
    }

    fn disk_bytes(&self) -> u64 {
        self.store.disk_bytes()
    }

    fn records_sessions(&self) -> bool {
        true
    }

    fn answers_at_once(&self) -> bool {
        self.store.answers_at_once()
    }

    fn lock_collection(&self, collection: u64) -> StoreFuture<Option<StoreLock>> {
        self.store.lock_collection(collection)
    }

    fn change_log(&self) -> Option<&dyn ChangeLog> {
        self.store.change_log()
    }

    /// The store is the server's; a transaction closes nothing.
    fn close(&self) -> StorageResult<()> {
        Ok(())
    }
}

impl Transaction for KvTransaction {
    fn collections(&self) -> Vec<u64> {
        self.pending.lock().collections.iter().copied().collect()
    }

    fn commit(&self) -> StoreFuture<CommitSeq> {
        let committed = self.commit_now();
        Box::pin(async move { committed })
    }

    fn abort(&self) {
        let mut pending = self.pending.lock();
        pending.ended = true;
        pending.writes.clear();
        pending.changes.clear();
    }

    fn as_store(self: Arc<Self>) -> super::SharedStore {
        self
    }
}

/// A snapshot with a transaction's writes over it.
struct Overlay {
    snapshot: Arc<dyn KvRead>,
    pending: Arc<Mutex<Pending>>,
}

impl Overlay {
    /// The transaction's writes in `range`, in key order, as they are
    /// now: a scan sees them as they were when it started.
    fn writes_in(&self, space: Space, range: &KeyRange) -> Vec<Held> {
        let pending = self.pending.lock();
        match pending.writes.get(&space) {
            Some(writes) => writes
                .range::<Vec<u8>, _>(range.clone())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            None => Vec::new(),
        }
    }
}

impl KvRead for Overlay {
    fn get(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>> {
        let mine = self
            .pending
            .lock()
            .writes
            .get(&space)
            .and_then(|w| w.get(key).cloned());
        match mine {
            Some(value) => Ok(value),
            None => self.snapshot.get(space, key),
        }
    }

    fn scan(&self, space: Space, range: KeyRange, reverse: bool) -> ScanIter {
        let mine = self.writes_in(space, &range);
        let base = self.snapshot.scan(space, range, reverse);
        merge(base, mine, reverse)
    }

    fn scan_where(
        &self,
        space: Space,
        range: KeyRange,
        reverse: bool,
        keep: ValueFilter,
    ) -> ScanIter {
        // Deletions stay, to hide what they delete; puts are tested here.
        let mine = self
            .writes_in(space, &range)
            .into_iter()
            .map(|(k, v)| match v {
                Some(v) if !keep(&v) => (k, None),
                v => (k, v),
            })
            .collect();
        let base = self.snapshot.scan_where(space, range, reverse, keep);
        merge(base, mine, reverse)
    }
}

/// `base` with `mine` laid over it, both in scan order: a key in `mine`
/// replaces (or, with `None`, removes) the same key in `base`.
fn merge(base: ScanIter, mut mine: Vec<Held>, reverse: bool) -> ScanIter {
    if mine.is_empty() {
        return base;
    }
    if reverse {
        mine.reverse();
    }
    Box::new(Merge {
        base: base.peekable(),
        mine: mine.into_iter().peekable(),
        reverse,
    })
}

struct Merge {
    base: Peekable<ScanIter>,
    mine: Peekable<std::vec::IntoIter<Held>>,
    reverse: bool,
}

impl Iterator for Merge {
    type Item = StorageResult<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let order = match (self.base.peek(), self.mine.peek()) {
                (Some(Err(_)), _) => return self.base.next(),
                (None, None) => return None,
                (Some(Ok(_)), None) => return self.base.next(),
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(Ok((b, _))), Some((m, _))) => {
                    let order = b.cmp(m);
                    if self.reverse {
                        order.reverse()
                    } else {
                        order
                    }
                }
            };
            match order {
                std::cmp::Ordering::Less => return self.base.next(),
                std::cmp::Ordering::Equal => {
                    self.base.next();
                }
                std::cmp::Ordering::Greater => {}
            }
            if let Some((key, Some(value))) = self.mine.next() {
                return Some(Ok((key, value)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Bound;

    use super::*;
    use crate::storage::memory::MemoryEngine;
    use crate::storage::RecordKey;

    fn store() -> Arc<KvStore> {
        KvStore::new(Arc::new(MemoryEngine::new()))
    }

    fn key(id: u8) -> RecordKey {
        RecordKey {
            collection: 1,
            hash: 0,
            id: vec![id],
        }
    }

    fn put(id: u8, value: &str) -> WriteBatch {
        WriteBatch {
            ops: vec![WriteOp::PutRecord(key(id), value.as_bytes().to_vec())],
        }
    }

    fn ids(view: &SharedView, reverse: bool) -> Vec<u8> {
        let mut scan = super::super::RecordScan::all(1);
        scan.reverse = reverse;
        super::super::blocking::iter(view.scan_records(scan))
            .map(|r| r.unwrap().0.id[0])
            .collect()
    }

    fn wait<T>(f: StoreFuture<T>) -> StorageResult<T> {
        super::super::blocking::wait(f)
    }

    #[test]
    fn reads_see_the_snapshot_and_own_writes_in_order() {
        let store = store();
        wait(store.apply(put(1, "a"))).unwrap();
        wait(store.apply(put(3, "c"))).unwrap();
        let txn = KvTransaction::begin(store.clone());
        wait(store.apply(put(2, "outside"))).unwrap();
        wait(txn.apply(put(4, "d"))).unwrap();
        let mut delete = WriteBatch::default();
        delete.push(WriteOp::DeleteRecord(key(1)));
        wait(txn.apply(delete)).unwrap();
        assert_eq!(ids(&txn.view(), false), vec![3, 4]);
        assert_eq!(ids(&txn.view(), true), vec![4, 3]);
        assert_eq!(ids(&store.view(), false), vec![1, 2, 3]);
        wait(txn.commit()).unwrap();
        assert_eq!(ids(&store.view(), false), vec![2, 3, 4]);
        let all = (Bound::Unbounded, Bound::Unbounded);
        assert_eq!(store.engine().scan(Space::Records, all, false).count(), 3);
    }

    #[test]
    fn the_first_committer_wins() {
        let store = store();
        wait(store.apply(put(1, "a"))).unwrap();
        let first = KvTransaction::begin(store.clone());
        let second = KvTransaction::begin(store.clone());
        wait(first.apply(put(1, "first"))).unwrap();
        wait(second.apply(put(1, "second"))).unwrap();
        wait(first.commit()).unwrap();
        let e = wait(second.commit()).unwrap_err();
        assert!(matches!(e, StorageError::Conflict(_)), "{e}");
        // A write after the change fails at once.
        let third = KvTransaction::begin(store.clone());
        wait(store.apply(put(1, "outside"))).unwrap();
        let e = wait(third.apply(put(1, "third"))).unwrap_err();
        assert!(matches!(e, StorageError::Conflict(_)), "{e}");
        let value = wait(store.view().record(&key(1))).unwrap();
        assert_eq!(value.as_deref(), Some(&b"outside"[..]));
    }

    #[test]
    fn usage_counters_add_up_across_concurrent_transactions() {
        let store = store();
        let usage = |count| WriteBatch {
            ops: vec![WriteOp::PutUsage {
                collection: 1,
                hash: 7,
                usage: Usage {
                    count,
                    bytes: 10 * count,
                },
            }],
        };
        wait(store.apply(usage(5))).unwrap();
        let a = KvTransaction::begin(store.clone());
        let b = KvTransaction::begin(store.clone());
        wait(a.apply(usage(6))).unwrap();
        wait(b.apply(usage(7))).unwrap();
        wait(a.commit()).unwrap();
        wait(b.commit()).unwrap();
        let now = wait(store.view().usage(1, 7)).unwrap().unwrap();
        assert_eq!((now.count, now.bytes), (8, 80));
    }

    #[test]
    fn an_aborted_transaction_writes_nothing_and_ends() {
        let store = store();
        let txn = KvTransaction::begin(store.clone());
        wait(txn.apply(put(1, "a"))).unwrap();
        txn.abort();
        assert!(wait(txn.commit()).is_err());
        assert!(wait(txn.apply(put(2, "b"))).is_err());
        assert_eq!(ids(&store.view(), false), Vec::<u8>::new());
    }
}
