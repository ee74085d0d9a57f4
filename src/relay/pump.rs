//! The byte pump of a WebSocket tunnel: both directions relayed by one future, with frame
//! boundaries tracked so that roomgate can close a socket cleanly at any moment.
//!
//! An idle tunnel holds no buffer: each read goes into a per-thread scratch buffer and is written
//! straight on. Only bytes the destination cannot take yet are copied into a per-direction
//! `pending` vector, which is freed once written.

mod direction;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite};

use self::direction::{After, DirError, Direction};
use super::frame::{FrameError, OP_PING, Rules, close_frame, frame};
use super::watch::NavWatch;

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

/// Where the client's stream is, for a pause (see [`Pump::client_held`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// Relaying still, or stopped and waiting for the backend to show it has read everything.
    No,
    /// Stopped at a frame boundary; the fence (a ping) was queued: poll the pump again so that it
    /// is written.
    Fencing,
    /// Stopped at a frame boundary, and the backend has read everything relayed before it.
    Yes,
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
    /// The backend's stream ended, or failed, without a close frame, and what the client was
    /// sent ended at a frame boundary: the client got roomgate's close (1011) instead.
    pub backend_gone: bool,
}

/// Relays bytes between `client` and `backend` in both directions until both are done.
pub struct Pump<C, B> {
    client: C,
    backend: B,
    up: Direction,
    down: Direction,
    protocol_error: Option<(Side, FrameError)>,
    /// The backend's connection failed; reported once the client has its close (the kind only:
    /// an idle tunnel's memory is mostly this value).
    backend_error: Option<io::ErrorKind>,
    /// Bumped on every chunk read, for idle detection.
    activity: u64,
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
            backend_error: None,
            activity: 0,
        }
    }

    /// Starts a clean close: the client gets a close frame with `code` and `reason`, the backend
    /// one with 1001 (going away), each at the next frame boundary of its stream; then the pump
    /// waits for both replies. A direction that already carried a close frame is left alone.
    pub fn close(&mut self, code: u16, reason: &str) {
        // A close is never held: the client's stream is read again, to its close reply.
        self.up.set_hold(false);
        self.down.request_close(close_frame(code, reason, None), After::AwaitReply);
        self.up.request_close(close_frame(1001, "", Some(mask_key())), After::AwaitReply);
    }

    /// Holds the client's stream (`true`) at its next frame boundary: the frame in flight is
    /// completed, then the client is read no more until the hold ends; the backend's stream
    /// flows on. A room hand-off pauses its sockets this way.
    pub fn hold_client(&mut self, hold: bool) {
        self.up.set_hold(hold);
        if !hold && self.down.pong().is_some() {
            // The hold is over: a new one needs its own fence, as the client is read again.
            self.down.expect_pong(0);
        }
    }

    /// Whether the client's stream has stopped at a frame boundary with everything relayed of it
    /// read by the backend (a hand-off exports the room's state after this; bytes merely written
    /// may still wait in the backend's socket, and the app would apply them after the export).
    ///
    /// Held at a boundary while relaying, the backend is sent a ping (the fence, masked, with a
    /// random token) and the stop counts once its pong with that token comes back: a WebSocket
    /// peer answers a ping in order, after reading every frame before it (RFC 6455 section
    /// 5.5.2). The pong goes on to the client, as an unsolicited pong may. Closing, the close
    /// frame written to the backend is the fence and its reply the answer. A backend that sent its
    /// close frame, or whose stream ended or failed, reads nothing more.
    pub fn client_held(&mut self) -> Held {
        if !self.up.stopped_at_boundary() {
            return Held::No;
        }
        if self.down.source_leaving() {
            return Held::Yes;
        }
        if !self.up.relaying() {
            return Held::No; // a close frame went to the backend: its reply is the answer
        }
        match self.down.pong() {
            Some(true) => Held::Yes,
            Some(false) => Held::No,
            None => {
                let token = fence_token();
                self.down.expect_pong(token);
                self.up.queue_own_frame(&frame(OP_PING, &token.to_be_bytes(), Some(mask_key())));
                Held::Fencing
            }
        }
    }

    /// Watches the client stream for page changes out of the socket's room (djust).
    pub fn watch(&mut self, watch: NavWatch) {
        self.up.set_watch(watch);
    }

    pub fn stats(&self) -> PumpStats {
        PumpStats {
            bytes_up: self.up.bytes(),
            bytes_down: self.down.bytes(),
            client_close: self.up.close_code(),
            backend_close: self.down.close_code(),
            protocol_error: self.protocol_error,
            stopped: self.up.stopped().map(|(code, _)| code),
            backend_gone: self.down.lost(),
        }
    }

    /// The backend went away without a close frame (see [`PumpStats::backend_gone`]).
    pub fn backend_gone(&self) -> bool {
        self.down.lost()
    }

    pub fn activity(&self) -> u64 {
        self.activity
    }

    /// One side has ended its stream and the other has sent its close frame, all of it written:
    /// nothing legitimate can follow, so the tunnel ends without waiting for the second end of
    /// stream (a client that never closes its TCP connection would otherwise hold the tunnel).
    fn handshake_over(&self) -> bool {
        (self.down.is_done() && self.up.said_goodbye()) || (self.up.is_done() && self.down.said_goodbye())
    }

    /// The watch stopped the client's stream: the client is told why (after 1012, a page of
    /// another room, client.js reconnects and mounts the new page on its owner). Called between
    /// the two directions' runs, before the backend-to-client direction reads again: the stop
    /// has already sent the backend its 1001 and ended its stream, so the backend's next bytes
    /// may be its close reply or its end of stream, and either, read first, would reach the
    /// client instead of the 1012 (an end of stream: a bare FIN, no close frame at all).
    fn forward_stop(&mut self) {
        if let Some((code, reason)) = self.up.stopped() {
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
        broken.source_broke(clean);
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
            if this.up.source_leaving() {
                this.down.destination_leaving();
            }
            let down = this.down.poll_run(cx, &mut this.backend, &mut this.client, &mut this.activity);
            let mut again = false;
            for (result, side) in [(up, Side::Client), (down, Side::Backend)] {
                match result {
                    // The backend's connection failed (a reset, a write to a dead peer): the
                    // client still gets its close frame, as when the backend's stream ends.
                    Poll::Ready(Err(DirError::Io(Side::Backend, source))) if this.backend_error.is_none() => {
                        this.backend_error = Some(source.kind());
                        this.down.source_failed();
                        this.up.destination_gone();
                        again = true;
                    }
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
            if this.down.lost() {
                // Nothing goes to a backend that went away; the client's reply to its 1011 is
                // read and dropped (polled again at once: the client's stream may have no waker).
                again |= this.up.destination_gone();
            }
            if again {
                continue;
            }
            if (this.up.is_done() && this.down.is_done()) || this.handshake_over() {
                if let Some(kind) = this.backend_error.take() {
                    return Poll::Ready(Err(PumpError::Io { side: Side::Backend, source: kind.into() }));
                }
                return Poll::Ready(Ok(this.stats()));
            }
            return Poll::Pending;
        }
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

/// The payload of a pause's ping ([`super::frame::FENCE_LEN`] bytes, big-endian): random, so
/// that no pong the client asked for (nor one answering an earlier pause) can pass for its
/// answer. Never 0 or `u64::MAX`, which the tracker keeps for "none" and "answered".
fn fence_token() -> u64 {
    let [a, b, c, d] = mask_key();
    let [e, f, g, h] = mask_key();
    let token = u64::from_be_bytes([a, b, c, d, e, f, g, h]);
    token.clamp(1, u64::MAX - 1)
}

#[cfg(test)]
mod tests;
