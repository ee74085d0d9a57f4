//! Figures of room hand-off (docs/handoff.md), for BENCHMARKS.md: one room's move with 1 KB and
//! 1 MB states, a drain with hand-off of 1,000 live rooms, a rebalance after a scale-out, and a
//! drain on one replica while members join through another. Each is `#[ignore]`d and prints its
//! figures; it asserts only correctness (every room's log kept, no room on two backends). Run:
//! `cargo test --release --test handoff_figures -- --ignored --nocapture --test-threads 1`.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "handoff_figures/member.rs"]
mod member;
#[path = "handoff_figures/scenario.rs"]
mod scenario;

use std::time::{Duration, Instant};

use http::StatusCode;
use roomgate::control::handoff::{HandoffClient, Outcome, move_with_state};
use tokio_util::sync::CancellationToken;

use common::redis_server::Redis;
use common::rooms::RoomBackend;
use common::{LIMIT, Proxy, admin_post};
use member::{Hello, join, ms, pct, rejoin_after_1012, room_url, say};
use scenario::{Found, LiveRoom, Watched, WatchedRoom, config_for, fleet, found, handoffs_idle, metric, populate};
use scenario::{rooms_placed_on, splits, watch, watch_room};

/// Every scenario's hand-offs end within this.
const HANDOFFS_END: Duration = Duration::from_secs(300);

/// "p50 … p99 … max …" of some durations.
fn quantiles(v: &[Duration]) -> String {
    format!("n={} p50 {} p99 {} max {}", v.len(), ms(pct(v, 0.5)), ms(pct(v, 0.99)), ms(pct(v, 1.0)))
}

/// The lines of roomgate's metrics that start with `prefix`, joined.
async fn metrics_lines(proxy: &Proxy, prefix: &str) -> String {
    let (_, _, text) = common::get(&common::http_client(), &proxy.admin_url("/metrics"), &[]).await;
    text.lines().filter(|l| l.starts_with(prefix)).collect::<Vec<_>>().join("; ")
}

// === 1. one room, back and forth ===

/// Moves one room (one member, 5 messages, `padding` bytes of padding in its exported state)
/// between two backends `moves` times with `move_with_state`; returns each call's time. Before
/// each move the room's owner is drained (no hand-off) so that its placement owner is the other
/// backend; after it, the member reconnects, must find the whole log, and says one more message
/// (as an app's client does on connect: it also keeps the pause of a socket that was just opened
/// out of these timings, see `a_pause_right_after_a_join_stops_the_socket`).
async fn one_room_moves(padding: usize, moves: usize) -> Vec<Duration> {
    let backends = fleet(2).await;
    for b in &backends {
        b.set_state_padding(padding);
    }
    let proxy = Proxy::start(&config_for(&backends, "[handoff]\n")).await;
    let url = room_url(proxy.addr, "solo");
    let (mut ws, mut hello) = join(&url).await.unwrap();
    for i in 0..5 {
        say(&mut ws, &format!("m{i}")).await.unwrap();
    }
    let (gateway, client) = (proxy.control.gateway().clone(), HandoffClient::new(Duration::from_secs(60)));
    let mut took = Vec::with_capacity(moves);
    for i in 0..moves {
        let from: std::sync::Arc<str> = hello.backend.as_str().into();
        proxy.control.drain(&from, Some(Duration::from_secs(3600)), false).unwrap();
        let started = Instant::now();
        // The move ends once the old socket has closed, which needs its client to answer the
        // 1012: the member runs alongside, as a browser would.
        let (g, c, f) = (gateway.clone(), client.clone(), from.clone());
        let moving = tokio::spawn(async move { move_with_state(&g, &c, "solo", &f, false).await });
        let (next_ws, rejoin) = rejoin_after_1012(ws, &url, LIMIT).await.unwrap();
        let outcome = moving.await.unwrap();
        took.push(started.elapsed());
        if outcome != Outcome::Moved {
            let failed = metrics_lines(&proxy, "roomgate_handoff_failures_total").await;
            panic!("move {i} of a {padding}-byte state: {outcome:?} after {:?}; {failed}", took[i]);
        }
        assert_ne!(rejoin.hello.backend, *from, "move {i}: the room left {from}");
        assert_eq!(rejoin.hello.len, 5 + i, "move {i}: the log survived");
        proxy.control.undrain(&from).unwrap();
        (ws, hello) = (next_ws, rejoin.hello);
        say(&mut ws, &format!("m{}", 5 + i)).await.unwrap();
    }
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
async fn figures_one_room_handoff_1kb_and_1mb() {
    for (label, padding, moves) in [("1 KB", 1024, 100), ("1 MB", 1 << 20, 30)] {
        let took = one_room_moves(padding, moves).await;
        println!("FIGURE one room, {label} state, move_with_state: {}", quantiles(&took));
    }
}

/// Pauses (as a hand-off's first step does) the socket of a member that has just joined, 1,000
/// times, and counts the pauses not reported stopped within 500 ms. Found while measuring: a
/// pause that arrives while the tunnel's first poll is still running (the hello it relays has
/// already reached the client) can be missed until the client sends again, and the hand-off
/// then fails on its pause step after `[handoff] timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
async fn a_pause_right_after_a_join_stops_the_socket() {
    pauses_right_after_joins(1000).await;
}

/// The same, smaller, in every test run: it missed 1 to 4 of 1,000 before the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_right_after_a_join_is_never_missed() {
    pauses_right_after_joins(300).await;
}

