//! Secondary indexes at the router: keeping entries in step with writes,
//! building and dropping indexes, and checking them (`validate`).
//!
//! Entries are written in the same engine batch as the document they
//! come from, so an index never disagrees with its collection, whatever
//! the moment of a crash. Unique checks run under the collection's write
//! lock, against the engine and the batch being built.

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::{Collection, Namespace, Router};
use crate::bail;
use crate::error::{Error, ErrorCode, Result};
use crate::index::plan::IndexPlan;
use crate::index::{entry_value, Index};
use crate::partition::PartitionMap;
use crate::query::interrupt;
use crate::storage::layout::ONE_PARTITION;
use crate::storage::{
    blocking, IndexEntryKey, IndexScan, RecordKey, RecordScan, SharedView, WriteBatch, WriteOp,
};

/// `keystring(key) | keystring(_id)`: the entry part of an index entry.
fn entry_part(key: &[u8], id_key: &[u8]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(key.len() + id_key.len());
    entry.extend_from_slice(key);
    entry.extend_from_slice(id_key);
    entry
}

/// The entries whose entry part starts with `prefix`.
fn prefix_bounds(prefix: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let end = crate::index::plan::prefix_successor(prefix);
    (
        Bound::Included(prefix.to_vec()),
        end.map_or(Bound::Unbounded, Bound::Excluded),
    )
}

/// Where a collection's index entries sit: one partition (unsharded) or
/// the partitions of its map.
#[derive(Clone)]
pub(crate) enum Partitions {
    One,
    Map(Arc<PartitionMap>),
}

impl Partitions {
    pub fn of(coll: &Collection) -> Partitions {
        match &coll.sharding {
            Some(s) => Partitions::Map(s.map()),
            None => Partitions::One,
        }
    }

    /// The start hash of the partition holding `hash`.
    pub fn start_of(&self, hash: i64) -> i64 {
        match self {
            Partitions::One => ONE_PARTITION,
            Partitions::Map(map) => map.locate(hash).min,
        }
    }

    /// The id of the partition holding `hash` (0 for the one partition
    /// of an unsharded collection).
    pub fn id_of(&self, hash: i64) -> u64 {
        match self {
            Partitions::One => 0,
            Partitions::Map(map) => map.locate(hash).id,
        }
    }

    /// Every partition's start hash, in order.
    pub fn starts(&self) -> Vec<i64> {
        match self {
            Partitions::One => vec![ONE_PARTITION],
            Partitions::Map(map) => map.partitions.iter().map(|p| p.min).collect(),
        }
    }
}

/// Shows a key value the way MongoDB's duplicate-key message does:
/// `{ a: 1, b: "x" }`.
pub fn show_key(doc: &Document) -> String {
    if doc.is_empty() {
        return "{}".to_string();
    }
    let fields: Vec<String> = doc
        .iter()
        .map(|(k, v)| match v {
            Bson::Document(d) => format!("{k}: {}", show_key(d)),
            other => format!("{k}: {other}"),
        })
        .collect();
    format!("{{ {} }}", fields.join(", "))
}

/// The duplicate-key error of a unique index, with `keyPattern` and
/// `keyValue` beside the message as MongoDB reports them.
pub fn duplicate_error(ns: &Namespace, index: &Index, values: &[Bson]) -> Error {
    let key_value = key_document(index, values);
    Error::new(
        ErrorCode::DuplicateKey,
        format!(
            "E11000 duplicate key error collection: {ns} index: {} dup key: {}",
            index.name,
            show_key(&key_value)
        ),
    )
    .with_extra(doc! {"keyPattern": index.key.clone(), "keyValue": key_value})
}

/// One change to an index entry: a value to put, or `None` to delete.
type EntryOp = (IndexEntryKey, Option<Vec<u8>>);

/// A pending entry: `(index, entry part, partition)`, ordered so the
/// entries of one key of one index are one range.
type PendingKey = (u32, Vec<u8>, i64);

/// The index side of one write batch.
pub(crate) struct IndexWrites {
    collection: u64,
    indexes: Arc<Vec<Arc<Index>>>,
    partitions: Partitions,
    /// Entries this batch puts (`true`) or deletes (`false`), so unique
    /// checks see the batch's own earlier writes.
    pending: BTreeMap<PendingKey, bool>,
    /// An index became multikey: the catalog entry must be rewritten.
    pub meta_changed: bool,
}

impl IndexWrites {
    pub fn new(coll: &Collection) -> IndexWrites {
        IndexWrites::of(coll, coll.indexes())
    }

