//! Multi-document transactions through the driver's convenient API
//! (`session.start_transaction().and_run(..)`, `withTransaction` in the
//! other drivers), which runs the callback again whenever a statement or
//! the commit fails with the `TransientTransactionError` label (a write
//! conflict).
//!
//! Both workloads first prepare `<db>.txn_accounts` on each server: drop
//! it, `shardCollection` it on `{acct: "hashed"}` (a server that refuses
//! goes on unsharded), and insert `--docs` accounts `{_id: i, acct: i,
//! balance: 1000, writes: 0, pad}` of about `--doc-size` bytes. Then, at
//! each `--concurrency` level, each client task holds one session and
//! runs one transaction after another for `--duration` seconds (after
//! `--warmup` seconds of the same, untimed); each transaction is two
//! `update_one`s filtered by the shard key, `$inc: {balance: -1, writes:
//! 1}` on one account then `$inc: {balance: 1, writes: 1}` on another,
//! and its commit:
//!
//! * `txn-single`: both updates on the same random account, so every
//!   write of the transaction names one shard-key value: one logical
//!   partition;
//! * `txn-cross`: a transfer between two different random accounts, in
//!   different physical partitions unless their hashes fall in the same
//!   one (three times in four over Shardgate's default 4 partitions).
//!
//! An operation is a transaction the driver reports committed, its latency
//! the whole `and_run`, retries included; a transaction whose updates did
//! not both modify an account is a miss, one that failed after the
//! driver's retries an error. A `TXN` line after each run counts the
//! retries: the callback's runs beyond each transaction's first, each
//! after a transient error (a commit the driver sends again after
//! `UnknownTransactionCommitResult` does not run the callback, so is not
//! counted). `--docs` and `--doc-size` are the YCSB workloads' flags:
//! bench/run-transactions.sh passes 1,000 accounts of 100 bytes, since
//! their defaults (200,000 of 1,000 bytes) make accounts far larger than
//! an account needs and conflicts rare.
//!
//! Every transaction leaves the sum of the balances as it was and adds 2
//! to the sum of the `writes` counters. After each run the accounts are
//! added up (a `$group` outside any transaction) and a `BALANCE` line says
//! whether they still hold `--docs` × 1000, and whether `writes` adds up
//! to the updates of the transactions the driver reported committed so
//! far (warm-ups included; a transaction that failed may have committed
//! all the same, so each failure widens the range allowed by 2); a
//! `MISMATCH` line follows when not. The balances alone cannot see a lost
//! update in `txn-single`, whose transactions write back the balance they
//! read; the counters can, and they also make every commit change its
//! accounts, so that concurrent transactions of one account do conflict.
//! A server whose `$group` answer lacks the fields asked for keeps no data
//! (the ceiling answers every `aggregate` with one canned document): it
//! is not checked.
//!
//! The ceiling advertises sessions (`logicalSessionTimeoutMinutes`) and
//! wire version 21, which is all the driver asks before starting a
//! transaction, and answers the two updates and `commitTransaction` with
//! its canned ok: it runs the very same command sequence, with the
//! driver's own session and transaction bookkeeping, so it is the
//! comparison (`--compare-uri`) as for the other workloads. It never
//! conflicts: its figures are those of transactions that all commit at
//! the first try. A server whose first transaction fails (a standalone
//! mongod refuses transaction numbers) is reported unsupported and
//! skipped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, TryStreamExt};
use mongodb::bson::{doc, Bson, Document};
use mongodb::{ClientSession, Collection};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use crate::dataset::Generated;
use crate::report::{self, Measurement, Outcome};
use crate::workload::{self, Deadlines, Target, TaskStats, Workload};
use crate::{cost, Args};

/// The accounts both workloads move money between.
const COLLECTION: &str = "txn_accounts";
/// Every account's balance after loading.
const OPENING_BALANCE: i64 = 1000;
/// The updates of one transaction.
const UPDATES: u64 = 2;

/// Which accounts one transaction writes.
#[derive(Clone, Copy)]
enum Shape {
    /// Debit and credit the same account.
    Single,
    /// Debit one account, credit another.
    Cross,
}

impl Shape {
    fn of(w: Workload) -> Result<Shape, String> {
        match w {
            Workload::TxnSingle => Ok(Shape::Single),
            Workload::TxnCross => Ok(Shape::Cross),
            other => Err(format!("{} is not a transaction workload", other.name())),
        }
    }

