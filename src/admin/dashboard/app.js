// roomgate's dashboard script: polls /admin/status and /metrics every second, renders them with
// textContent only (room keys and ids are untrusted), runs the room search and the actions, and
// keeps the admin token (when one is needed) in sessionStorage, sent as a Bearer token.
"use strict";

const POLL_MS = 1000;
const HISTORY = 60; // polls of up/down history per backend
const P99_WINDOW = 10; // polls of histogram deltas behind p99
const TOKEN_KEY = "roomgate.admin.token";

const $ = (id) => document.getElementById(id);

/** An element with text or children; attributes set as properties (never HTML). */
function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") el.className = v;
    else el[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
}

function show(el, on) {
  el.hidden = !on;
}

// === the token ===

let token = sessionStorage.getItem(TOKEN_KEY) || "";
let authorized = false;

class Refused extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** fetch with the token; JSON (or text) back. 401/403 become Refused, other errors Error. */
async function api(method, path, body) {
  const headers = {};
  if (token) headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
    credentials: "omit",
  });
  const text = await resp.text();
  const json = (() => {
    try {
      return JSON.parse(text);
    } catch (_) {
      return null;
    }
  })();
  if (resp.status === 401 || resp.status === 403) {
    const why = (json && json.error) || resp.statusText;
    throw new Refused(resp.status, `${resp.status}: ${why}`);
  }
  if (!resp.ok) {
    throw new Error(`${resp.status}: ${(json && json.error) || text.trim() || resp.statusText}`);
  }
  return json === null ? text : json;
}

function askToken(message) {
  authorized = false;
  show($("main"), false);
  show($("summary"), false);
  show($("auth"), true);
  const err = $("auth-error");
  err.textContent = message || "";
  show(err, !!message);
  $("conn").textContent = "not signed in";
  $("conn").className = "conn bad";
  $("token").focus();
}

function refused(e) {
  const had = token !== "";
  token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  if (!had && e.status === 401) askToken("");
  else askToken(`The admin API refused ${had ? "this token" : "the request"} (${e.message}).`);
}

$("auth-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("token").value.trim();
  $("token").value = "";
  sessionStorage.setItem(TOKEN_KEY, token);
  show($("auth-error"), false);
  $("conn").textContent = "signing in…";
  poll();
});

// === figures from /metrics: requests per second and p99 per backend ===

const samples = []; // [{t, requests: {backend: n}, buckets: {backend: [[le, count], ...]}}]

function parseMetrics(text) {
  const requests = {};
  const buckets = {};
  const labelRe = /(\w+)="((?:[^"\\]|\\.)*)"/g;
  for (const line of text.split("\n")) {
    const isReq = line.startsWith("roomgate_requests_total{");
    const isBucket = line.startsWith("roomgate_upstream_response_seconds_bucket{");
    if (!isReq && !isBucket) continue;
    const close = line.lastIndexOf("}");
    const labels = {};
    for (const m of line.slice(0, close).matchAll(labelRe)) labels[m[1]] = m[2];
    const value = Number(line.slice(close + 1).trim().split(" ")[0]);
    const b = labels.backend;
    if (!b || b === "none" || !Number.isFinite(value)) continue;
    if (isReq) requests[b] = (requests[b] || 0) + value;
    else (buckets[b] = buckets[b] || []).push([labels.le === "+Inf" ? Infinity : Number(labels.le), value]);
  }
  return { t: performance.now(), requests, buckets };
}

function rate(id) {
  if (samples.length < 2) return null;
  const a = samples[samples.length - 2];
  const b = samples[samples.length - 1];
  const dt = (b.t - a.t) / 1000;
  if (dt <= 0 || b.requests[id] === undefined) return null;
  return Math.max(0, (b.requests[id] - (a.requests[id] || 0)) / dt);
}

