//! Views: read-only collections defined by an aggregation pipeline over
//! another collection or view (`create` with `viewOn` and `pipeline`).
//!
//! As in MongoDB, a database's view definitions are documents of its
//! `system.views` collection, `{_id: "db.view", viewOn, pipeline}`, so
//! they are stored, synced and dropped with the database like any other
//! data, and every gateway of a fleet sees the same ones. A namespace
//! that is a collection is never looked up there: only a read of a
//! namespace that holds no collection costs one point read.
//!
//! A read of a view runs as a mongos runs it: the view's pipeline, and
//! those of the views it is defined on, are resolved down to a collection
//! (at most 20 levels: 165) and the read becomes an aggregation over that
//! collection, the view's pipeline first. `find` appends `$match`,
//! `$sort`, `$skip`, `$limit` and `$project`; `count` and `distinct`
//! run the pipeline with their query and count or collect. Writes and
//! index changes on a view fail with 166 `CommandNotSupportedOnView`.
//!
//! A view has its own default collation (`create` with `collation`; it
//! never inherits its collection's), which every read of it uses: a read
//! may name the same collation but no other (167), and a view on a view
//! has the same collation as the view it reads.

use bson::{doc, Bson, Document};

use super::request::Request;
use crate::aggregate::{ParseContext, Pipeline};
use crate::bail;
use crate::error::{Error, ErrorCode, Result};
use crate::query::collation::Collation;
use crate::query::filter::Filter;
use crate::router::{DocumentValidation, FindSpec, Namespace, Router};

/// The collection of a database that holds its view definitions.
pub const SYSTEM_VIEWS: &str = "system.views";

/// The deepest chain of views on views MongoDB resolves.
const MAX_VIEW_DEPTH: usize = 20;

/// A view as stored in `system.views`.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub ns: Namespace,
    /// The collection or view it reads, in the same database.
    pub view_on: String,
    pub pipeline: Vec<Bson>,
    /// Its default collation, normalised (`None`: simple).
    pub collation: Option<Document>,
}

impl View {
    fn from_stored(db: &str, stored: &Document) -> Option<View> {
        let ns = Namespace::parse(stored.get_str("_id").ok()?).ok()?;
        if ns.db != db {
            return None;
        }
        Some(View {
            ns,
            view_on: stored.get_str("viewOn").ok()?.to_string(),
            pipeline: stored.get_array("pipeline").ok()?.clone(),
            collation: stored.get_document("collation").ok().cloned(),
        })
    }

    fn to_stored(&self) -> Document {
        let mut stored = doc! {"_id": self.ns.full(), "viewOn": &self.view_on, "pipeline": self.pipeline.clone()};
        if let Some(collation) = &self.collation {
            stored.insert("collation", collation.clone());
        }
        stored
    }

    /// What `listCollections` shows of it.
    pub fn info(&self) -> Document {
        let mut options = doc! {"viewOn": &self.view_on, "pipeline": self.pipeline.clone()};
        if let Some(collation) = &self.collation {
            options.insert("collation", collation.clone());
        }
        doc! {
            "name": &self.ns.coll,
            "type": "view",
            "options": options,
            "info": {"readOnly": true},
        }
    }
}

/// A view resolved down to the collection it reads.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub view: Namespace,
    pub collection: Namespace,
    /// The pipelines of every view on the way, innermost first.
    pub pipeline: Vec<Bson>,
    /// The view's default collation, normalised (`None`: simple).
    pub collation: Option<Document>,
}

fn views_ns(db: &str) -> Result<Namespace> {
    Namespace::new(db, SYSTEM_VIEWS)
}

/// The definition of view `ns`, if there is one.
pub async fn find(router: &Router, ns: &Namespace) -> Result<Option<View>> {
    let views = views_ns(&ns.db)?;
    if router.collection(&views).is_none() || ns.coll.starts_with("system.") {
        return Ok(None);
    }
    let spec = FindSpec {
        filter: Some(Filter::parse(&doc! {"_id": ns.full()})?),
        limit: Some(1),
        ..FindSpec::default()
    };
    let stored = router
        .find(&views, spec, |found| found.documents().next().transpose())
        .await?;
    Ok(stored.and_then(|d| View::from_stored(&ns.db, &d)))
}

