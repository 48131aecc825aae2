// mongosh running a product search box against Shardgate.
//
// Run: mongosh --quiet --norc "mongodb://127.0.0.1:PORT/test?directConnection=true" \
//        compat-tests/mongosh/text.js
// A text index on title (weight 5) and description, then the query a
// search box sends: $text, the score projected and sorted by
// {$meta: "textScore"}. Checked on an unsharded and a sharded copy; the
// scores are MongoDB 7.0's, worked out from its formula. Any failed check
// throws at the end, and mongosh then exits non-zero.

load(__dirname + "/lib/checks.js");

const dbName = "textsearch";
const sdb = db.getSiblingDB(dbName);
sdb.dropDatabase();

const products = [
  { _id: 1, title: "Wireless Headphones", description: "Noise cancelling over-ear headphones with 30 hour battery" },
  { _id: 2, title: "Wired Headphones", description: "Studio headphones for mixing" },
  { _id: 3, title: "Bluetooth Speaker", description: "Wireless speaker for the garden" },
  { _id: 4, title: "Phone Case", description: "Leather case" },
];

// title "Wireless Headphones": two tokens, 5 × 0.75 each; the
// description's seven non-stop-word tokens hold "headphon" once.
const expected = [
  [1, 7.5 + (0.5 / 7 + 0.5)],
  [2, 5 * 0.75 + (0.5 / 3 + 0.5)],
  [3, 0.5 / 3 + 0.5],
];

attempt("shard the sharded copy", () =>
  sh.shardCollection(dbName + ".sharded", { _id: "hashed" }),
);
for (const name of ["plain", "sharded"]) {
  const coll = sdb.getCollection(name);
  attempt(name + ": createIndex", () =>
    coll.createIndex({ title: "text", description: "text" }, { weights: { title: 5 }, name: "search" }),
  );
  attempt(name + ": insert", () => coll.insertMany(products));

  const found = attempt(name + ": search", () =>
    coll
      .find({ $text: { $search: "wireless headphones" } }, { score: { $meta: "textScore" } })
      .sort({ score: { $meta: "textScore" } })
      .toArray(),
  ) || [];
  check(found.length === expected.length, name + ": three products found", found);
  for (let i = 0; i < expected.length && i < found.length; i++) {
    check(found[i]._id === expected[i][0], name + ": result " + i + " is product " + expected[i][0], found);
    check(Math.abs(found[i].score - expected[i][1]) < 1e-9, name + ": score of product " + expected[i][0], found[i]);
  }

  // A phrase narrows, a negation excludes.
  const phrase = attempt(name + ": phrase", () =>
    coll.find({ $text: { $search: "\"wireless headphones\"" } }, { _id: 1 }).toArray(),
  ) || [];
  check(phrase.length === 1 && phrase[0]._id === 1, name + ": the phrase finds product 1", phrase);
  const negated = attempt(name + ": negation", () =>
    coll.find({ $text: { $search: "headphones -wired" } }, { _id: 1 }).toArray(),
  ) || [];
  check(negated.length === 1 && negated[0]._id === 1, name + ": -wired drops product 2", negated);

  const spec = (attempt(name + ": getIndexes", () => coll.getIndexes()) || []).find((i) => i.name === "search");
  check(spec !== undefined && spec.textIndexVersion === 3 && spec.weights.title === 5, name + ": the index spec", spec);
}

let code = null;
try {
  sdb.plain.find({}, { score: { $meta: "textScore" } }).toArray();
} catch (e) {
  code = e.code;
}
check(code === 40218, "textScore without $text fails with 40218", code);

sdb.dropDatabase();

if (failures.length > 0) {
  throw new Error("mongosh text: " + failures.length + " check(s) failed:\n" + failures.join("\n"));
}
print("mongosh text: all checks passed");
