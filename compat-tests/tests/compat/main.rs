//! The driver compatibility tests, built as one test binary (`compat`): one
//! module per former test file, so the driver's generic code is compiled
//! and the binary linked once instead of once per file.
//!
//! Each test starts its own server (see the harness, `compat_tests`), so
//! the modules' tests run side by side. A test path starts with its
//! module's name; to run one module's tests, filter on it:
//!
//! ```text
//! cargo test --release -p compat-tests --test compat -- auth::
//! ```
//!
//! Several filters run the tests matching any of them
//! (`-- crud_find:: aggregate::`). A filter matches anywhere in the path:
//! `aggregate::` does not match `aggregate_stages::…`, but `crash::` also
//! matches `indexes_crash::…` (add `--skip indexes_crash::`).

mod aggregate;
mod aggregate_exprs;
mod aggregate_stages;
mod aggregate_windows;
mod auth;
mod bad_input;
mod capped;
mod catalog;
mod change_streams;
mod collation;
mod command_options;
mod compression;
mod config_file;
mod cosmos_provision;
mod crash;
mod crash_cycles;
mod crud_delete_fam;
mod crud_find;
mod crud_insert;
mod crud_update;
mod disk_full;
mod docker_scripts;
mod errors;
mod fail_points;
mod fleet;
mod geo;
mod handshake_admin;
mod heat_map;
mod indexes;
mod indexes_crash;
mod indexes_ttl;
mod javascript;
mod logging;
mod metrics;
mod profiler;
mod query_operators;
mod request_units;
mod robust_cursors;
mod robust_exprs;
mod robust_limits;
mod robust_resources;
mod sessions;
mod sharding;
mod sharding_split;
mod streaming_hello;
mod text_search;
mod timeseries;
mod tls;
mod transactions;
mod validation;
mod views;
