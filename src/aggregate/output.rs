//! Stages that write: `$out`, `$merge`.
//!
//! Both must be the last stage, run only at the router, collect their
//! input and hand it to the [`Context`] in one call (`replace_collection`,
//! `merge_into`); they output nothing. The write happens when the output
//! stream is first polled.

use std::sync::Arc;

use bson::{doc, oid::ObjectId, Bson, Document};

use super::lookup::sub_pipeline;
use super::{Context, DocStream, MergeSpec, ParseContext, Split, Stage, StageParser, WhenMatched};
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::type_name;
use crate::query::path::get_in_documents;

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] = &[("$merge", parse_merge), ("$out", parse_out)];

/// Databases a pipeline may not write into.
const INTERNAL_DBS: &[&str] = &["admin", "config", "local"];

/// Refuses a writing stage where MongoDB does: inside `$facet`, inside a
/// sub-pipeline, or anywhere but last.
fn check_position(stage: &str, pctx: &ParseContext) -> Result<()> {
    if pctx.in_facet {
        return Err(Error::new(
            ErrorCode::StageNotAllowedInFacet,
            format!("{stage} is not allowed to be used within a $facet stage"),
        ));
    }
    if pctx.nested {
        return Err(Error::new(
            ErrorCode::LookupSubPipelineStage,
            format!("{stage} is not allowed within a $lookup's sub-pipeline"),
        ));
    }
    if !pctx.last {
        return Err(Error::new(
            ErrorCode::StageMustBeLast,
            format!("{stage} can only be the final stage in the pipeline"),
        ));
    }
    Ok(())
}

fn valid_collection_name(coll: &str) -> bool {
    !coll.is_empty() && !coll.starts_with('.') && !coll.contains('\0') && !coll.contains('$')
}

fn valid_db_name(db: &str) -> bool {
    !db.is_empty() && !db.contains(['/', '\\', '.', ' ', '"', '$', '\0'])
}

/// Gives a document without `_id` a new ObjectId, first, as an insert
/// does.
fn with_id(doc: Document) -> Document {
    if doc.contains_key("_id") {
        return doc;
    }
    let mut out = doc! { "_id": ObjectId::new() };
    out.extend(doc);
    out
}

/// The document as written: without the `$text` score it carried.
fn without_score(mut doc: Document) -> Document {
    crate::query::text::strip_score(&mut doc);
    doc
}

/// A stream that, when first polled, collects `input` and passes it to
/// `write`, then ends (or yields the error).
fn write_on_first_poll<F>(input: DocStream, write: F) -> DocStream
where
    F: FnOnce(Vec<Document>) -> Result<()> + Send + 'static,
{
    let mut pending = Some((input, write));
    Box::new(std::iter::from_fn(move || {
        let (input, write) = pending.take()?;
        let docs = match input.collect::<Result<Vec<_>>>() {
            Ok(docs) => docs,
            Err(e) => return Some(Err(e)),
        };
        write(docs).err().map(Err)
    }))
}

/// `{db, coll}` as explain shows a target. The pipeline's database is not
/// known at parse time (`ParseContext` does not carry it), so a target
/// named by collection alone shows `coll` only.
fn namespace_doc(db: &str, coll: &str) -> Document {
    let mut d = Document::new();
    if !db.is_empty() {
        d.insert("db", db);
    }
    d.insert("coll", coll);
    d
}

/// `$out`.
struct Out {
    db: String,
    coll: String,
}

