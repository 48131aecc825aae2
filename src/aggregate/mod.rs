//! The aggregation pipeline: stages parsed once, then run as a chain of
//! lazy document streams.
//!
//! Each stage implements [`Stage`]: it turns an input stream into an
//! output stream, and says how it splits across partitions
//! ([`Stage::split`]): streaming stages run on every partition, blocking
//! ones become a per-partition part and a merging part at the router, as a
//! mongos splits a pipeline. Stage parsers live in one table per family
//! of stages (one file each), searched in turn.
//!
//! Anything that reads or writes other collections (`$lookup`,
//! `$unionWith`, `$out`, `$merge`) goes through [`Context`], so this module
//! does no I/O of its own apart from spilling to temporary files.

use std::sync::Arc;

use bson::{Bson, Document, RawDocumentBuf};

use crate::error::{Error, ErrorCode, Result};
use crate::query::sort::SortSpec;

mod basic;
mod densify;
pub mod geo_near;
mod graph;
mod group;
mod lookup;
mod multi;
mod output;
pub mod spill;
mod update;
mod window;

pub use basic::{check_match_clauses, sort_with_limit};
pub use group::ACCUMULATORS;
pub use update::parse_update;

/// A lazily produced stream of documents.
pub type DocStream = Box<dyn Iterator<Item = Result<Document>> + Send>;

/// A document entering a pipeline from a collection: still in BSON form
/// when it comes straight from storage, so that a first stage reading a
/// few of its fields (`$group`) need not decode it.
pub enum InputDoc {
    Raw(RawDocumentBuf),
    Decoded(Document),
}

impl InputDoc {
    pub fn into_document(self) -> Result<Document> {
        match self {
            InputDoc::Decoded(d) => Ok(d),
            InputDoc::Raw(raw) => Document::try_from(raw.as_ref())
                .map_err(|e| Error::internal(format!("stored document is not valid BSON: {e}"))),
        }
    }
}

/// The documents a pipeline reads from a collection.
pub type InputStream = Box<dyn Iterator<Item = Result<InputDoc>> + Send>;

/// The documents of `input`, decoded.
pub fn decoded(input: InputStream) -> DocStream {
    Box::new(input.map(|item| item?.into_document()))
}

/// Most bytes a blocking stage holds in memory by default (MongoDB's
/// 100 MB).
pub const DEFAULT_MAX_BLOCKING_BYTES: usize = 100 * 1024 * 1024;

/// What a pipeline may do beyond transforming its input.
pub trait Context: Send + Sync {
    /// The database the pipeline runs in.
    fn db(&self) -> &str;
    /// Runs `pipeline` over collection `db.coll` (a `$lookup` pipeline, a
    /// `$unionWith`), with `vars` bound as `$$name` variables. A missing
    /// collection reads as empty.
    fn aggregate(
        &self,
        db: &str,
        coll: &str,
        pipeline: &[Document],
        vars: &Document,
    ) -> Result<DocStream>;
    /// Replaces `db.coll` with `docs` (`$out`), atomically from a
    /// reader's view where the backend allows.
    fn replace_collection(&self, db: &str, coll: &str, docs: Vec<Document>) -> Result<()>;
    /// Writes `docs` into `db.coll` by `on` fields (`$merge`), as the
    /// stage's `whenMatched` / `whenNotMatched` say.
    fn merge_into(&self, db: &str, coll: &str, spec: &MergeSpec, docs: Vec<Document>)
        -> Result<()>;
    /// Limits and where to spill.
    fn limits(&self) -> &Limits;
}

/// `$merge`'s options.
#[derive(Debug, Clone, PartialEq)]
pub struct MergeSpec {
    pub on: Vec<String>,
    /// `"replace" | "keepExisting" | "merge" | "fail"`, or a pipeline.
    pub when_matched: WhenMatched,
    /// `"insert" | "discard" | "fail"`.
    pub when_not_matched: String,
    pub vars: Document,
}

#[derive(Debug, Clone, PartialEq)]
pub enum WhenMatched {
    Replace,
    KeepExisting,
    Merge,
    Fail,
    Pipeline(Vec<Document>),
}

/// A context for pipelines that read and write nothing but their input
/// (update pipelines): other collections are refused.
struct LocalContext {
    limits: Limits,
}

impl Context for LocalContext {
    fn db(&self) -> &str {
        ""
    }

    fn aggregate(&self, _: &str, coll: &str, _: &[Document], _: &Document) -> Result<DocStream> {
        Err(Error::new(
            ErrorCode::InvalidOptions,
            format!("this pipeline cannot read collection '{coll}'"),
        ))
    }

    fn replace_collection(&self, _: &str, coll: &str, _: Vec<Document>) -> Result<()> {
        Err(Error::new(
            ErrorCode::InvalidOptions,
            format!("this pipeline cannot write collection '{coll}'"),
        ))
    }

