//! The partition model: shard keys, their hashes and partition maps.
//!
//! A sharded collection is spread over physical partitions, each a
//! contiguous range of the signed 64-bit hash space. A document belongs
//! to the partition whose range holds the hash of its shard-key value
//! ([`hash`], MongoDB's hashed-index function), so all documents with one
//! key value — a logical partition — always share a physical partition.
//!
//! This module is pure: it decides where things go. The router applies
//! it to storage.

/// MongoDB's hash lives with the pure BSON logic; partitions keep the name.
pub use crate::query::hash;

pub mod throughput;

use std::fmt;

use bson::{doc, Bson, Document};

use crate::bail;
use crate::error::Result;

/// Most partitions one collection may be split into at creation, as
/// MongoDB caps `numInitialChunks`.
pub const MAX_INITIAL_PARTITIONS: u64 = 8192;

/// The single-field hashed shard key of a collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardKey {
    /// The dotted field path, e.g. `customer.region`.
    pub path: String,
    parts: Vec<String>,
}

impl ShardKey {
    /// Parses a `shardCollection` key pattern. A pattern MongoDB itself
    /// refuses is `BadValue`; one MongoDB accepts but this server does not
    /// (range or compound keys: the Cosmos DB model is one hashed field)
    /// is `InvalidOptions`.
    pub fn parse(pattern: &Document) -> Result<ShardKey> {
        if pattern.is_empty() {
            bail!(BadValue, "Shard key pattern must not be empty");
        }
        let mut hashed = 0;
        for (field, kind) in pattern {
            match kind {
                Bson::String(s) if s == "hashed" => hashed += 1,
                v if crate::query::compare::Number::of(v).is_some_and(|n| n.to_f64() == 1.0) => {}
                other => bail!(
                    BadValue,
                    "Shard key {pattern} is invalid: field '{field}' is {other}; numerical fields must be set to a value of 1 and other fields to \"hashed\""
                ),
            }
        }
        if hashed > 1 {
            bail!(
                BadValue,
                "Shard key {pattern} is invalid: a shard key can contain at most one 'hashed' field"
            );
        }
        let mut fields = pattern.iter();
        let Some((path, kind)) = fields.next() else {
            bail!(BadValue, "Shard key pattern must not be empty");
        };
        if fields.next().is_some() {
            bail!(
                InvalidOptions,
                "Compound shard keys are not supported: shard on one hashed field, such as {{{path}: \"hashed\"}}"
            );
        }
        if hashed == 0 {
            bail!(
                InvalidOptions,
                "Only hashed shard keys are supported: use {{{path}: \"hashed\"}} instead of {{{path}: {kind}}}"
            );
        }
        ShardKey::new(path)
    }

    /// A hashed key on `path`.
    pub fn new(path: &str) -> Result<ShardKey> {
        let parts: Vec<String> = path.split('.').map(str::to_string).collect();
        if parts.iter().any(|p| p.is_empty() || p.starts_with('$')) {
            bail!(
                BadValue,
                "Shard key field '{path}' is not a valid field name"
            );
        }
        Ok(ShardKey {
            path: path.to_string(),
            parts,
        })
    }

    /// The key pattern as MongoDB shows it: `{path: "hashed"}`.
    pub fn pattern(&self) -> Document {
        doc! { self.path.clone(): "hashed" }
    }

    /// The document's shard-key value, `None` when the field is missing.
    /// An array on the path is refused: a hashed key holds one value.
    pub fn value<'a>(&self, doc: &'a Document) -> Result<Option<&'a Bson>> {
        let mut current = doc;
        let last = self.parts.len() - 1;
        for (i, part) in self.parts.iter().enumerate() {
            let Some(value) = current.get(part) else {
                return Ok(None);
            };
            if let Bson::Array(_) = value {
                bail!(
                    BadValue,
                    "Shard key cannot contain array values or array descendants: field '{}' of the document is an array",
                    self.path
                );
            }
            if i == last {
                return Ok(Some(value));
            }
            match value {
                Bson::Document(d) => current = d,
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    /// [`ShardKey::value`] of a document still in BSON form, without
    /// decoding the rest of it.
    pub fn raw_value(&self, doc: &bson::RawDocument) -> Result<Option<Bson>> {
        let bad = |e: bson::error::Error| crate::err!(InvalidBSON, "invalid document: {e}");
        let mut current = doc;
        let last = self.parts.len() - 1;
        for (i, part) in self.parts.iter().enumerate() {
            let Some(value) = current.get(part).map_err(bad)? else {
                return Ok(None);
            };
            if let bson::RawBsonRef::Array(_) = value {
                bail!(
                    BadValue,
                    "Shard key cannot contain array values or array descendants: field '{}' of the document is an array",
                    self.path
                );
            }
            if i == last {
                return Ok(Some(Bson::try_from(value).map_err(bad)?));
            }
            match value {
                bson::RawBsonRef::Document(d) => current = d,
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    /// The hash the document is placed by.
    pub fn hash_of(&self, doc: &Document) -> Result<i64> {
        Ok(match self.value(doc)? {
            Some(v) => hash::hash_value(v),
            None => hash::hash_missing(),
        })
    }
}

/// One physical partition: the hashes `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    /// Unique across the server and never reused; shown as `p<id>`.
    pub id: u64,
    pub min: i64,
    pub max: i64,
}

impl Partition {
    pub fn name(&self) -> PartitionName {
        PartitionName(self.id)
    }

    pub fn contains(&self, hash: i64) -> bool {
        self.min <= hash && hash <= self.max
    }
}

/// A partition's name, as `shardName` in explain and `shard` in
/// `config.chunks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartitionName(pub u64);

impl fmt::Display for PartitionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{}", self.0)
    }
}

/// Which partition holds which hashes. Immutable: a split makes a new map
/// with a higher version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMap {
    pub version: u64,
    /// Sorted by `min`; together they cover every hash exactly once.
    pub partitions: Vec<Partition>,
}