fn parse_out(arg: &Bson, pctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let (db, coll) = match arg {
        Bson::String(coll) => (None, coll.clone()),
        Bson::Document(spec) => {
            let mut db = None;
            let mut coll = None;
            for (name, value) in spec {
                let slot = match name.as_str() {
                    "db" => &mut db,
                    "coll" => &mut coll,
                    "timeseries" => {
                        return Err(Error::new(
                            ErrorCode::CommandNotSupported,
                            "$out to a time-series collection is not supported",
                        ))
                    }
                    _ => {
                        return Err(Error::new(
                            ErrorCode::UnknownField,
                            format!("BSON field '$out.{name}' is an unknown field."),
                        ))
                    }
                };
                let Bson::String(s) = value else {
                    return Err(Error::type_mismatch(format!(
                        "BSON field '$out.{name}' is the wrong type '{}', expected type 'string'",
                        type_name(value)
                    )));
                };
                *slot = Some(s.clone());
            }
            let missing = |field: &str| {
                Error::new(
                    ErrorCode::MissingField,
                    format!("BSON field '$out.{field}' is missing but a required field"),
                )
            };
            let db = db.ok_or_else(|| missing("db"))?;
            let coll = coll.ok_or_else(|| missing("coll"))?;
            (Some(db), coll)
        }
        other => {
            return Err(Error::new(
                ErrorCode::StageOutWrongType,
                format!(
                    "$out only supports a string or object argument, but found {}",
                    type_name(other)
                ),
            ))
        }
    };
    check_position("$out", pctx)?;
    // The database is resolved when the stage runs, from the context.
    let db = db.unwrap_or_default();
    if !valid_collection_name(&coll) || !(db.is_empty() || valid_db_name(&db)) {
        return Err(Error::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid $out target namespace, {db}.{coll}"),
        ));
    }
    if coll.starts_with("system.") {
        return Err(Error::new(
            ErrorCode::OutToSpecialCollection,
            format!("Can't $out to special collection: {coll}"),
        ));
    }
    if INTERNAL_DBS.contains(&db.as_str()) {
        return Err(Error::new(
            ErrorCode::OutToInternalDatabase,
            format!("Can't $out to internal database: {db}"),
        ));
    }
    Ok(Box::new(Out { db, coll }))
}

impl Stage for Out {
    fn name(&self) -> &'static str {
        "$out"
    }

    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let ctx = Arc::clone(ctx);
        let db = self.db.clone();
        let coll = self.coll.clone();
        Ok(write_on_first_poll(input, move |docs| {
            let db = if db.is_empty() { ctx.db() } else { &db };
            let docs = docs.into_iter().map(without_score).map(with_id).collect();
            ctx.replace_collection(db, &coll, docs)
        }))
    }

    fn split(&self) -> Split {
        Split::RouterOnly
    }

    fn explain(&self) -> Document {
        doc! { "$out": namespace_doc(&self.db, &self.coll) }
    }
}

/// `$merge`.
struct Merge {
    /// Empty when `into` named only a collection (the pipeline's db).
    db: String,
    coll: String,
    spec: MergeSpec,
}

fn parse_merge(arg: &Bson, pctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let mut into = None;
    let mut on = None;
    let mut let_vars = None;
    let mut when_matched = None;
    let mut when_not_matched = None;
    match arg {
        Bson::String(_) => into = Some(parse_into(arg)?),
        Bson::Document(spec) => {
            for (name, value) in spec {
                match name.as_str() {
                    "into" => into = Some(parse_into(value)?),
                    "on" => on = Some(parse_on(value)?),
                    "let" => {
                        let Bson::Document(d) = value else {
                            return Err(Error::type_mismatch(format!(
                                "BSON field '$merge.let' is the wrong type '{}', expected type \
                                 'object'",
                                type_name(value)
                            )));
                        };
                        for var in d.keys() {
                            super::lookup::validate_variable_name(var)?;
                        }
                        let_vars = Some(d.clone());
                    }
                    "whenMatched" => when_matched = Some(parse_when_matched(value)?),
                    "whenNotMatched" => {
                        let Bson::String(s) = value else {
                            return Err(Error::type_mismatch(format!(
                                "BSON field '$merge.whenNotMatched' is the wrong type '{}', \
                                 expected type 'string'",
                                type_name(value)
                            )));
                        };
                        if !matches!(s.as_str(), "insert" | "discard" | "fail") {
                            return Err(Error::bad_value(format!(
                                "Enumeration value '{s}' for field '$merge.whenNotMatched' is \
                                 not a valid value."
                            )));
                        }
                        when_not_matched = Some(s.clone());
                    }
                    // Set by mongos for sharded targets; nothing to check here.
                    "targetCollectionVersion" => {}
                    _ => {
                        return Err(Error::new(
                            ErrorCode::UnknownField,
                            format!("BSON field '$merge.{name}' is an unknown field."),
                        ))
                    }
                }
            }
        }
        other => {
            return Err(Error::new(
                ErrorCode::StageMergeWrongType,
                format!(
                    "$merge only supports a string or object argument, not {}",
                    type_name(other)
                ),
            ))
        }
    }
    let (db, coll) = into.ok_or_else(|| {
        Error::new(
            ErrorCode::MissingField,
            "BSON field '$merge.into' is missing but a required field",
        )
    })?;
    let when_matched = when_matched.unwrap_or(WhenMatched::Merge);
    let when_not_matched = when_not_matched.unwrap_or_else(|| "insert".to_string());
    let supported = match when_matched {
        WhenMatched::KeepExisting | WhenMatched::Fail => when_not_matched == "insert",
        _ => true,
    };
    if !supported {
        return Err(Error::new(
            ErrorCode::MergeModesUnsupported,
            format!(
                "Combination of $merge modes 'whenMatched: {}' and 'whenNotMatched: \
                 {when_not_matched}' is not supported",
                when_matched_name(&when_matched)
            ),
        ));
    }
    if !valid_collection_name(&coll) || !(db.is_empty() || valid_db_name(&db)) {
        return Err(Error::new(
            ErrorCode::InvalidNamespace,
            format!("Invalid $merge target namespace: '{db}.{coll}'"),
        ));
    }
    if coll.starts_with("system.") {
        return Err(Error::new(
            ErrorCode::MergeToSpecialCollection,
            format!("Cannot $merge to special collection: {coll}"),
        ));
    }
    if INTERNAL_DBS.contains(&db.as_str()) {
        return Err(Error::new(
            ErrorCode::MergeToInternalDatabase,
            format!("Cannot $merge to internal database: {db}"),
        ));
    }
    let vars = if matches!(when_matched, WhenMatched::Pipeline(_)) {
        let mut vars = let_vars.unwrap_or_else(|| doc! { "new": "$$ROOT" });
        match vars.get("new") {
            None if when_not_matched == "insert" => {
                vars.insert("new", "$$ROOT");
            }
            Some(Bson::String(s)) if s == "$$ROOT" => {}
            None => {}
            Some(_) => {
                return Err(Error::new(
                    ErrorCode::MergeLetReservedNew,
                    "'let' may not define a value for the reserved 'new' variable other than \
                     '$$ROOT'",
                ))
            }
        }
        vars
    } else {
        if let_vars.is_some() {
            return Err(Error::new(
                ErrorCode::MergeLetWithoutPipeline,
                format!(
                    "Cannot use 'let' variables with 'whenMatched: {}' mode",
                    when_matched_name(&when_matched)
                ),
            ));
        }
        Document::new()
    };
    check_position("$merge", pctx)?;
    Ok(Box::new(Merge {
        db,
        coll,
        spec: MergeSpec {
            on: on.unwrap_or_else(|| vec!["_id".to_string()]),
            when_matched,
            when_not_matched,
            vars,
        },
    }))
}

