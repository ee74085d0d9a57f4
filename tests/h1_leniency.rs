//! What llhttp's strict mode refuses and roomgate once forwarded (issue 32 items 13 and 14),
//! through a real roomgate and a raw backend: a bare LF in a head and a lax chunk-size line get
//! 400, the connection closes and the backend sees nothing; an absolute-form target with an
//! empty path reaches the backend as `/` and its query.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::rawhttp::{RawBackend, exchange, read_responses};
use common::{LIMIT, Proxy, ROUTES, config};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// How long a client waits, with nothing new coming, before it calls a connection left open.
const QUIET: Duration = Duration::from_secs(3);

async fn proxy_for(backend: &RawBackend) -> Proxy {
    Proxy::start(&config(&[("raw", backend.addr)], ROUTES, "[health]\nfall = 100\n")).await
}

/// Sends each case on its own connection, with a GET of `/{tag}{i}/after` pipelined behind it:
/// each must get one 400 and a closed connection, and no byte of `/{tag}{i}/` may reach the
/// backend. `{P}` in a case is its path.
async fn assert_refused(tag: &str, cases: &[(&str, String)]) {
    let backend = RawBackend::echo().await;
    let proxy = proxy_for(&backend).await;
    let mut failures = Vec::new();
    for (i, (name, req)) in cases.iter().enumerate() {
        let p = format!("/{tag}{i}");
        let bytes = format!("{}GET {p}/after HTTP/1.1\r\nHost: rooms.test\r\n\r\n", req.replace("{P}", &p));
        let out = exchange(proxy.addr, bytes.as_bytes(), QUIET).await;
        if out.statuses() != [400] || !out.closed {
            failures.push(format!("{name}: got {:?} (closed: {}): {:?}", out.statuses(), out.closed, out.text()));
        }
        if backend.received(&format!("{p}/")) {
            failures.push(format!("{name}: reached the backend:\n{}", backend.all_text()));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_lf_anywhere_in_the_head_gets_400_and_never_reaches_the_backend() {
    let post = |fields: &str| format!("POST {{P}}/req HTTP/1.1\r\nHost: rooms.test\r\n{fields}\r\n");
    let cases = [
        // The desync of issue 32: one field to a CRLF-only front proxy, two and a body here.
        ("a bare LF ending a field line", post("Dummy: x\nContent-Length: 23\r\n") + "GET /smuggled HTTP/1.1\r\n\r\n"),
        ("a bare LF ending the request line", "GET {P}/req HTTP/1.1\nHost: rooms.test\r\n\r\n".to_owned()),
        ("a bare LF as the final empty line", "GET {P}/req HTTP/1.1\r\nHost: rooms.test\r\n\n".to_owned()),
        ("bare LFs throughout", "GET {P}/req HTTP/1.1\nHost: rooms.test\n\n".to_owned()),
        (
            "an empty field then a bare LF (llhttp invalid.md)",
            post("x:\nTransfer-Encoding: chunked\r\n") + "1\r\nA\r\n0\r\n\r\n",
        ),
    ];
    assert_refused("lf", &cases).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lax_chunk_size_lines_get_400_and_never_reach_the_backend() {
    let chunked =
        |body: &str| format!("POST {{P}}/req HTTP/1.1\r\nHost: rooms.test\r\nTransfer-Encoding: chunked\r\n\r\n{body}");
    let cases = [
        ("an empty extension (2;)", chunked("2;\r\nhi\r\n0\r\n\r\n")),
        ("whitespace after the size (a )", chunked("a \r\n0123456789\r\n0\r\n\r\n")),
        ("whitespace before a ;", chunked("5 ;a\r\nhello\r\n0\r\n\r\n")),
        ("whitespace after a ;", chunked("5; a\r\nhello\r\n0\r\n\r\n")),
        ("whitespace around =", chunked("5;a = b\r\nhello\r\n0\r\n\r\n")),
        ("an extension with no value after =", chunked("5;a=\r\nhello\r\n0\r\n\r\n")),
        ("an unbalanced quote", chunked("5;a=\"b\r\nhello\r\n0\r\n\r\n")),
    ];
    assert_refused("ch", &cases).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn well_formed_chunk_extensions_still_pass() {
    let backend = RawBackend::echo().await;
    let proxy = proxy_for(&backend).await;
    let body = "5;a=b;c;d=\"e; f\"\r\nhello\r\n0;z\r\n\r\n";
    let req = format!("POST /ext HTTP/1.1\r\nHost: rooms.test\r\nTransfer-Encoding: chunked\r\n\r\n{body}");
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let out = read_responses(&mut s, 1, LIMIT).await;
    assert_eq!(out.statuses(), [200], "{:?}", out.text());
    let seen = backend.requests();
    assert_eq!(seen.iter().map(|s| s.body.as_deref()).collect::<Vec<_>>(), [Some(&b"hello"[..])]);
}

/// Issue 32 item 14: `GET http://h?x=1` went to the backend as `GET ?x=1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absolute_form_target_with_an_empty_path_reaches_the_backend_as_a_slash() {
    let backend = RawBackend::echo().await;
    let proxy = proxy_for(&backend).await;
    let cases = [("http://rooms.test?x=1", "/?x=1"), ("http://rooms.test", "/"), ("http://rooms.test/a?x=1", "/a?x=1")];
    for (target, want) in cases {
        let req = format!("GET {target} HTTP/1.1\r\nHost: rooms.test\r\nConnection: close\r\n\r\n");
        let out = exchange(proxy.addr, req.as_bytes(), QUIET).await;
        let bodies: Vec<String> = out.responses().iter().map(|r| r.body_text()).collect();
        assert_eq!((out.statuses(), bodies), (vec![200], vec![want.to_owned()]), "{target}: {:?}", out.text());
    }
    let paths: Vec<String> = backend.requests().iter().map(|s| s.head.path().to_owned()).collect();
    assert_eq!(paths, ["/?x=1", "/", "/a?x=1"]);
}
