//! Prometheus metrics: counters updated on the request path, and gauges read from the live state
//! (backends, directory) when `/metrics` is scraped.

mod directory;
mod handoff;
mod hot;

use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::backends::{Backend, Transition};
use crate::directory::RoomDirectory;
use crate::snapshot::Snapshot;
use crate::tls::Tls;
use hot::{Hot, same_arc};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: Arc<str>,
    pub status: u16,
    pub backend: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabel {
    backend: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabel {
    limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DiscoveryLabels {
    srv: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SrvLabel {
    srv: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    backend: Arc<str>,
    to: &'static str,
}

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    upstream_seconds: Family<BackendLabel, Histogram>,
    reloads: Family<ResultLabel, Counter>,
    health: Family<TransitionLabels, Counter>,
    djust: Family<OutcomeLabel, Counter>,
    discovery_resolutions: Family<DiscoveryLabels, Counter>,
    discovered: Family<SrvLabel, Gauge>,
    tls_handshakes: Family<ResultLabel, Counter>,
    tls_cert_reloads: Family<OutcomeLabel, Counter>,
    refused: Family<LimitLabel, Counter>,
    rooms_over_cap: Counter,
    client_write_timeouts: Counter,
    join_waits: Histogram,
    handoff: handoff::HandoffMetrics,
    /// Fronts for `requests` and `upstream_seconds`, counted on every request.
    hot_requests: Hot<RequestLabels, Counter>,
    hot_latency: Hot<Arc<str>, Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut metrics = Metrics {
            registry: Registry::with_prefix("roomgate"),
            requests: Family::default(),
            upstream_seconds: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 2.0, 18))),
            reloads: Family::default(),
            health: Family::default(),
            djust: Family::default(),
            discovery_resolutions: Family::default(),
            discovered: Family::default(),
            tls_handshakes: Family::default(),
            tls_cert_reloads: Family::default(),
            refused: Family::default(),
            rooms_over_cap: Counter::default(),
            client_write_timeouts: Counter::default(),
            join_waits: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            handoff: handoff::HandoffMetrics::default(),
            hot_requests: Hot::new(),
            hot_latency: Hot::new(),
        };
        metrics.register_traffic();
        metrics.register_discovery_and_tls();
        metrics.register_limits_and_rooms();
        metrics.handoff.register(&mut metrics.registry);
        metrics
    }

    /// Requests, backends' latency, reloads, health transitions and djust sockets.
    fn register_traffic(&mut self) {
        let r = &mut self.registry;
        r.register(
            "requests",
            "HTTP requests and WebSocket handshakes by route, status and backend",
            self.requests.clone(),
        );
        r.register(
            "upstream_response_seconds",
            "Time from sending a request to a backend to its response head",
            self.upstream_seconds.clone(),
        );
        r.register("reloads", "Config reloads by result", self.reloads.clone());
        r.register("health_transitions", "Backends going down or coming up", self.health.clone());
        r.register(
            "djust_sockets",
            "djust sockets routed by their mount frame, by outcome: room, shared, refused (by roomgate), \
             backend_refused, navigated (closed on live navigation out of the room)",
            self.djust.clone(),
        );
    }

    /// `[[discovery]]` resolutions and sets, TLS handshakes and certificate reloads.
    fn register_discovery_and_tls(&mut self) {
        let r = &mut self.registry;
        r.register(
            "discovery_resolutions",
            "DNS SRV resolutions of [[discovery]] entries by outcome: ok, empty (NXDOMAIN or no records), \
             timeout, error, invalid (two targets with one id, a target without an address)",
            self.discovery_resolutions.clone(),
        );
        r.register(
            "discovered_backends",
            "Backends in the last good set of a [[discovery]] entry",
            self.discovered.clone(),
        );
        r.register(
            "tls_handshakes",
            "TLS handshakes by result: full, resumed, failed, timeout",
            self.tls_handshakes.clone(),
        );
        r.register(
            "tls_cert_reloads",
            "TLS certificates reloaded after their files changed, by outcome: ok, failed (the one in force stays)",
            self.tls_cert_reloads.clone(),
        );
    }

    /// Limits reached, rooms over the directory's cap, and joins that waited for their room.
    fn register_limits_and_rooms(&mut self) {
        let r = &mut self.registry;
        r.register(
            "refused",
            "Connections closed at accept and requests answered 503 because a limit was reached, by the \
             limit's config key",
            self.refused.clone(),
        );
        r.register(
            "rooms_over_cap",
            "New rooms placed but not recorded because the directory held limits.max_rooms",
            self.rooms_over_cap.clone(),
        );
        r.register(
            "client_write_timeouts",
            "Client connections closed because the client accepted no byte for timeouts.client_write \
             (both sides closed; never counted against a backend)",
            self.client_write_timeouts.clone(),
        );
        r.register(
            "room_join_wait_seconds",
            "Time a request or socket waited for its room to settle before joining (a move in progress across \
             the fleet, or the shared directory rebuilding); only those that waited",
            self.join_waits.clone(),
        );
    }

    /// Counts a connection or request refused by `limit` (its config key).
    pub fn refused(&self, limit: &'static str) {
        self.refused.get_or_create(&LimitLabel { limit }).inc();
    }

    /// The counter of client connections closed by `timeouts.client_write` (one per connection).
    pub fn client_write_timeouts(&self) -> Counter {
        self.client_write_timeouts.clone()
    }

    /// The counter of new rooms not recorded over `limits.max_rooms` (handed to the directory).
    pub fn rooms_over_cap(&self) -> Counter {
        self.rooms_over_cap.clone()
    }

    /// A join that waited for its room to settle (see the metric's help text).
    pub fn join_waited(&self, waited: Duration) {
        self.join_waits.observe(waited.as_secs_f64());
    }

    /// Counts one resolution of a `[[discovery]]` entry.
    pub fn discovery_resolution(&self, srv: &str, outcome: &'static str) {
        self.discovery_resolutions.get_or_create(&DiscoveryLabels { srv: srv.to_owned(), outcome }).inc();
    }

    /// The size of a `[[discovery]]` entry's last good set.
    pub fn discovered_backends(&self, srv: &str, n: usize) {
        self.discovered.get_or_create(&SrvLabel { srv: srv.to_owned() }).set(n as i64);
    }

    /// A `[[discovery]]` entry left the config: its series go.
    pub fn forget_discovery(&self, srv: &str) {
        self.discovered.remove(&SrvLabel { srv: srv.to_owned() });
        for outcome in ["ok", "empty", "timeout", "error", "invalid"] {
            self.discovery_resolutions.remove(&DiscoveryLabels { srv: srv.to_owned(), outcome });
        }
    }

    /// Counts a djust socket's outcome (see the metric's help text).
    pub fn djust(&self, outcome: &'static str) {
        self.djust_counter(outcome).inc();
    }

    /// The counter of one djust outcome, to be incremented later (by a socket's watch).
    pub fn djust_counter(&self, outcome: &'static str) -> Counter {
        self.djust.get_or_create(&OutcomeLabel { outcome }).clone()
    }

    /// Counts a TLS handshake: `full`, `resumed`, `failed` or `timeout`.
    pub fn tls_handshake(&self, result: &'static str) {
        self.tls_handshakes.get_or_create(&ResultLabel { result }).inc();
    }

    pub fn tls_cert_reload(&self, ok: bool) {
        self.tls_cert_reloads.get_or_create(&OutcomeLabel { outcome: if ok { "ok" } else { "failed" } }).inc();
    }

    pub fn request(&self, labels: &RequestLabels) {
        self.hot_requests.with(
            |k| k.status == labels.status && same_arc(&k.route, &labels.route) && same_arc(&k.backend, &labels.backend),
            || (labels.clone(), self.requests.get_or_create(labels).clone()),
            |c| {
                c.inc();
            },
        );
    }

    pub fn upstream_latency(&self, backend: &Arc<str>, took: Duration) {
        self.hot_latency.with(
            |k| same_arc(k, backend),
            || {
                (
                    backend.clone(),
                    self.upstream_seconds.get_or_create(&BackendLabel { backend: backend.clone() }).clone(),
                )
            },
            |h| h.observe(took.as_secs_f64()),
        );
    }

    pub fn reload(&self, ok: bool) {
        self.reloads.get_or_create(&ResultLabel { result: if ok { "ok" } else { "failed" } }).inc();
    }

    /// Counts and logs a health transition, whether an active check or the request path
    /// (passive checks, `seen_by`) saw it.
    pub fn health_transition(&self, backend: &Backend, t: Transition, seen_by: &str) {
        let to = match t {
            Transition::WentDown => "down",
            Transition::CameUp => "up",
        };
        self.health.get_or_create(&TransitionLabels { backend: backend.id.clone(), to }).inc();
        match t {
            Transition::WentDown => {
                tracing::warn!(backend = %backend.id, addr = %backend.addr, seen_by, "backend down")
            }
            Transition::CameUp => tracing::info!(backend = %backend.id, addr = %backend.addr, seen_by, "backend up"),
        }
    }

    /// The text exposition: registered metrics, then gauges read from the live state.
    pub fn render(&self, snap: &Snapshot, directory: &dyn RoomDirectory, splits: u64, tls: Option<&Tls>) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode_registry(&mut out, &self.registry);
        let passive = snap.passive_only();
        let backends: Vec<_> = snap.backends.iter().chain(snap.retiring.iter()).collect();
        let gauge = |out: &mut String, name: &str, help: &str, value: &dyn Fn(&crate::backends::Backend) -> u64| {
            let _ = writeln!(out, "# HELP roomgate_{name} {help}\n# TYPE roomgate_{name} gauge");
            for b in &backends {
                let _ = writeln!(out, "roomgate_{name}{{backend=\"{}\"}} {}", escape(&b.id), value(b));
            }
        };
        gauge(&mut out, "open_sockets", "Open WebSockets per backend", &|b| b.open_sockets());
        gauge(&mut out, "live_rooms", "Rooms with a connection, per owner", &|b| {
            directory.live_rooms_on(&b.id).len() as u64
        });
        gauge(&mut out, "backend_up", "1 if the backend is healthy", &|b| u64::from(b.is_up(passive)));
        gauge(&mut out, "backend_draining", "1 if the backend is draining", &|b| u64::from(b.is_draining()));
        let (rooms, live) = directory.counts();
        let _ = writeln!(
            out,
            "# HELP roomgate_rooms Rooms in the directory (live or lingering)\n# TYPE roomgate_rooms gauge\nroomgate_rooms {rooms}"
        );
        let _ = writeln!(
            out,
            "# HELP roomgate_rooms_live Rooms with a connection\n# TYPE roomgate_rooms_live gauge\nroomgate_rooms_live {live}"
        );
        let _ = writeln!(
            out,
            "# HELP roomgate_split_rooms Times a room was live on two backends at once (must stay 0)\n# TYPE roomgate_split_rooms counter\nroomgate_split_rooms_total {}",
            splits
        );
        let _ = writeln!(
            out,
            "# HELP roomgate_config_epoch Epoch of the config in force\n# TYPE roomgate_config_epoch gauge\nroomgate_config_epoch {}",
            snap.epoch
        );
        if let Some(figures) = directory.metrics() {
            self::directory::encode(&mut out, figures);
        }
        if let Some(tls) = tls {
            let _ = writeln!(
                out,
                "# HELP roomgate_tls_cert_not_after_seconds Expiry of each TLS certificate in force (Unix time)\n# TYPE roomgate_tls_cert_not_after_seconds gauge"
            );
            for c in tls.status() {
                if let Some(t) = c.not_after_unix {
                    let _ = writeln!(out, "roomgate_tls_cert_not_after_seconds{{cert=\"{}\"}} {t}", escape(&c.cert));
                }
            }
        }
        out.push_str("# EOF\n");
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}
