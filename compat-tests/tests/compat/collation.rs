//! Collations through the official driver: string comparison by locale,
//! strength and numeric ordering in queries, sorts, `distinct`, `$group`
//! and writes, collection defaults, collated (unique) indexes and how the
//! planner and the router use them.
//!
//! Each read and write runs on an unsharded collection and on a copy
//! sharded over 8 partitions, and both must give the same result.

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    expect_command_error, first_batch, num, TestServer,
};

const DB: &str = "collation";

/// The two copies every test compares: unsharded, and sharded on `_id`.
const COPIES: [&str; 2] = ["plain", "sharded"];

async fn run(srv: &TestServer, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    let reply = srv
        .db(DB)
        .run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert_ok(&reply);
    reply
}

/// Creates both copies of a collection holding `docs`; `sharded` is
/// sharded over 8 partitions.
async fn load(srv: &TestServer, prefix: &str, docs: Vec<Document>) {
    for copy in COPIES {
        let name = format!("{prefix}_{copy}");
        if copy == "sharded" {
            run_admin(
                srv,
                doc! {"shardCollection": format!("{DB}.{name}"), "key": {"_id": "hashed"}, "numInitialChunks": 8},
            )
            .await;
        }
        run(srv, doc! {"insert": &name, "documents": docs.clone()}).await;
    }
}

async fn run_admin(srv: &TestServer, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    let reply = srv
        .db("admin")
        .run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert_ok(&reply);
    reply
}

/// The `_id`s of a find's documents, in the order returned.
fn ids(docs: &[Document]) -> Vec<i64> {
    docs.iter().map(|d| num(d, "_id")).collect()
}

/// Runs `find` on both copies (with `extra` fields such as `sort` and
/// `collation`) and returns the `_id`s, checking both copies agree.
async fn find_ids(srv: &TestServer, prefix: &str, filter: Document, extra: Document) -> Vec<i64> {
    let mut results = Vec::new();
    for copy in COPIES {
        let mut cmd = doc! {"find": format!("{prefix}_{copy}"), "filter": filter.clone()};
        cmd.extend(extra.clone());
        let reply = run(srv, cmd).await;
        let mut found = ids(&first_batch(&reply));
        if !extra.contains_key("sort") {
            found.sort_unstable();
        }
        results.push(found);
    }
    assert_eq!(
        results[0], results[1],
        "unsharded and sharded differ for {filter} {extra}"
    );
    results.remove(0)
}

fn names() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "name": "Alice"},
        doc! {"_id": 2, "name": "alice"},
        doc! {"_id": 3, "name": "ALICE"},
        doc! {"_id": 4, "name": "Bob"},
        doc! {"_id": 5, "name": "bob"},
        doc! {"_id": 6, "name": "Zoë"},
        doc! {"_id": 7, "name": "äpfel"},
        doc! {"_id": 8, "name": "zebra"},
    ]
}

fn ci() -> Document {
    doc! {"locale": "en", "strength": 2}
}

