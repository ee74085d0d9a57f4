//! Room hand-off end to end against real djust (issue 15, `docs/handoff.md`): a room of three
//! members counts to 7 on its owner; `roomgate drain OWNER --handoff --wait` (the real binary,
//! against the stack's admin API) moves it with its state; the old owner's process is killed; the
//! members, reconnecting by themselves after roomgate's 1012, see 7 on the new owner. Once with
//! protocol clients that behave like client.js (`Tab`), once in headless Chromium with djust's
//! real client.js. The stack's roomgate has `[handoff]` with a token, the app the same token
//! (`tests/common/djust/app.rs`). Run with `--nocapture` to see the timings. Also the hand-off
//! package's own Python tests (`integrations/djust`) and `tests/djust/handoff_check.py`.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::djust::app::{HANDOFF_TOKEN, Stack, local};
use common::djust::members::{handover_gap, two_backends_at_once};
use common::djust::tab::Tab;
use common::*;
use http::{Request, StatusCode};
use http_body_util::Full;

/// The count the room reaches before it moves.
const COUNT: u64 = 7;

/// `roomgate drain ID --handoff --wait`, the real binary against the stack's admin API: its
/// output, and how long it took.
async fn drain_with_handoff(stack: &Stack, id: &str) -> (std::process::Output, Duration) {
    let started = Instant::now();
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_roomgate"))
        .args(["drain", id, "--handoff", "--wait", "--timeout", "30s", "--admin"])
        .arg(stack.proxy.admin.to_string())
        .env_remove("ROOMGATE_ADMIN_TOKEN")
        .env_remove("ROOMGATE_ADMIN_TOKEN_FILE")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(40), run).await.expect("roomgate drain ran over 40 s").unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(out.status.success(), "roomgate drain: {}\n{}{}", out.status, text(&out.stdout), text(&out.stderr));
    (out, started.elapsed())
}

/// The export call as roomgate makes it, straight to a backend (`Host` is its address).
async fn export(backend: SocketAddr, room: &str, token: Option<&str>) -> (StatusCode, String) {
    let mut req =
        Request::post(format!("http://{backend}/.roomgate/rooms/{room}/export")).header("roomgate-room", room);
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let (status, _, body) = send(&http_client(), req.body(Full::new(Bytes::new())).unwrap()).await;
    (status, body)
}

