//! Accepting connections, for the proxy's listeners and the admin API's alike: a back-off when
//! the process runs out of file descriptors or memory, rather than a spinning core.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::throttle::Throttle;

/// First pause after an accept that failed for want of a resource; doubled on each failure in a
/// row up to [`ACCEPT_BACKOFF_MAX`], and started over after an accept that succeeds.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The next connection, or `None` once `stop` is cancelled.
///
/// Out of file descriptors (EMFILE, ENFILE) or memory, `accept` fails at once for as long as it
/// lasts, and the connection waits in the backlog, so retrying at once would spin a core. It
/// backs off instead: 10 ms, doubling to 1 s, logged at most once a second. An error of the
/// connection itself (reset or aborted before it was accepted) is skipped at once.
pub async fn accept(listener: &TcpListener, stop: &CancellationToken) -> Option<(TcpStream, SocketAddr)> {
    static LOG: Throttle = Throttle::new(Duration::from_secs(1));
    let mut pause = ACCEPT_BACKOFF_MIN;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => return None,
        };
        match accepted {
            Ok(pair) => return Some(pair),
            Err(e) if is_connection_error(&e) => tracing::debug!(error = %e, "connection lost before accept"),
            Err(e) => {
                if let Some(held_back) = LOG.ready() {
                    tracing::warn!(
                        error = %e,
                        retry_in = ?pause,
                        failed_since_last_line = held_back,
                        "accept failed (out of file descriptors?); backing off"
                    );
                }
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = stop.cancelled() => return None,
                }
                pause = (pause * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }
}

/// Errors of one pending connection, not of the listener: the next accept may succeed.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted};
    matches!(e.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted)
}
