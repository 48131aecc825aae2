// mongosh index helpers against Shardgate: createIndex/createIndexes,
// getIndexes() and friends, unique errors, explain showing IXSCAN,
// hideIndex/unhideIndex, dropIndex/dropIndexes, validate.
//
// Run: mongosh --quiet --norc "mongodb://127.0.0.1:PORT/test?directConnection=true" \
//        compat-tests/mongosh/indexes.js
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

// The stage names of a plan, outermost first, through inputStage and, for
// a mongos-shaped plan, each shard's winningPlan.
function stages(plan) {
  const out = [];
  (function walk(p) {
    if (!p) return;
    if (p.stage) out.push(p.stage);
    walk(p.inputStage);
    (p.inputStages || []).forEach(walk);
    (p.shards || []).forEach((s) => walk(s.winningPlan));
  })(plan);
  return out;
}
function findStage(plan, name) {
  let found;
  (function walk(p) {
    if (!p || found) return;
    if (p.stage === name) { found = p; return; }
    walk(p.inputStage);
    (p.inputStages || []).forEach(walk);
    (p.shards || []).forEach((s) => walk(s.winningPlan));
  })(plan);
  return found;
}

const idb = db.getSiblingDB("idxtest");
idb.dropDatabase();
const c = idb.c;

// --- createIndex / createIndexes -------------------------------------------
const docs = [];
for (let i = 0; i < 200; i++) docs.push({ _id: i, a: i % 20, b: i % 7, c: i, e: i, s: "s" + (i % 10), tags: [i % 3, i % 5] });
c.insertMany(docs);

check(attempt("createIndex({a: 1})", () => c.createIndex({ a: 1 })) === "a_1", "createIndex returns the name");
const names = attempt("createIndexes", () => c.createIndexes([{ b: -1, c: 1 }, { tags: 1 }]));
check(same(names, ["b_-1_c_1", "tags_1"]), "createIndexes returns the names", names);
check(attempt("unique", () => c.createIndex({ e: 1 }, { unique: true, name: "e_unique" })) === "e_unique", "createIndex with a name");
check(attempt("sparse", () => c.createIndex({ sp: 1 }, { sparse: true })) === "sp_1", "sparse createIndex");
check(attempt("ttl", () => c.createIndex({ t: 1 }, { expireAfterSeconds: 3600 })) === "t_1", "TTL createIndex");
check(attempt("hashed", () => c.createIndex({ s: "hashed" })) === "s_hashed", "hashed createIndex");
check(attempt("partial", () => c.createIndex({ p: 1 }, { partialFilterExpression: { c: { $gt: 100 } } })) === "p_1", "partial createIndex");
// The same again is fine.
check(attempt("createIndex again", () => c.createIndex({ a: 1 })) === "a_1", "createIndex is idempotent");
// Conflicts.
expectError("same name, other key", 86, () => c.createIndex({ z: 1 }, { name: "a_1" }));
expectError("same key, other name", 85, () => c.createIndex({ a: 1 }, { name: "other" }));
// (The Node driver drops options it does not know, so send the command.)
expectError("unknown option", 197, () =>
  idb.runCommand({ createIndexes: "c", indexes: [{ key: { z: 1 }, name: "z_1", nosuchoption: true }] })
);

// --- getIndexes --------------------------------------------------------------
const idx = attempt("getIndexes()", () => c.getIndexes()) || [];
check(
  same(idx.map((i) => i.name), ["_id_", "a_1", "b_-1_c_1", "tags_1", "e_unique", "sp_1", "t_1", "s_hashed", "p_1"]),
  "getIndexes() names, in creation order",
  idx.map((i) => i.name)
);
check(idx.length > 0 && same(idx[0], { v: 2, key: { _id: 1 }, name: "_id_" }), "getIndexes() _id_ spec", idx[0]);
const byName = {};
idx.forEach((i) => { byName[i.name] = i; });
check(byName.a_1 && same(byName.a_1, { v: 2, key: { a: 1 }, name: "a_1" }), "a_1 spec", byName.a_1);
check(byName["b_-1_c_1"] && same(byName["b_-1_c_1"].key, { b: -1, c: 1 }), "compound key keeps its order", byName["b_-1_c_1"]);
check(byName.e_unique && byName.e_unique.unique === true, "unique: true", byName.e_unique);
check(byName.sp_1 && byName.sp_1.sparse === true, "sparse: true", byName.sp_1);
check(byName.t_1 && Number(byName.t_1.expireAfterSeconds) === 3600, "expireAfterSeconds", byName.t_1);
check(byName.s_hashed && byName.s_hashed.key.s === "hashed", "hashed key", byName.s_hashed);
check(byName.p_1 && same(byName.p_1.partialFilterExpression, { c: { $gt: 100 } }), "partialFilterExpression", byName.p_1);
idx.forEach((i) => check(Number(i.v) === 2, "v: 2 in " + i.name, i));
const keys = attempt("getIndexKeys()", () => c.getIndexKeys()) || [];
check(keys.length === idx.length && same(keys[1], { a: 1 }), "getIndexKeys()", keys);
const specs = attempt("getIndexSpecs()", () => c.getIndexSpecs()) || [];
check(specs.length === idx.length, "getIndexSpecs()", specs.length);
expectError("getIndexes() of a missing collection", 26, () => idb.missing.getIndexes());

