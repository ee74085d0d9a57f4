//! The `backend` subcommand: one test backend process (so that the soak can SIGKILL and SIGSTOP
//! it). A live-state app in miniature, ported from the tests' `RoomBackend`: each room's state is
//! its message log, broadcast to its members and moved by the export and import calls of
//! docs/handoff.md. Every join, leave, export and import is written to stdout as one line, with
//! the time, for the judge (`fleet.rs` reads them).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::clock::now_us;

/// Where roomgate's `[handoff]` calls arrive (its default path).
const HANDOFF_PATH: &str = "/.roomgate/rooms/";

struct Room {
    /// This copy of the room's state: a new one on first join and on each import.
    generation: String,
    log: Vec<String>,
    /// Each member's connection id and outbox.
    members: Vec<(u64, mpsc::UnboundedSender<String>)>,
    /// Exported by a hand-off: this copy is stale, and dropped with its last member.
    exported: bool,
}

struct Shared {
    id: String,
    incarnation: u64,
    generations: AtomicU64,
    rooms: Mutex<HashMap<String, Room>>,
    events: mpsc::UnboundedSender<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn new_room(&self) -> Room {
        let n = self.generations.fetch_add(1, Ordering::Relaxed);
        Room {
            generation: format!("{}.{}.{n}", self.id, self.incarnation),
            log: Vec::new(),
            members: Vec::new(),
            exported: false,
        }
    }

    fn event(&self, line: String) {
        let _ = self.events.send(line);
    }
}

/// A short digest of a log, to compare an export with its import.
fn digest(log: &[String]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for entry in log {
        for b in entry.bytes().chain([0u8]) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Serves on `listen` until killed; `ready ADDR` is the first line on stdout.
pub async fn run(id: String, listen: SocketAddr) -> Result<(), String> {
    let listener = bind(listen).await?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let (events, mut rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(line) = rx.recv().await {
            let mut buf = line;
            buf.push('\n');
            while let Ok(more) = rx.try_recv() {
                buf.push_str(&more);
                buf.push('\n');
            }
            if out.write_all(buf.as_bytes()).await.is_err() || out.flush().await.is_err() {
                return;
            }
        }
    });
    let shared =
        Arc::new(Shared { id, incarnation: now_us(), generations: AtomicU64::new(0), rooms: Mutex::default(), events });
    shared.event(format!("ready {addr}"));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors or the like: back off a little rather than spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(shared.clone(), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades()
                .await;
        });
        if writer.is_finished() {
            return Err("stdout closed".into());
        }
    }
}

/// Binds `addr`, retrying for a while: a restarted backend takes its predecessor's port, which
/// may still be held for a moment by the process being killed.
async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    let mut last = String::new();
    for _ in 0..100 {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("bind {addr}: {last}"))
}

type Body = Full<Bytes>;

fn full(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r
}

/// A query parameter, as is (the soak's room keys and ids need no decoding).
fn query_value<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    if req.headers().contains_key(header::SEC_WEBSOCKET_KEY) {
        return Ok(upgrade(shared, req));
    }
    let path = req.uri().path().to_owned();
    if path.starts_with(HANDOFF_PATH) {
        return Ok(handoff(&shared, req).await);
    }
    match path.as_str() {
        "/healthz" => Ok(full(StatusCode::OK, "ok")),
        "/api/count" => {
            let room = query_value(req.uri().query(), "room").unwrap_or_default();
            let len = lock(&shared.rooms).get(room).map_or(0, |r| r.log.len());
            Ok(full(StatusCode::OK, len.to_string()))
        }
        _ => {
            let ok = req.into_body().collect().await.is_ok();
            let status = if ok { StatusCode::OK } else { StatusCode::BAD_REQUEST };
            Ok(full(status, shared.id.clone()))
        }
    }
}

fn header_str<'a>(req: &'a Request<Incoming>, name: &str) -> &'a str {
    req.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("-")
}

