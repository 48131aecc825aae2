//! Geospatial values and predicates: GeoJSON and legacy coordinate pairs
//! as stored in documents, the regions of `$geoWithin`/`$geoIntersects`,
//! the points of `$near`/`$nearSphere`/`$geoNear`, distances, and the
//! cells a geo index keys a value under. Pure logic, no I/O: the filter,
//! the index and the `$geoNear` stage build on it.
//!
//! Geometry tests use the georust `geo` crate on longitude/latitude
//! coordinates (edges are straight lines in that plane, not geodesics);
//! distances on the sphere are great-circle distances on MongoDB's
//! sphere of radius [`EARTH_RADIUS_M`] metres.
//!
//! Cells: a cell is a square of a quadtree over a rectangle (longitude
//! −180..180 × latitude −90..90 for `2dsphere`, `min..max` squared for
//! `2d`), named by a 61-bit id: the Z-order (Morton) bits of its path from
//! the root, two per level, then a 1 bit, then zeros. A point's cell is
//! at [`MAX_LEVEL`]; the ids of all cells inside cell `c` form the range
//! `c - lsb(c) + 1 ..= c + lsb(c) - 1`, so a region covered by a few
//! cells is a few ranges of ids, and the cells containing `c` are found by
//! clearing its low bits. An index stores the id as an `Int64` key value.

use bson::{Bson, Document};
use geo::{
    BoundingRect, Closest, ClosestPoint, Coord, Geometry, GeometryCollection, LineString,
    MultiLineString, MultiPoint, MultiPolygon, Point, Polygon, Relate,
};

use crate::query::compare::Number;

/// The radius of MongoDB's sphere, in metres.
pub const EARTH_RADIUS_M: f64 = 6_378_100.0;

/// The finest cell level (30 bits per axis).
pub const MAX_LEVEL: u32 = 30;

// ---------------------------------------------------------------------------
// Stored values.

/// A geometry found in a document.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub geometry: Geometry<f64>,
    /// Given as a legacy pair (`[x, y]` or `{x:, y:}`), not GeoJSON.
    pub legacy: bool,
}

impl Stored {
    pub fn point(&self) -> Option<Point<f64>> {
        match &self.geometry {
            Geometry::Point(p) => Some(*p),
            _ => None,
        }
    }
}

fn number(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            Number::of(v).map(Number::to_f64)
        }
        _ => None,
    }
}

/// A legacy pair: an array whose first two elements are numbers, or a
/// document whose first two values are.
pub fn legacy_point(v: &Bson) -> Option<Point<f64>> {
    let (x, y) = match v {
        Bson::Array(items) if items.len() >= 2 => (number(&items[0])?, number(&items[1])?),
        Bson::Document(d) if d.len() >= 2 && !d.contains_key("type") => {
            let mut values = d.values();
            (number(values.next()?)?, number(values.next()?)?)
        }
        _ => return None,
    };
    (x.is_finite() && y.is_finite()).then(|| Point::new(x, y))
}

/// Reads a value as a geometry: a legacy pair or a GeoJSON object. The
/// error says what is wrong, in MongoDB's words.
pub fn parse_stored(v: &Bson) -> Result<Stored, String> {
    if let Some(p) = legacy_point(v) {
        return Ok(Stored {
            geometry: Geometry::Point(p),
            legacy: true,
        });
    }
    match v {
        Bson::Document(d) if d.contains_key("type") => Ok(Stored {
            geometry: parse_geojson(d)?,
            legacy: false,
        }),
        Bson::Array(_) | Bson::Document(_) => Err(format!(
            "Point must only contain numeric elements, instead got {v}"
        )),
        other => Err(format!("geo element must be an array or object: {other}")),
    }
}

fn coord(v: &Bson) -> Result<Coord<f64>, String> {
    let Bson::Array(items) = v else {
        return Err(format!("Point must be an array or object, instead got {v}"));
    };
    if items.len() < 2 {
        return Err(format!("Point must contain at least two elements: {v}"));
    }
    let (Some(x), Some(y)) = (number(&items[0]), number(&items[1])) else {
        return Err(format!("Point must only contain numeric elements: {v}"));
    };
    if items.len() > 2 && items[2..].iter().any(|i| number(i).is_none()) {
        return Err(format!("Point must only contain numeric elements: {v}"));
    }
    if !(-180.0..=180.0).contains(&x) || !(-90.0..=90.0).contains(&y) {
        return Err(format!(
            "longitude/latitude is out of bounds, lng: {x} lat: {y}"
        ));
    }
    Ok(Coord { x, y })
}

fn coords(v: &Bson, what: &str) -> Result<Vec<Coord<f64>>, String> {
    let Bson::Array(items) = v else {
        return Err(format!("{what} coordinates must be an array"));
    };
    items.iter().map(coord).collect()
}

fn line(v: &Bson) -> Result<LineString<f64>, String> {
    let points = coords(v, "LineString")?;
    if points.len() < 2 {
        return Err(format!(
            "GeoJSON LineString must have at least 2 vertices: {v}"
        ));
    }
    Ok(LineString::new(points))
}

