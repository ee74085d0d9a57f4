//! The fleet as the Redis directory sees it: heartbeats, fleet-wide figures, and a room as every
//! replica holds it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use super::wire::{Beat, Claim, Rebalance, Record};
use super::{RedisDirectory, lock};
use crate::clock::unix_ms;
use crate::directory::{FleetClaim, FleetRoom, ReplicaSeen, ReplicaState};

/// What the heartbeat's pipeline read of the fleet's requests: drains, drains with hand-off,
/// the latest rebalance.
pub(super) type Heard = (HashMap<String, u64>, HashMap<String, u64>, Option<(u64, Option<usize>)>);

/// Fleet figures read by the last sync.
#[derive(Clone, Debug, Default)]
pub(super) struct Fleet {
    pub(super) live_rooms: u64,
    pub(super) splits: u64,
    /// Replicas whose heartbeat is recent, by id.
    pub(super) replicas: Vec<ReplicaSeen>,
}

impl RedisDirectory {
    /// Heartbeat and fleet reads in one pipeline; returns the drains in force and the drains
    /// with hand-off.
    pub(super) async fn heartbeat(&self, me: &ReplicaState) -> Option<Heard> {
        let now = unix_ms();
        let refresh_ms = self.settings.refresh.as_millis() as u64;
        let beat = Beat { epoch: me.epoch, seen_ms: now, backends: me.backends.iter().map(|b| &**b).collect() };
        let beat = beat.to_string();
        let replicas_key = self.key("replicas", "");
        let mut pipe = redis::pipe();
        pipe.cmd("HSET").arg(&replicas_key).arg(&self.settings.replica).arg(&beat).ignore();
        pipe.cmd("HGETALL").arg(&replicas_key);
        pipe.cmd("HGETALL").arg(self.key("drains", ""));
        pipe.cmd("HGETALL").arg(self.key("drain-handoffs", ""));
        pipe.cmd("GET").arg(self.key("rebalance", ""));
        pipe.cmd("GET").arg(self.key("splits", ""));
        // Redis may have lost its data: the rebuild window starts (or goes on). The refresh
        // before this re-asserted this replica's rooms (its script starts the window too).
        pipe.cmd("EVAL").arg(&self.scripts.rebuild).arg(0).arg(&self.settings.prefix).arg(self.rebuild_window_ms());
        type Reply =
            (HashMap<String, String>, HashMap<String, u64>, HashMap<String, u64>, Option<String>, Option<u64>, u64);
        let (beats, drains, handoffs, rebalance, splits, rebuilding): Reply =
            self.call(&self.calls.sync, async |c| pipe.query_async(c).await).await?;
        *lock(&self.rebuilding_until) =
            (rebuilding > 0).then(|| std::time::Instant::now() + std::time::Duration::from_millis(rebuilding));
        // Replicas gone for good leave the heartbeat hash (their `held` hashes have expired).
        let dead: Vec<&String> = beats
            .iter()
            .filter(|(_, beat)| Beat::parse(beat).is_none_or(|b| b.age(now) > self.ttl_ms().max(10 * refresh_ms)))
            .map(|(replica, _)| replica)
            .collect();
        if !dead.is_empty() {
            let mut cmd = redis::cmd("HDEL");
            cmd.arg(&replicas_key).arg(&dead);
            self.call(&self.calls.sync, async |c| cmd.query_async::<i64>(c).await).await?;
        }
        let live_rooms = self.fleet_live_rooms(&beats).await;
        let mut replicas: Vec<ReplicaSeen> = beats
            .iter()
            .filter_map(|(replica, beat)| {
                let Beat { epoch, seen_ms, backends } = Beat::parse(beat)?;
                let seen_ms_ago = now.saturating_sub(seen_ms);
                (seen_ms_ago <= 3 * refresh_ms).then(|| ReplicaSeen {
                    replica: replica.clone(),
                    epoch,
                    backends: backends.into_iter().map(str::to_owned).collect(),
                    seen_ms_ago,
                })
            })
            .collect();
        replicas.sort_by(|a, b| a.replica.cmp(&b.replica));
        let mut fleet = lock(&self.fleet);
        *fleet = Fleet { live_rooms: live_rooms.unwrap_or(fleet.live_rooms), splits: splits.unwrap_or(0), replicas };
        let rebalance = rebalance.as_deref().and_then(Rebalance::parse).map(|r| (r.at_ms, r.max_moves));
        Some((drains, handoffs, rebalance))
    }

    /// Distinct rooms held live by any replica, counted every tenth sync (the union of the
    /// replicas' `held` hashes is read whole).
    async fn fleet_live_rooms(&self, beats: &HashMap<String, String>) -> Option<u64> {
        if !self.calls.heartbeats.fetch_add(1, Ordering::Relaxed).is_multiple_of(10) {
            return None;
        }
        let mut pipe = redis::pipe();
        for replica in beats.keys() {
            pipe.cmd("HKEYS").arg(self.key("held:", replica));
        }
        let all: Vec<Vec<String>> = self.call(&self.calls.read, async |c| pipe.query_async(c).await).await?;
        let rooms: HashSet<&String> = all.iter().flatten().collect();
        Some(rooms.len() as u64)
    }

    pub(super) async fn read_fleet_room(&self, key: &str) -> Option<FleetRoom> {
        let replicas_key = self.key("replicas", "");
        let names: Vec<String> =
            self.call(&self.calls.read, async |c| redis::cmd("HKEYS").arg(&replicas_key).query_async(c).await).await?;
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(self.key("room:", key));
        for name in &names {
            pipe.cmd("HGET").arg(self.key("held:", name)).arg(key);
        }
        let mut answers: Vec<Option<String>> = self.call(&self.calls.read, async |c| pipe.query_async(c).await).await?;
        let record = answers.remove(0);
        let (owner, version) =
            record.as_deref().and_then(Record::parse).map(|r| (r.owner.to_owned(), r.version)).unzip();
        let replicas = names
            .into_iter()
            .zip(answers)
            .filter_map(|(replica, held)| {
                let c = Claim::parse(held.as_deref()?)?;
                let claim = FleetClaim {
                    backend: c.owner.to_owned(),
                    version: c.version,
                    connections: c.connections,
                    sockets: c.sockets,
                    until_ms: c.until_ms,
                };
                Some((replica, claim))
            })
            .collect();
        Some(FleetRoom { owner, version, replicas })
    }
}
