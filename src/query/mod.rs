//! Pure BSON logic, no I/O: comparison order, filters, updates,
//! projections and sorts, and the interrupt check their loops share. The router applies these to documents it reads
//! from storage; nothing here knows about partitions or bytes on the wire.

pub mod compare;
pub mod expr;
pub mod filter;
pub mod interrupt;
pub mod projection;
pub mod sort;
pub mod update;
