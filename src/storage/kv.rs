//! The [`Store`] seam over an ordered key-value engine: the embedded
//! backends ([`super::embedded`], [`super::memory`]) keep every partition
//! in one engine, in the byte layout of [`layout`].
//!
//! A [`KvEngine`] offers point reads, ordered scans, atomic batches of
//! raw puts and deletes, snapshots and a durability wait; [`KvStore`]
//! turns typed partition-level requests into those.

use std::ops::Bound;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};

use crate::base::clock;

use parking_lot::Mutex;
use tokio::sync::watch;

use super::layout::{self, ChangePosition, KeyRange};
use super::{
    CatalogKey, ChangeLog, CommitSeq, IndexEntryKey, IndexScan, MetaStore, PartitionOf, RecordKey,
    RecordScan, SharedView, StorageError, StorageResult, Store, StoreFuture, StoreStream,
    Transaction, Usage, View, WriteBatch, WriteOp,
};

/// The key spaces an engine keeps apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    /// Documents.
    Records,
    /// Collection metadata, partition maps, counters.
    Catalog,
    /// `_id` entries and secondary-index entries.
    Index,
    /// Usage counters: per hash and per partition.
    Usage,
    /// The change log, by [`ChangePosition`].
    Changes,
}

impl Space {
    pub const ALL: [Space; 5] = [
        Space::Records,
        Space::Catalog,
        Space::Index,
        Space::Usage,
        Space::Changes,
    ];
}

/// One raw change.
#[derive(Debug, Clone, PartialEq)]
pub enum KvOp {
    Put {
        space: Space,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        space: Space,
        key: Vec<u8>,
    },
}

/// An owned iterator over `(key, value)` pairs in key order.
pub type ScanIter = Box<dyn Iterator<Item = StorageResult<(Vec<u8>, Vec<u8>)>> + Send>;

/// A test on a stored value: the pairs whose value fails it are skipped.
pub type ValueFilter = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Raw reads; a scan sees the data as it was when the scan started.
pub trait KvRead: Send + Sync + 'static {
    fn get(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>>;

    fn scan(&self, space: Space, range: KeyRange, reverse: bool) -> ScanIter;

    /// [`KvRead::scan`] of the pairs whose value passes `keep`. An engine
    /// that can look at a value where it holds it tests it there, so the
    /// values a selective scan skips are never copied out.
    fn scan_where(
        &self,
        space: Space,
        range: KeyRange,
        reverse: bool,
        keep: ValueFilter,
    ) -> ScanIter {
        Box::new(
            self.scan(space, range, reverse)
                .filter(move |item| item.as_ref().map_or(true, |(_, v)| keep(v))),
        )
    }
}

/// An ordered key-value engine.
pub trait KvEngine: KvRead {
    /// A consistent view of everything committed so far, across spaces.
    fn snapshot(&self) -> Arc<dyn KvRead>;

    /// Reads of the latest state.
    fn live(&self) -> Arc<dyn KvRead>;

    /// Applies the changes atomically; returns the commit sequence.
    fn write(&self, ops: Vec<KvOp>) -> StorageResult<CommitSeq>;

    fn durable(&self, seq: CommitSeq) -> BoxFuture<'static, StorageResult<()>>;

    /// Resolves once the commit `seq` survives a crash of this process
    /// (not necessarily of the machine); by default, once durable.
    fn written(&self, seq: CommitSeq) -> BoxFuture<'static, StorageResult<()>> {
        self.durable(seq)
    }

    fn disk_bytes(&self) -> u64;

    /// Bytes one space takes (approximate; 0 when the engine cannot say).
    fn space_bytes(&self, space: Space) -> u64 {
        let _ = space;
        0
    }

    /// What the engine's group commit has done, when it has one.
    fn sync_stats(&self) -> Option<super::durability::SyncStats> {
        None
    }

    fn close(&self) -> StorageResult<()>;
}

/// Raw changes per batch when clearing a collection or an index.
const CLEAR_BATCH: usize = 10_000;

