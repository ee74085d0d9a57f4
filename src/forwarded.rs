//! Who sent a request through a proxy hop: which peers are trusted proxies, and the header in
//! which they name the client. Used by the request path (X-Forwarded-*) and by the per-address
//! connection limit alike.

use std::net::IpAddr;

use http::HeaderName;
use ipnet::IpNet;

pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

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
}
