//! Whether a request is a WebSocket handshake, decided once from one reading of its head and
//! passed down as a [`Kind`]: the codec decides it for HTTP/1 (from the field lines where they
//! lie), the request path for HTTP/2 (from hyper's map), both with [`classify`], and nothing
//! after derives it again. The fields the decision reads must be unambiguous to every parser on
//! the way, so a head that could read two ways is refused here, not guessed at.

use http::{Method, Version};

use crate::fields::{Fields, is_visible};

/// What a request head is, for routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Any request that is not a WebSocket handshake (an `Upgrade` to another protocol is only a
    /// hop-by-hop field: removed, and the request served as a plain one).
    Plain,
    /// A WebSocket handshake (RFC 6455 section 4.1): `Connection: upgrade`, `Upgrade: websocket`,
    /// an HTTP/1.1 GET with no body and exactly one valid `Sec-WebSocket-Key`.
    WebSocket,
}

/// Why a head is refused before it is routed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// 400: a field that decides what the request is could be read two ways, or the handshake
    /// breaks RFC 6455.
    #[error("{0}")]
    Bad(&'static str),
    /// 405: roomgate is not a forward proxy.
    #[error("CONNECT is not served")]
    Connect,
}

/// What one pass over the fields found.
#[derive(Default)]
struct Seen<'a> {
    upgrade_token: bool,
    websocket_token: bool,
    /// `Connection` names a `Sec-WebSocket-*` field.
    names_handshake_field: bool,
    key: Option<&'a [u8]>,
    keys: usize,
    versions: usize,
    /// `Transfer-Encoding`, or a `Content-Length` other than 0.
    body: bool,
}

/// Classifies a request head. Refuses one whose `Connection`, `Upgrade` or `Sec-WebSocket-*`
/// values hold a byte that is not visible ASCII (one parser skips such a value, another reads
/// it), a `CONNECT`, and a handshake that is not exactly one: not a GET, announcing a body, not
/// HTTP/1.1, or with no key, two keys, two versions, or a `Connection` that names a
/// `Sec-WebSocket-*` field (which the hop would remove, so that the backend answers another
/// handshake than the one checked). One pass over the fields; a plain request with none of
/// these fields costs a comparison of each name's first byte or two.
pub fn classify<F: Fields + ?Sized>(method: &Method, version: Version, fields: &F) -> Result<Kind, Refused> {
    if method == Method::CONNECT {
        return Err(Refused::Connect);
    }
    let mut seen = Seen::default();
    for (name, value) in fields.lines() {
        note(&mut seen, name, value)?;
    }
    if !(seen.upgrade_token && seen.websocket_token) {
        return Ok(Kind::Plain);
    }
    let refuse = |why| Err(Refused::Bad(why));
    if version != Version::HTTP_11 {
        return refuse("a WebSocket handshake must be HTTP/1.1");
    }
    if method != Method::GET {
        return refuse("a WebSocket handshake must be a GET");
    }
    // One that announces a body would hold the backend's connection waiting for bytes that never
    // come, or smuggle them into the tunnel.
    if seen.body {
        return refuse("a WebSocket handshake carries no body");
    }
    match (seen.keys, seen.key) {
        (0, _) => return refuse("no Sec-WebSocket-Key"),
        (1, Some(key)) if is_handshake_key(key.trim_ascii()) => {}
        (1, _) => return refuse("Sec-WebSocket-Key is not 16 bytes in base64"),
        _ => return refuse("two Sec-WebSocket-Key fields"),
    }
    if seen.versions > 1 {
        return refuse("two Sec-WebSocket-Version fields");
    }
    if seen.names_handshake_field {
        return refuse("Connection names a Sec-WebSocket-* field");
    }
    Ok(Kind::WebSocket)
}

/// Notes one field line in `seen`.
fn note<'a>(seen: &mut Seen<'a>, name: &[u8], value: &'a [u8]) -> Result<(), Refused> {
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    let tokens = || value.split(|&b| b == b',').map(<[u8]>::trim_ascii);
    if is(b"connection") {
        visible(value, "a byte that is not visible ASCII in Connection")?;
        for t in tokens() {
            seen.upgrade_token |= t.eq_ignore_ascii_case(b"upgrade");
            seen.names_handshake_field |= is_handshake_field(t);
        }
    } else if is(b"upgrade") {
        visible(value, "a byte that is not visible ASCII in Upgrade")?;
        seen.websocket_token |= tokens().any(|t| t.eq_ignore_ascii_case(b"websocket"));
    } else if is_handshake_field(name) {
        visible(value, "a byte that is not visible ASCII in a Sec-WebSocket-* field")?;
        if is(b"sec-websocket-key") {
            seen.keys += 1;
            seen.key = Some(value);
        } else if is(b"sec-websocket-version") {
            seen.versions += 1;
        }
    } else if is(b"transfer-encoding") || (is(b"content-length") && value.trim_ascii() != b"0") {
        seen.body = true;
    }
    Ok(())
}