/// The partition-level store over one engine.
pub struct KvStore {
    engine: Arc<dyn KvEngine>,
    /// Held while a batch with change-log entries takes its time and
    /// commits, so such batches commit in the order of their times.
    logging: Mutex<()>,
    /// The time of the newest batch that logged changes.
    newest_change: watch::Sender<u64>,
}

impl KvStore {
    pub fn new(engine: Arc<dyn KvEngine>) -> Arc<KvStore> {
        Arc::new(KvStore {
            engine,
            logging: Mutex::new(()),
            newest_change: watch::Sender::new(0),
        })
    }

    pub(super) fn engine(&self) -> &Arc<dyn KvEngine> {
        &self.engine
    }

    /// Writes `ops` and the change-log entries `changes` in one atomic
    /// batch, the entries at the next cluster time, in order.
    pub(super) fn write_with_changes(
        &self,
        mut ops: Vec<KvOp>,
        changes: Vec<Vec<u8>>,
    ) -> StorageResult<CommitSeq> {
        if changes.is_empty() {
            return self.engine.write(ops);
        }
        let _logging = self.logging.lock();
        let time = clock::tick();
        ops.extend(changes.into_iter().enumerate().map(|(i, value)| {
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            KvOp::Put {
                space: Space::Changes,
                key: ChangePosition { time, index }.encode(),
                value,
            }
        }));
        let result = self.engine.write(ops);
        if result.is_ok() {
            self.newest_change.send_replace(time);
        }
        result
    }

    /// Moves the cluster clock past every time the log holds, so the
    /// changes logged from now on follow them even if the wall clock
    /// stepped back while the server was down.
    fn recover_clock(&self) -> StorageResult<()> {
        let all = (Bound::Unbounded, Bound::Unbounded);
        if let Some(item) = self.engine.scan(Space::Changes, all, true).next() {
            let (key, _) = item?;
            let newest = ChangePosition::decode(&key)?.time;
            clock::advance_past(newest);
            self.newest_change.send_replace(newest);
        }
        clock::advance_past(ChangeLog::start(self)?);
        Ok(())
    }

    fn clear(&self, ranges: Vec<(Space, KeyRange)>) -> StorageResult<CommitSeq> {
        let mut seq = 0;
        let mut ops = Vec::new();
        for (space, range) in ranges {
            for item in self.engine.scan(space, range, false) {
                let (key, _) = item?;
                ops.push(KvOp::Delete { space, key });
                if ops.len() >= CLEAR_BATCH {
                    seq = self.engine.write(std::mem::take(&mut ops))?;
                }
            }
        }
        if !ops.is_empty() {
            seq = self.engine.write(ops)?;
        }
        Ok(seq)
    }

    /// Upgrades a version-1 store in one atomic batch.
    fn upgrade_v1(&self, partition_of: PartitionOf<'_>) -> StorageResult<()> {
        use layout::v1::{decode_index_space, IndexSpaceKey};
        let mut ops = Vec::new();
        let (mut moved, mut dropped) = (0u64, 0u64);
        for item in self
            .engine
            .scan(Space::Index, (Bound::Unbounded, Bound::Unbounded), false)
        {
            let (key, value) = item?;
            let new = match decode_index_space(&key)? {
                IndexSpaceKey::Id => continue,
                IndexSpaceKey::Usage { collection, hash } => {
                    Some((Space::Usage, layout::usage_key(collection, hash)))
                }
                IndexSpaceKey::PartitionTotal {
                    collection,
                    partition,
                } => Some((
                    Space::Usage,
                    layout::partition_total_key(collection, partition),
                )),
                IndexSpaceKey::Entry {
                    collection,
                    index,
                    entry,
                } => partition_of(collection, &value).map(|partition| {
                    let key = IndexEntryKey {
                        collection,
                        index,
                        partition,
                        entry,
                    };
                    (Space::Index, key.encode())
                }),
            };
            ops.push(KvOp::Delete {
                space: Space::Index,
                key,
            });
            match new {
                Some((space, key)) => {
                    moved += 1;
                    ops.push(KvOp::Put { space, key, value });
                }
                None => dropped += 1,
            }
        }
        ops.push(version_op());
        self.engine.write(ops)?;
        tracing::info!(
            moved,
            dropped,
            "storage format upgraded from version 1 to version {}",
            layout::FORMAT_VERSION
        );
        Ok(())
    }
}

