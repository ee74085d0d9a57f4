//! Shared test helpers: in-process backends that report their id, roomgate on an injected
//! 127.0.0.1:0 listener, and HTTP and WebSocket clients. Everything talks over real loopback
//! sockets; start-up is awaited on signals, never on sleeps.

#![allow(dead_code, clippy::unwrap_used)]

pub mod djust;
pub mod judge;
pub mod pinned;
pub mod raw;
pub mod rawhttp;
pub mod redis_cluster;
pub mod redis_server;
pub mod require;
pub mod rooms;
pub mod tls;

#[allow(unused_imports)]
pub use require::{Tool, require};

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::path::PathBuf;
use std::sync::Arc;

use roomgate::control::Control;
use roomgate::{Config, Listeners, Server};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;
type Body = BoxBody<Bytes, hyper::Error>;

/// Every wait in the tests is bounded by this.
pub const LIMIT: Duration = Duration::from_secs(10);

// === test backend ===

/// An HTTP + WebSocket backend that reports its id.
///
/// HTTP: body and `X-Backend` header carry the id; `/echo-headers` answers with the request
/// headers, one `name: value` per line; `/slow` never answers; `POST /echo` streams the request
/// body back; other paths read the whole body, then answer, as an app does. WebSocket (any path
/// without `refuse`): echoes messages; `id` is answered with `id:<id>`; `close:<code>` makes it
/// close with that code; `headers` is answered with the handshake's headers, one `name: value`
/// per line. Paths with `refuse` get 403. A handshake with `X-Test-Djust: greet` behaves like
/// djust: the backend speaks first with its own `connect` frame; `X-Test-Djust: close:<code>`
/// accepts, then closes with that code (djust's 4429).
///
/// For the judge (`judge::overlaps`): every accepted WebSocket whose handshake has a query
/// `room=X` is recorded in `members`, from its upgrade to the end of its echo loop. `hang` makes
/// new requests and handshakes wait unanswered (a SIGSTOPped process, as far as new work goes)
/// until `release`; open WebSockets keep working.
pub struct TestBackend {
    pub id: String,
    pub addr: SocketAddr,
    task: JoinHandle<()>,
    /// Cancelled by `kill`: every connection, WebSockets included, is dropped.
    killed: tokio_util::sync::CancellationToken,
    /// TCP connections accepted so far.
    pub accepted: Arc<std::sync::atomic::AtomicUsize>,
    /// Room memberships: one per accepted WebSocket with a `room=X` query.
    pub members: Members,
    /// `true` while hung: new requests and handshakes wait.
    hung: Arc<tokio::sync::watch::Sender<bool>>,
    /// WebSocket handshakes waiting in a hang now.
    held: Arc<tokio::sync::watch::Sender<usize>>,
}

/// A WebSocket of a room on a backend, from the completed upgrade to the end of its echo loop.
#[derive(Clone, Debug)]
pub struct Membership {
    pub room: String,
    pub joined: std::time::Instant,
    /// `None` while it is open.
    pub left: Option<std::time::Instant>,
}

pub type Members = Arc<std::sync::Mutex<Vec<Membership>>>;

/// Sets `left` of its membership when dropped, however the socket's task ends.
struct MemberGuard {
    members: Members,
    index: usize,
}

impl Drop for MemberGuard {
    fn drop(&mut self) {
        let mut members = self.members.lock().unwrap_or_else(|p| p.into_inner());
        members[self.index].left = Some(std::time::Instant::now());
    }
}

/// Counts a handshake waiting in a hang while it lives.
struct HeldGuard(Arc<tokio::sync::watch::Sender<usize>>);

impl HeldGuard {
    fn new(held: Arc<tokio::sync::watch::Sender<usize>>) -> HeldGuard {
        held.send_modify(|n| *n += 1);
        HeldGuard(held)
    }
}

impl Drop for HeldGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// What a backend's request handler shares with the test.
#[derive(Clone)]
struct Shared {
    id: String,
    killed: tokio_util::sync::CancellationToken,
    members: Members,
    hung: Arc<tokio::sync::watch::Sender<bool>>,
    held: Arc<tokio::sync::watch::Sender<usize>>,
}

impl TestBackend {
    pub async fn start(id: &str) -> TestBackend {
        Self::start_at(id, "127.0.0.1:0".parse().unwrap()).await
    }

