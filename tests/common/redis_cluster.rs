//! A private Redis Cluster per test: three primaries, each with as many replicas as asked, on
//! free loopback ports (a node's cluster bus is its port + 10000), created with `redis-cli
//! --cluster create`. A primary can be killed, as a crash would, and the test waits for its
//! replica to take over. Also used by `bench/directory-cost.rs` (`--cluster`).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The longest any step of starting or settling the cluster may take.
const LIMIT: Duration = Duration::from_secs(30);

/// Starts `cmd` (a redis-server) and returns once it logs that it accepts connections; its log is
/// then read to the end, so that a full pipe never blocks it. `missing`: the panic message if it
/// cannot be started.
pub async fn spawn_ready(cmd: &mut Command, missing: &str) -> Child {
    let mut child = cmd.stdout(Stdio::piped()).kill_on_drop(true).spawn().expect(missing);
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let ready = tokio::time::timeout(LIMIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.to_ascii_lowercase().contains("ready to accept connections") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(ready, Ok(true), "redis-server did not start");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}

pub struct RedisCluster {
    _dir: tempfile::TempDir,
    /// (port, process) of each node; a killed node's process is gone.
    nodes: Vec<(u16, Option<Child>)>,
}

/// A port free on loopback whose cluster bus port (+10000) is free too, both below the range the
/// kernel hands out to outgoing connections (32768 and up here), so that no client socket takes
/// the bus port between this check and the node's start.
fn free_pair() -> u16 {
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    for i in 0..2000u64 {
        let port = 20_000 + ((seed.wrapping_add(i.wrapping_mul(7919))) % 2_700) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
        {
            return port;
        }
    }
    panic!("no free port pair on loopback between 20000 and 32767");
}

impl RedisCluster {
    /// Starts 3 primaries with `replicas` replicas each and makes them a cluster; returns once
    /// every node reports the cluster as ok.
    pub async fn start(replicas: usize) -> RedisCluster {
        let dir = tempfile::tempdir().unwrap();
        let mut nodes = Vec::new();
        for _ in 0..3 * (1 + replicas) {
            let port = free_pair();
            let mut cmd = Command::new("redis-server");
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--cluster-enabled", "yes"])
                .args(["--cluster-config-file", &format!("nodes-{port}.conf"), "--cluster-node-timeout", "1000"])
                // A replica may take over however long ago it last heard from its primary (a
                // fresh cluster's replicas have heard little).
                .args(["--cluster-replica-validity-factor", "0"])
                .args(["--save", "", "--appendonly", "no", "--dir"])
                .arg(dir.path());
            let child = spawn_ready(
                &mut cmd,
                "redis-server not found: the test should start with require(&[Tool::RedisServer])",
            )
            .await;
            nodes.push((port, Some(child)));
        }
        let mut create = Command::new("redis-cli");
        create.args(["--cluster", "create"]);
        for (port, _) in &nodes {
            create.arg(format!("127.0.0.1:{port}"));
        }
        let out = tokio::time::timeout(
            LIMIT,
            create.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]).stdin(Stdio::null()).output(),
        )
        .await
        .expect("redis-cli --cluster create in time")
        .expect("redis-cli");
        assert!(out.status.success(), "cluster create: {}", String::from_utf8_lossy(&out.stdout));
        let cluster = RedisCluster { _dir: dir, nodes };
        cluster.wait_ok().await;
        cluster
    }

    /// `redis+cluster://` with the three first nodes as seeds.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes.iter().take(3).map(|(p, _)| format!("127.0.0.1:{p}")).collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The ports of the nodes still running.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().filter(|(_, c)| c.is_some()).map(|(p, _)| *p).collect()
    }

    pub async fn conn(port: u16) -> Option<redis::aio::MultiplexedConnection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
        tokio::time::timeout(Duration::from_secs(1), client.get_multiplexed_async_connection()).await.ok()?.ok()
    }

    /// Waits until every live node reports `cluster_state:ok` and agrees on three primaries.
    pub async fn wait_ok(&self) {
        let deadline = tokio::time::Instant::now() + LIMIT * 2;
        loop {
            let mut ok = true;
            for (port, child) in &self.nodes {
                if child.is_none() {
                    continue;
                }
                let info: Option<String> = match Self::conn(*port).await {
                    Some(mut c) => redis::cmd("CLUSTER").arg("INFO").query_async(&mut c).await.ok(),
                    None => None,
                };
                ok &= info.is_some_and(|i| i.contains("cluster_state:ok") && i.contains("cluster_size:3"));
            }
            if ok {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "the cluster did not settle");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until a replica has taken over from the primary on `port` (killed): no live node's
    /// slot map names it, and every live node reports the cluster ok.
    pub async fn wait_failover(&self, port: u16) {
        let deadline = tokio::time::Instant::now() + LIMIT * 2;
        loop {
            let mut moved = true;
            for live in self.ports() {
                moved &= self.primaries(live).await.is_some_and(|p| !p.iter().any(|(_, _, node)| *node == port));
            }
            if moved {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "no replica took over from {port}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.wait_ok().await;
    }

    /// The slot ranges and the port of the primary serving each, as the node on `port` sees them.
    async fn primaries(&self, port: u16) -> Option<Vec<(i64, i64, u16)>> {
        let mut c = Self::conn(port).await?;
        let slots: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut c).await.ok()?;
        let redis::Value::Array(ranges) = slots else { return None };
        let mut out = Vec::new();
        for range in ranges {
            let redis::Value::Array(parts) = range else { continue };
            if let (Some(redis::Value::Int(lo)), Some(redis::Value::Int(hi)), Some(redis::Value::Array(primary))) =
                (parts.first(), parts.get(1), parts.get(2))
                && let Some(redis::Value::Int(node)) = primary.get(1)
            {
                out.push((*lo, *hi, *node as u16));
            }
        }
        Some(out)
    }

    /// The port of the primary serving `key`'s slot.
    pub async fn primary_of(&self, key: &str) -> u16 {
        let port = self.ports()[0];
        let mut c = Self::conn(port).await.expect("a live node");
        let slot: i64 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query_async(&mut c).await.unwrap();
        let primaries = self.primaries(port).await.expect("CLUSTER SLOTS");
        primaries.iter().find(|(lo, hi, _)| (*lo..=*hi).contains(&slot)).expect("a primary for every slot").2
    }

    /// Kills the node on `port` (SIGKILL, as a crash would).
    pub async fn kill(&mut self, port: u16) {
        for (p, child) in &mut self.nodes {
            if *p == port
                && let Some(mut c) = child.take()
            {
                c.start_kill().unwrap();
                let _ = c.wait().await;
            }
        }
    }
}
