//! Record key layout.
//!
//! A document lives under `collection id (8 bytes, big-endian) | shard-key
//! hash (8 bytes, sign bit flipped so signed order is byte order) |
//! keystring(_id)`. All records of one collection are one key range, and
//! within it one hash range — one physical partition — is one contiguous
//! sub-range: a split is a metadata change and a partition can be copied
//! elsewhere by a range scan.

use std::ops::Bound;

/// The 8-byte, order-preserving form of a signed 64-bit hash.
pub fn hash_bytes(hash: i64) -> [u8; 8] {
    ((hash as u64) ^ (1 << 63)).to_be_bytes()
}

/// The hash a record key is stored under.
pub fn record_hash(key: &[u8]) -> Option<i64> {
    let bytes: [u8; 8] = key.get(8..16)?.try_into().ok()?;
    Some((u64::from_be_bytes(bytes) ^ (1 << 63)) as i64)
}

/// The `keystring(_id)` part of a record key.
pub fn record_id_key(key: &[u8]) -> &[u8] {
    key.get(16..).unwrap_or_default()
}

/// The key of one record.
pub fn record_key(collection: u64, hash: i64, id_key: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(16 + id_key.len());
    key.extend_from_slice(&collection.to_be_bytes());
    key.extend_from_slice(&hash_bytes(hash));
    key.extend_from_slice(id_key);
    key
}

/// The key range of the records of `collection` whose hash lies in
/// `[min, max]` (both inclusive).
pub fn partition_range(collection: u64, min: i64, max: i64) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let mut from = Vec::with_capacity(16);
    from.extend_from_slice(&collection.to_be_bytes());
    from.extend_from_slice(&hash_bytes(min));
    let to = match max.checked_add(1) {
        Some(next) => {
            let mut to = Vec::with_capacity(16);
            to.extend_from_slice(&collection.to_be_bytes());
            to.extend_from_slice(&hash_bytes(next));
            to
        }
        None => collection_end(collection),
    };
    (Bound::Included(from), Bound::Excluded(to))
}

/// The key of one index entry: `collection id | index number (4 bytes,
/// big-endian) | entry`. Number 0 is the `_id` index of a sharded
/// collection, whose entries map `keystring(_id)` to the record's hash.
pub fn index_key(collection: u64, index: u32, entry: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(12 + entry.len());
    key.extend_from_slice(&collection.to_be_bytes());
    key.extend_from_slice(&index.to_be_bytes());
    key.extend_from_slice(entry);
    key
}

/// The key range of every record of `collection`.
pub fn collection_range(collection: u64) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    (
        Bound::Included(collection.to_be_bytes().to_vec()),
        Bound::Excluded(collection_end(collection)),
    )
}

fn collection_end(collection: u64) -> Vec<u8> {
    match collection.checked_add(1) {
        Some(next) => next.to_be_bytes().to_vec(),
        None => vec![0xff; 9],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_order_is_byte_order() {
        let hashes = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for w in hashes.windows(2) {
            assert!(hash_bytes(w[0]) < hash_bytes(w[1]));
        }
    }

    #[test]
    fn record_keys_give_back_their_parts() {
        let key = record_key(9, -42, b"id");
        assert_eq!(record_hash(&key), Some(-42));
        assert_eq!(record_id_key(&key), b"id");
        assert_eq!(record_hash(b"short"), None);
    }

    #[test]
    fn partition_range_holds_its_hashes_only() {
        let (from, to) = partition_range(3, -10, 10);
        let inside = record_key(3, 10, b"x");
        let outside = record_key(3, 11, b"");
        let (Bound::Included(f), Bound::Excluded(t)) = (from, to) else {
            panic!("unexpected bounds")
        };
        assert!(f <= inside && inside < t);
        assert!(outside >= t);
        let (_, Bound::Excluded(end)) = partition_range(3, 0, i64::MAX) else {
            panic!("unexpected bounds")
        };
        assert!(record_key(3, i64::MAX, &[0xff; 4]) < end);
        assert!(record_key(4, i64::MIN, b"") >= end);
    }
}
