//! The router: the only way from commands to storage.
//!
//! It maps a namespace to its collection and physical partitions, picks
//! the records an operation must read (a point lookup when the filter
//! pins `_id`, otherwise a scan of every targeted partition), runs the
//! per-partition part of the query (filter, projection) and merges
//! (sort, skip, limit). Writes are applied under the collection's write
//! lock and then awaited for durability outside it, so concurrent writers
//! share journal syncs.
//!
//! An unsharded ("fixed") collection is one partition whose records all
//! sit under hash 0, in `_id` order. A sharded collection's records sit
//! under the hash of their shard-key value; a query names the partitions
//! it must read ([`Router::targets`]) and, when there are several, reads
//! them in parallel through one snapshot and merges ([`merge`]).

pub mod aggregate;
pub mod catalog;
pub mod config_db;
pub mod indexes;
mod merge;
pub mod sharding;
mod write;

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document};

pub use catalog::{Collection, Namespace, Sharding};

/// True when `filter` pins the shard key of `sharding` (targets by it).
pub fn pins_shard_key(sharding: &Sharding, filter: Option<&Filter>) -> bool {
    key_hashes(sharding, filter).is_some()
}
pub use write::{maybe_blocking, InsertOutcome, ModifyOutcome, UpdateStatement};

use crate::aggregate::spill::{sort_memory_error, KeyedSort};
use crate::aggregate::{Limits, DEFAULT_MAX_BLOCKING_BYTES};
use crate::error::{Error, Result};
use crate::index::plan::{self, Hint, IndexPlan, Plan};
use crate::partition::{hash, Partition};
use crate::query::compare::compare;
use crate::query::filter::{Filter, MatchDetails};
use crate::query::projection::Projection;
use crate::query::sort::SortSpec;
use crate::storage::{
    blocking, keystring, RecordKey, RecordScan, SharedStore, SharedView, StorageResult, WriteBatch,
};
use catalog::Catalog;
use indexes::{index_records, Examined, HashScope, Partitions};
use merge::{Merge, Row, RowStream};

/// The hash every record of an unsharded collection is stored under.
pub const UNSHARDED_HASH: i64 = 0;

/// A lazily produced sequence of result documents.
pub type DocStream = Box<dyn Iterator<Item = Result<Document>> + Send>;

/// What a `find` asks for, parsed.
#[derive(Debug, Clone, Default)]
pub struct FindSpec {
    pub filter: Option<Filter>,
    pub sort: Option<SortSpec>,
    pub skip: u64,
    pub limit: Option<u64>,
    pub projection: Option<Projection>,
    pub hint: Option<Hint>,
    /// The memory limit, `allowDiskUse` and spill directory of a blocking
    /// sort whose output a cursor may keep (a client's `find`): its
    /// output is parked ([`crate::aggregate::spill::park`]). `None` for
    /// reads the server makes for itself, which sort within the default
    /// limit in memory.
    pub sort_limits: Option<Limits>,
}

/// An index scan a query runs, and whether the index alone answers it.
#[derive(Debug, Clone)]
pub struct ChosenPlan {
    pub scan: IndexPlan,
    pub covered: bool,
}

/// How partitioned collections are laid out and read.
#[derive(Debug, Clone)]
pub struct PartitionOptions {
    /// Partitions of a newly sharded collection without `numInitialChunks`.
    pub initial_partitions: u64,
    /// Most partitions one query reads at once; 0 means all it targets.
    pub fanout_parallelism: usize,
    /// A partition holding more bytes of documents splits in two.
    pub split_bytes: u64,
    /// Most bytes of documents with one shard-key value.
    pub logical_max_bytes: u64,
    /// The address partitions are reported at (`config.shards`): this
    /// server's.
    pub host: String,
}

impl Default for PartitionOptions {
    fn default() -> Self {
        PartitionOptions {
            initial_partitions: 4,
            fanout_parallelism: 0,
            split_bytes: 10 << 30,
            logical_max_bytes: 20 << 30,
            host: "127.0.0.1:27017".to_string(),
        }
    }
}

pub struct Router {
    store: SharedStore,
    pub catalog: Catalog,
    pub options: PartitionOptions,
    splits: sharding::SplitQueue,
}

/// One stored document and where it lives.
pub(crate) struct Record {
    pub key: RecordKey,
    pub doc: Document,
    /// Its stored size in bytes.
    pub len: usize,
}

pub(crate) fn decode_record(key: RecordKey, value: &[u8]) -> Result<Record> {
    let doc = Document::from_reader(value)
        .map_err(|e| Error::internal(format!("stored document is not valid BSON: {e}")))?;
    Ok(Record {
        key,
        doc,
        len: value.len(),
    })
}

/// A partition a query reads: its name and, for a sharded collection,
/// its hash range.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub partition: Option<Partition>,
}

/// The name of an unsharded collection's one partition, as explain and
/// `config.shards` show it.
pub const PRIMARY_PARTITION: &str = "primary";

