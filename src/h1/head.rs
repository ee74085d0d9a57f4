//! Request and response heads: parsed by httparse from a connection's buffer, turned into the
//! `http` types the request path reads (header values share the buffer; nothing is copied), and
//! framed by [`framing`](super::framing).

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::{Method, StatusCode, Uri, Version};

use super::framing::{Framing, FramingError, framing};
use crate::fields::is_visible;
use crate::handshake::{Kind, Refused, classify};

/// Most header lines a head may have before it is refused with 431; the configured
/// `limits.max_headers` (at most this) is checked later, with a message that names it.
pub const MAX_HEADERS: usize = 256;

/// Why a head was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// Over the buffer's limit before it ended (431 for a request).
    #[error("head too large")]
    TooLarge,
    #[error("more than {MAX_HEADERS} header lines")]
    TooManyHeaders,
    /// Not HTTP/1.x as RFC 9112 writes it (400 for a request, 502 for a response).
    #[error("malformed head: {0}")]
    Malformed(&'static str),
    #[error(transparent)]
    Framing(#[from] FramingError),
    /// The fields that say whether it is a WebSocket handshake could be read two ways, or it is
    /// a `CONNECT` (a request only).
    #[error(transparent)]
    Handshake(#[from] Refused),
    /// The chunked body read with the head is already malformed: refused as the body itself
    /// would be (the same answer whether its bad bytes came with the head or after it).
    #[error("malformed chunked body")]
    BadBody,
}

/// A request head, as the request path reads it.
#[derive(Debug)]
pub struct RequestHead {
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub framing: Framing,
    /// The client lets the connection stay open after this request (HTTP/1.1 without
    /// `Connection: close`; HTTP/1.0 connections always close after one request).
    pub keep_alive: bool,
    /// `Expect: 100-continue`.
    pub expect_continue: bool,
    /// A WebSocket handshake or not: decided here, once, by [`crate::handshake::classify`], and
    /// read from here by every later step (a head it refuses is never a `RequestHead`).
    pub kind: Kind,
    /// The head as the client sent it (shared, not copied): what hyper reads again when the
    /// connection is handed over, and where [`RequestHead::fields`] are.
    pub raw: Bytes,
    fields: Fields,
}

impl RequestHead {
    /// Every field (name and value, in order) as the client sent it.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        lines(&self.raw, self.fields.as_slice())
    }

    /// The head as the request path reads it, its fields where they lie.
    pub fn view(&self) -> crate::fields::Head<'_, Self> {
        crate::fields::Head { method: &self.method, uri: &self.uri, version: self.version, fields: self }
    }
}

/// Both heads are read where their fields lie (the request path's checks and keys, a backend's
/// 101): no header map is built.
macro_rules! fields_in_place {
    ($head:ty) => {
        impl crate::fields::Fields for $head {
            fn values<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a [u8]> {
                named(&self.raw, self.fields.as_slice(), name.as_bytes())
            }

            fn names(&self) -> impl Iterator<Item = &[u8]> {
                self.fields().map(|(n, _)| n)
            }

            fn lines(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
                self.fields()
            }

            fn count(&self) -> usize {
                self.fields.as_slice().len()
            }

            fn wire_size(&self) -> usize {
                self.fields().map(|(n, v)| n.len() + 2 + v.len() + 2).sum()
            }
        }
    };
}

fields_in_place!(RequestHead);
fields_in_place!(ResponseHead);

/// A response head from a backend.
#[derive(Debug)]
pub struct ResponseHead {
    pub status: StatusCode,
    pub version: Version,
    pub framing: Framing,
    /// The backend lets the connection be reused (HTTP/1.1 without `Connection: close`).
    pub keep_alive: bool,
    /// The head's bytes and where its fields lie: relayed as they came, less the hop-by-hop
    /// ones, with no header map built.
    raw: Bytes,
    fields: Fields,
}

/// Fields that describe one hop only (RFC 9110 section 7.6.1), and common non-standard ones.
pub const HOP_BY_HOP: [&[u8]; 9] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
];

impl ResponseHead {
    /// Every field (name and value, in order) as the backend sent it.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        lines(&self.raw, self.fields.as_slice())
    }

    /// The end-to-end fields (see [`end_to_end`]).
    pub fn end_to_end(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        end_to_end(self.fields())
    }
}

/// Of `fields` (name and value, in order), the end-to-end ones: all but the hop-by-hop ones and
/// those `Connection` names (never the `Content-Length` that frames the body).
pub fn end_to_end<'a, I>(fields: I) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone
where
    I: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
{
    let named = named_by_connection(fields.clone().filter(|(n, _)| n.eq_ignore_ascii_case(b"connection")).map(|f| f.1));
    fields.filter(move |(n, _)| !HOP_BY_HOP.iter().chain(&named).any(|h| n.eq_ignore_ascii_case(h)))
}

