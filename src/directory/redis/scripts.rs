//! The Lua scripts of the Redis directory: each runs atomically on the Redis server, so that a
//! decision (first writer wins, compare-and-set of a move, "may a member join now") and its write
//! are one step.
//!
//! A replica's `held:{replica}` entry for a room is its *claim*: "owner version connections
//! until sockets", `until` in Redis server milliseconds (`TIME`), so that no replica's clock is
//! trusted. A claim naming another owner than the room's record blocks joins until it is released
//! or expires: that is what keeps a moved room off its new owner while any replica still has
//! sockets on the old one (`docs/replicas.md`, "One owner at a time").

/// Shared by every script: the server's clock, the rebuild window after Redis lost its data, the
/// one parser and formatter of each stored form (`wire.rs` holds their Rust side), and the claims
/// on a room.
const PRELUDE: &str = r"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- `generation` is absent after a restart or a flush: whoever finds it so starts a window of
-- `window` ms in which no room without a record is placed, so that every replica re-asserts the
-- rooms it holds first. Returns the ms left of the window (0: none).
local function rebuild_left(p, window)
  if redis.call('EXISTS', p .. 'generation') == 0 then
    redis.call('SET', p .. 'generation', now_ms())
    redis.call('SET', p .. 'rebuilding', '1', 'PX', window)
    return tonumber(window)
  end
  return math.max(redis.call('PTTL', p .. 'rebuilding'), 0)
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
-- The unexpired claims of every replica on `room` that name another backend than `owner`: the ms
-- until the last of them expires (0: none), and whether any claim has connections.
local function blocking(p, reps, room, owner, now)
  local wait, live = 0, 0
  for _, rep in ipairs(reps) do
    local o, v, c, u = claim(redis.call('HGET', p .. 'held:' .. rep, room))
    if o and u > now then
      if c > 0 then live = 1 end
      if o ~= owner then wait = math.max(wait, u - now) end
    end
  end
  return wait, live
end
";

/// Places a new room, or returns the recorded owner, its version, whether some replica holds the
/// room live, and how long a member must wait before joining (ms; 0: now).
/// KEYS[1]: the room's record; ARGV: candidate, record ttl ms, prefix, room, replica, lease ms
/// (0: no claim, a plain request), rebuild window ms, held ttl ms.
/// A record ttl of 0 writes no record (this replica's directory is full): a recorded owner is
/// still followed, a new room gets the candidate unrecorded.
/// A member must wait while Redis is rebuilding and the room has no record, while a claim on
/// another backend blocks it, or while a replica hands the room off (`moving:{room}`). A member that may join gets this replica's claim (a socket's
/// handshake is on its way), so that no other replica moves the room under it unseen.
const PLACE_BODY: &str = r"
local p, room, me, lease = ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local now = now_ms()
local rebuild = rebuild_left(p, ARGV[7])
local cur = redis.call('GET', KEYS[1])
if not cur then
  if rebuild > 0 then
    return {ARGV[1], 0, 0, rebuild}
  end
  cur = record_of(ARGV[1], 1)
  if ARGV[2] ~= '0' then
    redis.call('SET', KEYS[1], cur, 'PX', ARGV[2])
  end
end
local o, v = record(cur)
local wait, live = blocking(p, redis.call('HKEYS', p .. 'replicas'), room, o, now)
local moving = redis.call('PTTL', p .. 'moving:' .. room)
if moving > 0 then
  wait = math.max(wait, moving)
end
if lease > 0 and wait == 0 then
  local hk = p .. 'held:' .. me
  local mo, mv, mc, mu, ms = claim(redis.call('HGET', hk, room))
  if not mo or mo ~= o then
    mc, ms, mu = 0, 0, 0
  end
  redis.call('HSET', hk, room, claim_of(o, v, mc, math.max(mu, now + lease), ms))
  redis.call('PEXPIRE', hk, ARGV[8])
end
return {o, v, live, wait}
";

/// Moves a room from ARGV[1] to ARGV[2] (the next version) unless another replica moved it
/// elsewhere first; returns the version now recorded, 0 when it was moved elsewhere, -1 while
/// Redis is rebuilding (no move until the holders have re-asserted their rooms).
/// ARGV: from, to, ttl ms, prefix, rebuild window ms.
const REASSIGN_BODY: &str = r"
if rebuild_left(ARGV[4], ARGV[5]) > 0 then
  return -1
end
local cur = redis.call('GET', KEYS[1])
local o, v = nil, 0
if cur then
  o, v = record(cur)
end
if o == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return v
end
if (not cur) or o == ARGV[1] then
  redis.call('SET', KEYS[1], record_of(ARGV[2], v + 1), 'PX', ARGV[3])
  return v + 1
end
return 0
";

