//! The request path, as named steps: check the head, pick the route, find the room key, place it,
//! then forward over HTTP or upgrade to a WebSocket tunnel.

mod access;
mod body;
pub mod headers;
mod http;
mod upgrade;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ::http::header::{self, HeaderValue};
use ::http::request::Parts;
use ::http::{Request, Response, StatusCode, Version};
use arc_swap::ArcSwap;
use hyper::body::Incoming;

pub use access::AccessRecord;
pub use body::{RequestBody, ResponseBody};

use self::http::Upstream;
use self::upgrade::TunnelSpec;
use crate::backends::Backend;
use crate::config::{Config, OnMissing, Route, RouteMode};
use crate::error::{BackendError, ClientError, ProxyError, respond};
use crate::relay::{TunnelOptions, Tunnels};
use crate::room_key::{self, RequestView};
use crate::snapshot::Snapshot;

/// Everything the request path shares: the current snapshot, the upstream pool, open tunnels.
pub struct Gateway {
    snapshot: ArcSwap<Snapshot>,
    upstream: Upstream,
    pub tunnels: Arc<Tunnels>,
}

/// Where a request goes.
struct Target {
    backend: Arc<Backend>,
    room: Option<String>,
    /// The affinity cookie to set on the response.
    set_cookie: Option<HeaderValue>,
}

impl Gateway {
    pub fn new(config: Config) -> Arc<Gateway> {
        let upstream = Upstream::new(&config);
        Arc::new(Gateway {
            snapshot: ArcSwap::from_pointee(Snapshot::build(config, 1)),
            upstream,
            tunnels: Arc::new(Tunnels::default()),
        })
    }

    /// The snapshot in force now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    pub fn tunnel_options(&self) -> TunnelOptions {
        let t = &self.snapshot.load().config.timeouts;
        TunnelOptions { idle: t.websocket_idle, close_timeout: t.websocket_close }
    }

    /// Serves one request. Never fails: errors become responses here, and each is logged once.
    pub async fn handle(self: &Arc<Self>, req: Request<Incoming>, client: SocketAddr) -> Response<ResponseBody> {
        let snap = self.snapshot.load_full();
        let mut record = snap.config.log.access.then(|| {
            Box::new(AccessRecord {
                start: Instant::now(),
                client,
                method: req.method().clone(),
                path: req.uri().path().to_owned(),
                route: None,
                room: None,
                backend: None,
                status: 0,
                bytes_in: Arc::new(AtomicU64::new(0)),
                bytes_out: 0,
                error: None,
            })
        });
        match self.proxy(&snap, req, client, &mut record).await {
            Ok(resp) => {
                if let Some(r) = record.as_mut() {
                    r.status = resp.status().as_u16();
                }
                resp.map(|body| body.with_log(record))
            }
            Err(err) => error_response(&err, record, client),
        }
    }

    async fn proxy(
        self: &Arc<Self>,
        snap: &Snapshot,
        req: Request<Incoming>,
        client: SocketAddr,
        record: &mut Option<Box<AccessRecord>>,
    ) -> Result<Response<ResponseBody>, ProxyError> {
        let config = &snap.config;
        check_head(&req, config)?;
        let (route_index, route) = config.route_for(req.uri().path()).ok_or(ClientError::NoRoute)?;
        let target = choose(snap, route, &req)?;
        target.backend.stats.requests.fetch_add(1, Ordering::Relaxed);
        let span = tracing::Span::current();
        span.record("room", target.room.as_deref());
        span.record("backend", &*target.backend.id);
        if let Some(r) = record.as_mut() {
            r.route = Some(route_index);
            r.room.clone_from(&target.room);
            r.backend = Some(target.backend.id.clone());
        }
        let mut req = req;
        let client_upgrade = headers::is_websocket_upgrade(req.headers()).then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        headers::remove_hop_by_hop(&mut parts.headers);
        let trusted = headers::is_trusted(client.ip(), &config.server.trusted_proxies);
        headers::set_forwarded(&mut parts.headers, client.ip(), trusted, "http");

        let mut resp = if let Some(client_upgrade) = client_upgrade {
            self.upgrade(parts, client_upgrade, &target, client, config).await?
        } else {
            let counted = record.as_ref().map(|r| r.bytes_in.clone());
            let req = Request::from_parts(parts, RequestBody::new(body, counted));
            let resp = self.upstream.send(req, &target.backend, config.timeouts.upstream_response).await?;
            resp.map(ResponseBody::upstream)
        };
        if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
            headers::remove_hop_by_hop(resp.headers_mut());
        }
        if let Some(cookie) = target.set_cookie {
            resp.headers_mut().append(header::SET_COOKIE, cookie);
        }
        Ok(resp)
    }

    /// Sends a WebSocket handshake to the target; the tunnel starts on the backend's 101.
    async fn upgrade(
        self: &Arc<Self>,
        mut parts: Parts,
        client_upgrade: hyper::upgrade::OnUpgrade,
        target: &Target,
        client: SocketAddr,
        config: &Config,
    ) -> Result<Response<ResponseBody>, BackendError> {
        headers::set_websocket_upgrade(&mut parts.headers);
        parts.version = Version::HTTP_11;
        if let Some(pq) = parts.uri.path_and_query().cloned() {
            parts.uri = pq.into();
        }
        parts.extensions = Default::default();
        let spec = TunnelSpec { client, room: target.room.clone(), backend: target.backend.clone() };
        let resp = upgrade::forward(
            self,
            Request::from_parts(parts, ()),
            client_upgrade,
            spec,
            config.timeouts.connect,
            config.timeouts.upstream_response,
        )
        .await?;
        Ok(resp.map(ResponseBody::upstream))
    }
}

