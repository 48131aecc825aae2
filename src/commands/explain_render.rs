//! How an explained query reads, in the shape a mongos returns: which
//! partitions (shards) a query targets and, with `executionStats`, what
//! each of them read and returned. Both the `explain` command and
//! `aggregate` with `explain: true` render through here, so the two
//! cannot drift apart; it sits below both.
//!
//! `queryPlanner.winningPlan.stage` is `SINGLE_SHARD` when one partition
//! is targeted, `SHARD_MERGE_SORT` when several are and the query sorts,
//! and `SHARD_MERGE` otherwise; `winningPlan.shards` has one entry per
//! targeted partition.

use bson::{doc, Bson, Document};

use super::request::Request;
use super::version::MONGODB_VERSION;
use crate::aggregate::DEFAULT_MAX_BLOCKING_BYTES;
use crate::error::Result;
use crate::query::sort::SortSpec;
use crate::router::charge::request_charge;
use crate::router::{
    Access, ChosenPlan, Explained, FindSpec, Namespace, PartitionPlan, QueryPlan, SortStrategy,
};

/// How much an explain runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verbosity {
    QueryPlanner,
    ExecutionStats,
}

/// What kind of command is explained, for the per-partition plan.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Find,
    Count,
    Distinct,
    Aggregate,
}

/// What the router plans for one read, parsed by the command it belongs to.
pub(crate) struct Explain {
    pub kind: Kind,
    pub ns: Namespace,
    pub spec: FindSpec,
    /// The command as sent, without `explain`.
    pub command: Document,
    /// For a pipeline, how it splits: `(shardsPart, mergerPart)`.
    pub split: Option<(Vec<Bson>, Vec<Bson>)>,
}

/// Asks the router for the plan of `explain` (and, with
/// `executionStats`, runs it) and renders the reply.
pub(crate) async fn explain(
    req: &Request<'_>,
    explain: Explain,
    verbosity: Verbosity,
) -> Result<Document> {
    let Explain {
        kind,
        ns,
        spec,
        command,
        split,
    } = explain;
    let router = req.state.router.clone();
    let started = std::time::Instant::now();
    let explained = router.explain(&ns, &spec).await?;
    let total_ms = started.elapsed().as_millis() as i64;
    let host = router.host().to_string();
    Ok(render(
        kind, verbosity, &ns, &spec, &explained, total_ms, &host, command, split,
    ))
}

/// The filter as sent, for `parsedQuery`.
fn parsed_query(kind: Kind, command: &Document) -> Document {
    let found = match kind {
        Kind::Find => command.get_document("filter").ok(),
        Kind::Count | Kind::Distinct => command.get_document("query").ok(),
        Kind::Aggregate => command
            .get_array("pipeline")
            .ok()
            .and_then(|p| p.first())
            .and_then(Bson::as_document)
            .and_then(|s| s.get_document("$match").ok()),
    };
    found.cloned().unwrap_or_default()
}

fn server_info(host: &str) -> Document {
    let (name, port) = host.rsplit_once(':').unwrap_or((host, "27017"));
    doc! {
        "host": name,
        "port": port.parse::<i32>().unwrap_or(27017),
        "version": MONGODB_VERSION,
        "gitVersion": "shardgate",
    }
}

/// The `IXSCAN` stage of an index plan, under `FETCH` unless covered.
fn index_stages(chosen: &ChosenPlan) -> Document {
    let index = &chosen.scan.index;
    let ixscan = doc! {
        "stage": "IXSCAN",
        "keyPattern": index.key.clone(),
        "indexName": index.name.clone(),
        "isMultiKey": index.is_multikey(),
        "isUnique": index.unique,
        "isSparse": index.sparse,
        "isPartial": index.partial.is_some(),
        "indexVersion": 2,
        "direction": if chosen.scan.reverse { "backward" } else { "forward" },
        "indexBounds": chosen.scan.bounds.clone(),
    };
    if chosen.covered {
        ixscan
    } else {
        doc! {"stage": "FETCH", "inputStage": ixscan}
    }
}

/// Sets `field` on the first stage named `stage`, searching inward.
fn set_in_stage(plan: &mut Document, stage: &str, field: &str, value: Bson) {
    if plan.get_str("stage").ok() == Some(stage) {
        plan.insert(field, value);
        return;
    }
    if let Ok(inner) = plan.get_document_mut("inputStage") {
        set_in_stage(inner, stage, field, value);
    }
}

