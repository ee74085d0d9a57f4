//! The fleet as the Redis directory sees it: heartbeats, fleet-wide figures, a room as every
//! replica holds it, and the directory's admin status and metrics.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::wire::{Beat, Claim, Record};
use super::{RedisDirectory, lock};
use crate::clock::unix_ms;
use crate::directory::ReplicaState;

#[derive(Clone, Debug, Default)]
pub(super) struct Fleet {
    pub(super) live_rooms: u64,
    splits: u64,
    replicas: Vec<Value>,
}

impl RedisDirectory {
    /// Heartbeat and fleet reads in one pipeline; returns the drains in force.
    pub(super) async fn heartbeat(&self, me: &ReplicaState) -> Option<HashMap<String, u64>> {
        let now = unix_ms();
        let refresh_ms = self.settings.refresh.as_millis() as u64;
        let beat = Beat { epoch: me.epoch, seen_ms: now, backends: me.backends.iter().map(|b| &**b).collect() };
        let beat = beat.to_string();
        let replicas_key = self.key("replicas", "");
        let mut pipe = redis::pipe();
        pipe.cmd("HSET").arg(&replicas_key).arg(&self.settings.replica).arg(&beat).ignore();
        pipe.cmd("HGETALL").arg(&replicas_key);
        pipe.cmd("HGETALL").arg(self.key("drains", ""));
        pipe.cmd("GET").arg(self.key("splits", ""));
        // Redis may have lost its data: the rebuild window starts (or goes on). The refresh
        // before this re-asserted this replica's rooms (its script starts the window too).
        pipe.cmd("EVAL").arg(&self.scripts.rebuild).arg(0).arg(&self.settings.prefix).arg(self.rebuild_window_ms());
        type Reply = (HashMap<String, String>, HashMap<String, u64>, Option<u64>, u64);
        let (beats, drains, splits, rebuilding): Reply =
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
        let mut replicas: Vec<Value> = beats
            .iter()
            .filter_map(|(replica, beat)| {
                let Beat { epoch, seen_ms, backends } = Beat::parse(beat)?;
                let ago = now.saturating_sub(seen_ms);
                (ago <= 3 * refresh_ms)
                    .then(|| json!({ "replica": replica, "epoch": epoch, "backends": backends, "seen_ms_ago": ago }))
            })
            .collect();
        replicas.sort_by(|a, b| a["replica"].as_str().cmp(&b["replica"].as_str()));
        let mut fleet = lock(&self.fleet);
        *fleet = Fleet { live_rooms: live_rooms.unwrap_or(fleet.live_rooms), splits: splits.unwrap_or(0), replicas };
        Some(drains)
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

    pub(super) async fn read_fleet_room(&self, key: &str) -> Option<Value> {
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
        let (owner, version) = record.as_deref().and_then(Record::parse).map(|r| (r.owner, r.version)).unzip();
        let replicas: serde_json::Map<String, Value> = names
            .into_iter()
            .zip(answers)
            .filter_map(|(replica, held)| {
                let c = Claim::parse(held.as_deref()?)?;
                let v = json!({
                    "backend": c.owner,
                    "version": c.version,
                    "connections": c.connections,
                    "sockets": c.sockets,
                    "until_ms": c.until_ms,
                });
                Some((replica, v))
            })
            .collect();
        Some(json!({ "owner": owner, "version": version, "replicas": replicas }))
    }

    pub(super) fn status_json(&self) -> Value {
        let fleet = lock(&self.fleet).clone();
        json!({
            "backend": "redis",
            "replica": self.settings.replica,
            "reachable": self.is_up(),
            "rebuilding_ms": lock(&self.rebuilding_until)
                .map(|until| until.saturating_duration_since(std::time::Instant::now()).as_millis() as u64)
                .filter(|ms| *ms > 0),
            "error": *lock(&self.last_error),
            "max_rooms": self.local.max_rooms(),
            "over_cap": self.local.over_cap(),
            "fleet_live_rooms": fleet.live_rooms,
            "fleet_split_rooms": fleet.splits,
            "replicas": fleet.replicas,
            "calls": {
                "place": self.calls.place.load(Ordering::Relaxed),
                "reassign": self.calls.reassign.load(Ordering::Relaxed),
                "refresh": self.calls.refresh.load(Ordering::Relaxed),
                "extend": self.calls.extend.load(Ordering::Relaxed),
                "release": self.calls.release.load(Ordering::Relaxed),
                "confirm": self.calls.confirm.load(Ordering::Relaxed),
                "sync": self.calls.sync.load(Ordering::Relaxed),
                "read": self.calls.read.load(Ordering::Relaxed),
                "errors": self.calls.errors.load(Ordering::Relaxed),
            },
        })
    }

    pub(super) fn metrics_text(&self, out: &mut String) {
        use std::fmt::Write;
        let fleet = lock(&self.fleet).clone();
        let c = &self.calls;
        let _ = writeln!(out, "# HELP roomgate_directory_up Redis answered the last directory call (1) or not (0).");
        let _ = writeln!(out, "# TYPE roomgate_directory_up gauge");
        let _ = writeln!(out, "roomgate_directory_up {}", u8::from(self.is_up()));
        let _ = writeln!(out, "# HELP roomgate_directory_calls Redis round trips by purpose.");
        let _ = writeln!(out, "# TYPE roomgate_directory_calls counter");
        for (op, n) in [
            ("place", &c.place),
            ("reassign", &c.reassign),
            ("refresh", &c.refresh),
            ("extend", &c.extend),
            ("release", &c.release),
            ("confirm", &c.confirm),
            ("sync", &c.sync),
            ("read", &c.read),
        ] {
            let _ = writeln!(out, "roomgate_directory_calls_total{{op=\"{op}\"}} {}", n.load(Ordering::Relaxed));
        }
        let _ = writeln!(out, "# HELP roomgate_directory_errors Redis calls that failed or timed out.");
        let _ = writeln!(out, "# TYPE roomgate_directory_errors counter");
        let _ = writeln!(out, "roomgate_directory_errors_total {}", c.errors.load(Ordering::Relaxed));
        let _ = writeln!(out, "# HELP roomgate_directory_place_seconds Time spent placing rooms in Redis.");
        let _ = writeln!(out, "# TYPE roomgate_directory_place_seconds counter");
        let secs = c.place_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "roomgate_directory_place_seconds_total {secs}");
        let _ = writeln!(out, "# HELP roomgate_fleet_live_rooms Rooms some replica held live at its last refresh.");
        let _ = writeln!(out, "# TYPE roomgate_fleet_live_rooms gauge");
        let _ = writeln!(out, "roomgate_fleet_live_rooms {}", fleet.live_rooms);
        let _ = writeln!(
            out,
            "# HELP roomgate_fleet_split_rooms Rooms seen with sockets on two backends at once, through any replicas (each episode once)."
        );
        let _ = writeln!(out, "# TYPE roomgate_fleet_split_rooms counter");
        let _ = writeln!(out, "roomgate_fleet_split_rooms_total {}", fleet.splits);
    }
}
