//! OP_COMPRESSED: unwrapping a compressed request and compressing a reply
//! with the compressor its request came with, as mongod does.
//!
//! A frame is `header (16) | originalOpcode i32 | uncompressedSize i32 |
//! compressorId u8 | compressed bytes`, where the compressed bytes are the
//! original message without its header. Before anything is decompressed,
//! the compressor must be one the connection negotiated in `hello` (noop
//! once any was) and `uncompressedSize` must fit in a message and be no
//! more than the compressed data can give by its format's own limits (so
//! a few bytes cannot claim 48 MB); then exactly that many bytes are
//! allocated, and the data must decompress to exactly that many — a frame
//! that would give more fails when the buffer is full, so a "bomb" costs
//! no more memory than an honest frame of the size it claims.
//!
//! The compression contexts are made the first time a connection needs
//! them ([`Contexts`]); a connection that never compresses has none. The
//! byte counts every compressor saw since the server started are in
//! [`stats`] (`serverStatus` `network.compression`).

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};

use super::{WireError, MAX_MESSAGE_SIZE_BYTES, OP_COMPRESSED, OP_MSG, OP_QUERY};
use crate::base::{Compressor, CompressorList};

/// Bytes between the message header and the compressed data.
const COMPRESSION_HEADER_LEN: usize = 4 + 4 + 1;
/// Bytes before the compressed data: both headers.
const PREFIX_LEN: usize = 16 + COMPRESSION_HEADER_LEN;

/// A compressed request before its data is decompressed.
struct Header {
    original_opcode: i32,
    uncompressed_size: usize,
    compressor: Compressor,
}

/// Reads and checks the compression header of `frame` (a whole message):
/// the inner opcode is one a request may use, the compressor one the
/// connection `accepted`, the size one a message may have.
fn read_header(frame: &[u8], accepted: CompressorList) -> Result<Header, WireError> {
    let Some(h) = frame.get(16..PREFIX_LEN) else {
        return Err(WireError::Malformed("OP_COMPRESSED header"));
    };
    let original_opcode = i32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let size = i32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    let compressor = Compressor::from_id(h[8]).ok_or(WireError::UnknownCompressor(h[8]))?;
    // noop compresses nothing, so it is let through wherever real
    // compression was agreed, as a test aid.
    let noop_allowed = compressor == Compressor::Noop && !accepted.is_empty();
    if !accepted.contains(compressor) && !noop_allowed {
        return Err(WireError::CompressorNotNegotiated(compressor));
    }
    if original_opcode != OP_MSG && original_opcode != OP_QUERY {
        return Err(WireError::UnsupportedOpcode(original_opcode));
    }
    // The message it unwraps to, header included, must be one a client
    // may send.
    let uncompressed_size = usize::try_from(size)
        .ok()
        .filter(|&n| n <= MAX_MESSAGE_SIZE_BYTES - 16)
        .ok_or(WireError::BadUncompressedSize(i64::from(size)))?;
    Ok(Header {
        original_opcode,
        uncompressed_size,
        compressor,
    })
}

/// Unwraps the OP_COMPRESSED message `frame`: returns the compressor it
/// used and the original message, whole (its header rebuilt from the
/// outer one, as mongod rebuilds it, so an OP_MSG checksum still checks).
pub(super) fn decompress_frame(
    frame: &[u8],
    accepted: CompressorList,
    contexts: &mut Option<Box<Contexts>>,
) -> Result<(Compressor, Bytes), WireError> {
    let header = read_header(frame, accepted)?;
    let data = &frame[PREFIX_LEN..];
    let size = header.uncompressed_size;
    let most = max_decompressed_len(header.compressor, data)?;
    if most < size {
        return Err(WireError::Decompression(
            header.compressor,
            format!("can give at most {most} bytes, not the uncompressedSize {size}"),
        ));
    }
    let mut whole = BytesMut::zeroed(16 + size);
    // `size` is at most MAX_MESSAGE_SIZE_BYTES - 16, so this fits an i32.
    whole[..4].copy_from_slice(&((16 + size) as i32).to_le_bytes());
    whole[4..12].copy_from_slice(&frame[4..12]);
    whole[12..16].copy_from_slice(&header.original_opcode.to_le_bytes());
    let contexts = contexts.get_or_insert_with(Default::default);
    contexts.decompress(header.compressor, data, &mut whole[16..])?;
    stats_of(header.compressor).decompressed(data.len(), size);
    Ok((header.compressor, whole.freeze()))
}

