//! roomgate's resources, from /proc: each replica's RSS, open descriptors and threads (its tokio
//! workers and blocking pool; the metrics have no task gauge), sampled every few seconds.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use crate::fleet::{Fleet, REPLICAS};

#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Seconds since the run began.
    pub at: f64,
    pub replica: usize,
    pub pid: u32,
    pub rss_kib: u64,
    pub fds: u64,
    pub threads: u64,
}

pub fn sample(pid: u32, replica: usize, at: f64) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status.lines().find_map(|l| l.strip_prefix(name))?.split_whitespace().next()?.parse().ok()
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Sample { at, replica, pid, rss_kib: field("VmRSS:")?, fds, threads: field("Threads:")? })
}

/// Samples every replica every `every` until `stop` turns true.
pub async fn sampler(
    fleet: Arc<tokio::sync::Mutex<Fleet>>,
    samples: Arc<Mutex<Vec<Sample>>>,
    every: Duration,
    start: tokio::time::Instant,
    mut stop: watch::Receiver<bool>,
) {
    while !*stop.borrow() {
        let pids: Vec<Option<u32>> = match fleet.try_lock() {
            Ok(f) => (0..REPLICAS).map(|i| f.replica_pid(i)).collect(),
            Err(_) => Vec::new(), // a fault holds the fleet: sample next time
        };
        let at = start.elapsed().as_secs_f64();
        for (i, pid) in pids.into_iter().enumerate() {
            if let Some(s) = pid.and_then(|p| sample(p, i, at)) {
                samples.lock().unwrap_or_else(PoisonError::into_inner).push(s);
            }
        }
        let _ = tokio::time::timeout(every, stop.wait_for(|s| *s)).await;
    }
}
