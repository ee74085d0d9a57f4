//! A client's failures are the client's: bodies that do not parse, uploads abandoned or stalled
//! half way, and handshakes that announce a body get client errors and never count against a
//! backend's health; only the backend's own failures (a bad response head, a 101 it had no
//! reason to send) do.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use futures_util::{StreamExt, stream};
use http::StatusCode;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `request` on a new connection; returns the response (head and body) as text, or what
/// came before the connection closed.
async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(LIMIT, s.read_to_end(&mut out)).await.expect("no response in time");
    String::from_utf8_lossy(&out).into_owned()
}

/// The sum of `roomgate_requests_total` over the series whose labels contain `labels`.
async fn requests(proxy: &Proxy, labels: &str) -> u64 {
    let (_, _, text) = get(&http_client(), &proxy.admin_url("/metrics"), &[]).await;
    text.lines()
        .filter(|l| l.starts_with("roomgate_requests_total{") && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

async fn metric(proxy: &Proxy, line_start: &str) -> u64 {
    let (_, _, text) = get(&http_client(), &proxy.admin_url("/metrics"), &[]).await;
    text.lines().filter(|l| l.starts_with(line_start)).filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).sum()
}

async fn all_up(proxy: &Proxy, ids: &[&str]) {
    for id in ids {
        let (state, _, _) = backend_state(proxy, id).await;
        assert_eq!(state, "active", "backend {id}");
    }
}

/// Runs `n` exchanges, `width` at a time; returns the answers.
async fn flood(addr: std::net::SocketAddr, n: usize, width: usize, request: impl Fn(usize) -> Vec<u8>) -> Vec<String> {
    stream::iter((0..n).map(|i| {
        let req = request(i);
        async move { exchange(addr, &req).await }
    }))
    .buffer_unordered(width)
    .collect()
    .await
}

/// The figure: 1,000 malformed uploads and 1,000 uploads abandoned half way, from one
/// client, while a room has a live socket. Every backend stays up and the room does not move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_abandoned_uploads_never_take_a_backend_down() {
    let backends = backends(3).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, "")).await;
    let mut live = ws_connect(&proxy.ws_url("/ws/live/?room=live"), &[]).await;
    let owner = ws_backend(&mut live).await;
    let started = Instant::now();

    let malformed = flood(proxy.addr, 1000, 25, |i| {
        format!("POST /room/r{}/ HTTP/1.1\r\nHost: rooms.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", i % 30)
            .into_bytes()
    })
    .await;
    for answer in &malformed {
        assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
        assert!(answer.contains("request body: malformed"), "{answer}");
        for b in &backends {
            assert!(!answer.contains(&b.id) && !answer.contains(&b.addr.to_string()), "names a backend: {answer}");
        }
    }
    let malformed_took = started.elapsed();

    let abandoned = Instant::now();
    // 10 of 100,000 announced bytes, then the connection closes.
    let gone = stream::iter((0..1000).map(|i| {
        let addr = proxy.addr;
        async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let req = format!(
                "POST /room/r{}/ HTTP/1.1\r\nHost: rooms.test\r\nContent-Length: 100000\r\n\r\n0123456789",
                i % 30
            );
            s.write_all(req.as_bytes()).await.unwrap();
            drop(s);
        }
    }))
    .buffer_unordered(25)
    .collect::<Vec<_>>();
    gone.await;
    let abandoned_took = abandoned.elapsed();

    // Each abandoned upload ends as roomgate notices the close (400, for its log and metrics):
    // wait (bounded) until all are counted.
    let deadline = Instant::now() + LIMIT * 3;
    loop {
        let counted = requests(&proxy, "status=\"400\"").await;
        if counted >= 2000 {
            break;
        }
        assert!(Instant::now() < deadline, "{counted} of 2,000 uploads answered 400");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(requests(&proxy, "status=\"5").await, 0, "a 5xx was answered");
    let ids: Vec<&str> = backends.iter().map(|b| b.id.as_str()).collect();
    all_up(&proxy, &ids).await;
    assert_eq!(metric(&proxy, "roomgate_health_transitions_total").await, 0, "a backend changed state");
    assert_eq!(ws_backend(&mut live).await, owner, "the live room moved");
    let (status, _, body) = get(&http_client(), &proxy.url("/room/live/"), &[]).await;
    assert_eq!((status, body), (StatusCode::OK, owner.clone()));
    println!(
        "1,000 malformed uploads (400) in {malformed_took:?}, 1,000 abandoned in {abandoned_took:?}; \
         backends up, room still on {owner}"
    );
}

