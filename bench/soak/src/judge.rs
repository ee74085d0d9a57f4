//! The judge: independent of roomgate's counters, it reads only what the backends recorded (their
//! event lines: joins, leaves, exports, imports) and what the clients saw (hellos, broadcasts,
//! close frames), and checks the invariants of RELIABILITY.md. It also keeps the timeline printed
//! around the first violation, and the reconnect times per fault kind.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::clock::now_us;

/// The invariants, as reported (each must have 0 violations).
pub const INVARIANTS: [&str; 5] = ["one-room-one-backend", "delivery", "close-code", "handoff-log", "back-in-room"];

/// How a client's socket ended.
#[derive(Clone, Debug)]
pub enum Ending {
    /// The client closed it (at the end of the run).
    Client,
    /// A close frame arrived with this code.
    Code(u16),
    /// No close frame: an end of stream, a reset, an error.
    Bare(String),
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub t: u64,
    pub invariant: &'static str,
    pub room: Option<String>,
    pub detail: String,
}

struct Interval {
    backend: String,
    conn: u64,
    start: u64,
    end: Option<u64>,
}

struct Export {
    t: u64,
    room: String,
    generation: String,
    len: usize,
    digest: String,
}

struct Import {
    t: u64,
    backend: String,
    room: String,
    move_id: String,
    len: String,
    digest: String,
    members: String,
}

#[derive(Clone)]
struct Fault {
    kind: &'static str,
    start: u64,
    end: Option<u64>,
}

struct Conn {
    room: String,
    backend: String,
    member: (usize, usize),
}

#[derive(Default)]
pub struct Counts {
    pub sent: u64,
    pub received: u64,
    pub echoed: u64,
    pub opened: u64,
    pub unconfirmed: u64,
    pub bare_after_backend_death: u64,
    pub closes: BTreeMap<String, u64>,
    pub handshake_failures: BTreeMap<String, u64>,
    pub pages: BTreeMap<String, u64>,
    pub exports: u64,
    pub imports: u64,
}

#[derive(Default)]
struct State {
    /// Backend-side memberships, by room; `end` None while open.
    rooms: HashMap<String, Vec<Interval>>,
    /// (backend, conn) -> (room, index in `rooms[room]`) of the open ones.
    open: HashMap<(String, u64), (String, usize)>,
    stops: HashMap<String, Vec<(u64, Option<u64>)>>,
    kills: HashMap<String, Vec<u64>>,
    relay_resets: Vec<u64>,
    client_closes: HashMap<u64, u64>,
    exports: HashMap<String, Export>,
    /// Imports not judged yet.
    imports: Vec<Import>,
    /// Per copy of a room's state: each log index's (sender connection, sequence number).
    logs: HashMap<String, Vec<(u64, u32)>>,
    faults: Vec<Fault>,
    conns: HashMap<u64, Conn>,
    /// Per member: when its last socket ended (not by the client), until it is back.
    out_since: HashMap<(usize, usize), u64>,
    reconnects: BTreeMap<&'static str, Vec<u64>>,
    fault_counts: BTreeMap<&'static str, u64>,
    counts: Counts,
    violations: BTreeMap<&'static str, u64>,
    first: Vec<Violation>,
    seen_overlaps: HashSet<(u64, u64)>,
    /// Copies already reported as used after their export.
    stale_copies: HashSet<String>,
    timeline: Vec<(u64, Option<String>, String)>,
    next_conn: u64,
}

/// Timeline entries kept (a cap for very long runs; the first violation's surroundings are early).
const TIMELINE_CAP: usize = 3_000_000;
/// Violations kept in full (the rest are counted).
const FIRST_KEPT: usize = 20;

pub struct Judge {
    state: Mutex<State>,
    /// roomgate's `timeouts.websocket_close`, in µs: the longest roomgate holds a backend
    /// connection after it closed the client's side.
    close_timeout_us: u64,
    pub relay_backend: String,
}