async fn pauses_right_after_joins(n: usize) {
    let backends = fleet(1).await;
    let proxy = Proxy::start(&config_for(&backends, "")).await;
    let tunnels = proxy.control.gateway().tunnels().clone();
    let mut missed = Vec::new();
    for i in 0..n {
        let room = format!("p{i}");
        let (ws, _) = join(&room_url(proxy.addr, &room)).await.unwrap();
        let paused = tunnels.pause_room(&room, "b0");
        assert_eq!(paused.len(), 1);
        if tokio::time::timeout(Duration::from_millis(500), paused.stopped()).await.is_err() {
            missed.push(i);
        }
        drop((paused, ws));
    }
    println!("FIGURE pause right after a join: {} of {n} not stopped within 500 ms ({missed:?})", missed.len());
    assert!(missed.is_empty(), "pauses missed: {missed:?}");
}

// === 2. drain with hand-off of 1,000 live rooms ===

/// What the members of some moved rooms found: rooms kept, the holds, the failures.
struct Tally {
    rooms: usize,
    kept: usize,
    held: Vec<Duration>,
    failures: Vec<String>,
    sockets: Vec<common::Ws>,
}

fn tally(all: Vec<Found>) -> Tally {
    let mut t = Tally { rooms: all.len(), kept: 0, held: Vec::new(), failures: Vec::new(), sockets: Vec::new() };
    for f in all {
        t.kept += usize::from(f.kept);
        t.held.extend(f.rejoins.iter().map(|r| r.held));
        t.failures.extend(f.failures);
        t.sockets.extend(f.sockets);
    }
    t
}

async fn found_all(rooms: Vec<WatchedRoom>) -> Vec<Found> {
    let mut out = Vec::with_capacity(rooms.len());
    for room in rooms {
        out.push(found(room, false).await);
    }
    out
}

