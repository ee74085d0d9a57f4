//! A private redis-server per test, on a unix socket in a temporary directory: stopping and
//! restarting it keeps the path, and no port is shared with anything else.

use std::path::PathBuf;

use tokio::process::{Child, Command};

/// The key prefix the tests' fleets use (the default).
pub const PREFIX: &str = "roomgate:";

/// The Redis key of a room's hash (record and claims).
pub fn room_key(room: &str) -> String {
    roomgate::directory::redis_room_key(PREFIX, room)
}

pub struct Redis {
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// `--requirepass`, if it was started with one.
    password: Option<String>,
}

impl Redis {
    pub async fn start() -> Redis {
        Redis::start_with(None).await
    }

    /// A Redis that refuses clients without `password` (`--requirepass`).
    pub async fn start_with(password: Option<&str>) -> Redis {
        let mut r = Redis { dir: tempfile::tempdir().unwrap(), child: None, password: password.map(Into::into) };
        r.restart().await;
        r
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    /// Starts it (empty: nothing is persisted) and waits until it accepts connections.
    pub async fn restart(&mut self) {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", "0", "--save", "", "--appendonly", "no", "--unixsocket"])
            .arg(self.socket())
            .arg("--dir")
            .arg(self.dir.path());
        if let Some(password) = &self.password {
            cmd.arg("--requirepass").arg(password);
        }
        let missing = "redis-server not found: the test should start with require(&[Tool::RedisServer])";
        let child = super::redis_cluster::spawn_ready(&mut cmd, missing).await;
        self.child = Some(child);
    }

    /// Kills it, as a crash would.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.start_kill().unwrap();
            let _ = child.wait().await;
        }
    }

    /// A connection of the test's own (with the password, if there is one).
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        let mut url = self.url();
        if let Some(password) = &self.password {
            url = format!("redis+unix://{}?pass={password}", self.socket().display());
        }
        let client = redis::Client::open(url).unwrap();
        client.get_multiplexed_async_connection().await.unwrap()
    }

    /// Marks it as a Redis the fleet (prefix `roomgate:`) has been using already: the directory
    /// then opens no rebuild window (which it opens when it finds Redis without its data, as after
    /// a restart or on first use), and tests of the directory itself place rooms at once.
    pub async fn mark_in_use(&self) {
        let mut conn = self.conn().await;
        for key in roomgate::directory::redis_bucket_keys(PREFIX, "gen") {
            let _: () = redis::cmd("SET").arg(key).arg("1").query_async(&mut conn).await.unwrap();
        }
    }

    /// The room's record ("owner version"), if it has one.
    pub async fn record(&self, room: &str) -> Option<String> {
        redis::cmd("HGET").arg(room_key(room)).arg("=").query_async(&mut self.conn().await).await.unwrap()
    }

    /// Records the room on another owner, as another replica's move would ("owner version"),
    /// expiring after `ms` if given.
    pub async fn set_record(&self, room: &str, record: &str, ms: Option<u64>) {
        let mut conn = self.conn().await;
        let _: () = redis::cmd("HSET").arg(room_key(room)).arg("=").arg(record).query_async(&mut conn).await.unwrap();
        if let Some(ms) = ms {
            let _: () = redis::cmd("PEXPIRE").arg(room_key(room)).arg(ms).query_async(&mut conn).await.unwrap();
        }
    }

    /// Whether `replica` has a claim on the room.
    pub async fn claimed(&self, replica: &str, room: &str) -> bool {
        redis::cmd("HEXISTS").arg(room_key(room)).arg(replica).query_async(&mut self.conn().await).await.unwrap()
    }

    /// How many rooms `replica` has claims on.
    pub async fn claims_of(&self, replica: &str) -> u64 {
        let mut conn = self.conn().await;
        let mut n = 0;
        for key in roomgate::directory::redis_bucket_keys(PREFIX, &format!("h:{replica}")) {
            n += redis::cmd("SCARD").arg(key).query_async::<u64>(&mut conn).await.unwrap();
        }
        n
    }

    /// Milliseconds the room's hash has left: -1 while it never expires (live), -2 if absent.
    pub async fn pttl(&self, room: &str) -> i64 {
        redis::cmd("PTTL").arg(room_key(room)).query_async(&mut self.conn().await).await.unwrap()
    }

    /// Commands the server has processed, from INFO.
    pub async fn commands(&self) -> u64 {
        let info: String = redis::cmd("INFO").arg("stats").query_async(&mut self.conn().await).await.unwrap();
        info.lines().find_map(|l| l.strip_prefix("total_commands_processed:")).unwrap().trim().parse().unwrap()
    }
}