/// Compresses the message `dst[start..]` (a whole message, just encoded)
/// in place with `compressor`. Leaves it as it is when it is shorter than
/// a header, when its compressed form could be larger than a message may
/// be (as mongod does) or when compression fails; either way the client
/// can read the reply.
pub(super) fn compress_in_place(
    dst: &mut BytesMut,
    start: usize,
    compressor: Compressor,
    contexts: &mut Option<Box<Contexts>>,
) {
    let end = dst.len();
    let Some(data_len) = (end - start).checked_sub(16) else {
        return;
    };
    let bound = max_compressed_len(compressor, data_len);
    let framed_len = PREFIX_LEN + bound;
    if framed_len > MAX_MESSAGE_SIZE_BYTES {
        return;
    }
    // The compressed message is written after the original, then moved
    // over it.
    dst.resize(end + framed_len, 0);
    let (message, out) = dst.split_at_mut(end);
    let message = &message[start..];
    let contexts = contexts.get_or_insert_with(Default::default);
    let Ok(n) = contexts.compress(compressor, &message[16..], &mut out[PREFIX_LEN..]) else {
        tracing::debug!("{compressor} compression failed; replying uncompressed");
        dst.truncate(end);
        return;
    };
    stats_of(compressor).compressed(data_len, n);
    let len = PREFIX_LEN + n;
    // `len` is at most `framed_len`, checked against the message limit.
    out[..4].copy_from_slice(&(len as i32).to_le_bytes());
    out[4..12].copy_from_slice(&message[4..12]);
    out[12..16].copy_from_slice(&OP_COMPRESSED.to_le_bytes());
    out[16..20].copy_from_slice(&message[12..16]);
    out[20..24].copy_from_slice(&(data_len as i32).to_le_bytes());
    out[24] = compressor.id();
    dst.copy_within(end..end + len, start);
    dst.truncate(start + len);
}

/// The most bytes `compressor` can turn `n` bytes into.
fn max_compressed_len(compressor: Compressor, n: usize) -> usize {
    match compressor {
        Compressor::Noop => n,
        Compressor::Snappy => snap::raw::max_compress_len(n),
        // zlib's compressBound, and a little more: should miniz need
        // more still, the reply goes uncompressed.
        Compressor::Zlib => n + (n >> 12) + (n >> 14) + (n >> 25) + 13 + 6,
        Compressor::Zstd => zstd::zstd_safe::compress_bound(n),
    }
}

/// The most bytes `data` can decompress to, by what its format allows:
/// asked before the output is allocated.
fn max_decompressed_len(compressor: Compressor, data: &[u8]) -> Result<usize, WireError> {
    let fail = |reason: String| WireError::Decompression(compressor, reason);
    match compressor {
        Compressor::Noop => Ok(data.len()),
        // Snappy states its length up front; decompressing checks it.
        Compressor::Snappy => snap::raw::decompress_len(data).map_err(|e| fail(e.to_string())),
        // Deflate expands at most 1032 to 1 (the zlib FAQ's figure).
        Compressor::Zlib => Ok(data.len().saturating_mul(1032)),
        // The frames' content sizes, or their blocks times the most a
        // block may hold.
        Compressor::Zstd => zstd::zstd_safe::decompress_bound(data)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            .map_err(|code| fail(zstd::zstd_safe::get_error_name(code).to_string())),
    }
}

