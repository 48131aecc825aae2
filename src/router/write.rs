//! Writes: insert, update, delete and find-and-modify.
//!
//! Each runs its read-modify-write synchronously under the collection's
//! write lock (so a check for a duplicate `_id` and the write that follows
//! are one step), commits one engine batch, releases the lock and only
//! then waits for the batch to be durable. No lock is held across
//! `.await`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bson::raw::{RawBsonRef, RawIter};
use bson::{doc, oid::ObjectId, Bson, Document, RawDocument};

use super::capped::CappedBatch;
use super::catalog::Usage;
use super::changes::ChangeRecorder;
use super::charge;
use super::indexes::IndexWrites;
use super::validation::DocumentValidation;
use super::{Collection, Matched, Namespace, Record, Router, Sharding};
use crate::base::limits::MAX_BSON_OBJECT_SIZE;
use crate::error::{Error, ErrorCode, Result};
use crate::partition::PartitionMap;
use crate::query::filter::Filter;
use crate::query::filter::MatchDetails;
use crate::query::sort::SortSpec;
use crate::query::update::{documents_identical, ApplyContext, RawApplied, Update};
use crate::storage::{blocking, keystring};
use crate::storage::{RecordKey, SharedView, UsageChange, WriteBatch, WriteOp};
use crate::{bail, err};

/// The hash a shard-key value (or its absence) is stored under.
fn key_hash(value: Option<&Bson>) -> i64 {
    crate::partition::hash::hash_of(value)
}

/// The result of an insert batch.
#[derive(Debug, Default)]
pub struct InsertOutcome {
    pub inserted: u64,
    /// `(index in the batch, error)` for each document not written.
    pub errors: Vec<(usize, Error)>,
}

/// One update statement (`update` command entry or `findAndModify`).
#[derive(Debug, Clone)]
pub struct UpdateStatement {
    pub filter: Filter,
    pub update: Update,
    pub multi: bool,
    pub upsert: bool,
    /// Which document a single update picks first (`findAndModify`).
    pub sort: Option<SortSpec>,
    /// Keep the document before and after the change (`findAndModify`).
    pub return_documents: bool,
    /// Whether the collection's validator checks the changed documents.
    pub validation: DocumentValidation,
}

/// The result of an update or a find-and-modify.
#[derive(Debug, Default)]
pub struct ModifyOutcome {
    pub matched: u64,
    pub modified: u64,
    pub upserted_id: Option<Bson>,
    /// The document before the change (single-document operations).
    pub before: Option<Document>,
    /// The document after the change (single-document operations).
    pub after: Option<Document>,
}

/// How often a write is tried again after another gateway changed the
/// catalog under it.
const MAX_STALE_RETRIES: u64 = 20;

/// Insert batches up to this size run on the async worker itself...
const INLINE_INSERTS: usize = 64;
/// ...when their documents also hold no more bytes than this: copying
/// and logging a large document takes long enough to hold up the other
/// connections that worker serves.
const INLINE_INSERT_BYTES: usize = 1 << 20;

/// Runs short work (point reads and writes: microseconds) right on the
/// async worker, and anything that may scan where blocking is allowed,
/// so a long scan never stalls other connections.
pub(crate) fn maybe_blocking<T>(inline: bool, f: impl FnOnce() -> T) -> T {
    if inline {
        f()
    } else {
        tokio::task::block_in_place(f)
    }
}

/// The partition of `coll` an encoded document goes to (where a key it
/// cannot give would send it: the null key's).
fn partition_of_raw(coll: &Collection, bytes: &[u8]) -> u64 {
    let Some(sharding) = &coll.sharding else {
        return 0;
    };
    let value = RawDocument::from_bytes(bytes)
        .ok()
        .and_then(|raw| sharding.key.raw_value(raw).ok().flatten());
    Router::partition_of(coll, key_hash(value.as_ref()))
}

/// Encodes a document, refusing one over the BSON size limit or nested
/// deeper than a stored document may be.
fn encode_document(doc: &Document) -> Result<Vec<u8>> {
    let bytes = doc
        .to_vec()
        .map_err(|e| err!(BadValue, "cannot encode document: {e}"))?;
    check_size(bytes.len())?;
    if let Ok(raw) = RawDocument::from_bytes(&bytes) {
        if !within_stored_depth(raw) {
            bail!(
                Overflow,
                "Document exceeds maximum nesting depth of {MAX_STORED_DEPTH}"
            );
        }
    }
    Ok(bytes)
}

/// The deepest nesting of a stored document, counting the document itself
/// (MongoDB's `BSONDepth::getMaxDepthForUserStorage`). Messages may nest
/// deeper (see [`crate::wire::validate`]): commands wrap documents.
pub const MAX_STORED_DEPTH: usize = 100;

/// Whether `doc` nests at most [`MAX_STORED_DEPTH`] levels. Empty
/// sub-documents and arrays do not count, as in MongoDB.
fn within_stored_depth(doc: &RawDocument) -> bool {
    // Each level costs at least 7 bytes (type, empty name, length,
    // terminator): a smaller document cannot be too deep.
    if doc.as_bytes().len() <= 7 * MAX_STORED_DEPTH {
        return true;
    }
    let mut stack: Vec<RawIter<'_>> = vec![doc.iter_elements()];
    while let Some(top) = stack.last_mut() {
        let Some(element) = top.next() else {
            stack.pop();
            continue;
        };
        // Malformed BSON is refused elsewhere, with its own error.
        let Ok(value) = element.and_then(|e| e.value()) else {
            return true;
        };
        let child = match value {
            RawBsonRef::Document(d) if d.as_bytes().len() > 5 => d.iter_elements(),
            RawBsonRef::Array(a) if a.as_bytes().len() > 5 => a.iter_elements(),
            _ => continue,
        };
        if stack.len() >= MAX_STORED_DEPTH {
            return false;
        }
        stack.push(child);
    }
    true
}