/// Matching records with what the match found.
pub(crate) type MatchIter = Box<dyn Iterator<Item = Result<(Record, MatchDetails)>> + Send>;

pub(crate) type RecordIter = Box<dyn Iterator<Item = Result<Record>> + Send>;

impl Router {
    pub fn open(store: SharedStore) -> Result<Router> {
        Router::open_with(store, PartitionOptions::default())
    }

    pub fn open_with(store: SharedStore, options: PartitionOptions) -> Result<Router> {
        let catalog = Catalog::load(store.clone())?;
        Ok(Router {
            store,
            catalog,
            options,
            splits: sharding::SplitQueue::default(),
        })
    }

    /// The partitions a query with `filter` reads: those owning the
    /// shard-key values it pins (equality or `$in`), else all of them.
    pub fn targets(&self, coll: &Collection, filter: Option<&Filter>) -> Vec<Target> {
        Router::targets_in(coll, &Partitions::of(coll), filter)
    }

    /// [`Router::targets`] in the partitions of `parts` (the map read
    /// with a view, [`Router::view_of`]).
    fn targets_in(coll: &Collection, parts: &Partitions, filter: Option<&Filter>) -> Vec<Target> {
        let (Some(sharding), Partitions::Map(map)) = (&coll.sharding, parts) else {
            return vec![Target {
                name: PRIMARY_PARTITION.to_string(),
                partition: None,
            }];
        };
        let owners: Vec<Partition> = match key_hashes(sharding, filter) {
            Some(hashes) => {
                let mut owners: Vec<Partition> = hashes.iter().map(|&h| *map.locate(h)).collect();
                owners.dedup_by_key(|p| p.id);
                owners
            }
            None => map.partitions.clone(),
        };
        owners
            .into_iter()
            .map(|p| Target {
                name: p.name().to_string(),
                partition: Some(p),
            })
            .collect()
    }

    /// The generated documents of a `config` collection that shows the
    /// partition layout.
    pub fn config_documents(&self, ns: &Namespace) -> Option<Vec<Document>> {
        if ns.db != "config" {
            return None;
        }
        config_db::documents(self, &ns.coll, &self.options.host)
    }

    /// How many partitions a fan-out over `targets` reads at once.
    fn parallelism(&self, targets: usize) -> usize {
        match self.options.fanout_parallelism {
            0 => targets,
            n => n.min(targets),
        }
    }

    /// The records of one partition of a sharded collection that `filter`
    /// may match: the hashes of its pinned shard-key values, the records
    /// its pinned `_id`s point to, or the whole hash range.
    fn partition_candidates(
        reader: &SharedView,
        id: u64,
        sharding: &Sharding,
        part: &Partition,
        filter: Option<&Filter>,
        scanned: Scanned,
    ) -> RecordIter {
        if let Some(hashes) = key_hashes(sharding, filter) {
            let hashes: Vec<i64> = hashes.into_iter().filter(|&h| part.contains(h)).collect();
            let reader = reader.clone();
            if let Some(ids) = filter.and_then(|f| f.equality_values("_id")) {
                // Key and `_id` both pinned: exact record keys.
                let keys: BTreeSet<RecordKey> = hashes
                    .iter()
                    .flat_map(|&h| {
                        ids.iter()
                            .map(move |v| RecordKey::new(id, h, keystring::encode_id(v)))
                    })
                    .collect();
                return Box::new(keys.into_iter().filter_map(move |key| fetch(&reader, key)));
            }
            let filter = filter.cloned();
            return Box::new(hashes.into_iter().flat_map(move |h| {
                decode_scan(
                    blocking::iter(reader.scan_records(RecordScan::hashes(id, h, h))),
                    filter.clone(),
                    scanned.clone(),
                )
            }));
        }
        if let Some(ids) = filter.and_then(|f| f.equality_values("_id")) {
            let mut keys: BTreeSet<RecordKey> = BTreeSet::new();
            for v in &ids {
                let id_key = keystring::encode_id(v);
                let found = match blocking::wait(reader.id_entry(id, &id_key)) {
                    Ok(found) => found,
                    Err(e) => return Box::new(std::iter::once(Err(e.into()))),
                };
                if let Some(h) = found {
                    if part.contains(h) {
                        keys.insert(RecordKey::new(id, h, id_key));
                    }
                }
            }
            let reader = reader.clone();
            return Box::new(keys.into_iter().filter_map(move |key| fetch(&reader, key)));
        }
        decode_scan(
            blocking::iter(reader.scan_records(RecordScan::hashes(id, part.min, part.max))),
            filter.cloned(),
            scanned,
        )
    }

    /// The index scan a query uses, if any. An equality on `_id` is
    /// answered by `_id` lookups; a hint of the `_id` index or `$natural`
    /// means the records themselves.
    pub fn index_plan(
        &self,
        coll: &Collection,
        filter: Option<&Filter>,
        sort: Option<&SortSpec>,
        projection: Option<&Projection>,
        hint: Option<&Hint>,
    ) -> Result<Option<ChosenPlan>> {
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
        Ok(match plan::choose(&indexes, filter, sort, hint)? {
            Plan::Index(scan) => {
                let covered = plan::covers(&scan, filter, projection, sort);
                Some(ChosenPlan { scan, covered })
            }
            Plan::Collscan => None,
        })
    }

