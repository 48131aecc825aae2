//! Grammar-based generation of what clients send: values, documents,
//! filters, updates, projections, sorts, stages and expressions.
//!
//! Random bytes almost never form a valid `$reduce`; a generator that
//! builds nested operator expressions from the server's own operator and
//! stage tables reaches the evaluation code at once. Everything stays
//! small (a few levels, a few elements): a target that blows up from a
//! small input is exactly what the runner is looking for.

use bson::{doc, oid::ObjectId, Binary, Bson, DateTime, Decimal128, Document, Regex, Timestamp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Field names the generated documents use, and paths into them.
const FIELDS: &[&str] = &[
    "a", "b", "c", "d", "s", "_id", "x", "a.b", "a.0", "c.1", "c.b", "d.e", "d.e.f", "arr",
];

/// Paths as update operators write them, positional forms included.
const UPDATE_PATHS: &[&str] = &[
    "a", "b", "c", "d.e", "c.0", "c.$", "c.$[]", "c.$[i]", "c.$[].b", "c.$[i].b", "a.b.c", "n",
    "c.5", "c.100000",
];

/// Variables an expression may read.
const VARIABLES: &[&str] = &[
    "$$ROOT",
    "$$CURRENT",
    "$$this",
    "$$value",
    "$$x",
    "$$NOW",
    "$$REMOVE",
    "$$ROOT.a",
];

const FILTER_OPERATORS: &[&str] = &[
    "$eq",
    "$ne",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$in",
    "$nin",
    "$exists",
    "$type",
    "$size",
    "$all",
    "$elemMatch",
    "$regex",
    "$mod",
    "$not",
    "$bitsAllSet",
    "$bitsAllClear",
    "$bitsAnySet",
    "$bitsAnyClear",
    "$options",
];

const UPDATE_OPERATORS: &[&str] = &[
    "$set",
    "$unset",
    "$inc",
    "$mul",
    "$min",
    "$max",
    "$rename",
    "$push",
    "$addToSet",
    "$pull",
    "$pullAll",
    "$pop",
    "$currentDate",
    "$bit",
    "$setOnInsert",
];

/// `$group` accumulators: the server's own list.
pub use shardgate::aggregate::ACCUMULATORS;

/// Operators whose argument is an object, with the keys MongoDB names.
const OBJECT_ARGUMENTS: &[(&str, &[&str])] = &[
    ("$cond", &["if", "then", "else"]),
    ("$convert", &["input", "to", "onError", "onNull"]),
    ("$dateAdd", &["startDate", "unit", "amount", "timezone"]),
    (
        "$dateDiff",
        &["startDate", "endDate", "unit", "timezone", "startOfWeek"],
    ),
    (
        "$dateFromParts",
        &[
            "year",
            "month",
            "day",
            "hour",
            "minute",
            "second",
            "millisecond",
            "timezone",
        ],
    ),
    (
        "$dateFromString",
        &["dateString", "format", "timezone", "onError", "onNull"],
    ),
    (
        "$dateSubtract",
        &["startDate", "unit", "amount", "timezone"],
    ),
    ("$dateToParts", &["date", "timezone", "iso8601"]),
    ("$dateToString", &["date", "format", "timezone", "onNull"]),
    (
        "$dateTrunc",
        &["date", "unit", "binSize", "timezone", "startOfWeek"],
    ),
    ("$filter", &["input", "as", "cond", "limit"]),
    ("$firstN", &["input", "n"]),
    ("$getField", &["field", "input"]),
    ("$lastN", &["input", "n"]),
    ("$let", &["vars", "in"]),
    ("$ltrim", &["input", "chars"]),
    ("$map", &["input", "as", "in"]),
    ("$maxN", &["input", "n"]),
    ("$minN", &["input", "n"]),
    ("$reduce", &["input", "initialValue", "in"]),
    ("$regexFind", &["input", "regex", "options"]),
    ("$regexFindAll", &["input", "regex", "options"]),
    ("$regexMatch", &["input", "regex", "options"]),
    ("$replaceAll", &["input", "find", "replacement"]),
    ("$replaceOne", &["input", "find", "replacement"]),
    ("$rtrim", &["input", "chars"]),
    ("$setField", &["field", "input", "value"]),
    ("$sortArray", &["input", "sortBy"]),
    ("$switch", &["branches", "default"]),
    ("$trim", &["input", "chars"]),
    ("$unsetField", &["field", "input"]),
    ("$zip", &["inputs", "useLongestLength", "defaults"]),
];

/// A source of generated client input, deterministic for a seed.
pub struct Gen {
    rng: StdRng,
    /// Nesting still allowed below the current node.
    budget: usize,
    operators: Vec<&'static str>,
    stages: Vec<&'static str>,
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen {
            rng: StdRng::seed_from_u64(seed),
            budget: 4,
            operators: shardgate::query::expr::operator_names().collect(),
            stages: shardgate::aggregate::stage_names().collect(),
        }
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.rng.random_range(0..n)
        }
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p.clamp(0.0, 1.0))
    }

    pub fn u64(&mut self) -> u64 {
        self.rng.random()
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Runs `f` one level deeper; at the bottom, `leaf` instead.
    fn nested<T>(&mut self, f: impl FnOnce(&mut Gen) -> T, leaf: impl FnOnce(&mut Gen) -> T) -> T {
        if self.budget == 0 {
            return leaf(self);
        }
        self.budget -= 1;
        let out = f(self);
        self.budget += 1;
        out
    }

    pub fn field(&mut self) -> String {
        self.pick(FIELDS).to_string()
    }

    /// Any word the grammars know: operator, stage or field names.
    pub fn word(&mut self) -> String {
        match self.below(6) {
            0 => self.pick(FILTER_OPERATORS).to_string(),
            1 => self.pick(UPDATE_OPERATORS).to_string(),
            2 => self.pick(ACCUMULATORS).to_string(),
            3 => {
                let i = self.below(self.stages.len());
                self.stages[i].to_string()
            }
            4 => {
                let i = self.below(self.operators.len());
                self.operators[i].to_string()
            }
            _ => self.field(),
        }
    }

    pub fn operator(&mut self) -> &'static str {
        let i = self.below(self.operators.len());
        self.operators[i]
    }

    pub fn string(&mut self) -> String {
        match self.below(12) {
            0 => String::new(),
            1 => "ab".into(),
            2 => "héllo wörld".into(),
            3 => "$a".into(),
            4 => self.pick(VARIABLES).to_string(),
            5 => "a.b".into(),
            6 => "x".repeat(self.below(300)),
            7 => "\u{10FFFF}\u{0}z".into(),
            8 => "%Y-%m-%dT%H:%M:%S.%LZ".into(),
            9 => "2024-02-29T12:00:00Z".into(),
            10 => self.word(),
            _ => [
                "day",
                "week",
                "month",
                "year",
                "hour",
                "UTC",
                "+05:30",
                "Europe/Paris",
            ][self.below(8)]
            .into(),
        }
    }

    /// A number from the edges where arithmetic and sizes go wrong.
    pub fn number(&mut self) -> Bson {
        match self.below(22) {
            0 => Bson::Int32(0),
            1 => Bson::Int32(1),
            2 => Bson::Int32(-1),
            3 => Bson::Int32(2),
            4 => Bson::Int32(30),
            5 => Bson::Int32(i32::MAX),
            6 => Bson::Int32(i32::MIN),
            7 => Bson::Int32(1_000_000),
            8 => Bson::Int64(i64::MAX),
            9 => Bson::Int64(i64::MIN),
            10 => Bson::Int64(1 << 53),
            11 => Bson::Double(f64::NAN),
            12 => Bson::Double(f64::INFINITY),
            13 => Bson::Double(f64::NEG_INFINITY),
            14 => Bson::Double(-0.0),
            15 => Bson::Double(1.5),
            16 => Bson::Double(1e308),
            17 => Bson::Double(5e-324),
            18 => Bson::Decimal128(
                [
                    "1",
                    "-0",
                    "NaN",
                    "Infinity",
                    "9.999999999999999999999999999999999E+6144",
                    "1E-6176",
                ][self.below(6)]
                .parse::<Decimal128>()
                .unwrap_or_else(|_| Decimal128::from_bytes([0; 16])),
            ),
            19 => Bson::Int32(self.rng.random_range(-5..100)),
            20 => Bson::Int64(self.rng.random_range(-5..100)),
            _ => Bson::Double(self.rng.random_range(-100.0..100.0)),
        }
    }

    pub fn scalar(&mut self) -> Bson {
        match self.below(16) {
            0..=5 => self.number(),
            6..=8 => Bson::String(self.string()),
            9 => Bson::Boolean(self.chance(0.5)),
            10 => Bson::Null,
            11 => Bson::DateTime(DateTime::from_millis(
                [
                    0,
                    -1,
                    i64::MAX,
                    i64::MIN,
                    1_700_000_000_000,
                    253_402_300_800_000,
                ][self.below(6)],
            )),
            12 => Bson::ObjectId(ObjectId::from_bytes([self.below(256) as u8; 12])),
            13 => {
                let pattern = ["^a", "b$", "(a|b)*c", "[", "x{2,}", ""][self.below(6)];
                let options = ["", "i", "ms", "x", "z"][self.below(5)];
                regex(pattern, options)
            }
            14 => Bson::Timestamp(Timestamp {
                time: self.below(3) as u32,
                increment: self.below(3) as u32,
            }),
            _ => match self.below(4) {
                0 => Bson::MinKey,
                1 => Bson::MaxKey,
                2 => Bson::Undefined,
                _ => Bson::Binary(Binary {
                    subtype: bson::spec::BinarySubtype::Generic,
                    bytes: vec![self.below(256) as u8; self.below(5)],
                }),
            },
        }
    }

    /// A value: mostly scalars, sometimes small arrays and documents.
    pub fn value(&mut self) -> Bson {
        match self.below(10) {
            0 | 1 => self.nested(
                |g| {
                    let n = g.below(5);
                    Bson::Array((0..n).map(|_| g.value()).collect())
                },
                Gen::scalar,
            ),
            2 => self.nested(|g| Bson::Document(g.document()), Gen::scalar),
            _ => self.scalar(),
        }
    }

    /// A small document with the fields the grammars name.
    pub fn document(&mut self) -> Document {
        let mut d = Document::new();
        for _ in 0..self.below(4) {
            let key = ["a", "b", "c", "d", "s", "e", "x"][self.below(7)];
            let value = self.value();
            d.insert(key, value);
        }
        d
    }

    /// A collection's worth of documents, each with an `_id`.
    pub fn documents(&mut self) -> Vec<Bson> {
        (0..1 + self.below(4))
            .map(|i| {
                let mut d = doc! {"_id": i as i32};
                d.extend(self.document());
                Bson::Document(d)
            })
            .collect()
    }

    /// An aggregation expression.
    pub fn expr(&mut self) -> Bson {
        match self.below(20) {
            0..=2 => self.scalar(),
            3..=5 => Bson::String(format!("${}", self.field())),
            6 => Bson::String(self.pick(VARIABLES).to_string()),
            7 => self.nested(
                |g| Bson::Array((0..g.below(4)).map(|_| g.expr()).collect()),
                Gen::scalar,
            ),
            8 => self.nested(
                |g| {
                    let mut d = Document::new();
                    for _ in 0..1 + g.below(2) {
                        let key = g.pick(&["a", "b", "k", "v"]).to_string();
                        let value = g.expr();
                        d.insert(key, value);
                    }
                    Bson::Document(d)
                },
                Gen::scalar,
            ),
            _ => self.nested(Gen::operator_expr, Gen::scalar),
        }
    }

    fn operator_expr(&mut self) -> Bson {
        if self.chance(0.05) {
            return self.fold();
        }
        let name = if self.chance(0.3) {
            // The operators that build strings and arrays are where
            // results grow; ask for them more often.
            *self.pick(&[
                "$concat",
                "$reduce",
                "$range",
                "$concatArrays",
                "$map",
                "$mergeObjects",
                "$replaceAll",
                "$zip",
                "$filter",
                "$setUnion",
                "$split",
                "$objectToArray",
                "$arrayToObject",
                "$reverseArray",
                "$slice",
                "$substrCP",
                "$toString",
            ])
        } else {
            self.operator()
        };
        let arg = match OBJECT_ARGUMENTS.iter().find(|(n, _)| *n == name) {
            Some((_, keys)) if self.chance(0.9) => self.object_argument(name, keys),
            _ => match self.below(4) {
                0 => self.expr(),
                _ => Bson::Array((0..self.below(4)).map(|_| self.expr()).collect()),
            },
        };
        Bson::Document(doc! {name: arg})
    }

    /// A `$reduce` whose step feeds the accumulated value back into
    /// itself: each step may double it.
    fn fold(&mut self) -> Bson {
        let n = if self.chance(0.7) {
            Bson::Int32(self.below(64) as i32)
        } else {
            self.number()
        };
        let (initial, step) = match self.below(5) {
            0 => (Bson::String("ab".into()), "$concat"),
            1 => (bson::bson!([1, "x"]), "$concatArrays"),
            2 => (bson::bson!({"k": "v"}), "$mergeObjects"),
            3 => (bson::bson!([[1]]), "$setUnion"),
            _ => (Bson::String("ab".into()), "$replaceAll"),
        };
        let step = if step == "$replaceAll" {
            doc! {step: {"input": "$$value", "find": "a", "replacement": "$$value"}}
        } else if step == "$mergeObjects" {
            doc! {step: ["$$value", {"$arrayToObject": [[{"k": {"$toString": "$$this"}, "v": "$$value"}]]}]}
        } else {
            doc! {step: ["$$value", "$$value"]}
        };
        Bson::Document(doc! {"$reduce": {
            "input": {"$range": [0, n]},
            "initialValue": initial,
            "in": step,
        }})
    }

    fn object_argument(&mut self, name: &str, keys: &[&str]) -> Bson {
        let mut d = Document::new();
        for key in keys {
            if !self.chance(0.85) {
                continue;
            }
            let value = match (name, *key) {
                (_, "as") => Bson::String(self.pick(&["this", "x", "value", "ROOT"]).to_string()),
                ("$let", "vars") => Bson::Document(doc! {"x": self.expr()}),
                ("$switch", "branches") => Bson::Array(
                    (0..self.below(3))
                        .map(|_| Bson::Document(doc! {"case": self.expr(), "then": self.expr()}))
                        .collect(),
                ),
                ("$sortArray", "sortBy") => {
                    if self.chance(0.5) {
                        Bson::Int32(if self.chance(0.5) { 1 } else { -1 })
                    } else {
                        Bson::Document(self.sort())
                    }
                }
                // Folds that feed their result back in are how a small
                // request asks for a huge value.
                ("$reduce", "input") | ("$map", "input") | ("$filter", "input")
                    if self.chance(0.5) =>
                {
                    let n = if self.chance(0.5) {
                        self.number()
                    } else {
                        Bson::Int32(self.below(40) as i32)
                    };
                    Bson::Document(doc! {"$range": [0, n]})
                }
                ("$reduce", "initialValue") if self.chance(0.6) => [
                    Bson::String("ab".into()),
                    bson::bson!([]),
                    bson::bson!([1, "x"]),
                    bson::bson!({"k": 1}),
                    Bson::Int32(1),
                ][self.below(5)]
                .clone(),
                ("$reduce", "in") | ("$map", "in") if self.chance(0.6) => {
                    let op = *self.pick(&[
                        "$concat",
                        "$concatArrays",
                        "$setUnion",
                        "$mergeObjects",
                        "$add",
                        "$multiply",
                        "$range",
                    ]);
                    let second = if self.chance(0.6) {
                        "$$value"
                    } else {
                        "$$this"
                    };
                    Bson::Document(doc! {op: ["$$value", second]})
                }
                ("$zip", "inputs") => {
                    Bson::Array((0..self.below(3)).map(|_| self.expr()).collect())
                }
                (_, "unit") => Bson::String(
                    [
                        "day",
                        "week",
                        "month",
                        "year",
                        "hour",
                        "minute",
                        "quarter",
                        "millisecond",
                    ][self.below(8)]
                    .into(),
                ),
                (_, "to") => Bson::String(
                    [
                        "int", "long", "double", "decimal", "string", "bool", "date", "objectId",
                    ][self.below(8)]
                    .into(),
                ),
                _ => self.expr(),
            };
            d.insert(*key, value);
        }
        Bson::Document(d)
    }

    /// A query filter.
    pub fn filter(&mut self) -> Document {
        let mut d = Document::new();
        for _ in 0..1 + self.below(2) {
            match self.below(10) {
                0 => {
                    let op = self.pick(&["$and", "$or", "$nor"]).to_string();
                    let arms = self.nested(
                        |g| {
                            (0..1 + g.below(3))
                                .map(|_| Bson::Document(g.filter()))
                                .collect()
                        },
                        |_| Vec::new(),
                    );
                    d.insert(op, Bson::Array(arms));
                }
                1 => {
                    let e = self.expr();
                    d.insert("$expr", e);
                }
                2..=4 => {
                    let (f, v) = (self.field(), self.value());
                    d.insert(f, v);
                }
                _ => {
                    let f = self.field();
                    let c = self.condition();
                    d.insert(f, c);
                }
            }
        }
        d
    }

    /// `{$op: arg, ...}` on one field.
    fn condition(&mut self) -> Bson {
        let mut c = Document::new();
        for _ in 0..1 + self.below(2) {
            let op = *self.pick(FILTER_OPERATORS);
            let arg = match op {
                "$in" | "$nin" | "$all" => {
                    Bson::Array((0..self.below(4)).map(|_| self.value()).collect())
                }
                "$elemMatch" => self.nested(
                    |g| {
                        if g.chance(0.5) {
                            Bson::Document(g.filter())
                        } else {
                            g.condition()
                        }
                    },
                    |_| Bson::Document(Document::new()),
                ),
                "$not" => self.nested(Gen::condition, |g| g.scalar()),
                "$exists" => Bson::Boolean(self.chance(0.5)),
                "$type" => {
                    if self.chance(0.5) {
                        Bson::String(
                            [
                                "number", "string", "array", "object", "null", "double", "int",
                            ][self.below(7)]
                            .into(),
                        )
                    } else {
                        self.number()
                    }
                }
                "$mod" => Bson::Array(vec![self.number(), self.number()]),
                "$regex" => regex("a|b", ""),
                _ => self.value(),
            };
            c.insert(op, arg);
        }
        Bson::Document(c)
    }

    /// An update: operators, sometimes a replacement or a pipeline.
    pub fn update(&mut self) -> Bson {
        match self.below(10) {
            0 => Bson::Document(self.document()),
            1 => Bson::Array(
                (0..1 + self.below(2))
                    .map(|_| {
                        let stage = *self.pick(&[
                            "$set",
                            "$addFields",
                            "$project",
                            "$unset",
                            "$replaceWith",
                        ]);
                        let arg = match stage {
                            "$unset" => Bson::String(self.field()),
                            "$replaceWith" => self.expr(),
                            _ => Bson::Document(doc! {self.field(): self.expr()}),
                        };
                        Bson::Document(doc! {stage: arg})
                    })
                    .collect(),
            ),
            _ => {
                let mut u = Document::new();
                for _ in 0..1 + self.below(2) {
                    let op = *self.pick(UPDATE_OPERATORS);
                    let mut fields = Document::new();
                    for _ in 0..1 + self.below(2) {
                        let path = self.pick(UPDATE_PATHS).to_string();
                        let arg = self.update_argument(op);
                        fields.insert(path, arg);
                    }
                    u.insert(op, fields);
                }
                Bson::Document(u)
            }
        }
    }

    fn update_argument(&mut self, op: &str) -> Bson {
        match op {
            "$push" | "$addToSet" if self.chance(0.5) => {
                let mut each =
                    doc! {"$each": Bson::Array((0..self.below(4)).map(|_| self.value()).collect())};
                if op == "$push" {
                    if self.chance(0.5) {
                        each.insert("$slice", self.number());
                    }
                    if self.chance(0.4) {
                        each.insert("$position", self.number());
                    }
                    if self.chance(0.4) {
                        each.insert(
                            "$sort",
                            if self.chance(0.5) {
                                Bson::Int32(1)
                            } else {
                                Bson::Document(self.sort())
                            },
                        );
                    }
                }
                Bson::Document(each)
            }
            "$pull" if self.chance(0.5) => self.condition(),
            "$rename" => Bson::String(self.pick(UPDATE_PATHS).to_string()),
            "$currentDate" => {
                if self.chance(0.5) {
                    Bson::Boolean(true)
                } else {
                    Bson::Document(doc! {"$type": "timestamp"})
                }
            }
            "$bit" => Bson::Document(doc! {*self.pick(&["and", "or", "xor"]): self.number()}),
            "$pop" => Bson::Int32(if self.chance(0.5) { 1 } else { -1 }),
            "$pullAll" => Bson::Array((0..self.below(3)).map(|_| self.value()).collect()),
            "$inc" | "$mul" => self.number(),
            _ => self.value(),
        }
    }

    /// `arrayFilters` for the `$[i]` paths.
    pub fn array_filters(&mut self) -> Vec<Bson> {
        (0..self.below(2))
            .map(|_| {
                let path = if self.chance(0.5) { "i" } else { "i.b" };
                let c = if self.chance(0.5) {
                    self.scalar()
                } else {
                    self.condition()
                };
                Bson::Document(doc! {path: c})
            })
            .collect()
    }

    pub fn projection(&mut self) -> Document {
        let mut d = Document::new();
        for _ in 0..1 + self.below(3) {
            let f = if self.chance(0.2) {
                format!("{}.$", self.field())
            } else {
                self.field()
            };
            let v = match self.below(8) {
                0 => Bson::Int32(0),
                1 | 2 => Bson::Int32(1),
                3 => Bson::Boolean(self.chance(0.5)),
                4 => Bson::Document(
                    doc! {"$slice": if self.chance(0.5) { self.number() } else { Bson::Array(vec![self.number(), self.number()]) }},
                ),
                5 => Bson::Document(doc! {"$elemMatch": self.filter()}),
                _ => self.expr(),
            };
            d.insert(f, v);
        }
        d
    }

    pub fn sort(&mut self) -> Document {
        let mut d = Document::new();
        for _ in 0..1 + self.below(3) {
            let v = match self.below(6) {
                0 => self.scalar(),
                1 => Bson::Document(doc! {"$meta": "textScore"}),
                2 | 3 => Bson::Int32(1),
                _ => Bson::Int32(-1),
            };
            d.insert(self.field(), v);
        }
        d
    }

    /// One pipeline stage, built from the server's stage table.
    pub fn stage(&mut self) -> Document {
        let i = self.below(self.stages.len());
        let name = self.stages[i];
        let arg = self.nested(|g| g.stage_argument(name), |g| g.scalar());
        doc! {name: arg}
    }

    fn stage_argument(&mut self, name: &str) -> Bson {
        match name {
            "$match" => Bson::Document(self.filter()),
            "$project" => Bson::Document(self.projection()),
            "$addFields" | "$set" => Bson::Document(doc! {self.field(): self.expr()}),
            "$unset" => Bson::String(self.field()),
            "$sort" => Bson::Document(self.sort()),
            "$limit" | "$skip" | "$sample" => {
                if name == "$sample" {
                    Bson::Document(doc! {"size": self.number()})
                } else {
                    self.number()
                }
            }
            "$count" => Bson::String("n".into()),
            "$unwind" => {
                let path = format!("${}", self.field());
                if self.chance(0.5) {
                    Bson::String(path)
                } else {
                    Bson::Document(
                        doc! {"path": path, "includeArrayIndex": "i", "preserveNullAndEmptyArrays": self.chance(0.5)},
                    )
                }
            }
            "$group" => {
                let mut g = doc! {"_id": self.expr()};
                for _ in 0..1 + self.below(2) {
                    let acc = *self.pick(ACCUMULATORS);
                    let arg = match acc {
                        "$top" | "$bottom" | "$topN" | "$bottomN" | "$firstN" | "$lastN"
                        | "$maxN" | "$minN" => {
                            let mut a = doc! {"output": self.expr(), "n": self.number()};
                            if acc.starts_with("$top") || acc.starts_with("$bottom") {
                                a.insert("sortBy", self.sort());
                            } else {
                                a.insert("input", self.expr());
                                a.remove("output");
                            }
                            Bson::Document(a)
                        }
                        "$count" => Bson::Document(Document::new()),
                        _ => self.expr(),
                    };
                    g.insert(self.pick(&["p", "q", "r"]).to_string(), doc! {acc: arg});
                }
                Bson::Document(g)
            }
            "$bucket" => Bson::Document(doc! {
                "groupBy": self.expr(),
                "boundaries": Bson::Array((0..self.below(4)).map(|_| self.number()).collect()),
                "default": "other",
            }),
            "$bucketAuto" => {
                Bson::Document(doc! {"groupBy": self.expr(), "buckets": self.number()})
            }
            "$sortByCount" | "$replaceWith" => self.expr(),
            "$replaceRoot" => Bson::Document(doc! {"newRoot": self.expr()}),
            "$facet" => Bson::Document(doc! {
                "f": Bson::Array((0..1 + self.below(2)).map(|_| Bson::Document(self.stage())).collect()),
            }),
            "$documents" => Bson::Array(self.documents()),
            "$lookup" => Bson::Document(doc! {
                "from": "c", "localField": self.field(), "foreignField": self.field(), "as": "j",
            }),
            "$unionWith" => Bson::Document(doc! {"coll": "c", "pipeline": [self.stage()]}),
            "$out" | "$merge" => Bson::String("out".into()),
            _ => self.value(),
        }
    }

    pub fn pipeline(&mut self) -> Vec<Bson> {
        (0..1 + self.below(3))
            .map(|_| Bson::Document(self.stage()))
            .collect()
    }

    /// A fragment of any grammar, for mutations that replace a node.
    pub fn fragment(&mut self) -> Bson {
        match self.below(8) {
            0 => self.expr(),
            1 => Bson::Document(self.filter()),
            2 => self.update(),
            3 => Bson::Document(self.stage()),
            4 => self.scalar(),
            5 => self.number(),
            6 => self.value(),
            _ => Bson::String(self.word()),
        }
    }
}

pub fn regex(pattern: &str, options: &str) -> Bson {
    // Both are free of NUL bytes, as CString requires.
    match (
        pattern.to_string().try_into(),
        options.to_string().try_into(),
    ) {
        (Ok(pattern), Ok(options)) => Bson::RegularExpression(Regex { pattern, options }),
        _ => Bson::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_input_encodes_and_stays_small() {
        let mut g = Gen::new(7);
        for _ in 0..2000 {
            let d = doc! {
                "pipeline": g.pipeline(), "filter": g.filter(), "update": g.update(),
                "expr": g.expr(), "docs": g.documents(),
            };
            let bytes = d.to_vec().unwrap();
            assert!(bytes.len() < 64 * 1024, "{} bytes", bytes.len());
        }
    }
}