fn version_op() -> KvOp {
    KvOp::Put {
        space: Space::Catalog,
        key: CatalogKey::FormatVersion.encode(),
        value: layout::encode_counter(layout::FORMAT_VERSION as u64),
    }
}

/// The raw changes of a typed batch; its change-log entries go at
/// cluster time `time`, in the batch's order.
pub fn raw_ops(batch: WriteBatch, time: u64) -> Vec<KvOp> {
    let put = |space, key, value| Some(KvOp::Put { space, key, value });
    let delete = |space, key| Some(KvOp::Delete { space, key });
    let mut index = 0u32;
    batch
        .ops
        .into_iter()
        .filter_map(|op| match op {
            WriteOp::PutRecord(k, v) => put(Space::Records, k.encode(), v),
            WriteOp::DeleteRecord(k) => delete(Space::Records, k.encode()),
            WriteOp::PutIdEntry {
                collection,
                id,
                hash,
            } => put(
                Space::Index,
                layout::id_entry_key(collection, &id),
                layout::id_entry_value(hash),
            ),
            WriteOp::DeleteIdEntry { collection, id } => {
                delete(Space::Index, layout::id_entry_key(collection, &id))
            }
            WriteOp::PutIndexEntry(k, v) => put(Space::Index, k.encode(), v),
            WriteOp::DeleteIndexEntry(k) => delete(Space::Index, k.encode()),
            WriteOp::PutUsage {
                collection,
                hash,
                usage,
            } => put(
                Space::Usage,
                layout::usage_key(collection, hash),
                usage.encode(),
            ),
            WriteOp::DeleteUsage { collection, hash } => {
                delete(Space::Usage, layout::usage_key(collection, hash))
            }
            WriteOp::PutPartitionTotal {
                collection,
                partition,
                usage,
                ..
            } => put(
                Space::Usage,
                layout::partition_total_key(collection, partition),
                usage.encode(),
            ),
            WriteOp::DeletePartitionTotal {
                collection,
                partition,
            } => delete(
                Space::Usage,
                layout::partition_total_key(collection, partition),
            ),
            WriteOp::PutMeta(k, v) => put(Space::Catalog, k.encode(), v),
            WriteOp::DeleteMeta(k) => delete(Space::Catalog, k.encode()),
            // One engine holds every partition: nothing to place.
            WriteOp::PutPartition { .. } | WriteOp::DeletePartition { .. } => None,
            WriteOp::PutChange(entry) => {
                let key = ChangePosition { time, index }.encode();
                index += 1;
                put(Space::Changes, key, entry)
            }
        })
        .collect()
}

impl Store for KvStore {
    fn view(&self) -> SharedView {
        Arc::new(KvView {
            read: self.engine.snapshot(),
        })
    }

    fn live(&self) -> SharedView {
        Arc::new(KvView {
            read: self.engine.live(),
        })
    }

    fn meta(&self) -> &dyn MetaStore {
        self
    }

    fn apply(&self, batch: WriteBatch) -> StoreFuture<CommitSeq> {
        if !batch.logs_changes() {
            return ready(self.engine.write(raw_ops(batch, 0)));
        }
        let _logging = self.logging.lock();
        let time = clock::tick();
        let result = self.engine.write(raw_ops(batch, time));
        if result.is_ok() {
            self.newest_change.send_replace(time);
        }
        ready(result)
    }

    fn durable(&self, seq: CommitSeq) -> StoreFuture<()> {
        self.engine.durable(seq)
    }

    fn written(&self, seq: CommitSeq) -> StoreFuture<()> {
        self.engine.written(seq)
    }

