//! The admin listener's connections: `admin.max_connections` served in full, a bounded
//! probe-only lane past that cap so that `/healthz` and `/readyz` always answer, head and idle
//! timeouts, and idle connections closed when the cap is reached.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::control::Control;
use crate::throttle::Throttle;

/// The metric label and log name of refusals past the cap.
pub(super) const LIMIT: &str = "admin.max_connections";

/// How the admin listener bounds its connections. [`Options::default`] is what `roomgate` runs
/// with; tests shorten the timeouts.
#[derive(Clone, Debug)]
pub struct Options {
    /// A connection served in full that has not sent a whole request head this long after it
    /// opened, or after its last response (an idle keep-alive connection), is closed.
    pub head_timeout: Duration,
    /// A request body not received in full this long after its head gets 408.
    pub body_timeout: Duration,
    /// Probe-lane connections get this long for their request head.
    pub probe_head_timeout: Duration,
    /// Probe-lane connections open at once. Past it, the oldest one still waiting for its head
    /// is closed to make room; with none waiting, the new connection is closed at accept.
    pub max_probe_connections: usize,
    /// When the cap is reached, connections served in full that have been idle at least this
    /// long are closed, so that new ones get in. A younger one is spared: its request may be on
    /// the way.
    pub evict_idle_after: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            head_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            probe_head_timeout: Duration::from_secs(2),
            max_probe_connections: 256,
            evict_idle_after: Duration::from_secs(1),
        }
    }
}

/// Head size allowed on the admin listener (hyper's read buffer).
const MAX_HEAD: usize = 64 * 1024;

/// Which lane a connection is served in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lane {
    /// Every endpoint.
    Full,
    /// Past `admin.max_connections`: the probes only, one request, then the connection closes.
    Probe,
}

/// Serves the admin API on `listener` until `stop` is cancelled.
pub async fn serve_with(listener: TcpListener, control: Arc<Control>, stop: CancellationToken, options: Options) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "admin API listening");
    }
    let lanes = Arc::new(Lanes::new(options));
    while let Some((stream, peer)) = crate::accept::accept(&listener, &stop).await {
        // Read at every accept, so that a reload of admin.max_connections applies to new connections.
        let cap = control.gateway().snapshot().config.admin.max_connections;
        if let Some(full) = lanes.full_slot(cap) {
            tokio::spawn(serve_full(stream, peer, control.clone(), lanes.clone(), full, stop.clone()));
            continue;
        }
        lanes.pressure.notify_waiters();
        match lanes.probe_slot() {
            Some(slot) => {
                tokio::spawn(serve_probe(stream, peer, control.clone(), lanes.clone(), slot));
            }
            None => {
                drop(stream);
                refused(&control, peer, "the probe lane is full too; connection closed at accept");
            }
        }
    }
}

/// Counts and logs (at most once a second) a connection or request refused past the cap.
pub(super) fn refused(control: &Control, peer: SocketAddr, what: &str) {
    static LOG: Throttle = Throttle::new(Duration::from_secs(1));
    control.gateway().metrics().refused(LIMIT);
    if let Some(held_back) = LOG.ready() {
        tracing::warn!(%peer, held_back, "admin API at {LIMIT}: {what}");
    }
}

async fn serve_full(
    stream: TcpStream,
    peer: SocketAddr,
    control: Arc<Control>,
    lanes: Arc<Lanes>,
    _slot: FullSlot,
    stop: CancellationToken,
) {
    let activity = Arc::new(Activity::new());
    let body_timeout = lanes.options.body_timeout;
    let service = service_fn({
        let activity = activity.clone();
        move |req| {
            let (control, activity) = (control.clone(), activity.clone());
            async move {
                activity.touch();
                let resp = super::handle(&control, req, Lane::Full, peer, body_timeout).await;
                activity.touch();
                Ok::<_, Infallible>(resp)
            }
        }
    });
    let conn = builder(lanes.options.head_timeout).serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "admin connection ended with an error");
                }
                return;
            }
            // hyper closes an idle connection (nothing read since accept or since the last
            // response) at once, and lets a request in flight finish without keep-alive.
            () = lanes.pressure.notified(), if !closing => {
                if activity.idle_for() >= lanes.options.evict_idle_after {
                    tracing::debug!(%peer, "admin API at its cap: closing an idle connection");
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
            () = stop.cancelled(), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
        }
    }
}

