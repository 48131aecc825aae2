//! `$near`, `$nearSphere` and `$geoNear` at the router: a near query
//! reads through a geo index (291 without one, as MongoDB) and its
//! results are ordered by distance. The order is a sort whose key is the
//! distance ([`SortSpec::by_distance`]), so each partition keeps its
//! nearest `skip + limit` and the router's k-way merge of the partitions'
//! streams ([`super::merge::Merge`]) puts the nearest first across them,
//! ties broken by `_id` as every sort here is.

use std::collections::HashSet;
use std::sync::Arc;

use bson::Bson;

use super::indexes::Examined;
use super::plan::{Access, PartitionPlan, QueryPlan};
use super::{access_records, filter_records, Reader, Record};
use super::{ChosenPlan, DocStream, FindSpec, Namespace, Router};
use crate::aggregate::geo_near::GeoNearSpec;
use crate::aggregate::{Context, ParseContext, Pipeline};
use crate::error::{Error, ErrorCode, Result};
use crate::index::{geo, KeyKind};
use crate::query::filter::{Filter, MatchDetails};
use crate::query::geo::{self as shapes, CellPlane, Metric, Near};
use crate::query::sort::SortSpec;
use crate::storage::RecordKey;

/// Matching records of one partition.
pub(super) type MatchIter = Box<dyn Iterator<Item = Result<(Record, MatchDetails)>> + Send>;

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

/// The first ring's radius, in the near point's units.
fn first_radius(near: &Near, plane: &CellPlane) -> f64 {
    match near.metric {
        Metric::Metres => 1000.0,
        Metric::Radians => 1000.0 / crate::query::geo::EARTH_RADIUS_M,
        Metric::Flat => (plane.max_x - plane.min_x) / 4096.0,
    }
}

/// How much the next ring's radius grows when `within` of the `keep`
/// matches wanted lie inside the radius read: by the square root of what
/// is missing (matches grow with the area), a little more to land past
/// it, at least 1.5 and at most 4 times; 4 times when none were found.
fn growth(within: usize, keep: usize) -> f64 {
    if within == 0 {
        return 4.0;
    }
    ((keep as f64 / within as f64).sqrt() * 1.2).clamp(1.5, 4.0)
}

