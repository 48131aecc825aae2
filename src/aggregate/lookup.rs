//! Stages that read other collections: `$lookup`, `$unionWith`.
//!
//! Both run only at the router (a partition cannot see other
//! collections) and read through [`Context::aggregate`], handing it a
//! sub-pipeline and the variables it may use. `$lookup` runs one
//! sub-pipeline per input document: a `$match` built from the document's
//! `localField` values, the user's `pipeline` with its `let` variables, or
//! both (MongoDB's `DocumentSourceLookUp`).

use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::spill::doc_size;
use super::{Context, DocStream, ParseContext, Pipeline, Split, Stage, StageParser};
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::type_name;
use crate::query::expr::Expr;
use crate::query::path::all_values;

/// The most the documents one `$lookup` joins may take (MongoDB's
/// `internalLookupStageIntermediateDocumentMaxSizeBytes`).
const LOOKUP_MAX_BYTES: usize = crate::query::size::ACCUMULATOR_MEMORY_LIMIT;

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] =
    &[("$lookup", parse_lookup), ("$unionWith", parse_union_with)];

/// The collection name MongoDB gives a collection-less sub-pipeline (one
/// that starts with `$documents`); the context reads it as empty.
pub(super) const COLLECTIONLESS: &str = "$cmd.aggregate";

/// `$lookup`.
#[derive(Clone)]
struct Lookup {
    /// The foreign collection, in the pipeline's database.
    from: String,
    /// Whether `from` was given (explain omits it otherwise).
    has_from: bool,
    as_field: String,
    /// `localField` / `foreignField`, when the equality form is used.
    join: Option<(String, String)>,
    /// `let` variables, in order, with the spec explain shows.
    let_vars: Vec<(String, Expr)>,
    let_spec: Document,
    /// The user's sub-pipeline (`None` for the equality-only form).
    pipeline: Option<Vec<Document>>,
    /// The enclosing pipeline's variables, visible to `let` and the
    /// sub-pipeline.
    outer_vars: Document,
}

fn parse_lookup(arg: &Bson, pctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::failed_to_parse(
            "the $lookup specification must be an Object",
        ));
    };
    let mut from = None;
    let mut as_field = None;
    let mut local = None;
    let mut foreign = None;
    let mut let_spec = None;
    let mut pipeline = None;
    for (name, value) in spec {
        match name.as_str() {
            "pipeline" => pipeline = Some(sub_pipeline(value)?),
            "let" => {
                let Bson::Document(d) = value else {
                    return Err(Error::failed_to_parse(format!(
                        "$lookup argument 'let: {value}' must be an object, is type {}",
                        type_name(value)
                    )));
                };
                let_spec = Some(d.clone());
            }
            "from" => from = Some(parse_from(value)?),
            "_internalCollation" => {}
            _ => {
                let Bson::String(s) = value else {
                    return Err(Error::failed_to_parse(format!(
                        "$lookup argument '{name}: {value}' must be a string, found {value}: {}",
                        type_name(value)
                    )));
                };
                match name.as_str() {
                    "as" => as_field = Some(s.clone()),
                    "localField" => local = Some(s.clone()),
                    "foreignField" => foreign = Some(s.clone()),
                    _ => {
                        return Err(Error::failed_to_parse(format!(
                            "unknown argument to $lookup: {name}"
                        )))
                    }
                }
            }
        }
    }
    let has_from = from.is_some();
    let from = match from {
        Some(from) => from,
        None => {
            collectionless_check(pipeline.as_deref(), "$lookup")?;
            COLLECTIONLESS.to_string()
        }
    };
    let as_field = as_field
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::failed_to_parse("must specify 'as' field for a $lookup"))?;
    validate_field_path(&as_field)?;
    let local = local.filter(|s| !s.is_empty());
    let foreign = foreign.filter(|s| !s.is_empty());
    let join =
        match (local, foreign, &pipeline) {
            (Some(l), Some(f), _) => Some((l, f)),
            (None, None, Some(_)) => None,
            (_, _, Some(_)) => {
                return Err(Error::failed_to_parse(
                    "$lookup requires both or neither of 'localField' and 'foreignField' to be \
                 specified",
                ))
            }
            (_, _, None) => return Err(Error::failed_to_parse(
                "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to \
                 be specified",
            )),
        };
    if pipeline.is_none() && let_spec.is_some() {
        return Err(Error::failed_to_parse(
            "$lookup with a 'let' argument must also specify 'pipeline'",
        ));
    }
    if let Some((l, f)) = &join {
        validate_field_path(l)?;
        validate_field_path(f)?;
    }
    let let_spec = let_spec.unwrap_or_default();
    let mut let_vars = Vec::with_capacity(let_spec.len());
    for (name, value) in &let_spec {
        validate_variable_name(name)?;
        let_vars.push((name.clone(), Expr::parse(value)?));
    }
    if let Some(stages) = &pipeline {
        check_sub_stages(stages, "$lookup", ErrorCode::LookupSubPipelineStage)?;
        // Parse once now so a bad sub-pipeline fails the command, not the
        // first document. Variables get placeholder values.
        let mut vars = pctx.vars.clone();
        for (name, _) in &let_vars {
            vars.insert(name.clone(), Bson::Null);
        }
        parse_sub_pipeline(stages, vars, pctx)?;
    }
    Ok(Box::new(Lookup {
        from,
        has_from,
        as_field,
        join,
        let_vars,
        let_spec,
        pipeline,
        outer_vars: pctx.vars.clone(),
    }))
}