    /// The writes to some indexes of `coll`.
    pub fn of(coll: &Collection, indexes: Arc<Vec<Arc<Index>>>) -> IndexWrites {
        IndexWrites {
            collection: coll.id,
            indexes,
            partitions: Partitions::of(coll),
            pending: BTreeMap::new(),
            meta_changed: false,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.indexes.is_empty()
    }

    /// Whether an operator update that names only `paths` certainly
    /// leaves every index's entries as they are: no index is partial (its
    /// filter may read any field), none is a text index (the wildcard and
    /// the language field reach any field) and none has a key path under
    /// the same top-level field as one of `paths`.
    pub fn untouched_by(&self, paths: &[String]) -> bool {
        let top = |path: &str| path.split('.').next().unwrap_or_default().to_owned();
        let named: HashSet<String> = paths.iter().map(|p| top(p)).collect();
        self.indexes.iter().all(|index| {
            index.partial.is_none()
                && index.text.is_none()
                && index.fields.iter().all(|f| !named.contains(&top(&f.path)))
        })
    }

    /// The entries (key → value) `doc` gives every index.
    fn entries(
        &self,
        doc: &Document,
        id_key: &[u8],
        hash: i64,
        skip: &[bool],
    ) -> Result<Vec<(usize, EntryKeys)>> {
        let partition = self.partitions.start_of(hash);
        let mut out = Vec::with_capacity(self.indexes.len());
        for (i, index) in self.indexes.iter().enumerate() {
            if skip.get(i).copied().unwrap_or(false) {
                continue;
            }
            let keys = index.keys_of(doc)?;
            let entries = keys
                .keys
                .into_iter()
                .map(|(key, values)| {
                    let entry = IndexEntryKey {
                        collection: self.collection,
                        index: index.number,
                        partition,
                        entry: entry_part(&key, id_key),
                    };
                    (entry, key, values)
                })
                .collect();
            out.push((
                i,
                EntryKeys {
                    entries,
                    multikey: keys.multikey,
                },
            ));
        }
        Ok(out)
    }

    /// Fails when a unique index already holds `key` for another document,
    /// in any partition.
    fn check_unique(
        &self,
        live: &SharedView,
        ns: &Namespace,
        index: &Index,
        key: &[u8],
        id_key: &[u8],
        values: &[Bson],
    ) -> Result<()> {
        let own = entry_part(key, id_key);
        let (from, to) = prefix_bounds(key);
        let pending_from = match &from {
            Bound::Included(k) => Bound::Included((index.number, k.clone(), i64::MIN)),
            _ => Bound::Unbounded,
        };
        let pending_to = match &to {
            Bound::Excluded(k) => Bound::Excluded((index.number, k.clone(), i64::MIN)),
            _ => Bound::Excluded((index.number.saturating_add(1), Vec::new(), i64::MIN)),
        };
        for ((_, entry, _), put) in self.pending.range((pending_from, pending_to)) {
            if *put && *entry != own {
                return Err(duplicate_error(ns, index, values));
            }
        }
        for partition in self.partitions.starts() {
            let scan = IndexScan {
                collection: self.collection,
                index: index.number,
                partition: Some(partition),
                from: from.clone(),
                to: to.clone(),
                reverse: false,
            };
            for item in blocking::iter(live.scan_index(scan)) {
                let (entry, _) = item?;
                let pending = (entry.index, entry.entry, entry.partition);
                if pending.1 != own && self.pending.get(&pending) != Some(&false) {
                    return Err(duplicate_error(ns, index, values));
                }
            }
        }
        Ok(())
    }

    /// The entry changes that replace `old` (under `old_hash`) by `new`
    /// (under `new_hash`); either may be absent (an insert, a delete).
    /// Checks unique indexes and changes nothing yet: [`IndexWrites::apply`]
    /// adds the result to the batch.
    pub fn changes(
        &mut self,
        live: &SharedView,
        ns: &Namespace,
        id_key: &[u8],
        old: Option<(&Document, i64)>,
        new: Option<(&Document, i64)>,
    ) -> Result<Vec<EntryOp>> {
        let mut ops = Vec::new();
        if self.indexes.is_empty() {
            return Ok(ops);
        }
        // Entries both documents give (under the same hash) stay as they are.
        let same_hash = matches!((old, new), (Some((_, a)), Some((_, b))) if a == b);
        // An update that left an index's fields alone leaves its entries
        // alone: they are not even computed.
        let unchanged: Vec<bool> = match (old, new) {
            (Some((before, _)), Some((after, _))) if same_hash => self
                .indexes
                .iter()
                .map(|index| same_keys(index, before, after))
                .collect(),
            _ => Vec::new(),
        };
        let old_entries = match old {
            Some((doc, hash)) => self.entries(doc, id_key, hash, &unchanged)?,
            None => Vec::new(),
        };
        let (new_entries, new_hash) = match new {
            Some((doc, hash)) => (self.entries(doc, id_key, hash, &unchanged)?, hash),
            None => (Vec::new(), 0),
        };
        let keys_of = |entries: &[(usize, EntryKeys)]| -> HashSet<IndexEntryKey> {
            entries
                .iter()
                .flat_map(|(_, k)| k.entries.iter().map(|e| e.0.clone()))
                .collect()
        };
        let (in_new, in_old) = if same_hash {
            (keys_of(&new_entries), keys_of(&old_entries))
        } else {
            (HashSet::new(), HashSet::new())
        };
        for (_, keys) in &old_entries {
            for (entry, ..) in &keys.entries {
                if !in_new.contains(entry) {
                    ops.push((entry.clone(), None));
                }
            }
        }
        for (i, keys) in &new_entries {
            let index = &self.indexes[*i];
            for (entry, key, values) in &keys.entries {
                if in_old.contains(entry) {
                    continue;
                }
                if index.unique {
                    self.check_unique(live, ns, index, key, id_key, values)?;
                }
                let value = entry_value(new_hash, key.len(), values);
                ops.push((entry.clone(), Some(value)));
            }
            if keys.multikey && index.set_multikey() {
                self.meta_changed = true;
            }
        }
        Ok(ops)
    }

    /// Adds checked changes to `batch`.
    pub fn apply(&mut self, ops: Vec<EntryOp>, batch: &mut WriteBatch) {
        // Deletes first: a put of the same key (a key kept under a new
        // hash) must win.
        let (puts, deletes): (Vec<EntryOp>, Vec<EntryOp>) =
            ops.into_iter().partition(|(_, v)| v.is_some());
        for (key, _) in deletes {
            self.pending
                .insert((key.index, key.entry.clone(), key.partition), false);
            batch.push(WriteOp::DeleteIndexEntry(key));
        }
        for (key, value) in puts {
            if let Some(value) = value {
                self.pending
                    .insert((key.index, key.entry.clone(), key.partition), true);
                batch.push(WriteOp::PutIndexEntry(key, value));
            }
        }
    }
}

/// Whether `before` and `after` certainly give `index` the same keys:
/// each key path's first field holds the same value in both (so every
/// value below it, through any array, is the same). A partial index's
/// filter may read any field, so its keys are always recomputed.
fn same_keys(index: &Index, before: &Document, after: &Document) -> bool {
    index.partial.is_none()
        && index.text.is_none()
        && index.fields.iter().all(|f| {
            let top = f.path.split('.').next().unwrap_or_default();
            before.get(top) == after.get(top)
        })
}

/// One entry: `(entry key, keystring of the key, key values)`.
type Entry = (IndexEntryKey, Vec<u8>, Vec<Bson>);

/// The entries one document gives one index.
struct EntryKeys {
    entries: Vec<Entry>,
    multikey: bool,
}

/// What `createIndexes` did.
#[derive(Debug, Default)]
pub struct CreatedIndexes {
    pub before: usize,
    pub after: usize,
    pub created_collection: bool,
    /// Commit to wait for.
    pub seq: u64,
}

/// Most engine operations in one batch of an index build or drop.
const BUILD_BATCH_OPS: usize = 10_000;

/// An index build's `currentOp` message, as MongoDB words it.
const BUILD_PROGRESS: &str = "Index Build: scanning collection";

/// A TTL pass's `currentOp` message; its progress counts collections.
const TTL_PROGRESS: &str = "TTL pass: collections checked";

/// Documents between two progress reports of a build.
const PROGRESS_EVERY: u64 = 256;

impl Router {
    /// Creates the indexes `specs` describe on `ns` (creating the
    /// collection if needed) and fills them from the documents already
    /// there. The build holds only this collection's write lock: writes to
    /// it wait, reads and other collections go on.
    pub(crate) fn create_indexes_now(
        &self,
        ns: &Namespace,
        specs: &[Document],
    ) -> Result<CreatedIndexes> {
        let mut wanted = Vec::with_capacity(specs.len());
        for spec in specs {
            let index = Index::parse(spec, 0)?;
            if index.is_id() {
                if index.name != crate::index::ID_INDEX_NAME {
                    bail!(
                        IndexOptionsConflict,
                        "Index already exists with a different name: {}",
                        crate::index::ID_INDEX_NAME
                    );
                }
                continue;
            }
            wanted.push(index);
        }
        let existed = self.catalog.get(ns).is_some();
        let result = self.with_write_lock(ns, true, |coll| {
            let current = coll.indexes();
            let before = current.len() + 1;
            let mut fresh: Vec<Index> = Vec::new();
            for index in &wanted {
                let mut exists = false;
                for other in current.iter().map(|i| i.as_ref()).chain(fresh.iter()) {
                    if other.name == index.name {
                        if !other.same_key(index) {
                            bail!(
                                IndexKeySpecsConflict,
                                "An existing index has the same name as the requested index. When index names are not specified, they are auto generated and can cause conflicts. Please refer to our documentation. Requested index: {}, existing index: {}",
                                show_key(&index.spec()),
                                show_key(&other.spec())
                            );
                        }
                        if !other.same_options(index) {
                            bail!(
                                IndexOptionsConflict,
                                "An equivalent index already exists with the same name but different options. Requested index: {}, existing index: {}",
                                show_key(&index.spec()),
                                show_key(&other.spec())
                            );
                        }
                        exists = true;
                    } else if other.same_key(index)
                        && other.partial.as_ref().map(|p| &p.0) == index.partial.as_ref().map(|p| &p.0)
                        && other.text == index.text
                    {
                        bail!(
                            IndexOptionsConflict,
                            "Index already exists with a different name: {}",
                            other.name
                        );
                    } else if other.text.is_some() && index.text.is_some() {
                        bail!(
                            CannotCreateIndex,
                            "only one text index per collection allowed, found existing text index \"{}\"",
                            other.name
                        );
                    }
                }
                if exists {
                    continue;
                }
                if let Some(sharding) = &coll.sharding {
                    let prefix = index.fields.first().map(|f| f.path.as_str());
                    if index.unique && prefix != Some(sharding.key.path.as_str()) {
                        bail!(
                            CannotCreateIndex,
                            "cannot create unique index over {} with shard key pattern {}",
                            show_key(&index.key),
                            show_key(&sharding.key.pattern())
                        );
                    }
                }
                if self.options.cosmos_strict.is_some() {
                    super::strict::check_new_index(index, self.is_empty(coll)?)?;
                }
                fresh.push(index.with_options(index.expire_after_secs, index.hidden));
            }
            if fresh.is_empty() {
                return Ok(CreatedIndexes {
                    before,
                    after: before,
                    ..CreatedIndexes::default()
                });
            }
            if self.options.cosmos_strict.is_some() {
                super::strict::check_index_counts(&current, &fresh)?;
            } else if before + fresh.len() > crate::index::MAX_INDEXES {
                bail!(
                    CannotCreateIndex,
                    "add index fails, too many indexes for {ns}: a collection may have at most {} indexes",
                    crate::index::MAX_INDEXES
                );
            }
            let mut built = Vec::with_capacity(fresh.len());
            for index in fresh {
                let mut index = index;
                index.number = coll.take_index_number();
                built.push(Arc::new(index));
            }
            let seq = self.build_indexes(coll, &built)?;
            let after = before + built.len();
            let mut all = current.to_vec();
            all.extend(built);
            let specs: Vec<Bson> = all[current.len()..]
                .iter()
                .map(|i| Bson::Document(i.spec()))
                .collect();
            coll.set_indexes(all);
            let mut batch = WriteBatch::default();
            self.catalog.put_meta(coll, &mut batch)?;
            super::catalog::log_collection_event(
                &*self.store,
                &mut batch,
                "createIndexes",
                coll,
                doc! {"operationDescription": {"indexes": specs}},
            )?;
            let seq = seq.max(self.commit(batch)?);
            Ok(CreatedIndexes {
                before,
                after,
                created_collection: false,
                seq,
            })
        })?;
        let Some((mut created, created_seq)) = result else {
            return Err(Error::internal("collection vanished during createIndexes"));
        };
        created.created_collection = !existed && created_seq > 0;
        created.seq = created.seq.max(created_seq);
        Ok(created)
    }

