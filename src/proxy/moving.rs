//! Rooms being handed off on this replica: their joins (requests and sockets) wait here until the
//! move ends, so that they reach the new owner once it has the room's state. Cheap when nothing
//! moves: one atomic load per request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::lock::lock;

/// The rooms moving now.
#[derive(Default)]
pub struct Moving {
    count: AtomicUsize,
    rooms: Mutex<HashMap<Box<str>, watch::Sender<()>>>,
}

/// A room's move in progress; its joins are held until it is dropped.
pub struct MoveGuard {
    moving: Arc<Moving>,
    room: Box<str>,
}

impl Moving {
    /// Starts holding the joins of `room`. `None`: it is moving already.
    pub fn begin(self: &Arc<Self>, room: &str) -> Option<MoveGuard> {
        let mut rooms = lock(&self.rooms);
        if rooms.contains_key(room) {
            return None;
        }
        rooms.insert(room.into(), watch::Sender::new(()));
        self.count.fetch_add(1, Ordering::AcqRel);
        Some(MoveGuard { moving: self.clone(), room: room.into() })
    }

    /// Rooms moving now.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits while `room` moves, for at most `limit`. True if it waited.
    pub async fn wait(&self, room: &str, limit: Duration) -> bool {
        if self.is_empty() {
            return false;
        }
        let Some(mut ended) = lock(&self.rooms).get(room).map(watch::Sender::subscribe) else { return false };
        // `changed` fails once the guard drops its sender: the move has ended.
        let _ = tokio::time::timeout(limit, ended.changed()).await;
        true
    }
}

impl Drop for MoveGuard {
    fn drop(&mut self) {
        if lock(&self.moving.rooms).remove(&self.room).is_some() {
            self.moving.count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn joins_wait_until_the_move_ends_and_no_longer_than_the_limit() {
        let moving = Arc::new(Moving::default());
        assert!(!moving.wait("a", Duration::from_secs(5)).await, "nothing moves: no wait");
        let guard = moving.begin("a").unwrap();
        assert!(moving.begin("a").is_none(), "one move of a room at a time");
        assert!(!moving.wait("b", Duration::from_secs(5)).await, "another room does not wait");
        let waiter = tokio::spawn({
            let moving = moving.clone();
            async move { moving.wait("a", Duration::from_secs(30)).await }
        });
        tokio::task::yield_now().await;
        drop(guard);
        let waited = tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap();
        assert!(waited);
        assert!(moving.is_empty());
        let _guard = moving.begin("a").unwrap();
        let started = std::time::Instant::now();
        assert!(moving.wait("a", Duration::from_millis(50)).await);
        assert!(started.elapsed() < Duration::from_secs(5), "bounded by its limit");
    }
}
