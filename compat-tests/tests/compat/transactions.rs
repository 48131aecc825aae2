//! Multi-document transactions through the driver's sessions API.
//!
//! Covered: the bank-transfer invariant under 16 clients running
//! conflicting transfers with the convenient API (`and_run`) across 8
//! partitions, checked by concurrent snapshot readers and at the end;
//! kill -9 in a storm of commits (every acknowledged transaction wholly
//! present, no partial one); snapshot reads with the transaction's own
//! writes, invisible outside until commit; write conflicts with the
//! `TransientTransactionError` label; a commit sent again; the errors a
//! session's transaction numbers and a transaction's statements get;
//! `transactionLifetimeLimitSeconds`; `endSessions`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use compat_tests::{
    assert_ok,
    bson::{doc, spec::BinarySubtype, Binary, Bson, Document},
    failure,
    mongodb::{
        error::{Error, TRANSIENT_TRANSACTION_ERROR},
        options::ReadConcern,
        Client, Collection,
    },
    num,
    wire::RawConn,
    TestServer,
};
use futures::FutureExt;

const DB: &str = "txn";
const ACCOUNTS: i64 = 64;
const START_BALANCE: i64 = 1_000;

/// A seeded sequence of numbers (splitmix64), for repeatable transfers.
struct Numbers(u64);

impl Numbers {
    /// A number in `[low, high)`.
    fn between(&mut self, low: i64, high: i64) -> i64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        low + (z % (high - low) as u64) as i64
    }

    /// Two different accounts.
    fn pair(&mut self) -> (i64, i64) {
        let from = self.between(0, ACCOUNTS);
        (from, (from + self.between(1, ACCOUNTS)) % ACCOUNTS)
    }
}

async fn sharded_accounts(client: &Client, coll: &str, partitions: i32) -> Collection<Document> {
    let admin = client.database("admin");
    assert_ok(
        &admin
            .run_command(doc! {
                "shardCollection": format!("{DB}.{coll}"),
                "key": {"acct": "hashed"},
                "numInitialChunks": partitions,
            })
            .await
            .expect("shardCollection"),
    );
    let accounts = client.database(DB).collection::<Document>(coll);
    let docs: Vec<Document> = (0..ACCOUNTS)
        .map(|i| doc! {"_id": i, "acct": i, "balance": START_BALANCE})
        .collect();
    accounts.insert_many(docs).await.expect("insert accounts");
    accounts
}

/// Every balance, read in one transaction (one snapshot).
async fn snapshot_balances(client: &Client, accounts: &Collection<Document>) -> Vec<i64> {
    let mut session = client.start_session().await.expect("session");
    session
        .start_transaction()
        .read_concern(ReadConcern::snapshot())
        .await
        .expect("start a read transaction");
    let mut cursor = accounts
        .find(doc! {})
        .session(&mut session)
        .await
        .expect("find in a transaction");
    let mut balances = Vec::new();
    while let Some(d) = cursor.next(&mut session).await {
        balances.push(num(&d.expect("read an account"), "balance"));
    }
    session.commit_transaction().await.expect("commit the read");
    balances
}

/// Moves `amount` from `from` to `to` in one transaction, retried by the
/// driver on transient errors; also records the transfer in `ledger`.
async fn transfer(
    client: &Client,
    accounts: &Collection<Document>,
    ledger: Option<&Collection<Document>>,
    (from, to, amount): (i64, i64, i64),
    id: &str,
) -> Result<(), Error> {
    let mut session = client.start_session().await?;
    session
        .start_transaction()
        .and_run((accounts, ledger, id), |session, (accounts, ledger, id)| {
            async move {
                accounts
                    .update_one(doc! {"acct": from}, doc! {"$inc": {"balance": -amount}})
                    .session(&mut *session)
                    .await?;
                accounts
                    .update_one(doc! {"acct": to}, doc! {"$inc": {"balance": amount}})
                    .session(&mut *session)
                    .await?;
                if let Some(ledger) = ledger {
                    ledger
                        .insert_one(doc! {"_id": *id, "from": from, "to": to, "amount": amount})
                        .session(&mut *session)
                        .await?;
                }
                Ok(())
            }
            .boxed()
        })
        .await
}

