//! The image's scripts (`docker/`), run directly: no container builds on a
//! test machine, so the tests run what the image runs. `start.sh` (the
//! entrypoint) starts the server from `$SHARDGATE_BIN` with its addresses
//! and data directory moved to free loopback ports and a temporary
//! directory through the same environment variables a container would set;
//! `healthcheck.sh` (the HEALTHCHECK) asks its `/readyz`; the official
//! driver writes and reads through it. `build.sh` builds the binary that
//! `scripts/test` runs every test against. The last test holds the
//! Dockerfile to running these scripts.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use compat_tests::{
    bson::{doc, Document},
    free_port, server_binary, uri,
};
use mongodb::Client;

/// A file of the repository's `docker/` folder.
fn docker_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docker")
        .join(name)
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// `docker/healthcheck.sh` asking the side port at `http_bind` (the value
/// of `SHARDGATE_HTTP_BIND` in the container).
fn healthcheck(http_bind: &str) -> Output {
    Command::new(docker_file("healthcheck.sh"))
        .env("SHARDGATE_HTTP_BIND", http_bind)
        .stdin(Stdio::null())
        .output()
        .expect("run docker/healthcheck.sh")
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The server as the image's entrypoint starts it: `docker/start.sh` with
/// the data directory and both ports moved by environment variables.
struct Entrypoint {
    child: Option<Child>,
    wire: SocketAddr,
    side: SocketAddr,
    log_path: PathBuf,
}

impl Entrypoint {
    /// Runs `start.sh ARGS` on free ports with its data in `data_dir`;
    /// does not wait for the server.
    fn spawn(data_dir: &Path, log_path: &Path, args: &[&str]) -> Entrypoint {
        let (wire, side) = (loopback(free_port()), loopback(free_port()));
        Entrypoint::spawn_on(wire, side, data_dir, log_path, args)
    }

    /// [`Entrypoint::spawn`] with the wire port at `wire` and the HTTP side
    /// port at `side`.
    fn spawn_on(
        wire: SocketAddr,
        side: SocketAddr,
        data_dir: &Path,
        log_path: &Path,
        args: &[&str],
    ) -> Entrypoint {
        let log = File::options()
            .create(true)
            .append(true)
            .open(log_path)
            .expect("open the log");
        let child = Command::new(docker_file("start.sh"))
            .args(args)
            .env("SHARDGATE_BIN", server_binary())
            .env("SHARDGATE_BIND", wire.to_string())
            .env("SHARDGATE_HTTP_BIND", side.to_string())
            .env("SHARDGATE_DATA_DIR", data_dir)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("run docker/start.sh");
        Entrypoint {
            child: Some(child),
            wire,
            side,
            log_path: log_path.to_path_buf(),
        }
    }

    /// Polls the health check, as Docker does, until it passes; panics
    /// with what it said and the server's log after 30 s.
    fn wait_healthy(&mut self) -> Output {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = healthcheck(&self.side.to_string());
            if out.status.success() {
                return out;
            }
            let exited = self.child.as_mut().unwrap().try_wait().unwrap();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "never healthy (server {exited:?}); the check said: {}\n---- log ----\n{}",
                said(&out),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Sends SIGTERM, as `docker stop` does, to the process the
    /// entrypoint started, and waits up to 20 s for it to exit.
    fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "still running 20 s after SIGTERM\n---- log ----\n{}",
            self.log()
        );
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    async fn client(&self) -> Client {
        Client::with_uri_str(uri(self.wire)).await.unwrap()
    }
}

impl Drop for Entrypoint {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            if std::thread::panicking() {
                eprintln!("---- shardgate log ----\n{}", self.log());
            }
        }
    }
}

#[tokio::test]
async fn unhealthy_until_the_server_is_ready_then_healthy_and_serving() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("server.log");
    let (wire, side) = (loopback(free_port()), loopback(free_port()));

    // Nothing listens yet: a container starting up is not healthy.
    let before = healthcheck(&side.to_string());
    assert_eq!(before.status.code(), Some(1), "{}", said(&before));
    assert!(
        said(&before).contains("nothing listens"),
        "{}",
        said(&before)
    );

    let mut server = Entrypoint::spawn_on(wire, side, &data, &log, &[]);
    let out = server.wait_healthy();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ready\n");
    // Asked on 0.0.0.0, the address start.sh binds in a container, the
    // check asks loopback.
    let any = format!("0.0.0.0:{}", server.side.port());
    let out = healthcheck(&any);
    assert!(out.status.success(), "{}", said(&out));

    // Healthy means clients are served: a driver writes and reads back.
    let client = server.client().await;
    let orders = client.database("shop").collection::<Document>("orders");
    orders
        .insert_many((0..20).map(|i| doc! {"_id": i, "qty": i * 2}))
        .await
        .unwrap();
    let found = orders.find_one(doc! {"_id": 7}).await.unwrap();
    assert_eq!(found, Some(doc! {"_id": 7, "qty": 14}));
    assert_eq!(orders.count_documents(doc! {}).await.unwrap(), 20);
    // The data is where the container's volume would be.
    assert!(std::fs::read_dir(&data).unwrap().next().is_some());
    drop(client);

    assert!(server.stop().success());
    let after = healthcheck(&server.side.to_string());
    assert_eq!(after.status.code(), Some(1), "{}", said(&after));
}

