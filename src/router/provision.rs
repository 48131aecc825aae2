//! Provisioned throughput: the request units per second (RU/s) a
//! collection or a database is given, as Cosmos DB's custom commands set
//! them (`customAction: CreateCollection`, `UpdateDatabase`, ...).
//!
//! Sits in the router beside the catalog, which stores the settings with
//! a collection's metadata (or, for a database, under its own catalog
//! key), so they survive a restart. A setting is manual (`offerThroughput`)
//! or autoscale (`autoScaleSettings.maxThroughput`); [`Router::provisioned_rus`]
//! turns it into the budget the request-charge accounting spends.
//!
//! A physical partition serves at most [`PARTITION_MAX_RUS`]: provisioning
//! more than a sharded collection's partitions can serve splits them at
//! once ([`Router::provision_collection`]); an unsharded collection is one
//! partition and cannot be given more.

use super::{Collection, Namespace, Router};
use crate::bail;
use crate::error::Result;
pub use crate::partition::throughput::{
    shared_rus, DatabaseSettings, Throughput, PARTITION_MAX_RUS,
};

impl Router {
    /// The RU/s currently provisioned for `coll`: its own throughput's
    /// budget ([`Throughput::budget`]), else its even share of its
    /// database's shared throughput ([`shared_rus`]), else
    /// `--default-throughput`; `None` when none of them is set (the
    /// collection is not throttled).
    pub fn provisioned_rus(&self, coll: &Collection) -> Option<u32> {
        if let Some(own) = coll.throughput() {
            return Some(own.budget());
        }
        let shared = self
            .catalog
            .database(&coll.ns.db)
            .and_then(|d| d.throughput);
        let Some(shared) = shared else {
            return self.options.throughput.default_rus;
        };
        let sharing = self
            .catalog
            .list_db(&coll.ns.db)
            .iter()
            .filter(|c| c.throughput().is_none())
            .count();
        Some(shared_rus(shared.budget(), sharing))
    }

    /// The throughput provisioned on `coll` itself (not shared).
    pub fn stored_throughput(&self, coll: &Collection) -> Option<Throughput> {
        coll.throughput()
    }

    /// The stored settings of database `db`, when it was created with
    /// `CreateDatabase`.
    pub fn database_settings(&self, db: &str) -> Option<DatabaseSettings> {
        self.catalog.database(db)
    }

    /// True when `db` exists: created with `CreateDatabase` or holding a
    /// collection.
    pub fn database_exists(&self, db: &str) -> bool {
        self.catalog.database(db).is_some() || !self.catalog.list_db(db).is_empty()
    }

    /// Creates database `db` with `throughput` shared by its collections,
    /// durably; `NamespaceExists` when it exists.
    pub async fn create_database(&self, db: &str, throughput: Option<Throughput>) -> Result<()> {
        let seq = super::write::maybe_blocking(false, || {
            self.catalog
                .create_database(db, DatabaseSettings { throughput }, || {
                    !self.catalog.list_db(db).is_empty()
                })
        })?;
        self.durable(seq).await
    }

    /// Changes the shared throughput of database `db`, durably.
    pub async fn update_database(&self, db: &str, throughput: Throughput) -> Result<()> {
        let Some(settings) = self.catalog.database(db) else {
            if self.catalog.list_db(db).is_empty() {
                bail!(NamespaceNotFound, "Database {db} not found.");
            }
            bail!(
                BadValue,
                "Database {db} has no shared throughput to update; it was not created with offerThroughput or autoScaleSettings."
            );
        };
        if settings.throughput.is_none() {
            bail!(
                BadValue,
                "Database {db} has no shared throughput to update; it was not created with offerThroughput or autoScaleSettings."
            );
        }
        let settings = DatabaseSettings {
            throughput: Some(throughput),
        };
        let seq = super::write::maybe_blocking(false, || self.catalog.put_database(db, settings))?;
        self.durable(seq).await
    }

    /// Gives collection `ns` its own `throughput`, durably. A sharded
    /// collection whose partitions could not serve it is split at once
    /// until it has [`Throughput::partitions_needed`]; an unsharded one
    /// is a single partition and cannot take more than
    /// [`PARTITION_MAX_RUS`].
    pub async fn provision_collection(&self, ns: &Namespace, throughput: Throughput) -> Result<()> {
        let seq = super::write::maybe_blocking(false, || -> Result<u64> {
            let seq = self
                .with_write_lock(ns, false, |coll| {
                    if coll.sharding.is_none() {
                        check_unsharded(ns, throughput)?;
                    }
                    coll.set_throughput(Some(throughput));
                    let mut batch = crate::storage::WriteBatch::default();
                    self.catalog.put_meta(coll, &mut batch)?;
                    self.commit(batch)
                })?
                .map(|(seq, _)| seq);
            let Some(seq) = seq else {
                bail!(NamespaceNotFound, "Collection {ns} not found.");
            };
            let split = self.split_to(ns, throughput.partitions_needed())?;
            Ok(seq.max(split))
        })?;
        self.durable(seq).await
    }
}

