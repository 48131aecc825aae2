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
//! Today every collection is one partition covering the whole hash space
//! (an unsharded, "fixed" collection); the partition map arrives with
//! sharding.

pub mod catalog;
mod write;

use std::collections::BTreeSet;
use std::sync::Arc;

use bson::{Bson, Document};

pub use catalog::{Collection, Namespace};
pub use write::{InsertOutcome, ModifyOutcome, UpdateStatement};

use crate::error::{Error, Result};
use crate::query::filter::{Filter, MatchDetails};
use crate::query::projection::Projection;
use crate::query::sort::SortSpec;
use crate::storage::{keys, keystring, SharedEngine, Space};
use catalog::Catalog;

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
}

pub struct Router {
    engine: SharedEngine,
    pub catalog: Catalog,
}

/// One stored document and where it lives.
pub(crate) struct Record {
    pub key: Vec<u8>,
    pub doc: Document,
}

pub(crate) fn decode_record(key: Vec<u8>, value: &[u8]) -> Result<Record> {
    let doc = Document::from_reader(value)
        .map_err(|e| Error::internal(format!("stored document is not valid BSON: {e}")))?;
    Ok(Record { key, doc })
}

impl Router {
    pub fn open(engine: SharedEngine) -> Result<Router> {
        let catalog = Catalog::load(engine.clone())?;
        Ok(Router { engine, catalog })
    }

    pub fn engine(&self) -> &SharedEngine {
        &self.engine
    }

    /// Waits until the commit `seq` is durable.
    pub async fn durable(&self, seq: u64) -> Result<()> {
        if seq == 0 {
            return Ok(());
        }
        Ok(self.engine.durable(seq).await?)
    }

    /// The key of the record with this `_id` in an unsharded collection.
    pub(crate) fn id_key(coll: &Collection, id: &Bson) -> Vec<u8> {
        keys::record_key(coll.id, UNSHARDED_HASH, &keystring::encode_id(id))
    }

    /// The records the filter may match: point lookups when it pins
    /// `_id`, else every record of the collection, in key order.
    pub(crate) fn candidates(
        &self,
        coll: &Collection,
        filter: Option<&Filter>,
    ) -> Box<dyn Iterator<Item = Result<Record>> + Send> {
        if let Some(ids) = filter.and_then(|f| f.equality_values("_id")) {
            let keys: BTreeSet<Vec<u8>> = ids.iter().map(|id| Router::id_key(coll, id)).collect();
            let engine = self.engine.clone();
            return Box::new(keys.into_iter().filter_map(move |key| {
                match engine.get(Space::Records, &key) {
                    Ok(Some(v)) => Some(decode_record(key, &v)),
                    Ok(None) => None,
                    Err(e) => Some(Err(e.into())),
                }
            }));
        }
        let (from, to) = keys::collection_range(coll.id);
        Box::new(
            self.engine
                .scan(Space::Records, from, to)
                .map(|item| {
                    let (k, v) = item?;
                    decode_record(k, &v)
                }),
        )
    }

    /// Matching records with what the match found.
    pub(crate) fn matching(
        &self,
        coll: &Collection,
        filter: Option<&Filter>,
    ) -> impl Iterator<Item = Result<(Record, MatchDetails)>> + Send + 'static {
        let filter = filter.cloned();
        self.candidates(coll, filter.as_ref())
            .filter_map(move |rec| match rec {
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

    /// Runs a query and returns its results as a lazy stream.
    pub fn find(&self, ns: &Namespace, spec: FindSpec) -> Result<DocStream> {
        let Some(coll) = self.catalog.get(ns) else {
            return Ok(Box::new(std::iter::empty()));
        };
        let matching = self.matching(&coll, spec.filter.as_ref());
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
        match spec.sort {
            Some(sort) => {
                let mut rows = Vec::new();
                for item in matching {
                    rows.push(item?);
                }
                rows.sort_by(|a, b| sort.compare(&a.0.doc, &b.0.doc));
                let rows = rows.into_iter().skip(skip);
                let rows: Box<dyn Iterator<Item = (Record, MatchDetails)> + Send> = match limit {
                    Some(l) => Box::new(rows.take(l)),
                    None => Box::new(rows),
                };
                Ok(Box::new(rows.map(project)))
            }
            None => {
                let rows = matching.skip(skip);
                let rows: Box<dyn Iterator<Item = Result<(Record, MatchDetails)>> + Send> =
                    match limit {
                        Some(l) => Box::new(rows.take(l)),
                        None => Box::new(rows),
                    };
                Ok(Box::new(rows.map(move |r| r.and_then(&project))))
            }
        }
    }

    /// Per-collection figures for `collStats` and `dbStats`.
    pub fn collection_stats(&self, coll: &Collection) -> Result<CollectionStats> {
        let (from, to) = keys::collection_range(coll.id);
        let mut stats = CollectionStats::default();
        for item in self.engine.scan(Space::Records, from, to) {
            let (_, v) = item?;
            stats.count += 1;
            stats.size += v.len() as u64;
        }
        Ok(stats)
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct CollectionStats {
    pub count: u64,
    pub size: u64,
}

/// Shared handle to the router.
pub type SharedRouter = Arc<Router>;
