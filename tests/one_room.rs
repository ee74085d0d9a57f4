//! One request, one room (issue 12, item 3), over real sockets: a request that carries its room
//! twice, or where the backend would read another room than roomgate, gets 400 whose body names no
//! backend; no room is recorded and no backend sees the request. Each test ends with a control: the
//! same request made unambiguous is placed and recorded.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::*;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Setup {
    backends: Vec<TestBackend>,
    proxy: Proxy,
}

/// Two backends whose ids and ports are easy to look for in a body, behind [`ROUTES`]: `/room/`
/// (path, then `X-Room`), `/ws/live/` (query `room`, `X-Room`, cookie `roomgate_room`), `/api/`
/// (`X-Room`, cookie `room`, query `room`; no key: the shared pool) and `/h/` (host).
async fn setup() -> Setup {
    let backends = vec![TestBackend::start("owner-alpha").await, TestBackend::start("owner-beta").await];
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, "")).await;
    Setup { backends, proxy }
}

/// Sends a request head, written line by line as given (plus `Connection: close` when it has no
/// `Connection`), on a fresh connection; returns the status and the body.
async fn raw(proxy: &Proxy, lines: &[&str]) -> (u16, String) {
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    let mut lines = lines.to_vec();
    if !lines.iter().any(|l| l.to_ascii_lowercase().starts_with("connection:")) {
        lines.push("Connection: close");
    }
    let head = format!("{}\r\n\r\n", lines.join("\r\n"));
    s.write_all(head.as_bytes()).await.unwrap();
    read_response(&mut s).await
}

async fn read_response(s: &mut TcpStream) -> (u16, String) {
    let head = raw::read_head(s).await;
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let length: Option<usize> = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()));
    assert!(!head.to_ascii_lowercase().contains("transfer-encoding"), "{head}");
    let mut body = Vec::new();
    let read = async {
        match length {
            Some(n) => {
                body.resize(n, 0);
                s.read_exact(&mut body).await.map(|_| ())
            }
            // No length: the body ends with the connection.
            None => s.read_to_end(&mut body).await.map(|_| ()),
        }
    };
    tokio::time::timeout(LIMIT, read).await.expect("no body in time").unwrap();
    (status, String::from_utf8(body).unwrap())
}

impl Setup {
    /// The answer is roomgate's 400 for an ambiguous room, and says nothing of the backends.
    fn assert_refused(&self, what: &str, (status, body): (u16, String)) {
        assert_eq!(status, 400, "{what}: {body}");
        assert!(body.starts_with("400 Bad Request: ambiguous room: "), "{what}: {body}");
        self.assert_names_no_backend(what, &body);
    }

    fn assert_names_no_backend(&self, what: &str, body: &str) {
        for b in &self.backends {
            assert!(!body.contains(&b.id), "{what}: the body names {}: {body}", b.id);
            assert!(!body.contains(&b.addr.port().to_string()), "{what}: the body names {}: {body}", b.addr);
        }
    }

    /// Nothing was placed: no room known to the directory, and no backend got a connection.
    async fn assert_untouched(&self) {
        let page = admin_get(&self.proxy, "/admin/rooms?limit=1000").await;
        assert_eq!(page["rooms"], serde_json::json!([]), "rooms were recorded: {page}");
        let status = admin_get(&self.proxy, "/admin/status").await;
        assert_eq!(status["rooms"]["known"], 0, "{status}");
        for b in &self.backends {
            assert_eq!(b.accepted.load(std::sync::atomic::Ordering::Relaxed), 0, "{} got a connection", b.id);
        }
    }

    /// The control: an unambiguous request is served by a backend, and its room is recorded.
    async fn assert_placed(&self, what: &str, answer: (u16, String), room: &str) {
        assert_eq!(answer.0, 200, "{what}: {}", answer.1);
        assert!(self.backends.iter().any(|b| b.id == answer.1), "{what}: {}", answer.1);
        let info = admin_get(&self.proxy, &format!("/admin/rooms/{room}")).await;
        assert_eq!(info["backend"], answer.1.as_str(), "{what}: {info}");
    }
}

const HOST: &str = "Host: rooms.test";

