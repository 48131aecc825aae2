//! Test harness: starts a Shardgate server for the driver tests.
//!
//! Sits outside the server: every test talks to a real `shardgate` process
//! over loopback, through the official Rust driver (`mongodb`) or, for the
//! wire-level tests, through raw bytes on a `TcpStream` (see [`wire`]).
//!
//! Each test starts its own server ([`TestServer::start`]) on a free
//! 127.0.0.1 port with a fresh temporary data directory, so tests run in
//! parallel without sharing state. The server's stdout and stderr go to a log
//! file beside the data directory; when a test panics, the log is printed so
//! the failure can be read together with what the server said.
//!
//! The driver tests are one test binary (`tests/compat/`, a module per
//! area), so every test shares one process: a test gives its server
//! environment variables through [`TestServer::start_with_env`] instead of
//! setting its own, and one whose timings must not share the cores with
//! another test's server takes [`alone`].
//!
//! The binary is `$SHARDGATE_BIN`, else `<workspace>/target/release/shardgate`,
//! else `<workspace>/target/debug/shardgate` (`$CARGO_TARGET_DIR` is honoured).
//!
//! With `$SHARDGATE_TEST_POSTGRES` set to the URLs of a fleet of PostgreSQL
//! servers (`scripts/pg-fleet start`), the same tests run on the postgres
//! backend: each server keeps its data in a schema of its own on every
//! PostgreSQL server (dropped when the test ends), and with
//! `$SHARDGATE_TEST_GATEWAYS=2` two gateway processes serve it, the driver
//! spreading operations over both (see [`fleet`] and [`gateways`]).

use std::{
    fs::{File, OpenOptions},
    io::{Read, Seek, SeekFrom},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{mpsc, Arc, Mutex},
    thread::JoinHandle,
    time::{Duration, Instant},
};

pub use mongodb;
pub use mongodb::bson;

use mongodb::{
    bson::{doc, Document},
    error::{Error, ErrorKind, WriteFailure},
    options::ClientOptions,
    Client, Database,
};

/// How long one test's server may live before the watchdog kills it, so that
/// a server that stops answering fails the test instead of hanging the suite.
/// Override with `SHARDGATE_TEST_TIMEOUT_SECS`.
const DEFAULT_WATCHDOG_SECS: u64 = 240;

/// How long to wait for a freshly started server to answer `ping`.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `shardgate` process owned by one test — or, on a PostgreSQL
/// fleet with `SHARDGATE_TEST_GATEWAYS` > 1, several gateway processes
/// serving the same data.
pub struct TestServer {
    /// A driver client connected with `directConnection=true`; with several
    /// gateways, a client that knows them all and spreads operations over
    /// them (see [`TestServer::uri`]).
    pub client: Client,
    /// A client of the first gateway only, for commands that must reach
    /// the gateway of an earlier one (a raw `getMore` or `killCursors`
    /// names a cursor only the gateway that opened it has).
    pub pinned: Client,
    /// `127.0.0.1:PORT` of the (first) gateway.
    pub addr: SocketAddr,
    child: Arc<Mutex<Option<Child>>>,
    /// Holds `data/` and `server.log` (and `dataN/`, `serverN.log` of further
    /// gateways); removed on drop.
    root: tempfile::TempDir,
    log_path: PathBuf,
    watchdog: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
    /// The gateways after the first.
    more: Vec<Gateway>,
    /// This test's schema on the PostgreSQL fleet, when it runs on one.
    fleet: Option<FleetSchema>,
    /// Environment variables every process of this server starts with.
    env: Vec<(String, String)>,
    /// Counts this server while it lives (see [`alone`]).
    _running: Running,
}

/// A further gateway process in front of the same fleet.
struct Gateway {
    addr: SocketAddr,
    child: Arc<Mutex<Option<Child>>>,
    data_dir: PathBuf,
    log_path: PathBuf,
}

/// The PostgreSQL servers the driver tests run against instead of the
/// embedded store: `$SHARDGATE_TEST_POSTGRES`, URLs separated by spaces
/// (`scripts/pg-fleet start` prints them). `None` when unset or empty.
pub fn fleet() -> Option<Vec<String>> {
    let urls: Vec<String> = std::env::var("SHARDGATE_TEST_POSTGRES")
        .ok()?
        .split_whitespace()
        .map(str::to_string)
        .collect();
    (!urls.is_empty()).then_some(urls)
}

/// True, after saying why on stderr, when the tests run on a PostgreSQL
/// fleet and this test checks what only the embedded backend shows: each
/// partition presented as a shard of its own (a fleet shows one shard per
/// server), or one snapshot over every partition (a fleet reads each
/// server at its own moment). Such a test returns at once.
pub fn embedded_only(why: &str) -> bool {
    let fleet = fleet().is_some();
    if fleet {
        eprintln!("not on a PostgreSQL fleet: {why}");
    }
    fleet
}

/// How many gateways a test server on the fleet runs:
/// `$SHARDGATE_TEST_GATEWAYS` (default 1), and always 1 without a fleet (the
/// embedded store belongs to one process). A test that picks its own
/// `--backend` gets one gateway whatever this says; `srv.addrs().len()` is
/// the count for a given server.
pub fn gateways() -> usize {
    if fleet().is_none() {
        return 1;
    }
    std::env::var("SHARDGATE_TEST_GATEWAYS")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(1)
        .max(1)
}

