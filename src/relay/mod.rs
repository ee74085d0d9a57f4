//! WebSocket tunnels after the upgrade: the frame tracker, the two-way pump, the registry of open
//! tunnels, and [`run`], which ties them together for one tunnel.

pub mod frame;
pub mod message;
mod pump;
mod registry;
pub mod watch;

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

pub use pump::{Pump, PumpError, PumpStats, Side, mask_key};
pub use registry::{Registration, TunnelHandle, Tunnels};

/// Close code roomgate sends to clients when it shuts down (going away).
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// Close code roomgate sends when a backend is drained or the room must move (service restart).
pub const CLOSE_SERVICE_RESTART: u16 = 1012;

/// Per-tunnel settings.
#[derive(Clone, Copy, Debug)]
pub struct TunnelOptions {
    /// Close after this long with no bytes either way; `None`: never.
    pub idle: Option<Duration>,
    /// After roomgate sends its close frames, how long to wait for the replies.
    pub close_timeout: Duration,
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

/// Relays one tunnel until it ends, closing it cleanly when `handle` is asked to or when it has
/// been idle for `opts.idle`.
pub async fn run<C, B>(
    client: C,
    backend: B,
    handle: &TunnelHandle,
    opts: TunnelOptions,
    watch: Option<watch::NavWatch>,
) -> (PumpStats, Ending)
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let mut pump = Pump::new(client, backend);
    if let Some(watch) = watch {
        pump.watch(watch);
    }
    let mut seen = pump.activity();
    let code = loop {
        tokio::select! {
            result = &mut pump => return finished(&pump, result, Ending::Finished),
            code = handle.close_requested() => break code,
            _ = tokio::time::sleep(opts.idle.unwrap_or(Duration::MAX)), if opts.idle.is_some() => {
                if pump.activity() == seen {
                    break CLOSE_GOING_AWAY;
                }
                seen = pump.activity();
            }
        }
    };
    let reason = match code {
        CLOSE_GOING_AWAY => "roomgate is shutting down",
        CLOSE_SERVICE_RESTART => "room is moving to another backend",
        _ => "",
    };
    pump.close(code, reason);
    match tokio::time::timeout(opts.close_timeout, &mut pump).await {
        Ok(result) => finished(&pump, result, Ending::ClosedByProxy(code)),
        Err(_) => (pump.stats(), Ending::CloseTimedOut(code)),
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
