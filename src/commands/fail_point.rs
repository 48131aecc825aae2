//! Fail points for testing clients against Shardgate: with
//! `--enable-test-commands`, `configureFailPoint` sets MongoDB's
//! `failCommand` fail point, which drivers' own test suites and
//! applications use to see their retry and error handling at work.
//!
//! `failCommand` acts on the commands named in `data.failCommands`, for
//! connections whose `hello` gave `data.appName` when that is set, as
//! often as `mode` says (`alwaysOn`, `{times: n}`, `{skip: n}`,
//! `{activationProbability: p}`, `off`). Each time it acts it may, in
//! this order: hold the command for `blockTimeMS` (`blockConnection`);
//! close the connection without a reply (`closeConnection`); fail the
//! command with `errorCode` and `errorLabels`; or run it and add
//! `writeConcernError` to its reply. As mongod does, a retryable write
//! failed with a retryable code carries the `RetryableWriteError` label
//! unless `errorLabels` says otherwise.

use std::time::Duration;

use bson::{doc, Bson, Document};
use parking_lot::Mutex;

use crate::bail;
use crate::error::{ErrorCode, Result};

/// The fail points of one server; only `failCommand` exists.
#[derive(Default)]
pub struct FailPoints {
    fail_command: Mutex<FailPoint>,
}

#[derive(Default)]
struct FailPoint {
    mode: Mode,
    data: FailCommand,
    /// How often it acted since it was last configured.
    entered: i64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
enum Mode {
    #[default]
    Off,
    AlwaysOn,
    Times(i64),
    Skip(i64),
    Probability(f64),
}

#[derive(Debug, Clone, Default)]
struct FailCommand {
    commands: Vec<String>,
    app_name: Option<String>,
    namespace: Option<String>,
    block: Option<Duration>,
    close_connection: bool,
    error_code: Option<i32>,
    error_labels: Option<Vec<Bson>>,
    write_concern_error: Option<Document>,
}

/// What the fail point does to one command.
#[derive(Debug, Clone, Default)]
pub struct Action {
    pub block: Option<Duration>,
    pub close_connection: bool,
    /// The reply to send instead of running the command.
    pub error: Option<Document>,
    /// Added to the reply of the command once it has run.
    pub write_concern_error: Option<Document>,
    /// Labels for that reply.
    pub labels: Vec<Bson>,
}

/// Codes a retryable write is retried on: MongoDB labels such a failure
/// `RetryableWriteError`.
const RETRYABLE_CODES: [i32; 12] = [
    6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436,
];

impl FailPoints {
    /// What the fail point does to command `name` on `db` from a client
    /// that named itself `app_name`; `None` when it leaves it alone.
    pub fn check(
        &self,
        name: &str,
        body: &Document,
        db: &str,
        app_name: Option<&str>,
    ) -> Option<Action> {
        let mut point = self.fail_command.lock();
        let data = &point.data;
        if point.mode == Mode::Off
            || !data.commands.iter().any(|c| c == name)
            || data
                .app_name
                .as_deref()
                .is_some_and(|a| Some(a) != app_name)
            || data
                .namespace
                .as_deref()
                .is_some_and(|ns| !targets(ns, db, body))
        {
            return None;
        }
        match point.mode {
            Mode::Off => return None,
            Mode::AlwaysOn => {}
            Mode::Times(n) => {
                point.mode = if n <= 1 {
                    Mode::Off
                } else {
                    Mode::Times(n - 1)
                };
            }
            Mode::Skip(n) if n > 0 => {
                point.mode = Mode::Skip(n - 1);
                return None;
            }
            Mode::Skip(_) => {}
            Mode::Probability(p) => {
                if rand::random::<f64>() >= p {
                    return None;
                }
            }
        }
        point.entered += 1;
        let data = point.data.clone();
        drop(point);
        let retryable_write =
            body.contains_key("txnNumber") && super::retry::is_retryable_write(name);
        let labels = |code: i32| -> Vec<Bson> {
            match &data.error_labels {
                Some(labels) => labels.clone(),
                None if retryable_write && RETRYABLE_CODES.contains(&code) => {
                    vec![Bson::from("RetryableWriteError")]
                }
                None => Vec::new(),
            }
        };
        let mut action = Action {
            block: data.block,
            close_connection: data.close_connection,
            ..Action::default()
        };
        if let Some(code) = data.error_code {
            let code_name = ErrorCode::from_number(code).name().into_owned();
            let mut error = doc! {
                "ok": 0.0,
                "errmsg": "Failing command via 'failCommand' failpoint",
                "code": code,
                "codeName": code_name,
            };
            let labels = labels(code);
            if !labels.is_empty() {
                error.insert("errorLabels", labels);
            }
            action.error = Some(error);
        } else if let Some(wce) = data.write_concern_error {
            let code = wce
                .get("code")
                .and_then(integer)
                .and_then(|c| i32::try_from(c).ok())
                .unwrap_or(0);
            action.labels = labels(code);
            action.write_concern_error = Some(wce);
        }
        Some(action)
    }

