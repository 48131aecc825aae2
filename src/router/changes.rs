//! What writes record in the change log ([`crate::storage::ChangeLog`]),
//! which change streams read ([`super::change_stream`]).
//!
//! Each entry is the change event as a stream shows it, less what its
//! place in the log gives it (`_id`, the resume token, and `clusterTime`)
//! and less what a stream adds on request (`fullDocument` of an update,
//! looked up when read). An entry goes into the same atomic batch as the
//! change it describes, so the log holds exactly the committed changes.
//!
//! Pre-images (`fullDocumentBeforeChange`) and post-images of updates are
//! kept only for collections created or modified with
//! `changeStreamPreAndPostImages: {enabled: true}`, as MongoDB does; they
//! live in the entry under names no event shows ([`PRE_IMAGE`],
//! [`POST_IMAGE`]). A transaction's entries carry its `lsid` and
//! `txnNumber`, and appear together at its commit.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bson::{doc, Bson, DateTime, Document, RawDocument};

use super::catalog::Collection;
use super::Router;
use crate::error::{Error, Result};
use crate::storage::{blocking, WriteOp};

/// An update's or delete's document before it, when the collection keeps
/// images.
pub const PRE_IMAGE: &str = "\u{1}pre";
/// An update's document after it, when the collection keeps images.
pub const POST_IMAGE: &str = "\u{1}post";
/// The shard-key hash of a sharded collection's changed document, for
/// streams that follow one partition.
pub const HASH: &str = "\u{1}hash";

/// What a transaction's change events carry: `lsid` and `txnNumber`.
pub(super) struct Stamp {
    pub lsid: Document,
    pub txn_number: i64,
}

/// Builds the change-log entries of one collection's writes.
pub(crate) struct ChangeRecorder {
    ns: Document,
    uuid: bson::Binary,
    shard_key: Option<crate::partition::ShardKey>,
    images: bool,
    wall: DateTime,
    /// The elements every insert entry of this recorder starts with,
    /// encoded once: inserts come in large batches.
    insert_prefix: std::sync::OnceLock<Vec<u8>>,
    /// The transaction the writes belong to, if any.
    transaction: Option<Arc<Stamp>>,
}

fn encoding(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("a change event does not encode: {e}"))
}

impl ChangeRecorder {
    /// The recorder for writes to `coll`; `None` when the store keeps no
    /// change log.
    pub fn new(router: &Router, coll: &Collection) -> Option<ChangeRecorder> {
        router.store.change_log()?;
        Some(ChangeRecorder {
            ns: doc! {"db": &coll.ns.db, "coll": &coll.ns.coll},
            uuid: coll.uuid.clone(),
            shard_key: coll.sharding.as_ref().map(|s| s.key.clone()),
            images: coll.options().keeps_images(),
            wall: DateTime::now(),
            insert_prefix: std::sync::OnceLock::new(),
            transaction: router.transaction.clone(),
        })
    }

    fn entry(&self, operation: &str) -> Document {
        let mut entry = doc! {
            "operationType": operation,
            "wallTime": self.wall,
            "ns": self.ns.clone(),
            "collectionUUID": self.uuid.clone(),
        };
        if let Some(stamp) = &self.transaction {
            entry.insert("lsid", stamp.lsid.clone());
            entry.insert("txnNumber", stamp.txn_number);
        }
        entry
    }

    /// Adds `documentKey`, `{<shard key>: …, _id: …}` as MongoDB
    /// identifies a document, and on a sharded collection its hash.
    fn identify(&self, entry: &mut Document, doc: &Document) -> Result<()> {
        let mut key = Document::new();
        if let Some(shard_key) = &self.shard_key {
            let value = shard_key.value(doc)?;
            entry.insert(HASH, crate::partition::hash::hash_of(value));
            if shard_key.path != "_id" {
                key.insert(shard_key.path.clone(), value.cloned().unwrap_or(Bson::Null));
            }
        }
        key.insert("_id", doc.get("_id").cloned().unwrap_or(Bson::Null));
        entry.insert("documentKey", key);
        Ok(())
    }