/** The upper bound of the bucket holding the 99th percentile over the last polls, in seconds. */
function p99(id) {
  if (samples.length < 2) return null;
  const now = samples[samples.length - 1].buckets[id];
  const then = samples[Math.max(0, samples.length - 1 - P99_WINDOW)].buckets[id] || [];
  if (!now) return null;
  const before = new Map(then.map(([le, n]) => [le, n]));
  const delta = now.map(([le, n]) => [le, n - (before.get(le) || 0)]).sort((x, y) => x[0] - y[0]);
  const total = delta.length ? delta[delta.length - 1][1] : 0;
  if (total <= 0) return null;
  const found = delta.find(([, n]) => n >= 0.99 * total);
  return found ? found[0] : null;
}

function fmtSeconds(s) {
  if (s === null) return "–";
  if (s === Infinity) return "> 13 s";
  return s < 1 ? `≤ ${+(s * 1000).toPrecision(3)} ms` : `≤ ${+s.toPrecision(3)} s`;
}

// === backends ===

const cards = new Map(); // id -> {el, fields, history: [state], drainTotal, drainRooms}

function card(id) {
  let c = cards.get(id);
  if (c) return c;
  const f = {};
  const stat = (name, label) => {
    f[name] = h("dd", { class: "num" });
    f[name].dataset.stat = name;
    return [h("dt", {}, label), f[name]];
  };
  f.state = h("span", { class: "state" });
  f.addr = h("span", { class: "addr" });
  f.history = h("div", { class: "history", title: "state at each poll, oldest first" });
  f.drainText = h("div", { class: "drain-text" });
  f.drainBar = h("div", { class: "bar-fill" });
  f.drain = h("div", { class: "drain", hidden: true }, f.drainText, h("div", { class: "bar" }, f.drainBar));
  const el = h(
    "article",
    { class: "card" },
    h("header", {}, h("h3", {}, id), f.state),
    f.addr,
    h("dl", { class: "stats" }, ...stat("rooms", "live rooms"), ...stat("sockets", "sockets"), ...stat("rps", "req/s"), ...stat("p99", "p99")),
    f.history,
    f.drain,
  );
  el.dataset.backend = id;
  c = { el, f, history: [], drainTotal: 0, drainRooms: 0 };
  cards.set(id, c);
  return c;
}

function renderBackends(status, haveMetrics) {
  const container = $("cards");
  const seen = new Set();
  for (const b of status.backends) {
    seen.add(b.id);
    const c = card(b.id);
    const f = c.f;
    const state = b.removed ? `${b.state} (removed)` : b.state;
    f.state.textContent = state;
    f.state.className = `state state-${b.state}`;
    c.el.dataset.state = b.state;
    f.addr.textContent = b.addr;
    f.rooms.textContent = b.rooms;
    f.sockets.textContent = b.sockets;
    const r = haveMetrics ? rate(b.id) : null;
    f.rps.textContent = r === null ? "–" : r < 10 ? r.toFixed(1) : Math.round(r);
    f.p99.textContent = haveMetrics ? fmtSeconds(p99(b.id)) : "–";
    c.history.push(b.state);
    if (c.history.length > HISTORY) c.history.shift();
    clear(f.history);
    for (const s of c.history) f.history.append(h("span", { class: `tick state-${s}` }));
    const draining = b.drain_deadline_ms !== null && b.drain_deadline_ms !== undefined;
    if (draining) {
      c.drainTotal = Math.max(c.drainTotal, b.drain_deadline_ms);
      c.drainRooms = Math.max(c.drainRooms, b.rooms);
      const left = Math.ceil(b.drain_deadline_ms / 1000);
      f.drainText.textContent = `draining: ${b.rooms} of ${c.drainRooms} rooms left, deadline in ${left} s`;
      f.drainBar.style.width = `${(100 * (1 - b.drain_deadline_ms / Math.max(1, c.drainTotal))).toFixed(1)}%`;
    } else {
      c.drainTotal = 0;
      c.drainRooms = 0;
    }
    show(f.drain, draining);
    if (c.el.parentNode !== container) container.append(c.el);
  }
  for (const [id, c] of cards) {
    if (!seen.has(id)) {
      c.el.remove();
      cards.delete(id);
    }
  }
  // The action's backend list, keeping the selection.
  const select = $("action-backend");
  const chosen = select.value;
  const ids = status.backends.map((b) => b.id);
  if ([...select.options].map((o) => o.value).join("\n") !== ids.join("\n")) {
    clear(select);
    for (const id of ids) select.append(h("option", { value: id }, id));
    if (ids.includes(chosen)) select.value = chosen;
  }
}

