//! The router's async face: what commands call. Each method decides
//! where its work runs — right on the async worker when the plan says it
//! is a few point reads, where blocking is allowed when it may scan or
//! write much ([`maybe_blocking`]) — so no command chooses the router's
//! threading, and a backend whose reads are remote can change that here
//! alone.
//!
//! The catalog stays private to the router: commands see collections
//! through [`Router::collection`] and friends.

use std::sync::Arc;

use bson::{doc, Document};

use super::catalog::Collection;
use super::indexes::{CreatedIndexes, ModifiedIndex, Validation};
use super::sharding::Sharded;
use super::validation::CollectionOptions;
use super::write::maybe_blocking;
use super::{CollectionStats, Explained, FindSpec, Found, Namespace, Router};
use crate::error::Result;
use crate::index::Index;
use crate::partition::ShardKey;
use crate::query::filter::Filter;
use crate::storage::WriteBatch;

impl Router {
    /// Plans and runs a query, then hands its results to `read` (which
    /// takes the first batch, or all of them): a cheap plan (a few point
    /// reads, a short range) runs here, anything that may scan where
    /// blocking is allowed. Whole documents read from one partition in
    /// order come as stored bytes ([`Found`]).
    pub async fn find<T>(
        &self,
        ns: &Namespace,
        spec: FindSpec,
        read: impl FnOnce(Found) -> Result<T>,
    ) -> Result<T> {
        let spec = super::geo::near_order(spec)?;
        let coll = match ns.db.as_str() {
            // The generated `config` collections.
            "config" => None,
            _ => self.catalog.get(ns),
        };
        let Some(coll) = coll else {
            return maybe_blocking(self.inline(coll_is_missing(self, ns)), || {
                read(Found::Documents(self.find_stream(ns, spec)?))
            });
        };
        let reader = self.reader_for(&coll);
        let plan = self.plan(&coll, &spec, &reader)?;
        if self.provisioned_rus(&coll).is_some() {
            let parts: Vec<u64> = plan.parts.iter().map(|p| p.partition.id).collect();
            self.admit(&coll, &parts).await?;
        }
        maybe_blocking(self.inline(plan.is_cheap()), || {
            read(self.execute(&coll, plan, spec, reader)?)
        })
    }

    /// Reads on from a stream this router produced (a cursor's next
    /// batch): its reads may block, so it runs where blocking is allowed.
    pub async fn read_on<T>(&self, read: impl FnOnce() -> T) -> T {
        maybe_blocking(false, read)
    }

    /// The number of documents matching `filter`.
    pub async fn count(&self, ns: &Namespace, filter: Option<&Filter>) -> Result<u64> {
        self.admit_namespace(ns).await?;
        maybe_blocking(false, || self.count_now(ns, filter))
    }

    /// The plan of a query and what each of its partitions did when run.
    pub async fn explain(&self, ns: &Namespace, spec: &FindSpec) -> Result<Explained> {
        maybe_blocking(false, || self.explain_now(ns, spec))
    }

    /// Documents and bytes of one collection.
    pub async fn collection_stats(&self, coll: &Collection) -> Result<CollectionStats> {
        maybe_blocking(false, || self.collection_stats_now(coll))
    }

    /// Documents and bytes of each of `colls`, summed.
    pub async fn total_stats(&self, colls: &[Arc<Collection>]) -> Result<CollectionStats> {
        maybe_blocking(false, || {
            let mut total = CollectionStats::default();
            for c in colls {
                let s = self.collection_stats_now(c)?;
                total.count += s.count;
                total.size += s.size;
            }
            Ok(total)
        })
    }

    /// The collection of `ns`, if it exists.
    pub fn collection(&self, ns: &Namespace) -> Option<Arc<Collection>> {
        self.catalog.get(ns)
    }

    /// Every collection, by namespace.
    pub fn collections(&self) -> Vec<Arc<Collection>> {
        self.catalog.list()
    }

    /// The collections of database `db`.
    pub fn collections_in(&self, db: &str) -> Vec<Arc<Collection>> {
        self.catalog.list_db(db)
    }

    /// The address partitions are reported at: this server's.
    pub fn host(&self) -> &str {
        &self.options.host
    }

    /// Creates a collection with `options` (refused when malformed),
    /// durably; the caller checked it does not exist.
    pub async fn create_collection(&self, ns: &Namespace, options: Document) -> Result<()> {
        let options = CollectionOptions::parse("create", ns, options)?;
        let (_, seq) = maybe_blocking(false, || self.catalog.create(ns, options, false))?;
        self.durable(seq.unwrap_or(0)).await
    }

