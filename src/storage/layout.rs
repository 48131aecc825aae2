//! The byte layout of every stored key: the only module that knows it.
//!
//! Everything above storage speaks in typed keys ([`RecordKey`],
//! [`IndexEntryKey`], [`CatalogKey`], ...); the key-value backends store
//! the bytes this module encodes. Format version [`FORMAT_VERSION`]:
//!
//! | space   | key                                                                  | value |
//! |---------|----------------------------------------------------------------------|-------|
//! | records | `collection (8) \| hash (8) \| keystring(_id)`                        | the document (BSON) |
//! | index   | `collection (8) \| 0 (4) \| keystring(_id)`: the `_id` entry          | the record's hash (8, big-endian) |
//! | index   | `collection (8) \| index (4, >= 1) \| partition (8) \| keystring(key) \| keystring(_id)` | the entry value of `index::entry_value` |
//! | usage   | `collection (8) \| 0 \| hash (8)`: one logical partition              | [`Usage`] |
//! | usage   | `collection (8) \| 1 \| partition id (8)`: one partition's total      | [`Usage`] |
//! | catalog | `ns:<db.coll>`, `\0next-collection-id`, `\0next-partition-id`, `\0format-version` | metadata |
//!
//! Integers are big-endian; a hash or a partition start is a signed
//! 64-bit value with its sign bit flipped, so byte order is signed order.
//! One collection is one key range in each space, and within its records
//! one partition (a hash range) is one contiguous sub-range. A secondary
//! index entry sits under the start hash of the partition holding its
//! record, so a partition reads only its own index range; an unsharded
//! collection is one partition whose records all sit under hash 0 and
//! whose entries sit under start [`ONE_PARTITION`], also 0.
//!
//! Version 1 (no version key) kept usage under index numbers `u32::MAX`
//! (per hash) and `u32::MAX - 1` (per partition) and secondary entries
//! without the partition; [`v1`] knows those keys for the upgrade.

use std::ops::Bound;

use super::{StorageError, StorageResult};

/// The layout this build writes.
pub const FORMAT_VERSION: u32 = 2;

/// The start hash the index entries of an unsharded collection (one
/// partition, every record under hash 0) sit under.
pub const ONE_PARTITION: i64 = 0;

/// Index number of the `_id` entries; secondary indexes number from 1.
const ID_INDEX: u32 = 0;

/// A pair of bounds over encoded keys.
pub type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The 8-byte, order-preserving form of a signed 64-bit hash.
pub fn hash_bytes(hash: i64) -> [u8; 8] {
    ((hash as u64) ^ (1 << 63)).to_be_bytes()
}

fn hash_at(bytes: &[u8], at: usize) -> Option<i64> {
    let b: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
    Some((u64::from_be_bytes(b) ^ (1 << 63)) as i64)
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_be_bytes(b))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let b: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_be_bytes(b))
}

fn corrupt(what: &str, key: &[u8]) -> StorageError {
    StorageError::Corrupt(format!("malformed {what} key {key:02x?}"))
}

/// The smallest key after every key starting with `prefix`; `None` when
/// there is none (the prefix is all `0xff`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut out = prefix.to_vec();
    while out.last() == Some(&0xFF) {
        out.pop();
    }
    let last = out.last_mut()?;
    *last += 1;
    Some(out)
}

/// Every key starting with `prefix`.
pub fn prefix_range(prefix: Vec<u8>) -> KeyRange {
    let end = prefix_end(&prefix);
    (
        Bound::Included(prefix),
        end.map_or(Bound::Unbounded, Bound::Excluded),
    )
}

/// `prefix` joined to each bound of `tail`, staying inside the prefix.
fn within(prefix: &[u8], from: Bound<Vec<u8>>, to: Bound<Vec<u8>>) -> KeyRange {
    let join = |t: Vec<u8>| {
        let mut k = prefix.to_vec();
        k.extend_from_slice(&t);
        k
    };
    let (all_from, all_to) = prefix_range(prefix.to_vec());
    let from = match from {
        Bound::Included(t) => Bound::Included(join(t)),
        Bound::Excluded(t) => Bound::Excluded(join(t)),
        Bound::Unbounded => all_from,
    };
    let to = match to {
        Bound::Included(t) => Bound::Included(join(t)),
        Bound::Excluded(t) => Bound::Excluded(join(t)),
        Bound::Unbounded => all_to,
    };
    (from, to)
}

