//! A djust socket, routed by its first message: roomgate answers the handshake itself, greets the
//! client with djust's `connect` frame, reads the `mount` frame to learn the page (and so the
//! room), opens the WebSocket to the room's owner with the client's headers, drops that backend's
//! own greeting, forwards the `mount`, and relays both ways with the page watch
//! ([`crate::relay::watch`]), which keeps every later page change in the room.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use regex::Regex;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tracing::Instrument;

mod backend;

use self::backend::{Upgraded, greeting_skipped};
use super::Gateway;
use super::upgrade::{self, TunnelSpec};
use crate::backends::Backend;
use crate::config::{Config, OnMissing};
use crate::directory::{Presence, Use};
use crate::djust::{self, Effect};
use crate::error::{BackendError, ClientError, LimitError, ProxyError, close_code_for};
use crate::limits::{self, Holds};
use crate::relay::frame::{OP_BINARY, OP_TEXT, Rules, close_frame, frame};
use crate::relay::message::{self, ReadError, Rewind};
use crate::relay::watch::NavWatch;
use crate::room_key;
use crate::snapshot::Snapshot;
use crate::throttle::Throttle;

/// A socket ready to relay: routed, the backend's socket open with the mount sent, and the bytes
/// each side sent beyond what was read.
struct Ready {
    routed: Routed,
    backend_io: Upgraded,
    client_pre: Vec<u8>,
    backend_pre: Vec<u8>,
    /// The handshake counted in its room until the socket is: a move meanwhile waits for it.
    handshake: Option<Presence>,
}

/// How a first message routes the socket.
struct Routed {
    room: Option<String>,
    backend: Arc<Backend>,
}

/// A djust handshake roomgate answers itself: the 101 for the client, and the session that then
/// runs on the client's socket.
pub struct Accepted {
    accept: HeaderValue,
    session: Session,
}

/// Accepts the client's handshake (its head already classified a WebSocket handshake by
/// [`crate::handshake::classify`]). `parts` holds the client's request with hop-by-hop headers
/// removed and forwarding headers set: what the room's backend gets once the mount names it.
pub fn accept(
    gateway: &Arc<Gateway>,
    parts: Parts,
    regex: Regex,
    on_missing: OnMissing,
    client: SocketAddr,
    holds: Holds,
) -> Result<Accepted, ProxyError> {
    let h = &parts.headers;
    if h.get(header::SEC_WEBSOCKET_VERSION).is_none_or(|v| v.as_bytes() != b"13") {
        return Err(ClientError::BadHandshake("Sec-WebSocket-Version must be 13").into());
    }
    let key = h.get(header::SEC_WEBSOCKET_KEY).ok_or(ClientError::BadHandshake("no Sec-WebSocket-Key"))?;
    if !crate::handshake::is_handshake_key(key.as_bytes()) {
        return Err(ClientError::BadHandshake("Sec-WebSocket-Key is not 16 bytes in base64").into());
    }
    let accept = HeaderValue::try_from(derive_accept_key(key.as_bytes()))
        .map_err(|_| ClientError::BadHandshake("unusable Sec-WebSocket-Key"))?;
    let waiting = Waiting::enter(gateway)?;
    let session = Session { gateway: gateway.clone(), parts, regex, on_missing, client, waiting: Some(waiting), holds };
    Ok(Accepted { accept, session })
}

impl Accepted {
    /// The 101 that answers the handshake.
    pub fn response(&self) -> HeaderMap {
        let mut h = HeaderMap::with_capacity(3);
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::SEC_WEBSOCKET_ACCEPT, self.accept.clone());
        h
    }

    /// Runs the session on the client's socket (the 101 sent), in a task of its own.
    pub fn start<C: AsyncRead + AsyncWrite + Unpin + Send + 'static>(self, client_io: C) {
        let span = tracing::info_span!("djust", client = %self.session.client, room = tracing::field::Empty);
        tokio::spawn(self.session.run(client_io).instrument(span));
    }
}

/// A djust socket waiting for its first message, counted against `limits.max_pending_sockets`:
/// each one holds a task and a connection until its mount arrives or `timeouts.first_message`
/// ends it. The bytes its first message holds meanwhile are counted against
/// `limits.max_pending_bytes`, shared by all of them.
struct Waiting {
    gateway: Arc<Gateway>,
    /// Bytes this socket was granted.
    charged: usize,
}

