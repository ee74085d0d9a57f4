//! The live-room directory: room key -> owner, with the room's open WebSockets and in-flight
//! requests counted. While a room has a connection, and for `[rooms] linger` after its last one
//! closes, it stays with its recorded owner whatever the placement says now: a change of the
//! backend set moves only new and idle rooms.
//!
//! [`RoomDirectory`] is the seam for a shared implementation (several roomgate replicas): its
//! `place_if_absent` is first-writer-wins and asynchronous, while counting connections stays local.
//!
//! The directory is bounded (`limits.max_rooms`, see [`MemoryDirectory`]), and a room that never
//! had a WebSocket is forgotten `rooms.linger_unused` after its last request, so that a client
//! sending random keys cannot fill it.

mod cap;
mod memory;
mod redis;
mod status;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

pub use cap::DEFAULT_MAX_ROOMS;
pub use memory::{Entered, LiveEntry, MemoryDirectory};
pub use redis::{AWAY_POLL, RedisDirectory, RedisSettings, cluster_seeds, redis_bucket_keys, redis_room_key};
pub use status::{
    DirectoryCalls, DirectoryMetrics, DirectoryStatus, FleetClaim, FleetRoom, LocalStatus, ReplicaSeen, SharedStatus,
};

/// What kind of connection holds a room live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    Socket,
    Request,
}

/// A room as the admin API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RoomInfo {
    pub key: String,
    pub backend: String,
    /// Open WebSockets on the owner.
    pub sockets: u32,
    /// Requests in flight on the owner.
    pub requests: u32,
    /// Has a connection now (else it is lingering).
    pub live: bool,
}

/// How long rooms without a connection are remembered, and how many rooms may be: the config's
/// `[rooms]` and `limits.max_rooms`, given at each sweep so that a reload takes effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// A room that has had a WebSocket: kept this long after its last connection closes.
    pub linger: Duration,
    /// A room that never had one: kept this long after its last request.
    pub linger_unused: Duration,
    pub max_rooms: usize,
}

impl Retention {
    pub fn from_config(config: &crate::Config) -> Retention {
        Retention {
            linger: config.rooms.linger,
            linger_unused: config.rooms.linger_unused,
            max_rooms: config.limits.max_rooms,
        }
    }
}

/// A hand-off run by another replica, as the shared directory tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetMove {
    /// Pause the room's sockets on `from` and hold its joins, for at most `lease`.
    Begin { room: String, from: String, lease: Duration },
    /// The move ended; `moved`: the room is on its new owner (close the sockets on `from`).
    End { room: String, from: String, moved: bool },
}

/// A boxed future, as trait objects return them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A room's owner as [`RoomDirectory::place_if_absent`] found or recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub owner: Arc<str>,
    /// The room has connections somewhere (on this replica, or on another one that shares the
    /// directory): a draining owner keeps it.
    pub live: bool,
    /// How long a member must wait before joining `owner` (zero: join now): a shared directory
    /// holds joins while another replica may still have sockets of the room on another backend,
    /// or while it rebuilds after losing its data. The caller asks again after waiting.
    pub wait: Duration,
}

/// What [`RoomDirectory::reassign`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reassigned {
    /// Moved (or already moved there by another replica).
    Moved,
    /// Another replica moved it elsewhere first: look again.
    Elsewhere,
    /// The shared directory takes no move now (it is being rebuilt): wait this long, look again.
    Wait(Duration),
}

