# tests/djust/app/rooms/registry.py: per-process room state (module-level dict), its hand-off hooks, and the Redis lobby store.
import json
import logging
import threading

import redis
from django.conf import settings

log = logging.getLogger(__name__)

# room -> {"count": int, "members": set of member ids}. One copy per backend PROCESS:
# if a proxy splits a room across two backends, each holds its own count.
ROOMS = {}
_lock = threading.Lock()


def join(room, member):
    with _lock:
        state = ROOMS.setdefault(room, {"count": 0, "members": set()})
        state["members"].add(member)


def leave(room, member):
    with _lock:
        state = ROOMS.get(room)
        if state:
            state["members"].discard(member)  # the count is kept: a reconnect sees it


def bump(room):
    with _lock:
        state = ROOMS.setdefault(room, {"count": 0, "members": set()})
        state["count"] += 1


def read(room):
    """(count, number of members) of a room in this process."""
    with _lock:
        state = ROOMS.get(room) or {"count": 0, "members": ()}
        return state["count"], len(state["members"])


# ---- roomgate hand-off (roomgate_handoff hooks, registered in apps.py). The state handed over is the
#      count; members are this process's own sockets, which reconnect to the new owner and join there.
def export_room(room):
    """The room's state as JSON, or None (204) when this process never had the room. Keeps it here."""
    with _lock:
        state = ROOMS.get(room)
        if state is None:
            return None
        return json.dumps({"count": state["count"]}).encode(), "application/json"


def import_room(room, data, content_type):
    """Replaces the room's count with the exported one (members already here, if any, are kept)."""
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise ValueError(f"room state must be application/json, got {content_type!r}")
    count = json.loads(data)["count"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"room state has a bad count: {count!r}")
    with _lock:
        state = ROOMS.setdefault(room, {"count": 0, "members": set()})
        state["count"] = count


# ---- Redis lobby: {prefix}rooms = hash room -> backend id that last mounted it;
#      {prefix}room:<room> = hash backend id -> live members on that backend;
#      {prefix}log:<room> = list of "join|leave <backend> <redis TIME, microseconds>", in the order Redis ran them
#      (one clock and one order for every process: the tests replay it to find a room on two backends at once).
_client = None
_JOIN = """
redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local t = redis.call('TIME')
redis.call('RPUSH', KEYS[3], 'join ' .. ARGV[2] .. ' ' .. t[1] .. string.format('%06d', tonumber(t[2])))
"""
_LEAVE = """
local n = redis.call('HINCRBY', KEYS[2], ARGV[2], -1)
if n <= 0 then redis.call('HDEL', KEYS[2], ARGV[2]) end
local t = redis.call('TIME')
redis.call('RPUSH', KEYS[3], 'leave ' .. ARGV[2] .. ' ' .. t[1] .. string.format('%06d', tonumber(t[2])))
local rest = redis.call('HKEYS', KEYS[2])
if #rest == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
elseif n <= 0 and redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], rest[1])
end
return n
"""


def _redis():
    global _client
    if not settings.REDIS_SOCKET:
        return None
    if _client is None:
        _client = redis.Redis(
            unix_socket_path=settings.REDIS_SOCKET,
            socket_timeout=2,
            socket_connect_timeout=2,
            decode_responses=True,
        )
    return _client


def _keys(room):
    p = settings.LOBBY_PREFIX
    return p + "rooms", p + "room:" + room, p + "log:" + room


def lobby_join(room):
    r = _redis()
    if r is None:
        return
    try:
        r.eval(_JOIN, 3, *_keys(room), room, settings.BACKEND_ID)
    except redis.RedisError as e:
        log.warning("lobby join %s failed: %s", room, e)


def lobby_leave(room):
    r = _redis()
    if r is None:
        return
    try:
        r.eval(_LEAVE, 3, *_keys(room), room, settings.BACKEND_ID)
    except redis.RedisError as e:
        log.warning("lobby leave %s failed: %s", room, e)


def lobby_snapshot():
    """{room: {"backend": id, "members": total, "backends": {id: members}}}"""
    r = _redis()
    if r is None:
        return {}
    out = {}
    for room, backend in sorted(r.hgetall(settings.LOBBY_PREFIX + "rooms").items()):
        per = {b: int(n) for b, n in r.hgetall(_keys(room)[1]).items()}
        out[room] = {"backend": backend, "members": sum(per.values()), "backends": per}
    return out


def lobby_log(room):
    """[[kind, backend, microseconds], ...]: the room's WebSocket joins and leaves, in Redis's order."""
    r = _redis()
    if r is None:
        return []
    out = []
    for entry in r.lrange(_keys(room)[2], 0, -1):
        kind, backend, t = entry.split(" ")
        out.append([kind, backend, int(t)])
    return out
