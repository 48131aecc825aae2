//! The scans that read geo indexes (`2dsphere`, `2d`), whose keys
//! [`super::geo_keys`] makes. A query reads the id ranges of the cells
//! covering its region, plus the coarser cells containing them, and the
//! caller applies the exact predicate to what it reads. Like MongoDB's,
//! these indexes hold no entry for a document without the geo field, so
//! the ordinary planner never picks them: only a geo condition (or a
//! hint) does.

use std::ops::Bound;
use std::sync::Arc;

use bson::{Bson, Document};

use super::plan::{prefix_successor, Hint, IndexPlan, KeyRange};
use super::{Index, KeyKind};
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::Filter;
use crate::query::geo::{self as shapes, CellPlane, GeoPredicate, Metric};
use crate::query::keystring;

/// Most cells a query region is covered with.
const QUERY_CELLS: usize = 16;

/// True when the index has a geo field.
pub fn is_geo(index: &Index) -> bool {
    index.is_geo()
}

/// The geo index and scan answering the filter's geo condition: `$near`
/// first, else the first `$geoWithin`/`$geoIntersects` some index can
/// read. The index's first field must be the condition's path; a `2d`
/// index answers only flat conditions and `$nearSphere`/`$centerSphere`
/// on legacy pairs.
///
/// A hint naming a geo index reads it (its whole when the filter has no
/// geo condition on its field); a hint naming another index leaves the
/// choice to the ordinary planner.
pub fn choose(
    indexes: &[Arc<Index>],
    filter: Option<&Filter>,
    hint: Option<&Hint>,
) -> Option<IndexPlan> {
    let hinted = match hint {
        Some(h) => Some(indexes.iter().find(|i| !i.hidden && h.selects(i))?),
        None => None,
    };
    if hinted.is_some_and(|i| !i.is_geo()) {
        return None;
    }
    let hint = hinted.map(|i| i.as_ref());
    let found = filter.and_then(|f| choose_for(indexes, f, hint));
    match (found, hinted) {
        (Some(plan), _) => Some(plan),
        (None, Some(index)) => Some(full_scan(index)),
        (None, None) => None,
    }
}

fn choose_for(indexes: &[Arc<Index>], filter: &Filter, hint: Option<&Index>) -> Option<IndexPlan> {
    let mut conditions = filter.geo_conditions();
    conditions.sort_by_key(|(_, g)| g.near().is_none());
    for (path, condition) in conditions {
        let usable = |index: &&Arc<Index>| {
            !index.hidden
                && hint.is_none_or(|h| std::ptr::eq(h, index.as_ref()))
                && index.fields.first().is_some_and(|f| {
                    f.path == path
                        && match f.kind {
                            KeyKind::Geo2dSphere => true,
                            KeyKind::Geo2d => !uses_geojson(condition),
                            _ => false,
                        }
                })
        };
        if let Some(index) = indexes.iter().find(usable) {
            return Some(scan(index, condition));
        }
    }
    None
}

/// Whether a condition is given in GeoJSON (which a `2d` index cannot
/// answer).
fn uses_geojson(condition: &GeoPredicate) -> bool {
    match condition {
        GeoPredicate::Within(shapes::Region::Geometry(_)) | GeoPredicate::Intersects(_) => true,
        GeoPredicate::Near(n) => n.metric == Metric::Metres,
        GeoPredicate::Within(_) => false,
    }
}

/// The scan of the cells covering a condition's region (all the index
/// when it is unbounded, as a `$near` without `$maxDistance`).
pub fn scan(index: &Arc<Index>, condition: &GeoPredicate) -> IndexPlan {
    let plane = index.geo.as_ref().map_or(CellPlane::SPHERE, |g| g.plane);
    let ranges = match condition.bounds() {
        Some(b) => cell_ranges(&plane.covering(&b, QUERY_CELLS)),
        None => vec![(Bound::Unbounded, Bound::Unbounded)],
    };
    plan_of(index, ranges)
}

/// Every entry of the index (a hinted geo index without a geo
/// condition).
pub fn full_scan(index: &Arc<Index>) -> IndexPlan {
    plan_of(index, vec![(Bound::Unbounded, Bound::Unbounded)])
}

fn plan_of(index: &Arc<Index>, ranges: Vec<KeyRange>) -> IndexPlan {
    let mut bounds = Document::new();
    for (i, field) in index.fields.iter().enumerate() {
        let shown = if i == 0 && !matches!(ranges.first(), Some((Bound::Unbounded, _))) {
            "[cells covering the query region]"
        } else {
            "[MinKey, MaxKey]"
        };
        bounds.insert(field.path.clone(), vec![Bson::String(shown.to_string())]);
    }
    IndexPlan {
        index: Arc::clone(index),
        ranges,
        reverse: false,
        provides_sort: false,
        dedupe: true,
        bounds,
    }
}

