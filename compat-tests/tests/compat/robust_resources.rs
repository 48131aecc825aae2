//! Resource abuse: each request that once took the server down, filled
//! its memory or ran past its time limit, replayed against a running
//! server while a second client pings it.
//!
//! Every test keeps a [`Watch`] on its server: a ping every 25 ms that
//! must be answered within [`MAX_PING`] (all but one in a thousand; none
//! may take [`MAX_PING_EVER`]), and the server's resident memory
//! (`VmRSS`) sampled at each ping, which must stay under a bound. Each
//! abuse is a step that must end with an error reply (not a dropped
//! connection, not a crash, not success where MongoDB refuses); a test
//! runs all its steps and then reports every one that failed.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use compat_tests::{
    alone,
    bson::{doc, Bson, Document},
    failure, num,
    wire::{self, Outcome},
    TestServer,
};
use futures::future::join_all;
use tokio::net::TcpStream;

/// Longest a ping may take while the server is under abuse (all but one
/// ping in a thousand).
const MAX_PING: Duration = Duration::from_millis(100);
/// Longest any ping may take.
const MAX_PING_EVER: Duration = Duration::from_secs(1);
/// Resident memory the server must stay under in every test.
const MAX_RSS_MB: u64 = 600;
/// The bound while values near the 16 MiB limits are built: six 15 MB
/// strings grouped into one result are 90 MB of data, held while a batch
/// is encoded and its copy sent, and the allocator keeps freed pages for a
/// while; what is refused must not add to that.
const MAX_RSS_LARGE_VALUES_MB: u64 = 1024;
/// Past this the watch kills the server, to keep the machine usable.
const KILL_RSS_MB: u64 = 2048;

fn rss_mb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

/// True while the process exists and is not a zombie.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat[stat.rfind(')')? + 2..].chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}

/// CPU time the process has used (user + system), in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are
    // the 14th and 15th fields of the line.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