/// Checks an `_id` value is one MongoDB accepts.
fn validate_id(id: &Bson) -> Result<()> {
    match id {
        Bson::Array(_) => bail!(InvalidIdField, "The '_id' value cannot be of type array"),
        Bson::RegularExpression(_) => {
            bail!(InvalidIdField, "The '_id' value cannot be of type regex")
        }
        Bson::Undefined => bail!(
            InvalidIdField,
            "The '_id' value cannot be of type undefined"
        ),
        _ => Ok(()),
    }
}

/// Makes `_id` the first field, generating an ObjectId when missing.
pub fn with_id_first(mut doc: Document) -> Document {
    let id = doc
        .remove("_id")
        .unwrap_or_else(|| Bson::ObjectId(ObjectId::new()));
    let mut out = Document::new();
    out.insert("_id", id);
    out.extend(doc);
    out
}

/// `$`-prefixed and dotted field names are stored as given, at any
/// level, as MongoDB 5.0 and later store them on insert; `$getField` and
/// `$setField` reach them.
fn validate_for_insert(doc: &Document) -> Result<()> {
    if let Some(id) = doc.get("_id") {
        validate_id(id)?;
    }
    Ok(())
}

/// A stored or prepared document, decoded.
fn decode(bytes: &[u8]) -> Result<Document> {
    Document::from_reader(bytes).map_err(|e| err!(InvalidBSON, "invalid BSON document: {e}"))
}

fn raw_error(e: bson::error::Error) -> Error {
    Error::new(ErrorCode::InvalidBSON, format!("invalid document: {e}"))
}

/// Prepares one document to insert from its BSON bytes: checks field
/// names and `_id`, and makes `_id` the first field (generating an
/// ObjectId when it is missing). A document whose `_id` already comes
/// first — what drivers send — is stored exactly as it arrived, without
/// being decoded.
pub fn prepare_insert(bytes: Vec<u8>) -> Result<(Bson, Vec<u8>)> {
    let raw = RawDocument::from_bytes(&bytes).map_err(raw_error)?;
    if !within_stored_depth(raw) {
        bail!(
            Overflow,
            "cannot insert document because it exceeds {MAX_STORED_DEPTH} levels of nesting"
        );
    }
    let mut id = None;
    let mut id_first = false;
    for (i, element) in raw.iter_elements().enumerate() {
        let element = element.map_err(raw_error)?;
        let key = element.key().as_str();
        if key == "_id" && id.is_none() {
            id = Some(Bson::try_from(element.value().map_err(raw_error)?).map_err(raw_error)?);
            id_first = i == 0;
        }
    }
    let prepared = match id {
        Some(id) if id_first => (id, bytes),
        Some(_) => {
            let doc = with_id_first(Document::try_from(raw).map_err(raw_error)?);
            let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
            (id, encode_document(&doc)?)
        }
        None => {
            let oid = ObjectId::new();
            // {_id: ObjectId} followed by the original elements.
            let body = bytes.get(4..).unwrap_or_default();
            let len = 4 + 1 + 4 + 12 + body.len();
            let mut out = Vec::with_capacity(len);
            out.extend_from_slice(&(len as i32).to_le_bytes());
            out.push(0x07);
            out.extend_from_slice(b"_id\0");
            out.extend_from_slice(&oid.bytes());
            out.extend_from_slice(body);
            (Bson::ObjectId(oid), out)
        }
    };
    validate_id(&prepared.0)?;
    check_size(prepared.1.len())?;
    Ok(prepared)
}

fn check_size(len: usize) -> Result<()> {
    if len > MAX_BSON_OBJECT_SIZE {
        return Err(Error::new(
            ErrorCode::BSONObjectTooLarge,
            format!("object to insert too large. size in bytes: {len}, max size: {MAX_BSON_OBJECT_SIZE}"),
        ));
    }
    Ok(())
}

pub(crate) fn duplicate_key_error(ns: &Namespace, id: &Bson) -> Error {
    let shown = Document::from_iter([("_id".to_string(), id.clone())]);
    Error::new(
        ErrorCode::DuplicateKey,
        format!("E11000 duplicate key error collection: {ns} index: _id_ dup key: {shown}"),
    )
    .with_extra(doc! {"keyPattern": {"_id": 1}, "keyValue": shown})
}

/// The writes of one operation on a sharded collection, with the
/// bookkeeping that goes with them: the `_id` index (which keeps `_id`
/// unique across partitions and finds a document by `_id` alone) and the
/// size of every logical partition touched, checked against its cap and
/// stored in the same atomic batch.
pub(crate) struct PartitionedBatch<'a> {
    router: &'a Router,
    coll: &'a Collection,
    sharding: &'a Sharding,
    map: Arc<PartitionMap>,
    /// The latest state; the write lock keeps it still.
    live: SharedView,
    batch: WriteBatch,
    /// Usage of each hash touched, as it will be after the batch.
    hashes: HashMap<i64, Usage>,
    /// Change in documents and bytes of each partition touched.
    partitions: HashMap<u64, (i64, i64)>,
}

impl<'a> PartitionedBatch<'a> {
    /// Starts a batch; the caller holds the collection's write lock.
    pub fn new(router: &'a Router, coll: &'a Collection, sharding: &'a Sharding) -> Self {
        PartitionedBatch {
            router,
            coll,
            sharding,
            map: sharding.map(),
            live: router.store.live(),
            batch: WriteBatch::default(),
            hashes: HashMap::new(),
            partitions: HashMap::new(),
        }
    }

    fn usage(&mut self, hash: i64) -> Result<&mut Usage> {
        if let std::collections::hash_map::Entry::Vacant(v) = self.hashes.entry(hash) {
            let stored = blocking::wait(self.live.usage(self.coll.id, hash))?;
            v.insert(stored.unwrap_or_default());
        }
        Ok(self.hashes.entry(hash).or_default())
    }