    /// The records an index plan reads from `part` (every partition when
    /// `None`), keeping only the pinned shard-key hashes.
    fn planned_records(
        reader: SharedView,
        coll_id: u64,
        sharding: Option<&Sharding>,
        part: Option<&Partition>,
        chosen: &ChosenPlan,
        filter: Option<&Filter>,
        examined: Option<Arc<Examined>>,
    ) -> RecordIter {
        let scope = HashScope {
            range: part.map(|p| (p.min, p.max)),
            pinned: sharding.and_then(|s| key_hashes(s, filter)),
        };
        let partitions = match (part, sharding) {
            (Some(p), _) => vec![p.min],
            (None, Some(s)) => Partitions::Map(s.map()).starts(),
            (None, None) => Partitions::One.starts(),
        };
        index_records(
            reader,
            coll_id,
            partitions,
            &chosen.scan,
            scope,
            chosen.covered,
            examined,
        )
    }

    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// A snapshot of `coll` and the partitions it keeps them in, taken
    /// together: a split publishes its map with the commit that re-keys
    /// index entries, under the same lock.
    pub(crate) fn view_of(&self, coll: &Collection) -> (SharedView, Partitions) {
        match &coll.sharding {
            None => (self.store.view(), Partitions::One),
            Some(s) => {
                let _split = s.view_lock.read();
                (self.store.view(), Partitions::Map(s.map()))
            }
        }
    }

    /// Applies a batch; returns its commit.
    pub(crate) fn commit(&self, batch: WriteBatch) -> Result<u64> {
        Ok(blocking::wait(self.store.apply(batch))?)
    }

    /// Waits until the commit `seq` is durable.
    pub async fn durable(&self, seq: u64) -> Result<()> {
        if seq == 0 {
            return Ok(());
        }
        Ok(self.store.durable(seq).await?)
    }

    /// The key of the record with this `_id` in an unsharded collection.
    pub(crate) fn id_key(coll: &Collection, id: &Bson) -> RecordKey {
        RecordKey::new(coll.id, UNSHARDED_HASH, keystring::encode_id(id))
    }

    /// How to reach the records a filter may match: point lookups when
    /// it pins `_id`, a key range when it bounds `_id`, else the whole
    /// collection. In an unsharded collection key order is `_id` order.
    fn access(&self, coll: &Collection, filter: Option<&Filter>) -> Access {
        if let Some(ids) = filter.and_then(|f| f.equality_values("_id")) {
            return Access::Points(ids.iter().map(|id| Router::id_key(coll, id)).collect());
        }
        let (from, to) = id_key_range(filter);
        Access::Range(from, to)
    }

    /// The records the filter may match, in key order (`reverse` for
    /// descending).
    pub(crate) fn candidates(
        &self,
        coll: &Collection,
        filter: Option<&Filter>,
        reverse: bool,
    ) -> Box<dyn Iterator<Item = Result<Record>> + Send> {
        self.candidates_counted(coll, filter, reverse, None)
    }

    /// [`Router::candidates`], counting what scans read into `scanned`.
    fn candidates_counted(
        &self,
        coll: &Collection,
        filter: Option<&Filter>,
        reverse: bool,
        scanned: Scanned,
    ) -> Box<dyn Iterator<Item = Result<Record>> + Send> {
        if let Some(sharding) = &coll.sharding {
            // Writers hold the collection's write lock: the live engine is
            // consistent for them.
            let reader = self.store.live();
            let sharding = sharding.clone();
            let mut parts = self.targets(coll, filter);
            if key_hashes(&sharding, filter).is_none()
                && filter.is_some_and(|f| f.equality_values("_id").is_some())
            {
                // `_id` lookups go through the global `_id` index once.
                let everything = Partition {
                    id: 0,
                    min: i64::MIN,
                    max: i64::MAX,
                };
                parts = vec![Target {
                    name: String::new(),
                    partition: Some(everything),
                }];
            }
            let filter = filter.cloned();
            let id = coll.id;
            return Box::new(
                parts
                    .into_iter()
                    .filter_map(|t| t.partition)
                    .flat_map(move |part| {
                        Router::partition_candidates(
                            &reader,
                            id,
                            &sharding,
                            &part,
                            filter.as_ref(),
                            scanned.clone(),
                        )
                    }),
            );
        }
        match self.access(coll, filter) {
            Access::Points(keys) => {
                let live = self.store.live();
                let fetch = move |key: RecordKey| fetch(&live, key);
                if reverse {
                    Box::new(keys.into_iter().rev().filter_map(fetch))
                } else {
                    Box::new(keys.into_iter().filter_map(fetch))
                }
            }
            Access::Range(from, to) => {
                let scan = RecordScan {
                    ids: Some((from, to)),
                    reverse,
                    ..RecordScan::hashes(coll.id, UNSHARDED_HASH, UNSHARDED_HASH)
                };
                let scan = blocking::iter(self.store.live().scan_records(scan));
                decode_scan(scan, filter.cloned(), scanned)
            }
        }
    }

