//! Connection limits: client connections in all (`limits.max_connections`) and per client
//! (`limits.max_connections_per_ip`), counted from accept until the connection, or a WebSocket
//! it became, ends; behind a trusted proxy, per forwarded client, per request and per
//! WebSocket; an HTTP/2 connection counts as many as it has streams open ([`StreamTicket`]).
//! Also what a request holds against the limits ([`Holds`]) and the refusal's metric and
//! throttled log line. The per-backend count (`upstream.max_connections_per_backend`) is
//! kept by each backend ([`crate::backends::BackendSlot`]).

mod addr;
pub mod fd;
mod held;
pub mod memory;

use std::fmt::Display;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fields::Fields;

pub use addr::{AddrKey, PerAddress, forwarded_client};
pub use held::{Held, HeldBody, Holds, hold_body, hold_stream};

use crate::config::Config;
use crate::error::LimitError;
use crate::forwarded::is_trusted;
use crate::lock::lock;
use crate::metrics::Metrics;
use crate::snapshot::Snapshot;
use crate::throttle::Throttle;

pub use crate::error::{MAX_CONNECTIONS, MAX_CONNECTIONS_PER_BACKEND, MAX_CONNECTIONS_PER_IP};

/// The client connections open, and per client.
pub struct Admission {
    open: AtomicUsize,
    addrs: PerAddress,
    /// The soft descriptor limit when the server started (`main` has raised it by then), for
    /// `limits.max_connections = "auto"`; `None`: unknown, and `auto` sets no cap.
    nofile: Option<u64>,
}

/// A client connection admitted. Counted until the last clone is dropped: the connection's task
/// holds one, and a WebSocket tunnel it turned into another.
#[derive(Clone)]
pub struct ConnTicket {
    _counted: Arc<Counted>,
}

/// A request or WebSocket that a trusted proxy forwarded, counted against its client's address.
pub struct AddrTicket {
    admission: Arc<Admission>,
    key: AddrKey,
}

/// An HTTP/2 stream open on a connection, counted against the connection's address
/// ([`ConnTicket::open_stream`]) until it drops.
pub struct StreamTicket {
    counted: Arc<Counted>,
}

/// A connection counted in `open`, and for its address when it has one.
struct Counted {
    admission: Arc<Admission>,
    addr: Option<AddrKey>,
    streams: Mutex<Streams>,
}

/// A connection's HTTP/2 streams: the connection's own count covers its first stream; every
/// further one open at once takes one more from its address. `extra` is what it took.
#[derive(Default)]
struct Streams {
    open: usize,
    extra: usize,
}

// === impl Admission ===

impl Admission {
    /// Counts under the descriptor limit in force now.
    pub fn new() -> Arc<Admission> {
        Admission::with_nofile(fd::nofile())
    }

    pub fn with_nofile(nofile: Option<u64>) -> Arc<Admission> {
        Arc::new(Admission { open: AtomicUsize::new(0), addrs: PerAddress::default(), nofile })
    }

    /// `limits.max_connections` in force under `snap`, `auto` resolved; `None`: no cap.
    pub fn max_connections(&self, snap: &Snapshot) -> Option<usize> {
        snap.config.limits.max_connections.or_else(|| self.nofile.map(|n| fd::auto_max_connections(n, snap)))
    }

    /// Client connections open (WebSockets included).
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Clients (addresses, IPv6 /64 networks) with a connection or a forwarded request open.
    pub fn addresses(&self) -> usize {
        self.addrs.len()
    }

    /// What `key` has open.
    pub fn count(&self, key: AddrKey) -> usize {
        self.addrs.count(key)
    }

    /// A client connection from `peer`, just accepted: refused past `limits.max_connections`,
    /// or past `limits.max_connections_per_ip` for `peer`. A trusted proxy's connections count
    /// in the total only: its clients are counted per request ([`Admission::admit_forwarded`]).
    pub fn admit(self: &Arc<Self>, peer: IpAddr, snap: &Snapshot) -> Result<ConnTicket, LimitError> {
        let max = self.max_connections(snap).unwrap_or(usize::MAX);
        if self.open.fetch_add(1, Ordering::AcqRel) >= max {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return Err(LimitError { limit: MAX_CONNECTIONS, max });
        }
        // From here on, dropping `counted` gives the connection back.
        let mut counted = Counted { admission: self.clone(), addr: None, streams: Mutex::default() };
        let config = &snap.config;
        if let Some(max) = config.limits.max_connections_per_ip
            && !is_trusted(peer, &config.server.trusted_proxies)
        {
            counted.addr = Some(self.add(peer, max)?);
        }
        Ok(ConnTicket { _counted: Arc::new(counted) })
    }

