//! A peer's corpus (issue 32): the request cases of llhttp's test suite
//! (`test/request/*.md` of <https://github.com/nodejs/llhttp>, extracted by
//! `tools/llhttp-corpus.py` into `tests/fixtures/llhttp/requests.json`, MIT, see the LICENSE
//! there) sent through a real roomgate to a raw backend, each case on its own connection to its
//! own roomgate.
//!
//! What llhttp's strict mode (test type `request`) says of a case decides what roomgate must do:
//!
//! - it rejects the input (an error other than a pause): roomgate answers 4xx (or 505) and
//!   closes, and its backend receives only complete requests that are a prefix of the messages
//!   llhttp completed before its error, each as below. Where the input stops before the
//!   rejected message's head ends roomgate cannot judge it, so it may also wait for more and then
//!   close at the client's end of stream without an answer. After `Data after Connection: close`
//!   roomgate closes and need not answer the data.
//! - it accepts the input (no error, or the pause llhttp makes at a `CONNECT` or an `Upgrade`,
//!   where what follows is not HTTP/1 any more): the backend receives each message llhttp
//!   completed with the same method, the same target in origin-form (an absolute-form target
//!   loses its scheme and authority, an empty path is `/`), the same header fields (names in any
//!   case, values exactly, less the optional whitespace around them; less the hop-by-hop fields
//!   and those `Connection` names, and less the `X-Forwarded-*` and `X-Real-IP` roomgate adds),
//!   the same trailer fields if it forwards any (one that decodes the chunked coding may drop
//!   them, RFC 9112 section 7.1.2) and the same decoded body (roomgate re-chunks a chunked body). A
//!   message llhttp left incomplete at the end of the input may reach the backend as a head
//!   that is the same and a body llhttp's is a prefix of, or not at all; nothing else may.
//!   roomgate may refuse it instead only where [`ALLOWED_STRICTER`] says so, with the status it
//!   names.
//!
//! Where llhttp's message is HTTP/1.1 without `Host`, which RFC 9112 section 3.2 makes a 400 and
//! roomgate refuses so, the case is sent with `Host: rooms.test` (for an absolute-form target,
//! its authority) as a field line of its own right after the request line, and that field is
//! expected at the backend: the case then tests what it was written for instead of the missing
//! Host. It is not added where the line after the request line begins with whitespace (it would
//! become the start of a folded line) or the request line is not `METHOD TARGET HTTP/1.1`.
//!
//! llhttp's pause at the HTTP/2 preface (`PRI * HTTP/1.1` and `SM`) hands the connection to an
//! HTTP/2 parser: roomgate may answer it as HTTP/2 or refuse it, and nothing may reach the
//! HTTP/1 backend. The 13 `pausing.md` cases are run: the pause is a callback of llhttp's
//! harness, which resumes, and the messages are strict mode's.
//!
//! Of the 166 cases 133 are checked; 33 are skipped, by category (asserted as [`SKIPPED`]):
//! - 29 that llhttp runs under a lenient flag (type `request-lenient-*`): headers 11,
//!   header-value-relaxed 4, optional-lf-after-cr 4, chunked-length 2, keep-alive 2,
//!   transfer-encoding 2, all 1, optional-crlf-after-chunk 1, spaces-after-chunk-size 1,
//!   version 1. They are not strict mode, and roomgate has no lenient flags; the strict
//!   counterpart of each, where the suite has one, is run.
//! - 3 of type `request-finish`: they test `llhttp_finish()` at the end of the input, a mode a
//!   proxy has no counterpart of (roomgate reads the end of the stream as a close).
//! - 1 with `skipBody`: llhttp's callback makes the parser skip the body, a mode roomgate does
//!   not have.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::rawhttp::{Answer, Outcome, RawBackend, read_responses, read_until_close};
use common::{LIMIT, Proxy, ROUTES, config};
use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// The llhttp commit the fixture was generated from.
const COMMIT: &str = "01e105a30fd06e248bc8ac73c4adb34a63d4114a";
/// The request cases in the fixture.
const TOTAL: usize = 166;
/// Fewer cases than this checked and the test fails: it must not pass by skipping.
const MIN_CHECKED: usize = 133;
/// Nor by refusing: at least this many accepted by both and forwarded the same.
const MIN_EQUAL: usize = 62;

