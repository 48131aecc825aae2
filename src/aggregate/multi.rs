//! `$facet`: several sub-pipelines over one input.
//!
//! The input is buffered once, bounded like any blocking stage: past the
//! memory limit it moves to a spill file with `allowDiskUse` (or fails
//! with 292 without). Every sub-pipeline reads the buffer from the start,
//! and one document comes out with one array field per sub-pipeline. It runs only at the router: MongoDB does
//! not split `$facet` either (SERVER-24154).

use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::spill::{facet_memory_error, SpillRun, SpillWriter};
use super::{
    Context, DocStream, Limits, ParseContext, Pipeline, Split, Stage, StageParser,
    DEFAULT_MAX_BLOCKING_BYTES,
};
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::type_name;

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] = &[("$facet", parse_facet)];

/// Stages a `$facet` sub-pipeline may not hold (their `FacetRequirement`
/// is `kNotAllowed` in MongoDB).
const NOT_IN_FACET: &[&str] = &[
    "$changeStream",
    "$collStats",
    "$currentOp",
    "$facet",
    "$geoNear",
    "$indexStats",
    "$listSessions",
    "$merge",
    "$out",
    "$search",
];

/// Largest document `$facet` may build (MongoDB's
/// `internalQueryFacetMaxOutputDocSizeBytes`, 100 MB).
const MAX_OUTPUT_BYTES: usize = DEFAULT_MAX_BLOCKING_BYTES;

struct Facet {
    /// Shared with the output stream, which outlives `&self`.
    facets: Arc<Vec<(String, Pipeline)>>,
}

fn parse_facet(arg: &Bson, pctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let spec = match arg {
        Bson::Document(d) if !d.is_empty() => d,
        other => {
            return Err(Error::new(
                ErrorCode::FacetNotObject,
                format!("the $facet specification must be a non-empty object, but found: {other}"),
            ))
        }
    };
    let sub_ctx = ParseContext {
        in_facet: true,
        ..pctx.clone()
    };
    let mut facets = Vec::with_capacity(spec.len());
    for (name, value) in spec {
        validate_facet_name(name)?;
        let Bson::Array(stages) = value else {
            return Err(Error::new(
                ErrorCode::FacetPipelineNotArray,
                format!(
                    "arguments to $facet must be arrays, {name} is type {}",
                    type_name(value)
                ),
            ));
        };
        for stage in stages {
            let Bson::Document(stage) = stage else {
                return Err(Error::new(
                    ErrorCode::FacetStageNotObject,
                    format!(
                        "elements of arrays in $facet spec must be non-empty objects, {name} \
                         argument contained an element of type {}: {stage}",
                        type_name(stage)
                    ),
                ));
            };
            if let Some(stage_name) = stage.keys().next() {
                if NOT_IN_FACET.contains(&stage_name.as_str()) {
                    return Err(Error::new(
                        ErrorCode::StageNotAllowedInFacet,
                        format!("{stage_name} is not allowed to be used within a $facet stage"),
                    ));
                }
            }
        }
        facets.push((name.clone(), Pipeline::parse(stages, &sub_ctx)?));
    }
    Ok(Box::new(Facet {
        facets: Arc::new(facets),
    }))
}

/// Facet names follow the rules of field names in a path.
fn validate_facet_name(name: &str) -> Result<()> {
    let problem = if name.is_empty() {
        Some((
            ErrorCode::FieldPathEmptyComponent,
            "FieldPath field names may not be empty strings.",
        ))
    } else if name.starts_with('$') {
        Some((
            ErrorCode::FieldPathDollarPrefixed,
            "FieldPath field names may not start with '$'. Consider using $getField or \
             $setField.",
        ))
    } else if name.contains('.') {
        Some((
            ErrorCode::FieldPathContainsDot,
            "FieldPath field names may not contain '.'. Consider using $getField or $setField.",
        ))
    } else if name.contains('\0') {
        Some((
            ErrorCode::FieldPathNullByte,
            "FieldPath field names may not contain '\0'.",
        ))
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some((code, reason)) => Err(Error::new(
            code,
            format!(
                "$facet pipeline names must follow the naming rules of field path \
                 expressions. :: caused by :: {reason}"
            ),
        )),
    }
}

