//! The memory limit roomgate runs under (cgroup v2 `memory.max`, or v1's `memory.limit_in_bytes`),
//! and the defaults derived from it: the bytes djust sockets may hold while their first message
//! arrives (`limits.max_pending_bytes = "auto"`).

/// The most `"auto"` gives pending first messages, with or without a memory limit.
pub const MAX_AUTO_PENDING_BYTES: usize = 64 * 1024 * 1024;

/// The memory limit of this process's cgroup, if it has one.
pub fn cgroup_limit() -> Option<u64> {
    let v2 = std::fs::read_to_string("/sys/fs/cgroup/memory.max");
    let v1 = || std::fs::read_to_string("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    let text = v2.or_else(|_| v1()).ok()?;
    parse_limit(&text)
}

/// [`cgroup_limit`], read once.
pub fn cgroup_limit_once() -> Option<u64> {
    static LIMIT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(cgroup_limit)
}

/// A cgroup's limit file: bytes, or `max` (none). v1 writes a huge number for none.
fn parse_limit(text: &str) -> Option<u64> {
    let n: u64 = text.trim().parse().ok()?;
    (n < 1 << 60).then_some(n)
}

/// `limits.max_pending_bytes = "auto"`: an eighth of the memory limit (64 MiB of a 512 MiB
/// pod), at most [`MAX_AUTO_PENDING_BYTES`], and at least `first_message` (one socket's most).
pub fn auto_pending_bytes(memory_limit: Option<u64>, first_message: usize) -> usize {
    let share = memory_limit.map_or(MAX_AUTO_PENDING_BYTES, |m| usize::try_from(m / 8).unwrap_or(usize::MAX));
    share.min(MAX_AUTO_PENDING_BYTES).max(first_message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_an_eighth_of_the_limit_within_bounds() {
        assert_eq!(auto_pending_bytes(Some(512 << 20), 65536), 64 << 20);
        assert_eq!(auto_pending_bytes(Some(128 << 20), 65536), 16 << 20);
        assert_eq!(auto_pending_bytes(Some(8 << 30), 65536), MAX_AUTO_PENDING_BYTES);
        assert_eq!(auto_pending_bytes(None, 65536), MAX_AUTO_PENDING_BYTES);
        assert_eq!(auto_pending_bytes(Some(1 << 16), 65536), 65536);
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("536870912\n"), Some(512 << 20));
        assert_eq!(parse_limit("9223372036854771712\n"), None, "v1's no limit");
    }
}
