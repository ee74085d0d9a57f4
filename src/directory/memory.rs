//! The in-memory room directory of a single roomgate process, bounded by `limits.max_rooms`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use crate::table::shrink;

use super::cap::{Cap, DEFAULT_MAX_ROOMS};
use super::{BoxFuture, DirectoryStatus, LocalStatus, Placement, Reassigned, Retention, RoomDirectory, RoomInfo, Use};

const SHARDS: usize = 64;

/// A room with connections here, as a shared directory publishes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveEntry {
    pub key: String,
    pub owner: Arc<str>,
    pub version: u64,
    /// Open sockets plus requests in flight, on this replica.
    pub connections: u32,
    /// Open sockets, on this replica.
    pub sockets: u32,
}

/// Rooms in 64 shards, each behind its own lock, so requests for different rooms rarely wait on
/// each other.
///
/// At most `limits.max_rooms` entries: past it a new room is placed but not recorded, except a
/// room that gets a WebSocket (an unrecorded live room could be split by the next reload or
/// drain); such an entry goes at the first sweep after its last connection closes.
pub struct MemoryDirectory {
    shards: Box<[Mutex<Shard>]>,
    cap: Cap,
}

/// What [`MemoryDirectory::enter_counted`] did with a connection it counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entered {
    /// The room's first WebSocket, on this owner at this version: from now on it keeps the
    /// full `rooms.linger` (a shared directory extends its record to match).
    pub first_socket: Option<u64>,
}

type Shard = HashMap<Box<str>, Entry>;

#[derive(Debug)]
struct Entry {
    owner: Arc<str>,
    /// Bumped by every move of the room, so that a move wins over a stale record of it.
    version: u64,
    sockets: u32,
    requests: u32,
    /// Connections still open on earlier owners, being closed after a reassignment.
    moving: u32,
    /// Since when the room has had no connection.
    idle_since: Option<Instant>,
    /// Has had a WebSocket: lingers `rooms.linger` (else `rooms.linger_unused`).
    had_socket: bool,
    /// Recorded past the cap for its WebSocket: does not linger once idle.
    over_cap: bool,
}

impl Default for MemoryDirectory {
    fn default() -> Self {
        Self::with_cap(DEFAULT_MAX_ROOMS, Counter::default())
    }
}

impl MemoryDirectory {
    /// A directory with the default cap and a counter of its own.
    pub fn new() -> Self {
        Self::default()
    }

    /// A directory of at most `max_rooms` entries (see the type); `over_cap` counts the new
    /// rooms placed but not recorded (`Metrics::rooms_over_cap`).
    pub fn with_cap(max_rooms: usize, over_cap: Counter) -> Self {
        MemoryDirectory {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            cap: Cap::new(max_rooms, over_cap),
        }
    }

    /// No new room can be recorded (the cap is reached).
    pub fn is_full(&self) -> bool {
        self.cap.is_full()
    }

    /// `limits.max_rooms` in force.
    pub fn max_rooms(&self) -> usize {
        self.cap.max()
    }

    /// New rooms placed but not recorded so far.
    pub fn over_cap(&self) -> u64 {
        self.cap.over_cap()
    }

    /// [`RoomDirectory::place_if_absent`], synchronously. Past the cap, a new room gets
    /// `candidate` unrecorded.
    pub fn place_local(&self, key: &str, candidate: &Arc<str>) -> Placement {
        let placed = self.with_entry(&mut self.shard(key), key, candidate, Some(Instant::now()), false, |e| {
            Placement { owner: e.owner.clone(), live: e.connections() > 0, wait: Duration::ZERO }
        });
        placed.unwrap_or_else(|| {
            self.cap.refuse();
            Placement { owner: candidate.clone(), live: false, wait: Duration::ZERO }
        })
    }

    /// [`RoomDirectory::reassign`], synchronously.
    pub fn reassign_local(&self, key: &str, from: &str, to: &Arc<str>) -> bool {
        self.move_to(key, from, to, None)
    }

    /// Moves the room from `from` to `to` with `version` (default: the next one).
    pub fn move_to(&self, key: &str, from: &str, to: &Arc<str>, version: Option<u64>) -> bool {
        let mut shard = self.shard(key);
        let Some(e) = shard.get_mut(key) else { return false };
        if &*e.owner != from {
            return false;
        }
        e.moving += e.sockets + e.requests;
        e.sockets = 0;
        e.requests = 0;
        e.owner = to.clone();
        e.version = version.unwrap_or(e.version + 1);
        true
    }

