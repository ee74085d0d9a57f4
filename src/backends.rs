//! Backends: a stable id, where to reach it, its counters, and its lifecycle. A backend is active,
//! draining (no new rooms; its live rooms stay until they empty or the deadline) or down (health
//! checks failed; its rooms move to the next backend in their placement order).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use http::uri::Authority;

use crate::config::BackendSpec;
use crate::error::{LimitError, MAX_CONNECTIONS_PER_BACKEND};
use crate::lock::lock;

/// One backend process.
#[derive(Debug)]
pub struct Backend {
    /// The stable id placement hashes.
    pub id: Arc<str>,
    pub addr: SocketAddr,
    /// `addr` as a URI authority, for upstream request URIs.
    pub authority: Authority,
    pub stats: BackendStats,
    health: HealthState,
    drain: Mutex<Option<Drain>>,
}

/// Counters of one backend.
#[derive(Debug, Default)]
pub struct BackendStats {
    pub open_sockets: AtomicU64,
    /// Connections roomgate holds to it: requests in flight (until their response body ends)
    /// and WebSocket tunnels, djust's included (`upstream.max_connections_per_backend`).
    in_use: AtomicUsize,
}

/// One of the connections roomgate holds to a backend, given back when dropped.
#[derive(Debug)]
pub struct BackendSlot(Arc<Backend>);

/// What the admin API shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Active,
    Draining,
    Down,
}

/// A drain in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drain {
    pub started: Instant,
    /// When the rooms still live are closed (1012) and moved.
    pub deadline: Instant,
    /// The backend left the config: it is dropped once drained.
    pub removed: bool,
}

/// A change of health, for logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    WentDown,
    CameUp,
}

/// Health as seen by active checks and by the requests themselves.
#[derive(Debug)]
struct HealthState {
    up: AtomicBool,
    fails: AtomicU32,
    oks: AtomicU32,
    /// Passive checks only: the backend is tried again after this (ms since process start).
    retry_at_ms: AtomicU64,
}

// === impl Backend ===

impl Backend {
    pub fn new(spec: &BackendSpec) -> Self {
        // A SocketAddr always prints as a valid authority.
        let authority = Authority::try_from(spec.addr.to_string().as_str())
            .unwrap_or_else(|_| Authority::from_static("invalid.invalid"));
        Backend {
            id: spec.id.as_str().into(),
            addr: spec.addr,
            authority,
            stats: BackendStats::default(),
            health: HealthState {
                up: AtomicBool::new(true),
                fails: AtomicU32::new(0),
                oks: AtomicU32::new(0),
                retry_at_ms: AtomicU64::new(0),
            },
            drain: Mutex::new(None),
        }
    }

    /// A backend for the same id at a new address: the drain in progress carries over.
    pub fn moved(&self, spec: &BackendSpec) -> Self {
        let next = Backend::new(spec);
        *lock(&next.drain) = self.drain();
        next
    }

    pub fn open_sockets(&self) -> u64 {
        self.stats.open_sockets.load(Ordering::Relaxed)
    }

    /// Requests in flight plus open WebSockets.
    pub fn in_use(&self) -> usize {
        self.stats.in_use.load(Ordering::Relaxed)
    }

    /// Takes one of the `max` connections roomgate may hold to this backend (`None`: no cap;
    /// counted all the same, so that a cap set by a reload counts what is already open).
    pub fn claim(self: &Arc<Self>, max: Option<usize>) -> Result<BackendSlot, LimitError> {
        let max = max.unwrap_or(usize::MAX);
        if self.stats.in_use.fetch_add(1, Ordering::AcqRel) >= max {
            self.stats.in_use.fetch_sub(1, Ordering::AcqRel);
            return Err(LimitError { limit: MAX_CONNECTIONS_PER_BACKEND, max });
        }
        Ok(BackendSlot(self.clone()))
    }

    // --- health ---

    /// Healthy enough to be sent traffic. With passive checks only, a backend taken down is tried
    /// again once its cooldown has passed.
    pub fn is_up(&self, passive_only: bool) -> bool {
        self.health.up.load(Ordering::Acquire)
            || (passive_only && now_ms() >= self.health.retry_at_ms.load(Ordering::Acquire))
    }

    /// A check or a request failed to reach the backend.
    pub fn record_failure(&self, fall: u32, cooldown: Duration) -> Option<Transition> {
        let h = &self.health;
        h.oks.store(0, Ordering::Relaxed);
        let fails = h.fails.fetch_add(1, Ordering::AcqRel) + 1;
        if fails >= fall {
            h.retry_at_ms.store(now_ms() + cooldown.as_millis() as u64, Ordering::Release);
            if h.up.swap(false, Ordering::AcqRel) {
                return Some(Transition::WentDown);
            }
        }
        None
    }

