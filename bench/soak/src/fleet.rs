//! The fleet under test, all real processes on loopback: one private redis-server (on a unix
//! socket), four backends (this binary's `backend` subcommand; the fourth behind the fault relay)
//! and two roomgate replicas on the Redis directory with hand-off. Starting, signalling, restarting
//! and reconfiguring them; readiness is always polled, never slept for.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};

use crate::clock::now_us;
use crate::http;
use crate::judge::Judge;
use crate::relay::Relay;

pub const BACKENDS: usize = 4;
pub const REPLICAS: usize = 2;
/// roomgate's `timeouts.websocket_close` in the soak's config.
pub const WEBSOCKET_CLOSE: Duration = Duration::from_secs(2);
/// The longest any process gets to start or stop.
const START_LIMIT: Duration = Duration::from_secs(20);

pub struct Backend {
    pub id: String,
    /// Where it listens (the same port across restarts).
    pub addr: SocketAddr,
    child: Option<Child>,
    pub stopped: bool,
}

pub struct Replica {
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    incarnation: u32,
}

pub struct Fleet {
    pub dir: PathBuf,
    roomgate: PathBuf,
    redis_server: PathBuf,
    redis: Option<Child>,
    pub backends: Vec<Backend>,
    pub replicas: Vec<Replica>,
    pub relay: Relay,
    /// Which backends the config lists now.
    pub listed: [bool; BACKENDS],
    judge: Arc<Judge>,
    exe: PathBuf,
}

/// A loopback port free now (roomgate binds it itself a moment later).
fn free_port() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

async fn signal(pid: u32, sig: &str) -> Result<(), String> {
    let status = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().await;
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("kill -{sig} {pid}: {s}")),
        Err(e) => Err(format!("kill -{sig} {pid}: {e}")),
    }
}

impl Fleet {
    pub async fn start(
        dir: PathBuf,
        roomgate: PathBuf,
        redis_server: PathBuf,
        judge: Arc<Judge>,
    ) -> Result<Fleet, String> {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut backends = Vec::new();
        for i in 0..BACKENDS {
            let id = format!("b{}", i + 1);
            let mut b = Backend { id, addr: "127.0.0.1:0".parse().map_err(|_| "addr")?, child: None, stopped: false };
            start_backend(&exe, &mut b, &judge).await?;
            backends.push(b);
        }
        let relay = Relay::start(backends[BACKENDS - 1].addr).await.map_err(|e| format!("relay: {e}"))?;
        let mut replicas = Vec::new();
        for i in 0..REPLICAS {
            replicas.push(Replica {
                listen: free_port().map_err(|e| e.to_string())?,
                admin: free_port().map_err(|e| e.to_string())?,
                config: dir.join(format!("replica-{i}.toml")),
                log: dir.join(format!("replica-{i}.log")),
                child: None,
                incarnation: 0,
            });
        }
        let mut fleet = Fleet {
            dir,
            roomgate,
            redis_server,
            redis: None,
            backends,
            replicas,
            relay,
            listed: [true; BACKENDS],
            judge,
            exe,
        };
        fleet.start_redis().await?;
        for i in 0..REPLICAS {
            fleet.start_replica(i).await?;
        }
        Ok(fleet)
    }

    fn redis_socket(&self) -> PathBuf {
        self.dir.join("redis.sock")
    }

