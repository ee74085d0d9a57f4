//! Pauses over real loopback tunnels: test client <-> relay <-> test backend, registered in a
//! registry as the proxy registers them.

use std::time::Duration;

use futures_util::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::*;
use crate::relay::frame::{
    FENCE_LEN, FrameTracker, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG, OP_TEXT, close_frame, frame, parse_head, unmask,
};
use crate::relay::watch::NavWatch;
use crate::relay::{self, Ending, PumpStats, TunnelOptions};

const M: [u8; 4] = [9, 8, 7, 6];
/// Bounds every wait for something that must happen.
const SOON: Duration = Duration::from_secs(5);
/// How long a test watches for bytes that must not come: long enough for a relay that wrongly
/// kept reading to have passed them on over loopback, short enough to keep the suite quick.
const QUIET: Duration = Duration::from_millis(300);

async fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (a, b) = tokio::join!(TcpStream::connect(addr), listener.accept());
    (a.unwrap(), b.unwrap().0)
}

/// The two test peers of one tunnel of room "r" on backend "b", and its relay's task (which
/// drops the registration when the relay ends, as the proxy does).
struct Tunnel {
    client: TcpStream,
    backend: TcpStream,
    task: JoinHandle<(PumpStats, Ending)>,
}

async fn open(tunnels: &Arc<Tunnels>) -> Tunnel {
    open_with(tunnels, None).await
}

async fn open_with(tunnels: &Arc<Tunnels>, watch: Option<NavWatch>) -> Tunnel {
    let (client, client_side) = tcp_pair().await;
    let (backend_side, backend) = tcp_pair().await;
    let registration = tunnels.register(Some("r".into()), "b".into());
    let opts = TunnelOptions { close_timeout: SOON, rsv: 0 };
    let relay = relay::run(client_side, backend_side, registration.handle().clone(), opts, watch);
    let task = tokio::spawn(async move {
        let out = relay.await;
        drop(registration);
        out
    });
    Tunnel { client, backend, task }
}

async fn read_exactly(s: &mut (impl AsyncReadExt + Unpin), n: usize) -> Vec<u8> {
    let mut got = vec![0u8; n];
    tokio::time::timeout(SOON, s.read_exact(&mut got)).await.expect("the bytes came in time").unwrap();
    got
}

/// Reads until a close frame ends: the bytes through it, and its code.
async fn read_until_close(s: &mut TcpStream) -> (Vec<u8>, Option<u16>) {
    let mut t = FrameTracker::new();
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(SOON, s.read(&mut buf)).await.expect("a close frame in time").unwrap();
        assert_ne!(n, 0, "the stream ended without a close frame after {all:?}");
        let feed = t.feed(&buf[..n]).unwrap();
        all.extend_from_slice(&buf[..n]);
        if let Some(end) = feed.close_end {
            all.truncate(all.len() - n + end);
            return (all, t.close_code());
        }
    }
}

/// Length of roomgate's close frame to a backend (masked, no reason).
const BACKEND_CLOSE_LEN: usize = 2 + 4 + 2;

/// Nothing arrives on `s` within [`QUIET`].
async fn stays_quiet(s: &mut TcpStream, what: &str) {
    let mut buf = [0u8; 64];
    if let Ok(read) = tokio::time::timeout(QUIET, s.read(&mut buf)).await {
        panic!("{what}: {read:?} {:?}", &buf[..read.as_ref().map_or(0, |n| *n)]);
    }
}

/// The backend's side of a pause's fence: reads roomgate's ping (masked, a random token) and
/// answers it, as a WebSocket peer does once it has read every frame before it. Returns the
/// pong, which the client gets.
async fn answer_fence(backend: &mut TcpStream) -> Vec<u8> {
    let got = read_exactly(backend, 2 + 4 + FENCE_LEN).await;
    let head = parse_head(&got).unwrap().unwrap();
    assert_eq!((head.opcode, head.payload_len), (OP_PING, FENCE_LEN as u64), "the fence's ping: {got:?}");
    let mut token = got[head.len..].to_vec();
    unmask(&mut token, head.mask, 0);
    let pong = frame(OP_PONG, &token, None);
    backend.write_all(&pong).await.unwrap();
    pong
}