    /// A check or a request reached the backend. `rise` consecutive ones bring it back up.
    pub fn record_success(&self, rise: u32) -> Option<Transition> {
        let h = &self.health;
        h.fails.store(0, Ordering::Relaxed);
        if h.up.load(Ordering::Acquire) {
            return None;
        }
        let oks = h.oks.fetch_add(1, Ordering::AcqRel) + 1;
        if oks >= rise && !h.up.swap(true, Ordering::AcqRel) {
            h.oks.store(0, Ordering::Relaxed);
            return Some(Transition::CameUp);
        }
        None
    }

    // --- drain ---

    pub fn drain(&self) -> Option<Drain> {
        *lock(&self.drain)
    }

    pub fn is_draining(&self) -> bool {
        lock(&self.drain).is_some()
    }

    /// Starts a drain, or moves the deadline of the one in progress.
    pub fn set_draining(&self, deadline: Duration, removed: bool) -> Drain {
        let now = Instant::now();
        let mut d = lock(&self.drain);
        let started = d.map_or(now, |d| d.started);
        let next = Drain { started, deadline: now + deadline, removed: removed || d.is_some_and(|d| d.removed) };
        *d = Some(next);
        next
    }

    /// Ends a drain; the backend takes new rooms again. A removed backend cannot be undrained.
    pub fn set_active(&self) -> bool {
        let mut d = lock(&self.drain);
        if d.is_some_and(|d| d.removed) {
            return false;
        }
        *d = None;
        true
    }

    /// The state shown by the admin API: down wins over draining.
    pub fn state(&self, passive_only: bool) -> State {
        if !self.is_up(passive_only) {
            State::Down
        } else if self.is_draining() {
            State::Draining
        } else {
            State::Active
        }
    }

    /// May a new room be placed here?
    pub fn takes_new_rooms(&self, passive_only: bool) -> bool {
        self.is_up(passive_only) && !self.is_draining()
    }
}

impl Drop for BackendSlot {
    fn drop(&mut self) {
        self.0.stats.in_use.fetch_sub(1, Ordering::AcqRel);
    }
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Active => "active",
            State::Draining => "draining",
            State::Down => "down",
        }
    }
}

fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend() -> Backend {
        Backend::new(&BackendSpec {
            id: "b".into(),
            addr_text: "127.0.0.1:1".into(),
            addr: "127.0.0.1:1".parse().unwrap(),
            source: Default::default(),
        })
    }

    #[test]
    fn falls_after_consecutive_failures_and_rises_after_successes() {
        let b = backend();
        assert_eq!(b.record_failure(3, Duration::from_secs(60)), None);
        assert_eq!(b.record_success(2), None, "a success resets the failures");
        assert_eq!(b.record_failure(3, Duration::from_secs(60)), None);
        assert_eq!(b.record_failure(3, Duration::from_secs(60)), None);
        assert_eq!(b.record_failure(3, Duration::from_secs(60)), Some(Transition::WentDown));
        assert!(!b.is_up(false));
        assert!(!b.is_up(true), "passive: out until the cooldown ends");
        assert_eq!(b.record_success(2), None);
        assert_eq!(b.record_success(2), Some(Transition::CameUp));
        assert!(b.is_up(false));
    }

    #[test]
    fn passive_cooldown_lets_the_backend_be_tried_again() {
        let b = backend();
        b.record_failure(1, Duration::ZERO);
        assert!(!b.is_up(false), "with active checks it stays down until they pass");
        assert!(b.is_up(true), "with passive checks only it is tried again after the cooldown");
    }

    #[test]
    fn slots_are_capped_and_given_back() {
        let b = Arc::new(backend());
        let one = b.claim(Some(2)).unwrap();
        let _two = b.claim(Some(2)).unwrap();
        let refused = b.claim(Some(2)).unwrap_err();
        assert_eq!((refused.limit, refused.max), ("upstream.max_connections_per_backend", 2));
        assert_eq!(b.in_use(), 2);
        drop(one);
        assert!(b.claim(Some(2)).is_ok());
        assert_eq!(b.in_use(), 1);
        let _uncapped: Vec<_> = (0..5).map(|_| b.claim(None).unwrap()).collect();
        assert_eq!(b.in_use(), 6, "counted without a cap too");
    }

    #[test]
    fn drain_lifecycle() {
        let b = backend();
        assert_eq!(b.state(false), State::Active);
        b.set_draining(Duration::from_secs(30), false);
        assert_eq!(b.state(false), State::Draining);
        assert!(!b.takes_new_rooms(false));
        assert!(b.set_active());
        assert!(b.takes_new_rooms(false));
        b.set_draining(Duration::from_secs(30), true);
        assert!(!b.set_active(), "a removed backend cannot be undrained");
    }
}
