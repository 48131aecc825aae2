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
use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document};

pub use catalog::{Collection, Namespace};
pub use write::{maybe_blocking, InsertOutcome, ModifyOutcome, UpdateStatement};

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

    /// How to reach the records a filter may match: point lookups when
    /// it pins `_id`, a key range when it bounds `_id`, else the whole
    /// collection. In an unsharded collection key order is `_id` order.
    fn access(&self, coll: &Collection, filter: Option<&Filter>) -> Access {
        if let Some(ids) = filter.and_then(|f| f.equality_values("_id")) {
            return Access::Points(ids.iter().map(|id| Router::id_key(coll, id)).collect());
        }
        let (all_from, all_to) = keys::collection_range(coll.id);
        let Some((lower, upper)) = filter.and_then(|f| f.range_bounds("_id")) else {
            return Access::Range(all_from, all_to);
        };
        let prefix = keys::record_key(coll.id, UNSHARDED_HASH, &[]);
        let with_prefix = |tail: &[u8]| {
            let mut k = prefix.clone();
            k.extend_from_slice(tail);
            k
        };
        // A comparison only matches values of its own type class, so a
        // one-sided range stops at the edge of that class.
        let class_start = |v: &Bson| with_prefix(&keystring::encode_id(v)[..1]);
        let class_end = |v: &Bson| {
            let first = keystring::encode_id(v).first().copied().unwrap_or(0);
            with_prefix(&[first.saturating_add(1)])
        };
        let (from, to) = match (&lower, &upper) {
            (Bound::Unbounded, Bound::Unbounded) => (all_from, all_to),
            (lo, hi) => {
                let from = match lo {
                    Bound::Included(v) => Bound::Included(with_prefix(&keystring::encode_id(v))),
                    Bound::Excluded(v) => Bound::Excluded(with_prefix(&keystring::encode_id(v))),
                    Bound::Unbounded => match hi {
                        Bound::Included(v) | Bound::Excluded(v) => Bound::Included(class_start(v)),
                        Bound::Unbounded => all_from,
                    },
                };
                let to = match hi {
                    Bound::Included(v) => Bound::Included(with_prefix(&keystring::encode_id(v))),
                    Bound::Excluded(v) => Bound::Excluded(with_prefix(&keystring::encode_id(v))),
                    Bound::Unbounded => match lo {
                        Bound::Included(v) | Bound::Excluded(v) => Bound::Excluded(class_end(v)),
                        Bound::Unbounded => all_to,
                    },
                };
                (from, to)
            }
        };
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
        match self.access(coll, filter) {
            Access::Points(keys) => {
                let engine = self.engine.clone();
                let fetch = move |key: Vec<u8>| match engine.get(Space::Records, &key) {
                    Ok(Some(v)) => Some(decode_record(key, &v)),
                    Ok(None) => None,
                    Err(e) => Some(Err(e.into())),
                };
                if reverse {
                    Box::new(keys.into_iter().rev().filter_map(fetch))
                } else {
                    Box::new(keys.into_iter().filter_map(fetch))
                }
            }
            Access::Range(from, to) => {
                let scan = if reverse {
                    self.engine.scan_rev(Space::Records, from, to)
                } else {
                    self.engine.scan(Space::Records, from, to)
                };
                Box::new(scan.map(|item| {
                    let (k, v) = item?;
                    decode_record(k, &v)
                }))
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
        let filter = filter.cloned();
        self.candidates(coll, filter.as_ref(), reverse)
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
    ///
    /// A sort on `_id` alone follows key order and streams; any other sort
    /// keeps only the best `skip + limit` rows when there is a limit, and
    /// refuses to hold more than [`MAX_SORT_BYTES`] of documents otherwise.
    pub fn find(&self, ns: &Namespace, spec: FindSpec) -> Result<DocStream> {
        let Some(coll) = self.catalog.get(ns) else {
            return Ok(Box::new(std::iter::empty()));
        };
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
        let id_order = match &spec.sort {
            None => Some(false),
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
        let Some(sort) = spec.sort else {
            return Ok(Box::new(std::iter::empty()));
        };
        let keep = limit.map(|l| l.saturating_add(skip));
        let rows = sorted_rows(self.matching(&coll, spec.filter.as_ref()), &sort, keep)?;
        let rows = rows.into_iter().skip(skip);
        let rows: Box<dyn Iterator<Item = (Record, MatchDetails)> + Send> = match limit {
            Some(l) => Box::new(rows.take(l)),
            None => Box::new(rows),
        };
        Ok(Box::new(rows.map(project)))
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

/// Most bytes of documents a sort without a limit holds in memory,
/// MongoDB's default for a blocking sort.
pub const MAX_SORT_BYTES: usize = 100 * 1024 * 1024;

/// Where a query's candidate records come from.
enum Access {
    /// Exact record keys, in key order.
    Points(BTreeSet<Vec<u8>>),
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

/// Sorts matching rows. With `keep`, only the best `keep` rows are held:
/// rows gather in a buffer that is sorted and cut back to `keep` whenever
/// it doubles, so memory stays proportional to `keep`.
fn sorted_rows(
    rows: impl Iterator<Item = Result<(Record, MatchDetails)>>,
    sort: &SortSpec,
    keep: Option<usize>,
) -> Result<Vec<(Record, MatchDetails)>> {
    let mut buf: Vec<(Vec<Bson>, usize, (Record, MatchDetails))> = Vec::new();
    let mut bytes = 0usize;
    let order = |a: &(Vec<Bson>, usize, (Record, MatchDetails)),
                 b: &(Vec<Bson>, usize, (Record, MatchDetails))| {
        sort.compare_keys(&a.0, &b.0).then(a.1.cmp(&b.1))
    };
    for (seq, row) in rows.enumerate() {
        let row = row?;
        let key = sort.key_for(&row.0.doc);
        if keep.is_none() {
            bytes += crate::commands::args::document_size(&row.0.doc);
            if bytes > MAX_SORT_BYTES {
                return Err(crate::err!(
                    QueryExceededMemoryLimitNoDiskUseAllowed,
                    "Sort exceeded memory limit of {MAX_SORT_BYTES} bytes, but did not opt in to external sorting."
                ));
            }
        }
        buf.push((key, seq, row));
        if let Some(k) = keep {
            if buf.len() >= k.saturating_mul(2).max(1024) {
                buf.sort_by(order);
                buf.truncate(k);
            }
        }
    }
    buf.sort_by(order);
    if let Some(k) = keep {
        buf.truncate(k);
    }
    Ok(buf.into_iter().map(|(_, _, row)| row).collect())
}

#[derive(Debug, Default, Clone, Copy)]
pub struct CollectionStats {
    pub count: u64,
    pub size: u64,
}

/// Shared handle to the router.
pub type SharedRouter = Arc<Router>;
