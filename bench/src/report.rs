//! Turning measurements into the aligned tables a person reads and the
//! `RESULT`/`RATIO`/`RSS`/`SETUP`/`SPREAD`/`CPU`/`COST`/`DISTRIBUTION` lines a
//! script greps, and reading what `/proc` says about the server.
//!
//! Latencies are kept in microseconds throughout; the tables scale them to
//! µs/ms/s for reading, the machine lines always carry raw microseconds.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::workload::Workload;

/// What one timed run (one workload, one concurrency, one server) produced.
pub struct Measurement {
    pub target: String,
    pub workload: Workload,
    pub concurrency: usize,
    /// Partitions of the sharded collection the run used, if sharded.
    pub partitions: Option<u32>,
    /// Which of several rounds of the same runs this one was in
    /// (`partitioned-read` only).
    pub round: Option<Round>,
    /// Completed operations; for `load`, documents inserted.
    pub ops: u64,
    pub elapsed: Duration,
    /// Per-operation latency in µs; for `load`, per `insertMany` batch.
    pub latency_us: Histogram<u64>,
    pub errors: u64,
    /// Reads that found no document, updates that matched none, empty scans.
    pub misses: u64,
    pub first_error: Option<String>,
    /// CPU the server process used during the run, when its pid is known.
    pub server_cpu: Option<CpuUse>,
    /// CPU the `--cost` process groups used during the run.
    pub cost: Option<crate::cost::CostUse>,
}

/// Round `number` (from 1) of `of`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Round {
    pub number: u32,
    pub of: u32,
}

impl Measurement {
    pub fn ops_per_sec(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.ops as f64 / secs
        } else {
            0.0
        }
    }

    fn quantile_us(&self, q: f64) -> u64 {
        if self.latency_us.is_empty() {
            0
        } else {
            self.latency_us.value_at_quantile(q)
        }
    }

    pub fn p50_us(&self) -> u64 {
        self.quantile_us(0.50)
    }

    pub fn p99_us(&self) -> u64 {
        self.quantile_us(0.99)
    }

    pub fn max_us(&self) -> u64 {
        if self.latency_us.is_empty() {
            0
        } else {
            self.latency_us.max()
        }
    }

    /// Server cores busy on average over the run (1.8 = 1.8 cores).
    pub fn server_cores(&self) -> Option<f64> {
        let secs = self.elapsed.as_secs_f64();
        self.server_cpu
            .as_ref()
            .filter(|_| secs > 0.0)
            .map(|cpu| cpu.secs / secs)
    }
}

/// Column header matching [`row`].
pub fn header() -> String {
    format!(
        "{:<12} {:<16} {:>5} {:>5} {:>10} {:>12} {:>9} {:>9} {:>9} {:>7} {:>7}",
        "target",
        "workload",
        "parts",
        "conc",
        "ops",
        "ops/s",
        "p50",
        "p99",
        "max",
        "errors",
        "misses"
    )
}

/// One aligned table row.
pub fn row(m: &Measurement) -> String {
    format!(
        "{:<12} {:<16} {:>5} {:>5} {:>10} {:>12.0} {:>9} {:>9} {:>9} {:>7} {:>7}",
        m.target,
        m.workload.name(),
        m.partitions
            .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        m.concurrency,
        m.ops,
        m.ops_per_sec(),
        human_us(m.p50_us()),
        human_us(m.p99_us()),
        human_us(m.max_us()),
        m.errors,
        m.misses,
    )
}

/// `" partitions=N"` for a measurement on a sharded collection, else nothing.
pub fn partitions_field(m: &Measurement) -> String {
    m.partitions
        .map_or_else(String::new, |n| format!(" partitions={n}"))
}

/// `" round=K rounds=N"` for a measurement taken in rounds, else nothing.
fn round_field(m: &Measurement) -> String {
    m.round.map_or_else(String::new, |r| {
        format!(" round={} rounds={}", r.number, r.of)
    })
}

/// The machine-readable line for one measurement.
pub fn result_line(m: &Measurement) -> String {
    format!(
        "RESULT target={} workload={}{} conc={} ops={} secs={:.3} ops_per_sec={:.1} p50_us={} p99_us={} max_us={} errors={} misses={}{}",
        m.target,
        m.workload.name(),
        partitions_field(m),
        m.concurrency,
        m.ops,
        m.elapsed.as_secs_f64(),
        m.ops_per_sec(),
        m.p50_us(),
        m.p99_us(),
        m.max_us(),
        m.errors,
        m.misses,
        round_field(m),
    )
}

/// What a sharded workload produced: its timed runs (none for
/// `distribution`), and the lines that sum it up after the summary table.
pub struct Outcome {
    pub measurements: Vec<Measurement>,
    pub summary: Vec<String>,
}

