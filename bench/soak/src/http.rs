//! A minimal HTTP/1.1 client over loopback (one request per connection, bounded in time): the
//! admin API, readiness probes, and the clients' page loads and API calls.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest answer read; the soak's answers are small.
const MAX_ANSWER: usize = 1 << 20;

/// Sends one request and reads the whole answer: `(status, body)`.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    limit: Duration,
) -> Result<(u16, String), String> {
    let work = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            addr.port(),
            body.len()
        );
        s.write_all(head.as_bytes()).await.map_err(|e| e.to_string())?;
        s.write_all(body.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 || buf.len() > MAX_ANSWER {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        parse(&buf)
    };
    tokio::time::timeout(limit, work).await.map_err(|_| format!("{method} {path}: no answer in {limit:?}"))?
}

fn parse(buf: &[u8]) -> Result<(u16, String), String> {
    let text = String::from_utf8_lossy(buf);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status line in {:?}", text.chars().take(80).collect::<String>()))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}
