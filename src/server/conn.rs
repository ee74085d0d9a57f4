//! One client connection: its protocol (ALPN on a TLS listener; on a plain one, the HTTP/2
//! prior-knowledge preface or not), then HTTP/1.1 with upgrades or HTTP/2 until the client
//! leaves, the connection idles out, or shutdown closes it gracefully (HTTP/2: GOAWAY).
//!
//! hyper-util's `auto` builder would pick the protocol too, but it waits for the first bytes
//! with no timeout (a client that connects and sends nothing would be held forever), so the
//! choice is made here, under `timeouts.request_head`, and hyper's own builders serve.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::write_timeout::WriteTimeout;
use crate::config::Config;
use crate::error::{ProxyError, respond};
use crate::limits::{self, ConnTicket, HeldBody, hold_body, hold_stream};
use crate::proxy::h1::{self, Rewind};
use crate::proxy::{Conn, Gateway, ResponseBody, Scheme};

/// The HTTP/2 connection preface a client with prior knowledge opens with (h2c).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Most concurrent streams a client may open on one HTTP/2 connection, advertised in SETTINGS;
/// a stream past it is reset with REFUSED_STREAM. 100: the least RFC 9113 (section 5.1.2)
/// recommends, so that parallelism is not held back, and HAProxy's default (nginx's is 128).
/// Browsers rarely have more in flight to one origin; every stream may hold a backend
/// connection and up to [`MAX_SEND_BUF`] of response, so fewer bounds what one connection holds.
const MAX_STREAMS: u32 = 100;

/// Most response bytes hyper's HTTP/2 server buffers per stream for a client whose flow-control
/// window is open but which does not read (hyper's default: about 400 KiB). 64 KiB is the
/// protocol's default window (65,535), so a stream still fills a default window at once, and the
/// socket's own buffer keeps the wire busy meanwhile. Besides this buffer a stream holds up to
/// three chunks of the backend's body as hyper's HTTP/1.1 client read them. Measured
/// (tests/http2_limits.rs): a connection that opened [`MAX_STREAMS`] streams and stopped reading
/// held 21 to 35 MB; with 256 streams and hyper's default, 330 to 345 MB (docs/limits.md).
const MAX_SEND_BUF: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Http1,
    Http2,
}

/// How connections are served: hyper's builders and the connection timers.
pub(super) struct Protocols {
    h2: http2::Builder<TokioExecutor>,
    /// For the TLS handshake and the first bytes of a plain connection; an HTTP/2 connection
    /// with no new request for this long is closed too (like an idle HTTP/1.1 keep-alive one).
    idle: Duration,
}

impl Protocols {
    pub(super) fn new(config: &Config) -> Protocols {
        let limits = &config.limits;
        // roomgate checks the configured limits itself, to answer with a body that says why;
        // hyper's own limits are a backstop against far larger heads.
        let head_backstop = limits.max_request_head.saturating_mul(2).max(16 * 1024) + 16 * 1024;
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .max_concurrent_streams(MAX_STREAMS)
            .max_send_buf_size(MAX_SEND_BUF)
            // Kept at the defaults, which bound the rapid-reset (CVE-2023-44487) and
            // provoked-reset (RUSTSEC-2024-0003) floods: 20 streams a client opened and reset
            // before they were served, 1024 streams roomgate reset for a client's errors; past
            // either, GOAWAY. Set here so that a change in hyper's defaults is not silent.
            .max_pending_accept_reset_streams(20)
            .max_local_error_reset_streams(1024)
            .max_header_list_size(u32::try_from(head_backstop).unwrap_or(u32::MAX))
            // Finds peers that went away without a word (idle connections close sooner anyway
            // unless timeouts.request_head is long).
            .keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10));
        Protocols { h2, idle: config.timeouts.request_head }
    }
}

/// Serves a connection of a plain listener: HTTP/2 if it opens with the h2c preface, else
/// HTTP/1.1. `ticket` counts it against the connection limits until it ends (or, once it
/// becomes a WebSocket, until the WebSocket does); on HTTP/2, each stream past the first counts
/// once more against the client's address while it is open.
pub(super) async fn serve_plain(
    stream: TcpStream,
    client: SocketAddr,
    ticket: ConnTicket,
    gateway: Arc<Gateway>,
    protocols: Arc<Protocols>,
    stop: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let (proto, first, stream) = tokio::select! {
        sniffed = tokio::time::timeout(protocols.idle, sniff(stream)) => match sniffed {
            Ok(Ok(Some(sniffed))) => sniffed,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => return tracing::debug!(error = %e, "connection failed before its first request"),
            Err(_) => return tracing::debug!("no request in time; connection closed"),
        },
        () = stop.cancelled() => return,
    };
    serve(stream, first, proto, Conn { client, scheme: Scheme::Http }, ticket, gateway, &protocols, stop).await;
}