    fn partition_delta(&mut self, hash: i64, count: i64, bytes: i64) {
        let id = self.map.locate(hash).id;
        let entry = self.partitions.entry(id).or_default();
        entry.0 += count;
        entry.1 += bytes;
    }

    /// Fails when `extra` more bytes under `hash` would pass the cap on
    /// one logical partition; `value` is the key value, for the message.
    fn check_cap(&mut self, hash: i64, value: Option<&Bson>, extra: i64) -> Result<()> {
        let cap = self.router.options.logical_max_bytes;
        let now = self.usage(hash)?.bytes;
        if extra > 0 && now.saturating_add(extra as u64) > cap {
            let shown = value.map_or_else(|| "null".to_string(), |v| v.to_string());
            return Err(err!(
                OutOfDiskSpace,
                "Logical partition for shard key {{{}: {shown}}} of {} is full: it holds {now} bytes of documents and this write would pass its limit of {cap} bytes. Spread these documents over more shard-key values.",
                self.sharding.key.path,
                self.coll.ns
            ));
        }
        Ok(())
    }

    /// True when a document with this `_id` is stored where the document
    /// `bytes` would go (the whole collection, unless the store keeps
    /// `_id`s unique per server).
    pub fn id_exists(&self, id: &Bson, bytes: &[u8]) -> Result<bool> {
        let raw = RawDocument::from_bytes(bytes).map_err(raw_error)?;
        let hash = key_hash(self.sharding.key.raw_value(raw)?.as_ref());
        let found = self
            .live
            .id_taken(self.coll.id, &keystring::encode_id(id), hash);
        Ok(blocking::wait(found)?)
    }

    /// Adds a new document, in BSON form (its `_id` checked unique by
    /// the caller); returns the hash it is stored under.
    pub fn insert(&mut self, id: &Bson, bytes: Vec<u8>) -> Result<i64> {
        let raw = RawDocument::from_bytes(&bytes).map_err(raw_error)?;
        let value = self.sharding.key.raw_value(raw)?;
        let hash = key_hash(value.as_ref());
        self.check_cap(hash, value.as_ref(), bytes.len() as i64)?;
        self.place(hash, keystring::encode_id(id), bytes)?;
        if let Some(tracked) = self.router.activity() {
            if super::activity::sampled() {
                tracked.observe_key(self.coll.id, hash, || super::activity::show(value.as_ref()));
            }
        }
        Ok(hash)
    }

    /// Stores a document under `hash`: its record, its `_id` entry and
    /// the usage it adds.
    fn place(&mut self, hash: i64, id_key: Vec<u8>, bytes: Vec<u8>) -> Result<()> {
        self.usage(hash)?.add(bytes.len());
        self.partition_delta(hash, 1, bytes.len() as i64);
        self.batch.push(WriteOp::PutIdEntry {
            collection: self.coll.id,
            id: id_key.clone(),
            hash,
        });
        self.batch.push(WriteOp::PutRecord(
            RecordKey::new(self.coll.id, hash, id_key),
            bytes,
        ));
        Ok(())
    }

    /// Replaces a stored document, moving it to the partition of its new
    /// shard-key value when that changed: the delete and the insert are
    /// one atomic batch, so readers see it in exactly one place. Returns
    /// the hash it is stored under.
    pub fn replace(&mut self, old: &StoredRecord, bytes: Vec<u8>) -> Result<i64> {
        let raw = RawDocument::from_bytes(&bytes).map_err(raw_error)?;
        let value = self.sharding.key.raw_value(raw)?;
        let value = value.as_ref();
        let old_hash = old.key.hash;
        let hash = key_hash(value);
        let new_len = bytes.len() as i64;
        if hash == old_hash {
            self.check_cap(hash, value, new_len - old.len as i64)?;
            let usage = self.usage(hash)?;
            usage.bytes = (usage.bytes as i64 + new_len - old.len as i64).max(0) as u64;
            self.partition_delta(hash, 0, new_len - old.len as i64);
            self.batch.push(WriteOp::PutRecord(old.key.clone(), bytes));
            return Ok(hash);
        }
        self.check_cap(hash, value, new_len)?;
        self.usage(old_hash)?.remove(old.len);
        self.partition_delta(old_hash, -1, -(old.len as i64));
        self.batch.push(WriteOp::DeleteRecord(old.key.clone()));
        self.place(hash, old.key.id.clone(), bytes)?;
        Ok(hash)
    }

    /// Removes a stored document.
    pub fn delete(&mut self, old: &Record) -> Result<()> {
        let hash = old.key.hash;
        self.usage(hash)?.remove(old.len);
        self.partition_delta(hash, -1, -(old.len as i64));
        self.batch.push(WriteOp::DeleteIdEntry {
            collection: self.coll.id,
            id: old.key.id.clone(),
        });
        self.batch.push(WriteOp::DeleteRecord(old.key.clone()));
        Ok(())
    }

    /// Commits the batch and the usage it changed; returns the commit
    /// sequence (0 when there was nothing to write).
    pub fn commit(mut self) -> Result<u64> {
        if self.batch.is_empty() {
            return Ok(0);
        }
        let collection = self.coll.id;
        for (&hash, &usage) in &self.hashes {
            self.batch.push(if usage.count == 0 {
                WriteOp::DeleteUsage { collection, hash }
            } else {
                WriteOp::PutUsage {
                    collection,
                    hash,
                    usage,
                }
            });
        }
        let totals: Vec<(u64, Usage)> = self
            .partitions
            .iter()
            .map(|(&partition, &(count, bytes))| {
                let mut u = self.sharding.usage_of(partition);
                u.count = (u.count as i64 + count).max(0) as u64;
                u.bytes = (u.bytes as i64 + bytes).max(0) as u64;
                self.batch.push(WriteOp::PutPartitionTotal {
                    collection,
                    partition,
                    usage: u,
                    added: UsageChange { count, bytes },
                });
                (partition, u)
            })
            .collect();
        let seq = self.router.commit(std::mem::take(&mut self.batch))?;
        let split_bytes = self.router.options.split_bytes;
        let mut oversized = false;
        for (partition, u) in totals {
            self.sharding.set_usage_of(partition, u);
            oversized |= u.bytes > split_bytes;
        }
        if oversized {
            self.router.request_split(&self.coll.ns);
        }
        Ok(seq)
    }
}

