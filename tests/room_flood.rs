//! For the issue's figure, not a check (ignored in the normal suite): new random room keys at
//! full speed against a roomgate process of its own, with `limits.max_rooms = 100000`, while one
//! live room (a WebSocket held open) gets a request every 10 ms. Prints roomgate's RSS before,
//! at the end and 10 s after the load, the rooms it knows, its over-cap count, and the live
//! room's latencies.
//!
//! ```text
//! cargo test --release --test room_flood -- --ignored --nocapture
//! ```
//!
//! roomgate is the binary built with the test (`target/release/roomgate` in a release build),
//! run as a child process with one worker, so that the RSS read from `/proc` is its alone. The
//! backends and the live room's client run on one thread of this process, the load on another.
//! Knobs (environment): `FLOOD_SECONDS` (60), `FLOOD_CLIENTS` (48), `FLOOD_MAX_ROOMS` (100000),
//! `FLOOD_LINGER_UNUSED` ("5s").

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// roomgate as a child process, killed when dropped.
struct Roomgate {
    child: Child,
    addr: SocketAddr,
    admin: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Roomgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free now (roomgate binds it a moment later: good enough for a measuring tool).
fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

impl Roomgate {
    async fn start(backends: &[TestBackend], max_rooms: usize, linger_unused: &str) -> Roomgate {
        let (addr, admin) = (free_port(), free_port());
        let dir = tempfile::tempdir().unwrap();
        let extra = format!(
            "[server]\nlisten = \"{addr}\"\nworkers = 1\n[admin]\nlisten = \"{admin}\"\n\
             [limits]\nmax_rooms = {max_rooms}\n[rooms]\nlinger_unused = \"{linger_unused}\"\n"
        );
        let path = dir.path().join("roomgate.toml");
        std::fs::write(&path, config(&backend_list(backends), ROUTES, &extra)).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_roomgate"))
            .arg("run")
            .arg("--config")
            .arg(&path)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let r = Roomgate { child, addr, admin, _dir: dir };
        // Listening once both ports take connections (roomgate binds them all before serving).
        let deadline = Instant::now() + LIMIT;
        while TcpStream::connect(addr).await.is_err() || TcpStream::connect(admin).await.is_err() {
            assert!(Instant::now() < deadline, "roomgate did not start listening");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        r.admin("/readyz").await;
        r
    }

    /// (VmRSS, VmHWM) in MiB.
    fn rss(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let field = |name: &str| -> f64 {
            let line = status.lines().find(|l| l.starts_with(name)).unwrap();
            let kib: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
            kib / 1024.0
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    async fn admin(&self, path: &str) -> String {
        let (status, _, body) = get(&http_client(), &format!("http://{}{path}", self.admin), &[]).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        body
    }

    async fn rooms_known(&self) -> u64 {
        let status: serde_json::Value = serde_json::from_str(&self.admin("/admin/status").await).unwrap();
        status["rooms"]["known"].as_u64().unwrap()
    }

    async fn over_cap(&self) -> u64 {
        let metrics = self.admin("/metrics").await;
        let line = metrics.lines().find(|l| l.starts_with("roomgate_rooms_over_cap_total ")).unwrap();
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }
}

/// One keep-alive client sending `GET /room/{random}/` until `until`: (responses, errors).
async fn client(addr: SocketAddr, seed: u64, until: Instant) -> (u64, u64) {
    let (mut ok, mut errors) = (0, 0);
    let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut buf = Vec::with_capacity(4096);
    'connect: while Instant::now() < until {
        let Ok(mut conn) = TcpStream::connect(addr).await else {
            errors += 1;
            continue;
        };
        let _ = conn.set_nodelay(true);
        while Instant::now() < until {
            // xorshift64: a new key per request, cheap enough not to be the measure.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let req = format!("GET /room/{rng:016x}/ HTTP/1.1\r\nHost: flood\r\n\r\n");
            if conn.write_all(req.as_bytes()).await.is_err() || !read_response(&mut conn, &mut buf).await {
                errors += 1;
                continue 'connect;
            }
            ok += 1;
        }
    }
    (ok, errors)
}

/// Reads one response (a 200 with a Content-Length body) off `conn`.
async fn read_response(conn: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let Some(len) = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
            else {
                return false;
            };
            while buf.len() < end + 4 + len {
                let mut chunk = [0u8; 4096];
                match conn.read(&mut chunk).await {
                    Ok(0) | Err(_) => return false,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            return head.starts_with("http/1.1 200");
        }
        let mut chunk = [0u8; 4096];
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
#[ignore]
async fn random_keys_at_full_speed_against_a_bounded_directory() {
    let seconds: u64 = knob("FLOOD_SECONDS", 60);
    let clients: u64 = knob("FLOOD_CLIENTS", 48);
    let max_rooms: usize = knob("FLOOD_MAX_ROOMS", 100_000);
    let linger_unused: String = knob("FLOOD_LINGER_UNUSED", "5s".to_owned());
    let backends = backends(3).await;
    let roomgate = Roomgate::start(&backends, max_rooms, &linger_unused).await;

    // The live room: a member's socket stays open throughout.
    let mut member = ws_connect(&format!("ws://{}/ws/live/?room=live", roomgate.addr), &[]).await;
    let owner = ws_backend(&mut member).await;
    let live_url = format!("http://{}/room/live/", roomgate.addr);
    let http = http_client();
    get(&http, &live_url, &[]).await;
    let before = roomgate.rss();

    let start = Instant::now();
    let until = start + Duration::from_secs(seconds);
    let addr = roomgate.addr;
    // The load on a thread (and a runtime) of its own.
    let load = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let tasks: Vec<_> = (0..clients).map(|i| tokio::spawn(client(addr, i + 1, until))).collect();
            let mut total = (0, 0);
            for t in tasks {
                let (ok, errors) = t.await.unwrap();
                total = (total.0 + ok, total.1 + errors);
            }
            total
        })
    });

