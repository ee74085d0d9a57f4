//! One sync of the shared directory, and what a replica publishes at each: drains changed while
//! Redis was away, its live rooms (re-asserted with the full TTL and recorded in
//! `held:{replica}`), the removal of those no longer live, and the full TTL for rooms that got
//! their first WebSocket since the last sync.

use std::collections::HashSet;
use std::sync::Arc;

use super::wire::Record;
use super::{BATCH, GONE_BATCH, RedisDirectory, ReplicaState, SharedDrain, SyncReport, lock};

impl RedisDirectory {
    /// One sync: reconnect if needed, replay drains, refresh live rooms, heartbeat, read drains.
    pub(super) async fn sync_once(&self, me: &ReplicaState) -> Option<SyncReport> {
        let mut conn = self.connection().await?;
        // A trivial call decides whether Redis is back before anything is written.
        if !self.is_up() {
            let ping = redis::cmd("PING");
            let answer = tokio::time::timeout(self.settings.timeout, ping.query_async::<String>(&mut conn)).await;
            if self.settled(answer).is_none() {
                // A fresh connection next time, rather than one in the middle of its own
                // reconnect back-off.
                self.conn.store(None);
                return None;
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
        let moved = self.refresh().await?;
        self.extend_first_sockets().await?;
        let (drains, handoffs, rebalance) = self.heartbeat(me).await?;
        Some(SyncReport { drains, handoffs, rebalance, moved })
    }

    /// Shares a rebalance request, for every replica to see at one of its next syncs: it lasts
    /// 10 refresh periods, so that a replica starting later does not act on it.
    pub(super) async fn write_rebalance(&self, at_ms: u64, max_moves: Option<usize>) -> bool {
        let value = super::wire::Rebalance { at_ms, max_moves }.to_string();
        let ttl = (10 * self.settings.refresh.as_millis() as u64).max(1);
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key("rebalance", "")).arg(value).arg("PX").arg(ttl);
        self.call(&self.calls.sync, async |c| cmd.query_async::<()>(c).await).await.is_some()
    }

    /// Shares a drain (its deadline, and when a hand-off was asked for) or its end, in one
    /// transaction; `false`: Redis did not take it. A drain without hand-off ends any earlier
    /// request for one: the latest request wins.
    pub(super) async fn write_drain(&self, backend: &str, drain: Option<SharedDrain>) -> bool {
        let (drains, handoffs) = (self.key("drains", ""), self.key("drain-handoffs", ""));
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

    /// Publishes the rooms held live here and removes from `held:{replica}` those no longer
    /// held, in as many script calls as either takes. Rooms the fleet records elsewhere are moved
    /// here (the local record) and returned as (room, local owner, fleet owner), for their
    /// sockets to be closed.
    pub(super) async fn refresh(&self) -> Option<Vec<(String, Arc<str>, Arc<str>)>> {
        let live = self.local.live_entries();
        let now_live: HashSet<&str> = live.iter().map(|e| e.key.as_str()).collect();
        // A room whose connections on an old owner are still closing after a move (or whose
        // handshakes are still on their way there) keeps its claim on that owner, renewed, until
        // they have ended (`release`): it is not "gone" yet.
        let (closing, gone): (Vec<String>, Vec<String>) = lock(&self.published)
            .iter()
            .filter(|r| !now_live.contains(r.as_str()))
            .cloned()
            .partition(|r| self.local.moving(r) > 0);
        let mut moves = Vec::new();
        let ttl = self.ttl_ms().to_string();
        let held_ttl = self.held_ttl_ms().to_string();
        let (lease, window) = (self.lease_ms().to_string(), self.rebuild_window_ms().to_string());
        let calls = live.len().div_ceil(BATCH).max(gone.len().div_ceil(GONE_BATCH)).max(closing.len().div_ceil(BATCH));
        for call in 0..calls {
            let chunk = slice(&live, call, BATCH);
            let closing_chunk = slice(&closing, call, BATCH);
            let gone_chunk = slice(&gone, call, GONE_BATCH);
            let mut inv = self.scripts.refresh.prepare_invoke();
            inv.arg(&self.settings.prefix).arg(&self.settings.replica).arg(&ttl).arg(&held_ttl);
            inv.arg(&lease).arg(&window).arg(chunk.len()).arg(closing_chunk.len());
            for e in chunk {
                inv.arg(&e.key).arg(&*e.owner).arg(e.version).arg(e.connections).arg(e.sockets);
            }
            inv.arg(closing_chunk);
            inv.arg(gone_chunk);
            // Whether or not this call gets through, its live rooms may now be in `held`: they
            // are remembered, to be removed once they are idle. Gone rooms are forgotten only
            // once their removal is confirmed.
            lock(&self.published).extend(chunk.iter().map(|e| e.key.clone()));
            let answers: Vec<String> = self.call(&self.calls.refresh, async |c| inv.invoke_async(c).await).await?;
            let mut published = lock(&self.published);
            for room in gone_chunk {
                published.remove(room);
            }
            drop(published);
            for (e, answer) in chunk.iter().zip(answers) {
                let Some(Record { owner, version }) = Record::parse(&answer) else { continue };
                let to: Arc<str> = Arc::from(owner);
                if to == e.owner {
                    self.local.set_version(&e.key, &e.owner, version);
                } else if self.local.move_to(&e.key, &e.owner, &to, Some(version)) {
                    moves.push((e.key.clone(), e.owner.clone(), to));
                }
            }
        }
        Some(moves)
    }

    /// Gives the full TTL to the records of rooms that got their first WebSocket since the last
    /// sync (one script call for all of them). If the call fails they are dropped: the outage
    /// is being handled, and their records, if still there, keep the short TTL.
    pub(super) async fn extend_first_sockets(&self) -> Option<()> {
        let rooms = std::mem::take(&mut *lock(&self.first_sockets));
        if rooms.is_empty() {
            return Some(());
        }
        let mut inv = self.scripts.extend.prepare_invoke();
        inv.arg(&self.settings.prefix).arg(self.ttl_ms());
        for (room, record) in &rooms {
            inv.arg(room).arg(record);
        }
        let _extended: u64 = self.call(&self.calls.extend, async |c| inv.invoke_async(c).await).await?;
        Some(())
    }
}

/// The `i`th slice of `size` items of `all` (empty past its end).
fn slice<T>(all: &[T], i: usize, size: usize) -> &[T] {
    let start = (i * size).min(all.len());
    &all[start..(start + size).min(all.len())]
}
