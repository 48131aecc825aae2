//! `shardgate-fuzz`: runs the fuzz targets on stable Rust.
//!
//! ```text
//! shardgate-fuzz [--seconds N] [--timeout S] [--max-alloc-mb M] [--max-live-mb M]
//!                [--seed X] [--corpus DIR] [--artifacts DIR] [TARGET...]
//! shardgate-fuzz list
//! shardgate-fuzz reproduce TARGET FILE...
//! shardgate-fuzz corpus FRAMES_DIR [--corpus DIR]
//! shardgate-fuzz record --listen ADDR --to ADDR --frames DIR
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use shardgate_fuzz::guard::Guard;
use shardgate_fuzz::runner::{self, Options};
use shardgate_fuzz::targets::{self, TARGETS};

mod corpus;
mod record;

#[global_allocator]
static GLOBAL: Guard = Guard;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("list") => {
            for t in TARGETS {
                println!("{:<11} {}", t.name, t.about);
            }
            ExitCode::SUCCESS
        }
        Some("worker") => {
            let (opts, names) = match parse_options(&args[1..]) {
                Ok(v) => v,
                Err(e) => return usage(&e),
            };
            let Some(target) = names.first().and_then(|n| targets::find(n)) else {
                return usage("worker needs a target");
            };
            let report = runner::worker(target, &opts);
            if report.failure.is_some() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Some("reproduce") => {
            let Some(target) = args.get(1).and_then(|n| targets::find(n)) else {
                return usage("reproduce needs a target");
            };
            let files: Vec<PathBuf> = args[2..].iter().map(PathBuf::from).collect();
            let opts = Options::default();
            shardgate_fuzz::guard::set_limits(opts.max_alloc, opts.max_live);
            match runner::reproduce(target, &files) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some("corpus") => corpus::main(&args[1..]),
        Some("record") => record::main(&args[1..]),
        _ => {
            let (opts, names) = match parse_options(&args) {
                Ok(v) => v,
                Err(e) => return usage(&e),
            };
            if let Some(unknown) = names.iter().find(|n| targets::find(n).is_none()) {
                return usage(&format!("no target called {unknown}"));
            }
            let reports = runner::run_all(&names, &opts);
            let failed = reports.iter().filter(|r| r.failure.is_some()).count();
            let execs: u64 = reports.iter().map(|r| r.execs).sum();
            println!("{execs} executions");
            println!("fuzz: {} passed, {failed} failed", reports.len() - failed);
            if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn parse_options(args: &[String]) -> Result<(Options, Vec<String>), String> {
    let mut opts = Options::default();
    let mut names = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        let number = |name: &str, v: String| -> Result<f64, String> {
            v.parse::<f64>()
                .ok()
                .filter(|n| n.is_finite() && *n >= 0.0)
                .ok_or_else(|| format!("{name}: not a number: {v}"))
        };
        match arg.as_str() {
            "--seconds" => opts.seconds = number(arg, value(arg)?)?,
            "--timeout" => opts.timeout = Duration::from_secs_f64(number(arg, value(arg)?)?),
            "--max-alloc-mb" => opts.max_alloc = (number(arg, value(arg)?)? as usize) << 20,
            "--max-live-mb" => opts.max_live = (number(arg, value(arg)?)? as usize) << 20,
            "--seed" => opts.seed = number(arg, value(arg)?)? as u64,
            "--corpus" => opts.corpus = PathBuf::from(value(arg)?),
            "--artifacts" => opts.artifacts = PathBuf::from(value(arg)?),
            other if other.starts_with("--") => return Err(format!("unknown option {other}")),
            name => names.push(name.to_string()),
        }
    }
    Ok((opts, names))
}

fn usage(why: &str) -> ExitCode {
    eprintln!("shardgate-fuzz: {why}");
    eprintln!(
        "usage: shardgate-fuzz [--seconds N] [--timeout S] [--max-alloc-mb M] [--max-live-mb M] \
         [--seed X] [--corpus DIR] [--artifacts DIR] [TARGET...]\n\
         \x20      shardgate-fuzz list | reproduce TARGET FILE... | corpus FRAMES_DIR | \
         record --listen ADDR --to ADDR --frames DIR"
    );
    ExitCode::from(2)
}
