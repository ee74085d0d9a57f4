//! The raw head writer against the header-map rules it stands for: for any fields, the same
//! values per name reach the backend.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use bytes::BytesMut;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;

use super::*;
use crate::h1::RequestHead;
use crate::proxy::headers::{remove_hop_by_hop, set_forwarded};

/// Each field's values in order (trimmed), by lowercase name, and the request line.
fn fields_of(head: &[u8]) -> (String, BTreeMap<String, Vec<Vec<u8>>>) {
    let text = head.strip_suffix(b"\r\n\r\n").unwrap();
    let mut lines = text.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let line = String::from_utf8(lines.next().unwrap().to_vec()).unwrap();
    let mut map: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for l in lines {
        let colon = l.iter().position(|&b| b == b':').unwrap();
        let name = String::from_utf8(l[..colon].to_ascii_lowercase()).unwrap();
        map.entry(name).or_default().push(l[colon + 1..].trim_ascii().to_vec());
    }
    (line, map)
}

/// The request `fields` make, each line written as `style` says: how its colon is followed,
/// and how the line ends.
fn request(fields: &[(&str, Vec<u8>, u8)]) -> Vec<u8> {
    let mut raw = b"POST /r?x=1 HTTP/1.1\r\n".to_vec();
    for (name, value, style) in fields {
        raw.extend_from_slice(name.as_bytes());
        raw.extend_from_slice([&b": "[..], b":", b":  \t"][usize::from(style % 3)]);
        raw.extend_from_slice(value);
        raw.extend_from_slice([&b"\r\n"[..], b"\r\n", b" \r\n", b"\t\r\n"][usize::from(style / 3 % 4)]);
    }
    raw.extend_from_slice(b"\r\n");
    raw
}

/// What the header-map path writes for the same request.
fn by_map(head: &RequestHead, hop: Hop, websocket: bool) -> Vec<u8> {
    let mut headers = HeaderMap::new();
    for (n, v) in head.fields() {
        headers.append(HeaderName::from_bytes(n).unwrap(), HeaderValue::from_bytes(v).unwrap());
    }
    remove_hop_by_hop(&mut headers);
    set_forwarded(&mut headers, hop.peer, hop.trusted, hop.proto);
    if websocket {
        crate::proxy::headers::set_websocket_upgrade(&mut headers);
    }
    let mut out = format!("{} /r?x=1 HTTP/1.1\r\n", head.method).into_bytes();
    for (name, value) in &headers {
        crate::h1::write::field(&mut out, name.as_str().as_bytes(), value.as_bytes());
    }
    if head.framing == Framing::Chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn by_raw(head: &RequestHead, hop: Hop, websocket: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let client = Client { method: &head.method, target: "/r?x=1", raw: &head.raw, fields: head.fields(), websocket };
    request_head(&mut out, client, head.framing, hop);
    out
}

fn parse(raw: &[u8]) -> Option<RequestHead> {
    crate::h1::parse_request(&mut BytesMut::from(raw), 64 * 1024).ok().flatten()
}

const NAMES: [&str; 20] = [
    "Host",
    "host",
    "Connection",
    "X-Forwarded-For",
    "x-forwarded-proto",
    "X-Forwarded-Host",
    "X-Real-IP",
    "Forwarded",
    "True-Client-IP",
    "x-client-ip",
    "CF-Connecting-IP",
    "Upgrade",
    "TE",
    "Keep-Alive",
    "Content-Length",
    "Cookie",
    "X-Room",
    "Proxy-Connection",
    "Trailer",
    "X-Other",
];

fn value() -> impl Strategy<Value = Vec<u8>> {
    let token = prop::sample::select(vec![
        "keep-alive",
        "close",
        "Upgrade",
        "x-room",
        "X-Forwarded-For",
        "host",
        "content-length",
        "cookie",
        "x-other",
        "bad token",
        "",
    ]);
    prop_oneof![
        prop::collection::vec(token, 1..4).prop_map(|t| t.join(", ").into_bytes()),
        "[ -~]{0,12}".prop_map(String::into_bytes),
        Just(b"1.2.3.4".to_vec()),
        Just(b"5".to_vec()),
        Just(b"caf\xc3\xa9".to_vec()),
    ]
}

proptest! {
    #[test]
    fn the_raw_head_carries_what_the_header_map_path_does(
        fields in prop::collection::vec((prop::sample::select(NAMES.to_vec()), value(), any::<u8>()), 0..10),
        trusted in any::<bool>(),
        v6 in any::<bool>(),
        websocket in any::<bool>(),
    ) {
        let raw = request(&fields);
        let Some(head) = parse(&raw) else { return Ok(()) };
        let peer = if v6 { "2001:db8::7".parse().unwrap() } else { "10.1.2.3".parse().unwrap() };
        let hop = Hop { peer, trusted, proto: "http" };
        prop_assert_eq!(fields_of(&by_raw(&head, hop, websocket)), fields_of(&by_map(&head, hop, websocket)));
    }
}

#[test]
fn content_length_stays_when_connection_names_it() {
    let head = parse(b"POST /r?x=1 HTTP/1.1\r\nContent-Length: 40\r\nConnection: content-length\r\n\r\n").unwrap();
    let hop = Hop { peer: "10.0.0.1".parse().unwrap(), trusted: false, proto: "http" };
    let (_, map) = fields_of(&by_raw(&head, hop, false));
    assert_eq!(map["content-length"], [b"40".to_vec()]);
    assert!(!map.contains_key("connection"));
}

#[test]
fn kept_lines_are_copied_as_they_came_and_the_rest_normalised() {
    let raw =
        b"GET /a HTTP/1.1\r\nHost:a\r\nX-A:  b\t\r\nConnection: x-gone\r\nX-Gone: 1\r\nX-C: c \r\nX-D: d\t\r\n\r\n";
    let head = parse(raw).unwrap();
    let hop = Hop { peer: "10.0.0.1".parse().unwrap(), trusted: true, proto: "http" };
    let mut out = Vec::new();
    let client = Client { method: &head.method, target: "/a", raw: &head.raw, fields: head.fields(), websocket: false };
    request_head(&mut out, client, head.framing, hop);
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("GET /a HTTP/1.1\r\nHost:a\r\nX-A: b\r\nX-C: c\r\nX-D: d\r\n"), "{text:?}");
}
