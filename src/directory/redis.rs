//! The room directory shared by several roomgate replicas through Redis.
//!
//! Each replica keeps its own connections counted in a local [`MemoryDirectory`]; Redis holds
//! what the replicas must agree on:
//! - `{prefix}room:{key}`: "owner version", the room's owner, placed first-writer-wins (one
//!   script: GET, else SET with an expiry). Every move bumps the version, so that a move wins
//!   over replicas that still hold the room on its old owner: they follow it.
//! - `{prefix}held:{replica}`: room -> "owner version connections" for the rooms a replica holds
//!   live; it expires with the replica's heartbeat.
//! - `{prefix}replicas`: replica -> "epoch seen_ms backend,ids" (heartbeat).
//! - `{prefix}drains`: backend -> drain deadline (unix ms): a drain started anywhere holds
//!   everywhere. `{prefix}splits` counts conflicts seen.
//!
//! Redis is touched when a room is placed or moved and once per refresh period (one command per
//! live room, in scripts of 500 rooms, plus one pipeline), never per request of a room live here
//! and never per WebSocket frame. When Redis is unreachable, known rooms keep their owner, new
//! rooms get pure placement (which every replica computes alike), and the outage shows in logs,
//! status and metrics. When it returns, possibly empty, each replica's next refresh re-asserts the
//! rooms it holds live; a room placed twice meanwhile goes to the owner with the most live
//! connections over all replicas.
//!
//! The scripts reach keys they are not given as KEYS: a standalone Redis (or a primary with
//! replicas), not Redis Cluster.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use redis::aio::ConnectionManager;
use serde_json::{Value, json};

use super::memory::LiveEntry;
use super::{BoxFuture, MemoryDirectory, Placement, ReplicaState, RoomDirectory, RoomInfo, SyncReport, Use, unix_ms};

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

/// Places a new room, or returns the recorded owner, its version, and whether some replica
/// holds the room live. KEYS[1]: the room's key; ARGV: candidate, ttl ms, prefix, room.
const PLACE: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1] .. ' 1', 'PX', ARGV[2])
  return {ARGV[1], 1, 0}
end
local o, v = string.match(cur, '^(%S+) (%d+)$')
local live = 0
for _, rep in ipairs(redis.call('HKEYS', ARGV[3] .. 'replicas')) do
  if redis.call('HEXISTS', ARGV[3] .. 'held:' .. rep, ARGV[4]) == 1 then
    live = 1
    break
  end
end
return {o, tonumber(v), live}
";

/// Moves a room from ARGV[1] to ARGV[2] (the next version) unless another replica moved it
/// elsewhere first; returns the version now recorded, 0 when it was moved elsewhere.
const REASSIGN: &str = r"
local cur = redis.call('GET', KEYS[1])
local o, v = nil, 0
if cur then
  o, v = string.match(cur, '^(%S+) (%d+)$')
  v = tonumber(v)
end
if o == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return v
end
if (not cur) or o == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2] .. ' ' .. (v + 1), 'PX', ARGV[3])
  return v + 1
end
return 0
";

