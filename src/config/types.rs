//! The validated configuration: [`Config`] and the types of its sections, as the rest of the
//! crate reads them once the file has been parsed and checked.

use std::net::SocketAddr;
use std::time::Duration;

use ipnet::IpNet;

use super::{LogFormat, OnMissing, RouteMode, Tls};
use crate::placement::Algorithm;
use crate::room_key::KeySource;

/// A validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where it came from: a file path or `<embedded>`.
    pub origin: String,
    pub server: Server,
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub upstream: Upstream,
    pub placement: PlacementConfig,
    /// The file's `[[backends]]`, then (in a running snapshot) the backends discovered in DNS.
    pub backends: Vec<BackendSpec>,
    /// `[[discovery]]`: backend sets read from DNS SRV records.
    pub discovery: Vec<Discovery>,
    pub routes: Vec<Route>,
    pub log: Log,
    pub shutdown: Shutdown,
    pub rooms: Rooms,
    pub health: Health,
    pub drain: Drain,
    pub admin: Admin,
    pub reload: Reload,
    pub directory: Directory,
    /// TLS termination; `None`: plain HTTP only.
    pub tls: Option<Tls>,
    /// Room state hand-off (`[handoff]`); `None`: off, rooms move without their state.
    pub handoff: Option<Handoff>,
    /// The file it was read from, for reloads; `None` for the embedded default.
    pub path: Option<std::path::PathBuf>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rooms {
    /// How long a room keeps its owner after its last connection closes (reconnect window).
    pub linger: Duration,
    /// How long a room that never had a WebSocket is remembered once its last request ends: one
    /// client sending random keys must not fill the directory for a whole `linger` per key.
    pub linger_unused: Duration,
}