/// The plan one partition runs, innermost stage first, as the query plan
/// says: its access path, then the sort strategy, skip, limit and
/// projection.
fn partition_plan(kind: Kind, spec: &FindSpec, plan: &QueryPlan, part: &PartitionPlan) -> Document {
    let key_path = plan.shard_key.clone();
    let mut stages = match &part.access {
        Access::Index(chosen) => {
            let near = spec
                .filter
                .as_ref()
                .is_some_and(|f| f.near().ok().flatten().is_some());
            match crate::index::geo::near_stage_name(&chosen.scan.index).filter(|_| near) {
                Some(name) => doc! {
                    "stage": name,
                    "keyPattern": chosen.scan.index.key.clone(),
                    "indexName": chosen.scan.index.name.clone(),
                    "indexVersion": 2,
                    "inputStage": index_stages(chosen),
                },
                None => index_stages(chosen),
            }
        }
        Access::KeyHashes { reverse, .. } => {
            let path = key_path.clone().unwrap_or_default();
            doc! {
                "stage": "FETCH",
                "inputStage": {
                    "stage": "IXSCAN",
                    "keyPattern": {path.clone(): "hashed"},
                    "indexName": format!("{path}_hashed"),
                    "isMultiKey": false,
                    "direction": if *reverse { "backward" } else { "forward" },
                },
            }
        }
        Access::IdPoints { .. } => doc! {"stage": "IDHACK"},
        Access::IdIndex { reverse, .. } => doc! {
            "stage": "FETCH",
            "inputStage": {
                "stage": "IXSCAN",
                "keyPattern": {"_id": 1},
                "indexName": crate::index::ID_INDEX_NAME,
                "isMultiKey": false,
                "isUnique": true,
                "direction": if *reverse { "backward" } else { "forward" },
            },
        },
        Access::IdRange { reverse, .. } | Access::Natural { reverse } => {
            doc! {"stage": "COLLSCAN", "direction": if *reverse { "backward" } else { "forward" }}
        }
        Access::Scan => doc! {"stage": "COLLSCAN", "direction": "forward"},
    };
    if plan.sharded {
        stages = doc! {"stage": "SHARDING_FILTER", "inputStage": stages};
    }
    let limit = plan.limit;
    match (&spec.sort, plan.sort) {
        (Some(sort), SortStrategy::TopK(k)) => {
            stages = doc! {"stage": "SORT", "sortPattern": sort_pattern(sort), "memLimit": DEFAULT_MAX_BLOCKING_BYTES as i64, "type": "simple", "inputStage": stages, "limitAmount": k as i64};
        }
        (Some(sort), SortStrategy::Blocking { memory_limit }) => {
            stages = doc! {"stage": "SORT", "sortPattern": sort_pattern(sort), "memLimit": memory_limit as i64, "type": "simple", "inputStage": stages};
        }
        _ => {
            if let Some(l) = limit.filter(|_| kind == Kind::Find) {
                stages = doc! {"stage": "LIMIT", "limitAmount": (l + plan.skip) as i64, "inputStage": stages};
            }
        }
    }
    if plan.skip > 0 && kind == Kind::Find {
        stages = doc! {"stage": "SKIP", "skipAmount": plan.skip as i64, "inputStage": stages};
    }
    if plan.index.as_ref().is_some_and(|c| c.covered) {
        stages = doc! {"stage": "PROJECTION_COVERED", "inputStage": stages};
    } else if spec.projection.is_some() {
        stages = doc! {"stage": "PROJECTION_DEFAULT", "inputStage": stages};
    }
    match kind {
        Kind::Count => doc! {"stage": "COUNT", "inputStage": stages},
        Kind::Distinct => doc! {"stage": "PROJECTION_COVERED", "inputStage": stages},
        Kind::Find | Kind::Aggregate => stages,
    }
}

fn sort_pattern(sort: &SortSpec) -> Document {
    let mut pattern = Document::new();
    for f in sort.fields() {
        pattern.insert(f.path(), if f.ascending() { 1 } else { -1 });
    }
    pattern
}

