//! Storage: the bottom layer. Everything above reaches it through the
//! router; nothing here knows about MongoDB commands.
//!
//! The seam is the [`Store`] trait, which speaks in partitions and typed
//! keys, never in bytes:
//!
//! - a [`View`] reads one record, scans a partition's records (a hash
//!   range, optionally an `_id` sub-range, either direction, with a filter
//!   and a limit a backend may push down), scans a partition's index
//!   range, looks up `_id` entries and reads the usage counters;
//! - [`Store::apply`] applies an atomic [`WriteBatch`] of typed
//!   [`WriteOp`]s and [`Store::durable`] waits until a commit survives a
//!   crash (many writers share one sync);
//! - the catalog space (collection metadata, partition maps, id counters,
//!   the format version) is read through [`Store::meta`] and written in
//!   batches, so a split commits its new map with the index entries it
//!   re-keys.
//!
//! Methods that would be network calls for a backend keeping partitions
//! on other servers return futures and streams. The embedded backends
//! answer them at once; the router drives them from its own threads with
//! [`blocking`], so its iterator pipeline keeps its shape. Snapshots are
//! explicit ([`Store::view`]) only because one store here holds several
//! partitions: a fan-out reads them all through one view, so a document
//! moving between partitions is seen exactly once.
//!
//! - [`kv`] implements the seam over any ordered key-value engine, in the
//!   byte layout of [`layout`] (the only module that knows bytes);
//! - [`embedded`] is that engine on `fjall`, the default backend;
//! - [`memory`] is that engine in memory, for tests: it can fail a batch
//!   at any step and lose what was not yet durable;
//! - [`postgres`] keeps each partition on one server of a PostgreSQL
//!   fleet, with the metadata on the first.

pub mod durability;
pub mod embedded;
pub mod kv;
mod kv_txn;
pub mod layout;
pub mod memory;
pub mod postgres;
/// The key-string encoding lives with the pure BSON logic; storage keeps the name.
pub use crate::query::keystring;

pub use layout::{CatalogKey, ChangePosition, IndexEntryKey, RecordKey, Usage};

use std::ops::Bound;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt};

/// A failure inside a storage backend. Mapped to a MongoDB error once, at
/// the command boundary.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StorageError {
    #[error("storage engine: {0}")]
    Engine(String),
    /// The disk holding the data is full: the write was not made durable.
    #[error("{0}")]
    DiskFull(String),
    #[error("stored record is not valid BSON: {0}")]
    Corrupt(String),
    #[error("{0}")]
    Format(String),
    /// A server holding the data could not be reached; the operation
    /// may succeed once it is back.
    #[error("{0}")]
    Unavailable(String),
    /// A server stopped answering after a commit was asked of it: the
    /// write may or may not have been applied, so a blind retry is not
    /// safe.
    #[error("{0}")]
    OutcomeUnknown(String),
    /// A concurrent change got there first (a key written meanwhile);
    /// the operation may be retried from its reads.
    #[error("{0}")]
    Conflict(String),
    /// The catalog changed through another gateway since this one
    /// loaded it: reload ([`Store::refresh`]) and retry.
    #[error("{0}")]
    Stale(String),
}

pub type StorageResult<T> = std::result::Result<T, StorageError>;

impl From<StorageError> for crate::error::Error {
    fn from(e: StorageError) -> Self {
        use crate::error::{Error, ErrorCode};
        match e {
            // Retrying is safe and may succeed once the server is back.
            StorageError::Unavailable(why) => Error::new(ErrorCode::HostUnreachable, why)
                .with_extra(bson::doc! {"errorLabels": ["RetryableWriteError"]}),
            StorageError::OutcomeUnknown(why) => Error::new(ErrorCode::HostUnreachable, why),
            StorageError::Conflict(why) => Error::new(ErrorCode::WriteConflict, why),
            StorageError::Stale(why) => Error::new(ErrorCode::StaleConfig, why),
            StorageError::DiskFull(why) => Error::new(ErrorCode::OutOfDiskSpace, why),
            other => Error::internal(other.to_string()),
        }
    }
}

/// The answer of a store, once it has it.
pub type StoreFuture<T> = BoxFuture<'static, StorageResult<T>>;
/// Items a store produces in order.
pub type StoreStream<T> = BoxStream<'static, StorageResult<T>>;

/// A position in the store's commit order. A commit is durable once the
/// store has synced past its sequence number.
pub type CommitSeq = u64;

