//! Wire compression (OP_COMPRESSED): the official driver with
//! `compressors=` in its URI for each of snappy, zlib and zstd; `hello`'s
//! negotiation as mongod does it; and hand-made frames on raw sockets,
//! where a malformed one closes its own connection and nothing else.

use std::time::Duration;

use compat_tests::{
    bson::{doc, Bson, Document},
    expect_command_error, expect_failure, num,
    wire::{self, RawConn},
    TestServer,
};
use futures::TryStreamExt;
use mongodb::{options::ClientOptions, Client};
use tokio::{io::AsyncReadExt, net::TcpStream};

const OP_COMPRESSED: i32 = 2012;
const NOOP: u8 = 0;
const SNAPPY: u8 = 1;
const ZLIB: u8 = 2;

/// A driver client of the first gateway whose URI asks for `compressors`.
async fn compressed_client(srv: &TestServer, compressors: &str) -> Client {
    let uri = format!("{}&compressors={compressors}", compat_tests::uri(srv.addr));
    let options = ClientOptions::parse(uri).await.expect("parse uri");
    Client::with_options(options).expect("build client")
}

/// `serverStatus.network.compression` of the first gateway, asked without
/// compression.
async fn compression_stats(srv: &TestServer) -> Document {
    let status = srv
        .pinned_db("admin")
        .run_command(doc! {"serverStatus": 1})
        .await
        .expect("serverStatus");
    status
        .get_document("network")
        .and_then(|n| n.get_document("compression"))
        .unwrap_or_else(|_| panic!("no network.compression in {status}"))
        .clone()
}

/// `stats.<compressor>.<side>.<field>`, e.g. `zstd.compressor.bytesIn`.
#[track_caller]
fn counter(stats: &Document, compressor: &str, side: &str, field: &str) -> i64 {
    let d = stats
        .get_document(compressor)
        .and_then(|c| c.get_document(side))
        .unwrap_or_else(|_| panic!("no {compressor}.{side} in {stats}"));
    num(d, field)
}

/// Inserts, a find drained over many batches, an aggregate and error
/// replies through a driver that compresses with `name`; then checks the
/// server's counters saw the traffic in that compressor only.
async fn round_trip(name: &str) {
    let srv = TestServer::start().await;
    let before = compression_stats(&srv).await;
    let client = compressed_client(&srv, name).await;
    let db = client.database("compression");

    // The driver offered `name`; the server agreed on it.
    let hello = db
        .run_command(doc! {"hello": 1, "compression": [name, "lz4"]})
        .await
        .unwrap();
    assert_eq!(
        hello.get_array("compression").ok(),
        Some(&vec![Bson::from(name)]),
        "{hello}"
    );

    let coll = db.collection::<Document>("docs");
    let pad = "shardgate compresses replies ".repeat(10);
    let docs: Vec<Document> = (0..2500)
        .map(|i| doc! {"_id": i, "name": format!("user{i}"), "n": i % 7, "pad": &pad})
        .collect();
    let inserted = coll.insert_many(docs).await.unwrap();
    assert_eq!(inserted.inserted_ids.len(), 2500);

    // Many batches: one find and eight getMores.
    let found: Vec<Document> = coll
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .batch_size(300)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(found.len(), 2500);
    for (i, d) in found.iter().enumerate() {
        assert_eq!(num(d, "_id"), i as i64);
        assert_eq!(d.get_str("pad").ok(), Some(pad.as_str()));
    }
    // The driver's default batches: 101, then the rest.
    let count = coll
        .find(doc! {"n": 3})
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
        .len();
    assert_eq!(count, (0..2500).filter(|i| i % 7 == 3).count());

    let groups: Vec<Document> = coll
        .aggregate([
            doc! {"$group": {"_id": "$n", "count": {"$sum": 1}}},
            doc! {"$sort": {"_id": 1}},
        ])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(groups.len(), 7);
    assert_eq!(groups.iter().map(|g| num(g, "count")).sum::<i64>(), 2500);

    // Error replies come back compressed and intact too.
    expect_failure(coll.insert_one(doc! {"_id": 0}).await, 11000, "");
    expect_command_error(&db, doc! {"noSuchCommandHere": 1}, 59, "CommandNotFound").await;
    let e = coll
        .aggregate([doc! {"$group": {"_id": "$n", "x": {"$nope": 1}}}])
        .await;
    assert!(e.is_err(), "an unknown accumulator must fail");

    let after = compression_stats(&srv).await;
    let delta = |side: &str, field: &str| {
        counter(&after, name, side, field) - counter(&before, name, side, field)
    };
    // The 2500 documents of about 340 bytes went in through the
    // decompressor and came back out through the compressor, much smaller
    // on the wire both ways.
    let out_in = delta("compressor", "bytesIn");
    let out_out = delta("compressor", "bytesOut");
    assert!(out_in > 800_000, "{name} compressed {out_in} bytes");
    assert!(
        out_out < out_in / 3,
        "{name}: {out_in} bytes became {out_out}"
    );
    let in_in = delta("decompressor", "bytesIn");
    let in_out = delta("decompressor", "bytesOut");
    assert!(in_out > 800_000, "{name} decompressed {in_out} bytes");
    assert!(in_in < in_out / 3, "{name}: {in_in} bytes became {in_out}");
    for other in ["snappy", "zstd", "zlib"]
        .into_iter()
        .filter(|c| *c != name)
    {
        assert_eq!(after.get(other), before.get(other), "{other} was used");
    }
}