    fn clear_collection(&self, collection: u64) -> StoreFuture<CommitSeq> {
        let ranges = [Space::Records, Space::Index, Space::Usage]
            .into_iter()
            .map(|s| (s, layout::collection_range(collection)))
            .collect();
        let result = self.clear(ranges);
        Box::pin(async move { result })
    }

    fn clear_index(&self, collection: u64, index: u32) -> StoreFuture<CommitSeq> {
        let range =
            layout::index_range(collection, index, None, Bound::Unbounded, Bound::Unbounded);
        let result = self.clear(vec![(Space::Index, range)]);
        Box::pin(async move { result })
    }

    fn ensure_format(&self, partition_of: PartitionOf<'_>) -> StorageResult<()> {
        self.check_format(partition_of)?;
        self.recover_clock()
    }

    fn disk_bytes(&self) -> u64 {
        self.engine.disk_bytes()
    }

    fn sync_stats(&self) -> Option<super::durability::SyncStats> {
        self.engine.sync_stats()
    }

    fn change_log(&self) -> Option<&dyn ChangeLog> {
        Some(self)
    }

    fn records_sessions(&self) -> bool {
        true
    }

    fn begin(self: Arc<Self>) -> Option<Arc<dyn Transaction>> {
        Some(Arc::new(super::kv_txn::KvTransaction::begin(self)))
    }

    fn close(&self) -> StorageResult<()> {
        self.engine.close()
    }
}

impl ChangeLog for KvStore {
    fn horizon(&self) -> u64 {
        let _logging = self.logging.lock();
        clock::tick()
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.newest_change.subscribe()
    }

    fn oldest(&self) -> StorageResult<Option<u64>> {
        let all = (Bound::Unbounded, Bound::Unbounded);
        match self.engine.scan(Space::Changes, all, false).next() {
            Some(item) => Ok(Some(ChangePosition::decode(&item?.0)?.time)),
            None => Ok(None),
        }
    }

    fn bytes(&self) -> u64 {
        self.engine.space_bytes(Space::Changes)
    }

    fn start(&self) -> StorageResult<u64> {
        let stored = self
            .engine
            .get(Space::Catalog, &CatalogKey::ChangeLogStart.encode())?;
        Ok(stored
            .as_deref()
            .and_then(layout::decode_counter)
            .unwrap_or(0))
    }

    /// Records the new start first: a reader behind it is told its
    /// changes are gone rather than finding some of them missing.
    fn trim(&self, time: u64) -> StoreFuture<CommitSeq> {
        let result = (|| {
            if ChangeLog::start(self)? >= time {
                return Ok(0);
            }
            self.engine.write(vec![KvOp::Put {
                space: Space::Catalog,
                key: CatalogKey::ChangeLogStart.encode(),
                value: layout::encode_counter(time),
            }])?;
            let before = ChangePosition { time, index: 0 }.encode();
            self.clear(vec![(
                Space::Changes,
                (Bound::Unbounded, Bound::Excluded(before)),
            )])
        })();
        ready(result)
    }
}

impl KvStore {
    fn check_format(&self, partition_of: PartitionOf<'_>) -> StorageResult<()> {
        let found = self
            .engine
            .get(Space::Catalog, &CatalogKey::FormatVersion.encode())?;
        match found.as_deref().map(layout::decode_counter) {
            Some(Some(v)) if v == layout::FORMAT_VERSION as u64 => Ok(()),
            Some(Some(v)) => Err(StorageError::Format(format!(
                "the data directory has storage format version {v}; this build reads version {}",
                layout::FORMAT_VERSION
            ))),
            Some(None) => Err(StorageError::Format(
                "the data directory's storage format version is unreadable".into(),
            )),
            None => {
                let any = Space::ALL.iter().any(|&s| {
                    self.engine
                        .scan(s, (Bound::Unbounded, Bound::Unbounded), false)
                        .next()
                        .is_some()
                });
                if any {
                    tracing::info!(
                        "data directory in storage format version 1; upgrading to version {}",
                        layout::FORMAT_VERSION
                    );
                    self.upgrade_v1(partition_of)
                } else {
                    self.engine.write(vec![version_op()]).map(|_| ())
                }
            }
        }
    }
}

