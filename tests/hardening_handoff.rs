//! Hand-off hardening (issue 32, item 8): the import's answer is read to a bound, and a new
//! owner answering more is the new owner's failure, not roomgate's memory.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::rooms::RoomBackend;
use common::*;

const ROUTES: &str = "[[routes]]\nprefix = \"/\"\nmode = \"room\"\nkeys = [\"query:room\"]\n";

fn metric(text: &str, series: &str) -> u64 {
    text.lines().find(|l| l.starts_with(series)).and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).unwrap_or(0.0)
        as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_answered_with_a_huge_body_fails_the_move_without_reading_it() {
    let mut backends = Vec::new();
    for i in 0..2 {
        backends.push(RoomBackend::start(&format!("b{i}")).await);
    }
    let list: Vec<(&str, std::net::SocketAddr)> = backends.iter().map(|b| (b.id.as_str(), b.addr)).collect();
    let proxy = Proxy::start(&config(&list, ROUTES, "[drain]\nspread = \"0s\"\n[handoff]\n")).await;
    let mut ws = ws_connect(&proxy.ws_url("/live/?room=r1"), &[]).await;
    let hello = next_text(&mut ws).await;
    let old = hello.split(':').nth(1).unwrap().to_owned();
    let new_b = backends.iter().find(|b| b.id != old).unwrap();
    // 64 MiB: read whole (as before), it is a successful move and 64 MiB of roomgate's memory.
    new_b.set_import_answer_len(64 * 1024 * 1024);

    admin_post(&proxy, &format!("/admin/backends/{old}/drain"), r#"{"handoff": true}"#).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while admin_get(&proxy, "/admin/status").await["handoff"]["done"].as_u64() < Some(1) {
        assert!(tokio::time::Instant::now() < deadline, "the move never ended");
        tokio::task::yield_now().await;
    }
    let (_, _, text) = get(&http_client(), &proxy.admin_url("/metrics"), &[]).await;
    assert_eq!(new_b.calls().len(), 1, "one import on the new owner");
    assert_eq!(metric(&text, "roomgate_handoff_failures_total{step=\"import\"}"), 1, "{text}");
    assert_eq!(metric(&text, "roomgate_handoffs_total{outcome=\"moved\"}"), 0, "{text}");
}
