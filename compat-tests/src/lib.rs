//! Test harness: starts a Shardgate server for the driver tests.