/// Refreshes (or re-asserts) the rooms this replica holds live, one SET per room, and renews its
/// claims on them. ARGV: prefix, replica, room ttl ms, held ttl ms, lease ms, rebuild window ms,
/// n, m, then n x (room, owner, version, connections, sockets), then m rooms whose connections on
/// an old owner are still closing (their claims are renewed as they are), then the rooms this
/// replica no longer holds. Returns per room "" (agreed) or the "owner version" this replica must follow:
/// - a later version elsewhere is a move this replica has not seen: follow it (its claim on the
///   old owner stays until it has closed its sockets there and released it);
/// - the same version with another owner is a room placed twice (an outage, or replicas that
///   place differently): the owner with the most live connections wins, a tie keeps the
///   recorded one.
///
/// A room with sockets here while another replica's unexpired claim with sockets names another
/// backend is a split: counted once per episode in `splits` (`split:{room}` marks it while it
/// lasts).
const REFRESH_BODY: &str = r"
local p, me, ttl, held_ttl, lease = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local n, m = tonumber(ARGV[7]), tonumber(ARGV[8])
rebuild_left(p, ARGV[6])
local now = now_ms()
local reps = redis.call('HKEYS', p .. 'replicas')
local out, held = {}, {}
local i = 9
for r = 1, n do
  local room, owner, ver, conns, socks = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  i = i + 5
  local k = p .. 'room:' .. room
  local mine = record_of(owner, ver)
  local old = redis.call('SET', k, mine, 'PX', ttl, 'GET')
  local result = ''
  if old and old ~= mine then
    local o, v = record(old)
    v = v or 0
    if v > ver then
      redis.call('SET', k, old, 'PX', ttl)
      result = old
    elseif v == ver then
      local tally = {[owner] = conns}
      for _, rep in ipairs(reps) do
        if rep ~= me then
          local ho, hv, hc, hu = claim(redis.call('HGET', p .. 'held:' .. rep, room))
          if ho and hv == ver and hu > now then
            tally[ho] = (tally[ho] or 0) + hc
          end
        end
      end
      local best, most = o, tally[o] or 0
      for ho, c in pairs(tally) do
        if c > most or (c == most and best ~= o and ho < best) then
          best, most = ho, c
        end
      end
      if best ~= owner then
        result = record_of(best, ver)
        redis.call('SET', k, result, 'PX', ttl)
      end
    end
  end
  if socks > 0 then
    local split = false
    for _, rep in ipairs(reps) do
      if rep ~= me then
        local ho, hv, hc, hu, hs = claim(redis.call('HGET', p .. 'held:' .. rep, room))
        if ho and ho ~= owner and hu > now and hs > 0 then
          split = true
        end
      end
    end
    if split then
      if redis.call('SET', p .. 'split:' .. room, '1', 'NX', 'PX', lease) then
        redis.call('INCR', p .. 'splits')
      else
        redis.call('PEXPIRE', p .. 'split:' .. room, lease)
      end
    end
  end
  held[#held + 1] = room
  held[#held + 1] = claim_of(owner, ver, conns, now + lease, socks)
  out[#out + 1] = result
end
local hk = p .. 'held:' .. me
for j = 1, m do
  local o, v, c, u, s = claim(redis.call('HGET', hk, ARGV[i]))
  if o then
    held[#held + 1] = ARGV[i]
    held[#held + 1] = claim_of(o, v, c, now + lease, s)
  end
  i = i + 1
end
if #held > 0 then
  redis.call('HSET', hk, unpack(held))
end
if i <= #ARGV then
  redis.call('HDEL', hk, unpack(ARGV, i, #ARGV))
end
redis.call('PEXPIRE', hk, held_ttl)
return out
";

/// Gives the full room TTL to the records of rooms that got their first WebSocket here since the
/// last sync, if the record is still this owner and version (a room moved meanwhile is left to
/// its new owner). Placed with the short TTL of a room without a socket, such a record would
/// otherwise expire `rooms.linger_unused` after a socket that opened and closed between two
/// refreshes. ARGV: prefix, ttl ms, then pairs (room, "owner version"). Returns how many were
/// extended.
pub(super) const EXTEND: &str = r"
local p, ttl, n = ARGV[1], ARGV[2], 0
for i = 3, #ARGV - 1, 2 do
  local k = p .. 'room:' .. ARGV[i]
  if redis.call('GET', k) == ARGV[i + 1] then
    redis.call('PEXPIRE', k, ttl)
    n = n + 1
  end
end
return n
";

/// Releases this replica's claims on rooms whose sockets on an old owner have all closed: each
/// claim naming that owner at a version below the room's current one here is removed.
/// ARGV: prefix, replica, then triples (room, old owner, current version). Returns how many.
const RELEASE_BODY: &str = r"
local hk = ARGV[1] .. 'held:' .. ARGV[2]
local n = 0
for i = 3, #ARGV - 2, 3 do
  local o, v = claim(redis.call('HGET', hk, ARGV[i]))
  if o == ARGV[i + 1] and v < tonumber(ARGV[i + 2]) then
    redis.call('HDEL', hk, ARGV[i])
    n = n + 1
  end
end
return n
";

/// Starts the rebuild window if Redis lost its data; returns the ms left of it. ARGV: prefix,
/// window ms.
const REBUILD_BODY: &str = r"
return rebuild_left(ARGV[1], ARGV[2])
";

/// The scripts, each with the prelude.
pub(super) struct Scripts {
    pub(super) place: redis::Script,
    pub(super) reassign: redis::Script,
    pub(super) refresh: redis::Script,
    pub(super) extend: redis::Script,
    pub(super) release: redis::Script,
    /// Hand-offs (`moves.rs`): a move's begin, replicas yet to acknowledge it, and its end.
    pub(super) begin_move: redis::Script,
    pub(super) unacked: redis::Script,
    pub(super) end_move: redis::Script,
    /// Sent whole with `EVAL` inside the sync's pipeline (a pipeline cannot hold an `EVALSHA`
    /// with its fallback).
    pub(super) rebuild: String,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        let with_prelude = |body: &str| redis::Script::new(&format!("{PRELUDE}{body}"));
        Scripts {
            place: with_prelude(PLACE_BODY),
            reassign: with_prelude(REASSIGN_BODY),
            refresh: with_prelude(REFRESH_BODY),
            extend: redis::Script::new(EXTEND),
            release: with_prelude(RELEASE_BODY),
            begin_move: with_prelude(super::moves::BEGIN_MOVE_BODY),
            unacked: with_prelude(super::moves::UNACKED_BODY),
            end_move: redis::Script::new(super::moves::END_MOVE),
            rebuild: format!("{PRELUDE}{REBUILD_BODY}"),
        }
    }
}
