//! The HTTP side port (`--http-bind`, default `127.0.0.1:8088`): what a
//! deployer's tools ask of a running server, beside the wire port and
//! never in its way.
//!
//! - `/livez`: the process answers, from before storage opens
//!   ([`Starting`]).
//! - `/readyz`: storage is open and the wire port accepts clients; 503
//!   while storage opens and once shutdown has begun.
//! - `/metrics`: Prometheus's text format (OpenMetrics). Commands by name
//!   and outcome with their latency (counted as they run, see
//!   `commands::metrics`), and figures read when scraped: connections,
//!   open cursors, operations by kind, request units, per collection its
//!   partitions and splits, and per physical partition its documents,
//!   bytes, reads, writes, fan-outs, request units and throttled
//!   requests. Labels are names of databases, collections, partitions
//!   and commands, never a key value.
//! - `/` and `/api/...`: the page that shows partitions and their heat
//!   ([`super::ui`]), fed by a sampler ([`super::heat`]) that runs as
//!   long as this port serves.
//!
//! A scrape reads the catalog and per-partition totals on a blocking
//! thread, off the runtime's worker threads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use super::{heat, ui};
use crate::commands::ServerState;
use crate::router::charge::request_charge;
use crate::router::throttle::PartitionActivity;
use crate::router::PRIMARY_PARTITION;

/// The content type of Prometheus's OpenMetrics text.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The side port while storage opens, which may take a while after a
/// crash: `/livez` answers and everything else is 503, so a probe sees a
/// process that is starting rather than none (and a liveness check does
/// not kill it for recovering). [`Starting::into_listener`] hands the
/// bound socket to [`serve`], so no request is refused in between.
pub struct Starting {
    listener: std::net::TcpListener,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Starting {
    /// Binds `addr` and answers on it until [`Starting::into_listener`].
    pub async fn bind(addr: std::net::SocketAddr) -> std::io::Result<Starting> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let serving = TcpListener::from_std(listener.try_clone()?)?;
        let app = axum::Router::new()
            .route("/livez", get(|| async { "ok\n" }))
            .fallback(|| async { (StatusCode::SERVICE_UNAVAILABLE, "starting\n") });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(e) = axum::serve(serving, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::warn!("the HTTP side port stopped while starting: {e}");
            }
        });
        Ok(Starting {
            listener,
            stop,
            task,
        })
    }

    /// Stops answering "starting" and gives the socket for [`serve`].
    pub async fn into_listener(self) -> std::io::Result<TcpListener> {
        let _ = self.stop.send(());
        let _ = self.task.await;
        TcpListener::from_std(self.listener)
    }
}

/// Serves the side port, and samples the page's heat history, until the
/// task is aborted.
pub async fn serve(listener: TcpListener, state: ServerState) {
    let history = Arc::new(heat::History::default());
    let app = axum::Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state.clone())
        .merge(ui::routes(state.clone(), history.clone()));
    tokio::select! {
        served = axum::serve(listener, app) => {
            if let Err(e) = served {
                tracing::warn!("the HTTP side port stopped: {e}");
            }
        }
        () = heat::sample(state.router.clone(), history) => {}
    }
}

async fn readyz(State(state): State<ServerState>) -> (StatusCode, &'static str) {
    if *state.topology.stopping().borrow() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else {
        (StatusCode::OK, "ready\n")
    }
}