/// A test a backend may run on each record before returning it; the
/// router checks every record again, so a backend may ignore it.
pub type RecordFilter = Arc<dyn Fn(&bson::RawDocument) -> bool + Send + Sync>;

/// The records of one partition to read.
#[derive(Clone)]
pub struct RecordScan {
    pub collection: u64,
    /// The hash range, both ends inclusive.
    pub min: i64,
    pub max: i64,
    /// Bounds on `keystring(_id)`; only when `min == max`.
    pub ids: Option<layout::KeyRange>,
    pub reverse: bool,
    pub filter: Option<RecordFilter>,
    /// Most records to return (after the filter).
    pub limit: Option<usize>,
}

impl RecordScan {
    /// Every record with a hash in `[min, max]`, in key order.
    pub fn hashes(collection: u64, min: i64, max: i64) -> RecordScan {
        RecordScan {
            collection,
            min,
            max,
            ids: None,
            reverse: false,
            filter: None,
            limit: None,
        }
    }

    /// Every record of the collection.
    pub fn all(collection: u64) -> RecordScan {
        RecordScan::hashes(collection, i64::MIN, i64::MAX)
    }
}

/// Entries of one secondary index to read.
#[derive(Debug, Clone)]
pub struct IndexScan {
    pub collection: u64,
    pub index: u32,
    /// The partition (its start hash); `None` reads every partition, in
    /// partition order, and ignores the bounds.
    pub partition: Option<i64>,
    /// Bounds on the entry part (`keystring(key) | keystring(_id)`).
    pub from: Bound<Vec<u8>>,
    pub to: Bound<Vec<u8>>,
    pub reverse: bool,
}

impl IndexScan {
    /// Every entry of `index` in one partition (or all).
    pub fn all(collection: u64, index: u32, partition: Option<i64>) -> IndexScan {
        IndexScan {
            collection,
            index,
            partition,
            from: Bound::Unbounded,
            to: Bound::Unbounded,
            reverse: false,
        }
    }
}

/// Reads of one point in time (a [`Store::view`]) or of the latest state
/// ([`Store::live`], for writers holding their collection's lock).
pub trait View: Send + Sync + 'static {
    fn record(&self, key: &RecordKey) -> StoreFuture<Option<Vec<u8>>>;

    fn scan_records(&self, scan: RecordScan) -> StoreStream<(RecordKey, Vec<u8>)>;

    /// The hash the record with this `keystring(_id)` is stored under (a
    /// sharded collection's `_id` entries).
    fn id_entry(&self, collection: u64, id: &[u8]) -> StoreFuture<Option<i64>>;

    /// The `_id` entries of a collection whose `keystring(_id)` lies in
    /// the bounds, in `_id` order (or its reverse): `(keystring(_id), hash)`.
    fn scan_id_entries(
        &self,
        collection: u64,
        from: Bound<Vec<u8>>,
        to: Bound<Vec<u8>>,
        reverse: bool,
    ) -> StoreStream<(Vec<u8>, i64)>;

    /// Whether an insert of `keystring(_id)` under `hash` would repeat a
    /// stored `_id`: anywhere in the collection for a store that holds
    /// every partition; on the server that would hold it for one that
    /// spreads partitions over servers (MongoDB's rule: unique per shard).
    fn id_taken(&self, collection: u64, id: &[u8], _hash: i64) -> StoreFuture<bool> {
        let found = self.id_entry(collection, id);
        Box::pin(async move { Ok(found.await?.is_some()) })
    }

    fn scan_index(&self, scan: IndexScan) -> StoreStream<(IndexEntryKey, Vec<u8>)>;

    /// The usage of one logical partition (one hash).
    fn usage(&self, collection: u64, hash: i64) -> StoreFuture<Option<Usage>>;

    /// The usage of every hash in `[min, max]` that has any.
    fn scan_usage(&self, collection: u64, min: i64, max: i64) -> StoreStream<(i64, Usage)>;

    /// The stored total of one partition.
    fn partition_total(&self, collection: u64, partition: u64) -> StoreFuture<Option<Usage>>;

    /// The change-log entries after `after`, in commit order: `(position,
    /// entry)`. Only a store with a change log ([`Store::change_log`]) has
    /// any.
    fn scan_changes(&self, after: ChangePosition) -> StoreStream<(ChangePosition, Vec<u8>)> {
        let _ = after;
        futures::stream::once(async { Err(no_change_log()) }).boxed()
    }
}