fn polygon(v: &Bson) -> Result<Polygon<f64>, String> {
    let Bson::Array(rings) = v else {
        return Err("Polygon coordinates must be an array".to_string());
    };
    if rings.is_empty() {
        return Err("Polygon has no loops.".to_string());
    }
    let mut loops = Vec::with_capacity(rings.len());
    for ring in rings {
        let points = coords(ring, "Polygon")?;
        if points.len() < 4 {
            return Err(format!(
                "Loop must have at least 3 different vertices: {ring}"
            ));
        }
        if points.first() != points.last() {
            return Err(format!(
                "Loop is not closed, first vertex does not equal last vertex: {ring}"
            ));
        }
        loops.push(LineString::new(points));
    }
    let outer = loops.remove(0);
    let poly = Polygon::new(outer, loops);
    // A hole must lie inside the shell.
    for hole in poly.interiors() {
        let hole_poly = Polygon::new(hole.clone(), Vec::new());
        let shell = Polygon::new(poly.exterior().clone(), Vec::new());
        if !hole_poly.relate(&shell).is_coveredby() {
            return Err("Secondary loops not contained by first exterior loop - secondary loops must be holes".to_string());
        }
    }
    Ok(poly)
}

fn array<'a>(v: &'a Bson, what: &str) -> Result<&'a Vec<Bson>, String> {
    match v {
        Bson::Array(items) => Ok(items),
        _ => Err(format!("{what} coordinates must be an array")),
    }
}

/// Parses a GeoJSON object: `{type, coordinates}` or a
/// `GeometryCollection`'s `{type, geometries}`.
pub fn parse_geojson(d: &Document) -> Result<Geometry<f64>, String> {
    let kind = match d.get("type") {
        Some(Bson::String(s)) => s.as_str(),
        _ => return Err(format!("unknown GeoJSON type: {d}")),
    };
    if kind == "GeometryCollection" {
        let Some(Bson::Array(items)) = d.get("geometries") else {
            return Err(format!(
                "GeometryCollection geometries must be an array: {d}"
            ));
        };
        let mut parts = Vec::with_capacity(items.len());
        for item in items {
            let Bson::Document(g) = item else {
                return Err(format!("Element of geometries is not an object: {item}"));
            };
            parts.push(parse_geojson(g)?);
        }
        return Ok(Geometry::GeometryCollection(GeometryCollection::new_from(
            parts,
        )));
    }
    let Some(c) = d.get("coordinates") else {
        return Err(format!("coordinates must be an array: {d}"));
    };
    let geometry = match kind {
        "Point" => {
            let Bson::Array(items) = c else {
                return Err(format!("Point must be an array or object, instead got {c}"));
            };
            if items.len() != 2 {
                return Err(format!("Point must only contain two numeric elements: {c}"));
            }
            Geometry::Point(Point::from(coord(c)?))
        }
        "LineString" => Geometry::LineString(line(c)?),
        "Polygon" => Geometry::Polygon(polygon(c)?),
        "MultiPoint" => {
            let points = coords(c, "MultiPoint")?;
            if points.is_empty() {
                return Err("MultiPoint coordinates must have at least 1 element".to_string());
            }
            Geometry::MultiPoint(MultiPoint::new(
                points.into_iter().map(Point::from).collect(),
            ))
        }
        "MultiLineString" => Geometry::MultiLineString(MultiLineString::new(
            array(c, "MultiLineString")?
                .iter()
                .map(line)
                .collect::<Result<_, _>>()?,
        )),
        "MultiPolygon" => Geometry::MultiPolygon(MultiPolygon::new(
            array(c, "MultiPolygon")?
                .iter()
                .map(polygon)
                .collect::<Result<_, _>>()?,
        )),
        other => return Err(format!("unknown GeoJSON type: {other}")),
    };
    Ok(along_great_circles(geometry))
}

/// The longest edge a GeoJSON line or polygon keeps, in metres: longer
/// edges get points inserted along their great circle.
const MAX_EDGE_M: f64 = 10_000.0;
/// The most points [`along_great_circles`] adds to one geometry: past it
/// the edges are split more coarsely, so a document of many very long
/// edges cannot grow without bound.
const MAX_ADDED_POINTS: f64 = 100_000.0;

/// A GeoJSON geometry whose edges follow great circles, as MongoDB's
/// `2dsphere` reads them: every edge longer than [`MAX_EDGE_M`] is split
/// at points along its great circle (georust's haversine interpolation),
/// so the flat longitude/latitude tests and bounding boxes applied to it
/// stay within a few metres of the spherical ones (an edge of 10 km
/// strays from its arc by under 10 m). Meridians and the equator are
/// great circles already and stay as they are, so a point exactly on one
/// is still on it. An edge between antipodal points has no one great
/// circle and is kept straight.
fn along_great_circles(g: Geometry<f64>) -> Geometry<f64> {
    use geo::{CoordsIter, Distance, Haversine};
    fn length(line: &LineString<f64>) -> f64 {
        line.lines()
            .map(|l| Haversine::distance(l.start_point(), l.end_point()))
            .sum()
    }
    fn rings(p: &Polygon<f64>) -> f64 {
        length(p.exterior()) + p.interiors().iter().map(length).sum::<f64>()
    }
    fn polygon(p: &Polygon<f64>, edge: f64) -> Polygon<f64> {
        Polygon::new(
            split(p.exterior(), edge),
            p.interiors().iter().map(|r| split(r, edge)).collect(),
        )
    }
    // A collection's parts were each parsed on their own.
    let total = match &g {
        Geometry::LineString(x) => length(x),
        Geometry::Polygon(x) => rings(x),
        Geometry::MultiLineString(x) => x.iter().map(length).sum(),
        Geometry::MultiPolygon(x) => x.iter().map(rings).sum(),
        _ => return g,
    };
    if total.is_nan() || total <= MAX_EDGE_M {
        return g;
    }
    let edge = MAX_EDGE_M.max(total / MAX_ADDED_POINTS);
    let dense = match &g {
        Geometry::LineString(x) => Geometry::LineString(split(x, edge)),
        Geometry::Polygon(x) => Geometry::Polygon(polygon(x, edge)),
        Geometry::MultiLineString(x) => Geometry::MultiLineString(MultiLineString::new(
            x.iter().map(|l| split(l, edge)).collect(),
        )),
        Geometry::MultiPolygon(x) => Geometry::MultiPolygon(MultiPolygon::new(
            x.iter().map(|p| polygon(p, edge)).collect(),
        )),
        _ => return g,
    };
    if dense
        .coords_iter()
        .all(|c| c.x.is_finite() && c.y.is_finite())
    {
        dense
    } else {
        g
    }
}