impl KvStore {
    /// The catalog entries in `range`, each named by what `name` takes
    /// from its key (`None`: a key out of place).
    fn catalog_entries<T: Send + 'static>(
        &self,
        range: KeyRange,
        name: fn(CatalogKey) -> Option<T>,
    ) -> StoreFuture<Vec<(T, Vec<u8>)>> {
        let result = self
            .engine
            .scan(Space::Catalog, range, false)
            .map(|item| {
                let (k, v) = item?;
                let named = name(CatalogKey::decode(&k)?);
                named
                    .map(|n| (n, v))
                    .ok_or_else(|| StorageError::Corrupt("catalog key out of place".into()))
            })
            .collect();
        Box::pin(async move { result })
    }
}

impl MetaStore for KvStore {
    fn get(&self, key: &CatalogKey) -> StoreFuture<Option<Vec<u8>>> {
        let result = self.engine.get(Space::Catalog, &key.encode());
        Box::pin(async move { result })
    }

    fn namespaces(&self) -> StoreFuture<Vec<(String, Vec<u8>)>> {
        self.catalog_entries(layout::namespace_range(), |key| match key {
            CatalogKey::Namespace(ns) => Some(ns),
            _ => None,
        })
    }

    fn sessions(&self) -> StoreFuture<Vec<(Vec<u8>, Vec<u8>)>> {
        self.catalog_entries(layout::session_range(), |key| match key {
            CatalogKey::Session(id) => Some(id),
            _ => None,
        })
    }

    fn databases(&self) -> StoreFuture<Vec<(String, Vec<u8>)>> {
        self.catalog_entries(layout::database_range(), |key| match key {
            CatalogKey::Database(db) => Some(db),
            _ => None,
        })
    }
}

/// Typed reads over raw reads.
pub(super) struct KvView {
    read: Arc<dyn KvRead>,
}

impl KvView {
    pub(super) fn over(read: Arc<dyn KvRead>) -> SharedView {
        Arc::new(KvView { read })
    }
}

fn ready<T: Send + 'static>(value: StorageResult<T>) -> StoreFuture<T> {
    Box::pin(async move { value })
}

fn from_iter<T: Send + 'static>(
    iter: impl Iterator<Item = StorageResult<T>> + Send + 'static,
) -> StoreStream<T> {
    stream::iter(iter).boxed()
}

impl View for KvView {
    fn record(&self, key: &RecordKey) -> StoreFuture<Option<Vec<u8>>> {
        ready(self.read.get(Space::Records, &key.encode()))
    }

    fn scan_records(&self, scan: RecordScan) -> StoreStream<(RecordKey, Vec<u8>)> {
        let range = match (scan.ids, scan.min == scan.max) {
            (Some((from, to)), true) => {
                layout::record_id_range(scan.collection, scan.min, from, to)
            }
            _ => layout::record_range(scan.collection, scan.min, scan.max),
        };
        // The pre-check runs in the engine, before the record is copied
        // out and its key decoded: most records a selective scan reads are
        // dropped, and need no more work.
        let pairs = match scan.filter {
            Some(f) => self.read.scan_where(
                Space::Records,
                range,
                scan.reverse,
                Arc::new(move |v: &[u8]| bson::RawDocument::from_bytes(v).map_or(true, |d| f(d))),
            ),
            None => self.read.scan(Space::Records, range, scan.reverse),
        };
        let records = pairs.map(|item| {
            let (k, v) = item?;
            Ok((RecordKey::decode_owned(k)?, v))
        });
        match scan.limit {
            Some(n) => from_iter(records.take(n)),
            None => from_iter(records),
        }
    }

