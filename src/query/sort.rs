//! Sort specifications (API skeleton).

use std::cmp::Ordering;

use bson::Document;

use crate::error::Result;

/// A parsed sort specification such as `{a: 1, b: -1}`.
#[derive(Debug, Clone)]
pub struct SortSpec {}

impl SortSpec {
    pub fn parse(spec: &Document) -> Result<SortSpec> {
        let _ = spec;
        Ok(SortSpec {})
    }

    pub fn compare(&self, a: &Document, b: &Document) -> Ordering {
        let _ = (a, b);
        Ordering::Equal
    }
}
