//! Request smuggling and message framing on the HTTP/1 forwarding path, as specified (RFC 9112
//! and the advisories named per test), whatever the forwarding code underneath: ambiguous or
//! invalid framing gets 400 and a closed connection and never reaches a backend; a bad chunked
//! body never lets what follows it through; an early or close-delimited answer, an HTTP/1.0 peer
//! and a non-101 "upgrade" never desynchronise either side; a bad response frame gets 502 or a
//! cut connection, never bytes of another response. Every test talks raw bytes to a raw backend
//! (`common::rawhttp`) that records what each of its connections received.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::rawhttp::{Answer, Outcome, RawBackend, exchange, ok, read_responses, read_until_close};
use common::{LIMIT, Proxy, ROUTES, config};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// How long a client waits, with nothing new coming, before it calls a connection left open.
const QUIET: Duration = Duration::from_secs(3);

/// Passive health never takes the one backend down in these tests; ends do not wait long.
const EXTRA: &str = "[health]\nfall = 100\n[shutdown]\ngrace = \"200ms\"\n";

async fn proxy_for(backend: &RawBackend, extra: &str) -> Proxy {
    Proxy::start(&config(&[("raw", backend.addr)], ROUTES, &format!("{EXTRA}{extra}"))).await
}

/// Sends each case (its `{P}` replaced by a path of its own, and a GET of that path's `/after`
/// pipelined behind it) on a connection of its own, all at once. Each must get exactly one 400,
/// then the connection closes, and the backend must never receive a byte of it (nor of the GET
/// behind it). Reports every failing case by name.
async fn assert_rejected(tag: &str, cases: &[(&str, String)]) {
    let backend = RawBackend::echo().await;
    let proxy = proxy_for(&backend, "").await;
    let sends = cases.iter().enumerate().map(|(i, (_, req))| {
        let p = format!("/{tag}{i}");
        let bytes = format!("{}GET {p}/after HTTP/1.1\r\nHost: rooms.test\r\n\r\n", req.replace("{P}", &p));
        async move { exchange(proxy.addr, bytes.as_bytes(), QUIET).await }
    });
    let outcomes = futures_util::future::join_all(sends).await;
    let mut failures = Failures::default();
    for (i, ((name, _), out)) in cases.iter().zip(&outcomes).enumerate() {
        if out.statuses() != [400] {
            failures.add(name, format!("got {:?}, want one 400: {:?}", out.statuses(), out.text()));
        } else if !out.closed {
            failures.add(name, "the connection stayed open after the 400");
        }
        if backend.received(&format!("/{tag}{i}/")) {
            failures.add(name, "reached the backend");
        }
    }
    failures.check(cases.len());
}

/// What went wrong, per case of a table-driven test.
#[derive(Default)]
struct Failures(Vec<(String, Vec<String>)>);

impl Failures {
    fn add(&mut self, case: &str, problem: impl Into<String>) {
        match self.0.iter_mut().find(|(c, _)| c == case) {
            Some((_, problems)) => problems.push(problem.into()),
            None => self.0.push((case.to_owned(), vec![problem.into()])),
        }
    }

    /// Panics naming every failing case and its problems.
    fn check(&self, cases: usize) {
        let lines: Vec<String> = self.0.iter().map(|(c, p)| format!("{c}: {}", p.join("; "))).collect();
        assert!(lines.is_empty(), "{} of {cases} cases failed:\n{}", lines.len(), lines.join("\n"));
    }
}

/// A POST of `{P}/req` with extra header lines and a body.
fn post(headers: &str, body: &str) -> String {
    format!("POST {{P}}/req HTTP/1.1\r\nHost: rooms.test\r\n{headers}\r\n{body}")
}

const CHUNKED_HELLO: &str = "5\r\nhello\r\n0\r\n\r\n";

// === 1. framing the head announces (RFC 9112 section 6) ===

/// RFC 9112 6.1/6.3: Content-Length with Transfer-Encoding is the CL.TE / TE.CL smuggling shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_with_transfer_encoding_is_rejected() {
    let cases = [
        (
            "Content-Length then Transfer-Encoding",
            post("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"),
        ),
        (
            "Transfer-Encoding then Content-Length",
            post("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n"),
        ),
        ("Content-Length 0 with chunked", post("Content-Length: 0\r\nTransfer-Encoding: chunked\r\n", CHUNKED_HELLO)),
    ];
    assert_rejected("clte", &cases).await;
}

/// RFC 9112 6.3 (5): more than one length, even the same one, is not forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_content_lengths_are_rejected() {
    let cases = [
        ("two different Content-Lengths", post("Content-Length: 5\r\nContent-Length: 6\r\n", "hello!")),
        ("the same Content-Length twice", post("Content-Length: 5\r\nContent-Length: 5\r\n", "hello")),
        ("a list `5, 5`", post("Content-Length: 5, 5\r\n", "hello")),
    ];
    assert_rejected("dupcl", &cases).await;
}

