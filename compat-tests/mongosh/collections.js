// mongosh collection kinds against Shardgate: a $jsonSchema validator
// rejecting a document (with errInfo), collMod to warn, and a view
// (db.createView, find and aggregate through it, getCollectionInfos,
// writes refused), on an unsharded and a sharded collection; a capped log
// read with a tailable cursor; a time-series rollup.
//
// Run: mongosh --quiet --norc "mongodb://127.0.0.1:PORT/test?directConnection=true" \
//        compat-tests/mongosh/collections.js
// Any failed check throws at the end, and mongosh then exits non-zero.

load(__dirname + "/lib/checks.js");

// Runs `fn`, which must throw a server error with `code`; returns the error.
function expectError(what, code, fn) {
  try {
    const r = fn();
    check(false, what + " should fail with code " + code, r);
    return undefined;
  } catch (e) {
    check(e.code === code, what + " fails with code " + code, { code: e.code, message: e.message });
    return e;
  }
}

function same(a, b) {
  return EJSON.stringify(a) === EJSON.stringify(b);
}

const cdb = db.getSiblingDB("mongosh_collections");
cdb.dropDatabase();

// --- a $jsonSchema validator ------------------------------------------------
const schema = {
  $jsonSchema: {
    bsonType: "object",
    required: ["name", "year"],
    properties: {
      name: { bsonType: "string", description: "must be a string" },
      year: { bsonType: "int", minimum: 2017, maximum: 3017 },
    },
  },
};
for (const [name, sharded] of [["students", false], ["students_sharded", true]]) {
  attempt("createCollection " + name, () => cdb.createCollection(name, { validator: schema }));
  if (sharded) {
    attempt("shardCollection " + name, () =>
      sh.shardCollection("mongosh_collections." + name, { name: "hashed" }, false, { numInitialChunks: 8 }));
  }
  const c = cdb.getCollection(name);
  attempt("a valid student", () => c.insertOne({ _id: 1, name: "Alice", year: NumberInt(2019) }));
  const e = expectError("a year below the minimum", 121, () =>
    c.insertOne({ _id: 2, name: "Bob", year: NumberInt(2001) }));
  const info = e && e.errInfo;
  check(info && info.failingDocumentId === 2, name + ": errInfo names the document", info);
  const rules = info && info.details && info.details.schemaRulesNotSatisfied;
  check(
    rules && same(rules, [{
      operatorName: "properties",
      propertiesNotSatisfied: [{
        propertyName: "year",
        details: [{ operatorName: "minimum", specifiedAs: { minimum: 2017 }, reason: "comparison failed", consideredValue: 2001 }],
      }],
    }]),
    name + ": errInfo says which rule failed", rules);
  expectError("a student without a name", 121, () => c.insertOne({ _id: 3, year: NumberInt(2020) }));
  expectError("an update that breaks the schema", 121, () => c.updateOne({ _id: 1 }, { $set: { name: 7 } }));
  check(c.countDocuments({}) === 1, name + ": only the valid student is stored", c.countDocuments({}));
  attempt("bypassDocumentValidation", () =>
    c.insertOne({ _id: 4, name: "Dan", year: NumberInt(1990) }, { bypassDocumentValidation: true }));
  check(c.countDocuments({}) === 2, name + ": the bypassed insert is stored", c.countDocuments({}));
}
// collMod to warn: the write goes through.
attempt("collMod validationAction warn", () =>
  cdb.runCommand({ collMod: "students", validationAction: "warn" }));
attempt("an invalid student with warn", () => cdb.students.insertOne({ _id: 5, name: 5, year: NumberInt(1) }));
check(cdb.students.countDocuments({ _id: 5 }) === 1, "warn stores the document");
const options = cdb.getCollectionInfos({ name: "students" })[0].options;
check(options.validationAction === "warn" && same(options.validator, schema), "getCollectionInfos shows the validator", options);

// --- a view -----------------------------------------------------------------
cdb.orders.insertMany([
  { _id: 1, item: "abc", price: 10, qty: 2 },
  { _id: 2, item: "jkl", price: 20, qty: 1 },
  { _id: 3, item: "xyz", price: 5, qty: 10 },
  { _id: 4, item: "abc", price: 10, qty: 5 },
]);
attempt("createView", () =>
  cdb.createView("order_totals", "orders", [
    { $project: { item: 1, total: { $multiply: ["$price", "$qty"] } } },
  ]));
const v = cdb.order_totals;
const big = attempt("find on a view", () => v.find({ total: { $gte: 30 } }).sort({ total: -1 }).toArray());
check(same(big, [{ _id: 3, item: "xyz", total: 50 }, { _id: 4, item: "abc", total: 50 }]) ||
  same(big, [{ _id: 4, item: "abc", total: 50 }, { _id: 3, item: "xyz", total: 50 }]),
  "find through the view", big);
const byItem = attempt("aggregate on a view", () =>
  v.aggregate([{ $group: { _id: "$item", total: { $sum: "$total" } } }, { $sort: { _id: 1 } }]).toArray());
