//! A collection's name, `db.collection`, checked the way MongoDB checks
//! it. Every layer names collections with it, so it lives at the bottom.

use crate::error::Result;
use crate::{bail, err};

/// A validated `db.collection` namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace {
    pub db: String,
    pub coll: String,
}

impl Namespace {
    pub fn new(db: &str, coll: &str) -> Result<Namespace> {
        validate_db_name(db)?;
        if coll.is_empty() {
            bail!(InvalidNamespace, "Invalid namespace specified '{db}.'");
        }
        if coll.contains('\0') || coll.contains('$') {
            bail!(
                InvalidNamespace,
                "Invalid collection name: '{coll}': collection names must not contain '$' or null characters"
            );
        }
        if db.len() + 1 + coll.len() > 255 {
            bail!(
                InvalidNamespace,
                "Fully qualified namespace is too long: {db}.{coll}"
            );
        }
        Ok(Namespace {
            db: db.to_string(),
            coll: coll.to_string(),
        })
    }

    /// Parses `"db.coll"`.
    pub fn parse(full: &str) -> Result<Namespace> {
        match full.split_once('.') {
            Some((db, coll)) => Namespace::new(db, coll),
            None => Err(err!(
                InvalidNamespace,
                "Invalid namespace specified '{full}'"
            )),
        }
    }

    pub fn full(&self) -> String {
        format!("{}.{}", self.db, self.coll)
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.db, self.coll)
    }
}

/// Checks a database name the way MongoDB does.
pub fn validate_db_name(db: &str) -> Result<()> {
    if db.is_empty() {
        bail!(InvalidNamespace, "Invalid empty database name");
    }
    if db.len() >= 64 {
        bail!(InvalidNamespace, "db name is too long: {db}");
    }
    if db
        .chars()
        .any(|c| matches!(c, '/' | '\\' | '.' | ' ' | '"' | '$' | '\0'))
    {
        bail!(InvalidNamespace, "Invalid database name: '{db}'");
    }
    Ok(())
}
