//! `collMod`: changes a collection's validator, validation level and
//! action, a capped collection's bounds (`cappedSize`, `cappedMax`), a
//! time-series or clustered collection's expiry (`expireAfterSeconds`)
//! and granularity (`timeseries`), or one index's options (`index`); or
//! a view's definition (`viewOn` and `pipeline` together).

use bson::{doc, Bson, Document};

use super::args::{check_fields, collection_namespace};
use super::request::Request;
use crate::bail;
use crate::error::Result;
use crate::router::validation::VALIDATION_OPTIONS;
use crate::router::Namespace;

/// The `changeStreamPreAndPostImages` option of `create` or `collMod`,
/// checked: `{enabled: <bool>}`.
pub(super) fn images_option(command: &str, body: &Document) -> Result<Option<Document>> {
    let Some(value) = body.get("changeStreamPreAndPostImages") else {
        return Ok(None);
    };
    let field = format!("{command}.changeStreamPreAndPostImages");
    let Bson::Document(spec) = value else {
        bail!(
            TypeMismatch,
            "BSON field '{field}' is the wrong type '{}', expected type 'object'",
            crate::query::compare::type_name(value)
        );
    };
    if let Some(unknown) = spec.keys().find(|k| k.as_str() != "enabled") {
        bail!(
            UnknownField,
            "BSON field '{field}.{unknown}' is an unknown field."
        );
    }
    match spec.get("enabled") {
        Some(Bson::Boolean(enabled)) => Ok(Some(doc! {"enabled": enabled})),
        Some(other) => bail!(
            TypeMismatch,
            "BSON field '{field}.enabled' is the wrong type '{}', expected type 'bool'",
            crate::query::compare::type_name(other)
        ),
        None => bail!(
            MissingField,
            "BSON field '{field}.enabled' is missing but a required field"
        ),
    }
}

pub async fn run(req: &Request<'_>) -> Result<Document> {
    let ns = collection_namespace("collMod", &req.db, &req.body)?;
    let mut known = vec![
        "index",
        "viewOn",
        "pipeline",
        "cappedSize",
        "cappedMax",
        "expireAfterSeconds",
        "timeseries",
        "changeStreamPreAndPostImages",
    ];
    known.extend(VALIDATION_OPTIONS);
    check_fields(req, &known)?;
    let images = images_option("collMod", &req.body)?;
    let router = &req.state.router;
    if router.collection(&ns).is_none() {
        if super::views::find(router, &ns).await?.is_some() {
            return modify_view(req, &ns).await;
        }
        bail!(NamespaceNotFound, "ns does not exist: {ns}");
    }
    if req.body.contains_key("viewOn") || req.body.contains_key("pipeline") {
        bail!(
            InvalidOptions,
            "option 'viewOn' and 'pipeline' are only supported on a view"
        );
    }
    let mut reply = Document::new();
    // The validation options first: a malformed one changes nothing.
    let changes: Document = VALIDATION_OPTIONS
        .iter()
        .filter_map(|o| req.body.get(*o).map(|v| (o.to_string(), v.clone())))
        .collect();
    if !changes.is_empty() || images.is_some() {
        let changed = router
            .modify_options(&ns, |options| {
                let mut options = options.clone();
                options.extend(changes.clone());
                match &images {
                    Some(spec) if matches!(spec.get_bool("enabled"), Ok(true)) => {
                        options.insert("changeStreamPreAndPostImages", spec.clone());
                    }
                    Some(_) => {
                        options.remove("changeStreamPreAndPostImages");
                    }
                    None => {}
                }
                options
            })
            .await?;
        if !changed {
            bail!(NamespaceNotFound, "ns does not exist: {ns}");
        }
    }
    let Some(coll) = router.collection(&ns) else {
        bail!(NamespaceNotFound, "ns does not exist: {ns}");
    };
    // Checked on the options of now; applied to those of the change.
    let current = coll.options().document.clone();
    let capped = super::capped::modified_options(&req.body, &current)?;
    let kinds = super::timeseries::modified_options(&req.body, &current)?;
    if capped.is_some() || kinds.is_some() {
        let body = &req.body;
        router
            .modify_options(&ns, |options| {
                let options = super::capped::modified_options(body, options)
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| options.clone());
                super::timeseries::modified_options(body, &options)
                    .ok()
                    .flatten()
                    .unwrap_or(options)
            })
            .await?;
    }
    if let Some(spec) = req.body.get("index") {
        reply.extend(super::indexes::modify_index(req, &ns, spec).await?);
    }
    Ok(reply)
}

/// `collMod` of a view: a new `viewOn` and `pipeline`, both required.
async fn modify_view(req: &Request<'_>, ns: &Namespace) -> Result<Document> {
    if let Some(option) = req
        .body
        .keys()
        .skip(1)
        .find(|k| ["index"].iter().chain(&VALIDATION_OPTIONS).any(|o| o == k))
    {
        bail!(
            InvalidOptions,
            "option '{option}' is not supported on a view"
        );
    }
    if !req.body.contains_key("viewOn") || !req.body.contains_key("pipeline") {
        bail!(
            InvalidOptions,
            "must specify both 'viewOn' and 'pipeline' when applying collMod to a view"
        );
    }
    let router = &req.state.router;
    // `collMod` cannot change a view's collation: the new definition
    // keeps it (and must agree with the view it now reads).
    let mut body = req.body.clone();
    if let Some(Some(collation)) = super::views::find(router, ns).await?.map(|v| v.collation) {
        body.insert("collation", collation);
    }
    let view = super::views::define(router, "collMod", ns, &body).await?;
    super::views::replace(router, &view).await?;
    Ok(Document::new())
}
