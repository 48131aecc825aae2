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

use bson::Document;

use super::catalog::Collection;
use super::indexes::{CreatedIndexes, ModifiedIndex, Validation};
use super::sharding::Sharded;
use super::write::maybe_blocking;
use super::{CollectionStats, DocStream, Explained, FindSpec, Namespace, Router};
use crate::error::Result;
use crate::index::Index;
use crate::partition::ShardKey;
use crate::query::filter::Filter;

impl Router {
    /// Plans and runs a query, then hands its results to `read` (which
    /// takes the first batch, or all of them): a point read runs here,
    /// anything that may scan where blocking is allowed.
    pub async fn find<T>(
        &self,
        ns: &Namespace,
        spec: FindSpec,
        read: impl FnOnce(DocStream) -> Result<T>,
    ) -> Result<T> {
        let coll = match ns.db.as_str() {
            // The generated `config` collections.
            "config" => None,
            _ => self.catalog.get(ns),
        };
        let Some(coll) = coll else {
            return maybe_blocking(self.inline(coll_is_missing(self, ns)), || {
                read(self.find_stream(ns, spec)?)
            });
        };
        let reader = self.reader_for(&coll);
        let plan = self.plan(&coll, &spec, &reader)?;
        if self.provisioned_rus(&coll).is_some() {
            let parts: Vec<u64> = plan.parts.iter().map(|p| p.partition.id).collect();
            self.admit(&coll, &parts).await?;
        }
        maybe_blocking(self.inline(plan.is_point_read()), || {
            read(self.execute(&coll, plan, spec, reader)?)
        })
    }

    /// Runs a query for one `_id` that returns whole documents, answering
    /// with the stored documents' bytes, undecoded (at most one); `None`
    /// when `spec` is not such a query (a projection, a sort, a skip,
    /// other `_id`s or an index to read), which [`Router::find`] answers.
    pub async fn find_stored(
        &self,
        ns: &Namespace,
        spec: &FindSpec,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        let one_id =
            super::plan::pinned_ids(spec.filter.as_ref()).is_some_and(|ids| ids.len() == 1);
        if !one_id || spec.projection.is_some() || spec.sort.is_some() || spec.skip != 0 {
            return Ok(None);
        }
        let coll = match ns.db.as_str() {
            "config" => None,
            _ => self.catalog.get(ns),
        };
        let Some(coll) = coll else {
            return Ok(None);
        };
        // A sharded collection is read in one partition only when the
        // filter pins its shard key: otherwise leave the planning to
        // `find` rather than plan the fan-out twice.
        if let Some(sharding) = &coll.sharding {
            let one_key = super::plan::key_hashes(sharding, spec.filter.as_ref())
                .is_some_and(|hashes| hashes.len() == 1);
            if !one_key {
                return Ok(None);
            }
        }
        let reader = self.reader_for(&coll);
        let plan = self.plan(&coll, spec, &reader)?;
        let [part] = plan.parts.as_slice() else {
            return Ok(None);
        };
        if !part.reads_one_record() {
            return Ok(None);
        }
        if self.provisioned_rus(&coll).is_some() {
            self.admit(&coll, &[part.partition.id]).await?;
        }
        maybe_blocking(self.inline(true), || {
            super::stored_matches(&reader, coll.id, &plan, part, spec.filter.as_ref())
        })
        .map(Some)
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

    /// Creates a collection with `options`, durably; the caller checked
    /// it does not exist.
    pub async fn create_collection(&self, ns: &Namespace, options: Document) -> Result<()> {
        let (_, seq) = maybe_blocking(false, || self.catalog.create(ns, options, false))?;
        self.durable(seq.unwrap_or(0)).await
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
