//! One sync of the shared directory, and what a replica publishes at each: drains changed while
//! Redis was away, its heartbeat in every bucket (reading the owner changes it must follow), the
//! claims that changed since the last sync, and the removal of those no longer held.

use std::collections::HashSet;
use std::sync::Arc;

use crate::directory::LiveEntry;

use super::keys::{self, BUCKETS};
use super::wire::Record;
use super::{BATCH, RedisDirectory, ReplicaState, SharedDrain, SyncReport, Written, lock};

impl RedisDirectory {
    /// One sync: reconnect if needed, replay drains, heartbeat in every bucket, write changed
    /// claims, heartbeat in the fleet and read drains.
    pub(super) async fn sync_once(&self, me: &ReplicaState) -> Option<SyncReport> {
        let mut conn = self.connection().await?;
        // A trivial call decides whether Redis is back before anything is written: one on a key,
        // which a cluster routes to a node serving its slot (a PING goes to any node it knows,
        // a failed one included).
        if !self.is_up() {
            let mut probe = redis::cmd("EXISTS");
            probe.arg(self.keys.fleet("replicas"));
            let answer = tokio::time::timeout(self.settings.timeout, probe.query_async::<i64>(&mut conn)).await;
            if self.settled(answer).is_none() {
                // A fresh connection next time, rather than one in the middle of its own
                // reconnect back-off.
                self.conn.store(None);
                return None;
            }
            // Whatever happened meanwhile (a restart, a failover, this replica's claims lapsed
            // and removed), every claim is written again.
            for seen in lock(&self.buckets).iter_mut() {
                seen.reassert = true;
            }
            self.recovered();
        }
        let pending = std::mem::take(&mut *lock(&self.unshared_drains));
        for (backend, deadline) in &pending {
            if !self.write_drain(backend, *deadline).await {
                lock(&self.unshared_drains).extend(pending.iter().cloned());
                return None;
            }
        }
        // Moves followed are kept until a sync succeeds: the local record has moved already, and
        // the caller must close the sockets on the old owner.
        let beat = self.beat_buckets().await;
        let published = beat && self.publish().await;
        if !published {
            return None;
        }
        let (drains, handoffs, rebalance) = self.heartbeat(me).await?;
        let moved = std::mem::take(&mut *lock(&self.followed));
        Some(SyncReport { drains, handoffs, rebalance, moved })
    }