    /// True when `coll` holds no document; callers hold its write lock.
    fn is_empty(&self, coll: &Collection) -> Result<bool> {
        let scan = self.store.live().scan_records(RecordScan::all(coll.id));
        match blocking::iter(scan).next() {
            None => Ok(true),
            Some(item) => item.map(|_| false).map_err(Error::from),
        }
    }

    /// Writes the entries of `indexes` for every document of `coll`; on a
    /// failure (a duplicate in a unique index, parallel arrays) removes
    /// what it wrote and reports it.
    fn build_indexes(&self, coll: &Collection, indexes: &[Arc<Index>]) -> Result<u64> {
        let numbers: Vec<u32> = indexes.iter().map(|i| i.number).collect();
        // A crash during an earlier build may have left entries under a
        // number that was never stored; clear them.
        self.delete_index_entries(coll.id, &numbers)?;
        let mut writes = IndexWrites::of(coll, Arc::new(indexes.to_vec()));
        let mut batch = WriteBatch::default();
        let mut seq = 0;
        let live = self.store.live();
        // The documents to scan, for `currentOp`'s progress.
        let total = self.collection_stats_now(coll)?.count;
        let mut done = 0u64;
        let mut build = || -> Result<u64> {
            interrupt::report_progress(BUILD_PROGRESS, done, total);
            for item in blocking::iter(live.scan_records(RecordScan::all(coll.id))) {
                interrupt::check()?;
                done += 1;
                if done.is_multiple_of(PROGRESS_EVERY) {
                    interrupt::report_progress(BUILD_PROGRESS, done, total.max(done));
                }
                let (key, value) = item?;
                let rec = super::decode_record(key, &value)?;
                let ops = writes.changes(
                    &live,
                    &coll.ns,
                    &rec.key.id,
                    None,
                    Some((&rec.doc, rec.key.hash)),
                )?;
                writes.apply(ops, &mut batch);
                if batch.ops.len() >= BUILD_BATCH_OPS {
                    seq = self.commit(std::mem::take(&mut batch))?;
                    writes.pending.clear();
                }
            }
            if !batch.is_empty() {
                seq = self.commit(std::mem::take(&mut batch))?;
            }
            interrupt::report_progress(BUILD_PROGRESS, done, done);
            Ok(seq)
        };
        match build() {
            Ok(seq) => Ok(seq),
            Err(e) => {
                self.delete_index_entries(coll.id, &numbers)?;
                Err(
                    Error::new(e.code, format!("Index build failed: {}", e.message))
                        .with_extra(e.extra.unwrap_or_default()),
                )
            }
        }
    }