#[tokio::test]
async fn snappy_carries_crud_cursors_and_errors() {
    round_trip("snappy").await;
}

#[tokio::test]
async fn zlib_carries_crud_cursors_and_errors() {
    round_trip("zlib").await;
}

#[tokio::test]
async fn zstd_carries_crud_cursors_and_errors() {
    round_trip("zstd").await;
}

#[tokio::test]
async fn hello_negotiates_as_mongod_does() {
    let srv = TestServer::start().await;
    let mut conn = RawConn::connect(srv.addr).await;
    let agreed = |reply: &Document| reply.get_array("compression").ok().cloned();
    let names = |list: &[&str]| Some(list.iter().map(|n| Bson::from(*n)).collect::<Vec<_>>());

    // The offers the server knows, in the client's order.
    let r = conn
        .command(
            "admin",
            doc! {"hello": 1, "compression": ["zlib", "lz4", "snappy"]},
        )
        .await;
    assert_eq!(agreed(&r), names(&["zlib", "snappy"]), "{r}");
    // Without an offer, what was agreed before.
    let r = conn.command("admin", doc! {"hello": 1}).await;
    assert_eq!(agreed(&r), names(&["zlib", "snappy"]), "{r}");
    // A new offer starts over, even when nothing is left of it (noop is
    // not among the default compressors).
    let r = conn
        .command("admin", doc! {"isMaster": 1, "compression": ["noop"]})
        .await;
    assert_eq!(agreed(&r), None, "{r}");
    let r = conn.command("admin", doc! {"hello": 1}).await;
    assert_eq!(agreed(&r), None, "{r}");
    let r = conn
        .command("admin", doc! {"ismaster": 1, "compression": ["zstd"]})
        .await;
    assert_eq!(agreed(&r), names(&["zstd"]), "{r}");

    // A malformed offer fails the command and changes nothing.
    for bad in [Bson::from("zstd"), Bson::from(vec![Bson::Int32(1)])] {
        let r = conn
            .command("admin", doc! {"hello": 1, "compression": bad.clone()})
            .await;
        assert_eq!(num(&r, "code"), 14, "{bad}: {r}");
        assert_eq!(r.get_str("codeName").ok(), Some("TypeMismatch"), "{r}");
    }
    let r = conn.command("admin", doc! {"hello": 1}).await;
    assert_eq!(agreed(&r), names(&["zstd"]), "{r}");

    // A connection that never offered gets no `compression` field.
    let mut other = RawConn::connect(srv.addr).await;
    let r = other.command("admin", doc! {"hello": 1}).await;
    assert_eq!(agreed(&r), None, "{r}");
}

#[tokio::test]
async fn the_compressors_flag_limits_and_disables_compression() {
    let srv = TestServer::start_with_args(&["--compressors", "zstd"]).await;
    let mut conn = RawConn::connect(srv.addr).await;
    let r = conn
        .command(
            "admin",
            doc! {"hello": 1, "compression": ["snappy", "zstd", "zlib"]},
        )
        .await;
    assert_eq!(
        r.get_array("compression").ok(),
        Some(&vec![Bson::from("zstd")]),
        "{r}"
    );
    let stats = compression_stats(&srv).await;
    assert_eq!(stats.keys().collect::<Vec<_>>(), ["zstd"], "{stats}");
    drop(srv);

    let srv = TestServer::start_with_args(&["--compressors", "disabled"]).await;
    let mut conn = RawConn::connect(srv.addr).await;
    let r = conn
        .command("admin", doc! {"hello": 1, "compression": ["zstd"]})
        .await;
    assert!(r.get("compression").is_none(), "{r}");
    assert!(compression_stats(&srv).await.is_empty());
    // A driver that asks for compression still works, uncompressed.
    let client = compressed_client(&srv, "zstd,snappy").await;
    let coll = client.database("compression").collection::<Document>("c");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);
}

