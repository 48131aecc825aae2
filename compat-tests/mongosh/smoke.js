// mongosh smoke test for Shardgate.
//
// Run: mongosh --quiet "mongodb://127.0.0.1:PORT/test" compat-tests/mongosh/smoke.js
// Any failed check throws, and mongosh then exits non-zero.

// Failed checks are collected so that one run shows every problem; the
// script throws at the end if there was any.
load(__dirname + "/lib/checks.js");

function sameJSON(a, b) {
  return EJSON.stringify(a) === EJSON.stringify(b);
}

const dbName = "mongosh_smoke";
const sdb = db.getSiblingDB(dbName);
sdb.dropDatabase();

// Handshake facts mongosh relies on.
const hello = db.adminCommand({ hello: 1 });
check(hello.ok === 1, "hello ok", hello);
check(hello.msg === "isdbgrid", "hello says mongos", hello.msg);
check(db.version().startsWith("7.0."), "db.version() is 7.0.x", db.version());
check(db.adminCommand({ ping: 1 }).ok === 1, "ping");

// insertOne / insertMany.
const people = sdb.getCollection("people");
const one = people.insertOne({ _id: 1, name: "ann", age: 31 });
check(one.acknowledged && one.insertedId === 1, "insertOne", one);
const many = people.insertMany([
  { _id: 2, name: "bob", age: 25 },
  { _id: 3, name: "cid", age: 47 },
  { _id: 4, name: "dee", age: 25 },
  { name: "eve", age: 38 },
]);
check(Object.keys(many.insertedIds).length === 4, "insertMany ids", many);

// show dbs, two ways.
const listed = db.adminCommand({ listDatabases: 1 });
check(listed.ok === 1, "listDatabases ok", listed);
check(listed.databases.some((d) => d.name === dbName), "listDatabases lists " + dbName, listed.databases);
check(db.getMongo().getDBNames().includes(dbName), "getDBNames lists " + dbName, db.getMongo().getDBNames());
check(sdb.getCollectionNames().includes("people"), "getCollectionNames", sdb.getCollectionNames());

// find().sort().limit().toArray()
const youngest = people.find({}, { _id: 0, name: 1 }).sort({ age: 1, name: 1 }).limit(3).toArray();
check(
  sameJSON(youngest, [{ name: "bob" }, { name: "dee" }, { name: "ann" }]),
  "find().sort().limit()",
  youngest
);
const oldest = people.find({ age: { $gt: 30 } }).sort({ age: -1 }).toArray().map((d) => d.name);
check(sameJSON(oldest, ["cid", "eve", "ann"]), "find with filter and descending sort", oldest);
const eve = people.findOne({ name: "eve" });
check(eve !== null && eve._id instanceof ObjectId, "generated ObjectId _id", eve);

// Cursor iteration over more than one batch.
const bulk = [];
for (let i = 0; i < 250; i++) bulk.push({ _id: i, sq: i * i });
sdb.nums.insertMany(bulk);
let seen = 0;
sdb.nums.find().batchSize(20).forEach(() => seen++);
check(seen === 250, "iterate 250 documents in batches of 20", seen);

// updateOne / updateMany.
const u1 = people.updateOne({ _id: 2 }, { $set: { age: 26 }, $push: { tags: "new" } });
check(u1.matchedCount === 1 && u1.modifiedCount === 1, "updateOne counts", u1);
const u2 = people.updateOne({ _id: 2 }, { $set: { age: 26 } });
check(u2.matchedCount === 1 && u2.modifiedCount === 0, "no-op updateOne counts", u2);
const u3 = people.updateMany({ age: { $lt: 30 } }, { $inc: { age: 1 } });
check(u3.matchedCount === 2 && u3.modifiedCount === 2, "updateMany counts", u3);
const up = people.updateOne({ name: "zed" }, { $set: { age: 1 } }, { upsert: true });
check(up.upsertedCount === 1 && up.upsertedId !== null, "upsert", up);
check(people.findOne({ _id: 2 }).age === 27, "updated value", people.findOne({ _id: 2 }));

// countDocuments / estimatedDocumentCount / distinct.
check(people.countDocuments({}) === 6, "countDocuments", people.countDocuments({}));
check(people.countDocuments({ age: { $gte: 30 } }) === 3, "countDocuments with filter", people.countDocuments({ age: { $gte: 30 } }));
check(people.estimatedDocumentCount() === 6, "estimatedDocumentCount", people.estimatedDocumentCount());
const ages = people.distinct("age").sort((a, b) => a - b);
check(sameJSON(ages, [1, 26, 27, 31, 38, 47]), "distinct", ages);

// findOneAndUpdate.
const fam = people.findOneAndUpdate({ _id: 1 }, { $set: { age: 32 } }, { returnDocument: "after" });
check(fam !== null && fam.age === 32, "findOneAndUpdate returns the new document", fam);

// createIndex may be a no-op on this server; tolerate either outcome.
try {
  people.createIndex({ age: 1 });
} catch (e) {
  print("note: createIndex not supported: " + e.message);
}

// deleteOne / deleteMany.
const d1 = people.deleteOne({ _id: 1 });
check(d1.deletedCount === 1, "deleteOne", d1);
const d2 = people.deleteMany({ age: { $lt: 30 } });
check(d2.deletedCount === 3, "deleteMany", d2);
check(people.countDocuments({}) === 2, "count after deletes", people.countDocuments({}));

// Errors surface as exceptions with MongoDB's codes.
let dupCode = null;
try {
  people.insertOne({ _id: 3 });
} catch (e) {
  dupCode = e.code;
}
check(dupCode === 11000, "duplicate key error code", dupCode);
let unknownCode = null;
try {
  const r = db.runCommand({ noSuchCommandAtAll: 1 });
  unknownCode = r.code;
} catch (e) {
  unknownCode = e.code;
}
check(unknownCode === 59, "unknown command error code", unknownCode);

// Cleanup.
check(people.drop() === true, "drop collection");
sdb.dropDatabase();
check(!db.getMongo().getDBNames().includes(dbName), "database gone after dropDatabase", db.getMongo().getDBNames());

if (failures.length > 0) {
  throw new Error("mongosh smoke: " + failures.length + " check(s) failed:\n" + failures.join("\n"));
}
print("mongosh smoke: all checks passed");
