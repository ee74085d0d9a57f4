//! Where the shared directory lives (the Redis URL, a cluster's seed nodes, key prefix, this
//! replica's id) and how it is kept, with the durations derived from it: record TTLs, the claim
//! lease, the rebuild window.

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
    /// How long a room stays recorded after a refresh.
    pub(super) fn ttl_ms(&self) -> u64 {
        self.settings.ttl.as_millis() as u64
    }

    /// How long a claim lives without being renewed: three refreshes, so that one slow or failed
    /// sync does not end it. Renewed at every sync while the room is live here.
    pub(super) fn lease_ms(&self) -> u64 {
        3 * self.settings.refresh.as_millis().max(1) as u64
    }

    /// How long after its last heartbeat a replica's claims are removed (they stopped counting
    /// one lease after it): as long as a room lingers, and at least ten refresh periods.
    pub(super) fn dead_after_ms(&self) -> u64 {
        self.ttl_ms().max(10 * self.settings.refresh.as_millis() as u64)
    }

    /// After Redis lost its data, how long no room without a record is placed: every replica's
    /// next sync re-asserts the rooms it holds within one refresh, plus the time a sync takes.
    pub(super) fn rebuild_window_ms(&self) -> u64 {
        (self.settings.refresh + 4 * self.settings.timeout).as_millis() as u64
    }
}

/// The seed nodes of a `redis+cluster://[user:password@]host:port,host:port/` URL, each as a
/// `redis://` URL with the same credentials; `None`: not a cluster URL.
pub fn cluster_seeds(url: &str) -> Option<Result<Vec<String>, String>> {
    let rest = url.strip_prefix("redis+cluster://")?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), rest),
    };
    if hosts.contains(['/', '?', '#']) {
        return Some(Err("redis+cluster:// takes host:port,host:port and nothing after them".into()));
    }
    let seeds: Vec<String> =
        hosts.split(',').filter(|h| !h.is_empty()).map(|h| format!("redis://{auth}{h}/")).collect();
    if seeds.is_empty() {
        return Some(Err("redis+cluster:// needs at least one host:port".into()));
    }
    Some(Ok(seeds))
}

#[cfg(test)]
mod tests {
    use super::cluster_seeds;

    #[test]
    fn a_cluster_url_gives_one_seed_per_node_with_the_credentials() {
        assert_eq!(cluster_seeds("redis://h:1"), None);
        assert_eq!(
            cluster_seeds("redis+cluster://u:p@a:7000,b:7001/"),
            Some(Ok(vec!["redis://u:p@a:7000/".to_owned(), "redis://u:p@b:7001/".to_owned()]))
        );
        assert_eq!(cluster_seeds("redis+cluster://10.0.0.1:6379"), Some(Ok(vec!["redis://10.0.0.1:6379/".to_owned()])));
        assert!(matches!(cluster_seeds("redis+cluster://"), Some(Err(_))));
        assert!(matches!(cluster_seeds("redis+cluster://a:1/0"), Some(Err(_))));
    }
}