    /// Starts on `addr` (to bring a killed backend back on its port).
    pub async fn start_at(id: &str, addr: SocketAddr) -> TestBackend {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let id_owned = id.to_owned();
        let killed = tokio_util::sync::CancellationToken::new();
        let token = killed.clone();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        let members: Members = Arc::default();
        let hung = Arc::new(tokio::sync::watch::Sender::new(false));
        let held = Arc::new(tokio::sync::watch::Sender::new(0));
        let shared =
            Shared { id: id_owned, killed: token, members: members.clone(), hung: hung.clone(), held: held.clone() };
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let shared = shared.clone();
                let token = shared.killed.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| backend_handle(shared.clone(), req));
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades();
                    tokio::select! {
                        _ = conn => {}
                        () = token.cancelled() => {}
                    }
                });
            }
        });
        TestBackend { id: id.to_owned(), addr, task, killed, accepted, members, hung, held }
    }

    /// Like SIGSTOP as far as new work goes: every new HTTP request and WebSocket handshake
    /// waits, unanswered, until `release`. Open WebSockets keep working.
    pub fn hang(&self) {
        self.hung.send_replace(true);
    }

    /// Ends a hang: the waiting requests and handshakes are answered as usual.
    pub fn release(&self) {
        self.hung.send_replace(false);
    }

    /// Waits (bounded) until at least `n` WebSocket handshakes are waiting in a hang.
    pub async fn wait_held_handshakes(&self, n: usize) {
        let mut rx = self.held.subscribe();
        tokio::time::timeout(LIMIT, rx.wait_for(|held| *held >= n))
            .await
            .unwrap_or_else(|_| panic!("{}: {n} handshakes not held in time", self.id))
            .unwrap();
    }

    /// A copy of the memberships recorded so far.
    pub fn memberships(&self) -> Vec<Membership> {
        self.members.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops accepting; the port is closed (connections get refused).
    pub fn stop(self) {
        self.task.abort();
    }

    /// Like a killed process: the port closes and every open connection drops.
    pub fn kill(self) -> SocketAddr {
        self.task.abort();
        self.killed.cancel();
        self.addr
    }
}

pub async fn backends(n: usize) -> Vec<TestBackend> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(TestBackend::start(&format!("b{i}")).await);
    }
    out
}

fn full(status: StatusCode, id: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut resp = Response::new(Full::new(body.into()).map_err(|never| match never {}).boxed());
    *resp.status_mut() = status;
    resp.headers_mut().insert("x-backend", HeaderValue::from_str(id).unwrap());
    resp
}

/// The value of `room=` in a query, if any.
fn room_of(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|pair| pair.strip_prefix("room=")).map(str::to_owned)
}

async fn backend_handle(shared: Shared, mut req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let Shared { id, killed, members, hung, held } = shared;
    let websocket = req.headers().contains_key(header::SEC_WEBSOCKET_KEY);
    if *hung.borrow() {
        // Counted while it waits, even if the wait is dropped (the client went away).
        let _held = websocket.then(|| HeldGuard::new(held.clone()));
        let mut rx = hung.subscribe();
        let _ = rx.wait_for(|hung| !*hung).await;
    }
    let path = req.uri().path().to_owned();
    if websocket {
        if path.contains("refuse") {
            return Ok(full(StatusCode::FORBIDDEN, &id, "origin refused"));
        }
        let key = req.headers()[header::SEC_WEBSOCKET_KEY].clone();
        let head: String = req.headers().iter().map(|(k, v)| format!("{k}: {}\n", v.to_str().unwrap_or("?"))).collect();
        let djust = req.headers().get("x-test-djust").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let room = room_of(req.uri().query());
        let on_upgrade = hyper::upgrade::on(&mut req);
        let id2 = id.clone();
        tokio::spawn(async move {
            if let Ok(io) = on_upgrade.await {
                // A member of its room from here until this task ends.
                let _member = room.map(|room| {
                    let mut list = members.lock().unwrap_or_else(|p| p.into_inner());
                    list.push(Membership { room, joined: std::time::Instant::now(), left: None });
                    MemberGuard { members: members.clone(), index: list.len() - 1 }
                });
                let config = WebSocketConfig::default().max_message_size(Some(64 << 20));
                let mut ws = WebSocketStream::from_raw_socket(TokioIo::new(io), Role::Server, Some(config)).await;
                match djust.as_deref().and_then(|d| d.strip_prefix("close:")) {
                    Some(code) => {
                        let code: u16 = code.parse().unwrap();
                        let frame = CloseFrame { code: CloseCode::from(code), reason: "too many".into() };
                        let _ = ws.close(Some(frame)).await;
                        while let Some(Ok(_)) = ws.next().await {}
                        return;
                    }
                    None if djust.is_some() => {
                        let hello = format!(r#"{{"type":"connect","session_id":"backend-{id2}"}}"#);
                        let _ = ws.send(Message::text(hello)).await;
                    }
                    None => {}
                }
                tokio::select! {
                    () = echo(ws, id2, head) => {}
                    () = killed.cancelled() => {}
                }
            }
        });
        let mut resp = full(StatusCode::SWITCHING_PROTOCOLS, &id, Bytes::new());
        let h = resp.headers_mut();
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::SEC_WEBSOCKET_ACCEPT, HeaderValue::from_str(&derive_accept_key(key.as_bytes())).unwrap());
        return Ok(resp);
    }
    match path.as_str() {
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(full(StatusCode::OK, &id, id.clone()))
        }
        "/echo-headers" => {
            let text: String =
                req.headers().iter().map(|(k, v)| format!("{k}: {}\n", v.to_str().unwrap_or("?"))).collect();
            Ok(full(StatusCode::OK, &id, text))
        }
        "/echo" => {
            let mut resp = Response::new(req.into_body().boxed());
            resp.headers_mut().insert("x-backend", HeaderValue::from_str(&id).unwrap());
            Ok(resp)
        }
        _ => {
            // Like an app, it reads the whole request before answering.
            let read = req.into_body().collect().await.is_ok();
            let status = if read { StatusCode::OK } else { StatusCode::BAD_REQUEST };
            Ok(full(status, &id, id.clone()))
        }
    }
}

