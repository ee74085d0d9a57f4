//! The Redis connection of the shared directory: connecting (to one Redis, or to a Redis
//! Cluster, whose client follows MOVED/ASK redirections and failovers), one timed call, and the
//! state of reachability (an outage is logged once, then once a minute; requests skip Redis
//! meanwhile).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;

use super::{AWAY_POLL, RedisDirectory, lock};

/// Where the directory connects: one Redis, or a cluster through its seed nodes.
pub(super) enum Client {
    One(redis::Client),
    /// The cluster's client, and a plain client per seed node for the subscription to moves
    /// (a PUBLISH on any node of a cluster reaches the subscribers of every node).
    Cluster(Box<(redis::cluster::ClusterClient, Vec<redis::Client>)>),
}

impl Client {
    /// The client for `url` (`redis://`, `redis+unix://`, or `redis+cluster://` with a list of
    /// seed nodes), with `password` in place of one in the URL.
    pub(super) fn open(url: &str, password: Option<&str>) -> redis::RedisResult<Client> {
        use redis::IntoConnectionInfo;
        let with_password = |url: &str| -> redis::RedisResult<redis::ConnectionInfo> {
            let mut info = url.into_connection_info()?;
            if let Some(password) = password {
                let auth = info.redis_settings().clone().set_password(password);
                info = info.set_redis_settings(auth);
            }
            Ok(info)
        };
        match super::settings::cluster_seeds(url) {
            None => Ok(Client::One(redis::Client::open(with_password(url)?)?)),
            Some(Err(why)) => Err((redis::ErrorKind::InvalidClientConfig, "directory.url", why).into()),
            Some(Ok(seeds)) => {
                let infos = seeds.iter().map(|s| with_password(s)).collect::<redis::RedisResult<Vec<_>>>()?;
                let plain = infos.iter().cloned().map(redis::Client::open).collect::<redis::RedisResult<Vec<_>>>()?;
                // A call is bounded by `timeout` anyway: a few quick retries (a redirection, a
                // slot map refreshed after a failover) rather than the default back-off of
                // seconds, which would outlast every call.
                let cluster =
                    redis::cluster::ClusterClientBuilder::new(infos).retries(3).min_retry_wait(5).max_retry_wait(50);
                Ok(Client::Cluster(Box::new((cluster.build()?, plain))))
            }
        }
    }

    /// Plain clients for the subscription to moves: the Redis, or each seed node of a cluster.
    pub(super) fn for_subscription(&self) -> Vec<redis::Client> {
        match self {
            Client::One(c) => vec![c.clone()],
            Client::Cluster(cluster) => cluster.1.clone(),
        }
    }
}

/// A connection to one Redis (reconnecting by itself) or to a cluster (routing each call to the
/// node that serves its keys' slot).
#[derive(Clone)]
pub(super) enum Conn {
    One(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::One(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::One(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::One(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl RedisDirectory {
    /// Waits (bounded) for the next sync attempt; tells whether it reached Redis.
    pub(super) async fn next_attempt(&self) -> bool {
        let mut attempts = self.attempts.subscribe();
        let seen = *attempts.borrow_and_update();
        let bound = AWAY_POLL + 6 * self.settings.timeout;
        let _ = tokio::time::timeout(bound, attempts.wait_for(|n| *n > seen)).await;
        self.is_up()
    }

    /// The connection, connecting first if there is none (bounded by the timeout).
    pub(super) async fn connection(&self) -> Option<Conn> {
        // A cluster's connection is made anew after a failure: its slot map may name a primary
        // that failed over (one Redis's connection manager reconnects by itself).
        if !self.is_up() && matches!(self.client, Client::Cluster(_)) {
            self.conn.store(None);
        }
        if let Some(c) = self.conn.load_full() {
            return Some((*c).clone());
        }
        let t = self.settings.timeout;
        let c = match &self.client {
            Client::One(client) => {
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(t))
                    .set_response_timeout(Some(t))
                    .set_number_of_retries(1)
                    .set_min_delay(Duration::from_millis(20))
                    .set_max_delay(t);
                let c = client.get_connection_manager_with_config(config);
                Conn::One(self.settled(tokio::time::timeout(t * 4, c).await)?)
            }
            Client::Cluster(cluster) => {
                let client = &cluster.0;
                // Each call is bounded by the timeout in `call`; within it the cluster client
                // follows redirections and retries while a failover promotes a replica.
                let config = redis::cluster::ClusterConfig::new().set_connection_timeout(t).set_response_timeout(t);
                let c = client.get_async_connection_with_config(config);
                Conn::Cluster(self.settled(tokio::time::timeout(t * 4, c).await)?)
            }
        };
        self.conn.store(Some(Arc::new(c.clone())));
        Some(c)
    }

    /// The value of a timed Redis call, or `None` with the failure recorded.
    pub(super) fn settled<T>(&self, result: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>) -> Option<T> {
        match result {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                self.failed(&e.to_string());
                None
            }
            Err(_) => {
                self.failed("timed out");
                None
            }
        }
    }

    /// Runs one Redis call with the timeout; records success or failure.
    pub(super) async fn call<T>(
        &self,
        counter: &AtomicU64,
        f: impl AsyncFnOnce(&mut Conn) -> redis::RedisResult<T>,
    ) -> Option<T> {
        let mut conn = if self.is_up() {
            (*self.conn.load_full()?).clone()
        } else {
            // Only syncs reconnect; requests do not wait for an absent Redis.
            return None;
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.settled(tokio::time::timeout(self.settings.timeout, f(&mut conn)).await)
    }

    pub(super) fn failed(&self, why: &str) {
        self.calls.errors.fetch_add(1, Ordering::Relaxed);
        *lock(&self.last_error) = Some(why.to_owned());
        let was_up = self.up.swap(false, Ordering::Relaxed);
        if was_up {
            self.wake.notify_one();
        }
        // `|` and not `||`: the throttle's period starts with the first line of an outage.
        if was_up | self.outage_log.ready().is_some() {
            tracing::warn!(
                error = why,
                "Redis unreachable: known rooms keep their owner, new rooms get pure placement"
            );
        }
    }

    pub(super) fn recovered(&self) {
        *lock(&self.last_error) = None;
        if !self.up.swap(true, Ordering::Relaxed) {
            tracing::info!("Redis reachable: sharing the room directory");
        }
    }
}
