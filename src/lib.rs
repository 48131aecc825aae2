//! Shardgate: a MongoDB wire-protocol server that partitions collections
//! the way Azure Cosmos DB does.
//!
//! A request flows down through the layers, each calling only the next:
//!
//! ```text
//! server ─► wire ─► commands ─► query ─► router ─► storage
//! accept,   frames   one file    filter,   hash →     embedded engine
//! connect   OP_MSG   per command update,   partition, (fjall), keys,
//!           OP_QUERY             project,  fan out,   durability
//!                                sort      merge
//! ```
//!
//! - [`server`]: the accept loop, one task per connection, shutdown.
//! - [`wire`]: bytes only — message header, OP_MSG, OP_QUERY/OP_REPLY.
//! - [`commands`]: one file per command, parsed fully before it runs.
//! - [`query`]: pure BSON logic with no I/O (compare, filter, update, project, sort).
//! - [`router`]: the only way to storage; maps a namespace to its partitions.
//! - [`storage`]: the storage trait and the embedded engine behind it.

pub mod aggregate;
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