// --- unique violations -------------------------------------------------------
const dup = expectError("duplicate e", 11000, () => c.insertOne({ _id: 1000, e: 5 }));
if (dup !== undefined) {
  check(dup.keyValue !== undefined && Number(dup.keyValue.e) === 5, "E11000 error has keyValue", dup.keyValue);
  check(dup.keyPattern !== undefined && Number(dup.keyPattern.e) === 1, "E11000 error has keyPattern", dup.keyPattern);
  check(/E11000 duplicate key error collection: idxtest\.c index: e_unique dup key: \{ e: 5 \}/.test(dup.message), "E11000 message", dup.message);
}
check(c.countDocuments({ _id: 1000 }) === 0, "the duplicate was not inserted");
const bulk = attempt("unordered insertMany with duplicates", () => {
  try {
    c.insertMany([{ _id: 1001, e: 1001 }, { _id: 1002, e: 1 }, { _id: 1003, e: 1003 }], { ordered: false });
    return "no error";
  } catch (e) {
    return e;
  }
});
check(bulk !== "no error" && bulk !== undefined && bulk.code === 11000, "unordered insertMany reports 11000", bulk && bulk.code);
check(c.countDocuments({ _id: { $in: [1001, 1003] } }) === 2, "unordered insertMany inserts the others");

// --- explain -------------------------------------------------------------------
const ex = attempt("find({a: 5}).explain()", () => c.find({ a: 5 }).explain("executionStats"));
if (ex !== undefined) {
  // A mongos's shape: the unsharded collection is the one partition
  // "primary", whose plan sits in shards[0].
  const routed = ex.queryPlanner.winningPlan;
  check(routed.stage === "SINGLE_SHARD", "find({a: 5}) winningPlan.stage is SINGLE_SHARD", routed.stage);
  const plan = routed.shards[0].winningPlan;
  check(plan.stage === "FETCH", "the partition's plan is FETCH", plan.stage);
  check(plan.inputStage !== undefined && plan.inputStage.stage === "IXSCAN", "FETCH over IXSCAN", plan.inputStage);
  const ix = findStage(plan, "IXSCAN");
  check(ix !== undefined && ix.indexName === "a_1", "IXSCAN of a_1", ix);
  check(ix !== undefined && same(ix.indexBounds, { a: ["[5, 5]"] }), "indexBounds", ix && ix.indexBounds);
  check(Number(ex.executionStats.nReturned) === 10, "nReturned", ex.executionStats.nReturned);
  check(Number(ex.executionStats.totalDocsExamined) === 10, "totalDocsExamined", ex.executionStats.totalDocsExamined);
}
const multi = attempt("find({tags: 4}).explain()", () => c.find({ tags: 4 }).explain());
if (multi !== undefined) {
  const ix = findStage(multi.queryPlanner.winningPlan, "IXSCAN");
  check(ix !== undefined && ix.indexName === "tags_1" && ix.isMultiKey === true, "multikey IXSCAN", ix);
}
const scan = attempt("find({zz: 5}).explain()", () => c.find({ zz: 5 }).explain());
if (scan !== undefined) {
  const s = stages(scan.queryPlanner.winningPlan);
  check(s.includes("COLLSCAN") && !s.includes("IXSCAN"), "unindexed field: COLLSCAN", s);
}
const natural = attempt("hint({$natural: 1})", () => c.find({ a: 5 }).hint({ $natural: 1 }).explain());
if (natural !== undefined) {
  const s = stages(natural.queryPlanner.winningPlan);
  check(s.includes("COLLSCAN") && !s.includes("IXSCAN"), "$natural hint: COLLSCAN", s);
}
const hinted = attempt("hint('e_unique')", () => c.find({ a: 5 }).hint("e_unique").explain());
if (hinted !== undefined) {
  const ix = findStage(hinted.queryPlanner.winningPlan, "IXSCAN");
  check(ix !== undefined && ix.indexName === "e_unique", "hint by name forces the index", ix);
}
expectError("hint of a missing index", 2, () => c.find({ a: 5 }).hint("nope").toArray());
const sorted = attempt("sort+limit explain", () => c.find().sort({ b: -1, c: 1 }).limit(3).explain("executionStats"));
if (sorted !== undefined) {
  const s = stages(sorted.queryPlanner.winningPlan);
  const ix = findStage(sorted.queryPlanner.winningPlan, "IXSCAN");
  check(ix !== undefined && ix.indexName === "b_-1_c_1" && ix.direction === "forward", "sort by the index", ix);
  check(!s.includes("SORT"), "no SORT stage", s);
  check(Number(sorted.executionStats.totalKeysExamined) <= 5, "sort+limit stops early", sorted.executionStats.totalKeysExamined);
}
const top = c.find({}, { _id: 1 }).sort({ b: -1, c: 1 }).limit(3).toArray().map((d) => d._id);
check(same(top, [6, 13, 20]), "sort+limit results", top);
const covered = attempt("covered explain", () => c.find({ a: 5 }, { a: 1, _id: 0 }).explain("executionStats"));
if (covered !== undefined) {
  const s = stages(covered.queryPlanner.winningPlan);
  check(s.includes("PROJECTION_COVERED") && !s.includes("FETCH"), "covered query", s);
  check(Number(covered.executionStats.totalDocsExamined) === 0, "covered: no documents examined", covered.executionStats.totalDocsExamined);
}
check(c.find({ a: 5 }).toArray().length === 10, "find({a: 5}) results");
check(c.countDocuments({ tags: 4 }) === 40, "countDocuments through a multikey index", c.countDocuments({ tags: 4 }));

