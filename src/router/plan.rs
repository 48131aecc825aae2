//! The query plan: the one decision, made once per operation, of what a
//! read does. Sits in the router, between the catalog (what a collection
//! and its partitions are) and the executor in `router/mod.rs` (which
//! turns a plan into records).
//!
//! `find`, `count`, `distinct`, an aggregate's partition inputs, the
//! targeting of updates and deletes, and `explain` all ask
//! [`Router::plan`] and do what it says; explain renders the same plan.
//! So "is `_id` pinned?", "are shard-key hashes pinned?" and "index or
//! scan?" are each answered here and nowhere else.
//!
//! An unsharded collection is a collection with one partition, named
//! [`PRIMARY_PARTITION`], whose hash range is [`UNSHARDED_HASH`]: its
//! records sit in `_id` order, so a range of `_id` is a range of keys.

use std::collections::BTreeSet;
use std::ops::Bound;

use bson::Bson;

use super::catalog::{Collection, Sharding};
use super::Reader;
use super::{key_hashes, ChosenPlan, FindSpec, Router, PRIMARY_PARTITION, UNSHARDED_HASH};
use crate::aggregate::DEFAULT_MAX_BLOCKING_BYTES;
use crate::error::Result;
use crate::index::plan::{self as index_plan, Hint, Plan};
use crate::partition::Partition;
use crate::query::filter::Filter;
use crate::query::sort::SortSpec;
use crate::storage::{blocking, keystring, RecordKey};

/// What one operation reads and how: built by [`Router::plan`].
#[derive(Debug, Clone)]
pub struct QueryPlan {
    /// The partitions read, in hash order, each with its access path.
    pub parts: Vec<PartitionPlan>,
    /// Whether the collection is sharded (partitions hold many hashes).
    pub sharded: bool,
    /// The shard key's path, for a sharded collection.
    pub shard_key: Option<String>,
    /// The index scan the partitions run, when one is used.
    pub index: Option<ChosenPlan>,
    /// The hashes of the shard-key values the filter pins, if it does.
    pub key_hashes: Option<Vec<i64>>,
    /// How results come out in the requested order.
    pub sort: SortStrategy,
    pub skip: u64,
    /// The most results returned; `None` for all.
    pub limit: Option<u64>,
    pub cost: Cost,
}

/// One partition's part of a plan.
#[derive(Debug, Clone)]
pub struct PartitionPlan {
    /// As explain and `config.shards` show it.
    pub name: String,
    pub partition: Partition,
    pub access: Access,
}

/// How a partition reaches the records a filter may match.
#[derive(Debug, Clone)]
pub enum Access {
    /// Exact record keys (the filter pins `_id`), in key order or its
    /// reverse.
    IdPoints {
        keys: BTreeSet<RecordKey>,
        reverse: bool,
    },
    /// Every record under these hashes (the filter pins the shard key).
    KeyHashes(Vec<i64>),
    /// Entries of a secondary index, then their records unless covered.
    Index(ChosenPlan),
    /// A range of `keystring(_id)` under the partition's one hash, in
    /// `_id` order, forward or `reverse`.
    IdRange {
        from: Bound<Vec<u8>>,
        to: Bound<Vec<u8>>,
        reverse: bool,
    },
    /// The `_id` index in `_id` order, keeping this partition's entries:
    /// a sharded query sorted by `_id` alone streams instead of sorting.
    IdIndex { reverse: bool },
    /// Every record of the partition.
    Scan,
}

/// How results are put in the requested order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortStrategy {
    /// No order asked: access order.
    Unsorted,
    /// The access path yields the requested order: results stream.
    Streamed,
    /// Only the best `k = skip + limit` rows are kept.
    TopK(usize),
    /// Every match is sorted, within this many bytes (past them it
    /// spills or fails, per the query's limits).
    Blocking { memory_limit: u64 },
}

/// What a plan is expected to read; `None` when unknown before reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// Documents expected to be examined.
    pub docs: Option<u64>,
}