/// 4 backends, `n` rooms of 3 members and 3 messages on b0, then b0 drained with hand-off.
async fn drain_rooms(n: usize, concurrency: usize) {
    let backends = fleet(4).await;
    let proxy = Proxy::start(&config_for(&backends, &format!("[handoff]\nconcurrency = {concurrency}\n"))).await;
    let rooms = rooms_placed_on(&proxy, "b0", n, "d");
    let set_up = Instant::now();
    let live = populate(&proxy, rooms, 3, 3).await;
    assert!(live.iter().all(|r| r.backend == "b0"), "every room lives on b0");
    println!("set-up: {n} rooms, {} members and as many messages in {:?}", 3 * n, set_up.elapsed());
    let watched: Vec<WatchedRoom> = live.into_iter().map(|r| watch_room(r, &proxy)).collect();

    let started = Instant::now();
    let (status, body) = admin_post(&proxy, "/admin/backends/b0/drain", r#"{"handoff": true}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let took = handoffs_idle(&proxy, started, HANDOFFS_END).await;
    let t = tally(found_all(watched).await);
    let back = started.elapsed();
    let split = splits(&backends);
    let moved = metric(&proxy, "roomgate_handoffs_total{outcome=\"moved\"}").await;
    println!(
        "FIGURE drain with hand-off, concurrency {concurrency}: {} rooms, queue empty after {}, every member back by {}, \
         moved {moved}, rooms with state kept {}/{}, splits {}, join held (1012 to hello) {}",
        t.rooms,
        ms(took),
        ms(back),
        t.kept,
        t.rooms,
        split,
        quantiles(&t.held),
    );
    assert!(
        t.failures.is_empty(),
        "{} failures, first: {:?}",
        t.failures.len(),
        &t.failures[..t.failures.len().min(5)]
    );
    assert_eq!(t.kept, n, "every room kept its log");
    assert!(split.overlaps.is_empty(), "splits: {split}; first: {:?}", &split.overlaps[..split.overlaps.len().min(3)]);
    drop(t.sockets);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
async fn figures_drain_with_handoff_of_1000_rooms_concurrency_16() {
    drain_rooms(1000, 16).await;
}

/// The same, smaller, in every test run: before the joins waited for the old sockets to end,
/// the judge found 1 to 3 rooms of 1,000 on two backends for a few milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_with_handoff_of_100_rooms_keeps_every_log_and_no_room_on_two_backends() {
    drain_rooms(100, 16).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
async fn figures_drain_with_handoff_of_1000_rooms_concurrency_64() {
    drain_rooms(1000, 64).await;
}

// === 3. rebalance after a scale-out ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
async fn figures_rebalance_after_adding_a_4th_backend_to_300_rooms() {
    let mut backends = fleet(3).await;
    let proxy = Proxy::start(&config_for(&backends, "[handoff]\n")).await;
    let live = populate(&proxy, (0..300).map(|i| format!("s{i}")).collect(), 1, 1).await;
    backends.push(RoomBackend::start("b3").await);
    proxy.write_config(&config_for(&backends, "[handoff]\n"));
    proxy.control.reload().await.unwrap();
    let snap = proxy.control.gateway().snapshot();
    assert_eq!(snap.backends.len(), 4, "b3 is in the set");
    let placed_on_b3 = |r: &LiveRoom| snap.place_new(r.name.as_bytes()).is_some_and(|b| &*b.id == "b3");
    let (moving, mut staying): (Vec<LiveRoom>, Vec<LiveRoom>) = live.into_iter().partition(placed_on_b3);
    let watched: Vec<WatchedRoom> = moving.into_iter().map(|r| watch_room(r, &proxy)).collect();

    let started = Instant::now();
    let (status, body) = admin_post(&proxy, "/admin/rebalance", "{}").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["moves"], watched.len(), "the rooms whose placement owner is now b3");
    let took = handoffs_idle(&proxy, started, HANDOFFS_END).await;
    let t = tally(found_all(watched).await);
    for room in &mut staying {
        say(&mut room.members[0], "still here").await.unwrap();
        assert_ne!(room.backend, "b3", "{} did not move", room.name);
    }
    let split = splits(&backends);
    println!(
        "FIGURE rebalance after a scale-out 3 -> 4: 300 rooms, moved {} ({:.0}%), queue empty after {}, \
         rooms with state kept {}/{}, splits {}, join held (1012 to hello) {}",
        t.rooms,
        100.0 * t.rooms as f64 / 300.0,
        ms(took),
        t.kept,
        t.rooms,
        split,
        quantiles(&t.held),
    );
    assert!(t.failures.is_empty(), "{:?}", &t.failures[..t.failures.len().min(5)]);
    assert_eq!(t.kept, t.rooms, "every moved room kept its log");
    assert!(split.overlaps.is_empty(), "splits: {split}; first: {:?}", &split.overlaps[..split.overlaps.len().min(3)]);
}

// === 4. two replicas ===

/// Waits (bounded) for `n` more completed directory syncs of `proxy`.
async fn syncs(proxy: &Proxy, n: u64) {
    let mut rx = proxy.control.syncs();
    let start = *rx.borrow_and_update();
    tokio::time::timeout(LIMIT, rx.wait_for(|s| *s >= start + n)).await.expect("directory sync").unwrap();
}

/// A member joining through the other replica while the room may be moving: how long its join
/// waited, whom it reached, and, if it reached the old owner first, its 1012 and reconnect.
struct Joined {
    room: String,
    wait: Duration,
    hello: Hello,
    /// Its socket, when it reached the new owner at once.
    socket: Option<common::Ws>,
    then: Option<Watched>,
}

async fn join_during_move(url: String, room: String, from: String, stop: CancellationToken) -> Result<Joined, String> {
    let started = Instant::now();
    let (ws, hello) = join(&url).await?;
    let wait = started.elapsed();
    if hello.backend != from {
        return Ok(Joined { room, wait, hello, socket: Some(ws), then: None });
    }
    let then = watch(ws, url, stop).await.map_err(|e| e.to_string())?;
    Ok(Joined { room, wait, hello, socket: None, then: Some(then) })
}

fn replica(redis: &Redis, id: &str) -> String {
    format!(
        "[handoff]\n[directory]\nbackend = \"redis\"\nurl = \"{}\"\nrefresh = \"300ms\"\ntimeout = \"250ms\"\nreplica_id = \"{id}\"\n",
        redis.url()
    )
}

/// Two replicas A and B on a private Redis, 3 backends, 100 rooms (1 member through A, 3
/// messages) on b0: A drains b0 with hand-off while a new member of every room joins through B.
async fn two_replicas_setup() -> (Redis, Vec<RoomBackend>, Proxy, Proxy, Vec<WatchedRoom>) {
    let redis = Redis::start().await;
    redis.mark_in_use().await;
    let backends = fleet(3).await;
    let a = Proxy::start(&config_for(&backends, &replica(&redis, "A"))).await;
    let b = Proxy::start(&config_for(&backends, &replica(&redis, "B"))).await;
    syncs(&a, 1).await;
    syncs(&b, 1).await;
    let live = populate(&a, rooms_placed_on(&a, "b0", 100, "t"), 1, 3).await;
    assert!(live.iter().all(|r| r.backend == "b0"), "every room lives on b0");
    let watched = live.into_iter().map(|r| watch_room(r, &a)).collect();
    (redis, backends, a, b, watched)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
async fn figures_two_replicas_drain_on_a_while_members_join_through_b() {
    if !common::require(&[common::Tool::RedisServer]) {
        return;
    }
    let (_redis, backends, a, b, watched) = two_replicas_setup().await;
    let started = Instant::now();
    let (status, body) = admin_post(&a, "/admin/backends/b0/drain", r#"{"handoff": true}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let stops: Vec<CancellationToken> = watched.iter().map(|_| CancellationToken::new()).collect();
    let joiners: Vec<_> = watched
        .iter()
        .zip(&stops)
        .map(|(r, stop)| {
            let url = room_url(b.addr, &r.name);
            tokio::spawn(join_during_move(url, r.name.clone(), "b0".into(), stop.clone()))
        })
        .collect();
    let took = handoffs_idle(&a, started, HANDOFFS_END).await;
    // A room that did not move (its move skipped) stays on b0: its members get no 1012.
    let stayed: Vec<bool> =
        watched.iter().map(|r| a.control.gateway().directory().owner(&r.name).as_deref() == Some("b0")).collect();
    for (stop, _) in stops.iter().zip(&stayed).filter(|(_, stays)| **stays) {
        stop.cancel();
    }
    let mut b_side = Vec::new();
    for joiner in joiners {
        let joined = tokio::time::timeout(HANDOFFS_END, joiner).await.expect("B's member ends").unwrap();
        b_side.push(joined.unwrap_or_else(|e| panic!("a member through B: {e}")));
    }
    let mut a_side = Vec::new();
    for (room, stays) in watched.into_iter().zip(&stayed) {
        a_side.push(found(room, *stays).await);
    }
    report_two_replicas(&backends, took, &stayed, &b_side, a_side);
}

/// Checks and prints scenario 4: every room's log kept wherever its members ended, no split.
fn report_two_replicas(
    backends: &[RoomBackend],
    took: Duration,
    stayed: &[bool],
    b_side: &[Joined],
    a_side: Vec<Found>,
) {
    let mut bad = Vec::new();
    let mut b_rejoins = Vec::new();
    for j in b_side {
        if j.hello.len != 3 {
            bad.push(format!("{}: B's member reached {} with {} of 3", j.room, j.hello.backend, j.hello.len));
        }
        match &j.then {
            Some(Watched::Rejoined(_, r)) if r.hello.backend != "b0" && r.hello.len == 3 => b_rejoins.push(r.held),
            Some(Watched::Rejoined(_, r)) => bad.push(format!("{}: B's member rejoined {:?}", j.room, r.hello)),
            Some(Watched::Failed(e)) => bad.push(format!("{}: B's member: {e}", j.room)),
            Some(Watched::Stayed) | None => {}
        }
    }
    let mut held = Vec::new();
    for (f, stays) in a_side.iter().zip(stayed) {
        held.extend(f.rejoins.iter().map(|r| r.held));
        match stays {
            true if backends[0].log(&f.room).map(|l| l.len()) == Some(3) => {}
            true => bad.push(format!("{}: stayed on b0 without its log", f.room)),
            false if f.kept => {}
            false => bad.push(format!("{}: {:?}", f.room, f.failures)),
        }
    }
    let waits: Vec<Duration> = b_side.iter().map(|j| j.wait).collect();
    let on_b0_first = b_side.iter().filter(|j| j.hello.backend == "b0").count();
    let at_once = b_side.iter().filter(|j| j.socket.is_some()).count();
    let moved = stayed.iter().filter(|s| !**s).count();
    let split = splits(backends);
    println!(
        "FIGURE two replicas: 100 rooms drained with hand-off on A, queue empty after {}, moved {moved}, stayed {}, \
         rooms with state kept {}/100, splits {}; joins through B: wait {}, reached the new owner at once {at_once}, \
         reached b0 before its move {on_b0_first} (then 1012 to hello {}); A's members 1012 to hello {}",
        ms(took),
        100 - moved,
        100 - bad.iter().map(|b| b.split(':').next()).collect::<std::collections::HashSet<_>>().len(),
        split,
        quantiles(&waits),
        quantiles(&b_rejoins),
        quantiles(&held),
    );
    assert!(bad.is_empty(), "{} problems, first: {:?}", bad.len(), &bad[..bad.len().min(5)]);
    assert!(split.overlaps.is_empty(), "splits: {split}; first: {:?}", &split.overlaps[..split.overlaps.len().min(3)]);
}
