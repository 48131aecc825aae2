//! MongoDB's total order over BSON values (API skeleton; see module owner).

use std::cmp::Ordering;

use bson::Bson;

/// Compares two values in MongoDB's BSON comparison order.
pub fn compare(a: &Bson, b: &Bson) -> Ordering {
    let _ = (a, b);
    Ordering::Equal
}

/// True when MongoDB considers the two values equal (`1 == 1.0 == NumberLong(1)`).
pub fn values_equal(a: &Bson, b: &Bson) -> bool {
    compare(a, b) == Ordering::Equal
}