    /// The account debited and the account credited, out of `accounts`
    /// (at least 2 for [`Shape::Cross`]).
    fn pick(self, rng: &mut SmallRng, accounts: u64) -> (i64, i64) {
        let from = rng.random_range(0..accounts);
        let to = match self {
            Shape::Single => from,
            Shape::Cross => {
                // Uniform over the other accounts.
                let to = rng.random_range(0..accounts - 1);
                to + u64::from(to >= from)
            }
        };
        (from as i64, to as i64)
    }
}

/// `--docs` accounts with the opening balance, padded to about
/// `--doc-size` bytes.
struct Accounts {
    docs: u64,
    batch: usize,
    pad: String,
}

impl Generated for Accounts {
    fn docs(&self) -> u64 {
        self.docs
    }

    fn batch_size(&self) -> usize {
        self.batch
    }

    fn document(&self, i: u64) -> Document {
        doc! {
            "_id": i as i64,
            "acct": i as i64,
            "balance": OPENING_BALANCE,
            "writes": 0_i64,
            "pad": &self.pad,
        }
    }
}

/// The bytes an account takes without its pad: `_id`, `acct`, `balance`
/// and `writes` as int64, and the pad's own overhead.
const ACCOUNT_OVERHEAD: usize = 75;

/// What the accounts on a server add up to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ledger {
    accounts: i64,
    /// The balances.
    total: i64,
    /// The `writes` counters: the updates committed.
    writes: i64,
}

/// The updates a server's committed transactions made so far: `known`
/// from transactions the driver reported committed, and up to
/// [`UPDATES`] more for each that failed (it may have committed all the
/// same).
#[derive(Clone, Copy, Default)]
struct Committed {
    known: u64,
    failed: u64,
}

impl Committed {
    fn add(&mut self, m: &Measurement, tally: &Tally) {
        self.known += tally.writes;
        self.failed += m.errors;
    }

    fn most(&self) -> u64 {
        self.known
            .saturating_add(self.failed.saturating_mul(UPDATES))
    }

    fn allows(&self, writes: i64) -> bool {
        u64::try_from(writes).is_ok_and(|w| (self.known..=self.most()).contains(&w))
    }

    /// `N`, or `N..M` after failures, for messages.
    fn range(&self) -> String {
        match self.failed {
            0 => self.known.to_string(),
            _ => format!("{}..{}", self.known, self.most()),
        }
    }
}

/// Adds the accounts up; `None` when the answer lacks the fields asked
/// for (a server that keeps no data, such as the ceiling).
async fn add_up(t: &Target) -> Result<Option<Ledger>, String> {
    let pipeline = [doc! {
        "$group": {
            "_id": Bson::Null,
            "accounts": { "$sum": 1 },
            "total": { "$sum": "$balance" },
            "writes": { "$sum": "$writes" },
        }
    }];
    let err = |e: mongodb::error::Error| format!("{}: adding up {}: {e}", t.label, t.namespace());
    let mut cursor = t.docs.aggregate(pipeline).await.map_err(err)?;
    // No group at all: no accounts.
    let Some(sums) = cursor.try_next().await.map_err(err)? else {
        return Ok(Some(Ledger {
            accounts: 0,
            total: 0,
            writes: 0,
        }));
    };
    let field = |name| integer(sums.get(name));
    Ok(field("accounts")
        .zip(field("total"))
        .zip(field("writes"))
        .map(|((accounts, total), writes)| Ledger {
            accounts,
            total,
            writes,
        }))
}

/// A `$sum` as an integer, whichever numeric type it came back as.
fn integer(value: Option<&Bson>) -> Option<i64> {
    match value? {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(x) if x.fract() == 0.0 => Some(*x as i64),
        _ => None,
    }
}

