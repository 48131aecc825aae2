//! Search workloads, loaded and checked on the server under test; with a
//! comparison server (the ceiling, which stores nothing to search) the
//! same queries are also timed there, unchecked, so each can be read as a
//! fraction of what the wire allows:
//!
//! * `geo-near`: `--geo-docs` GeoJSON points spread over a box the size of
//!   Europe in `<db>.places`, with `{loc: "2dsphere"}`;
//!   `find({loc: {$near: {$geometry: P}}}).limit(10)` for random `P`.
//! * `text-search`: `--text-docs` documents in `<db>.articles` whose
//!   `title` (3 words) and `body` (30 words) come from a vocabulary of
//!   4,096 words drawn with a skewed (log-uniform) frequency, with
//!   `{title: "text", body: "text"}`; a two-word `$text` search sorted by
//!   `{$meta: "textScore"}`, limit 10.
//! * `collated-eq`: `--collation-docs` user names in mixed case in
//!   `<db>.users`, with a `{name: 1}` index (unique when unsharded) under
//!   `{locale: "en", strength: 2}`; `find({name: N})` with that collation,
//!   `N` the name in another case.
//!
//! Each loads its collection (sharded on `{_id: "hashed"}` over
//! `--search-partitions` partitions when that is not 0), builds the index
//! (its build time reported), explains one query with `executionStats`
//! (keys and documents examined against documents returned, printed on an
//! `EXAMINED` line), then times the query at concurrency 1 and each
//! `--concurrency` level. Every answer is checked: `$near` results must be
//! the points nearest first (and, for a few queries before timing, exactly
//! the ten nearest by brute force), `$text` results must be documents
//! holding a search word, as many as there are up to the limit, in
//! non-increasing score order, and a collated lookup must find exactly its
//! user. The ceiling's runs print `RESULT workload=<name>-ceiling-ratio`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::Collation;
use mongodb::Collection;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use crate::dataset::{mix, Generated};
use crate::indexes::print_run;
use crate::report::{self, CpuUse, Measurement, Outcome};
use crate::workload::{self, Deadlines, Target, TaskStats, Workload};
use crate::Args;

/// Results of one `$near` or `$text` query at most.
pub const SEARCH_LIMIT: usize = 10;
/// The radius MongoDB's spherical distances use, in metres.
const EARTH_RADIUS_M: f64 = 6_378_100.0;
/// The box points fall in: longitude and latitude ranges, in degrees.
const LNG: (f64, f64) = (-10.0, 30.0);
const LAT: (f64, f64) = (35.0, 60.0);
/// `$near` queries checked against a brute-force search before timing.
const BRUTE_FORCE_CHECKS: usize = 3;
/// Distances this close (in metres) may come in either order.
const DISTANCE_TOLERANCE_M: f64 = 0.01;
/// Words in the text vocabulary; words are three syllables of [`SYLLABLES`].
const VOCABULARY: usize = 4096;
/// Syllables ending in `a`, `o` or `u`, so that no stemmer cuts a word
/// (English suffixes end otherwise) and no word is a stop word.
const SYLLABLES: [&str; 16] = [
    "ka", "to", "mu", "ro", "na", "su", "pa", "do", "gu", "bo", "za", "fu", "ho", "ju", "wa", "yo",
];
const TITLE_WORDS: u64 = 3;
const BODY_WORDS: u64 = 30;

/// The collation of `collated-eq`'s index and queries.
fn case_insensitive() -> Collation {
    Collation::builder()
        .locale("en")
        .strength(mongodb::options::CollationStrength::Secondary)
        .build()
}

/// Fails on flags the search workloads cannot run with.
fn check_args(args: &Args) -> Result<(), String> {
    if args.geo_docs == 0 || args.text_docs == 0 || args.collation_docs == 0 {
        return Err("--geo-docs, --text-docs and --collation-docs must be at least 1".into());
    }
    if args.text_docs > u64::from(u32::MAX) {
        return Err("--text-docs must be below 2^32".into());
    }
    Ok(())
}

