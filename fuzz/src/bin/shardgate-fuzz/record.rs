//! `record`: stands in for the server binary and records what clients
//! send, for the seed corpus.
//!
//! `SHARDGATE_BIN=fuzz/record-server cargo test -p compat-tests ...` makes
//! each test start this instead of the server: it starts the real server
//! on another port (killed with it, through `setpriv --pdeathsig`),
//! listens where the test expects the server and copies bytes both ways,
//! appending each connection's client bytes to a file under `--frames`.
//! `corpus` then cuts those streams into frames and commands.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static CONNECTIONS: AtomicUsize = AtomicUsize::new(0);

/// `record --frames DIR --server BIN -- <server arguments>`.
pub fn main(args: &[String]) -> ExitCode {
    let mut frames = None;
    let mut server = None;
    let mut it = args.iter();
    let mut rest: Vec<String> = Vec::new();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--frames" => frames = it.next().map(PathBuf::from),
            "--server" => server = it.next().map(PathBuf::from),
            "--" => {
                rest = it.by_ref().cloned().collect();
            }
            other => {
                eprintln!("record: unknown argument {other}");
                return ExitCode::from(2);
            }
        }
    }
    let (Some(frames), Some(server)) = (frames, server) else {
        eprintln!("usage: record --frames DIR --server BIN -- <server arguments>");
        return ExitCode::from(2);
    };
    let Some(i) = rest.iter().position(|a| a == "--bind") else {
        eprintln!("record: the server arguments name no --bind");
        return ExitCode::from(2);
    };
    let Some(listen) = rest.get(i + 1).cloned() else {
        return ExitCode::from(2);
    };
    let backend = match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(a) => a.to_string(),
        Err(e) => {
            eprintln!("record: no free port: {e}");
            return ExitCode::FAILURE;
        }
    };
    rest[i + 1] = backend.clone();
    let _ = std::fs::create_dir_all(&frames);
    let listener = match TcpListener::bind(&listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("record: cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let spawned = if Path::new("/usr/bin/setpriv").exists() {
        Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--"])
            .arg(&server)
            .args(&rest)
            .spawn()
    } else {
        Command::new(&server).args(&rest).spawn()
    };
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            eprintln!("record: cannot start {}: {e}", server.display());
            return ExitCode::FAILURE;
        }
    };
    let prefix = format!("{}", std::process::id());
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let backend = backend.clone();
            let path = frames.join(format!(
                "{prefix}-{:05}.bin",
                CONNECTIONS.fetch_add(1, Ordering::Relaxed)
            ));
            std::thread::spawn(move || proxy(client, &backend, &path));
        }
    });
    match child.wait() {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

fn proxy(client: TcpStream, backend: &str, path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let server = loop {
        match TcpStream::connect(backend) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => return,
        }
    };
    let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let log = std::fs::File::create(path).ok();
    std::thread::spawn(move || copy(server2, client2, None));
    copy(client, server, log);
}

fn copy(mut from: TcpStream, mut to: TcpStream, mut log: Option<std::fs::File>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(f) = log.as_mut() {
                    let _ = f.write_all(&buf[..n]);
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
