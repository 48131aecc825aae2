//! What the machine offers: its memory, read from `/proc` and the
//! process's control group. Elsewhere (or when unreadable) it is unknown.

/// Physical memory, in bytes (`hostInfo`'s `memSizeMB`).
pub fn physical_memory() -> Option<u64> {
    proc_kib("/proc/meminfo", "MemTotal:").map(|kib| kib * 1024)
}

/// The memory this process may use, in bytes: physical memory, or the
/// control group's limit when that is lower (a container's), as mongod
/// reads it to size its cache.
pub fn usable_memory() -> Option<u64> {
    let limit = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|path| {
        std::fs::read_to_string(path)
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    });
    match (physical_memory(), limit) {
        (Some(physical), Some(limit)) => Some(physical.min(limit)),
        (physical, limit) => physical.or(limit),
    }
}

/// Reads a `Name:  1234 kB` line of a `/proc` file, in KiB.
pub fn proc_kib(path: &str, name: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(name))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_where_the_system_tells_it() {
        if cfg!(target_os = "linux") {
            let physical = physical_memory().unwrap();
            assert!(physical > 64 * 1024 * 1024);
            assert!(usable_memory().unwrap() <= physical);
            assert!(proc_kib("/proc/self/status", "VmRSS:").unwrap() > 0);
        }
        assert_eq!(proc_kib("/proc/self/status", "NoSuchField:"), None);
    }
}