#[tokio::test]
async fn two_room_query_parameters_are_refused() {
    let s = setup().await;
    for target in [
        "/ws/live/?room=a&room=b",
        "/ws/live/?room=a&room=a",
        "/ws/live/?room=a&r%6fom=b",
        "/ws/live/?%72oom=a&x=1&room=",
        "/ws/live/?room&room=a",
    ] {
        s.assert_refused(target, raw(&s.proxy, &[&format!("GET {target} HTTP/1.1"), HOST]).await);
    }
    // A WebSocket handshake is refused the same way, before any upgrade.
    let (_stream, head) = raw::handshake(s.proxy.addr, "/ws/live/?room=a&room=b", &[]).await;
    assert!(head.starts_with("HTTP/1.1 400 "), "{head}");
    s.assert_untouched().await;
    let answer = raw(&s.proxy, &["GET /ws/live/?room=a&rooms=b HTTP/1.1", HOST]).await;
    s.assert_placed("one room parameter", answer, "a").await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn query_values_are_decoded_as_django_decodes_them() {
    let s = setup().await;
    // Django reads `a b` for both: not a valid key, refused and not placed.
    for target in ["/ws/live/?room=a+b", "/ws/live/?room=a%20b", "/ws/live/?room=%FF"] {
        let (status, body) = raw(&s.proxy, &[&format!("GET {target} HTTP/1.1"), HOST]).await;
        assert_eq!(status, 400, "{target}: {body}");
        assert!(body.contains("room key from query:room"), "{target}: {body}");
        s.assert_names_no_backend(target, &body);
    }
    s.assert_untouched().await;
    let answer = raw(&s.proxy, &["GET /ws/live/?room=a%2Bb HTTP/1.1", HOST]).await;
    s.assert_placed("an encoded plus", answer, "a%2Bb").await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn two_key_headers_are_refused() {
    let s = setup().await;
    let cases: &[(&str, &[&str])] = &[
        ("two lines", &["X-Room: a", "X-Room: b"]),
        ("two equal lines", &["X-Room: a", "x-room: a"]),
        ("a list", &["X-Room: a, b"]),
        ("an underscore twin", &["X-Room: a", "X_Room: b"]),
    ];
    for (what, headers) in cases {
        let mut lines = vec!["GET /api/state HTTP/1.1", HOST];
        lines.extend_from_slice(headers);
        s.assert_refused(what, raw(&s.proxy, &lines).await);
    }
    // `/api/` sends a request without a key to the shared pool; a twin alone is not "no key".
    s.assert_refused("a twin alone", raw(&s.proxy, &["GET /api/state HTTP/1.1", HOST, "X_Room: b"]).await);
    s.assert_untouched().await;
    let answer = raw(&s.proxy, &["GET /api/state HTTP/1.1", HOST, "X-Room: a%2Cb"]).await;
    s.assert_placed("a comma, encoded", answer, "a%2Cb").await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn a_key_header_named_in_connection_is_refused() {
    let s = setup().await;
    let cases: &[&[&str]] = &[
        &["GET /api/state HTTP/1.1", HOST, "Connection: keep-alive, X-Room", "X-Room: a"],
        &["GET /api/state HTTP/1.1", HOST, "Connection: keep-alive", "Connection: x-room", "X-Room: a"],
        &["GET /ws/live/ HTTP/1.1", HOST, "Connection: Cookie", "Cookie: roomgate_room=a"],
    ];
    for lines in cases {
        s.assert_refused(lines[2], raw(&s.proxy, lines).await);
    }
    s.assert_untouched().await;
    let lines = ["GET /api/state HTTP/1.1", HOST, "Connection: keep-alive, X-Other", "X-Room: a"];
    s.assert_placed("another header named", raw(&s.proxy, &lines).await, "a").await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn two_key_cookies_are_refused() {
    let s = setup().await;
    let cases: &[(&str, &[&str])] = &[
        ("one line", &["Cookie: roomgate_room=a; csrftoken=x; roomgate_room=b"]),
        ("one line, same value", &["Cookie: roomgate_room=a; roomgate_room=a"]),
        ("two lines", &["Cookie: roomgate_room=a; csrftoken=x", "Cookie: sessionid=y; roomgate_room=b"]),
        ("a joined list", &["Cookie: roomgate_room=a,sessionid=y"]),
    ];
    for (what, headers) in cases {
        let mut lines = vec!["GET /ws/live/ HTTP/1.1", HOST];
        lines.extend_from_slice(headers);
        s.assert_refused(what, raw(&s.proxy, &lines).await);
    }
    s.assert_untouched().await;
    let lines = ["GET /ws/live/ HTTP/1.1", HOST, "Cookie: roomgate_room=a; csrftoken=x", "Cookie: sessionid=y"];
    s.assert_placed("one cookie over two lines", raw(&s.proxy, &lines).await, "a").await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn host_must_be_one_and_agree_with_the_target() {
    let s = setup().await;
    // hyper does not refuse a second Host line: roomgate does, on every route (its head check
    // runs before any key is read; see `one_host_on_every_route`).
    for (what, second) in [("two Host lines", "Host: b.rooms.test"), ("two equal Host lines", "Host: a.rooms.test")] {
        let (status, body) = raw(&s.proxy, &["GET /h/ HTTP/1.1", "Host: a.rooms.test", second]).await;
        assert_eq!(status, 400, "{what}: {body}");
        assert_eq!(body, "400 Bad Request: malformed request: two Host headers\n", "{what}");
    }
    let absolute = raw(&s.proxy, &["GET http://a.rooms.test/h/ HTTP/1.1", "Host: b.rooms.test"]).await;
    s.assert_refused("absolute-form target and Host", absolute);
    let port = raw(&s.proxy, &["GET http://a.rooms.test:81/h/ HTTP/1.1", "Host: a.rooms.test"]).await;
    s.assert_refused("another port", port);
    s.assert_untouched().await;
    let agree = raw(&s.proxy, &["GET http://A.rooms.test/h/ HTTP/1.1", "Host: a.rooms.test:80"]).await;
    s.assert_placed("target and Host agree", agree, "a").await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn http2_authority_must_agree_with_host() {
    let s = setup().await;
    let io = TokioIo::new(TcpStream::connect(s.proxy.addr).await.unwrap());
    let (mut h2, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await.unwrap();
    let conn = tokio::spawn(conn);
    let mut send = async |uri: &str, host: Option<&str>| {
        let mut req = Request::get(uri);
        if let Some(host) = host {
            req = req.header("host", host);
        }
        let resp = tokio::time::timeout(LIMIT, h2.send_request(req.body(Full::<Bytes>::default()).unwrap()))
            .await
            .expect("no response in time")
            .unwrap();
        assert_eq!(resp.version(), http::Version::HTTP_2);
        let status = resp.status().as_u16();
        let body = tokio::time::timeout(LIMIT, resp.into_body().collect()).await.unwrap().unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    };
    let mismatch = send("http://a.rooms.test/h/", Some("b.rooms.test")).await;
    s.assert_refused(":authority and Host", mismatch);
    s.assert_untouched().await;
    // `:authority` alone is the host, forwarded as `Host`.
    let alone = send("http://c.rooms.test/h/", None).await;
    s.assert_placed(":authority alone", alone, "c").await;
    drop(h2);
    let _ = tokio::time::timeout(LIMIT, conn).await;
    s.proxy.shutdown().await;
}

#[tokio::test]
async fn paths_are_read_as_the_backend_routes_them() {
    let s = setup().await;
    for target in ["/room/a%2Fb/", "/room/a%2fb/x", "/room/../a/", "/room/%2E%2E/", "/room/./a/"] {
        s.assert_refused(target, raw(&s.proxy, &[&format!("GET {target} HTTP/1.1"), HOST]).await);
    }
    // Not UTF-8 once decoded, or a space: an invalid key, refused as such.
    for target in ["/room/%FF/", "/room/a%20b/", "/room/a%zz/"] {
        let (status, body) = raw(&s.proxy, &[&format!("GET {target} HTTP/1.1"), HOST]).await;
        assert_eq!(status, 400, "{target}: {body}");
        assert!(body.contains("room key from path:"), "{target}: {body}");
        s.assert_names_no_backend(target, &body);
    }
    s.assert_untouched().await;
    // Decoded once, as Django routes it: `/room/a%41/` is room `aA`, the room of `/room/aA/`.
    let answer = raw(&s.proxy, &["GET /room/a%41/ HTTP/1.1", HOST]).await;
    s.assert_placed("an encoded letter", answer.clone(), "aA").await;
    assert_eq!(raw(&s.proxy, &["GET /room/aA/ HTTP/1.1", HOST]).await, answer);
    s.proxy.shutdown().await;
}

/// Routes match the raw path; a path whose decoding matches another route would reach a room's
/// page through the shared pool (Django routes `/r%6Fom/a/` to the room view): refused.
#[tokio::test]
async fn a_path_that_decodes_to_another_route_is_refused() {
    let s = setup().await;
    for target in ["/r%6Fom/a/", "/%72oom/a/", "/ws/l%69ve/?room=a"] {
        s.assert_refused(target, raw(&s.proxy, &[&format!("GET {target} HTTP/1.1"), HOST]).await);
    }
    s.assert_untouched().await;
    // Encodings that keep the route are served: the shared pool, and a room's own route.
    let (status, _) = raw(&s.proxy, &["GET /static/a%20b.png HTTP/1.1", HOST]).await;
    assert_eq!(status, 200);
    let answer = raw(&s.proxy, &["GET /room/%61/ HTTP/1.1", HOST]).await;
    s.assert_placed("an encoded key in the room's route", answer, "a").await;
    s.proxy.shutdown().await;
}

/// Two Host lines, or an HTTP/1.1 request without one, are malformed (RFC 9112 section 3.2) on
/// every route, not only on a `host:` one: 400, never forwarded.
#[tokio::test]
async fn one_host_on_every_route() {
    let s = setup().await;
    for lines in [
        &["GET /anything HTTP/1.1", HOST, "Host: other.test"][..],
        &["GET /anything HTTP/1.1"][..],
        &["GET /room/a/ HTTP/1.1", HOST, HOST][..],
    ] {
        let (status, body) = raw(&s.proxy, lines).await;
        assert_eq!(status, 400, "{lines:?}: {body}");
        assert!(body.starts_with("400 Bad Request: malformed request: "), "{lines:?}: {body}");
    }
    s.assert_untouched().await;
    let (status, _) = raw(&s.proxy, &["GET /anything HTTP/1.0"]).await;
    assert_eq!(status, 200, "HTTP/1.0 needs no Host");
    s.proxy.shutdown().await;
}
