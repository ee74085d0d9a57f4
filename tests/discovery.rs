//! Backends discovered from DNS SRV records: a test DNS server answers for a headless Service
//! whose targets are real test backends; pods come, go, restart at a new address, DNS fails; no
//! open WebSocket is dropped by any of it, and a file reload keeps the discovered backends.

#![allow(clippy::unwrap_used)]

mod common;
#[path = "common/dns.rs"]
mod dns;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use dns::{Mode, TestDns};
use futures_util::SinkExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

const SRV: &str = "_http._tcp.game.test";

fn discovery(dns: SocketAddr, interval: &str) -> String {
    format!("[[discovery]]\nsrv = \"{SRV}\"\ninterval = \"{interval}\"\ntimeout = \"300ms\"\nresolver = \"{dns}\"\n")
}

/// The SRV target of pod `id`, as a StatefulSet's headless Service names it.
fn target(id: &str) -> String {
    format!("{id}.game.test")
}

fn pods(list: &[&TestBackend]) -> Vec<(String, SocketAddr)> {
    list.iter().map(|b| (target(&b.id), b.addr)).collect()
}

fn answer(dns: &TestDns, list: &[&TestBackend]) {
    let pods = pods(list);
    let borrowed: Vec<(&str, SocketAddr)> = pods.iter().map(|(t, a)| (t.as_str(), *a)).collect();
    dns.set(&borrowed);
}

