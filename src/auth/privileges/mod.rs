//! Actions, resources and privileges, as MongoDB's authorization model
//! defines them: the built-in roles' privileges, what each command needs,
//! and whether a set of privileges covers a need.
//!
//! A privilege is a resource pattern and a set of actions. The patterns
//! are mongod's: `{cluster: true}`, `{anyResource: true}` and
//! `{db, collection}` with `""` as a wildcard, so `{db: "shop",
//! collection: ""}` is the database and every normal collection in it,
//! `{db: "", collection: "orders"}` an `orders` collection in any
//! database and `{db: "", collection: ""}` every normal collection. A
//! collection whose name starts with `system.` is not normal: only a
//! pattern naming it (or `anyResource`) covers it.
//!
//! The built-in roles follow MongoDB 7.0's definitions
//! (`src/mongo/db/auth/builtin_roles.yml`), less the actions of features
//! Shardgate does not have (queryable encryption, search indexes, …),
//! which are kept so that a privilege naming them still parses.

use std::collections::BTreeSet;

use bson::{doc, Bson, Document};

use crate::error::Result;
use crate::{bail, err};

mod needs;
mod roles;

pub use needs::{knows, open_to_everyone, required};
pub use roles::{builtin_role, builtin_role_names, is_builtin_role};

macro_rules! actions {
    ($($variant:ident => $name:literal,)*) => {
        /// One of MongoDB's action types (`ActionType`).
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub enum Action {
            $($variant,)*
        }

        impl Action {
            /// Every action, in the order declared.
            pub const ALL: &'static [Action] = &[$(Action::$variant,)*];

            /// Its name as privileges spell it (`"find"`, `"createIndex"`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Action::$variant => $name,)*
                }
            }

            /// The action a privilege names, if MongoDB has one by that name.
            pub fn parse(name: &str) -> Option<Action> {
                match name {
                    $($name => Some(Action::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

actions! {
    AddShard => "addShard",
    AllCollectionStats => "allCollectionStats",
    Analyze => "analyze",
    AnalyzeShardKey => "analyzeShardKey",
    AnyAction => "anyAction",
    AppendOplogNote => "appendOplogNote",
    ApplicationMessage => "applicationMessage",
    ApplyOps => "applyOps",
    AuditConfigure => "auditConfigure",
    AuthSchemaUpgrade => "authSchemaUpgrade",
    BypassDocumentValidation => "bypassDocumentValidation",
    BypassWriteBlockingMode => "bypassWriteBlockingMode",
    ChangeCustomData => "changeCustomData",
    ChangeOwnCustomData => "changeOwnCustomData",
    ChangeOwnPassword => "changeOwnPassword",
    ChangePassword => "changePassword",
    ChangeStream => "changeStream",
    CheckMetadataConsistency => "checkMetadataConsistency",
    CleanupOrphaned => "cleanupOrphaned",
    CleanupStructuredEncryptionData => "cleanupStructuredEncryptionData",
    ClearJumboFlag => "clearJumboFlag",
    CollMod => "collMod",
    CollStats => "collStats",
    Compact => "compact",
    CompactStructuredEncryptionData => "compactStructuredEncryptionData",
    ConfigureQueryAnalyzer => "configureQueryAnalyzer",
    ConnPoolStats => "connPoolStats",
    ConnPoolSync => "connPoolSync",
    ConvertToCapped => "convertToCapped",
    CreateCollection => "createCollection",
    CreateIndex => "createIndex",
    CreateRole => "createRole",
    CreateSearchIndexes => "createSearchIndexes",
    CreateUser => "createUser",
    DbCheck => "dbCheck",
    DbHash => "dbHash",
    DbStats => "dbStats",
    DropCollection => "dropCollection",
    DropConnections => "dropConnections",
    DropDatabase => "dropDatabase",
    DropIndex => "dropIndex",
    DropRole => "dropRole",
    DropSearchIndex => "dropSearchIndex",
    DropUser => "dropUser",
    EnableProfiler => "enableProfiler",
    EnableSharding => "enableSharding",
    ExportCollection => "exportCollection",
    Find => "find",
    FlushRouterConfig => "flushRouterConfig",
    ForceUuid => "forceUUID",
    Fsync => "fsync",
    GetClusterParameter => "getClusterParameter",
    GetChangeStreamState => "getChangeStreamState",
    GetCmdLineOpts => "getCmdLineOpts",
    GetDatabaseVersion => "getDatabaseVersion",
    GetDefaultRwConcern => "getDefaultRWConcern",
    GetLog => "getLog",
    GetParameter => "getParameter",
    GetShardMap => "getShardMap",
    GetShardVersion => "getShardVersion",
    GrantRole => "grantRole",
    HostInfo => "hostInfo",
    ImportCollection => "importCollection",
    IndexStats => "indexStats",
    Inprog => "inprog",
    Insert => "insert",
    InvalidateUserCache => "invalidateUserCache",
    IssueDirectShardOperations => "issueDirectShardOperations",
    KillAnyCursor => "killAnyCursor",
    KillAnySession => "killAnySession",
    KillCursors => "killCursors",
    Killop => "killop",
    ListCachedAndActiveUsers => "listCachedAndActiveUsers",
    ListCollections => "listCollections",
    ListDatabases => "listDatabases",
    ListIndexes => "listIndexes",
    ListSampledQueries => "listSampledQueries",
    ListSearchIndexes => "listSearchIndexes",
    ListSessions => "listSessions",
    ListShards => "listShards",
    LogRotate => "logRotate",
    MoveChunk => "moveChunk",
    MoveCollection => "moveCollection",
    Netstat => "netstat",
    OidReset => "oidReset",
    OidcListKeys => "oidcListKeys",
    OidcRefreshKeys => "oidcRefreshKeys",
    OperationMetrics => "operationMetrics",
    PlanCacheIndexFilter => "planCacheIndexFilter",
    PlanCacheRead => "planCacheRead",
    PlanCacheWrite => "planCacheWrite",
    QuerySettings => "querySettings",
    QueryStatsRead => "queryStatsRead",
    QueryStatsReadTransformed => "queryStatsReadTransformed",
    ReIndex => "reIndex",
    RefineCollectionShardKey => "refineCollectionShardKey",
    Remove => "remove",
    RemoveShard => "removeShard",
    RenameCollectionSameDb => "renameCollectionSameDB",
    ReplSetConfigure => "replSetConfigure",
    ReplSetGetConfig => "replSetGetConfig",
    ReplSetGetStatus => "replSetGetStatus",
    ReplSetResizeOplog => "replSetResizeOplog",
    ReplSetStateChange => "replSetStateChange",
    ReshardCollection => "reshardCollection",
    Resync => "resync",
    RevokeRole => "revokeRole",
    RotateCertificates => "rotateCertificates",
    RunTenantMigration => "runTenantMigration",
    ServerStatus => "serverStatus",
    SetAuthenticationRestriction => "setAuthenticationRestriction",
    SetChangeStreamState => "setChangeStreamState",
    SetClusterParameter => "setClusterParameter",
    SetDefaultRwConcern => "setDefaultRWConcern",
    SetFeatureCompatibilityVersion => "setFeatureCompatibilityVersion",
    SetParameter => "setParameter",
    SetUserWriteBlockMode => "setUserWriteBlockMode",
    ShardedDataDistribution => "shardedDataDistribution",
    ShardingState => "shardingState",
    Shutdown => "shutdown",
    SplitChunk => "splitChunk",
    SplitVector => "splitVector",
    StorageDetails => "storageDetails",
    Top => "top",
    Touch => "touch",
    TrafficRecord => "trafficRecord",
    TransitionFromDedicatedConfigServer => "transitionFromDedicatedConfigServer",
    TransitionToDedicatedConfigServer => "transitionToDedicatedConfigServer",
    Unlock => "unlock",
    Update => "update",
    UpdateSearchIndex => "updateSearchIndex",
    UseTenant => "useTenant",
    UseUuid => "useUUID",
    Validate => "validate",
    ViewRole => "viewRole",
    ViewUser => "viewUser",
}

/// A resource a privilege names, or one a command needs.
///
/// In a privilege `Namespace`'s empty strings are wildcards (see the
/// module doc). In a need, `Namespace { db, collection: "" }` is the
/// database itself (what `dbStats` or `listCollections` act on), and a
/// collection is always named.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Resource {
    Cluster,
    AnyResource,
    Namespace { db: String, collection: String },
}

impl Resource {
    /// A database, or a pattern for every normal collection in it.
    pub fn database(db: &str) -> Resource {
        Resource::Namespace {
            db: db.to_string(),
            collection: String::new(),
        }
    }

    /// One collection.
    pub fn collection(db: &str, collection: &str) -> Resource {
        Resource::Namespace {
            db: db.to_string(),
            collection: collection.to_string(),
        }
    }

    /// Reads `{cluster: true}`, `{anyResource: true}` or `{db, collection}`
    /// (both strings), as `createRole` and `grantPrivilegesToRole` take it.
    pub fn from_bson(d: &Document) -> Result<Resource> {
        let bad = || {
            err!(
                BadValue,
                "resource must be {{cluster: true}}, {{anyResource: true}} or \
                 {{db: <string>, collection: <string>}}, not {d}"
            )
        };
        if d.len() == 1 {
            match d.iter().next() {
                Some((k, Bson::Boolean(true))) if k == "cluster" => return Ok(Resource::Cluster),
                Some((k, Bson::Boolean(true))) if k == "anyResource" => {
                    return Ok(Resource::AnyResource)
                }
                _ => {}
            }
        }
        if d.len() != 2 {
            return Err(bad());
        }
        match (d.get("db"), d.get("collection")) {
            (Some(Bson::String(db)), Some(Bson::String(collection))) => Ok(Resource::Namespace {
                db: db.clone(),
                collection: collection.clone(),
            }),
            _ => Err(bad()),
        }
    }

    /// The document `from_bson` reads.
    pub fn to_bson(&self) -> Document {
        match self {
            Resource::Cluster => doc! {"cluster": true},
            Resource::AnyResource => doc! {"anyResource": true},
            Resource::Namespace { db, collection } => doc! {"db": db, "collection": collection},
        }
    }

    /// Whether this pattern covers `target`, a resource a command needs.
    pub fn covers(&self, target: &Resource) -> bool {
        match (self, target) {
            (Resource::AnyResource, _) => true,
            (Resource::Cluster, Resource::Cluster) => true,
            (
                Resource::Namespace {
                    db: pdb,
                    collection: pcoll,
                },
                Resource::Namespace { db, collection },
            ) => {
                if collection.is_empty() {
                    // The database itself: a database pattern, or any
                    // normal collection's.
                    pcoll.is_empty() && (pdb.is_empty() || pdb == db)
                } else {
                    let db_matches = pdb.is_empty() || pdb == db;
                    let coll_matches = if pcoll.is_empty() {
                        is_normal(collection)
                    } else {
                        pcoll == collection
                    };
                    db_matches && coll_matches
                }
            }
            _ => false,
        }
    }
}

/// A normal collection, one a database-wide pattern covers: not
/// `system.*`.
fn is_normal(collection: &str) -> bool {
    !collection.starts_with("system.")
}

/// A resource and the actions allowed on it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Privilege {
    pub resource: Resource,
    pub actions: BTreeSet<Action>,
}

impl Privilege {
    /// Reads `{resource: {...}, actions: ["find", ...]}`.
    pub fn from_bson(d: &Document) -> Result<Privilege> {
        let resource = match d.get("resource") {
            Some(Bson::Document(r)) => Resource::from_bson(r)?,
            _ => bail!(
                FailedToParse,
                "a privilege needs a resource document, not {d}"
            ),
        };
        let Some(Bson::Array(names)) = d.get("actions") else {
            bail!(
                FailedToParse,
                "a privilege needs an array of actions, not {d}"
            );
        };
        let mut actions = BTreeSet::new();
        for name in names {
            let Bson::String(name) = name else {
                bail!(FailedToParse, "an action must be a string, not {name}");
            };
            match Action::parse(name) {
                Some(a) => actions.insert(a),
                None => bail!(
                    FailedToParse,
                    "Unrecognized action privilege string: {name}"
                ),
            };
        }
        if let Some(extra) = d.keys().find(|k| *k != "resource" && *k != "actions") {
            bail!(
                FailedToParse,
                "a privilege has only resource and actions, not {extra}"
            );
        }
        Ok(Privilege { resource, actions })
    }

    /// `{resource, actions}` with the actions sorted by name, as mongod
    /// lists them.
    pub fn to_bson(&self) -> Document {
        let mut names: Vec<&str> = self.actions.iter().map(|a| a.name()).collect();
        names.sort_unstable();
        doc! {"resource": self.resource.to_bson(), "actions": names}
    }
}

/// Whether `held` covers every one of `needed`.
pub fn authorized(held: &[Privilege], needed: &[(Resource, Action)]) -> bool {
    needed.iter().all(|(resource, action)| {
        held.iter().any(|p| {
            (p.actions.contains(action) || p.actions.contains(&Action::AnyAction))
                && p.resource.covers(resource)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_name_parses_back() {
        for &a in Action::ALL {
            assert_eq!(Action::parse(a.name()), Some(a));
        }
        assert_eq!(Action::parse("fly"), None);
    }

    #[test]
    fn patterns_cover_as_mongod_matches_them() {
        let shop_orders = Resource::collection("shop", "orders");
        let shop = Resource::database("shop");
        let profile = Resource::collection("shop", "system.profile");
        assert!(Resource::database("shop").covers(&shop_orders));
        assert!(Resource::database("shop").covers(&shop));
        assert!(!Resource::database("shop").covers(&profile));
        assert!(!Resource::database("shop").covers(&Resource::collection("other", "orders")));
        assert!(Resource::database("").covers(&shop_orders));
        assert!(Resource::database("").covers(&shop));
        assert!(!Resource::database("").covers(&profile));
        assert!(Resource::collection("", "orders").covers(&shop_orders));
        assert!(!Resource::collection("", "orders").covers(&shop));
        assert!(Resource::collection("shop", "system.profile").covers(&profile));
        assert!(!Resource::Cluster.covers(&shop));
        assert!(!Resource::database("").covers(&Resource::Cluster));
        assert!(Resource::AnyResource.covers(&Resource::Cluster));
        assert!(Resource::AnyResource.covers(&profile));
    }

    #[test]
    fn resources_and_privileges_read_what_they_write() {
        for r in [
            Resource::Cluster,
            Resource::AnyResource,
            Resource::collection("shop", ""),
            Resource::collection("", "orders"),
        ] {
            assert_eq!(Resource::from_bson(&r.to_bson()).unwrap(), r);
        }
        let p = Privilege::from_bson(&doc! {
            "resource": {"db": "shop", "collection": "orders"},
            "actions": ["update", "find"],
        })
        .unwrap();
        assert_eq!(
            p.to_bson(),
            doc! {"resource": {"db": "shop", "collection": "orders"}, "actions": ["find", "update"]}
        );
        for bad in [
            doc! {"resource": {"db": "shop"}, "actions": ["find"]},
            doc! {"resource": {"cluster": false}, "actions": ["find"]},
            doc! {"resource": {"db": 1, "collection": ""}, "actions": ["find"]},
            doc! {"resource": {"cluster": true}, "actions": ["fly"]},
            doc! {"resource": {"cluster": true}, "actions": "find"},
            doc! {"resource": {"cluster": true}, "actions": [], "x": 1},
        ] {
            assert!(Privilege::from_bson(&bad).is_err(), "{bad}");
        }
        let e = Privilege::from_bson(&doc! {"resource": {"cluster": true}, "actions": ["fly"]})
            .unwrap_err();
        assert_eq!(e.message, "Unrecognized action privilege string: fly");
    }
}
