//! Issue 13, "done when": churn through two replicas sharing a Redis directory, while Redis
//! restarts empty, backends hang and drain deadlines pass, and still no room is ever open on two
//! backends at once. The independent judge (`common::judge`) reads only the backends' own records
//! of who held which room and when.
//!
//! The fault schedule comes from a seed (`CHURN_SEED`, decimal or 0x-hex; a fixed one by
//! default), so a failing run can be replayed. Every member holds a real WebSocket through replica
//! A or B and rejoins whenever it loses it. Each replica runs on a runtime of its own, whose
//! thread is named after it (`replica-A`, `replica-B`), so that roomgate's log lines, captured
//! here and printed on a failure (or always with `CHURN_LOG=1`), say which replica wrote them.
//! `RUST_LOG` sets their filter (default `roomgate=info`).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::judge;
use common::redis_server::Redis;
use common::*;
use futures_util::{SinkExt, StreamExt};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;

const REFRESH: &str = "300ms";
/// Longest wait for one Redis call: generous, the machine is loaded.
const TIMEOUT: &str = "250ms";
/// Rooms move at a drain deadline all at once, not spread over the default 10 s.
const NO_SPREAD: &str = "[drain]\nspread = \"0s\"\n";
/// Only B checks actively, so only B sees a hung backend down (as in fleet_owner case 2).
const HEALTH: &str = "[health]\npath = \"/health\"\ninterval = \"100ms\"\ntimeout = \"200ms\"\nfall = 1\n";
const DEFAULT_SEED: u64 = 0x13c4_a2e5;
const ROOMS: usize = 12;
/// The last rooms are one-sided: their members join through one replica only, and a visitor
/// comes through the other one first right after a Redis restart (issue 13's first case).
const ONE_SIDED: usize = 4;
/// One-sided rooms visited after each Redis restart.
const VISITS_PER_RESTART: usize = 2;
/// Start-to-start spacing of the faults.
const GAP_MS: (u64, u64) = (1500, 2500);
/// How long the members keep churning after the last fault has ended.
const SETTLE: Duration = Duration::from_millis(2500);
/// The drain deadline of every drain.
const DRAIN_DEADLINE: &str = "500ms";
/// A member's pause before it rejoins.
const BACKOFF_MS: (u64, u64) = (20, 100);
/// How long a member keeps one socket before it leaves and rejoins on its own.
const LIFETIME_MS: (u64, u64) = (800, 3000);
/// A member's pause between messages.
const MESSAGE_MS: (u64, u64) = (150, 500);
/// An echo later than this is a problem (open sockets keep working through every fault here).
const ECHO_LIMIT: Duration = Duration::from_secs(3);
/// Bounds of each member's loops.
const MAX_SOCKETS: usize = 400;
const MAX_ATTEMPTS: usize = 200;
const MAX_STEPS: usize = 5000;
/// At the end, a member may be without a socket for at most this long (it was just closed).
const DOWN_AT_END: Duration = Duration::from_secs(3);

// === time, randomness, logs ===

static T0: OnceLock<Instant> = OnceLock::new();

/// The test's time origin: every time printed here is relative to it, roomgate's log lines too.
fn t0() -> Instant {
    *T0.get_or_init(Instant::now)
}

fn at(t: Instant) -> Duration {
    t.saturating_duration_since(t0())
}

fn ms(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

/// A tiny xorshift64 generator: the whole schedule and every member's choices follow the seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // splitmix64, so that neighbouring seeds give unrelated streams.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn range(&mut self, (lo, hi): (u64, u64)) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    fn ms(&mut self, bounds: (u64, u64)) -> Duration {
        Duration::from_millis(self.range(bounds))
    }
}

fn seed() -> u64 {
    match std::env::var("CHURN_SEED") {
        Ok(s) => match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).expect("CHURN_SEED: hex"),
            None => s.parse().expect("CHURN_SEED: a number"),
        },
        Err(_) => DEFAULT_SEED,
    }
}

type LogBuf = Arc<Mutex<Vec<u8>>>;

struct LogWriter(LogBuf);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct SinceT0;

impl tracing_subscriber::fmt::time::FormatTime for SinceT0 {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "t+{}", ms(t0().elapsed()))
    }
}

/// Captures roomgate's log lines (both replicas share this process) into a buffer.
fn capture_logs() -> LogBuf {
    let buf: LogBuf = Arc::default();
    let writer = buf.clone();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("roomgate=info"));
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_thread_names(true)
        .with_target(false)
        .with_timer(SinceT0)
        .with_writer(move || LogWriter(writer.clone()))
        .finish();
    let _ = tracing::subscriber::set_global_default(subscriber);
    buf
}

