//! MongoDB 7.0's built-in roles (`src/mongo/db/auth/builtin_roles.yml`):
//! what each grants, on which resources, and the roles it includes.

use super::{Action, Privilege, Resource};

use Action as A;

/// The read role's actions.
const READ: &[Action] = &[
    A::ChangeStream,
    A::CollStats,
    A::DbHash,
    A::DbStats,
    A::Find,
    A::KillCursors,
    A::ListCollections,
    A::ListIndexes,
    A::ListSearchIndexes,
    A::PlanCacheRead,
];

/// What readWrite adds to read's actions.
const WRITE: &[Action] = &[
    A::CleanupStructuredEncryptionData,
    A::CompactStructuredEncryptionData,
    A::ConvertToCapped,
    A::CreateCollection,
    A::CreateIndex,
    A::CreateSearchIndexes,
    A::DropCollection,
    A::DropIndex,
    A::DropSearchIndex,
    A::Insert,
    A::Remove,
    A::RenameCollectionSameDb,
    A::Update,
    A::UpdateSearchIndex,
];

const USER_ADMIN: &[Action] = &[
    A::ChangeCustomData,
    A::ChangePassword,
    A::CreateUser,
    A::CreateRole,
    A::DropUser,
    A::DropRole,
    A::GrantRole,
    A::RevokeRole,
    A::SetAuthenticationRestriction,
    A::ViewUser,
    A::ViewRole,
];

const DB_ADMIN: &[Action] = &[
    A::Analyze,
    A::BypassDocumentValidation,
    A::CollMod,
    A::CollStats,
    A::Compact,
    A::ConvertToCapped,
    A::CreateCollection,
    A::DbStats,
    A::DropCollection,
    A::DropDatabase,
    A::DropIndex,
    A::DropSearchIndex,
    A::CreateIndex,
    A::CreateSearchIndexes,
    A::EnableProfiler,
    A::ListCollections,
    A::ListIndexes,
    A::ListSearchIndexes,
    A::UpdateSearchIndex,
    A::PlanCacheIndexFilter,
    A::PlanCacheRead,
    A::PlanCacheWrite,
    A::ReIndex,
    A::RenameCollectionSameDb,
    A::StorageDetails,
    A::Validate,
    A::ConfigureQueryAnalyzer,
];

/// What dbAdmin may do to `system.profile` besides reading it.
const PROFILE_ADMIN: &[Action] = &[A::ConvertToCapped, A::CreateCollection, A::DropCollection];

const SHARDING: &[Action] = &[
    A::AnalyzeShardKey,
    A::EnableSharding,
    A::MoveCollection,
    A::RefineCollectionShardKey,
    A::ReshardCollection,
];

const MONITOR_CLUSTER: &[Action] = &[
    A::ConnPoolStats,
    A::GetCmdLineOpts,
    A::GetDefaultRwConcern,
    A::GetLog,
    A::GetParameter,
    A::GetShardMap,
    A::HostInfo,
    A::ListDatabases,
    A::ListSampledQueries,
    A::ListSessions,
    A::ListShards,
    A::Netstat,
    A::OperationMetrics,
    A::ReplSetGetConfig,
    A::ReplSetGetStatus,
    A::ServerStatus,
    A::Top,
    A::UseUuid,
    A::Inprog,
    A::ShardingState,
    A::AllCollectionStats,
    A::ShardedDataDistribution,
];

const MONITOR_DATABASE: &[Action] = &[
    A::CollStats,
    A::DbStats,
    A::GetDatabaseVersion,
    A::GetShardVersion,
    A::IndexStats,
];

const HOST_MANAGER_CLUSTER: &[Action] = &[
    A::ApplicationMessage,
    A::AuditConfigure,
    A::ConnPoolSync,
    A::DropConnections,
    A::LogRotate,
    A::OidReset,
    A::SetParameter,
    A::Shutdown,
    A::Touch,
    A::Unlock,
    A::FlushRouterConfig,
    A::Fsync,
    A::InvalidateUserCache,
    A::KillAnyCursor,
    A::KillAnySession,
    A::Killop,
    A::ReplSetResizeOplog,
    A::Resync,
    A::TrafficRecord,
    A::RotateCertificates,
    A::OidcListKeys,
    A::OidcRefreshKeys,
];

