//! The side port's page, `/`: what a person looks at to see how each
//! collection is partitioned and which partition is hot. The page itself
//! is static (HTML, CSS and JavaScript in `src/server/ui/`, compiled into
//! the binary, nothing fetched from elsewhere) and polls two JSON views:
//!
//! - `/api/overview`: every collection with its partitions, documents,
//!   bytes and current rate, and the recent splits.
//! - `/api/collections/{db}/{coll}`: one collection's partitions (hash
//!   range, storage against the split size, counts since start), its
//!   heat map over the last minutes ([`super::heat`]), its hottest
//!   shard-key values (sampled; `router::activity`) and its splits.
//!
//! Both are built on a blocking thread, as a `/metrics` scrape is. Hashes
//! are sent as strings: JavaScript's numbers hold 53 bits.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::heat::{self, History, Series};
use crate::commands::ServerState;
use crate::router::activity::{SplitEvent, SAMPLE_EVERY};
use crate::router::charge::request_charge;
use crate::router::{Collection, CollectionStats, Namespace, Partition, Router, PRIMARY_PARTITION};

const INDEX_HTML: &str = include_str!("ui/index.html");
const APP_JS: &str = include_str!("ui/app.js");
const STYLE_CSS: &str = include_str!("ui/style.css");

/// The page runs only its own script, and sends nothing elsewhere.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
     frame-ancestors 'none'";

/// Frames over which rates are shown ("now"): the last ten seconds.
const RATE_FRAMES: usize = 10;
/// Frames over which the hottest partition is picked: the last minute.
const HOT_FRAMES: usize = 60;
/// Hot keys shown.
const TOP_KEYS: usize = 10;
/// Most partitions a collection's heat map sends (the busiest, in hash
/// order); a collection of thousands is summed up, not drawn.
const HEAT_ROWS: usize = 96;
/// How long an unsharded collection's count (a scan) is reused.
const SCAN_REUSE: Duration = Duration::from_secs(10);

/// What the page's handlers share.
#[derive(Clone)]
struct Ui {
    state: ServerState,
    history: Arc<History>,
    scans: Arc<ScanCache>,
}

/// The page's routes.
pub fn routes(state: ServerState, history: Arc<History>) -> axum::Router {
    axum::Router::new()
        .route(
            "/",
            get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/app.js",
            get(|| async { asset(APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/style.css",
            get(|| async { asset(STYLE_CSS, "text/css; charset=utf-8") }),
        )
        .route("/api/overview", get(overview))
        .route("/api/collections/{db}/{coll}", get(collection))
        .with_state(Ui {
            state,
            history,
            scans: Arc::new(ScanCache::default()),
        })
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        ],
        body,
    )
        .into_response()
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        value.to_string(),
    )
        .into_response()
}

/// Runs `view` on a blocking thread and answers with its JSON.
async fn blocking_json(view: impl FnOnce() -> (StatusCode, Value) + Send + 'static) -> Response {
    match tokio::task::spawn_blocking(view).await {
        Ok((status, value)) => json_response(status, &value),
        Err(e) => json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({"error": format!("the view failed: {e}")}),
        ),
    }
}

async fn overview(State(ui): State<Ui>) -> Response {
    blocking_json(move || (StatusCode::OK, ui.overview())).await
}

async fn collection(State(ui): State<Ui>, Path((db, coll)): Path<(String, String)>) -> Response {
    blocking_json(move || {
        let found = Namespace::new(&db, &coll)
            .ok()
            .and_then(|ns| ui.state.router.collection(&ns));
        match found {
            Some(coll) => (StatusCode::OK, ui.collection(&coll)),
            None => (
                StatusCode::NOT_FOUND,
                json!({"error": format!("no collection {db}.{coll}")}),
            ),
        }
    })
    .await
}

/// Documents and bytes of unsharded collections, which only a scan
/// counts: each scanned at most once per [`SCAN_REUSE`] however often
/// the page asks.
#[derive(Default)]
struct ScanCache {
    counted: Mutex<HashMap<u64, (Instant, CollectionStats)>>,
}