    let mut latencies = Vec::new();
    let mut moved = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while Instant::now() < until {
        tick.tick().await;
        let t = Instant::now();
        let (status, h, _) = get(&http, &live_url, &[]).await;
        latencies.push(t.elapsed());
        assert_eq!(status, StatusCode::OK);
        moved += usize::from(h["x-backend"] != owner.as_str());
    }
    let (requests, errors) = tokio::task::spawn_blocking(move || load.join().unwrap()).await.unwrap();
    let took = start.elapsed();
    let end = roomgate.rss();
    let (known_end, over_cap) = (roomgate.rooms_known().await, roomgate.over_cap().await);
    assert_eq!(ws_backend(&mut member).await, owner, "the live room's socket stayed");

    tokio::time::sleep(Duration::from_secs(10)).await; // the measured wait, not a synchronisation
    let after = roomgate.rss();
    let known_after = roomgate.rooms_known().await;

    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "room flood: {:.0} s of random keys, {clients} keep-alive clients on one thread: {requests} requests \
         ({:.0}/s), {errors} errors; limits.max_rooms = {max_rooms}, rooms.linger_unused = {linger_unused}",
        took.as_secs_f64(),
        requests as f64 / took.as_secs_f64()
    );
    println!(
        "roomgate RSS (MiB): before {:.1}, end of load {:.1} (peak {:.1}), 10 s after {:.1}",
        before.0, end.0, end.1, after.0
    );
    println!("rooms known: end of load {known_end}, 10 s after {known_after}; over-cap placements {over_cap}");
    println!(
        "live room (one WebSocket open, a request every 10 ms): {} requests, p50 {:?}, p99 {:?}, max {:?}; \
         answered by another backend: {moved}",
        latencies.len(),
        pct(0.5),
        pct(0.99),
        latencies.last().unwrap()
    );
    assert_eq!(moved, 0, "the live room kept its owner");
    assert!(known_end <= max_rooms as u64 + 1, "the cap held (the live room may be past it)");
}
