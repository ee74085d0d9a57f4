//! The clients: R rooms of M members, each member one WebSocket at a time through a replica picked
//! at random, sending sequence-numbered messages and checking what comes back; members reconnect
//! like djust's client.js (0.5–1 s, doubling, at most 5 s). Page loads and API calls run against
//! every room too.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::http;
use crate::judge::{Ending, Judge};
use crate::rng::Rng;

/// What the members do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Run,
    /// Connected members stay, but send nothing more.
    Quiet,
    /// Everyone closes and leaves.
    Leave,
}

/// Gauges the driver waits on at the end.
#[derive(Default)]
pub struct Gauges {
    /// Members with an open socket (hello received) now.
    pub connected: AtomicUsize,
    /// Messages sent and not yet echoed, over all open sockets.
    pub pending: AtomicUsize,
}

pub struct Plan {
    pub rooms: usize,
    pub members: usize,
    pub replicas: Vec<SocketAddr>,
    /// Each member sends one message every `send_every`, jittered by half of it either way.
    pub send_every: Duration,
    /// Members connect for the first time spread over this long.
    pub ramp: Duration,
}

pub fn spawn(
    plan: Arc<Plan>,
    judge: Arc<Judge>,
    rng: &Rng,
    phase: &watch::Sender<Phase>,
    gauges: &Arc<Gauges>,
) -> JoinSet<()> {
    let mut set = JoinSet::new();
    for room in 0..plan.rooms {
        for m in 0..plan.members {
            let who = Member {
                plan: plan.clone(),
                judge: judge.clone(),
                rng: rng.fork((room * 1000 + m) as u64 + 1),
                phase: phase.subscribe(),
                gauges: gauges.clone(),
                id: (room, m),
            };
            set.spawn(who.run());
        }
        set.spawn(pages(plan.clone(), judge.clone(), rng.fork(1_000_000 + room as u64), phase.subscribe(), room));
    }
    set
}

struct Member {
    plan: Arc<Plan>,
    judge: Arc<Judge>,
    rng: Rng,
    phase: watch::Receiver<Phase>,
    gauges: Arc<Gauges>,
    id: (usize, usize),
}

fn leaving(phase: &watch::Receiver<Phase>) -> bool {
    *phase.borrow() == Phase::Leave
}

impl Member {
    async fn run(mut self) {
        let ramp = self.rng.between(Duration::ZERO, self.plan.ramp);
        let _ = tokio::time::timeout(ramp, self.phase.wait_for(|p| *p == Phase::Leave)).await;
        let mut failures = 0u32;
        while !leaving(&self.phase) {
            if self.session().await {
                failures = 0;
            } else {
                failures += 1;
            }
            if leaving(&self.phase) {
                break;
            }
            // client.js: 0.5–1 s, doubling with each failed attempt, at most 5 s.
            let base = self.rng.between(Duration::from_millis(500), Duration::from_millis(1000));
            let backoff = (base * 2u32.saturating_pow(failures.saturating_sub(1).min(4))).min(Duration::from_secs(5));
            let _ = tokio::time::timeout(backoff, self.phase.wait_for(|p| *p == Phase::Leave)).await;
        }
    }

    /// One socket from connect to its end; true when it got into its room.
    async fn session(&mut self) -> bool {
        let room = format!("r{}", self.id.0);
        let conn = self.judge.next_conn();
        let via = self.rng.below(self.plan.replicas.len());
        let url = format!("ws://{}/ws?room={room}&c={conn}", self.plan.replicas[via]);
        let ws = match tokio::time::timeout(Duration::from_secs(15), tokio_tungstenite::connect_async(url)).await {
            Ok(Ok((ws, _))) => ws,
            Ok(Err(e)) => {
                self.judge.handshake_failed(self.id, &room, handshake_error(&e));
                return false;
            }
            Err(_) => {
                self.judge.handshake_failed(self.id, &room, "timeout: no 101 in 15 s".into());
                return false;
            }
        };
        let mut ws = ws;
        // A socket that opens during a hand-off's pause may get roomgate's pong first.
        let first = async {
            loop {
                match ws.next().await {
                    Some(Ok(Message::Pong(_) | Message::Ping(_))) => continue,
                    other => return other,
                }
            }
        };
        let hello = match tokio::time::timeout(Duration::from_secs(10), first).await {
            Ok(Some(Ok(Message::Text(t)))) if t.starts_with("hello:") => t.to_string(),
            other => {
                self.judge.handshake_failed(self.id, &room, format!("no hello: {other:?}"));
                return false;
            }
        };
        let parts: Vec<&str> = hello.split(':').collect();
        let (backend, generation, len) = match parts[..] {
            [_, b, g, l] => (b.to_owned(), g.to_owned(), l.parse::<usize>().unwrap_or(0)),
            _ => {
                self.judge.violation("delivery", Some(&room), format!("conn {conn}: bad hello {hello:?}"));
                return false;
            }
        };
        self.judge.opened(conn, &room, self.id, &backend, &hello, via);
        self.gauges.connected.fetch_add(1, Ordering::Relaxed);
        let mut open = Open { conn, room, generation, expected: len, pending: VecDeque::new(), seq: 0 };
        let ending = self.relay(&mut ws, &mut open).await;
        self.gauges.connected.fetch_sub(1, Ordering::Relaxed);
        self.gauges.pending.fetch_sub(open.pending.len(), Ordering::SeqCst);
        self.judge.closed(conn, &ending, open.pending.len());
        true
    }

