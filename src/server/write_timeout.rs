//! The client's write progress timeout (`timeouts.client_write`): a client connection whose
//! peer accepts no byte of what roomgate writes for that long fails its writes, so every path
//! that writes to it (a response body, an error, a refusal, a WebSocket's frames, HTTP/2's
//! frames) stops and closes both sides. The fault is the client's: it surfaces as a failed
//! write to the client, which no path counts against a backend.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// A client's stream whose writes fail with [`io::ErrorKind::TimedOut`] once one has waited
/// `limit` without the peer taking a byte. The clock starts when a write first has to wait,
/// so a connection idle between writes never runs it down, and any byte accepted resets it:
/// a slow reader that keeps taking bytes is never cut.
pub struct WriteTimeout<I> {
    io: I,
    limit: Duration,
    /// Armed while a write waits; `None` once it made progress.
    waiting: Option<Pin<Box<Sleep>>>,
    client: SocketAddr,
    timeouts: Counter,
}

impl<I> WriteTimeout<I> {
    pub fn new(io: I, limit: Duration, client: SocketAddr, timeouts: Counter) -> Self {
        WriteTimeout { io, limit, waiting: None, client, timeouts }
    }

    /// Passes a write's outcome on: ready resets the clock; pending arms it, and fails the
    /// write once it has run out.
    fn watch<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.waiting = None;
            return polled;
        }
        let limit = self.limit;
        let timer = self.waiting.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(timer.as_mut().poll(cx));
        self.timeouts.inc();
        tracing::info!(client = %self.client, after = ?limit, "client accepted no bytes; connection closed (timeouts.client_write)");
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "client accepted no bytes within timeouts.client_write",
        )))
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WriteTimeout<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_shutdown(cx);
        self.watch(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A peer that never reads: the write fails once the pipe is full and the limit has passed.
    #[tokio::test(start_paused = true)]
    async fn a_write_the_peer_never_takes_fails_after_the_limit() {
        let (ours, _theirs) = tokio::io::duplex(64);
        let counter = Counter::default();
        let mut w = WriteTimeout::new(ours, Duration::from_secs(5), "127.0.0.1:1".parse().unwrap(), counter.clone());
        let started = tokio::time::Instant::now();
        let err = w.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert_eq!(counter.get(), 1);
    }

    /// A peer that takes a little every few seconds, each pause under the limit, is never cut.
    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_taking_bytes_is_not_cut() {
        use tokio::io::AsyncReadExt;
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut w = WriteTimeout::new(ours, Duration::from_secs(5), "127.0.0.1:1".parse().unwrap(), Counter::default());
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = [0u8; 64];
            while got < 1024 {
                tokio::time::sleep(Duration::from_secs(4)).await;
                got += theirs.read(&mut buf).await.unwrap();
            }
            got
        });
        w.write_all(&[0u8; 1024]).await.unwrap();
        drop(w);
        assert_eq!(reader.await.unwrap(), 1024);
    }
}