/// A body that stops coming is the client's (408), whether it stalls or trickles past its
/// deadline; the backend that waited for it is not blamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_and_slow_uploads_get_408_and_never_count_against_the_backend() {
    let backends = backends(1).await;
    let extra = "[timeouts]\nrequest_body_idle = \"300ms\"\nrequest_body = \"1s\"\n[health]\nfall = 1\n";
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, extra)).await;

    // Stalled: 10 of 1,000 bytes, then nothing.
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"POST /room/a/ HTTP/1.1\r\nHost: rooms.test\r\nContent-Length: 1000\r\n\r\n0123456789").await.unwrap();
    let head = common::raw::read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 408 "), "{head}");

    // Trickled: a byte every 100 ms (never idle for 300 ms), past the 1 s deadline.
    let s = TcpStream::connect(proxy.addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    wr.write_all(b"POST /room/a/ HTTP/1.1\r\nHost: rooms.test\r\nContent-Length: 1000\r\n\r\n").await.unwrap();
    let trickle = async {
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if wr.write_all(b"x").await.is_err() {
                break;
            }
        }
    };
    let mut out = Vec::new();
    tokio::select! {
        read = tokio::time::timeout(LIMIT, rd.read_to_end(&mut out)) => drop(read.expect("no answer in time")),
        () = trickle => panic!("no answer after 10 s of trickling"),
    }
    let answer = String::from_utf8_lossy(&out);
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(answer.contains("not complete within"), "{answer}");

    all_up(&proxy, &["b0"]).await;
    let (status, _, body) = get(&http_client(), &proxy.url("/room/a/"), &[]).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "b0"));
}

/// The backend's own failures still count: a response head that does not parse gets 502, and
/// after `health.fall` of them the backend is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_answers_garbage_is_its_own_failure() {
    let bad = common::raw::fixed_backend(b"this is not http\r\n\r\n".to_vec()).await;
    let extra = "[health]\nfall = 2\n";
    let proxy = Proxy::start(&config(&[("bad", bad)], ROUTES, extra)).await;
    for _ in 0..2 {
        let (status, _, body) = get(&http_client(), &proxy.url("/room/a/"), &[]).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert!(!body.contains("bad") && !body.contains(&bad.to_string()), "names the backend: {body}");
    }
    let (state, _, _) = backend_state(&proxy, "bad").await;
    assert_eq!(state, "down");
}

/// A 101 to a request that asked for no upgrade is the backend's failure: 502, no tunnel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_101_to_a_plain_request_is_a_bad_gateway() {
    let bad = common::raw::fixed_backend(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n".to_vec(),
    )
    .await;
    let proxy = Proxy::start(&config(&[("bad", bad)], ROUTES, "")).await;
    let answer = exchange(proxy.addr, b"GET /room/a/ HTTP/1.1\r\nHost: rooms.test\r\nConnection: close\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 502 "), "{answer}");
}

