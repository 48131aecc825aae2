// mongosh (the Node.js driver) over TLS, against a server started with
// --tls-mode requireTLS (scripts/test makes its certificates with openssl).
//
// Run: mongosh --quiet --norc --tls --tlsCAFile ca.pem \
//        "mongodb://127.0.0.1:PORT/test?directConnection=true" \
//        compat-tests/mongosh/tls.js
// Inserts, reads, updates and deletes over the encrypted connection, and
// checks the server answers hello as a mongos. Any failed check throws at
// the end, and mongosh then exits non-zero.

load(__dirname + "/lib/checks.js");

const hello = db.adminCommand({ hello: 1 });
check(hello.ok === 1 && hello.msg === "isdbgrid", "hello over TLS", hello);

const coll = db.getSiblingDB("tlsjs").items;
coll.drop();
const docs = [];
for (let i = 0; i < 500; i++) docs.push({ _id: i, s: "x".repeat(1000) });
check(coll.insertMany(docs).insertedIds[499] === 499, "insertMany over TLS");
// Many batches: several TLS records per reply.
check(coll.find().toArray().length === 500, "find of 500 over TLS");
check(coll.updateOne({ _id: 7 }, { $set: { s: "y" } }).modifiedCount === 1, "updateOne over TLS");
check(coll.findOne({ _id: 7 }).s === "y", "the update is read back");
check(coll.deleteMany({ _id: { $gte: 250 } }).deletedCount === 250, "deleteMany over TLS");
check(coll.countDocuments() === 250, "count after delete", coll.countDocuments());
coll.drop();

if (failures.length > 0) {
  throw new Error(failures.length + " check(s) failed:\n" + failures.join("\n"));
}
print("tls.js: all checks passed");
