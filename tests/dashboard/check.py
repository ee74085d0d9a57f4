# tests/dashboard/check.py: drive roomgate's dashboard in headless Debian Chromium (Playwright).
# Usage: <venv>/bin/python tests/dashboard/check.py ADMIN_URL TOKEN BACKEND_TO_DRAIN ROOM
#   signs in with TOKEN, waits until the figures on the page match /admin/status fetched at the
#   same moment, looks ROOM up (and a hostile key, which must show as text), drains BACKEND_TO_DRAIN from the page (confirm accepted, deadline 45s) and waits
#   for the status and the card to show it, then tries a wrong token in a fresh tab.
#   Prints a JSON report on stdout and exits 0; on failure prints the reason to stderr, exits 1.
import json
import os
import signal
import sys
import time
import urllib.request

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
TOTAL = 75  # seconds for the whole run; a SIGALRM at TOTAL + 3 is the backstop
STEP = 15  # seconds: bound for any single wait

# Per backend card: state, live rooms and sockets as the page shows them; and the summary.
PAGE_FIGURES = """() => {
  const out = {};
  for (const c of document.querySelectorAll('#cards .card')) {
    const stat = (n) => Number(c.querySelector(`[data-stat="${n}"]`).textContent);
    out[c.dataset.backend] = [c.dataset.state, stat('rooms'), stat('sockets')];
  }
  const b = (id) => { const e = document.querySelector(`#${id} b`); return e ? Number(e.textContent) : null; };
  return {backends: out, live: b('sum-live'), websockets: b('sum-sockets')};
}"""


class Failure(Exception):
    pass


def main(base, token, victim, room_key):
    deadline = time.monotonic() + TOTAL
    console = []  # page errors and CSP violations: the report must show none

    def budget_ms():
        left = deadline - time.monotonic()
        if left <= 0:
            raise Failure(f"overall time budget of {TOTAL} s used up")
        return int(min(STEP, left) * 1000)

    def status():
        req = urllib.request.Request(base + "/admin/status", headers={"Authorization": "Bearer " + token})
        with urllib.request.urlopen(req, timeout=5) as r:
            s = json.load(r)
        return {
            "backends": {b["id"]: [b["state"], b["rooms"], b["sockets"]] for b in s["backends"]},
            "live": s["rooms"]["live"],
            "websockets": s["websockets"],
        }

    def watch(page):
        page.on("pageerror", lambda e: console.append(f"pageerror {e}"))
        page.on("console", lambda m: m.type == "error" and "Content Security Policy" in m.text
                and console.append(f"console.error {m.text}"))

    def until(what, fn, limit=STEP):
        """fn() until it returns something true, within `limit` s; the last value on failure."""
        end = time.monotonic() + min(limit, budget_ms() / 1000)
        last = None
        while time.monotonic() < end:
            ok, last = fn()
            if ok:
                return last
            time.sleep(0.2)
        raise Failure(f"{what}: not within {limit} s; last: {json.dumps(last)}")

    report = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True, timeout=budget_ms())
        try:
            ctx = browser.new_context(viewport={"width": 1280, "height": 800})
            page = ctx.new_page()
            watch(page)
            page.goto(base + "/", wait_until="domcontentloaded", timeout=budget_ms())
            # A token is configured: the form first, with no error yet.
            page.wait_for_selector("#auth:not([hidden])", timeout=budget_ms())
            if page.is_visible("#main"):
                raise Failure("the dashboard shows before the token is entered")
            page.fill("#token", token)
            page.click("#token-submit")
            page.wait_for_selector("#main:not([hidden]) #cards .card", timeout=budget_ms())

            # The page's figures against the status fetched at the same moment (a poll's lag allowed).
            def compare():
                shown = page.evaluate(PAGE_FIGURES)
                truth = status()
                return shown == truth, {"page": shown, "status": truth}

            both = until("the page's figures match /admin/status", compare)
            report["matched"] = {"page": both["page"]["backends"], "status": both["status"]["backends"],
                                 "live": both["page"]["live"], "websockets": both["page"]["websockets"]}

            # The room search: a live room's owner as /admin/rooms/{key} has it; a hostile key as text.
            def room(key):
                page.fill("#room-key", key)
                page.click("#room-search")
                page.wait_for_selector("#room-result > *", timeout=budget_ms())
                return page.inner_text("#room-result")

            req = urllib.request.Request(base + "/admin/rooms/" + room_key,
                                         headers={"Authorization": "Bearer " + token})
            with urllib.request.urlopen(req, timeout=5) as r:
                owner = json.load(r)["backend"]
            shown = room(room_key)
            hostile = "<img src=x id=injected>&amp;"
            refused_text = room(hostile)
            report["room"] = {"owner": owner, "shown": shown, "hostile": refused_text,
                              "injected": page.query_selector("#injected") is not None}
            if f"owner\t{owner}" not in shown.replace("\n", "\t") or hostile not in refused_text:
                raise Failure(f"room search: {report['room']}")

            # A drain from the page: confirm accepted.
            dialogs = []

            def on_dialog(d):
                dialogs.append(d.message)
                d.accept()

            page.on("dialog", on_dialog)
            page.select_option("#action-backend", victim, timeout=budget_ms())
            page.fill("#drain-deadline", "45s")
            page.click("#drain", timeout=budget_ms())
            until("the drain reaches /admin/status",
                  lambda: ((s := status()["backends"][victim])[0] == "draining", s))
            card = f'#cards .card[data-backend="{victim}"]'
            page.wait_for_selector(f'{card}[data-state="draining"] .drain:not([hidden])', timeout=budget_ms())
            report["drain"] = {
                "dialog": dialogs[0] if dialogs else None,
                "card_state": page.get_attribute(card, "data-state"),
                "card_badge": page.inner_text(f"{card} .state"),
                "card_drain": page.inner_text(f"{card} .drain-text"),
                "action_result": page.inner_text("#action-result"),
            }
            if "deadline in" not in report["drain"]["card_drain"]:
                raise Failure(f"the card shows no countdown: {report['drain']}")
            ctx.close()

            # A wrong token, in a fresh tab (nothing in sessionStorage): an error and the form.
            ctx = browser.new_context(viewport={"width": 390, "height": 844})
            page = ctx.new_page()
            watch(page)
            page.goto(base + "/", wait_until="domcontentloaded", timeout=budget_ms())
            page.wait_for_selector("#auth:not([hidden])", timeout=budget_ms())
            page.fill("#token", "not-the-token-" + token[::-1])
            page.click("#token-submit")
            page.wait_for_selector("#auth-error:not([hidden])", timeout=budget_ms())
            report["wrong_token"] = {
                "error": page.inner_text("#auth-error"),
                "form_visible": page.is_visible("#auth-form"),
                "main_hidden": not page.is_visible("#main"),
                "stored": page.evaluate("() => sessionStorage.length"),
            }
            if not report["wrong_token"]["form_visible"]:
                raise Failure(f"no token form after a wrong token: {report['wrong_token']}")
            ctx.close()
        finally:
            browser.close()
    report["console_errors"] = console
    return report


if __name__ == "__main__":
    signal.signal(signal.SIGALRM, lambda *_: (print("check.py: overall timeout", file=sys.stderr), os._exit(1)))
    signal.alarm(TOTAL + 3)
    try:
        print(json.dumps(main(sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3], sys.argv[4])))
    except (Failure, PlaywrightError) as e:
        print(f"check.py: {e}", file=sys.stderr)
        sys.exit(1)