/// One test's share of the fleet: a schema of its own on every server, so
/// tests on the same servers are independent fleets.
struct FleetSchema {
    urls: Vec<String>,
    name: String,
}

impl FleetSchema {
    fn new(urls: Vec<String>) -> FleetSchema {
        use std::hash::{BuildHasher, Hasher};
        use std::sync::atomic::{AtomicU64, Ordering};
        static SEQ: AtomicU64 = AtomicU64::new(0);
        // RandomState is seeded randomly per process; the pid, the time and a
        // counter keep names apart across test binaries run at once.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u64(SEQ.fetch_add(1, Ordering::Relaxed));
        if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(t.as_nanos());
        }
        FleetSchema {
            urls,
            name: format!("sgt_{:016x}", h.finish()),
        }
    }

    fn args(&self) -> Vec<String> {
        let mut args = vec!["--backend".to_string(), "postgres".to_string()];
        for url in &self.urls {
            args.push("--postgres".into());
            args.push(url.clone());
        }
        args.push("--postgres-schema".into());
        args.push(self.name.clone());
        args
    }

    /// Removes what the test left on every server, best effort: first the
    /// prepared transactions of this schema (the backend names them
    /// `<schema>:...`; they hold locks the drop would wait for), then the
    /// schema. Errors are ignored: a server may be down, psql missing.
    fn drop_all(&self) {
        let schema = &self.name;
        for url in &self.urls {
            let gids = psql(
                url,
                &[format!(
                    "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() \
                     AND left(gid, {}) = '{schema}'",
                    schema.len()
                )],
            );
            let mut commands = vec![
                "SET lock_timeout = '10s'".to_string(),
                "SET statement_timeout = '30s'".to_string(),
            ];
            for gid in gids.lines().filter(|l| !l.is_empty()) {
                commands.push(format!("ROLLBACK PREPARED '{}'", gid.replace('\'', "''")));
            }
            commands.push(format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
            psql(url, &commands);
        }
    }
}

/// Runs `commands` (each its own transaction) through `psql` on `url` and
/// returns what they printed, unaligned and without headers; "" on failure.
fn psql(url: &str, commands: &[String]) -> String {
    let mut cmd = Command::new("psql");
    cmd.args(["-X", "-q", "-A", "-t", "-d", url]);
    for c in commands {
        cmd.arg("-c").arg(c);
    }
    cmd.env("PGCONNECT_TIMEOUT", "5")
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    match cmd.output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(_) => String::new(),
    }
}

/// Where the server binary is.
pub fn server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SHARDGATE_BIN") {
        return PathBuf::from(p);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("compat-tests lives inside the workspace")
        .to_path_buf();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    for profile in ["release", "debug"] {
        let p = target.join(profile).join("shardgate");
        if p.exists() {
            return p;
        }
    }
    panic!(
        "no shardgate binary: set SHARDGATE_BIN or run `cargo build --release -p shardgate` \
         (looked in {})",
        target.display()
    );
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral loopback port")
        .port()
}

/// The driver connection string for a server at `addr`.
pub fn uri(addr: SocketAddr) -> String {
    format!(
        "mongodb://{addr}/?directConnection=true&serverSelectionTimeoutMS=10000\
         &connectTimeoutMS=5000&appname=shardgate-compat-tests"
    )
}

impl TestServer {
    /// Starts a server on a free port with a fresh data directory and waits
    /// until it answers `ping`.
    pub async fn start() -> TestServer {
        Self::start_with_args(&[]).await
    }

    /// Like [`TestServer::start`], with extra command-line arguments.
    ///
    /// With `$SHARDGATE_TEST_POSTGRES` set (see [`fleet`]) and no
    /// `--backend` in `extra`, the server keeps its data on that fleet in a
    /// fresh schema, and [`gateways`] processes serve it.
    pub async fn start_with_args(extra: &[&str]) -> TestServer {
        Self::start_gateways(extra, None).await
    }

    /// Like [`TestServer::start_with_args`], with `gateways` gateway
    /// processes on the fleet whatever [`gateways`] says (one without a
    /// fleet).
    pub async fn start_gateways(extra: &[&str], gateways: Option<usize>) -> TestServer {
        Self::start_inner(extra, &[], gateways).await
    }

    /// Like [`TestServer::start_with_args`], the server's processes also
    /// getting the environment variables `env` (kept for restarts). The
    /// test process's own environment is shared by every test in it, so a
    /// test gives a server its variables here rather than setting them.
    pub async fn start_with_env(env: &[(&str, &str)], extra: &[&str]) -> TestServer {
        Self::start_inner(extra, env, None).await
    }