    /// Deletes every entry stored under these index numbers.
    pub(crate) fn delete_index_entries(&self, collection: u64, numbers: &[u32]) -> Result<u64> {
        let mut seq = 0;
        for &number in numbers {
            seq = seq.max(blocking::wait(self.store.clear_index(collection, number))?);
        }
        Ok(seq)
    }

    /// Drops the indexes `select` picks (`None`: every secondary index).
    /// Returns how many indexes there were, `_id` included, and the
    /// commit to wait for.
    pub(crate) fn drop_indexes_now(
        &self,
        ns: &Namespace,
        select: impl Fn(&[Arc<Index>]) -> Result<Vec<u32>>,
    ) -> Result<Option<(usize, u64)>> {
        let result = self.with_write_lock(ns, false, |coll| {
            let current = coll.indexes();
            let numbers = select(&current)?;
            let kept: Vec<Arc<Index>> = current
                .iter()
                .filter(|i| !numbers.contains(&i.number))
                .cloned()
                .collect();
            let specs: Vec<Bson> = current
                .iter()
                .filter(|i| numbers.contains(&i.number))
                .map(|i| Bson::Document(i.spec()))
                .collect();
            coll.set_indexes(kept);
            let mut batch = WriteBatch::default();
            self.catalog.put_meta(coll, &mut batch)?;
            super::catalog::log_collection_event(
                &*self.store,
                &mut batch,
                "dropIndexes",
                coll,
                doc! {"operationDescription": {"indexes": specs}},
            )?;
            let seq = self.commit(batch)?;
            let seq = seq.max(self.delete_index_entries(coll.id, &numbers)?);
            Ok((current.len() + 1, seq))
        })?;
        Ok(result.map(|(r, _)| r))
    }

