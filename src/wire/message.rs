//! Message formats: parsing request bodies and encoding replies.
//!
//! Every length read from the wire is checked before it is used; a
//! malformed message is a [`WireError`] that ends its connection.

use bson::Document;
use bytes::{BufMut, Bytes, BytesMut};

use super::validate::{check_document, to_document, BsonCheckError};
use super::{MAX_INTERNAL_OBJECT_SIZE, OP_MSG, OP_QUERY, OP_REPLY};
use crate::base::Compressor;

/// Why a message could not be read. The connection is closed after it.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("message length {0} is outside the allowed range")]
    BadLength(i64),
    #[error("unsupported opcode {0}")]
    UnsupportedOpcode(i32),
    #[error("malformed message: {0}")]
    Malformed(&'static str),
    #[error("OP_MSG checksum does not match")]
    BadChecksum,
    #[error("OP_MSG has unknown required flag bits {0:#x}")]
    UnknownRequiredFlags(u32),
    #[error("OP_COMPRESSED names unknown compressor id {0}")]
    UnknownCompressor(u8),
    #[error("OP_COMPRESSED uses {0}, which this connection did not negotiate")]
    CompressorNotNegotiated(Compressor),
    #[error("OP_COMPRESSED uncompressedSize {0} is outside the allowed range")]
    BadUncompressedSize(i64),
    #[error("OP_COMPRESSED {0} data {1}")]
    Decompression(Compressor, String),
}

/// A request from a client.
#[derive(Debug)]
pub enum Message {
    Msg(OpMsg),
    Query(OpQuery),
}

impl Message {
    pub fn request_id(&self) -> i32 {
        match self {
            Message::Msg(m) => m.request_id,
            Message::Query(q) => q.request_id,
        }
    }

    /// The compressor the request came with (OP_COMPRESSED), if any.
    pub fn compressor(&self) -> Option<Compressor> {
        match self {
            Message::Msg(m) => m.compressor,
            Message::Query(q) => q.compressor,
        }
    }

    pub(super) fn compressed_with(mut self, c: Compressor) -> Message {
        match &mut self {
            Message::Msg(m) => m.compressor = Some(c),
            Message::Query(q) => q.compressor = Some(c),
        }
        self
    }
}

/// An OP_MSG request: the body plus document sequences, still as bytes.
/// Turning the bytes into documents (and rejecting invalid BSON with a
/// command error rather than a closed connection) is the caller's job.
#[derive(Debug)]
pub struct OpMsg {
    pub request_id: i32,
    pub flags: u32,
    pub body: Bytes,
    /// `(identifier, documents)` of each kind-1 section.
    pub sequences: Vec<(String, Vec<Bytes>)>,
    /// Set when it came in OP_COMPRESSED.
    pub compressor: Option<Compressor>,
}

pub const FLAG_CHECKSUM_PRESENT: u32 = 1;
pub const FLAG_MORE_TO_COME: u32 = 1 << 1;
pub const FLAG_EXHAUST_ALLOWED: u32 = 1 << 16;

impl OpMsg {
    /// True when the client expects no reply (`w: 0` writes).
    pub fn more_to_come(&self) -> bool {
        self.flags & FLAG_MORE_TO_COME != 0
    }

    /// True when the client would take a stream of replies to this one
    /// request (the streaming `hello` of drivers' server monitors).
    pub fn exhaust_allowed(&self) -> bool {
        self.flags & FLAG_EXHAUST_ALLOWED != 0
    }

    /// The command: the body as a document, the document sequences
    /// still as bytes (an `insert` can store them as they came). Every
    /// document is validated first, without recursion.
    pub fn command(&self) -> Result<Command, BsonCheckError> {
        let body = checked_body(&self.body)?;
        for (_, docs) in &self.sequences {
            for d in docs {
                check_document(d)?;
            }
        }
        Ok(Command {
            body,
            sequences: self.sequences.clone(),
            exhaust_allowed: self.exhaust_allowed(),
        })
    }
}

