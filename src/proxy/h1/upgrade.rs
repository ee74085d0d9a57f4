//! WebSocket handshakes on roomgate's HTTP/1 path: the handshake written to the room's backend
//! on a connection of its own, its answer parsed here, and the tunnel started only on a 101 that
//! completes this handshake. Both sides' bytes read past the heads go into the tunnel first.
//! djust sockets (their room is in their first message) are served by hyper's path.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{StatusCode, Version};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::Instrument;

use super::body::{Relayed, Side, flush, read_more, relay_body};
use super::exchange::{connect_to, write_error};
use super::forward;
use super::pool::UpConn;
use super::rewind::Rewind;
use crate::backends::Backend;
use crate::directory::Use;
use crate::error::{BackendError, ProxyError};
use crate::fields::Fields;
use crate::h1::{Framing, RequestHead, ResponseHead, parse_response, write};
use crate::limits::{ConnTicket, Holds};
use crate::metrics::RequestLabels;
use crate::proxy::upgrade::{TunnelSpec, accepted, hold, run};
use crate::proxy::{Conn, Gateway, Prepared, Target, access_record};
use crate::snapshot::Snapshot;

/// Most bytes of a backend's answer to a handshake.
const MAX_HANDSHAKE_HEAD: usize = 64 * 1024;

/// What became of a handshake.
pub enum Upgraded<I> {
    /// The tunnel runs (or the handshake was answered): the connection is no longer served here.
    Done,
    /// Served by hyper's path (a djust socket): the connection, with its bytes, goes there.
    Hyper(Box<(Side<I>, RequestHead)>),
}

impl Gateway {
    /// Serves a WebSocket handshake whose head is `head`.
    pub(crate) async fn upgrade_h1<I>(
        self: &Arc<Self>,
        head: RequestHead,
        mut client: Side<I>,
        conn: Conn,
        ticket: ConnTicket,
    ) -> Upgraded<I>
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let snap = self.snapshot.load();
        let mut record = access_record(&snap.config, conn.client, &head.method, head.uri.path());
        let (mut route, mut backend) = (self.none.clone(), self.none.clone());
        let view = head.view();
        let (target, holds) = match self.prepare(&snap, &view, conn, &mut record, &mut route, &mut backend).await {
            Ok(Prepared::Send { target, holds }) => (target, holds),
            Ok(Prepared::Djust { .. }) => return Upgraded::Hyper(Box::new((client, head))),
            Err(err) => {
                let status = err.status();
                write_error(&mut client, &err, record.take(), conn, false).await;
                self.metrics.request(&RequestLabels { route, status: status.as_u16(), backend });
                return Upgraded::Done;
            }
        };
        let holds = Holds { conn: Some(ticket), ..holds };
        let status = match self.handshake(&snap, &head, &target, holds, client, conn).await {
            Ok(status) => status,
            Err((err, mut client)) => {
                let status = err.status();
                let log = record.take();
                write_error(&mut client, &err, log, conn, false).await;
                status
            }
        };
        if let Some(r) = record.as_mut() {
            r.status = status.as_u16();
        }
        if let Some(r) = record {
            r.emit(true);
        }
        self.metrics.request(&RequestLabels { route, status: status.as_u16(), backend });
        Upgraded::Done
    }

    /// Sends the handshake and answers the client: a tunnel on a valid 101, the backend's refusal
    /// as it came, or an error (with the client's side, to answer it).
    #[allow(clippy::too_many_arguments)]
    async fn handshake<I>(
        self: &Arc<Self>,
        snap: &Snapshot,
        head: &RequestHead,
        target: &Target,
        holds: Holds,
        mut client: Side<I>,
        conn: Conn,
    ) -> Result<StatusCode, (ProxyError, Side<I>)>
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let key = head.first("sec-websocket-key");
        let out = forward::for_backend(head, conn, &snap.config, Framing::Length(0), true);
        let backend = &target.backend;
        let t = &snap.config.timeouts;
        // Counted in its room while on its way (a move waits for it), until its socket is.
        let handshake_presence = self.presence(target, Use::Request);
        let started = Instant::now();
        let answer = send_handshake(backend, &out, t.connect);
        let answered = match tokio::time::timeout(t.upstream_response, answer).await {
            Ok(answered) => answered,
            Err(_) => Err(BackendError::Timeout { backend: backend.id.to_string(), after: t.upstream_response }),
        };
        let checked = answered.and_then(|(up, resp)| {
            if resp.status != StatusCode::SWITCHING_PROTOCOLS {
                return Ok((up, resp, None));
            }
            let rsv = accepted(&resp, key)
                .map_err(|why| BackendError::BadUpgrade { backend: backend.id.to_string(), why })?;
            Ok((up, resp, Some(rsv)))
        });
        self.observe_backend(snap, backend, checked.as_ref().map(|_| ()), started);
        let (mut up, resp, rsv) = match checked {
            Ok(checked) => checked,
            Err(e) => return Err((e.into(), client)),
        };
        let cookie = target.set_cookie.as_ref().map(|c| (&b"set-cookie"[..], c.as_bytes()));
        let Some(rsv) = rsv else {
            relay_refusal(&mut up, &mut client, &resp, cookie, backend).await;
            return Ok(resp.status);
        };
        // The 101 as the backend sent it (its Upgrade and Connection included), with the cookie.
        write::relayed_head(&mut client.out, resp.status, resp.fields(), cookie.as_slice(), false, false);
        if let Err(e) = flush(&mut client.io, &mut client.out).await {
            tracing::debug!(error = %e, "client left during its handshake");
            return Ok(resp.status);
        }
        let spec = TunnelSpec { client: conn.client, room: target.room.clone(), backend: backend.clone(), holds };
        let held = hold(self, &spec).await;
        drop(handshake_presence);
        let opts = self.tunnel_options(rsv);
        let span = tracing::info_span!("tunnel", room = spec.room.as_deref(), backend = %spec.backend.id);
        // Copied out of the connections' buffers, so that an idle tunnel keeps neither.
        let client_io = Rewind::new(Bytes::copy_from_slice(&client.buf), client.io);
        let backend_io = Rewind::new(Bytes::copy_from_slice(&up.side.buf), up.side.io);
        // Boxed, as connections are (`server`): the task moves a pointer, not the tunnel's state.
        tokio::spawn(Box::pin(run(client_io, backend_io, held, spec, opts, None).instrument(span)));
        Ok(resp.status)
    }
}

