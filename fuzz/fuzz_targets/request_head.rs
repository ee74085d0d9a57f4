//! `h1::parse_request` on arbitrary bytes, under a limit the first byte picks. Never panics, and
//! a head it takes holds together: the same bytes parse the same way again and under a larger
//! limit, every shorter prefix is still incomplete, the head is the input's first bytes ending in
//! CRLF CRLF with no bare LF, and its `kind` is what `handshake::classify` says of it.

#![no_main]

use bytes::BytesMut;
use http::{Method, Version};
use libfuzzer_sys::fuzz_target;
use roomgate::fields::Fields;
use roomgate::h1::head::MAX_HEADERS;
use roomgate::h1::{Framing, HeadError, RequestHead, parse_request};
use roomgate::handshake::{Kind, classify};

/// Limits a connection could be configured with (`limits.max_request_head`), and smaller ones.
const LIMITS: [usize; 8] = [1, 16, 64, 200, 1024, 8 * 1024, 16 * 1024, 64 * 1024];

/// What a parse decided, comparable.
fn summary(r: &Result<Option<RequestHead>, HeadError>) -> String {
    match r {
        Ok(Some(h)) => format!(
            "{} {} {:?} {:?} ka={} ec={} {:?} {:?} {:?}",
            h.method,
            h.uri,
            h.version,
            h.framing,
            h.keep_alive,
            h.expect_continue,
            h.kind,
            h.raw,
            h.fields().collect::<Vec<_>>()
        ),
        other => format!("{other:?}"),
    }
}

fn parse(bytes: &[u8], limit: usize) -> (Result<Option<RequestHead>, HeadError>, BytesMut) {
    let mut buf = BytesMut::from(bytes);
    let r = parse_request(&mut buf, limit);
    (r, buf)
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, input)) = data.split_first() else { return };
    let limit = LIMITS[usize::from(pick) % LIMITS.len()];
    let (result, rest) = parse(input, limit);

    // Deterministic.
    let (again, rest_again) = parse(input, limit);
    assert_eq!(summary(&result), summary(&again));
    assert_eq!(rest, rest_again);

    let head = match &result {
        Ok(Some(head)) => head,
        Ok(None) => {
            assert!(input.len() < limit, "incomplete at {} bytes, over the limit {limit}", input.len());
            assert_eq!(&rest[..], input, "an incomplete head takes nothing from the buffer");
            return;
        }
        Err(_) => return,
    };

    // The head is the input's first bytes; what follows stays in the buffer.
    let len = head.raw.len();
    assert!(len <= limit, "a head of {len} bytes under the limit {limit}");
    assert_eq!(&head.raw[..], &input[..len]);
    assert_eq!(&rest[..], &input[len..]);
    assert!(head.raw.ends_with(b"\r\n\r\n"), "a head ends with CRLF CRLF: {:?}", head.raw);
    assert!(!roomgate::h1::lines::bare_lf(&head.raw), "a bare LF in a head taken: {:?}", head.raw);

    // The one WebSocket decision, and what it implies.
    assert_eq!(classify(&head.method, head.version, head), Ok(head.kind));
    if head.kind == Kind::WebSocket {
        assert_eq!(head.method, Method::GET);
        assert_eq!(head.version, Version::HTTP_11);
        assert_eq!(head.framing, Framing::Length(0), "a handshake carries no body");
    }
    assert_ne!(head.method, Method::CONNECT);
    assert_ne!(head.framing, Framing::Close, "a request body never runs to the close");
    if head.keep_alive {
        assert_eq!(head.version, Version::HTTP_11);
    }
    if head.framing == Framing::Chunked {
        assert_eq!(head.version, Version::HTTP_11, "Transfer-Encoding is refused in HTTP/1.0");
    }

    // The fields, as the request path reads them.
    assert!(head.count() <= MAX_HEADERS);
    assert_eq!(head.count(), head.fields().count());
    assert_eq!(head.names().count(), head.count());
    for (name, value) in head.fields() {
        assert!(!name.is_empty());
        let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
        assert!(head.values(&lower).any(|v| v == value), "field {lower} not found by name");
    }
    // `name: value` CRLF each: at most one byte more per field than the head has (`name:value`).
    assert!(head.wire_size() <= len + head.count());

    // A larger limit takes the same head.
    let (larger, larger_rest) = parse(input, 64 * 1024);
    assert_eq!(summary(&result), summary(&larger));
    assert_eq!(rest, larger_rest);

    // Read in two pieces, as a connection does: the first is still incomplete.
    let cut = (usize::from(pick) * 257 + input.len()) % len;
    let (prefix, prefix_rest) = parse(&input[..cut], limit);
    assert!(matches!(prefix, Ok(None)), "a prefix of {cut} bytes of a {len}-byte head: {}", summary(&prefix));
    assert_eq!(&prefix_rest[..], &input[..cut]);
});
