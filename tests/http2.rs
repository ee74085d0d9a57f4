//! HTTP/2 from clients: over TLS (ALPN `h2`) and as h2c with prior knowledge on the plain
//! listener, routed exactly like HTTP/1.1 (the room key from `:authority`, paths, headers), sent
//! on to backends as HTTP/1.1 with a `Host` header; 100 concurrent streams on one connection each
//! reach their own room's owner; idle connections and shutdown end with GOAWAY.

#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::tls::*;
use common::*;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::version::{TLS12, TLS13};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

type H2 = SendRequest<Full<Bytes>>;

/// An HTTP/2 client connection over `io`; the task drives it and ends with it.
async fn h2_over<S>(io: S) -> (H2, JoinHandle<hyper::Result<()>>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io)).await.unwrap();
    (sender, tokio::spawn(conn))
}

/// Sends `req` on `h2`; returns status, headers and body text.
async fn h2_send(h2: &H2, req: Request<Full<Bytes>>) -> (StatusCode, http::HeaderMap, String) {
    let mut h2 = h2.clone();
    let resp = tokio::time::timeout(LIMIT, h2.send_request(req)).await.expect("request timed out").unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let (parts, body) = resp.into_parts();
    let bytes = tokio::time::timeout(LIMIT, body.collect()).await.unwrap().unwrap().to_bytes();
    (parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned())
}

async fn h2_get(h2: &H2, uri: &str, headers: &[(&str, &str)]) -> (StatusCode, http::HeaderMap, String) {
    let mut req = Request::get(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    h2_send(h2, req.body(Full::default()).unwrap()).await
}

struct Setup {
    _ca: Ca,
    _dir: tempfile::TempDir,
    _backends: Vec<TestBackend>,
    proxy: Proxy,
    client: std::sync::Arc<rustls::ClientConfig>,
}

async fn setup(extra: &str) -> Setup {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let files = [ca.leaf(&["a.test", "*.rooms.test"]).write(dir.path(), "a")];
    let backends = backends(3).await;
    let text = config(&backend_list(&backends), ROUTES, &format!("{}{extra}", tls_section(&files)));
    let proxy = Proxy::start(&text).await;
    let client = client_config(&ca, &[&TLS13, &TLS12], &[b"h2", b"http/1.1"]);
    Setup { _ca: ca, _dir: dir, _backends: backends, proxy, client }
}

impl Setup {
    /// An HTTP/2 connection over TLS, ALPN `h2`.
    async fn h2(&self) -> (H2, JoinHandle<hyper::Result<()>>) {
        let tls = connect(self.proxy.tls_addr.unwrap(), "a.test", self.client.clone()).await;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        h2_over(tls).await
    }

    /// The owner roomgate's placement gives `room`.
    fn owner(&self, room: &str) -> String {
        self.proxy.control.gateway().snapshot().place_new(room.as_bytes()).unwrap().id.to_string()
    }
}

#[tokio::test]
async fn a_page_load_over_h2_reaches_the_room_owner() {
    let s = setup("").await;
    let (h2, _conn) = s.h2().await;
    let (status, headers, body) = h2_get(&h2, "https://a.test/room/lobby-7/", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, s.owner("lobby-7"));
    assert!(headers.get("set-cookie").unwrap().to_str().unwrap().starts_with("roomgate_room=lobby-7"));
    // The room in the host name comes from :authority.
    let (_, headers, _) = h2_get(&h2, "https://r5.rooms.test/h/page", &[]).await;
    assert_eq!(headers["x-backend"], s.owner("r5").as_str());
    // Backends get HTTP/1.1 with a Host header and one Cookie header.
    let (_, _, echoed) = h2_get(&h2, "https://a.test/echo-headers", &[("cookie", "a=1"), ("cookie", "b=2")]).await;
    for line in ["host: a.test\n", "cookie: a=1; b=2\n", "x-forwarded-proto: https\n", "x-forwarded-host: a.test\n"] {
        assert!(echoed.contains(line), "{line:?} not in {echoed}");
    }
    // Bodies stream both ways.
    let req = Request::post("https://a.test/echo").body(Full::new(Bytes::from(vec![b'z'; 100_000]))).unwrap();
    let (status, _, body) = h2_send(&h2, req).await;
    assert_eq!((status, body.len()), (StatusCode::OK, 100_000));
}

#[tokio::test]
async fn hundred_streams_on_one_connection_reach_each_rooms_owner() {
    let s = setup("").await;
    let (h2, _conn) = s.h2().await;
    let requests = (0..100).map(|i| {
        let h2 = h2.clone();
        async move {
            let room = format!("room-{i}");
            let (status, headers, _) = h2_get(&h2, &format!("https://a.test/room/{room}/"), &[]).await;
            (room, status, headers["x-backend"].to_str().unwrap().to_owned())
        }
    });
    let answers = tokio::time::timeout(LIMIT, futures_util::future::join_all(requests)).await.unwrap();
    let mut per_backend = std::collections::HashMap::new();
    for (room, status, backend) in answers {
        assert_eq!(status, StatusCode::OK, "{room}");
        assert_eq!(backend, s.owner(&room), "{room}");
        *per_backend.entry(backend).or_insert(0) += 1;
    }
    assert_eq!(per_backend.len(), 3, "rooms spread over every backend: {per_backend:?}");
    let status = admin_get(&s.proxy, "/admin/status").await;
    assert_eq!(status["rooms"]["known"], 100);
    let (_, _, metrics) = get(&http_client(), &s.proxy.admin_url("/metrics"), &[]).await;
    assert!(metrics.contains("roomgate_tls_handshakes_total{result=\"full\"} 1\n"), "one connection: {metrics}");
}

#[tokio::test]
async fn h2c_with_prior_knowledge_is_served_on_the_plain_listener() {
    let s = setup("").await;
    let (h2, _conn) = h2_over(TcpStream::connect(s.proxy.addr).await.unwrap()).await;
    let (status, _, body) = h2_get(&h2, "http://rooms.test/room/plain-1/", &[]).await;
    assert_eq!((status, body), (StatusCode::OK, s.owner("plain-1")));
    let (_, _, echoed) = h2_get(&h2, "http://rooms.test/echo-headers", &[]).await;
    assert!(echoed.contains("x-forwarded-proto: http\n") && echoed.contains("host: rooms.test\n"), "{echoed}");
    // HTTP/1.1 on the same listener, a method starting like the preface included.
    let client = http_client();
    let (status, _, body) = get(&client, &s.proxy.url("/room/plain-1/"), &[]).await;
    assert_eq!((status, body), (StatusCode::OK, s.owner("plain-1")));
    let req = Request::post(s.proxy.url("/echo")).body(Full::new(Bytes::from("PRI"))).unwrap();
    assert_eq!(send(&client, req).await.2, "PRI");
}

/// The protocol is chosen from bytes read, not peeked: a client that sends the first bytes of the
/// preface (or of "PUT") one write at a time is served all the same.
#[tokio::test]
async fn first_bytes_sent_one_at_a_time_still_choose_the_protocol() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = setup("").await;
    let mut h1 = TcpStream::connect(s.proxy.addr).await.unwrap();
    h1.set_nodelay(true).unwrap();
    for part in [
        &b"P"[..],
        b"U",
        b"T /room/slow-1/ HTTP/1.1\r\nHost: rooms.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    ] {
        h1.write_all(part).await.unwrap();
        h1.flush().await.unwrap();
    }
    let mut answer = String::new();
    tokio::time::timeout(LIMIT, h1.read_to_string(&mut answer)).await.unwrap().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(&s.owner("slow-1")), "{answer}");

    let mut h2c = TcpStream::connect(s.proxy.addr).await.unwrap();
    h2c.set_nodelay(true).unwrap();
    for b in b"PRI" {
        h2c.write_all(&[*b]).await.unwrap();
        h2c.flush().await.unwrap();
    }
    // The rest of the preface goes out with the client's own (hyper writes it whole: skip "PRI").
    let (h2, _conn) = h2_over(SkipFirst { inner: h2c, skip: 3 }).await;
    let (status, _, body) = h2_get(&h2, "http://rooms.test/room/slow-2/", &[]).await;
    assert_eq!((status, body), (StatusCode::OK, s.owner("slow-2")));
}

