//! Geo indexes (`2dsphere`, `2d`): their options, the cell keys a
//! document gives them, and the scans that read them.
//!
//! A geo field's key values are cell ids ([`crate::query::geo`]) stored
//! as `Int64` in the ordinary entry layout: a point gives its finest
//! cell, a line or polygon the few cells covering its bounding box (the
//! index is then multikey). A query reads the id ranges of the cells
//! covering its region, plus the coarser cells containing them, and the
//! caller applies the exact predicate to what it reads. Like MongoDB's,
//! these indexes hold no entry for a document without the geo field, so
//! the ordinary planner never picks them: only a geo condition (or a
//! hint) does.

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::plan::{prefix_successor, IndexPlan, KeyRange};
use super::{Index, KeyField, KeyKind};
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::Filter;
use crate::query::geo::{self as shapes, CellPlane, GeoPredicate, Metric};
use crate::query::keystring;
use crate::{bail, err};

/// Most cells a query region is covered with.
const QUERY_CELLS: usize = 16;

/// The options of a geo index: the plane its cells divide.
#[derive(Debug, Clone, PartialEq)]
pub struct GeoOptions {
    pub plane: CellPlane,
    /// `2d`'s `min`, `max` and `bits`, as given (for `listIndexes`).
    pub shown: Document,
}

impl Default for GeoOptions {
    fn default() -> Self {
        GeoOptions {
            plane: CellPlane::SPHERE,
            shown: Document::new(),
        }
    }
}

/// True for the options only geo indexes take.
pub fn is_geo_option(name: &str) -> bool {
    matches!(
        name,
        "2dsphereIndexVersion"
            | "min"
            | "max"
            | "bits"
            | "coarsestIndexedLevel"
            | "finestIndexedLevel"
    )
}

/// Checks a geo key pattern and reads the geo options of `spec`.
pub fn parse_options(fields: &[KeyField], spec: &Document) -> Result<Option<GeoOptions>> {
    let flat = fields.iter().filter(|f| f.kind == KeyKind::Geo2d).count();
    let sphere = fields
        .iter()
        .filter(|f| f.kind == KeyKind::Geo2dSphere)
        .count();
    if flat + sphere == 0 {
        if let Some(option) = spec.keys().find(|k| is_geo_option(k)) {
            bail!(
                InvalidIndexSpecificationOption,
                "The field '{option}' is not valid for an index specification. Specification: {spec}"
            );
        }
        return Ok(None);
    }
    if fields.iter().any(|f| f.kind == KeyKind::Hashed) {
        bail!(
            CannotCreateIndex,
            "Can't use more than one index plugin for a single index. Key pattern: {}",
            spec.get("key").map(|k| k.to_string()).unwrap_or_default()
        );
    }
    if flat > 0 && sphere > 0 {
        bail!(
            CannotCreateIndex,
            "Can't use more than one index plugin for a single index."
        );
    }
    if flat > 1 {
        return Err(Error::new(
            ErrorCode::Location(16800),
            "can't have 2 geo fields",
        ));
    }
    if flat == 1 && fields[0].kind != KeyKind::Geo2d {
        return Err(Error::new(
            ErrorCode::Location(16801),
            "2d has to be first in index",
        ));
    }
    let mut options = GeoOptions::default();
    if flat == 1 {
        let number = |name: &str, default: f64| -> Result<f64> {
            match spec.get(name) {
                None => Ok(default),
                Some(v) => crate::query::compare::Number::of(v)
                    .map(|n| n.to_f64())
                    .filter(|n| n.is_finite())
                    .ok_or_else(|| {
                        err!(TypeMismatch, "geo index option '{name}' must be a number")
                    }),
            }
        };
        let (min, max) = (number("min", -180.0)?, number("max", 180.0)?);
        let bits = number("bits", 26.0)?;
        if !(1.0..=32.0).contains(&bits) {
            bail!(InvalidOptions, "bits in geo index must be between 1 and 32");
        }
        if min >= max {
            bail!(InvalidOptions, "region has to be greater than zero");
        }
        for name in ["min", "max", "bits"] {
            if let Some(v) = spec.get(name) {
                options.shown.insert(name, v.clone());
            }
        }
        options.plane = CellPlane::flat(min, max);
    } else {
        for name in ["min", "max", "bits"] {
            if spec.contains_key(name) {
                bail!(
                    InvalidIndexSpecificationOption,
                    "The field '{name}' is not valid for an index specification. Specification: {spec}"
                );
            }
        }
        options.shown.insert(
            "2dsphereIndexVersion",
            spec.get("2dsphereIndexVersion")
                .cloned()
                .unwrap_or(Bson::Int32(3)),
        );
    }
    Ok(Some(options))
}

