//! Framing: a tokio-util codec that cuts the byte stream into messages.
//!
//! The decoder reads the 16-byte header, rejects a length outside
//! `[16, maxMessageSizeBytes]` before buffering anything, waits for the
//! whole message ("incomplete, read more") and then parses it
//! ("malformed" is an error that closes the connection). An OP_COMPRESSED
//! message is unwrapped (see [`super::compression`]) and parsed as the
//! message inside; a reply to it is compressed the same way.

use bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::compression::{self, Contexts};
use super::message::{encode_reply, parse_message};
use super::{Message, Reply, WireError, MAX_MESSAGE_SIZE_BYTES, OP_COMPRESSED};
use crate::base::CompressorList;

/// Most bytes reserved ahead of a message that is still arriving.
const READ_AHEAD_BYTES: usize = 64 * 1024;

/// One connection's codec. It holds what the connection negotiated: the
/// compressors its OP_COMPRESSED frames may use (none until `hello`
/// agrees on some) and, once one is used, their contexts.
#[derive(Default)]
pub struct MessageCodec {
    accepted: CompressorList,
    contexts: Option<Box<Contexts>>,
}

impl MessageCodec {
    /// A codec that accepts frames compressed with `accepted`.
    pub fn accepting(accepted: CompressorList) -> MessageCodec {
        MessageCodec {
            accepted,
            contexts: None,
        }
    }

    /// Sets the compressors later frames may use: what the connection's
    /// latest `hello` agreed on.
    pub fn accept(&mut self, accepted: CompressorList) {
        self.accepted = accepted;
    }
}

impl std::fmt::Debug for MessageCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageCodec")
            .field("accepted", &self.accepted)
            .finish_non_exhaustive()
    }
}

impl Decoder for MessageCodec {
    type Item = Message;
    type Error = WireError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Message>, WireError> {
        if src.len() < 16 {
            return Ok(None);
        }
        let len = i32::from_le_bytes([src[0], src[1], src[2], src[3]]);
        if len < 16 || len as usize > MAX_MESSAGE_SIZE_BYTES {
            return Err(WireError::BadLength(len as i64));
        }
        let len = len as usize;
        if src.len() < len {
            // Room for the next piece only: a header may claim 48 MB, and
            // memory should grow with the bytes that actually arrive, not
            // with what a client says it will send.
            src.reserve((len - src.len()).min(READ_AHEAD_BYTES));
            return Ok(None);
        }
        let frame = src.split_to(len).freeze();
        let request_id = i32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let op_code = i32::from_le_bytes([frame[12], frame[13], frame[14], frame[15]]);
        if op_code == OP_COMPRESSED {
            let (compressor, whole) =
                compression::decompress_frame(&frame, self.accepted, &mut self.contexts)?;
            let inner_op = i32::from_le_bytes([whole[12], whole[13], whole[14], whole[15]]);
            let body = whole.slice(16..);
            let message = parse_message(inner_op, request_id, &whole, body)?;
            return Ok(Some(message.compressed_with(compressor)));
        }
        let mut body = frame.clone();
        body.advance(16);
        parse_message(op_code, request_id, &frame, body).map(Some)
    }
}

impl Encoder<Reply> for MessageCodec {
    type Error = WireError;