/// The matching records of `parts` for a `$near` with a limit, read ring
/// by ring: the cells within a radius, then those within a larger one
/// ([`growth`], less the cells already read), and so on, stopping once
/// `keep` matches lie within the radius read, since no unread document
/// can be nearer than they are. Each ring is read on every one of
/// `parts`, so the partitions of a sharded collection together read about
/// what one would: no partition looks for `keep` of its own. `examined`
/// counts each part's reads (aligned with `parts`). `None` when the plan
/// is not such a query.
pub(super) fn near_rings(
    reader: &Reader,
    id: u64,
    plan: &QueryPlan,
    parts: &[PartitionPlan],
    filter: Option<&Filter>,
    keep: Option<usize>,
    examined: Vec<Option<Arc<Examined>>>,
) -> Option<MatchIter> {
    let keep = keep?;
    let Access::Index(chosen) = &parts.first()?.access else {
        return None;
    };
    let filter = filter?;
    let (path, near) = filter.near().ok()??;
    let index = &chosen.scan.index;
    if !geo::is_geo(index) || index.fields.first().is_none_or(|f| f.path != path) {
        return None;
    }
    let plane = index.geo.as_ref().map_or(CellPlane::SPHERE, |g| g.plane);
    let order = SortSpec::by_distance(path, near);
    let near = near.clone();
    let (reader, plan, parts, filter) =
        (reader.clone(), plan.clone(), parts.to_vec(), filter.clone());
    let chosen = Arc::clone(chosen);
    let mut radius = first_radius(&near, &plane);
    let mut scanned: Vec<(i64, i64)> = Vec::new();
    let mut current: Option<MatchIter> = None;
    let mut distances: Vec<f64> = Vec::new();
    let mut seen: HashSet<RecordKey> = HashSet::new();
    let mut last = false;
    Some(Box::new(std::iter::from_fn(move || loop {
        if let Some(ring) = current.as_mut() {
            match ring.next() {
                Some(Ok((rec, details))) => {
                    if !seen.insert(rec.key.clone()) {
                        continue;
                    }
                    if let Some(Bson::Double(d)) = order.key_for(&rec.doc).first() {
                        distances.push(*d);
                    }
                    return Some(Ok((rec, details)));
                }
                Some(Err(e)) => return Some(Err(e)),
                None => {
                    current = None;
                    let within = distances.iter().filter(|d| **d <= radius).count();
                    if last || within >= keep {
                        return None;
                    }
                    radius *= growth(within, keep);
                }
            }
        }
        let reach = near.max.map_or(radius, |m| radius.min(m));
        let bounds = near.bounds_within(reach);
        let whole = bounds.min_x <= plane.min_x
            && bounds.max_x >= plane.max_x
            && bounds.min_y <= plane.min_y
            && bounds.max_y >= plane.max_y;
        last = whole || near.max.is_some_and(|m| radius >= m);
        let ring = shapes::scan_ranges(&plane.covering(&bounds, 16));
        let fresh = subtract(&ring, &scanned);
        scanned = union(&scanned, &ring);
        let mut scan = chosen.scan.clone();
        scan.ranges = geo::id_ranges(&fresh);
        let ring = Arc::new(ChosenPlan {
            scan,
            covered: false,
        });
        let mut records: Vec<super::CandidateIter> = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let ring_part = PartitionPlan {
                access: Access::Index(Arc::clone(&ring)),
                ..part.clone()
            };
            let counted = examined.get(i).cloned().flatten();
            records.push(access_records(
                &reader,
                id,
                &plan,
                &ring_part,
                Some(&filter),
                counted,
            ));
        }
        let records: super::CandidateIter = Box::new(records.into_iter().flatten());
        current = Some(Box::new(filter_records(records, Some(filter.clone()))));
    })))
}

/// Inclusive id ranges of `a` not in `b` (both sorted and disjoint).
fn subtract(a: &[(i64, i64)], b: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    for &(lo, hi) in a {
        let mut start = lo;
        for &(blo, bhi) in b {
            if bhi < start || blo > hi {
                continue;
            }
            if blo > start {
                out.push((start, blo - 1));
            }
            start = bhi.saturating_add(1);
            if start > hi || bhi == i64::MAX {
                break;
            }
        }
        if start <= hi && !b.iter().any(|&(blo, bhi)| blo <= start && start <= bhi) {
            out.push((start, hi));
        }
    }
    out
}

/// The union of two sets of inclusive id ranges, sorted and merged.
fn union(a: &[(i64, i64)], b: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let mut all: Vec<(i64, i64)> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(all.len());
    for (lo, hi) in all {
        match out.last_mut() {
            Some(prev) if lo <= prev.1.saturating_add(1) => prev.1 = prev.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_ranges_subtract_and_unite() {
        assert_eq!(
            subtract(&[(0, 10)], &[(3, 4), (8, 20)]),
            vec![(0, 2), (5, 7)]
        );
        assert_eq!(subtract(&[(0, 10)], &[]), vec![(0, 10)]);
        assert_eq!(subtract(&[(0, 10)], &[(0, 10)]), vec![]);
        assert_eq!(
            subtract(&[(5, 6), (9, 12)], &[(0, 5), (12, 12)]),
            vec![(6, 6), (9, 11)]
        );
        assert_eq!(union(&[(0, 2), (8, 9)], &[(3, 5)]), vec![(0, 5), (8, 9)]);
    }

    #[test]
    fn rings_grow_by_what_is_missing() {
        // Nothing found: the area grows sixteenfold.
        assert_eq!(growth(0, 10), 4.0);
        // A quarter found: twice the radius (four times the area), and a
        // little more.
        assert!((growth(25, 100) - 2.4).abs() < 1e-9);
        // Almost all found: still half again as far.
        assert_eq!(growth(9, 10), 1.5);
        assert_eq!(growth(1, 1000), 4.0);
    }
}