impl ScanCache {
    fn stats(&self, router: &Router, coll: &Collection) -> CollectionStats {
        let fresh = |at: &Instant| at.elapsed() < SCAN_REUSE;
        if let Some((at, stats)) = self.counted.lock().get(&coll.id) {
            if fresh(at) {
                return *stats;
            }
        }
        let stats = router.collection_stats_now(coll).unwrap_or_default();
        let mut counted = self.counted.lock();
        counted.retain(|_, (at, _)| fresh(at));
        counted.insert(coll.id, (Instant::now(), stats));
        stats
    }
}

/// A partition's place on the hash ring: where its range starts and ends
/// as fractions of the 2^64 hashes.
fn ring_fraction(hash: i128) -> f64 {
    (hash - i128::from(i64::MIN)) as f64 / 18_446_744_073_709_551_616.0
}

fn partition_json(p: &Partition) -> Value {
    json!({
        "name": p.name().to_string(),
        "min": p.min.to_string(),
        "max": p.max.to_string(),
        "start": ring_fraction(i128::from(p.min)),
        "end": ring_fraction(i128::from(p.max) + 1),
    })
}

fn split_json(s: &SplitEvent) -> Value {
    let child = |i: usize| {
        let half = &s.children[i];
        let mut v = partition_json(&half.partition);
        v["documents"] = json!(half.documents);
        v["bytes"] = json!(half.bytes);
        v
    };
    json!({
        "at": s.at_millis,
        "ns": s.ns,
        "parent": partition_json(&s.parent),
        "children": [child(0), child(1)],
    })
}

/// RU rounded to two decimals, from micro-RU.
fn units(micro: u64) -> f64 {
    request_charge(micro)
}

impl Ui {
    fn router(&self) -> &Router {
        &self.state.router
    }

    /// Documents, bytes and the partitions (with their usage) of `coll`.
    fn layout(&self, coll: &Collection) -> (Vec<(Partition, u64, u64)>, bool) {
        let router = self.router();
        if coll.sharding.is_some() {
            let parts = router
                .partition_stats(coll)
                .into_iter()
                .map(|(p, u)| (p, u.count, u.bytes))
                .collect();
            return (parts, true);
        }
        let stats = self.scans.stats(router, coll);
        let whole = Partition {
            id: 0,
            min: i64::MIN,
            max: i64::MAX,
        };
        (vec![(whole, stats.count, stats.size)], false)
    }