/// `roomgate_handoffs_total{outcome}` on the admin API.
async fn handoffs(stack: &Stack, outcome: &str) -> u64 {
    let (_, _, text) = get(&http_client(), &stack.proxy.admin_url("/metrics"), &[]).await;
    let series = format!("roomgate_handoffs_total{{outcome=\"{outcome}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&series)?.parse::<f64>().ok()).unwrap_or(0.0) as u64
}

/// Kills the djust process of backend `id`, as a deploy restarts it.
async fn kill(stack: &mut Stack, id: &str) {
    stack.backends.iter_mut().find(|b| b.id == id).unwrap().kill().await;
}

/// The checks both scenarios end with: the move counted once as `moved`, the room whole on
/// `new`, and never on two backends at once as the app's own member log shows.
async fn moved_once_and_never_split(stack: &Stack, room: &str, old: &str, new: &str) -> Option<Duration> {
    assert_eq!(handoffs(stack, "moved").await, 1);
    let status = admin_get(&stack.proxy, "/admin/status").await;
    assert_eq!(status["handoff"]["done"], 1, "{status}");
    assert_eq!(status["split_rooms"], 0, "{status}");
    let info = admin_get(&stack.proxy, &format!("/admin/rooms/{room}")).await;
    assert_eq!(info["backend"], new, "{info}");
    let log = stack.room_log(room).await;
    assert!(log.iter().any(|e| e.join && e.backend == old) && log.iter().any(|e| e.join && e.backend == new));
    let split = two_backends_at_once(&log);
    assert!(split.is_empty(), "room {room} on two backends at once: {split:#?}\n{log:#?}");
    handover_gap(&log, old)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_with_handoff_keeps_the_count_of_a_djust_room_for_its_reconnecting_members() {
    if !common::require(&[common::Tool::RedisServer, common::Tool::DjustVenv]) {
        return;
    }
    let mut stack = Stack::start(3).await;
    let room = "handoff";
    let old = stack.owner(room).await;
    let mut members = Vec::new();
    for u in 0..3 {
        let mut tab = Tab::new(stack.proxy.addr, local(500 + u));
        tab.open(room).await;
        assert_eq!(tab.backend, old);
        members.push(tab);
    }
    for i in 0..COUNT as usize {
        members[i % 3].increment().await;
    }
    for tab in members.iter_mut() {
        tab.wait_count(COUNT).await;
    }
    // The app takes the token roomgate sends, and the backend's address as Host; the room's
    // key is the one roomgate moves.
    let old_addr = stack.backends.iter().find(|b| b.id == old).unwrap().addr;
    assert_eq!(export(old_addr, room, None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(export(old_addr, room, Some(HANDOFF_TOKEN)).await, (StatusCode::OK, r#"{"count": 7}"#.into()));

    // The drain runs while the members, as client.js does, see their socket end and reconnect
    // after client.js's first backoff.
    let started = Instant::now();
    let ((_, drain_took), rejoined) = tokio::join!(
        drain_with_handoff(&stack, &old),
        futures_util::future::join_all(members.iter_mut().map(|tab| async move {
            let code = tab.closed().await;
            let tries = tab.reconnect_like_client_js().await;
            (code, tries, started.elapsed())
        }))
    );
    kill(&mut stack, &old).await;
    let new = members[0].backend.clone();
    assert_ne!(new, old);
    for ((code, _, _), tab) in rejoined.iter().zip(&members) {
        assert_eq!(*code, Some(1012), "the old owner's socket closes with 1012");
        assert_eq!((tab.backend.as_str(), tab.count), (new.as_str(), COUNT), "the new owner has the count");
    }
    // The room goes on there, without its old process.
    assert_eq!(members[0].increment().await, COUNT + 1);
    for tab in members.iter_mut() {
        tab.wait_count(COUNT + 1).await;
    }
    let gap = moved_once_and_never_split(&stack, room, &old, &new).await;
    let times: Vec<_> = rejoined.iter().map(|(_, tries, t)| (*tries, *t)).collect();
    println!(
        "djust hand-off {old} -> {new}: drain --handoff --wait {drain_took:?}; (tries, remounted at) {times:?}; no member between the last leave on {old} and the first join on {new}: {gap:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_tabs_with_client_js_see_the_count_on_the_new_owner_after_a_drain_with_handoff() {
    if !common::require(&[common::Tool::RedisServer, common::Tool::DjustVenv, common::Tool::Chromium]) {
        return;
    }
    let mut stack = Stack::start(3).await;
    let room = "web-handoff";
    let tabs = stack.browser_handoff(room, 3, COUNT).await;
    let old = tabs.ready["backend"].as_str().unwrap().to_owned();
    let (_, drain_took) = drain_with_handoff(&stack, &old).await;
    kill(&mut stack, &old).await;
    let report = tabs.finish().await;
    let new = report["after"][0]["backend"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    for (i, tab) in report["after"].as_array().unwrap().iter().enumerate() {
        assert_eq!(tab["backend"], new.as_str(), "tab {i}: {report}");
        assert_eq!(tab["count"], COUNT, "tab {i} shows the count on the new owner: {report}");
        // One close, roomgate's 1012, then client.js's own reconnect on the same page.
        assert_eq!(tab["sockets"], serde_json::json!({"opened": 2, "closes": [1012]}), "tab {i}: {report}");
    }
    for (i, tab) in report["after_click"].as_array().unwrap().iter().enumerate() {
        assert_eq!((&tab["backend"], &tab["count"]), (&new.as_str().into(), &(COUNT + 1).into()), "tab {i}: {report}");
    }
    let gap = moved_once_and_never_split(&stack, room, &old, &new).await;
    println!("chromium hand-off {old} -> {new}: drain --handoff --wait {drain_took:?}; gap {gap:?}; {report}");
}

/// The hand-off package's own tests (`integrations/djust`), and `tests/djust/handoff_check.py`: a
/// room's counter survives export from one real djust backend and import into another (no proxy).
#[test]
fn the_handoff_package_tests_and_a_handoff_between_two_djust_backends_pass() {
    if !common::require(&[common::Tool::DjustVenv]) {
        return;
    }
    let python = common::require::djust_venv().clone().unwrap();
    for args in [&["-m", "unittest", "discover", "integrations/djust"][..], &["tests/djust/handoff_check.py"]] {
        let out =
            std::process::Command::new(&python).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "python {args:?} failed:\n{stdout}{stderr}");
    }
}
