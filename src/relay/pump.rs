//! The byte pump of a WebSocket tunnel: both directions relayed by one future, with frame
//! boundaries tracked so that roomgate can close a socket cleanly at any moment.
//!
//! An idle tunnel holds no buffer: each read goes into a per-thread scratch buffer and is written
//! straight on. Only bytes the destination cannot take yet are copied into a per-direction
//! `pending` vector, which is freed once written.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::frame::{FrameError, FrameTracker, Rules, close_frame};
use super::watch::{NavWatch, Stop};

/// Reads per direction per poll before yielding to other tasks.
const READS_PER_POLL: usize = 16;
const SCRATCH_SIZE: usize = 32 * 1024;

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; SCRATCH_SIZE].into_boxed_slice());
}

/// Which peer of the tunnel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Client,
    Backend,
}

/// Why a tunnel ended other than by a close handshake or an end of stream.
#[derive(Debug, thiserror::Error)]
pub enum PumpError {
    #[error("{side:?} I/O error: {source}")]
    Io {
        side: Side,
        #[source]
        source: io::Error,
    },
}

/// Counters and close codes of a finished (or running) tunnel.
#[derive(Clone, Copy, Debug, Default)]
pub struct PumpStats {
    /// Bytes relayed from the client to the backend.
    pub bytes_up: u64,
    /// Bytes relayed from the backend to the client.
    pub bytes_down: u64,
    /// Close code the client sent, if any.
    pub client_close: Option<u16>,
    /// Close code the backend sent, if any.
    pub backend_close: Option<u16>,
    /// A peer sent a frame header that cannot be valid.
    pub protocol_error: Option<(Side, FrameError)>,
    /// The page watch stopped the client's stream (djust sockets): navigation out of the room
    /// (1012), an unreadable page change (4400), a message too big to classify (1009).
    pub stopped: Option<u16>,
}

/// Relays bytes between `client` and `backend` in both directions until both are done.
pub struct Pump<C, B> {
    client: C,
    backend: B,
    up: Direction,
    down: Direction,
    protocol_error: Option<(Side, FrameError)>,
    /// Bumped on every chunk read, for idle detection.
    activity: u64,
}

/// What a direction does after it has written its close frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    /// Read and drop the source's bytes until its own close frame (the reply) arrives.
    AwaitReply,
    /// Stop: the source is not expected to answer (it broke the protocol).
    Stop,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Relay,
    /// A close frame waits for the next frame boundary of the source stream.
    Closing(After),
    /// The close frame is queued; shut the destination's write side once it is written.
    ShutdownDst(After),
    /// Dropping the source's bytes until its close frame.
    Discard,
    Done,
}

/// One direction: bytes from `src` to `dst`.
struct Direction {
    src: Side,
    tracker: FrameTracker,
    phase: Phase,
    pending: Vec<u8>,
    pending_pos: usize,
    close: Vec<u8>,
    src_eof: bool,
    needs_flush: bool,
    bytes: u64,
    /// Page watch (client stream of a djust socket only).
    watch: Option<Box<NavWatch>>,
    /// The watch stopped the stream with this close code: the other direction must close the
    /// client with it.
    stopped: Option<(u16, &'static str)>,
}

/// What went wrong in one direction.
enum DirError {
    Io(Side, io::Error),
    /// The source broke the framing; `clean`: what was written of it ends at a frame boundary.
    Frame(FrameError, bool),
}

impl From<FrameError> for DirError {
    fn from(e: FrameError) -> Self {
        DirError::Frame(e, false)
    }
}

// === impl Pump ===

impl<C, B> Pump<C, B>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    /// A pump whose peers must follow RFC 6455's framing: the client's frames masked, the
    /// backend's not, and RSV bits only as `rsv` (those of the extensions the handshake
    /// negotiated) allows.
    pub fn new(client: C, backend: B, rsv: u8) -> Self {
        Pump {
            client,
            backend,
            up: Direction::new(Side::Client, Rules::CLIENT.with_rsv(rsv)),
            down: Direction::new(Side::Backend, Rules::SERVER.with_rsv(rsv)),
            protocol_error: None,
            activity: 0,
        }
    }