/// Waits for `paused` to stop, the backend answering the fence; returns the pong the client
/// is sent.
async fn stop(paused: &Paused, backend: &mut TcpStream) -> Vec<u8> {
    let (stopped, pong) = tokio::join!(tokio::time::timeout(SOON, paused.stopped()), answer_fence(backend));
    stopped.expect("stopped once the backend answered the fence");
    pong
}

fn small(i: usize) -> Vec<u8> {
    frame(OP_BINARY, format!("frame {i}").as_bytes(), Some(M))
}

/// The client streams frames while a pause comes in the middle of a large one: the backend gets
/// that frame whole and nothing after it until the pause ends, the backend's stream flows on,
/// then the rest arrives in order, nothing lost or doubled.
#[tokio::test]
async fn a_pause_stops_the_client_stream_at_a_frame_boundary_and_resume_delivers_the_rest() {
    let tunnels = Arc::new(Tunnels::default());
    let Tunnel { client, mut backend, task } = open(&tunnels).await;
    let (mut client_rd, mut client_wr) = client.into_split();
    let big = frame(OP_BINARY, &(0..300_000u32).map(|i| i as u8).collect::<Vec<_>>(), Some(M));
    let mut before: Vec<u8> = (0..20).flat_map(small).collect();
    before.extend_from_slice(&big[..100_000]);
    client_wr.write_all(&before).await.unwrap();
    assert_eq!(read_exactly(&mut backend, before.len()).await, before, "relayed before the pause");

    // Mid-frame: the pause cannot have stopped the stream yet.
    let paused = tunnels.pause_room("r", "b");
    assert_eq!(paused.len(), 1);
    assert!(!paused.is_stopped(), "a frame is half-way through");
    let mut after: Vec<u8> = (20..50).flat_map(small).collect();
    after.extend(frame(OP_PING, b"ping", Some(M)));
    after.extend((50..80).flat_map(small));
    let mut rest = big[100_000..].to_vec();
    rest.extend_from_slice(&after);
    let writer = tokio::spawn(async move {
        // In several writes, one of which holds both the end of the large frame and the frames
        // after it: a relay that read what is there would pass the boundary.
        for piece in rest.chunks(7 * 1024) {
            client_wr.write_all(piece).await.unwrap();
        }
        client_wr
    });
    // The backend reads while the relay completes the frame: its socket buffers need not hold it.
    // Then it gets the fence's ping, and the stop counts once it has answered it.
    let completed = read_exactly(&mut backend, big.len() - 100_000).await;
    assert_eq!(completed, big[100_000..], "the frame completed");
    assert!(!paused.is_stopped(), "the backend has not answered the fence");
    let pong = stop(&paused, &mut backend).await;
    assert_eq!(read_exactly(&mut client_rd, pong.len()).await, pong, "the client gets the pong");
    // Everything after the large frame is written (to the socket buffers), and none of it passes.
    let client_wr = tokio::time::timeout(SOON, writer).await.expect("the client wrote everything").unwrap();
    stays_quiet(&mut backend, "the backend got bytes while paused").await;

    // The backend's stream flows while the client's is paused.
    let down = frame(OP_TEXT, b"from the backend while paused", None);
    backend.write_all(&down).await.unwrap();
    assert_eq!(read_exactly(&mut client_rd, down.len()).await, down);

    paused.resume();
    assert_eq!(read_exactly(&mut backend, after.len()).await, after, "the rest, in order");
    // Then nothing but the client's close: nothing was doubled.
    let mut client_wr = client_wr;
    client_wr.write_all(&frame(OP_CLOSE, &1000u16.to_be_bytes(), Some(M))).await.unwrap();
    let (got, code) = read_until_close(&mut backend).await;
    assert_eq!((got.len(), code), (8, Some(1000)), "the close frame alone: {got:?}");
    backend.write_all(&close_frame(1000, "", None)).await.unwrap();
    backend.shutdown().await.unwrap();
    let (stats, ending) = tokio::time::timeout(SOON, task).await.unwrap().unwrap();
    assert!(matches!(ending, Ending::Finished), "{ending:?}");
    let sent = before.len() + big.len() - 100_000 + after.len() + 8;
    assert_eq!(stats.bytes_up, sent as u64);
    assert!(tunnels.is_empty());
}

