//! The defaults of the config file: the value of every key the file leaves out.

use std::net::SocketAddr;

use toml::Spanned;

use super::{
    AdminSection, AutoSize, ByteSize, Count, DirectorySection, DrainSection, HandoffSection, HealthSection,
    LimitsSection, LogFormat, LogSection, OneOrMany, PlacementSection, ReloadSection, RoomsSection, ServerSection,
    ShutdownSection, TimeoutsSection, UpstreamSection,
};
use crate::config::duration::{HumanDuration, OptionalDuration};
use crate::placement::Algorithm;

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            listen: OneOrMany(vec![SocketAddr::from(([127, 0, 0, 1], 8080))]),
            trusted_proxies: Vec::new(),
            workers: Spanned::new(0..0, 0),
        }
    }
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            max_request_head: Spanned::new(0..0, 64 * 1024),
            max_headers: Spanned::new(0..0, 100),
            max_first_message: Spanned::new(0..0, 64 * 1024),
            max_rooms: Spanned::new(0..0, 200_000),
            max_connections: Spanned::new(0..0, Count::Auto),
            max_connections_per_ip: Spanned::new(0..0, Count::Off),
            max_pending_sockets: Spanned::new(0..0, 10_000),
            max_pending_bytes: Spanned::new(0..0, AutoSize::Auto),
        }
    }
}

/// `[tls] listen` when the section sets none.
pub(super) fn tls_listen() -> OneOrMany<SocketAddr> {
    OneOrMany(vec![SocketAddr::from(([127, 0, 0, 1], 8443))])
}

fn secs(n: u64) -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(n))
}

impl Default for TimeoutsSection {
    fn default() -> Self {
        TimeoutsSection {
            connect: Spanned::new(0..0, secs(3)),
            request_head: Spanned::new(0..0, secs(10)),
            upstream_response: Spanned::new(0..0, secs(60)),
            // djust's client pings every 30 s, and a background tab's timers may be held back to
            // once a minute: twice that frees dead sockets without ever closing a live one.
            websocket_idle: OptionalDuration(Some(std::time::Duration::from_secs(120))),
            websocket_close: Spanned::new(0..0, secs(5)),
            first_message: Spanned::new(0..0, secs(10)),
            request_body: OptionalDuration(Some(std::time::Duration::from_secs(300))),
            request_body_idle: OptionalDuration(Some(std::time::Duration::from_secs(30))),
            // nginx's send_timeout: a client that takes no byte for a minute is not reading.
            client_write: Spanned::new(0..0, secs(60)),
        }
    }
}

impl Default for UpstreamSection {
    fn default() -> Self {
        UpstreamSection {
            max_idle_per_backend: 128,
            idle_timeout: secs(60),
            max_connections_per_backend: Spanned::new(0..0, Count::Off),
        }
    }
}

impl Default for PlacementSection {
    fn default() -> Self {
        PlacementSection { algorithm: Algorithm::Rendezvous, vnodes: Spanned::new(0..0, 160) }
    }
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection { format: LogFormat::Text, level: Spanned::new(0..0, "info".to_owned()), access: true }
    }
}

impl Default for DirectorySection {
    fn default() -> Self {
        DirectorySection {
            backend: Spanned::new(0..0, "memory".to_owned()),
            url: None,
            prefix: "roomgate:".to_owned(),
            refresh: Spanned::new(0..0, secs(2)),
            timeout: Spanned::new(0..0, HumanDuration(std::time::Duration::from_millis(250))),
            replica_id: None,
            password_file: None,
        }
    }
}

impl Default for RoomsSection {
    fn default() -> Self {
        RoomsSection { linger: secs(60), linger_unused: secs(5) }
    }
}

impl Default for HealthSection {
    fn default() -> Self {
        HealthSection {
            path: None,
            interval: Spanned::new(0..0, secs(2)),
            timeout: Spanned::new(0..0, secs(1)),
            rise: Spanned::new(0..0, 2),
            fall: Spanned::new(0..0, 3),
            cooldown: Spanned::new(0..0, secs(10)),
        }
    }
}

impl Default for DrainSection {
    fn default() -> Self {
        DrainSection { deadline: secs(300), spread: secs(10) }
    }
}

impl Default for AdminSection {
    fn default() -> Self {
        AdminSection {
            listen: Spanned::new(0..0, SocketAddr::from(([127, 0, 0, 1], 9901))),
            token: None,
            token_file: None,
            max_connections: Spanned::new(0..0, 64),
        }
    }
}

impl Default for ReloadSection {
    fn default() -> Self {
        ReloadSection { watch: true, interval: Spanned::new(0..0, secs(1)) }
    }
}

impl Default for ShutdownSection {
    fn default() -> Self {
        ShutdownSection { grace: secs(30) }
    }
}

impl Default for HandoffSection {
    fn default() -> Self {
        HandoffSection {
            path: Spanned::new(0..0, crate::config::DEFAULT_HANDOFF_PATH.to_owned()),
            timeout: Spanned::new(0..0, secs(5)),
            max_bytes: Spanned::new(0..0, ByteSize(16 << 20)),
            token: None,
            token_file: None,
            concurrency: Spanned::new(0..0, 16),
            on_failure: Spanned::new(0..0, "restart".to_owned()),
        }
    }
}

/// A `[[discovery]]` entry's `interval` when it sets none.
pub(super) fn discovery_interval() -> Spanned<HumanDuration> {
    Spanned::new(0..0, secs(5))
}

/// A `[[discovery]]` entry's `timeout` when it sets none.
pub(super) fn discovery_timeout() -> Spanned<HumanDuration> {
    Spanned::new(0..0, secs(2))
}
