//! WebSocket tunnels after the upgrade: the frame tracker, the two-way pump, the registry of open
//! tunnels, and [`run`], which ties them together for one tunnel.

pub mod frame;
pub mod message;
mod pump;
mod registry;
pub mod watch;

use std::time::Duration;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite};

pub use pump::{Held, Pump, PumpError, PumpStats, Side, mask_key};
pub use registry::{CloseRequest, Paused, Registration, TunnelHandle, Tunnels};

/// Close code roomgate sends to clients when it shuts down, or closes an idle socket (going
/// away).
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// Close code roomgate sends when a backend is drained or the room must move (service restart).
pub const CLOSE_SERVICE_RESTART: u16 = 1012;
/// Close code roomgate sends a client whose backend went away without a close frame (an
/// unexpected condition). Not 1014 (bad gateway): client libraries that predate its registration,
/// tungstenite among them, take 1014 for a protocol error.
pub const CLOSE_BACKEND_GONE: u16 = 1011;

/// Per-tunnel settings.
#[derive(Clone, Copy, Debug)]
pub struct TunnelOptions {
    /// After roomgate sends its close frames, how long to wait for the replies.
    pub close_timeout: Duration,
    /// RSV bits the handshake's negotiated extensions allow (permessage-deflate: 0x40).
    pub rsv: u8,
}

/// How a tunnel ended.
#[derive(Debug)]
pub enum Ending {
    /// Both sides finished: close handshake, end of stream, or a peer's protocol error.
    Finished,
    /// roomgate closed it with this code, and both peers answered in time.
    ClosedByProxy(u16),
    /// roomgate closed it with this code; a peer did not answer within the close timeout.
    CloseTimedOut(u16),
    /// A connection failed.
    Failed(PumpError),
}

/// Relays one tunnel until it ends, closing it cleanly when `handle` is asked to (shutdown, a
/// room move, idleness: [`Tunnels::close_idle`] reads the activity the relay records in it), and
/// holding the client's stream at a frame boundary while a pause covers it
/// ([`Tunnels::pause_room`]).
pub fn run<C, B>(
    client: C,
    backend: B,
    handle: Arc<TunnelHandle>,
    opts: TunnelOptions,
    watch: Option<watch::NavWatch>,
) -> Relay<C, B>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut pump = Pump::new(client, backend, opts.rsv);
    if let Some(watch) = watch {
        pump.watch(watch);
    }
    Relay { pump, handle, opts, seen: 0, closing: None }
}

/// The future of one tunnel. Written out rather than `async`, because an idle tunnel's memory is
/// mostly this value: it holds the pump and nothing else per tunnel but the close deadline, boxed
/// and present only while the tunnel closes. There is no idle timer per tunnel: the relay records
/// activity in its handle and the maintenance tick closes the idle ones. A close request, a pause
/// and its end wake it through the handle's waker slot.
pub struct Relay<C, B> {
    pump: Pump<C, B>,
    handle: Arc<TunnelHandle>,
    opts: TunnelOptions,
    /// The pump's activity count last recorded in the handle.
    seen: u64,
    /// Closing with this code; the deadline for the peers' replies.
    closing: Option<(u16, Pin<Box<tokio::time::Sleep>>)>,
}

impl<C, B> Future for Relay<C, B>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    type Output = (PumpStats, Ending);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        // A pause (or its end) that comes while the tunnel is polled wakes a waker that may not
        // be registered yet (the first poll registers it at its end): so the pause is read again
        // once the waker is in place, and a change polls once more. Bounded: one change per poll.
        let mut rounds = 0;
        loop {
            // One atomic load when no pause was asked for. A closing tunnel is not held: its
            // close handshake reads the client to its reply.
            let paused = this.handle.hold_client();
            this.pump.hold_client(paused && this.closing.is_none());
            let poll = this.poll_tunnel(cx);
            rounds += 1;
            if poll.is_pending() && rounds < 3 && this.handle.hold_client() != paused {
                continue;
            }
            if paused && poll.is_pending() {
                match this.pump.client_held() {
                    Held::Yes => this.handle.report_stopped(),
                    // The fence's ping is queued: the next poll writes it.
                    Held::Fencing => cx.waker().wake_by_ref(),
                    Held::No => {}
                }
            }
            return poll;
        }
    }
}

impl<C, B> Relay<C, B>
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    /// The pump, and the close when one is requested.
    fn poll_tunnel(&mut self, cx: &mut Context<'_>) -> Poll<(PumpStats, Ending)> {
        let this = self;
        if let Some((code, deadline)) = this.closing.as_mut() {
            let code = *code;
            if let Poll::Ready(result) = Pin::new(&mut this.pump).poll(cx) {
                return Poll::Ready(finished(&this.pump, result, Ending::ClosedByProxy(code)));
            }
            return match deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready((this.pump.stats(), Ending::CloseTimedOut(code))),
                Poll::Pending => Poll::Pending,
            };
        }
        if let Poll::Ready(result) = Pin::new(&mut this.pump).poll(cx) {
            return Poll::Ready(finished(&this.pump, result, Ending::Finished));
        }
        if this.pump.backend_gone() {
            // The backend went away and the client has roomgate's 1011: its reply is awaited
            // as that of any close roomgate starts, no longer.
            let deadline = Box::pin(tokio::time::sleep(this.opts.close_timeout));
            this.closing = Some((CLOSE_BACKEND_GONE, deadline));
            return this.poll_tunnel(cx);
        }
        if this.pump.activity() != this.seen {
            this.seen = this.pump.activity();
            this.handle.touch();
        }
        let Poll::Ready(request) = this.handle.poll_close(cx) else { return Poll::Pending };
        let code = request.code();
        this.pump.close(code, request.reason());
        this.closing = Some((code, Box::pin(tokio::time::sleep(this.opts.close_timeout))));
        // Poll again at once: the close frames go out and the deadline is armed.
        this.poll_tunnel(cx)
    }
}

fn finished<C, B>(pump: &Pump<C, B>, result: Result<PumpStats, PumpError>, ok: Ending) -> (PumpStats, Ending)
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    match result {
        Ok(stats) => (stats, ok),
        Err(e) => (pump.stats(), Ending::Failed(e)),
    }
}
