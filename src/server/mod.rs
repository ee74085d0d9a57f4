//! Listeners: accept plain and TLS connections, serve them (see [`conn`]), and shut down
//! gracefully.

mod conn;
mod write_timeout;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::accept::accept;
use crate::config::Config;
use crate::config::Directory;
use crate::control::Control;
use crate::directory::{MemoryDirectory, RedisDirectory, RedisSettings, RoomDirectory};
use crate::limits;
use crate::metrics::Metrics;
use crate::proxy::Gateway;
use crate::relay::CLOSE_GOING_AWAY;
use crate::snapshot::{Publisher, Snapshot};
use crate::tls::Tls;

use self::conn::Protocols;

/// The sockets roomgate serves on, bound by the caller (`main`, or a test on port 0).
pub struct Listeners {
    pub http: Vec<TcpListener>,
    /// `[tls] listen`: TLS, then HTTP/2 or HTTP/1.1 as ALPN chooses.
    pub tls: Vec<TcpListener>,
    /// The admin API; `None`: no admin API.
    pub admin: Option<TcpListener>,
}

/// Serves `listeners` with `config` until `shutdown` resolves; then stops accepting, lets requests
/// in flight finish, closes every WebSocket with 1001 at a frame boundary, and returns once all
/// are done or `[shutdown] grace` has passed.
pub async fn run(listeners: Listeners, config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    Server::new(config).serve(listeners, shutdown).await
}

/// The live-room directory the config asks for, bounded by `limits.max_rooms` (its over-cap
/// counter is `metrics`').
fn directory_for(config: &Config, metrics: &Metrics) -> Arc<dyn RoomDirectory> {
    let local = || MemoryDirectory::with_cap(config.limits.max_rooms, metrics.rooms_over_cap());
    match &config.directory {
        Directory::Memory => Arc::new(local()),
        Directory::Redis { url, prefix, refresh, timeout, replica_id, password } => {
            let replica_id = replica_id.clone().unwrap_or_else(crate::directory::default_replica);
            let settings = RedisSettings {
                url: url.clone(),
                prefix: prefix.clone(),
                replica: replica_id.clone(),
                refresh: *refresh,
                timeout: *timeout,
                // A room lingers in Redis as it does here, plus two refresh periods of slack.
                ttl: config.rooms.linger + 2 * *refresh,
                ttl_unused: config.rooms.linger_unused + 2 * *refresh,
                password: password.clone(),
            };
            match RedisDirectory::new(settings, local()) {
                Ok(d) => {
                    tracing::info!(replica = %replica_id, "room directory shared through Redis");
                    d
                }
                Err(e) => {
                    // The URL was checked when the config was loaded; this cannot happen.
                    tracing::error!(error = %e, "cannot use the Redis directory; this replica keeps its own");
                    Arc::new(local())
                }
            }
        }
    }
}

/// A roomgate instance: its state, and the handle to change it while it runs (reloads, drains).
pub struct Server {
    control: Arc<Control>,
}

impl Server {
    /// A server for `config`. Its TLS certificates (if any) are loaded here; one that does not
    /// load is logged and left out until its files are fixed. `main` loads them with
    /// [`Tls::load`] first, where a bad certificate is a config error, and uses [`Server::with_tls`].
    pub fn new(config: Config) -> Server {
        let tls = config.tls.as_ref().and_then(|t| Tls::load_lenient(&t.certs));
        Server::with_tls(config, tls)
    }

    /// A server for `config` with its TLS state already loaded.
    pub fn with_tls(config: Config, tls: Option<Arc<Tls>>) -> Server {
        let metrics = Metrics::new();
        let directory = directory_for(&config, &metrics);
        let publisher = Arc::new(Publisher::new(Snapshot::build(config, 1)));
        let gateway = Gateway::new(publisher.current().clone(), directory, metrics);
        Server { control: Control::new(gateway, publisher, tls) }
    }

    /// Reloads, drains and the state behind the admin API.
    pub fn control(&self) -> Arc<Control> {
        self.control.clone()
    }

