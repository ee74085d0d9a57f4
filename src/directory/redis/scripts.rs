//! The Lua scripts of the Redis directory: each runs atomically on the Redis server, so that a
//! decision (first writer wins, compare-and-set of a move, "may a member join now") and its write
//! are one step. Each touches the keys of one bucket only (`keys.rs`), so that on Redis Cluster
//! it runs on one hash slot; every script of a bucket declares the bucket's keys first
//! (`KEYS[1]` to `KEYS[7]`: beats, gen, rebuilding, log, seq, live, splits).
//!
//! A replica's claim on a room is a field of the room's hash: "owner version connections until
//! sockets", `until` in Redis server milliseconds (`TIME`), so that no replica's clock is trusted.
//! A claim counts while its replica's heartbeat in the bucket is younger than the lease (three
//! refresh periods), and, when it has no connections (a handshake on its way), until `until`. A
//! claim naming another owner than the room's record blocks joins while it counts: that is what
//! keeps a moved room off its new owner while any replica may still have sockets on the old one
//! (`docs/replicas.md`, "One owner at a time"). Claims are written when they change, not renewed:
//! the heartbeat keeps them.

/// Shared by every script: the server's clock, the rebuild window after Redis lost the bucket's
/// data, the one parser and formatter of each stored form (`wire.rs` holds their Rust side), the
/// claims that count on a room, and the writes every change of a room goes through.
const PRELUDE: &str = r"
local LOG_MAX = 1024
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The bucket's `gen` is absent after a restart or a flush: whoever finds it so starts a window of
-- `window` ms in which no room without a record is placed, so that every replica re-asserts the
-- rooms it holds first (its heartbeat tells it the generation changed). Returns the ms left of
-- the window (0: none).
local function rebuild_left(window)
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('SET', KEYS[2], now_ms())
    redis.call('SET', KEYS[3], '1', 'PX', window)
    return tonumber(window)
  end
  return math.max(redis.call('PTTL', KEYS[3]), 0)
end
-- A room's record, 'owner version': owner, version (nil when absent or malformed).
local function record(r)
  local o, v = string.match(r or '', '^(%S+) (%d+)$')
  if not o then return nil end
  return o, tonumber(v)
end
local function record_of(o, v)
  return o .. ' ' .. v
end
-- A claim, 'owner version connections until sockets': owner, version, connections, until,
-- sockets (nil when absent or malformed).
local function claim(h)
  local o, v, c, u, s = string.match(h or '', '^(%S+) (%d+) (%d+) (%d+) (%d+)$')
  if not o then return nil end
  return o, tonumber(v), tonumber(c), tonumber(u), tonumber(s)
end
local function claim_of(o, v, c, u, s)
  return o .. ' ' .. v .. ' ' .. c .. ' ' .. u .. ' ' .. s
