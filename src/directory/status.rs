//! What a directory reports of itself, typed: its admin status, a room as the fleet records it,
//! and the figures of a shared directory that `/metrics` shows (the metrics module encodes them).

use std::collections::BTreeMap;

use serde::Serialize;

/// The directory's own state, the admin status's `"directory"`: `{"backend": "memory", ...}` or
/// `{"backend": "redis", ...}`, with the fields of the one in use.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "backend", rename_all = "lowercase")]
pub enum DirectoryStatus {
    Memory(LocalStatus),
    Redis(SharedStatus),
}

/// A local (in-memory) directory's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LocalStatus {
    /// `limits.max_rooms` in force.
    pub max_rooms: usize,
    /// New rooms placed but not recorded (the directory was full).
    pub over_cap: u64,
}

/// A shared (Redis) directory's state.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SharedStatus {
    /// This replica's id in the fleet.
    pub replica: String,
    /// Redis answered the last call.
    pub reachable: bool,
    /// What is left of a rebuild window (Redis lost its data), if one is open.
    pub rebuilding_ms: Option<u64>,
    /// Why the last call failed, while Redis is away.
    pub error: Option<String>,
    pub max_rooms: usize,
    /// New rooms this replica placed but did not record (its directory was full).
    pub over_cap: u64,
    pub fleet_live_rooms: u64,
    pub fleet_split_rooms: u64,
    /// Replicas whose heartbeat is recent, by id.
    pub replicas: Vec<ReplicaSeen>,
    pub calls: DirectoryCalls,
}

/// A replica as its last heartbeat shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplicaSeen {
    pub replica: String,
    pub epoch: u64,
    pub backends: Vec<String>,
    pub seen_ms_ago: u64,
}

/// Redis round trips by purpose, and the calls that failed or timed out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DirectoryCalls {
    pub place: u64,
    pub reassign: u64,
    pub refresh: u64,
    pub heartbeat: u64,
    pub release: u64,
    pub confirm: u64,
    pub sync: u64,
    pub read: u64,
    pub errors: u64,
}

impl DirectoryCalls {
    /// The round trips by purpose (the `op` label of `roomgate_directory_calls_total`).
    pub fn by_op(&self) -> [(&'static str, u64); 8] {
        [
            ("place", self.place),
            ("reassign", self.reassign),
            ("refresh", self.refresh),
            ("heartbeat", self.heartbeat),
            ("release", self.release),
            ("confirm", self.confirm),
            ("sync", self.sync),
            ("read", self.read),
        ]
    }
}

/// What the fleet knows of a room: its recorded owner (and the version of its last move), and
/// the claims of the replicas holding its connections, by replica id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FleetRoom {
    pub owner: Option<String>,
    pub version: Option<u64>,
    pub replicas: BTreeMap<String, FleetClaim>,
}

/// A replica's claim on a room: the backend its connections of the room use, and until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FleetClaim {
    pub backend: String,
    pub version: u64,
    pub connections: u64,
    pub sockets: u64,
    /// Redis server time, unix milliseconds.
    pub until_ms: u64,
}

/// A shared directory's figures for `/metrics`, read at each scrape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DirectoryMetrics {
    /// Redis answered the last call.
    pub up: bool,
    pub calls: DirectoryCalls,
    /// Time spent placing rooms in Redis.
    pub place_seconds: f64,
    /// Distinct rooms some replica held live at its last refresh.
    pub fleet_live_rooms: u64,
    /// Rooms seen with sockets on two backends at once, through any replicas.
    pub fleet_split_rooms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_directory_shows_its_cap() {
        let v = serde_json::to_value(DirectoryStatus::Memory(LocalStatus { max_rooms: 100, over_cap: 3 })).unwrap();
        assert_eq!(v, serde_json::json!({ "backend": "memory", "max_rooms": 100, "over_cap": 3 }));
    }

    #[test]
    fn a_shared_directory_shows_its_fields_beside_its_backend() {
        let status = DirectoryStatus::Redis(SharedStatus {
            replica: "r1".into(),
            reachable: true,
            rebuilding_ms: None,
            error: Some("timed out".into()),
            max_rooms: 10,
            over_cap: 2,
            fleet_live_rooms: 3,
            fleet_split_rooms: 0,
            replicas: vec![ReplicaSeen { replica: "r1".into(), epoch: 4, backends: vec!["a".into()], seen_ms_ago: 5 }],
            calls: DirectoryCalls { place: 1, errors: 7, ..DirectoryCalls::default() },
        });
        let v = serde_json::to_value(status).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "backend": "redis", "replica": "r1", "reachable": true, "rebuilding_ms": null,
                "error": "timed out", "max_rooms": 10, "over_cap": 2, "fleet_live_rooms": 3,
                "fleet_split_rooms": 0,
                "replicas": [{ "replica": "r1", "epoch": 4, "backends": ["a"], "seen_ms_ago": 5 }],
                "calls": { "place": 1, "reassign": 0, "refresh": 0, "heartbeat": 0, "release": 0,
                           "confirm": 0, "sync": 0, "read": 0, "errors": 7 },
            })
        );
        let room = FleetRoom {
            owner: None,
            version: None,
            replicas: [(
                "r2".to_owned(),
                FleetClaim { backend: "b".into(), version: 1, connections: 2, sockets: 1, until_ms: 9 },
            )]
            .into(),
        };
        assert_eq!(
            serde_json::to_value(room).unwrap(),
            serde_json::json!({ "owner": null, "version": null, "replicas": { "r2": {
                "backend": "b", "version": 1, "connections": 2, "sockets": 1, "until_ms": 9 } } })
        );
    }
}
