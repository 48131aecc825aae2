//! Sharding a collection and splitting its partitions.
//!
//! Records are keyed by `collection | hash | _id`, and a partition is a
//! hash range, so a split moves no records: it is a new partition map
//! and the secondary-index entries of the upper half re-keyed under its
//! start, one atomic batch under the collection's write lock. Readers
//! take their map and their view together (`Sharding::view_lock`), so the
//! partitions they read match where their view keeps the entries; writers
//! after the split see the new map. Sharding a collection that holds data does move it: its records
//! are copied under their hashes into a new key range, and the catalog
//! switches to it in one write.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::activity::{unix_millis, SplitEvent, SplitHalf};
use super::catalog::{usage_entries, Usage};
use super::validation::CollectionOptions;
use super::write::CollectionBatch;
use super::{Collection, Namespace, Router, Sharding};
use crate::bail;
use crate::error::{Error, ErrorCode, Result};
use crate::partition::{Partition, PartitionMap, ShardKey};
use crate::query::interrupt;
pub use crate::storage::Drain;
use crate::storage::{
    blocking, IndexEntryKey, IndexScan, RecordScan, ServerState, UsageChange, WriteBatch, WriteOp,
};

/// Collections waiting for a partition split.
#[derive(Default)]
pub struct SplitQueue {
    pending: Mutex<HashSet<Namespace>>,
    wake: Notify,
}

/// Records copied per batch when sharding a collection with data.
const COPY_BATCH: usize = 1000;

/// A redistribution's `currentOp` message.
const COPY_PROGRESS: &str = "shardCollection: copying documents";
/// What a partition split reports to `currentOp`: the secondary-index
/// entries of the partition it has looked at (the upper half's move).
pub(crate) const SPLIT_PROGRESS: &str = "Partition split: moving index entries";
/// Index entries between two progress reports of a split.
const SPLIT_PROGRESS_EVERY: u64 = 256;

/// The outcome of `shardCollection`.
pub enum Sharded {
    /// Newly sharded; wait for this commit.
    Done(Arc<Collection>, u64),
    /// Already sharded on this key.
    AlreadyOnKey(Arc<Collection>),
}