async fn metrics(State(state): State<ServerState>) -> impl IntoResponse {
    match tokio::task::spawn_blocking(move || render(&state)).await {
        Ok(Ok(text)) => (StatusCode::OK, [(header::CONTENT_TYPE, OPENMETRICS)], text),
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("cannot render the metrics: {e}\n"),
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("the scrape failed: {e}\n"),
        ),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    database: String,
    collection: String,
    partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CollectionLabels {
    database: String,
    collection: String,
}

/// One partition's figures.
struct PartitionFigures {
    labels: PartitionLabels,
    documents: u64,
    bytes: u64,
    activity: PartitionActivity,
}

/// One collection's figures.
struct CollectionFigures {
    labels: CollectionLabels,
    partitions: u64,
    /// `None` for an unsharded collection, which never splits.
    splits: Option<u64>,
}

/// The whole exposition: the command families, and everything else as it
/// stands now.
fn render(state: &ServerState) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::with_prefix("shardgate");
    if let Some(metrics) = &state.metrics {
        metrics.register(&mut registry);
    }
    let c = &state.counters;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);

    gauge(
        &mut registry,
        "connections",
        "Client connections open now",
        load(&c.connections_current),
    );
    counter(
        &mut registry,
        "connections_created",
        "Client connections accepted since start",
        load(&c.connections_total),
    );
    counter(
        &mut registry,
        "connections_rejected",
        "Client connections refused over --max-connections",
        load(&c.connections_rejected),
    );
    gauge(
        &mut registry,
        "hello_waiting",
        "Streaming hello requests waiting for a topology change",
        load(&state.topology.awaiting),
    );
    gauge(
        &mut registry,
        "cursors_open",
        "Cursors open now",
        state.cursors.len() as u64,
    );
    gauge(
        &mut registry,
        "operations_running",
        "Operations running now, as currentOp lists them",
        state.router.operations().len() as u64,
    );
    counter(
        &mut registry,
        "network_received_bytes",
        "Bytes read from client connections",
        load(&c.traffic.bytes_in),
    );
    counter(
        &mut registry,
        "network_sent_bytes",
        "Bytes written to client connections",
        load(&c.traffic.bytes_out),
    );
    counter(
        &mut registry,
        "network_requests",
        "Messages received from clients",
        load(&c.traffic.requests),
    );
    let (disk_bytes, syncs) = state.router.storage_figures();
    gauge(
        &mut registry,
        "storage_disk_bytes",
        "Bytes the store uses on disk (approximate)",
        disk_bytes,
    );
    if let Some(syncs) = syncs {
        counter(
            &mut registry,
            "journal_syncs",
            "Journal syncs group commit ran; writes per sync is the rate of journal_synced_writes over this",
            syncs.syncs,
        );
        counter(
            &mut registry,
            "journal_synced_writes",
            "Writes group commit made durable",
            syncs.writes,
        );
    }
    let operations = Family::<KindLabel, Counter>::default();
    for (kind, n) in [
        ("insert", &c.op_insert),
        ("query", &c.op_query),
        ("update", &c.op_update),
        ("delete", &c.op_delete),
        ("getmore", &c.op_getmore),
        ("command", &c.op_command),
    ] {
        operations
            .get_or_create(&KindLabel { kind })
            .inc_by(load(n));
    }
    registry.register(
        "operations",
        "Operations by kind, as serverStatus's opcounters count them",
        operations,
    );
    let totals = state.router.unit_totals();
    let consumed = Counter::<f64, std::sync::atomic::AtomicU64>::default();
    consumed.inc_by(totals.consumed);
    registry.register(
        "request_units_consumed",
        "Request units charged since start",
        consumed,
    );
    counter(
        &mut registry,
        "requests_throttled",
        "Requests refused with 16500 TooManyRequests since start",
        totals.throttled,
    );

    gauge(
        &mut registry,
        "partition_split_bytes",
        "Bytes of documents past which a physical partition splits",
        state.router.split_bytes(),
    );
    let (collections, partitions) = figures(state);
    let partition_count = Family::<CollectionLabels, Gauge>::default();
    let splits = Family::<CollectionLabels, Counter>::default();
    for c in collections {
        partition_count
            .get_or_create(&c.labels)
            .set(clamp(c.partitions));
        if let Some(n) = c.splits {
            splits.get_or_create(&c.labels).inc_by(n);
        }
    }
    registry.register(
        "collection_partitions",
        "Physical partitions of each collection",
        partition_count,
    );
    registry.register(
        "collection_splits",
        "Partition splits of each sharded collection since start",
        splits,
    );

    let documents = Family::<PartitionLabels, Gauge>::default();
    let bytes = Family::<PartitionLabels, Gauge>::default();
    let units = Family::<PartitionLabels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
    let throttled = Family::<PartitionLabels, Counter>::default();
    let reads = Family::<PartitionLabels, Counter>::default();
    let writes = Family::<PartitionLabels, Counter>::default();
    let fanouts = Family::<PartitionLabels, Counter>::default();
    for p in partitions {
        let a = &p.activity;
        documents.get_or_create(&p.labels).set(clamp(p.documents));
        bytes.get_or_create(&p.labels).set(clamp(p.bytes));
        units
            .get_or_create(&p.labels)
            .inc_by(request_charge(a.consumed_micro));
        throttled.get_or_create(&p.labels).inc_by(a.throttled);
        reads.get_or_create(&p.labels).inc_by(a.reads);
        writes.get_or_create(&p.labels).inc_by(a.writes);
        fanouts.get_or_create(&p.labels).inc_by(a.fanouts);
    }
    registry.register(
        "partition_documents",
        "Documents in each physical partition",
        documents,
    );
    registry.register(
        "partition_bytes",
        "Bytes of documents in each physical partition",
        bytes,
    );
    registry.register(
        "partition_request_units_consumed",
        "Request units charged to each physical partition since start",
        units,
    );
    registry.register(
        "partition_requests_throttled",
        "Requests refused for each physical partition since start",
        throttled,
    );
    registry.register(
        "partition_reads",
        "Commands that read each physical partition since start",
        reads,
    );
    registry.register(
        "partition_writes",
        "Commands that wrote each physical partition since start (insert, update, delete, findAndModify)",
        writes,
    );
    registry.register(
        "partition_fanout_operations",
        "Reads and writes of each physical partition that also touched another partition of its collection",
        fanouts,
    );

    let mut text = String::new();
    encode(&mut text, &registry)?;
    Ok(text)
}

