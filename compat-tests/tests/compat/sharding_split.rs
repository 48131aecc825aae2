//! Partitions that split while clients read and write: nothing is lost,
//! repeated or applied twice, an open cursor stays exact, and the split
//! layout survives a restart.
//!
//! The server runs with `--partition-split-bytes 200000` and two initial
//! partitions, so the ~3.3 MB written here forces many background splits.

use std::{collections::HashMap, time::Duration};

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    config_chunks,
    mongodb::Collection,
    num, Rng, TestServer,
};
use futures::TryStreamExt;

const SPLIT_BYTES: i64 = 200_000;
const PRELOADED: usize = 2_000;
const INSERTERS: usize = 3;
const INSERTS_EACH: usize = 3_000;
const UPDATERS: usize = 2;
const UPDATES_EACH: usize = 500;
const TOTAL: usize = PRELOADED + INSERTERS * INSERTS_EACH;

/// Padding that makes each document about 300 bytes of BSON.
fn pad() -> String {
    "p".repeat(240)
}

fn preloaded_id(i: usize) -> String {
    format!("pre-{i:05}")
}

async fn run(srv: &TestServer, db: &str, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    srv.db(db)
        .run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{db}: {shown}: {e}"))
}

/// collStats of `split.c`: (nchunks, partition name → (count, size)).
async fn layout(srv: &TestServer) -> (i64, HashMap<String, (i64, i64)>) {
    let stats = run(srv, "split", doc! {"collStats": "c"}).await;
    assert_eq!(stats.get_bool("sharded"), Ok(true), "{stats}");
    let shards = stats
        .get_document("shards")
        .unwrap_or_else(|_| panic!("no shards in {stats}"));
    let per_shard = shards
        .iter()
        .map(|(name, s)| {
            let s = s.as_document().expect("shards entries are documents");
            (name.clone(), (num(s, "count"), num(s, "size")))
        })
        .collect();
    (num(&stats, "nchunks"), per_shard)
}

