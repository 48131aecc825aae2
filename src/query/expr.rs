//! Aggregation expressions (API skeleton).

use bson::{Bson, Document};

use crate::error::Result;

/// A parsed aggregation expression.
#[derive(Debug, Clone)]
pub struct Expr {}

impl Expr {
    pub fn parse(expr: &Bson) -> Result<Expr> {
        let _ = expr;
        Ok(Expr {})
    }

    pub fn evaluate(&self, root: &Document) -> Result<Bson> {
        let _ = root;
        Ok(Bson::Null)
    }
}
