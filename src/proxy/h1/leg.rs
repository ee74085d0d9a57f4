//! The exchange on one backend connection of roomgate's HTTP/1 path: connecting, the request's
//! head and body sent while the response head is awaited, the response relayed, and how it
//! failed when nothing reached the client (`exchange.rs` decides what to do about it).

use std::pin::pin;
use std::time::Duration;

use http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::body::{Relayed, SendError, Side, Upload, read_more, relay_body, send_body};
use super::pool::UpConn;
use crate::backends::Backend;
use crate::error::{BackendError, BodyProblem};
use crate::h1::{Framing, ResponseHead, parse_response};

/// Most bytes of a backend's response head.
const MAX_RESPONSE_HEAD: usize = 256 * 1024;

/// The request as the exchange needs it, beyond its head.
pub(super) struct Ask {
    pub(super) framing: Framing,
    pub(super) expect_continue: bool,
    pub(super) head_request: bool,
    pub(super) http10: bool,
    pub(super) keep_alive: bool,
    /// The method is idempotent (RFC 9110 section 9.2.2), so the request may be sent again
    /// when a reused connection closes before the answer.
    pub(super) idempotent: bool,
}

/// How the answer is written: re-chunked or not, and whether the client's connection closes.
pub(super) struct Plan {
    pub(super) chunked_out: bool,
    pub(super) close: bool,
}

/// An exchange that reached the client.
pub(super) struct Done {
    pub(super) status: StatusCode,
    pub(super) relayed: Relayed,
    /// The request body reached the backend whole (else neither connection is reused).
    pub(super) body_sent: bool,
    /// The backend's head lets its connection be reused.
    pub(super) reusable: bool,
    pub(super) close: bool,
    pub(super) sent: u64,
}

/// How an exchange on one backend connection failed, before anything reached the client.
pub(super) enum Failure {
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
    pub(super) fn into_backend(self, backend: &Backend, after: Duration) -> BackendError {
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

pub(super) type OnHead<'a> = dyn FnMut(&ResponseHead, bool, &mut Vec<u8>) -> Result<Plan, BackendError> + Send + 'a;

/// The whole exchange on one backend connection: the head written, the body sent while the
/// response head is awaited (a backend may answer before it has read the body), then the
/// response relayed while what is left of the body still goes up (an echo streams both ways).
/// The response timeout runs from the body's end. A body not sent whole leaves neither
/// connection reusable: the rest of it would be read as a request.
pub(super) async fn exchange_on<I>(
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