/// Serves a connection of a TLS listener: the handshake (bounded by `timeouts.request_head`),
/// then HTTP/2 or HTTP/1.1 as ALPN chose.
pub(super) async fn serve_tls(
    stream: TcpStream,
    client: SocketAddr,
    ticket: ConnTicket,
    gateway: Arc<Gateway>,
    protocols: Arc<Protocols>,
    acceptor: TlsAcceptor,
    stop: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let accepted = tokio::select! {
        accepted = tokio::time::timeout(protocols.idle, acceptor.accept(stream)) => accepted,
        () = stop.cancelled() => return,
    };
    let stream = match accepted {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            gateway.metrics().tls_handshake("failed");
            return tracing::debug!(error = %e, "TLS handshake failed");
        }
        Err(_) => {
            gateway.metrics().tls_handshake("timeout");
            return tracing::debug!(after = ?protocols.idle, "TLS handshake not done in time; connection closed");
        }
    };
    let session = stream.get_ref().1;
    let resumed = session.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    gateway.metrics().tls_handshake(if resumed { "resumed" } else { "full" });
    let proto = if session.alpn_protocol() == Some(b"h2") { Proto::Http2 } else { Proto::Http1 };
    serve(stream, Bytes::new(), proto, Conn { client, scheme: Scheme::Https }, ticket, gateway, &protocols, stop).await;
}

/// Reads the first bytes (at most four): the h2c preface or not. They are handed back with the
/// stream, to be read again by the protocol. `None`: the client closed first.
///
/// Reading, not peeking: a peek returns at once with the same bytes while a client sends the
/// preface a byte at a time, so waiting for more would mean polling on a timer, which clients
/// that send one byte and stall could turn into busy work.
async fn sniff(mut stream: TcpStream) -> std::io::Result<Option<(Proto, Bytes, TcpStream)>> {
    // "PRI " already rules out every HTTP/1.1 request.
    let mut head = [0u8; 4];
    let mut len = 0;
    while len < head.len() {
        let n = stream.read(&mut head[len..]).await?;
        if n == 0 {
            return Ok(None);
        }
        len += n;
        if !PREFACE.starts_with(&head[..len]) {
            break;
        }
    }
    let proto = if PREFACE.starts_with(&head[..len]) { Proto::Http2 } else { Proto::Http1 };
    Ok(Some((proto, Bytes::copy_from_slice(&head[..len]), stream)))
}

/// Serves a connection whose first bytes, already read, are `first`: HTTP/1.1 on roomgate's own
/// codec, every request of it (WebSocket handshakes included); HTTP/2 on hyper's server.
#[allow(clippy::too_many_arguments)]
async fn serve<I>(
    io: I,
    first: Bytes,
    proto: Proto,
    conn: Conn,
    ticket: ConnTicket,
    gateway: Arc<Gateway>,
    protocols: &Protocols,
    stop: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limit = gateway.snapshot().config.timeouts.client_write;
    let io = WriteTimeout::new(io, limit, conn.client, gateway.metrics().client_write_timeouts());
    let result = match proto {
        Proto::Http1 => {
            h1::serve(&gateway, io, &first, conn, &ticket, protocols.idle, &stop).await;
            return;
        }
        Proto::Http2 => serve_h2(Rewind::new(first, io), conn, ticket, gateway, protocols, stop).await,
    };
    if let Err(e) = result {
        log_connection_error(&e);
    }
}

/// HTTP/2: shutdown and idleness (no new request for `idle`) both send GOAWAY; streams in
/// flight finish. Each stream counts against the client's address while it is open, from its
/// head to the end of its response ([`ConnTicket::open_stream`]): one past the address's
/// `limits.max_connections_per_ip` is answered 503 with `Retry-After`, and the connection's
/// other streams go on.
async fn serve_h2<I>(
    io: I,
    conn: Conn,
    ticket: ConnTicket,
    gateway: Arc<Gateway>,
    protocols: &Protocols,
    stop: CancellationToken,
) -> hyper::Result<()>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let started = Arc::new(AtomicU64::new(0));
    let counter = started.clone();
    let service = service_fn(move |req| {
        counter.fetch_add(1, Ordering::Relaxed);
        let gateway = gateway.clone();
        let stream = ticket.open_stream(gateway.snapshot().config.limits.max_connections_per_ip);
        async move {
            Ok::<_, Infallible>(match stream {
                Ok(stream) => hold_stream(gateway.handle(req, conn).await, Some(stream)),
                Err(e) => refuse_stream(&gateway, e, conn.client),
            })
        }
    });
    let c = protocols.h2.serve_connection(TokioIo::new(io), service);
    tokio::pin!(c);
    let mut seen = 0;
    loop {
        tokio::select! {
            result = c.as_mut() => return result,
            () = stop.cancelled() => break,
            () = tokio::time::sleep(protocols.idle) => {
                let now = started.load(Ordering::Relaxed);
                if now == seen {
                    tracing::debug!("HTTP/2 connection idle; closing it");
                    break;
                }
                seen = now;
            }
        }
    }
    c.as_mut().graceful_shutdown();
    c.await
}

/// The answer to a stream past the client address's allowance: 503 with `Retry-After`, as for
/// a forwarded client past it; counted and logged (throttled) as a refusal of that limit.
fn refuse_stream(
    gateway: &Gateway,
    e: crate::error::LimitError,
    client: SocketAddr,
) -> http::Response<HeldBody<ResponseBody>> {
    let e = limits::refused(gateway.metrics(), e, &client);
    hold_body(respond(&ProxyError::Limit(e)).map(ResponseBody::local))
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
