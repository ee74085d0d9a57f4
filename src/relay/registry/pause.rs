//! Pausing a room's tunnels for a hand-off: client-to-backend relaying stops at a frame boundary
//! while backend-to-client flows on, until the pause ends.
//!
//! A tunnel counts as stopped once its backend has read everything relayed to it: the relay
//! sends it a ping at the boundary and reports the stop when the pong with that ping's token
//! comes back (`Pump::client_held`). Written is not read: a message may still wait in the
//! backend's socket, and an app that read it after answering the export would append it to a
//! copy it has handed over.
//!
//! Each handle keeps one word: how many pauses cover it, whether its relay reported it stopped,
//! and whether it ended. The relay loads the word once per poll (one atomic load when no pause
//! was asked for), holds the client's stream while the count is above zero, and reports when the
//! stream has stopped at a frame boundary. Waiters are woken through one process-wide signal: a
//! pause is rare (one per room move), so a spurious wake costs a recheck of a few handles, and a
//! tunnel pays no byte for it.
//!
//! While paused:
//! - the client's frames, control frames included, wait unread in its socket (TCP back-pressure;
//!   no buffer is added), and reach the backend in order once the pause ends;
//! - a close request works as without a pause: the client gets its close frame, the backend
//!   roomgate's 1001 at once (the stream is at a boundary), and what the client sent during the
//!   pause is read and dropped until its close reply. A tunnel asked to close stays held when
//!   the pause ends, so this holds even if its relay sees the request only after that;
//! - the tunnel is not idle ([`super::Tunnels::close_idle`] skips it), and the end of the pause
//!   counts as activity: a pause of a few seconds never gets a socket closed as idle.
//!
//! A pause covers the tunnels of its room on its backend that are open when it begins, and those
//! registered while it lasts: a socket whose handshake was on its way to the old owner when a
//! hand-off began opens paused, so nothing its client sends reaches that owner after the export.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::{Open, TunnelHandle, Tunnels};
use crate::lock::lock;

/// Bits of the pause word: the number of pauses covering the tunnel.
const COUNT: u32 = (1 << 30) - 1;
/// The relay reported its client stream stopped at a frame boundary.
const STOPPED: u32 = 1 << 30;
/// The tunnel ended (its registration was dropped).
const ENDED: u32 = 1 << 31;

/// Woken whenever a paused tunnel stops or ends.
static STOPS: Notify = Notify::const_new();

/// The tunnels of one room on one backend, paused by [`Tunnels::pause_room`]. Dropping it resumes
/// them, so a hand-off that fails, times out or is cancelled never leaves a socket paused.
#[must_use = "dropping a pause resumes its tunnels at once"]
pub struct Paused {
    registry: Arc<Tunnels>,
    room: Box<str>,
    group: Arc<Group>,
}

/// The tunnels one pause covers; listed in the registry by room while the pause lasts, so that a
/// tunnel registered meanwhile joins it.
pub(super) struct Group {
    backend: Arc<str>,
    covered: Mutex<Vec<Arc<TunnelHandle>>>,
}

/// Called by `register`, under the registry's lock: the new tunnel joins the pauses of its room
/// on its backend. Its relay has not started, so it stops before it reads anything.
pub(super) fn join_pauses(open: &Open, room: &str, handle: &Arc<TunnelHandle>) {
    for group in open.pauses.get(room).into_iter().flatten().filter(|g| g.backend == handle.backend) {
        handle.pause.fetch_add(1, Ordering::AcqRel);
        lock(&group.covered).push(handle.clone());
    }
}

// === impl Tunnels ===