impl Judge {
    pub fn new(close_timeout_us: u64, relay_backend: String) -> Judge {
        Judge { state: Mutex::new(State { next_conn: 1, ..State::default() }), close_timeout_us, relay_backend }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn note(&self, room: Option<&str>, text: String) {
        self.lock().note(now_us(), room, text);
    }

    pub fn violation(&self, invariant: &'static str, room: Option<&str>, detail: String) {
        self.lock().violation(now_us(), invariant, room, detail);
    }

    /// The end state differs from the start beyond the tolerance (report.rs).
    pub fn violation_resources(&self, detail: String) {
        self.lock().violation(now_us(), "resources", None, detail);
    }

    // === faults ===

    pub fn fault_begin(&self, kind: &'static str, detail: &str) -> usize {
        let mut s = self.lock();
        let t = now_us();
        s.faults.push(Fault { kind, start: t, end: None });
        *s.fault_counts.entry(kind).or_default() += 1;
        s.note(t, None, format!("FAULT {kind} {detail} begins"));
        s.faults.len() - 1
    }

    pub fn fault_end(&self, ix: usize) {
        let mut s = self.lock();
        let t = now_us();
        if let Some(f) = s.faults.get_mut(ix) {
            f.end = Some(t);
            let kind = f.kind;
            s.note(t, None, format!("FAULT {kind} ends"));
        }
    }

    pub fn backend_killed(&self, id: &str, t: u64) {
        self.lock().kills.entry(id.to_owned()).or_default().push(t);
    }

    pub fn backend_stopped(&self, id: &str, t: u64) {
        self.lock().stops.entry(id.to_owned()).or_default().push((t, None));
    }

    pub fn backend_continued(&self, id: &str, t: u64) {
        if let Some(last) = self.lock().stops.get_mut(id).and_then(|v| v.last_mut()) {
            last.1 = Some(t);
        }
    }

    pub fn relay_reset(&self, t: u64) {
        self.lock().relay_resets.push(t);
    }

    pub fn fault_counts(&self) -> BTreeMap<&'static str, u64> {
        self.lock().fault_counts.clone()
    }

    // === what the backends recorded ===

    /// One event line of backend `id` (see backend.rs).
    pub fn backend_line(&self, id: &str, line: &str) {
        let f: Vec<&str> = line.split(' ').collect();
        let t = f.get(1).and_then(|t| t.parse::<u64>().ok()).unwrap_or_else(now_us);
        let mut s = self.lock();
        match (f.first().copied(), f.len()) {
            (Some("join"), 4) => {
                let (room, conn) = (f[2].to_owned(), f[3].parse().unwrap_or(0));
                let list = s.rooms.entry(room.clone()).or_default();
                list.push(Interval { backend: id.to_owned(), conn, start: t, end: None });
                let ix = list.len() - 1;
                s.open.insert((id.to_owned(), conn), (room.clone(), ix));
                s.note(t, Some(&room), format!("{id}: join conn {conn}"));
            }
            (Some("leave"), 4) => {
                let conn = f[3].parse().unwrap_or(0);
                s.close_interval(id, conn, t);
                s.note(t, Some(f[2]), format!("{id}: leave conn {conn}"));
            }
            (Some("export"), 7) => {
                let e = Export {
                    t,
                    room: f[2].to_owned(),
                    generation: f[4].to_owned(),
                    len: f[5].parse().unwrap_or(0),
                    digest: f[6].to_owned(),
                };
                s.counts.exports += 1;
                s.note(t, Some(f[2]), format!("{id}: export move {} copy {} len {}", f[3], e.generation, e.len));
                s.exports.insert(f[3].to_owned(), e);
            }
            (Some("import"), 8) => {
                s.counts.imports += 1;
                let (room, move_id, len, digest, members) = (f[2], f[3], f[5], f[6], f[7]);
                s.note(t, Some(room), format!("{id}: import move {move_id} copy {} len {len} members {members}", f[4]));
                // Judged later (`check_moves`): the export's line comes from another process's
                // stdout, and may be read after this one.
                s.imports.push(Import {
                    t,
                    backend: id.to_owned(),
                    room: room.to_owned(),
                    move_id: move_id.to_owned(),
                    len: len.to_owned(),
                    digest: digest.to_owned(),
                    members: members.to_owned(),
                });
            }
            (Some("stale"), 6) => {
                // Once per copy: a room that stays on its old owner after an export goes on there.
                let d = format!(
                    "{id}: {} on copy {} of room {} after its export (conn {}): the room stayed on its old owner after its state was exported",
                    f[4], f[3], f[2], f[5]
                );
                if s.stale_copies.insert(f[3].to_owned()) {
                    s.violation(t, "handoff-log", Some(f[2]), d);
                } else {
                    s.note(t, Some(f[2]), d);
                }
            }
            (Some("ready"), _) => s.note(t, None, format!("{id}: {line}")),
            _ => s.note(t, None, format!("{id}: unreadable line {line:?}")),
        }
    }