/// A backend's refusal of a handshake: relayed as it came, then the connection closes.
async fn relay_refusal<I: AsyncRead + AsyncWrite + Unpin>(
    up: &mut UpConn,
    client: &mut Side<I>,
    resp: &ResponseHead,
    cookie: Option<(&[u8], &[u8])>,
    backend: &Backend,
) {
    write::relayed_head(&mut client.out, resp.status, resp.end_to_end(), cookie.as_slice(), false, true);
    let mut sent = 0;
    let (rd, buf) = (&mut up.side.io, &mut up.side.buf);
    let relayed = relay_body(rd, buf, &mut client.io, &mut client.out, resp.framing, false, &mut sent).await;
    if relayed != Relayed::Whole {
        tracing::debug!(backend = %backend.id, "handshake refusal cut short");
    }
    let _ = client.io.shutdown().await;
}

/// Opens a connection of its own to the backend, sends it the handshake's head `out` and reads
/// its answer's head (interim answers other than a 101 skipped).
async fn send_handshake(
    backend: &Backend,
    out: &[u8],
    connect: Duration,
) -> Result<(UpConn, ResponseHead), BackendError> {
    let mut up = connect_to(backend, connect).await?;
    let failed = |source: Box<dyn std::error::Error + Send + Sync>| BackendError::Failed {
        backend: backend.id.to_string(),
        source,
    };
    up.side.io.write_all(out).await.map_err(|e| failed(Box::new(e)))?;
    loop {
        if let Some(resp) =
            parse_response(&mut up.side.buf, MAX_HANDSHAKE_HEAD, false).map_err(|e| failed(e.reason().into()))?
        {
            if resp.status.is_informational() && resp.status != StatusCode::SWITCHING_PROTOCOLS {
                continue;
            }
            return Ok((up, resp));
        }
        match read_more(&mut up.side.io, &mut up.side.buf).await {
            Ok(0) => return Err(failed(Box::new(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)))),
            Ok(_) => {}
            Err(e) => return Err(failed(Box::new(e))),
        }
    }
}

/// Whether a handshake is served on this path: an HTTP/1.1 one that is not a `CONNECT` (those,
/// and HTTP/1.0 ones, are hyper's to answer, as before).
pub fn is_ours(head: &RequestHead) -> bool {
    head.version == Version::HTTP_11 && head.method != http::Method::CONNECT
}
