//! How a message's body is delimited (RFC 9112 section 6), read strictly from its
//! `Content-Length` and `Transfer-Encoding` headers.

/// The body of a message, as its head delimits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// Exactly this many bytes (0: no body).
    Length(u64),
    /// The chunked transfer coding.
    Chunked,
    /// A response body that ends when the backend closes the connection.
    Close,
}

/// A head whose body two readers could delimit differently: refused, never guessed at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("Content-Length and Transfer-Encoding together")]
    LengthAndCoding,
    #[error("more than one Content-Length")]
    TwoLengths,
    #[error("invalid Content-Length")]
    BadLength,
    #[error("a Transfer-Encoding other than a single chunked")]
    BadCoding,
    #[error("Transfer-Encoding in an HTTP/1.0 message")]
    CodingOnHttp10,
}

impl FramingError {
    /// The reason, in words a client is told.
    pub fn reason(&self) -> &'static str {
        match self {
            FramingError::LengthAndCoding => "Content-Length and Transfer-Encoding together",
            FramingError::TwoLengths => "more than one Content-Length",
            FramingError::BadLength => "invalid Content-Length",
            FramingError::BadCoding => "a Transfer-Encoding other than a single chunked",
            FramingError::CodingOnHttp10 => "Transfer-Encoding in an HTTP/1.0 message",
        }
    }
}

/// The framing of a message whose framing headers are `lengths` (every `Content-Length` value)
/// and `codings` (every `Transfer-Encoding` value). No header: a request has no body
/// (`Length(0)`), a response runs to the connection's close.
///
/// Only one `Content-Length`, of digits alone (a list, even `5, 5`, is refused), and only the
/// single coding `chunked`: a token list parsed as a list (so `xchunked`, `chunked, gzip` and
/// `chunked, chunked` are refused) and never by suffix. Both headers together are refused (RFC
/// 9112 section 6.1 lets a server close after such a request instead; refusing is simpler to
/// reason about), as is a coding in HTTP/1.0.
pub fn framing<'a>(
    lengths: impl Iterator<Item = &'a [u8]>,
    codings: impl Iterator<Item = &'a [u8]>,
    http10: bool,
    request: bool,
) -> Result<Framing, FramingError> {
    let mut length = None;
    for value in lengths {
        if length.is_some() {
            return Err(FramingError::TwoLengths);
        }
        length = Some(parse_length(value)?);
    }
    let mut coding = false;
    for value in codings {
        if coding || !is_single_chunked(value) {
            return Err(FramingError::BadCoding);
        }
        coding = true;
    }
    match (length, coding) {
        (Some(_), true) => Err(FramingError::LengthAndCoding),
        (_, true) if http10 => Err(FramingError::CodingOnHttp10),
        (_, true) => Ok(Framing::Chunked),
        (Some(n), false) => Ok(Framing::Length(n)),
        (None, false) if request => Ok(Framing::Length(0)),
        (None, false) => Ok(Framing::Close),
    }
}

/// `1*DIGIT` and nothing else, within a u64.
pub fn parse_length(value: &[u8]) -> Result<u64, FramingError> {
    if value.is_empty() || value.len() > 19 {
        return Err(FramingError::BadLength);
    }
    let mut n: u64 = 0;
    for &b in value {
        if !b.is_ascii_digit() {
            return Err(FramingError::BadLength);
        }
        n = n.checked_mul(10).and_then(|n| n.checked_add(u64::from(b - b'0'))).ok_or(FramingError::BadLength)?;
    }
    Ok(n)
}

/// Whether a `Transfer-Encoding` value is the one coding `chunked`, allowing only optional
/// whitespace around it: one list element, compared whole.
fn is_single_chunked(value: &[u8]) -> bool {
    value.trim_ascii().eq_ignore_ascii_case(b"chunked")
}
