//! Clients never reach the hand-off endpoints: every spelling of `[handoff] path` (its default
//! when the section is absent) gets roomgate's 404 on every listener, HTTP/1.1, HTTP/2 and TLS,
//! WebSocket handshakes and djust sockets included, and the backend, which would answer 200,
//! sees none of them; the paths beside it still reach the backend; a reload moves the guard.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::raw::handshake;
use common::tls::*;
use common::*;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::version::TLS13;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

const SHARED: &str = "[[routes]]\nprefix = \"/\"\nmode = \"shared\"\n";

/// Spellings of `/.roomgate/rooms` that a backend's framework decodes into it, or under it.
const SPELLINGS: &[&str] = &[
    "/.roomgate/rooms",
    "/.roomgate/rooms/x/export",
    "/.roomgate/rooms/a%2Fb",
    "/%2Eroomgate/rooms/x",
    "/%2eroomgate%2Frooms/x",
    "/.ROOMGATE/rooms/x",
    "//.roomgate/rooms/x",
    "/a/../.roomgate/rooms/x",
    "/./.roomgate/rooms",
    "/.roomgate/rooms?x=1",
    "/.roomgate/rooms;p/x",
    "/.roomgate/rooms%3Bp/x",
    "/.roomgate\\rooms\\x",
    "/%252Eroomgate/rooms/x",
    "/.roomgate/rooms/%2E%2E/x",
    "http://rooms.test/.roomgate/rooms/x",
];

/// A backend that answers 200 to any request (101 to a WebSocket handshake) and records each
/// request's method and target.
struct Recorder {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    async fn start() -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let log = log.clone();
                let svc = service_fn(move |req| answer(log.clone(), req));
                let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
                tokio::spawn(conn.with_upgrades());
            }
        });
        Recorder { addr, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

async fn answer(
    log: Arc<Mutex<Vec<String>>>,
    mut req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    log.lock().unwrap().push(format!("{} {}", req.method(), req.uri()));
    let mut resp = Response::new(Full::new(Bytes::from(format!("backend saw {}", req.uri()))));
    if let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY) {
        let accept = derive_accept_key(key.as_bytes());
        let upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move { drop(upgrade.await) });
        *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let h = resp.headers_mut();
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::SEC_WEBSOCKET_ACCEPT, HeaderValue::from_str(&accept).unwrap());
    }
    Ok(resp)
}

/// Sends `method target` with a 5-byte body on `stream`, as written; returns the status and body.
async fn ask<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, method: &str, target: &str) -> (u16, String) {
    let req = format!("{method} {target} HTTP/1.1\r\nHost: rooms.test\r\nContent-Length: 5\r\n\r\nstate");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        let n = tokio::time::timeout(LIMIT, stream.read(&mut b)).await.expect("no answer in time").unwrap();
        assert_eq!(n, 1, "{target}: closed in the head: {}", String::from_utf8_lossy(&head));
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let length = head.lines().find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ")?.parse().ok());
    let mut body = vec![0u8; length.unwrap_or_else(|| panic!("{target}: no Content-Length in {head}"))];
    tokio::time::timeout(LIMIT, stream.read_exact(&mut body)).await.unwrap().unwrap();
    (head[9..12].parse().unwrap(), String::from_utf8(body).unwrap())
}

async fn ask_plain(addr: SocketAddr, method: &str, target: &str) -> (u16, String) {
    ask(TcpStream::connect(addr).await.unwrap(), method, target).await
}

#[tokio::test]
async fn every_spelling_gets_404_and_never_reaches_the_backend() {
    let backend = Recorder::start().await;
    let proxy = Proxy::start(&config(&[("b1", backend.addr)], SHARED, "")).await;
    for target in SPELLINGS {
        for method in ["GET", "POST", "PUT"] {
            let (status, body) = ask_plain(proxy.addr, method, target).await;
            assert_eq!((status, body.as_str()), (404, "404 Not Found: not found\n"), "{method} {target}");
        }
    }
    assert_eq!(backend.seen(), Vec::<String>::new(), "the backend saw none of them");
    // The paths beside it are the app's.
    for target in ["/lobby", "/.roomgate/roomsX", "/x/.roomgate/rooms", "/.roomgate/room/1"] {
        let (status, body) = ask_plain(proxy.addr, "GET", target).await;
        assert_eq!((status, body), (200, format!("backend saw {target}")), "{target}");
    }
    assert_eq!(backend.seen().len(), 4);
    proxy.shutdown().await;
}

#[tokio::test]
async fn websocket_handshakes_to_the_path_get_404() {
    let backend = Recorder::start().await;
    let proxy = Proxy::start(&config(&[("b1", backend.addr)], SHARED, "")).await;
    for target in ["/.roomgate/rooms/x", "/%2Eroomgate/rooms/x", "/a/../.roomgate/rooms"] {
        let (_, head) = handshake(proxy.addr, target, &[]).await;
        assert!(head.starts_with("HTTP/1.1 404 "), "{target}: {head}");
    }
    assert_eq!(backend.seen(), Vec::<String>::new());
    let (_, head) = handshake(proxy.addr, "/live/", &[]).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "a socket elsewhere is relayed: {head}");
    assert_eq!(backend.seen(), ["GET /live/"]);
    proxy.shutdown().await;
}

