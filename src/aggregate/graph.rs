//! `$graphLookup`: a breadth-first search over another collection.
//!
//! For each input document the search starts from the values of
//! `startWith` and, level after level, reads the documents of `from`
//! whose `connectToField` equals one of the values on the frontier; the
//! `connectFromField` values of the documents found first at that level
//! make the next frontier. Each level is one read through
//! [`Context::aggregate`] of `{$match: {$and: [restrictSearchWithMatch,
//! {connectToField: {$in: frontier}}]}}` — the same path `$lookup` takes,
//! so the router targets the partitions owning those values when
//! `connectToField` is the foreign shard key, and uses an index on it.
//!
//! As MongoDB's `DocumentSourceGraphLookUp`: documents are told apart by
//! `_id` (a cycle ends when a level finds nothing new), `maxDepth` bounds
//! the levels, `depthField` records the level a document was first found
//! at (a long), and the visited documents plus the frontier may hold at
//! most the memory limit (40099). Results of earlier reads are kept in a
//! cache keyed by `connectToField` value and reused across input
//! documents, within what the visited documents leave of the limit.
//!
//! MongoDB leaves the order of the `as` array unspecified (a hash map's);
//! here it is by the level found at, then by `_id`, so it is the same
//! whether `from` is sharded or not.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::basic::eval;
use super::lookup::{set_path, validate_field_path};
use super::spill::{approx_size, doc_size};
use super::{Context, DocStream, ParseContext, Split, Stage, StageParser};
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::{compare, type_name, Number};
use crate::query::expr::Expr;
use crate::query::filter::Filter;
use crate::query::keystring::encode_value;
use crate::query::path::all_values;

/// This family's stages, sorted by name.
pub(super) static STAGES: &[(&str, StageParser)] = &[("$graphLookup", parse_graph_lookup)];

#[derive(Clone)]
struct GraphLookup {
    from: String,
    as_field: String,
    connect_from: Vec<String>,
    connect_from_spec: String,
    connect_to: String,
    start_with: Expr,
    start_with_spec: Bson,
    restrict: Option<Document>,
    depth_field: Option<String>,
    max_depth: Option<i64>,
    vars: Document,
}

