//! `count`: the number of documents matching `query`, after `skip` and
//! `limit`.

use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::args::{collection_namespace, opt_document, opt_i64, opt_non_negative};
use super::request::Request;
use crate::error::Result;
use crate::query::collation::Collation;
use crate::query::filter::Filter;
use crate::router::{FindSpec, Namespace};

/// A parsed `count`: the read it runs, as a `find` without sort.
pub(crate) struct Count {
    pub ns: Namespace,
    pub spec: FindSpec,
}

/// Parses a `count` whose strings compare by `collation` (`None`: simple).
pub(crate) fn parse_collated(
    db: &str,
    b: &Document,
    collation: Option<&Arc<Collation>>,
) -> Result<Count> {
    let ns = collection_namespace("count", db, b)?;
    let filter = opt_document("count", b, "query")?
        .filter(|q| !q.is_empty())
        .map(|q| Filter::parse_collated(q, collation))
        .transpose()?;
    let skip = opt_non_negative("count", b, "skip")?.unwrap_or(0);
    // A negative limit counts like its absolute value, as in MongoDB.
    let limit = opt_i64("count", b, "limit")?
        .filter(|&l| l != 0)
        .map(|l| l.unsigned_abs());
    Ok(Count {
        ns,
        spec: FindSpec {
            filter,
            skip,
            limit,
            ..FindSpec::default()
        },
    })
}

pub async fn run(req: &Request<'_>) -> Result<Document> {
    super::args::check_fields(
        req,
        &["query", "limit", "skip", "hint", "collation", "fields"],
    )?;
    let ns = collection_namespace("count", &req.db, &req.body)?;
    let collation = super::collation::effective(&req.state.router, &ns, req.body.get("collation"))?;
    let Count { ns, spec } = parse_collated(&req.db, &req.body, collation.as_ref())?;
    let router = req.state.router.clone();
    if let Some(view) = super::views::resolve(&router, &ns).await? {
        let mut stages = Vec::new();
        if let Some(q) = opt_document("count", &req.body, "query")?.filter(|q| !q.is_empty()) {
            stages.push(doc! {"$match": q.clone()});
        }
        if spec.skip > 0 {
            stages.push(doc! {"$skip": spec.skip as i64});
        }
        if let Some(limit) = spec.limit {
            stages.push(doc! {"$limit": limit as i64});
        }
        stages.push(doc! {"$count": "n"});
        let counted =
            super::aggregate::read_view(req, &view, stages, |mut docs| docs.next().transpose())
                .await?;
        let n = counted
            .and_then(|d| d.get("n").cloned())
            .unwrap_or(Bson::Int32(0));
        return Ok(doc! {"n": n});
    }
    let matching = router.count(&ns, spec.filter.as_ref()).await?;
    let n = matching
        .saturating_sub(spec.skip)
        .min(spec.limit.unwrap_or(u64::MAX));
    Ok(doc! {"n": n as i64})
}