/// How a collection lays out its records.
enum Layout<'a> {
    /// Every record under hash 0, keyed by `_id` alone.
    Unsharded(WriteBatch),
    Partitioned(PartitionedBatch<'a>),
}

/// Where a stored document is and how large: what replacing it needs.
pub(crate) struct StoredRecord<'a> {
    pub key: &'a RecordKey,
    pub len: usize,
}

/// The writes of one operation on a collection, in its layout (an
/// unsharded collection's records sit under hash 0 keyed by `_id` alone;
/// a sharded one's go through [`PartitionedBatch`]), with the entries of
/// its secondary indexes. Callers hold the collection's write lock from
/// `new` to `commit`.
pub(crate) struct CollectionBatch<'a> {
    router: &'a Router,
    coll: &'a Collection,
    /// The latest state; the write lock keeps it still.
    live: SharedView,
    layout: Layout<'a>,
    indexes: IndexWrites,
    /// Index entries, written with the records in one atomic batch.
    index_batch: WriteBatch,
    /// A capped collection's inserts held back and its bounds kept.
    capped: Option<CappedBatch>,
    /// Records each change in the change log, when the store keeps one.
    recorder: Option<ChangeRecorder>,
    /// The change-log entries, written with the changes they describe.
    logged: Vec<WriteOp>,
}

impl<'a> CollectionBatch<'a> {
    pub fn new(router: &'a Router, coll: &'a Collection) -> Self {
        let layout = match &coll.sharding {
            Some(sharding) => Layout::Partitioned(PartitionedBatch::new(router, coll, sharding)),
            None => Layout::Unsharded(WriteBatch::default()),
        };
        CollectionBatch {
            router,
            coll,
            live: router.store.live(),
            layout,
            indexes: IndexWrites::new(coll),
            index_batch: WriteBatch::default(),
            capped: CappedBatch::new(coll),
            recorder: ChangeRecorder::new(router, coll),
            logged: Vec::new(),
        }
    }

    /// Writes nothing to the change log: for copies of documents that
    /// stay the same (sharding a collection that holds data).
    pub fn unlogged(mut self) -> Self {
        self.recorder = None;
        self
    }

    /// True when a document with this `_id` is stored (see
    /// [`PartitionedBatch::id_exists`] for a sharded collection).
    pub fn id_exists(&self, id: &Bson, bytes: &[u8]) -> Result<bool> {
        match &self.layout {
            Layout::Unsharded(_) => {
                let found = self.live.record(&Router::id_key(self.coll, id));
                Ok(blocking::wait(found)?.is_some())
            }
            Layout::Partitioned(pb) => pb.id_exists(id, bytes),
        }
    }

    /// The hash a document is stored under.
    fn hash_of(&self, doc: &Document) -> Result<i64> {
        match &self.layout {
            Layout::Unsharded(_) => Ok(super::UNSHARDED_HASH),
            Layout::Partitioned(pb) => Ok(key_hash(pb.sharding.key.value(doc)?)),
        }
    }

    /// Adds a new document in BSON form (its `_id` checked unique).
    pub fn insert(&mut self, id: &Bson, bytes: Vec<u8>) -> Result<()> {
        if let Some(capped) = &self.capped {
            capped.check_fits(bytes.len())?;
        }
        if let Some(recorder) = &self.recorder {
            self.logged.push(recorder.insert(id, &bytes)?);
        }
        let index_ops = if self.indexes.is_empty() {
            Vec::new()
        } else {
            let doc = Document::from_reader(&bytes[..]).map_err(|e| {
                Error::new(ErrorCode::InvalidBSON, format!("invalid document: {e}"))
            })?;
            let hash = self.hash_of(&doc)?;
            let id_key = keystring::encode_id(id);
            self.indexes
                .changes(&self.live, &self.coll.ns, &id_key, None, Some((&doc, hash)))?
        };
        let len = bytes.len();
        let charged = charge::insert(len, 1 + index_ops.len());
        if let Some(capped) = &mut self.capped {
            // Written at commit, if it still fits then (capped
            // collections are never sharded).
            let mut held = WriteBatch::default();
            held.push(WriteOp::PutRecord(Router::id_key(self.coll, id), bytes));
            self.indexes.apply(index_ops, &mut held);
            capped.hold(keystring::encode_id(id), len, held.ops);
            self.charge(super::UNSHARDED_HASH, charged);
            return Ok(());
        }
        let hash = match &mut self.layout {
            Layout::Unsharded(batch) => {
                batch.push(WriteOp::PutRecord(Router::id_key(self.coll, id), bytes));
                super::UNSHARDED_HASH
            }
            Layout::Partitioned(pb) => pb.insert(id, bytes)?,
        };
        self.charge(hash, charged);
        self.indexes.apply(index_ops, &mut self.index_batch);
        Ok(())
    }

    /// Charges a write to the partition holding `hash`.
    fn charge(&self, hash: i64, micro: u64) {
        let partition = match &self.layout {
            Layout::Unsharded(_) => 0,
            Layout::Partitioned(pb) => pb.map.locate(hash).id,
        };
        charge::charge(self.coll.id, partition, micro);
    }

