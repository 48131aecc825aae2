//! Shardgate: a MongoDB wire-protocol server that partitions collections
//! the way Azure Cosmos DB does.
//!
//! A request flows down through the layers:
//!
//! ```text
//! server ─► wire ─► commands ─► router ─► {index, partition, aggregate} ─► storage
//!                      └─► cursor                  query, base, error: used by all
//! ```
//!
//! A module imports only the modules below it; `tests/layering.rs` enforces
//! this table, the same as the README's architecture section. `wire` knows
//! bytes only, so it imports only `base` and `error`.
//!
//! | module | may import |
//! |---|---|
//! | server | wire, commands, cursor, config, router, auth, query, base, error |
//! | commands | wire, config, cursor, router, index, partition, aggregate, auth, query, base, error |
//! | config | cursor, router, index, partition, aggregate, storage, query, base, error |
//! | cursor | router, aggregate, query, base, error |
//! | router | index, partition, aggregate, storage, query, base, error |
//! | index | query, base, error |
//! | partition | query, base, error |
//! | aggregate | query, base, error |
//! | storage | query, base, error |
//! | auth | query, base, error |
//! | wire | base, error |
//! | query | base, error |
//! | base | error |
//! | error | — |
//!
//! - [`server`]: the accept loop, one task per connection, shutdown.
//! - [`wire`]: bytes only — message header, OP_MSG, OP_QUERY/OP_REPLY.
//! - [`commands`]: one file per command, parsed fully before it runs.
//! - [`config`]: flags, config file and environment.
//! - [`cursor`]: open result streams for `getMore`.
//! - [`router`]: the only way to storage; maps a namespace to its partitions.
//! - [`index`], [`partition`], [`aggregate`]: index model and planner,
//!   partition maps, the aggregation pipeline.
//! - [`storage`]: the storage trait and the embedded engine behind it.
//! - [`auth`]: users' privileges and SCRAM, as pure logic.
//! - [`query`]: pure BSON logic with no I/O (compare, filter, update, project, sort).
//! - [`base`]: size limits and namespaces; [`error`]: MongoDB's error codes.

pub mod aggregate;
pub mod auth;
pub mod base;
pub mod commands;
pub mod config;
pub mod cursor;
pub mod error;
pub mod index;
pub mod partition;
pub mod query;
pub mod router;
pub mod server;
pub mod storage;
pub mod wire;

pub use error::{Error, ErrorCode, Result};