/// The cases skipped, by category (see the module's comment).
const SKIPPED: [(&str, usize); 12] = [
    ("lenient flag all", 1),
    ("lenient flag chunked-length", 2),
    ("lenient flag header-value-relaxed", 4),
    ("lenient flag headers", 11),
    ("lenient flag keep-alive", 2),
    ("lenient flag optional-crlf-after-chunk", 1),
    ("lenient flag optional-lf-after-cr", 4),
    ("lenient flag spaces-after-chunk-size", 1),
    ("lenient flag transfer-encoding", 2),
    ("lenient flag version", 1),
    ("llhttp_finish() mode", 3),
    ("skipBody callback", 1),
];

/// How long a client waits for what it expects before it ends its side of the connection.
const WAIT: Duration = Duration::from_millis(1500);
/// How many cases run at once (each with its own roomgate and backend).
const AT_ONCE: usize = 8;

/// Statuses roomgate may refuse a request with.
const REFUSALS: [u16; 7] = [400, 404, 405, 413, 431, 501, 505];

/// Cases where roomgate is looser than llhttp's strict mode, by choice: each is about the method
/// alone, and none lets a request be framed two ways. (The target's raw UTF-8 and fragment, found
/// here too, are refused now.) Each must still diverge as described, so that a change of policy
/// makes the entry stale and the test says to remove it.
const KNOWN_DIVERGENT: &[(&str, &str)] = &[
    // By choice: methods are extensible (RFC 9110 section 9.1), and WebDAV's and others' reach
    // the backend byte for byte. A method is a token, so it frames the request one way only.
    ("invalid.md:356", "unknown method MKCOLA is forwarded; llhttp refuses methods outside its list"),
    ("invalid.md:66", "RTSP method ANNOUNCE with an HTTP version is forwarded"),
];

/// Cases llhttp's strict mode accepts and roomgate refuses, each with the status it answers and
/// why that is right for an edge proxy. Every entry must be exercised: a case here that roomgate
/// forwards fails the test (the entry is stale).
const ALLOWED_STRICTER: &[(&str, u16, &str)] = &[
    ("method.md:27", 405, "CONNECT: roomgate is a reverse proxy, not a forward proxy or tunnel"),
    ("method.md:62", 405, "CONNECT: roomgate is a reverse proxy, not a forward proxy or tunnel"),
    ("method.md:96", 405, "CONNECT: roomgate is a reverse proxy, not a forward proxy or tunnel"),
    ("uri.md:188", 405, "CONNECT: roomgate is a reverse proxy, not a forward proxy or tunnel"),
    ("method.md:135", 404, "asterisk-form target (M-SEARCH *, SSDP): no route serves `*`"),
    ("method.md:372", 400, "ICE/1.0 is not HTTP: roomgate speaks HTTP/1.0 and HTTP/1.1 only"),
    ("method.md:400", 400, "RTSP/1.0 is not HTTP: roomgate speaks HTTP/1.0 and HTTP/1.1 only"),
    ("method.md:430", 400, "RTSP/1.0 is not HTTP: roomgate speaks HTTP/1.0 and HTTP/1.1 only"),
    ("sample.md:314", 400, "HTTP/0.9 (a request line without a version) is not served"),
    ("uri.md:165", 400, "a fragment in a request-target is never sent (RFC 9112 section 3.2); it would be dropped"),
    ("uri.md:4", 400, "`\"` and `\\` are not allowed in a request-target (RFC 3986); the backend's parser may differ"),
    ("transfer-encoding.md:751", 400, "a coding before chunked (deflate, chunked): only a single chunked is framed"),
    ("transfer-encoding.md:793", 400, "codings in two fields (deflate; chunked): only a single chunked is framed"),
    ("connection.md:542", 400, "Upgrade: WebSocket without Sec-WebSocket-Key is no RFC 6455 handshake"),
    ("connection.md:753", 400, "a hixie-76 handshake (Sec-WebSocket-Key1/2) is no RFC 6455 handshake"),
];

