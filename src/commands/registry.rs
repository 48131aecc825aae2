//! The table of commands: name → handler. Sorted by name; `lookup`
//! searches it and `listCommands` prints it. It names every handler, so it
//! sits above them all; only the dispatch in `mod.rs` imports it.

use bson::{doc, Document};

use super::request::{CommandReply, Handler, Request};
use super::{
    admin, aggregate, auth, capped, catalog, coll_mod, count, current_op, custom_action, delete,
    distinct, explain, find, find_and_modify, handshake, indexes, insert, map_reduce, parameters,
    profile, request_statistics, roles, sessions, sharding, update, users,
};
use crate::error::Result;

pub struct CommandEntry {
    pub name: &'static str,
    pub handler: Handler,
    /// Runs only against the `admin` database.
    pub admin_only: bool,
    pub help: &'static str,
}

macro_rules! command {
    ($name:literal, $f:path, $admin:expr, $help:literal) => {
        CommandEntry {
            name: $name,
            handler: |req| Box::pin(async move { $f(req).await.map(CommandReply::from) }),
            admin_only: $admin,
            help: $help,
        }
    };
}

/// Every command, sorted by name.
pub static COMMANDS: &[CommandEntry] = &[
    command!(
        "abortTransaction",
        sessions::abort_transaction,
        true,
        "abort a transaction"
    ),
    command!(
        "addShard",
        sharding::add_shard,
        true,
        "add a server to the fleet"
    ),
    command!(
        "aggregate",
        aggregate::run,
        false,
        "run an aggregation pipeline"
    ),
    command!(
        "authenticate",
        auth::authenticate,
        false,
        "log in without a SASL conversation"
    ),
    command!(
        "balancerStatus",
        sharding::balancer_status,
        true,
        "balancer state"
    ),
    command!(
        "buildInfo",
        admin::build_info,
        false,
        "server version and build"
    ),
    command!("buildinfo", admin::build_info, false, "alias of buildInfo"),
    command!(
        "cloneCollectionAsCapped",
        capped::clone_collection_as_capped,
        false,
        "copy a collection into a new capped one"
    ),
    command!(
        "collMod",
        coll_mod::run,
        false,
        "change a collection's validator or an index's options"
    ),
    command!(
        "collStats",
        catalog::coll_stats,
        false,
        "collection statistics"
    ),
    command!(
        "commitTransaction",
        sessions::commit_transaction,
        true,
        "commit a transaction"
    ),
    command!(
        "configureFailPoint",
        admin::configure_fail_point,
        true,
        "set a fail point (--enable-test-commands)"
    ),
    command!(
        "connectionStatus",
        auth::connection_status,
        false,
        "authenticated users"
    ),
    command!(
        "convertToCapped",
        capped::convert_to_capped,
        false,
        "make a collection capped"
    ),
    command!("count", count::run, false, "count documents"),
    command!("create", catalog::create, false, "create a collection"),
    command!(
        "createIndexes",
        indexes::create_indexes,
        false,
        "create indexes"
    ),
    command!("createRole", roles::create_role, false, "create a role"),
    command!("createUser", users::create_user, false, "create a user"),
    command!(
        "currentOp",
        current_op::current_op,
        true,
        "the operations running now"
    ),
    command!(
        "customAction",
        custom_action::custom_action,
        false,
        "Cosmos DB custom commands"
    ),
    command!("dbStats", catalog::db_stats, false, "database statistics"),
    command!("delete", delete::run, false, "delete documents"),
    command!(
        "distinct",
        distinct::run,
        false,
        "distinct values of a field"
    ),
    command!("drop", catalog::drop, false, "drop a collection"),
    command!(
        "dropAllRolesFromDatabase",
        roles::drop_all_roles_from_database,
        false,
        "drop the database's roles"
    ),
    command!(
        "dropAllUsersFromDatabase",
        users::drop_all_users_from_database,
        false,
        "drop the database's users"
    ),
    command!(
        "dropDatabase",
        catalog::drop_database,
        false,
        "drop a database"
    ),
    command!("dropIndexes", indexes::drop_indexes, false, "drop indexes"),
    command!("dropRole", roles::drop_role, false, "drop a role"),
    command!("dropUser", users::drop_user, false, "drop a user"),
    command!(
        "enableSharding",
        sharding::enable_sharding,
        true,
        "allow sharding in a database"
    ),
    command!(
        "endSessions",
        sessions::end_sessions,
        false,
        "end logical sessions"
    ),
    command!(
        "explain",
        explain::run,
        false,
        "how a query is routed and run"
    ),
    command!("find", find::find, false, "query documents"),
    command!(
        "findAndModify",
        find_and_modify::run,
        false,
        "update or remove one document and return it"
    ),
    command!(
        "findandmodify",
        find_and_modify::run,
        false,
        "alias of findAndModify"
    ),
    command!(
        "fsync",
        parameters::fsync,
        true,
        "make every write so far durable"
    ),
    command!(
        "getCmdLineOpts",
        admin::get_cmd_line_opts,
        true,
        "command-line options"
    ),
    command!(
        "getLastRequestStatistics",
        request_statistics::run,
        false,
        "the request charge of the last operation on this connection"
    ),
    command!("getLog", admin::get_log, true, "recent log lines"),
    command!("getMore", find::get_more, false, "next batch of a cursor"),
    command!(
        "getParameter",
        parameters::get_parameter,
        true,
        "server parameters"
    ),
    command!(
        "grantPrivilegesToRole",
        roles::change_privileges,
        false,
        "add privileges to a role"
    ),
    command!(
        "grantRolesToRole",
        roles::change_inherited,
        false,
        "make a role inherit roles"
    ),
    command!(
        "grantRolesToUser",
        users::change_roles,
        false,
        "grant roles to a user"
    ),
    command!("hello", handshake::hello, false, "handshake"),
    command!("hostInfo", admin::host_info, false, "host information"),
    command!("insert", insert::run, false, "insert documents"),
    command!("isMaster", handshake::hello, false, "legacy handshake"),
    command!("ismaster", handshake::hello, false, "legacy handshake"),
    command!("killCursors", find::kill_cursors, false, "close cursors"),
    command!(
        "killOp",
        current_op::kill_op,
        true,
        "stop a running operation"
    ),
    command!(
        "killSessions",
        sessions::end_sessions,
        false,
        "kill logical sessions"
    ),
    command!(
        "listCollections",
        catalog::list_collections,
        false,
        "list collections"
    ),
    command!("listCommands", list_commands, false, "list commands"),
    command!(
        "listDatabases",
        catalog::list_databases,
        true,
        "list databases"
    ),
    command!("listIndexes", indexes::list_indexes, false, "list indexes"),
    command!(
        "listShards",
        sharding::list_shards,
        true,
        "list partitions as shards"
    ),
    command!("logout", auth::logout, false, "log out"),
    command!(
        "mapReduce",
        map_reduce::run,
        false,
        "map, reduce and finalize with JavaScript"
    ),
    command!("mapreduce", map_reduce::run, false, "alias of mapReduce"),
    command!(
        "moveChunk",
        sharding::move_chunk,
        true,
        "move a partition to another server"
    ),
    command!(
        "moveRange",
        sharding::move_range,
        true,
        "move a partition to another server"
    ),
    command!("ping", admin::ok, false, "check the server answers"),
    command!(
        "profile",
        profile::profile,
        false,
        "the database's profiling level"
    ),
    command!("refreshSessions", admin::ok, false, "keep sessions alive"),
    command!(
        "removeShard",
        sharding::remove_shard,
        true,
        "drain a server and remove it from the fleet"
    ),
    command!(
        "renameCollection",
        catalog::rename_collection,
        true,
        "rename a collection"
    ),
    command!(
        "revokePrivilegesFromRole",
        roles::change_privileges,
        false,
        "remove privileges from a role"
    ),
    command!(
        "revokeRolesFromRole",
        roles::change_inherited,
        false,
        "stop a role inheriting roles"
    ),
    command!(
        "revokeRolesFromUser",
        users::change_roles,
        false,
        "revoke roles from a user"
    ),
    command!("rolesInfo", roles::roles_info, false, "describe roles"),
    command!(
        "saslContinue",
        auth::sasl_continue,
        false,
        "next step of a SASL login"
    ),
    command!(
        "saslStart",
        auth::sasl_start_command,
        false,
        "first step of a SASL login"
    ),
    command!("serverStatus", admin::server_status, false, "server status"),
    command!(
        "setParameter",
        parameters::set_parameter,
        true,
        "change a server parameter"
    ),
    command!(
        "shardCollection",
        sharding::shard_collection,
        true,
        "partition a collection by a hashed key"
    ),
    command!(
        "startSession",
        admin::start_session,
        false,
        "start a logical session"
    ),
    command!("top", current_op::top, true, "time per collection"),
    command!("update", update::run, false, "update documents"),
    command!(
        "updateRole",
        roles::update_role,
        false,
        "replace a role's privileges or roles"
    ),
    command!(
        "updateUser",
        users::update_user,
        false,
        "change a user's password, roles or data"
    ),
    command!("usersInfo", users::users_info, false, "describe users"),
    command!(
        "validate",
        indexes::validate,
        false,
        "check a collection and its indexes"
    ),
    command!(
        "whatsmyuri",
        admin::whats_my_uri,
        false,
        "the client's address"
    ),
];

pub fn lookup(name: &str) -> Option<&'static CommandEntry> {
    position(name).map(|(_, entry)| entry)
}

/// The entry of command `name` and its index in the table (which the
/// command metrics count by).
pub fn position(name: &str) -> Option<(usize, &'static CommandEntry)> {
    let index = COMMANDS.binary_search_by(|c| c.name.cmp(name)).ok()?;
    COMMANDS.get(index).map(|entry| (index, entry))
}

/// `listCommands`: every command of the table, with its help line.
pub async fn list_commands(_req: &Request<'_>) -> Result<Document> {
    let mut commands = Document::new();
    for c in COMMANDS {
        commands.insert(
            c.name,
            doc! {"help": c.help, "adminOnly": c.admin_only, "requiresAuth": false},
        );
    }
    Ok(doc! {"commands": commands})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_so_lookup_finds_every_command() {
        for w in COMMANDS.windows(2) {
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
        for c in COMMANDS {
            assert!(lookup(c.name).is_some());
        }
        assert!(lookup("noSuchCommand").is_none());
        // Every command has its own slot in the command metrics.
        assert!(COMMANDS.len() < super::super::metrics::MAX_COMMANDS);
    }
}
