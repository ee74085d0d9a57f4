//! One plain request on roomgate's HTTP/1 path: the steps every request takes (shared with
//! hyper's path), then the exchange with the backend driven in the request's own task (no
//! connection task, channel or oneshot), then the answer relayed.

use std::sync::Arc;
use std::time::Instant;

use http::header::{self, HeaderValue};
use http::{Method, StatusCode, Version};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use super::body::{Relayed, Side, Upload};
use super::forward;
use super::leg::{Ask, Done, Failure, Plan, connect_to, exchange_on};
use super::pool::UpConn;
use crate::backends::Backend;
use crate::directory::Use;
use crate::error::{BackendError, ClientError, ProxyError, respond};
use crate::h1::{Framing, RequestHead, ResponseHead, write};
use crate::limits::Holds;
use crate::metrics::RequestLabels;
use crate::proxy::upload::Deadlines;
use crate::proxy::{AccessRecord, Conn, Gateway, Prepared, Target, access_record, log_error};
use crate::snapshot::Snapshot;

/// What a request's client connection may do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Serve the next request.
    KeepAlive,
    Close,
}

impl Gateway {
    /// Serves one plain request whose head is `head` (its body, if any, follows in
    /// `client.buf`). Never fails: errors are answered here and logged once.
    pub(crate) async fn serve_h1<I>(
        self: &Arc<Self>,
        head: RequestHead,
        client: &mut Side<I>,
        conn: Conn,
        stop: &CancellationToken,
    ) -> Next
    where
        I: AsyncRead + AsyncWrite + Unpin,
    {
        let snap = self.snapshot.load();
        let mut record = access_record(&snap.config, conn.client, &head.method, head.uri.path());
        let ask = Ask {
            framing: head.framing,
            expect_continue: head.expect_continue,
            head_request: head.method == Method::HEAD,
            http10: head.version == Version::HTTP_10,
            keep_alive: head.keep_alive,
            idempotent: is_idempotent(&head.method),
        };
        let view = head.view();
        let (mut route, mut backend) = (self.none.clone(), self.none.clone());
        let prepared = self.prepare(&snap, &view, head.kind, conn, &mut record, &mut route, &mut backend).await;
        let result = match prepared {
            Ok(Prepared::Send { target, holds }) => {
                self.exchange(&snap, &head, &ask, &target, holds, client, conn, &mut record, stop).await
            }
            // Only a WebSocket handshake waits for its first message, and those are upgrade_h1's.
            Ok(Prepared::Djust { .. }) => Err(ClientError::NoRoute.into()),
            Err(e) => Err(e),
        };
        let (status, next) = match result {
            Ok(done) => done,
            Err(err) => {
                // A body not read to its end leaves the rest of the connection unreadable.
                let unread = ask.framing != Framing::Length(0);
                let next = write_error(client, &err, record.take(), conn, ask.keep_alive && !unread).await;
                (err.status(), next)
            }
        };
        if let Some(r) = record {
            r.emit(true);
        }
        self.metrics.request(&RequestLabels { route, status: status.as_u16(), backend });
        next
    }

    /// Sends the request to the target and relays the answer. `Err`: nothing was written to the
    /// client yet.
    #[allow(clippy::too_many_arguments)]
    async fn exchange<I>(
        &self,
        snap: &Snapshot,
        request: &RequestHead,
        ask: &Ask,
        target: &Target,
        holds: Holds,
        client: &mut Side<I>,
        conn: Conn,
        record: &mut Option<Box<AccessRecord>>,
        stop: &CancellationToken,
    ) -> Result<(StatusCode, Next), ProxyError>
    where
        I: AsyncRead + AsyncWrite + Unpin,
    {
        let config = &snap.config;
        let _presence = self.presence(target, Use::Request);
        let _holds = holds;
        let backend = &target.backend;
        let started = Instant::now();
        let head = forward::for_backend(request, conn, config, ask.framing, false);
        let t = &config.timeouts;
        let counted = record.as_ref().map(|r| r.bytes_in.clone());
        let upload = Upload {
            framing: ask.framing,
            deadlines: Deadlines { total: t.request_body, idle: t.request_body_idle },
            write_timeout: t.upstream_response,
            counted: counted.as_deref(),
        };
        let answering = Answering { gateway: self, snap, target, ask, stop, started };
        let mut on_head =
            |resp: &ResponseHead, body_sent: bool, out: &mut Vec<u8>| answering.head(resp, body_sent, out);
        let mut pooled = self.upstream.idle.take(backend.addr);
        let (up, done) = loop {
            let mut up = match pooled.take() {
                Some(up) => up,
                None => connect_to(backend, t.connect).await.inspect_err(|e| self.observe_failure(snap, backend, e))?,
            };
            let reused = up.reused;
            match exchange_on(&mut up, &head, ask, &upload, client, t.upstream_response, &mut on_head).await {
                Ok(done) => break (up, done),
                // A reused connection the backend closed as the request came may have carried
                // it: the backend may have acted on it before closing. Only a request that may
                // take effect twice is sent again (RFC 9110 section 9.2.2).
                Err(Failure::Stale) if reused && ask.idempotent && ask.framing == Framing::Length(0) => continue,
                // The pool's race with the backend's own keep-alive timeout, not a sign of a
                // broken backend: answered 502, not counted against its health.
                Err(Failure::Stale) if reused => {
                    return Err(Failure::Stale.into_backend(backend, t.upstream_response).into());
                }
                Err(Failure::Client(problem)) => return Err(ClientError::Body(problem).into()),
                Err(Failure::Refused(e)) => return Err(e.into()),
                Err(failure) => {
                    let e = failure.into_backend(backend, t.upstream_response);
                    self.observe_failure(snap, backend, &e);
                    return Err(e.into());
                }
            }
        };
        Ok((done.status, self.finish(&done, up, backend, record)))
    }

