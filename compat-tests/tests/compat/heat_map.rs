//! The partition page of the HTTP side port (`/`), loaded in a real
//! headless Chromium, and what feeds it: the JSON views under `/api/` and
//! the per-partition activity in `/metrics`.
//!
//! A collection sharded into 8 partitions must show 8 partitions, and
//! hammering one shard-key value must make its partition the hottest and
//! the value the hottest key. A screenshot of the page is saved as
//! `<target dir>/test-output/heat-map.png`.
//!
//! The browser is Debian's `chromium`, which `scripts/test` installs and
//! names in `$SHARDGATE_CHROMIUM`; under it a missing browser fails the
//! test. Run alone without one on the `PATH`, the browser test says so
//! and passes without running.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use compat_tests::{
    bson::{doc, Document},
    free_port,
    side_port::{get, per_partition, scrape},
    TestServer,
};
use futures::TryStreamExt;
use serde_json::Value;

const DB: &str = "shop";
const HOT: &str = "hot-tenant";

/// A server with its side port on a free port.
async fn start(extra: &[&str]) -> (TestServer, SocketAddr) {
    let side: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut args = vec!["--http-bind".to_string(), side.to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let srv = TestServer::start_with_args(&args).await;
    (srv, side)
}

async fn get_json(side: SocketAddr, path: &str) -> Value {
    let (status, head, body) = get(side, path).await;
    assert_eq!(status, 200, "{path}: {head}\n{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// What each partition's `metric` moved by between two scrapes.
fn moved(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    metric: &str,
    coll: &str,
) -> BTreeMap<String, f64> {
    let before = per_partition(before, metric, DB, coll);
    per_partition(after, metric, DB, coll)
        .into_iter()
        .map(|(p, v)| {
            let was = before.get(&p).copied().unwrap_or(0.0);
            (p, v - was)
        })
        .collect()
}

async fn shard(srv: &TestServer, coll: &str, partitions: i32) {
    srv.db("admin")
        .run_command(doc! {
            "shardCollection": format!("{DB}.{coll}"),
            "key": {"tenant": "hashed"},
            "numInitialChunks": partitions,
        })
        .await
        .unwrap();
}

/// The partition a find on `filter` targets, as explain names it.
async fn partition_of(srv: &TestServer, coll: &str, filter: Document) -> String {
    let explain = srv
        .db(DB)
        .run_command(doc! {
            "explain": {"find": coll, "filter": filter},
            "verbosity": "queryPlanner",
        })
        .await
        .unwrap();
    let plan = explain
        .get_document("queryPlanner")
        .and_then(|p| p.get_document("winningPlan"))
        .unwrap_or_else(|_| panic!("no winningPlan in {explain}"));
    assert_eq!(plan.get_str("stage"), Ok("SINGLE_SHARD"), "{explain}");
    plan.get_array("shards").unwrap()[0]
        .as_document()
        .unwrap()
        .get_str("shardName")
        .unwrap()
        .to_string()
}

/// 8 partitions, 800 documents over 80 tenants, then one tenant hammered
/// with targeted reads and writes. Returns the hammered tenant's
/// partition.
async fn hammered_orders(srv: &TestServer) -> String {
    shard(srv, "orders", 8).await;
    let orders = srv.db(DB).collection::<Document>("orders");
    orders
        .insert_many((0..800).map(|i| doc! {"_id": i, "tenant": format!("t{}", i % 80), "n": i}))
        .await
        .unwrap();
    orders
        .insert_many((0..20).map(|i| doc! {"_id": format!("hot-{i}"), "tenant": HOT, "n": i}))
        .await
        .unwrap();
    // Over a few seconds, so that the heat map has a few columns: each
    // round 80 reads and 20 updates of the hot tenant, and a few reads
    // of others.
    for round in 0..5 {
        for i in 0..80 {
            let found = orders
                .find_one(doc! {"tenant": HOT, "_id": format!("hot-{}", i % 20)})
                .await
                .unwrap();
            assert!(found.is_some());
        }
        for i in 0..20 {
            orders
                .update_one(
                    doc! {"tenant": HOT, "_id": format!("hot-{i}")},
                    doc! {"$inc": {"n": 1}},
                )
                .await
                .unwrap();
        }
        for i in 0..8 {
            let tenant = format!("t{}", (round * 8 + i) * 7 % 80);
            orders.find_one(doc! {"tenant": tenant}).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    // A reading of the counters after the hammering: the sampler takes
    // one a second.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    partition_of(srv, "orders", doc! {"tenant": HOT}).await
}

/// Where test output goes: `<target dir>/test-output`.
fn test_output() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("compat-tests lives inside the workspace")
        .to_path_buf();
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace.join(dir),
        None => workspace.join("target"),
    };
    let dir = target.join("test-output");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// The browser: `$SHARDGATE_CHROMIUM` (set by `scripts/test`, which must
/// have found one), else `chromium` on the `PATH`; `None`, said on
/// stderr, when run outside the suite without one.
fn chromium() -> Option<PathBuf> {
    if let Some(given) = std::env::var_os("SHARDGATE_CHROMIUM") {
        let path = PathBuf::from(&given);
        assert!(
            !given.is_empty() && path.is_file(),
            "no headless browser: scripts/test did not find or install Debian's chromium \
             (SHARDGATE_CHROMIUM={given:?}); run `apt-get install chromium`"
        );
        return Some(path);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        eprintln!(
            "not run: no chromium on the PATH (scripts/test installs Debian's chromium package)"
        );
    }
    found
}

/// Runs headless Chromium on `url` with `args` (`--dump-dom`,
/// `--screenshot=...`) and returns its stdout. The page polls, so it is
/// given virtual time to load, fetch and draw several times.
async fn browse(browser: &Path, url: &str, args: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--hide-scrollbars",
        "--window-size=1440,1700",
        "--virtual-time-budget=8000",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .args(args)
    .arg(url)
    .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("chromium did not finish within 120 s on {url}"))
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", browser.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "chromium failed ({}) on {url}:\n{}\n{stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The value of attribute `name` on the element with `id="<id>"` in
/// serialized HTML.
fn attribute(dom: &str, id: &str, name: &str) -> Option<String> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let start = dom[..at].rfind('<')?;
    let end = start + dom[start..].find('>')?;
    let tag = &dom[start..end];
    let from = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let len = tag[from..].find('"')?;
    Some(
        tag[from..from + len]
            .replace("&quot;", "\"")
            .replace("&amp;", "&"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_eight_partitions_and_the_hammered_one_hottest() {
    let Some(browser) = chromium() else {
        return;
    };
    let (srv, side) = start(&[]).await;
    let hot = hammered_orders(&srv).await;

    let url = format!("http://{side}/#{DB}.orders");
    let dom = browse(&browser, &url, &["--dump-dom"]).await;
    let log = || format!("page:\n{dom}\n---- server log ----\n{}", srv.log());
    assert_eq!(
        attribute(&dom, "view", "data-ns").as_deref(),
        Some("shop.orders"),
        "{}",
        log()
    );
    assert_eq!(
        attribute(&dom, "view", "data-partition-count").as_deref(),
        Some("8"),
        "{}",
        log()
    );
    assert_eq!(
        attribute(&dom, "view", "data-hottest").as_deref(),
        Some(hot.as_str()),
        "{}",
        log()
    );
    assert_eq!(
        attribute(&dom, "view", "data-top-key").as_deref(),
        Some(format!("\"{HOT}\"").as_str()),
        "{}",
        log()
    );
    // Every partition is drawn on the ring and has a row of its own.
    let arcs = dom.matches("class=\"arc\"").count();
    assert_eq!(arcs, 8, "{}", log());
    assert_eq!(
        dom.matches(&format!("data-partition=\"{hot}\"")).count(),
        // ring, heat-map label, storage row, table row
        4,
        "{}",
        log()
    );

    let shot = test_output().join("heat-map.png");
    let _ = std::fs::remove_file(&shot);
    browse(
        &browser,
        &url,
        &[&format!("--screenshot={}", shot.display())],
    )
    .await;
    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("{}: {e}", shot.display()));
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{} is not a screenshot ({} bytes)",
        shot.display(),
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());
}

#[tokio::test]
async fn the_api_names_the_hottest_partition_and_key() {
    let (srv, side) = start(&[]).await;
    let hot = hammered_orders(&srv).await;
    srv.db(DB)
        .collection::<Document>("plain")
        .insert_one(doc! {"_id": 1})
        .await
        .unwrap();

    let overview = get_json(side, "/api/overview").await;
    let colls = overview["collections"].as_array().unwrap();
    let orders = colls.iter().find(|c| c["ns"] == "shop.orders").unwrap();
    assert_eq!(orders["sharded"], true);
    assert_eq!(orders["key"], "tenant");
    assert_eq!(orders["partitions"], 8);
    assert_eq!(orders["documents"], 820);
    let plain = colls.iter().find(|c| c["ns"] == "shop.plain").unwrap();
    assert_eq!(
        (plain["sharded"].clone(), plain["partitions"].clone()),
        (false.into(), 1.into())
    );
    assert_eq!(plain["documents"], 1);

    let c = get_json(side, "/api/collections/shop/orders").await;
    assert_eq!(c["hottest"], hot.as_str(), "{c:#}");
    let parts = c["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 8);
    // The ring: ranges in hash order, covering the hash space once.
    assert_eq!(parts[0]["min"], i64::MIN.to_string());
    assert_eq!(parts[7]["max"], i64::MAX.to_string());
    assert_eq!(parts[0]["start"], 0.0);
    assert_eq!(parts[7]["end"], 1.0);
    let docs: u64 = parts.iter().map(|p| p["documents"].as_u64().unwrap()).sum();
    assert_eq!(docs, 820);
    let hottest = parts.iter().find(|p| p["name"] == hot.as_str()).unwrap();
    // 400 finds and 100 updates of the hammered tenant, and the explain.
    assert!(hottest["reads"].as_u64().unwrap() >= 400, "{hottest}");
    assert!(hottest["writes"].as_u64().unwrap() >= 100, "{hottest}");
    let keys = c["hotKeys"]["keys"].as_array().unwrap();
    assert!(!keys.is_empty() && keys.len() <= 10, "{c:#}");
    assert_eq!(keys[0]["value"], format!("\"{HOT}\""), "{c:#}");
    assert_eq!(keys[0]["partition"], hot.as_str());
    // 520 of the 1,360 targeted operations (inserts included), far
    // ahead of any other tenant's dozen or so.
    let share = |i: usize| keys.get(i).map_or(0.0, |k| k["share"].as_f64().unwrap());
    assert!(share(0) > 0.25 && share(0) > 5.0 * share(1), "{keys:?}");
    // The heat map has a row per partition, one column per second.
    let rows = c["heat"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    let columns = c["heat"]["times"].as_array().unwrap().len();
    assert!(columns >= 1, "{c:#}");
    let ops = |name: &str| -> u64 {
        rows.iter().find(|r| r["name"] == name).unwrap()["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum()
    };
    for p in parts {
        let name = p["name"].as_str().unwrap();
        if name != hot {
            assert!(ops(name) < ops(&hot), "{name} vs {hot}: {c:#}");
        }
    }

    let plain = get_json(side, "/api/collections/shop/plain").await;
    assert_eq!(plain["partitions"][0]["name"], "primary");
    assert_eq!(plain["hotKeys"]["keys"], Value::Array(vec![]));
    let (status, _, body) = get(side, "/api/collections/shop/nothing").await;
    assert_eq!(status, 404, "{body}");
    let (status, head, page) = get(side, "/").await;
    assert_eq!(status, 200);
    assert!(head.to_ascii_lowercase().contains("text/html"), "{head}");
    assert!(page.contains("/app.js") && page.contains("id=\"view\""));
    for asset in ["/app.js", "/style.css"] {
        assert_eq!(get(side, asset).await.0, 200, "{asset}");
    }
}

#[tokio::test]
async fn metrics_count_each_partitions_reads_writes_and_fan_outs() {
    let (srv, side) = start(&[]).await;
    shard(&srv, "orders", 8).await;
    let orders = srv.db(DB).collection::<Document>("orders");

    // One insert command over 40 tenants: one write of every partition
    // it put documents in, a fan-out when that is more than one.
    let before = scrape(side).await;
    orders
        .insert_many((0..400).map(|i| doc! {"_id": i, "tenant": format!("t{}", i % 40)}))
        .await
        .unwrap();
    let after = scrape(side).await;
    let docs = per_partition(&after, "shardgate_partition_documents", DB, "orders");
    assert_eq!(docs.len(), 8);
    let holding: Vec<&String> = docs
        .iter()
        .filter(|(_, n)| **n > 0.0)
        .map(|(p, _)| p)
        .collect();
    assert!(holding.len() > 1, "{docs:?}");
    let writes = moved(
        &before,
        &after,
        "shardgate_partition_writes_total",
        "orders",
    );
    let fanouts = moved(
        &before,
        &after,
        "shardgate_partition_fanout_operations_total",
        "orders",
    );
    let reads = moved(&before, &after, "shardgate_partition_reads_total", "orders");
    for (p, n) in &docs {
        let wrote = if *n > 0.0 { 1.0 } else { 0.0 };
        assert_eq!(
            writes.get(p).copied().unwrap_or(0.0),
            wrote,
            "{p}: {writes:?}"
        );
        assert_eq!(
            fanouts.get(p).copied().unwrap_or(0.0),
            wrote,
            "{p}: {fanouts:?}"
        );
        assert_eq!(reads.get(p).copied().unwrap_or(0.0), 0.0, "{p}: {reads:?}");
    }

    // A targeted read: one read of one partition, no fan-out.
    let target = partition_of(&srv, "orders", doc! {"tenant": "t7"}).await;
    let before = scrape(side).await;
    let found = orders
        .find_one(doc! {"tenant": "t7", "_id": 7})
        .await
        .unwrap();
    assert!(found.is_some());
    let after = scrape(side).await;
    let reads = moved(&before, &after, "shardgate_partition_reads_total", "orders");
    assert_eq!(reads.len(), 8, "{reads:?}");
    for (p, n) in &reads {
        let expected = if *p == target { 1.0 } else { 0.0 };
        assert_eq!(*n, expected, "{p}: {reads:?}");
    }
    let fanouts = moved(
        &before,
        &after,
        "shardgate_partition_fanout_operations_total",
        "orders",
    );
    assert!(fanouts.values().all(|n| *n == 0.0), "{fanouts:?}");
    let units = moved(
        &before,
        &after,
        "shardgate_partition_request_units_consumed_total",
        "orders",
    );
    assert!(units[&target] > 0.0, "{units:?}");

    // A fan-out: one read, and one fan-out, of each of the 8 partitions.
    let before = after;
    let none: Vec<Document> = orders
        .find(doc! {"n": {"$exists": true}})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert!(none.is_empty());
    let after = scrape(side).await;
    for metric in [
        "shardgate_partition_reads_total",
        "shardgate_partition_fanout_operations_total",
    ] {
        let m = moved(&before, &after, metric, "orders");
        assert_eq!(m.len(), 8, "{metric}: {m:?}");
        assert!(m.values().all(|n| *n == 1.0), "{metric}: {m:?}");
    }
    let writes = moved(
        &before,
        &after,
        "shardgate_partition_writes_total",
        "orders",
    );
    assert!(writes.values().all(|n| *n == 0.0), "{writes:?}");

    let collection = |metric: &str| {
        let series = format!("{metric}{{database=\"{DB}\",collection=\"orders\"}}");
        after.get(&series).copied()
    };
    assert_eq!(collection("shardgate_collection_partitions"), Some(8.0));
    assert_eq!(collection("shardgate_collection_splits_total"), Some(0.0));
    assert_eq!(
        after.get("shardgate_partition_split_bytes").copied(),
        Some(10_737_418_240.0)
    );
    // No series is labelled by a key value.
    assert!(
        !after.keys().any(|s| s.contains("t7")),
        "a key value in a label"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn splits_are_counted_and_listed() {
    let (srv, side) = start(&["--partition-split-bytes", "60000"]).await;
    shard(&srv, "orders", 2).await;
    let orders = srv.db(DB).collection::<Document>("orders");
    let pad = "p".repeat(240);
    for batch in 0..4 {
        orders
            .insert_many((0..250).map(|i| {
                let n = batch * 250 + i;
                doc! {"_id": n, "tenant": format!("t{n}"), "pad": &pad}
            }))
            .await
            .unwrap();
    }
    // Splits run in the background.
    let mut c = Value::Null;
    for _ in 0..100 {
        c = get_json(side, "/api/collections/shop/orders").await;
        let bytes = c["partitions"].as_array().unwrap().iter();
        if bytes
            .clone()
            .all(|p| p["bytes"].as_u64().unwrap() <= 60_000)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let parts = c["partitions"].as_array().unwrap().len();
    assert!(parts > 2, "{c:#}");
    let splits = c["splits"].as_array().unwrap();
    // Each split turns one partition into two.
    assert_eq!(splits.len(), parts - 2, "{c:#}");
    assert_eq!(c["splitCount"], parts - 2);
    let first = &splits[splits.len() - 1];
    let (a, b) = (&first["children"][0], &first["children"][1]);
    assert_eq!(a["min"], first["parent"]["min"]);
    assert_eq!(b["max"], first["parent"]["max"]);
    assert!(a["documents"].as_u64().unwrap() > 0 && b["bytes"].as_u64().unwrap() > 0);
    let overview = get_json(side, "/api/overview").await;
    assert_eq!(overview["splits"].as_array().unwrap().len(), parts - 2);
    let m = scrape(side).await;
    let series =
        format!("shardgate_collection_splits_total{{database=\"{DB}\",collection=\"orders\"}}");
    assert_eq!(m.get(&series).copied(), Some((parts - 2) as f64));
}
