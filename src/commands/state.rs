//! The state every command can reach, shared by all connections: the
//! router, open cursors, counters, remembered retries and the cluster
//! clock; and the connection a command arrived on. Below every handler
//! and the dispatch in `mod.rs`.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bson::oid::ObjectId;
use bson::{doc, Document, Timestamp};
use tokio::sync::watch;

use super::retry;
use crate::base::CompressorList;
pub use crate::base::UserName;
use crate::config::Config;
use crate::cursor::CursorRegistry;
use crate::query::interrupt::Probe;
use crate::router::SharedRouter;

/// What every command can reach: the router, open cursors, counters.
/// Cheap to clone.
#[derive(Clone)]
pub struct ServerState(Arc<StateInner>);

pub struct StateInner {
    pub router: SharedRouter,
    pub cursors: CursorRegistry,
    pub config: Config,
    pub started: Instant,
    pub counters: Counters,
    pub retries: retry::RetryTable,
    /// Every session's latest transaction.
    pub sessions: super::transactions::Sessions,
    /// `configureFailPoint`'s fail points (`--enable-test-commands`).
    pub fail_points: super::fail_point::FailPoints,
    /// The server parameters `setParameter` may change.
    pub parameters: Parameters,
    /// The topology version `hello` reports, and the shutdown signal.
    pub topology: Topology,
    /// Calls and latency per command, for `/metrics`; not counted
    /// without the HTTP side port (`--http-bind off`).
    pub metrics: Option<super::metrics::CommandMetrics>,
    /// Profiling levels and the slow-operation threshold.
    pub profiler: super::activity::Profiler,
    /// Time per collection and kind of operation (`top`).
    pub top: super::activity::Top,
    /// Authentication and authorization (`--auth`).
    pub security: Security,
}

impl std::ops::Deref for ServerState {
    type Target = StateInner;
    fn deref(&self) -> &StateInner {
        &self.0
    }
}

/// Counters for `serverStatus`.
#[derive(Default)]
pub struct Counters {
    pub connections_current: AtomicU64,
    pub connections_total: AtomicU64,
    /// Connections refused over `--max-connections`.
    pub connections_rejected: AtomicU64,
    pub next_connection_id: AtomicU64,
    pub op_insert: AtomicU64,
    pub op_query: AtomicU64,
    pub op_update: AtomicU64,
    pub op_delete: AtomicU64,
    pub op_getmore: AtomicU64,
    pub op_command: AtomicU64,
    /// Bytes and messages through client connections.
    pub traffic: Arc<Traffic>,
    /// Documents written and returned (`metrics.document`).
    pub documents: DocumentCounts,
}

/// What the connections carried: `serverStatus`'s `network`.
#[derive(Default, Debug)]
pub struct Traffic {
    /// Bytes read from clients, as they came (compressed or not).
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Messages received.
    pub requests: AtomicU64,
}

/// Documents by what happened to them: `serverStatus`'s
/// `metrics.document`.
#[derive(Default, Debug)]
pub struct DocumentCounts {
    pub inserted: AtomicU64,
    pub updated: AtomicU64,
    pub deleted: AtomicU64,
    pub returned: AtomicU64,
}

/// The parameters that may change while the server runs.
#[derive(Debug)]
pub struct Parameters {
    blocking_bytes: AtomicU64,
}

/// Reported by `getParameter`, fixed at start.
fn fixed() -> Document {
    doc! {
        "featureCompatibilityVersion": {"version": "7.0"},
        "authenticationMechanisms": ["SCRAM-SHA-1", "SCRAM-SHA-256"],
        "maxBSONDepth": 100,
    }
}

impl Parameters {
    /// The one parameter that changes at runtime.
    pub const BLOCKING_BYTES: &'static str = "internalQueryMaxBlockingSortMemoryUsageBytes";

    pub fn new(blocking_bytes: usize) -> Parameters {
        Parameters {
            blocking_bytes: AtomicU64::new(blocking_bytes as u64),
        }
    }

