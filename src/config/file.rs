//! The config file as written (serde model). Unknown keys are errors; values that can be checked
//! alone (durations, addresses, key sources) are checked while parsing, so their errors carry the
//! line they are on. [`super::Config::from_toml`] checks what needs several values at once.

use std::net::SocketAddr;
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, de};
use toml::Spanned;

use super::duration::{HumanDuration, OptionalDuration};
use crate::placement::Algorithm;
use crate::room_key::KeySource;

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
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    #[serde(default = "default_tls_listen")]
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
    #[serde(default = "discovery_interval")]
    pub interval: Spanned<HumanDuration>,
    /// `ip:port`; unset: the system resolver.
    pub resolver: Option<Spanned<String>>,
    #[serde(default = "discovery_timeout")]
    pub timeout: Spanned<HumanDuration>,
}

fn discovery_interval() -> Spanned<HumanDuration> {
    Spanned::new(0..0, secs(5))
}

fn discovery_timeout() -> Spanned<HumanDuration> {
    Spanned::new(0..0, secs(2))
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

/// A key source, parsed (and its regex compiled) while the file is read.
pub struct ParsedSource(pub KeySource);

/// A trusted proxy: a CIDR block or a single address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrustedNet(pub IpNet);

/// A count limit: a number, `"off"` (no limit) or `"auto"` (derived at start-up, where the key
/// allows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    Off,
    Auto,
    Max(usize),
}

/// `listen = "addr"` or `listen = ["addr", ...]`.
pub struct OneOrMany<T>(pub Vec<T>);

// === defaults ===

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            listen: OneOrMany(vec![SocketAddr::from(([127, 0, 0, 1], 8080))]),
            trusted_proxies: Vec::new(),
            workers: Spanned::new(0..0, 0),
        }
    }
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            max_request_head: Spanned::new(0..0, 64 * 1024),
            max_headers: Spanned::new(0..0, 100),
            max_first_message: Spanned::new(0..0, 64 * 1024),
            max_rooms: Spanned::new(0..0, 200_000),
            max_connections: Spanned::new(0..0, Count::Auto),
            max_connections_per_ip: Spanned::new(0..0, Count::Off),
            max_pending_sockets: Spanned::new(0..0, 10_000),
        }
    }
}

fn default_tls_listen() -> OneOrMany<SocketAddr> {
    OneOrMany(vec![SocketAddr::from(([127, 0, 0, 1], 8443))])
}

fn secs(n: u64) -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(n))
}

impl Default for TimeoutsSection {
    fn default() -> Self {
        TimeoutsSection {
            connect: Spanned::new(0..0, secs(3)),
            request_head: Spanned::new(0..0, secs(10)),
            upstream_response: Spanned::new(0..0, secs(60)),
            // djust's client pings every 30 s, and a background tab's timers may be held back to
            // once a minute: twice that frees dead sockets without ever closing a live one.
            websocket_idle: OptionalDuration(Some(std::time::Duration::from_secs(120))),
            websocket_close: Spanned::new(0..0, secs(5)),
            first_message: Spanned::new(0..0, secs(10)),
            request_body: OptionalDuration(Some(std::time::Duration::from_secs(300))),
            request_body_idle: OptionalDuration(Some(std::time::Duration::from_secs(30))),
        }
    }
}

impl Default for UpstreamSection {
    fn default() -> Self {
        UpstreamSection {
            max_idle_per_backend: 128,
            idle_timeout: secs(60),
            max_connections_per_backend: Spanned::new(0..0, Count::Off),
        }
    }
}

impl Default for PlacementSection {
    fn default() -> Self {
        PlacementSection { algorithm: Algorithm::Rendezvous, vnodes: Spanned::new(0..0, 160) }
    }
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection { format: LogFormat::Text, level: Spanned::new(0..0, "info".to_owned()), access: true }
    }
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

impl Default for DirectorySection {
    fn default() -> Self {
        DirectorySection {
            backend: Spanned::new(0..0, "memory".to_owned()),
            url: None,
            prefix: "roomgate:".to_owned(),
            refresh: Spanned::new(0..0, secs(2)),
            timeout: Spanned::new(0..0, HumanDuration(std::time::Duration::from_millis(250))),
            replica_id: None,
            password_file: None,
        }
    }
}

impl Default for RoomsSection {
    fn default() -> Self {
        RoomsSection { linger: secs(60), linger_unused: secs(5) }
    }
}

impl Default for HealthSection {
    fn default() -> Self {
        HealthSection {
            path: None,
            interval: Spanned::new(0..0, secs(2)),
            timeout: Spanned::new(0..0, secs(1)),
            rise: Spanned::new(0..0, 2),
            fall: Spanned::new(0..0, 3),
            cooldown: Spanned::new(0..0, secs(10)),
        }
    }
}

impl Default for DrainSection {
    fn default() -> Self {
        DrainSection { deadline: secs(300), spread: secs(10) }
    }
}

impl Default for AdminSection {
    fn default() -> Self {
        AdminSection {
            listen: Spanned::new(0..0, SocketAddr::from(([127, 0, 0, 1], 9901))),
            token: None,
            token_file: None,
            max_connections: Spanned::new(0..0, 64),
        }
    }
}

impl Default for ReloadSection {
    fn default() -> Self {
        ReloadSection { watch: true, interval: Spanned::new(0..0, secs(1)) }
    }
}

impl Default for ShutdownSection {
    fn default() -> Self {
        ShutdownSection { grace: secs(30) }
    }
}

// === deserializers ===

impl<'de> Deserialize<'de> for ParsedSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        KeySource::from_str(&text).map(ParsedSource).map_err(de::Error::custom)
    }
}

impl FromStr for TrustedNet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Ok(net) = s.parse::<IpNet>() {
            return Ok(TrustedNet(net.trunc()));
        }
        s.parse::<std::net::IpAddr>()
            .map(|ip| TrustedNet(IpNet::from(ip)))
            .map_err(|_| format!("invalid trusted proxy {s:?}: expected a CIDR such as \"10.0.0.0/8\" or an address"))
    }
}

impl<'de> Deserialize<'de> for TrustedNet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::Integer(n) => usize::try_from(n)
                .ok()
                .filter(|n| *n > 0)
                .map(Count::Max)
                .ok_or_else(|| de::Error::custom(format!("{n}: expected a number of at least 1, or \"off\""))),
            toml::Value::String(s) if s == "off" => Ok(Count::Off),
            toml::Value::String(s) if s == "auto" => Ok(Count::Auto),
            other => Err(de::Error::custom(format!("{other}: expected a number, \"off\" or \"auto\""))),
        }
    }
}

impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            value @ toml::Value::Array(_) => Vec::<T>::deserialize(value).map(OneOrMany),
            value => T::deserialize(value).map(|t| OneOrMany(vec![t])),
        }
        .map_err(de::Error::custom)
    }
}