fn when_matched_name(mode: &WhenMatched) -> &'static str {
    match mode {
        WhenMatched::Replace => "replace",
        WhenMatched::KeepExisting => "keepExisting",
        WhenMatched::Merge => "merge",
        WhenMatched::Fail => "fail",
        WhenMatched::Pipeline(_) => "pipeline",
    }
}

/// `into`: a collection name, or `{db, coll}`; an empty db means the
/// pipeline's own.
fn parse_into(value: &Bson) -> Result<(String, String)> {
    match value {
        Bson::String(s) if s.is_empty() => Err(Error::new(
            ErrorCode::MergeIntoEmpty,
            "$merge 'into' field cannot be an empty string",
        )),
        Bson::String(s) => Ok((String::new(), s.clone())),
        Bson::Document(d) => {
            let mut db = String::new();
            let mut coll = None;
            for (name, value) in d {
                let slot = match name.as_str() {
                    "db" => &mut db,
                    "coll" => coll.get_or_insert_with(String::new),
                    _ => {
                        return Err(Error::new(
                            ErrorCode::UnknownField,
                            format!("BSON field 'into.{name}' is an unknown field."),
                        ))
                    }
                };
                match value {
                    Bson::String(s) => *slot = s.clone(),
                    Bson::Null | Bson::Undefined => {}
                    other => {
                        return Err(Error::type_mismatch(format!(
                            "BSON field 'into.{name}' is the wrong type '{}', expected type \
                             'string'",
                            type_name(other)
                        )))
                    }
                }
            }
            match coll {
                Some(coll) if !coll.is_empty() => Ok((db, coll)),
                _ => Err(Error::new(
                    ErrorCode::MergeIntoCollEmpty,
                    "$merge 'into' field must specify a 'coll' that is not empty, null or \
                     undefined",
                )),
            }
        }
        other => Err(Error::new(
            ErrorCode::MergeIntoWrongType,
            format!(
                "$merge 'into' field  must be either a string or an object, but found {}",
                type_name(other)
            ),
        )),
    }
}

