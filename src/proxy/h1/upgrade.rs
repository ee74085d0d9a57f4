//! WebSocket handshakes on roomgate's HTTP/1 path: the handshake written to the room's backend
//! on a connection of its own, its answer parsed here, and the tunnel started only on a 101 that
//! completes this handshake. Both sides' bytes read past the heads go into the tunnel first.
//! djust sockets (their room is in their first message) are answered here and routed by their
//! mount; every socket on a route with a `djust:` source, whichever source placed it, relays
//! with the page watch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Request, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::Instrument;

use super::body::{Relayed, Side, flush, read_more, relay_body};
use super::exchange::write_error;
use super::forward;
use super::leg::connect_to;
use super::pool::UpConn;
use super::rewind::Rewind;
use crate::backends::Backend;
use crate::directory::Use;
use crate::error::{BackendError, ClientError, ProxyError};
use crate::fields::Fields;
use crate::h1::{Framing, RequestHead, ResponseHead, parse_response, write};
use crate::limits::{ConnTicket, Holds};
use crate::metrics::RequestLabels;
use crate::proxy::djust::{self, Accepted};
use crate::proxy::upgrade::{TunnelSpec, accepted, hold, run};
use crate::proxy::{Conn, Gateway, Prepared, Target, access_record};
use crate::relay::watch::NavWatch;
use crate::snapshot::Snapshot;

/// Most bytes of a backend's answer to a handshake.
const MAX_HANDSHAKE_HEAD: usize = 64 * 1024;

impl Gateway {
    /// Serves a WebSocket handshake whose head is `head` (classified one by the codec): the
    /// tunnel runs in a task of its own, or the client is answered; either way the connection is
    /// no longer served here.
    pub(crate) async fn upgrade_h1<I>(
        self: &Arc<Self>,
        head: RequestHead,
        mut client: Side<I>,
        conn: Conn,
        ticket: ConnTicket,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let snap = self.snapshot.load();
        let mut record = access_record(&snap.config, conn.client, &head.method, head.uri.path());
        let (mut route, mut backend) = (self.none.clone(), self.none.clone());
        let view = head.view();
        let prepared = self.prepare(&snap, &view, head.kind, conn, &mut record, &mut route, &mut backend).await;
        // `whole`: the answer (a 101, or the backend's refusal) reached the client whole.
        let (status, whole) = match prepared {
            Ok(Prepared::Send { target, holds }) => {
                let holds = Holds { conn: Some(ticket), ..holds };
                match self.handshake(&snap, &head, &target, holds, client, conn).await {
                    Ok(answered) => answered,
                    Err((err, mut client)) => {
                        write_error(&mut client, &err, record.take(), conn, false).await;
                        (err.status(), true)
                    }
                }
            }
            Ok(Prepared::Djust { regex, on_missing, forwarded }) => {
                let holds = Holds { conn: Some(ticket), addr: forwarded, backend: None };
                match self.accept_djust(&snap, &head, regex, on_missing, holds, conn) {
                    Ok(accepted) => match write_101(&mut client, &accepted.response()).await {
                        Ok(()) => {
                            let rest = Bytes::copy_from_slice(&client.buf);
                            accepted.start(Rewind::new(rest, client.io));
                            (StatusCode::SWITCHING_PROTOCOLS, true)
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "client left during its handshake");
                            (StatusCode::SWITCHING_PROTOCOLS, false)
                        }
                    },
                    Err(err) => {
                        write_error(&mut client, &err, record.take(), conn, false).await;
                        (err.status(), true)
                    }
                }
            }
            Err(err) => {
                write_error(&mut client, &err, record.take(), conn, false).await;
                (err.status(), true)
            }
        };
        if let Some(mut r) = record {
            r.status = status.as_u16();
            r.emit(whole);
        }
        self.metrics.request(&RequestLabels { route, status: status.as_u16(), backend });
    }

    /// A djust socket: roomgate answers its handshake and reads its first message. The request
    /// the room's backend gets later is this head, as a header map built from its lines (the
    /// same bytes, not read again by another parser), with this hop's fields set.
    fn accept_djust(
        self: &Arc<Self>,
        snap: &Snapshot,
        head: &RequestHead,
        regex: regex::Regex,
        on_missing: crate::config::OnMissing,
        holds: Holds,
        conn: Conn,
    ) -> Result<Accepted, ProxyError> {
        let mut parts = parts_of(head)?;
        crate::proxy::prepare_forward(&mut parts, conn, &snap.config);
        djust::accept(self, parts, regex, on_missing, conn.client, holds)
    }

    /// Sends the handshake and answers the client: a tunnel on a valid 101, the backend's refusal
    /// as it came, or an error (with the client's side, to answer it). With the status, whether
    /// the answer reached the client whole.
    #[allow(clippy::too_many_arguments)]
    async fn handshake<I>(
        self: &Arc<Self>,
        snap: &Snapshot,
        head: &RequestHead,
        target: &Target,
        holds: Holds,
        mut client: Side<I>,
        conn: Conn,
    ) -> Result<(StatusCode, bool), (ProxyError, Side<I>)>
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let key = head.first("sec-websocket-key");
        let out = forward::for_backend(head, conn, &snap.config, Framing::Length(0), true);
        // A watched socket's frames are read, so they must not be compressed: no extension is
        // offered to its backend.
        let out = match target.watch {
            Some(_) => without_extensions(&out),
            None => out,
        };
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
            if rsv != 0 && target.watch.is_some() {
                let why = "its 101 accepts an extension never offered";
                return Err(BackendError::BadUpgrade { backend: backend.id.to_string(), why });
            }
            Ok((up, resp, Some(rsv)))
        });
        self.observe_backend(snap, backend, checked.as_ref().map(|_| ()), started);
        let (mut up, resp, rsv) = match checked {
            Ok(checked) => checked,
            Err(e) => return Err((e.into(), client)),
        };
        let cookie = target.set_cookie.as_ref().map(|c| (&b"set-cookie"[..], c.as_bytes()));
        let Some(rsv) = rsv else {
            let whole = relay_refusal(&mut up, &mut client, &resp, cookie, backend).await;
            return Ok((resp.status, whole));
        };
        // The 101 as the backend sent it (its Upgrade and Connection included), with the cookie.
        write::relayed_head(&mut client.out, resp.status, resp.fields(), cookie.as_slice(), false, false);
        if let Err(e) = flush(&mut client.io, &mut client.out).await {
            tracing::debug!(error = %e, "client left during its handshake");
            return Ok((resp.status, false));
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
        let watch = target.watch.clone().map(|regex| {
            let limit = snap.config.limits.max_first_message;
            NavWatch::new(regex, spec.room.as_deref(), limit, self.metrics.djust_counter("navigated"))
        });
        tokio::spawn(Box::pin(run(client_io, backend_io, held, spec, opts, watch).instrument(span)));
        Ok((resp.status, true))
    }
}

