//! What each command needs: one table per kind of command (open to
//! everyone, on the server, on a collection, on a database, the user and
//! role commands), and code for the commands whose needs depend on their
//! arguments (pipelines, upserts, renames, `explain`).

use bson::{Bson, Document};

use super::{Action, Resource};

use Action as A;

/// Needs, gathered while reading a command.
#[derive(Default)]
struct Needs(Vec<(Resource, Action)>);

impl Needs {
    fn on(&mut self, resource: Resource, actions: &[Action]) {
        for &a in actions {
            if !self.0.iter().any(|(r, x)| *r == resource && *x == a) {
                self.0.push((resource.clone(), a));
            }
        }
    }

    fn cluster(&mut self, actions: &[Action]) {
        self.on(Resource::Cluster, actions);
    }
}

/// The namespace a command names by its first value: a collection of
/// `db` when it is a string, else the database itself (`aggregate: 1`).
fn first_ns(db: &str, body: &Document) -> Resource {
    match body.iter().next() {
        Some((_, Bson::String(coll))) => Resource::collection(db, coll),
        _ => Resource::database(db),
    }
}

/// A full `db.collection` name as admin commands give it; the database
/// alone when it has no dot.
fn full_ns(ns: &str) -> Resource {
    match ns.split_once('.') {
        Some((db, coll)) => Resource::collection(db, coll),
        None => Resource::database(ns),
    }
}

/// The full namespace a command names by `key`, if it is a string.
fn full_ns_of(body: &Document, key: &str) -> Option<Resource> {
    match body.get(key) {
        Some(Bson::String(ns)) => Some(full_ns(ns)),
        _ => None,
    }
}

fn flag(body: &Document, key: &str) -> bool {
    match body.get(key) {
        Some(Bson::Boolean(b)) => *b,
        Some(Bson::Int32(n)) => *n != 0,
        Some(Bson::Int64(n)) => *n != 0,
        Some(Bson::Double(n)) => *n != 0.0,
        _ => false,
    }
}

/// Pipelines nest (`$facet`, `$lookup`, `$unionWith`); past this depth
/// the command itself refuses them, so reading on is pointless.
const MAX_PIPELINE_DEPTH: usize = 32;

/// The commands a client may run without privileges: the handshake,
/// authentication itself, and the ones that only describe the
/// connection or the server's build.
const OPEN_COMMANDS: &[&str] = &[
    "abortTransaction",
    "authenticate",
    "buildInfo",
    "buildinfo",
    "commitTransaction",
    "connectionStatus",
    "endSessions",
    "getLastRequestStatistics",
    "getnonce",
    "hello",
    "isMaster",
    "ismaster",
    "listCommands",
    "logout",
    "ping",
    "refreshSessions",
    "saslContinue",
    "saslStart",
    "startSession",
    "whatsmyuri",
];

/// The user and role commands: what each needs on the database it runs
/// on (the roles it grants are checked by the command itself, which
/// knows them).
const USER_COMMANDS: &[(&str, &[Action])] = &[
    ("createRole", &[A::CreateRole]),
    ("createUser", &[A::CreateUser]),
    ("dropAllRolesFromDatabase", &[A::DropRole]),
    ("dropAllUsersFromDatabase", &[A::DropUser]),
    ("dropRole", &[A::DropRole]),
    ("dropUser", &[A::DropUser]),
    ("grantPrivilegesToRole", &[A::GrantRole]),
    ("grantRolesToRole", &[A::GrantRole]),
    ("grantRolesToUser", &[A::GrantRole]),
    ("revokePrivilegesFromRole", &[A::RevokeRole]),
    ("revokeRolesFromRole", &[A::RevokeRole]),
    ("revokeRolesFromUser", &[A::RevokeRole]),
    ("rolesInfo", &[A::ViewRole]),
    ("updateRole", &[A::CreateRole, A::DropRole]),
    ("usersInfo", &[A::ViewUser]),
];

/// Commands that act on the whole server, and the action each needs.
const CLUSTER_COMMANDS: &[(&str, Action)] = &[
    ("addShard", A::AddShard),
    ("balancerStatus", A::ListShards),
    ("configureFailPoint", A::SetParameter),
    ("currentOp", A::Inprog),
    ("fsync", A::Fsync),
    ("getCmdLineOpts", A::GetCmdLineOpts),
    ("getLog", A::GetLog),
    ("getParameter", A::GetParameter),
    ("hostInfo", A::HostInfo),
    ("killOp", A::Killop),
    ("listShards", A::ListShards),
    ("removeShard", A::RemoveShard),
    ("serverStatus", A::ServerStatus),
    ("setParameter", A::SetParameter),
    ("top", A::Top),
];