#[tokio::test]
async fn query_operators_compare_by_the_collation() {
    let srv = TestServer::start_with_args(&["--initial-partitions", "8"]).await;
    load(&srv, "q", names()).await;
    let c = doc! {"collation": ci()};
    assert_eq!(
        find_ids(&srv, "q", doc! {"name": "alice"}, c.clone()).await,
        [1, 2, 3]
    );
    assert_eq!(
        find_ids(&srv, "q", doc! {"name": "alice"}, doc! {}).await,
        [2]
    );
    assert_eq!(
        find_ids(&srv, "q", doc! {"name": {"$ne": "ALICE"}}, c.clone()).await,
        [4, 5, 6, 7, 8]
    );
    assert_eq!(
        find_ids(&srv, "q", doc! {"name": {"$lt": "b"}}, c.clone()).await,
        [1, 2, 3, 7]
    );
    assert_eq!(
        find_ids(&srv, "q", doc! {"name": {"$lt": "b"}}, doc! {}).await,
        [1, 2, 3, 4, 6]
    );
    assert_eq!(
        find_ids(
            &srv,
            "q",
            doc! {"name": {"$in": ["BOB", "ZEBRA"]}},
            c.clone()
        )
        .await,
        [4, 5, 8]
    );
    assert_eq!(
        find_ids(
            &srv,
            "q",
            doc! {"name": {"$nin": ["alice", "bob"]}},
            c.clone()
        )
        .await,
        [6, 7, 8]
    );
    // Strength 1 also ignores diacritics; `$regex` never uses a collation.
    assert_eq!(
        find_ids(
            &srv,
            "q",
            doc! {"name": "ZOE"},
            doc! {"collation": {"locale": "en", "strength": 1}}
        )
        .await,
        [6]
    );
    assert_eq!(
        find_ids(&srv, "q", doc! {"name": {"$regex": "^a"}}, c.clone()).await,
        [2]
    );
    // `{locale: "simple"}` is the byte order.
    assert_eq!(
        find_ids(
            &srv,
            "q",
            doc! {"name": "alice"},
            doc! {"collation": {"locale": "simple"}}
        )
        .await,
        [2]
    );
    for copy in COPIES {
        let coll = format!("q_{copy}");
        let n = run(
            &srv,
            doc! {"count": &coll, "query": {"name": "ALICE"}, "collation": ci()},
        )
        .await;
        assert_eq!(num(&n, "n"), 3, "{copy}");
        let n = run(&srv, doc! {"count": &coll, "query": {"name": "ALICE"}}).await;
        assert_eq!(num(&n, "n"), 1, "{copy}");
        // Values equal under the collation are one distinct value.
        let d = run(
            &srv,
            doc! {"distinct": &coll, "key": "name", "collation": ci()},
        )
        .await;
        let values: Vec<String> = d
            .get_array("values")
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_lowercase())
            .collect();
        assert_eq!(
            values,
            ["alice", "äpfel", "bob", "zebra", "zoë"],
            "{copy}: {d}"
        );
        let d = run(&srv, doc! {"distinct": &coll, "key": "name"}).await;
        assert_eq!(d.get_array("values").unwrap().len(), 8, "{copy}: {d}");
    }
}

#[tokio::test]
async fn sorts_follow_locale_strength_and_numeric_ordering() {
    let srv = TestServer::start_with_args(&["--initial-partitions", "8"]).await;
    load(&srv, "s", names()).await;
    let sort = doc! {"name": 1, "_id": 1};
    // Simple: by bytes, capitals first and "ä" after "z".
    assert_eq!(
        find_ids(&srv, "s", doc! {}, doc! {"sort": sort.clone()}).await,
        [3, 1, 4, 6, 2, 5, 8, 7]
    );
    // English, tertiary: letters first, lower case before upper.
    assert_eq!(
        find_ids(
            &srv,
            "s",
            doc! {},
            doc! {"sort": sort.clone(), "collation": {"locale": "en"}}
        )
        .await,
        [2, 1, 3, 7, 5, 4, 8, 6]
    );
    // Secondary: case ties, broken by `_id`.
    assert_eq!(
        find_ids(
            &srv,
            "s",
            doc! {},
            doc! {"sort": sort.clone(), "collation": ci()}
        )
        .await,
        [1, 2, 3, 7, 4, 5, 8, 6]
    );
    // German sorts "ä" with "a", Swedish after "z".
    let words = vec![
        doc! {"_id": 1, "w": "ab"},
        doc! {"_id": 2, "w": "äb"},
        doc! {"_id": 3, "w": "ac"},
        doc! {"_id": 4, "w": "z"},
    ];
    load(&srv, "w", words).await;
    let by_w = doc! {"w": 1};
    assert_eq!(
        find_ids(
            &srv,
            "w",
            doc! {},
            doc! {"sort": by_w.clone(), "collation": {"locale": "de"}}
        )
        .await,
        [1, 2, 3, 4]
    );
    assert_eq!(
        find_ids(
            &srv,
            "w",
            doc! {},
            doc! {"sort": by_w.clone(), "collation": {"locale": "sv"}}
        )
        .await,
        [1, 3, 4, 2]
    );
    let numbers = vec![
        doc! {"_id": 1, "v": "10"},
        doc! {"_id": 2, "v": "9"},
        doc! {"_id": 3, "v": "100"},
        doc! {"_id": 4, "v": "2"},
    ];
    load(&srv, "n", numbers).await;
    let by_v = doc! {"v": 1};
    assert_eq!(
        find_ids(&srv, "n", doc! {}, doc! {"sort": by_v.clone()}).await,
        [1, 3, 4, 2]
    );
    let numeric = doc! {"locale": "en", "numericOrdering": true};
    assert_eq!(
        find_ids(
            &srv,
            "n",
            doc! {},
            doc! {"sort": by_v.clone(), "collation": numeric.clone()}
        )
        .await,
        [4, 2, 1, 3]
    );
    assert_eq!(
        find_ids(
            &srv,
            "n",
            doc! {"v": {"$gt": "9"}},
            doc! {"collation": numeric}
        )
        .await,
        [1, 3]
    );
}

