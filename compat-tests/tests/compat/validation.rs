//! Schema validation through the official driver, as a MongoDB 7.0 user
//! sees it: `validator` on `create` and `collMod` (query operators and
//! `$jsonSchema`), enforced on insert, update, replacement, upsert,
//! `findAndModify`, `$out` and `$merge`; error 121 with `errInfo`;
//! `validationLevel` strict / moderate / off; `validationAction` error /
//! warn; `bypassDocumentValidation`; the validator surviving a restart;
//! and the same results on an unsharded and an 8-partition sharded copy.

use compat_tests::{
    assert_ok,
    bson::{doc, Bson, Document},
    expect_command_error, expect_failure,
    mongodb::{Collection, Database},
    num, TestServer,
};
use futures::TryStreamExt;

const DB: &str = "db";

async fn run(db: &Database, cmd: Document) -> Document {
    let shown = format!("{cmd}");
    db.run_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
}

fn coll(db: &Database, name: &str) -> Collection<Document> {
    db.collection::<Document>(name)
}

/// Shards `db.name` on `{tenant: "hashed"}` over 8 partitions.
async fn shard(srv: &TestServer, name: &str) {
    let reply = run(
        &srv.db("admin"),
        doc! {
            "shardCollection": format!("{DB}.{name}"),
            "key": {"tenant": "hashed"},
            "numInitialChunks": 8,
        },
    )
    .await;
    assert_ok(&reply);
}

/// Creates `name` with `options` (a validator and its level and action),
/// sharded over 8 partitions when `sharded`.
async fn create(srv: &TestServer, name: &str, options: Document, sharded: bool) {
    let mut cmd = doc! {"create": name};
    cmd.extend(options);
    assert_ok(&run(&srv.db(DB), cmd).await);
    if sharded {
        shard(srv, name).await;
    }
}

async fn all(db: &Database, name: &str) -> Vec<Document> {
    coll(db, name)
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

/// The options `listCollections` shows for collection `name`.
async fn options_of(db: &Database, name: &str) -> Document {
    let infos: Vec<Document> = db
        .run_cursor_command(doc! {"listCollections": 1, "filter": {"name": name}})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    infos[0].get_document("options").unwrap().clone()
}

/// The one write error of a raw write command's reply.
fn write_error(reply: &Document) -> Document {
    let errors = reply
        .get_array("writeErrors")
        .unwrap_or_else(|_| panic!("no writeErrors in {reply}"));
    assert_eq!(errors.len(), 1, "{reply}");
    match &errors[0] {
        Bson::Document(d) => d.clone(),
        other => panic!("write error {other}"),
    }
}

/// Asserts a write error is MongoDB's validation failure of document
/// `id`, and returns its `errInfo.details`.
fn validation_failure(error: &Document, id: Bson) -> Document {
    assert_eq!(error.get_i32("code").unwrap(), 121, "{error}");
    assert_eq!(
        error.get_str("codeName").unwrap(),
        "DocumentValidationFailure"
    );
    assert_eq!(
        error.get_str("errmsg").unwrap(),
        "Document failed validation"
    );
    let info = error.get_document("errInfo").unwrap();
    assert_eq!(info.get("failingDocumentId"), Some(&id), "{error}");
    info.get_document("details").unwrap().clone()
}

fn adult_validator() -> Document {
    doc! {"validator": {"age": {"$gte": 18}}}
}

fn person_schema() -> Document {
    doc! {"validator": {"$jsonSchema": {
        "bsonType": "object",
        "required": ["name", "age"],
        "properties": {
            "name": {"bsonType": "string"},
            "age": {"bsonType": "int", "minimum": 0},
        },
    }}}
}

/// The writes every test below checks, on one collection: each refused
/// write leaves the collection as it was.
async fn enforced_writes(srv: &TestServer, sharded: bool) -> Vec<Document> {
    let db = srv.db(DB);
    let name = if sharded { "people_sharded" } else { "people" };
    create(srv, name, adult_validator(), sharded).await;
    let c = coll(&db, name);
    c.insert_one(doc! {"_id": 1, "tenant": "a", "age": 30})
        .await
        .unwrap();

    // insert: the write error carries the document's id and the reason.
    let reply = run(
        &db,
        doc! {"insert": name, "documents": [{"_id": 2, "tenant": "b", "age": 3}]},
    )
    .await;
    assert_eq!(num(&reply, "n"), 0);
    let details = validation_failure(&write_error(&reply), Bson::Int32(2));
    assert_eq!(
        details,
        doc! {
            "operatorName": "$gte",
            "specifiedAs": {"age": {"$gte": 18}},
            "reason": "comparison failed",
            "consideredValue": 3,
        }
    );

    // An unordered batch writes the valid documents around a bad one.
    let reply = run(
        &db,
        doc! {"insert": name, "ordered": false, "documents": [
            {"_id": 3, "tenant": "c", "age": 40},
            {"_id": 4, "tenant": "d"},
            {"_id": 5, "tenant": "e", "age": 50},
        ]},
    )
    .await;
    assert_eq!(num(&reply, "n"), 2);
    let error = write_error(&reply);
    assert_eq!(error.get_i32("index").unwrap(), 1);
    validation_failure(&error, Bson::Int32(4));

    // update: a change that breaks the rule is refused.
    let r = c
        .update_one(doc! {"_id": 1}, doc! {"$set": {"age": 10}})
        .await;
    expect_failure(r, 121, "DocumentValidationFailure");
    // A change that keeps it is made.
    let r = c
        .update_one(doc! {"_id": 1}, doc! {"$inc": {"age": 1}})
        .await
        .unwrap();
    assert_eq!(r.modified_count, 1);
    // replaceOne and an upsert are checked too.
    let r = c
        .replace_one(doc! {"_id": 3}, doc! {"tenant": "c", "age": 1})
        .await;
    expect_failure(r, 121, "DocumentValidationFailure");
    let r = c
        .update_one(doc! {"_id": 9}, doc! {"$set": {"tenant": "z", "age": 2}})
        .upsert(true)
        .await;
    expect_failure(r, 121, "DocumentValidationFailure");
    // findAndModify fails as a command, with errInfo beside the code.
    let f = expect_command_error(
        &db,
        doc! {"findAndModify": name, "query": {"_id": 5}, "update": {"$set": {"age": 5}}},
        121,
        "DocumentValidationFailure",
    )
    .await;
    assert_eq!(f.message, "Document failed validation");
    let mut conn = compat_tests::wire::RawConn::connect(srv.addrs()[0]).await;
    let reply = conn
        .command(
            DB,
            doc! {"findAndModify": name, "query": {"_id": 5}, "update": {"$set": {"age": 5}}},
        )
        .await;
    assert_eq!(reply.get_f64("ok").unwrap(), 0.0, "{reply}");
    assert_eq!(
        reply.get_document("errInfo").unwrap(),
        &doc! {
            "failingDocumentId": 5,
            "details": {
                "operatorName": "$gte",
                "specifiedAs": {"age": {"$gte": 18}},
                "reason": "comparison failed",
                "consideredValue": 5,
            },
        }
    );

    // A no-op update of a document is not a write and is not checked.
    let r = c
        .update_one(doc! {"_id": 5}, doc! {"$set": {"age": 50}})
        .await
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (1, 0));
    all(&db, name).await
}

