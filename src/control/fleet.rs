//! The fleet sync loop (shared directories only): every `[directory] refresh` it publishes this
//! replica's live rooms, applies drains started by other replicas (and moves the rooms live here
//! of those with hand-off), and moves the sockets of rooms whose fleet owner is another backend.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::drain::Drains;
use super::handoff::{Batch, Handoffs};
use crate::clock::unix_ms;
use crate::config::Directory;
use crate::directory::{AWAY_POLL, ReplicaState};
use crate::proxy::Gateway;
use crate::snapshot::Snapshot;

pub struct FleetSync {
    pub gateway: Arc<Gateway>,
    pub drains: Arc<Drains>,
    pub handoffs: Handoffs,
    /// Completed syncs, for whoever waits on one.
    pub syncs: watch::Sender<u64>,
}

impl FleetSync {
    /// Syncs until the task is dropped, or at once returns without a shared directory.
    pub async fn run(self) {
        loop {
            let snap = self.gateway.snapshot();
            let Directory::Redis { refresh, .. } = snap.config.directory else { return };
            let reached = self.sync_once(&snap, refresh).await;
            self.syncs.send_modify(|n| *n += 1);
            // While the store is away, look for it more often, so that the fleet's directory is
            // rebuilt within one refresh period of its return.
            let pause = if reached { refresh } else { (refresh / 4).min(AWAY_POLL) };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = self.gateway.directory().sync_wanted() => {}
            }
        }
    }

    /// One sync; false if the store could not be reached.
    async fn sync_once(&self, snap: &Snapshot, refresh: Duration) -> bool {
        let me = ReplicaState { epoch: snap.epoch, backends: snap.backends.iter().map(|b| b.id.clone()).collect() };
        let Some(report) = self.gateway.directory().sync(&me).await else { return false };
        self.apply_fleet_drains(&report.drains, refresh);
        self.apply_fleet_handoffs(&report.handoffs);
        if let Some((at_ms, max_moves)) = report.rebalance {
            self.apply_fleet_rebalance(at_ms, max_moves);
        }
        for (room, from, to) in report.moved {
            let closed = self.gateway.close_moved(&room, &from);
            tracing::warn!(room, from = %from, to = %to, sockets_closed = closed, "the fleet holds this room on another backend: its sockets here move there");
            if snap.backend(&to).is_none() {
                tracing::error!(room, owner = %to, "the fleet's owner of a room is not in this replica's config");
            }
        }
        true
    }

    /// Moves the rooms live here on each backend drained with hand-off by any replica, once per
    /// request: the replica that got the request sees only its own live rooms.
    fn apply_fleet_handoffs(&self, handoffs: &HashMap<String, u64>) {
        let snap = self.gateway.snapshot();
        if snap.config.handoff.is_none() {
            return;
        }
        for (id, &at_ms) in handoffs {
            // A backend not draining here (not in this config, or its drain not applied yet)
            // is looked at again at the next sync.
            let Some(backend) = snap.backend(id).filter(|b| b.is_draining()) else { continue };
            if !self.drains.first_handoff(&backend.id, at_ms) {
                continue;
            }
            let rooms = self.gateway.directory().live_rooms_on(id);
            tracing::info!(
                backend = id,
                rooms = rooms.len(),
                "drain with hand-off asked for through another replica: moving the rooms live here"
            );
            if !rooms.is_empty() {
                let batch = Batch { from: backend.id.clone(), rooms, spread: snap.config.drain.spread, forced: false };
                self.handoffs.submit(batch);
            }
        }
    }

    /// Moves the rooms live here whose placement owner is another backend, once per rebalance
    /// request of any replica.
    fn apply_fleet_rebalance(&self, at_ms: u64, max_moves: Option<usize>) {
        let snap = self.gateway.snapshot();
        if snap.config.handoff.is_none() || !self.handoffs.first_rebalance(at_ms) {
            return;
        }
        let queued = self.handoffs.rebalance(&self.gateway, &snap, max_moves.unwrap_or(usize::MAX));
        tracing::info!(rooms = queued, "rebalance asked for through another replica: moving the rooms live here");
    }

    /// Makes this replica's drains match the fleet's, except for backends drained or undrained
    /// here lately (their change may still be on its way) and backends leaving the config.
    fn apply_fleet_drains(&self, drains: &HashMap<String, u64>, refresh: Duration) {
        let snap = self.gateway.snapshot();
        let now_ms = unix_ms();
        let recent = self.drains.changed_lately(3 * refresh);
        for backend in snap.backends.iter() {
            if recent.contains(&backend.id) || backend.drain().is_some_and(|d| d.removed) {
                continue;
            }
            match (drains.get(&*backend.id), backend.drain()) {
                (Some(&ms), current) => {
                    let left = Duration::from_millis(ms.saturating_sub(now_ms));
                    let wanted = Instant::now() + left;
                    let off =
                        current.map(|d| if d.deadline > wanted { d.deadline - wanted } else { wanted - d.deadline });
                    // A deadline passed here and in the fleet is the same drain, however long ago.
                    let both_past = left.is_zero() && current.is_some_and(|d| d.deadline <= Instant::now());
                    if !both_past && off.is_none_or(|off| off > Duration::from_secs(1)) {
                        backend.set_draining(left, false);
                        tracing::info!(backend = %backend.id, deadline_in = ?left, "drain started by another replica");
                    }
                }
                (None, Some(_)) => {
                    backend.set_active();
                    tracing::info!(backend = %backend.id, "drain ended by another replica");
                }
                (None, None) => {}
            }
        }
    }
}