    /// Backend `id`'s process is gone (its stdout ended): its open members end at its kill.
    pub fn backend_gone(&self, id: &str) {
        let mut s = self.lock();
        let now = now_us();
        let t = s.kills.get(id).and_then(|k| k.last().copied()).filter(|k| now - k < 30_000_000).unwrap_or(now);
        // Only the dead process's members: a restarted one may have joined some already.
        let open: Vec<u64> = s
            .open
            .iter()
            .filter(|((b, _), (room, ix))| {
                b == id && s.rooms.get(room).and_then(|l| l.get(*ix)).is_some_and(|i| i.start <= t)
            })
            .map(|((_, c), _)| *c)
            .collect();
        for conn in open {
            s.close_interval(id, conn, t);
        }
        s.note(t, None, format!("{id}: process gone"));
    }

    /// Checks "one room, one backend" over everything recorded up to `horizon` (µs).
    pub fn check_overlaps(&self, horizon: u64) {
        let mut s = self.lock();
        let close_timeout = self.close_timeout_us;
        let mut found = Vec::new();
        for (room, list) in &s.rooms {
            let mut spans: Vec<(u64, u64, &Interval)> = list
                .iter()
                .filter(|i| i.start < horizon)
                .map(|i| (i.start, s.effective_end(i, horizon, close_timeout), i))
                .collect();
            spans.sort_by_key(|x| x.0);
            for (k, a) in spans.iter().enumerate() {
                for b in &spans[k + 1..] {
                    if b.0 >= a.1 {
                        break;
                    }
                    if a.2.backend != b.2.backend && a.1.min(b.1) > b.0 {
                        found.push((
                            room.clone(),
                            a.2.conn,
                            b.2.conn,
                            describe(a),
                            describe(b),
                            b.0,
                            a.1.min(b.1) - b.0,
                        ));
                    }
                }
            }
        }
        for (room, c1, c2, d1, d2, start, len) in found {
            if s.seen_overlaps.insert((c1.min(c2), c1.max(c2))) {
                let d = format!("room {room} on {d1} and on {d2} at once for {} ms", len / 1000);
                s.violation(start, "one-room-one-backend", Some(&room), d);
            }
        }
    }

    /// Judges the imports older than `horizon` against their exports.
    pub fn check_moves(&self, horizon: u64) {
        let mut s = self.lock();
        let (due, later): (Vec<Import>, Vec<Import>) =
            std::mem::take(&mut s.imports).into_iter().partition(|i| i.t < horizon);
        s.imports = later;
        for i in due {
            let detail = match s.exports.get(&i.move_id) {
                None => Some(format!("import of move {} on {} without its export", i.move_id, i.backend)),
                Some(e) if e.len.to_string() != i.len || e.digest != i.digest => Some(format!(
                    "move {} to {}: exported {} entries ({}), imported {} ({})",
                    i.move_id, i.backend, e.len, e.digest, i.len, i.digest
                )),
                Some(_) if i.members != "0" => {
                    Some(format!("move {}: {} members on {} before the state arrived", i.move_id, i.members, i.backend))
                }
                Some(_) => None,
            };
            if let Some(d) = detail {
                s.violation(i.t, "handoff-log", Some(&i.room), d);
            }
        }
    }

    // === what the clients saw ===

    pub fn next_conn(&self) -> u64 {
        let mut s = self.lock();
        s.next_conn += 1;
        s.next_conn
    }

