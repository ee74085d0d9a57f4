//! Retries on roomgate's HTTP/1 path (issue 32, item 11): a request whose reused backend
//! connection closes before the answer is sent again on a fresh one only when its method is
//! idempotent (RFC 9110 section 9.2.2); a POST may have taken effect, so it is answered 502.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::rawhttp::{Answer, RawBackend, read_responses};
use common::{LIMIT, Proxy, ROUTES, backend_state, config};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A backend that answers `/first`, and closes the connection right after reading the head of
/// the first `/second` it gets (answering any later one).
async fn closing_backend() -> RawBackend {
    let seconds = Arc::new(AtomicUsize::new(0));
    RawBackend::start(move |h| match h.path() {
        "/second" if seconds.fetch_add(1, Ordering::SeqCst) == 0 => Answer::EarlyClose(Vec::new()),
        _ => Answer::Echo,
    })
    .await
}

/// `/first` then `method /second` on one client connection (so that the second finds the
/// first's backend connection back in the pool); the second's status and how many times the
/// backend saw it.
async fn second_after_reuse(method: &str) -> (u16, usize) {
    let backend = closing_backend().await;
    let proxy = Proxy::start(&config(&[("raw", backend.addr)], ROUTES, "[health]\nfall = 1\n")).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"GET /first HTTP/1.1\r\nhost: a\r\n\r\n").await.unwrap();
    assert_eq!(read_responses(&mut s, 1, LIMIT).await.statuses(), [200]);
    s.write_all(format!("{method} /second HTTP/1.1\r\nhost: a\r\n\r\n").as_bytes()).await.unwrap();
    let out = read_responses(&mut s, 1, LIMIT).await;
    let statuses = out.statuses();
    assert_eq!(statuses.len(), 1, "{}\n--- backend ---\n{}", out.text(), backend.all_text());
    let seen = backend.requests().iter().filter(|r| r.head.path() == "/second").count();
    assert_eq!(backend.conns().len(), if seen == 2 { 2 } else { 1 }, "{}", backend.all_text());
    // The backend closing a pooled connection as a request came is a race with its keep-alive
    // timeout, not a broken backend (with fall = 1, one failure would mark it down).
    assert_ne!(backend_state(&proxy, "raw").await.0, "down");
    (statuses[0], seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bodiless_post_on_a_reused_connection_that_closes_is_not_sent_again() {
    assert_eq!(second_after_reuse("POST").await, (502, 1), "answered 502, reached the backend once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_on_a_reused_connection_that_closes_is_sent_again_on_a_fresh_one() {
    assert_eq!(second_after_reuse("GET").await, (200, 2), "retried, and answered");
}
