//! Connection limits over real sockets: the total cap (across plain and TLS listeners) and the
//! per-address cap close a connection at accept; behind a trusted proxy, each forwarded client's
//! requests and WebSockets are counted; the per-backend cap answers 503 with `Retry-After` (and
//! 4503 to a djust socket) while its backend holds requests or tunnels; every refusal is counted
//! in `roomgate_refused_total{limit}` on the admin listener's `/metrics`.

#![allow(clippy::unwrap_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::djust::{DJUST, DJUST_ROUTES, EXTRA, mount, refused};
use common::*;
use http::StatusCode;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Semaphore;

/// Idle keep-alive connections stay open for the length of a test, which ends without waiting
/// for the requests and sockets it leaves open.
const LONG_IDLE: &str = "[timeouts]\nrequest_head = \"60s\"\n[shutdown]\ngrace = \"200ms\"\n";

/// A test that leaves requests or sockets open ends without waiting long for them.
const QUICK_END: &str = "[shutdown]\ngrace = \"200ms\"\n";

/// A TCP connection to `addr` from the loopback address `src` (any of 127/8 on Linux).
async fn connect_from(src: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{src}:0").parse().unwrap()).unwrap();
    tokio::time::timeout(LIMIT, socket.connect(addr)).await.expect("connect timed out").unwrap()
}

