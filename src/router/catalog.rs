//! The catalog: which collections exist, their ids and options.
//!
//! Collection metadata is stored in the engine's catalog space under the
//! namespace (`db.coll`) and kept in memory as a map of [`Collection`]
//! handles. A collection's records are keyed by its numeric id, never by
//! name, so a rename is a metadata change. Ids are never reused: the next
//! id is itself stored, so records of a dropped collection can never be
//! mistaken for a new one's.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use bson::{doc, oid::ObjectId, spec::BinarySubtype, Binary, Bson, Document, Timestamp};
use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard};

use super::validation::CollectionOptions;
use crate::bail;
use crate::error::{Error, ErrorCode, Result};
use crate::index::Index;
use crate::partition::throughput::{DatabaseSettings, Throughput};
use crate::partition::{PartitionMap, ShardKey};
use crate::storage::layout::{decode_counter, encode_counter, ONE_PARTITION};
pub use crate::storage::Usage;
use crate::storage::{
    blocking, CatalogKey, SharedStore, SharedView, StoreLock, WriteBatch, WriteOp, WHOLE_COLLECTION,
};

pub use crate::base::namespace::{validate_db_name, Namespace};
/// Number of a collection's first secondary index: 0 is the `_id` index
/// of a sharded collection.
pub const FIRST_INDEX_NUMBER: u32 = 1;

/// A collection as the router sees it.
#[derive(Debug)]
pub struct Collection {
    pub ns: Namespace,
    /// The numeric id its records are keyed by.
    pub id: u64,
    pub uuid: Binary,
    /// Its options (the validator among them); replaced whole by
    /// `collMod` under `write_lock`.
    options: RwLock<Arc<CollectionOptions>>,
    /// The shard key and partition map; `None` for an unsharded
    /// collection, which is one partition.
    pub sharding: Option<Arc<Sharding>>,
    /// Serializes read-modify-write operations on this collection. Held
    /// only for synchronous work, never across `.await`.
    pub write_lock: Mutex<()>,
    /// Set under `write_lock` when the collection is dropped; writers that
    /// raced with the drop see it and re-resolve the namespace.
    pub dropped: AtomicBool,
    /// Secondary indexes; replaced whole under `write_lock`.
    indexes: RwLock<Arc<Vec<Arc<Index>>>>,
    /// The number the next index gets; index numbers are never reused.
    next_index: AtomicU32,
    /// Throughput provisioned on this collection itself; stored with
    /// its metadata.
    throughput: RwLock<Option<Throughput>>,
    /// Woken when a capped collection's inserts commit, for the
    /// `awaitData` cursors waiting on it.
    pub appended: tokio::sync::Notify,
}

/// How a sharded collection is partitioned.
#[derive(Debug)]
pub struct Sharding {
    pub key: ShardKey,
    /// Identify this sharding in `config.collections` (`lastmodEpoch`,
    /// `timestamp`), as MongoDB's collection version does.
    pub epoch: ObjectId,
    pub timestamp: Timestamp,
    /// The current map. A split swaps in a new one under the collection's
    /// write lock; readers take a copy and keep using it.
    map: RwLock<Arc<PartitionMap>>,
    /// Documents and bytes per partition id, changed under the write lock.
    usage: Mutex<HashMap<u64, Usage>>,
    /// Set while a split of this collection is running.
    pub splitting: AtomicBool,
    /// Taken (shared) by a reader around "read the map, take a view" and
    /// (exclusive) by a split around "commit, publish the new map", so a
    /// reader's map always matches where its view keeps index entries.
    pub view_lock: RwLock<()>,
}

impl Sharding {
    pub fn new(key: ShardKey, map: PartitionMap) -> Sharding {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(0);
        Sharding {
            key,
            epoch: ObjectId::new(),
            timestamp: Timestamp {
                time: now,
                increment: 1,
            },
            map: RwLock::new(Arc::new(map)),
            usage: Mutex::new(HashMap::new()),
            splitting: AtomicBool::new(false),
            view_lock: RwLock::new(()),
        }
    }

    pub fn map(&self) -> Arc<PartitionMap> {
        self.map.read().clone()
    }

