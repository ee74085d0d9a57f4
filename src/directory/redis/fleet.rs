//! The fleet as the Redis directory sees it: heartbeats, fleet-wide figures, and a room as every
//! replica holds it.

use std::collections::HashMap;

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
        // The fleet's keys share one hash tag: one pipeline, one node of a cluster.
        let replicas_key = self.keys.fleet("replicas");
        let mut pipe = redis::pipe();
        pipe.cmd("HSET").arg(&replicas_key).arg(&self.settings.replica).arg(&beat).ignore();
        pipe.cmd("HGETALL").arg(&replicas_key);
        pipe.cmd("HGETALL").arg(self.keys.fleet("drains"));
        pipe.cmd("HGETALL").arg(self.keys.fleet("drain-handoffs"));
        pipe.cmd("GET").arg(self.keys.fleet("rebalance"));
        type Reply = (HashMap<String, String>, HashMap<String, u64>, HashMap<String, u64>, Option<String>);
        let (beats, drains, handoffs, rebalance): Reply =
            self.call(&self.calls.sync, async |c| pipe.query_async(c).await).await?;
        // Replicas gone for good leave the heartbeat hash (the buckets' heartbeats remove their
        // claims).
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
        lock(&self.fleet).replicas = replicas;
        let rebalance = rebalance.as_deref().and_then(Rebalance::parse).map(|r| (r.at_ms, r.max_moves));
        Some((drains, handoffs, rebalance))
    }

    pub(super) async fn read_fleet_room(&self, key: &str) -> Option<FleetRoom> {
        let room = self.keys.room(key);
        let fields: HashMap<String, String> =
            self.call(&self.calls.read, async |c| redis::cmd("HGETALL").arg(&room).query_async(c).await).await?;
        let (owner, version) =
            fields.get("=").and_then(|r| Record::parse(r)).map(|r| (r.owner.to_owned(), r.version)).unzip();
        let replicas = fields
            .iter()
            .filter_map(|(replica, held)| {
                let c = Claim::parse(held)?;
                let claim = FleetClaim {
                    backend: c.owner.to_owned(),
                    version: c.version,
                    connections: c.connections,
                    sockets: c.sockets,
                    until_ms: c.until_ms,
                };
                Some((replica.clone(), claim))
            })
            .collect();
        Some(FleetRoom { owner, version, replicas })
    }
}
