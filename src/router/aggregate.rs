//! Running an aggregation pipeline over a collection's partitions, as a
//! mongos does: the pipeline splits at its first stage that cannot run on
//! one partition alone; everything before it (and that stage's
//! per-partition part) runs on every targeted partition in parallel, the
//! partitions' outputs are merged (in sort order when the split stage
//! sorts), and the rest runs once at the router.

use std::sync::Arc;
use std::time::Instant;

use bson::{doc, Bson, Document};

use super::merge::{Merge, Row, RowStream};
use super::plan::SortStrategy;
use super::{access_records, matching_inputs, DocStream, DocumentValidation, Namespace, Router};
use crate::aggregate::parse_update;
use crate::aggregate::{
    bind_variables, run_stages, Context, InputDoc, InputStream, Limits, MergeSpec, ParseContext,
    Pipeline, Split, Stage, WhenMatched,
};
use crate::error::{Error, Result};
use crate::query::filter::Filter;
use crate::query::sort::SortSpec;
use crate::{bail, err};

/// A pipeline split for partitioned execution.
pub struct SplitPipeline {
    /// Runs on every partition.
    pub partition: Vec<Arc<dyn Stage>>,
    /// The order the router merges partition outputs in.
    pub merge_sort: Option<SortSpec>,
    /// Runs once, over the merged stream.
    pub router: Vec<Arc<dyn Stage>>,
}

impl SplitPipeline {
    /// Splits at the first stage that cannot stream through a partition.
    pub fn split(pipeline: Pipeline) -> SplitPipeline {
        let mut out = SplitPipeline {
            partition: Vec::new(),
            merge_sort: None,
            router: Vec::new(),
        };
        let mut split = false;
        for stage in pipeline.stages {
            if split {
                out.router.push(Arc::from(stage));
                continue;
            }
            match stage.split() {
                Split::Streaming => out.partition.push(Arc::from(stage)),
                Split::RouterOnly => {
                    split = true;
                    out.router.push(Arc::from(stage));
                }
                Split::Blocking {
                    partition,
                    router,
                    merge_sort,
                } => {
                    split = true;
                    out.partition.push(Arc::from(partition));
                    out.router.extend(router.map(Arc::from));
                    out.merge_sort = merge_sort;
                }
            }
        }
        out
    }

    /// The two halves as explain shows them (`shardsPart`, `mergerPart`).
    pub fn explain(&self) -> (Vec<Bson>, Vec<Bson>) {
        let shards = self
            .partition
            .iter()
            .map(|s| Bson::Document(s.explain()))
            .collect();
        let merger = self
            .router
            .iter()
            .map(|s| Bson::Document(s.explain()))
            .collect();
        (shards, merger)
    }
}

/// What the pipeline's stages may do through the router.
pub struct RouterContext {
    router: Arc<Router>,
    db: String,
    limits: Limits,
    /// When `maxTimeMS` runs out: every collection read stops then.
    deadline: Option<Instant>,
    /// Whether `$out` and `$merge` check the target's validator.
    validation: DocumentValidation,
}

impl RouterContext {
    /// A context for a pipeline in database `db`.
    pub fn shared(
        router: Arc<Router>,
        db: &str,
        limits: Limits,
        deadline: Option<Instant>,
        validation: DocumentValidation,
    ) -> Arc<dyn Context> {
        Arc::new(RouterContext {
            router,
            db: db.to_string(),
            limits,
            deadline,
            validation,
        })
    }

    /// A context for a sub-pipeline of this one, in database `db`.
    fn nested(&self, db: &str) -> Arc<dyn Context> {
        RouterContext::shared(
            self.router.clone(),
            db,
            self.limits.clone(),
            self.deadline,
            self.validation,
        )
    }
}

/// Ends `stream` with `MaxTimeMSExpired` once `deadline` passes.
fn until<T: 'static>(
    deadline: Option<Instant>,
    stream: Box<dyn Iterator<Item = Result<T>> + Send>,
) -> Box<dyn Iterator<Item = Result<T>> + Send> {
    let Some(deadline) = deadline else {
        return stream;
    };
    let mut n = 0u32;
    let mut expired = false;
    Box::new(stream.map_while(move |item| {
        if expired {
            return None;
        }
        n = n.wrapping_add(1);
        if n % 64 == 1 && Instant::now() >= deadline {
            expired = true;
            return Some(Err(Error::new(
                crate::error::ErrorCode::MaxTimeMSExpired,
                "operation exceeded time limit",
            )));
        }
        Some(item)
    }))
}

/// Runs async router work from the synchronous pipeline (which runs where
/// blocking is allowed).
fn block_on<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => tokio::task::block_in_place(|| handle.block_on(f)),
        Err(_) => Err(Error::internal("no runtime to run a pipeline write on")),
    }
}

