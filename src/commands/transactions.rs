//! Multi-document transactions, by session, as a mongos serves them.
//!
//! A command with `autocommit: false` belongs to the transaction its
//! session (`lsid`) runs under `txnNumber`; `startTransaction: true`
//! begins it. Its statements run on the transaction's router
//! ([`crate::router::transaction`]), which reads one snapshot with the
//! transaction's own writes; `commitTransaction` writes everything in one
//! atomic batch, `abortTransaction` drops it. A statement that fails
//! aborts the transaction, as in MongoDB; a write conflict and an unknown
//! transaction carry the `TransientTransactionError` label, so a driver's
//! `withTransaction` runs the whole transaction again. A commit may be
//! sent again: the same transaction number answers as the first commit
//! did.
//!
//! A transaction that runs longer than `transactionLifetimeLimitSeconds`
//! is aborted; a session's record of its latest transaction is kept for
//! `logicalSessionTimeoutMinutes` after its last use.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{Bson, Document};
use parking_lot::Mutex;

use super::retry::retry_key;
use crate::error::{Error, ErrorCode, Result};
use crate::query::compare::type_name;
use crate::router::sessions::Outcome;
use crate::router::transaction::Transaction;
use crate::router::Router;

/// The commands a transaction may run, as in MongoDB 7.0 (where `create`
/// and `createIndexes` are allowed too; here catalog changes stay out of
/// transactions).
const IN_TRANSACTION: &[&str] = &[
    "find",
    "aggregate",
    "distinct",
    "insert",
    "update",
    "delete",
    "findAndModify",
    "findandmodify",
    "getMore",
    "killCursors",
    "commitTransaction",
    "abortTransaction",
];

/// Aggregation stages a transaction may not run.
const NOT_IN_TRANSACTION_STAGES: &[&str] = &["$out", "$merge", "$changeStream", "$collStats"];

/// MongoDB's `logicalSessionTimeoutMinutes`, which `hello` reports.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How often finished and expired transactions are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The transaction-related error labels.
const TRANSIENT: &str = "TransientTransactionError";
const UNKNOWN_COMMIT: &str = "UnknownTransactionCommitResult";

/// A transaction in progress.
pub struct Running {
    session: Vec<u8>,
    number: i64,
    txn: Transaction,
    started: Instant,
}

impl Running {
    pub fn router(&self) -> &Arc<Router> {
        self.txn.router()
    }
}

enum State {
    Running(Arc<Running>),
    Committed,
    Aborted { why: &'static str },
}

struct Session {
    number: i64,
    state: State,
    used: Instant,
}

/// Every session's latest transaction.
pub struct Sessions {
    table: Mutex<HashMap<Vec<u8>, Session>>,
    swept: Mutex<Instant>,
    /// `transactionLifetimeLimitSeconds`.
    lifetime_secs: AtomicU64,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions {
            table: Mutex::default(),
            swept: Mutex::new(Instant::now()),
            lifetime_secs: AtomicU64::new(60),
        }
    }
}

/// Where a command runs.
pub enum Entered {
    /// Outside any transaction.
    Alone,
    /// As a statement of a running transaction (or its commit or abort).
    Statement(Arc<Running>),
    /// A commit sent again after the transaction committed.
    Committed,
}

fn labelled(e: Error, label: &str) -> Error {
    let mut extra = e.extra.clone().unwrap_or_default();
    extra.insert("errorLabels", vec![Bson::from(label)]);
    Error {
        extra: Some(extra),
        ..e
    }
}

fn no_such_transaction(message: String) -> Error {
    labelled(Error::new(ErrorCode::NoSuchTransaction, message), TRANSIENT)
}

impl Sessions {
    /// `transactionLifetimeLimitSeconds`.
    pub fn lifetime_secs(&self) -> u64 {
        self.lifetime_secs.load(Ordering::Relaxed)
    }

    /// Sets `transactionLifetimeLimitSeconds`; returns the former value.
    pub fn set_lifetime_secs(&self, secs: u64) -> u64 {
        self.lifetime_secs.swap(secs, Ordering::Relaxed)
    }