    pub async fn start_redis(&mut self) -> Result<(), String> {
        let mut child = Command::new(&self.redis_server)
            .args(["--port", "0", "--save", "", "--appendonly", "no", "--unixsocket"])
            .arg(self.redis_socket())
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.redis_server.display()))?;
        let stdout = child.stdout.take().ok_or("redis stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(START_LIMIT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("ready to accept connections") {
                    return true;
                }
            }
            false
        })
        .await;
        if ready != Ok(true) {
            return Err("redis-server did not start".into());
        }
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.redis = Some(child);
        Ok(())
    }

    pub async fn kill_redis(&mut self) {
        if let Some(mut child) = self.redis.take() {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(START_LIMIT, child.wait()).await;
        }
    }

    pub async fn flush_redis(&self) -> Result<(), String> {
        let work = async {
            let mut s = UnixStream::connect(self.redis_socket()).await.map_err(|e| e.to_string())?;
            s.write_all(b"*1\r\n$8\r\nFLUSHALL\r\n").await.map_err(|e| e.to_string())?;
            let mut reply = BufReader::new(s);
            let mut line = String::new();
            reply.read_line(&mut line).await.map_err(|e| e.to_string())?;
            if line.starts_with("+OK") { Ok(()) } else { Err(format!("FLUSHALL: {line:?}")) }
        };
        tokio::time::timeout(Duration::from_secs(5), work).await.map_err(|_| "FLUSHALL: no answer".to_owned())?
    }

    /// The config of replica `i` (the backends `listed` now).
    fn config(&self, i: usize) -> String {
        let r = &self.replicas[i];
        let mut c = format!(
            r#"[server]
listen = "{listen}"
workers = 1
[timeouts]
connect = "1s"
upstream_response = "10s"
websocket_close = "{close}s"
[upstream]
idle_timeout = "2s"
[log]
level = "info"
access = false
[shutdown]
grace = "5s"
[rooms]
linger = "30s"
[health]
path = "/healthz"
interval = "1s"
timeout = "500ms"
rise = 2
fall = 3
cooldown = "3s"
[drain]
deadline = "3s"
spread = "1s"
[admin]
listen = "{admin}"
[reload]
watch = false
[directory]
backend = "redis"
url = "redis+unix://{sock}"
refresh = "1s"
replica_id = "r{i}-{inc}"
[handoff]
timeout = "2s"
[[routes]]
prefix = "/"
mode = "room"
keys = ["query:room"]
"#,
            listen = r.listen,
            admin = r.admin,
            close = WEBSOCKET_CLOSE.as_secs(),
            sock = self.redis_socket().display(),
            inc = r.incarnation,
        );
        for (k, b) in self.backends.iter().enumerate() {
            if self.listed[k] {
                let addr = if k == BACKENDS - 1 { self.relay.addr } else { b.addr };
                c.push_str(&format!("[[backends]]\nid = \"{}\"\naddr = \"{addr}\"\n", b.id));
            }
        }
        c
    }

    pub async fn start_replica(&mut self, i: usize) -> Result<(), String> {
        self.replicas[i].incarnation += 1;
        let config = self.config(i);
        let r = &mut self.replicas[i];
        std::fs::write(&r.config, config).map_err(|e| format!("{}: {e}", r.config.display()))?;
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&r.log).map_err(|e| e.to_string())?;
        let child = Command::new(&self.roomgate)
            .arg("run")
            .arg("--config")
            .arg(&r.config)
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.roomgate.display()))?;
        r.child = Some(child);
        let admin = r.admin;
        let deadline = Instant::now() + START_LIMIT;
        while Instant::now() < deadline {
            if let Ok((200, _)) = http::request(admin, "GET", "/readyz", "", Duration::from_secs(1)).await {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = r.child.as_mut().map(Child::try_wait) {
                return Err(format!("replica {i} exited at start: {status} (see {})", r.log.display()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!("replica {i} not ready in {START_LIMIT:?}"))
    }

    pub fn replica_pid(&self, i: usize) -> Option<u32> {
        self.replicas[i].child.as_ref().and_then(Child::id)
    }

    /// SIGTERM, then waits for the exit (SIGKILL past the limit); `Ok(exit status)`.
    pub async fn stop_replica(&mut self, i: usize) -> Result<String, String> {
        let Some(mut child) = self.replicas[i].child.take() else { return Err("not running".into()) };
        let pid = child.id().ok_or("no pid")?;
        signal(pid, "TERM").await?;
        match tokio::time::timeout(START_LIMIT, child.wait()).await {
            Ok(Ok(s)) => Ok(s.to_string()),
            _ => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                Err(format!("replica {i} did not exit within {START_LIMIT:?} of SIGTERM"))
            }
        }
    }

    /// Rewrites every replica's config file and reloads it: by SIGHUP (`hup`) or the admin API.
    pub async fn reconfigure(&mut self, hup: bool) -> Result<(), String> {
        for i in 0..REPLICAS {
            let config = self.config(i);
            std::fs::write(&self.replicas[i].config, config).map_err(|e| e.to_string())?;
            if hup {
                if let Some(pid) = self.replica_pid(i) {
                    signal(pid, "HUP").await?;
                }
            } else {
                let (status, body) = self.admin(i, "POST", "/admin/reload", "").await?;
                if status != 200 {
                    return Err(format!("reload on replica {i}: {status} {body}"));
                }
            }
        }
        Ok(())
    }

    pub async fn admin(&self, i: usize, method: &str, path: &str, body: &str) -> Result<(u16, String), String> {
        http::request(self.replicas[i].admin, method, path, body, Duration::from_secs(10)).await
    }

    pub async fn kill_backend(&mut self, k: usize) -> Result<(), String> {
        let b = &mut self.backends[k];
        let Some(mut child) = b.child.take() else { return Err("not running".into()) };
        let _ = child.start_kill();
        self.judge.backend_killed(&b.id, now_us());
        b.stopped = false;
        tokio::time::timeout(START_LIMIT, child.wait())
            .await
            .map_err(|_| "backend did not die")?
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    pub async fn restart_backend(&mut self, k: usize) -> Result<(), String> {
        start_backend(&self.exe, &mut self.backends[k], &self.judge).await
    }

    pub async fn stop_backend(&mut self, k: usize, stop: bool) -> Result<(), String> {
        let b = &mut self.backends[k];
        let pid = b.child.as_ref().and_then(Child::id).ok_or("not running")?;
        if stop {
            self.judge.backend_stopped(&b.id, now_us());
            signal(pid, "STOP").await?;
        } else {
            signal(pid, "CONT").await?;
            self.judge.backend_continued(&b.id, now_us());
        }
        b.stopped = stop;
        Ok(())
    }

    pub fn log_tail(&self, i: usize) -> String {
        tail(&self.replicas[i].log, 20)
    }

    /// Stops everything (replicas gracefully), bounded.
    pub async fn shutdown(&mut self) {
        for i in 0..REPLICAS {
            let _ = self.stop_replica(i).await;
        }
        for b in &mut self.backends {
            if let Some(mut child) = b.child.take() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
        self.kill_redis().await;
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Starts backend `b` (on its port, once it has one) and waits for its `ready` line; its further
/// lines go to the judge until the process is gone.
async fn start_backend(exe: &Path, b: &mut Backend, judge: &Arc<Judge>) -> Result<(), String> {
    let mut child = Command::new(exe)
        .arg("backend")
        .arg("--id")
        .arg(&b.id)
        .arg("--listen")
        .arg(b.addr.to_string())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{}: {e}", exe.display()))?;
    let stdout = child.stdout.take().ok_or("backend stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(START_LIMIT, lines.next_line()).await;
    let addr = match first {
        Ok(Ok(Some(line))) => line.strip_prefix("ready ").and_then(|a| a.parse().ok()),
        _ => None,
    };
    let addr: SocketAddr = addr.ok_or_else(|| format!("backend {} did not start", b.id))?;
    b.addr = addr;
    b.child = Some(child);
    let (judge, id) = (judge.clone(), b.id.clone());
    judge.note(None, format!("{id}: ready on {addr}"));
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            judge.backend_line(&id, &line);
        }
        judge.backend_gone(&id);
    });
    Ok(())
}