/// `POST {path}/{key}/export` and `PUT {path}/{key}`; the key is taken from `Roomgate-Room`.
async fn handoff(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let room = header_str(&req, "roomgate-room").to_owned();
    let move_id = header_str(&req, "roomgate-move").to_owned();
    if req.method() == Method::POST && req.uri().path().ends_with("/export") {
        let mut rooms = lock(&shared.rooms);
        let Some(r) = rooms.get_mut(&room) else { return full(StatusCode::NO_CONTENT, "") };
        r.exported = true;
        let body = serde_json::to_string(&r.log).unwrap_or_default();
        shared.event(format!(
            "export {} {room} {move_id} {} {} {:x}",
            now_us(),
            r.generation,
            r.log.len(),
            digest(&r.log)
        ));
        let mut resp = full(StatusCode::OK, body);
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        return resp;
    }
    if req.method() == Method::PUT {
        let Ok(body) = req.into_body().collect().await else { return full(StatusCode::BAD_REQUEST, "body") };
        let Ok(log) = serde_json::from_slice::<Vec<String>>(&body.to_bytes()) else {
            return full(StatusCode::BAD_REQUEST, "not a log");
        };
        let mut rooms = lock(&shared.rooms);
        let fresh = shared.new_room();
        let r = rooms.entry(room.clone()).or_insert_with(|| shared.new_room());
        r.generation = fresh.generation;
        r.exported = false;
        r.log = log;
        shared.event(format!(
            "import {} {room} {move_id} {} {} {:x} {}",
            now_us(),
            r.generation,
            r.log.len(),
            digest(&r.log),
            r.members.len()
        ));
        return full(StatusCode::NO_CONTENT, "");
    }
    full(StatusCode::NOT_FOUND, "")
}

fn upgrade(shared: Arc<Shared>, mut req: Request<Incoming>) -> Response<Body> {
    let query = req.uri().query();
    let Some(room) = query_value(query, "room").map(str::to_owned) else {
        return full(StatusCode::BAD_REQUEST, "no room");
    };
    let conn: u64 = query_value(query, "c").and_then(|c| c.parse().ok()).unwrap_or(0);
    let accept = derive_accept_key(req.headers()[header::SEC_WEBSOCKET_KEY].as_bytes());
    let on_upgrade = hyper::upgrade::on(&mut req);
    let mut resp = full(StatusCode::SWITCHING_PROTOCOLS, Bytes::new());
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(v) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
    }
    tokio::spawn(async move {
        let Ok(io) = on_upgrade.await else { return };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(io), Role::Server, None).await;
        member(&shared, ws, &room, conn).await;
    });
    resp
}

/// A member of a room from its join to its leave, both recorded under the rooms' lock.
struct Membership<'a> {
    shared: &'a Shared,
    room: &'a str,
    conn: u64,
    left: bool,
}

impl Membership<'_> {
    fn leave(&mut self) {
        if std::mem::replace(&mut self.left, true) {
            return;
        }
        let mut rooms = lock(&self.shared.rooms);
        if let Some(r) = rooms.get_mut(self.room) {
            r.members.retain(|(c, _)| *c != self.conn);
            if r.exported && r.members.is_empty() {
                rooms.remove(self.room);
            }
        }
        self.shared.event(format!("leave {} {} {}", now_us(), self.room, self.conn));
    }
}

impl Drop for Membership<'_> {
    fn drop(&mut self) {
        self.leave();
    }
}

async fn member<S>(shared: &Shared, mut ws: WebSocketStream<S>, room: &str, conn: u64)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut membership = {
        let mut rooms = lock(&shared.rooms);
        let r = rooms.entry(room.to_owned()).or_insert_with(|| shared.new_room());
        if r.exported {
            shared.event(format!("stale {} {room} {} join {conn}", now_us(), r.generation));
        }
        let _ = tx.send(format!("hello:{}:{}:{}", shared.id, r.generation, r.log.len()));
        r.members.push((conn, tx.clone()));
        shared.event(format!("join {} {room} {conn}", now_us()));
        Membership { shared, room, conn, left: false }
    };
    loop {
        tokio::select! {
            out = rx.recv() => {
                let Some(text) = out else { return };
                if ws.send(Message::text(text)).await.is_err() {
                    return;
                }
            }
            msg = ws.next() => match msg {
                Some(Ok(Message::Text(text))) => said(shared, room, conn, text.as_str()),
                Some(Ok(Message::Close(_))) => {
                    // Left as soon as the close arrives; the reply is still flushed (bounded).
                    membership.leave();
                    let _ = tokio::time::timeout(Duration::from_secs(2), async {
                        while let Some(Ok(_)) = ws.next().await {}
                    })
                    .await;
                    return;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            }
        }
    }
}

/// Appends `text` to the room's log and sends it to every member, under one lock so that all
/// see the same order.
fn said(shared: &Shared, room: &str, conn: u64, text: &str) {
    let mut rooms = lock(&shared.rooms);
    let Some(r) = rooms.get_mut(room) else { return };
    if !r.members.iter().any(|(c, _)| *c == conn) {
        return; // already left (its close was read); nothing it says counts
    }
    if r.exported {
        shared.event(format!("stale {} {room} {} message {conn}", now_us(), r.generation));
    }
    let line = format!("{}:{text}", r.log.len());
    r.log.push(text.to_owned());
    r.members.retain(|(_, m)| m.send(line.clone()).is_ok());
}
