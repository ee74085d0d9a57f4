//! Header rules of a proxy hop: hop-by-hop headers, X-Forwarded-*, WebSocket upgrade detection,
//! and the size of a request head.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Uri};

use crate::fields::Fields;
use crate::forwarded::{self, X_FORWARDED_FOR};
use crate::h1::head::named_by_connection;

/// Headers that describe one hop only (RFC 9110 section 7.6.1), plus common non-standard ones.
const HOP_BY_HOP_COUNT: usize = 8;
static HOP_BY_HOP: [HeaderName; HOP_BY_HOP_COUNT] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
pub static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// Removes hop-by-hop headers, including every header the `Connection` header names. `Upgrade`
/// goes too; the WebSocket path puts the handshake's own headers back.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names finds which are present: most requests carry none or only
    // `Connection: keep-alive`, and a lookup per absent name costs more than the scan.
    let mut present = [false; HOP_BY_HOP_COUNT + 1];
    for name in headers.keys() {
        if let Some(i) = HOP_BY_HOP.iter().position(|h| h == name) {
            present[i] = true;
        } else if name == header::UPGRADE {
            present[HOP_BY_HOP_COUNT] = true;
        }
    }
    if !present.contains(&true) {
        return;
    }
    let named: Vec<HeaderName> =
        named_by_connection(headers.get_all(header::CONNECTION).iter().map(HeaderValue::as_bytes))
            .into_iter()
            .filter_map(|t| HeaderName::from_bytes(t).ok())
            .collect();
    for name in &named {
        headers.remove(name);
    }
    for (name, _) in HOP_BY_HOP.iter().zip(present).filter(|(_, p)| *p) {
        headers.remove(name);
    }
    if present[HOP_BY_HOP_COUNT] {
        headers.remove(header::UPGRADE);
    }
}

/// Restores the two headers a WebSocket handshake needs on the next hop.
pub fn set_websocket_upgrade(headers: &mut HeaderMap) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
}

/// Sets X-Forwarded-For (ending with the client's address), -Proto and -Host. From a trusted
/// proxy the incoming values are kept and extended; from anyone else they are replaced, so a
/// client cannot make a backend believe it comes from another address or scheme: `X-Real-IP`
/// becomes the peer's address, and every other forwarding or client-address header
/// ([`forwarded::is_forwarding`]: `Forwarded`, `X-Forwarded-Port`, `True-Client-IP`, ...) goes.
/// A forwarding header spelt with `_` (`X_Forwarded_Proto`) goes whoever sent it.
pub fn set_forwarded(headers: &mut HeaderMap, peer: IpAddr, trusted: bool, proto: &'static str) {
    let mut text = [0u8; 45];
    let peer_text = address_text(peer, &mut text);
    // One pass over the names finds which forwarding headers are present: most requests carry
    // none, and a lookup (or removal) per absent name costs more than the scan.
    let (mut xff, mut xfp, mut xfh) = (false, false, false);
    let mut lies: Vec<HeaderName> = Vec::new();
    for name in headers.keys() {
        xff |= name == X_FORWARDED_FOR;
        xfp |= name == X_FORWARDED_PROTO;
        xfh |= name == X_FORWARDED_HOST;
        let bytes = name.as_str().as_bytes();
        if forwarded::is_forwarding_twin(bytes) || (!trusted && forwarded::is_forwarding(bytes)) {
            lies.push(name.clone());
        }
    }
    for name in &lies {
        headers.remove(name);
    }
    let value = match trusted && xff {
        true => {
            let earlier: Vec<&str> = headers.get_all(&X_FORWARDED_FOR).iter().filter_map(|v| v.to_str().ok()).collect();
            if earlier.is_empty() {
                HeaderValue::from_str(peer_text)
            } else {
                HeaderValue::try_from(format!("{}, {peer_text}", earlier.join(", ")))
            }
        }
        false => HeaderValue::from_str(peer_text),
    };
    if let Ok(v) = value {
        headers.insert(&X_FORWARDED_FOR, v);
    }
    if !trusted || !xfp {
        headers.insert(&X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    }
    if !trusted || !xfh {
        match headers.get(header::HOST).cloned() {
            Some(host) => {
                headers.insert(&X_FORWARDED_HOST, host);
            }
            None if xfh => {
                headers.remove(&X_FORWARDED_HOST);
            }
            None => {}
        }
    }
    if !trusted {
        // nginx's convention: X-Real-IP is the address the proxy saw.
        if let Ok(v) = HeaderValue::from_str(peer_text) {
            headers.insert(&X_REAL_IP, v);
        }
    }
}

/// `ip` as text in `buf`. IPv4 addresses are written by hand: `Display` costs more than the
/// rest of the forwarding headers together, on every request.
pub(crate) fn address_text(ip: IpAddr, buf: &mut [u8; 45]) -> &str {
    match ip {
        IpAddr::V4(v4) => {
            let mut n = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    buf[n] = b'.';
                    n += 1;
                }
                if octet >= 100 {
                    buf[n] = b'0' + octet / 100;
                    n += 1;
                }
                if octet >= 10 {
                    buf[n] = b'0' + octet / 10 % 10;
                    n += 1;
                }
                buf[n] = b'0' + octet % 10;
                n += 1;
            }
            std::str::from_utf8(&buf[..n]).unwrap_or_default()
        }
        IpAddr::V6(v6) => {
            use std::io::Write;
            let mut cursor = std::io::Cursor::new(&mut buf[..]);
            let _ = write!(cursor, "{v6}"); // at most 45 bytes: the longest IPv6 text form
            let n = usize::try_from(cursor.position()).unwrap_or(0);
            std::str::from_utf8(&buf[..n]).unwrap_or_default()
        }
    }
}