    /// Replaces the map; callers hold the collection's write lock.
    pub fn set_map(&self, map: PartitionMap) {
        *self.map.write() = Arc::new(map);
    }

    pub fn usage(&self) -> HashMap<u64, Usage> {
        self.usage.lock().clone()
    }

    pub fn set_usage(&self, usage: HashMap<u64, Usage>) {
        *self.usage.lock() = usage;
    }

    /// The usage of one partition.
    pub fn usage_of(&self, partition: u64) -> Usage {
        self.usage
            .lock()
            .get(&partition)
            .copied()
            .unwrap_or_default()
    }

    /// Sets the usage of one partition, once it is stored.
    pub fn set_usage_of(&self, partition: u64, usage: Usage) {
        self.usage.lock().insert(partition, usage);
    }

    fn to_document(&self) -> Document {
        doc! {
            "key": self.key.pattern(),
            "epoch": self.epoch,
            "timestamp": self.timestamp,
            "map": self.map().to_document(),
        }
    }

    fn from_document(d: &Document) -> Option<Sharding> {
        let key = ShardKey::parse(d.get_document("key").ok()?).ok()?;
        let map = PartitionMap::from_document(d.get_document("map").ok()?)?;
        let mut sharding = Sharding::new(key, map);
        if let Ok(epoch) = d.get_object_id("epoch") {
            sharding.epoch = epoch;
        }
        if let Ok(ts) = d.get_timestamp("timestamp") {
            sharding.timestamp = ts;
        }
        Some(sharding)
    }
}

impl Collection {
    pub fn new(
        ns: Namespace,
        id: u64,
        uuid: Binary,
        options: Arc<CollectionOptions>,
        sharding: Option<Arc<Sharding>>,
    ) -> Collection {
        Collection {
            ns,
            id,
            uuid,
            options: RwLock::new(options),
            sharding,
            write_lock: Mutex::new(()),
            dropped: AtomicBool::new(false),
            indexes: RwLock::new(Arc::new(Vec::new())),
            next_index: AtomicU32::new(FIRST_INDEX_NUMBER),
            throughput: RwLock::new(None),
            appended: tokio::sync::Notify::new(),
        }
    }

    /// The collection's options, as of now.
    pub fn options(&self) -> Arc<CollectionOptions> {
        self.options.read().clone()
    }

    /// Replaces the options; callers hold `write_lock` and store the
    /// metadata ([`Catalog::put_meta`]) in the same step.
    pub fn set_options(&self, options: Arc<CollectionOptions>) {
        *self.options.write() = options;
    }

    /// The throughput provisioned on this collection itself.
    pub fn throughput(&self) -> Option<Throughput> {
        *self.throughput.read()
    }

    /// Sets the throughput; callers hold `write_lock` and store the
    /// metadata ([`Catalog::put_meta`]) in the same step.
    pub fn set_throughput(&self, throughput: Option<Throughput>) {
        *self.throughput.write() = throughput;
    }

    /// The secondary indexes, as of now.
    pub fn indexes(&self) -> Arc<Vec<Arc<Index>>> {
        self.indexes.read().clone()
    }

    /// Replaces the secondary indexes; callers hold `write_lock` and store
    /// the metadata ([`Catalog::put_meta`]) in the same step.
    pub fn set_indexes(&self, indexes: Vec<Arc<Index>>) {
        *self.indexes.write() = Arc::new(indexes);
    }

    /// Takes the next index number.
    pub fn take_index_number(&self) -> u32 {
        self.next_index.fetch_add(1, Ordering::AcqRel)
    }

    /// Gives `other`'s indexes and index numbering to this collection
    /// (a rename or re-sharding keeps them).
    pub fn adopt_indexes(&self, other: &Collection) {
        self.set_indexes(other.indexes().to_vec());
        self.next_index
            .store(other.next_index.load(Ordering::Acquire), Ordering::Release);
    }