fn parse_on(value: &Bson) -> Result<Vec<String>> {
    let fields = match value {
        Bson::String(s) => vec![s.clone()],
        Bson::Array(items) => items
            .iter()
            .map(|item| match item {
                Bson::String(s) => Ok(s.clone()),
                other => Err(Error::new(
                    ErrorCode::MergeOnElementNotString,
                    format!(
                        "$merge 'on' array elements must be strings, but found {}",
                        type_name(other)
                    ),
                )),
            })
            .collect::<Result<Vec<_>>>()?,
        other => {
            return Err(Error::new(
                ErrorCode::MergeOnWrongType,
                format!(
                    "$merge 'on' field  must be either a string or an array of strings, but \
                     found {}",
                    type_name(other)
                ),
            ))
        }
    };
    if fields.is_empty() {
        return Err(Error::new(
            ErrorCode::MergeOnEmpty,
            "If explicitly specifying $merge 'on', must include at least one field",
        ));
    }
    for field in &fields {
        super::lookup::validate_field_path(field)?;
    }
    Ok(fields)
}

fn parse_when_matched(value: &Bson) -> Result<WhenMatched> {
    match value {
        Bson::String(s) => match s.as_str() {
            "replace" => Ok(WhenMatched::Replace),
            "keepExisting" => Ok(WhenMatched::KeepExisting),
            "merge" => Ok(WhenMatched::Merge),
            "fail" => Ok(WhenMatched::Fail),
            _ => Err(Error::bad_value(format!(
                "Enumeration value '{s}' for field 'whenMatched' is not a valid value."
            ))),
        },
        Bson::Array(_) => Ok(WhenMatched::Pipeline(sub_pipeline(value)?)),
        other => Err(Error::new(
            ErrorCode::MergeWhenMatchedWrongType,
            format!(
                "$merge 'whenMatched' field  must be either a string or an array, but found {}",
                type_name(other)
            ),
        )),
    }
}

