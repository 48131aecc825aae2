//! The bottom layer, beside [`crate::error`]: values every layer agrees on
//! and nothing else — MongoDB's size limits and validated namespaces.
//!
//! It sits below `query` rather than inside it because `wire`, which knows
//! bytes and not BSON logic, needs the same limits; it imports only
//! `error`.

pub mod limits;
pub mod namespace;

pub use namespace::{validate_db_name, Namespace};