    /// Shares a rebalance request, for every replica to see at one of its next syncs: it lasts
    /// 10 refresh periods, so that a replica starting later does not act on it.
    pub(super) async fn write_rebalance(&self, at_ms: u64, max_moves: Option<usize>) -> bool {
        let value = super::wire::Rebalance { at_ms, max_moves }.to_string();
        let ttl = (10 * self.settings.refresh.as_millis() as u64).max(1);
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.keys.fleet("rebalance")).arg(value).arg("PX").arg(ttl);
        self.call(&self.calls.sync, async |c| cmd.query_async::<()>(c).await).await.is_some()
    }

    /// Shares a drain (its deadline, and when a hand-off was asked for) or its end, in one
    /// transaction; `false`: Redis did not take it. A drain without hand-off ends any earlier
    /// request for one: the latest request wins.
    pub(super) async fn write_drain(&self, backend: &str, drain: Option<SharedDrain>) -> bool {
        let (drains, handoffs) = (self.keys.fleet("drains"), self.keys.fleet("drain-handoffs"));
        let mut pipe = redis::pipe();
        pipe.atomic();
        match drain {
            Some(d) => pipe.cmd("HSET").arg(&drains).arg(backend).arg(d.deadline_ms).ignore(),
            None => pipe.cmd("HDEL").arg(&drains).arg(backend).ignore(),
        };
        match drain.and_then(|d| d.handoff_ms) {
            Some(ms) => pipe.cmd("HSET").arg(&handoffs).arg(backend).arg(ms).ignore(),
            None => pipe.cmd("HDEL").arg(&handoffs).arg(backend).ignore(),
        };
        self.call(&self.calls.sync, async |c| pipe.query_async::<()>(c).await).await.is_some()
    }

    /// The heartbeat in every bucket (one script each, all at once): the claims of this replica
    /// keep counting. Marks the buckets whose claims must all be written again, and follows the
    /// owner changes logged there since the last sync. The rebuild window and fleet figures are
    /// kept for the status. False: a bucket did not answer (the sync failed).
    async fn beat_buckets(&self) -> bool {
        let s = &self.settings;
        let (window, lease, dead, ttl) =
            (self.rebuild_window_ms(), self.lease_ms(), self.dead_after_ms(), self.ttl_ms());
        let cursors: Vec<u64> = lock(&self.buckets).iter().map(|b| b.cursor).collect();
        // One bucket after the other, not all at once: Redis runs one script at a time, and a
        // placement arriving behind sixteen would wait for all of them.
        let mut answers = Vec::with_capacity(BUCKETS);
        for (b, cursor) in cursors.iter().enumerate() {
            let mut inv = self.bucket_script(&self.scripts.heartbeat, b);
            let tag = self.keys.tag(b);
            inv.arg(&s.replica).arg(window).arg(lease).arg(dead).arg(cursor);
            inv.arg(format!("{tag}h:")).arg(format!("{tag}r:")).arg(ttl);
            answers.push(self.call(&self.calls.heartbeat, async |c| inv.invoke_async::<Vec<String>>(c).await).await);
        }
        let (mut rebuilding, mut live_rooms, mut splits) = (0u64, 0u64, 0u64);
        let mut buckets = lock(&self.buckets);
        // Every bucket that answered is taken in, even if another did not.
        let mut all = true;
        for (seen, answer) in buckets.iter_mut().zip(&answers) {
            let Some(answer) = answer.as_deref().and_then(Beat::parse) else {
                all = false;
                continue;
            };
            // Not when this replica's heartbeat merely lapsed for a while (a slow sync): its
            // claims stayed, and its rooms with them (`scripts.rs`, `busy`); writing them all
            // again would make the next sync slower still. Only when they may be gone.
            if answer.generation != seen.generation || answer.gap || answer.previous != seen.beat {
                seen.reassert = true;
            }
            seen.generation = answer.generation.to_owned();
            seen.beat = answer.now.to_string();
            seen.cursor = answer.seq;
            rebuilding = rebuilding.max(answer.rebuild_ms);
            live_rooms += answer.live;
            splits += answer.splits;
            // Oldest first, so that a later change of a room wins.
            for change in answer.changes.iter().rev() {
                if let Some(m) = self.follow(change) {
                    lock(&self.followed).push(m);
                }
            }
        }
        drop(buckets);
        *lock(&self.rebuilding_until) =
            (rebuilding > 0).then(|| std::time::Instant::now() + std::time::Duration::from_millis(rebuilding));
        let mut fleet = lock(&self.fleet);
        fleet.live_rooms = live_rooms;
        fleet.splits = splits;
        all
    }

    /// Follows a logged owner change of a room known here at an earlier version: returns the
    /// move, for its sockets on the old owner to be closed.
    fn follow(&self, change: &str) -> Option<(String, Arc<str>, Arc<str>)> {
        let mut parts = change.splitn(4, ' ');
        let (_n, owner, version, room) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let version: u64 = version.parse().ok()?;
        let here = self.local.owner_if(room, false)?;
        if self.local.version_of(room)? >= version || *here == *owner {
            return None;
        }
        let to: Arc<str> = Arc::from(owner);
        self.local.move_to(room, &here, &to, Some(version)).then(|| (room.to_owned(), here, to))
    }

    /// Writes the claims that changed since the last sync (all of them in the buckets marked for
    /// it) and removes those of rooms no longer held here, in as many script calls per bucket as
    /// they take. Rooms the fleet records elsewhere are moved here (the local record) and returned
    /// in `followed`, for their sockets to be closed. False: a call failed.
    pub(super) async fn publish(&self) -> bool {
        let mut live: Vec<Vec<LiveEntry>> = vec![Vec::new(); BUCKETS];
        for e in self.local.live_entries() {
            live[keys::bucket(&e.key)].push(e);
        }
        let reassert: Vec<bool> = lock(&self.buckets).iter().map(|b| b.reassert).collect();
        let mut put: Vec<Vec<(String, Written, u32, u32)>> = vec![Vec::new(); BUCKETS];
        let mut gone: Vec<Vec<(String, String)>> = vec![Vec::new(); BUCKETS];
        for (b, entries) in live.into_iter().enumerate() {
            let published = lock(&self.published[b]);
            let mut now_live = HashSet::with_capacity(entries.len());
            for e in entries {
                let w = Written {
                    owner: e.owner.clone(),
                    version: e.version,
                    connections: e.connections > 0,
                    sockets: e.sockets > 0,
                    synced: true,
                };
                if reassert[b] || published.get(&e.key) != Some(&w) {
                    put[b].push((e.key.clone(), w, e.connections, e.sockets));
                }
                now_live.insert(e.key);
            }
            // A room whose connections on an old owner are still closing after a move (or whose
            // handshakes are still on their way there) keeps its claim on that owner until they
            // have ended (`release`): it is not "gone" yet.
            for (room, w) in published.iter() {
                if !now_live.contains(room) && self.local.moving(room) == 0 {
                    let record = Record { owner: &w.owner, version: w.version }.to_string();
                    gone[b].push((room.clone(), record));
                }
            }
        }
        let mut ok = true;
        for b in 0..BUCKETS {
            if !reassert[b] && put[b].is_empty() && gone[b].is_empty() {
                continue;
            }
            if self.publish_bucket(b, &put[b], &gone[b]).await {
                lock(&self.buckets)[b].reassert = false;
            } else {
                ok = false;
            }
        }
        ok
    }

    /// [`RedisDirectory::publish`] for one bucket.
    async fn publish_bucket(&self, b: usize, put: &[(String, Written, u32, u32)], gone: &[(String, String)]) -> bool {
        let me = &self.settings.replica;
        let (ttl, lease, window) = (self.ttl_ms(), self.lease_ms(), self.rebuild_window_ms());
        let calls = put.len().div_ceil(BATCH).max(gone.len().div_ceil(BATCH));
        for call in 0..calls {
            let (chunk, gone_chunk) = (slice(put, call, BATCH), slice(gone, call, BATCH));
            let mut inv = self.bucket_script(&self.scripts.refresh, b);
            inv.key(self.keys.holds(b, me));
            for (room, ..) in chunk {
                inv.key(self.keys.room(room));
            }
            for (room, _) in gone_chunk {
                inv.key(self.keys.room(room));
            }
            inv.arg(me).arg(ttl).arg(lease).arg(window).arg(chunk.len());
            for (room, w, connections, sockets) in chunk {
                inv.arg(room).arg(&*w.owner).arg(w.version).arg(connections).arg(sockets);
            }
            for (room, record) in gone_chunk {
                inv.arg(room).arg(record);
            }
            // Whether or not this call gets through, its claims may now be in Redis: they are
            // remembered (as unknown until confirmed), to be removed once the rooms are idle.
            // Gone rooms are forgotten only once their removal is confirmed.
            {
                let mut published = lock(&self.published[b]);
                for (room, w, ..) in chunk {
                    published.entry(room.clone()).or_insert_with(|| Written { synced: false, ..w.clone() });
                }
            }
            let answers: Option<Vec<String>> =
                self.call(&self.calls.refresh, async |c| inv.invoke_async(c).await).await;
            let Some(answers) = answers else { return false };
            let mut published = lock(&self.published[b]);
            for (room, _) in gone_chunk {
                // Unless the room got live again meanwhile (then the next sync writes it).
                if self.local.owner_if(room, true).is_none() {
                    published.remove(room);
                }
            }
            for ((room, w, ..), answer) in chunk.iter().zip(answers) {
                published.insert(room.clone(), w.clone());
                let Some(Record { owner, version }) = Record::parse(&answer) else { continue };
                let to: Arc<str> = Arc::from(owner);
                if to == w.owner {
                    self.local.set_version(room, &w.owner, version);
                } else if self.local.move_to(room, &w.owner, &to, Some(version)) {
                    lock(&self.followed).push((room.clone(), w.owner.clone(), to));
                }
            }
        }
        true
    }

    /// Removes this replica's claims and heartbeats from every bucket. True if all went.
    pub(super) async fn leave_buckets(&self) -> bool {
        let me = &self.settings.replica;
        let leaves = (0..BUCKETS).map(|b| {
            let mut inv = self.bucket_script(&self.scripts.leave, b);
            inv.key(self.keys.holds(b, me)).arg(me).arg(format!("{}r:", self.keys.tag(b)));
            inv.arg(self.ttl_ms()).arg(self.lease_ms());
            async move { self.call(&self.calls.sync, async |c| inv.invoke_async::<i64>(c).await).await }
        });
        let left = futures_util::future::join_all(leaves).await.iter().all(Option::is_some);
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(self.keys.fleet("replicas")).arg(me);
        left && self.call(&self.calls.sync, async |c| cmd.query_async::<i64>(c).await).await.is_some()
    }
}

/// What a bucket's heartbeat answered (`scripts.rs`, HEARTBEAT).
struct Beat<'a> {
    generation: &'a str,
    rebuild_ms: u64,
    seq: u64,
    /// Changes since the cursor are no longer all in the log.
    gap: bool,
    /// This replica's heartbeat before this one, as Redis had it ("" if none).
    previous: &'a str,
    now: u64,
    live: u64,
    splits: u64,
    changes: &'a [String],
}

impl<'a> Beat<'a> {
    fn parse(answer: &'a [String]) -> Option<Beat<'a>> {
        let [generation, rebuild, seq, gap, previous, now, live, splits, changes @ ..] = answer else { return None };
        Some(Beat {
            generation,
            rebuild_ms: rebuild.parse().ok()?,
            seq: seq.parse().ok()?,
            gap: gap == "1",
            previous,
            now: now.parse().ok()?,
            live: live.parse().ok()?,
            splits: splits.parse().ok()?,
            changes,
        })
    }
}

/// The `i`th slice of `size` items of `all` (empty past its end).
fn slice<T>(all: &[T], i: usize, size: usize) -> &[T] {
    let start = (i * size).min(all.len());
    &all[start..(start + size).min(all.len())]
}