    /// The most bytes a blocking sort or stage may hold in memory.
    pub fn blocking_bytes(&self) -> usize {
        usize::try_from(self.blocking_bytes.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    /// Sets the blocking-stage limit; returns the former one.
    pub fn set_blocking_bytes(&self, bytes: u64) -> u64 {
        self.blocking_bytes.swap(bytes, Ordering::Relaxed)
    }

    /// Whether `name` is reported but fixed at start.
    pub fn is_fixed(&self, name: &str) -> bool {
        fixed().contains_key(name)
    }

    /// Every parameter `getParameter` reports, with its value.
    pub fn all(&self) -> Document {
        let mut all = fixed();
        all.insert(
            Parameters::BLOCKING_BYTES,
            self.blocking_bytes.load(Ordering::Relaxed) as i64,
        );
        all
    }
}

impl ServerState {
    pub fn new(router: SharedRouter, config: Config) -> ServerState {
        let metrics = config
            .http_bind
            .0
            .map(|_| super::metrics::CommandMetrics::default());
        let (config_auth, failures_per_second) = (config.auth, config.auth_failures_per_second);
        ServerState(Arc::new(StateInner {
            router,
            cursors: CursorRegistry::new(config.cursor_limits()),
            parameters: Parameters::new(config.max_blocking_stage_bytes),
            profiler: super::activity::Profiler::new(config.slow_ms),
            config,
            started: Instant::now(),
            counters: Counters::default(),
            retries: retry::RetryTable::default(),
            sessions: super::transactions::Sessions::default(),
            fail_points: super::fail_point::FailPoints::default(),
            topology: Topology::new(),
            metrics,
            top: super::activity::Top::default(),
            security: Security::new(config_auth, failures_per_second),
        }))
    }

    /// The next cluster time: wall-clock seconds with an increment, never
    /// going backwards ([`crate::base::clock`]).
    pub fn tick_cluster_time(&self) -> Timestamp {
        crate::base::clock::unpack(crate::base::clock::tick())
    }
}

/// What a streaming `hello` reports and waits on, as a mongos's topology
/// coordinator keeps it: this process's topology version and whether it
/// is shutting down. The version's counter is 0 while the process serves
/// (a gateway's own topology does not change), so a driver's server
/// monitor that asks with the current version waits its whole
/// `maxAwaitTimeMS`; shutdown moves it to 1, as a quiescing mongos does,
/// and ends every wait.
pub struct Topology {
    /// Made anew at every start: a driver that sees another one knows
    /// the server restarted.
    pub process_id: ObjectId,
    counter: std::sync::atomic::AtomicI64,
    stopping: watch::Sender<bool>,
    /// `hello` requests waiting now (`serverStatus`'s
    /// `connections.awaitingTopologyChanges`).
    pub awaiting: AtomicU64,
}

impl Topology {
    fn new() -> Topology {
        Topology {
            process_id: ObjectId::new(),
            counter: std::sync::atomic::AtomicI64::new(0),
            stopping: watch::channel(false).0,
            awaiting: AtomicU64::new(0),
        }
    }

    /// The version's counter (see the type's note).
    pub fn counter(&self) -> i64 {
        self.counter.load(Ordering::Acquire)
    }

    /// The version as `hello` reports it, and as MongoDB adds it to a
    /// "not primary" or shutdown error so a driver can tell a stale
    /// error from news.
    pub fn version(&self) -> Document {
        doc! {"processId": self.process_id, "counter": self.counter()}
    }

    /// Starts shutdown: the topology moves on and every wait on
    /// [`Topology::stopping`] ends.
    pub fn shut_down(&self) {
        self.counter.fetch_max(1, Ordering::AcqRel);
        self.stopping.send_replace(true);
    }

    /// Counts one more waiting `hello` until the guard drops.
    pub fn start_awaiting(&self) -> impl Drop + '_ {
        struct Awaiting<'a>(&'a AtomicU64);
        impl Drop for Awaiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.awaiting.fetch_add(1, Ordering::Relaxed);
        Awaiting(&self.awaiting)
    }

    /// Watches for shutdown; `*borrow()` is true once it began.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }
}

