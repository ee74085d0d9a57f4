# tests/djust/smoke.py: protocol-level check of one djust backend (no proxy); documents the wire format by example.
# Usage: <venv>/bin/python tests/djust/smoke.py [-v]    exit 0 = all checks passed
import http.cookiejar
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect as ws_connect

HERE = os.path.dirname(os.path.abspath(__file__))
VERBOSE = "-v" in sys.argv
VIEW = "rooms.views.RoomView"
T = 10  # seconds: bound for every single wait


def log(*a):
    print("smoke:", *a, file=sys.stderr, flush=True)


def fail(msg):
    raise SystemExit(f"smoke: FAIL: {msg}")


def start_redis(tmp):
    sock = os.path.join(tmp, "r.sock")
    proc = subprocess.Popen(
        ["redis-server", "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + T
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            fail("redis-server did not create its unix socket")
        time.sleep(0.05)
    return proc, sock


def start_backend(env):
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "serve.py")],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        text=True,
    )
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""
    m = re.fullmatch(r"LISTENING (\d+)\n", line)
    if not m:
        proc.kill()
        fail(f"serve.py did not announce its port (got {line!r})")
    return proc, int(m.group(1))


class Client:
    """One browser-like djust session: a cookie jar, then one /ws/live/ socket."""

    def __init__(self, base, name):
        self.base, self.name = base, name
        self.jar = http.cookiejar.CookieJar()
        self.http = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.ws = None

    def get(self, path, headers=None):
        req = urllib.request.Request(self.base + path, headers=headers or {})
        with self.http.open(req, timeout=T) as r:
            return r.read().decode()

    def cookie_header(self):
        return "; ".join(f"{c.name}={c.value}" for c in self.jar)

    def open_ws(self, origin=None, extra=None):
        headers = {"Origin": origin or self.base, "Cookie": self.cookie_header(), **(extra or {})}
        url = self.base.replace("http://", "ws://") + "/ws/live/"
        # legacy=True: plain object instead of a context manager (websockets 17 warns otherwise)
        self.ws = ws_connect(url, additional_headers=headers, open_timeout=T, close_timeout=2, legacy=True)
        return self.ws

    def send(self, msg):
        text = json.dumps(msg, separators=(",", ":"))  # same bytes as JSON.stringify
        if VERBOSE:
            log(f"{self.name} >>> {text}")
        self.ws.send(text)

    def recv_until(self, pred, what):
        """Read frames until pred(frame) is true; returns (frame, frames skipped before it)."""
        skipped, deadline = [], time.monotonic() + T
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                fail(f"{self.name}: timed out waiting for {what}; got {skipped}")
            try:
                raw = self.ws.recv(timeout=left)
            except TimeoutError:
                continue
            if VERBOSE:
                log(f"{self.name} <<< {raw[:400]}{'...' if len(raw) > 400 else ''}")
            frame = json.loads(raw)
            if pred(frame):
                return frame, skipped
            skipped.append(frame)

    def mount(self, path, params=None):
        """connect frame, then the mount frame exactly as client.js autoMount() sends it."""
        connect, _ = self.recv_until(lambda f: True, "connect")
        if connect.get("type") != "connect" or not connect.get("session_id"):
            fail(f"{self.name}: first frame is not connect: {connect}")
        self.send(
            {
                "type": "mount",
                "view": VIEW,
                "params": params or {},
                "url": path,
                "has_prerendered": True,
                "client_timezone": "UTC",
            }
        )
        mount, _ = self.recv_until(lambda f: f.get("type") == "mount", "mount")
        return connect, mount


def text_of(frame, key):
    """Read 'n=3' / 'm=2' out of any frame (mount html or patch text) without parsing HTML."""
    found = re.findall(rf"\b{key}=(\d+)", json.dumps(frame))
    return int(found[-1]) if found else None


def span_of(frame, span_id):
    """Text of <span id="backend|room">...</span> in a frame's HTML (mount frames carry it)."""
    m = re.search(rf'id="{span_id}">([^<]*)<', frame.get("html", ""))
    return m.group(1) if m else None