/// Room key -> owner, first writer wins.
pub trait RoomDirectory: Send + Sync + 'static {
    /// The recorded owner of a live or lingering room.
    fn owner(&self, key: &str) -> Option<Arc<str>>;

    /// Records `candidate` as the room's owner unless it has one; resolves with the owner in force.
    /// Two callers placing the same new room at once get the same answer. Past `limits.max_rooms`
    /// a new room gets `candidate` without being recorded (counted in `rooms_over_cap`).
    /// `socket`: for a WebSocket handshake, which a shared directory records as this replica's
    /// claim on the room before the handshake goes out.
    fn place_if_absent<'a>(&'a self, key: &'a str, candidate: &'a Arc<str>, socket: bool) -> BoxFuture<'a, Placement>;

    /// Moves a room from `from` to `to` if `from` still owns it. Connections still open on `from`
    /// are being closed by the caller; they no longer count as the room's.
    fn reassign<'a>(&'a self, key: &'a str, from: &'a str, to: &'a Arc<str>) -> BoxFuture<'a, Reassigned>;

    /// The fleet's owner of a room whose socket on `owner` has just been accepted, when the fleet
    /// records another one (the room moved while the handshake was on its way): the socket must
    /// not be admitted. `None`: admit it. A local directory has nothing to add.
    fn confirm<'a>(&'a self, _key: &'a str, _owner: &'a Arc<str>) -> BoxFuture<'a, Option<Arc<str>>> {
        Box::pin(std::future::ready(None))
    }

    /// The sockets of `key` on `from` have all closed after a move: this replica's claim on the
    /// old owner ends, and members held back by it may join the new one.
    fn release<'a>(&'a self, _key: &'a str, _from: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(std::future::ready(()))
    }

    /// Counts a connection of the room on `owner`; `false`: not counted (a request in a room
    /// that is not recorded). A socket is always counted, its room recorded even past the cap.
    fn enter(&self, key: &str, owner: &Arc<str>, kind: Use) -> bool;

    /// Un-counts a connection that [`RoomDirectory::enter`] counted (and only such a one: the
    /// room's entry may since have been created by someone else's connection).
    fn leave(&self, key: &str, owner: &str, kind: Use);

    fn get(&self, key: &str) -> Option<RoomInfo>;

    /// Rooms in key order after `after`, at most `limit`.
    fn list(&self, after: Option<&str>, limit: usize) -> Vec<RoomInfo>;

    /// Keys of the rooms owned by `backend` that have a connection now.
    fn live_rooms_on(&self, backend: &str) -> Vec<String>;

    /// Forgets rooms without connections: after their linger (`rules`), or at once when
    /// `draining(owner)` or when recorded past the cap. Takes `rules.max_rooms` as the cap.
    fn sweep(&self, rules: &Retention, draining: &dyn Fn(&str) -> bool) -> usize;

    /// (rooms known, rooms with a connection)
    fn counts(&self) -> (usize, usize);

    // --- shared directories (several replicas); a local one keeps the defaults ---

    /// Exchanges state with the other replicas: publishes this replica's live rooms and
    /// heartbeat, reads drains. `None`: nothing is shared (or the store is unreachable).
    fn sync<'a>(&'a self, _me: &'a ReplicaState) -> BoxFuture<'a, Option<SyncReport>> {
        Box::pin(std::future::ready(None))
    }

    /// Resolves when the directory wants a sync before the next one is due (a call found the
    /// shared store gone). A local one never does.
    fn sync_wanted(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }

    /// Shares a drain (`Some`) or its end (`None`) with the fleet.
    fn share_drain<'a>(&'a self, _backend: &'a str, _drain: Option<SharedDrain>) -> BoxFuture<'a, ()> {
        Box::pin(std::future::ready(()))
    }

    /// Asks every replica for a rebalance of the rooms live through it (at most `max_moves`
    /// each); `at_ms` (unix ms) tells one request from the next.
    fn share_rebalance<'a>(&'a self, _at_ms: u64, _max_moves: Option<usize>) -> BoxFuture<'a, ()> {
        Box::pin(std::future::ready(()))
    }

    /// Marks `key` as being handed off by this replica from `from` for at most `lease`. Through
    /// a shared directory, joins on every replica that asks it wait meanwhile, and the other
    /// replicas are told to pause their sockets of the room on `from` (see [`FleetMove`]).
    /// False: another replica is handing the room off now, or the fleet records the room on
    /// another owner than `from` (it moved already; this replica's view has not caught up).
    /// Without a shared directory, true.
    fn begin_move<'a>(&'a self, _key: &'a str, _from: &'a str, _lease: Duration) -> BoxFuture<'a, bool> {
        Box::pin(std::future::ready(true))
    }

    /// Returns once every other replica with sockets of `key` on `from` has paused them (acked
    /// the move); never without a shared directory. The caller bounds the wait.
    fn fleet_paused<'a>(&'a self, _key: &'a str, _from: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(std::future::ready(()))
    }

    /// Ends this replica's hand-off of `key`; `moved`: the room is on its new owner now.
    fn end_move<'a>(&'a self, _key: &'a str, _from: &'a str, _moved: bool) -> BoxFuture<'a, ()> {
        Box::pin(std::future::ready(()))
    }

    /// Tells the replica handing `key` off that this replica's sockets of it are paused.
    fn ack_move<'a>(&'a self, _key: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(std::future::ready(()))
    }

    /// Moves run by other replicas, as they begin and end (shared directories only; the first
    /// call gets the stream, later ones `None`).
    fn fleet_moves(&self) -> Option<tokio::sync::mpsc::Receiver<FleetMove>> {
        None
    }

    /// This replica stops: its claims and heartbeat are removed from the shared directory.
    fn leave_fleet(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    /// What the fleet knows of a room: its recorded owner and the replicas holding its sockets.
    fn fleet_room<'a>(&'a self, _key: &'a str) -> BoxFuture<'a, Option<FleetRoom>> {
        Box::pin(std::future::ready(None))
    }

    /// The directory's own state, for the admin status.
    fn status(&self) -> DirectoryStatus;

    /// A shared directory's figures for `/metrics` (`None`: a local one has none of its own).
    fn metrics(&self) -> Option<DirectoryMetrics> {
        None
    }
}