    /// Places command `name` in its session's transaction, beginning one
    /// on `startTransaction`; refuses what MongoDB refuses.
    pub async fn enter(&self, router: &Router, name: &str, body: &Document) -> Result<Entered> {
        match body.get("autocommit") {
            None => {
                if body.contains_key("startTransaction") {
                    return Err(Error::new(
                        ErrorCode::InvalidOptions,
                        "startTransaction requires autocommit: false",
                    ));
                }
                if matches!(name, "commitTransaction" | "abortTransaction") {
                    return Err(Error::new(
                        ErrorCode::InvalidOptions,
                        format!("{name} must be run within a transaction (autocommit: false)"),
                    ));
                }
                return Ok(Entered::Alone);
            }
            Some(Bson::Boolean(false)) => {}
            Some(Bson::Boolean(true)) => {
                return Err(Error::new(
                    ErrorCode::InvalidOptions,
                    "Specifying autocommit=true is not allowed.",
                ))
            }
            Some(other) => {
                return Err(Error::type_mismatch(format!(
                    "BSON field 'autocommit' is the wrong type '{}', expected type 'bool'",
                    type_name(other)
                )))
            }
        }
        let starting = match body.get("startTransaction") {
            None => false,
            Some(Bson::Boolean(true)) => true,
            Some(_) => {
                return Err(Error::new(
                    ErrorCode::InvalidOptions,
                    "startTransaction must be true",
                ))
            }
        };
        let Some((session, number)) = retry_key(body) else {
            return Err(Error::new(
                ErrorCode::InvalidOptions,
                "a transaction needs a session (lsid) and a txnNumber",
            ));
        };
        check_allowed(name, body)?;
        if !starting && body.contains_key("readConcern") {
            return Err(Error::new(
                ErrorCode::InvalidOptions,
                "Only the first command in a transaction may specify a readConcern",
            ));
        }
        if body.contains_key("writeConcern")
            && !matches!(name, "commitTransaction" | "abortTransaction")
        {
            return Err(Error::new(
                ErrorCode::InvalidOptions,
                "Cannot set write concern after starting a transaction.",
            ));
        }
        self.sweep();
        // A session this process has not seen (since a restart) may have
        // committed the transaction already.
        let known = self.table.lock().contains_key(&session);
        let stored = match known {
            true => None,
            false => router.session_record(&session).await?,
        };
        let mut table = self.table.lock();
        let now = Instant::now();
        if let Some(record) = stored {
            table.entry(session.clone()).or_insert_with(|| Session {
                number: record.txn_number,
                state: match record.outcome {
                    Outcome::Committed => State::Committed,
                    _ => State::Aborted { why: "" },
                },
                used: now,
            });
        }
        let current = table.get_mut(&session);
        if let Some(s) = &current {
            if number < s.number {
                return Err(Error::new(
                    ErrorCode::TransactionTooOld,
                    format!(
                        "Cannot start transaction {number} on session because a newer \
                         transaction {} has already started.",
                        s.number
                    ),
                ));
            }
        }
        if starting {
            if let Some(s) = &current {
                if s.number == number {
                    return Err(Error::new(
                        ErrorCode::ConflictingOperationInProgress,
                        format!(
                            "Cannot start a transaction at given transaction number \
                             {number}: a transaction with the same number has already begun"
                        ),
                    ));
                }
                if let State::Running(old) = &s.state {
                    old.txn.abort();
                }
            }
            check_read_concern(body)?;
            let Some(txn) = router.begin_transaction(&session, number) else {
                return Err(Error::new(
                    ErrorCode::IllegalOperation,
                    "This storage backend runs no multi-document transactions; they need \
                     the embedded engine. Run the operations without a transaction.",
                ));
            };
            let running = Arc::new(Running {
                session: session.clone(),
                number,
                txn,
                started: now,
            });
            table.insert(
                session,
                Session {
                    number,
                    state: State::Running(running.clone()),
                    used: now,
                },
            );
            return Ok(Entered::Statement(running));
        }
        let Some(s) = current.filter(|s| s.number == number) else {
            return Err(no_such_transaction(format!(
                "Given transaction number {number} does not match any in-progress transactions."
            )));
        };
        s.used = now;
        match &s.state {
            State::Running(running) => Ok(Entered::Statement(running.clone())),
            State::Committed if name == "commitTransaction" => Ok(Entered::Committed),
            State::Committed => Err(Error::new(
                ErrorCode::TransactionCommitted,
                format!("Transaction {number} has been committed."),
            )),
            State::Aborted { why } => Err(no_such_transaction(format!(
                "Transaction with {{ txnNumber: {number} }} has been aborted{why}."
            ))),
        }
    }

    /// Ends `running` with `state`, unless a newer transaction replaced it.
    fn end(&self, running: &Running, state: State) {
        let mut table = self.table.lock();
        if let Some(s) = table.get_mut(&running.session) {
            if s.number == running.number {
                s.state = state;
            }
        }
    }