/// Every view of database `db`, by name.
pub async fn list(router: &Router, db: &str) -> Result<Vec<View>> {
    let views = views_ns(db)?;
    if router.collection(&views).is_none() {
        return Ok(Vec::new());
    }
    let spec = FindSpec {
        sort: Some(crate::query::sort::SortSpec::parse(&doc! {"_id": 1})?),
        ..FindSpec::default()
    };
    let stored: Vec<Document> = router
        .find(&views, spec, |found| found.documents().collect())
        .await?;
    Ok(stored
        .iter()
        .filter_map(|d| View::from_stored(db, d))
        .collect())
}

/// Resolves `ns` when it names a view rather than a collection.
pub async fn resolve(router: &Router, ns: &Namespace) -> Result<Option<Resolved>> {
    if router.collection(ns).is_some() {
        return Ok(None);
    }
    let Some(view) = find(router, ns).await? else {
        return Ok(None);
    };
    let collation = view.collation;
    let mut pipeline = view.pipeline;
    let mut on = Namespace::new(&ns.db, &view.view_on)?;
    let mut depth = 1;
    while router.collection(&on).is_none() {
        let Some(inner) = find(router, &on).await? else {
            break;
        };
        depth += 1;
        if depth > MAX_VIEW_DEPTH {
            bail!(
                ViewDepthLimitExceeded,
                "View depth too deep or view cycle detected; maximum depth is {MAX_VIEW_DEPTH}"
            );
        }
        let mut outer = inner.pipeline;
        outer.extend(pipeline);
        pipeline = outer;
        on = Namespace::new(&ns.db, &inner.view_on)?;
    }
    Ok(Some(Resolved {
        view: ns.clone(),
        collection: on,
        pipeline,
        collation,
    }))
}

/// Fails with 166 when `ns` is a view: the command cannot run on one.
pub async fn refuse(router: &Router, ns: &Namespace) -> Result<()> {
    if router.collection(ns).is_none() && find(router, ns).await?.is_some() {
        bail!(
            CommandNotSupportedOnView,
            "Namespace {ns} is a view, not a collection"
        );
    }
    Ok(())
}

/// Checks a view's definition as `create` and `collMod` get it, and
/// returns it: `viewOn` a collection name in the same database,
/// `pipeline` an array of stages that parse and that neither write
/// (`$out`, `$merge`) nor make their own input, without a cycle.
pub async fn define(
    router: &Router,
    command: &str,
    ns: &Namespace,
    body: &Document,
) -> Result<View> {
    let view_on = match body.get("viewOn") {
        Some(Bson::String(s)) => s.clone(),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '{command}.viewOn' is the wrong type '{}', expected type 'string'",
            crate::query::compare::type_name(other)
        ),
        None => bail!(
            InvalidOptions,
            "'pipeline' requires 'viewOn' to also be specified"
        ),
    };
    let on = Namespace::new(&ns.db, &view_on)
        .map_err(|_| Error::new(ErrorCode::InvalidNamespace, "invalid name for 'viewOn'"))?;
    let pipeline = match body.get("pipeline") {
        None => Vec::new(),
        Some(Bson::Array(stages)) => stages.clone(),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '{command}.pipeline' is the wrong type '{}', expected type 'array'",
            crate::query::compare::type_name(other)
        ),
    };
    for stage in &pipeline {
        let Bson::Document(stage) = stage else {
            bail!(
                TypeMismatch,
                "BSON field '{command}.pipeline' is the wrong type, expected type 'object'"
            );
        };
        if let Some(name @ ("$out" | "$merge" | "$documents" | "$changeStream")) =
            stage.keys().next().map(String::as_str)
        {
            bail!(
                OptionNotSupportedOnView,
                "{name} cannot be used in a view definition"
            );
        }
    }
    Pipeline::parse(&pipeline, &ParseContext::default())?;
    let collation = match body.get("collation") {
        Some(given) => Collation::parse(given)?.map(|c| c.spec().clone()),
        None => None,
    };
    // A view may not read itself, directly or through others, and reads
    // a view of its own collation.
    let mut next = on.clone();
    for _ in 0..MAX_VIEW_DEPTH {
        if next == *ns {
            bail!(
                GraphContainsCycle,
                "View cycle detected: {ns} reads itself through {on}"
            );
        }
        match find(router, &next).await? {
            Some(v) => {
                if next == on && v.collation != collation {
                    bail!(
                        OptionNotSupportedOnView,
                        "View {ns} has conflicting collation with view {on}"
                    );
                }
                next = Namespace::new(&ns.db, &v.view_on)?
            }
            None => {
                return Ok(View {
                    ns: ns.clone(),
                    view_on,
                    pipeline,
                    collation,
                })
            }
        }
    }
    bail!(
        ViewDepthLimitExceeded,
        "View depth too deep or view cycle detected; maximum depth is {MAX_VIEW_DEPTH}"
    )
}

