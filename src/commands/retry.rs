//! Retryable writes: a write sent again with the same session (`lsid`)
//! and `txnNumber` returns the first execution's reply instead of running
//! again, so a driver retrying after a lost reply never applies a write
//! twice.
//!
//! Each session keeps the reply of its latest transaction number, as
//! MongoDB does; an older number is refused. The table here is the
//! memory of it, bounded: the oldest sessions are forgotten first. What
//! it forgets, or a restart took, storage still has
//! ([`crate::router::sessions`]): every write carries its mark, and its
//! reply is recorded before it is sent.

use std::collections::{HashMap, VecDeque};

use bson::{Bson, Document};
use parking_lot::Mutex;

use crate::error::{Error, ErrorCode, Result};

/// Sessions remembered at most.
const MAX_SESSIONS: usize = 100_000;

/// The commands whose replies are remembered.
pub fn is_retryable_write(command: &str) -> bool {
    matches!(
        command,
        "insert" | "update" | "delete" | "findAndModify" | "findandmodify"
    )
}

/// The `(session id, txnNumber)` of a retryable write, if it is one.
pub fn retry_key(body: &Document) -> Option<(Vec<u8>, i64)> {
    let txn = match body.get("txnNumber")? {
        Bson::Int64(n) => *n,
        Bson::Int32(n) => *n as i64,
        _ => return None,
    };
    let session = match body.get_document("lsid").ok()?.get("id")? {
        Bson::Binary(b) => b.bytes.clone(),
        _ => return None,
    };
    Some((session, txn))
}

/// What to do with a retryable write.
#[derive(Debug, PartialEq)]
pub enum Lookup {
    /// It ran: answer with its reply.
    Replay(Document),
    /// It is new: run it.
    Run,
    /// The session is not remembered in memory.
    Unknown,
}

/// Refuses transaction number `txn` when the session has run `newest`.
pub fn check_newest(txn: i64, newest: i64) -> Result<()> {
    if txn < newest {
        return Err(Error::new(
            ErrorCode::TransactionTooOld,
            format!(
                "Retryable write with txnNumber {txn} is prohibited on session because a \
                 newer retryable write with txnNumber {newest} has already started"
            ),
        ));
    }
    Ok(())
}

struct Entry {
    txn: i64,
    reply: Document,
    /// When the session was first remembered, for eviction order.
    since: u64,
}

#[derive(Default)]
struct Table {
    sessions: HashMap<Vec<u8>, Entry>,
    /// Sessions in the order they were first remembered.
    order: VecDeque<(Vec<u8>, u64)>,
    next: u64,
}

#[derive(Default)]
pub struct RetryTable {
    table: Mutex<Table>,
}

impl RetryTable {
    /// The remembered reply for this write, an error if the transaction
    /// number is older than the session's latest, [`Lookup::Run`] to run
    /// it, or [`Lookup::Unknown`] when the session is not remembered here
    /// (its record in storage decides).
    pub fn lookup(&self, session: &[u8], txn: i64) -> Result<Lookup> {
        let table = self.table.lock();
        let Some(entry) = table.sessions.get(session) else {
            return Ok(Lookup::Unknown);
        };
        check_newest(txn, entry.txn)?;
        Ok(match txn == entry.txn {
            true => Lookup::Replay(entry.reply.clone()),
            false => Lookup::Run,
        })
    }

    /// Remembers the reply of a write that ran.
    pub fn record(&self, session: Vec<u8>, txn: i64, reply: &Document) {
        let mut table = self.table.lock();
        if let Some(entry) = table.sessions.get_mut(&session) {
            if txn >= entry.txn {
                entry.txn = txn;
                entry.reply = reply.clone();
            }
            return;
        }
        while table.sessions.len() >= MAX_SESSIONS {
            let Some((old, since)) = table.order.pop_front() else {
                break;
            };
            if table.sessions.get(&old).is_some_and(|e| e.since == since) {
                table.sessions.remove(&old);
            }
        }
        let since = table.next;
        table.next += 1;
        table.order.push_back((session.clone(), since));
        table.sessions.insert(
            session,
            Entry {
                txn,
                reply: reply.clone(),
                since,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn the_same_transaction_number_replays_and_an_older_one_is_refused() {
        let t = RetryTable::default();
        assert_eq!(t.lookup(b"s1", 5).unwrap(), Lookup::Unknown);
        t.record(b"s1".to_vec(), 5, &doc! {"n": 1});
        assert_eq!(t.lookup(b"s1", 5).unwrap(), Lookup::Replay(doc! {"n": 1}));
        assert_eq!(t.lookup(b"s1", 6).unwrap(), Lookup::Run);
        let e = t.lookup(b"s1", 4).unwrap_err();
        assert_eq!(e.code, ErrorCode::TransactionTooOld);
        assert_eq!(t.lookup(b"s2", 5).unwrap(), Lookup::Unknown);
    }

    #[test]
    fn retry_keys_need_a_session_and_a_number() {
        let id = bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: vec![1; 16],
        };
        let body = doc! {"insert": "c", "lsid": {"id": id}, "txnNumber": 3i64};
        assert_eq!(retry_key(&body), Some((vec![1; 16], 3)));
        assert_eq!(retry_key(&doc! {"insert": "c", "txnNumber": 3i64}), None);
    }
}
