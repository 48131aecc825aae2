//! `$geoNear`: the documents nearest a point, nearest first, each with
//! its distance (and location). It must be the first stage: the router
//! runs it as a `$near` query over the collection ([`GeoNearSpec`] gives
//! the filter and the order) and this module annotates what comes out;
//! anywhere else it fails with 40602, as in MongoDB.

use bson::{doc, Bson, Document};

use super::{ParseContext, Stage, StageParser};
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::Filter;
use crate::query::geo::{Metric, Near};

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] = &[("$geoNear", parse_not_first)];

/// `$geoNear` past the first stage (the router takes a first one off).
fn parse_not_first(_: &Bson, _: &ParseContext) -> Result<Box<dyn Stage>> {
    Err(Error::new(
        ErrorCode::Location(40602),
        "$geoNear is only valid as the first stage in a pipeline.",
    ))
}

/// A parsed `$geoNear`.
#[derive(Debug, Clone)]
pub struct GeoNearSpec {
    pub near: Near,
    /// The `$near`/`$nearSphere` condition the stage reads with, on the
    /// key path (it is given once the key is known).
    near_condition: Document,
    pub distance_field: String,
    pub include_locs: Option<String>,
    pub multiplier: f64,
    pub query: Option<Document>,
    pub key: Option<String>,
}

/// Takes a leading `$geoNear` off a pipeline.
pub fn leading(stages: &[Bson]) -> Result<Option<(GeoNearSpec, &[Bson])>> {
    match stages.split_first() {
        Some((Bson::Document(first), rest)) if first.len() == 1 => match first.get("$geoNear") {
            Some(arg) => Ok(Some((GeoNearSpec::parse(arg)?, rest))),
            None => Ok(None),
        },
        _ => Ok(None),
    }
}

fn number(name: &str, v: &Bson) -> Result<f64> {
    crate::query::compare::Number::of(v)
        .map(|n| n.to_f64())
        .filter(|n| n.is_finite() && *n >= 0.0)
        .ok_or_else(|| {
            Error::new(
                ErrorCode::BadValue,
                format!("{name} must be a non-negative number"),
            )
        })
}

impl GeoNearSpec {
    pub fn parse(arg: &Bson) -> Result<GeoNearSpec> {
        let Bson::Document(spec) = arg else {
            return Err(Error::new(
                ErrorCode::Location(10065),
                "invalid parameter: expected an object ($geoNear)",
            ));
        };
        let mut near = None;
        let mut distance_field = None;
        let mut include_locs = None;
        let mut spherical = false;
        let mut multiplier = 1.0;
        let mut query = None;
        let mut key = None;
        let mut min = None;
        let mut max = None;
        for (name, value) in spec {
            match name.as_str() {
                "near" => match value {
                    Bson::Document(_) | Bson::Array(_) => near = Some(value.clone()),
                    _ => {
                        return Err(Error::new(
                            ErrorCode::Location(5860401),
                            "$geoNear requires near argument to be a GeoJSON object or a legacy point(array)",
                        ))
                    }
                },
                "distanceField" => match value {
                    Bson::String(s) if !s.is_empty() && !s.starts_with('$') => {
                        distance_field = Some(s.clone())
                    }
                    _ => {
                        return Err(Error::new(
                            ErrorCode::Location(16606),
                            "$geoNear requires a 'distanceField' option as a String",
                        ))
                    }
                },
                "includeLocs" => match value {
                    Bson::String(s) if !s.is_empty() => include_locs = Some(s.clone()),
                    _ => {
                        return Err(Error::new(
                            ErrorCode::Location(16607),
                            "$geoNear requires that 'includeLocs' option is a String",
                        ))
                    }
                },
                "spherical" => spherical = matches!(value, Bson::Boolean(true)),
                "distanceMultiplier" => multiplier = number(name, value)?,
                "minDistance" => min = Some(number(name, value)?),
                "maxDistance" => max = Some(number(name, value)?),
                "query" => match value {
                    Bson::Document(q) => {
                        // Refuses `$near` (5626500) and bad operators.
                        Filter::parse_in_pipeline(q)?;
                        query = Some(q.clone());
                    }
                    _ => {
                        return Err(Error::new(
                            ErrorCode::TypeMismatch,
                            "query must be an object",
                        ))
                    }
                },
                "key" => match value {
                    Bson::String(s) if !s.is_empty() => key = Some(s.clone()),
                    Bson::String(_) => {
                        return Err(Error::new(
                            ErrorCode::BadValue,
                            "$geoNear parameter 'key' cannot be the empty string",
                        ))
                    }
                    _ => {
                        return Err(Error::new(
                            ErrorCode::BadValue,
                            format!("$geoNear parameter 'key' must be of type string but found type: {}", crate::query::compare::type_name(value)),
                        ))
                    }
                },
                other => {
                    return Err(Error::new(
                        ErrorCode::Location(16605),
                        format!("Unknown argument to $geoNear: {other}"),
                    ))
                }
            }
        }
        let Some(near) = near else {
            return Err(Error::new(
                ErrorCode::Location(5860400),
                "$geoNear requires a 'near' argument",
            ));
        };
        let Some(distance_field) = distance_field else {
            return Err(Error::new(
                ErrorCode::Location(16606),
                "$geoNear requires a 'distanceField' option as a String",
            ));
        };
        // A GeoJSON point measures on the sphere in metres; a legacy pair
        // in radians with `spherical`, else in the plane.
        let geojson = matches!(&near, Bson::Document(d) if d.contains_key("type"));
        let mut condition = Document::new();
        if geojson {
            let mut inner = doc! {"$geometry": near.clone()};
            if let Some(m) = min {
                inner.insert("$minDistance", m);
            }
            if let Some(m) = max {
                inner.insert("$maxDistance", m);
            }
            condition.insert("$nearSphere", inner);
        } else {
            condition.insert(
                if spherical { "$nearSphere" } else { "$near" },
                near.clone(),
            );
            if let Some(m) = min {
                condition.insert("$minDistance", m);
            }
            if let Some(m) = max {
                condition.insert("$maxDistance", m);
            }
        }
        let (op, arg) = condition
            .iter()
            .next()
            .map(|(k, v)| (k.clone(), v.clone()))
            .unwrap_or_default();
        let parsed = Near::parse(&op, &arg, &condition)?;
        Ok(GeoNearSpec {
            near: parsed,
            near_condition: condition,
            distance_field,
            include_locs,
            multiplier,
            query,
            key,
        })
    }