/// The fields the `Connection` values (`values`) name, to be removed with it: each token of a
/// value that is visible ASCII, less those that name no field of their own (`keep-alive`,
/// `close`, `upgrade`) and less `Content-Length`, the body's framing, which a proxy keeps: without
/// it a backend would read the body as the next request. Only a request with unusual tokens
/// allocates.
pub fn named_by_connection<'a>(values: impl Iterator<Item = &'a [u8]>) -> Vec<&'a [u8]> {
    const NOT_NAMES: [&[u8]; 5] = [b"keep-alive", b"close", b"upgrade", b"", b"content-length"];
    values
        .filter(|v| is_visible(v))
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|t| !NOT_NAMES.iter().any(|known| t.eq_ignore_ascii_case(known)))
        .filter(|t| t.iter().all(|&b| is_token_byte(b)))
        .collect()
}

/// A `tchar` of RFC 9110 section 5.6.2: what a field name is made of.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl HeadError {
    /// The reason, in words a client is told.
    pub fn reason(&self) -> &'static str {
        match self {
            HeadError::TooLarge => "head too large",
            HeadError::TooManyHeaders => "too many headers",
            HeadError::Malformed(why) => why,
            HeadError::Framing(f) => f.reason(),
            HeadError::Handshake(Refused::Bad(why)) => why,
            HeadError::Handshake(Refused::Connect) => "CONNECT is not served",
            HeadError::BadBody => "invalid chunked body",
        }
    }
}

/// Parses a request head at the start of `buf`. `Ok(None)`: the head is not complete yet (read
/// more, unless `buf` is already `limit` long: then it is [`HeadError::TooLarge`]). On success
/// the head's bytes are taken from `buf`; what follows (a body, a pipelined request) stays.
pub fn parse_request(buf: &mut BytesMut, limit: usize) -> Result<Option<RequestHead>, HeadError> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut req, buf, &mut slots);
    let Some(len) = head_length(parsed, buf.len(), limit)? else {
        return Ok(None);
    };
    super::lines::check(&buf[..len])?;
    let base = buf.as_ptr() as usize;
    let method = Method::from_bytes(req.method.unwrap_or_default().as_bytes())
        .map_err(|_| HeadError::Malformed("invalid method"))?;
    let target = offset(base, req.path.unwrap_or_default().as_bytes());
    let version = if req.version == Some(0) { Version::HTTP_10 } else { Version::HTTP_11 };
    let fields = Fields::of(base, req.headers);
    // RFC 9112 section 3.2: a target is visible ASCII, and a fragment is never sent. http's
    // Uri takes raw UTF-8 and drops a fragment, so the backend would get other bytes.
    if buf[target.0 as usize..target.1 as usize].iter().any(|&b| !b.is_ascii_graphic() || b == b'#') {
        return Err(HeadError::Malformed("invalid request target"));
    }
    let head = buf.split_to(len).freeze();
    let uri = Uri::from_maybe_shared(head.slice(target.0 as usize..target.1 as usize))
        .map_err(|_| HeadError::Malformed("invalid request target"))?;
    let (raw_ref, spans) = (&head, fields.as_slice());
    let named = |name: &'static [u8]| named(raw_ref, spans, name);
    // What `HeaderValue` refuses and httparse lets through.
    if spans.iter().any(|(_, v)| at(raw_ref, *v).contains(&0x7f)) {
        return Err(HeadError::Malformed("invalid header value"));
    }
    let framing = framing(named(b"content-length"), named(b"transfer-encoding"), version == Version::HTTP_10, true)?;
    super::chunked::refuse_bad_start(framing, buf)?;
    let has = |name: &'static [u8], token: &[u8]| {
        named(name).flat_map(|v| v.split(|&b| b == b',')).any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
    };
    let close = has(b"connection", b"close");
    let expect_continue = named(b"expect").next().is_some_and(|v| v.eq_ignore_ascii_case(b"100-continue"));
    let mut head = RequestHead {
        method,
        uri,
        version,
        framing,
        keep_alive: version == Version::HTTP_11 && !close,
        expect_continue,
        kind: Kind::Plain,
        raw: head,
        fields,
    };
    head.kind = classify(&head.method, head.version, &head)?;
    Ok(Some(head))
}