/// Stores a new view; the caller checked nothing holds its name.
pub async fn create(router: &Router, view: &View) -> Result<()> {
    let bytes = view
        .to_stored()
        .to_vec()
        .map_err(|e| Error::internal(format!("cannot encode a view: {e}")))?;
    let outcome = router
        .insert(
            &views_ns(&view.ns.db)?,
            vec![bytes],
            true,
            DocumentValidation::Bypass,
        )
        .await?;
    match outcome.errors.into_iter().next() {
        Some((_, e)) if e.code == ErrorCode::DuplicateKey => {
            bail!(NamespaceExists, "Namespace already exists: {}", view.ns)
        }
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// Replaces a view's definition (`collMod`).
pub async fn replace(router: &Router, view: &View) -> Result<()> {
    let stmt = crate::router::UpdateStatement {
        filter: Filter::parse(&doc! {"_id": view.ns.full()})?,
        update: crate::aggregate::parse_update(&Bson::Document(view.to_stored()), None)?,
        multi: false,
        upsert: false,
        sort: None,
        return_documents: false,
        validation: DocumentValidation::Bypass,
    };
    router.update(&views_ns(&view.ns.db)?, &stmt).await?;
    Ok(())
}

/// Drops view `ns`; false when there was none.
pub async fn drop(router: &Router, ns: &Namespace) -> Result<bool> {
    let views = views_ns(&ns.db)?;
    if router.collection(&views).is_none() {
        return Ok(false);
    }
    let filter = Filter::parse(&doc! {"_id": ns.full()})?;
    let (n, _) = router.delete(&views, &filter, false, None).await?;
    Ok(n > 0)
}

/// The collation a read of `view` uses: the view's. A read that names
/// another fails with 167.
pub fn read_collation(given: Option<&Bson>, view: &Resolved) -> Result<Document> {
    if let Some(given) = given {
        let given = Collation::parse(given)?.map(|c| c.spec().clone());
        if given != view.collation {
            bail!(
                OptionNotSupportedOnView,
                "Cannot override a view's default collation"
            );
        }
    }
    Ok(view
        .collation
        .clone()
        .unwrap_or_else(|| doc! {"locale": "simple"}))
}

/// The `aggregate` command a read of a view becomes: the view's
/// pipeline, then `stages`, over the collection it reads, with the
/// fields of the read that an aggregation takes too, and the view's
/// collation.
pub fn aggregation(
    req: &Request<'_>,
    view: &Resolved,
    stages: impl IntoIterator<Item = Document>,
    batch_size: Option<i64>,
) -> Result<Document> {
    let mut pipeline = view.pipeline.clone();
    pipeline.extend(stages.into_iter().map(Bson::Document));
    let cursor = match batch_size {
        Some(n) => doc! {"batchSize": n},
        None => Document::new(),
    };
    let mut body = doc! {
        "aggregate": &view.collection.coll,
        "pipeline": pipeline,
        "cursor": cursor,
    };
    for field in ["maxTimeMS", "allowDiskUse", "let", "comment"] {
        if let Some(v) = req.body.get(field) {
            body.insert(field, v.clone());
        }
    }
    body.insert(
        "collation",
        read_collation(req.body.get("collation"), view)?,
    );
    Ok(body)
}
