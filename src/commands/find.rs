//! `find`, `getMore` and `killCursors`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::raw::CStr;
use bson::{doc, Bson, Document};

use super::args::{self, bool_or, collection_namespace, opt_document, opt_non_negative};
use super::request::{CommandReply, Request};
use crate::cursor::{
    change_batch_reply, stored_batch_reply, with_time_limit, BatchDocs, CursorStream,
    DEFAULT_FIRST_BATCH, FIRST_BATCH, NEXT_BATCH,
};
use crate::error::{Error, ErrorCode, Result};
use crate::index::plan::Hint;
use crate::query::collation::Collation;
use crate::query::filter::Filter;
use crate::query::projection::Projection;
use crate::query::sort::SortSpec;
use crate::router::{FindSpec, Found, KeyBounds};

/// A parsed `find` command.
pub(crate) struct Find {
    pub ns: crate::router::Namespace,
    pub spec: FindSpec,
    allow_disk_use: bool,
    batch_size: Option<usize>,
    single_batch: bool,
    max_time_ms: Option<u64>,
    /// A tailable cursor (on a capped collection), waiting for new
    /// documents in `getMore` when `await_data`.
    tailable: bool,
    await_data: bool,
}

/// Parses a `find` whose strings compare by `collation` (`None`: simple).
pub(crate) fn parse_collated(
    db: &str,
    b: &Document,
    collation: Option<&Arc<Collation>>,
) -> Result<Find> {
    let ns = collection_namespace("find", db, b)?;
    let vars = args::let_variables("find", b)?;
    let filter = opt_document("find", b, "filter")?
        .map(|f| Filter::parse_collated(&args::bind_in_filter(f, &vars), collation))
        .transpose()?;
    let mut natural = None;
    let sort = match opt_document("find", b, "sort")? {
        // `{$natural: ±1}` asks for a scan in storage order: a hint, not a sort.
        Some(s) if s.len() == 1 && s.contains_key("$natural") => {
            natural = Some(Hint::parse(&Bson::Document(s.clone()))?);
            None
        }
        Some(s) if !s.is_empty() => Some(SortSpec::parse(s)?.with_collation(collation.cloned())),
        _ => None,
    };
    let projection = match opt_document("find", b, "projection")? {
        Some(p) if !p.is_empty() => Some(Projection::parse(p)?),
        _ => None,
    };
    let skip = opt_non_negative("find", b, "skip")?.unwrap_or(0);
    let single_batch = bool_or("find", b, "singleBatch", false)?;
    let limit = opt_non_negative("find", b, "limit")?.filter(|&n| n > 0);
    let batch_size = opt_non_negative("find", b, "batchSize")?.map(|n| n as usize);
    let max_time_ms = opt_non_negative("find", b, "maxTimeMS")?;
    let hint = match b.get("hint") {
        Some(h) => Hint::parse(h)?,
        None => natural.flatten(),
    };
    // MongoDB 7.0 lets a blocking sort spill unless the query says
    // `allowDiskUse: false` (`allowDiskUseByDefault`).
    let allow_disk_use = bool_or("find", b, "allowDiskUse", true)?;
    let tailable = bool_or("find", b, "tailable", false)?;
    let await_data = bool_or("find", b, "awaitData", false)?;
    if tailable {
        let sort = opt_document("find", b, "sort")?.filter(|s| !s.is_empty());
        if sort.is_some_and(|s| s != &doc! {"$natural": 1}) {
            return Err(Error::bad_value(
                "cannot use tailable option with a sort other than {$natural: 1}",
            ));
        }
        if single_batch {
            return Err(Error::bad_value(
                "cannot use tailable option with the 'singleBatch' option",
            ));
        }
    } else if await_data {
        return Err(Error::failed_to_parse(
            "Cannot set 'awaitData' without also setting 'tailable'",
        ));
    }
    let key_bounds = key_bounds(b, hint.as_ref())?;
    // comment, readConcern … are accepted and do not change the result.
    Ok(Find {
        ns,
        spec: FindSpec {
            filter,
            sort,
            skip,
            limit,
            projection,
            hint,
            sort_limits: None,
            key_bounds,
        },
        allow_disk_use,
        batch_size,
        single_batch,
        max_time_ms,
        tailable,
        await_data,
    })
}

/// `min` and `max`, checked as MongoDB 7.0 checks them before planning:
/// they need a hint (51173), and name the same fields (51176).
fn key_bounds(b: &Document, hint: Option<&Hint>) -> Result<Option<KeyBounds>> {
    let min = opt_document("find", b, "min")?
        .filter(|d| !d.is_empty())
        .cloned();
    let max = opt_document("find", b, "max")?
        .filter(|d| !d.is_empty())
        .cloned();
    if min.is_none() && max.is_none() {
        return Ok(None);
    }
    if hint.is_none() {
        return Err(Error::new(
            ErrorCode::from_number(51173),
            "When using min()/max() a hint of which index to use must be provided",
        ));
    }
    if let (Some(lo), Some(hi)) = (&min, &max) {
        if !lo.keys().eq(hi.keys()) {
            return Err(Error::new(
                ErrorCode::from_number(51176),
                "min() and max() must have the same field names",
            ));
        }
    }
    Ok(Some(KeyBounds { min, max }))
}

