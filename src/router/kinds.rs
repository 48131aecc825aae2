//! The bounds that make a collection capped (`capped`, `size`, `max`),
//! read from its options; what a capped collection does with them is in
//! [`super::capped`].

use bson::{Bson, Document};

/// A capped collection's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capped {
    /// The most bytes of documents it holds.
    pub size: u64,
    /// The most documents it holds, if bounded.
    pub max: Option<u64>,
}

/// The largest `size`: 1 PB, as MongoDB allows.
pub const MAX_SIZE: i64 = 1 << 50;
/// `max` must stay below 2^31.
pub const MAX_DOCS_LIMIT: i64 = 1 << 31;
/// What a `max` of zero or less stands for: no bound, as MongoDB stores it.
pub const UNBOUNDED_DOCS: i64 = 0x7fff_ffff;

impl Capped {
    /// The bounds the options document of a collection gives it (`capped:
    /// true` with `size`, and `max` when bounded), or `None` when it is
    /// not capped.
    pub fn of_options(options: &Document) -> Option<Capped> {
        if !options.get("capped").is_some_and(truthy) {
            return None;
        }
        let number = |name| options.get(name).and_then(as_i64);
        let size = number("size").unwrap_or(0).max(0) as u64;
        let max = number("max").filter(|&m| m > 0 && m < UNBOUNDED_DOCS);
        Some(Capped {
            size,
            max: max.map(|m| m as u64),
        })
    }

    /// Whether `count` documents of `bytes` bytes pass the bounds.
    pub fn exceeded(&self, count: u64, bytes: u64) -> bool {
        bytes > self.size || self.max.is_some_and(|m| count > m)
    }
}

/// A `size` as MongoDB 7.0 keeps it: rounded up to a multiple of 256.
pub fn rounded_size(size: i64) -> i64 {
    size.saturating_add(0xff) & !0xff
}

/// A `max` as MongoDB keeps it: zero or less means unbounded.
pub fn adjusted_max(max: i64) -> i64 {
    if max <= 0 {
        UNBOUNDED_DOCS
    } else {
        max
    }
}

fn truthy(value: &Bson) -> bool {
    match value {
        Bson::Boolean(b) => *b,
        Bson::Null | Bson::Undefined => false,
        other => as_i64(other).is_none_or(|n| n != 0),
    }
}

fn as_i64(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(d) if d.is_finite() => Some(*d as i64),
        Bson::Decimal128(d) => d.to_string().parse::<f64>().ok().map(|d| d as i64),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn sizes_round_up_to_256_bytes_and_max_of_zero_is_unbounded() {
        assert_eq!(rounded_size(1), 256);
        assert_eq!(rounded_size(256), 256);
        assert_eq!(rounded_size(1000), 1024);
        assert_eq!(adjusted_max(0), UNBOUNDED_DOCS);
        assert_eq!(adjusted_max(-3), UNBOUNDED_DOCS);
        assert_eq!(adjusted_max(5), 5);
    }

    #[test]
    fn bounds_come_from_the_options_document() {
        assert_eq!(Capped::of_options(&doc! {"validator": {}}), None);
        assert_eq!(
            Capped::of_options(&doc! {"capped": false, "size": 4096}),
            None
        );
        assert_eq!(
            Capped::of_options(&doc! {"capped": true, "size": 4096, "max": 10}),
            Some(Capped {
                size: 4096,
                max: Some(10)
            })
        );
        assert_eq!(
            Capped::of_options(&doc! {"capped": true, "size": 4096_i64, "max": UNBOUNDED_DOCS}),
            Some(Capped {
                size: 4096,
                max: None
            })
        );
    }

    #[test]
    fn either_bound_is_exceeded_alone() {
        let c = Capped {
            size: 1000,
            max: Some(3),
        };
        assert!(!c.exceeded(3, 1000));
        assert!(c.exceeded(4, 10));
        assert!(c.exceeded(1, 1001));
        assert!(!Capped {
            size: 1000,
            max: None
        }
        .exceeded(1_000_000, 1000));
    }
}
