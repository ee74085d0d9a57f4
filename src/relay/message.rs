//! Reading whole WebSocket messages before a tunnel starts (the first message of a djust socket,
//! the backend's greeting), and [`Rewind`], which hands bytes read ahead back to the pump.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

use super::frame::{FrameError, OP_CLOSE, OP_TEXT, Rules, parse_head, unmask};

/// One data message read off the wire.
#[derive(Debug)]
pub struct Message {
    /// The frames exactly as received (still masked), control frames read before it included.
    pub raw: Vec<u8>,
    /// The unmasked payload of its data frames: made once the message is whole, so that a
    /// message that never ends holds one copy of its bytes, not two.
    pub payload: Vec<u8>,
    /// Text or binary.
    pub opcode: u8,
}

/// Why no message was read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the message is over {0} bytes")]
    TooLarge(usize),
    #[error("the peer closed the socket (close code {0:?})")]
    Closed(Option<u16>),
    #[error("the peer ended the stream")]
    Eof,
    #[error("invalid frame: {0}")]
    Frame(#[from] FrameError),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// Its [`Allowance`] refused more memory.
    #[error("no memory allowance left for the message")]
    Busy,
}

/// What a read may hold: asked before its buffer grows, with the bytes it grows by.
pub trait Allowance {
    fn grow(&mut self, bytes: usize) -> bool;
}

/// No bound but the read's own `limit`.
pub struct Unbounded;

impl Allowance for Unbounded {
    fn grow(&mut self, _: usize) -> bool {
        true
    }
}

/// Reads until `buf` holds one whole data message at its start, at most `limit` bytes of frames,
/// each frame checked against `rules`, and its buffer grown only as `allowance` lets it. Returns
/// the message; bytes read beyond it stay in `buf`.
pub async fn read_message<R: AsyncRead + Unpin, A: Allowance + ?Sized>(
    io: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
    rules: Rules,
    allowance: &mut A,
) -> Result<Message, ReadError> {
    let mut at = 0;
    let mut in_message = false;
    loop {
        let Some(head) = parse_head(&buf[at..])? else {
            fill(io, buf, limit, allowance).await?;
            continue;
        };
        rules.check(buf[at], buf[at + 1], &mut in_message)?;
        let end = at as u64 + head.frame_len();
        if end > limit as u64 {
            return Err(ReadError::TooLarge(limit));
        }
        let end = end as usize;
        while buf.len() < end {
            fill(io, buf, limit, allowance).await?;
        }
        if head.opcode == OP_CLOSE {
            let mut code = buf[at + head.len..end].to_vec();
            unmask(&mut code, head.mask, 0);
            let code = (code.len() >= 2).then(|| u16::from_be_bytes([code[0], code[1]]));
            return Err(ReadError::Closed(code));
        }
        if head.opcode & 0x8 == 0 && head.fin {
            let rest = buf.split_off(end);
            let raw = std::mem::replace(buf, rest);
            let (opcode, payload) = data_of(&raw);
            return Ok(Message { raw, payload, opcode });
        }
        at = end;
    }
}

/// The opcode and unmasked payload of the whole data message in `frames` (checked frames,
/// control frames among them).
fn data_of(frames: &[u8]) -> (u8, Vec<u8>) {
    let (mut opcode, mut payload, mut at) = (OP_TEXT, Vec::new(), 0);
    while let Ok(Some(head)) = parse_head(&frames[at..]) {
        let end = at + head.frame_len() as usize;
        if head.opcode & 0x8 == 0 {
            if head.opcode != 0 {
                opcode = head.opcode;
            }
            let start = payload.len();
            payload.extend_from_slice(&frames[at + head.len..end]);
            unmask(&mut payload[start..], head.mask, 0);
        }
        at = end;
    }
    (opcode, payload)
}

/// Reads more bytes into `buf`, up to `limit` in all. The buffer grows by what one read asks, no
/// more (never doubled), so what it holds stays within `limit` and what `allowance` granted.
async fn fill<R: AsyncRead + Unpin, A: Allowance + ?Sized>(
    io: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
    allowance: &mut A,
) -> Result<(), ReadError> {
    if buf.len() >= limit {
        return Err(ReadError::TooLarge(limit));
    }
    let room = (limit - buf.len()).min(16 * 1024);
    let before = buf.capacity();
    if before - buf.len() < room {
        let grown = buf.len() + room - before;
        if !allowance.grow(grown) {
            return Err(ReadError::Busy);
        }
        buf.reserve_exact(room);
    }
    let start = buf.len();
    buf.resize(start + room, 0);
    let n = io.read(&mut buf[start..]).await;
    buf.truncate(start + *n.as_ref().unwrap_or(&0));
    match n? {
        0 => Err(ReadError::Eof),
        _ => Ok(()),
    }
}

/// A stream whose first reads return bytes that were read ahead of it.
#[derive(Debug)]
pub struct Rewind<T> {
    pre: Vec<u8>,
    pos: usize,
    inner: T,
}