/// RFC 9112 6.3 (5) and RFC 9110 8.6: Content-Length = 1*DIGIT, and must fit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_content_lengths_are_rejected() {
    let values = ["+5", "-1", "5a", "", "0x5", "99999999999999999999999", "5 5"];
    let cases: Vec<(&str, String)> =
        values.iter().map(|v| (*v, post(&format!("Content-Length: {v}\r\n"), "hello"))).collect();
    assert_rejected("badcl", &cases).await;
}

/// RFC 9112 6.3 (4): a request whose last coding is not chunked has no length; chunked must be
/// applied once only (RFC 9112 7: "MUST NOT apply chunked more than once").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_codings_other_than_one_final_chunked_are_rejected() {
    let cases = [
        ("chunked, gzip", post("Transfer-Encoding: chunked, gzip\r\n", CHUNKED_HELLO)),
        ("gzip", post("Transfer-Encoding: gzip\r\n", CHUNKED_HELLO)),
        ("identity", post("Transfer-Encoding: identity\r\n", CHUNKED_HELLO)),
        ("chunked , chunked", post("Transfer-Encoding: chunked , chunked\r\n", CHUNKED_HELLO)),
        (
            "two Transfer-Encoding: chunked headers",
            post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", CHUNKED_HELLO),
        ),
    ];
    assert_rejected("te", &cases).await;
}

/// kawa (fixed in 0.7): `Transfer-Encoding` was matched by suffix, so `xchunked` framed a body as
/// chunked. A coding is a token: anything but `chunked` is not chunked, and then 400 as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kawa_transfer_encoding_suffix_matching_is_not_chunked() {
    let cases: Vec<(&str, String)> = ["xchunked", "notchunked", "chunkedx", "chunked-x", "\"chunked\""]
        .iter()
        .map(|te| (*te, post(&format!("Transfer-Encoding: {te}\r\n"), CHUNKED_HELLO)))
        .collect();
    assert_rejected("kawa", &cases).await;
}

/// RFC 9112 6.1: chunked on an HTTP/1.0 request is not framing an HTTP/1.0 peer understands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_on_an_http10_request_is_rejected() {
    let cases = [(
        "HTTP/1.0 with Transfer-Encoding: chunked",
        format!("POST {{P}}/req HTTP/1.0\r\nHost: rooms.test\r\nTransfer-Encoding: chunked\r\n\r\n{CHUNKED_HELLO}"),
    )];
    assert_rejected("ten", &cases).await;
}

/// RFC 9112 5.1/5.2 and RFC 9110 5.5: no obs-fold, no whitespace before the colon, no CR or NUL
/// in a field value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_header_lines_are_rejected() {
    let get = |lines: &str| format!("GET {{P}}/req HTTP/1.1\r\n{lines}\r\n");
    let cases = [
        ("obs-fold with a space", get("Host: rooms.test\r\nX-A: a\r\n b\r\n")),
        ("obs-fold with a tab", get("Host: rooms.test\r\nX-A: a\r\n\tb\r\n")),
        ("obs-fold continuing Transfer-Encoding", get("Host: rooms.test\r\nTransfer-Encoding: gzip\r\n chunked\r\n")),
        ("a bare CR in a value", get("Host: rooms.test\r\nX-A: a\rb\r\n")),
        ("a NUL in a value", get("Host: rooms.test\r\nX-A: a\0b\r\n")),
        ("a space before the colon (Host)", get("Host : rooms.test\r\n")),
        ("a space before the colon", get("Host: rooms.test\r\nX-A : a\r\n")),
        ("a tab before the colon", get("Host: rooms.test\r\nX-A\t: a\r\n")),
        ("a space before the colon (Transfer-Encoding)", post("Transfer-Encoding : chunked\r\n", CHUNKED_HELLO)),
    ];
    assert_rejected("hdr", &cases).await;
}

/// RFC 9112 2.2 lets a recipient accept a bare LF as a line end. Either answer is fine, as long
/// as it is consistent: a 400 that never reaches the backend, or both requests forwarded, each
/// whole, with the body its Content-Length gave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_lf_line_ends_are_rejected_or_framed_consistently() {
    let backend = RawBackend::echo().await;
    let proxy = proxy_for(&backend, "").await;
    let req = b"POST /lf/req HTTP/1.1\nHost: rooms.test\nContent-Length: 5\n\nhelloGET /lf/after HTTP/1.1\nHost: rooms.test\n\n";
    let out = exchange(proxy.addr, req, QUIET).await;
    if out.statuses() == [400] {
        println!("bare LF line ends: rejected with 400");
        assert!(out.closed, "the connection stayed open after the 400");
        assert!(!backend.received("/lf/"), "a rejected request reached the backend:\n{}", backend.all_text());
        return;
    }
    println!("bare LF line ends: accepted and forwarded");
    let bodies: Vec<String> = out.responses().iter().map(|r| r.body_text()).collect();
    assert_eq!((out.statuses(), bodies), (vec![200, 200], vec!["/lf/req".to_owned(), "/lf/after".to_owned()]));
    let seen = backend.requests();
    let got: Vec<(&str, Option<&[u8]>)> = seen.iter().map(|s| (s.head.path(), s.body.as_deref())).collect();
    assert_eq!(got, [("/lf/req", Some(&b"hello"[..])), ("/lf/after", Some(&b""[..]))]);
}

