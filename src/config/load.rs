//! Where each setting comes from. A setting is a flag (`--max-connections
//! 500`); the environment variable `SHARDGATE_MAX_CONNECTIONS` gives it
//! when the flag is absent, a key of the `--config` TOML file
//! (`max-connections = 500`) when both are, and the built-in default
//! otherwise. `--config` itself may come from `SHARDGATE_CONFIG`.
//!
//! The file's values become the flags' defaults before the command line
//! is parsed, so clap checks them as it checks a flag, and its own order
//! (command line, then environment, then default) is the precedence.

use std::ffi::OsString;
use std::path::Path;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, Command, CommandFactory, FromArgMatches};

use super::Config;

/// Where a setting's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingSource {
    Flag,
    Environment,
    File,
    Default,
}

impl SettingSource {
    pub fn name(self) -> &'static str {
        match self {
            SettingSource::Flag => "flag",
            SettingSource::Environment => "environment",
            SettingSource::File => "file",
            SettingSource::Default => "default",
        }
    }
}

/// One setting as the server runs with it: its flag's name, its values
/// (as given), and where they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub name: String,
    pub values: Vec<String>,
    pub source: SettingSource,
}

/// The environment variable of a flag: `--max-connections` is
/// `SHARDGATE_MAX_CONNECTIONS`.
pub fn env_name(long: &str) -> String {
    format!("SHARDGATE_{}", long.to_ascii_uppercase().replace('-', "_"))
}

/// The command with every flag also read from its environment variable.
fn command() -> Command {
    Config::command().mut_args(|arg| match arg.get_long().map(env_name) {
        Some(name) => arg.env(name),
        None => arg,
    })
}

impl Config {
    /// The configuration from this process's arguments, environment and
    /// `--config` file.
    pub fn load() -> Result<Config, clap::Error> {
        Config::load_from(std::env::args_os())
    }

    /// [`Config::load`] with these arguments (the program's name first).
    pub fn load_from<I, T>(args: I) -> Result<Config, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        // A first pass finds the file (a flag or SHARDGATE_CONFIG).
        let first = command().try_get_matches_from(&args)?;
        let mut cmd = command();
        let mut from_file = Vec::new();
        if let Some(path) = first.get_one::<std::path::PathBuf>("config") {
            for (id, values) in file_settings(&cmd, path)? {
                cmd = cmd.mut_arg(&id, |arg| arg.default_values(values));
                from_file.push(id);
            }
        }
        let matches = cmd.clone().try_get_matches_from(&args)?;
        let mut config = Config::from_arg_matches(&matches)?;
        config.settings = settings(&cmd, &matches, &from_file);
        Ok(config)
    }
}

/// The file's settings: each key a flag's name (or its field's name),
/// each value a string, number, boolean, or an array of them for a flag
/// given several times.
fn file_settings(cmd: &Command, path: &Path) -> Result<Vec<(String, Vec<String>)>, clap::Error> {
    let invalid = |what: String| clap::Error::raw(ErrorKind::InvalidValue, format!("{what}\n"));
    let text = std::fs::read_to_string(path)
        .map_err(|e| invalid(format!("cannot read --config {}: {e}", path.display())))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| invalid(format!("--config {} is not TOML: {e}", path.display())))?;
    let mut settings = Vec::new();
    for (key, value) in table {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) || a.get_id() == key.as_str());
        let Some(arg) = arg.filter(|a| a.get_id() != "config") else {
            return Err(clap::Error::raw(
                ErrorKind::UnknownArgument,
                format!("--config {}: '{key}' is no setting\n", path.display()),
            ));
        };
        let scalar = |v: &toml::Value| match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(n) => Ok(n.to_string()),
            toml::Value::Float(f) => Ok(f.to_string()),
            toml::Value::Boolean(b) => Ok(b.to_string()),
            other => Err(invalid(format!(
                "--config {}: '{key}' takes a string, number or boolean, not {}",
                path.display(),
                other.type_str()
            ))),
        };
        let values = match &value {
            toml::Value::Array(items) => items.iter().map(scalar).collect::<Result<_, _>>()?,
            one => vec![scalar(one)?],
        };
        settings.push((arg.get_id().to_string(), values));
    }
    Ok(settings)
}

/// Every flag's value and its source.
fn settings(cmd: &Command, matches: &ArgMatches, from_file: &[String]) -> Vec<Setting> {
    cmd.get_arguments()
        .filter_map(|arg| {
            let id = arg.get_id().as_str();
            let name = arg.get_long()?.to_string();
            let values: Vec<String> = matches
                .get_raw(id)
                .into_iter()
                .flatten()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let source = match matches.value_source(id)? {
                ValueSource::CommandLine => SettingSource::Flag,
                ValueSource::EnvVariable => SettingSource::Environment,
                _ if from_file.iter().any(|f| f == id) => SettingSource::File,
                _ => SettingSource::Default,
            };
            Some(Setting {
                name,
                values,
                source,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(config: &Config, name: &str) -> (Vec<String>, SettingSource) {
        let s = config
            .settings
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no setting {name}"));
        (s.values.clone(), s.source)
    }

    #[test]
    fn a_file_gives_defaults_that_flags_override() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shardgate.toml");
        std::fs::write(
            &path,
            "max-connections = 77\nlog_level = \"debug\"\nhttp-bind = \"off\"\n\
             postgres = [\"postgresql://a/x\", \"postgresql://b/x\"]\nenable-test-commands = true\n",
        )
        .unwrap();
        let path = path.to_str().unwrap();
        let config =
            Config::load_from(["shardgate", "--config", path, "--log-level", "warn"]).unwrap();
        assert_eq!(config.max_connections, 77);
        assert_eq!(config.log_level, "warn");
        assert_eq!(config.http_bind, super::super::HttpBind(None));
        assert_eq!(config.postgres.len(), 2);
        assert!(config.enable_test_commands);
        assert_eq!(
            source(&config, "max-connections"),
            (vec!["77".to_string()], SettingSource::File)
        );
        assert_eq!(source(&config, "log-level").1, SettingSource::Flag);
        assert_eq!(source(&config, "bind").1, SettingSource::Default);
    }

    #[test]
    fn a_file_is_checked_as_flags_are() {
        let dir = tempfile::tempdir().unwrap();
        let load = |text: &str| {
            let path = dir.path().join("bad.toml");
            std::fs::write(&path, text).unwrap();
            Config::load_from(["shardgate", "--config", path.to_str().unwrap()])
        };
        assert_eq!(
            load("no-such-setting = 1").unwrap_err().kind(),
            ErrorKind::UnknownArgument
        );
        assert_eq!(
            load("max-connections = \"many\"").unwrap_err().kind(),
            ErrorKind::ValueValidation
        );
        assert_eq!(
            load("max-connections = {a = 1}").unwrap_err().kind(),
            ErrorKind::InvalidValue
        );
        assert_eq!(load("[[").unwrap_err().kind(), ErrorKind::InvalidValue);
        let missing = Config::load_from(["shardgate", "--config", "/nonexistent/x.toml"]);
        assert_eq!(missing.unwrap_err().kind(), ErrorKind::InvalidValue);
    }

    #[test]
    fn every_flag_has_its_environment_variable() {
        assert_eq!(env_name("max-connections"), "SHARDGATE_MAX_CONNECTIONS");
        let cmd = command();
        for arg in cmd.get_arguments().filter(|a| a.get_long().is_some()) {
            let long = arg.get_long().unwrap_or_default();
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some(env_name(long).as_str()),
                "--{long}"
            );
        }
    }
}
