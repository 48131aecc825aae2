//! The profiler: the `profile` command and `<db>.system.profile`.
//!
//! Each database has a level: 0 records nothing, 1 the operations slower
//! than `slowms` (of which `sampleRate` are kept) or, when a `filter` is
//! set, those the filter matches, 2 every operation. A recorded operation
//! becomes one document of MongoDB's shape (`op`, `ns`, `command`,
//! `keysExamined`, `docsExamined`, `nreturned`, `millis`, `planSummary`,
//! `ts`, `client` …) in `<db>.system.profile`, a 1 MB capped collection
//! made when first needed, written before the command replies so the
//! next query sees it.
//!
//! `slowms` and `sampleRate` are the server's, as in MongoDB: they also
//! decide which operations the slow-query log line reports.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document};

use super::args::{int_or_long, number_as_i64};
use super::request::{CommandReply, Request};
use super::state::{ConnectionInfo, ServerState};
use crate::base::Namespace;
use crate::error::{Error, ErrorCode, Result};
use crate::query::filter::Filter;
use crate::router::charge::Meter;
use crate::router::DocumentValidation;

/// The size of a `system.profile` collection the profiler makes, as
/// MongoDB makes it.
const PROFILE_BYTES: i64 = 1024 * 1024;

/// Commands never profiled: connection handshakes and monitoring, which
/// drivers send on their own.
const NOT_PROFILED: &[&str] = &["hello", "isMaster", "ismaster", "ping", "endSessions"];

/// `profile: <level>` (−1 to read only), with `slowms`, `sampleRate` and
/// `filter` (a match expression, or `"unset"`). Replies with the former
/// settings, as MongoDB does.
pub async fn profile(req: &Request<'_>) -> Result<Document> {
    let profiler = &req.state.profiler;
    let level = match req.body.get("profile").and_then(number_as_i64) {
        Some(l @ -1..=2) => l as i32,
        _ => {
            return Err(Error::new(
                ErrorCode::BadValue,
                "Invalid profiling level, must be -1, 0, 1, or 2",
            ))
        }
    };
    let slow_ms = match req.body.get("slowms") {
        None => None,
        Some(v) => Some(number_as_i64(v).ok_or_else(|| {
            Error::type_mismatch(format!(
                "BSON field 'profile.slowms' is the wrong type '{}', expected types '[long, int, decimal, double]'",
                super::args::type_name(v)
            ))
        })?),
    };
    let sample_rate = match req.body.get("sampleRate") {
        None => None,
        Some(v) => match v.as_f64().or_else(|| number_as_i64(v).map(|n| n as f64)) {
            Some(r) if (0.0..=1.0).contains(&r) => Some(r),
            Some(_) => {
                return Err(Error::new(
                    ErrorCode::BadValue,
                    "'sampleRate' must be between 0.0 and 1.0 inclusive",
                ))
            }
            None => {
                return Err(Error::type_mismatch(format!(
                "BSON field 'profile.sampleRate' is the wrong type '{}', expected type 'double'",
                super::args::type_name(v)
            )))
            }
        },
    };
    // `filter`: a match expression, or "unset" to remove it.
    let filter = match req.body.get("filter") {
        None => None,
        Some(Bson::String(s)) if s == "unset" => Some(None),
        Some(Bson::Document(d)) => Some(Some((d.clone(), Arc::new(Filter::parse(d)?)))),
        Some(other) => {
            return Err(Error::new(
                ErrorCode::BadValue,
                format!(
                    "Expected an object, or the string 'unset', for 'filter', got: {}",
                    super::args::type_name(other)
                ),
            ))
        }
    };

    let current = profiler.of(&req.db);
    let mut reply = doc! {
        "was": current.level,
        "slowms": int_or_long(profiler.slow_ms()),
        "sampleRate": profiler.sample_rate(),
    };
    if let Some((filter, _)) = &current.filter {
        reply.insert("filter", filter.clone());
    }
    if let Some(ms) = slow_ms {
        profiler.set_slow_ms(u64::try_from(ms).unwrap_or(0));
    }
    if let Some(rate) = sample_rate {
        profiler.set_sample_rate(rate);
    }
    let changed_filter = filter.is_some();
    if level >= 0 || changed_filter {
        profiler.set(
            &req.db,
            super::activity::DbProfile {
                level: if level >= 0 { level } else { current.level },
                filter: filter.unwrap_or(current.filter),
            },
        );
    }
    if changed_filter {
        reply.insert(
            "note",
            "When a filter expression is set, slowms and sampleRate are not used for profiling and slow-query log lines.",
        );
    }
    Ok(reply)
}

/// What the profiler keeps of a command from its start, taken only when
/// its database is profiled.
pub(super) struct Watched {
    db: String,
    ns: String,
    op: &'static str,
    command: Document,
}

impl Watched {
    /// Starts watching a command on `db` (see [`Profiler::watches`]):
    /// asks `meter` for the plan's summary and keeps the command as the
    /// profile shows it.
    pub(super) fn start(
        db: &str,
        ns: String,
        name: &str,
        body: &Document,
        sequences: &[(String, Vec<bytes::Bytes>)],
        meter: &Meter,
    ) -> Option<Watched> {
        if NOT_PROFILED.contains(&name) || ns.ends_with(".system.profile") {
            return None;
        }
        meter.want_plan_summary();
        Some(Watched {
            db: db.to_string(),
            ns,
            op: super::activity::op_kind(name),
            command: profiled_command(name, body, sequences),
        })
    }