/// Where one document lives.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordKey {
    pub collection: u64,
    /// The shard-key hash (0 in an unsharded collection).
    pub hash: i64,
    /// `keystring(_id)`.
    pub id: Vec<u8>,
}

impl RecordKey {
    pub fn new(collection: u64, hash: i64, id: Vec<u8>) -> RecordKey {
        RecordKey {
            collection,
            hash,
            id,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut key = Vec::with_capacity(16 + self.id.len());
        key.extend_from_slice(&self.collection.to_be_bytes());
        key.extend_from_slice(&hash_bytes(self.hash));
        key.extend_from_slice(&self.id);
        key
    }

    pub fn decode(key: &[u8]) -> StorageResult<RecordKey> {
        let parts = (u64_at(key, 0), hash_at(key, 8));
        let (Some(collection), Some(hash)) = parts else {
            return Err(corrupt("record", key));
        };
        Ok(RecordKey {
            collection,
            hash,
            id: key.get(16..).unwrap_or_default().to_vec(),
        })
    }

    /// [`RecordKey::decode`] of a key the caller owns: its bytes become
    /// the `_id` part without a copy (a scan decodes every key it reads).
    pub fn decode_owned(mut key: Vec<u8>) -> StorageResult<RecordKey> {
        let parts = (u64_at(&key, 0), hash_at(&key, 8));
        let (Some(collection), Some(hash)) = parts else {
            return Err(corrupt("record", &key));
        };
        key.drain(..16);
        Ok(RecordKey {
            collection,
            hash,
            id: key,
        })
    }
}

fn hash_prefix(collection: u64, hash: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(16);
    k.extend_from_slice(&collection.to_be_bytes());
    k.extend_from_slice(&hash_bytes(hash));
    k
}

/// The record keys of `collection` with hashes in `[min, max]`.
pub fn record_range(collection: u64, min: i64, max: i64) -> KeyRange {
    let from = hash_prefix(collection, min);
    let to = match max.checked_add(1) {
        Some(next) => Bound::Excluded(hash_prefix(collection, next)),
        None => collection_end(collection),
    };
    (Bound::Included(from), to)
}

/// The record keys under one hash whose `keystring(_id)` lies in the bounds.
pub fn record_id_range(
    collection: u64,
    hash: i64,
    from: Bound<Vec<u8>>,
    to: Bound<Vec<u8>>,
) -> KeyRange {
    within(&hash_prefix(collection, hash), from, to)
}

/// Every key of `collection` in a space keyed by collection first.
pub fn collection_range(collection: u64) -> KeyRange {
    (
        Bound::Included(collection.to_be_bytes().to_vec()),
        collection_end(collection),
    )
}

fn collection_end(collection: u64) -> Bound<Vec<u8>> {
    match collection.checked_add(1) {
        Some(next) => Bound::Excluded(next.to_be_bytes().to_vec()),
        None => Bound::Unbounded,
    }
}

fn index_prefix(collection: u64, index: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(12);
    k.extend_from_slice(&collection.to_be_bytes());
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// The key of the `_id` entry of a sharded collection's document.
pub fn id_entry_key(collection: u64, id: &[u8]) -> Vec<u8> {
    let mut k = index_prefix(collection, ID_INDEX);
    k.extend_from_slice(id);
    k
}

/// The `_id` entries of `collection` whose `keystring(_id)` lies in the bounds.
pub fn id_entry_range(collection: u64, from: Bound<Vec<u8>>, to: Bound<Vec<u8>>) -> KeyRange {
    within(&index_prefix(collection, ID_INDEX), from, to)
}

/// The `keystring(_id)` of an `_id` entry's key.
pub fn id_entry_id(key: &[u8]) -> StorageResult<Vec<u8>> {
    match key.get(12..) {
        Some(id) if u32_at(key, 8) == Some(ID_INDEX) => Ok(id.to_vec()),
        _ => Err(corrupt("_id entry", key)),
    }
}

/// The value of an `_id` entry: the hash its record is stored under.
pub fn id_entry_value(hash: i64) -> Vec<u8> {
    hash.to_be_bytes().to_vec()
}

pub fn decode_id_entry_value(value: &[u8]) -> StorageResult<i64> {
    let b: [u8; 8] = value
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| StorageError::Corrupt("malformed _id entry value".into()))?;
    Ok(i64::from_be_bytes(b))
}

/// One entry of a secondary index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IndexEntryKey {
    pub collection: u64,
    /// The index number (>= 1).
    pub index: u32,
    /// The start hash of the partition holding the record.
    pub partition: i64,
    /// `keystring(key values) | keystring(_id)`.
    pub entry: Vec<u8>,
}