#[tokio::test]
async fn aggregation_matches_sorts_and_groups_by_the_collation() {
    let srv = TestServer::start_with_args(&["--initial-partitions", "8"]).await;
    load(&srv, "a", names()).await;
    let mut results = Vec::new();
    for copy in COPIES {
        let reply = run(
            &srv,
            doc! {
                "aggregate": format!("a_{copy}"),
                "pipeline": [
                    {"$group": {"_id": "$name", "n": {"$sum": 1}}},
                    {"$project": {"_id": 0, "k": {"$toLower": "$_id"}, "n": 1}},
                    {"$sort": {"k": 1}},
                ],
                "collation": ci(),
                "cursor": {},
            },
        )
        .await;
        results.push(first_batch(&reply));
        let reply = run(
            &srv,
            doc! {
                "aggregate": format!("a_{copy}"),
                "pipeline": [{"$match": {"name": "BOB"}}, {"$sort": {"_id": 1}}],
                "collation": ci(),
                "cursor": {},
            },
        )
        .await;
        assert_eq!(ids(&first_batch(&reply)), [4, 5], "{copy}");
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(
        results[0],
        vec![
            doc! {"n": 3, "k": "alice"},
            doc! {"n": 1, "k": "äpfel"},
            doc! {"n": 2, "k": "bob"},
            doc! {"n": 1, "k": "zebra"},
            doc! {"n": 1, "k": "zoë"},
        ]
    );
}

/// `$min`, `$max` and `$addToSet` compare strings by the pipeline's
/// collation: under strength 2 "Alice", "alice" and "ALICE" are one
/// value, and "Zoë" sorts after "zebra" (by bytes "äpfel" is last).
#[tokio::test]
async fn group_accumulators_compare_by_the_collation() {
    let srv = TestServer::start_with_args(&["--initial-partitions", "8"]).await;
    load(&srv, "acc", names()).await;
    for copy in COPIES {
        let pipeline = vec![
            doc! {"$group": {"_id": null, "min": {"$min": "$name"}, "max": {"$max": "$name"}, "set": {"$addToSet": "$name"}}},
            doc! {"$project": {"_id": 0, "min": {"$toLower": "$min"}, "max": 1, "n": {"$size": "$set"}}},
        ];
        let reply = run(
            &srv,
            doc! {"aggregate": format!("acc_{copy}"), "pipeline": pipeline.clone(), "collation": ci(), "cursor": {}},
        )
        .await;
        assert_eq!(
            first_batch(&reply),
            vec![doc! {"max": "Zoë", "min": "alice", "n": 5}],
            "{copy}"
        );
        let reply = run(
            &srv,
            doc! {"aggregate": format!("acc_{copy}"), "pipeline": pipeline, "cursor": {}},
        )
        .await;
        assert_eq!(
            first_batch(&reply),
            vec![doc! {"max": "äpfel", "min": "alice", "n": 8}],
            "{copy}"
        );
    }
}

/// A view's own collation applies to every read of it; a view does not
/// inherit its collection's default, and no read may name another.
#[tokio::test]
async fn views_have_their_own_collation() {
    let srv = TestServer::start_with_args(&["--initial-partitions", "8"]).await;
    load(&srv, "vw", names()).await;
    for copy in COPIES {
        let view = format!("vw_{copy}_ci");
        run(
            &srv,
            doc! {"create": &view, "viewOn": format!("vw_{copy}"), "pipeline": [], "collation": ci()},
        )
        .await;
        let reply = run(
            &srv,
            doc! {"find": &view, "filter": {"name": "alice"}, "sort": {"_id": 1}},
        )
        .await;
        assert_eq!(ids(&first_batch(&reply)), [1, 2, 3], "{copy}");
        let reply = run(
            &srv,
            doc! {"find": &view, "filter": {"name": "alice"}, "collation": ci()},
        )
        .await;
        assert_eq!(first_batch(&reply).len(), 3, "{copy}");
        let reply = run(&srv, doc! {"count": &view, "query": {"name": "BOB"}}).await;
        assert_eq!(num(&reply, "n"), 2, "{copy}");
        let reply = run(
            &srv,
            doc! {"aggregate": &view, "pipeline": [{"$match": {"name": "ALICE"}}, {"$count": "n"}], "cursor": {}},
        )
        .await;
        assert_eq!(first_batch(&reply), vec![doc! {"n": 3}], "{copy}");
        expect_command_error(
            &srv.db(DB),
            doc! {"find": &view, "filter": {}, "collation": {"locale": "simple"}},
            167,
            "OptionNotSupportedOnView",
        )
        .await;
        // A view on it needs the same collation.
        expect_command_error(
            &srv.db(DB),
            doc! {"create": format!("{view}_on"), "viewOn": &view, "pipeline": []},
            167,
            "OptionNotSupportedOnView",
        )
        .await;
        run(
            &srv,
            doc! {"create": format!("{view}_on"), "viewOn": &view, "pipeline": [], "collation": ci()},
        )
        .await;
        let reply = run(
            &srv,
            doc! {"count": format!("{view}_on"), "query": {"name": "alice"}},
        )
        .await;
        assert_eq!(num(&reply, "n"), 3, "{copy}");
    }
    let reply = run(
        &srv,
        doc! {"listCollections": 1, "filter": {"name": "vw_plain_ci"}},
    )
    .await;
    let info = &first_batch(&reply)[0];
    let collation = info
        .get_document("options")
        .and_then(|o| o.get_document("collation"))
        .unwrap_or_else(|_| panic!("no collation in {info}"));
    assert_eq!(collation.get_str("locale").unwrap(), "en");
    assert_eq!(num(collation, "strength"), 2);
    // A collection's default does not pass to a view on it.
    run(&srv, doc! {"create": "vw_default", "collation": ci()}).await;
    run(&srv, doc! {"insert": "vw_default", "documents": names()}).await;
    run(
        &srv,
        doc! {"create": "vw_default_view", "viewOn": "vw_default", "pipeline": []},
    )
    .await;
    let reply = run(
        &srv,
        doc! {"count": "vw_default", "query": {"name": "alice"}},
    )
    .await;
    assert_eq!(num(&reply, "n"), 3);
    let reply = run(
        &srv,
        doc! {"count": "vw_default_view", "query": {"name": "alice"}},
    )
    .await;
    assert_eq!(num(&reply, "n"), 1);
}

#[tokio::test]
async fn writes_take_a_collation_per_statement() {
    let srv = TestServer::start_with_args(&["--initial-partitions", "8"]).await;
    load(&srv, "u", names()).await;
    for copy in COPIES {
        let coll = format!("u_{copy}");
        // Two statements of one batch: one collated, one not.
        let reply = run(
            &srv,
            doc! {"update": &coll, "updates": [
                {"q": {"name": "ALICE"}, "u": {"$set": {"ci": true}}, "multi": true, "collation": ci()},
                {"q": {"name": "ALICE"}, "u": {"$set": {"exact": true}}, "multi": true},
            ]},
        )
        .await;
        assert_eq!(num(&reply, "n"), 4, "{copy}: {reply}");
        let reply = run(&srv, doc! {"count": &coll, "query": {"ci": true}}).await;
        assert_eq!(num(&reply, "n"), 3, "{copy}");
        let reply = run(&srv, doc! {"count": &coll, "query": {"exact": true}}).await;
        assert_eq!(num(&reply, "n"), 1, "{copy}");
        // Update operators that compare use the statement's collation.
        let reply = run(
            &srv,
            doc! {"update": &coll, "updates": [
                {"q": {"_id": 8}, "u": {"$set": {"tags": ["x", "Y", "z"]}}},
                {"q": {"_id": 8}, "u": {"$addToSet": {"tags": "X"}, "$max": {"name": "ZEBRA"}}, "collation": ci()},
                {"q": {"_id": 8}, "u": {"$pull": {"tags": "y"}}, "collation": ci()},
                {"q": {"_id": 8}, "u": {"$pull": {"tags": "Z"}}},
            ]},
        )
        .await;
        assert_eq!(num(&reply, "nModified"), 2, "{copy}: {reply}");
        let reply = run(&srv, doc! {"find": &coll, "filter": {"_id": 8}}).await;
        let eight = first_batch(&reply).remove(0);
        assert_eq!(eight.get_str("name").unwrap(), "zebra", "{copy}: {eight}");
        let tags: Vec<&str> = eight
            .get_array("tags")
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(tags, ["x", "z"], "{copy}: {eight}");

        let reply = run(
            &srv,
            doc! {
                "findAndModify": &coll,
                "query": {"name": "ZOE"},
                "update": {"$set": {"found": true}},
                "new": true,
                "collation": {"locale": "en", "strength": 1},
            },
        )
        .await;
        let value = reply.get_document("value").unwrap();
        assert_eq!(num(value, "_id"), 6, "{copy}: {reply}");
        // The collated sort picks the first of the case-insensitive ties.
        let reply = run(
            &srv,
            doc! {
                "findAndModify": &coll,
                "query": {"name": {"$gte": "b"}},
                "sort": {"name": 1, "_id": -1},
                "remove": true,
                "collation": ci(),
            },
        )
        .await;
        assert_eq!(
            num(reply.get_document("value").unwrap(), "_id"),
            5,
            "{copy}: {reply}"
        );

        let reply = run(
            &srv,
            doc! {"delete": &coll, "deletes": [
                {"q": {"name": "alice"}, "limit": 0},
                {"q": {"name": "ALICE"}, "limit": 0, "collation": ci()},
            ]},
        )
        .await;
        assert_eq!(num(&reply, "n"), 3, "{copy}: {reply}");
        let left = find_ids_one(&srv, &coll).await;
        assert_eq!(left, [4, 6, 7, 8], "{copy}");
    }
}

async fn find_ids_one(srv: &TestServer, coll: &str) -> Vec<i64> {
    let reply = run(srv, doc! {"find": coll, "sort": {"_id": 1}}).await;
    ids(&first_batch(&reply))
}

#[tokio::test]
async fn collection_default_collation_applies_and_is_shown() {
    let srv = TestServer::start_with_args(&["--initial-partitions", "8"]).await;
    run(&srv, doc! {"create": "people", "collation": ci()}).await;
    run(&srv, doc! {"insert": "people", "documents": names()}).await;
    let listed = run(
        &srv,
        doc! {"listCollections": 1, "filter": {"name": "people"}},
    )
    .await;
    let full = doc! {
        "locale": "en", "caseLevel": false, "caseFirst": "off", "strength": 2,
        "numericOrdering": false, "alternate": "non-ignorable", "maxVariable": "punct",
        "normalization": false, "backwards": false, "version": "57.1",
    };
    let options = first_batch(&listed)[0]
        .get_document("options")
        .unwrap()
        .clone();
    assert_eq!(
        options.get_document("collation").unwrap(),
        &full,
        "{listed}"
    );
    // Operations without a collation use the collection's.
    let reply = run(&srv, doc! {"find": "people", "filter": {"name": "alice"}}).await;
    assert_eq!(first_batch(&reply).len(), 3);
    let reply = run(
        &srv,
        doc! {"find": "people", "filter": {"name": "alice"}, "collation": {"locale": "simple"}},
    )
    .await;
    assert_eq!(ids(&first_batch(&reply)), [2]);
    let reply = run(&srv, doc! {"count": "people", "query": {"name": "BOB"}}).await;
    assert_eq!(num(&reply, "n"), 2);
    // A new index inherits it; `{locale: "simple"}` opts out.
    run(
        &srv,
        doc! {"createIndexes": "people", "indexes": [
            {"key": {"name": 1}, "name": "by_name"},
            {"key": {"name": -1}, "name": "by_name_bytes", "collation": {"locale": "simple"}},
        ]},
    )
    .await;
    let listed = run(&srv, doc! {"listIndexes": "people"}).await;
    let specs = first_batch(&listed);
    let by_name = specs
        .iter()
        .find(|s| s.get_str("name") == Ok("by_name"))
        .unwrap();
    assert_eq!(
        by_name.get_document("collation").unwrap(),
        &full,
        "{listed}"
    );
    let bytes = specs
        .iter()
        .find(|s| s.get_str("name") == Ok("by_name_bytes"))
        .unwrap();
    assert!(!bytes.contains_key("collation"), "{listed}");
    // The shard key index must compare by bytes.
    let db = srv.db("admin");
    expect_command_error(
        &db,
        doc! {"shardCollection": format!("{DB}.people"), "key": {"_id": "hashed"}},
        2,
        "BadValue",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"shardCollection": format!("{DB}.people"), "key": {"_id": "hashed"}, "collation": ci()},
        2,
        "BadValue",
    )
    .await;
    run_admin(
        &srv,
        doc! {"shardCollection": format!("{DB}.people"), "key": {"_id": "hashed"}, "collation": {"locale": "simple"}},
    )
    .await;
    let reply = run(&srv, doc! {"find": "people", "filter": {"name": "ALICE"}}).await;
    assert_eq!(
        first_batch(&reply).len(),
        3,
        "the default still applies once sharded"
    );
}

