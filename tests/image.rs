//! The container image, run the way deploy/kubernetes runs it: read-only root, uid 65532, every
//! capability dropped, no new privileges, and a mounted config; here with `--network host`, so
//! that the test's backends and clients on the host's loopback reach it and it reaches them.
//!
//! The image is the Dockerfile's runtime stage around the binary these tests run
//! (`tools/image runtime`, seconds), or the image `ROOMGATE_IMAGE` names. The full two-stage build
//! (`tools/image build`, minutes) is the ignored test `the_full_two_stage_build`:
//! `tools/test --test image -- --ignored`.

#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use common::require::{Tool, require};
use common::*;
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;

/// Runs `cmd`; its stdout, trimmed, or a panic with what it printed.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn tools_image(args: &[&str]) -> String {
    let out = run(Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tools/image")).args(args));
    out.lines().last().unwrap_or_default().to_owned()
}

fn podman(args: &[&str]) -> Command {
    let mut cmd = Command::new("podman");
    cmd.args(args);
    cmd
}

/// The flags `podman run` needs on this machine (`tools/image podman-flags`).
fn podman_flags() -> Vec<String> {
    let out = run(Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tools/image")).arg("podman-flags"));
    out.lines().map(str::to_owned).collect()
}

/// A container removed when the test ends, however it ends.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman").args(["rm", "--force", "--time", "0", &self.0]).output();
    }
}

/// An image this test built, removed when the test ends (its layers stay shared with the rest).
struct Built(String);

impl Drop for Built {
    fn drop(&mut self) {
        let _ = Command::new("podman").args(["rmi", "--force", &self.0]).output();
    }
}

/// The image under test: `ROOMGATE_IMAGE`, else the runtime stage around this build's binary.
fn image() -> (String, Option<Built>) {
    if let Ok(image) = std::env::var("ROOMGATE_IMAGE") {
        return (image, None);
    }
    let tag = format!("localhost/roomgate:test-{}", std::process::id());
    let built = tools_image(&["runtime", env!("CARGO_BIN_EXE_roomgate"), "--tag", &tag]);
    (built.clone(), Some(Built(built)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_serves_drains_and_stops_as_the_manifests_run_it() {
    if !require(&[Tool::Podman, Tool::Mmdebstrap]) {
        return;
    }
    let (image, _built) = image();
    serves_drains_and_stops(&image).await;
}

/// `tools/image build`: both stages from the Dockerfile, cargo and all (about 4 minutes on two
/// cores), then the same checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the long one: the full two-stage build, minutes; tools/test --test image -- --ignored"]
async fn the_full_two_stage_build() {
    if !require(&[Tool::Podman, Tool::Mmdebstrap]) {
        return;
    }
    let tag = format!("localhost/roomgate:full-{}", std::process::id());
    let built = tools_image(&["build", "--tag", &tag]);
    let _built = Built(built.clone());
    let size = run(Command::new("podman").args(["image", "inspect", "--format", "{{.Size}}", &built]));
    eprintln!("{built}: {size} bytes");
    serves_drains_and_stops(&built).await;
}

async fn serves_drains_and_stops(image: &str) {
    // What the image is on its own: uid 65532, its default config listening on every address.
    let user = run(Command::new("podman").args(["image", "inspect", "--format", "{{.Config.User}}", image]));
    assert_eq!(user, "65532:65532");
    let flags = podman_flags();
    let checked = run(Command::new("podman")
        .arg("run")
        .args(&flags)
        .args(["--rm", image, "check"])
        .args(["--config", "/etc/roomgate/roomgate.toml"]));
    assert!(checked.contains("listen: 0.0.0.0:8080"), "{checked}");

    let backends = backends(2).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("roomgate.toml");
    let extra = "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[shutdown]\ngrace = \"5s\"\n";
    std::fs::write(
        &path,
        config(&backend_list(&backends), ROUTES, extra).replace("level = \"warn\"", "level = \"info\""),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let id = run(Command::new("podman").arg("run").args(&flags).args([
        "--detach",
        "--network=host",
        "--read-only",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
        "--user=65532:65532",
        &format!("--volume={}:/etc/roomgate/roomgate.toml:ro", path.display()),
        image,
    ]));
    let container = Container(id);
    let mut logs = tokio::process::Command::new("podman")
        .args(["logs", "--follow", &container.0])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (addr, admin, _log) = listening(logs.stderr.take().unwrap()).await;

    // The probes answer from the host.
    let client = http_client();
    for probe in ["/readyz", "/healthz"] {
        let (status, _, body) = get(&client, &format!("http://{admin}{probe}"), &[]).await;
        assert_eq!(status, 200, "{probe}: {body}");
    }
    // A room is proxied to a backend on the host, its page and its socket alike.
    let (status, headers, _) = get(&client, &format!("http://{addr}/room/r1/"), &[]).await;
    assert_eq!(status, 200);
    let page_backend = headers["x-backend"].to_str().unwrap().to_owned();
    let mut ws = ws_connect(&format!("ws://{addr}/ws/live/?room=r1"), &[]).await;
    assert_eq!(ws_backend(&mut ws).await, page_backend);

    // roomgate drain, from inside the container, as an operator would with kubectl exec.
    run(&mut podman(&["exec", &container.0, "roomgate", "drain", &page_backend, "--admin", &admin]));
    let (_, _, status) = get(&client, &format!("http://{admin}/admin/status"), &[]).await;
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let drained = status["backends"].as_array().unwrap().iter().find(|b| b["id"] == page_backend.as_str()).unwrap();
    assert_eq!(drained["state"], "draining", "{status}");
    // The live room stays where it is while its backend drains.
    ws.send(Message::text("hi")).await.unwrap();
    assert_eq!(next(&mut ws).await, Message::text("hi"));

    // SIGTERM: the open WebSocket gets 1001 and roomgate exits 0.
    run(&mut podman(&["kill", "--signal", "TERM", &container.0]));
    assert_eq!(close_code(&mut ws).await, Some(1001));
    let exit = run(&mut podman(&["wait", &container.0]));
    assert_eq!(exit, "0", "roomgate's exit status in the container");
}
