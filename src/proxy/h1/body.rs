//! Bodies on roomgate's HTTP/1 path, moved in the request's own task: the client's request body
//! to the backend (held to the client's deadlines; a chunked one decoded and sent re-chunked),
//! and the backend's response body to the client.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::super::upload::Deadlines;
use crate::error::BodyProblem;
use crate::h1::{ChunkedDecoder, Framing, chunked};

/// Bytes asked of a socket in one read.
const READ_SIZE: usize = 16 * 1024;
/// Bytes gathered before a write.
const WRITE_SIZE: usize = 16 * 1024;

/// One side of a connection: its stream, what was read from it and not used yet, and what is
/// gathered to be written to it.
pub struct Side<I> {
    pub io: I,
    pub buf: BytesMut,
    pub out: Vec<u8>,
}

impl<I: AsyncRead + AsyncWrite + Unpin> Side<I> {
    pub fn new(io: I, first: &[u8]) -> Self {
        let mut buf = BytesMut::with_capacity(READ_SIZE);
        buf.extend_from_slice(first);
        Side { io, buf, out: Vec::with_capacity(1024) }
    }

    /// Reads more into `buf`; 0 at the end of the stream.
    pub async fn read_more(&mut self) -> std::io::Result<usize> {
        read_more(&mut self.io, &mut self.buf).await
    }

    /// Writes what was gathered in `out`.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        flush(&mut self.io, &mut self.out).await
    }
}

/// Reads more of `io` into `buf`; 0 at the end of the stream.
pub async fn read_more<R: AsyncRead + Unpin>(io: &mut R, buf: &mut BytesMut) -> std::io::Result<usize> {
    if buf.capacity() - buf.len() < READ_SIZE / 4 {
        buf.reserve(READ_SIZE);
    }
    io.read_buf(buf).await
}

/// Why a request body did not reach the backend whole.
#[derive(Debug)]
pub enum SendError {
    Client(BodyProblem),
    /// Writing to the backend failed, or it read nothing for the response timeout.
    Backend,
}

/// A request body's way to the backend: its framing, the client's deadlines, the backend's
/// time to take each write, and the access log's byte count.
pub struct Upload<'a> {
    pub framing: Framing,
    pub deadlines: Deadlines,
    pub write_timeout: Duration,
    pub counted: Option<&'a AtomicU64>,
}

/// Sends the request body, read from `rd` after what `buf` holds already, to `up` (the head
/// was sent already).
pub async fn send_body<R, W>(rd: &mut R, buf: &mut BytesMut, up: &mut W, upload: &Upload<'_>) -> Result<(), SendError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let started = Instant::now();
    match upload.framing {
        Framing::Length(mut left) => {
            while left > 0 {
                if buf.is_empty() {
                    read_body(rd, buf, started, upload.deadlines).await?;
                }
                let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                write_up(up, &buf[..n], upload.write_timeout).await?;
                count(upload.counted, n);
                buf.advance(n);
                left -= n as u64;
            }
            Ok(())
        }
        Framing::Chunked => send_chunked(rd, buf, up, upload, started).await,
        Framing::Close => Ok(()),
    }
}

async fn send_chunked<R, W>(
    rd: &mut R,
    buf: &mut BytesMut,
    up: &mut W,
    upload: &Upload<'_>,
    started: Instant,
) -> Result<(), SendError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut decoder = ChunkedDecoder::default();
    let mut out = Vec::new();
    loop {
        if buf.is_empty() {
            read_body(rd, buf, started, upload.deadlines).await?;
        }
        let step = decoder.decode(buf).map_err(|_| SendError::Client(BodyProblem::Malformed))?;
        if !step.data.is_empty() {
            chunked::write_size(&mut out, step.data.len());
            out.extend_from_slice(&buf[step.data.clone()]);
            out.extend_from_slice(b"\r\n");
            count(upload.counted, step.data.len());
        }
        buf.advance(step.consumed);
        if step.done {
            out.extend_from_slice(b"0\r\n\r\n");
        }
        if step.done || out.len() >= WRITE_SIZE || buf.is_empty() {
            write_up(up, &out, upload.write_timeout).await?;
            out.clear();
        }
        if step.done {
            return Ok(());
        }
    }
}

