//! Room keys: where a request carries its room (header, cookie, query, path, host, or the page URL
//! of djust's first WebSocket message) and what a valid key is. Pure functions over a borrowed view of the request, so they can be unit-tested and fuzzed.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use http::{HeaderMap, HeaderName, Uri, header};
use regex::Regex;

/// Longest room key, in bytes, after percent-decoding.
pub const MAX_KEY_LEN: usize = 128;

/// One place a route looks for its room key.
#[derive(Clone, Debug)]
pub enum KeySource {
    Header(HeaderName),
    Cookie(String),
    Query(String),
    Path(Regex),
    Host(Regex),
    /// The `url` of djust's `mount` frame, the first message on the socket: only a WebSocket
    /// handshake answered by roomgate itself can reach it, so a request never carries it.
    Djust(Regex),
}

/// The kind of a key source, without its argument (for logs and metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    Header,
    Cookie,
    Query,
    Path,
    Host,
    Djust,
}

/// A valid room key: 1 to 128 bytes of visible ASCII, borrowed from the request when no decoding
/// was needed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RoomKey<'a>(Cow<'a, str>);

/// Where in the request the key was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found<'a> {
    pub key: RoomKey<'a>,
    /// Index of the source in the route's `keys` list.
    pub source: usize,
}

/// A borrowed view of the parts of a request that can carry a room key.
#[derive(Clone, Copy, Debug)]
pub struct RequestView<'a> {
    pub uri: &'a Uri,
    pub headers: &'a HeaderMap,
}

/// A key was present but is not a valid room key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("room key from {source_desc} {why}")]
pub struct KeyError {
    pub source_desc: String,
    pub why: KeyProblem,
}

/// What is wrong with a room key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyProblem {
    #[error("is longer than 128 bytes")]
    TooLong,
    #[error("has a byte outside visible ASCII (0x21-0x7e)")]
    NotVisibleAscii,
    #[error("has malformed percent-encoding")]
    BadPercentEncoding,
    #[error("is empty")]
    Empty,
}

/// A key source in the config file did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid key source {text:?}: {why}")]
pub struct SourceParseError {
    text: String,
    why: String,
}

/// Looks for the room key in each source in order; the first source that has one decides.
///
/// `Ok(None)`: no source carried a key. `Err`: the first source that carried something carried an
/// invalid key; it is never placed, and later sources are not consulted, so a bad key cannot be
/// silently replaced by another one.
pub fn extract<'a>(sources: &[KeySource], req: &RequestView<'a>) -> Result<Option<Found<'a>>, KeyError> {
    for (index, source) in sources.iter().enumerate() {
        let Some(raw) = source.raw_value(req) else { continue };
        let decoded = match source.kind() {
            SourceKind::Query => decode_form(raw),
            _ => decode_percent(raw),
        };
        let key = decoded
            .map(|key| match source.kind() {
                // Host names are case-insensitive: `Game-7.example.com` is room `game-7`.
                SourceKind::Host if key.bytes().any(|b| b.is_ascii_uppercase()) => Cow::Owned(key.to_ascii_lowercase()),
                _ => key,
            })
            .and_then(validate)
            .map_err(|why| KeyError { source_desc: source.to_string(), why })?;
        return Ok(Some(Found { key: RoomKey(key), source: index }));
    }
    Ok(None)
}

/// Checks an already-decoded key.
pub fn validate(key: Cow<'_, str>) -> Result<Cow<'_, str>, KeyProblem> {
    if key.is_empty() {
        return Err(KeyProblem::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyProblem::TooLong);
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(KeyProblem::NotVisibleAscii);
    }
    Ok(key)
}

// === impl KeySource ===

impl KeySource {
    pub fn kind(&self) -> SourceKind {
        match self {
            KeySource::Header(_) => SourceKind::Header,
            KeySource::Cookie(_) => SourceKind::Cookie,
            KeySource::Query(_) => SourceKind::Query,
            KeySource::Path(_) => SourceKind::Path,
            KeySource::Host(_) => SourceKind::Host,
            KeySource::Djust(_) => SourceKind::Djust,
        }
    }

    /// The raw (still encoded) value this source finds in the request; `None` when absent or empty.
    fn raw_value<'a>(&self, req: &RequestView<'a>) -> Option<&'a str> {
        let value = match self {
            KeySource::Header(name) => req.headers.get(name).and_then(|v| v.to_str().ok()),
            KeySource::Cookie(name) => find_cookie(req.headers, name),
            KeySource::Query(name) => req.uri.query().and_then(|q| find_query(q, name)),
            KeySource::Path(re) => capture_room(re, req.uri.path()),
            KeySource::Host(re) => request_host(req).and_then(|host| capture_room(re, host)),
            KeySource::Djust(_) => None,
        };
        value.map(str::trim).filter(|v| !v.is_empty())
    }
}

