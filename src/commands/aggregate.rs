//! `aggregate`: parses the command, answers the stages that describe the
//! server itself (`$collStats`, `$shardedDataDistribution`) here, and hands
//! every other pipeline to the router, which splits it across partitions
//! ([`crate::router::aggregate`]). The stages themselves live in
//! [`crate::aggregate`].

use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::args::{self, bool_or, collection_namespace, number_as_i64, opt_document};
use super::explain_render::{self, Explain, Kind, Verbosity};
use super::request::Request;
use super::views;
use crate::aggregate::{stage_arg, Context, Limits, ParseContext, Pipeline};
use crate::cursor::{
    change_batch_reply, first_batch_reply, with_time_limit, Batch, CursorStream,
    DEFAULT_FIRST_BATCH, FIRST_BATCH,
};
use crate::error::{Error, ErrorCode, Result};
use crate::query::sort::SortSpec;
use crate::router::aggregate::{leading_match, RouterContext, SplitPipeline};
use crate::router::change_stream::{ChangeStream, ChangeStreamSpec};
use crate::router::throttle::PartitionUnits;
use crate::router::{DocStream, FindSpec, Namespace};

/// What an `aggregate` command asks for, parsed.
pub(crate) struct Aggregate {
    pub ns: Namespace,
    pub collectionless: bool,
    pub pipeline: Vec<Bson>,
    pub vars: Document,
    pub allow_disk_use: bool,
    pub explain: bool,
    pub batch_size: Option<usize>,
    pub max_time_ms: Option<u64>,
    /// The `collation` option as given.
    pub collation: Option<Bson>,
}

pub(crate) fn parse(db: &str, b: &Document) -> Result<Aggregate> {
    // `aggregate: 1` runs on no collection; its first stage makes the
    // documents (`$documents`, `$shardedDataDistribution`).
    let collectionless = matches!(b.get("aggregate"), Some(v) if number_as_i64(v) == Some(1));
    let ns = match b.get("aggregate") {
        Some(Bson::String(_)) => collection_namespace("aggregate", db, b)?,
        Some(_) if collectionless => Namespace {
            db: db.to_string(),
            coll: "$cmd.aggregate".to_string(),
        },
        Some(_) => {
            return Err(Error::new(
                ErrorCode::FailedToParse,
                "Invalid {aggregate: ...} value: must be a collection name or 1",
            ))
        }
        None => return Err(Error::failed_to_parse("aggregate needs a collection")),
    };
    let Some(pipeline) = args::opt_array("aggregate", b, "pipeline")? else {
        return Err(Error::new(
            ErrorCode::MissingField,
            "BSON field 'aggregate.pipeline' is missing but a required field",
        ));
    };
    let explain = bool_or("aggregate", b, "explain", false)?;
    let cursor_opts = opt_document("aggregate", b, "cursor")?;
    if cursor_opts.is_none() && !explain {
        return Err(Error::new(
            ErrorCode::FailedToParse,
            "The 'cursor' option is required, except for aggregate with the explain argument",
        ));
    }
    let batch_size = match cursor_opts.and_then(|c| c.get("batchSize")) {
        Some(v) => Some(
            number_as_i64(v)
                .filter(|n| *n >= 0)
                .ok_or_else(|| Error::bad_value("cursor.batchSize must be a non-negative number"))?
                as usize,
        ),
        None => None,
    };
    let vars = args::let_variables("aggregate", b)?;
    Ok(Aggregate {
        ns,
        collectionless,
        pipeline: pipeline.clone(),
        vars,
        // MongoDB 7.0 lets blocking stages spill unless told not to
        // (`allowDiskUseByDefault`).
        allow_disk_use: bool_or("aggregate", b, "allowDiskUse", true)?,
        explain,
        batch_size,
        max_time_ms: args::opt_non_negative("aggregate", b, "maxTimeMS")?,
        collation: b.get("collation").cloned(),
    })
}

/// The name of a pipeline's first stage.
fn first_stage(pipeline: &[Bson]) -> Option<&str> {
    match pipeline.first() {
        Some(Bson::Document(d)) => d.keys().next().map(String::as_str),
        _ => None,
    }
}

/// The limits blocking stages run under.
fn limits(req: &Request<'_>, allow_disk_use: bool) -> Limits {
    Limits {
        max_blocking_bytes: req.state.parameters.blocking_bytes(),
        allow_disk_use,
        spill_dir: req.state.config.data_dir.join("spill"),
    }
}

