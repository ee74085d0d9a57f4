//! Listeners and connections: accept, serve HTTP/1.1 with upgrades, and shut down gracefully.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::Config;
use crate::config::Directory;
use crate::control::Control;
use crate::directory::{MemoryDirectory, RedisDirectory, RedisSettings, RoomDirectory};
use crate::proxy::Gateway;
use crate::relay::CLOSE_GOING_AWAY;

/// The sockets roomgate serves on, bound by the caller (`main`, or a test on port 0).
pub struct Listeners {
    pub http: Vec<TcpListener>,
    /// The admin API; `None`: no admin API.
    pub admin: Option<TcpListener>,
}

/// Serves `listeners` with `config` until `shutdown` resolves; then stops accepting, lets requests
/// in flight finish, closes every WebSocket with 1001 at a frame boundary, and returns once all
/// are done or `[shutdown] grace` has passed.
pub async fn run(listeners: Listeners, config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    Server::new(config).serve(listeners, shutdown).await
}

/// The live-room directory the config asks for.
fn directory_for(config: &Config) -> Arc<dyn RoomDirectory> {
    match &config.directory {
        Directory::Memory => Arc::new(MemoryDirectory::new()),
        Directory::Redis { url, prefix, refresh, timeout, replica_id } => {
            let settings = RedisSettings {
                url: url.clone(),
                prefix: prefix.clone(),
                replica: replica_id.clone(),
                refresh: *refresh,
                timeout: *timeout,
                // A room lingers in Redis as it does here, plus two refresh periods of slack.
                ttl: config.rooms.linger + 2 * *refresh,
            };
            match RedisDirectory::new(settings) {
                Ok(d) => {
                    tracing::info!(replica = %replica_id, "room directory shared through Redis");
                    d
                }
                Err(e) => {
                    // The URL was checked when the config was loaded; this cannot happen.
                    tracing::error!(error = %e, "cannot use the Redis directory; this replica keeps its own");
                    Arc::new(MemoryDirectory::new())
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
    pub fn new(config: Config) -> Server {
        let directory = directory_for(&config);
        let gateway = Gateway::new(config, directory);
        Server { control: Control::new(gateway) }
    }

    /// Reloads, drains and the state behind the admin API.
    pub fn control(&self) -> Arc<Control> {
        self.control.clone()
    }

    /// See [`run`].
    pub async fn serve(self, listeners: Listeners, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let gateway = self.control.gateway().clone();
        let discovery = tokio::spawn(crate::discovery::run(self.control.clone()));
        crate::discovery::first_round(&self.control).await;
        let config = gateway.snapshot().config.clone();
        let http = http_builder(&config);
        let stop = CancellationToken::new();
        let connections = TaskTracker::new();
        for listener in listeners.http {
            let addr = listener.local_addr()?;
            tracing::info!(%addr, "listening");
            let accept = accept_loop(listener, gateway.clone(), http.clone(), stop.clone(), connections.clone());
            connections.spawn(accept);
        }
        if let Some(admin) = listeners.admin {
            connections.spawn(crate::admin::serve(admin, self.control.clone(), stop.clone()));
        }
        let background = [
            tokio::spawn(self.control.clone().maintain()),
            tokio::spawn(self.control.clone().watch()),
            tokio::spawn(crate::health::run_checks(gateway.clone())),
            tokio::spawn(self.control.clone().sync_directory()),
            discovery,
        ];
        shutdown.await;
        for task in &background {
            task.abort();
        }
        finish(gateway, stop, connections, config.shutdown.grace).await
    }
}

async fn finish(
    gateway: Arc<Gateway>,
    stop: CancellationToken,
    connections: TaskTracker,
    grace: Duration,
) -> anyhow::Result<()> {
    let sockets = gateway.tunnels.close_all(CLOSE_GOING_AWAY);
    tracing::info!(websockets = sockets, grace = ?grace, "shutting down");
    stop.cancel();
    connections.close();
    let drained = tokio::time::timeout(grace, async {
        connections.wait().await;
        gateway.tunnels.wait_empty().await;
    })
    .await;
    match drained {
        Ok(()) => tracing::info!("shutdown complete"),
        Err(_) => {
            tracing::warn!(websockets = gateway.tunnels.len(), "shutdown grace period over; closing what is left")
        }
    }
    Ok(())
}

fn http_builder(config: &Config) -> http1::Builder {
    let limits = &config.limits;
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(config.timeouts.request_head)
        .keep_alive(true)
        // roomgate checks the configured limits itself, to answer with a body that says why;
        // hyper's own limits are a backstop against far larger heads.
        .max_headers(limits.max_headers.saturating_mul(2).max(100))
        .max_buf_size(limits.max_request_head.saturating_mul(2).max(16 * 1024) + 16 * 1024);
    b
}

async fn accept_loop(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    http: http1::Builder,
    stop: CancellationToken,
    connections: TaskTracker,
) {
    while let Some((stream, client)) = accept(&listener, &stop).await {
        let span = tracing::info_span!("conn", client.addr = %client, room = tracing::field::Empty, backend = tracing::field::Empty);
        let conn = serve(stream, client, gateway.clone(), http.clone(), stop.clone());
        connections.spawn(conn.instrument(span));
    }
}

/// The next connection, or `None` once `stop` is cancelled. Accept errors (out of file
/// descriptors and the like) are logged and retried after a short pause instead of spinning.
pub(crate) async fn accept(listener: &TcpListener, stop: &CancellationToken) -> Option<(TcpStream, SocketAddr)> {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => return Some(pair),
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = stop.cancelled() => return None,
        }
    }
}

async fn serve(
    stream: TcpStream,
    client: SocketAddr,
    gateway: Arc<Gateway>,
    http: http1::Builder,
    stop: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |req| {
        let gateway = gateway.clone();
        async move { Ok::<_, Infallible>(gateway.handle(req, client).await) }
    });
    let conn = http.serve_connection(TokioIo::new(stream), service).with_upgrades();
    tokio::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        log_connection_error(&e);
    }
}

/// Malformed or oversized requests were answered by hyper (400/431); say so once. Peers that
/// simply went away are routine, logged at debug.
fn log_connection_error(e: &hyper::Error) {
    if e.is_parse_too_large() {
        tracing::info!(status = 431, error = %e, "request head too large; connection closed");
    } else if e.is_parse() {
        tracing::info!(status = 400, error = %e, "malformed request; connection closed");
    } else if e.is_timeout() {
        tracing::debug!(error = %e, "request head not received in time; connection closed");
    } else {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}