    /// Notes how an exchange that reached the client ended (its access line, written here, says
    /// `complete` only if the whole response reached the client), and gives its backend
    /// connection back to the pool when it may serve again. What the client's connection does
    /// next.
    fn finish(&self, done: &Done, mut up: UpConn, backend: &Backend, record: &mut Option<Box<AccessRecord>>) -> Next {
        let whole = done.relayed == Relayed::Whole;
        if let Some(mut r) = record.take() {
            r.status = done.status.as_u16();
            r.bytes_out = done.sent;
            match done.relayed {
                Relayed::BackendFailed(why) => r.error = Some(why.to_owned()),
                Relayed::ClientGone => r.error = Some("the client went away before the response's end".to_owned()),
                Relayed::Whole => {}
            }
            r.emit(whole);
        }
        if let Relayed::BackendFailed(why) = done.relayed {
            tracing::warn!(backend = %backend.id, why, "response body cut short; client connection closed");
        }
        if whole && done.body_sent && done.reusable {
            up.reused = false;
            self.upstream.idle.put(backend.addr, up);
        }
        if whole && done.body_sent && !done.close { Next::KeepAlive } else { Next::Close }
    }

    fn observe_failure(&self, snap: &Snapshot, backend: &Arc<Backend>, e: &BackendError) {
        self.observe_backend(snap, backend, Err(e), Instant::now());
    }
}

/// What writing a backend's head to the client needs.
struct Answering<'a> {
    gateway: &'a Gateway,
    snap: &'a Snapshot,
    target: &'a Target,
    ask: &'a Ask,
    stop: &'a CancellationToken,
    started: Instant,
}

impl Answering<'_> {
    /// The backend's head: checked (and its outcome counted for the backend's health), edited,
    /// and written to `out` before its body.
    fn head(&self, resp: &ResponseHead, body_sent: bool, out: &mut Vec<u8>) -> Result<Plan, BackendError> {
        let (ask, backend) = (self.ask, &self.target.backend);
        let answered = match resp.status {
            StatusCode::SWITCHING_PROTOCOLS => Err(BackendError::BadUpgrade {
                backend: backend.id.to_string(),
                why: "101 to a request that asked for no upgrade",
            }),
            _ => Ok(()),
        };
        self.gateway.observe_backend(self.snap, backend, answered.as_ref().map(|_| ()), self.started);
        answered?;
        let chunked_out = resp.framing == Framing::Chunked && !ask.http10;
        let close = !ask.keep_alive
            || !body_sent
            || self.stop.is_cancelled()
            || resp.framing == Framing::Close
            || (resp.framing == Framing::Chunked && ask.http10);
        let cookie = self.target.set_cookie.as_ref().map(|c| (&b"set-cookie"[..], c.as_bytes()));
        write::relayed_head(out, resp.status, resp.end_to_end(), cookie.as_slice(), chunked_out, close);
        Ok(Plan { chunked_out, close })
    }
}

/// GET, HEAD, OPTIONS, TRACE, PUT and DELETE: sending one twice has the effect of sending it
/// once (RFC 9110 section 9.2.2).
fn is_idempotent(method: &Method) -> bool {
    [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE, Method::PUT, Method::DELETE].contains(method)
}

/// Answers `err` (nothing was written for the request yet) and logs it. `keep`: the connection
/// may serve another request unless the error says otherwise.
pub(super) async fn write_error<I: AsyncRead + AsyncWrite + Unpin>(
    client: &mut Side<I>,
    err: &ProxyError,
    record: Option<Box<AccessRecord>>,
    conn: Conn,
    keep: bool,
) -> Next {
    let resp = respond(err);
    let close = !keep || resp.headers().contains_key(header::CONNECTION);
    let (parts, body) = resp.into_parts();
    let mut fields = parts.headers;
    fields.remove(header::CONNECTION);
    fields.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    write::response_head(&mut client.out, parts.status, &fields, false, close);
    client.out.extend_from_slice(&body);
    let written = client.flush().await;
    if let Some(r) = log_error(err, record, parts.status, conn.client) {
        r.emit(written.is_ok());
    }
    if close || written.is_err() { Next::Close } else { Next::KeepAlive }
}
