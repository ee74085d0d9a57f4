//! The Redis directory's cost, measured with synthetic fleets (SCALE.md): N replica directories
//! in one process share one private `redis-server` and hold R live rooms, each room held by
//! `--holders` replicas. Each replica syncs every `--refresh`, as `roomgate run` does. Over the
//! measured window, `--churn` of the rooms per second change (a holder's last socket leaves and
//! another room gets its first socket through some replica) and `--moves` of them per second
//! move to another backend. Reads Redis's own counters (`INFO stats`) before and after: commands
//! per second (the calls scripts make included), bytes per second, and the placement latency of
//! every join in the window (p50, p99).
//!
//! ```sh
//! cargo bench --bench directory-cost -- --rooms 10000 --replicas 2 --refresh 2s --duration 20s
//! cargo bench --bench directory-cost -- --rooms 20000 --replicas 4 --churn 0.01 --moves 0.001
//! ```
//!
//! Needs `redis-server` (apt-get install redis-server), or `--redis URL` for one already running
//! (its counters are read as a whole: give it nothing else to do). `--cluster` runs the same
//! fleet on a private Redis Cluster of three primaries (`redis-cli` from the same package), and
//! sums the counters of the three.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use roomgate::directory::{MemoryDirectory, RedisDirectory, RedisSettings, ReplicaState, RoomDirectory, Use};
use tokio::sync::Mutex;

#[path = "../tests/common/redis_cluster.rs"]
#[allow(dead_code)]
mod redis_cluster;

const USAGE: &str = "usage: cargo bench --bench directory-cost -- [--rooms 10000] [--replicas 2] [--holders 1]
        [--backends 10] [--churn 0] [--moves 0] [--refresh 2s] [--duration 20s] [--redis URL | --cluster]
        [--seed 1]
  --churn F   rooms changing per second, as a fraction of --rooms (0.01: 1% a second)
  --moves F   rooms moving to another backend per second, as a fraction of --rooms";

struct Options {
    rooms: usize,
    replicas: usize,
    holders: usize,
    backends: usize,
    churn: f64,
    moves: f64,
    refresh: Duration,
    duration: Duration,
    redis: Option<String>,
    cluster: bool,
    seed: u64,
}

fn duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.find(|c: char| !c.is_ascii_digit() && c != '.').map_or((s, "s"), |i| s.split_at(i));
    let n: f64 = n.parse().map_err(|_| format!("bad duration {s:?}"))?;
    match unit {
        "ms" => Ok(Duration::from_secs_f64(n / 1000.0)),
        "s" => Ok(Duration::from_secs_f64(n)),
        "m" => Ok(Duration::from_secs_f64(n * 60.0)),
        _ => Err(format!("bad duration {s:?} (ms, s, m)")),
    }
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        rooms: 10_000,
        replicas: 2,
        holders: 1,
        backends: 10,
        churn: 0.0,
        moves: 0.0,
        refresh: Duration::from_secs(2),
        duration: Duration::from_secs(20),
        redis: None,
        cluster: false,
        seed: 1,
    };
    // `cargo bench` passes `--bench`; anything else is ours.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        let count = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        let rate = |v: String| v.parse::<f64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--rooms" => o.rooms = count(value()?)?,
            "--replicas" => o.replicas = count(value()?)?,
            "--holders" => o.holders = count(value()?)?,
            "--backends" => o.backends = count(value()?)?,
            "--churn" => o.churn = rate(value()?)?,
            "--moves" => o.moves = rate(value()?)?,
            "--refresh" => o.refresh = duration(&value()?)?,
            "--duration" => o.duration = duration(&value()?)?,
            "--redis" => o.redis = Some(value()?),
            "--cluster" => o.cluster = true,
            "--seed" => o.seed = count(value()?)? as u64,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if o.rooms == 0 || o.replicas == 0 || o.backends < 2 || o.holders == 0 || o.holders > o.replicas {
        return Err(format!("need rooms >= 1, replicas >= 1, backends >= 2, 1 <= holders <= replicas\n{USAGE}"));
    }
    Ok(o)
}

