//! File descriptors: the soft `RLIMIT_NOFILE` raised to the hard limit at start-up, and the
//! `limits.max_connections = "auto"` cap derived from it.

use crate::snapshot::Snapshot;

/// Descriptors kept aside from any connection: listeners, the runtime's own (epoll, eventfd,
/// signal pipe), the config file and certificates being read, DNS, Redis, health checks.
pub const RESERVED: u64 = 256;

/// The `auto` cap is never below this: with so few descriptors the accept back-off does the rest.
pub const AUTO_FLOOR: usize = 64;

/// What [`raise_nofile`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raised {
    pub before: u64,
    pub now: u64,
    pub hard: u64,
}

/// Raises the soft descriptor limit to the hard one (on Linux at most `fs.nr_open`, 1048576 by
/// default, when the hard limit is unlimited). Safe to call more than once.
pub fn raise_nofile() -> std::io::Result<Raised> {
    let (before, hard) = rlimit::Resource::NOFILE.get()?;
    let now = match rlimit::increase_nofile_limit(hard) {
        Ok(now) => now,
        // An unlimited hard limit cannot be the soft one on Linux: the kernel's own ceiling.
        Err(_) => rlimit::increase_nofile_limit(1 << 20)?,
    };
    Ok(Raised { before, now, hard })
}

/// The soft descriptor limit in force; `None` where it cannot be read.
pub fn nofile() -> Option<u64> {
    rlimit::Resource::NOFILE.get().ok().map(|(soft, _)| soft)
}

/// `limits.max_connections = "auto"`: every client connection may hold one backend connection
/// (a request in flight, a WebSocket tunnel), so each counts two descriptors, after setting
/// aside [`RESERVED`], the admin listener's connections and the idle pool of every backend:
///
/// `(nofile - 256 - admin.max_connections - upstream.max_idle_per_backend * backends) / 2`,
/// at least [`AUTO_FLOOR`].
pub fn auto_max_connections(nofile: u64, snap: &Snapshot) -> usize {
    let config = &snap.config;
    let backends = (snap.backends.len() + snap.retiring.len()) as u64;
    let pool = (config.upstream.max_idle_per_backend as u64).saturating_mul(backends);
    let reserved = RESERVED.saturating_add(config.admin.max_connections as u64).saturating_add(pool);
    let auto = nofile.saturating_sub(reserved) / 2;
    usize::try_from(auto).unwrap_or(usize::MAX).max(AUTO_FLOOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(backends: usize) -> Snapshot {
        let mut text = String::new();
        for i in 0..backends {
            text.push_str(&format!("[[backends]]\nid = \"b{i}\"\naddr = \"127.0.0.1:{}\"\n", 9000 + i));
        }
        text.push_str("[[routes]]\nprefix = \"/\"\nmode = \"shared\"\n");
        Snapshot::build(crate::Config::from_toml(&text, "test.toml").unwrap(), 1)
    }

    #[test]
    fn auto_leaves_room_for_the_backend_side() {
        // Defaults: admin 64, 128 idle per backend.
        assert_eq!(auto_max_connections(1 << 20, &snapshot(3)), ((1 << 20) - 256 - 64 - 3 * 128) / 2);
        assert_eq!(auto_max_connections(1024, &snapshot(1)), (1024 - 256 - 64 - 128) / 2);
        assert_eq!(auto_max_connections(256, &snapshot(3)), AUTO_FLOOR);
    }

    #[test]
    fn raising_twice_is_harmless() {
        let first = raise_nofile().unwrap();
        let second = raise_nofile().unwrap();
        assert_eq!(second.before, second.now, "already raised");
        assert_eq!(first.now, second.now);
        assert_eq!(nofile(), Some(second.now));
    }
}