/// Stopped counts only once the backend has read everything relayed before the pause: its pong
/// to roomgate's ping, with the ping's token. A pong with another payload (the answer to a ping
/// the client sent, or an unsolicited one) does not count, nor does one from an earlier pause;
/// all go on to the client.
#[tokio::test]
async fn a_pause_stops_only_once_the_backend_answers_its_own_ping() {
    let tunnels = Arc::new(Tunnels::default());
    let Tunnel { mut client, mut backend, task } = open(&tunnels).await;
    let first = tunnels.pause_room("r", "b");
    let ping = read_exactly(&mut backend, 2 + 4 + FENCE_LEN).await;
    let head = parse_head(&ping).unwrap().unwrap();
    let mut token = ping[head.len..].to_vec();
    unmask(&mut token, head.mask, 0);
    let mut other = token.clone();
    other[0] ^= 1;
    let wrong: Vec<u8> =
        [frame(OP_PONG, &other, None), frame(OP_PONG, b"", None), frame(OP_PONG, &token[..4], None)].concat();
    backend.write_all(&wrong).await.unwrap();
    assert_eq!(read_exactly(&mut client, wrong.len()).await, wrong, "pongs go on to the client");
    assert!(tokio::time::timeout(QUIET, first.stopped()).await.is_err(), "no pong with the token yet");
    first.resume();
    // Another pause: the client is read again in between, so the first token is stale.
    let held = small(1);
    client.write_all(&held).await.unwrap();
    assert_eq!(read_exactly(&mut backend, held.len()).await, held);
    let second = tunnels.pause_room("r", "b");
    let ping2 = read_exactly(&mut backend, 2 + 4 + FENCE_LEN).await;
    backend.write_all(&frame(OP_PONG, &token, None)).await.unwrap();
    assert!(tokio::time::timeout(QUIET, second.stopped()).await.is_err(), "the first pause's pong is stale");
    let head = parse_head(&ping2).unwrap().unwrap();
    let mut token2 = ping2[head.len..].to_vec();
    unmask(&mut token2, head.mask, 0);
    assert_ne!(token2, token, "each pause has its own token");
    backend.write_all(&frame(OP_PONG, &token2, None)).await.unwrap();
    tokio::time::timeout(SOON, second.stopped()).await.expect("stopped once its own pong came");
    drop(second);
    drop((client, backend));
    let _ = tokio::time::timeout(SOON, task).await.expect("the tunnel ended");
}

/// A backend that sends its close frame instead of answering reads nothing more: the pause
/// counts it as stopped.
#[tokio::test]
async fn a_backend_that_closes_instead_of_answering_the_fence_counts_as_stopped() {
    let tunnels = Arc::new(Tunnels::default());
    let Tunnel { client: _client, mut backend, task: _task } = open(&tunnels).await;
    let paused = tunnels.pause_room("r", "b");
    let _ping = read_exactly(&mut backend, 2 + 4 + FENCE_LEN).await;
    assert!(!paused.is_stopped());
    backend.write_all(&close_frame(1001, "", None)).await.unwrap();
    tokio::time::timeout(SOON, paused.stopped()).await.expect("a closing backend counts as stopped");
}

/// A close request on a paused tunnel closes both sides with its code: the backend's close frame
/// comes at once (the stream is at a boundary), what the client sent while paused is dropped,
/// and the close handshake runs to its end.
#[tokio::test]
async fn a_close_request_closes_a_paused_tunnel_on_both_sides() {
    let tunnels = Arc::new(Tunnels::default());
    let Tunnel { mut client, mut backend, task } = open(&tunnels).await;
    let first = small(0);
    client.write_all(&first).await.unwrap();
    assert_eq!(read_exactly(&mut backend, first.len()).await, first);
    let paused = tunnels.pause_room("r", "b");
    let pong = stop(&paused, &mut backend).await;
    let held: Vec<u8> = (1..10).flat_map(small).collect();
    client.write_all(&held).await.unwrap();

    assert_eq!(tunnels.close_room("r", "b", 1012), 1);
    let (got, code) = read_until_close(&mut backend).await;
    assert_eq!((got.len(), code), (BACKEND_CLOSE_LEN, Some(1001)), "the close alone, no held frame: {got:?}");
    let (got, code) = read_until_close(&mut client).await;
    let mut to_client = pong;
    to_client.extend(close_frame(1012, crate::relay::CloseRequest::Moving.reason(), None));
    assert_eq!((got, code), (to_client, Some(1012)), "the pong, then the close");
    // Both reply; the relay drops the held frames while it reads the client's reply.
    client.write_all(&frame(OP_CLOSE, &1012u16.to_be_bytes(), Some(M))).await.unwrap();
    backend.write_all(&close_frame(1001, "", None)).await.unwrap();
    let (stats, ending) = tokio::time::timeout(SOON, task).await.expect("the handshake ended").unwrap();
    assert!(matches!(ending, Ending::ClosedByProxy(1012)), "{ending:?}");
    assert_eq!(stats.client_close, Some(1012));
    assert!(paused.is_stopped(), "an ended tunnel counts as stopped");
    drop(paused);
    assert!(tunnels.is_empty());
}