// === 2. chunked bodies that go bad after a valid head ===

/// RFC 9112 7.1: chunk-size = 1*HEXDIG, chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS value ] ),
/// CRLF after the size line and after the data. A body that breaks this gets 400 (or a closed
/// connection, never a 2xx); the request pipelined behind it never reaches the backend; and the
/// backend connection the bad body went to is not used again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_chunked_bodies_stop_the_connection_and_are_never_reused() {
    let backend = RawBackend::echo().await;
    let proxy = proxy_for(&backend, "").await;
    let cases = [
        ("a size that is not hex", "5\r\nhello\r\ng\r\nhello\r\n0\r\n\r\n"),
        ("an empty size line", "\r\nhello\r\n0\r\n\r\n"),
        ("a 0x prefix", "0x5\r\nhello\r\n0\r\n\r\n"),
        ("a space before the size", " 5\r\nhello\r\n0\r\n\r\n"),
        ("a size of 17 hex digits (overflows u64)", "10000000000000005\r\nhello\r\n0\r\n\r\n"),
        ("a control character in an extension", "5;a\x01b\r\nhello\r\n0\r\n\r\n"),
        ("a bare LF ending an extension", "5;name\nhello\r\n0\r\n\r\n"),
        ("no CRLF after the data", "5\r\nhelloXX0\r\n\r\n"),
        ("data longer than its size", "5\r\nhello world\r\n0\r\n\r\n"),
        ("no CRLF after the last chunk", "5\r\nhello\r\n0\r\nX"),
    ];
    let mut failures = Failures::default();
    for (i, (name, body)) in cases.iter().enumerate() {
        let p = format!("/ch{i}");
        let req = format!(
            "POST {p}/bad HTTP/1.1\r\nHost: rooms.test\r\nTransfer-Encoding: chunked\r\n\r\n{body}\
             GET {p}/after HTTP/1.1\r\nHost: rooms.test\r\n\r\n"
        );
        let out = exchange(proxy.addr, req.as_bytes(), QUIET).await;
        let statuses = out.statuses();
        if statuses.iter().any(|s| (200..300).contains(s)) || statuses.len() > 1 || !out.closed {
            failures.add(name, format!("got {statuses:?} (closed: {}), want a 400 then close", out.closed));
        }
        // A new client's request: on a backend connection other than the bad body's.
        let fresh = format!("GET {p}/fresh HTTP/1.1\r\nHost: rooms.test\r\nConnection: close\r\n\r\n");
        let answer = exchange(proxy.addr, fresh.as_bytes(), QUIET).await;
        let bodies: Vec<String> = answer.responses().iter().map(|r| r.body_text()).collect();
        if bodies != [format!("{p}/fresh")] {
            failures.add(name, format!("the next client got {bodies:?}: {:?}", answer.text()));
        }
        if backend.received(&format!("{p}/after")) {
            failures.add(name, "the request behind the bad body reached the backend");
        }
        if backend.conns().iter().any(|c| c.head_after(&format!("{p}/bad "))) {
            failures.add(name, "the bad body's backend connection carried another request");
        }
    }
    failures.check(cases.len());
}

/// RFC 9112 7.1.1: extensions a recipient does not understand are ignored; the body arrives
/// whole (re-chunked or not). `5 \r\n` (whitespace after the size, which the grammar allows only
/// before a `;`) may be refused, but if it is accepted, it is read as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_chunk_extensions_are_accepted_and_the_body_arrives_whole() {
    let backend = RawBackend::echo().await;
    let proxy = proxy_for(&backend, "").await;
    let body = "5;name=value\r\nhello\r\n6;n=\"q s\";flag\r\n world\r\n0\r\n\r\n";
    let req = format!("POST /ext/ok HTTP/1.1\r\nHost: rooms.test\r\nTransfer-Encoding: chunked\r\n\r\n{body}");
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let out = read_responses(&mut s, 1, LIMIT).await;
    assert_eq!(out.statuses(), [200], "{:?}", out.text());
    let seen = backend.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body.as_deref(), Some(&b"hello world"[..]), "{}", backend.all_text());

    let req = "POST /ext/ws HTTP/1.1\r\nHost: rooms.test\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n";
    let out = exchange(proxy.addr, req.as_bytes(), QUIET).await;
    match out.statuses()[..] {
        [400] => assert!(!backend.received("/ext/ws"), "refused, yet it reached the backend"),
        [200] => {
            let seen = backend.requests();
            let ws = seen.iter().find(|s| s.head.path() == "/ext/ws").unwrap();
            assert_eq!(ws.body.as_deref(), Some(&b"hello"[..]));
        }
        _ => panic!("`5 \\r\\n`: got {:?}: {:?}", out.statuses(), out.text()),
    }
    println!("`5 \\r\\n` as a chunk size line: {:?}", out.statuses());
}