    /// After a statement of `running`: a failed one aborts it; a write
    /// conflict, in the reply or as its error, becomes the command's
    /// error with the `TransientTransactionError` label.
    pub fn after_statement(&self, running: &Running, result: Result<Document>) -> Result<Document> {
        let failed = match &result {
            Err(e) => Some(e.clone()),
            Ok(reply) => reply
                .get_array("writeErrors")
                .ok()
                .and_then(|errors| errors.first())
                .and_then(Bson::as_document)
                .map(|first| {
                    let code = first.get_i32("code").unwrap_or(8);
                    let message = first.get_str("errmsg").unwrap_or("write error");
                    Error::new(ErrorCode::from_number(code), message)
                }),
        };
        let Some(error) = failed else {
            return result;
        };
        running.txn.abort();
        self.end(
            running,
            State::Aborted {
                why: " after a statement failed",
            },
        );
        if error.code == ErrorCode::WriteConflict {
            return Err(labelled(error, TRANSIENT));
        }
        result
    }

    /// `commitTransaction`.
    pub async fn commit(&self, running: &Running) -> Result<Document> {
        if self.expired(running) {
            return Err(no_such_transaction(format!(
                "Transaction with {{ txnNumber: {} }} has been aborted: it ran longer than \
                 transactionLifetimeLimitSeconds",
                running.number
            )));
        }
        match running.txn.commit(&running.session, running.number).await {
            Ok(()) => {
                self.end(running, State::Committed);
                Ok(Document::new())
            }
            Err(e) if e.code == ErrorCode::WriteConflict => {
                self.end(
                    running,
                    State::Aborted {
                        why: " by a write conflict at commit",
                    },
                );
                Err(labelled(e, TRANSIENT))
            }
            Err(e) => {
                self.end(
                    running,
                    State::Aborted {
                        why: " by a failed commit",
                    },
                );
                Err(labelled(e, UNKNOWN_COMMIT))
            }
        }
    }

    /// `abortTransaction`.
    pub fn abort(&self, running: &Running) {
        running.txn.abort();
        self.end(
            running,
            State::Aborted {
                why: " by abortTransaction",
            },
        );
    }

    /// `endSessions` and `killSessions`: their transactions abort.
    pub fn end_sessions(&self, ids: &[Vec<u8>]) {
        let mut table = self.table.lock();
        for id in ids {
            if let Some(s) = table.remove(id) {
                if let State::Running(running) = s.state {
                    running.txn.abort();
                }
            }
        }
    }

    fn expired(&self, running: &Running) -> bool {
        running.started.elapsed() > Duration::from_secs(self.lifetime_secs())
    }

    /// Aborts transactions past their lifetime and forgets sessions idle
    /// for longer than a session lives; at most once a second.
    fn sweep(&self) {
        {
            let mut swept = self.swept.lock();
            if swept.elapsed() < SWEEP_EVERY {
                return;
            }
            *swept = Instant::now();
        }
        let mut table = self.table.lock();
        table.retain(|_, s| {
            if let State::Running(running) = &s.state {
                if self.expired(running) {
                    running.txn.abort();
                    s.state = State::Aborted {
                        why: ": it ran longer than transactionLifetimeLimitSeconds",
                    };
                }
            }
            s.used.elapsed() < SESSION_TIMEOUT
        });
    }
}

/// Refuses commands and stages a transaction may not run.
fn check_allowed(name: &str, body: &Document) -> Result<()> {
    let refused = |what: &str| {
        Err(Error::new(
            ErrorCode::OperationNotSupportedInTransaction,
            format!("Cannot run {what} in a multi-document transaction."),
        ))
    };
    if !IN_TRANSACTION.contains(&name) {
        return refused(&format!("'{name}'"));
    }
    if name == "aggregate" {
        if let Ok(stages) = body.get_array("pipeline") {
            for stage in stages.iter().filter_map(Bson::as_document) {
                if let Some((op, _)) = stage.iter().next() {
                    if NOT_IN_TRANSACTION_STAGES.contains(&op.as_str()) {
                        return refused(&format!("aggregation stage {op}"));
                    }
                }
            }
        }
    }
    Ok(())
}

