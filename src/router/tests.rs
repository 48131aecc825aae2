//! Router tests against the in-memory backend: reads and writes through
//! [`Router`], and crash points — every batch of a write failed at every
//! step, and commits lost before they were durable — after which the
//! store, reopened, must still be consistent. The module is declared
//! `#[cfg(test)]` in `mod.rs`: none of this is in the server.

use std::collections::HashMap;
use std::sync::Arc;

use bson::{doc, Bson, Document};

use super::{
    charge, throttle, DocumentValidation, FindSpec, Namespace, PartitionOptions, Router,
    UpdateStatement,
};
use crate::partition::ShardKey;
use crate::query::filter::Filter;
use crate::storage::kv::{KvStore, Space};
use crate::storage::memory::MemoryEngine;
use crate::storage::{blocking, RecordKey, RecordScan, Usage};

fn options() -> PartitionOptions {
    PartitionOptions {
        initial_partitions: 4,
        // Small, so a few documents make a partition split.
        split_bytes: 100,
        ..PartitionOptions::default()
    }
}

fn open(engine: &MemoryEngine) -> Arc<Router> {
    let store = KvStore::new(Arc::new(engine.clone()));
    Arc::new(Router::open_with(store, options()).unwrap())
}

fn ns(coll: &str) -> Namespace {
    Namespace::new("db", coll).unwrap()
}

fn raw(d: Document) -> Vec<u8> {
    d.to_vec().unwrap()
}

fn find(router: &Router, coll: &str, filter: Document) -> Vec<Document> {
    let spec = FindSpec {
        filter: Some(Filter::parse(&filter).unwrap()),
        ..FindSpec::default()
    };
    let mut docs: Vec<Document> = router
        .find_stream(&ns(coll), spec)
        .unwrap()
        .map(|d| d.unwrap())
        .collect();
    docs.sort_by_key(|d| d.get_i32("_id").unwrap_or_default());
    docs
}

fn ids(docs: &[Document]) -> Vec<i32> {
    docs.iter().map(|d| d.get_i32("_id").unwrap()).collect()
}

/// Shards `db.s` on `{k: "hashed"}`.
fn shard_on_k(router: &Router) {
    router
        .shard_collection_now(
            &ns("s"),
            ShardKey::parse(&doc! {"k": "hashed"}).unwrap(),
            None,
        )
        .unwrap();
}

/// A sharded collection `db.s` on `k` with an index on `a` and a unique
/// index on `{k, u}`, holding `_id` 1..=n.
async fn sharded(engine: &MemoryEngine, n: i32) -> Arc<Router> {
    let router = open(engine);
    shard_on_k(&router);
    router
        .create_indexes_now(
            &ns("s"),
            &[
                doc! {"key": {"a": 1}, "name": "a_1"},
                doc! {"key": {"k": 1, "u": 1}, "name": "k_u", "unique": true},
            ],
        )
        .unwrap();
    let docs = (1..=n)
        .map(|i| raw(doc! {"_id": i, "k": i % 5, "u": i, "a": i * 10}))
        .collect();
    let outcome = router
        .insert(&ns("s"), docs, true, DocumentValidation::Enforce)
        .await
        .unwrap();
    assert!(outcome.errors.is_empty());
    router
}