    pub fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }

    fn meta_document(&self) -> Document {
        let mut d = doc! {
            "ns": self.ns.full(),
            "id": self.id as i64,
            "uuid": self.uuid.clone(),
            "options": self.options().document.clone(),
        };
        if let Some(s) = &self.sharding {
            d.insert("sharding", s.to_document());
        }
        let indexes = self.indexes();
        if !indexes.is_empty() {
            d.insert(
                "indexes",
                indexes
                    .iter()
                    .map(|i| Bson::Document(i.to_stored()))
                    .collect::<Vec<_>>(),
            );
        }
        d.insert("nextIndex", self.next_index.load(Ordering::Acquire) as i64);
        if let Some(t) = self.throughput() {
            d.insert("throughput", t.to_document());
        }
        d
    }
}

pub struct Catalog {
    store: SharedStore,
    /// Held (shared) by every change of the catalog or of a collection's
    /// data, and (exclusive) by [`Catalog::refresh`], so a batch is never
    /// built from one catalog and checked against another's version.
    refreshing: RwLock<()>,
    collections: RwLock<BTreeMap<Namespace, Arc<Collection>>>,
    /// Serializes catalog changes (create, drop, rename); holds the next
    /// collection id.
    ddl: Mutex<u64>,
    /// The next partition id; partition ids are never reused.
    next_partition: Mutex<u64>,
    /// Databases created with `CreateDatabase`, with their settings;
    /// changed under `ddl`.
    databases: RwLock<BTreeMap<String, DatabaseSettings>>,
}

/// A collection's write lock, from [`Catalog::lock_writes`].
pub struct WriteGuard<'a> {
    _shared: Option<StoreLock>,
    _local: MutexGuard<'a, ()>,
    _changing: RwLockReadGuard<'a, ()>,
}

fn ns_key(ns: &Namespace) -> CatalogKey {
    CatalogKey::Namespace(ns.full())
}

fn new_uuid() -> Binary {
    Binary {
        subtype: BinarySubtype::Uuid,
        bytes: bson::Uuid::new().bytes().to_vec(),
    }
}

impl Catalog {
    /// Loads every collection's metadata from the store, upgrading an
    /// older storage format first.
    pub fn load(store: SharedStore) -> Result<Catalog> {
        let mut collections = BTreeMap::new();
        let mut max_id = 0u64;
        let mut max_partition = 0u64;
        for (_, value) in blocking::wait(store.meta().namespaces())? {
            let meta = Document::from_reader(&value[..])
                .map_err(|e| Error::internal(format!("corrupt catalog entry: {e}")))?;
            let ns = Namespace::parse(meta.get_str("ns").unwrap_or_default())?;
            let id = meta.get_i64("id").unwrap_or_default() as u64;
            let uuid = match meta.get("uuid") {
                Some(Bson::Binary(b)) => b.clone(),
                _ => new_uuid(),
            };
            let options = meta.get_document("options").cloned().unwrap_or_default();
            let options = Arc::new(CollectionOptions::stored(&ns, options));
            let sharding = match meta.get_document("sharding") {
                Ok(d) => {
                    let Some(s) = Sharding::from_document(d) else {
                        return Err(Error::internal(format!(
                            "corrupt partition map of {ns}: {d}"
                        )));
                    };
                    max_partition = s
                        .map()
                        .partitions
                        .iter()
                        .map(|p| p.id + 1)
                        .fold(max_partition, u64::max);
                    Some(Arc::new(s))
                }
                Err(_) => None,
            };
            max_id = max_id.max(id);
            let coll = Collection::new(ns.clone(), id, uuid, options, sharding);
            let mut indexes = Vec::new();
            for stored in meta
                .get_array("indexes")
                .map(|a| a.as_slice())
                .unwrap_or_default()
            {
                let Bson::Document(d) = stored else {
                    return Err(Error::internal(format!("corrupt index entry of {ns}")));
                };
                indexes.push(Arc::new(Index::from_stored(d)?));
            }
            let next_index = indexes
                .iter()
                .map(|i| i.number + 1)
                .fold(FIRST_INDEX_NUMBER, u32::max)
                .max(meta.get_i64("nextIndex").unwrap_or(0) as u32);
            coll.set_indexes(indexes);
            coll.next_index.store(next_index, Ordering::Release);
            if let Ok(t) = meta.get_document("throughput") {
                let Some(t) = Throughput::from_document(t) else {
                    return Err(Error::internal(format!("corrupt throughput of {ns}: {t}")));
                };
                coll.set_throughput(Some(t));
            }
            collections.insert(ns, Arc::new(coll));
        }
        // An index entry of an older format moves under the partition
        // its record's hash belongs to.
        let maps: HashMap<u64, Option<Arc<PartitionMap>>> = collections
            .values()
            .map(|c| (c.id, c.sharding.as_ref().map(|s| s.map())))
            .collect();
        let partition_of = |collection: u64, value: &[u8]| -> Option<i64> {
            match maps.get(&collection)? {
                None => Some(ONE_PARTITION),
                Some(map) => Some(map.locate(crate::index::entry_hash(value)?).min),
            }
        };
        store.ensure_format(&partition_of)?;
        let view = store.view();
        for coll in collections.values() {
            if let Some(s) = &coll.sharding {
                s.set_usage(load_usage(&view, coll.id, &s.map())?);
            }
        }
        let stored = |key: CatalogKey| -> Result<Option<u64>> {
            Ok(blocking::wait(store.meta().get(&key))?.and_then(|v| decode_counter(&v)))
        };
        let next_id = stored(CatalogKey::NextCollectionId)?
            .unwrap_or(1)
            .max(max_id + 1);
        let next_partition = stored(CatalogKey::NextPartitionId)?
            .unwrap_or(0)
            .max(max_partition);
        let mut databases = BTreeMap::new();
        for (db, value) in blocking::wait(store.meta().databases())? {
            let settings = Document::from_reader(&value[..])
                .ok()
                .and_then(|d| DatabaseSettings::from_document(&d))
                .ok_or_else(|| Error::internal(format!("corrupt settings of database {db}")))?;
            databases.insert(db, settings);
        }
        Ok(Catalog {
            store,
            refreshing: RwLock::new(()),
            collections: RwLock::new(collections),
            ddl: Mutex::new(next_id),
            next_partition: Mutex::new(next_partition),
            databases: RwLock::new(databases),
        })
    }