impl Lookup {
    /// The sub-pipeline and variables for one input document.
    fn plan_for(&self, input: &Document) -> Result<(Vec<Document>, Document)> {
        let mut vars = self.outer_vars.clone();
        for (name, expr) in &self.let_vars {
            // A missing value is bound as null: variables cannot hold
            // "missing" in a document.
            let value = expr
                .evaluate_with_vars(input, &self.outer_vars)?
                .unwrap_or(Bson::Null);
            vars.insert(name.clone(), value);
        }
        let user = self.pipeline.as_deref().unwrap_or(&[]);
        let mut stages = Vec::with_capacity(user.len() + 1);
        let mut rest = user;
        if let Some((local, foreign)) = &self.join {
            // The join $match goes after a leading $documents, as MongoDB
            // places it.
            if let Some(first) = user.first().filter(|s| s.contains_key("$documents")) {
                stages.push(first.clone());
                rest = &user[1..];
            }
            stages.push(doc! { "$match": join_predicate(input, local, foreign) });
        }
        stages.extend(rest.iter().cloned());
        Ok((stages, vars))
    }

    fn lookup_one(&self, mut input: Document, ctx: &Arc<dyn Context>) -> Result<Document> {
        let (stages, vars) = self.plan_for(&input)?;
        // The joined array is held whole: like MongoDB, stop at 100 MB
        // (`internalLookupStageIntermediateDocumentMaxSizeBytes`) rather
        // than join a whole collection into every document.
        let mut matches = Vec::new();
        let mut bytes = 0usize;
        for d in ctx.aggregate(ctx.db(), &self.from, &stages, &vars)? {
            let d = d?;
            bytes = bytes.saturating_add(doc_size(&d));
            if bytes > LOOKUP_MAX_BYTES {
                return Err(Error::new(
                    ErrorCode::LookupResultTooLarge,
                    format!(
                        "Total size of documents in {} matching pipeline's $lookup stage \
                         exceeds {LOOKUP_MAX_BYTES} bytes",
                        self.from
                    ),
                ));
            }
            matches.push(Bson::Document(d));
        }
        set_path(&mut input, &self.as_field, Bson::Array(matches));
        Ok(input)
    }
}

impl Stage for Lookup {
    fn name(&self) -> &'static str {
        "$lookup"
    }

    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let this = self.clone();
        let ctx = Arc::clone(ctx);
        Ok(Box::new(input.map(move |doc| {
            doc.and_then(|doc| this.lookup_one(doc, &ctx))
        })))
    }

    fn split(&self) -> Split {
        Split::RouterOnly
    }

    fn explain(&self) -> Document {
        let mut spec = Document::new();
        if self.has_from {
            spec.insert("from", self.from.clone());
        }
        spec.insert("as", self.as_field.clone());
        if let Some((local, foreign)) = &self.join {
            spec.insert("localField", local.clone());
            spec.insert("foreignField", foreign.clone());
        }
        if let Some(pipeline) = &self.pipeline {
            spec.insert("let", self.let_spec.clone());
            spec.insert("pipeline", to_array(pipeline));
        }
        doc! { "$lookup": spec }
    }
}

