//! Change streams, opened with the driver's `watch()`:
//!
//! * `change-latency`: on each server, `<db>.changes` is dropped and
//!   created again and a change stream is opened on it; once a probe
//!   insert has come back through the stream, one writer inserts
//!   `{_id: n, seq: n, pad}` (about `--doc-size` bytes) at
//!   `--change-rate` documents a second for `--duration` seconds, one
//!   insert at a time, noting when each insert was acknowledged, while a
//!   watcher task notes when each `insert` event arrives. The watcher is
//!   then given up to [`DRAIN_WAIT`] to receive the events still due.
//!   An event's delivery latency is the time from its insert's
//!   acknowledgement to its receipt, 0 when it came before the
//!   acknowledgement; p50, p99 and max are printed in milliseconds on a
//!   `RESULT` line with the writes and the events received, and a
//!   `MISMATCH` line when they differ (with the duplicated, missing and
//!   unexpected events).
//! * `--watchers N`: during `load`, `update` and `mixed`, N tasks each
//!   hold a change stream open on the workload's collection and count
//!   the events they receive; a `WATCHERS` line after each run gives the
//!   counts, so the run's throughput can be set against a run without
//!   streams.
//!
//! A server that refuses `watch()` (an error from `aggregate`, or a
//! reply that is not a change event, as the ceiling gives) is reported
//! as unsupported: `change-latency` skips it, and the YCSB workloads run
//! there without watchers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mongodb::bson::{doc, Bson, RawDocumentBuf};
use mongodb::change_stream::event::{ChangeStreamEvent, OperationType};
use mongodb::change_stream::ChangeStream;
use mongodb::error::ErrorKind;
use mongodb::Collection;
use tokio::task::JoinHandle;

use crate::report::{self, human_us, Measurement, Outcome};
use crate::workload::{self, Deadlines, Target, Workload};
use crate::Args;

/// The collection `change-latency` writes and watches.
const COLLECTION: &str = "changes";
/// How long `change-latency` waits for the probe insert's event, and a
/// `--watchers` stream for the answer to its first read, before calling
/// the stream unsupported.
const PROBE_WAIT: Duration = Duration::from_secs(5);
/// The longest a server holds a read of a stream that has no events to
/// send (`maxAwaitTimeMS`): a stream is only dropped between reads, so
/// this is also about how long one takes to stop.
const MAX_AWAIT: Duration = Duration::from_millis(200);
/// How long the `--watchers` streams may take to stop before their tasks
/// are cut off.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// How long the watcher may take, after the last write, to receive the
/// events still due.
const DRAIN_WAIT: Duration = Duration::from_secs(5);
/// Most documents one `change-latency` run writes (two 8-byte slots each
/// are allocated up front).
const MAX_WRITES: u64 = 10_000_000;
/// `seq` of the probe document.
const PROBE_SEQ: i64 = -1;
/// The writer's rate below which a warning is printed, as a fraction of
/// `--change-rate`.
const RATE_SHORTFALL: f64 = 0.95;

/// A change stream whose documents are left as raw BSON.
type Events = ChangeStream<ChangeStreamEvent<RawDocumentBuf>>;

/// Why a server refused a change stream, in a line: a command error's
/// code and message, or what the driver could not read as a change event.
fn refusal(e: &mongodb::error::Error) -> String {
    match &*e.kind {
        ErrorKind::Command(c) => format!("error {} ({}): {}", c.code, c.code_name, c.message),
        ErrorKind::BsonDeserialization(d) => format!("the reply is not a change event: {d}"),
        _ => e.to_string(),
    }
}

/// Opens a change stream on `coll` whose reads wait [`MAX_AWAIT`] at
/// most for events: `Err` with the reason when the server refuses it.
async fn watch(coll: &Collection<RawDocumentBuf>) -> Result<Events, String> {
    coll.watch()
        .max_await_time(MAX_AWAIT)
        .await
        .map_err(|e| refusal(&e))
}

