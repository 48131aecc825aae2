//! The wire compressors by name and number, and ordered lists of them.
//!
//! The flags name them (`--compressors`), `hello` negotiates them by name,
//! and OP_COMPRESSED frames carry their number; the algorithms themselves
//! are the wire layer's (`wire::compression`). A connection's list lives
//! in an atomic ([`CompressorList::to_bits`]) so the connection task can
//! read what `hello` agreed without a lock.

use std::fmt;

/// A wire compressor, numbered as in OP_COMPRESSED's `compressorId`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compressor {
    /// The message as it is; for tests.
    Noop = 0,
    Snappy = 1,
    Zlib = 2,
    Zstd = 3,
}

impl Compressor {
    pub const ALL: [Compressor; 4] = [
        Compressor::Noop,
        Compressor::Snappy,
        Compressor::Zlib,
        Compressor::Zstd,
    ];

    /// `compressorId` in an OP_COMPRESSED header.
    pub fn id(self) -> u8 {
        self as u8
    }

    pub fn from_id(id: u8) -> Option<Compressor> {
        Compressor::ALL.get(usize::from(id)).copied()
    }

    /// The name `hello` and the flags use.
    pub fn name(self) -> &'static str {
        match self {
            Compressor::Noop => "noop",
            Compressor::Snappy => "snappy",
            Compressor::Zlib => "zlib",
            Compressor::Zstd => "zstd",
        }
    }

    /// Names are matched exactly, as mongod matches them.
    pub fn from_name(name: &str) -> Option<Compressor> {
        Compressor::ALL.into_iter().find(|c| c.name() == name)
    }
}

impl fmt::Display for Compressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Distinct compressors in order of preference; empty means no compression.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompressorList {
    /// Four bits per entry, first entry lowest: the id plus one; 0 ends the list.
    bits: u16,
}

impl CompressorList {
    /// mongod's default `net.compression.compressors`.
    pub const DEFAULT_FLAG: &'static str = "snappy,zstd,zlib";

    pub fn none() -> CompressorList {
        CompressorList::default()
    }

    /// Every compressor (the fuzzer's codec accepts them all).
    pub fn all() -> CompressorList {
        Compressor::ALL.into_iter().collect()
    }

    pub fn is_empty(self) -> bool {
        self.bits == 0
    }

    pub fn contains(self, c: Compressor) -> bool {
        self.iter().any(|x| x == c)
    }

    /// Appends `c` unless it is already there (the list has room for
    /// every compressor once).
    pub fn push(&mut self, c: Compressor) {
        if self.contains(c) {
            return;
        }
        let len = self.iter().count();
        self.bits |= u16::from(c.id() + 1) << (4 * len);
    }

    pub fn iter(self) -> impl Iterator<Item = Compressor> {
        let mut bits = self.bits;
        std::iter::from_fn(move || {
            let entry = (bits & 0xf) as u8;
            bits >>= 4;
            entry.checked_sub(1).and_then(Compressor::from_id)
        })
    }

    /// The entries of `offered` that are in this list, in `offered`'s
    /// order: what a server with this list agrees to with a client.
    pub fn agree<'a>(self, offered: impl IntoIterator<Item = &'a str>) -> CompressorList {
        offered
            .into_iter()
            .filter_map(Compressor::from_name)
            .filter(|c| self.contains(*c))
            .collect()
    }

    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(Compressor::name).collect()
    }

    /// For an atomic: [`CompressorList::from_bits`] gives the list back.
    pub fn to_bits(self) -> u16 {
        self.bits
    }

    pub fn from_bits(bits: u16) -> CompressorList {
        // Keep the entries up to the first that is not a compressor, so
        // any bits make a valid list.
        CompressorList { bits }.iter().collect()
    }

    /// Parses `--compressors`: names separated by commas, or `disabled`.
    pub fn parse_flag(s: &str) -> Result<CompressorList, String> {
        if s == "disabled" {
            return Ok(CompressorList::none());
        }
        let mut list = CompressorList::none();
        for name in s.split(',').map(str::trim) {
            let c = Compressor::from_name(name).ok_or_else(|| {
                format!(
                    "unknown network message compressor '{name}': \
                     use snappy, zstd, zlib, noop, or disabled"
                )
            })?;
            list.push(c);
        }
        Ok(list)
    }
}

impl FromIterator<Compressor> for CompressorList {
    fn from_iter<I: IntoIterator<Item = Compressor>>(iter: I) -> CompressorList {
        let mut list = CompressorList::none();
        for c in iter {
            list.push(c);
        }
        list
    }
}

impl fmt::Display for CompressorList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("disabled");
        }
        f.write_str(&self.names().join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        for c in Compressor::ALL {
            assert_eq!(Compressor::from_id(c.id()), Some(c));
            assert_eq!(Compressor::from_name(c.name()), Some(c));
        }
        assert_eq!(Compressor::from_id(4), None);
        assert_eq!(Compressor::from_name("Snappy"), None);
    }

    #[test]
    fn the_flag_keeps_order_and_drops_repeats() {
        let list = CompressorList::parse_flag(CompressorList::DEFAULT_FLAG).unwrap();
        assert_eq!(list.names(), ["snappy", "zstd", "zlib"]);
        let list = CompressorList::parse_flag("zlib,noop,zlib").unwrap();
        assert_eq!(list.names(), ["zlib", "noop"]);
        assert!(CompressorList::parse_flag("disabled").unwrap().is_empty());
        assert!(CompressorList::parse_flag("lz4").is_err());
        assert!(CompressorList::parse_flag("").is_err());
        assert_eq!(list.to_string(), "zlib,noop");
    }

    #[test]
    fn agreement_follows_the_clients_order() {
        let server = CompressorList::parse_flag("snappy,zstd,zlib").unwrap();
        let agreed = server.agree(["zlib", "lz4", "snappy", "noop"]);
        assert_eq!(agreed.names(), ["zlib", "snappy"]);
        assert!(server.agree(["noop"]).is_empty());
        assert!(CompressorList::none().agree(["zstd"]).is_empty());
    }

    #[test]
    fn bits_round_trip_and_any_bits_are_a_list() {
        let list = CompressorList::all();
        assert_eq!(CompressorList::from_bits(list.to_bits()), list);
        assert_eq!(list.iter().count(), 4);
        for bits in [0u16, 0xffff, 0x0f21, 0x1111, 0x5000] {
            let l = CompressorList::from_bits(bits);
            assert!(l.iter().count() <= 4);
            assert_eq!(CompressorList::from_bits(l.to_bits()), l);
        }
    }
}
