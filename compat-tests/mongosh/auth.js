// mongosh against a server started with --auth, logged in as the first
// user (created over the localhost exception before this script runs).
//
// Run: mongosh --quiet "mongodb://boss:PWD@127.0.0.1:PORT/test?authSource=admin" auth.js
// with SHARDGATE_URI_BASE=mongodb://127.0.0.1:PORT set for the logins it
// makes itself. Any failed check throws, and mongosh then exits non-zero.

load(__dirname + "/lib/checks.js");
function codeOf(f) {
  try { f(); return 0; } catch (e) { return e.code === undefined ? -1 : e.code; }
}

const base = process.env.SHARDGATE_URI_BASE;
const hostPort = base.slice("mongodb://".length);
function as(user, pwd) {
  return new Mongo("mongodb://" + user + ":" + pwd + "@" + hostPort +
                   "/mongosh_auth?authSource=mongosh_auth&directConnection=true").getDB("mongosh_auth");
}
const status = db.adminCommand({ connectionStatus: 1 });
check(status.authInfo.authenticatedUsers.length === 1 &&
      status.authInfo.authenticatedUsers[0].user === "boss", "logged in as boss", status.authInfo);

const shop = db.getSiblingDB("mongosh_auth");
shop.dropAllUsers();
shop.dropAllRoles();
shop.createUser({ user: "writer", pwd: "writer-pw", roles: ["readWrite"] });
shop.createUser({ user: "reader", pwd: "reader-pw", roles: ["read"], mechanisms: ["SCRAM-SHA-1"] });
check(shop.getUsers().users.length === 2, "getUsers lists both", shop.getUsers());
check(shop.getUser("reader").mechanisms[0] === "SCRAM-SHA-1", "reader has SHA-1 only", shop.getUser("reader"));
check(codeOf(() => shop.createUser({ user: "writer", pwd: "x", roles: [] })) === 51003, "duplicate user is 51003");
check(codeOf(() => shop.createUser({ user: "x", pwd: "x", roles: ["noSuchRole"] })) === 31, "unknown role is 31");

shop.createRole({ role: "countOnly", privileges: [{ resource: { db: "mongosh_auth", collection: "items" }, actions: ["find"] }], roles: [] });
check(shop.getRole("countOnly", { showPrivileges: true }).privileges.length === 1, "getRole shows the privilege");

// Logins as the new users, each a connection of its own.
const writer = as("writer", "writer-pw");
const w = writer.items.insertOne({ _id: 1, n: 1 });
check(w.acknowledged && w.insertedId === 1, "writer inserts", w);
const reader = as("reader", "reader-pw");
check(reader.items.countDocuments({}) === 1, "reader reads");
check(codeOf(() => reader.items.insertOne({ _id: 2 })) === 13, "reader may not insert");
check(codeOf(() => reader.items.drop()) === 13, "reader may not drop");
check(shop.items.countDocuments({}) === 1, "the refused writes changed nothing");

// db.auth on an unauthenticated connection, and a wrong password.
const anon = new Mongo(base + "/?directConnection=true").getDB("mongosh_auth");
check(codeOf(() => anon.items.findOne()) === 13, "unauthenticated find is 13");
check(anon.auth("writer", "writer-pw").ok === 1, "db.auth logs in");
check(anon.items.findOne({ _id: 1 }).n === 1, "then reads");
let refused = false;
try {
  as("writer", "wrong").items.findOne();
} catch (e) {
  refused = /Authentication failed/.test(String(e.message));
}
check(refused, "a wrong password is refused");

shop.dropAllUsers();
shop.dropAllRoles();
shop.dropDatabase();

if (failures.length > 0) {
  throw new Error(failures.length + " check(s) failed:\n" + failures.join("\n"));
}
print("auth.js: all checks passed");