    fn id_entry(&self, collection: u64, id: &[u8]) -> StoreFuture<Option<i64>> {
        let found = self
            .read
            .get(Space::Index, &layout::id_entry_key(collection, id));
        ready(found.and_then(|v| v.as_deref().map(layout::decode_id_entry_value).transpose()))
    }

    fn scan_id_entries(
        &self,
        collection: u64,
        from: Bound<Vec<u8>>,
        to: Bound<Vec<u8>>,
        reverse: bool,
    ) -> StoreStream<(Vec<u8>, i64)> {
        from_iter(
            self.read
                .scan(
                    Space::Index,
                    layout::id_entry_range(collection, from, to),
                    reverse,
                )
                .map(|item| {
                    let (k, v) = item?;
                    Ok((layout::id_entry_id(&k)?, layout::decode_id_entry_value(&v)?))
                }),
        )
    }

    fn scan_index(&self, scan: IndexScan) -> StoreStream<(IndexEntryKey, Vec<u8>)> {
        let range = layout::index_range(
            scan.collection,
            scan.index,
            scan.partition,
            scan.from,
            scan.to,
        );
        from_iter(
            self.read
                .scan(Space::Index, range, scan.reverse)
                .map(|item| {
                    let (k, v) = item?;
                    Ok((IndexEntryKey::decode(&k)?, v))
                }),
        )
    }

    fn usage(&self, collection: u64, hash: i64) -> StoreFuture<Option<Usage>> {
        let found = self
            .read
            .get(Space::Usage, &layout::usage_key(collection, hash));
        ready(found.map(|v| v.as_deref().map(Usage::decode)))
    }

    fn scan_usage(&self, collection: u64, min: i64, max: i64) -> StoreStream<(i64, Usage)> {
        from_iter(
            self.read
                .scan(
                    Space::Usage,
                    layout::usage_range(collection, min, max),
                    false,
                )
                .map(|item| {
                    let (k, v) = item?;
                    Ok((layout::usage_key_hash(&k)?, Usage::decode(&v)))
                }),
        )
    }

    fn partition_total(&self, collection: u64, partition: u64) -> StoreFuture<Option<Usage>> {
        let found = self.read.get(
            Space::Usage,
            &layout::partition_total_key(collection, partition),
        );
        ready(found.map(|v| v.as_deref().map(Usage::decode)))
    }

