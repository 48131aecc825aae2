//! Who a client is and what it may do: pure logic, no I/O.
//!
//! - [`privileges`]: MongoDB's action types, resource patterns and
//!   privileges, the built-in roles' privileges, and the privileges each
//!   command needs.
//!
//! Users and custom roles are documents the commands layer keeps through
//! the router (`admin.system.users`, `admin.system.roles`); this module only
//! reasons about them.

pub mod privileges;