// === the other sections ===

function kv(dl, pairs) {
  clear(dl);
  for (const [k, v, cls] of pairs) {
    if (v === null || v === undefined) continue;
    dl.append(h("dt", {}, k), h("dd", { class: cls || "" }, v));
  }
}

function ago(unixSeconds) {
  const s = Math.max(0, Math.round(Date.now() / 1000 - unixSeconds));
  if (s < 120) return `${s} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

function renderSummary(status) {
  const s = $("summary");
  clear(s);
  const dir = status.directory || {};
  const split = status.split_rooms + (dir.fleet_split_rooms || 0);
  const item = (label, value, cls, id) => h("span", { class: `item ${cls || ""}`, id: id || "" }, h("b", {}, value), " ", label);
  s.append(
    item("live rooms", status.rooms.live, "", "sum-live"),
    item("known rooms", status.rooms.known),
    item("websockets", status.websockets, "", "sum-sockets"),
    item("split rooms", split, split > 0 ? "bad" : "good", "split-rooms"),
    item("epoch", status.epoch),
  );
  if (status.config) s.append(h("span", { class: "item origin" }, status.config));
  show(s, true);
}

function renderBalance(status) {
  const taking = status.backends.filter((b) => b.state === "active");
  const live = status.backends.reduce((n, b) => n + b.rooms, 0);
  const on = live > 0 && taking.length > 0;
  show($("balance"), on);
  if (!on) return;
  const even = live / taking.length;
  const top = 1.15 * Math.max(even, ...status.backends.map((b) => b.rooms));
  const rows = $("balance-rows");
  clear(rows);
  for (const b of status.backends) {
    const fill = h("div", { class: `bar-fill state-${b.state}` });
    fill.style.width = `${((100 * b.rooms) / top).toFixed(1)}%`;
    const mark = h("div", { class: "even-mark", title: `even share ${even.toFixed(1)}` });
    mark.style.left = `${((100 * even) / top).toFixed(1)}%`;
    const off = b.state === "active" ? `${b.rooms >= even ? "+" : ""}${Math.round((100 * (b.rooms - even)) / even)}%` : b.state;
    rows.append(h("div", { class: "balance-row" }, h("span", { class: "label" }, b.id), h("div", { class: "bar" }, fill, mark), h("span", { class: "num" }, `${b.rooms} (${off})`)));
  }
  rows.append(h("p", { class: "note" }, `even share: ${even.toFixed(1)} rooms over ${taking.length} active backends`));
}

function renderHandoff(status) {
  const ho = status.handoff;
  show($("handoff"), !!(ho && ho.configured));
  if (!ho || !ho.configured) return;
  kv($("handoff-list"), [["queued", ho.queued], ["running", ho.running], ["done since start", ho.done]]);
}

function renderReload(status) {
  const r = status.last_reload;
  show($("reload"), !!r);
  if (!r) return;
  kv($("reload-list"), [
    ["result", r.ok ? "ok" : "failed", r.ok ? "good" : "bad"],
    ["when", `${new Date(r.at * 1000).toLocaleString()} (${ago(r.at)})`],
    ["epoch", r.epoch],
    ["error", r.error, "bad"],
  ]);
}

function renderDirectory(status) {
  const d = status.directory;
  const shared = !!d && d.backend === "redis";
  show($("directory"), shared);
  if (!shared) return;
  kv($("directory-list"), [
    ["this replica", d.replica],
    ["redis", d.reachable ? "reachable" : "unreachable", d.reachable ? "good" : "bad"],
    ["error", d.error, "bad"],
    ["rebuilding", d.rebuilding_ms === null ? null : `${Math.ceil(d.rebuilding_ms / 1000)} s left`, "warn"],
    ["fleet live rooms", d.fleet_live_rooms],
    ["fleet split rooms", d.fleet_split_rooms, d.fleet_split_rooms > 0 ? "bad" : ""],
    ["rooms not recorded (cap)", d.over_cap, d.over_cap > 0 ? "warn" : ""],
    ["failed calls", d.calls ? d.calls.errors : null],
  ]);
  const body = $("replicas").tBodies[0];
  clear(body);
  for (const r of d.replicas || []) {
    body.append(h("tr", {}, h("td", {}, r.replica), h("td", { class: "num" }, r.epoch), h("td", {}, r.backends.join(", ")), h("td", { class: "num" }, `${(r.seen_ms_ago / 1000).toFixed(1)} s ago`)));
  }
}

function renderDiscovery(status) {
  const list = status.discovery || [];
  show($("discovery"), list.length > 0);
  const box = $("discovery-list");
  clear(box);
  for (const d of list) {
    const dl = h("dl", { class: "kv" });
    kv(dl, [
      ["resolver", d.resolver],
      ["every", `${d.interval_ms / 1000} s`],
      ["backends", d.backends.map((b) => `${b.id} (${b.addr})`).join(", ") || "none"],
      ["resolutions", d.resolutions],
      ["last good", d.last_ok === null || d.last_ok === undefined ? null : typeof d.last_ok === "number" ? ago(d.last_ok) : String(d.last_ok)],
      ["last error", d.last_error, "bad"],
      ["shadowed", d.shadowed.length ? d.shadowed.map((s) => `${s.id} by ${s.by}`).join(", ") : null, "warn"],
    ]);
    box.append(h("h3", {}, d.srv), dl);
  }
}

function renderTls(status) {
  const t = status.tls;
  show($("tls"), !!t);
  if (!t) return;
  const body = $("certs").tBodies[0];
  clear(body);
  for (const c of t.certs || []) {
    const days = c.not_after_unix === null ? null : Math.floor((c.not_after_unix * 1000 - Date.now()) / 86400000);
    const cls = days === null ? "" : days < 3 ? "bad" : days < 14 ? "warn" : "good";
    const state = c.last_error ? `${c.serving ? "serving; " : "not serving; "}${c.last_error}` : c.serving ? "serving" : "not serving";
    body.append(h("tr", {}, h("td", {}, c.names.join(", ") || c.cert), h("td", { title: c.not_after || "" }, c.not_after ? c.not_after.slice(0, 10) : "?"), h("td", { class: `num ${cls}` }, days === null ? "?" : days), h("td", { class: c.last_error || !c.serving ? "bad" : "" }, state)));
  }
}

// === polling ===

let timer = null;

async function poll() {
  clearTimeout(timer);
  try {
    const [status, metrics] = await Promise.all([
      api("GET", "/admin/status"),
      api("GET", "/metrics").catch((e) => {
        if (e instanceof Refused) throw e;
        return null;
      }),
    ]);
    if (!authorized) {
      authorized = true;
      show($("auth"), false);
      show($("main"), true);
    }
    if (typeof metrics === "string") {
      samples.push(parseMetrics(metrics));
      if (samples.length > P99_WINDOW + 1) samples.shift();
    }
    const m = $("metrics-note");
    m.textContent = typeof metrics === "string" ? "" : "/metrics did not answer: no req/s or p99.";
    show(m, typeof metrics !== "string");
    renderSummary(status);
    renderBackends(status, typeof metrics === "string");
    renderBalance(status);
    renderHandoff(status);
    renderReload(status);
    renderDirectory(status);
    renderDiscovery(status);
    renderTls(status);
    show($("banner"), false);
    $("conn").textContent = `live · ${new Date().toLocaleTimeString()}`;
    $("conn").className = "conn good";
    timer = setTimeout(poll, POLL_MS);
  } catch (e) {
    if (e instanceof Refused) {
      refused(e);
      return; // polling resumes when a token is entered
    }
    $("conn").textContent = authorized ? "unreachable" : `roomgate did not answer: ${e.message}`;
    $("conn").className = "conn bad";
    const banner = $("banner");
    banner.textContent = `roomgate did not answer: ${e.message}. Retrying; the figures below are from the last answer.`;
    show(banner, authorized);
    if (!authorized) show($("auth"), false);
    timer = setTimeout(poll, POLL_MS);
  }
}

// === room search ===

$("room-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const key = $("room-key").value;
  const out = $("room-result");
  clear(out);
  if (!key) return;
  try {
    const r = await api("GET", "/admin/rooms/" + encodeURIComponent(key));
    const dl = h("dl", { class: "kv", id: "room-info" });
    kv(dl, [
      ["key", r.key],
      ["owner", r.backend],
      ["live", r.live === undefined ? null : r.live ? "yes" : "lingering"],
      ["sockets", r.sockets],
      ["requests in flight", r.requests],
      ["fleet owner", r.fleet ? r.fleet.owner || "none" : null],
      ["fleet version", r.fleet ? r.fleet.version : null],
    ]);
    out.append(dl);
    const claims = r.fleet ? Object.entries(r.fleet.replicas || {}) : [];
    if (claims.length) {
      const body = h("tbody");
      for (const [replica, c] of claims) {
        body.append(h("tr", {}, h("td", {}, replica), h("td", {}, c.backend), h("td", { class: "num" }, c.connections), h("td", { class: "num" }, c.sockets)));
      }
      out.append(h("table", { class: "table" }, h("thead", {}, h("tr", {}, h("th", {}, "replica"), h("th", {}, "backend"), h("th", {}, "connections"), h("th", {}, "sockets"))), body));
    }
  } catch (e) {
    if (e instanceof Refused) return refused(e);
    out.append(h("p", { class: "error" }, e.message.startsWith("404") ? `No live or lingering room ${JSON.stringify(key)}.` : e.message));
  }
});

// === actions ===

async function act(question, method, path, body) {
  const out = $("action-result");
  if (!window.confirm(question)) {
    out.textContent = "cancelled";
    return;
  }
  out.textContent = "…";
  out.className = "note";
  try {
    const r = await api(method, path, body);
    out.textContent = `done: ${JSON.stringify(r)}`;
    out.className = "note good";
    poll();
  } catch (e) {
    if (e instanceof Refused) return refused(e);
    out.textContent = `failed: ${e.message}`;
    out.className = "note bad";
  }
}

const backendPath = (id, what) => `/admin/backends/${encodeURIComponent(id)}/${what}`;

$("drain").addEventListener("click", () => {
  const id = $("action-backend").value;
  if (!id) return;
  const deadline = $("drain-deadline").value.trim();
  const handoff = $("drain-handoff").checked;
  const body = {};
  if (deadline) body.deadline = deadline;
  if (handoff) body.handoff = true;
  act(`Drain backend ${id}${deadline ? ` with a deadline of ${deadline}` : ""}${handoff ? ", handing its rooms off" : ""}?`, "POST", backendPath(id, "drain"), body);
});

$("undrain").addEventListener("click", () => {
  const id = $("action-backend").value;
  if (id) act(`Undrain backend ${id}?`, "POST", backendPath(id, "undrain"), {});
});

$("reload-config").addEventListener("click", () => act("Reload the config file?", "POST", "/admin/reload", {}));

$("rebalance").addEventListener("click", () => {
  const max = parseInt($("rebalance-max").value, 10);
  const body = Number.isFinite(max) && max > 0 ? { max_moves: max } : {};
  act(`Rebalance rooms${body.max_moves ? ` (at most ${max} moves)` : ""}?`, "POST", "/admin/rebalance", body);
});

poll();