check(same(byItem, [{ _id: "abc", total: 70 }, { _id: "jkl", total: 20 }, { _id: "xyz", total: 50 }]), "aggregate through the view", byItem);
check(v.countDocuments({}) === 4, "countDocuments on a view", v.countDocuments({}));
const viewInfo = cdb.getCollectionInfos({ name: "order_totals" })[0];
check(viewInfo && viewInfo.type === "view" && viewInfo.options.viewOn === "orders", "getCollectionInfos shows the view", viewInfo);
expectError("insert into a view", 166, () => v.insertOne({ _id: 9 }));
expectError("createIndex on a view", 166, () => v.createIndex({ item: 1 }));
attempt("drop the view", () => v.drop());
check(!cdb.getCollectionNames().includes("order_totals"), "the view is gone", cdb.getCollectionNames());
check(cdb.orders.countDocuments({}) === 4, "its collection is untouched");

// --- a capped log read with a tailable cursor -------------------------------
attempt("createCollection capped", () => cdb.createCollection("log", { capped: true, size: 4096, max: 3 }));
check(cdb.log.isCapped(), "isCapped() on a capped collection");
for (let n = 0; n < 5; n++) {
  attempt("insert into the log", () => cdb.log.insertOne({ _id: 10 - n, n: n }));
}
const kept = attempt("find on the log", () => cdb.log.find({}, { _id: 0 }).toArray());
check(same(kept, [{ n: 2 }, { n: 3 }, { n: 4 }]), "the newest three, oldest first", kept);
const newestFirst = attempt("find newest first", () => cdb.log.find({}, { _id: 0 }).sort({ $natural: -1 }).toArray());
check(same(newestFirst, [{ n: 4 }, { n: 3 }, { n: 2 }]), "$natural: -1", newestFirst);
const tail = cdb.log.find({}, { _id: 0 }).tailable({ awaitData: true });
const firstRead = [];
for (let i = 0; i < 10 && firstRead.length < 3; i++) {
  const next = tail.tryNext();
  if (next !== null) {
    firstRead.push(next);
  }
}
check(same(firstRead, [{ n: 2 }, { n: 3 }, { n: 4 }]), "the tailable cursor reads the log", firstRead);
attempt("append to the log", () => cdb.log.insertMany([{ _id: 1, n: 5 }, { _id: 0, n: 6 }]));
const appended = [];
for (let i = 0; i < 10 && appended.length < 2; i++) {
  const next = tail.tryNext();
  if (next !== null) {
    appended.push(next);
  }
}
check(same(appended, [{ n: 5 }, { n: 6 }]), "the tailable cursor sees what was appended", appended);
check(!tail.isExhausted(), "the tailable cursor stays open");
tail.close();
expectError("a tailable cursor on a collection that is not capped", 2, () =>
  cdb.orders.find({}).tailable().hasNext());

// --- a time-series rollup ----------------------------------------------------
attempt("createCollection timeseries", () =>
  cdb.createCollection("weather", { timeseries: { timeField: "timestamp", metaField: "metadata", granularity: "hours" } }));
const weatherInfo = cdb.getCollectionInfos({ name: "weather" })[0];
check(weatherInfo && weatherInfo.type === "timeseries", "getCollectionInfos shows a time-series collection", weatherInfo);
const readings = [
  ["2021-05-18T00:00:00Z", 12], ["2021-05-18T04:00:00Z", 11], ["2021-05-18T08:00:00Z", 11],
  ["2021-05-18T12:00:00Z", 12], ["2021-05-18T16:00:00Z", 16], ["2021-05-18T20:00:00Z", 15],
  ["2021-05-19T00:00:00Z", 13], ["2021-05-19T04:00:00Z", 12], ["2021-05-19T08:00:00Z", 11],
  ["2021-05-19T12:00:00Z", 12], ["2021-05-19T16:00:00Z", 17], ["2021-05-19T20:00:00Z", 12],
];
attempt("insert the readings", () => cdb.weather.insertMany(readings.map(([at, temp]) => ({
  metadata: { sensorId: 5578, type: "temperature" }, timestamp: new Date(at), temp: temp,
}))));
expectError("a reading without its time", 2, () => cdb.weather.insertOne({ metadata: { sensorId: 1 }, temp: 1 }));
const daily = attempt("the daily rollup", () => cdb.weather.aggregate([
  { $group: { _id: { $dateTrunc: { date: "$timestamp", unit: "day" } }, avgTmp: { $avg: "$temp" }, maxTmp: { $max: "$temp" } } },
  { $sort: { _id: 1 } },
]).toArray());
check(same(daily, [
  { _id: new Date("2021-05-18T00:00:00Z"), avgTmp: 77 / 6, maxTmp: 16 },
  { _id: new Date("2021-05-19T00:00:00Z"), avgTmp: 77 / 6, maxTmp: 17 },
]), "the daily average and maximum", daily);
expectError("updateOne on a time-series collection", 72, () =>
  cdb.weather.updateOne({ "metadata.sensorId": 5578 }, { $set: { "metadata.type": "t" } }));

cdb.dropDatabase();

if (failures.length > 0) {
  throw new Error("mongosh collections: " + failures.length + " check(s) failed:\n" + failures.join("\n"));
}
print("mongosh collections: all checks passed");