/// A backend's refusal of a handshake: relayed as it came, then the connection closes. Whether
/// it reached the client whole.
async fn relay_refusal<I: AsyncRead + AsyncWrite + Unpin>(
    up: &mut UpConn,
    client: &mut Side<I>,
    resp: &ResponseHead,
    cookie: Option<(&[u8], &[u8])>,
    backend: &Backend,
) -> bool {
    write::relayed_head(&mut client.out, resp.status, resp.end_to_end(), cookie.as_slice(), false, true);
    let mut sent = 0;
    let (rd, buf) = (&mut up.side.io, &mut up.side.buf);
    let relayed = relay_body(rd, buf, &mut client.io, &mut client.out, resp.framing, false, &mut sent).await;
    if relayed != Relayed::Whole {
        tracing::debug!(backend = %backend.id, ?relayed, "handshake refusal cut short");
    }
    let _ = client.io.shutdown().await;
    relayed == Relayed::Whole
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

/// Writes the 101 roomgate answers a djust handshake with.
async fn write_101<I: AsyncRead + AsyncWrite + Unpin>(client: &mut Side<I>, fields: &HeaderMap) -> std::io::Result<()> {
    write::response_head(&mut client.out, StatusCode::SWITCHING_PROTOCOLS, fields, false, false);
    client.flush().await
}

/// The client's request as a header map, from the lines the codec read: each name and value as
/// it came (both were checked as HTTP allows them, so neither fails here but by a bug, answered
/// with 400).
fn parts_of(head: &RequestHead) -> Result<Parts, ClientError> {
    let mut req = Request::new(());
    *req.method_mut() = head.method.clone();
    *req.uri_mut() = head.uri.clone();
    *req.version_mut() = head.version;
    let headers = req.headers_mut();
    for (name, value) in head.fields() {
        let name = HeaderName::from_bytes(name).map_err(|_| ClientError::BadHead("invalid header name"))?;
        let value = HeaderValue::from_bytes(value).map_err(|_| ClientError::BadHead("invalid header value"))?;
        headers.append(name, value);
    }
    Ok(req.into_parts().0)
}

/// A backend's handshake head less its `Sec-WebSocket-Extensions` lines.
fn without_extensions(head: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len());
    for line in head.split_inclusive(|&b| b == b'\n') {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        if !name.eq_ignore_ascii_case(b"sec-websocket-extensions") {
            out.extend_from_slice(line);
        }
    }
    out
}