const CLUSTER_MANAGER_CLUSTER: &[Action] = &[
    A::AppendOplogNote,
    A::ApplicationMessage,
    A::ReplSetConfigure,
    A::ReplSetGetConfig,
    A::ReplSetGetStatus,
    A::ReplSetStateChange,
    A::Resync,
    A::AddShard,
    A::RemoveShard,
    A::ListSessions,
    A::ListShards,
    A::FlushRouterConfig,
    A::CleanupOrphaned,
    A::GetDefaultRwConcern,
    A::RunTenantMigration,
    A::SetDefaultRwConcern,
    A::SetFeatureCompatibilityVersion,
    A::SetClusterParameter,
    A::GetClusterParameter,
    A::SetChangeStreamState,
    A::GetChangeStreamState,
    A::QuerySettings,
    A::QueryStatsRead,
    A::QueryStatsReadTransformed,
    A::CheckMetadataConsistency,
    A::TransitionFromDedicatedConfigServer,
    A::TransitionToDedicatedConfigServer,
];

const CLUSTER_MANAGER_DATABASE: &[Action] = &[
    A::AnalyzeShardKey,
    A::ConfigureQueryAnalyzer,
    A::ClearJumboFlag,
    A::SplitChunk,
    A::MoveChunk,
    A::MoveCollection,
    A::EnableSharding,
    A::SplitVector,
    A::RefineCollectionShardKey,
    A::ReshardCollection,
];

const CONFIG_WRITES: &[Action] = &[A::Insert, A::Update, A::Remove];

const RESTORE_WRITES: &[Action] = &[
    A::BypassDocumentValidation,
    A::CollMod,
    A::ConvertToCapped,
    A::CreateCollection,
    A::CreateIndex,
    A::CreateSearchIndexes,
    A::DropCollection,
    A::Insert,
    A::UpdateSearchIndex,
];

