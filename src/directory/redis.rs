//! The room directory shared by several roomgate replicas through Redis or Redis Cluster.
//!
//! Each replica keeps its own connections counted in a local [`MemoryDirectory`]; Redis holds
//! what the replicas must agree on, in [`keys::BUCKETS`] buckets of rooms whose keys share a
//! hash tag, so that every script touches one hash slot (`keys.rs` names them all):
//! - a room's hash: its record, "owner version", placed first-writer-wins (one script: read,
//!   else write). Every move bumps the version, so that a move wins over replicas that still hold
//!   the room on its old owner: they follow it. And each replica's claim on the room, "owner
//!   version connections until sockets": a member joins a room's owner only while no claim that
//!   counts names another backend, so that a move holds joins until every replica has closed its
//!   sockets on the old owner (`docs/replicas.md`, "One owner at a time"). A room with connections
//!   somewhere never expires; one without lingers `rooms.linger` (plus slack), or
//!   `rooms.linger_unused` if it never had a WebSocket. A replica whose directory is full
//!   (`limits.max_rooms`) writes no new record.
//! - per bucket, each replica's heartbeat: its claims count while it is younger than the lease
//!   (three refresh periods), so that nobody re-asserts a claim that did not change, and the claims
//!   of a replica gone for good are removed by the others' heartbeats. A log of owner changes,
//!   which each replica reads at its heartbeat to follow moves it has not seen.
//! - per bucket, a generation, absent after Redis lost the bucket's data: whoever finds it so
//!   opens a rebuild window in which no room without a record is placed or moved, and every
//!   replica re-asserts its rooms of that bucket.
//! - fleet-wide: heartbeats with each replica's config epoch and backends, drains (a drain
//!   started anywhere holds everywhere), rebalance requests.
//!
//! Redis is touched when a room is placed or moved, when the rooms a replica holds change (their
//! claims, written at the next sync), and once per refresh period per bucket (the heartbeat) plus
//! one pipeline: never per live room at each refresh, never per request of a room live here, and
//! never per WebSocket frame (`SCALE.md` has the cost model). When Redis is unreachable, known
//! rooms keep their owner, new rooms get pure placement (which every replica computes alike), and
//! the outage shows in logs, status and metrics. When it returns, possibly empty, each replica
//! re-asserts the rooms it holds live; a room placed twice meanwhile goes to the owner with the
//! most live connections over all replicas.

mod conn;
mod fleet;
mod keys;
mod moves;
mod refresh;
mod scripts;
mod settings;
mod status;
mod wire;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

use self::conn::{Client, Conn};
use self::fleet::Fleet;
use self::keys::{BUCKETS, Keys};
use self::scripts::Scripts;
pub use self::settings::{RedisSettings, cluster_seeds};
use self::status::Calls;
use super::{
    BoxFuture, DirectoryMetrics, DirectoryStatus, FleetRoom, MemoryDirectory, Placement, Reassigned, ReplicaState,
    Retention, RoomDirectory, RoomInfo, SharedDrain, SyncReport, Use,
};
use crate::lock::lock;
use crate::throttle::Throttle;

/// The Redis key of a room's hash (its record and the replicas' claims), under `prefix`: for
/// tools and tests that look into the directory.
pub fn redis_room_key(prefix: &str, room: &str) -> String {
    Keys::new(prefix).room(room)
}

/// The keys of one of the directory's buckets under `prefix` named `name` (`gen`, `beats`...),
/// one per bucket: for tools and tests that look into the directory.
pub fn redis_bucket_keys(prefix: &str, name: &str) -> Vec<String> {
    let keys = Keys::new(prefix);
    (0..BUCKETS).map(|b| format!("{}{name}", keys.tag(b))).collect()
}

/// How often the sync loop looks for Redis while it is away (at most; `refresh / 4` if shorter).
pub const AWAY_POLL: Duration = Duration::from_millis(100);

/// The longest a claim waits for the connections still open on an old owner before it is
/// released anyway.
const RELEASE_AFTER: Duration = Duration::from_secs(70);

/// Claims written or removed per refresh script call (as many calls as the changes take): Redis
/// runs one script at a time, so a placement may wait behind one; 32 rooms keep that wait to a
/// few hundred microseconds even when a replica writes all of its claims again.
const BATCH: usize = 32;

/// A room this replica may have a claim on, as it last wrote it: it is written again only when
/// one of these changes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Written {
    owner: Arc<str>,
    version: u64,
    connections: bool,
    sockets: bool,
    /// False: not written by a sync yet (a handshake's placement wrote a claim, or the room got
    /// its first WebSocket here): the next sync writes it if the room is live, else removes it.
    synced: bool,
}

/// Moves followed: (room, old owner here, the fleet's owner).
type Followed = Vec<(String, Arc<str>, Arc<str>)>;