    /// Sets the fail point; returns how often it acted under its former
    /// setting.
    fn set(&self, mode: Mode, data: FailCommand) -> i64 {
        let mut point = self.fail_command.lock();
        let was = point.entered;
        *point = FailPoint {
            mode,
            data,
            entered: 0,
        };
        was
    }
}

/// Whether `namespace` (`db.coll`) is the one a command on `db` names.
fn targets(namespace: &str, db: &str, body: &Document) -> bool {
    let coll = body.values().next().and_then(Bson::as_str).unwrap_or("");
    namespace == format!("{db}.{coll}")
}

/// Parses `configureFailPoint`'s `mode` and `data` and sets the fail
/// point; returns how often it acted under its former setting.
pub fn configure(points: &FailPoints, mode: Option<&Bson>, data: Option<&Bson>) -> Result<i64> {
    let mode = parse_mode(mode)?;
    let data = match data {
        None => FailCommand::default(),
        Some(Bson::Document(d)) => parse_data(d)?,
        Some(_) => bail!(TypeMismatch, "the 'data' option must be a BSON object"),
    };
    if mode != Mode::Off && data.commands.is_empty() {
        bail!(BadValue, "'failCommands' must be specified");
    }
    Ok(points.set(mode, data))
}

/// A whole number of any numeric type.
fn integer(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(*f as i64),
        _ => None,
    }
}

fn parse_mode(mode: Option<&Bson>) -> Result<Mode> {
    Ok(match mode {
        Some(Bson::String(s)) if s == "off" => Mode::Off,
        Some(Bson::String(s)) if s == "alwaysOn" => Mode::AlwaysOn,
        Some(Bson::String(s)) => bail!(
            BadValue,
            "unknown mode '{s}': 'mode' string must be one of 'off', 'alwaysOn'"
        ),
        Some(Bson::Document(d)) => {
            let count = |v: &Bson, what: &str| -> Result<i64> {
                match integer(v) {
                    Some(n) if n >= 0 => Ok(n),
                    Some(_) => bail!(BadValue, "'{what}' must be a non-negative number"),
                    None => bail!(TypeMismatch, "'{what}' must be a number"),
                }
            };
            match d.iter().next() {
                Some((k, v)) if k == "times" => match count(v, "times")? {
                    0 => Mode::Off,
                    n => Mode::Times(n),
                },
                Some((k, v)) if k == "skip" => Mode::Skip(count(v, "skip")?),
                Some((k, v)) if k == "activationProbability" => match v.as_f64() {
                    Some(p) if (0.0..=1.0).contains(&p) => Mode::Probability(p),
                    _ => bail!(
                        BadValue,
                        "activationProbability must be a number between 0 and 1"
                    ),
                },
                _ => bail!(
                    BadValue,
                    "'mode' must be one of 'off', 'alwaysOn', 'times', 'skip' or 'activationProbability'"
                ),
            }
        }
        None => bail!(BadValue, "'mode' must be specified"),
        Some(_) => bail!(TypeMismatch, "'mode' must be a string or an object"),
    })
}

