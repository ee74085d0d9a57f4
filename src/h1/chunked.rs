//! The chunked transfer coding (RFC 9112 section 7.1), decoded strictly and incrementally: the
//! bytes arrive in any pieces, and the decoder says how many it consumed and which of them are
//! data. Extensions are checked (each `;name` or `;name=value`, with no whitespace around them)
//! and dropped; trailers are checked (field lines: a token name, a colon, a value) and dropped.

use std::ops::Range;

use super::framing::Framing;
use super::head::HeadError;

/// Most hex digits in a chunk size: 16 fill a u64.
const MAX_SIZE_DIGITS: usize = 16;
/// Most bytes of chunk extensions and of trailer fields in one body (hyper allows 16 KiB of
/// extensions too).
const MAX_EXTRA_BYTES: usize = 16 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    #[error("invalid chunk size")]
    BadSize,
    #[error("chunk size too large")]
    SizeOverflow,
    #[error("invalid chunk extension")]
    BadExtension,
    #[error("chunk data not followed by CRLF")]
    BadDataEnd,
    #[error("invalid trailer field")]
    BadTrailer,
    #[error("chunk extensions or trailers over 16 KiB")]
    TooMuchExtra,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before the first hex digit of a size.
    SizeStart,
    Size,
    /// Right after a `;`: an extension's name must follow.
    ExtStart,
    /// In an extension's name.
    ExtName,
    /// Right after an extension's `=`: a token or a quoted string must follow.
    ExtValueStart,
    /// In an extension's token value.
    ExtToken,
    ExtQuoted,
    ExtQuotedEscape,
    /// After an extension's quoted value: only `;` or CR.
    ExtQuotedEnd,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    /// In a trailer field's name (a token, up to its colon).
    TrailerName,
    /// In a trailer field's value.
    Trailer,
    TrailerLf,
    EndLf,
    Done,
}

/// One step of decoding: `consumed` bytes of the input were used, `data` (a range of the input)
/// is body data, `done` the body has ended (the input after `consumed` is the next message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub consumed: usize,
    pub data: Range<usize>,
    pub done: bool,
}

/// The decoder's state between pieces of input.
#[derive(Clone, Debug)]
pub struct ChunkedDecoder {
    state: State,
    size: u64,
    digits: usize,
    extra: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder { state: State::SizeStart, size: 0, digits: 0, extra: 0 }
    }
}

impl ChunkedDecoder {
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes from `input` until data is found, the body ends, or the input runs out. Call again
    /// with the input after `consumed` (and more bytes, once it is empty or nothing was consumed).
    pub fn decode(&mut self, input: &[u8]) -> Result<Decoded, ChunkError> {
        let mut i = 0;
        while i < input.len() {
            if self.state == State::Data {
                let n = usize::try_from(self.size).unwrap_or(usize::MAX).min(input.len() - i);
                self.size -= n as u64;
                if self.size == 0 {
                    self.state = State::DataCr;
                }
                return Ok(Decoded { consumed: i + n, data: i..i + n, done: false });
            }
            if self.state == State::Done {
                break;
            }
            self.step(input[i])?;
            i += 1;
        }
        Ok(Decoded { consumed: i, data: i..i, done: self.state == State::Done })
    }