/// Every collection's figures, and its partitions': a sharded
/// collection's in hash order, an unsharded one's single `primary`.
fn figures(state: &ServerState) -> (Vec<CollectionFigures>, Vec<PartitionFigures>) {
    let router = &state.router;
    let mut collections = Vec::new();
    let mut figures = Vec::new();
    for coll in router.collections() {
        let labels = |partition: String| PartitionLabels {
            database: coll.ns.db.clone(),
            collection: coll.ns.coll.clone(),
            partition,
        };
        let parts = if coll.sharding.is_some() {
            let parts = router.partition_stats(&coll);
            let ids: Vec<u64> = parts.iter().map(|(p, _)| p.id).collect();
            let activity = router.partition_activity_of(&coll, &ids);
            parts
                .iter()
                .zip(activity)
                .map(|((p, usage), activity)| PartitionFigures {
                    labels: labels(p.name().to_string()),
                    documents: usage.count,
                    bytes: usage.bytes,
                    activity,
                })
                .collect()
        } else {
            let stats = router.collection_stats_now(&coll).unwrap_or_default();
            let activity = router.partition_activity_of(&coll, &[0]);
            vec![PartitionFigures {
                labels: labels(PRIMARY_PARTITION.to_string()),
                documents: stats.count,
                bytes: stats.size,
                activity: activity.first().copied().unwrap_or_default(),
            }]
        };
        collections.push(CollectionFigures {
            labels: CollectionLabels {
                database: coll.ns.db.clone(),
                collection: coll.ns.coll.clone(),
            },
            partitions: parts.len() as u64,
            splits: coll
                .sharding
                .is_some()
                .then(|| router.activity().map_or(0, |a| a.splits_of(coll.id))),
        });
        figures.extend(parts);
    }
    (collections, figures)
}

fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let gauge = Gauge::<i64>::default();
    gauge.set(clamp(value));
    registry.register(name, help, gauge);
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let counter = Counter::<u64>::default();
    counter.inc_by(value);
    registry.register(name, help, counter);
}