/// Commands that act on the collection their first value names, or on
/// the database when it names none.
const COLLECTION_COMMANDS: &[(&str, &[Action])] = &[
    ("collMod", &[A::CollMod]),
    ("collStats", &[A::CollStats]),
    ("convertToCapped", &[A::ConvertToCapped]),
    ("count", &[A::Find]),
    ("createIndexes", &[A::CreateIndex]),
    ("distinct", &[A::Find]),
    ("drop", &[A::DropCollection]),
    ("dropIndexes", &[A::DropIndex]),
    ("find", &[A::Find]),
    ("killCursors", &[A::KillCursors]),
    ("listIndexes", &[A::ListIndexes]),
    ("validate", &[A::Validate]),
];

/// Commands that act on the database they run on.
const DATABASE_COMMANDS: &[(&str, &[Action])] = &[
    ("dbHash", &[A::DbHash]),
    ("dbStats", &[A::DbStats]),
    ("dropDatabase", &[A::DropDatabase]),
    ("profile", &[A::EnableProfiler]),
];

/// Whether this module knows what `command` needs. A command it does not
/// know needs an action no role grants but `anyAction`.
pub fn knows(command: &str) -> bool {
    OPEN_COMMANDS.contains(&command)
        || USER_COMMANDS.iter().any(|(c, _)| *c == command)
        || CLUSTER_COMMANDS.iter().any(|(c, _)| *c == command)
        || COLLECTION_COMMANDS.iter().any(|(c, _)| *c == command)
        || DATABASE_COMMANDS.iter().any(|(c, _)| *c == command)
        || OTHER_COMMANDS.contains(&command)
}

/// Commands [`required`] reads with code of their own.
const OTHER_COMMANDS: &[&str] = &[
    "aggregate",
    "cloneCollectionAsCapped",
    "create",
    "customAction",
    "delete",
    "enableSharding",
    "explain",
    "findAndModify",
    "findandmodify",
    "getMore",
    "insert",
    "killSessions",
    "listCollections",
    "listDatabases",
    "mapReduce",
    "mapreduce",
    "moveChunk",
    "moveRange",
    "renameCollection",
    "shardCollection",
    "update",
    "updateUser",
];

/// Whether a client that has not authenticated may run `command`.
pub fn open_to_everyone(command: &str) -> bool {
    OPEN_COMMANDS.contains(&command)
}

/// What running the command `body` (its first key the name) against
/// database `db` needs: each concrete resource with one action. Reads
/// only what decides the answer; a malformed command needs what a
/// well-formed one of its kind would, and fails in its handler.
pub fn required(db: &str, body: &Document) -> Vec<(Resource, Action)> {
    let mut needs = Needs::default();
    command_needs(db, body, &mut needs, 0);
    needs.0
}