impl<T> Rewind<T> {
    pub fn new(inner: T, pre: Vec<u8>) -> Self {
        Rewind { pre, pos: 0, inner }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.pos < self.pre.len() {
            let n = (self.pre.len() - self.pos).min(out.remaining());
            out.put_slice(&self.pre[self.pos..self.pos + n]);
            self.pos += n;
            if self.pos == self.pre.len() {
                self.pre = Vec::new();
                self.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, out)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::frame::{OP_CONTINUATION, frame};

    const MASK: Option<[u8; 4]> = Some([1, 2, 3, 4]);

    #[tokio::test]
    async fn reads_one_message_and_keeps_the_rest() {
        let mut wire = frame(0x9, b"hi", MASK);
        wire.extend(frame(OP_TEXT, br#"{"type":"mount"}"#, MASK));
        let first_len = wire.len();
        wire.extend(frame(OP_TEXT, b"next", MASK));
        let mut io = &wire[..];
        let mut buf = Vec::new();
        let msg = read_message(&mut io, &mut buf, 1024, Rules::CLIENT, &mut Unbounded).await.unwrap();
        assert_eq!(msg.payload, br#"{"type":"mount"}"#);
        assert_eq!(msg.raw.len() + buf.len() + io.len(), wire.len());
        assert_eq!(msg.raw, wire[..first_len]);
    }

    #[tokio::test]
    async fn limits_and_closes_are_errors() {
        let wire = frame(OP_TEXT, &[b'x'; 2000], MASK);
        let mut buf = Vec::new();
        assert!(matches!(
            read_message(&mut &wire[..], &mut buf, 1024, Rules::CLIENT, &mut Unbounded).await,
            Err(ReadError::TooLarge(1024))
        ));
        let wire = frame(OP_CLOSE, &4429u16.to_be_bytes(), None);
        let mut buf = Vec::new();
        assert!(matches!(
            read_message(&mut &wire[..], &mut buf, 1024, Rules::SERVER, &mut Unbounded).await,
            Err(ReadError::Closed(Some(4429)))
        ));
        let wire = frame(OP_TEXT, b"cut", MASK);
        let mut buf = Vec::new();
        assert!(matches!(
            read_message(&mut &wire[..4], &mut buf, 1024, Rules::CLIENT, &mut Unbounded).await,
            Err(ReadError::Eof)
        ));
        let wire = frame(OP_TEXT, b"unmasked", None);
        let mut buf = Vec::new();
        assert!(matches!(
            read_message(&mut &wire[..], &mut buf, 1024, Rules::CLIENT, &mut Unbounded).await,
            Err(ReadError::Frame(FrameError::Unmasked))
        ));
    }

    #[tokio::test]
    async fn fragmented_messages_are_joined() {
        let mut first = frame(OP_TEXT, b"ab", MASK);
        first[0] &= 0x7f; // not FIN
        let mut wire = first;
        wire.extend(frame(OP_CONTINUATION, b"cd", MASK));
        let mut buf = Vec::new();
        let msg = read_message(&mut &wire[..], &mut buf, 1024, Rules::CLIENT, &mut Unbounded).await.unwrap();
        assert_eq!(msg.payload, b"abcd");
        assert_eq!(msg.opcode, OP_TEXT);
    }

    #[tokio::test]
    async fn rewind_returns_the_bytes_read_ahead_first() {
        let mut r = Rewind::new(&b"world"[..], b"hello ".to_vec());
        let mut s = String::new();
        r.read_to_string(&mut s).await.unwrap();
        assert_eq!(s, "hello world");
    }

    /// Counts what a read asks for; refuses past `max`.
    struct Budget {
        granted: usize,
        max: usize,
    }

    impl Allowance for Budget {
        fn grow(&mut self, bytes: usize) -> bool {
            self.granted += bytes;
            self.granted <= self.max
        }
    }

    #[tokio::test]
    async fn a_message_that_never_ends_holds_one_copy_within_its_allowance() {
        // A fragmented text message that never sends its last frame: 60 frames of 1000 bytes.
        let mut wire = Vec::new();
        for i in 0..60 {
            let mut f = frame(if i == 0 { OP_TEXT } else { OP_CONTINUATION }, &[b'x'; 1000], MASK);
            f[0] &= 0x7f;
            wire.extend(f);
        }
        let mut buf = Vec::new();
        let mut budget = Budget { granted: 0, max: usize::MAX };
        let limit = 64 * 1024;
        let read = read_message(&mut &wire[..], &mut buf, limit, Rules::CLIENT, &mut budget).await;
        assert!(matches!(read, Err(ReadError::Eof)), "{read:?}");
        assert!(
            buf.len() == wire.len() && buf.capacity() <= budget.granted,
            "{} of {}",
            buf.capacity(),
            budget.granted
        );
        assert!(budget.granted <= limit + 16 * 1024, "asked for {} bytes", budget.granted);
        // With less allowance than the message needs, the read stops, refused.
        let mut buf = Vec::new();
        let mut budget = Budget { granted: 0, max: 20_000 };
        let read = read_message(&mut &wire[..], &mut buf, limit, Rules::CLIENT, &mut budget).await;
        assert!(matches!(read, Err(ReadError::Busy)), "{read:?}");
        assert!(buf.capacity() <= 20_000);
    }
}