    /// Starts a clean close: the client gets a close frame with `code` and `reason`, the backend
    /// one with 1001 (going away), each at the next frame boundary of its stream; then the pump
    /// waits for both replies. A direction that already carried a close frame is left alone.
    pub fn close(&mut self, code: u16, reason: &str) {
        self.down.request_close(close_frame(code, reason, None), After::AwaitReply);
        self.up.request_close(close_frame(1001, "", Some(mask_key())), After::AwaitReply);
    }

    /// Watches the client stream for page changes out of the socket's room (djust).
    pub fn watch(&mut self, watch: NavWatch) {
        self.up.watch = Some(Box::new(watch));
    }

    pub fn stats(&self) -> PumpStats {
        PumpStats {
            bytes_up: self.up.bytes,
            bytes_down: self.down.bytes,
            client_close: self.up.tracker.close_code(),
            backend_close: self.down.tracker.close_code(),
            protocol_error: self.protocol_error,
            stopped: self.up.stopped.map(|(code, _)| code),
        }
    }

    pub fn activity(&self) -> u64 {
        self.activity
    }

    /// One side has ended its stream and the other has sent its close frame, all of it written:
    /// nothing legitimate can follow, so the tunnel ends without waiting for the second end of
    /// stream (a client that never closes its TCP connection would otherwise hold the tunnel).
    fn handshake_over(&self) -> bool {
        let said_goodbye = |d: &Direction| d.tracker.close_code().is_some() && d.pending.is_empty();
        (self.down.phase == Phase::Done && said_goodbye(&self.up))
            || (self.up.phase == Phase::Done && said_goodbye(&self.down))
    }

    /// The watch stopped the client's stream: the client is told why (after 1012, a page of
    /// another room, client.js reconnects and mounts the new page on its owner). Called between
    /// the two directions' runs, before the backend-to-client direction reads again: the stop
    /// has already sent the backend its 1001 and ended its stream, so the backend's next bytes
    /// may be its close reply or its end of stream, and either, read first, would reach the
    /// client instead of the 1012 (an end of stream: a bare FIN, no close frame at all).
    fn forward_stop(&mut self) {
        if let Some((code, reason)) = self.up.stopped {
            self.down.request_close(close_frame(code, reason, None), After::AwaitReply);
        }
    }

    /// A peer broke the framing: stop reading it, and tell it 1002 at the next boundary of the
    /// other direction. The other peer gets a close of its own when what it was sent ends at a
    /// frame boundary (1014, bad gateway, for a client whose backend broke; 1001 for a backend
    /// whose client did); otherwise its connection just ends.
    fn on_frame_error(&mut self, side: Side, err: FrameError, clean: bool) {
        self.protocol_error.get_or_insert((side, err));
        let (broken, other) = match side {
            Side::Client => (&mut self.up, &mut self.down),
            Side::Backend => (&mut self.down, &mut self.up),
        };
        let to_broken = close_frame(1002, "protocol error", (side == Side::Backend).then(mask_key));
        other.request_close(to_broken, After::Stop);
        if clean && broken.tracker.close_code().is_none() {
            broken.close = match side {
                Side::Backend => close_frame(1014, "bad gateway", None),
                Side::Client => close_frame(1001, "", Some(mask_key())),
            };
            broken.inject_close(After::Stop);
        } else {
            broken.phase = Phase::Done;
        }
    }
}

impl<C, B> Future for Pump<C, B>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    type Output = Result<PumpStats, PumpError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            let up = this.up.poll_run(cx, &mut this.client, &mut this.backend, &mut this.activity);
            this.forward_stop();
            let down = this.down.poll_run(cx, &mut this.backend, &mut this.client, &mut this.activity);
            let mut again = false;
            for (result, side) in [(up, Side::Client), (down, Side::Backend)] {
                match result {
                    Poll::Ready(Err(DirError::Io(side, source))) => {
                        return Poll::Ready(Err(PumpError::Io { side, source }));
                    }
                    Poll::Ready(Err(DirError::Frame(err, clean))) => {
                        this.on_frame_error(side, err, clean);
                        again = true;
                    }
                    _ => {}
                }
            }
            if again {
                continue;
            }
            if (this.up.phase == Phase::Done && this.down.phase == Phase::Done) || this.handshake_over() {
                return Poll::Ready(Ok(this.stats()));
            }
            return Poll::Pending;
        }
    }
}