/// Refreshes (or re-asserts) the rooms this replica holds live, one SET per room, and records
/// them in the replica's `held` hash. ARGV: prefix, replica, room ttl ms, held ttl ms, n, then
/// n x (room, owner, version, connections), then the rooms this replica no longer holds.
/// Returns per room "" (agreed) or the "owner version" this replica must follow:
/// - a later version elsewhere is a move this replica has not seen: follow it;
/// - the same version with another owner is a room placed twice (an outage, or replicas that
///   place differently): the owner with the most live connections wins, a tie keeps the
///   recorded one.
const REFRESH: &str = r"
local p, me, ttl, held_ttl, n = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local out, held = {}, {}
local i = 6
for r = 1, n do
  local room, owner, ver, conns = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  i = i + 4
  local k = p .. 'room:' .. room
  local mine = owner .. ' ' .. ver
  local old = redis.call('SET', k, mine, 'PX', ttl, 'GET')
  local result = ''
  if old and old ~= mine then
    local o, v = string.match(old, '^(%S+) (%d+)$')
    v = tonumber(v) or 0
    if v > ver then
      redis.call('SET', k, old, 'PX', ttl)
      result = old
    elseif v == ver then
      local tally = {[owner] = conns}
      for _, rep in ipairs(redis.call('HKEYS', p .. 'replicas')) do
        if rep ~= me then
          local h = redis.call('HGET', p .. 'held:' .. rep, room)
          local ho, hv, hc = string.match(h or '', '^(%S+) (%d+) (%d+)$')
          if ho and tonumber(hv) == ver then
            tally[ho] = (tally[ho] or 0) + tonumber(hc)
          end
        end
      end
      local best, most = o, tally[o] or 0
      for ho, c in pairs(tally) do
        if c > most or (c == most and best ~= o and ho < best) then
          best, most = ho, c
        end
      end
      if (tally[o] or 0) > 0 then
        redis.call('INCR', p .. 'splits')
      end
      if best ~= owner then
        redis.call('SET', k, best .. ' ' .. ver, 'PX', ttl)
        result = best .. ' ' .. ver
      end
    end
  end
  held[#held + 1] = room
  held[#held + 1] = mine .. ' ' .. conns
  out[#out + 1] = result
end
local hk = p .. 'held:' .. me
if #held > 0 then
  redis.call('HSET', hk, unpack(held))
end
if i <= #ARGV then
  redis.call('HDEL', hk, unpack(ARGV, i, #ARGV))
end
redis.call('PEXPIRE', hk, held_ttl)
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
        let c =
            self.settled(tokio::time::timeout(t * 4, self.client.get_connection_manager_with_config(config)).await)?;
        self.conn.store(Some(Arc::new(c.clone())));
        Some(c)
    }

    /// The value of a timed Redis call, or `None` with the failure recorded.
    fn settled<T>(&self, result: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>) -> Option<T> {
        match result {
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
        self.settled(tokio::time::timeout(self.settings.timeout, f(&mut conn)).await)
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
            let answer = tokio::time::timeout(self.settings.timeout, ping.query_async::<String>(&mut conn)).await;
            if self.settled(answer).is_none() {
                // A fresh connection next time, rather than one in the middle of its own
                // reconnect back-off.
                self.conn.store(None);
                return None;
            }
            self.recovered();
        }
        let pending = std::mem::take(&mut *lock(&self.unshared_drains));
        for (backend, deadline) in &pending {
            if !self.write_drain(backend, *deadline).await {
                lock(&self.unshared_drains).extend(pending.iter().cloned());
                return None;
            }
        }
        let moved = self.refresh().await?;
        let drains = self.heartbeat(me).await?;
        Some(SyncReport { drains, moved })
    }

    /// Publishes the rooms held live here. Rooms the fleet records elsewhere are moved here (the
    /// local record) and returned as (room, local owner, fleet owner), for their sockets to be
    /// closed.
    async fn refresh(&self) -> Option<Vec<(String, Arc<str>, Arc<str>)>> {
        let live = self.local.live_entries();
        let now_live: HashSet<String> = live.iter().map(|e| e.key.clone()).collect();
        let gone: Vec<String> = lock(&self.published).difference(&now_live).cloned().collect();
        let mut moves = Vec::new();
        let ttl = self.ttl_ms().to_string();
        let held_ttl = (3 * self.settings.refresh.as_millis() as u64).max(self.ttl_ms()).to_string();
        let mut chunks: Vec<&[LiveEntry]> = live.chunks(BATCH).collect();
        if chunks.is_empty() && !gone.is_empty() {
            chunks.push(&[]);
        }
        for (b, chunk) in chunks.iter().enumerate() {
            let mut inv = self.scripts.refresh.prepare_invoke();
            inv.arg(&self.settings.prefix).arg(&self.settings.replica).arg(&ttl).arg(&held_ttl).arg(chunk.len());
            for e in chunk.iter() {
                inv.arg(&e.key).arg(&*e.owner).arg(e.version).arg(e.connections);
            }
            if b == 0 {
                for room in gone.iter().take(BATCH * 4) {
                    inv.arg(room);
                }
            }
            let answers: Vec<String> = self.call(&self.calls.refresh, async |c| inv.invoke_async(c).await).await?;
            for (e, answer) in chunk.iter().zip(answers) {
                let Some((owner, version)) = parse_record(&answer) else { continue };
                let to: Arc<str> = Arc::from(owner);
                if to == e.owner {
                    self.local.set_version(&e.key, &e.owner, version);
                } else if self.local.move_to(&e.key, &e.owner, &to, Some(version)) {
                    moves.push((e.key.clone(), e.owner.clone(), to));
                }
            }
        }
        *lock(&self.published) = now_live;
        Some(moves)
    }

    /// Heartbeat and fleet reads in one pipeline; returns the drains in force.
    async fn heartbeat(&self, me: &ReplicaState) -> Option<HashMap<String, u64>> {
        let now = unix_ms();
        let refresh_ms = self.settings.refresh.as_millis() as u64;
        let backends: Vec<&str> = me.backends.iter().map(|b| &**b).collect();
        let beat = format!("{} {now} {}", me.epoch, backends.join(","));
        let replicas_key = self.key("replicas", "");
        let mut pipe = redis::pipe();
        pipe.cmd("HSET").arg(&replicas_key).arg(&self.settings.replica).arg(&beat).ignore();
        pipe.cmd("HGETALL").arg(&replicas_key);
        pipe.cmd("HGETALL").arg(self.key("drains", ""));
        pipe.cmd("GET").arg(self.key("splits", ""));
        type Reply = (HashMap<String, String>, HashMap<String, u64>, Option<u64>);
        let (beats, drains, splits): Reply = self.call(&self.calls.sync, async |c| pipe.query_async(c).await).await?;
        // Replicas gone for good leave the heartbeat hash (their `held` hashes have expired).
        let dead: Vec<&String> = beats
            .iter()
            .filter(|(_, beat)| beat_age(beat, now).is_none_or(|age| age > self.ttl_ms().max(10 * refresh_ms)))
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
        let mut fleet = lock(&self.fleet);
        *fleet = Fleet { live_rooms: live_rooms.unwrap_or(fleet.live_rooms), splits: splits.unwrap_or(0), replicas };
        Some(drains)
    }

    /// Distinct rooms held live by any replica, counted every tenth sync (the union of the
    /// replicas' `held` hashes is read whole).
    async fn fleet_live_rooms(&self, beats: &HashMap<String, String>) -> Option<u64> {
        if self.calls.sync.load(Ordering::Relaxed) % 10 != 1 {
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
            let room = self.key("room:", key);
            let (ttl, prefix) = (self.ttl_ms(), &self.settings.prefix);
            let answer: Option<(String, u64, u8)> = self
                .call(&self.calls.place, async |c| {
                    self.scripts.place.key(&room).arg(&**candidate).arg(ttl).arg(prefix).arg(key).invoke_async(c).await
                })
                .await;
            self.calls.place_micros.fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
            match answer {
                Some((owner, version, live)) => {
                    let owner = if *owner == **candidate { candidate.clone() } else { Arc::from(owner) };
                    let owner = self.local.adopt(key, &owner, version);
                    let live = live == 1 || self.local.owner_if(key, true).is_some();
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
            let version: Option<u64> = self
                .call(&self.calls.reassign, async |c| {
                    self.scripts.reassign.key(&room).arg(from).arg(&**to).arg(ttl).invoke_async(c).await
                })
                .await;
            if version == Some(0) {
                return false; // another replica moved it elsewhere; the caller looks again
            }
            // Moved in Redis (or Redis is away: the next version locally).
            if !self.local.move_to(key, from, to, version) {
                let version = version.unwrap_or(1);
                self.local.adopt(key, to, version);
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
            let replicas_key = self.key("replicas", "");
            let names: Vec<String> = self
                .call(&self.calls.read, async |c| redis::cmd("HKEYS").arg(&replicas_key).query_async(c).await)
                .await?;
            let mut pipe = redis::pipe();
            pipe.cmd("GET").arg(self.key("room:", key));
            for name in &names {
                pipe.cmd("HGET").arg(self.key("held:", name)).arg(key);
            }
            let mut answers: Vec<Option<String>> =
                self.call(&self.calls.read, async |c| pipe.query_async(c).await).await?;
            let record = answers.remove(0);
            let (owner, version) = record.as_deref().and_then(parse_record).unzip();
            let replicas: serde_json::Map<String, Value> = names
                .into_iter()
                .zip(answers)
                .filter_map(|(replica, held)| {
                    let held = held?;
                    let mut parts = held.split(' ');
                    let (backend, version, conns) = (parts.next()?, parts.next()?, parts.next()?);
                    let v = json!({ "backend": backend, "version": version.parse::<u64>().ok(), "connections": conns.parse::<u64>().ok() });
                    Some((replica, v))
                })
                .collect();
            Some(json!({ "owner": owner, "version": version, "replicas": replicas }))
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

/// "owner version" as Redis records it.
fn parse_record(record: &str) -> Option<(&str, u64)> {
    let (owner, version) = record.split_once(' ')?;
    Some((owner, version.parse().ok()?))
}

/// How long ago a heartbeat ("epoch seen_ms backends") was sent.
fn beat_age(beat: &str, now: u64) -> Option<u64> {
    let seen: u64 = beat.split(' ').nth(1)?.parse().ok()?;
    Some(now.saturating_sub(seen))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