fn no_change_log() -> StorageError {
    StorageError::Format("this storage backend keeps no change log".into())
}

pub type SharedView = Arc<dyn View>;

/// The catalog: collection metadata, partition maps, counters.
pub trait MetaStore: Send + Sync {
    fn get(&self, key: &CatalogKey) -> StoreFuture<Option<Vec<u8>>>;

    /// Every collection's metadata: `(db.coll, value)`.
    fn namespaces(&self) -> StoreFuture<Vec<(String, Vec<u8>)>>;

    /// Every database's stored settings: `(db, value)`.
    fn databases(&self) -> StoreFuture<Vec<(String, Vec<u8>)>>;

    /// Every session record: `(session id, value)`. A store that keeps
    /// none lists none.
    fn sessions(&self) -> StoreFuture<Vec<(Vec<u8>, Vec<u8>)>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// Finds the partition (its start hash) of a version-1 index entry from
/// its collection and value; `None` drops the entry (its collection is
/// gone).
pub type PartitionOf<'a> = &'a (dyn Fn(u64, &[u8]) -> Option<i64> + Sync);

/// What a storage backend offers the router.
///
/// Writes become visible to readers when [`Store::apply`] resolves and
/// durable when [`Store::durable`] resolves: callers reply to a client
/// only after that, which is how "acknowledged means durable" holds while
/// concurrent writers share one sync.
pub trait Store: Send + Sync + 'static {
    /// A consistent view of everything committed so far: a batch is
    /// wholly in it or wholly absent, however long the view is kept.
    fn view(&self) -> SharedView;

    /// Reads of the latest committed state.
    fn live(&self) -> SharedView;

    fn meta(&self) -> &dyn MetaStore;

    /// Applies a batch atomically; resolves to its commit sequence.
    fn apply(&self, batch: WriteBatch) -> StoreFuture<CommitSeq>;

    /// Resolves once everything up to `seq` survives a crash.
    fn durable(&self, seq: CommitSeq) -> StoreFuture<()>;

    /// Resolves once everything up to `seq` survives a crash of this
    /// process, though perhaps not a power loss: what a write concern of
    /// `j: false` waits for. By default, once durable.
    fn written(&self, seq: CommitSeq) -> StoreFuture<()> {
        self.durable(seq)
    }

    /// Removes every record, entry and counter of a collection (not its
    /// metadata); may take several commits, the last one returned.
    fn clear_collection(&self, collection: u64) -> StoreFuture<CommitSeq>;

    /// Removes every entry of one secondary index.
    fn clear_index(&self, collection: u64, index: u32) -> StoreFuture<CommitSeq>;

