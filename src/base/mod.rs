//! The bottom layer, beside [`crate::error`]: values every layer agrees on
//! and nothing else — MongoDB's size limits, validated namespaces, the
//! wire compressors' names and numbers, the memory the host offers, the
//! recent log lines `getLog` returns, and users' names.
//!
//! It sits below `query` rather than inside it because `wire`, which knows
//! bytes and not BSON logic, needs the same limits; it imports only
//! `error`.

pub mod clock;
pub mod compressor;
pub mod host;
pub mod limits;
pub mod namespace;
pub mod recent_log;
pub mod user_name;

pub use compressor::{Compressor, CompressorList};
pub use namespace::{validate_db_name, Namespace};
pub use user_name::{UserName, EXTERNAL_DB};