/// `line` with each edge longer than `edge` metres (other than meridians
/// and the equator) split into equal parts along its great circle.
fn split(line: &LineString<f64>, edge: f64) -> LineString<f64> {
    use geo::{Distance, Haversine, InterpolatePoint};
    let mut out: Vec<Coord<f64>> = Vec::with_capacity(line.0.len());
    for l in line.lines() {
        out.push(l.start);
        let (a, b) = (l.start_point(), l.end_point());
        if a.x() == b.x() || (a.y() == 0.0 && b.y() == 0.0) {
            continue;
        }
        let parts = (Haversine::distance(a, b) / edge).ceil();
        // At most the whole line's length over `edge`: bounded.
        if parts.is_nan() || parts <= 1.0 {
            continue;
        }
        let parts = parts as u64;
        for i in 1..parts {
            let p = Haversine::point_at_ratio_between(a, b, i as f64 / parts as f64);
            out.push(p.0);
        }
    }
    if let Some(last) = line.0.last() {
        out.push(*last);
    }
    LineString::new(out)
}

/// The geometries a field's value holds: one value, or each element of
/// an array that is not itself a legacy pair (MongoDB indexes arrays of
/// geometries).
pub fn stored_values(v: &Bson) -> Result<Vec<Stored>, String> {
    match v {
        Bson::Array(items) if legacy_point(v).is_none() => items.iter().map(parse_stored).collect(),
        _ => Ok(vec![parse_stored(v)?]),
    }
}

// ---------------------------------------------------------------------------
// Query shapes.

/// The region of a `$geoWithin`.
#[derive(Debug, Clone, PartialEq)]
pub enum Region {
    /// `$geometry` Polygon or MultiPolygon: on the sphere.
    Geometry(Geometry<f64>),
    /// `$box`, `$polygon`: flat, in the plane of legacy pairs.
    Flat(Polygon<f64>),
    /// `$center`: flat circle.
    Center(Point<f64>, f64),
    /// `$centerSphere`: a cap, radius in radians.
    CenterSphere(Point<f64>, f64),
}

fn bad(msg: impl Into<String>) -> crate::error::Error {
    crate::error::Error::new(crate::error::ErrorCode::BadValue, msg.into())
}

fn shape_point(v: &Bson, what: &str) -> crate::error::Result<Point<f64>> {
    legacy_point(v).ok_or_else(|| bad(format!("{what}: point must be a pair of numbers: {v}")))
}

impl Region {
    /// Parses the argument of `$geoWithin` (or `$within`).
    pub fn parse(arg: &Bson) -> crate::error::Result<Region> {
        let Bson::Document(d) = arg else {
            return Err(bad(format!("$geoWithin needs an object, got {arg}")));
        };
        let Some((op, value)) = d.iter().next() else {
            return Err(bad("$geoWithin needs a shape"));
        };
        match op.as_str() {
            "$geometry" => {
                let Bson::Document(g) = value else {
                    return Err(bad(format!("$geometry must be an object: {value}")));
                };
                let geometry = parse_geojson(g).map_err(bad)?;
                match geometry {
                    Geometry::Polygon(_) | Geometry::MultiPolygon(_) => {
                        Ok(Region::Geometry(geometry))
                    }
                    _ => Err(bad(format!(
                        "$geoWithin not supported with provided geometry: {d}"
                    ))),
                }
            }
            "$box" => {
                let corners = match value {
                    Bson::Array(items) if items.len() == 2 => items,
                    _ => return Err(bad(format!("Point must be an array or object: {value}"))),
                };
                let a = shape_point(&corners[0], "$box")?;
                let b = shape_point(&corners[1], "$box")?;
                let rect = geo::Rect::new(a.0, b.0);
                Ok(Region::Flat(rect.to_polygon()))
            }
            "$polygon" => {
                let Bson::Array(items) = value else {
                    return Err(bad(format!("$polygon must be an array: {value}")));
                };
                if items.len() < 3 {
                    return Err(bad("Polygon must have at least 3 points"));
                }
                let points: Vec<Coord<f64>> = items
                    .iter()
                    .map(|p| shape_point(p, "$polygon").map(|p| p.0))
                    .collect::<crate::error::Result<_>>()?;
                Ok(Region::Flat(Polygon::new(
                    LineString::new(points),
                    Vec::new(),
                )))
            }
            "$center" | "$centerSphere" => {
                let (centre, radius) = match value {
                    Bson::Array(items) if items.len() == 2 => (
                        shape_point(&items[0], op)?,
                        number(&items[1])
                            .ok_or_else(|| bad("radius must be a non-negative number"))?,
                    ),
                    _ => {
                        return Err(bad(format!(
                            "{op} must be an array of a point and a radius"
                        )))
                    }
                };
                if radius.is_nan() || radius < 0.0 {
                    return Err(bad("radius must be a non-negative number"));
                }
                if op == "$center" {
                    Ok(Region::Center(centre, radius))
                } else {
                    if !(-180.0..=180.0).contains(&centre.x())
                        || !(-90.0..=90.0).contains(&centre.y())
                    {
                        return Err(bad("longitude/latitude is out of bounds"));
                    }
                    Ok(Region::CenterSphere(centre, radius))
                }
            }
            other => Err(bad(format!("unknown geo specifier: {other}: {value}"))),
        }
    }

