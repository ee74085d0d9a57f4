//! One direction of a tunnel (bytes from one peer to the other) and its close handshake: the
//! phases from relaying to done, the close frame injected at a frame boundary, and the writes
//! that keep what the destination cannot take yet.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Side, mask_key};
use crate::relay::CLOSE_BACKEND_GONE;
use crate::relay::frame::{FrameError, FrameTracker, Rules, close_frame};
use crate::relay::watch::{NavWatch, Stop};

mod gone;
mod hold;

/// Reads per direction per poll before yielding to other tasks.
const READS_PER_POLL: usize = 16;
const SCRATCH_SIZE: usize = 32 * 1024;

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; SCRATCH_SIZE].into_boxed_slice());
}

/// What a direction does after it has written its close frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum After {
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
pub(super) struct Direction {
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
    /// Held at the next frame boundary (a room hand-off's pause: `hold.rs`).
    hold: bool,
    /// The source (a backend) ended its stream, or failed, without a close frame, at a frame
    /// boundary: the destination got roomgate's close (1011) instead.
    lost: bool,
    /// The destination is gone: nothing more is written to it.
    dst_gone: bool,
    /// The destination is leaving (its own stream ended, or it sent a close frame): the source's
    /// end of stream is no news to it, and gets no close of roomgate's.
    dst_leaving: bool,
}

/// What went wrong in one direction.
pub(super) enum DirError {
    Io(Side, io::Error),
    /// The source broke the framing; `clean`: what was written of it ends at a frame boundary.
    Frame(FrameError, bool),
}

impl From<FrameError> for DirError {
    fn from(e: FrameError) -> Self {
        DirError::Frame(e, false)
    }
}

/// What to do after a phase's own step (see [`Direction::poll_phase`]).
enum Next {
    /// Start over: flush what the step queued, then look at the new phase.
    Again,
    /// Read the source.
    Read,
    Done,
}

