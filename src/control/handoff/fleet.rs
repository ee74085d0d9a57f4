//! Other replicas' hand-offs, as the shared directory tells them. While one runs, this replica
//! holds the room's joins and pauses its own sockets of the room on the old owner, and says so
//! once they have stopped at a frame boundary; when it ends, it closes them (1012) if the room
//! moved, or lets them go on if it stayed. A move that never ends here is over at its lease.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::directory::FleetMove;
use crate::proxy::{Gateway, MoveGuard};
use crate::relay::Paused;

/// The loop that follows the fleet's moves.
pub struct FleetPauses {
    pub gateway: Arc<Gateway>,
    pub events: mpsc::Receiver<FleetMove>,
}

impl FleetPauses {
    pub async fn run(mut self) {
        // Moves in progress, by room: their end goes to the task that holds them.
        let mut running: HashMap<String, oneshot::Sender<bool>> = HashMap::new();
        while let Some(event) = self.events.recv().await {
            running.retain(|_, ended| !ended.is_closed());
            match event {
                FleetMove::Begin { room, from, lease } => {
                    let (ended, end) = oneshot::channel();
                    // A pause of the room still followed here (its end was missed) ends now.
                    running.insert(room.clone(), ended);
                    tokio::spawn(follow(self.gateway.clone(), room, from, lease, end));
                }
                FleetMove::End { room, moved, .. } => {
                    if let Some(ended) = running.remove(&room) {
                        let _ = ended.send(moved);
                    }
                }
            }
        }
    }
}

/// Follows another replica's move of `room` off `from`: holds the room's joins and pauses its
/// sockets here, then [`Pause::follow`]s it to its end.
///
/// The room may be held here already: this replica began a move of its own of the room (both
/// acted on one shared drain or rebalance), which the other won; it gives up once Redis refuses
/// it the lease, a round trip later. The pause waits for that hold to end rather than skip the
/// move: without its acknowledgement, the other replica's move would fail its pause step and the
/// room restart empty.
async fn follow(gateway: Arc<Gateway>, room: String, from: String, lease: Duration, mut end: oneshot::Receiver<bool>) {
    let deadline = tokio::time::Instant::now() + lease;
    let held = loop {
        if let Some(held) = gateway.moving().begin(&room) {
            break held;
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return;
        }
        tokio::select! {
            // The move ended, or a later one of the room replaced it, before it could be followed.
            _ = &mut end => return,
            _ = gateway.moving().wait(&room, left) => {}
        }
    };
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let paused = gateway.tunnels().pause_room(&room, &from);
    Pause { gateway, room, from, held, paused }.follow(left, end).await;
}

/// One room held and paused here for another replica's move.
struct Pause {
    gateway: Arc<Gateway>,
    room: String,
    from: String,
    held: MoveGuard,
    paused: Paused,
}

impl Pause {
    /// Acknowledges once the room's sockets here have stopped, then waits for the move's end
    /// (at most `lease`).
    async fn follow(self, lease: Duration, end: oneshot::Receiver<bool>) {
        let directory = self.gateway.directory();
        let acked = async {
            self.paused.stopped().await;
            directory.ack_move(&self.room).await;
            std::future::pending::<()>().await
        };
        let moved = tokio::select! {
            moved = end => moved.unwrap_or(false),
            () = acked => false,
            () = tokio::time::sleep(lease) => false,
        };
        if moved {
            // The local record follows the fleet's, then the sockets on the old owner close.
            directory.confirm(&self.room, &Arc::from(self.from.as_str())).await;
            let closed = self.gateway.close_moved(&self.room, &self.from);
            tracing::info!(
                room = self.room,
                from = self.from,
                sockets_closed = closed,
                "room handed off by another replica"
            );
        }
        drop(self.paused);
        drop(self.held);
    }
}

#[cfg(test)]
mod tests;