impl Tunnels {
    /// Pauses every open tunnel of `room` to `backend` that is not closing, and every one
    /// registered until the pause ends: each relays the client's frame in flight to its end, then
    /// stops reading the client; the backend's stream flows on. Wait for them with
    /// [`Paused::stopped`]; close them (1012: [`Tunnels::close_room`]) or let them go on
    /// ([`Paused::resume`], or drop).
    pub fn pause_room(self: &Arc<Self>, room: &str, backend: &str) -> Paused {
        let mut open = self.lock();
        let tunnels: Vec<Arc<TunnelHandle>> = match open.by_room.get(room) {
            Some(ids) => ids
                .iter()
                .filter_map(|id| open.by_id.get(id))
                .filter(|h| &*h.backend == backend && !h.closing())
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        for h in &tunnels {
            h.pause.fetch_add(1, Ordering::AcqRel);
        }
        let group = Arc::new(Group { backend: backend.into(), covered: Mutex::new(tunnels.clone()) });
        open.pauses.entry(room.into()).or_default().push(group.clone());
        drop(open);
        for h in &tunnels {
            h.waker.wake();
        }
        Paused { registry: self.clone(), room: room.into(), group }
    }
}

// === impl Paused ===

impl Paused {
    /// How many tunnels the pause covers.
    pub fn len(&self) -> usize {
        lock(&self.group.covered).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every tunnel has stopped at a frame boundary (what it relayed of the client has been read
    /// by the backend, which answered a ping sent after it, and nothing more will be relayed
    /// until the pause ends), or has ended.
    pub fn is_stopped(&self) -> bool {
        lock(&self.group.covered).iter().all(|h| h.pause.load(Ordering::Acquire) & (STOPPED | ENDED) != 0)
    }

    /// Resolves once [`Paused::is_stopped`]; at once for a room with no tunnels. A client that
    /// stalls in the middle of a frame, or a backend that does not answer the ping, keeps its
    /// tunnel from stopping: the caller bounds the wait.
    pub async fn stopped(&self) {
        loop {
            let notified = STOPS.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check: a stop reported in between still wakes this wait.
            notified.as_mut().enable();
            if self.is_stopped() {
                return;
            }
            notified.await;
        }
    }

    /// Relays the client streams again (the hand-off failed and the room stays). The same as
    /// dropping the pause; tunnels closed meanwhile close as they would have.
    pub fn resume(self) {}
}

impl Drop for Paused {
    fn drop(&mut self) {
        // Out of the registry first: no tunnel joins after this, so the list below is whole.
        let mut open = self.registry.lock();
        if let Some(groups) = open.pauses.get_mut(&self.room) {
            groups.retain(|g| !Arc::ptr_eq(g, &self.group));
            if groups.is_empty() {
                open.pauses.remove(&self.room);
                crate::table::shrink(&mut open.pauses);
            }
        }
        drop(open);
        for h in lock(&self.group.covered).iter() {
            // A tunnel asked to close stays held: its relay may not have seen the request yet,
            // and must not pass on what its client sent meanwhile (a moved room's old owner has
            // handed its state over). Its close handshake reads and drops that instead.
            if h.closing() {
                continue;
            }
            // Activity first: the maintenance tick must not find it unpaused and idle before its
            // relay has read what its client sent meanwhile.
            h.touch();
            if h.pause.fetch_sub(1, Ordering::AcqRel) & COUNT == 1 {
                h.waker.wake();
            }
        }
    }
}

// === impl TunnelHandle ===

impl TunnelHandle {
    /// A pause covers the tunnel.
    pub fn is_paused(&self) -> bool {
        self.pause.load(Ordering::Acquire) & COUNT != 0
    }

    /// For the relay, once per poll: whether to hold the client's stream. The stop reported for
    /// a pause that has ended is cleared here, unless another pause came in meanwhile: a stop is
    /// only ever seen by a pause while the relay, since, has read nothing.
    pub(in crate::relay) fn hold_client(&self) -> bool {
        let mut word = self.pause.load(Ordering::Acquire);
        loop {
            if word & COUNT != 0 {
                return true;
            }
            if word & STOPPED == 0 {
                return false;
            }
            match self.pause.compare_exchange_weak(word, word & !STOPPED, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return false,
                Err(now) => word = now,
            }
        }
    }

    /// For the relay: its client stream has stopped at a frame boundary while held, and the
    /// backend has read what was relayed before.
    pub(in crate::relay) fn report_stopped(&self) {
        if self.pause.load(Ordering::Acquire) & STOPPED == 0 {
            self.pause.fetch_or(STOPPED, Ordering::AcqRel);
            STOPS.notify_waiters();
        }
    }

    /// The tunnel ended: a pause waiting for it counts it as stopped.
    pub(super) fn ended(&self) {
        if self.pause.fetch_or(ENDED, Ordering::AcqRel) & COUNT != 0 {
            STOPS.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests;