/// Every collection's records, `_id` entries, index entries and usage
/// agree, and nothing is stored for a collection the catalog lacks.
fn assert_consistent(router: &Router, engine: &MemoryEngine) {
    let mut known = Vec::new();
    for coll in router.collections() {
        known.push(coll.id);
        let report = router.validate_now(&coll).unwrap();
        assert!(report.valid(), "{}: {report:?}", coll.ns);
        let Some(sharding) = &coll.sharding else {
            continue;
        };
        let view = router.store().view();
        let mut by_hash: HashMap<i64, Usage> = HashMap::new();
        for item in blocking::iter(view.scan_records(RecordScan::all(coll.id))) {
            let (key, value) = item.unwrap();
            by_hash.entry(key.hash).or_default().add(value.len());
        }
        let stored: HashMap<i64, Usage> =
            blocking::iter(view.scan_usage(coll.id, i64::MIN, i64::MAX))
                .map(|i| i.unwrap())
                .collect();
        assert_eq!(stored, by_hash, "{}: usage per hash", coll.ns);
        for p in &sharding.map().partitions {
            let mut total = Usage::default();
            for (_, u) in by_hash.iter().filter(|(h, _)| p.contains(**h)) {
                total.count += u.count;
                total.bytes += u.bytes;
            }
            let stored = blocking::wait(view.partition_total(coll.id, p.id)).unwrap();
            assert_eq!(
                stored.unwrap_or_default(),
                total,
                "{}: total of p{}",
                coll.ns,
                p.id
            );
            assert_eq!(
                sharding.usage_of(p.id),
                total,
                "{}: loaded total of p{}",
                coll.ns,
                p.id
            );
        }
    }
    for space in [Space::Records, Space::Index, Space::Usage] {
        for (key, _) in engine.dump(space) {
            // Every key of these spaces starts with its collection.
            let collection = RecordKey::decode(&key).map(|k| k.collection);
            assert!(
                collection.is_ok_and(|c| known.contains(&c)),
                "orphan key {key:02x?} in {space:?}"
            );
        }
    }
}

