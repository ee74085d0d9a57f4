//! The real djust app (`tests/djust/app`, djust 1.2.6) as test backends: its pinned venv, its
//! uvicorn processes, and a [`Stack`] of Redis, several of them and roomgate in front, with room
//! hand-off on (`[handoff]` and the app sharing [`HANDOFF_TOKEN`]).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::super::redis_server::Redis;
use super::super::{Proxy, config};
use super::tab::Tab;

/// Every wait on the djust app (its processes, its sockets, a browser) is bounded by this.
pub const WAIT: Duration = Duration::from_secs(20);

/// roomgate's `[handoff] token` in every stack, and the app's `ROOMGATE_HANDOFF_TOKEN`.
pub const HANDOFF_TOKEN: &str = "djust-e2e-handoff-token-5f1c9a";

pub(super) fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's python, created on first use (`require::djust_venv`; a test that gets here has
/// called `require(&[Tool::DjustVenv, ..])`).
pub(super) fn python() -> PathBuf {
    super::super::require::djust_venv().clone().unwrap_or_else(|missing| panic!("{missing}"))
}

/// Reads `child`'s stdout until a line starting with `prefix`; returns the rest of that line.
async fn wait_line(child: &mut Child, prefix: &str, what: &str) -> String {
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let found = tokio::time::timeout(WAIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rest) = line.find(prefix).map(|i| line[i + prefix.len()..].to_owned()) {
                return Some(rest);
            }
        }
        None
    })
    .await;
    // Keep draining so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    match found {
        Ok(Some(rest)) => rest,
        _ => panic!("{what} did not start (no {prefix:?} line within {WAIT:?})"),
    }
}

/// One djust backend process (`tests/djust/serve.py`).
pub struct Backend {
    pub id: String,
    pub addr: SocketAddr,
    child: Child,
}

impl Backend {
    async fn start(id: &str, redis: &Redis, prefix: &str) -> Backend {
        let mut child = Command::new(python())
            .arg(repo().join("tests/djust/serve.py"))
            .env("BACKEND_ID", id)
            .env("REDIS_SOCKET", redis.socket())
            .env("LOBBY_PREFIX", prefix)
            .env("DJUST_TRUSTED_PROXY_COUNT", "1")
            .env("ROOMGATE_HANDOFF_TOKEN", HANDOFF_TOKEN)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let port: u16 = wait_line(&mut child, "LISTENING ", id).await.trim().parse().unwrap();
        Backend { id: id.to_owned(), addr: SocketAddr::from(([127, 0, 0, 1], port)), child }
    }

    /// SIGKILL, as a crashed process.
    pub async fn kill(&mut self) {
        self.child.start_kill().unwrap();
        let _ = tokio::time::timeout(WAIT, self.child.wait()).await;
    }
}

/// The app's routes: its pages by path, its sockets by djust's mount frame, the rest shared.
const APP_ROUTES: &str = r#"
[[routes]]
prefix = "/room/"
mode = "room"
keys = ["path:^/room/(?P<room>[^/]+)/"]
on_missing = "reject"

[[routes]]
prefix = "/ws/live/"
mode = "room"
keys = ["djust:^/room/(?P<room>[^/]+)/"]
on_missing = "shared"

[[routes]]
prefix = "/"
mode = "shared"
"#;

/// Redis, `n` djust backends and roomgate in front of them.
pub struct Stack {
    _redis: Redis,
    pub backends: Vec<Backend>,
    pub proxy: Proxy,
}

impl Stack {
    pub async fn start(n: usize) -> Stack {
        Self::start_with(n, "").await
    }

    /// With `extra` config sections for roomgate (`[handoff]` is there already).
    pub async fn start_with(n: usize, extra: &str) -> Stack {
        // The lobby's shared store: a private redis-server on a unix socket.
        let redis = Redis::start().await;
        let prefix = format!("e2e-{}:", std::process::id());
        let backends = futures_util::future::join_all((0..n).map(|i| {
            let id = format!("game-{i}");
            let (redis, prefix) = (&redis, &prefix);
            async move { Backend::start(&id, redis, prefix).await }
        }))
        .await;
        let list: Vec<(&str, SocketAddr)> = backends.iter().map(|b| (b.id.as_str(), b.addr)).collect();
        let extra = format!("[handoff]\ntoken = \"{HANDOFF_TOKEN}\"\n{extra}");
        let proxy = Proxy::start(&config(&list, APP_ROUTES, &extra)).await;
        Stack { _redis: redis, backends, proxy }
    }

    /// The room's owner according to roomgate (placing the room if it is new), by a page load.
    pub async fn owner(&self, room: &str) -> String {
        Tab::new(self.proxy.addr, local(0)).load(room).await
    }

    /// Rooms `0..` whose owners differ, one per backend in `owners` order of discovery.
    pub async fn rooms_on_distinct_backends(&self, count: usize, tag: &str) -> Vec<(String, String)> {
        let mut seen = BTreeMap::new();
        for i in 0..200 {
            let room = format!("{tag}{i}");
            let owner = self.owner(&room).await;
            seen.entry(owner.clone()).or_insert(room);
            if seen.len() == count {
                break;
            }
        }
        assert_eq!(seen.len(), count, "could not find rooms on {count} backends");
        seen.into_iter().map(|(owner, room)| (room, owner)).collect()
    }

    /// Runs `tests/djust/browser.py`: headless Chromium with djust's real client.js opens a tab on
    /// each room through roomgate and clicks `+1`. Returns its report (one JSON line).
    pub async fn browser(&self, room_a: &str, room_b: &str) -> serde_json::Value {
        let out = tokio::time::timeout(
            Duration::from_secs(90),
            Command::new(python())
                .arg(repo().join("tests/djust/browser.py"))
                .arg(format!("http://{}", self.proxy.addr))
                .arg(room_a)
                .arg(room_b)
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("browser.py took over 90 s")
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "browser.py failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
    }
}

/// Loopback address number `n` (127.1.x.y): one per simulated user, so that djust's per-address
/// limit counts users, not roomgate.
pub fn local(n: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 1, (n / 250) as u8, (n % 250 + 1) as u8)
}