    /// A request or WebSocket handshake on a connection from `peer`: when `peer` is a trusted
    /// proxy and `limits.max_connections_per_ip` is set, counted against the client it forwards
    /// ([`forwarded_client`]) until the ticket drops. `None`: nothing to count. Boxed: it is
    /// rare, and a tunnel keeps it in a future whose size counts.
    pub fn admit_forwarded<F: Fields + ?Sized>(
        self: &Arc<Self>,
        peer: IpAddr,
        headers: &F,
        config: &Config,
    ) -> Result<Option<Box<AddrTicket>>, LimitError> {
        let Some(max) = config.limits.max_connections_per_ip else { return Ok(None) };
        let trusted = &config.server.trusted_proxies;
        if !is_trusted(peer, trusted) {
            return Ok(None);
        }
        let client = forwarded_client(peer, headers, trusted);
        let key = self.add(client, max)?;
        Ok(Some(Box::new(AddrTicket { admission: self.clone(), key })))
    }

    fn add(&self, ip: IpAddr, max: usize) -> Result<AddrKey, LimitError> {
        let key = AddrKey::from(ip);
        match self.addrs.try_add(key, max) {
            true => Ok(key),
            false => Err(LimitError { limit: MAX_CONNECTIONS_PER_IP, max }),
        }
    }
}

// === impl ConnTicket ===

impl ConnTicket {
    /// An HTTP/2 stream opened on this connection. The connection's own count covers one stream;
    /// each further stream open at the same time counts one more against the connection's
    /// address, so that a connection with `n` streams open counts as `n` connections: refused
    /// when the address has `max` (`limits.max_connections_per_ip` now) already. Counts nothing
    /// for a connection not counted per address (a trusted proxy's, or accepted with the limit
    /// off) or when `max` is `None`.
    pub fn open_stream(&self, max: Option<usize>) -> Result<StreamTicket, LimitError> {
        let counted = &self._counted;
        let mut streams = lock(&counted.streams);
        streams.open += 1;
        if let (Some(key), Some(max)) = (counted.addr, max)
            && streams.open - 1 > streams.extra
        {
            if !counted.admission.addrs.try_add(key, max) {
                streams.open -= 1;
                return Err(LimitError { limit: MAX_CONNECTIONS_PER_IP, max });
            }
            streams.extra += 1;
        }
        drop(streams);
        Ok(StreamTicket { counted: counted.clone() })
    }
}

