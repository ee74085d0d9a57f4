//! The request path, as named steps: check the head, pick the route, find the room key, find the
//! room's owner (directory first, placement for new rooms), then forward over HTTP or upgrade to a
//! WebSocket tunnel.

mod access;
mod body;
mod checks;
mod djust;
mod forward;
pub(crate) mod h1;
pub mod headers;
mod http;
mod moving;
mod owner;
mod reserved;
mod upgrade;
mod upload;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use ::http::header::{self, HeaderValue};
use ::http::request::Parts;
use ::http::{Request, Response, StatusCode, Version};
use hyper::body::Incoming;

pub use access::AccessRecord;
pub use body::ResponseBody;
pub use moving::{MoveGuard, Moving};
pub use upload::RequestBody;

use self::checks::{check_head, route};
use self::http::Upstream;
use crate::backends::Backend;
use crate::config::{Config, OnMissing, Route, RouteMode};
use crate::directory::{Presence, RoomDirectory, Use};
use crate::error::{BackendError, ClientError, ProxyError, respond};
use crate::fields::{Fields, Head};
use crate::handshake::{self, Kind};
use crate::limits::{self, Admission, Holds};
use crate::metrics::{Metrics, RequestLabels};
use crate::relay::{TunnelOptions, Tunnels};
use crate::room_key::{self, ExtractError, RequestView};
use crate::snapshot::{Current, Snapshot};

/// Everything the request path shares: the current snapshot, the room directory, the upstream
/// pool, open tunnels and metrics.
pub struct Gateway {
    snapshot: Arc<Current>,
    upstream: Upstream,
    directory: Arc<dyn RoomDirectory>,
    tunnels: Arc<Tunnels>,
    metrics: Metrics,
    /// Metric label for a request that reached no route or no backend.
    none: Arc<str>,
    /// djust sockets waiting for their first message (`limits.max_pending_sockets`).
    waiting_sockets: std::sync::atomic::AtomicUsize,
    /// Bytes their first messages hold meanwhile (`limits.max_pending_bytes`).
    pending_bytes: std::sync::atomic::AtomicUsize,
    /// Client connections open, in all and per client (`limits.max_connections*`).
    admission: Arc<Admission>,
    /// Rooms handed off now: their joins wait.
    moving: Arc<Moving>,
}

/// The client connection a request came on.
#[derive(Clone, Copy, Debug)]
pub struct Conn {
    pub client: SocketAddr,
    pub scheme: Scheme,
}

/// How the client reached roomgate: told to backends in `X-Forwarded-Proto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    /// Through a TLS listener (`https://` and `wss://`).
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// What the steps before sending decided.
enum Prepared {
    /// To this backend, holding a slot on it (and the forwarded address's ticket).
    Send { target: Target, holds: Holds },
    /// A djust socket: its room is in its first message.
    Djust { regex: regex::Regex, on_missing: OnMissing, forwarded: Option<Box<limits::AddrTicket>> },
}

/// Where a request goes.
struct Target {
    backend: Arc<Backend>,
    room: Option<String>,
    /// The affinity cookie to set on the response.
    set_cookie: Option<HeaderValue>,
    /// A WebSocket on a route with a `djust:` source: its page watch's regex. Every socket there
    /// is watched, whichever source placed it, so that no mount of another room's page reaches
    /// this backend.
    watch: Option<regex::Regex>,
}

impl Gateway {
    /// A gateway that reads the snapshot in force from `snapshot`. `metrics` comes from the
    /// caller, which has handed some of its counters to `directory`.
    pub fn new(snapshot: Arc<Current>, directory: Arc<dyn RoomDirectory>, metrics: Metrics) -> Arc<Gateway> {
        let upstream = Upstream::new(&snapshot.load().config);
        Arc::new(Gateway {
            snapshot,
            upstream,
            directory,
            tunnels: Arc::new(Tunnels::default()),
            metrics,
            none: Arc::from("none"),
            waiting_sockets: std::sync::atomic::AtomicUsize::new(0),
            pending_bytes: std::sync::atomic::AtomicUsize::new(0),
            admission: Admission::new(),
            moving: Arc::new(Moving::default()),
        })
    }