/// Dropping the pause without a decision resumes the tunnel: a cancelled hand-off never leaves a
/// socket stuck.
#[tokio::test]
async fn dropping_a_pause_resumes_its_tunnels() {
    let tunnels = Arc::new(Tunnels::default());
    let Tunnel { mut client, mut backend, task } = open(&tunnels).await;
    let paused = tunnels.pause_room("r", "b");
    stop(&paused, &mut backend).await;
    let held = small(1);
    client.write_all(&held).await.unwrap();
    stays_quiet(&mut backend, "the frame passed while paused").await;
    drop(paused);
    assert_eq!(read_exactly(&mut backend, held.len()).await, held);
    drop((client, backend));
    let _ = tokio::time::timeout(SOON, task).await.expect("the tunnel ended");
}

/// A djust socket's page watch holds a text message back until it is whole: a pause stops
/// there, with nothing of the message written, and the message goes whole after the pause.
#[tokio::test]
async fn a_watched_stream_stops_where_its_watch_holds_a_message_back() {
    let tunnels = Arc::new(Tunnels::default());
    let regex = regex::Regex::new("^/room/(?P<room>[^/]+)/").unwrap();
    let watch = NavWatch::new(regex, Some("r"), 64 * 1024, Default::default());
    let Tunnel { mut client, mut backend, task } = open_with(&tunnels, Some(watch)).await;
    let event = frame(OP_TEXT, br#"{"type":"event","event":"increment","params":{}}"#, Some(M));
    client.write_all(&event).await.unwrap();
    assert_eq!(read_exactly(&mut backend, event.len()).await, event);
    client.write_all(&event[..20]).await.unwrap();
    let paused = tunnels.pause_room("r", "b");
    stop(&paused, &mut backend).await; // what was written ends at a boundary
    client.write_all(&event[20..]).await.unwrap();
    stays_quiet(&mut backend, "the message passed while paused").await;
    paused.resume();
    assert_eq!(read_exactly(&mut backend, event.len()).await, event, "whole, once");
    drop((client, backend));
    let _ = tokio::time::timeout(SOON, task).await.expect("the tunnel ended");
}

/// A tunnel whose client goes away in the middle of a frame, while paused, counts as stopped.
#[tokio::test]
async fn a_tunnel_that_ends_while_paused_counts_as_stopped() {
    let tunnels = Arc::new(Tunnels::default());
    let Tunnel { mut client, mut backend, task } = open(&tunnels).await;
    let half = &small(2)[..5];
    client.write_all(half).await.unwrap();
    assert_eq!(read_exactly(&mut backend, half.len()).await, half);
    let paused = tunnels.pause_room("r", "b");
    assert!(!paused.is_stopped());
    drop(client);
    backend.shutdown().await.unwrap();
    tokio::time::timeout(SOON, paused.stopped()).await.expect("the ended tunnel counts");
    let _ = tokio::time::timeout(SOON, task).await.expect("the tunnel ended");
}

#[tokio::test]
async fn a_room_without_tunnels_stops_at_once() {
    let tunnels = Arc::new(Tunnels::default());
    let paused = tunnels.pause_room("nobody", "b");
    assert!(paused.is_empty());
    assert!(paused.stopped().now_or_never().is_some());
}

/// Only the room's tunnels on that backend, not closing, are paused; pauses add up; a pause
/// holds off idle expiry and its end counts as activity; a registration dropped without a relay
/// counts as stopped.
#[test]
fn pauses_cover_the_room_on_its_backend_and_keep_its_tunnels_from_idling() {
    let t = Arc::new(Tunnels::default());
    let a = t.register(Some("r".into()), "a".into());
    let elsewhere = t.register(Some("r".into()), "b".into());
    let closing = t.register(Some("r".into()), "a".into());
    closing.handle().request_close(1012);
    let first = t.pause_room("r", "a");
    let second = t.pause_room("r", "a");
    assert_eq!((first.len(), second.len()), (1, 1));
    assert!(a.handle().is_paused() && !elsewhere.handle().is_paused() && !closing.handle().is_paused());

    a.handle().active_ms.store(0, Ordering::Relaxed);
    elsewhere.handle().active_ms.store(0, Ordering::Relaxed);
    assert_eq!(t.close_quiet_since(5), 1, "the unpaused one only");
    assert!(!a.handle().closing());
    first.resume();
    assert!(a.handle().is_paused(), "the second pause still holds it");
    a.handle().active_ms.store(u64::MAX, Ordering::Relaxed);
    second.resume();
    assert!(!a.handle().is_paused());
    assert_ne!(a.handle().active_ms.load(Ordering::Relaxed), u64::MAX, "the end of the pause is activity");
    assert!(!a.handle().hold_client(), "the relay relays again");

    let paused = t.pause_room("r", "a");
    assert!(!paused.is_stopped());
    drop(a);
    assert!(paused.is_stopped());
}

/// The end of a hand-off: the move closes the room's paused tunnels, then ends the pause at once.
/// A relay that sees the close request only after that still passes on nothing its client sent
/// while paused (the old owner has handed its state over): the backend gets the close alone.
#[tokio::test]
async fn a_tunnel_closed_while_paused_passes_on_nothing_held_when_the_pause_ends_first() {
    let tunnels = Arc::new(Tunnels::default());
    let Tunnel { mut client, mut backend, task } = open(&tunnels).await;
    let paused = tunnels.pause_room("r", "b");
    stop(&paused, &mut backend).await;
    let held: Vec<u8> = (0..5).flat_map(small).collect();
    client.write_all(&held).await.unwrap();
    stays_quiet(&mut backend, "the frames passed while paused").await;
    // One runtime thread and no await in between: the relay polls only after both.
    assert_eq!(tunnels.close_room("r", "b", 1012), 1);
    drop(paused);
    let (got, code) = read_until_close(&mut backend).await;
    assert_eq!((got.len(), code), (BACKEND_CLOSE_LEN, Some(1001)), "the close alone, no held frame: {got:?}");
    let (_, code) = read_until_close(&mut client).await;
    assert_eq!(code, Some(1012));
    client.write_all(&frame(OP_CLOSE, &1012u16.to_be_bytes(), Some(M))).await.unwrap();
    backend.write_all(&close_frame(1001, "", None)).await.unwrap();
    let (_, ending) = tokio::time::timeout(SOON, task).await.expect("the handshake ended").unwrap();
    assert!(matches!(ending, Ending::ClosedByProxy(1012)), "{ending:?}");
}

/// A tunnel of the room on the paused backend registered while the pause lasts (a handshake that
/// was on its way) joins it, and the pause's end resumes it; other backends and later tunnels
/// are not paused.
#[test]
fn a_tunnel_registered_while_a_pause_lasts_joins_it() {
    let t = Arc::new(Tunnels::default());
    let paused = t.pause_room("r", "a");
    assert!(paused.is_empty() && paused.is_stopped());
    let late = t.register(Some("r".into()), "a".into());
    let elsewhere = t.register(Some("r".into()), "b".into());
    let other_room = t.register(Some("q".into()), "a".into());
    assert!(late.handle().is_paused() && !elsewhere.handle().is_paused() && !other_room.handle().is_paused());
    assert_eq!(paused.len(), 1);
    assert!(!paused.is_stopped(), "its relay has not reported yet");
    paused.resume();
    assert!(!late.handle().is_paused());
    let after = t.register(Some("r".into()), "a".into());
    assert!(!after.handle().is_paused(), "the pause is over");
    assert!(t.lock().pauses.is_empty(), "an ended pause leaves nothing behind");
}
