//! What the commands layer counts for the `/metrics` endpoint: each
//! command's calls by outcome, and how long they took. The dispatch in
//! `mod.rs` records every command it runs; the HTTP side port
//! (`server::http`) registers these families with the figures it reads
//! at scrape time.
//!
//! Labels stay bounded: a command is named by its registry entry (every
//! name a client sends that is not a command counts as `unknown`), and
//! the outcome is `ok` or `error`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// Latency buckets, in seconds: from 50 µs (a point read) to 10 s.
const LATENCY_BUCKETS: [f64; 17] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// Commands the registry may hold; one slot more counts `unknown`.
pub const MAX_COMMANDS: usize = 512;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    command: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommandLabel {
    command: &'static str,
}

/// One command's counts, kept in atomics: every command records here
/// on the request path, from every connection at once, so nothing on
/// that path takes a lock.
#[derive(Debug, Default)]
struct Slot {
    /// The command's name, set when it first runs.
    name: OnceLock<&'static str>,
    ok: AtomicU64,
    error: AtomicU64,
    /// Runs per latency bucket (not cumulative); the last holds those
    /// over the highest bound.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    nanos: AtomicU64,
}

/// Calls and latency per command: a slot per registry entry.
#[derive(Debug)]
pub struct CommandMetrics {
    slots: Box<[Slot]>,
}

impl Default for CommandMetrics {
    fn default() -> CommandMetrics {
        CommandMetrics {
            slots: (0..=MAX_COMMANDS).map(|_| Slot::default()).collect(),
        }
    }
}

impl CommandMetrics {
    /// Counts one run of a command: `command` is its index in the
    /// registry and its name, `None` for a name that is no command
    /// (counted as `unknown`).
    pub fn record(&self, command: Option<(usize, &'static str)>, ok: bool, elapsed: Duration) {
        let (index, name) = command
            .filter(|(index, _)| *index < MAX_COMMANDS)
            .unwrap_or((MAX_COMMANDS, "unknown"));
        let Some(slot) = self.slots.get(index) else {
            return;
        };
        slot.name.get_or_init(|| name);
        let outcome = if ok { &slot.ok } else { &slot.error };
        outcome.fetch_add(1, Ordering::Relaxed);
        let seconds = elapsed.as_secs_f64();
        let bucket = LATENCY_BUCKETS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(LATENCY_BUCKETS.len());
        slot.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        slot.nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Adds the families to `registry`, as the counts stand now.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.snapshot()));
    }

    fn snapshot(&self) -> Snapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let commands = self
            .slots
            .iter()
            .filter_map(|slot| {
                let name = *slot.name.get()?;
                let counts: Vec<u64> = slot.buckets.iter().map(load).collect();
                let bounds = LATENCY_BUCKETS.iter().copied().chain([f64::MAX]);
                Some(CommandSnapshot {
                    name,
                    ok: load(&slot.ok),
                    error: load(&slot.error),
                    count: counts.iter().sum(),
                    buckets: bounds.zip(counts).collect(),
                    seconds: load(&slot.nanos) as f64 / 1e9,
                })
            })
            .collect();
        Snapshot { commands }
    }
}

/// The counts of one scrape.
#[derive(Debug)]
struct Snapshot {
    commands: Vec<CommandSnapshot>,
}

#[derive(Debug)]
struct CommandSnapshot {
    name: &'static str,
    ok: u64,
    error: u64,
    count: u64,
    buckets: Vec<(f64, u64)>,
    seconds: f64,
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        {
            let mut calls = encoder.encode_descriptor(
                "commands",
                "Commands run, by command and outcome",
                None,
                MetricType::Counter,
            )?;
            for c in &self.commands {
                for (outcome, n) in [("ok", c.ok), ("error", c.error)] {
                    if n > 0 {
                        let labels = CallLabels {
                            command: c.name,
                            outcome,
                        };
                        calls
                            .encode_family(&labels)?
                            .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
                    }
                }
            }
        }
        let mut latency = encoder.encode_descriptor(
            "command_duration_seconds",
            "How long commands took, by command",
            None,
            MetricType::Histogram,
        )?;
        for c in &self.commands {
            latency
                .encode_family(&CommandLabel { command: c.name })?
                .encode_histogram::<NoLabelSet>(c.seconds, c.count, &c.buckets, None)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn calls_and_latency_are_counted_per_command_and_outcome() {
        let metrics = CommandMetrics::default();
        let find = Some((7, "find"));
        metrics.record(find, true, Duration::from_micros(70));
        metrics.record(find, true, Duration::from_millis(3));
        metrics.record(find, false, Duration::from_micros(10));
        metrics.record(None, false, Duration::from_micros(10));
        let mut registry = Registry::with_prefix("shardgate");
        metrics.register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            "shardgate_commands_total{command=\"find\",outcome=\"ok\"} 2",
            "shardgate_commands_total{command=\"find\",outcome=\"error\"} 1",
            "shardgate_commands_total{command=\"unknown\",outcome=\"error\"} 1",
            "shardgate_command_duration_seconds_count{command=\"find\"} 3",
            "shardgate_command_duration_seconds_bucket{le=\"0.0001\",command=\"find\"} 2",
            "shardgate_command_duration_seconds_bucket{le=\"+Inf\",command=\"find\"} 3",
            "shardgate_command_duration_seconds_count{command=\"unknown\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