    /// The snapshot in force now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load()
    }

    /// The live-room directory.
    pub fn directory(&self) -> &Arc<dyn RoomDirectory> {
        &self.directory
    }

    /// The open WebSocket tunnels.
    pub fn tunnels(&self) -> &Arc<Tunnels> {
        &self.tunnels
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Client connections open, in all and per client.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// Rooms handed off now.
    pub fn moving(&self) -> &Arc<Moving> {
        &self.moving
    }

    /// Closes the idle upstream connections past `upstream.idle_timeout` (or closed by their
    /// backend); returns how many.
    pub fn sweep_idle_upstream(&self) -> usize {
        self.upstream.idle.sweep()
    }

    /// Settings of a new tunnel whose handshake negotiated the RSV bits `rsv`.
    pub fn tunnel_options(&self, rsv: u8) -> TunnelOptions {
        TunnelOptions { close_timeout: self.snapshot.peek().config.timeouts.websocket_close, rsv }
    }

    /// Serves one request. Never fails: errors become responses here, and each is logged once.
    pub async fn handle(self: &Arc<Self>, req: Request<Incoming>, conn: Conn) -> Response<ResponseBody> {
        let client = conn.client;
        let snap = self.snapshot.load();
        let mut record = access_record(&snap.config, client, req.method(), req.uri().path());
        let mut route_label = self.none.clone();
        let mut backend_label = self.none.clone();
        let resp = match self.proxy(&snap, req, conn, &mut record, &mut route_label, &mut backend_label).await {
            Ok(resp) => {
                if let Some(r) = record.as_mut() {
                    r.status = resp.status().as_u16();
                }
                let (parts, body) = resp.into_parts();
                Response::from_parts(parts, body.with_log(record))
            }
            Err(err) => error_response(&err, record, client),
        };
        let labels = RequestLabels { route: route_label, status: resp.status().as_u16(), backend: backend_label };
        self.metrics.request(&labels);
        resp
    }

    /// hyper's path: HTTP/2 requests. A WebSocket handshake is HTTP/1.1, on roomgate's codec
    /// ([`h1`]); one over HTTP/2 (RFC 8441) is not served.
    async fn proxy(
        self: &Arc<Self>,
        snap: &Snapshot,
        req: Request<Incoming>,
        conn: Conn,
        record: &mut Option<Box<AccessRecord>>,
        route_label: &mut Arc<str>,
        backend_label: &mut Arc<str>,
    ) -> Result<Response<ResponseBody>, ProxyError> {
        let config = &snap.config;
        let kind = handshake::classify(req.method(), req.version(), req.headers()).map_err(ClientError::from)?;
        if kind == Kind::WebSocket {
            return Err(ClientError::BadHandshake("a WebSocket handshake must be HTTP/1.1").into());
        }
        let (target, holds) =
            match self.prepare(snap, &Head::from(&req), kind, conn, record, route_label, backend_label).await? {
                Prepared::Send { target, holds } => (target, holds),
                Prepared::Djust { .. } => return Err(ClientError::NoRoute.into()),
            };
        let (mut parts, body) = req.into_parts();
        prepare_forward(&mut parts, conn, config);
        let started = Instant::now();
        let result = self.forward(parts, body, &target, holds, record, config).await?;
        self.observe_backend(snap, &target.backend, result.as_ref().map(|_| ()), started);
        let mut resp = result?;
        headers::remove_hop_by_hop(resp.headers_mut());
        if let Some(cookie) = target.set_cookie {
            resp.headers_mut().append(header::SET_COOKIE, cookie);
        }
        Ok(resp)
    }

    /// The steps every request takes before anything is sent, on every protocol: the head's
    /// checks, the route, the forwarded-address limit, the backend (the room's owner or the
    /// shared pool) and a connection slot on it. `kind`: what the head's one reading decided.
    #[allow(clippy::too_many_arguments)]
    async fn prepare<F: Fields + Sync + ?Sized>(
        &self,
        snap: &Snapshot,
        req: &Head<'_, F>,
        kind: Kind,
        conn: Conn,
        record: &mut Option<Box<AccessRecord>>,
        route_label: &mut Arc<str>,
        backend_label: &mut Arc<str>,
    ) -> Result<Prepared, ProxyError> {
        let client = conn.client;
        let config = &snap.config;
        check_head(req, config)?;
        let websocket = kind == Kind::WebSocket;
        let forwarded = (self.admission.admit_forwarded(client.ip(), req.fields, config))
            .map_err(|e| limits::refused(&self.metrics, e, &client))?;
        let (route_index, route) = route(config, req.uri.path())?;
        *route_label = snap.route_labels[route_index].clone();
        let secure = is_secure(req, conn, config);
        let Some(target) = self.choose(snap, route, req, secure, websocket).await? else {
            let regex = route.djust().cloned().ok_or(ClientError::NoRoute)?;
            return Ok(Prepared::Djust { regex, on_missing: route.on_missing, forwarded });
        };
        *backend_label = target.backend.id.clone();
        let slot = (target.backend.claim(config.upstream.max_connections_per_backend))
            .map_err(|e| limits::refused(&self.metrics, e, &target.backend.id))?;
        note_target(record, route_index, &target);
        Ok(Prepared::Send { target, holds: Holds { conn: None, addr: forwarded, backend: Some(slot) } })
    }

    /// Counts a connection of the target's room, if it has one.
    fn presence(&self, target: &Target, kind: Use) -> Option<Presence> {
        let room = target.room.as_deref()?;
        Some(Presence::new(self.directory.clone(), room, target.backend.id.clone(), kind))
    }

    /// Picks the backend: the room's owner on a room route, the shared pool otherwise. `None`: a
    /// WebSocket whose room is in its first message (a `djust:` source), not known yet.
    async fn choose<F: Fields + Sync + ?Sized>(
        &self,
        snap: &Snapshot,
        route: &Route,
        req: &Head<'_, F>,
        secure: bool,
        websocket: bool,
    ) -> Result<Option<Target>, ProxyError> {
        let shared = || -> Result<Option<Target>, ProxyError> {
            let backend = snap.next_shared().ok_or(BackendError::NoBackends)?.clone();
            Ok(Some(Target { backend, room: None, set_cookie: None, watch: None }))
        };
        if route.mode == RouteMode::Shared {
            return shared();
        }
        let view = RequestView { uri: req.uri, headers: req.fields };
        let found = room_key::extract(&route.keys, &view).map_err(|e| match e {
            ExtractError::Bad(e) => ClientError::BadKey(e),
            ambiguous @ ExtractError::Ambiguous { .. } => ClientError::Ambiguous(ambiguous.to_string()),
        })?;
        let Some(found) = found else {
            if route.djust().is_some() && websocket {
                return Ok(None);
            }
            return match route.on_missing {
                OnMissing::Shared => shared(),
                OnMissing::Reject => Err(ClientError::MissingKey {
                    prefix: route.prefix.clone(),
                    sources: route.keys.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", "),
                }
                .into()),
            };
        };
        let key = found.key.as_str();
        let backend = self.owner(snap, key, websocket).await?;
        let set_cookie = route.affinity_cookie.as_deref().and_then(|name| affinity_cookie(req, name, key, secure));
        let watch = route.djust().filter(|_| websocket).cloned();
        Ok(Some(Target { backend, room: Some(key.to_owned()), set_cookie, watch }))
    }
}

