//! Throughput as Cosmos DB provisions it: request units per second
//! (RU/s), manual or autoscale, for a collection or shared by a database,
//! and how many physical partitions a figure needs. Pure values: the
//! router stores them ([`crate::router::provision`]) and spends them.

use bson::{doc, Bson, Document};

use crate::bail;
use crate::error::Result;

/// The least manual throughput of a collection or a database.
pub const MIN_MANUAL_RUS: u32 = 400;
/// Manual throughput comes in steps of this many RU/s.
pub const MANUAL_STEP: u32 = 100;
/// The least autoscale maximum.
pub const MIN_AUTOSCALE_MAX: u32 = 1000;
/// Autoscale maximums come in steps of this many RU/s.
pub const AUTOSCALE_STEP: u32 = 1000;
/// The most throughput one collection or database may be given (Cosmos
/// DB's default account limit).
pub const MAX_RUS: u32 = 1_000_000;
/// The most one physical partition serves.
pub const PARTITION_MAX_RUS: u32 = 10_000;

/// Throughput provisioned on a collection or a database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throughput {
    /// A fixed number of RU/s (`offerThroughput`).
    Manual(u32),
    /// Scales between 10% of `max` and `max` with the load
    /// (`autoScaleSettings.maxThroughput`).
    Autoscale { max: u32 },
}

impl Throughput {
    /// Manual throughput, checked as Cosmos DB checks `offerThroughput`.
    pub fn manual(rus: i64) -> Result<Throughput> {
        if rus < MIN_MANUAL_RUS as i64 || rus > MAX_RUS as i64 || rus % MANUAL_STEP as i64 != 0 {
            bail!(
                BadValue,
                "The offer should have valid throughput values between {MIN_MANUAL_RUS} and {MAX_RUS} inclusive in increments of {MANUAL_STEP}; got {rus}."
            );
        }
        Ok(Throughput::Manual(rus as u32))
    }

    /// Autoscale throughput, checked as Cosmos DB checks
    /// `autoScaleSettings.maxThroughput`.
    pub fn autoscale(max: i64) -> Result<Throughput> {
        if max < MIN_AUTOSCALE_MAX as i64
            || max > MAX_RUS as i64
            || max % AUTOSCALE_STEP as i64 != 0
        {
            bail!(
                BadValue,
                "The autoscale max throughput should be between {MIN_AUTOSCALE_MAX} and {MAX_RUS} inclusive in increments of {AUTOSCALE_STEP}; got {max}."
            );
        }
        Ok(Throughput::Autoscale { max: max as u32 })
    }

    /// The RU/s the budget holds. Autoscale scales up at once, so its
    /// budget is always its maximum.
    pub fn budget(self) -> u32 {
        match self {
            Throughput::Manual(n) => n,
            Throughput::Autoscale { max } => max,
        }
    }

    /// What Cosmos DB reports as `provisionedThroughput`: the manual
    /// figure, or the least an autoscale setting scales down to (10% of
    /// its maximum).
    pub fn floor(self) -> u32 {
        match self {
            Throughput::Manual(n) => n,
            Throughput::Autoscale { max } => max / 10,
        }
    }

    /// The physical partitions this throughput needs:
    /// `ceil(budget / PARTITION_MAX_RUS)`.
    pub fn partitions_needed(self) -> u64 {
        (self.budget() as u64)
            .div_ceil(PARTITION_MAX_RUS as u64)
            .max(1)
    }

    /// The fields `GetCollection` and `GetDatabase` show.
    pub fn reply_fields(self) -> Document {
        let mut d = doc! {"provisionedThroughput": self.floor() as i32};
        if let Throughput::Autoscale { max } = self {
            d.insert("autoScaleSettings", doc! {"maxThroughput": max as i32});
        }
        d
    }

    /// The stored form.
    pub fn to_document(self) -> Document {
        match self {
            Throughput::Manual(n) => doc! {"manual": n as i64},
            Throughput::Autoscale { max } => doc! {"autoscaleMax": max as i64},
        }
    }