// === the corpus ===

#[derive(Debug, Deserialize)]
struct Corpus {
    commit: String,
    cases: Vec<Case>,
}

#[derive(Clone, Debug, Deserialize)]
struct Case {
    id: String,
    name: String,
    #[serde(rename = "type")]
    kind: String,
    meta: Meta,
    input: String,
    messages: Vec<Message>,
    error: Option<LlError>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    #[serde(default)]
    skip_body: bool,
}

#[derive(Clone, Debug, Deserialize)]
struct Message {
    /// Where llhttp saw the message begin, in the input's bytes.
    offset: usize,
    method: Option<String>,
    url: Option<String>,
    headers: Vec<(String, String)>,
    trailers: Vec<(String, String)>,
    body: String,
    headers_complete: bool,
    complete: bool,
}

#[derive(Clone, Debug, Deserialize)]
struct LlError {
    code: u32,
    reason: String,
}

fn corpus() -> Corpus {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/llhttp/requests.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// llhttp's error codes this test tells apart (llhttp.h's `llhttp_errno`).
const HPE_CLOSED_CONNECTION: u32 = 5;
const HPE_PAUSED_UPGRADE: u32 = 22;
const HPE_PAUSED_H2_UPGRADE: u32 = 23;

/// What llhttp's strict mode made of a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// No error.
    Accepts,
    /// Accepted up to a `CONNECT` or an `Upgrade`, where llhttp pauses: what follows is not its.
    HandsOff,
    /// The HTTP/2 connection preface (`PRI * HTTP/...`), where llhttp pauses for an HTTP/2
    /// parser to take over.
    Http2,
    /// Rejected: data after a message that closes the connection.
    DataAfterClose,
    /// Rejected.
    Rejects,
}

fn verdict(case: &Case) -> Verdict {
    match &case.error {
        None => Verdict::Accepts,
        Some(e) if e.code == HPE_PAUSED_UPGRADE => Verdict::HandsOff,
        Some(e) if e.code == HPE_PAUSED_H2_UPGRADE => Verdict::Http2,
        Some(e) if e.code == HPE_CLOSED_CONNECTION => Verdict::DataAfterClose,
        Some(_) => Verdict::Rejects,
    }
}

/// Why a case is not run, if it is not.
fn skip(case: &Case) -> Option<String> {
    if let Some(flag) = case.kind.strip_prefix("request-lenient-") {
        return Some(format!("lenient flag {flag}"));
    }
    if case.kind == "request-finish" {
        return Some("llhttp_finish() mode".to_owned());
    }
    if case.meta.skip_body {
        return Some("skipBody callback".to_owned());
    }
    assert_eq!(case.kind, "request", "{}: a type this test does not know", case.id);
    None
}

// === a case as sent ===

/// A message as the backend must receive it.
#[derive(Clone, Debug)]
struct Want {
    method: String,
    target: String,
    /// Names lower-cased, values without the whitespace around them.
    fields: Vec<(String, Vec<u8>)>,
    trailers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    headers_complete: bool,
    complete: bool,
}

/// A case's bytes as sent (with any `Host` added) and its messages as the backend must see them.
struct Prepared {
    input: Vec<u8>,
    wants: Vec<Want>,
    /// Whether a `Host` was added.
    hosted: bool,
    /// Whether the input stops before the head of the message llhttp rejects ends.
    head_cut: bool,
}