    /// Changes options of one index (`collMod`): returns the index before
    /// and after, and the commit to wait for.
    pub(crate) fn modify_index_now(
        &self,
        ns: &Namespace,
        pick: impl Fn(&Index) -> bool,
        change: impl Fn(&Index) -> Result<Index>,
    ) -> Result<Option<ModifiedIndex>> {
        let result = self.with_write_lock(ns, false, |coll| {
            let current = coll.indexes();
            let Some(pos) = current.iter().position(|i| pick(i)) else {
                return Ok(None);
            };
            let before = current[pos].clone();
            let after = Arc::new(change(&before)?);
            let mut all = current.to_vec();
            all[pos] = after.clone();
            coll.set_indexes(all);
            let mut batch = WriteBatch::default();
            self.catalog.put_meta(coll, &mut batch)?;
            Ok(Some((before, after, self.commit(batch)?)))
        })?;
        Ok(result.and_then(|(r, _)| r))
    }
}

/// An index before and after `collMod`, and the commit to wait for.
pub type ModifiedIndex = (Arc<Index>, Arc<Index>, u64);

/// What `validate` found.
#[derive(Debug, Default)]
pub struct Validation {
    pub records: u64,
    pub corrupt_records: Vec<Vec<u8>>,
    /// Entries per index name, `_id_` included.
    pub keys_per_index: Vec<(String, u64)>,
    /// Documents missing an entry they should have: `(index, _id, key)`.
    pub missing: Vec<(String, Bson, Document)>,
    /// Entries without the document they name: `(index, key)`.
    pub extra: Vec<(String, Document)>,
}

impl Validation {
    pub fn valid(&self) -> bool {
        self.corrupt_records.is_empty() && self.missing.is_empty() && self.extra.is_empty()
    }
}

/// Reports at most this many problems of each kind.
const MAX_REPORTED: usize = 100;

impl Router {
    /// Checks that every index agrees with the collection: each document
    /// has exactly the entries its keys call for, and each entry names a
    /// document that gives it. Reads one snapshot.
    pub(crate) fn validate_now(&self, coll: &Collection) -> Result<Validation> {
        let (view, partitions) = self.view_of(coll);
        let indexes = coll.indexes();
        let mut report = Validation::default();
        let mut expected = vec![0u64; indexes.len()];
        let mut id_entries = 0u64;
        let entry_value_of = |key: &IndexEntryKey| -> Result<Option<Vec<u8>>> {
            let scan = IndexScan {
                collection: key.collection,
                index: key.index,
                partition: Some(key.partition),
                from: Bound::Included(key.entry.clone()),
                to: Bound::Included(key.entry.clone()),
                reverse: false,
            };
            match blocking::iter(view.scan_index(scan)).next() {
                Some(item) => Ok(Some(item?.1)),
                None => Ok(None),
            }
        };
        let record = |hash: i64, id_key: &[u8]| -> Result<Option<Vec<u8>>> {
            let key = RecordKey::new(coll.id, hash, id_key.to_vec());
            Ok(blocking::wait(view.record(&key))?)
        };
        for item in blocking::iter(view.scan_records(RecordScan::all(coll.id))) {
            let (key, value) = item?;
            report.records += 1;
            let Ok(rec) = super::decode_record(key.clone(), &value) else {
                if report.corrupt_records.len() < MAX_REPORTED {
                    report.corrupt_records.push(key.encode());
                }
                continue;
            };
            let hash = rec.key.hash;
            let id_key = &rec.key.id;
            let id = rec.doc.get("_id").cloned().unwrap_or(Bson::Null);
            if coll.sharding.is_some() {
                let found = blocking::wait(view.id_entry(coll.id, id_key))?;
                if found != Some(hash) {
                    report.note_missing(crate::index::ID_INDEX_NAME, &id, doc! {"_id": id.clone()});
                }
            }
            for (i, index) in indexes.iter().enumerate() {
                let Ok(doc_keys) = index.keys_of(&rec.doc) else {
                    report.note_missing(&index.name, &id, Document::new());
                    continue;
                };
                for (key, values) in doc_keys.keys {
                    expected[i] += 1;
                    let entry = IndexEntryKey {
                        collection: coll.id,
                        index: index.number,
                        partition: partitions.start_of(hash),
                        entry: entry_part(&key, id_key),
                    };
                    match entry_value_of(&entry)? {
                        Some(v) if crate::index::entry_hash(&v) == Some(hash) => {}
                        _ => report.note_missing(&index.name, &id, key_document(index, &values)),
                    }
                }
            }
        }
        if coll.sharding.is_some() {
            for item in blocking::iter(view.scan_id_entries(
                coll.id,
                Bound::Unbounded,
                Bound::Unbounded,
                false,
            )) {
                let (id_key, hash) = item?;
                id_entries += 1;
                if record(hash, &id_key)?.is_none() {
                    report.note_extra(crate::index::ID_INDEX_NAME, Document::new());
                }
            }
        } else {
            id_entries = report.records;
        }
        report
            .keys_per_index
            .push((crate::index::ID_INDEX_NAME.to_string(), id_entries));
        for (i, index) in indexes.iter().enumerate() {
            let mut stored = 0u64;
            let scan = IndexScan::all(coll.id, index.number, None);
            for item in blocking::iter(view.scan_index(scan)) {
                let (entry, value) = item?;
                stored += 1;
                let values = crate::index::entry_values(&value).unwrap_or_default();
                let key = index.encode(&values);
                let key_len = crate::index::entry_key_len(&value).unwrap_or(usize::MAX);
                let id_key = entry.id(key.len());
                let names_document = key_len == key.len()
                    && entry.key(key.len()) == Some(&key[..])
                    && match crate::index::entry_hash(&value) {
                        Some(h) if partitions.start_of(h) == entry.partition => {
                            match record(h, id_key)? {
                                Some(bytes) => super::decode_record(RecordKey::default(), &bytes)
                                    .ok()
                                    .and_then(|rec| index.keys_of(&rec.doc).ok())
                                    .is_some_and(|k| k.keys.iter().any(|(k, _)| *k == key)),
                                None => false,
                            }
                        }
                        _ => false,
                    };
                if !names_document {
                    report.note_extra(&index.name, key_document(index, &values));
                }
            }
            if stored != expected[i] && report.missing.is_empty() && report.extra.is_empty() {
                report.note_extra(&index.name, Document::new());
            }
            report.keys_per_index.push((index.name.clone(), stored));
        }
        Ok(report)
    }
}

impl Validation {
    fn note_missing(&mut self, index: &str, id: &Bson, key: Document) {
        if self.missing.len() < MAX_REPORTED {
            self.missing.push((index.to_string(), id.clone(), key));
        }
    }