/// The values a document gives one geo field: its cell ids, and whether
/// there are several. `None` when the field is missing or null (the
/// document is then left out of the index).
pub fn field_keys(
    index: &Index,
    field: &KeyField,
    doc: &Document,
) -> Result<Option<(Vec<Bson>, bool)>> {
    let plane = index.geo.as_ref().map_or(CellPlane::SPHERE, |g| g.plane);
    let parts: Vec<&str> = field.path.split('.').collect();
    let mut values = Vec::new();
    geo_values(doc, &parts, &mut values);
    let present: Vec<&Bson> = values
        .into_iter()
        .filter(|v| !matches!(v, Bson::Null | Bson::Undefined))
        .collect();
    if present.is_empty() {
        return Ok(None);
    }
    let fail = |reason: String| -> Error {
        Error::new(
            ErrorCode::CannotExtractGeoKeys,
            format!("Can't extract geo keys: {doc}  {reason}"),
        )
    };
    let mut cells = Vec::new();
    for value in present {
        let stored = match field.kind {
            KeyKind::Geo2d => match shapes::legacy_point(value) {
                Some(p) => vec![shapes::Stored {
                    geometry: geo::Geometry::Point(p),
                    legacy: true,
                }],
                // An array of pairs.
                None if pairs(value).is_some() => pairs(value).unwrap_or_default(),
                None if matches!(value, Bson::Array(_) | Bson::Document(_)) => {
                    return Err(fail(format!(
                        "geo field {} must be a pair of numbers: {value}",
                        field.path
                    )))
                }
                None => {
                    return Err(fail(format!(
                        "geo field {} is not an array or object: {value}",
                        field.path
                    )))
                }
            },
            _ => shapes::stored_values(value).map_err(fail)?,
        };
        for s in &stored {
            if let Some(p) = s.point() {
                if !plane.holds(&p) {
                    if field.kind == KeyKind::Geo2d {
                        return Err(Error::new(
                            ErrorCode::Location(13027),
                            format!(
                                "point not in interval of [ {}, {} ) :: caused by :: {doc}",
                                plane.min_x, plane.max_x
                            ),
                        ));
                    }
                    return Err(fail(format!(
                        "longitude/latitude is out of bounds, lng: {} lat: {}",
                        p.x(),
                        p.y()
                    )));
                }
            }
            cells.extend(plane.cells_of(&s.geometry));
        }
    }
    cells.sort_unstable();
    cells.dedup();
    let several = cells.len() > 1;
    Ok(Some((
        cells.into_iter().map(Bson::Int64).collect(),
        several,
    )))
}

/// The points of an array of legacy pairs.
fn pairs(value: &Bson) -> Option<Vec<shapes::Stored>> {
    let Bson::Array(items) = value else {
        return None;
    };
    items
        .iter()
        .map(|i| {
            shapes::legacy_point(i).map(|p| shapes::Stored {
                geometry: geo::Geometry::Point(p),
                legacy: true,
            })
        })
        .collect()
}

/// The values a geo path reaches: arrays on the way are followed (their
/// documents), the value at its end is taken whole (a legacy pair is an
/// array).
fn geo_values<'a>(doc: &'a Document, parts: &[&str], out: &mut Vec<&'a Bson>) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    let Some(v) = doc.get(*first) else {
        return;
    };
    geo_value(v, rest, out);
}

fn geo_value<'a>(v: &'a Bson, rest: &[&str], out: &mut Vec<&'a Bson>) {
    if rest.is_empty() {
        out.push(v);
        return;
    }
    match v {
        Bson::Document(d) => geo_values(d, rest, out),
        Bson::Array(items) => {
            for item in items {
                geo_value(item, rest, out);
            }
        }
        _ => {}
    }
}

/// True when the index has a geo field.
pub fn is_geo(index: &Index) -> bool {
    index
        .fields
        .iter()
        .any(|f| matches!(f.kind, KeyKind::Geo2d | KeyKind::Geo2dSphere))
}

/// The geo index and scan answering the filter's geo condition: `$near`
/// first, else the first `$geoWithin`/`$geoIntersects` some index can
/// read. The index's first field must be the condition's path; a `2d`
/// index answers only flat conditions and `$nearSphere`/`$centerSphere`
/// on legacy pairs.
pub fn choose(indexes: &[Arc<Index>], filter: &Filter, hint: Option<&Index>) -> Option<IndexPlan> {
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

/// The stage explain shows for a `$near` through this index.
pub fn near_stage_name(index: &Index) -> Option<&'static str> {
    match index.fields.first()?.kind {
        KeyKind::Geo2dSphere => Some("GEO_NEAR_2DSPHERE"),
        KeyKind::Geo2d => Some("GEO_NEAR_2D"),
        _ => None,
    }
}

/// `listIndexes`' options of a geo index.
pub fn shown_options(index: &Index) -> Document {
    index
        .geo
        .as_ref()
        .map(|g| g.shown.clone())
        .unwrap_or_else(|| doc! {})
}

#[cfg(test)]
mod tests {
    use super::*;

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