impl Waiting {
    fn enter(gateway: &Arc<Gateway>) -> Result<Waiting, LimitError> {
        let max = gateway.snapshot().config.limits.max_pending_sockets;
        if gateway.waiting_sockets.fetch_add(1, Ordering::AcqRel) >= max {
            gateway.waiting_sockets.fetch_sub(1, Ordering::AcqRel);
            return Err(refused_waiting(gateway, "limits.max_pending_sockets", max));
        }
        let waiting = Waiting { gateway: gateway.clone(), charged: 0 };
        // Refused before the 101 too when the others hold every byte already.
        let max_bytes = max_pending_bytes(gateway);
        if gateway.pending_bytes.load(Ordering::Acquire) >= max_bytes {
            return Err(refused_waiting(gateway, "limits.max_pending_bytes", max_bytes));
        }
        Ok(waiting)
    }
}

/// `limits.max_pending_bytes`, `"auto"` resolved.
fn max_pending_bytes(gateway: &Gateway) -> usize {
    let limits = &gateway.snapshot().config.limits;
    let auto = || {
        crate::limits::memory::auto_pending_bytes(crate::limits::memory::cgroup_limit_once(), limits.max_first_message)
    };
    limits.max_pending_bytes.unwrap_or_else(auto)
}

/// Counts and logs (throttled) a djust socket refused by `limit`.
fn refused_waiting(gateway: &Gateway, limit: &'static str, max: usize) -> LimitError {
    static LOG: Throttle = Throttle::new(Duration::from_secs(1));
    gateway.metrics.refused(limit);
    if let Some(more) = LOG.ready() {
        tracing::warn!(
            limit,
            max,
            refused_since_last_line = more,
            "djust socket refused: too much waiting for first messages"
        );
    }
    LimitError { limit, max }
}

impl message::Allowance for Waiting {
    fn grow(&mut self, bytes: usize) -> bool {
        let max = max_pending_bytes(&self.gateway);
        let before = self.gateway.pending_bytes.fetch_add(bytes, Ordering::AcqRel);
        if before + bytes > max {
            self.gateway.pending_bytes.fetch_sub(bytes, Ordering::AcqRel);
            return false;
        }
        self.charged += bytes;
        true
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.gateway.waiting_sockets.fetch_sub(1, Ordering::AcqRel);
        self.gateway.pending_bytes.fetch_sub(self.charged, Ordering::AcqRel);
    }
}

struct Session {
    gateway: Arc<Gateway>,
    parts: Parts,
    regex: Regex,
    on_missing: OnMissing,
    client: SocketAddr,
    /// Until the first message is read.
    waiting: Option<Waiting>,
    /// Its client connection and forwarded client; its backend slot once routed.
    holds: Holds,
}

