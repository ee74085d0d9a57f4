//! A room's owner as the request path finds it: the directory's record, placement for a new
//! room, a move off an owner that is down or drained, and the wait while a move settles across
//! the fleet (`docs/replicas.md`, "One owner at a time").

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Gateway;
use crate::backends::Backend;
use crate::directory::{Placement, Reassigned};
use crate::error::BackendError;
use crate::relay::CLOSE_SERVICE_RESTART;
use crate::snapshot::Snapshot;

/// The longest a member waits for a moving room before it is refused (503, or 4503 on a djust
/// socket): longer than a claim lives (three `[directory] refresh` at the default 2 s), so that
/// only a fleet that cannot settle refuses.
const MAX_MOVE_WAIT: Duration = Duration::from_secs(10);
/// The first pause of a member waiting for a moving room, doubled up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_millis(200);

impl Gateway {
    /// The room's owner: the directory's while the room is live or lingering and its owner is up;
    /// otherwise the first backend of its placement order that takes new rooms. `socket`: for a
    /// WebSocket handshake (a shared directory records this replica's claim on the room).
    ///
    /// With a shared directory a member may have to wait: while the room moves, until no replica
    /// has sockets of it on the old owner, and while Redis rebuilds after losing its data. The
    /// wait is bounded ([`MAX_MOVE_WAIT`]); past it the request gets 503.
    pub(crate) async fn owner(&self, snap: &Snapshot, key: &str, socket: bool) -> Result<Arc<Backend>, BackendError> {
        let passive = snap.passive_only();
        let started = Instant::now();
        let mut pause = FIRST_PAUSE;
        // A join that waited is counted once (`roomgate_room_join_wait_seconds`).
        let mut counted = self.held_by_handoff(snap, key).await;
        // After a move, the fleet is asked (not this replica's own record) before joining.
        let mut moved = false;
        // Another request (or replica) may re-place the room between our look and our write; a
        // few rounds always settle it.
        let mut rounds = 0;
        while rounds < 4 {
            // `live` is asked of the directory only when it matters (a draining owner).
            let local = if moved { None } else { self.directory.owner(key) };
            let (owner, live) = match local {
                Some(id) => (id, None),
                None => {
                    let candidate = snap.place_new(key.as_bytes()).ok_or(BackendError::NoBackends)?;
                    let Placement { owner, live, wait } =
                        self.directory.place_if_absent(key, &candidate.id, socket).await;
                    if !wait.is_zero() {
                        self.hold_back(key, started, &mut pause, wait).await?;
                        continue;
                    }
                    (owner, Some(live))
                }
            };
            rounds += 1;
            if pause > FIRST_PAUSE && !counted {
                self.metrics.join_waited(started.elapsed());
                counted = true;
            }
            match snap.backend(&owner) {
                // A draining backend keeps its live rooms; an empty one moves.
                Some(b) if b.is_up(passive) && (!b.is_draining() || live.unwrap_or_else(|| self.is_live(key))) => {
                    return Ok(b.clone());
                }
                _ => {
                    let next = snap.place_new(key.as_bytes()).ok_or(BackendError::NoBackends)?;
                    if *next.id == *owner {
                        return Ok(next.clone());
                    }
                    match self.move_room(key, &owner, next).await {
                        Reassigned::Moved | Reassigned::Elsewhere => moved = true,
                        Reassigned::Wait(wait) => self.hold_back(key, started, &mut pause, wait).await?,
                    }
                }
            }
        }
        snap.place_new(key.as_bytes()).cloned().ok_or(BackendError::NoBackends)
    }

    /// Waits while the room is handed off here (`control::handoff`), for at most the two steps'
    /// timeouts and a second: then the new owner has the room's state. True if it waited.
    async fn held_by_handoff(&self, snap: &Snapshot, key: &str) -> bool {
        if self.moving.is_empty() {
            return false;
        }
        let steps = snap.config.handoff.as_ref().map_or(Duration::from_secs(5), |h| h.timeout);
        let started = Instant::now();
        let waited = self.moving.wait(key, 2 * steps + Duration::from_secs(1)).await;
        if waited {
            self.metrics.join_waited(started.elapsed());
        }
        waited
    }

    /// Waits before asking the directory again about a room a member may not join yet: at most
    /// `wait`, backing off from [`FIRST_PAUSE`] so that the members of a big room do not all ask
    /// at once. Fails once the member has waited [`MAX_MOVE_WAIT`].
    async fn hold_back(
        &self,
        key: &str,
        started: Instant,
        pause: &mut Duration,
        wait: Duration,
    ) -> Result<(), BackendError> {
        let waited = started.elapsed();
        if waited >= MAX_MOVE_WAIT {
            tracing::warn!(room = key, ?waited, "room still moving: the member is refused (503)");
            return Err(BackendError::RoomMoving { room: key.to_owned(), waited });
        }
        tokio::time::sleep(wait.min(*pause).min(MAX_MOVE_WAIT - waited)).await;
        *pause = (*pause * 2).min(MAX_PAUSE);
        Ok(())
    }

    fn is_live(&self, key: &str) -> bool {
        self.directory.get(key).is_some_and(|r| r.live)
    }

    /// Moves a room to `to` as a whole: the directory first, so reconnects land on `to`, then its
    /// sockets still open on the old owner are closed with 1012.
    pub async fn move_room(&self, key: &str, from: &str, to: &Arc<Backend>) -> Reassigned {
        let moved = self.directory.reassign(key, from, &to.id).await;
        if moved == Reassigned::Moved {
            let closed = self.close_moved(key, from);
            tracing::info!(room = key, from, to = %to.id, sockets_closed = closed, "room moved");
        }
        moved
    }

    /// Closes the sockets of a moved room still open on its old owner (1012), and once they (and
    /// handshakes on their way there) have all ended, releases this replica's claim on that owner
    /// in the shared directory: members held back by it may then join the new one. Returns how
    /// many sockets were asked to close.
    ///
    /// Until those sockets have ended (at most `timeouts.websocket_close` and a second), the
    /// room's joins here wait: a member that reconnects at once must not reach the new owner
    /// while the old one still serves the room's other sockets.
    pub fn close_moved(&self, key: &str, from: &str) -> usize {
        let closed = self.tunnels.close_room(key, from, CLOSE_SERVICE_RESTART);
        let directory = self.directory.clone();
        // A hand-off holds the room's joins itself, and waits for the same.
        let held = if closed > 0 { self.moving.begin(key) } else { None };
        let (tunnels, limit) = (self.tunnels.clone(), self.close_bound());
        let (key, from) = (key.to_owned(), from.to_owned());
        tokio::spawn(async move {
            if let Some(held) = held {
                tunnels.wait_room_gone(&key, &from, limit).await;
                drop(held);
            }
            directory.release(&key, &from).await
        });
        closed
    }

    /// The longest the sockets asked to close take to end: their close handshake's deadline.
    pub fn close_bound(&self) -> Duration {
        self.snapshot.peek().config.timeouts.websocket_close + Duration::from_secs(1)
    }
}