#[tokio::test]
async fn bad_collations_get_mongodb_errors() {
    let srv = TestServer::start().await;
    run(&srv, doc! {"insert": "c", "documents": [{"_id": 1}]}).await;
    let db = srv.db(DB);
    let cases: Vec<(Document, i32, &str)> = vec![
        (doc! {"locale": "en", "bogus": 1}, 40415, "Location40415"),
        (doc! {"strength": 2}, 40414, "Location40414"),
        (doc! {"locale": "xx_YY"}, 2, "BadValue"),
        (doc! {"locale": 7}, 14, "TypeMismatch"),
        (doc! {"locale": "en", "strength": 6}, 51024, "Location51024"),
        (
            doc! {"locale": "en", "caseFirst": "sideways"},
            2,
            "BadValue",
        ),
        (
            doc! {"locale": "en", "strength": 1, "caseFirst": "upper"},
            2,
            "BadValue",
        ),
        (
            doc! {"locale": "en", "version": "1.0"},
            161,
            "IncompatibleCollationVersion",
        ),
    ];
    for (collation, code, name) in cases {
        expect_command_error(
            &db,
            doc! {"find": "c", "filter": {}, "collation": collation.clone()},
            code,
            name,
        )
        .await;
        expect_command_error(
            &db,
            doc! {"create": "made", "collation": collation},
            code,
            name,
        )
        .await;
    }
    expect_command_error(
        &db,
        doc! {"find": "c", "collation": "en"},
        14,
        "TypeMismatch",
    )
    .await;
}

