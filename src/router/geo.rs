//! `$near`, `$nearSphere` and `$geoNear` at the router: a near query
//! reads through a geo index (291 without one, as MongoDB) and its
//! results are ordered by distance. The order is a sort whose key is the
//! distance ([`SortSpec::by_distance`]), so each partition keeps its
//! nearest `skip + limit` and the router's k-way merge of the partitions'
//! streams ([`super::merge::Merge`]) puts the nearest first across them,
//! ties broken by `_id` as every sort here is.

use std::sync::Arc;

use bson::Bson;

use super::{ChosenPlan, DocStream, FindSpec, Namespace, Router};
use crate::aggregate::geo_near::GeoNearSpec;
use crate::aggregate::{Context, ParseContext, Pipeline};
use crate::error::{Error, ErrorCode, Result};
use crate::index::{geo, KeyKind};
use crate::query::sort::SortSpec;

/// A `find` with `$near`: its results come nearest first, unless it
/// sorts otherwise.
pub(crate) fn near_order(mut spec: FindSpec) -> Result<FindSpec> {
    let order = match &spec.filter {
        Some(filter) => filter
            .near()?
            .map(|(path, near)| SortSpec::by_distance(path, near)),
        None => None,
    };
    if let Some(order) = order {
        if spec.sort.as_ref().is_none_or(SortSpec::is_empty) {
            spec.sort = Some(order);
        }
    }
    Ok(spec)
}

/// A query with `$near` must read a geo index on its path.
pub(crate) fn check_near(spec: &FindSpec, index: Option<&ChosenPlan>) -> Result<()> {
    let Some(filter) = &spec.filter else {
        return Ok(());
    };
    let Some((path, _)) = filter.near()? else {
        return Ok(());
    };
    let served = index.is_some_and(|chosen| {
        let index = &chosen.scan.index;
        geo::is_geo(index) && index.fields.first().is_some_and(|f| f.path == path)
    });
    if served {
        Ok(())
    } else {
        Err(Error::new(
            ErrorCode::NoQueryExecutionPlans,
            "error processing query: planner returned error :: caused by :: unable to find index for $geoNear query",
        ))
    }
}

impl Router {
    /// Runs a pipeline whose first stage is `$geoNear`: a near query on
    /// its key (given, or the path of the collection's one `2d` index,
    /// else its one `2dsphere` index), each document annotated, then the
    /// other stages at the router.
    pub(crate) fn run_geo_near(
        &self,
        ns: &Namespace,
        spec: GeoNearSpec,
        rest: &[Bson],
        parse: &ParseContext,
        ctx: Arc<dyn Context>,
    ) -> Result<DocStream> {
        let pipeline = Pipeline::parse(rest, parse)?;
        let Some(coll) = self.catalog.get(ns) else {
            return pipeline.run(Box::new(std::iter::empty()), &ctx);
        };
        let key = match &spec.key {
            Some(key) => key.clone(),
            None => {
                let indexes = coll.indexes();
                let paths = |kind: KeyKind| -> Vec<String> {
                    indexes
                        .iter()
                        .filter_map(|i| i.fields.iter().find(|f| f.kind == kind))
                        .map(|f| f.path.clone())
                        .collect()
                };
                let flat = paths(KeyKind::Geo2d);
                let sphere = paths(KeyKind::Geo2dSphere);
                let not_found = |msg: String| Error::new(ErrorCode::IndexNotFound, msg);
                match (flat.as_slice(), sphere.as_slice()) {
                    ([one], _) if spec.flat() => one.clone(),
                    ([_, _, ..], _) => {
                        return Err(not_found(format!(
                            "There is more than one 2d index on {ns}; unsure which to use for $geoNear"
                        )))
                    }
                    (_, [one]) => one.clone(),
                    (_, []) => {
                        return Err(not_found(
                            "$geoNear requires a 2d or 2dsphere index, but none were found"
                                .to_string(),
                        ))
                    }
                    (_, _) => {
                        return Err(not_found(format!(
                            "There is more than one 2dsphere index on {ns}; unsure which to use for $geoNear"
                        )))
                    }
                }
            }
        };
        let find = FindSpec {
            filter: Some(spec.filter(&key)?),
            sort: Some(SortSpec::by_distance(&key, &spec.near)),
            ..FindSpec::default()
        };
        let found = self.find_stream(ns, find)?;
        let annotated: DocStream = Box::new(found.map(move |d| d.map(|d| spec.annotate(&key, d))));
        pipeline.run(annotated, &ctx)
    }
}