/// `{foreign: {$eq: v}}` for one local value, `{foreign: {$in: [...]}}`
/// for several, or an `$or` of `$eq`s when a value is a regex (inside
/// `$in` a regex would pattern-match strings instead of equalling
/// regexes).
fn join_predicate(input: &Document, local: &str, foreign: &str) -> Document {
    let path: Vec<&str> = local.split('.').collect();
    let mut values = Vec::new();
    if let Some((head, rest)) = path.split_first() {
        if let Some(value) = input.get(*head) {
            all_values(value, rest, &mut values);
        }
    }
    if values.is_empty() {
        // Missing local values join with null and missing foreign ones.
        values.push(Bson::Null);
    }
    if values.len() == 1 {
        let value = values.pop().unwrap_or(Bson::Null);
        return doc! { foreign: { "$eq": value } };
    }
    if values
        .iter()
        .any(|v| matches!(v, Bson::RegularExpression(_)))
    {
        let alternatives: Vec<Bson> = values
            .into_iter()
            .map(|v| Bson::Document(doc! { foreign: { "$eq": v } }))
            .collect();
        return doc! { "$or": alternatives };
    }
    doc! { foreign: { "$in": values } }
}

/// Sets a dotted path, replacing anything that is not a document on the
/// way with one (as MongoDB's `setNestedField`).
pub(super) fn set_path(doc: &mut Document, path: &str, value: Bson) {
    match path.split_once('.') {
        None => {
            doc.insert(path, value);
        }
        Some((head, rest)) => {
            if !matches!(doc.get(head), Some(Bson::Document(_))) {
                doc.insert(head, Document::new());
            }
            if let Some(Bson::Document(inner)) = doc.get_mut(head) {
                set_path(inner, rest, value);
            }
        }
    }
}

/// `from`: a collection name in this database. MongoDB 7.0 accepts the
/// `{db, coll}` form only for internal namespaces.
fn parse_from(value: &Bson) -> Result<String> {
    match value {
        Bson::String(s) => {
            if s.is_empty() || s.starts_with('.') || s.contains('\0') || s.contains('$') {
                return Err(Error::new(
                    ErrorCode::InvalidNamespace,
                    format!("invalid $lookup namespace: {s}"),
                ));
            }
            Ok(s.clone())
        }
        Bson::Document(d) => Err(Error::failed_to_parse(format!(
            "$lookup with syntax {{from: {{db:<>, coll:<>}},..}} is not supported for db: {} \
             and coll: {}",
            d.get_str("db").unwrap_or(""),
            d.get_str("coll").unwrap_or("")
        ))),
        other => Err(Error::failed_to_parse(format!(
            "$lookup 'from' field must be a string, but found {}",
            type_name(other)
        ))),
    }
}

/// A sub-pipeline argument: an array of stage documents.
pub(super) fn sub_pipeline(value: &Bson) -> Result<Vec<Document>> {
    let Bson::Array(items) = value else {
        return Err(Error::type_mismatch(format!(
            "'pipeline' option must be specified as an array, found {}",
            type_name(value)
        )));
    };
    items
        .iter()
        .map(|item| match item {
            Bson::Document(d) => Ok(d.clone()),
            _ => Err(Error::type_mismatch(
                "Each element of the 'pipeline' array must be an object",
            )),
        })
        .collect()
}

/// Without a collection, the sub-pipeline must start with `$documents`.
fn collectionless_check(pipeline: Option<&[Document]>, stage: &str) -> Result<()> {
    let Some(pipeline) = pipeline else {
        return Err(Error::failed_to_parse(
            "must specify 'pipeline' when 'from' is empty",
        ));
    };
    if pipeline
        .first()
        .is_some_and(|s| s.contains_key("$documents"))
    {
        Ok(())
    } else {
        Err(Error::failed_to_parse(format!(
            "{stage} stage without explicit collection must have a pipeline with $documents as \
             first stage"
        )))
    }
}

/// Refuses writing stages inside a `$lookup` / `$unionWith` sub-pipeline,
/// with the code MongoDB uses for each parent.
fn check_sub_stages(stages: &[Document], parent: &str, code: ErrorCode) -> Result<()> {
    for stage in stages {
        if let Some(name) = stage.keys().next() {
            if matches!(name.as_str(), "$out" | "$merge") {
                return Err(Error::new(
                    code,
                    format!("{name} is not allowed within a {parent}'s sub-pipeline"),
                ));
            }
        }
    }
    Ok(())
}