    /// Makes everything written so far durable (`fsync`): an empty
    /// commit after every other, waited for like a write.
    pub async fn sync_all(&self) -> Result<()> {
        let seq = maybe_blocking(false, || self.commit(WriteBatch::default()))?;
        self.durable(seq).await
    }

    /// Changes collection `ns`'s options (`collMod`), durably: `change`
    /// gets the current options and returns new ones, refused when
    /// malformed as `collMod` refuses them. False when there is no such
    /// collection.
    pub async fn modify_options(
        &self,
        ns: &Namespace,
        change: impl Fn(&Document) -> Document,
    ) -> Result<bool> {
        let changed = maybe_blocking(false, || {
            self.with_write_lock(ns, false, |coll| {
                let before = coll.options();
                let options = CollectionOptions::parse("collMod", ns, change(&before.document))?;
                coll.set_options(Arc::new(options));
                let mut batch = WriteBatch::default();
                let description = doc! {"options": coll.options().document.clone()};
                let committed = self
                    .catalog
                    .put_meta(coll, &mut batch)
                    .and_then(|()| {
                        super::catalog::log_collection_event(
                            &*self.store,
                            &mut batch,
                            "modify",
                            coll,
                            doc! {"operationDescription": description},
                        )
                    })
                    .and_then(|()| self.commit(batch));
                if committed.is_err() {
                    coll.set_options(before);
                }
                committed
            })
        })?;
        match changed {
            None => Ok(false),
            Some((seq, _)) => {
                self.durable(seq).await?;
                Ok(true)
            }
        }
    }

    /// Drops a collection, durably; false when there was none.
    pub async fn drop_collection(&self, ns: &Namespace) -> Result<bool> {
        let seq = maybe_blocking(false, || self.catalog.drop_collection(ns))?;
        match seq {
            None => Ok(false),
            Some(seq) => {
                self.durable(seq).await?;
                Ok(true)
            }
        }
    }

    /// Drops every collection of `db` and its stored settings, durably.
    pub async fn drop_database(&self, db: &str) -> Result<()> {
        let last = maybe_blocking(false, || -> Result<u64> {
            let mut last = self.catalog.forget_database(db)?;
            for c in self.catalog.list_db(db) {
                if let Some(seq) = self.catalog.drop_collection(&c.ns)? {
                    last = last.max(seq);
                }
            }
            if last > 0 && self.store.change_log().is_some() {
                let mut batch = WriteBatch::default();
                batch.push(super::changes::drop_database_event(db)?);
                last = last.max(self.commit(batch)?);
            }
            Ok(last)
        })?;
        self.durable(last).await
    }

    /// Renames a collection, durably.
    pub async fn rename_collection(
        &self,
        from: &Namespace,
        to: &Namespace,
        drop_target: bool,
    ) -> Result<()> {
        let seq = maybe_blocking(false, || self.catalog.rename(from, to, drop_target))?;
        self.durable(seq).await
    }

    /// Builds indexes; the caller waits for `seq` of the result.
    pub async fn create_indexes(
        &self,
        ns: &Namespace,
        specs: &[Document],
    ) -> Result<CreatedIndexes> {
        maybe_blocking(false, || self.create_indexes_now(ns, specs))
    }

    /// Drops the indexes `select` picks; see [`Router::drop_indexes_now`].
    pub async fn drop_indexes(
        &self,
        ns: &Namespace,
        select: impl Fn(&[Arc<Index>]) -> Result<Vec<u32>>,
    ) -> Result<Option<(usize, u64)>> {
        maybe_blocking(false, || self.drop_indexes_now(ns, select))
    }

    /// Changes options of one index; see [`Router::modify_index_now`].
    pub async fn modify_index(
        &self,
        ns: &Namespace,
        pick: impl Fn(&Index) -> bool,
        change: impl Fn(&Index) -> Result<Index>,
    ) -> Result<Option<ModifiedIndex>> {
        maybe_blocking(false, || self.modify_index_now(ns, pick, change))
    }

    /// Checks a collection's indexes against its documents.
    pub async fn validate(&self, coll: &Collection) -> Result<Validation> {
        maybe_blocking(false, || self.validate_now(coll))
    }

    /// Shards a collection; see [`Router::shard_collection_now`].
    pub async fn shard_collection(
        &self,
        ns: &Namespace,
        key: ShardKey,
        partitions: Option<u64>,
    ) -> Result<Sharded> {
        maybe_blocking(false, || self.shard_collection_now(ns, key, partitions))
    }
}

/// True when `ns` names nothing stored: reading it costs nothing.
fn coll_is_missing(router: &Router, ns: &Namespace) -> bool {
    router.catalog.get(ns).is_none()
}