/// 16 clients × 1,000 conflicting transfers over 64 accounts in 8
/// partitions keep the sum of balances: at every step, as readers see it
/// through snapshots, and at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfers_keep_the_sum_under_conflicts_and_snapshot_readers() {
    const CLIENTS: u64 = 16;
    const TRANSFERS: u64 = 1_000;
    let srv = TestServer::start().await;
    let accounts = sharded_accounts(&srv.client, "bank", 8).await;
    let total = ACCOUNTS * START_BALANCE;

    let done = Arc::new(AtomicBool::new(false));
    let snapshots = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (client, accounts) = (srv.client.clone(), accounts.clone());
        let (done, snapshots) = (done.clone(), snapshots.clone());
        readers.push(tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                let balances = snapshot_balances(&client, &accounts).await;
                assert_eq!(balances.len() as i64, ACCOUNTS);
                assert_eq!(
                    balances.iter().sum::<i64>(),
                    total,
                    "a snapshot saw {balances:?}"
                );
                snapshots.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let mut writers = Vec::new();
    for c in 0..CLIENTS {
        let (client, accounts) = (srv.client.clone(), accounts.clone());
        writers.push(tokio::spawn(async move {
            let mut numbers = Numbers(c);
            for i in 0..TRANSFERS {
                let (from, to) = numbers.pair();
                let amount = numbers.between(1, 50);
                transfer(&client, &accounts, None, (from, to, amount), "")
                    .await
                    .unwrap_or_else(|e| panic!("client {c}, transfer {i}: {e}"));
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.expect("reader");
    }
    assert!(
        snapshots.load(Ordering::Relaxed) > 0,
        "no snapshot was read"
    );
    let balances = snapshot_balances(&srv.client, &accounts).await;
    assert_eq!(balances.iter().sum::<i64>(), total);
    // Outside a transaction too.
    let mut sum = 0;
    let mut cursor = accounts.find(doc! {}).await.unwrap();
    while cursor.advance().await.unwrap() {
        sum += num(&cursor.deserialize_current().unwrap(), "balance");
    }
    assert_eq!(sum, total);
}

/// Killed with -9 while 8 clients commit transfers with a ledger entry
/// each: after restart every acknowledged transfer is there, and every
/// balance is what the ledger present says, so no transaction is there
/// in part.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_in_a_commit_storm_keeps_whole_transactions() {
    let mut srv = TestServer::start().await;
    let accounts = sharded_accounts(&srv.client, "storm", 4).await;
    let ledger = srv.db(DB).collection::<Document>("ledger");
    ledger.insert_one(doc! {"_id": "seed"}).await.unwrap();
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..8u64 {
        let (client, accounts, ledger) = (srv.client.clone(), accounts.clone(), ledger.clone());
        let (acked, stop) = (acked.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut numbers = Numbers(100 + c);
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let (from, to) = numbers.pair();
                let id = format!("c{c}-{i}");
                i += 1;
                let moved = tokio::time::timeout(
                    Duration::from_secs(5),
                    transfer(&client, &accounts, Some(&ledger), (from, to, 7), &id),
                )
                .await;
                match moved {
                    Ok(Ok(())) => acked.lock().unwrap().push(id),
                    // The server is gone: the outcome is unknown.
                    _ => break,
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    srv.kill9();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.expect("client");
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        !acked.is_empty(),
        "no transfer was acknowledged before the kill"
    );

    srv.restart().await;
    let ledger = srv.db(DB).collection::<Document>("ledger");
    let accounts = srv.db(DB).collection::<Document>("storm");
    let mut expected: HashMap<i64, i64> = (0..ACCOUNTS).map(|a| (a, START_BALANCE)).collect();
    let mut present = std::collections::HashSet::new();
    let mut cursor = ledger.find(doc! {"_id": {"$ne": "seed"}}).await.unwrap();
    while cursor.advance().await.unwrap() {
        let entry = cursor.deserialize_current().unwrap();
        *expected.get_mut(&num(&entry, "from")).unwrap() -= num(&entry, "amount");
        *expected.get_mut(&num(&entry, "to")).unwrap() += num(&entry, "amount");
        present.insert(entry.get_str("_id").unwrap().to_string());
    }
    let lost: Vec<&String> = acked.iter().filter(|id| !present.contains(*id)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged transfers lost, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(5)]
    );
    let mut cursor = accounts.find(doc! {}).await.unwrap();
    while cursor.advance().await.unwrap() {
        let account = cursor.deserialize_current().unwrap();
        let acct = num(&account, "acct");
        assert_eq!(
            num(&account, "balance"),
            expected[&acct],
            "account {acct} does not match the ledger: a transaction is there in part"
        );
    }
}

/// Inside, a transaction reads one snapshot with its own writes, through
/// find, aggregate and distinct; outside, nothing shows until commit, and
/// then everything does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_reads_its_snapshot_and_its_own_writes() {
    let srv = TestServer::start().await;
    let accounts = sharded_accounts(&srv.client, "reads", 4).await;
    let other = srv.db(DB).collection::<Document>("other");
    other.insert_one(doc! {"_id": 0, "k": "old"}).await.unwrap();
    let mut session = srv.client.start_session().await.unwrap();
    session.start_transaction().await.unwrap();
    accounts
        .insert_one(doc! {"_id": 1000, "acct": 1000, "balance": 5})
        .session(&mut session)
        .await
        .unwrap();
    accounts
        .delete_one(doc! {"acct": 0})
        .session(&mut session)
        .await
        .unwrap();
    other
        .update_one(doc! {"_id": 0}, doc! {"$set": {"k": "new"}})
        .session(&mut session)
        .await
        .unwrap();
    // A write committed outside after the snapshot stays unseen inside.
    accounts
        .update_one(doc! {"acct": 1}, doc! {"$set": {"balance": 1}})
        .await
        .unwrap();

    let inside = accounts
        .find_one(doc! {"acct": 1000})
        .session(&mut session)
        .await
        .unwrap();
    assert_eq!(inside.map(|d| num(&d, "balance")), Some(5));
    let one = accounts
        .find_one(doc! {"acct": 1})
        .session(&mut session)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(num(&one, "balance"), START_BALANCE, "the snapshot moved");
    let mut counted = accounts
        .aggregate(vec![doc! {"$group": {"_id": null, "n": {"$sum": 1}}}])
        .session(&mut session)
        .await
        .unwrap();
    let n = counted.next(&mut session).await.unwrap().unwrap();
    assert_eq!(num(&n, "n"), ACCOUNTS);
    let kinds = other
        .distinct("k", doc! {})
        .session(&mut session)
        .await
        .unwrap();
    assert_eq!(kinds, vec![Bson::from("new")]);

    assert_eq!(
        accounts.count_documents(doc! {"acct": 1000}).await.unwrap(),
        0
    );
    assert_eq!(accounts.count_documents(doc! {"acct": 0}).await.unwrap(), 1);
    session.commit_transaction().await.unwrap();
    assert_eq!(
        accounts.count_documents(doc! {"acct": 1000}).await.unwrap(),
        1
    );
    assert_eq!(accounts.count_documents(doc! {"acct": 0}).await.unwrap(), 0);
    let k = other.find_one(doc! {"_id": 0}).await.unwrap().unwrap();
    assert_eq!(k.get_str("k").unwrap(), "new");
    let one = accounts.find_one(doc! {"acct": 1}).await.unwrap().unwrap();
    assert_eq!(num(&one, "balance"), 1, "the outside write was lost");
}

/// Two transactions writing one document: the one whose snapshot
/// predates the other's commit fails with 112
/// `WriteConflict`, labelled `TransientTransactionError`, and is aborted;
/// a transaction whose document a plain write changed fails at commit
/// the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_conflicts_are_transient_errors() {
    let srv = TestServer::start().await;
    let accounts = sharded_accounts(&srv.client, "conflicts", 2).await;
    let mut first = srv.client.start_session().await.unwrap();
    let mut second = srv.client.start_session().await.unwrap();
    first.start_transaction().await.unwrap();
    second.start_transaction().await.unwrap();
    // A transaction's snapshot is taken at its first statement.
    accounts
        .find_one(doc! {"acct": 3})
        .session(&mut second)
        .await
        .unwrap();
    accounts
        .update_one(doc! {"acct": 3}, doc! {"$inc": {"balance": 1}})
        .session(&mut first)
        .await
        .unwrap();
    first.commit_transaction().await.unwrap();
    let e = accounts
        .update_one(doc! {"acct": 3}, doc! {"$inc": {"balance": 1}})
        .session(&mut second)
        .await
        .unwrap_err();
    assert!(e.contains_label(TRANSIENT_TRANSACTION_ERROR), "{e}");
    assert_eq!(failure(&e).map(|f| f.code), Some(112), "{e}");
    let e = second.commit_transaction().await.unwrap_err();
    assert_eq!(failure(&e).map(|f| f.code), Some(251), "{e}");

    let mut third = srv.client.start_session().await.unwrap();
    third.start_transaction().await.unwrap();
    accounts
        .update_one(doc! {"acct": 4}, doc! {"$inc": {"balance": 1}})
        .session(&mut third)
        .await
        .unwrap();
    accounts
        .update_one(doc! {"acct": 4}, doc! {"$inc": {"balance": 100}})
        .await
        .unwrap();
    let e = third.commit_transaction().await.unwrap_err();
    assert!(e.contains_label(TRANSIENT_TRANSACTION_ERROR), "{e}");
    assert_eq!(failure(&e).map(|f| f.code), Some(112), "{e}");
    let four = accounts.find_one(doc! {"acct": 4}).await.unwrap().unwrap();
    assert_eq!(num(&four, "balance"), START_BALANCE + 100);
}

fn lsid(n: u8) -> Document {
    doc! {"id": Binary {subtype: BinarySubtype::Uuid, bytes: vec![n; 16]}}
}

/// A statement of transaction `txn` on session `n`.
fn statement(n: u8, txn: i64, mut cmd: Document, start: bool) -> Document {
    cmd.insert("lsid", lsid(n));
    cmd.insert("txnNumber", txn);
    cmd.insert("autocommit", false);
    if start {
        cmd.insert("startTransaction", true);
    }
    cmd
}

fn code_of(reply: &Document) -> (i64, Vec<Bson>) {
    let labels = reply.get_array("errorLabels").cloned().unwrap_or_default();
    (num(reply, "code"), labels)
}

/// The raw protocol: a commit answers the same when sent again; a
/// session's older transaction numbers, a finished transaction's
/// statements, commands a transaction may not run and a statement's
/// write concern get MongoDB's errors; a failed statement aborts the
/// transaction.
#[tokio::test]
async fn the_transaction_protocol_answers_as_mongodb_does() {
    let srv = TestServer::start().await;
    let mut c = RawConn::connect(srv.addr).await;
    let insert = |id: i32| doc! {"insert": "raw", "documents": [{"_id": id}]};
    assert_ok(&c.command(DB, statement(1, 5, insert(1), true)).await);
    assert_ok(&c.command(DB, statement(1, 5, insert(2), false)).await);
    let commit = statement(1, 5, doc! {"commitTransaction": 1}, false);
    assert_ok(&c.command("admin", commit.clone()).await);
    assert_ok(&c.command("admin", commit).await);
    let coll = srv.db(DB).collection::<Document>("raw");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 2);

    let after = c.command(DB, statement(1, 5, insert(3), false)).await;
    assert_eq!(code_of(&after).0, 256, "{after}");
    let abort = statement(1, 5, doc! {"abortTransaction": 1}, false);
    assert_eq!(code_of(&c.command("admin", abort).await).0, 256);
    let older = c.command(DB, statement(1, 4, insert(3), true)).await;
    assert_eq!(code_of(&older).0, 225, "{older}");
    let unknown = c.command(DB, statement(1, 9, insert(3), false)).await;
    assert_eq!(
        code_of(&unknown),
        (251, vec![Bson::from("TransientTransactionError")]),
        "{unknown}"
    );

    assert_ok(&c.command(DB, statement(1, 6, insert(3), true)).await);
    let count = c
        .command(DB, statement(1, 6, doc! {"count": "raw"}, false))
        .await;
    assert_eq!(code_of(&count).0, 263, "{count}");
    assert_eq!(
        count.get_str("errmsg").unwrap(),
        "Cannot run 'count' in a multi-document transaction."
    );
    let mut with_concern = statement(1, 6, insert(4), false);
    with_concern.insert("writeConcern", doc! {"w": 1});
    assert_eq!(code_of(&c.command(DB, with_concern).await).0, 72);
    // A duplicate key fails the statement and aborts the transaction.
    let duplicate = c.command(DB, statement(1, 6, insert(1), false)).await;
    let first_error = duplicate.get_array("writeErrors").unwrap()[0]
        .as_document()
        .unwrap();
    assert_eq!(num(first_error, "code"), 11000);
    let commit = c
        .command(
            "admin",
            statement(1, 6, doc! {"commitTransaction": 1}, false),
        )
        .await;
    assert_eq!(code_of(&commit).0, 251, "{commit}");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 2);

    // A transaction's changes are gone when its session ends.
    assert_ok(&c.command(DB, statement(2, 1, insert(10), true)).await);
    assert_ok(&c.command("admin", doc! {"endSessions": [lsid(2)]}).await);
    let commit = c
        .command(
            "admin",
            statement(2, 1, doc! {"commitTransaction": 1}, false),
        )
        .await;
    assert_eq!(code_of(&commit).0, 251, "{commit}");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 2);
}