/// What the stages of `agg` run with: the router, its database, the
/// limits of blocking stages and the time it must end by.
fn context(
    req: &Request<'_>,
    agg: &Aggregate,
    deadline: Option<std::time::Instant>,
) -> Result<Arc<dyn Context>> {
    Ok(RouterContext::shared(
        req.router().clone(),
        &agg.ns.db,
        limits(req, agg.allow_disk_use),
        deadline,
        super::args::document_validation("aggregate", &req.body)?,
    ))
}

/// Runs the pipeline and returns its output stream.
pub(crate) fn execute(req: &Request<'_>, agg: &Aggregate) -> Result<DocStream> {
    let router = req.router().clone();
    let deadline = agg
        .max_time_ms
        .filter(|&ms| ms > 0)
        .map(|ms| std::time::Instant::now() + std::time::Duration::from_millis(ms));
    let ctx = context(req, agg, deadline)?;
    let collation = if agg.collectionless {
        None
    } else {
        super::collation::effective(&router, &agg.ns, agg.collation.as_ref())?
    };
    let parse_ctx = ParseContext {
        vars: agg.vars.clone(),
        collation,
        ..ParseContext::default()
    };
    // Stages that describe the server make the input of the rest.
    let source: Option<Vec<Document>> = match first_stage(&agg.pipeline) {
        Some("$collStats") => {
            let Some(Bson::Document(stage)) = agg.pipeline.first() else {
                return Err(Error::internal("pipeline changed while running"));
            };
            let (_, arg) = stage_arg(stage)?;
            let Bson::Document(spec) = arg else {
                return Err(Error::new(
                    ErrorCode::StageLimitNotPositive,
                    "the $collStats stage specification must be an object",
                ));
            };
            Some(coll_stats_documents(&router, &agg.ns, spec)?)
        }
        Some("$shardedDataDistribution") => {
            if !agg.collectionless || agg.ns.db != "admin" {
                return Err(Error::new(
                    ErrorCode::InvalidNamespace,
                    "$shardedDataDistribution must be run against the 'admin' database with {aggregate: 1}",
                ));
            }
            Some(sharded_data_distribution(&router))
        }
        Some("$currentOp") => {
            if !agg.collectionless || agg.ns.db != "admin" {
                return Err(Error::new(
                    ErrorCode::InvalidNamespace,
                    "$currentOp must be run against the 'admin' database with {aggregate: 1}",
                ));
            }
            if let Some(Bson::Document(stage)) = agg.pipeline.first() {
                let (_, arg) = stage_arg(stage)?;
                if !matches!(arg, Bson::Document(_)) {
                    return Err(Error::new(
                        ErrorCode::FailedToParse,
                        "$currentOp options must be specified in an object, but found: "
                            .to_string()
                            + crate::query::compare::type_name(arg),
                    ));
                }
            }
            Some(super::current_op::documents(req))
        }
        _ => None,
    };
    for (i, stage) in agg.pipeline.iter().enumerate().skip(1) {
        if let Bson::Document(d) = stage {
            if let Some(
                name @ ("$collStats"
                | "$currentOp"
                | "$shardedDataDistribution"
                | "$documents"
                | "$changeStream"),
            ) = d.keys().next().map(String::as_str)
            {
                return Err(Error::new(
                    ErrorCode::StageMustBeFirst,
                    format!("{name} is only valid as the first stage in a pipeline (found at {i})"),
                ));
            }
        }
    }
    if let Some(docs) = source {
        let rest = Pipeline::parse(&agg.pipeline[1..], &parse_ctx)?;
        return rest.run(Box::new(docs.into_iter().map(Ok)), &ctx);
    }
    if agg.collectionless {
        if first_stage(&agg.pipeline) != Some("$documents") {
            return Err(Error::new(
                ErrorCode::InvalidNamespace,
                "{aggregate: 1} is not valid for this pipeline; a collection is required (or start with $documents).",
            ));
        }
        let pipeline = Pipeline::parse(&agg.pipeline, &parse_ctx)?;
        return pipeline.run(Box::new(std::iter::empty()), &ctx);
    }
    router.run_pipeline(&agg.ns, &agg.pipeline, &parse_ctx, ctx, deadline)
}