impl IndexEntryKey {
    pub fn encode(&self) -> Vec<u8> {
        let mut k = self.prefix();
        k.extend_from_slice(&self.entry);
        k
    }

    fn prefix(&self) -> Vec<u8> {
        partition_prefix(self.collection, self.index, self.partition)
    }

    pub fn decode(key: &[u8]) -> StorageResult<IndexEntryKey> {
        let parts = (u64_at(key, 0), u32_at(key, 8), hash_at(key, 12));
        let (Some(collection), Some(index), Some(partition)) = parts else {
            return Err(corrupt("index entry", key));
        };
        if index == ID_INDEX {
            return Err(corrupt("index entry", key));
        }
        Ok(IndexEntryKey {
            collection,
            index,
            partition,
            entry: key.get(20..).unwrap_or_default().to_vec(),
        })
    }

    /// The `keystring(_id)` after a key part of `key_len` bytes.
    pub fn id(&self, key_len: usize) -> &[u8] {
        self.entry.get(key_len..).unwrap_or_default()
    }

    /// The key part, `key_len` bytes.
    pub fn key(&self, key_len: usize) -> Option<&[u8]> {
        self.entry.get(..key_len)
    }
}

fn partition_prefix(collection: u64, index: u32, partition: i64) -> Vec<u8> {
    let mut k = index_prefix(collection, index);
    k.extend_from_slice(&hash_bytes(partition));
    k
}

/// Entries of `index` (of one partition, or all when `None`) whose entry
/// part lies in the bounds. Bounds only apply within one partition.
pub fn index_range(
    collection: u64,
    index: u32,
    partition: Option<i64>,
    from: Bound<Vec<u8>>,
    to: Bound<Vec<u8>>,
) -> KeyRange {
    match partition {
        Some(p) => within(&partition_prefix(collection, index, p), from, to),
        None => prefix_range(index_prefix(collection, index)),
    }
}

/// Documents and bytes stored under one hash or one partition.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub count: u64,
    pub bytes: u64,
}

impl Usage {
    pub fn add(&mut self, bytes: usize) {
        self.count += 1;
        self.bytes += bytes as u64;
    }

    pub fn remove(&mut self, bytes: usize) {
        self.count = self.count.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes as u64);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = self.count.to_be_bytes().to_vec();
        v.extend_from_slice(&self.bytes.to_be_bytes());
        v
    }

    pub fn decode(v: &[u8]) -> Usage {
        Usage {
            count: u64_at(v, 0).unwrap_or(0),
            bytes: u64_at(v, 8).unwrap_or(0),
        }
    }
}

const USAGE_HASH: u8 = 0;
const USAGE_PARTITION: u8 = 1;

fn usage_prefix(collection: u64, kind: u8) -> Vec<u8> {
    let mut k = Vec::with_capacity(17);
    k.extend_from_slice(&collection.to_be_bytes());
    k.push(kind);
    k
}

/// The key of the usage of one logical partition (one hash).
pub fn usage_key(collection: u64, hash: i64) -> Vec<u8> {
    let mut k = usage_prefix(collection, USAGE_HASH);
    k.extend_from_slice(&hash_bytes(hash));
    k
}

/// The usage keys of the hashes in `[min, max]`.
pub fn usage_range(collection: u64, min: i64, max: i64) -> KeyRange {
    let to = match max.checked_add(1) {
        Some(next) => Bound::Excluded(usage_key(collection, next)),
        None => prefix_range(usage_prefix(collection, USAGE_HASH)).1,
    };
    (Bound::Included(usage_key(collection, min)), to)
}

/// The hash of a usage key.
pub fn usage_key_hash(key: &[u8]) -> StorageResult<i64> {
    match (key.get(8), hash_at(key, 9)) {
        (Some(&USAGE_HASH), Some(h)) => Ok(h),
        _ => Err(corrupt("usage", key)),
    }
}

