// mongosh (the Node.js driver) over a zlib-compressed connection.
//
// Run: mongosh --quiet --norc \
//        "mongodb://127.0.0.1:PORT/test?directConnection=true&compressors=zlib" \
//        compat-tests/mongosh/compression.js
// zlib is the compressor Node.js has built in (snappy and zstd need optional
// modules mongosh does not ship). Inserts, a find over many batches, an
// aggregate and an error reply, then serverStatus must show the traffic went
// through zlib both ways. Any failed check throws at the end, and mongosh
// then exits non-zero.

load(__dirname + "/lib/checks.js");

function zlibCounts() {
  const c = db.adminCommand({ serverStatus: 1 }).network.compression;
  return {
    outIn: Number(c.zlib.compressor.bytesIn),
    outOut: Number(c.zlib.compressor.bytesOut),
    inIn: Number(c.zlib.decompressor.bytesIn),
    inOut: Number(c.zlib.decompressor.bytesOut),
  };
}

function sameNames(a, b) {
  return Array.isArray(a) && a.length === b.length && a.every((x, i) => x === b[i]);
}

const before = zlibCounts();

// The connection agreed on zlib; hello without an offer repeats it.
const hello = db.adminCommand({ hello: 1 });
check(sameNames(hello.compression, ["zlib"]), "hello repeats the agreed compressor", hello.compression);

const zdb = db.getSiblingDB("mongosh_compression");
zdb.dropDatabase();
const coll = zdb.getCollection("docs");
const pad = "mongosh compresses with zlib ".repeat(10);
const docs = [];
for (let i = 0; i < 2000; i++) {
  docs.push({ _id: i, n: i % 5, pad: pad });
}
const inserted = coll.insertMany(docs);
check(Object.keys(inserted.insertedIds).length === 2000, "insertMany", Object.keys(inserted.insertedIds).length);

// One find and nine getMores.
const found = coll.find().sort({ _id: 1 }).batchSize(200).toArray();
check(found.length === 2000, "find over many batches", found.length);
check(found.every((d, i) => d._id === i && d.pad === pad), "documents come back intact");

const groups = coll.aggregate([{ $group: { _id: "$n", count: { $sum: 1 } } }, { $sort: { _id: 1 } }]).toArray();
check(groups.length === 5 && groups.every((g) => g.count === 400), "aggregate", groups);

let dupCode = null;
try {
  coll.insertOne({ _id: 0 });
} catch (e) {
  dupCode = e.code;
}
check(dupCode === 11000, "duplicate key error code", dupCode);

const after = zlibCounts();
const outIn = after.outIn - before.outIn;
const outOut = after.outOut - before.outOut;
const inIn = after.inIn - before.inIn;
const inOut = after.inOut - before.inOut;
check(outIn > 500000 && outOut < outIn / 3, "replies were zlib-compressed", { outIn, outOut });
check(inOut > 500000 && inIn < inOut / 3, "requests were zlib-compressed", { inIn, inOut });

zdb.dropDatabase();

if (failures.length > 0) {
  throw new Error("mongosh compression: " + failures.length + " check(s) failed:\n" + failures.join("\n"));
}
print("mongosh compression: all checks passed");
