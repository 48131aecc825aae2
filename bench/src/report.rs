//! Turning measurements into the aligned tables a person reads and the
//! `RESULT`/`RATIO`/`RSS` lines a script greps.
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
    /// Completed operations; for `load`, documents inserted.
    pub ops: u64,
    pub elapsed: Duration,
    /// Per-operation latency in µs; for `load`, per `insertMany` batch.
    pub latency_us: Histogram<u64>,
    pub errors: u64,
    /// Reads that found no document, updates that matched none, empty scans.
    pub misses: u64,
    pub first_error: Option<String>,
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
}

/// Column header matching [`row`].
pub fn header() -> String {
    format!(
        "{:<12} {:<8} {:>5} {:>10} {:>12} {:>9} {:>9} {:>9} {:>7} {:>7}",
        "target", "workload", "conc", "ops", "ops/s", "p50", "p99", "max", "errors", "misses"
    )
}

/// One aligned table row.
pub fn row(m: &Measurement) -> String {
    format!(
        "{:<12} {:<8} {:>5} {:>10} {:>12.0} {:>9} {:>9} {:>9} {:>7} {:>7}",
        m.target,
        m.workload.name(),
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

/// The machine-readable line for one measurement.
pub fn result_line(m: &Measurement) -> String {
    format!(
        "RESULT target={} workload={} conc={} ops={} secs={:.3} ops_per_sec={:.1} p50_us={} p99_us={} max_us={} errors={} misses={}",
        m.target,
        m.workload.name(),
        m.concurrency,
        m.ops,
        m.elapsed.as_secs_f64(),
        m.ops_per_sec(),
        m.p50_us(),
        m.p99_us(),
        m.max_us(),
        m.errors,
        m.misses,
    )
}

/// The primary server's figures as a fraction of the comparison server's,
/// for each workload and concurrency measured on both.
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
            "{:<8} {:>5} {:>18} {:>18} {:>9} {:>21} {:>21}",
            "workload",
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
        let Some(o) = other
            .iter()
            .find(|o| o.workload == p.workload && o.concurrency == p.concurrency)
        else {
            continue;
        };
        let fraction = if o.ops_per_sec() > 0.0 {
            p.ops_per_sec() / o.ops_per_sec()
        } else {
            0.0
        };
        lines.push(format!(
            "{:<8} {:>5} {:>18.0} {:>18.0} {:>9.3} {:>21} {:>21}",
            p.workload.name(),
            p.concurrency,
            p.ops_per_sec(),
            o.ops_per_sec(),
            fraction,
            format!("{} / {}", human_us(p.p50_us()), human_us(o.p50_us())),
            format!("{} / {}", human_us(p.p99_us()), human_us(o.p99_us())),
        ));
        machine.push(format!(
            "RATIO workload={} conc={} target={} baseline={} fraction={:.4} target_ops_per_sec={:.1} baseline_ops_per_sec={:.1}",
            p.workload.name(),
            p.concurrency,
            p.target,
            o.target,
            fraction,
            p.ops_per_sec(),
            o.ops_per_sec(),
        ));
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
    fn reads_own_memory() {
        let m = read_memory(std::process::id()).expect("own /proc status");
        assert!(m.rss_kib > 0 && m.hwm_kib >= m.rss_kib);
    }
}
