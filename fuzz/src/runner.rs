//! The stable-Rust fuzzing engine: a time budget per target, one child
//! process per target.
//!
//! The parent starts `shardgate-fuzz worker <target>` for each target
//! and reads its report. The worker runs the seed corpus, then mutants
//! and fresh grammar inputs until its time is up, on a thread with the
//! stack a server worker thread has (2 MiB). Before each run it writes
//! the input to `artifacts/<target>/current`, so that whatever ends the
//! process (a panic, the allocation guard, the timeout watchdog, a stack
//! overflow, the kernel's OOM killer) leaves the input behind: the
//! parent saves it as `crash-<hash>` and shows it.
//!
//! Without coverage feedback, the worker keeps an input when its outcome
//! signature (error codes, result sizes) is new, and mutates from those.

use std::collections::HashSet;
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::generate::Gen;
use crate::mutate::next_input;
use crate::targets::{Target, TARGETS};

/// The stack of a tokio worker thread, where the server runs commands.
const STACK_BYTES: usize = 2 * 1024 * 1024;
/// Most inputs kept for mutation.
const MAX_POOL: usize = 4096;

#[derive(Debug, Clone)]
pub struct Options {
    /// Time budget per target.
    pub seconds: f64,
    /// Longest one input may run.
    pub timeout: Duration,
    /// Largest single allocation, and most bytes live at once.
    pub max_alloc: usize,
    pub max_live: usize,
    pub seed: u64,
    /// Holds `<target>/` seed directories.
    pub corpus: PathBuf,
    /// Where `<target>/crash-*` inputs are written.
    pub artifacts: PathBuf,
}

impl Default for Options {
    fn default() -> Options {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        Options {
            seconds: 30.0,
            // Long enough for bounded but slow inputs (values doubling up
            // to the 16 MiB limits take seconds here, under the counting
            // allocator), short enough to catch a loop that never ends.
            timeout: Duration::from_secs(30),
            max_alloc: 256 << 20,
            max_live: 1 << 30,
            seed: 0,
            corpus: here.join("corpus"),
            artifacts: here.join("artifacts"),
        }
    }
}

/// What one target's run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub target: String,
    pub execs: u64,
    pub seconds: f64,
    pub seeds: usize,
    /// Inputs kept for a new outcome signature.
    pub kept: usize,
    pub largest_alloc: usize,
    /// Why it failed, and the saved input.
    pub failure: Option<String>,
}

impl Report {
    fn line(&self) -> String {
        format!(
            "report target={} execs={} seconds={:.1} seeds={} kept={} largest_alloc={}",
            self.target, self.execs, self.seconds, self.seeds, self.kept, self.largest_alloc
        )
    }

    fn parse(line: &str) -> Option<Report> {
        let rest = line.strip_prefix("report ")?;
        let mut r = Report::default();
        for field in rest.split(' ') {
            let (k, v) = field.split_once('=')?;
            match k {
                "target" => r.target = v.to_string(),
                "execs" => r.execs = v.parse().ok()?,
                "seconds" => r.seconds = v.parse().ok()?,
                "seeds" => r.seeds = v.parse().ok()?,
                "kept" => r.kept = v.parse().ok()?,
                "largest_alloc" => r.largest_alloc = v.parse().ok()?,
                _ => {}
            }
        }
        Some(r)
    }
}

/// The seed inputs of a target, in name order.
pub fn seeds(corpus: &Path, target: &str) -> Vec<Vec<u8>> {
    let dir = corpus.join(target);
    let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.sort();
    paths
        .iter()
        .filter(|p| p.is_file())
        .filter_map(|p| fs::read(p).ok())
        .collect()
}

/// Runs every target in `names` (all when empty), each in its own child
/// process; prints a line per target and returns the reports.
pub fn run_all(names: &[String], opts: &Options) -> Vec<Report> {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("shardgate-fuzz"));
    let mut reports = Vec::new();
    for target in TARGETS
        .iter()
        .filter(|t| names.is_empty() || names.iter().any(|n| n == t.name))
    {
        let mut report = run_child(&exe, target, opts);
        report.target = target.name.to_string();
        println!(
            "{:<11} {:>9} execs in {:>5.1}s ({:>7.0}/s), {:>3} seeds, {:>4} kept, largest allocation {:>6} KiB: {}",
            report.target,
            report.execs,
            report.seconds,
            report.execs as f64 / report.seconds.max(0.001),
            report.seeds,
            report.kept,
            report.largest_alloc / 1024,
            report.failure.as_deref().unwrap_or("ok"),
        );
        reports.push(report);
    }
    reports
}

