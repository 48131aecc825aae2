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

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use bson::{Bson, Document};

use super::activity;
use super::catalog::{Collection, Sharding};
use super::Reader;
use super::{ChosenPlan, FindSpec, KeyBounds, Router, PRIMARY_PARTITION, UNSHARDED_HASH};
use crate::aggregate::DEFAULT_MAX_BLOCKING_BYTES;
use crate::bail;
use crate::error::{Error, ErrorCode, Result};
use crate::index::plan::{self as index_plan, Hint, IndexPlan, Plan};
use crate::index::KeyKind;
use crate::partition::hash;
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

impl QueryPlan {
    /// The plan in one line, as MongoDB's profiler and slow-query log
    /// write `planSummary`: `IDHACK`, `COLLSCAN`, or `IXSCAN { a: 1 }`
    /// naming the index (the shard key's hashed index when the filter
    /// pins the key).
    pub fn summary(&self) -> String {
        let ixscan = |key: &Document| {
            let fields: Vec<String> = key
                .iter()
                .map(|(k, v)| match v {
                    Bson::String(s) => format!("{k}: \"{s}\""),
                    other => format!("{k}: {other}"),
                })
                .collect();
            format!("IXSCAN {{ {} }}", fields.join(", "))
        };
        match self.parts.first().map(|p| &p.access) {
            Some(Access::IdPoints { .. }) => "IDHACK".to_string(),
            Some(Access::Index(chosen)) => ixscan(&chosen.scan.index.key),
            Some(Access::KeyHashes { .. }) => {
                let path = self.shard_key.clone().unwrap_or_default();
                ixscan(&bson::doc! {path: "hashed"})
            }
            Some(Access::IdIndex { .. }) => ixscan(&bson::doc! {"_id": 1}),
            Some(Access::IdRange { .. } | Access::Natural { .. } | Access::Scan) | None => {
                "COLLSCAN".to_string()
            }
        }
    }
}

/// One partition's part of a plan.
#[derive(Debug, Clone)]
pub struct PartitionPlan {
    /// As explain and `config.shards` show it.
    pub name: String,
    pub partition: Partition,
    pub access: Access,
}

impl PartitionPlan {
    /// True when every record a range access reads matches `filter`:
    /// each of its conditions is one the access applies itself, a
    /// comparison on `_id` (the range it reads) or the equality on
    /// `shard_key` its hashes come from (records of another key value
    /// under the same 64-bit hash aside). Such a read stops at its limit,
    /// and checking the filter before the full match finds nothing to
    /// drop.
    pub fn reads_only_matches(&self, filter: Option<&Filter>, shard_key: Option<&str>) -> bool {
        let by_key = match &self.access {
            Access::KeyHashes { .. } => true,
            Access::IdRange { .. } => false,
            Access::Index(chosen) => return index_applies_filter(&chosen.scan, filter),
            _ => return false,
        };
        let Some(filter) = filter else {
            return true;
        };
        filter
            .conjuncts()
            .iter()
            .all(|c| match (c.path(), c.range()) {
                (Some("_id"), Some(_)) => true,
                (Some(path), Some((Bound::Included(lo), Bound::Included(hi)))) => {
                    by_key && Some(path) == shard_key && lo == hi
                }
                _ => false,
            })
    }
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
    /// The records under these hashes (the filter pins the shard key)
    /// whose `keystring(_id)` lies in `from..to`: under one hash they
    /// are in `_id` order, forward or `reverse`.
    KeyHashes {
        hashes: Vec<i64>,
        from: Bound<Vec<u8>>,
        to: Bound<Vec<u8>>,
        reverse: bool,
    },
    /// Entries of a secondary index, then their records unless covered.
    Index(Arc<ChosenPlan>),
    /// A range of `keystring(_id)` under the partition's one hash, in
    /// `_id` order, forward or `reverse`.
    IdRange {
        from: Bound<Vec<u8>>,
        to: Bound<Vec<u8>>,
        reverse: bool,
    },
    /// The `_id` index in `_id` order over a range of `keystring(_id)`,
    /// keeping this partition's entries: a sharded query sorted by `_id`
    /// alone streams instead of sorting, and `min()`/`max()` on the `_id`
    /// index read only their range.
    IdIndex {
        from: Bound<Vec<u8>>,
        to: Bound<Vec<u8>>,
        reverse: bool,
    },
    /// A capped collection's records in insertion order, or newest
    /// first ([`super::capped`]).
    Natural { reverse: bool },
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

impl SortStrategy {
    /// True when the results must be put in order after they are read:
    /// otherwise they come out in the access path's order.
    pub fn sorts(self) -> bool {
        matches!(self, SortStrategy::TopK(_) | SortStrategy::Blocking { .. })
    }
}

/// The most documents a read may be expected to examine and still be
/// cheap ([`QueryPlan::is_cheap`]): about a first batch.
const CHEAP_READ_DOCS: u64 = 128;

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