/// The key of the stored total of one partition.
pub fn partition_total_key(collection: u64, partition: u64) -> Vec<u8> {
    let mut k = usage_prefix(collection, USAGE_PARTITION);
    k.extend_from_slice(&partition.to_be_bytes());
    k
}

/// A key of the catalog space.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CatalogKey {
    /// The metadata of one collection, by `db.coll`.
    Namespace(String),
    /// The settings of one database (its shared throughput), by name.
    Database(String),
    NextCollectionId,
    NextPartitionId,
    FormatVersion,
    /// The cluster time before which the change log was trimmed.
    ChangeLogStart,
    /// The latest retryable write or transaction of one logical session,
    /// by session id.
    Session(Vec<u8>),
}

const NS_PREFIX: &[u8] = b"ns:";
const DB_PREFIX: &[u8] = b"db:";
const SESSION_PREFIX: &[u8] = b"ss:";

impl CatalogKey {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            CatalogKey::Namespace(ns) => {
                let mut k = NS_PREFIX.to_vec();
                k.extend_from_slice(ns.as_bytes());
                k
            }
            CatalogKey::Database(db) => {
                let mut k = DB_PREFIX.to_vec();
                k.extend_from_slice(db.as_bytes());
                k
            }
            CatalogKey::NextCollectionId => b"\0next-collection-id".to_vec(),
            CatalogKey::NextPartitionId => b"\0next-partition-id".to_vec(),
            CatalogKey::FormatVersion => b"\0format-version".to_vec(),
            CatalogKey::ChangeLogStart => b"\0change-log-start".to_vec(),
            CatalogKey::Session(id) => [SESSION_PREFIX, id].concat(),
        }
    }

    pub fn decode(key: &[u8]) -> StorageResult<CatalogKey> {
        if let Some(ns) = key.strip_prefix(NS_PREFIX) {
            return std::str::from_utf8(ns)
                .map(|s| CatalogKey::Namespace(s.to_string()))
                .map_err(|_| corrupt("catalog", key));
        }
        if let Some(db) = key.strip_prefix(DB_PREFIX) {
            return std::str::from_utf8(db)
                .map(|s| CatalogKey::Database(s.to_string()))
                .map_err(|_| corrupt("catalog", key));
        }
        if let Some(id) = key.strip_prefix(SESSION_PREFIX) {
            return Ok(CatalogKey::Session(id.to_vec()));
        }
        [
            CatalogKey::NextCollectionId,
            CatalogKey::NextPartitionId,
            CatalogKey::FormatVersion,
            CatalogKey::ChangeLogStart,
        ]
        .into_iter()
        .find(|k| k.encode() == key)
        .ok_or_else(|| corrupt("catalog", key))
    }
}

/// A place in the change log: the cluster time of the commit that wrote
/// a change ([`crate::base::clock`]) and the change's place in it. Keys
/// of the change space are these, big-endian, so the log reads in commit
/// order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ChangePosition {
    pub time: u64,
    pub index: u32,
}

impl ChangePosition {
    pub const ENCODED_LEN: usize = 12;

    /// After every change of the commit at `time`.
    pub fn end_of(time: u64) -> ChangePosition {
        ChangePosition {
            time,
            index: u32::MAX,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut key = Vec::with_capacity(Self::ENCODED_LEN);
        key.extend_from_slice(&self.time.to_be_bytes());
        key.extend_from_slice(&self.index.to_be_bytes());
        key
    }

    pub fn decode(key: &[u8]) -> StorageResult<ChangePosition> {
        let (time, index) = key
            .split_first_chunk::<8>()
            .and_then(|(t, rest)| Some((t, <[u8; 4]>::try_from(rest).ok()?)))
            .ok_or_else(|| corrupt("change log", key))?;
        Ok(ChangePosition {
            time: u64::from_be_bytes(*time),
            index: u32::from_be_bytes(index),
        })
    }
}

/// Every namespace key.
pub fn namespace_range() -> KeyRange {
    prefix_range(NS_PREFIX.to_vec())
}

/// Every database-settings key.
pub fn database_range() -> KeyRange {
    prefix_range(DB_PREFIX.to_vec())
}

/// Every session record's key.
pub fn session_range() -> KeyRange {
    prefix_range(SESSION_PREFIX.to_vec())
}

/// A stored counter (next ids, the format version).
pub fn encode_counter(n: u64) -> Vec<u8> {
    n.to_be_bytes().to_vec()
}

pub fn decode_counter(v: &[u8]) -> Option<u64> {
    u64_at(v, 0)
}

/// The keys of format version 1, read only to upgrade them.
pub mod v1 {
    use super::*;

