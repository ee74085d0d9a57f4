//! HTTP/1 at the byte level, for framing and smuggling tests: a backend that records every byte
//! each connection brings and answers with scripted bytes, and a client that writes raw bytes and
//! splits what comes back into responses.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::LIMIT;

/// Longest head either side parses before giving up.
const MAX_HEAD: usize = 1 << 20;

/// A parsed message head (lenient: it records, it does not judge).
#[derive(Clone, Debug, Default)]
pub struct Head {
    /// Request: method, target, version; response: version, status, reason.
    pub start: [String; 3],
    pub headers: Vec<(String, String)>,
}

impl Head {
    fn parse(raw: &[u8]) -> Head {
        let text = String::from_utf8_lossy(raw);
        let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let mut parts = lines.next().unwrap_or_default().splitn(3, ' ').map(str::to_owned);
        let start = [(); 3].map(|()| parts.next().unwrap_or_default());
        let headers = lines
            .filter(|l| !l.is_empty())
            .map(|l| match l.split_once(':') {
                Some((k, v)) => (k.trim().to_ascii_lowercase(), v.trim().to_owned()),
                None => (l.to_owned(), String::new()),
            })
            .collect();
        Head { start, headers }
    }

    /// Every value of `name`, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect()
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.all(name).into_iter().next()
    }

    pub fn chunked(&self) -> bool {
        self.all("transfer-encoding").iter().any(|v| v.to_ascii_lowercase().contains("chunked"))
    }

    pub fn content_length(&self) -> Option<usize> {
        self.get("content-length").and_then(|v| v.parse().ok())
    }

    /// A request's target.
    pub fn path(&self) -> &str {
        &self.start[1]
    }

    /// A response's status (0 when it does not parse).
    pub fn status(&self) -> u16 {
        self.start[1].parse().unwrap_or(0)
    }
}

/// Where a head ends (after its blank line, CRLF or bare LF), if it is all there.
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = memchr::memmem::find(buf, b"\r\n\r\n").map(|i| i + 4);
    let lf = memchr::memmem::find(buf, b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Decodes a chunked body at the start of `buf`: `Ok(Some((body, used)))` when complete,
/// `Ok(None)` when more is needed, `Err` when it does not parse.
fn dechunk(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, ()> {
    let (mut body, mut at) = (Vec::new(), 0);
    loop {
        let Some(nl) = memchr::memchr(b'\n', &buf[at..]) else { return Ok(None) };
        let line = String::from_utf8_lossy(&buf[at..at + nl]);
        let size = line.trim_end_matches('\r').split(';').next().unwrap_or_default().trim().to_owned();
        let size = usize::from_str_radix(&size, 16).map_err(|_| ())?;
        at += nl + 1;
        if size == 0 {
            // Trailers up to the blank line.
            loop {
                let Some(nl) = memchr::memchr(b'\n', &buf[at..]) else { return Ok(None) };
                let blank = buf[at..at + nl].iter().all(|b| *b == b'\r');
                at += nl + 1;
                if blank {
                    return Ok(Some((body, at)));
                }
            }
        }
        if buf.len() < at + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&buf[at..at + size]);
        at += size;
        match &buf[at..at + 2] {
            b"\r\n" => at += 2,
            [b'\n', _] => at += 1,
            _ => return Err(()),
        }
    }
}

// === the backend ===

/// What the backend does with one request head.
#[derive(Clone, Debug)]
pub enum Answer {
    /// Reads the body, answers 200 with the request target as the body, keeps the connection.
    Echo,
    /// Reads the body, writes these bytes, keeps the connection and parses what comes next.
    Reply(Vec<u8>),
    /// Reads the body, writes these bytes, closes.
    ReplyClose(Vec<u8>),
    /// Reads the body, writes these bytes, then only records what comes (parses nothing more).
    ReplyHold(Vec<u8>),
    /// Writes these bytes right after the head, then reads the body and carries on (as hyper
    /// does when a handler answers before reading).
    Early(Vec<u8>),
    /// Writes these bytes right after the head and closes without reading the body.
    EarlyClose(Vec<u8>),
}

/// `200 OK` with `body` and its length.
pub fn ok(body: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// A request the backend parsed.
#[derive(Clone, Debug)]
pub struct Seen {
    pub head: Head,
    /// The decoded body; `None` when it was not read (or did not parse).
    pub body: Option<Vec<u8>>,
}

/// One backend connection: every byte it brought, the requests parsed from them, and whether it
/// has ended.
#[derive(Clone, Debug, Default)]
pub struct ConnRecord {
    pub bytes: Vec<u8>,
    pub requests: Vec<Seen>,
    pub closed: bool,
}

impl ConnRecord {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    pub fn contains(&self, needle: &str) -> bool {
        memchr::memmem::find(&self.bytes, needle.as_bytes()).is_some()
    }

    /// Whether another request head came on this connection after the one whose request line
    /// holds `needle` (whatever came of its body). A forwarded head is told from body bytes by the
    /// `x-forwarded-for` field roomgate adds to every head it forwards.
    pub fn head_after(&self, needle: &str) -> bool {
        let lower = self.bytes.to_ascii_lowercase();
        let Some(at) = memchr::memmem::find(&self.bytes, needle.as_bytes()) else { return false };
        let Some(end) = memchr::memmem::find(&lower[at..], b"\r\n\r\n") else { return false };
        memchr::memmem::find(&lower[at + end..], b"\r\nx-forwarded-for:").is_some()
    }
}

type Script = Arc<dyn Fn(&Head) -> Answer + Send + Sync>;

/// A raw TCP backend on 127.0.0.1:0 that answers each request head as `script` says.
pub struct RawBackend {
    pub addr: SocketAddr,
    conns: Arc<Mutex<Vec<ConnRecord>>>,
    changed: watch::Sender<u64>,
}

impl RawBackend {
    pub async fn start(script: impl Fn(&Head) -> Answer + Send + Sync + 'static) -> RawBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<ConnRecord>>> = Arc::default();
        let changed = watch::Sender::new(0);
        let script: Script = Arc::new(script);
        let (c, tx) = (conns.clone(), changed.clone());
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let index = {
                    let mut list = c.lock().unwrap();
                    list.push(ConnRecord::default());
                    list.len() - 1
                };
                let rec = Recorder { conns: c.clone(), index, changed: tx.clone() };
                tokio::spawn(serve(s, rec, script.clone()));
            }
        });
        RawBackend { addr, conns, changed }
    }

    /// A backend that answers every request with [`Answer::Echo`].
    pub async fn echo() -> RawBackend {
        Self::start(|_| Answer::Echo).await
    }

    /// A copy of every connection's record so far.
    pub fn conns(&self) -> Vec<ConnRecord> {
        self.conns.lock().unwrap().clone()
    }

    /// Every byte of every connection, as text.
    pub fn all_text(&self) -> String {
        self.conns().iter().map(ConnRecord::text).collect::<Vec<_>>().join("\n--- next connection ---\n")
    }

    /// Whether any connection brought `needle`.
    pub fn received(&self, needle: &str) -> bool {
        self.conns().iter().any(|c| c.contains(needle))
    }

    /// Every request parsed so far, on any connection.
    pub fn requests(&self) -> Vec<Seen> {
        self.conns().into_iter().flat_map(|c| c.requests).collect()
    }

    /// Waits (bounded by `limit`) until `pred` holds of the records; returns whether it did.
    pub async fn wait(&self, limit: Duration, pred: impl Fn(&[ConnRecord]) -> bool) -> bool {
        let mut rx = self.changed.subscribe();
        let check = |_: &u64| pred(&self.conns.lock().unwrap());
        tokio::time::timeout(limit, rx.wait_for(check)).await.is_ok()
    }
}

