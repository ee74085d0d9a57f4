//! The room directory shared by several roomgate replicas through Redis.
//!
//! Each replica keeps its own connections counted in a local [`MemoryDirectory`]; Redis holds
//! what the replicas must agree on:
//! - `{prefix}room:{key}`: the room's owner, placed first-writer-wins (one script: GET, else SET
//!   with an expiry), its expiry refreshed while any replica holds the room live;
//! - `{prefix}holders:{key}`: replica -> "owner sockets", the room's live connections per replica;
//! - `{prefix}drains`: backend -> drain deadline (unix ms), so a drain started anywhere holds
//!   everywhere;
//! - `{prefix}replicas`: replica -> "epoch seen_ms backend,ids" (heartbeat);
//! - `{prefix}live` (rooms by last refresh) and `{prefix}splits` (conflicts seen): fleet metrics.
//!
//! Redis is touched when a room is placed or moved and once per refresh period (pipelined),
//! never per request of a room live here and never per WebSocket frame. When Redis is
//! unreachable, known rooms keep their owner, new rooms get pure placement (which every replica
//! computes alike), and the outage shows in logs, status and metrics. When it returns, possibly
//! empty, each replica re-asserts the rooms it holds live; a conflict goes to the owner with the
//! most live sockets.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use redis::aio::ConnectionManager;
use serde_json::{Value, json};

use super::{BoxFuture, MemoryDirectory, Placement, ReplicaState, RoomDirectory, RoomInfo, SyncReport, Use};

/// Rooms per refresh script call.
const BATCH: usize = 500;

/// Where the shared directory lives and how it is kept.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    pub url: String,
    pub prefix: String,
    /// This replica's id in the fleet.
    pub replica: String,
    /// How often live rooms are refreshed and drains read.
    pub refresh: Duration,
    /// Longest wait for one Redis call; past it the call counts as failed.
    pub timeout: Duration,
    /// How long a room stays recorded after the last refresh by any replica.
    pub ttl: Duration,
}

/// Places a new room, or returns the recorded owner and how many replicas hold it live.
const PLACE: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {ARGV[1], 0}
end
return {cur, redis.call('HLEN', KEYS[2])}
";

/// Moves a room from ARGV[1] to ARGV[2] unless another replica moved it elsewhere first.
const REASSIGN: &str = r"
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
if (not cur) or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
";

