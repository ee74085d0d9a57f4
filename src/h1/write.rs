//! The heads roomgate writes: a request to a backend and a response to a client, each into a
//! reused buffer and sent in one write.

use http::header::HeaderMap;
use http::{Method, StatusCode};

use super::framing::Framing;

/// A request head for a backend: origin-form `target`, HTTP/1.1, `headers` (hop-by-hop ones
/// already removed) and the framing the body is sent with.
pub fn request_head(out: &mut Vec<u8>, method: &Method, target: &str, headers: &HeaderMap, framing: Framing) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    fields(out, headers);
    if framing == Framing::Chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A response head for a client: `headers` (hop-by-hop ones already removed), then the framing
/// (`chunked`: the body is sent chunked) and `Connection: close` when the connection ends after it.
pub fn response_head(out: &mut Vec<u8>, status: StatusCode, headers: &HeaderMap, chunked: bool, close: bool) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
    out.extend_from_slice(b"\r\n");
    fields(out, headers);
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

fn fields(out: &mut Vec<u8>, headers: &HeaderMap) {
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}