impl FromStr for KeySource {
    type Err = SourceParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| SourceParseError { text: text.to_owned(), why: why.to_owned() };
        let (kind, arg) = text
            .split_once(':')
            .ok_or_else(|| err("expected KIND:ARG, KIND one of header, cookie, query, path, host, djust"))?;
        if arg.is_empty() {
            return Err(err("the part after ':' is empty"));
        }
        match kind {
            "header" => HeaderName::from_str(arg).map(KeySource::Header).map_err(|_| err("not a valid header name")),
            "cookie" if arg.bytes().all(is_token_byte) => Ok(KeySource::Cookie(arg.to_owned())),
            "cookie" => Err(err("not a valid cookie name")),
            "query" => Ok(KeySource::Query(arg.to_owned())),
            "path" => room_regex(arg).map(KeySource::Path).map_err(|why| err(&why)),
            "host" => room_regex(arg).map(KeySource::Host).map_err(|why| err(&why)),
            "djust" => room_regex(arg).map(KeySource::Djust).map_err(|why| err(&why)),
            _ => Err(err("unknown kind, expected header, cookie, query, path, host or djust")),
        }
    }
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Header(name) => write!(f, "header:{name}"),
            KeySource::Cookie(name) => write!(f, "cookie:{name}"),
            KeySource::Query(name) => write!(f, "query:{name}"),
            KeySource::Path(re) => write!(f, "path:{re}"),
            KeySource::Host(re) => write!(f, "host:{re}"),
            KeySource::Djust(re) => write!(f, "djust:{re}"),
        }
    }
}

/// The room in a page path (djust's `url`), by a `djust:` source's regex. `Ok(None)`: the path does
/// not match (no room); `Err`: it matches, but the captured key is not valid.
pub fn room_in_path(re: &Regex, path: &str) -> Result<Option<String>, KeyProblem> {
    let Some(raw) = capture_room(re, path).map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let key = decode_percent(raw).and_then(validate)?;
    Ok(Some(key.into_owned()))
}

fn room_regex(pattern: &str) -> Result<Regex, String> {
    let re = Regex::new(pattern).map_err(|e| format!("bad regex: {e}"))?;
    if !re.capture_names().any(|name| name == Some("room")) {
        return Err("the regex has no named group `room`, write (?P<room>...)".to_owned());
    }
    Ok(re)
}

fn capture_room<'a>(re: &Regex, haystack: &'a str) -> Option<&'a str> {
    re.captures(haystack).and_then(|caps| caps.name("room")).map(|m| m.as_str())
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The request's host name without port: the URI's authority, else the Host header.
fn request_host<'a>(req: &RequestView<'a>) -> Option<&'a str> {
    let authority = match req.uri.host() {
        Some(host) => host,
        None => req.headers.get(header::HOST)?.to_str().ok()?,
    };
    Some(strip_port(authority))
}

fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        // IPv6 literal: keep the brackets, drop what follows `]`.
        return authority.find(']').map_or(authority, |end| &authority[..=end]);
    }
    authority.rsplit_once(':').map_or(authority, |(host, _port)| host)
}

/// The raw value of cookie `name` in the request's Cookie headers (first one wins).
pub fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    find_cookie(headers, name)
}

fn find_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|line| line.split(';')).find_map(
        |pair| {
            let (n, v) = pair.split_once('=')?;
            (n.trim() == name).then(|| strip_quotes(v.trim()))
        },
    )
}

fn strip_quotes(v: &str) -> &str {
    v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v)
}

fn find_query<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|pair| {
        let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
        let matches = match decode_form(n) {
            Ok(decoded) => decoded == name,
            Err(_) => false,
        };
        matches.then_some(v)
    })
}