fn dump_all(engine: &MemoryEngine) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    Space::ALL.iter().map(|&s| engine.dump(s)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsharded_collections_read_and_write_through_the_store() {
    let engine = MemoryEngine::new();
    let router = open(&engine);
    router
        .create_indexes_now(&ns("u"), &[doc! {"key": {"a": 1}, "name": "a_1"}])
        .unwrap();
    let docs = (1..=5).map(|i| raw(doc! {"_id": i, "a": i % 2})).collect();
    router
        .insert(&ns("u"), docs, true, DocumentValidation::Enforce)
        .await
        .unwrap();
    assert_eq!(ids(&find(&router, "u", doc! {"a": 1})), vec![1, 3, 5]);
    assert_eq!(
        ids(&find(&router, "u", doc! {"_id": {"$gte": 4}})),
        vec![4, 5]
    );
    let stmt = UpdateStatement {
        filter: Filter::parse(&doc! {"_id": 2}).unwrap(),
        update: crate::aggregate::parse_update(&Bson::Document(doc! {"$set": {"a": 1}}), None)
            .unwrap(),
        multi: false,
        upsert: false,
        sort: None,
        return_documents: false,
        validation: DocumentValidation::Enforce,
    };
    router.update(&ns("u"), &stmt).await.unwrap();
    let (n, _) = router
        .delete(
            &ns("u"),
            &Filter::parse(&doc! {"_id": 5}).unwrap(),
            false,
            None,
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(ids(&find(&router, "u", doc! {"a": 1})), vec![1, 2, 3]);
    assert_consistent(&router, &engine);
    // Everything is there after a restart.
    let reopened = open(&engine);
    assert_eq!(ids(&find(&reopened, "u", doc! {"a": 1})), vec![1, 2, 3]);
    assert_consistent(&reopened, &engine);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_logical_partition_over_the_split_size_stays_whole() {
    let engine = MemoryEngine::new();
    let router = open(&engine);
    shard_on_k(&router);
    let docs = (1..=40)
        .map(|i| raw(doc! {"_id": i, "k": 7, "pad": "x".repeat(50)}))
        .collect();
    let outcome = router
        .insert(&ns("s"), docs, true, DocumentValidation::Enforce)
        .await
        .unwrap();
    assert!(outcome.errors.is_empty());
    let partitions = |router: &Router| {
        let coll = router.catalog.get(&ns("s")).unwrap();
        coll.sharding.clone().unwrap().map().partitions.clone()
    };
    let before = partitions(&router);
    router.split_oversized(&ns("s")).unwrap();
    assert_eq!(partitions(&router), before, "split without a second hash");
    assert_consistent(&router, &engine);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_reports_its_progress_to_current_op() {
    let engine = MemoryEngine::new();
    let router = sharded(&engine, 40).await;
    let operation = crate::query::interrupt::Operation::new(None, None);
    let _entered = crate::query::interrupt::enter(Some(operation.clone()));
    router.split_oversized(&ns("s")).unwrap();
    let progress = operation.progress().expect("no progress reported");
    assert_eq!(progress.message, super::sharding::SPLIT_PROGRESS);
    assert!(progress.total > 0, "{progress:?}");
    assert!(progress.done <= progress.total, "{progress:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_reads_find_each_document_once_across_a_split() {
    let engine = MemoryEngine::new();
    let router = sharded(&engine, 40).await;
    let before = router
        .catalog
        .get(&ns("s"))
        .unwrap()
        .sharding
        .clone()
        .unwrap()
        .map();
    router.split_oversized(&ns("s")).unwrap();
    let coll = router.catalog.get(&ns("s")).unwrap();
    let after = coll.sharding.clone().unwrap().map();
    assert!(
        after.partitions.len() > before.partitions.len(),
        "no split happened"
    );
    // Through the secondary index, by shard key, by `_id`, by scan.
    let through_a = find(&router, "s", doc! {"a": {"$gte": 100, "$lte": 200}});
    assert_eq!(ids(&through_a), (10..=20).collect::<Vec<_>>());
    assert_eq!(
        ids(&find(&router, "s", doc! {"k": 3})),
        vec![3, 8, 13, 18, 23, 28, 33, 38]
    );
    assert_eq!(ids(&find(&router, "s", doc! {"_id": 17})), vec![17]);
    assert_eq!(find(&router, "s", doc! {}).len(), 40);
    assert_eq!(
        router
            .count(
                &ns("s"),
                Some(&Filter::parse(&doc! {"a": {"$lt": 55}}).unwrap())
            )
            .await
            .unwrap(),
        5
    );
    // The unique index still sees every partition.
    let dup = router
        .insert(
            &ns("s"),
            vec![raw(doc! {"_id": 100, "k": 2, "u": 7})],
            true,
            DocumentValidation::Enforce,
        )
        .await
        .unwrap();
    assert_eq!(dup.errors.len(), 1);
    assert_consistent(&router, &engine);
    let reopened = open(&engine);
    assert_eq!(find(&reopened, "s", doc! {"a": {"$gte": 0}}).len(), 40);
    assert_consistent(&reopened, &engine);
}

/// A write, run on a fresh copy of its starting state.
type Scenario = fn(Arc<Router>) -> futures::future::BoxFuture<'static, ()>;

fn insert_with_indexes(router: Arc<Router>) -> futures::future::BoxFuture<'static, ()> {
    Box::pin(async move {
        let docs = (50..53)
            .map(|i| raw(doc! {"_id": i, "k": i, "u": i, "a": i}))
            .collect();
        let _ = router
            .insert(&ns("s"), docs, true, DocumentValidation::Enforce)
            .await;
    })
}

fn update_moving_partitions(router: Arc<Router>) -> futures::future::BoxFuture<'static, ()> {
    Box::pin(async move {
        let stmt = UpdateStatement {
            filter: Filter::parse(&doc! {"_id": {"$lte": 4}}).unwrap(),
            update: crate::aggregate::parse_update(
                &Bson::Document(doc! {"$set": {"k": 77, "a": -1}}),
                None,
            )
            .unwrap(),
            multi: true,
            upsert: false,
            sort: None,
            return_documents: false,
            validation: DocumentValidation::Enforce,
        };
        let _ = router.update(&ns("s"), &stmt).await;
    })
}

fn delete_some(router: Arc<Router>) -> futures::future::BoxFuture<'static, ()> {
    Box::pin(async move {
        let filter = Filter::parse(&doc! {"a": {"$gte": 50}}).unwrap();
        let _ = router.delete(&ns("s"), &filter, true, None).await;
    })
}

fn split(router: Arc<Router>) -> futures::future::BoxFuture<'static, ()> {
    Box::pin(async move {
        let _ = router.split_oversized(&ns("s"));
    })
}

const SCENARIOS: [(&str, Scenario); 4] = [
    ("insert", insert_with_indexes),
    ("update", update_moving_partitions),
    ("delete", delete_some),
    ("split", split),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_failed_at_any_step_leaves_the_store_as_it_was() {
    for (name, scenario) in SCENARIOS {
        let mut step = 0;
        loop {
            assert!(step < 10_000, "{name}: the batch never ends");
            let engine = MemoryEngine::new();
            let router = sharded(&engine, 12).await;
            let before = dump_all(&engine);
            let commits = engine.commits();
            engine.fail_at(step);
            scenario(router).await;
            let fired = engine.disarm();
            let reopened = open(&engine);
            assert_consistent(&reopened, &engine);
            if !fired {
                // The write's batches were all shorter: it completed.
                assert_ne!(dump_all(&engine), before, "{name}: nothing written");
                break;
            }
            if engine.commits() == commits {
                // Its first batch failed: none of it is visible.
                assert_eq!(dump_all(&engine), before, "{name}: failed at step {step}");
            }
            step += 1;
        }
        assert!(step > 0, "{name}: no step failed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_sync_loses_the_write_whole() {
    for (name, scenario) in SCENARIOS {
        let engine = MemoryEngine::new();
        let router = sharded(&engine, 12).await;
        let before = dump_all(&engine);
        engine.hold_sync(true);
        scenario(router).await;
        engine.crash();
        engine.hold_sync(false);
        assert_eq!(dump_all(&engine), before, "{name}");
        let reopened = open(&engine);
        assert_consistent(&reopened, &engine);
        // And once synced, the write survives whole.
        scenario(reopened).await;
        engine.crash();
        let reopened = open(&engine);
        assert_consistent(&reopened, &engine);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_one_data_directory_is_upgraded_on_open() {
    use crate::storage::layout::{self, v1, CatalogKey, IndexEntryKey};
    let engine = MemoryEngine::new();
    let router = sharded(&engine, 20).await;
    let coll = router.catalog.get(&ns("s")).unwrap();
    let map = coll.sharding.clone().unwrap().map();
    drop(router);
    // Rewrite the store in the version-1 layout: entries without their
    // partition, usage under index numbers, no version key.
    let mut old = Vec::new();
    for (key, value) in engine.dump(Space::Index) {
        if let Ok(entry) = IndexEntryKey::decode(&key) {
            old.push((Space::Index, key, None));
            let v1_key = v1::entry_key(entry.collection, entry.index, &entry.entry);
            old.push((Space::Index, v1_key, Some(value)));
        }
    }
    for (key, value) in engine.dump(Space::Usage) {
        old.push((Space::Usage, key.clone(), None));
        let v1_key = match layout::usage_key_hash(&key) {
            Ok(hash) => v1::usage_key(coll.id, hash),
            Err(_) => {
                let p = map
                    .partitions
                    .iter()
                    .find(|p| layout::partition_total_key(coll.id, p.id) == key)
                    .unwrap();
                v1::partition_total_key(coll.id, p.id)
            }
        };
        old.push((Space::Index, v1_key, Some(value)));
    }
    for (space, key, value) in old {
        match value {
            Some(v) => engine.put_raw(space, key, v).unwrap(),
            None => engine.delete_raw(space, key).unwrap(),
        }
    }
    engine
        .delete_raw(Space::Catalog, CatalogKey::FormatVersion.encode())
        .unwrap();
    assert!(engine.dump(Space::Usage).is_empty());
    let reopened = open(&engine);
    assert_consistent(&reopened, &engine);
    assert_eq!(
        ids(&find(&reopened, "s", doc! {"a": {"$gte": 150}})),
        vec![15, 16, 17, 18, 19, 20]
    );
    let version = blocking::wait(reopened.store().meta().get(&CatalogKey::FormatVersion)).unwrap();
    assert_eq!(version.as_deref().and_then(layout::decode_counter), Some(2));
}

/// The partition of `db.s` holding shard-key value `k`.
fn partition_of_key(router: &Router, k: i32) -> u64 {
    let coll = router.collection(&ns("s")).unwrap();
    let hash = crate::partition::hash::hash_value(&Bson::Int32(k));
    Router::partition_of(&coll, hash)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_writes_are_charged_to_the_partition_that_did_them() {
    let engine = MemoryEngine::new();
    let router = sharded(&engine, 20).await;
    let coll = router.collection(&ns("s")).unwrap();

    // A point read by `_id` and shard key: one partition, a point read's
    // charge (a document of under 1 KB: 1 RU).
    let (_, micro) = charge::measured(|| find(&router, "s", doc! {"_id": 3, "k": 3}));
    assert_eq!(micro, charge::MICRO);
    let meter = charge::Meter::new();
    {
        let _in = charge::enter(Some(meter.clone()));
        find(&router, "s", doc! {"_id": 3, "k": 3});
    }
    let charges = meter.charges();
    assert_eq!(charges.len(), 1, "{charges:?}");
    assert_eq!(charges[0].partition, partition_of_key(&router, 3));
    assert_eq!(charges[0].collection, coll.id);

    // A query without the shard key reads every partition: 2.5 RU each
    // at least, and the same again when run again.
    let (_, first) = charge::measured(|| find(&router, "s", doc! {"a": {"$gte": 0}}));
    let (_, again) = charge::measured(|| find(&router, "s", doc! {"a": {"$gte": 0}}));
    assert_eq!(first, again);
    assert!(first >= 4 * charge::PARTITION_QUERY, "{first}");

    // An insert is charged to the partition of its shard-key value: the
    // write, its `_id` entry and its two secondary index entries.
    let meter = charge::Meter::new();
    let doc = doc! {"_id": 100, "k": 4, "u": 100, "a": 1};
    let len = raw(doc.clone()).len();
    charge::scoped(
        &meter,
        router.insert(&ns("s"), vec![raw(doc)], true, DocumentValidation::Enforce),
    )
    .await
    .unwrap();
    let charges = meter.charges();
    assert_eq!(charges.len(), 1, "{charges:?}");
    assert_eq!(charges[0].partition, partition_of_key(&router, 4));
    assert_eq!(charges[0].micro, charge::insert(len, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_over_its_share_refuses_only_its_own_operations() {
    let engine = MemoryEngine::new();
    let store = KvStore::new(Arc::new(engine.clone()));
    let mut opts = options();
    opts.split_bytes = 1 << 30;
    opts.throughput.default_rus = Some(400);
    let router = Arc::new(Router::open_with(store, opts).unwrap());
    shard_on_k(&router);
    let coll = router.collection(&ns("s")).unwrap();
    let hot = partition_of_key(&router, 0);
    let cold = (1..100)
        .map(|k| partition_of_key(&router, k))
        .find(|&p| p != hot)
        .unwrap();
    router.admit(&coll, &[hot, cold]).await.unwrap();
    // 100 RU/s each; the hot partition spends 150.
    router.settle(
        &[charge::PartitionCharge {
            collection: coll.id,
            partition: hot,
            micro: 150 * charge::MICRO,
        }],
        false,
    );
    let err = router.admit(&coll, &[hot]).await.unwrap_err();
    assert_eq!(err.code.number(), 16500);
    let wait = throttle::retry_after_ms(&err.message).unwrap();
    assert!((400..=501).contains(&wait), "{wait}");
    router.admit(&coll, &[cold]).await.unwrap();
    // A fan-out touching the hot partition fails whole.
    assert!(router.admit(&coll, &[cold, hot]).await.is_err());
    let units = router.partition_units(&coll, &[hot, cold]);
    assert_eq!(units[0].provisioned, 100);
    assert_eq!(units[0].consumed, 150.0);
    assert_eq!(units[0].throttled, 2);
    assert_eq!(units[1].throttled, 0);
}

/// Reads decide most records on their stored bytes; whatever they
/// decide, find, count, explain and a `$match` + `$group` must give what
/// the full match of the decoded documents gives, on one partition and
/// across several, arrays and a repeated field name included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_decided_on_stored_bytes_agree_with_the_full_match() {
    use crate::aggregate::{Limits, ParseContext, Pipeline};

    let engine = MemoryEngine::new();
    let router = open(&engine);
    shard_on_k(&router);
    let mut docs: Vec<Document> = (0..60)
        .map(|i| match i % 4 {
            0 => doc! {"_id": i, "k": i % 7, "f": format!("s{}", i % 10), "n": i},
            1 => doc! {"_id": i, "k": i % 7, "f": [format!("s{}", i % 10), "x"], "n": f64::from(i)},
            2 => doc! {"_id": i, "k": i % 7, "g": {"h": i % 3}, "n": i64::from(i)},
            _ => doc! {"_id": i, "k": i % 7, "m": [i % 2], "f": null, "n": {"v": i}},
        })
        .collect();
    let mut bytes: Vec<Vec<u8>> = docs.iter().map(|d| raw(d.clone())).collect();
    // A name written twice: the decoded document keeps the last value.
    let mut twice = bson::RawDocumentBuf::new();
    let name = |n: &'static str| <&bson::raw::CStr>::try_from(n).unwrap();
    twice.append(name("_id"), 100);
    twice.append(name("k"), 1);
    twice.append(name("f"), "s4");
    twice.append(name("f"), "zz");
    docs.push(Document::try_from(twice.as_ref()).unwrap());
    bytes.push(twice.into_bytes());
    for coll in ["u", "s"] {
        let outcome = router
            .insert(&ns(coll), bytes.clone(), true, DocumentValidation::Enforce)
            .await
            .unwrap();
        assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    }
    let filters = [
        doc! {"f": {"$gte": "s3", "$lt": "s6"}},
        doc! {"f": null},
        doc! {"n": {"$gt": 30}},
        doc! {"$or": [{"g.h": 1}, {"f": "x"}]},
        doc! {"f": {"$exists": false}},
        doc! {"n": {"$in": [5, 10.0, 15]}},
        doc! {"$nor": [{"k": 3}]},
        doc! {"f": "zz"},
    ];
    let ctx = super::aggregate::RouterContext::shared(
        router.clone(),
        "db",
        Limits {
            max_blocking_bytes: crate::aggregate::DEFAULT_MAX_BLOCKING_BYTES,
            allow_disk_use: false,
            spill_dir: std::env::temp_dir(),
        },
        None,
        DocumentValidation::Enforce,
    );
    let sorted = |mut out: Vec<Document>| {
        out.sort_by(|a, b| {
            crate::query::compare::compare(a.get("_id").unwrap(), b.get("_id").unwrap())
        });
        format!("{out:?}")
    };
    for coll in ["u", "s"] {
        for f in &filters {
            let parsed = Filter::parse(f).unwrap();
            let expected: Vec<i32> = docs
                .iter()
                .filter(|d| parsed.matches(d))
                .map(|d| d.get_i32("_id").unwrap())
                .collect();
            assert_eq!(ids(&find(&router, coll, f.clone())), expected, "{coll} {f}");
            let counted = router.count_now(&ns(coll), Some(&parsed)).unwrap();
            assert_eq!(counted, expected.len() as u64, "{coll} {f}");
            let spec = FindSpec {
                filter: Some(parsed.clone()),
                ..FindSpec::default()
            };
            let explained = router.explain_now(&ns(coll), &spec).unwrap();
            let examined: u64 = explained.runs.iter().map(|r| r.examined).sum();
            let returned: u64 = explained.runs.iter().map(|r| r.returned).sum();
            assert_eq!(examined, docs.len() as u64, "{coll} {f}");
            assert_eq!(returned, expected.len() as u64, "{coll} {f}");

            let stages = vec![
                Bson::Document(doc! {"$match": f.clone()}),
                Bson::Document(doc! {"$group": {
                    "_id": {"k": "$k", "m": "$m"},
                    "c": {"$sum": 1},
                    "t": {"$sum": "$n"},
                    "hi": {"$max": "$n"},
                }}),
            ];
            let ran = router
                .run_pipeline(
                    &ns(coll),
                    &stages,
                    &ParseContext::default(),
                    ctx.clone(),
                    None,
                )
                .unwrap()
                .collect::<crate::error::Result<Vec<Document>>>()
                .unwrap();
            let decoded = Pipeline::parse(&stages, &ParseContext::default())
                .unwrap()
                .run(Box::new(docs.clone().into_iter().map(Ok)), &ctx)
                .unwrap()
                .collect::<crate::error::Result<Vec<Document>>>()
                .unwrap();
            assert_eq!(sorted(ran), sorted(decoded), "{coll} {f}");
        }
    }
}

/// With activity tracked (the HTTP side port), targeted reads sample
/// their key value, each command counts as a read or write of the
/// partitions it was charged on (a fan-out when there were several), and
/// splits are recorded with their halves; without it, none of this.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracked_activity_samples_keys_counts_operations_and_records_splits() {
    let store = KvStore::new(Arc::new(MemoryEngine::new()));
    let mut router = Router::open_with(store, options()).unwrap();
    router.track_activity();
    let router = Arc::new(router);
    shard_on_k(&router);
    let docs = (0..40).map(|i| raw(doc! {"_id": i, "k": i % 4})).collect();
    router
        .insert(&ns("s"), docs, true, DocumentValidation::Enforce)
        .await
        .unwrap();
    for _ in 0..400 {
        assert_eq!(find(&router, "s", doc! {"k": 3}).len(), 10);
    }
    let coll = router.collection(&ns("s")).unwrap();
    let activity = router.activity().unwrap();
    let (keys, sampled) = activity.hot_keys(coll.id, 10);
    assert!(sampled > 20, "{sampled} of 440 sampled");
    assert_eq!(keys[0].shown, "3");
    assert_eq!(
        keys[0].hash,
        crate::partition::hash::hash_value(&Bson::Int32(3))
    );

    let hot = partition_of_key(&router, 3);
    let other = (0..3)
        .map(|k| partition_of_key(&router, k))
        .find(|&p| p != hot)
        .unwrap();
    let charge = |partition| charge::PartitionCharge {
        collection: coll.id,
        partition,
        micro: 1,
    };
    let counts = |p: &throttle::PartitionActivity| (p.reads, p.writes, p.fanouts);
    let before = router.partition_activity_of(&coll, &[hot, other]);
    router.settle(&[charge(hot)], false);
    router.settle(&[charge(hot), charge(other)], true);
    let after = router.partition_activity_of(&coll, &[hot, other]);
    let moved = |i: usize| {
        let (r0, w0, f0) = counts(&before[i]);
        let (r1, w1, f1) = counts(&after[i]);
        (r1 - r0, w1 - w0, f1 - f0)
    };
    assert_eq!(moved(0), (1, 1, 1));
    assert_eq!(moved(1), (0, 1, 1));

    router.split_oversized(&ns("s")).unwrap();
    let splits = activity.recent_splits();
    assert!(!splits.is_empty());
    assert_eq!(activity.splits_of(coll.id), splits.len() as u64);
    for s in &splits {
        let [low, high] = s.children;
        assert_eq!(s.ns, "db.s");
        assert_eq!(low.partition.min, s.parent.min);
        assert_eq!(high.partition.max, s.parent.max);
        assert_eq!(low.partition.max + 1, high.partition.min);
        assert!(low.documents + high.documents > 0, "{s:?}");
    }

    let plain = open(&MemoryEngine::new());
    shard_on_k(&plain);
    let coll = plain.collection(&ns("s")).unwrap();
    plain.settle(&[charge(0)], false);
    assert!(plain.activity().is_none());
    assert_eq!(
        counts(&plain.partition_activity_of(&coll, &[0])[0]),
        (0, 0, 0)
    );
}