/// Refuses throughput an unsharded collection (one partition) cannot
/// serve.
pub fn check_unsharded(ns: &Namespace, throughput: Throughput) -> Result<()> {
    if throughput.budget() > PARTITION_MAX_RUS {
        bail!(
            BadValue,
            "Collection {ns} has no shard key, so it is one physical partition and serves at most {PARTITION_MAX_RUS} RU/s; provision at most {PARTITION_MAX_RUS} RU/s or create it with a shardKey."
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::Document;

    use crate::error::ErrorCode;

    #[test]
    fn unsharded_collections_take_one_partition_of_throughput() {
        let ns = Namespace::new("db", "c").unwrap();
        assert!(check_unsharded(&ns, Throughput::Manual(10_000)).is_ok());
        let e = check_unsharded(&ns, Throughput::Manual(10_100)).unwrap_err();
        assert!(matches!(e.code, ErrorCode::BadValue));
        assert!(check_unsharded(&ns, Throughput::Autoscale { max: 20_000 }).is_err());
    }

    fn router() -> (crate::storage::memory::MemoryEngine, Router) {
        let engine = crate::storage::memory::MemoryEngine::default();
        let store = crate::storage::kv::KvStore::new(std::sync::Arc::new(engine.clone()));
        (engine, Router::open(store).unwrap())
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn provisioned_rus_follow_own_then_shared_throughput() {
        let (_, router) = router();
        let (a, b) = (
            Namespace::new("db", "a").unwrap(),
            Namespace::new("db", "b").unwrap(),
        );
        router.create_collection(&a, Document::new()).await.unwrap();
        router.create_collection(&b, Document::new()).await.unwrap();
        let coll_a = router.collection(&a).unwrap();
        assert_eq!(router.provisioned_rus(&coll_a), None);
        router.create_database("db2", None).await.unwrap();
        let e = router.create_database("db", None).await.unwrap_err();
        assert!(matches!(e.code, ErrorCode::NamespaceExists));
        router
            .catalog
            .put_database(
                "db",
                DatabaseSettings {
                    throughput: Some(Throughput::Manual(1000)),
                },
            )
            .unwrap();
        // Two collections share the database's 1000 RU/s.
        assert_eq!(router.provisioned_rus(&coll_a), Some(500));
        router
            .provision_collection(&b, Throughput::Autoscale { max: 4000 })
            .await
            .unwrap();
        let coll_b = router.collection(&b).unwrap();
        assert_eq!(router.provisioned_rus(&coll_b), Some(4000));
        assert_eq!(router.provisioned_rus(&coll_a), Some(1000));
        let e = router
            .provision_collection(&a, Throughput::Manual(20_000))
            .await
            .unwrap_err();
        assert!(matches!(e.code, ErrorCode::BadValue));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn throughput_splits_a_sharded_collection_and_survives_reopening() {
        let (engine, router) = router();
        let ns = Namespace::new("db", "s").unwrap();
        let key = crate::partition::ShardKey::new("k").unwrap();
        router.shard_collection(&ns, key, Some(1)).await.unwrap();
        router
            .provision_collection(&ns, Throughput::Manual(45_000))
            .await
            .unwrap();
        let coll = router.collection(&ns).unwrap();
        let map = coll.sharding.as_ref().unwrap().map();
        assert_eq!(map.partitions.len(), 5);
        // The partitions still cover every hash exactly once.
        assert_eq!(map.partitions.first().unwrap().min, i64::MIN);
        assert_eq!(map.partitions.last().unwrap().max, i64::MAX);
        for pair in map.partitions.windows(2) {
            assert_eq!(pair[0].max + 1, pair[1].min);
        }
        router.close().unwrap();
        drop(router);
        let store = crate::storage::kv::KvStore::new(std::sync::Arc::new(engine));
        let reopened = Router::open(store).unwrap();
        let coll = reopened.collection(&ns).unwrap();
        assert_eq!(coll.throughput(), Some(Throughput::Manual(45_000)));
        assert_eq!(coll.sharding.as_ref().unwrap().map().partitions.len(), 5);
    }
}