    /// Reloads the catalog from the store, where another gateway
    /// sharing it may have changed it: every collection handle held so
    /// far reads as dropped, so writers waiting on one re-resolve their
    /// namespace. Nothing for a store only this process opens.
    pub fn refresh(&self) -> Result<()> {
        let _alone = self.refreshing.write();
        let Some(version) = blocking::wait(self.store.refresh())? else {
            return Ok(());
        };
        let fresh = Catalog::load(self.store.clone())?;
        let old = std::mem::replace(
            &mut *self.collections.write(),
            fresh.collections.into_inner(),
        );
        *self.ddl.lock() = fresh.ddl.into_inner();
        *self.next_partition.lock() = fresh.next_partition.into_inner();
        *self.databases.write() = fresh.databases.into_inner();
        for coll in old.values() {
            coll.dropped.store(true, Ordering::Release);
        }
        self.store.catalog_loaded(version);
        Ok(())
    }

    /// Reloads the catalog when another gateway changed it (one question
    /// to the store where several gateways share it).
    pub async fn sync(&self) -> Result<()> {
        if self.store.catalog_moved().await? {
            tokio::task::block_in_place(|| self.refresh())?;
        }
        Ok(())
    }

    /// Held while the catalog or a collection's data changes (see
    /// `refreshing`). Taken first, it waits for a refresh that is waiting
    /// (so writers cannot starve one); [`Catalog::lock_writes`] inside it
    /// takes it again without waiting.
    pub fn changing(&self) -> RwLockReadGuard<'_, ()> {
        self.refreshing.read()
    }

    /// Takes `coll`'s write lock: the one in memory and, where several
    /// gateways share the store, the store's.
    pub fn lock_writes<'a>(&'a self, coll: &'a Collection) -> Result<WriteGuard<'a>> {
        let changing = self.refreshing.read_recursive();
        let local = coll.write_lock.lock();
        let shared = blocking::wait(self.store.lock_collection(coll.id))?;
        Ok(WriteGuard {
            _shared: shared,
            _local: local,
            _changing: changing,
        })
    }

    /// Applies a batch; returns its commit.
    fn commit(&self, batch: WriteBatch) -> Result<u64> {
        Ok(blocking::wait(self.store.apply(batch))?)
    }

    /// Reserves `n` partition ids; the returned write (to commit with the
    /// map that uses them) records the reservation.
    pub fn reserve_partition_ids(&self, n: u64, batch: &mut WriteBatch) -> u64 {
        let mut next = self.next_partition.lock();
        let first = *next;
        *next += n;
        batch.put_meta(CatalogKey::NextPartitionId, encode_counter(*next));
        first
    }

    /// Reserves a collection id for a collection that replaces another
    /// (sharding one that holds data); the write records it.
    pub fn reserve_collection_id(&self, batch: &mut WriteBatch) -> u64 {
        let mut next = self.ddl.lock();
        let id = *next;
        *next += 1;
        batch.put_meta(CatalogKey::NextCollectionId, encode_counter(*next));
        id
    }

    /// Adds the stored form of `coll`'s metadata to `batch`.
    pub fn put_meta(&self, coll: &Collection, batch: &mut WriteBatch) -> Result<()> {
        batch.put_meta(ns_key(&coll.ns), encode(&coll.meta_document())?);
        Ok(())
    }

    /// Makes `new` the collection of its namespace in place of `old`,
    /// whose writers re-resolve. The caller holds `old`'s write lock and
    /// has committed `new`'s metadata.
    pub fn replace(&self, old: &Collection, new: Arc<Collection>) {
        old.dropped.store(true, Ordering::Release);
        self.collections.write().insert(new.ns.clone(), new);
    }

    pub fn get(&self, ns: &Namespace) -> Option<Arc<Collection>> {
        self.collections.read().get(ns).cloned()
    }

    /// Every collection, in namespace order.
    pub fn list(&self) -> Vec<Arc<Collection>> {
        self.collections.read().values().cloned().collect()
    }

    /// The collections of one database.
    pub fn list_db(&self, db: &str) -> Vec<Arc<Collection>> {
        self.collections
            .read()
            .values()
            .filter(|c| c.ns.db == db)
            .cloned()
            .collect()
    }

    /// Creates the collection. Returns the commit sequence to wait for, or
    /// `NamespaceExists` when it is already there (and `existing_ok` is
    /// false).
    pub fn create(
        &self,
        ns: &Namespace,
        options: CollectionOptions,
        existing_ok: bool,
    ) -> Result<(Arc<Collection>, Option<u64>)> {
        self.create_with(ns, options, existing_ok, |_| None)
    }

    /// [`Catalog::create`] with the sharding `shard` returns; it is given
    /// the batch that creates the collection, to reserve partition ids.
    pub fn create_with(
        &self,
        ns: &Namespace,
        options: CollectionOptions,
        existing_ok: bool,
        shard: impl FnOnce(&mut WriteBatch) -> Option<Sharding>,
    ) -> Result<(Arc<Collection>, Option<u64>)> {
        let _changing = self.changing();
        let mut next_id = self.ddl.lock();
        if let Some(existing) = self.get(ns) {
            if existing_ok {
                return Ok((existing, None));
            }
            return Err(Error::new(
                ErrorCode::NamespaceExists,
                format!("Collection {ns} already exists."),
            ));
        }
        let mut batch = WriteBatch::default();
        let sharding = shard(&mut batch).map(Arc::new);
        let coll = Arc::new(Collection::new(
            ns.clone(),
            *next_id,
            new_uuid(),
            Arc::new(options),
            sharding,
        ));
        place_partitions(&coll, &mut batch);
        batch.put_meta(ns_key(ns), encode(&coll.meta_document())?);
        batch.put_meta(CatalogKey::NextCollectionId, encode_counter(*next_id + 1));
        let description = doc! {
            "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"},
        };
        log_collection_event(
            &*self.store,
            &mut batch,
            "create",
            &coll,
            doc! {"operationDescription": description},
        )?;
        if let Some(sharding) = &coll.sharding {
            let details = shard_details(sharding);
            log_collection_event(&*self.store, &mut batch, "shardCollection", &coll, details)?;
        }
        let seq = self.commit(batch)?;
        *next_id += 1;
        self.collections.write().insert(ns.clone(), coll.clone());
        Ok((coll, Some(seq)))
    }

    /// The stored settings of database `db`, if it has any.
    pub fn database(&self, db: &str) -> Option<DatabaseSettings> {
        self.databases.read().get(db).copied()
    }

    /// Records database `db` with `settings`; `NamespaceExists` when it
    /// is recorded already or `populated` says it holds collections.
    /// Returns the commit.
    pub fn create_database(
        &self,
        db: &str,
        settings: DatabaseSettings,
        populated: impl FnOnce() -> bool,
    ) -> Result<u64> {
        let _changing = self.changing();
        let _ddl = self.ddl.lock();
        if self.database(db).is_some() || populated() {
            bail!(NamespaceExists, "Database {db} already exists.");
        }
        self.store_database(db, settings)
    }

    /// Stores new settings of database `db`; returns the commit.
    pub fn put_database(&self, db: &str, settings: DatabaseSettings) -> Result<u64> {
        let _changing = self.changing();
        let _ddl = self.ddl.lock();
        self.store_database(db, settings)
    }

    fn store_database(&self, db: &str, settings: DatabaseSettings) -> Result<u64> {
        let mut batch = WriteBatch::default();
        batch.put_meta(
            CatalogKey::Database(db.to_string()),
            encode(&settings.to_document())?,
        );
        let seq = self.commit(batch)?;
        self.databases.write().insert(db.to_string(), settings);
        Ok(seq)
    }

    /// Forgets the settings of database `db` (it was dropped); returns
    /// the commit, 0 when there were none.
    pub fn forget_database(&self, db: &str) -> Result<u64> {
        let _changing = self.changing();
        let _ddl = self.ddl.lock();
        if self.database(db).is_none() {
            return Ok(0);
        }
        let mut batch = WriteBatch::default();
        batch.push(WriteOp::DeleteMeta(CatalogKey::Database(db.to_string())));
        let seq = self.commit(batch)?;
        self.databases.write().remove(db);
        Ok(seq)
    }

    /// Removes the collection's metadata and records. Returns the commit
    /// sequence to wait for, or `None` if it did not exist.
    pub fn drop_collection(&self, ns: &Namespace) -> Result<Option<u64>> {
        let _changing = self.changing();
        let _ddl = self.ddl.lock();
        let Some(coll) = self.get(ns) else {
            return Ok(None);
        };
        let _writes = self.lock_writes(&coll)?;
        coll.dropped.store(true, Ordering::Release);
        self.collections.write().remove(ns);
        let mut batch = WriteBatch::default();
        batch.push(WriteOp::DeleteMeta(ns_key(ns)));
        log_collection_event(&*self.store, &mut batch, "drop", &coll, Document::new())?;
        let mut seq = self.commit(batch)?;
        seq = seq.max(self.delete_records(coll.id)?);
        Ok(Some(seq))
    }

    /// Deletes every record, index entry and counter of collection `id`.
    pub fn delete_records(&self, id: u64) -> Result<u64> {
        Ok(blocking::wait(self.store.clear_collection(id))?)
    }

    /// Renames `from` to `to`, dropping `to` first when `drop_target`.
    pub fn rename(&self, from: &Namespace, to: &Namespace, drop_target: bool) -> Result<u64> {
        let mut seq = 0;
        if drop_target && self.get(to).is_some() && from != to {
            seq = self.drop_collection(to)?.unwrap_or(0);
        }
        let _changing = self.changing();
        let _ddl = self.ddl.lock();
        let Some(coll) = self.get(from) else {
            bail!(NamespaceNotFound, "Source collection {from} does not exist");
        };
        if self.get(to).is_some() {
            bail!(NamespaceExists, "Target namespace exists");
        }
        let _writes = self.lock_writes(&coll)?;
        let renamed = Arc::new(Collection::new(
            to.clone(),
            coll.id,
            coll.uuid.clone(),
            coll.options(),
            coll.sharding.clone(),
        ));
        renamed.adopt_indexes(&coll);
        renamed.set_throughput(coll.throughput());
        let mut batch = WriteBatch::default();
        batch.push(WriteOp::DeleteMeta(ns_key(from)));
        batch.put_meta(ns_key(to), encode(&renamed.meta_document())?);
        let target = doc! {"db": &to.db, "coll": &to.coll};
        log_collection_event(
            &*self.store,
            &mut batch,
            "rename",
            &coll,
            doc! {
                "to": target.clone(),
                "operationDescription": {"to": target, "dropTarget": drop_target},
            },
        )?;
        seq = seq.max(self.commit(batch)?);
        // Writers holding the old handle re-resolve and find the new name.
        coll.dropped.store(true, Ordering::Release);
        let mut map = self.collections.write();
        map.remove(from);
        map.insert(to.clone(), renamed);
        Ok(seq)
    }
}