    fn merge_into(&self, _: &str, coll: &str, _: &MergeSpec, _: Vec<Document>) -> Result<()> {
        Err(Error::new(
            ErrorCode::InvalidOptions,
            format!("this pipeline cannot write collection '{coll}'"),
        ))
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// The context of a pipeline over documents alone.
pub fn local_context() -> Arc<dyn Context> {
    Arc::new(LocalContext {
        limits: Limits {
            max_blocking_bytes: DEFAULT_MAX_BLOCKING_BYTES,
            allow_disk_use: false,
            spill_dir: std::env::temp_dir(),
        },
    })
}

/// Memory limits of blocking stages and the spill directory.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_blocking_bytes: usize,
    pub allow_disk_use: bool,
    /// Where spill files go (inside the data directory).
    pub spill_dir: std::path::PathBuf,
}

/// How a stage runs on a partitioned collection.
pub enum Split {
    /// Runs unchanged on every partition (`$match`, `$project`, ...).
    Streaming,
    /// Runs only at the router, after the partitions' streams are merged
    /// (`$out`, `$lookup`, `$sample`, ...).
    RouterOnly,
    /// A per-partition part and a router part: `$group` (partial groups,
    /// then a final group over partials), `$sort` (each partition sorts,
    /// the router merges by `merge_sort`), `$limit` (each partition keeps
    /// n, the router keeps n), `$count` (partition counts, router sums).
    Blocking {
        partition: Box<dyn Stage>,
        router: Option<Box<dyn Stage>>,
        /// The router merges the partitions' streams in this order.
        merge_sort: Option<SortSpec>,
    },
}

/// One stage of a pipeline.
pub trait Stage: Send + Sync {
    /// Its name, `"$group"`.
    fn name(&self) -> &'static str;
    /// Turns the input stream into the output stream. Streaming stages
    /// must not collect their input.
    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream>;
    /// [`Stage::apply`] as a pipeline's first stage over a collection,
    /// whose documents may still be in BSON form; a stage that can read
    /// them without decoding them says so here.
    fn apply_input(&self, input: InputStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        self.apply(decoded(input), ctx)
    }
    /// How it splits across partitions.
    fn split(&self) -> Split;
    /// The stage as explain shows it.
    fn explain(&self) -> Document;
    /// For a `$sort` stage, its order (lets a following `$limit` fold in,
    /// and the router merge sorted partition streams).
    fn sort_order(&self) -> Option<&SortSpec> {
        None
    }
}

/// Parses one stage's argument.
pub type StageParser = fn(&Bson, &ParseContext) -> Result<Box<dyn Stage>>;

/// What parsing a stage may need to know.
#[derive(Debug, Clone, Default)]
pub struct ParseContext {
    /// The pipeline's `let` variables.
    pub vars: Document,
    /// True for the last stage (`$out` and `$merge` must be last).
    pub last: bool,
    /// True inside `$facet` (which refuses some stages).
    pub in_facet: bool,
    /// True inside a `$lookup` / `$unionWith` sub-pipeline.
    pub nested: bool,
    /// The collation strings compare by (`None`: simple).
    pub collation: Option<Arc<crate::query::collation::Collation>>,
}

/// Every stage table, one per family, each sorted by name.
static TABLES: &[&[(&str, StageParser)]] = &[
    basic::STAGES,
    densify::STAGES,
    geo_near::STAGES,
    graph::STAGES,
    group::STAGES,
    lookup::STAGES,
    multi::STAGES,
    output::STAGES,
    window::STAGES,
];

fn find_stage(name: &str) -> Option<StageParser> {
    TABLES.iter().find_map(|t| {
        t.binary_search_by(|(n, _)| n.cmp(&name))
            .ok()
            .map(|i| t[i].1)
    })
}

/// The names of the supported stages, sorted: generators of test
/// pipelines build from the real table.
pub fn stage_names() -> impl Iterator<Item = &'static str> {
    let mut names: Vec<&'static str> = TABLES.iter().flat_map(|t| t.iter().map(|s| s.0)).collect();
    names.sort_unstable();
    names.into_iter()
}

/// A parsed pipeline.
pub struct Pipeline {
    pub stages: Vec<Box<dyn Stage>>,
}