/// A uniform number in `0..1` from a hash.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1_u64 << 53) as f64
}

/// `[lng, lat]` in the box, from two hashes.
fn point_of(a: u64, b: u64) -> [f64; 2] {
    [
        LNG.0 + (LNG.1 - LNG.0) * unit(a),
        LAT.0 + (LAT.1 - LAT.0) * unit(b),
    ]
}

/// Great-circle distance in metres between two `[lng, lat]` points.
fn haversine_m(a: [f64; 2], b: [f64; 2]) -> f64 {
    let (lng1, lat1) = (a[0].to_radians(), a[1].to_radians());
    let (lng2, lat2) = (b[0].to_radians(), b[1].to_radians());
    let h = ((lat2 - lat1) / 2.0).sin().powi(2)
        + lat1.cos() * lat2.cos() * ((lng2 - lng1) / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_M * h.sqrt().min(1.0).asin()
}

/// `{_id: i, loc: {type: "Point", coordinates: [lng, lat]}}`.
pub struct Places {
    docs: u64,
    batch: usize,
    salt: u64,
}

impl Places {
    fn point(&self, i: u64) -> [f64; 2] {
        point_of(mix(self.salt ^ (2 * i)), mix(self.salt ^ (2 * i + 1)))
    }

    /// The distances of the `n` points nearest `p`, ascending.
    fn nearest(&self, p: [f64; 2], n: usize) -> Vec<f64> {
        let mut all: Vec<f64> = (0..self.docs)
            .map(|i| haversine_m(p, self.point(i)))
            .collect();
        all.sort_by(f64::total_cmp);
        all.truncate(n);
        all
    }
}

impl Generated for Places {
    fn docs(&self) -> u64 {
        self.docs
    }

    fn batch_size(&self) -> usize {
        self.batch
    }

    fn document(&self, i: u64) -> Document {
        let [lng, lat] = self.point(i);
        doc! { "_id": i as i64, "loc": { "type": "Point", "coordinates": [lng, lat] } }
    }
}

/// The `n`th word of the vocabulary.
fn word(n: usize) -> String {
    let s = SYLLABLES.len();
    [n % s, (n / s) % s, (n / s / s) % s]
        .iter()
        .map(|&i| SYLLABLES[i])
        .collect()
}

/// `{_id: i, title, body}`, words drawn log-uniformly from the vocabulary
/// (word `n` about `1/(n+1)` as often as word 0), and which documents hold
/// each word.
pub struct Articles {
    docs: u64,
    batch: usize,
    salt: u64,
    words: Vec<String>,
    /// For each word, the documents holding it, ascending.
    postings: Vec<Vec<u32>>,
}

impl Articles {
    fn new(docs: u64, batch: usize, seed: u64) -> Articles {
        let mut articles = Articles {
            docs,
            batch,
            salt: mix(seed ^ 0x7e47_0000),
            words: (0..VOCABULARY).map(word).collect(),
            postings: vec![Vec::new(); VOCABULARY],
        };
        for i in 0..docs {
            for w in 0..TITLE_WORDS + BODY_WORDS {
                let n = articles.word_at(i, w);
                let list = &mut articles.postings[n];
                // Checked by `check_args` to fit.
                let id = i as u32;
                if list.last() != Some(&id) {
                    list.push(id);
                }
            }
        }
        articles
    }

    /// The vocabulary number of word `w` of document `i`.
    fn word_at(&self, i: u64, w: u64) -> usize {
        let u = unit(mix(self.salt ^ (i * 64 + w)));
        // Log-uniform over 1..=VOCABULARY, minus one.
        let n = (VOCABULARY as f64).powf(u) as usize;
        n.saturating_sub(1).min(VOCABULARY - 1)
    }

    fn text(&self, i: u64, words: std::ops::Range<u64>) -> String {
        words
            .map(|w| self.words[self.word_at(i, w)].as_str())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The documents holding word `a` or word `b`.
    fn holding_either(&self, a: usize, b: usize) -> HashSet<i64> {
        self.postings[a]
            .iter()
            .chain(&self.postings[b])
            .map(|&i| i64::from(i))
            .collect()
    }
}

impl Generated for Articles {
    fn docs(&self) -> u64 {
        self.docs
    }

    fn batch_size(&self) -> usize {
        self.batch
    }

    fn document(&self, i: u64) -> Document {
        doc! {
            "_id": i as i64,
            "title": self.text(i, 0..TITLE_WORDS),
            "body": self.text(i, TITLE_WORDS..TITLE_WORDS + BODY_WORDS),
        }
    }
}

/// `{_id: i, name}` with `name` a unique user name in mixed case.
pub struct Users {
    docs: u64,
    batch: usize,
    salt: u64,
}

impl Users {
    /// The stored name of user `i`: `user<i>` with a hash choosing the
    /// case of each letter.
    fn name(&self, i: u64) -> String {
        let bits = mix(self.salt ^ i);
        format!("user{i:08}name")
            .chars()
            .enumerate()
            .map(|(k, c)| {
                if bits >> (k % 64) & 1 == 1 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect()
    }
}

impl Generated for Users {
    fn docs(&self) -> u64 {
        self.docs
    }

    fn batch_size(&self) -> usize {
        self.batch
    }

    fn document(&self, i: u64) -> Document {
        doc! { "_id": i as i64, "name": self.name(i) }
    }
}

/// One timed query of a search workload: the request for a random draw
/// and the check of its answer (`Ok(false)` for an empty answer).
type Query = Arc<
    dyn Fn(Collection<Document>, u64) -> BoxFuture<'static, Result<bool, String>> + Send + Sync,
>;

/// One search as sent: the same for the server under test (whose answer
/// is then checked) and for the ceiling (whose answer is not).
#[derive(Clone)]
struct Search {
    filter: Document,
    projection: Option<Document>,
    sort: Option<Document>,
    limit: Option<i64>,
    collation: Option<Collation>,
}

impl Search {
    async fn send(&self, coll: &Collection<Document>) -> Result<Vec<Document>, String> {
        let mut find = coll.find(self.filter.clone());
        if let Some(p) = &self.projection {
            find = find.projection(p.clone());
        }
        if let Some(s) = &self.sort {
            find = find.sort(s.clone());
        }
        if let Some(n) = self.limit {
            find = find.limit(n);
        }
        if let Some(c) = &self.collation {
            find = find.collation(c.clone());
        }
        find.await
            .map_err(|e| e.to_string())?
            .try_collect()
            .await
            .map_err(|e| e.to_string())
    }
}

/// A draw's search.
type MakeSearch = Arc<dyn Fn(u64) -> Search + Send + Sync>;

/// `make`'s searches, answers unchecked: what the ceiling runs.
fn unchecked(make: &MakeSearch) -> Query {
    let make = Arc::clone(make);
    Arc::new(move |coll, draw| {
        let search = make(draw);
        Box::pin(async move { search.send(&coll).await.map(|_| true) })
    })
}

/// The `$near` search of a point.
fn near_search(p: [f64; 2]) -> Search {
    Search {
        filter: doc! {
            "loc": { "$near": { "$geometry": { "type": "Point", "coordinates": [p[0], p[1]] } } }
        },
        projection: None,
        sort: None,
        limit: Some(SEARCH_LIMIT as i64),
        collation: None,
    }
}

/// The point of a draw.
fn near_point(draw: u64) -> [f64; 2] {
    point_of(mix(draw), mix(draw ^ 0xface))
}

/// The `$near` query and its check: results nearest first.
fn near_query(places: &Arc<Places>) -> Query {
    let places = Arc::clone(places);
    Arc::new(move |coll, draw| {
        let places = Arc::clone(&places);
        Box::pin(async move {
            let p = near_point(draw);
            let found = near(&coll, p).await?;
            check_ascending(&found)?;
            if found.len() != SEARCH_LIMIT.min(places.docs as usize) {
                return Err(format!(
                    "wrong answer: $near {p:?} limit {SEARCH_LIMIT} returned {} documents",
                    found.len()
                ));
            }
            Ok(true)
        })
    })
}

/// The distances of `$near`'s results, in the order returned.
async fn near(coll: &Collection<Document>, p: [f64; 2]) -> Result<Vec<f64>, String> {
    let docs = near_search(p).send(coll).await?;
    docs.iter()
        .map(|d| {
            let c = d
                .get_document("loc")
                .and_then(|l| l.get_array("coordinates"))
                .map_err(|e| format!("wrong answer: a result has no loc.coordinates: {e}"))?;
            match (
                c.first().and_then(Bson::as_f64),
                c.get(1).and_then(Bson::as_f64),
            ) {
                (Some(lng), Some(lat)) => Ok(haversine_m(p, [lng, lat])),
                _ => Err(format!("wrong answer: coordinates {c:?}")),
            }
        })
        .collect()
}

fn check_ascending(distances: &[f64]) -> Result<(), String> {
    match distances
        .windows(2)
        .find(|w| w[1] + DISTANCE_TOLERANCE_M < w[0])
    {
        Some(w) => Err(format!(
            "wrong answer: $near returned a point {:.3} m away after one {:.3} m away",
            w[1], w[0]
        )),
        None => Ok(()),
    }
}

/// The two search words of a draw, from the rarer seven eighths of the
/// vocabulary (each word held by about 100 to 800 documents per 100,000).
fn search_words(draw: u64) -> (usize, usize) {
    let pick = |x: u64| 512 + (mix(x) % (VOCABULARY as u64 - 512)) as usize;
    (pick(draw), pick(draw ^ 0xbeef))
}

/// The `$text` search of a draw's two words.
fn text_search_of(articles: &Articles, draw: u64) -> Search {
    let (a, b) = search_words(draw);
    Search {
        filter: doc! { "$text": { "$search": format!("{} {}", articles.words[a], articles.words[b]) } },
        projection: Some(doc! { "score": { "$meta": "textScore" } }),
        sort: Some(doc! { "score": { "$meta": "textScore" } }),
        limit: Some(SEARCH_LIMIT as i64),
        collation: None,
    }
}

/// The `$text` query and its check.
fn text_query(articles: &Arc<Articles>) -> Query {
    let articles = Arc::clone(articles);
    Arc::new(move |coll, draw| {
        let articles = Arc::clone(&articles);
        Box::pin(async move {
            let (a, b) = search_words(draw);
            let search = format!("{} {}", articles.words[a], articles.words[b]);
            let docs = text_search_of(&articles, draw).send(&coll).await?;
            let holding = articles.holding_either(a, b);
            let expected = holding.len().min(SEARCH_LIMIT);
            if docs.len() != expected {
                return Err(format!(
                    "wrong answer: $text {search:?} limit {SEARCH_LIMIT} returned {} documents, expected {expected}",
                    docs.len()
                ));
            }
            let mut last = f64::INFINITY;
            for d in &docs {
                let id = d
                    .get_i64("_id")
                    .map_err(|e| format!("wrong answer: _id: {e}"))?;
                if !holding.contains(&id) {
                    return Err(format!(
                        "wrong answer: $text {search:?} returned {id}, which holds neither word"
                    ));
                }
                let score = d
                    .get_f64("score")
                    .map_err(|e| format!("wrong answer: score: {e}"))?;
                if score > last {
                    return Err(format!(
                        "wrong answer: $text {search:?}: score {score} after {last}"
                    ));
                }
                last = score;
            }
            Ok(expected > 0)
        })
    })
}

/// A draw's user and the collated lookup of its name with every
/// letter's case flipped.
fn collated_search(users: &Users, draw: u64) -> (u64, String, Search) {
    let i = mix(draw) % users.docs;
    let asked: String = users
        .name(i)
        .chars()
        .map(|c| {
            if c.is_ascii_uppercase() {
                c.to_ascii_lowercase()
            } else {
                c.to_ascii_uppercase()
            }
        })
        .collect();
    let search = Search {
        filter: doc! { "name": &asked },
        projection: None,
        sort: None,
        limit: None,
        collation: Some(case_insensitive()),
    };
    (i, asked, search)
}

/// The collated lookup and its check.
fn collated_query(users: &Arc<Users>) -> Query {
    let users = Arc::clone(users);
    Arc::new(move |coll, draw| {
        let users = Arc::clone(&users);
        Box::pin(async move {
            let (i, asked, search) = collated_search(&users, draw);
            let docs = search.send(&coll).await?;
            match docs.as_slice() {
                [d] if d.get_i64("_id") == Ok(i as i64) => Ok(true),
                _ => Err(format!(
                    "wrong answer: find({{name: {asked:?}}}) with strength 2 returned {} documents, expected user {i}",
                    docs.len()
                )),
            }
        })
    })
}

/// Runs `query` for `duration` with `concurrency` tasks, with the server's
/// CPU use over the run when `--server-pid` (or `--rss-pid`) names it and
/// `target` is that server.
async fn timed(
    args: &Args,
    (target, is_server): (&Target, bool),
    (w, query): (Workload, &Query),
    concurrency: usize,
    duration: Duration,
    seed: u64,
) -> Result<Measurement, String> {
    target
        .warm_pool(concurrency)
        .await
        .map_err(|e| format!("{}: {}: {e}", target.label, w.name()))?;
    let pid = args.server_pid().filter(|_| is_server);
    let cpu_before = pid.map(report::read_cpu_secs);
    let start = Instant::now();
    let deadlines = Deadlines::after(start, duration);
    let mut set = JoinSet::new();
    for task in 0..concurrency {
        let coll = target.docs.clone();
        let query = Arc::clone(query);
        let seed = seed.wrapping_mul(1_000_003).wrapping_add(task as u64);
        set.spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut stats = TaskStats::new();
            while Instant::now() < deadlines.stop {
                let request = query(coll.clone(), rng.random());
                if !stats.attempt(deadlines, request).await {
                    break;
                }
            }
            stats
        });
    }
    let tasks = workload::join_all(set).await;
    let elapsed = start.elapsed();
    let mut m = workload::merge(target, w, concurrency, elapsed, tasks);
    if let (Some(pid), Some(Ok(before))) = (pid, cpu_before) {
        if let Ok(after) = report::read_cpu_secs(pid) {
            m.server_cpu = Some(CpuUse {
                pid,
                secs: after - before,
            });
        }
    }
    Ok(m)
}

/// Drops the collection (sharding it again when `--search-partitions` is
/// not 0), loads `data` and builds `index`, printing `SETUP` and `RESULT
/// ... workload=search-build` lines.
async fn prepare<G: Generated>(
    args: &Args,
    target: &Target,
    data: &Arc<G>,
    w: Workload,
    index: (Document, Document),
) -> Result<(), String> {
    let ns = target.namespace();
    let partitions = args.search_partitions;
    crate::indexes::fill(target, data, args.setup_load(), w, partitions).await?;
    let (key, options) = index;
    let mut spec = doc! { "key": key.clone(), "name": "search" };
    spec.extend(options);
    let started = Instant::now();
    target
        .client
        .database(&target.db)
        .run_command(doc! { "createIndexes": target.docs.name(), "indexes": [spec] })
        .await
        .map_err(|e| format!("{}: createIndexes {key} on {ns}: {e}", target.label))?;
    println!(
        "RESULT target={} workload=search-build ns={ns} index={key} docs={} partitions={partitions} secs={:.3}",
        target.label,
        data.docs(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A number in an explain reply, whatever its BSON type.
fn count(d: &Document, field: &str) -> Option<i64> {
    match d.get(field)? {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(n) => Some(*n as i64),
        _ => None,
    }
}

/// Explains `find` with `executionStats` and prints what it examined: the
/// totals of `executionStats`, summed over the partitions' own when the
/// reply has them per shard.
async fn print_examined(target: &Target, w: Workload, find: Document) -> Result<(), String> {
    let reply = target
        .client
        .database(&target.db)
        .run_command(doc! { "explain": find, "verbosity": "executionStats" })
        .await
        .map_err(|e| format!("{}: explain: {e}", target.label))?;
    let stats = reply
        .get_document("executionStats")
        .map_err(|e| format!("{}: explain has no executionStats: {e}", target.label))?;
    let total = |field: &str| -> i64 {
        count(stats, field).unwrap_or_else(|| {
            stats
                .get_document("executionStages")
                .and_then(|s| s.get_array("shards"))
                .map(|shards| {
                    shards
                        .iter()
                        .filter_map(Bson::as_document)
                        .filter_map(|s| count(s, field))
                        .sum()
                })
                .unwrap_or(-1)
        })
    };
    println!(
        "EXAMINED target={} workload={} returned={} keys_examined={} docs_examined={}",
        target.label,
        w.name(),
        total("nReturned"),
        total("totalKeysExamined"),
        total("totalDocsExamined"),
    );
    Ok(())
}

/// Times `query` at concurrency 1 and each `--concurrency` level, each
/// after `--warmup` seconds of the same; `is_server` when `target` is
/// the server whose CPU `--rss-pid` follows.
async fn run_levels(
    args: &Args,
    (target, is_server): (&Target, bool),
    w: Workload,
    query: &Query,
) -> Result<Vec<Measurement>, String> {
    let mut levels = args.concurrency.clone();
    levels.push(1);
    levels.sort_unstable();
    levels.dedup();
    let (warmup, duration) = args.timing();
    let partitions = format!("partitions={}", args.search_partitions);
    let mut runs = Vec::new();
    for (level, &conc) in levels.iter().enumerate() {
        let seed = args.seed ^ ((level as u64) << 32) ^ ((w as u64) << 40);
        if !warmup.is_zero() {
            timed(
                args,
                (target, is_server),
                (w, query),
                conc,
                warmup,
                seed ^ 1,
            )
            .await
            .map_err(|e| format!("warm-up: {e}"))?;
        }
        let m = timed(args, (target, is_server), (w, query), conc, duration, seed).await?;
        let cpu = m
            .server_cpu
            .as_ref()
            .filter(|_| m.ops > 0)
            .map_or_else(String::new, |c| {
                format!(" server_cpu_us_per_op={:.1}", c.secs * 1e6 / m.ops as f64)
            });
        print_run(&m, w.name(), &format!("{partitions}{cpu}"));
        runs.push(m);
    }
    Ok(runs)
}

/// Times the server's checked query, then, with a ceiling among
/// `targets`, the same searches there unchecked, and prints each level's
/// ratio to the ceiling.
async fn run_all(
    args: &Args,
    (server, ceiling): (&Target, Option<Target>),
    w: Workload,
    (checked, make): (&Query, &MakeSearch),
    title: String,
) -> Result<Outcome, String> {
    let runs = run_levels(args, (server, true), w, checked).await?;
    let mut summary = vec![title, report::header()];
    summary.extend(runs.iter().map(report::row));
    let Some(ceiling) = ceiling else {
        return Ok(Outcome {
            measurements: Vec::new(),
            summary,
        });
    };
    let ceiling_runs = run_levels(args, (&ceiling, false), w, &unchecked(make)).await?;
    summary.extend(ceiling_runs.iter().map(report::row));
    for m in &runs {
        let Some(c) = ceiling_runs.iter().find(|c| c.concurrency == m.concurrency) else {
            continue;
        };
        if c.ops == 0 {
            continue;
        }
        let ratio = m.ops_per_sec() / c.ops_per_sec();
        summary.push(format!(
            "  conc={} {}: {ratio:.3} of the ceiling's rate",
            m.concurrency,
            w.name()
        ));
        println!(
            "RESULT workload={}-ceiling-ratio partitions={} conc={} ratio={ratio:.3}",
            w.name(),
            args.search_partitions,
            m.concurrency
        );
    }
    Ok(Outcome {
        measurements: Vec::new(),
        summary,
    })
}

/// The server under test and the ceiling (if given) on `collection`.
fn on_collection(targets: &[Target], collection: &str) -> Result<(Target, Option<Target>), String> {
    let Some(server) = targets.first() else {
        return Err("a search workload needs a server".into());
    };
    Ok((
        server.for_collection(collection),
        targets.get(1).map(|c| c.for_collection(collection)),
    ))
}

/// `geo-near`.
pub async fn geo_near(args: &Args, targets: &[Target]) -> Result<Outcome, String> {
    check_args(args)?;
    let w = Workload::GeoNear;
    let (t, ceiling) = on_collection(targets, "places")?;
    let places = Arc::new(Places {
        docs: args.geo_docs,
        batch: args.batch,
        salt: mix(args.seed ^ 0x6e0),
    });
    prepare(args, &t, &places, w, (doc! { "loc": "2dsphere" }, doc! {})).await?;
    for k in 0..BRUTE_FORCE_CHECKS as u64 {
        let p = point_of(mix(args.seed ^ k), mix(args.seed ^ k ^ 0xface));
        let found = near(&t.docs, p)
            .await
            .map_err(|e| format!("{}: {e}", t.label))?;
        let expected = places.nearest(p, SEARCH_LIMIT);
        let off = found
            .iter()
            .zip(&expected)
            .any(|(f, e)| (f - e).abs() > DISTANCE_TOLERANCE_M);
        if found.len() != expected.len() || off {
            return Err(format!(
                "{}: wrong answer: $near {p:?} found points at {found:?} m, the nearest are at {expected:?} m",
                t.label
            ));
        }
    }
    let [lng, lat] = point_of(mix(args.seed), mix(args.seed ^ 0xface));
    let find = doc! {
        "find": t.docs.name(),
        "filter": { "loc": { "$near": { "$geometry": { "type": "Point", "coordinates": [lng, lat] } } } },
        "limit": SEARCH_LIMIT as i64,
    };
    print_examined(&t, w, find).await?;
    let make: MakeSearch = Arc::new(|draw| near_search(near_point(draw)));
    run_all(
        args,
        (&t, ceiling),
        w,
        (&near_query(&places), &make),
        format!(
            "geo-near: $near limit {SEARCH_LIMIT} over {} points, {} partitions",
            places.docs, args.search_partitions
        ),
    )
    .await
}

/// `text-search`.
pub async fn text_search(args: &Args, targets: &[Target]) -> Result<Outcome, String> {
    check_args(args)?;
    let w = Workload::TextSearch;
    let (t, ceiling) = on_collection(targets, "articles")?;
    let started = Instant::now();
    let articles = Arc::new(Articles::new(args.text_docs, args.batch, args.seed));
    println!(
        "text data set: {} documents of {} words, {VOCABULARY} words in all, built in {:.2}s",
        articles.docs,
        TITLE_WORDS + BODY_WORDS,
        started.elapsed().as_secs_f64()
    );
    prepare(
        args,
        &t,
        &articles,
        w,
        (doc! { "title": "text", "body": "text" }, doc! {}),
    )
    .await?;
    let (a, b) = search_words(args.seed);
    let find = doc! {
        "find": t.docs.name(),
        "filter": { "$text": { "$search": format!("{} {}", articles.words[a], articles.words[b]) } },
        "projection": { "score": { "$meta": "textScore" } },
        "sort": { "score": { "$meta": "textScore" } },
        "limit": SEARCH_LIMIT as i64,
    };
    print_examined(&t, w, find).await?;
    let searched = Arc::clone(&articles);
    let make: MakeSearch = Arc::new(move |draw| text_search_of(&searched, draw));
    run_all(
        args,
        (&t, ceiling),
        w,
        (&text_query(&articles), &make),
        format!(
            "text-search: two-word $text, sorted by score, limit {SEARCH_LIMIT}, over {} documents, {} partitions",
            articles.docs, args.search_partitions
        ),
    )
    .await
}

/// `collated-eq`.
pub async fn collated_eq(args: &Args, targets: &[Target]) -> Result<Outcome, String> {
    check_args(args)?;
    let w = Workload::CollatedEq;
    let (t, ceiling) = on_collection(targets, "users")?;
    let users = Arc::new(Users {
        docs: args.collation_docs,
        batch: args.batch,
        salt: mix(args.seed ^ 0xc011),
    });
    let collation = doc! { "locale": "en", "strength": 2 };
    // A unique index must start with the shard key, as in MongoDB: the
    // sharded copy (on `_id`) has a plain one, which the lookup reads on
    // every partition (a collated string query pins none).
    let unique = args.search_partitions == 0;
    prepare(
        args,
        &t,
        &users,
        w,
        (
            doc! { "name": 1 },
            doc! { "unique": unique, "collation": collation.clone() },
        ),
    )
    .await?;
    let find = doc! {
        "find": t.docs.name(),
        "filter": { "name": users.name(0).to_ascii_uppercase() },
        "collation": collation,
    };
    print_examined(&t, w, find).await?;
    let looked_up = Arc::clone(&users);
    let make: MakeSearch = Arc::new(move |draw| collated_search(&looked_up, draw).2);
    run_all(
        args,
        (&t, ceiling),
        w,
        (&collated_query(&users), &make),
        format!(
            "collated-eq: find({{name}}) with {{locale: \"en\", strength: 2}} through a unique collated index, over {} users, {} partitions",
            users.docs, args.search_partitions
        ),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_distinct_and_end_in_a_vowel_no_stemmer_cuts() {
        let words: HashSet<String> = (0..VOCABULARY).map(word).collect();
        assert_eq!(words.len(), VOCABULARY);
        assert!(words.iter().all(|w| w.ends_with(['a', 'o', 'u'])));
    }

    #[test]
    fn postings_list_each_document_once_per_word() {
        let a = Articles::new(500, 100, 7);
        for (n, list) in a.postings.iter().enumerate() {
            assert!(list.windows(2).all(|w| w[0] < w[1]), "word {n}");
            for &i in list {
                let d = a.document(u64::from(i));
                let text = format!(
                    "{} {}",
                    d.get_str("title").unwrap(),
                    d.get_str("body").unwrap()
                );
                assert!(text.split(' ').any(|w| w == a.words[n]));
            }
        }
    }

    #[test]
    fn haversine_gives_a_degree_of_latitude_as_mongodb_does() {
        // One degree on a sphere of MongoDB's radius: 6378100 × π / 180.
        let d = haversine_m([0.0, 0.0], [0.0, 1.0]);
        assert!((d - 111_318.845).abs() < 0.01, "{d}");
    }

    #[test]
    fn user_names_differ_only_in_case_from_their_plain_form() {
        let u = Users {
            docs: 10,
            batch: 10,
            salt: 3,
        };
        assert_eq!(u.name(5).to_ascii_lowercase(), "user00000005name");
    }
}