fn prepare(case: &Case) -> Prepared {
    let input = case.input.as_bytes();
    let mut inserts: Vec<(usize, String)> = Vec::new();
    let mut wants = Vec::new();
    for (i, m) in case.messages.iter().enumerate() {
        let end = case.messages.get(i + 1).map_or(input.len(), |n| n.offset);
        let region = &input[m.offset..end];
        // The HTTP/2 preface is sent as it is: a field line in it would make it another.
        let host = if verdict(case) == Verdict::Http2 { None } else { host_to_add(region, m) };
        let mut fields: Vec<(String, Vec<u8>)> = Vec::new();
        if let Some(host) = &host {
            fields.push(("host".to_owned(), host.as_bytes().to_vec()));
            let line_end = memchr::memmem::find(region, b"\r\n").unwrap() + 2;
            inserts.push((m.offset + line_end, host.clone()));
        }
        fields.extend(m.headers.iter().map(|(n, v)| (n.to_ascii_lowercase(), ows_trim(v.as_bytes()).to_vec())));
        wants.push(Want {
            method: m.method.clone().unwrap_or_default(),
            target: origin_form(m.url.as_deref().unwrap_or_default()),
            fields: end_to_end(fields),
            trailers: m
                .trailers
                .iter()
                .map(|(n, v)| (n.to_ascii_lowercase(), ows_trim(v.as_bytes()).to_vec()))
                .collect(),
            body: m.body.as_bytes().to_vec(),
            headers_complete: m.headers_complete,
            complete: m.complete,
        });
    }
    let mut out = Vec::with_capacity(input.len() + 64);
    let mut at = 0;
    for (pos, host) in &inserts {
        out.extend_from_slice(&input[at..*pos]);
        out.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
        at = *pos;
    }
    out.extend_from_slice(&input[at..]);
    // The message llhttp stopped in is its last; with none, the input's start.
    let last = case.messages.last().filter(|m| !m.complete).map_or(0, |m| m.offset);
    let rest = &input[last.min(input.len())..];
    let head_cut = memchr::memmem::find(rest, b"\r\n\r\n").is_none() && memchr::memmem::find(rest, b"\n\n").is_none();
    Prepared { input: out, wants, hosted: !inserts.is_empty(), head_cut }
}

/// The `Host` to add to the message that is `region` (from its first byte to the next
/// message's): for an HTTP/1.1 request line with none in the message.
fn host_to_add(region: &[u8], m: &Message) -> Option<String> {
    let line_end = memchr::memmem::find(region, b"\r\n")?;
    let line = std::str::from_utf8(&region[..line_end]).ok()?;
    let mut parts = line.split(' ');
    let (Some(_), Some(target), Some("HTTP/1.1"), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    if matches!(region.get(line_end + 2), Some(b' ' | b'\t')) {
        return None;
    }
    let has_host = region.split(|&b| b == b'\n').any(|l| l.len() >= 5 && l[..5].eq_ignore_ascii_case(b"host:"));
    if has_host || m.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        return None;
    }
    Some(match authority(target) {
        Some(a) => a.rsplit_once('@').map_or(a, |(_, host)| host).to_owned(),
        None => "rooms.test".to_owned(),
    })
}

/// An absolute-form target's authority.
fn authority(target: &str) -> Option<&str> {
    let lower = target.to_ascii_lowercase();
    let rest = if lower.starts_with("http://") {
        &target[7..]
    } else if lower.starts_with("https://") {
        &target[8..]
    } else {
        return None;
    };
    Some(&rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())])
}

/// The origin-form of llhttp's url: an absolute-form target's path and what follows it, `/`
/// for an empty path; any other form as it is.
fn origin_form(url: &str) -> String {
    let Some(auth) = authority(url) else { return url.to_owned() };
    let scheme = url.find("://").unwrap() + 3;
    let rest = &url[scheme + auth.len()..];
    if rest.starts_with('/') { rest.to_owned() } else { format!("/{rest}") }
}

fn ows_trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !matches!(b, b' ' | b'\t')).unwrap_or(v.len());
    let end = v.iter().rposition(|b| !matches!(b, b' ' | b'\t')).map_or(start, |e| e + 1);
    &v[start..end]
}

/// Fields that describe one hop (RFC 9110 section 7.6.1), and common non-standard ones.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Fields roomgate writes for a backend of its own.
const ADDED: [&str; 4] = ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-real-ip"];

/// `fields` less the hop-by-hop ones and those `Connection` names (never `Content-Length`,
/// which frames the body and which a proxy keeps).
fn end_to_end(fields: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    let named: Vec<String> = fields
        .iter()
        .filter(|(n, _)| n == "connection")
        .flat_map(|(_, v)| {
            String::from_utf8_lossy(v).split(',').map(|t| t.trim().to_ascii_lowercase()).collect::<Vec<_>>()
        })
        .filter(|t| t != "content-length")
        .collect();
    fields.into_iter().filter(|(n, _)| !HOP_BY_HOP.contains(&n.as_str()) && !named.contains(n)).collect()
}

