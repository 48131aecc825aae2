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

pub mod activity;
pub mod aggregate;
mod api;
pub mod capped;
pub mod catalog;
pub mod change_stream;
mod changes;
pub mod charge;
pub mod config_db;
mod geo;
pub mod indexes;
pub mod kinds;
mod merge;
pub mod plan;
pub mod provision;
pub mod sessions;
pub mod sharding;
pub mod strict;
#[cfg(test)]
mod tests;
mod text;
pub mod throttle;
pub mod timeseries;
pub mod transaction;
pub mod validation;
mod write;

use std::sync::Arc;

use bson::{Bson, Document, RawDocumentBuf};

/// A physical partition: a range of hashes, as the router's callers see it.
pub use crate::partition::Partition;
pub use catalog::{Collection, Namespace, Sharding};

pub use validation::{CollectionOptions, DocumentValidation};
pub use write::{InsertOutcome, ModifyOutcome, UpdateStatement};

use crate::aggregate::spill::{sort_memory_error, KeyedSort};
use crate::aggregate::{InputDoc, Limits, DEFAULT_MAX_BLOCKING_BYTES};
use crate::error::{Error, Result};
use crate::index::plan::{Hint, IndexPlan};
use crate::partition::PartitionMap;
use crate::query::active::{ActiveOps, Listing, Registered};
use crate::query::compare::compare;
use crate::query::filter::{Filter, MatchDetails};
use crate::query::interrupt::Operation;
use crate::query::projection::Projection;
use crate::query::sort::SortSpec;
use crate::storage::{
    blocking, keystring, RecordFilter, RecordKey, RecordScan, SharedStore, SharedView,
    StorageResult, WriteBatch,
};
use catalog::Catalog;
use indexes::{index_records, Examined, HashScope, Partitions};
use merge::{Merge, Row, RowStream};
pub use plan::{Access, Cost, PartitionPlan, QueryPlan, SortStrategy};

/// The hash every record of an unsharded collection is stored under.
pub const UNSHARDED_HASH: i64 = 0;

pub use crate::aggregate::DocStream;

/// A lazily produced sequence of stored documents, undecoded.
pub type StoredStream = Box<dyn Iterator<Item = Result<RawDocumentBuf>> + Send>;

/// A query's results. A query that returns whole documents from one
/// partition in the order it reads them returns the stored documents
/// themselves, so that a reply can carry their bytes without decoding
/// and encoding them again; any other returns documents.
pub enum Found {
    Stored(StoredStream),
    Documents(DocStream),
}

impl Found {
    /// The results as documents, stored ones decoded as they are read.
    pub fn documents(self) -> DocStream {
        match self {
            Found::Documents(docs) => docs,
            Found::Stored(stored) => Box::new(stored.map(|raw| {
                Document::try_from(raw?.as_ref())
                    .map_err(|e| Error::internal(format!("stored document is not valid BSON: {e}")))
            })),
        }
    }
}

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
    /// `min` and `max` (a cursor's index bounds), for the hinted index.
    pub key_bounds: Option<KeyBounds>,
}

/// A `find`'s `min` (inclusive) and `max` (exclusive): key values of the
/// hinted index, in its field order.
#[derive(Debug, Clone, Default)]
pub struct KeyBounds {
    pub min: Option<Document>,
    pub max: Option<Document>,
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
    /// Cosmos DB's limits, when `--cosmos-strict` asks for them.
    pub cosmos_strict: Option<strict::CosmosStrict>,
    /// Default throughput, burst capacity and server-side retry.
    pub throughput: throttle::ThroughputOptions,
}

impl Default for PartitionOptions {
    fn default() -> Self {
        PartitionOptions {
            initial_partitions: 4,
            fanout_parallelism: 0,
            split_bytes: 10 << 30,
            logical_max_bytes: 20 << 30,
            host: "127.0.0.1:27017".to_string(),
            cosmos_strict: None,
            throughput: throttle::ThroughputOptions::default(),
        }
    }
}

/// Plans and runs every operation over the store and the catalog.
///
/// A clone shares everything; a transaction's router
/// ([`Router::begin_transaction`]) is a clone over the transaction's store.
#[derive(Clone)]
pub struct Router {
    store: SharedStore,
    catalog: Arc<Catalog>,
    options: Arc<PartitionOptions>,
    splits: Arc<sharding::SplitQueue>,
    budgets: Arc<throttle::Budgets>,
    /// The operations running now (`currentOp`): client commands, which
    /// the commands layer lists, and the router's own background work.
    operations: Arc<ActiveOps>,
    /// Hot keys and splits for the HTTP side port; `None` without it.
    activity: Option<Arc<activity::Activity>>,
    /// On a transaction's router, its session and number, which its
    /// change events carry.
    transaction: Option<Arc<changes::Stamp>>,
}

/// One stored document and where it lives.
pub(crate) struct Record {
    pub key: RecordKey,
    pub doc: Document,
    /// Its stored size in bytes.
    pub len: usize,
}

pub(crate) fn decode_record(key: RecordKey, value: &[u8]) -> Result<Record> {
    let doc = bson::RawDocument::from_bytes(value)
        .and_then(Document::try_from)
        .map_err(|e| Error::internal(format!("stored document is not valid BSON: {e}")))?;
    Ok(Record {
        key,
        doc,
        len: value.len(),
    })
}

tokio::task_local! {
    /// Set while a command runs whose write concern is `j: false`.
    static UNJOURNALED: ();
}

/// Runs a command whose writes are acknowledged once they survive a crash
/// of the process, without waiting for the journal sync (a write concern
/// of `j: false`); the sync follows within the store's commit interval.
pub async fn without_journal_wait<F: std::future::Future>(command: F) -> F::Output {
    UNJOURNALED.scope((), command).await
}