impl Router {
    /// Shards `ns` on `key` with `partitions` initial partitions, creating
    /// the collection if needed and redistributing the documents it
    /// already holds.
    pub(crate) fn shard_collection_now(
        &self,
        ns: &Namespace,
        key: ShardKey,
        partitions: Option<u64>,
    ) -> Result<Sharded> {
        let count = partitions.unwrap_or(self.options.initial_partitions).max(1);
        let new_sharding = |catalog: &super::Catalog, batch: &mut WriteBatch| {
            let first = catalog.reserve_partition_ids(count, batch);
            Sharding::new(key.clone(), PartitionMap::even(count, first))
        };
        loop {
            let Some(old) = self.catalog.get(ns) else {
                let (coll, seq) =
                    self.catalog
                        .create_with(ns, CollectionOptions::none(), true, |b| {
                            Some(new_sharding(&self.catalog, b))
                        })?;
                if coll.sharding.is_none() {
                    // Created unsharded by a concurrent write: shard that.
                    continue;
                }
                return Ok(Sharded::Done(coll, seq.unwrap_or(0)));
            };
            if let Some(existing) = &old.sharding {
                if existing.key == key {
                    return Ok(Sharded::AlreadyOnKey(old.clone()));
                }
                bail!(
                    AlreadyInitialized,
                    "sharding already enabled for collection {ns} with options {{ key: {}, unique: false }}",
                    existing.key.pattern()
                );
            }
            let _lock = self.catalog.lock_writes(&old)?;
            if old.is_dropped() {
                continue;
            }
            if old.options().capped.is_some() {
                bail!(InvalidOptions, "can't shard a capped collection");
            }
            if let Some(index) = old.indexes().iter().find(|i| {
                i.unique && i.fields.first().map(|f| f.path.as_str()) != Some(key.path.as_str())
            }) {
                bail!(
                    InvalidOptions,
                    "can't shard collection '{ns}' with unique index on {} and proposed shard key {}. Uniqueness can't be maintained unless shard key is a prefix",
                    super::indexes::show_key(&index.key),
                    super::indexes::show_key(&key.pattern())
                );
            }
            let mut batch = WriteBatch::default();
            let id = self.catalog.reserve_collection_id(&mut batch);
            let sharding = Arc::new(new_sharding(&self.catalog, &mut batch));
            let coll = Arc::new(Collection::new(
                ns.clone(),
                id,
                old.uuid.clone(),
                old.options(),
                Some(sharding.clone()),
            ));
            coll.adopt_indexes(&old);
            coll.set_throughput(old.throughput());
            super::catalog::place_partitions(&coll, &mut batch);
            // The reserved ids and the placement are durable before any
            // record uses them.
            let mut seq = self.commit(std::mem::take(&mut batch))?;
            // Copy every record under its hash, with its `_id` index entry
            // and logical-partition size; nobody reads the new id until
            // the catalog points at it.
            if let Err(e) = self.copy_sharded(&old, &coll) {
                self.catalog.delete_records(id)?;
                return Err(Error::new(
                    e.code,
                    format!("cannot shard {ns} on {}: {}", key.pattern(), e.message),
                ));
            }
            self.catalog.put_meta(&coll, &mut batch)?;
            super::catalog::log_collection_event(
                &*self.store,
                &mut batch,
                "shardCollection",
                &coll,
                super::catalog::shard_details(&sharding),
            )?;
            seq = seq.max(self.commit(batch)?);
            self.catalog.replace(&old, coll.clone());
            seq = seq.max(self.catalog.delete_records(old.id)?);
            self.request_split(ns);
            return Ok(Sharded::Done(coll, seq));
        }
    }

    /// Copies the records of unsharded `old` into sharded `new`, a batch
    /// of [`COPY_BATCH`] at a time.
    fn copy_sharded(&self, old: &Collection, new: &Collection) -> Result<()> {
        let total = self.collection_stats_now(old)?.count;
        let mut done = 0u64;
        let scan = self.store.live().scan_records(RecordScan::all(old.id));
        let mut records = blocking::iter(scan).peekable();
        while records.peek().is_some() {
            interrupt::report_progress(COPY_PROGRESS, done, total.max(done));
            interrupt::check()?;
            let mut writes = CollectionBatch::new(self, new).unlogged();
            for item in records.by_ref().take(COPY_BATCH) {
                done += 1;
                let (_, bytes) = item?;
                let id = bson::RawDocument::from_bytes(&bytes)
                    .ok()
                    .and_then(|raw| raw.get("_id").ok().flatten())
                    .and_then(|v| bson::Bson::try_from(v).ok())
                    .ok_or_else(|| Error::internal("stored document without a readable _id"))?;
                writes.insert(&id, bytes)?;
            }
            writes.commit()?;
        }
        Ok(())
    }

    /// Asks the background splitter to look at `ns`.
    pub fn request_split(&self, ns: &Namespace) {
        self.splits.pending.lock().insert(ns.clone());
        self.splits.wake.notify_one();
    }

    /// Splits partitions that passed the split size, for as long as the
    /// router lives. Runs as one background task.
    pub async fn run_splitter(self: Arc<Self>) {
        loop {
            self.splits.wake.notified().await;
            let pending: Vec<Namespace> = self.splits.pending.lock().drain().collect();
            for ns in pending {
                let router = self.clone();
                let result = tokio::task::spawn_blocking(move || {
                    let (_listed, operation) = router.background_operation(
                        "PartitionSplitter",
                        ns.full(),
                        bson::doc! {"splitOversizedPartitions": ns.full()},
                    );
                    let _entered = interrupt::enter(Some(operation));
                    match router.split_oversized(&ns) {
                        // Another gateway changed the catalog (perhaps
                        // split this very partition): reload, look again.
                        Err(e) if e.code == ErrorCode::StaleConfig => {
                            router.catalog.refresh()?;
                            router.split_oversized(&ns)
                        }
                        done => done,
                    }
                })
                .await;
                match result {
                    Ok(Ok(seq)) => {
                        if let Err(e) = self.durable(seq).await {
                            tracing::warn!("partition split not synced: {e}");
                        }
                    }
                    Ok(Err(e)) => tracing::warn!("partition split failed: {e}"),
                    Err(e) => tracing::warn!("partition split stopped: {e}"),
                }
            }
        }
    }

