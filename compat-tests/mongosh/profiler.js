// mongosh: the profiler, currentOp and killOp as a user runs them.
//
// Run: mongosh --quiet "mongodb://127.0.0.1:PORT/test" compat-tests/mongosh/profiler.js
// The index build that currentOp watches and killOp stops runs in a
// second mongosh, started from here (its path in $MONGOSH_BIN, else
// `mongosh` on the PATH).

load(__dirname + "/lib/checks.js");

const dbName = "mongosh_profiler";
const pdb = db.getSiblingDB(dbName);
pdb.dropDatabase();

// --- the profiler ---------------------------------------------------------
check(pdb.getProfilingStatus().was === 0, "profiling starts off", pdb.getProfilingStatus());
const set = pdb.setProfilingLevel(2);
check(set.was === 0 && set.ok === 1, "setProfilingLevel(2) replies with the former level", set);
check(pdb.getProfilingStatus().was === 2, "getProfilingStatus shows level 2", pdb.getProfilingStatus());

pdb.orders.insertMany([{ _id: 1, total: 10 }, { _id: 2, total: 25 }, { _id: 3, total: 40 }]);
const big = pdb.orders.find({ total: { $gt: 20 } }).toArray();
check(big.length === 2, "the query found two orders", big);
pdb.orders.updateOne({ _id: 1 }, { $set: { total: 11 } });

const ops = pdb.system.profile.find({ ns: dbName + ".orders" }).sort({ ts: 1 }).toArray();
check(ops.map((o) => o.op).join(",") === "insert,query,update", "system.profile holds the three operations in order", ops.map((o) => o.op));
const query = ops.find((o) => o.op === "query");
check(query && query.command.filter.total.$gt === 20, "the query's filter is recorded", query);
check(query && query.nreturned === 2, "nreturned", query);
check(query && query.docsExamined === 3 && query.planSummary === "COLLSCAN", "docsExamined and planSummary", query);
check(query && query.millis >= 0 && query.ts instanceof Date, "millis and ts", query);
const update = ops.find((o) => o.op === "update");
check(update && update.nModified === 1 && update.planSummary === "IDHACK", "the update's outcome and plan", update);
check(pdb.system.profile.isCapped(), "system.profile is capped");

// `show profile` prints the recorded operations.
pdb.setProfilingLevel(0);
check(pdb.getProfilingStatus().was === 0, "setProfilingLevel(0)", pdb.getProfilingStatus());
const before = pdb.system.profile.countDocuments({});
pdb.orders.findOne({ _id: 2 });
check(pdb.system.profile.countDocuments({}) === before, "level 0 records nothing more");

// --- currentOp and killOp during an index build -------------------------------
const n = 300000;
for (let start = 0; start < n; start += 10000) {
  const docs = [];
  for (let i = start; i < start + 10000; i++) docs.push({ _id: i, a: i % 977, b: "value " + i, c: i * 3 });
  pdb.big.insertMany(docs, { ordered: false });
}

const { spawn } = require("child_process");
function buildInBackground(name, key) {
  const shell = process.env.MONGOSH_BIN || "mongosh";
  const uri = db.getMongo()._uri;
  const script =
    "let r; try { r = db.getSiblingDB('" + dbName + "').runCommand({createIndexes: 'big', indexes: [{key: " +
    JSON.stringify(key) + ", name: '" + name + "'}]}); } catch (e) { r = {ok: 0, code: e.code}; }" +
    " print(JSON.stringify({ok: r.ok, code: r.code || 0}));";
  const child = spawn(shell, ["--quiet", "--norc", uri, "--eval", script]);
  const result = { output: "", done: false };
  child.stdout.on("data", (d) => { result.output += d; });
  child.on("exit", () => { result.done = true; });
  return result;
}

function findBuild(withProgress) {
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline) {
    const inprog = db.currentOp({ "command.createIndexes": "big" }).inprog;
    const op = inprog.find((o) => !withProgress || (o.progress && o.progress.done > 0));
    if (op) return op;
    sleep(5);
  }
  return null;
}

function waitFor(result) {
  const deadline = Date.now() + 60000;
  while (!result.done && Date.now() < deadline) sleep(50);
  const line = result.output.trim().split("\n").pop();
  try { return JSON.parse(line); } catch (e) { return { output: result.output }; }
}

const first = buildInBackground("b_a_c", { b: 1, a: 1, c: 1 });
const seen = findBuild(true);
check(seen !== null, "db.currentOp() shows the index build with progress");
if (seen) {
  check(seen.ns === dbName + ".big" && seen.op === "command", "the build's ns and op", seen);
  check(seen.progress.total === n, "progress.total is the collection's documents", seen.progress);
  check(seen.msg.startsWith("Index Build: scanning collection"), "the build's msg", seen.msg);
}
const built = waitFor(first);
check(built.ok === 1, "the first build finishes", built);

const second = buildInBackground("c_b", { c: 1, b: 1 });
const running = findBuild(false);
check(running !== null, "db.currentOp() shows the second build");
if (running) {
  const killed = db.killOp(running.opid);
  check(killed.ok === 1, "db.killOp() succeeds", killed);
}
const stopped = waitFor(second);
check(stopped.ok === 0 && stopped.code === 11601, "the killed build fails with 11601 Interrupted", stopped);
const names = pdb.big.getIndexes().map((i) => i.name).sort();
check(names.join(",") === "_id_,b_a_c", "the killed build left no index", names);

// The aggregation stage lists the running aggregate itself.
const listed = db.getSiblingDB("admin").aggregate([{ $currentOp: {} }, { $match: { "command.aggregate": 1 } }]).toArray();
check(listed.length === 1, "$currentOp lists the running aggregate", listed);

pdb.dropDatabase();
if (failures.length > 0) {
  throw new Error(failures.length + " check(s) failed:\n" + failures.join("\n"));
}
print("profiler.js: all checks passed");
