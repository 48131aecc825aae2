//! The server: accept loop, one task per connection, graceful shutdown.
//!
//! `run` takes the opened storage (chosen in `main`), builds the shared state, accepts connections
//! (serving at most `--max-connections` at once; the ones over it get an
//! error and are closed) and waits for Ctrl-C or SIGTERM.
//! On a signal it stops accepting, tells every connection to finish the
//! request it is serving and close, waits for them to drain, and syncs
//! storage before returning.

mod connection;
mod heat;
mod http;
mod tls;
mod ui;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::commands::ServerState;
use crate::config::Config;
use crate::router::Router;

pub use http::Starting as StartingSidePort;

/// Binds the side port (`--http-bind`, unless off) before storage opens,
/// answering that the server is starting; `None` when it is off or
/// cannot be bound (logged).
pub async fn start_side_port(config: &Config) -> Option<StartingSidePort> {
    let addr = config.http_bind.0?;
    match StartingSidePort::bind(addr).await {
        Ok(starting) => {
            tracing::info!(bind = %addr, "HTTP side port listening");
            Some(starting)
        }
        Err(e) => {
            tracing::warn!(
                bind = %addr,
                "HTTP side port not started: {e}; give another --http-bind, or off"
            );
            None
        }
    }
}

/// Runs the server over `router` (opened by the caller on the backend it
/// chose) until a shutdown signal; `side_port` is the side port bound
/// while storage opened ([`start_side_port`]).
pub async fn run(
    config: Config,
    router: Router,
    side_port: Option<StartingSidePort>,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut router = router;
    // What only the side port shows is recorded only when there is one,
    // from before the first split or request.
    if config.http_bind.0.is_some() {
        router.track_activity();
    }
    let router = Arc::new(router);
    let splitter = tokio::spawn(router.clone().run_splitter());
    let ttl_monitor = tokio::spawn(
        router
            .clone()
            .run_ttl_monitor(std::time::Duration::from_secs(
                config.ttl_monitor_interval_secs,
            )),
    );
    let trimmer = tokio::spawn(router.clone().run_change_log_trimmer(
        std::time::Duration::from_secs_f64(config.change_log_retention_hours * 3600.0),
        config.change_log_max_mb.saturating_mul(1 << 20),
    ));
    let session_trimmer = tokio::spawn(router.clone().run_session_trimmer(
        crate::commands::transactions::SESSION_TIMEOUT,
        std::time::Duration::from_secs(60),
    ));
    // Partitions that grew past the split size while the server was down.
    for coll in router.collections() {
        if coll.sharding.is_some() {
            router.request_split(&coll.ns);
        }
    }
    let tls = tls::TlsSetup::from_config(&config)?;
    let state = ServerState::new(router.clone(), config.clone());
    let listener = TcpListener::bind(config.bind).await?;
    tracing::info!(
        bind = %config.bind,
        data_dir = %config.data_dir.display(),
        tls = ?config.tls_mode,
        "shardgate listening"
    );
    let tls_reloader = tls.clone().map(|tls| tokio::spawn(tls.reload_on_hangup()));
    if !config.auth && !config.bind.ip().is_loopback() {
        tracing::warn!(
            bind = %config.bind,
            "ACCESS CONTROL IS OFF: anyone who can reach {} may read, change and drop \
             every database. Start with --auth, create a user, and connect with it.",
            config.bind
        );
    }

    // The side port serves in full once the wire port accepts: from then
    // on the server is ready.
    let side_port = match side_port {
        None => None,
        Some(starting) => match starting.into_listener().await {
            Ok(http) => Some(tokio::spawn(http::serve(http, state.clone()))),
            Err(e) => {
                tracing::warn!("HTTP side port stopped: {e}");
                None
            }
        },
    };

    let stop_rx = state.topology.stopping();
    let limit = Arc::new(Semaphore::new(config.max_connections));
    let per_address = Arc::new(PerAddress::new(config.max_connections_per_address));
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS));
    let cursor_reaper = {
        let (state, stop) = (state.clone(), stop_rx.clone());
        tokio::spawn(async move { crate::cursor::reap_idle(&state.cursors, stop).await })
    };
    let mut connections = tokio::task::JoinSet::new();

    let signal = shutdown_signal();
    tokio::pin!(signal);
    loop {
        let accepted = tokio::select! {
            _ = &mut signal => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((socket, peer)) => {
                let admitted = per_address
                    .admit(peer.ip())
                    .ok_or_else(|| {
                        format!(
                            "connection refused because too many open connections from {}: {}",
                            peer.ip(),
                            config.max_connections_per_address
                        )
                    })
                    .and_then(|from_address| {
                        let permit = limit.clone().try_acquire_owned().map_err(|_| {
                            format!(
                                "connection refused because too many open connections: {}",
                                config.max_connections
                            )
                        })?;
                        Ok((permit, from_address))
                    });
                match admitted {
                    Ok(permits) => {
                        let _ = socket.set_nodelay(true);
                        let state = state.clone();
                        let stop = stop_rx.clone();
                        let tls = tls.clone();
                        connections.spawn(async move {
                            connection::serve(socket, peer, state, stop, tls).await;
                            drop(permits);
                        });
                    }
                    Err(why) => {
                        state
                            .counters
                            .connections_rejected
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if let Some(suppressed) = REFUSED_WARNINGS.admit() {
                            tracing::warn!(%peer, suppressed, "{why}");
                        }
                        // Refusals are bounded too: past them, just close.
                        if let Ok(permit) = refusals.clone().try_acquire_owned() {
                            connections.spawn(async move {
                                connection::refuse(socket, why, REFUSAL_WAIT).await;
                                drop(permit);
                            });
                        }
                    }
                }
            }
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                if let Some(suppressed) = ACCEPT_WARNINGS.admit() {
                    tracing::warn!(suppressed, "accept failed: {e}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        while connections.try_join_next().is_some() {}
    }

    tracing::info!("shutting down: draining connections");
    state.topology.shut_down();
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(30), drain)
        .await
        .is_err()
    {
        tracing::warn!("connections still busy after 30 s; closing them");
    }
    cursor_reaper.abort();
    if let Some(tls_reloader) = tls_reloader {
        tls_reloader.abort();
    }
    if let Some(side_port) = side_port {
        side_port.abort();
    }
    splitter.abort();
    ttl_monitor.abort();
    trimmer.abort();
    session_trimmer.abort();
    router.close()?;
    tracing::info!("storage flushed; bye");
    Ok(())
}

/// Connections over `--max-connections` being answered at once; more
/// are closed straight away.
const MAX_REFUSALS: usize = 64;
/// How long a refused connection has to send its first message.
const REFUSAL_WAIT: Duration = Duration::from_secs(2);

/// Open connections per client address, against
/// `--max-connections-per-address` (0: no limit).
struct PerAddress {
    limit: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection counted against its address; dropping it uncounts it.
struct AddressPermit {
    counts: Arc<PerAddress>,
    ip: IpAddr,
}

impl PerAddress {
    fn new(limit: usize) -> PerAddress {
        PerAddress {
            limit,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one more connection from `ip`, unless it already has the
    /// most it may.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Option<AddressPermit>> {
        if self.limit == 0 {
            return Some(None);
        }
        let mut open = self.open.lock();
        let count = open.entry(ip).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(Some(AddressPermit {
            counts: self.clone(),
            ip,
        }))
    }
}

impl Drop for AddressPermit {
    fn drop(&mut self) {
        let mut open = self.counts.open.lock();
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

static REFUSED_WARNINGS: WarnLimit = WarnLimit::new();
static ACCEPT_WARNINGS: WarnLimit = WarnLimit::new();

/// Makes the data directory (and what is already in it) readable by this
/// user only: the journal holds document values in plain text. Files
/// created later are private through the process umask (see `main`).
pub fn secure_data_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let mut pending = vec![dir.to_path_buf()];
        while let Some(path) = pending.pop() {
            let meta = std::fs::symlink_metadata(&path)?;
            if meta.file_type().is_symlink() {
                continue;
            }
            let mode = if meta.is_dir() { 0o700 } else { 0o600 };
            if meta.permissions().mode() & 0o777 != mode {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            }
            if meta.is_dir() {
                for entry in std::fs::read_dir(&path)? {
                    pending.push(entry?.path());
                }
            }
        }
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir)?;
    Ok(())
}

/// Lets at most [`WarnLimit::PER_SECOND`] lines a second through from one
/// place in the code; the lines held back are counted and the count rides
/// on the next line let through (`suppressed = K`). A fuzzer sending
/// thousands of bad frames then costs a few log lines, not thousands.
pub(crate) struct WarnLimit {
    window: Mutex<Option<(Instant, u32, u64)>>,
}

impl WarnLimit {
    pub const PER_SECOND: u32 = 10;

    pub const fn new() -> WarnLimit {
        WarnLimit {
            window: parking_lot::const_mutex(None),
        }
    }

    /// `Some(lines held back since the last one let through)` when this
    /// line may be logged.
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut window = self.window.lock();
        let (start, logged, held) = window.get_or_insert((now, 0, 0));
        if now.duration_since(*start) >= Duration::from_secs(1) {
            *start = now;
            *logged = 0;
        }
        if *logged >= Self::PER_SECOND {
            *held += 1;
            return None;
        }
        *logged += 1;
        Some(std::mem::take(held))
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_counted_per_address_until_they_close() {
        let counts = Arc::new(PerAddress::new(2));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = counts.admit(a).unwrap();
        let _second = counts.admit(a).unwrap();
        assert!(counts.admit(a).is_none());
        assert!(counts.admit(b).is_some());
        drop(first);
        assert!(counts.admit(a).is_some());
        let unlimited = Arc::new(PerAddress::new(0));
        assert!((0..10).all(|_| unlimited.admit(a).is_some()));
        assert!(unlimited.open.lock().is_empty());
    }

    #[test]
    fn warnings_are_limited_per_second_and_the_rest_counted() {
        let limit = WarnLimit::new();
        let t0 = Instant::now();
        let let_through = (0..1000).filter(|_| limit.admit_at(t0).is_some()).count();
        assert_eq!(let_through, WarnLimit::PER_SECOND as usize);
        let later = t0 + Duration::from_millis(1500);
        assert_eq!(
            limit.admit_at(later),
            Some(1000 - WarnLimit::PER_SECOND as u64)
        );
        assert_eq!(limit.admit_at(later), Some(0));
    }

    #[cfg(unix)]
    #[test]
    fn the_data_directory_and_its_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        secure_data_dir(&dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        let file = dir.join("journal");
        std::fs::write(&file, b"x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        secure_data_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&file), 0o600);
    }
}