// === what reached the backend ===

/// A request as the backend received it.
#[derive(Debug)]
struct Got {
    method: String,
    target: String,
    fields: Vec<(String, Vec<u8>)>,
    trailers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    complete: bool,
}

/// The requests in one backend connection's bytes, in order, and how many bytes after them are
/// no request (a partial head).
fn received(bytes: &[u8]) -> (Vec<Got>, usize) {
    let (mut out, mut at) = (Vec::new(), 0);
    while at < bytes.len() {
        let Some(end) = memchr::memmem::find(&bytes[at..], b"\r\n\r\n") else { break };
        let head = &bytes[at..at + end];
        at += end + 4;
        let mut lines = head.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
        let start = String::from_utf8_lossy(lines.next().unwrap_or_default()).into_owned();
        let mut parts = start.splitn(3, ' ').map(str::to_owned);
        let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
        let fields = lines.map(field).collect::<Vec<_>>();
        let chunked = fields.iter().any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case(b"chunked"));
        let length = fields
            .iter()
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| std::str::from_utf8(v).ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(usize::MAX));
        let (body, trailers, used, complete) = if chunked {
            dechunk(&bytes[at..])
        } else {
            let n = length.unwrap_or(0);
            let have = n.min(bytes.len() - at);
            (bytes[at..at + have].to_vec(), Vec::new(), have, have == n)
        };
        at += used;
        let fields = fields.into_iter().filter(|(n, _)| !ADDED.contains(&n.as_str())).collect();
        out.push(Got { method, target, fields: end_to_end(fields), trailers, body, complete });
        if !complete {
            break;
        }
    }
    (out, bytes.len() - at)
}

fn field(line: &[u8]) -> (String, Vec<u8>) {
    let colon = memchr::memchr(b':', line).unwrap_or(line.len());
    let name = String::from_utf8_lossy(&line[..colon]).to_ascii_lowercase();
    (name, ows_trim(line.get(colon + 1..).unwrap_or_default()).to_vec())
}

/// A chunked body at the start of `buf` as roomgate writes it: the body, the trailer fields,
/// the bytes used and whether it ended.
#[allow(clippy::type_complexity)]
fn dechunk(buf: &[u8]) -> (Vec<u8>, Vec<(String, Vec<u8>)>, usize, bool) {
    let (mut body, mut at) = (Vec::new(), 0);
    loop {
        let Some(nl) = memchr::memmem::find(&buf[at..], b"\r\n") else { return (body, Vec::new(), buf.len(), false) };
        let line = String::from_utf8_lossy(&buf[at..at + nl]).into_owned();
        let Ok(size) = usize::from_str_radix(line.split(';').next().unwrap_or_default(), 16) else {
            return (body, Vec::new(), buf.len(), false);
        };
        at += nl + 2;
        if size == 0 {
            let mut trailers = Vec::new();
            loop {
                let Some(nl) = memchr::memmem::find(&buf[at..], b"\r\n") else {
                    return (body, trailers, buf.len(), false);
                };
                let line = &buf[at..at + nl];
                at += nl + 2;
                if line.is_empty() {
                    return (body, trailers, at, true);
                }
                trailers.push(field(line));
            }
        }
        if buf.len() < at + size + 2 {
            body.extend_from_slice(&buf[at..buf.len().min(at + size)]);
            return (body, Vec::new(), buf.len(), false);
        }
        body.extend_from_slice(&buf[at..at + size]);
        at += size + 2;
    }
}

// === running a case ===

/// What came of sending a case.
struct Run {
    /// What the client read.
    client: Outcome,
    /// Whether roomgate closed before the client ended its side.
    closed_first: bool,
    /// Every request the backend received, connection after connection.
    got: Vec<Got>,
    /// Bytes at the backend that are no request.
    stray: usize,
    /// Every byte the backend received, for the failure message.
    backend_text: String,
}