    /// True when the stored geometry lies inside the region (its
    /// boundary included).
    pub fn contains(&self, stored: &Stored) -> bool {
        match self {
            Region::Geometry(g) => stored.geometry.relate(g).is_coveredby(),
            Region::Flat(p) => stored.point().is_some_and(|pt| pt.relate(p).is_coveredby()),
            Region::Center(c, r) => stored.point().is_some_and(|pt| flat_distance(&pt, c) <= *r),
            Region::CenterSphere(c, r) => vertices(&stored.geometry)
                .iter()
                .all(|v| sphere_radians(c, v) <= *r),
        }
    }

    /// The bounding box of the region, in the region's plane.
    pub fn bounds(&self) -> Option<Bounds> {
        match self {
            Region::Geometry(g) => g.bounding_rect().map(Bounds::of),
            Region::Flat(p) => p.bounding_rect().map(Bounds::of),
            Region::Center(c, r) => Some(Bounds {
                min_x: c.x() - r,
                max_x: c.x() + r,
                min_y: c.y() - r,
                max_y: c.y() + r,
            }),
            Region::CenterSphere(c, r) => Some(cap_bounds(c, *r)),
        }
    }

    /// True when the region is on the sphere (a `2dsphere` index's
    /// plane), false for the flat shapes of `2d`.
    pub fn spherical(&self) -> bool {
        matches!(self, Region::Geometry(_) | Region::CenterSphere(..))
    }
}

/// Every vertex of a geometry.
fn vertices(g: &Geometry<f64>) -> Vec<Point<f64>> {
    use geo::CoordsIter;
    g.coords_iter().map(Point::from).collect()
}

/// Parses the argument of `$geoIntersects`: `{$geometry: GeoJSON}`.
pub fn parse_intersects(arg: &Bson) -> crate::error::Result<Geometry<f64>> {
    let geometry = match arg {
        Bson::Document(d) => match d.get("$geometry") {
            Some(Bson::Document(g)) => g,
            _ => {
                return Err(bad(format!(
                    "$geoIntersects not supported with provided geometry: {arg}"
                )))
            }
        },
        _ => return Err(bad(format!("$geoIntersects needs an object, got {arg}"))),
    };
    parse_geojson(geometry).map_err(bad)
}

pub fn intersects(query: &Geometry<f64>, stored: &Stored) -> bool {
    stored.geometry.relate(query).is_intersects()
}

// ---------------------------------------------------------------------------
// Near points and distances.

/// How distances are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// On the sphere, in metres (a GeoJSON point).
    Metres,
    /// On the sphere, in radians (a legacy pair with `$nearSphere` or
    /// `spherical: true`).
    Radians,
    /// In the plane of legacy pairs.
    Flat,
}

/// The point of a `$near`/`$nearSphere`/`$geoNear` and its bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Near {
    pub point: Point<f64>,
    pub metric: Metric,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

impl Near {
    /// Parses `$near`/`$nearSphere`: `{$geometry: Point, $minDistance,
    /// $maxDistance}`, or a legacy pair with a sibling `$maxDistance`
    /// (given in `siblings`).
    pub fn parse(op: &str, arg: &Bson, siblings: &Document) -> crate::error::Result<Near> {
        let sphere = op == "$nearSphere";
        let mut min = None;
        let mut max = None;
        let distance = |name: &str, v: &Bson| -> crate::error::Result<f64> {
            match number(v) {
                Some(n) if n >= 0.0 => Ok(n),
                Some(_) => Err(bad(format!("{name} must be non-negative"))),
                None => Err(bad(format!("{name} must be a number"))),
            }
        };
        let (point, metric) = match arg {
            Bson::Document(d) if d.contains_key("$geometry") => {
                for (k, v) in d {
                    match k.as_str() {
                        "$geometry" => {}
                        "$minDistance" => min = Some(distance(k, v)?),
                        "$maxDistance" => max = Some(distance(k, v)?),
                        other => {
                            return Err(bad(format!("invalid argument in geo near query: {other}")))
                        }
                    }
                }
                let Some(Bson::Document(g)) = d.get("$geometry") else {
                    return Err(bad("$geometry must be an object"));
                };
                match parse_geojson(g) {
                    Ok(Geometry::Point(p)) => (p, Metric::Metres),
                    _ => {
                        return Err(bad(format!(
                            "invalid point in geo near query $geometry argument: {g}"
                        )))
                    }
                }
            }
            _ => {
                let p =
                    legacy_point(arg).ok_or_else(|| bad(format!("near must be a point: {arg}")))?;
                (
                    p,
                    if sphere {
                        Metric::Radians
                    } else {
                        Metric::Flat
                    },
                )
            }
        };
        for (k, v) in siblings {
            match k.as_str() {
                "$maxDistance" => max = Some(distance(k, v)?),
                "$minDistance" => min = Some(distance(k, v)?),
                _ => {}
            }
        }
        if metric != Metric::Flat
            && (!(-180.0..=180.0).contains(&point.x()) || !(-90.0..=90.0).contains(&point.y()))
        {
            return Err(bad("longitude/latitude is out of bounds"));
        }
        Ok(Near {
            point,
            metric,
            min,
            max,
        })
    }