    fn overview(&self) -> Value {
        let router = self.router();
        let (rates, frames) = self.history.collection_totals(RATE_FRAMES);
        let seconds = (frames as f64 * heat::INTERVAL.as_secs_f64()).max(1.0);
        let mut collections = Vec::new();
        for coll in router.collections() {
            let (parts, sharded) = self.layout(&coll);
            let (ops, micro) = rates.get(&coll.id).copied().unwrap_or_default();
            collections.push(json!({
                "ns": coll.ns.to_string(),
                "db": coll.ns.db,
                "coll": coll.ns.coll,
                "sharded": sharded,
                "key": coll.sharding.as_ref().map(|s| s.key.path.clone()),
                "partitions": parts.len(),
                "documents": parts.iter().map(|p| p.1).sum::<u64>(),
                "bytes": parts.iter().map(|p| p.2).sum::<u64>(),
                "opsPerSec": ops as f64 / seconds,
                "ruPerSec": units(micro) / seconds,
                "splits": router.activity().map_or(0, |a| a.splits_of(coll.id)),
            }));
        }
        let splits: Vec<Value> = router
            .activity()
            .map(|a| a.recent_splits())
            .unwrap_or_default()
            .iter()
            .map(split_json)
            .collect();
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "uptimeSecs": self.state.started.elapsed().as_secs(),
            "splitBytes": router.split_bytes(),
            "intervalMillis": heat::INTERVAL.as_millis() as u64,
            "windowFrames": heat::FRAMES,
            "sampleEvery": SAMPLE_EVERY,
            "collections": collections,
            "splits": splits,
        })
    }

    fn collection(&self, coll: &Collection) -> Value {
        let router = self.router();
        let (parts, sharded) = self.layout(coll);
        let ids: Vec<u64> = parts.iter().map(|(p, ..)| p.id).collect();
        let activity = router.partition_activity_of(coll, &ids);
        let provisioned = router
            .partition_units(coll, &ids[..ids.len().min(1)])
            .first()
            .map_or(0, |u| u.provisioned);
        let series = self.history.series(coll.id);
        let recent = series.recent(RATE_FRAMES);
        let seconds =
            (series.times.len().min(RATE_FRAMES) as f64 * heat::INTERVAL.as_secs_f64()).max(1.0);
        let name = |p: &Partition| match sharded {
            true => p.name().to_string(),
            false => PRIMARY_PARTITION.to_string(),
        };
        let partitions: Vec<Value> = parts
            .iter()
            .zip(&activity)
            .map(|((p, documents, bytes), a)| {
                let (ops, micro) = recent.get(&p.id).copied().unwrap_or_default();
                let mut v = partition_json(p);
                v["name"] = json!(name(p));
                v["documents"] = json!(documents);
                v["bytes"] = json!(bytes);
                v["reads"] = json!(a.reads);
                v["writes"] = json!(a.writes);
                v["fanouts"] = json!(a.fanouts);
                v["ru"] = json!(units(a.consumed_micro));
                v["throttled"] = json!(a.throttled);
                v["opsPerSec"] = json!(ops as f64 / seconds);
                v["ruPerSec"] = json!(units(micro) / seconds);
                v
            })
            .collect();
        // The hottest: the busiest of the last minute, else of the
        // whole window.
        let hottest = series
            .hottest(HOT_FRAMES)
            .or_else(|| series.hottest(heat::FRAMES))
            .and_then(|id| parts.iter().find(|(p, ..)| p.id == id))
            .map(|(p, ..)| name(p));
        let (keys, sampled) = router
            .activity()
            .map(|a| a.hot_keys(coll.id, TOP_KEYS))
            .unwrap_or_default();
        let keys: Vec<Value> = keys
            .iter()
            .map(|k| {
                let holder = coll
                    .sharding
                    .as_ref()
                    .map(|s| s.map().locate(k.hash).name().to_string())
                    .unwrap_or_else(|| PRIMARY_PARTITION.to_string());
                json!({
                    "value": k.shown,
                    "hash": k.hash.to_string(),
                    "partition": holder,
                    "count": k.count,
                    "error": k.error,
                    // What it certainly had: a lower bound.
                    "share": if sampled == 0 { 0.0 } else { k.guaranteed() as f64 / sampled as f64 },
                })
            })
            .collect();
        let splits: Vec<Value> = router
            .activity()
            .map(|a| a.recent_splits())
            .unwrap_or_default()
            .iter()
            .filter(|s| s.collection == coll.id)
            .map(split_json)
            .collect();
        json!({
            "ns": coll.ns.to_string(),
            "db": coll.ns.db,
            "coll": coll.ns.coll,
            "sharded": sharded,
            "key": coll.sharding.as_ref().map(|s| s.key.path.clone()),
            "splitBytes": router.split_bytes(),
            "provisionedPerPartition": provisioned,
            "documents": parts.iter().map(|p| p.1).sum::<u64>(),
            "bytes": parts.iter().map(|p| p.2).sum::<u64>(),
            "splitCount": router.activity().map_or(0, |a| a.splits_of(coll.id)),
            "hottest": hottest,
            "partitions": partitions,
            "heat": heat_json(&series, &parts, sharded),
            "hotKeys": {"sampleEvery": SAMPLE_EVERY, "sampled": sampled, "keys": keys},
            "splits": splits,
        })
    }
}

