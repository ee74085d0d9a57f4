//! Hand-offs across the fleet, through the shared directory. The room's `moving:` key (in its
//! bucket, `keys.rs`) is the lease of the replica handing the room off: one replica runs a given
//! move (`SET NX`), and `PLACE` makes every replica's joins of the room wait while it lasts. The
//! move's begin and end are published on the fleet's `moves` channel: the other replicas pause
//! their sockets of the room on the old owner and hold its joins, and acknowledge in the room's
//! `acks:` set; the mover exports once every replica with a claim on the room there has
//! acknowledged.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::RedisDirectory;
use crate::directory::FleetMove;

/// Takes the room's hand-off lease for this replica and publishes the move's begin, unless
/// another replica holds the lease (0), or the room's record names another owner than the one
/// the move is from (-1): the room has moved already, and a replica that acts on a view not yet
/// caught up with that move must not export it from its old owner again. 1: taken.
/// KEYS[1]: the lease, KEYS[2]: the room's hash; ARGV: replica, lease ms, the channel, the
/// begin message, the owner the move is from.
pub(super) const BEGIN_MOVE_BODY: &str = r"
local o = record(redis.call('HGET', KEYS[2], '='))
if o and o ~= ARGV[5] then return -1 end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
";

/// Deletes the lease and the acknowledgements only if the lease is still this replica's (it may
/// have passed and been taken).
pub(super) const END_MOVE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// How many other replicas hold a claim that counts on the room's old owner and have not
/// acknowledged the move yet. KEYS[8]: the room's hash, KEYS[9]: its acks; ARGV: this replica,
/// old owner, claim lease ms.
pub(super) const UNACKED_BODY: &str = r"
local _, live = room_state(KEYS[8], now_ms(), tonumber(ARGV[3]))
local missing = 0
for _, x in ipairs(live) do
  if x[1] ~= ARGV[1] and x[2] == ARGV[2] and redis.call('SISMEMBER', KEYS[9], x[1]) == 0 then
    missing = missing + 1
  end
end
return missing
";

/// Fleet moves waiting for the loop that handles them; past this, a burst is dropped (logged):
/// the lease still holds the joins that ask Redis.
const QUEUE: usize = 4096;

impl RedisDirectory {
    /// Takes the room's hand-off lease and tells the fleet. True: taken, or Redis is away (the
    /// directory then works from this replica's own records, as placement does). False: another
    /// replica hands the room off now, or the fleet records it on another owner than `from`.
    pub(super) async fn take_move_lease(&self, key: &str, from: &str, lease: Duration) -> bool {
        let ms = lease.as_millis().max(1) as u64;
        let begin = format!("begin\t{}\t{ms}\t{from}\t{key}", self.settings.replica);
        let mut inv = self.scripts.begin_move.key(self.keys.moving(key));
        inv.key(self.keys.room(key)).arg(&self.settings.replica).arg(ms);
        inv.arg(self.keys.fleet("moves")).arg(&begin).arg(from);
        let taken: Option<i64> = self.call(&self.calls.reassign, async |c| inv.invoke_async(c).await).await;
        match taken {
            Some(1) | None => true,
            Some(-1) => {
                tracing::info!(room = key, from, "the fleet records this room on another owner: not moved again");
                false
            }
            Some(_) => false,
        }
    }