    /// Matching records with what the match found.
    pub(crate) fn matching(
        &self,
        coll: &Collection,
        filter: Option<&Filter>,
    ) -> impl Iterator<Item = Result<(Record, MatchDetails)>> + Send + 'static {
        self.matching_ordered(coll, filter, false)
    }

    /// [`Router::matching`] in key order or its reverse.
    pub(crate) fn matching_ordered(
        &self,
        coll: &Collection,
        filter: Option<&Filter>,
        reverse: bool,
    ) -> impl Iterator<Item = Result<(Record, MatchDetails)>> + Send + 'static {
        filter_records(self.candidates(coll, filter, reverse), filter.cloned())
    }

    /// Matching records, read through the best index when one helps
    /// (any order).
    pub(crate) fn matching_planned(
        &self,
        coll: &Collection,
        filter: Option<&Filter>,
    ) -> Result<MatchIter> {
        let Some(chosen) = self.index_plan(coll, filter, None, None, None)? else {
            return Ok(Box::new(self.matching(coll, filter)));
        };
        let records = Router::planned_records(
            self.store.live(),
            coll.id,
            coll.sharding.as_deref(),
            None,
            &chosen,
            filter,
            None,
        );
        Ok(Box::new(filter_records(records, filter.cloned())))
    }

    /// Runs a query and returns its results as a lazy stream.
    ///
    /// A sort on `_id` alone follows key order and streams; any other sort
    /// keeps only the best `skip + limit` rows when there is a limit, and
    /// is bounded by its memory limit otherwise ([`sorted_rows`]).
    pub fn find(&self, ns: &Namespace, spec: FindSpec) -> Result<DocStream> {
        if let Some(docs) = self.config_documents(ns) {
            let found = config_db::find(docs, &spec)?;
            return Ok(Box::new(found.into_iter().map(Ok)));
        }
        let Some(coll) = self.catalog.get(ns) else {
            return Ok(Box::new(std::iter::empty()));
        };
        let chosen = self.index_plan(
            &coll,
            spec.filter.as_ref(),
            spec.sort.as_ref(),
            spec.projection.as_ref(),
            spec.hint.as_ref(),
        )?;
        if let Some(sharding) = &coll.sharding {
            return Ok(self.find_partitioned(&coll, sharding, spec, chosen));
        }
        let projection = spec.projection.clone();
        let project = move |(rec, details): (Record, MatchDetails)| -> Result<Document> {
            match &projection {
                Some(p) => p.apply(&rec.doc, &details),
                None => Ok(rec.doc),
            }
        };
        let skip = usize::try_from(spec.skip).unwrap_or(usize::MAX);
        let limit = spec
            .limit
            .filter(|&l| l > 0)
            .map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        if let Some(chosen) = &chosen {
            let records = Router::planned_records(
                self.store.view(),
                coll.id,
                None,
                None,
                chosen,
                spec.filter.as_ref(),
                None,
            );
            let rows = filter_records(records, spec.filter.clone());
            if spec.sort.is_none() || chosen.scan.provides_sort {
                let rows = rows.skip(skip);
                let rows: Box<dyn Iterator<Item = Result<(Record, MatchDetails)>> + Send> =
                    match limit {
                        Some(l) => Box::new(rows.take(l)),
                        None => Box::new(rows),
                    };
                return Ok(Box::new(rows.map(move |r| r.and_then(&project))));
            }
            let sort = spec.sort.clone().unwrap_or_default();
            let keep = limit.map(|l| l.saturating_add(skip));
            let rows = sorted_rows(rows, &sort, &spec, keep)?;
            return Ok(sorted_documents(rows, skip, limit));
        }
        let id_order = match &spec.sort {
            // Natural order is `_id` order; `{$natural: -1}` reverses it.
            None => Some(matches!(spec.hint, Some(Hint::Natural(true)))),
            Some(sort) => id_sort_direction(sort).map(|ascending| !ascending),
        };
        if let Some(reverse) = id_order {
            let rows = self
                .matching_ordered(&coll, spec.filter.as_ref(), reverse)
                .skip(skip);
            let rows: Box<dyn Iterator<Item = Result<(Record, MatchDetails)>> + Send> = match limit
            {
                Some(l) => Box::new(rows.take(l)),
                None => Box::new(rows),
            };
            return Ok(Box::new(rows.map(move |r| r.and_then(&project))));
        }
        let Some(sort) = spec.sort.clone() else {
            return Ok(Box::new(std::iter::empty()));
        };
        let keep = limit.map(|l| l.saturating_add(skip));
        let rows = sorted_rows(
            self.matching(&coll, spec.filter.as_ref()),
            &sort,
            &spec,
            keep,
        )?;
        Ok(sorted_documents(rows, skip, limit))
    }

    /// A query over a sharded collection: every targeted partition runs
    /// the filter, sort and projection (keeping `skip + limit` rows), all
    /// through one snapshot, and [`Merge`] combines them; skip and limit
    /// apply again to the merged rows.
    fn find_partitioned(
        &self,
        coll: &Collection,
        sharding: &Arc<Sharding>,
        spec: FindSpec,
        chosen: Option<ChosenPlan>,
    ) -> DocStream {
        let (reader, parts) = self.view_of(coll);
        let mut targets = Router::targets_in(coll, &parts, spec.filter.as_ref());
        let skip = usize::try_from(spec.skip).unwrap_or(usize::MAX);
        let limit = spec
            .limit
            .filter(|&l| l > 0)
            .map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        let mut point_reads = false;
        if key_hashes(sharding, spec.filter.as_ref()).is_none() {
            if let Some(ids) = spec.filter.as_ref().and_then(|f| f.equality_values("_id")) {
                // Only the partitions holding these `_id`s have anything.
                let mut hashes = Vec::new();
                for id in &ids {
                    match blocking::wait(reader.id_entry(coll.id, &keystring::encode_id(id))) {
                        Ok(found) => hashes.extend(found),
                        Err(e) => return Box::new(std::iter::once(Err(e.into()))),
                    }
                }
                targets.retain(|t| {
                    t.partition
                        .is_some_and(|p| hashes.iter().any(|&h| p.contains(h)))
                });
                // A few point reads: run them right here, one after another
                // (the caller may be on an async worker).
                point_reads = true;
            } else if let Some(ascending) = spec
                .sort
                .as_ref()
                .and_then(id_sort_direction)
                .filter(|_| chosen.is_none())
            {
                return by_id_index(reader, coll.id, spec, !ascending, skip, limit);
            }
        }
        let keep = limit.map(|l| l.saturating_add(skip));
        let streams: Vec<RowStream> = targets
            .iter()
            .filter_map(|t| t.partition)
            .map(|part| {
                partition_rows(
                    reader.clone(),
                    coll.id,
                    sharding.clone(),
                    part,
                    spec.clone(),
                    chosen.clone(),
                    keep,
                )
            })
            .collect();
        let parallelism = if point_reads {
            1
        } else {
            self.parallelism(streams.len())
        };
        let merged = Merge::new(streams, spec.sort.clone(), parallelism).skip(skip);
        match limit {
            Some(l) => Box::new(merged.take(l)),
            None => Box::new(merged),
        }
    }

    /// The number of documents matching `filter`, counted in parallel on
    /// every targeted partition.
    pub fn count(&self, ns: &Namespace, filter: Option<&Filter>) -> Result<u64> {
        if let Some(docs) = self.config_documents(ns) {
            return Ok(docs
                .iter()
                .filter(|d| filter.is_none_or(|f| f.matches(d)))
                .count() as u64);
        }
        let Some(coll) = self.catalog.get(ns) else {
            return Ok(0);
        };
        if filter.is_none() {
            // Every document: no need to read them.
            return Ok(self.collection_stats(&coll)?.count);
        }
        let Some(sharding) = &coll.sharding else {
            let mut n = 0;
            for item in self.matching_planned(&coll, filter)? {
                item?;
                n += 1;
            }
            return Ok(n);
        };
        let (reader, parts) = self.view_of(&coll);
        let chosen = self.index_plan(&coll, filter, None, None, None)?;
        let tasks: Vec<Box<dyn FnOnce() -> Result<u64> + Send>> =
            Router::targets_in(&coll, &parts, filter)
                .into_iter()
                .filter_map(|t| t.partition)
                .map(|part| {
                    let (reader, sharding, filter, chosen) = (
                        reader.clone(),
                        sharding.clone(),
                        filter.cloned(),
                        chosen.clone(),
                    );
                    let id = coll.id;
                    Box::new(move || {
                        let records = match &chosen {
                            Some(chosen) => Router::planned_records(
                                reader.clone(),
                                id,
                                Some(&sharding),
                                Some(&part),
                                chosen,
                                filter.as_ref(),
                                None,
                            ),
                            None => Router::partition_candidates(
                                &reader,
                                id,
                                &sharding,
                                &part,
                                filter.as_ref(),
                                None,
                            ),
                        };
                        let mut n = 0u64;
                        for item in filter_records(records, filter) {
                            item?;
                            n += 1;
                        }
                        Ok(n)
                    }) as Box<dyn FnOnce() -> Result<u64> + Send>
                })
                .collect();
        let parallelism = self.parallelism(tasks.len());
        merge::run_parallel(tasks, parallelism)?.into_iter().sum()
    }

    /// Runs a query on each targeted partition and reports, per partition,
    /// what it examined and returned — the figures of `explain`.
    pub fn explain(&self, ns: &Namespace, spec: &FindSpec) -> Result<Vec<PartitionRun>> {
        let Some(coll) = self.catalog.get(ns) else {
            return Ok(vec![PartitionRun {
                name: PRIMARY_PARTITION.to_string(),
                ..PartitionRun::default()
            }]);
        };
        let skip = usize::try_from(spec.skip).unwrap_or(usize::MAX);
        let keep = spec.limit.filter(|&l| l > 0).map(|l| {
            usize::try_from(l)
                .unwrap_or(usize::MAX)
                .saturating_add(skip)
        });
        let (reader, parts) = self.view_of(&coll);
        let targets = Router::targets_in(&coll, &parts, spec.filter.as_ref());
        let chosen = self.index_plan(
            &coll,
            spec.filter.as_ref(),
            spec.sort.as_ref(),
            spec.projection.as_ref(),
            spec.hint.as_ref(),
        )?;
        let in_order = spec.sort.is_none() || chosen.as_ref().is_some_and(|c| c.scan.provides_sort);
        let mut runs = Vec::with_capacity(targets.len());
        for t in targets {
            let through_index = Arc::new(Examined::default());
            let started = std::time::Instant::now();
            // Scans count every record they read; point reads count
            // the records they fetch.
            let scanned = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let fetched = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let counter = fetched.clone();
            let records: RecordIter = match (&chosen, &coll.sharding, t.partition) {
                (Some(chosen), sharding, part) => Router::planned_records(
                    reader.clone(),
                    coll.id,
                    sharding.as_deref(),
                    part.as_ref(),
                    chosen,
                    spec.filter.as_ref(),
                    Some(through_index.clone()),
                ),
                (None, Some(sharding), Some(part)) => Router::partition_candidates(
                    &reader,
                    coll.id,
                    sharding,
                    &part,
                    spec.filter.as_ref(),
                    Some(scanned.clone()),
                ),
                _ => self.candidates_counted(
                    &coll,
                    spec.filter.as_ref(),
                    false,
                    Some(scanned.clone()),
                ),
            };
            let records = records.inspect(move |_| {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            });
            let mut returned = 0u64;
            for item in filter_records(Box::new(records), spec.filter.clone()) {
                item?;
                returned += 1;
                if in_order && keep.is_some_and(|k| returned as usize >= k) {
                    break;
                }
            }
            if let Some(k) = keep {
                returned = returned.min(k as u64);
            }
            let examined = match &chosen {
                Some(_) => through_index.docs(),
                None => scanned
                    .load(std::sync::atomic::Ordering::Relaxed)
                    .max(fetched.load(std::sync::atomic::Ordering::Relaxed)),
            };
            runs.push(PartitionRun {
                name: t.name,
                partition: t.partition,
                plan: chosen.clone(),
                keys_examined: through_index.keys(),
                examined,
                returned,
                millis: started.elapsed().as_millis() as u64,
            });
        }
        Ok(runs)
    }

    /// Documents and bytes of each partition of a sharded collection, in
    /// hash order.
    pub fn partition_stats(&self, coll: &Collection) -> Vec<(Partition, catalog::Usage)> {
        let Some(sharding) = &coll.sharding else {
            return Vec::new();
        };
        let usage = sharding.usage();
        sharding
            .map()
            .partitions
            .iter()
            .map(|p| (*p, usage.get(&p.id).copied().unwrap_or_default()))
            .collect()
    }

    /// Per-collection figures for `collStats` and `dbStats`.
    pub fn collection_stats(&self, coll: &Collection) -> Result<CollectionStats> {
        if coll.sharding.is_some() {
            let mut stats = CollectionStats::default();
            for (_, usage) in self.partition_stats(coll) {
                stats.count += usage.count;
                stats.size += usage.bytes;
            }
            return Ok(stats);
        }
        let mut stats = CollectionStats::default();
        let scan = self.store.view().scan_records(RecordScan::all(coll.id));
        for item in blocking::iter(scan) {
            let (_, v) = item?;
            stats.count += 1;
            stats.size += v.len() as u64;
        }
        Ok(stats)
    }
}