/// One connection's compression contexts, each made on first use and
/// reused for every message after.
#[derive(Default)]
pub struct Contexts {
    snappy: Option<snap::raw::Encoder>,
    zlib_in: Option<flate2::Decompress>,
    zlib_out: Option<flate2::Compress>,
    zstd_in: Option<zstd::bulk::Decompressor<'static>>,
    zstd_out: Option<zstd::bulk::Compressor<'static>>,
}

/// mongod compresses zstd at zstd's default level, and zlib at zlib's.
const ZSTD_LEVEL: i32 = zstd::DEFAULT_COMPRESSION_LEVEL;

impl Contexts {
    /// Decompresses `data` into all of `out`, which must come out exactly
    /// full.
    fn decompress(
        &mut self,
        compressor: Compressor,
        data: &[u8],
        out: &mut [u8],
    ) -> Result<(), WireError> {
        let fail = |reason: String| WireError::Decompression(compressor, reason);
        let declared = out.len();
        let wrong_size = |got: usize| {
            fail(format!(
                "gives {got} bytes, not the uncompressedSize {declared}"
            ))
        };
        match compressor {
            Compressor::Noop => {
                if data.len() != declared {
                    return Err(wrong_size(data.len()));
                }
                out.copy_from_slice(data);
            }
            Compressor::Snappy => {
                // The length snappy's own header claims, checked first.
                let claimed = snap::raw::decompress_len(data).map_err(|e| fail(e.to_string()))?;
                if claimed != declared {
                    return Err(wrong_size(claimed));
                }
                let n = snap::raw::Decoder::new()
                    .decompress(data, out)
                    .map_err(|e| fail(e.to_string()))?;
                if n != declared {
                    return Err(wrong_size(n));
                }
            }
            Compressor::Zlib => {
                let z = self
                    .zlib_in
                    .get_or_insert_with(|| flate2::Decompress::new(true));
                z.reset(true);
                let status = z
                    .decompress(data, out, flate2::FlushDecompress::Finish)
                    .map_err(|e| fail(e.to_string()))?;
                let (used, n) = (z.total_in(), z.total_out());
                if status != flate2::Status::StreamEnd {
                    return Err(fail(if n as usize == declared {
                        format!("gives more than the uncompressedSize {declared}")
                    } else {
                        "is truncated".to_string()
                    }));
                }
                if n as usize != declared {
                    return Err(wrong_size(n as usize));
                }
                if used as usize != data.len() {
                    return Err(fail("has bytes after the end of its stream".to_string()));
                }
            }
            Compressor::Zstd => {
                let z = match &mut self.zstd_in {
                    Some(z) => z,
                    None => self
                        .zstd_in
                        .insert(zstd::bulk::Decompressor::new().map_err(|e| fail(e.to_string()))?),
                };
                // Fails when the output would not fit in `out`.
                let n = z
                    .decompress_to_buffer(data, out)
                    .map_err(|e| fail(e.to_string()))?;
                if n != declared {
                    return Err(wrong_size(n));
                }
            }
        }
        Ok(())
    }

    /// Compresses `data` into `out` (at least [`max_compressed_len`]
    /// long); returns the bytes written.
    fn compress(
        &mut self,
        compressor: Compressor,
        data: &[u8],
        out: &mut [u8],
    ) -> std::io::Result<usize> {
        match compressor {
            Compressor::Noop => {
                out[..data.len()].copy_from_slice(data);
                Ok(data.len())
            }
            Compressor::Snappy => Ok(self
                .snappy
                .get_or_insert_with(snap::raw::Encoder::new)
                .compress(data, out)?),
            Compressor::Zlib => {
                let z = self.zlib_out.get_or_insert_with(|| {
                    flate2::Compress::new(flate2::Compression::default(), true)
                });
                z.reset();
                let status = z
                    .compress(data, out, flate2::FlushCompress::Finish)
                    .map_err(std::io::Error::other)?;
                if status != flate2::Status::StreamEnd {
                    return Err(std::io::Error::other("zlib output did not fit its bound"));
                }
                Ok(z.total_out() as usize)
            }
            Compressor::Zstd => {
                let z = match &mut self.zstd_out {
                    Some(z) => z,
                    None => self
                        .zstd_out
                        .insert(zstd::bulk::Compressor::new(ZSTD_LEVEL)?),
                };
                z.compress_to_buffer(data, out)
            }
        }
    }
}