/// Drops, shards and fills `<db>.txn_accounts` on `t`; whether the
/// server keeps the accounts (the ceiling does not).
async fn prepare(args: &Args, t: &Target, accounts: &Arc<Accounts>) -> Result<bool, String> {
    let ns = t.namespace();
    t.docs
        .drop()
        .await
        .map_err(|e| format!("{}: dropping {ns}: {e}", t.label))?;
    let command = doc! { "shardCollection": &ns, "key": { "acct": "hashed" } };
    if let Err(e) = t.client.database("admin").run_command(command).await {
        println!(
            "{}: shardCollection {ns} refused ({e}); the accounts stay unsharded",
            t.label
        );
    }
    let (loaders, timeout) = args.setup_load();
    let m = workload::load(t, accounts, loaders, true, timeout)
        .await
        .map_err(|e| format!("{}: loading {ns}: {e}", t.label))?;
    if m.errors > 0 || m.ops != accounts.docs {
        return Err(format!(
            "{}: loading {ns}: {} of {} accounts inserted, {} errors{}",
            t.label,
            m.ops,
            accounts.docs,
            m.errors,
            m.first_error
                .map_or_else(String::new, |e| format!(" (first: {e})")),
        ));
    }
    let kept = add_up(t).await?.is_some();
    println!(
        "{}: {ns}: {} accounts loaded in {:.2}s{}{}",
        t.label,
        accounts.docs,
        m.elapsed.as_secs_f64(),
        partitions(t)
            .await
            .map_or_else(String::new, |n| format!(", {n} partitions")),
        if kept {
            ""
        } else {
            "; the server keeps no data: balances not checked"
        },
    );
    Ok(kept)
}

/// The partitions `collStats` reports for `t`'s collection, if any.
async fn partitions(t: &Target) -> Option<i64> {
    let stats = t
        .client
        .database(&t.db)
        .run_command(doc! { "collStats": t.docs.name() })
        .await
        .ok()?;
    integer(stats.get("nchunks"))
}

/// Moves 1 from account `from` to account `to` in one transaction run
/// through the driver's convenient API, counting each run of the
/// callback in `runs`; the accounts its updates modified ([`UPDATES`]
/// unless one matched none).
async fn transfer(
    session: &mut ClientSession,
    accounts: &Collection<Document>,
    (from, to): (i64, i64),
    runs: &mut u64,
) -> mongodb::error::Result<u64> {
    session
        .start_transaction()
        .and_run((accounts, runs), move |session, (accounts, runs)| {
            async move {
                **runs += 1;
                let debit = accounts
                    .update_one(
                        doc! { "acct": from },
                        doc! { "$inc": { "balance": -1, "writes": 1 } },
                    )
                    .session(&mut *session)
                    .await?;
                let credit = accounts
                    .update_one(
                        doc! { "acct": to },
                        doc! { "$inc": { "balance": 1, "writes": 1 } },
                    )
                    .session(&mut *session)
                    .await?;
                Ok(debit.modified_count + credit.modified_count)
            }
            .boxed()
        })
        .await
}

/// What the transactions of one run did beyond their timing: how many
/// finished (committed or failed), the callback runs they took, and the
/// updates of those committed.
#[derive(Clone, Copy, Default)]
struct Tally {
    transactions: u64,
    runs: u64,
    /// Transactions that took more than one run.
    retried: u64,
    writes: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.transactions += other.transactions;
        self.runs += other.runs;
        self.retried += other.retried;
        self.writes += other.writes;
    }

    /// Callback runs beyond each transaction's first.
    fn retries(&self) -> u64 {
        self.runs.saturating_sub(self.transactions)
    }
}

/// One client task: transactions of `shape`, one at a time on `session`,
/// until the run stops.
async fn client(
    mut session: ClientSession,
    accounts: Collection<Document>,
    (shape, count): (Shape, u64),
    deadlines: Deadlines,
    seed: u64,
) -> (TaskStats, Tally) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut stats = TaskStats::new();
    let mut tally = Tally::default();
    while Instant::now() < deadlines.stop {
        let pair = shape.pick(&mut rng, count);
        let (mut runs, mut writes) = (0, 0);
        let request = async {
            writes = transfer(&mut session, &accounts, pair, &mut runs)
                .await
                .map_err(|e| e.to_string())?;
            Ok(writes == UPDATES)
        };
        if !stats.attempt(deadlines, request).await {
            break;
        }
        tally.add(Tally {
            transactions: 1,
            runs,
            retried: u64::from(runs > 1),
            writes,
        });
    }
    (stats, tally)
}

