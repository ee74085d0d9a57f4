//! `RoomBackend`: a live-state app in miniature for the hand-off tests. Each room's state is its
//! message log, kept in memory, served over WebSockets and moved by the export and import calls
//! of docs/handoff.md; every hand-off call is recorded.

#![forbid(unsafe_code)]

mod handoff;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use percent_encoding::percent_decode_str;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_util::sync::CancellationToken;

use super::{Body, LIMIT, MemberGuard, Members, Membership, full};

/// The default `[handoff] path`, where this backend serves export and import.
pub const HANDOFF_PATH: &str = "/.roomgate/rooms";

/// A text that makes its member's socket read nothing more until an export has been answered
/// here, or [`STALL_BOUND`] has passed: an app busy with one message while the next already
/// waits, unread, in its socket.
pub const STALL: &str = "stall";
/// The longest a [`STALL`] lasts.
pub const STALL_BOUND: Duration = Duration::from_secs(2);

/// A backend whose rooms have state: a message log per room.
///
/// WebSocket at any path with the query `room=X` (X decoded as a form value, `+` is a space, as
/// roomgate's `query:` key source reads it): a member of room X. On join the member first gets
/// `hello:{id}:{log length}`. Each text it sends is appended to the room's log and sent to every
/// member of the room on this backend as `{index}:{text}`; the text `log` is not appended but
/// answered with `log:{the log as a JSON array}`; after [`STALL`] (appended as any text) the
/// socket reads nothing more for a while. Members are recorded in `members` for the judge.
///
/// HTTP: `GET /count?room=X` answers the log's length; `POST {HANDOFF_PATH}/{key}/export` answers
/// 200 with the log as JSON, or 204 for a room it never saw; `PUT {HANDOFF_PATH}/{key}` replaces
/// the log with the body and answers 204 (400 for a body it cannot read); any other request gets
/// 200 with the id. Every answer has `x-backend: {id}`.
///
/// State bodies are `["m0", "m1"]`, or `{"log": ["m0", "m1"], "pad": "xxx"}` when
/// `set_state_padding(n)` asks for `n` bytes of padding (to measure large states); import takes
/// both shapes and ignores the padding. A room's state stays until the backend is killed.
pub struct RoomBackend {
    pub id: String,
    pub addr: SocketAddr,
    pub members: Members,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

/// How the hand-off endpoints answer, read at each call's arrival.
#[derive(Clone, Debug, Default)]
pub struct HandoffBehaviour {
    /// `Some`: calls without `Authorization: Bearer {token}` get 401.
    pub token: Option<String>,
    /// How long an export waits before it reads the state and answers.
    pub export_delay: Duration,
    /// How long an import waits before it stores the state and answers.
    pub import_delay: Duration,
    /// `Some`: exports answer this status, without a body, instead.
    pub export_status: Option<StatusCode>,
    /// `Some`: imports answer this status instead, and store nothing.
    pub import_status: Option<StatusCode>,
    /// Bytes of padding in exported states (0: a plain JSON array).
    pub state_padding: usize,
    /// Bytes of the body a successful import answers with (0: a bodiless 204), to see that
    /// roomgate does not read a huge answer.
    pub import_answer_len: usize,
}

/// One request under `HANDOFF_PATH`, as it arrived (recorded before the token check).
#[derive(Clone, Debug)]
pub struct HandoffCall {
    pub method: Method,
    /// The path as sent, still percent-encoded.
    pub path: String,
    /// The key, percent-decoded once (`/export` taken off a POST's path first).
    pub key: String,
    pub room: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub move_id: Option<String>,
    pub authorization: Option<String>,
    pub content_type: Option<String>,
    pub body_len: usize,
    pub at: Instant,
}

#[derive(Default)]
struct Room {
    log: Vec<String>,
    /// Each member's outbox; dropped ones are pruned on the next broadcast.
    members: Vec<mpsc::UnboundedSender<String>>,
}

struct Shared {
    id: String,
    rooms: Mutex<HashMap<String, Room>>,
    behaviour: Mutex<HandoffBehaviour>,
    calls: watch::Sender<Vec<HandoffCall>>,
    members: Members,
    killed: CancellationToken,
    hung: watch::Sender<bool>,
    /// Requests (of any kind) waiting in a hang now.
    held: watch::Sender<usize>,
    /// Exports answered with a state so far (bumped once the state is read).
    exports: watch::Sender<u64>,
    /// HTTP connections open now (an upgraded one counts until its upgrade).
    http_conns: watch::Sender<usize>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RoomBackend {
    pub async fn start(id: &str) -> RoomBackend {
        Self::start_at(id, "127.0.0.1:0".parse().unwrap()).await
    }

    /// Starts on `addr` (to bring a killed backend back on its port, with no state).
    pub async fn start_at(id: &str, addr: SocketAddr) -> RoomBackend {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let members: Members = Arc::default();
        let shared = Arc::new(Shared {
            id: id.to_owned(),
            rooms: Mutex::default(),
            behaviour: Mutex::default(),
            calls: watch::Sender::new(Vec::new()),
            members: members.clone(),
            killed: CancellationToken::new(),
            hung: watch::Sender::new(false),
            held: watch::Sender::new(0),
            exports: watch::Sender::new(0),
            http_conns: watch::Sender::new(0),
        });
        let accepting = shared.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let shared = accepting.clone();
                tokio::spawn(async move {
                    let counted = shared.clone();
                    counted.http_conns.send_modify(|n| *n += 1);
                    let _open = Held(&counted.http_conns);
                    let killed = shared.killed.clone();
                    let svc = service_fn(move |req| handle(shared.clone(), req));
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades();
                    tokio::select! {
                        _ = conn => {}
                        () = killed.cancelled() => {}
                    }
                });
            }
        });
        RoomBackend { id: id.to_owned(), addr, members, shared, task }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn ws_url(&self, path: &str) -> String {
        format!("ws://{}{}", self.addr, path)
    }

