//! The wire layer: bytes in, messages out, and back. It knows the MongoDB
//! message formats and their limits, nothing about commands.
//!
//! - [`codec::MessageCodec`] frames a byte stream into [`Message`]s
//!   (tokio-util codec) and encodes [`Reply`]s.
//! - OP_MSG with body and document-sequence sections, the optional
//!   CRC-32C checksum and `moreToCome`; OP_QUERY for the legacy handshake
//!   and `$cmd` queries, answered with OP_REPLY.
//! - OP_COMPRESSED (snappy, zlib, zstd; noop) around either, with the
//!   compressors the connection negotiated ([`compression`]).

pub mod codec;
pub mod compression;
pub mod message;
pub mod validate;

pub use codec::MessageCodec;
pub use message::{Command, Message, OpMsg, OpQuery, Reply, ReplyFormat, WireError};
pub use validate::{check_document, BsonCheckError};

pub use crate::base::limits::{
    MAX_BSON_OBJECT_SIZE, MAX_INTERNAL_OBJECT_SIZE, MAX_MESSAGE_SIZE_BYTES, MAX_WRITE_BATCH_SIZE,
};

/// Message opcodes.
pub const OP_REPLY: i32 = 1;
pub const OP_QUERY: i32 = 2004;
pub const OP_COMPRESSED: i32 = 2012;
pub const OP_MSG: i32 = 2013;