async fn everything(c: &Collection<Document>) -> Vec<Document> {
    c.find(doc! {})
        .sort(doc! {"_id": 1})
        .batch_size(5_000)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partitions_split_under_load_without_losing_or_repeating_anything() {
    let mut srv = TestServer::start_with_args(&[
        "--partition-split-bytes",
        &SPLIT_BYTES.to_string(),
        "--initial-partitions",
        "2",
    ])
    .await;
    assert_ok(
        &run(
            &srv,
            "admin",
            doc! {"shardCollection": "split.c", "key": {"_id": "hashed"}},
        )
        .await,
    );
    assert_eq!(layout(&srv).await.0, 2);
    let c = srv.db("split").collection::<Document>("c");
    let preloaded: Vec<Document> = (0..PRELOADED)
        .map(|i| doc! {"_id": preloaded_id(i), "n": 0, "pad": pad()})
        .collect();
    for batch in preloaded.chunks(500) {
        c.insert_many(batch.to_vec()).await.unwrap();
    }

    // A cursor opened on the preloaded set before the load starts.
    let mut cursor = c.find(doc! {}).batch_size(100).await.unwrap();
    let nchunks_at_open = layout(&srv).await.0;

    let mut inserters = Vec::new();
    for t in 0..INSERTERS {
        let c = c.clone();
        inserters.push(tokio::spawn(async move {
            let ids: Vec<String> = (0..INSERTS_EACH)
                .map(|i| format!("ins-{t}-{i:05}"))
                .collect();
            for batch in ids.chunks(50) {
                let docs: Vec<Document> = batch
                    .iter()
                    .map(|id| doc! {"_id": id, "t": t as i32, "pad": pad()})
                    .collect();
                c.insert_many(docs).await.unwrap();
            }
            ids
        }));
    }
    let mut updaters = Vec::new();
    for u in 0..UPDATERS {
        let c = c.clone();
        updaters.push(tokio::spawn(async move {
            let mut rng = Rng::new(1000 + u as u64);
            let mut applied: HashMap<String, i64> = HashMap::new();
            for _ in 0..UPDATES_EACH {
                let id = preloaded_id(rng.below(PRELOADED as u64) as usize);
                let r = c
                    .update_one(doc! {"_id": &id}, doc! {"$inc": {"n": 1}})
                    .await
                    .unwrap();
                assert_eq!((r.matched_count, r.modified_count), (1, 1), "$inc {id}");
                *applied.entry(id).or_default() += 1;
            }
            applied
        }));
    }

    // Read half the preloaded set slowly while the load runs ...
    let mut from_cursor: HashMap<String, usize> = HashMap::new();
    let mut read = 0usize;
    while read < PRELOADED / 2 {
        let d = cursor
            .try_next()
            .await
            .expect("the open cursor survives splits")
            .expect("the cursor ended early");
        let id = d.get_str("_id").expect("string _id").to_string();
        *from_cursor.entry(id).or_default() += 1;
        read += 1;
        if read.is_multiple_of(100) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    let mut inserted = Vec::new();
    for t in inserters {
        inserted.extend(t.await.unwrap());
    }
    let mut increments: HashMap<String, i64> = HashMap::new();
    for u in updaters {
        for (id, n) in u.await.unwrap() {
            *increments.entry(id).or_default() += n;
        }
    }

    // ... let the background splits settle: every partition at most the
    // split size ...
    let mut settled = layout(&srv).await;
    for _ in 0..60 {
        if settled.0 > nchunks_at_open && settled.1.values().all(|(_, size)| *size <= SPLIT_BYTES) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        settled = layout(&srv).await;
    }
    let (nchunks, per_shard) = settled;
    assert!(
        nchunks > nchunks_at_open && nchunks > 2,
        "no partition split while the cursor was open ({nchunks_at_open} then {nchunks}): {per_shard:?}"
    );

    // ... and read the rest.
    while let Some(d) = cursor
        .try_next()
        .await
        .expect("the open cursor survives splits")
    {
        let id = d.get_str("_id").expect("string _id").to_string();
        *from_cursor.entry(id).or_default() += 1;
    }

    // The cursor: each preloaded document exactly once, nothing twice.
    for i in 0..PRELOADED {
        let id = preloaded_id(i);
        assert_eq!(from_cursor.get(&id), Some(&1), "{id} from the open cursor");
    }
    let repeated: Vec<_> = from_cursor.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "the open cursor repeated {repeated:?}");

    // Each partition is a shard of its own, except on a fleet, where a
    // shard is a server holding several.
    if compat_tests::fleet().is_none() {
        assert_eq!(nchunks as usize, per_shard.len(), "{per_shard:?}");
        assert!(
            per_shard.values().all(|(_, size)| *size <= SPLIT_BYTES),
            "a partition stayed above {SPLIT_BYTES} bytes: {per_shard:?}"
        );
    }
    assert_eq!(
        per_shard.values().map(|(n, _)| n).sum::<i64>(),
        TOTAL as i64,
        "{per_shard:?}"
    );

    // Every document exactly once; every $inc applied exactly once.
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), TOTAL as u64);
    let all = everything(&c).await;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for d in &all {
        *seen
            .entry(d.get_str("_id").unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(all.len(), TOTAL);
    for id in inserted
        .iter()
        .cloned()
        .chain((0..PRELOADED).map(preloaded_id))
    {
        assert_eq!(seen.get(&id), Some(&1), "{id} in a full scan");
    }
    for d in all
        .iter()
        .filter(|d| d.get_str("_id").unwrap().starts_with("pre-"))
    {
        let id = d.get_str("_id").unwrap();
        let want = increments.get(id).copied().unwrap_or(0);
        assert_eq!(
            d.get_i32("n").map(i64::from).or_else(|_| d.get_i64("n")),
            Ok(want),
            "{d}"
        );
    }

    // config.chunks agrees with collStats.
    let chunks = config_chunks(&srv.client, "split.c").await;
    assert_eq!(chunks.len() as i64, nchunks, "{chunks:?}");
    let mut chunk_shards: Vec<String> = chunks.iter().map(|c| c.shard.clone()).collect();
    chunk_shards.sort();
    // On a fleet a shard is a server holding several partitions.
    chunk_shards.dedup();
    let mut stat_shards: Vec<String> = per_shard.keys().cloned().collect();
    stat_shards.sort();
    assert_eq!(chunk_shards, stat_shards);

    // Restarted without the split flag, nothing splits further: the layout
    // and the data must come back exactly as they were. On a fleet the
    // balancer may move a partition to another server meanwhile, so there
    // the partitions' bounds and the totals must, not the servers.
    let moves = compat_tests::fleet().is_some();
    let shown = |shard: &str| {
        if moves {
            String::new()
        } else {
            shard.to_string()
        }
    };
    let bounds: Vec<_> = chunks
        .iter()
        .map(|c| (c.min, c.max, shown(&c.shard)))
        .collect();
    srv.restart().await;
    let c = srv.db("split").collection::<Document>("c");
    let (nchunks_after, per_shard_after) = layout(&srv).await;
    assert_eq!(nchunks_after, nchunks);
    let counts = |m: &HashMap<String, (i64, i64)>| {
        let mut v: Vec<(String, i64)> = m.iter().map(|(k, (n, _))| (shown(k), *n)).collect();
        v.sort();
        if moves {
            v = vec![(String::new(), v.iter().map(|(_, n)| n).sum())];
        }
        v
    };
    assert_eq!(counts(&per_shard_after), counts(&per_shard));
    let chunks_after = config_chunks(&srv.client, "split.c").await;
    let bounds_after: Vec<_> = chunks_after
        .iter()
        .map(|c| (c.min, c.max, shown(&c.shard)))
        .collect();
    assert_eq!(bounds_after, bounds);
    assert_eq!(c.count_documents(doc! {}).await.unwrap(), TOTAL as u64);
    assert_eq!(everything(&c).await, all);
    // Still routed: each document is found by its shard key.
    for i in (0..PRELOADED).step_by(97) {
        let id = preloaded_id(i);
        let got = c.find_one(doc! {"_id": &id}).await.unwrap();
        assert_eq!(
            got.as_ref().and_then(|d| d.get("_id")),
            Some(&Bson::String(id))
        );
    }
}