    /// Replaces a stored document with `doc`, encoded as `bytes`; made
    /// by a replacement document (`replacement`) or update operators.
    pub fn replace(
        &mut self,
        old: &Record,
        doc: &Document,
        bytes: Vec<u8>,
        replacement: bool,
    ) -> Result<()> {
        if let Some(recorder) = &self.recorder {
            self.logged
                .push(recorder.update(&old.doc, doc, replacement)?);
        }
        let index_ops = if self.indexes.is_empty() {
            Vec::new()
        } else {
            let hash = self.hash_of(doc)?;
            self.indexes.changes(
                &self.live,
                &self.coll.ns,
                &old.key.id,
                Some((&old.doc, old.key.hash)),
                Some((doc, hash)),
            )?
        };
        let stored = StoredRecord {
            key: &old.key,
            len: old.len,
        };
        self.put_replacement(&stored, bytes, index_ops.len())?;
        self.indexes.apply(index_ops, &mut self.index_batch);
        Ok(())
    }

    /// Whether an update that names only these paths leaves every
    /// secondary index's entries as they are (see [`IndexWrites::untouched_by`]).
    pub fn indexes_untouched_by(&self, paths: &[String]) -> bool {
        self.indexes.untouched_by(paths)
    }

    /// Replaces a stored document, `old_bytes`, with `bytes` (made by
    /// update operators), which no index reads differently: the caller
    /// checked [`Self::indexes_untouched_by`].
    pub fn replace_unindexed(
        &mut self,
        old: &StoredRecord,
        old_bytes: &[u8],
        bytes: Vec<u8>,
    ) -> Result<()> {
        if let Some(recorder) = &self.recorder {
            self.logged.push(recorder.update_stored(old_bytes, &bytes)?);
        }
        self.put_replacement(old, bytes, 0)
    }

    fn put_replacement(
        &mut self,
        old: &StoredRecord,
        bytes: Vec<u8>,
        index_ops: usize,
    ) -> Result<()> {
        let len = bytes.len();
        if let Some(capped) = &mut self.capped {
            capped.resize(&self.live, old.len, len)?;
        }
        let hash = match &mut self.layout {
            Layout::Unsharded(batch) => {
                batch.push(WriteOp::PutRecord(old.key.clone(), bytes));
                old.key.hash
            }
            Layout::Partitioned(pb) => pb.replace(old, bytes)?,
        };
        self.charge(hash, charge::replace(len, index_ops));
        Ok(())
    }

    /// Removes a stored document.
    pub fn delete(&mut self, old: &Record) -> Result<()> {
        if let Some(recorder) = &self.recorder {
            self.logged.push(recorder.delete(&old.doc)?);
        }
        if let Some(capped) = &mut self.capped {
            capped.forget(&self.live, &old.key.id, old.len, &mut self.index_batch)?;
        }
        self.remove(old)
    }

    /// Removes a stored document's record and secondary index entries.
    fn remove(&mut self, old: &Record) -> Result<()> {
        let index_ops = if self.indexes.is_empty() {
            Vec::new()
        } else {
            self.indexes.changes(
                &self.live,
                &self.coll.ns,
                &old.key.id,
                Some((&old.doc, old.key.hash)),
                None,
            )?
        };
        match &mut self.layout {
            Layout::Unsharded(batch) => batch.push(WriteOp::DeleteRecord(old.key.clone())),
            Layout::Partitioned(pb) => pb.delete(old)?,
        }
        self.charge(old.key.hash, charge::insert(old.len, 1 + index_ops.len()));
        self.indexes.apply(index_ops, &mut self.index_batch);
        Ok(())
    }

    /// Commits everything; returns the commit sequence (0 when there was
    /// nothing to write).
    pub fn commit(mut self) -> Result<u64> {
        let appended = match self.capped.take() {
            Some(capped) => self.finish_capped(capped)?,
            None => 0,
        };
        let mut index_ops = std::mem::take(&mut self.index_batch).ops;
        index_ops.append(&mut self.logged);
        if self.indexes.meta_changed {
            let mut meta = WriteBatch::default();
            self.router.catalog.put_meta(self.coll, &mut meta)?;
            index_ops.extend(meta.ops);
        }
        let seq = match self.layout {
            Layout::Unsharded(mut batch) => {
                batch.ops.extend(index_ops);
                if batch.is_empty() {
                    return Ok(0);
                }
                self.router.commit(batch)
            }
            Layout::Partitioned(mut pb) => {
                pb.batch.ops.extend(index_ops);
                pb.commit()
            }
        }?;
        if appended > 0 {
            self.coll.appended.notify_waiters();
        }
        Ok(seq)
    }

    /// Makes room in a capped collection for the inserts it held back,
    /// deleting its oldest documents, and adds those that fit to the
    /// batch. Returns how many it added.
    fn finish_capped(&mut self, mut capped: CappedBatch) -> Result<usize> {
        for old in capped.evict(&self.live, &mut self.index_batch)? {
            if self.indexes.is_empty() {
                // Nothing to read the document for.
                self.charge(old.key.hash, charge::insert(old.len, 1));
                if let Layout::Unsharded(batch) = &mut self.layout {
                    batch.push(WriteOp::DeleteRecord(old.key));
                }
                continue;
            }
            if let Some(value) = blocking::wait(self.live.record(&old.key))? {
                self.remove(&super::decode_record(old.key, &value)?)?;
            }
        }
        let Layout::Unsharded(records) = &mut self.layout else {
            return Err(Error::internal("a capped collection is sharded"));
        };
        capped.finish(&self.live, records, &mut self.index_batch)
    }
}

impl Router {
    /// The collection of `ns`, created if it does not exist yet. Returns
    /// the creation's commit sequence when it had to be created.
    pub fn collection_for_write(&self, ns: &Namespace) -> Result<(Arc<Collection>, u64)> {
        if let Some(c) = self.catalog.get(ns) {
            return Ok((c, 0));
        }
        let (c, seq) =
            self.catalog
                .create(ns, super::validation::CollectionOptions::none(), true)?;
        Ok((c, seq.unwrap_or(0)))
    }