    /// [`Self::identify`] of a stored document whose `_id` is `id`: its
    /// `documentKey` and, on a sharded collection, its hash.
    fn identify_stored(&self, doc: &RawDocument, id: Bson) -> Result<(Document, Option<i64>)> {
        let mut key = Document::new();
        let mut hash = None;
        if let Some(shard_key) = &self.shard_key {
            let value = shard_key.raw_value(doc)?;
            hash = Some(crate::partition::hash::hash_of(value.as_ref()));
            if shard_key.path != "_id" {
                key.insert(shard_key.path.clone(), value.unwrap_or(Bson::Null));
            }
        }
        key.insert("_id", id);
        Ok((key, hash))
    }

    /// An insert of the stored document `bytes`.
    pub fn insert(&self, id: &Bson, bytes: &[u8]) -> Result<WriteOp> {
        let stored = RawDocument::from_bytes(bytes).map_err(encoding)?;
        let (key, hash) = self.identify_stored(stored, id.clone())?;
        let key = key.to_vec().map_err(encoding)?;
        let prefix = match self.insert_prefix.get() {
            Some(prefix) => prefix,
            None => {
                let header = self.entry("insert").to_vec().map_err(encoding)?;
                // The elements alone: no length, no terminating 0.
                let elements = header.get(4..header.len() - 1).unwrap_or_default();
                self.insert_prefix.get_or_init(|| elements.to_vec())
            }
        };
        // One buffer of the entry's final size: the document is copied once.
        let mut entry =
            Vec::with_capacity(4 + prefix.len() + 40 + key.len() + 16 + bytes.len() + 1);
        entry.extend_from_slice(&[0; 4]);
        entry.extend_from_slice(prefix);
        if let Some(hash) = hash {
            entry.push(0x12);
            entry.extend_from_slice(HASH.as_bytes());
            entry.push(0);
            entry.extend_from_slice(&hash.to_le_bytes());
        }
        for (name, document) in [("documentKey", &key[..]), ("fullDocument", bytes)] {
            entry.push(0x03);
            entry.extend_from_slice(name.as_bytes());
            entry.push(0);
            entry.extend_from_slice(document);
        }
        entry.push(0);
        let len = i32::try_from(entry.len()).map_err(encoding)?;
        entry[..4].copy_from_slice(&len.to_le_bytes());
        Ok(WriteOp::PutChange(entry))
    }

    /// A change of `old` to `new`: a `replace` when a replacement document
    /// made it, else an `update` with its description.
    pub fn update(&self, old: &Document, new: &Document, replacement: bool) -> Result<WriteOp> {
        let mut entry = self.entry(if replacement { "replace" } else { "update" });
        self.identify(&mut entry, new)?;
        if replacement {
            entry.insert("fullDocument", new.clone());
        } else {
            entry.insert(
                "updateDescription",
                crate::query::change_diff::describe(old, new),
            );
            if self.images {
                entry.insert(POST_IMAGE, new.clone());
            }
        }
        if self.images {
            entry.insert(PRE_IMAGE, old.clone());
        }
        encode(&entry)
    }

    /// A change, by update operators, of the stored document `old` to
    /// `new`, described without decoding either whole unless the
    /// collection keeps images.
    pub fn update_stored(&self, old: &[u8], new: &[u8]) -> Result<WriteOp> {
        if self.images {
            let decode = |bytes: &[u8]| {
                RawDocument::from_bytes(bytes)
                    .and_then(Document::try_from)
                    .map_err(encoding)
            };
            return self.update(&decode(old)?, &decode(new)?, false);
        }
        let (old, new) = (
            RawDocument::from_bytes(old).map_err(encoding)?,
            RawDocument::from_bytes(new).map_err(encoding)?,
        );
        let id = new
            .get("_id")
            .map_err(encoding)?
            .map(Bson::try_from)
            .transpose()
            .map_err(encoding)?;
        let (key, hash) = self.identify_stored(new, id.unwrap_or(Bson::Null))?;
        let mut entry = self.entry("update");
        if let Some(hash) = hash {
            entry.insert(HASH, hash);
        }
        entry.insert("documentKey", key);
        let description = crate::query::change_diff::describe_raw(old, new).map_err(encoding)?;
        entry.insert("updateDescription", description);
        encode(&entry)
    }

