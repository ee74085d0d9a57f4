//! The routing table as `roomgate check` prints it, with the listeners, backends, limits, room
//! directory and room hand-off.

use std::fmt::Write;

use super::{Config, Directory, OnHandoffFailure, OnMissing, Route, RouteMode};
use crate::config::duration::HumanDuration;

impl Config {
    /// A human-readable summary: listeners, placement, backends and routes in match order.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "config: {} (valid)", self.origin);
        self.describe_listeners(&mut out);
        self.describe_placement(&mut out);
        self.describe_backends(&mut out);
        self.describe_routes(&mut out);
        self.describe_limits(&mut out);
        self.describe_directory(&mut out);
        self.describe_handoff(&mut out);
        out
    }

    /// The plain listeners, then the TLS ones and their certificates.
    fn describe_listeners(&self, out: &mut String) {
        let listen: Vec<String> = self.server.listen.iter().map(|a| a.to_string()).collect();
        let _ = writeln!(out, "listen: {}", listen.join(", "));
        if let Some(tls) = &self.tls {
            let listen: Vec<String> = tls.listen.iter().map(|a| a.to_string()).collect();
            let _ = writeln!(out, "tls listen: {} (HTTP/2 and HTTP/1.1)", listen.join(", "));
            for (i, c) in tls.certs.iter().enumerate() {
                let default = if i == 0 { " (default)" } else { "" };
                let _ = writeln!(out, "  certificate {}, key {}{default}", c.cert.display(), c.key.display());
            }
        }
    }

    fn describe_placement(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "placement: {}{}",
            self.placement.algorithm,
            match self.placement.algorithm {
                crate::placement::Algorithm::Ring => format!(" ({} vnodes per backend)", self.placement.vnodes),
                crate::placement::Algorithm::Rendezvous => String::new(),
            }
        );
    }

    /// The file's backends (and what their names resolved to), then the SRV names read for more.
    fn describe_backends(&self, out: &mut String) {
        let _ = writeln!(out, "\nbackends ({}):", self.backends.len());
        for b in &self.backends {
            let resolved = if b.addr_text == b.addr.to_string() { String::new() } else { format!(" -> {}", b.addr) };
            let _ = writeln!(out, "  {:<20} {}{}", b.id, b.addr_text, resolved);
        }
        for d in &self.discovery {
            let resolver = d.resolver.map_or_else(|| "the system resolver".to_owned(), |r| r.to_string());
            let _ = writeln!(
                out,
                "  + from DNS: SRV {} every {} via {resolver} (timeout {})",
                d.srv,
                HumanDuration(d.interval),
                HumanDuration(d.timeout)
            );
        }
    }

    fn describe_routes(&self, out: &mut String) {
        let _ = writeln!(out, "\nroutes (first matching prefix wins):");
        for (i, r) in self.routes.iter().enumerate() {
            match r.mode {
                RouteMode::Shared => {
                    let _ = writeln!(out, "  [{i}] {:<16} shared: round-robin over all backends", r.prefix);
                }
                RouteMode::Room => describe_room_route(out, i, r),
            }
        }
    }

    fn describe_limits(&self, out: &mut String) {
        let t = &self.timeouts;
        let _ = writeln!(
            out,
            "\ntimeouts: connect {}, request head {}, upstream response {}, websocket idle {}",
            HumanDuration(t.connect),
            HumanDuration(t.request_head),
            HumanDuration(t.upstream_response),
            t.websocket_idle.map_or("off".to_owned(), |d| HumanDuration(d).to_string()),
        );
        let _ = writeln!(
            out,
            "limits: request head {} bytes, {} headers",
            self.limits.max_request_head, self.limits.max_headers
        );
    }

    fn describe_directory(&self, out: &mut String) {
        match &self.directory {
            Directory::Memory => {
                let _ = writeln!(out, "room directory: in memory (one replica)");
            }
            Directory::Redis { prefix, refresh, replica_id, .. } => {
                let _ = writeln!(
                    out,
                    "room directory: Redis, prefix {prefix:?}, refresh {}, this replica {}",
                    HumanDuration(*refresh),
                    replica_id.as_deref().map_or_else(|| "{host name}-{pid}".to_owned(), |id| format!("{id:?}"))
                );
            }
        }
    }

    /// One line when hand-off is on: its endpoints, limits and what a failed step does.
    fn describe_handoff(&self, out: &mut String) {
        let Some(h) = &self.handoff else { return };
        let _ = writeln!(
            out,
            "room hand-off: endpoints {} on the backends (404 to clients), {} per step, states up to {}, {} rooms at once, on failure {}, {}",
            h.path,
            HumanDuration(h.timeout),
            bytes(h.max_bytes),
            h.concurrency,
            match h.on_failure {
                OnHandoffFailure::Restart => "restart",
                OnHandoffFailure::Stay => "stay",
            },
            if h.token.is_some() { "with a token" } else { "no token" },
        );
    }
}

/// A size in the largest binary unit that writes it whole: `16MiB`, `1500B`.
fn bytes(n: usize) -> String {
    for (unit, size) in [("GiB", 1usize << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= size && n.is_multiple_of(size) {
            return format!("{}{unit}", n / size);
        }
    }
    format!("{n}B")
}

/// A room route `i`: what it does without a key, its key sources in order and its affinity cookie.
fn describe_room_route(out: &mut String, i: usize, r: &Route) {
    let missing = match r.on_missing {
        OnMissing::Reject => "400 when no key",
        OnMissing::Shared => "shared pool when no key",
    };
    let _ = writeln!(out, "  [{i}] {:<16} room: {missing}", r.prefix);
    for (n, k) in r.keys.iter().enumerate() {
        let _ = writeln!(out, "        key {}: {k}", n + 1);
    }
    if let Some(c) = &r.affinity_cookie {
        let _ = writeln!(out, "        sets affinity cookie {c}");
    }
}