/// What this replica knows of one bucket, from its last heartbeat there.
#[derive(Clone, Debug, Default)]
struct BucketSeen {
    /// The bucket's generation (it changes when Redis lost the bucket's data).
    generation: String,
    /// The last owner change of the bucket read from its log.
    cursor: u64,
    /// This replica's heartbeat there, as written: if Redis holds another, its claims may be gone.
    beat: String,
    /// This replica's claims in the bucket must all be written again (first sync, data loss,
    /// an outage, a lapsed heartbeat, changes missed from the log).
    reassert: bool,
}

/// The shared directory: a local one for this replica's connections, Redis for the fleet.
pub struct RedisDirectory {
    local: MemoryDirectory,
    settings: RedisSettings,
    keys: Keys,
    client: Client,
    conn: ArcSwapOption<Conn>,
    /// Redis answered the last call.
    up: AtomicBool,
    last_error: Mutex<Option<String>>,
    /// Rooms this replica may have a claim on, until their removal is confirmed; one map per
    /// bucket, so that a sync comparing one bucket's claims holds up no join of another.
    published: Vec<Mutex<HashMap<String, Written>>>,
    /// Moves followed (room, old owner here, the fleet's owner) since the last sync that
    /// succeeded: its report tells the caller to close their sockets on the old owner.
    followed: Mutex<Followed>,
    /// Per bucket, what the last heartbeat there found.
    buckets: Mutex<Vec<BucketSeen>>,
    /// Outage log lines: the first of an outage, then one a minute (a wrong password fails
    /// every sync).
    outage_log: Throttle,
    /// Drain changes made here while Redis was unreachable, replayed by the next sync.
    unshared_drains: Mutex<Vec<(String, Option<SharedDrain>)>>,
    /// Fleet figures read by the last sync.
    fleet: Mutex<Fleet>,
    calls: Calls,
    scripts: Scripts,
    /// Until when Redis was rebuilding at the last sync (it had lost its data), for the status.
    rebuilding_until: Mutex<Option<Instant>>,
    /// Syncs attempted, reached or not: a request that finds Redis away waits for the next one.
    attempts: tokio::sync::watch::Sender<u64>,
    /// Woken when a call finds Redis gone: the sync loop looks again at once.
    wake: tokio::sync::Notify,
    /// The subscriber of other replicas' moves has been started.
    moves_started: Mutex<bool>,
}

impl RedisDirectory {
    /// A directory on the Redis at `settings.url`, counting this replica's connections in
    /// `local` (whose cap, `limits.max_rooms`, bounds what this replica writes to Redis too).
    /// Nothing is connected yet: the first sync connects, and until then (or while Redis is
    /// away) the replica works on its own.
    pub fn new(settings: RedisSettings, local: MemoryDirectory) -> Result<Arc<RedisDirectory>, redis::RedisError> {
        let client = Client::open(&settings.url, settings.password.as_deref())?;
        Ok(Arc::new(RedisDirectory {
            local,
            keys: Keys::new(&settings.prefix),
            settings,
            client,
            conn: ArcSwapOption::empty(),
            up: AtomicBool::new(false),
            last_error: Mutex::new(Some("not connected yet".to_owned())),
            published: (0..BUCKETS).map(|_| Mutex::new(HashMap::new())).collect(),
            followed: Mutex::new(Vec::new()),
            buckets: Mutex::new(vec![BucketSeen { reassert: true, ..BucketSeen::default() }; BUCKETS]),
            outage_log: Throttle::new(Duration::from_secs(60)),
            unshared_drains: Mutex::new(Vec::new()),
            fleet: Mutex::new(Fleet::default()),
            calls: Calls::default(),
            scripts: Scripts::new(),
            rebuilding_until: Mutex::new(None),
            attempts: tokio::sync::watch::Sender::new(0),
            wake: tokio::sync::Notify::new(),
            moves_started: Mutex::new(false),
        }))
    }

    /// Redis answered the last call.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Remembers a room for the next sync to write or remove this replica's claim on it.
    fn unsynced(&self, key: &str, owner: &Arc<str>, version: u64) {
        lock(&self.published[keys::bucket(key)]).entry(key.to_owned()).or_insert_with(|| Written {
            owner: owner.clone(),
            version,
            connections: false,
            sockets: false,
            synced: false,
        });
    }

    /// An invocation of a bucket's script, with the bucket's keys declared first.
    fn bucket_script<'s>(&self, script: &'s redis::Script, b: usize) -> redis::ScriptInvocation<'s> {
        let mut inv = script.prepare_invoke();
        for k in self.keys.bucket_keys(b) {
            inv.key(k);
        }
        inv
    }
}