/// The request head as the backend gets it: hop-by-hop headers out, forwarding headers set,
/// and an HTTP/2 request turned into what an HTTP/1.1 backend expects.
/// Names the request's room and backend in its tracing span and its access-log record.
fn note_target(record: &mut Option<Box<AccessRecord>>, route_index: usize, target: &Target) {
    let span = tracing::Span::current();
    span.record("room", target.room.as_deref());
    span.record("backend", &*target.backend.id);
    if let Some(r) = record.as_mut() {
        r.route = Some(route_index);
        r.room.clone_from(&target.room);
        r.backend = Some(target.backend.id.clone());
    }
}

fn prepare_forward(parts: &mut Parts, conn: Conn, config: &Config) {
    headers::remove_hop_by_hop(&mut parts.headers);
    if parts.version == Version::HTTP_2 {
        headers::from_http2(&mut parts.headers, &parts.uri);
    }
    let trusted = crate::forwarded::is_trusted(conn.client.ip(), &config.server.trusted_proxies);
    headers::set_forwarded(&mut parts.headers, conn.client.ip(), trusted, conn.scheme.as_str());
}

/// Whether the client reached us over TLS: on a TLS listener, or through a trusted proxy that
/// says so in `X-Forwarded-Proto`.
fn is_secure<F: Fields + ?Sized>(req: &Head<'_, F>, conn: Conn, config: &Config) -> bool {
    conn.scheme == Scheme::Https
        || (req.fields.first("x-forwarded-proto").is_some_and(|p| p.eq_ignore_ascii_case(b"https"))
            && crate::forwarded::is_trusted(conn.client.ip(), &config.server.trusted_proxies))
}

