//! Where the shared directory lives (the Redis URL, key prefix, this replica's id) and how it is
//! kept, with the keys and durations derived from it: record TTLs, the claim lease, the rebuild
//! window.

use std::time::Duration;

use super::RedisDirectory;

/// Where the shared directory lives and how it is kept.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    pub url: String,
    pub prefix: String,
    /// This replica's id in the fleet.
    pub replica: String,
    /// How often live rooms are refreshed and drains read.
    pub refresh: Duration,
    /// Longest wait for one Redis call; past it the call counts as failed.
    pub timeout: Duration,
    /// How long a room stays recorded after the last refresh by any replica.
    pub ttl: Duration,
    /// How long a new room's record lives until a refresh or its first WebSocket gives it `ttl`.
    pub ttl_unused: Duration,
    /// Sent to Redis (AUTH) in place of a password in the URL (`password_file`).
    pub password: Option<String>,
}

impl RedisDirectory {
    /// A Redis key: the prefix, the kind (`room:`, `held:`, `replicas`...) and the name.
    pub(super) fn key(&self, kind: &str, name: &str) -> String {
        format!("{}{kind}{name}", self.settings.prefix)
    }

    /// How long a room stays recorded after a refresh.
    pub(super) fn ttl_ms(&self) -> u64 {
        self.settings.ttl.as_millis() as u64
    }

    /// How long a claim lives without being renewed: three refreshes, so that one slow or failed
    /// sync does not end it. Renewed at every sync while the room is live here.
    pub(super) fn lease_ms(&self) -> u64 {
        3 * self.settings.refresh.as_millis().max(1) as u64
    }

    /// How long `held:{replica}` lives without a sync: at least as long as its claims.
    pub(super) fn held_ttl_ms(&self) -> u64 {
        self.lease_ms().max(self.ttl_ms())
    }

    /// After Redis lost its data, how long no room without a record is placed: every replica's
    /// next sync re-asserts the rooms it holds within one refresh, plus the time a sync takes.
    pub(super) fn rebuild_window_ms(&self) -> u64 {
        (self.settings.refresh + 4 * self.settings.timeout).as_millis() as u64
    }
}
