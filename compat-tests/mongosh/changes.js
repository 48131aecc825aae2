// mongosh change streams against Shardgate: db.coll.watch() with
// updateLookup over inserts, updates and deletes; resuming from
// getResumeToken(); a database stream with a $match; a sharded
// collection's documentKey; and a drop ending a stream with invalidate.
//
// Run: mongosh --quiet --norc "mongodb://127.0.0.1:PORT/test?directConnection=true" \
//        compat-tests/mongosh/changes.js
// Any failed check throws at the end, and mongosh then exits non-zero.

load(__dirname + "/lib/checks.js");

// The next event of `stream`, waiting up to five seconds.
function nextEvent(stream) {
  for (let i = 0; i < 50; i++) {
    const e = stream.tryNext();
    if (e !== null) return e;
    sleep(100);
  }
  return null;
}

const sdb = db.getSiblingDB("mongosh_changes");
sdb.dropDatabase();
const c = sdb.events;
c.insertOne({ _id: 0 });

// --- one collection, every kind of write ------------------------------------
const stream = c.watch([], { fullDocument: "updateLookup" });
c.insertOne({ _id: 1, n: 1 });
c.updateOne({ _id: 1 }, { $inc: { n: 1 }, $set: { "sub.a": "x" } });
c.replaceOne({ _id: 1 }, { n: 10 });
c.deleteOne({ _id: 1 });
const insert = nextEvent(stream);
check(insert && insert.operationType === "insert" && insert.fullDocument.n === 1, "an insert event", insert);
const update = nextEvent(stream);
check(update && update.operationType === "update", "an update event", update);
check(update && update.updateDescription.updatedFields.n === 2 && update.updateDescription.updatedFields["sub"].a === "x",
  "updateDescription names what changed", update && update.updateDescription);
const replace = nextEvent(stream);
check(replace && replace.operationType === "replace" && replace.fullDocument.n === 10, "a replace event", replace);
const del = nextEvent(stream);
check(del && del.operationType === "delete" && del.documentKey._id === 1, "a delete event", del);
const token = stream.getResumeToken();
check(token && typeof token._data === "string", "a resume token", token);
stream.close();

// --- resume from the token --------------------------------------------------
c.insertOne({ _id: 2 });
const resumed = c.watch([], { resumeAfter: token });
const after = nextEvent(resumed);
check(after && after.operationType === "insert" && after.documentKey._id === 2, "resuming starts after the token", after);
resumed.close();

// --- a database stream with a $match ----------------------------------------
const dbStream = sdb.watch([{ $match: { "ns.coll": "other" } }]);
c.insertOne({ _id: 3 });
sdb.other.insertOne({ _id: "o" });
const other = nextEvent(dbStream);
check(other && other.ns.coll === "other" && other.documentKey._id === "o", "the database stream keeps what $match keeps", other);
dbStream.close();

// --- a sharded collection ---------------------------------------------------
attempt("shardCollection", () => sh.shardCollection("mongosh_changes.sharded", { tenant: "hashed" }));
const sharded = sdb.sharded.watch();
sdb.sharded.insertOne({ _id: 1, tenant: "acme" });
const keyed = nextEvent(sharded);
check(keyed && keyed.documentKey.tenant === "acme" && keyed.documentKey._id === 1,
  "a sharded collection's documentKey holds the shard key", keyed && keyed.documentKey);

// --- a drop invalidates -----------------------------------------------------
sdb.sharded.drop();
const dropped = nextEvent(sharded);
check(dropped && dropped.operationType === "drop", "a drop event", dropped);
const invalidate = nextEvent(sharded);
check(invalidate && invalidate.operationType === "invalidate", "then invalidate", invalidate);
check(sharded.isClosed(), "the stream is closed after invalidate");

if (failures.length > 0) {
  throw new Error("mongosh changes: " + failures.length + " check(s) failed:\n" + failures.join("\n"));
}
print("mongosh changes: all checks passed");
