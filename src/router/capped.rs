//! Capped collections: a collection bounded in bytes (`size`) and
//! optionally in documents (`max`), whose documents come back in the
//! order they were inserted and whose oldest documents make room for new
//! ones, as in MongoDB.
//!
//! Records stay keyed by `_id` like every other collection's; the
//! insertion order is kept beside them in three internal index spaces of
//! the collection (numbers no client index ever gets), written in the same
//! atomic batch as the records:
//!
//! - the natural order: `seq | keystring(_id)` for each document, `seq`
//!   counting inserts from 1, read in order by a collection scan and by a
//!   tailable cursor;
//! - `keystring(_id) → seq`, so a delete finds its natural entry;
//! - one state entry: the next `seq`, the documents and the bytes held,
//!   so an insert knows without a scan what must go.
//!
//! Inserts of a batch are held back until it commits ([`CappedBatch`]):
//! the newest documents that fit stay, the oldest stored ones are deleted
//! (with their index entries), and documents of the batch itself that an
//! even newer one pushes out are never written at all, which leaves the
//! same collection as inserting them one by one. Writers hold the
//! collection's write lock, so the state they read stays theirs until
//! they commit.

use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document};

use super::catalog::Collection;
use super::kinds::Capped;
use super::{Namespace, Router, UNSHARDED_HASH};
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::Filter;
use crate::query::projection::Projection;
use crate::storage::layout::{IndexEntryKey, ONE_PARTITION};
use crate::storage::{
    blocking, IndexScan, RecordKey, SharedStore, SharedView, StorageError, StorageResult,
    WriteBatch, WriteOp,
};

/// The internal index holding the natural order (`seq | keystring(_id)`).
const NATURAL: u32 = u32::MAX - 1;
/// The internal index mapping `keystring(_id)` to its `seq`.
const SEQ_OF_ID: u32 = u32::MAX - 2;
/// The internal index holding the one state entry.
const STATE: u32 = u32::MAX - 3;

fn entry_key(collection: u64, index: u32, entry: Vec<u8>) -> IndexEntryKey {
    IndexEntryKey {
        collection,
        index,
        partition: ONE_PARTITION,
        entry,
    }
}

fn natural_entry(seq: u64, id_key: &[u8]) -> Vec<u8> {
    let mut entry = seq.to_be_bytes().to_vec();
    entry.extend_from_slice(id_key);
    entry
}

/// A natural-order entry: a document's `seq`, `keystring(_id)` and
/// stored length.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    seq: u64,
    id_key: Vec<u8>,
    len: u64,
}

impl Entry {
    fn decode(entry: &[u8], value: &[u8]) -> StorageResult<Entry> {
        let truncated =
            || StorageError::Corrupt("a capped collection's order entry is truncated".into());
        let (seq, id_key) = entry.split_first_chunk::<8>().ok_or_else(truncated)?;
        let len = value
            .try_into()
            .map(u64::from_be_bytes)
            .map_err(|_| truncated())?;
        Ok(Entry {
            seq: u64::from_be_bytes(*seq),
            id_key: id_key.to_vec(),
            len,
        })
    }
}

/// What a capped collection holds, kept in its state entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct State {
    /// The `seq` the next inserted document gets.
    next: u64,
    count: u64,
    bytes: u64,
    /// No document older than this `seq` is left: reads of the natural
    /// order start here, past the deleted entries an LSM store would
    /// otherwise step over on every read.
    first: u64,
}

impl State {
    fn encode(&self) -> Vec<u8> {
        [self.next, self.count, self.bytes, self.first]
            .iter()
            .flat_map(|n| n.to_be_bytes())
            .collect()
    }

    fn decode(bytes: &[u8]) -> Result<State> {
        let field = |i: usize| -> Result<u64> {
            bytes
                .get(i * 8..i * 8 + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes)
                .ok_or_else(|| Error::internal("a capped collection's state entry is truncated"))
        };
        Ok(State {
            next: field(0)?,
            count: field(1)?,
            bytes: field(2)?,
            first: field(3)?,
        })
    }

    /// The state stored for `collection` (a new collection's when none).
    fn read(view: &SharedView, collection: u64) -> Result<State> {
        let scan = IndexScan {
            from: Bound::Included(Vec::new()),
            to: Bound::Included(Vec::new()),
            ..IndexScan::all(collection, STATE, Some(ONE_PARTITION))
        };
        match blocking::iter(view.scan_index(scan)).next() {
            Some(item) => State::decode(&item?.1),
            None => Ok(State {
                next: 1,
                first: 1,
                ..State::default()
            }),
        }
    }
}

