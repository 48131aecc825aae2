//! Pure BSON logic, no I/O: comparison order, filters, updates,
//! projections, sorts, the size limits on values a request builds, and the
//! interrupt check their loops share. The router applies these to documents
//! it reads from storage; nothing here knows about partitions or bytes on
//! the wire.

pub mod active;
pub mod change_diff;
pub mod collation;
pub mod compare;
pub mod expr;
pub mod filter;
pub mod geo;
pub mod hash;
pub mod interrupt;
pub mod js;
pub mod keystring;
pub mod path;
pub mod projection;
pub mod raw_fields;
pub mod regex;
pub mod size;
pub mod sort;
pub mod text;
pub mod update;
