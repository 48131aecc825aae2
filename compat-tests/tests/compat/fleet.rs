//! The postgres backend as a fleet of servers: where partitions go and how
//! the sharding helpers show it, two gateways serving one fleet, a gateway
//! that dies in the middle of a commit across servers, and a server that
//! stops.
//!
//! These run only against PostgreSQL (`$SHARDGATE_TEST_POSTGRES`, set by
//! `scripts/test`); without it each test says so and returns.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use compat_tests::{fleet, num, TestServer};
use mongodb::bson::{doc, Bson, Document};
use mongodb::error::{Error, ErrorKind};
use mongodb::Collection;

fn on_fleet() -> bool {
    let on = fleet().is_some();
    if !on {
        eprintln!("needs a PostgreSQL fleet: set SHARDGATE_TEST_POSTGRES (scripts/test does)");
    }
    on
}

/// `host:port` of a `postgresql://user@host:port/db` URL.
fn host_of(url: &str) -> String {
    let rest = url.split_once('@').map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_string()
}

async fn shard(srv: &TestServer, ns: &str, chunks: i32) {
    srv.db("admin")
        .run_command(
            doc! {"shardCollection": ns, "key": {"k": "hashed"}, "numInitialChunks": chunks},
        )
        .await
        .unwrap();
}

/// The shard the query `{k: value}` is routed to, from explain.
async fn shard_of(srv: &TestServer, db: &str, coll: &str, value: &str) -> String {
    let explain = srv
        .db(db)
        .run_command(doc! {"explain": {"find": coll, "filter": {"k": value}}})
        .await
        .unwrap();
    let shards = explain
        .get_document("queryPlanner")
        .and_then(|q| q.get_document("winningPlan"))
        .and_then(|w| w.get_array("shards"))
        .unwrap_or_else(|_| panic!("no shards in {explain}"));
    assert_eq!(shards.len(), 1, "{explain}");
    let Some(Bson::Document(s)) = shards.first() else {
        panic!("{explain}");
    };
    s.get_str("shardName").unwrap().to_string()
}

/// A key value whose documents live on a server other than `not`'s.
async fn key_elsewhere(srv: &TestServer, db: &str, coll: &str, not: &[&str]) -> (String, String) {
    for i in 0..200 {
        let k = format!("key{i}");
        let s = shard_of(srv, db, coll, &k).await;
        if !not.contains(&s.as_str()) {
            return (k, s);
        }
    }
    panic!("no key lands outside {not:?}");
}

/// Asserts that no document of `all` appears twice and that each string
/// `_id` in `acked` is among them.
fn assert_each_once(all: &[Document], acked: &[impl std::fmt::Display]) {
    let ids: BTreeSet<String> = all
        .iter()
        .map(|d| format!("{}", d.get("_id").unwrap()))
        .collect();
    assert_eq!(ids.len(), all.len(), "a document seen twice");
    for id in acked {
        assert!(ids.contains(&format!("\"{id}\"")), "{id} lost");
    }
}

