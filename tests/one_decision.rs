//! Whether a request is a WebSocket handshake, and which room it is for, is decided once from one
//! reading of its head (issue 32): a head whose deciding fields could read two ways is refused on
//! every path before any backend sees it, and every socket on a route with a `djust:` source is
//! watched, whichever source placed it.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::djust::*;
use common::rawhttp::{exchange, read_responses};
use common::*;
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;

/// The shipped config's order on `/ws/live/`: explicit keys first, the mount frame last.
const ROUTES: &str = r#"
[[routes]]
prefix = "/room/"
mode = "room"
keys = ["path:^/room/(?P<room>[^/]+)/", "header:X-Room"]
on_missing = "reject"

[[routes]]
prefix = "/ws/live/"
mode = "room"
keys = ["query:room", "header:X-Room", "djust:^/room/(?P<room>[^/]+)/"]
on_missing = "shared"

[[routes]]
prefix = "/"
mode = "shared"
"#;

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

async fn setup(n: usize) -> (Vec<TestBackend>, Proxy) {
    let backends = backends(n).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, EXTRA)).await;
    (backends, proxy)
}

fn reached(backends: &[TestBackend]) -> usize {
    backends.iter().map(|b| b.accepted.load(Ordering::Relaxed)).sum()
}

/// Sends `head` (CRLF line ends, no final empty line) raw and returns the status roomgate answers.
async fn status_of(proxy: &Proxy, head: &[u8]) -> u16 {
    let mut req = head.to_vec();
    req.extend_from_slice(b"\r\n\r\n");
    let mut s = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut s, &req).await.unwrap();
    let out = read_responses(&mut s, 1, Duration::from_secs(5)).await;
    let statuses = out.statuses();
    assert_eq!(statuses.len(), 1, "{}", out.text());
    statuses[0]
}

