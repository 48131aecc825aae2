//! Who a client is and what it may do: pure logic, no I/O.
//!
//! - [`privileges`]: MongoDB's action types, resource patterns and
//!   privileges, the built-in roles' privileges, and the privileges each
//!   command needs.
//! - [`scram`]: SCRAM-SHA-1 and SCRAM-SHA-256: stored keys and the
//!   server's side of a conversation.
//!
//! Users and custom roles are documents the commands layer keeps through
//! the router (`admin.system.users`, `admin.system.roles`); this module only
//! reasons about them.

pub mod privileges;
pub mod scram;
