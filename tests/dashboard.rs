//! The dashboard in headless Chromium (`tests/dashboard/check.py`, Playwright driving Debian's
//! Chromium (`$CHROMIUM`, else `/usr/bin/chromium`) from the pinned venv `target/djust-venv`) against roomgate with three
//! backends, live WebSockets and an admin token: the page's figures match `/admin/status`, a
//! room search shows a room's owner (and a hostile key only as text), a drain clicked on the page
//! reaches the status and the card, and a wrong token shows an error.
//! Also, without the browser: the page and its assets are served without the token, with the
//! Content-Security-Policy, and the API behind them still needs it.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{LIMIT, Proxy, ROUTES, backend_list, backends, config, get, http_client, ws_backend, ws_connect};
use http::StatusCode;

const TOKEN: &str = "dashboard-test-token-5e2b77c1";
/// The browser script's bound (its own is 75 s).
const RUN: Duration = Duration::from_secs(90);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

async fn admin_status(proxy: &Proxy) -> serde_json::Value {
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, body) = get(&http_client(), &proxy.admin_url("/admin/status"), &[("authorization", &bearer)]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_assets_need_no_token_but_its_data_does() {
    let bs = backends(1).await;
    let proxy = Proxy::start(&config(&backend_list(&bs), ROUTES, &format!("[admin]\ntoken = \"{TOKEN}\"\n"))).await;
    let client = http_client();
    for (path, ty) in
        [("/", "text/html"), ("/dashboard/app.js", "text/javascript"), ("/dashboard/style.css", "text/css")]
    {
        let (status, headers, body) = get(&client, &proxy.admin_url(path), &[]).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(headers["content-type"].to_str().unwrap().starts_with(ty), "{path}: {:?}", headers["content-type"]);
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"), "{path}: {csp}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert!(!body.is_empty(), "{path}");
    }
    for path in ["/admin/status", "/metrics", "/dashboard/nothing.js"] {
        let (status, _, _) = get(&client, &proxy.admin_url(path), &[]).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_shows_the_status_drains_and_refuses_a_wrong_token() {
    if !common::require(&[common::Tool::Chromium, common::Tool::DjustVenv]) {
        return;
    }
    let python = common::require::djust_venv().clone().unwrap();
    let started = Instant::now();
    let bs = backends(3).await;
    let extra = format!("[admin]\ntoken = \"{TOKEN}\"\n[drain]\ndeadline = \"60s\"\n");
    let proxy = Proxy::start(&config(&backend_list(&bs), ROUTES, &extra)).await;

    // Live sockets: 12 rooms, every third with a second socket.
    let mut sockets = Vec::new();
    for i in 0..12 {
        for _ in 0..(1 + usize::from(i % 3 == 0)) {
            let mut ws = ws_connect(&proxy.ws_url(&format!("/ws/live/?room=dash-{i}")), &[]).await;
            ws_backend(&mut ws).await;
            sockets.push(ws);
        }
    }
    let before = admin_status(&proxy).await;
    assert_eq!(before["websockets"], 16, "{before:#}");
    // The backend to drain: one that holds rooms.
    let victim = before["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["rooms"].as_u64() > Some(0))
        .and_then(|b| b["id"].as_str())
        .unwrap()
        .to_owned();

    let child = tokio::process::Command::new(python)
        .arg(repo().join("tests/dashboard/check.py"))
        .arg(format!("http://{}", proxy.admin))
        .args([TOKEN, &victim, "dash-0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(RUN, child.wait_with_output()).await.expect("check.py finishes").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "check.py: {}\n{stderr}\n{stdout}", out.status);
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    println!("check.py: {report:#}");

    // What the script saw, checked here too.
    let matched = &report["matched"];
    assert_eq!(matched["page"], matched["status"], "{report:#}");
    assert_eq!(matched["page"].as_object().map(|m| m.len()), Some(3), "{report:#}");
    assert_eq!(report["room"]["injected"], false, "a room key became markup: {report:#}");
    assert_eq!(report["drain"]["card_state"], "draining", "{report:#}");
    assert!(report["drain"]["dialog"].as_str().unwrap().contains(&victim), "{report:#}");
    assert!(report["wrong_token"]["error"].as_str().unwrap().contains("401"), "{report:#}");
    assert_eq!(report["wrong_token"]["main_hidden"], true, "{report:#}");
    assert_eq!(report["console_errors"], serde_json::json!([]), "{report:#}");

    // And the drain is roomgate's, not only the page's.
    let after = admin_status(&proxy).await;
    let b = after["backends"].as_array().unwrap().iter().find(|b| b["id"] == victim.as_str()).unwrap();
    assert_eq!(b["state"], "draining", "{after:#}");
    assert!(
        b["drain_deadline_ms"].as_u64().is_some_and(|ms| (20_000..=45_000).contains(&ms)),
        "the page's 45s deadline, not the config's 60s: {after:#}"
    );

    drop(sockets);
    tokio::time::timeout(LIMIT * 3, proxy.shutdown()).await.expect("shutdown");
    println!("dashboard test: {:.1} s", started.elapsed().as_secs_f64());
}
