//! One plain request on roomgate's HTTP/1 path: the steps every request takes (shared with
//! hyper's path), then the exchange with the backend driven in the request's own task (no
//! connection task, channel or oneshot), then the answer relayed.

use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{self, HeaderValue};
use http::{Method, StatusCode, Version};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::body::{Relayed, SendError, Side, Upload, read_more, relay_body, send_body};
use super::forward;
use super::pool::UpConn;
use crate::backends::Backend;
use crate::directory::Use;
use crate::error::{BackendError, BodyProblem, ClientError, ProxyError, respond};
use crate::h1::{Framing, RequestHead, ResponseHead, parse_response, write};
use crate::limits::Holds;
use crate::metrics::RequestLabels;
use crate::proxy::upload::Deadlines;
use crate::proxy::{AccessRecord, Conn, Gateway, Prepared, Target, access_record, log_error};
use crate::snapshot::Snapshot;

/// Most bytes of a backend's response head.
const MAX_RESPONSE_HEAD: usize = 256 * 1024;

/// What a request's client connection may do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Serve the next request.
    KeepAlive,
    Close,
}

/// The request as the exchange needs it, beyond its head.
struct Ask {
    framing: Framing,
    expect_continue: bool,
    head_request: bool,
    http10: bool,
    keep_alive: bool,
    /// The method is idempotent (RFC 9110 section 9.2.2), so the request may be sent again
    /// when a reused connection closes before the answer.
    idempotent: bool,
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

/// How the answer is written: re-chunked or not, and whether the client's connection closes.
struct Plan {
    chunked_out: bool,
    close: bool,
}

/// An exchange that reached the client.
struct Done {
    status: StatusCode,
    relayed: Relayed,
    /// The request body reached the backend whole (else neither connection is reused).
    body_sent: bool,
    /// The backend's head lets its connection be reused.
    reusable: bool,
    close: bool,
    sent: u64,
}

/// How an exchange on one backend connection failed, before anything reached the client.
enum Failure {
    Client(BodyProblem),
    /// The connection ended before a byte of the response came.
    Stale,
    Io(std::io::Error),
    BadHead(&'static str),
    Timeout,
    /// The head is one roomgate does not relay.
    Refused(BackendError),
}

impl Failure {
    fn into_backend(self, backend: &Backend, after: Duration) -> BackendError {
        let id = backend.id.to_string();
        match self {
            Failure::Timeout => BackendError::Timeout { backend: id, after },
            Failure::Stale => {
                BackendError::Failed { backend: id, source: "connection closed before a response".into() }
            }
            Failure::Io(e) => BackendError::Failed { backend: id, source: Box::new(e) },
            Failure::BadHead(why) => BackendError::Failed { backend: id, source: why.into() },
            Failure::Refused(e) => e,
            Failure::Client(_) => BackendError::Failed { backend: id, source: "the client failed".into() },
        }
    }
}

pub(super) async fn connect_to(backend: &Backend, within: Duration) -> Result<UpConn, BackendError> {
    let failed = |source: Box<dyn std::error::Error + Send + Sync>| BackendError::Connect {
        backend: backend.id.to_string(),
        source,
    };
    let stream = match tokio::time::timeout(within, TcpStream::connect(backend.addr)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err(failed(Box::new(e))),
        Err(_) => return Err(failed(format!("no connection within {within:?}").into())),
    };
    let _ = stream.set_nodelay(true);
    Ok(UpConn { side: Side::new(stream, &[]), reused: false })
}

type OnHead<'a> = dyn FnMut(&ResponseHead, bool, &mut Vec<u8>) -> Result<Plan, BackendError> + Send + 'a;

/// The whole exchange on one backend connection: the head written, the body sent while the
/// response head is awaited (a backend may answer before it has read the body), then the
/// response relayed while what is left of the body still goes up (an echo streams both ways).
/// The response timeout runs from the body's end. A body not sent whole leaves neither
/// connection reusable: the rest of it would be read as a request.
async fn exchange_on<I>(
    up: &mut UpConn,
    head: &[u8],
    ask: &Ask,
    upload: &Upload<'_>,
    client: &mut Side<I>,
    answer_within: Duration,
    on_head: &mut OnHead<'_>,
) -> Result<Done, Failure>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let Side { io: uio, buf: ubuf, .. } = &mut up.side;
    tokio::time::timeout(answer_within, uio.write_all(head))
        .await
        .map_err(|_| Failure::Timeout)?
        .map_err(|_| Failure::Stale)?;
    let (mut urd, mut uwr) = uio.split();
    if ask.framing == Framing::Length(0) {
        return exchange_bodiless(&mut urd, ubuf, ask, client, answer_within, on_head).await;
    }
    if ask.expect_continue && client.buf.is_empty() {
        continue_body(client).await?;
    }
    let Side { io: cio, buf: cbuf, out } = client;
    let (mut crd, mut cwr) = tokio::io::split(cio);
    let mut send = pin!(send_body(&mut crd, cbuf, &mut uwr, upload));
    // The body's fate: `None` while it is on its way, then whether it went whole.
    let mut body: Option<bool> = None;
    let resp = {
        let mut recv = pin!(read_response(&mut urd, ubuf, ask.head_request));
        let mut deadline = pin!(tokio::time::sleep(answer_within));
        loop {
            tokio::select! {
                biased;
                resp = &mut recv => break resp?,
                result = &mut send, if body.is_none() => {
                    match result {
                        Ok(()) => body = Some(true),
                        Err(SendError::Client(problem)) => return Err(Failure::Client(problem)),
                        // It may have answered already and stopped reading: see what it says.
                        Err(SendError::Backend) => body = Some(false),
                    }
                    deadline.as_mut().reset(tokio::time::Instant::now() + answer_within);
                }
                () = &mut deadline, if body.is_some() => return Err(Failure::Timeout),
            }
        }
    };
    let plan = on_head(&resp, body == Some(true) || body.is_none(), out).map_err(Failure::Refused)?;
    let mut sent = 0;
    let relayed = {
        let mut relay = pin!(relay_body(&mut urd, ubuf, &mut cwr, out, resp.framing, plan.chunked_out, &mut sent));
        loop {
            tokio::select! {
                biased;
                relayed = &mut relay => break relayed,
                result = &mut send, if body.is_none() => body = Some(result.is_ok()),
            }
        }
    };
    Ok(done(&resp, plan, relayed, body == Some(true), sent))
}

/// GET, HEAD, OPTIONS, TRACE, PUT and DELETE: sending one twice has the effect of sending it
/// once (RFC 9110 section 9.2.2).
fn is_idempotent(method: &Method) -> bool {
    [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE, Method::PUT, Method::DELETE].contains(method)
}

/// Tells a client that waits for a word before it sends its body to go on (`Expect:
/// 100-continue`; hyper's server said it too).
async fn continue_body<I: AsyncRead + AsyncWrite + Unpin>(client: &mut Side<I>) -> Result<(), Failure> {
    client.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
    client.flush().await.map_err(|_| Failure::Client(BodyProblem::Incomplete))
}

/// [`exchange_on`] for a request without a body: the response head, then its body.
async fn exchange_bodiless<R, I>(
    urd: &mut R,
    ubuf: &mut bytes::BytesMut,
    ask: &Ask,
    client: &mut Side<I>,
    answer_within: Duration,
    on_head: &mut OnHead<'_>,
) -> Result<Done, Failure>
where
    R: AsyncRead + Unpin,
    I: AsyncRead + AsyncWrite + Unpin,
{
    let read = tokio::time::timeout(answer_within, read_response(urd, ubuf, ask.head_request)).await;
    let resp = read.map_err(|_| Failure::Timeout)??;
    let plan = on_head(&resp, true, &mut client.out).map_err(Failure::Refused)?;
    let mut sent = 0;
    let relayed =
        relay_body(urd, ubuf, &mut client.io, &mut client.out, resp.framing, plan.chunked_out, &mut sent).await;
    Ok(done(&resp, plan, relayed, true, sent))
}

fn done(resp: &ResponseHead, plan: Plan, relayed: Relayed, body_sent: bool, sent: u64) -> Done {
    Done {
        status: resp.status,
        relayed,
        body_sent,
        reusable: resp.keep_alive && resp.framing != Framing::Close,
        close: plan.close || !body_sent,
        sent,
    }
}

/// Reads the response head, skipping interim (1xx) responses other than a 101.
async fn read_response<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut bytes::BytesMut,
    head_request: bool,
) -> Result<ResponseHead, Failure> {
    let mut any = false;
    loop {
        if !buf.is_empty() {
            any = true;
            match parse_response(buf, MAX_RESPONSE_HEAD, head_request) {
                Ok(Some(h)) if h.status.is_informational() && h.status != StatusCode::SWITCHING_PROTOCOLS => continue,
                Ok(Some(h)) => return Ok(h),
                Ok(None) => {}
                Err(e) => return Err(Failure::BadHead(e.reason())),
            }
        }
        match read_more(rd, buf).await {
            Ok(0) if !any => return Err(Failure::Stale),
            Ok(0) => return Err(Failure::BadHead("the backend closed the connection within the response head")),
            Err(e) if !any => {
                return Err(if e.kind() == std::io::ErrorKind::ConnectionReset {
                    Failure::Stale
                } else {
                    Failure::Io(e)
                });
            }
            Err(e) => return Err(Failure::Io(e)),
            Ok(_) => {}
        }
    }
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