impl QueryPlan {
    /// The plan of a collection that does not exist: a scan of its one
    /// (empty) partition.
    pub fn of_missing_collection(spec: &FindSpec) -> QueryPlan {
        QueryPlan {
            parts: vec![PartitionPlan {
                name: PRIMARY_PARTITION.to_string(),
                partition: Partition {
                    id: 0,
                    min: UNSHARDED_HASH,
                    max: UNSHARDED_HASH,
                },
                access: Access::IdRange {
                    from: Bound::Unbounded,
                    to: Bound::Unbounded,
                    reverse: matches!(spec.hint, Some(Hint::Natural(true))),
                },
            }],
            sharded: false,
            shard_key: None,
            index: None,
            key_hashes: None,
            sort: match spec.sort {
                None => SortStrategy::Unsorted,
                Some(_) => SortStrategy::Blocking {
                    memory_limit: DEFAULT_MAX_BLOCKING_BYTES as u64,
                },
            },
            skip: spec.skip,
            limit: spec.limit.filter(|&l| l > 0),
            cost: Cost { docs: Some(0) },
        }
    }

    /// A plan of a few point reads, cheap enough to run on the caller's
    /// async worker.
    pub fn is_point_read(&self) -> bool {
        self.parts
            .iter()
            .all(|p| matches!(p.access, Access::IdPoints { .. }))
    }

    /// The rows each partition must produce: `skip + limit` when there
    /// is a limit.
    pub fn keep(&self) -> Option<usize> {
        self.limit
            .map(|l| usize::try_from(l.saturating_add(self.skip)).unwrap_or(usize::MAX))
    }

    /// `skip` and `limit` as counts of rows.
    pub fn window(&self) -> (usize, Option<usize>) {
        let skip = usize::try_from(self.skip).unwrap_or(usize::MAX);
        let limit = self.limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        (skip, limit)
    }

    /// True when every partition reads the `_id` index in `_id` order.
    pub fn through_id_index(&self) -> Option<bool> {
        match self.parts.first()?.access {
            Access::IdIndex { reverse } => Some(reverse),
            _ => None,
        }
    }
}

impl Router {
    /// Plans a read of `coll`. `reader` resolves pinned `_id`s to the
    /// partitions that hold them, and its partition map is the one the
    /// plan targets (writers pass the live store, which is consistent
    /// under their lock; readers a snapshot).
    pub(crate) fn plan(
        &self,
        coll: &Collection,
        spec: &FindSpec,
        reader: &Reader,
    ) -> Result<QueryPlan> {
        plan(coll, spec, reader)
    }
}

/// See [`Router::plan`].
pub(crate) fn plan(coll: &Collection, spec: &FindSpec, reader: &Reader) -> Result<QueryPlan> {
    let filter = spec.filter.as_ref();
    let limit = spec.limit.filter(|&l| l > 0);
    let index = choose_index(coll, spec)?;
    let ids = filter.and_then(|f| f.equality_values("_id"));
    let id_sort = spec.sort.as_ref().and_then(id_sort_direction);
    let parts = match &coll.sharding {
        None => {
            let primary = Partition {
                id: 0,
                min: UNSHARDED_HASH,
                max: UNSHARDED_HASH,
            };
            // Natural order is `_id` order; `{$natural: -1}` reverses it.
            let reverse = match &spec.sort {
                None => matches!(spec.hint, Some(Hint::Natural(true))),
                Some(_) => id_sort == Some(false),
            };
            let access = match (&index, &ids) {
                (Some(chosen), _) => Access::Index(chosen.clone()),
                (None, Some(ids)) => Access::IdPoints {
                    keys: ids
                        .iter()
                        .map(|v| RecordKey::new(coll.id, UNSHARDED_HASH, keystring::encode_id(v)))
                        .collect(),
                    reverse,
                },
                (None, None) => {
                    let (from, to) = id_key_range(filter);
                    Access::IdRange { from, to, reverse }
                }
            };
            vec![PartitionPlan {
                name: PRIMARY_PARTITION.to_string(),
                partition: primary,
                access,
            }]
        }
        Some(sharding) => {
            sharded_parts(coll, sharding, spec, index.as_ref(), ids, id_sort, reader)?
        }
    };
    let in_order = match &spec.sort {
        None => false,
        Some(_) => parts.iter().all(|p| match &p.access {
            Access::Index(chosen) => chosen.scan.provides_sort,
            Access::IdRange { .. } | Access::IdIndex { .. } => id_sort.is_some(),
            // A single point read per partition is trivially in order.
            Access::IdPoints { keys, .. } => {
                (id_sort.is_some() && coll.sharding.is_none()) || keys.len() <= 1
            }
            _ => false,
        }),
    };
    let sort = match (&spec.sort, in_order, limit) {
        (None, _, _) => SortStrategy::Unsorted,
        (Some(_), true, _) => SortStrategy::Streamed,
        (Some(_), false, Some(l)) => {
            SortStrategy::TopK(usize::try_from(l.saturating_add(spec.skip)).unwrap_or(usize::MAX))
        }
        (Some(_), false, None) => SortStrategy::Blocking {
            memory_limit: spec
                .sort_limits
                .as_ref()
                .map_or(DEFAULT_MAX_BLOCKING_BYTES as u64, |l| {
                    l.max_blocking_bytes as u64
                }),
        },
    };
    let cost = estimate(coll, &parts);
    Ok(QueryPlan {
        parts,
        sharded: coll.sharding.is_some(),
        shard_key: coll.sharding.as_ref().map(|s| s.key.path.clone()),
        key_hashes: coll.sharding.as_ref().and_then(|s| key_hashes(s, filter)),
        index,
        sort,
        skip: spec.skip,
        limit,
        cost,
    })
}