impl Session {
    async fn run<C: AsyncRead + AsyncWrite + Unpin + Send + 'static>(mut self, mut client_io: C) {
        // Registered while it is being routed, so that a shutdown reaches it too.
        let pending = self.gateway.tunnels.register(None, self.gateway.none.clone());
        let ready = tokio::select! {
            ready = self.prepare(&mut client_io) => ready,
            request = pending.handle().close_requested() => {
                return close(&mut client_io, request.code(), request.reason()).await;
            }
        };
        let Some(Ready { routed, backend_io, client_pre, backend_pre, handshake }) = ready else { return };
        let room = routed.room.as_deref();
        let metrics = &self.gateway.metrics;
        metrics.djust(if room.is_some() { "room" } else { "shared" });
        let holds = std::mem::take(&mut self.holds);
        let spec =
            TunnelSpec { client: self.client, room: routed.room.clone(), backend: routed.backend.clone(), holds };
        let held = upgrade::hold(&self.gateway, &spec).await;
        drop(handshake);
        drop(pending);
        let limit = self.gateway.snapshot().config.limits.max_first_message;
        let watch = NavWatch::new(self.regex.clone(), room, limit, metrics.djust_counter("navigated"));
        // Extensions were not offered to the backend: no RSV bit is allowed either way.
        let opts = self.gateway.tunnel_options(0);
        let client_io = Rewind::new(client_io, client_pre);
        let backend_io = Rewind::new(backend_io, backend_pre);
        // The relay gets a task of its own; this one, with the routing state, ends here.
        tokio::spawn(upgrade::run(client_io, backend_io, held, spec, opts, Some(watch)).in_current_span());
    }

    /// Greets the client, reads its mount, routes it and opens the backend's socket, with the
    /// mount sent on. `None`: the client was refused (and told why) or left.
    async fn prepare<C: AsyncRead + AsyncWrite + Unpin>(&mut self, client_io: &mut C) -> Option<Ready> {
        let snap = self.gateway.snapshot();
        let (mount, client_pre) = self.read_mount(client_io, &snap.config).await?;
        // No longer waiting: what follows is bounded by the backend's timeouts.
        self.waiting = None;
        let started = Instant::now();
        let routed = match self.route(&snap, &mount).await {
            Ok(routed) => routed,
            Err(e) => return self.refuse(client_io, &e, None).await,
        };
        tracing::Span::current().record("room", routed.room.as_deref());
        let (backend_io, backend_pre, handshake) = self.connect(client_io, &snap, &routed, &mount, started).await?;
        Some(Ready { routed, backend_io, client_pre, backend_pre, handshake })
    }

    /// Sends djust's greeting and reads the client's first message, with the bytes read. `None`:
    /// the client was refused (too large, too late, a broken frame) or left.
    async fn read_mount<C: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        client_io: &mut C,
        config: &Config,
    ) -> Option<(message::Message, Vec<u8>)> {
        let greeting = djust::connect_message(&djust::session_id());
        client_io.write_all(&frame(OP_TEXT, greeting.as_bytes(), None)).await.ok()?;
        let limit = config.limits.max_first_message;
        let wait = config.timeouts.first_message;
        let mut client_pre = Vec::new();
        let mut unbounded = message::Unbounded;
        let allowance: &mut (dyn message::Allowance + Send) = match self.waiting.as_mut() {
            Some(waiting) => waiting,
            None => &mut unbounded,
        };
        let read = message::read_message(client_io, &mut client_pre, limit, Rules::CLIENT, allowance);
        let read = tokio::time::timeout(wait, read).await;
        match read {
            Ok(Ok(mount)) => Some((mount, client_pre)),
            Ok(Err(ReadError::TooLarge(limit))) => {
                self.refuse(client_io, &ClientError::FirstMessageTooLarge(limit).into(), None).await
            }
            Ok(Err(ReadError::Busy)) => {
                let max = max_pending_bytes(&self.gateway);
                let err = refused_waiting(&self.gateway, "limits.max_pending_bytes", max);
                self.refuse(client_io, &err.into(), None).await
            }
            Ok(Err(ReadError::Frame(e))) => {
                tracing::info!(error = %e, "djust socket refused: a broken frame (close 1002)");
                self.gateway.metrics.djust("refused");
                close(client_io, 1002, "protocol error").await;
                None
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "client left before its first message");
                None
            }
            Err(_) => self.refuse(client_io, &ClientError::FirstMessageTimeout(wait).into(), None).await,
        }
    }

    /// Opens the routed backend's socket and sends it the mount: the backend's socket, the bytes
    /// read past its greeting, and the handshake's presence in its room. `None`: refused.
    async fn connect<C: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        client_io: &mut C,
        snap: &Snapshot,
        routed: &Routed,
        mount: &message::Message,
        started: Instant,
    ) -> Option<(Upgraded, Vec<u8>, Option<Presence>)> {
        let config = &snap.config;
        let room = routed.room.as_deref();
        let backend = &*routed.backend.id;
        // Its room's backend at its cap: 4503, like a 503.
        match routed.backend.claim(config.upstream.max_connections_per_backend) {
            Ok(slot) => self.holds.backend = Some(slot),
            Err(e) => {
                let err = limits::refused(&self.gateway.metrics, e, &backend);
                return self.refuse(client_io, &err.into(), room).await;
            }
        }
        // Counted in its room while it is on its way (a move waits for it), until its socket is.
        let handshake =
            room.map(|r| Presence::new(self.gateway.directory.clone(), r, routed.backend.id.clone(), Use::Request));
        let opened = self.open(config, &routed.backend).await;
        self.gateway.observe_backend(snap, &routed.backend, opened.as_ref().map(|_| ()), started);
        let mut backend_io = match opened {
            Ok(Ok(io)) => io,
            Ok(Err(status)) => {
                let code = close_code_for(status);
                tracing::warn!(
                    room,
                    backend,
                    status = status.as_u16(),
                    close_code = code,
                    "backend refused the djust handshake"
                );
                close(client_io, code, &format!("backend answered {status}")).await;
                return None;
            }
            Err(e) => return self.refuse(client_io, &e.into(), room).await,
        };
        let backend_pre = match greeting_skipped(&mut backend_io, config).await {
            Ok(pre) => pre,
            Err(code) => {
                tracing::warn!(room, backend, close_code = code, "backend refused the socket after its 101");
                self.gateway.metrics.djust("backend_refused");
                close(client_io, code, "refused by the backend").await;
                return None;
            }
        };
        if backend_io.write_all(&mount.raw).await.is_err() {
            let err = BackendError::Failed {
                backend: backend.to_owned(),
                source: "connection lost before the mount frame was sent".into(),
            };
            return self.refuse(client_io, &err.into(), room).await;
        }
        Some((backend_io, backend_pre, handshake))
    }

    /// The room of the page the first message mounts, and its owner; the shared pool for a page
    /// without a room when the route allows it. A first message that may mount a page but cannot
    /// be read exactly as djust reads it, or that mounts pages of two rooms, is refused (4400):
    /// sending it to the shared pool could mount a room there.
    async fn route(&self, snap: &Snapshot, first: &message::Message) -> Result<Routed, ProxyError> {
        let effect = match first.opcode {
            OP_BINARY => djust::binary_effect(&first.payload),
            _ => djust::text_effect(&first.payload),
        };
        let room = match effect {
            Effect::Pages(pages) => djust::room_of_pages(&self.regex, &pages).map_err(|e| match e {
                djust::PagesError::BadKey(page, why) => ClientError::BadKey(room_key::KeyError {
                    source_desc: format!("djust:{} (page {page:?})", self.regex),
                    why,
                }),
                djust::PagesError::TwoRooms => {
                    ClientError::Ambiguous("the first message mounts pages of two rooms".into())
                }
                e @ djust::PagesError::ParamsRoom { .. } => ClientError::Ambiguous(e.to_string()),
            })?,
            Effect::Unreadable(why) => return Err(ClientError::Ambiguous(format!("first message: {why}")).into()),
            Effect::None => {
                tracing::debug!("first message mounts no page");
                None
            }
        };
        match room {
            Some(room) => {
                let backend = self.gateway.owner(snap, &room, true).await?;
                Ok(Routed { room: Some(room), backend })
            }
            None if self.on_missing == OnMissing::Shared => {
                let backend = snap.next_shared().ok_or(BackendError::NoBackends)?.clone();
                Ok(Routed { room: None, backend })
            }
            None => Err(ClientError::MissingKey {
                prefix: self.parts.uri.path().to_owned(),
                sources: format!("djust:{}", self.regex),
            }
            .into()),
        }
    }

    /// Closes the client's socket with the code for `err` and logs why. Always `None`.
    async fn refuse<C: AsyncWrite + Unpin, T>(
        &self,
        client_io: &mut C,
        err: &ProxyError,
        room: Option<&str>,
    ) -> Option<T> {
        let code = err.close_code();
        self.gateway.metrics.djust("refused");
        match err {
            ProxyError::Backend(_) => {
                tracing::warn!(room, close_code = code, error = %err.detail(), "djust socket failed")
            }
            ProxyError::Client(_) | ProxyError::Limit(_) => {
                tracing::info!(room, close_code = code, error = %err.detail(), "djust socket refused")
            }
        }
        close(client_io, code, &err.public_message()).await;
        None
    }
}

/// Sends the client a close frame and ends the stream (no reply is awaited: nothing follows).
async fn close<C: AsyncWrite + Unpin>(client_io: &mut C, code: u16, reason: &str) {
    let _ = client_io.write_all(&close_frame(code, reason, None)).await;
    let _ = client_io.shutdown().await;
}