fn parse_graph_lookup(arg: &Bson, pctx: &ParseContext) -> Result<Box<dyn Stage>> {
    let Bson::Document(spec) = arg else {
        return Err(Error::failed_to_parse(format!(
            "the $graphLookup stage specification must be an object, but found {}",
            type_name(arg)
        )));
    };
    // What MongoDB's lite parse checks first: `from`.
    let from = match spec.get("from") {
        None => {
            return Err(Error::failed_to_parse(format!(
                "missing 'from' option to $graphLookup stage specification: {spec}"
            )))
        }
        Some(Bson::String(s)) => {
            if s.is_empty() || s.starts_with('.') || s.contains('\0') || s.contains('$') {
                return Err(Error::new(
                    ErrorCode::InvalidNamespace,
                    format!("invalid $graphLookup namespace: {s}"),
                ));
            }
            s.clone()
        }
        Some(Bson::Document(d)) => {
            return Err(Error::failed_to_parse(format!(
                "$graphLookup with syntax {{from: {{db:<>, coll:<>}},..}} is not supported for \
                 db: {} and coll: {}",
                d.get_str("db").unwrap_or(""),
                d.get_str("coll").unwrap_or("")
            )))
        }
        Some(other) => {
            return Err(Error::failed_to_parse(format!(
                "$graphLookup 'from' field must be a string, but found {}",
                type_name(other)
            )))
        }
    };
    let mut as_field = String::new();
    let mut connect_from = String::new();
    let mut connect_to = String::new();
    let mut start_with = None;
    let mut depth_field = None;
    let mut max_depth = None;
    let mut restrict = None;
    for (name, value) in spec {
        match name.as_str() {
            "startWith" => {
                start_with = Some((Expr::parse(value)?, value.clone()));
            }
            "maxDepth" => max_depth = Some(parse_max_depth(value)?),
            "restrictSearchWithMatch" => {
                let Bson::Document(filter) = value else {
                    return Err(Error::new(
                        ErrorCode::GraphLookupRestrictNotObject,
                        format!(
                            "restrictSearchWithMatch must be an object, found {}",
                            type_name(value)
                        ),
                    ));
                };
                if let Err(e) = Filter::parse(filter) {
                    return Err(Error::new(
                        e.code,
                        format!(
                            "Failed to parse 'restrictSearchWithMatch' option to $graphLookup \
                             :: caused by :: {}",
                            e.message
                        ),
                    ));
                }
                restrict = Some(filter.clone());
            }
            "from" | "as" | "connectFromField" | "connectToField" | "depthField" => {
                let text = match value {
                    Bson::String(s) => s.clone(),
                    // An object passes the type check (it is how MongoDB
                    // names one internal namespace), then is no string.
                    Bson::Document(_) if name != "from" => {
                        return Err(Error::new(
                            ErrorCode::Location(13111),
                            format!("wrong type for field ({name}) 3 != 2"),
                        ))
                    }
                    Bson::Document(_) => continue,
                    other => {
                        return Err(Error::new(
                            ErrorCode::GraphLookupArgumentNotString,
                            format!(
                                "expected string as argument for {name}, found: {}",
                                type_name(other)
                            ),
                        ))
                    }
                };
                match name.as_str() {
                    "as" => as_field = text,
                    "connectFromField" => connect_from = text,
                    "connectToField" => connect_to = text,
                    "depthField" => {
                        field_path(&text)?;
                        depth_field = Some(text);
                    }
                    _ => {}
                }
            }
            _ => {
                return Err(Error::new(
                    ErrorCode::GraphLookupUnknownArgument,
                    format!("Unknown argument to $graphLookup: {name}"),
                ))
            }
        }
    }
    let Some((start_with, start_with_spec)) = start_with
        .filter(|_| !(as_field.is_empty() || connect_from.is_empty() || connect_to.is_empty()))
    else {
        return Err(Error::new(
            ErrorCode::GraphLookupMissingArgument,
            "$graphLookup requires 'from', 'as', 'startWith', 'connectFromField', and \
             'connectToField' to be specified.",
        ));
    };
    field_path(&as_field)?;
    field_path(&connect_from)?;
    field_path(&connect_to)?;
    Ok(Box::new(GraphLookup {
        from,
        as_field,
        connect_from: connect_from.split('.').map(str::to_string).collect(),
        connect_from_spec: connect_from,
        connect_to,
        start_with,
        start_with_spec,
        restrict,
        depth_field,
        max_depth,
        vars: pctx.vars.clone(),
    }))
}

/// A field path as MongoDB's `FieldPath` takes it.
fn field_path(path: &str) -> Result<()> {
    if path.is_empty() {
        return Err(Error::new(
            ErrorCode::EmptyFieldPath,
            "FieldPath cannot be constructed with empty string",
        ));
    }
    if path.contains('\0') {
        return Err(Error::new(
            ErrorCode::FieldPathNullByte,
            "FieldPath field names may not contain '\0'.",
        ));
    }
    validate_field_path(path)
}

/// `maxDepth`: a non-negative number with an exact `long` value.
fn parse_max_depth(value: &Bson) -> Result<i64> {
    let Some(n) = Number::of(value) else {
        return Err(Error::new(
            ErrorCode::GraphLookupMaxDepthNotNumber,
            format!("maxDepth must be numeric, found type: {}", type_name(value)),
        ));
    };
    // `safeNumberLong`: NaN is 0, out-of-range values clamp.
    let (long, exact) = match n {
        Number::Int32(i) => (i64::from(i), true),
        Number::Int64(i) => (i, true),
        Number::Double(_) | Number::Decimal(_) => {
            let f = n.to_f64();
            let long = if f.is_nan() {
                0
            } else if f >= 9.223_372_036_854_776e18 {
                i64::MAX
            } else if f < -9.223_372_036_854_776e18 {
                i64::MIN
            } else {
                f as i64
            };
            (long, long as f64 == f)
        }
    };
    if long < 0 {
        return Err(Error::new(
            ErrorCode::GraphLookupMaxDepthNegative,
            format!("maxDepth requires a nonnegative argument, found: {long}"),
        ));
    }
    if !exact {
        return Err(Error::new(
            ErrorCode::GraphLookupMaxDepthNotIntegral,
            format!("maxDepth could not be represented as a long long: {long}"),
        ));
    }
    Ok(long)
}