/// The partitions of a sharded collection a query reads, each with its
/// access path.
fn sharded_parts(
    coll: &Collection,
    sharding: &Sharding,
    spec: &FindSpec,
    index: Option<&ChosenPlan>,
    ids: Option<Vec<Bson>>,
    id_sort: Option<bool>,
    reader: &Reader,
) -> Result<Vec<PartitionPlan>> {
    let filter = spec.filter.as_ref();
    let map = reader.map_of(sharding);
    let hashes = key_hashes(sharding, filter);
    let mut owners: Vec<Partition> = match &hashes {
        Some(hashes) => {
            let mut owners: Vec<Partition> = hashes.iter().map(|&h| *map.locate(h)).collect();
            owners.dedup_by_key(|p| p.id);
            owners
        }
        None => map.partitions.clone(),
    };
    // `_id`s without the shard key: the `_id` index says which hash
    // (and so which partition) holds each.
    let mut id_hashes: Option<Vec<(i64, Vec<u8>)>> = None;
    if let (Some(ids), None, None) = (&ids, &hashes, index) {
        let mut found = Vec::new();
        for v in ids {
            let id_key = keystring::encode_id(v);
            let entry = blocking::wait(reader.view.id_entry(coll.id, &id_key))?;
            if let Some(h) = entry {
                found.push((h, id_key));
            }
        }
        owners.retain(|p| found.iter().any(|(h, _)| p.contains(*h)));
        id_hashes = Some(found);
    }
    let by_id_index = index.is_none() && ids.is_none() && hashes.is_none() && id_sort.is_some();
    Ok(owners
        .into_iter()
        .map(|part| {
            let access = if let Some(chosen) = index {
                Access::Index(chosen.clone())
            } else if let Some(found) = &id_hashes {
                Access::IdPoints {
                    keys: found
                        .iter()
                        .filter(|(h, _)| part.contains(*h))
                        .map(|(h, id_key)| RecordKey::new(coll.id, *h, id_key.clone()))
                        .collect(),
                    reverse: false,
                }
            } else if let Some(hashes) = &hashes {
                let mine: Vec<i64> = hashes
                    .iter()
                    .copied()
                    .filter(|&h| part.contains(h))
                    .collect();
                match &ids {
                    // Key and `_id` both pinned: exact record keys.
                    Some(ids) => Access::IdPoints {
                        keys: mine
                            .iter()
                            .flat_map(|&h| {
                                ids.iter().map(move |v| {
                                    RecordKey::new(coll.id, h, keystring::encode_id(v))
                                })
                            })
                            .collect(),
                        reverse: false,
                    },
                    None => Access::KeyHashes(mine),
                }
            } else if by_id_index {
                Access::IdIndex {
                    reverse: id_sort == Some(false),
                }
            } else {
                Access::Scan
            };
            PartitionPlan {
                name: part.name().to_string(),
                partition: part,
                access,
            }
        })
        .collect())
}

