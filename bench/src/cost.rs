//! The cost of an operation in CPU time: `--cost NAME=PID[,PID...]` names a
//! group of processes (Shardgate, or the postmasters of a PostgreSQL fleet)
//! whose CPU time is read from `/proc` before and after each timed run on
//! the server under test, and printed per operation on a `COST` line.
//!
//! A PostgreSQL server is a postmaster and one child process per
//! connection, so each pid counts with every process below it: a live
//! descendant's own time, and through `cutime`/`cstime` the time of those
//! that exited and were reaped during the run.

use std::collections::HashMap;

use crate::report::{self, Measurement};

/// Processes whose CPU time is added up under one name.
#[derive(Clone, Debug)]
pub struct CostGroup {
    pub name: String,
    pub pids: Vec<u32>,
}

/// Parses `NAME=PID[,PID...]` for clap.
pub fn parse_group(s: &str) -> Result<CostGroup, String> {
    let (name, pids) = s
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=PID[,PID...], got {s:?}"))?;
    let valid_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid_name {
        return Err(format!(
            "the name in {s:?} must be letters, digits, '_' or '-'"
        ));
    }
    let pids = pids
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<u32>()
                .map_err(|e| format!("bad pid {p:?} in {s:?}: {e}"))
        })
        .collect::<Result<Vec<u32>, String>>()?;
    Ok(CostGroup {
        name: name.to_owned(),
        pids,
    })
}

/// CPU seconds each group had used when read, in the groups' order.
pub struct Sample(Vec<f64>);

/// CPU seconds each group used during one run.
pub struct CostUse {
    pub groups: Vec<(String, f64)>,
}

/// Reads every group's CPU time so far; nothing to read gives an empty
/// sample.
pub fn sample(groups: &[CostGroup]) -> Result<Sample, String> {
    if groups.is_empty() {
        return Ok(Sample(Vec::new()));
    }
    let procs = processes()?;
    groups
        .iter()
        .map(|g| {
            g.pids
                .iter()
                .map(|&pid| tree_ticks(&procs, pid))
                .sum::<Result<u64, String>>()
                .map(|ticks| ticks as f64 / USER_HZ)
        })
        .collect::<Result<Vec<f64>, String>>()
        .map(Sample)
}

/// What each group used between `before` and `after`; nothing when no
/// group was named.
pub fn between(groups: &[CostGroup], before: &Sample, after: &Sample) -> Option<CostUse> {
    if groups.is_empty() {
        return None;
    }
    Some(CostUse {
        groups: groups
            .iter()
            .zip(before.0.iter().zip(&after.0))
            .map(|(g, (b, a))| (g.name.clone(), (a - b).max(0.0)))
            .collect(),
    })
}

/// Same as [`crate::report`]'s: `/proc` counts CPU in USER_HZ, 100 on Linux.
const USER_HZ: f64 = 100.0;

/// One process as `/proc/PID/stat` shows it.
struct Proc {
    parent: u32,
    /// utime + stime + cutime + cstime.
    ticks: u64,
}

fn processes() -> Result<HashMap<u32, Proc>, String> {
    let dir = std::fs::read_dir("/proc").map_err(|e| format!("reading /proc: {e}"))?;
    let mut procs = HashMap::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // A process may exit between the listing and the read.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some(p) = parse_stat(&stat) {
            procs.insert(pid, p);
        }
    }
    Ok(procs)
}

/// The parent (field 4) and fields 14 to 17 of a `/proc/PID/stat` line,
/// counted from the last `)` since the command name may hold anything.
fn parse_stat(stat: &str) -> Option<Proc> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| fields.get(i)?.parse::<u64>().ok();
    let parent = u32::try_from(num(1)?).ok()?;
    let ticks = num(11)? + num(12)? + num(13)? + num(14)?;
    Some(Proc { parent, ticks })
}

/// CPU ticks of `root` and every process below it.
fn tree_ticks(procs: &HashMap<u32, Proc>, root: u32) -> Result<u64, String> {
    let top = procs
        .get(&root)
        .ok_or_else(|| format!("process {root} is gone"))?;
    let mut total = top.ticks;
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (&pid, p) in procs {
            if p.parent == parent && pid != parent {
                total += p.ticks;
                frontier.push(pid);
            }
        }
    }
    Ok(total)
}

/// `COST target=.. workload=.. conc=.. ops=.. ops_per_sec=..` then, per
/// group, its CPU seconds and microseconds per operation.
pub fn cost_line(m: &Measurement) -> Option<String> {
    let cost = m.cost.as_ref()?;
    let mut line = format!(
        "COST target={} workload={}{} conc={} ops={} ops_per_sec={:.1}",
        m.target,
        m.workload.name(),
        report::partitions_field(m),
        m.concurrency,
        m.ops,
        m.ops_per_sec(),
    );
    for (name, secs) in &cost.groups {
        let per_op = if m.ops > 0 {
            secs * 1e6 / m.ops as f64
        } else {
            0.0
        };
        line.push_str(&format!(
            " {name}_cpu_secs={secs:.2} {name}_us_per_op={per_op:.1}"
        ));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_groups() {
        let g = parse_group("postgres=10,20").expect("valid group");
        assert_eq!(g.name, "postgres");
        assert_eq!(g.pids, vec![10, 20]);
        assert!(parse_group("postgres").is_err());
        assert!(parse_group("=1").is_err());
        assert!(parse_group("a b=1").is_err());
        assert!(parse_group("pg=x").is_err());
    }

    #[test]
    fn stat_fields_follow_the_last_parenthesis() {
        let stat = "4242 (a (b) c) S 7 1 1 0 -1 0 0 0 0 0 300 80 5 6 20 0 1";
        let p = parse_stat(stat).expect("valid stat");
        assert_eq!(p.parent, 7);
        assert_eq!(p.ticks, 391);
    }

    #[test]
    fn counts_own_tree() {
        let me = std::process::id();
        let groups = vec![CostGroup {
            name: "me".into(),
            pids: vec![me],
        }];
        let before = sample(&groups).expect("own /proc stat");
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i ^ (x >> 3));
        }
        std::hint::black_box(x);
        let after = sample(&groups).expect("own /proc stat");
        let used = between(&groups, &before, &after).expect("one group");
        assert_eq!(used.groups.len(), 1);
        assert!(used.groups[0].1 >= 0.0);
    }
}