/// Byte ranges of entry suffixes whose first key value is a cell id in
/// one of the scan ranges of `cells`.
pub fn cell_ranges(cells: &[i64]) -> Vec<KeyRange> {
    id_ranges(&shapes::scan_ranges(cells))
}

/// Byte ranges of entry suffixes whose first key value is a cell id in
/// one of the inclusive `ranges`.
pub fn id_ranges(ranges: &[(i64, i64)]) -> Vec<KeyRange> {
    ranges
        .iter()
        .filter_map(|&(lo, hi)| {
            let from = keystring::encode_key(&[(&Bson::Int64(lo), false)]);
            let to = keystring::encode_key(&[(&Bson::Int64(hi), false)]);
            let to = prefix_successor(&to)?;
            Some((Bound::Included(from), Bound::Excluded(to)))
        })
        .collect()
}

/// A query with `$near` must read a geo index on its path (291, as
/// MongoDB's planner finds no plan otherwise).
pub fn check_near(filter: Option<&Filter>, scan: Option<&IndexPlan>) -> Result<()> {
    let Some(filter) = filter else {
        return Ok(());
    };
    let Some((path, _)) = filter.near()? else {
        return Ok(());
    };
    let served = scan.is_some_and(|scan| {
        scan.index.is_geo() && scan.index.fields.first().is_some_and(|f| f.path == path)
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

/// The stage explain shows for a `$near` through this index.
pub fn near_stage_name(index: &Index) -> Option<&'static str> {
    match index.fields.first()?.kind {
        KeyKind::Geo2dSphere => Some("GEO_NEAR_2DSPHERE"),
        KeyKind::Geo2d => Some("GEO_NEAR_2D"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn index(spec: Document) -> Result<Index> {
        Index::parse(&spec, 1)
    }

    #[test]
    fn geo_specs_parse_and_show_like_mongodb() {
        let i = index(doc! {"key": {"loc": "2dsphere", "category": 1}}).unwrap();
        assert_eq!(i.name, "loc_2dsphere_category_1");
        assert_eq!(
            i.spec(),
            doc! {"v": 2, "key": {"loc": "2dsphere", "category": 1}, "name": "loc_2dsphere_category_1", "2dsphereIndexVersion": 3}
        );
        let i = index(doc! {"key": {"p": "2d"}, "min": -10, "max": 10, "bits": 20}).unwrap();
        assert_eq!(i.spec().get("min"), Some(&Bson::Int32(-10)));
        assert!(index(doc! {"key": {"a": 1, "p": "2d"}}).is_err());
        assert!(index(doc! {"key": {"p": "2d"}, "min": 5, "max": 5}).is_err());
        assert!(index(doc! {"key": {"p": "2d"}, "bits": 40}).is_err());
        assert!(index(doc! {"key": {"a": 1}, "min": 5}).is_err());
        assert!(index(doc! {"key": {"p": "2d", "q": "2dsphere"}}).is_err());
    }

    #[test]
    fn geo_keys_are_cells_and_bad_geometry_fails() {
        let i = index(doc! {"key": {"loc": "2dsphere"}}).unwrap();
        let keys = i
            .keys_of(&doc! {"loc": {"type": "Point", "coordinates": [1, 2]}})
            .unwrap();
        assert_eq!(keys.keys.len(), 1);
        assert!(matches!(keys.keys[0].1[0], Bson::Int64(_)));
        assert!(i.keys_of(&doc! {"other": 1}).unwrap().keys.is_empty());
        let e = i
            .keys_of(&doc! {"loc": {"type": "Point", "coordinates": [500, 2]}})
            .unwrap_err();
        assert_eq!(e.code.number(), 16755);
        assert!(e.message.starts_with("Can't extract geo keys"));
        let poly =
            doc! {"loc": {"type": "Polygon", "coordinates": [[[0, 0], [20, 0], [20, 20], [0, 0]]]}};
        assert!(!i.keys_of(&poly).unwrap().keys.is_empty());
        let flat = index(doc! {"key": {"p": "2d"}, "min": 0, "max": 10}).unwrap();
        assert_eq!(
            flat.keys_of(&doc! {"p": [11, 1]})
                .unwrap_err()
                .code
                .number(),
            13027
        );
        assert_eq!(flat.keys_of(&doc! {"p": [1, 1]}).unwrap().keys.len(), 1);
    }
}