    /// The distance from the point to the nearest part of `stored`.
    pub fn distance(&self, stored: &Stored) -> f64 {
        let target = nearest_point(&stored.geometry, &self.point);
        match self.metric {
            Metric::Flat => flat_distance(&self.point, &target),
            Metric::Radians => sphere_radians(&self.point, &target),
            Metric::Metres => sphere_radians(&self.point, &target) * EARTH_RADIUS_M,
        }
    }

    /// The smallest distance to any geometry of the value, if within the
    /// bounds.
    pub fn distance_within(&self, value: &Bson) -> Option<(f64, Point<f64>)> {
        let stored = stored_values(value).ok()?;
        let best = stored
            .iter()
            .filter(|s| self.metric == Metric::Flat || !s.legacy || self.within_sphere(s))
            .map(|s| (self.distance(s), nearest_point(&s.geometry, &self.point)))
            .min_by(|a, b| a.0.total_cmp(&b.0))?;
        let ok = self.min.is_none_or(|m| best.0 >= m) && self.max.is_none_or(|m| best.0 <= m);
        ok.then_some(best)
    }

    fn within_sphere(&self, s: &Stored) -> bool {
        s.point()
            .is_some_and(|p| (-180.0..=180.0).contains(&p.x()) && (-90.0..=90.0).contains(&p.y()))
    }

    /// The bounding box of the points within `radius` (in this metric).
    pub fn bounds_within(&self, radius: f64) -> Bounds {
        match self.metric {
            Metric::Flat => Bounds {
                min_x: self.point.x() - radius,
                max_x: self.point.x() + radius,
                min_y: self.point.y() - radius,
                max_y: self.point.y() + radius,
            },
            Metric::Radians => cap_bounds(&self.point, radius),
            Metric::Metres => cap_bounds(&self.point, radius / EARTH_RADIUS_M),
        }
    }
}

/// The point of `g` nearest to `p`, in the longitude/latitude plane.
fn nearest_point(g: &Geometry<f64>, p: &Point<f64>) -> Point<f64> {
    if let Geometry::Point(q) = g {
        return *q;
    }
    if g.relate(p).is_contains() || g.relate(p).is_covers() {
        return *p;
    }
    let closest = match g {
        Geometry::Point(q) => Closest::SinglePoint(*q),
        Geometry::LineString(l) => l.closest_point(p),
        Geometry::Polygon(x) => x.closest_point(p),
        Geometry::MultiPoint(x) => x.closest_point(p),
        Geometry::MultiLineString(x) => x.closest_point(p),
        Geometry::MultiPolygon(x) => x.closest_point(p),
        Geometry::GeometryCollection(x) => x.closest_point(p),
        Geometry::Line(x) => x.closest_point(p),
        Geometry::Rect(x) => x.closest_point(p),
        Geometry::Triangle(x) => x.closest_point(p),
    };
    match closest {
        Closest::Intersection(q) | Closest::SinglePoint(q) => q,
        Closest::Indeterminate => *p,
    }
}

/// The distance in the plane of legacy pairs.
fn flat_distance(a: &Point<f64>, b: &Point<f64>) -> f64 {
    (a.x() - b.x()).hypot(a.y() - b.y())
}

