//! Room hand-off (`docs/handoff.md`): the loop that moves rooms with their state, at most
//! `[handoff] concurrency` at once. A move holds the room's joins on this replica, stops its
//! sockets' client-to-backend relaying at a frame boundary, exports the state from the old owner
//! and imports it on the new one, records the new owner, closes the old sockets (1012) and lets
//! the joins go on, to the new owner, which has the state by then.

mod client;
mod fleet;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc};
use tokio_util::task::TaskTracker;

pub use client::{HandoffClient, MoveIds, State, StepError};
pub use fleet::FleetPauses;

use crate::backends::Backend;
use crate::config::{Handoff, OnHandoffFailure};
use crate::directory::Reassigned;
use crate::proxy::Gateway;

/// Rooms to move off one backend, spread over `spread`.
pub struct Batch {
    pub from: Arc<str>,
    pub rooms: Vec<String>,
    pub spread: Duration,
    /// The room must leave even if its hand-off fails (a drain deadline, a removal):
    /// `on_failure = "stay"` does not apply.
    pub forced: bool,
}

/// How one move ended, also the `outcome` label of `roomgate_handoffs_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The state went to the new owner.
    Moved,
    /// The old owner had nothing to hand over: a plain move.
    Empty,
    /// A step failed; the room moved without its state (`on_failure = "restart"`, or forced).
    Restarted,
    /// A step failed; the room stays on its old owner (`on_failure = "stay"`).
    Stayed,
    /// Nothing to do: the room has no other owner to go to, moved meanwhile, or is moving already.
    Skipped,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Moved => "moved",
            Outcome::Empty => "empty",
            Outcome::Restarted => "restarted",
            Outcome::Stayed => "stayed",
            Outcome::Skipped => "skipped",
        }
    }
}

/// Moves in progress and queued, for the admin status and `--wait`.
#[derive(Default)]
pub struct Progress {
    pub queued: AtomicU64,
    pub running: AtomicU64,
    pub done: AtomicU64,
}

/// The hand-off loop's handle: batches go in through [`Handoffs::submit`].
#[derive(Clone)]
pub struct Handoffs {
    batches: mpsc::UnboundedSender<Batch>,
    progress: Arc<Progress>,
    /// The last rebalance request acted on here, by any replica (unix ms; 0: none).
    rebalanced: Arc<AtomicU64>,
    /// The moves running now: a shutdown lets them end (see [`Handoffs::finish`]).
    running: TaskTracker,
}

impl Handoffs {
    /// The handle and the loop to spawn.
    pub fn new(gateway: Arc<Gateway>) -> (Handoffs, HandoffLoop) {
        let (batches, rx) = mpsc::unbounded_channel();
        let progress = Arc::new(Progress::default());
        let running = TaskTracker::new();
        let client = HandoffClient::new(gateway.snapshot().config.upstream.idle_timeout);
        let looper = HandoffLoop { gateway, rx, progress: progress.clone(), client, running: running.clone() };
        (Handoffs { batches, progress, rebalanced: Arc::new(AtomicU64::new(0)), running }, looper)
    }

    /// Queues the rooms of `batch` for a move with hand-off.
    pub fn submit(&self, batch: Batch) {
        self.progress.queued.fetch_add(batch.rooms.len() as u64, Ordering::AcqRel);
        let _ = self.batches.send(batch);
    }

    /// Queues the moves of a rebalance of the rooms live here, at most `max` (see
    /// [`rebalance_plan`]); returns how many were queued.
    pub fn rebalance(&self, gateway: &Gateway, snap: &crate::snapshot::Snapshot, max: usize) -> usize {
        let plan = rebalance_plan(gateway, snap, max);
        let queued = plan.iter().map(|(_, rooms)| rooms.len()).sum();
        for (from, rooms) in plan {
            self.submit(Batch { from, rooms, spread: snap.config.drain.spread, forced: false });
        }
        queued
    }

