//! The raw client side: one request's bytes on a fresh connection, the first response read back
//! (bounded), and requests printed with their control bytes escaped.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// What came back on one connection.
#[derive(Debug)]
pub struct Reply {
    /// The status of the first final response, if one arrived.
    pub status: Option<u16>,
    pub bytes: Vec<u8>,
}

/// Writes `raw` on a fresh connection to `addr` and reads until the connection closes, the first
/// final response is complete, or `limit` has passed. `head`: the request is a HEAD (its
/// response has no body).
pub async fn exchange(addr: SocketAddr, raw: &[u8], head: bool, limit: Duration) -> Reply {
    let deadline = Instant::now() + limit;
    let mut s = TcpStream::connect(addr).await.unwrap();
    // A server may answer and close before reading it all: a failed write is part of the story.
    let _ = tokio::time::timeout_at(deadline, s.write_all(raw)).await;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(status) = complete(&bytes, head) {
            return Reply { status: Some(status), bytes };
        }
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => bytes.extend_from_slice(&buf[..n]),
            // Closed, reset or out of time: whatever arrived is the answer.
            _ => return Reply { status: first_status(&bytes), bytes },
        }
    }
}

/// The status of the first final (not 1xx) response head in `bytes`, and where its body starts.
fn final_head(bytes: &[u8]) -> Option<(u16, usize, &[u8])> {
    let mut at = 0;
    loop {
        let rest = &bytes[at..];
        let end = rest.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        let head = &rest[..end];
        let status: u16 = std::str::from_utf8(head.get(9..12)?).ok()?.parse().ok()?;
        if (100..200).contains(&status) && status != 101 {
            at += end;
            continue;
        }
        return Some((status, at + end, head));
    }
}

fn first_status(bytes: &[u8]) -> Option<u16> {
    if let Some((status, _, _)) = final_head(bytes) {
        return Some(status);
    }
    // A head cut short still says how it was answered.
    std::str::from_utf8(bytes.get(9..12)?).ok()?.parse().ok().filter(|_| bytes.starts_with(b"HTTP/1."))
}

/// The status, once the first final response is complete in `bytes`.
fn complete(bytes: &[u8], head_request: bool) -> Option<u16> {
    let (status, body_at, head) = final_head(bytes)?;
    let body = &bytes[body_at..];
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    let no_body = head_request || status == 204 || status == 304;
    let length = text.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok());
    let done = match length {
        _ if no_body => true,
        Some(n) => body.len() >= n,
        None if text.contains("transfer-encoding: chunked") => body.ends_with(b"0\r\n\r\n"),
        // Delimited by the close.
        None => false,
    };
    done.then_some(status)
}

/// `raw` as text: printable ASCII as is, CR, LF, tab and NUL as escapes, other bytes as `\xNN`;
/// a line break after each LF.
pub fn escape(raw: &[u8]) -> String {
    let mut out = String::new();
    for &b in raw {
        match b {
            b'\r' => out.push_str("\\r"),
            b'\n' => out.push_str("\\n\n"),
            b'\t' => out.push_str("\\t"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}