/// Adds the entry of a change to a collection itself (`drop`, `rename`,
/// `create`, `createIndexes` …) to `batch`, when the store keeps a change
/// log; `details` go after its namespace.
pub(crate) fn log_collection_event(
    router_store: &dyn crate::storage::Store,
    batch: &mut crate::storage::WriteBatch,
    operation: &str,
    coll: &Collection,
    details: Document,
) -> Result<()> {
    if router_store.change_log().is_some() {
        batch.push(collection_event(operation, coll, details)?);
    }
    Ok(())
}

/// The details of a `shardCollection` event.
pub(crate) fn shard_details(sharding: &super::Sharding) -> Document {
    doc! {"operationDescription": {
        "shardKey": sharding.key.pattern(),
        "unique": false,
        "presplitHashedZones": false,
    }}
}

fn collection_event(
    operation: &str,
    coll: &Collection,
    details: Document,
) -> Result<crate::storage::WriteOp> {
    let mut entry = doc! {
        "operationType": operation,
        "wallTime": bson::DateTime::now(),
        "ns": {"db": &coll.ns.db, "coll": &coll.ns.coll},
        "collectionUUID": coll.uuid.clone(),
    };
    entry.extend(details);
    let bytes = entry
        .to_vec()
        .map_err(|e| Error::internal(format!("a change event does not encode: {e}")))?;
    Ok(crate::storage::WriteOp::PutChange(bytes))
}