// ---------------------------------------------------------------------------
// Raw frames
// ---------------------------------------------------------------------------

/// Wraps the message `frame` in OP_COMPRESSED as `compressor` with
/// `data` as the compressed bytes, declaring `size` uncompressed bytes.
fn op_compressed(
    frame: &[u8],
    original_op: i32,
    size: i32,
    compressor: u8,
    data: &[u8],
) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&original_op.to_le_bytes());
    body.extend_from_slice(&size.to_le_bytes());
    body.push(compressor);
    body.extend_from_slice(data);
    let request_id = i32::from_le_bytes(frame[4..8].try_into().unwrap());
    wire::frame(request_id, OP_COMPRESSED, &body)
}

/// `frame` compressed honestly with noop or snappy.
fn compress(frame: &[u8], compressor: u8) -> Vec<u8> {
    let op = i32::from_le_bytes(frame[12..16].try_into().unwrap());
    let data = &frame[16..];
    let packed = match compressor {
        NOOP => data.to_vec(),
        SNAPPY => snap::raw::Encoder::new().compress_vec(data).unwrap(),
        other => panic!("no compressor {other} here"),
    };
    op_compressed(frame, op, data.len() as i32, compressor, &packed)
}

/// A reply as it came: its opcode, the compressor (when compressed), the
/// opcode inside, and its first document.
#[derive(Debug)]
struct RawReply {
    compressor: Option<u8>,
    op_code: i32,
    doc: Document,
}

/// Reads one reply, unwrapping OP_COMPRESSED (noop or snappy).
async fn read_reply(stream: &mut TcpStream) -> RawReply {
    let mut header = [0u8; 16];
    tokio::time::timeout(Duration::from_secs(30), stream.read_exact(&mut header))
        .await
        .expect("a reply in time")
        .expect("a reply, not a closed connection");
    let len = i32::from_le_bytes(header[0..4].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len - 16];
    stream.read_exact(&mut body).await.unwrap();
    let mut op_code = i32::from_le_bytes(header[12..16].try_into().unwrap());
    let mut compressor = None;
    if op_code == OP_COMPRESSED {
        op_code = i32::from_le_bytes(body[0..4].try_into().unwrap());
        let size = i32::from_le_bytes(body[4..8].try_into().unwrap()) as usize;
        compressor = Some(body[8]);
        body = match body[8] {
            NOOP => body[9..].to_vec(),
            SNAPPY => snap::raw::Decoder::new()
                .decompress_vec(&body[9..])
                .unwrap(),
            other => panic!("unexpected compressor {other}"),
        };
        assert_eq!(body.len(), size, "uncompressedSize");
    }
    let doc = match op_code {
        wire::OP_MSG => Document::from_reader(&body[5..]).unwrap(),
        wire::OP_REPLY => Document::from_reader(&body[20..]).unwrap(),
        other => panic!("unexpected opcode {other}"),
    };
    RawReply {
        compressor,
        op_code,
        doc,
    }
}

fn ping(id: i32) -> Vec<u8> {
    wire::op_msg(id, &doc! {"ping": 1, "$db": "admin"})
}

/// A raw connection that negotiated `compressors`.
async fn negotiated(srv: &TestServer, compressors: &[&str]) -> RawConn {
    let mut conn = RawConn::connect(srv.addr).await;
    let r = conn
        .command("admin", doc! {"hello": 1, "compression": compressors})
        .await;
    assert!(r.get("compression").is_some(), "{r}");
    conn
}

#[tokio::test]
async fn replies_come_back_the_way_requests_came() {
    let srv = TestServer::start().await;
    let mut conn = negotiated(&srv, &["snappy"]).await;
    let s = &mut conn.stream;

    assert!(wire::send(s, &compress(&ping(10), SNAPPY)).await);
    let r = read_reply(s).await;
    assert_eq!(
        (r.compressor, r.op_code),
        (Some(SNAPPY), wire::OP_MSG),
        "{r:?}"
    );
    assert_eq!(r.doc.get_f64("ok").ok(), Some(1.0), "{r:?}");

    // noop is accepted once anything was negotiated, and answered in kind.
    assert!(wire::send(s, &compress(&ping(11), NOOP)).await);
    let r = read_reply(s).await;
    assert_eq!(
        (r.compressor, r.op_code),
        (Some(NOOP), wire::OP_MSG),
        "{r:?}"
    );

    // A compressed legacy OP_QUERY gets a compressed OP_REPLY.
    let mut query = Vec::new();
    query.extend_from_slice(&0i32.to_le_bytes());
    query.extend_from_slice(b"admin.$cmd\0");
    query.extend_from_slice(&0i32.to_le_bytes());
    query.extend_from_slice(&(-1i32).to_le_bytes());
    doc! {"isMaster": 1}.to_writer(&mut query).unwrap();
    let query = wire::frame(12, wire::OP_QUERY, &query);
    assert!(wire::send(s, &compress(&query, SNAPPY)).await);
    let r = read_reply(s).await;
    assert_eq!(
        (r.compressor, r.op_code),
        (Some(SNAPPY), wire::OP_REPLY),
        "{r:?}"
    );
    assert_eq!(r.doc.get_bool("ismaster").ok(), Some(true), "{r:?}");

    // An uncompressed request on the same connection: an uncompressed reply.
    assert!(wire::send(s, &ping(13)).await);
    let r = read_reply(s).await;
    assert_eq!((r.compressor, r.op_code), (None, wire::OP_MSG), "{r:?}");
}