/// Sends `GET path` with extra header lines on `s` and reads the response head and its
/// `Content-Length` body (so that `s` can be used again); `None` when roomgate closed the
/// connection instead of answering.
async fn try_get(s: &mut TcpStream, path: &str, headers: &str) -> Option<String> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: limits.test\r\n{headers}\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(LIMIT, s.read(&mut b)).await.expect("no answer in time") {
            Ok(1) => head.push(b[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8(head).unwrap();
    let length = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    tokio::time::timeout(LIMIT, s.read_exact(&mut body)).await.expect("no body in time").ok()?;
    Some(head)
}

fn status_of(head: &str) -> u16 {
    head.split(' ').nth(1).unwrap().parse().unwrap()
}

/// A new connection from `src` that gets a 200 for `GET /`, kept open.
async fn served_from(src: &str, addr: SocketAddr) -> TcpStream {
    let mut s = connect_from(src, addr).await;
    let head = try_get(&mut s, "/", "").await.expect("connection refused");
    assert_eq!(status_of(&head), 200, "{head}");
    s
}

/// Polls (bounded) until a new connection from `src` is served.
async fn wait_served(src: &str, addr: SocketAddr) -> TcpStream {
    let deadline = Instant::now() + LIMIT;
    loop {
        let mut s = connect_from(src, addr).await;
        if try_get(&mut s, "/", "").await.is_some_and(|h| status_of(&h) == 200) {
            return s;
        }
        assert!(Instant::now() < deadline, "no connection from {src} served again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `roomgate_refused_total{limit="..."}` on the admin listener's `/metrics` (0 when absent).
async fn refusals(proxy: &Proxy, limit: &str) -> u64 {
    let (status, _, body) = get(&http_client(), &proxy.admin_url("/metrics"), &[]).await;
    assert_eq!(status, StatusCode::OK);
    let prefix = format!("roomgate_refused_total{{limit=\"{limit}\"}} ");
    body.lines().find_map(|l| l.strip_prefix(prefix.as_str())).map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn total_cap_closes_the_next_connection_at_accept_until_one_is_freed() {
    let backends = backends(1).await;
    let extra = format!("[limits]\nmax_connections = 3\n{LONG_IDLE}");
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, &extra)).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(served_from("127.0.0.1", proxy.addr).await);
    }
    let mut fourth = connect_from("127.0.0.1", proxy.addr).await;
    assert_eq!(try_get(&mut fourth, "/", "").await, None, "the 4th connection is closed at accept");
    assert_eq!(refusals(&proxy, "limits.max_connections").await, 1, "the admin listener is not counted");
    held.pop();
    let _again = wait_served("127.0.0.1", proxy.addr).await;
    assert_eq!(proxy.control.gateway().admission().open(), 3);
    proxy.shutdown().await;
}

#[tokio::test]
async fn total_cap_spans_plain_and_tls_listeners() {
    use common::tls::{Ca, client_config, tls_section, try_connect};
    let backends = backends(1).await;
    let certs = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let files = [ca.leaf(&["a.test"]).write(certs.path(), "a")];
    let extra = format!("[limits]\nmax_connections = 1\n{LONG_IDLE}{}", tls_section(&files));
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, &extra)).await;
    let tls_addr = proxy.tls_addr.unwrap();
    let client = client_config(&ca, &[&rustls::version::TLS13], &[b"http/1.1"]);
    let tls = try_connect(tls_addr, "a.test", client.clone()).await.expect("the first connection is served");
    let mut plain = connect_from("127.0.0.1", proxy.addr).await;
    assert_eq!(try_get(&mut plain, "/", "").await, None, "a plain connection past the cap is closed");
    drop(tls);
    let plain = wait_served("127.0.0.1", proxy.addr).await;
    assert!(try_connect(tls_addr, "a.test", client).await.is_err(), "closed before the TLS handshake");
    assert!(refusals(&proxy, "limits.max_connections").await >= 2);
    drop(plain);
    proxy.shutdown().await;
}

#[tokio::test]
async fn per_address_cap_refuses_the_51st_connection_from_one_address_and_serves_another() {
    let backends = backends(1).await;
    let extra = format!("[limits]\nmax_connections_per_ip = 50\n{LONG_IDLE}");
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, &extra)).await;
    let mut held = Vec::new();
    for _ in 0..50 {
        held.push(served_from("127.0.0.2", proxy.addr).await);
    }
    let mut the_51st = connect_from("127.0.0.2", proxy.addr).await;
    let refused = try_get(&mut the_51st, "/", "").await;
    let started = Instant::now();
    let other = served_from("127.0.0.3", proxy.addr).await;
    let took = started.elapsed();
    assert_eq!(refused, None, "the 51st connection from 127.0.0.2 is closed at accept");
    println!(
        "limits.max_connections_per_ip = 50: 50 connections from 127.0.0.2 served and held; the 51st from \
         127.0.0.2 closed at accept; a connection from 127.0.0.3 served (200) in {took:?}"
    );
    assert_eq!(refusals(&proxy, "limits.max_connections_per_ip").await, 1);
    drop(other);
    held.pop();
    let _again = wait_served("127.0.0.2", proxy.addr).await;
    proxy.shutdown().await;
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_is_counted_per_request_and_socket() {
    let backends = backends(1).await;
    let extra =
        format!("[server]\ntrusted_proxies = [\"127.0.0.1\"]\n[limits]\nmax_connections_per_ip = 2\n{LONG_IDLE}");
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, &extra)).await;
    let a = "X-Forwarded-For: 203.0.113.7\r\n";
    // Two requests of 203.0.113.7 held by the backend (`/slow` never answers).
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut s = connect_from("127.0.0.1", proxy.addr).await;
        s.write_all(format!("GET /slow HTTP/1.1\r\nHost: limits.test\r\n{a}\r\n").as_bytes()).await.unwrap();
        slow.push(s);
    }
    // Once both are counted, a third request of the same client gets 503.
    let deadline = Instant::now() + LIMIT;
    let head = loop {
        let mut s = connect_from("127.0.0.1", proxy.addr).await;
        let head = try_get(&mut s, "/", a).await.expect("a trusted proxy's connection is not refused");
        if status_of(&head) == 503 {
            break head;
        }
        assert!(Instant::now() < deadline, "the third request of 203.0.113.7 was never refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(head.to_ascii_lowercase().contains("retry-after: 1\r\n"), "{head}");
    // The client is the last hop a trusted proxy wrote, not what the client claims before it.
    let mut s = connect_from("127.0.0.1", proxy.addr).await;
    let head = try_get(&mut s, "/", "X-Forwarded-For: 6.6.6.6, 203.0.113.7\r\n").await.unwrap();
    assert_eq!(status_of(&head), 503, "{head}");
    // Another client, one request at a time, and the proxy itself (no header) are served; so
    // many connections from the trusted proxy are not refused either.
    for _ in 0..3 {
        let head = try_get(&mut s, "/", "X-Forwarded-For: 203.0.113.8\r\n").await.unwrap();
        assert_eq!(status_of(&head), 200, "{head}");
    }
    let mut own = connect_from("127.0.0.1", proxy.addr).await;
    assert_eq!(status_of(&try_get(&mut own, "/", "").await.unwrap()), 200);

    // WebSockets count as long as they are open.
    let c = [("x-forwarded-for", "203.0.113.9")];
    let first = ws_connect(&proxy.ws_url("/ws/live/?room=r1"), &c).await;
    let _second = ws_connect(&proxy.ws_url("/ws/live/?room=r1"), &c).await;
    let (_s, head) = raw::handshake(proxy.addr, "/ws/live/?room=r1", &[("X-Forwarded-For", "203.0.113.9")]).await;
    assert_eq!(status_of(&head), 503, "{head}");
    drop(first);
    let deadline = Instant::now() + LIMIT;
    loop {
        let (_s, head) = raw::handshake(proxy.addr, "/ws/live/?room=r1", &[("X-Forwarded-For", "203.0.113.9")]).await;
        if status_of(&head) == 101 {
            break;
        }
        assert!(Instant::now() < deadline, "a closed WebSocket was never given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refusals(&proxy, "limits.max_connections_per_ip").await >= 3);
    assert_eq!(refusals(&proxy, "limits.max_connections").await, 0);
    drop(slow);
    proxy.shutdown().await;
}

/// A backend that holds every request until released, and records how many it held at once.
struct GatedBackend {
    addr: SocketAddr,
    gate: Arc<Semaphore>,
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl GatedBackend {
    async fn start() -> GatedBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (gate, now, most) =
            (Arc::new(Semaphore::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (g, n, m) = (gate.clone(), now.clone(), most.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (g, n, m) = (g.clone(), n.clone(), m.clone());
                let service = service_fn(move |_req| {
                    let (g, n, m) = (g.clone(), n.clone(), m.clone());
                    async move {
                        let held = n.fetch_add(1, Ordering::SeqCst) + 1;
                        m.fetch_max(held, Ordering::SeqCst);
                        let _permit = g.acquire().await.unwrap();
                        n.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        GatedBackend { addr, gate, now, most }
    }
}

#[tokio::test]
async fn per_backend_cap_answers_503_while_a_slow_backend_holds_its_requests() {
    let backend = GatedBackend::start().await;
    let extra = format!("[upstream]\nmax_connections_per_backend = 2\n{QUICK_END}");
    let proxy = Proxy::start(&config(&[("gated", backend.addr)], ROUTES, &extra)).await;
    let client = http_client();
    let tasks: Vec<_> = (0..5)
        .map(|i| {
            let (client, url) = (client.clone(), proxy.url(&format!("/lobby/{i}")));
            tokio::spawn(async move { get(&client, &url, &[]).await })
        })
        .collect();
    // Three are refused at once; two wait at the backend.
    let deadline = Instant::now() + LIMIT;
    while tasks.iter().filter(|t| t.is_finished()).count() < 3 || backend.now.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "the requests past the cap were not refused");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    backend.gate.add_permits(1000);
    let mut statuses = Vec::new();
    for t in tasks {
        let (status, headers, _) = t.await.unwrap();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(headers["retry-after"], "1");
        }
        statuses.push(status.as_u16());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 503, 503, 503]);
    assert_eq!(backend.most.load(Ordering::SeqCst), 2, "the backend never saw more than the cap");
    let (status, _, _) = get(&client, &proxy.url("/lobby/again"), &[]).await;
    assert_eq!(status, StatusCode::OK, "the slots are given back");
    assert_eq!(refusals(&proxy, "upstream.max_connections_per_backend").await, 3);
    assert_eq!(refusals(&proxy, "limits.max_connections").await, 0);
    proxy.shutdown().await;
}

#[tokio::test]
async fn per_backend_cap_counts_websocket_tunnels() {
    let backends = backends(1).await;
    let extra = format!("[upstream]\nmax_connections_per_backend = 2\n{QUICK_END}");
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, &extra)).await;
    let first = ws_connect(&proxy.ws_url("/ws/live/?room=r1"), &[]).await;
    let mut second = ws_connect(&proxy.ws_url("/ws/live/?room=r2"), &[]).await;
    assert_eq!(ws_backend(&mut second).await, "b0");
    let (_s, head) = raw::handshake(proxy.addr, "/ws/live/?room=r3", &[]).await;
    assert_eq!(status_of(&head), 503, "{head}");
    assert!(head.to_ascii_lowercase().contains("retry-after: 1\r\n"), "{head}");
    let (status, headers, _) = get(&http_client(), &proxy.url("/lobby"), &[]).await;
    assert_eq!((status, headers["retry-after"].to_str().unwrap()), (StatusCode::SERVICE_UNAVAILABLE, "1"));
    drop(first);
    let deadline = Instant::now() + LIMIT;
    while get(&http_client(), &proxy.url("/lobby"), &[]).await.0 != StatusCode::OK {
        assert!(Instant::now() < deadline, "a closed tunnel was never given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(refusals(&proxy, "upstream.max_connections_per_backend").await, 2);
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_djust_socket_whose_backend_is_full_is_closed_with_4503() {
    let backends = backends(1).await;
    let extra = format!("{EXTRA}[upstream]\nmax_connections_per_backend = 1\n{QUICK_END}");
    let proxy = Proxy::start(&config(&backend_list(&backends), DJUST_ROUTES, &extra)).await;
    // A socket routed by its header holds the backend's one slot.
    let mut holder = ws_connect(&proxy.ws_url("/ws/live/"), &[("x-room", "g0")]).await;
    assert_eq!(ws_backend(&mut holder).await, "b0");
    let code = refused(&proxy, "/ws/strict/", Some(&mount("/room/g1/")), &[DJUST]).await;
    assert_eq!(code, Some(4503));
    assert_eq!(refusals(&proxy, "upstream.max_connections_per_backend").await, 1);
    proxy.shutdown().await;
}
