//! The differential check of issue 32, shared by `tests/head_differential.rs` and the fuzz target
//! `fuzz/fuzz_targets/head_differential.rs`: three readings of one request head must come to
//! the same decisions (WebSocket handshake or not, room key, route):
//! - roomgate's codec (`h1::parse_request`), its fields read where they lie;
//! - the same head as the `http::HeaderMap` the request path builds from the codec's lines (the
//!   djust session's request, the shape HTTP/2 requests arrive in);
//! - a plain reading written from RFC 9112 alone (field lines split on CRLF, the name up to the
//!   colon, the value trimmed of spaces and tabs), which knows nothing of httparse.
//!
//! A head the codec refuses needs no agreement; one it takes must read the same all three ways.

#![allow(dead_code, clippy::unwrap_used)]

use bytes::BytesMut;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, Version};
use roomgate::Config;
use roomgate::fields::Fields;
use roomgate::handshake::{Kind, Refused, classify};
use roomgate::room_key::{self, RequestView};

/// Routes with every kind of key source.
pub const CONFIG: &str = r#"
[[backends]]
id = "a"
addr = "127.0.0.1:1"

[[routes]]
prefix = "/room/"
mode = "room"
keys = ["path:^/room/(?P<room>[^/]+)/", "header:X-Room"]

[[routes]]
prefix = "/ws/live/"
mode = "room"
keys = ["query:room", "header:X-Room", "djust:^/room/(?P<room>[^/]+)/"]
on_missing = "shared"

[[routes]]
prefix = "/c/"
mode = "room"
keys = ["cookie:room"]

[[routes]]
prefix = "/h/"
mode = "room"
keys = ["host:^(?P<room>[a-z0-9]+)\\.rooms\\.test$"]

[[routes]]
prefix = "/"
mode = "shared"
"#;

pub fn config() -> Config {
    Config::from_toml(CONFIG, "differential").unwrap()
}

/// What one reading decided.
#[derive(Debug, PartialEq, Eq)]
pub struct Decision {
    pub kind: Result<Kind, Refused>,
    /// The room key, none, or why it was refused (the error's text).
    pub key: Result<Option<String>, String>,
    pub route: Option<usize>,
}

/// Checks one head (its bytes as a client sends them). `Err`: the readings disagree, and how.
pub fn check(config: &Config, bytes: &[u8]) -> Result<(), String> {
    let mut buf = BytesMut::from(bytes);
    let Ok(Some(head)) = roomgate::h1::parse_request(&mut buf, 64 * 1024) else { return Ok(()) };
    let codec = decide(config, &head.uri, &head, Ok(head.kind));
    let map = header_map(head.fields()).map_err(|e| format!("the codec took a field the map refuses: {e}"))?;
    let mapped = decide(config, &head.uri, &map, classify(&head.method, head.version, &map));
    if codec != mapped {
        return Err(format!("codec {codec:?} != header map {mapped:?}"));
    }
    let plain = plain_reading(&bytes[..bytes.len() - buf.len()])
        .map_err(|why| format!("the codec took a head RFC 9112 refuses ({why})"))?;
    if plain.method != head.method || plain.uri != head.uri || plain.version != head.version {
        return Err(format!(
            "request line: codec {} {} vs plain {} {}",
            head.method, head.uri, plain.method, plain.uri
        ));
    }
    let kind = classify(&plain.method, plain.version, &plain.fields);
    let read = decide(config, &plain.uri, &plain.fields, kind);
    if codec != read {
        return Err(format!("codec {codec:?} != RFC 9112 reading {read:?}"));
    }
    let spec = spec_kind(&plain);
    if spec != codec.kind.map_err(|_| ()) {
        return Err(format!("codec {:?} != RFC 6455 reading {spec:?}", codec.kind));
    }
    Ok(())
}

/// Whether a head is a WebSocket handshake, written from RFC 6455 section 4.1 and the rules
/// `handshake.rs` states (a value outside visible ASCII in a field that decides it, a second key
/// or version, a body, a field named in `Connection`: refused), apart from its code.
fn spec_kind(plain: &Plain) -> Result<Kind, ()> {
    if plain.method == Method::CONNECT {
        return Err(());
    }
    let lines = &plain.fields.0;
    let named = |name: &'static str| lines.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes()));
    let deciding = |n: &[u8]| {
        let n = String::from_utf8_lossy(n).to_ascii_lowercase();
        n == "connection" || n == "upgrade" || n.starts_with("sec-websocket-")
    };
    let visible = |v: &[u8]| v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
    if lines.iter().any(|(n, v)| deciding(n) && !visible(v)) {
        return Err(());
    }
    let tokens = |name: &'static str| -> Vec<String> {
        named(name)
            .flat_map(|(_, v)| {
                String::from_utf8_lossy(v).split(',').map(|t| t.trim().to_ascii_lowercase()).collect::<Vec<_>>()
            })
            .collect()
    };
    let connection = tokens("connection");
    if !(connection.iter().any(|t| t == "upgrade") && tokens("upgrade").iter().any(|t| t == "websocket")) {
        return Ok(Kind::Plain);
    }
    let ok = plain.version == Version::HTTP_11
        && plain.method == Method::GET
        && named("transfer-encoding").next().is_none()
        && named("content-length").all(|(_, v)| v.as_slice() == b"0")
        && named("sec-websocket-key").count() == 1
        && named("sec-websocket-key").all(|(_, v)| valid_key(v))
        && named("sec-websocket-version").count() <= 1
        && !connection.iter().any(|t| t.starts_with("sec-websocket-"));
    if ok { Ok(Kind::WebSocket) } else { Err(()) }
}