/// Parses a response head at the start of `buf`, as [`parse_request`] does a request's.
/// `head_request`: the request was a HEAD, so no body follows whatever the head says.
pub fn parse_response(buf: &mut BytesMut, limit: usize, head_request: bool) -> Result<Option<ResponseHead>, HeadError> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut resp, buf, &mut slots);
    let Some(len) = head_length(parsed, buf.len(), limit)? else {
        return Ok(None);
    };
    super::lines::check(&buf[..len])?;
    let status =
        StatusCode::from_u16(resp.code.unwrap_or_default()).map_err(|_| HeadError::Malformed("invalid status"))?;
    let version = if resp.version == Some(0) { Version::HTTP_10 } else { Version::HTTP_11 };
    let base = buf.as_ptr() as usize;
    let fields = Fields::of(base, resp.headers);
    let raw = buf.split_to(len).freeze();
    let (raw_ref, spans) = (&raw, fields.as_slice());
    let named = |name: &'static [u8]| named(raw_ref, spans, name);
    let framing = framing(named(b"content-length"), named(b"transfer-encoding"), version == Version::HTTP_10, false)?;
    let close = named(b"connection")
        .flat_map(|v| v.split(|&b| b == b','))
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
    // RFC 9112 section 6.3: these never have a body, whatever their head says.
    let bodiless = head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let framing = if bodiless { Framing::Length(0) } else { framing };
    let keep_alive = version == Version::HTTP_11 && !close;
    Ok(Some(ResponseHead { status, version, framing, keep_alive, raw, fields }))
}

/// The length of a head httparse has read: `None` while it is incomplete and under `limit`. A
/// head longer than `limit` is too large whether it arrived whole or in pieces, so the answer
/// never depends on how the peer's bytes were cut.
fn head_length(parsed: httparse::Result<usize>, read: usize, limit: usize) -> Result<Option<usize>, HeadError> {
    match parsed {
        Ok(httparse::Status::Complete(len)) if len > limit => Err(HeadError::TooLarge),
        Ok(httparse::Status::Complete(len)) => Ok(Some(len)),
        Ok(httparse::Status::Partial) if read >= limit => Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooManyHeaders),
        Err(e) => Err(HeadError::Malformed(parse_error(e))),
    }
}

/// Where a part of a head lies in it: its first byte and the one after its last.
/// u32: a head is far shorter than 4 GiB, and the offsets of its fields are moved with it.
type Span = (u32, u32);

/// Where `part` (a slice of the buffer starting at address `base`) lies in it.
fn offset(base: usize, part: &[u8]) -> Span {
    let start = (part.as_ptr() as usize).saturating_sub(base);
    let at = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    (at(start), at(start + part.len()))
}

/// The fields at `spans` of `raw`: name and value, in order.
fn lines<'a>(raw: &'a [u8], spans: &'a [(Span, Span)]) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone {
    spans.iter().map(move |(n, v)| (at(raw, *n), at(raw, *v)))
}

/// The values of the fields at `spans` of `raw` named `name`, in any case.
fn named<'a>(raw: &'a [u8], spans: &'a [(Span, Span)], name: &[u8]) -> impl Iterator<Item = &'a [u8]> {
    lines(raw, spans).filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
}

/// The bytes of `head` at `span`.
fn at(head: &[u8], span: Span) -> &[u8] {
    head.get(span.0 as usize..span.1 as usize).unwrap_or_default()
}

/// Fields a head usually has at most: their offsets stay on the stack (a larger array would be
/// zeroed on every parse, which cost more than the parse itself).
const FEW_FIELDS: usize = 24;

/// The offsets of each header's name and value.
// The large variant is the point: the usual head's offsets need no allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Fields {
    Few([(Span, Span); FEW_FIELDS], usize),
    Many(Vec<(Span, Span)>),
}

impl Fields {
    fn of(base: usize, headers: &[httparse::Header<'_>]) -> Fields {
        let span = |h: &httparse::Header<'_>| (offset(base, h.name.as_bytes()), offset(base, h.value));
        if headers.len() > FEW_FIELDS {
            return Fields::Many(headers.iter().map(span).collect());
        }
        let mut few = [((0, 0), (0, 0)); FEW_FIELDS];
        for (slot, h) in few.iter_mut().zip(headers) {
            *slot = span(h);
        }
        Fields::Few(few, headers.len())
    }

    fn as_slice(&self) -> &[(Span, Span)] {
        match self {
            Fields::Few(few, n) => &few[..*n],
            Fields::Many(many) => many,
        }
    }
}

fn parse_error(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status",
        httparse::Error::Token => "invalid token",
        httparse::Error::Version => "invalid version",
        httparse::Error::TooManyHeaders => "too many headers",
    }
}