#[tokio::test]
async fn collated_unique_index_refuses_case_insensitive_duplicates() {
    let srv = TestServer::start().await;
    run(
        &srv,
        doc! {"createIndexes": "users", "indexes": [{
            "key": {"name": 1}, "name": "name_ci", "unique": true, "collation": ci(),
        }]},
    )
    .await;
    run(
        &srv,
        doc! {"insert": "users", "documents": [{"_id": 1, "name": "Alice"}]},
    )
    .await;
    let reply = srv
        .db(DB)
        .run_command(doc! {"insert": "users", "documents": [{"_id": 2, "name": "alice"}]})
        .await
        .unwrap();
    let errors = reply
        .get_array("writeErrors")
        .expect("a duplicate key error");
    let error = errors[0].as_document().unwrap();
    assert_eq!(num(error, "code"), 11000, "{reply}");
    // Other names, and other diacritics at strength 2, are distinct.
    run(&srv, doc! {"insert": "users", "documents": [{"_id": 3, "name": "Bob"}, {"_id": 4, "name": "Alicé"}]}).await;
    // Building over existing duplicates fails too.
    run(
        &srv,
        doc! {"insert": "dups", "documents": [{"_id": 1, "n": "x"}, {"_id": 2, "n": "X"}]},
    )
    .await;
    expect_command_error(
        &srv.db(DB),
        doc! {"createIndexes": "dups", "indexes": [{"key": {"n": 1}, "name": "n", "unique": true, "collation": ci()}]},
        11000,
        "DuplicateKey",
    )
    .await;
    // An update that would make a duplicate fails as well.
    let reply = srv
        .db(DB)
        .run_command(doc! {"update": "users", "updates": [{"q": {"_id": 3}, "u": {"$set": {"name": "ALICE"}}}]})
        .await
        .unwrap();
    assert!(reply.get_array("writeErrors").is_ok(), "{reply}");
}

