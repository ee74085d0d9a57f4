//! roomgate under a service manager: systemd's notify protocol (`Type=notify` in
//! `deploy/debian/roomgate.service`), spoken to a `NOTIFY_SOCKET` the test binds as systemd would.
//! `READY=1` comes once every listener accepts connections, `RELOADING=1` (with `MONOTONIC_USEC`)
//! then `READY=1` around a SIGHUP reload, `STOPPING=1` on SIGTERM, and the exit is clean.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use tokio::net::UnixDatagram;

/// The next datagram on the notify socket, as text.
async fn next_state(socket: &UnixDatagram) -> String {
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(LIMIT, socket.recv(&mut buf)).await.expect("a notification in time").unwrap();
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

fn has(state: &str, line: &str) -> bool {
    state.lines().any(|l| l == line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_reloading_and_stopping_are_told_to_the_service_manager() {
    let backends = backends(1).await;
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&notify_path).unwrap();
    let path = dir.path().join("roomgate.toml");
    let extra = "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
                 [shutdown]\ngrace = \"2s\"\n[reload]\nwatch = false\n";
    let text = config(&backend_list(&backends), ROUTES, extra).replace("level = \"warn\"", "level = \"info\"");
    std::fs::write(&path, &text).unwrap();
    let (mut child, addr, admin, _log) =
        spawn_roomgate_with_env(&path, &[("NOTIFY_SOCKET", notify_path.as_os_str())]).await;

    let ready = next_state(&socket).await;
    assert!(has(&ready, "READY=1"), "{ready:?}");
    // Ready means every listener takes connections: the proxy and the admin API answer.
    let client = http_client();
    let (status, _, _) = get(&client, &format!("http://{admin}/readyz"), &[]).await;
    assert_eq!(status, 200);
    let (status, _, _) = get(&client, &format!("http://{addr}/lobby"), &[]).await;
    assert_eq!(status, 200);

    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    let reloading = next_state(&socket).await;
    assert!(has(&reloading, "RELOADING=1"), "{reloading:?}");
    // systemd 253 and later fail a reload told without the time it began.
    assert!(reloading.lines().any(|l| l.strip_prefix("MONOTONIC_USEC=").is_some_and(|v| v.parse::<u64>().is_ok())));
    let ready = next_state(&socket).await;
    assert!(has(&ready, "READY=1") && ready.contains("STATUS=serving"), "{ready:?}");

    // A reload that fails is still followed by READY=1 (the old config stays in force), and says so.
    std::fs::write(&path, "this is not toml").unwrap();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
    assert!(has(&next_state(&socket).await, "RELOADING=1"));
    let ready = next_state(&socket).await;
    assert!(has(&ready, "READY=1") && ready.contains("reload failed"), "{ready:?}");

    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let stopping = next_state(&socket).await;
    assert!(has(&stopping, "STOPPING=1"), "{stopping:?}");
    let status = tokio::time::timeout(LIMIT + Duration::from_secs(2), child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
}
