//! What every WebSocket tunnel shares: a backend's 101 checked against the handshake, the
//! handshake to a backend over hyper's client (djust sockets), and a tunnel's registration and
//! relay once both sides are upgraded.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::fields::{Fields, has_token};
use http::{Request, Response};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::Gateway;
use super::access;
use crate::backends::Backend;
use crate::directory::{Presence, Use};
use crate::error::BackendError;
use crate::limits::Holds;
use crate::relay::watch::NavWatch;
use crate::relay::{self, Registration, TunnelOptions};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

/// Where a tunnel goes and what to log when it ends.
pub struct TunnelSpec {
    pub client: SocketAddr,
    pub room: Option<String>,
    pub backend: Arc<Backend>,
    /// Its client connection, forwarded client and backend slot, counted until it ends.
    pub holds: Holds,
}

/// Checks that a backend's 101 completes the WebSocket handshake whose `Sec-WebSocket-Key` was
/// `key` (RFC 6455 section 4.1: `Upgrade: websocket`, `Connection: upgrade`, the matching
/// `Sec-WebSocket-Accept`). Returns the RSV bits the extensions it accepted may use.
pub fn accepted<F: Fields + ?Sized>(headers: &F, key: Option<&[u8]>) -> Result<u8, &'static str> {
    if !has_token(headers, "upgrade", "websocket") {
        return Err("its 101 has no Upgrade: websocket");
    }
    if !has_token(headers, "connection", "upgrade") {
        return Err("its 101 has no Connection: upgrade");
    }
    let expected = key.map(derive_accept_key);
    match (headers.first("sec-websocket-accept"), expected) {
        (Some(got), Some(want)) if got == want.as_bytes() => {}
        _ => return Err("its 101 has a wrong or missing Sec-WebSocket-Accept"),
    }
    Ok(extension_rsv(headers))
}

/// The RSV bits of the extensions a 101 accepted: permessage-deflate (and its older webkit form)
/// use RSV1; an extension roomgate does not know may use any.
fn extension_rsv<F: Fields + ?Sized>(headers: &F) -> u8 {
    let names = headers
        .values("sec-websocket-extensions")
        .filter_map(crate::fields::text)
        .flat_map(|v| v.split(','))
        .filter_map(|ext| ext.split(';').next())
        .map(str::trim)
        .filter(|name| !name.is_empty());
    names.fold(0, |rsv, name| {
        rsv | match name.to_ascii_lowercase().as_str() {
            "permessage-deflate" | "x-webkit-deflate-frame" => 0x40,
            _ => 0x70,
        }
    })
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
/// The room may have moved (drain deadline, backend down, another replica's move) while the
/// handshake was on its way: then the socket is closed at once (1012), like the room's others on
/// that backend, and reconnects. The fleet's record decides, not only this replica's: a shared
/// directory is asked (one round trip per socket), and this replica follows a move it had not
/// seen yet.
pub async fn hold(gateway: &Arc<Gateway>, spec: &TunnelSpec) -> (Registration, Option<Presence>) {
    let backend = &spec.backend;
    let registration = gateway.tunnels.register(spec.room.as_deref().map(Into::into), backend.id.clone());
    let presence = spec
        .room
        .as_deref()
        .map(|room| Presence::new(gateway.directory.clone(), room, backend.id.clone(), Use::Socket));
    if let Some(room) = spec.room.as_deref() {
        if let Some(owner) = gateway.directory.confirm(room, &backend.id).await {
            // Registered above, so this closes the new socket too.
            let closed = gateway.close_moved(room, &backend.id);
            tracing::warn!(room, from = %backend.id, to = %owner, sockets_closed = closed, "the fleet moved this room while a handshake was on its way: its sockets here move there");
        } else if gateway.directory.owner(room).as_deref() != Some(&*backend.id) {
            registration.handle().request_close(crate::relay::CloseRequest::Moving);
        }
    }
    (registration, presence)
}

/// Relays an upgraded socket until the tunnel ends, then logs it.
/// `held`: the tunnel's registration and its room's presence, released when it ends.
///
/// A plain function returning the future: what the relay needs is moved into its future here,
/// so the tunnel's task stores each part once (an idle tunnel's memory is mostly this future).
pub fn run<C, B>(
    client_io: C,
    backend_io: B,
    held: (Registration, Option<Presence>),
    spec: TunnelSpec,
    opts: TunnelOptions,
    watch: Option<NavWatch>,
) -> impl Future<Output = ()> + Send + 'static
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut relay = relay::run(client_io, backend_io, held.0.handle().clone(), opts, watch);
    // An `async` block, not an `async fn`: a block keeps what it captures once, where an async
    // fn would also copy its arguments into locals. The relay is awaited in place.
    async move {
        let start = Instant::now();
        let stats = &spec.backend.stats;
        stats.open_sockets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (pump_stats, ending) = (&mut relay).await;
        stats.open_sockets.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        drop(held);
        drop(spec.holds);
        access::websocket_closed(spec.client, spec.room.as_deref(), &spec.backend.id, start, &pump_stats, &ending);
    }
}

#[cfg(test)]
mod tests {
    /// An idle tunnel's memory is mostly its task's future: keep it small (it was 2 KB when
    /// `select!` and async-fn arguments each kept copies of the pump and its timers).
    #[tokio::test]
    async fn an_idle_tunnel_future_stays_small() {
        use std::sync::Arc;
        let spec = crate::config::BackendSpec {
            id: "b".into(),
            addr_text: "127.0.0.1:1".into(),
            addr: "127.0.0.1:1".parse().unwrap(),
            source: Default::default(),
        };
        let backend = Arc::new(crate::backends::Backend::new(&spec));
        let tunnels = Arc::new(crate::relay::Tunnels::default());
        let reg = tunnels.register(Some("room".into()), backend.id.clone());
        let (a, b) = tokio::io::duplex(64);
        let spec = super::TunnelSpec {
            client: "127.0.0.1:2".parse().unwrap(),
            room: Some("room".into()),
            backend: backend.clone(),
            holds: crate::limits::Holds { backend: Some(backend.claim(None).unwrap()), ..Default::default() },
        };
        let opts = crate::relay::TunnelOptions { close_timeout: std::time::Duration::from_secs(1), rsv: 0 };
        let fut = super::run(a, b, (reg, None), spec, opts, None);
        let size = std::mem::size_of_val(&fut);
        assert!(size <= 640, "the tunnel future takes {size} bytes");
    }

    #[test]
    fn a_101_must_complete_this_websocket_handshake() {
        use http::HeaderValue;
        let key = b"dGhlIHNhbXBsZSBub25jZQ==";
        let mut h = http::HeaderMap::new();
        h.insert("upgrade", HeaderValue::from_static("websocket"));
        h.insert("connection", HeaderValue::from_static("Upgrade"));
        h.insert("sec-websocket-accept", HeaderValue::from_static("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
        assert_eq!(super::accepted(&h, Some(key)), Ok(0));
        assert!(super::accepted(&h, Some(b"another key AAAAAAAAAA==")).is_err(), "the accept of another key");
        assert!(super::accepted(&h, None).is_err());
        h.insert("sec-websocket-extensions", HeaderValue::from_static("permessage-deflate; client_max_window_bits"));
        assert_eq!(super::accepted(&h, Some(key)), Ok(0x40));
        h.insert("upgrade", HeaderValue::from_static("h2c"));
        assert!(super::accepted(&h, Some(key)).is_err());
    }
}
