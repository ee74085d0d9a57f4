//! Wall-clock time, for what leaves the process: drain deadlines and heartbeats shared with
//! other replicas, and times shown in the admin status. Everything measured within the process
//! uses `Instant`.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 on a clock set before it).
pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Seconds since the Unix epoch (0 on a clock set before it).
pub fn unix_secs() -> u64 {
    unix_ms() / 1000
}