    async fn start_inner(
        extra: &[&str],
        env: &[(&str, &str)],
        gateways: Option<usize>,
    ) -> TestServer {
        let running = Running::new();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let root = tempfile::Builder::new()
            .prefix("shardgate-test-")
            .tempdir()
            .expect("create temp dir");
        std::fs::create_dir_all(root.path().join("data")).expect("create data dir");
        let log_path = root.path().join("server.log");
        let own_backend = extra
            .iter()
            .any(|a| *a == "--backend" || a.starts_with("--backend="));
        let fleet = if own_backend {
            None
        } else {
            fleet().map(FleetSchema::new)
        };
        let count = match (&fleet, gateways) {
            (None, _) => 1,
            (Some(_), Some(n)) => n.max(1),
            (Some(_), None) => self::gateways(),
        };
        let child = Arc::new(Mutex::new(None));
        let more: Vec<Gateway> = (2..=count)
            .map(|n| Gateway {
                addr: SocketAddr::from(([127, 0, 0, 1], 0)),
                child: Arc::new(Mutex::new(None)),
                data_dir: root.path().join(format!("data{n}")),
                log_path: root.path().join(format!("server{n}.log")),
            })
            .collect();
        let slots = std::iter::once(child.clone())
            .chain(more.iter().map(|g| g.child.clone()))
            .collect();
        let watchdog = spawn_watchdog(slots);
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        if let Some(f) = &fleet {
            args.extend(f.args());
        }
        let mut last_err = String::new();
        // A port picked as free may be taken before the server binds it;
        // try a few ports before giving up.
        for _attempt in 0..4 {
            let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            let data_dir = root.path().join("data");
            match launch(&child, &data_dir, &log_path, addr, &args, &env).await {
                Ok(client) => {
                    let mut srv = TestServer {
                        pinned: client.clone(),
                        client,
                        addr,
                        child,
                        root,
                        log_path,
                        watchdog: Some(watchdog),
                        more,
                        fleet,
                        env,
                        _running: running,
                    };
                    // One after the other: the first has set up the schema
                    // by the time the next starts.
                    srv.launch_more(&args, false).await;
                    return srv;
                }
                Err(e) => last_err = e,
            }
        }
        if let Some(f) = &fleet {
            f.drop_all();
        }
        let log = read_tail(&log_path, 64 * 1024);
        panic!("shardgate did not start: {last_err}\n---- server log ----\n{log}");
    }

    /// Starts the gateways after the first (on their old ports if `reuse`)
    /// and points `self.client` at all of them. Panics (and `Drop` cleans
    /// up) if one does not start.
    async fn launch_more(&mut self, args: &[String], reuse: bool) {
        if self.more.is_empty() {
            return;
        }
        for i in 0..self.more.len() {
            let g = &self.more[i];
            std::fs::create_dir_all(&g.data_dir).expect("create data dir");
            let mut ports = Vec::new();
            if reuse {
                ports.push(g.addr.port());
            }
            while ports.len() < 4 {
                ports.push(free_port());
            }
            let mut last_err = String::new();
            let mut started = None;
            for port in ports {
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                match launch(&g.child, &g.data_dir, &g.log_path, addr, args, &self.env).await {
                    Ok(_) => {
                        started = Some(addr);
                        break;
                    }
                    Err(e) => last_err = e,
                }
            }
            match started {
                Some(addr) => self.more[i].addr = addr,
                None => panic!("shardgate gateway {} did not start: {last_err}", i + 2),
            }
        }
        self.client = Client::with_uri_str(self.uri())
            .await
            .expect("client to every gateway");
    }

    /// The connection string for this server: [`uri`] of its address, or,
    /// with several gateways, one naming them all (without
    /// `directConnection`, so the driver sees several mongos, spreads
    /// operations over them and keeps each cursor on the one that opened it).
    pub fn uri(&self) -> String {
        if self.more.is_empty() {
            return uri(self.addr);
        }
        let hosts: Vec<String> = self.addrs().iter().map(|a| a.to_string()).collect();
        format!(
            "mongodb://{}/?serverSelectionTimeoutMS=10000&connectTimeoutMS=5000\
             &appname=shardgate-compat-tests",
            hosts.join(",")
        )
    }

    /// Every gateway's address, the first being [`TestServer::addr`].
    pub fn addrs(&self) -> Vec<SocketAddr> {
        std::iter::once(self.addr)
            .chain(self.more.iter().map(|g| g.addr))
            .collect()
    }

    /// The schema this server's data lives in on the PostgreSQL fleet.
    pub fn postgres_schema(&self) -> Option<&str> {
        self.fleet.as_ref().map(|f| f.name.as_str())
    }