    /// True when a `2d` index can answer the stage (legacy pairs).
    pub fn flat(&self) -> bool {
        self.near.metric != Metric::Metres
    }

    /// The filter the stage reads with: its `query` and the near
    /// condition on `key`.
    pub fn filter(&self, key: &str) -> Result<Filter> {
        let near = doc! {key: self.near_condition.clone()};
        match &self.query {
            Some(q) if !q.is_empty() => Filter::parse(&doc! {"$and": [q.clone(), near]}),
            _ => Filter::parse(&near),
        }
    }

    /// Adds the distance (times the multiplier) and, with `includeLocs`,
    /// the location to a document found at `key`.
    pub fn annotate(&self, key: &str, mut doc: Document) -> Document {
        let value = dotted(&doc, key).cloned();
        let found = value.as_ref().and_then(|v| nearest_value(&self.near, v));
        if let Some((distance, location)) = found {
            set_path(
                &mut doc,
                &self.distance_field,
                Bson::Double(distance * self.multiplier),
            );
            if let Some(locs) = &self.include_locs {
                set_path(&mut doc, locs, location);
            }
        }
        doc
    }
}

/// The distance to the nearest geometry a value holds, and that
/// geometry's value (an element of an array of geometries).
fn nearest_value(near: &Near, value: &Bson) -> Option<(f64, Bson)> {
    if let Bson::Array(items) = value {
        if crate::query::geo::legacy_point(value).is_none() {
            return items
                .iter()
                .filter_map(|item| near.distance_within(item).map(|(d, _)| (d, item.clone())))
                .min_by(|a, b| a.0.total_cmp(&b.0));
        }
    }
    near.distance_within(value).map(|(d, _)| (d, value.clone()))
}

/// The value at a dotted path through documents.
fn dotted<'a>(doc: &'a Document, path: &str) -> Option<&'a Bson> {
    match path.split_once('.') {
        None => doc.get(path),
        Some((first, rest)) => match doc.get(first) {
            Some(Bson::Document(sub)) => dotted(sub, rest),
            _ => None,
        },
    }
}

/// Sets a dotted path, making documents on the way.
fn set_path(doc: &mut Document, path: &str, value: Bson) {
    match path.split_once('.') {
        None => {
            doc.insert(path, value);
        }
        Some((first, rest)) => {
            if !matches!(doc.get(first), Some(Bson::Document(_))) {
                doc.insert(first, Document::new());
            }
            if let Some(Bson::Document(sub)) = doc.get_mut(first) {
                set_path(sub, rest, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_annotates() {
        let spec = GeoNearSpec::parse(&Bson::Document(doc! {
            "near": {"type": "Point", "coordinates": [0, 0]},
            "distanceField": "dist.calculated",
            "includeLocs": "loc",
            "distanceMultiplier": 0.001,
            "maxDistance": 500000,
        }))
        .unwrap();
        assert_eq!(spec.near.metric, Metric::Metres);
        let out = spec.annotate(
            "location",
            doc! {"location": {"type": "Point", "coordinates": [1, 0]}},
        );
        let d = out
            .get_document("dist")
            .unwrap()
            .get_f64("calculated")
            .unwrap();
        assert!((d - 111.3188).abs() < 0.001, "{d}");
        assert!(out.contains_key("loc"));
        let f = spec.filter("location").unwrap();
        assert!(f.matches(&doc! {"location": [1, 0]}));
        assert!(!f.matches(&doc! {"location": [10, 0]}));
    }

    #[test]
    fn errors_are_mongodb_codes() {
        let code = |d: Document| {
            GeoNearSpec::parse(&Bson::Document(d))
                .unwrap_err()
                .code
                .number()
        };
        assert_eq!(code(doc! {"near": [0, 0]}), 16606);
        assert_eq!(code(doc! {"near": 5, "distanceField": "d"}), 5860401);
        assert_eq!(code(doc! {"distanceField": "d"}), 5860400);
        assert_eq!(
            code(doc! {"near": [0, 0], "distanceField": "d", "includeLocs": 1}),
            16607
        );
        assert_eq!(
            code(doc! {"near": [0, 0], "distanceField": "d", "query": {"a": {"$near": [0, 0]}}}),
            5626500
        );
    }
}
