//! roomgate-soak: a chaos soak of a roomgate fleet (two replicas on a Redis directory, four
//! backends with hand-off), with an independent judge of every room and every message. Run it
//! through `bench/soak.sh`; RELIABILITY.md says what it checks. `backend` is the subcommand the
//! soak re-executes itself with, one process per test backend.

mod backend;
mod clients;
mod clock;
mod faults;
mod fleet;
mod http;
mod judge;
mod relay;
mod report;
mod resources;
mod rng;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use clients::{Gauges, Phase, Plan};
use fleet::{Fleet, REPLICAS};
use judge::Judge;
use resources::Sample;

const USAGE: &str = "usage: roomgate-soak [--duration 2m] [--seed 1] [--rooms 40] [--members 4]
                     [--roomgate target/release/roomgate] [--redis-server redis-server]
                     [--fault-gap 4s] [--send-every 3s] [--dir DIR]
                     [--faults KIND,...] [--skip-faults KIND,...]
       fault kinds: backend-kill backend-stop reload-remove-add drain-handoff drain rebalance
                    redis-restart redis-flush replica-restart relay-slow relay-reset (all by default)
       roomgate-soak backend --id ID --listen ADDR    (one test backend; used by the soak itself)";

struct Options {
    duration: Duration,
    seed: u64,
    rooms: usize,
    members: usize,
    roomgate: PathBuf,
    redis_server: PathBuf,
    fault_gap: Duration,
    send_every: Duration,
    dir: Option<PathBuf>,
    /// The fault kinds drawn from (`faults::KINDS` by default).
    faults: Vec<&'static str>,
}

/// A comma-separated list of fault kinds, each one of `faults::KINDS`.
fn fault_kinds(list: &str) -> Result<Vec<&'static str>, String> {
    list.split(',')
        .filter(|k| !k.is_empty())
        .map(|k| {
            faults::KINDS
                .iter()
                .find(|known| **known == k)
                .copied()
                .ok_or_else(|| format!("unknown fault kind {k:?} (one of {})", faults::KINDS.join(", ")))
        })
        .collect()
}

fn duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.find(|c: char| !c.is_ascii_digit() && c != '.').map_or((s, "s"), |i| s.split_at(i));
    let n: f64 = n.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("bad duration {s:?} (ms, s, m, h)")),
    };
    Ok(Duration::from_secs_f64(secs))
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        duration: Duration::from_secs(120),
        seed: 1,
        rooms: 40,
        members: 4,
        roomgate: PathBuf::from("target/release/roomgate"),
        redis_server: PathBuf::from("redis-server"),
        fault_gap: Duration::from_secs(4),
        send_every: Duration::from_secs(3),
        dir: None,
        faults: faults::KINDS.to_vec(),
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--duration" => o.duration = duration(&value()?)?,
            "--seed" => o.seed = num(value()?)?,
            "--rooms" => o.rooms = num(value()?)? as usize,
            "--members" => o.members = num(value()?)? as usize,
            "--roomgate" => o.roomgate = value()?.into(),
            "--redis-server" => o.redis_server = value()?.into(),
            "--fault-gap" => o.fault_gap = duration(&value()?)?,
            "--send-every" => o.send_every = duration(&value()?)?,
            "--dir" => o.dir = Some(value()?.into()),
            "--faults" => o.faults = fault_kinds(&value()?)?,
            "--skip-faults" => {
                let skip = fault_kinds(&value()?)?;
                o.faults.retain(|k| !skip.contains(k));
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if o.rooms == 0 || o.members == 0 {
        return Err("--rooms and --members must be at least 1".into());
    }
    Ok(o)
}

