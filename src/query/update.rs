//! Update documents (API skeleton).

use bson::{Bson, Document};

use crate::error::Result;
use crate::query::filter::MatchDetails;

/// A parsed update: a replacement document or update operators.
#[derive(Debug, Clone)]
pub struct Update {}

/// Per-application context.
#[derive(Debug, Clone, Default)]
pub struct ApplyContext {
    /// What the query matched, for the positional `$` operator.
    pub details: MatchDetails,
    /// True when the update builds a new upserted document
    /// (`$setOnInsert` applies only then).
    pub inserting: bool,
}

impl Update {
    /// Parses `u` (a document; pipelines come with aggregation) and the
    /// optional `arrayFilters`.
    pub fn parse(u: &Bson, array_filters: Option<&[Document]>) -> Result<Update> {
        let _ = (u, array_filters);
        Ok(Update {})
    }

    pub fn is_replacement(&self) -> bool {
        false
    }

    /// Applies the update to `doc`, returning the new document. Changing
    /// `_id` is an ImmutableField error.
    pub fn apply(&self, doc: &Document, ctx: &ApplyContext) -> Result<Document> {
        let _ = ctx;
        Ok(doc.clone())
    }

    /// The document an upsert inserts, starting from the filter's seed.
    pub fn upsert_document(&self, seed: Document) -> Result<Document> {
        Ok(seed)
    }
}