fn command_needs(db: &str, body: &Document, needs: &mut Needs, depth: usize) {
    let Some(name) = body.keys().next() else {
        return;
    };
    let name = name.as_str();
    let ns = first_ns(db, body);
    if flag(body, "bypassDocumentValidation") {
        needs.on(ns.clone(), &[A::BypassDocumentValidation]);
    }
    if OPEN_COMMANDS.contains(&name) {
        return;
    }
    if let Some((_, actions)) = USER_COMMANDS.iter().find(|(c, _)| *c == name) {
        needs.on(Resource::database(db), actions);
        return;
    }
    if let Some((_, action)) = CLUSTER_COMMANDS.iter().find(|(c, _)| *c == name) {
        if !(name == "currentOp" && flag(body, "$ownOps")) {
            needs.cluster(&[*action]);
        }
        return;
    }
    if let Some((_, actions)) = COLLECTION_COMMANDS.iter().find(|(c, _)| *c == name) {
        needs.on(ns, actions);
        return;
    }
    if let Some((_, actions)) = DATABASE_COMMANDS.iter().find(|(c, _)| *c == name) {
        needs.on(Resource::database(db), actions);
        return;
    }
    match name {
        "aggregate" => {
            if let Some(Bson::Array(stages)) = body.get("pipeline") {
                pipeline_needs(db, &ns, stages, needs, depth);
            }
        }
        "cloneCollectionAsCapped" => {
            needs.on(ns, &[A::Find]);
            if let Some(Bson::String(to)) = body.get("toCollection") {
                needs.on(
                    Resource::collection(db, to),
                    &[A::Insert, A::CreateIndex, A::ConvertToCapped],
                );
            }
        }
        "create" => {
            needs.on(ns, &[A::CreateCollection]);
            if let Some(Bson::String(on)) = body.get("viewOn") {
                needs.on(Resource::collection(db, on), &[A::Find]);
                if let Some(Bson::Array(stages)) = body.get("pipeline") {
                    let on = Resource::collection(db, on);
                    pipeline_needs(db, &on, stages, needs, depth);
                }
            }
        }
        "customAction" => custom_action_needs(db, body, needs),
        "delete" => needs.on(ns, &[A::Remove]),
        "enableSharding" => {
            if let Some(Bson::String(target)) = body.get("enableSharding") {
                needs.on(Resource::database(target), &[A::EnableSharding]);
            }
        }
        "explain" => {
            if let Some(Bson::Document(inner)) = body.get("explain") {
                if depth < MAX_PIPELINE_DEPTH {
                    command_needs(db, inner, needs, depth + 1);
                }
            }
        }
        "findAndModify" | "findandmodify" => {
            if flag(body, "remove") {
                needs.on(ns.clone(), &[A::Find, A::Remove]);
            } else {
                needs.on(ns.clone(), &[A::Find, A::Update]);
                if flag(body, "upsert") {
                    needs.on(ns, &[A::Insert]);
                }
            }
        }
        "getMore" => {
            // The cursor's own collection; a cursor of a collection-less
            // aggregation (`$cmd.aggregate`) was checked when it opened,
            // and belongs to the user who opened it.
            if let Some(Bson::String(coll)) = body.get("collection") {
                if !coll.starts_with("$cmd") {
                    needs.on(Resource::collection(db, coll), &[A::Find]);
                }
            }
        }
        "insert" => needs.on(ns, &[A::Insert]),
        "updateUser" => {
            // What it changes; the roles it grants or revokes are checked
            // by the command. A user may change its own password and
            // custom data with the `changeOwn…` actions instead (see
            // `commands::auth`).
            if body.contains_key("pwd") || body.contains_key("mechanisms") {
                needs.on(Resource::database(db), &[A::ChangePassword]);
            }
            if body.contains_key("customData") {
                needs.on(Resource::database(db), &[A::ChangeCustomData]);
            }
        }
        "killSessions" => {
            // Killing every session (an empty list) is killing others'.
            if matches!(body.get("killSessions"), Some(Bson::Array(a)) if a.is_empty()) {
                needs.cluster(&[A::KillAnySession]);
            }
        }
        "listCollections" => {
            let names_only = flag(body, "nameOnly") && flag(body, "authorizedCollections");
            if !names_only {
                needs.on(Resource::database(db), &[A::ListCollections]);
            }
        }
        "listDatabases" => {
            // Without the action a user sees the databases it holds
            // privileges on, unless it asks for all of them.
            if matches!(body.get("authorizedDatabases"), Some(Bson::Boolean(false))) {
                needs.cluster(&[A::ListDatabases]);
            }
        }
        "mapReduce" | "mapreduce" => {
            needs.on(ns, &[A::Find]);
            let out = match body.get("out") {
                Some(Bson::String(coll)) => Some(Resource::collection(db, coll)),
                Some(Bson::Document(out)) if !out.contains_key("inline") => {
                    let target_db = match out.get("db") {
                        Some(Bson::String(d)) => d.as_str(),
                        _ => db,
                    };
                    ["replace", "merge", "reduce"]
                        .iter()
                        .find_map(|k| match out.get(*k) {
                            Some(Bson::String(coll)) => Some(Resource::collection(target_db, coll)),
                            _ => None,
                        })
                }
                _ => None,
            };
            if let Some(out) = out {
                needs.on(out, &[A::Insert, A::Remove, A::Update, A::CreateCollection]);
            }
        }
        "moveChunk" | "moveRange" => {
            if let Some(target) = full_ns_of(body, name) {
                needs.on(target, &[A::MoveChunk]);
            }
        }
        "renameCollection" => rename_needs(body, needs),
        "shardCollection" => {
            if let Some(target) = full_ns_of(body, "shardCollection") {
                needs.on(target, &[A::EnableSharding]);
            }
        }
        "update" => {
            needs.on(ns.clone(), &[A::Update]);
            let upserts = match body.get("updates") {
                Some(Bson::Array(updates)) => updates
                    .iter()
                    .any(|u| matches!(u, Bson::Document(u) if flag(u, "upsert"))),
                _ => false,
            };
            if upserts {
                needs.on(ns, &[A::Insert]);
            }
        }
        // A command this table does not know: only `anyAction` covers it.
        _ => needs.on(Resource::AnyResource, &[A::AnyAction]),
    }
}