/// RFC 9110 7.6.1 has a proxy remove every field its `Connection` names, but the body's framing
/// is roomgate's to write: a client that names `Content-Length` (or `Transfer-Encoding`) in
/// `Connection` must not get its body forwarded without a length, where the backend would read
/// it as the next request (a smuggled `GET /smuggled` past every check roomgate makes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_fields_named_in_connection_still_frame_the_forwarded_body() {
    let backend = RawBackend::echo().await;
    let proxy = proxy_for(&backend, "").await;
    let inner = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let chunked = format!("Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{inner}\r\n0\r\n\r\n", inner.len());
    let length = smuggling_upload("/{P}");
    let cases = [
        ("Connection: content-length", length.replacen("\r\n", "\r\nConnection: content-length\r\n", 1)),
        (
            "Connection: Content-Length, keep-alive",
            length.replacen("\r\n", "\r\nConnection: Content-Length, keep-alive\r\n", 1),
        ),
        (
            "Connection: transfer-encoding",
            format!("POST /{{P}} HTTP/1.1\r\nHost: rooms.test\r\nConnection: transfer-encoding\r\n{chunked}"),
        ),
    ];
    let mut failures = Failures::default();
    for (i, (name, req)) in cases.iter().enumerate() {
        let p = format!("conn{i}");
        // A smuggled path of the same length per case, so that each case is judged on its own.
        let smuggled = format!("/smuggle{i}");
        let req = req.replace("{P}", &p).replace("/smuggled", &smuggled);
        let mut s = TcpStream::connect(proxy.addr).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let out = read_responses(&mut s, 1, LIMIT).await;
        if out.statuses() != [200] {
            failures.add(name, format!("got {:?}: {:?}", out.statuses(), out.text()));
        }
        // The next request on the same connection: answered as itself, and once it is, the
        // backend has read everything the first one brought.
        let next = format!("GET /{p}/next HTTP/1.1\r\nHost: rooms.test\r\n\r\n");
        s.write_all(next.as_bytes()).await.unwrap();
        let bodies: Vec<String> =
            read_responses(&mut s, 1, LIMIT).await.responses().iter().map(|r| r.body_text()).collect();
        if bodies != [format!("/{p}/next")] {
            failures.add(name, format!("the next request got {bodies:?}"));
        }
        let seen = backend.requests();
        match seen.iter().find(|r| r.head.path() == format!("/{p}")) {
            Some(r) if r.body.as_ref().is_some_and(|b| b.starts_with(format!("GET {smuggled} ").as_bytes())) => {}
            other => failures.add(name, format!("the backend read the body as {:?}", other.map(|r| &r.body))),
        }
        if seen.iter().any(|r| r.head.path() == smuggled) {
            failures.add(name, "the body reached the backend as a request");
        }
    }
    failures.check(cases.len());
}

// === 3. advisories ===

/// A POST whose 40-byte body is a whole `GET /smuggled` request.
fn smuggling_upload(path: &str) -> String {
    let mut inner = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n".to_owned();
    inner.insert_str(inner.find("\r\n\r\n").unwrap(), &"x".repeat(40 - inner.len()));
    assert_eq!(inner.len(), 40);
    format!("POST {path} HTTP/1.1\r\nHost: rooms.test\r\nContent-Length: 40\r\n\r\n{inner}")
}