impl Pipeline {
    /// Parses `[{$stage: arg}, ...]`.
    pub fn parse(stages: &[Bson], ctx: &ParseContext) -> Result<Pipeline> {
        let bound;
        let stages = if ctx.vars.is_empty() {
            stages
        } else {
            bound = stages
                .iter()
                .map(|s| bind_variables(s, &ctx.vars))
                .collect::<Vec<_>>();
            &bound[..]
        };
        let mut out: Vec<Box<dyn Stage>> = Vec::with_capacity(stages.len());
        for (i, stage) in stages.iter().enumerate() {
            let Bson::Document(stage) = stage else {
                return Err(Error::new(
                    ErrorCode::TypeMismatch,
                    "Each element of the 'pipeline' array must be an object",
                ));
            };
            let (name, arg) = stage_arg(stage)?;
            let parser = find_stage(name).ok_or_else(|| {
                Error::new(
                    ErrorCode::StageUnknown,
                    format!("Unrecognized pipeline stage name: '{name}'"),
                )
            })?;
            let ctx = ParseContext {
                last: i + 1 == stages.len(),
                ..ctx.clone()
            };
            let parsed = parser(arg, &ctx)?;
            // `$sort` then `$limit n`: the sort keeps only its best n.
            let next_limit = stages
                .get(i + 1)
                .and_then(Bson::as_document)
                .and_then(|d| d.get("$limit"))
                .and_then(|n| match n {
                    Bson::Int32(n) => usize::try_from(*n).ok(),
                    Bson::Int64(n) => usize::try_from(*n).ok(),
                    Bson::Double(n) if n.fract() == 0.0 && *n >= 1.0 => Some(*n as usize),
                    _ => None,
                })
                .filter(|&n| n > 0);
            match (parsed.sort_order(), next_limit) {
                (Some(order), Some(limit)) => out.push(sort_with_limit(order.clone(), limit)),
                _ => out.push(parsed),
            }
        }
        Ok(Pipeline { stages: out })
    }

    /// Runs every stage over `input`.
    pub fn run(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let mut stream = input;
        for stage in &self.stages {
            stream = stage.apply(interruptible(stream), ctx)?;
        }
        Ok(stream)
    }

    /// Runs every stage over a collection's documents ([`run_stages`]).
    pub fn run_input(&self, input: InputStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        run_stages(&self.stages, input, ctx)
    }
}

/// Runs `stages` over a collection's documents: the first stage reads
/// them as they come ([`Stage::apply_input`]), the others decoded.
pub fn run_stages<S: std::ops::Deref<Target = dyn Stage>>(
    stages: &[S],
    input: InputStream,
    ctx: &Arc<dyn Context>,
) -> Result<DocStream> {
    let Some((first, rest)) = stages.split_first() else {
        return Ok(decoded(input));
    };
    let mut stream = first.apply_input(interruptible(input), ctx)?;
    for stage in rest {
        stream = stage.apply(interruptible(stream), ctx)?;
    }
    Ok(stream)
}

/// `stream`, ending with the operation's error once it must stop
/// (`maxTimeMS`, client gone): every stage reads its input through this,
/// so a stage looping over its input stops with the operation.
pub fn interruptible<T: 'static>(
    stream: Box<dyn Iterator<Item = Result<T>> + Send>,
) -> Box<dyn Iterator<Item = Result<T>> + Send> {
    Box::new(stream.map(|item| {
        crate::query::interrupt::check()?;
        item
    }))
}

/// Replaces each use of a bound variable (`"$$name"`, `"$$name.path"`)
/// with its value as a `$literal`: `let` variables are constants for the
/// whole pipeline, so every stage, `$expr` filters included, sees them.
pub fn bind_variables(value: &Bson, vars: &Document) -> Bson {
    match value {
        Bson::String(s) => {
            let Some(rest) = s.strip_prefix("$$") else {
                return value.clone();
            };
            let mut parts = rest.split('.');
            let name = parts.next().unwrap_or_default();
            let Some(mut found) = vars.get(name) else {
                return value.clone();
            };
            for part in parts {
                match found {
                    Bson::Document(d) => match d.get(part) {
                        Some(v) => found = v,
                        None => return Bson::Document(bson::doc! {"$literal": Bson::Null}),
                    },
                    _ => return Bson::Document(bson::doc! {"$literal": Bson::Null}),
                }
            }
            Bson::Document(bson::doc! {"$literal": found.clone()})
        }
        Bson::Array(items) => Bson::Array(items.iter().map(|v| bind_variables(v, vars)).collect()),
        Bson::Document(d) => Bson::Document(
            d.iter()
                .map(|(k, v)| (k.clone(), bind_variables(v, vars)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The one `{$name: arg}` of a stage document.
pub fn stage_arg(stage: &Document) -> Result<(&str, &Bson)> {
    if stage.len() != 1 {
        return Err(Error::new(
            ErrorCode::StageNotSingleField,
            "A pipeline stage specification object must contain exactly one field.",
        ));
    }
    stage
        .iter()
        .next()
        .map(|(k, v)| (k.as_str(), v))
        .ok_or_else(|| Error::bad_value("empty pipeline stage"))
}
