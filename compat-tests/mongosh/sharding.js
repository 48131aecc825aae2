// mongosh sharding helpers against Shardgate.
//
// Run: mongosh --quiet --norc "mongodb://127.0.0.1:PORT/test?directConnection=true" \
//        compat-tests/mongosh/sharding.js
// Works with any --initial-partitions: the partition count is read back
// from the config database. Any failed check throws at the end, and mongosh
// then exits non-zero.

load(__dirname + "/lib/checks.js");

const dbName = "shtest";
const ns = dbName + ".c";
const sdb = db.getSiblingDB(dbName);
const config = db.getSiblingDB("config");
sdb.dropDatabase();

// sh.enableSharding / sh.shardCollection.
const enabled = attempt("sh.enableSharding", () => sh.enableSharding(dbName));
check(enabled !== undefined && enabled.ok === 1, "sh.enableSharding ok", enabled);
const sharded = attempt("sh.shardCollection", () => sh.shardCollection(ns, { k: "hashed" }));
check(sharded !== undefined && sharded.ok === 1, "sh.shardCollection ok", sharded);
check(sharded !== undefined && sharded.collectionsharded === ns, "sh.shardCollection names the collection", sharded);

// The partitions, as the config database lists them.
const entry = config.collections.findOne({ _id: ns });
check(entry !== null, "config.collections lists " + ns, entry);
check(entry !== null && EJSON.stringify(entry.key) === EJSON.stringify({ k: "hashed" }), "config.collections key", entry);
const chunks = entry === null ? [] : config.chunks.find({ uuid: entry.uuid }).toArray();
const partitions = Array.from(new Set(chunks.map((c) => c.shard))).sort();
check(chunks.length > 1, "more than one chunk", chunks.length);
check(partitions.length === chunks.length, "one partition per chunk", chunks);
const shardIds = config.shards.find().toArray().map((s) => s._id);
check(partitions.every((p) => shardIds.includes(p)), "config.shards lists every partition", shardIds);

// 500 documents spread over the partitions.
const docs = [];
for (let i = 0; i < 500; i++) docs.push({ _id: i, k: i, sq: i * i });
const inserted = sdb.c.insertMany(docs);
check(Object.keys(inserted.insertedIds).length === 500, "insertMany 500", Object.keys(inserted.insertedIds).length);
check(sdb.c.countDocuments({}) === 500, "countDocuments", sdb.c.countDocuments({}));
check(sdb.c.findOne({ k: 5 }).sq === 25, "findOne by shard key", sdb.c.findOne({ k: 5 }));

// db.c.stats(): mongosh 2.x builds it from $collStats (one entry per shard)
// and config.collections.
const stats = attempt("db.c.stats()", () => sdb.c.stats());
if (stats !== undefined) {
  check(stats.sharded === true, "stats().sharded", stats.sharded);
  check(Number(stats.count) === 500, "stats().count", stats.count);
  const statShards = Object.keys(stats.shards || {}).sort();
  check(EJSON.stringify(statShards) === EJSON.stringify(partitions), "stats().shards names the partitions", statShards);
  const perShard = statShards.reduce((n, s) => n + Number(stats.shards[s].count), 0);
  check(perShard === 500, "stats().shards counts add up", perShard);
}

