//! Pipeline-style updates (`u: [{$set: …}, …]`): the aggregate layer's
//! entry point for parsing an update, so that `query::update`, which sits
//! below this layer, checks the stages and this layer runs them.

use std::sync::Arc;

use bson::{Bson, Document};

use crate::bail;
use crate::error::Result;
use crate::query::update::{PipelineRunner, Update};

use super::{local_context, ParseContext, Pipeline};

/// Parses an update's `u` and `arrayFilters`; a pipeline's stages are parsed
/// here and now, so a bad stage is refused before any document is read.
pub fn parse_update(u: &Bson, array_filters: Option<&[Document]>) -> Result<Update> {
    Update::parse_with(u, array_filters, &compile)
}

fn compile(stages: &[Bson]) -> Result<Arc<dyn PipelineRunner>> {
    let pipeline = Pipeline::parse(stages, &ParseContext::default())?;
    Ok(Arc::new(UpdatePipeline(pipeline)))
}

/// A parsed pipeline run over one document at a time, with no I/O.
struct UpdatePipeline(Pipeline);

impl PipelineRunner for UpdatePipeline {
    fn run(&self, doc: Document) -> Result<Document> {
        let ctx = local_context();
        let mut out = self.0.run(Box::new(std::iter::once(Ok(doc))), &ctx)?;
        let Some(result) = out.next().transpose()? else {
            bail!(BadValue, "the update pipeline produced no document");
        };
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use bson::{bson, doc};

    use super::*;
    use crate::error::ErrorCode;
    use crate::query::update::ApplyContext;

    fn code_of<T: std::fmt::Debug>(result: Result<T>) -> (i32, String) {
        match result {
            Ok(v) => panic!("expected an error, got {v:?}"),
            Err(e) => (e.code.number(), e.message),
        }
    }

    #[test]
    fn pipelines_run_their_stages_and_bad_types_are_refused() {
        let update = parse_update(
            &bson!([{"$set": {"b": {"$add": ["$a", 1]}}}, {"$unset": "a"}]),
            None,
        )
        .unwrap();
        let out = update
            .apply(&doc! {"_id": 1, "a": 4}, &ApplyContext::default())
            .unwrap();
        assert_eq!(out, doc! {"_id": 1, "b": 5});
        let (code, msg) = code_of(parse_update(&bson!([{"$match": {"a": 1}}]), None));
        assert_eq!(code, ErrorCode::InvalidOptions.number());
        assert_eq!(msg, "$match is not allowed to be used within an update");
        let update = parse_update(&bson!([{"$set": {"_id": 2}}]), None).unwrap();
        let (code, _) = code_of(update.apply(&doc! {"_id": 1}, &ApplyContext::default()));
        assert_eq!(code, ErrorCode::ImmutableField.number());
        let (code, _) = code_of(parse_update(&Bson::Int32(1), None));
        assert_eq!(code, 9);
    }

    #[test]
    fn a_bad_stage_is_refused_when_parsed() {
        let (code, _) = code_of(parse_update(&bson!([{"$set": {"b": {"$nope": 1}}}]), None));
        assert_eq!(code, ErrorCode::InvalidPipelineOperator.number());
        let (code, _) = code_of(
            parse_update(&bson!([{"$set": {"_id": 2}}]), None)
                .and_then(|u| u.upsert_document(doc! {"_id": 1})),
        );
        assert_eq!(code, ErrorCode::ImmutableField.number());
    }
}
