//! Full-text search through the official driver: text indexes and their
//! options, `$text` queries (terms, phrases, negations, languages, case
//! and diacritic sensitivity), `{$meta: "textScore"}` values as MongoDB
//! 7.0 computes them, sorting by score, and MongoDB's errors.
//!
//! Every query runs on an unsharded collection and on a copy sharded over
//! 8 partitions; both must give the same results.

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    expect_command_error, first_batch, TestServer,
};

/// The collections each query runs on: unsharded, then sharded.
const COPIES: [&str; 2] = ["plain", "sharded"];

fn articles() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "title": "Coffee Shop", "body": "The best coffee in town"},
        doc! {"_id": 2, "title": "Tea house", "body": "green tea and black tea"},
        doc! {"_id": 3, "title": "coffee", "body": "decaf coffee beans"},
        doc! {"_id": 4, "title": "Café au lait", "body": "milk coffee"},
        doc! {"_id": 5, "title": "corriendo", "body": "", "language": "spanish"},
        doc! {"_id": 6, "title": "Bakery", "body": "cakes and bread"},
    ]
}

async fn run(srv: &TestServer, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    srv.db("text")
        .run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

/// Both copies of the articles, with a text index on title (weight 10)
/// and body.
async fn setup() -> TestServer {
    let srv = TestServer::start_with_args(&["--initial-partitions", "8"]).await;
    for name in COPIES {
        if name == "sharded" {
            let reply = srv
                .db("admin")
                .run_command(
                    doc! {"shardCollection": format!("text.{name}"), "key": {"_id": "hashed"}},
                )
                .await
                .unwrap();
            assert_ok(&reply);
        }
        let reply = run(
            &srv,
            doc! {"createIndexes": name, "indexes": [
                {"key": {"title": "text", "body": "text"}, "name": "title_text_body_text", "weights": {"title": 10}},
            ]},
        )
        .await;
        assert_ok(&reply);
        let reply = run(&srv, doc! {"insert": name, "documents": articles()}).await;
        assert_eq!(reply.get_i32("n").unwrap(), 6);
    }
    srv
}

/// `(_id, score)` of a `$text` search sorted by score (ties by `_id`), on
/// both copies, which must agree.
async fn search(srv: &TestServer, text: Document) -> Vec<(i32, f64)> {
    let mut results = Vec::new();
    for name in COPIES {
        let reply = run(
            srv,
            doc! {
                "find": name,
                "filter": {"$text": text.clone()},
                "projection": {"score": {"$meta": "textScore"}},
                "sort": {"score": {"$meta": "textScore"}, "_id": 1},
            },
        )
        .await;
        let got: Vec<(i32, f64)> = first_batch(&reply)
            .iter()
            .map(|d| (d.get_i32("_id").unwrap(), d.get_f64("score").unwrap()))
            .collect();
        results.push(got);
    }
    assert_eq!(
        results[0], results[1],
        "sharded and unsharded differ for {text}"
    );
    results.remove(0)
}

async fn ids(srv: &TestServer, text: Document) -> Vec<i32> {
    let mut found: Vec<i32> = search(srv, text)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    found.sort();
    found
}

#[tokio::test]
async fn list_indexes_shows_the_text_index_as_mongodb_does() {
    let srv = setup().await;
    for name in COPIES {
        let reply = run(&srv, doc! {"listIndexes": name}).await;
        let spec = first_batch(&reply)
            .into_iter()
            .find(|i| i.get_str("name").ok() == Some("title_text_body_text"))
            .expect("the text index is listed");
        assert_eq!(
            spec.get_document("key").unwrap(),
            &doc! {"_fts": "text", "_ftsx": 1}
        );
        assert_eq!(
            spec.get_document("weights").unwrap(),
            &doc! {"body": 1, "title": 10}
        );
        assert_eq!(spec.get_str("default_language").unwrap(), "english");
        assert_eq!(spec.get_str("language_override").unwrap(), "language");
        assert_eq!(spec.get_i32("textIndexVersion").unwrap(), 3);
    }
}

#[tokio::test]
async fn scores_match_mongodb() {
    let srv = setup().await;
    // title "coffee": one token, weight 10 (no bonus: the stem is
    // "coffe"); body: one token of three, 1 × (0.5/3 + 0.5).
    assert_eq!(
        search(&srv, doc! {"$search": "coffee"}).await,
        vec![(3, 10.666666666666666), (1, 8.166666666666666), (4, 0.75)]
    );
    // Stemming: "coffees" is "coffe" too.
    assert_eq!(ids(&srv, doc! {"$search": "coffees"}).await, vec![1, 3, 4]);
    // Either term: "bakery" stems to "bakeri", so no whole-field bonus.
    assert_eq!(
        search(&srv, doc! {"$search": "shop bakery"}).await,
        vec![(6, 10.0), (1, 7.5)]
    );
}

#[tokio::test]
async fn phrases_negations_and_stop_words() {
    let srv = setup().await;
    assert_eq!(
        search(&srv, doc! {"$search": "\"coffee shop\""}).await,
        vec![(1, 15.666666666666666)]
    );
    assert_eq!(
        ids(&srv, doc! {"$search": "coffee -decaf"}).await,
        vec![1, 4]
    );
    assert_eq!(
        ids(&srv, doc! {"$search": "tea -\"black tea\""}).await,
        Vec::<i32>::new()
    );
    assert_eq!(
        ids(&srv, doc! {"$search": "tea coffee"}).await,
        vec![1, 2, 3, 4]
    );
    // Only stop words, or only negations: nothing.
    assert_eq!(
        ids(&srv, doc! {"$search": "the and"}).await,
        Vec::<i32>::new()
    );
    assert_eq!(
        ids(&srv, doc! {"$search": "-coffee"}).await,
        Vec::<i32>::new()
    );
}

#[tokio::test]
async fn languages_case_and_diacritics() {
    let srv = setup().await;
    // `none` neither stems nor drops stop words.
    assert_eq!(
        ids(&srv, doc! {"$search": "coffees", "$language": "none"}).await,
        Vec::<i32>::new()
    );
    // The document's own language stems it: "corriendo" is "corr" in
    // Spanish, only a Spanish query finds it.
    assert_eq!(
        ids(&srv, doc! {"$search": "corriendo"}).await,
        Vec::<i32>::new()
    );
    assert_eq!(
        ids(&srv, doc! {"$search": "corriendo", "$language": "es"}).await,
        vec![5]
    );
    assert_eq!(
        ids(&srv, doc! {"$search": "Coffee", "$caseSensitive": true}).await,
        vec![1]
    );
    assert_eq!(ids(&srv, doc! {"$search": "CAFE"}).await, vec![4]);
    assert_eq!(
        ids(&srv, doc! {"$search": "cafe", "$diacriticSensitive": true}).await,
        Vec::<i32>::new()
    );
    assert_eq!(
        ids(&srv, doc! {"$search": "café", "$diacriticSensitive": true}).await,
        vec![4]
    );
}

#[tokio::test]
async fn other_conditions_limits_and_updates() {
    let srv = setup().await;
    for name in COPIES {
        let reply = run(
            &srv,
            doc! {"find": name, "filter": {"$and": [{"$text": {"$search": "coffee"}}, {"_id": {"$gt": 1}}]}, "sort": {"_id": 1}},
        )
        .await;
        let got: Vec<i32> = first_batch(&reply)
            .iter()
            .map(|d| d.get_i32("_id").unwrap())
            .collect();
        assert_eq!(got, vec![3, 4]);
        let reply = run(
            &srv,
            doc! {"find": name, "filter": {"$text": {"$search": "coffee"}}, "projection": {"s": {"$meta": "textScore"}, "_id": 1}, "sort": {"s": {"$meta": "textScore"}}, "limit": 1},
        )
        .await;
        assert_eq!(
            first_batch(&reply),
            vec![doc! {"_id": 3, "s": 10.666666666666666}]
        );
        let reply = run(
            &srv,
            doc! {"count": name, "query": {"$text": {"$search": "coffee"}}},
        )
        .await;
        assert_eq!(num(reply.get("n")), 3);
        // An update re-indexes the document's terms.
        run(
            &srv,
            doc! {"update": name, "updates": [{"q": {"_id": 6}, "u": {"$set": {"body": "coffee and cakes"}}}]},
        )
        .await;
        run(
            &srv,
            doc! {"delete": name, "deletes": [{"q": {"_id": 4}, "limit": 1}]},
        )
        .await;
    }
    assert_eq!(ids(&srv, doc! {"$search": "coffee"}).await, vec![1, 3, 6]);
    assert_eq!(
        ids(&srv, doc! {"$search": "bread"}).await,
        Vec::<i32>::new()
    );
}

#[tokio::test]
async fn wildcard_and_compound_text_indexes() {
    let srv = TestServer::start_with_args(&["--initial-partitions", "8"]).await;
    let db = srv.db("text");
    assert_ok(
        &run(
            &srv,
            doc! {"createIndexes": "wild", "indexes": [{"key": {"$**": "text"}, "name": "all"}]},
        )
        .await,
    );
    run(
        &srv,
        doc! {"insert": "wild", "documents": [
            {"_id": 1, "a": {"b": "red apple"}, "tags": ["fruit", "green"]},
            {"_id": 2, "c": "green tea"},
        ]},
    )
    .await;
    let reply = run(
        &srv,
        doc! {"find": "wild", "filter": {"$text": {"$search": "green"}}, "sort": {"_id": 1}},
    )
    .await;
    let got: Vec<i32> = first_batch(&reply)
        .iter()
        .map(|d| d.get_i32("_id").unwrap())
        .collect();
    assert_eq!(got, vec![1, 2]);

    assert_ok(
        &run(
            &srv,
            doc! {"createIndexes": "shops", "indexes": [{"key": {"city": 1, "about": "text"}, "name": "city_about"}]},
        )
        .await,
    );
    let reply = run(&srv, doc! {"listIndexes": "shops"}).await;
    let spec = first_batch(&reply)
        .into_iter()
        .find(|i| i.get_str("name").ok() == Some("city_about"))
        .unwrap();
    assert_eq!(
        spec.get_document("key").unwrap(),
        &doc! {"city": 1, "_fts": "text", "_ftsx": 1}
    );
    run(
        &srv,
        doc! {"insert": "shops", "documents": [
            {"_id": 1, "city": "Oslo", "about": "coffee roasters"},
            {"_id": 2, "city": "Rome", "about": "coffee bar"},
        ]},
    )
    .await;
    let reply = run(
        &srv,
        doc! {"find": "shops", "filter": {"city": "Rome", "$text": {"$search": "coffee"}}},
    )
    .await;
    let got: Vec<i32> = first_batch(&reply)
        .iter()
        .map(|d| d.get_i32("_id").unwrap())
        .collect();
    assert_eq!(got, vec![2]);
    // The prefix field must be given by equality.
    expect_command_error(
        &db,
        doc! {"find": "shops", "filter": {"$text": {"$search": "coffee"}}},
        291,
        "NoQueryExecutionPlans",
    )
    .await;
}

#[tokio::test]
async fn errors_have_mongodb_codes() {
    let srv = setup().await;
    let db = srv.db("text");
    run(
        &srv,
        doc! {"insert": "noindex", "documents": [{"_id": 1, "t": "coffee"}]},
    )
    .await;
    let e = expect_command_error(
        &db,
        doc! {"find": "noindex", "filter": {"$text": {"$search": "coffee"}}},
        27,
        "IndexNotFound",
    )
    .await;
    assert_eq!(e.message, "text index required for $text query");
    let e = expect_command_error(
        &db,
        doc! {"find": "noindex", "filter": {}, "projection": {"s": {"$meta": "textScore"}}},
        40218,
        "Location40218",
    )
    .await;
    assert_eq!(
        e.message,
        "query requires text score metadata, but it is not available"
    );
    expect_command_error(
        &db,
        doc! {"find": "noindex", "filter": {}, "sort": {"s": {"$meta": "textScore"}}},
        40218,
        "Location40218",
    )
    .await;
    for name in COPIES {
        // A second text index: another key pattern or other options, or
        // the same index under another name.
        expect_command_error(
            &db,
            doc! {"createIndexes": name, "indexes": [{"key": {"title": "text", "body": "text"}, "name": "unweighted"}]},
            67,
            "CannotCreateIndex",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"createIndexes": name, "indexes": [{"key": {"other": "text"}, "name": "other_text"}]},
            67,
            "CannotCreateIndex",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"createIndexes": name, "indexes": [{"key": {"title": "text", "body": "text"}, "name": "again", "weights": {"title": 10}}]},
            85,
            "IndexOptionsConflict",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"find": name, "filter": {"$and": [{"$text": {"$search": "a"}}, {"$text": {"$search": "b"}}]}},
            2,
            "BadValue",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"find": name, "filter": {"$nor": [{"$text": {"$search": "a"}}]}},
            2,
            "BadValue",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"find": name, "filter": {"$text": {"$language": "english"}}},
            9,
            "FailedToParse",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"find": name, "filter": {"$text": {"$search": "a", "$language": "klingon"}}},
            2,
            "BadValue",
        )
        .await;
        expect_command_error(
            &db,
            doc! {"aggregate": name, "pipeline": [{"$limit": 5}, {"$match": {"$text": {"$search": "coffee"}}}], "cursor": {}},
            17313,
            "Location17313",
        )
        .await;
        let reply = run(
            &srv,
            doc! {"aggregate": name, "pipeline": [{"$match": {"$text": {"$search": "coffee"}}}, {"$sort": {"_id": 1}}, {"$project": {"_id": 1}}], "cursor": {}},
        )
        .await;
        assert_eq!(
            first_batch(&reply),
            vec![doc! {"_id": 1}, doc! {"_id": 3}, doc! {"_id": 4}]
        );
    }
    // Invalid index options.
    for (options, code) in [
        (doc! {"weights": {"t": "heavy"}}, 17283),
        (doc! {"default_language": "klingon"}, 17264),
        (doc! {"language_override": "$lang"}, 17136),
    ] {
        let mut spec = doc! {"key": {"t": "text"}, "name": "t_text"};
        spec.extend(options);
        expect_command_error(
            &db,
            doc! {"createIndexes": "bad", "indexes": [spec]},
            code,
            &format!("Location{code}"),
        )
        .await;
    }
    // A document in a language text indexes do not support.
    let e = db
        .run_command(doc! {"insert": "plain", "documents": [{"_id": 9, "title": "x", "language": "klingon"}]})
        .await
        .unwrap();
    let errors = e.get_array("writeErrors").unwrap();
    let first = errors[0].as_document().unwrap();
    assert_eq!(first.get_i32("code").unwrap(), 17262);
}

