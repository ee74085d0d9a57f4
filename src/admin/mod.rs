//! The admin API, on its own listener: status, rooms, drain and undrain, reload, Prometheus
//! metrics, the probes, and the dashboard page. JSON everywhere; errors as `{"error": "..."}`.
//! Who may call it: [`access`]; bodies: [`body`]; connections, caps and timeouts: [`listener`];
//! the page: [`dashboard`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

mod access;
mod body;
mod client;
mod dashboard;
mod listener;

pub use client::{AdminTarget, DrainOptions, drain_command, rebalance_command, undrain_command};
pub use listener::{Options, serve_with};

use self::body::{DrainBody, NoFields, RebalanceBody};
use self::listener::Lane;
use crate::config::parse_duration;
use crate::control::{Control, ControlError, Undrained};
use crate::throttle::Throttle;

const MAX_PAGE: usize = 1000;

/// Serves the admin API until `stop` is cancelled, with the default [`Options`].
pub async fn serve(listener: TcpListener, control: Arc<Control>, stop: CancellationToken) {
    serve_with(listener, control, stop, Options::default()).await;
}

/// Answers one request. The probes come first and need nothing: no token, no particular Host.
/// A probe-lane connection (past `admin.max_connections`) gets only them; anything else 503.
async fn handle(
    control: &Control,
    req: Request<Incoming>,
    lane: Lane,
    peer: SocketAddr,
    body_timeout: Duration,
) -> Response<Full<Bytes>> {
    // Readiness is the process's own: every listener is bound before the server starts (main,
    // tests), so an answer here means the config loaded and the listeners are bound. It never
    // looks at the backends or at Redis: a replica whose backends are all down still owes its
    // clients an answer, and taking it out of service helps no one. When a shutdown begins this
    // listener closes, so both probes fail from then on.
    if req.method() == Method::GET {
        match req.uri().path() {
            "/healthz" => return text(StatusCode::OK, "ok\n"),
            "/readyz" => return text(StatusCode::OK, "ready\n"),
            _ => {}
        }
    }
    if lane == Lane::Probe {
        listener::refused(control, peer, "only the probes are answered past the cap");
        let mut r = json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"error": format!("the admin API is at {}: only /healthz and /readyz are answered; retry", listener::LIMIT)}),
        );
        r.headers_mut().insert(header::RETRY_AFTER, http::HeaderValue::from_static("1"));
        return r;
    }
    // The page and its assets hold no data (everything they show, they fetch with the token),
    // so they are served to anyone: the page asks for the token itself.
    if let Some(page) = dashboard::asset(&req) {
        return page;
    }
    let token = control.gateway().snapshot().config.admin.token.clone();
    if let Err(denied) = access::check(&req, token.as_deref()) {
        // Anyone who reaches the port can cause this: logged at most once a second.
        static LOG: Throttle = Throttle::new(Duration::from_secs(1));
        if let Some(held_back) = LOG.ready() {
            let path = req.uri().path();
            tracing::warn!(%peer, path, status = %denied.status, error = %denied.message, held_back, "admin request refused");
        }
        let mut r = json_response(denied.status, &json!({ "error": denied.message }));
        if denied.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
        }
        return r;
    }
    route(control, req, body_timeout).await
}

async fn route(control: &Control, req: Request<Incoming>, body_timeout: Duration) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let resp = match (&method, segments.as_slice()) {
        (&Method::GET, ["metrics"]) => return metrics(control),
        (&Method::GET, ["admin", "status"]) => Ok(status(control)),
        (&Method::GET, ["admin", "rooms"]) => Ok(rooms(control, req.uri().query())),
        (&Method::GET, ["admin", "rooms", key]) => room(control, key).await,
        (&Method::POST, ["admin", "backends", id, "drain"]) => {
            match body::json::<DrainBody, _>(req, body_timeout).await {
                Ok(body) => drain(control, id, body),
                Err(e) => Err(e),
            }
        }
        (&Method::POST, ["admin", "backends", id, "undrain"]) => {
            match body::json::<NoFields, _>(req, body_timeout).await {
                Ok(NoFields {}) => control
                    .undrain(id)
                    .map(|done| match done {
                        Undrained::Active => json!({"backend": id, "state": "active"}),
                        Undrained::SharedOnly => {
                            json!({"backend": id, "state": "unknown here", "shared_drain": "ended"})
                        }
                    })
                    .map_err(|e| error_for(&e)),
                Err(e) => Err(e),
            }
        }
        (&Method::POST, ["admin", "rebalance"]) => match body::json::<RebalanceBody, _>(req, body_timeout).await {
            Ok(body) => {
                control.rebalance(body.max_moves).map(|queued| json!({"moves": queued})).map_err(|e| error_for(&e))
            }
            Err(e) => Err(e),
        },
        (&Method::POST, ["admin", "reload"]) => match body::json::<NoFields, _>(req, body_timeout).await {
            Ok(NoFields {}) => reload(control).await,
            Err(e) => Err(e),
        },
        _ => Err((StatusCode::NOT_FOUND, format!("no endpoint {method} {path}"))),
    };
    match resp {
        Ok(value) => json_response(StatusCode::OK, &value),
        Err((status, error)) => json_response(status, &json!({ "error": error })),
    }
}