fn log_text(buf: &LogBuf) -> String {
    String::from_utf8_lossy(&buf.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
}

// === the fleet ===

fn directory(redis: &Redis, replica: &str) -> String {
    format!(
        "[directory]\nbackend = \"redis\"\nurl = \"{}\"\nrefresh = \"{REFRESH}\"\ntimeout = \"{TIMEOUT}\"\nreplica_id = \"{replica}\"\n",
        redis.url()
    )
}

fn replica_config(backends: &[(&str, SocketAddr)], redis: &Redis, replica: &str, extra: &str) -> String {
    config(backends, ROUTES, &format!("{}{extra}", directory(redis, replica)))
}

/// A replica on a runtime of its own (one worker thread, named `replica-{name}`): every task it
/// spawns runs there, so its log lines carry its name. The runtime is shut down when this drops.
struct Replica {
    name: &'static str,
    proxy: Proxy,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Replica {
    async fn start(name: &'static str, config: String) -> Replica {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("replica-{name}"))
            .enable_all()
            .build()
            .unwrap();
        let proxy = runtime.spawn(async move { Proxy::start(&config).await }).await.unwrap();
        Replica { name, proxy, runtime: Some(runtime) }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which an async context (the test's) forbids.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Waits (bounded) for `n` more completed directory syncs of `proxy`.
async fn syncs(proxy: &Proxy, n: u64) {
    let mut rx = proxy.control.syncs();
    let start = *rx.borrow_and_update();
    tokio::time::timeout(LIMIT, rx.wait_for(|s| *s >= start + n)).await.expect("directory sync").unwrap();
}

/// Where each of `rooms` goes when it is new: pure placement, asked of a replica of its own
/// (same backends and placement, no shared directory).
async fn placement_owners(backends: &[TestBackend], rooms: &[String]) -> BTreeMap<String, String> {
    let solo = Proxy::start(&config(&backend_list(backends), ROUTES, "")).await;
    let mut out = BTreeMap::new();
    for room in rooms {
        let (status, h, body) = get(&http_client(), &solo.url(&format!("/room/{room}/")), &[]).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        out.insert(room.clone(), h["x-backend"].to_str().unwrap().to_owned());
    }
    solo.shutdown().await;
    out
}

/// The rooms with an open member on each backend now, by the backends' own records.
fn live_rooms(backends: &[TestBackend]) -> BTreeMap<String, BTreeSet<String>> {
    backends
        .iter()
        .map(|b| {
            let rooms = b.memberships().into_iter().filter(|m| m.left.is_none()).map(|m| m.room).collect();
            (b.id.clone(), rooms)
        })
        .collect()
}

/// The backend holding the most live rooms, and those rooms.
fn busiest(backends: &[TestBackend]) -> (usize, BTreeSet<String>) {
    let live = live_rooms(backends);
    let (i, _) = backends.iter().enumerate().max_by_key(|(i, b)| (live[&b.id].len(), usize::MAX - i)).unwrap();
    (i, live[&backends[i].id].clone())
}

fn count<K: Ord>(map: &mut BTreeMap<K, u64>, key: K) {
    *map.entry(key).or_default() += 1;
}

fn merge<K: Ord + Clone>(into: &mut BTreeMap<K, u64>, from: &BTreeMap<K, u64>) {
    for (k, n) in from {
        *into.entry(k.clone()).or_default() += n;
    }
}

// === the faults ===

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Redis killed, down for `hold`, restarted empty.
    RedisRestart,
    /// The busiest backend hangs for `hold`.
    Hang,
    /// The busiest backend is drained through replica `via` (deadline `DRAIN_DEADLINE`), and
    /// undrained through the other replica `hold` later.
    Drain { via: usize },
}

struct Fault {
    kind: Kind,
    /// From the start of the fault phase.
    at: Duration,
    hold: Duration,
}

/// Two Redis restarts, two hangs, a drain through each replica, in an order and with timings
/// drawn from `rng`. A fault ends before the next one starts.
fn schedule(rng: &mut Rng) -> Vec<Fault> {
    let mut kinds = vec![
        Kind::RedisRestart,
        Kind::RedisRestart,
        Kind::Hang,
        Kind::Hang,
        Kind::Drain { via: 0 },
        Kind::Drain { via: 1 },
    ];
    for i in (1..kinds.len()).rev() {
        let j = rng.range((0, i as u64)) as usize;
        kinds.swap(i, j);
    }
    // Rooms have moved off their placement owners before Redis first restarts.
    if let Some(i) = kinds.iter().position(|k| !matches!(k, Kind::RedisRestart)) {
        kinds.swap(0, i);
    }
    let mut at = rng.ms(GAP_MS);
    kinds
        .into_iter()
        .map(|kind| {
            let gap = rng.ms(GAP_MS);
            let hold = match kind {
                Kind::RedisRestart => rng.ms((50, 400)),
                Kind::Hang => rng.ms((1000, 2000)).min(gap - Duration::from_millis(400)),
                Kind::Drain { .. } => rng.ms((1000, 1400)).min(gap - Duration::from_millis(300)),
            };
            let fault = Fault { kind, at, hold };
            at += gap;
            fault
        })
        .collect()
}

// === members ===

/// How a member's time ended.
#[derive(Debug)]
enum End {
    /// Open at the stop, and its backend answered.
    Open { backend: String },
    /// Without a socket at the stop, for this long.
    Down { for_: Duration, why: String },
    /// It stopped trying before the stop.
    GaveUp(String),
}

struct MemberReport {
    name: String,
    room: String,
    attempts: u64,
    opens: u64,
    voluntary: u64,
    refused: BTreeMap<u16, u64>,
    failed: BTreeMap<String, u64>,
    /// Sockets that ended without the member asking: close code, or how they ended.
    closes: BTreeMap<String, u64>,
    echoes: u64,
    echo_problems: Vec<String>,
    /// Handshake start to open, of the first socket (a new room waits out the rebuild window of
    /// a fresh Redis).
    first_join: Option<Duration>,
    /// Handshake start to open, of each later socket, and when it opened.
    joins: Vec<(Duration, Duration)>,
    /// Socket lost (not on the member's own initiative) to the next one open.
    gaps: Vec<Duration>,
    events: Vec<(Duration, String)>,
    end: End,
}

impl MemberReport {
    fn event(&mut self, what: String) {
        if self.events.len() < 2000 {
            self.events.push((at(Instant::now()), what));
        }
    }
}

enum Opened {
    Ws(Box<Ws>),
    Refused(u16),
    Failed(String),
}

async fn open_ws(url: &str) -> Opened {
    match tokio::time::timeout(LIMIT, tokio_tungstenite::connect_async(url)).await {
        Err(_) => Opened::Failed("handshake timed out".into()),
        Ok(Err(tungstenite::Error::Http(resp))) => Opened::Refused(resp.status().as_u16()),
        Ok(Err(e)) => Opened::Failed(e.to_string().chars().take(60).collect()),
        Ok(Ok((ws, _))) => Opened::Ws(Box::new(ws)),
    }
}

/// Reads to the end of the stream (after a close), bounded.
async fn drain_stream(ws: &mut Ws) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Some(Ok(_))) = tokio::time::timeout_at(deadline, ws.next()).await {}
}

/// Closes on the member's own initiative (1000, as a page that navigates away) and waits for the
/// end.
async fn leave(ws: &mut Ws) {
    let frame = CloseFrame { code: CloseCode::Normal, reason: "".into() };
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(Some(frame))).await;
    drain_stream(ws).await;
}

enum SessionEnd {
    Stopped(End),
    Left,
    Lost(String),
}

/// One socket's life: messages and their echoes, until the member leaves, loses it, or stops.
async fn session(ws: &mut Ws, rng: &mut Rng, r: &mut MemberReport, stop: &CancellationToken) -> SessionEnd {
    use tokio::time::{Instant as TInstant, sleep_until};
    let opened = TInstant::now();
    let leave_at = opened + rng.ms(LIFETIME_MS);
    let mut next_send = opened;
    let mut pending: Option<(String, TInstant)> = None;
    let mut backend: Option<String> = None;
    let mut seq = 0u64;
    for _ in 0..MAX_STEPS {
        let echo_due = pending.as_ref().map_or(opened + LIMIT * 100, |(_, sent)| *sent + ECHO_LIMIT);
        tokio::select! {
            () = stop.cancelled() => return SessionEnd::Stopped(finish(ws, r, pending.is_some()).await),
            () = sleep_until(leave_at), if pending.is_none() => {
                leave(ws).await;
                r.voluntary += 1;
                r.event(format!("left {}", backend.as_deref().unwrap_or("?")));
                return SessionEnd::Left;
            }
            () = sleep_until(next_send), if pending.is_none() => {
                let text = if backend.is_none() { "id".to_owned() } else { seq += 1; format!("m{seq}") };
                if let Err(e) = ws.send(Message::text(text.clone())).await {
                    count(&mut r.closes, "send failed".to_owned());
                    return SessionEnd::Lost(format!("send failed: {e}"));
                }
                pending = Some((text, TInstant::now()));
            }
            () = sleep_until(echo_due), if pending.is_some() => {
                let (sent, _) = pending.take().unwrap();
                r.echo_problems.push(format!("{} t+{}: no answer to {sent:?} in {ECHO_LIMIT:?} (on {backend:?})", r.name, ms(at(Instant::now()))));
                leave(ws).await;
                return SessionEnd::Lost("no echo".into());
            }
            msg = ws.next() => match msg {
                Some(Ok(Message::Text(t))) => {
                    let t = t.as_str();
                    match pending.take() {
                        Some((sent, _)) if sent == "id" && t.starts_with("id:") => {
                            let id = t[3..].to_owned();
                            r.event(format!("on {id}"));
                            backend = Some(id);
                        }
                        Some((sent, _)) if sent == t => r.echoes += 1,
                        other => r.echo_problems.push(format!("{}: sent {other:?}, got {t:?}", r.name)),
                    }
                    next_send = TInstant::now() + rng.ms(MESSAGE_MS);
                }
                Some(Ok(Message::Close(frame))) => {
                    let code = frame.map_or("no code".to_owned(), |f| u16::from(f.code).to_string());
                    drain_stream(ws).await;
                    r.event(format!("closed {code} on {}", backend.as_deref().unwrap_or("?")));
                    count(&mut r.closes, code.clone());
                    return SessionEnd::Lost(format!("closed {code}"));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    let e: String = e.to_string().chars().take(60).collect();
                    r.event(format!("error {e}"));
                    count(&mut r.closes, format!("error: {e}"));
                    return SessionEnd::Lost(e);
                }
                None => {
                    r.event("ended without a close".into());
                    count(&mut r.closes, "ended without a close".into());
                    return SessionEnd::Lost("ended".into());
                }
            },
        }
    }
    leave(ws).await;
    SessionEnd::Lost("too many steps".into())
}

/// At the stop: the backend behind the open socket answers `id`, then the member leaves.
async fn finish(ws: &mut Ws, r: &mut MemberReport, echo_pending: bool) -> End {
    let mut skip = usize::from(echo_pending);
    if let Err(e) = ws.send(Message::text("id")).await {
        return End::Down { for_: Duration::ZERO, why: format!("send failed at the stop: {e}") };
    }
    let deadline = tokio::time::Instant::now() + ECHO_LIMIT;
    let end = loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => break End::Down { for_: Duration::ZERO, why: "no answer at the stop".into() },
            Ok(Some(Ok(Message::Text(t)))) if skip > 0 && !t.as_str().starts_with("id:") => {
                skip -= 1;
                r.echoes += 1;
            }
            Ok(Some(Ok(Message::Text(t)))) => match t.as_str().strip_prefix("id:") {
                Some(id) => break End::Open { backend: id.to_owned() },
                None => break End::Down { for_: Duration::ZERO, why: format!("unexpected {t:?} at the stop") },
            },
            Ok(Some(Ok(Message::Close(f)))) => {
                let code = f.map(|f| u16::from(f.code));
                break End::Down { for_: Duration::ZERO, why: format!("closed {code:?} at the stop") };
            }
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => break End::Down { for_: Duration::ZERO, why: format!("error at the stop: {e}") },
            Ok(None) => break End::Down { for_: Duration::ZERO, why: "ended at the stop".into() },
        }
    };
    leave(ws).await;
    end
}