/// A stored document an insert pushes out.
pub(crate) struct Evicted {
    pub key: RecordKey,
    pub len: usize,
}

/// A document an insert holds back until its batch commits.
struct Pending {
    id_key: Vec<u8>,
    len: u64,
    /// The record and its secondary index entries.
    ops: Vec<WriteOp>,
}

/// A capped collection's part of one write batch: the state it read, the
/// documents held back, and what removing documents changed.
pub(crate) struct CappedBatch {
    limits: Capped,
    collection: u64,
    state: Option<State>,
    pending: Vec<Pending>,
    /// `_id`s this batch deleted, which the eviction must not delete again.
    deleted: Vec<Vec<u8>>,
}

impl CappedBatch {
    pub fn new(coll: &Collection) -> Option<CappedBatch> {
        coll.options().capped.map(|limits| CappedBatch {
            limits,
            collection: coll.id,
            state: None,
            pending: Vec::new(),
            deleted: Vec::new(),
        })
    }

    fn state(&mut self, live: &SharedView) -> Result<&mut State> {
        if self.state.is_none() {
            self.state = Some(State::read(live, self.collection)?);
        }
        Ok(self.state.get_or_insert_with(State::default))
    }

    /// Fails for a document larger than the whole collection may hold:
    /// making room for it would delete everything.
    pub fn check_fits(&self, len: usize) -> Result<()> {
        if len as u64 > self.limits.size {
            return Err(Error::bad_value("object to insert exceeds cappedMaxSize"));
        }
        Ok(())
    }

    /// Holds back an insert: `ops` write its record and index entries.
    pub fn hold(&mut self, id_key: Vec<u8>, len: usize, ops: Vec<WriteOp>) {
        self.pending.push(Pending {
            id_key,
            len: len as u64,
            ops,
        });
    }

    /// Accounts for a stored document's removal: its order entries go.
    pub fn forget(
        &mut self,
        live: &SharedView,
        id_key: &[u8],
        len: usize,
        batch: &mut WriteBatch,
    ) -> Result<()> {
        let seq = seq_of(live, self.collection, id_key)?;
        self.forget_at(live, seq, id_key, len as u64, batch)
    }

    /// [`CappedBatch::forget`] of the document at `seq`, when known.
    fn forget_at(
        &mut self,
        live: &SharedView,
        seq: Option<u64>,
        id_key: &[u8],
        len: u64,
        batch: &mut WriteBatch,
    ) -> Result<()> {
        let collection = self.collection;
        let state = self.state(live)?;
        state.count = state.count.saturating_sub(1);
        state.bytes = state.bytes.saturating_sub(len);
        if let Some(seq) = seq {
            if seq == state.first {
                state.first = seq + 1;
            }
            batch.push(WriteOp::DeleteIndexEntry(entry_key(
                collection,
                NATURAL,
                natural_entry(seq, id_key),
            )));
        }
        batch.push(WriteOp::DeleteIndexEntry(entry_key(
            collection,
            SEQ_OF_ID,
            id_key.to_vec(),
        )));
        self.deleted.push(id_key.to_vec());
        Ok(())
    }

    /// Accounts for a stored document replaced by one of `new_len` bytes.
    pub fn resize(&mut self, live: &SharedView, old_len: usize, new_len: usize) -> Result<()> {
        let state = self.state(live)?;
        state.bytes = state.bytes.saturating_sub(old_len as u64) + new_len as u64;
        Ok(())
    }

    /// Makes room for the held-back inserts: the oldest stored documents
    /// that must go are forgotten (their order entries deleted into
    /// `batch`) and returned, oldest first, for the caller to delete
    /// their records and index entries. Their records are not read: the
    /// order entries hold their lengths. The caller then calls
    /// [`CappedBatch::finish`].
    pub fn evict(&mut self, live: &SharedView, batch: &mut WriteBatch) -> Result<Vec<Evicted>> {
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        let limits = self.limits;
        let added: u64 = self.pending.iter().map(|p| p.len).sum();
        let state = *self.state(live)?;
        let (mut count, mut bytes) = (state.count + self.pending.len() as u64, state.bytes + added);
        let mut out = Vec::new();
        if !limits.exceeded(count, bytes) {
            return Ok(out);
        }
        for entry in natural_entries(live, self.collection, state.first, false) {
            if !limits.exceeded(count, bytes) {
                break;
            }
            let entry = entry?;
            if self.deleted.contains(&entry.id_key) {
                continue;
            }
            count -= 1;
            bytes = bytes.saturating_sub(entry.len);
            self.forget_at(live, Some(entry.seq), &entry.id_key, entry.len, batch)?;
            // Everything before it is gone now.
            self.state(live)?.first = entry.seq + 1;
            out.push(Evicted {
                key: RecordKey::new(self.collection, UNSHARDED_HASH, entry.id_key),
                len: entry.len as usize,
            });
        }
        Ok(out)
    }