fn ticks_per_second() -> f64 {
    // Linux's USER_HZ; `getconf CLK_TCK` says 100 on every common kernel.
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Pings the server and samples its memory until stopped.
struct Watch {
    stop: Arc<AtomicBool>,
    max_ping_us: Arc<AtomicU64>,
    slow_pings: Arc<AtomicU64>,
    failed_pings: Arc<AtomicU64>,
    max_rss_mb: Arc<AtomicU64>,
    pings: Arc<AtomicU64>,
    start_rss_mb: u64,
    pid: u32,
    thread: std::thread::JoinHandle<()>,
    steps: Vec<String>,
}

impl Watch {
    async fn start(srv: &TestServer) -> Watch {
        let pid = srv.pid().expect("server running");
        let addr = srv.addr;
        // The pings go over a raw socket from a thread of their own, so a
        // ping's time is the server's answer and not this test's runtime
        // waiting its turn behind the abuse it drives.
        let mut conn = std::net::TcpStream::connect(addr).expect("connect the watch");
        conn.set_nodelay(true).expect("TCP_NODELAY");
        conn.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("read timeout");
        // The first ping warms the connection; it does not count.
        ping(&mut conn, 0).expect("first ping");
        let stop = Arc::new(AtomicBool::new(false));
        let max_ping_us = Arc::new(AtomicU64::new(0));
        let slow_pings = Arc::new(AtomicU64::new(0));
        let failed_pings = Arc::new(AtomicU64::new(0));
        let start_rss_mb = rss_mb(pid).unwrap_or(0);
        let max_rss_mb = Arc::new(AtomicU64::new(start_rss_mb));
        let pings = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, max_ping_us, slow_pings, failed_pings, max_rss_mb, pings) = (
                stop.clone(),
                max_ping_us.clone(),
                slow_pings.clone(),
                failed_pings.clone(),
                max_rss_mb.clone(),
                pings.clone(),
            );
            std::thread::spawn(move || {
                let mut killed = false;
                let mut request_id = 1;
                while !stop.load(Ordering::Relaxed) {
                    request_id += 1;
                    let started = Instant::now();
                    let answered = ping(&mut conn, request_id);
                    let took = started.elapsed();
                    pings.fetch_add(1, Ordering::Relaxed);
                    match answered {
                        Ok(()) => {
                            max_ping_us.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
                            if took > MAX_PING {
                                slow_pings.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(_) => {
                            failed_pings.fetch_add(1, Ordering::Relaxed);
                            // The connection is in an unknown state; start
                            // again on a new one.
                            match std::net::TcpStream::connect(addr) {
                                Ok(fresh) => {
                                    let _ = fresh.set_nodelay(true);
                                    let _ = fresh.set_read_timeout(Some(Duration::from_secs(2)));
                                    conn = fresh;
                                }
                                Err(_) => std::thread::sleep(Duration::from_millis(100)),
                            }
                        }
                    }
                    if let Some(rss) = rss_mb(pid) {
                        max_rss_mb.fetch_max(rss, Ordering::Relaxed);
                        if rss > KILL_RSS_MB && !killed {
                            eprintln!("watch: server RSS {rss} MB; killing it");
                            let _ = std::process::Command::new("kill")
                                .args(["-9", &pid.to_string()])
                                .status();
                            killed = true;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(25));
                }
            })
        };
        Watch {
            stop,
            max_ping_us,
            slow_pings,
            failed_pings,
            max_rss_mb,
            pings,
            start_rss_mb,
            pid,
            thread,
            steps: Vec::new(),
        }
    }

    fn rss_now(&self) -> u64 {
        rss_mb(self.pid).unwrap_or(0)
    }

    /// Runs one abuse; a failure is kept for the end of the test. Once
    /// the server is gone the remaining steps are skipped (and fail).
    async fn step(
        &mut self,
        srv: &TestServer,
        name: &str,
        f: impl Future<Output = Result<(), String>>,
    ) {
        if !running(self.pid) {
            eprintln!("FAILED {name}: skipped, the server is gone");
            self.steps
                .push(format!("{name}: skipped, the server is gone"));
            return;
        }
        let started = Instant::now();
        let outcome = f.await;
        let alive = if running(self.pid) {
            alive(srv).await
        } else {
            Err("the server process is gone".to_string())
        };
        let line = format!(
            "{name}: {:.1}s, RSS now {} MB (peak {} MB)",
            started.elapsed().as_secs_f64(),
            self.rss_now(),
            self.max_rss_mb.load(Ordering::Relaxed)
        );
        match (outcome, alive) {
            (Ok(()), Ok(())) => eprintln!("ok     {line}"),
            (Err(e), _) | (Ok(()), Err(e)) => {
                eprintln!("FAILED {line}: {e}");
                self.steps.push(format!("{name}: {e}"));
            }
        }
    }

    /// Stops the pinging and asserts on everything seen.
    async fn finish(self, rss_bound_mb: u64) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        let max_ping = Duration::from_micros(self.max_ping_us.load(Ordering::Relaxed));
        let max_rss = self.max_rss_mb.load(Ordering::Relaxed);
        let (pings, slow, failed) = (
            self.pings.load(Ordering::Relaxed),
            self.slow_pings.load(Ordering::Relaxed),
            self.failed_pings.load(Ordering::Relaxed),
        );
        eprintln!(
            "watch: {pings} pings, slowest {max_ping:?}, {slow} over {MAX_PING:?}, {failed} failed; \
             RSS {} MB at start, peak {max_rss} MB",
            self.start_rss_mb
        );
        let mut problems = self.steps;
        if failed > 0 {
            problems.push(format!("{failed} of {pings} pings failed or took over 2 s"));
        }
        // A latency bound on two shared cores is a percentile: one ping in
        // a thousand may lose its core to the abuse for a moment (the
        // machine also runs this test), never for long.
        let allowed_slow = pings / 1000;
        if slow > allowed_slow || max_ping > MAX_PING_EVER {
            problems.push(format!(
                "slowest ping took {max_ping:?}; {slow} of {pings} over {MAX_PING:?} \
                 (at most {allowed_slow} may be, none over {MAX_PING_EVER:?})"
            ));
        }
        if max_rss > rss_bound_mb {
            problems.push(format!(
                "server RSS reached {max_rss} MB (bound {rss_bound_mb} MB)"
            ));
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}

/// Sends one `ping` on `conn` and reads its reply; Err when the server
/// does not answer `ok: 1` within the socket's read timeout.
fn ping(conn: &mut std::net::TcpStream, request_id: i32) -> Result<(), String> {
    use std::io::{Read, Write};
    let frame = wire::op_msg(request_id, &doc! {"ping": 1, "$db": "admin"});
    conn.write_all(&frame)
        .map_err(|e| format!("send ping: {e}"))?;
    let mut header = [0u8; 16];
    conn.read_exact(&mut header)
        .map_err(|e| format!("read ping reply: {e}"))?;
    let len = i32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let body_len = usize::try_from(len)
        .ok()
        .and_then(|l| l.checked_sub(16))
        .ok_or_else(|| format!("reply length {len}"))?;
    let mut body = vec![0u8; body_len];
    conn.read_exact(&mut body)
        .map_err(|e| format!("read ping reply: {e}"))?;
    // OP_MSG body: flag bits (4 bytes), section kind 0, the document.
    let reply = body
        .get(5..)
        .and_then(|d| Document::from_reader(d).ok())
        .ok_or("ping reply is not an OP_MSG document")?;
    match reply.get("ok") {
        Some(Bson::Double(ok)) if *ok == 1.0 => Ok(()),
        Some(Bson::Int32(1)) => Ok(()),
        _ => Err(format!("ping answered {reply}")),
    }
}

/// A fresh client gets an answer to `ping`.
async fn alive(srv: &TestServer) -> Result<(), String> {
    let client = srv.new_client().await;
    match tokio::time::timeout(
        Duration::from_secs(10),
        client.database("admin").run_command(doc! {"ping": 1}),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("server does not answer ping: {e}")),
        Err(_) => Err("ping timed out".into()),
    }
}

/// Runs `cmd` on `db`; Ok when the server answered with an error (of
/// `code`, when given), Err with what happened otherwise.
async fn refused(
    srv: &TestServer,
    db: &str,
    cmd: Document,
    code: Option<i32>,
) -> Result<(), String> {
    let shown: String = format!("{cmd}").chars().take(200).collect();
    let r = tokio::time::timeout(Duration::from_secs(60), srv.db(db).run_command(cmd)).await;
    match r {
        Err(_) => Err(format!("{shown}: no answer within 60 s")),
        // A write refuses a document in `writeErrors`, with `ok: 1`.
        Ok(Ok(reply)) => match reply
            .get_array("writeErrors")
            .ok()
            .and_then(|errors| errors.first())
            .and_then(Bson::as_document)
            .and_then(|e| e.get("code"))
            .and_then(Bson::as_i32)
        {
            None => Err(format!("{shown}: succeeded; expected an error")),
            Some(got) => match code {
                Some(c) if got != c => Err(format!("{shown}: write error {got}, expected {c}")),
                _ => Ok(()),
            },
        },
        Ok(Err(e)) => match failure(&e) {
            None => Err(format!("{shown}: not a server error: {e}")),
            Some(f) => match code {
                Some(c) if f.code != c => Err(format!(
                    "{shown}: error {} {}, expected {c}",
                    f.code, f.code_name
                )),
                _ => Ok(()),
            },
        },
    }
}

/// The aggregate of the issue: each `$reduce` step doubles a string.
fn doubling(range: i32, initial: Bson, step: &str) -> Document {
    doc! {
        "aggregate": 1,
        "pipeline": [
            {"$documents": [{"a": 1}]},
            {"$project": {"x": {"$reduce": {
                "input": {"$range": [0, range]},
                "initialValue": initial,
                "in": {step: ["$$value", "$$value"]},
            }}}},
        ],
        "cursor": {},
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expression_results_and_replies_are_bounded() {
    // Alone in the test process: each test loads its server hard, and a
    // ping's latency should measure that server, not the two cores shared
    // with another test's.
    let _alone = alone();
    let srv = TestServer::start().await;
    let mut watch = Watch::start(&srv).await;

    watch
        .step(&srv, "$reduce doubling a string 30 times", async {
            refused(&srv, "admin", doubling(30, "ab".into(), "$concat"), None).await
        })
        .await;
    watch
        .step(&srv, "$reduce doubling a string 40 times", async {
            refused(&srv, "admin", doubling(40, "ab".into(), "$concat"), None).await
        })
        .await;
    watch
        .step(&srv, "$reduce doubling an array 30 times", async {
            refused(
                &srv,
                "admin",
                doubling(30, Bson::Array(vec![1.into()]), "$concatArrays"),
                None,
            )
            .await
        })
        .await;

    let big = srv.db("test").collection::<Document>("big");
    watch
        .step(&srv, "$group $push of six 15 MB strings", async {
            for i in 0..6 {
                let s = "x".repeat(15 * 1024 * 1024);
                big.insert_one(doc! {"_id": i, "s": s})
                    .await
                    .map_err(|e| format!("insert a 15 MB document: {e}"))?;
            }
            let cmd = doc! {
                "aggregate": "big",
                "pipeline": [{"$group": {"_id": null, "p": {"$push": "$s"}}}],
                "cursor": {},
            };
            refused(&srv, "test", cmd, None).await
        })
        .await;
    watch
        .step(&srv, "$project producing a 20 MB document", async {
            let cmd = doc! {
                "aggregate": "big",
                "pipeline": [
                    {"$limit": 1},
                    {"$project": {"x": {"$concat": [
                        {"$substrCP": ["$s", 0, 10 * 1024 * 1024]},
                        {"$substrCP": ["$s", 0, 10 * 1024 * 1024]},
                    ]}}},
                ],
                "cursor": {},
            };
            refused(&srv, "test", cmd, None).await
        })
        .await;
    big.drop().await.ok();
    watch.finish(MAX_RSS_LARGE_VALUES_MB).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_sorted_cursors_stay_small() {
    // Alone in the test process: each test loads its server hard, and a
    // ping's latency should measure that server, not the two cores shared
    // with another test's.
    let _alone = alone();
    const DOCS: i32 = 100_000;
    const CURSORS: usize = 200;
    let srv = TestServer::start().await;
    let db = srv.db("test");
    let coll = db.collection::<Document>("c");
    let pad = "p".repeat(60);
    for start in (0..DOCS).step_by(10_000) {
        let batch: Vec<Document> = (start..start + 10_000)
            .map(|i| doc! {"_id": i, "k": (i * 7919) % DOCS, "pad": &pad})
            .collect();
        coll.insert_many(batch).await.expect("insert documents");
    }
    let mut watch = Watch::start(&srv).await;
    let before = watch.rss_now();
    let mut ids = Vec::new();
    watch
        .step(&srv, "200 sorted find cursors with batchSize 1", async {
            for wave in 0..CURSORS / 4 {
                let replies = join_all((0..4).map(|_| async {
                    db.run_command(
                        doc! {"find": "c", "filter": {}, "sort": {"k": 1}, "batchSize": 1},
                    )
                    .await
                }))
                .await;
                for r in replies {
                    let reply = r.map_err(|e| format!("find {}: {e}", wave * 4))?;
                    let cursor = reply.get_document("cursor").map_err(|e| e.to_string())?;
                    ids.push(num(cursor, "id"));
                }
            }
            // The cursors still work and keep their order.
            let more = db
                .run_command(doc! {"getMore": ids[0], "collection": "c", "batchSize": 1})
                .await
                .map_err(|e| format!("getMore: {e}"))?;
            let next = more
                .get_document("cursor")
                .and_then(|c| c.get_array("nextBatch"))
                .map_err(|e| e.to_string())?;
            let k = next
                .first()
                .and_then(Bson::as_document)
                .and_then(|d| d.get("k"))
                .cloned();
            if k != Some(Bson::Int32(1)) {
                return Err(format!(
                    "second document of the sort has k {k:?}, expected 1"
                ));
            }
            Ok(())
        })
        .await;
    let after = watch.rss_now();
    eprintln!(
        "cursors: {} open over {DOCS} documents; server RSS {before} MB before, {after} MB after",
        ids.len()
    );
    if !ids.is_empty() {
        let ids: Vec<Bson> = ids.iter().map(|&i| Bson::Int64(i)).collect();
        let _ = db
            .run_command(doc! {"killCursors": "c", "cursors": ids})
            .await;
    }
    watch.finish(500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwind_of_100000_elements() {
    // Alone in the test process: each test loads its server hard, and a
    // ping's latency should measure that server, not the two cores shared
    // with another test's.
    let _alone = alone();
    let srv = TestServer::start().await;
    let coll = srv.db("test").collection::<Document>("arr");
    let items: Vec<Bson> = (0..100_000).map(Bson::Int32).collect();
    coll.insert_one(doc! {"_id": 1, "a": items})
        .await
        .expect("insert");
    let mut watch = Watch::start(&srv).await;
    watch
        .step(&srv, "$unwind of 100,000 elements", async {
            let started = Instant::now();
            let cmd = doc! {
                "aggregate": "arr",
                "pipeline": [{"$unwind": "$a"}, {"$count": "n"}],
                "cursor": {},
                "maxTimeMS": 20_000,
            };
            let r = tokio::time::timeout(Duration::from_secs(30), srv.db("test").run_command(cmd))
                .await
                .map_err(|_| "no answer within 30 s".to_string())?
                .map_err(|e| format!("{e}"))?;
            let n = r
                .get_document("cursor")
                .and_then(|c| c.get_array("firstBatch"))
                .ok()
                .and_then(|b| b.first())
                .and_then(Bson::as_document)
                .map(|d| num(d, "n"));
            eprintln!(
                "$unwind of 100,000 elements took {:.2}s",
                started.elapsed().as_secs_f64()
            );
            match n {
                Some(100_000) => Ok(()),
                other => Err(format!("counted {other:?} unwound documents")),
            }
        })
        .await;
    watch.finish(MAX_RSS_MB).await;
}

/// Seconds of expression evaluation with a small result.
fn heavy_pipeline() -> Vec<Document> {
    let docs: Vec<Bson> = (0..400).map(|i| Bson::Document(doc! {"i": i})).collect();
    vec![
        doc! {"$documents": docs},
        doc! {"$project": {"x": {"$reduce": {
            "input": {"$range": [0, 100_000]},
            "initialValue": 0,
            "in": {"$add": ["$$value", "$$this"]},
        }}}},
        doc! {"$group": {"_id": null, "s": {"$sum": "$x"}}},
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_time_ms_and_disconnects_stop_work() {
    // Alone in the test process: each test loads its server hard, and a
    // ping's latency should measure that server, not the two cores shared
    // with another test's.
    let _alone = alone();
    let srv = TestServer::start().await;
    let mut watch = Watch::start(&srv).await;
    watch
        .step(&srv, "maxTimeMS 500 on seconds of work", async {
            let started = Instant::now();
            let cmd =
                doc! {"aggregate": 1, "pipeline": heavy_pipeline(), "cursor": {}, "maxTimeMS": 500};
            let r = refused(&srv, "admin", cmd, Some(50)).await;
            let took = started.elapsed();
            eprintln!("maxTimeMS 500: answered after {:.2}s", took.as_secs_f64());
            r?;
            if took > Duration::from_millis(1500) {
                return Err(format!("MaxTimeMSExpired came after {took:?}"));
            }
            Ok(())
        })
        .await;
    watch
        .step(&srv, "client disconnects mid-query", async {
            let pid = srv.pid().ok_or("server not running")?;
            let mut s = TcpStream::connect(srv.addr)
                .await
                .map_err(|e| e.to_string())?;
            let mut cmd = doc! {"aggregate": 1, "pipeline": heavy_pipeline(), "cursor": {}};
            cmd.insert("$db", "admin");
            if !wire::send(&mut s, &wire::op_msg(1, &cmd)).await {
                return Err("could not send the aggregate".into());
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(s);
            tokio::time::sleep(Duration::from_millis(300)).await;
            let t0 = cpu_ticks(pid).ok_or("no /proc stat")?;
            tokio::time::sleep(Duration::from_secs(2)).await;
            let used = (cpu_ticks(pid).ok_or("no /proc stat")? - t0) as f64 / ticks_per_second();
            eprintln!("after the disconnect the server used {used:.2} CPU-seconds in 2 s");
            if used > 0.5 {
                return Err(format!(
                    "the server kept working after its client left: {used:.2} CPU-seconds in 2 s"
                ));
            }
            Ok(())
        })
        .await;
    watch.finish(MAX_RSS_MB).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_and_write_abuse_is_refused() {
    // Alone in the test process: each test loads its server hard, and a
    // ping's latency should measure that server, not the two cores shared
    // with another test's.
    let _alone = alone();
    let srv = TestServer::start_with_args(&["--max-connections", "24"]).await;
    let addr = srv.addr;
    let mut watch = Watch::start(&srv).await;

    // A message that starts and never finishes: the connection must be
    // closed within the partial-message limit (30 s by default).
    let partial = tokio::spawn(async move {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let frame = wire::op_msg(7, &doc! {"ping": 1, "$db": "admin"});
        if !wire::send(&mut s, &frame[..20]).await {
            return Err("could not send the partial message".to_string());
        }
        match wire::read_reply(&mut s, Duration::from_secs(40)).await {
            Outcome::Silent => Err("a partial message held its connection for 40 s".to_string()),
            _ => Ok(()),
        }
    });

    watch
        .step(&srv, "connections over --max-connections", async {
            let mut conns = Vec::new();
            for _ in 0..60 {
                if let Ok(s) = TcpStream::connect(addr).await {
                    conns.push(s);
                }
            }
            let outcomes = join_all(conns.iter_mut().enumerate().map(|(i, s)| async move {
                let frame = wire::op_msg(i as i32 + 1, &doc! {"ping": 1, "$db": "admin"});
                wire::send(s, &frame).await;
                wire::read_reply(s, Duration::from_secs(5)).await
            }))
            .await;
            let silent = outcomes
                .iter()
                .filter(|o| matches!(o, Outcome::Silent))
                .count();
            let refused = outcomes
                .iter()
                .filter(|o| match o {
                    Outcome::Closed => true,
                    Outcome::Reply { doc: Some(d), .. } => {
                        d.get("ok").and_then(Bson::as_f64) == Some(0.0)
                    }
                    Outcome::Reply { doc: None, .. } => true,
                    Outcome::Silent => false,
                })
                .count();
            drop(conns);
            if silent > 0 {
                return Err(format!(
                    "{silent} of 60 connections got neither an answer nor a close"
                ));
            }
            if refused == 0 {
                return Err("60 connections over a limit of 24 were all served".into());
            }
            Ok(())
        })
        .await;

    for (i, wc) in [
        doc! {"w": -1},
        doc! {"w": 1000},
        doc! {"j": "x"},
        doc! {"w": f64::NAN},
        doc! {"w": {}},
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("insert with writeConcern {wc}");
        watch
            .step(&srv, &name, async {
                let cmd = doc! {"insert": "wc", "documents": [{"_id": i as i32}], "writeConcern": wc.clone()};
                refused(&srv, "test", cmd, None).await
            })
            .await;
    }

    watch
        .step(&srv, "insert of a document nested 150 levels", async {
            let mut nested = doc! {"leaf": 1};
            for _ in 1..150 {
                nested = doc! {"a": nested};
            }
            let cmd = doc! {"insert": "deep", "documents": [nested]};
            refused(&srv, "test", cmd, Some(15)).await
        })
        .await;

    watch
        .step(&srv, "a partial message", async {
            partial.await.map_err(|e| e.to_string())?
        })
        .await;
    watch.finish(MAX_RSS_MB).await;
}