fn parse_sub_pipeline(stages: &[Document], vars: Document, pctx: &ParseContext) -> Result<()> {
    let stages: Vec<Bson> = stages.iter().cloned().map(Bson::Document).collect();
    let ctx = ParseContext {
        vars,
        nested: true,
        ..pctx.clone()
    };
    Pipeline::parse(&stages, &ctx).map(|_| ())
}

pub(super) fn to_array(stages: &[Document]) -> Bson {
    Bson::Array(stages.iter().cloned().map(Bson::Document).collect())
}

/// A field path as `as`, `localField` and `foreignField` take it.
pub(super) fn validate_field_path(path: &str) -> Result<()> {
    if path.starts_with('$') {
        return Err(Error::new(
            ErrorCode::FieldPathDollarPrefixed,
            "FieldPath field names may not start with '$'. Consider using $getField or \
             $setField.",
        ));
    }
    if path.split('.').any(str::is_empty) {
        return Err(Error::new(
            ErrorCode::FieldPathEmptyComponent,
            "FieldPath field names may not be empty strings.",
        ));
    }
    Ok(())
}

/// A user variable name (`let`): starts with a lowercase letter (or a
/// non-ASCII character), then letters, digits and `_`.
pub(super) fn validate_variable_name(name: &str) -> Result<()> {
    // The one system variable a user may set.
    if name == "CURRENT" {
        return Ok(());
    }
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return Err(Error::new(
            ErrorCode::VariableNameEmpty,
            "empty variable names are not allowed",
        ));
    };
    if first.is_ascii() && !first.is_ascii_lowercase() {
        return Err(Error::new(
            ErrorCode::VariableNameBadStart,
            format!("'{name}' starts with an invalid character for a user variable name"),
        ));
    }
    if let Some(bad) = chars.find(|c| c.is_ascii() && !(c.is_ascii_alphanumeric() || *c == '_')) {
        return Err(Error::new(
            ErrorCode::VariableNameBadCharacter,
            format!("'{name}' contains an invalid character for a variable name: '{bad}'"),
        ));
    }
    Ok(())
}

/// `$unionWith`: the input, then the other collection through its
/// pipeline.
struct UnionWith {
    coll: String,
    has_coll: bool,
    pipeline: Vec<Document>,
    vars: Document,
}

fn parse_union_with(arg: &Bson, pctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let (coll, pipeline) = match arg {
        Bson::String(s) => (Some(s.clone()), Vec::new()),
        Bson::Document(spec) => {
            let mut coll = None;
            let mut pipeline = None;
            for (name, value) in spec {
                match name.as_str() {
                    "coll" => match value {
                        Bson::String(s) => coll = Some(s.clone()),
                        other => {
                            return Err(Error::type_mismatch(format!(
                                "BSON field '$unionWith.coll' is the wrong type '{}', expected \
                                 type 'string'",
                                type_name(other)
                            )))
                        }
                    },
                    "pipeline" => pipeline = Some(sub_pipeline(value)?),
                    _ => {
                        return Err(Error::new(
                            ErrorCode::UnknownField,
                            format!("BSON field '$unionWith.{name}' is an unknown field."),
                        ))
                    }
                }
            }
            (coll, pipeline.unwrap_or_default())
        }
        other => {
            return Err(Error::failed_to_parse(format!(
                "the $unionWith stage specification must be an object or string, but found {}",
                type_name(other)
            )))
        }
    };
    let has_coll = coll.is_some();
    let coll = match coll {
        Some(c) => {
            if c.is_empty() || c.starts_with('.') || c.contains('\0') || c.contains('$') {
                return Err(Error::new(
                    ErrorCode::InvalidNamespace,
                    format!("Invalid $unionWith namespace: {c}"),
                ));
            }
            c
        }
        None => {
            collectionless_check(Some(&pipeline), "$unionWith")?;
            COLLECTIONLESS.to_string()
        }
    };
    check_sub_stages(
        &pipeline,
        "$unionWith",
        ErrorCode::UnionWithSubPipelineStage,
    )?;
    parse_sub_pipeline(&pipeline, pctx.vars.clone(), pctx)?;
    Ok(Box::new(UnionWith {
        coll,
        has_coll,
        pipeline,
        vars: pctx.vars.clone(),
    }))
}