    pub fn opened(&self, conn: u64, room: &str, member: (usize, usize), backend: &str, hello: &str, via: usize) {
        let mut s = self.lock();
        let t = now_us();
        s.counts.opened += 1;
        s.conns.insert(conn, Conn { room: room.to_owned(), backend: backend.to_owned(), member });
        if let Some(out) = s.out_since.remove(&member) {
            let kind = s.attribute(out);
            s.reconnects.entry(kind).or_default().push(t.saturating_sub(out));
        }
        s.note(t, Some(room), format!("client m{}.{} conn {conn} via replica {via}: {hello}", member.0, member.1));
    }

    /// A broadcast `index` of copy `generation` carrying (`sender`, `seq`): every socket that gets
    /// that index of that copy must get the same message.
    pub fn observe(&self, generation: &str, index: usize, sender: u64, seq: u32) -> Result<(), String> {
        let mut s = self.lock();
        s.counts.received += 1;
        let log = s.logs.entry(generation.to_owned()).or_default();
        if log.len() <= index {
            log.resize(index + 1, (0, 0));
        }
        match log[index] {
            (0, 0) => {
                log[index] = (sender, seq);
                Ok(())
            }
            seen if seen == (sender, seq) => Ok(()),
            seen => Err(format!(
                "index {index} of copy {generation}: c{}.{} here, c{}.{} on another socket",
                sender, seq, seen.0, seen.1
            )),
        }
    }

    pub fn sent(&self) {
        self.lock().counts.sent += 1;
    }

    pub fn echoed(&self) {
        self.lock().counts.echoed += 1;
    }

    pub fn handshake_failed(&self, member: (usize, usize), room: &str, why: String) {
        let mut s = self.lock();
        let t = now_us();
        s.note(t, Some(room), format!("client m{}.{} handshake failed: {why}", member.0, member.1));
        let key = why.split(':').next().unwrap_or("").to_owned();
        *s.counts.handshake_failures.entry(key).or_default() += 1;
    }

    pub fn page(&self, outcome: String) {
        *self.lock().counts.pages.entry(outcome).or_default() += 1;
    }

    /// Socket `conn` ended as `ending`, with `unconfirmed` of its messages never echoed.
    pub fn closed(&self, conn: u64, ending: &Ending, unconfirmed: usize) {
        let mut s = self.lock();
        let t = now_us();
        s.client_closes.insert(conn, t);
        s.counts.unconfirmed += unconfirmed as u64;
        let Some(c) = s.conns.get(&conn) else { return };
        let (room, backend, member) = (c.room.clone(), c.backend.clone(), c.member);
        s.note(t, Some(&room), format!("client m{}.{} conn {conn} on {backend} ended: {ending:?}", member.0, member.1));
        let label = match ending {
            Ending::Client => "client".to_owned(),
            Ending::Code(code) => code.to_string(),
            Ending::Bare(_) => "no close frame".to_owned(),
        };
        *s.counts.closes.entry(label).or_default() += 1;
        if !matches!(ending, Ending::Client) {
            s.out_since.insert(member, t);
        }
        match ending {
            Ending::Client if unconfirmed > 0 => {
                let d = format!("conn {conn} stayed open, but {unconfirmed} of its messages never came back");
                s.violation(t, "delivery", Some(&room), d);
            }
            // 1001 shutdown or idle, 1012 a move, 1011 a backend that went away, 1014 one that
            // broke the framing.
            Ending::Code(1001 | 1011 | 1012 | 1014) | Ending::Client => {}
            Ending::Code(code) => {
                s.violation(t, "close-code", Some(&room), format!("conn {conn} on {backend}: close code {code}"))
            }
            Ending::Bare(why) => {
                let near = |ts: &[u64]| ts.iter().any(|k| *k <= t + 500_000 && t <= k + 5_000_000);
                let killed = s.kills.get(&backend).is_some_and(|k| near(k));
                let reset = backend == self.relay_backend && near(&s.relay_resets);
                if killed || reset {
                    s.counts.bare_after_backend_death += 1;
                } else {
                    let d = format!("conn {conn} on {backend}: ended without a close frame ({why})");
                    s.violation(t, "close-code", Some(&room), d);
                }
            }
        }
    }

