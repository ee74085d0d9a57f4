//! The Lua scripts of the Redis directory: each runs atomically on the Redis server, so that a
//! decision (first writer wins, compare-and-set of a move) and its write are one step.

/// Places a new room, or returns the recorded owner, its version, and whether some replica
/// holds the room live. KEYS[1]: the room's key; ARGV: candidate, ttl ms, prefix, room.
/// A ttl of 0 writes nothing (this replica's directory is full): a recorded owner is still
/// followed, a new room gets the candidate unrecorded.
pub(super) const PLACE: &str = r"
local cur = redis.call('GET', KEYS[1])
if not cur then
  if ARGV[2] ~= '0' then
    redis.call('SET', KEYS[1], ARGV[1] .. ' 1', 'PX', ARGV[2])
  end
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
pub(super) const REASSIGN: &str = r"
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
pub(super) const REFRESH: &str = r"
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
