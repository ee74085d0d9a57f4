//! The faults, one at a time, in rounds that each take every kind once in an order drawn from the
//! seed: backend SIGKILL and restart, SIGSTOP and SIGCONT, config reloads that remove and re-add a
//! backend, drains with and without hand-off, a rebalance, Redis restarted and flushed, a replica
//! SIGTERMed and restarted, and slow or reset connections through the relay.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::clock::now_us;
use crate::fleet::{BACKENDS, Fleet, REPLICAS};
use crate::judge::Judge;
use crate::rng::Rng;

pub const KINDS: [&str; 11] = [
    "backend-kill",
    "backend-stop",
    "reload-remove-add",
    "drain-handoff",
    "drain",
    "rebalance",
    "redis-restart",
    "redis-flush",
    "replica-restart",
    "relay-slow",
    "relay-reset",
];

/// Injects faults of the `kinds` given until `until`; returns the faults that could not be
/// carried out, as errors. No kinds: none, the clients alone run.
pub async fn run(
    fleet: Arc<Mutex<Fleet>>,
    judge: Arc<Judge>,
    mut rng: Rng,
    until: Instant,
    gap: Duration,
    kinds: Vec<&'static str>,
) -> Vec<String> {
    let mut errors = Vec::new();
    if kinds.is_empty() {
        tokio::time::sleep_until(until).await;
        return errors;
    }
    let mut round: Vec<&'static str> = Vec::new();
    // Bounded: each fault takes at least its gap.
    while Instant::now() < until {
        if round.is_empty() {
            round = kinds.clone();
            for i in (1..round.len()).rev() {
                round.swap(i, rng.below(i + 1));
            }
        }
        let kind = round.pop().unwrap_or("rebalance");
        let backend = rng.below(BACKENDS);
        let ix = judge.fault_begin(kind, &detail(kind, backend));
        if let Err(e) = inject(&fleet, &judge, &mut rng, kind, backend).await {
            let e = format!("{kind}: {e}");
            judge.note(None, format!("fault error: {e}"));
            eprintln!("fault error: {e}");
            errors.push(e);
        }
        judge.fault_end(ix);
        tokio::time::sleep(rng.between(gap / 2, gap * 3 / 2)).await;
    }
    errors
}

fn detail(kind: &str, backend: usize) -> String {
    match kind {
        "redis-restart" | "redis-flush" | "rebalance" | "replica-restart" => String::new(),
        "relay-slow" | "relay-reset" => format!("b{BACKENDS}"),
        _ => format!("b{}", backend + 1),
    }
}

async fn hold(rng: &mut Rng, lo_ms: u64, hi_ms: u64) {
    tokio::time::sleep(rng.between(Duration::from_millis(lo_ms), Duration::from_millis(hi_ms))).await;
}

async fn inject(fleet: &Mutex<Fleet>, judge: &Judge, rng: &mut Rng, kind: &str, k: usize) -> Result<(), String> {
    let id = format!("b{}", k + 1);
    let replica = rng.below(REPLICAS);
    match kind {
        "backend-kill" => {
            fleet.lock().await.kill_backend(k).await?;
            hold(rng, 300, 3000).await;
            fleet.lock().await.restart_backend(k).await
        }
        "backend-stop" => {
            fleet.lock().await.stop_backend(k, true).await?;
            hold(rng, 1000, 8000).await;
            fleet.lock().await.stop_backend(k, false).await
        }
        "reload-remove-add" => {
            {
                let mut f = fleet.lock().await;
                f.listed[k] = false;
                f.reconfigure(true).await?;
            }
            hold(rng, 4000, 8000).await;
            let mut f = fleet.lock().await;
            f.listed[k] = true;
            f.reconfigure(false).await
        }
        "drain-handoff" | "drain" => {
            let body = if kind == "drain" { r#"{"deadline": "2s"}"# } else { r#"{"handoff": true}"# };
            let (status, answer) =
                fleet.lock().await.admin(replica, "POST", &format!("/admin/backends/{id}/drain"), body).await?;
            hold(rng, 3000, 6000).await;
            let undrain =
                fleet.lock().await.admin(replica, "POST", &format!("/admin/backends/{id}/undrain"), "").await?;
            if status != 200 || undrain.0 != 200 {
                return Err(format!("drain {status} {answer}; undrain {} {}", undrain.0, undrain.1));
            }
            Ok(())
        }
        "rebalance" => {
            let (status, answer) = fleet.lock().await.admin(replica, "POST", "/admin/rebalance", "{}").await?;
            judge.note(None, format!("rebalance on replica {replica}: {status} {answer}"));
            if status != 200 { Err(format!("{status} {answer}")) } else { Ok(()) }
        }
        "redis-restart" => {
            fleet.lock().await.kill_redis().await;
            hold(rng, 500, 3000).await;
            fleet.lock().await.start_redis().await
        }
        "redis-flush" => fleet.lock().await.flush_redis().await,
        "replica-restart" => {
            let mut f = fleet.lock().await;
            let status = f.stop_replica(replica).await;
            judge.note(None, format!("replica {replica} stopped: {status:?}"));
            let started = f.start_replica(replica).await;
            status.and(started).map_err(|e| format!("{e}\n{}", f.log_tail(replica)))
        }
        "relay-slow" => {
            let delay = rng.between(Duration::from_millis(20), Duration::from_millis(300));
            judge.note(None, format!("relay delays every chunk by {delay:?}"));
            fleet.lock().await.relay.set_delay(delay);
            hold(rng, 2000, 6000).await;
            fleet.lock().await.relay.set_delay(Duration::ZERO);
            Ok(())
        }
        "relay-reset" => {
            judge.relay_reset(now_us());
            fleet.lock().await.relay.reset_all();
            Ok(())
        }
        other => Err(format!("unknown fault {other}")),
    }
}