/// Sixteen bytes in base64: 22 characters of the alphabet, then `==`, the last one carrying no
/// bits beyond the 128.
fn valid_key(v: &[u8]) -> bool {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let Some(body) = v.strip_suffix(b"==") else { return false };
    body.len() == 22
        && body.iter().all(|b| ALPHABET.contains(b))
        && ALPHABET.iter().position(|&a| a == body[21]).is_some_and(|i| i % 16 == 0)
}

fn decide<F: Fields + ?Sized>(config: &Config, uri: &Uri, fields: &F, kind: Result<Kind, Refused>) -> Decision {
    let route = config.route_for(uri.path());
    let key = match route {
        Some((_, route)) => match room_key::extract(&route.keys, &RequestView { uri, headers: fields }) {
            Ok(found) => Ok(found.map(|f| f.key.as_str().to_owned())),
            Err(e) => Err(e.to_string()),
        },
        None => Ok(None),
    };
    Decision { kind, key, route: route.map(|(i, _)| i) }
}

fn header_map<'a>(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, value) in fields {
        let name = HeaderName::from_bytes(name).map_err(|e| e.to_string())?;
        let value = HeaderValue::from_bytes(value).map_err(|e| e.to_string())?;
        map.append(name, value);
    }
    Ok(map)
}

/// A head as RFC 9112 reads it, with no parser library.
pub struct Plain {
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub fields: Lines,
}

/// Field lines, in order.
pub struct Lines(Vec<(Vec<u8>, Vec<u8>)>);

impl Fields for Lines {
    fn values<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a [u8]> {
        let name = name.as_bytes().to_vec();
        self.0.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(&name)).map(|(_, v)| v.as_slice())
    }

    fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(|(n, _)| n.as_slice())
    }

    fn lines(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.0.iter().map(|(n, v)| (n.as_slice(), v.as_slice()))
    }

    fn count(&self) -> usize {
        self.0.len()
    }

    fn wire_size(&self) -> usize {
        self.0.iter().map(|(n, v)| n.len() + v.len() + 4).sum()
    }
}

/// RFC 9112 sections 2.2, 3 and 5: lines end with CRLF (a bare CR or LF is an error here: a
/// proxy is not the only parser on the way); `method SP target SP version`; `name ":" OWS value
/// OWS`, the name a token with nothing before the colon; no obs-fold.
pub fn plain_reading(head: &[u8]) -> Result<Plain, &'static str> {
    let body = head.strip_suffix(b"\r\n\r\n").ok_or("no empty line")?;
    let mut lines = Vec::new();
    let mut rest = body;
    loop {
        match rest.windows(2).position(|w| w == b"\r\n") {
            Some(at) => {
                lines.push(&rest[..at]);
                rest = &rest[at + 2..];
            }
            None => {
                lines.push(rest);
                break;
            }
        }
    }
    if lines.iter().any(|l| l.contains(&b'\r') || l.contains(&b'\n')) {
        return Err("a bare CR or LF");
    }
    let (request_line, field_lines) = lines.split_first().ok_or("no request line")?;
    let mut parts = request_line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("request line");
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err("method");
    }
    let method = Method::from_bytes(method).map_err(|_| "method")?;
    let uri = Uri::try_from(target).map_err(|_| "target")?;
    let version = match version {
        b"HTTP/1.1" => Version::HTTP_11,
        b"HTTP/1.0" => Version::HTTP_10,
        _ => return Err("version"),
    };
    let mut fields = Vec::new();
    for line in field_lines {
        let colon = line.iter().position(|&b| b == b':').ok_or("a field line with no colon")?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err("field name");
        }
        let value = trim_ows(value);
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err("field value");
        }
        fields.push((name.to_vec(), value.to_vec()));
    }
    Ok(Plain { method, uri, version, fields: Lines(fields) })
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

// === generated heads ===

/// Choices drawn from bytes (a fuzzer's input, or a seeded generator's output).
pub struct Choices<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Choices<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Choices { bytes, at: 0 }
    }

    fn byte(&mut self) -> u8 {
        let b = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn pick<'t, T>(&mut self, of: &'t [T]) -> &'t T {
        &of[usize::from(self.byte()) % of.len()]
    }

    fn chance(&mut self, in_256: u8) -> bool {
        self.byte() < in_256
    }
}

