//! `mapReduce`, as MongoDB 7.0 runs it: translated into an aggregation
//! pipeline and run by the router like any other, so a sharded collection
//! maps and reduces in each partition and the router reduces the
//! partitions' values per key (a mongos's split of `$group`).
//!
//! The pipeline is MongoDB's own translation: `$match` (`query`), `$sort`,
//! `$limit`, a `$project` calling the map function on each document
//! (`$_internalJsEmit`, which gives what it emitted), `$unwind`, a
//! `$group` by the emitted key with `$_internalJsReduce`, `finalize` as a
//! `$function`, then `$out` (`replace`) or `$merge` (`merge`, `reduce`)
//! for an output collection. Inline results come sorted by key.

use bson::{doc, Bson, Document};

use super::aggregate::{execute, Aggregate};
use super::args::{self, collection_namespace};
use super::request::Request;
use crate::error::{Error, ErrorCode, Result};

/// Where the results go.
enum Out {
    Inline,
    Collection {
        mode: OutMode,
        db: Option<String>,
        coll: String,
    },
}

#[derive(Clone, Copy)]
enum OutMode {
    Replace,
    Merge,
    Reduce,
}

fn missing(field: &str) -> Error {
    Error::new(
        ErrorCode::MissingField,
        format!("BSON field 'mapReduce.{field}' is missing but a required field"),
    )
}

/// A function field: a string or BSON JavaScript code.
fn code(body: &Document, field: &str) -> Result<Option<String>> {
    match body.get(field) {
        None => Ok(None),
        Some(Bson::String(s) | Bson::JavaScriptCode(s)) => Ok(Some(s.clone())),
        Some(Bson::JavaScriptCodeWithScope(c)) => Ok(Some(c.code.clone())),
        Some(other) => Err(Error::new(
            ErrorCode::TypeMismatch,
            format!(
                "BSON field 'mapReduce.{field}' is the wrong type '{}', expected types '[string, javascript]'",
                crate::query::compare::type_name(other)
            ),
        )),
    }
}

fn parse_out(out: &Bson) -> Result<Out> {
    let bad = || {
        Error::new(
            ErrorCode::BadValue,
            "'out' must be either a string or an object of type {<output mode>: <collection name>} or {inline: 1}",
        )
    };
    match out {
        Bson::String(coll) => Ok(Out::Collection {
            mode: OutMode::Replace,
            db: None,
            coll: coll.clone(),
        }),
        Bson::Document(spec) => {
            let Some((first, value)) = spec.iter().next() else {
                return Err(bad());
            };
            let mode = match first.as_str() {
                "inline" => return Ok(Out::Inline),
                "replace" => OutMode::Replace,
                "merge" => OutMode::Merge,
                "reduce" => OutMode::Reduce,
                _ => return Err(bad()),
            };
            let Bson::String(coll) = value else {
                return Err(bad());
            };
            let mut db = None;
            for (k, v) in spec.iter().skip(1) {
                match (k.as_str(), v) {
                    ("db", Bson::String(d)) => db = Some(d.clone()),
                    ("nonAtomic", _) => {}
                    ("sharded", Bson::Boolean(true)) => {
                        return Err(Error::new(
                            ErrorCode::InvalidOptions,
                            "sharded field value must be false",
                        ))
                    }
                    ("sharded", _) => {}
                    _ => return Err(bad()),
                }
            }
            Ok(Out::Collection {
                mode,
                db,
                coll: coll.clone(),
            })
        }
        _ => Err(bad()),
    }
}

/// The pipeline MongoDB translates a `mapReduce` into.
fn pipeline(
    body: &Document,
    map: &str,
    reduce: &str,
    finalize: Option<&str>,
    out: &Out,
    source_db: &str,
) -> Result<Vec<Bson>> {
    let scope = match body.get("scope") {
        None | Some(Bson::Null) => Document::new(),
        Some(Bson::Document(d)) => d.clone(),
        Some(other) => {
            return Err(Error::new(
                ErrorCode::TypeMismatch,
                format!(
                    "BSON field 'mapReduce.scope' is the wrong type '{}', expected type 'object'",
                    crate::query::compare::type_name(other)
                ),
            ))
        }
    };
    let mut stages: Vec<Document> = Vec::new();
    if let Some(query) = args::opt_document("mapReduce", body, "query")? {
        if !query.is_empty() {
            stages.push(doc! {"$match": query.clone()});
        }
    }
    if let Some(sort) = args::opt_document("mapReduce", body, "sort")? {
        if !sort.is_empty() {
            stages.push(doc! {"$sort": sort.clone()});
        }
    }
    if let Some(limit) = body.get("limit") {
        let n = args::number_as_i64(limit).ok_or_else(|| {
            Error::new(
                ErrorCode::TypeMismatch,
                "BSON field 'mapReduce.limit' is the wrong type, expected a number",
            )
        })?;
        if n < 0 {
            return Err(Error::bad_value("limit must be non-negative"));
        }
        if n > 0 {
            stages.push(doc! {"$limit": n});
        }
    }
    stages.push(doc! {"$project": {
        "emits": {"$_internalJsEmit": {"eval": map, "this": "$$ROOT", "_internalScope": scope.clone()}},
        "_id": false,
    }});
    stages.push(doc! {"$unwind": "$emits"});
    stages.push(doc! {"$group": {
        "_id": "$emits.k",
        "value": {"$_internalJsReduce": {"data": "$emits", "eval": reduce, "_internalScope": scope.clone()}},
    }});
    let finalize_stage = |scope: &Document| {
        finalize.map(|f| {
            doc! {"$project": {"value": {"$function": {
                "body": f, "args": ["$_id", "$value"], "lang": "js", "_internalScope": scope.clone(),
            }}}}
        })
    };
    if let Some(stage) = finalize_stage(&scope) {
        stages.push(stage);
    }
    match out {
        Out::Inline => stages.push(doc! {"$sort": {"_id": 1}}),
        Out::Collection { mode, db, coll } => {
            let db = db.clone().unwrap_or_else(|| source_db.to_string());
            stages.push(match mode {
                OutMode::Replace => doc! {"$out": {"db": db, "coll": coll.clone()}},
                OutMode::Merge => doc! {"$merge": {
                    "into": {"db": db, "coll": coll.clone()},
                    "on": "_id", "whenMatched": "replace", "whenNotMatched": "insert",
                }},
                OutMode::Reduce => {
                    // An existing key's value is reduced with the new one,
                    // then finalized.
                    let mut when_matched =
                        vec![Bson::Document(doc! {"$project": {"value": {"$function": {
                            "body": reduce,
                            "args": ["$_id", ["$value", "$$new.value"]],
                            "lang": "js",
                            "_internalScope": scope.clone(),
                        }}}})];
                    if let Some(stage) = finalize_stage(&scope) {
                        when_matched.push(Bson::Document(stage));
                    }
                    doc! {"$merge": {
                        "into": {"db": db, "coll": coll.clone()},
                        "on": "_id", "whenMatched": when_matched, "whenNotMatched": "insert",
                    }}
                }
            });
        }
    }
    Ok(stages.into_iter().map(Bson::Document).collect())
}