    /// Writes the profile entry when the database's settings keep it.
    pub(super) async fn finish(
        self,
        state: &ServerState,
        conn: &ConnectionInfo,
        result: &Result<CommandReply>,
        elapsed: Duration,
        meter: &Meter,
    ) {
        let entry = self.entry(conn, result, elapsed, meter);
        if !state.profiler.keeps(&self.db, elapsed, &entry) {
            return;
        }
        if let Err(e) = write(state, &self.db, entry).await {
            tracing::warn!(db = %self.db, "cannot write to system.profile: {e}");
        }
    }

    /// The profile document of the finished command.
    fn entry(
        &self,
        conn: &ConnectionInfo,
        result: &Result<CommandReply>,
        elapsed: Duration,
        meter: &Meter,
    ) -> Document {
        let work = meter.work();
        let mut entry = doc! {
            "op": self.op,
            "ns": self.ns.clone(),
            "command": self.command.clone(),
        };
        let reads = matches!(
            self.op,
            "query" | "getmore" | "update" | "remove" | "command"
        );
        if reads {
            entry.insert("keysExamined", int_or_long(work.keys_examined));
            entry.insert("docsExamined", int_or_long(work.docs_examined));
        }
        let reply = match result {
            Ok(CommandReply::Document(reply)) => Some(reply),
            _ => None,
        };
        let count = |field: &str| reply.and_then(|r| r.get(field)).and_then(number_as_i64);
        match self.op {
            "query" | "getmore" => {
                entry.insert("nreturned", int_or_long(work.returned));
            }
            "insert" => {
                entry.insert("ninserted", int_or_long(count("n").unwrap_or(0)));
            }
            "update" => {
                let upserted = reply
                    .and_then(|r| r.get_array("upserted").ok())
                    .map_or(0, |u| u.len() as i64);
                entry.insert("nMatched", int_or_long(count("n").unwrap_or(0) - upserted));
                entry.insert("nModified", int_or_long(count("nModified").unwrap_or(0)));
                entry.insert("nUpserted", int_or_long(upserted));
            }
            "remove" => {
                entry.insert("ndeleted", int_or_long(count("n").unwrap_or(0)));
            }
            _ if work.returned > 0 => {
                entry.insert("nreturned", int_or_long(work.returned));
            }
            _ => {}
        }
        entry.insert("numYield", 0);
        match result {
            Ok(_) => {
                entry.insert("ok", 1.0);
            }
            Err(e) => {
                entry.insert("ok", 0.0);
                entry.insert("errMsg", e.message.clone());
                entry.insert("errName", e.code.name().into_owned());
                entry.insert("errCode", e.code.number());
            }
        }
        entry.insert("protocol", "op_msg");
        entry.insert("millis", int_or_long(elapsed.as_millis()));
        if let Some(plan) = meter.plan_summary() {
            entry.insert("planSummary", plan);
        }
        entry.insert("ts", bson::DateTime::now());
        entry.insert("client", conn.peer.ip().to_string());
        if let Some(app) = conn.app_name() {
            entry.insert("appName", app);
        }
        entry.insert("allUsers", Bson::Array(Vec::new()));
        entry.insert("user", "");
        entry
    }
}

/// The command as a profile entry shows it: an update's or delete's
/// first statement (`{q, u, multi, upsert}`, `{q, limit}`), as mongod
/// records each statement; the command document otherwise.
fn profiled_command(
    name: &str,
    body: &Document,
    sequences: &[(String, Vec<bytes::Bytes>)],
) -> Document {
    let statements = match name {
        "update" => "updates",
        "delete" => "deletes",
        _ => return body.clone(),
    };
    let first = body
        .get_array(statements)
        .ok()
        .and_then(|a| a.first())
        .and_then(Bson::as_document)
        .cloned()
        .or_else(|| {
            sequences
                .iter()
                .find(|(n, _)| n == statements)
                .and_then(|(_, docs)| docs.first())
                .and_then(|raw| bson::RawDocument::from_bytes(raw).ok())
                .and_then(|raw| Document::try_from(raw).ok())
        });
    first.unwrap_or_else(|| body.clone())
}

/// Appends `entry` to `<db>.system.profile`, making it when missing.
async fn write(state: &ServerState, db: &str, entry: Document) -> Result<()> {
    let ns = Namespace::new(db, "system.profile")?;
    let router = &state.router;
    if router.collection(&ns).is_none() {
        let options = super::capped::create_options(&doc! {
            "create": "system.profile",
            "capped": true,
            "size": PROFILE_BYTES,
        })?;
        match router.create_collection(&ns, options).await {
            Err(e) if e.code != ErrorCode::NamespaceExists => return Err(e),
            _ => {}
        }
    }
    let bytes = entry
        .to_vec()
        .map_err(|e| Error::internal(format!("cannot encode a profile entry: {e}")))?;
    let outcome = crate::router::without_journal_wait(router.insert(
        &ns,
        vec![bytes],
        true,
        DocumentValidation::Bypass,
    ))
    .await?;
    match outcome.errors.into_iter().next() {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_is_profiled_as_its_first_statement() {
        let body =
            doc! {"update": "c", "updates": [{"q": {"a": 1}, "u": {"$set": {"b": 2}}}], "$db": "d"};
        assert_eq!(
            profiled_command("update", &body, &[]),
            doc! {"q": {"a": 1}, "u": {"$set": {"b": 2}}}
        );
        let stmt = doc! {"q": {"a": 2}, "limit": 1}.to_vec().unwrap();
        let body = doc! {"delete": "c", "$db": "d"};
        assert_eq!(
            profiled_command(
                "delete",
                &body,
                &[("deletes".to_string(), vec![bytes::Bytes::from(stmt)])]
            ),
            doc! {"q": {"a": 2}, "limit": 1}
        );
        assert_eq!(profiled_command("find", &body, &[]), body);
    }
}