    /// A plan of a few point reads.
    pub fn is_point_read(&self) -> bool {
        self.parts
            .iter()
            .all(|p| matches!(p.access, Access::IdPoints { .. }))
    }

    /// A plan cheap enough to run on the caller's async worker: a few
    /// point reads, or a read its cost bounds to a few documents (a
    /// limited range under one shard-key value, a tiny collection).
    pub fn is_cheap(&self) -> bool {
        self.is_point_read() || self.cost.docs.is_some_and(|d| d <= CHEAP_READ_DOCS)
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

    /// When every partition reads the `_id` index in `_id` order: the
    /// range of `keystring(_id)` they read and whether in reverse.
    pub fn through_id_index(&self) -> Option<(IdKeyRange, bool)> {
        match &self.parts.first()?.access {
            Access::IdIndex { from, to, reverse } => Some(((from.clone(), to.clone()), *reverse)),
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
        if let (Some(_), Some(sort)) = (self.options.cosmos_strict, &spec.sort) {
            let key = coll.sharding.as_ref().map(|s| s.key.path.as_str());
            super::strict::check_sort(&coll.indexes(), key, sort)?;
        }
        let plan = plan(coll, spec, reader)?;
        super::charge::note_plan(|| plan.summary());
        self.sample_keys(coll, spec.filter.as_ref(), &plan);
        Ok(plan)
    }

    /// With activity tracked, counts the shard-key values a plan targets
    /// toward its collection's hot keys, for one operation in
    /// [`activity::SAMPLE_EVERY`]; nothing for a plan that pins no key.
    pub(crate) fn sample_keys(&self, coll: &Collection, filter: Option<&Filter>, plan: &QueryPlan) {
        let (Some(tracked), Some(sharding)) = (self.activity(), &coll.sharding) else {
            return;
        };
        if plan.key_hashes.is_none() || !activity::sampled() {
            return;
        }
        let Some(values) = key_values(sharding, filter) else {
            return;
        };
        for value in values.iter().take(SAMPLED_VALUES) {
            let hash = value
                .as_ref()
                .map_or_else(hash::hash_missing, hash::hash_value);
            tracked.observe_key(coll.id, hash, || activity::show(value.as_ref()));
        }
    }
}

/// Most values of one `$in` a sampled operation counts.
const SAMPLED_VALUES: usize = 16;

/// See [`Router::plan`].
pub(crate) fn plan(coll: &Collection, spec: &FindSpec, reader: &Reader) -> Result<QueryPlan> {
    let filter = spec.filter.as_ref();
    let limit = spec.limit.filter(|&l| l > 0);
    let mut index =
        choose_index(coll, spec)?.filter(|chosen| !redundant_with_key(coll, spec, chosen));
    crate::index::geo::check_near(spec.filter.as_ref(), index.as_ref().map(|c| &c.scan))?;
    // `min()`/`max()` narrow the hinted index: a secondary one's scan, or
    // the `_id` range every access path below reads.
    let mut id_bounds = None;
    if let Some(bounds) = &spec.key_bounds {
        match &mut index {
            Some(chosen) => within_key_bounds(chosen, bounds)?,
            None if matches!(spec.hint, Some(Hint::Natural(_))) => bail!(
                CommandNotSupported,
                "min()/max() with a $natural hint is not supported by Shardgate; \
                 hint the _id index instead"
            ),
            None => id_bounds = Some(id_key_bounds(bounds)?),
        }
    }
    let id_range = |filter: Option<&Filter>| {
        let (from, to) = id_key_range(filter);
        match &id_bounds {
            None => (from, to),
            Some((lower, upper)) => (
                tighter(from, lower.clone(), Ordering::Greater),
                tighter(to, upper.clone(), Ordering::Less),
            ),
        }
    };
    let mut ids = pinned_ids(filter);
    if let (Some(ids), Some(range)) = (&mut ids, &id_bounds) {
        ids.retain(|v| range.contains(&keystring::encode_id(v)));
    }
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
                (Some(chosen), _) => Access::Index(Arc::new(chosen.clone())),
                (None, Some(ids)) => Access::IdPoints {
                    keys: ids
                        .iter()
                        .map(|v| RecordKey::new(coll.id, UNSHARDED_HASH, keystring::encode_id(v)))
                        .collect(),
                    reverse,
                },
                (None, None) => {
                    let (from, to) = id_range(filter);
                    let whole = matches!((&from, &to), (Bound::Unbounded, Bound::Unbounded));
                    // A capped collection's scan keeps insertion order,
                    // unless the query sorts by `_id`.
                    if coll.options().capped.is_some() && whole && id_sort.is_none() {
                        Access::Natural {
                            reverse: matches!(spec.hint, Some(Hint::Natural(true))),
                        }
                    } else {
                        Access::IdRange { from, to, reverse }
                    }
                }
            };
            vec![PartitionPlan {
                name: PRIMARY_PARTITION.to_string(),
                partition: primary,
                access,
            }]
        }
        Some(sharding) => {
            let ids = IdTargets {
                pinned: ids,
                range: id_range(filter),
                bounded: id_bounds.is_some(),
            };
            sharded_parts(coll, sharding, spec, index.as_ref(), ids, id_sort, reader)?
        }
    };
    let in_order = match &spec.sort {
        None => false,
        Some(_) => parts.iter().all(|p| match &p.access {
            Access::Index(chosen) => chosen.scan.provides_sort,
            Access::IdRange { .. } | Access::IdIndex { .. } => id_sort.is_some(),
            // Under one hash records are in `_id` order.
            Access::KeyHashes { hashes, .. } => id_sort.is_some() && hashes.len() <= 1,
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
    let cost = estimate(coll, &parts, filter, &sort, spec.skip, limit);
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

/// What a sharded query asks of `_id`: the values it pins, the range of
/// `keystring(_id)` it reads, and whether `min()`/`max()` bound that range
/// (which only the `_id` index, or the pinned hashes, can read).
struct IdTargets {
    pinned: Option<Vec<Bson>>,
    range: IdKeyRange,
    bounded: bool,
}

/// The partitions of a sharded collection a query reads, each with its
/// access path.
fn sharded_parts(
    coll: &Collection,
    sharding: &Sharding,
    spec: &FindSpec,
    index: Option<&ChosenPlan>,
    targets: IdTargets,
    id_sort: Option<bool>,
    reader: &Reader,
) -> Result<Vec<PartitionPlan>> {
    let IdTargets {
        pinned: ids,
        range: (id_from, id_to),
        bounded,
    } = targets;
    let filter = spec.filter.as_ref();
    let map = reader.map_of(sharding);
    let hashes = key_hashes(sharding, filter);
    let owners: Vec<Partition> = match &hashes {
        Some(hashes) => {
            let mut owners: Vec<Partition> = hashes.iter().map(|&h| *map.locate(h)).collect();
            owners.dedup_by_key(|p| p.id);
            owners
        }
        None => map.partitions.clone(),
    };
    // `_id`s without the shard key: the query targets every partition,
    // as a mongos does, and the `_id` index says which hash (and so which
    // partition) holds each; the others read nothing.
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
        id_hashes = Some(found);
    }
    let by_id_index =
        index.is_none() && ids.is_none() && hashes.is_none() && (id_sort.is_some() || bounded);
    // One index plan, shared by every partition that runs it.
    let index = index.map(|chosen| Arc::new(chosen.clone()));
    Ok(owners
        .into_iter()
        .map(|part| {
            let access = if let Some(chosen) = &index {
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
                    None => Access::KeyHashes {
                        hashes: mine,
                        from: id_from.clone(),
                        to: id_to.clone(),
                        reverse: id_sort == Some(false),
                    },
                }
            } else if by_id_index {
                Access::IdIndex {
                    from: id_from.clone(),
                    to: id_to.clone(),
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
    let wants_score = spec.sort.as_ref().is_some_and(SortSpec::wants_text_score)
        || spec
            .projection
            .as_ref()
            .is_some_and(|p| p.wants_text_score());
    if wants_score && filter.and_then(Filter::text).is_none() {
        return Err(crate::query::text::score_unavailable());
    }
    if let Some(filter) = filter.filter(|f| f.text().is_some()) {
        let scan = crate::index::text::plan(&coll.indexes(), filter)?;
        return Ok(Some(ChosenPlan {
            scan,
            covered: false,
        }));
    }
    match hint {
        Some(Hint::Name(n)) if n == crate::index::ID_INDEX_NAME => return Ok(None),
        Some(Hint::Pattern(p)) if *p == bson::doc! {"_id": 1} => return Ok(None),
        None if pinned_ids(filter).is_some() => return Ok(None),
        _ => {}
    }
    let indexes = coll.indexes();
    if indexes.is_empty() && hint.is_none() {
        return Ok(None);
    }
    if let Some(scan) = crate::index::geo::choose(&indexes, filter, hint) {
        return Ok(Some(ChosenPlan {
            scan,
            covered: false,
        }));
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

/// Narrows an index scan to a `find`'s `min` (inclusive) and `max`
/// (exclusive), given as key values of the hinted index in its field
/// order (51174 otherwise), as MongoDB bounds a cursor by them.
fn within_key_bounds(chosen: &mut ChosenPlan, bounds: &KeyBounds) -> Result<()> {
    let index = chosen.scan.index.clone();
    let encode = |values: &bson::Document| -> Result<Vec<u8>> {
        let fields = index.fields.iter().map(|f| f.path.as_str());
        if !values.keys().map(String::as_str).eq(fields) {
            return Err(Error::new(
                ErrorCode::from_number(51174),
                "The index chosen is not equal to min/max",
            ));
        }
        let values: Vec<Bson> = values.values().cloned().collect();
        Ok(index.encode(&values))
    };
    let (lower, upper) = encoded_bounds(bounds, encode)?;
    chosen.scan.ranges = chosen
        .scan
        .ranges
        .iter()
        .map(|(from, to)| {
            (
                tighter(from.clone(), lower.clone(), Ordering::Greater),
                tighter(to.clone(), upper.clone(), Ordering::Less),
            )
        })
        .filter(|(from, to)| !empty_range(from, to))
        .collect();
    Ok(())
}

/// A range of encoded keys (of `_id`, or of an index).
pub(crate) type IdKeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// `min()`/`max()` on the `_id` index: the range of `keystring(_id)`
/// they admit, `[min, max)`, in BSON order across types as the index
/// orders them (51174 for any field but `_id`).
fn id_key_bounds(bounds: &KeyBounds) -> Result<IdKeyRange> {
    let encode = |values: &bson::Document| -> Result<Vec<u8>> {
        match values.iter().next() {
            Some((field, value)) if field == "_id" && values.len() == 1 => {
                Ok(keystring::encode_id(value))
            }
            _ => Err(Error::new(
                ErrorCode::from_number(51174),
                "The index chosen is not equal to min/max",
            )),
        }
    };
    encoded_bounds(bounds, encode)
}

/// `min` (inclusive) and `max` (exclusive) as key bounds, each encoded
/// by `encode`.
fn encoded_bounds(
    bounds: &KeyBounds,
    encode: impl Fn(&bson::Document) -> Result<Vec<u8>>,
) -> Result<IdKeyRange> {
    let lower = match &bounds.min {
        Some(min) => Bound::Included(encode(min)?),
        None => Bound::Unbounded,
    };
    let upper = match &bounds.max {
        Some(max) => Bound::Excluded(encode(max)?),
        None => Bound::Unbounded,
    };
    Ok((lower, upper))
}

/// Of two bounds on the same side, the one that admits less: the greater
/// lower bound (`wins` = `Greater`) or the smaller upper one (`Less`).
fn tighter(a: Bound<Vec<u8>>, b: Bound<Vec<u8>>, wins: Ordering) -> Bound<Vec<u8>> {
    match (&a, &b) {
        (Bound::Unbounded, _) => b,
        (_, Bound::Unbounded) => a,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => {
            match x.cmp(y) {
                Ordering::Equal if matches!(a, Bound::Excluded(_)) => a,
                Ordering::Equal => b,
                o if o == wins => a,
                _ => b,
            }
        }
    }
}

/// True when no key lies between `from` and `to`.
fn empty_range(from: &Bound<Vec<u8>>, to: &Bound<Vec<u8>>) -> bool {
    match (from, to) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a >= b
        }
        _ => false,
    }
}

/// Whether `chosen` is an index on the shard key alone while the filter
/// pins the key: the records under the pinned hashes are its candidates
/// already, read without index lookups and in `_id` order, so a range or
/// sort on `_id` streams. A hint still forces the index.
fn redundant_with_key(coll: &Collection, spec: &FindSpec, chosen: &ChosenPlan) -> bool {
    let Some(sharding) = &coll.sharding else {
        return false;
    };
    spec.hint.is_none()
        && chosen
            .scan
            .index
            .fields
            .iter()
            .all(|f| f.path == sharding.key.path)
        && key_hashes(sharding, spec.filter.as_ref()).is_some()
}

/// Expected documents examined: the point count for point reads, the
/// partitions' document counts for scans of a sharded collection,
/// `skip + limit` for a range whose every record matches and that need
/// not be sorted, unknown otherwise.
fn estimate(
    coll: &Collection,
    parts: &[PartitionPlan],
    filter: Option<&Filter>,
    sort: &SortStrategy,
    skip: u64,
    limit: Option<u64>,
) -> Cost {
    let usage = coll.sharding.as_ref().map(|s| s.usage());
    let key_path = coll.sharding.as_ref().map(|s| s.key.path.as_str());
    let window = limit
        .filter(|_| !sort.sorts())
        .map(|l| l.saturating_add(skip));
    let mut docs = 0u64;
    for p in parts {
        let examined = match (&p.access, &usage, window) {
            (Access::IdPoints { keys, .. }, _, _) => keys.len() as u64,
            (_, _, Some(window)) if p.reads_only_matches(filter, key_path) => window,
            (Access::Scan, Some(usage), _) => usage.get(&p.partition.id).map_or(0, |u| u.count),
            _ => return Cost { docs: None },
        };
        docs = docs.saturating_add(examined);
    }
    Cost { docs: Some(docs) }
}

/// True when an index scan's bounds apply every condition of `filter`,
/// so that each record it reaches matches: every condition compares one
/// field of the index (no arrays in it, no hashed field), equalities on
/// a prefix of its fields, then ranges on at most the next one.
fn index_applies_filter(scan: &IndexPlan, filter: Option<&Filter>) -> bool {
    let index = &scan.index;
    if index.is_multikey() || scan.dedupe || index.fields.iter().any(|f| f.kind == KeyKind::Hashed)
    {
        return false;
    }
    let Some(filter) = filter else {
        return true;
    };
    let conjuncts = filter.conjuncts();
    let mut bounded = 0;
    let mut ranged = false;
    for field in &index.fields {
        let on_field: Vec<_> = conjuncts
            .iter()
            .filter(|c| c.path() == Some(field.path.as_str()))
            .collect();
        if on_field.is_empty() {
            break;
        }
        if ranged {
            // A field after a range is not bounded by the scan.
            return false;
        }
        for c in &on_field {
            match c.range() {
                Some((Bound::Included(lo), Bound::Included(hi))) if lo == hi => {}
                Some(_) => ranged = true,
                None => return false,
            }
        }
        bounded += on_field.len();
    }
    bounded == conjuncts.len()
}

/// The `_id` values `filter` pins by equality or `$in`: the one place a
/// read or write asks whether it is a few point reads.
pub(crate) fn pinned_ids(filter: Option<&Filter>) -> Option<Vec<Bson>> {
    filter?.equality_values("_id")
}

/// The hashes of the shard-key values `filter` pins, sorted and unique:
/// by equality or `$in` on the key's path, or — for a dotted key — by
/// equality on a parent document (`{customer: {region: "eu"}}` pins
/// `customer.region`), as a mongos targets.
pub(crate) fn key_hashes(sharding: &Sharding, filter: Option<&Filter>) -> Option<Vec<i64>> {
    let values = key_values(sharding, filter)?;
    let mut hashes: Vec<i64> = values
        .iter()
        .map(|v| v.as_ref().map_or_else(hash::hash_missing, hash::hash_value))
        .collect();
    hashes.sort_unstable();
    hashes.dedup();
    Some(hashes)
}

/// The shard-key values `filter` pins, as [`key_hashes`] finds them
/// (`None` inside: the key is missing).
fn key_values(sharding: &Sharding, filter: Option<&Filter>) -> Option<Vec<Option<Bson>>> {
    let filter = filter?;
    let path = &sharding.key.path;
    match filter.equality_values(path) {
        Some(values) => Some(values.into_iter().map(Some).collect()),
        None => parent_equalities(filter, path),
    }
}

/// The values of a dotted `path` pinned by equality on one of its parents
/// (`None` inside: the pinned parent lacks the rest of the path, so the
/// key is missing). `None` when no parent is pinned, or one is pinned to
/// an array, whose elements the equality also matches.
fn parent_equalities(filter: &Filter, path: &str) -> Option<Vec<Option<Bson>>> {
    let parts: Vec<&str> = path.split('.').collect();
    for depth in (1..parts.len()).rev() {
        let Some(values) = filter.equality_values(&parts[..depth].join(".")) else {
            continue;
        };
        let mut pinned = Vec::with_capacity(values.len());
        for value in values {
            let mut current = Some(value);
            for part in &parts[depth..] {
                current = match current {
                    Some(Bson::Document(mut d)) => d.remove(*part),
                    Some(Bson::Array(_)) => return None,
                    _ => None,
                };
            }
            if matches!(current, Some(Bson::Array(_))) {
                return None;
            }
            pinned.push(current);
        }
        return Some(pinned);
    }
    None
}

/// `Some(ascending)` when the sort is on `_id` alone.
pub(crate) fn id_sort_direction(sort: &SortSpec) -> Option<bool> {
    // Records are in `_id` byte order, not a collation's.
    if sort.collation().is_some() {
        return None;
    }
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

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn id_bounds_are_the_keystrings_of_min_and_max() {
        let bounds = KeyBounds {
            min: Some(doc! {"_id": 3}),
            max: Some(doc! {"_id": "z"}),
        };
        let (lower, upper) = id_key_bounds(&bounds).unwrap();
        assert_eq!(
            lower,
            Bound::Included(keystring::encode_id(&Bson::Int32(3)))
        );
        assert_eq!(
            upper,
            Bound::Excluded(keystring::encode_id(&Bson::from("z")))
        );
        // Numbers sort before strings: 7 lies inside, "zz" outside.
        let range = (lower, upper);
        assert!(range.contains(&keystring::encode_id(&Bson::Int64(7))));
        assert!(!range.contains(&keystring::encode_id(&Bson::from("zz"))));
        let only_max = KeyBounds {
            min: None,
            max: Some(doc! {"_id": 1}),
        };
        assert_eq!(id_key_bounds(&only_max).unwrap().0, Bound::Unbounded);
        let wrong = KeyBounds {
            min: Some(doc! {"qty": 1}),
            max: None,
        };
        assert_eq!(id_key_bounds(&wrong).unwrap_err().code.number(), 51174);
    }

    #[test]
    fn key_bounds_tighten_ranges_and_drop_empty_ones() {
        let inc = |b: &[u8]| Bound::Included(b.to_vec());
        let exc = |b: &[u8]| Bound::Excluded(b.to_vec());
        assert_eq!(tighter(inc(b"b"), inc(b"c"), Ordering::Greater), inc(b"c"));
        assert_eq!(
            tighter(Bound::Unbounded, inc(b"c"), Ordering::Greater),
            inc(b"c")
        );
        assert_eq!(tighter(exc(b"c"), inc(b"c"), Ordering::Greater), exc(b"c"));
        assert_eq!(tighter(inc(b"d"), exc(b"c"), Ordering::Less), exc(b"c"));
        assert_eq!(tighter(inc(b"c"), exc(b"c"), Ordering::Less), exc(b"c"));
        assert!(empty_range(&inc(b"c"), &exc(b"c")));
        assert!(empty_range(&inc(b"d"), &inc(b"c")));
        assert!(!empty_range(&inc(b"c"), &inc(b"c")));
        assert!(!empty_range(&inc(b"a"), &Bound::Unbounded));
    }
    use crate::partition::ShardKey;
    use crate::router::Namespace;
    use std::sync::Arc;

    use crate::storage::kv::KvStore;
    use crate::storage::memory::MemoryEngine;

    /// A router over a fresh store, with `n` documents `{_id, k, a}` in
    /// `t.plain` (unsharded) and `t.sharded` (4 partitions on `k`).
    async fn router(n: i32) -> (MemoryEngine, Router) {
        let engine = MemoryEngine::default();
        let router = Router::open(KvStore::new(Arc::new(engine.clone()))).unwrap();
        let sharded = Namespace::new("t", "sharded").unwrap();
        router
            .shard_collection_now(&sharded, ShardKey::new("k").unwrap(), Some(4))
            .unwrap();
        for coll in ["plain", "sharded"] {
            let ns = Namespace::new("t", coll).unwrap();
            let docs = (0..n)
                .map(|i| doc! {"_id": i, "k": i % 10, "a": i * 2}.to_vec().unwrap())
                .collect();
            router
                .insert(&ns, docs, true, crate::router::DocumentValidation::Enforce)
                .await
                .unwrap();
        }
        (engine, router)
    }

    fn plan_of(router: &Router, coll: &str, spec: FindSpec) -> QueryPlan {
        let ns = Namespace::new("t", coll).unwrap();
        let coll = router.collection(&ns).unwrap();
        let reader = Reader::live(router, &coll);
        router.plan(&coll, &spec, &reader).unwrap()
    }

    fn filter(f: bson::Document) -> Option<Filter> {
        Some(Filter::parse(&f).unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unsharded_collection_is_one_partition_read_in_id_order() {
        let (_dir, router) = router(20).await;
        let p = plan_of(&router, "plain", FindSpec::default());
        assert_eq!(p.parts.len(), 1);
        assert_eq!(p.parts[0].name, PRIMARY_PARTITION);
        assert!(matches!(
            p.parts[0].access,
            Access::IdRange { reverse: false, .. }
        ));
        assert_eq!(p.sort, SortStrategy::Unsorted);

        let p = plan_of(
            &router,
            "plain",
            FindSpec {
                hint: Some(Hint::Natural(true)),
                ..FindSpec::default()
            },
        );
        assert!(matches!(
            p.parts[0].access,
            Access::IdRange { reverse: true, .. }
        ));

        // A sort on `_id` streams in key order, backwards for descending.
        let p = plan_of(
            &router,
            "plain",
            FindSpec {
                sort: Some(SortSpec::parse(&doc! {"_id": -1}).unwrap()),
                ..FindSpec::default()
            },
        );
        assert!(matches!(
            p.parts[0].access,
            Access::IdRange { reverse: true, .. }
        ));
        assert_eq!(p.sort, SortStrategy::Streamed);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pinned_id_is_point_reads_and_costs_its_points() {
        let (_dir, router) = router(20).await;
        let spec = FindSpec {
            filter: filter(doc! {"_id": {"$in": [1, 2, 99]}}),
            ..FindSpec::default()
        };
        let p = plan_of(&router, "plain", spec.clone());
        assert!(p.is_point_read());
        assert_eq!(p.cost.docs, Some(3));

        // Sharded, without the key: every partition is targeted, as a
        // mongos does, but only the owners of existing `_id`s read.
        let p = plan_of(&router, "sharded", spec);
        assert_eq!(p.parts.len(), 4);
        assert!(p.is_point_read());
        assert_eq!(p.cost.docs, Some(2), "99 does not exist");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_shard_key_targets_its_owner_only() {
        let (_dir, router) = router(20).await;
        let p = plan_of(
            &router,
            "sharded",
            FindSpec {
                filter: filter(doc! {"k": 3}),
                ..FindSpec::default()
            },
        );
        assert_eq!(p.parts.len(), 1);
        assert!(
            matches!(&p.parts[0].access, Access::KeyHashes { hashes, .. } if hashes.len() == 1)
        );
        assert_eq!(p.key_hashes.as_ref().map(Vec::len), Some(1));

        let p = plan_of(&router, "sharded", FindSpec::default());
        assert_eq!(p.parts.len(), 4);
        assert!(p.parts.iter().all(|x| matches!(x.access, Access::Scan)));
        assert_eq!(p.cost.docs, Some(20), "scans cost the partitions' counts");
    }

    /// `$graphLookup` reads each level with `{$and: [restrict, {to: {$in:
    /// frontier}}, ...]}`: on the shard key that reads the owners of the
    /// frontier only, and elsewhere an index on `connectToField`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_graph_lookup_level_targets_its_frontier() {
        let (_dir, router) = router(40).await;
        let level = |values: Vec<Bson>| {
            filter(doc! {"$and": [
                {"a": {"$gte": 0}},
                {"k": {"$in": values}},
                {"k": {"$exists": true}},
                {"k": {"$not": {"$type": "undefined"}}},
            ]})
        };
        let p = plan_of(
            &router,
            "sharded",
            FindSpec {
                filter: level(vec![Bson::Int32(3)]),
                ..FindSpec::default()
            },
        );
        assert_eq!(p.parts.len(), 1);
        assert_eq!(p.key_hashes.as_ref().map(Vec::len), Some(1));
        let p = plan_of(
            &router,
            "sharded",
            FindSpec {
                filter: level(vec![Bson::Int32(3), Bson::Int32(4)]),
                ..FindSpec::default()
            },
        );
        assert_eq!(p.key_hashes.as_ref().map(Vec::len), Some(2));
        assert!(p.parts.len() <= 2);
        let ns = Namespace::new("t", "plain").unwrap();
        router
            .create_indexes_now(&ns, &[doc! {"key": {"k": 1}, "name": "k_1"}])
            .unwrap();
        let p = plan_of(
            &router,
            "plain",
            FindSpec {
                filter: level(vec![Bson::Int32(3), Bson::Int32(4)]),
                ..FindSpec::default()
            },
        );
        assert!(p.index.is_some(), "no index for the level's $in");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pinned_key_with_an_id_range_streams_in_id_order() {
        let (_dir, router) = router(200).await;
        let ns = Namespace::new("t", "sharded").unwrap();
        // The shard key's own index adds nothing once the key is pinned.
        router
            .create_indexes_now(&ns, &[doc! {"key": {"k": "hashed"}, "name": "k_hashed"}])
            .unwrap();
        let spec = FindSpec {
            filter: filter(doc! {"k": 3, "_id": {"$gte": 50}}),
            sort: Some(SortSpec::parse(&doc! {"_id": -1}).unwrap()),
            limit: Some(5),
            ..FindSpec::default()
        };
        let p = plan_of(&router, "sharded", spec.clone());
        assert!(p.index.is_none());
        assert_eq!(p.parts.len(), 1);
        let Access::KeyHashes {
            hashes,
            from,
            reverse,
            ..
        } = &p.parts[0].access
        else {
            panic!("not a key read: {:?}", p.parts[0].access);
        };
        assert_eq!(hashes.len(), 1);
        assert!(*reverse);
        assert!(matches!(from, Bound::Included(_)));
        assert_eq!(p.sort, SortStrategy::Streamed);

        let ids: Vec<i32> = router
            .find_stream(&ns, spec.clone())
            .unwrap()
            .map(|d| d.unwrap().get_i32("_id").unwrap())
            .collect();
        assert_eq!(ids, [193, 183, 173, 163, 153]);
        let explained = router.explain_now(&ns, &spec).unwrap();
        let examined: u64 = explained.runs.iter().map(|r| r.examined).sum();
        assert_eq!(examined, 5, "the read stops at the limit");
        assert_eq!(p.cost.docs, Some(5), "every record of the range matches");
        assert!(p.is_cheap());

        // A condition the range does not apply may reject records: the
        // read is no longer bounded by its limit.
        let other = FindSpec {
            filter: filter(doc! {"k": 3, "_id": {"$gte": 50}, "a": {"$ne": 1}}),
            ..spec.clone()
        };
        let p = plan_of(&router, "sharded", other);
        assert_eq!(p.cost.docs, None);
        assert!(!p.is_cheap());
        // Nor is an unlimited range.
        let p = plan_of(
            &router,
            "sharded",
            FindSpec {
                limit: None,
                ..spec.clone()
            },
        );
        assert_eq!(p.cost.docs, None);

        // A hint keeps the index.
        let p = plan_of(
            &router,
            "sharded",
            FindSpec {
                hint: Some(Hint::Name("k_hashed".into())),
                ..spec
            },
        );
        assert!(p.index.is_some());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_index_whose_bounds_apply_the_filter_is_bounded_by_the_limit() {
        let (_dir, router) = router(200).await;
        let ns = Namespace::new("t", "plain").unwrap();
        router
            .create_indexes_now(&ns, &[doc! {"key": {"k": 1, "a": 1}, "name": "k_a"}])
            .unwrap();
        let spec = |f: bson::Document, limit: Option<u64>| FindSpec {
            filter: filter(f),
            sort: Some(SortSpec::parse(&doc! {"a": 1}).unwrap()),
            limit,
            ..FindSpec::default()
        };
        let p = plan_of(
            &router,
            "plain",
            spec(doc! {"k": 3, "a": {"$gte": 50}}, Some(5)),
        );
        assert!(matches!(p.parts[0].access, Access::Index(_)));
        assert_eq!(p.sort, SortStrategy::Streamed);
        assert_eq!(p.cost.docs, Some(5));
        assert!(p.is_cheap());
        let ids: Vec<i32> = router
            .find_stream(&ns, spec(doc! {"k": 3, "a": {"$gte": 50}}, Some(5)))
            .unwrap()
            .map(|d| d.unwrap().get_i32("_id").unwrap())
            .collect();
        assert_eq!(ids, [33, 43, 53, 63, 73]);

        // Conditions the bounds do not apply: another field, a field after
        // a range, or no limit.
        for (f, limit) in [
            (doc! {"k": 3, "a": {"$gte": 50}, "_id": {"$ne": 1}}, Some(5)),
            (doc! {"k": {"$gte": 3}, "a": 60}, Some(5)),
            (doc! {"k": 3}, None),
        ] {
            let p = plan_of(&router, "plain", spec(f.clone(), limit));
            assert!(matches!(p.parts[0].access, Access::Index(_)), "{f}");
            assert_eq!(p.cost.docs, None, "{f}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sorts_are_streamed_top_k_or_blocking() {
        let (_dir, router) = router(20).await;
        let by_a = Some(SortSpec::parse(&doc! {"a": 1}).unwrap());
        let p = plan_of(
            &router,
            "sharded",
            FindSpec {
                sort: by_a.clone(),
                skip: 2,
                limit: Some(3),
                ..FindSpec::default()
            },
        );
        assert_eq!(p.sort, SortStrategy::TopK(5));
        assert_eq!(p.keep(), Some(5));
        let p = plan_of(
            &router,
            "plain",
            FindSpec {
                sort: by_a,
                ..FindSpec::default()
            },
        );
        assert!(matches!(p.sort, SortStrategy::Blocking { .. }));
        // A sharded sort by `_id` reads the `_id` index in order.
        let p = plan_of(
            &router,
            "sharded",
            FindSpec {
                sort: Some(SortSpec::parse(&doc! {"_id": 1}).unwrap()),
                ..FindSpec::default()
            },
        );
        assert_eq!(
            p.through_id_index(),
            Some(((Bound::Unbounded, Bound::Unbounded), false))
        );
        assert_eq!(p.sort, SortStrategy::Streamed);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_index_is_chosen_once_for_every_partition_unless_hinted_away() {
        let (_dir, router) = router(20).await;
        for coll in ["plain", "sharded"] {
            let ns = Namespace::new("t", coll).unwrap();
            router
                .create_indexes_now(&ns, &[doc! {"key": {"a": 1}, "name": "a_1"}])
                .unwrap();
            let spec = FindSpec {
                filter: filter(doc! {"a": {"$gt": 10}}),
                ..FindSpec::default()
            };
            let p = plan_of(&router, coll, spec.clone());
            assert_eq!(
                p.index.as_ref().map(|c| c.scan.index.name.as_str()),
                Some("a_1")
            );
            assert!(p.parts.iter().all(|x| matches!(x.access, Access::Index(_))));
            let p = plan_of(
                &router,
                coll,
                FindSpec {
                    hint: Some(Hint::Natural(false)),
                    ..spec
                },
            );
            assert!(p.index.is_none());
            assert!(!p.parts.iter().any(|x| matches!(x.access, Access::Index(_))));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn explain_shows_the_plan_that_runs() {
        let (_dir, router) = router(50).await;
        for (coll, f) in [
            ("plain", doc! {"a": {"$lt": 20}}),
            ("sharded", doc! {"k": 4}),
            ("sharded", doc! {"_id": 7}),
        ] {
            let ns = Namespace::new("t", coll).unwrap();
            let spec = FindSpec {
                filter: filter(f.clone()),
                ..FindSpec::default()
            };
            let planned = plan_of(&router, coll, spec.clone());
            let explained = router.explain(&ns, &spec).await.unwrap();
            let names = |p: &QueryPlan| p.parts.iter().map(|x| x.name.clone()).collect::<Vec<_>>();
            assert_eq!(names(&explained.plan), names(&planned), "{f}");
            let run_names: Vec<String> = explained.runs.iter().map(|r| r.name.clone()).collect();
            assert_eq!(run_names, names(&planned), "{f}");
            let returned: u64 = explained.runs.iter().map(|r| r.returned).sum();
            let found = router
                .find(&ns, spec, |found| Ok(found.documents().count() as u64))
                .await
                .unwrap();
            assert_eq!(returned, found, "{f}");
        }
    }
}