/// Writes into one connection's record.
struct Recorder {
    conns: Arc<Mutex<Vec<ConnRecord>>>,
    index: usize,
    changed: watch::Sender<u64>,
}

impl Recorder {
    fn update(&self, f: impl FnOnce(&mut ConnRecord)) {
        f(&mut self.conns.lock().unwrap()[self.index]);
        self.changed.send_modify(|n| *n += 1);
    }
}

/// One backend connection: reads into `buf`, recording every byte.
struct Wire {
    s: TcpStream,
    buf: Vec<u8>,
    rec: Recorder,
}

impl Wire {
    /// Reads more; `false` at the end of the stream.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        match self.s.read(&mut chunk).await {
            Ok(n) if n > 0 => {
                self.buf.extend_from_slice(&chunk[..n]);
                self.rec.update(|r| r.bytes.extend_from_slice(&chunk[..n]));
                true
            }
            _ => false,
        }
    }

    async fn head(&mut self) -> Option<Head> {
        loop {
            if let Some(end) = head_end(&self.buf) {
                let head = Head::parse(&self.buf[..end]);
                self.buf.drain(..end);
                return Some(head);
            }
            if self.buf.len() > MAX_HEAD || !self.fill().await {
                return None;
            }
        }
    }

    /// The request body as its head frames it.
    async fn body(&mut self, head: &Head) -> Option<Vec<u8>> {
        if head.chunked() {
            loop {
                match dechunk(&self.buf) {
                    Ok(Some((body, used))) => {
                        self.buf.drain(..used);
                        return Some(body);
                    }
                    Ok(None) if self.fill().await => {}
                    _ => return None,
                }
            }
        }
        let n = head.content_length().unwrap_or(0);
        while self.buf.len() < n {
            if !self.fill().await {
                return None;
            }
        }
        Some(self.buf.drain(..n).collect())
    }

    /// Records until the peer closes.
    async fn hold(&mut self) {
        while self.fill().await {}
    }
}