/// A command as the commands layer receives it.
#[derive(Debug, Default)]
pub struct Command {
    pub body: Document,
    /// `(identifier, validated BSON documents)` of each kind-1 section.
    pub sequences: Vec<(String, Vec<Bytes>)>,
    /// The request set OP_MSG's `exhaustAllowed` flag.
    pub exhaust_allowed: bool,
}

/// Validates a command body, then turns it into a document, leaving out
/// `$clusterTime`: drivers echo the last one they saw on every command,
/// nothing here reads it (without authentication it carries no proof
/// either), and it is three nested documents to build.
pub fn checked_body(bytes: &[u8]) -> Result<Document, BsonCheckError> {
    to_document(bytes, Some("$clusterTime"))
}

/// Validates BSON bytes, then turns them into a document.
pub fn checked_document(bytes: &[u8]) -> Result<Document, BsonCheckError> {
    to_document(bytes, None)
}

/// A legacy OP_QUERY request (handshake and `db.$cmd` commands).
#[derive(Debug)]
pub struct OpQuery {
    pub request_id: i32,
    pub flags: i32,
    pub full_collection_name: String,
    pub number_to_skip: i32,
    pub number_to_return: i32,
    pub query: Bytes,
    /// Set when it came in OP_COMPRESSED.
    pub compressor: Option<Compressor>,
}

