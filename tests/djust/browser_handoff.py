# tests/djust/browser_handoff.py: a room hand-off seen from headless Chromium tabs running djust's real client.js.
# Usage: <venv>/bin/python tests/djust/browser_handoff.py BASE_URL ROOM TABS COUNT
#   1. opens TABS tabs (one browser context: shared cookies) on /room/ROOM/, clicks #inc in turn until every tab
#      shows n=COUNT, then prints `READY {"backend": ..., "count": ...}` and waits for a line on stdin;
#   2. the caller moves the room meanwhile (drain with hand-off: close 1012; client.js reconnects by itself);
#   3. on that line, waits until every tab is mounted again on another backend, reads it, clicks #inc once in
#      the first tab and waits until every tab shows COUNT + 1. Prints the report (one JSON line), exits 0;
#      on failure prints the reason to stderr, exits 1.
# Each tab records its sockets' close codes in the page (window.__rg, an init script wrapping WebSocket): a
# reload would reset them, so "closes [1012], opened 2" means client.js reconnected the same page.
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from browser import ARGS, CHROMIUM, COUNT_AT_LEAST, MOUNTED, Failure  # noqa: E402
from playwright.sync_api import Error as PlaywrightError  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

TOTAL = 80  # seconds for the whole run; a SIGALRM at TOTAL + 3 is the backstop
STEP = 20  # seconds: bound for any single wait

RECORD_SOCKETS = """(() => {
  const Native = window.WebSocket;
  const rg = window.__rg = {opened: 0, closes: []};
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      rg.opened += 1;
      this.addEventListener('close', (e) => rg.closes.push(e.code));
    }
  };
})();"""
# Mounted again, on a backend other than `old`.
MOUNTED_ELSEWHERE = (
    "(old) => (" + MOUNTED + ")() && (document.querySelector('#backend') || {}).textContent !== old"
)


class Tabs:
    def __init__(self, base, room, n):
        self.url = f"{base.rstrip('/')}/room/{room}/"
        self.n = n
        self.deadline = time.monotonic() + TOTAL
        self.pages = []
        self.logs = []

    def budget_ms(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Failure(f"overall time budget of {TOTAL} s used up")
        return int(min(STEP, left) * 1000)

    def step(self, i, what, fn):
        try:
            return fn()
        except PlaywrightError as e:
            trail = "".join("\n  " + line for line in self.logs[i][-30:])
            raise Failure(f"tab {i}: {what}: {str(e).splitlines()[0]}{trail}") from None

    def open(self, ctx):
        for i in range(self.n):
            page = ctx.new_page()
            log = []
            page.on("websocket", lambda ws, log=log: (
                log.append(f"ws open {ws.url}"),
                ws.on("framesent", lambda f: log.append(f">>> {str(f)[:200]}")),
                ws.on("framereceived", lambda f: log.append(f"<<< {str(f)[:200]}")),
                ws.on("close", lambda _ws: log.append("ws closed")),
            ))
            page.on("console", lambda m, log=log: m.type == "error" and log.append(f"console.error {m.text}"))
            page.on("pageerror", lambda e, log=log: log.append(f"pageerror {e}"))
            self.pages.append(page)
            self.logs.append(log)
            resp = self.step(i, f"GET {self.url}", lambda: page.goto(
                self.url, wait_until="domcontentloaded", timeout=self.budget_ms()))
            if resp is None or resp.status != 200:
                raise Failure(f"tab {i}: GET {self.url} answered {resp.status if resp else 'nothing'}")
            self.step(i, "wait for the live mount", lambda: page.wait_for_function(MOUNTED, timeout=self.budget_ms()))

    def wait_all(self, at_least):
        for i, page in enumerate(self.pages):
            self.step(i, f"wait for n>={at_least}", lambda: page.wait_for_function(
                COUNT_AT_LEAST, arg=at_least, timeout=self.budget_ms()))

    def click(self, i, now):
        """Clicks #inc in tab i; every tab then shows at least now + 1."""
        self.step(i, "click #inc", lambda: self.pages[i].click("#inc", timeout=self.budget_ms()))
        self.wait_all(now + 1)

    def read(self, i):
        page = self.pages[i]
        text = lambda sel: self.step(i, f"read {sel}", lambda: page.inner_text(sel))  # noqa: E731
        return {
            "backend": text("#backend"),
            "count": int(text("#count")[2:]),
            "members": text("#members"),
            "sockets": self.step(i, "read window.__rg", lambda: page.evaluate("() => window.__rg")),
        }

    def run(self, count):
        with sync_playwright() as p:
            try:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True,
                                            timeout=self.budget_ms())
            except PlaywrightError as e:
                raise Failure(f"cannot launch {CHROMIUM}: {str(e).splitlines()[0]}") from None
            try:
                ctx = browser.new_context()
                ctx.add_init_script(RECORD_SOCKETS)
                self.open(ctx)
                for k in range(count):
                    self.click(k % self.n, k)
                before = [self.read(i) for i in range(self.n)]
                old = before[0]["backend"]
                if any(t["backend"] != old or t["count"] != count for t in before):
                    raise Failure(f"before the move the tabs disagree: {before}")
                print("READY " + json.dumps({"backend": old, "count": count}), flush=True)
                if not sys.stdin.readline():
                    raise Failure("stdin closed before the go-ahead")
                for i, page in enumerate(self.pages):
                    self.step(i, f"wait for a mount on another backend than {old}", lambda: page.wait_for_function(
                        MOUNTED_ELSEWHERE, arg=old, timeout=self.budget_ms()))
                after = [self.read(i) for i in range(self.n)]
                self.click(0, count)
                final = [self.read(i) for i in range(self.n)]
                return {"old": old, "before": before, "after": after, "after_click": final}
            finally:
                browser.close()


def main():
    if len(sys.argv) != 5:
        print("usage: browser_handoff.py BASE_URL ROOM TABS COUNT", file=sys.stderr)
        return 2

    def on_alarm(*_):
        print(f"browser_handoff.py: FAIL: hard timeout after {TOTAL + 3} s", file=sys.stderr, flush=True)
        os._exit(1)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TOTAL + 3)
    try:
        result = Tabs(sys.argv[1], sys.argv[2], int(sys.argv[3])).run(int(sys.argv[4]))
    except Failure as e:
        print(f"browser_handoff.py: FAIL: {e}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