async fn serve(s: TcpStream, rec: Recorder, script: Script) {
    let mut w = Wire { s, buf: Vec::new(), rec };
    while let Some(head) = w.head().await {
        let answer = script(&head);
        let early = matches!(answer, Answer::Early(_) | Answer::EarlyClose(_));
        if let Answer::Early(b) | Answer::EarlyClose(b) = &answer
            && w.s.write_all(b).await.is_err()
        {
            break;
        }
        if matches!(answer, Answer::EarlyClose(_)) {
            w.rec.update(|r| r.requests.push(Seen { head, body: None }));
            break;
        }
        let body = w.body(&head).await;
        let failed = body.is_none();
        let path = head.path().to_owned();
        w.rec.update(|r| r.requests.push(Seen { head, body }));
        if failed {
            // The body did not parse or never came: keep recording, answer nothing.
            w.hold().await;
            break;
        }
        let bytes = match &answer {
            Answer::Echo => ok(&path),
            Answer::Reply(b) | Answer::ReplyClose(b) | Answer::ReplyHold(b) => b.clone(),
            Answer::Early(_) | Answer::EarlyClose(_) => Vec::new(),
        };
        if !early && w.s.write_all(&bytes).await.is_err() {
            break;
        }
        match answer {
            Answer::ReplyClose(_) => break,
            Answer::ReplyHold(_) => {
                w.hold().await;
                break;
            }
            _ => {}
        }
    }
    let _ = w.s.shutdown().await;
    w.rec.update(|r| r.closed = true);
}

// === the client ===

/// A response as the client saw it.
#[derive(Clone, Debug)]
pub struct Resp {
    pub head: Head,
    /// Decoded (chunked) or as it came.
    pub body: Vec<u8>,
    /// `content-length`, `chunked` or `close` (read to the end of the stream).
    pub framing: &'static str,
}

impl Resp {
    pub fn status(&self) -> u16 {
        self.head.status()
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What a client read: the bytes, and whether the connection was closed (else the read timed
/// out with it still open).
#[derive(Clone, Debug)]
pub struct Outcome {
    pub bytes: Vec<u8>,
    pub closed: bool,
}

impl Outcome {
    /// The complete responses in `bytes`, in order (a close-delimited one only once closed).
    pub fn responses(&self) -> Vec<Resp> {
        parse_responses(&self.bytes, self.closed).0
    }

    pub fn statuses(&self) -> Vec<u16> {
        self.responses().iter().map(Resp::status).collect()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// Splits `bytes` into complete responses; also returns what is left after the last one.
pub fn parse_responses(bytes: &[u8], closed: bool) -> (Vec<Resp>, Vec<u8>) {
    let (mut out, mut at) = (Vec::new(), 0);
    while let Some(end) = head_end(&bytes[at..]) {
        let head = Head::parse(&bytes[at..at + end]);
        let rest = &bytes[at + end..];
        let no_body = matches!(head.status(), 100..=199 | 204 | 304);
        let (body, used, framing) = if no_body {
            (Vec::new(), 0, "none")
        } else if head.chunked() {
            match dechunk(rest) {
                Ok(Some((body, used))) => (body, used, "chunked"),
                _ => break,
            }
        } else if let Some(n) = head.content_length() {
            if rest.len() < n {
                break;
            }
            (rest[..n].to_vec(), n, "content-length")
        } else if closed {
            (rest.to_vec(), rest.len(), "close")
        } else {
            break;
        };
        out.push(Resp { head, body, framing });
        at += end + used;
    }
    (out, bytes[at..].to_vec())
}

/// Reads from `s` until it closes or `limit` passes with nothing new.
pub async fn read_until_close(s: &mut TcpStream, limit: Duration) -> Outcome {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match tokio::time::timeout(limit, s.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => bytes.extend_from_slice(&chunk[..n]),
            Ok(_) => return Outcome { bytes, closed: true },
            Err(_) => return Outcome { bytes, closed: false },
        }
    }
}

/// Reads from `s` until `want` complete responses have come, it closes, or `limit` passes.
pub async fn read_responses(s: &mut TcpStream, want: usize, limit: Duration) -> Outcome {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8192];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if parse_responses(&bytes, false).0.len() >= want {
            return Outcome { bytes, closed: false };
        }
        match tokio::time::timeout_at(deadline, s.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => bytes.extend_from_slice(&chunk[..n]),
            Ok(_) => return Outcome { bytes, closed: true },
            Err(_) => return Outcome { bytes, closed: false },
        }
    }
}

/// Connects to `addr`, writes `request` and reads until the connection closes (or `limit` passes
/// with nothing new).
pub async fn exchange(addr: SocketAddr, request: &[u8], limit: Duration) -> Outcome {
    let mut s = tokio::time::timeout(LIMIT, TcpStream::connect(addr)).await.unwrap().unwrap();
    // The peer may answer and close before all is written: what it sent still counts.
    let _ = s.write_all(request).await;
    read_until_close(&mut s, limit).await
}