impl PartitionMap {
    /// `count` partitions of (nearly) equal hash ranges, with ids from
    /// `first_id` on, at the split points MongoDB gives a hashed
    /// collection's initial chunks (`calculateHashedSplitPoints`):
    /// `(i64::MAX / count) * 2` apart and symmetric around 0.
    pub fn even(count: u64, first_id: u64) -> PartitionMap {
        let count = count.clamp(1, MAX_INITIAL_PARTITIONS) as i64;
        let interval = (i64::MAX / count).saturating_mul(2);
        let mut points = Vec::with_capacity(count as usize);
        let mut current = 0i64;
        if count % 2 == 0 {
            points.push(0);
            current = interval;
        } else {
            current += interval / 2;
        }
        for _ in 0..(count - 1) / 2 {
            points.push(current);
            points.push(-current);
            current = current.saturating_add(interval);
        }
        points.sort_unstable();
        let mut partitions = Vec::with_capacity(count as usize);
        let mut min = i64::MIN;
        for (i, &point) in points.iter().chain(std::iter::once(&i64::MAX)).enumerate() {
            let last = i == points.len();
            partitions.push(Partition {
                id: first_id + i as u64,
                min,
                max: if last { i64::MAX } else { point - 1 },
            });
            min = point;
        }
        PartitionMap {
            version: 1,
            partitions,
        }
    }

    /// The partition holding `hash`.
    pub fn locate(&self, hash: i64) -> &Partition {
        let i = self.partitions.partition_point(|p| p.max < hash);
        // The partitions cover every hash, so `i` is in range.
        &self.partitions[i.min(self.partitions.len() - 1)]
    }

    pub fn get(&self, id: u64) -> Option<&Partition> {
        self.partitions.iter().find(|p| p.id == id)
    }

    /// The map after splitting partition `id` at `at`: the new partitions
    /// `left_id` (`min..at`) and `right_id` (`at..=max`).
    pub fn split(&self, id: u64, at: i64, left_id: u64, right_id: u64) -> Option<PartitionMap> {
        let i = self.partitions.iter().position(|p| p.id == id)?;
        let old = self.partitions[i];
        if at <= old.min || at > old.max {
            return None;
        }
        let mut partitions = self.partitions.clone();
        partitions.splice(
            i..=i,
            [
                Partition {
                    id: left_id,
                    min: old.min,
                    max: at - 1,
                },
                Partition {
                    id: right_id,
                    min: at,
                    max: old.max,
                },
            ],
        );
        Some(PartitionMap {
            version: self.version + 1,
            partitions,
        })
    }

    /// The stored form.
    pub fn to_document(&self) -> Document {
        let partitions: Vec<Bson> = self
            .partitions
            .iter()
            .map(|p| Bson::Document(doc! {"id": p.id as i64, "min": p.min, "max": p.max}))
            .collect();
        doc! {"version": self.version as i64, "partitions": partitions}
    }

    /// Reads the stored form back, checking it covers the hash space.
    pub fn from_document(d: &Document) -> Option<PartitionMap> {
        let version = d.get_i64("version").ok()? as u64;
        let mut partitions = Vec::new();
        for p in d.get_array("partitions").ok()? {
            let p = p.as_document()?;
            partitions.push(Partition {
                id: p.get_i64("id").ok()? as u64,
                min: p.get_i64("min").ok()?,
                max: p.get_i64("max").ok()?,
            });
        }
        let map = PartitionMap {
            version,
            partitions,
        };
        map.is_complete().then_some(map)
    }

