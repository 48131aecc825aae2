// mongosh transactions against Shardgate: session.withTransaction() moving
// money between accounts of a sharded collection (invisible outside until
// commit, the sum kept); startTransaction/abortTransaction discarding a
// write; a write conflict with the TransientTransactionError label; and a
// command a transaction may not run.
//
// Run: mongosh --quiet --norc "mongodb://127.0.0.1:PORT/test?directConnection=true" \
//        compat-tests/mongosh/transactions.js
// Any failed check throws at the end, and mongosh then exits non-zero.

load(__dirname + "/lib/checks.js");

const tdb = db.getSiblingDB("mongosh_txn");
tdb.dropDatabase();
sh.shardCollection("mongosh_txn.accounts", { acct: "hashed" });
const accounts = tdb.accounts;
for (let i = 0; i < 8; i++) accounts.insertOne({ _id: i, acct: i, balance: 100 });

function total() {
  return accounts.aggregate([{ $group: { _id: null, sum: { $sum: "$balance" } } }]).toArray()[0].sum;
}

// --- withTransaction: a transfer, all or nothing ------------------------------
const session = db.getMongo().startSession();
const inside = session.getDatabase("mongosh_txn").accounts;
let seenOutside = null;
attempt("withTransaction commits a transfer", () =>
  session.withTransaction(() => {
    inside.updateOne({ acct: 1 }, { $inc: { balance: -30 } });
    inside.updateOne({ acct: 6 }, { $inc: { balance: 30 } });
    seenOutside = accounts.findOne({ acct: 1 }).balance;
  }));
check(seenOutside === 100, "the transfer is invisible outside before commit", seenOutside);
check(accounts.findOne({ acct: 1 }).balance === 70 && accounts.findOne({ acct: 6 }).balance === 130,
  "the transfer is there after commit", accounts.find().toArray());
check(total() === 800, "the sum of balances is kept", total());

// --- abort discards -------------------------------------------------------------
session.startTransaction();
inside.insertOne({ _id: 100, acct: 100, balance: 1 });
check(inside.countDocuments({ acct: 100 }) === 1, "the transaction reads its own insert");
session.abortTransaction();
check(accounts.countDocuments({ acct: 100 }) === 0, "an aborted insert is gone");

// --- a write conflict is a transient error ---------------------------------------
session.startTransaction();
inside.updateOne({ acct: 2 }, { $inc: { balance: 1 } });
accounts.updateOne({ acct: 2 }, { $inc: { balance: 5 } });
let conflict = null;
try {
  session.commitTransaction();
} catch (e) {
  conflict = e;
}
check(conflict && conflict.code === 112 && conflict.errorLabels.includes("TransientTransactionError"),
  "a commit after a conflicting write fails with WriteConflict, labelled transient",
  conflict && { code: conflict.code, labels: conflict.errorLabels });
check(accounts.findOne({ acct: 2 }).balance === 105, "the conflicting write stands",
  accounts.findOne({ acct: 2 }));

// --- commands a transaction may not run -------------------------------------------
session.startTransaction();
let refused = null;
try {
  session.getDatabase("mongosh_txn").runCommand({ count: "accounts" });
} catch (e) {
  refused = e;
}
check(refused && refused.code === 263, "count is refused in a transaction with 263",
  refused && { code: refused.code, message: refused.message });
attempt("abort after a refused command", () => session.abortTransaction());
session.endSession();

if (failures.length > 0) {
  throw new Error("mongosh transactions: " + failures.length + " check(s) failed:\n" + failures.join("\n"));
}
print("mongosh transactions: all checks passed");