/// Pingora CVE-2025-4366: a response served before the request body was read left the body on
/// the connection, and it was then parsed as the next request. Whether the backend answers
/// early and drains the body afterwards or answers early and closes, and whether the next
/// request comes after the answer or pipelined behind the body, `GET /smuggled` is never a
/// request, and the next request is answered as itself (or the connection is closed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cve_2025_4366_a_body_answered_early_is_never_read_as_a_request() {
    let early_close = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nearly".to_vec();
    let variants = [
        ("answers early, then drains", Answer::Early(ok("early"))),
        ("answers early and closes", Answer::EarlyClose(early_close)),
    ];
    for (what, answer) in variants {
        let backend =
            RawBackend::start(move |h| if h.path() == "/upload" { answer.clone() } else { Answer::Echo }).await;
        let proxy = proxy_for(&backend, "").await;
        for pipelined in [false, true] {
            let case = format!("{what}, second request {}", if pipelined { "pipelined" } else { "after the answer" });
            let second = "GET /second HTTP/1.1\r\nHost: rooms.test\r\n\r\n";
            let mut s = TcpStream::connect(proxy.addr).await.unwrap();
            let upload = smuggling_upload("/upload");
            let (first, rest) = if pipelined { (upload + second, "") } else { (upload, second) };
            s.write_all(first.as_bytes()).await.unwrap();
            let out = read_responses(&mut s, 1, LIMIT).await;
            let mut responses = out.responses();
            assert!(!responses.is_empty() || out.closed, "{case}: no answer to the upload: {:?}", out.text());
            if !rest.is_empty() && !out.closed {
                let _ = s.write_all(rest.as_bytes()).await;
            }
            let more = read_until_close(&mut s, QUIET).await;
            let mut all = out.bytes.clone();
            all.extend_from_slice(&more.bytes);
            responses = Outcome { bytes: all, closed: more.closed }.responses();
            let bodies: Vec<String> = responses.iter().map(|r| r.body_text()).collect();
            assert!(responses.len() <= 2, "{case}: {bodies:?}");
            if let Some(r) = responses.get(1) {
                assert_eq!((r.status(), r.body_text().as_str()), (200, "/second"), "{case}");
            }
            assert!(!bodies.iter().any(|b| b.contains("smuggled")), "{case}: {bodies:?}");
            let paths: Vec<String> = backend.requests().iter().map(|s| s.head.path().to_owned()).collect();
            assert!(!paths.iter().any(|p| p.contains("smuggled")), "{case}: the body was a request: {paths:?}");
            println!(
                "{case}: answers {:?}, connection closed: {}",
                responses.iter().map(|r| r.status()).collect::<Vec<_>>(),
                more.closed
            );
        }
    }
}

/// A WebSocket handshake for `path`, by hand.
fn handshake(path: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: rooms.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
}

/// Pingora (2026): a tunnel was opened on a backend's answer to an upgrade request that was not a
/// 101. Here the backend answers `200` with `Connection: Upgrade` / `Upgrade: websocket` and then
/// writes more bytes: the client gets no 101, and no tunnel carries bytes either way. A 101 with
/// a wrong `Sec-WebSocket-Accept` followed by bytes gets 502 and no tunnel either (its plain 502
/// is tests/websocket_strict.rs `a_101_that_does_not_complete_the_websocket_handshake_is_502`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tunnel_before_a_real_101() {
    let not_101 = b"HTTP/1.1 200 OK\r\nConnection: Upgrade\r\nUpgrade: websocket\r\ncontent-length: 0\r\n\r\nBACKEND-TUNNEL-BYTES".to_vec();
    let bad_101 = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
                   Sec-WebSocket-Accept: d3Jvbmc=\r\n\r\nBACKEND-TUNNEL-BYTES"
        .to_vec();
    for (what, answer, want) in
        [("a 200 with Upgrade headers", not_101, None), ("a 101 with a wrong accept", bad_101, Some(502))]
    {
        let backend = RawBackend::start(move |_| Answer::ReplyHold(answer.clone())).await;
        let proxy = proxy_for(&backend, "").await;
        let mut s = TcpStream::connect(proxy.addr).await.unwrap();
        s.write_all(handshake("/ws/tunnel").as_bytes()).await.unwrap();
        let out = read_responses(&mut s, 1, LIMIT).await;
        let status = out.statuses().first().copied();
        assert!(status.is_some_and(|s| s != 101), "{what}: {:?}", out.text());
        if let Some(want) = want {
            assert_eq!(status, Some(want), "{what}");
        }
        // The client now sends what would be tunnel data.
        let _ = s.write_all(b"CLIENT-TUNNEL-BYTES\r\n\r\n").await;
        let more = read_until_close(&mut s, QUIET).await;
        let all = [out.text(), more.text()].concat();
        assert!(!all.contains("BACKEND-TUNNEL-BYTES"), "{what}: relayed to the client: {all:?}");
        assert!(!backend.received("CLIENT-TUNNEL-BYTES"), "{what}: relayed to the backend:\n{}", backend.all_text());
    }
}

/// Pingora (2026), HTTP/1.0 and close-delimited bodies (a): an HTTP/1.0 request without Host gets
/// the whole body, not chunked (RFC 9112 7: never to an HTTP/1.0 recipient), and the
/// connection closes after it, whatever framing the backend used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_client_gets_the_whole_body_then_close() {
    let chunked =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n".to_vec();
    let backend =
        RawBackend::start(
            move |h| {
                if h.path() == "/ten/chunked" { Answer::Reply(chunked.clone()) } else { Answer::Echo }
            },
        )
        .await;
    let proxy = proxy_for(&backend, "").await;
    for (path, want) in [("/ten/chunked", "hello world"), ("/ten/length", "/ten/length")] {
        let out = exchange(proxy.addr, format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes(), LIMIT).await;
        assert!(out.closed, "{path}: the connection stayed open: {:?}", out.text());
        let responses = out.responses();
        assert_eq!(responses.len(), 1, "{path}: {:?}", out.text());
        assert_eq!((responses[0].status(), responses[0].body_text().as_str()), (200, want), "{path}");
        assert_ne!(responses[0].framing, "chunked", "{path}: chunked to an HTTP/1.0 client");
    }
}