/// The stages of a plan, outermost first, following `inputStage` and the
/// per-partition plans of a mongos-shaped explain.
fn stages(plan: &Document, out: &mut Vec<String>) {
    if let Ok(s) = plan.get_str("stage") {
        out.push(s.to_string());
    }
    if let Ok(name) = plan.get_str("indexName") {
        out.push(format!("index:{name}"));
    }
    if let Ok(input) = plan.get_document("inputStage") {
        stages(input, out);
    }
    for key in ["inputStages", "shards"] {
        if let Ok(items) = plan.get_array(key) {
            for item in items.iter().filter_map(Bson::as_document) {
                match item.get_document("winningPlan") {
                    Ok(p) => stages(p, out),
                    Err(_) => stages(item, out),
                }
            }
        }
    }
}

async fn plan_of(srv: &TestServer, find: Document) -> Vec<String> {
    let reply = run(srv, doc! {"explain": find, "verbosity": "queryPlanner"}).await;
    let plan = reply
        .get_document("queryPlanner")
        .and_then(|p| p.get_document("winningPlan"))
        .unwrap_or_else(|_| panic!("no winningPlan: {reply}"));
    let mut out = Vec::new();
    stages(plan, &mut out);
    out
}

#[tokio::test]
async fn an_index_serves_only_queries_of_its_collation() {
    let srv = TestServer::start_with_args(&["--initial-partitions", "8"]).await;
    load(&srv, "i", names()).await;
    for copy in COPIES {
        let coll = format!("i_{copy}");
        run(
            &srv,
            doc! {"createIndexes": &coll, "indexes": [{"key": {"name": 1}, "name": "name_ci", "collation": ci()}]},
        )
        .await;
        let same = plan_of(
            &srv,
            doc! {"find": &coll, "filter": {"name": "alice"}, "collation": ci()},
        )
        .await;
        assert!(
            same.contains(&"index:name_ci".to_string()),
            "{copy}: {same:?}"
        );
        assert!(
            same.contains(&"FETCH".to_string()),
            "{copy}: collated keys are never covered: {same:?}"
        );
        let simple = plan_of(&srv, doc! {"find": &coll, "filter": {"name": "alice"}}).await;
        assert!(
            simple.contains(&"COLLSCAN".to_string()),
            "{copy}: {simple:?}"
        );
        let other = plan_of(
            &srv,
            doc! {"find": &coll, "filter": {"name": "alice"}, "collation": {"locale": "fr"}},
        )
        .await;
        assert!(other.contains(&"COLLSCAN".to_string()), "{copy}: {other:?}");
        // Through the index, results are those of the collation.
        assert_eq!(
            find_ids(
                &srv,
                "i",
                doc! {"name": {"$gte": "B", "$lt": "c"}},
                doc! {"collation": ci()}
            )
            .await,
            [4, 5]
        );
        let projected = run(
            &srv,
            doc! {"find": &coll, "filter": {"name": "ALICE"}, "projection": {"_id": 0, "name": 1},
            "sort": {"name": 1}, "collation": ci()},
        )
        .await;
        let mut got: Vec<String> = first_batch(&projected)
            .iter()
            .map(|d| d.get_str("name").unwrap().to_string())
            .collect();
        got.sort();
        assert_eq!(got, ["ALICE", "Alice", "alice"], "{copy}");
    }
}