/// Authentication and authorization, shared by every connection.
pub struct Security {
    /// `--auth`: clients must log in, and commands are checked against
    /// their privileges. Off, nothing here is consulted.
    pub enabled: bool,
    /// Moves on whenever a user or role changes here, so connections
    /// resolve their privileges again before their next command.
    generation: AtomicU64,
    /// Failed authentications per client address in the current second.
    failures: parking_lot::Mutex<std::collections::HashMap<IpAddr, (u64, u32)>>,
    failures_per_second: u32,
}

impl Security {
    fn new(enabled: bool, failures_per_second: u32) -> Security {
        Security {
            enabled,
            generation: AtomicU64::new(0),
            failures: parking_lot::Mutex::new(std::collections::HashMap::new()),
            failures_per_second,
        }
    }

    /// The users-and-roles generation (see the field).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Notes that users or roles changed.
    pub fn users_changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    fn second() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }

    /// Whether `addr` failed to authenticate too often this second.
    pub fn throttled(&self, addr: IpAddr) -> bool {
        if self.failures_per_second == 0 {
            return false;
        }
        let now = Security::second();
        matches!(
            self.failures.lock().get(&addr),
            Some(&(second, n)) if second == now && n >= self.failures_per_second
        )
    }

    /// Counts a failed authentication from `addr`.
    pub fn failed(&self, addr: IpAddr) {
        if self.failures_per_second == 0 {
            return;
        }
        let now = Security::second();
        let mut failures = self.failures.lock();
        // Forget past seconds, so the map holds only this second's
        // addresses.
        if failures.len() > 1024 {
            failures.retain(|_, (second, _)| *second == now);
        }
        let entry = failures.entry(addr).or_insert((now, 0));
        if entry.0 != now {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
    }
}

/// Who is logged in on a connection, and a login under way.
#[derive(Default)]
pub struct Authentication {
    /// The authenticated user, as `user@db` names it; one at a time, as
    /// in MongoDB 7.0.
    pub user: Option<UserName>,
    /// A SCRAM conversation between `saslStart` and its last
    /// `saslContinue`.
    pub conversation: Option<SaslConversation>,
    /// The user's privileges, once resolved.
    pub privileges: Option<HeldPrivileges>,
}

/// What a set of roles grants: every role reached through them and the
/// privileges of all of those.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    /// The roles given and those they inherit, sorted.
    pub roles: Vec<UserName>,
    pub privileges: Vec<crate::auth::privileges::Privilege>,
}

/// A connection's resolved privileges, and the users-and-roles
/// generation they were resolved at ([`Security::generation`]).
pub struct HeldPrivileges {
    pub generation: u64,
    pub resolved_at: Instant,
    pub resolved: Arc<Resolved>,
}

/// One SCRAM conversation in progress.
pub struct SaslConversation {
    pub id: i32,
    pub user: UserName,
    pub step: SaslStep,
    /// The client asked to skip SCRAM's empty last exchange
    /// (`options: {skipEmptyExchange: true}`).
    pub skip_empty: bool,
}

pub enum SaslStep {
    /// The server sent its first message; the client's proof is next.
    Proof(crate::auth::scram::Conversation),
    /// The proof checked and the server sent its signature; the client's
    /// empty last message is next.
    Verified,
}

/// The connection a command arrived on.
pub struct ConnectionInfo {
    pub id: u64,
    pub peer: SocketAddr,
    /// Asks whether the client is still connected, so a command it
    /// abandoned stops (see [`crate::query::interrupt`]).
    pub probe: Option<Probe>,
    /// The subject of the client certificate verified in the TLS
    /// handshake, as an RFC 2253 string as mongod writes it (for
    /// MONGODB-X509); `None` without TLS or without a certificate.
    pub tls_peer_subject: Option<String>,
    /// What the last operation on it cost (`getLastRequestStatistics`).
    last_request: parking_lot::Mutex<Option<LastRequest>>,
    /// The compressors `hello` agreed on ([`CompressorList::to_bits`]).
    compressors: AtomicU16,
    /// The application name the client gave in its first `hello`.
    app_name: std::sync::OnceLock<String>,
    /// Set when the connection is to close instead of replying (the
    /// `failCommand` fail point's `closeConnection`).
    closing: std::sync::atomic::AtomicBool,
    /// Who is logged in (`--auth`).
    pub auth: parking_lot::Mutex<Authentication>,
    state: ServerState,
}