/// The input of a `$facet`, read once and replayed to every
/// sub-pipeline: in memory up to the blocking-stage limit, past it (with
/// `allowDiskUse`) in one spill file that each sub-pipeline reads from
/// the start. The file goes with the last reader.
enum FacetInput {
    Memory(Arc<Vec<Document>>),
    Spilled(Arc<SpillRun>),
}

impl FacetInput {
    fn buffer(mut input: DocStream, limits: &Limits) -> Result<FacetInput> {
        let mut buffered = Vec::new();
        let mut bytes = 0usize;
        for doc in input.by_ref() {
            let doc = doc?;
            bytes = bytes.saturating_add(doc_size(&doc));
            buffered.push(doc);
            if bytes > limits.max_blocking_bytes {
                if !limits.allow_disk_use {
                    return Err(facet_memory_error());
                }
                let mut out = SpillWriter::create(&limits.spill_dir)?;
                for doc in std::mem::take(&mut buffered) {
                    out.append(&doc)?;
                }
                for doc in input {
                    out.append(&doc?)?;
                }
                return Ok(FacetInput::Spilled(Arc::new(out.finish()?)));
            }
        }
        Ok(FacetInput::Memory(Arc::new(buffered)))
    }

    /// The whole input again, from its first document.
    fn replay(&self) -> Result<DocStream> {
        Ok(match self {
            FacetInput::Memory(docs) => {
                let docs = Arc::clone(docs);
                Box::new((0..docs.len()).filter_map(move |i| docs.get(i).cloned().map(Ok)))
            }
            FacetInput::Spilled(run) => Box::new(run.reader()?),
        })
    }
}

/// Buffers the input, runs every sub-pipeline over it, and builds the one
/// output document.
fn run_facets(
    facets: &[(String, Pipeline)],
    input: DocStream,
    ctx: &Arc<dyn Context>,
) -> Result<Document> {
    let input = FacetInput::buffer(input, ctx.limits())?;
    let mut out = Document::new();
    let mut out_bytes = 0usize;
    for (name, pipeline) in facets {
        let mut results = Vec::new();
        for doc in pipeline.run(input.replay()?, ctx)? {
            let mut doc = doc?;
            crate::query::text::strip_score(&mut doc);
            out_bytes = out_bytes.saturating_add(doc_size(&doc));
            if out_bytes > MAX_OUTPUT_BYTES {
                return Err(Error::new(
                    ErrorCode::FacetOutputTooLarge,
                    format!(
                        "document constructed by $facet is {out_bytes} bytes, which exceeds \
                             the limit of {MAX_OUTPUT_BYTES} bytes"
                    ),
                ));
            }
            results.push(Bson::Document(doc));
        }
        out.insert(name.clone(), Bson::Array(results));
    }
    Ok(out)
}

/// A document's BSON size (0 if it cannot be encoded, which the write
/// path reports later).
fn doc_size(doc: &Document) -> usize {
    doc.to_vec().map(|v| v.len()).unwrap_or(0)
}