    /// Splits every partition of `ns` over the split size, repeatedly,
    /// until none is (or the rest are single logical partitions). Returns
    /// the last commit.
    pub fn split_oversized(&self, ns: &Namespace) -> Result<u64> {
        let mut seq = 0;
        let mut unsplittable = HashSet::new();
        loop {
            let Some(coll) = self.catalog.get(ns) else {
                return Ok(seq);
            };
            let Some(sharding) = coll.sharding.clone() else {
                return Ok(seq);
            };
            let usage = sharding.usage();
            let over = sharding.map().partitions.iter().copied().find(|p| {
                !unsplittable.contains(&p.id)
                    && usage
                        .get(&p.id)
                        .is_some_and(|u| u.bytes > self.options.split_bytes)
            });
            let Some(part) = over else {
                return Ok(seq);
            };
            sharding.splitting.store(true, Ordering::Release);
            let result = self.split_partition(&coll, &sharding, part.id);
            sharding.splitting.store(false, Ordering::Release);
            match result? {
                Some(s) => seq = seq.max(s),
                None => {
                    unsplittable.insert(part.id);
                }
            }
        }
    }

    /// Splits one partition at the median hash of its documents (by
    /// bytes). Returns the commit, or `None` when the partition holds one
    /// hash only — one logical partition, which never splits.
    fn split_partition(
        &self,
        coll: &Collection,
        sharding: &Sharding,
        id: u64,
    ) -> Result<Option<u64>> {
        let Some(part) = sharding.map().get(id).copied() else {
            return Ok(None);
        };
        // Find the median outside the lock, on a snapshot.
        let snapshot = self.store.view();
        let mut total = 0u64;
        let mut entries = Vec::new();
        for entry in usage_entries(&snapshot, coll.id, part.min, part.max) {
            let (hash, u) = entry?;
            total += u.bytes;
            entries.push((hash, u.bytes));
        }
        let mut running = 0u64;
        let mut at = None;
        for (i, (hash, bytes)) in entries.iter().enumerate() {
            running += bytes;
            if running * 2 >= total {
                // Split after this hash when another follows, else before.
                at = match entries.get(i + 1) {
                    Some((next, _)) => Some(*next),
                    None => Some(*hash),
                };
                break;
            }
        }
        // Both halves must hold data: a partition of one shard-key hash
        // (one logical partition) stays whole.
        let lowest = entries.first().map(|(hash, _)| *hash);
        let Some(at) = at.filter(|&h| h > part.min && lowest.is_some_and(|l| l < h)) else {
            return Ok(None);
        };
        self.split_at(coll, sharding, part, at)
    }

    /// Splits partitions of `ns` through the middle of their hash ranges,
    /// widest first, until it has at least `count` (provisioned
    /// throughput needs them, whatever the data). Returns the last commit.
    pub(crate) fn split_to(&self, ns: &Namespace, count: u64) -> Result<u64> {
        let mut seq = 0;
        loop {
            let Some(coll) = self.catalog.get(ns) else {
                return Ok(seq);
            };
            let Some(sharding) = coll.sharding.clone() else {
                return Ok(seq);
            };
            let map = sharding.map();
            if map.partitions.len() as u64 >= count {
                return Ok(seq);
            }
            let width = |p: &Partition| (p.max as i128) - (p.min as i128);
            let Some(widest) = map.partitions.iter().copied().max_by_key(width) else {
                return Ok(seq);
            };
            if width(&widest) < 1 {
                return Ok(seq);
            }
            let at = (widest.min as i128 + width(&widest) / 2 + 1) as i64;
            sharding.splitting.store(true, Ordering::Release);
            let result = self.split_at(&coll, &sharding, widest, at);
            sharding.splitting.store(false, Ordering::Release);
            match result? {
                Some(s) => seq = seq.max(s),
                // Changed under us (dropped, re-sharded, split): look again.
                None if coll.is_dropped() => continue,
                None => {}
            }
        }
    }