/// The index scan a query uses, if any. An equality on `_id` is answered
/// by `_id` lookups; a hint of the `_id` index or `$natural` means the
/// records themselves.
fn choose_index(coll: &Collection, spec: &FindSpec) -> Result<Option<ChosenPlan>> {
    let (filter, hint) = (spec.filter.as_ref(), spec.hint.as_ref());
    match hint {
        Some(Hint::Name(n)) if n == crate::index::ID_INDEX_NAME => return Ok(None),
        Some(Hint::Pattern(p)) if *p == bson::doc! {"_id": 1} => return Ok(None),
        None if filter.is_some_and(|f| f.equality_values("_id").is_some()) => return Ok(None),
        _ => {}
    }
    let indexes = coll.indexes();
    if indexes.is_empty() && hint.is_none() {
        return Ok(None);
    }
    Ok(
        match index_plan::choose(&indexes, filter, spec.sort.as_ref(), hint)? {
            Plan::Index(scan) => {
                let covered =
                    index_plan::covers(&scan, filter, spec.projection.as_ref(), spec.sort.as_ref());
                Some(ChosenPlan { scan, covered })
            }
            Plan::Collscan => None,
        },
    )
}

/// Expected documents examined: the point count for point reads, the
/// partitions' document counts for scans of a sharded collection,
/// unknown otherwise.
fn estimate(coll: &Collection, parts: &[PartitionPlan]) -> Cost {
    let usage = coll.sharding.as_ref().map(|s| s.usage());
    let mut docs = 0u64;
    for p in parts {
        match (&p.access, &usage) {
            (Access::IdPoints { keys, .. }, _) => docs = docs.saturating_add(keys.len() as u64),
            (Access::Scan, Some(usage)) => {
                docs = docs.saturating_add(usage.get(&p.partition.id).map_or(0, |u| u.count))
            }
            _ => return Cost { docs: None },
        }
    }
    Cost { docs: Some(docs) }
}

/// `Some(ascending)` when the sort is on `_id` alone.
pub(crate) fn id_sort_direction(sort: &SortSpec) -> Option<bool> {
    match sort.fields() {
        [only] if only.path() == "_id" => Some(only.ascending()),
        _ => None,
    }
}

/// The bounds on `keystring(_id)` that the `_id` bounds of `filter`
/// allow (unbounded when it has none).
pub(crate) fn id_key_range(filter: Option<&Filter>) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let (all_from, all_to) = (Bound::Unbounded, Bound::Unbounded);
    let Some((lower, upper)) = filter.and_then(|f| f.range_bounds("_id")) else {
        return (all_from, all_to);
    };
    let with_prefix = |tail: &[u8]| tail.to_vec();
    // A comparison only matches values of its own type class, so a
    // one-sided range stops at the edge of that class.
    let class_start = |v: &Bson| with_prefix(&keystring::encode_id(v)[..1]);
    let class_end = |v: &Bson| {
        let first = keystring::encode_id(v).first().copied().unwrap_or(0);
        with_prefix(&[first.saturating_add(1)])
    };
    let from = match &lower {
        Bound::Included(v) => Bound::Included(with_prefix(&keystring::encode_id(v))),
        Bound::Excluded(v) => Bound::Excluded(with_prefix(&keystring::encode_id(v))),
        Bound::Unbounded => match &upper {
            Bound::Included(v) | Bound::Excluded(v) => Bound::Included(class_start(v)),
            Bound::Unbounded => all_from,
        },
    };
    let to = match &upper {
        Bound::Included(v) => Bound::Included(with_prefix(&keystring::encode_id(v))),
        Bound::Excluded(v) => Bound::Excluded(with_prefix(&keystring::encode_id(v))),
        Bound::Unbounded => match &lower {
            Bound::Included(v) | Bound::Excluded(v) => Bound::Excluded(class_end(v)),
            Bound::Unbounded => all_to,
        },
    };
    (from, to)
}