async fn run(input: Vec<u8>, want_responses: usize) -> Run {
    let backend = RawBackend::start(|_| Answer::Reply(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec())).await;
    let proxy = Proxy::start(&config(&[("raw", backend.addr)], ROUTES, "[health]\nfall = 100\n")).await;
    let mut s = tokio::time::timeout(LIMIT, TcpStream::connect(proxy.addr)).await.unwrap().unwrap();
    // roomgate may answer and close before all is written: what it sent still counts.
    let _ = s.write_all(&input).await;
    let mut client = read_responses(&mut s, want_responses, WAIT).await;
    if !client.closed && client.statuses().last().is_some_and(|s| *s >= 400) {
        // A refusal: roomgate is to close after it.
        let rest = read_until_close(&mut s, WAIT).await;
        client.bytes.extend_from_slice(&rest.bytes);
        client.closed = rest.closed;
    }
    let closed_first = client.closed;
    if !client.closed {
        // Whatever roomgate waits for does not come: end this side and read to its close.
        let _ = s.shutdown().await;
        let rest = read_until_close(&mut s, LIMIT).await;
        client.bytes.extend_from_slice(&rest.bytes);
        client.closed = rest.closed;
    }
    drop(s);
    proxy.shutdown().await;
    // Every backend connection ends with roomgate: then its record is complete.
    let ended = backend.wait(LIMIT, |conns| conns.iter().all(|c| c.closed)).await;
    assert!(ended, "a backend connection outlived roomgate");
    let (mut got, mut stray) = (Vec::new(), 0);
    for conn in backend.conns() {
        let (requests, left) = received(&conn.bytes);
        got.extend(requests);
        stray += left;
    }
    Run { client, closed_first, got, stray, backend_text: backend.all_text() }
}

/// How a checked case came out.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Checked {
    /// llhttp rejects, roomgate refused (forwarding at most the messages llhttp completed first).
    Refused,
    /// Both accept, and the backend received what llhttp parsed.
    AcceptedEqual,
    /// llhttp accepts, roomgate refused as [`ALLOWED_STRICTER`] lets it.
    AllowedStricter,
    /// The HTTP/2 preface: llhttp hands it to HTTP/2, roomgate answered as HTTP/2 (or refused),
    /// and nothing reached the HTTP/1 backend.
    Http2,
}

/// Whether what the backend got is the message llhttp parsed: `Err` says how not.
fn same(want: &Want, got: &Got) -> Result<(), String> {
    let mut diff = String::new();
    if want.method != got.method {
        let _ = write!(diff, " method {:?} != {:?};", got.method, want.method);
    }
    if want.target != got.target {
        let _ = write!(diff, " target {:?} != {:?};", got.target, want.target);
    }
    if want.fields != got.fields {
        let _ = write!(diff, " fields {} != {};", show(&got.fields), show(&want.fields));
    }
    // A recipient that decodes the chunked coding may discard the trailer fields (RFC 9112
    // section 7.1.2); any it forwards must be the same.
    if !got.trailers.is_empty() && want.trailers != got.trailers {
        let _ = write!(diff, " trailers {} != {};", show(&got.trailers), show(&want.trailers));
    }
    let body_ok = if want.complete && got.complete { got.body == want.body } else { got.body.starts_with(&want.body) };
    if !body_ok {
        let _ = write!(
            diff,
            " body {:?} != {:?};",
            String::from_utf8_lossy(&got.body),
            String::from_utf8_lossy(&want.body)
        );
    }
    if want.complete && !got.complete {
        diff.push_str(" incomplete at the backend;");
    }
    if diff.is_empty() { Ok(()) } else { Err(diff) }
}

fn show(fields: &[(String, Vec<u8>)]) -> String {
    let list: Vec<String> = fields.iter().map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(v))).collect();
    format!("{list:?}")
}

/// The first `n` of `got` are the first `n` of `wants`, each the same.
fn prefix(wants: &[Want], got: &[Got], n: usize) -> Result<(), String> {
    for (i, (w, g)) in wants.iter().zip(got).take(n).enumerate() {
        same(w, g).map_err(|e| format!("message {i} at the backend:{e}"))?;
    }
    Ok(())
}