    /// Whether the rebalance asked for at `at_ms` (by any replica) is news here: true once per
    /// request.
    pub fn first_rebalance(&self, at_ms: u64) -> bool {
        self.rebalanced.swap(at_ms, Ordering::AcqRel) != at_ms
    }

    /// Resolves once the moves running now have ended; none starts after this is called (the
    /// queued ones are dropped with the hand-off loop). A move that a shutdown cut off after its
    /// export would leave the room on its old owner, exported and never given back, and the
    /// fleet's joins held until its lease passed. Each move is bounded by its lease and the
    /// close of its sockets; the caller bounds the whole by `[shutdown] grace`.
    pub async fn finish(&self) {
        self.running.close();
        let n = self.running.len();
        if n > 0 {
            tracing::info!(moves = n, "waiting for the hand-offs in flight to end");
        }
        self.running.wait().await;
    }

    /// (queued, running, done) moves.
    pub fn progress(&self) -> (u64, u64, u64) {
        let p = &self.progress;
        (p.queued.load(Ordering::Acquire), p.running.load(Ordering::Acquire), p.done.load(Ordering::Acquire))
    }
}

/// Runs the moves, batch after batch, each room when its turn in the spread comes.
pub struct HandoffLoop {
    gateway: Arc<Gateway>,
    rx: mpsc::UnboundedReceiver<Batch>,
    progress: Arc<Progress>,
    client: HandoffClient,
    running: TaskTracker,
}

impl HandoffLoop {
    pub async fn run(mut self) {
        // Sized for the largest `concurrency`; each move takes the permits the config in force
        // leaves it (see `start`).
        let slots = Arc::new(Semaphore::new(MAX_CONCURRENCY));
        while let Some(batch) = self.rx.recv().await {
            let gap = batch.spread.checked_div(batch.rooms.len().max(1) as u32).unwrap_or_default();
            for (i, room) in batch.rooms.into_iter().enumerate() {
                if i > 0 && !gap.is_zero() {
                    tokio::time::sleep(gap).await;
                }
                self.start(&slots, room, batch.from.clone(), batch.forced).await;
            }
        }
    }

    /// Starts one room's move once a slot is free.
    async fn start(&self, slots: &Arc<Semaphore>, room: String, from: Arc<str>, forced: bool) {
        let concurrency = self.gateway.snapshot().config.handoff.as_ref().map_or(1, |h| h.concurrency);
        let weight = (MAX_CONCURRENCY / concurrency.clamp(1, MAX_CONCURRENCY)) as u32;
        let Ok(permit) = slots.clone().acquire_many_owned(weight).await else { return };
        if self.running.is_closed() {
            return; // shutting down: no new move
        }
        let (gateway, client, progress) = (self.gateway.clone(), self.client.clone(), self.progress.clone());
        progress.queued.fetch_sub(1, Ordering::AcqRel);
        progress.running.fetch_add(1, Ordering::AcqRel);
        self.running.spawn(async move {
            move_with_state(&gateway, &client, &room, &from, forced).await;
            progress.running.fetch_sub(1, Ordering::AcqRel);
            progress.done.fetch_add(1, Ordering::AcqRel);
            drop(permit);
        });
    }
}

/// The largest `[handoff] concurrency`.
const MAX_CONCURRENCY: usize = 1024;

static MOVES: AtomicU64 = AtomicU64::new(0);

/// A unique id for a move: this process, its start and a counter.
fn move_id() -> String {
    let n = MOVES.fetch_add(1, Ordering::Relaxed);
    format!("{}-{}-{n}", std::process::id(), crate::clock::unix_ms())
}