// === impl Direction ===

impl Direction {
    fn new(src: Side, rules: Rules) -> Self {
        Direction {
            src,
            tracker: FrameTracker::strict(rules),
            phase: Phase::Relay,
            pending: Vec::new(),
            pending_pos: 0,
            close: Vec::new(),
            src_eof: false,
            needs_flush: false,
            bytes: 0,
            watch: None,
            stopped: None,
        }
    }

    fn dst(&self) -> Side {
        match self.src {
            Side::Client => Side::Backend,
            Side::Backend => Side::Client,
        }
    }

    fn request_close(&mut self, frame: Vec<u8>, after: After) {
        if self.phase != Phase::Relay || self.tracker.close_code().is_some() {
            return; // already closing, or a close frame already went this way
        }
        self.close = frame;
        self.phase = Phase::Closing(after);
    }

    /// Runs this direction until it blocks or is done. `Ready(Ok)` means done.
    fn poll_run<S, D>(
        &mut self,
        cx: &mut Context<'_>,
        src: &mut S,
        dst: &mut D,
        activity: &mut u64,
    ) -> Poll<Result<(), DirError>>
    where
        S: AsyncRead + Unpin,
        D: AsyncWrite + Unpin,
    {
        let dst_side = self.dst();
        let io_dst = |e| DirError::Io(dst_side, e);
        let mut reads = 0;
        loop {
            ready!(self.poll_flush_pending(cx, dst)).map_err(io_dst)?;
            match self.phase {
                Phase::Done => return Poll::Ready(Ok(())),
                // A watch that holds bytes back has written up to a frame boundary: the close
                // goes at once, and what it held is dropped, never passed on unread.
                Phase::Closing(after)
                    if self.tracker.at_boundary() || self.watch.as_ref().is_some_and(|w| w.is_holding()) =>
                {
                    self.inject_close(after);
                    continue;
                }
                Phase::ShutdownDst(after) => {
                    // A peer that already went away cannot be shut down; that is fine here.
                    let _ = ready!(Pin::new(&mut *dst).poll_shutdown(cx));
                    self.phase = if after == After::AwaitReply && !self.src_eof { Phase::Discard } else { Phase::Done };
                    continue;
                }
                _ => {}
            }
            if self.src_eof {
                if matches!(self.phase, Phase::Relay | Phase::Closing(_)) {
                    let _ = ready!(Pin::new(&mut *dst).poll_shutdown(cx));
                }
                self.phase = Phase::Done;
                return Poll::Ready(Ok(()));
            }
            if reads == READS_PER_POLL {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            reads += 1;
            let src_side = self.src;
            let step = SCRATCH.with_borrow_mut(|buf| -> Poll<Result<(), DirError>> {
                let mut rb = ReadBuf::new(buf);
                ready!(Pin::new(&mut *src).poll_read(cx, &mut rb)).map_err(|e| DirError::Io(src_side, e))?;
                let data = rb.filled();
                if data.is_empty() {
                    self.src_eof = true;
                    return Poll::Ready(Ok(()));
                }
                *activity += 1;
                Poll::Ready(self.on_chunk(cx, data, dst))
            });
            ready!(step)?;
        }
    }

    /// Handles one chunk read from the source, according to the phase.
    fn on_chunk<D: AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        data: &[u8],
        dst: &mut D,
    ) -> Result<(), DirError> {
        // Nothing of a chunk that breaks the framing is written: what the destination got ends at
        // a frame boundary when the stream was at one before the chunk.
        let clean = self.tracker.at_boundary() || self.watch.as_ref().is_some_and(|w| w.is_holding());
        let feed = self.tracker.feed(data).map_err(|e| DirError::Frame(e, clean))?;
        if self.phase != Phase::Relay {
            // Closing (at a boundary of what was written, or `inject_close` would have run):
            // nothing is inspected any more.
            self.watch = None;
        }
        match self.phase {
            Phase::Relay if self.watch.is_some() => self.relay_watched(cx, data, dst),
            Phase::Relay => {
                self.bytes += data.len() as u64;
                self.write(cx, data, dst)
            }
            Phase::Closing(after) => match feed.first_boundary {
                // The frame in progress ends here: forward it, then our close frame.
                Some(end) => {
                    self.bytes += end as u64;
                    self.write(cx, &data[..end], dst)?;
                    if feed.close_end == Some(end) {
                        // That frame was the source's own close: the handshake runs without us.
                        self.phase = Phase::Relay;
                        return self.write(cx, &data[end..], dst);
                    }
                    self.inject_close(after);
                    if feed.close_end.is_some() {
                        self.phase = Phase::ShutdownDst(After::Stop); // the reply is already here
                    }
                    Ok(())
                }
                None => {
                    self.bytes += data.len() as u64;
                    self.write(cx, data, dst)
                }
            },
            Phase::Discard => {
                if feed.close_end.is_some() {
                    self.phase = Phase::Done;
                }
                Ok(())
            }
            Phase::ShutdownDst(_) | Phase::Done => Ok(()),
        }
    }

