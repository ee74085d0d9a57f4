//! The access log: one line per request, written when its response body ends, and one per
//! closed WebSocket.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use http::Method;

use crate::relay::{Ending, PumpStats};

/// What the access line of one request says.
pub struct AccessRecord {
    pub start: Instant,
    pub client: SocketAddr,
    pub method: Method,
    pub path: String,
    pub route: Option<usize>,
    pub room: Option<String>,
    pub backend: Option<Arc<str>>,
    pub status: u16,
    pub bytes_in: Arc<AtomicU64>,
    pub bytes_out: u64,
    pub error: Option<String>,
}

impl AccessRecord {
    pub fn emit(&self, complete: bool) {
        tracing::info!(
            target: "roomgate::access",
            client = %self.client,
            method = %self.method,
            path = %self.path,
            route = self.route,
            room = self.room.as_deref(),
            backend = self.backend.as_deref(),
            status = self.status,
            duration_us = self.start.elapsed().as_micros() as u64,
            bytes_in = self.bytes_in.load(Ordering::Relaxed),
            bytes_out = self.bytes_out,
            complete,
            error = self.error.as_deref(),
            "request"
        );
    }
}

/// The access line of a WebSocket tunnel that has ended.
pub fn websocket_closed(
    client: SocketAddr,
    room: Option<&str>,
    backend: &str,
    start: Instant,
    stats: &PumpStats,
    ending: &Ending,
) {
    let (closed_by, proxy_code) = match ending {
        Ending::Finished if stats.stopped.is_some() => match stats.stopped {
            Some(1012) => ("roomgate-navigation", stats.stopped),
            Some(1009) => ("roomgate-message-too-big", stats.stopped),
            _ => ("roomgate-page-watch", stats.stopped),
        },
        Ending::Finished => ("peers", None),
        Ending::ClosedByProxy(code) => ("roomgate", Some(*code)),
        Ending::CloseTimedOut(code) => ("roomgate-timeout", Some(*code)),
        Ending::Failed(_) => ("error", None),
    };
    let error = match (ending, &stats.protocol_error) {
        (Ending::Failed(e), _) => Some(e.to_string()),
        (_, Some((side, e))) => Some(format!("{side:?} protocol error: {e}")),
        _ => None,
    };
    tracing::info!(
        target: "roomgate::access",
        client = %client,
        room,
        backend,
        duration_ms = start.elapsed().as_millis() as u64,
        bytes_up = stats.bytes_up,
        bytes_down = stats.bytes_down,
        client_close = stats.client_close,
        backend_close = stats.backend_close,
        closed_by,
        proxy_close = proxy_code,
        error = error.as_deref(),
        "websocket closed"
    );
}