/// What a replica tells the others on each sync.
#[derive(Clone, Debug)]
pub struct ReplicaState {
    pub epoch: u64,
    pub backends: Vec<Arc<str>>,
}

/// A drain as the fleet shares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedDrain {
    /// Unix milliseconds.
    pub deadline_ms: u64,
    /// A drain with hand-off: when it was asked for (unix milliseconds, which tells one request
    /// from the next). Every replica moves the backend's rooms live through it, once per request.
    pub handoff_ms: Option<u64>,
}

/// What a sync brought back.
#[derive(Clone, Debug, Default)]
pub struct SyncReport {
    /// Drains in force across the fleet: backend id -> deadline (unix milliseconds).
    pub drains: std::collections::HashMap<String, u64>,
    /// Drains with hand-off across the fleet: backend id -> when it was asked for (unix ms).
    pub handoffs: std::collections::HashMap<String, u64>,
    /// The latest rebalance request of the fleet, while it lasts: when it was asked for (unix
    /// ms), and its `max_moves`.
    pub rebalance: Option<(u64, Option<usize>)>,
    /// Rooms this replica held live on another owner than the fleet's, already moved in the
    /// directory: (room, old owner, fleet owner). The caller closes their sockets on the old one.
    pub moved: Vec<(String, Arc<str>, Arc<str>)>,
}

/// A replica id unique to this directory: the host name (a pod's name in Kubernetes) and the
/// process id, so that two replicas on one host, or a restarted container of one pod, never share
/// a `held:` hash. A second directory in the same process (tests, embedding) gets `-2`, and so on.
pub fn default_replica() -> String {
    static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or_else(|| "roomgate".to_owned());
    let id = format!("{host}-{}", std::process::id());
    match MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
        0 => id,
        n => format!("{id}-{}", n + 1),
    }
}

/// Counts one connection of a room for as long as it lives (if the directory counted it).
pub struct Presence {
    directory: Arc<dyn RoomDirectory>,
    key: Box<str>,
    owner: Arc<str>,
    kind: Use,
    /// The directory counted this connection: only then is it un-counted.
    entered: bool,
}

impl Presence {
    pub fn new(directory: Arc<dyn RoomDirectory>, key: &str, owner: Arc<str>, kind: Use) -> Self {
        let entered = directory.enter(key, &owner, kind);
        Presence { directory, key: key.into(), owner, kind, entered }
    }
}

impl Drop for Presence {
    fn drop(&mut self) {
        if self.entered {
            self.directory.leave(&self.key, &self.owner, self.kind);
        }
    }
}