pub async fn run(req: &Request<'_>) -> Result<Document> {
    args::check_fields(
        req,
        &[
            "map",
            "reduce",
            "out",
            "query",
            "sort",
            "limit",
            "finalize",
            "scope",
            "jsMode",
            "verbose",
            "bypassDocumentValidation",
            "collation",
            "maxTimeMS",
            "readConcern",
            "writeConcern",
        ],
    )?;
    let body = &req.body;
    let ns = collection_namespace(&req.name, &req.db, body)?;
    let map = code(body, "map")?.ok_or_else(|| missing("map"))?;
    let reduce = code(body, "reduce")?.ok_or_else(|| missing("reduce"))?;
    let finalize = code(body, "finalize")?;
    let out = parse_out(body.get("out").ok_or_else(|| missing("out"))?)?;
    if !crate::query::js::enabled() {
        return Err(crate::query::js::map_reduce_disabled_error());
    }
    let stages = pipeline(body, &map, &reduce, finalize.as_deref(), &out, &req.db)?;
    let agg = Aggregate {
        ns: ns.clone(),
        collectionless: false,
        pipeline: stages,
        vars: Document::new(),
        allow_disk_use: true,
        explain: false,
        batch_size: None,
        max_time_ms: args::opt_non_negative("mapReduce", body, "maxTimeMS")?,
        collation: body.get("collation").cloned(),
    };
    let router = &req.state.router;
    router.admit_namespace(&ns).await?;
    let results = router
        .read_on(|| -> Result<Vec<Document>> {
            let stream = crate::cursor::with_time_limit(execute(req, &agg)?, agg.max_time_ms);
            let mut out = Vec::new();
            let mut bytes = 0usize;
            for doc in stream {
                let doc = doc?;
                bytes = bytes.saturating_add(crate::query::size::document_size(&doc));
                if bytes > crate::base::limits::MAX_BSON_OBJECT_SIZE {
                    return Err(Error::new(
                        ErrorCode::BSONObjectTooLarge,
                        "mapReduce's inline results exceed the 16 MB document limit; output to a collection",
                    ));
                }
                out.push(doc);
            }
            Ok(out)
        })
        .await?;
    Ok(match out {
        Out::Inline => doc! {"results": results, "ok": 1.0},
        Out::Collection { db: None, coll, .. } => doc! {"result": coll, "ok": 1.0},
        Out::Collection {
            db: Some(db), coll, ..
        } => doc! {"result": {"db": db, "collection": coll}, "ok": 1.0},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_takes_mongodb_forms() {
        assert!(matches!(
            parse_out(&doc! {"inline": 1}.into()),
            Ok(Out::Inline)
        ));
        assert!(matches!(
            parse_out(&Bson::String("c".into())),
            Ok(Out::Collection {
                mode: OutMode::Replace,
                ..
            })
        ));
        assert!(matches!(
            parse_out(&doc! {"reduce": "c", "db": "x"}.into()),
            Ok(Out::Collection {
                mode: OutMode::Reduce,
                db: Some(_),
                ..
            })
        ));
        assert!(parse_out(&doc! {"bogus": "c"}.into()).is_err());
        assert!(parse_out(&Bson::Int32(1)).is_err());
    }

    #[test]
    fn the_pipeline_is_mongodbs_translation() {
        let body = doc! {"mapReduce": "c", "query": {"a": 1}, "limit": 5};
        let p = pipeline(&body, "m", "r", Some("f"), &Out::Inline, "db").unwrap();
        let names: Vec<&str> = p
            .iter()
            .filter_map(|s| s.as_document()?.keys().next().map(String::as_str))
            .collect();
        assert_eq!(
            names,
            ["$match", "$limit", "$project", "$unwind", "$group", "$project", "$sort"]
        );
    }
}