/// One read of `stream`: `Ok(Some)` with an event, `Ok(None)` when none
/// came, `Err` when the stream failed or ended.
///
/// Reads go one request at a time and are never cut off, so that a
/// stream is only dropped between them (a stream dropped in the middle
/// of a read would take the connection the read was using with it).
async fn read(stream: &mut Events) -> Result<Option<ChangeStreamEvent<RawDocumentBuf>>, String> {
    match stream.next_if_any().await {
        Ok(Some(event)) => Ok(Some(event)),
        Ok(None) if stream.is_alive() => Ok(None),
        Ok(None) => Err("the change stream closed".into()),
        Err(e) => Err(refusal(&e)),
    }
}

/// Opens a change stream on `coll` and reads it once: `Ok` with the
/// stream and the number of events that read returned when the stream
/// works; `Err` with the reason when the server refused it, answered
/// something that is not a change event, closed the stream, or held the
/// read for over [`PROBE_WAIT`].
async fn open_stream(coll: &Collection<RawDocumentBuf>) -> Result<(Events, u64), String> {
    let mut stream = watch(coll).await?;
    match tokio::time::timeout(PROBE_WAIT, read(&mut stream)).await {
        Ok(Ok(event)) => Ok((stream, u64::from(event.is_some()))),
        Ok(Err(reason)) => Err(reason),
        Err(_) => Err(format!(
            "the first read of the change stream took over {}s",
            PROBE_WAIT.as_secs()
        )),
    }
}

/// The `seq` of an insert event: the inserted document's `seq`, else its
/// `_id` as the event's `documentKey` gives it.
fn event_seq(event: &ChangeStreamEvent<RawDocumentBuf>) -> Option<i64> {
    if let Some(seq) = event
        .full_document
        .as_ref()
        .and_then(|d| d.get_i64("seq").ok())
    {
        return Some(seq);
    }
    match event.document_key.as_ref()?.get("_id")? {
        Bson::Int64(n) => Some(*n),
        Bson::Int32(n) => Some(i64::from(*n)),
        _ => None,
    }
}

/// What one `--watchers` stream received.
struct WatcherStats {
    events: u64,
    error: Option<String>,
}

/// The `--watchers` streams of one run, consuming events until
/// [`Watchers::finish`].
pub struct Watchers {
    label: String,
    workload: Workload,
    concurrency: usize,
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<WatcherStats>>,
}