/// Judges a run of `case` against llhttp's verdict: the outcome, or what went wrong.
fn judge(case: &Case, prepared: &Prepared, run: &Run) -> Result<Checked, String> {
    let statuses = run.client.statuses();
    let done = prepared.wants.iter().take_while(|w| w.complete).count();
    let forwarded = run.got.iter().filter(|g| g.complete).count();
    let refusal_at = statuses.iter().position(|s| *s >= 400);
    let ok_count = refusal_at.unwrap_or(statuses.len());
    let answers_ok = statuses[..ok_count].iter().all(|s| *s == 200);
    let refused_with = refusal_at.map(|i| statuses[i]);
    let after_refusal = refusal_at.map_or(0, |i| statuses.len() - i - 1);
    if !answers_ok || after_refusal > 0 {
        return Err(format!("answers {statuses:?}"));
    }
    if ok_count != forwarded {
        return Err(format!("{ok_count} answered 200, {forwarded} complete at the backend"));
    }
    if let Some(s) = refused_with
        && !REFUSALS.contains(&s)
    {
        return Err(format!("refused with {s}"));
    }
    let stricter = ALLOWED_STRICTER.iter().find(|(id, ..)| *id == case.id);
    match verdict(case) {
        Verdict::Http2 => {
            if stricter.is_some() || !run.got.is_empty() || run.stray > 0 || !run.client.closed {
                return Err(format!("the HTTP/2 preface: {} request(s) at the backend", run.got.len()));
            }
            Ok(Checked::Http2)
        }
        Verdict::Rejects | Verdict::DataAfterClose => {
            if stricter.is_some() {
                return Err("in ALLOWED_STRICTER, but llhttp rejects it".to_owned());
            }
            if forwarded > done || run.got.len() > forwarded || run.stray > 0 {
                return Err(format!(
                    "llhttp rejects after {done} message(s); the backend got {forwarded} complete, {} in all, {} \
                     stray byte(s)",
                    run.got.len(),
                    run.stray
                ));
            }
            prefix(&prepared.wants, &run.got, forwarded)?;
            let may_skip_answer = prepared.head_cut || verdict(case) == Verdict::DataAfterClose;
            if refused_with.is_none() && !may_skip_answer {
                return Err("not refused".to_owned());
            }
            if !run.client.closed || (!run.closed_first && !may_skip_answer) {
                return Err("the connection was not closed".to_owned());
            }
            Ok(Checked::Refused)
        }
        Verdict::Accepts | Verdict::HandsOff => {
            if let Some((_, status, _)) = stricter {
                prefix(&prepared.wants, &run.got, forwarded)?;
                if forwarded >= done || refused_with != Some(*status) || run.got.len() > forwarded || run.stray > 0 {
                    return Err(format!(
                        "ALLOWED_STRICTER says {status}: got {statuses:?}, {forwarded} of {done} forwarded"
                    ));
                }
                // A 404 leaves the connection usable; a refusal of the request's form closes it.
                if !run.closed_first && *status != 404 {
                    return Err("refused but the connection was not closed".to_owned());
                }
                return Ok(Checked::AllowedStricter);
            }
            prefix(&prepared.wants, &run.got, done)?;
            if forwarded < done {
                return Err(format!("{forwarded} of the {done} complete message(s) forwarded; answers {statuses:?}"));
            }
            // Past what llhttp completed: at most the start of the message it was still reading.
            let partial = prepared.wants.get(done).filter(|w| w.headers_complete && verdict(case) == Verdict::Accepts);
            match (run.got.get(done), partial) {
                (None, _) => {}
                (Some(g), Some(w)) if !g.complete && run.got.len() == done + 1 => {
                    same(w, g).map_err(|e| format!("the incomplete message at the backend:{e}"))?;
                }
                (Some(_), _) => {
                    return Err(format!("{} request(s) at the backend, llhttp completed {done}", run.got.len()));
                }
            }
            if run.stray > 0 {
                return Err(format!("{} stray byte(s) at the backend", run.stray));
            }
            Ok(Checked::AcceptedEqual)
        }
    }
}

