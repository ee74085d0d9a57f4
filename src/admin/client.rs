//! The client side of the admin API, for `roomgate drain`, `undrain` and `rebalance` in deploy
//! scripts.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// Which admin API to ask, and with which token.
#[derive(Clone, Debug)]
pub struct AdminTarget {
    pub admin: SocketAddr,
    pub token: Option<String>,
}

/// What `roomgate drain` was asked to do.
#[derive(Clone, Debug)]
pub struct DrainOptions {
    pub backend: String,
    pub target: AdminTarget,
    /// Deadline sent to the server; `None`: the server's `[drain] deadline`.
    pub deadline: Option<Duration>,
    /// Wait until the backend holds no live room and no socket.
    pub wait: bool,
    /// Give up waiting after this long.
    pub timeout: Duration,
    /// Move every live room now, with its state (`[handoff]`).
    pub handoff: bool,
}

/// Starts a drain and, with `wait`, waits for it to finish. Returns the process exit code:
/// 0 drained (or started, without `wait`), 1 still busy at the timeout, 2 the admin API failed.
pub async fn drain_command(opts: &DrainOptions) -> u8 {
    let mut body = json!({ "handoff": opts.handoff });
    if let Some(d) = opts.deadline {
        body["deadline"] = json!(format!("{}ms", d.as_millis()));
    }
    let body = body.to_string();
    let path = format!("/admin/backends/{}/drain", opts.backend);
    match request(&opts.target, Method::POST, &path, body).await {
        Ok((StatusCode::OK, _)) => println!("draining {}", opts.backend),
        Ok((status, v)) => {
            eprintln!("roomgate drain: {status}: {}", error_of(&v));
            return 2;
        }
        Err(e) => {
            eprintln!("roomgate drain: cannot reach the admin API at {}: {e}", opts.target.admin);
            return 2;
        }
    }
    if !opts.wait {
        return 0;
    }
    let started = Instant::now();
    let mut last = (u64::MAX, u64::MAX);
    loop {
        let load = match request(&opts.target, Method::GET, "/admin/status", String::new()).await {
            Ok((StatusCode::OK, status)) => backend_load(&status, &opts.backend),
            Ok((status, _)) => {
                eprintln!("roomgate drain: status request failed: {status}");
                return 2;
            }
            Err(e) => {
                eprintln!("roomgate drain: cannot reach the admin API: {e}");
                return 2;
            }
        };
        // The drain request found the backend; gone from the status now means a removed backend
        // that drained and was dropped.
        let (rooms, sockets) = load.unwrap_or((0, 0));
        if (rooms, sockets) == (0, 0) {
            println!("{} drained in {:.1}s", opts.backend, started.elapsed().as_secs_f64());
            return 0;
        }
        if (rooms, sockets) != last {
            println!("{}: {rooms} live rooms, {sockets} sockets", opts.backend);
            last = (rooms, sockets);
        }
        if started.elapsed() >= opts.timeout {
            eprintln!(
                "roomgate drain: timed out: {} still holds {rooms} live rooms and {sockets} sockets",
                opts.backend
            );
            return 1;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Ends the drain of `backend`: it takes new rooms again. Returns the process exit code: 0 done,
/// 2 the admin API failed or refused (unknown backend, or one removed from the config).
pub async fn undrain_command(target: &AdminTarget, backend: &str) -> u8 {
    let path = format!("/admin/backends/{backend}/undrain");
    match request(target, Method::POST, &path, String::new()).await {
        Ok((StatusCode::OK, _)) => {
            println!("{backend} active");
            0
        }
        Ok((status, v)) => {
            eprintln!("roomgate undrain: {status}: {}", error_of(&v));
            2
        }
        Err(e) => {
            eprintln!("roomgate undrain: cannot reach the admin API at {}: {e}", target.admin);
            2
        }
    }
}

/// Moves every live room whose owner is not its placement owner, with its state; with `wait`,
/// waits until the moves are done. Returns the process exit code: 0 done (or started), 1 moves
/// still running at the timeout, 2 the admin API failed or refused (no `[handoff]`).
pub async fn rebalance_command(target: &AdminTarget, max_moves: Option<usize>, wait: bool, timeout: Duration) -> u8 {
    let body = json!({ "max_moves": max_moves }).to_string();
    let moves = match request(target, Method::POST, "/admin/rebalance", body).await {
        Ok((StatusCode::OK, v)) => v.get("moves").and_then(Value::as_u64).unwrap_or(0),
        Ok((status, v)) => {
            eprintln!("roomgate rebalance: {status}: {}", error_of(&v));
            return 2;
        }
        Err(e) => {
            eprintln!("roomgate rebalance: cannot reach the admin API at {}: {e}", target.admin);
            return 2;
        }
    };
    println!("rebalance: {moves} rooms to move");
    if !wait {
        return 0;
    }
    let started = Instant::now();
    loop {
        let left = match request(target, Method::GET, "/admin/status", String::new()).await {
            Ok((StatusCode::OK, status)) => moves_left(&status),
            Ok((status, _)) => {
                eprintln!("roomgate rebalance: status request failed: {status}");
                return 2;
            }
            Err(e) => {
                eprintln!("roomgate rebalance: cannot reach the admin API: {e}");
                return 2;
            }
        };
        if left == 0 {
            println!("rebalanced in {:.1}s", started.elapsed().as_secs_f64());
            return 0;
        }
        if started.elapsed() >= timeout {
            eprintln!("roomgate rebalance: timed out with {left} moves queued or running");
            return 1;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Hand-off moves queued or running, from the admin status.
fn moves_left(status: &Value) -> u64 {
    let h = &status["handoff"];
    h["queued"].as_u64().unwrap_or(0) + h["running"].as_u64().unwrap_or(0)
}

fn error_of(v: &Value) -> &str {
    v.get("error").and_then(Value::as_str).unwrap_or("?")
}

/// (live rooms, sockets) of `backend`, or `None` when the status does not list it (a removed
/// backend that has drained is dropped from the status).
fn backend_load(status: &Value, backend: &str) -> Option<(u64, u64)> {
    let b =
        status.get("backends")?.as_array()?.iter().find(|b| b.get("id").and_then(Value::as_str) == Some(backend))?;
    Some((b.get("rooms")?.as_u64()?, b.get("sockets")?.as_u64()?))
}

async fn request(
    target: &AdminTarget,
    method: Method,
    path: &str,
    body: String,
) -> anyhow::Result<(StatusCode, Value)> {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = Request::builder().method(method).uri(format!("http://{}{path}", target.admin));
    if let Some(t) = &target.token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req.header(header::CONTENT_TYPE, "application/json").body(Full::new(Bytes::from(body)))?;
    let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req)).await??;
    let status = resp.status();
    let bytes = resp.into_body().collect().await?.to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok((status, value))
}