    /// Runs `f` under the write lock of `ns`'s collection, retrying if the
    /// collection was dropped or renamed while we waited for the lock, and
    /// from the start when another gateway changed the catalog before `f`
    /// committed (its batch was refused whole).
    pub(crate) fn with_write_lock<T>(
        &self,
        ns: &Namespace,
        create: bool,
        mut f: impl FnMut(&Collection) -> Result<T>,
    ) -> Result<Option<(T, u64)>> {
        let mut stale = 0;
        loop {
            let resolved = if create {
                self.collection_for_write(ns).map(Some)
            } else {
                Ok(self.catalog.get(ns).map(|c| (c, 0)))
            };
            let done = match resolved {
                Ok(None) => return Ok(None),
                Ok(Some((coll, created_seq))) => {
                    let _changing = self.catalog.changing();
                    let _guard = self.catalog.lock_writes(&coll)?;
                    if coll.is_dropped() {
                        continue;
                    }
                    f(&coll).map(|t| (t, created_seq))
                }
                Err(e) => Err(e),
            };
            match done {
                Err(e) if e.code == ErrorCode::StaleConfig && stale < MAX_STALE_RETRIES => {
                    stale += 1;
                    // A catalog change still committing on some server
                    // refuses writes until it is done.
                    std::thread::sleep(std::time::Duration::from_millis(stale * 2));
                    self.catalog.refresh()?;
                }
                done => return done.map(Some),
            }
        }
    }

    /// Inserts documents; `ordered` stops at the first failure.
    pub async fn insert(
        &self,
        ns: &Namespace,
        docs: Vec<Vec<u8>>,
        ordered: bool,
        validation: DocumentValidation,
    ) -> Result<InsertOutcome> {
        let mut outcome = InsertOutcome::default();
        // Validate outside the lock.
        let mut prepared = Vec::with_capacity(docs.len());
        let strict = self.options.cosmos_strict;
        let now = super::strict::now_secs();
        for (i, bytes) in docs.into_iter().enumerate() {
            let prepared_one = prepare_insert(bytes).and_then(|(id, bytes)| match &strict {
                Some(rules) => Ok((id, rules.prepare_bytes(&bytes, now)?)),
                None => Ok((id, bytes)),
            });
            match prepared_one {
                Ok((id, bytes)) => prepared.push((i, id, bytes)),
                Err(e) => {
                    outcome.errors.push((i, e));
                    if ordered {
                        break;
                    }
                }
            }
        }
        let prepared = self
            .admit_inserts(ns, prepared, ordered, &mut outcome)
            .await?;
        let first_error = outcome.errors.first().map(|(i, _)| *i);
        let bytes: usize = prepared.iter().map(|(_, _, doc)| doc.len()).sum();
        let cheap = prepared.len() <= INLINE_INSERTS && bytes <= INLINE_INSERT_BYTES;
        let result = maybe_blocking(self.inline(cheap), || {
            self.with_write_lock(ns, true, |coll| {
                let options = coll.options();
                let validates = options.validates(validation);
                let mut writes = CollectionBatch::new(self, coll);
                let mut seen = HashSet::new();
                let mut inserted = 0;
                let mut errors = Vec::new();
                for (i, id, bytes) in &prepared {
                    if ordered && first_error.is_some_and(|f| *i > f) {
                        break;
                    }
                    let id_key = keystring::encode_id(id);
                    let measured = match &options.timeseries {
                        Some(ts) => RawDocument::from_bytes(bytes)
                            .map_err(raw_error)
                            .and_then(|raw| ts.check_measurement(raw)),
                        None => Ok(()),
                    };
                    let valid = measured.and_then(|()| match validates {
                        true => {
                            decode(bytes).and_then(|doc| options.check(ns, &doc, None, validation))
                        }
                        false => Ok(()),
                    });
                    let result = if let Err(e) = valid {
                        Err(e)
                    } else if seen.contains(&id_key) || writes.id_exists(id, bytes)? {
                        Err(duplicate_key_error(ns, id))
                    } else {
                        writes.insert(id, bytes.clone())
                    };
                    match result {
                        Ok(()) => {
                            seen.insert(id_key);
                            inserted += 1;
                        }
                        Err(e) => {
                            errors.push((*i, e));
                            if ordered {
                                break;
                            }
                        }
                    }
                }
                Ok((inserted, errors, writes.commit()?))
            })
        })?;
        let Some(((inserted, errors, seq), created_seq)) = result else {
            return Err(Error::internal("collection vanished during insert"));
        };
        outcome.inserted = inserted;
        outcome.errors.extend(errors);
        outcome.errors.sort_by_key(|(i, _)| *i);
        if ordered {
            outcome.errors.truncate(1);
        }
        self.durable(seq.max(created_seq)).await?;
        Ok(outcome)
    }

    /// The documents of an insert whose partitions may take them: each
    /// one bound for a throttled partition gets a 16500 write error
    /// (ordered: the first, and nothing after it is tried). Each admitted
    /// document counts against its partition's budget for the ones after
    /// it, at what inserting it will cost.
    async fn admit_inserts(
        &self,
        ns: &Namespace,
        prepared: Vec<(usize, Bson, Vec<u8>)>,
        ordered: bool,
        outcome: &mut InsertOutcome,
    ) -> Result<Vec<(usize, Bson, Vec<u8>)>> {
        let Some(coll) = self.catalog.get(ns) else {
            return Ok(prepared);
        };
        if self.provisioned_rus(&coll).is_none() {
            return Ok(prepared);
        }
        let meter = charge::current();
        let mut owed: HashMap<u64, u64> = HashMap::new();
        let mut admitted = Vec::with_capacity(prepared.len());
        let mut stop_at = outcome.errors.first().map(|(i, _)| *i);
        for (i, id, bytes) in prepared {
            if stop_at.is_some_and(|s| i > s) {
                break;
            }
            let partition = partition_of_raw(&coll, &bytes);
            let already = owed.get(&partition).copied().unwrap_or(0)
                + meter.as_ref().map_or(0, |m| m.of(coll.id, partition));
            let result = match self.admit_now(&coll, &[partition], |_| already) {
                Err(_) if self.retries_on_server() => {
                    // Wait for the partition, then go on from a clean slate.
                    owed.remove(&partition);
                    self.admit(&coll, &[partition]).await
                }
                other => other,
            };
            match result {
                Ok(()) => {
                    *owed.entry(partition).or_default() += charge::insert(bytes.len(), 1);
                    admitted.push((i, id, bytes));
                }
                Err(e) => {
                    outcome.errors.push((i, e));
                    if ordered {
                        stop_at = Some(i);
                    }
                }
            }
        }
        outcome.errors.sort_by_key(|(i, _)| *i);
        Ok(admitted)
    }