/// What a grant of a built-in role applies to.
#[derive(Clone, Copy)]
enum On {
    Cluster,
    Any,
    /// `{db: "", collection: ""}`.
    AnyNormal,
    /// The database the role is granted on.
    OwnDatabase,
    /// A named database.
    Database(&'static str),
    /// A collection of this name in the role's database.
    OwnCollection(&'static str),
    /// A collection of this name in any database.
    Collection(&'static str),
    /// One collection of one database.
    Exact(&'static str, &'static str),
}

/// Actions on a resource, the union of the lists given.
struct Grant(On, &'static [&'static [Action]]);

/// Another role a built-in role includes: its name and the database it
/// is taken on (`None`: the role's own).
type Includes = (&'static str, Option<&'static str>);

struct BuiltinRole {
    name: &'static str,
    /// Defined on `admin` only.
    admin_only: bool,
    roles: &'static [Includes],
    grants: &'static [Grant],
}

static BUILTIN_ROLES: &[BuiltinRole] = &[
    BuiltinRole {
        name: "read",
        admin_only: false,
        roles: &[],
        grants: &[
            Grant(On::OwnDatabase, &[READ]),
            Grant(On::OwnCollection("system.js"), &[READ]),
        ],
    },
    BuiltinRole {
        name: "readWrite",
        admin_only: false,
        roles: &[],
        grants: &[
            Grant(On::OwnDatabase, &[READ, WRITE]),
            Grant(On::OwnCollection("system.js"), &[READ, WRITE]),
        ],
    },
    BuiltinRole {
        name: "userAdmin",
        admin_only: false,
        roles: &[],
        grants: &[Grant(On::OwnDatabase, &[USER_ADMIN])],
    },
    BuiltinRole {
        name: "dbAdmin",
        admin_only: false,
        roles: &[],
        grants: &[
            Grant(On::OwnDatabase, &[DB_ADMIN]),
            Grant(On::OwnCollection("system.profile"), &[READ, PROFILE_ADMIN]),
        ],
    },
    BuiltinRole {
        name: "dbOwner",
        admin_only: false,
        roles: &[("readWrite", None), ("dbAdmin", None), ("userAdmin", None)],
        grants: &[],
    },
    BuiltinRole {
        name: "enableSharding",
        admin_only: false,
        roles: &[],
        grants: &[Grant(On::AnyNormal, &[SHARDING])],
    },
    BuiltinRole {
        name: "readAnyDatabase",
        admin_only: true,
        roles: &[],
        grants: &[
            Grant(On::AnyNormal, &[READ]),
            Grant(On::Cluster, &[&[A::ListDatabases]]),
            Grant(On::Collection("system.js"), &[READ]),
        ],
    },
    BuiltinRole {
        name: "readWriteAnyDatabase",
        admin_only: true,
        roles: &[("readAnyDatabase", None)],
        grants: &[
            Grant(On::AnyNormal, &[READ, WRITE]),
            Grant(On::Collection("system.js"), &[READ, WRITE]),
        ],
    },
    BuiltinRole {
        name: "userAdminAnyDatabase",
        admin_only: true,
        roles: &[],
        grants: &[
            Grant(On::AnyNormal, &[USER_ADMIN, &[A::ListCachedAndActiveUsers]]),
            Grant(On::Database("local"), &[USER_ADMIN]),
            Grant(On::Database("config"), &[USER_ADMIN]),
            Grant(
                On::Cluster,
                &[&[
                    A::ListDatabases,
                    A::AuthSchemaUpgrade,
                    A::InvalidateUserCache,
                    A::ViewUser,
                ]],
            ),
            Grant(
                On::Exact("admin", "system.users"),
                &[
                    READ,
                    &[
                        A::CreateIndex,
                        A::CreateSearchIndexes,
                        A::DropIndex,
                        A::DropSearchIndex,
                    ],
                ],
            ),
            Grant(
                On::Exact("admin", "system.roles"),
                &[
                    READ,
                    &[
                        A::CreateIndex,
                        A::CreateSearchIndexes,
                        A::DropIndex,
                        A::DropSearchIndex,
                    ],
                ],
            ),
            Grant(On::Collection("system.users"), &[READ]),
            Grant(On::Exact("admin", "system.version"), &[READ]),
        ],
    },
    BuiltinRole {
        name: "dbAdminAnyDatabase",
        admin_only: true,
        roles: &[],
        grants: &[
            Grant(On::Cluster, &[&[A::ListDatabases, A::ApplyOps]]),
            Grant(On::AnyNormal, &[DB_ADMIN]),
            Grant(On::Collection("system.profile"), &[READ, PROFILE_ADMIN]),
        ],
    },
    BuiltinRole {
        name: "clusterMonitor",
        admin_only: true,
        roles: &[("read", Some("config")), ("read", Some("local"))],
        grants: &[
            Grant(On::Cluster, &[MONITOR_CLUSTER]),
            Grant(On::AnyNormal, &[MONITOR_DATABASE]),
            Grant(On::Database("config"), &[MONITOR_DATABASE]),
            Grant(On::Exact("config", "system.sessions"), &[MONITOR_DATABASE]),
            Grant(On::Database("local"), &[MONITOR_DATABASE]),
            Grant(On::Collection("system.profile"), &[&[A::Find]]),
        ],
    },
    BuiltinRole {
        name: "hostManager",
        admin_only: true,
        roles: &[],
        grants: &[
            Grant(On::Cluster, &[HOST_MANAGER_CLUSTER]),
            Grant(On::AnyNormal, &[&[A::KillCursors]]),
        ],
    },
    BuiltinRole {
        name: "clusterManager",
        admin_only: true,
        roles: &[("read", Some("config"))],
        grants: &[
            Grant(On::Cluster, &[CLUSTER_MANAGER_CLUSTER]),
            Grant(On::AnyNormal, &[CLUSTER_MANAGER_DATABASE]),
            Grant(
                On::Database("config"),
                &[CLUSTER_MANAGER_DATABASE, CONFIG_WRITES],
            ),
            Grant(
                On::Database("local"),
                &[CLUSTER_MANAGER_DATABASE, CONFIG_WRITES],
            ),
            Grant(On::Any, &[&[A::DbCheck]]),
        ],
    },
    BuiltinRole {
        name: "clusterAdmin",
        admin_only: true,
        roles: &[
            ("clusterMonitor", None),
            ("hostManager", None),
            ("clusterManager", None),
        ],
        grants: &[
            Grant(On::AnyNormal, &[&[A::DropDatabase]]),
            Grant(On::Any, &[&[A::ImportCollection, A::ExportCollection]]),
        ],
    },
    BuiltinRole {
        name: "__queryableBackup",
        admin_only: true,
        roles: &[],
        grants: &[
            Grant(
                On::Any,
                &[&[
                    A::CollStats,
                    A::ListCollections,
                    A::ListIndexes,
                    A::ListSearchIndexes,
                ]],
            ),
            Grant(On::AnyNormal, &[&[A::Find]]),
            Grant(
                On::Cluster,
                &[&[A::GetParameter, A::ListDatabases, A::UseUuid]],
            ),
            Grant(On::Database("config"), &[&[A::Find]]),
            Grant(On::Database("local"), &[&[A::Find]]),
            Grant(On::Collection("system.js"), &[&[A::Find]]),
            Grant(On::Collection("system.users"), &[&[A::Find]]),
            Grant(On::Collection("system.profile"), &[&[A::Find]]),
            Grant(On::Exact("admin", "system.roles"), &[&[A::Find]]),
            Grant(On::Exact("admin", "system.version"), &[&[A::Find]]),
            Grant(On::Exact("config", "settings"), &[&[A::Find]]),
        ],
    },
    BuiltinRole {
        name: "backup",
        admin_only: true,
        roles: &[("__queryableBackup", None)],
        grants: &[
            Grant(
                On::Cluster,
                &[&[
                    A::AppendOplogNote,
                    A::ServerStatus,
                    A::SetUserWriteBlockMode,
                ]],
            ),
            Grant(On::Exact("config", "settings"), &[&[A::Insert, A::Update]]),
        ],
    },
    BuiltinRole {
        name: "restore",
        admin_only: true,
        roles: &[],
        grants: &[
            Grant(
                On::Cluster,
                &[&[
                    A::GetParameter,
                    A::ForceUuid,
                    A::UseUuid,
                    A::BypassWriteBlockingMode,
                    A::SetUserWriteBlockMode,
                    A::ApplyOps,
                ]],
            ),
            Grant(On::Database("local"), &[RESTORE_WRITES]),
            Grant(On::Database("config"), &[RESTORE_WRITES]),
            Grant(On::Any, &[&[A::ListCollections]]),
            Grant(On::AnyNormal, &[RESTORE_WRITES, USER_ADMIN]),
            Grant(On::Collection("system.js"), &[RESTORE_WRITES]),
            Grant(
                On::Exact("admin", "system.version"),
                &[RESTORE_WRITES, &[A::Find]],
            ),
            Grant(
                On::Collection("system.users"),
                &[RESTORE_WRITES, &[A::Find, A::Update, A::Remove]],
            ),
            Grant(On::Exact("admin", "system.roles"), &[&[A::CreateIndex]]),
        ],
    },
    BuiltinRole {
        name: "root",
        admin_only: true,
        roles: &[
            ("clusterAdmin", None),
            ("userAdminAnyDatabase", None),
            ("dbAdminAnyDatabase", None),
            ("readWriteAnyDatabase", None),
            ("backup", None),
            ("restore", None),
            ("directShardOperations", None),
        ],
        grants: &[
            Grant(On::Any, &[&[A::Validate]]),
            Grant(On::Cluster, &[&[A::UseTenant]]),
        ],
    },
    BuiltinRole {
        name: "directShardOperations",
        admin_only: true,
        roles: &[],
        grants: &[Grant(On::Cluster, &[&[A::IssueDirectShardOperations]])],
    },
];

/// The built-in roles every database has.
const DATABASE_ROLES: &[&str] = &[
    "dbAdmin",
    "dbOwner",
    "enableSharding",
    "read",
    "readWrite",
    "userAdmin",
];

/// The built-in roles of `admin`: the database roles and the admin-only
/// ones, sorted.
const ADMIN_ROLES: &[&str] = &[
    "backup",
    "clusterAdmin",
    "clusterManager",
    "clusterMonitor",
    "dbAdmin",
    "dbAdminAnyDatabase",
    "dbOwner",
    "directShardOperations",
    "enableSharding",
    "hostManager",
    "read",
    "readAnyDatabase",
    "readWrite",
    "readWriteAnyDatabase",
    "restore",
    "root",
    "userAdmin",
    "userAdminAnyDatabase",
];

/// The built-in role names defined on `db`, sorted (`rolesInfo` with
/// `showBuiltinRoles`).
pub fn builtin_role_names(db: &str) -> &'static [&'static str] {
    if db == "admin" {
        ADMIN_ROLES
    } else {
        DATABASE_ROLES
    }
}

/// Whether `role` on `db` is a built-in role (so no custom role may take
/// its name there).
pub fn is_builtin_role(role: &str, db: &str) -> bool {
    builtin_role_names(db).contains(&role)
}

/// The privileges of built-in role `role` defined on `db` (`("readWrite",
/// "shop")`, `("root", "admin")`), including the roles it includes, one
/// privilege per resource; `None` if `db` has no built-in role by that
/// name.
pub fn builtin_role(role: &str, db: &str) -> Option<Vec<Privilege>> {
    if !is_builtin_role(role, db) {
        return None;
    }
    let mut out = Vec::new();
    collect_role(role, db, &mut out);
    Some(out)
}

/// Adds the privileges of `role` on `db` to `out`, merging resources.
fn collect_role(role: &str, db: &str, out: &mut Vec<Privilege>) {
    let Some(def) = BUILTIN_ROLES.iter().find(|r| r.name == role) else {
        return;
    };
    if def.admin_only && db != "admin" {
        return;
    }
    for (included, on) in def.roles {
        collect_role(included, on.unwrap_or(db), out);
    }
    for Grant(on, lists) in def.grants {
        let resource = match *on {
            On::Cluster => Resource::Cluster,
            On::Any => Resource::AnyResource,
            On::AnyNormal => Resource::database(""),
            On::OwnDatabase => Resource::database(db),
            On::Database(name) => Resource::database(name),
            On::OwnCollection(coll) => Resource::collection(db, coll),
            On::Collection(coll) => Resource::collection("", coll),
            On::Exact(d, coll) => Resource::collection(d, coll),
        };
        let actions = lists.iter().flat_map(|l| l.iter().copied());
        match out.iter_mut().find(|p| p.resource == resource) {
            Some(p) => p.actions.extend(actions),
            None => out.push(Privilege {
                resource,
                actions: actions.collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::authorized;
    use super::*;

    fn has(role: &str, db: &str, resource: Resource, action: Action) -> bool {
        let held = builtin_role(role, db).expect("a built-in role");
        authorized(&held, &[(resource, action)])
    }

    #[test]
    fn builtin_roles_grant_what_their_names_say() {
        let orders = || Resource::collection("shop", "orders");
        assert!(has("read", "shop", orders(), A::Find));
        assert!(!has("read", "shop", orders(), A::Insert));
        assert!(!has(
            "read",
            "shop",
            Resource::collection("other", "x"),
            A::Find
        ));
        assert!(has("readWrite", "shop", orders(), A::Insert));
        assert!(has("readWrite", "shop", orders(), A::Remove));
        assert!(!has(
            "readWrite",
            "shop",
            Resource::database("shop"),
            A::DropDatabase
        ));
        assert!(has("dbAdmin", "shop", orders(), A::CreateIndex));
        assert!(!has("dbAdmin", "shop", orders(), A::Find));
        assert!(has(
            "dbAdmin",
            "shop",
            Resource::collection("shop", "system.profile"),
            A::Find
        ));
        assert!(has(
            "userAdmin",
            "shop",
            Resource::database("shop"),
            A::CreateUser
        ));
        assert!(!has("userAdmin", "shop", orders(), A::Find));
        assert!(has("dbOwner", "shop", orders(), A::Find));
        assert!(has(
            "dbOwner",
            "shop",
            Resource::database("shop"),
            A::CreateUser
        ));
        assert!(has(
            "dbOwner",
            "shop",
            Resource::database("shop"),
            A::DropDatabase
        ));
        assert!(has("readAnyDatabase", "admin", orders(), A::Find));
        assert!(has(
            "readAnyDatabase",
            "admin",
            Resource::Cluster,
            A::ListDatabases
        ));
        assert!(!has("readAnyDatabase", "admin", orders(), A::Update));
        assert!(has("readWriteAnyDatabase", "admin", orders(), A::Update));
        assert!(has(
            "clusterMonitor",
            "admin",
            Resource::Cluster,
            A::ServerStatus
        ));
        assert!(!has("clusterMonitor", "admin", orders(), A::Find));
        assert!(has(
            "clusterMonitor",
            "admin",
            Resource::collection("config", "chunks"),
            A::Find
        ));
        assert!(has("clusterAdmin", "admin", Resource::Cluster, A::Killop));
        assert!(has("clusterAdmin", "admin", Resource::Cluster, A::AddShard));
        assert!(has(
            "clusterAdmin",
            "admin",
            Resource::database("shop"),
            A::DropDatabase
        ));
        assert!(!has("clusterAdmin", "admin", orders(), A::Find));
        assert!(has("root", "admin", orders(), A::Find));
        assert!(has("root", "admin", Resource::Cluster, A::Shutdown));
        assert!(has(
            "root",
            "admin",
            Resource::database("shop"),
            A::CreateUser
        ));
        assert!(has(
            "root",
            "admin",
            Resource::collection("shop", "system.profile"),
            A::Validate
        ));
        assert!(has("backup", "admin", orders(), A::Find));
        assert!(!has("backup", "admin", orders(), A::Insert));
        assert!(has("restore", "admin", orders(), A::Insert));
        assert!(!has("restore", "admin", orders(), A::Find));
    }

    #[test]
    fn admin_only_roles_exist_only_on_admin() {
        assert!(builtin_role("root", "shop").is_none());
        assert!(builtin_role("clusterMonitor", "shop").is_none());
        assert!(builtin_role("read", "admin").is_some());
        assert!(builtin_role("nosuch", "admin").is_none());
        assert!(builtin_role("__queryableBackup", "admin").is_none());
        for db in ["admin", "shop"] {
            let names = builtin_role_names(db);
            assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
            for name in names {
                assert!(builtin_role(name, db).is_some(), "{name} on {db}");
            }
        }
    }
}