    pub fn set_token(&self, token: Option<String>) {
        lock(&self.shared.behaviour).token = token;
    }

    pub fn set_export_delay(&self, delay: Duration) {
        lock(&self.shared.behaviour).export_delay = delay;
    }

    pub fn set_import_delay(&self, delay: Duration) {
        lock(&self.shared.behaviour).import_delay = delay;
    }

    pub fn set_export_status(&self, status: Option<StatusCode>) {
        lock(&self.shared.behaviour).export_status = status;
    }

    pub fn set_import_status(&self, status: Option<StatusCode>) {
        lock(&self.shared.behaviour).import_status = status;
    }

    pub fn set_import_answer_len(&self, bytes: usize) {
        lock(&self.shared.behaviour).import_answer_len = bytes;
    }

    pub fn set_state_padding(&self, bytes: usize) {
        lock(&self.shared.behaviour).state_padding = bytes;
    }

    /// The hand-off calls received so far, in arrival order.
    pub fn calls(&self) -> Vec<HandoffCall> {
        self.shared.calls.borrow().clone()
    }

    /// Waits (bounded) until at least `n` hand-off calls have arrived; returns them.
    pub async fn wait_calls(&self, n: usize) -> Vec<HandoffCall> {
        let mut rx = self.shared.calls.subscribe();
        let calls = tokio::time::timeout(LIMIT, rx.wait_for(|calls| calls.len() >= n))
            .await
            .unwrap_or_else(|_| panic!("{}: {n} hand-off calls not received in time", self.id));
        calls.unwrap().clone()
    }

    /// Room `room`'s log, if this backend knows the room.
    pub fn log(&self, room: &str) -> Option<Vec<String>> {
        lock(&self.shared.rooms).get(room).map(|r| r.log.clone())
    }

    /// Replaces room `room`'s log, as an import does (nothing is sent to its members).
    pub fn set_log(&self, room: &str, log: Vec<String>) {
        lock(&self.shared.rooms).entry(room.to_owned()).or_default().log = log;
    }

    /// A copy of the memberships recorded so far.
    pub fn memberships(&self) -> Vec<Membership> {
        lock(&self.members).clone()
    }

    /// Like SIGSTOP as far as new work goes: every new request (hand-off calls and WebSocket
    /// handshakes included) waits unanswered until `release`. Open WebSockets keep working.
    pub fn hang(&self) {
        self.shared.hung.send_replace(true);
    }

    pub fn release(&self) {
        self.shared.hung.send_replace(false);
    }

    /// Waits (bounded) until at least `n` requests are waiting in a hang.
    pub async fn wait_held(&self, n: usize) {
        let mut rx = self.shared.held.subscribe();
        tokio::time::timeout(LIMIT, rx.wait_for(|held| *held >= n))
            .await
            .unwrap_or_else(|_| panic!("{}: {n} requests not held in time", self.id))
            .unwrap();
    }

    /// Waits (at most `limit`) until no HTTP connection is open (WebSockets do not count):
    /// whether it came to that.
    pub async fn wait_no_http_conns(&self, limit: Duration) -> bool {
        let mut conns = self.shared.http_conns.subscribe();
        tokio::time::timeout(limit, conns.wait_for(|n| *n == 0)).await.is_ok()
    }

    /// HTTP connections open now.
    pub fn http_conns(&self) -> usize {
        *self.shared.http_conns.borrow()
    }

    /// Like a killed process: the port closes, every connection drops, the state is lost.
    pub fn kill(self) -> SocketAddr {
        self.task.abort();
        self.shared.killed.cancel();
        self.addr
    }
}