/// Every output document needs its `on` fields, none an array.
fn check_on_fields(doc: &Document, on: &[String]) -> Result<()> {
    for field in on {
        match get_in_documents(doc, field.split('.')) {
            None | Some(Bson::Null | Bson::Undefined | Bson::Array(_)) => {
                return Err(Error::new(
                    ErrorCode::MergeOnFieldMissing,
                    "$merge write error: 'on' field cannot be missing, null, undefined or an \
                     array",
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

impl Stage for Merge {
    fn name(&self) -> &'static str {
        "$merge"
    }

    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let ctx = Arc::clone(ctx);
        let db = self.db.clone();
        let coll = self.coll.clone();
        let spec = self.spec.clone();
        Ok(write_on_first_poll(input, move |docs| {
            let on_id = spec.on.iter().any(|f| f == "_id");
            let docs = docs
                .into_iter()
                .map(|d| {
                    let d = without_score(d);
                    let d = if on_id { with_id(d) } else { d };
                    check_on_fields(&d, &spec.on).map(|()| d)
                })
                .collect::<Result<Vec<_>>>()?;
            let db = if db.is_empty() { ctx.db() } else { &db };
            ctx.merge_into(db, &coll, &spec, docs)
        }))
    }

    fn split(&self) -> Split {
        Split::RouterOnly
    }

    fn explain(&self) -> Document {
        let mut spec = doc! { "into": namespace_doc(&self.db, &self.coll) };
        let on = &self.spec.on;
        if on.len() == 1 {
            spec.insert("on", on[0].clone());
        } else {
            spec.insert("on", on.clone());
        }
        if matches!(self.spec.when_matched, WhenMatched::Pipeline(_)) {
            spec.insert("let", self.spec.vars.clone());
        }
        match &self.spec.when_matched {
            WhenMatched::Pipeline(stages) => {
                spec.insert("whenMatched", super::lookup::to_array(stages));
            }
            mode => {
                spec.insert("whenMatched", when_matched_name(mode));
            }
        }
        spec.insert("whenNotMatched", self.spec.when_not_matched.clone());
        doc! { "$merge": spec }
    }
}

#[cfg(test)]
mod tests {
    use super::super::lookup::test_support::{parse_error, run, FakeContext};
    use super::*;

    #[test]
    fn out_replaces_collection_and_outputs_nothing() {
        let ctx = FakeContext::new(&[("target", vec![doc! { "_id": "old" }])]);
        let out = run(
            &ctx,
            vec![doc! { "$out": "target" }],
            vec![doc! { "_id": 1 }, doc! { "a": 2 }],
        )
        .unwrap();
        assert!(out.is_empty());
        let written = ctx.coll("test.target").unwrap();
        assert_eq!(written.len(), 2);
        assert_eq!(written[0], doc! { "_id": 1 });
        // A document without _id gets one, first.
        assert!(matches!(written[1].get("_id"), Some(Bson::ObjectId(_))));
        assert_eq!(written[1].keys().next().map(String::as_str), Some("_id"));

        run(
            &ctx,
            vec![doc! { "$out": { "db": "other", "coll": "t2" } }],
            vec![doc! { "_id": 1 }],
        )
        .unwrap();
        assert_eq!(ctx.coll("other.t2").unwrap(), vec![doc! { "_id": 1 }]);
    }

    #[test]
    fn out_errors() {
        let cases: Vec<(Vec<Document>, i32, &str)> = vec![
            (
                vec![doc! { "$out": "a" }, doc! { "$out": "b" }],
                40601,
                "$out can only be the final stage in the pipeline",
            ),
            (
                vec![doc! { "$out": 1 }],
                16990,
                "$out only supports a string or object argument, but found int",
            ),
            (
                vec![doc! { "$out": { "coll": "a" } }],
                40414,
                "BSON field '$out.db' is missing but a required field",
            ),
            (
                vec![doc! { "$out": { "db": "a", "coll": "b", "x": 1 } }],
                40415,
                "BSON field '$out.x' is an unknown field.",
            ),
            (
                vec![doc! { "$out": { "db": "a", "coll": 1 } }],
                14,
                "BSON field '$out.coll' is the wrong type 'int', expected type 'string'",
            ),
            (
                vec![doc! { "$out": "" }],
                73,
                "Invalid $out target namespace, .",
            ),
            (
                vec![doc! { "$out": { "db": "admin", "coll": "b" } }],
                31321,
                "Can't $out to internal database: admin",
            ),
        ];
        for (pipeline, code, message) in cases {
            let e = parse_error(pipeline.clone());
            assert_eq!(
                (e.code.number(), e.message.as_str()),
                (code, message),
                "{pipeline:?}"
            );
        }
    }

    #[test]
    fn out_explain() {
        let stages = vec![Bson::Document(doc! { "$out": { "db": "d", "coll": "c" } })];
        let p = super::super::Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        assert_eq!(
            p.stages[0].explain(),
            doc! { "$out": { "db": "d", "coll": "c" } }
        );
        assert!(matches!(p.stages[0].split(), Split::RouterOnly));
    }

    #[test]
    fn merge_passes_spec_and_documents() {
        let ctx = FakeContext::new(&[]);
        let out = run(
            &ctx,
            vec![doc! { "$merge": {
                "into": { "db": "reports", "coll": "totals" },
                "on": ["region", "year"],
                "whenMatched": "replace",
                "whenNotMatched": "discard",
            }}],
            vec![doc! { "region": "eu", "year": 2024, "n": 1 }],
        )
        .unwrap();
        assert!(out.is_empty());
        let merges = ctx.merges.lock().unwrap();
        let (ns, spec, docs) = &merges[0];
        assert_eq!(ns, "reports.totals");
        assert_eq!(
            spec,
            &MergeSpec {
                on: vec!["region".into(), "year".into()],
                when_matched: WhenMatched::Replace,
                when_not_matched: "discard".into(),
                vars: Document::new(),
            }
        );
        // No _id is added when `on` does not include it.
        assert_eq!(docs, &vec![doc! { "region": "eu", "year": 2024, "n": 1 }]);
    }

    #[test]
    fn merge_defaults_and_pipeline_let() {
        let ctx = FakeContext::new(&[]);
        run(&ctx, vec![doc! { "$merge": "t" }], vec![doc! { "a": 1 }]).unwrap();
        run(
            &ctx,
            vec![doc! { "$merge": {
                "into": "t",
                "whenMatched": [{ "$set": { "n": { "$add": ["$n", "$$new.n"] } } }],
            }}],
            vec![doc! { "_id": 1, "n": 1 }],
        )
        .unwrap();
        let merges = ctx.merges.lock().unwrap();
        let (ns, spec, docs) = &merges[0];
        assert_eq!(ns, "test.t");
        assert_eq!(spec.on, vec!["_id".to_string()]);
        assert_eq!(spec.when_matched, WhenMatched::Merge);
        assert_eq!(spec.when_not_matched, "insert");
        assert!(matches!(docs[0].get("_id"), Some(Bson::ObjectId(_))));
        let (_, spec, _) = &merges[1];
        assert_eq!(spec.vars, doc! { "new": "$$ROOT" });
        assert!(matches!(spec.when_matched, WhenMatched::Pipeline(ref p) if p.len() == 1));
    }

    #[test]
    fn merge_on_fields_must_be_present() {
        let ctx = FakeContext::new(&[]);
        let e = run(
            &ctx,
            vec![doc! { "$merge": { "into": "t", "on": "k" } }],
            vec![doc! { "_id": 1 }],
        )
        .unwrap_err();
        assert_eq!(e.code.number(), 51132);
        assert!(ctx.merges.lock().unwrap().is_empty());
    }

    #[test]
    fn merge_explain() {
        let stages = vec![Bson::Document(doc! { "$merge": {
            "into": { "db": "d", "coll": "c" }, "whenMatched": "fail"
        }})];
        let p = super::super::Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        assert_eq!(
            p.stages[0].explain(),
            doc! { "$merge": {
                "into": { "db": "d", "coll": "c" },
                "on": "_id",
                "whenMatched": "fail",
                "whenNotMatched": "insert",
            }}
        );
    }

    #[test]
    fn merge_errors() {
        let cases: Vec<(Vec<Document>, i32, &str)> = vec![
            (
                vec![doc! { "$merge": "a" }, doc! { "$out": "b" }],
                40601,
                "$merge can only be the final stage in the pipeline",
            ),
            (
                vec![doc! { "$merge": 1 }],
                51182,
                "$merge only supports a string or object argument, not int",
            ),
            (
                vec![doc! { "$merge": {} }],
                40414,
                "BSON field '$merge.into' is missing but a required field",
            ),
            (
                vec![doc! { "$merge": { "into": 1 } }],
                51178,
                "$merge 'into' field  must be either a string or an object, but found int",
            ),
            (
                vec![doc! { "$merge": { "into": "" } }],
                5786800,
                "$merge 'into' field cannot be an empty string",
            ),
            (
                vec![doc! { "$merge": { "into": { "db": "x" } } }],
                5786801,
                "$merge 'into' field must specify a 'coll' that is not empty, null or undefined",
            ),
            (
                vec![doc! { "$merge": { "into": "a", "on": 1 } }],
                51186,
                "$merge 'on' field  must be either a string or an array of strings, but found int",
            ),
            (
                vec![doc! { "$merge": { "into": "a", "on": [1] } }],
                51134,
                "$merge 'on' array elements must be strings, but found int",
            ),
            (
                vec![doc! { "$merge": { "into": "a", "on": [] } }],
                51187,
                "If explicitly specifying $merge 'on', must include at least one field",
            ),
            (
                vec![doc! { "$merge": { "into": "a", "whenMatched": 1 } }],
                51191,
                "$merge 'whenMatched' field  must be either a string or an array, but found int",
            ),
            (
                vec![doc! { "$merge": { "into": "a", "whenMatched": "pipeline" } }],
                2,
                "Enumeration value 'pipeline' for field 'whenMatched' is not a valid value.",
            ),
            (
                vec![doc! { "$merge": { "into": "a", "whenNotMatched": "x" } }],
                2,
                "Enumeration value 'x' for field '$merge.whenNotMatched' is not a valid value.",
            ),
            (
                vec![doc! { "$merge": { "into": "a", "whenMatched": "fail", "whenNotMatched": "discard" } }],
                51189,
                "Combination of $merge modes 'whenMatched: fail' and 'whenNotMatched: discard' is not supported",
            ),
            (
                vec![doc! { "$merge": { "into": "a", "let": { "x": 1 } } }],
                51199,
                "Cannot use 'let' variables with 'whenMatched: merge' mode",
            ),
            (
                vec![doc! { "$merge": { "into": "a", "let": { "new": 1 }, "whenMatched": [] } }],
                51273,
                "'let' may not define a value for the reserved 'new' variable other than '$$ROOT'",
            ),
            (
                vec![doc! { "$merge": { "into": "a", "bogus": 1 } }],
                40415,
                "BSON field '$merge.bogus' is an unknown field.",
            ),
            (
                vec![doc! { "$merge": { "into": { "db": "config", "coll": "a" } } }],
                31320,
                "Cannot $merge to internal database: config",
            ),
        ];
        for (pipeline, code, message) in cases {
            let e = parse_error(pipeline.clone());
            assert_eq!(
                (e.code.number(), e.message.as_str()),
                (code, message),
                "{pipeline:?}"
            );
        }
    }
}