/// Where the live-room directory lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Directory {
    /// In this process only (one replica).
    Memory,
    /// Shared by every replica through Redis.
    Redis {
        url: String,
        prefix: String,
        refresh: Duration,
        timeout: Duration,
        /// `None`: this process's default, `{host name}-{pid}` (see `directory::default_replica`).
        replica_id: Option<String>,
        /// From `password_file`; given to Redis in place of a password in the URL.
        password: Option<String>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    /// Active checks: GET this path on every backend. `None`: passive checks only.
    pub path: Option<String>,
    pub interval: Duration,
    pub timeout: Duration,
    /// Consecutive successes that bring a down backend back.
    pub rise: u32,
    /// Consecutive failures that take a backend down.
    pub fall: u32,
    /// With passive checks only: how long a backend taken down by failed requests stays out.
    pub cooldown: Duration,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Drain {
    /// Default deadline of a drain, and of the drain of a backend removed from the config.
    pub deadline: Duration,
    /// Room closes at a drain deadline are spread over this long.
    pub spread: Duration,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Admin {
    pub listen: SocketAddr,
    pub token: Option<String>,
    /// Admin connections served in full; past it a connection may only ask the probes.
    pub max_connections: usize,
}

/// `[handoff]`: how a moving room's state is carried from its old owner to its new one (see
/// `docs/handoff.md`). Present: hand-off is on.
#[derive(Clone, Debug, PartialEq)]
pub struct Handoff {
    /// Prefix of the hand-off endpoints on the backends: `/` and segments, no trailing `/`.
    /// Clients never reach it through roomgate.
    pub path: String,
    /// Per step: the export gets this long, then the import.
    pub timeout: Duration,
    /// Largest state; a larger export is a failure.
    pub max_bytes: usize,
    /// Sent to backends as `Authorization: Bearer`, from `token` or `token_file`.
    pub token: Option<String>,
    /// Rooms moved at once.
    pub concurrency: usize,
    pub on_failure: OnHandoffFailure,
}

/// What a move does when its export or import fails (`[handoff] on_failure`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnHandoffFailure {
    /// The room moves without its state and starts empty on its new owner.
    Restart,
    /// The room stays on its old owner while that owner is up.
    Stay,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Reload {
    /// Reload when the config file changes.
    pub watch: bool,
    pub interval: Duration,
}

#[derive(Clone, Debug)]
pub struct Server {
    pub listen: Vec<SocketAddr>,
    pub trusted_proxies: Vec<IpNet>,
    /// Runtime worker threads; 0 means one per core.
    pub workers: usize,
}

#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest request head (request line and headers) in bytes; larger gets 431.
    pub max_request_head: usize,
    pub max_headers: usize,
    /// Largest first WebSocket message roomgate reads to find the room (`djust:` sources), and
    /// largest client message a djust socket may send (it is read whole before it is relayed).
    pub max_first_message: usize,
    /// Most rooms this replica remembers; past it a new room is placed but not recorded.
    pub max_rooms: usize,
    /// Client connections in all; `None`: derived from the file-descriptor limit at start-up.
    pub max_connections: Option<usize>,
    /// Client connections (or, behind a trusted proxy, requests and sockets) per client address.
    pub max_connections_per_ip: Option<usize>,
    /// djust sockets still waiting for their first message.
    pub max_pending_sockets: usize,
    /// Bytes those sockets may hold in all while their first message arrives; `None`: `"auto"`,
    /// derived from the memory limit ([`crate::limits::memory`]).
    pub max_pending_bytes: Option<usize>,
}

#[derive(Clone, Debug)]
pub struct Timeouts {
    pub connect: Duration,
    pub request_head: Duration,
    pub upstream_response: Duration,
    pub websocket_idle: Option<Duration>,
    pub websocket_close: Duration,
    /// How long a client may take to send its first message when roomgate needs it to find the
    /// room (`djust:` sources).
    pub first_message: Duration,
    /// Longest a client may take to send a whole request body; `None`: no limit.
    pub request_body: Option<Duration>,
    /// Longest pause in a request body; `None`: no limit.
    pub request_body_idle: Option<Duration>,
    /// Longest a write to a client may wait with no byte accepted; past it the connection (and
    /// its backend connection or WebSocket) closes, as the client's doing.
    pub client_write: Duration,
}

#[derive(Clone, Debug)]
pub struct Upstream {
    pub max_idle_per_backend: usize,
    pub idle_timeout: Duration,
    /// Requests in flight plus open WebSockets per backend; `None`: no limit.
    pub max_connections_per_backend: Option<usize>,
}

#[derive(Clone, Debug)]
pub struct PlacementConfig {
    pub algorithm: Algorithm,
    pub vnodes: u32,
}

#[derive(Clone, Debug)]
pub struct Log {
    pub format: LogFormat,
    pub level: String,
    pub access: bool,
}

#[derive(Clone, Debug)]
pub struct Shutdown {
    pub grace: Duration,
}

/// A backend as configured: a stable id (placement keys on it) and where to reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendSpec {
    pub id: String,
    /// As written: `host:port` (discovered: the SRV target and port).
    pub addr_text: String,
    /// Resolved when the config was loaded (discovered: when the SRV name was resolved).
    pub addr: SocketAddr,
    pub source: BackendSource,
}

/// Where a backend came from: a reload replaces the file's, a resolution one SRV name's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BackendSource {
    /// A `[[backends]]` entry.
    #[default]
    File,
    /// A `[[discovery]]` entry: the SRV name it was read from.
    Dns(std::sync::Arc<str>),
}

/// A `[[discovery]]` entry: a backend set read from the SRV records of `srv`, every `interval`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovery {
    /// The SRV name, as written (a trailing dot makes it absolute: no search domains).
    pub srv: String,
    pub interval: Duration,
    /// `None`: the system resolver (`/etc/resolv.conf`).
    pub resolver: Option<SocketAddr>,
    /// Longest wait for one resolution (the SRV query and the targets' addresses).
    pub timeout: Duration,
}

/// A route: the first one whose prefix starts the request path handles the request.
#[derive(Clone, Debug)]
pub struct Route {
    pub prefix: String,
    pub mode: RouteMode,
    pub keys: Vec<KeySource>,
    pub on_missing: OnMissing,
    pub affinity_cookie: Option<String>,
}

impl Route {
    /// The regex of the route's `djust:` source: always the last source when present.
    pub fn djust(&self) -> Option<&regex::Regex> {
        match self.keys.last() {
            Some(KeySource::Djust(re)) => Some(re),
            _ => None,
        }
    }
}
