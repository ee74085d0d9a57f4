//! The backends behind every proxy: a minimal HTTP/1.1 server that answers with its id (body and
//! `X-Backend`) and a WebSocket echo server behind `Upgrade: websocket`. Lean on purpose, so that the
//! load core spends its time on the load, not on the backends.

use std::net::SocketAddr;

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::ws;

/// Starts `n` backends (`b0`..) on 127.0.0.1 ports chosen by the kernel.
pub async fn start(n: usize) -> std::io::Result<Vec<(String, SocketAddr)>> {
    let mut out = Vec::new();
    for i in 0..n {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let id = format!("b{i}");
        tokio::spawn(serve(listener, id.clone()));
        out.push((id, addr));
    }
    Ok(out)
}

async fn serve(listener: TcpListener, id: String) {
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Backend: {id}\r\nContent-Length: {}\r\n\r\n{id}",
        id.len()
    );
    let response: &'static [u8] = Box::leak(response.into_bytes().into_boxed_slice());
    let id: &'static str = Box::leak(id.into_boxed_str());
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = connection(stream, id, response).await;
        });
    }
}

async fn connection(mut stream: TcpStream, id: &str, response: &[u8]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    loop {
        // One request head (GETs only: no bodies in this benchmark).
        let (head_len, upgrade_key) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let key = req
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("sec-websocket-key"))
                        .map(|h| h.value.to_vec());
                    break (n, key);
                }
                Ok(httparse::Status::Partial) => {}
                Err(_) => return Ok(()),
            }
            if stream.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        };
        buf.drain(..head_len);
        match upgrade_key {
            Some(key) => {
                let accept = accept_key(&key);
                let head = format!(
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\nX-Backend: {id}\r\n\r\n"
                );
                stream.write_all(head.as_bytes()).await?;
                return echo(stream, buf).await;
            }
            None => stream.write_all(response).await?,
        }
    }
}

fn accept_key(key: &[u8]) -> String {
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key);
    sha.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64::engine::general_purpose::STANDARD.encode(sha.digest().bytes())
}

/// Echoes every data frame unmasked; answers a close with a close and ends.
async fn echo(mut stream: TcpStream, mut buf: Vec<u8>) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(256);
    loop {
        while let Some(frame) = ws::parse(&buf) {
            let mut payload = buf[frame.payload.clone()].to_vec();
            if let Some(mask) = frame.mask {
                ws::unmask(&mut payload, mask);
            }
            let end = frame.payload.end;
            buf.drain(..end);
            match frame.opcode {
                ws::OP_CLOSE => {
                    stream.write_all(&ws::frame(ws::OP_CLOSE, &payload, None)).await?;
                    return Ok(());
                }
                ws::OP_PING => out.extend_from_slice(&ws::frame(ws::OP_PONG, &payload, None)),
                ws::OP_PONG => {}
                op => out.extend_from_slice(&ws::frame(op, &payload, None)),
            }
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    }
}
