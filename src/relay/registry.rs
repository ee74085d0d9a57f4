//! Open WebSocket tunnels, so that shutdown (and later drain) can reach every one of them. hyper
//! forgets a connection once it is upgraded, so roomgate keeps this list itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;

mod pause;

pub use pause::Paused;

/// All open tunnels.
#[derive(Default)]
pub struct Tunnels {
    open: Mutex<Open>,
    next_id: AtomicU64,
    /// Woken whenever the last tunnel closes.
    emptied: Notify,
}

/// Open tunnels by id, the ids of each room's tunnels, and the pauses in force by room.
#[derive(Default)]
struct Open {
    by_id: HashMap<u64, Arc<TunnelHandle>>,
    by_room: HashMap<Box<str>, Vec<u64>>,
    /// A tunnel of one of these rooms registered while the pause lasts joins it (`pause.rs`).
    pauses: HashMap<Box<str>, Vec<Arc<pause::Group>>>,
    /// Set by [`Tunnels::close_all`]: a tunnel registered after it is asked to close at once.
    closing_all: Option<CloseRequest>,
}

/// What the registry knows of one tunnel, and how to ask it to close.
pub struct TunnelHandle {
    pub id: u64,
    pub room: Option<Box<str>>,
    pub backend: Arc<str>,
    /// The close requested, as [`CloseRequest::bits`]; 0: none.
    close_request: AtomicU32,
    /// Pauses covering the tunnel and what it reported of them (see `pause.rs`).
    pause: AtomicU32,
    /// The relay's task, woken by a close request, a pause and its end.
    waker: AtomicWaker,
    /// When a byte last went through, in milliseconds since the process started.
    active_ms: AtomicU64,
}

/// Why roomgate closes a tunnel: the close code and the reason its close frame gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseRequest {
    /// roomgate is shutting down (1001).
    Shutdown,
    /// No byte either way for `timeouts.websocket_idle` (1001).
    Idle,
    /// The room moves to another backend: drain deadline, owner down, fleet decision (1012).
    Moving,
    /// Any other code, without a reason.
    Code(u16),
}

impl CloseRequest {
    pub fn code(self) -> u16 {
        match self {
            CloseRequest::Shutdown | CloseRequest::Idle => super::CLOSE_GOING_AWAY,
            CloseRequest::Moving => super::CLOSE_SERVICE_RESTART,
            CloseRequest::Code(code) => code,
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            CloseRequest::Shutdown => "roomgate is shutting down",
            CloseRequest::Idle => "idle timeout",
            CloseRequest::Moving => "room is moving to another backend",
            CloseRequest::Code(_) => "",
        }
    }

    /// The code in the low 16 bits, the kind above: one atomic word, so that the first request
    /// wins whole.
    fn bits(self) -> u32 {
        let kind = match self {
            CloseRequest::Shutdown => 1,
            CloseRequest::Idle => 2,
            CloseRequest::Moving => 3,
            CloseRequest::Code(_) => 4,
        };
        kind << 16 | u32::from(self.code())
    }

    fn from_bits(bits: u32) -> Option<CloseRequest> {
        Some(match bits >> 16 {
            0 => return None,
            1 => CloseRequest::Shutdown,
            2 => CloseRequest::Idle,
            3 => CloseRequest::Moving,
            _ => CloseRequest::Code(bits as u16),
        })
    }
}

impl From<u16> for CloseRequest {
    /// A bare code: roomgate's own codes get their reasons.
    fn from(code: u16) -> Self {
        match code {
            super::CLOSE_GOING_AWAY => CloseRequest::Shutdown,
            super::CLOSE_SERVICE_RESTART => CloseRequest::Moving,
            code => CloseRequest::Code(code),
        }
    }
}

/// Removes its tunnel from the registry when dropped.
pub struct Registration {
    tunnels: Arc<Tunnels>,
    handle: Arc<TunnelHandle>,
}

// === impl Tunnels ===