async fn echo<S>(mut ws: WebSocketStream<S>, id: String, head: String)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(Ok(msg)) = ws.next().await {
        let reply = match msg {
            Message::Text(t) if t.as_str() == "id" => Message::text(format!("id:{id}")),
            Message::Text(t) if t.as_str() == "headers" => Message::text(format!("headers:{head}")),
            Message::Text(t) if t.as_str().starts_with("close:") => {
                let code: u16 = t.as_str()[6..].parse().unwrap();
                let frame = CloseFrame { code: CloseCode::from(code), reason: "test close".into() };
                let _ = ws.close(Some(frame)).await;
                // Drain until the client's close reply ends the stream.
                while let Some(Ok(_)) = ws.next().await {}
                return;
            }
            Message::Close(_) => break,
            m @ (Message::Text(_) | Message::Binary(_)) => m,
            _ => continue,
        };
        if ws.send(reply).await.is_err() {
            return;
        }
    }
}

// === roomgate under test ===

/// roomgate running on injected 127.0.0.1:0 listeners (proxy and admin API), its config in a
/// file of its own so that reloads can be tested.
pub struct Proxy {
    pub addr: SocketAddr,
    /// The TLS listener, when the config has `[tls]`.
    pub tls_addr: Option<SocketAddr>,
    pub admin: SocketAddr,
    pub control: Arc<Control>,
    pub config_path: PathBuf,
    _dir: tempfile::TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Proxy {
    pub async fn start(config_text: &str) -> Proxy {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("roomgate.toml");
        std::fs::write(&config_path, config_text).unwrap();
        let config = Config::load(&config_path).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let admin = admin_listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let server = Server::new(config);
        let control = server.control();
        let tls_listener = match control.gateway().snapshot().config.tls {
            Some(_) => Some(TcpListener::bind("127.0.0.1:0").await.unwrap()),
            None => None,
        };
        let tls_addr = tls_listener.as_ref().map(|l| l.local_addr().unwrap());
        let listeners =
            Listeners { http: vec![listener], tls: tls_listener.into_iter().collect(), admin: Some(admin_listener) };
        let task = tokio::spawn(server.serve(listeners, async move {
            let _ = rx.await;
        }));
        Proxy { addr, tls_addr, admin, control, config_path, _dir: dir, shutdown: Some(tx), task }
    }

    /// Replaces the config file (the watcher reloads it).
    pub fn write_config(&self, text: &str) {
        // Write aside and rename, as editors and ConfigMaps do, so the watcher never reads half.
        let tmp = self.config_path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.config_path).unwrap();
    }

    /// Waits (bounded) until the config epoch is at least `epoch`.
    pub async fn wait_epoch(&self, epoch: u64) {
        let mut epochs = self.control.epochs();
        tokio::time::timeout(LIMIT, epochs.wait_for(|e| *e >= epoch))
            .await
            .unwrap_or_else(|_| panic!("config epoch {epoch} not reached"))
            .unwrap();
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{}", self.admin, path)
    }