/// A WebSocket handshake that announces a body, or is not a GET, gets 400 and never reaches a
/// backend (it would hold the backend's connection waiting for the body).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_with_a_body_or_another_method_get_400() {
    let backends = backends(1).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, "")).await;
    let cases = [
        ("GET", "Content-Length: 35\r\n"),
        ("GET", "Transfer-Encoding: chunked\r\n"),
        ("POST", ""),
        ("PUT", "Content-Length: 0\r\n"),
    ];
    for (method, extra) in cases {
        let req = format!(
            "{method} /ws/live/?room=a HTTP/1.1\r\nHost: rooms.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n"
        );
        let started = Instant::now();
        let mut s = TcpStream::connect(proxy.addr).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let head = common::raw::read_head(&mut s).await;
        assert!(head.starts_with("HTTP/1.1 400 "), "{method} {extra}: {head}");
        assert!(started.elapsed() < Duration::from_secs(5), "{method} {extra}: answered late");
    }
    // A handshake with `Content-Length: 0` is still one.
    let (mut s, head) = common::raw::handshake(proxy.addr, "/ws/live/?room=a", &[("Content-Length", "0")]).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    drop(s.shutdown().await);
    assert_eq!(backends[0].accepted.load(std::sync::atomic::Ordering::Relaxed), 1, "only the good handshake");
}

/// Client-address headers from an untrusted client are not passed on as they came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_client_address_headers_are_replaced() {
    let backends = backends(1).await;
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, "")).await;
    let spoof = [("X-Real-IP", "6.6.6.6"), ("True-Client-IP", "6.6.6.6"), ("CF-Connecting-IP", "6.6.6.6")];
    let (status, _, body) = get(&http_client(), &proxy.url("/echo-headers"), &spoof).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("x-real-ip: 127.0.0.1\n"), "{body}");
    assert!(!body.contains("6.6.6.6"), "{body}");
}

/// A forwarding or client-address field spelt with `_` (`X_Forwarded_Proto`) reads, to a WSGI
/// or Rack server, as the field itself: Django's `HTTP_X_FORWARDED_PROTO` joins both, the
/// client's first. So from an untrusted client every spelling goes, and the twin goes even from
/// a trusted proxy (no proxy writes one), on HTTP/1.1 and HTTP/2 alike (issue 32 item 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_fields_spelt_with_underscores_are_dropped_on_both_protocols() {
    let backends = backends(1).await;
    let spoof = [
        ("X_Forwarded_Proto", "https"),
        ("X_Forwarded_For", "6.6.6.6"),
        ("x-forwarded_host", "evil.example"),
        ("X_Real_IP", "6.6.6.6"),
        ("True_Client_IP", "6.6.6.6"),
        ("X-Forwarded-Port", "6666"),
        ("X-Forwarded-Prefix", "/evil"),
        ("Forwarded", "for=6.6.6.6"),
        ("X_Room", "kept"),
    ];
    let h2 = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Full<Bytes>>();
    for (trusted, extra) in [(false, ""), (true, "[server]\ntrusted_proxies = [\"127.0.0.0/8\"]\n")] {
        let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, extra)).await;
        for (protocol, client) in [("HTTP/1.1", &http_client()), ("HTTP/2", &h2)] {
            let (status, _, body) = get(client, &proxy.url("/echo-headers"), &spoof).await;
            let case = format!("{protocol}, trusted: {trusted}:\n{body}");
            assert_eq!(status, StatusCode::OK, "{case}");
            assert!(body.contains("x_room: kept\n"), "an underscore in another name is kept: {case}");
            for twin in ["x_forwarded", "x-forwarded_host", "x_real_ip", "true_client_ip"] {
                assert!(!body.contains(twin), "{twin} forwarded: {case}");
            }
            assert!(body.contains("x-forwarded-proto: http\n") && !body.contains("https"), "{case}");
            assert!(!body.contains("evil.example") && body.contains("x-forwarded-for: 127.0.0.1\n"), "{case}");
            // A trusted proxy's own dash-spelt fields pass; an untrusted client's do not.
            for field in ["x-forwarded-port: 6666\n", "x-forwarded-prefix: /evil\n", "forwarded: for=6.6.6.6\n"] {
                assert_eq!(body.contains(field), trusted, "{field:?}: {case}");
            }
        }
        proxy.shutdown().await;
    }
}