/// Strict percent-decoding: `%` must be followed by two hex digits.
fn decode_percent(raw: &str) -> Result<Cow<'_, str>, KeyProblem> {
    decode(raw, false)
}

/// `application/x-www-form-urlencoded` decoding (`+` is a space) for query strings.
fn decode_form(raw: &str) -> Result<Cow<'_, str>, KeyProblem> {
    decode(raw, true)
}

fn decode(raw: &str, plus_is_space: bool) -> Result<Cow<'_, str>, KeyProblem> {
    let needs_work = raw.bytes().any(|b| b == b'%' || (plus_is_space && b == b'+'));
    if !needs_work {
        return Ok(Cow::Borrowed(raw));
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hi = bytes.get(i + 1).and_then(|b| hex(*b));
                let lo = bytes.get(i + 2).and_then(|b| hex(*b));
                let (Some(hi), Some(lo)) = (hi, lo) else {
                    return Err(KeyProblem::BadPercentEncoding);
                };
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    // Non-UTF-8 bytes cannot be visible ASCII either.
    String::from_utf8(out).map(Cow::Owned).map_err(|_| KeyProblem::NotVisibleAscii)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

// === impl RoomKey ===

impl RoomKey<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Display for RoomKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Encodes a key for a cookie value: the characters a cookie value may not hold, and `%` itself,
/// are percent-encoded; the cookie key source decodes them back.
pub fn encode_cookie_value(key: &str) -> Cow<'_, str> {
    const SPECIAL: &[u8] = b"%\";,\\";
    if !key.bytes().any(|b| SPECIAL.contains(&b)) {
        return Cow::Borrowed(key);
    }
    let mut out = String::with_capacity(key.len() + 8);
    for b in key.bytes() {
        if SPECIAL.contains(&b) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn sources(list: &[&str]) -> Vec<KeySource> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn req(uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
        let mut b = Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn key(list: &[&str], parts: &http::request::Parts) -> Result<Option<(String, usize)>, KeyError> {
        let view = RequestView { uri: &parts.uri, headers: &parts.headers };
        extract(&sources(list), &view).map(|f| f.map(|f| (f.key.as_str().to_owned(), f.source)))
    }

    #[test]
    fn each_source_finds_its_key() {
        let p = req(
            "http://Game-7.example.com:8080/room/r1/x?a=1&room=r2",
            &[("x-room", "r3"), ("cookie", "a=b; roomgate_room=r4")],
        );
        assert_eq!(key(&["path:^/room/(?P<room>[^/]+)/"], &p).unwrap(), Some(("r1".into(), 0)));
        assert_eq!(key(&["query:room"], &p).unwrap(), Some(("r2".into(), 0)));
        assert_eq!(key(&["header:X-Room"], &p).unwrap(), Some(("r3".into(), 0)));
        assert_eq!(key(&["cookie:roomgate_room"], &p).unwrap(), Some(("r4".into(), 0)));
        assert_eq!(key(&["host:^(?i)(?P<room>game-[0-9]+)\\.example\\.com$"], &p).unwrap(), Some(("game-7".into(), 0)));
    }

    #[test]
    fn first_source_with_a_key_wins() {
        let p = req("/ws/live/?room=q", &[("x-room", "h")]);
        assert_eq!(key(&["cookie:c", "header:x-room", "query:room"], &p).unwrap(), Some(("h".into(), 1)));
        assert_eq!(key(&["cookie:c"], &p).unwrap(), None);
    }

    #[test]
    fn host_from_header_without_port() {
        let p = req("/", &[("host", "r9.rooms.test:8443")]);
        assert_eq!(key(&["host:^(?P<room>[^.]+)\\.rooms"], &p).unwrap(), Some(("r9".into(), 0)));
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("example.com"), "example.com");
    }

    #[test]
    fn percent_decoding_is_the_same_for_every_source() {
        let p = req("/room/a%2Fb/?room=a%2Fb", &[("x-room", "a%2Fb"), ("cookie", "k=a%2Fb")]);
        for src in ["path:^/room/(?P<room>[^/]+)/", "query:room", "header:x-room", "cookie:k"] {
            assert_eq!(key(&[src], &p).unwrap().unwrap().0, "a/b", "{src}");
        }
    }

    #[test]
    fn invalid_keys_are_rejected_not_skipped() {
        let long = "x".repeat(129);
        let cases: &[(&str, KeyProblem)] = &[
            ("a%20b", KeyProblem::NotVisibleAscii),
            ("a%zz", KeyProblem::BadPercentEncoding),
            ("a%4", KeyProblem::BadPercentEncoding),
            ("%C3%A9", KeyProblem::NotVisibleAscii),
            ("%FF", KeyProblem::NotVisibleAscii),
            (&long, KeyProblem::TooLong),
        ];
        for (value, why) in cases {
            let p = req("/", &[("x-room", value), ("y-room", "fine")]);
            let err = key(&["header:x-room", "header:y-room"], &p).unwrap_err();
            assert_eq!(err.why, *why, "{value}");
        }
        let p = req("/?room=a+b", &[]);
        assert_eq!(key(&["query:room"], &p).unwrap_err().why, KeyProblem::NotVisibleAscii);
        let ok = "x".repeat(128);
        let p = req("/", &[("x-room", &ok)]);
        assert!(key(&["header:x-room"], &p).unwrap().is_some());
    }

    #[test]
    fn empty_values_count_as_absent() {
        let p = req("/?room=", &[("x-room", " "), ("cookie", "k=")]);
        assert_eq!(key(&["query:room", "header:x-room", "cookie:k"], &p).unwrap(), None);
    }

    #[test]
    fn quoted_cookie_and_first_match() {
        let p = req("/", &[("cookie", "k=\"q1\"; k=q2")]);
        assert_eq!(key(&["cookie:k"], &p).unwrap().unwrap().0, "q1");
    }

    #[test]
    fn parses_and_rejects_sources() {
        assert!("header:X-Room".parse::<KeySource>().is_ok());
        for bad in ["header", "header:", "header:bad name", "path:^/(x)", "path:(", "nope:x", "cookie:a;b"] {
            assert!(bad.parse::<KeySource>().is_err(), "{bad}");
        }
        let s: KeySource = "path:^/room/(?P<room>[^/]+)/".parse().unwrap();
        assert_eq!(s.to_string(), "path:^/room/(?P<room>[^/]+)/");
    }

    #[test]
    fn cookie_encoding_round_trips() {
        for k in ["plain", "a;b", "100%", "q\"x", "a,b\\c"] {
            let enc = encode_cookie_value(k);
            let value = format!("c={enc}");
            let p = req("/", &[("cookie", &value)]);
            assert_eq!(key(&["cookie:c"], &p).unwrap().unwrap().0, k);
        }
    }
}

#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any request line and header bytes: extraction returns, never panics, and whatever it
        /// accepts is a valid key.
        #[test]
        fn arbitrary_requests_never_panic(path in "/[ -~]{0,80}", query in proptest::option::of("[ -~]{0,80}"),
                                          header in proptest::collection::vec(any::<u8>(), 0..160),
                                          cookie in "[ -~]{0,160}", host in "[ -~]{0,40}") {
            let uri = match &query { Some(q) => format!("{path}?{q}"), None => path.clone() };
            let Ok(uri) = uri.parse::<Uri>() else { return Ok(()) };
            let mut headers = HeaderMap::new();
            if let Ok(v) = http::HeaderValue::from_bytes(&header) { headers.insert("x-room", v); }
            if let Ok(v) = http::HeaderValue::from_str(&cookie) { headers.insert(header::COOKIE, v); }
            if let Ok(v) = http::HeaderValue::from_str(&host) { headers.insert(header::HOST, v); }
            let sources: Vec<KeySource> = ["header:x-room", "cookie:room", "query:room", "path:^/(?P<room>[^/]*)", "host:^(?P<room>[^.]*)"]
                .iter().map(|s| s.parse().unwrap()).collect();
            for i in 0..sources.len() {
                let view = RequestView { uri: &uri, headers: &headers };
                if let Ok(Some(found)) = extract(&sources[i..], &view) {
                    let k = found.key.as_str();
                    prop_assert!(!k.is_empty() && k.len() <= MAX_KEY_LEN && k.bytes().all(|b| b.is_ascii_graphic()));
                }
            }
        }
    }
}