/// Prints a measurement's row and `RESULT` line as it finishes, with its
/// first error and the server's CPU use when it has them.
pub fn print_measurement(m: &Measurement) {
    println!("{}", row(m));
    println!("{}", result_line(m));
    if let Some(e) = &m.first_error {
        println!("  first error ({} in all): {e}", m.errors);
    }
    if let Some(line) = cpu_line(m) {
        println!("{line}");
    }
    if let Some(line) = crate::cost::cost_line(m) {
        println!("{line}");
    }
}

/// The primary server's figures as a fraction of the comparison server's,
/// for each workload, partition count and concurrency measured on both;
/// nothing at all when no run was measured on both.
pub fn comparison(primary: &[Measurement], other: &[Measurement]) -> Vec<String> {
    let Some(first) = primary.first() else {
        return Vec::new();
    };
    let Some(other_name) = other.first().map(|m| m.target.clone()) else {
        return Vec::new();
    };
    let mut lines = vec![
        format!(
            "{} as a fraction of {} (measured alternately in this run)",
            first.target, other_name
        ),
        format!(
            "{:<16} {:>5} {:>5} {:>18} {:>18} {:>9} {:>21} {:>21}",
            "workload",
            "parts",
            "conc",
            format!("{} ops/s", truncate(&first.target, 12)),
            format!("{} ops/s", truncate(&other_name, 12)),
            "fraction",
            "p50 (this / that)",
            "p99 (this / that)",
        ),
    ];
    let mut machine = Vec::new();
    for p in primary {
        let Some(o) = other.iter().find(|o| {
            o.workload == p.workload
                && o.partitions == p.partitions
                && o.concurrency == p.concurrency
        }) else {
            continue;
        };
        let fraction = if o.ops_per_sec() > 0.0 {
            p.ops_per_sec() / o.ops_per_sec()
        } else {
            0.0
        };
        lines.push(format!(
            "{:<16} {:>5} {:>5} {:>18.0} {:>18.0} {:>9.3} {:>21} {:>21}",
            p.workload.name(),
            p.partitions
                .map_or_else(|| "-".to_owned(), |n| n.to_string()),
            p.concurrency,
            p.ops_per_sec(),
            o.ops_per_sec(),
            fraction,
            format!("{} / {}", human_us(p.p50_us()), human_us(o.p50_us())),
            format!("{} / {}", human_us(p.p99_us()), human_us(o.p99_us())),
        ));
        machine.push(format!(
            "RATIO workload={}{} conc={} target={} baseline={} fraction={:.4} target_ops_per_sec={:.1} baseline_ops_per_sec={:.1}",
            p.workload.name(),
            partitions_field(p),
            p.concurrency,
            p.target,
            o.target,
            fraction,
            p.ops_per_sec(),
            o.ops_per_sec(),
        ));
    }
    if machine.is_empty() {
        return Vec::new();
    }
    lines.push(String::new());
    lines.extend(machine);
    lines
}

fn truncate(s: &str, chars: usize) -> String {
    s.chars().take(chars).collect()
}

/// `850us`, `1.42ms`, `2.10s`: short enough for a table column.
pub fn human_us(us: u64) -> String {
    if us < 1_000 {
        format!("{us}us")
    } else if us < 1_000_000 {
        format!("{:.2}ms", us as f64 / 1e3)
    } else {
        format!("{:.2}s", us as f64 / 1e6)
    }
}

/// Resident and peak memory of a process, from `/proc/PID/status`, in KiB.
pub struct MemoryUse {
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

pub fn read_memory(pid: u32) -> Result<MemoryUse, String> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    };
    match (field("VmRSS:"), field("VmHWM:")) {
        (Some(rss_kib), hwm) => Ok(MemoryUse {
            rss_kib,
            hwm_kib: hwm.unwrap_or(rss_kib),
        }),
        (None, _) => Err(format!("no VmRSS line in {path}")),
    }
}

/// CPU time a process used over one run.
pub struct CpuUse {
    pub pid: u32,
    /// User plus system seconds, all threads.
    pub secs: f64,
}

/// Clock ticks per second in `/proc/PID/stat`: the kernel reports them in
/// USER_HZ, which is 100 on every architecture Linux runs this on.
const USER_HZ: f64 = 100.0;

/// User plus system CPU seconds a process has used so far (its exited
/// threads included), from `/proc/PID/stat`.
pub fn read_cpu_secs(pid: u32) -> Result<f64, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
    cpu_ticks(&stat)
        .map(|ticks| ticks as f64 / USER_HZ)
        .ok_or_else(|| format!("no utime/stime in {path}"))
}

/// `utime + stime` (fields 14 and 15) of a `/proc/PID/stat` line. The
/// command name (field 2) is in parentheses and may hold spaces and
/// parentheses itself, so fields are counted from the last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Whether a figure met its goal, as a word for `met=`.
pub fn yes_no(met: bool) -> &'static str {
    if met {
        "yes"
    } else {
        "no"
    }
}