/// Moves `room` off `from` to its placement owner, with its state. See the module's doc for the
/// sequence; [`Outcome`] for how it ends.
pub async fn move_with_state(
    gateway: &Gateway,
    client: &HandoffClient,
    room: &str,
    from: &Arc<str>,
    forced: bool,
) -> Outcome {
    let snap = gateway.snapshot();
    let Some(settings) = snap.config.handoff.clone() else {
        return plain_move(gateway, room, from).await;
    };
    let (Some(old), Some(to)) = (snap.backend(from).cloned(), snap.place_new(room.as_bytes()).cloned()) else {
        return Outcome::Skipped;
    };
    if to.id == *from || gateway.directory().owner(room).is_some_and(|o| *o != **from) {
        return Outcome::Skipped;
    }
    let Some(held) = gateway.moving().begin(room) else { return Outcome::Skipped };
    // The fleet's joins wait while the lease lasts: both steps, and the time to record the move.
    let lease = 2 * settings.timeout + Duration::from_secs(2);
    let lease_ends = Instant::now() + lease;
    if !gateway.directory().begin_move(room, from, lease).await {
        tracing::info!(room, from = %from, "another replica is handing this room off, or has moved it; left to it");
        return Outcome::Skipped;
    }
    let started = Instant::now();
    let id = move_id();
    let ids = MoveIds { room, from, to: &to.id, id: &id };
    let paused = gateway.tunnels().pause_room(room, from);
    let handed = hand_over(gateway, client, &settings, (&old, &to), &ids, &paused).await;
    let stay = settings.on_failure == OnHandoffFailure::Stay && !forced;
    // The state is kept until the move is recorded: its old owner gets it back if it is not.
    let (state, handed) = split_state(handed);
    let outcome = outcome_of(gateway, handed, stay, &ids);
    let outcome = match outcome {
        Outcome::Stayed => outcome,
        // The lease holds the fleet's joins until it ends: the move may be recorded until then.
        _ => match record(gateway, room, from, &to, lease_ends).await {
            Reassigned::Moved => outcome,
            // Another replica moved it elsewhere, or Redis still rebuilds past the lease: the
            // room stays. Its old owner exported it (and may drop an exported copy once its
            // sockets close): it gets its state back before they resume.
            not_moved => {
                give_back(gateway, client, &settings, &old, &ids, state.as_ref(), not_moved).await;
                Outcome::Stayed
            }
        },
    };
    let moved = matches!(outcome, Outcome::Moved | Outcome::Empty | Outcome::Restarted);
    // Resumes the sockets of a room that stays. Those of a moved room were asked to close (1012)
    // and stay held through their close handshake: nothing they held reaches the old owner.
    drop(paused);
    if moved {
        // The joins wait until the old owner no longer serves any socket of the room.
        gateway.tunnels().wait_room_gone(room, from, gateway.close_bound()).await;
    }
    gateway.directory().end_move(room, from, moved).await;
    drop(held);
    gateway.metrics().handoff(outcome.as_str(), started.elapsed());
    tracing::info!(room, from = %from, to = %to.id, move_id = id, outcome = outcome.as_str(), took = ?started.elapsed(), "room handed off");
    outcome
}

/// A move whose steps ran but that could not be recorded: the room stays on its old owner, which
/// exported it (an app may drop an exported copy once its sockets close) and so gets its state
/// back, imported as from a move, before the room's sockets resume.
async fn give_back(
    gateway: &Gateway,
    client: &HandoffClient,
    settings: &Handoff,
    old: &Backend,
    ids: &MoveIds<'_>,
    state: Option<&State>,
    directory: Reassigned,
) {
    let MoveIds { room, from, to, id } = *ids;
    tracing::warn!(
        room,
        from,
        to,
        move_id = id,
        ?directory,
        "the move could not be recorded: the room stays on its old owner"
    );
    gateway.metrics().handoff_failed("record");
    if let Some(state) = state {
        let back = MoveIds { to: from, ..*ids };
        if let Err(e) = client.import(settings, old, &back, state).await {
            tracing::warn!(room, backend = from, move_id = id, error = %e, "the state could not be given back to its old owner");
        }
    }
}