    /// The data directory this server uses (kept across restarts).
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// The log file holding the server's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        read_tail(&self.log_path, usize::MAX)
    }

    /// The process id of the running server, if it is running.
    pub fn pid(&self) -> Option<u32> {
        self.child.lock().unwrap().as_ref().map(|c| c.id())
    }

    /// A database handle on the harness client.
    pub fn db(&self, name: &str) -> Database {
        self.client.database(name)
    }

    /// A database handle on the first gateway only ([`TestServer::pinned`]).
    pub fn pinned_db(&self, name: &str) -> Database {
        self.pinned.database(name)
    }

    /// A new client to this server with options adjusted by `f`
    /// (e.g. to install a command event handler).
    pub async fn client_with(&self, f: impl FnOnce(&mut ClientOptions)) -> Client {
        let mut opts = ClientOptions::parse(self.uri()).await.expect("parse uri");
        f(&mut opts);
        Client::with_options(opts).expect("build client")
    }

    /// A fresh client (new connection pool) to this server.
    pub async fn new_client(&self) -> Client {
        self.client_with(|_| {}).await
    }

    /// Gives the server a fresh watchdog period from now, for a test that
    /// runs longer than one period in steps that each make progress (a
    /// long crash run re-arms it once a cycle).
    pub fn rearm_watchdog(&mut self) {
        if let Some((stop, handle)) = self.watchdog.take() {
            let _ = stop.send(());
            let _ = handle.join();
        }
        let slots = self.slots().into_iter().cloned().collect();
        self.watchdog = Some(spawn_watchdog(slots));
    }

    /// Every gateway's process slot, the first one first.
    fn slots(&self) -> Vec<&Arc<Mutex<Option<Child>>>> {
        std::iter::once(&self.child)
            .chain(self.more.iter().map(|g| &g.child))
            .collect()
    }

    /// Kills the server (every gateway) with SIGKILL (no chance to flush
    /// anything) and waits for it to be gone.
    pub fn kill9(&mut self) {
        for slot in self.slots() {
            if let Some(mut c) = slot.lock().unwrap().take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// Sends SIGTERM (to every gateway) and waits up to `timeout` for the
    /// server to exit; kills it with SIGKILL after that. Returns the exit
    /// status of the (first) gateway if it exited by itself.
    pub fn stop(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let first = self.child.lock().unwrap().take();
        let others: Vec<Child> = self
            .more
            .iter()
            .filter_map(|g| g.child.lock().unwrap().take())
            .collect();
        for c in first.iter().chain(&others) {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
        }
        let status = first.and_then(|c| exit_by(c, deadline));
        for c in others {
            exit_by(c, deadline);
        }
        status
    }

    /// Stops the server (gracefully if it is still running) and starts it
    /// again on the same data directory (and the same fleet schema).
    /// `self.client` is replaced with a client to the new process(es).
    pub async fn restart(&mut self) {
        self.restart_with_args(&[]).await
    }

    /// [`TestServer::restart`] with extra command-line arguments (the
    /// fleet's are added as at start).
    pub async fn restart_with_args(&mut self, extra: &[&str]) {
        self.stop(Duration::from_secs(15));
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        args.extend(self.fleet.as_ref().map(|f| f.args()).unwrap_or_default());
        let mut last_err = String::new();
        // Prefer the same port; fall back to a new one if it is taken.
        let mut ports = vec![self.addr.port()];
        for _ in 0..3 {
            ports.push(free_port());
        }
        for port in ports {
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let data_dir = self.data_dir();
            match launch(
                &self.child,
                &data_dir,
                &self.log_path,
                addr,
                &args,
                &self.env,
            )
            .await
            {
                Ok(client) => {
                    self.pinned = client.clone();
                    self.client = client;
                    self.addr = addr;
                    self.launch_more(&args, true).await;
                    return;
                }
                Err(e) => last_err = e,
            }
        }
        panic!(
            "shardgate did not restart: {last_err}\n---- server log ----\n{}",
            self.log()
        );
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        for slot in self.slots() {
            if let Some(mut c) = slot.lock().map(|mut g| g.take()).unwrap_or(None) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if let Some((stop, handle)) = self.watchdog.take() {
            let _ = stop.send(());
            let _ = handle.join();
        }
        if let Some(f) = &self.fleet {
            f.drop_all();
        }
        if std::thread::panicking() {
            if let Some(schema) = self.postgres_schema() {
                eprintln!("(data was in PostgreSQL schema {schema}, now dropped)");
            }
            let logs = std::iter::once(&self.log_path).chain(self.more.iter().map(|g| &g.log_path));
            for path in logs {
                eprintln!(
                    "---- shardgate log ({}) ----\n{}\n---- end of shardgate log ----",
                    path.display(),
                    read_tail(path, 64 * 1024)
                );
            }
        }
    }
}

/// Waits until `deadline` for `c` to exit; kills it with SIGKILL after
/// that. The exit status if it exited by itself.
fn exit_by(mut c: Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        match c.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = c.kill();
                let _ = c.wait();
                return None;
            }
        }
    }
}