/// The great-circle angle between two longitude/latitude points, in
/// radians (haversine).
pub fn sphere_radians(a: &Point<f64>, b: &Point<f64>) -> f64 {
    let (lat1, lat2) = (a.y().to_radians(), b.y().to_radians());
    let dlat = lat2 - lat1;
    let dlon = (b.x() - a.x()).to_radians();
    let h = (dlat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (dlon / 2.0).sin().powi(2);
    2.0 * h.sqrt().min(1.0).asin()
}

/// The longitude/latitude box around a cap of `radius` radians; the
/// whole longitude range when it reaches a pole or the antimeridian.
fn cap_bounds(c: &Point<f64>, radius: f64) -> Bounds {
    let dlat = radius.to_degrees();
    let min_y = c.y() - dlat;
    let max_y = c.y() + dlat;
    if min_y <= -90.0 || max_y >= 90.0 {
        return Bounds {
            min_x: -180.0,
            max_x: 180.0,
            min_y: min_y.max(-90.0),
            max_y: max_y.min(90.0),
        };
    }
    let widest = c.y().abs() + dlat;
    let dlon = (radius.sin() / widest.to_radians().cos())
        .min(1.0)
        .asin()
        .to_degrees();
    let (min_x, max_x) = (c.x() - dlon, c.x() + dlon);
    if min_x < -180.0 || max_x > 180.0 || radius >= std::f64::consts::FRAC_PI_2 {
        return Bounds {
            min_x: -180.0,
            max_x: 180.0,
            min_y,
            max_y,
        };
    }
    Bounds {
        min_x,
        max_x,
        min_y,
        max_y,
    }
}

// ---------------------------------------------------------------------------
// Query operators.

/// One geo condition of a filter.
#[derive(Debug, Clone, PartialEq)]
pub enum GeoPredicate {
    Within(Region),
    Intersects(Geometry<f64>),
    Near(Near),
}

impl GeoPredicate {
    /// Parses `$geoWithin` (`$within`), `$geoIntersects`, `$near`,
    /// `$nearSphere` (`$geoNear`, its old name); `siblings` holds a
    /// legacy `$maxDistance`/`$minDistance`.
    pub fn parse(op: &str, arg: &Bson, siblings: &Document) -> crate::error::Result<GeoPredicate> {
        Ok(match op {
            "$geoWithin" | "$within" => GeoPredicate::Within(Region::parse(arg)?),
            "$geoIntersects" => GeoPredicate::Intersects(parse_intersects(arg)?),
            "$nearSphere" => GeoPredicate::Near(Near::parse(op, arg, siblings)?),
            _ => GeoPredicate::Near(Near::parse("$near", arg, siblings)?),
        })
    }

    /// True when a value at the path meets the condition: one of the
    /// geometries it holds (an array may hold several) does. Values that
    /// are no geometry never match.
    pub fn matches(&self, value: &Bson) -> bool {
        let Ok(stored) = stored_values(value) else {
            return false;
        };
        match self {
            GeoPredicate::Within(region) => stored.iter().any(|s| region.contains(s)),
            GeoPredicate::Intersects(g) => stored.iter().any(|s| intersects(g, s)),
            GeoPredicate::Near(near) => near.distance_within(value).is_some(),
        }
    }

    pub fn near(&self) -> Option<&Near> {
        match self {
            GeoPredicate::Near(n) => Some(n),
            _ => None,
        }
    }

    /// The box in which every match lies, in the plane the condition
    /// measures in, when it is bounded.
    pub fn bounds(&self) -> Option<Bounds> {
        match self {
            GeoPredicate::Within(r) => r.bounds(),
            GeoPredicate::Intersects(g) => g.bounding_rect().map(Bounds::of),
            GeoPredicate::Near(n) => n.max.map(|m| n.bounds_within(m)),
        }
    }

    /// True when measured on the sphere (GeoJSON, `$centerSphere`,
    /// `$nearSphere`).
    pub fn spherical(&self) -> bool {
        match self {
            GeoPredicate::Within(r) => r.spherical(),
            GeoPredicate::Intersects(_) => true,
            GeoPredicate::Near(n) => n.metric != Metric::Flat,
        }
    }
}

// ---------------------------------------------------------------------------
// Cells.

/// An axis-aligned box in a cell plane.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub min_x: f64,
    pub max_x: f64,
    pub min_y: f64,
    pub max_y: f64,
}

impl Bounds {
    fn of(r: geo::Rect<f64>) -> Bounds {
        Bounds {
            min_x: r.min().x,
            max_x: r.max().x,
            min_y: r.min().y,
            max_y: r.max().y,
        }
    }
}

/// The plane a geo index divides into cells.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CellPlane {
    pub min_x: f64,
    pub max_x: f64,
    pub min_y: f64,
    pub max_y: f64,
}

impl CellPlane {
    /// Longitude/latitude, for `2dsphere`.
    pub const SPHERE: CellPlane = CellPlane {
        min_x: -180.0,
        max_x: 180.0,
        min_y: -90.0,
        max_y: 90.0,
    };

    /// `min..max` on both axes, for `2d`.
    pub fn flat(min: f64, max: f64) -> CellPlane {
        CellPlane {
            min_x: min,
            max_x: max,
            min_y: min,
            max_y: max,
        }
    }

    /// True when the point lies in the plane (`max` excluded for `2d`,
    /// as MongoDB's bounds are).
    pub fn holds(&self, p: &Point<f64>) -> bool {
        p.x() >= self.min_x && p.x() <= self.max_x && p.y() >= self.min_y && p.y() <= self.max_y
    }

    /// Grid position of a coordinate at `level`, clamped to the plane.
    fn grid(&self, x: f64, y: f64, level: u32) -> (u64, u64) {
        let n = 1u64 << level;
        let scale = |v: f64, lo: f64, hi: f64| {
            let t = ((v - lo) / (hi - lo)).clamp(0.0, 1.0);
            ((t * n as f64) as u64).min(n - 1)
        };
        (
            scale(x, self.min_x, self.max_x),
            scale(y, self.min_y, self.max_y),
        )
    }

    /// The finest cell holding a point.
    pub fn point_cell(&self, p: &Point<f64>) -> i64 {
        let (i, j) = self.grid(p.x(), p.y(), MAX_LEVEL);
        cell_id(i, j, MAX_LEVEL)
    }