/// A member of `room` through one replica: from `go` on, holds a socket, and rejoins through the
/// same replica whenever it loses it (or leaves on its own), until `stop`.
async fn member(
    name: String,
    room: String,
    url: String,
    seed: u64,
    go: CancellationToken,
    stop: CancellationToken,
) -> MemberReport {
    let mut rng = Rng::new(seed);
    let mut r = MemberReport {
        name,
        room,
        attempts: 0,
        opens: 0,
        voluntary: 0,
        refused: BTreeMap::new(),
        failed: BTreeMap::new(),
        closes: BTreeMap::new(),
        echoes: 0,
        echo_problems: Vec::new(),
        first_join: None,
        joins: Vec::new(),
        gaps: Vec::new(),
        events: Vec::new(),
        end: End::GaveUp("never ran".into()),
    };
    tokio::select! {
        () = go.cancelled() => {}
        () = stop.cancelled() => {}
    }
    let mut lost = Instant::now();
    let mut involuntary = false;
    let mut why = "not joined yet".to_owned();
    for _ in 0..MAX_SOCKETS {
        let mut socket = None;
        for _ in 0..MAX_ATTEMPTS {
            if stop.is_cancelled() {
                break;
            }
            r.attempts += 1;
            let start = Instant::now();
            let opened = tokio::select! {
                o = open_ws(&url) => o,
                () = stop.cancelled() => break,
            };
            match opened {
                Opened::Ws(ws) => {
                    match r.opens {
                        0 => r.first_join = Some(start.elapsed()),
                        _ => r.joins.push((at(Instant::now()), start.elapsed())),
                    }
                    socket = Some(ws);
                    break;
                }
                Opened::Refused(status) => {
                    count(&mut r.refused, status);
                    r.event(format!("refused {status} after {:?}", start.elapsed()));
                    why = format!("refused {status}");
                }
                Opened::Failed(e) => {
                    r.event(format!("handshake failed after {:?}: {e}", start.elapsed()));
                    count(&mut r.failed, e.clone());
                    why = e;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(rng.ms(BACKOFF_MS)) => {}
                () = stop.cancelled() => break,
            }
        }
        let Some(mut ws) = socket else {
            r.end = if stop.is_cancelled() {
                End::Down { for_: lost.elapsed(), why }
            } else {
                End::GaveUp(format!("{MAX_ATTEMPTS} attempts without a socket; last: {why}"))
            };
            return r;
        };
        r.opens += 1;
        if involuntary {
            r.gaps.push(lost.elapsed());
        }
        match session(&mut ws, &mut rng, &mut r, &stop).await {
            SessionEnd::Stopped(end) => {
                r.end = end;
                return r;
            }
            SessionEnd::Left => {
                involuntary = false;
                why = "left on its own".into();
            }
            SessionEnd::Lost(e) => {
                involuntary = true;
                why = e;
            }
        }
        lost = Instant::now();
        tokio::select! {
            () = tokio::time::sleep(rng.ms(BACKOFF_MS)) => {}
            () = stop.cancelled() => {}
        }
    }
    r.end = End::GaveUp(format!("{MAX_SOCKETS} sockets used"));
    r
}

/// Page loads (`GET /room/{room}/`) through A and B in turn until `stop`: answers by status.
async fn page_loads(
    bases: [String; 2],
    rooms: Vec<String>,
    seed: u64,
    stop: CancellationToken,
) -> BTreeMap<String, u64> {
    let mut rng = Rng::new(seed);
    let client = http_client();
    let mut out = BTreeMap::new();
    for i in 0..5000usize {
        if stop.is_cancelled() {
            break;
        }
        let room = &rooms[rng.range((0, rooms.len() as u64 - 1)) as usize];
        let url = format!("{}/room/{room}/", bases[i % 2]);
        let req = Request::get(url).body(Full::<Bytes>::default()).unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(3), async {
            let resp = client.request(req).await?;
            let status = resp.status();
            resp.into_body().collect().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(status)
        })
        .await;
        let key = match answer {
            Ok(Ok(status)) => status.as_u16().to_string(),
            Ok(Err(e)) => format!("error: {}", e.to_string().chars().take(40).collect::<String>()),
            Err(_) => "no answer in 3s".to_owned(),
        };
        count(&mut out, key);
        tokio::select! {
            () = tokio::time::sleep(rng.ms((100, 300))) => {}
            () = stop.cancelled() => break,
        }
    }
    out
}