/// The key a value is told apart by: equal for values MongoDB compares
/// equal (`1`, `1.0`, `NumberLong(1)`).
fn key_of(value: &Bson) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(value, &mut out);
    out
}

/// Whether the documents a read for `value` returned are exactly those
/// whose `connectToField` holds it, so that a read finding none may be
/// remembered too: not for arrays (matched whole as well), regexes
/// (matched by pattern), null and undefined (matched by absence).
fn plain(value: &Bson) -> bool {
    matches!(
        value,
        Bson::Int32(_)
            | Bson::Int64(_)
            | Bson::Double(_)
            | Bson::Decimal128(_)
            | Bson::String(_)
            | Bson::ObjectId(_)
            | Bson::DateTime(_)
            | Bson::Boolean(_)
            | Bson::Timestamp(_)
    )
}

/// Documents of `from` already read, by `connectToField` value, across
/// the input documents of one run.
#[derive(Default)]
struct Cache {
    entries: HashMap<Vec<u8>, Vec<Arc<Document>>>,
    bytes: usize,
}

impl Cache {
    fn get(&self, value: &Bson) -> Option<&[Arc<Document>]> {
        self.entries.get(&key_of(value)).map(Vec::as_slice)
    }

    fn add(&mut self, key: Vec<u8>, doc: Option<Arc<Document>>) {
        if !self.entries.contains_key(&key) {
            self.bytes += 64 + key.len();
        }
        let entry = self.entries.entry(key).or_default();
        if let Some(doc) = doc {
            self.bytes += 16 + doc_size(&doc);
            entry.push(doc);
        }
    }

    /// Keeps the cache within what the search leaves of the limit: past
    /// it, everything goes (MongoDB evicts the least recently used).
    fn evict_down_to(&mut self, allowed: usize) {
        if self.bytes > allowed {
            self.entries.clear();
            self.bytes = 0;
        }
    }
}

/// The search for one input document.
struct Search<'a> {
    stage: &'a GraphLookup,
    ctx: &'a Arc<dyn Context>,
    limit: usize,
    /// Visited documents by `_id` key: the level found at, the `_id`, the
    /// document (with `depthField`).
    visited: HashMap<Vec<u8>, (i64, Bson, Document)>,
    visited_bytes: usize,
    frontier: Vec<Bson>,
    frontier_keys: HashSet<Vec<u8>>,
    frontier_bytes: usize,
}