    /// The owner, if the room has connections here (`live_only`) or is known at all.
    pub fn owner_if(&self, key: &str, live_only: bool) -> Option<Arc<str>> {
        let shard = self.shard(key);
        let e = shard.get(key)?;
        (!live_only || e.connections() > 0).then(|| e.owner.clone())
    }

    /// The owner, if the room has sockets or requests on it here: connections on an earlier
    /// owner, still closing after a move, do not count (the fleet decides when the new owner
    /// takes members).
    pub fn owner_settled(&self, key: &str) -> Option<Arc<str>> {
        let shard = self.shard(key);
        let e = shard.get(key)?;
        (e.sockets + e.requests > 0).then(|| e.owner.clone())
    }

    /// Connections of the room still open on earlier owners, closing after a move.
    pub fn moving(&self, key: &str) -> u32 {
        self.shard(key).get(key).map_or(0, |e| e.moving)
    }

    /// The room's version here, if it is recorded.
    pub fn version_of(&self, key: &str) -> Option<u64> {
        self.shard(key).get(key).map(|e| e.version)
    }

    /// Takes `owner` as the room's owner, learned from elsewhere: recorded for a new room,
    /// replacing the recorded one of a room without connections here. A room with connections
    /// here keeps its owner (they are moved by [`MemoryDirectory::reassign_local`]).
    /// Past the cap, a new room is not recorded (and counted as such).
    pub fn adopt(&self, key: &str, owner: &Arc<str>, version: u64) -> Arc<str> {
        let adopted = self.with_entry(&mut self.shard(key), key, owner, Some(Instant::now()), false, |e| {
            if e.connections() == 0 {
                e.owner = owner.clone();
                e.version = version;
            }
            e.owner.clone()
        });
        adopted.unwrap_or_else(|| {
            self.cap.refuse();
            owner.clone()
        })
    }

    /// [`RoomDirectory::enter`], telling whether (and how) the connection was counted. A socket
    /// is always counted, its room recorded even past the cap; a request in a room not recorded
    /// (placed past the cap) is not.
    pub fn enter_counted(&self, key: &str, owner: &Arc<str>, kind: Use) -> Option<Entered> {
        let socket = kind == Use::Socket;
        self.with_entry(&mut self.shard(key), key, owner, None, socket, |e| {
            let mut first_socket = None;
            if e.owner != *owner {
                // Moved between the caller's look-up and now: the caller closes this connection.
                e.moving += 1;
            } else if socket {
                e.sockets += 1;
                if !e.had_socket {
                    e.had_socket = true;
                    first_socket = Some(e.version);
                }
            } else {
                e.requests += 1;
            }
            e.idle_since = None;
            Entered { first_socket }
        })
    }

    /// Takes `version` as the room's, when `owner` still owns it (the fleet agreed on the owner
    /// and knows a later version of it).
    pub fn set_version(&self, key: &str, owner: &str, version: u64) {
        if let Some(e) = self.shard(key).get_mut(key)
            && &*e.owner == owner
        {
            e.version = version;
        }
    }

    /// Rooms with connections here.
    pub fn live_entries(&self) -> Vec<LiveEntry> {
        let mut out = Vec::new();
        self.each(|k, e| {
            if e.sockets + e.requests > 0 {
                let connections = e.sockets + e.requests;
                let (owner, version, sockets) = (e.owner.clone(), e.version, e.sockets);
                out.push(LiveEntry { key: k.to_owned(), owner, version, connections, sockets });
            }
        });
        out
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, Shard> {
        let i = xxhash_rust::xxh3::xxh3_64(key.as_bytes()) as usize % SHARDS;
        // Entries are updated field by field without invariants spanning a panic: a poisoned
        // shard is still consistent enough to serve.
        crate::lock::lock(&self.shards[i])
    }

    /// Applies `f` to the room's entry, created with `owner` if absent and the cap allows it (or
    /// `forced`: a socket's room). `None`: absent and not created. Looks up before inserting, so
    /// that the key is copied only for a new room.
    fn with_entry<T>(
        &self,
        shard: &mut Shard,
        key: &str,
        owner: &Arc<str>,
        idle: Option<Instant>,
        forced: bool,
        f: impl FnOnce(&mut Entry) -> T,
    ) -> Option<T> {
        if let Some(e) = shard.get_mut(key) {
            return Some(f(e));
        }
        let over_cap = !self.cap.admit();
        if over_cap {
            if !forced {
                return None;
            }
            self.cap.force();
        }
        let mut e = Entry {
            owner: owner.clone(),
            version: 1,
            sockets: 0,
            requests: 0,
            moving: 0,
            idle_since: idle,
            had_socket: false,
            over_cap,
        };
        let out = f(&mut e);
        shard.insert(key.into(), e);
        Some(out)
    }

    fn each(&self, mut f: impl FnMut(&str, &Entry)) {
        for shard in self.shards.iter() {
            let map = crate::lock::lock(shard);
            for (k, e) in map.iter() {
                f(k, e);
            }
        }
    }
}

impl Entry {
    fn connections(&self) -> u32 {
        self.sockets + self.requests + self.moving
    }