/// A reply to send: one document, in the format its request asked with.
#[derive(Debug)]
pub struct Reply {
    /// The reply's own id: the next reply of a stream answers it.
    pub request_id: i32,
    pub response_to: i32,
    /// OP_MSG's `moreToCome`: more replies follow without a request.
    pub more_to_come: bool,
    pub format: ReplyFormat,
    /// The document, as BSON.
    pub body: Vec<u8>,
    /// Compress it with this: mongod answers a compressed request with
    /// the same compressor, and anything else uncompressed.
    pub compressor: Option<Compressor>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyFormat {
    /// OP_MSG with one body section, for OP_MSG requests.
    Msg,
    /// OP_REPLY with one document, for OP_QUERY requests.
    Legacy,
}

impl Reply {
    /// The reply to `request` carrying `body`.
    pub fn to(request: &Message, body: Vec<u8>) -> Reply {
        Reply {
            request_id: next_request_id(),
            response_to: request.request_id(),
            more_to_come: false,
            format: match request {
                Message::Msg(_) => ReplyFormat::Msg,
                Message::Query(_) => ReplyFormat::Legacy,
            },
            body,
            compressor: request.compressor(),
        }
    }
}

/// Splits `n` bytes off the front of `buf`, or fails if there are fewer.
fn take(buf: &mut Bytes, n: usize, what: &'static str) -> Result<Bytes, WireError> {
    if buf.len() < n {
        return Err(WireError::Malformed(what));
    }
    Ok(buf.split_to(n))
}

fn read_i32(buf: &mut Bytes, what: &'static str) -> Result<i32, WireError> {
    let b = take(buf, 4, what)?;
    Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn read_cstring(buf: &mut Bytes, what: &'static str) -> Result<String, WireError> {
    let end = buf
        .iter()
        .position(|&c| c == 0)
        .ok_or(WireError::Malformed(what))?;
    let s = take(buf, end, what)?;
    take(buf, 1, what)?;
    String::from_utf8(s.to_vec()).map_err(|_| WireError::Malformed(what))
}

/// Reads one length-prefixed BSON document's bytes (not validated).
fn read_document(buf: &mut Bytes, what: &'static str) -> Result<Bytes, WireError> {
    if buf.len() < 4 {
        return Err(WireError::Malformed(what));
    }
    let len = i32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if len < 5 || len as usize > buf.len() || len as usize > MAX_INTERNAL_OBJECT_SIZE {
        return Err(WireError::Malformed(what));
    }
    take(buf, len as usize, what)
}

/// Parses the body of an OP_MSG (everything after the 16-byte header).
/// `whole` is the complete message, for the checksum.
pub fn parse_op_msg(request_id: i32, whole: &[u8], mut body: Bytes) -> Result<OpMsg, WireError> {
    let flags = read_i32(&mut body, "OP_MSG flags")? as u32;
    // Bits 0-15 are required: a flag we do not know there must fail.
    let unknown_required = flags & 0xffff & !(FLAG_CHECKSUM_PRESENT | FLAG_MORE_TO_COME);
    if unknown_required != 0 {
        return Err(WireError::UnknownRequiredFlags(unknown_required));
    }
    if flags & FLAG_CHECKSUM_PRESENT != 0 {
        if body.len() < 4 || whole.len() < 4 {
            return Err(WireError::Malformed("OP_MSG checksum"));
        }
        let split = whole.len() - 4;
        let expected = u32::from_le_bytes([
            whole[split],
            whole[split + 1],
            whole[split + 2],
            whole[split + 3],
        ]);
        if crc32c::crc32c(&whole[..split]) != expected {
            return Err(WireError::BadChecksum);
        }
        body.truncate(body.len() - 4);
    }
    let mut main = None;
    let mut sequences = Vec::new();
    while !body.is_empty() {
        let kind = take(&mut body, 1, "OP_MSG section kind")?[0];
        match kind {
            0 => {
                if main.is_some() {
                    return Err(WireError::Malformed("OP_MSG has two body sections"));
                }
                main = Some(read_document(&mut body, "OP_MSG body")?);
            }
            1 => {
                let size = read_i32(&mut body, "OP_MSG sequence size")?;
                if size < 4 {
                    return Err(WireError::Malformed("OP_MSG sequence size"));
                }
                let mut section = take(&mut body, size as usize - 4, "OP_MSG sequence")?;
                let identifier = read_cstring(&mut section, "OP_MSG sequence identifier")?;
                let mut docs = Vec::new();
                while !section.is_empty() {
                    docs.push(read_document(&mut section, "OP_MSG sequence document")?);
                }
                sequences.push((identifier, docs));
            }
            _ => return Err(WireError::Malformed("OP_MSG section kind")),
        }
    }
    let body = main.ok_or(WireError::Malformed("OP_MSG has no body section"))?;
    Ok(OpMsg {
        request_id,
        flags,
        body,
        sequences,
        compressor: None,
    })
}

/// Parses the body of an OP_QUERY.
pub fn parse_op_query(request_id: i32, mut body: Bytes) -> Result<OpQuery, WireError> {
    let flags = read_i32(&mut body, "OP_QUERY flags")?;
    let full_collection_name = read_cstring(&mut body, "OP_QUERY collection name")?;
    let number_to_skip = read_i32(&mut body, "OP_QUERY numberToSkip")?;
    let number_to_return = read_i32(&mut body, "OP_QUERY numberToReturn")?;
    let query = read_document(&mut body, "OP_QUERY query")?;
    // An optional returnFieldsSelector may follow; commands ignore it.
    Ok(OpQuery {
        request_id,
        flags,
        full_collection_name,
        number_to_skip,
        number_to_return,
        query,
        compressor: None,
    })
}

static NEXT_REQUEST_ID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1);

/// An id for a message this server sends.
pub fn next_request_id() -> i32 {
    NEXT_REQUEST_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn put_header(out: &mut BytesMut, len: usize, id: i32, response_to: i32, op_code: i32) {
    out.put_i32_le(len as i32);
    out.put_i32_le(id);
    out.put_i32_le(response_to);
    out.put_i32_le(op_code);
}

/// Parses a whole message (`whole`, header included) of opcode `op_code`;
/// `body` is `whole` after the header.
pub fn parse_message(
    op_code: i32,
    request_id: i32,
    whole: &[u8],
    body: Bytes,
) -> Result<Message, WireError> {
    match op_code {
        OP_MSG => Ok(Message::Msg(parse_op_msg(request_id, whole, body)?)),
        OP_QUERY => Ok(Message::Query(parse_op_query(request_id, body)?)),
        other => Err(WireError::UnsupportedOpcode(other)),
    }
}

/// Appends the wire form of `reply` to `out`, uncompressed.
pub fn encode_reply(reply: &Reply, out: &mut BytesMut) {
    let (response_to, body) = (reply.response_to, &reply.body);
    match reply.format {
        ReplyFormat::Msg => {
            let len = 16 + 4 + 1 + body.len();
            out.reserve(len);
            put_header(out, len, reply.request_id, response_to, OP_MSG);
            out.put_u32_le(if reply.more_to_come {
                FLAG_MORE_TO_COME
            } else {
                0
            });
            out.put_u8(0);
            out.put_slice(body);
        }
        ReplyFormat::Legacy => {
            let len = 16 + 20 + body.len();
            out.reserve(len);
            put_header(out, len, reply.request_id, response_to, OP_REPLY);
            out.put_i32_le(8); // AwaitCapable
            out.put_i64_le(0);
            out.put_i32_le(0);
            out.put_i32_le(1);
            out.put_slice(body);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn msg_body(flags: u32, sections: &[u8]) -> Vec<u8> {
        let mut v = flags.to_le_bytes().to_vec();
        v.extend_from_slice(sections);
        v
    }

    #[test]
    fn op_msg_with_sequence_becomes_one_command() {
        let body = doc! {"insert": "c", "$db": "t"};
        let d1 = doc! {"_id": 1};
        let d2 = doc! {"_id": 2};
        let mut sections = vec![0u8];
        sections.extend(body.to_vec().unwrap());
        let mut seq = b"documents\0".to_vec();
        seq.extend(d1.to_vec().unwrap());
        seq.extend(d2.to_vec().unwrap());
        sections.push(1);
        sections.extend(((seq.len() + 4) as i32).to_le_bytes());
        sections.extend(seq);
        let raw = msg_body(0, &sections);
        let msg = parse_op_msg(7, &[], Bytes::from(raw)).unwrap();
        let cmd = msg.command().unwrap();
        assert_eq!(cmd.body.get_str("insert").unwrap(), "c");
        assert_eq!(cmd.sequences.len(), 1);
        assert_eq!(cmd.sequences[0].0, "documents");
        assert_eq!(cmd.sequences[0].1.len(), 2);
    }

    #[test]
    fn truncated_and_lying_sections_are_malformed() {
        let raw = msg_body(0, &[0, 200, 0, 0, 0, 1]);
        assert!(parse_op_msg(1, &[], Bytes::from(raw)).is_err());
        let raw = msg_body(0, &[1, 2, 0, 0, 0]);
        assert!(parse_op_msg(1, &[], Bytes::from(raw)).is_err());
        let raw = msg_body(1 << 5, &[]);
        assert!(matches!(
            parse_op_msg(1, &[], Bytes::from(raw)),
            Err(WireError::UnknownRequiredFlags(_))
        ));
    }

    #[test]
    fn checksum_is_verified() {
        let body = doc! {"ping": 1, "$db": "admin"};
        let mut sections = vec![0u8];
        sections.extend(body.to_vec().unwrap());
        let payload = msg_body(FLAG_CHECKSUM_PRESENT, &sections);
        let mut whole = vec![0u8; 16];
        whole.extend_from_slice(&payload);
        let crc = crc32c::crc32c(&whole);
        whole.extend_from_slice(&crc.to_le_bytes());
        let mut with_crc = payload.clone();
        with_crc.extend_from_slice(&crc.to_le_bytes());
        assert!(parse_op_msg(1, &whole, Bytes::from(with_crc.clone())).is_ok());
        let n = whole.len();
        whole[n - 1] ^= 1;
        assert!(matches!(
            parse_op_msg(1, &whole, Bytes::from(with_crc)),
            Err(WireError::BadChecksum)
        ));
    }
}