    /// See [`run`].
    pub async fn serve(self, listeners: Listeners, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let gateway = self.control.gateway().clone();
        let loops = self.control.start();
        crate::discovery::first_round(self.control.discovery(), &gateway.snapshot().config).await;
        let config = gateway.snapshot().config.clone();
        let protocols = Arc::new(Protocols::new(&config));
        let stop = CancellationToken::new();
        let connections = TaskTracker::new();
        let acceptor = self.control.tls().map(|t| t.acceptor());
        if acceptor.is_none() && !listeners.tls.is_empty() {
            tracing::error!("TLS listeners given without TLS certificates; they are not served");
        }
        let plain = listeners.http.into_iter().map(|l| (l, None));
        let tls = listeners.tls.into_iter().filter_map(|l| Some((l, Some(acceptor.clone()?))));
        for (listener, acceptor) in plain.chain(tls) {
            let addr = listener.local_addr()?;
            tracing::info!(%addr, tls = acceptor.is_some(), "listening");
            let accept =
                accept_loop(listener, gateway.clone(), protocols.clone(), acceptor, stop.clone(), connections.clone());
            connections.spawn(accept);
        }
        if let Some(admin) = listeners.admin {
            connections.spawn(crate::admin::serve(admin, self.control.clone(), stop.clone()));
        }
        shutdown.await;
        drop(loops);
        let control = self.control.clone();
        let handoffs = async move { control.finish_handoffs().await };
        finish(gateway, stop, connections, config.shutdown.grace, handoffs).await
    }
}

/// Closes every socket (1001), stops accepting, and waits until the connections, the tunnels and
/// the hand-offs in flight (`handoffs`) have ended, or `grace` has passed.
async fn finish(
    gateway: Arc<Gateway>,
    stop: CancellationToken,
    connections: TaskTracker,
    grace: Duration,
    handoffs: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let sockets = gateway.tunnels().close_all(CLOSE_GOING_AWAY);
    tracing::info!(websockets = sockets, grace = ?grace, "shutting down");
    stop.cancel();
    connections.close();
    let drained = tokio::time::timeout(grace, async {
        connections.wait().await;
        gateway.tunnels().wait_empty().await;
        handoffs.await;
    })
    .await;
    match drained {
        Ok(()) => tracing::info!("shutdown complete"),
        Err(_) => {
            tracing::warn!(websockets = gateway.tunnels().len(), "shutdown grace period over; closing what is left")
        }
    }
    // Its sockets are closed: its claims end now rather than at their expiry.
    gateway.directory().leave_fleet().await;
    Ok(())
}

/// Accepts connections on one listener and serves each in a task of its own, under the
/// connection's tracing span. `acceptor`: a TLS listener. A connection over a connection limit
/// is closed here, before a byte is read from it (or a TLS handshake begins).
async fn accept_loop(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    protocols: Arc<Protocols>,
    acceptor: Option<TlsAcceptor>,
    stop: CancellationToken,
    connections: TaskTracker,
) {
    while let Some((stream, client)) = accept(&listener, &stop).await {
        let admitted = gateway.admission().admit(client.ip(), &gateway.snapshot());
        let ticket = match admitted {
            Ok(ticket) => ticket,
            Err(e) => {
                limits::refused(gateway.metrics(), e, &client);
                drop(stream);
                continue;
            }
        };
        let span = tracing::info_span!("conn", client.addr = %client, room = tracing::field::Empty, backend = tracing::field::Empty);
        let (gateway, protocols, stop) = (gateway.clone(), protocols.clone(), stop.clone());
        // Boxed: a task moves its future whole at each change of stage (start, end), and a
        // connection's future is several kilobytes; a box is moved as a pointer.
        match &acceptor {
            Some(acceptor) => {
                let conn = conn::serve_tls(stream, client, ticket, gateway, protocols, acceptor.clone(), stop);
                connections.spawn(Box::pin(conn.instrument(span)));
            }
            None => {
                let conn = conn::serve_plain(stream, client, ticket, gateway, protocols, stop);
                connections.spawn(Box::pin(conn.instrument(span)));
            }
        }
    }
}