    /// Admits a statement that writes where `filter` matches.
    async fn admit_write(&self, ns: &Namespace, filter: &Filter) -> Result<()> {
        let Some(coll) = self.catalog.get(ns) else {
            return Ok(());
        };
        match self.throttled_targets(&coll, filter)? {
            Some(parts) => self.admit(&coll, &parts).await,
            None => Ok(()),
        }
    }

    /// Applies one update statement.
    pub async fn update(&self, ns: &Namespace, stmt: &UpdateStatement) -> Result<ModifyOutcome> {
        self.admit_write(ns, &stmt.filter).await?;
        let point = super::plan::pinned_ids(Some(&stmt.filter)).is_some();
        let result = maybe_blocking(self.inline(point), || {
            self.with_write_lock(ns, stmt.upsert, |coll| self.update_locked(ns, coll, stmt))
        })?;
        match result {
            None => Ok(ModifyOutcome::default()),
            Some(((outcome, seq), created_seq)) => {
                self.durable(seq.max(created_seq)).await?;
                Ok(outcome)
            }
        }
    }

    /// The records an update or delete works on: all matches for a multi
    /// operation, else the first (by `sort` when given).
    fn write_targets(
        &self,
        coll: &Collection,
        filter: &Filter,
        multi: bool,
        sort: Option<&SortSpec>,
    ) -> Result<Vec<(Record, MatchDetails)>> {
        let mut matching = self.matching_planned(coll, Some(filter))?;
        if multi {
            return matching.collect();
        }
        match sort {
            Some(sort) => {
                let mut best: Option<(Record, MatchDetails)> = None;
                for item in matching {
                    let item = item?;
                    let better = match &best {
                        None => true,
                        Some(b) => sort.compare(&item.0.doc, &b.0.doc).is_lt(),
                    };
                    if better {
                        best = Some(item);
                    }
                }
                Ok(best.into_iter().collect())
            }
            None => Ok(matching.next().transpose()?.into_iter().collect()),
        }
    }

    /// Whether a one-document update may be applied to the stored bytes
    /// ([`Update::apply_raw`]): nothing after it needs the documents
    /// (returning them, a validator, Cosmos DB's strict rules) and no
    /// index reads a field it names.
    fn may_update_stored(
        &self,
        coll: &Collection,
        stmt: &UpdateStatement,
        writes: &CollectionBatch,
    ) -> bool {
        !stmt.multi
            && !coll.options().validates(stmt.validation)
            && stmt.sort.is_none()
            && !stmt.return_documents
            && self.options.cosmos_strict.is_none()
            && stmt
                .update
                .modified_paths()
                .is_some_and(|paths| writes.indexes_untouched_by(&paths))
    }

    /// Updates the first match of `stmt`'s filter in its stored bytes when
    /// [`Update::apply_raw`] can; otherwise returns it, decoded, for the
    /// full path.
    fn update_stored(
        &self,
        coll: &Collection,
        stmt: &UpdateStatement,
        writes: &mut CollectionBatch,
        outcome: &mut ModifyOutcome,
    ) -> Result<Vec<(Record, MatchDetails)>> {
        let (key, bytes) = match self.first_match_undecoded(coll, &stmt.filter)? {
            None => return Ok(Vec::new()),
            Some(Matched::Decoded(rec, details)) => return Ok(vec![(rec, details)]),
            Some(Matched::Stored(key, bytes)) => (key, bytes),
        };
        let stored = RawDocument::from_bytes(&bytes).map_err(raw_error)?;
        // Update operators that compare ($addToSet, $pull, $min, $max,
        // $push with $sort) compare strings by the statement's collation.
        let collation = stmt.filter.collation();
        let new =
            match crate::query::collation::scoped(collation, || stmt.update.apply_raw(stored))? {
                RawApplied::Decode => {
                    return Ok(vec![(
                        super::decode_record(key, &bytes)?,
                        super::plain_match(),
                    )]);
                }
                RawApplied::Unchanged => None,
                RawApplied::Changed(new) => Some(new),
            };
        outcome.matched += 1;
        if let Some(new) = new {
            outcome.modified += 1;
            let old = StoredRecord {
                key: &key,
                len: bytes.len(),
            };
            writes.replace_unindexed(&old, &bytes, new)?;
        }
        Ok(Vec::new())
    }

