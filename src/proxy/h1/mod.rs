//! roomgate's own HTTP/1.1 path for client connections (plain and TLS): heads read with the
//! codec in [`crate::h1`], plain requests forwarded in their own task on pooled backend
//! connections, requests served in order (pipelined ones included), keep-alive and graceful
//! shutdown, and WebSocket handshakes (djust sockets included), each decided once by the codec's
//! reading of its head ([`crate::handshake`]). No connection is handed to another parser.

mod body;
mod exchange;
mod forward;
mod leg;
pub mod pool;
pub mod rewind;
mod upgrade;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;

use self::body::Side;
use self::exchange::Next;
pub use self::rewind::Rewind;
use super::{Conn, Gateway};
use crate::error::{BodyProblem, ClientError, ProxyError};
use crate::h1::{HeadError, RequestHead, parse_request};
use crate::handshake::Kind;
use crate::limits::ConnTicket;
use crate::metrics::RequestLabels;

/// Serves HTTP/1.1 on `io` (whose first bytes, read already, are `first`) until the client
/// leaves, a request closes the connection, no request head comes within `idle`, or `stop`
/// (between requests).
/// `ticket` counts the connection; a WebSocket it turns into carries it on.
pub async fn serve<I>(
    gateway: &Arc<Gateway>,
    io: I,
    first: &[u8],
    conn: Conn,
    ticket: &ConnTicket,
    idle: Duration,
    stop: &CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut client = Side::new(io, first);
    // One timer for every head the connection reads: moved later for each, which costs no
    // trip to the timer wheel (only a deadline reached re-registers it).
    let mut deadline = Box::pin(tokio::time::sleep(idle));
    loop {
        let limit = head_limit(gateway);
        deadline.as_mut().reset(tokio::time::Instant::now() + idle);
        let head = match read_head(&mut client, limit, deadline.as_mut(), stop).await {
            Ok(Some(head)) => head,
            Ok(None) => break,
            Err(e) => {
                refuse(gateway, &mut client, e, conn).await;
                break;
            }
        };
        if head.kind == Kind::WebSocket {
            return gateway.upgrade_h1(head, client, conn, ticket.clone()).await;
        }
        if gateway.serve_h1(head, &mut client, conn, stop).await == Next::Close || stop.is_cancelled() {
            break;
        }
    }
    let _ = client.io.shutdown().await;
}

/// Most bytes a head may take before it is refused with 431: twice the configured limit (which
/// is checked with a message of its own once the head is read), as hyper's backstop was.
fn head_limit(gateway: &Gateway) -> usize {
    let limits = &gateway.snapshot.peek().config.limits;
    limits.max_request_head.saturating_mul(2).max(16 * 1024) + 16 * 1024
}

/// The next request head. `None`: the client closed, went quiet until `deadline`, or `stop` came
/// between requests.
async fn read_head<I: AsyncRead + AsyncWrite + Unpin>(
    client: &mut Side<I>,
    limit: usize,
    mut deadline: Pin<&mut Sleep>,
    stop: &CancellationToken,
) -> Result<Option<RequestHead>, HeadError> {
    // A head can only end with a line: a client trickling bytes gets one parse per line, not
    // one per read (and httparse stops at its header limit), so a slow head costs little CPU.
    let mut parse = !client.buf.is_empty();
    loop {
        if parse && let Some(head) = parse_request(&mut client.buf, limit)? {
            return Ok(Some(head));
        }
        let before = client.buf.len();
        tokio::select! {
            read = client.read_more() => match read {
                Ok(0) | Err(_) => return Ok(None),
                Ok(_) => parse = memchr::memchr(b'\n', &client.buf[before..]).is_some() || client.buf.len() >= limit,
            },
            () = deadline.as_mut() => {
                tracing::debug!("no request head in time; connection closed");
                return Ok(None);
            }
            () = stop.cancelled(), if client.buf.is_empty() => return Ok(None),
        }
    }
}

/// Answers a head that could not be read (400 or 431) and logs it; the connection closes.
async fn refuse<I: AsyncRead + AsyncWrite + Unpin>(gateway: &Gateway, client: &mut Side<I>, e: HeadError, conn: Conn) {
    let limits = &gateway.snapshot.peek().config.limits;
    let err: ProxyError = match e {
        HeadError::TooLarge => {
            ClientError::HeadTooLarge { size: client.buf.len(), limit: limits.max_request_head }.into()
        }
        HeadError::TooManyHeaders => {
            ClientError::TooManyHeaders { count: crate::h1::head::MAX_HEADERS + 1, limit: limits.max_headers }.into()
        }
        HeadError::Handshake(refused) => ClientError::from(refused).into(),
        HeadError::BadBody => ClientError::Body(BodyProblem::Malformed).into(),
        HeadError::Malformed(_) | HeadError::Framing(_) => ClientError::BadHead(e.reason()).into(),
    };
    exchange::write_error(client, &err, None, conn, false).await;
    // Counted like any answered request: a refused head has no route and no backend.
    let none = gateway.none.clone();
    gateway.metrics.request(&RequestLabels { route: none.clone(), status: err.status().as_u16(), backend: none });
}
