//! What the Redis directory counts of its own work (round trips by purpose, failures, time spent
//! placing rooms), and the status and metrics figures it reports from them and from the fleet.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::{RedisDirectory, lock};
use crate::directory::{DirectoryCalls, DirectoryMetrics, SharedStatus};

/// Redis round trips by purpose, and time spent placing rooms.
#[derive(Default)]
pub(super) struct Calls {
    pub(super) place: AtomicU64,
    pub(super) place_micros: AtomicU64,
    pub(super) reassign: AtomicU64,
    pub(super) refresh: AtomicU64,
    /// One per bucket per sync (`scripts.rs`, HEARTBEAT).
    pub(super) heartbeat: AtomicU64,
    pub(super) release: AtomicU64,
    pub(super) confirm: AtomicU64,
    pub(super) sync: AtomicU64,
    pub(super) read: AtomicU64,
    pub(super) errors: AtomicU64,
}

impl Calls {
    fn snapshot(&self) -> DirectoryCalls {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DirectoryCalls {
            place: n(&self.place),
            reassign: n(&self.reassign),
            refresh: n(&self.refresh),
            heartbeat: n(&self.heartbeat),
            release: n(&self.release),
            confirm: n(&self.confirm),
            sync: n(&self.sync),
            read: n(&self.read),
            errors: n(&self.errors),
        }
    }
}

impl RedisDirectory {
    pub(super) fn shared_status(&self) -> SharedStatus {
        let fleet = lock(&self.fleet).clone();
        let rebuilding_ms = lock(&self.rebuilding_until)
            .map(|until| until.saturating_duration_since(Instant::now()).as_millis() as u64)
            .filter(|ms| *ms > 0);
        SharedStatus {
            replica: self.settings.replica.clone(),
            reachable: self.is_up(),
            rebuilding_ms,
            error: lock(&self.last_error).clone(),
            max_rooms: self.local.max_rooms(),
            over_cap: self.local.over_cap(),
            fleet_live_rooms: fleet.live_rooms,
            fleet_split_rooms: fleet.splits,
            replicas: fleet.replicas,
            calls: self.calls.snapshot(),
        }
    }

    pub(super) fn metrics_figures(&self) -> DirectoryMetrics {
        let fleet = lock(&self.fleet);
        DirectoryMetrics {
            up: self.is_up(),
            calls: self.calls.snapshot(),
            place_seconds: self.calls.place_micros.load(Ordering::Relaxed) as f64 / 1e6,
            fleet_live_rooms: fleet.live_rooms,
            fleet_split_rooms: fleet.splits,
        }
    }
}