    /// Writes the held-back inserts that fit (the newest), with their
    /// order entries, and the new state, into `records` and `entries`.
    /// Returns how many documents were written.
    pub fn finish(
        mut self,
        live: &SharedView,
        records: &mut WriteBatch,
        entries: &mut WriteBatch,
    ) -> Result<usize> {
        if self.state.is_none() && self.pending.is_empty() {
            return Ok(0);
        }
        let limits = self.limits;
        let pending = std::mem::take(&mut self.pending);
        let collection = self.collection;
        let state = self.state(live)?;
        let first_seq = state.next;
        state.next += pending.len() as u64;
        state.count += pending.len() as u64;
        state.bytes += pending.iter().map(|p| p.len).sum::<u64>();
        let mut written = 0;
        for (i, p) in pending.into_iter().enumerate() {
            // The oldest of the batch give way to its newest.
            if limits.exceeded(state.count, state.bytes) {
                state.count -= 1;
                state.bytes = state.bytes.saturating_sub(p.len);
                continue;
            }
            let seq = first_seq + i as u64;
            for op in p.ops {
                match op {
                    WriteOp::PutRecord(..) => records.push(op),
                    other => entries.push(other),
                }
            }
            entries.push(WriteOp::PutIndexEntry(
                entry_key(collection, NATURAL, natural_entry(seq, &p.id_key)),
                p.len.to_be_bytes().to_vec(),
            ));
            entries.push(WriteOp::PutIndexEntry(
                entry_key(collection, SEQ_OF_ID, p.id_key),
                seq.to_be_bytes().to_vec(),
            ));
            written += 1;
        }
        entries.push(WriteOp::PutIndexEntry(
            entry_key(collection, STATE, Vec::new()),
            state.encode(),
        ));
        Ok(written)
    }
}

/// The `seq` of the document whose `keystring(_id)` is `id_key`.
fn seq_of(view: &SharedView, collection: u64, id_key: &[u8]) -> Result<Option<u64>> {
    let scan = IndexScan {
        from: Bound::Included(id_key.to_vec()),
        to: Bound::Included(id_key.to_vec()),
        ..IndexScan::all(collection, SEQ_OF_ID, Some(ONE_PARTITION))
    };
    match blocking::iter(view.scan_index(scan)).next() {
        Some(item) => {
            let (_, value) = item?;
            let seq = value
                .try_into()
                .map(u64::from_be_bytes)
                .map_err(|_| Error::internal("a capped collection's order entry is truncated"))?;
            Ok(Some(seq))
        }
        None => Ok(None),
    }
}

/// The natural-order entries from `seq` `from` on (in either direction).
fn natural_entries(
    view: &SharedView,
    collection: u64,
    from: u64,
    reverse: bool,
) -> impl Iterator<Item = StorageResult<Entry>> + Send + 'static {
    let scan = IndexScan {
        from: Bound::Included(from.to_be_bytes().to_vec()),
        reverse,
        ..IndexScan::all(collection, NATURAL, Some(ONE_PARTITION))
    };
    blocking::iter(view.scan_index(scan)).map(|item| {
        let (key, value) = item?;
        Entry::decode(&key.entry, &value)
    })
}

/// The records of a capped collection in insertion order (or newest
/// first), for a collection scan.
pub(crate) fn natural_records(
    view: &SharedView,
    collection: u64,
    reverse: bool,
) -> impl Iterator<Item = StorageResult<(RecordKey, Vec<u8>)>> + Send + 'static {
    let records = view.clone();
    let first = State::read(view, collection).map_or(1, |s| s.first);
    natural_entries(view, collection, first, reverse).filter_map(move |entry| {
        let id_key = match entry {
            Ok(e) => e.id_key,
            Err(e) => return Some(Err(e)),
        };
        let key = RecordKey::new(collection, UNSHARDED_HASH, id_key);
        match blocking::wait(records.record(&key)) {
            Ok(Some(value)) => Some(Ok((key, value))),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    })
}