fn visible(value: &[u8], why: &'static str) -> Result<(), Refused> {
    if is_visible(value) { Ok(()) } else { Err(Refused::Bad(why)) }
}

/// A `Sec-WebSocket-*` name.
fn is_handshake_field(name: &[u8]) -> bool {
    name.get(..14).is_some_and(|p| p.eq_ignore_ascii_case(b"sec-websocket-"))
}

/// `Sec-WebSocket-Key`: 16 bytes in base64 (RFC 6455 section 4.1), 24 characters.
pub fn is_handshake_key(key: &[u8]) -> bool {
    let b64 = |b: &u8| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/';
    key.len() == 24 && key[..21].iter().all(b64) && matches!(key[21], b'A' | b'Q' | b'g' | b'w') && &key[22..] == b"=="
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue, Method, Version};

    use super::{Kind, Refused, classify};

    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

    fn map(fields: &[(&str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (n, v) in fields {
            map.append(http::HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_bytes(v).unwrap());
        }
        map
    }

    fn get(fields: &[(&str, &[u8])]) -> Result<Kind, Refused> {
        classify(&Method::GET, Version::HTTP_11, &map(fields))
    }

    fn ws(extra: &[(&str, &[u8])]) -> Result<Kind, Refused> {
        let mut f: Vec<(&str, &[u8])> = vec![
            ("connection", b"keep-alive, Upgrade"),
            ("upgrade", b"WebSocket"),
            ("sec-websocket-key", KEY.as_bytes()),
        ];
        f.extend_from_slice(extra);
        get(&f)
    }

    #[test]
    fn a_handshake_is_both_tokens_and_one_valid_key() {
        assert_eq!(ws(&[("sec-websocket-version", b"13")]), Ok(Kind::WebSocket));
        assert_eq!(get(&[("connection", b"upgrade"), ("upgrade", b"h2c")]), Ok(Kind::Plain));
        assert_eq!(get(&[("upgrade", b"websocket")]), Ok(Kind::Plain));
        assert_eq!(get(&[]), Ok(Kind::Plain));
        assert!(get(&[("connection", b"upgrade"), ("upgrade", b"websocket")]).is_err(), "no key");
    }

    #[test]
    fn bytes_one_parser_would_skip_are_refused() {
        assert!(get(&[("connection", b"upgrade"), ("upgrade", b"websocket, \xff")]).is_err());
        assert!(get(&[("connection", b"upgrade, \x80"), ("upgrade", b"websocket")]).is_err());
        assert!(ws(&[("sec-websocket-protocol", b"chat\xe9")]).is_err());
        assert!(get(&[("Upgrade", b"h2c\xff")]).is_err(), "even when the request would be plain");
        assert_eq!(get(&[("x-other", b"caf\xc3\xa9")]), Ok(Kind::Plain), "other fields are not read here");
    }

    #[test]
    fn a_handshake_that_could_read_two_ways_is_refused() {
        assert!(ws(&[("sec-websocket-key", KEY.as_bytes())]).is_err(), "two keys");
        assert!(ws(&[("sec-websocket-version", b"13"), ("sec-websocket-version", b"8")]).is_err());
        assert!(ws(&[("connection", b"Sec-WebSocket-Key")]).is_err());
        assert!(ws(&[("content-length", b"5")]).is_err());
        assert!(ws(&[("transfer-encoding", b"chunked")]).is_err());
        assert_eq!(ws(&[("content-length", b"0")]), Ok(Kind::WebSocket));
        let h = map(&[("connection", b"upgrade"), ("upgrade", b"websocket"), ("sec-websocket-key", KEY.as_bytes())]);
        assert!(classify(&Method::POST, Version::HTTP_11, &h).is_err());
        assert!(classify(&Method::GET, Version::HTTP_10, &h).is_err());
        assert_eq!(classify(&Method::CONNECT, Version::HTTP_11, &HeaderMap::new()), Err(Refused::Connect));
    }
}
