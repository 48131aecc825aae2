//! Query filters (API skeleton).

use bson::{Bson, Document};

use crate::error::Result;

/// A parsed query filter.
#[derive(Debug, Clone)]
pub struct Filter {}

/// What a successful match found, for the positional `$` operators.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MatchDetails {
    pub matched: bool,
    /// The index of the array element that satisfied the filter, for `$`.
    pub array_position: Option<usize>,
}

impl Filter {
    pub fn parse(filter: &Document) -> Result<Filter> {
        let _ = filter;
        Ok(Filter {})
    }

    pub fn matches(&self, doc: &Document) -> bool {
        self.matches_with_details(doc).matched
    }

    pub fn matches_with_details(&self, doc: &Document) -> MatchDetails {
        let _ = doc;
        MatchDetails { matched: true, array_position: None }
    }

    /// The values `path` must equal (from `{path: v}`, `$eq` or `$in` at the
    /// top level or under `$and`), or `None` when the filter does not pin it.
    pub fn equality_values(&self, path: &str) -> Option<Vec<Bson>> {
        let _ = path;
        None
    }

    /// The document an upsert starts from: the filter's equality conditions.
    pub fn upsert_seed(&self) -> Result<Document> {
        Ok(Document::new())
    }
}