type Entries = Box<dyn Iterator<Item = StorageResult<Entry>> + Send>;

/// A tailable cursor's reading of a capped collection: each read goes on
/// after the last document it saw, in a fresh snapshot, so documents
/// inserted since appear; a read that finds nothing leaves the cursor
/// open for the next.
pub struct Tail {
    store: SharedStore,
    collection: Arc<Collection>,
    filter: Option<Filter>,
    projection: Option<Projection>,
    /// Whether `getMore` waits for new documents (`awaitData`).
    pub await_data: bool,
    /// The `seq` of the last document read.
    last: Option<u64>,
    current: Option<Entries>,
    view: Option<SharedView>,
}

impl Tail {
    fn new(
        store: SharedStore,
        collection: Arc<Collection>,
        filter: Option<Filter>,
        projection: Option<Projection>,
        await_data: bool,
    ) -> Tail {
        Tail {
            store,
            collection,
            filter,
            projection,
            await_data,
            last: None,
            current: None,
            view: None,
        }
    }

    /// The collection it reads, whose [`Collection::appended`] wakes a
    /// cursor waiting for new documents.
    pub fn collection(&self) -> &Arc<Collection> {
        &self.collection
    }

    /// Ends the current read: the next document comes from a fresh
    /// snapshot, after the last one read. Each `getMore` starts so, as a
    /// cursor resumes from its saved position.
    pub fn resume(&mut self) {
        self.current = None;
        self.view = None;
    }