    fn info(&self, key: &str) -> RoomInfo {
        RoomInfo {
            key: key.to_owned(),
            backend: self.owner.to_string(),
            sockets: self.sockets,
            requests: self.requests,
            live: self.connections() > 0,
        }
    }

    fn settle(&mut self) {
        if self.connections() == 0 && self.idle_since.is_none() {
            self.idle_since = Some(Instant::now());
        }
    }
}

impl RoomDirectory for MemoryDirectory {
    fn owner(&self, key: &str) -> Option<Arc<str>> {
        self.shard(key).get(key).map(|e| e.owner.clone())
    }

    fn place_if_absent<'a>(&'a self, key: &'a str, candidate: &'a Arc<str>, _socket: bool) -> BoxFuture<'a, Placement> {
        Box::pin(std::future::ready(self.place_local(key, candidate)))
    }

    fn reassign<'a>(&'a self, key: &'a str, from: &'a str, to: &'a Arc<str>) -> BoxFuture<'a, Reassigned> {
        let moved = self.reassign_local(key, from, to);
        Box::pin(std::future::ready(if moved { Reassigned::Moved } else { Reassigned::Elsewhere }))
    }

    fn enter(&self, key: &str, owner: &Arc<str>, kind: Use) -> bool {
        self.enter_counted(key, owner, kind).is_some()
    }

    fn leave(&self, key: &str, owner: &str, kind: Use) {
        let mut shard = self.shard(key);
        let Some(e) = shard.get_mut(key) else { return };
        if &*e.owner == owner {
            match kind {
                Use::Socket => e.sockets = e.sockets.saturating_sub(1),
                Use::Request => e.requests = e.requests.saturating_sub(1),
            }
        } else {
            e.moving = e.moving.saturating_sub(1);
        }
        e.settle();
    }

    fn get(&self, key: &str) -> Option<RoomInfo> {
        self.shard(key).get(key).map(|e| e.info(key))
    }

    fn list(&self, after: Option<&str>, limit: usize) -> Vec<RoomInfo> {
        let mut all = Vec::new();
        self.each(|k, e| {
            if after.is_none_or(|a| k > a) {
                all.push(e.info(k));
            }
        });
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all.truncate(limit);
        all
    }

    fn live_rooms_on(&self, backend: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.each(|k, e| {
            if &*e.owner == backend && e.sockets + e.requests > 0 {
                out.push(k.to_owned());
            }
        });
        out
    }

    fn sweep(&self, rules: &Retention, draining: &dyn Fn(&str) -> bool) -> usize {
        self.cap.set_max(rules.max_rooms);
        let now = Instant::now();
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut map = crate::lock::lock(shard);
            let before = map.len();
            map.retain(|_, e| match e.idle_since {
                None => true,
                Some(since) => {
                    let linger = if e.had_socket { rules.linger } else { rules.linger_unused };
                    !e.over_cap && !draining(&e.owner) && now.duration_since(since) < linger
                }
            });
            self.cap.release(before - map.len());
            removed += before - map.len();
            shrink(&mut map);
        }
        removed
    }

    fn counts(&self) -> (usize, usize) {
        let mut live = 0;
        self.each(|_, e| live += usize::from(e.connections() > 0));
        (self.cap.known(), live)
    }

    fn status(&self) -> DirectoryStatus {
        DirectoryStatus::Memory(LocalStatus { max_rooms: self.cap.max(), over_cap: self.cap.over_cap() })
    }
}

#[cfg(test)]
mod tests;