def main():
    tmp = tempfile.mkdtemp(prefix="djust-smoke-")
    procs = []
    try:
        redis_proc, redis_sock = start_redis(tmp)
        procs.append(redis_proc)
        prefix = f"smoke-{os.getpid()}:"
        backend, port = start_backend(
            {
                "BACKEND_ID": "game-0",
                "REDIS_SOCKET": redis_sock,
                "LOBBY_PREFIX": prefix,
                "DJUST_TRUSTED_PROXY_COUNT": "1",
            }
        )
        procs.append(backend)
        base = f"http://127.0.0.1:{port}"
        log(f"backend game-0 on {base}")

        # 1. Page GET: prerendered HTML, cookies (csrftoken + signed sessionid).
        a = Client(base, "A")
        page = a.get("/room/7/")
        if '<span id="backend">game-0</span>' not in page or "n=0" not in page:
            fail("GET /room/7/ does not show backend game-0 and n=0")
        if "client.min.js" not in page or 'dj-view="rooms.views.RoomView"' not in page:
            fail("page lacks the djust client script or the dj-view container")
        cookies = sorted(c.name for c in a.jar)
        log(f"GET /room/7/ ok, cookies {cookies}")
        js = a.get("/static/djust/client.min.js")
        if "live_redirect_mount" not in js:
            fail("static client.min.js is not djust's client")

        # 2. WebSocket: server speaks first with connect; then mount.
        a.open_ws()
        connect, mount = a.mount("/room/7/")
        log(f"A connect: {connect}")
        if span_of(mount, "backend") != "game-0" or text_of(mount, "n") != 0 or text_of(mount, "m") != 1:
            fail(f"A mount frame lacks backend/n=0/m=1: {mount}")
        log(f"A mount ok: keys {sorted(mount)}, version {mount.get('version')}")

        b = Client(base, "B")
        b.get("/room/7/")
        b.open_ws()
        _, mount_b = b.mount("/room/7/")
        if text_of(mount_b, "m") != 2:
            fail(f"B should see 2 members of room 7: {mount_b}")

        c = Client(base, "C")  # a member of ANOTHER room: must not be patched by room 7's broadcast
        c.get("/room/8/")
        c.open_ws()
        c.mount("/room/8/")

        # 3. Event exactly as client.js sendEvent() sends it for <button dj-click="increment">.
        a.send({"type": "event", "event": "increment", "params": {}, "ref": 1})
        patch, _ = a.recv_until(lambda f: f.get("ref") == 1, "patch for ref 1")
        if patch.get("type") != "patch" or text_of(patch, "n") != 1:
            fail(f"A's event reply is not a patch with n=1: {patch}")
        log(f"A event reply: {json.dumps(patch)}")

        # 4. Broadcast to the other member of room 7 (push_to_view, source "broadcast").
        bcast, _ = b.recv_until(lambda f: f.get("type") == "patch", "broadcast patch")
        if bcast.get("source") != "broadcast" or text_of(bcast, "n") != 1:
            fail(f"B did not get a broadcast patch with n=1: {bcast}")
        log(f"B broadcast: {json.dumps(bcast)}")
        other, _ = c.recv_until(lambda f: True, "noop in room 8")
        if other.get("type") != "noop":
            fail(f"C (room 8) should get only a noop for room 7's broadcast: {other}")
        log(f"C (room 8) got: {json.dumps(other)}")

        lobby = json.loads(a.get("/lobby.json"))
        rooms = lobby["rooms"]
        if rooms.get("7", {}).get("members") != 2 or rooms.get("7", {}).get("backend") != "game-0":
            fail(f"lobby.json should list room 7 with 2 members on game-0: {lobby}")
        log(f"lobby.json: {json.dumps(lobby)}")

        # 5. Live navigation on the SAME socket, exactly as 18-navigation.js sends it.
        a.send({"type": "live_redirect_mount", "view": VIEW, "params": {}, "url": "/room/9/"})
        mount9, skipped = a.recv_until(lambda f: f.get("type") == "mount", "mount after live_redirect")
        if span_of(mount9, "room") != "9" or span_of(mount9, "backend") != "game-0":
            fail(f"live_redirect_mount did not mount room 9: {mount9}")
        if text_of(mount9, "n") != 0 or text_of(mount9, "m") != 1:
            fail(f"room 9 should be fresh (n=0, m=1): {mount9}")
        after, _ = a.recv_until(lambda f: True, "frame after the redirect mount")
        log(f"live_redirect_mount reply: mount (version {mount9.get('version')}) then {json.dumps(after)}")

        deadline = time.monotonic() + T
        while True:
            rooms = json.loads(a.get("/lobby.json"))["rooms"]
            if rooms.get("7", {}).get("members") == 1 and rooms.get("9", {}).get("members") == 1:
                break
            if time.monotonic() > deadline:
                fail(f"lobby did not move A from room 7 to 9: {rooms}")
            time.sleep(0.1)

        # 6. Disconnect removes the member (and the room, once empty) from the lobby.
        b.ws.close()
        deadline = time.monotonic() + T
        while "7" in json.loads(a.get("/lobby.json"))["rooms"]:
            if time.monotonic() > deadline:
                fail("room 7 still in the lobby after its last member left")
            time.sleep(0.1)
        log("disconnect cleanup ok")

        # 6b. A second plain "mount" on one socket replaces the view too (C: room 8 -> 10).
        c.send({"type": "mount", "view": VIEW, "params": {}, "url": "/room/10/", "has_prerendered": True,
                "client_timezone": "UTC"})
        mount10, _ = c.recv_until(lambda f: f.get("type") == "mount", "second mount")
        rooms = json.loads(a.get("/lobby.json"))["rooms"]
        if span_of(mount10, "room") != "10" or "8" in rooms or rooms.get("10", {}).get("members") != 1:
            fail(f"second mount on one socket should move C from room 8 to 10: {rooms}")
        log("second mount on one socket: old room left")

        # 7. HTTP fallback: POST to the page URL with X-Djust-Event (needs the CSRF token).
        token = next(c.value for c in a.jar if c.name == "csrftoken")
        req = urllib.request.Request(
            base + "/room/7/",
            data=b"{}",
            method="POST",
            headers={
                "Content-Type": "application/json",
                "X-CSRFToken": token,
                "X-Djust-Event": "increment",
                "Origin": base,
            },
        )
        with a.http.open(req, timeout=T) as r:
            fb = json.loads(r.read())
        if text_of(fb, "n") != 2:
            fail(f"HTTP fallback increment should answer n=2: {fb}")
        log(f"HTTP fallback reply keys {sorted(fb)}, n={text_of(fb, 'n')}")

        # 8. Refusals: foreign or missing Origin -> HTTP 403 on the handshake.
        try:
            Client(base, "evil").open_ws(origin="http://evil.test")
            fail("a foreign Origin was accepted")
        except InvalidStatus as e:
            if e.response.status_code != 403:
                fail(f"foreign Origin: expected 403, got {e.response.status_code}")
        log("foreign Origin -> HTTP 403")
        try:  # channels' AllowedHostsOriginValidator also refuses a handshake WITHOUT Origin
            ws_connect(base.replace("http", "ws") + "/ws/live/", open_timeout=T, legacy=True)
            fail("a handshake without Origin was accepted")
        except InvalidStatus as e:
            if e.response.status_code != 403:
                fail(f"missing Origin: expected 403, got {e.response.status_code}")
        log("missing Origin -> HTTP 403")

        # 9. Per-IP limit: 10 sockets per client IP (from X-Forwarded-For), the 11th: 101 then close 4429.
        held = []
        for i in range(11):
            cl = Client(base, f"ip{i}")
            cl.open_ws(extra={"X-Forwarded-For": "10.9.9.9"})
            held.append(cl)
        try:
            first = held[-1].ws.recv(timeout=T)
            fail(f"11th socket from one IP got a frame instead of a close: {first}")
        except ConnectionClosed as e:
            if e.rcvd is None or e.rcvd.code != 4429:
                fail(f"11th socket: expected close 4429, got {e.rcvd}")
        for cl in held[:10]:
            if json.loads(cl.ws.recv(timeout=T))["type"] != "connect":
                fail("sockets 1-10 from one IP should get connect")
            cl.ws.close()
        log("11th socket from one X-Forwarded-For IP -> close 4429")

        for cl in (a, c):
            cl.ws.close()

        # 10. SIGTERM: serve.py must exit promptly.
        t0 = time.monotonic()
        backend.send_signal(signal.SIGTERM)
        try:
            backend.wait(timeout=5)
        except subprocess.TimeoutExpired:
            fail("serve.py did not exit within 5 s of SIGTERM")
        log(f"SIGTERM -> exit {backend.returncode} in {time.monotonic() - t0:.2f} s")
        print("smoke: OK")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=5)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