#[tokio::test]
async fn every_write_is_checked_alike_on_unsharded_and_sharded_collections() {
    let srv = TestServer::start().await;
    let unsharded = enforced_writes(&srv, false).await;
    let sharded = enforced_writes(&srv, true).await;
    assert_eq!(
        unsharded,
        vec![
            doc! {"_id": 1, "tenant": "a", "age": 31},
            doc! {"_id": 3, "tenant": "c", "age": 40},
            doc! {"_id": 5, "tenant": "e", "age": 50},
        ]
    );
    assert_eq!(unsharded, sharded);
}

#[tokio::test]
async fn json_schema_validators_explain_the_failure() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    for (name, sharded) in [("schema", false), ("schema_sharded", true)] {
        create(&srv, name, person_schema(), sharded).await;
        let c = coll(&db, name);
        c.insert_one(doc! {"_id": 1, "tenant": "a", "name": "Ada", "age": 36})
            .await
            .unwrap();

        let reply = run(
            &db,
            doc! {"insert": name, "documents": [
                {"_id": 2, "tenant": "b", "name": 5, "age": 20}
            ]},
        )
        .await;
        let details = validation_failure(&write_error(&reply), Bson::Int32(2));
        assert_eq!(
            details,
            doc! {
                "operatorName": "$jsonSchema",
                "schemaRulesNotSatisfied": [{
                    "operatorName": "properties",
                    "propertiesNotSatisfied": [{
                        "propertyName": "name",
                        "details": [{
                            "operatorName": "bsonType",
                            "specifiedAs": {"bsonType": "string"},
                            "reason": "type did not match",
                            "consideredValue": 5,
                            "consideredType": "int",
                        }],
                    }],
                }],
            },
            "{name}"
        );

        let reply = run(
            &db,
            doc! {"insert": name, "documents": [{"_id": 3, "tenant": "c", "name": "Bo"}]},
        )
        .await;
        let details = validation_failure(&write_error(&reply), Bson::Int32(3));
        assert_eq!(
            details,
            doc! {
                "operatorName": "$jsonSchema",
                "schemaRulesNotSatisfied": [{
                    "operatorName": "required",
                    "specifiedAs": {"required": ["name", "age"]},
                    "missingProperties": ["age"],
                }],
            },
            "{name}"
        );

        // `$jsonSchema` is also a query operator.
        c.insert_one(doc! {"_id": 4, "tenant": "d", "name": "Cy", "age": 7})
            .await
            .unwrap();
        let young: Vec<Document> = c
            .find(doc! {"$jsonSchema": {"properties": {"age": {"maximum": 10}}}})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(
            young,
            vec![doc! {"_id": 4, "tenant": "d", "name": "Cy", "age": 7}]
        );
    }
}

