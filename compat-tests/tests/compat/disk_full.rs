//! A full disk: writes fail with `OutOfDiskSpace` (14031), the server
//! stays up and keeps answering reads, nothing acknowledged is lost, and
//! once space is free again a restart takes writes again.
//!
//! The storage engine takes no writes after a failed journal write (a
//! half-written record may sit at the journal's end), so space coming
//! back is not enough: the server must restart, as it says.
//!
//! Where it can, the test fills a real file system: a small tmpfs mounted
//! in a mount namespace of its own (`unshare -r -m`), kept alive by a
//! keeper process so the data outlives the server, which runs inside it
//! (`nsenter`). Where no mount namespace can be made (a container without
//! the right to), it falls back to the server's hidden
//! `--test-disk-full-after-bytes` hook, which fails writes as a full disk
//! does; it prints which way it ran. A second test always runs the hook.

use std::{
    fs::OpenOptions,
    io::Write,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use compat_tests::{
    bson::{doc, Document},
    failure, free_port,
    mongodb::{options::ClientOptions, Client},
    server_binary, uri,
};
use futures::TryStreamExt;

const OUT_OF_DISK_SPACE: i32 = 14031;
const TMPFS_SIZE: &str = "48m";

/// How the disk fills.
enum Disk {
    /// A tmpfs in the mount namespace of `keeper`, mounted on `mount`.
    Tmpfs { keeper: Child, mount: PathBuf },
    /// The server's write-failure hook.
    Hook,
}

impl Disk {
    /// A tmpfs in a mount namespace of its own, or why there is none.
    fn tmpfs(mount: &Path) -> Result<Disk, String> {
        let script = format!(
            "mount -t tmpfs -o size={TMPFS_SIZE} tmpfs \"$1\" && touch \"$1/.mounted\" && exec sleep 100000"
        );
        let mut keeper = Command::new("unshare")
            .args(["-r", "-m", "sh", "-c", &script, "sh"])
            .arg(mount)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run unshare: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let seen = PathBuf::from(format!("/proc/{}/root", keeper.id()));
        let marker = seen
            .join(mount.strip_prefix("/").unwrap_or(mount))
            .join(".mounted");
        while Instant::now() < deadline {
            if let Ok(Some(status)) = keeper.try_wait() {
                let mut why = String::new();
                if let Some(mut err) = keeper.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut err, &mut why);
                }
                return Err(format!(
                    "unshare -r -m exited with {status}: {}",
                    why.trim()
                ));
            }
            if marker.exists() {
                return Ok(Disk::Tmpfs {
                    keeper,
                    mount: mount.to_path_buf(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = keeper.kill();
        let _ = keeper.wait();
        Err("the tmpfs was not mounted within 10 s".into())
    }

    /// `path` (inside the mount) as this process reaches it.
    fn outside(&self, path: &Path) -> PathBuf {
        match self {
            Disk::Tmpfs { keeper, .. } => PathBuf::from(format!("/proc/{}/root", keeper.id()))
                .join(path.strip_prefix("/").unwrap_or(path)),
            Disk::Hook => path.to_path_buf(),
        }
    }

    /// The command that runs the server with this disk.
    fn command(&self) -> Command {
        match self {
            Disk::Tmpfs { keeper, .. } => {
                let mut c = Command::new("nsenter");
                c.args(["-t", &keeper.id().to_string(), "-U", "-m", "--"])
                    .arg(server_binary());
                c
            }
            Disk::Hook => Command::new(server_binary()),
        }
    }

    /// Fills the file system (a tmpfs) to the last byte, then gives
    /// `leave` bytes back, so that the disk fills in the middle of the
    /// journal's writes; returns the filler file.
    fn fill(&self, leave: u64) -> Option<PathBuf> {
        let Disk::Tmpfs { mount, .. } = self else {
            return None;
        };
        let filler = self.outside(&mount.join("filler"));
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&filler)
            .unwrap_or_else(|e| panic!("create {}: {e}", filler.display()));
        let block = vec![0u8; 64 * 1024];
        let mut small = vec![0u8; 512];
        loop {
            if f.write_all(&block).is_err() {
                break;
            }
        }
        // The last partial block, as far as it goes.
        while f.write_all(&small).is_ok() {}
        small.truncate(1);
        while f.write_all(&small).is_ok() {}
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        f.set_len(len.saturating_sub(leave)).unwrap();
        let _ = f.sync_all();
        Some(filler)
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        if let Disk::Tmpfs { keeper, .. } = self {
            let _ = keeper.kill();
            let _ = keeper.wait();
        }
    }
}

/// A server process on `data_dir`.
struct Server {
    child: Child,
    client: Client,
    log: PathBuf,
}

impl Server {
    async fn start(disk: &Disk, data_dir: &Path, log: &Path, extra: &[&str]) -> Server {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open the log");
        let err = out.try_clone().expect("clone the log");
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let mut child = disk
            .command()
            .arg("--bind")
            .arg(addr.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--http-bind", "off"])
            .args(extra)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn the server");
        let mut opts = ClientOptions::parse(uri(addr)).await.unwrap();
        opts.server_selection_timeout = Some(Duration::from_secs(2));
        opts.retry_writes = Some(false);
        let client = Client::with_options(opts).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the server exited with {status}:\n{}", read(log));
            }
            if client
                .database("admin")
                .run_command(doc! {"ping": 1})
                .await
                .is_ok()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not start:\n{}",
                read(log)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Server {
            child,
            client,
            log: log.to_path_buf(),
        }
    }

    /// SIGTERM, then SIGKILL after 15 s; whether it exited by itself.
    fn stop(mut self) -> bool {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- shardgate log ----\n{}", read(&self.log));
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

async fn ids(client: &Client) -> Vec<i64> {
    let docs: Vec<Document> = client
        .database("full")
        .collection::<Document>("c")
        .find(doc! {})
        .projection(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut ids: Vec<i64> = docs.iter().map(|d| d.get_i64("_id").unwrap()).collect();
    ids.sort();
    ids
}

/// Inserts 4 KB documents with `_id`s from `from` until a write fails;
/// returns the acknowledged `_id`s and the failure.
async fn insert_until_full(
    client: &Client,
    from: i64,
    most: i64,
) -> (Vec<i64>, Option<compat_tests::Failure>) {
    let coll = client.database("full").collection::<Document>("c");
    let mut acked = Vec::new();
    for id in from..from + most {
        match coll
            .insert_one(doc! {"_id": id, "pad": "x".repeat(4096)})
            .await
        {
            Ok(_) => acked.push(id),
            Err(e) => {
                let f =
                    failure(&e).unwrap_or_else(|| panic!("insert {id}: not a server error: {e}"));
                return (acked, Some(f));
            }
        }
    }
    (acked, None)
}

/// Fills the disk under a running server and checks the whole story.
async fn disk_full_story(disk: Disk, root: &Path, full_after: Option<&str>) {
    let data_dir = match &disk {
        Disk::Tmpfs { mount, .. } => mount.join("data"),
        Disk::Hook => root.join("data"),
    };
    let log = root.join("server.log");
    let hook: Vec<&str> = full_after
        .map(|n| vec!["--test-disk-full-after-bytes", n])
        .unwrap_or_default();
    let srv = Server::start(&disk, &data_dir, &log, &hook).await;

    // Some writes while there is space.
    let (mut acked, failed) = insert_until_full(&srv.client, 0, 100).await;
    assert!(
        failed.is_none(),
        "a write failed with space left: {failed:?}"
    );
    srv.client
        .database("full")
        .collection::<Document>("c")
        .create_index(
            compat_tests::mongodb::IndexModel::builder()
                .keys(doc! {"pad": 1})
                .build(),
        )
        .await
        .unwrap();

    // Fill the disk; writes fail with OutOfDiskSpace, soon.
    // A few hundred KiB left: some more writes fit, then the journal's
    // next write finds the disk full part-way.
    let filler = disk.fill(300 * 1024);
    let (more, failed) = insert_until_full(&srv.client, 100, 20_000).await;
    acked.extend(&more);
    let f = failed.expect("every write succeeded on a full disk");
    assert_eq!(
        (f.code, f.code_name.as_str()),
        (OUT_OF_DISK_SPACE, "OutOfDiskSpace"),
        "{f:?}"
    );
    assert!(f.message.contains("full"), "{f:?}");
    println!(
        "disk full after {} more acknowledged writes: {}",
        more.len(),
        f.message
    );

    // The server is up, answers reads, and every write fails the same way
    // (an update, a delete, a collection's creation).
    srv.client
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .unwrap();
    let present = ids(&srv.client).await;
    for id in &acked {
        assert!(
            present.binary_search(id).is_ok(),
            "acknowledged {id} missing on the full disk"
        );
    }
    let coll = srv.client.database("full").collection::<Document>("c");
    for r in [
        coll.update_one(doc! {"_id": 0}, doc! {"$set": {"u": 1}})
            .await
            .map(|_| ()),
        coll.delete_one(doc! {"_id": 1}).await.map(|_| ()),
        srv.client.database("full").create_collection("other").await,
    ] {
        let e = r.expect_err("a write succeeded on the full disk");
        let f = failure(&e).unwrap_or_else(|| panic!("not a server error: {e}"));
        assert_eq!(f.code, OUT_OF_DISK_SPACE, "{f:?}");
    }

    // Space comes back. The engine still refuses writes until a restart.
    if let Some(filler) = filler {
        std::fs::remove_file(&filler).unwrap();
    }
    let (none, failed) = insert_until_full(&srv.client, 30_000, 1).await;
    assert!(none.is_empty() && failed.map(|f| f.code) == Some(OUT_OF_DISK_SPACE));
    let exited = srv.stop();
    assert!(
        exited,
        "the server did not exit within 15 s of SIGTERM:\n{}",
        read(&log)
    );

    // Restarted with space: nothing acknowledged lost, nothing doubled,
    // and writes work again.
    let srv = Server::start(&disk, &data_dir, &log, &[]).await;
    let present = ids(&srv.client).await;
    let mut dedup = present.clone();
    dedup.dedup();
    assert_eq!(
        dedup.len(),
        present.len(),
        "documents returned twice after the restart"
    );
    for id in &acked {
        assert!(
            present.binary_search(id).is_ok(),
            "acknowledged {id} lost after the restart"
        );
    }
    let v = srv
        .client
        .database("full")
        .run_command(doc! {"validate": "c"})
        .await
        .unwrap();
    assert_eq!(v.get_bool("valid"), Ok(true), "{v}");
    let (after, failed) = insert_until_full(&srv.client, 50_000, 100).await;
    assert!(
        failed.is_none(),
        "writes still fail after the restart: {failed:?}"
    );
    assert_eq!(after.len(), 100);
    srv.client
        .database("full")
        .collection::<Document>("c")
        .update_one(doc! {"_id": 0}, doc! {"$set": {"u": 1}})
        .await
        .unwrap();
    let logged = read(&log);
    assert!(
        !logged.contains("panicked"),
        "the server panicked:\n{logged}"
    );
    println!(
        "{} acknowledged before the disk filled, all present after the restart; writes work again",
        acked.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_file_system_fails_writes_and_loses_nothing() {
    let root = tempfile::Builder::new()
        .prefix("shardgate-full-")
        .tempdir()
        .unwrap();
    let mount = root.path().join("mnt");
    std::fs::create_dir_all(&mount).unwrap();
    let forced_hook = std::env::var("SHARDGATE_DISK_FULL").as_deref() == Ok("hook");
    let disk = if forced_hook {
        Err("SHARDGATE_DISK_FULL=hook".to_string())
    } else {
        Disk::tmpfs(&mount)
    };
    match disk {
        Ok(disk) => {
            println!(
                "disk full: a real full file system (a {TMPFS_SIZE} tmpfs in a mount namespace)"
            );
            disk_full_story(disk, root.path(), None).await;
        }
        Err(why) => {
            println!("disk full: no mount namespace here ({why}); ran with the server's write-failure hook instead");
            disk_full_story(Disk::Hook, root.path(), Some("3000000")).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_full_hook_fails_writes_and_loses_nothing() {
    let root = tempfile::Builder::new()
        .prefix("shardgate-full-")
        .tempdir()
        .unwrap();
    println!("disk full: the server's write-failure hook");
    disk_full_story(Disk::Hook, root.path(), Some("3000000")).await;
}