pub async fn find(req: &Request<'_>) -> Result<CommandReply> {
    super::args::check_fields(
        req,
        &[
            "filter",
            "projection",
            "sort",
            "hint",
            "skip",
            "limit",
            "batchSize",
            "singleBatch",
            "max",
            "min",
            "returnKey",
            "showRecordId",
            "tailable",
            "oplogReplay",
            "noCursorTimeout",
            "awaitData",
            "allowPartialResults",
            "collation",
            "allowDiskUse",
            "let",
            "term",
            "readOnce",
            "includeQueryStatsMetrics",
        ],
    )?;
    let ns = collection_namespace("find", &req.db, &req.body)?;
    let collation = super::collation::effective(req.router(), &ns, req.body.get("collation"))?;
    let mut f = parse_collated(&req.db, &req.body, collation.as_ref())?;
    req.state.counters.op_query.fetch_add(1, Ordering::Relaxed);
    if let Some(view) = super::views::resolve(req.router(), &f.ns).await? {
        return super::aggregate::find_on_view(req, &view)
            .await
            .map(CommandReply::from);
    }
    if f.tailable {
        return tail(req, f).await;
    }
    f.spec.sort_limits = Some(crate::aggregate::Limits {
        max_blocking_bytes: req.state.parameters.blocking_bytes(),
        allow_disk_use: f.allow_disk_use,
        spill_dir: req.state.config.data_dir.join("spill"),
    });
    let ns = f.ns.full();
    let limit = f.spec.limit;
    let first = match (f.batch_size, limit) {
        (Some(b), Some(l)) => Some(b.min(l as usize)),
        (Some(b), None) => Some(b),
        (None, Some(l)) => Some((l as usize).min(DEFAULT_FIRST_BATCH)),
        (None, None) => Some(DEFAULT_FIRST_BATCH),
    };
    let max_time_ms = f.max_time_ms;
    let (batch, stream) = req
        .router()
        .find(&f.ns, f.spec, |found| {
            let mut stream = CursorStream::from(match found {
                Found::Stored(stored) => Found::Stored(with_time_limit(stored, max_time_ms)),
                Found::Documents(docs) => Found::Documents(with_time_limit(docs, max_time_ms)),
            });
            let batch = stream.next_batch(first)?;
            Ok((batch, stream))
        })
        .await?;
    let id = if batch.exhausted || f.single_batch {
        0
    } else {
        req.state
            .cursors
            .open(ns.clone(), stream, req.cursor_opener())?
    };
    batch_reply(FIRST_BATCH, id, &ns, batch.docs)
}

/// A tailable `find`: its first batch, and a cursor left open on a
/// collection that holds documents, even when none matched yet.
async fn tail(req: &Request<'_>, f: Find) -> Result<CommandReply> {
    let ns = f.ns.full();
    let first = f.batch_size.unwrap_or(DEFAULT_FIRST_BATCH);
    let first = f.spec.limit.map_or(first, |l| first.min(l as usize));
    let router = req.router();
    let opened = router.read_on(|| -> Result<Option<_>> {
        let Some((tail, holds)) =
            router.tail(&f.ns, f.spec.filter, f.spec.projection, f.await_data)?
        else {
            return Ok(None);
        };
        let mut stream = CursorStream::from(tail);
        let batch = stream.next_batch(Some(first))?;
        Ok(Some((batch, stream, holds)))
    });
    let (docs, id) = match opened.await? {
        None => (BatchDocs::Documents(Vec::new()), 0),
        Some((batch, _, false)) => (batch.docs, 0),
        Some((batch, stream, true)) => {
            let id = req
                .state
                .cursors
                .open(ns.clone(), stream, req.cursor_opener())?;
            (batch.docs, id)
        }
    };
    batch_reply(FIRST_BATCH, id, &ns, docs)
}

/// The reply to one batch of a cursor: stored documents go into it as
/// they are stored, undecoded.
fn batch_reply(field: &CStr, id: i64, ns: &str, docs: BatchDocs) -> Result<CommandReply> {
    Ok(match docs {
        BatchDocs::Stored(docs) => {
            CommandReply::Encoded(stored_batch_reply(field, id, ns, docs, None)?)
        }
        BatchDocs::Documents(docs) => {
            let mut cursor = Document::new();
            cursor.insert(field.as_str(), docs);
            cursor.insert("id", id);
            cursor.insert("ns", ns);
            doc! {"cursor": cursor}.into()
        }
    })
}

