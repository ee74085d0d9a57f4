//! Hand-off leases in the shared directory: `{prefix}moving:{room}` names the replica handing the
//! room off, for at most the move's lease. One replica runs a given move (`SET NX`), and the
//! `PLACE` script makes every replica's joins of the room wait while the lease lasts.

use std::time::Duration;

use redis::Script;

use super::RedisDirectory;

/// Deletes the lease only if it is still this replica's (it may have passed and been taken).
const END_MOVE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

impl RedisDirectory {
    /// Takes the room's hand-off lease. True: taken, or Redis is away (the directory then works
    /// from this replica's own records, as placement does).
    pub(super) async fn take_move_lease(&self, key: &str, lease: Duration) -> bool {
        let name = self.key("moving:", key);
        let ms = lease.as_millis().max(1) as u64;
        let set: Option<Option<String>> = self
            .call(&self.calls.reassign, async |c| {
                redis::cmd("SET")
                    .arg(&name)
                    .arg(&self.settings.replica)
                    .arg("NX")
                    .arg("PX")
                    .arg(ms)
                    .query_async(c)
                    .await
            })
            .await;
        match set {
            Some(reply) => reply.is_some(),
            None => true,
        }
    }

    pub(super) async fn drop_move_lease(&self, key: &str) {
        let name = self.key("moving:", key);
        let script = Script::new(END_MOVE);
        let mut inv = script.key(&name);
        inv.arg(&self.settings.replica);
        // If this fails, the lease passes by itself.
        let _: Option<i64> = self.call(&self.calls.reassign, async |c| inv.invoke_async(c).await).await;
    }
}