/// A transaction reads at `local`, `majority` or `snapshot`: all the same
/// here, one snapshot of everything committed when it begins. A snapshot
/// at an earlier `atClusterTime` is no longer kept.
fn check_read_concern(body: &Document) -> Result<()> {
    let Some(concern) = body.get("readConcern") else {
        return Ok(());
    };
    let Bson::Document(concern) = concern else {
        return Err(Error::type_mismatch(format!(
            "BSON field 'readConcern' is the wrong type '{}', expected type 'object'",
            type_name(concern)
        )));
    };
    let level = match concern.get("level") {
        None => "local",
        Some(Bson::String(level)) => level.as_str(),
        Some(other) => {
            return Err(Error::type_mismatch(format!(
                "BSON field 'readConcern.level' is the wrong type '{}', expected type 'string'",
                type_name(other)
            )))
        }
    };
    if !matches!(level, "local" | "majority" | "snapshot") {
        return Err(Error::new(
            ErrorCode::InvalidOptions,
            format!(
                "The readConcern level must be either 'local' (default), 'majority' or \
                 'snapshot' in a transaction, not '{level}'"
            ),
        ));
    }
    if let Some(at) = concern.get("atClusterTime") {
        let Bson::Timestamp(at) = at else {
            return Err(Error::type_mismatch(
                "BSON field 'readConcern.atClusterTime' must be a timestamp",
            ));
        };
        if level != "snapshot" {
            return Err(Error::new(
                ErrorCode::InvalidOptions,
                "atClusterTime is only allowed with readConcern level 'snapshot'",
            ));
        }
        let latest = crate::base::clock::latest();
        if crate::base::clock::pack(*at) < latest {
            return Err(Error::new(
                ErrorCode::SnapshotTooOld,
                format!(
                    "Read timestamp {at} is older than the oldest available timestamp: a \
                     transaction reads the latest snapshot, {}",
                    crate::base::clock::unpack(latest)
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn router() -> Router {
        Router::in_memory()
    }

    fn statement(number: i64, extra: Document) -> Document {
        let id = bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: vec![7; 16],
        };
        let mut body =
            doc! {"find": "c", "lsid": {"id": id}, "txnNumber": number, "autocommit": false};
        body.extend(extra);
        body
    }

    fn code(result: Result<Entered>) -> ErrorCode {
        match result {
            Err(e) => e.code,
            Ok(_) => panic!("entered"),
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_session_runs_one_transaction_at_a_time_and_commits_once() {
        let (sessions, router) = (Sessions::default(), router());
        let start = statement(3, doc! {"startTransaction": true});
        let Ok(Entered::Statement(first)) = sessions.enter(&router, "find", &start).await else {
            panic!("not started");
        };
        assert!(matches!(
            sessions
                .enter(&router, "find", &statement(3, doc! {}))
                .await,
            Ok(Entered::Statement(_))
        ));
        assert_eq!(
            code(sessions.enter(&router, "find", &start).await),
            ErrorCode::ConflictingOperationInProgress
        );
        assert_eq!(
            code(
                sessions
                    .enter(&router, "find", &statement(2, doc! {}))
                    .await
            ),
            ErrorCode::TransactionTooOld
        );
        assert_eq!(
            code(
                sessions
                    .enter(&router, "count", &statement(3, doc! {}))
                    .await
            ),
            ErrorCode::OperationNotSupportedInTransaction
        );
        sessions.commit(&first).await.unwrap();
        assert!(matches!(
            sessions
                .enter(&router, "commitTransaction", &statement(3, doc! {}))
                .await,
            Ok(Entered::Committed)
        ));
        assert_eq!(
            code(
                sessions
                    .enter(&router, "find", &statement(3, doc! {}))
                    .await
            ),
            ErrorCode::TransactionCommitted
        );
        let e = sessions
            .enter(&router, "find", &statement(4, doc! {}))
            .await
            .err()
            .unwrap();
        assert_eq!(e.code, ErrorCode::NoSuchTransaction);
        assert_eq!(
            e.extra.unwrap().get_array("errorLabels").unwrap(),
            &vec![Bson::from("TransientTransactionError")]
        );
    }

    #[test]
    fn commands_outside_a_transaction_are_refused_in_one() {
        let e = check_allowed("count", &doc! {}).unwrap_err();
        assert_eq!(e.code, ErrorCode::OperationNotSupportedInTransaction);
        assert_eq!(
            e.message,
            "Cannot run 'count' in a multi-document transaction."
        );
        let out = doc! {"aggregate": "c", "pipeline": [{"$match": {}}, {"$out": "x"}]};
        assert!(check_allowed("aggregate", &out).is_err());
        assert!(check_allowed("find", &doc! {}).is_ok());
    }

    #[test]
    fn read_concerns_a_transaction_takes() {
        assert!(check_read_concern(&doc! {"readConcern": {"level": "snapshot"}}).is_ok());
        assert!(check_read_concern(&doc! {"readConcern": {"level": "majority"}}).is_ok());
        let e = check_read_concern(&doc! {"readConcern": {"level": "available"}}).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidOptions);
        let old = bson::Timestamp {
            time: 1,
            increment: 1,
        };
        let e =
            check_read_concern(&doc! {"readConcern": {"level": "snapshot", "atClusterTime": old}})
                .unwrap_err();
        assert_eq!(e.code, ErrorCode::SnapshotTooOld);
    }
}
