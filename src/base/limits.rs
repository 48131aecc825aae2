//! MongoDB's size limits, stated once. `hello` advertises the first three;
//! the wire decoder, the write path, cursors and the query layer enforce
//! them.

/// `maxBsonObjectSize`: the largest document a client may send or store
/// (16 MiB).
pub const MAX_BSON_OBJECT_SIZE: usize = 16 * 1024 * 1024;

/// MongoDB's `BSONObjMaxInternalSize`: 16 KiB over the user limit, room
/// for a reply's own fields around a largest document, and the most an
/// intermediate document or array may reach while a query builds it.
pub const MAX_INTERNAL_OBJECT_SIZE: usize = MAX_BSON_OBJECT_SIZE + 16 * 1024;

/// `maxMessageSizeBytes`: the largest message a client may send.
pub const MAX_MESSAGE_SIZE_BYTES: usize = 48_000_000;

/// `maxWriteBatchSize`: most writes in one batch.
pub const MAX_WRITE_BATCH_SIZE: usize = 100_000;