/// Starts the process and waits until it answers `ping`; on failure the
/// child is killed and the reason returned.
async fn launch(
    slot: &Arc<Mutex<Option<Child>>>,
    data_dir: &Path,
    log_path: &Path,
    addr: SocketAddr,
    extra: &[String],
    env: &[(String, String)],
) -> Result<Client, String> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(|e| format!("open log: {e}"))?;
    let log2 = log.try_clone().map_err(|e| format!("clone log: {e}"))?;
    let log_level = std::env::var("SHARDGATE_TEST_LOG_LEVEL").unwrap_or_else(|_| "info".into());
    // Servers run side by side: none takes the default HTTP side port
    // unless its test gives one.
    let side_port = extra
        .iter()
        .any(|a| a == "--http-bind" || a.starts_with("--http-bind="));
    let side_port_off: &[&str] = if side_port {
        &[]
    } else {
        &["--http-bind", "off"]
    };
    let bin = server_binary();
    let child = Command::new(&bin)
        .arg("--bind")
        .arg(addr.to_string())
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--log-level")
        .arg(&log_level)
        .args(side_port_off)
        .args(extra)
        .env("NO_COLOR", "1")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2))
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
    *slot.lock().unwrap() = Some(child);

    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let mut why = String::from("timed out");
    while Instant::now() < deadline {
        if let Some(status) = exited(slot) {
            return Err(format!("server exited during startup with {status}"));
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            match ping(addr).await {
                Ok(client) => {
                    // The port answered, but was it our process? One that
                    // failed to bind exits at once.
                    if let Some(status) = exited(slot) {
                        return Err(format!("server exited during startup with {status}"));
                    }
                    return Ok(client);
                }
                Err(e) => why = format!("ping failed: {e}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    if let Some(mut c) = slot.lock().unwrap().take() {
        let _ = c.kill();
        let _ = c.wait();
    }
    Err(format!(
        "no answer on {addr} within {STARTUP_TIMEOUT:?}: {why}"
    ))
}

fn exited(slot: &Arc<Mutex<Option<Child>>>) -> Option<ExitStatus> {
    let mut g = slot.lock().unwrap();
    let status = g.as_mut().and_then(|c| c.try_wait().ok().flatten());
    if status.is_some() {
        g.take();
    }
    status
}

async fn ping(addr: SocketAddr) -> Result<Client, String> {
    let mut opts = ClientOptions::parse(uri(addr))
        .await
        .map_err(|e| e.to_string())?;
    opts.server_selection_timeout = Some(Duration::from_secs(3));
    let probe = Client::with_options(opts).map_err(|e| e.to_string())?;
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        probe.database("admin").run_command(doc! {"ping": 1}),
    )
    .await;
    match r {
        Ok(Ok(_)) => {
            // The client used by the tests gets the normal timeouts.
            Client::with_uri_str(uri(addr))
                .await
                .map_err(|e| e.to_string())
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("ping timed out".into()),
    }
}

fn spawn_watchdog(children: Vec<Arc<Mutex<Option<Child>>>>) -> (mpsc::Sender<()>, JoinHandle<()>) {
    let secs = std::env::var("SHARDGATE_TEST_TIMEOUT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_WATCHDOG_SECS);
    let (tx, rx) = mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(secs)) {
            for child in children {
                if let Some(mut c) = child.lock().unwrap().take() {
                    eprintln!(
                        "watchdog: test ran over {secs}s; killing shardgate pid {}",
                        c.id()
                    );
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
        }
    });
    (tx, handle)
}

fn read_tail(path: &Path, max: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return String::from("(no log file)");
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(max as u64);
    let _ = f.seek(SeekFrom::Start(start));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let mut s = String::from_utf8_lossy(&buf).into_owned();
    if start > 0 {
        s.insert_str(0, "...(earlier lines cut)...\n");
    }
    s
}

// ---------------------------------------------------------------------------
// Error helpers
// ---------------------------------------------------------------------------

/// What a failed command or write said: MongoDB's code, codeName and message.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub code: i32,
    pub code_name: String,
    pub message: String,
}

/// Extracts the server's code/codeName/message from a driver error: a
/// command error, a single write error, or the first of a batch's write
/// errors. `None` for network and client-side errors.
pub fn failure(e: &Error) -> Option<Failure> {
    match &*e.kind {
        ErrorKind::Command(c) => Some(Failure {
            code: c.code,
            code_name: c.code_name.clone(),
            message: c.message.clone(),
        }),
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(Failure {
            code: w.code,
            code_name: w.code_name.clone().unwrap_or_default(),
            message: w.message.clone(),
        }),
        ErrorKind::InsertMany(m) => {
            m.write_errors
                .as_ref()
                .and_then(|v| v.first())
                .map(|w| Failure {
                    code: w.code,
                    code_name: w.code_name.clone().unwrap_or_default(),
                    message: w.message.clone(),
                })
        }
        _ => None,
    }
}

/// The server's code behind a driver's authentication error, which the
/// driver wraps as the source of its own.
pub fn auth_error_code(e: &Error) -> Option<i32> {
    let source = std::error::Error::source(e)?;
    let source = source
        .downcast_ref::<Error>()
        .or_else(|| source.downcast_ref::<Box<Error>>().map(|b| &**b))?;
    failure(source).map(|f| f.code)
}

/// Asserts that `r` failed on the server with `code` (and `code_name`, if
/// not empty) and returns the failure.
#[track_caller]
pub fn expect_failure<T: std::fmt::Debug>(
    r: mongodb::error::Result<T>,
    code: i32,
    code_name: &str,
) -> Failure {
    match r {
        Ok(v) => panic!("expected error {code} {code_name}, got success: {v:?}"),
        Err(e) => {
            let f =
                failure(&e).unwrap_or_else(|| panic!("expected server error {code}, got {e:?}"));
            assert_eq!(f.code, code, "wrong error code in {f:?}");
            if !code_name.is_empty() {
                assert_eq!(f.code_name, code_name, "wrong codeName in {f:?}");
            }
            assert!(!f.message.is_empty(), "error without errmsg: {f:?}");
            f
        }
    }
}

/// Runs a raw command on `db` and asserts it fails with `code`/`code_name`.
pub async fn expect_command_error(
    db: &Database,
    cmd: Document,
    code: i32,
    code_name: &str,
) -> Failure {
    let shown = format!("{cmd}");
    let r = db.run_command(cmd).await;
    match r {
        Ok(v) => panic!("expected {shown} to fail with {code} {code_name}, got {v}"),
        Err(e) => {
            let f = failure(&e)
                .unwrap_or_else(|| panic!("{shown}: expected server error {code}, got {e:?}"));
            assert_eq!(f.code, code, "{shown}: wrong error code in {f:?}");
            if !code_name.is_empty() {
                assert_eq!(f.code_name, code_name, "{shown}: wrong codeName in {f:?}");
            }
            assert!(!f.message.is_empty(), "{shown}: error without errmsg");
            f
        }
    }
}

/// Runs a raw command on `db` and asserts it fails with one of `allowed`
/// (code, codeName) pairs — for cases where MongoDB 7.0 patch releases differ.
pub async fn expect_command_error_in(
    db: &Database,
    cmd: Document,
    allowed: &[(i32, &str)],
) -> Failure {
    let shown = format!("{cmd}");
    match db.run_command(cmd).await {
        Ok(v) => panic!("expected {shown} to fail with one of {allowed:?}, got {v}"),
        Err(e) => {
            let f =
                failure(&e).unwrap_or_else(|| panic!("{shown}: expected server error, got {e:?}"));
            assert!(
                allowed
                    .iter()
                    .any(|(c, n)| *c == f.code && *n == f.code_name),
                "{shown}: got {f:?}, expected one of {allowed:?}"
            );
            assert!(!f.message.is_empty(), "{shown}: error without errmsg");
            f
        }
    }
}

/// Reads a numeric field as i64 whatever its BSON numeric type (servers
/// legitimately answer counts as int32, int64 or double).
#[track_caller]
pub fn num(d: &Document, key: &str) -> i64 {
    match d.get(key) {
        Some(mongodb::bson::Bson::Int32(v)) => *v as i64,
        Some(mongodb::bson::Bson::Int64(v)) => *v,
        Some(mongodb::bson::Bson::Double(v)) if v.fract() == 0.0 => *v as i64,
        other => panic!("field {key:?} is not an integer: {other:?} in {d}"),
    }
}

/// Reads a numeric field as f64 whatever its BSON numeric type.
#[track_caller]
pub fn numf(d: &Document, key: &str) -> f64 {
    match d.get(key) {
        Some(mongodb::bson::Bson::Int32(v)) => *v as f64,
        Some(mongodb::bson::Bson::Int64(v)) => *v as f64,
        Some(mongodb::bson::Bson::Double(v)) => *v,
        other => panic!("field {key:?} is not a number: {other:?} in {d}"),
    }
}

/// `ok` is 1 (as int or double).
#[track_caller]
pub fn assert_ok(d: &Document) {
    assert_eq!(numf(d, "ok"), 1.0, "reply not ok: {d}");
}

/// The documents of a reply's first cursor batch.
#[track_caller]
pub fn first_batch(reply: &Document) -> Vec<Document> {
    let cursor = reply
        .get_document("cursor")
        .unwrap_or_else(|_| panic!("no cursor in {reply}"));
    batch(cursor, "firstBatch")
}

/// The documents of a getMore reply's batch.
#[track_caller]
pub fn next_batch(reply: &Document) -> Vec<Document> {
    let cursor = reply
        .get_document("cursor")
        .unwrap_or_else(|_| panic!("no cursor in {reply}"));
    batch(cursor, "nextBatch")
}

#[track_caller]
fn batch(cursor: &Document, key: &str) -> Vec<Document> {
    cursor
        .get_array(key)
        .unwrap_or_else(|_| panic!("no {key} in {cursor}"))
        .iter()
        .map(|b| b.as_document().expect("batch holds documents").clone())
        .collect()
}

/// Runs a cursor-returning command and follows the cursor to its end
/// through the driver, whose `getMore`s go to the gateway that opened it.
pub async fn drain_cursor(db: &Database, cmd: Document) -> Vec<Document> {
    use futures::TryStreamExt;
    let shown = format!("{cmd}");
    db.run_cursor_command(cmd)
        .await
        .unwrap_or_else(|e| panic!("{shown}: {e}"))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("{shown}: getMore: {e}"))
}

