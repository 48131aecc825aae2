//! `aggregate`, in the subset drivers and mongosh's helpers need before
//! the aggregation pipeline is built: `$match`, `$sort`, `$skip`,
//! `$limit`, `$project`, `$count`, `$group` with `$sum` (the shape of
//! `countDocuments` and of `sh.status()`'s chunk counts) and a leading
//! `$collStats` (one document per partition, as `getShardDistribution()`
//! reads). Any other stage is refused by name.

use bson::{doc, Bson, Document};

use super::args::{self, collection_namespace, number_as_i64, opt_document};
use super::Request;
use crate::cursor::{first_batch_reply, next_batch, DEFAULT_FIRST_BATCH};
use crate::error::{Error, ErrorCode, Result};
use crate::query::expr::Expr;
use crate::query::filter::{Filter, MatchDetails};
use crate::query::projection::Projection;
use crate::query::sort::SortSpec;
use crate::router::{DocStream, FindSpec};

enum Stage {
    Match(Filter),
    Sort(SortSpec),
    Skip(usize),
    Limit(usize),
    Project(Projection),
    Count(String),
    /// `$group` by an `_id` expression; fields are `(name, $sum argument)`.
    Group(Expr, Vec<(String, Expr)>),
    /// `$collStats`: storage figures per partition.
    CollStats(Document),
    /// `$documents`: the documents of a collection-less aggregate.
    Documents(Vec<Document>),
    /// `$shardedDataDistribution`: documents and bytes per partition of
    /// every sharded collection.
    ShardedDataDistribution,
}

fn stage_arg(stage: &Document) -> Result<(&str, &Bson)> {
    if stage.len() != 1 {
        return Err(Error::new(
            ErrorCode::Location40324,
            "A pipeline stage specification object must contain exactly one field.",
        ));
    }
    stage
        .iter()
        .next()
        .map(|(k, v)| (k.as_str(), v))
        .ok_or_else(|| Error::bad_value("empty pipeline stage"))
}

fn parse_stage(stage: &Document) -> Result<Stage> {
    let (name, arg) = stage_arg(stage)?;
    let doc_arg = || -> Result<&Document> {
        arg.as_document().ok_or_else(|| {
            Error::new(
                ErrorCode::Location15958,
                format!("the {name} stage specification must be an object"),
            )
        })
    };
    let count_arg = || -> Result<usize> {
        match number_as_i64(arg) {
            Some(n) if n >= 0 => Ok(n as usize),
            _ => Err(Error::new(
                ErrorCode::Location15958,
                format!("invalid argument to {name} stage: must be a non-negative number"),
            )),
        }
    };
    Ok(match name {
        "$match" => Stage::Match(Filter::parse(doc_arg()?)?),
        "$sort" => Stage::Sort(SortSpec::parse(doc_arg()?)?),
        "$skip" => Stage::Skip(count_arg()?),
        "$limit" => match count_arg()? {
            0 => {
                return Err(Error::new(
                    ErrorCode::Location15958,
                    "the limit must be positive",
                ))
            }
            n => Stage::Limit(n),
        },
        "$project" => Stage::Project(Projection::parse(doc_arg()?)?),
        "$count" => match arg {
            Bson::String(s) if !s.is_empty() && !s.starts_with('$') && !s.contains('.') => {
                Stage::Count(s.clone())
            }
            _ => {
                return Err(Error::new(
                    ErrorCode::Location40324,
                    "the count field must be a non-empty string without '$' or '.'",
                ))
            }
        },
        "$group" => {
            let spec = doc_arg()?;
            let Some(id) = spec.get("_id") else {
                return Err(Error::new(
                    ErrorCode::Location15955,
                    "a group specification must include an _id",
                ));
            };
            let id = Expr::parse(id)?;
            let mut fields = Vec::new();
            for (k, v) in spec.iter().filter(|(k, _)| k.as_str() != "_id") {
                match v.as_document().and_then(|d| d.get("$sum")) {
                    Some(sum) if v.as_document().is_some_and(|d| d.len() == 1) => {
                        fields.push((k.clone(), Expr::parse(sum)?))
                    }
                    _ => return Err(not_yet("$group accumulators other than $sum")),
                }
            }
            Stage::Group(id, fields)
        }
        "$collStats" => Stage::CollStats(doc_arg()?.clone()),
        "$shardedDataDistribution" => {
            doc_arg()?;
            Stage::ShardedDataDistribution
        }
        "$documents" => {
            let value = Expr::parse(arg)?.evaluate(&Document::new())?;
            let Bson::Array(items) = value else {
                return Err(Error::new(
                    ErrorCode::Location5858203,
                    "an array is expected",
                ));
            };
            let mut docs = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Bson::Document(d) => docs.push(d),
                    _ => {
                        return Err(Error::new(
                            ErrorCode::Location40228,
                            "'$documents' must evaluate to an array of objects",
                        ))
                    }
                }
            }
            Stage::Documents(docs)
        }
        other if other.starts_with('$') => {
            return Err(Error::new(
                ErrorCode::Location40324,
                format!("Unrecognized pipeline stage name: '{other}'"),
            ))
        }
        other => {
            return Err(Error::new(
                ErrorCode::Location40324,
                format!("Unrecognized pipeline stage name: '{other}'"),
            ))
        }
    })
}

