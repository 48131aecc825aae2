//! `explain` of `find`, `count`, `distinct` and `aggregate`: each command
//! parses the query it would run (its own `parse`), the router plans it,
//! and [`super::explain_render`] shows the plan as a mongos does.

use bson::{Bson, Document};

use super::args::{collection_namespace, opt_document};
use super::explain_render::{self, Explain, Kind, Verbosity};
use super::request::Request;
use super::{aggregate, count, find};
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::Filter;
use crate::router::FindSpec;
use crate::{bail, err};

pub async fn run(req: &Request<'_>) -> Result<Document> {
    let inner = match req.body.get("explain") {
        Some(Bson::Document(d)) => d.clone(),
        Some(_) => bail!(
            TypeMismatch,
            "BSON field 'explain.explain' is the wrong type, expected type 'object'"
        ),
        None => bail!(FailedToParse, "explain needs a command to explain"),
    };
    let verbosity = match req.body.get("verbosity") {
        None => Verbosity::ExecutionStats,
        Some(Bson::String(v)) => match v.as_str() {
            "queryPlanner" => Verbosity::QueryPlanner,
            "executionStats" | "allPlansExecution" => Verbosity::ExecutionStats,
            other => bail!(
                BadValue,
                "verbosity string must be one of {{'queryPlanner', 'executionStats', 'allPlansExecution'}}, not '{other}'"
            ),
        },
        Some(_) => bail!(
            TypeMismatch,
            "BSON field 'explain.verbosity' is the wrong type, expected type 'string'"
        ),
    };
    let explain = parse_explained(&req.state.router, &req.db, inner)?;
    explain_render::explain(req, explain, verbosity).await
}

/// The read the explained command would run, parsed as that command
/// parses it.
fn parse_explained(
    router: &crate::router::SharedRouter,
    db: &str,
    inner: Document,
) -> Result<Explain> {
    let name = inner
        .keys()
        .next()
        .cloned()
        .ok_or_else(|| err!(FailedToParse, "explain needs a command to explain"))?;
    // The collation the explained command would compare strings by.
    let collation = match name.as_str() {
        "find" | "count" | "distinct" => {
            let ns = collection_namespace(&name, db, &inner)?;
            super::collation::effective(router, &ns, inner.get("collation"))?
        }
        _ => None,
    };
    let (kind, ns, spec) = match name.as_str() {
        "find" => {
            let f = find::parse_collated(db, &inner, collation.as_ref())?;
            (Kind::Find, f.ns, f.spec)
        }
        "count" => {
            let c = count::parse_collated(db, &inner, collation.as_ref())?;
            (Kind::Count, c.ns, c.spec)
        }
        "distinct" => (
            Kind::Distinct,
            collection_namespace("distinct", db, &inner)?,
            FindSpec {
                filter: opt_document("distinct", &inner, "query")?
                    .filter(|q| !q.is_empty())
                    .map(|q| Filter::parse_collated(q, collation.as_ref()))
                    .transpose()?,
                ..FindSpec::default()
            },
        ),
        "aggregate" => return aggregate::parse_explained(db, inner),
        other => {
            return Err(Error::new(
                ErrorCode::CommandNotSupported,
                format!(
                "explain of '{other}' is not supported: explain find, count, distinct or aggregate"
            ),
            ))
        }
    };
    Ok(Explain {
        kind,
        ns,
        spec,
        command: inner,
        split: None,
    })
}