/// `renameCollection: "a.b", to: "c.d"`.
fn rename_needs(body: &Document, needs: &mut Needs) {
    let (Some(from), Some(to)) = (full_ns_of(body, "renameCollection"), full_ns_of(body, "to"))
    else {
        return;
    };
    let same_db = matches!(
        (&from, &to),
        (Resource::Namespace { db: a, .. }, Resource::Namespace { db: b, .. }) if a == b
    );
    if same_db {
        needs.on(from, &[A::RenameCollectionSameDb]);
        needs.on(to.clone(), &[A::RenameCollectionSameDb]);
    } else {
        needs.on(from, &[A::Find, A::DropCollection]);
        needs.on(to.clone(), &[A::Insert, A::CreateIndex]);
    }
    if flag(body, "dropTarget") {
        needs.on(to, &[A::DropCollection]);
    }
}

/// Cosmos DB's `customAction` commands.
fn custom_action_needs(db: &str, body: &Document, needs: &mut Needs) {
    let coll = match body.get("collection") {
        Some(Bson::String(c)) => Resource::collection(db, c),
        _ => Resource::database(db),
    };
    let database = Resource::database(db);
    if let Some(Bson::String(action)) = body.get("customAction") {
        match action.as_str() {
            "CreateDatabase" => needs.on(database, &[A::CreateCollection]),
            "UpdateDatabase" => needs.on(database, &[A::CollMod]),
            "GetDatabase" => needs.on(database, &[A::DbStats]),
            "CreateCollection" => {
                needs.on(coll.clone(), &[A::CreateCollection]);
                if body.contains_key("shardKey") {
                    needs.on(coll, &[A::EnableSharding]);
                }
            }
            "UpdateCollection" => needs.on(coll, &[A::CollMod]),
            "GetCollection" => needs.on(coll, &[A::CollStats]),
            // An unknown action fails in the handler; it needs nothing
            // that would hide that error behind 13.
            _ => {}
        }
    }
}