/// A query on a sharded collection sorted by `_id` alone, in `_id` order
/// straight from the `_id` index: it streams, however many documents
/// match, instead of sorting every partition's matches.
fn by_id_index(
    reader: SharedView,
    id: u64,
    spec: FindSpec,
    reverse: bool,
    skip: usize,
    limit: Option<usize>,
) -> DocStream {
    let (from, to) = id_key_range(spec.filter.as_ref());
    let entries = blocking::iter(reader.scan_id_entries(id, from, to, reverse));
    let records: RecordIter = Box::new(entries.filter_map(move |item| match item {
        Ok((id_key, hash)) => fetch(&reader, RecordKey::new(id, hash, id_key)),
        Err(e) => Some(Err(e.into())),
    }));
    let projection = spec.projection;
    let rows = filter_records(records, spec.filter)
        .skip(skip)
        .map(move |item| {
            let (rec, details) = item?;
            match &projection {
                Some(p) => p.apply(&rec.doc, &details),
                None => Ok(rec.doc),
            }
        });
    match limit {
        Some(l) => Box::new(rows.take(l)),
        None => Box::new(rows),
    }
}

/// The bounds on `keystring(_id)` that the `_id` bounds of `filter`
/// allow (unbounded when it has none).
fn id_key_range(filter: Option<&Filter>) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
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