#[tokio::test]
async fn a_malformed_compressed_frame_closes_only_its_connection() {
    let srv = TestServer::start().await;
    let mut bystander = negotiated(&srv, &["snappy"]).await;

    let plain = ping(20);
    let data_len = (plain.len() - 16) as i32;
    let honest = compress(&plain, SNAPPY);
    // 16 MB of zeros squeeze into well under 1 MB of snappy.
    let zeros = vec![0u8; 16 << 20];
    let bomb = snap::raw::Encoder::new().compress_vec(&zeros).unwrap();
    let mut cut = honest[..honest.len() - 3].to_vec();
    let cut_len = cut.len() as i32;
    cut[..4].copy_from_slice(&cut_len.to_le_bytes());
    let cases: Vec<(&str, bool, Vec<u8>)> = vec![
        (
            "before any hello agreed on compression",
            false,
            compress(&plain, NOOP),
        ),
        (
            "an unknown compressor id",
            true,
            op_compressed(&plain, wire::OP_MSG, data_len, 9, &plain[16..]),
        ),
        (
            "a compressor not negotiated",
            true,
            op_compressed(&plain, wire::OP_MSG, data_len, ZLIB, &plain[16..]),
        ),
        (
            "a negative uncompressedSize",
            true,
            op_compressed(&plain, wire::OP_MSG, -1, NOOP, &plain[16..]),
        ),
        (
            "an uncompressedSize over 48 MB",
            true,
            op_compressed(&plain, wire::OP_MSG, 48_000_000, SNAPPY, &honest[25..]),
        ),
        (
            "an uncompressedSize the data does not have",
            true,
            op_compressed(&plain, wire::OP_MSG, data_len + 1, NOOP, &plain[16..]),
        ),
        (
            "a compression header cut short",
            true,
            wire::frame(21, OP_COMPRESSED, &[0xdd, 0x07, 0, 0, 5]),
        ),
        (
            "snappy data that is not snappy",
            true,
            op_compressed(&plain, wire::OP_MSG, 100, SNAPPY, &[0xff; 64]),
        ),
        ("snappy data cut short", true, cut),
        (
            "16 MB of snappy declared as 1000 bytes",
            true,
            op_compressed(&plain, wire::OP_MSG, 1000, SNAPPY, &bomb),
        ),
        (
            "OP_COMPRESSED inside OP_COMPRESSED",
            true,
            op_compressed(&plain, OP_COMPRESSED, data_len, NOOP, &plain[16..]),
        ),
    ];
    for (what, negotiate, frame) in cases {
        let mut conn = if negotiate {
            negotiated(&srv, &["snappy"]).await
        } else {
            RawConn::connect(srv.addr).await
        };
        assert!(wire::send(&mut conn.stream, &frame).await, "{what}: send");
        match wire::read_reply(&mut conn.stream, Duration::from_secs(10)).await {
            wire::Outcome::Closed => {}
            other => panic!("{what}: expected the connection closed, got {other:?}"),
        }
        // The connection opened before is untouched.
        let s = &mut bystander.stream;
        assert!(wire::send(s, &compress(&ping(30), SNAPPY)).await);
        let r = read_reply(s).await;
        assert_eq!(r.doc.get_f64("ok").ok(), Some(1.0), "after {what}: {r:?}");
    }

    // And new clients are served, compressed.
    let client = compressed_client(&srv, "snappy").await;
    let coll = client
        .database("compression")
        .collection::<Document>("after");
    coll.insert_one(doc! {"_id": 1}).await.unwrap();
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 1);
    assert!(srv.log().contains("bad message"), "the server logs why");
}
