//! Configuration: the TOML file turned into a validated [`Config`]. Every error names the line and
//! the key that is wrong; nothing is bound or started from a config that did not validate.
//!
//! This root holds the entry points ([`Config::load`], [`Config::from_toml`], ...) and
//! [`ConfigError`]. The file as written is `file` (its defaults and hand-parsed values below it),
//! the validated types `types`, the checks `validate` (with `discovery`, `handoff`, `routes` and
//! `tls` for the sections with most rules), the name resolution of backend addresses `resolve`.

mod describe;
mod discovery;
mod duration;
mod file;
mod handoff;
mod key_path;
mod resolve;
mod routes;
mod secret;
mod tls;
mod types;
mod validate;

use std::fmt;
use std::path::Path;

pub use duration::{HumanDuration, OptionalDuration, parse_duration};
pub use file::{Count, LogFormat, OnMissing, RouteMode};
pub use handoff::{DEFAULT_HANDOFF_PATH, MAX_HANDOFF_BYTES};
pub use secret::{MIN_TOKEN_LEN, read_token_file};
pub use tls::{CertFiles, Tls};
pub use types::{
    Admin, BackendSource, BackendSpec, Config, Directory, Discovery, Drain, Handoff, Health, Limits, Log,
    OnHandoffFailure, PlacementConfig, Reload, Rooms, Route, Server, Shutdown, Timeouts, Upstream,
};

use validate::Validator;

/// The default configuration, compiled into the binary (`config/roomgate.toml`).
pub const EMBEDDED_DEFAULT: &str = include_str!("../../config/roomgate.toml");

/// What is wrong with a config, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub origin: String,
    /// 1-based line of the offending value, when known.
    pub line: Option<usize>,
    pub message: String,
}

// === impl Config ===

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            origin: origin.clone(),
            line: None,
            message: format!("cannot read the file: {e}"),
        })?;
        let mut config = Config::from_toml(&text, &origin)?;
        if let Some(tls) = &mut config.tls {
            tls.anchor(path);
        }
        config.path = Some(path.to_owned());
        Ok(config)
    }

    /// The embedded default configuration.
    pub fn embedded() -> Result<Config, ConfigError> {
        Config::from_toml(EMBEDDED_DEFAULT, "<embedded>")
    }

    /// Parses and validates config text. Backend host names are resolved here.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let at = |span: std::ops::Range<usize>, message: String| ConfigError {
            origin: origin.to_owned(),
            line: (span != (0..0)).then(|| line_of(text, span.start)),
            message,
        };
        let parsed =
            toml::Deserializer::parse(text).map_err(|e| at(e.span().unwrap_or(0..0), e.message().to_owned()))?;
        // The error names the key it is about (`routes[0].mode: unknown variant ...`).
        let file: file::File = serde_path_to_error::deserialize(parsed).map_err(|e| {
            let path = key_path::of(e.path());
            let inner = e.into_inner();
            let message = inner.message().trim_end();
            let message = if path.is_empty() || message.starts_with(&path) {
                message.to_owned()
            } else {
                format!("{path}: {message}")
            };
            at(inner.span().unwrap_or(0..0), message)
        })?;
        Validator { at: &at }.config(file, origin)
    }

    /// The route for a request path: the first whose prefix matches.
    pub fn route_for(&self, path: &str) -> Option<(usize, &Route)> {
        self.routes.iter().enumerate().find(|(_, r)| path.starts_with(r.prefix.as_str()))
    }
}

/// The 1-based line of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.origin, self.message),
            None => write!(f, "{}: {}", self.origin, self.message),
        }
    }
}

#[cfg(test)]
mod tests;