/// Runs `concurrency` client tasks for `duration`.
async fn timed(
    t: &Target,
    (w, concurrency): (Workload, usize),
    count: u64,
    duration: Duration,
    seed: u64,
) -> Result<(Measurement, Tally), String> {
    let shape = Shape::of(w)?;
    let err =
        |what: &str, e: mongodb::error::Error| format!("{}: {}: {what}: {e}", t.label, w.name());
    t.warm_pool(concurrency)
        .await
        .map_err(|e| err("connecting", e))?;
    let mut sessions = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        sessions.push(
            t.client
                .start_session()
                .await
                .map_err(|e| err("starting a session", e))?,
        );
    }
    let start = Instant::now();
    let deadlines = Deadlines::after(start, duration);
    let mut set = JoinSet::new();
    for (task, session) in sessions.into_iter().enumerate() {
        let seed = seed.wrapping_mul(1_000_003).wrapping_add(task as u64);
        set.spawn(client(
            session,
            t.docs.clone(),
            (shape, count),
            deadlines,
            seed,
        ));
    }
    let mut tally = Tally::default();
    let tasks = workload::join_all(set)
        .await
        .into_iter()
        .map(|task| {
            task.map(|(stats, task_tally)| {
                tally.add(task_tally);
                stats
            })
        })
        .collect();
    let m = workload::merge(t, w, concurrency, start.elapsed(), tasks);
    Ok((m, tally))
}

/// One transaction on `t`, of the last account: the updates it
/// committed, or `Err` with the reason when it fails (the server keeps
/// no transactions).
async fn probe(t: &Target, count: u64) -> Result<u64, String> {
    let mut session = t.client.start_session().await.map_err(|e| e.to_string())?;
    let last = count as i64 - 1;
    transfer(&mut session, &t.docs, (last, last), &mut 0)
        .await
        .map_err(|e| e.to_string())
}

/// A server that runs the transactions, and what it has committed.
struct Server {
    t: Target,
    /// Whether it keeps the accounts, so they can be checked.
    kept: bool,
    committed: Committed,
}

/// `txn-single` or `txn-cross`: the accounts prepared on each server, then
/// each concurrency level on each server in turn.
pub async fn run(args: &Args, targets: &[Target], w: Workload) -> Result<Outcome, String> {
    let shape = Shape::of(w)?;
    if matches!(shape, Shape::Cross) && args.docs < 2 {
        return Err("txn-cross needs --docs of at least 2 accounts".into());
    }
    let accounts = Arc::new(Accounts {
        docs: args.docs,
        batch: args.batch,
        pad: "x".repeat(args.doc_size.saturating_sub(ACCOUNT_OVERHEAD)),
    });
    let mut servers = Vec::with_capacity(targets.len());
    for target in targets {
        let t = target.for_collection(COLLECTION);
        let kept = prepare(args, &t, &accounts).await?;
        match probe(&t, args.docs).await {
            Ok(writes) => servers.push(Server {
                t,
                kept,
                committed: Committed {
                    known: writes,
                    failed: 0,
                },
            }),
            Err(reason) => {
                println!("{}: {}: unsupported ({reason}); skipped", t.label, w.name());
                println!(
                    "RESULT target={} workload={} unsupported=yes",
                    t.label,
                    w.name()
                );
            }
        }
    }
    let mut measurements = Vec::new();
    let mut summary = vec![format!(
        "{}: {} accounts of about {} bytes; an operation is a committed transaction of two updates{}",
        w.name(),
        args.docs,
        args.doc_size.max(ACCOUNT_OVERHEAD),
        match shape {
            Shape::Single => " of one account",
            Shape::Cross => ", of two different accounts",
        }
    )];
    let (warmup, duration) = args.timing();
    for (level, &conc) in args.concurrency.iter().enumerate() {
        let seed = args.seed ^ ((level as u64) << 32) ^ (w as u64) << 40;
        for (index, server) in servers.iter_mut().enumerate() {
            let t = &server.t;
            if !warmup.is_zero() {
                let (m, tally) = timed(t, (w, conc), args.docs, warmup, seed ^ 1).await?;
                server.committed.add(&m, &tally);
            }
            let costs = args.costs_for(index);
            let before = cost::sample(costs)?;
            let (mut m, tally) = timed(t, (w, conc), args.docs, duration, seed).await?;
            m.cost = cost::between(costs, &before, &cost::sample(costs)?);
            server.committed.add(&m, &tally);
            report::print_measurement(&m);
            println!(
                "TXN target={} workload={} conc={conc} commits={} transactions={} retries={} retried={} errors={} misses={}",
                m.target,
                w.name(),
                m.ops,
                tally.transactions,
                tally.retries(),
                tally.retried,
                m.errors,
                m.misses,
            );
            let verdict = if server.kept {
                check(t, (w, conc), args.docs, server.committed).await?
            } else {
                "balances not checked (the server keeps no data)".to_owned()
            };
            summary.push(format!(
                "  {} conc={conc}: {:.0} commits/s, {} retries in {} transactions, {} errors; {verdict}",
                t.label,
                m.ops_per_sec(),
                tally.retries(),
                tally.transactions,
                m.errors,
            ));
            measurements.push(m);
        }
    }
    Ok(Outcome {
        measurements,
        summary,
    })
}

