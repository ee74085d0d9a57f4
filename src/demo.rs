//! The built-in demo backends of `roomgate demo`: small HTTP + WebSocket servers that keep each
//! room's counter in memory, as a live-state app does, so a browser shows which backend serves a
//! room and that all its tabs share one counter. They implement hand-off (`docs/handoff.md`) at
//! the default path, so a drain with hand-off keeps a room's counter.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::room_key;

/// Where the demo backends serve hand-off: `[handoff] path`'s default.
const HANDOFF_PATH: &str = "/.roomgate/rooms";

/// Rooms the lobby page links to.
const ROOMS: [&str; 6] = ["red", "green", "blue", "42", "chess", "poker"];

/// One demo backend: its id and its rooms.
pub struct DemoBackend {
    id: String,
    rooms: Mutex<HashMap<String, Room>>,
}

struct Room {
    count: u64,
    members: u64,
    updates: broadcast::Sender<String>,
}

impl DemoBackend {
    pub fn new(id: &str) -> Arc<Self> {
        Arc::new(DemoBackend { id: id.to_owned(), rooms: Mutex::new(HashMap::new()) })
    }

    /// Serves connections from `listener` until the task is dropped.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let me = self.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let me = me.clone();
                    async move { Ok::<_, Infallible>(me.handle(req).await) }
                });
                let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service).with_upgrades();
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "demo connection ended");
                }
            });
        }
    }

    async fn handle(self: &Arc<Self>, mut req: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path().to_owned();
        if let Some(rest) = path.strip_prefix(HANDOFF_PATH) {
            return self.handoff(req, rest).await;
        }
        if path.starts_with("/ws/live/") {
            return self.upgrade(&mut req);
        }
        if let Some(room) = path.strip_prefix("/room/").and_then(|r| r.strip_suffix('/')) {
            return html(self.room_page(room));
        }
        html(self.lobby_page())
    }

    /// The hand-off endpoints: `POST /{key}/export` answers the room's counter (204 when this
    /// backend never had the room), `PUT /{key}` sets it.
    async fn handoff(&self, req: Request<Incoming>, rest: &str) -> Response<Full<Bytes>> {
        let method = req.method().clone();
        let (key, export) = match rest.strip_suffix("/export") {
            Some(key) => (key, true),
            None => (rest, false),
        };
        let Some(key) = key.strip_prefix('/').map(|k| percent_encoding::percent_decode_str(k).decode_utf8_lossy())
        else {
            return text(StatusCode::NOT_FOUND, "no such endpoint");
        };
        match (method, export) {
            (http::Method::POST, true) => match crate::lock::lock(&self.rooms).get(&*key) {
                Some(r) => text_owned(StatusCode::OK, r.count.to_string()),
                None => text(StatusCode::NO_CONTENT, ""),
            },
            (http::Method::PUT, false) => {
                let body = http_body_util::Limited::new(req.into_body(), 64);
                let Ok(body) = http_body_util::BodyExt::collect(body).await else {
                    return text(StatusCode::BAD_REQUEST, "unreadable state");
                };
                let Some(count) = std::str::from_utf8(&body.to_bytes()).ok().and_then(|s| s.trim().parse().ok()) else {
                    return text(StatusCode::BAD_REQUEST, "the state is a count");
                };
                let mut rooms = crate::lock::lock(&self.rooms);
                let r = rooms.entry(key.into_owned()).or_insert_with(Room::new);
                r.count = count;
                let _ = r.updates.send(self.state(r));
                text(StatusCode::NO_CONTENT, "")
            }
            _ => text(StatusCode::METHOD_NOT_ALLOWED, "POST .../export or PUT"),
        }
    }

    fn lobby_page(&self) -> String {
        let links: String = ROOMS.iter().map(|r| format!("<li><a href=\"/room/{r}/\">room {r}</a></li>")).collect();
        format!(
            "<!doctype html><meta charset=utf-8><title>roomgate demo</title>\
             <h1>roomgate demo</h1><p>This lobby is on a <em>shared</em> route: it was served by \
             <b>{id}</b>; reload and another backend answers.</p><p>Each room below is pinned to one \
             backend. Open a room in two tabs: both show the same backend and the same counter.</p>\
             <ul>{links}</ul>",
            id = self.id
        )
    }

    fn room_page(&self, room: &str) -> String {
        let room = html_escape(room);
        let room_js = format!("{room:?}");
        format!(
            "<!doctype html><meta charset=utf-8><title>room {room}</title>\
             <h1>Room {room}</h1><p>Served by <b id=backend>{id}</b>. Live socket: <b id=socket>connecting</b></p>\
             <p>Counter: <b id=count>?</b> &middot; members here: <b id=members>?</b></p>\
             <button id=inc>+1</button> <a href=\"/\">lobby</a>\
             <script>\
             const room = {room_js};\
             const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';\
             let ws;\
             function connect() {{\
               ws = new WebSocket(proto + '//' + location.host + '/ws/live/?room=' + encodeURIComponent(room));\
               ws.onmessage = e => {{ const s = JSON.parse(e.data); \
                 document.getElementById('socket').textContent = 'on ' + s.backend; \
                 document.getElementById('count').textContent = s.count; \
                 document.getElementById('members').textContent = s.members; }};\
               ws.onclose = e => {{ document.getElementById('socket').textContent = 'closed (' + e.code + '), reconnecting'; \
                 setTimeout(connect, 500 + Math.random() * 500); }};\
             }}\
             connect();\
             document.getElementById('inc').onclick = () => ws.send('inc');\
             </script>",
            id = self.id,
        )
    }

    fn upgrade(self: &Arc<Self>, req: &mut Request<Incoming>) -> Response<Full<Bytes>> {
        let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
            return text(StatusCode::BAD_REQUEST, "expected a WebSocket handshake");
        };
        let room = req
            .uri()
            .query()
            .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("room=")))
            .or_else(|| room_key::cookie_value(req.headers(), "roomgate_room"))
            .unwrap_or("none")
            .to_owned();
        let on_upgrade = hyper::upgrade::on(req);
        let me = self.clone();
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(io) => {
                    let ws = WebSocketStream::from_raw_socket(TokioIo::new(io), Role::Server, None).await;
                    me.member(ws, room).await;
                }
                Err(e) => tracing::debug!(error = %e, "demo upgrade failed"),
            }
        });
        let mut resp = Response::new(Full::default());
        *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let h = resp.headers_mut();
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        if let Ok(accept) = HeaderValue::try_from(derive_accept_key(key.as_bytes())) {
            h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
        }
        resp
    }

    /// One socket in a room: sends the room's state on every change; "inc" bumps the counter.
    async fn member<S>(&self, ws: WebSocketStream<S>, room: String)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let mut updates = self.join(&room, 1);
        let (mut sink, mut stream) = ws.split();
        loop {
            tokio::select! {
                msg = stream.next() => match msg {
                    Some(Ok(Message::Text(t))) if t.as_str() == "inc" => self.bump(&room),
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                    Some(Ok(_)) => {}
                },
                update = updates.recv() => match update {
                    Ok(state) => if sink.send(Message::text(state)).await.is_err() { break },
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => break,
                },
            }
        }
        // Completes the close handshake (or starts one, if the client just went away).
        let _ = sink.close().await;
        self.join(&room, -1);
    }

    fn join(&self, room: &str, delta: i64) -> broadcast::Receiver<String> {
        let mut rooms = crate::lock::lock(&self.rooms);
        let r = rooms.entry(room.to_owned()).or_insert_with(Room::new);
        r.members = r.members.saturating_add_signed(delta);
        let rx = r.updates.subscribe();
        let _ = r.updates.send(self.state(r));
        rx
    }

    fn bump(&self, room: &str) {
        let mut rooms = crate::lock::lock(&self.rooms);
        if let Some(r) = rooms.get_mut(room) {
            r.count += 1;
            let _ = r.updates.send(self.state(r));
        }
    }

    fn state(&self, r: &Room) -> String {
        format!("{{\"backend\":{:?},\"count\":{},\"members\":{}}}", self.id, r.count, r.members)
    }
}

impl Room {
    fn new() -> Room {
        Room { count: 0, members: 0, updates: broadcast::channel(64).0 }
    }
}

fn text_owned(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp
}

fn html(body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    resp
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *resp.status_mut() = status;
    resp
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