/// An aggregation's documents keep the score its first `$match` gave
/// them, through `$project` and `$addFields`, and sort by it on both
/// copies; without `$text` the score is 40218.
#[tokio::test]
async fn aggregation_stages_read_the_text_score() {
    let srv = setup().await;
    for name in COPIES {
        let reply = run(
            &srv,
            doc! {"aggregate": name, "cursor": {}, "pipeline": [
                {"$match": {"$text": {"$search": "coffee"}}},
                {"$project": {"title": 1}},
                {"$sort": {"score": {"$meta": "textScore"}}},
                {"$addFields": {"score": {"$meta": "textScore"}, "double": {"$multiply": [{"$meta": "textScore"}, 2]}}},
            ]},
        )
        .await;
        let got: Vec<Document> = first_batch(&reply);
        assert_eq!(
            got,
            vec![
                doc! {"_id": 3, "title": "coffee", "score": 10.666666666666666, "double": 21.333333333333332},
                doc! {"_id": 1, "title": "Coffee Shop", "score": 8.166666666666666, "double": 16.333333333333332},
                doc! {"_id": 4, "title": "Café au lait", "score": 0.75, "double": 1.5},
            ],
            "{name}"
        );
        // A filter on the score, and an accumulator over it; after
        // `$group` the score is gone.
        let reply = run(
            &srv,
            doc! {"aggregate": name, "cursor": {}, "pipeline": [
                {"$match": {"$text": {"$search": "coffee"}}},
                {"$set": {"s": {"$meta": "textScore"}}},
                {"$match": {"s": {"$gt": 1}}},
                {"$group": {"_id": null, "total": {"$sum": {"$meta": "textScore"}}, "n": {"$sum": 1}}},
                {"$project": {"_id": 0, "total": 1, "n": 1, "after": {"$meta": "textScore"}}},
            ]},
        )
        .await;
        assert_eq!(
            first_batch(&reply),
            vec![doc! {"total": 18.833333333333332, "n": 2}],
            "{name}"
        );
        // `$out` writes no score.
        let reply = run(
            &srv,
            doc! {"aggregate": name, "cursor": {}, "pipeline": [
                {"$match": {"$text": {"$search": "tea"}}},
                {"$out": format!("{name}_out")},
            ]},
        )
        .await;
        assert_ok(&reply);
        let reply = run(&srv, doc! {"find": format!("{name}_out")}).await;
        assert_eq!(first_batch(&reply), vec![articles()[1].clone()]);
    }
    let db = srv.db("text");
    expect_command_error(
        &db,
        doc! {"aggregate": "plain", "cursor": {}, "pipeline": [
            {"$match": {"_id": 1}},
            {"$project": {"score": {"$meta": "textScore"}}},
        ]},
        40218,
        "Location40218",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"aggregate": "plain", "cursor": {}, "pipeline": [
            {"$match": {"$text": {"$search": "tea"}}},
            {"$project": {"score": {"$meta": "bogus"}}},
        ]},
        17308,
        "Location17308",
    )
    .await;
}

