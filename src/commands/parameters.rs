//! Server parameters (`getParameter`, `setParameter`) and `fsync`.
//!
//! The parameters `getParameter` reports are the ones a client may ask
//! about; of those, `internalQueryMaxBlockingSortMemoryUsageBytes` (the
//! memory a blocking sort or stage may hold, `--max-blocking-stage-bytes`
//! at start) can be changed at runtime, as in MongoDB; the others are
//! fixed at start, and `setParameter` refuses them as mongod does.

use std::sync::atomic::{AtomicU64, Ordering};

use bson::{doc, Bson, Document};

use super::args::{number_as_i64, type_name};
use super::request::Request;
use crate::bail;
use crate::error::Result;

/// The parameters that may change while the server runs.
#[derive(Debug)]
pub struct Parameters {
    blocking_bytes: AtomicU64,
}

const BLOCKING_BYTES: &str = "internalQueryMaxBlockingSortMemoryUsageBytes";

/// Reported by `getParameter`, fixed at start.
fn fixed() -> Document {
    doc! {
        "featureCompatibilityVersion": {"version": "7.0"},
        "authenticationMechanisms": ["SCRAM-SHA-1", "SCRAM-SHA-256"],
        "maxBSONDepth": 100,
    }
}

impl Parameters {
    pub fn new(blocking_bytes: usize) -> Parameters {
        Parameters {
            blocking_bytes: AtomicU64::new(blocking_bytes as u64),
        }
    }

    /// The most bytes a blocking sort or stage may hold in memory.
    pub fn blocking_bytes(&self) -> usize {
        usize::try_from(self.blocking_bytes.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    fn all(&self) -> Document {
        let mut all = fixed();
        all.insert(
            BLOCKING_BYTES,
            self.blocking_bytes.load(Ordering::Relaxed) as i64,
        );
        all
    }
}

pub async fn get_parameter(req: &Request<'_>) -> Result<Document> {
    let everything = matches!(req.body.get("getParameter"), Some(Bson::String(s)) if s == "*");
    let mut reply = Document::new();
    for (k, v) in req.state.parameters.all() {
        if everything || req.body.contains_key(&k) {
            reply.insert(k, v);
        }
    }
    if reply.is_empty() && !everything {
        bail!(InvalidOptions, "no option found to get");
    }
    Ok(reply)
}

/// `setParameter`: `{setParameter: 1, <name>: <value>}`; the reply
/// carries the former value as `was`.
pub async fn set_parameter(req: &Request<'_>) -> Result<Document> {
    let mut named =
        req.body.iter().skip(1).filter(|(k, _)| {
            !k.starts_with('$') && !super::args::GENERIC_FIELDS.contains(&k.as_str())
        });
    let Some((name, value)) = named.next() else {
        bail!(
            InvalidOptions,
            "no option found to set, use help:true to see options "
        );
    };
    if named.next().is_some() {
        bail!(
            InvalidOptions,
            "setParameter sets one parameter at a time here"
        );
    }
    let parameters = &req.state.parameters;
    if name == BLOCKING_BYTES {
        let bytes = match number_as_i64(value) {
            Some(n) if n > 0 => n as u64,
            Some(n) => bail!(
                BadValue,
                "Invalid value for {BLOCKING_BYTES}: {n} is not greater than 0"
            ),
            None => bail!(
                BadValue,
                "Invalid value for {BLOCKING_BYTES}: a number is required, not {}",
                type_name(value)
            ),
        };
        let was = parameters.blocking_bytes.swap(bytes, Ordering::Relaxed);
        return Ok(doc! {"was": was as i64});
    }
    if fixed().contains_key(name) {
        bail!(
            IllegalOperation,
            "not allowed to change [{name}] at runtime"
        );
    }
    bail!(
        InvalidOptions,
        "attempted to set unrecognized parameter [{name}], use help:true to see options "
    )
}

/// `fsync`: everything written so far is made durable before the reply.
/// `lock: true` (blocking writes until `fsyncUnlock`) is refused.
pub async fn fsync(req: &Request<'_>) -> Result<Document> {
    if super::args::bool_or("fsync", &req.body, "lock", false)? {
        bail!(
            CommandNotSupported,
            "fsync with lock: true is not supported by Shardgate"
        );
    }
    req.state.router.sync_all().await?;
    Ok(doc! {"numFiles": 1})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blocking_limit_changes_and_the_rest_is_reported() {
        let p = Parameters::new(100);
        assert_eq!(p.blocking_bytes(), 100);
        p.blocking_bytes.store(5, Ordering::Relaxed);
        assert_eq!(p.blocking_bytes(), 5);
        let all = p.all();
        assert_eq!(all.get_i64(BLOCKING_BYTES).ok(), Some(5));
        assert_eq!(all.get_i32("maxBSONDepth").ok(), Some(100));
    }
}
