//! The Redis connection of the shared directory: connecting, one timed call, and the state of
//! reachability (an outage is logged once, then once a minute; requests skip Redis meanwhile).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::ConnectionManager;

use super::{AWAY_POLL, RedisDirectory, lock};

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
    pub(super) async fn connection(&self) -> Option<ConnectionManager> {
        if let Some(c) = self.conn.load_full() {
            return Some((*c).clone());
        }
        let t = self.settings.timeout;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(t))
            .set_response_timeout(Some(t))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(t);
        let c =
            self.settled(tokio::time::timeout(t * 4, self.client.get_connection_manager_with_config(config)).await)?;
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
        f: impl AsyncFnOnce(&mut ConnectionManager) -> redis::RedisResult<T>,
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
