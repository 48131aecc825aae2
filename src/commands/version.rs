//! The MongoDB version this server answers as, for `buildInfo`,
//! `serverStatus` and explain's `serverInfo`. Below every handler.

/// The MongoDB version Shardgate is compatible with.
pub const MONGODB_VERSION: &str = "7.0.12";
pub const MONGODB_VERSION_ARRAY: [i32; 4] = [7, 0, 12, 0];