#[tokio::test]
async fn bypass_document_validation_skips_the_check() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    create(&srv, "c", adult_validator(), false).await;
    let c = coll(&db, "c");
    c.insert_one(doc! {"_id": 1, "age": 2})
        .bypass_document_validation(true)
        .await
        .unwrap();
    c.update_one(doc! {"_id": 1}, doc! {"$set": {"age": 3}})
        .bypass_document_validation(true)
        .await
        .unwrap();
    let reply = run(
        &db,
        doc! {"findAndModify": "c", "query": {"_id": 1}, "update": {"$set": {"age": 4}},
        "new": true, "bypassDocumentValidation": true},
    )
    .await;
    assert_eq!(
        reply.get_document("value").unwrap(),
        &doc! {"_id": 1, "age": 4}
    );
    // `$out` and `$merge` into a validated collection, with and without.
    let src = coll(&db, "src");
    src.insert_many(vec![
        doc! {"_id": 10, "age": 1},
        doc! {"_id": 11, "age": 20},
    ])
    .await
    .unwrap();
    let merge = vec![doc! {"$merge": {"into": "c"}}];
    let r = src.aggregate(merge.clone()).await;
    expect_failure(r, 121, "DocumentValidationFailure");
    src.aggregate(merge)
        .bypass_document_validation(true)
        .await
        .unwrap();
    assert_eq!(all(&db, "c").await.len(), 3);
    // Bypassing takes a boolean, as MongoDB's IDL says.
    expect_command_error(
        &db,
        doc! {"insert": "c", "documents": [{"_id": 5}], "bypassDocumentValidation": "yes"},
        14,
        "TypeMismatch",
    )
    .await;
}

#[tokio::test]
async fn out_keeps_the_target_validator_and_indexes() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    create(&srv, "target", adult_validator(), false).await;
    run(
        &db,
        doc! {"createIndexes": "target", "indexes": [{"key": {"age": 1}, "name": "age_1"}]},
    )
    .await;
    let src = coll(&db, "src");
    src.insert_many(vec![doc! {"_id": 1, "age": 30}, doc! {"_id": 2, "age": 40}])
        .await
        .unwrap();
    src.aggregate(vec![doc! {"$out": "target"}])
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    assert_eq!(all(&db, "target").await.len(), 2);
    let names: Vec<String> = coll(&db, "target").list_index_names().await.unwrap();
    assert_eq!(names, vec!["_id_".to_string(), "age_1".to_string()]);
    assert_eq!(&options_of(&db, "target").await, &adult_validator());
    // A result the validator refuses fails the `$out`.
    src.insert_one(doc! {"_id": 3, "age": 1}).await.unwrap();
    let r = src.aggregate(vec![doc! {"$out": "target"}]).await;
    expect_failure(r, 121, "DocumentValidationFailure");
}

#[tokio::test]
async fn warn_logs_the_failure_and_writes() {
    let srv = TestServer::start().await;
    // The first gateway's log is the one read below.
    let db = srv.pinned_db(DB);
    let mut options = adult_validator();
    options.insert("validationAction", "warn");
    create(&srv, "c", options, false).await;
    coll(&db, "c")
        .insert_one(doc! {"_id": 7, "age": 1})
        .await
        .unwrap();
    assert_eq!(all(&db, "c").await, vec![doc! {"_id": 7, "age": 1}]);
    let log = srv.log();
    assert!(
        log.contains("Document would fail validation"),
        "the warning is logged: {log}"
    );
}