#[allow(clippy::too_many_arguments)]
fn render(
    kind: Kind,
    verbosity: Verbosity,
    ns: &Namespace,
    spec: &FindSpec,
    explained: &Explained,
    total_ms: i64,
    host: &str,
    command: Document,
    split: Option<(Vec<Bson>, Vec<Bson>)>,
) -> Document {
    let (plan, runs) = (&explained.plan, explained.runs.as_slice());
    let stage = match runs.len() {
        1 => "SINGLE_SHARD",
        _ if spec.sort.is_some() && kind != Kind::Count => "SHARD_MERGE_SORT",
        _ => "SHARD_MERGE",
    };
    let plans: Vec<Document> = plan
        .parts
        .iter()
        .map(|part| partition_plan(kind, spec, plan, part))
        .collect();
    let parsed = parsed_query(kind, &command);
    let shard_plans: Vec<Bson> = runs
        .iter()
        .zip(&plans)
        .map(|(r, plan)| {
            Bson::Document(doc! {
                "shardName": &r.name,
                "connectionString": host,
                "serverInfo": server_info(host),
                "namespace": ns.full(),
                "indexFilterSet": false,
                "parsedQuery": parsed.clone(),
                "winningPlan": plan.clone(),
                "rejectedPlans": [],
            })
        })
        .collect();
    let mut reply = doc! {
        "queryPlanner": {
            "mongosPlannerVersion": 1,
            "winningPlan": {"stage": stage, "shards": shard_plans},
        },
    };
    if verbosity == Verbosity::ExecutionStats {
        let returned: u64 = runs.iter().map(|r| r.returned).sum();
        let returned = match (kind, spec.limit.filter(|&l| l > 0)) {
            (Kind::Count, _) => 0,
            (_, Some(l)) => returned.saturating_sub(spec.skip).min(l),
            (_, None) => returned.saturating_sub(spec.skip),
        };
        let examined: u64 = runs.iter().map(|r| r.examined).sum();
        let keys_examined: u64 = runs.iter().map(|r| r.keys_examined).sum();
        let shard_stats: Vec<Bson> = runs
            .iter()
            .zip(&plans)
            .map(|(r, plan)| {
                let mut stages = plan.clone();
                stages.insert("nReturned", r.returned as i64);
                stages.insert("docsExamined", r.examined as i64);
                stages.insert("executionTimeMillisEstimate", r.millis as i64);
                set_in_stage(
                    &mut stages,
                    "IXSCAN",
                    "keysExamined",
                    Bson::Int64(r.keys_examined as i64),
                );
                Bson::Document(doc! {
                    "shardName": &r.name,
                    "executionSuccess": true,
                    "nReturned": r.returned as i64,
                    "executionTimeMillis": r.millis as i64,
                    "totalKeysExamined": r.keys_examined as i64,
                    "totalDocsExamined": r.examined as i64,
                    "requestCharge": request_charge(r.request_charge),
                    "executionStages": stages,
                })
            })
            .collect();
        let child_ms: i64 = runs.iter().map(|r| r.millis as i64).sum();
        let charged: u64 = runs.iter().map(|r| r.request_charge).sum();
        reply.insert(
            "executionStats",
            doc! {
                "nReturned": returned as i64,
                "executionTimeMillis": total_ms,
                "totalKeysExamined": keys_examined as i64,
                "totalDocsExamined": examined as i64,
                "requestCharge": request_charge(charged),
                "executionStages": {
                    "stage": stage,
                    "nReturned": returned as i64,
                    "executionTimeMillis": total_ms,
                    "totalKeysExamined": keys_examined as i64,
                    "totalDocsExamined": examined as i64,
                    "totalChildMillis": child_ms,
                    "shards": shard_stats,
                },
            },
        );
    }
    if kind == Kind::Aggregate {
        // The fields a mongos adds to an aggregate's explain.
        let mut shards = Document::new();
        for (r, plan) in runs.iter().zip(&plans) {
            shards.insert(
                r.name.clone(),
                doc! {"host": host, "queryPlanner": {"namespace": ns.full(), "winningPlan": plan.clone()}},
            );
        }
        // One partition runs the whole pipeline; several run it and the
        // router merges their cursors.
        let split = if runs.len() == 1 {
            Bson::Null
        } else {
            let (shards_part, merger_stages) = split.unwrap_or_default();
            let mut merge = doc! {
                "nss": ns.full(),
                "allowPartialResults": false,
                "recordRemoteOpWaitTime": false,
            };
            if let Some(sort) = &spec.sort {
                merge.insert("sort", sort_pattern(sort));
            }
            let mut merger_part = vec![Bson::Document(doc! {"$mergeCursors": merge})];
            merger_part.extend(merger_stages);
            Bson::Document(doc! {
                "shardsPart": shards_part,
                "mergerPart": merger_part,
            })
        };
        let merge_type = if runs.len() == 1 {
            "anyShard"
        } else {
            "mongos"
        };
        reply.insert("mergeType", merge_type);
        reply.insert("splitPipeline", split);
        reply.insert("shards", shards);
    }
    reply.insert("serverInfo", server_info(host));
    reply.insert("command", command);
    reply
}
