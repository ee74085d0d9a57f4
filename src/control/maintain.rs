//! The maintenance loop, every 250 ms: expires idle rooms, idle sockets and idle upstream
//! connections, moves the rooms still live on a backend at its drain deadline, counts rooms found
//! on two backends, and drops removed backends once they are empty.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::handoff::{Batch, Handoffs};
use crate::backends::Backend;
use crate::directory::Retention;
use crate::proxy::Gateway;
use crate::snapshot::{Publisher, Snapshot};

/// How often idle rooms are expired and drains are advanced.
const TICK: Duration = Duration::from_millis(250);

pub struct Maintenance {
    pub gateway: Arc<Gateway>,
    pub publisher: Arc<Publisher>,
    /// Times a room was seen with open sockets on two backends at once (must stay 0).
    pub splits: Arc<AtomicU64>,
    /// Moves with hand-off, for drain deadlines when `[handoff]` is configured.
    handoffs: Handoffs,
    /// Drains whose deadline has been acted on: (backend, drain start).
    closed_drains: HashSet<(Arc<str>, Instant)>,
    /// Rooms found split at the last check, so that each split is counted once.
    split_now: HashSet<Box<str>>,
}

/// Live rooms and open sockets of a backend.
pub fn load_of(gateway: &Gateway, backend: &Backend) -> (usize, u64) {
    (gateway.directory().live_rooms_on(&backend.id).len(), backend.open_sockets())
}

impl Maintenance {
    pub fn new(
        gateway: Arc<Gateway>,
        publisher: Arc<Publisher>,
        splits: Arc<AtomicU64>,
        handoffs: Handoffs,
    ) -> Maintenance {
        Maintenance { gateway, publisher, splits, handoffs, closed_drains: HashSet::new(), split_now: HashSet::new() }
    }

    /// Runs the maintenance tick until the task is dropped.
    pub async fn run(mut self) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.tick();
        }
    }

    fn tick(&mut self) {
        let snap = self.gateway.snapshot();
        self.expire(&snap);
        self.act_on_drain_deadlines(&snap);
        self.check_splits();
        self.drop_drained(&snap);
    }

    /// Expires idle rooms, closes idle sockets (1001) and idle upstream connections.
    fn expire(&self, snap: &Snapshot) {
        let closed = self.gateway.sweep_idle_upstream();
        if closed > 0 {
            tracing::debug!(connections = closed, "idle upstream connections closed");
        }
        let draining = |id: &str| snap.backend(id).is_some_and(|b| b.is_draining());
        let expired = self.gateway.directory().sweep(&Retention::from_config(&snap.config), &draining);
        if expired > 0 {
            tracing::debug!(rooms = expired, "idle rooms expired");
        }
        if let Some(idle) = snap.config.timeouts.websocket_idle {
            let closed = self.gateway.tunnels().close_idle(idle);
            if closed > 0 {
                tracing::debug!(websockets = closed, after = ?idle, "idle websockets closed (1001)");
            }
        }
    }

    /// Moves the rooms still live on each backend whose drain deadline has passed, once per drain.
    fn act_on_drain_deadlines(&mut self, snap: &Snapshot) {
        let now = Instant::now();
        for backend in snap.backends.iter().chain(snap.retiring.iter()) {
            if let Some(d) = backend.drain()
                && now >= d.deadline
                && self.closed_drains.insert((backend.id.clone(), d.started))
            {
                let rooms = self.gateway.directory().live_rooms_on(&backend.id);
                tracing::info!(backend = %backend.id, rooms = rooms.len(), "drain deadline: moving the rooms still live");
                let (from, spread) = (backend.id.clone(), snap.config.drain.spread);
                if snap.config.handoff.is_some() {
                    // They leave whatever their hand-off does: `on_failure = "stay"` ends here.
                    self.handoffs.submit(Batch { from, rooms, spread, forced: true });
                } else {
                    let gateway = self.gateway.clone();
                    tokio::spawn(async move { move_rooms(&gateway, from, rooms, spread).await });
                }
            }
        }
    }

    /// Counts the rooms whose open sockets (not being closed) reach two backends. By
    /// construction there are none; this is the independent check behind the metric.
    fn check_splits(&mut self) {
        let found: HashSet<Box<str>> = self.gateway.tunnels().split_rooms().into_iter().collect();
        for room in found.difference(&self.split_now) {
            self.splits.fetch_add(1, Ordering::Relaxed);
            tracing::error!(room = &**room, "room live on two backends");
        }
        self.split_now = found;
    }

    /// Drops removed backends that hold no live room and no socket any more.
    fn drop_drained(&self, snap: &Snapshot) {
        let empty = |b: &&Arc<Backend>| load_of(&self.gateway, b) == (0, 0);
        let done: Vec<Arc<str>> = snap.retiring.iter().filter(empty).map(|b| b.id.clone()).collect();
        if !done.is_empty() {
            self.publisher.update(|current| (current.without_retired(&done), ()));
            tracing::info!(backends = ?done, "removed backends drained; dropped");
        }
    }
}

/// Moves each room to its next owner and closes its sockets (1012), spread evenly over
/// `spread` so that the reconnects do not all arrive at once.
async fn move_rooms(gateway: &Gateway, from: Arc<str>, rooms: Vec<String>, spread: Duration) {
    let gap = spread.checked_div(rooms.len().max(1) as u32).unwrap_or_default();
    for (i, room) in rooms.iter().enumerate() {
        if i > 0 && !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
        let snap = gateway.snapshot();
        let Some(to) = snap.place_new(room.as_bytes()).cloned() else { continue };
        if to.id != from {
            gateway.move_room(room, &from, &to).await;
        }
    }
}
