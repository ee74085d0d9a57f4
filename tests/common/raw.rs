//! WebSocket peers at the byte level, for frames a well-behaved library would never send: a
//! client that writes its own frames (unmasked, reserved bits, trickled a byte at a time), and a
//! backend that answers every handshake with a fixed response.

use std::net::SocketAddr;

use roomgate::relay::frame::{OP_CLOSE, parse_head, unmask};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::LIMIT;

/// A frame as a client writes it: `first` is the whole first byte (FIN, RSV, opcode), masked
/// with `mask` when given.
pub fn frame_bytes(first: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = vec![first];
    let bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(bit | n as u8),
        n if n <= 0xffff => {
            out.push(bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let start = out.len() + if mask.is_some() { 4 } else { 0 };
    if let Some(m) = mask {
        out.extend_from_slice(&m);
    }
    out.extend_from_slice(payload);
    unmask(&mut out[start..], mask, 0);
    out
}

/// A masked text frame with FIN.
pub fn text_frame(payload: &str) -> Vec<u8> {
    frame_bytes(0x81, payload.as_bytes(), Some([0x11, 0x22, 0x33, 0x44]))
}

/// Opens a WebSocket to roomgate by hand: sends the handshake for `path` with `headers`, reads
/// the response head. Returns the stream and the head.
pub async fn handshake(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (TcpStream, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: rooms.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let head = read_head(&mut s).await;
    (s, head)
}

/// Reads an HTTP head, byte by byte (nothing after it is consumed).
pub async fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(LIMIT, s.read(&mut b)).await.expect("no response head in time").unwrap();
        assert!(n == 1, "connection closed in the head: {}", String::from_utf8_lossy(&head));
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

/// Reads exactly one frame (nothing after it) and returns its opcode and unmasked payload.
pub async fn read_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = vec![0u8; 2];
    tokio::time::timeout(LIMIT, s.read_exact(&mut head)).await.expect("no frame in time").unwrap();
    let need = roomgate::relay::frame::head_len(head[1]);
    head.resize(need, 0);
    s.read_exact(&mut head[2..]).await.unwrap();
    let h = parse_head(&head).unwrap().unwrap();
    let mut payload = vec![0u8; h.payload_len as usize];
    tokio::time::timeout(LIMIT, s.read_exact(&mut payload)).await.expect("no payload in time").unwrap();
    unmask(&mut payload, h.mask, 0);
    (h.opcode, payload)
}

/// What a peer sent until it closed: the payloads of its data frames, and the code and reason of
/// its close frame (`None`: the stream ended without one).
pub async fn read_until_close(s: &mut TcpStream) -> (Vec<Vec<u8>>, Option<(u16, String)>) {
    let mut buf = Vec::new();
    let mut messages = Vec::new();
    loop {
        while let Ok(Some(head)) = parse_head(&buf) {
            let end = head.frame_len() as usize;
            if buf.len() < end {
                break;
            }
            let mut payload = buf[head.len..end].to_vec();
            unmask(&mut payload, head.mask, 0);
            buf.drain(..end);
            if head.opcode == OP_CLOSE {
                let code = (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
                let reason = String::from_utf8_lossy(payload.get(2..).unwrap_or_default()).into_owned();
                return (messages, code.map(|c| (c, reason)));
            }
            messages.push(payload);
        }
        let mut chunk = [0u8; 4096];
        let n = match tokio::time::timeout(LIMIT, s.read(&mut chunk)).await.expect("no close in time") {
            Ok(n) => n,
            Err(_) => return (messages, None),
        };
        if n == 0 {
            return (messages, None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A backend that answers every request head with `response` and then holds the connection
/// until the peer closes it.
pub async fn fixed_backend(response: Vec<u8>) -> SocketAddr {
    let response: &'static [u8] = response.leak();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                read_head(&mut s).await;
                if s.write_all(response).await.is_err() {
                    return;
                }
                let mut sink = [0u8; 1024];
                while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// The `Sec-WebSocket-Accept` that answers [`handshake`]'s key (RFC 6455's own example).
pub const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";