/// Ids of the backends that take part in placement (not leaving), sorted.
fn active(status: &Value) -> Vec<String> {
    let mut ids: Vec<String> = status["backends"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["removed"] == false)
        .map(|b| b["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn backend<'a>(status: &'a Value, id: &str) -> Option<&'a Value> {
    status["backends"].as_array().unwrap().iter().find(|b| b["id"] == id)
}

/// Waits (bounded) until the admin status satisfies `cond`; checks again after every resolution
/// and every snapshot change.
async fn wait_status(proxy: &Proxy, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
    let mut attempts = proxy.control.discovery().attempts();
    let mut epochs = proxy.control.epochs();
    let deadline = Instant::now() + LIMIT;
    loop {
        let status = admin_get(proxy, "/admin/status").await;
        if cond(&status) {
            return status;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "{what}: not reached in time: {status:#}");
        let _ = tokio::time::timeout(left, async {
            tokio::select! {
                _ = attempts.changed() => {}
                _ = epochs.changed() => {}
            }
        })
        .await;
    }
}

async fn join(proxy: &Proxy, room: &str) -> (Ws, String) {
    let mut ws = ws_connect(&proxy.ws_url(&format!("/ws/live/?room={room}")), &[]).await;
    let owner = ws_backend(&mut ws).await;
    (ws, owner)
}

/// Opens rooms `{prefix}0`, `{prefix}1`, ... until one is owned by `owner`.
async fn room_on(proxy: &Proxy, owner: &str, prefix: &str) -> (String, Ws) {
    for i in 0..60 {
        let room = format!("{prefix}{i}");
        let (ws, got) = join(proxy, &room).await;
        if got == owner {
            return (room, ws);
        }
    }
    panic!("no room placed on {owner}");
}

async fn still_open(ws: &mut Ws) {
    ws.send(Message::text("ping")).await.unwrap();
    assert_eq!(next(ws).await, Message::text("ping"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_target_gets_new_rooms_and_no_socket_drops() {
    let (g0, g1) = (TestBackend::start("game-0").await, TestBackend::start("game-1").await);
    let dns = TestDns::start(SRV).await;
    answer(&dns, &[&g0]);
    let proxy = Proxy::start(&config(&[], ROUTES, &discovery(dns.addr, "100ms"))).await;
    wait_status(&proxy, "game-0 discovered", |s| active(s) == ["game-0"]).await;
    let mut open = Vec::new();
    for i in 0..6 {
        let (ws, owner) = join(&proxy, &format!("live{i}")).await;
        assert_eq!(owner, "game-0", "the only backend");
        open.push(ws);
    }
    answer(&dns, &[&g0, &g1]);
    let status = wait_status(&proxy, "game-1 added", |s| active(s) == ["game-0", "game-1"]).await;
    assert_eq!(status["discovery"][0]["backends"].as_array().unwrap().len(), 2, "{status:#}");
    for ws in &mut open {
        still_open(ws).await;
    }
    let (_, mut ws) = room_on(&proxy, "game-1", "new").await;
    still_open(&mut ws).await;
    drop(ws);
    let (_, owner) = join(&proxy, "live0").await;
    assert_eq!(owner, "game-0", "a live room keeps its owner");
    // Sockets the test no longer reads would hold the shutdown for `websocket_close`.
    drop(open);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_target_drains_and_leaves_once_empty() {
    let (g0, g1) = (TestBackend::start("game-0").await, TestBackend::start("game-1").await);
    let dns = TestDns::start(SRV).await;
    answer(&dns, &[&g0, &g1]);
    let extra = format!("{}[drain]\ndeadline = \"60s\"\n", discovery(dns.addr, "100ms"));
    let proxy = Proxy::start(&config(&[], ROUTES, &extra)).await;
    wait_status(&proxy, "both discovered", |s| active(s) == ["game-0", "game-1"]).await;
    let (room, mut ws) = room_on(&proxy, "game-1", "r").await;
    answer(&dns, &[&g0]);
    let status = wait_status(&proxy, "game-1 removed", |s| active(s) == ["game-0"]).await;
    let b1 = backend(&status, "game-1").unwrap();
    assert_eq!((b1["state"].as_str(), b1["sockets"].as_u64()), (Some("draining"), Some(1)), "{status:#}");
    still_open(&mut ws).await;
    let (mut joined, owner) = join(&proxy, &room).await;
    assert_eq!(owner, "game-1", "its live room still reaches it: never split");
    for i in 0..20 {
        let (_, owner) = join(&proxy, &format!("fresh{i}")).await;
        assert_eq!(owner, "game-0", "no new room goes to a leaving backend");
    }
    still_open(&mut ws).await;
    joined.close(None).await.unwrap();
    ws.close(None).await.unwrap();
    wait_status(&proxy, "game-1 dropped once empty", |s| backend(s, "game-1").is_none()).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_failures_keep_the_last_good_set_and_are_reported() {
    let g0 = TestBackend::start("game-0").await;
    let dns = TestDns::start(SRV).await;
    answer(&dns, &[&g0]);
    let proxy = Proxy::start(&config(&[], ROUTES, &discovery(dns.addr, "100ms"))).await;
    let ok = wait_status(&proxy, "discovered", |s| active(s) == ["game-0"]).await;
    assert!(ok["discovery"][0]["last_ok"].as_u64().unwrap() > 1_600_000_000, "{ok:#}");
    assert_eq!(ok["discovery"][0]["resolver"], dns.addr.to_string());
    let error = |s: &Value| s["discovery"][0]["last_error"].as_str().unwrap_or("").to_owned();
    let client = http_client();
    for (mode, needle) in
        [(Mode::Silent, "no answer within"), (Mode::NxDomain, "no SRV records"), (Mode::Empty, "no SRV records")]
    {
        answer(&dns, &[&g0]);
        wait_status(&proxy, "answering", |s| s["discovery"][0]["last_error"].is_null()).await;
        dns.mode(mode);
        let status = wait_status(&proxy, needle, |s| error(s).contains(needle)).await;
        assert_eq!(active(&status), ["game-0"], "{mode:?}: the last good set stays");
        assert_eq!(status["discovery"][0]["backends"][0]["id"], "game-0", "{status:#}");
        let (_, headers, _) = get(&client, &proxy.url("/room/r1/"), &[]).await;
        assert_eq!(headers["x-backend"], "game-0");
    }
    let metrics = get(&client, &proxy.admin_url("/metrics"), &[]).await.2;
    for outcome in ["ok", "timeout", "empty"] {
        let series = format!("roomgate_discovery_resolutions_total{{srv=\"{SRV}\",outcome=\"{outcome}\"}}");
        assert!(metrics.contains(&series), "{series} missing:\n{metrics}");
    }
    assert!(metrics.contains(&format!("roomgate_discovered_backends{{srv=\"{SRV}\"}} 1")), "{metrics}");
    answer(&dns, &[&g0]);
    wait_status(&proxy, "answering", |s| s["discovery"][0]["last_error"].is_null()).await;
    dns.stop();
    let status = wait_status(&proxy, "server down", |s| !error(s).is_empty()).await;
    assert_eq!(active(&status), ["game-0"], "{status:#}");
    let (_, headers, _) = get(&client, &proxy.url("/room/r2/"), &[]).await;
    assert_eq!(headers["x-backend"], "game-0");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_pod_keeps_its_id_and_its_rooms() {
    let (g0, g1) = (TestBackend::start("game-0").await, TestBackend::start("game-1").await);
    let dns = TestDns::start(SRV).await;
    answer(&dns, &[&g0, &g1]);
    let proxy = Proxy::start(&config(&[], ROUTES, &discovery(dns.addr, "100ms"))).await;
    wait_status(&proxy, "both discovered", |s| active(s) == ["game-0", "game-1"]).await;
    let (room, ws) = room_on(&proxy, "game-0", "p").await;
    drop(ws);
    // The pod restarts at a new address: first it leaves the Service (not ready), then it is back.
    g0.kill();
    answer(&dns, &[&g1]);
    wait_status(&proxy, "game-0 left", |s| active(s) == ["game-1"]).await;
    let g0 = TestBackend::start("game-0").await;
    answer(&dns, &[&g0, &g1]);
    let addr = g0.addr.to_string();
    let status = wait_status(&proxy, "game-0 back", |s| {
        backend(s, "game-0").is_some_and(|b| b["addr"] == addr.as_str() && b["state"] == "active")
    })
    .await;
    assert_eq!(active(&status), ["game-0", "game-1"]);
    let (_, owner) = join(&proxy, &room).await;
    assert_eq!(owner, "game-0", "the room is still game-0's");
    assert!(g0.accepted.load(std::sync::atomic::Ordering::Relaxed) > 0, "at its new address");
    // And a plain address change, without leaving: the same backend, at its new address.
    let (room, mut ws) = room_on(&proxy, "game-1", "q").await;
    let g1b = TestBackend::start("game-1").await;
    answer(&dns, &[&g0, &g1b]);
    let addr = g1b.addr.to_string();
    wait_status(&proxy, "game-1 moved", |s| backend(s, "game-1").is_some_and(|b| b["addr"] == addr.as_str())).await;
    still_open(&mut ws).await;
    ws.close(None).await.unwrap();
    let (_, owner) = join(&proxy, &room).await;
    assert_eq!(owner, "game-1");
    assert!(g1b.accepted.load(std::sync::atomic::Ordering::Relaxed) > 0, "new sockets reach the new address");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_reload_keeps_discovered_backends_and_the_file_wins_a_clash() {
    let (s0, s1) = (TestBackend::start("s0").await, TestBackend::start("s1").await);
    let (d0, d1) = (TestBackend::start("d0").await, TestBackend::start("d1").await);
    let impostor = TestBackend::start("s0").await;
    let dns = TestDns::start(SRV).await;
    answer(&dns, &[&d0]);
    let section = discovery(dns.addr, "100ms");
    let proxy = Proxy::start(&config(&[("s0", s0.addr)], ROUTES, &section)).await;
    wait_status(&proxy, "static and discovered", |s| active(s) == ["d0", "s0"]).await;
    let (_, mut on_d0) = room_on(&proxy, "d0", "a").await;
    proxy.write_config(&config(&[("s0", s0.addr), ("s1", s1.addr)], ROUTES, &section));
    let status = wait_status(&proxy, "reloaded", |s| active(s).contains(&"s1".to_owned())).await;
    assert_eq!(active(&status), ["d0", "s0", "s1"], "the reload kept d0: {status:#}");
    still_open(&mut on_d0).await;
    answer(&dns, &[&d0, &d1, &impostor]);
    let status = wait_status(&proxy, "d1 added", |s| active(s).contains(&"d1".to_owned())).await;
    assert_eq!(active(&status), ["d0", "d1", "s0", "s1"]);
    assert_eq!(backend(&status, "s0").unwrap()["addr"], s0.addr.to_string(), "the file's s0 wins");
    assert_eq!(status["discovery"][0]["shadowed"][0]["id"], "s0", "{status:#}");
    for owner in ["s1", "d1"] {
        let (_, mut ws) = room_on(&proxy, owner, owner).await;
        still_open(&mut ws).await;
    }
    // Without the [[discovery]] entry, its backends leave like backends removed from the file.
    proxy.write_config(&config(&[("s0", s0.addr), ("s1", s1.addr)], ROUTES, ""));
    let status = wait_status(&proxy, "discovery removed", |s| active(s) == ["s0", "s1"]).await;
    assert_eq!(status["discovery"], serde_json::json!([]));
    still_open(&mut on_d0).await;
    drop(on_d0);
    proxy.shutdown().await;
}

#[tokio::test]
async fn target_addresses_are_looked_up_when_the_answer_has_none() {
    let g0 = TestBackend::start("game-0").await;
    let dns = TestDns::start(SRV).await;
    dns.additional(false);
    answer(&dns, &[&g0]);
    let proxy = Proxy::start(&config(&[], ROUTES, &discovery(dns.addr, "100ms"))).await;
    let status = wait_status(&proxy, "discovered", |s| active(s) == ["game-0"]).await;
    assert_eq!(backend(&status, "game-0").unwrap()["addr"], g0.addr.to_string());
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_answer_is_in_force_before_serving() {
    let g0 = TestBackend::start("game-0").await;
    let dns = TestDns::start(SRV).await;
    answer(&dns, &[&g0]);
    let proxy = Proxy::start(&config(&[], ROUTES, &discovery(dns.addr, "5s"))).await;
    // No wait: the listener is served once the first resolution is in force.
    let (status, headers, _) = get(&http_client(), &proxy.url("/room/first/"), &[]).await;
    assert_eq!((status.as_u16(), headers["x-backend"].to_str().unwrap()), (200, "game-0"));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_dns_at_start_serves_the_file_backends_and_keeps_trying() {
    let (s0, d0) = (TestBackend::start("s0").await, TestBackend::start("d0").await);
    let dns = TestDns::start(SRV).await;
    answer(&dns, &[&d0]);
    dns.mode(Mode::Silent);
    let proxy = Proxy::start(&config(&[("s0", s0.addr)], ROUTES, &discovery(dns.addr, "100ms"))).await;
    let (status, headers, _) = get(&http_client(), &proxy.url("/room/x/"), &[]).await;
    assert_eq!(
        (status.as_u16(), headers["x-backend"].to_str().unwrap()),
        (200, "s0"),
        "served after the first timeout"
    );
    answer(&dns, &[&d0]);
    let status = wait_status(&proxy, "d0 once DNS answers", |s| active(s) == ["d0", "s0"]).await;
    assert!(status["discovery"][0]["last_error"].is_null(), "{status:#}");
    proxy.shutdown().await;
}

/// The figure behind the docs: time from a DNS change (a pod added) to a new room reaching the
/// new backend, for two intervals. `cargo test --test discovery time_from -- --nocapture` prints it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_from_a_dns_change_to_new_rooms() {
    use roomgate::placement::{Algorithm, Placement};
    for (interval, period) in [("1s", Duration::from_secs(1)), ("100ms", Duration::from_millis(100))] {
        let dns = TestDns::start(SRV).await;
        let mut pods = vec![TestBackend::start("game-0").await];
        answer(&dns, &pods.iter().collect::<Vec<_>>());
        let proxy = Proxy::start(&config(&[], ROUTES, &discovery(dns.addr, interval))).await;
        wait_status(&proxy, "first set", |s| active(s) == ["game-0"]).await;
        let client = http_client();
        let mut took = Vec::new();
        for k in 1..=5 {
            let pod = TestBackend::start(&format!("game-{k}")).await;
            let ids: Vec<String> = pods.iter().chain([&pod]).map(|b| b.id.clone()).collect();
            // A room that the new set places on the new pod.
            let placement = Placement::build(Algorithm::Rendezvous, 160, &ids);
            let room =
                (0..1000).map(|i| format!("m{k}-{i}")).find(|r| placement.place(r.as_bytes()) == Some(k)).unwrap();
            pods.push(pod);
            let epoch = *proxy.control.epochs().borrow();
            // The last change was seen right after a resolution: shift the next one to 10%, 30%,
            // ... 90% of the way to the next round, so the samples span the interval (a
            // measurement offset, not a wait for anything).
            tokio::time::sleep(period * (2 * k as u32 - 1) / 10).await;
            let started = Instant::now();
            answer(&dns, &pods.iter().collect::<Vec<_>>());
            proxy.wait_epoch(epoch + 1).await;
            let (_, headers, _) = get(&client, &proxy.url(&format!("/room/{room}/")), &[]).await;
            took.push(started.elapsed());
            assert_eq!(headers["x-backend"], ids[k].as_str());
        }
        let ms: Vec<f64> = took.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        let mean = ms.iter().sum::<f64>() / ms.len() as f64;
        let max = ms.iter().copied().fold(0.0, f64::max);
        let min = ms.iter().copied().fold(f64::MAX, f64::min);
        println!(
            "interval {interval}: DNS change to a new room on the new pod: min {min:.0} ms, mean {mean:.0} ms, max {max:.0} ms ({} samples)",
            ms.len()
        );
        proxy.shutdown().await;
    }
}