/// A small deterministic generator (xorshift), so that a run repeats with its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A private redis-server on a unix socket in a temporary directory, killed on drop.
struct PrivateRedis {
    _dir: tempfile::TempDir,
    _child: tokio::process::Child,
    url: String,
}

async fn private_redis() -> PrivateRedis {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("redis.sock");
    let mut cmd = tokio::process::Command::new("redis-server");
    cmd.args(["--port", "0", "--save", "", "--appendonly", "no", "--unixsocket"])
        .arg(&socket)
        .arg("--dir")
        .arg(dir.path());
    let child =
        redis_cluster::spawn_ready(&mut cmd, "redis-server (apt-get install redis-server, or pass --redis URL)").await;
    PrivateRedis { url: format!("redis+unix://{}", socket.display()), _dir: dir, _child: child }
}

/// Marks the store as one the fleet has used already: no rebuild window holds the set-up's
/// placements.
async fn mark_in_use(conn: &mut impl redis::aio::ConnectionLike) {
    for key in roomgate::directory::redis_bucket_keys("roomgate:", "gen") {
        let _: () = redis::cmd("SET").arg(key).arg("1").query_async(conn).await.unwrap();
    }
}

/// Redis's own counters of one node: commands processed (the calls scripts make included), bytes
/// in, bytes out, CPU seconds (user and system).
#[derive(Clone, Copy, Default)]
struct Counters {
    commands: u64,
    bytes_in: u64,
    bytes_out: u64,
    cpu: f64,
}

async fn counters(conns: &mut [redis::aio::MultiplexedConnection]) -> Vec<Counters> {
    let mut out = Vec::new();
    for conn in conns {
        let info: String = redis::cmd("INFO").arg("all").query_async(conn).await.unwrap();
        let field = |name: &str| -> f64 {
            info.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0)
        };
        out.push(Counters {
            commands: field("total_commands_processed:") as u64,
            bytes_in: field("total_net_input_bytes:") as u64,
            bytes_out: field("total_net_output_bytes:") as u64,
            cpu: field("used_cpu_user:") + field("used_cpu_sys:"),
        });
    }
    out
}

/// Round trips the replicas' directories made (each pipeline counted as its 5 commands).
fn sent(replicas: &[Arc<Replica>]) -> u64 {
    replicas
        .iter()
        .map(|r| {
            let c = &serde_json::to_value(r.dir.status()).unwrap()["calls"];
            let n = |op: &str| c[op].as_u64().unwrap_or(0);
            n("place")
                + n("reassign")
                + n("refresh")
                + n("heartbeat")
                + n("release")
                + n("confirm")
                + n("read")
                + 5 * n("sync")
        })
        .sum()
}

/// One replica's directory and what it holds: room index -> its owner.
struct Replica {
    dir: Arc<RedisDirectory>,
    held: Mutex<std::collections::HashMap<usize, Arc<str>>>,
}

fn room(i: usize) -> String {
    format!("room-{i}")
}

/// Places room `i` through `r` (a WebSocket's placement, claim included) and counts a socket.
async fn join(r: &Replica, i: usize, backends: &[Arc<str>]) -> Duration {
    let key = room(i);
    let candidate = &backends[i % backends.len()];
    let t = Instant::now();
    let placed = r.dir.place_if_absent(&key, candidate, true).await;
    let took = t.elapsed();
    r.dir.enter(&key, &placed.owner, Use::Socket);
    r.held.lock().await.insert(i, placed.owner);
    took
}

