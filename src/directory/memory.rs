//! The in-memory room directory of a single roomgate process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{BoxFuture, Placement, RoomDirectory, RoomInfo, Use};

const SHARDS: usize = 64;

/// A room with connections here, as a shared directory publishes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveEntry {
    pub key: String,
    pub owner: Arc<str>,
    pub version: u64,
    /// Open sockets plus requests in flight, on this replica.
    pub connections: u32,
}

/// Rooms in 64 shards, each behind its own lock, so requests for different rooms rarely wait on
/// each other.
pub struct MemoryDirectory {
    shards: Box<[Mutex<Shard>]>,
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
}

impl Default for MemoryDirectory {
    fn default() -> Self {
        MemoryDirectory { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }
}

impl MemoryDirectory {
    pub fn new() -> Self {
        Self::default()
    }

    /// [`RoomDirectory::place_if_absent`], synchronously.
    pub fn place_local(&self, key: &str, candidate: &Arc<str>) -> Placement {
        with_entry(&mut self.shard(key), key, candidate, Some(Instant::now()), |e| Placement {
            owner: e.owner.clone(),
            live: e.connections() > 0,
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

    /// Takes `owner` as the room's owner, learned from elsewhere: recorded for a new room,
    /// replacing the recorded one of a room without connections here. A room with connections
    /// here keeps its owner (they are moved by [`MemoryDirectory::reassign_local`]).
    pub fn adopt(&self, key: &str, owner: &Arc<str>, version: u64) -> Arc<str> {
        with_entry(&mut self.shard(key), key, owner, Some(Instant::now()), |e| {
            if e.connections() == 0 {
                e.owner = owner.clone();
                e.version = version;
            }
            e.owner.clone()
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
                out.push(LiveEntry { key: k.to_owned(), owner: e.owner.clone(), version: e.version, connections });
            }
        });
        out
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, Shard> {
        let i = xxhash_rust::xxh3::xxh3_64(key.as_bytes()) as usize % SHARDS;
        // Entries are updated field by field without invariants spanning a panic: a poisoned
        // shard is still consistent enough to serve.
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn each(&self, mut f: impl FnMut(&str, &Entry)) {
        for shard in self.shards.iter() {
            let map = shard.lock().unwrap_or_else(|p| p.into_inner());
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

/// Applies `f` to the room's entry, created with `owner` if absent. Looks up before inserting, so
/// that the key is copied only for a new room.
fn with_entry<T>(
    shard: &mut Shard,
    key: &str,
    owner: &Arc<str>,
    idle: Option<Instant>,
    f: impl FnOnce(&mut Entry) -> T,
) -> T {
    match shard.get_mut(key) {
        Some(e) => f(e),
        None => {
            let mut e =
                Entry { owner: owner.clone(), version: 1, sockets: 0, requests: 0, moving: 0, idle_since: idle };
            let out = f(&mut e);
            shard.insert(key.into(), e);
            out
        }
    }
}

impl RoomDirectory for MemoryDirectory {
    fn owner(&self, key: &str) -> Option<Arc<str>> {
        self.shard(key).get(key).map(|e| e.owner.clone())
    }

    fn place_if_absent<'a>(&'a self, key: &'a str, candidate: &'a Arc<str>) -> BoxFuture<'a, Placement> {
        Box::pin(std::future::ready(self.place_local(key, candidate)))
    }

    fn reassign<'a>(&'a self, key: &'a str, from: &'a str, to: &'a Arc<str>) -> BoxFuture<'a, bool> {
        Box::pin(std::future::ready(self.reassign_local(key, from, to)))
    }

    fn enter(&self, key: &str, owner: &Arc<str>, kind: Use) {
        with_entry(&mut self.shard(key), key, owner, None, |e| {
            if e.owner != *owner {
                // Moved between the caller's look-up and now: the caller closes this connection.
                e.moving += 1;
            } else {
                match kind {
                    Use::Socket => e.sockets += 1,
                    Use::Request => e.requests += 1,
                }
            }
            e.idle_since = None;
        });
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

    fn sweep(&self, linger: Duration, draining: &dyn Fn(&str) -> bool) -> usize {
        let now = Instant::now();
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut map = shard.lock().unwrap_or_else(|p| p.into_inner());
            map.retain(|_, e| {
                let keep = match e.idle_since {
                    None => true,
                    Some(since) => !draining(&e.owner) && now.duration_since(since) < linger,
                };
                removed += usize::from(!keep);
                keep
            });
            shrink(&mut map);
        }
        removed
    }

    fn counts(&self) -> (usize, usize) {
        let (mut all, mut live) = (0, 0);
        self.each(|_, e| {
            all += 1;
            live += usize::from(e.connections() > 0);
        });
        (all, live)
    }
}

/// Gives a table's memory back once it holds a quarter of what it has room for: after a burst of
/// rooms or sockets closes, the table would otherwise keep its peak size for good.
pub(crate) fn shrink<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_shrink_after_a_burst_closes() {
        let mut map: HashMap<u64, u64> = (0..10_000).map(|i| (i, i)).collect();
        let peak = map.capacity();
        map.retain(|k, _| *k < 100);
        shrink(&mut map);
        assert!(map.capacity() < peak / 16, "capacity {} after the burst, {peak} at its peak", map.capacity());
        assert_eq!(map.len(), 100);
        let steady = map.capacity();
        shrink(&mut map);
        assert_eq!(map.capacity(), steady, "a table in use is left alone");
    }

    fn id(s: &str) -> Arc<str> {
        s.into()
    }

    #[tokio::test]
    async fn first_writer_wins() {
        let d = MemoryDirectory::new();
        assert_eq!(&*d.place_if_absent("r", &id("a")).await.owner, "a");
        assert_eq!(&*d.place_if_absent("r", &id("b")).await.owner, "a");
        assert_eq!(d.owner("r").as_deref(), Some("a"));
    }

    #[test]
    fn counts_connections_and_lingers() {
        let d = MemoryDirectory::new();
        d.enter("r", &id("a"), Use::Socket);
        d.enter("r", &id("a"), Use::Request);
        assert_eq!(
            d.get("r").unwrap(),
            RoomInfo { key: "r".into(), backend: "a".into(), sockets: 1, requests: 1, live: true }
        );
        assert_eq!(d.live_rooms_on("a"), vec!["r".to_owned()]);
        d.leave("r", "a", Use::Request);
        d.leave("r", "a", Use::Socket);
        assert!(!d.get("r").unwrap().live);
        assert_eq!(d.sweep(Duration::from_secs(60), &|_| false), 0, "lingers");
        assert_eq!(d.owner("r").as_deref(), Some("a"));
        assert_eq!(d.sweep(Duration::ZERO, &|_| false), 1, "expires after the linger");
        assert_eq!(d.owner("r"), None);
    }

    #[test]
    fn idle_rooms_of_a_draining_backend_go_at_once() {
        let d = MemoryDirectory::new();
        d.enter("idle", &id("a"), Use::Request);
        d.leave("idle", "a", Use::Request);
        d.enter("live", &id("a"), Use::Socket);
        assert_eq!(d.sweep(Duration::from_secs(60), &|b| b == "a"), 1);
        assert!(d.owner("idle").is_none());
        assert!(d.owner("live").is_some(), "a live room is never swept");
    }

    #[test]
    fn reassign_moves_the_room_and_not_its_closing_sockets() {
        let d = MemoryDirectory::new();
        d.enter("r", &id("a"), Use::Socket);
        assert!(!d.reassign_local("r", "b", &id("c")), "only from the current owner");
        assert!(d.reassign_local("r", "a", &id("b")));
        assert_eq!(d.get("r").unwrap().backend, "b");
        assert_eq!(d.get("r").unwrap().sockets, 0);
        assert!(d.get("r").unwrap().live, "the closing socket still holds the room");
        d.enter("r", &id("b"), Use::Socket);
        d.leave("r", "a", Use::Socket);
        assert_eq!(d.get("r").unwrap().sockets, 1);
    }

    #[test]
    fn list_pages_in_key_order() {
        let d = MemoryDirectory::new();
        for k in ["c", "a", "b", "d"] {
            d.enter(k, &id("x"), Use::Socket);
        }
        let first: Vec<String> = d.list(None, 2).into_iter().map(|r| r.key).collect();
        assert_eq!(first, ["a", "b"]);
        let next: Vec<String> = d.list(Some("b"), 2).into_iter().map(|r| r.key).collect();
        assert_eq!(next, ["c", "d"]);
        assert_eq!(d.counts(), (4, 4));
    }
}
