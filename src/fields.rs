//! A request head as the request path reads it (checks, room keys, limits): its fields in a
//! `HeaderMap` that hyper built (HTTP/2, connections handed to hyper), or the field lines
//! roomgate's HTTP/1 codec left in its buffer, read where they lie. Names compare without case;
//! values are the bytes as they came.

use http::header::{HeaderMap, HeaderValue};
use http::{Method, Uri, Version};

/// A request's header fields.
pub trait Fields {
    /// The value of every field named `name` (lowercase), in order.
    fn values<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a [u8]>;

    /// The name of every field line, in order (any case).
    fn names(&self) -> impl Iterator<Item = &[u8]>;

    /// Every field line's name (any case) and value, in order.
    fn lines(&self) -> impl Iterator<Item = (&[u8], &[u8])>;

    /// How many field lines.
    fn count(&self) -> usize;

    /// The bytes the fields take on the wire: `name: value` and CRLF each.
    fn wire_size(&self) -> usize;

    /// The first value of `name`.
    fn first<'a>(&'a self, name: &str) -> Option<&'a [u8]> {
        self.values(name).next()
    }

    fn has(&self, name: &str) -> bool {
        self.values(name).next().is_some()
    }
}

impl Fields for HeaderMap {
    fn values<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a [u8]> {
        self.get_all(name).iter().map(HeaderValue::as_bytes)
    }

    fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.iter().map(|(n, _)| n.as_str().as_bytes())
    }

    fn lines(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()))
    }

    fn count(&self) -> usize {
        self.len()
    }

    fn wire_size(&self) -> usize {
        self.iter().map(|(n, v)| n.as_str().len() + 2 + v.len() + 2).sum()
    }
}

/// A request head: its request line and its fields.
pub struct Head<'a, F: ?Sized> {
    pub method: &'a Method,
    pub uri: &'a Uri,
    pub version: Version,
    pub fields: &'a F,
}

impl<'a, B> From<&'a http::Request<B>> for Head<'a, HeaderMap> {
    fn from(req: &'a http::Request<B>) -> Self {
        Head { method: req.method(), uri: req.uri(), version: req.version(), fields: req.headers() }
    }
}

/// What `HeaderValue::to_str` accepts: visible ASCII, space and tab.
pub fn is_visible(value: &[u8]) -> bool {
    value.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
}

/// A value as text, as `HeaderValue::to_str` reads it: visible ASCII, space and tab, or `None`.
pub fn text(value: &[u8]) -> Option<&str> {
    if is_visible(value) { std::str::from_utf8(value).ok() } else { None }
}

/// Whether a `name` field (a comma-separated list) of `fields` holds `token`, in any case; values
/// that are not visible ASCII are passed over, as `HeaderValue::to_str` refuses them.
pub fn has_token<F: Fields + ?Sized>(fields: &F, name: &str, token: &str) -> bool {
    fields
        .values(name)
        .filter(|v| is_visible(v))
        .flat_map(|v| v.split(|&b| b == b','))
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}