/// What one partition did for an explained query.
#[derive(Debug, Clone, Default)]
pub struct PartitionRun {
    pub name: String,
    pub partition: Option<Partition>,
    /// The index scan it ran, if any.
    pub plan: Option<ChosenPlan>,
    pub keys_examined: u64,
    /// Documents read.
    pub examined: u64,
    pub returned: u64,
    pub millis: u64,
}

/// The hashes of the shard-key values `filter` pins, sorted and unique:
/// by equality or `$in` on the key's path, or — for a dotted key — by
/// equality on a parent document (`{customer: {region: "eu"}}` pins
/// `customer.region`), as a mongos targets.
pub(crate) fn key_hashes(sharding: &Sharding, filter: Option<&Filter>) -> Option<Vec<i64>> {
    let filter = filter?;
    let path = &sharding.key.path;
    let values: Vec<Option<Bson>> = match filter.equality_values(path) {
        Some(values) => values.into_iter().map(Some).collect(),
        None => parent_equalities(filter, path)?,
    };
    let mut hashes: Vec<i64> = values
        .iter()
        .map(|v| v.as_ref().map_or_else(hash::hash_missing, hash::hash_value))
        .collect();
    hashes.sort_unstable();
    hashes.dedup();
    Some(hashes)
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

/// Counts the records a scan reads, for `explain`.
type Scanned = Option<Arc<std::sync::atomic::AtomicU64>>;

/// Decodes scanned records, skipping undecoded those `filter` certainly
/// does not match ([`Filter::may_match_raw`]): decoding is most of the
/// cost of a scan that matches little.
fn decode_scan(
    scan: impl Iterator<Item = StorageResult<(RecordKey, Vec<u8>)>> + Send + 'static,
    filter: Option<Filter>,
    scanned: Scanned,
) -> RecordIter {
    Box::new(scan.filter_map(move |item| {
        if let Err(e) = crate::query::interrupt::check() {
            return Some(Err(e));
        }
        let (k, v) = match item {
            Ok(kv) => kv,
            Err(e) => return Some(Err(e.into())),
        };
        if let Some(n) = &scanned {
            n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if let (Some(f), Ok(raw)) = (&filter, bson::RawDocument::from_bytes(&v)) {
            if !f.may_match_raw(raw) {
                return None;
            }
        }
        Some(decode_record(k, &v))
    }))
}

/// The record under `key`, if any.
fn fetch(view: &SharedView, key: RecordKey) -> Option<Result<Record>> {
    match blocking::wait(view.record(&key)) {
        Ok(Some(v)) => Some(decode_record(key, &v)),
        Ok(None) => None,
        Err(e) => Some(Err(e.into())),
    }
}

/// A record's `_id` (null when it has none, which stored records never do).
fn record_id(rec: &Record) -> &Bson {
    static NULL: Bson = Bson::Null;
    rec.doc.get("_id").unwrap_or(&NULL)
}

/// The records that match `filter`, with what the match found.
fn filter_records(
    records: RecordIter,
    filter: Option<Filter>,
) -> impl Iterator<Item = Result<(Record, MatchDetails)>> + Send + 'static {
    records.filter_map(move |rec| match rec {
        Err(e) => Some(Err(e)),
        Ok(rec) => match &filter {
            None => Some(Ok((
                rec,
                MatchDetails {
                    matched: true,
                    array_position: None,
                },
            ))),
            Some(f) => match f.try_matches_with_details(&rec.doc) {
                Ok(details) => details.matched.then_some(Ok((rec, details))),
                Err(e) => Some(Err(e)),
            },
        },
    })
}

/// One partition's part of a query, as a lazy stream of rows: nothing is
/// read until the merge first asks, which it does on a pool thread.
fn partition_rows(
    reader: SharedView,
    id: u64,
    sharding: Arc<Sharding>,
    part: Partition,
    spec: FindSpec,
    chosen: Option<ChosenPlan>,
    keep: Option<usize>,
) -> RowStream {
    let mut rows: Option<RowStream> = None;
    Box::new(std::iter::from_fn(move || {
        let rows = rows.get_or_insert_with(|| {
            let records = match &chosen {
                Some(chosen) => Router::planned_records(
                    reader.clone(),
                    id,
                    Some(&sharding),
                    Some(&part),
                    chosen,
                    spec.filter.as_ref(),
                    None,
                ),
                None => Router::partition_candidates(
                    &reader,
                    id,
                    &sharding,
                    &part,
                    spec.filter.as_ref(),
                    None,
                ),
            };
            let in_order = chosen.as_ref().is_some_and(|c| c.scan.provides_sort);
            let matching = filter_records(records, spec.filter.clone());
            let projection = spec.projection.clone();
            let project = move |key: Vec<Bson>, rec: Record, details: MatchDetails| {
                let id = rec.doc.get("_id").cloned().unwrap_or(Bson::Null);
                let doc = match &projection {
                    Some(p) => p.apply(&rec.doc, &details)?,
                    None => rec.doc,
                };
                Ok(Row { key, id, doc })
            };
            match &spec.sort {
                None => {
                    let rows = matching.map(move |item| {
                        let (rec, details) = item?;
                        project(Vec::new(), rec, details)
                    });
                    match keep {
                        Some(k) => Box::new(rows.take(k)),
                        None => Box::new(rows),
                    }
                }
                Some(sort) if in_order => {
                    let sort = sort.clone();
                    let rows = matching.map(move |item| {
                        let (rec, details) = item?;
                        project(sort.key_for(&rec.doc), rec, details)
                    });
                    match keep {
                        Some(k) => Box::new(rows.take(k)),
                        None => Box::new(rows),
                    }
                }
                Some(sort) => match sorted_rows(matching, sort, &spec, keep) {
                    Ok(sorted) => sorted,
                    Err(e) => Box::new(std::iter::once(Err(e))),
                },
            }
        });
        rows.next()
    }))
}

/// Where a query's candidate records come from.
enum Access {
    /// Exact record keys, in key order.
    Points(BTreeSet<RecordKey>),
    /// A range of record keys.
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>),
}