    /// Relays a chunk of a watched client stream: messages are read whole and classified before
    /// they are written; one that changes the page out of the room stops the stream, and the
    /// backend gets a close (1001).
    fn relay_watched<D: AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        data: &[u8],
        dst: &mut D,
    ) -> Result<(), DirError> {
        let Some(mut watch) = self.watch.take() else { return Ok(()) };
        let scanned = watch.scan(data, |bytes| {
            self.bytes += bytes.len() as u64;
            self.write(cx, bytes, dst)
        });
        let Some(stop) = scanned? else {
            self.watch = Some(watch);
            return Ok(());
        };
        match &stop {
            Stop::Navigated(_) => tracing::info!(room = watch.room(), %stop, "closing the socket (1012)"),
            _ => tracing::info!(room = watch.room(), %stop, close_code = stop.code(), "closing the socket"),
        }
        self.close = close_frame(1001, "", Some(mask_key()));
        self.inject_close(After::AwaitReply);
        self.stopped = Some((stop.code(), stop.reason()));
        Ok(())
    }

    fn inject_close(&mut self, after: After) {
        // A watch still holding bytes: they are dropped with it.
        self.watch = None;
        let frame = std::mem::take(&mut self.close);
        self.pending.extend_from_slice(&frame);
        self.phase = Phase::ShutdownDst(after);
    }

    /// Writes what the destination takes now; keeps the rest in `pending`.
    fn write<D: AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        mut data: &[u8],
        dst: &mut D,
    ) -> Result<(), DirError> {
        if self.pending.is_empty() {
            while !data.is_empty() {
                match Pin::new(&mut *dst).poll_write(cx, data) {
                    Poll::Ready(Ok(0)) => return Err(DirError::Io(self.dst(), io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => {
                        data = &data[n..];
                        self.needs_flush = true;
                    }
                    Poll::Ready(Err(e)) => return Err(DirError::Io(self.dst(), e)),
                    Poll::Pending => break,
                }
            }
        }
        self.pending.extend_from_slice(data);
        Ok(())
    }

    fn poll_flush_pending<D: AsyncWrite + Unpin>(&mut self, cx: &mut Context<'_>, dst: &mut D) -> Poll<io::Result<()>> {
        while self.pending_pos < self.pending.len() {
            let n = ready!(Pin::new(&mut *dst).poll_write(cx, &self.pending[self.pending_pos..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.pending_pos += n;
            self.needs_flush = true;
        }
        if !self.pending.is_empty() {
            // Freed, not kept: an idle tunnel should hold no buffer.
            self.pending = Vec::new();
            self.pending_pos = 0;
        }
        if self.needs_flush {
            ready!(Pin::new(&mut *dst).poll_flush(cx))?;
            self.needs_flush = false;
        }
        Poll::Ready(Ok(()))
    }
}

/// A masking key for frames roomgate sends to a backend. It only has to differ between frames
/// (RFC 6455 section 5.3 guards intermediaries, and the backend is our own hop), so a hash of a
/// counter with the process's random hasher keys is enough.
pub fn mask_key() -> [u8; 4] {
    use std::hash::{BuildHasher, RandomState};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    thread_local!(static STATE: RandomState = RandomState::new());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let h = STATE.with(|s| s.hash_one(n));
    (h as u32).to_le_bytes()
}

#[cfg(test)]
mod tests;
