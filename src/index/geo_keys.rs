//! The keys of geo indexes (`2dsphere`, `2d`) and their options.
//!
//! A geo field's key values are cell ids ([`crate::query::geo`]) stored
//! as `Int64` in the ordinary entry layout: a point gives its finest
//! cell, a line or polygon the few cells covering its bounding box (the
//! index is then multikey). Like MongoDB's, these indexes hold no entry
//! for a document without the geo field. The scans that read them are in
//! [`super::geo`].

use bson::{Bson, Document};

use crate::error::{Error, ErrorCode, Result};
use crate::query::geo::{self as shapes, CellPlane};
use crate::{bail, err};

/// The kind of a geo field of a key pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeoKind {
    /// `"2dsphere"`.
    Sphere,
    /// `"2d"`.
    Flat,
}

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
pub fn parse_options(
    kinds: &[Option<GeoKind>],
    hashed: bool,
    spec: &Document,
) -> Result<Option<GeoOptions>> {
    let flat = kinds.iter().filter(|k| **k == Some(GeoKind::Flat)).count();
    let sphere = kinds
        .iter()
        .filter(|k| **k == Some(GeoKind::Sphere))
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
    if hashed {
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
    if flat == 1 && kinds.first() != Some(&Some(GeoKind::Flat)) {
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
    options: Option<&GeoOptions>,
    kind: GeoKind,
    path: &str,
    doc: &Document,
) -> Result<Option<(Vec<Bson>, bool)>> {
    let plane = options.map_or(CellPlane::SPHERE, |g| g.plane);
    let parts: Vec<&str> = path.split('.').collect();
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
        let stored = match kind {
            GeoKind::Flat => match shapes::legacy_point(value) {
                Some(p) => vec![shapes::Stored {
                    geometry: geo::Geometry::Point(p),
                    legacy: true,
                }],
                // An array of pairs.
                None if pairs(value).is_some() => pairs(value).unwrap_or_default(),
                None if matches!(value, Bson::Array(_) | Bson::Document(_)) => {
                    return Err(fail(format!(
                        "geo field {} must be a pair of numbers: {value}",
                        path
                    )))
                }
                None => {
                    return Err(fail(format!(
                        "geo field {} is not an array or object: {value}",
                        path
                    )))
                }
            },
            _ => shapes::stored_values(value).map_err(fail)?,
        };
        for s in &stored {
            if let Some(p) = s.point() {
                if !plane.holds(&p) {
                    if kind == GeoKind::Flat {
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