impl Context for RouterContext {
    fn db(&self) -> &str {
        &self.db
    }

    fn aggregate(
        &self,
        db: &str,
        coll: &str,
        pipeline: &[Document],
        vars: &Document,
    ) -> Result<DocStream> {
        let stages: Vec<Bson> = pipeline.iter().cloned().map(Bson::Document).collect();
        let parse = ParseContext {
            vars: vars.clone(),
            nested: true,
            ..ParseContext::default()
        };
        if coll == "$cmd.aggregate" {
            // A collection-less sub-pipeline (`$documents` first).
            let ctx = self.nested(db);
            return Pipeline::parse(&stages, &parse)?.run(Box::new(std::iter::empty()), &ctx);
        }
        let ns = Namespace::new(db, coll)?;
        let ctx = self.nested(db);
        self.router
            .run_pipeline(&ns, &stages, &parse, ctx, self.deadline)
    }

    fn replace_collection(&self, db: &str, coll: &str, docs: Vec<Document>) -> Result<()> {
        let ns = Namespace::new(db, coll)?;
        let router = self.router.clone();
        if router
            .catalog
            .get(&ns)
            .is_some_and(|c| c.sharding.is_some())
        {
            bail!(
                OutToShardedCollection,
                "{ns} cannot be sharded: $out writes only unsharded collections"
            );
        }
        let mut bytes = Vec::with_capacity(docs.len());
        for d in &docs {
            bytes.push(
                d.to_vec()
                    .map_err(|e| err!(BadValue, "cannot encode a $out document: {e}"))?,
            );
        }
        let validation = self.validation;
        // The results replace the documents; the target keeps its options
        // (its validator among them) and its indexes, as with MongoDB.
        let kept = router.catalog.get(&ns).map(|c| {
            let specs: Vec<Document> = c
                .indexes()
                .iter()
                .filter(|i| !i.is_id())
                .map(|i| i.spec())
                .collect();
            (c.options().document.clone(), specs)
        });
        block_on(async move {
            let seq = router.catalog.drop_collection(&ns)?.unwrap_or(0);
            router.durable(seq).await?;
            if let Some((options, specs)) = kept {
                router.create_collection(&ns, options).await?;
                if !specs.is_empty() {
                    let built = router.create_indexes(&ns, &specs).await?;
                    router.durable(built.seq).await?;
                }
            }
            let outcome = router.insert(&ns, bytes, true, validation).await?;
            if let Some((_, e)) = outcome.errors.into_iter().next() {
                return Err(e);
            }
            // An empty result still leaves the (empty) collection.
            let (_, seq) = router.collection_for_write(&ns)?;
            router.durable(seq).await
        })
    }