impl Tunnels {
    pub fn register(self: &Arc<Self>, room: Option<Box<str>>, backend: Arc<str>) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let handle = Arc::new(TunnelHandle {
            id,
            room,
            backend,
            close_request: AtomicU32::new(0),
            pause: AtomicU32::new(0),
            waker: AtomicWaker::new(),
            active_ms: AtomicU64::new(now_ms()),
        });
        let mut open = self.lock();
        if let Some(room) = &handle.room {
            open.by_room.entry(room.clone()).or_default().push(id);
            if !open.pauses.is_empty() {
                pause::join_pauses(&open, room, &handle);
            }
        }
        open.by_id.insert(id, handle.clone());
        let closing_all = open.closing_all;
        drop(open);
        if let Some(request) = closing_all {
            // Its 101 may have gone out just as shutdown began: it gets the same close.
            handle.request_close(request);
        }
        Registration { tunnels: self.clone(), handle }
    }

    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Asks every open tunnel to close, and every tunnel registered from now on (shutdown: a
    /// handshake answered while it begins is registered after this walk); returns how many were
    /// open.
    pub fn close_all(&self, request: impl Into<CloseRequest>) -> usize {
        let request = request.into();
        let handles: Vec<Arc<TunnelHandle>> = {
            let mut open = self.lock();
            open.closing_all = Some(request);
            open.by_id.values().cloned().collect()
        };
        for h in &handles {
            h.request_close(request);
        }
        handles.len()
    }

    /// Asks the tunnels with no byte either way for `idle` to close (1001, "idle timeout");
    /// returns how many. Run by the maintenance tick: one walk of the table, and no timer per
    /// tunnel (an idle tunnel's memory stays its relay's). A paused tunnel is never idle: its
    /// client may have sent what roomgate holds back; the end of a pause counts as activity.
    pub fn close_idle(&self, idle: Duration) -> usize {
        self.close_quiet_since(now_ms().saturating_sub(idle.as_millis() as u64))
    }

    /// Closes the tunnels with no activity since `cutoff` (milliseconds of [`now_ms`]).
    fn close_quiet_since(&self, cutoff: u64) -> usize {
        let idle: Vec<Arc<TunnelHandle>> = self
            .lock()
            .by_id
            .values()
            .filter(|h| h.active_ms.load(Ordering::Relaxed) < cutoff && !h.closing() && !h.is_paused())
            .cloned()
            .collect();
        for h in &idle {
            h.request_close(CloseRequest::Idle);
        }
        idle.len()
    }

    /// Asks the tunnels of `room` to `backend` to close; returns how many.
    pub fn close_room(&self, room: &str, backend: &str, request: impl Into<CloseRequest>) -> usize {
        let request = request.into();
        let open = self.lock();
        let Some(ids) = open.by_room.get(room) else { return 0 };
        let handles: Vec<Arc<TunnelHandle>> =
            ids.iter().filter_map(|id| open.by_id.get(id)).filter(|h| &*h.backend == backend).cloned().collect();
        drop(open);
        for h in &handles {
            h.request_close(request);
        }
        handles.len()
    }

    /// Whether a tunnel of `room` to `backend` is open (closing or not).
    pub fn has_room_on(&self, room: &str, backend: &str) -> bool {
        let open = self.lock();
        let Some(ids) = open.by_room.get(room) else { return false };
        ids.iter().filter_map(|id| open.by_id.get(id)).any(|h| &*h.backend == backend)
    }

    /// Waits until no tunnel of `room` to `backend` is open, for at most `limit`. True if none is.
    pub async fn wait_room_gone(&self, room: &str, backend: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut pause = Duration::from_millis(1);
        while self.has_room_on(room, backend) {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        true
    }

    /// Rooms whose tunnels not asked to close reach more than one backend: a split room.
    pub fn split_rooms(&self) -> Vec<Box<str>> {
        let open = self.lock();
        open.by_room
            .iter()
            .filter(|(_, ids)| ids.len() > 1)
            .filter(|(_, ids)| {
                let mut live = ids.iter().filter_map(|id| open.by_id.get(id)).filter(|h| !h.closing());
                let first = live.next().map(|h| h.backend.clone());
                first.is_some_and(|f| live.any(|h| h.backend != f))
            })
            .map(|(room, _)| room.clone())
            .collect()
    }

    /// Waits until no tunnel is open.
    pub async fn wait_empty(&self) {
        loop {
            let emptied = self.emptied.notified();
            if self.is_empty() {
                return;
            }
            emptied.await;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts and
        // removes), so a poisoned lock is still usable.
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

// === impl TunnelHandle ===

impl TunnelHandle {
    /// Asks the tunnel to close at the next frame boundary. The first request wins.
    pub fn request_close(&self, request: impl Into<CloseRequest>) {
        let bits = request.into().bits();
        if self.close_request.compare_exchange(0, bits, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            // The request is stored before the wake: a tunnel not waiting yet sees it when it
            // polls.
            self.waker.wake();
        }
    }

    /// A close was requested.
    pub fn closing(&self) -> bool {
        self.close_request.load(Ordering::Acquire) != 0
    }

    /// The close request once there is one; until then `Pending`, and `cx` is woken when one
    /// comes. No future is kept per tunnel for this, only the waker slot in the handle.
    pub fn poll_close(&self, cx: &mut Context<'_>) -> Poll<CloseRequest> {
        if let Some(request) = self.request() {
            return Poll::Ready(request);
        }
        self.waker.register(cx.waker());
        match self.request() {
            Some(request) => Poll::Ready(request),
            None => Poll::Pending,
        }
    }

    /// Resolves with the close request once there is one.
    pub async fn close_requested(&self) -> CloseRequest {
        std::future::poll_fn(|cx| self.poll_close(cx)).await
    }

    /// Bytes went through the tunnel now.
    pub fn touch(&self) {
        self.active_ms.store(now_ms(), Ordering::Relaxed);
    }

    fn request(&self) -> Option<CloseRequest> {
        CloseRequest::from_bits(self.close_request.load(Ordering::Acquire))
    }
}

/// Milliseconds since the process started: the clock of tunnel activity.
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

// === impl Registration ===

impl Registration {
    pub fn handle(&self) -> &Arc<TunnelHandle> {
        &self.handle
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // A pause waiting for this tunnel counts it as stopped.
        self.handle.ended();
        let mut open = self.tunnels.lock();
        let id = self.handle.id;
        open.by_id.remove(&id);
        if let Some(room) = &self.handle.room
            && let Some(ids) = open.by_room.get_mut(room)
        {
            ids.retain(|&i| i != id);
            if ids.is_empty() {
                open.by_room.remove(room);
            }
        }
        crate::table::shrink(&mut open.by_id);
        crate::table::shrink(&mut open.by_room);
        if open.by_id.is_empty() {
            self.tunnels.emptied.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_room_on_two_backends_is_a_split_until_one_side_closes() {
        let t = Arc::new(Tunnels::default());
        let _a1 = t.register(Some("r".into()), "a".into());
        let _a2 = t.register(Some("r".into()), "a".into());
        assert!(t.split_rooms().is_empty(), "two sockets on one backend");
        let b = t.register(Some("r".into()), "b".into());
        assert_eq!(t.split_rooms(), vec![Box::<str>::from("r")]);
        assert_eq!(t.close_room("r", "a", 1012), 2);
        assert!(t.split_rooms().is_empty(), "sockets being closed do not count");
        drop(b);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_tunnel_registered_after_close_all_is_asked_to_close_too() {
        let t = Arc::new(Tunnels::default());
        let before = t.register(Some("r".into()), "a".into());
        assert_eq!(t.close_all(CloseRequest::Shutdown), 1);
        let after = t.register(Some("r".into()), "a".into());
        assert_eq!(before.handle().request(), Some(CloseRequest::Shutdown));
        assert_eq!(after.handle().request(), Some(CloseRequest::Shutdown), "its 101 went out as shutdown began");
    }

    #[test]
    fn idle_tunnels_are_asked_to_close_with_their_own_reason() {
        let t = Arc::new(Tunnels::default());
        let quiet = t.register(Some("r".into()), "a".into());
        let busy = t.register(Some("r".into()), "a".into());
        assert_eq!(t.close_idle(Duration::from_secs(3600)), 0, "none idle for an hour");
        quiet.handle().active_ms.store(0, Ordering::Relaxed);
        busy.handle().active_ms.store(10, Ordering::Relaxed);
        assert_eq!(t.close_quiet_since(5), 1);
        assert_eq!(quiet.handle().request(), Some(CloseRequest::Idle));
        assert_eq!(CloseRequest::Idle.code(), 1001);
        assert_eq!(CloseRequest::Idle.reason(), "idle timeout");
        assert!(busy.handle().request().is_none());
        assert_eq!(t.close_quiet_since(5), 0, "a tunnel already closing is not asked twice");
        busy.handle().request_close(1012);
        busy.handle().request_close(CloseRequest::Shutdown);
        assert_eq!(busy.handle().request(), Some(CloseRequest::Moving), "the first request wins");
        assert_eq!(CloseRequest::from(4000).bits() & 0xffff, 4000);
    }
}