/// Bytes one compressor took in and gave out, each way.
#[derive(Default)]
struct Counters {
    compressor_in: AtomicU64,
    compressor_out: AtomicU64,
    decompressor_in: AtomicU64,
    decompressor_out: AtomicU64,
}

impl Counters {
    const fn new() -> Counters {
        Counters {
            compressor_in: AtomicU64::new(0),
            compressor_out: AtomicU64::new(0),
            decompressor_in: AtomicU64::new(0),
            decompressor_out: AtomicU64::new(0),
        }
    }

    fn compressed(&self, bytes_in: usize, bytes_out: usize) {
        self.compressor_in
            .fetch_add(bytes_in as u64, Ordering::Relaxed);
        self.compressor_out
            .fetch_add(bytes_out as u64, Ordering::Relaxed);
    }

    fn decompressed(&self, bytes_in: usize, bytes_out: usize) {
        self.decompressor_in
            .fetch_add(bytes_in as u64, Ordering::Relaxed);
        self.decompressor_out
            .fetch_add(bytes_out as u64, Ordering::Relaxed);
    }
}

/// Process-wide, like mongod's, indexed by compressor id.
static STATS: [Counters; 4] = [
    Counters::new(),
    Counters::new(),
    Counters::new(),
    Counters::new(),
];

fn stats_of(c: Compressor) -> &'static Counters {
    &STATS[usize::from(c.id())]
}

/// What one compressor has done since the server started, as
/// `serverStatus` reports it: data bytes (message headers not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompressorStats {
    /// Reply bytes given to the compressor, and what it made of them.
    pub compressor_bytes_in: u64,
    pub compressor_bytes_out: u64,
    /// Request bytes given to the decompressor, and what it made of them.
    pub decompressor_bytes_in: u64,
    pub decompressor_bytes_out: u64,
}

pub fn stats(c: Compressor) -> CompressorStats {
    let s = stats_of(c);
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    CompressorStats {
        compressor_bytes_in: load(&s.compressor_in),
        compressor_bytes_out: load(&s.compressor_out),
        decompressor_bytes_in: load(&s.decompressor_in),
        decompressor_bytes_out: load(&s.decompressor_out),
    }
}

