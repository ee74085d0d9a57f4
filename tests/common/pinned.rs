//! For the `#[ignore]`d measuring tools: the roomgate binary of this build started as a process
//! of its own, pinned to CPU 0 with `taskset` when there is one, on one runtime thread, with its
//! CPU time read from /proc, and a bounded loop of concurrent client tasks. Run the tools with
//! `--release` and the client on another CPU, for example
//! `taskset -c 1 cargo test --release --test tls -- --ignored --nocapture handshake_rate`.

#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// roomgate running as a child process.
pub struct Pinned {
    child: Child,
    pub http: SocketAddr,
    pub tls: SocketAddr,
    _dir: tempfile::TempDir,
    /// The certificate made by [`Pinned::with_test_cert`], kept while roomgate may read it.
    _certs: Option<tempfile::TempDir>,
}

/// A free loopback port (bound, read, released: good enough for a measuring tool).
fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

impl Pinned {
    /// [`Pinned::start`] with one certificate for `a.test`, made here: the name every measuring
    /// tool connects to.
    pub async fn with_test_cert(body: &str) -> Pinned {
        let certs = tempfile::tempdir().unwrap();
        let files = [super::tls::Ca::new().leaf(&["a.test"]).write(certs.path(), "a")];
        let mut server = Pinned::start(body, &files).await;
        server._certs = Some(certs);
        server
    }

    /// Starts roomgate with `body` (backends, routes, more sections) and `certs`, and waits until
    /// its TLS listener accepts.
    pub async fn start(body: &str, certs: &[(PathBuf, PathBuf)]) -> Pinned {
        let dir = tempfile::tempdir().unwrap();
        let (http, tls, admin) = (free_addr(), free_addr(), free_addr());
        let mut text = format!(
            "[server]\nlisten = \"{http}\"\nworkers = 1\n[admin]\nlisten = \"{admin}\"\n[log]\naccess = false\nlevel = \"warn\"\n"
        );
        text.push_str(&super::tls::tls_section(certs).replace("127.0.0.1:0", &tls.to_string()));
        text.push_str(body);
        let path = dir.path().join("roomgate.toml");
        std::fs::write(&path, text).unwrap();
        let bin = env!("CARGO_BIN_EXE_roomgate");
        let pinned = Command::new("taskset").arg("--version").output().is_ok();
        let mut cmd = if pinned {
            let mut c = Command::new("taskset");
            c.args(["-c", "0", bin]);
            c
        } else {
            Command::new(bin)
        };
        let child = cmd.arg("run").arg("--config").arg(&path).stdout(Stdio::null()).spawn().unwrap();
        println!("roomgate {bin} started{}", if pinned { ", pinned to CPU 0" } else { " (no taskset)" });
        let server = Pinned { child, http, tls, _dir: dir, _certs: None };
        for _ in 0..400 {
            if tokio::net::TcpStream::connect(tls).await.is_ok() {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("roomgate did not start listening on {tls}");
    }

    /// CPU time the process has used so far (user + system), in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // Fields after the command name (which is in parentheses and may hold spaces).
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        ticks as f64 / clock_ticks()
    }
}

impl Pinned {
    /// Resident memory of the process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn clock_ticks() -> f64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().ok();
    out.and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok()).unwrap_or(100.0)
}

/// Runs `tasks` copies of `op` (given the task's number) in a loop for `duration` (each op
/// bounded by the caller), and prints operations per second and per second of the server's CPU
/// time.
pub async fn measure<F, Fut>(label: &str, server: &Pinned, tasks: usize, duration: Duration, op: F) -> f64
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let (done, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let cpu_before = server.cpu_seconds();
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (op, done, failed) = (op.clone(), done.clone(), failed.clone());
            tokio::spawn(async move {
                while start.elapsed() < duration {
                    let counter = if op(task).await { &done } else { &failed };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = server.cpu_seconds() - cpu_before;
    let n = done.load(Ordering::Relaxed) as f64;
    println!(
        "{label}: {n} in {elapsed:.2}s = {:.0}/s; server CPU {:.2}s ({:.0}% of one core) = {:.0} per server CPU second; {} failed",
        n / elapsed,
        cpu,
        100.0 * cpu / elapsed,
        n / cpu.max(1e-9),
        failed.load(Ordering::Relaxed)
    );
    n / cpu.max(1e-9)
}
