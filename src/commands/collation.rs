//! The collation an operation uses: its own `collation` option, else its
//! collection's default (`create` with `collation`), else the simple one.

use std::sync::Arc;

use bson::{Bson, Document};

use crate::error::Result;
use crate::query::collation::Collation;
use crate::router::{Namespace, SharedRouter};

/// The collation of an operation on `ns` that gave `given` (a command's or
/// a statement's `collation` field); `None` is the simple collation.
pub(crate) fn effective(
    router: &SharedRouter,
    ns: &Namespace,
    given: Option<&Bson>,
) -> Result<Option<Arc<Collation>>> {
    match given {
        Some(value) => Collation::parse(value),
        None => collection_default(router, ns),
    }
}

/// The default collation of collection `ns`, if it has one.
pub(crate) fn collection_default(
    router: &SharedRouter,
    ns: &Namespace,
) -> Result<Option<Arc<Collation>>> {
    let Some(coll) = router.collection(ns) else {
        return Ok(None);
    };
    match coll.options().document.get("collation") {
        Some(spec) => Collation::parse(spec),
        None => Ok(None),
    }
}

/// `create`'s `collation` as the catalog keeps it: the full document, or
/// nothing for the simple collation.
pub(crate) fn normalise_create_option(options: &mut Document) -> Result<()> {
    if let Some(value) = options.remove("collation") {
        if let Some(collation) = Collation::parse(&value)? {
            options.insert("collation", collation.spec().clone());
        }
    }
    Ok(())
}