/// Wraps a whole message (`message`, header included) in OP_COMPRESSED
/// with `compressor`, as a client does: for tests and the fuzzer.
pub fn compress_message(message: &[u8], compressor: Compressor) -> Vec<u8> {
    let mut buf = BytesMut::from(message);
    compress_in_place(&mut buf, 0, compressor, &mut None);
    buf.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An OP_MSG of `n` bytes of body with some repetition, header included.
    fn op_msg(n: usize) -> Vec<u8> {
        let mut body = bson::Document::new();
        body.insert("ping", 1);
        body.insert(
            "pad",
            (0..n)
                .map(|i| ((i % 7) as u8 + b'a') as char)
                .collect::<String>(),
        );
        let body = body.to_vec().unwrap();
        let len = 16 + 5 + body.len();
        let mut v = Vec::new();
        v.extend((len as i32).to_le_bytes());
        v.extend(77i32.to_le_bytes());
        v.extend(0i32.to_le_bytes());
        v.extend(OP_MSG.to_le_bytes());
        v.extend(0u32.to_le_bytes());
        v.push(0);
        v.extend(body);
        v
    }

    fn unwrap_frame(frame: &[u8], accepted: CompressorList) -> Result<Bytes, WireError> {
        decompress_frame(frame, accepted, &mut None).map(|(_, whole)| whole)
    }

    #[test]
    fn every_compressor_round_trips() {
        for n in [0, 10, 1000, 300_000] {
            let message = op_msg(n);
            for c in Compressor::ALL {
                let frame = compress_message(&message, c);
                assert_eq!(
                    i32::from_le_bytes(frame[12..16].try_into().unwrap()),
                    OP_COMPRESSED
                );
                assert_eq!(
                    i32::from_le_bytes(frame[..4].try_into().unwrap()) as usize,
                    frame.len()
                );
                if c != Compressor::Noop && n >= 1000 {
                    assert!(frame.len() < message.len(), "{c} did not compress");
                }
                let accepted = CompressorList::from_iter([c]);
                let whole = unwrap_frame(&frame, accepted).unwrap();
                assert_eq!(&whole[..], &message[..], "{c}, {n} bytes");
            }
        }
    }

    #[test]
    fn less_than_a_header_is_left_alone() {
        for c in Compressor::ALL {
            assert_eq!(compress_message(b"short", c), b"short");
        }
    }

    #[test]
    fn contexts_are_reused_across_messages() {
        let mut contexts = None;
        for c in Compressor::ALL {
            for n in [5000, 10, 70_000] {
                let message = op_msg(n);
                let mut buf = BytesMut::from(&b"earlier reply"[..]);
                buf.extend_from_slice(&message);
                compress_in_place(&mut buf, 13, c, &mut contexts);
                assert_eq!(&buf[..13], b"earlier reply");
                let list = CompressorList::from_iter([c]);
                let (used, whole) = decompress_frame(&buf[13..], list, &mut contexts).unwrap();
                assert_eq!(used, c);
                assert_eq!(&whole[..], &message[..]);
            }
        }
    }

    #[test]
    fn only_negotiated_compressors_are_accepted() {
        let message = op_msg(100);
        let snappy = CompressorList::from_iter([Compressor::Snappy]);
        let zlib = compress_message(&message, Compressor::Zlib);
        assert!(matches!(
            unwrap_frame(&zlib, snappy),
            Err(WireError::CompressorNotNegotiated(Compressor::Zlib))
        ));
        assert!(unwrap_frame(&zlib, CompressorList::none()).is_err());
        // noop rides along with any negotiated compressor, never alone.
        let noop = compress_message(&message, Compressor::Noop);
        assert!(unwrap_frame(&noop, snappy).is_ok());
        assert!(unwrap_frame(&noop, CompressorList::none()).is_err());
        let mut unknown = noop.clone();
        unknown[24] = 4;
        assert!(matches!(
            unwrap_frame(&unknown, CompressorList::all()),
            Err(WireError::UnknownCompressor(4))
        ));
    }

    /// Sets the frame's uncompressedSize field.
    fn with_declared_size(frame: &[u8], size: i32) -> Vec<u8> {
        let mut f = frame.to_vec();
        f[20..24].copy_from_slice(&size.to_le_bytes());
        f
    }

    #[test]
    fn a_wrong_uncompressed_size_fails_for_every_compressor() {
        let message = op_msg(2000);
        let real = (message.len() - 16) as i32;
        for c in Compressor::ALL {
            let frame = compress_message(&message, c);
            let all = CompressorList::all();
            for size in [real - 1, real + 1, 0, real * 2] {
                assert!(
                    matches!(
                        unwrap_frame(&with_declared_size(&frame, size), all),
                        Err(WireError::Decompression(..))
                    ),
                    "{c} accepted uncompressedSize {size} for {real} bytes"
                );
            }
            for size in [-1, i32::MIN, (MAX_MESSAGE_SIZE_BYTES - 15) as i32, i32::MAX] {
                assert!(
                    matches!(
                        unwrap_frame(&with_declared_size(&frame, size), all),
                        Err(WireError::BadUncompressedSize(_))
                    ),
                    "{c} accepted uncompressedSize {size}"
                );
            }
        }
    }

    #[test]
    fn truncated_and_corrupt_data_fail() {
        let message = op_msg(5000);
        let all = CompressorList::all();
        for c in Compressor::ALL {
            let frame = compress_message(&message, c);
            for cut in [frame.len() - 1, frame.len() / 2, 26, 25] {
                assert!(
                    unwrap_frame(&frame[..cut], all).is_err(),
                    "{c} cut at {cut}"
                );
            }
            let mut junk = frame.clone();
            junk.extend_from_slice(b"trailing");
            if c != Compressor::Snappy {
                // snappy's format has no end marker: extra bytes only make
                // it fail by size, which the size test covers.
                assert!(unwrap_frame(&junk, all).is_err(), "{c} with trailing bytes");
            }
            let mut flipped = frame.clone();
            for b in &mut flipped[25..35] {
                *b ^= 0x5a;
            }
            if c != Compressor::Noop {
                assert!(unwrap_frame(&flipped, all).is_err(), "{c} corrupted");
            }
        }
        // Headers shorter than the compression header.
        let frame = compress_message(&message, Compressor::Zstd);
        for cut in [16, 20, 24] {
            assert!(matches!(
                unwrap_frame(&frame[..cut], all),
                Err(WireError::Malformed(_))
            ));
        }
    }

    #[test]
    fn a_bomb_gets_no_more_than_its_declared_size() {
        // 16 MB of zeros compress to a few KB; declaring less than that
        // must fail without producing more.
        let zeros = vec![0u8; 16 << 20];
        let mut message = Vec::new();
        message.extend(((16 + zeros.len()) as i32).to_le_bytes());
        message.extend([0u8; 8]);
        message.extend(OP_MSG.to_le_bytes());
        message.extend(&zeros);
        let all = CompressorList::all();
        for c in [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd] {
            let frame = compress_message(&message, c);
            assert!(frame.len() < 1 << 20, "{c}: {} bytes", frame.len());
            let small = with_declared_size(&frame, 1000);
            match unwrap_frame(&small, all) {
                Err(WireError::Decompression(..)) => {}
                other => panic!("{c}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_few_bytes_cannot_claim_a_large_message() {
        let message = op_msg(100);
        let all = CompressorList::all();
        for c in Compressor::ALL {
            let frame = compress_message(&message, c);
            let claim = with_declared_size(&frame, 40_000_000);
            match unwrap_frame(&claim, all) {
                Err(WireError::Decompression(_, why)) if c == Compressor::Snappy => {
                    // snappy's own header says how long it is.
                    assert!(why.contains("not the uncompressedSize"), "{why}");
                }
                Err(WireError::Decompression(_, why)) => {
                    assert!(why.contains("at most"), "{c}: {why}")
                }
                other => panic!("{c}: {other:?}"),
            }
        }
    }

    #[test]
    fn only_requests_may_be_compressed() {
        let all = CompressorList::all();
        let mut frame = compress_message(&op_msg(10), Compressor::Snappy);
        for op in [1, OP_COMPRESSED, 2001, -1] {
            frame[16..20].copy_from_slice(&i32::to_le_bytes(op));
            assert!(matches!(
                unwrap_frame(&frame, all),
                Err(WireError::UnsupportedOpcode(o)) if o == op
            ));
        }
    }

    #[test]
    fn the_counters_add_up_data_bytes() {
        let message = op_msg(10_000);
        let before = stats(Compressor::Zlib);
        let frame = compress_message(&message, Compressor::Zlib);
        unwrap_frame(&frame, CompressorList::all()).unwrap();
        let after = stats(Compressor::Zlib);
        let data = (message.len() - 16) as u64;
        let packed = (frame.len() - 25) as u64;
        // Other tests may compress at the same time: at least ours.
        assert!(after.compressor_bytes_in - before.compressor_bytes_in >= data);
        assert!(after.compressor_bytes_out - before.compressor_bytes_out >= packed);
        assert!(after.decompressor_bytes_in - before.decompressor_bytes_in >= packed);
        assert!(after.decompressor_bytes_out - before.decompressor_bytes_out >= data);
    }
}