    /// True when the partitions cover every hash once, in order.
    fn is_complete(&self) -> bool {
        let (Some(first), Some(last)) = (self.partitions.first(), self.partitions.last()) else {
            return false;
        };
        first.min == i64::MIN
            && last.max == i64::MAX
            && self
                .partitions
                .windows(2)
                .all(|w| w[0].max.checked_add(1) == Some(w[1].min))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_maps_cover_the_hash_space() {
        for n in [1, 2, 3, 4, 7, 16, 64, 8192] {
            let map = PartitionMap::even(n, 10);
            assert_eq!(map.partitions.len() as u64, n);
            assert!(map.is_complete(), "{n} partitions leave a gap");
            assert_eq!(map.partitions[0].id, 10);
        }
        // Bounds of a real MongoDB cluster's 12 initial hashed chunks.
        let twelve = PartitionMap::even(12, 0);
        assert_eq!(twelve.partitions[1].min, -7686143364045646500);
        assert_eq!(twelve.partitions[2].min, -6148914691236517200);
        assert_eq!(twelve.partitions[6].min, 0);
        let four = PartitionMap::even(4, 0);
        let mins: Vec<i64> = four.partitions.iter().map(|p| p.min).collect();
        let interval = (i64::MAX / 4) * 2;
        assert_eq!(mins, [i64::MIN, -interval, 0, interval]);
        let three = PartitionMap::even(3, 0);
        assert_eq!(three.partitions[1].min, -(i64::MAX / 3));
    }

    #[test]
    fn locate_finds_the_owner() {
        let map = PartitionMap::even(4, 0);
        assert_eq!(map.locate(i64::MIN).id, 0);
        assert_eq!(map.locate(-1).id, 1);
        assert_eq!(map.locate(0).id, 2);
        assert_eq!(map.locate(i64::MAX).id, 3);
    }

    #[test]
    fn split_replaces_one_partition_by_two() {
        let map = PartitionMap::even(2, 0);
        let split = map.split(1, 100, 2, 3).unwrap();
        assert_eq!(split.version, 2);
        assert!(split.is_complete());
        assert_eq!(split.locate(99).id, 2);
        assert_eq!(split.locate(100).id, 3);
        assert_eq!(split.locate(-5).id, 0);
        assert!(
            map.split(1, 0, 2, 3).is_none(),
            "a split at min leaves nothing left"
        );
        assert!(map.split(9, 5, 2, 3).is_none());
    }

    #[test]
    fn maps_round_trip_through_storage() {
        let map = PartitionMap::even(3, 4).split(5, 7, 8, 9).unwrap();
        assert_eq!(PartitionMap::from_document(&map.to_document()), Some(map));
        assert_eq!(
            PartitionMap::from_document(&doc! {"version": 1_i64, "partitions": []}),
            None
        );
    }

    #[test]
    fn shard_key_values_follow_dotted_paths() {
        let key = ShardKey::new("customer.region").unwrap();
        let d = doc! {"customer": {"region": "eu"}};
        assert_eq!(key.value(&d).unwrap(), Some(&Bson::String("eu".into())));
        assert_eq!(key.value(&doc! {"customer": 5}).unwrap(), None);
        assert_eq!(key.value(&doc! {}).unwrap(), None);
        assert!(key.value(&doc! {"customer": [{"region": "eu"}]}).is_err());
        assert_eq!(key.hash_of(&doc! {}).unwrap(), hash::hash_missing());
        let raw = bson::RawDocumentBuf::from_bytes(d.to_vec().unwrap()).unwrap();
        assert_eq!(
            key.raw_value(&raw).unwrap(),
            Some(Bson::String("eu".into()))
        );
        let raw =
            bson::RawDocumentBuf::from_bytes(doc! {"customer": [1]}.to_vec().unwrap()).unwrap();
        assert!(key.raw_value(&raw).is_err());
    }

    #[test]
    fn only_single_hashed_keys_parse() {
        assert!(ShardKey::parse(&doc! {"k": "hashed"}).is_ok());
        assert!(ShardKey::parse(&doc! {"k": 1}).is_err());
        assert!(ShardKey::parse(&doc! {"a": "hashed", "b": 1}).is_err());
        assert!(ShardKey::parse(&doc! {}).is_err());
        let code = |d: Document| ShardKey::parse(&d).unwrap_err().code;
        use crate::error::ErrorCode;
        assert_eq!(code(doc! {"a": -1}), ErrorCode::BadValue);
        assert_eq!(
            code(doc! {"a": "hashed", "b": "hashed"}),
            ErrorCode::BadValue
        );
        assert_eq!(code(doc! {"a": 1}), ErrorCode::InvalidOptions);
        assert_eq!(
            code(doc! {"a": "hashed", "b": 1}),
            ErrorCode::InvalidOptions
        );
    }
}
