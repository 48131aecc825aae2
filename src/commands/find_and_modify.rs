//! `findAndModify`: update or remove the first document matching `query`
//! (in `sort` order) and return it, before or after (`new`) the change.

use bson::{doc, Bson, Document};

use super::args::{bool_or, collection_namespace, opt_document};
use super::request::Request;
use crate::aggregate::parse_update;
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::{Filter, MatchDetails};
use crate::query::projection::Projection;
use crate::query::sort::SortSpec;
use crate::router::UpdateStatement;

pub async fn run(req: &Request<'_>) -> Result<Document> {
    super::args::check_fields(
        req,
        &[
            "query",
            "sort",
            "remove",
            "update",
            "new",
            "fields",
            "upsert",
            "bypassDocumentValidation",
            "collation",
            "arrayFilters",
            "hint",
            "let",
        ],
    )?;
    let cmd = req.name.as_str();
    let b = &req.body;
    let ns = collection_namespace(cmd, &req.db, b)?;
    super::views::refuse(req.router(), &ns).await?;
    // MongoDB 7.0 serves a time-series collection through a view.
    if let Some(coll) = req.router().collection(&ns) {
        if coll.options().timeseries.is_some() {
            return Err(Error::new(
                ErrorCode::CommandNotSupportedOnView,
                format!("Namespace {ns} is a view, not a collection"),
            ));
        }
    }
    let vars = super::args::let_variables(cmd, b)?;
    let b = &super::args::bind_in_statement(b, &vars, "query", "update");
    let collation = super::collation::effective(req.router(), &ns, b.get("collation"))?;
    let filter = Filter::parse_collated(
        opt_document(cmd, b, "query")?.unwrap_or(&Document::new()),
        collation.as_ref(),
    )?;
    let sort = match opt_document(cmd, b, "sort")? {
        Some(s) if !s.is_empty() => Some(SortSpec::parse(s)?.with_collation(collation.clone())),
        _ => None,
    };
    let fields = match opt_document(cmd, b, "fields")? {
        Some(p) if !p.is_empty() => Some(Projection::parse(p)?),
        _ => None,
    };
    let remove = bool_or(cmd, b, "remove", false)?;
    let new = bool_or(cmd, b, "new", false)?;
    let upsert = bool_or(cmd, b, "upsert", false)?;
    let update = b.get("update");
    let project = |d: Option<Document>| -> Result<Bson> {
        match (d, &fields) {
            (None, _) => Ok(Bson::Null),
            (Some(d), Some(p)) => Ok(Bson::Document(p.apply(&d, &MatchDetails::default())?)),
            (Some(d), None) => Ok(Bson::Document(d)),
        }
    };
    match (remove, update) {
        (true, Some(_)) => Err(Error::failed_to_parse(
            "Cannot specify both an update and remove=true",
        )),
        (true, None) => {
            if upsert || new {
                return Err(Error::failed_to_parse(
                    "Cannot specify both upsert=true and remove=true, or new=true and remove=true",
                ));
            }
            let (n, doc) = req
                .router()
                .delete(&ns, &filter, false, sort.as_ref())
                .await?;
            Ok(doc! {
                "lastErrorObject": {"n": n as i32},
                "value": project(doc)?,
            })
        }
        (false, None) => Err(Error::failed_to_parse(
            "Either an update or remove=true must be specified",
        )),
        (false, Some(u)) => {
            let array_filters = match b.get("arrayFilters") {
                Some(Bson::Array(items)) => Some(
                    items
                        .iter()
                        .filter_map(|f| f.as_document().cloned())
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            };
            let stmt = UpdateStatement {
                filter,
                update: parse_update(u, array_filters.as_deref())?,
                multi: false,
                upsert,
                sort,
                return_documents: true,
                validation: super::args::document_validation(cmd, b)?,
            };
            let outcome = req.router().update(&ns, &stmt).await?;
            let upserted = outcome.upserted_id.is_some();
            let mut last = doc! {
                "n": if outcome.matched > 0 || upserted { 1 } else { 0 },
                "updatedExisting": outcome.matched > 0,
            };
            if let Some(id) = outcome.upserted_id {
                last.insert("upserted", id);
            }
            let value = if new { outcome.after } else { outcome.before };
            Ok(doc! {"lastErrorObject": last, "value": project(value)?})
        }
    }
}