    fn encode(&mut self, reply: Reply, dst: &mut BytesMut) -> Result<(), WireError> {
        let start = dst.len();
        encode_reply(&reply, dst);
        if let Some(c) = reply.compressor {
            compression::compress_in_place(dst, start, c, &mut self.contexts);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::Compressor;
    use crate::wire::compression::compress_message;
    use crate::wire::message::ReplyFormat;
    use crate::wire::OP_MSG;
    use bson::doc;

    fn op_msg_frame(cmd: &bson::Document) -> Vec<u8> {
        let body = cmd.to_vec().unwrap();
        let len = 16 + 4 + 1 + body.len();
        let mut v = Vec::new();
        v.extend((len as i32).to_le_bytes());
        v.extend(9i32.to_le_bytes());
        v.extend(0i32.to_le_bytes());
        v.extend(OP_MSG.to_le_bytes());
        v.extend(0u32.to_le_bytes());
        v.push(0);
        v.extend(body);
        v
    }

    #[test]
    fn decodes_only_whole_frames() {
        let frame = op_msg_frame(&doc! {"ping": 1});
        let mut codec = MessageCodec::default();
        let mut buf = BytesMut::from(&frame[..10]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        buf.extend_from_slice(&frame[10..frame.len() - 1]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        buf.extend_from_slice(&frame[frame.len() - 1..]);
        let Some(Message::Msg(m)) = codec.decode(&mut buf).unwrap() else {
            panic!("expected OP_MSG")
        };
        assert_eq!(m.request_id, 9);
        assert!(buf.is_empty());
    }

    #[test]
    fn oversize_and_undersize_lengths_fail_before_buffering() {
        let mut codec = MessageCodec::default();
        let mut huge = BytesMut::new();
        huge.extend_from_slice(&(1_000_000_000i32).to_le_bytes());
        huge.extend_from_slice(&[0u8; 12]);
        assert!(matches!(
            codec.decode(&mut huge),
            Err(WireError::BadLength(_))
        ));
        let mut claimed = BytesMut::new();
        claimed.extend_from_slice(&(40_000_000i32).to_le_bytes());
        claimed.extend_from_slice(&[0u8; 12]);
        assert!(codec.decode(&mut claimed).unwrap().is_none());
        assert!(
            claimed.capacity() <= 16 + READ_AHEAD_BYTES * 2,
            "reserved {} bytes for a message that has not arrived",
            claimed.capacity()
        );
        let mut tiny = BytesMut::new();
        tiny.extend_from_slice(&(3i32).to_le_bytes());
        tiny.extend_from_slice(&[0u8; 12]);
        assert!(codec.decode(&mut tiny).is_err());
    }

    #[test]
    fn compressed_frames_decode_once_negotiated() {
        let frame = op_msg_frame(&doc! {"ping": 1, "$db": "admin"});
        for c in [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd] {
            let packed = compress_message(&frame, c);
            let mut plain = MessageCodec::default();
            assert!(matches!(
                plain.decode(&mut BytesMut::from(&packed[..])),
                Err(WireError::CompressorNotNegotiated(_))
            ));
            let mut codec = MessageCodec::default();
            codec.accept(CompressorList::from_iter([c]));
            // In pieces, then whole, then an uncompressed one after it.
            let mut buf = BytesMut::from(&packed[..7]);
            assert!(codec.decode(&mut buf).unwrap().is_none());
            buf.extend_from_slice(&packed[7..]);
            buf.extend_from_slice(&frame);
            let Some(Message::Msg(m)) = codec.decode(&mut buf).unwrap() else {
                panic!("expected OP_MSG")
            };
            assert_eq!(m.request_id, 9);
            assert_eq!(m.compressor, Some(c));
            assert_eq!(m.command().unwrap().body, doc! {"ping": 1, "$db": "admin"});
            let Some(next) = codec.decode(&mut buf).unwrap() else {
                panic!("expected the second message")
            };
            assert_eq!(next.compressor(), None);
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn a_streamed_reply_carries_its_id_and_more_to_come() {
        let body = doc! {"ok": 1.0}.to_vec().unwrap();
        for more in [false, true] {
            let reply = Reply {
                request_id: 1234,
                response_to: 99,
                more_to_come: more,
                format: ReplyFormat::Msg,
                body: body.clone(),
                compressor: None,
            };
            let mut out = BytesMut::new();
            MessageCodec::default().encode(reply, &mut out).unwrap();
            assert_eq!(&out[4..8], &1234i32.to_le_bytes());
            assert_eq!(&out[8..12], &99i32.to_le_bytes());
            let flags = u32::from_le_bytes([out[16], out[17], out[18], out[19]]);
            assert_eq!(flags, if more { 2 } else { 0 });
        }
    }

    #[test]
    fn a_reply_goes_back_compressed_as_its_request_came() {
        let body = doc! {"ok": 1.0, "n": "x".repeat(500)}.to_vec().unwrap();
        for c in [None, Some(Compressor::Zstd), Some(Compressor::Snappy)] {
            let mut codec = MessageCodec::accepting(CompressorList::all());
            let reply = Reply {
                request_id: 7,
                response_to: 41,
                more_to_come: false,
                format: ReplyFormat::Msg,
                body: body.clone(),
                compressor: c,
            };
            let mut out = BytesMut::new();
            codec.encode(reply, &mut out).unwrap();
            let op_code = i32::from_le_bytes([out[12], out[13], out[14], out[15]]);
            let response_to = i32::from_le_bytes([out[8], out[9], out[10], out[11]]);
            assert_eq!(response_to, 41);
            let Some(c) = c else {
                assert_eq!(op_code, OP_MSG);
                continue;
            };
            assert_eq!(op_code, OP_COMPRESSED);
            assert!(out.len() < body.len());
            // A client reads it back as the OP_MSG it wraps.
            let (used, whole) =
                compression::decompress_frame(&out, CompressorList::from_iter([c]), &mut None)
                    .unwrap();
            assert_eq!(used, c);
            assert_eq!(&whole[8..12], &41i32.to_le_bytes());
            assert_eq!(&whole[12..16], &OP_MSG.to_le_bytes());
            assert_eq!(&whole[21..], &body[..]);
        }
    }
}