    /// Index number of the per-hash usage entries.
    pub const USAGE_INDEX: u32 = u32::MAX;
    /// Index number of the per-partition totals.
    pub const PARTITION_USAGE_INDEX: u32 = u32::MAX - 1;

    /// What a version-1 key of the index space holds.
    #[derive(Debug, PartialEq, Eq)]
    pub enum IndexSpaceKey {
        /// An `_id` entry (unchanged in version 2).
        Id,
        Usage {
            collection: u64,
            hash: i64,
        },
        PartitionTotal {
            collection: u64,
            partition: u64,
        },
        /// A secondary entry: `keystring(key) | keystring(_id)`.
        Entry {
            collection: u64,
            index: u32,
            entry: Vec<u8>,
        },
    }

    pub fn decode_index_space(key: &[u8]) -> StorageResult<IndexSpaceKey> {
        let (Some(collection), Some(index)) = (u64_at(key, 0), u32_at(key, 8)) else {
            return Err(corrupt("version 1 index", key));
        };
        Ok(match index {
            ID_INDEX => IndexSpaceKey::Id,
            USAGE_INDEX => IndexSpaceKey::Usage {
                collection,
                hash: hash_at(key, 12).ok_or_else(|| corrupt("version 1 usage", key))?,
            },
            PARTITION_USAGE_INDEX => IndexSpaceKey::PartitionTotal {
                collection,
                partition: u64_at(key, 12).ok_or_else(|| corrupt("version 1 usage", key))?,
            },
            index => IndexSpaceKey::Entry {
                collection,
                index,
                entry: key.get(12..).unwrap_or_default().to_vec(),
            },
        })
    }

    /// The version-1 key of a usage entry (tests write old layouts with it).
    pub fn usage_key(collection: u64, hash: i64) -> Vec<u8> {
        let mut k = index_prefix(collection, USAGE_INDEX);
        k.extend_from_slice(&hash_bytes(hash));
        k
    }

    pub fn partition_total_key(collection: u64, partition: u64) -> Vec<u8> {
        let mut k = index_prefix(collection, PARTITION_USAGE_INDEX);
        k.extend_from_slice(&partition.to_be_bytes());
        k
    }