/// The cursor id of a find/aggregate/getMore reply.
#[track_caller]
pub fn cursor_id(reply: &Document) -> i64 {
    let cursor = reply
        .get_document("cursor")
        .unwrap_or_else(|_| panic!("no cursor in {reply}"));
    num(cursor, "id")
}

// ---------------------------------------------------------------------------
// Raw wire access
// ---------------------------------------------------------------------------

/// Hand-built frames for tests that must send what no driver sends.
pub mod side_port;

pub mod wire {
    use mongodb::bson::Document;
    use std::time::Duration;
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpStream,
    };

    pub const OP_MSG: i32 = 2013;
    pub const OP_QUERY: i32 = 2004;
    pub const OP_REPLY: i32 = 1;

    /// A message header followed by `body`.
    pub fn frame(request_id: i32, op_code: i32, body: &[u8]) -> Vec<u8> {
        let len = 16 + body.len() as i32;
        let mut out = Vec::with_capacity(len as usize);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&request_id.to_le_bytes());
        out.extend_from_slice(&0i32.to_le_bytes());
        out.extend_from_slice(&op_code.to_le_bytes());
        out.extend_from_slice(body);
        out
    }

    /// An OP_MSG with flags 0 and one kind-0 section holding `doc_bytes`
    /// (which need not be valid BSON).
    pub fn op_msg_raw(request_id: i32, doc_bytes: &[u8]) -> Vec<u8> {
        let mut body = Vec::with_capacity(5 + doc_bytes.len());
        body.extend_from_slice(&0u32.to_le_bytes());
        body.push(0);
        body.extend_from_slice(doc_bytes);
        frame(request_id, OP_MSG, &body)
    }

    /// An OP_MSG carrying the command `doc`.
    pub fn op_msg(request_id: i32, doc: &Document) -> Vec<u8> {
        let mut bytes = Vec::new();
        doc.to_writer(&mut bytes).expect("serialize command");
        op_msg_raw(request_id, &bytes)
    }

    /// What came back on a connection.
    #[derive(Debug)]
    pub enum Outcome {
        /// A reply: its opCode and its (first) document, if it parsed.
        Reply { op_code: i32, doc: Option<Document> },
        /// The server closed the connection (or reset it).
        Closed,
        /// Nothing within the time allowed.
        Silent,
    }

    /// Reads one reply, distinguishing a closed connection and silence.
    pub async fn read_reply(stream: &mut TcpStream, wait: Duration) -> Outcome {
        match tokio::time::timeout(wait, read_reply_inner(stream)).await {
            Err(_) => Outcome::Silent,
            Ok(None) => Outcome::Closed,
            Ok(Some(o)) => o,
        }
    }

    async fn read_reply_inner(stream: &mut TcpStream) -> Option<Outcome> {
        let mut header = [0u8; 16];
        stream.read_exact(&mut header).await.ok()?;
        let len = i32::from_le_bytes(header[0..4].try_into().unwrap());
        let op_code = i32::from_le_bytes(header[12..16].try_into().unwrap());
        if !(16..=64 * 1024 * 1024).contains(&len) {
            return Some(Outcome::Reply { op_code, doc: None });
        }
        let mut body = vec![0u8; len as usize - 16];
        stream.read_exact(&mut body).await.ok()?;
        let doc = match op_code {
            OP_MSG if body.len() > 5 && body[4] == 0 => Document::from_reader(&body[5..]).ok(),
            // responseFlags, cursorID, startingFrom, numberReturned, documents
            OP_REPLY if body.len() > 20 => Document::from_reader(&body[20..]).ok(),
            _ => None,
        };
        Some(Outcome::Reply { op_code, doc })
    }

    /// A raw connection that sends commands exactly as given (the driver
    /// would add its own `lsid`/`$clusterTime`), with `$db` appended.
    pub struct RawConn {
        pub stream: TcpStream,
        next_id: i32,
    }

    impl RawConn {
        pub async fn connect(addr: std::net::SocketAddr) -> RawConn {
            let stream = TcpStream::connect(addr).await.expect("connect to server");
            RawConn { stream, next_id: 1 }
        }

        /// Sends `cmd` to database `db` and returns the reply document;
        /// panics if the connection closes or stays silent for 30 s.
        pub async fn command(&mut self, db: &str, mut cmd: Document) -> Document {
            cmd.insert("$db", db);
            self.next_id += 1;
            let shown = format!("{cmd}");
            assert!(
                send(&mut self.stream, &op_msg(self.next_id, &cmd)).await,
                "send {shown}"
            );
            match read_reply(&mut self.stream, Duration::from_secs(30)).await {
                Outcome::Reply { doc: Some(d), .. } => d,
                other => panic!("no reply to {shown}: {other:?}"),
            }
        }
    }

    /// Writes `bytes`, ignoring errors (the server may already have closed).
    pub async fn send(stream: &mut TcpStream, bytes: &[u8]) -> bool {
        stream.write_all(bytes).await.is_ok() && stream.flush().await.is_ok()
    }
}