impl Search<'_> {
    fn memory_check(&self) -> Result<()> {
        if self.visited_bytes + self.frontier_bytes >= self.limit {
            return Err(Error::new(
                ErrorCode::GraphLookupMemoryExceeded,
                "$graphLookup reached maximum memory consumption",
            ));
        }
        Ok(())
    }

    fn push_frontier(&mut self, value: Bson) {
        if self.frontier_keys.insert(key_of(&value)) {
            self.frontier_bytes += approx_size(&value);
            self.frontier.push(value);
        }
    }

    /// Records `doc` as found at `depth` unless its `_id` was seen;
    /// true when it is new (its `connectFromField` values then join the
    /// next frontier).
    fn visit(&mut self, doc: &Document, depth: i64) -> Result<bool> {
        let Some(id) = doc.get("_id") else {
            return Err(Error::new(
                ErrorCode::GraphLookupForeignMissingId,
                format!(
                    "Documents in the '{}.{}' namespace must contain an _id for \
                     de-duplication in $graphLookup",
                    self.ctx.db(),
                    self.stage.from
                ),
            ));
        };
        let key = key_of(id);
        if self.visited.contains_key(&key) {
            return Ok(false);
        }
        let mut doc = doc.clone();
        if let Some(field) = &self.stage.depth_field {
            set_path(&mut doc, field, Bson::Int64(depth));
        }
        let mut next = Vec::new();
        all_values(
            &Bson::Document(doc.clone()),
            &self.stage.connect_from,
            &mut next,
        );
        for value in next {
            self.push_frontier(value);
        }
        self.visited_bytes += approx_size(id) + doc_size(&doc);
        self.visited.insert(key, (depth, id.clone(), doc));
        self.memory_check()?;
        Ok(true)
    }

    /// The read for the values of `queried`, as MongoDB builds it.
    fn match_stage(&self, queried: &[Bson]) -> Document {
        let to = self.stage.connect_to.as_str();
        let mut and = Vec::new();
        if let Some(restrict) = &self.stage.restrict {
            and.push(Bson::Document(restrict.clone()));
        }
        and.push(Bson::Document(doc! { to: { "$in": queried.to_vec() } }));
        let null = queried.iter().any(|v| matches!(v, Bson::Null));
        let undefined = queried.iter().any(|v| matches!(v, Bson::Undefined));
        // A `$in` with null also matches a missing field and undefined.
        if null || undefined {
            and.push(Bson::Document(doc! { to: { "$exists": true } }));
            if !undefined {
                and.push(Bson::Document(
                    doc! { to: { "$not": { "$type": "undefined" } } },
                ));
            } else if !null {
                and.push(Bson::Document(doc! { to: { "$not": { "$type": "null" } } }));
            }
        }
        doc! { "$match": { "$and": and } }
    }

    fn run(&mut self, input: &Document, cache: &mut Cache) -> Result<Vec<Bson>> {
        let start = eval(&self.stage.start_with, input, &self.stage.vars)?;
        match start {
            Some(Bson::Array(items)) => {
                for item in items {
                    self.push_frontier(item);
                }
            }
            Some(value) => self.push_frontier(value),
            // A missing value matches nothing.
            None => {}
        }
        let to_path: Vec<&str> = self.stage.connect_to.split('.').collect();
        let mut depth = 0i64;
        loop {
            let frontier = std::mem::take(&mut self.frontier);
            self.frontier_keys.clear();
            self.frontier_bytes = 0;
            if frontier.is_empty() {
                break;
            }
            let mut found: Vec<Arc<Document>> = Vec::new();
            let mut queried: Vec<Bson> = Vec::new();
            let mut seen_cached: HashSet<Vec<u8>> = HashSet::new();
            for value in frontier {
                match cache.get(&value) {
                    Some(docs) => {
                        for d in docs {
                            let id_key = d.get("_id").map(key_of).unwrap_or_default();
                            if seen_cached.insert(id_key) {
                                found.push(d.clone());
                            }
                        }
                    }
                    None => queried.push(value),
                }
            }
            let mut any_new = false;
            for d in &found {
                any_new |= self.visit(d, depth)?;
            }
            if !queried.is_empty() {
                let stage = self.match_stage(&queried);
                let queried_keys: HashMap<Vec<u8>, &Bson> =
                    queried.iter().map(|v| (key_of(v), v)).collect();
                let mut hit: HashSet<Vec<u8>> = HashSet::new();
                let stream = self.ctx.aggregate(
                    self.ctx.db(),
                    &self.stage.from,
                    &[stage],
                    &self.stage.vars,
                )?;
                for d in stream {
                    let d = Arc::new(d?);
                    any_new |= self.visit(&d, depth)?;
                    // Cached under each queried value it holds.
                    let mut values = Vec::new();
                    if let Some((head, rest)) = to_path.split_first() {
                        if let Some(v) = d.get(*head) {
                            all_values(v, rest, &mut values);
                        }
                    }
                    let mut keys: Vec<Vec<u8>> = values
                        .iter()
                        .map(key_of)
                        .filter(|k| queried_keys.contains_key(k))
                        .collect();
                    keys.sort_unstable();
                    keys.dedup();
                    for key in keys {
                        hit.insert(key.clone());
                        cache.add(key, Some(d.clone()));
                    }
                }
                // A plain value that found nothing finds nothing again.
                for (key, value) in queried_keys {
                    if !hit.contains(&key) && plain(value) {
                        cache.add(key, None);
                    }
                }
            }
            self.memory_check()?;
            cache.evict_down_to(
                self.limit
                    .saturating_sub(self.visited_bytes + self.frontier_bytes),
            );
            depth += 1;
            if !any_new || self.stage.max_depth.is_some_and(|max| depth > max) {
                break;
            }
        }
        let mut results: Vec<(i64, Bson, Document)> =
            std::mem::take(&mut self.visited).into_values().collect();
        results.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| compare(&a.1, &b.1)));
        Ok(results
            .into_iter()
            .map(|(_, _, d)| Bson::Document(d))
            .collect())
    }
}