impl Stage for UnionWith {
    fn name(&self) -> &'static str {
        "$unionWith"
    }

    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let ctx = Arc::clone(ctx);
        let coll = self.coll.clone();
        let pipeline = self.pipeline.clone();
        let vars = self.vars.clone();
        // The other collection is read only once the input is exhausted.
        let other = std::iter::once(()).flat_map(move |()| -> DocStream {
            match ctx.aggregate(ctx.db(), &coll, &pipeline, &vars) {
                Ok(stream) => stream,
                Err(e) => Box::new(std::iter::once(Err(e))),
            }
        });
        Ok(Box::new(input.chain(other)))
    }

    fn split(&self) -> Split {
        Split::RouterOnly
    }

    fn explain(&self) -> Document {
        let mut spec = Document::new();
        if self.has_coll {
            spec.insert("coll", self.coll.clone());
        }
        spec.insert("pipeline", to_array(&self.pipeline));
        doc! { "$unionWith": spec }
    }
}

#[cfg(test)]
pub(super) mod test_support {
    //! A fake [`Context`]: collections in a map; `aggregate` filters
    //! leading `$match` stages by hand (so these tests do not depend on
    //! `$match` being written) and runs the rest through
    //! [`Pipeline::parse`].

    use std::collections::HashMap;
    use std::sync::Mutex;

    use super::*;
    use crate::aggregate::{Limits, MergeSpec};
    use crate::query::filter::Filter;

    pub struct FakeContext {
        pub colls: Mutex<HashMap<String, Vec<Document>>>,
        pub merges: Mutex<Vec<(String, MergeSpec, Vec<Document>)>>,
        /// Every sub-pipeline `aggregate` was asked to run, with its vars.
        pub calls: Mutex<Vec<(String, Vec<Document>, Document)>>,
        pub limits: Limits,
    }

    impl FakeContext {
        pub fn new(colls: &[(&str, Vec<Document>)]) -> Arc<FakeContext> {
            Arc::new(FakeContext {
                colls: Mutex::new(
                    colls
                        .iter()
                        .map(|(n, d)| (format!("test.{n}"), d.clone()))
                        .collect(),
                ),
                merges: Mutex::new(Vec::new()),
                calls: Mutex::new(Vec::new()),
                limits: Limits {
                    max_blocking_bytes: crate::aggregate::DEFAULT_MAX_BLOCKING_BYTES,
                    allow_disk_use: false,
                    spill_dir: std::env::temp_dir(),
                },
            })
        }

        pub fn coll(&self, name: &str) -> Option<Vec<Document>> {
            self.colls.lock().unwrap().get(name).cloned()
        }
    }

    fn matches(filter: &Document, doc: &Document, vars: &Document) -> Result<bool> {
        if let Some(expr) = filter.get("$expr") {
            let expr = Expr::parse(expr)?;
            let value = expr.evaluate_with_vars(doc, vars)?;
            return Ok(value.as_ref().is_some_and(crate::query::expr::truthy));
        }
        Filter::parse(filter)?.try_matches(doc)
    }

    impl Context for FakeContext {
        fn db(&self) -> &str {
            "test"
        }

        fn aggregate(
            &self,
            db: &str,
            coll: &str,
            pipeline: &[Document],
            vars: &Document,
        ) -> Result<DocStream> {
            self.calls
                .lock()
                .unwrap()
                .push((coll.to_string(), pipeline.to_vec(), vars.clone()));
            let mut docs = self.coll(&format!("{db}.{coll}")).unwrap_or_default();
            let mut rest = pipeline;
            while let Some(Ok(filter)) = rest.first().map(|s| s.get_document("$match")) {
                let mut kept = Vec::new();
                for d in docs {
                    if matches(filter, &d, vars)? {
                        kept.push(d);
                    }
                }
                docs = kept;
                rest = &rest[1..];
            }
            if rest.is_empty() {
                return Ok(Box::new(docs.into_iter().map(Ok)));
            }
            let stages: Vec<Bson> = rest.iter().cloned().map(Bson::Document).collect();
            let pctx = ParseContext {
                vars: vars.clone(),
                nested: true,
                ..ParseContext::default()
            };
            let ctx: Arc<dyn Context> = Arc::new(FakeContext {
                colls: Mutex::new(self.colls.lock().unwrap().clone()),
                merges: Mutex::new(Vec::new()),
                calls: Mutex::new(Vec::new()),
                limits: self.limits.clone(),
            });
            Pipeline::parse(&stages, &pctx)?.run(Box::new(docs.into_iter().map(Ok)), &ctx)
        }