/// Pingora (2026) (b): a backend answers an HTTP/1.1 request with a close-delimited body (no
/// length, no chunked, then closes). The client gets the body whole, re-chunked on a kept
/// connection or close-delimited then closed, and the next request on a kept connection gets
/// its own answer, with nothing of the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_delimited_response_reaches_the_client_whole() {
    let body: String = (0..20_000).map(|i| char::from(b'a' + (i % 26) as u8)).chain("END".chars()).collect();
    let reply = [b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n".as_slice(), body.as_bytes()].concat();
    let backend =
        RawBackend::start(
            move |h| if h.path() == "/cd/first" { Answer::ReplyClose(reply.clone()) } else { Answer::Echo },
        )
        .await;
    let proxy = proxy_for(&backend, "").await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"GET /cd/first HTTP/1.1\r\nHost: rooms.test\r\n\r\n").await.unwrap();
    let out = read_responses(&mut s, 1, LIMIT).await;
    let first = out.responses();
    assert_eq!(first.len(), 1, "{:?}", out.text());
    assert_eq!(first[0].status(), 200);
    assert!(first[0].body == body.as_bytes(), "the body changed: {} bytes", first[0].body.len());
    if out.closed {
        println!("close-delimited response: passed on close-delimited, connection closed");
        return;
    }
    println!("close-delimited response: passed on as {}, connection kept", first[0].framing);
    s.write_all(b"GET /cd/next HTTP/1.1\r\nHost: rooms.test\r\n\r\n").await.unwrap();
    let next = read_responses(&mut s, 1, LIMIT).await;
    let (responses, rest) = common::rawhttp::parse_responses(&next.bytes, next.closed);
    let bodies: Vec<String> = responses.iter().map(|r| r.body_text()).collect();
    assert!(bodies == ["/cd/next"] || (bodies.is_empty() && next.closed), "{:?}", next.text());
    assert!(rest.is_empty(), "bytes after the answer: {:?}", String::from_utf8_lossy(&rest));
}

/// Pingora (2026) (c): an `HTTP/1.0 200` with a Content-Length and no keep-alive ends its
/// connection (RFC 9112 9.3); that backend connection is never used for another request, even
/// if the backend leaves it open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http10_response_backend_connection_is_not_reused() {
    let backend = RawBackend::start(|h| {
        let path = h.path();
        Answer::Reply(format!("HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{path}", path.len()).into_bytes())
    })
    .await;
    let proxy = proxy_for(&backend, "").await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    for i in 0..3 {
        let path = format!("/old/{i}");
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: rooms.test\r\n\r\n").as_bytes()).await.unwrap();
        let out = read_responses(&mut s, 1, LIMIT).await;
        let r = out.responses();
        assert_eq!((r[0].status(), r[0].body_text()), (200, path), "{:?}", out.text());
    }
    let per_conn: Vec<usize> = backend.conns().iter().map(|c| c.requests.len()).collect();
    assert!(per_conn.iter().all(|n| *n <= 1), "requests per backend connection: {per_conn:?}");
}

// === 4. pipelining ===

