//! Framing: a tokio-util codec that cuts the byte stream into messages.
//!
//! The decoder reads the 16-byte header, rejects a length outside
//! `[16, maxMessageSizeBytes]` before buffering anything, waits for the
//! whole message ("incomplete, read more") and then parses it
//! ("malformed" is an error that closes the connection).

use bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::message::{encode_reply, parse_op_msg, parse_op_query};
use super::{Message, Reply, WireError, MAX_MESSAGE_SIZE_BYTES, OP_COMPRESSED, OP_MSG, OP_QUERY};

/// Most bytes reserved ahead of a message that is still arriving.
const READ_AHEAD_BYTES: usize = 64 * 1024;

#[derive(Debug, Default)]
pub struct MessageCodec;

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
        let mut body = frame.clone();
        body.advance(16);
        match op_code {
            OP_MSG => Ok(Some(Message::Msg(parse_op_msg(request_id, &frame, body)?))),
            OP_QUERY => Ok(Some(Message::Query(parse_op_query(request_id, body)?))),
            OP_COMPRESSED => Err(WireError::UnsupportedOpcode(op_code)),
            other => Err(WireError::UnsupportedOpcode(other)),
        }
    }
}

impl Encoder<Reply> for MessageCodec {
    type Error = WireError;

    fn encode(&mut self, reply: Reply, dst: &mut BytesMut) -> Result<(), WireError> {
        encode_reply(&reply, dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let mut codec = MessageCodec;
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
        let mut codec = MessageCodec;
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
}
