//! The aggregation expression language, as a table of cases checked
//! against what MongoDB 7.0 returns.
//!
//! Each case is `{$project: {_id: 0, r: <expr>}}` over one fixed document
//! (given by `$documents` to a collection-less `aggregate: 1`, and once over
//! a real collection); the expected value is compared exactly, BSON type
//! included (`Int32` vs `Int64` vs `Double` is what a user sees). Every
//! failing case is collected and reported together. Error cases check
//! MongoDB's codes.
//!
//! Operator families: arithmetic, comparison, boolean, conditional, string,
//! array, object, date, type conversion, `$literal`, `$let`, and the
//! variables `$$ROOT`, `$$CURRENT`, `$$REMOVE`.

use compat_tests::{
    bson::{doc, oid::ObjectId, Bson, DateTime, Document},
    expect_command_error, failure, first_batch,
    mongodb::Database,
    TestServer,
};
use futures::TryStreamExt;

/// 2024-03-15T10:20:30.500Z, a Friday.
const D_MS: i64 = 1_710_498_030_500;

fn date(ms: i64) -> Bson {
    Bson::DateTime(DateTime::from_millis(ms))
}

/// The document every case runs over.
fn fixture() -> Document {
    doc! {
        "a": 5,
        "b": 2,
        "f": 2.5,
        "neg": -3,
        "big": 9_000_000_000i64,
        "s": " Hello World ",
        "csv": "a,b,c",
        "arr": [1, 2, 3],
        "docs": [{"x": 2, "n": "b"}, {"x": 1, "n": "a"}, {"x": 3, "n": "c"}],
        "o": {"x": 1, "y": 2},
        "n": null,
        "d": date(D_MS),
        "t": true,
    }
}