pub async fn get_more(req: &Request<'_>) -> Result<CommandReply> {
    super::args::check_fields(
        req,
        &[
            "collection",
            "batchSize",
            "term",
            "lastKnownCommittedOpTime",
            "includeQueryStatsMetrics",
        ],
    )?;
    let b = &req.body;
    let id = match b.get("getMore") {
        Some(Bson::Int64(id)) => *id,
        Some(Bson::Int32(id)) => *id as i64,
        Some(other) => {
            return Err(Error::type_mismatch(format!(
                "BSON field 'getMore.getMore' is the wrong type '{}', expected type 'long'",
                args::type_name(other)
            )))
        }
        None => return Err(Error::failed_to_parse("getMore needs a cursor id")),
    };
    let coll = match b.get("collection") {
        Some(Bson::String(c)) => c.clone(),
        Some(other) => {
            return Err(Error::type_mismatch(format!(
                "BSON field 'getMore.collection' is the wrong type '{}', expected type 'string'",
                args::type_name(other)
            )))
        }
        None => {
            return Err(Error::new(
                ErrorCode::MissingField,
                "BSON field 'getMore.collection' is missing but a required field",
            ))
        }
    };
    // Cursors of commands such as listCollections live on `db.$cmd.…`
    // namespaces, which are not collection names; the cursor itself
    // checks the namespace matches.
    if coll.is_empty() || coll.contains('\0') {
        return Err(Error::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid collection name for getMore: '{coll}'"),
        ));
    }
    let ns = format!("{}.{coll}", req.db);
    let batch_size = opt_non_negative("getMore", b, "batchSize")?
        .filter(|&n| n > 0)
        .map(|n| n as usize);
    req.state
        .counters
        .op_getmore
        .fetch_add(1, Ordering::Relaxed);
    let max_time_ms = opt_non_negative("getMore", b, "maxTimeMS")?;
    let state = req.state;
    let user = req.user();
    // A tailable `awaitData` cursor that finds nothing new waits for an
    // insert, up to `maxTimeMS` (one second by default), as mongod does.
    let deadline = Instant::now() + Duration::from_millis(max_time_ms.unwrap_or(1000));
    loop {
        let (batch, awaits) = state
            .router
            .read_on(|| {
                state.cursors.with_cursor(id, &ns, user.as_ref(), |stream| {
                    let awaits = stream.awaits();
                    if max_time_ms.is_some() && awaits.is_none() {
                        return Err(Error::bad_value(
                            "cannot set maxTimeMS on getMore command for a non-awaitData cursor",
                        ));
                    }
                    let batch = stream.next_batch(batch_size)?;
                    let exhausted = batch.exhausted;
                    Ok(((batch, awaits), exhausted))
                })
            })
            .await?;
        let now = Instant::now();
        match awaits {
            Some(wake) if batch.docs.is_empty() && !batch.exhausted && now < deadline => {
                // Another gateway's writes wake no one here: look again
                // at least every 100 ms.
                wake.wait((deadline - now).min(Duration::from_millis(100)))
                    .await;
            }
            _ => {
                let id = if batch.exhausted { 0 } else { id };
                return match (batch.resume_token, batch.docs) {
                    // A change stream's events, as they were written.
                    (Some(token), BatchDocs::Stored(docs)) => Ok(CommandReply::Encoded(
                        stored_batch_reply(NEXT_BATCH, id, &ns, docs, Some(&token))?,
                    )),
                    (Some(token), docs) => {
                        let docs = docs.into_documents()?;
                        Ok(change_batch_reply(NEXT_BATCH, id, &ns, docs, token).into())
                    }
                    (None, docs) => batch_reply(NEXT_BATCH, id, &ns, docs),
                };
            }
        }
    }
}

pub async fn kill_cursors(req: &Request<'_>) -> Result<Document> {
    collection_namespace("killCursors", &req.db, &req.body)?;
    let Some(ids) = args::opt_array("killCursors", &req.body, "cursors")? else {
        return Err(Error::new(
            ErrorCode::MissingField,
            "BSON field 'killCursors.cursors' is missing but a required field",
        ));
    };
    let user = req.user();
    let mut killed = Vec::new();
    let mut not_found = Vec::new();
    for id in ids {
        let Some(n) = args::number_as_i64(id) else {
            return Err(Error::type_mismatch(
                "killCursors.cursors must be an array of longs",
            ));
        };
        if req.state.cursors.kill(n, user.as_ref())? {
            killed.push(Bson::Int64(n));
        } else {
            not_found.push(Bson::Int64(n));
        }
    }
    Ok(doc! {
        "cursorsKilled": killed,
        "cursorsNotFound": not_found,
        "cursorsAlive": [],
        "cursorsUnknown": [],
    })
}