    fn merge_into(
        &self,
        db: &str,
        coll: &str,
        spec: &MergeSpec,
        docs: Vec<Document>,
    ) -> Result<()> {
        let ns = Namespace::new(db, coll)?;
        let router = self.router.clone();
        let spec = spec.clone();
        let validation = self.validation;
        block_on(async move {
            for doc in docs {
                merge_one(&router, &ns, &spec, doc, validation).await?;
            }
            Ok(())
        })
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// Writes one `$merge` document.
async fn merge_one(
    router: &Router,
    ns: &Namespace,
    spec: &MergeSpec,
    mut doc: Document,
    validation: DocumentValidation,
) -> Result<()> {
    let mut key = Document::new();
    for field in &spec.on {
        let value = crate::query::path::field(&doc, field)
            .cloned()
            .unwrap_or(Bson::Null);
        key.insert(field.clone(), value);
    }
    let filter = Filter::parse(&key)?;
    let existing = router
        .find_stream(
            ns,
            super::FindSpec {
                filter: Some(filter.clone()),
                limit: Some(1),
                ..super::FindSpec::default()
            },
        )?
        .next()
        .transpose()?;
    match existing {
        None => match spec.when_not_matched.as_str() {
            "discard" => Ok(()),
            "fail" => bail!(
                MergeNoMatchingDocument,
                "$merge could not find a matching document in the target collection for at least one document in the source collection"
            ),
            _ => {
                let bytes = doc
                    .to_vec()
                    .map_err(|e| err!(BadValue, "cannot encode a $merge document: {e}"))?;
                let outcome = router.insert(ns, vec![bytes], true, validation).await?;
                match outcome.errors.into_iter().next() {
                    Some((_, e)) => Err(e),
                    None => Ok(()),
                }
            }
        },
        Some(found) => {
            let update = match &spec.when_matched {
                WhenMatched::KeepExisting => return Ok(()),
                WhenMatched::Fail => bail!(
                    DuplicateKey,
                    "$merge with whenMatched: fail found an existing document with the same values for the 'on' fields: {key}"
                ),
                WhenMatched::Replace => {
                    if let Some(id) = found.get("_id") {
                        doc.insert("_id", id.clone());
                    }
                    parse_update(&Bson::Document(doc), None)?
                }
                WhenMatched::Merge => {
                    doc.remove("_id");
                    parse_update(&Bson::Document(doc! {"$set": doc}), None)?
                }
                WhenMatched::Pipeline(stages) => {
                    // `let` variables (default `{new: "$$ROOT"}`) are
                    // evaluated against the incoming document.
                    let mut vars = Document::new();
                    for (name, expr) in &spec.vars {
                        let value = crate::query::expr::Expr::parse(expr)?.evaluate(&doc)?;
                        vars.insert(name.clone(), value);
                    }
                    let bound: Vec<Bson> = stages
                        .iter()
                        .map(|s| bind_variables(&Bson::Document(s.clone()), &vars))
                        .collect();
                    parse_update(&Bson::Array(bound), None)?
                }
            };
            let id = found.get("_id").cloned().unwrap_or(Bson::Null);
            let stmt = super::UpdateStatement {
                filter: Filter::parse(&doc! {"_id": id})?,
                update,
                multi: false,
                upsert: false,
                sort: None,
                return_documents: false,
                validation,
            };
            router.update(ns, &stmt).await.map(|_| ())
        }
    }
}

impl Router {
    /// The documents of each partition of `ns` that `filter` targets and
    /// matches, as lazy streams (through one snapshot when there are
    /// several), following the query plan; and whether each stream comes
    /// in `sort` order already. Documents the filter decided on their
    /// bytes stay in BSON form for the first stage.
    fn partition_inputs(
        &self,
        ns: &Namespace,
        filter: Option<&Filter>,
        sort: Option<&SortSpec>,
    ) -> Result<(Vec<InputStream>, bool)> {
        let spec = super::FindSpec {
            filter: filter.cloned(),
            sort: sort.cloned(),
            ..super::FindSpec::default()
        };
        // The generated `config` collections are one stream, sorted by
        // the pipeline.
        let Some(coll) = self.catalog.get(ns) else {
            let whole = super::FindSpec { sort: None, ..spec };
            let docs = self.find_stream(ns, whole)?;
            return Ok((
                vec![Box::new(docs.map(|d| d.map(InputDoc::Decoded)))],
                false,
            ));
        };
        let reader = self.reader_for(&coll);
        // The plan without Cosmos DB's strict sort rule: the pipeline's
        // `$sort` is not a query's.
        let plan = super::plan::plan(&coll, &spec, &reader)?;
        self.sample_keys(&coll, filter, &plan);
        let mut inputs = Vec::new();
        for part in &plan.parts {
            let records = access_records(&reader, coll.id, &plan, part, filter, None);
            inputs.push(Box::new(matching_inputs(records, filter.cloned())) as InputStream);
        }
        let in_order = sort.is_some() && plan.sort == SortStrategy::Streamed;
        Ok((inputs, in_order))
    }

    /// Parses and runs `stages` over `ns`: a leading `$match` picks the
    /// partitions and the records read; the rest splits across
    /// partitions ([`SplitPipeline`]).
    pub fn run_pipeline(
        self: &Arc<Self>,
        ns: &Namespace,
        stages: &[Bson],
        parse: &ParseContext,
        ctx: Arc<dyn Context>,
        deadline: Option<Instant>,
    ) -> Result<DocStream> {
        // Bind `let` variables first: the leading `$match` is parsed here,
        // not by the pipeline.
        let bound: Vec<Bson>;
        let stages = if parse.vars.is_empty() {
            stages
        } else {
            bound = stages
                .iter()
                .map(|s| bind_variables(s, &parse.vars))
                .collect();
            &bound[..]
        };
        if let Some((geo_near, rest)) = crate::aggregate::geo_near::leading(stages)? {
            return self.run_geo_near(ns, geo_near, rest, parse, ctx);
        }
        let (filter, rest) = leading_match_collated(stages, parse.collation.as_ref())?;
        // A `$text` match gives each document a score the stages may read;
        // it leaves the pipeline with its documents.
        let scored = filter.as_ref().is_some_and(|f| f.text().is_some());
        if !scored && crate::query::text::pipeline_wants_score(rest) {
            return Err(crate::query::text::score_unavailable());
        }
        let stream = self.run_matched(ns, filter, rest, parse, ctx, deadline)?;
        if !scored {
            return Ok(stream);
        }
        Ok(Box::new(stream.map(|doc| {
            doc.map(|mut doc| {
                crate::query::text::strip_score(&mut doc);
                doc
            })
        })))
    }

    /// Runs `rest` over the records of `ns` that `filter` (the leading
    /// `$match`) selects.
    fn run_matched(
        self: &Arc<Self>,
        ns: &Namespace,
        filter: Option<Filter>,
        rest: &[Bson],
        parse: &ParseContext,
        ctx: Arc<dyn Context>,
        deadline: Option<Instant>,
    ) -> Result<DocStream> {
        let sort = leading_sort(rest);
        let (inputs, in_order) = self.partition_inputs(ns, filter.as_ref(), sort.as_ref())?;
        // One input already in the `$sort`'s order needs no sort stage, so
        // a `$limit` after it stops the read.
        let rest = match rest.split_first() {
            Some((_, after_sort)) if in_order && inputs.len() <= 1 => after_sort,
            _ => rest,
        };
        let pipeline = Pipeline::parse(rest, parse)?;
        let inputs: Vec<InputStream> = inputs
            .into_iter()
            .map(|input| until(deadline, input))
            .collect();
        if inputs.len() <= 1 {
            let input = inputs
                .into_iter()
                .next()
                .unwrap_or_else(|| Box::new(std::iter::empty()));
            return pipeline.run_input(input, &ctx);
        }
        let split = SplitPipeline::split(pipeline);
        let parallelism = self.parallelism(inputs.len());
        let merge_sort = split.merge_sort.clone();
        let partition = Arc::new(split.partition);
        let streams: Vec<RowStream> = inputs
            .into_iter()
            .map(|input| partition_rows(input, partition.clone(), merge_sort.clone(), ctx.clone()))
            .collect();
        let merged: DocStream = Box::new(Merge::new(streams, merge_sort, parallelism));
        let mut stream = merged;
        for stage in &split.router {
            stream = stage.apply(crate::aggregate::interruptible(stream), &ctx)?;
        }
        Ok(stream)
    }
}

/// One partition's part of a pipeline, as rows for the merge; nothing
/// runs until the merge first asks (on a pool thread).
fn partition_rows(
    input: InputStream,
    stages: Arc<Vec<Arc<dyn Stage>>>,
    sort: Option<SortSpec>,
    ctx: Arc<dyn Context>,
) -> RowStream {
    let mut input = Some(input);
    let mut rows: Option<DocStream> = None;
    Box::new(std::iter::from_fn(move || {
        if rows.is_none() {
            let source = input.take()?;
            rows = Some(match run_stages(&stages, source, &ctx) {
                Ok(s) => s,
                Err(e) => Box::new(std::iter::once(Err(e))),
            });
        }
        let doc = match rows.as_mut()?.next()? {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        let key = sort.as_ref().map(|s| s.key_for(&doc)).unwrap_or_default();
        let id = doc.get("_id").cloned().unwrap_or(Bson::Null);
        Some(Ok(Row { key, id, doc }))
    }))
}

/// Takes the leading `$match` stages off a pipeline: they become the
/// filter records are read with (and the partitions targeted by).
/// The order a `$sort` first in `stages` asks for, when it is one a
/// query plan can stream (no `$meta`); a `$sort` it cannot parse is left
/// to the pipeline, which reports the error.
fn leading_sort(stages: &[Bson]) -> Option<SortSpec> {
    let Some(Bson::Document(first)) = stages.first() else {
        return None;
    };
    if first.len() != 1 {
        return None;
    }
    let spec = first.get_document("$sort").ok()?;
    if spec.values().any(|v| matches!(v, Bson::Document(_))) {
        return None;
    }
    SortSpec::parse(spec).ok()
}

pub fn leading_match(stages: &[Bson]) -> Result<(Option<Filter>, &[Bson])> {
    leading_match_collated(stages, None)
}

/// [`leading_match`] for a pipeline whose strings compare by `collation`.
pub fn leading_match_collated<'s>(
    stages: &'s [Bson],
    collation: Option<&Arc<crate::query::collation::Collation>>,
) -> Result<(Option<Filter>, &'s [Bson])> {
    let mut conditions = Vec::new();
    let mut rest = stages;
    while let Some((Bson::Document(first), tail)) = rest.split_first() {
        match first.get("$match") {
            Some(Bson::Document(m)) if first.len() == 1 => {
                crate::aggregate::check_match_clauses(m)?;
                conditions.push(Bson::Document(m.clone()));
                rest = tail;
            }
            _ => break,
        }
    }
    let filter = match conditions.len() {
        0 => None,
        1 => match conditions.pop() {
            Some(Bson::Document(d)) => Some(Filter::parse_in_pipeline_collated(&d, collation)?),
            _ => None,
        },
        _ => Some(Filter::parse_in_pipeline_collated(
            &doc! {"$and": conditions},
            collation,
        )?),
    };
    Ok((filter, rest))
}