// --- hideIndex / unhideIndex ----------------------------------------------------
const hid = attempt("hideIndex", () => c.hideIndex("a_1"));
check(hid !== undefined && hid.hidden_old === false && hid.hidden_new === true, "hideIndex reply", hid);
const hiddenSpec = (attempt("getIndexes()", () => c.getIndexes()) || []).find((i) => i.name === "a_1");
check(hiddenSpec !== undefined && hiddenSpec.hidden === true, "getIndexes() shows hidden: true", hiddenSpec);
const hx = attempt("explain with a hidden index", () => c.find({ a: 5 }).explain());
if (hx !== undefined) {
  const s = stages(hx.queryPlanner.winningPlan);
  check(!s.includes("IXSCAN"), "a hidden index is not planned", s);
}
attempt("unhideIndex", () => c.unhideIndex("a_1"));
const ux = attempt("explain after unhideIndex", () => c.find({ a: 5 }).explain());
if (ux !== undefined) {
  const ix = findStage(ux.queryPlanner.winningPlan, "IXSCAN");
  check(ix !== undefined && ix.indexName === "a_1", "unhidden index is planned again", ix);
}

// --- validate --------------------------------------------------------------------
const v = attempt("validate()", () => c.validate());
if (v !== undefined) {
  check(v.valid === true, "validate().valid", v);
  check(v.keysPerIndex !== undefined && Number(v.keysPerIndex.a_1) === Number(v.nrecords), "validate().keysPerIndex", v.keysPerIndex);
}

// --- dropIndex / dropIndexes -------------------------------------------------------
const before = c.getIndexes().length;
const d1 = attempt("dropIndex(name)", () => c.dropIndex("b_-1_c_1"));
check(d1 !== undefined && Number(d1.nIndexesWas) === before, "dropIndex by name", d1);
const d2 = attempt("dropIndex(key)", () => c.dropIndex({ tags: 1 }));
check(d2 !== undefined && Number(d2.nIndexesWas) === before - 1, "dropIndex by key pattern", d2);
check(!c.getIndexes().some((i) => i.name === "b_-1_c_1" || i.name === "tags_1"), "dropped indexes are gone", c.getIndexes().map((i) => i.name));
expectError("dropIndex('_id_')", 72, () => c.dropIndex("_id_"));
expectError("dropIndex('nope')", 27, () => c.dropIndex("nope"));
attempt("dropIndexes(['sp_1', 't_1'])", () => c.dropIndexes(["sp_1", "t_1"]));
check(!c.getIndexes().some((i) => i.name === "sp_1" || i.name === "t_1"), "dropIndexes(list)", c.getIndexes().map((i) => i.name));
const all = attempt("dropIndexes()", () => c.dropIndexes());
check(all !== undefined && all.ok === 1, "dropIndexes() ok", all);
check(same(c.getIndexes(), [{ v: 2, key: { _id: 1 }, name: "_id_" }]), "dropIndexes() keeps only _id_", c.getIndexes());
check(c.countDocuments({}) === 202, "documents untouched by index drops", c.countDocuments({}));

idb.dropDatabase();

if (failures.length > 0) {
  throw new Error("mongosh indexes: " + failures.length + " check(s) failed:\n" + failures.join("\n"));
}
print("mongosh indexes: all checks passed");