    pub fn from_document(d: &Document) -> Option<Throughput> {
        let to_u32 = |v: i64| u32::try_from(v).ok();
        if let Ok(n) = d.get_i64("manual") {
            return to_u32(n).map(Throughput::Manual);
        }
        let max = to_u32(d.get_i64("autoscaleMax").ok()?)?;
        Some(Throughput::Autoscale { max })
    }
}

/// What is stored about a database of its own: Cosmos DB databases exist
/// before their first collection (`CreateDatabase`) and may hold
/// throughput their collections share.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DatabaseSettings {
    pub throughput: Option<Throughput>,
}

impl DatabaseSettings {
    pub fn to_document(self) -> Document {
        match self.throughput {
            Some(t) => doc! {"throughput": t.to_document()},
            None => Document::new(),
        }
    }

    pub fn from_document(d: &Document) -> Option<DatabaseSettings> {
        let throughput = match d.get("throughput") {
            None => None,
            Some(Bson::Document(t)) => Some(Throughput::from_document(t)?),
            Some(_) => return None,
        };
        Some(DatabaseSettings { throughput })
    }
}

/// The share of a database's throughput each collection sharing it
/// gets: an even split, so the rule is the same whatever the load.
pub fn shared_rus(database_rus: u32, sharing: usize) -> u32 {
    database_rus / sharing.max(1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    #[test]
    fn manual_throughput_is_checked_as_cosmos_does() {
        assert_eq!(Throughput::manual(400).unwrap(), Throughput::Manual(400));
        assert_eq!(
            Throughput::manual(1_000_000).unwrap(),
            Throughput::Manual(1_000_000)
        );
        for bad in [0, 300, 399, 450, 1_000_100, -400] {
            let e = Throughput::manual(bad).unwrap_err();
            assert!(matches!(e.code, ErrorCode::BadValue), "{bad}: {e:?}");
        }
    }

    #[test]
    fn autoscale_maximum_is_checked_in_thousands() {
        assert_eq!(
            Throughput::autoscale(4000).unwrap(),
            Throughput::Autoscale { max: 4000 }
        );
        for bad in [400, 999, 1500, 2_000_000] {
            assert!(Throughput::autoscale(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn budget_floor_and_partitions() {
        let manual = Throughput::Manual(40_000);
        assert_eq!((manual.budget(), manual.floor()), (40_000, 40_000));
        assert_eq!(manual.partitions_needed(), 4);
        assert_eq!(Throughput::Manual(10_100).partitions_needed(), 2);
        assert_eq!(Throughput::Manual(400).partitions_needed(), 1);
        let auto = Throughput::Autoscale { max: 20_000 };
        assert_eq!((auto.budget(), auto.floor()), (20_000, 2_000));
        assert_eq!(auto.partitions_needed(), 2);
    }

    #[test]
    fn replies_show_floor_and_maximum() {
        assert_eq!(
            Throughput::Manual(1200).reply_fields(),
            doc! {"provisionedThroughput": 1200}
        );
        assert_eq!(
            Throughput::Autoscale { max: 10_000 }.reply_fields(),
            doc! {"provisionedThroughput": 1000, "autoScaleSettings": {"maxThroughput": 10_000}}
        );
    }

    #[test]
    fn stored_forms_round_trip() {
        for t in [Throughput::Manual(700), Throughput::Autoscale { max: 5000 }] {
            assert_eq!(Throughput::from_document(&t.to_document()), Some(t));
            let db = DatabaseSettings {
                throughput: Some(t),
            };
            assert_eq!(DatabaseSettings::from_document(&db.to_document()), Some(db));
        }
        let none = DatabaseSettings::default();
        assert_eq!(
            DatabaseSettings::from_document(&none.to_document()),
            Some(none)
        );
        assert_eq!(Throughput::from_document(&doc! {"manual": -1_i64}), None);
        assert_eq!(
            DatabaseSettings::from_document(&doc! {"throughput": 3}),
            None
        );
    }

    #[test]
    fn shared_throughput_splits_evenly() {
        assert_eq!(shared_rus(1000, 4), 250);
        assert_eq!(shared_rus(1000, 3), 333);
        assert_eq!(shared_rus(1000, 0), 1000);
    }
}