end
-- The room's record, the claims on it that count, each {replica, owner, version, connections,
-- until, sockets, counts_until}, and the replicas whose claims have connections and who have a
-- heartbeat in the bucket however old (not yet removed as gone): while any has, the room is kept.
local function room_state(k, now, lease)
  local raw = redis.call('HGETALL', k)
  local rec, found, reps = nil, {}, {}
  for i = 1, #raw, 2 do
    local f = raw[i]
    if f == '=' then
      rec = raw[i + 1]
    elseif string.sub(f, 1, 1) ~= '!' then
      local o, v, c, u, s = claim(raw[i + 1])
      if o then
        found[#found + 1] = {f, o, v, c, u, s}
        reps[#reps + 1] = f
      end
    end
  end
  local live, holders = {}, {}
  if #reps > 0 then
    local beats = redis.call('HMGET', KEYS[1], unpack(reps))
    for j, x in ipairs(found) do
      local b = tonumber(beats[j])
      if b and x[4] > 0 then
        holders[#holders + 1] = x[1]
      end
      if b then
        local ends = b + lease
        if x[4] == 0 then ends = math.min(ends, x[5]) end
        if ends > now then
          x[7] = ends
          live[#live + 1] = x
        end
      end
    end
  end
  return rec, live, holders
end
-- Whether any replica (other than `skip`) holds connections of the room, as `room_state`'s
-- `holders` says: a replica whose heartbeat lapsed for a while still keeps its rooms, until it is
-- removed as gone, so that no live room's record expires under it.
local function busy(holders, skip)
  for _, r in ipairs(holders) do
    if r ~= skip then return true end
  end
  return false
end
-- After the claims on room `k` changed: a room with connections somewhere never expires and is
-- in `live`; one without expires `ttl` from now (`fresh`), or keeps the expiry it has.
local function settle(k, room, is_busy, ttl, fresh)
  if is_busy then
    redis.call('PERSIST', k)
    redis.call('SADD', KEYS[6], room)
  else
    redis.call('SREM', KEYS[6], room)
    if fresh or redis.call('PTTL', k) == -1 then
      redis.call('PEXPIRE', k, ttl)
    end
  end
end
-- Writes the record; a change of owner is logged, numbered, for the replicas holding the room to
-- follow at their next heartbeat.
local function put_record(k, room, o, v)
  local old = record(redis.call('HGET', k, '='))
  redis.call('HSET', k, '=', record_of(o, v))
  if old and old ~= o then
    local n = redis.call('INCR', KEYS[5])
    redis.call('LPUSH', KEYS[4], n .. ' ' .. o .. ' ' .. v .. ' ' .. room)
    redis.call('LTRIM', KEYS[4], 0, LOG_MAX - 1)
  end
end
";

/// Places a new room, or returns the recorded owner, its version, whether some replica holds the
/// room live, and how long a member must wait before joining (ms; 0: now).
/// KEYS[8]: the room's hash, KEYS[9]: its hand-off lease, KEYS[10]: this replica's holds.
/// ARGV: candidate, record ttl ms, room, replica, handshake lease ms (0: no claim, a plain
/// request), rebuild window ms, claim lease ms.
/// A record ttl of 0 writes no record (this replica's directory is full): a recorded owner is
/// still followed, a new room gets the candidate unrecorded.
/// A member must wait while Redis is rebuilding and the room has no record, while a claim on
/// another backend counts, or while a replica hands the room off (`moving:{room}`). A member that
/// may join gets this replica's claim (a socket's handshake is on its way), so that no other
/// replica moves the room under it unseen.
const PLACE_BODY: &str = r"
local k, room, me, lease, alive = KEYS[8], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[7])
local now = now_ms()
local rebuild = rebuild_left(ARGV[6])
local cur, live, holders = room_state(k, now, alive)
if not cur then
  if rebuild > 0 then
    return {ARGV[1], 0, 0, rebuild}
  end
  cur = record_of(ARGV[1], 1)
  if ARGV[2] ~= '0' then
    redis.call('HSET', k, '=', cur)
    if not busy(holders) then
      redis.call('PEXPIRE', k, ARGV[2])
    end
  end
end
local o, v = record(cur)
local wait, has = 0, 0
for _, x in ipairs(live) do
  if x[4] > 0 then has = 1 end
  if x[2] ~= o then wait = math.max(wait, x[7] - now) end
end
local moving = redis.call('PTTL', KEYS[9])
if moving > 0 then
  wait = math.max(wait, moving)
end
if lease > 0 and wait == 0 then
  local mo, mv, mc, mu, ms = claim(redis.call('HGET', k, me))
  if not mo or mo ~= o then
    mc, ms, mu = 0, 0, 0
  end
  redis.call('HSET', k, me, claim_of(o, v, mc, math.max(mu, now + lease), ms))
  redis.call('SADD', KEYS[10], room)
  redis.call('HSETNX', KEYS[1], me, now)
  local left = redis.call('PTTL', k)
  if left >= 0 and left < lease then
    redis.call('PEXPIRE', k, lease)
  end
end
return {o, v, has, wait}
";

/// Moves a room from ARGV[1] to ARGV[2] (the next version) unless another replica moved it
/// elsewhere first; returns the version now recorded, 0 when it was moved elsewhere, -1 while
/// Redis is rebuilding (no move until the holders have re-asserted their rooms).
/// KEYS[8]: the room's hash. ARGV: from, to, ttl ms, rebuild window ms, room, claim lease ms.
const REASSIGN_BODY: &str = r"
if rebuild_left(ARGV[4]) > 0 then
  return -1
end
local k = KEYS[8]
local cur, _, holders = room_state(k, now_ms(), tonumber(ARGV[6]))
local o, v = nil, 0
if cur then
  o, v = record(cur)
  v = v or 0
end
if o == ARGV[2] then
  settle(k, ARGV[5], busy(holders), ARGV[3], true)
  return v
end
if (not cur) or o == ARGV[1] then
  put_record(k, ARGV[5], ARGV[2], v + 1)
  settle(k, ARGV[5], busy(holders), ARGV[3], true)
  return v + 1
end
return 0
";

/// Writes this replica's claims that changed since it last wrote them (re-asserting each room's
/// record as it does), and removes those it no longer holds. KEYS[8]: this replica's holds in the
/// bucket, then the hashes of the n rooms written, then those of the rooms removed.
/// ARGV: replica, room ttl ms, claim lease ms, rebuild window ms, n, then n x (room, owner,
/// version, connections, sockets), then per room removed (room, "owner version" as this replica
/// knew it). A room removed gets the full ttl from now unless another replica has connections
/// of it, if this replica had a claim on it or its record is still the one this replica knew (a
/// socket that opened and closed between two syncs: the room lingers as any room that had a
/// WebSocket; a room moved meanwhile is left to its new owner). Returns per room written "" (agreed)
/// or the "owner version" this replica must follow:
/// - a later version elsewhere is a move this replica has not seen: follow it (its claim on the
///   old owner stays until it has closed its sockets there and released it);
/// - the same version with another owner is a room placed twice (an outage, or replicas that
///   place differently): the owner with the most connections wins, a tie keeps the recorded one.
///
/// A room with sockets here while another replica's claim with sockets that counts names another
/// backend is a split: counted once per episode in the bucket's `splits` (the room's `!split`
/// field marks it while it lasts).
const REFRESH_BODY: &str = r"
local me, ttl, lease, n = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[5])
rebuild_left(ARGV[4])
local now = now_ms()
local out = {}
local a = 6
for r = 1, n do
  local k = KEYS[8 + r]
  local room, owner, ver, conns, socks = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  a = a + 5
  local cur, live, holders = room_state(k, now, lease)
  local mine = record_of(owner, ver)
  local result = ''
  if not cur then
    put_record(k, room, owner, ver)
  elseif cur ~= mine then
    local o, v = record(cur)
    if o and v > ver then
      result = cur
    elseif (not o) or v < ver then
      put_record(k, room, owner, ver)
    else
      local tally = {[owner] = conns}
      for _, x in ipairs(live) do
        if x[1] ~= me and x[3] == ver then
          tally[x[2]] = (tally[x[2]] or 0) + x[4]
        end
      end
      local best, most = o, tally[o] or 0
      for ho, c in pairs(tally) do
        if c > most or (c == most and best ~= o and ho < best) then
          best, most = ho, c
        end
      end
      if best ~= o then
        put_record(k, room, best, ver)
      end
      if best ~= owner then
        result = record_of(best, ver)
      end
    end
  end
  if socks > 0 then
    local split = false
    for _, x in ipairs(live) do
      if x[1] ~= me and x[2] ~= owner and x[6] > 0 then
        split = true
      end
    end
    if split then
      local marked = tonumber(redis.call('HGET', k, '!split'))
      if not marked or marked <= now then
        redis.call('INCR', KEYS[7])
      end
      redis.call('HSET', k, '!split', now + lease)
    end
  end
  redis.call('HSET', k, me, claim_of(owner, ver, conns, now + lease, socks))
  redis.call('SADD', KEYS[8], room)
  settle(k, room, conns > 0 or busy(holders, me), ttl, false)
  out[#out + 1] = result
end
for j = 9 + n, #KEYS do
  local k, room, expected = KEYS[j], ARGV[a], ARGV[a + 1]
  a = a + 2
  redis.call('SREM', KEYS[8], room)
  local removed = redis.call('HDEL', k, me) == 1
  local cur, _, holders = room_state(k, now, lease)
  if removed or (cur and cur == expected) then
    settle(k, room, busy(holders), ttl, true)
  end
end
return out
";

/// A replica's heartbeat in one bucket: its claims there keep counting. On the way it starts the
/// rebuild window if the bucket lost its data, removes (a bounded number of) the claims of
/// replicas whose heartbeat lapsed `dead` ms ago, and reads the owner changes logged since
/// `cursor`. ARGV: replica, rebuild window ms, claim lease ms, dead ms, cursor, the bucket's
/// holds prefix, its room prefix, room ttl ms. Returns strings: generation, ms left of the
/// rebuild window, the log's last number, "1" if changes since `cursor` are no longer all in the
/// log, this replica's previous heartbeat, this one, rooms live in the bucket, splits counted,
/// then the changes since `cursor` ("n owner version room", newest first).
const HEARTBEAT_BODY: &str = r"
local me, lease, dead, cursor = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms()
local rebuild = rebuild_left(ARGV[2])
local prev = redis.call('HGET', KEYS[1], me) or ''
redis.call('HSET', KEYS[1], me, now)
local budget = 64
local beats = redis.call('HGETALL', KEYS[1])
for i = 1, #beats, 2 do
  if budget <= 0 then break end
  local rep, t = beats[i], tonumber(beats[i + 1])
  if rep ~= me and ((not t) or now - t > dead) then
    local hk = ARGV[6] .. rep
    local rooms = redis.call('SPOP', hk, budget)
    budget = budget - #rooms
    for _, room in ipairs(rooms) do
      local k = ARGV[7] .. room
      if redis.call('HDEL', k, rep) == 1 then
        local _, _, holders = room_state(k, now, lease)
        settle(k, room, busy(holders), ARGV[8], true)
      end
    end
    if redis.call('EXISTS', hk) == 0 then
      redis.call('HDEL', KEYS[1], rep)
    end
  end
end
local seq = tonumber(redis.call('GET', KEYS[5]) or '0')
local gap, changes = '0', {}
if cursor > seq or seq - cursor > LOG_MAX then
  gap = '1'
elseif seq > cursor then
  changes = redis.call('LRANGE', KEYS[4], 0, seq - cursor - 1)
end
local out = {redis.call('GET', KEYS[2]) or '', '' .. rebuild, '' .. seq, gap, prev, '' .. now,
  '' .. redis.call('SCARD', KEYS[6]), redis.call('GET', KEYS[7]) or '0'}
for _, c in ipairs(changes) do
  out[#out + 1] = c
end
return out
";

/// Removes this replica's claims in one bucket and its heartbeat there (it leaves the fleet).
/// KEYS[8]: its holds. ARGV: replica, the bucket's room prefix, room ttl ms, claim lease ms.
const LEAVE_BODY: &str = r"
local now = now_ms()
redis.call('HDEL', KEYS[1], ARGV[1])
for _, room in ipairs(redis.call('SMEMBERS', KEYS[8])) do
  local k = ARGV[2] .. room
  if redis.call('HDEL', k, ARGV[1]) == 1 then
    local _, _, holders = room_state(k, now, tonumber(ARGV[4]))
    settle(k, room, busy(holders), ARGV[3], true)
  end
end
redis.call('DEL', KEYS[8])
return 1
";

/// Releases this replica's claim on a room whose sockets on an old owner have all closed: the
/// claim goes if it names that owner at a version below the room's current one here.
/// KEYS[8]: the room's hash, KEYS[9]: this replica's holds. ARGV: replica, old owner, current
/// version, room, room ttl ms, claim lease ms. Returns 1 if released.
const RELEASE_BODY: &str = r"
local k = KEYS[8]
local o, v = claim(redis.call('HGET', k, ARGV[1]))
if o == ARGV[2] and v < tonumber(ARGV[3]) then
  redis.call('HDEL', k, ARGV[1])
  redis.call('SREM', KEYS[9], ARGV[4])
  local _, _, holders = room_state(k, now_ms(), tonumber(ARGV[6]))
  settle(k, ARGV[4], busy(holders), ARGV[5], true)
  return 1
end
return 0
";

/// The scripts, each with the prelude.
pub(super) struct Scripts {
    pub(super) place: redis::Script,
    pub(super) reassign: redis::Script,
    pub(super) refresh: redis::Script,
    pub(super) heartbeat: redis::Script,
    pub(super) leave: redis::Script,
    pub(super) release: redis::Script,
    /// Hand-offs (`moves.rs`): a move's begin, replicas yet to acknowledge it, and its end.
    pub(super) begin_move: redis::Script,
    pub(super) unacked: redis::Script,
    pub(super) end_move: redis::Script,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        let with_prelude = |body: &str| redis::Script::new(&format!("{PRELUDE}{body}"));
        Scripts {
            place: with_prelude(PLACE_BODY),
            reassign: with_prelude(REASSIGN_BODY),
            refresh: with_prelude(REFRESH_BODY),
            heartbeat: with_prelude(HEARTBEAT_BODY),
            leave: with_prelude(LEAVE_BODY),
            release: with_prelude(RELEASE_BODY),
            begin_move: with_prelude(super::moves::BEGIN_MOVE_BODY),
            unacked: with_prelude(super::moves::UNACKED_BODY),
            end_move: redis::Script::new(super::moves::END_MOVE),
        }
    }
}
