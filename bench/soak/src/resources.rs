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

/// What a process's descriptors are, for a report on an end state that did not settle: counts by
/// kind, TCP sockets by state and remote port (`tcp ESTABLISHED ->127.0.0.1:40123`).
pub fn describe_fds(pid: u32) -> String {
    let mut tcp = std::collections::HashMap::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 {
                let port = |a: &str| a.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()).unwrap_or(0);
                let state = match f[3] {
                    "01" => "ESTABLISHED",
                    "06" => "TIME_WAIT",
                    "08" => "CLOSE_WAIT",
                    "0A" => "LISTEN",
                    "04" => "FIN_WAIT1",
                    "05" => "FIN_WAIT2",
                    "09" => "LAST_ACK",
                    other => other,
                };
                tcp.insert(f[9].to_owned(), format!("tcp {state} :{}->:{}", port(f[1]), port(f[2])));
            }
        }
    }
    let mut kinds: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for entry in dir.flatten() {
            let target = std::fs::read_link(entry.path()).map(|p| p.display().to_string()).unwrap_or_default();
            let kind = match target.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')) {
                Some(inode) => tcp.get(inode).cloned().unwrap_or_else(|| "socket (not tcp)".to_owned()),
                None => target.split(':').next().unwrap_or("").to_owned(),
            };
            *kinds.entry(kind).or_default() += 1;
        }
    }
    kinds.iter().map(|(k, n)| format!("{n} x {k}")).collect::<Vec<_>>().join("; ")
}
