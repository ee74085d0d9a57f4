//! The config file as written (serde model). Unknown keys are errors; values that can be checked
//! alone (durations, addresses, key sources) are checked while parsing, so their errors carry the
//! line they are on. [`super::Config::from_toml`] checks what needs several values at once. The
//! defaults of absent keys are in `file/defaults.rs`, the values parsed by hand in `file/values.rs`.

mod defaults;
mod values;

use std::net::SocketAddr;

use serde::Deserialize;
use toml::Spanned;

pub use values::{AutoSize, ByteSize, Count, OneOrMany, ParsedSource, TrustedNet};

use super::duration::{HumanDuration, OptionalDuration};
use crate::placement::Algorithm;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    #[serde(default)]
    pub server: ServerSection,
    #[serde(default)]
    pub limits: LimitsSection,
    #[serde(default)]
    pub timeouts: TimeoutsSection,
    #[serde(default)]
    pub upstream: UpstreamSection,
    #[serde(default)]
    pub placement: PlacementSection,
    #[serde(default)]
    pub log: LogSection,
    #[serde(default)]
    pub shutdown: ShutdownSection,
    #[serde(default)]
    pub rooms: RoomsSection,
    #[serde(default)]
    pub health: HealthSection,
    #[serde(default)]
    pub drain: DrainSection,
    #[serde(default)]
    pub admin: AdminSection,
    #[serde(default)]
    pub reload: ReloadSection,
    #[serde(default)]
    pub directory: DirectorySection,
    /// No `[tls]` section: no TLS listener.
    #[serde(default)]
    pub tls: Option<Spanned<TlsSection>>,
    /// No `[handoff]` section: rooms move without their state.
    #[serde(default)]
    pub handoff: Option<Spanned<HandoffSection>>,
    #[serde(default)]
    pub backends: Vec<Spanned<BackendEntry>>,
    #[serde(default)]
    pub discovery: Vec<Spanned<DiscoverySection>>,
    #[serde(default)]
    pub routes: Vec<Spanned<RouteEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    pub listen: OneOrMany<SocketAddr>,
    pub trusted_proxies: Vec<TrustedNet>,
    pub workers: Spanned<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    pub max_request_head: Spanned<usize>,
    pub max_headers: Spanned<usize>,
    pub max_first_message: Spanned<usize>,
    pub max_rooms: Spanned<usize>,
    /// `"auto"` (the default): derived from the file-descriptor limit.
    pub max_connections: Spanned<Count>,
    pub max_connections_per_ip: Spanned<Count>,
    pub max_pending_sockets: Spanned<usize>,
    /// `"auto"` (the default): an eighth of the memory limit (cgroup `memory.max`), at most 64 MiB.
    pub max_pending_bytes: Spanned<AutoSize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutsSection {
    pub connect: Spanned<HumanDuration>,
    pub request_head: Spanned<HumanDuration>,
    pub upstream_response: Spanned<HumanDuration>,
    pub websocket_idle: OptionalDuration,
    pub websocket_close: Spanned<HumanDuration>,
    pub first_message: Spanned<HumanDuration>,
    pub request_body: OptionalDuration,
    pub request_body_idle: OptionalDuration,
    pub client_write: Spanned<HumanDuration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamSection {
    pub max_idle_per_backend: usize,
    pub idle_timeout: HumanDuration,
    pub max_connections_per_backend: Spanned<Count>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlacementSection {
    pub algorithm: Algorithm,
    pub vnodes: Spanned<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    pub format: LogFormat,
    pub level: Spanned<String>,
    pub access: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownSection {
    pub grace: HumanDuration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoomsSection {
    pub linger: HumanDuration,
    pub linger_unused: HumanDuration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthSection {
    pub path: Option<Spanned<String>>,
    pub interval: Spanned<HumanDuration>,
    pub timeout: Spanned<HumanDuration>,
    pub rise: Spanned<u32>,
    pub fall: Spanned<u32>,
    pub cooldown: Spanned<HumanDuration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DrainSection {
    pub deadline: HumanDuration,
    pub spread: HumanDuration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSection {
    pub listen: Spanned<SocketAddr>,
    pub token: Option<Spanned<String>>,
    /// A file holding the token (a mounted Kubernetes Secret); read when the config is loaded.
    pub token_file: Option<Spanned<String>>,
    pub max_connections: Spanned<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReloadSection {
    pub watch: bool,
    pub interval: Spanned<HumanDuration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DirectorySection {
    pub backend: Spanned<String>,
    pub url: Option<Spanned<String>>,
    pub prefix: String,
    pub refresh: Spanned<HumanDuration>,
    pub timeout: Spanned<HumanDuration>,
    pub replica_id: Option<Spanned<String>>,
    /// A file holding the Redis password (a mounted Kubernetes Secret); read when the config is
    /// loaded.
    pub password_file: Option<Spanned<String>>,
}

/// `[handoff]`: every key has a default, so an empty section turns hand-off on.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HandoffSection {
    pub path: Spanned<String>,
    pub timeout: Spanned<HumanDuration>,
    pub max_bytes: Spanned<ByteSize>,
    pub token: Option<Spanned<String>>,
    /// A file holding the token (a mounted Kubernetes Secret); read when the config is loaded.
    pub token_file: Option<Spanned<String>>,
    pub concurrency: Spanned<usize>,
    /// `"restart"` or `"stay"`.
    pub on_failure: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    #[serde(default = "defaults::tls_listen")]
    pub listen: OneOrMany<SocketAddr>,
    #[serde(default)]
    pub certs: Vec<Spanned<CertEntry>>,
}

/// One `[[tls.certs]]` entry: a PEM chain and its key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertEntry {
    pub cert: Spanned<String>,
    pub key: Spanned<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendEntry {
    pub id: Spanned<String>,
    pub addr: Spanned<String>,
}

/// `[[discovery]]`: a backend set read from DNS SRV records.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoverySection {
    pub srv: Spanned<String>,
    #[serde(default = "defaults::discovery_interval")]
    pub interval: Spanned<HumanDuration>,
    /// `ip:port`; unset: the system resolver.
    pub resolver: Option<Spanned<String>>,
    #[serde(default = "defaults::discovery_timeout")]
    pub timeout: Spanned<HumanDuration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteEntry {
    pub prefix: Spanned<String>,
    pub mode: RouteMode,
    #[serde(default)]
    pub keys: Vec<Spanned<ParsedSource>>,
    pub on_missing: Option<Spanned<OnMissing>>,
    pub affinity_cookie: Option<Spanned<String>>,
}

/// What a route does with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteMode {
    /// Hash the room key to its owner.
    Room,
    /// Cross-room calls: round-robin over the shared pool.
    Shared,
}

/// What a room route does when no key source has a key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnMissing {
    /// 400 Bad Request.
    #[default]
    Reject,
    /// Send it to the shared pool.
    Shared,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}