/// A transaction running past `transactionLifetimeLimitSeconds` is
/// aborted.
#[tokio::test]
async fn transactions_past_their_lifetime_are_aborted() {
    let srv = TestServer::start().await;
    let admin = srv.db("admin");
    let set = admin
        .run_command(doc! {"setParameter": 1, "transactionLifetimeLimitSeconds": 1})
        .await
        .unwrap();
    assert_eq!(num(&set, "was"), 60);
    let got = admin
        .run_command(doc! {"getParameter": 1, "transactionLifetimeLimitSeconds": 1})
        .await
        .unwrap();
    assert_eq!(num(&got, "transactionLifetimeLimitSeconds"), 1);
    let mut c = RawConn::connect(srv.addr).await;
    let insert = doc! {"insert": "old", "documents": [{"_id": 1}]};
    assert_ok(&c.command(DB, statement(3, 1, insert, true)).await);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let commit = c
        .command(
            "admin",
            statement(3, 1, doc! {"commitTransaction": 1}, false),
        )
        .await;
    assert_eq!(code_of(&commit).0, 251, "{commit}");
    let coll = srv.db(DB).collection::<Document>("old");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 0);
}

/// After kill -9 and a restart, a retryable write sent again answers
/// with its first reply and is not applied twice, an older one is
/// refused, and a committed transaction's commit sent again succeeds.
#[tokio::test]
async fn retries_are_answered_from_storage_after_kill_9() {
    let mut srv = TestServer::start().await;
    let mut c = RawConn::connect(srv.addr).await;
    let retryable = |txn: i64, mut cmd: Document| {
        cmd.insert("lsid", lsid(7));
        cmd.insert("txnNumber", txn);
        cmd
    };
    let insert = retryable(
        1,
        doc! {"insert": "retried", "documents": [{"_id": 1, "n": 0}]},
    );
    assert_ok(&c.command(DB, insert.clone()).await);
    let bump = retryable(
        2,
        doc! {"findAndModify": "retried", "query": {"_id": 1}, "update": {"$inc": {"n": 1}}, "new": true},
    );
    let first = c.command(DB, bump.clone()).await;
    assert_eq!(num(first.get_document("value").unwrap(), "n"), 1, "{first}");
    assert_ok(
        &c.command(
            DB,
            statement(
                8,
                3,
                doc! {"insert": "retried", "documents": [{"_id": 2}]},
                true,
            ),
        )
        .await,
    );
    let commit = statement(8, 3, doc! {"commitTransaction": 1}, false);
    assert_ok(&c.command("admin", commit.clone()).await);

    srv.kill9();
    srv.restart().await;
    let mut c = RawConn::connect(srv.addr).await;
    let again = c.command(DB, bump).await;
    assert_eq!(
        again.get_document("value").unwrap(),
        first.get_document("value").unwrap(),
        "{again}"
    );
    let older = c.command(DB, insert).await;
    assert_eq!(code_of(&older).0, 225, "{older}");
    assert_ok(&c.command("admin", commit).await);
    let coll = srv.db(DB).collection::<Document>("retried");
    let one = coll.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert_eq!(num(&one, "n"), 1, "the retried write was applied twice");
    assert_eq!(coll.count_documents(doc! {}).await.unwrap(), 2);
}
