//! The server's recent log lines, kept in memory for `getLog`: the last
//! [`KEPT`] lines, each as one JSON object in mongod's structured-log
//! shape (`t`, `s`, `c`, `msg`, `attr`), which is what `getLog` returns
//! and `mongosh`'s `show log` prints.
//!
//! [`RecentLog`] is a tracing layer: it sees exactly the events the log
//! filter lets through, beside the layer that writes them to stderr.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Lines kept, as mongod's in-memory log keeps them.
pub const KEPT: usize = 1024;

static LINES: Mutex<VecDeque<String>> = parking_lot::const_mutex(VecDeque::new());
static WRITTEN: AtomicU64 = AtomicU64::new(0);

/// The lines kept now, oldest first, and how many were written in all.
pub fn lines() -> (Vec<String>, u64) {
    let lines = LINES.lock();
    (
        lines.iter().cloned().collect(),
        WRITTEN.load(Ordering::Relaxed),
    )
}

/// The layer that keeps the lines.
#[derive(Debug, Default)]
pub struct RecentLog;

impl<S: Subscriber> Layer<S> for RecentLog {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let line = format_line(event);
        let mut lines = LINES.lock();
        if lines.len() == KEPT {
            lines.pop_front();
        }
        lines.push_back(line);
        WRITTEN.fetch_add(1, Ordering::Relaxed);
    }
}

/// The message and the other fields of an event.
#[derive(Default)]
struct Fields {
    message: String,
    attr: serde_json::Map<String, serde_json::Value>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        self.record(field, serde_json::Value::String(text));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, serde_json::Value::String(value.to_string()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.record(field, value.into());
    }
}

impl Fields {
    fn record(&mut self, field: &Field, value: serde_json::Value) {
        match (field.name(), value) {
            ("message", serde_json::Value::String(text)) => self.message = text,
            (name, value) => {
                self.attr.insert(name.to_string(), value);
            }
        }
    }
}

/// mongod's severity letters.
fn severity(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "E",
        Level::WARN => "W",
        Level::INFO => "I",
        Level::DEBUG => "D1",
        Level::TRACE => "D2",
    }
}

fn format_line(event: &Event<'_>) -> String {
    let mut fields = Fields::default();
    event.record(&mut fields);
    let meta = event.metadata();
    let now = bson::DateTime::now()
        .try_to_rfc3339_string()
        .unwrap_or_default();
    // In mongod's order of fields, which a JSON map would not keep.
    let text = |s: &str| serde_json::Value::from(s).to_string();
    let mut line = format!(
        "{{\"t\":{{\"$date\":{}}},\"s\":{},\"c\":{},\"msg\":{}",
        text(&now),
        text(severity(meta.level())),
        text(meta.target()),
        text(&fields.message),
    );
    if !fields.attr.is_empty() {
        let _ = write!(line, ",\"attr\":{}", serde_json::Value::Object(fields.attr));
    }
    line.push('}');
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn events_are_kept_as_mongod_shaped_json_lines() {
        let subscriber = tracing_subscriber::registry().with(RecentLog);
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(conn = 7, ns = "db.c", "a \"quoted\" message");
        });
        let (lines, written) = lines();
        assert!(written >= 1);
        let line = lines
            .iter()
            .rev()
            .find(|l| l.contains("quoted"))
            .expect("the event was kept");
        let parsed: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(parsed["s"], "W");
        assert_eq!(parsed["msg"], "a \"quoted\" message");
        assert_eq!(parsed["attr"]["conn"], 7);
        assert_eq!(parsed["attr"]["ns"], "db.c");
        assert!(parsed["t"]["$date"].as_str().unwrap().ends_with('Z'));
        assert!(line.starts_with("{\"t\":{\"$date\":\""), "{line}");
    }
}
