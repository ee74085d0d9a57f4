//! WebSocket handshakes: the upgrade goes to the room's backend on a connection of its own; on
//! its 101 both upgraded connections are handed to a tunnel.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tracing::Instrument;

use super::Gateway;
use super::access;
use crate::backends::Backend;
use crate::directory::{Presence, Use};
use crate::error::BackendError;
use crate::relay::watch::NavWatch;
use crate::relay::{self, Registration, TunnelOptions};

/// Where a tunnel goes and what to log when it ends.
pub struct TunnelSpec {
    pub client: SocketAddr,
    pub room: Option<String>,
    pub backend: Arc<Backend>,
}

/// Sends the handshake `req` (headers already prepared) to the backend. Returns the backend's
/// answer: a 101, after which the tunnel runs in its own task, or a refusal, passed on as is.
pub async fn forward(
    gateway: &Arc<Gateway>,
    req: Request<()>,
    client_upgrade: OnUpgrade,
    spec: TunnelSpec,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<Response<hyper::body::Incoming>, BackendError> {
    let mut resp = open(&spec.backend, req, connect_timeout, response_timeout).await?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let backend_upgrade = hyper::upgrade::on(&mut resp);
        let held = hold(gateway, &spec);
        let opts = gateway.tunnel_options();
        let span = tracing::info_span!("tunnel", room = spec.room.as_deref(), backend = %spec.backend.id);
        tokio::spawn(
            async move {
                match tokio::join!(client_upgrade, backend_upgrade) {
                    (Ok(c), Ok(b)) => run(TokioIo::new(c), TokioIo::new(b), held, spec, opts, None).await,
                    (c, b) => {
                        let error = c.err().or(b.err()).map(|e| e.to_string());
                        tracing::debug!(error, "websocket upgrade did not complete");
                    }
                }
            }
            .instrument(span),
        );
    }
    Ok(resp)
}

/// Opens a connection of its own to the backend and sends it the handshake `req`.
pub async fn open(
    backend: &Backend,
    req: Request<()>,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<Response<hyper::body::Incoming>, BackendError> {
    let id = || backend.id.to_string();
    let stream = match tokio::time::timeout(connect_timeout, TcpStream::connect(backend.addr)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err(BackendError::Connect { backend: id(), source: Box::new(e) }),
        Err(_) => {
            let e = std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("connect timed out after {connect_timeout:?}"),
            );
            return Err(BackendError::Connect { backend: id(), source: Box::new(e) });
        }
    };
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
        .await
        .map_err(|e| BackendError::Failed { backend: id(), source: Box::new(e) })?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "upstream handshake connection ended with an error");
        }
    });
    let (parts, ()) = req.into_parts();
    let req = Request::from_parts(parts, Empty::new());
    match tokio::time::timeout(response_timeout, sender.send_request(req)).await {
        Ok(Ok(resp)) => Ok(resp),
        Ok(Err(e)) => Err(BackendError::Failed { backend: id(), source: Box::new(e) }),
        Err(_) => Err(BackendError::Timeout { backend: id(), after: response_timeout }),
    }
}

/// A socket accepted by its backend: registered as a tunnel and counted in its room's presence.
/// The room may have moved (drain deadline, backend down) while the handshake was on its way:
/// then the socket is closed at once, like the room's others, and reconnects.
pub fn hold(gateway: &Arc<Gateway>, spec: &TunnelSpec) -> (Registration, Option<Presence>) {
    let backend = &spec.backend;
    let registration = gateway.tunnels.register(spec.room.as_deref().map(Into::into), backend.id.clone());
    let presence = spec
        .room
        .as_deref()
        .map(|room| Presence::new(gateway.directory.clone(), room, backend.id.clone(), Use::Socket));
    if let Some(room) = spec.room.as_deref()
        && gateway.directory.owner(room).as_deref() != Some(&*backend.id)
    {
        registration.handle().request_close(crate::relay::CLOSE_SERVICE_RESTART);
    }
    (registration, presence)
}

/// Relays an upgraded socket until the tunnel ends, then logs it.
/// `held`: the tunnel's registration and its room's presence, released when it ends.
pub async fn run<C, B>(
    client_io: C,
    backend_io: B,
    held: (Registration, Option<Presence>),
    spec: TunnelSpec,
    opts: TunnelOptions,
    watch: Option<NavWatch>,
) where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (registration, _presence) = held;
    let start = Instant::now();
    let stats = &spec.backend.stats;
    stats.open_sockets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (pump_stats, ending) = relay::run(client_io, backend_io, registration.handle(), opts, watch).await;
    stats.open_sockets.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    access::websocket_closed(spec.client, spec.room.as_deref(), &spec.backend.id, start, &pump_stats, &ending);
}