    fn note_extra(&mut self, index: &str, key: Document) {
        if self.extra.len() < MAX_REPORTED {
            self.extra.push((index.to_string(), key));
        }
    }
}

/// `{field: value, ...}` of one key of `index`.
pub fn key_document(index: &Index, values: &[Bson]) -> Document {
    index
        .fields
        .iter()
        .zip(values)
        .map(|(f, v)| (f.path.clone(), v.clone()))
        .collect()
}

/// What a read examined, for `explain`: index entries and documents.
#[derive(Debug, Default)]
pub struct Examined {
    pub keys: std::sync::atomic::AtomicU64,
    pub docs: std::sync::atomic::AtomicU64,
}

impl Examined {
    pub fn key(&self) {
        self.keys.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn doc(&self) {
        self.docs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn keys(&self) -> u64 {
        self.keys.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn docs(&self) -> u64 {
        self.docs.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Which hashes a read keeps: one partition's range, and the pinned
/// shard-key hashes when the filter names them.
#[derive(Debug, Clone, Default)]
pub struct HashScope {
    pub range: Option<(i64, i64)>,
    pub pinned: Option<Vec<i64>>,
}

impl HashScope {
    pub(super) fn admits(&self, hash: i64) -> bool {
        self.range
            .is_none_or(|(min, max)| min <= hash && hash <= max)
            && self
                .pinned
                .as_ref()
                .is_none_or(|p| p.binary_search(&hash).is_ok())
    }
}

/// The records an index plan reads from the partitions starting at
/// `partitions` (one after another), in index order within each
/// (reversed for a backward plan), limited to `scope`. A covered read
/// builds each document from the entry's key values and never reads the
/// record.
pub(crate) fn index_records(
    view: SharedView,
    collection: u64,
    partitions: Vec<i64>,
    plan: &IndexPlan,
    scope: HashScope,
    covered: bool,
    examined: Option<Arc<Examined>>,
) -> super::CandidateIter {
    let mut ranges: Vec<crate::index::plan::KeyRange> = plan.ranges.clone();
    let reverse = plan.reverse;
    if reverse {
        ranges.reverse();
    }
    let number = plan.index.number;
    let scan_view = view.clone();
    let entries = partitions.into_iter().flat_map(move |partition| {
        let view = scan_view.clone();
        ranges.clone().into_iter().flat_map(move |(from, to)| {
            let scan = IndexScan {
                collection,
                index: number,
                partition: Some(partition),
                from,
                to,
                reverse,
            };
            blocking::iter(view.scan_index(scan))
        })
    });
    let index = plan.index.clone();
    let mut seen: Option<std::collections::HashSet<Vec<u8>>> =
        plan.dedupe.then(std::collections::HashSet::new);
    Box::new(entries.filter_map(move |item| {
        let step = || -> Result<Option<super::Candidate>> {
            crate::query::interrupt::check()?;
            let (entry, value) = item?;
            super::charge::count(|w| w.keys_examined += 1);
            if let Some(e) = &examined {
                e.key();
            }
            let hash = crate::index::entry_hash(&value)
                .ok_or_else(|| Error::internal("corrupt index entry"))?;
            if !scope.admits(hash) {
                return Ok(None);
            }
            let key_len = crate::index::entry_key_len(&value)
                .ok_or_else(|| Error::internal("corrupt index entry"))?;
            let id_key = entry.id(key_len);
            if let Some(seen) = &mut seen {
                if !seen.insert(id_key.to_vec()) {
                    return Ok(None);
                }
            }
            let record_key = RecordKey::new(collection, hash, id_key.to_vec());
            if covered {
                let values = crate::index::entry_values(&value)?;
                let doc = crate::index::plan::covered_document(&index, &values);
                return Ok(Some(super::Candidate::Decoded(super::Record {
                    key: record_key,
                    doc,
                    len: 0,
                })));
            }
            super::charge::count(|w| w.docs_examined += 1);
            if let Some(e) = &examined {
                e.doc();
            }
            match blocking::wait(view.record(&record_key))? {
                Some(bytes) => Ok(Some(super::Candidate::Raw(record_key, bytes))),
                None => Ok(None),
            }
        };
        step().transpose()
    }))
}

impl Router {
    /// Deletes expired documents every `interval`, for as long as the
    /// router lives: those whose TTL-indexed field holds a date (or an
    /// array with a date) more than `expireAfterSeconds` in the past.
    pub async fn run_ttl_monitor(self: Arc<Self>, interval: std::time::Duration) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let (_listed, operation) = self.background_operation(
                "TTLMonitor",
                "admin.$cmd".to_string(),
                doc! {"ttlMonitorPass": 1},
            );
            match interrupt::scoped(&operation, self.expire_ttl()).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(deleted = n, "TTL monitor pass"),
                Err(e) => tracing::warn!("TTL monitor pass failed: {e}"),
            }
        }
    }

    /// One pass of the TTL monitor; returns how many documents it deleted.
    pub async fn expire_ttl(&self) -> Result<u64> {
        let now = bson::DateTime::now().timestamp_millis();
        let mut deleted = 0;
        let collections = self.catalog.list();
        let total = collections.len() as u64;
        for (done, coll) in collections.into_iter().enumerate() {
            interrupt::report_progress(TTL_PROGRESS, done as u64, total);
            // A time-series or clustered collection's own expiry.
            let expiry = coll.options().expiry().map(|(f, s)| (f.to_string(), s));
            if let Some((field, secs)) = expiry {
                let cutoff =
                    bson::DateTime::from_millis(now.saturating_sub(secs.saturating_mul(1000)));
                let filter = crate::query::filter::Filter::parse(&doc! {field: {"$lt": cutoff}})?;
                let (n, _) = self.delete(&coll.ns, &filter, true, None).await?;
                deleted += n;
            }
            for index in coll.indexes().iter() {
                let (Some(secs), [field]) = (index.expire_after_secs, index.fields.as_slice())
                else {
                    continue;
                };
                let cutoff =
                    bson::DateTime::from_millis(now.saturating_sub(secs.saturating_mul(1000)));
                let mut filter = doc! {field.path.clone(): {"$lt": cutoff}};
                if self.options.cosmos_strict.is_some() && field.path == super::strict::TS_FIELD {
                    // `_ts` holds the seconds of a document's last write.
                    let cutoff = now.div_euclid(1000).saturating_sub(secs);
                    filter = doc! {field.path.clone(): {"$lt": cutoff}};
                }
                let filter = crate::query::filter::Filter::parse(&filter)?;
                let ns = coll.ns.clone();
                let (n, _) = self.delete(&ns, &filter, true, None).await?;
                deleted += n;
            }
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn only_a_change_under_an_index_path_recomputes_its_keys() {
        let index = |spec: Document| Index::parse(&spec, 1).unwrap();
        let ab = index(doc! {"key": {"a.b": 1, "c": -1}, "name": "ab_c"});
        let before = doc! {"_id": 1, "a": [{"b": 1}, {"b": 2}], "c": 3, "x": "old"};
        let mut after = before.clone();
        after.insert("x", "new");
        assert!(same_keys(&ab, &before, &after));
        after.insert("a", vec![Bson::Document(doc! {"b": 1})]);
        assert!(!same_keys(&ab, &before, &after));
        let mut after = before.clone();
        after.remove("c");
        assert!(!same_keys(&ab, &before, &after));
        // A partial index's filter may read any field.
        let partial = index(doc! {
            "key": {"c": 1}, "name": "c_1", "partialFilterExpression": {"x": "old"},
        });
        let mut after = before.clone();
        after.insert("x", "new");
        assert!(!same_keys(&partial, &before, &after));
    }

    #[test]
    fn prefix_bounds_hold_exactly_their_prefix() {
        let (from, to) = prefix_bounds(&[1, 2, 0xff]);
        assert_eq!(from, Bound::Included(vec![1, 2, 0xff]));
        assert_eq!(to, Bound::Excluded(vec![1, 3]));
        assert_eq!(prefix_bounds(&[0xff, 0xff]).1, Bound::Unbounded);
    }

    #[test]
    fn keys_show_as_mongodb_prints_them() {
        assert_eq!(show_key(&doc! {"a": 1, "b": "x"}), "{ a: 1, b: \"x\" }");
        assert_eq!(show_key(&doc! {"key": {"a": -1}}), "{ key: { a: -1 } }");
        assert_eq!(show_key(&doc! {}), "{}");
    }

    #[test]
    fn duplicate_errors_carry_pattern_and_value() {
        let index = Index::parse(&doc! {"key": {"a": 1, "b": -1}, "name": "ab"}, 1).unwrap();
        let ns = Namespace::new("db", "c").unwrap();
        let e = duplicate_error(&ns, &index, &[Bson::Int32(1), Bson::String("x".into())]);
        assert_eq!(e.code, ErrorCode::DuplicateKey);
        assert_eq!(
            e.message,
            "E11000 duplicate key error collection: db.c index: ab dup key: { a: 1, b: \"x\" }"
        );
        assert_eq!(
            e.extra,
            Some(doc! {"keyPattern": {"a": 1, "b": -1}, "keyValue": {"a": 1, "b": "x"}})
        );
    }

    #[test]
    fn hash_scope_keeps_partition_and_pinned_hashes() {
        let scope = HashScope {
            range: Some((-10, 10)),
            pinned: Some(vec![-3, 4]),
        };
        assert!(scope.admits(4));
        assert!(!scope.admits(5));
        assert!(!HashScope {
            range: Some((0, 1)),
            pinned: None
        }
        .admits(2));
        assert!(HashScope::default().admits(i64::MIN));
    }
}