impl ConnectionInfo {
    pub fn open(state: &ServerState, peer: SocketAddr, probe: Option<Probe>) -> ConnectionInfo {
        let c = &state.counters;
        c.connections_current.fetch_add(1, Ordering::Relaxed);
        c.connections_total.fetch_add(1, Ordering::Relaxed);
        let id = c.next_connection_id.fetch_add(1, Ordering::Relaxed) + 1;
        ConnectionInfo {
            id,
            peer,
            probe,
            tls_peer_subject: None,
            last_request: parking_lot::Mutex::new(None),
            compressors: AtomicU16::new(0),
            app_name: std::sync::OnceLock::new(),
            closing: std::sync::atomic::AtomicBool::new(false),
            auth: parking_lot::Mutex::new(Authentication::default()),
            state: state.clone(),
        }
    }

    /// What the last operation on this connection cost.
    pub fn last_request(&self) -> Option<LastRequest> {
        self.last_request.lock().clone()
    }

    pub(super) fn set_last_request(&self, last: LastRequest) {
        *self.last_request.lock() = Some(last);
    }

    /// The compressors this connection's requests may use, in the
    /// client's order of preference; none until `hello` agrees on some.
    pub fn compressors(&self) -> CompressorList {
        CompressorList::from_bits(self.compressors.load(Ordering::Relaxed))
    }

    pub(super) fn set_compressors(&self, list: CompressorList) {
        self.compressors.store(list.to_bits(), Ordering::Relaxed);
    }

    /// The application name from the client's metadata, if it gave one.
    pub fn app_name(&self) -> Option<&str> {
        self.app_name.get().map(String::as_str)
    }

    /// Records the application name; only the first `hello` sets it.
    pub(super) fn set_app_name(&self, name: &str) {
        let _ = self.app_name.set(name.to_string());
    }

    /// Whether the connection must close now, without a reply.
    pub fn closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    pub(super) fn close(&self) {
        self.closing.store(true, Ordering::Relaxed);
    }
}

impl Drop for ConnectionInfo {
    fn drop(&mut self) {
        self.state
            .counters
            .connections_current
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the last operation on a connection cost.
#[derive(Debug, Clone)]
pub struct LastRequest {
    pub command: String,
    /// In micro-RU.
    pub charge: u64,
    pub millis: i64,
    pub activity: ActivityId,
}

/// Names one request, as Cosmos DB's `ActivityId` does: a number taken
/// per request, shown as a UUID only when `getLastRequestStatistics`
/// asks, so requests do not pay for random bytes and formatting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActivityId(u64);

impl ActivityId {
    pub fn next() -> ActivityId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ActivityId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// A version-4-shaped UUID: this process's random half, then the
    /// request's number.
    pub fn to_uuid(self) -> bson::Uuid {
        static PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let process = *PROCESS.get_or_init(rand::random::<u64>);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&process.to_be_bytes());
        bytes[8..].copy_from_slice(&self.0.to_be_bytes());
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        bson::Uuid::from_bytes(bytes)
    }
}

#[cfg(test)]
mod parameter_tests {
    use super::*;

    #[test]
    fn the_blocking_limit_changes_and_the_rest_is_reported() {
        let p = Parameters::new(100);
        assert_eq!(p.blocking_bytes(), 100);
        assert_eq!(p.set_blocking_bytes(5), 100);
        assert_eq!(p.blocking_bytes(), 5);
        let all = p.all();
        assert_eq!(all.get_i64(Parameters::BLOCKING_BYTES).ok(), Some(5));
        assert_eq!(all.get_i32("maxBSONDepth").ok(), Some(100));
        assert!(p.is_fixed("maxBSONDepth"));
        assert!(!p.is_fixed(Parameters::BLOCKING_BYTES));
    }
}