async fn serve_probe(stream: TcpStream, peer: SocketAddr, control: Arc<Control>, lanes: Arc<Lanes>, slot: ProbeSlot) {
    let evicted = slot.evicted.clone();
    let slot = Arc::new(slot);
    let service = service_fn({
        let slot = slot.clone();
        move |req| {
            slot.answering();
            let control = control.clone();
            async move { Ok::<_, Infallible>(super::handle(&control, req, Lane::Probe, peer, Duration::ZERO).await) }
        }
    });
    let timeout = lanes.options.probe_head_timeout;
    let conn = builder(timeout).keep_alive(false).serve_connection(TokioIo::new(stream), service);
    // The whole connection is bounded, not only its head: a probe answer is a few bytes.
    tokio::select! {
        result = tokio::time::timeout(2 * timeout, conn) => match result {
            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "admin probe connection ended with an error"),
            Err(_) => tracing::debug!(%peer, "admin probe connection took too long; closed"),
            Ok(Ok(())) => {}
        },
        () = evicted.cancelled() => tracing::debug!(%peer, "admin probe connection closed to make room"),
    }
}

fn builder(head_timeout: Duration) -> http1::Builder {
    let mut b = http1::Builder::new();
    // hyper starts this timer when it waits for a head: at accept and again after each
    // response, so it is the idle keep-alive timeout as well.
    b.timer(TokioTimer::new()).header_read_timeout(head_timeout).max_buf_size(MAX_HEAD);
    b
}

// === impl Lanes ===

/// The admin listener's connection counts, shared by its accept loop and connections.
struct Lanes {
    options: Options,
    full: Arc<AtomicUsize>,
    /// Notified when a connection arrives past the cap: idle full connections close.
    pressure: Notify,
    probes: Arc<Mutex<ProbeLane>>,
}

#[derive(Default)]
struct ProbeLane {
    open: usize,
    next_id: u64,
    /// Probe connections still waiting for their head, oldest first.
    waiting: BTreeMap<u64, CancellationToken>,
}

impl Lanes {
    fn new(options: Options) -> Lanes {
        Lanes {
            options,
            full: Arc::new(AtomicUsize::new(0)),
            pressure: Notify::new(),
            probes: Arc::new(Mutex::new(ProbeLane::default())),
        }
    }

    /// A place among the connections served in full, if fewer than `cap` are open.
    fn full_slot(&self, cap: usize) -> Option<FullSlot> {
        self.full
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < cap).then_some(n + 1))
            .ok()
            .map(|_| FullSlot(self.full.clone()))
    }

    /// A place in the probe lane. When it is full, the oldest connection still waiting for its
    /// head is closed to make room, so idle connections can delay a probe but never lock it out.
    /// Connections being closed still count: at most twice the bound are open at once.
    fn probe_slot(&self) -> Option<ProbeSlot> {
        let max = self.options.max_probe_connections;
        let mut lane = self.probes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if lane.open >= max {
            if lane.open >= 2 * max {
                return None;
            }
            let (_, oldest) = lane.waiting.pop_first()?;
            oldest.cancel();
        }
        lane.open += 1;
        lane.next_id += 1;
        let (id, evicted) = (lane.next_id, CancellationToken::new());
        lane.waiting.insert(id, evicted.clone());
        Some(ProbeSlot { id, evicted, lane: self.probes.clone() })
    }
}

/// One connection served in full; its place is given back when it is dropped.
struct FullSlot(Arc<AtomicUsize>);

impl Drop for FullSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One probe-lane connection; cancelled `evicted` closes it.
struct ProbeSlot {
    id: u64,
    evicted: CancellationToken,
    lane: Arc<Mutex<ProbeLane>>,
}

impl ProbeSlot {
    /// Its head has arrived: it is no longer a candidate for eviction.
    fn answering(&self) {
        self.lane.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).waiting.remove(&self.id);
    }
}

impl Drop for ProbeSlot {
    fn drop(&mut self) {
        let mut lane = self.lane.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        lane.waiting.remove(&self.id);
        lane.open = lane.open.saturating_sub(1);
    }
}

/// When a connection last started or finished a request (or was accepted).
struct Activity(AtomicU64);

impl Activity {
    fn new() -> Activity {
        Activity(AtomicU64::new(now_ms()))
    }

    fn touch(&self) {
        self.0.store(now_ms(), Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.0.load(Ordering::Relaxed)))
    }
}

fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}