    /// Checks the stored format on start: a fresh store is stamped with
    /// the current version, an older one is upgraded in place (the index
    /// entries placed by `partition_of`), a newer one refused.
    fn ensure_format(&self, partition_of: PartitionOf<'_>) -> StorageResult<()>;

    /// Bytes the backend uses on disk (approximate).
    fn disk_bytes(&self) -> u64;

    /// What the backend's group commit has done, when it has one.
    fn sync_stats(&self) -> Option<durability::SyncStats> {
        None
    }

    /// Whether reads and writes are answered without waiting on another
    /// server, so a point operation may run on an async worker.
    fn answers_at_once(&self) -> bool {
        true
    }

    /// The servers partitions are placed on, by position, when the store
    /// places them on servers; `None` when it holds them all.
    fn servers(&self) -> Option<Vec<ServerInfo>> {
        None
    }

    /// Adds the server at `url` (a connection string); resolves to its
    /// position.
    fn add_server(&self, url: &str) -> StoreFuture<usize> {
        let _ = url;
        Box::pin(async {
            Err(StorageError::Format(
                "this backend keeps every partition in one place: there are no servers to add"
                    .into(),
            ))
        })
    }

    /// One step of removing server `position` (see [`Drain`]).
    fn remove_server(&self, position: usize) -> StoreFuture<Drain> {
        let _ = position;
        Box::pin(async {
            Err(StorageError::Format(
                "this backend keeps every partition in one place: there are no servers to remove"
                    .into(),
            ))
        })
    }

    /// The server (a position in [`Store::servers`]) holding partition
    /// `partition` of `collection` ([`WHOLE_COLLECTION`] for an unsharded
    /// one).
    fn server_of(&self, _collection: u64, _partition: u64) -> Option<usize> {
        None
    }

    /// Moves partition `partition` of `collection` (its hash range
    /// `min..=max`) to server `to`, online: reads and writes go on, and
    /// every write is on the new server once the move returns.
    fn move_partition(&self, collection: u64, partition: u64, to: usize) -> StoreFuture<()> {
        let _ = (collection, partition, to);
        Box::pin(async {
            Err(StorageError::Format(
                "this backend keeps every partition in one place: there is nowhere to move one"
                    .into(),
            ))
        })
    }

    /// Whether the catalog changed through another gateway since this
    /// one last loaded it; always false for a store only one process
    /// opens.
    fn catalog_moved(&self) -> StoreFuture<bool> {
        Box::pin(async { Ok(false) })
    }

    /// Reloads what the store itself caches of the catalog (where
    /// partitions are) and returns the catalog version it reloaded at;
    /// the caller then reloads the catalog and hands the version to
    /// [`Store::catalog_loaded`]. `None` for a store only one process
    /// opens.
    fn refresh(&self) -> StoreFuture<Option<u64>> {
        Box::pin(async { Ok(None) })
    }

    /// The catalog in memory is now the one of `version`: batches are
    /// checked against it.
    fn catalog_loaded(&self, _version: u64) {}

    /// Takes collection `collection`'s write lock among every process
    /// sharing the store (a gateway's own writers are already serialized
    /// by the collection's lock in memory); held until the guard drops.
    fn lock_collection(&self, _collection: u64) -> StoreFuture<Option<StoreLock>> {
        Box::pin(async { Ok(None) })
    }

    /// Whether session records ([`CatalogKey::Session`]) may ride in any
    /// batch: true where the catalog and the data commit together.
    fn records_sessions(&self) -> bool {
        false
    }

    /// Begins a multi-document transaction over the store as it is now;
    /// `None` when the backend has none.
    fn begin(self: Arc<Self>) -> Option<Arc<dyn Transaction>> {
        None
    }

    /// The change log, when the store keeps one: it writes the
    /// [`WriteOp::PutChange`] entries of each batch with it, at a position
    /// in commit order.
    fn change_log(&self) -> Option<&dyn ChangeLog> {
        None
    }

    /// Syncs everything and stops background work; called at shutdown.
    fn close(&self) -> StorageResult<()>;
}

/// A multi-document transaction ([`Store::begin`]): a store whose reads
/// see one snapshot with the transaction's own writes over it, and whose
/// writes wait, unseen by anyone else, for [`Transaction::commit`].
pub trait Transaction: Store {
    /// The collections it has written.
    fn collections(&self) -> Vec<u64>;

    /// Writes everything in one atomic batch, unless a key it wrote was
    /// changed by another commit since its snapshot
    /// ([`StorageError::Conflict`]); resolves to the commit (0 when it
    /// wrote nothing). The caller holds the write locks of
    /// [`Transaction::collections`]. A transaction ends once, by commit
    /// or [`Transaction::abort`].
    fn commit(&self) -> StoreFuture<CommitSeq>;

    /// Drops its writes and ends it.
    fn abort(&self);

    fn as_store(self: Arc<Self>) -> SharedStore;
}

/// A store's log of changes, which change streams read.
///
/// A batch with [`WriteOp::PutChange`] entries takes its time from the
/// cluster clock ([`crate::base::clock`]) as it commits, and batches
/// commit in the order of their times: whoever sees one entry of the log
/// sees every earlier one.
pub trait ChangeLog: Send + Sync {
    /// A time every later commit will pass and every commit at or before
    /// it has completed: a view taken after this holds the whole log up
    /// to it.
    fn horizon(&self) -> u64;

    /// The time of the newest commit that logged a change; it changes as
    /// batches commit, so a reader that reached the end can wait for it.
    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64>;

    /// The time the log starts at: entries before it were trimmed.
    fn start(&self) -> StorageResult<u64>;

    /// The time of the oldest entry, if there is one.
    fn oldest(&self) -> StorageResult<Option<u64>>;

    /// The bytes the log takes (approximate).
    fn bytes(&self) -> u64;

    /// Removes the entries older than `time`; returns the last commit.
    fn trim(&self, time: u64) -> StoreFuture<CommitSeq>;
}

/// A server partitions are placed on ([`Store::servers`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerInfo {
    /// `host:port` (several for a replicated server).
    pub name: String,
    pub state: ServerState,
}

/// Whether a server takes partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    Active,
    /// Being removed: it takes no new partition, and its own move away.
    Draining,
    /// Gone: it holds nothing and keeps its position only.
    Removed,
}