fn backend_options(args: &[String]) -> Result<(String, SocketAddr), String> {
    let mut id = None;
    let mut listen = None;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--id" => id = Some(value.clone()),
            "--listen" => listen = Some(value.parse().map_err(|e| format!("--listen: {e}"))?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok((id.ok_or("--id")?, listen.ok_or("--listen")?))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("backend") {
        let result = match backend_options(&args[1..]) {
            Ok((id, listen)) => backend::run(id, listen).await,
            Err(e) => Err(e),
        };
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("backend: {e}");
                ExitCode::from(1)
            }
        };
    }
    let opts = match options(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(64);
        }
    };
    let command = format!("roomgate-soak {}", args.join(" "));
    match soak(opts, command).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::from(2)
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs the whole soak; `Ok(true)` when no invariant was violated.
async fn soak(o: Options, command: String) -> Result<bool, String> {
    let began = Instant::now();
    let origin_us = clock::now_us();
    let dir = o
        .dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("roomgate-soak-{}-{}", o.seed, std::process::id())));
    let judge = Arc::new(Judge::new(fleet::WEBSOCKET_CLOSE.as_micros() as u64, format!("b{}", fleet::BACKENDS)));
    let fleet = Fleet::start(dir.clone(), o.roomgate.clone(), o.redis_server.clone(), judge.clone()).await?;
    let replicas: Vec<SocketAddr> = fleet.replicas.iter().map(|r| r.listen).collect();
    let starts: Vec<Sample> =
        (0..REPLICAS).filter_map(|i| fleet.replica_pid(i).and_then(|p| resources::sample(p, i, 0.0))).collect();
    let fleet = Arc::new(tokio::sync::Mutex::new(fleet));
    eprintln!(
        "soak: seed {}, {:?}, {} rooms x {} members, replicas {replicas:?}, files in {}",
        o.seed,
        o.duration,
        o.rooms,
        o.members,
        dir.display()
    );

    let samples = Arc::new(Mutex::new(Vec::new()));
    let (stop_sampling, stop_rx) = watch::channel(false);
    let sampler =
        tokio::spawn(resources::sampler(fleet.clone(), samples.clone(), Duration::from_secs(3), began, stop_rx));

    let rng = rng::Rng::new(o.seed);
    let plan = Arc::new(Plan {
        rooms: o.rooms,
        members: o.members,
        replicas,
        send_every: o.send_every,
        ramp: (o.duration / 10).min(Duration::from_secs(20)),
    });
    let (phase, _) = watch::channel(Phase::Run);
    let gauges = Arc::new(Gauges::default());
    let mut clients = clients::spawn(plan.clone(), judge.clone(), &rng, &phase, &gauges);

    let until = Instant::now() + o.duration;
    let checker = {
        let judge = judge.clone();
        tokio::spawn(async move {
            // The overlap check all along, 5 s behind, so that backends' lines have arrived.
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let horizon = clock::now_us().saturating_sub(5_000_000);
                judge.check_overlaps(horizon);
                judge.check_moves(horizon);
            }
        })
    };
    // Faults start once the members are in.
    tokio::time::sleep(plan.ramp).await;
    let fault_errors =
        faults::run(fleet.clone(), judge.clone(), rng.fork(7), until, o.fault_gap, o.faults.clone()).await;
    let _ = checker.await;
    let load_end = began.elapsed().as_secs_f64();

    // Everyone back in their room.
    let total = o.rooms * o.members;
    let settle = Instant::now() + Duration::from_secs(30);
    while gauges.connected.load(Ordering::Relaxed) < total && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for ((room, m), since) in judge.out_now() {
        let d = format!("member m{room}.{m} out of room r{room} since {:.1} s", (since - origin_us) as f64 / 1e6);
        judge.violation("back-in-room", Some(&format!("r{room}")), d);
    }
    let connected = gauges.connected.load(Ordering::Relaxed);
    if connected < total {
        eprintln!("soak: {connected} of {total} members connected 30 s after the last fault");
    }
    // Quiet: every message sent on an open socket comes back.
    phase.send_replace(Phase::Quiet);
    let echo = Instant::now() + Duration::from_secs(15);
    while gauges.pending.load(Ordering::SeqCst) > 0 && Instant::now() < echo {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    phase.send_replace(Phase::Leave);
    let left =
        tokio::time::timeout(Duration::from_secs(30), async { while clients.join_next().await.is_some() {} }).await;
    if left.is_err() {
        clients.abort_all();
        eprintln!("soak: some clients did not leave within 30 s");
    }

    // The end state: idle again, within tolerance of the start.
    let ends = settle_resources(&fleet, &starts, began).await;
    // No backend may still hold a member once every client has left (a tunnel roomgate kept).
    let held_until = Instant::now() + Duration::from_secs(10);
    while !judge.held_by_backends().is_empty() && Instant::now() < held_until {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for held in judge.held_by_backends() {
        judge.violation_resources(format!("after the clients left, {held}"));
    }
    let fd_notes: Vec<String> = {
        let f = fleet.lock().await;
        (0..REPLICAS)
            .filter_map(|i| {
                f.replica_pid(i).map(|p| format!("replica {i} descriptors at the end: {}", resources::describe_fds(p)))
            })
            .collect()
    };
    let _ = stop_sampling.send(true);
    let _ = sampler.await;
    tokio::time::sleep(Duration::from_millis(500)).await; // the backends' last lines, read by their tasks
    judge.check_overlaps(clock::now_us());
    judge.check_moves(u64::MAX);
    judge.check_exports();

    let all = lock(&samples).clone();
    let mut res = String::new();
    let bad = report::resources(&mut res, &starts, &ends, &all, load_end);
    if !bad.is_empty() {
        for note in &fd_notes {
            res.push_str(&format!("\n{note}\n"));
        }
    }
    for b in bad {
        judge.violation_resources(b);
    }
    let faults = judge.fault_counts();
    let wall = format!(
        "wall time {:.0} s (load {:.0} s); files in {}",
        began.elapsed().as_secs_f64(),
        load_end,
        dir.display()
    );
    let header = report::Header { command, seed: o.seed, wall };
    let (text, first, ok) = judge.with_results(|r| {
        let ok = r.violations.values().all(|n| *n == 0);
        (report::summary(&header, r, &faults, &fault_errors), report::first_violation(r, o.seed, origin_us), ok)
    });
    let timeline = judge.with_results(|r| report::timeline(r, origin_us));
    let timeline_file = dir.join("timeline.txt");
    if let Err(e) = std::fs::write(&timeline_file, timeline) {
        eprintln!("soak: {}: {e}", timeline_file.display());
    }
    println!("{text}{res}");
    for e in &fault_errors {
        println!("fault error: {e}");
    }
    if let Some(first) = first {
        println!("{first}");
    }
    println!("{}", if ok { "PASS: no violation" } else { "FAIL: see the violations above" });
    fleet.lock().await.shutdown().await;
    Ok(ok)
}

/// Samples until every replica is back within tolerance of its start (bounded): the end state.
async fn settle_resources(fleet: &Arc<tokio::sync::Mutex<Fleet>>, starts: &[Sample], began: Instant) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let at = began.elapsed().as_secs_f64();
        let ends: Vec<Sample> = {
            let f = fleet.lock().await;
            (0..REPLICAS).filter_map(|i| f.replica_pid(i).and_then(|p| resources::sample(p, i, at))).collect()
        };
        let settled = starts.iter().all(|s| {
            ends.iter().any(|e| {
                e.replica == s.replica
                    && e.fds <= s.fds + report::FD_TOLERANCE
                    && e.threads <= s.threads + report::THREAD_TOLERANCE
                    && e.rss_kib <= s.rss_kib + report::RSS_TOLERANCE_KIB
            })
        });
        if settled || Instant::now() >= deadline {
            return ends;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn durations_take_a_unit_and_refuse_others() {
        assert_eq!(duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert!(duration("2d").is_err());
        assert!(duration("m").is_err());
    }

    #[test]
    fn fault_kinds_are_chosen_or_skipped_by_name() {
        let all = options(&[]).unwrap();
        assert_eq!(all.faults, faults::KINDS.to_vec());
        let only = options(&args(&["--faults", "backend-kill,drain"])).unwrap();
        assert_eq!(only.faults, ["backend-kill", "drain"]);
        let skipped = options(&args(&["--skip-faults", "redis-flush,redis-restart"])).unwrap();
        assert_eq!(skipped.faults.len(), faults::KINDS.len() - 2);
        assert!(!skipped.faults.contains(&"redis-flush"));
        let none = options(&args(&["--faults", ""])).unwrap();
        assert!(none.faults.is_empty(), "no faults: the clients alone");
        let err = options(&args(&["--faults", "backend-kil"])).err().unwrap();
        assert!(err.contains("unknown fault kind \"backend-kil\""), "{err}");
        assert!(options(&args(&["--rooms", "0"])).is_err());
        assert!(options(&args(&["--seed"])).is_err(), "a flag without its value");
    }
}