// === the test ===

/// Two replicas (A passive-only, B with active checks, their maintenance ticks out of step), four
/// backends, twelve rooms. Eight rooms have two or three members alternating between A and B;
/// four are one-sided (two members through one replica), and their first visitor through the
/// other replica, which has no record of the room, arrives right after a Redis restart. Members
/// leave and rejoin on their own, and rejoin whenever they lose their socket; page loads are mixed
/// in. Faults on a seeded schedule: Redis restarted empty (twice), the busiest backend hung
/// (twice), the busiest backend drained with a short deadline through A and through B. The
/// backends' own records must show no room on two backends at once, both replicas' split counters
/// must stay 0, and every member must be back on a socket at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_through_two_replicas_keeps_every_room_on_one_backend() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let start = t0();
    let logs = capture_logs();
    let seed = seed();
    let mut rng = Rng::new(seed);
    let plan = schedule(&mut rng);

    let mut redis = Redis::start().await;
    let backends = backends(4).await;
    let rooms: Vec<String> = (0..ROOMS).map(|i| format!("churn{i:02}")).collect();
    let placement = placement_owners(&backends, &rooms).await;
    let list = backend_list(&backends);
    let a = Replica::start("A", replica_config(&list, &redis, "A", NO_SPREAD)).await;
    // Independent pods' maintenance ticks (250ms, which act on drain deadlines) are out of
    // phase; this pause sets the phase (as in fleet_owner case 3); it waits for nothing.
    tokio::time::sleep(Duration::from_millis(125)).await;
    let b = Replica::start("B", replica_config(&list, &redis, "B", &format!("{NO_SPREAD}{HEALTH}"))).await;
    syncs(&a.proxy, 1).await;
    syncs(&b.proxy, 1).await;
    let replicas = [&a, &b];

    // The members. A mixed room has 2 or 3, alternating between the replicas. A one-sided room
    // has 2 through its home replica (A or B in turn), and a visitor through the other one, who
    // waits for its `go`.
    let stop = CancellationToken::new();
    let started = CancellationToken::new();
    started.cancel();
    let mut members = Vec::new();
    // One-sided room -> (home replica, visiting replica, the visitor's go).
    let mut visitors: BTreeMap<String, (usize, usize, CancellationToken)> = BTreeMap::new();
    let mut n = 0usize;
    for (i, room) in rooms.iter().enumerate() {
        let one_sided = i >= ROOMS - ONE_SIDED;
        let home = i % 2;
        let mut joiners: Vec<(usize, CancellationToken)> = Vec::new();
        if one_sided {
            let go = CancellationToken::new();
            joiners.extend([(home, started.clone()), (home, started.clone()), (1 - home, go.clone())]);
            visitors.insert(room.clone(), (home, 1 - home, go));
        } else {
            for _ in 0..rng.range((2, 3)) {
                joiners.push((n % 2, started.clone()));
                n += 1;
            }
        }
        for (j, (via, go)) in joiners.into_iter().enumerate() {
            let replica = replicas[via];
            let url = replica.proxy.ws_url(&format!("/ws/live/?room={room}"));
            let visitor = if one_sided && j == 2 { "visitor" } else { "" };
            let name = format!("{room}/{}{j}{visitor}", replica.name);
            let member_seed = seed ^ (((i * 4 + j) as u64 + 1) << 20);
            members.push(tokio::spawn(member(name, room.clone(), url, member_seed, go, stop.clone())));
        }
    }
    // Page loads of the mixed rooms only: a page load through the other replica would make a
    // one-sided room known there.
    let mixed: Vec<String> = rooms[..ROOMS - ONE_SIDED].to_vec();
    let pages = tokio::spawn(page_loads([a.proxy.url(""), b.proxy.url("")], mixed, seed.rotate_left(17), stop.clone()));
    // Every room live before the faults begin (the first joins wait out the rebuild window of a
    // fresh Redis).
    let all_live = tokio::time::timeout(LIMIT, async {
        loop {
            let live: BTreeSet<String> = live_rooms(&backends).into_values().flatten().collect();
            if live.len() == ROOMS {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(all_live.is_ok(), "not every room live within {LIMIT:?}: {:?}", live_rooms(&backends));
    let faults_start = Instant::now();

    // The faults, on the schedule.
    let mut done: Vec<String> = Vec::new();
    let mut begins: Vec<Duration> = Vec::new();
    let mut unhit: Vec<String> = Vec::new();
    for f in &plan {
        tokio::time::sleep_until((faults_start + f.at).into()).await;
        let begun = at(Instant::now());
        begins.push(begun);
        match f.kind {
            Kind::RedisRestart => {
                let live = live_rooms(&backends);
                let total: usize = live.values().map(BTreeSet::len).sum();
                let placement = &placement;
                let moved: Vec<&String> =
                    live.iter().flat_map(|(b, rs)| rs.iter().filter(move |r| placement[*r] != *b)).collect();
                // Visitors for one-sided rooms not visited yet, those off their placement owner
                // first, one through each replica if possible.
                let mut unvisited: Vec<(&String, &(usize, usize, CancellationToken))> =
                    visitors.iter().filter(|(_, (_, _, go))| !go.is_cancelled()).collect();
                unvisited.sort_by_key(|(room, (_, via, _))| (!moved.contains(room), *via));
                let mut picked: Vec<(&String, usize, &CancellationToken)> = Vec::new();
                for (room, (_, via, go)) in &unvisited {
                    let fresh_via = picked.iter().all(|(_, v, _)| v != via);
                    if picked.len() < VISITS_PER_RESTART && (fresh_via || unvisited.len() <= VISITS_PER_RESTART) {
                        picked.push((room, *via, go));
                    }
                }
                let mut visits = Vec::new();
                for (room, via, _) in &picked {
                    let on: Vec<&String> = live.iter().filter(|(_, rs)| rs.contains(*room)).map(|(b, _)| b).collect();
                    let (status, _, body) =
                        get(&http_client(), &replicas[*via].proxy.admin_url(&format!("/admin/rooms/{room}")), &[])
                            .await;
                    // Its own record of the room, if any, is at the top; `fleet` is Redis's.
                    let known = status == StatusCode::OK
                        && serde_json::from_str::<serde_json::Value>(&body).is_ok_and(|v| v.get("backend").is_some());
                    visits.push(format!(
                        "{room} through {} (live on {on:?}, placement {}, {} there)",
                        replicas[*via].name,
                        placement[*room],
                        if known { "known" } else { "unknown" }
                    ));
                }
                redis.stop().await;
                tokio::time::sleep(f.hold).await;
                redis.restart().await;
                // At once, as in issue 13's first case.
                for (_, _, go) in &picked {
                    go.cancel();
                }
                done.push(format!(
                    "t+{} Redis restarted empty (down {:?}; {total} live rooms, {} off their placement owner; first \
                     visitors: {})",
                    ms(begun),
                    f.hold,
                    moved.len(),
                    visits.join(", ")
                ));
            }
            Kind::Hang => {
                let (i, hit) = busiest(&backends);
                let target = &backends[i];
                target.hang();
                tokio::time::sleep(f.hold).await;
                target.release();
                done.push(format!(
                    "t+{} {} hung for {:?} ({} live rooms: {hit:?})",
                    ms(begun),
                    target.id,
                    f.hold,
                    hit.len()
                ));
                if hit.is_empty() {
                    unhit.push(format!("the hang of {} at t+{}", target.id, ms(begun)));
                }
            }
            Kind::Drain { via } => {
                let (i, hit) = busiest(&backends);
                let id = backends[i].id.clone();
                let (by, other) = (replicas[via], replicas[1 - via]);
                let body = format!(r#"{{"deadline":"{DRAIN_DEADLINE}"}}"#);
                let (status, answer) = admin_post(&by.proxy, &format!("/admin/backends/{id}/drain"), &body).await;
                assert_eq!(status, StatusCode::OK, "drain of {id} through {}: {answer}", by.name);
                tokio::time::sleep(f.hold).await;
                let (status, answer) = admin_post(&other.proxy, &format!("/admin/backends/{id}/undrain"), "").await;
                assert_eq!(status, StatusCode::OK, "undrain of {id} through {}: {answer}", other.name);
                let left: usize = live_rooms(&backends)[&id].len();
                done.push(format!(
                    "t+{} {id} drained through {} (deadline {DRAIN_DEADLINE}; {} live rooms: {hit:?}), undrained through {} {:?} later ({left} live rooms there then)",
                    ms(begun),
                    by.name,
                    hit.len(),
                    other.name,
                    f.hold
                ));
                if hit.is_empty() {
                    unhit.push(format!("the drain of {id} at t+{}", ms(begun)));
                }
            }
        }
    }
    // Visitors no restart called for join now; the members keep churning a while after the last
    // fault, then stop.
    for (_, _, go) in visitors.values() {
        go.cancel();
    }
    let faults_end = at(Instant::now());
    tokio::time::sleep(SETTLE).await;
    let stopped = at(Instant::now());
    stop.cancel();
    let mut reports = Vec::new();
    for m in members {
        reports.push(tokio::time::timeout(LIMIT, m).await.expect("a member stops").unwrap());
    }
    let pages = tokio::time::timeout(LIMIT, pages).await.expect("the page loads stop").unwrap();
    // Every member has left: the backends' sockets end (bounded); then the fleet settles.
    let closed_everywhere = tokio::time::timeout(LIMIT, async {
        loop {
            if live_rooms(&backends).values().all(BTreeSet::is_empty) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .is_ok();
    syncs(&a.proxy, 2).await;
    syncs(&b.proxy, 2).await;

    // The verdicts.
    let all: Vec<&TestBackend> = backends.iter().collect();
    let overlaps = judge::overlaps(&all);
    let longest = judge::longest_overlap(&all);
    let judge_origin = backends.iter().flat_map(|b| b.memberships()).map(|m| m.joined).min().map(at);
    let mut problems: Vec<String> = overlaps.iter().map(|o| format!("judge: {o}")).collect();
    let mut counters = Vec::new();
    for r in replicas {
        let status = admin_get(&r.proxy, "/admin/status").await;
        let split = status["split_rooms"].as_u64();
        let fleet_split = status["directory"]["fleet_split_rooms"].as_u64();
        let (_, _, metrics) = get(&http_client(), &r.proxy.admin_url("/metrics"), &[]).await;
        let metric = |name: &str| {
            metrics.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_owned()).unwrap_or("absent".into())
        };
        counters.push(format!(
            "{}: split_rooms {split:?} fleet_split_rooms {fleet_split:?} (metrics: roomgate_split_rooms_total {}, \
             roomgate_fleet_split_rooms_total {}; directory calls {})",
            r.name,
            metric("roomgate_split_rooms_total "),
            metric("roomgate_fleet_split_rooms_total "),
            status["directory"]["calls"]
        ));
        if split != Some(0) || fleet_split != Some(0) {
            problems.push(format!("{}: split_rooms {split:?}, fleet_split_rooms {fleet_split:?} (must be 0)", r.name));
        }
    }
    problems.extend(unhit.iter().map(|u| format!("{u} hit no live room")));
    if !closed_everywhere {
        problems.push(format!("backend sockets still open after every member left: {:?}", live_rooms(&backends)));
    }

    let (mut attempts, mut opens, mut voluntary, mut echoes) = (0, 0, 0, 0);
    let (mut refused, mut failed, mut closes) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    let (mut first_joins, mut joins, mut gaps) = (Vec::new(), Vec::new(), Vec::new());
    let mut ends_on: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for r in &reports {
        attempts += r.attempts;
        opens += r.opens;
        voluntary += r.voluntary;
        echoes += r.echoes;
        merge(&mut refused, &r.refused);
        merge(&mut failed, &r.failed);
        merge(&mut closes, &r.closes);
        first_joins.extend(r.first_join);
        joins.extend(r.joins.iter().map(|(_, wait)| *wait));
        gaps.extend(&r.gaps);
        problems.extend(r.echo_problems.iter().map(|p| format!("echo: {p}")));
        match &r.end {
            End::Open { backend } => {
                ends_on.entry(&r.room).or_default().insert(backend);
            }
            End::Down { for_, why } if *for_ <= DOWN_AT_END => {
                println!("note: {} was without a socket at the stop for {for_:?} ({why})", r.name);
            }
            End::Down { for_, why } => {
                problems.push(format!("liveness: {} without a socket for {for_:?} at the stop ({why})", r.name))
            }
            End::GaveUp(why) => problems.push(format!("liveness: {} gave up: {why}", r.name)),
        }
    }
    println!(
        "fleet churn, seed {seed:#x}: {} members in {ROOMS} rooms through A and B; faults from t+{} to t+{}, \
         members stopped at t+{}, test took {:?}",
        reports.len(),
        ms(at(faults_start)),
        ms(faults_end),
        ms(stopped),
        start.elapsed()
    );
    // The 1012s each fault led to: those from its start to the next one's.
    let moved_at: Vec<Duration> = reports
        .iter()
        .flat_map(|r| r.events.iter().filter(|(_, e)| e.starts_with("closed 1012")).map(|(t, _)| *t))
        .collect();
    let windows: Vec<String> = done
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let (from, to) = (begins[i], begins.get(i + 1).copied().unwrap_or(stopped));
            let n = moved_at.iter().filter(|t| (from..to).contains(*t)).count();
            let waits: Vec<Duration> = reports
                .iter()
                .flat_map(|r| r.joins.iter().filter(|(t, _)| (from..to).contains(t)).map(|(_, wait)| *wait))
                .collect();
            format!("{d}: until the next fault, {n} members closed 1012, rejoin waits {}", summary(&waits))
        })
        .collect();
    println!("faults:\n  {}", windows.join("\n  "));
    println!(
        "members: {opens} connections made ({} reconnects: {voluntary} on their own, the rest after a close or \
         error) in {attempts} handshakes; echoes {echoes}; closes by code {closes:?}; refused by status \
         {refused:?}; handshake failures {failed:?}",
        opens - reports.len() as u64
    );
    println!("first joins (fresh Redis: rebuild window): {}", summary(&first_joins));
    println!("join waits (handshake to open, rejoins): {}", summary(&joins));
    println!("reconnect gaps (socket lost to the next open, backoff included): {} ", summary(&gaps));
    let firsts: Vec<String> = reports
        .iter()
        .filter(|r| r.name.ends_with("visitor"))
        .map(|r| {
            let first = r.events.iter().find(|(_, e)| e.starts_with("on ")).map(|(t, e)| format!("t+{} {e}", ms(*t)));
            format!("{} joined in {:?}, {}", r.name, r.first_join, first.unwrap_or("never on a backend".into()))
        })
        .collect();
    println!("visitors' first joins: {}", firsts.join("; "));
    println!("page loads (mixed rooms) by answer: {pages:?}");
    println!("rooms at the stop: {ends_on:?}");
    println!("counters: {}", counters.join("; "));
    println!(
        "judge: {} overlaps, longest {longest:?} (judge times are from t+{})",
        overlaps.len(),
        judge_origin.map_or("?".into(), ms)
    );

    let text = log_text(&logs);
    if !problems.is_empty() || std::env::var_os("CHURN_LOG").is_some() {
        // What the clients saw of the rooms in trouble (all rooms when asked for the log).
        let rooms_in_trouble: Vec<&String> =
            rooms.iter().filter(|r| problems.iter().any(|p| p.contains(r.as_str()))).collect();
        for r in reports.iter().filter(|r| rooms_in_trouble.contains(&&r.room) || problems.is_empty()) {
            let events: Vec<String> = r.events.iter().map(|(t, e)| format!("t+{} {e}", ms(*t))).collect();
            println!("member {}: {}", r.name, events.join("; "));
        }
        println!("roomgate's log ({} lines):\n{text}", text.lines().count());
    } else {
        println!("roomgate's log: {} lines (CHURN_LOG=1 prints them)", text.lines().count());
    }
    assert!(problems.is_empty(), "seed {seed:#x}: {} problems:\n{}", problems.len(), problems.join("\n"));
}