    /// Splits partition `part` of `coll` in two at hash `at` (the first
    /// hash of the upper half): a new map and the upper half's index
    /// entries re-keyed, in one batch under the write lock. Returns the
    /// commit, or `None` when the partition changed meanwhile.
    fn split_at(
        &self,
        coll: &Collection,
        sharding: &Sharding,
        part: Partition,
        at: i64,
    ) -> Result<Option<u64>> {
        let id = part.id;
        let _lock = self.catalog.lock_writes(coll)?;
        if coll.is_dropped() {
            return Ok(None);
        }
        let old = sharding.map();
        if old.get(id) != Some(&part) {
            return Ok(None);
        }
        let mut batch = WriteBatch::default();
        let first = self.catalog.reserve_partition_ids(2, &mut batch);
        let Some(new) = old.split(id, at, first, first + 1) else {
            return Ok(None);
        };
        let live = self.store.live();
        let mut halves = [Usage::default(); 2];
        for (half, (min, max)) in [(part.min, at - 1), (at, part.max)].into_iter().enumerate() {
            for entry in usage_entries(&live, coll.id, min, max) {
                let (_, u) = entry?;
                halves[half].count += u.count;
                halves[half].bytes += u.bytes;
            }
        }
        batch.push(WriteOp::DeletePartitionTotal {
            collection: coll.id,
            partition: id,
        });
        for (i, (min, max)) in [(part.min, at - 1), (at, part.max)].into_iter().enumerate() {
            batch.push(WriteOp::PutPartition {
                collection: coll.id,
                partition: first + i as u64,
                min,
                max,
            });
        }
        batch.push(WriteOp::DeletePartition {
            collection: coll.id,
            partition: id,
        });
        for (i, half) in halves.iter().enumerate() {
            batch.push(WriteOp::PutPartitionTotal {
                collection: coll.id,
                partition: first + i as u64,
                usage: *half,
                added: UsageChange::of(*half),
            });
        }
        // The entries of the upper half move under its own start, in the
        // batch that publishes the map.
        let indexes = coll.indexes();
        let documents = halves[0].count + halves[1].count;
        let total = documents.saturating_mul(indexes.len() as u64);
        let mut done = 0u64;
        interrupt::report_progress(SPLIT_PROGRESS, 0, total);
        for index in indexes.iter() {
            let scan = IndexScan::all(coll.id, index.number, Some(part.min));
            for item in blocking::iter(live.scan_index(scan)) {
                let (entry, value) = item?;
                done += 1;
                if done.is_multiple_of(SPLIT_PROGRESS_EVERY) {
                    // Multikey indexes hold more entries than documents.
                    interrupt::report_progress(SPLIT_PROGRESS, done, total.max(done));
                }
                let hash = crate::index::entry_hash(&value)
                    .ok_or_else(|| Error::internal("corrupt index entry"))?;
                if hash < at {
                    continue;
                }
                let moved = IndexEntryKey {
                    partition: at,
                    ..entry.clone()
                };
                batch.push(WriteOp::DeleteIndexEntry(entry));
                batch.push(WriteOp::PutIndexEntry(moved, value));
            }
        }
        interrupt::report_progress(SPLIT_PROGRESS, done, total.max(done));
        let readers = sharding.view_lock.write();
        sharding.set_map(new);
        let written = self
            .catalog
            .put_meta(coll, &mut batch)
            .and_then(|()| self.commit(batch));
        let seq = match written {
            Ok(seq) => seq,
            Err(e) => {
                sharding.set_map(old.as_ref().clone());
                return Err(e);
            }
        };
        drop(readers);
        let mut usage = sharding.usage();
        usage.remove(&id);
        usage.insert(first, halves[0]);
        usage.insert(first + 1, halves[1]);
        sharding.set_usage(usage);
        if let Some(activity) = &self.activity {
            let half = |i: usize, min: i64, max: i64| SplitHalf {
                partition: Partition {
                    id: first + i as u64,
                    min,
                    max,
                },
                documents: halves[i].count,
                bytes: halves[i].bytes,
            };
            activity.record_split(SplitEvent {
                at_millis: unix_millis(),
                collection: coll.id,
                ns: coll.ns.to_string(),
                parent: part,
                children: [half(0, part.min, at - 1), half(1, at, part.max)],
            });
        }
        tracing::info!(
            "split partition p{id} of {} at hash {at}: p{first} ({} bytes) and p{} ({} bytes)",
            coll.ns,
            halves[0].bytes,
            first + 1,
            halves[1].bytes
        );
        Ok(Some(seq))
    }
}