    /// The cells at one level that cover a box: the level is the finest
    /// at which at most `max_cells` cells do.
    pub fn covering(&self, b: &Bounds, max_cells: usize) -> Vec<i64> {
        let mut level = MAX_LEVEL;
        loop {
            let (i0, j0) = self.grid(b.min_x, b.min_y, level);
            let (i1, j1) = self.grid(b.max_x, b.max_y, level);
            let count = (i1 - i0 + 1).saturating_mul(j1 - j0 + 1);
            if count as usize <= max_cells || level == 0 {
                let mut out = Vec::with_capacity(count as usize);
                for i in i0..=i1 {
                    for j in j0..=j1 {
                        out.push(cell_id(i, j, level));
                    }
                }
                out.sort_unstable();
                return out;
            }
            level -= 1;
        }
    }

    /// The cells a stored geometry is indexed under: its point's finest
    /// cell, or a few cells covering its bounding box.
    pub fn cells_of(&self, g: &Geometry<f64>) -> Vec<i64> {
        match g {
            Geometry::Point(p) => vec![self.point_cell(p)],
            other => other
                .bounding_rect()
                .map(|r| self.covering(&Bounds::of(r), 8))
                .unwrap_or_default(),
        }
    }
}

/// Interleaves the bits of `i` and `j` (`level` bits each) and marks the
/// level.
fn cell_id(i: u64, j: u64, level: u32) -> i64 {
    let mut morton = 0u64;
    for bit in 0..level {
        morton |= ((i >> bit) & 1) << (2 * bit + 1);
        morton |= ((j >> bit) & 1) << (2 * bit);
    }
    let shift = 2 * (MAX_LEVEL - level);
    (((morton << 1) | 1) << shift) as i64
}

fn lowest_bit(cell: i64) -> i64 {
    cell & cell.wrapping_neg()
}

/// The level of a cell id.
pub fn cell_level(cell: i64) -> u32 {
    MAX_LEVEL - lowest_bit(cell).trailing_zeros() / 2
}

/// The ids of every cell inside `cell`, itself included.
pub fn descendant_range(cell: i64) -> (i64, i64) {
    let lsb = lowest_bit(cell);
    (cell - lsb + 1, cell + lsb - 1)
}

/// The cells strictly containing `cell`, coarsest first.
pub fn ancestors(cell: i64) -> Vec<i64> {
    let level = cell_level(cell);
    (0..level)
        .map(|l| {
            let lsb = 1i64 << (2 * (MAX_LEVEL - l));
            (cell & !(2 * lsb - 1)) | lsb
        })
        .collect()
}