/// The text of the first refusal's body, for the report.
fn reason(out: &Outcome) -> String {
    out.responses().iter().find(|r| r.status() >= 400).map(|r| r.body_text().trim().to_owned()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llhttp_request_corpus_through_roomgate() {
    let started = Instant::now();
    let corpus = corpus();
    assert_eq!(corpus.commit, COMMIT);
    assert_eq!(corpus.cases.len(), TOTAL);
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    let limit = Arc::new(Semaphore::new(AT_ONCE));
    let mut tasks = JoinSet::new();
    for case in corpus.cases {
        if let Some(why) = skip(&case) {
            *skipped.entry(why).or_default() += 1;
            continue;
        }
        let prepared = prepare(&case);
        let permit = limit.clone().acquire_owned().await.unwrap();
        tasks.spawn(async move {
            let want = match verdict(&case) {
                Verdict::Accepts | Verdict::HandsOff => prepared.wants.iter().take_while(|w| w.complete).count(),
                _ => usize::MAX,
            };
            let run = run(prepared.input.clone(), want).await;
            drop(permit);
            let result = judge(&case, &prepared, &run);
            (case, prepared, run, result)
        });
    }
    let mut results = Vec::new();
    while let Some(done) = tasks.join_next().await {
        results.push(done.unwrap());
    }
    results.sort_by(|a, b| a.0.id.cmp(&b.0.id));

    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut report = String::new();
    for (case, prepared, run, result) in &results {
        let statuses = run.client.statuses();
        let v = verdict(case);
        let _ = writeln!(
            report,
            "{:<28} {:<14} {:<16} {:?} backend {} {}{}",
            case.id,
            format!("{v:?}"),
            match result {
                Ok(r) => format!("{r:?}"),
                Err(_) => "FAIL".to_owned(),
            },
            statuses,
            run.got.len(),
            reason(&run.client),
            if prepared.hosted { " [Host added]" } else { "" },
        );
        let known = KNOWN_DIVERGENT.iter().any(|(id, _)| *id == case.id);
        match result {
            Ok(_) if known => failures.push(format!("{}: KNOWN_DIVERGENT entry is stale, remove it", case.id)),
            Err(_) if known => *counts.entry("KnownDivergent".to_owned()).or_default() += 1,
            Ok(r) => *counts.entry(format!("{r:?}")).or_default() += 1,
            Err(why) => failures.push(format!(
                "{} ({}; llhttp: {}): {why}\n  sent: {:?}\n  answer: {:?}\n  backend: {:?}",
                case.id,
                case.name,
                case.error.as_ref().map_or("accepts".to_owned(), |e| format!("{} {:?}", e.code, e.reason)),
                String::from_utf8_lossy(&prepared.input),
                run.client.text(),
                run.backend_text,
            )),
        }
    }
    let checked = results.len();
    // Trailer fields roomgate discarded (RFC 9112 section 7.1.2 lets it), for the record.
    let dropped: Vec<&str> = results
        .iter()
        .filter(|(_, p, r, _)| p.wants.iter().zip(&r.got).any(|(w, g)| !w.trailers.is_empty() && g.trailers.is_empty()))
        .map(|(c, ..)| c.id.as_str())
        .collect();
    println!("{report}");
    println!(
        "{TOTAL} cases, {checked} checked ({counts:?}), {} failed; skipped {skipped:?}; trailers dropped in \
         {dropped:?}; {:.1?}",
        failures.len(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "{} of {checked} cases failed:\n{}", failures.len(), failures.join("\n"));
    for (id, ..) in ALLOWED_STRICTER {
        assert!(results.iter().any(|(c, ..)| c.id == *id), "ALLOWED_STRICTER names {id}, which is not run");
    }
    assert!(checked >= MIN_CHECKED, "only {checked} cases checked");
    let equal = counts.get("AcceptedEqual").copied().unwrap_or_default();
    assert!(equal >= MIN_EQUAL, "only {equal} cases forwarded the same");
    let want_skipped: BTreeMap<String, usize> = SKIPPED.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect();
    assert_eq!(skipped, want_skipped, "the skipped categories changed: update SKIPPED and the module's comment");
    assert_eq!(checked + skipped.values().sum::<usize>(), TOTAL);
}