/// Pipelined requests are answered in order, each by its own answer (the backend echoes the
/// path), or refused cleanly: one 400, then close.
async fn assert_pipelined(proxy: &Proxy, bytes: &[u8], want: &[&str]) -> Outcome {
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let out = read_responses(&mut s, want.len(), LIMIT).await;
    if out.statuses() == [400] {
        let rest = read_until_close(&mut s, QUIET).await;
        assert!(rest.closed && rest.bytes.is_empty(), "a 400, then {:?}", rest.text());
        println!("pipelined {want:?}: refused with 400");
        return out;
    }
    let got: Vec<(u16, String)> = out.responses().iter().map(|r| (r.status(), r.body_text())).collect();
    let expected: Vec<(u16, String)> = want.iter().map(|p| (200, (*p).to_owned())).collect();
    assert_eq!(got, expected, "{:?}", out.text());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let backend = RawBackend::echo().await;
    let proxy = proxy_for(&backend, "").await;
    let gets: String = (1..=3).map(|i| format!("GET /pipe/{i} HTTP/1.1\r\nHost: rooms.test\r\n\r\n")).collect();
    assert_pipelined(&proxy, gets.as_bytes(), &["/pipe/1", "/pipe/2", "/pipe/3"]).await;

    let post_get = "POST /pipe/post HTTP/1.1\r\nHost: rooms.test\r\nContent-Length: 11\r\n\r\nhello world\
                    GET /pipe/get HTTP/1.1\r\nHost: rooms.test\r\n\r\n";
    assert_pipelined(&proxy, post_get.as_bytes(), &["/pipe/post", "/pipe/get"]).await;
    let chunked_get = "POST /pipe/chunked HTTP/1.1\r\nHost: rooms.test\r\nTransfer-Encoding: chunked\r\n\r\n\
                       5\r\nhello\r\n0\r\n\r\nGET /pipe/after HTTP/1.1\r\nHost: rooms.test\r\n\r\n";
    assert_pipelined(&proxy, chunked_get.as_bytes(), &["/pipe/chunked", "/pipe/after"]).await;
    // What the backend got: each request with its own body and nothing else.
    for (path, body) in
        [("/pipe/post", "hello world"), ("/pipe/get", ""), ("/pipe/chunked", "hello"), ("/pipe/after", "")]
    {
        let seen = backend.requests();
        let matching: Vec<_> = seen.iter().filter(|s| s.head.path() == path).collect();
        if let [one] = matching[..] {
            assert_eq!(one.body.as_deref(), Some(body.as_bytes()), "{path}");
        } else {
            assert!(matching.is_empty(), "{path} forwarded {} times", matching.len());
        }
    }
}

// === 5. limits ===

/// Heads over `limits.max_request_head` or with more fields than `limits.max_headers` get 431 and
/// never reach the backend. (tests/http.rs `oversized_head_gets_431_with_a_reason` covers the
/// defaults through a client library; this is the configured limits, raw.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_over_the_configured_limits_get_431_and_never_reach_the_backend() {
    let backend = RawBackend::echo().await;
    let proxy = proxy_for(&backend, "[limits]\nmax_request_head = 2048\nmax_headers = 10\n").await;
    let big = format!("GET /limit/big HTTP/1.1\r\nHost: rooms.test\r\nX-Big: {}\r\n\r\n", "v".repeat(3000));
    let many: String = (0..12).map(|i| format!("X-H{i}: 1\r\n")).collect();
    let many = format!("GET /limit/many HTTP/1.1\r\nHost: rooms.test\r\n{many}\r\n");
    for (what, req) in [("a 3,000-byte head", big), ("12 fields", many)] {
        let out = exchange(proxy.addr, req.as_bytes(), QUIET).await;
        assert_eq!(out.statuses().first(), Some(&431), "{what}: {:?}", out.text());
    }
    assert!(!backend.received("/limit/"), "{}", backend.all_text());
}

// === 6. the response side ===

/// RFC 9112 6.3: a response with both Content-Length and chunked, two lengths, or a chunked body
/// that goes bad. The client gets 502 when the head is bad, or a cut connection when the body
/// goes bad after the head was passed on, never bytes of the response the backend wrote behind
/// it; and that backend connection is not used again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_response_framing_gets_502_or_a_cut_and_is_never_reused() {
    const SMUGGLED: &str = "HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nSMUGGLED";
    let cases: Vec<(&str, bool, String)> = vec![
        (
            "Content-Length and chunked",
            true,
            "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".into(),
        ),
        (
            "chunked and Content-Length",
            true,
            "Transfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n5\r\nhello\r\n0\r\n\r\n".into(),
        ),
        ("two Content-Lengths", true, "Content-Length: 5\r\nContent-Length: 40\r\n\r\nhello".into()),
        ("a Content-Length list `5, 40`", true, "Content-Length: 5, 40\r\n\r\nhello".into()),
        (
            "an invalid chunk size",
            false,
            "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\nhello\r\n0\r\n\r\n".into(),
        ),
        (
            "a chunk size that overflows",
            false,
            "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n10000000000000005\r\nhello\r\n0\r\n\r\n".into(),
        ),
    ];
    let replies: Vec<Vec<u8>> =
        cases.iter().map(|(_, _, rest)| format!("HTTP/1.1 200 OK\r\n{rest}{SMUGGLED}").into_bytes()).collect();
    let backend = RawBackend::start(move |h| {
        match h.path().strip_prefix("/resp").and_then(|p| p.strip_suffix("/bad")).and_then(|i| i.parse::<usize>().ok())
        {
            Some(i) => Answer::Reply(replies[i].clone()),
            None => Answer::Echo,
        }
    })
    .await;
    let proxy = proxy_for(&backend, "").await;
    let mut failures = Failures::default();
    for (i, (name, bad_head, _)) in cases.iter().enumerate() {
        let p = format!("/resp{i}");
        let req = format!(
            "GET {p}/bad HTTP/1.1\r\nHost: rooms.test\r\n\r\nGET {p}/next HTTP/1.1\r\nHost: rooms.test\r\n\r\n"
        );
        let out = exchange(proxy.addr, req.as_bytes(), QUIET).await;
        let got: Vec<(u16, String)> = out.responses().iter().map(|r| (r.status(), r.body_text())).collect();
        let next_ok = |rest: &[(u16, String)]| rest.is_empty() || rest == [(200, format!("{p}/next"))];
        let fine = if *bad_head {
            got.first().is_some_and(|(s, _)| *s == 502) && next_ok(&got[1..])
        } else {
            (got.first().is_some_and(|(s, _)| *s == 502) && next_ok(&got[1..])) || (got.is_empty() && out.closed)
        };
        if !fine || out.text().contains("SMUGGLED") {
            failures.add(name, format!("got {got:?} (closed: {}): {:?}", out.closed, out.text()));
        }
        let fresh = format!("GET {p}/fresh HTTP/1.1\r\nHost: rooms.test\r\nConnection: close\r\n\r\n");
        let answer = exchange(proxy.addr, fresh.as_bytes(), QUIET).await;
        let bodies: Vec<String> = answer.responses().iter().map(|r| r.body_text()).collect();
        if bodies != [format!("{p}/fresh")] {
            failures.add(name, format!("the next client got {bodies:?}: {:?}", answer.text()));
        }
        if backend.conns().iter().any(|c| c.head_after(&format!("{p}/bad "))) {
            failures.add(name, "the backend connection carried another request");
        }
    }
    failures.check(cases.len());
}