impl Direction {
    pub(super) fn new(src: Side, rules: Rules) -> Self {
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
            hold: false,
            lost: false,
            dst_gone: false,
            dst_leaving: false,
        }
    }

    /// Bytes relayed this way.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Close code of the close frame the source sent, if any.
    pub(super) fn close_code(&self) -> Option<u16> {
        self.tracker.close_code()
    }

    /// The watch stopped the stream: the code and reason the client is to get.
    pub(super) fn stopped(&self) -> Option<(u16, &'static str)> {
        self.stopped
    }

    pub(super) fn set_watch(&mut self, watch: NavWatch) {
        self.watch = Some(Box::new(watch));
    }

    pub(super) fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The source's close frame went this way, all of it written.
    pub(super) fn said_goodbye(&self) -> bool {
        self.tracker.close_code().is_some() && self.pending.is_empty()
    }

    fn dst(&self) -> Side {
        match self.src {
            Side::Client => Side::Backend,
            Side::Backend => Side::Client,
        }
    }

    pub(super) fn request_close(&mut self, frame: Vec<u8>, after: After) {
        if self.phase != Phase::Relay || self.tracker.close_code().is_some() {
            return; // already closing, or a close frame already went this way
        }
        self.close = frame;
        self.phase = Phase::Closing(after);
    }

    /// This direction's source broke the framing: it is read no more. Its destination gets a
    /// close of its own when what it was sent ends at a frame boundary (`clean`) and the source
    /// sent no close frame (1014, bad gateway, to a client whose backend broke; 1001 to a backend
    /// whose client did); otherwise its connection just ends.
    pub(super) fn source_broke(&mut self, clean: bool) {
        if clean && self.tracker.close_code().is_none() && !self.dst_gone {
            self.close = match self.src {
                Side::Backend => close_frame(1014, "bad gateway", None),
                Side::Client => close_frame(1001, "", Some(mask_key())),
            };
            self.inject_close(After::Stop);
        } else {
            self.phase = Phase::Done;
        }
    }

    /// What was written so far ends at a frame boundary: the stream is at one, or a watch holds
    /// back the bytes after it.
    fn written_to_boundary(&self) -> bool {
        self.tracker.at_boundary() || self.watch.as_ref().is_some_and(|w| w.is_holding())
    }

    /// Runs this direction until it blocks or is done. `Ready(Ok)` means done.
    pub(super) fn poll_run<S, D>(
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
        let mut reads = 0;
        loop {
            ready!(self.poll_flush_pending(cx, dst)).map_err(|e| DirError::Io(dst_side, e))?;
            match ready!(self.poll_phase(cx, dst)) {
                Next::Again => continue,
                Next::Done => return Poll::Ready(Ok(())),
                Next::Read => {}
            }
            let cap = if self.hold { self.read_cap() } else { SCRATCH_SIZE };
            if cap == 0 {
                // Held at a frame boundary: the source is not read (its TCP window fills). The
                // relay's task is woken by its handle when the pause ends.
                return Poll::Pending;
            }
            if reads == READS_PER_POLL {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            reads += 1;
            ready!(self.poll_read_chunk(cx, src, dst, activity, cap))?;
        }
    }

    /// The phase's own step, once everything queued is written: the close frame injected, the
    /// destination shut down, or the end of the source's stream handled.
    fn poll_phase<D: AsyncWrite + Unpin>(&mut self, cx: &mut Context<'_>, dst: &mut D) -> Poll<Next> {
        match self.phase {
            Phase::Done => return Poll::Ready(Next::Done),
            // A watch that holds bytes back has written up to a frame boundary: the close
            // goes at once, and what it held is dropped, never passed on unread.
            Phase::Closing(after) if self.written_to_boundary() => {
                self.inject_close(after);
                return Poll::Ready(Next::Again);
            }
            Phase::ShutdownDst(after) => {
                // A peer that already went away cannot be shut down; that is fine here.
                let _ = ready!(Pin::new(&mut *dst).poll_shutdown(cx));
                self.phase = if after == After::AwaitReply && !self.src_eof { Phase::Discard } else { Phase::Done };
                return Poll::Ready(Next::Again);
            }
            _ => {}
        }
        if self.src_eof {
            let unexpected = !self.dst_leaving && self.tracker.close_code().is_none();
            if self.phase == Phase::Relay && self.src == Side::Backend && unexpected {
                // The backend went away without a close frame (it died, or reset the connection):
                // the client gets one of roomgate's at the frame boundary, never a bare end of
                // stream (which browsers report as 1006).
                if self.written_to_boundary() {
                    self.lost = true;
                    self.close = close_frame(CLOSE_BACKEND_GONE, "backend went away", None);
                    self.inject_close(After::Stop);
                    return Poll::Ready(Next::Again);
                }
            }
            if matches!(self.phase, Phase::Relay | Phase::Closing(_)) {
                let _ = ready!(Pin::new(&mut *dst).poll_shutdown(cx));
            }
            self.phase = Phase::Done;
            return Poll::Ready(Next::Done);
        }
        Poll::Ready(Next::Read)
    }

    /// Reads one chunk of at most `cap` bytes from the source into the scratch buffer and handles
    /// it; an empty read is the end of the source's stream.
    fn poll_read_chunk<S, D>(
        &mut self,
        cx: &mut Context<'_>,
        src: &mut S,
        dst: &mut D,
        activity: &mut u64,
        cap: usize,
    ) -> Poll<Result<(), DirError>>
    where
        S: AsyncRead + Unpin,
        D: AsyncWrite + Unpin,
    {
        let src_side = self.src;
        SCRATCH.with_borrow_mut(|buf| -> Poll<Result<(), DirError>> {
            let mut rb = ReadBuf::new(&mut buf[..cap.min(SCRATCH_SIZE)]);
            ready!(Pin::new(&mut *src).poll_read(cx, &mut rb)).map_err(|e| DirError::Io(src_side, e))?;
            let data = rb.filled();
            if data.is_empty() {
                self.src_eof = true;
                return Poll::Ready(Ok(()));
            }
            *activity += 1;
            Poll::Ready(self.on_chunk(cx, data, dst))
        })
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
        let clean = self.written_to_boundary();
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
