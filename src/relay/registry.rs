//! Open WebSocket tunnels, so that shutdown (and later drain) can reach every one of them. hyper
//! forgets a connection once it is upgraded, so roomgate keeps this list itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use tokio::sync::Notify;

/// All open tunnels.
#[derive(Default)]
pub struct Tunnels {
    open: Mutex<Open>,
    next_id: AtomicU64,
    /// Woken whenever the last tunnel closes.
    emptied: Notify,
}

/// Open tunnels by id, and the ids of each room's tunnels.
#[derive(Default)]
struct Open {
    by_id: HashMap<u64, Arc<TunnelHandle>>,
    by_room: HashMap<Box<str>, Vec<u64>>,
}

/// What the registry knows of one tunnel, and how to ask it to close.
pub struct TunnelHandle {
    pub id: u64,
    pub room: Option<Box<str>>,
    pub backend: Arc<str>,
    close_code: AtomicU16,
    close: AtomicWaker,
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
        let handle =
            Arc::new(TunnelHandle { id, room, backend, close_code: AtomicU16::new(0), close: AtomicWaker::new() });
        let mut open = self.lock();
        if let Some(room) = &handle.room {
            open.by_room.entry(room.clone()).or_default().push(id);
        }
        open.by_id.insert(id, handle.clone());
        drop(open);
        Registration { tunnels: self.clone(), handle }
    }

    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Asks every open tunnel to close with `code`; returns how many were asked.
    pub fn close_all(&self, code: u16) -> usize {
        let handles: Vec<Arc<TunnelHandle>> = self.lock().by_id.values().cloned().collect();
        for h in &handles {
            h.request_close(code);
        }
        handles.len()
    }

    /// Asks the tunnels of `room` to `backend` to close with `code`; returns how many.
    pub fn close_room(&self, room: &str, backend: &str, code: u16) -> usize {
        let open = self.lock();
        let Some(ids) = open.by_room.get(room) else { return 0 };
        let handles: Vec<Arc<TunnelHandle>> =
            ids.iter().filter_map(|id| open.by_id.get(id)).filter(|h| &*h.backend == backend).cloned().collect();
        drop(open);
        for h in &handles {
            h.request_close(code);
        }
        handles.len()
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
    /// Asks the tunnel to close with `code` at the next frame boundary. The first request wins.
    pub fn request_close(&self, code: u16) {
        if self.close_code.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            // The code is stored before the wake: a tunnel not waiting yet sees it when it polls.
            self.close.wake();
        }
    }

    /// A close was requested.
    pub fn closing(&self) -> bool {
        self.close_code.load(Ordering::Acquire) != 0
    }

    /// The close code once a close is requested; until then `Pending`, and `cx` is woken when
    /// one is. No future is kept per tunnel for this, only the waker slot in the handle.
    pub fn poll_close(&self, cx: &mut Context<'_>) -> Poll<u16> {
        if let Some(code) = self.code() {
            return Poll::Ready(code);
        }
        self.close.register(cx.waker());
        match self.code() {
            Some(code) => Poll::Ready(code),
            None => Poll::Pending,
        }
    }

    /// Resolves with the close code once a close is requested.
    pub async fn close_requested(&self) -> u16 {
        std::future::poll_fn(|cx| self.poll_close(cx)).await
    }

    fn code(&self) -> Option<u16> {
        match self.close_code.load(Ordering::Acquire) {
            0 => None,
            code => Some(code),
        }
    }
}

// === impl Registration ===

impl Registration {
    pub fn handle(&self) -> &Arc<TunnelHandle> {
        &self.handle
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
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
        crate::directory::shrink(&mut open.by_id);
        crate::directory::shrink(&mut open.by_room);
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
}