#[tokio::test]
async fn the_entrypoint_becomes_the_server_and_sigterm_stops_it_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Entrypoint::spawn(
        &dir.path().join("data"),
        &dir.path().join("server.log"),
        &["--max-connections", "77"],
    );
    server.wait_healthy();
    let client = server.client().await;
    let admin = client.database("admin");

    // The script exec'd the server: the process Docker started (and sends
    // its signals to) is the server itself, not a shell in front of it.
    let status = admin.run_command(doc! {"serverStatus": 1}).await.unwrap();
    assert_eq!(status.get_i64("pid"), Ok(i64::from(server.pid())));

    // Its addresses and data directory came from the environment, and the
    // arguments given to the container reached the server as flags.
    let opts = admin.run_command(doc! {"getCmdLineOpts": 1}).await.unwrap();
    let parsed = opts.get_document("parsed").unwrap();
    let settings = parsed.get_document("settings").unwrap();
    let sources = parsed.get_document("settingSources").unwrap();
    for (name, value) in [
        ("bind", server.wire.to_string()),
        ("http-bind", server.side.to_string()),
    ] {
        assert_eq!(settings.get_str(name), Ok(value.as_str()), "{settings}");
        assert_eq!(sources.get_str(name), Ok("environment"), "{sources}");
    }
    assert_eq!(sources.get_str("data-dir"), Ok("environment"), "{sources}");
    assert_eq!(settings.get_str("max-connections"), Ok("77"), "{settings}");
    assert_eq!(sources.get_str("max-connections"), Ok("flag"), "{sources}");
    drop(client);

    // docker stop: SIGTERM, and the server exits 0 after a clean shutdown.
    let exit = server.stop();
    assert_eq!(exit.code(), Some(0), "{exit:?}\n{}", server.log());
    assert!(server.log().contains("storage flushed"), "{}", server.log());
}

#[tokio::test]
async fn data_outlives_the_container_on_the_same_volume() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let log = dir.path().join("server.log");

    let mut first = Entrypoint::spawn(&data, &log, &[]);
    first.wait_healthy();
    let client = first.client().await;
    let notes = client.database("app").collection::<Document>("notes");
    notes
        .insert_many((0..100).map(|i| doc! {"_id": i, "text": format!("note {i}")}))
        .await
        .unwrap();
    notes
        .update_one(doc! {"_id": 42}, doc! {"$set": {"pinned": true}})
        .await
        .unwrap();
    drop(client);
    assert!(first.stop().success());

    // A new container on the same volume.
    let mut second = Entrypoint::spawn(&data, &log, &[]);
    second.wait_healthy();
    let client = second.client().await;
    let notes = client.database("app").collection::<Document>("notes");
    assert_eq!(notes.count_documents(doc! {}).await.unwrap(), 100);
    assert_eq!(
        notes.find_one(doc! {"pinned": true}).await.unwrap(),
        Some(doc! {"_id": 42, "text": "note 42", "pinned": true})
    );
    drop(client);
    assert!(second.stop().success());
}