    fn step(&mut self, b: u8) -> Result<(), ChunkError> {
        use State::*;
        self.state = match (self.state, b) {
            (SizeStart | Size, b) if b.is_ascii_hexdigit() => {
                self.digits += 1;
                if self.digits > MAX_SIZE_DIGITS {
                    return Err(ChunkError::SizeOverflow);
                }
                let digit = u64::from(hex_value(b));
                self.size =
                    self.size.checked_mul(16).and_then(|s| s.checked_add(digit)).ok_or(ChunkError::SizeOverflow)?;
                Size
            }
            (SizeStart, _) => return Err(ChunkError::BadSize),
            // No whitespace after the size (RFC 9112's BWS): hex digits, then `;` or CRLF.
            (Size, b';') => self.extra(ExtStart)?,
            (Size, b'\r') => SizeLf,
            (Size, _) => return Err(ChunkError::BadSize),
            (ExtStart | ExtName, b) if is_tchar(b) => self.extra(ExtName)?,
            (ExtName, b'=') => self.extra(ExtValueStart)?,
            (ExtValueStart | ExtToken, b) if is_tchar(b) => self.extra(ExtToken)?,
            (ExtValueStart, b'"') => self.extra(ExtQuoted)?,
            (ExtName | ExtToken | ExtQuotedEnd, b';') => self.extra(ExtStart)?,
            (ExtName | ExtToken | ExtQuotedEnd, b'\r') => SizeLf,
            (ExtQuoted, b'"') => self.extra(ExtQuotedEnd)?,
            (ExtQuoted, b'\\') => self.extra(ExtQuotedEscape)?,
            (ExtQuoted | ExtQuotedEscape, b) if is_field_byte(b) => self.extra(ExtQuoted)?,
            (ExtStart | ExtName | ExtValueStart | ExtToken | ExtQuoted | ExtQuotedEscape | ExtQuotedEnd, _) => {
                return Err(ChunkError::BadExtension);
            }
            (SizeLf, b'\n') => self.after_size(),
            (SizeLf, _) => return Err(ChunkError::BadSize),
            (DataCr, b'\r') => DataLf,
            (DataLf, b'\n') => SizeStart,
            (DataCr | DataLf, _) => return Err(ChunkError::BadDataEnd),
            (TrailerStart, b'\r') => EndLf,
            (TrailerStart | TrailerName, b) if is_tchar(b) => self.extra(TrailerName)?,
            (TrailerName, b':') => self.extra(Trailer)?,
            (Trailer, b) if is_field_byte(b) => self.extra(Trailer)?,
            (Trailer, b'\r') => TrailerLf,
            (TrailerLf, b'\n') => TrailerStart,
            (EndLf, b'\n') => Done,
            (TrailerStart | TrailerName | Trailer | TrailerLf | EndLf, _) => return Err(ChunkError::BadTrailer),
            (Data | Done, _) => self.state,
        };
        Ok(())
    }

    /// After a size line: data, or the trailers of the last chunk.
    fn after_size(&mut self) -> State {
        self.digits = 0;
        if self.size == 0 { State::TrailerStart } else { State::Data }
    }

    /// Counts a byte of extensions or trailers against the body's allowance.
    fn extra(&mut self, next: State) -> Result<State, ChunkError> {
        self.extra += 1;
        if self.extra > MAX_EXTRA_BYTES {
            return Err(ChunkError::TooMuchExtra);
        }
        Ok(next)
    }
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

/// A byte a field value (or quoted string) may hold: visible ASCII, whitespace, obs-text; no
/// control characters, so no bare CR or LF.
fn is_field_byte(b: u8) -> bool {
    matches!(b, b'\t' | b' '..=b'~' | 0x80..=0xff)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Refuses a request whose chunked body (`framing`) already goes bad in the bytes read with its
/// head (`body`, what follows the head in the buffer): the head is then never sent to a backend,
/// which would otherwise see it and a cut body. What is not read yet is decoded as it comes.
pub fn refuse_bad_start(framing: Framing, body: &[u8]) -> Result<(), HeadError> {
    if framing != Framing::Chunked {
        return Ok(());
    }
    let mut decoder = ChunkedDecoder::default();
    let mut at = 0;
    while at < body.len() {
        let step = decoder.decode(&body[at..]).map_err(|_| HeadError::BadBody)?;
        if step.done || step.consumed == 0 {
            break;
        }
        at += step.consumed;
    }
    Ok(())
}

/// The size line of a chunk of `len` bytes, in `out`.
pub fn write_size(out: &mut Vec<u8>, len: usize) {
    let mut digits = [0u8; 16];
    let mut n = len;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[n % 16];
        n /= 16;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
    out.extend_from_slice(b"\r\n");
}