    fn scan_changes(&self, after: ChangePosition) -> StoreStream<(ChangePosition, Vec<u8>)> {
        let range = (Bound::Excluded(after.encode()), Bound::Unbounded);
        from_iter(self.read.scan(Space::Changes, range, false).map(|item| {
            let (key, value) = item?;
            Ok((ChangePosition::decode(&key)?, value))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::layout::v1;
    use crate::storage::memory::MemoryEngine;
    use crate::storage::{blocking, IndexScan};

    fn logged(entries: &[&[u8]]) -> WriteBatch {
        let mut batch = WriteBatch::default();
        for e in entries {
            batch.push(WriteOp::PutChange(e.to_vec()));
        }
        batch
    }

    #[test]
    fn concurrent_batches_log_in_commit_order_and_trim_from_the_front() {
        let (store, _engine) = MemoryEngine::store();
        store.ensure_format(&|_, _| None).unwrap();
        let log = store.change_log().unwrap();
        let before = log.horizon();
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let store = &store;
                s.spawn(move || {
                    for i in 0..50u8 {
                        blocking::wait(store.apply(logged(&[&[t, i, 0], &[t, i, 1]]))).unwrap();
                    }
                });
            }
        });
        let after = log.horizon();
        let read: Vec<(ChangePosition, Vec<u8>)> =
            blocking::iter(store.view().scan_changes(ChangePosition::end_of(before)))
                .collect::<StorageResult<_>>()
                .unwrap();
        assert_eq!(read.len(), 400);
        // Positions grow; a batch's two entries share a time, in order;
        // each thread's batches appear in the order it made them.
        assert!(read.windows(2).all(|w| w[0].0 < w[1].0));
        for pair in read.chunks(2) {
            assert_eq!(pair[0].0.time, pair[1].0.time);
            assert_eq!((pair[0].0.index, pair[1].0.index), (0, 1));
            assert_eq!(pair[0].1[..2], pair[1].1[..2]);
        }
        for t in 0..4u8 {
            let order: Vec<u8> = read
                .iter()
                .filter(|(_, e)| e[0] == t && e[2] == 0)
                .map(|(_, e)| e[1])
                .collect();
            assert_eq!(order, (0..50).collect::<Vec<u8>>());
        }
        assert!(read.iter().all(|(p, _)| p.time > before && p.time < after));
        assert_eq!(*log.subscribe().borrow(), read[399].0.time);

        // Trimming records the new start and removes what is older.
        let middle = read[200].0.time;
        blocking::wait(log.trim(middle)).unwrap();
        assert_eq!(log.start().unwrap(), middle);
        let left = blocking::iter(store.view().scan_changes(ChangePosition::default())).count();
        assert_eq!(left, 200);
        // A batch without changes leaves the log alone.
        blocking::wait(store.apply(WriteBatch::default())).unwrap();
        assert_eq!(*log.subscribe().borrow(), read[399].0.time);
    }

    #[test]
    fn a_fresh_store_is_stamped_and_a_newer_one_refused() {
        let (store, engine) = MemoryEngine::store();
        store.ensure_format(&|_, _| None).unwrap();
        let version = blocking::wait(store.meta().get(&CatalogKey::FormatVersion)).unwrap();
        assert_eq!(version.as_deref().and_then(layout::decode_counter), Some(2));
        engine
            .put_raw(
                Space::Catalog,
                CatalogKey::FormatVersion.encode(),
                layout::encode_counter(99),
            )
            .unwrap();
        let e = store.ensure_format(&|_, _| None).unwrap_err().to_string();
        assert!(e.contains("version 99") && e.contains("version 2"), "{e}");
    }

    #[test]
    fn version_one_keys_move_to_their_places() {
        let (store, engine) = MemoryEngine::store();
        let put =
            |space, key: Vec<u8>, value: &[u8]| engine.put_raw(space, key, value.to_vec()).unwrap();
        put(
            Space::Catalog,
            CatalogKey::Namespace("db.c".into()).encode(),
            b"meta",
        );
        put(
            Space::Index,
            v1::usage_key(1, 5),
            &Usage { count: 1, bytes: 9 }.encode(),
        );
        put(
            Space::Index,
            v1::partition_total_key(1, 3),
            &Usage { count: 2, bytes: 8 }.encode(),
        );
        put(Space::Index, v1::entry_key(1, 2, b"keyid"), b"value");
        put(Space::Index, v1::entry_key(7, 2, b"gone"), b"value");
        put(
            Space::Index,
            layout::id_entry_key(1, b"id"),
            &layout::id_entry_value(5),
        );
        store
            .ensure_format(&|collection, value| {
                assert_eq!(value, b"value");
                (collection == 1).then_some(-7)
            })
            .unwrap();
        let view = store.view();
        assert_eq!(
            blocking::wait(view.usage(1, 5)).unwrap(),
            Some(Usage { count: 1, bytes: 9 })
        );
        assert_eq!(
            blocking::wait(view.partition_total(1, 3)).unwrap(),
            Some(Usage { count: 2, bytes: 8 })
        );
        let entries: Vec<_> = blocking::iter(view.scan_index(IndexScan::all(1, 2, Some(-7))))
            .map(|e| e.unwrap())
            .collect();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].0.entry, b"keyid");
        assert_eq!(blocking::wait(view.id_entry(1, b"id")).unwrap(), Some(5));
        // Only the `_id` entry and the moved entry stay in the index space.
        assert_eq!(engine.dump(Space::Index).len(), 2);
        // A second start finds the current version and changes nothing.
        let before = engine.dump(Space::Index);
        store.ensure_format(&|_, _| None).unwrap();
        assert_eq!(engine.dump(Space::Index), before);
    }
}