#[tokio::test]
async fn coll_mod_changes_the_validator_level_and_action() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    let c = coll(&db, "c");
    c.insert_many(vec![doc! {"_id": 1, "age": 5}, doc! {"_id": 2, "age": 50}])
        .await
        .unwrap();
    // Adding a validator does not check the documents already there.
    let mut cmd = doc! {"collMod": "c", "validationLevel": "moderate"};
    cmd.extend(adult_validator());
    assert_ok(&run(&db, cmd).await);
    // Moderate: an invalid document may still be updated...
    c.update_one(doc! {"_id": 1}, doc! {"$set": {"age": 6}})
        .await
        .unwrap();
    // ...but a valid one may not be made invalid, nor an invalid inserted.
    let r = c
        .update_one(doc! {"_id": 2}, doc! {"$set": {"age": 6}})
        .await;
    expect_failure(r, 121, "DocumentValidationFailure");
    let r = c.insert_one(doc! {"_id": 3, "age": 1}).await;
    expect_failure(r, 121, "DocumentValidationFailure");
    // Strict: the invalid document cannot be changed while invalid.
    run(&db, doc! {"collMod": "c", "validationLevel": "strict"}).await;
    let r = c
        .update_one(doc! {"_id": 1}, doc! {"$set": {"age": 7}})
        .await;
    expect_failure(r, 121, "DocumentValidationFailure");
    // Off: nothing is checked.
    run(&db, doc! {"collMod": "c", "validationLevel": "off"}).await;
    c.insert_one(doc! {"_id": 3, "age": 1}).await.unwrap();
    assert_eq!(
        &options_of(&db, "c").await,
        &doc! {"validationLevel": "off", "validator": {"age": {"$gte": 18}}}
    );
    // An empty validator removes it.
    run(
        &db,
        doc! {"collMod": "c", "validator": {}, "validationLevel": "strict"},
    )
    .await;
    c.insert_one(doc! {"_id": 4, "age": 1}).await.unwrap();
    assert_eq!(all(&db, "c").await.len(), 4);
}

#[tokio::test]
async fn malformed_validation_options_are_refused() {
    let srv = TestServer::start().await;
    let db = srv.db(DB);
    expect_command_error(
        &db,
        doc! {"create": "c", "validator": 5},
        14,
        "TypeMismatch",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"create": "c", "validator": {"a": {"$bogus": 1}}},
        2,
        "BadValue",
    )
    .await;
    let f = expect_command_error(
        &db,
        doc! {"create": "c", "validator": {"a": 1}, "validationLevel": "loose"},
        2,
        "BadValue",
    )
    .await;
    assert_eq!(
        f.message,
        "Enumeration value 'loose' for field 'create.validationLevel' is not a valid value."
    );
    expect_command_error(
        &db,
        doc! {"create": "c", "validationAction": "log"},
        2,
        "BadValue",
    )
    .await;
    // Scripts are refused in a validator, as MongoDB refuses them.
    let f = expect_command_error(
        &db,
        doc! {"create": "c", "validator": {"$or": [{"a": 1}, {"$where": "this.a > 1"}]}},
        2,
        "BadValue",
    )
    .await;
    assert_eq!(
        f.message,
        "Parsing of collection validator failed :: caused by :: $where is not allowed in this context"
    );
    let function = doc! {"$function": {
        "body": "function(a) { return a > 1; }", "args": ["$a"], "lang": "js",
    }};
    let f = expect_command_error(
        &db,
        doc! {"create": "c", "validator": {"$expr": function}},
        4660800,
        "Location4660800",
    )
    .await;
    assert_eq!(
        f.message,
        "Parsing of collection validator failed :: caused by :: $function cannot be used inside a validator."
    );
    // None of them created the collection.
    let names = db.list_collection_names().await.unwrap();
    assert!(names.is_empty(), "{names:?}");
    expect_command_error(
        &db,
        doc! {"collMod": "missing", "validator": {"a": 1}},
        26,
        "NamespaceNotFound",
    )
    .await;
    create(&srv, "c", adult_validator(), false).await;
    expect_command_error(
        &db,
        doc! {"collMod": "c", "validationAction": "loud"},
        2,
        "BadValue",
    )
    .await;
    expect_command_error(
        &db,
        doc! {"collMod": "c", "validator": {"$where": "true"}},
        2,
        "BadValue",
    )
    .await;
    // The failed collMods changed nothing.
    let r = coll(&db, "c").insert_one(doc! {"_id": 1, "age": 1}).await;
    expect_failure(r, 121, "DocumentValidationFailure");
    expect_command_error(
        &srv.db("admin"),
        doc! {"create": "c", "validator": {"a": 1}},
        72,
        "InvalidOptions",
    )
    .await;
}

#[tokio::test]
async fn the_validator_survives_a_restart() {
    let mut srv = TestServer::start().await;
    create(&srv, "c", person_schema(), true).await;
    run(
        &srv.db(DB),
        doc! {"collMod": "c", "validationAction": "error"},
    )
    .await;
    srv.restart().await;
    let db = srv.db(DB);
    let r = coll(&db, "c")
        .insert_one(doc! {"_id": 1, "tenant": "t", "name": "x"})
        .await;
    expect_failure(r, 121, "DocumentValidationFailure");
    coll(&db, "c")
        .insert_one(doc! {"_id": 2, "tenant": "t", "name": "x", "age": 3})
        .await
        .unwrap();
    assert_eq!(all(&db, "c").await.len(), 1);
}