/// `(expression, expected r)`; `None` means `r` is absent from the output.
fn cases() -> Vec<(Bson, Option<Bson>)> {
    let b = |d: Document| Bson::Document(d);
    let some = Some;
    vec![
        // --- literals, field paths, variables
        (b(doc! {"$literal": "$a"}), some(Bson::from("$a"))),
        (
            b(doc! {"$literal": {"$add": [1, 2]}}),
            some(b(doc! {"$add": [1, 2]})),
        ),
        (Bson::from("$o.y"), some(Bson::Int32(2))),
        (Bson::from("$$ROOT.a"), some(Bson::Int32(5))),
        (Bson::from("$$CURRENT.b"), some(Bson::Int32(2))),
        (
            b(doc! {"$size": {"$objectToArray": "$$ROOT"}}),
            some(Bson::Int32(13)),
        ),
        (b(doc! {"$cond": [true, "$$REMOVE", 1]}), None),
        (Bson::from("$nosuchfield"), None),
        (
            b(
                doc! {"$let": {"vars": {"x": {"$add": ["$a", 1]}, "y": 2}, "in": {"$multiply": ["$$x", "$$y"]}}},
            ),
            some(Bson::Int32(12)),
        ),
        (
            b(doc! {"$let": {"vars": {"a": 100}, "in": {"$add": ["$$a", "$a"]}}}),
            some(Bson::Int32(105)),
        ),
        // --- arithmetic
        (b(doc! {"$add": ["$a", "$b", 3]}), some(Bson::Int32(10))),
        (b(doc! {"$add": ["$a", "$f"]}), some(Bson::Double(7.5))),
        (
            b(doc! {"$add": ["$a", "$big"]}),
            some(Bson::Int64(9_000_000_005)),
        ),
        (
            b(doc! {"$add": [2147483647, 1]}),
            some(Bson::Int64(2147483648)),
        ),
        (b(doc! {"$add": ["$d", 1000]}), some(date(D_MS + 1000))),
        (b(doc! {"$add": ["$a", null]}), some(Bson::Null)),
        (b(doc! {"$subtract": ["$a", "$b"]}), some(Bson::Int32(3))),
        (
            b(doc! {"$subtract": ["$d", date(D_MS - 500)]}),
            some(Bson::Int64(500)),
        ),
        (b(doc! {"$subtract": ["$d", 500]}), some(date(D_MS - 500))),
        (
            b(doc! {"$multiply": ["$a", "$b", "$neg"]}),
            some(Bson::Int32(-30)),
        ),
        (b(doc! {"$divide": ["$a", "$b"]}), some(Bson::Double(2.5))),
        (b(doc! {"$divide": [6, 3]}), some(Bson::Double(2.0))),
        (b(doc! {"$mod": ["$a", "$b"]}), some(Bson::Int32(1))),
        (b(doc! {"$mod": [-7, 3]}), some(Bson::Int32(-1))),
        (b(doc! {"$abs": "$neg"}), some(Bson::Int32(3))),
        (b(doc! {"$abs": -2.5}), some(Bson::Double(2.5))),
        (b(doc! {"$ceil": "$f"}), some(Bson::Double(3.0))),
        (b(doc! {"$floor": "$f"}), some(Bson::Double(2.0))),
        (b(doc! {"$floor": "$a"}), some(Bson::Int32(5))),
        (b(doc! {"$round": ["$f"]}), some(Bson::Double(2.0))),
        (b(doc! {"$round": [3.5, 0]}), some(Bson::Double(4.0))),
        (
            b(doc! {"$round": [1234.5678, 2]}),
            some(Bson::Double(1234.57)),
        ),
        (b(doc! {"$round": [1234, -2]}), some(Bson::Int32(1200))),
        (b(doc! {"$trunc": ["$f"]}), some(Bson::Double(2.0))),
        (
            b(doc! {"$trunc": [1234.5678, 1]}),
            some(Bson::Double(1234.5)),
        ),
        (b(doc! {"$pow": ["$b", 3]}), some(Bson::Int32(8))),
        (b(doc! {"$pow": [2, -1]}), some(Bson::Double(0.5))),
        (b(doc! {"$sqrt": 16}), some(Bson::Double(4.0))),
        (b(doc! {"$exp": 0}), some(Bson::Double(1.0))),
        (b(doc! {"$ln": 1}), some(Bson::Double(0.0))),
        (b(doc! {"$log10": 1000}), some(Bson::Double(3.0))),
        (b(doc! {"$sqrt": null}), some(Bson::Null)),
        // --- comparison
        (b(doc! {"$eq": ["$a", 5]}), some(Bson::Boolean(true))),
        (b(doc! {"$eq": ["$a", 5.0]}), some(Bson::Boolean(true))),
        (b(doc! {"$ne": ["$a", "5"]}), some(Bson::Boolean(true))),
        (b(doc! {"$gt": ["$a", "$b"]}), some(Bson::Boolean(true))),
        (b(doc! {"$gte": ["$a", 5]}), some(Bson::Boolean(true))),
        (b(doc! {"$lt": ["$a", "$b"]}), some(Bson::Boolean(false))),
        (b(doc! {"$lte": ["$b", 2]}), some(Bson::Boolean(true))),
        (b(doc! {"$cmp": ["$a", "$b"]}), some(Bson::Int32(1))),
        (b(doc! {"$cmp": ["abc", "abd"]}), some(Bson::Int32(-1))),
        (b(doc! {"$cmp": ["$a", 5]}), some(Bson::Int32(0))),
        // Numbers sort before strings.
        (b(doc! {"$lt": [100, "1"]}), some(Bson::Boolean(true))),
        (b(doc! {"$eq": ["$n", null]}), some(Bson::Boolean(true))),
        (b(doc! {"$gt": ["$a", null]}), some(Bson::Boolean(true))),
        // --- boolean
        (b(doc! {"$and": [true, 1, "x"]}), some(Bson::Boolean(true))),
        (b(doc! {"$and": [true, 0]}), some(Bson::Boolean(false))),
        (b(doc! {"$and": []}), some(Bson::Boolean(true))),
        (
            b(doc! {"$or": [false, null, "$nosuch"]}),
            some(Bson::Boolean(false)),
        ),
        (b(doc! {"$or": [false, "$a"]}), some(Bson::Boolean(true))),
        (b(doc! {"$not": [false]}), some(Bson::Boolean(true))),
        (b(doc! {"$not": ["$n"]}), some(Bson::Boolean(true))),
        // --- conditional
        (
            b(doc! {"$cond": [{"$gt": ["$a", 3]}, "big", "small"]}),
            some(Bson::from("big")),
        ),
        (
            b(doc! {"$cond": {"if": "$n", "then": 1, "else": 2}}),
            some(Bson::Int32(2)),
        ),
        (
            b(doc! {"$ifNull": ["$n", "dflt"]}),
            some(Bson::from("dflt")),
        ),
        (
            b(doc! {"$ifNull": ["$nosuch", "$n", "x"]}),
            some(Bson::from("x")),
        ),
        (b(doc! {"$ifNull": ["$a", "x"]}), some(Bson::Int32(5))),
        (
            b(doc! {"$switch": {"branches": [
                {"case": {"$lt": ["$a", 0]}, "then": "negative"},
                {"case": {"$lt": ["$a", 10]}, "then": "small"},
            ], "default": "large"}}),
            some(Bson::from("small")),
        ),
        (
            b(doc! {"$switch": {"branches": [{"case": false, "then": 1}], "default": 0}}),
            some(Bson::Int32(0)),
        ),
        // --- string
        (
            b(doc! {"$concat": ["a", "-", "b"]}),
            some(Bson::from("a-b")),
        ),
        (b(doc! {"$concat": ["a", "$n"]}), some(Bson::Null)),
        (b(doc! {"$concat": ["a", "$nosuch"]}), some(Bson::Null)),
        (
            b(doc! {"$substr": ["hello", 1, 3]}),
            some(Bson::from("ell")),
        ),
        (
            b(doc! {"$substrCP": ["héllo", 1, 3]}),
            some(Bson::from("éll")),
        ),
        (
            b(doc! {"$substrCP": ["abc", 1, 100]}),
            some(Bson::from("bc")),
        ),
        (b(doc! {"$toLower": "HeLLo"}), some(Bson::from("hello"))),
        (b(doc! {"$toUpper": "$csv"}), some(Bson::from("A,B,C"))),
        (b(doc! {"$toLower": null}), some(Bson::from(""))),
        (
            b(doc! {"$split": ["$csv", ","]}),
            some(Bson::Array(vec!["a".into(), "b".into(), "c".into()])),
        ),
        (
            b(doc! {"$trim": {"input": "$s"}}),
            some(Bson::from("Hello World")),
        ),
        (
            b(doc! {"$ltrim": {"input": "$s"}}),
            some(Bson::from("Hello World ")),
        ),
        (
            b(doc! {"$rtrim": {"input": "$s"}}),
            some(Bson::from(" Hello World")),
        ),
        (
            b(doc! {"$trim": {"input": "xxhixx", "chars": "x"}}),
            some(Bson::from("hi")),
        ),
        (b(doc! {"$strLenCP": "héllo"}), some(Bson::Int32(5))),
        (b(doc! {"$strLenBytes": "héllo"}), some(Bson::Int32(6))),
        (b(doc! {"$indexOfCP": ["hello", "l"]}), some(Bson::Int32(2))),
        (
            b(doc! {"$indexOfCP": ["hello", "z"]}),
            some(Bson::Int32(-1)),
        ),
        (
            b(doc! {"$indexOfCP": ["hello", "l", 3]}),
            some(Bson::Int32(3)),
        ),
        (
            b(doc! {"$regexMatch": {"input": "$s", "regex": "^ hello", "options": "i"}}),
            some(Bson::Boolean(true)),
        ),
        (
            b(doc! {"$regexMatch": {"input": "abc", "regex": "^b"}}),
            some(Bson::Boolean(false)),
        ),
        (
            b(doc! {"$regexFind": {"input": "abc123def45", "regex": "([0-9])[0-9]*"}}),
            some(b(doc! {"match": "123", "idx": 3, "captures": ["1"]})),
        ),
        (
            b(doc! {"$regexFind": {"input": "abc", "regex": "[0-9]"}}),
            some(Bson::Null),
        ),
        (
            b(doc! {"$replaceAll": {"input": "a-b-c", "find": "-", "replacement": "+"}}),
            some(Bson::from("a+b+c")),
        ),
        (
            b(doc! {"$replaceOne": {"input": "a-b-c", "find": "-", "replacement": "+"}}),
            some(Bson::from("a+b-c")),
        ),
        // --- array
        (b(doc! {"$size": "$arr"}), some(Bson::Int32(3))),
        (b(doc! {"$arrayElemAt": ["$arr", -1]}), some(Bson::Int32(3))),
        (b(doc! {"$arrayElemAt": ["$arr", 7]}), None),
        (b(doc! {"$first": "$arr"}), some(Bson::Int32(1))),
        (b(doc! {"$last": "$arr"}), some(Bson::Int32(3))),
        (
            b(doc! {"$filter": {"input": "$arr", "as": "x", "cond": {"$gt": ["$$x", 1]}}}),
            some(Bson::Array(vec![2.into(), 3.into()])),
        ),
        (
            b(doc! {"$filter": {"input": "$arr", "cond": {"$ne": ["$$this", 2]}, "limit": 1}}),
            some(Bson::Array(vec![1.into()])),
        ),
        (
            b(doc! {"$map": {"input": "$arr", "as": "x", "in": {"$multiply": ["$$x", 10]}}}),
            some(Bson::Array(vec![10.into(), 20.into(), 30.into()])),
        ),
        (
            b(doc! {"$map": {"input": "$docs", "in": "$$this.n"}}),
            some(Bson::Array(vec!["b".into(), "a".into(), "c".into()])),
        ),
        (
            b(
                doc! {"$reduce": {"input": "$arr", "initialValue": 0, "in": {"$add": ["$$value", "$$this"]}}},
            ),
            some(Bson::Int32(6)),
        ),
        (
            b(
                doc! {"$reduce": {"input": ["a", "b"], "initialValue": "", "in": {"$concat": ["$$value", "$$this"]}}},
            ),
            some(Bson::from("ab")),
        ),
        (b(doc! {"$in": [2, "$arr"]}), some(Bson::Boolean(true))),
        (b(doc! {"$in": [9, "$arr"]}), some(Bson::Boolean(false))),
        (
            b(doc! {"$slice": ["$arr", 2]}),
            some(Bson::Array(vec![1.into(), 2.into()])),
        ),
        (
            b(doc! {"$slice": ["$arr", -2]}),
            some(Bson::Array(vec![2.into(), 3.into()])),
        ),
        (
            b(doc! {"$slice": ["$arr", 1, 1]}),
            some(Bson::Array(vec![2.into()])),
        ),
        (
            b(doc! {"$concatArrays": ["$arr", [4], []]}),
            some(Bson::Array(vec![1.into(), 2.into(), 3.into(), 4.into()])),
        ),
        (b(doc! {"$concatArrays": ["$arr", "$n"]}), some(Bson::Null)),
        (
            b(doc! {"$reverseArray": "$arr"}),
            some(Bson::Array(vec![3.into(), 2.into(), 1.into()])),
        ),
        (
            b(doc! {"$range": [0, 10, 3]}),
            some(Bson::Array(vec![0.into(), 3.into(), 6.into(), 9.into()])),
        ),
        (
            b(doc! {"$range": [3, 0, -1]}),
            some(Bson::Array(vec![3.into(), 2.into(), 1.into()])),
        ),
        (b(doc! {"$indexOfArray": ["$arr", 2]}), some(Bson::Int32(1))),
        (
            b(doc! {"$indexOfArray": ["$arr", 9]}),
            some(Bson::Int32(-1)),
        ),
        (b(doc! {"$isArray": ["$arr"]}), some(Bson::Boolean(true))),
        (b(doc! {"$isArray": ["$a"]}), some(Bson::Boolean(false))),
        (
            b(doc! {"$zip": {"inputs": [[1, 2], ["a", "b", "c"]]}}),
            some(Bson::Array(vec![
                Bson::Array(vec![1.into(), "a".into()]),
                Bson::Array(vec![2.into(), "b".into()]),
            ])),
        ),
        (
            b(doc! {"$zip": {"inputs": [[1, 2], ["a"]], "useLongestLength": true}}),
            some(Bson::Array(vec![
                Bson::Array(vec![1.into(), "a".into()]),
                Bson::Array(vec![2.into(), Bson::Null]),
            ])),
        ),
        (
            b(doc! {"$sortArray": {"input": [3, 1, 2], "sortBy": -1}}),
            some(Bson::Array(vec![3.into(), 2.into(), 1.into()])),
        ),
        (
            b(
                doc! {"$map": {"input": {"$sortArray": {"input": "$docs", "sortBy": {"x": 1}}}, "in": "$$this.n"}},
            ),
            some(Bson::Array(vec!["a".into(), "b".into(), "c".into()])),
        ),
        // --- object
        (
            b(doc! {"$mergeObjects": ["$o", {"y": 20, "z": 3}, null]}),
            some(b(doc! {"x": 1, "y": 20, "z": 3})),
        ),
        (
            b(doc! {"$objectToArray": "$o"}),
            some(Bson::Array(vec![
                b(doc! {"k": "x", "v": 1}),
                b(doc! {"k": "y", "v": 2}),
            ])),
        ),
        (
            b(doc! {"$arrayToObject": {"$literal": [["a", 1], ["b", 2]]}}),
            some(b(doc! {"a": 1, "b": 2})),
        ),
        (
            b(doc! {"$arrayToObject": [[{"k": "p", "v": "$a"}]]}),
            some(b(doc! {"p": 5})),
        ),
        (b(doc! {"$getField": "a"}), some(Bson::Int32(5))),
        (
            b(doc! {"$getField": {"field": "y", "input": "$o"}}),
            some(Bson::Int32(2)),
        ),
        (
            b(doc! {"$getField": {"field": "nope", "input": "$o"}}),
            None,
        ),
        // --- date
        (b(doc! {"$year": "$d"}), some(Bson::Int32(2024))),
        (b(doc! {"$month": "$d"}), some(Bson::Int32(3))),
        (b(doc! {"$dayOfMonth": "$d"}), some(Bson::Int32(15))),
        (b(doc! {"$hour": "$d"}), some(Bson::Int32(10))),
        (b(doc! {"$minute": "$d"}), some(Bson::Int32(20))),
        (b(doc! {"$second": "$d"}), some(Bson::Int32(30))),
        (b(doc! {"$millisecond": "$d"}), some(Bson::Int32(500))),
        (b(doc! {"$dayOfWeek": "$d"}), some(Bson::Int32(6))),
        (b(doc! {"$dayOfYear": "$d"}), some(Bson::Int32(75))),
        (
            b(doc! {"$hour": {"date": "$d", "timezone": "+02:00"}}),
            some(Bson::Int32(12)),
        ),
        (
            b(doc! {"$dateToString": {"format": "%Y-%m-%d %H:%M:%S", "date": "$d"}}),
            some(Bson::from("2024-03-15 10:20:30")),
        ),
        (
            b(doc! {"$dateToString": {"date": "$d"}}),
            some(Bson::from("2024-03-15T10:20:30.500Z")),
        ),
        (
            b(doc! {"$dateFromString": {"dateString": "2024-01-02T03:04:05Z"}}),
            some(date(1_704_164_645_000)),
        ),
        (
            b(doc! {"$dateFromString": {"dateString": "2024-01-02", "format": "%Y-%m-%d"}}),
            some(date(1_704_153_600_000)),
        ),
        (
            b(doc! {"$dateTrunc": {"date": "$d", "unit": "day"}}),
            some(date(1_710_460_800_000)),
        ),
        (
            b(doc! {"$dateTrunc": {"date": "$d", "unit": "month"}}),
            some(date(1_709_251_200_000)),
        ),
        (
            b(doc! {"$dateAdd": {"startDate": "$d", "unit": "day", "amount": 20}}),
            some(date(1_712_226_030_500)),
        ),
        (
            b(doc! {"$dateAdd": {"startDate": "$d", "unit": "hour", "amount": -10}}),
            some(date(D_MS - 36_000_000)),
        ),
        (
            b(
                doc! {"$dateDiff": {"startDate": date(1_704_067_200_000), "endDate": "$d", "unit": "day"}},
            ),
            some(Bson::Int64(74)),
        ),
        (
            b(
                doc! {"$dateDiff": {"startDate": date(1_704_067_200_000), "endDate": "$d", "unit": "month"}},
            ),
            some(Bson::Int64(2)),
        ),
        // --- type and conversion
        (b(doc! {"$type": "$a"}), some(Bson::from("int"))),
        (b(doc! {"$type": "$big"}), some(Bson::from("long"))),
        (b(doc! {"$type": "$f"}), some(Bson::from("double"))),
        (b(doc! {"$type": "$s"}), some(Bson::from("string"))),
        (b(doc! {"$type": "$o"}), some(Bson::from("object"))),
        (b(doc! {"$type": ["$arr"]}), some(Bson::from("array"))),
        (b(doc! {"$type": "$n"}), some(Bson::from("null"))),
        (b(doc! {"$type": "$d"}), some(Bson::from("date"))),
        (b(doc! {"$type": "$t"}), some(Bson::from("bool"))),
        (b(doc! {"$type": "$nosuch"}), some(Bson::from("missing"))),
        (b(doc! {"$isNumber": "$f"}), some(Bson::Boolean(true))),
        (
            b(doc! {"$convert": {"input": "42", "to": "int"}}),
            some(Bson::Int32(42)),
        ),
        (
            b(doc! {"$convert": {"input": "abc", "to": "int", "onError": -1}}),
            some(Bson::Int32(-1)),
        ),
        (
            b(doc! {"$convert": {"input": "$nosuch", "to": "int", "onNull": 0}}),
            some(Bson::Int32(0)),
        ),
        (
            b(doc! {"$convert": {"input": "$f", "to": "string"}}),
            some(Bson::from("2.5")),
        ),
        (b(doc! {"$toString": "$a"}), some(Bson::from("5"))),
        (b(doc! {"$toString": "$t"}), some(Bson::from("true"))),
        (
            b(doc! {"$toString": "$d"}),
            some(Bson::from("2024-03-15T10:20:30.500Z")),
        ),
        (b(doc! {"$toInt": "12"}), some(Bson::Int32(12))),
        (b(doc! {"$toInt": 2.9}), some(Bson::Int32(2))),
        (b(doc! {"$toInt": "$t"}), some(Bson::Int32(1))),
        (b(doc! {"$toLong": "$a"}), some(Bson::Int64(5))),
        (b(doc! {"$toLong": "$d"}), some(Bson::Int64(D_MS))),
        (b(doc! {"$toDouble": "2.5"}), some(Bson::Double(2.5))),
        (b(doc! {"$toDouble": "$a"}), some(Bson::Double(5.0))),
        (
            b(doc! {"$type": {"$toDecimal": "$a"}}),
            some(Bson::from("decimal")),
        ),
        (
            b(doc! {"$toString": {"$toDecimal": "2.5"}}),
            some(Bson::from("2.5")),
        ),
        (b(doc! {"$toBool": 0}), some(Bson::Boolean(false))),
        (b(doc! {"$toBool": "false"}), some(Bson::Boolean(true))),
        (b(doc! {"$toBool": "$n"}), some(Bson::Null)),
        (b(doc! {"$toDate": 0i64}), some(date(0))),
        (
            b(doc! {"$toDate": "2024-03-15T10:20:30.500Z"}),
            some(date(D_MS)),
        ),
        (
            b(doc! {"$toObjectId": "5ab9cbfa31c2ab715d42129e"}),
            some(Bson::ObjectId(
                ObjectId::parse_str("5ab9cbfa31c2ab715d42129e").unwrap(),
            )),
        ),
        // --- hashing
        (
            b(doc! {"$toHashedIndexKey": "string to hash"}),
            some(Bson::Int64(763543691661428748)),
        ),
    ]
}