    /// A delete of `old`.
    pub fn delete(&self, old: &Document) -> Result<WriteOp> {
        let mut entry = self.entry("delete");
        self.identify(&mut entry, old)?;
        if self.images {
            entry.insert(PRE_IMAGE, old.clone());
        }
        encode(&entry)
    }
}

fn encode(entry: &Document) -> Result<WriteOp> {
    Ok(WriteOp::PutChange(entry.to_vec().map_err(encoding)?))
}

/// The entry of a database's drop.
pub(crate) fn drop_database_event(db: &str) -> Result<WriteOp> {
    encode(&doc! {
        "operationType": "dropDatabase",
        "wallTime": DateTime::now(),
        "ns": {"db": db},
    })
}

impl Router {
    /// Trims the change log to `retention` and `max_bytes` (0: no bound)
    /// for as long as the router lives, looking several times per
    /// retention period (at most every minute).
    pub async fn run_change_log_trimmer(
        self: std::sync::Arc<Self>,
        retention: Duration,
        max_bytes: u64,
    ) {
        if self.store.change_log().is_none() {
            return;
        }
        let every = (retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let cutoff = now.saturating_sub(retention).as_secs() << 32;
            // Deleting many entries takes a while: off the async workers.
            let router = self.clone();
            let trimmed = tokio::task::spawn_blocking(move || match router.store.change_log() {
                Some(log) => {
                    let cutoff = cutoff.max(size_cutoff(log, max_bytes)?);
                    blocking::wait(log.trim(cutoff)).map(|_| ())
                }
                None => Ok(()),
            })
            .await;
            match trimmed {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("trimming the change log failed: {e}"),
                Err(e) => tracing::warn!("trimming the change log stopped: {e}"),
            }
        }
    }
}

/// The time before which the log must go to fit in `max_bytes` with a
/// tenth to spare (0 when it fits), assuming changes spread evenly over
/// the time it spans; each pass comes closer.
fn size_cutoff(
    log: &dyn crate::storage::ChangeLog,
    max_bytes: u64,
) -> crate::storage::StorageResult<u64> {
    let bytes = log.bytes();
    if max_bytes == 0 || bytes <= max_bytes {
        return Ok(0);
    }
    let Some(oldest) = log.oldest()? else {
        return Ok(0);
    };
    let newest = *log.subscribe().borrow();
    let excess = 1.0 - (max_bytes as f64 * 0.9) / bytes as f64;
    let span = newest.saturating_sub(oldest) as f64;
    Ok(oldest + (span * excess) as u64 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::memory::MemoryEngine;
    use crate::storage::{ChangePosition, Store, WriteBatch};

    #[test]
    fn a_log_past_its_size_is_cut_from_the_oldest_end() {
        let (store, _engine) = MemoryEngine::store();
        store.ensure_format(&|_, _| None).unwrap();
        for _ in 0..100 {
            let mut batch = WriteBatch::default();
            batch.push(WriteOp::PutChange(vec![0; 1000]));
            blocking::wait(store.apply(batch)).unwrap();
        }
        let log = store.change_log().unwrap();
        let bytes = log.bytes();
        assert!(bytes >= 100_000, "{bytes}");
        assert_eq!(size_cutoff(log, 0).unwrap(), 0);
        assert_eq!(size_cutoff(log, bytes).unwrap(), 0);
        // Half the size: about 55 of the 100 entries go.
        let cutoff = size_cutoff(log, bytes / 2).unwrap();
        blocking::wait(log.trim(cutoff)).unwrap();
        let left = blocking::iter(store.view().scan_changes(ChangePosition::default())).count();
        assert!((40..=50).contains(&left), "{left} entries left");
        assert!(log.bytes() <= bytes / 2);
    }
}