fn code_of(e: &Error) -> Option<i32> {
    match &*e.kind {
        ErrorKind::Command(c) => Some(c.code),
        ErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) => Some(w.code),
        ErrorKind::InsertMany(m) => m
            .write_errors
            .as_ref()
            .and_then(|w| w.first())
            .map(|w| w.code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_are_spread_over_the_servers_and_shown_as_shards() {
    if !on_fleet() {
        return;
    }
    let urls = fleet().unwrap_or_default();
    let mut srv = TestServer::start().await;
    shard(&srv, "f.c", 6).await;
    let c: Collection<Document> = srv.db("f").collection("c");
    c.insert_many((0..300).map(|i| doc! {"_id": i, "k": format!("key{i}")}))
        .await
        .unwrap();

    // One shard per server, at the server's address.
    let config = srv.db("config");
    let shards: Vec<Document> = futures::TryStreamExt::try_collect(
        config
            .collection::<Document>("shards")
            .find(doc! {})
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    let hosts: Vec<String> = shards
        .iter()
        .map(|s| s.get_str("host").unwrap().to_string())
        .collect();
    let want: Vec<String> = urls.iter().map(|u| host_of(u)).collect();
    assert_eq!(hosts, want, "{shards:?}");

    // Six partitions, placed two on each server.
    let chunks = compat_tests::config_chunks(&srv.client, "f.c").await;
    assert_eq!(chunks.len(), 6, "{chunks:?}");
    let on: BTreeSet<String> = chunks.iter().map(|c| c.shard.clone()).collect();
    let all: BTreeSet<String> = (0..urls.len()).map(|i| format!("shard{i}")).collect();
    assert_eq!(on, all, "{chunks:?}");

    // $collStats (getShardDistribution) counts each server's documents.
    let stats: Vec<Document> = futures::TryStreamExt::try_collect(
        c.aggregate(vec![doc! {"$collStats": {"count": {}}}])
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(stats.len(), urls.len(), "{stats:?}");
    assert_eq!(stats.iter().map(|d| num(d, "count")).sum::<i64>(), 300);

    // A key's documents are where explain says, and a restarted gateway
    // finds everything where it was.
    let (k, s) = key_elsewhere(&srv, "f", "c", &[]).await;
    assert!(all.contains(&s), "{s}");
    assert_eq!(c.count_documents(doc! {"k": &k}).await.unwrap(), 1);
    srv.restart().await;
    let c: Collection<Document> = srv.db("f").collection("c");
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 300);
    assert_eq!(shard_of(&srv, "f", "c", &k).await, s);
    let again = compat_tests::config_chunks(&srv.client, "f.c").await;
    let shards_of =
        |cs: &[compat_tests::Chunk]| cs.iter().map(|c| c.shard.clone()).collect::<Vec<_>>();
    assert_eq!(shards_of(&again), shards_of(&chunks));
}

/// A client of one gateway only.
async fn direct(addr: std::net::SocketAddr) -> mongodb::Client {
    mongodb::Client::with_uri_str(compat_tests::uri(addr))
        .await
        .unwrap()
}

async fn index_names(c: &Collection<Document>) -> Vec<String> {
    let mut names = c.list_index_names().await.unwrap();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_serve_the_same_data_and_see_each_others_changes() {
    if !on_fleet() {
        return;
    }
    let srv = TestServer::start_gateways(&[], Some(2)).await;
    let addrs = srv.addrs();
    assert_eq!(addrs.len(), 2);
    let (one, two) = (direct(addrs[0]).await, direct(addrs[1]).await);
    let c1: Collection<Document> = one.database("g").collection("c");
    let c2: Collection<Document> = two.database("g").collection("c");

    // A write through one is read through the other at once, and the
    // collection it created implicitly is listed there.
    c1.insert_one(doc! {"_id": 1, "k": "a", "n": 0})
        .await
        .unwrap();
    let found = c2.find_one(doc! {"_id": 1}).await.unwrap();
    assert_eq!(found, Some(doc! {"_id": 1, "k": "a", "n": 0}));
    let names = two.database("g").list_collection_names().await.unwrap();
    assert_eq!(names, vec!["c".to_string()]);

    // An index made through one is listed and enforced through the other.
    c1.create_index(
        mongodb::IndexModel::builder()
            .keys(doc! {"u": 1})
            .options(
                mongodb::options::IndexOptions::builder()
                    .unique(true)
                    .build(),
            )
            .build(),
    )
    .await
    .unwrap();
    assert_eq!(index_names(&c2).await, vec!["_id_", "u_1"]);
    c2.insert_one(doc! {"_id": 2, "k": "b", "u": 7})
        .await
        .unwrap();
    let dup = c2
        .insert_one(doc! {"_id": 3, "k": "c", "u": 7})
        .await
        .unwrap_err();
    assert_eq!(code_of(&dup), Some(11000), "{dup}");
    let dup = c1
        .insert_one(doc! {"_id": 3, "k": "c", "u": 7})
        .await
        .unwrap_err();
    assert_eq!(code_of(&dup), Some(11000), "{dup}");
    let by_index = c1
        .find_one(doc! {"u": 7})
        .hint(mongodb::options::Hint::Keys(doc! {"u": 1}))
        .await
        .unwrap();
    assert_eq!(by_index.and_then(|d| d.get_i32("_id").ok()), Some(2));

    // Both gateways increment one document at the same time: none of
    // the increments is lost.
    let inc = |c: Collection<Document>| async move {
        for _ in 0..150 {
            c.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}})
                .await
                .unwrap();
        }
    };
    tokio::join!(inc(c1.clone()), inc(c2.clone()));
    let n = c1.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert_eq!(n.get_i32("n").unwrap(), 300, "{n}");

    // Sharding through one: the other routes by the new key and counts
    // what both inserted; the sharding views agree.
    let s1: Collection<Document> = one.database("g").collection("s");
    let s2: Collection<Document> = two.database("g").collection("s");
    shard_through(&one, "g.s").await;
    let docs = |from: i32| (from..from + 200).map(|i| doc! {"_id": i, "k": format!("key{i}")});
    s1.insert_many(docs(0)).await.unwrap();
    s2.insert_many(docs(200)).await.unwrap();
    assert_eq!(s1.count_documents(doc! {}).await.unwrap(), 400);
    assert_eq!(s2.count_documents(doc! {}).await.unwrap(), 400);
    for i in [0, 250, 399] {
        let k = format!("key{i}");
        let d = s2.find_one(doc! {"k": &k}).await.unwrap();
        assert_eq!(d.and_then(|d| d.get_i32("_id").ok()), Some(i));
    }
    let chunks = |client: mongodb::Client| async move {
        let config: Collection<Document> = client.database("config").collection("chunks");
        config.count_documents(doc! {}).await.unwrap()
    };
    assert_eq!(chunks(one.clone()).await, chunks(two.clone()).await);

    // A drop through one is seen by the other.
    c1.drop().await.unwrap();
    let names = two.database("g").list_collection_names().await.unwrap();
    assert_eq!(names, vec!["s".to_string()]);
    assert_eq!(c2.find_one(doc! {"_id": 1}).await.unwrap(), None);
}

async fn shard_through(client: &mongodb::Client, ns: &str) {
    client
        .database("admin")
        .run_command(doc! {"shardCollection": ns, "key": {"k": "hashed"}, "numInitialChunks": 4})
        .await
        .unwrap();
}

/// Moves a document to a partition on another server (a commit across two
/// servers) through a gateway that ends itself at `failpoint`; restarts it
/// and waits until recovery has finished the commit one way or the other.
async fn die_between_the_phases(failpoint: &str) -> (Document, String, String) {
    let mut srv = TestServer::start_with_args(&["--postgres-failpoint", failpoint]).await;
    shard(&srv, "f.c", 6).await;
    let c: Collection<Document> = srv.db("f").collection("c");
    c.insert_one(doc! {"_id": 1, "k": "key0", "n": 0})
        .await
        .unwrap();
    let from = shard_of(&srv, "f", "c", "key0").await;
    let (to_key, to) = key_elsewhere(&srv, "f", "c", &[&from]).await;
    let moved = c
        .update_one(doc! {"_id": 1}, doc! {"$set": {"k": &to_key}})
        .await;
    assert!(moved.is_err(), "the gateway should have ended: {moved:?}");

    srv.restart().await;
    let c: Collection<Document> = srv.db("f").collection("c");
    // A write to the document waits for its rows' prepared transactions,
    // so once one succeeds, recovery has finished the commit.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let wrote = tokio::time::timeout(
            Duration::from_secs(20),
            c.update_one(doc! {"_id": 1}, doc! {"$inc": {"n": 1}}),
        )
        .await;
        if let Ok(Ok(r)) = wrote {
            assert_eq!(r.matched_count, 1, "{r:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "recovery did not finish: {wrote:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let all: Vec<Document> = futures::TryStreamExt::try_collect(c.find(doc! {}).await.unwrap())
        .await
        .unwrap();
    assert_eq!(all.len(), 1, "exactly one copy: {all:?}");
    (all[0].clone(), to_key, to)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_dying_after_prepare_leaves_the_document_where_it_was() {
    if !on_fleet() {
        return;
    }
    let (doc, _, _) = die_between_the_phases("2pc-after-prepare").await;
    assert_eq!(doc.get_str("k"), Ok("key0"), "{doc}");
    assert_eq!(num(&doc, "n"), 1, "{doc}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_dying_after_the_decision_finishes_the_move() {
    if !on_fleet() {
        return;
    }
    let (doc, to_key, _) = die_between_the_phases("2pc-after-decision").await;
    assert_eq!(doc.get_str("k"), Ok(to_key.as_str()), "{doc}");
    assert_eq!(num(&doc, "n"), 1, "{doc}");
}

/// Servers of a fleet of this test's own, stopped when dropped.
struct OwnFleet {
    dir: tempfile::TempDir,
    urls: Vec<String>,
}

fn pg_fleet() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/pg-fleet")
}

/// Runs `scripts/pg-fleet` with `args`; returns what it printed.
fn pg_fleet_run(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(pg_fleet()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl OwnFleet {
    fn start(n: usize) -> OwnFleet {
        let dir = tempfile::Builder::new().prefix("fleet-").tempdir().unwrap();
        let n = n.to_string();
        let urls = pg_fleet_run(&["start".as_ref(), n.as_ref(), dir.path().as_os_str()])
            .split_whitespace()
            .map(str::to_string)
            .collect();
        OwnFleet { dir, urls }
    }

    /// Runs `scripts/pg-fleet VERB DIR SERVER`; returns what it printed.
    fn run(&self, verb: &str, server: usize) -> String {
        let server = server.to_string();
        pg_fleet_run(&[verb.as_ref(), self.dir.path().as_os_str(), server.as_ref()])
    }
}

impl Drop for OwnFleet {
    fn drop(&mut self) {
        let _ = Command::new(pg_fleet())
            .arg("stop")
            .arg(self.dir.path())
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_fails_only_what_needs_it_until_it_is_back() {
    if !on_fleet() {
        return;
    }
    let pg = tokio::task::spawn_blocking(|| OwnFleet::start(3))
        .await
        .unwrap();
    let mut args = vec!["--backend", "postgres"];
    for url in &pg.urls {
        args.extend(["--postgres", url.as_str()]);
    }
    let srv = TestServer::start_with_args(&args).await;
    shard(&srv, "f.c", 6).await;
    let c: Collection<Document> = srv.db("f").collection("c");
    c.insert_many((0..60).map(|i| doc! {"_id": i, "k": format!("key{i}")}))
        .await
        .unwrap();
    // The metadata server (shard0) stays up; shard2 stops.
    let (down_key, _) = key_elsewhere(&srv, "f", "c", &["shard0", "shard1"]).await;
    let (up_key, _) = key_elsewhere(&srv, "f", "c", &["shard0", "shard2"]).await;
    // Writers spread over every server keep writing through the stop and
    // the restart, keeping what was acknowledged and every error's code.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..2 {
        let c = c.clone();
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let (mut acked, mut codes) = (Vec::new(), BTreeSet::new());
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = format!("load{w}-{n}");
                match c
                    .insert_one(doc! {"_id": &id, "k": format!("key{}", n % 60)})
                    .await
                {
                    Ok(_) => acked.push(id),
                    Err(e) => {
                        codes.insert(code_of(&e));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                n += 1;
            }
            (acked, codes)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    pg.run("kill", 2);

    let read = c.find_one(doc! {"k": &down_key}).await;
    let e = read.expect_err("its server is down");
    assert_eq!(code_of(&e), Some(6), "HostUnreachable: {e:?}");
    let write = c
        .insert_one(doc! {"_id": "w1", "k": &down_key})
        .await
        .expect_err("its server is down");
    assert_eq!(code_of(&write), Some(6), "HostUnreachable: {write:?}");
    assert!(
        write.contains_label("RetryableWriteError"),
        "retryable: {write:?}"
    );
    // What lives elsewhere keeps working.
    assert!(c.find_one(doc! {"k": &up_key}).await.unwrap().is_some());
    c.insert_one(doc! {"_id": "w2", "k": &up_key})
        .await
        .unwrap();

    pg.run("restart", 2);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match c.insert_one(doc! {"_id": "w1", "k": &down_key}).await {
            Ok(_) => break,
            Err(e) => assert!(Instant::now() < deadline, "still failing: {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut acked, mut codes) = (Vec::new(), BTreeSet::new());
    for w in writers {
        let (a, c) = w.await.unwrap();
        acked.extend(a);
        codes.extend(c);
    }
    // Only the stopped server's operations failed, with HostUnreachable.
    assert!(codes.iter().all(|c| *c == Some(6)), "{codes:?}");
    // Every acknowledged write is there once.
    let all: Vec<Document> = futures::TryStreamExt::try_collect(c.find(doc! {}).await.unwrap())
        .await
        .unwrap();
    assert_each_once(&all, &acked);
    assert_eq!(
        c.count_documents(doc! {"_id": {"$in": ["w1", "w2"]}})
            .await
            .unwrap(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_moves_while_writers_write_and_nothing_is_lost_or_doubled() {
    if !on_fleet() {
        return;
    }
    // Enough that copying takes a while: the writers write during it.
    const PRELOADED: i32 = 20_000;
    let srv = TestServer::start_with_args(&["--balancer", "off"]).await;
    shard(&srv, "f.c", 3).await;
    let c: Collection<Document> = srv.db("f").collection("c");
    c.create_index(mongodb::IndexModel::builder().keys(doc! {"v": 1}).build())
        .await
        .unwrap();
    c.insert_many(
        (0..PRELOADED)
            .map(|i| doc! {"_id": i, "k": i % 40, "v": i, "n": 0, "pad": "x".repeat(200)}),
    )
    .await
    .unwrap();
    let chunks = compat_tests::config_chunks(&srv.client, "f.c").await;
    let first = chunks[0].clone();
    let to = if first.shard == "shard1" {
        "shard2"
    } else {
        "shard1"
    };

    // Writers insert new documents and increment old ones all through
    // the move; each keeps what was acknowledged.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let c = c.clone();
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let (mut inserted, mut incs) = (Vec::new(), std::collections::HashMap::new());
            let mut n = 0i32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = format!("w{w}-{n}");
                if c.insert_one(doc! {"_id": &id, "k": n % 40, "v": 10_000 + n})
                    .await
                    .is_ok()
                {
                    inserted.push(id);
                }
                let old = (n * 7 + w) % PRELOADED;
                if let Ok(r) = c
                    .update_one(doc! {"_id": old}, doc! {"$inc": {"n": 1}})
                    .await
                {
                    assert_eq!(r.matched_count, 1);
                    *incs.entry(old).or_insert(0) += 1;
                }
                n += 1;
            }
            (inserted, incs)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let moved = srv
        .db("admin")
        .run_command(doc! {"moveChunk": "f.c", "bounds": [first.doc.get_document("min").unwrap().clone(), first.doc.get_document("max").unwrap().clone()], "to": to})
        .await
        .unwrap();
    assert!(moved.get_i64("millis").is_ok(), "{moved}");
    // And another one back, so both directions run under load.
    let second = chunks[1].clone();
    srv.db("admin")
        .run_command(doc! {"moveRange": "f.c", "min": second.doc.get_document("min").unwrap().clone(), "toShard": "shard0"})
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut inserted = Vec::new();
    let mut incs = std::collections::HashMap::new();
    for w in writers {
        let (i, n) = w.await.unwrap();
        inserted.extend(i);
        for (k, v) in n {
            *incs.entry(k).or_insert(0) += v;
        }
    }
    assert!(!inserted.is_empty());

    let after = compat_tests::config_chunks(&srv.client, "f.c").await;
    assert_eq!(after[0].shard, to, "{after:?}");
    assert_eq!(after[1].shard, "shard0", "{after:?}");
    // Every acknowledged write is there exactly once, by a full scan, by
    // the index and by each key.
    let all: Vec<Document> = futures::TryStreamExt::try_collect(c.find(doc! {}).await.unwrap())
        .await
        .unwrap();
    assert_eq!(
        all.len(),
        PRELOADED as usize + inserted.len(),
        "documents after the moves"
    );
    assert_each_once(&all, &inserted);
    for d in &all {
        if let Ok(id) = d.get_i32("_id") {
            let want = incs.get(&id).copied().unwrap_or(0);
            assert_eq!(num(d, "n"), want as i64, "{d}");
        }
    }
    let by_index = c
        .count_documents(doc! {"v": {"$gte": 0}})
        .hint(mongodb::options::Hint::Keys(doc! {"v": 1}))
        .await
        .unwrap();
    assert_eq!(by_index as usize, all.len(), "the index after the moves");
    let mut by_key = 0;
    for k in 0..40 {
        by_key += c.count_documents(doc! {"k": k}).await.unwrap();
    }
    assert_eq!(by_key as usize, all.len(), "targeted reads after the moves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_balancer_evens_partitions_per_server() {
    if !on_fleet() {
        return;
    }
    let srv = TestServer::start().await;
    shard(&srv, "f.c", 6).await;
    let c: Collection<Document> = srv.db("f").collection("c");
    c.insert_many((0..500).map(|i| doc! {"_id": i, "k": i}))
        .await
        .unwrap();
    // Crowd four partitions onto shard0.
    let chunks = compat_tests::config_chunks(&srv.client, "f.c").await;
    for chunk in chunks.iter().filter(|c| c.shard != "shard0").take(2) {
        srv.db("admin")
            .run_command(doc! {"moveRange": "f.c", "min": chunk.doc.get_document("min").unwrap().clone(), "toShard": "shard0"})
            .await
            .unwrap();
    }
    let per_server = |chunks: &[compat_tests::Chunk]| {
        let mut n = std::collections::BTreeMap::new();
        for c in chunks {
            *n.entry(c.shard.clone()).or_insert(0) += 1;
        }
        n
    };
    let crowded = per_server(&compat_tests::config_chunks(&srv.client, "f.c").await);
    assert_eq!(crowded.get("shard0"), Some(&4), "{crowded:?}");
    // The balancer moves one partition every 10 s until the servers
    // differ by at most one.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = per_server(&compat_tests::config_chunks(&srv.client, "f.c").await);
        let (most, least) = (
            now.values().max().copied().unwrap_or(0),
            now.values().min().copied().unwrap_or(0),
        );
        if now.len() == 3 && most - least <= 1 {
            break;
        }
        assert!(Instant::now() < deadline, "still uneven: {now:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), 500);
    for i in (0..500).step_by(37) {
        assert_eq!(
            c.count_documents(doc! {"k": i}).await.unwrap(),
            1,
            "k = {i}"
        );
    }
}

/// The shards `config.shards` lists, by name.
async fn shard_names(srv: &TestServer) -> Vec<String> {
    let reply = srv
        .db("admin")
        .run_command(doc! {"listShards": 1})
        .await
        .unwrap();
    reply
        .get_array("shards")
        .unwrap()
        .iter()
        .filter_map(|s| s.as_document()?.get_str("_id").ok().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_is_added_and_another_drained_and_removed_while_serving() {
    if !on_fleet() {
        return;
    }
    let urls = fleet().unwrap_or_default();
    assert!(urls.len() >= 3, "needs three servers: {urls:?}");
    // A fleet of the first two servers, in a schema of this test's own.
    let schema = format!(
        "sgt_shards_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000
    );
    let mut args: Vec<String> = vec![
        "--backend".into(),
        "postgres".into(),
        "--balancer".into(),
        "off".into(),
        "--postgres-schema".into(),
        schema,
    ];
    for url in &urls[..2] {
        args.extend(["--postgres".to_string(), url.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut srv = TestServer::start_with_args(&args).await;
    shard(&srv, "f.c", 6).await;
    let c: Collection<Document> = srv.db("f").collection("c");
    c.insert_many((0..600).map(|i| doc! {"_id": i, "k": format!("key{i}")}))
        .await
        .unwrap();
    assert_eq!(shard_names(&srv).await, vec!["shard0", "shard1"]);

    // The third server joins and takes a partition.
    let admin = srv.db("admin");
    let added = admin
        .run_command(doc! {"addShard": &urls[2]})
        .await
        .unwrap();
    assert_eq!(added.get_str("shardAdded").unwrap(), "shard2", "{added}");
    assert_eq!(shard_names(&srv).await, vec!["shard0", "shard1", "shard2"]);
    let again = admin.run_command(doc! {"addShard": &urls[2]}).await;
    assert!(again.is_err(), "a server joins once: {again:?}");
    let (k, _) = key_elsewhere(&srv, "f", "c", &["shard2"]).await;
    admin
        .run_command(doc! {"moveChunk": "f.c", "find": {"k": &k}, "to": "shard2"})
        .await
        .unwrap();
    assert_eq!(shard_of(&srv, "f", "c", &k).await, "shard2");

    // shard1 drains: its partitions move to the others while writes go on.
    let first = admin
        .run_command(doc! {"removeShard": "shard1"})
        .await
        .unwrap();
    assert_eq!(first.get_str("state").unwrap(), "started", "{first}");
    let mut next = 600;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        c.insert_one(doc! {"_id": next, "k": format!("key{next}")})
            .await
            .unwrap();
        next += 1;
        let step = admin
            .run_command(doc! {"removeShard": "shard1"})
            .await
            .unwrap();
        match step.get_str("state").unwrap() {
            "completed" => break,
            "ongoing" => assert!(num(step.get_document("remaining").unwrap(), "chunks") > 0),
            other => panic!("{other}: {step}"),
        }
        assert!(Instant::now() < deadline, "draining never ended: {step}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(shard_names(&srv).await, vec!["shard0", "shard2"]);
    let chunks = compat_tests::config_chunks(&srv.client, "f.c").await;
    assert!(chunks.iter().all(|ch| ch.shard != "shard1"), "{chunks:?}");
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), next as u64);
    for i in [0, 299, next - 1] {
        let d = c.find_one(doc! {"k": format!("key{i}")}).await.unwrap();
        assert_eq!(d.and_then(|d| d.get_i32("_id").ok()), Some(i));
    }
    let gone = admin.run_command(doc! {"removeShard": "shard1"}).await;
    let gone = gone.unwrap_err();
    assert_eq!(code_of(&gone), Some(70), "{gone}");
    let metadata = admin.run_command(doc! {"removeShard": "shard0"}).await;
    assert!(metadata.is_err(), "{metadata:?}");

    // A gateway started with the original two URLs finds the added
    // server in the metadata and serves everything.
    srv.restart_with_args(&args).await;
    let c: Collection<Document> = srv.db("f").collection("c");
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), next as u64);
    assert_eq!(shard_names(&srv).await, vec!["shard0", "shard2"]);
    assert_eq!(shard_of(&srv, "f", "c", &k).await, "shard2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_server_is_followed_through_failover() {
    if !on_fleet() {
        return;
    }
    // One server of the fleet is a primary with a synchronous standby,
    // named by one URL with both hosts.
    let pair = OwnFleet::start(1);
    let url = pair.run("standby", 0);
    assert!(url.contains("target_session_attrs=read-write"), "{url}");
    let srv = TestServer::start_with_args(&[
        "--backend",
        "postgres",
        "--postgres",
        &url,
        "--postgres-schema",
        "failover",
    ])
    .await;
    let c: Collection<Document> = srv.db("f").collection("c");
    c.insert_many((0..100).map(|i| doc! {"_id": i, "n": 0}))
        .await
        .unwrap();

    // A writer goes on while the primary dies and the standby takes over.
    let writer = {
        let c = c.clone();
        tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            let mut codes = BTreeSet::new();
            let started = Instant::now();
            let mut id = 100;
            while started.elapsed() < Duration::from_secs(60) {
                match c.insert_one(doc! {"_id": id, "n": 1}).await {
                    Ok(_) => {
                        acknowledged.push(id);
                        id += 1;
                        // Enough written after the failover.
                        if acknowledged.len() > 400 && !codes.is_empty() {
                            break;
                        }
                    }
                    Err(e) => {
                        codes.insert(code_of(&e));
                        id += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            (acknowledged, codes)
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    pair.run("kill", 0);
    pair.run("promote", 1);
    let (acknowledged, codes) = writer.await.unwrap();

    // The writes failed only while no primary answered, as retryable
    // HostUnreachable (6), and went on on the new primary.
    assert!(!codes.is_empty(), "the failover went unnoticed");
    assert!(codes.iter().all(|&c| c == Some(6)), "{codes:?}");
    assert!(acknowledged.len() > 400, "{} written", acknowledged.len());
    // Every acknowledged write is on the new primary: the standby was
    // synchronous.
    let mut stored = Vec::new();
    let mut cursor = c.find(doc! {"_id": {"$gte": 100}}).await.unwrap();
    while let Some(d) = futures::TryStreamExt::try_next(&mut cursor).await.unwrap() {
        stored.push(d.get_i32("_id").unwrap());
    }
    stored.sort_unstable();
    let mut want = acknowledged.clone();
    want.sort_unstable();
    let missing: Vec<_> = want
        .iter()
        .filter(|i| stored.binary_search(i).is_err())
        .collect();
    assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
    assert_eq!(c.count_documents(doc! {"n": 0}).await.unwrap(), 100);
}