#[test]
fn the_containers_defaults_yield_to_its_environment_and_flags() {
    // A stand-in for the server that prints what it was started with.
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("shardgate");
    std::fs::write(
        &fake,
        "#!/usr/bin/env bash\n\
         echo \"pid=$$\"\n\
         echo \"bind=$SHARDGATE_BIND\"\n\
         echo \"http-bind=$SHARDGATE_HTTP_BIND\"\n\
         echo \"data-dir=$SHARDGATE_DATA_DIR\"\n\
         for a in \"$@\"; do echo \"arg=$a\"; done\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |env: &[(&str, &str)], args: &[&str]| {
        let mut cmd = Command::new(docker_file("start.sh"));
        cmd.args(args)
            .env_remove("SHARDGATE_BIND")
            .env_remove("SHARDGATE_HTTP_BIND")
            .env_remove("SHARDGATE_DATA_DIR")
            .env("SHARDGATE_BIN", &fake)
            .envs(env.iter().copied())
            .stdout(Stdio::piped());
        let child = cmd.spawn().unwrap();
        let pid = child.id();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        (pid, String::from_utf8(out.stdout).unwrap())
    };

    // In a container: every interface, the volume.
    let (pid, said) = run(&[], &[]);
    assert_eq!(
        said,
        format!("pid={pid}\nbind=0.0.0.0:27017\nhttp-bind=0.0.0.0:8088\ndata-dir=/data\n")
    );

    // `docker run -e ... IMAGE FLAGS...`: the environment wins over the
    // defaults, and the flags reach the server one by one, unsplit.
    let (pid, said) = run(
        &[
            ("SHARDGATE_HTTP_BIND", "off"),
            ("SHARDGATE_DATA_DIR", "/srv/sg"),
        ],
        &[
            "--backend",
            "postgres",
            "--postgres",
            "host=pg0 user=postgres",
        ],
    );
    assert_eq!(
        said,
        format!(
            "pid={pid}\nbind=0.0.0.0:27017\nhttp-bind=off\ndata-dir=/srv/sg\n\
             arg=--backend\narg=postgres\narg=--postgres\narg=host=pg0 user=postgres\n"
        )
    );
}

/// A stand-in side port that reads one request's head and answers it with
/// `response`.
fn answer_once(response: &'static str) -> (SocketAddr, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut request = Vec::new();
        let mut byte = [0u8; 1];
        while !request.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
            request.push(byte[0]);
        }
        let _ = stream.write_all(response.as_bytes());
    });
    (addr, handle)
}

#[test]
fn a_server_shutting_down_is_unhealthy() {
    // /readyz answers 503 once shutdown has begun: the check reads the
    // status, not only that the port is open.
    let (addr, answered) = answer_once(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 14\r\n\r\nshutting down\n",
    );
    let out = healthcheck(&addr.to_string());
    answered.join().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        said(&out).contains("503 Service Unavailable"),
        "{}",
        said(&out)
    );

    let (addr, answered) = answer_once("HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nready\n");
    let out = healthcheck(&addr.to_string());
    answered.join().unwrap();
    assert!(out.status.success(), "{}", said(&out));

    // With the side port off there is nothing to ask, and it says so.
    let out = healthcheck("off");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        said(&out).contains("HTTP side port is off"),
        "{}",
        said(&out)
    );
}

/// The Dockerfile's instructions, continuation lines joined, comments out.
fn dockerfile() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(docker_file("Dockerfile")).unwrap();
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                let (name, rest) = current.split_once(' ').unwrap_or((&current, ""));
                instructions.push((name.to_ascii_uppercase(), rest.trim().to_string()));
                current.clear();
            }
        }
    }
    instructions
}

#[test]
fn the_image_runs_these_scripts() {
    let steps = dockerfile();
    let all = |name: &str| -> Vec<&str> {
        steps
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, a)| a.as_str())
            .collect()
    };
    // Where a script is copied to in the runtime image: the last word of
    // the COPY that names it.
    let copied = |script: &str| -> String {
        all("COPY")
            .iter()
            .map(|a| a.split_whitespace().collect::<Vec<_>>())
            .find(|words| words[..words.len() - 1].contains(&script))
            .and_then(|words| words.last().map(|w| w.to_string()))
            .unwrap_or_else(|| panic!("{script} is not copied into the image"))
    };
    let stages = all("FROM");
    assert_eq!(stages.len(), 2, "a build stage and a runtime stage");
    assert!(
        all("RUN")
            .iter()
            .any(|r| r.ends_with("docker/build.sh /out")),
        "the build stage builds with docker/build.sh"
    );
    assert!(all("COPY").contains(&"--from=build /out/shardgate /usr/local/bin/shardgate"));
    assert_eq!(
        all("ENTRYPOINT"),
        [format!("[\"{}\"]", copied("docker/start.sh"))]
    );
    let health = all("HEALTHCHECK");
    assert_eq!(health.len(), 1);
    assert!(
        health[0].ends_with(&format!("CMD [\"{}\"]", copied("docker/healthcheck.sh"))),
        "{health:?}"
    );
    // start.sh and the health check agree with these.
    assert_eq!(all("VOLUME"), ["/data"]);
    assert_eq!(all("EXPOSE"), ["27017 8088"]);
    let user = all("USER");
    assert_eq!(user.len(), 1);
    assert!(!["root", "0", "0:0"].contains(&user[0]), "{user:?}");
}
