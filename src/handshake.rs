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

/// Fields whose values decide whether and how a request changes protocol.
fn decides(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"connection")
        || name.eq_ignore_ascii_case(b"upgrade")
        || name.get(..14).is_some_and(|p| p.eq_ignore_ascii_case(b"sec-websocket-"))
}

/// Classifies a request head. Refuses one whose `Connection`, `Upgrade` or `Sec-WebSocket-*`
/// values hold a byte that is not visible ASCII (one parser skips such a value, another reads
/// it), a `CONNECT`, and a handshake that is not exactly one: not a GET, announcing a body, not
/// HTTP/1.1, or with no key, two keys, two versions, or a `Connection` that names a
/// `Sec-WebSocket-*` field (which the hop would remove, so that the backend answers another
/// handshake than the one checked).
pub fn classify<F: Fields + ?Sized>(method: &Method, version: Version, fields: &F) -> Result<Kind, Refused> {
    if method == Method::CONNECT {
        return Err(Refused::Connect);
    }
    let mut seen = false;
    for name in fields.names().filter(|n| decides(n)) {
        seen = true;
        // A field name is a token (both parsers check), so it is text; names compare in any case.
        let name = std::str::from_utf8(name).unwrap_or_default();
        if !fields.values(name).all(is_visible) {
            return Err(Refused::Bad(not_visible(name)));
        }
    }
    if !(seen && has_token(fields, "connection", b"upgrade") && has_token(fields, "upgrade", b"websocket")) {
        return Ok(Kind::Plain);
    }
    check_websocket(method, version, fields)?;
    Ok(Kind::WebSocket)
}

/// The rules a WebSocket handshake must meet beyond its two tokens.
fn check_websocket<F: Fields + ?Sized>(method: &Method, version: Version, fields: &F) -> Result<(), Refused> {
    if version != Version::HTTP_11 {
        return Err(Refused::Bad("a WebSocket handshake must be HTTP/1.1"));
    }
    if method != Method::GET {
        return Err(Refused::Bad("a WebSocket handshake must be a GET"));
    }
    // One that announces a body would hold the backend's connection waiting for bytes that never
    // come, or smuggle them into the tunnel.
    if fields.has("transfer-encoding") || fields.values("content-length").any(|v| v.trim_ascii() != b"0") {
        return Err(Refused::Bad("a WebSocket handshake carries no body"));
    }
    let mut keys = fields.values("sec-websocket-key");
    match (keys.next(), keys.next()) {
        (None, _) => return Err(Refused::Bad("no Sec-WebSocket-Key")),
        (Some(_), Some(_)) => return Err(Refused::Bad("two Sec-WebSocket-Key fields")),
        (Some(key), None) if !is_handshake_key(key.trim_ascii()) => {
            return Err(Refused::Bad("Sec-WebSocket-Key is not 16 bytes in base64"));
        }
        _ => {}
    }
    if fields.values("sec-websocket-version").nth(1).is_some() {
        return Err(Refused::Bad("two Sec-WebSocket-Version fields"));
    }
    let names_handshake_field = fields
        .values("connection")
        .flat_map(|v| v.split(|&b| b == b','))
        .any(|t| t.trim_ascii().get(..14).is_some_and(|p| p.eq_ignore_ascii_case(b"sec-websocket-")));
    if names_handshake_field {
        return Err(Refused::Bad("Connection names a Sec-WebSocket-* field"));
    }
    Ok(())
}

/// Whether a `name` field (a comma-separated list, values already known to be visible ASCII)
/// holds `token`, in any case.
fn has_token<F: Fields + ?Sized>(fields: &F, name: &str, token: &[u8]) -> bool {
    fields.values(name).flat_map(|v| v.split(|&b| b == b',')).any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// `Sec-WebSocket-Key`: 16 bytes in base64 (RFC 6455 section 4.1), 24 characters.
pub fn is_handshake_key(key: &[u8]) -> bool {
    let b64 = |b: &u8| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/';
    key.len() == 24 && key[..21].iter().all(b64) && matches!(key[21], b'A' | b'Q' | b'g' | b'w') && &key[22..] == b"=="
}

fn not_visible(name: &str) -> &'static str {
    if name.eq_ignore_ascii_case("connection") {
        "a byte that is not visible ASCII in Connection"
    } else if name.eq_ignore_ascii_case("upgrade") {
        "a byte that is not visible ASCII in Upgrade"
    } else {
        "a byte that is not visible ASCII in a Sec-WebSocket-* field"
    }
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