/// The read an explained `aggregate` (the body without `explain`) plans:
/// its targeting and how its pipeline splits.
pub(crate) fn parse_explained(db: &str, body: Document) -> Result<Explain> {
    let ns = collection_namespace("aggregate", db, &body)?;
    let spec = targeting_spec(&body)?;
    let pipeline = body.get_array("pipeline").cloned().unwrap_or_default();
    let split = explain_split(&pipeline, &Document::new())?;
    Ok(Explain {
        kind: Kind::Aggregate,
        ns,
        spec,
        command: body,
        split: Some(split),
    })
}

/// The part of a pipeline that decides targeting: a leading `$match`
/// (and a `$sort` right after it).
fn targeting_spec(body: &Document) -> Result<FindSpec> {
    let pipeline = args::opt_array("aggregate", body, "pipeline")?
        .cloned()
        .unwrap_or_default();
    // The leading `$match` stages target partitions exactly as running
    // the pipeline does.
    let (filter, rest) = leading_match(&pipeline)?;
    let sort = match rest.first() {
        Some(Bson::Document(d)) => d
            .get_document("$sort")
            .ok()
            .map(SortSpec::parse)
            .transpose()?,
        _ => None,
    };
    Ok(FindSpec {
        filter,
        sort,
        ..FindSpec::default()
    })
}

/// How the pipeline splits, for explain: `(shardsPart, mergerPart)`, with
/// the leading `$match` first in the shards' part.
fn explain_split(pipeline: &[Bson], vars: &Document) -> Result<(Vec<Bson>, Vec<Bson>)> {
    let (filter, rest) = leading_match(pipeline)?;
    let parse_ctx = ParseContext {
        vars: vars.clone(),
        ..ParseContext::default()
    };
    let split = SplitPipeline::split(Pipeline::parse(rest, &parse_ctx)?);
    let (mut shards, merger) = split.explain();
    if filter.is_some() {
        let leading: Vec<Bson> = pipeline[..pipeline.len() - rest.len()].to_vec();
        shards.splice(0..0, leading);
    }
    Ok((shards, merger))
}

/// The collection a pipeline's last stage writes (`$out`, `$merge`), if
/// it names one well-formed; the stage's own parser reports the rest.
fn output_namespace(pipeline: &[Bson], db: &str) -> Option<Namespace> {
    let Some(Bson::Document(stage)) = pipeline.last() else {
        return None;
    };
    let (name, arg) = stage.iter().next()?;
    let target = match (name.as_str(), arg) {
        ("$out", target) => target,
        ("$merge", Bson::Document(spec)) => spec.get("into")?,
        ("$merge", target) => target,
        _ => return None,
    };
    match target {
        Bson::String(coll) => Namespace::new(db, coll).ok(),
        Bson::Document(d) => {
            Namespace::new(d.get_str("db").unwrap_or(db), d.get_str("coll").ok()?).ok()
        }
        _ => None,
    }
}

pub async fn run(req: &Request<'_>) -> Result<Document> {
    super::args::check_fields(
        req,
        &[
            "pipeline",
            "explain",
            "allowDiskUse",
            "cursor",
            "maxTimeMS",
            "bypassDocumentValidation",
            "collation",
            "hint",
            "let",
            "fromMongos",
            "needsMerge",
            "isMapReduceCommand",
            "collectionUUID",
            "exchange",
            "runtimeConstants",
            "searchQueryPlanningInfo",
        ],
    )?;
    let mut agg = parse(&req.db, &req.body)?;
    if agg.explain {
        // The pipeline's plan, as `explain` shows it at `queryPlanner`
        // verbosity.
        let mut body = req.body.clone();
        body.remove("explain");
        let explain = parse_explained(&req.db, body)?;
        return explain_render::explain(req, explain, Verbosity::QueryPlanner).await;
    }
    if let Some(target) = output_namespace(&agg.pipeline, &req.db) {
        if views::find(req.router(), &target).await?.is_some() {
            return Err(Error::new(
                ErrorCode::CommandNotSupportedOnView,
                format!("Namespace {target} is a view, not a collection"),
            ));
        }
    }
    let cursor_ns = agg.ns.full();
    if first_stage(&agg.pipeline) == Some("$changeStream") {
        return watch(req, agg, cursor_ns).await;
    }
    if !agg.collectionless {
        // A view's pipeline runs first, over the collection it reads.
        if let Some(view) = views::resolve(req.router(), &agg.ns).await? {
            agg.collation = Some(Bson::Document(views::read_collation(
                agg.collation.as_ref(),
                &view,
            )?));
            let mut pipeline = view.pipeline;
            pipeline.append(&mut agg.pipeline);
            agg.pipeline = pipeline;
            agg.ns = view.collection;
        }
    }
    run_parsed(req, agg, cursor_ns).await
}