// sh.status(): the shards, the database and the collection's chunks.
const status = attempt("sh.status()", () => sh.status());
if (status !== undefined) {
  const value = status.value;
  const statusShards = (value.shards || []).map((s) => s._id);
  check(partitions.every((p) => statusShards.includes(p)), "sh.status() lists the partitions as shards", statusShards);
  const dbEntry = (value.databases || []).find((d) => d.database && d.database._id === dbName);
  check(dbEntry !== undefined, "sh.status() lists " + dbName, value.databases);
  const collEntry = dbEntry === undefined ? undefined : dbEntry.collections[ns];
  check(collEntry !== undefined, "sh.status() lists " + ns, dbEntry);
  if (collEntry !== undefined) {
    check(EJSON.stringify(collEntry.shardKey) === EJSON.stringify({ k: "hashed" }), "sh.status() shard key", collEntry.shardKey);
    const metaShards = collEntry.chunkMetadata.map((m) => m.shard).sort();
    check(EJSON.stringify(metaShards) === EJSON.stringify(partitions), "sh.status() chunkMetadata names the partitions", collEntry.chunkMetadata);
    const nChunks = collEntry.chunkMetadata.reduce((n, m) => n + Number(m.nChunks), 0);
    check(nChunks === chunks.length, "sh.status() chunk count", nChunks);
    const listed = collEntry.chunks.filter((c) => typeof c === "object");
    check(listed.length === Math.min(chunks.length, 20), "sh.status() lists the chunks", listed.length);
    check(listed.length > 0 && listed[0].min.k instanceof MinKey, "sh.status() first chunk starts at MinKey", listed[0]);
  }
  const text = EJSON.stringify(value);
  check(partitions.every((p) => text.includes('"' + p + '"')), "sh.status() output mentions every partition", partitions);
  // $shardedDataDistribution: the documents each partition owns.
  const dist = (value.shardedDataDistribution || []).find((d) => d.ns === ns);
  check(dist !== undefined, "sh.status() shardedDataDistribution lists " + ns, value.shardedDataDistribution);
  if (dist !== undefined) {
    const owned = dist.shards.reduce((n, s) => n + Number(s.numOwnedDocuments), 0);
    check(owned === 500, "shardedDataDistribution owned documents add up", owned);
    check(dist.shards.length === partitions.length, "shardedDataDistribution has every partition", dist.shards.length);
  }
}

// db.c.getShardDistribution(): one entry per partition and the totals.
const dist = attempt("getShardDistribution()", () => sdb.c.getShardDistribution());
if (dist !== undefined) {
  const value = dist.value;
  for (const p of partitions) {
    const key = Object.keys(value).find((k) => k.startsWith("Shard " + p + " at "));
    check(key !== undefined, "getShardDistribution() has " + p, Object.keys(value));
    if (key !== undefined) {
      check(Number(value[key].chunks) === 1, "getShardDistribution() " + p + " holds one chunk", value[key]);
      check(Number(value[key].docs) > 0, "getShardDistribution() " + p + " holds documents", value[key]);
    }
  }
  check(value.Totals !== undefined && Number(value.Totals.docs) === 500, "getShardDistribution() total docs", value.Totals);
  check(value.Totals !== undefined && Number(value.Totals.chunks) === chunks.length, "getShardDistribution() total chunks", value.Totals);
}

// explain: equality on the shard key goes to one partition.
const single = attempt("find({k: 5}).explain()", () => sdb.c.find({ k: 5 }).explain());
if (single !== undefined) {
  const plan = single.queryPlanner.winningPlan;
  check(plan.stage === "SINGLE_SHARD", "find({k: 5}).explain() stage", plan.stage);
  check(plan.shards.length === 1 && partitions.includes(plan.shards[0].shardName), "find({k: 5}).explain() shard", plan.shards);
}
const merged = attempt("find({sq: {$gt: 10}}).explain()", () => sdb.c.find({ sq: { $gt: 10 } }).explain());
if (merged !== undefined) {
  const plan = merged.queryPlanner.winningPlan;
  check(plan.stage === "SHARD_MERGE", "non-key filter explain stage", plan.stage);
  check(plan.shards.length === partitions.length, "non-key filter reads every partition", plan.shards.length);
}

sdb.dropDatabase();

// Cosmos DB's customAction: provision a sharded collection, read it back.
const cosmos = db.getSiblingDB("shcosmos");
cosmos.dropDatabase();
const made = attempt("customAction CreateCollection", () =>
  cosmos.runCommand({ customAction: "CreateCollection", collection: "orders", shardKey: "customerId", offerThroughput: 20000 }));
check(made !== undefined && made.ok === 1, "CreateCollection ok", made);
const got = attempt("customAction GetCollection", () => cosmos.runCommand({ customAction: "GetCollection", collection: "orders" }));
check(got !== undefined && got.provisionedThroughput === 20000, "GetCollection provisionedThroughput", got);
check(got !== undefined && got.shardKeyDefinition !== undefined && got.shardKeyDefinition.customerId === "hashed",
  "GetCollection shardKeyDefinition", got);
check(got !== undefined && got.partitions >= 2, "20,000 RU/s need two partitions", got);
cosmos.dropDatabase();

if (failures.length > 0) {
  throw new Error("mongosh sharding: " + failures.length + " check(s) failed:\n" + failures.join("\n"));
}
print("mongosh sharding: all checks passed");