/// Form-decodes a query value (`+` is a space), as roomgate's `query:` key source does.
fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    let raw = query?.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))?;
    Some(percent_decode_str(&raw.replace('+', " ")).decode_utf8_lossy().into_owned())
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    if *shared.hung.borrow() {
        shared.held.send_modify(|n| *n += 1);
        let _held = Held(&shared.held);
        let _ = shared.hung.subscribe().wait_for(|hung| !*hung).await;
    }
    let id = &shared.id;
    if req.headers().contains_key(header::SEC_WEBSOCKET_KEY) {
        return Ok(upgrade(shared.clone(), req));
    }
    let path = req.uri().path();
    if path.strip_prefix(HANDOFF_PATH).is_some_and(|rest| rest.starts_with('/')) {
        return Ok(handoff::handoff(&shared, req).await);
    }
    if path == "/count" {
        let room = query_value(req.uri().query(), "room").unwrap_or_default();
        let len = lock(&shared.rooms).get(&room).map_or(0, |r| r.log.len());
        return Ok(full(StatusCode::OK, id, len.to_string()));
    }
    let read = req.into_body().collect().await.is_ok();
    let status = if read { StatusCode::OK } else { StatusCode::BAD_REQUEST };
    Ok(full(status, id, id.clone()))
}

/// Counts one request out of the hang when dropped, however its wait ends.
struct Held<'a>(&'a watch::Sender<usize>);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

fn upgrade(shared: Arc<Shared>, mut req: Request<Incoming>) -> Response<Body> {
    let Some(room) = query_value(req.uri().query(), "room") else {
        return full(StatusCode::BAD_REQUEST, &shared.id, "no room");
    };
    let key = req.headers()[header::SEC_WEBSOCKET_KEY].clone();
    let on_upgrade = hyper::upgrade::on(&mut req);
    let mut resp = full(StatusCode::SWITCHING_PROTOCOLS, &shared.id, Bytes::new());
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    let accept = derive_accept_key(key.as_bytes());
    h.insert(header::SEC_WEBSOCKET_ACCEPT, HeaderValue::from_str(&accept).unwrap_or(HeaderValue::from_static("")));
    tokio::spawn(async move {
        let Ok(io) = on_upgrade.await else { return };
        // A member of its room from here until this task ends.
        let _member = {
            let mut list = lock(&shared.members);
            list.push(Membership { room: room.clone(), joined: Instant::now(), left: None });
            MemberGuard { members: shared.members.clone(), index: list.len() - 1 }
        };
        let config = WebSocketConfig::default().max_message_size(Some(64 << 20));
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(io), Role::Server, Some(config)).await;
        let killed = shared.killed.clone();
        tokio::select! {
            () = member(&shared, ws, &room) => {}
            () = killed.cancelled() => {}
        }
    });
    resp
}

/// One member's socket: its outbox goes out in order; what it says goes to the room.
async fn member<S>(shared: &Shared, mut ws: WebSocketStream<S>, room: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (tx, mut rx) = mpsc::unbounded_channel();
    {
        let mut rooms = lock(&shared.rooms);
        let r = rooms.entry(room.to_owned()).or_default();
        let _ = tx.send(format!("hello:{}:{}", shared.id, r.log.len()));
        r.members.push(tx.clone());
    }
    loop {
        tokio::select! {
            out = rx.recv() => {
                let Some(text) = out else { return };
                if ws.send(Message::text(text)).await.is_err() {
                    return;
                }
            }
            msg = ws.next() => match msg {
                Some(Ok(Message::Text(text))) => {
                    said(shared, room, text.as_str(), &tx);
                    if text.as_str() == STALL && stall(shared, &mut ws, &mut rx).await.is_err() {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            }
        }
    }
}

/// The socket's outbox goes out (its members see the [`STALL`]), then nothing is read until an
/// export has been answered or [`STALL_BOUND`] has passed.
async fn stall<S>(
    shared: &Shared,
    ws: &mut WebSocketStream<S>,
    rx: &mut mpsc::UnboundedReceiver<String>,
) -> Result<(), ()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Ok(text) = rx.try_recv() {
        ws.send(Message::text(text)).await.map_err(|_| ())?;
    }
    let mut exports = shared.exports.subscribe();
    exports.mark_unchanged();
    let _ = tokio::time::timeout(STALL_BOUND, exports.changed()).await;
    Ok(())
}

/// Appends `text` to the room's log and sends it to every member, under one lock so that all
/// see the same order; `log` is answered to `me` alone.
fn said(shared: &Shared, room: &str, text: &str, me: &mpsc::UnboundedSender<String>) {
    let mut rooms = lock(&shared.rooms);
    let r = rooms.entry(room.to_owned()).or_default();
    if text == "log" {
        let _ = me.send(format!("log:{}", serde_json::to_string(&r.log).unwrap_or_default()));
        return;
    }
    let line = format!("{}:{text}", r.log.len());
    r.log.push(text.to_owned());
    r.members.retain(|m| m.send(line.clone()).is_ok());
}
