//! Projections (API skeleton).

use bson::Document;

use crate::error::Result;
use crate::query::filter::MatchDetails;

/// A parsed `find` projection.
#[derive(Debug, Clone)]
pub struct Projection {}

impl Projection {
    pub fn parse(spec: &Document) -> Result<Projection> {
        let _ = spec;
        Ok(Projection {})
    }

    /// Projects `doc`; `details` carries the array position for `field.$`.
    pub fn apply(&self, doc: &Document, details: &MatchDetails) -> Result<Document> {
        let _ = details;
        Ok(doc.clone())
    }
}