impl Watchers {
    /// Opens `n` change streams on `target`'s collection, each consumed
    /// by its own task; `None`, after printing why, when the server
    /// refuses them (the run then goes on without).
    pub async fn start(
        target: &Target,
        n: usize,
        (workload, concurrency): (Workload, usize),
    ) -> Option<Watchers> {
        let opened = futures::future::join_all((0..n).map(|_| open_stream(&target.raw))).await;
        let mut streams = Vec::with_capacity(n);
        for stream in opened {
            match stream {
                Ok(s) => streams.push(s),
                Err(reason) => {
                    println!(
                        "{}: {} conc={concurrency}: watchers unsupported ({reason}); running without them",
                        target.label,
                        workload.name()
                    );
                    return None;
                }
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = streams
            .into_iter()
            .map(|(stream, events)| tokio::spawn(consume(stream, events, Arc::clone(&stop))))
            .collect();
        Some(Watchers {
            label: target.label.clone(),
            workload,
            concurrency,
            stop,
            tasks,
        })
    }

    /// Stops the streams and prints a `WATCHERS` line with the events
    /// each consumed, and the first error one met.
    pub async fn finish(self, m: &Measurement) {
        self.stop.store(true, Ordering::Release);
        let give_up = tokio::time::Instant::now() + STOP_WAIT;
        let mut counts = Vec::with_capacity(self.tasks.len());
        let mut first_error = None;
        for mut task in self.tasks {
            let stats = match tokio::time::timeout_at(give_up, &mut task).await {
                Ok(Ok(stats)) => stats,
                Ok(Err(e)) => WatcherStats {
                    events: 0,
                    error: Some(format!("watcher failed: {e}")),
                },
                Err(_) => {
                    task.abort();
                    WatcherStats {
                        events: 0,
                        error: Some(format!(
                            "a watcher still reading {}s after the run was cut off",
                            STOP_WAIT.as_secs()
                        )),
                    }
                }
            };
            counts.push(stats.events);
            if first_error.is_none() {
                first_error = stats.error;
            }
        }
        println!(
            "WATCHERS target={} workload={}{} conc={} watchers={} events={} per_watcher={} ops={}",
            self.label,
            self.workload.name(),
            report::partitions_field(m),
            self.concurrency,
            counts.len(),
            counts.iter().sum::<u64>(),
            counts
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(","),
            m.ops,
        );
        if let Some(e) = first_error {
            println!("  watcher error: {e}");
        }
    }
}

/// Counts the events of `stream` (`events` already read) until told to
/// stop, or until the stream fails or ends.
async fn consume(mut stream: Events, events: u64, stop: Arc<AtomicBool>) -> WatcherStats {
    let mut stats = WatcherStats {
        events,
        error: None,
    };
    while !stop.load(Ordering::Acquire) {
        match read(&mut stream).await {
            Ok(Some(_)) => stats.events += 1,
            Ok(None) => {}
            Err(reason) => {
                stats.error = Some(reason);
                break;
            }
        }
    }
    stats
}

/// When each document of a `change-latency` run was acknowledged and when
/// its event arrived, in nanoseconds since the run started (0: not yet).
struct Ledger {
    start: Instant,
    acks: Vec<AtomicU64>,
    receipts: Vec<AtomicU64>,
}

impl Ledger {
    fn new(writes: u64, start: Instant) -> Ledger {
        let slots = || (0..writes).map(|_| AtomicU64::new(0)).collect();
        Ledger {
            start,
            acks: slots(),
            receipts: slots(),
        }
    }

    /// Now, in nanoseconds since the start, at least 1.
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    fn slot(slots: &[AtomicU64], seq: i64) -> Option<&AtomicU64> {
        usize::try_from(seq).ok().and_then(|i| slots.get(i))
    }

    fn acknowledged(&self, seq: i64) {
        if let Some(slot) = Ledger::slot(&self.acks, seq) {
            slot.store(self.now(), Ordering::Release);
        }
    }

    /// Notes the event of `seq`: `Some(true)` for its first, `Some(false)`
    /// for a duplicate, `None` for a `seq` the run did not write.
    fn received(&self, seq: i64) -> Option<bool> {
        let slot = Ledger::slot(&self.receipts, seq)?;
        Some(
            slot.compare_exchange(0, self.now(), Ordering::AcqRel, Ordering::Acquire)
                .is_ok(),
        )
    }

    /// Whether every acknowledged document's event has arrived, once the
    /// writer is done: checks from document `*from` on, and moves `from`
    /// past the documents found done, so that repeated checks look at
    /// each document once.
    fn drained(&self, from: &mut usize) -> bool {
        while let (Some(a), Some(r)) = (self.acks.get(*from), self.receipts.get(*from)) {
            if a.load(Ordering::Acquire) != 0 && r.load(Ordering::Acquire) == 0 {
                return false;
            }
            *from += 1;
        }
        true
    }
}

/// What the `change-latency` watcher received.
#[derive(Default)]
struct Received {
    /// Insert events of documents the run wrote, duplicates included.
    events: u64,
    duplicates: u64,
    /// Insert events of documents the run did not write.
    unexpected: u64,
    /// Events other than inserts.
    other: u64,
    error: Option<String>,
}

/// Notes every insert event of `stream` in `ledger` until told to stop,
/// or until the stream fails or ends.
async fn watch_inserts(mut stream: Events, ledger: Arc<Ledger>, stop: Arc<AtomicBool>) -> Received {
    let mut seen = Received::default();
    while !stop.load(Ordering::Acquire) {
        match read(&mut stream).await {
            Ok(Some(event)) if event.operation_type == OperationType::Insert => {
                match event_seq(&event).and_then(|seq| ledger.received(seq)) {
                    Some(first) => {
                        seen.events += 1;
                        if !first {
                            seen.duplicates += 1;
                        }
                    }
                    None => seen.unexpected += 1,
                }
            }
            Ok(Some(_)) => seen.other += 1,
            Ok(None) => {}
            Err(reason) => {
                seen.error = Some(reason);
                break;
            }
        }
    }
    seen
}

/// One server's `change-latency` run.
struct Delivery {
    /// `ops`: events received; `latency_us`: delivery latency;
    /// `misses`: missing events; `elapsed`: the writer's time.
    m: Measurement,
    writes: u64,
    received: Received,
    missing: u64,
    /// Events of documents whose insert was never acknowledged.
    unacknowledged: u64,
    /// Insert acknowledgement latency.
    ack_us: Histogram<u64>,
    drain: Duration,
}

impl Delivery {
    fn mismatch(&self) -> bool {
        self.received.events != self.writes
            || self.received.duplicates > 0
            || self.missing > 0
            || self.received.unexpected > 0
            || self.unacknowledged > 0
    }

    fn ms(us: u64) -> f64 {
        us as f64 / 1e3
    }

    fn result_line(&self, rate: u64) -> String {
        let m = &self.m;
        format!(
            "RESULT target={} workload={} rate={rate} secs={:.3} writes={} events={} writes_per_sec={:.1} p50_ms={:.3} p99_ms={:.3} max_ms={:.3} duplicates={} missing={} unexpected={} other_events={} errors={} ack_p50_us={} ack_p99_us={} drain_secs={:.3}",
            m.target,
            m.workload.name(),
            m.elapsed.as_secs_f64(),
            self.writes,
            self.received.events,
            self.writes as f64 / m.elapsed.as_secs_f64().max(1e-9),
            Delivery::ms(m.p50_us()),
            Delivery::ms(m.p99_us()),
            Delivery::ms(m.max_us()),
            self.received.duplicates,
            self.missing,
            self.received.unexpected + self.unacknowledged,
            self.received.other,
            m.errors,
            quantile(&self.ack_us, 0.5),
            quantile(&self.ack_us, 0.99),
            self.drain.as_secs_f64(),
        )
    }

    fn mismatch_line(&self) -> String {
        format!(
            "MISMATCH target={} workload={} writes={} events={} duplicates={} missing={} unexpected={}",
            self.m.target,
            self.m.workload.name(),
            self.writes,
            self.received.events,
            self.received.duplicates,
            self.missing,
            self.received.unexpected + self.unacknowledged,
        )
    }

    /// The sentence the summary gives this run.
    fn summary(&self) -> String {
        let m = &self.m;
        format!(
            "  {}: delivery p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms; {} writes, {} events{}",
            m.target,
            Delivery::ms(m.p50_us()),
            Delivery::ms(m.p99_us()),
            Delivery::ms(m.max_us()),
            self.writes,
            self.received.events,
            if self.mismatch() {
                format!(
                    " (MISMATCH: {} duplicates, {} missing, {} unexpected)",
                    self.received.duplicates,
                    self.missing,
                    self.received.unexpected + self.unacknowledged
                )
            } else {
                String::new()
            }
        )
    }
}

fn quantile(h: &Histogram<u64>, q: f64) -> u64 {
    if h.is_empty() {
        0
    } else {
        h.value_at_quantile(q)
    }
}

/// Latencies from 0 to an hour, in µs, at three significant digits.
fn histogram() -> Histogram<u64> {
    // Constant bounds that satisfy hdrhistogram's rules, so construction
    // cannot fail.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid constant histogram bounds")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// `change-latency` on each server in turn.
pub async fn change_latency(args: &Args, targets: &[Target]) -> Result<Outcome, String> {
    let w = Workload::ChangeLatency;
    let writes = ((args.change_rate as f64 * args.duration).ceil() as u64).min(MAX_WRITES);
    if writes == 0 {
        return Err("change-latency: --change-rate × --duration must be at least 1".into());
    }
    let mut summary = vec![
        format!(
            "change-latency: one writer inserting {} documents a second of about {} bytes for {}s into {}.{COLLECTION} \
             while a change stream receives them; latency from each insert's acknowledgement to its event's receipt",
            args.change_rate, args.doc_size, args.duration, args.db
        ),
        report::header(),
    ];
    let mut sentences = Vec::new();
    for target in targets {
        let t = target.for_collection(COLLECTION);
        match delivery(args, &t, writes).await? {
            Err(reason) => {
                println!("{}: {}: unsupported ({reason}); skipped", t.label, w.name());
                println!(
                    "RESULT target={} workload={} unsupported=yes",
                    t.label,
                    w.name()
                );
                sentences.push(format!("  {}: unsupported ({reason})", t.label));
            }
            Ok(d) => {
                println!("{}", report::row(&d.m));
                println!("{}", d.result_line(args.change_rate));
                if d.mismatch() {
                    println!("{}", d.mismatch_line());
                }
                let rate = d.writes as f64 / d.m.elapsed.as_secs_f64().max(1e-9);
                if rate < args.change_rate as f64 * RATE_SHORTFALL {
                    println!(
                        "  warning: the writer managed {rate:.0} inserts a second of the {} asked (insert p50 {}, p99 {})",
                        args.change_rate,
                        human_us(quantile(&d.ack_us, 0.5)),
                        human_us(quantile(&d.ack_us, 0.99)),
                    );
                }
                if let Some(e) = &d.m.first_error {
                    println!("  first error ({} in all): {e}", d.m.errors);
                }
                summary.push(report::row(&d.m));
                sentences.push(d.summary());
            }
        }
    }
    summary.extend(sentences);
    Ok(Outcome {
        measurements: Vec::new(),
        summary,
    })
}

/// One server's run: `Ok(Err(reason))` when it refuses change streams.
async fn delivery(
    args: &Args,
    t: &Target,
    writes: u64,
) -> Result<Result<Delivery, String>, String> {
    let err = |what: &str, e: mongodb::error::Error| {
        format!("{}: change-latency: {what} {}: {e}", t.label, t.namespace())
    };
    t.docs.drop().await.map_err(|e| err("dropping", e))?;
    t.client
        .database(&t.db)
        .run_command(doc! { "create": COLLECTION })
        .await
        .map_err(|e| err("creating", e))?;
    t.warm_pool(2).await.map_err(|e| err("connecting to", e))?;

    let mut stream = match watch(&t.raw).await {
        Ok(s) => s,
        Err(reason) => return Ok(Err(reason)),
    };
    // The probe: the stream is ready once an insert comes back through it.
    t.docs
        .insert_one(doc! { "_id": PROBE_SEQ, "seq": PROBE_SEQ })
        .await
        .map_err(|e| err("inserting the probe into", e))?;
    let probe_deadline = tokio::time::Instant::now() + PROBE_WAIT;
    let no_probe = || {
        Ok(Err(format!(
            "no event within {}s of an insert",
            PROBE_WAIT.as_secs()
        )))
    };
    loop {
        match tokio::time::timeout_at(probe_deadline, read(&mut stream)).await {
            Err(_) => return no_probe(),
            Ok(Err(reason)) => return Ok(Err(reason)),
            Ok(Ok(Some(event)))
                if event.operation_type == OperationType::Insert
                    && event_seq(&event) == Some(PROBE_SEQ) =>
            {
                break
            }
            Ok(Ok(_)) if tokio::time::Instant::now() >= probe_deadline => return no_probe(),
            Ok(Ok(_)) => {}
        }
    }

    let pad = "x".repeat(args.doc_size.saturating_sub(40));
    let interval = 1.0 / args.change_rate as f64;
    let duration = Duration::from_secs_f64(args.duration);
    let start = Instant::now();
    let ledger = Arc::new(Ledger::new(writes, start));
    let stop = Arc::new(AtomicBool::new(false));
    let mut watcher = tokio::spawn(watch_inserts(
        stream,
        Arc::clone(&ledger),
        Arc::clone(&stop),
    ));

    let deadlines = Deadlines::after(start, duration);
    let mut ack_us = histogram();
    let (mut written, mut errors, mut first_error) = (0_u64, 0_u64, None);
    for seq in 0..writes as i64 {
        let due = start + Duration::from_secs_f64(seq as f64 * interval);
        if due >= deadlines.stop {
            break;
        }
        tokio::time::sleep_until(due.into()).await;
        let document = doc! { "_id": seq, "seq": seq, "pad": pad.as_str() };
        let t0 = Instant::now();
        match tokio::time::timeout_at(deadlines.abandon.into(), t.docs.insert_one(document)).await {
            Ok(Ok(_)) => {
                ledger.acknowledged(seq);
                ack_us.saturating_record(micros(t0.elapsed()).max(1));
                written += 1;
            }
            Ok(Err(e)) => {
                errors += 1;
                first_error.get_or_insert_with(|| e.to_string());
            }
            Err(_) => {
                errors += 1;
                first_error.get_or_insert_with(|| {
                    "abandoned: an insert still running well after the run ended".into()
                });
                break;
            }
        }
    }
    let elapsed = start.elapsed();

    let drain_start = Instant::now();
    let mut done = 0;
    while !ledger.drained(&mut done) && !watcher.is_finished() && drain_start.elapsed() < DRAIN_WAIT
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drain = drain_start.elapsed();
    // The watcher stops after its current read, within about MAX_AWAIT.
    stop.store(true, Ordering::Release);
    let received = match tokio::time::timeout(STOP_WAIT, &mut watcher).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Received {
            error: Some(format!("watcher failed: {e}")),
            ..Received::default()
        },
        Err(_) => {
            watcher.abort();
            Received {
                error: Some(format!(
                    "the watcher, still reading {}s after the drain, was cut off",
                    STOP_WAIT.as_secs()
                )),
                ..Received::default()
            }
        }
    };

    let mut latency_us = histogram();
    let (mut missing, mut unacknowledged) = (0, 0);
    for (ack, receipt) in ledger.acks.iter().zip(&ledger.receipts) {
        match (ack.load(Ordering::Acquire), receipt.load(Ordering::Acquire)) {
            (0, 0) => {}
            (0, _) => unacknowledged += 1,
            (_, 0) => missing += 1,
            // An event that came before its acknowledgement counts 0.
            (ack, receipt) => latency_us.saturating_record(receipt.saturating_sub(ack) / 1_000),
        }
    }
    if let Some(e) = &received.error {
        errors += 1;
        first_error.get_or_insert_with(|| format!("change stream: {e}"));
    }
    // The collection is not needed after the run.
    let _ = t.docs.drop().await;
    let mut m = workload::merge(t, Workload::ChangeLatency, 1, elapsed, Vec::new());
    m.ops = received.events;
    m.latency_us = latency_us;
    m.errors = errors;
    m.misses = missing;
    m.first_error = first_error;
    Ok(Ok(Delivery {
        m,
        writes: written,
        received,
        missing,
        unacknowledged,
        ack_us,
        drain,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_counts_first_receipts_and_duplicates() {
        let ledger = Ledger::new(3, Instant::now());
        ledger.acknowledged(0);
        ledger.acknowledged(1);
        let mut done = 0;
        assert!(!ledger.drained(&mut done));
        assert_eq!(done, 0);
        assert_eq!(ledger.received(0), Some(true));
        assert_eq!(ledger.received(0), Some(false));
        assert_eq!(ledger.received(3), None);
        assert_eq!(ledger.received(-1), None);
        assert!(!ledger.drained(&mut done));
        assert_eq!(done, 1);
        assert_eq!(ledger.received(1), Some(true));
        // Document 2 was never acknowledged: it does not hold the drain.
        assert!(ledger.drained(&mut done));
        assert_eq!(done, 3);
        assert_eq!(ledger.received(2), Some(true));
        assert!(ledger.drained(&mut 0));
    }

    #[test]
    fn a_zero_latency_is_recorded() {
        let mut h = histogram();
        h.saturating_record(0);
        assert_eq!(h.len(), 1);
        assert_eq!(h.max(), 0);
    }
}