#[tokio::test]
async fn a_collated_string_shard_key_query_fans_out() {
    let srv = TestServer::start_with_args(&["--initial-partitions", "8"]).await;
    run_admin(
        &srv,
        doc! {"shardCollection": format!("{DB}.by_name"), "key": {"name": "hashed"}},
    )
    .await;
    run(&srv, doc! {"insert": "by_name", "documents": names()}).await;
    let shards = |plan: &Document| -> (String, usize) {
        let p = plan
            .get_document("queryPlanner")
            .and_then(|p| p.get_document("winningPlan"))
            .unwrap();
        (
            p.get_str("stage").unwrap().to_string(),
            p.get_array("shards").map(|s| s.len()).unwrap_or(0),
        )
    };
    let targeted = run(
        &srv,
        doc! {"explain": {"find": "by_name", "filter": {"name": "alice"}}, "verbosity": "queryPlanner"},
    )
    .await;
    assert_eq!(
        shards(&targeted),
        ("SINGLE_SHARD".to_string(), 1),
        "{targeted}"
    );
    let collated = run(
        &srv,
        doc! {"explain": {"find": "by_name", "filter": {"name": "alice"}, "collation": ci()}, "verbosity": "queryPlanner"},
    )
    .await;
    let (stage, n) = shards(&collated);
    assert_ne!(stage, "SINGLE_SHARD", "{collated}");
    assert_eq!(n, 8, "{collated}");
    let reply = run(
        &srv,
        doc! {"find": "by_name", "filter": {"name": "alice"}, "collation": ci()},
    )
    .await;
    let mut found = ids(&first_batch(&reply));
    found.sort_unstable();
    assert_eq!(found, [1, 2, 3]);
    // Numbers on the key still target one partition.
    let numeric = run(
        &srv,
        doc! {"explain": {"find": "by_name", "filter": {"name": 5}, "collation": ci()}, "verbosity": "queryPlanner"},
    )
    .await;
    assert_eq!(shards(&numeric).0, "SINGLE_SHARD", "{numeric}");
}