        fn replace_collection(&self, db: &str, coll: &str, docs: Vec<Document>) -> Result<()> {
            self.colls
                .lock()
                .unwrap()
                .insert(format!("{db}.{coll}"), docs);
            Ok(())
        }

        fn merge_into(
            &self,
            db: &str,
            coll: &str,
            spec: &MergeSpec,
            docs: Vec<Document>,
        ) -> Result<()> {
            self.merges
                .lock()
                .unwrap()
                .push((format!("{db}.{coll}"), spec.clone(), docs));
            Ok(())
        }

        fn limits(&self) -> &Limits {
            &self.limits
        }
    }

    /// Parses and runs `pipeline` over `input` with `ctx`.
    pub fn run(
        ctx: &Arc<FakeContext>,
        pipeline: Vec<Document>,
        input: Vec<Document>,
    ) -> Result<Vec<Document>> {
        let stages: Vec<Bson> = pipeline.into_iter().map(Bson::Document).collect();
        let pipeline = Pipeline::parse(&stages, &ParseContext::default())?;
        let ctx: Arc<dyn Context> = ctx.clone();
        pipeline
            .run(Box::new(input.into_iter().map(Ok)), &ctx)?
            .collect()
    }

    /// The error parsing `pipeline` gives.
    pub fn parse_error(pipeline: Vec<Document>) -> Error {
        let stages: Vec<Bson> = pipeline.into_iter().map(Bson::Document).collect();
        match Pipeline::parse(&stages, &ParseContext::default()) {
            Ok(_) => panic!("pipeline parsed"),
            Err(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{parse_error, run, FakeContext};
    use super::*;

    fn orders() -> Vec<Document> {
        vec![
            doc! { "_id": 1, "item": "almonds", "qty": 2 },
            doc! { "_id": 2, "item": "pecans", "qty": 1 },
            doc! { "_id": 3 },
            doc! { "_id": 4, "item": ["almonds", "bread"] },
        ]
    }

    fn inventory() -> Vec<Document> {
        vec![
            doc! { "_id": 1, "sku": "almonds", "instock": 120 },
            doc! { "_id": 2, "sku": "bread", "instock": 80 },
            doc! { "_id": 3, "sku": "cashews", "instock": 60 },
            doc! { "_id": 4, "sku": "pecans", "instock": 70 },
            doc! { "_id": 5, "sku": null },
            doc! { "_id": 6 },
        ]
    }

    fn ids(value: &Bson) -> Vec<i32> {
        match value {
            Bson::Array(items) => items
                .iter()
                .filter_map(|d| d.as_document().and_then(|d| d.get_i32("_id").ok()))
                .collect(),
            _ => panic!("not an array: {value}"),
        }
    }

    #[test]
    fn local_foreign_join() {
        let ctx = FakeContext::new(&[("inventory", inventory())]);
        let out = run(
            &ctx,
            vec![doc! { "$lookup": {
                "from": "inventory", "localField": "item", "foreignField": "sku",
                "as": "inventory_docs"
            }}],
            orders(),
        )
        .unwrap();
        assert_eq!(out.len(), 4);
        assert_eq!(ids(out[0].get("inventory_docs").unwrap()), vec![1]);
        assert_eq!(ids(out[1].get("inventory_docs").unwrap()), vec![4]);
        // A missing local field matches null and missing foreign fields.
        assert_eq!(ids(out[2].get("inventory_docs").unwrap()), vec![5, 6]);
        // An array local value matches any of its elements.
        assert_eq!(ids(out[3].get("inventory_docs").unwrap()), vec![1, 2]);
    }

    #[test]
    fn joined_documents_stop_at_100_mb() {
        let big: Vec<Document> = (0..11)
            .map(|i| doc! { "_id": i, "k": 1, "s": "x".repeat(10 * 1024 * 1024) })
            .collect();
        let ctx = FakeContext::new(&[("big", big)]);
        let e = run(
            &ctx,
            vec![doc! { "$lookup": {
                "from": "big", "localField": "k", "foreignField": "k", "as": "all"
            }}],
            vec![doc! { "_id": 1, "k": 1 }],
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::LookupResultTooLarge);
        assert_eq!(
            e.message,
            "Total size of documents in big matching pipeline's $lookup stage exceeds \
             104857600 bytes"
        );
    }

    #[test]
    fn join_predicate_shapes() {
        let d = doc! { "a": 1, "b": [1, 2], "r": [Bson::RegularExpression(bson::Regex {
        pattern: "x".try_into().unwrap(), options: "".try_into().unwrap() }), "y"] };
        assert_eq!(join_predicate(&d, "a", "f"), doc! { "f": { "$eq": 1 } });
        assert_eq!(
            join_predicate(&d, "b", "f"),
            doc! { "f": { "$in": [1, 2] } }
        );
        assert_eq!(join_predicate(&d, "zz", "f"), doc! { "f": { "$eq": null } });
        let pred = join_predicate(&d, "r", "f");
        assert_eq!(pred.get_array("$or").map(Vec::len).ok(), Some(2));
        // Paths through arrays of documents collect every value.
        let nested = doc! { "x": [{ "y": 1 }, { "y": [2, 3] }, 4] };
        assert_eq!(
            join_predicate(&nested, "x.y", "f"),
            doc! { "f": { "$in": [1, 2, 3] } }
        );
    }

    #[test]
    fn as_field_nested_path_replaces_scalars() {
        let ctx = FakeContext::new(&[("inventory", inventory())]);
        let out = run(
            &ctx,
            vec![doc! { "$lookup": {
                "from": "inventory", "localField": "item", "foreignField": "sku",
                "as": "item.found"
            }}],
            vec![doc! { "_id": 1, "item": "almonds" }],
        )
        .unwrap();
        let found = out[0].get_document("item").unwrap().get("found").unwrap();
        assert_eq!(ids(found), vec![1]);
    }

    #[test]
    fn let_pipeline_form_binds_variables() {
        let ctx = FakeContext::new(&[("inventory", inventory())]);
        let out = run(
            &ctx,
            vec![doc! { "$lookup": {
                "from": "inventory",
                "let": { "want": "$item", "n": { "$multiply": ["$qty", 50] } },
                "pipeline": [{ "$match": { "$expr": { "$and": [
                    { "$eq": ["$sku", "$$want"] },
                    { "$gte": ["$instock", "$$n"] },
                ] } } }],
                "as": "stock"
            }}],
            vec![
                doc! { "_id": 1, "item": "almonds", "qty": 2 },
                doc! { "_id": 2, "item": "pecans", "qty": 2 },
            ],
        )
        .unwrap();
        assert_eq!(ids(out[0].get("stock").unwrap()), vec![1]);
        assert_eq!(ids(out[1].get("stock").unwrap()), Vec::<i32>::new());
        let calls = ctx.calls.lock().unwrap();
        assert_eq!(calls[0].2, doc! { "want": "almonds", "n": 100 });
    }

    #[test]
    fn combined_form_puts_join_match_first() {
        let ctx = FakeContext::new(&[("inventory", inventory())]);
        let out = run(
            &ctx,
            vec![doc! { "$lookup": {
                "from": "inventory", "localField": "item", "foreignField": "sku",
                "let": { "min": "$qty" },
                "pipeline": [{ "$match": { "$expr": { "$gt": ["$instock", { "$multiply": ["$$min", 50] }] } } }],
                "as": "stock"
            }}],
            vec![
                doc! { "_id": 1, "item": ["almonds", "bread"], "qty": 2 },
            ],
        )
        .unwrap();
        assert_eq!(ids(out[0].get("stock").unwrap()), vec![1]);
        let calls = ctx.calls.lock().unwrap();
        assert_eq!(
            calls[0].1[0],
            doc! { "$match": { "sku": { "$in": ["almonds", "bread"] } } }
        );
    }

    #[test]
    fn lookup_explain_is_mongodb_shape() {
        let stages = vec![Bson::Document(doc! { "$lookup": {
            "from": "inv", "localField": "a", "foreignField": "b", "as": "c"
        }})];
        let p = Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        assert_eq!(
            p.stages[0].explain(),
            doc! { "$lookup": { "from": "inv", "as": "c", "localField": "a", "foreignField": "b" } }
        );
        assert!(matches!(p.stages[0].split(), Split::RouterOnly));
        let stages = vec![Bson::Document(doc! { "$lookup": {
            "from": "inv", "pipeline": [], "as": "c"
        }})];
        let p = Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        assert_eq!(
            p.stages[0].explain(),
            doc! { "$lookup": { "from": "inv", "as": "c", "let": {}, "pipeline": [] } }
        );
    }

    #[test]
    fn lookup_parse_errors() {
        let cases: Vec<(Document, i32, &str)> = vec![
            (doc! { "$lookup": 1 }, 9, "the $lookup specification must be an Object"),
            (
                doc! { "$lookup": { "from": "x", "localField": "a", "foreignField": "b" } },
                9,
                "must specify 'as' field for a $lookup",
            ),
            (
                doc! { "$lookup": { "from": "x", "localField": "a", "as": "b" } },
                9,
                "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be specified",
            ),
            (
                doc! { "$lookup": { "from": "x", "localField": "a", "pipeline": [], "as": "b" } },
                9,
                "$lookup requires both or neither of 'localField' and 'foreignField' to be specified",
            ),
            (
                doc! { "$lookup": { "from": "x", "localField": "a", "foreignField": "b", "as": "c", "let": {} } },
                9,
                "$lookup with a 'let' argument must also specify 'pipeline'",
            ),
            (
                doc! { "$lookup": { "from": "x", "pipeline": [], "as": "c", "bogus": "y" } },
                9,
                "unknown argument to $lookup: bogus",
            ),
            (
                doc! { "$lookup": { "from": 1, "pipeline": [], "as": "c" } },
                9,
                "$lookup 'from' field must be a string, but found int",
            ),
            (
                doc! { "$lookup": { "pipeline": [], "as": "c" } },
                9,
                "$lookup stage without explicit collection must have a pipeline with $documents as first stage",
            ),
            (
                doc! { "$lookup": { "from": "x", "pipeline": [{ "$out": "y" }], "as": "c" } },
                51047,
                "$out is not allowed within a $lookup's sub-pipeline",
            ),
            (
                doc! { "$lookup": { "from": "x", "pipeline": [], "let": { "Bad": 1 }, "as": "c" } },
                16867,
                "'Bad' starts with an invalid character for a user variable name",
            ),
            (
                doc! { "$lookup": { "from": "x", "pipeline": [], "as": "$c" } },
                16410,
                "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
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
    }

    #[test]
    fn union_with_appends_other_collection() {
        let ctx = FakeContext::new(&[("inventory", inventory())]);
        let out = run(
            &ctx,
            vec![doc! { "$unionWith": "inventory" }],
            vec![doc! { "_id": 100 }],
        )
        .unwrap();
        assert_eq!(out.len(), 7);
        assert_eq!(out[0], doc! { "_id": 100 });
        let out = run(
            &ctx,
            vec![doc! { "$unionWith": {
                "coll": "inventory",
                "pipeline": [{ "$match": { "instock": { "$gte": 80 } } }]
            }}],
            vec![doc! { "_id": 100 }],
        )
        .unwrap();
        let got: Vec<i32> = out.iter().filter_map(|d| d.get_i32("_id").ok()).collect();
        assert_eq!(got, vec![100, 1, 2]);
        // A missing collection reads as empty.
        let out = run(&ctx, vec![doc! { "$unionWith": "nope" }], vec![doc! {}]).unwrap();
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn union_with_explain_and_errors() {
        let stages = vec![Bson::Document(doc! { "$unionWith": "b" })];
        let p = Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        assert_eq!(
            p.stages[0].explain(),
            doc! { "$unionWith": { "coll": "b", "pipeline": [] } }
        );
        let cases: Vec<(Document, i32)> = vec![
            (doc! { "$unionWith": 1 }, 9),
            (doc! { "$unionWith": { "coll": "b", "x": 1 } }, 40415),
            (doc! { "$unionWith": { "coll": 1 } }, 14),
            (
                doc! { "$unionWith": { "coll": "b", "pipeline": [{ "$merge": "c" }] } },
                31441,
            ),
            (doc! { "$unionWith": { "pipeline": [] } }, 9),
            (doc! { "$unionWith": "" }, 73),
        ];
        for (stage, code) in cases {
            assert_eq!(
                parse_error(vec![stage.clone()]).code.number(),
                code,
                "{stage}"
            );
        }
        let e = parse_error(vec![
            doc! { "$unionWith": { "coll": "b", "pipeline": [{ "$out": "c" }] } },
        ]);
        assert_eq!(
            e.message,
            "$out is not allowed within a $unionWith's sub-pipeline"
        );
    }
}
