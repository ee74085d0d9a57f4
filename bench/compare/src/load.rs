//! The load: keep-alive HTTP requests, WebSocket echo, WebSocket upgrades, idle WebSockets. Every
//! request carries its room in `X-Room`; every answer names its backend, so rooms answered by two
//! backends are counted.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::ws;

/// What one mode's connections did in the measured window.
#[derive(Default)]
pub struct Outcome {
    pub ops: u64,
    pub errors: u64,
    pub latencies_us: Vec<u32>,
    /// (room, backend) pairs seen, one per room and connection.
    pub seen: Vec<(String, String)>,
}

impl Outcome {
    fn merge(&mut self, other: Outcome) {
        self.ops += other.ops;
        self.errors += other.errors;
        self.latencies_us.extend(other.latencies_us);
        self.seen.extend(other.seen);
    }

    pub fn percentile_us(&mut self, p: f64) -> u32 {
        if self.latencies_us.is_empty() {
            return 0;
        }
        self.latencies_us.sort_unstable();
        let i = ((self.latencies_us.len() as f64 - 1.0) * p).round() as usize;
        self.latencies_us[i]
    }
}

/// Rooms that were answered by more than one backend.
pub fn split_rooms(seen: &[(String, String)]) -> usize {
    let mut owner: HashMap<&str, &str> = HashMap::new();
    let mut split: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for (room, backend) in seen {
        match owner.get(room.as_str()) {
            Some(b) if *b != backend.as_str() => {
                split.insert(room);
            }
            Some(_) => {}
            None => {
                owner.insert(room, backend);
            }
        }
    }
    split.len()
}

async fn join_all(tasks: Vec<tokio::task::JoinHandle<Outcome>>) -> Outcome {
    let mut total = Outcome::default();
    for t in tasks {
        match t.await {
            Ok(o) => total.merge(o),
            Err(_) => total.errors += 1,
        }
    }
    total
}

// === HTTP ===

/// `conns` keep-alive connections, each cycling through its own 16 rooms, for `window`.
pub async fn http(addr: SocketAddr, conns: usize, window: Duration) -> Outcome {
    let deadline = Instant::now() + window;
    let tasks = (0..conns).map(|c| tokio::spawn(http_conn(addr, c, conns, deadline))).collect();
    join_all(tasks).await
}