fn handshake(path: &str, extra: &[u8]) -> Vec<u8> {
    let mut h =
        format!("GET {path} HTTP/1.1\r\nHost: rooms.test\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}")
            .into_bytes();
    h.extend_from_slice(extra);
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn obs_text_in_the_fields_that_decide_a_handshake_is_refused_before_any_backend() {
    let (backends, proxy) = setup(2).await;
    let cases: [&[u8]; 5] = [
        b"\r\nConnection: Upgrade\r\nUpgrade: websocket, \xff",
        b"\r\nConnection: Upgrade, \x80\r\nUpgrade: websocket",
        b"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nUpgrade: \xe9",
        b"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Protocol: chat\xff",
        // Not a handshake to anyone, but the same byte: refused all the same.
        b"\r\nConnection: keep-alive\r\nUpgrade: h2c\xff",
    ];
    for case in cases {
        let head = handshake("/ws/live/", case);
        assert_eq!(status_of(&proxy, &head).await, 400, "{}", String::from_utf8_lossy(&head));
    }
    // A POST handshake with a body, hidden behind the same byte.
    let post = b"POST /ws/live/ HTTP/1.1\r\nHost: rooms.test\r\nConnection: Upgrade\r\nUpgrade: websocket, \xff\r\n\
        Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nContent-Length: 5\r\n\r\nhello";
    let out = exchange(proxy.addr, post, Duration::from_secs(5)).await;
    assert_eq!(out.statuses(), vec![400], "{}", out.text());
    assert_eq!(reached(&backends), 0, "no backend saw any of them");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_that_could_read_two_ways_never_reaches_a_backend() {
    let (backends, proxy) = setup(2).await;
    let up = b"\r\nConnection: Upgrade\r\nUpgrade: websocket".as_slice();
    let cases: Vec<Vec<u8>> = vec![
        // wsproto (uvicorn --ws wsproto, hypercorn) answers the last key: a 101 roomgate would
        // count against a healthy backend.
        [up, b"\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA=="].concat(),
        [up, b"\r\nSec-WebSocket-Version: 8"].concat(),
        // The hop would remove the key it names, so the backend answers another handshake.
        b"\r\nConnection: Upgrade, Sec-WebSocket-Key\r\nUpgrade: websocket".to_vec(),
        [up, b"\r\nContent-Length: 5"].concat(),
        [up, b"\r\nTransfer-Encoding: chunked"].concat(),
    ];
    for case in &cases {
        let head = handshake("/ws/live/?room=7", case);
        assert_eq!(status_of(&proxy, &head).await, 400, "{}", String::from_utf8_lossy(&head));
    }
    let no_key = b"GET /ws/live/?room=7 HTTP/1.1\r\nHost: rooms.test\r\nConnection: Upgrade\r\nUpgrade: websocket";
    assert_eq!(status_of(&proxy, no_key).await, 400);
    let http10 = b"GET /ws/live/?room=7 HTTP/1.0\r\nHost: rooms.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==";
    assert_eq!(status_of(&proxy, http10).await, 400);
    // A key that is not 16 bytes in base64 (RFC 6455 section 4.1): a backend would refuse it, and
    // that refusal must not count against it.
    for key in [
        "dGhlIHNhbXBsZSBub25jZQ",
        "dGhlIHNhbXBsZSBub25jZQ==x",
        "dGhlIHNhbXBsZSBub25jZR==",
        "",
        "not base64 at all!!!!!==",
    ] {
        let head = format!(
            "GET /ws/live/?room=7 HTTP/1.1\r\nHost: rooms.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}"
        );
        assert_eq!(status_of(&proxy, head.as_bytes()).await, 400, "key {key:?}");
    }
    assert_eq!(reached(&backends), 0, "no backend saw any of them");
    let status = admin_get(&proxy, "/admin/status").await;
    let down = status["backends"].as_array().unwrap().iter().filter(|b| b["state"] != "active").count();
    assert_eq!(down, 0, "no backend looks broken: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_is_405_and_goes_nowhere() {
    let (backends, proxy) = setup(1).await;
    let target = backends[0].addr.to_string();
    let head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}");
    assert_eq!(status_of(&proxy, head.as_bytes()).await, 405);
    assert_eq!(reached(&backends), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_a_key_source_reads_must_be_visible_ascii() {
    let (backends, proxy) = setup(2).await;
    // The path finds the room first; the header it would have read next holds obs-text.
    let head = b"GET /room/1/ HTTP/1.1\r\nHost: rooms.test\r\nX-Room: 1\xff";
    assert_eq!(status_of(&proxy, head).await, 400);
    let head = b"GET /room/1/ HTTP/1.1\r\nHost: rooms.test\r\nX-Other: caf\xc3\xa9";
    assert_eq!(status_of(&proxy, head).await, 200, "fields no source reads are the backend's business");
    assert_eq!(reached(&backends), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_placed_by_an_earlier_source_is_watched_like_any_djust_socket() {
    let (_b, proxy) = setup(3).await;
    for (path, headers) in [("/ws/live/?room=A", vec![DJUST]), ("/ws/live/", vec![DJUST, ("x-room", "A")])] {
        let mut ws = ws_connect(&proxy.ws_url(path), &headers).await;
        // Placed by its key: the backend's own greeting arrives.
        let hello = next(&mut ws).await.into_text().unwrap();
        assert!(hello.contains("backend-"), "{hello}");
        // Its own room's page mounts.
        ws.send(Message::text(mount("/room/A/"))).await.unwrap();
        assert_eq!(next(&mut ws).await, Message::text(mount("/room/A/")));
        // Another room's page never reaches this backend: the socket is closed to reconnect.
        ws.send(Message::text(mount("/room/B/"))).await.unwrap();
        assert_eq!(close_code(&mut ws).await, Some(1012), "{path}");
    }
    // A first message for another room is stopped the same way.
    let mut ws = ws_connect(&proxy.ws_url("/ws/live/?room=A"), &[DJUST]).await;
    let _hello = next(&mut ws).await;
    ws.send(Message::text(live_redirect("/room/B/"))).await.unwrap();
    assert_eq!(close_code(&mut ws).await, Some(1012));
    let status = admin_get(&proxy, "/admin/status").await;
    assert_eq!(status["split_rooms"], 0, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_socket_is_offered_no_compression() {
    let (_b, proxy) = setup(2).await;
    let ext = ("sec-websocket-extensions", "permessage-deflate; client_max_window_bits");
    let mut ws = ws_connect(&proxy.ws_url("/ws/live/?room=A"), &[DJUST, ext]).await;
    let _hello = next(&mut ws).await;
    ws.send(Message::text("headers")).await.unwrap();
    let seen = next(&mut ws).await.into_text().unwrap().to_lowercase();
    assert!(seen.contains("upgrade: websocket\n"), "{seen}");
    assert!(!seen.contains("sec-websocket-extensions"), "a compressed mount could not be read: {seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_reads_the_same_rules() {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let (backends, proxy) = setup(2).await;
    let io = TokioIo::new(tokio::net::TcpStream::connect(proxy.addr).await.unwrap());
    let (mut h2, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await.unwrap();
    tokio::spawn(conn);
    let mut status = |path: &str, name: &str, value: &[u8]| {
        let req = http::Request::get(format!("http://rooms.test{path}"))
            .header(name, http::HeaderValue::from_bytes(value).unwrap())
            .body(Empty::<bytes::Bytes>::new())
            .unwrap();
        let sent = h2.send_request(req);
        async move {
            let resp = tokio::time::timeout(LIMIT, sent).await.unwrap().unwrap();
            let status = resp.status().as_u16();
            let _ = resp.into_body().collect().await;
            status
        }
    };
    assert_eq!(status("/room/1/", "x-room", b"1\xff").await, 400);
    assert_eq!(status("/room/1/", "sec-websocket-key", b"\xff").await, 400);
    // :authority (rooms.test) and Host disagree, on a route that reads no host: 400, as the
    // absolute-form target and Host of HTTP/1.1 do.
    assert_eq!(status("/x", "host", b"other.example").await, 400);
    assert_eq!(reached(&backends), 0);
    assert_eq!(status("/x", "host", b"rooms.test").await, 200);
    assert_eq!(status("/room/1/", "x-other", b"caf\xc3\xa9").await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absolute_target_and_host_must_name_one_host_on_every_route() {
    let (backends, proxy) = setup(1).await;
    // The shared route reads no host, yet the backend would see Host: rooms.test for a request
    // whose target (which RFC 9112 section 3.2.2 says wins) names another.
    let head = b"GET http://other.example/x HTTP/1.1\r\nHost: rooms.test";
    assert_eq!(status_of(&proxy, head).await, 400);
    let head = b"GET http://other.example/room/1/ HTTP/1.1\r\nHost: rooms.test";
    assert_eq!(status_of(&proxy, head).await, 400);
    assert_eq!(reached(&backends), 0);
    let head = b"GET http://Rooms.Test:80/x HTTP/1.1\r\nHost: rooms.test";
    assert_eq!(status_of(&proxy, head).await, 200);
}