async fn leave(r: &Replica, i: usize) -> bool {
    let Some(owner) = r.held.lock().await.remove(&i) else { return false };
    r.dir.leave(&room(i), &owner, Use::Socket);
    true
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p) as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(64);
        }
    };
    let cluster = if o.cluster { Some(redis_cluster::RedisCluster::start(0).await) } else { None };
    let private = match (&o.redis, &cluster) {
        (None, None) => Some(private_redis().await),
        _ => None,
    };
    let url = match (&o.redis, &cluster) {
        (Some(url), _) => url.clone(),
        (None, Some(c)) => c.url(),
        (None, None) => private.as_ref().unwrap().url.clone(),
    };
    // A connection to each node, for its counters.
    let mut conn = Vec::new();
    match &cluster {
        Some(c) => {
            for port in c.ports() {
                conn.push(redis_cluster::RedisCluster::conn(port).await.unwrap());
            }
        }
        None => conn.push(redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap()),
    }
    // A Redis the fleet has used already: no rebuild window holds the set-up's placements.
    match &cluster {
        Some(_) => {
            let seeds = roomgate::directory::cluster_seeds(&url).unwrap().unwrap();
            let client = redis::cluster::ClusterClient::new(seeds).unwrap();
            mark_in_use(&mut client.get_async_connection().await.unwrap()).await;
        }
        None => mark_in_use(&mut conn[0]).await,
    }
    let backends: Vec<Arc<str>> = (0..o.backends).map(|b| Arc::from(format!("b{b}"))).collect();
    let me = Arc::new(ReplicaState { epoch: 1, backends: backends.clone() });
    let replicas: Vec<Arc<Replica>> = (0..o.replicas)
        .map(|n| {
            let settings = RedisSettings {
                url: url.clone(),
                prefix: "roomgate:".into(),
                replica: format!("r{n}"),
                refresh: o.refresh,
                timeout: Duration::from_millis(500),
                ttl: Duration::from_secs(60) + 2 * o.refresh,
                ttl_unused: Duration::from_secs(5) + 2 * o.refresh,
                password: None,
            };
            let dir = RedisDirectory::new(settings, MemoryDirectory::new()).unwrap();
            Arc::new(Replica { dir, held: Mutex::new(Default::default()) })
        })
        .collect();
    for r in &replicas {
        assert!(r.dir.sync(&me).await.is_some(), "Redis reachable at {url}");
    }

    // The fleet: room i held by replicas i, i+1, ... (`holders` of them), 64 placements at a time.
    let setup = Instant::now();
    futures_util::stream::iter((0..o.rooms).flat_map(|i| (0..o.holders).map(move |h| (i, h))))
        .for_each_concurrent(64, |(i, h)| {
            let (replicas, backends) = (&replicas, &backends);
            async move {
                join(&replicas[(i + h) % o.replicas], i, backends).await;
            }
        })
        .await;
    for r in &replicas {
        r.dir.sync(&me).await.unwrap();
    }
    eprintln!("set up {} live rooms on {} replicas in {:?}", o.rooms, o.replicas, setup.elapsed());

    // Every replica syncs every refresh, its first at a random point of the first period.
    // Cancelled once: a replica in the middle of a sync sees it at its next wait.
    let stop = tokio_util::sync::CancellationToken::new();
    let mut syncs = Vec::new();
    for (n, r) in replicas.iter().enumerate() {
        let (r, me, stop, refresh) = (r.clone(), me.clone(), stop.clone(), o.refresh);
        let offset = refresh.mul_f64((n as f64 + 0.5) / o.replicas as f64);
        syncs.push(tokio::spawn(async move {
            let mut next = tokio::time::Instant::now() + offset;
            let mut done = 0u64;
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(next) => {}
                    () = stop.cancelled() => return done,
                }
                r.dir.sync(&me).await;
                done += 1;
                next += refresh;
            }
        }));
    }

    let before = counters(&mut conn).await;
    let sent_before = sent(&replicas);
    let started = Instant::now();
    let mut rng = Rng(o.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut latencies = Vec::new();
    let (mut changes, mut moves) = (0u64, 0u64);
    let mut next_room = o.rooms;
    // Events at a steady rate, in ticks of 1 ms (those of one tick at once).
    let tick = Duration::from_millis(1);
    let per_tick = |rate: f64| rate * o.rooms as f64 * tick.as_secs_f64();
    let (mut churn_due, mut moves_due) = (0.0f64, 0.0f64);
    let mut at = tokio::time::Instant::now();
    while started.elapsed() < o.duration {
        at += tick;
        tokio::time::sleep_until(at).await;
        churn_due += per_tick(o.churn);
        moves_due += per_tick(o.moves);
        // This tick's changes, all at once (as a proxy's joins and leaves come): each a holder's
        // last socket leaving a room and a new room getting its first socket.
        let mut batch = Vec::new();
        while churn_due >= 1.0 {
            churn_due -= 1.0;
            batch.push((replicas[rng.below(o.replicas)].clone(), replicas[rng.below(o.replicas)].clone(), next_room));
            next_room += 1;
        }
        let done = futures_util::future::join_all(batch.into_iter().map(|(from, to, new)| {
            let backends = &backends;
            async move {
                let victim = { from.held.lock().await.keys().next().copied() };
                if let Some(i) = victim {
                    leave(&from, i).await;
                }
                join(&to, new, backends).await
            }
        }))
        .await;
        changes += done.len() as u64;
        latencies.extend(done);
        while moves_due >= 1.0 {
            moves_due -= 1.0;
            let i = rng.below(o.rooms);
            let Some(from) = replicas[i % o.replicas].held.lock().await.get(&i).cloned() else { continue };
            let to = backends.iter().find(|b| **b != from).unwrap().clone();
            replicas[i % o.replicas].dir.reassign(&room(i), &from, &to).await;
            moves += 1;
        }
    }
    let window = started.elapsed().as_secs_f64();
    let after = counters(&mut conn).await;
    let sent_after = sent(&replicas);
    stop.cancel();
    let mut sync_count = 0;
    for s in syncs {
        sync_count += s.await.unwrap_or(0);
    }

    // Placement latency with no churn measured: probe fresh rooms after the window.
    if latencies.is_empty() {
        for k in 0..2_000 {
            latencies.push(join(&replicas[k % o.replicas], next_room, &backends).await);
            next_room += 1;
        }
    }
    latencies.sort();
    let per_sec = |a: u64, b: u64| (b.saturating_sub(a)) as f64 / window;
    let total = |f: fn(&Counters) -> u64, c: &[Counters]| c.iter().map(f).sum::<u64>();
    let busiest_cpu = before.iter().zip(&after).map(|(b, a)| (a.cpu - b.cpu) / window * 100.0).fold(0.0f64, f64::max);
    let per_node: Vec<String> =
        before.iter().zip(&after).map(|(b, a)| format!("{:.0}", per_sec(b.commands, a.commands))).collect();
    println!(
        "| {} | {} | {} | {} | {:.2}% | {:.2}% | {:?} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1}% | {:?} | {:?} |",
        if o.cluster { "cluster (3 primaries)" } else { "one Redis" },
        o.rooms,
        o.replicas,
        o.holders,
        o.churn * 100.0,
        o.moves * 100.0,
        o.refresh,
        per_sec(sent_before, sent_after),
        per_sec(total(|c| c.commands, &before), total(|c| c.commands, &after)),
        per_sec(total(|c| c.bytes_in, &before), total(|c| c.bytes_in, &after)) / 1024.0,
        per_sec(total(|c| c.bytes_out, &before), total(|c| c.bytes_out, &after)) / 1024.0,
        busiest_cpu,
        pct(&latencies, 0.5),
        pct(&latencies, 0.99),
    );
    eprintln!(
        "window {window:.1} s: {changes} room changes ({:.0}/s), {moves} moves, {sync_count} syncs; server commands/s \
         per node {}; columns: store | rooms | replicas | holders | churn/s | moves/s | refresh | commands sent/s | \
         server commands/s (scripts' calls included) | KiB/s in | KiB/s out | busiest node's CPU | place p50 | \
         place p99",
        changes as f64 / window,
        per_node.join(" / ")
    );
}