/// A configured path replaces the default, also under a `djust:` route, whose sockets roomgate
/// answers itself.
#[tokio::test]
async fn djust_sockets_and_a_configured_path() {
    let backend = Recorder::start().await;
    let routes =
        format!("[[routes]]\nprefix = \"/ws/\"\nmode = \"room\"\nkeys = [\"djust:^/room/(?P<room>[^/]+)/\"]\n{SHARED}");
    let extra = "[handoff]\npath = \"/ws/Rooms\"\n";
    let proxy = Proxy::start(&config(&[("b1", backend.addr)], &routes, extra)).await;
    for target in ["/ws/Rooms/x", "/ws/rooms/x/export", "/ws/%52ooms", "/ws/live/../rooms/x"] {
        let (_, head) = handshake(proxy.addr, target, &[]).await;
        assert!(head.starts_with("HTTP/1.1 404 "), "{target}: {head}");
        assert_eq!(ask_plain(proxy.addr, "POST", target).await.0, 404, "{target}");
    }
    let (_, head) = handshake(proxy.addr, "/ws/live/", &[]).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "a djust socket elsewhere is accepted: {head}");
    assert_eq!(backend.seen(), Vec::<String>::new(), "a djust socket reaches no backend before its mount");
    let (status, _) = ask_plain(proxy.addr, "GET", "/.roomgate/rooms/x").await;
    assert_eq!(status, 200, "the default path is the app's when another one is configured");
    assert_eq!(backend.seen(), ["GET /.roomgate/rooms/x"]);
    proxy.shutdown().await;
}

#[tokio::test]
async fn http2_and_tls_listeners_refuse_it_too() {
    let backend = Recorder::start().await;
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let files = [ca.leaf(&["a.test"]).write(dir.path(), "a")];
    let extra = format!("{}[handoff]\n", tls_section(&files));
    let proxy = Proxy::start(&config(&[("b1", backend.addr)], SHARED, &extra)).await;
    let tls_addr = proxy.tls_addr.unwrap();
    let h1 = client_config(&ca, &[&TLS13], &[b"http/1.1"]);
    for target in SPELLINGS {
        let (status, _) = ask(connect(tls_addr, "a.test", h1.clone()).await, "PUT", target).await;
        assert_eq!(status, 404, "HTTP/1.1 over TLS: {target}");
    }
    let h2 = client_config(&ca, &[&TLS13], &[b"h2"]);
    let tls = connect(tls_addr, "a.test", h2).await;
    let over_tls = h2_client(tls).await;
    let h2c = h2_client(TcpStream::connect(proxy.addr).await.unwrap()).await;
    for (h2, scheme) in [(&over_tls, "https"), (&h2c, "http")] {
        for path in ["/.roomgate/rooms/x/export", "/%2Eroomgate/rooms/x", "/.ROOMGATE/rooms", "/a/../.roomgate/rooms"] {
            let (status, body) = h2_post(h2, &format!("{scheme}://a.test{path}")).await;
            assert_eq!((status, body.as_str()), (StatusCode::NOT_FOUND, "404 Not Found: not found\n"), "{path}");
        }
    }
    assert_eq!(backend.seen(), Vec::<String>::new());
    let (status, body) = h2_post(&over_tls, "https://a.test/lobby").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "backend saw /lobby"));
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_reload_moves_the_guard_with_the_path() {
    let backend = Recorder::start().await;
    let text = |extra: &str| config(&[("b1", backend.addr)], SHARED, extra);
    let proxy = Proxy::start(&text("")).await;
    assert_eq!(ask_plain(proxy.addr, "GET", "/internal/handoff/x").await.0, 200);
    proxy.write_config(&text("[handoff]\npath = \"/internal/handoff\"\n"));
    // Asked for, not left to the watcher, which may have read the file after this write.
    let (status, diff) = admin_post(&proxy, "/admin/reload", "").await;
    assert_eq!(status, StatusCode::OK, "{diff}");
    assert_eq!(diff["needs_restart"], serde_json::json!([]), "{diff}");
    proxy.wait_epoch(2).await;
    assert_eq!(ask_plain(proxy.addr, "GET", "/internal/handoff/x").await.0, 404);
    assert_eq!(ask_plain(proxy.addr, "GET", "/.roomgate/rooms/x").await.0, 200);
    assert_eq!(backend.seen(), ["GET /internal/handoff/x", "GET /.roomgate/rooms/x"]);
    proxy.shutdown().await;
}

type H2 = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

async fn h2_client<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: S) -> H2 {
    let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io)).await.unwrap();
    tokio::spawn(conn);
    sender
}

async fn h2_post(h2: &H2, uri: &str) -> (StatusCode, String) {
    let req = Request::post(uri).body(Full::new(Bytes::from_static(b"state"))).unwrap();
    let resp = tokio::time::timeout(LIMIT, h2.clone().send_request(req)).await.expect("no answer in time").unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let (parts, body) = resp.into_parts();
    let bytes = tokio::time::timeout(LIMIT, body.collect()).await.unwrap().unwrap().to_bytes();
    (parts.status, String::from_utf8_lossy(&bytes).into_owned())
}