fn metrics(control: &Control) -> Response<Full<Bytes>> {
    let snap = control.gateway().snapshot();
    let g = control.gateway();
    let splits = control.splits();
    let body = g.metrics().render(&snap, g.directory().as_ref(), splits, control.tls().map(|t| &**t));
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    r
}

async fn reload(control: &Control) -> Result<Value, (StatusCode, String)> {
    match control.reload().await {
        Ok(diff) => Ok(json!({
            "ok": true,
            "epoch": control.gateway().snapshot().epoch,
            "added": diff.added,
            "removed": diff.removed,
            "changed": diff.changed,
            "routes_changed": diff.routes_changed,
            "placement_changed": diff.placement_changed,
            "needs_restart": diff.needs_restart,
        })),
        Err(e) => Err(error_for(&e)),
    }
}

fn status(control: &Control) -> Value {
    let snap = control.gateway().snapshot();
    let passive = snap.passive_only();
    let now = Instant::now();
    let backends: Vec<Value> = snap
        .backends
        .iter()
        .chain(snap.retiring.iter())
        .map(|b| {
            let (rooms, sockets) = control.load_of(b);
            let drain = b.drain();
            json!({
                "id": &*b.id,
                "addr": b.addr.to_string(),
                "state": b.state(passive).as_str(),
                "rooms": rooms,
                "sockets": sockets,
                "removed": drain.is_some_and(|d| d.removed),
                "drain_deadline_ms": drain.map(|d| d.deadline.saturating_duration_since(now).as_millis() as u64),
            })
        })
        .collect();
    let (known, live) = control.gateway().directory().counts();
    json!({
        "epoch": snap.epoch,
        "config": snap.config.origin,
        "backends": backends,
        "rooms": {"known": known, "live": live},
        "websockets": control.gateway().tunnels().len(),
        "split_rooms": control.splits(),
        "last_reload": control.last_reload(),
        "handoff": handoff_status(control, &snap.config),
        "directory": control.gateway().directory().status(),
        "discovery": control.discovery().status(&snap.config.discovery),
        "tls": control.tls().map(|t| json!({
            "listen": snap.config.tls.as_ref().map(|c| &c.listen),
            "certs": t.status(),
        })),
    })
}

/// Hand-off: whether it is configured, and the moves queued, running and done since start.
fn handoff_status(control: &Control, config: &crate::Config) -> Value {
    let (queued, running, done) = control.handoff_progress();
    json!({
        "configured": config.handoff.is_some(),
        "queued": queued,
        "running": running,
        "done": done,
    })
}

fn rooms(control: &Control, query: Option<&str>) -> Value {
    let param = |name: &str| {
        query?.split('&').find_map(|p| p.strip_prefix(name)?.strip_prefix('=')).map(|v| decode(v).into_owned())
    };
    let limit = param("limit").and_then(|l| l.parse().ok()).unwrap_or(100).clamp(1, MAX_PAGE);
    let after = param("after");
    let page = control.gateway().directory().list(after.as_deref(), limit);
    let next = (page.len() == limit).then(|| page.last().map(|r| r.key.clone())).flatten();
    json!({ "rooms": page, "next": next })
}

/// A room as this replica knows it, and as the fleet does when the directory is shared
/// (`fleet`: the recorded owner and, per replica, the owner its connections use and how many).
async fn room(control: &Control, key: &str) -> Result<Value, (StatusCode, String)> {
    let key = decode(key);
    let directory = &control.gateway().directory();
    let fleet = directory.fleet_room(&key).await;
    let known_in_fleet = fleet.as_ref().is_some_and(|f| f.owner.is_some());
    match directory.get(&key) {
        Some(info) => {
            let mut v = json!(info);
            if let Some(f) = fleet {
                v["fleet"] = json!(f);
            }
            Ok(v)
        }
        None if known_in_fleet => Ok(json!({ "key": key, "fleet": fleet })),
        None => Err((StatusCode::NOT_FOUND, format!("no live or lingering room {key:?}"))),
    }
}

fn drain(control: &Control, id: &str, body: DrainBody) -> Result<Value, (StatusCode, String)> {
    let deadline = match body.deadline {
        None => None,
        Some(s) => Some(parse_duration(&s).map_err(|e| (StatusCode::BAD_REQUEST, format!("deadline {s:?}: {e}")))?),
    };
    let d = control.drain(id, deadline, body.handoff).map_err(|e| error_for(&e))?;
    Ok(json!({
        "backend": id,
        "state": "draining",
        "deadline_ms": d.deadline.saturating_duration_since(Instant::now()).as_millis() as u64,
    }))
}

fn error_for(e: &ControlError) -> (StatusCode, String) {
    let status = match e {
        ControlError::UnknownBackend(_) => StatusCode::NOT_FOUND,
        ControlError::Removed(_) => StatusCode::CONFLICT,
        ControlError::Config(_) | ControlError::NoFile => StatusCode::BAD_REQUEST,
        ControlError::NoHandoff => StatusCode::CONFLICT,
    };
    (status, e.to_string())
}

fn decode(s: &str) -> std::borrow::Cow<'_, str> {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy()
}

fn json_response(status: StatusCode, value: &Value) -> Response<Full<Bytes>> {
    let mut body = serde_json::to_vec_pretty(value).unwrap_or_default();
    body.push(b'\n');
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    r
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r
}
