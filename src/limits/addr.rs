//! Client addresses as `limits.max_connections_per_ip` counts them: the key an address counts
//! under, the client a trusted proxy forwarded, and the map of addresses with open connections.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;

use crate::fields::Fields;
use ipnet::IpNet;

use crate::forwarded::is_trusted;
use crate::lock::lock;

/// What one client is, for the per-address limit: an IPv4 address (an IPv4-mapped IPv6 one
/// counts as the IPv4 address it maps), or the /64 network of an IPv6 address. A host is
/// usually given a whole /64 and may pick any address in it (privacy addresses), so counting
/// single IPv6 addresses would not limit anyone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddrKey {
    V4(Ipv4Addr),
    /// The first 64 bits of the address.
    V6Net(u64),
}

impl From<IpAddr> for AddrKey {
    fn from(ip: IpAddr) -> AddrKey {
        match ip {
            IpAddr::V4(v4) => AddrKey::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => AddrKey::V4(v4),
                None => AddrKey::V6Net((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

impl fmt::Display for AddrKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddrKey::V4(v4) => v4.fmt(f),
            AddrKey::V6Net(net) => write!(f, "{}/64", Ipv6Addr::from(u128::from(*net) << 64)),
        }
    }
}

/// The client behind a trusted proxy `peer`: the last address of `X-Forwarded-For` that is not
/// itself a trusted proxy (the nearest trusted proxy wrote it; what stands to its left, the
/// client could have written). Every hop trusted: the first one. A hop that is not an address
/// (`unknown`, garbage): the trusted hop that wrote it. No header: `peer` itself.
pub fn forwarded_client<F: Fields + ?Sized>(peer: IpAddr, headers: &F, trusted: &[IpNet]) -> IpAddr {
    let values: Vec<&str> = headers.values("x-forwarded-for").filter_map(crate::fields::text).collect();
    let mut client = peer;
    for hop in values.iter().rev().flat_map(|v| v.rsplit(',')) {
        let Some(ip) = parse_hop(hop.trim()) else { return client };
        client = ip;
        if !is_trusted(ip, trusted) {
            break;
        }
    }
    client
}

/// An `X-Forwarded-For` element: an address, possibly with a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| hop.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
}

/// Open connections (or, behind a trusted proxy, requests and sockets) per client. An address
/// is in the map only while it has one open, so the map never holds more entries than there
/// are open connections and requests. Sharded, so that cores accepting at once rarely meet on
/// one lock.
pub struct PerAddress {
    shards: [Mutex<HashMap<AddrKey, u32>>; SHARDS],
}

const SHARDS: usize = 16;

impl Default for PerAddress {
    fn default() -> Self {
        PerAddress { shards: std::array::from_fn(|_| Mutex::new(HashMap::new())) }
    }
}

impl PerAddress {
    /// Counts one more for `key` unless it has `max` already.
    pub fn try_add(&self, key: AddrKey, max: usize) -> bool {
        let mut map = self.shard(key);
        let n = map.entry(key).or_insert(0);
        if *n as usize >= max {
            if *n == 0 {
                map.remove(&key);
            }
            return false;
        }
        *n += 1;
        true
    }

    /// One fewer for `key`; its entry goes at zero.
    pub fn remove(&self, key: AddrKey) {
        let mut map = self.shard(key);
        if let Some(n) = map.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&key);
            }
        }
    }

    /// How many `key` has open.
    pub fn count(&self, key: AddrKey) -> usize {
        self.shard(key).get(&key).map_or(0, |n| *n as usize)
    }

    /// Addresses with something open.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn shard(&self, key: AddrKey) -> std::sync::MutexGuard<'_, HashMap<AddrKey, u32>> {
        let bits = match key {
            AddrKey::V4(v4) => u64::from(v4.to_bits()),
            AddrKey::V6Net(net) => net ^ (net >> 32),
        };
        lock(&self.shards[(bits ^ (bits >> 8) ^ (bits >> 16)) as usize % SHARDS])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forwarded::X_FORWARDED_FOR;
    use http::{HeaderMap, HeaderValue};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn mapped_v4_counts_as_v4_and_v6_by_its_64() {
        assert_eq!(AddrKey::from(ip("::ffff:192.0.2.7")), AddrKey::from(ip("192.0.2.7")));
        assert_eq!(AddrKey::from(ip("2001:db8:1:2::1")), AddrKey::from(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")));
        assert_ne!(AddrKey::from(ip("2001:db8:1:2::1")), AddrKey::from(ip("2001:db8:1:3::1")));
        assert_eq!(AddrKey::from(ip("2001:db8:1:2::1")).to_string(), "2001:db8:1:2::/64");
        assert_eq!(AddrKey::from(ip("::ffff:192.0.2.7")).to_string(), "192.0.2.7");
    }

    #[test]
    fn counts_up_to_the_max_and_forgets_at_zero() {
        let m = PerAddress::default();
        let a = AddrKey::from(ip("192.0.2.1"));
        assert!(m.try_add(a, 2));
        assert!(m.try_add(a, 2));
        assert!(!m.try_add(a, 2));
        assert_eq!(m.count(a), 2);
        m.remove(a);
        assert!(m.try_add(a, 2));
        m.remove(a);
        m.remove(a);
        assert!(m.is_empty(), "no entry is kept for an address with nothing open");
        assert!(!m.try_add(a, 0));
        assert!(m.is_empty(), "a refusal leaves no entry either");
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(&X_FORWARDED_FOR, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_forwarded_client_is_the_last_untrusted_hop() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let peer = ip("10.0.0.1");
        let client = |values: &[&str]| forwarded_client(peer, &xff(values), &trusted);
        assert_eq!(client(&[]), peer, "no header: the proxy itself");
        assert_eq!(client(&["203.0.113.7"]), ip("203.0.113.7"));
        assert_eq!(client(&["6.6.6.6, 203.0.113.7"]), ip("203.0.113.7"), "what the client wrote is skipped");
        assert_eq!(client(&["6.6.6.6", "203.0.113.7, 10.0.0.9"]), ip("203.0.113.7"), "trusted hops are skipped");
        assert_eq!(client(&["10.1.1.1, 10.0.0.9"]), ip("10.1.1.1"), "all trusted: the first");
        assert_eq!(client(&["203.0.113.7:4711"]), ip("203.0.113.7"));
        assert_eq!(client(&["[2001:db8::1]:4711"]), ip("2001:db8::1"));
        assert_eq!(client(&["[2001:db8::1]"]), ip("2001:db8::1"));
        assert_eq!(client(&["unknown"]), peer, "not an address: the trusted hop that wrote it");
        assert_eq!(client(&["203.0.113.7, unknown, 10.0.0.9"]), ip("10.0.0.9"));
    }
}