/// Each language drops its own stop words: a French document's "le" is
/// not indexed, and a French search for it alone finds nothing.
#[tokio::test]
async fn every_language_drops_its_stop_words() {
    let srv = setup().await;
    for name in COPIES {
        let reply = run(
            &srv,
            doc! {"insert": name, "documents": [
                {"_id": 7, "title": "le chat", "body": "", "language": "french"},
                {"_id": 8, "title": "der Hund", "body": "", "language": "german"},
            ]},
        )
        .await;
        assert_eq!(reply.get_i32("n").unwrap(), 2);
    }
    assert_eq!(
        ids(&srv, doc! {"$search": "le", "$language": "french"}).await,
        Vec::<i32>::new()
    );
    assert_eq!(
        ids(&srv, doc! {"$search": "chat le", "$language": "fr"}).await,
        vec![7]
    );
    // "der" is a German stop word, "hund" is not; "le" indexed as English
    // is a plain word, but the French document did not index it.
    assert_eq!(
        ids(&srv, doc! {"$search": "der", "$language": "german"}).await,
        Vec::<i32>::new()
    );
    assert_eq!(
        ids(&srv, doc! {"$search": "Hund", "$language": "german"}).await,
        vec![8]
    );
    assert_eq!(ids(&srv, doc! {"$search": "le"}).await, Vec::<i32>::new());
}

#[tokio::test]
async fn explain_reads_only_the_query_terms() {
    let srv = setup().await;
    for name in COPIES {
        let reply = run(
            &srv,
            doc! {"explain": {"find": name, "filter": {"$text": {"$search": "coffee"}}}, "verbosity": "executionStats"},
        )
        .await;
        let stats = reply.get_document("executionStats").unwrap();
        assert_eq!(num(stats.get("nReturned")), 3);
        // One entry per document holding "coffe": three, all matches.
        assert_eq!(num(stats.get("totalKeysExamined")), 3);
        assert_eq!(num(stats.get("totalDocsExamined")), 3);
        let shown = format!("{reply}");
        assert!(shown.contains("_fts"), "{shown}");
    }
}

fn num(v: Option<&Bson>) -> i64 {
    match v {
        Some(Bson::Int32(n)) => *n as i64,
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(f)) => *f as i64,
        other => panic!("not a number: {other:?}"),
    }
}