impl Router {
    /// Moves the partition of `ns` holding `hash` to shard `to` (a
    /// server of the store, `shard<N>`), online.
    pub async fn move_range(&self, ns: &Namespace, hash: i64, to: &str) -> Result<()> {
        let Some(coll) = self.catalog.get(ns) else {
            bail!(NamespaceNotFound, "Collection {ns} not found");
        };
        let Some(sharding) = &coll.sharding else {
            bail!(NamespaceNotSharded, "Collection {ns} is not sharded");
        };
        let Some((server, state)) = self.fleet_shard(to)? else {
            bail!(
                IllegalOperation,
                "partitions move between servers only on a fleet (--backend postgres); here each partition is its own shard"
            );
        };
        if state == ServerState::Draining {
            bail!(
                IllegalOperation,
                "Shard {to} is draining: partitions move off it, not onto it"
            );
        }
        let partition = *sharding.map().locate(hash);
        self.store
            .move_partition(coll.id, partition.id, server)
            .await?;
        Ok(())
    }
}

impl Router {
    /// Adds the PostgreSQL server at `url` to the fleet; returns its shard
    /// name.
    pub async fn add_shard(&self, url: &str) -> Result<String> {
        if self.store.servers().is_none() {
            bail!(
                IllegalOperation,
                "servers are added only to a fleet (--backend postgres); the embedded store is one server"
            );
        }
        let position = self.store.add_server(url).await?;
        Ok(format!("shard{position}"))
    }

    /// One step of removing shard `name` from the fleet, as `removeShard`
    /// reports it: started, ongoing (with the partitions left), completed.
    pub async fn remove_shard(&self, name: &str) -> Result<Drain> {
        let Some((position, _)) = self.fleet_shard(name)? else {
            bail!(
                IllegalOperation,
                "servers are removed only from a fleet (--backend postgres); the embedded store is one server"
            );
        };
        if position == 0 {
            bail!(
                IllegalOperation,
                "Shard {name} holds the fleet's metadata (the first --postgres) and cannot be removed"
            );
        }
        Ok(self.store.remove_server(position).await?)
    }
}

impl Router {
    /// The position and state of server shard `name` (`shard<N>`) of the
    /// fleet; `None` when the store places no partitions on servers, and
    /// `ShardNotFound` for a shard it does not have (or removed).
    fn fleet_shard(&self, name: &str) -> Result<Option<(usize, ServerState)>> {
        let Some(servers) = self.store.servers() else {
            return Ok(None);
        };
        let found = name
            .strip_prefix("shard")
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| Some((n, servers.get(n)?.state)))
            .filter(|(_, state)| *state != ServerState::Removed);
        match found {
            Some(shard) => Ok(Some(shard)),
            None => bail!(ShardNotFound, "Shard {name} not found"),
        }
    }
}
