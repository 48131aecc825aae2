//! Server parameters (`getParameter`, `setParameter`) and `fsync`.
//!
//! The parameters `getParameter` reports are the ones a client may ask
//! about; of those, `internalQueryMaxBlockingSortMemoryUsageBytes` (the
//! memory a blocking sort or stage may hold, `--max-blocking-stage-bytes`
//! at start) and `transactionLifetimeLimitSeconds` (default 60) can be
//! changed at runtime, as in MongoDB; the others are fixed at start, and
//! `setParameter` refuses them as mongod does.

use bson::{doc, Bson, Document};

use super::args::{number_as_i64, type_name};
use super::request::Request;
use super::state::Parameters;
use crate::bail;
use crate::error::Result;

/// How long a transaction may run before it is aborted.
const TXN_LIFETIME: &str = "transactionLifetimeLimitSeconds";

pub async fn get_parameter(req: &Request<'_>) -> Result<Document> {
    let everything = matches!(req.body.get("getParameter"), Some(Bson::String(s)) if s == "*");
    let mut reply = Document::new();
    let mut all = req.state.parameters.all();
    all.insert(TXN_LIFETIME, req.state.sessions.lifetime_secs() as i64);
    for (k, v) in all {
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
    if name == TXN_LIFETIME {
        let secs = match number_as_i64(value) {
            Some(n) if n > 0 => n as u64,
            _ => bail!(
                BadValue,
                "Invalid value for {TXN_LIFETIME}: a number of seconds greater than 0 is required"
            ),
        };
        let was = req.state.sessions.set_lifetime_secs(secs);
        return Ok(doc! {"was": was as i64});
    }
    if name == Parameters::BLOCKING_BYTES {
        let bytes = match number_as_i64(value) {
            Some(n) if n > 0 => n as u64,
            Some(n) => bail!(
                BadValue,
                "Invalid value for {}: {n} is not greater than 0",
                Parameters::BLOCKING_BYTES
            ),
            None => bail!(
                BadValue,
                "Invalid value for {}: a number is required, not {}",
                Parameters::BLOCKING_BYTES,
                type_name(value)
            ),
        };
        let was = parameters.set_blocking_bytes(bytes);
        return Ok(doc! {"was": was as i64});
    }
    if parameters.is_fixed(name) {
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