    /// Polls until no other replica with a claim on `from` is left to acknowledge.
    pub(super) async fn wait_acks(&self, key: &str, from: &str) {
        let mut pause = Duration::from_millis(2);
        loop {
            let mut inv = self.bucket_script(&self.scripts.unacked, super::keys::bucket(key));
            inv.key(self.keys.room(key)).key(self.keys.acks(key));
            inv.arg(&self.settings.replica).arg(from).arg(self.lease_ms());
            let missing: Option<i64> = self.call(&self.calls.reassign, async |c| inv.invoke_async(c).await).await;
            // Redis away: nobody can be asked; the lease and the claims still hold the joins.
            if missing.is_none_or(|n| n == 0) {
                return;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    pub(super) async fn drop_move_lease(&self, key: &str, from: &str, moved: bool) {
        let (name, acks) = (self.keys.moving(key), self.keys.acks(key));
        let end = format!("end\t{}\t{}\t{from}\t{key}", self.settings.replica, u8::from(moved));
        let channel = self.keys.fleet("moves");
        let mut inv = self.scripts.end_move.key(&name);
        inv.key(&acks).arg(&self.settings.replica);
        // If this fails, the lease passes by itself, and so do the other replicas' pauses.
        let _: Option<i64> = self
            .call(&self.calls.reassign, async |c| {
                let _: i64 = inv.invoke_async(c).await?;
                redis::cmd("PUBLISH").arg(&channel).arg(&end).query_async(c).await
            })
            .await;
    }

    pub(super) async fn ack(&self, key: &str) {
        let acks = self.keys.acks(key);
        let ttl = self.settings.refresh.as_millis().max(1000) as u64 * 10;
        let _: Option<i64> = self
            .call(&self.calls.reassign, async |c| {
                let _: i64 = redis::cmd("SADD").arg(&acks).arg(&self.settings.replica).query_async(c).await?;
                redis::cmd("PEXPIRE").arg(&acks).arg(ttl).query_async(c).await
            })
            .await;
    }

    /// Starts the subscriber of `{prefix}moves` (once) and returns its stream of other replicas'
    /// moves.
    pub(super) fn subscribe_moves(&self) -> Option<mpsc::Receiver<FleetMove>> {
        let mut started = crate::lock::lock(&self.moves_started);
        if *started {
            return None;
        }
        *started = true;
        let (tx, rx) = mpsc::channel(QUEUE);
        let (clients, channel) = (self.client.for_subscription(), self.keys.fleet("moves"));
        let (me, timeout) = (self.settings.replica.clone(), self.settings.timeout);
        tokio::spawn(subscriber(clients, channel, me, timeout, tx));
        Some(rx)
    }
}

/// Follows `channel` until `tx` closes, reconnecting after a failure (to the next of `clients`:
/// a cluster's seed nodes, any of which hears what is published on every node).
async fn subscriber(
    clients: Vec<redis::Client>,
    channel: String,
    me: String,
    timeout: Duration,
    tx: mpsc::Sender<FleetMove>,
) {
    for client in clients.iter().cycle() {
        if tx.is_closed() {
            return;
        }
        if let Ok(Ok(mut pubsub)) = tokio::time::timeout(timeout * 4, client.get_async_pubsub()).await
            && pubsub.subscribe(&channel).await.is_ok()
        {
            let mut messages = pubsub.on_message();
            while let Some(msg) = messages.next().await {
                let Ok(text) = msg.get_payload::<String>() else { continue };
                let Some(event) = parse(&text, &me) else { continue };
                if tx.try_send(event).is_err() && !tx.is_closed() {
                    tracing::warn!("fleet moves arrive faster than they are handled; one is dropped");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A published move of another replica (`None`: this replica's own, or malformed).
fn parse(text: &str, me: &str) -> Option<FleetMove> {
    let mut parts = text.splitn(5, '\t');
    let (kind, replica, n, from, room) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if replica == me {
        return None;
    }
    let (room, from) = (room.to_owned(), from.to_owned());
    match kind {
        "begin" => Some(FleetMove::Begin { room, from, lease: Duration::from_millis(n.parse().ok()?) }),
        "end" => Some(FleetMove::End { room, from, moved: n == "1" }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_are_read_back_and_a_replicas_own_are_left_out() {
        let begin = parse("begin\tA\t12000\tb1\tro\tom", "B").unwrap();
        assert_eq!(
            begin,
            FleetMove::Begin { room: "ro\tom".into(), from: "b1".into(), lease: Duration::from_secs(12) }
        );
        assert_eq!(
            parse("end\tA\t1\tb1\tr", "B"),
            Some(FleetMove::End { room: "r".into(), from: "b1".into(), moved: true })
        );
        assert_eq!(parse("end\tA\t1\tb1\tr", "A"), None);
        assert_eq!(parse("begin\tA\tx\tb1\tr", "B"), None);
        assert_eq!(parse("what", "B"), None);
    }
}