impl Stage for Facet {
    fn name(&self) -> &'static str {
        "$facet"
    }

    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        // The input is read only when the output is first asked for.
        let facets = Arc::clone(&self.facets);
        let ctx = Arc::clone(ctx);
        let mut input = Some(input);
        Ok(Box::new(std::iter::from_fn(move || {
            let input = input.take()?;
            Some(run_facets(&facets, input, &ctx))
        })))
    }

    fn split(&self) -> Split {
        Split::RouterOnly
    }

    fn explain(&self) -> Document {
        let mut spec = Document::new();
        for (name, pipeline) in self.facets.iter() {
            let stages: Vec<Bson> = pipeline
                .stages
                .iter()
                .map(|s| Bson::Document(s.explain()))
                .collect();
            spec.insert(name.clone(), Bson::Array(stages));
        }
        doc! { "$facet": spec }
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::super::lookup::test_support::{parse_error, run, FakeContext};
    use super::*;

    fn input() -> Vec<Document> {
        (1..=5)
            .map(|i| doc! { "_id": i, "even": i % 2 == 0 })
            .collect()
    }

    #[test]
    fn every_facet_sees_the_whole_input() {
        let ctx = FakeContext::new(&[]);
        let out = run(
            &ctx,
            vec![doc! { "$facet": {
                "all": [],
                "joined": [{ "$unionWith": "none" }],
                "again": [],
            }}],
            input(),
        )
        .unwrap();
        assert_eq!(out.len(), 1);
        let keys: Vec<&String> = out[0].keys().collect();
        assert_eq!(keys, ["all", "joined", "again"]);
        assert_eq!(out[0].get_array("all").unwrap().len(), 5);
        assert_eq!(out[0].get_array("again").unwrap().len(), 5);
        assert_eq!(out[0].get_array("joined").unwrap().len(), 5);
    }

    #[test]
    fn facet_with_match_sub_pipelines() {
        let ctx = FakeContext::new(&[]);
        let out = run(
            &ctx,
            vec![doc! { "$facet": {
                "evens": [{ "$match": { "even": true } }],
                "odds": [{ "$match": { "even": false } }],
            }}],
            input(),
        )
        .unwrap();
        assert_eq!(out[0].get_array("evens").unwrap().len(), 2);
        assert_eq!(out[0].get_array("odds").unwrap().len(), 3);
    }

    #[test]
    fn empty_input_gives_empty_arrays() {
        let ctx = FakeContext::new(&[]);
        let out = run(&ctx, vec![doc! { "$facet": { "a": [] } }], vec![]).unwrap();
        assert_eq!(out, vec![doc! { "a": [] }]);
    }

    #[test]
    fn memory_limit_without_disk_use() {
        let mut ctx = FakeContext::new(&[]);
        Arc::get_mut(&mut ctx).unwrap().limits.max_blocking_bytes = 50;
        let e = run(&ctx, vec![doc! { "$facet": { "a": [] } }], input()).unwrap_err();
        assert_eq!(e.code.number(), 292);
    }

    #[test]
    fn explain_lists_sub_pipelines() {
        let stages = vec![Bson::Document(
            doc! { "$facet": { "a": [{ "$unionWith": "x" }], "b": [] } },
        )];
        let p = Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        assert_eq!(
            p.stages[0].explain(),
            doc! { "$facet": {
                "a": [{ "$unionWith": { "coll": "x", "pipeline": [] } }],
                "b": [],
            }}
        );
        assert!(matches!(p.stages[0].split(), Split::RouterOnly));
    }

    #[test]
    fn parse_errors() {
        let cases: Vec<(Document, i32, &str)> = vec![
            (
                doc! { "$facet": {} },
                40169,
                "the $facet specification must be a non-empty object, but found: {}",
            ),
            (
                doc! { "$facet": { "a": 1 } },
                40170,
                "arguments to $facet must be arrays, a is type int",
            ),
            (
                doc! { "$facet": { "a": [1] } },
                40171,
                "elements of arrays in $facet spec must be non-empty objects, a argument \
                 contained an element of type int: 1",
            ),
            (
                doc! { "$facet": { "a": [{ "$out": "x" }] } },
                40600,
                "$out is not allowed to be used within a $facet stage",
            ),
            (
                doc! { "$facet": { "a": [{ "$merge": "x" }] } },
                40600,
                "$merge is not allowed to be used within a $facet stage",
            ),
            (
                doc! { "$facet": { "a": [{ "$facet": { "b": [] } }] } },
                40600,
                "$facet is not allowed to be used within a $facet stage",
            ),
            (
                doc! { "$facet": { "$a": [] } },
                16410,
                "$facet pipeline names must follow the naming rules of field path \
                 expressions. :: caused by :: FieldPath field names may not start with '$'. \
                 Consider using $getField or $setField.",
            ),
            (
                doc! { "$facet": { "a.b": [] } },
                16412,
                "$facet pipeline names must follow the naming rules of field path \
                 expressions. :: caused by :: FieldPath field names may not contain '.'. \
                 Consider using $getField or $setField.",
            ),
        ];
        for (stage, code, message) in cases {
            let e = parse_error(vec![stage.clone()]);
            assert_eq!(
                (e.code.number(), e.message.as_str()),
                (code, message),
                "{stage}"
            );
        }
        // Stages not allowed in $facet are refused inside a sub-pipeline too.
        let e = parse_error(vec![doc! { "$facet": { "a": [
            { "$lookup": { "from": "x", "pipeline": [{ "$out": "y" }], "as": "z" } }
        ] } }]);
        assert_eq!(e.code.number(), 51047);
    }

    fn padded(n: i32) -> Vec<Document> {
        (0..n)
            .map(|i| doc! { "_id": i, "k": i % 7, "pad": "p".repeat(50) })
            .collect()
    }

    fn spill_count(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir).unwrap().count()
    }

    #[test]
    fn facet_spills_or_fails() {
        use super::super::basic::tests::{ctx_with, run_in};
        let dir = tempfile::tempdir().unwrap();
        let stage = doc! { "$facet": {
            "all": [],
            "sorted": [{ "$sort": { "k": 1, "_id": -1 } }, { "$project": { "pad": 0 } }],
            "counts": [{ "$group": { "_id": "$k", "n": { "$sum": 1 } } }, { "$sort": { "_id": 1 } }],
            "none": [{ "$match": { "k": 99 } }],
        }};
        let big = ctx_with(DEFAULT_MAX_BLOCKING_BYTES, false, dir.path());
        let expected = run_in(&big, vec![stage.clone()], padded(300)).unwrap();
        assert_eq!(expected[0].get_array("all").unwrap().len(), 300);

        let no_disk = ctx_with(2_000, false, dir.path());
        let e = run_in(&no_disk, vec![stage.clone()], padded(300)).unwrap_err();
        assert_eq!(e.code.number(), 292);
        assert_eq!(
            e.message,
            "Exceeded memory limit for $facet, but didn't allow external sort. Pass \
             allowDiskUse:true to opt in."
        );
        // Sub-pipeline stages that block spill too (the `$sort` here).
        let disk = ctx_with(2_000, true, dir.path());
        let spilled = run_in(&disk, vec![stage], padded(300)).unwrap();
        assert_eq!(spilled, expected);
        assert_eq!(spill_count(dir.path()), 0);
    }

    #[test]
    fn facet_input_replays_from_a_spill_file() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            max_blocking_bytes: 1_000,
            allow_disk_use: true,
            spill_dir: dir.path().to_path_buf(),
        };
        let input = FacetInput::buffer(Box::new(padded(100).into_iter().map(Ok)), &limits).unwrap();
        assert!(matches!(input, FacetInput::Spilled(_)));
        assert_eq!(spill_count(dir.path()), 1);
        let first = input.replay().unwrap();
        for _ in 0..2 {
            let again: Vec<Document> = input.replay().unwrap().map(|d| d.unwrap()).collect();
            assert_eq!(again, padded(100));
        }
        drop(input);
        // An open reader keeps the file; the last one removes it.
        assert_eq!(spill_count(dir.path()), 1);
        assert_eq!(first.count(), 100);
        assert_eq!(spill_count(dir.path()), 0);

        // Within the limit nothing touches the disk.
        let small = FacetInput::buffer(Box::new(padded(3).into_iter().map(Ok)), &limits).unwrap();
        assert!(matches!(small, FacetInput::Memory(_)));
        assert_eq!(spill_count(dir.path()), 0);
    }

    #[test]
    fn facet_input_error_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            max_blocking_bytes: 1_000,
            allow_disk_use: true,
            spill_dir: dir.path().to_path_buf(),
        };
        let failing = padded(100)
            .into_iter()
            .map(Ok)
            .chain(std::iter::once(Err(Error::bad_value("boom"))));
        let Err(e) = FacetInput::buffer(Box::new(failing), &limits) else {
            panic!("expected the input's error");
        };
        assert_eq!(e.message, "boom");
        assert_eq!(spill_count(dir.path()), 0);
    }
}