/// Request heads over the configured limits get 431 (hyper itself cuts heads far over it).
fn check_head(req: &Request<Incoming>, config: &Config) -> Result<(), ClientError> {
    let limits = &config.limits;
    let count = req.headers().len();
    if count > limits.max_headers {
        return Err(ClientError::TooManyHeaders { count, limit: limits.max_headers });
    }
    let size = headers::request_head_size(req.method(), req.uri(), req.headers());
    if size > limits.max_request_head {
        return Err(ClientError::HeadTooLarge { size, limit: limits.max_request_head });
    }
    Ok(())
}

/// Picks the backend: the room's owner on a room route, the shared pool otherwise.
fn choose(snap: &Snapshot, route: &Route, req: &Request<Incoming>) -> Result<Target, ProxyError> {
    let shared = || -> Result<Target, ProxyError> {
        let backend = snap.next_shared().ok_or(BackendError::NoBackends)?.clone();
        Ok(Target { backend, room: None, set_cookie: None })
    };
    if route.mode == RouteMode::Shared {
        return shared();
    }
    let view = RequestView { uri: req.uri(), headers: req.headers() };
    let Some(found) = room_key::extract(&route.keys, &view).map_err(ClientError::BadKey)? else {
        return match route.on_missing {
            OnMissing::Shared => shared(),
            OnMissing::Reject => Err(ClientError::MissingKey {
                prefix: route.prefix.clone(),
                sources: route.keys.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", "),
            }
            .into()),
        };
    };
    let backend = snap.owner(found.key.as_bytes()).ok_or(BackendError::NoBackends)?.clone();
    let set_cookie = route.affinity_cookie.as_deref().and_then(|name| affinity_cookie(req, name, found.key.as_str()));
    Ok(Target { backend, room: Some(found.key.as_str().to_owned()), set_cookie })
}

/// `Set-Cookie` for the affinity cookie, unless the request already carries the same value.
fn affinity_cookie(req: &Request<Incoming>, name: &str, key: &str) -> Option<HeaderValue> {
    let value = room_key::encode_cookie_value(key);
    if room_key::cookie_value(req.headers(), name) == Some(value.as_ref()) {
        return None;
    }
    let cookie = cookie::Cookie::build((name, value.as_ref()))
        .path("/")
        .http_only(true)
        .same_site(cookie::SameSite::Lax)
        .build();
    HeaderValue::try_from(cookie.to_string()).ok()
}

/// The response for an error, with its log line: the access line when that log is on, else a
/// line of its own.
fn error_response(err: &ProxyError, record: Option<Box<AccessRecord>>, client: SocketAddr) -> Response<ResponseBody> {
    let resp = respond(err);
    let status = resp.status().as_u16();
    let record = match record {
        Some(mut r) => {
            r.status = status;
            r.error = Some(err.detail());
            Some(r)
        }
        None => {
            match err {
                ProxyError::Backend(_) => tracing::warn!(%client, status, error = %err.detail(), "request failed"),
                ProxyError::Client(_) => tracing::info!(%client, status, error = %err.detail(), "request refused"),
            }
            None
        }
    };
    resp.map(|bytes| ResponseBody::local(bytes).with_log(record))
}