/// The heat map: one row per current partition (at most [`HEAT_ROWS`],
/// the busiest, kept in hash order), then partitions active in the window
/// that a split has since retired.
fn heat_json(series: &Series, parts: &[(Partition, u64, u64)], sharded: bool) -> Value {
    let totals = series.totals();
    let busy = |id: &u64| totals.get(id).copied().unwrap_or_default();
    let current: BTreeSet<u64> = parts.iter().map(|(p, ..)| p.id).collect();
    let mut shown: Vec<u64> = parts.iter().map(|(p, ..)| p.id).collect();
    let mut omitted = 0;
    if shown.len() > HEAT_ROWS {
        let mut by_heat = shown.clone();
        by_heat.sort_by_key(|id| std::cmp::Reverse(busy(id)));
        let keep: BTreeSet<u64> = by_heat.into_iter().take(HEAT_ROWS).collect();
        omitted = shown.len() - keep.len();
        shown.retain(|id| keep.contains(id));
    }
    let retired: Vec<u64> = series
        .rows
        .keys()
        .copied()
        .filter(|id| !current.contains(id))
        .take(HEAT_ROWS)
        .collect();
    let zeros = vec![0u64; series.times.len()];
    let row = |id: u64, retired: bool| {
        let (ops, micro) = match series.rows.get(&id) {
            Some(r) => (r.operations.clone(), r.micro.clone()),
            None => (zeros.clone(), zeros.clone()),
        };
        let name = if sharded {
            format!("p{id}")
        } else {
            PRIMARY_PARTITION.to_string()
        };
        json!({
            "name": name,
            "retired": retired,
            "ops": ops,
            "ru": micro.iter().map(|m| units(*m)).collect::<Vec<f64>>(),
        })
    };
    let mut rows: Vec<Value> = shown.iter().map(|&id| row(id, false)).collect();
    rows.extend(retired.iter().map(|&id| row(id, true)));
    json!({
        "intervalMillis": heat::INTERVAL.as_millis() as u64,
        "times": series.times,
        "rows": rows,
        "omitted": omitted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_spans_every_hash_once() {
        assert_eq!(ring_fraction(i128::from(i64::MIN)), 0.0);
        assert_eq!(ring_fraction(i128::from(i64::MAX) + 1), 1.0);
        assert_eq!(ring_fraction(0), 0.5);
        let p = partition_json(&Partition {
            id: 7,
            min: i64::MIN,
            max: -1,
        });
        assert_eq!(p["name"], "p7");
        assert_eq!(p["min"], i64::MIN.to_string());
        assert_eq!(
            (p["start"].as_f64(), p["end"].as_f64()),
            (Some(0.0), Some(0.5))
        );
    }

    #[test]
    fn a_heat_map_of_many_partitions_keeps_the_busiest_in_hash_order() {
        let history = History::default();
        let activity = |p: u64, reads: u64| crate::router::throttle::PartitionActivity {
            collection: 1,
            partition: p,
            reads,
            ..Default::default()
        };
        let n = HEAT_ROWS as u64 + 4;
        history.record(0, &(0..n).map(|p| activity(p, 0)).collect::<Vec<_>>());
        // Partitions 0..4 stay idle; one retired partition (999) was busy.
        let mut busy: Vec<_> = (0..n).map(|p| activity(p, p.saturating_sub(3))).collect();
        busy.push(activity(999, 5));
        history.record(1000, &busy);
        let parts: Vec<(Partition, u64, u64)> = (0..n)
            .map(|id| {
                let min = i64::MIN + id as i64;
                (Partition { id, min, max: min }, 0, 0)
            })
            .collect();
        let heat = heat_json(&history.series(1), &parts, true);
        let rows = heat["rows"].as_array().unwrap();
        assert_eq!(heat["omitted"], 4);
        assert_eq!(rows.len(), HEAT_ROWS + 1);
        assert_eq!(rows[0]["name"], "p4");
        assert_eq!(rows[HEAT_ROWS]["name"], "p999");
        assert_eq!(rows[HEAT_ROWS]["retired"], true);
        assert_eq!(rows[0]["ops"], json!([1]));
        assert_eq!(rows[1]["ops"], json!([2]));
    }
}