/// Refreshes (or re-asserts) the rooms this replica holds live and returns each room's owner.
/// ARGV: prefix, replica, ttl ms, now ms, n, then n x (room, owner, connections), then the rooms
/// this replica no longer holds. A room recorded with another owner is a conflict: the owner
/// with the most live connections over all replicas wins (a tie keeps the recorded one).
const REFRESH: &str = r"
local p, me, ttl, now, n = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local out = {}
local i = 6
for r = 1, n do
  local room, owner, conns = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  i = i + 3
  local k, h = p .. 'room:' .. room, p .. 'holders:' .. room
  redis.call('HSET', h, me, owner .. ' ' .. conns)
  redis.call('PEXPIRE', h, ttl)
  local cur = redis.call('GET', k)
  if not cur then
    redis.call('SET', k, owner, 'PX', ttl)
    cur = owner
  elseif cur == owner then
    redis.call('PEXPIRE', k, ttl)
  else
    local tally = {}
    local hs = redis.call('HGETALL', h)
    for j = 1, #hs, 2 do
      local o, c = string.match(hs[j + 1], '^(%S+) (%d+)$')
      if o then tally[o] = (tally[o] or 0) + tonumber(c) end
    end
    local best, most = cur, tally[cur] or 0
    for o, c in pairs(tally) do
      if c > most or (c == most and o ~= cur and best ~= cur and o < best) then
        best, most = o, c
      end
    end
    if (tally[cur] or 0) > 0 then
      redis.call('INCR', p .. 'splits')
    end
    redis.call('SET', k, best, 'PX', ttl)
    cur = best
  end
  redis.call('ZADD', p .. 'live', now, room)
  out[#out + 1] = cur
end
for j = i, #ARGV do
  redis.call('HDEL', p .. 'holders:' .. ARGV[j], me)
end
return out
";

/// The shared directory: a local one for this replica's connections, Redis for the fleet.
pub struct RedisDirectory {
    local: MemoryDirectory,
    settings: RedisSettings,
    client: redis::Client,
    conn: ArcSwapOption<ConnectionManager>,
    /// Redis answered the last call.
    up: AtomicBool,
    last_error: Mutex<Option<String>>,
    /// Rooms this replica published as held live at the last refresh.
    published: Mutex<HashSet<String>>,
    /// Drain changes made here while Redis was unreachable, replayed by the next sync.
    unshared_drains: Mutex<Vec<(String, Option<u64>)>>,
    /// Fleet figures read by the last sync.
    fleet: Mutex<Fleet>,
    calls: Calls,
    scripts: Scripts,
}

struct Scripts {
    place: redis::Script,
    reassign: redis::Script,
    refresh: redis::Script,
}

/// Redis round trips by purpose, and time spent placing rooms.
#[derive(Default)]
struct Calls {
    place: AtomicU64,
    place_micros: AtomicU64,
    reassign: AtomicU64,
    refresh: AtomicU64,
    sync: AtomicU64,
    read: AtomicU64,
    errors: AtomicU64,
}

#[derive(Clone, Debug, Default)]
struct Fleet {
    live_rooms: u64,
    splits: u64,
    replicas: Vec<Value>,
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl RedisDirectory {
    /// A directory on the Redis at `settings.url`. Nothing is connected yet: the first sync
    /// connects, and until then (or while Redis is away) the replica works on its own.
    pub fn new(settings: RedisSettings) -> Result<Arc<RedisDirectory>, redis::RedisError> {
        let client = redis::Client::open(settings.url.as_str())?;
        Ok(Arc::new(RedisDirectory {
            local: MemoryDirectory::new(),
            settings,
            client,
            conn: ArcSwapOption::empty(),
            up: AtomicBool::new(false),
            last_error: Mutex::new(Some("not connected yet".to_owned())),
            published: Mutex::new(HashSet::new()),
            unshared_drains: Mutex::new(Vec::new()),
            fleet: Mutex::new(Fleet::default()),
            calls: Calls::default(),
            scripts: Scripts {
                place: redis::Script::new(PLACE),
                reassign: redis::Script::new(REASSIGN),
                refresh: redis::Script::new(REFRESH),
            },
        }))
    }

    /// Redis answered the last call.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    fn key(&self, kind: &str, name: &str) -> String {
        format!("{}{kind}{name}", self.settings.prefix)
    }

    fn ttl_ms(&self) -> u64 {
        self.settings.ttl.as_millis() as u64
    }

    /// The connection, connecting first if there is none (bounded by the timeout).
    async fn connection(&self) -> Option<ConnectionManager> {
        if let Some(c) = self.conn.load_full() {
            return Some((*c).clone());
        }
        let t = self.settings.timeout;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(t))
            .set_response_timeout(Some(t))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(t);
        match tokio::time::timeout(t * 4, self.client.get_connection_manager_with_config(config)).await {
            Ok(Ok(c)) => {
                self.conn.store(Some(Arc::new(c.clone())));
                Some(c)
            }
            Ok(Err(e)) => {
                self.failed(&e.to_string());
                None
            }
            Err(_) => {
                self.failed("connect timed out");
                None
            }
        }
    }

    /// Runs one Redis call with the timeout; records success or failure.
    async fn call<T>(
        &self,
        counter: &AtomicU64,
        f: impl AsyncFnOnce(&mut ConnectionManager) -> redis::RedisResult<T>,
    ) -> Option<T> {
        let mut conn = if self.is_up() {
            (*self.conn.load_full()?).clone()
        } else {
            // Only syncs reconnect; requests do not wait for an absent Redis.
            return None;
        };
        counter.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.settings.timeout, f(&mut conn)).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                self.failed(&e.to_string());
                None
            }
            Err(_) => {
                self.failed("timed out");
                None
            }
        }
    }

    fn failed(&self, why: &str) {
        self.calls.errors.fetch_add(1, Ordering::Relaxed);
        *lock(&self.last_error) = Some(why.to_owned());
        if self.up.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                error = why,
                "Redis unreachable: known rooms keep their owner, new rooms get pure placement"
            );
        }
    }

    fn recovered(&self) {
        *lock(&self.last_error) = None;
        if !self.up.swap(true, Ordering::Relaxed) {
            tracing::info!("Redis reachable: sharing the room directory");
        }
    }

    /// One sync: reconnect if needed, replay drains, refresh live rooms, heartbeat, read drains.
    async fn sync_once(&self, me: &ReplicaState) -> Option<SyncReport> {
        let mut conn = self.connection().await?;
        // A trivial call decides whether Redis is back before anything is written.
        if !self.is_up() {
            let ping = redis::cmd("PING");
            match tokio::time::timeout(self.settings.timeout, ping.query_async::<String>(&mut conn)).await {
                Ok(Ok(_)) => self.recovered(),
                Ok(Err(e)) => {
                    self.failed(&e.to_string());
                    // A fresh connection next time, rather than one in the middle of its
                    // own reconnect back-off.
                    self.conn.store(None);
                    return None;
                }
                Err(_) => {
                    self.failed("timed out");
                    self.conn.store(None);
                    return None;
                }
            }
        }
        let pending = std::mem::take(&mut *lock(&self.unshared_drains));
        for (backend, deadline) in &pending {
            if !self.write_drain(backend, *deadline).await {
                lock(&self.unshared_drains).extend(pending.iter().cloned());
                return None;
            }
        }
        let conflicts = self.refresh().await?;
        let drains = self.heartbeat(me).await?;
        Some(SyncReport { drains, conflicts })
    }

    /// Publishes the rooms held live here; returns those whose fleet owner differs.
    async fn refresh(&self) -> Option<Vec<(String, Arc<str>, Arc<str>)>> {
        let live = self.local.live_entries();
        let now_live: HashSet<String> = live.iter().map(|(k, _, _)| k.clone()).collect();
        let gone: Vec<String> = lock(&self.published).difference(&now_live).cloned().collect();
        let mut conflicts = Vec::new();
        let (ttl, now) = (self.ttl_ms().to_string(), unix_ms().to_string());
        let batches = live.chunks(BATCH).count().max(usize::from(!gone.is_empty()));
        for b in 0..batches {
            let chunk = live.chunks(BATCH).nth(b).unwrap_or(&[]);
            let mut inv = self.scripts.refresh.prepare_invoke();
            inv.arg(&self.settings.prefix).arg(&self.settings.replica).arg(&ttl).arg(&now).arg(chunk.len());
            for (room, owner, conns) in chunk {
                inv.arg(room).arg(&**owner).arg(*conns);
            }
            if b == 0 {
                for room in &gone {
                    inv.arg(room);
                }
            }
            let owners: Vec<String> = self.call(&self.calls.refresh, async |c| inv.invoke_async(c).await).await?;
            for ((room, local, _), fleet) in chunk.iter().zip(owners) {
                if **local != *fleet {
                    conflicts.push((room.clone(), local.clone(), Arc::from(fleet)));
                }
            }
        }
        *lock(&self.published) = now_live;
        Some(conflicts)
    }

    /// Heartbeat and fleet reads in one pipeline; returns the drains in force.
    async fn heartbeat(&self, me: &ReplicaState) -> Option<HashMap<String, u64>> {
        let now = unix_ms();
        let refresh_ms = self.settings.refresh.as_millis() as u64;
        let backends: Vec<&str> = me.backends.iter().map(|b| &**b).collect();
        let beat = format!("{} {now} {}", me.epoch, backends.join(","));
        let (replicas_key, live_key) = (self.key("replicas", ""), self.key("live", ""));
        let mut pipe = redis::pipe();
        pipe.cmd("HSET").arg(&replicas_key).arg(&self.settings.replica).arg(&beat).ignore();
        pipe.cmd("HGETALL").arg(&replicas_key);
        pipe.cmd("HGETALL").arg(self.key("drains", ""));
        pipe.cmd("ZREMRANGEBYSCORE").arg(&live_key).arg("-inf").arg(now.saturating_sub(self.ttl_ms())).ignore();
        pipe.cmd("ZCOUNT").arg(&live_key).arg(now.saturating_sub(2 * refresh_ms)).arg("+inf");
        pipe.cmd("GET").arg(self.key("splits", ""));
        type Reply = (HashMap<String, String>, HashMap<String, u64>, u64, Option<u64>);
        let (beats, drains, live_rooms, splits): Reply =
            self.call(&self.calls.sync, async |c| pipe.query_async(c).await).await?;
        let mut replicas: Vec<Value> = beats
            .iter()
            .filter_map(|(replica, beat)| {
                let mut parts = beat.splitn(3, ' ');
                let epoch: u64 = parts.next()?.parse().ok()?;
                let seen: u64 = parts.next()?.parse().ok()?;
                let backends: Vec<&str> = parts.next().unwrap_or("").split(',').filter(|b| !b.is_empty()).collect();
                (now.saturating_sub(seen) <= 3 * refresh_ms).then(|| {
                    json!({ "replica": replica, "epoch": epoch, "backends": backends, "seen_ms_ago": now.saturating_sub(seen) })
                })
            })
            .collect();
        replicas.sort_by(|a, b| a["replica"].as_str().cmp(&b["replica"].as_str()));
        *lock(&self.fleet) = Fleet { live_rooms, splits: splits.unwrap_or(0), replicas };
        Some(drains)
    }

    async fn write_drain(&self, backend: &str, deadline: Option<u64>) -> bool {
        let key = self.key("drains", "");
        let mut cmd = match deadline {
            Some(_) => redis::cmd("HSET"),
            None => redis::cmd("HDEL"),
        };
        cmd.arg(&key).arg(backend);
        if let Some(ms) = deadline {
            cmd.arg(ms);
        }
        self.call(&self.calls.sync, async |c| cmd.query_async::<i64>(c).await).await.is_some()
    }
}