/// Opens a change stream (a pipeline that starts with `$changeStream`)
/// and answers with its first batch: what the log holds after its start,
/// at once, and a cursor that stays open until the stream is invalidated.
async fn watch(req: &Request<'_>, agg: Aggregate, cursor_ns: String) -> Result<Document> {
    if !agg.collectionless && views::find(req.router(), &agg.ns).await?.is_some() {
        return Err(Error::new(
            ErrorCode::CommandNotSupportedOnView,
            format!("Namespace {} is a view, not a collection", agg.ns),
        ));
    }
    let Some(Bson::Document(stage)) = agg.pipeline.first() else {
        return Err(Error::internal("pipeline changed while running"));
    };
    let (_, arg) = stage_arg(stage)?;
    let spec = ChangeStreamSpec::parse(arg, &agg.ns, agg.collectionless)?;
    let router = req.router().clone();
    let ctx = context(req, &agg, None)?;
    let parse_ctx = ParseContext {
        vars: agg.vars.clone(),
        ..ParseContext::default()
    };
    let open = || -> Result<CursorStream> {
        let stream = ChangeStream::open(router.clone(), spec, &agg.pipeline[1..], &parse_ctx, ctx)?;
        Ok(stream.into())
    };
    let (id, batch) = first_batch(req, &cursor_ns, agg.batch_size, open).await?;
    let token = batch.resume_token.unwrap_or_default();
    Ok(change_batch_reply(
        FIRST_BATCH,
        id,
        &cursor_ns,
        batch.docs.into_documents()?,
        token,
    ))
}

/// Opens a result stream (`open` runs where reads may block), takes its
/// first batch, and keeps the rest as cursor `ns` unless that batch ended
/// it (id 0).
async fn first_batch(
    req: &Request<'_>,
    ns: &str,
    batch_size: Option<usize>,
    open: impl FnOnce() -> Result<CursorStream>,
) -> Result<(i64, Batch)> {
    let (batch, stream) = req
        .router()
        .read_on(|| -> Result<_> {
            let mut stream = open()?;
            let batch = stream.next_batch(Some(batch_size.unwrap_or(DEFAULT_FIRST_BATCH)))?;
            Ok((batch, stream))
        })
        .await?;
    let id = if batch.exhausted {
        0
    } else {
        req.state
            .cursors
            .open(ns.to_string(), stream, req.cursor_opener())?
    };
    Ok((id, batch))
}

/// Runs a parsed aggregation and answers with its first batch, the
/// cursor named `cursor_ns` (a view's reads name the view).
pub(crate) async fn run_parsed(
    req: &Request<'_>,
    agg: Aggregate,
    cursor_ns: String,
) -> Result<Document> {
    if !agg.collectionless {
        req.router().admit_namespace(&agg.ns).await?;
    }
    let open = || -> Result<CursorStream> {
        Ok(with_time_limit(execute(req, &agg)?, agg.max_time_ms).into())
    };
    let (id, batch) = first_batch(req, &cursor_ns, agg.batch_size, open).await?;
    Ok(first_batch_reply(
        id,
        &cursor_ns,
        batch.docs.into_documents()?,
    ))
}

/// Answers a `find` on a view: its filter, sort, skip, limit and
/// projection become stages after the view's pipeline; the cursor is
/// named after the view.
pub(crate) async fn find_on_view(req: &Request<'_>, view: &views::Resolved) -> Result<Document> {
    let b = &req.body;
    let mut stages = Vec::new();
    let mut stage = |name: &str, field: &str| match b.get(field) {
        Some(Bson::Document(d)) if d.is_empty() => {}
        Some(v) if !matches!(v, Bson::Null) => stages.push(doc! {name: v.clone()}),
        _ => {}
    };
    stage("$match", "filter");
    stage("$sort", "sort");
    stage("$skip", "skip");
    stage("$limit", "limit");
    stage("$project", "projection");
    let batch_size = super::args::opt_non_negative("find", b, "batchSize")?.map(|n| n as i64);
    let body = views::aggregation(req, view, stages, batch_size)?;
    let agg = parse(&view.collection.db, &body)?;
    run_parsed(req, agg, view.view.full()).await
}

