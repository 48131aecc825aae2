//! Storage: the bottom layer. Everything above reaches it through the
//! router; nothing here knows about MongoDB commands.
//!
//! - [`Engine`] is the key-value contract every backend implements: point
//!   reads, ordered range scans, atomic write batches and a durability
//!   wait that lets many concurrent writers share one sync.
//! - [`embedded`] is the default backend, on the `fjall` LSM engine.
//! - [`keys`] lays out records so one physical partition is one
//!   contiguous key range: `collection id | shard-key hash | _id`.
//! - [`keystring`] is the order-preserving encoding of BSON values.

pub mod durability;
pub mod embedded;
pub mod keys;
/// The key-string encoding lives with the pure BSON logic; storage keeps the name.
pub use crate::query::keystring;

use std::ops::Bound;
use std::sync::Arc;

use futures::future::BoxFuture;

/// A failure inside a storage backend. Mapped to a MongoDB error once, at
/// the command boundary.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage engine: {0}")]
    Engine(String),
    #[error("stored record is not valid BSON: {0}")]
    Corrupt(String),
}

pub type StorageResult<T> = std::result::Result<T, StorageError>;

impl From<StorageError> for crate::error::Error {
    fn from(e: StorageError) -> Self {
        crate::error::Error::internal(e.to_string())
    }
}

/// The key spaces a backend keeps apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    /// Documents, keyed by [`keys::record_key`].
    Records,
    /// Collection metadata and partition maps, keyed by namespace.
    Catalog,
    /// Index entries, keyed by [`keys::index_key`].
    Index,
}

/// One change inside an atomic [`WriteBatch`].
#[derive(Debug, Clone)]
pub enum WriteOp {
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

/// Changes applied all together or not at all.
#[derive(Debug, Default, Clone)]
pub struct WriteBatch {
    pub ops: Vec<WriteOp>,
}

impl WriteBatch {
    pub fn put(&mut self, space: Space, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(WriteOp::Put { space, key, value });
    }

    pub fn delete(&mut self, space: Space, key: Vec<u8>) {
        self.ops.push(WriteOp::Delete { space, key });
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// A position in the engine's commit order. A commit is durable once the
/// engine has synced past its sequence number.
pub type CommitSeq = u64;

/// An owned iterator over `(key, value)` pairs in key order.
pub type ScanIter = Box<dyn Iterator<Item = StorageResult<(Vec<u8>, Vec<u8>)>> + Send>;

/// Reads: point lookups and ordered range scans. A scan sees the data as
/// it was when the scan started.
pub trait Reader: Send + Sync + 'static {
    fn get(&self, space: Space, key: &[u8]) -> StorageResult<Option<Vec<u8>>>;

    fn scan(&self, space: Space, from: Bound<Vec<u8>>, to: Bound<Vec<u8>>) -> ScanIter;

    /// Like [`Reader::scan`], from the last key down to the first.
    fn scan_rev(&self, space: Space, from: Bound<Vec<u8>>, to: Bound<Vec<u8>>) -> ScanIter;
}

/// A reader shared between the tasks of one query.
pub type SharedReader = Arc<dyn Reader>;

/// What a storage backend offers the router.
///
/// Writes become visible to readers when [`Engine::write`] returns and
/// durable when the future of [`Engine::durable`] resolves: callers reply
/// to a client only after that, which is how "acknowledged means durable"
/// holds while concurrent writers share one sync.
pub trait Engine: Reader {
    /// A consistent view of everything committed so far, across all
    /// spaces: a batch is wholly in it or wholly absent, however long
    /// the view is kept. A query over many partitions reads them all
    /// through one snapshot, so a document moving between partitions is
    /// seen exactly once.
    fn snapshot(&self) -> SharedReader;

    /// Applies a batch atomically; returns its commit sequence.
    fn write(&self, batch: WriteBatch) -> StorageResult<CommitSeq>;

    /// Resolves once everything up to `seq` survives a crash.
    fn durable(&self, seq: CommitSeq) -> BoxFuture<'static, StorageResult<()>>;

    /// Bytes the backend uses on disk (approximate).
    fn disk_bytes(&self) -> u64;

    /// Syncs everything and stops background work; called at shutdown.
    fn close(&self) -> StorageResult<()>;
}

pub type SharedEngine = Arc<dyn Engine>;