    /// Sends and checks until the socket ends, or the client leaves.
    async fn relay<S>(&mut self, ws: &mut tokio_tungstenite::WebSocketStream<S>, open: &mut Open) -> Ending
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let every = self.plan.send_every;
        let mut next_send = Instant::now() + self.rng.between(every / 2, every * 3 / 2);
        loop {
            let sending = *self.phase.borrow() == Phase::Run;
            tokio::select! {
                () = tokio::time::sleep_until(next_send), if sending => {
                    next_send = Instant::now() + self.rng.between(every / 2, every * 3 / 2);
                    // Counted before the phase is read again: once the driver has set Quiet and
                    // reads the gauge, every message still to be sent is in it, or is not sent.
                    self.gauges.pending.fetch_add(1, Ordering::SeqCst);
                    if *self.phase.borrow() != Phase::Run {
                        self.gauges.pending.fetch_sub(1, Ordering::SeqCst);
                        continue;
                    }
                    open.seq += 1;
                    open.pending.push_back(open.seq);
                    self.judge.sent();
                    if let Err(e) = ws.send(Message::text(format!("{}.{}", open.conn, open.seq))).await {
                        return Ending::Bare(format!("send: {e}"));
                    }
                }
                changed = self.phase.changed() => {
                    if changed.is_err() || leaving(&self.phase) {
                        let _ = ws.close(None).await;
                        finish(ws).await;
                        return Ending::Client;
                    }
                }
                msg = ws.next() => match msg {
                    Some(Ok(Message::Text(t))) => self.broadcast(open, t.as_str()),
                    Some(Ok(Message::Close(frame))) => {
                        finish(ws).await;
                        return Ending::Code(frame.map_or(1005, |f| u16::from(f.code)));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Ending::Bare(e.to_string()),
                    None => return Ending::Bare("end of stream".into()),
                }
            }
        }
    }

    /// One broadcast `{index}:{conn}.{seq}`: the next index of the copy, the same message every
    /// other socket got at that index, and our own messages back in the order sent.
    fn broadcast(&mut self, open: &mut Open, text: &str) {
        let parsed = text.split_once(':').and_then(|(i, m)| {
            let (c, s) = m.split_once('.')?;
            Some((i.parse::<usize>().ok()?, c.parse::<u64>().ok()?, s.parse::<u32>().ok()?))
        });
        let Some((index, sender, seq)) = parsed else {
            self.judge.violation("delivery", Some(&open.room), format!("conn {}: unreadable {text:?}", open.conn));
            return;
        };
        if index != open.expected {
            let d = format!(
                "conn {}: got index {index} of copy {}, expected {}",
                open.conn, open.generation, open.expected
            );
            self.judge.violation("delivery", Some(&open.room), d);
        }
        open.expected = index + 1;
        if let Err(d) = self.judge.observe(&open.generation, index, sender, seq) {
            self.judge.violation("delivery", Some(&open.room), format!("conn {}: {d}", open.conn));
        }
        if sender == open.conn {
            if open.pending.front() == Some(&seq) {
                open.pending.pop_front();
                self.gauges.pending.fetch_sub(1, Ordering::SeqCst);
                self.judge.echoed();
            } else {
                let d = format!("conn {}: own message {seq} came back, expected {:?}", open.conn, open.pending.front());
                self.judge.violation("delivery", Some(&open.room), d);
            }
        }
    }
}

struct Open {
    conn: u64,
    room: String,
    generation: String,
    expected: usize,
    pending: VecDeque<u32>,
    seq: u32,
}

/// Reads to the end of the stream (the close handshake's reply goes out meanwhile), bounded.
async fn finish<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let _ = tokio::time::timeout(Duration::from_secs(3), async { while let Some(Ok(_)) = ws.next().await {} }).await;
}

fn handshake_error(e: &WsError) -> String {
    match e {
        WsError::Http(resp) => format!("http {}", resp.status().as_u16()),
        WsError::Io(io) => format!("io {:?}", io.kind()),
        other => format!("other: {other}"),
    }
}

/// Page loads and API calls against one room, every 2–6 s, through a replica picked at random.
async fn pages(plan: Arc<Plan>, judge: Arc<Judge>, mut rng: Rng, mut phase: watch::Receiver<Phase>, room: usize) {
    while !leaving(&phase) {
        let pause = rng.between(Duration::from_secs(2), Duration::from_secs(6));
        let _ = tokio::time::timeout(pause, phase.wait_for(|p| *p == Phase::Leave)).await;
        if leaving(&phase) {
            return;
        }
        let path = if rng.chance(50) { format!("/page?room=r{room}") } else { format!("/api/count?room=r{room}") };
        let addr = plan.replicas[rng.below(plan.replicas.len())];
        let outcome = match http::request(addr, "GET", &path, "", Duration::from_secs(15)).await {
            Ok((status, _)) => format!("http {status}"),
            Err(e) if e.starts_with("connect") => "refused".to_owned(),
            Err(_) => "error".to_owned(),
        };
        judge.page(outcome);
    }
}