impl RoomDirectory for RedisDirectory {
    fn owner(&self, key: &str) -> Option<Arc<str>> {
        // A room with connections here is kept where they are (the refresh re-asserts it);
        // anything else asks the fleet, unless the fleet is out of reach.
        self.local.owner_if(key, self.is_up())
    }

    fn place_if_absent<'a>(&'a self, key: &'a str, candidate: &'a Arc<str>) -> BoxFuture<'a, Placement> {
        Box::pin(async move {
            let start = Instant::now();
            let (room, holders) = (self.key("room:", key), self.key("holders:", key));
            let ttl = self.ttl_ms();
            let answer: Option<(String, u64)> = self
                .call(&self.calls.place, async |c| {
                    self.scripts.place.key(&room).key(&holders).arg(&**candidate).arg(ttl).invoke_async(c).await
                })
                .await;
            self.calls.place_micros.fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
            match answer {
                Some((owner, holders)) => {
                    let owner = if *owner == **candidate { candidate.clone() } else { Arc::from(owner) };
                    let owner = self.local.adopt(key, &owner);
                    let live = holders > 0 || self.local.owner_if(key, true).is_some();
                    Placement { owner, live }
                }
                None => self.local.place_local(key, candidate),
            }
        })
    }

    fn reassign<'a>(&'a self, key: &'a str, from: &'a str, to: &'a Arc<str>) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let room = self.key("room:", key);
            let ttl = self.ttl_ms();
            let moved: Option<i64> = self
                .call(&self.calls.reassign, async |c| {
                    self.scripts.reassign.key(&room).arg(from).arg(&**to).arg(ttl).invoke_async(c).await
                })
                .await;
            if moved == Some(0) {
                return false; // another replica moved it elsewhere; the caller looks again
            }
            // Moved in Redis (or Redis is away): follow locally.
            if !self.local.reassign_local(key, from, to) {
                self.local.adopt(key, to);
            }
            true
        })
    }

    fn enter(&self, key: &str, owner: &Arc<str>, kind: Use) {
        self.local.enter(key, owner, kind);
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

    fn sweep(&self, linger: Duration, draining: &dyn Fn(&str) -> bool) -> usize {
        self.local.sweep(linger, draining)
    }

    fn counts(&self) -> (usize, usize) {
        self.local.counts()
    }

    fn sync<'a>(&'a self, me: &'a ReplicaState) -> BoxFuture<'a, Option<SyncReport>> {
        Box::pin(self.sync_once(me))
    }

    fn share_drain<'a>(&'a self, backend: &'a str, deadline_ms: Option<u64>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if !self.write_drain(backend, deadline_ms).await {
                tracing::warn!(backend, "Redis unreachable: the drain change is shared once it is back");
                lock(&self.unshared_drains).push((backend.to_owned(), deadline_ms));
            }
        })
    }

    fn fleet_room<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Option<Value>> {
        Box::pin(async move {
            let mut pipe = redis::pipe();
            pipe.cmd("GET").arg(self.key("room:", key)).cmd("HGETALL").arg(self.key("holders:", key));
            let (owner, holders): (Option<String>, HashMap<String, String>) =
                self.call(&self.calls.read, async |c| pipe.query_async(c).await).await?;
            let replicas: serde_json::Map<String, Value> = holders
                .into_iter()
                .map(|(replica, v)| {
                    let (backend, conns) = v.split_once(' ').unwrap_or((&v, "0"));
                    (replica, json!({ "backend": backend, "connections": conns.parse::<u64>().unwrap_or(0) }))
                })
                .collect();
            Some(json!({ "owner": owner, "replicas": replicas }))
        })
    }

    fn status(&self) -> Value {
        let fleet = lock(&self.fleet).clone();
        json!({
            "backend": "redis",
            "replica": self.settings.replica,
            "reachable": self.is_up(),
            "error": *lock(&self.last_error),
            "fleet_live_rooms": fleet.live_rooms,
            "fleet_split_rooms": fleet.splits,
            "replicas": fleet.replicas,
            "calls": {
                "place": self.calls.place.load(Ordering::Relaxed),
                "reassign": self.calls.reassign.load(Ordering::Relaxed),
                "refresh": self.calls.refresh.load(Ordering::Relaxed),
                "sync": self.calls.sync.load(Ordering::Relaxed),
                "read": self.calls.read.load(Ordering::Relaxed),
                "errors": self.calls.errors.load(Ordering::Relaxed),
            },
        })
    }

    fn render_metrics(&self, out: &mut String) {
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
            "# HELP roomgate_fleet_split_rooms Conflicts (a room live on two backends) seen by any replica."
        );
        let _ = writeln!(out, "# TYPE roomgate_fleet_split_rooms counter");
        let _ = writeln!(out, "roomgate_fleet_split_rooms_total {}", fleet.splits);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
