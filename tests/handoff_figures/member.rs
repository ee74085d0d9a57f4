//! A room member for the hand-off figures, as a client app behaves: it joins through roomgate
//! and reads its `hello:{backend}:{log length}`, speaks, and on a 1012 reconnects at once, timing
//! the gap from the close frame to the new owner's hello. Every wait is bounded and every
//! failure is returned as text, so that a spawned member reports instead of panicking.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::common::Ws;

/// One wait of a member: a handshake, a message, a close.
pub const STEP: Duration = Duration::from_secs(30);

/// Who greeted a member: the backend and the room's log length then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub backend: String,
    pub len: usize,
}

/// A member's reconnect after its 1012: where it landed and how long it was away.
#[derive(Clone, Debug)]
pub struct Rejoin {
    pub hello: Hello,
    /// From the 1012 close frame to the hello of the new owner.
    pub held: Duration,
}

/// `ws://{proxy}/live/?room={room}`.
pub fn room_url(proxy: std::net::SocketAddr, room: &str) -> String {
    format!("ws://{proxy}/live/?room={room}")
}

/// Opens a member's socket and reads its hello.
pub async fn join(url: &str) -> Result<(Ws, Hello), String> {
    let config = WebSocketConfig::default().max_message_size(Some(64 << 20));
    let connect = tokio_tungstenite::connect_async_with_config(url, Some(config), true);
    let (mut ws, _) = tokio::time::timeout(STEP, connect)
        .await
        .map_err(|_| format!("{url}: no handshake within {STEP:?}"))?
        .map_err(|e| format!("{url}: {e}"))?;
    let text = next_text(&mut ws).await?;
    let mut parts = text.split(':');
    match (parts.next(), parts.next(), parts.next().and_then(|n| n.parse().ok())) {
        (Some("hello"), Some(backend), Some(len)) => Ok((ws, Hello { backend: backend.to_owned(), len })),
        _ => Err(format!("{url}: expected a hello, got {text:?}")),
    }
}

async fn next_text(ws: &mut Ws) -> Result<String, String> {
    loop {
        match tokio::time::timeout(STEP, ws.next()).await {
            Err(_) => return Err(format!("no message within {STEP:?}")),
            Ok(Some(Ok(Message::Text(t)))) => return Ok(t.as_str().to_owned()),
            Ok(Some(Ok(Message::Close(frame)))) => return Err(format!("closed: {frame:?}")),
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(e))) => return Err(e.to_string()),
            Ok(None) => return Err("stream ended".into()),
        }
    }
}

/// Sends `text` and waits for its broadcast back (`{index}:{text}`).
pub async fn say(ws: &mut Ws, text: &str) -> Result<(), String> {
    ws.send(Message::text(text)).await.map_err(|e| e.to_string())?;
    loop {
        if next_text(ws).await?.ends_with(&format!(":{text}")) {
            return Ok(());
        }
    }
}

/// Reads until the close frame, completes the close as a browser does, and returns when the
/// frame arrived. Anything but a 1012 is an error.
pub async fn closed_1012(ws: &mut Ws, limit: Duration) -> Result<Instant, String> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => return Err(format!("no close within {limit:?}")),
            Ok(Some(Ok(Message::Close(frame)))) => {
                let at = Instant::now();
                let code = frame.map(|f| u16::from(f.code));
                while let Ok(Some(Ok(_))) = tokio::time::timeout(STEP, ws.next()).await {}
                return if code == Some(1012) { Ok(at) } else { Err(format!("closed with {code:?}")) };
            }
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(e))) => return Err(format!("error before close: {e}")),
            Ok(None) => return Err("ended without a close frame".into()),
        }
    }
}

/// Waits for the member's 1012 (within `limit`), then reconnects to `url` at once.
pub async fn rejoin_after_1012(mut ws: Ws, url: &str, limit: Duration) -> Result<(Ws, Rejoin), String> {
    let at = closed_1012(&mut ws, limit).await?;
    let (ws, hello) = join(url).await?;
    Ok((ws, Rejoin { hello, held: at.elapsed() }))
}

/// The `p`-th quantile (0..=1) of `v`, nearest rank; zero for none.
pub fn pct(v: &[Duration], p: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    match v.len() {
        0 => Duration::ZERO,
        n => v[((n - 1) as f64 * p).round() as usize],
    }
}

/// A duration in milliseconds with two decimals, for the printed tables.
pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}
