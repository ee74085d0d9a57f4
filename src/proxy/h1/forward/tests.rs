//! The raw head writer against the header-map rules it stands for: for any fields, the same
//! values per name reach the backend.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;

use super::*;
use crate::proxy::headers::{remove_hop_by_hop, set_forwarded};

/// Each field's values in order, by lowercase name, and the request line.
fn fields_of(head: &[u8]) -> (String, BTreeMap<String, Vec<Vec<u8>>>) {
    let text = head.strip_suffix(b"\r\n\r\n").unwrap();
    let mut lines = text.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let line = String::from_utf8(lines.next().unwrap().to_vec()).unwrap();
    let mut map: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for l in lines {
        let colon = l.iter().position(|&b| b == b':').unwrap();
        let name = String::from_utf8(l[..colon].to_ascii_lowercase()).unwrap();
        map.entry(name).or_default().push(l[colon + 2..].to_vec());
    }
    (line, map)
}

/// What the header-map path writes for the same request.
fn by_map(fields: &[(String, Vec<u8>)], framing: Framing, hop: Hop) -> Vec<u8> {
    let mut headers = HeaderMap::new();
    for (n, v) in fields {
        headers.append(HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_bytes(v).unwrap());
    }
    remove_hop_by_hop(&mut headers);
    set_forwarded(&mut headers, hop.peer, hop.trusted, hop.proto);
    let mut out = Vec::new();
    crate::h1::write::request_head(&mut out, &Method::POST, "/r?x=1", &headers, framing);
    out
}

fn by_raw(fields: &[(String, Vec<u8>)], framing: Framing, hop: Hop) -> Vec<u8> {
    let mut out = Vec::new();
    let iter = fields.iter().map(|(n, v)| (n.as_bytes(), v.as_slice()));
    request_head(&mut out, &Method::POST, "/r?x=1", iter, framing, hop);
    out
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
        Just(b"caf\xc3\xa9".to_vec()),
    ]
}

proptest! {
    #[test]
    fn the_raw_head_carries_what_the_header_map_path_does(
        fields in prop::collection::vec((prop::sample::select(NAMES.to_vec()), value()), 0..10),
        trusted in any::<bool>(),
        chunked in any::<bool>(),
        v6 in any::<bool>(),
    ) {
        let fields: Vec<(String, Vec<u8>)> = fields.into_iter().map(|(n, v)| (n.to_owned(), v)).collect();
        let framing = if chunked { Framing::Chunked } else { Framing::Length(0) };
        let peer = if v6 { "2001:db8::7".parse().unwrap() } else { "10.1.2.3".parse().unwrap() };
        let hop = Hop { peer, trusted, proto: "http" };
        prop_assert_eq!(fields_of(&by_raw(&fields, framing, hop)), fields_of(&by_map(&fields, framing, hop)));
    }
}

#[test]
fn content_length_stays_when_connection_names_it() {
    let fields = [("Content-Length".to_owned(), b"40".to_vec()), ("Connection".to_owned(), b"content-length".to_vec())];
    let hop = Hop { peer: "10.0.0.1".parse().unwrap(), trusted: false, proto: "http" };
    let (_, map) = fields_of(&by_raw(&fields, Framing::Length(40), hop));
    assert_eq!(map["content-length"], [b"40".to_vec()]);
    assert!(!map.contains_key("connection"));
}
