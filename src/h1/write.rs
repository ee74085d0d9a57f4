//! The response heads roomgate writes to clients, each into a reused buffer and sent in one
//! write (a backend's request head is written by `proxy::h1::forward`).

use http::StatusCode;
use http::header::HeaderMap;

/// A response head for a client: `headers` (hop-by-hop ones already removed), then the framing
/// (`chunked`: the body is sent chunked) and `Connection: close` when the connection ends after it.
pub fn response_head(out: &mut Vec<u8>, status: StatusCode, headers: &HeaderMap, chunked: bool, close: bool) {
    status_line(out, status);
    fields(out, headers);
    framing(out, chunked, close);
}

/// A response head for a client from a backend's fields (`fields`: the end-to-end ones, as they
/// came), plus `extra` fields, the framing and `Connection: close` as [`response_head`] writes
/// them.
pub fn relayed_head<'a>(
    out: &mut Vec<u8>,
    status: StatusCode,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    extra: &[(&'a [u8], &'a [u8])],
    chunked: bool,
    close: bool,
) {
    status_line(out, status);
    for (name, value) in fields.chain(extra.iter().copied()) {
        field(out, name, value);
    }
    framing(out, chunked, close);
}

fn status_line(out: &mut Vec<u8>, status: StatusCode) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn framing(out: &mut Vec<u8>, chunked: bool, close: bool) {
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// One field line: `name: value` CRLF.
pub fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn fields(out: &mut Vec<u8>, headers: &HeaderMap) {
    for (name, value) in headers {
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
}
