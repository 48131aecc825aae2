//! The server: accept loop, one task per connection, graceful shutdown.
//!
//! `run` opens storage, builds the shared state, accepts connections
//! (at most `--max-connections` at once) and waits for Ctrl-C or SIGTERM.
//! On a signal it stops accepting, tells every connection to finish the
//! request it is serving and close, waits for them to drain, and syncs
//! storage before returning.

mod connection;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::commands::ServerState;
use crate::config::Config;
use crate::router::Router;
use crate::storage::embedded::EmbeddedEngine;

/// Runs the server until a shutdown signal.
pub async fn run(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    let engine = EmbeddedEngine::open(&config.data_dir, config.cache_mb * 1024 * 1024)?;
    let router = Arc::new(Router::open_with(
        engine.clone(),
        config.partition_options(),
    )?);
    let splitter = tokio::spawn(router.clone().run_splitter());
    let ttl_monitor = tokio::spawn(
        router
            .clone()
            .run_ttl_monitor(std::time::Duration::from_secs(
                config.ttl_monitor_interval_secs,
            )),
    );
    // Partitions that grew past the split size while the server was down.
    for coll in router.catalog.list() {
        if coll.sharding.is_some() {
            router.request_split(&coll.ns);
        }
    }
    let state = ServerState::new(router, config.clone());
    let listener = TcpListener::bind(config.bind).await?;
    tracing::info!(
        bind = %config.bind,
        data_dir = %config.data_dir.display(),
        "shardgate listening"
    );

    let (stop_tx, stop_rx) = watch::channel(false);
    let limit = Arc::new(Semaphore::new(config.max_connections));
    let cursor_reaper = tokio::spawn(crate::cursor::reap_idle(state.clone(), stop_rx.clone()));
    let mut connections = tokio::task::JoinSet::new();

    let signal = shutdown_signal();
    tokio::pin!(signal);
    loop {
        let permit = tokio::select! {
            _ = &mut signal => break,
            permit = limit.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = &mut signal => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((socket, peer)) => {
                let _ = socket.set_nodelay(true);
                let state = state.clone();
                let stop = stop_rx.clone();
                connections.spawn(async move {
                    connection::serve(socket, peer, state, stop).await;
                    drop(permit);
                });
            }
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        while connections.try_join_next().is_some() {}
    }

    tracing::info!("shutting down: draining connections");
    let _ = stop_tx.send(true);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(30), drain)
        .await
        .is_err()
    {
        tracing::warn!("connections still busy after 30 s; closing them");
    }
    cursor_reaper.abort();
    splitter.abort();
    ttl_monitor.abort();
    crate::storage::Engine::close(&*engine)?;
    tracing::info!("storage flushed; bye");
    Ok(())
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
