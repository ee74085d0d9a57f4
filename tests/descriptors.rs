//! File descriptors, against the roomgate binary run as a process of its own under a shell's
//! `ulimit -n` (this test process's own limit is left alone): out of descriptors, the accept
//! loop backs off instead of spinning, logs at most once a second, and serves again once
//! descriptors are free; `main` raises the soft limit to the hard one; and
//! `limits.max_connections = "auto"` follows the limit.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// roomgate as a child process under `ulimit` options `ulimit`, its stderr collected; killed
/// when dropped.
struct Limited {
    child: Child,
    addr: SocketAddr,
    admin: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    /// The connection that saw roomgate serve, kept open (and counted).
    _probe: Option<TcpStream>,
    _dir: tempfile::TempDir,
}

/// A port free now (roomgate binds it a moment later).
fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

impl Limited {
    async fn start(ulimit: &str, backend: &TestBackend, limits: &str) -> Limited {
        let (addr, admin) = (free_port(), free_port());
        let dir = tempfile::tempdir().unwrap();
        let extra = format!(
            "[server]\nlisten = \"{addr}\"\nworkers = 1\n[admin]\nlisten = \"{admin}\"\n[reload]\nwatch = false\n\
             [timeouts]\nrequest_head = \"60s\"\n[limits]\n{limits}\n"
        );
        let path = dir.path().join("roomgate.toml");
        std::fs::write(&path, config(&[(&backend.id, backend.addr)], ROUTES, &extra)).unwrap();
        // `exec`: the shell's process becomes roomgate, with the limits the shell set.
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit {ulimit} && exec \"$0\" run --config \"$1\""))
            .arg(env!("CARGO_BIN_EXE_roomgate"))
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut r = Limited { child, addr, admin, log: Arc::default(), _probe: None, _dir: dir };
        let stderr = r.child.stderr.take().unwrap();
        let log = r.log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log.lock().unwrap().push(line);
            }
        });
        let deadline = Instant::now() + LIMIT;
        loop {
            if let Ok(mut s) = TcpStream::connect(addr).await
                && get_status(&mut s).await == Some(200)
            {
                r._probe = Some(s);
                return r;
            }
            assert!(Instant::now() < deadline, "roomgate did not start serving: {:?}", r.log.lock().unwrap());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn open_descriptors(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).unwrap().count()
    }

    /// (soft, hard) `Max open files` of the process.
    fn nofile(&self) -> (String, String) {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", self.pid())).unwrap();
        let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields[3].to_owned(), fields[4].to_owned())
    }

    /// CPU time used so far (user + system), in seconds.
    fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        let hz = Command::new("getconf").arg("CLK_TCK").output().ok();
        let hz: f64 = hz.and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok()).unwrap_or(100.0);
        ticks as f64 / hz
    }

    fn log_lines(&self, needle: &str) -> usize {
        self.log.lock().unwrap().iter().filter(|l| l.contains(needle)).count()
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /` on `s`: the status, with the body read; `None`: the connection was closed.
async fn get_status(s: &mut TcpStream) -> Option<u16> {
    s.write_all(b"GET / HTTP/1.1\r\nHost: fd.test\r\n\r\n").await.ok()?;
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(LIMIT, s.read(&mut b)).await.expect("no answer in time") {
            Ok(1) => head.push(b[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8(head).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).await.ok()?;
    head.split(' ').nth(1)?.parse().ok()
}

#[tokio::test]
async fn out_of_descriptors_the_accept_loop_backs_off_and_recovers() {
    const NOFILE: usize = 64;
    let backend = TestBackend::start("b0").await;
    // An explicit cap far above what 64 descriptors hold: accept itself must fail.
    let roomgate = Limited::start(&format!("-n {NOFILE}"), &backend, "max_connections = 100000").await;
    // Idle connections, each holding one of roomgate's descriptors; those past its limit wait
    // in the listen backlog, and accept fails with EMFILE for as long as they do.
    let mut held = Vec::new();
    for _ in 0..NOFILE + 16 {
        held.push(TcpStream::connect(roomgate.addr).await.unwrap());
    }
    let deadline = Instant::now() + LIMIT;
    while roomgate.log_lines("Too many open files") == 0 {
        assert!(
            Instant::now() < deadline,
            "accept never ran out of descriptors ({} open)",
            roomgate.open_descriptors()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // (Descriptors inherited above the limit may come on top.)
    assert!(roomgate.open_descriptors() >= NOFILE, "{} open", roomgate.open_descriptors());
    // A measuring window, not a synchronisation: what roomgate does while it stays out of them.
    let (cpu, lines) = (roomgate.cpu_seconds(), roomgate.log_lines("accept failed"));
    let window = Duration::from_secs(2);
    tokio::time::sleep(window).await;
    let used = roomgate.cpu_seconds() - cpu;
    let logged = roomgate.log_lines("accept failed") - lines;
    println!(
        "out of descriptors (ulimit -n {NOFILE}, {} connections waiting): roomgate used {used:.2} s of CPU in \
         {window:?}, and logged {logged} accept failure lines",
        held.len()
    );
    assert!(used < 0.2, "the accept loop spins: {used:.2} s of CPU in {window:?}");
    assert!(logged <= 3, "accept failures are logged at most once a second: {logged} lines in {window:?}");
    // Descriptors freed: the backlog drains and new connections are served again.
    drop(held);
    let deadline = Instant::now() + LIMIT;
    loop {
        let mut s = TcpStream::connect(roomgate.addr).await.unwrap();
        if get_status(&mut s).await == Some(200) {
            break;
        }
        assert!(Instant::now() < deadline, "roomgate never served again after descriptors were freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn main_raises_the_soft_limit_to_the_hard_one_and_auto_follows_it() {
    let backend = TestBackend::start("b0").await;
    // Soft 100, hard 600: raised to 600, so `auto` is (600 - 256 - 64 admin - 128 idle for one
    // backend) / 2 = 76 connections.
    let roomgate = Limited::start("-S -n 100 && ulimit -H -n 600", &backend, "").await;
    assert_eq!(roomgate.nofile(), ("600".to_owned(), "600".to_owned()));
    // The probe that saw it start holds one.
    let mut held = Vec::new();
    for _ in 1..76 {
        let mut s = TcpStream::connect(roomgate.addr).await.unwrap();
        assert_eq!(get_status(&mut s).await, Some(200));
        held.push(s);
    }
    let mut past = TcpStream::connect(roomgate.addr).await.unwrap();
    assert_eq!(get_status(&mut past).await, None, "the 77th connection is closed at accept");
    let (_, _, metrics) = get(&http_client(), &format!("http://{}/metrics", roomgate.admin), &[]).await;
    assert!(metrics.contains("roomgate_refused_total{limit=\"limits.max_connections\"} 1"), "{metrics}");
    assert_eq!(roomgate.log_lines("Too many open files"), 0);
}
