//! Backends: a stable id, where to reach it, and its counters.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http::uri::Authority;

use crate::config::BackendSpec;

/// One backend process.
#[derive(Debug)]
pub struct Backend {
    /// The stable id placement hashes.
    pub id: Arc<str>,
    pub addr: SocketAddr,
    /// `addr` as a URI authority, for upstream request URIs.
    pub authority: Authority,
    pub stats: BackendStats,
}

/// Counters of one backend.
#[derive(Debug, Default)]
pub struct BackendStats {
    pub requests: AtomicU64,
    pub open_sockets: AtomicU64,
}

impl Backend {
    pub fn new(spec: &BackendSpec) -> Self {
        // A SocketAddr always prints as a valid authority.
        let authority = Authority::try_from(spec.addr.to_string().as_str())
            .unwrap_or_else(|_| Authority::from_static("invalid.invalid"));
        Backend { id: spec.id.as_str().into(), addr: spec.addr, authority, stats: BackendStats::default() }
    }

    pub fn open_sockets(&self) -> u64 {
        self.stats.open_sockets.load(Ordering::Relaxed)
    }
}
