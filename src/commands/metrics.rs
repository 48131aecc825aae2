//! What the commands layer counts for the `/metrics` endpoint: each
//! command's calls by outcome, and how long they took. The dispatch in
//! `mod.rs` records every command it runs; the HTTP side port
//! (`server::http`) registers these families with the figures it reads
//! at scrape time.
//!
//! Labels stay bounded: a command is named by its registry entry (every
//! name a client sends that is not a command counts as `unknown`), and
//! the outcome is `ok` or `error`.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Latency buckets, in seconds: from 50 µs (a point read) to 10 s.
const LATENCY_BUCKETS: [f64; 17] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    command: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommandLabel {
    command: &'static str,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS.iter().copied())
}

/// Calls and latency per command.
#[derive(Debug, Clone)]
pub struct CommandMetrics {
    calls: Family<CallLabels, Counter>,
    latency: Family<CommandLabel, Histogram, fn() -> Histogram>,
}

impl Default for CommandMetrics {
    fn default() -> CommandMetrics {
        CommandMetrics {
            calls: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
        }
    }
}

impl CommandMetrics {
    /// Counts one run of `command` (a registry name, or `unknown`).
    pub fn record(&self, command: &'static str, ok: bool, elapsed: Duration) {
        let outcome = if ok { "ok" } else { "error" };
        self.calls
            .get_or_create(&CallLabels { command, outcome })
            .inc();
        self.latency
            .get_or_create(&CommandLabel { command })
            .observe(elapsed.as_secs_f64());
    }

    /// Adds the families to `registry` (they share their counts with
    /// this one).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "commands",
            "Commands run, by command and outcome",
            self.calls.clone(),
        );
        registry.register(
            "command_duration_seconds",
            "How long commands took, by command",
            self.latency.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn calls_and_latency_are_counted_per_command_and_outcome() {
        let metrics = CommandMetrics::default();
        metrics.record("find", true, Duration::from_micros(70));
        metrics.record("find", true, Duration::from_millis(3));
        metrics.record("find", false, Duration::from_micros(10));
        metrics.record("unknown", false, Duration::from_micros(10));
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
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