    /// The next matching document; `None` when there is nothing newer
    /// for now (the next call reads again).
    pub fn next_document(&mut self) -> Option<Result<Document>> {
        loop {
            if self.current.is_none() {
                if let Err(e) = self.start() {
                    return Some(Err(e));
                }
            }
            let entries = self.current.as_mut()?;
            let entry = match entries.next() {
                None => {
                    self.current = None;
                    self.view = None;
                    return None;
                }
                Some(Err(e)) => return Some(Err(e.into())),
                Some(Ok(entry)) => entry,
            };
            self.last = Some(entry.seq);
            match self.load(entry.id_key) {
                Ok(Some(doc)) => return Some(Ok(doc)),
                Ok(None) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// Starts a read after the last document seen; fails with 136
    /// `CappedPositionLost` when that document has been deleted since
    /// (the collection moved on past the cursor).
    fn start(&mut self) -> Result<()> {
        let view = self.store.view();
        let entries: Entries = match self.last {
            None => {
                let first = State::read(&view, self.collection.id)?.first;
                Box::new(natural_entries(&view, self.collection.id, first, false))
            }
            Some(last) => {
                let mut entries = natural_entries(&view, self.collection.id, last, false);
                match entries.next() {
                    Some(Ok(entry)) if entry.seq == last => {}
                    Some(Err(e)) => return Err(e.into()),
                    _ => {
                        return Err(Error::new(
                            ErrorCode::CappedPositionLost,
                            format!(
                                "CollectionScan died due to position in capped collection being \
                                 deleted. Last seen record id: RecordId({last})"
                            ),
                        ))
                    }
                }
                Box::new(entries)
            }
        };
        self.current = Some(entries);
        self.view = Some(view);
        Ok(())
    }

    /// The document under `id_key`, if it matches, projected.
    fn load(&self, id_key: Vec<u8>) -> Result<Option<Document>> {
        let Some(view) = &self.view else {
            return Ok(None);
        };
        let key = RecordKey::new(self.collection.id, UNSHARDED_HASH, id_key);
        let Some(value) = blocking::wait(view.record(&key))? else {
            return Ok(None);
        };
        let doc = super::decode_record(key, &value)?.doc;
        let details = match &self.filter {
            Some(filter) => {
                let details = filter.try_matches_with_details(&doc)?;
                if !details.matched {
                    return Ok(None);
                }
                details
            }
            None => Default::default(),
        };
        match &self.projection {
            Some(p) => p.apply(&doc, &details).map(Some),
            None => Ok(Some(doc)),
        }
    }
}

impl Router {
    /// A tailable cursor's reading of `ns` (see [`Tail`]), and whether the
    /// collection holds any document: MongoDB keeps a tailable cursor
    /// open only on a collection that does. `None` when there is no such
    /// collection. Fails with 2 `BadValue` on a collection that is not
    /// capped.
    pub fn tail(
        &self,
        ns: &Namespace,
        filter: Option<Filter>,
        projection: Option<Projection>,
        await_data: bool,
    ) -> Result<Option<(Tail, bool)>> {
        let Some(coll) = self.collection(ns) else {
            return Ok(None);
        };
        if coll.options().capped.is_none() {
            return Err(Error::bad_value(format!(
                "error processing query: ns={ns} tailable cursor requested on non capped \
                 collection"
            )));
        }
        let holds = State::read(&self.store.view(), coll.id)?.count > 0;
        let tail = Tail::new(self.store.clone(), coll, filter, projection, await_data);
        Ok(Some((tail, holds)))
    }
}

impl Router {
    /// Makes `ns` a capped collection of `size` bytes (`convertToCapped`):
    /// a capped copy ([`Router::clone_as_capped`]) into
    /// `tmp.convertToCapped.<name>` that then takes its name.
    pub async fn convert_to_capped(&self, ns: &Namespace, size: Bson) -> Result<()> {
        let tmp = Namespace::new(&ns.db, &format!("tmp.convertToCapped.{}", ns.coll))?;
        if self.collection(ns).is_some() && self.collection(&tmp).is_some() {
            self.drop_collection(&tmp).await?;
        }
        self.clone_as_capped(ns, &tmp, size).await?;
        self.rename_collection(&tmp, ns, true).await
    }

    /// Copies `from` into the new capped collection `to` of `size` bytes
    /// (`cloneCollectionAsCapped`): its documents oldest first (in `_id`
    /// order unless it was capped already), so only the newest that fit
    /// are kept, with its validator but only the `_id` index.
    pub async fn clone_as_capped(
        &self,
        from: &Namespace,
        to: &Namespace,
        size: Bson,
    ) -> Result<()> {
        let Some(coll) = self.collection(from) else {
            return Err(Error::new(
                ErrorCode::NamespaceNotFound,
                format!("source collection {from} does not exist"),
            ));
        };
        if coll.sharding.is_some() {
            return Err(Error::new(
                ErrorCode::IllegalOperation,
                format!("can't convert sharded collection {from} to a capped collection"),
            ));
        }
        if self.collection(to).is_some() {
            return Err(Error::new(
                ErrorCode::NamespaceExists,
                format!(
                    "cloneCollectionAsCapped failed - destination collection {to} already \
                     exists. source collection: {from}"
                ),
            ));
        }
        let mut options = bson::doc! {"capped": true, "size": size};
        for kept in ["validator", "validationLevel", "validationAction"] {
            if let Some(value) = coll.options().document.get(kept) {
                options.insert(kept, value.clone());
            }
        }
        let limit = Capped::of_options(&options).map_or(0, |c| c.size);
        self.create_collection(to, options).await?;
        // Only the newest documents that fit are kept; the window is
        // bounded by the new collection's size.
        let newest = self
            .find(from, super::FindSpec::default(), |found| {
                let mut newest = std::collections::VecDeque::new();
                let mut bytes = 0u64;
                for doc in found.documents() {
                    let encoded = doc?
                        .to_vec()
                        .map_err(|e| Error::internal(format!("cannot encode a document: {e}")))?;
                    bytes += encoded.len() as u64;
                    newest.push_back(encoded);
                    while bytes > limit {
                        let Some(oldest) = newest.pop_front() else {
                            break;
                        };
                        bytes -= oldest.len() as u64;
                    }
                }
                Ok(newest)
            })
            .await?;
        let newest: Vec<Vec<u8>> = newest.into();
        for chunk in newest.chunks(1000) {
            let outcome = self
                .insert(to, chunk.to_vec(), true, super::DocumentValidation::Bypass)
                .await?;
            if let Some((_, e)) = outcome.errors.into_iter().next() {
                return Err(e);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_and_order_entries_round_trip() {
        let s = State {
            next: 7,
            count: 3,
            bytes: 999,
            first: 4,
        };
        assert_eq!(State::decode(&s.encode()).unwrap(), s);
        let entry = natural_entry(42, b"id");
        assert_eq!(
            Entry::decode(&entry, &120_u64.to_be_bytes()).unwrap(),
            Entry {
                seq: 42,
                id_key: b"id".to_vec(),
                len: 120
            }
        );
        // Order entries sort by seq.
        assert!(natural_entry(2, b"z") < natural_entry(10, b"a"));
    }
}