/// `Some(ascending)` when the sort is on `_id` alone.
fn id_sort_direction(sort: &SortSpec) -> Option<bool> {
    match sort.fields() {
        [only] if only.path() == "_id" => Some(only.ascending()),
        _ => None,
    }
}

/// Sorts matching rows, ties broken by `_id` so every partition layout
/// gives one order. Rows are projected as they arrive and sorted through
/// [`KeyedSort`] under the spec's [`FindSpec::sort_limits`]: with `keep`,
/// only the best `keep` rows are held; past the memory limit the sort
/// spills (`allowDiskUse`) or fails with 292; and a client's sorted
/// output is parked, so a cursor left open on it holds little memory.
/// Each row comes with its sort key.
fn sorted_rows(
    rows: impl Iterator<Item = Result<(Record, MatchDetails)>>,
    sort: &SortSpec,
    spec: &FindSpec,
    keep: Option<usize>,
) -> Result<RowStream> {
    let limits = spec.sort_limits.clone().unwrap_or_else(|| Limits {
        max_blocking_bytes: DEFAULT_MAX_BLOCKING_BYTES,
        allow_disk_use: false,
        spill_dir: std::env::temp_dir(),
    });
    let order = sort.clone();
    let mut sorter = KeyedSort::new(
        &limits,
        move |a: &Bson, b: &Bson| {
            let (ka, ia) = split_row_key(a);
            let (kb, ib) = split_row_key(b);
            order.compare_keys(ka, kb).then_with(|| compare(ia, ib))
        },
        sort_memory_error,
    );
    if let Some(k) = keep {
        sorter = sorter.keep(k);
    }
    if spec.sort_limits.is_some() {
        sorter = sorter.park_output();
    }
    for row in rows {
        crate::query::interrupt::check()?;
        let (rec, details) = row?;
        let key = sort.key_for(&rec.doc);
        let id = record_id(&rec).clone();
        let doc = match &spec.projection {
            Some(p) => p.apply(&rec.doc, &details)?,
            None => rec.doc,
        };
        sorter.push(Bson::Array(vec![Bson::Array(key), id]), doc)?;
    }
    Ok(Box::new(sorter.finish()?.map(|item| {
        let (key, doc) = item?;
        let Bson::Array(mut parts) = key else {
            return Err(Error::internal("malformed sort key"));
        };
        let id = parts.pop().unwrap_or(Bson::Null);
        let key = match parts.pop() {
            Some(Bson::Array(key)) => key,
            _ => return Err(Error::internal("malformed sort key")),
        };
        Ok(Row { key, id, doc })
    })))
}

/// The sort key and `_id` of a row key made by [`sorted_rows`].
fn split_row_key(key: &Bson) -> (&[Bson], &Bson) {
    static NULL: Bson = Bson::Null;
    match key {
        Bson::Array(parts) => match parts.as_slice() {
            [Bson::Array(k), id] => (k.as_slice(), id),
            _ => (&[], &NULL),
        },
        _ => (&[], &NULL),
    }
}

/// The documents of sorted rows, after `skip` and within `limit`.
fn sorted_documents(rows: RowStream, skip: usize, limit: Option<usize>) -> DocStream {
    let docs = rows.skip(skip).map(|r| r.map(|row| row.doc));
    match limit {
        Some(l) => Box::new(docs.take(l)),
        None => Box::new(docs),
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct CollectionStats {
    pub count: u64,
    pub size: u64,
}

/// Shared handle to the router.
pub type SharedRouter = Arc<Router>;
