// mongosh with case-insensitive user names: a unique index under an
// English strength-2 collation, as applications build "Alice" == "alice".
//
// Run: mongosh --quiet --norc "mongodb://127.0.0.1:PORT/test?directConnection=true" \
//        compat-tests/mongosh/collation.js
// Any failed check throws, and mongosh then exits non-zero.

const cdb = db.getSiblingDB("collationjs");
cdb.dropDatabase();
const users = cdb.users;
const ci = { locale: "en", strength: 2 };

users.createIndex({ name: 1 }, { unique: true, collation: ci });
const spec = users.getIndexes().find((i) => i.name === "name_1");
if (!spec || !spec.collation || spec.collation.locale !== "en" || spec.collation.strength !== 2) {
  throw new Error("listIndexes does not show the collation: " + EJSON.stringify(spec));
}
if (spec.collation.version !== "57.1" || spec.collation.caseFirst !== "off") {
  throw new Error("the collation is not shown in full: " + EJSON.stringify(spec.collation));
}

users.insertOne({ _id: 1, name: "Alice" });
let duplicate = null;
try {
  users.insertOne({ _id: 2, name: "alice" });
} catch (e) {
  duplicate = e;
}
if (!duplicate || duplicate.code !== 11000) {
  throw new Error("\"alice\" after \"Alice\" must fail with 11000, got " + duplicate);
}
users.insertOne({ _id: 3, name: "Bob" });

const found = users.find({ name: "ALICE" }).collation(ci).toArray();
if (found.length !== 1 || found[0].name !== "Alice") {
  throw new Error("find ALICE under the collation: " + EJSON.stringify(found));
}
if (users.find({ name: "ALICE" }).toArray().length !== 0) {
  throw new Error("without a collation, ALICE must match nothing");
}
const plan = users.find({ name: "ALICE" }).collation(ci).explain();
if (!JSON.stringify(plan).includes("name_1")) {
  throw new Error("the collated query should read the index: " + JSON.stringify(plan));
}
if (users.countDocuments({ name: "bob" }, { collation: ci }) !== 1) {
  throw new Error("countDocuments under the collation");
}
const sorted = users.find({}, { _id: 0, name: 1 }).sort({ name: -1 }).collation(ci).toArray();
if (sorted.map((d) => d.name).join(",") !== "Bob,Alice") {
  throw new Error("sort under the collation: " + EJSON.stringify(sorted));
}
print("collation.js: all checks passed");
