//! What an orchestrator relies on: `/healthz` and `/readyz` answer without a token and whatever
//! the backends' health, readiness fails as soon as a shutdown begins, and the admin CLI
//! (`roomgate drain`, `roomgate undrain`) authenticates with a token file (a mounted Secret).

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use http::StatusCode;
use tokio::net::{TcpListener, TcpStream};

const TOKEN: &str = "0123456789abcdef-secret";

/// An address where nothing listens: bound, then released.
async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// (id, state) of every backend from the admin status (with the token).
async fn states(proxy: &Proxy) -> Vec<(String, String)> {
    let auth = bearer();
    let (status, _, body) = get(&http_client(), &proxy.admin_url("/admin/status"), &[("authorization", &auth)]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let backends = v["backends"].as_array().unwrap().iter();
    backends.map(|b| (b["id"].as_str().unwrap().to_owned(), b["state"].as_str().unwrap().to_owned())).collect()
}

async fn state_of(proxy: &Proxy, id: &str) -> String {
    states(proxy).await.into_iter().find(|(b, _)| b == id).unwrap().1
}

#[tokio::test]
async fn probes_answer_with_every_backend_down_and_without_a_token() {
    let down = [("game-0", closed_port().await), ("game-1", closed_port().await)];
    let extra = format!(
        "[admin]\ntoken = \"{TOKEN}\"\n[health]\npath = \"/healthz\"\ninterval = \"100ms\"\ntimeout = \"200ms\"\nfall = 1\n"
    );
    let proxy = Proxy::start(&config(&down, ROUTES, &extra)).await;
    let deadline = Instant::now() + LIMIT;
    while states(&proxy).await.iter().any(|(_, s)| s != "down") {
        assert!(Instant::now() < deadline, "backends not reported down: {:?}", states(&proxy).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client = http_client();
    let (status, _, _) = get(&client, &proxy.url("/lobby"), &[]).await;
    assert!(status.is_server_error(), "with every backend down the proxy cannot serve: {status}");
    let (status, _, _) = get(&client, &proxy.admin_url("/admin/status"), &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the token is in force");

    for (path, body) in [("/healthz", "ok\n"), ("/readyz", "ready\n")] {
        let (status, _, text) = get(&client, &proxy.admin_url(path), &[]).await;
        assert_eq!(status, StatusCode::OK, "{path} must not depend on backends or need a token: {text}");
        assert_eq!(text, body);
    }
    proxy.shutdown().await;
}

/// Kubernetes takes a pod out of its Services when its readiness probe fails. roomgate stops
/// accepting on every listener, the admin API's included, the moment a shutdown begins: the
/// probe's fresh connection is refused while requests in flight still have the grace period.
#[tokio::test]
async fn readiness_fails_as_soon_as_shutdown_begins() {
    let backends = backends(1).await;
    let mut proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, "[shutdown]\ngrace = \"5s\"\n")).await;
    let client = http_client();
    let (status, _, _) = get(&client, &proxy.admin_url("/readyz"), &[]).await;
    assert_eq!(status, StatusCode::OK);

    // A request the backend never answers holds the shutdown in its grace period.
    let slow = tokio::spawn({
        let (client, url) = (http_client(), proxy.url("/slow"));
        async move { client.get(url.parse().unwrap()).await }
    });
    let deadline = Instant::now() + LIMIT;
    while backends[0].accepted.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "the slow request did not reach the backend");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    proxy.begin_shutdown();
    let deadline = Instant::now() + LIMIT;
    while TcpStream::connect(proxy.admin).await.is_ok() {
        assert!(Instant::now() < deadline, "the admin API still accepts during shutdown");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!proxy.is_finished(), "refused while the grace period still runs");
    assert!(!slow.is_finished(), "the request in flight is still waiting");
    slow.abort();
    proxy.shutdown().await;
}

/// Runs the `roomgate` binary with `args`; returns its exit code and output.
async fn roomgate(args: &[&str]) -> (i32, String) {
    roomgate_with(args, &[]).await
}

/// Runs the `roomgate` binary with `args` and, of the token variables, only `env`.
async fn roomgate_with(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_roomgate"));
    command
        .args(args)
        .env_remove("ROOMGATE_ADMIN_TOKEN")
        .env_remove("ROOMGATE_ADMIN_TOKEN_FILE")
        .envs(env.iter().copied());
    let out = tokio::time::timeout(LIMIT, command.output()).await.expect("roomgate CLI timed out").unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test]
async fn drain_and_undrain_authenticate_with_a_token_file() {
    let backends = backends(2).await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let extra = format!("[admin]\ntoken_file = {:?}\n", token_file.display().to_string());
    let proxy = Proxy::start(&config(&backend_list(&backends), ROUTES, &extra)).await;
    let admin = proxy.admin.to_string();
    let file = token_file.display().to_string();
    let id = backends[0].id.clone();

    let (code, out) = roomgate(&["drain", &id, "--admin", &admin, "--token-file", &file]).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(state_of(&proxy, &id).await, "draining");
    let (code, out) = roomgate(&["drain", &id, "--wait", "--admin", &admin, "--token-file", &file]).await;
    assert_eq!(code, 0, "an idle backend is drained at once: {out}");

    // In a pod: the variable names the mounted Secret, and an explicit --token still wins.
    let (code, out) =
        roomgate_with(&["undrain", &id, "--admin", &admin], &[("ROOMGATE_ADMIN_TOKEN_FILE", &file)]).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(state_of(&proxy, &id).await, "active");
    let pod = [("ROOMGATE_ADMIN_TOKEN_FILE", "/nonexistent")];
    let (code, out) = roomgate_with(&["undrain", &id, "--admin", &admin, "--token", TOKEN], &pod).await;
    assert_eq!(code, 0, "{out}");

    let (code, out) = roomgate(&["undrain", "nope", "--admin", &admin, "--token-file", &file]).await;
    assert_eq!(code, 2, "unknown backend: {out}");
    let (code, out) = roomgate(&["undrain", &id, "--admin", &admin, "--token", "wrong-token-0123456"]).await;
    assert_eq!(code, 2, "wrong token: {out}");
    assert!(out.contains("401"), "{out}");
    let missing = dir.path().join("missing").display().to_string();
    let (code, out) = roomgate(&["undrain", &id, "--admin", &admin, "--token-file", &missing]).await;
    assert_eq!(code, 64, "unreadable token file: {out}");
    let (code, out) = roomgate(&["undrain", &id, "--token", TOKEN, "--token-file", &file]).await;
    assert_eq!(code, 2, "--token and --token-file conflict (clap's usage error): {out}");
    assert!(out.contains("cannot be used with"), "{out}");
    proxy.shutdown().await;
}