/// The server's CPU use during a run as a `CPU` line, or nothing when the
/// run has no CPU figure.
pub fn cpu_line(m: &Measurement) -> Option<String> {
    let cpu = m.server_cpu.as_ref()?;
    let cores = m.server_cores()?;
    Some(format!(
        "CPU target={} workload={}{} conc={} pid={} server_cpu_secs={:.2} wall_secs={:.3} server_cores={:.2} goal_cores={:.1} met={}",
        m.target,
        m.workload.name(),
        partitions_field(m),
        m.concurrency,
        cpu.pid,
        cpu.secs,
        m.elapsed.as_secs_f64(),
        cores,
        FANOUT_CORES_GOAL,
        yes_no(cores > FANOUT_CORES_GOAL),
    ))
}

/// The fan-out query should keep more than this many server cores busy.
pub const FANOUT_CORES_GOAL: f64 = 1.5;

/// Point reads should run within this fraction of each other whatever the
/// partition count.
pub const SPREAD_GOAL: f64 = 0.10;

/// The largest partition of distinct keys should hold at most this multiple
/// of the mean.
pub const DISTRIBUTION_GOAL: f64 = 1.15;

/// `max / min - 1` of some throughputs: 0.1 means the fastest is 10 %
/// faster than the slowest. Infinite when the slowest is zero, `None` when
/// there is nothing to compare.
pub fn spread(values: &[f64]) -> Option<f64> {
    let max = values.iter().copied().reduce(f64::max)?;
    let min = values.iter().copied().reduce(f64::min)?;
    Some(if min > 0.0 {
        max / min - 1.0
    } else {
        f64::INFINITY
    })
}

/// The middle value of some figures (the mean of the two middle ones for
/// an even count); `None` when there are none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[mid]),
        _ => Some((sorted[mid - 1] + sorted[mid]) / 2.0),
    }
}

/// How evenly documents sit in partitions: the largest and smallest count
/// over the mean.
#[derive(Debug, PartialEq)]
pub struct Balance {
    pub partitions: usize,
    pub total: u64,
    pub min: u64,
    pub max: u64,
    pub mean: f64,
}

impl Balance {
    /// `None` for no partitions or no documents.
    pub fn of(counts: &[u64]) -> Option<Balance> {
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        Some(Balance {
            partitions: counts.len(),
            total,
            min: counts.iter().copied().min()?,
            max: counts.iter().copied().max()?,
            mean: total as f64 / counts.len() as f64,
        })
    }

    pub fn max_over_mean(&self) -> f64 {
        self.max as f64 / self.mean
    }

    pub fn min_over_mean(&self) -> f64 {
        self.min as f64 / self.mean
    }
}

/// A ratio as a percentage for tables: `7.1%`, or `inf`.
pub fn percent(ratio: f64) -> String {
    if ratio.is_finite() {
        format!("{:.1}%", ratio * 100.0)
    } else {
        "inf".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human_us(999), "999us");
        assert_eq!(human_us(1_500), "1.50ms");
        assert_eq!(human_us(2_100_000), "2.10s");
    }

    #[test]
    fn cpu_fields_follow_the_last_parenthesis() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 130 0 0 20 0 3 0";
        assert_eq!(cpu_ticks(stat), Some(380));
        assert_eq!(cpu_ticks("4242 (x) S 1"), None);
    }

    #[test]
    fn reads_own_cpu() {
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(30) {
            std::hint::black_box(spin.elapsed());
        }
        let secs = read_cpu_secs(std::process::id()).expect("own /proc stat");
        assert!(secs > 0.0);
    }

    #[test]
    fn spread_and_balance() {
        assert_eq!(spread(&[]), None);
        let s = spread(&[100.0, 110.0, 105.0]).expect("three values");
        assert!((s - 0.1).abs() < 1e-9);
        assert_eq!(spread(&[0.0, 5.0]), Some(f64::INFINITY));
        assert_eq!(Balance::of(&[]), None);
        let b = Balance::of(&[90, 110, 100, 100]).expect("documents");
        assert_eq!((b.partitions, b.total, b.min, b.max), (4, 400, 90, 110));
        assert!((b.max_over_mean() - 1.1).abs() < 1e-9);
        assert!((b.min_over_mean() - 0.9).abs() < 1e-9);
        assert_eq!(percent(0.071), "7.1%");
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[9.0, 1.0, 5.0]), Some(5.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 8.0]), Some(3.0));
    }

    #[test]
    fn reads_own_memory() {
        let m = read_memory(std::process::id()).expect("own /proc status");
        assert!(m.rss_kib > 0 && m.hwm_kib >= m.rss_kib);
    }
}