impl GraphLookup {
    fn lookup_one(
        &self,
        mut input: Document,
        ctx: &Arc<dyn Context>,
        cache: &mut Cache,
    ) -> Result<Document> {
        let mut search = Search {
            stage: self,
            ctx,
            limit: ctx.limits().max_blocking_bytes,
            visited: HashMap::new(),
            visited_bytes: 0,
            frontier: Vec::new(),
            frontier_keys: HashSet::new(),
            frontier_bytes: 0,
        };
        let found = search.run(&input, cache)?;
        set_path(&mut input, &self.as_field, Bson::Array(found));
        Ok(input)
    }
}

impl Stage for GraphLookup {
    fn name(&self) -> &'static str {
        "$graphLookup"
    }

    fn apply(&self, input: DocStream, ctx: &Arc<dyn Context>) -> Result<DocStream> {
        let this = self.clone();
        let ctx = Arc::clone(ctx);
        let mut cache = Cache::default();
        Ok(Box::new(input.map(move |doc| {
            doc.and_then(|doc| this.lookup_one(doc, &ctx, &mut cache))
        })))
    }

    /// At the router, over the merged stream: the search reads another
    /// collection, which only the router sees whole.
    fn split(&self) -> Split {
        Split::RouterOnly
    }

    fn explain(&self) -> Document {
        let mut spec = doc! {
            "from": self.from.clone(),
            "as": self.as_field.clone(),
            "connectToField": self.connect_to.clone(),
            "connectFromField": self.connect_from_spec.clone(),
            "startWith": self.start_with_spec.clone(),
        };
        if let Some(field) = &self.depth_field {
            spec.insert("depthField", field.clone());
        }
        if let Some(max) = self.max_depth {
            spec.insert("maxDepth", max);
        }
        if let Some(restrict) = &self.restrict {
            spec.insert("restrictSearchWithMatch", restrict.clone());
        }
        doc! { "$graphLookup": spec }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::lookup::test_support::{parse_error, run, FakeContext};
    use crate::aggregate::{Limits, Pipeline};

    fn employees() -> Vec<Document> {
        vec![
            doc! {"_id": 1, "name": "Dev"},
            doc! {"_id": 2, "name": "Eliot", "reportsTo": "Dev"},
            doc! {"_id": 3, "name": "Ron", "reportsTo": "Eliot"},
            doc! {"_id": 4, "name": "Andrew", "reportsTo": "Eliot"},
            doc! {"_id": 5, "name": "Asya", "reportsTo": "Ron"},
            doc! {"_id": 6, "name": "Dan", "reportsTo": "Andrew"},
        ]
    }

    fn airports() -> Vec<Document> {
        vec![
            doc! {"_id": 0, "airport": "JFK", "connects": ["BOS", "ORD"]},
            doc! {"_id": 1, "airport": "BOS", "connects": ["JFK", "PWM"]},
            doc! {"_id": 2, "airport": "ORD", "connects": ["JFK"]},
            doc! {"_id": 3, "airport": "PWM", "connects": ["BOS", "LHR"]},
            doc! {"_id": 4, "airport": "LHR", "connects": ["PWM"]},
        ]
    }

    fn ids(value: Option<&Bson>) -> Vec<i32> {
        match value {
            Some(Bson::Array(items)) => items
                .iter()
                .filter_map(|d| d.as_document().and_then(|d| d.get_i32("_id").ok()))
                .collect(),
            other => panic!("not an array: {other:?}"),
        }
    }

    fn hierarchy() -> Document {
        doc! {"$graphLookup": {"from": "employees", "startWith": "$reportsTo",
        "connectFromField": "reportsTo", "connectToField": "name", "as": "reportingHierarchy"}}
    }

    #[test]
    fn table_is_sorted() {
        assert!(STAGES.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn reporting_hierarchy_within_one_collection() {
        let ctx = FakeContext::new(&[("employees", employees())]);
        let out = run(&ctx, vec![hierarchy()], employees()).unwrap();
        let got: Vec<Vec<i32>> = out
            .iter()
            .map(|d| ids(d.get("reportingHierarchy")))
            .collect();
        // By the level found at: the manager first, the top last.
        assert_eq!(
            got,
            vec![
                vec![],
                vec![1],
                vec![2, 1],
                vec![2, 1],
                vec![3, 2, 1],
                vec![4, 2, 1]
            ]
        );
        assert_eq!(
            out[1].get_array("reportingHierarchy").unwrap()[0],
            Bson::Document(doc! {"_id": 1, "name": "Dev"})
        );
    }

    #[test]
    fn depth_field_max_depth_and_cycles() {
        let ctx = FakeContext::new(&[("airports", airports())]);
        let stage = doc! {"$graphLookup": {"from": "airports", "startWith": "$nearestAirport",
        "connectFromField": "connects", "connectToField": "airport", "maxDepth": 2,
        "depthField": "numConnections", "as": "destinations"}};
        let travelers = vec![
            doc! {"_id": 1, "name": "Dev", "nearestAirport": "JFK"},
            doc! {"_id": 3, "name": "Jeff", "nearestAirport": "BOS"},
        ];
        let out = run(&ctx, vec![stage], travelers).unwrap();
        let depths = |d: &Document| -> Vec<(i32, i64)> {
            d.get_array("destinations")
                .unwrap()
                .iter()
                .map(|x| {
                    let x = x.as_document().unwrap();
                    (
                        x.get_i32("_id").unwrap(),
                        x.get_i64("numConnections").unwrap(),
                    )
                })
                .collect()
        };
        assert_eq!(depths(&out[0]), [(0, 0), (1, 1), (2, 1), (3, 2)]);
        assert_eq!(depths(&out[1]), [(1, 0), (0, 1), (3, 1), (2, 2), (4, 2)]);
        // Without maxDepth the cycle JFK -> BOS -> JFK still ends.
        let stage = doc! {"$graphLookup": {"from": "airports", "startWith": "JFK",
        "connectFromField": "connects", "connectToField": "airport", "as": "all"}};
        let out = run(&ctx, vec![stage], vec![doc! {"_id": 1}]).unwrap();
        assert_eq!(ids(out[0].get("all")), [0, 1, 2, 3, 4]);
        // maxDepth 0 is one level.
        let stage = doc! {"$graphLookup": {"from": "airports", "startWith": ["JFK", "LHR"],
        "connectFromField": "connects", "connectToField": "airport", "as": "all",
        "maxDepth": 0}};
        let out = run(&ctx, vec![stage], vec![doc! {"_id": 1}]).unwrap();
        assert_eq!(ids(out[0].get("all")), [0, 4]);
    }

    #[test]
    fn restrict_search_with_match() {
        let people = vec![
            doc! {"_id": 1, "name": "Tanya Jordan", "friends": ["Shirley Soto", "Terry Hawkins", "Carole Hale"], "hobbies": ["tennis", "unicycling", "golf"]},
            doc! {"_id": 2, "name": "Carole Hale", "friends": ["Joseph Dennis", "Tanya Jordan", "Terry Hawkins"], "hobbies": ["archery", "golf", "woodworking"]},
            doc! {"_id": 3, "name": "Terry Hawkins", "friends": ["Tanya Jordan", "Carole Hale", "Angelo Ward"], "hobbies": ["knitting", "frisbee"]},
            doc! {"_id": 4, "name": "Joseph Dennis", "friends": ["Angelo Ward", "Carole Hale"], "hobbies": ["tennis", "golf", "topiary"]},
            doc! {"_id": 5, "name": "Angelo Ward", "friends": ["Terry Hawkins", "Shirley Soto", "Joseph Dennis"], "hobbies": ["travel", "ceramics", "golf"]},
            doc! {"_id": 6, "name": "Shirley Soto", "friends": ["Angelo Ward", "Tanya Jordan", "Carole Hale"], "hobbies": ["frisbee", "set theory"]},
        ];
        let ctx = FakeContext::new(&[("people", people.clone())]);
        let stage = doc! {"$graphLookup": {"from": "people", "startWith": "$friends",
        "connectFromField": "friends", "connectToField": "name", "as": "golfers",
        "restrictSearchWithMatch": {"hobbies": "golf"}}};
        let out = run(&ctx, vec![stage], vec![people[0].clone()]).unwrap();
        assert_eq!(ids(out[0].get("golfers")), [2, 1, 4, 5]);
    }

    #[test]
    fn reads_are_cached_across_input_documents() {
        let ctx = FakeContext::new(&[("employees", employees())]);
        run(&ctx, vec![hierarchy()], employees()).unwrap();
        let calls = ctx.calls.lock().unwrap();
        // Dev, Eliot, Ron, Andrew found once each; a missing start reads
        // nothing; "Dev"'s own missing reportsTo is no value at all.
        assert!(calls.len() <= 5, "{} reads", calls.len());
        assert_eq!(
            calls[0].1,
            vec![doc! {"$match": {"$and": [{"name": {"$in": ["Dev"]}}]}}]
        );
    }

    #[test]
    fn null_start_matches_null_but_not_missing() {
        let people = vec![
            doc! {"_id": 1, "k": null},
            doc! {"_id": 2},
            doc! {"_id": 3, "k": 1},
        ];
        let ctx = FakeContext::new(&[("p", people)]);
        let stage = doc! {"$graphLookup": {"from": "p", "startWith": null,
        "connectFromField": "x", "connectToField": "k", "as": "out"}};
        let out = run(&ctx, vec![stage], vec![doc! {"_id": 0}]).unwrap();
        assert_eq!(ids(out[0].get("out")), [1]);
        // Numbers are equal across types.
        let stage = doc! {"$graphLookup": {"from": "p", "startWith": 1.0,
        "connectFromField": "x", "connectToField": "k", "as": "out"}};
        let out = run(&ctx, vec![stage], vec![doc! {"_id": 0}]).unwrap();
        assert_eq!(ids(out[0].get("out")), [3]);
    }

    #[test]
    fn foreign_documents_need_an_id() {
        let ctx = FakeContext::new(&[("p", vec![doc! {"k": 1}])]);
        let stage = doc! {"$graphLookup": {"from": "p", "startWith": 1,
        "connectFromField": "x", "connectToField": "k", "as": "out"}};
        let e = run(&ctx, vec![stage], vec![doc! {"_id": 0}]).unwrap_err();
        assert_eq!(e.code.number(), 40271);
        assert_eq!(
            e.message,
            "Documents in the 'test.p' namespace must contain an _id for de-duplication in \
             $graphLookup"
        );
    }

    #[test]
    fn memory_limit_is_40099() {
        let chain: Vec<Document> = (0..200)
            .map(|i| doc! {"_id": i, "next": i + 1, "pad": "x".repeat(100)})
            .collect();
        let ctx = Arc::new(FakeContext {
            limits: Limits {
                max_blocking_bytes: 4096,
                ..FakeContext::new(&[]).limits.clone()
            },
            ..Arc::try_unwrap(FakeContext::new(&[("chain", chain)]))
                .ok()
                .unwrap()
        });
        let stage = doc! {"$graphLookup": {"from": "chain", "startWith": 0,
        "connectFromField": "next", "connectToField": "_id", "as": "all"}};
        let e = run(&ctx, vec![stage.clone()], vec![doc! {"_id": 0}]).unwrap_err();
        assert_eq!(e.code.number(), 40099);
        assert_eq!(e.message, "$graphLookup reached maximum memory consumption");
        // maxDepth keeps it within the limit.
        let mut bounded = stage.get_document("$graphLookup").unwrap().clone();
        bounded.insert("maxDepth", 5);
        let out = run(
            &ctx,
            vec![doc! {"$graphLookup": bounded}],
            vec![doc! {"_id": 0}],
        )
        .unwrap();
        assert_eq!(ids(out[0].get("all")), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn inside_facet_and_lookup() {
        let ctx = FakeContext::new(&[("employees", employees())]);
        let out = run(
            &ctx,
            vec![doc! {"$facet": {"h": [{"$match": {"_id": 5}}, hierarchy()]}}],
            employees(),
        )
        .unwrap();
        let h = out[0].get_array("h").unwrap()[0]
            .as_document()
            .unwrap()
            .clone();
        assert_eq!(ids(h.get("reportingHierarchy")), [3, 2, 1]);
        let out = run(
            &ctx,
            vec![doc! {"$lookup": {"from": "employees", "pipeline": [
            {"$match": {"_id": 6}}, hierarchy()], "as": "six"}}],
            vec![doc! {"_id": 0}],
        )
        .unwrap();
        let six = out[0].get_array("six").unwrap()[0]
            .as_document()
            .unwrap()
            .clone();
        assert_eq!(ids(six.get("reportingHierarchy")), [4, 2, 1]);
    }

    #[test]
    fn explain_is_mongodb_shape() {
        let stages = vec![Bson::Document(doc! {"$graphLookup": {"from": "e",
        "startWith": "$a", "connectFromField": "b", "connectToField": "c", "as": "d",
        "maxDepth": 2, "depthField": "n", "restrictSearchWithMatch": {"x": 1}}})];
        let p = Pipeline::parse(&stages, &ParseContext::default()).unwrap();
        assert_eq!(
            p.stages[0].explain(),
            doc! {"$graphLookup": {"from": "e", "as": "d", "connectToField": "c",
            "connectFromField": "b", "startWith": "$a", "depthField": "n",
            "maxDepth": 2i64, "restrictSearchWithMatch": {"x": 1}}}
        );
        assert!(matches!(p.stages[0].split(), Split::RouterOnly));
    }

    #[test]
    fn parse_errors_carry_mongodb_codes() {
        let base = doc! {"from": "e", "startWith": "$a", "connectFromField": "b",
        "connectToField": "c", "as": "d"};
        let with = |k: &str, v: Bson| {
            let mut d = base.clone();
            d.insert(k, v);
            d
        };
        let without = |k: &str| {
            let mut d = base.clone();
            d.remove(k);
            d
        };
        let cases: Vec<(Bson, i32, &str)> = vec![
            (Bson::Int32(1), 9, "the $graphLookup stage specification must be an object, but found int"),
            (without("from").into(), 9, ""),
            (with("from", Bson::Int32(1)).into(), 9, "$graphLookup 'from' field must be a string, but found int"),
            (with("from", Bson::String("".into())).into(), 73, ""),
            (without("as").into(), 40105, "$graphLookup requires 'from', 'as', 'startWith', 'connectFromField', and 'connectToField' to be specified."),
            (without("startWith").into(), 40105, ""),
            (without("connectFromField").into(), 40105, ""),
            (with("connectToField", Bson::String("".into())).into(), 40105, ""),
            (with("as", Bson::Int32(1)).into(), 40103, "expected string as argument for as, found: int"),
            (with("depthField", Bson::Boolean(true)).into(), 40103, ""),
            (with("bogus", Bson::Int32(1)).into(), 40104, "Unknown argument to $graphLookup: bogus"),
            (with("maxDepth", Bson::String("1".into())).into(), 40100, "maxDepth must be numeric, found type: string"),
            (with("maxDepth", Bson::Int32(-1)).into(), 40101, "maxDepth requires a nonnegative argument, found: -1"),
            (with("maxDepth", Bson::Double(1.5)).into(), 40102, "maxDepth could not be represented as a long long: 1"),
            (with("restrictSearchWithMatch", Bson::Int32(1)).into(), 40185, "restrictSearchWithMatch must be an object, found int"),
            (with("restrictSearchWithMatch", Bson::Document(doc! {"$bogus": 1})).into(), 2, ""),
            (with("as", Bson::String("$x".into())).into(), 16410, ""),
            (with("connectFromField", Bson::String("a..b".into())).into(), 15998, ""),
            (with("depthField", Bson::String("$n".into())).into(), 16410, ""),
        ];
        for (spec, code, message) in cases {
            let e = parse_error(vec![doc! {"$graphLookup": spec.clone()}]);
            assert_eq!(e.code.number(), code, "{spec}: {e}");
            if !message.is_empty() {
                assert_eq!(e.message, message, "{spec}");
            }
        }
        let e = parse_error(vec![doc! {"$graphLookup": with("restrictSearchWithMatch",
        Bson::Document(doc! {"$bogus": 1}))}]);
        assert!(e.message.starts_with(
            "Failed to parse 'restrictSearchWithMatch' option to $graphLookup :: caused by :: "
        ));
    }
}