/// A record an access path read: still in BSON form, so that the filter
/// can rule it out undecoded ([`Filter::matches_raw`]), unless the path
/// built its document (a covered index read).
pub(crate) enum Candidate {
    Raw(RecordKey, Vec<u8>),
    Decoded(Record),
}

impl Candidate {
    fn key(&self) -> &RecordKey {
        match self {
            Candidate::Raw(key, _) => key,
            Candidate::Decoded(rec) => &rec.key,
        }
    }

    /// Its stored size in bytes (0 for a document an index built).
    fn len(&self) -> usize {
        match self {
            Candidate::Raw(_, bytes) => bytes.len(),
            Candidate::Decoded(rec) => rec.len,
        }
    }
}

/// What a filter says of a record still in BSON form, when it can tell.
fn decide_raw(filter: &Filter, bytes: &[u8]) -> Option<bool> {
    filter.matches_raw(bson::RawDocument::from_bytes(bytes).ok()?)
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

pub(crate) type CandidateIter = Box<dyn Iterator<Item = Result<Candidate>> + Send>;

/// What a read goes through: a view of the store and the partitions the
/// view keeps the collection in.
#[derive(Clone)]
pub(crate) struct Reader {
    pub view: SharedView,
    pub parts: Partitions,
}

impl Reader {
    /// The latest state: for writers, whose lock keeps it (and the map)
    /// still, and for a collection of one partition.
    fn live(router: &Router, coll: &Collection) -> Reader {
        Reader {
            view: router.store.live(),
            parts: Partitions::of(coll),
        }
    }

    /// The map the view was taken with.
    pub fn map_of(&self, sharding: &Sharding) -> Arc<PartitionMap> {
        match &self.parts {
            Partitions::Map(map) => map.clone(),
            Partitions::One => sharding.map(),
        }
    }
}

impl Router {
    pub fn open(store: SharedStore) -> Result<Router> {
        Router::open_with(store, PartitionOptions::default())
    }

    pub fn open_with(store: SharedStore, options: PartitionOptions) -> Result<Router> {
        let catalog = Catalog::load(store.clone())?;
        Ok(Router {
            store,
            catalog: Arc::new(catalog),
            options: Arc::new(options),
            splits: Arc::default(),
            budgets: Arc::default(),
            operations: Arc::default(),
            activity: None,
            transaction: None,
        })
    }

    /// A router over a fresh in-memory store.
    #[cfg(test)]
    pub fn in_memory() -> Router {
        let engine = Arc::new(crate::storage::memory::MemoryEngine::new());
        Router::open(crate::storage::kv::KvStore::new(engine)).expect("a fresh store opens")
    }

    /// Notes, from now on, what the HTTP side port shows beyond request
    /// units: operations per partition by kind, sampled hot shard-key
    /// values and splits ([`activity`]). Without this call none of it is
    /// recorded.
    pub fn track_activity(&mut self) {
        self.activity.get_or_insert_with(Arc::default);
    }

    /// What [`Router::track_activity`] records; `None` without it.
    pub fn activity(&self) -> Option<&activity::Activity> {
        self.activity.as_deref()
    }

    /// Bytes of documents past which a partition splits.
    pub fn split_bytes(&self) -> u64 {
        self.options.split_bytes
    }

    /// Bytes the store uses on disk (approximate), and what its group
    /// commit has done since start when it has one.
    pub fn storage_figures(&self) -> (u64, Option<crate::storage::durability::SyncStats>) {
        (self.store.disk_bytes(), self.store.sync_stats())
    }

    /// The operations running now, for `currentOp` and `killOp`.
    pub fn operations(&self) -> &Arc<ActiveOps> {
        &self.operations
    }

    /// Lists the router's own work `task` on `ns` for as long as the
    /// returned guard and operation live; the operation is what the work
    /// enters (so `killOp` reaches it) and reports progress to.
    pub(crate) fn background_operation(
        &self,
        task: &str,
        ns: String,
        command: Document,
    ) -> (Registered, Arc<Operation>) {
        let operation = Operation::new(None, None);
        let listed = self.operations.register(
            Listing {
                op: "none",
                ns,
                command,
                desc: task.to_string(),
                client: None,
            },
            operation.clone(),
        );
        (listed, operation)
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

    /// Syncs the store and stops its background work; called once, at
    /// shutdown, after the last request.
    pub fn close(&self) -> Result<()> {
        Ok(self.store.close()?)
    }

    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// Whether work that is cheap when the store answers at once may run
    /// on an async worker: not when every read is a network round trip.
    pub(crate) fn inline(&self, cheap: bool) -> bool {
        cheap && self.store.answers_at_once()
    }

    /// Reloads the catalog when another gateway sharing the store changed
    /// it; nothing (and no question asked) for a store only this process
    /// opens.
    pub async fn sync_catalog(&self) -> Result<()> {
        self.catalog.sync().await
    }

    /// Reloads the catalog from the store (after a stale-catalog error).
    pub fn refresh_catalog(&self) -> Result<()> {
        tokio::task::block_in_place(|| self.catalog.refresh())
    }

    /// Applies a batch (with the running retryable write's mark,
    /// [`sessions::retryable_write`]); returns its commit.
    pub(crate) fn commit(&self, mut batch: WriteBatch) -> Result<u64> {
        if self.store.records_sessions() {
            sessions::mark(&mut batch);
        }
        Ok(blocking::wait(self.store.apply(batch))?)
    }

    /// Waits until the commit `seq` is durable; inside
    /// [`without_journal_wait`], until it survives a crash of the process;
    /// inside [`sessions::retryable_write`], not yet: the write waits once,
    /// at its end.
    pub async fn durable(&self, seq: u64) -> Result<()> {
        if seq == 0 || sessions::defer_durability(seq) {
            return Ok(());
        }
        if UNJOURNALED.try_with(|_| ()).is_ok() {
            return Ok(self.store.written(seq).await?);
        }
        Ok(self.store.durable(seq).await?)
    }

    /// The key of the record with this `_id` in an unsharded collection.
    pub(crate) fn id_key(coll: &Collection, id: &Bson) -> RecordKey {
        RecordKey::new(coll.id, UNSHARDED_HASH, keystring::encode_id(id))
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

    /// The reader a read of `coll` goes through: a snapshot when it reads
    /// several partitions of one store, so they agree; the live store for
    /// a collection of one partition.
    fn reader_for(&self, coll: &Collection) -> Reader {
        match coll.sharding {
            Some(_) => {
                let (view, parts) = self.view_of(coll);
                Reader { view, parts }
            }
            None => Reader::live(self, coll),
        }
    }

    /// Matching records of every partition a plan of `filter` reads,
    /// through the best index when one helps (any order). Writers call
    /// it under the collection's write lock: the live engine is
    /// consistent for them.
    pub(crate) fn matching_planned(
        &self,
        coll: &Collection,
        filter: Option<&Filter>,
    ) -> Result<MatchIter> {
        let records = self.planned_candidates(coll, filter)?;
        Ok(Box::new(filter_records(records, filter.cloned())))
    }

    /// The first record matching `filter`, as [`Router::matching_planned`]
    /// finds it, left in its stored form when the filter could decide on
    /// it there.
    pub(crate) fn first_match_undecoded(
        &self,
        coll: &Collection,
        filter: &Filter,
    ) -> Result<Option<Matched>> {
        for candidate in self.planned_candidates(coll, Some(filter))? {
            if let Some(found) = matching_undecoded(candidate?, filter)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The records the plan of `filter` reads, before the filter's full
    /// match (see [`Router::matching_planned`]).
    fn planned_candidates(
        &self,
        coll: &Collection,
        filter: Option<&Filter>,
    ) -> Result<CandidateIter> {
        let reader = Reader::live(self, coll);
        let spec = FindSpec {
            filter: filter.cloned(),
            ..FindSpec::default()
        };
        let plan = self.plan(coll, &spec, &reader)?;
        let id = coll.id;
        let pushdown = filter.cloned();
        let parts = plan.parts.clone();
        Ok(Box::new(parts.into_iter().flat_map(move |part| {
            access_records(&reader, id, &plan, &part, pushdown.as_ref(), None)
        })))
    }

    /// Runs a query and returns its results as a lazy stream.
    ///
    /// The plan ([`Router::plan`]) says which partitions to read and how;
    /// one partition's rows come straight out, several are merged
    /// ([`Merge`]) with skip and limit applied again to the merged rows.
    pub(crate) fn find_stream(&self, ns: &Namespace, spec: FindSpec) -> Result<DocStream> {
        let spec = geo::near_order(spec)?;
        if let Some(docs) = self.config_documents(ns) {
            let found = config_db::find(docs, &spec)?;
            return Ok(Box::new(found.into_iter().map(Ok)));
        }
        let Some(coll) = self.catalog.get(ns) else {
            return Ok(Box::new(std::iter::empty()));
        };
        let reader = self.reader_for(&coll);
        let plan = self.plan(&coll, &spec, &reader)?;
        Ok(self.execute(&coll, plan, spec, reader)?.documents())
    }

    /// Runs a plan of `find`.
    fn execute(
        &self,
        coll: &Collection,
        plan: QueryPlan,
        spec: FindSpec,
        reader: Reader,
    ) -> Result<Found> {
        let (skip, limit) = plan.window();
        if let (true, Some((range, reverse))) = (plan.sharded, plan.through_id_index()) {
            // Every partition reads the one `_id` index: read it once.
            for part in &plan.parts {
                charge::charge(coll.id, part.partition.id, charge::PARTITION_QUERY);
            }
            return Ok(Found::Documents(by_id_index(
                reader, coll.id, spec, range, reverse, skip, limit,
            )));
        }
        let keep = plan.keep();
        if let [part] = plan.parts.as_slice() {
            if spec.projection.is_none() && !plan.sort.sorts() {
                let rows = stored_rows(&reader, coll.id, &plan, part, spec.filter).skip(skip);
                return Ok(Found::Stored(match limit {
                    Some(l) => Box::new(rows.take(l)),
                    None => Box::new(rows),
                }));
            }
            let rows = partition_rows_now(&reader, coll.id, &plan, part, &spec, keep)?;
            return Ok(Found::Documents(sorted_documents(rows, skip, limit)));
        }
        // A `$near` with a limit reads its rings on every partition at
        // once, so together they read about what one partition would.
        let near = geo::near_rings(
            &reader,
            coll.id,
            &plan,
            &plan.parts,
            spec.filter.as_ref(),
            keep,
            Vec::new(),
        );
        if let (Some(matching), Some(first)) = (near, plan.parts.first()) {
            let rows = rows_of(matching, coll.id, &plan, first, &spec, keep)?;
            return Ok(Found::Documents(sorted_documents(rows, skip, limit)));
        }
        let point_read = plan.is_point_read();
        let sort = spec.sort.clone();
        // Shared, not copied: a plan holds every partition's access path.
        let shared = Arc::new(plan);
        let streams: Vec<RowStream> = (0..shared.parts.len())
            .map(|i| {
                partition_rows(
                    reader.clone(),
                    coll.id,
                    shared.clone(),
                    i,
                    spec.clone(),
                    keep,
                )
            })
            .collect();
        // A few point reads run right here, one after another (the
        // caller may be on an async worker).
        let parallelism = if point_read {
            1
        } else {
            self.parallelism(streams.len())
        };
        let merged = Merge::new(streams, sort, parallelism).skip(skip);
        Ok(Found::Documents(match limit {
            Some(l) => Box::new(merged.take(l)),
            None => Box::new(merged),
        }))
    }

    /// The number of documents matching `filter`, counted in parallel on
    /// every partition the plan reads.
    fn count_now(&self, ns: &Namespace, filter: Option<&Filter>) -> Result<u64> {
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
            return Ok(self.collection_stats_now(&coll)?.count);
        }
        let reader = self.reader_for(&coll);
        let spec = FindSpec {
            filter: filter.cloned(),
            ..FindSpec::default()
        };
        let plan = Arc::new(self.plan(&coll, &spec, &reader)?);
        let tasks: Vec<Box<dyn FnOnce() -> Result<u64> + Send>> = plan
            .parts
            .iter()
            .map(|part| {
                let (reader, plan, part, filter) =
                    (reader.clone(), plan.clone(), part.clone(), filter.cloned());
                let id = coll.id;
                Box::new(move || {
                    let records = access_records(&reader, id, &plan, &part, filter.as_ref(), None);
                    let mut n = 0u64;
                    for item in records {
                        if counts(item?, filter.as_ref())? {
                            n += 1;
                        }
                    }
                    Ok(n)
                }) as Box<dyn FnOnce() -> Result<u64> + Send>
            })
            .collect();
        let parallelism = self.parallelism(tasks.len());
        merge::run_parallel(tasks, parallelism)?.into_iter().sum()
    }

    /// Runs a `$near` with a limit over several partitions as `find` runs
    /// it (its rings read on all of them together) and reports each
    /// partition's part: what it examined and how many of the nearest it
    /// holds. The partitions ran together, so each shows the whole time,
    /// and the request charge is split by keys examined. `None` when the
    /// query is not such a `$near`.
    fn explain_near(
        &self,
        coll: &Collection,
        plan: &QueryPlan,
        spec: &FindSpec,
        reader: &Reader,
    ) -> Result<Option<Vec<PartitionRun>>> {
        let keep = plan.keep();
        let (Some(k), Some(sort)) = (keep, spec.sort.as_ref()) else {
            return Ok(None);
        };
        let examined: Vec<Arc<Examined>> = plan
            .parts
            .iter()
            .map(|_| Arc::new(Examined::default()))
            .collect();
        let started = std::time::Instant::now();
        let (nearest, charged) = charge::measured(|| -> Result<Option<Vec<Record>>> {
            let Some(matching) = geo::near_rings(
                reader,
                coll.id,
                plan,
                &plan.parts,
                spec.filter.as_ref(),
                keep,
                examined.iter().cloned().map(Some).collect(),
            ) else {
                return Ok(None);
            };
            let mut found: Vec<(Vec<Bson>, Record)> = Vec::new();
            for item in matching {
                let (rec, details) = item?;
                found.push((sort.key_for_scored(&rec.doc, details.text_score), rec));
            }
            found.sort_by(|a, b| {
                sort.compare_keys(&a.0, &b.0).then_with(|| {
                    crate::query::compare::compare(
                        a.1.doc.get("_id").unwrap_or(&Bson::Null),
                        b.1.doc.get("_id").unwrap_or(&Bson::Null),
                    )
                })
            });
            found.truncate(k);
            Ok(Some(found.into_iter().map(|(_, rec)| rec).collect()))
        });
        let Some(nearest) = nearest? else {
            return Ok(None);
        };
        let millis = started.elapsed().as_millis() as u64;
        let all_keys: u64 = examined.iter().map(|e| e.keys()).sum::<u64>().max(1);
        Ok(Some(
            plan.parts
                .iter()
                .zip(&examined)
                .map(|(part, examined)| {
                    let (min, max) = (part.partition.min, part.partition.max);
                    let returned = nearest
                        .iter()
                        .filter(|r| min <= r.key.hash && r.key.hash <= max)
                        .count() as u64;
                    PartitionRun {
                        name: self.shard_of(coll, Some(&part.partition)),
                        partition: Some(part.partition),
                        plan: plan.index.clone(),
                        keys_examined: examined.keys(),
                        examined: examined.docs(),
                        returned,
                        millis,
                        request_charge: charged * examined.keys() / all_keys,
                    }
                })
                .collect(),
        ))
    }

    /// Plans a query and runs each partition of that plan, reporting
    /// what it examined and returned: what `explain` shows.
    fn explain_now(&self, ns: &Namespace, spec: &FindSpec) -> Result<Explained> {
        let spec = &geo::near_order(spec.clone())?;
        let Some(coll) = self.catalog.get(ns) else {
            let plan = QueryPlan::of_missing_collection(spec);
            let runs = vec![PartitionRun {
                name: PRIMARY_PARTITION.to_string(),
                ..PartitionRun::default()
            }];
            return Ok(Explained { plan, runs });
        };
        let reader = self.reader_for(&coll);
        let plan = self.plan(&coll, spec, &reader)?;
        let keep = plan.keep();
        if plan.parts.len() > 1 {
            if let Some(runs) = self.explain_near(&coll, &plan, spec, &reader)? {
                return Ok(Explained { plan, runs });
            }
        }
        let in_order = matches!(plan.sort, SortStrategy::Unsorted | SortStrategy::Streamed);
        let mut runs = Vec::with_capacity(plan.parts.len());
        for part in &plan.parts {
            let examined = Arc::new(Examined::default());
            let started = std::time::Instant::now();
            let (returned, request_charge) = charge::measured(|| -> Result<u64> {
                let matching = partition_matches(
                    &reader,
                    coll.id,
                    (&plan, part),
                    spec,
                    keep,
                    Some(examined.clone()),
                );
                let returned_bytes = Returned::of(coll.id, &plan, part);
                let mut returned = 0u64;
                for item in matching {
                    let (rec, _) = item?;
                    if keep.is_none_or(|k| (returned as usize) < k) {
                        returned_bytes.charge(rec.len);
                    }
                    returned += 1;
                    if in_order && keep.is_some_and(|k| returned as usize >= k) {
                        break;
                    }
                }
                if let Some(k) = keep {
                    returned = returned.min(k as u64);
                }
                Ok(returned)
            });
            let returned = returned?;
            runs.push(PartitionRun {
                // The shard it is on: the partition, or its server.
                name: self.shard_of(&coll, plan.sharded.then_some(&part.partition)),
                partition: plan.sharded.then_some(part.partition),
                plan: plan.index.clone(),
                keys_examined: examined.keys(),
                examined: examined.docs(),
                returned,
                millis: started.elapsed().as_millis() as u64,
                request_charge,
            });
        }
        Ok(Explained { plan, runs })
    }

    /// Documents and bytes of each partition of a sharded collection, in
    /// hash order.
    pub fn partition_stats(&self, coll: &Collection) -> Vec<(Partition, catalog::Usage)> {
        let Some(sharding) = &coll.sharding else {
            return Vec::new();
        };
        if self.store.servers().is_some() {
            // Other gateways write the partitions too: ask the store.
            let view = self.store.view();
            for p in &sharding.map().partitions {
                if let Ok(Some(stored)) = blocking::wait(view.partition_total(coll.id, p.id)) {
                    sharding.set_usage_of(p.id, stored);
                }
            }
        }
        let usage = sharding.usage();
        sharding
            .map()
            .partitions
            .iter()
            .map(|p| (*p, usage.get(&p.id).copied().unwrap_or_default()))
            .collect()
    }

    /// Per-collection figures for `collStats` and `dbStats`.
    pub fn collection_stats_now(&self, coll: &Collection) -> Result<CollectionStats> {
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
    reader: Reader,
    id: u64,
    spec: FindSpec,
    range: plan::IdKeyRange,
    reverse: bool,
    skip: usize,
    limit: Option<usize>,
) -> DocStream {
    let parts = reader.parts.clone();
    let records = id_index_records(reader, id, range, reverse, None, None);
    let charged = move |hash: i64| Loaded {
        collection: id,
        partition: parts.id_of(hash),
    };
    let charged_out = charged.clone();
    let records = records.inspect(move |r| {
        if let Ok(rec) = r {
            charged(rec.key().hash).charge(rec.len(), charge::INDEX_LOOKUP);
        }
    });
    let projection = spec.projection;
    let rows = filter_records(Box::new(records), spec.filter)
        .skip(skip)
        .map(move |item| {
            let (rec, details) = item?;
            let returned = Returned(Some(charged_out(rec.key.hash)));
            let doc = match &projection {
                Some(p) => p.apply(&rec.doc, &details)?,
                None => rec.doc,
            };
            returned.charge(crate::query::size::document_size(&doc));
            Ok(doc)
        });
    match limit {
        Some(l) => Box::new(rows.take(l)),
        None => Box::new(rows),
    }
}

/// The records the `_id` index reaches in `_id` order within the `_id`
/// bounds of `filter`, keeping those in `part` when given.
fn id_index_records(
    reader: Reader,
    id: u64,
    (from, to): plan::IdKeyRange,
    reverse: bool,
    part: Option<Partition>,
    examined: Option<Arc<Examined>>,
) -> CandidateIter {
    let entries = blocking::iter(reader.view.scan_id_entries(id, from, to, reverse));
    Box::new(entries.filter_map(move |item| {
        let fetch = || -> Result<Option<Candidate>> {
            let (id_key, hash) = item?;
            charge::count(|w| w.keys_examined += 1);
            if let Some(e) = &examined {
                e.key();
            }
            if part.is_some_and(|p| !p.contains(hash)) {
                return Ok(None);
            }
            let key = RecordKey::new(id, hash, id_key);
            match blocking::wait(reader.view.record(&key))? {
                Some(v) => {
                    charge::count(|w| w.docs_examined += 1);
                    if let Some(e) = &examined {
                        e.doc();
                    }
                    Ok(Some(Candidate::Raw(key, v)))
                }
                None => Ok(None),
            }
        };
        fetch().transpose()
    }))
}

/// The records one partition's access path reads: every candidate the
/// filter may match (a store may drop, undecoded, those it certainly does
/// not), still in BSON form. The one place an access path becomes
/// storage reads.
///
/// It is also where reads are charged ([`charge`]): a point lookup as a
/// point read, any other access as a query on this partition (charged on
/// the call, which a fan-out makes when it first reads the partition),
/// plus each document it loads.
fn access_records(
    reader: &Reader,
    id: u64,
    plan: &QueryPlan,
    part: &PartitionPlan,
    filter: Option<&Filter>,
    examined: Option<Arc<Examined>>,
) -> CandidateIter {
    let loaded = Loaded {
        collection: id,
        partition: part.partition.id,
    };
    if !matches!(part.access, Access::IdPoints { .. }) {
        charge::charge(id, loaded.partition, charge::PARTITION_QUERY);
    }
    // A range whose every record matches has nothing for the filter's
    // pre-check to drop.
    let pre_check = filter.filter(|_| !part.reads_only_matches(filter, plan.shard_key.as_deref()));
    match &part.access {
        Access::IdPoints { keys, reverse } => {
            let view = reader.view.clone();
            let fetch = move |key: RecordKey| match blocking::wait(view.record(&key)) {
                Ok(Some(v)) => {
                    charge::count(|w| {
                        w.keys_examined += 1;
                        w.docs_examined += 1;
                    });
                    if let Some(e) = &examined {
                        e.doc();
                    }
                    charge::charge(id, loaded.partition, charge::point_read(Some(v.len())));
                    Some(Ok(Candidate::Raw(key, v)))
                }
                Ok(None) => {
                    charge::count(|w| w.keys_examined += 1);
                    charge::charge(id, loaded.partition, charge::point_read(None));
                    None
                }
                Err(e) => Some(Err(e.into())),
            };
            let keys = keys.clone();
            if *reverse {
                Box::new(keys.into_iter().rev().filter_map(fetch))
            } else {
                Box::new(keys.into_iter().filter_map(fetch))
            }
        }
        Access::KeyHashes {
            hashes,
            from,
            to,
            reverse,
        } => {
            let (view, filter) = (reader.view.clone(), pre_check.cloned());
            let (from, to, reverse) = (from.clone(), to.clone(), *reverse);
            let mut hashes = hashes.clone();
            if reverse {
                hashes.reverse();
            }
            Box::new(hashes.into_iter().flat_map(move |h| {
                let scan = RecordScan {
                    ids: Some((from.clone(), to.clone())),
                    reverse,
                    ..RecordScan::hashes(id, h, h)
                };
                scan_records(&view, scan, filter.as_ref(), examined.clone(), loaded)
            }))
        }
        Access::Index(chosen) => {
            let scope = HashScope {
                range: plan
                    .sharded
                    .then_some((part.partition.min, part.partition.max)),
                pinned: plan.key_hashes.clone(),
            };
            loaded.charging(
                index_records(
                    reader.view.clone(),
                    id,
                    vec![reader.parts.start_of(part.partition.min)],
                    &chosen.scan,
                    scope,
                    chosen.covered,
                    examined,
                ),
                charge::INDEX_LOOKUP,
            )
        }
        Access::IdRange { from, to, reverse } => {
            let scan = RecordScan {
                ids: Some((from.clone(), to.clone())),
                reverse: *reverse,
                ..RecordScan::hashes(id, part.partition.min, part.partition.min)
            };
            scan_records(&reader.view, scan, pre_check, examined, loaded)
        }
        Access::IdIndex { from, to, reverse } => loaded.charging(
            id_index_records(
                reader.clone(),
                id,
                (from.clone(), to.clone()),
                *reverse,
                Some(part.partition),
                examined,
            ),
            charge::INDEX_LOOKUP,
        ),
        Access::Natural { reverse } => raw_scan(
            capped::natural_records(&reader.view, id, *reverse),
            examined,
            Some(loaded),
        ),
        Access::Scan => scan_records(
            &reader.view,
            RecordScan::hashes(id, part.partition.min, part.partition.max),
            filter,
            examined,
            loaded,
        ),
    }
}

/// The partition a read's loaded documents are charged to.
#[derive(Debug, Clone, Copy)]
struct Loaded {
    collection: u64,
    partition: u64,
}

impl Loaded {
    fn charge(&self, bytes: usize, extra: u64) {
        charge::charge(
            self.collection,
            self.partition,
            charge::doc_loaded(bytes) + extra,
        );
    }

    /// Charges each record `records` loads, with `extra` for each.
    fn charging(self, records: CandidateIter, extra: u64) -> CandidateIter {
        Box::new(records.inspect(move |r| {
            if let Ok(rec) = r {
                self.charge(rec.len(), extra);
            }
        }))
    }
}

/// What `explain` shows: the plan that runs and what each of its
/// partitions did.
#[derive(Debug, Clone)]
pub struct Explained {
    pub plan: QueryPlan,
    pub runs: Vec<PartitionRun>,
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
    /// What it was charged, in micro-RU ([`charge`]).
    pub request_charge: u64,
}

/// Counts the records a scan reads, for `explain`.
type Scanned = Option<Arc<Examined>>;

/// The records of `scan` that `filter` may match, still in BSON form;
/// the filter's pre-check goes down with the scan ([`pushed_down`]).
///
/// Every record the scan loads is charged to `loaded`'s partition: by
/// the pre-check when it went down (it sees each one), else as read.
fn scan_records(
    view: &SharedView,
    mut scan: RecordScan,
    filter: Option<&Filter>,
    examined: Scanned,
    loaded: Loaded,
) -> CandidateIter {
    scan.filter = pushed_down(filter, &examined, loaded);
    let charge_read = scan.filter.is_none().then_some(loaded);
    raw_scan(
        blocking::iter(view.scan_records(scan)),
        examined,
        charge_read,
    )
}

/// The filter's raw pre-check ([`Filter::may_match_raw`]), handed to the
/// store so that a backend can drop records before they travel. Not when
/// `explain` counts what a scan reads: it must see every record.
/// The check charges each record it sees to `loaded`'s partition, on the
/// meter of the operation pulling the scan (a cursor's later pages are
/// charged to their `getMore`): the stores run it as the scan is read.
fn pushed_down(filter: Option<&Filter>, scanned: &Scanned, loaded: Loaded) -> Option<RecordFilter> {
    if scanned.is_some() {
        return None;
    }
    let filter = filter?.clone();
    Some(Arc::new(move |raw: &bson::RawDocument| {
        charge::count(|w| w.docs_examined += 1);
        loaded.charge(raw.as_bytes().len(), 0);
        filter.may_match_raw(raw)
    }))
}

/// Scanned records as candidates, counted for `explain`, and charged
/// and counted as examined when the pre-check did not go down with the
/// scan (the pre-check does both when it did). Nothing is decoded
/// here: [`filter_records`] decodes what matches.
fn raw_scan(
    scan: impl Iterator<Item = StorageResult<(RecordKey, Vec<u8>)>> + Send + 'static,
    scanned: Scanned,
    charged: Option<Loaded>,
) -> CandidateIter {
    Box::new(scan.map(move |item| {
        crate::query::interrupt::check()?;
        let (k, v) = item?;
        if let Some(n) = &scanned {
            n.doc();
        }
        if let Some(loaded) = &charged {
            charge::count(|w| w.docs_examined += 1);
            loaded.charge(v.len(), 0);
        }
        Ok(Candidate::Raw(k, v))
    }))
}

/// A record's `_id` (null when it has none, which stored records never do).
fn record_id(rec: &Record) -> &Bson {
    static NULL: Bson = Bson::Null;
    rec.doc.get("_id").unwrap_or(&NULL)
}

/// The records that match `filter`, decoded, with what the match found.
fn filter_records(
    records: CandidateIter,
    filter: Option<Filter>,
) -> impl Iterator<Item = Result<(Record, MatchDetails)>> + Send + 'static {
    records.filter_map(move |item| match item {
        Err(e) => Some(Err(e)),
        Ok(candidate) => matching(candidate, filter.as_ref()).transpose(),
    })
}

/// The documents of records that match `filter`, as a pipeline reads
/// them: those decided on their bytes still in BSON form, so that its
/// first stage may read them undecoded; those the full match decided,
/// decoded (as they had to be).
pub(crate) fn matching_inputs(
    records: CandidateIter,
    filter: Option<Filter>,
) -> impl Iterator<Item = Result<InputDoc>> + Send + 'static {
    records.filter_map(move |item| {
        let rec = match item {
            Err(e) => return Some(Err(e)),
            Ok(Candidate::Decoded(rec)) => rec,
            Ok(Candidate::Raw(key, bytes)) => {
                match filter
                    .as_ref()
                    .map_or(Some(true), |f| decide_raw(f, &bytes))
                {
                    Some(false) => return None,
                    Some(true) => {
                        return Some(
                            RawDocumentBuf::from_bytes(bytes)
                                .map(InputDoc::Raw)
                                .map_err(|e| {
                                    Error::internal(format!(
                                        "stored document is not valid BSON: {e}"
                                    ))
                                }),
                        )
                    }
                    None => match decode_record(key, &bytes) {
                        Ok(rec) => rec,
                        Err(e) => return Some(Err(e)),
                    },
                }
            }
        };
        full_match(rec, filter.as_ref())
            .map(|found| {
                found.map(|(mut rec, details)| {
                    if let Some(score) = details.text_score {
                        rec.doc
                            .insert(crate::query::text::SCORE_FIELD, Bson::Double(score));
                    }
                    InputDoc::Decoded(rec.doc)
                })
            })
            .transpose()
    })
}

/// A match found on a record's bytes, or with no filter: it records no
/// array position (no array was on the way).
fn plain_match() -> MatchDetails {
    MatchDetails {
        matched: true,
        array_position: None,
        text_score: None,
    }
}

/// The record, decoded, if it matches `filter`. A record still in BSON
/// form is decided on its bytes when the filter can tell
/// ([`Filter::matches_raw`]), so one that does not match is never
/// decoded; the others get the full match.
fn matching(
    candidate: Candidate,
    filter: Option<&Filter>,
) -> Result<Option<(Record, MatchDetails)>> {
    let rec = match candidate {
        Candidate::Raw(key, bytes) => match filter.and_then(|f| decide_raw(f, &bytes)) {
            Some(false) => return Ok(None),
            Some(true) => return Ok(Some((decode_record(key, &bytes)?, plain_match()))),
            None => decode_record(key, &bytes)?,
        },
        Candidate::Decoded(rec) => rec,
    };
    full_match(rec, filter)
}

/// A record a write's filter matched.
pub(crate) enum Matched {
    /// Decided on its stored bytes, which are still undecoded.
    Stored(RecordKey, Vec<u8>),
    /// Decoded for the full match, with what the match found.
    Decoded(Record, MatchDetails),
}

/// Whether `candidate` matches `filter`, decoding it only when its bytes
/// do not tell.
fn matching_undecoded(candidate: Candidate, filter: &Filter) -> Result<Option<Matched>> {
    let rec = match candidate {
        Candidate::Raw(key, bytes) => match decide_raw(filter, &bytes) {
            Some(false) => return Ok(None),
            Some(true) => return Ok(Some(Matched::Stored(key, bytes))),
            None => decode_record(key, &bytes)?,
        },
        Candidate::Decoded(rec) => rec,
    };
    Ok(full_match(rec, Some(filter))?.map(|(rec, details)| Matched::Decoded(rec, details)))
}

/// The record, if the full match of `filter` on it says it matches.
fn full_match(rec: Record, filter: Option<&Filter>) -> Result<Option<(Record, MatchDetails)>> {
    let Some(f) = filter else {
        return Ok(Some((rec, plain_match())));
    };
    let details = f.try_matches_with_details(&rec.doc)?;
    Ok(details.matched.then_some((rec, details)))
}

/// Whether the record matches `filter`, decoding it only when its bytes
/// do not tell (what `count` needs).
fn counts(candidate: Candidate, filter: Option<&Filter>) -> Result<bool> {
    let Some(f) = filter else {
        return Ok(true);
    };
    let rec = match candidate {
        Candidate::Raw(key, bytes) => match decide_raw(f, &bytes) {
            Some(matched) => return Ok(matched),
            None => decode_record(key, &bytes)?,
        },
        Candidate::Decoded(rec) => rec,
    };
    f.try_matches(&rec.doc)
}

/// One partition's part of a query, as a lazy stream of rows: nothing is
/// read until the merge first asks, which it does on a pool thread.
fn partition_rows(
    reader: Reader,
    id: u64,
    plan: Arc<QueryPlan>,
    part: usize,
    spec: FindSpec,
    keep: Option<usize>,
) -> RowStream {
    let mut rows: Option<RowStream> = None;
    Box::new(std::iter::from_fn(move || {
        let rows = rows.get_or_insert_with(|| {
            let rows = match plan.parts.get(part) {
                Some(part) => partition_rows_now(&reader, id, &plan, part, &spec, keep),
                None => Err(Error::internal("a partition outside its plan")),
            };
            match rows {
                Ok(rows) => rows,
                Err(e) => Box::new(std::iter::once(Err(e))),
            }
        });
        rows.next()
    }))
}

/// One partition's part of a query: its matching records, projected,
/// in the order the plan's sort strategy gives, at most `keep`.
fn partition_rows_now(
    reader: &Reader,
    id: u64,
    plan: &QueryPlan,
    part: &PartitionPlan,
    spec: &FindSpec,
    keep: Option<usize>,
) -> Result<RowStream> {
    let matching = partition_matches(reader, id, (plan, part), spec, keep, None);
    rows_of(matching, id, plan, part, spec, keep)
}

/// One partition's matching records, through the access path its query
/// needs: `$near` rings, the ranked `$text` fetch, or the plan's access
/// path with the filter applied. `examined` counts what it reads.
fn partition_matches(
    reader: &Reader,
    id: u64,
    (plan, part): (&QueryPlan, &PartitionPlan),
    spec: &FindSpec,
    keep: Option<usize>,
    examined: Option<Arc<Examined>>,
) -> geo::MatchIter {
    let filter = spec.filter.as_ref();
    let rings = geo::near_rings(
        reader,
        id,
        plan,
        std::slice::from_ref(part),
        filter,
        keep,
        vec![examined.clone()],
    );
    let ordered = rings.or_else(|| {
        text::ranked(
            reader,
            id,
            (plan, part),
            (filter, spec.sort.as_ref()),
            keep,
            examined.clone(),
        )
    });
    ordered.unwrap_or_else(|| {
        let records = access_records(reader, id, plan, part, filter, examined);
        Box::new(filter_records(records, spec.filter.clone()))
    })
}

/// Rows of `matching`: projected, in the order the plan's sort strategy
/// gives, at most `keep`; what they return is charged to `part`.
fn rows_of(
    matching: geo::MatchIter,
    id: u64,
    plan: &QueryPlan,
    part: &PartitionPlan,
    spec: &FindSpec,
    keep: Option<usize>,
) -> Result<RowStream> {
    let projection = spec.projection.clone();
    let returned = Returned::of(id, plan, part);
    let project = move |key: Vec<Bson>, rec: Record, details: MatchDetails| {
        let row_id = rec.doc.get("_id").cloned().unwrap_or(Bson::Null);
        let doc = match &projection {
            Some(p) => {
                let doc = p.apply(&rec.doc, &details)?;
                returned.charge(crate::query::size::document_size(&doc));
                doc
            }
            None => {
                returned.charge(rec.len);
                rec.doc
            }
        };
        Ok(Row {
            key,
            id: row_id,
            doc,
        })
    };
    let rows: RowStream = match (&spec.sort, plan.sort) {
        (Some(sort), SortStrategy::TopK(_) | SortStrategy::Blocking { .. }) => {
            return sorted_rows(matching, sort, spec, keep, returned);
        }
        (Some(sort), _) => {
            let sort = sort.clone();
            Box::new(matching.map(move |item| {
                let (rec, details) = item?;
                project(
                    sort.key_for_scored(&rec.doc, details.text_score),
                    rec,
                    details,
                )
            }))
        }
        (None, _) => Box::new(matching.map(move |item| {
            let (rec, details) = item?;
            project(Vec::new(), rec, details)
        })),
    };
    Ok(match keep {
        Some(k) => Box::new(rows.take(k)),
        None => rows,
    })
}

/// The stored documents of one partition's plan that match `filter`, in
/// the order the access path reads them, lazily: decoded only where the
/// filter cannot decide on their bytes (and then encoded again), and
/// charged as [`partition_rows_now`] charges what it returns.
fn stored_rows(
    reader: &Reader,
    id: u64,
    plan: &QueryPlan,
    part: &PartitionPlan,
    filter: Option<Filter>,
) -> StoredStream {
    let returned = Returned::of(id, plan, part);
    let records = access_records(reader, id, plan, part, filter.as_ref(), None);
    Box::new(records.filter_map(move |candidate| {
        let stored = |candidate: Result<Candidate>| -> Result<Option<RawDocumentBuf>> {
            let candidate = candidate?;
            let matched = match &filter {
                Some(filter) => matching_undecoded(candidate, filter)?,
                None => Some(match candidate {
                    Candidate::Raw(key, bytes) => Matched::Stored(key, bytes),
                    Candidate::Decoded(rec) => Matched::Decoded(rec, plain_match()),
                }),
            };
            let doc = match matched {
                None => return Ok(None),
                Some(Matched::Stored(_, bytes)) => RawDocumentBuf::from_bytes(bytes),
                Some(Matched::Decoded(rec, _)) => RawDocumentBuf::try_from(&rec.doc),
            }
            .map_err(|e| Error::internal(format!("a stored document is not valid BSON: {e}")))?;
            returned.charge(doc.as_bytes().len());
            Ok(Some(doc))
        };
        stored(candidate).transpose()
    }))
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
    returned: Returned,
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
        let key = sort.key_for_scored(&rec.doc, details.text_score);
        let id = record_id(&rec).clone();
        let doc = match &spec.projection {
            Some(p) => p.apply(&rec.doc, &details)?,
            None => rec.doc,
        };
        sorter.push(Bson::Array(vec![Bson::Array(key), id]), doc)?;
    }
    Ok(Box::new(sorter.finish()?.map(move |item| {
        let (key, doc) = item?;
        returned.charge(crate::query::size::document_size(&doc));
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

/// Where a query charges the bytes it returns: the partition that
/// produced them, unless the plan is a point read, whose charge covers
/// what it returns.
#[derive(Debug, Clone, Copy)]
struct Returned(Option<Loaded>);

impl Returned {
    fn of(collection: u64, plan: &QueryPlan, part: &PartitionPlan) -> Returned {
        Returned((!plan.is_point_read()).then_some(Loaded {
            collection,
            partition: part.partition.id,
        }))
    }

    fn charge(&self, bytes: usize) {
        if let Some(l) = self.0 {
            charge::charge(l.collection, l.partition, charge::returned(bytes));
        }
    }
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