fn run_child(exe: &Path, target: &Target, opts: &Options) -> Report {
    let started = Instant::now();
    let child = Command::new(exe)
        .arg("worker")
        .arg(target.name)
        .arg("--seconds")
        .arg(opts.seconds.to_string())
        .arg("--timeout")
        .arg(opts.timeout.as_secs_f64().to_string())
        .arg("--max-alloc-mb")
        .arg((opts.max_alloc >> 20).to_string())
        .arg("--max-live-mb")
        .arg((opts.max_live >> 20).to_string())
        .arg("--seed")
        .arg(opts.seed.to_string())
        .arg("--corpus")
        .arg(&opts.corpus)
        .arg("--artifacts")
        .arg(&opts.artifacts)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output();
    let output = match child {
        Ok(o) => o,
        Err(e) => {
            return Report {
                failure: Some(format!("cannot start the worker: {e}")),
                ..Report::default()
            }
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut report = stdout
        .lines()
        .rev()
        .find_map(Report::parse)
        .unwrap_or_else(|| Report {
            seconds: started.elapsed().as_secs_f64(),
            ..Report::default()
        });
    if let Some(line) = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("failure "))
    {
        report.failure = Some(line.to_string());
    } else if !output.status.success() {
        // Ended by a signal or the guard: keep the input it was running.
        let dir = opts.artifacts.join(target.name);
        let why = format!("worker ended with {}", output.status);
        report.execs = fs::read_to_string(dir.join("execs"))
            .ok()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        report.failure = Some(match fs::read(dir.join("current")) {
            Ok(input) => {
                let path = save_artifact(&dir, "crash", &input);
                show_input(target, &input);
                format!("{why}; input saved as {}", path.display())
            }
            Err(_) => why,
        });
    }
    report
}

/// The body of `shardgate-fuzz worker`: fuzzes one target in this
/// process and prints its report line (and a `failure` line).
pub fn worker(target: &'static Target, opts: &Options) -> Report {
    crate::guard::set_limits(opts.max_alloc, opts.max_live);
    let dir = opts.artifacts.join(target.name);
    let _ = fs::create_dir_all(&dir);
    let current = File::create(dir.join("current")).ok();
    let _ = fs::remove_file(dir.join("execs"));
    let seeds = seeds(&opts.corpus, target.name);
    let started_ms = Arc::new(AtomicU64::new(0));
    spawn_watchdog(started_ms.clone(), opts.timeout);
    let opts2 = opts.clone();
    let handle = std::thread::Builder::new()
        .name(format!("fuzz-{}", target.name))
        .stack_size(STACK_BYTES)
        .spawn(move || fuzz_loop(target, &opts2, seeds, current, &started_ms));
    let mut report = match handle {
        Ok(h) => h.join().unwrap_or_else(|_| Report {
            failure: Some("the fuzzing thread died".into()),
            ..Report::default()
        }),
        Err(e) => Report {
            failure: Some(format!("cannot start the fuzzing thread: {e}")),
            ..Report::default()
        },
    };
    report.target = target.name.to_string();
    report.largest_alloc = crate::guard::largest_allocation();
    println!("{}", report.line());
    if let Some(f) = &report.failure {
        println!("failure {f}");
    }
    report
}

fn fuzz_loop(
    target: &'static Target,
    opts: &Options,
    seeds: Vec<Vec<u8>>,
    current: Option<File>,
    started_ms: &AtomicU64,
) -> Report {
    let begin = Instant::now();
    let deadline = begin + Duration::from_secs_f64(opts.seconds);
    let mut g = Gen::new(opts.seed ^ fnv(target.name.as_bytes()));
    let mut report = Report {
        seeds: seeds.len(),
        ..Report::default()
    };
    let mut signatures = HashSet::new();
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut queue = seeds.into_iter();
    loop {
        // Seeds first, all of them, whatever the budget: they are the
        // regression suite.
        let input = match queue.next() {
            Some(seed) => seed,
            None if Instant::now() >= deadline => break,
            None => next_input(target, &pool, &mut g),
        };
        if let Some(f) = &current {
            let _ = f.set_len(0);
            let _ = f.write_at(&input, 0);
        }
        started_ms.store(begin.elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| target.execute(&input)));
        started_ms.store(0, Ordering::Relaxed);
        report.execs += 1;
        if report.execs.is_multiple_of(1024) {
            // Left behind for the parent should this process die.
            let _ = fs::write(
                opts.artifacts.join(target.name).join("execs"),
                report.execs.to_string(),
            );
        }
        match outcome {
            Ok(signature) => {
                let new = signatures.insert(signature);
                if (new && pool.len() < MAX_POOL) || pool.len() < 16 {
                    pool.push(input);
                }
            }
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let path = save_artifact(&opts.artifacts.join(target.name), "crash", &input);
                show_input(target, &input);
                report.failure = Some(format!(
                    "panic: {message}; input saved as {}",
                    path.display()
                ));
                break;
            }
        }
    }
    report.kept = pool.len();
    report.seconds = begin.elapsed().as_secs_f64();
    report
}

/// Aborts the process when one input runs past `timeout`.
fn spawn_watchdog(started_ms: Arc<AtomicU64>, timeout: Duration) {
    let begin = Instant::now();
    let _ = std::thread::Builder::new()
        .name("fuzz-watchdog".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(100));
            let started = started_ms.load(Ordering::Relaxed);
            if started != 0 {
                let now = begin.elapsed().as_millis() as u64 + 1;
                if now.saturating_sub(started) > timeout.as_millis() as u64 {
                    eprintln!(
                        "timeout: one input ran for more than {:.1}s",
                        timeout.as_secs_f64()
                    );
                    std::process::abort();
                }
            }
        });
}

/// Runs each file once through `target`, in this process; for checking
/// a saved crash and its fix.
pub fn reproduce(target: &Target, files: &[PathBuf]) -> Result<(), String> {
    for file in files {
        let input = fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
        show_input(target, &input);
        let started = Instant::now();
        let signature = target.execute(&input);
        println!(
            "{}: ok in {:.3}s (signature {signature:x})",
            file.display(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

fn save_artifact(dir: &Path, kind: &str, input: &[u8]) -> PathBuf {
    let _ = fs::create_dir_all(dir);
    let path = dir.join(format!("{kind}-{:016x}", fnv(input)));
    let _ = fs::write(&path, input);
    path
}

/// Prints an input readably: as extended JSON when it is a document.
fn show_input(target: &Target, input: &[u8]) {
    let shown = match crate::decode_document(input) {
        Some(d) if target.input == crate::targets::Input::Document => d.to_string(),
        _ => input
            .iter()
            .take(4096)
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(""),
    };
    let cut: String = shown.chars().take(4000).collect();
    eprintln!("{} input ({} bytes): {cut}", target.name, input.len());
}

pub fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
    })
}