fn parse_data(d: &Document) -> Result<FailCommand> {
    let mut data = FailCommand::default();
    let mut block = false;
    let mut block_ms = None;
    for (key, value) in d {
        match (key.as_str(), value) {
            ("failCommands", Bson::Array(names)) => {
                for n in names {
                    let Bson::String(n) = n else {
                        bail!(TypeMismatch, "'failCommands' must be an array of strings");
                    };
                    data.commands.push(n.clone());
                }
            }
            ("appName", Bson::String(s)) => data.app_name = Some(s.clone()),
            ("namespace", Bson::String(s)) => data.namespace = Some(s.clone()),
            ("closeConnection", Bson::Boolean(b)) => data.close_connection = *b,
            ("blockConnection", Bson::Boolean(b)) => block = *b,
            ("blockTimeMS", v) => match integer(v).and_then(|ms| u64::try_from(ms).ok()) {
                Some(ms) => block_ms = Some(Duration::from_millis(ms)),
                None => bail!(BadValue, "'blockTimeMS' must be a non-negative number"),
            },
            ("errorCode", v) => match integer(v).and_then(|c| i32::try_from(c).ok()) {
                Some(code) => data.error_code = Some(code),
                None => bail!(TypeMismatch, "'errorCode' must be a number"),
            },
            ("errorLabels", Bson::Array(labels)) => data.error_labels = Some(labels.clone()),
            ("writeConcernError", Bson::Document(wce)) => {
                data.write_concern_error = Some(wce.clone())
            }
            // Options of mongod's fail point that change nothing here.
            ("failInternalCommands" | "threadName" | "errorExtraInfo", _) => {}
            (other, _) => bail!(BadValue, "unknown failCommand option '{other}'"),
        }
    }
    if block {
        let Some(ms) = block_ms else {
            bail!(
                InvalidOptions,
                "must specify 'blockTimeMS' when 'blockConnection' is true"
            );
        };
        data.block = Some(ms);
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configured(mode: Bson, data: Document) -> FailPoints {
        let points = FailPoints::default();
        configure(&points, Some(&mode), Some(&Bson::Document(data))).unwrap();
        points
    }

    #[test]
    fn times_fails_that_many_matching_commands() {
        let points = configured(
            Bson::Document(doc! {"times": 2}),
            doc! {"failCommands": ["insert"], "errorCode": 91},
        );
        let insert = doc! {"insert": "c", "txnNumber": 1i64};
        assert!(points
            .check("find", &doc! {"find": "c"}, "db", None)
            .is_none());
        let first = points.check("insert", &insert, "db", None).unwrap();
        let error = first.error.unwrap();
        assert_eq!(error.get_i32("code").unwrap(), 91);
        assert_eq!(error.get_str("codeName").unwrap(), "ShutdownInProgress");
        assert_eq!(
            error.get_array("errorLabels").unwrap(),
            &vec![Bson::from("RetryableWriteError")]
        );
        assert!(points.check("insert", &insert, "db", None).is_some());
        assert!(points.check("insert", &insert, "db", None).is_none());
        assert_eq!(
            configure(&points, Some(&Bson::from("off")), None).unwrap(),
            2
        );
    }

    #[test]
    fn skip_app_name_and_labels_are_honoured() {
        let points = configured(
            Bson::Document(doc! {"skip": 1}),
            doc! {"failCommands": ["find"], "errorCode": 2, "appName": "tester", "errorLabels": []},
        );
        let find = doc! {"find": "c"};
        assert!(points.check("find", &find, "db", Some("other")).is_none());
        assert!(points.check("find", &find, "db", Some("tester")).is_none());
        let action = points.check("find", &find, "db", Some("tester")).unwrap();
        let error = action.error.unwrap();
        assert!(error.get_array("errorLabels").is_err(), "{error}");
        assert_eq!(error.get_str("codeName").unwrap(), "BadValue");
    }

    #[test]
    fn block_close_and_write_concern_errors_are_reported() {
        let points = configured(
            Bson::from("alwaysOn"),
            doc! {"failCommands": ["update"], "blockConnection": true, "blockTimeMS": 50,
            "writeConcernError": {"code": 91, "errmsg": "Replication is being shut down"}},
        );
        let action = points
            .check(
                "update",
                &doc! {"update": "c", "txnNumber": 3i64},
                "db",
                None,
            )
            .unwrap();
        assert_eq!(action.block, Some(Duration::from_millis(50)));
        assert!(action.error.is_none());
        assert_eq!(
            action.write_concern_error.unwrap().get_i32("code").unwrap(),
            91
        );
        assert_eq!(action.labels, vec![Bson::from("RetryableWriteError")]);
        let close = configured(
            Bson::from("alwaysOn"),
            doc! {"failCommands": ["ping"], "closeConnection": true},
        );
        assert!(
            close
                .check("ping", &doc! {"ping": 1}, "admin", None)
                .unwrap()
                .close_connection
        );
    }

    #[test]
    fn malformed_settings_are_refused() {
        assert!(parse_mode(Some(&Bson::from("sometimes"))).is_err());
        assert!(parse_mode(Some(&Bson::Document(doc! {"times": -1}))).is_err());
        assert!(parse_mode(None).is_err());
        assert!(parse_data(&doc! {"failCommands": [1]}).is_err());
        assert!(parse_data(&doc! {"failCommands": ["a"], "blockConnection": true}).is_err());
        assert!(parse_data(&doc! {"failCommands": ["a"], "bogus": 1}).is_err());
    }
}