/// The id ranges (inclusive) an index scan reads for a region covered by
/// `cells`: every cell inside one of them, and every coarser cell
/// containing one (larger geometries are indexed there), merged.
pub fn scan_ranges(cells: &[i64]) -> Vec<(i64, i64)> {
    let mut ranges: Vec<(i64, i64)> = Vec::new();
    for &c in cells {
        ranges.push(descendant_range(c));
        for a in ancestors(c) {
            ranges.push((a, a));
        }
    }
    ranges.sort_unstable();
    let mut merged: Vec<(i64, i64)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match merged.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{bson, doc};

    fn stored(v: Bson) -> Stored {
        parse_stored(&v).unwrap()
    }

    #[test]
    fn polygon_edges_follow_great_circles() {
        // The top edge runs from (90, 60) to (0, 60): on the sphere it
        // bulges towards the pole, to about 67.8° at longitude 45, so
        // (45, 63) is inside the polygon and (45, 70) is not; a straight
        // edge in the plane would leave (45, 63) out.
        let region = Region::parse(&bson!({"$geometry": {"type": "Polygon", "coordinates": [
            [[0.0, 0.0], [90.0, 0.0], [90.0, 60.0], [0.0, 60.0], [0.0, 0.0]]
        ]}}))
        .unwrap();
        assert!(region.contains(&stored(
            bson!({"type": "Point", "coordinates": [45.0, 63.0]})
        )));
        assert!(!region.contains(&stored(
            bson!({"type": "Point", "coordinates": [45.0, 70.0]})
        )));
        // The bounding box (and so the index cells read) holds the bulge.
        let top = region.bounds().unwrap().max_y;
        assert!((67.0..68.5).contains(&top), "{top}");
        // Short edges are left as they are.
        let small =
            parse_geojson(&doc! {"type": "LineString", "coordinates": [[0.0, 0.0], [0.01, 0.01]]})
                .unwrap();
        assert_eq!(geo::CoordsIter::coords_count(&small), 2);
    }

    #[test]
    fn parses_geojson_and_legacy_pairs() {
        assert!(stored(bson!([1, 2])).legacy);
        assert!(stored(bson!({"x": 1.5, "y": 2})).legacy);
        let p = stored(bson!({"type": "Point", "coordinates": [10, 20]}));
        assert_eq!(p.point(), Some(Point::new(10.0, 20.0)));
        let poly = bson!({"type": "Polygon", "coordinates": [
            [[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]],
            [[2, 2], [4, 2], [4, 4], [2, 4], [2, 2]]]});
        assert!(matches!(stored(poly).geometry, Geometry::Polygon(_)));
        let gc = bson!({"type": "GeometryCollection", "geometries": [
            {"type": "Point", "coordinates": [1, 1]},
            {"type": "LineString", "coordinates": [[0, 0], [1, 1]]}]});
        assert!(matches!(
            stored(gc).geometry,
            Geometry::GeometryCollection(_)
        ));
    }

    #[test]
    fn invalid_geometry_is_refused() {
        let bad = |v: Bson| parse_stored(&v).unwrap_err();
        assert!(bad(bson!({"type": "Point", "coordinates": [200, 0]})).contains("out of bounds"));
        assert!(bad(bson!({"type": "Point", "coordinates": ["a", 0]})).contains("numeric"));
        assert!(
            bad(bson!({"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 1]]]}))
                .contains("not closed")
        );
        assert!(bad(bson!({"type": "LineString", "coordinates": [[0, 0]]})).contains("2 vertices"));
        assert!(bad(bson!({"type": "Blob", "coordinates": []})).contains("unknown GeoJSON type"));
        assert!(bad(bson!("here")).contains("geo element"));
    }

    #[test]
    fn regions_contain_and_intersect() {
        let square = Region::parse(&bson!({"$geometry": {"type": "Polygon", "coordinates": [
            [[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]],
            [[2, 2], [4, 2], [4, 4], [2, 4], [2, 2]]]}}))
        .unwrap();
        let inside = stored(bson!({"type": "Point", "coordinates": [5, 5]}));
        let in_hole = stored(bson!({"type": "Point", "coordinates": [3, 3]}));
        assert!(square.contains(&inside));
        assert!(!square.contains(&in_hole));
        let b = Region::parse(&bson!({"$box": [[0, 0], [2, 2]]})).unwrap();
        assert!(b.contains(&stored(bson!([1, 1]))));
        assert!(b.contains(&stored(bson!([2, 2]))));
        assert!(!b.contains(&stored(bson!([3, 1]))));
        let c = Region::parse(&bson!({"$center": [[0, 0], 5]})).unwrap();
        assert!(c.contains(&stored(bson!([3, 4]))));
        assert!(!c.contains(&stored(bson!([4, 4]))));
        let cs = Region::parse(&bson!({"$centerSphere": [[0, 0], 0.1]})).unwrap();
        assert!(cs.contains(&stored(bson!([5, 0]))));
        assert!(!cs.contains(&stored(bson!([6, 0]))));
        // A meridian is a great circle and a straight line alike.
        let line = parse_intersects(&bson!({"$geometry": {"type": "LineString",
            "coordinates": [[5, -1], [5, 11]]}}))
        .unwrap();
        assert!(intersects(&line, &inside));
        assert!(!intersects(&line, &in_hole));
        // Along a parallel the great circle runs north of it: (5, 5) is
        // about 700 m south of the line from (-1, 5) to (11, 5).
        let parallel = parse_intersects(&bson!({"$geometry": {"type": "LineString",
            "coordinates": [[-1, 5], [11, 5]]}}))
        .unwrap();
        assert!(!intersects(&parallel, &inside));
        assert!(
            Region::parse(&bson!({"$geometry": {"type": "Point", "coordinates": [0, 0]}})).is_err()
        );
    }

    #[test]
    fn near_measures_in_its_units() {
        let n = Near::parse(
            "$near",
            &bson!({"$geometry": {"type": "Point", "coordinates": [0, 0]}, "$maxDistance": 200000}),
            &doc! {},
        )
        .unwrap();
        let one_degree = n.distance(&stored(bson!([1, 0])));
        assert!((one_degree - 111_318.8).abs() < 1.0, "{one_degree}");
        assert!(n.distance_within(&bson!([1, 0])).is_some());
        assert!(n.distance_within(&bson!([2, 0])).is_none());
        let flat = Near::parse("$near", &bson!([0, 0]), &doc! {"$maxDistance": 5}).unwrap();
        assert_eq!(flat.distance(&stored(bson!([3, 4]))), 5.0);
        let rad = Near::parse("$nearSphere", &bson!([0, 0]), &doc! {}).unwrap();
        assert!(
            (rad.distance(&stored(bson!([90, 0]))) - std::f64::consts::FRAC_PI_2).abs() < 1e-12
        );
    }

    #[test]
    fn cells_nest_and_cover() {
        let plane = CellPlane::SPHERE;
        let c = plane.point_cell(&Point::new(2.35, 48.85));
        assert_eq!(cell_level(c), MAX_LEVEL);
        let (lo, hi) = descendant_range(c);
        assert_eq!((lo, hi), (c, c));
        let cover = plane.covering(
            &Bounds {
                min_x: 2.0,
                max_x: 3.0,
                min_y: 48.0,
                max_y: 49.0,
            },
            16,
        );
        assert!(!cover.is_empty() && cover.len() <= 16);
        let ranges = scan_ranges(&cover);
        assert!(ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi));
        let far = plane.point_cell(&Point::new(-70.0, -30.0));
        assert!(!ranges.iter().any(|&(lo, hi)| lo <= far && far <= hi));
        // A polygon's coarse cells are found as ancestors of the query's.
        let big = plane.cells_of(
            &stored(bson!({"type": "Polygon", "coordinates":
            [[[0, 40], [10, 40], [10, 55], [0, 55], [0, 40]]]}))
            .geometry,
        );
        assert!(big
            .iter()
            .any(|&b| ranges.iter().any(|&(lo, hi)| lo <= b && b <= hi)));
        for a in ancestors(c) {
            let (lo, hi) = descendant_range(a);
            assert!(lo <= c && c <= hi);
        }
    }
}
