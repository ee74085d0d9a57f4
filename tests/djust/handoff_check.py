# tests/djust/handoff_check.py: a room's counter survives export from one djust backend process and import into another (no proxy).
# Usage: <venv>/bin/python tests/djust/handoff_check.py [-v]    exit 0 = "handoff_check: OK"
# Does by hand what roomgate does in a move: POST {path}/{key}/export to the old owner, PUT {path}/{key} to the new one.
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smoke import Client, fail, span_of, start_backend, text_of  # noqa: E402

TOKEN = "handoff-check-token"
ROOM = "a&b%7c+d"  # visible ASCII, as roomgate keys are, that needs percent-encoding: decoded exactly once
PATH = "/.roomgate/rooms/" + urllib.parse.quote(ROOM, safe="")  # RFC 3986 unreserved chars stay


def log(*a):
    print("handoff_check:", *a, file=sys.stderr, flush=True)


def call(base, method, path, body=None, content_type=None, token=TOKEN):
    """(status, body, content type) of one hand-off call, with the headers roomgate sends."""
    headers = {"Roomgate-Room": ROOM, "Roomgate-From": "game-0", "Roomgate-To": "game-1",
               "Roomgate-Move": "check-1"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if content_type:
        headers["Content-Type"] = content_type
    req = urllib.request.Request(base + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read(), r.headers.get("Content-Type")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type")


def member(base, name):
    """A member of ROOM on `base`: page GET, socket, mount. Returns (client, mount frame)."""
    page = "/room/" + urllib.parse.quote(ROOM, safe="") + "/"
    c = Client(base, name)
    c.get(page)
    c.open_ws()
    _, mount = c.mount(page)
    if span_of(mount, "room") != ROOM.replace("&", "&amp;"):
        fail(f"{name}: mounted room {span_of(mount, 'room')!r}, not {ROOM!r}")
    return c, mount


def main():
    procs = []
    try:
        env = {"DJUST_TRUSTED_PROXY_COUNT": "1", "ROOMGATE_HANDOFF_TOKEN": TOKEN, "REDIS_SOCKET": ""}
        for i in range(2):
            proc, port = start_backend({**env, "BACKEND_ID": f"game-{i}"})
            procs.append((proc, f"http://127.0.0.1:{port}"))
        old, new = procs[0][1], procs[1][1]

        a, _ = member(old, "A")
        for n in range(1, 8):
            a.send({"type": "event", "event": "increment", "params": {}, "ref": n})
            patch, _ = a.recv_until(lambda f, n=n: f.get("ref") == n, f"reply to increment {n}")
            if text_of(patch, "n") != n:
                fail(f"increment {n} answered {patch}")
        log(f"room {ROOM!r} counted to 7 on game-0 ({old})")

        for token in (None, "wrong"):
            status, _, _ = call(old, "POST", PATH + "/export", token=token)
            if status != 401:
                fail(f"export with token {token!r}: expected 401, got {status}")
        status, state, ctype = call(old, "POST", PATH + "/export")
        if status != 200 or json.loads(state) != {"count": 7} or ctype != "application/json":
            fail(f"export: expected 200 {{'count': 7}} application/json, got {status} {state!r} {ctype}")
        log(f"export from game-0: {status} {state.decode()} ({ctype})")

        status, _, _ = call(new, "POST", PATH + "/export")
        if status != 204:
            fail(f"export of a room game-1 never had: expected 204, got {status}")
        status, _, _ = call(new, "PUT", PATH, state, ctype, token="wrong")
        if status != 401:
            fail(f"import with a wrong token: expected 401, got {status}")
        status, body, _ = call(new, "PUT", PATH, state, ctype)
        if status != 204:
            fail(f"import into game-1: expected 204, got {status} {body!r}")
        log(f"import into game-1: {status}")

        a.ws.close()  # as roomgate closes the old owner's sockets (1012); the member reconnects to game-1
        b, mount = member(new, "A'")
        if span_of(mount, "backend") != "game-1" or text_of(mount, "n") != 7:
            fail(f"the member on game-1 should see n=7: {mount}")
        b.send({"type": "event", "event": "increment", "params": {}, "ref": 1})
        patch, _ = b.recv_until(lambda f: f.get("ref") == 1, "reply to the increment on game-1")
        if text_of(patch, "n") != 8:
            fail(f"the count should go on from 7 on game-1: {patch}")
        b.ws.close()
        log("member on game-1 mounted n=7, then counted on to 8")
        print("handoff_check: OK")
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)


if __name__ == "__main__":
    main()