    /// Signals shutdown and waits for `run` to return.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(LIMIT, &mut self.task).await.unwrap().unwrap().unwrap();
    }

    /// Signals shutdown without waiting for it (`shutdown` still waits for the end).
    pub fn begin_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Whether `run` has returned.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn ws_url(&self, path: &str) -> String {
        format!("ws://{}{}", self.addr, path)
    }
}

/// A config with `backends` (id, addr) and the given routes (TOML text), plus `extra` sections.
pub fn config(backends: &[(&str, SocketAddr)], routes: &str, extra: &str) -> String {
    let mut out = format!("[log]\naccess = false\nlevel = \"warn\"\n{extra}\n");
    for (id, addr) in backends {
        out.push_str(&format!("[[backends]]\nid = \"{id}\"\naddr = \"{addr}\"\n"));
    }
    out.push_str(routes);
    out
}

pub fn backend_list(backends: &[TestBackend]) -> Vec<(&str, SocketAddr)> {
    backends.iter().map(|b| (b.id.as_str(), b.addr)).collect()
}

/// The routes of the issue's example config.
pub const ROUTES: &str = r#"
[[routes]]
prefix = "/room/"
mode = "room"
keys = ["path:^/room/(?P<room>[^/]+)/", "header:X-Room"]
on_missing = "reject"
affinity_cookie = "roomgate_room"

[[routes]]
prefix = "/ws/live/"
mode = "room"
keys = ["query:room", "header:X-Room", "cookie:roomgate_room"]

[[routes]]
prefix = "/api/"
mode = "room"
keys = ["header:X-Room", "cookie:room", "query:room"]
on_missing = "shared"

[[routes]]
prefix = "/h/"
mode = "room"
keys = ["host:^(?P<room>[^.]+)\\.rooms\\.test$"]

[[routes]]
prefix = "/"
mode = "shared"
"#;