fn not_yet(what: &str) -> Error {
    Error::new(
        ErrorCode::CommandNotSupported,
        format!("{what} is not supported by this server's aggregate yet"),
    )
}

/// The number `$sum` adds for one document: non-numbers add nothing.
fn sum_value(arg: &Expr, doc: &Document) -> Result<f64> {
    Ok(match arg.evaluate_value(doc)? {
        Some(Bson::Int32(n)) => n as f64,
        Some(Bson::Int64(n)) => n as f64,
        Some(Bson::Double(n)) => n,
        _ => 0.0,
    })
}

/// A sum as MongoDB reports it: an int when it fits, else a long or double.
fn number(total: f64, all_integral: bool) -> Bson {
    if all_integral && total.fract() == 0.0 && total.abs() < i32::MAX as f64 {
        Bson::Int32(total as i32)
    } else if all_integral && total.fract() == 0.0 && total.abs() < 9.0e18 {
        Bson::Int64(total as i64)
    } else {
        Bson::Double(total)
    }
}

fn apply(stage: Stage, input: DocStream) -> Result<DocStream> {
    Ok(match stage {
        Stage::Match(f) => Box::new(input.filter(move |d| match d {
            Ok(d) => f.matches(d),
            Err(_) => true,
        })),
        Stage::Sort(s) => {
            let mut docs = input.collect::<Result<Vec<_>>>()?;
            docs.sort_by(|a, b| s.compare(a, b));
            Box::new(docs.into_iter().map(Ok))
        }
        Stage::Skip(n) => Box::new(input.skip(n)),
        Stage::Limit(n) => Box::new(input.take(n)),
        Stage::Project(p) => {
            Box::new(input.map(move |d| d.and_then(|d| p.apply(&d, &MatchDetails::default()))))
        }
        Stage::Count(field) => {
            let mut n = 0i64;
            for d in input {
                d?;
                n += 1;
            }
            if n == 0 {
                Box::new(std::iter::empty())
            } else {
                let count = if n <= i32::MAX as i64 {
                    Bson::Int32(n as i32)
                } else {
                    Bson::Int64(n)
                };
                Box::new(std::iter::once(Ok(doc! {field: count})))
            }
        }
        Stage::Group(id, fields) => {
            // Groups in the order their first document came.
            let mut groups: Vec<(Bson, Vec<(f64, bool)>)> = Vec::new();
            let mut index: std::collections::HashMap<Vec<u8>, usize> =
                std::collections::HashMap::new();
            for d in input {
                let d = d?;
                let key = id.evaluate_value(&d)?.unwrap_or(Bson::Null);
                let slot = crate::storage::keystring::encode_id(&key);
                let at = *index.entry(slot).or_insert_with(|| {
                    groups.push((key, vec![(0.0, true); fields.len()]));
                    groups.len() - 1
                });
                for (i, (_, arg)) in fields.iter().enumerate() {
                    let v = sum_value(arg, &d)?;
                    if let Some(t) = groups.get_mut(at).and_then(|g| g.1.get_mut(i)) {
                        t.0 += v;
                        t.1 &= v.fract() == 0.0;
                    }
                }
            }
            let out: Vec<Result<Document>> = groups
                .into_iter()
                .map(|(key, totals)| {
                    let mut out = doc! {"_id": key};
                    for ((name, _), (total, integral)) in fields.iter().zip(totals) {
                        out.insert(name.clone(), number(total, integral));
                    }
                    Ok(out)
                })
                .collect();
            Box::new(out.into_iter())
        }
        Stage::CollStats(_) => {
            return Err(Error::new(
                ErrorCode::Location40602,
                "$collStats is only valid as the first stage in a pipeline",
            ))
        }
        Stage::Documents(_) => {
            return Err(Error::new(
                ErrorCode::Location40602,
                "$documents is only valid as the first stage in a pipeline",
            ))
        }
        Stage::ShardedDataDistribution => {
            return Err(Error::new(
                ErrorCode::Location40602,
                "$shardedDataDistribution is only valid as the first stage in a pipeline",
            ))
        }
    })
}