/// A BSON regular expression value. Written to compile against both bson 2
/// and bson 3 (`mongodb::bson` is bson 3 when any workspace member enables
/// the driver's `bson-3` feature).
#[allow(clippy::useless_conversion)]
pub fn regex(pattern: &str, options: &str) -> mongodb::bson::Bson {
    let mut opts: Vec<char> = options.chars().collect();
    opts.sort_unstable();
    let opts: String = opts.into_iter().collect();
    mongodb::bson::Bson::RegularExpression(mongodb::bson::Regex {
        pattern: pattern.to_string().try_into().expect("pattern without NUL"),
        options: opts.try_into().expect("options without NUL"),
    })
}

/// A tiny deterministic PRNG (xorshift64*) for generated test input.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

// ---------------------------------------------------------------------------
// Sharding helpers
// ---------------------------------------------------------------------------

/// The size of `doc` as BSON, the unit the partition limits count in.
pub fn bson_len(doc: &Document) -> usize {
    let mut bytes = Vec::new();
    doc.to_writer(&mut bytes).expect("serialize document");
    bytes.len()
}

/// One end of a chunk's range of shard-key hashes in `config.chunks`.
/// Declared in MongoDB's order, so `MinKey < Hash(_) < MaxKey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChunkBound {
    MinKey,
    Hash(i64),
    MaxKey,
}

/// A `config.chunks` entry: hashes in `[min, max)` live on `shard`.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub min: ChunkBound,
    pub max: ChunkBound,
    pub shard: String,
    /// The whole entry, for checks on its other fields.
    pub doc: Document,
}