fn count(counted: Option<&AtomicU64>, n: usize) {
    if let Some(c) = counted {
        c.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Reads more of the body from the client, within its deadlines.
async fn read_body<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    started: Instant,
    deadlines: Deadlines,
) -> Result<(), SendError> {
    let left = deadlines.total.map(|t| t.saturating_sub(started.elapsed()));
    let (wait, problem) = match (deadlines.idle, left) {
        (Some(idle), Some(left)) if idle < left => (Some(idle), BodyProblem::Stalled(idle)),
        (_, Some(left)) => (Some(left), BodyProblem::TooSlow(deadlines.total.unwrap_or(left))),
        (Some(idle), None) => (Some(idle), BodyProblem::Stalled(idle)),
        (None, None) => (None, BodyProblem::Incomplete),
    };
    let read = match wait {
        Some(wait) => tokio::time::timeout(wait, read_more(rd, buf)).await.map_err(|_| SendError::Client(problem))?,
        None => read_more(rd, buf).await,
    };
    match read {
        Ok(0) | Err(_) => Err(SendError::Client(BodyProblem::Incomplete)),
        Ok(_) => Ok(()),
    }
}

async fn write_up<W: AsyncWrite + Unpin>(up: &mut W, bytes: &[u8], timeout: Duration) -> Result<(), SendError> {
    match tokio::time::timeout(timeout, up.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(SendError::Backend),
        Err(_) => Err(SendError::Backend),
    }
}

/// Writes what was gathered in `out` to `w`.
pub async fn flush<W: AsyncWrite + Unpin>(w: &mut W, out: &mut Vec<u8>) -> std::io::Result<()> {
    if !out.is_empty() {
        w.write_all(out).await?;
        out.clear();
    }
    Ok(())
}

/// How a response body went.
#[derive(Debug, PartialEq, Eq)]
pub enum Relayed {
    /// Whole; the backend connection may be reused if its head allows.
    Whole,
    /// The backend ended it early or framed it wrong: the client's connection must close.
    BackendFailed(&'static str),
    /// The client went away.
    ClientGone,
}

/// Moves what `buf` holds of a chunked body to `out`, re-chunked when `chunked_out`. `Ok(true)`:
/// the body ended.
fn relay_chunks(
    d: &mut ChunkedDecoder,
    buf: &mut BytesMut,
    out: &mut Vec<u8>,
    chunked_out: bool,
    sent: &mut u64,
) -> Result<bool, ()> {
    let step = d.decode(buf).map_err(|_| ())?;
    if !step.data.is_empty() {
        let data = &buf[step.data.clone()];
        if chunked_out {
            chunked::write_size(out, data.len());
        }
        out.extend_from_slice(data);
        if chunked_out {
            out.extend_from_slice(b"\r\n");
        }
        *sent += data.len() as u64;
    }
    buf.advance(step.consumed);
    if step.done && chunked_out {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    Ok(step.done)
}

/// Relays the response body, read from `rd` after what `buf` holds already, to the client's
/// `wr`, as `framing` delimits it: re-chunked when `chunked_out`, else as bare bytes. The
/// response head is in `out` already, and goes out with the first bytes of the body. `sent`
/// counts the body's bytes.
pub async fn relay_body<R, W>(
    rd: &mut R,
    buf: &mut BytesMut,
    wr: &mut W,
    out: &mut Vec<u8>,
    framing: Framing,
    chunked_out: bool,
    sent: &mut u64,
) -> Relayed
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut decoder = (framing == Framing::Chunked).then(ChunkedDecoder::default);
    let mut left = match framing {
        Framing::Length(n) => n,
        _ => u64::MAX,
    };
    loop {
        while !buf.is_empty() && left > 0 {
            match &mut decoder {
                Some(d) => match relay_chunks(d, buf, out, chunked_out, sent) {
                    Ok(true) => left = 0,
                    Ok(false) => {}
                    Err(()) => return Relayed::BackendFailed("malformed chunked response body"),
                },
                None => {
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    out.extend_from_slice(&buf[..n]);
                    buf.advance(n);
                    *sent += n as u64;
                    if framing != Framing::Close {
                        left -= n as u64;
                    }
                }
            }
            if out.len() >= WRITE_SIZE && flush(wr, out).await.is_err() {
                return Relayed::ClientGone;
            }
        }
        if flush(wr, out).await.is_err() {
            return Relayed::ClientGone;
        }
        if left == 0 {
            return Relayed::Whole;
        }
        match read_more(rd, buf).await {
            Ok(0) if framing == Framing::Close => return Relayed::Whole,
            Ok(0) | Err(_) => return Relayed::BackendFailed("the backend ended the response body early"),
            Ok(_) => {}
        }
    }
}