    fn update_locked(
        &self,
        ns: &Namespace,
        coll: &Collection,
        stmt: &UpdateStatement,
    ) -> Result<(ModifyOutcome, u64)> {
        let mut outcome = ModifyOutcome::default();
        let mut writes = CollectionBatch::new(self, coll);
        let options = coll.options();
        let targets = if self.may_update_stored(coll, stmt, &writes) {
            self.update_stored(coll, stmt, &mut writes, &mut outcome)?
        } else {
            self.write_targets(coll, &stmt.filter, stmt.multi, stmt.sort.as_ref())?
        };
        let now = super::strict::now_secs();
        for (rec, details) in targets {
            outcome.matched += 1;
            let ctx = ApplyContext {
                details,
                inserting: false,
            };
            let mut new_doc = crate::query::collation::scoped(stmt.filter.collation(), || {
                stmt.update.apply(&rec.doc, &ctx)
            })?;
            let changed = !documents_identical(&new_doc, &rec.doc);
            if let (true, Some(rules)) = (changed, &self.options.cosmos_strict) {
                rules.prepare(&mut new_doc, now)?;
            }
            if changed {
                options.check(ns, &new_doc, Some(&rec.doc), stmt.validation)?;
            }
            if stmt.return_documents {
                outcome.before = Some(rec.doc.clone());
                outcome.after = Some(new_doc.clone());
            }
            if changed {
                let bytes = encode_document(&new_doc)?;
                outcome.modified += 1;
                writes.replace(&rec, &new_doc, bytes, stmt.update.is_replacement())?;
            }
        }
        if outcome.matched == 0 && stmt.upsert {
            let seed = stmt.filter.upsert_seed()?;
            let mut new_doc = with_id_first(stmt.update.upsert_document(seed)?);
            validate_for_insert(&new_doc)?;
            if let Some(rules) = &self.options.cosmos_strict {
                rules.prepare(&mut new_doc, now)?;
            }
            options.check(ns, &new_doc, None, stmt.validation)?;
            let bytes = encode_document(&new_doc)?;
            let id = new_doc.get("_id").cloned().unwrap_or(Bson::Null);
            if writes.id_exists(&id, &bytes)? {
                return Err(duplicate_key_error(ns, &id));
            }
            writes.insert(&id, bytes)?;
            outcome.upserted_id = Some(id);
            outcome.after = Some(new_doc);
        }
        Ok((outcome, writes.commit()?))
    }

    /// Deletes the first match (`multi == false`) or every match; returns
    /// the deleted documents' count and, for a single delete, the document.
    pub async fn delete(
        &self,
        ns: &Namespace,
        filter: &Filter,
        multi: bool,
        sort: Option<&SortSpec>,
    ) -> Result<(u64, Option<Document>)> {
        self.admit_write(ns, filter).await?;
        let point = super::plan::pinned_ids(Some(filter)).is_some();
        let result = maybe_blocking(self.inline(point), || {
            self.with_write_lock(ns, false, |coll| {
                let targets = self.write_targets(coll, filter, multi, sort)?;
                let n = targets.len() as u64;
                let mut writes = CollectionBatch::new(self, coll);
                let mut last = None;
                for (rec, _) in targets {
                    writes.delete(&rec)?;
                    last = Some(rec.doc);
                }
                Ok((n, if multi { None } else { last }, writes.commit()?))
            })
        })?;
        match result {
            None => Ok((0, None)),
            Some(((n, doc, seq), _)) => {
                self.durable(seq).await?;
                Ok((n, doc))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(d: Document) -> Result<Document> {
        let (_, bytes) = prepare_insert(d.to_vec().unwrap())?;
        Ok(Document::from_reader(&bytes[..]).unwrap())
    }

    #[test]
    fn id_first_documents_are_kept_as_they_came() {
        let d = doc! {"_id": 7, "a": {"b": [1, 2]}};
        let bytes = d.to_vec().unwrap();
        let (id, out) = prepare_insert(bytes.clone()).unwrap();
        assert_eq!(id, Bson::Int32(7));
        assert_eq!(out, bytes);
    }

    #[test]
    fn a_missing_id_is_generated_first_and_a_late_id_moved_first() {
        let d = prepared(doc! {"a": 1, "b": "x"}).unwrap();
        assert_eq!(d.keys().collect::<Vec<_>>(), ["_id", "a", "b"]);
        assert!(matches!(d.get("_id"), Some(Bson::ObjectId(_))));
        let d = prepared(doc! {"a": 1, "_id": "k"}).unwrap();
        assert_eq!(d, doc! {"_id": "k", "a": 1});
        assert_eq!(d.keys().next().map(String::as_str), Some("_id"));
    }

    #[test]
    fn bad_ids_are_refused_and_dollar_names_kept() {
        assert_eq!(
            prepared(doc! {"_id": 1, "$price": 1, "a.b": {"$inc": true}}).unwrap(),
            doc! {"_id": 1, "$price": 1, "a.b": {"$inc": true}}
        );
        assert_eq!(
            prepared(doc! {"_id": [1, 2]}).unwrap_err().code,
            ErrorCode::InvalidIdField
        );
    }

    /// `{a: {a: … {a: 1}}}`, `depth` documents deep counting itself.
    fn nested(depth: usize) -> Document {
        let mut d = doc! {"_id": 1, "a": 1};
        for _ in 1..depth {
            d = doc! {"_id": 1, "a": d};
        }
        d
    }

    fn nested_array(depth: usize) -> Document {
        let mut a = Bson::Array(vec![Bson::Int32(1)]);
        for _ in 2..depth {
            a = Bson::Array(vec![a]);
        }
        doc! {"_id": 1, "a": a}
    }

    #[test]
    fn stored_documents_nest_at_most_a_hundred_levels() {
        assert!(prepared(nested(MAX_STORED_DEPTH)).is_ok());
        assert!(prepared(nested_array(MAX_STORED_DEPTH)).is_ok());
        for deep in [
            nested(MAX_STORED_DEPTH + 1),
            nested_array(MAX_STORED_DEPTH + 1),
        ] {
            let e = prepared(deep).unwrap_err();
            assert_eq!(e.code, ErrorCode::Overflow);
        }
        // An empty document at the bottom adds no level.
        let mut d = doc! {"_id": 1, "a": {}};
        for _ in 1..MAX_STORED_DEPTH {
            d = doc! {"_id": 1, "a": d};
        }
        assert!(prepared(d).is_ok());
        // Updates' results are checked on encoding.
        assert!(encode_document(&nested(MAX_STORED_DEPTH)).is_ok());
        let e = encode_document(&nested(MAX_STORED_DEPTH + 1)).unwrap_err();
        assert_eq!(e.code, ErrorCode::Overflow);
    }
}