/// `Set-Cookie` for the affinity cookie, unless the request already carries the same value.
fn affinity_cookie<F: Fields + ?Sized>(req: &Head<'_, F>, name: &str, key: &str, secure: bool) -> Option<HeaderValue> {
    let value = room_key::encode_cookie_value(key);
    if room_key::cookie_value(req.fields, name) == Some(value.as_ref()) {
        return None;
    }
    let cookie = cookie::Cookie::build((name, value.as_ref()))
        .path("/")
        .http_only(true)
        .same_site(cookie::SameSite::Lax)
        .secure(secure)
        .build();
    HeaderValue::try_from(cookie.to_string()).ok()
}

/// The access-log record of a request, when that log is on.
fn access_record(
    config: &Config,
    client: SocketAddr,
    method: &::http::Method,
    path: &str,
) -> Option<Box<AccessRecord>> {
    config.log.access.then(|| {
        Box::new(AccessRecord {
            start: Instant::now(),
            client,
            method: method.clone(),
            path: path.to_owned(),
            route: None,
            room: None,
            backend: None,
            status: 0,
            bytes_in: Arc::new(AtomicU64::new(0)),
            bytes_out: 0,
            error: None,
        })
    })
}

/// The response for an error, with its log line: the access line when that log is on, else a
/// line of its own.
fn error_response(err: &ProxyError, record: Option<Box<AccessRecord>>, client: SocketAddr) -> Response<ResponseBody> {
    let resp = respond(err);
    let record = log_error(err, record, resp.status(), client);
    resp.map(|bytes| ResponseBody::local(bytes).with_log(record))
}

/// Logs a request answered with `err`: in its access record (returned, to be written when the
/// response ends) when that log is on, else in a line of its own now.
fn log_error(
    err: &ProxyError,
    record: Option<Box<AccessRecord>>,
    status: StatusCode,
    client: SocketAddr,
) -> Option<Box<AccessRecord>> {
    let status = status.as_u16();
    match record {
        Some(mut r) => {
            r.status = status;
            r.error = Some(err.detail());
            Some(r)
        }
        None => {
            match err {
                ProxyError::Backend(_) => tracing::warn!(%client, status, error = %err.detail(), "request failed"),
                ProxyError::Client(_) | ProxyError::Limit(_) => {
                    tracing::info!(%client, status, error = %err.detail(), "request refused")
                }
            }
            None
        }
    }
}