/// The state handed over, and the steps' result with its size only.
fn split_state(handed: Result<Option<State>, StepError>) -> (Option<State>, Result<Option<usize>, StepError>) {
    match handed {
        Ok(state) => {
            let bytes = state.as_ref().map(|s| s.body.len());
            (state, Ok(bytes))
        }
        Err(e) => (None, Err(e)),
    }
}

/// Records `to` as the room's owner, again while the shared directory takes no move (Redis lost
/// its data and is being rebuilt) and `until` (the lease's end) is not reached.
async fn record(gateway: &Gateway, room: &str, from: &str, to: &Arc<Backend>, until: Instant) -> Reassigned {
    loop {
        match gateway.move_room(room, from, to).await {
            Reassigned::Wait(wait) if Instant::now() + wait < until => tokio::time::sleep(wait).await,
            done => return done,
        }
    }
}

/// What the hand-off steps came to, counted and logged: `stay`, a failure keeps the room.
fn outcome_of(gateway: &Gateway, handed: Result<Option<usize>, StepError>, stay: bool, ids: &MoveIds<'_>) -> Outcome {
    match handed {
        Ok(Some(bytes)) => {
            gateway.metrics().handoff_state(bytes);
            Outcome::Moved
        }
        Ok(None) => Outcome::Empty,
        Err(e) => {
            let outcome = if stay { Outcome::Stayed } else { Outcome::Restarted };
            let MoveIds { room, from, to, id } = ids;
            tracing::warn!(room, from, to, move_id = id, error = %e, outcome = outcome.as_str(), "room hand-off failed");
            gateway.metrics().handoff_failed(e.step());
            outcome
        }
    }
}

/// Waits for the room's sockets to stop at a frame boundary and exports its state (within one
/// `timeout` for both), then imports it (within another). `Some(state)`: the state moved.
async fn hand_over(
    gateway: &Gateway,
    client: &HandoffClient,
    settings: &Handoff,
    (old, to): (&Backend, &Backend),
    ids: &MoveIds<'_>,
    paused: &crate::relay::Paused,
) -> Result<Option<State>, StepError> {
    let deadline = tokio::time::Instant::now() + settings.timeout;
    // This replica's sockets of the room, and the other replicas' (shared directory).
    let stopped = async {
        paused.stopped().await;
        gateway.directory().fleet_paused(ids.room, ids.from).await;
    };
    if tokio::time::timeout_at(deadline, stopped).await.is_err() {
        return Err(StepError::Pause(settings.timeout));
    }
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let state = client.export(settings, left, old, ids).await?;
    let Some(state) = state else { return Ok(None) };
    client.import(settings, to, ids, &state).await?;
    Ok(Some(state))
}

/// A move without hand-off configured: today's move (the room restarts empty on its new owner).
async fn plain_move(gateway: &Gateway, room: &str, from: &Arc<str>) -> Outcome {
    let snap = gateway.snapshot();
    let Some(to) = snap.place_new(room.as_bytes()).cloned() else { return Outcome::Skipped };
    if to.id == *from {
        return Outcome::Skipped;
    }
    match gateway.move_room(room, from, &to).await {
        Reassigned::Moved => Outcome::Restarted,
        _ => Outcome::Skipped,
    }
}

/// The live rooms that a rebalance moves, by current owner: those whose placement owner is
/// another backend that takes new rooms, at most `max` in all.
pub fn rebalance_plan(gateway: &Gateway, snap: &crate::snapshot::Snapshot, max: usize) -> Vec<(Arc<str>, Vec<String>)> {
    let mut left = max;
    let mut plan = Vec::new();
    for backend in snap.backends.iter() {
        if left == 0 {
            break;
        }
        let rooms: Vec<String> = gateway
            .directory()
            .live_rooms_on(&backend.id)
            .into_iter()
            .filter(|room| snap.place_new(room.as_bytes()).is_some_and(|to| to.id != backend.id))
            .take(left)
            .collect();
        left -= rooms.len();
        if !rooms.is_empty() {
            plan.push((backend.id.clone(), rooms));
        }
    }
    plan
}
