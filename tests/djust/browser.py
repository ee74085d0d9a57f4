# tests/djust/browser.py: drive two room pages with djust's real client.js in headless Debian Chromium (Playwright).
# Usage: <venv>/bin/python tests/djust/browser.py BASE_URL ROOM_A ROOM_B
#   prints {"a": {...}, "b": {...}} on stdout and exits 0; on failure prints the reason to stderr, exits 1.
import json
import os
import re
import signal
import sys
import time

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOTAL = 55  # seconds for the whole run; a SIGALRM at TOTAL + 3 is the backstop
STEP = 15  # seconds: bound for any single wait

# Mounted = socket open, a mount frame applied (djust stamps dj-id on the prerendered DOM) and
# the post-mount init done (handlers bound). Nothing here depends on the connect frame's session_id.
MOUNTED = """() => {
  const d = window.djust, ws = d && d.liveViewInstance;
  return !!(ws && ws.viewMounted && ws.ws && ws.ws.readyState === 1 && d._mountReady === true
            && document.body.classList.contains('dj-connected')
            && document.querySelector('#count[dj-id]'));
}"""
# #count reads n=<k> with k >= want (other clients in the room may click too).
COUNT_AT_LEAST = """(want) => {
  const m = /^n=(\\d+)$/.exec((document.querySelector('#count') || {}).textContent || '');
  return !!m && Number(m[1]) >= want;
}"""


class Failure(Exception):
    pass


class Run:
    def __init__(self, base):
        self.base = base.rstrip("/")
        self.deadline = time.monotonic() + TOTAL
        self.pages = {}

    def budget_ms(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Failure(f"overall time budget of {TOTAL} s used up")
        return int(min(STEP, left) * 1000)

    def visit(self, ctx, label, room):
        """Open /room/<room>/ in a new tab, wait for the live mount, click #inc, wait for n+1."""
        page = ctx.new_page()
        log = []  # websocket frames and console errors, shown on failure

        def on_ws(ws):
            log.append(f"ws open {ws.url}")
            ws.on("framesent", lambda f: log.append(f">>> {str(f)[:300]}"))
            ws.on("framereceived", lambda f: log.append(f"<<< {str(f)[:300]}"))
            ws.on("close", lambda _ws: log.append("ws closed"))

        page.on("websocket", on_ws)
        page.on("console", lambda m: m.type == "error" and log.append(f"console.error {m.text}"))
        page.on("pageerror", lambda e: log.append(f"pageerror {e}"))

        def step(what, fn):
            try:
                return fn()
            except PlaywrightError as e:
                trail = "".join("\n  " + line for line in log[-30:])
                raise Failure(f"{label} (room {room}): {what}: {str(e).splitlines()[0]}{trail}") from None

        url = f"{self.base}/room/{room}/"
        resp = step(f"GET {url}", lambda: page.goto(url, wait_until="domcontentloaded", timeout=self.budget_ms()))
        if resp is None or resp.status != 200:
            raise Failure(f"{label}: GET {url} answered {resp.status if resp else 'nothing'}")
        m = re.search(r'<span id="backend">([^<]*)</span>', step("read page body", resp.text))
        page_backend = m.group(1) if m else None

        step("wait for the live mount", lambda: page.wait_for_function(MOUNTED, timeout=self.budget_ms()))
        shown_room = step("read #room", lambda: page.inner_text("#room"))
        if shown_room != room:
            raise Failure(f"{label}: page shows room {shown_room!r}, expected {room!r}")
        backend = step("read #backend", lambda: page.inner_text("#backend"))
        before_text = step("read #count", lambda: page.inner_text("#count"))
        if not re.fullmatch(r"n=\d+", before_text):
            raise Failure(f"{label}: #count reads {before_text!r}, expected n=<int>")
        before = int(before_text[2:])

        step("click #inc", lambda: page.click("#inc", timeout=self.budget_ms()))
        step(
            f"wait for #count to reach n={before + 1}",
            lambda: page.wait_for_function(COUNT_AT_LEAST, arg=before + 1, timeout=self.budget_ms()),
        )
        after = int(step("read #count", lambda: page.inner_text("#count"))[2:])
        members = step("read #members", lambda: page.inner_text("#members"))
        self.pages[label] = page
        return {
            "backend": backend,  # after the mount morph: the backend that serves the socket
            "page_backend": page_backend,  # the backend that served the HTTP GET
            "room": shown_room,
            "count_before": before,
            "count_after": after,
            "members": int(members[2:]) if members.startswith("m=") else members,
        }

    def main(self, room_a, room_b):
        with sync_playwright() as p:
            try:
                browser = p.chromium.launch(
                    executable_path=CHROMIUM, args=ARGS, headless=True, timeout=self.budget_ms()
                )
            except PlaywrightError as e:
                raise Failure(f"cannot launch {CHROMIUM}: {str(e).splitlines()[0]}") from None
            try:
                ctx = browser.new_context()  # one context: both tabs share cookies
                a = self.visit(ctx, "tab A", room_a)
                b = self.visit(ctx, "tab B", room_b)
                # Same room: tab A should get B's click as a broadcast patch. Not a failure if it
                # doesn't (a split room shows exactly that); count_final records what A shows.
                page_a = self.pages["tab A"]
                if room_a == room_b:
                    try:
                        page_a.wait_for_function(
                            COUNT_AT_LEAST, arg=b["count_after"], timeout=min(5000, self.budget_ms())
                        )
                    except PlaywrightError:
                        pass
                a["count_final"] = int(page_a.inner_text("#count")[2:])
                return {"a": a, "b": b}
            finally:
                browser.close()


def main():
    if len(sys.argv) != 4:
        print("usage: browser.py BASE_URL ROOM_A ROOM_B", file=sys.stderr)
        return 2

    def on_alarm(*_):
        print(f"browser.py: FAIL: hard timeout after {TOTAL + 3} s", file=sys.stderr, flush=True)
        os._exit(1)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TOTAL + 3)
    try:
        result = Run(sys.argv[1]).main(sys.argv[2], sys.argv[3])
    except Failure as e:
        print(f"browser.py: FAIL: {e}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