// === clients ===

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub fn http_client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A GET with extra headers; returns status, headers and body text.
pub async fn get(client: &HttpClient, url: &str, headers: &[(&str, &str)]) -> (StatusCode, http::HeaderMap, String) {
    let mut b = Request::get(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    send(client, b.body(Full::default()).unwrap()).await
}

pub async fn send(client: &HttpClient, req: Request<Full<Bytes>>) -> (StatusCode, http::HeaderMap, String) {
    let resp = tokio::time::timeout(LIMIT, client.request(req)).await.expect("request timed out").unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = tokio::time::timeout(LIMIT, body.collect()).await.unwrap().unwrap().to_bytes();
    (parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned())
}

/// Opens a WebSocket through roomgate with extra headers.
pub async fn ws_connect(url: &str, headers: &[(&str, &str)]) -> Ws {
    let mut req = url.into_client_request().unwrap();
    for (k, v) in headers {
        req.headers_mut()
            .insert(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
    }
    let config = WebSocketConfig::default().max_message_size(Some(64 << 20));
    let (ws, _) = tokio::time::timeout(LIMIT, tokio_tungstenite::connect_async_with_config(req, Some(config), true))
        .await
        .expect("connect timed out")
        .unwrap();
    ws
}

/// Asks the backend behind `ws` for its id.
pub async fn ws_backend(ws: &mut Ws) -> String {
    ws.send(Message::text("id")).await.unwrap();
    match next(ws).await {
        Message::Text(t) => t.as_str().strip_prefix("id:").unwrap().to_owned(),
        other => panic!("expected id, got {other:?}"),
    }
}

/// GET on the admin API, as JSON.
pub async fn admin_get(proxy: &Proxy, path: &str) -> serde_json::Value {
    let (status, _, body) = get(&http_client(), &proxy.admin_url(path), &[]).await;
    assert_eq!(status, StatusCode::OK, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// POST on the admin API: status and JSON.
pub async fn admin_post(proxy: &Proxy, path: &str, body: &str) -> (StatusCode, serde_json::Value) {
    let req = Request::post(proxy.admin_url(path)).body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    let (status, _, body) = send(&http_client(), req).await;
    (status, serde_json::from_str(&body).unwrap())
}

/// The state of backend `id` in the admin status: (state, live rooms, sockets).
pub async fn backend_state(proxy: &Proxy, id: &str) -> (String, u64, u64) {
    let status = admin_get(proxy, "/admin/status").await;
    let b = status["backends"].as_array().unwrap().iter().find(|b| b["id"] == id).unwrap().clone();
    (b["state"].as_str().unwrap().to_owned(), b["rooms"].as_u64().unwrap(), b["sockets"].as_u64().unwrap())
}

/// The next message, within the time limit.
pub async fn next(ws: &mut Ws) -> Message {
    tokio::time::timeout(LIMIT, ws.next()).await.expect("no message in time").expect("stream ended").unwrap()
}

/// The next text message, past pings and pongs: a room's hand-off sends the old owner a ping on
/// each paused socket, and its pong reaches the client as an unsolicited pong.
pub async fn next_text(ws: &mut Ws) -> String {
    loop {
        match next(ws).await {
            Message::Ping(_) | Message::Pong(_) => continue,
            other => return other.into_text().expect("a text message").to_string(),
        }
    }
}

/// The next message within `limit`; `Err(code)` once the socket closes (None: without a close
/// frame), after the close handshake is completed as a browser does.
pub async fn recv(ws: &mut Ws, limit: Duration) -> Result<Message, Option<u16>> {
    match tokio::time::timeout(limit, ws.next()).await.expect("no message in time") {
        Some(Ok(Message::Close(frame))) => {
            while let Ok(Some(Ok(_))) = tokio::time::timeout(limit, ws.next()).await {}
            Err(frame.map(|f| u16::from(f.code)))
        }
        Some(Ok(msg)) => Ok(msg),
        Some(Err(_)) | None => Err(None),
    }
}

/// Reads until the close frame and completes the close handshake, as a browser does; returns the
/// code.
pub async fn close_code(ws: &mut Ws) -> Option<u16> {
    loop {
        match tokio::time::timeout(LIMIT, ws.next()).await.expect("no close in time") {
            Some(Ok(Message::Close(frame))) => {
                // Polling on sends the close reply and waits for the end of the stream.
                while let Ok(Some(Ok(_))) = tokio::time::timeout(LIMIT, ws.next()).await {}
                return frame.map(|f| u16::from(f.code));
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => panic!("error before close: {e}"),
            None => return None,
        }
    }
}

// === roomgate as a process ===

/// The `roomgate` binary running `config` (one worker), started once it has logged both the
/// address it serves on and its admin API's. Its log keeps being read in a task of its own, so
/// that it never blocks on a full pipe. Returns the process, the proxy's address and the admin
/// API's.
pub async fn spawn_roomgate(config: &std::path::Path) -> (tokio::process::Child, String, String) {
    let (child, addr, admin, _log) = spawn_roomgate_logged(config).await;
    (child, addr, admin)
}

/// [`spawn_roomgate`], with the lines it logs after it listens, as they come.
pub async fn spawn_roomgate_logged(
    config: &std::path::Path,
) -> (tokio::process::Child, String, String, tokio::sync::mpsc::UnboundedReceiver<String>) {
    spawn_roomgate_with_env(config, &[]).await
}

/// [`spawn_roomgate_logged`], with these variables added to its environment.
pub async fn spawn_roomgate_with_env(
    config: &std::path::Path,
    env: &[(&str, &std::ffi::OsStr)],
) -> (tokio::process::Child, String, String, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_roomgate"))
        .args(["run", "--workers", "1", "--config"])
        .arg(config)
        .envs(env.iter().copied())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (addr, admin, rx) = listening(child.stderr.take().unwrap()).await;
    (child, addr, admin, rx)
}

/// Reads roomgate's log (at level info) from `log` until it says where it listens: the proxy's
/// address and the admin API's, then the lines that follow, as they come.
pub async fn listening(
    log: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> (String, String, tokio::sync::mpsc::UnboundedReceiver<String>) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut lines = BufReader::new(log).lines();
    let (addr, admin) = tokio::time::timeout(LIMIT, async {
        let (mut addr, mut admin) = (None, None);
        while let Some(line) = lines.next_line().await.unwrap() {
            let Some(at) = line.split("addr=").nth(1).and_then(|a| a.split_whitespace().next()) else { continue };
            if line.contains("admin API listening") {
                admin = Some(at.to_owned());
            } else if line.contains("listening") {
                addr = Some(at.to_owned());
            }
            if let (Some(a), Some(b)) = (&addr, &admin) {
                return (a.clone(), b.clone());
            }
        }
        panic!("roomgate exited before listening");
    })
    .await
    .expect("roomgate listens");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = tx.send(line);
        }
    });
    (addr, admin, rx)
}

/// The median of some durations.
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// "n, p50, p99, max" of some durations.
pub fn summary(waits: &[Duration]) -> String {
    let mut v = waits.to_vec();
    v.sort();
    if v.is_empty() {
        return "none".into();
    }
    let pct = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    format!("n={} p50 {:?} p99 {:?} max {:?}", v.len(), pct(0.5), pct(0.99), v[v.len() - 1])
}