/// What each stage of `stages`, run on `ns` in `db`, needs.
fn pipeline_needs(db: &str, ns: &Resource, stages: &[Bson], needs: &mut Needs, depth: usize) {
    if depth >= MAX_PIPELINE_DEPTH {
        return;
    }
    // A collection-less pipeline reads nothing of the database unless a
    // stage names a collection.
    let reads_ns = matches!(ns, Resource::Namespace { collection, .. } if !collection.is_empty());
    let mut source_only = false;
    for stage in stages {
        let Bson::Document(stage) = stage else {
            continue;
        };
        let Some((name, spec)) = stage.iter().next() else {
            continue;
        };
        match (name.as_str(), spec) {
            ("$collStats", _) => {
                needs.on(ns.clone(), &[A::CollStats]);
                source_only = true;
            }
            ("$indexStats", _) => {
                needs.on(ns.clone(), &[A::IndexStats]);
                source_only = true;
            }
            ("$currentOp", spec) => {
                let all = matches!(spec, Bson::Document(s) if flag(s, "allUsers"));
                if all {
                    needs.cluster(&[A::Inprog]);
                }
                source_only = true;
            }
            ("$listSessions", _) | ("$listLocalSessions", _) => {
                let all = matches!(spec, Bson::Document(s) if flag(s, "allUsers"));
                if all {
                    needs.cluster(&[A::ListSessions]);
                }
                source_only = true;
            }
            ("$documents", _) => source_only = true,
            ("$changeStream", _) => {
                needs.on(ns.clone(), &[A::ChangeStream, A::Find]);
                source_only = true;
            }
            ("$lookup", Bson::Document(spec)) | ("$graphLookup", Bson::Document(spec)) => {
                let from = match spec.get("from") {
                    Some(Bson::String(c)) => Some(Resource::collection(db, c)),
                    Some(Bson::Document(f)) => match (f.get("db"), f.get("coll")) {
                        (Some(Bson::String(d)), Some(Bson::String(c))) => {
                            Some(Resource::collection(d, c))
                        }
                        _ => None,
                    },
                    _ => None,
                };
                if let Some(from) = &from {
                    needs.on(from.clone(), &[A::Find]);
                }
                if let Some(Bson::Array(inner)) = spec.get("pipeline") {
                    let on = from.unwrap_or_else(|| Resource::database(db));
                    pipeline_needs(db, &on, inner, needs, depth + 1);
                }
            }
            ("$unionWith", Bson::String(coll)) => {
                needs.on(Resource::collection(db, coll), &[A::Find]);
            }
            ("$unionWith", Bson::Document(spec)) => {
                let on = match spec.get("coll") {
                    Some(Bson::String(c)) => Resource::collection(db, c),
                    _ => Resource::database(db),
                };
                if matches!(&on, Resource::Namespace { collection, .. } if !collection.is_empty()) {
                    needs.on(on.clone(), &[A::Find]);
                }
                if let Some(Bson::Array(inner)) = spec.get("pipeline") {
                    pipeline_needs(db, &on, inner, needs, depth + 1);
                }
            }
            ("$facet", Bson::Document(facets)) => {
                for inner in facets.values() {
                    if let Bson::Array(inner) = inner {
                        pipeline_needs(db, ns, inner, needs, depth + 1);
                    }
                }
            }
            ("$out", spec) => {
                let target = match spec {
                    Bson::String(c) => Some(Resource::collection(db, c)),
                    Bson::Document(s) => match (s.get("db"), s.get("coll")) {
                        (Some(Bson::String(d)), Some(Bson::String(c))) => {
                            Some(Resource::collection(d, c))
                        }
                        (None, Some(Bson::String(c))) => Some(Resource::collection(db, c)),
                        _ => None,
                    },
                    _ => None,
                };
                if let Some(target) = target {
                    needs.on(target, &[A::Insert, A::Remove]);
                }
            }
            ("$merge", spec) => {
                let into = match spec {
                    Bson::String(c) => Some(Resource::collection(db, c)),
                    Bson::Document(s) => match s.get("into") {
                        Some(Bson::String(c)) => Some(Resource::collection(db, c)),
                        Some(Bson::Document(i)) => match (i.get("db"), i.get("coll")) {
                            (Some(Bson::String(d)), Some(Bson::String(c))) => {
                                Some(Resource::collection(d, c))
                            }
                            (None, Some(Bson::String(c))) => Some(Resource::collection(db, c)),
                            _ => None,
                        },
                        _ => None,
                    },
                    _ => None,
                };
                if let Some(into) = into {
                    needs.on(into, &[A::Insert, A::Update]);
                }
            }
            _ => {}
        }
    }
    if reads_ns && !source_only {
        needs.on(ns.clone(), &[A::Find]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{authorized, builtin_role, Privilege};
    use super::*;
    use bson::doc;

    fn needs(db: &str, body: Document) -> Vec<(Resource, Action)> {
        let mut got = required(db, &body);
        got.sort();
        got
    }

    fn coll(c: &str) -> Resource {
        Resource::collection("shop", c)
    }

    #[test]
    fn crud_commands_need_their_actions_on_their_collection() {
        assert_eq!(
            needs("shop", doc! {"find": "orders"}),
            [(coll("orders"), A::Find)]
        );
        assert_eq!(
            needs("shop", doc! {"insert": "orders", "documents": []}),
            [(coll("orders"), A::Insert)]
        );
        assert_eq!(
            needs(
                "shop",
                doc! {"update": "o", "updates": [{"q": {}, "u": {}, "upsert": true}]}
            ),
            [(coll("o"), A::Insert), (coll("o"), A::Update)]
        );
        assert_eq!(
            needs(
                "shop",
                doc! {"update": "o", "updates": [{"q": {}, "u": {}}]}
            ),
            [(coll("o"), A::Update)]
        );
        assert_eq!(
            needs("shop", doc! {"delete": "o"}),
            [(coll("o"), A::Remove)]
        );
        assert_eq!(
            needs("shop", doc! {"findAndModify": "o", "remove": true}),
            [(coll("o"), A::Find), (coll("o"), A::Remove)]
        );
        assert_eq!(
            needs(
                "shop",
                doc! {"insert": "o", "bypassDocumentValidation": true}
            ),
            [
                (coll("o"), A::BypassDocumentValidation),
                (coll("o"), A::Insert)
            ]
        );
        assert_eq!(
            needs("shop", doc! {"getMore": 5_i64, "collection": "o"}),
            [(coll("o"), A::Find)]
        );
        assert_eq!(
            needs("shop", doc! {"explain": {"count": "o"}}),
            [(coll("o"), A::Find)]
        );
    }

    #[test]
    fn pipelines_need_find_on_every_collection_they_read_and_writes_on_their_target() {
        let got = needs(
            "shop",
            doc! {"aggregate": "orders", "pipeline": [
                {"$lookup": {"from": "items", "pipeline": [
                    {"$unionWith": "archive"},
                ], "as": "i"}},
                {"$facet": {"a": [{"$lookup": {"from": "users", "localField": "u",
                                                "foreignField": "_id", "as": "x"}}]}},
                {"$merge": {"into": {"db": "reports", "coll": "daily"}}},
            ]},
        );
        assert_eq!(
            got,
            [
                (Resource::collection("reports", "daily"), A::Insert),
                (Resource::collection("reports", "daily"), A::Update),
                (coll("archive"), A::Find),
                (coll("items"), A::Find),
                (coll("orders"), A::Find),
                (coll("users"), A::Find),
            ]
        );
        assert_eq!(
            needs(
                "admin",
                doc! {"aggregate": 1, "pipeline": [{"$currentOp": {"allUsers": true}}]}
            ),
            [(Resource::Cluster, A::Inprog)]
        );
        assert_eq!(
            needs(
                "shop",
                doc! {"aggregate": 1, "pipeline": [{"$documents": [{}]}]}
            ),
            []
        );
        assert_eq!(
            needs(
                "shop",
                doc! {"aggregate": "o", "pipeline": [{"$out": "copy"}]}
            ),
            [
                (coll("copy"), A::Insert),
                (coll("copy"), A::Remove),
                (coll("o"), A::Find)
            ]
        );
    }

    #[test]
    fn server_and_database_commands_need_cluster_or_database_actions() {
        assert_eq!(
            needs("admin", doc! {"serverStatus": 1}),
            [(Resource::Cluster, A::ServerStatus)]
        );
        assert_eq!(needs("admin", doc! {"currentOp": 1, "$ownOps": true}), []);
        assert_eq!(
            needs("shop", doc! {"dropDatabase": 1}),
            [(Resource::database("shop"), A::DropDatabase)]
        );
        assert_eq!(
            needs(
                "admin",
                doc! {"shardCollection": "shop.o", "key": {"k": "hashed"}}
            ),
            [(coll("o"), A::EnableSharding)]
        );
        assert_eq!(
            needs("admin", doc! {"renameCollection": "shop.a", "to": "shop.b"}),
            [
                (coll("a"), A::RenameCollectionSameDb),
                (coll("b"), A::RenameCollectionSameDb)
            ]
        );
        assert_eq!(
            needs("shop", doc! {"createUser": "u", "pwd": "p", "roles": []}),
            [(Resource::database("shop"), A::CreateUser)]
        );
        // updateUser needs what it changes; roles are the command's own check.
        let shop = Resource::database("shop");
        assert_eq!(
            needs("shop", doc! {"updateUser": "u", "pwd": "p"}),
            [(shop.clone(), A::ChangePassword)]
        );
        assert_eq!(
            needs("shop", doc! {"updateUser": "u", "customData": {}}),
            [(shop, A::ChangeCustomData)]
        );
        assert_eq!(needs("shop", doc! {"updateUser": "u", "roles": []}), []);
        assert_eq!(needs("admin", doc! {"hello": 1}), []);
        assert_eq!(
            needs(
                "shop",
                doc! {"listCollections": 1, "nameOnly": true, "authorizedCollections": true}
            ),
            []
        );
        assert_eq!(
            needs("shop", doc! {"noSuchCommand": 1}),
            [(Resource::AnyResource, A::AnyAction)]
        );
    }

    #[test]
    fn a_denied_need_is_denied_and_any_action_covers_everything() {
        let read = builtin_role("read", "shop").unwrap();
        assert!(authorized(&read, &required("shop", &doc! {"find": "o"})));
        assert!(!authorized(&read, &required("shop", &doc! {"insert": "o"})));
        assert!(!authorized(&read, &required("other", &doc! {"find": "o"})));
        let everything = [Privilege {
            resource: Resource::AnyResource,
            actions: [A::AnyAction].into(),
        }];
        assert!(authorized(
            &everything,
            &required("shop", &doc! {"noSuchCommand": 1})
        ));
        assert!(authorized(&[], &[]));
    }
}