    // === the end ===

    /// Exports whose copy had messages past the exported length (confirmed to a client, so lost).
    pub fn check_exports(&self) {
        let mut s = self.lock();
        let mut found = Vec::new();
        for (move_id, e) in &s.exports {
            if let Some(log) = s.logs.get(&e.generation)
                && log.len() > e.len
            {
                found.push((
                    e.t,
                    e.room.clone(),
                    format!(
                        "move {move_id}: copy {} exported with {} entries, clients saw {}",
                        e.generation,
                        e.len,
                        log.len()
                    ),
                ));
            }
        }
        for (t, room, d) in found {
            s.violation(t, "handoff-log", Some(&room), d);
        }
    }

    /// Memberships the backends still hold (after the clients left: a socket roomgate kept).
    pub fn held_by_backends(&self) -> Vec<String> {
        let s = self.lock();
        s.open.iter().map(|((b, c), (room, _))| format!("{b} holds conn {c} of room {room}")).collect()
    }

    /// Members not back in their room now.
    pub fn out_now(&self) -> Vec<((usize, usize), u64)> {
        self.lock().out_since.iter().map(|(m, t)| (*m, *t)).collect()
    }

    pub fn with_results<R>(&self, f: impl FnOnce(&Results<'_>) -> R) -> R {
        let s = self.lock();
        f(&Results {
            counts: &s.counts,
            violations: &s.violations,
            first: &s.first,
            reconnects: &s.reconnects,
            timeline: &s.timeline,
        })
    }
}

/// What the report reads.
pub struct Results<'a> {
    pub counts: &'a Counts,
    pub violations: &'a BTreeMap<&'static str, u64>,
    pub first: &'a [Violation],
    pub reconnects: &'a BTreeMap<&'static str, Vec<u64>>,
    pub timeline: &'a [(u64, Option<String>, String)],
}

fn describe(x: &(u64, u64, &Interval)) -> String {
    let end = x.2.end.map_or("open".to_owned(), |e| e.to_string());
    format!("{} (conn {}, {}..{end}, judged to {})", x.2.backend, x.2.conn, x.0, x.1)
}

impl State {
    fn note(&mut self, t: u64, room: Option<&str>, text: String) {
        if self.timeline.len() < TIMELINE_CAP {
            self.timeline.push((t, room.map(str::to_owned), text));
        }
    }

    fn violation(&mut self, t: u64, invariant: &'static str, room: Option<&str>, detail: String) {
        *self.violations.entry(invariant).or_default() += 1;
        self.note(t, room, format!("VIOLATION {invariant}: {detail}"));
        eprintln!("violation of {invariant}: {detail}");
        // The earliest ones (some are found after the fact, at the end).
        let v = Violation { t, invariant, room: room.map(str::to_owned), detail };
        if self.first.len() < FIRST_KEPT {
            self.first.push(v);
        } else if let Some(latest) = self.first.iter_mut().max_by_key(|v| v.t)
            && latest.t > t
        {
            *latest = v;
        }
    }

    fn close_interval(&mut self, backend: &str, conn: u64, t: u64) {
        if let Some((room, ix)) = self.open.remove(&(backend.to_owned(), conn))
            && let Some(i) = self.rooms.get_mut(&room).and_then(|l| l.get_mut(ix))
        {
            i.end = Some(t);
        }
    }

    /// When a membership stopped serving anyone. A backend that was SIGSTOPped records a leave only
    /// once it runs again; roomgate had dropped its end of the connection by then, at the latest
    /// `websocket_close` after the client got its close: that bound is taken instead.
    fn effective_end(&self, i: &Interval, horizon: u64, close_timeout: u64) -> u64 {
        let end = i.end.unwrap_or(horizon).min(horizon);
        let Some(&client_end) = self.client_closes.get(&i.conn) else { return end };
        let stopped = self
            .stops
            .get(&i.backend)
            .is_some_and(|v| v.iter().any(|(a, b)| *a < end && b.is_none_or(|b| b > client_end)));
        if stopped { end.min(client_end + close_timeout).max(i.start) } else { end }
    }