/// Adds to `batch` where each physical partition of a new collection
/// lies: an unsharded collection is one partition holding every hash.
pub fn place_partitions(coll: &Collection, batch: &mut WriteBatch) {
    match &coll.sharding {
        None => batch.push(WriteOp::PutPartition {
            collection: coll.id,
            partition: WHOLE_COLLECTION,
            min: i64::MIN,
            max: i64::MAX,
        }),
        Some(s) => {
            for p in &s.map().partitions {
                batch.push(WriteOp::PutPartition {
                    collection: coll.id,
                    partition: p.id,
                    min: p.min,
                    max: p.max,
                });
            }
        }
    }
}

/// The usage entries of collection `id` with hashes in `min..=max`.
pub fn usage_entries(
    view: &SharedView,
    id: u64,
    min: i64,
    max: i64,
) -> impl Iterator<Item = Result<(i64, Usage)>> {
    blocking::iter(view.scan_usage(id, min, max)).map(|item| Ok(item?))
}

/// The stored totals of each partition of `map`.
fn load_usage(view: &SharedView, id: u64, map: &PartitionMap) -> Result<HashMap<u64, Usage>> {
    let mut usage = HashMap::new();
    for p in &map.partitions {
        let stored = blocking::wait(view.partition_total(id, p.id))?;
        usage.insert(p.id, stored.unwrap_or_default());
    }
    Ok(usage)
}

fn encode(doc: &Document) -> Result<Vec<u8>> {
    doc.to_vec()
        .map_err(|e| Error::internal(format!("cannot encode catalog entry: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_validated() {
        assert!(Namespace::new("test", "c").is_ok());
        assert!(Namespace::new("", "c").is_err());
        assert!(Namespace::new("a.b", "c").is_err());
        assert!(Namespace::new("a", "").is_err());
        assert!(Namespace::new("a", "c$d").is_err());
        let ns = Namespace::parse("db.coll.sub").unwrap();
        assert_eq!((ns.db.as_str(), ns.coll.as_str()), ("db", "coll.sub"));
    }
}