/// Runs `read` over what a view gives with `stages` after its pipeline,
/// where a read may block.
pub(crate) async fn read_view<T>(
    req: &Request<'_>,
    view: &views::Resolved,
    stages: Vec<Document>,
    read: impl FnOnce(DocStream) -> Result<T>,
) -> Result<T> {
    let body = views::aggregation(req, view, stages, None)?;
    let agg = parse(&view.collection.db, &body)?;
    let router = req.router();
    router.admit_namespace(&agg.ns).await?;
    router.read_on(|| read(execute(req, &agg)?)).await
}

/// The documents of a leading `$collStats`: one per partition, as a
/// mongos returns one per shard.
fn coll_stats_documents(
    router: &crate::router::Router,
    ns: &crate::router::Namespace,
    spec: &Document,
) -> Result<Vec<Document>> {
    let Some(coll) = router.collection(ns) else {
        return Err(Error::new(
            ErrorCode::NamespaceNotFound,
            format!("Unable to retrieve storageStats in $collStats stage :: caused by :: Collection [{ns}] not found."),
        ));
    };
    let parts: Vec<(String, u64, crate::router::catalog::Usage)> = if coll.sharding.is_some() {
        router
            .partition_stats(&coll)
            .into_iter()
            .map(|(p, u)| (router.shard_of(&coll, Some(&p)), p.id, u))
            .collect()
    } else {
        let s = router.collection_stats_now(&coll)?;
        vec![(
            router.shard_of(&coll, None),
            0,
            crate::router::catalog::Usage {
                count: s.count,
                bytes: s.size,
            },
        )]
    };
    let now = bson::DateTime::now();
    let (nindexes, index_sizes) = super::indexes::index_counts(&coll);
    let capped = coll.options().capped.is_some();
    let ids: Vec<u64> = parts.iter().map(|(_, id, _)| *id).collect();
    let units = router.partition_units(&coll, &ids);
    // Partitions shown on one shard (a server holding several) add up.
    let mut shards: Vec<(String, crate::router::catalog::Usage, PartitionUnits)> = Vec::new();
    for ((shard, _, u), units) in parts.into_iter().zip(units) {
        match shards.iter_mut().find(|(name, _, _)| *name == shard) {
            Some((_, total, sum)) => {
                total.count += u.count;
                total.bytes += u.bytes;
                sum.provisioned += units.provisioned;
                sum.consumed += units.consumed;
                sum.throttled += units.throttled;
            }
            None => shards.push((shard, u, units)),
        }
    }
    Ok(shards
        .into_iter()
        .map(|(shard, u, units)| {
            let mut d = doc! {
                "ns": ns.full(),
                "host": router.shard_host(&shard),
                "shard": shard,
                "localTime": now,
                "requestUnits": super::catalog::request_units(&units),
            };
            if spec.contains_key("storageStats") {
                d.insert(
                    "storageStats",
                    doc! {
                        "size": u.bytes as i64,
                        "count": u.count as i64,
                        "avgObjSize": u.bytes.checked_div(u.count).unwrap_or(0) as i64,
                        "numOrphanDocs": 0_i64,
                        "storageSize": u.bytes as i64,
                        "freeStorageSize": 0_i64,
                        "capped": capped,
                        "nindexes": nindexes,
                        "indexDetails": {},
                        "indexBuilds": [],
                        "totalIndexSize": 0_i64,
                        "totalSize": u.bytes as i64,
                        "indexSizes": index_sizes.clone(),
                        "scaleFactor": 1,
                    },
                );
            }
            if spec.contains_key("count") {
                d.insert("count", u.count as i64);
            }
            d
        })
        .collect())
}

/// The documents of `$shardedDataDistribution`: per sharded collection,
/// the documents and bytes each partition owns (a split moves no data,
/// so nothing is ever orphaned).
fn sharded_data_distribution(router: &crate::router::Router) -> Vec<Document> {
    router
        .collections()
        .iter()
        .filter(|c| c.sharding.is_some())
        .map(|coll| {
            let shards: Vec<Bson> = router
                .partition_stats(coll)
                .into_iter()
                .map(|(p, u)| {
                    Bson::Document(doc! {
                        "shardName": p.name().to_string(),
                        "numOrphanedDocs": 0_i64,
                        "numOwnedDocuments": u.count as i64,
                        "ownedSizeBytes": u.bytes as i64,
                        "orphanedSizeBytes": 0_i64,
                    })
                })
                .collect();
            doc! {"ns": coll.ns.full(), "shards": shards}
        })
        .collect()
}