impl Chunk {
    pub fn holds(&self, hash: i64) -> bool {
        self.min <= ChunkBound::Hash(hash) && ChunkBound::Hash(hash) < self.max
    }
}

#[track_caller]
fn chunk_bound(chunk: &Document, end: &str, field: &str) -> ChunkBound {
    let bound = chunk
        .get_document(end)
        .unwrap_or_else(|_| panic!("chunk without {end}: {chunk}"));
    assert_eq!(
        bound.len(),
        1,
        "{end} must hold only the key field: {chunk}"
    );
    match bound.get(field) {
        Some(mongodb::bson::Bson::MinKey) => ChunkBound::MinKey,
        Some(mongodb::bson::Bson::MaxKey) => ChunkBound::MaxKey,
        Some(mongodb::bson::Bson::Int64(h)) => ChunkBound::Hash(*h),
        other => panic!("{end}.{field} is not MinKey, MaxKey or NumberLong: {other:?} in {chunk}"),
    }
}

/// The chunks of the sharded collection `ns`, found the way mongosh's
/// `sh.status()` finds them (the `config.collections` entry's uuid), in key
/// order. Asserts they tile the whole hash range: MinKey first, MaxKey last,
/// each `max` equal to the next `min`.
pub async fn config_chunks(client: &Client, ns: &str) -> Vec<Chunk> {
    let config = client.database("config");
    let entry = config
        .collection::<Document>("collections")
        .find_one(doc! {"_id": ns})
        .await
        .unwrap_or_else(|e| panic!("read config.collections: {e}"))
        .unwrap_or_else(|| panic!("{ns} is not in config.collections"));
    let key = entry
        .get_document("key")
        .unwrap_or_else(|_| panic!("config.collections entry without key: {entry}"));
    let field = key
        .keys()
        .next()
        .unwrap_or_else(|| panic!("empty shard key in {entry}"))
        .clone();
    let uuid = entry
        .get("uuid")
        .unwrap_or_else(|| panic!("config.collections entry without uuid: {entry}"))
        .clone();
    let mut cursor = config
        .collection::<Document>("chunks")
        .find(doc! {"uuid": uuid})
        .await
        .unwrap_or_else(|e| panic!("read config.chunks: {e}"));
    let mut chunks = Vec::new();
    while cursor.advance().await.expect("read config.chunks") {
        let doc = cursor.deserialize_current().expect("chunk document");
        let shard = doc
            .get_str("shard")
            .unwrap_or_else(|_| panic!("chunk without shard name: {doc}"))
            .to_string();
        chunks.push(Chunk {
            min: chunk_bound(&doc, "min", &field),
            max: chunk_bound(&doc, "max", &field),
            shard,
            doc,
        });
    }
    chunks.sort_by_key(|c| c.min);
    assert!(!chunks.is_empty(), "no config.chunks entries for {ns}");
    assert_eq!(
        chunks[0].min,
        ChunkBound::MinKey,
        "first chunk of {ns}: {chunks:?}"
    );
    assert_eq!(
        chunks[chunks.len() - 1].max,
        ChunkBound::MaxKey,
        "last chunk of {ns}: {chunks:?}"
    );
    for pair in chunks.windows(2) {
        assert!(
            pair[0].min < pair[0].max,
            "empty chunk in {ns}: {:?}",
            pair[0]
        );
        assert_eq!(
            pair[0].max, pair[1].min,
            "chunks of {ns} leave a gap or overlap"
        );
    }
    chunks
}

/// Who runs: how many [`TestServer`]s are up, and whether a test that must
/// run alone (see [`alone`]) is running, on which thread.
struct Gate {
    servers: usize,
    alone: Option<std::thread::ThreadId>,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    servers: 0,
    alone: None,
});
static GATE_CHANGED: std::sync::Condvar = std::sync::Condvar::new();

fn gate() -> std::sync::MutexGuard<'static, Gate> {
    GATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// One [`TestServer`] counted while it lives. Starting one waits while a
/// test on another thread runs [`alone`].
struct Running;

impl Running {
    fn new() -> Running {
        let me = std::thread::current().id();
        let mut g = gate();
        while g.alone.is_some_and(|t| t != me) {
            g = GATE_CHANGED.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        g.servers += 1;
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        gate().servers -= 1;
        GATE_CHANGED.notify_all();
    }
}

/// Held by a test that must run alone in the test process: one whose
/// timings should measure its own server, not the cores shared with
/// another test's. Taken before the test starts its servers (from the
/// test's own thread, as `#[tokio::test]`'s body runs), it waits until no
/// other test's server is up, and until it is dropped other tests' servers
/// wait to start.
pub struct Alone;

/// Waits until this test runs alone (see [`Alone`]).
pub fn alone() -> Alone {
    let me = std::thread::current().id();
    let mut g = gate();
    while g.alone.is_some() || g.servers > 0 {
        g = GATE_CHANGED.wait(g).unwrap_or_else(|e| e.into_inner());
    }
    g.alone = Some(me);
    Alone
}

impl Drop for Alone {
    fn drop(&mut self) {
        gate().alone = None;
        GATE_CHANGED.notify_all();
    }
}
