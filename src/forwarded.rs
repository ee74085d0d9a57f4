//! Who sent a request through a proxy hop: which peers are trusted proxies, the header in
//! which they name the client, and which field names speak of the client's address or scheme
//! (in any spelling a framework reads). Used by the request path (X-Forwarded-*) and by the
//! per-address connection limit alike.

use std::net::IpAddr;

use http::HeaderName;
use ipnet::IpNet;

pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Fields in which a proxy or CDN tells the next hop who the client is, how it came (scheme,
/// host, port, path prefix) or which address it has, lower-case with `-`. From an untrusted
/// peer each is a claim the client makes about itself; roomgate drops them and writes its own
/// `X-Forwarded-For`, `-Proto`, `-Host` and `X-Real-IP`.
const FORWARDING: [&[u8]; 21] = [
    b"forwarded",
    b"x-forwarded-for",
    b"x-forwarded-proto",
    b"x-forwarded-host",
    b"x-forwarded-port",
    b"x-forwarded-prefix",
    b"x-forwarded-server",
    b"x-forwarded-scheme",
    b"x-forwarded-protocol",
    b"x-forwarded-ssl",
    b"x-url-scheme",
    b"front-end-https",
    b"x-original-forwarded-for",
    b"x-real-ip",
    b"true-client-ip",
    b"x-client-ip",
    b"cf-connecting-ip",
    b"x-cluster-client-ip",
    b"fastly-client-ip",
    b"x-original-host",
    b"x-forwarded",
];

/// Whether the field `name`, read without case and with `_` as `-`, is a forwarding or
/// client-address field. The underscore matters because WSGI and CGI servers (Django, Flask,
/// Rails through Rack) turn both `X-Forwarded-Proto` and `X_Forwarded_Proto` into one
/// `HTTP_X_FORWARDED_PROTO` and join them, the client's first.
pub fn is_forwarding(name: &[u8]) -> bool {
    FORWARDING.iter().any(|f| {
        f.len() == name.len()
            && f.iter().zip(name).all(|(&f, &n)| f == n.to_ascii_lowercase() || (f == b'-' && n == b'_'))
    })
}

/// Whether `name` is a forwarding field spelt with an underscore: never a line a proxy writes
/// (they all write `-`), so one is dropped whoever sends it, a trusted proxy included (it may
/// pass its own client's field through untouched, as HAProxy and Envoy do).
pub fn is_forwarding_twin(name: &[u8]) -> bool {
    name.contains(&b'_') && is_forwarding(name)
}

/// Whether `peer` is one of the trusted proxies, whose forwarding headers are kept.
pub fn is_trusted(peer: IpAddr, trusted: &[IpNet]) -> bool {
    let peer = match peer {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
        v4 => v4,
    };
    trusted.iter().any(|net| net.contains(&peer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_matches_cidrs_and_mapped_v4() {
        let nets: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        assert!(is_trusted("10.9.9.9".parse().unwrap(), &nets));
        assert!(is_trusted("::ffff:10.0.0.1".parse().unwrap(), &nets));
        assert!(!is_trusted("11.0.0.1".parse().unwrap(), &nets));
    }

    #[test]
    fn forwarding_names_are_read_with_underscore_as_dash_in_any_case() {
        for name in ["X-Forwarded-Proto", "X_Forwarded_Proto", "x-forwarded_host", "X_REAL_IP", "True_Client_IP"] {
            assert!(is_forwarding(name.as_bytes()), "{name}");
        }
        for twin in ["X_Forwarded_For", "X-Forwarded_Host", "CF_Connecting_IP", "forwarded_for"] {
            assert_eq!(is_forwarding_twin(twin.as_bytes()), twin != "forwarded_for", "{twin}");
        }
        for other in ["X-Forwarded-Proto", "X_Room", "X-Forwarded-Protoo", "Host", "x_forwarded_fo"] {
            assert!(!is_forwarding_twin(other.as_bytes()), "{other}");
        }
    }
}