/// Adds up `t`'s `accounts` after a run and prints a `BALANCE` line, and
/// a `MISMATCH` line when their balances no longer add up to the opening
/// ones or their `writes` to the updates `committed`; says which in
/// words.
async fn check(
    t: &Target,
    (w, conc): (Workload, usize),
    accounts: u64,
    committed: Committed,
) -> Result<String, String> {
    let expected_accounts = accounts as i64;
    let expected_total = expected_accounts.saturating_mul(OPENING_BALANCE);
    let found = add_up(t).await?.unwrap_or(Ledger {
        accounts: -1,
        total: -1,
        writes: -1,
    });
    let balanced = found.accounts == expected_accounts && found.total == expected_total;
    let counted = committed.allows(found.writes);
    let fields = format!(
        "target={} workload={} conc={conc} accounts={} total={} writes={} expected_accounts={expected_accounts} expected_total={expected_total} expected_writes={}",
        t.label,
        w.name(),
        found.accounts,
        found.total,
        found.writes,
        committed.range(),
    );
    println!(
        "BALANCE {fields} ok={}",
        report::yes_no(balanced && counted)
    );
    if balanced && counted {
        return Ok(format!(
            "balances hold {expected_total}, {} updates committed",
            found.writes
        ));
    }
    println!("MISMATCH {fields}");
    Ok(format!(
        "MISMATCH: {} accounts hold {} with {} updates; expected {expected_accounts} holding {expected_total} with {}",
        found.accounts,
        found.total,
        found.writes,
        committed.range(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_picks_two_different_accounts() {
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..10_000 {
            let (from, to) = Shape::Cross.pick(&mut rng, 3);
            assert_ne!(from, to);
            assert!((0..3).contains(&from) && (0..3).contains(&to));
        }
        let (from, to) = Shape::Single.pick(&mut rng, 5);
        assert_eq!(from, to);
    }

    #[test]
    fn accounts_are_the_size_asked() {
        let accounts = Accounts {
            docs: 10,
            batch: 10,
            pad: "x".repeat(100 - ACCOUNT_OVERHEAD),
        };
        let mut bytes = Vec::new();
        accounts
            .document(9)
            .to_writer(&mut bytes)
            .expect("an account encodes");
        assert_eq!(bytes.len(), 100);
    }

    #[test]
    fn sums_come_back_as_integers() {
        assert_eq!(integer(Some(&Bson::Int32(3))), Some(3));
        assert_eq!(integer(Some(&Bson::Int64(1 << 40))), Some(1 << 40));
        assert_eq!(integer(Some(&Bson::Double(7.0))), Some(7));
        assert_eq!(integer(Some(&Bson::Double(7.5))), None);
        assert_eq!(integer(Some(&Bson::String("t000".into()))), None);
        assert_eq!(integer(None), None);
    }

    #[test]
    fn failed_transactions_widen_the_committed_range() {
        let exact = Committed {
            known: 10,
            failed: 0,
        };
        assert!(exact.allows(10));
        assert!(!exact.allows(9) && !exact.allows(11) && !exact.allows(-1));
        assert_eq!(exact.range(), "10");
        let unsure = Committed {
            known: 10,
            failed: 2,
        };
        assert!(unsure.allows(10) && unsure.allows(14));
        assert!(!unsure.allows(15));
        assert_eq!(unsure.range(), "10..14");
    }
}