pub async fn run(req: &Request<'_>) -> Result<Document> {
    super::args::check_fields(
        req,
        &[
            "pipeline",
            "explain",
            "allowDiskUse",
            "cursor",
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
    let b = &req.body;
    // `aggregate: 1` runs on no collection; its first stage must make
    // the documents (`$documents`).
    let collectionless = matches!(b.get("aggregate"), Some(v) if number_as_i64(v) == Some(1));
    let ns = match b.get("aggregate") {
        Some(Bson::String(_)) => collection_namespace("aggregate", &req.db, b)?,
        Some(_) if collectionless => crate::router::Namespace {
            db: req.db.clone(),
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
            ErrorCode::Location40414,
            "BSON field 'aggregate.pipeline' is missing but a required field",
        ));
    };
    if b.contains_key("explain") {
        return Err(not_yet("aggregate explain"));
    }
    let cursor_opts = opt_document("aggregate", b, "cursor")?;
    let batch_size = match cursor_opts.and_then(|c| c.get("batchSize")) {
        Some(v) => Some(
            number_as_i64(v)
                .filter(|n| *n >= 0)
                .ok_or_else(|| Error::bad_value("cursor.batchSize must be a non-negative number"))?
                as usize,
        ),
        None => None,
    };
    let mut stages = Vec::with_capacity(pipeline.len());
    for s in pipeline {
        match s {
            Bson::Document(d) => stages.push(parse_stage(d)?),
            _ => {
                return Err(Error::type_mismatch(
                    "Each element of the 'pipeline' array must be an object",
                ))
            }
        }
    }
    // A leading $match runs where the documents are read.
    let mut stages = stages.into_iter().peekable();
    let filter = match stages.peek() {
        Some(Stage::Match(_)) => match stages.next() {
            Some(Stage::Match(f)) => Some(f),
            _ => None,
        },
        _ => None,
    };
    let router = req.state.router.clone();
    let full = ns.full();
    let coll_stats = match stages.peek() {
        Some(Stage::CollStats(spec)) => Some(spec.clone()),
        _ => None,
    };
    if coll_stats.is_some() {
        stages.next();
    }
    let documents = match stages.peek() {
        Some(Stage::Documents(_)) => match stages.next() {
            Some(Stage::Documents(docs)) => Some(docs),
            _ => None,
        },
        Some(Stage::ShardedDataDistribution) => {
            stages.next();
            if !collectionless || req.db != "admin" {
                return Err(Error::new(
                    ErrorCode::InvalidNamespace,
                    "$shardedDataDistribution must be run against the 'admin' database with {aggregate: 1}",
                ));
            }
            Some(sharded_data_distribution(&router))
        }
        _ => None,
    };
    if collectionless && documents.is_none() {
        return Err(Error::new(
            ErrorCode::InvalidNamespace,
            "{aggregate: 1} is not valid for '$match'; a collection is required.",
        ));
    }
    let (batch, stream) = tokio::task::block_in_place(|| -> Result<_> {
        let mut stream: DocStream = match (&coll_stats, documents) {
            (_, Some(docs)) => Box::new(docs.into_iter().map(Ok)),
            (Some(spec), None) => {
                let docs = coll_stats_documents(&router, &ns, spec)?;
                Box::new(docs.into_iter().map(Ok))
            }
            (None, None) => router.find(
                &ns,
                FindSpec {
                    filter,
                    ..FindSpec::default()
                },
            )?,
        };
        for stage in stages {
            stream = apply(stage, stream)?;
        }
        let mut stream = stream.peekable();
        let batch = next_batch(&mut stream, Some(batch_size.unwrap_or(DEFAULT_FIRST_BATCH)))?;
        Ok((batch, stream))
    })?;
    let id = if batch.exhausted {
        0
    } else {
        req.state.cursors.open(full.clone(), stream)
    };
    Ok(first_batch_reply(id, &full, batch.docs))
}

/// The documents of a leading `$collStats`: one per partition, as a
/// mongos returns one per shard.
fn coll_stats_documents(
    router: &crate::router::Router,
    ns: &crate::router::Namespace,
    spec: &Document,
) -> Result<Vec<Document>> {
    let Some(coll) = router.catalog.get(ns) else {
        return Err(Error::new(
            ErrorCode::NamespaceNotFound,
            format!("Unable to retrieve storageStats in $collStats stage :: caused by :: Collection [{ns}] not found."),
        ));
    };
    let parts: Vec<(String, crate::router::catalog::Usage)> = if coll.sharding.is_some() {
        router
            .partition_stats(&coll)
            .into_iter()
            .map(|(p, u)| (p.name().to_string(), u))
            .collect()
    } else {
        let s = router.collection_stats(&coll)?;
        vec![(
            crate::router::PRIMARY_PARTITION.to_string(),
            crate::router::catalog::Usage {
                count: s.count,
                bytes: s.size,
            },
        )]
    };
    let now = bson::DateTime::now();
    let (nindexes, index_sizes) = super::indexes::index_counts(&coll);
    Ok(parts
        .into_iter()
        .map(|(shard, u)| {
            let mut d = doc! {
                "ns": ns.full(),
                "shard": shard,
                "host": &router.options.host,
                "localTime": now,
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
                        "capped": false,
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
        .catalog
        .list()
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