async fn http_conn(addr: SocketAddr, c: usize, conns: usize, deadline: Instant) -> Outcome {
    let rooms: Vec<String> = (0..16).map(|k| format!("room-{}", c + conns * k)).collect();
    let requests: Vec<Vec<u8>> = rooms
        .iter()
        .map(|r| format!("GET /api/state HTTP/1.1\r\nHost: bench\r\nX-Room: {r}\r\n\r\n").into_bytes())
        .collect();
    let mut out = Outcome { latencies_us: Vec::with_capacity(1 << 16), ..Outcome::default() };
    let mut owners: Vec<Option<String>> = vec![None; rooms.len()];
    let mut stream = None;
    let mut buf = Vec::with_capacity(4096);
    let mut i = 0;
    while Instant::now() < deadline {
        let s = match stream.as_mut() {
            Some(s) => s,
            None => match connect(addr).await {
                Ok(s) => stream.insert(s),
                Err(_) => {
                    out.errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let k = i % requests.len();
        i += 1;
        let start = Instant::now();
        match exchange(s, &requests[k], &mut buf).await {
            Ok(backend) => {
                out.ops += 1;
                out.latencies_us.push(start.elapsed().as_micros().min(u32::MAX as u128) as u32);
                if owners[k].as_deref() != Some(backend.as_str()) {
                    if let Some(old) = owners[k].replace(backend.clone()) {
                        out.seen.push((rooms[k].clone(), old));
                    }
                    out.seen.push((rooms[k].clone(), backend));
                }
            }
            Err(_) => {
                out.errors += 1;
                stream = None;
                buf.clear();
            }
        }
    }
    out
}

async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// One request and its response; the backend id from the body.
async fn exchange(s: &mut TcpStream, request: &[u8], buf: &mut Vec<u8>) -> std::io::Result<String> {
    s.write_all(request).await?;
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 24];
        let mut resp = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(head) = resp.parse(buf).map_err(std::io::Error::other)? {
            if resp.code != Some(200) {
                return Err(std::io::Error::other(format!("status {:?}", resp.code)));
            }
            let len = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok())
                .ok_or_else(|| std::io::Error::other("no content-length"))?;
            while buf.len() < head + len {
                if s.read_buf(buf).await? == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
            }
            let backend = String::from_utf8_lossy(&buf[head..head + len]).into_owned();
            buf.drain(..head + len);
            return Ok(backend);
        }
        if s.read_buf(buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

// === WebSocket ===

/// An upgraded socket, its leftover bytes, and the backend that took it.
pub struct Socket {
    stream: TcpStream,
    buf: Vec<u8>,
}

pub async fn upgrade(addr: SocketAddr, room: &str) -> std::io::Result<(Socket, String)> {
    let mut stream = connect(addr).await?;
    let req = format!(
        "GET /ws/live/?room={room} HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nX-Room: {room}\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).await?;
    let mut buf = Vec::with_capacity(512);
    loop {
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let mut headers = [httparse::EMPTY_HEADER; 24];
        let mut resp = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(head) = resp.parse(&buf).map_err(std::io::Error::other)? {
            if resp.code != Some(101) {
                return Err(std::io::Error::other(format!("upgrade answered {:?}", resp.code)));
            }
            let backend = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("x-backend"))
                .map(|h| String::from_utf8_lossy(h.value).into_owned())
                .ok_or_else(|| std::io::Error::other("no X-Backend on the 101"))?;
            buf.drain(..head);
            return Ok((Socket { stream, buf }, backend));
        }
    }
}

impl Socket {
    /// Reads until one whole frame is buffered; returns its opcode.
    async fn next_frame(&mut self) -> std::io::Result<u8> {
        loop {
            if let Some(f) = ws::parse(&self.buf) {
                let end = f.payload.end;
                self.buf.drain(..end);
                return Ok(f.opcode);
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    async fn close(mut self) -> std::io::Result<()> {
        let close = ws::frame(ws::OP_CLOSE, &1000u16.to_be_bytes(), Some([1, 2, 3, 4]));
        self.stream.write_all(&close).await?;
        let limit = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match self.next_frame().await {
                    Ok(ws::OP_CLOSE) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        });
        let _ = limit.await;
        Ok(())
    }
}

/// `sockets` WebSockets, each echoing a 32-byte text message back and forth for `window`.
pub async fn ws_echo(addr: SocketAddr, sockets: usize, window: Duration) -> Outcome {
    let mut opened = Vec::new();
    let mut total = Outcome::default();
    for c in 0..sockets {
        let room = format!("echo-{c}");
        match upgrade(addr, &room).await {
            Ok((s, backend)) => {
                total.seen.push((room, backend));
                opened.push(s);
            }
            Err(_) => total.errors += 1,
        }
    }
    let deadline = Instant::now() + window;
    let frame = ws::frame(ws::OP_TEXT, &[b'x'; 32], Some([7, 7, 7, 7]));
    let tasks = opened
        .into_iter()
        .map(|mut s| {
            let frame = frame.clone();
            tokio::spawn(async move {
                let mut out = Outcome::default();
                while Instant::now() < deadline {
                    let sent = s.stream.write_all(&frame).await;
                    match sent.and(s.next_frame().await.map(|_| ())) {
                        Ok(()) => out.ops += 1,
                        Err(_) => {
                            out.errors += 1;
                            return out;
                        }
                    }
                }
                if s.close().await.is_err() {
                    out.errors += 1;
                }
                out
            })
        })
        .collect();
    total.merge(join_all(tasks).await);
    total
}

/// `loops` concurrent loops of upgrade, close handshake, disconnect, for `window`.
pub async fn ws_connect(addr: SocketAddr, loops: usize, window: Duration) -> Outcome {
    let deadline = Instant::now() + window;
    let tasks = (0..loops)
        .map(|c| {
            tokio::spawn(async move {
                let mut out = Outcome::default();
                let mut i = 0usize;
                while Instant::now() < deadline {
                    let room = format!("connect-{c}-{}", i % 32);
                    i += 1;
                    match upgrade(addr, &room).await {
                        Ok((s, backend)) => {
                            out.ops += 1;
                            if i <= 32 {
                                out.seen.push((room, backend));
                            }
                            if s.close().await.is_err() {
                                out.errors += 1;
                            }
                        }
                        Err(_) => out.errors += 1,
                    }
                }
                out
            })
        })
        .collect();
    join_all(tasks).await
}

/// Opens `n` idle WebSockets, 64 at a time; returns them (still open) and what was seen.
pub async fn ws_idle_open(addr: SocketAddr, n: usize) -> (Vec<Socket>, Outcome) {
    let mut sockets = Vec::with_capacity(n);
    let mut out = Outcome::default();
    let mut next = 0;
    while next < n {
        let batch: Vec<_> = (next..(next + 64).min(n))
            .map(|i| {
                tokio::spawn(async move {
                    let room = format!("idle-{i}");
                    upgrade(addr, &room).await.map(|(s, b)| (s, room, b))
                })
            })
            .collect();
        next += batch.len();
        for t in batch {
            match t.await {
                Ok(Ok((s, room, backend))) => {
                    sockets.push(s);
                    out.seen.push((room, backend));
                    out.ops += 1;
                }
                _ => out.errors += 1,
            }
        }
    }
    (sockets, out)
}