    pub fn entry_key(collection: u64, index: u32, entry: &[u8]) -> Vec<u8> {
        let mut k = index_prefix(collection, index);
        k.extend_from_slice(entry);
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inside(key: &[u8], (from, to): &KeyRange) -> bool {
        use std::ops::RangeBounds;
        let key = key.to_vec();
        (from.clone(), to.clone()).contains(&key)
    }

    #[test]
    fn hash_order_is_byte_order() {
        let hashes = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for w in hashes.windows(2) {
            assert!(hash_bytes(w[0]) < hash_bytes(w[1]));
        }
    }

    #[test]
    fn record_keys_round_trip() {
        let key = RecordKey::new(9, -42, b"id".to_vec());
        assert_eq!(RecordKey::decode(&key.encode()).unwrap(), key);
        assert_eq!(RecordKey::decode_owned(key.encode()).unwrap(), key);
        assert!(RecordKey::decode(b"short").is_err());
        assert!(RecordKey::decode_owned(b"short".to_vec()).is_err());
    }

    #[test]
    fn record_ranges_hold_their_hashes_only() {
        let range = record_range(3, -10, 10);
        assert!(inside(
            &RecordKey::new(3, 10, b"x".to_vec()).encode(),
            &range
        ));
        assert!(inside(&RecordKey::new(3, -10, vec![]).encode(), &range));
        assert!(!inside(&RecordKey::new(3, 11, vec![]).encode(), &range));
        let top = record_range(3, 0, i64::MAX);
        assert!(inside(
            &RecordKey::new(3, i64::MAX, vec![0xff; 4]).encode(),
            &top
        ));
        assert!(!inside(&RecordKey::new(4, i64::MIN, vec![]).encode(), &top));
        let ids = record_id_range(3, 0, Bound::Included(b"b".to_vec()), Bound::Unbounded);
        assert!(inside(&RecordKey::new(3, 0, b"c".to_vec()).encode(), &ids));
        assert!(!inside(&RecordKey::new(3, 0, b"a".to_vec()).encode(), &ids));
        assert!(!inside(&RecordKey::new(3, 1, b"c".to_vec()).encode(), &ids));
    }

    #[test]
    fn index_entries_sit_under_their_partition() {
        let e = IndexEntryKey {
            collection: 5,
            index: 2,
            partition: -100,
            entry: b"keyid".to_vec(),
        };
        let bytes = e.encode();
        assert_eq!(IndexEntryKey::decode(&bytes).unwrap(), e);
        assert_eq!(e.key(3), Some(&b"key"[..]));
        assert_eq!(e.id(3), b"id");
        assert!(inside(
            &bytes,
            &index_range(5, 2, Some(-100), Bound::Unbounded, Bound::Unbounded)
        ));
        assert!(!inside(
            &bytes,
            &index_range(5, 2, Some(0), Bound::Unbounded, Bound::Unbounded)
        ));
        assert!(inside(
            &bytes,
            &index_range(5, 2, None, Bound::Unbounded, Bound::Unbounded)
        ));
        let tail = index_range(
            5,
            2,
            Some(-100),
            Bound::Included(b"k".to_vec()),
            Bound::Excluded(b"l".to_vec()),
        );
        assert!(inside(&bytes, &tail));
        // `_id` entries are not secondary entries.
        assert!(!inside(
            &id_entry_key(5, b"x"),
            &index_range(5, 2, None, Bound::Unbounded, Bound::Unbounded)
        ));
        assert!(IndexEntryKey::decode(&id_entry_key(5, b"some id here....")).is_err());
        assert_eq!(id_entry_id(&id_entry_key(5, b"x")).unwrap(), b"x");
    }

    #[test]
    fn usage_keys_have_their_own_ranges() {
        let range = usage_range(1, -5, 5);
        assert!(inside(&usage_key(1, 5), &range));
        assert!(!inside(&usage_key(1, 6), &range));
        assert!(!inside(
            &partition_total_key(1, 0),
            &usage_range(1, i64::MIN, i64::MAX)
        ));
        assert_eq!(usage_key_hash(&usage_key(1, -3)).unwrap(), -3);
        let u = Usage {
            count: 3,
            bytes: 99,
        };
        assert_eq!(Usage::decode(&u.encode()), u);
    }

    #[test]
    fn catalog_keys_round_trip() {
        for k in [
            CatalogKey::Namespace("db.c".into()),
            CatalogKey::Database("db".into()),
            CatalogKey::NextCollectionId,
            CatalogKey::NextPartitionId,
            CatalogKey::FormatVersion,
        ] {
            assert_eq!(CatalogKey::decode(&k.encode()).unwrap(), k);
        }
        assert!(!inside(
            &CatalogKey::Database("a".into()).encode(),
            &namespace_range()
        ));
        assert!(inside(
            &CatalogKey::Database("a".into()).encode(),
            &database_range()
        ));
        assert!(inside(
            &CatalogKey::Namespace("a.b".into()).encode(),
            &namespace_range()
        ));
        assert!(!inside(
            &CatalogKey::FormatVersion.encode(),
            &namespace_range()
        ));
    }

    #[test]
    fn version_one_keys_are_recognised() {
        use v1::IndexSpaceKey;
        assert_eq!(
            v1::decode_index_space(&v1::usage_key(2, 7)).unwrap(),
            IndexSpaceKey::Usage {
                collection: 2,
                hash: 7
            }
        );
        assert_eq!(
            v1::decode_index_space(&v1::partition_total_key(2, 4)).unwrap(),
            IndexSpaceKey::PartitionTotal {
                collection: 2,
                partition: 4
            }
        );
        assert_eq!(
            v1::decode_index_space(&v1::entry_key(2, 3, b"e")).unwrap(),
            IndexSpaceKey::Entry {
                collection: 2,
                index: 3,
                entry: b"e".to_vec()
            }
        );
        assert_eq!(
            v1::decode_index_space(&id_entry_key(2, b"i")).unwrap(),
            IndexSpaceKey::Id
        );
    }
}