/// Drops the first `skip` bytes the client writes (they were sent by hand already).
struct SkipFirst {
    inner: TcpStream,
    skip: usize,
}

impl AsyncRead for SkipFirst {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for SkipFirst {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.skip > 0 {
            let n = self.skip.min(data.len());
            self.skip -= n;
            return std::task::Poll::Ready(Ok(n));
        }
        std::pin::Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[tokio::test]
async fn oversized_heads_over_h2_get_roomgates_431() {
    let s = setup("[limits]\nmax_request_head = 1024\n").await;
    let (h2, _conn) = s.h2().await;
    let big = "x".repeat(1500);
    let (status, _, body) = h2_get(&h2, "https://a.test/room/r/", &[("x-big", &big)]).await;
    assert_eq!(status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "{body}");
    let (status, _, _) = h2_get(&h2, "https://a.test/room/r/", &[]).await;
    assert_eq!(status, StatusCode::OK, "the connection goes on");
}

#[tokio::test]
async fn idle_h2_connections_are_closed_with_goaway() {
    let s = setup("[timeouts]\nrequest_head = \"300ms\"\n").await;
    let (h2, conn) = s.h2().await;
    assert_eq!(h2_get(&h2, "https://a.test/", &[]).await.0, StatusCode::OK);
    let ended = tokio::time::timeout(LIMIT, conn).await.expect("idle connection not closed").unwrap();
    assert!(ended.is_ok(), "closed gracefully: {ended:?}");
}

#[tokio::test]
async fn shutdown_closes_h2_connections_with_goaway() {
    let s = setup("[shutdown]\ngrace = \"60s\"\n").await;
    let (h2, conn) = s.h2().await;
    assert_eq!(h2_get(&h2, "https://a.test/", &[]).await.0, StatusCode::OK);
    let (h2c, conn_c) = h2_over(TcpStream::connect(s.proxy.addr).await.unwrap()).await;
    assert_eq!(h2_get(&h2c, "http://a.test/", &[]).await.0, StatusCode::OK);
    // Within LIMIT, far less than the grace period: the connections did not hold shutdown up.
    s.proxy.shutdown().await;
    for conn in [conn, conn_c] {
        let ended = tokio::time::timeout(LIMIT, conn).await.unwrap().unwrap();
        assert!(ended.is_ok(), "closed gracefully: {ended:?}");
    }
}

/// Measuring tool, not a test: HTTP/2 requests per second on one TLS connection (32 streams in
/// flight) against the release binary on one core, and HTTP/1.1 over 32 TLS keep-alive
/// connections for comparison. The backend runs in the client's process.
/// `taskset -c 1 cargo test --release --test http2 -- --ignored --nocapture h2_request_rate`
#[tokio::test]
#[ignore]
async fn h2_request_rate() {
    use std::time::Duration;
    let backend = TestBackend::start("b0").await;
    let body = format!("[[backends]]\nid = \"b0\"\naddr = \"{}\"\n{ROUTES}", backend.addr);
    let server = common::pinned::Pinned::with_test_cert(&body).await;
    let h2_client = measuring_client_config(&TLS13, true);
    let mut h2_client_alpn = (*h2_client).clone();
    h2_client_alpn.alpn_protocols = vec![b"h2".to_vec()];
    let tls = connect(server.tls, "a.test", std::sync::Arc::new(h2_client_alpn)).await;
    let (h2, _conn) = h2_over(tls).await;
    let op = move |_| {
        let mut h2 = h2.clone();
        async move {
            let req = Request::get("https://a.test/room/r1/").body(Full::default()).unwrap();
            match tokio::time::timeout(LIMIT, h2.send_request(req)).await {
                Ok(Ok(resp)) => resp.status() == StatusCode::OK && resp.into_body().collect().await.is_ok(),
                _ => false,
            }
        }
    };
    common::pinned::measure("warm-up", &server, 8, Duration::from_millis(300), op.clone()).await;
    common::pinned::measure("HTTP/2, 1 connection, 32 streams", &server, 32, Duration::from_secs(3), op).await;

    let mut senders = Vec::new();
    for _ in 0..32 {
        let tls = connect(server.tls, "a.test", measuring_client_config(&TLS13, true)).await;
        let (sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(tls)).await.unwrap();
        tokio::spawn(conn);
        senders.push(sender);
    }
    let pool = std::sync::Arc::new(tokio::sync::Mutex::new(senders));
    let op = move |_| {
        let pool = pool.clone();
        async move {
            let Some(mut sender) = pool.lock().await.pop() else { return false };
            let req = Request::get("/room/r1/").header("host", "a.test").body(Full::default()).unwrap();
            let ok = match tokio::time::timeout(LIMIT, sender.send_request(req)).await {
                Ok(Ok(resp)) => resp.status() == StatusCode::OK && resp.into_body().collect().await.is_ok(),
                _ => false,
            };
            pool.lock().await.push(sender);
            ok
        }
    };
    common::pinned::measure("HTTP/1.1, 32 keep-alive connections", &server, 32, Duration::from_secs(3), op).await;
}

/// Measuring tool, not a test: plain HTTP/1.1, one request per new connection, against the
/// release binary on one core: the cost of looking for the h2c preface on every plain connection
/// shows here if anywhere.
/// `taskset -c 1 cargo test --release --test http2 -- --ignored --nocapture plain_connection_rate`
#[tokio::test]
#[ignore]
async fn plain_connection_rate() {
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backend = TestBackend::start("b0").await;
    let body = format!("[[backends]]\nid = \"b0\"\naddr = \"{}\"\n{ROUTES}", backend.addr);
    let server = common::pinned::Pinned::with_test_cert(&body).await;
    let addr = server.http;
    let op = move |_| async move {
        let Ok(mut tcp) = TcpStream::connect(addr).await else { return false };
        let req = b"GET /room/r1/ HTTP/1.1\r\nhost: a.test\r\nconnection: close\r\n\r\n";
        if tcp.write_all(req).await.is_err() {
            return false;
        }
        let mut resp = Vec::new();
        let read = tokio::time::timeout(LIMIT, tcp.read_to_end(&mut resp)).await;
        read.is_ok() && resp.starts_with(b"HTTP/1.1 200")
    };
    common::pinned::measure("warm-up", &server, 4, Duration::from_millis(300), op).await;
    for round in 0..3 {
        let label = format!("HTTP/1.1, a new plain connection per request, round {round}");
        common::pinned::measure(&label, &server, 16, Duration::from_secs(3), op).await;
    }
}