impl RoomDirectory for RedisDirectory {
    fn owner(&self, key: &str) -> Option<Arc<str>> {
        // A room with sockets or requests here is kept where they are (the refresh re-asserts
        // it, and renews this replica's claim on it); anything else asks the fleet, unless the
        // fleet is out of reach. Connections still closing after a move do not count: the fleet
        // says when the new owner may take members.
        if self.is_up() { self.local.owner_settled(key) } else { self.local.owner_if(key, false) }
    }

    fn place_if_absent<'a>(&'a self, key: &'a str, candidate: &'a Arc<str>, socket: bool) -> BoxFuture<'a, Placement> {
        Box::pin(async move {
            let start = Instant::now();
            let b = keys::bucket(key);
            // A full directory writes no new record (the script still reads the recorded owner);
            // a room known here is still written, like any other room this replica records.
            let full = self.local.is_full() && self.local.owner_if(key, false).is_none();
            let ttl = if full { 0 } else { self.settings.ttl_unused.as_millis().max(1) as u64 };
            let lease = if socket { self.lease_ms() } else { 0 };
            let s = &self.settings;
            let place = async || -> Option<(String, u64, u8, u64)> {
                self.call(&self.calls.place, async |c| {
                    let mut inv = self.bucket_script(&self.scripts.place, b);
                    inv.key(self.keys.room(key)).key(self.keys.moving(key)).key(self.keys.holds(b, &s.replica));
                    inv.arg(&**candidate).arg(ttl).arg(key).arg(&s.replica).arg(lease);
                    inv.arg(self.rebuild_window_ms()).arg(self.lease_ms()).invoke_async(c).await
                })
                .await
            };
            let mut answer = place().await;
            // Redis away, and a room this replica does not know: another replica may hold it
            // live off its placement, and Redis may be back already (empty) without this replica
            // having seen it yet. Rather than place it blind at once, wait for the next sync's
            // look at Redis (the sync loop looks often while Redis is away), then ask again.
            if answer.is_none() && self.local.owner_if(key, false).is_none() && self.next_attempt().await {
                answer = place().await;
            }
            self.calls.place_micros.fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
            match answer {
                Some((owner, _, _, wait)) if wait > 0 => {
                    Placement { owner: Arc::from(owner), live: true, wait: Duration::from_millis(wait) }
                }
                Some((owner, version, live, _)) => {
                    let owner = if *owner == **candidate { candidate.clone() } else { Arc::from(owner) };
                    let owner = self.local.adopt(key, &owner, version);
                    if socket {
                        // The claim may now be in Redis: the next sync writes it as the room is
                        // held here by then, or removes it (also past the cap, where the
                        // handshake may fail before the room is recorded).
                        self.unsynced(key, &owner, version);
                    }
                    let live = live == 1 || self.local.owner_if(key, true).is_some();
                    Placement { owner, live, wait: Duration::ZERO }
                }
                None => self.local.place_local(key, candidate),
            }
        })
    }

    fn reassign<'a>(&'a self, key: &'a str, from: &'a str, to: &'a Arc<str>) -> BoxFuture<'a, Reassigned> {
        Box::pin(async move {
            let (ttl, window) = (self.ttl_ms(), self.rebuild_window_ms());
            let version: Option<i64> = self
                .call(&self.calls.reassign, async |c| {
                    let mut inv = self.bucket_script(&self.scripts.reassign, keys::bucket(key));
                    inv.key(self.keys.room(key)).arg(from).arg(&**to).arg(ttl).arg(window);
                    inv.arg(key).arg(self.lease_ms()).invoke_async(c).await
                })
                .await;
            match version {
                Some(0) => return Reassigned::Elsewhere, // another replica moved it elsewhere
                Some(v) if v < 0 => {
                    return Reassigned::Wait(Duration::from_millis(self.settings.refresh.as_millis().min(100) as u64));
                }
                _ => {}
            }
            // Moved in Redis (or Redis is away: the next version locally).
            let version = version.map(|v| v as u64);
            if !self.local.move_to(key, from, to, version) {
                self.local.adopt(key, to, version.unwrap_or(1));
            }
            Reassigned::Moved
        })
    }

    fn confirm<'a>(&'a self, key: &'a str, owner: &'a Arc<str>) -> BoxFuture<'a, Option<Arc<str>>> {
        Box::pin(async move {
            let room = self.keys.room(key);
            let record: Option<String> = self
                .call(&self.calls.confirm, async |c| redis::cmd("HGET").arg(&room).arg("=").query_async(c).await)
                .await?;
            let wire::Record { owner: fleet_owner, version } = wire::Record::parse(record.as_deref()?)?;
            if fleet_owner == &**owner {
                return None;
            }
            // The room moved while the handshake was on its way: this replica follows the move
            // (its sockets on `owner` are closed by the caller) unless it knows a later version.
            let to: Arc<str> = Arc::from(fleet_owner);
            if self.local.version_of(key).is_none_or(|v| v <= version) {
                if !self.local.move_to(key, owner, &to, Some(version)) {
                    self.local.adopt(key, &to, version);
                }
                return Some(to);
            }
            None
        })
    }

    fn release<'a>(&'a self, key: &'a str, from: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            // The claim stays while connections are still open on an old owner: sockets in their
            // close handshake, and handshakes still on their way (a frozen backend may yet accept
            // one): the refresh renews it meanwhile. Past the bound it goes anyway: a handshake
            // ends within `timeouts.connect` + `timeouts.upstream_response`, a closing socket
            // within `timeouts.websocket_close`.
            let deadline = Instant::now() + RELEASE_AFTER;
            let mut pause = Duration::from_millis(2);
            while self.local.moving(key) > 0 && Instant::now() < deadline {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            let Some(version) = self.local.version_of(key) else { return };
            let (b, me) = (keys::bucket(key), &self.settings.replica);
            let mut inv = self.bucket_script(&self.scripts.release, b);
            inv.key(self.keys.room(key)).key(self.keys.holds(b, me));
            inv.arg(me).arg(from).arg(version).arg(key).arg(self.ttl_ms()).arg(self.lease_ms());
            // If this fails, the next sync removes the claim (the room is no longer live here) or
            // writes the new one (it is).
            let _: Option<u64> = self.call(&self.calls.release, async |c| inv.invoke_async(c).await).await;
        })
    }

    fn begin_move<'a>(&'a self, key: &'a str, from: &'a str, lease: Duration) -> BoxFuture<'a, bool> {
        Box::pin(self.take_move_lease(key, from, lease))
    }

    fn fleet_paused<'a>(&'a self, key: &'a str, from: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(self.wait_acks(key, from))
    }

    fn end_move<'a>(&'a self, key: &'a str, from: &'a str, moved: bool) -> BoxFuture<'a, ()> {
        Box::pin(self.drop_move_lease(key, from, moved))
    }

    fn ack_move<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(self.ack(key))
    }

    fn fleet_moves(&self) -> Option<tokio::sync::mpsc::Receiver<super::FleetMove>> {
        self.subscribe_moves()
    }

    fn enter(&self, key: &str, owner: &Arc<str>, kind: Use) -> bool {
        let Some(entered) = self.local.enter_counted(key, owner, kind) else { return false };
        if let Some(version) = entered.first_socket {
            self.unsynced(key, owner, version);
        }
        true
    }

    fn leave(&self, key: &str, owner: &str, kind: Use) {
        self.local.leave(key, owner, kind);
    }

    fn get(&self, key: &str) -> Option<RoomInfo> {
        self.local.get(key)
    }

    fn list(&self, after: Option<&str>, limit: usize) -> Vec<RoomInfo> {
        self.local.list(after, limit)
    }

    fn live_rooms_on(&self, backend: &str) -> Vec<String> {
        self.local.live_rooms_on(backend)
    }

    fn sweep(&self, rules: &Retention, draining: &dyn Fn(&str) -> bool) -> usize {
        self.local.sweep(rules, draining)
    }

    fn counts(&self) -> (usize, usize) {
        self.local.counts()
    }

    fn sync<'a>(&'a self, me: &'a ReplicaState) -> BoxFuture<'a, Option<SyncReport>> {
        Box::pin(async move {
            let report = self.sync_once(me).await;
            self.attempts.send_modify(|n| *n += 1);
            report
        })
    }

    fn sync_wanted(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.wake.notified())
    }

    fn share_drain<'a>(&'a self, backend: &'a str, drain: Option<SharedDrain>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if !self.write_drain(backend, drain).await {
                tracing::warn!(backend, "Redis unreachable: the drain change is shared once it is back");
                lock(&self.unshared_drains).push((backend.to_owned(), drain));
            }
        })
    }

    fn share_rebalance<'a>(&'a self, at_ms: u64, max_moves: Option<usize>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if !self.write_rebalance(at_ms, max_moves).await {
                tracing::warn!("Redis unreachable: the rebalance is not shared; only this replica's rooms move");
            }
        })
    }

    fn leave_fleet(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if self.leave_buckets().await {
                tracing::info!(replica = %self.settings.replica, "left the fleet's directory");
            }
        })
    }

    fn fleet_room<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Option<FleetRoom>> {
        Box::pin(self.read_fleet_room(key))
    }

    fn status(&self) -> DirectoryStatus {
        DirectoryStatus::Redis(self.shared_status())
    }

    fn metrics(&self) -> Option<DirectoryMetrics> {
        Some(self.metrics_figures())
    }
}