/// What an HTTP/1.1 backend needs from an HTTP/2 request: a `Host` header (HTTP/2 carries the
/// host in `:authority`, which hyper leaves in the URI) and one `Cookie` header (HTTP/2 may
/// split cookies over several fields; RFC 9113 section 8.2.3 joins them with "; ").
pub fn from_http2(headers: &mut HeaderMap, uri: &Uri) {
    if !headers.contains_key(header::HOST)
        && let Some(authority) = uri.authority()
        && let Ok(host) = HeaderValue::from_str(authority.as_str())
    {
        headers.insert(header::HOST, host);
    }
    let mut cookies = headers.get_all(header::COOKIE).iter();
    if let (Some(_), Some(_)) = (cookies.next(), cookies.next()) {
        let joined: Vec<&[u8]> = headers.get_all(header::COOKIE).iter().map(HeaderValue::as_bytes).collect();
        if let Ok(one) = HeaderValue::from_bytes(&joined.join(&b"; "[..])) {
            headers.insert(header::COOKIE, one);
        }
    }
}

/// Size of the request head as the client sent it (request line and header lines), give or take
/// the exact whitespace.
pub fn request_head_size<F: Fields + ?Sized>(method: &Method, uri: &Uri, fields: &F) -> usize {
    let uri_len = uri.scheme_str().map_or(0, |s| s.len() + 3)
        + uri.authority().map_or(0, |a| a.as_str().len())
        + uri.path_and_query().map_or(1, |p| p.as_str().len());
    let line = method.as_str().len() + 1 + uri_len + 11;
    line + fields.wire_size() + 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        m
    }

    #[test]
    fn strips_hop_by_hop_and_named_headers() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Secret"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("upgrade", "h2c"),
            ("x-room", "42"),
        ]);
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("x-room"));
    }

    #[test]
    fn connection_tokens_name_headers_in_any_case_and_keep_others() {
        let mut h =
            map(&[("connection", "Keep-Alive"), ("connection", "close, X-Hop"), ("x-hop", "1"), ("x-room", "7")]);
        remove_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        let mut plain = map(&[("x-room", "7"), ("host", "a")]);
        remove_hop_by_hop(&mut plain);
        assert_eq!(plain.len(), 2);
    }

    proptest::proptest! {
        #[test]
        fn address_text_is_display(bits: u32, v6: u128) {
            let mut buf = [0u8; 45];
            let v4 = IpAddr::from(std::net::Ipv4Addr::from(bits));
            proptest::prop_assert_eq!(address_text(v4, &mut buf), v4.to_string());
            let v6 = IpAddr::from(std::net::Ipv6Addr::from(v6));
            proptest::prop_assert_eq!(address_text(v6, &mut buf), v6.to_string());
        }
    }

    #[test]
    fn forwarded_headers_from_untrusted_peer_are_replaced() {
        let mut h = map(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-proto", "https"),
            ("host", "game.test"),
            ("forwarded", "for=6.6.6.6"),
            ("x-real-ip", "6.6.6.6"),
            ("true-client-ip", "6.6.6.6"),
            ("x-client-ip", "6.6.6.6"),
            ("cf-connecting-ip", "6.6.6.6"),
        ]);
        set_forwarded(&mut h, "10.1.1.1".parse().unwrap(), false, "http");
        assert_eq!(h["x-forwarded-for"], "10.1.1.1");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "game.test");
        assert_eq!(h["x-real-ip"], "10.1.1.1");
        for gone in ["forwarded", "true-client-ip", "x-client-ip", "cf-connecting-ip"] {
            assert!(!h.contains_key(gone), "{gone} kept");
        }
    }

    #[test]
    fn forwarded_headers_from_trusted_peer_are_extended() {
        let mut h = map(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-for", "5.6.7.8"),
            ("x-forwarded-proto", "https"),
            ("host", "in.test"),
        ]);
        set_forwarded(&mut h, "10.0.0.2".parse().unwrap(), true, "http");
        assert_eq!(h["x-forwarded-for"], "1.2.3.4, 5.6.7.8, 10.0.0.2");
        assert_eq!(h["x-forwarded-proto"], "https");
        assert_eq!(h["x-forwarded-host"], "in.test");
    }

    #[test]
    fn http2_requests_get_a_host_and_one_cookie_header() {
        let uri: Uri = "https://game.test:8443/room/1/".parse().unwrap();
        let mut h = map(&[("cookie", "a=1"), ("cookie", "b=2"), ("x-room", "1")]);
        from_http2(&mut h, &uri);
        assert_eq!(h["host"], "game.test:8443");
        assert_eq!(h.get_all("cookie").iter().collect::<Vec<_>>(), ["a=1; b=2"]);
        let mut h = map(&[("host", "given.test"), ("cookie", "a=1")]);
        from_http2(&mut h, &uri);
        assert_eq!(h["host"], "given.test", "a Host the client sent stays");
        assert_eq!(h["cookie"], "a=1");
    }
}