/// A client that writes its first WebSocket frame in the same write as its handshake: the frame
/// (read with the head) goes into the tunnel first and is answered, not lost or read as HTTP.
#[tokio::test]
async fn a_frame_sent_with_the_handshake_reaches_the_backend() {
    let backends = common::backends(1).await;
    let proxy = common::Proxy::start(&common::config(&common::backend_list(&backends), common::ROUTES, "")).await;
    let mut bytes = b"GET /ws/live/?room=a HTTP/1.1\r\nHost: rooms.test\r\nConnection: Upgrade\r\n\
        Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        .to_vec();
    bytes.extend(common::raw::frame_bytes(0x81, b"id", Some([1, 2, 3, 4])));
    let mut s = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut s, &bytes).await.unwrap();
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + common::LIMIT;
    while !String::from_utf8_lossy(&got).contains("id:b0") {
        let mut buf = [0u8; 1024];
        let read = tokio::time::timeout_at(deadline, tokio::io::AsyncReadExt::read(&mut s, &mut buf)).await;
        let n = read.expect("no answer to the first frame in time").unwrap();
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 101"), "{:?}", String::from_utf8_lossy(&got));
    proxy.shutdown().await;
}

/// `timeouts.request_head` bounds a whole head, not each read: a client that trickles a head a
/// line at a time, forever, is closed once it has run out, and so is a keep-alive connection that
/// sends nothing after its first request. Neither reaches the backend with a partial head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_trickled_forever_and_an_idle_keep_alive_are_closed_at_the_head_timeout() {
    let backend = RawBackend::echo().await;
    let proxy = proxy_for(&backend, "[timeouts]\nrequest_head = \"500ms\"\n").await;

    // A line every 50 ms: each read is prompt, the head never ends.
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"GET /trickled HTTP/1.1\r\nHost: rooms.test\r\n").await.unwrap();
    let started = tokio::time::Instant::now();
    let mut lines = 0;
    let closed = loop {
        assert!(started.elapsed() < LIMIT, "still open after {lines} lines over {:?}", started.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
        if s.write_all(format!("X-Line-{lines}: a\r\n").as_bytes()).await.is_err() {
            break true;
        }
        lines += 1;
        // A closed connection shows as a read of 0 (or a reset) once roomgate has let go.
        let mut byte = [0u8; 1];
        if let Ok(read) =
            tokio::time::timeout(Duration::from_millis(1), tokio::io::AsyncReadExt::read(&mut s, &mut byte)).await
        {
            break matches!(read, Ok(0) | Err(_));
        }
    };
    assert!(closed, "the connection answered something instead of closing");
    let open_for = started.elapsed();
    assert!(open_for >= Duration::from_millis(450), "closed after {open_for:?}, before the timeout");
    assert!(!backend.received("/trickled"), "a partial head reached the backend");

    // One request, then nothing: closed once the next head has not come in time.
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    s.write_all(b"GET /first HTTP/1.1\r\nHost: rooms.test\r\n\r\n").await.unwrap();
    let out = read_responses(&mut s, 1, LIMIT).await;
    assert_eq!(out.statuses(), [200], "{:?}", out.text());
    let idle = tokio::time::Instant::now();
    let rest = read_until_close(&mut s, LIMIT).await;
    assert!(rest.closed && rest.bytes.is_empty(), "{:?}", rest.text());
    assert!(idle.elapsed() >= Duration::from_millis(450), "closed after {:?}", idle.elapsed());
}