const METHODS: [&str; 10] = ["GET", "GET", "GET", "GET", "GET", "GET", "POST", "CONNECT", "HEAD", "get"];
const TARGETS: [&str; 12] = [
    "/ws/live/",
    "/ws/live/?room=A",
    "/ws/live/?room=A&room=B",
    "/ws/live/?room=%41",
    "/room/7/",
    "/room/%37/",
    "/c/x",
    "/h/x",
    "http://rooms.test/ws/live/?room=A",
    "http://other.test/room/1/",
    "/",
    "*",
];
const VERSIONS: [&str; 6] = ["HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/1.2"];
const NAMES: [&str; 16] = [
    "Host",
    "Connection",
    "Upgrade",
    "Sec-WebSocket-Key",
    "Sec-WebSocket-Version",
    "Sec-WebSocket-Protocol",
    "Sec-WebSocket-Extensions",
    "X-Room",
    "X_Room",
    "Cookie",
    "Content-Length",
    "Transfer-Encoding",
    "Origin",
    "Sec-Websocket-Key",
    "Proxy-Connection",
    "Expect",
];

/// The fields of a valid handshake, names and values drawn like the others'.
const HANDSHAKE: [&str; 4] = ["Connection", "Upgrade", "Sec-WebSocket-Key", "Sec-WebSocket-Version"];

fn values_for(name: &str) -> &'static [&'static str] {
    match name.to_ascii_lowercase().as_str() {
        "host" => &["rooms.test", "a7.rooms.test", "other.test", "rooms.test:80", "a.rooms.test, b.rooms.test", ""],
        "connection" | "proxy-connection" => {
            &["Upgrade", "keep-alive, Upgrade", "upgrade,close", "close", "Upgrade, Sec-WebSocket-Key", "X-Room", ""]
        }
        "upgrade" => &["websocket", "WebSocket", "websocket, h2c", "h2c", "websocket/13", ""],
        "sec-websocket-key" => &["dGhlIHNhbXBsZSBub25jZQ==", "AAAAAAAAAAAAAAAAAAAAAA==", "short", ""],
        "sec-websocket-version" => &["13", "8", "13, 8"],
        "x-room" | "x_room" => &["A", "B", "A,B", "a%20b", "7", ""],
        "cookie" => &["room=A", "room=A; room=B", "x=1; room=B", "room=\"A\"", "room=A,x=1"],
        "content-length" => &["0", "5", "0, 0", "+0"],
        "transfer-encoding" => &["chunked", "identity", "chunked, chunked"],
        "expect" => &["100-continue"],
        _ => &["http://rooms.test", "chat", "permessage-deflate"],
    }
}

/// A request head drawn from `c`: a request line and up to a dozen fields, their names in any
/// case, values with spaces, tabs, obs-text and controls, lines sometimes ended with a bare LF.
pub fn generate(c: &mut Choices<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    let lf: &[u8] = if c.chance(8) { b"\n" } else { b"\r\n" };
    out.extend_from_slice(format!("{} {} {}", c.pick(&METHODS), c.pick(&TARGETS), c.pick(&VERSIONS)).as_bytes());
    out.extend_from_slice(lf);
    if c.chance(230) {
        out.extend_from_slice(b"Host: rooms.test");
        out.extend_from_slice(if c.chance(8) { b"\n" } else { b"\r\n" });
    }
    // Half of them start as a valid handshake, so that both sides of the decision are reached.
    let base: &[&str] = if c.chance(128) { &HANDSHAKE } else { &[] };
    let n = c.byte() % if base.is_empty() { 12 } else { 4 };
    for i in 0..base.len() + usize::from(n) {
        let name = base.get(i).copied().unwrap_or_else(|| *c.pick(&NAMES));
        let mut name: Vec<u8> = name.bytes().collect();
        match c.byte() % 4 {
            0 => name.make_ascii_lowercase(),
            1 => name.make_ascii_uppercase(),
            _ => {}
        }
        let values = values_for(std::str::from_utf8(&name).unwrap());
        let mut value: Vec<u8>;
        if i < base.len() && c.chance(220) {
            value = values[0].bytes().collect();
        } else {
            value = c.pick(values).bytes().collect();
            mutate(c, &mut value);
        }
        out.extend_from_slice(&name);
        if c.chance(6) {
            out.push(b' ');
        }
        out.push(b':');
        const OWS: [&[u8]; 4] = [b" ", b"", b"\t", b"  "];
        let ows: &[u8] = c.pick::<&[u8]>(&OWS);
        out.extend_from_slice(ows);
        out.extend_from_slice(&value);
        out.extend_from_slice(if c.chance(8) { b"\n" } else { b"\r\n" });
    }
    out.extend_from_slice(if c.chance(8) { b"\n" } else { b"\r\n" });
    out
}

/// Bytes a reader may skip, trim or take: obs-text, controls, spaces, a comma list.
fn mutate(c: &mut Choices<'_>, value: &mut Vec<u8>) {
    for _ in 0..(c.byte() % 3) {
        let at = usize::from(c.byte()) % (value.len() + 1);
        const INSERTED: [&[u8]; 10] =
            [b"\xff", b"\x80", b"\xe9", b" ", b"\t", b",", b", websocket", b"\x01", b"\x7f", b"\x00"];
        let inserted = *c.pick(&INSERTED);
        value.splice(at..at, inserted.iter().copied());
    }
}