impl Drop for StreamTicket {
    fn drop(&mut self) {
        let counted = &self.counted;
        let mut streams = lock(&counted.streams);
        streams.open -= 1;
        // Whichever stream ends, the count stays one per stream beyond the first.
        if streams.extra > streams.open.saturating_sub(1) {
            streams.extra -= 1;
            if let Some(key) = counted.addr {
                counted.admission.addrs.remove(key);
            }
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.admission.open.fetch_sub(1, Ordering::AcqRel);
        if let Some(key) = self.addr {
            self.admission.addrs.remove(key);
        }
    }
}

impl Drop for AddrTicket {
    fn drop(&mut self) {
        self.admission.addrs.remove(self.key);
    }
}

/// Counts a refusal in `roomgate_refused_total{limit}` and logs it, at most once a second per
/// limit (with how many were not logged since). `who`: the client, or the backend. Returns the
/// error, for `?`.
pub fn refused(metrics: &Metrics, err: LimitError, who: &dyn Display) -> LimitError {
    static LOGS: [Throttle; 4] = [
        Throttle::new(Duration::from_secs(1)),
        Throttle::new(Duration::from_secs(1)),
        Throttle::new(Duration::from_secs(1)),
        Throttle::new(Duration::from_secs(1)),
    ];
    metrics.refused(err.limit);
    let log = match err.limit {
        MAX_CONNECTIONS => &LOGS[0],
        MAX_CONNECTIONS_PER_IP => &LOGS[1],
        MAX_CONNECTIONS_PER_BACKEND => &LOGS[2],
        _ => &LOGS[3],
    };
    if let Some(held_back) = log.ready() {
        tracing::warn!(limit = err.limit, max = err.max, %who, refused_since_last_line = held_back, "refused: limit reached");
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    fn snapshot(limits: &str) -> Snapshot {
        let text = format!(
            "[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\n[limits]\n{limits}\n[[backends]]\nid = \"a\"\n\
             addr = \"127.0.0.1:9001\"\n[[routes]]\nprefix = \"/\"\nmode = \"shared\"\n"
        );
        Snapshot::build(Config::from_toml(&text, "test.toml").unwrap(), 1)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn total_cap_counts_connections_until_their_last_holder_drops() {
        let snap = snapshot("max_connections = 2");
        let a = Admission::with_nofile(None);
        let one = a.admit(ip("192.0.2.1"), &snap).unwrap();
        let tunnel = one.clone();
        let _two = a.admit(ip("192.0.2.2"), &snap).unwrap();
        let refused = a.admit(ip("192.0.2.3"), &snap).err().unwrap();
        assert_eq!((refused.limit, refused.max), (MAX_CONNECTIONS, 2));
        drop(one);
        assert_eq!(a.open(), 2, "the tunnel still holds the connection");
        drop(tunnel);
        assert_eq!(a.open(), 1);
        assert!(a.admit(ip("192.0.2.3"), &snap).is_ok());
    }

    #[test]
    fn auto_derives_from_descriptors_and_unknown_sets_none() {
        let snap = snapshot("");
        assert_eq!(Admission::with_nofile(None).max_connections(&snap), None);
        let auto = Admission::with_nofile(Some(1 << 20)).max_connections(&snap);
        assert_eq!(auto, Some(fd::auto_max_connections(1 << 20, &snap)));
        assert_eq!(Admission::with_nofile(Some(1 << 20)).max_connections(&snapshot("max_connections = 7")), Some(7));
    }

    #[test]
    fn per_address_cap_spares_trusted_proxies_and_gives_back_the_total() {
        let snap = snapshot("max_connections = 100\nmax_connections_per_ip = 1");
        let a = Admission::with_nofile(None);
        let _first = a.admit(ip("192.0.2.1"), &snap).unwrap();
        let refused = a.admit(ip("::ffff:192.0.2.1"), &snap).err().unwrap();
        assert_eq!(refused.limit, MAX_CONNECTIONS_PER_IP);
        assert_eq!(a.open(), 1, "a refused connection is not left in the total");
        let _proxy = [a.admit(ip("10.0.0.1"), &snap).unwrap(), a.admit(ip("10.0.0.1"), &snap).unwrap()];
        assert_eq!(a.addresses(), 1, "the trusted proxy is not counted per address");
    }

    #[test]
    fn h2_streams_beyond_the_first_count_against_the_address() {
        let snap = snapshot("max_connections_per_ip = 3");
        let max = snap.config.limits.max_connections_per_ip;
        let a = Admission::with_nofile(None);
        let key = AddrKey::from(ip("192.0.2.1"));
        let conn = a.admit(ip("192.0.2.1"), &snap).unwrap();
        let first = conn.open_stream(max).unwrap();
        assert_eq!(a.count(key), 1, "the connection's own count covers its first stream");
        let second = conn.open_stream(max).unwrap();
        let _other = a.admit(ip("192.0.2.1"), &snap).unwrap();
        assert_eq!(a.count(key), 3);
        let refused = conn.open_stream(max).err().unwrap();
        assert_eq!((refused.limit, refused.max), (MAX_CONNECTIONS_PER_IP, 3));
        assert!(a.admit(ip("192.0.2.1"), &snap).is_err(), "the streams hold the address's allowance");
        drop(first);
        assert_eq!(a.count(key), 2, "one stream open: the connection alone counts for it");
        let third = conn.open_stream(max).unwrap();
        assert_eq!(a.count(key), 3);
        drop((second, third));
        assert_eq!(a.count(key), 2);
        drop(conn);
        assert_eq!(a.count(key), 1);
        // Unlimited, or a trusted proxy's connection: streams take nothing.
        let proxy = a.admit(ip("10.0.0.1"), &snap).unwrap();
        let _streams: Vec<_> = (0..10).map(|_| proxy.open_stream(max).unwrap()).collect();
        assert_eq!(a.count(AddrKey::from(ip("10.0.0.1"))), 0);
    }

    #[test]
    fn forwarded_clients_are_counted_per_request() {
        let snap = snapshot("max_connections_per_ip = 2");
        let a = Admission::with_nofile(None);
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "203.0.113.7".parse().unwrap());
        let config = &snap.config;
        assert!(a.admit_forwarded(ip("192.0.2.1"), &h, config).unwrap().is_none(), "an untrusted peer");
        let first = a.admit_forwarded(ip("10.0.0.1"), &h, config).unwrap();
        let _second = a.admit_forwarded(ip("10.0.0.2"), &h, config).unwrap();
        assert_eq!(a.count(AddrKey::from(ip("203.0.113.7"))), 2);
        assert!(a.admit_forwarded(ip("10.0.0.1"), &h, config).is_err());
        drop(first);
        assert!(a.admit_forwarded(ip("10.0.0.1"), &h, config).unwrap().is_some());
    }
}