/// Where the removal of a server stands ([`Store::remove_server`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// Marked draining now; its partitions start to move away.
    Started,
    /// Still holding `partitions` partitions.
    Ongoing { partitions: usize },
    /// Empty, and removed.
    Completed,
}

/// A lock a store holds for a caller until this is dropped.
pub struct StoreLock(pub Box<dyn Send + Sync>);

pub type SharedStore = Arc<dyn Store>;

/// One change inside an atomic [`WriteBatch`].
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    PutRecord(RecordKey, Vec<u8>),
    DeleteRecord(RecordKey),
    PutIdEntry {
        collection: u64,
        id: Vec<u8>,
        hash: i64,
    },
    DeleteIdEntry {
        collection: u64,
        id: Vec<u8>,
    },
    PutIndexEntry(IndexEntryKey, Vec<u8>),
    DeleteIndexEntry(IndexEntryKey),
    PutUsage {
        collection: u64,
        hash: i64,
        usage: Usage,
    },
    DeleteUsage {
        collection: u64,
        hash: i64,
    },
    /// The total of partition `partition` is now `usage`, after the
    /// writer added `added` to it: a store shared by several gateways
    /// adds `added` to what it holds instead.
    PutPartitionTotal {
        collection: u64,
        partition: u64,
        usage: Usage,
        added: UsageChange,
    },
    DeletePartitionTotal {
        collection: u64,
        partition: u64,
    },
    PutMeta(CatalogKey, Vec<u8>),
    DeleteMeta(CatalogKey),
    /// Physical partition `partition` of `collection` holds the hashes
    /// `min..=max`. A backend that keeps partitions on several servers
    /// places a new one (a partition inside a removed one stays on its
    /// server); one that keeps them all together ignores it.
    PutPartition {
        collection: u64,
        partition: u64,
        min: i64,
        max: i64,
    },
    /// Physical partition `partition` of `collection` is gone (split).
    DeletePartition {
        collection: u64,
        partition: u64,
    },
    /// An entry of the change log (a BSON document). The store places it
    /// after every entry committed before it ([`ChangeLog`]).
    PutChange(Vec<u8>),
}

/// Documents and bytes a write added to a partition (negative: removed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageChange {
    pub count: i64,
    pub bytes: i64,
}

impl UsageChange {
    /// What a partition that was empty holds after `usage` is added.
    pub fn of(usage: Usage) -> UsageChange {
        UsageChange {
            count: usage.count as i64,
            bytes: usage.bytes as i64,
        }
    }
}

/// The partition id of an unsharded collection's one partition in
/// [`WriteOp::PutPartition`]: it holds every hash.
pub const WHOLE_COLLECTION: u64 = u64::MAX;

/// Changes applied all together or not at all.
#[derive(Debug, Default, Clone)]
pub struct WriteBatch {
    pub ops: Vec<WriteOp>,
}

impl WriteBatch {
    pub fn push(&mut self, op: WriteOp) {
        self.ops.push(op);
    }

    pub fn put_meta(&mut self, key: CatalogKey, value: Vec<u8>) {
        self.ops.push(WriteOp::PutMeta(key, value));
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Whether it writes to the change log.
    pub fn logs_changes(&self) -> bool {
        self.ops
            .iter()
            .any(|op| matches!(op, WriteOp::PutChange(_)))
    }
}

/// Driving a store's futures and streams from a thread that may block
/// (the router's pool threads). An embedded backend answers at once, so
/// each call first polls once without parking (no executor set-up per
/// record); only an answer that is not ready yet waits on the thread.
pub mod blocking {
    use std::task::{Context, Poll};

    use futures::task::noop_waker_ref;
    use futures::StreamExt;

    use super::{StorageResult, StoreFuture, StoreStream};

    pub fn wait<T>(mut future: StoreFuture<T>) -> StorageResult<T> {
        let mut cx = Context::from_waker(noop_waker_ref());
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(answer) => answer,
            Poll::Pending => futures::executor::block_on(future),
        }
    }

    pub fn iter<T: Send + 'static>(
        mut stream: StoreStream<T>,
    ) -> impl Iterator<Item = StorageResult<T>> + Send + 'static {
        let mut done = false;
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            let mut cx = Context::from_waker(noop_waker_ref());
            let item = match stream.poll_next_unpin(&mut cx) {
                Poll::Ready(item) => item,
                Poll::Pending => futures::executor::block_on(stream.next()),
            };
            done = item.is_none();
            item
        })
    }
}