    /// The fault a socket that ended at `t` is put down to: the latest one begun before `t` and
    /// not over for more than 10 s.
    fn attribute(&self, t: u64) -> &'static str {
        self.faults
            .iter()
            .rev()
            .find(|f| f.start <= t && f.end.is_none_or(|e| t <= e + 10_000_000))
            .map_or("none", |f| f.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn violations(j: &Judge, invariant: &str) -> u64 {
        j.with_results(|r| r.violations.get(invariant).copied().unwrap_or(0))
    }

    #[test]
    fn a_room_on_two_backends_at_once_is_a_violation_and_one_after_the_other_is_not() {
        let j = Judge::new(2_000_000, "b3".into());
        // r1: b0 until 200, then b1 from 300: fine. r2: b0 and b1 from 100 and 150, both open.
        j.backend_line("b0", "join 100 r1 1");
        j.backend_line("b0", "leave 200 r1 1");
        j.backend_line("b1", "join 300 r1 2");
        j.backend_line("b0", "join 100 r2 3");
        j.backend_line("b1", "join 150 r2 4");
        j.check_overlaps(1_000);
        assert_eq!(violations(&j, "one-room-one-backend"), 1);
        j.check_overlaps(2_000);
        assert_eq!(violations(&j, "one-room-one-backend"), 1, "each overlap counts once");
    }

    #[test]
    fn two_sockets_that_see_different_messages_at_one_index_disagree() {
        let j = Judge::new(2_000_000, "b3".into());
        assert!(j.observe("g1", 0, 7, 1).is_ok());
        assert!(j.observe("g1", 0, 7, 1).is_ok(), "the same message on another socket");
        assert!(j.observe("g1", 0, 8, 1).is_err());
        assert!(j.observe("g2", 0, 8, 1).is_ok(), "another copy of the room");
    }

    #[test]
    fn an_import_must_carry_what_its_export_had_and_meet_no_members() {
        let j = Judge::new(2_000_000, "b3".into());
        j.backend_line("b0", "export 100 r1 m1 g1 5 d5");
        j.backend_line("b1", "import 110 r1 m1 g2 5 d5 0");
        j.backend_line("b0", "export 200 r2 m2 g3 5 d5");
        j.backend_line("b1", "import 210 r2 m2 g4 4 d4 0");
        j.backend_line("b0", "export 300 r3 m3 g5 5 d5");
        j.backend_line("b1", "import 310 r3 m3 g6 5 d5 2");
        j.backend_line("b1", "import 410 r4 m9 g7 5 d5 0");
        j.check_moves(1_000);
        assert_eq!(violations(&j, "handoff-log"), 3, "a short log, members first, no export");
    }

    #[test]
    fn close_codes_roomgate_may_send_pass_and_others_do_not() {
        let j = Judge::new(2_000_000, "b3".into());
        for (conn, code) in [(1, 1001), (2, 1011), (3, 1012), (4, 1014)] {
            j.opened(conn, "r", (0, conn as usize), "b0", "hello", 0);
            j.closed(conn, &Ending::Code(code), 0);
        }
        assert_eq!(violations(&j, "close-code"), 0);
        j.opened(5, "r", (0, 5), "b0", "hello", 0);
        j.closed(5, &Ending::Code(4000), 0);
        j.opened(6, "r", (0, 6), "b1", "hello", 0);
        j.closed(6, &Ending::Bare("end of stream".into()), 0);
        assert_eq!(violations(&j, "close-code"), 2, "an unknown code, and no close frame with no death near");
        j.backend_killed("b2", now_us());
        j.opened(7, "r", (0, 7), "b2", "hello", 0);
        j.closed(7, &Ending::Bare("end of stream".into()), 0);
        assert_eq!(violations(&j, "close-code"), 2, "a backend killed mid-frame leaves no close: counted apart");
        j.opened(8, "r", (0, 8), "b0", "hello", 0);
        j.closed(8, &Ending::Client, 3);
        assert_eq!(violations(&j, "delivery"), 1, "a socket that stayed open lost messages");
    }
}
