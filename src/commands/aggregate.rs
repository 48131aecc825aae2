//! `aggregate`, in the subset drivers need before the aggregation
//! pipeline is built: `$match`, `$sort`, `$skip`, `$limit`, `$project`,
//! `$count`, and `$group` with a constant `_id` and `$sum` — the shape of
//! `countDocuments`. Any other stage is refused by name.

use bson::{doc, Bson, Document};

use super::args::{self, collection_namespace, number_as_i64, opt_document};
use super::Request;
use crate::cursor::{first_batch_reply, next_batch, DEFAULT_FIRST_BATCH};
use crate::error::{Error, ErrorCode, Result};
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
    /// `$group` with a constant `_id`; fields are `(name, $sum argument)`.
    GroupConstant(Bson, Vec<(String, Bson)>),
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
            let id = spec.get("_id").cloned().unwrap_or(Bson::Null);
            if matches!(&id, Bson::String(s) if s.starts_with('$'))
                || matches!(id, Bson::Document(_))
            {
                return Err(not_yet("$group by a field"));
            }
            let mut fields = Vec::new();
            for (k, v) in spec.iter().filter(|(k, _)| k.as_str() != "_id") {
                match v.as_document().and_then(|d| d.get("$sum")) {
                    Some(sum) if v.as_document().is_some_and(|d| d.len() == 1) => {
                        fields.push((k.clone(), sum.clone()))
                    }
                    _ => return Err(not_yet("$group accumulators other than $sum")),
                }
            }
            Stage::GroupConstant(id, fields)
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

fn sum_value(arg: &Bson, doc: &Document) -> Result<f64> {
    match arg {
        Bson::String(path) if path.starts_with('$') => {
            let mut v = Some(&Bson::Document(doc.clone())).cloned();
            for part in path[1..].split('.') {
                v = match v {
                    Some(Bson::Document(d)) => d.get(part).cloned(),
                    _ => None,
                };
            }
            Ok(match v {
                Some(Bson::Int32(n)) => n as f64,
                Some(Bson::Int64(n)) => n as f64,
                Some(Bson::Double(n)) => n,
                _ => 0.0,
            })
        }
        Bson::Int32(n) => Ok(*n as f64),
        Bson::Int64(n) => Ok(*n as f64),
        Bson::Double(n) => Ok(*n),
        _ => Ok(0.0),
    }
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
        Stage::GroupConstant(id, fields) => {
            let mut totals = vec![(0.0f64, true); fields.len()];
            let mut any = false;
            for d in input {
                let d = d?;
                any = true;
                for (i, (_, arg)) in fields.iter().enumerate() {
                    let v = sum_value(arg, &d)?;
                    if let Some(t) = totals.get_mut(i) {
                        t.0 += v;
                        t.1 &= v.fract() == 0.0;
                    }
                }
            }
            if !any {
                Box::new(std::iter::empty())
            } else {
                let mut out = doc! {"_id": id};
                for ((name, _), (total, integral)) in fields.iter().zip(totals) {
                    out.insert(name.clone(), number(total, integral));
                }
                Box::new(std::iter::once(Ok(out)))
            }
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
    let ns = match b.get("aggregate") {
        Some(Bson::String(_)) => collection_namespace("aggregate", &req.db, b)?,
        Some(_) => return Err(not_yet("collection-less aggregate")),
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
    let (batch, stream) = tokio::task::block_in_place(|| -> Result<_> {
        let mut stream = router.find(
            &ns,
            FindSpec {
                filter,
                ..FindSpec::default()
            },
        )?;
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