async fn eval(db: &Database, expr: &Bson) -> Result<Option<Bson>, String> {
    let reply = db
        .run_command(doc! {
            "aggregate": 1,
            "pipeline": [
                {"$documents": [fixture()]},
                {"$project": {"_id": 0, "r": expr.clone()}},
            ],
            "cursor": {},
        })
        .await
        .map_err(|e| format!("error: {e}"))?;
    let batch = first_batch(&reply);
    match batch.as_slice() {
        [one] => Ok(one.get("r").cloned()),
        other => Err(format!("expected one document, got {other:?}")),
    }
}

#[tokio::test]
async fn expression_table() {
    let srv = TestServer::start().await;
    let db = srv.db("exprs");
    let cases = cases();
    let total = cases.len();
    let mut failures = Vec::new();
    for (expr, want) in &cases {
        match eval(&db, expr).await {
            Ok(got) if &got == want => {}
            Ok(got) => failures.push(format!("{expr}: want {want:?}, got {got:?}")),
            Err(e) => failures.push(format!("{expr}: want {want:?}, {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} expression cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The same evaluator over a stored document, through `$project`, `$match:
/// {$expr}` and `find` with an expression projection.
#[tokio::test]
async fn expressions_over_a_collection() {
    let srv = TestServer::start().await;
    let db = srv.db("exprs");
    let c = db.collection::<Document>("c");
    let mut stored = fixture();
    stored.insert("_id", 1);
    c.insert_one(stored).await.unwrap();
    c.insert_one(doc! {"_id": 2, "a": 1, "b": 9}).await.unwrap();

    let got: Vec<Document> = c
        .aggregate(vec![
            doc! {"$match": {"$expr": {"$gt": ["$a", "$b"]}}},
            doc! {"$project": {
                "sum": {"$add": ["$a", "$b"]},
                "root": {"$eq": ["$$ROOT", "$$CURRENT"]},
                "year": {"$year": "$d"},
                "gone": "$$REMOVE",
            }},
        ])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        got,
        vec![doc! {"_id": 1, "sum": 7, "root": true, "year": 2024}]
    );

    let got: Vec<Document> = c
        .find(doc! {"$expr": {"$lt": ["$a", "$b"]}})
        .projection(doc! {"_id": 1, "d": {"$subtract": ["$b", "$a"]}})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(got, vec![doc! {"_id": 2, "d": 8}]);
}

#[tokio::test]
async fn expression_errors() {
    let srv = TestServer::start().await;
    let db = srv.db("exprs");
    let project = |expr: Bson| {
        doc! {
            "aggregate": 1,
            "pipeline": [
                {"$documents": [fixture()]},
                {"$project": {"_id": 0, "r": expr}},
            ],
            "cursor": {},
        }
    };
    // $add of a string.
    let f = expect_command_error(
        &db,
        project(Bson::Document(doc! {"$add": ["$a", "x"]})),
        16554,
        "",
    )
    .await;
    assert!(f.message.contains("$add"), "{f:?}");
    // An unknown operator, named in the message.
    let f = expect_command_error(
        &db,
        project(Bson::Document(doc! {"$frobnicate": [1]})),
        168,
        "InvalidPipelineOperator",
    )
    .await;
    assert!(f.message.contains("$frobnicate"), "{f:?}");
    // An unknown stage, named in the message.
    let f = expect_command_error(
        &db,
        doc! {"aggregate": 1, "pipeline": [{"$documents": []}, {"$frobnicate": {}}], "cursor": {}},
        40324,
        "",
    )
    .await;
    assert!(f.message.contains("$frobnicate"), "{f:?}");
    // More type errors with MongoDB's codes; every mismatch is reported.
    // `$divide` by zero: 7.0 answers BadValue, older servers 16608.
    let more: Vec<(Document, &[(i32, &str)])> = vec![
        (
            doc! {"$divide": ["$a", 0]},
            &[(2, "BadValue"), (16608, "Location16608")],
        ),
        (doc! {"$size": "$a"}, &[(17124, "Location17124")]),
        (
            doc! {"$arrayElemAt": ["$a", 0]},
            &[(28689, "Location28689")],
        ),
        (doc! {"$concat": ["a", 1]}, &[(16702, "Location16702")]),
        (doc! {"$toInt": "abc"}, &[(241, "ConversionFailure")]),
        (
            doc! {"$dateFromString": {"dateString": "not a date"}},
            &[(241, "ConversionFailure")],
        ),
        (doc! {"$year": "$a"}, &[(16006, "Location16006")]),
        (
            doc! {"$subtract": ["$a", "$d"]},
            &[(16556, "Location16556")],
        ),
        (doc! {"$multiply": ["$a", "x"]}, &[(16555, "Location16555")]),
        (doc! {"$cond": [true, 1]}, &[(16020, "Location16020")]),
    ];
    let mut wrong = Vec::new();
    for (expr, allowed) in more {
        let shown = format!("{expr}");
        match db.run_command(project(Bson::Document(expr))).await {
            Ok(reply) => wrong.push(format!("{shown}: want {allowed:?}, got {reply}")),
            Err(e) => match failure(&e) {
                Some(f)
                    if allowed
                        .iter()
                        .any(|(c, n)| *c == f.code && *n == f.code_name) => {}
                other => wrong.push(format!("{shown}: want {allowed:?}, got {other:?}")),
            },
        }
    }
    assert!(wrong.is_empty(), "wrong errors:\n{}", wrong.join("\n"));
    // Undefined variable; a variable name that starts with a capital.
    expect_command_error(&db, project(Bson::from("$$undefinedVar")), 17276, "").await;
    expect_command_error(
        &db,
        project(Bson::Document(doc! {"$let": {"vars": {"Bad": 1}, "in": 1}})),
        16867,
        "",
    )
    .await;
}
