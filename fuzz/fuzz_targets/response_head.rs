//! `h1::parse_response` on arbitrary bytes, under a limit and a HEAD-or-not the first byte picks.
//! Never panics, and a head it takes holds together: deterministic, the same under a larger limit,
//! every shorter prefix still incomplete, the head the input's first bytes, a bodiless status
//! framed as no body, and its end-to-end fields free of hop-by-hop ones (but never without the
//! `Content-Length` that frames the body).

#![no_main]

use bytes::BytesMut;
use http::{StatusCode, Version};
use libfuzzer_sys::fuzz_target;
use roomgate::fields::Fields;
use roomgate::h1::head::{HOP_BY_HOP, MAX_HEADERS};
use roomgate::h1::{Framing, HeadError, ResponseHead, parse_response};

const LIMITS: [usize; 4] = [16, 256, 8 * 1024, 64 * 1024];

fn summary(r: &Result<Option<ResponseHead>, HeadError>) -> String {
    match r {
        Ok(Some(h)) => format!(
            "{} {:?} {:?} ka={} {:?}",
            h.status,
            h.version,
            h.framing,
            h.keep_alive,
            h.fields().collect::<Vec<_>>()
        ),
        other => format!("{other:?}"),
    }
}

fn parse(bytes: &[u8], limit: usize, head_request: bool) -> (Result<Option<ResponseHead>, HeadError>, BytesMut) {
    let mut buf = BytesMut::from(bytes);
    let r = parse_response(&mut buf, limit, head_request);
    (r, buf)
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, input)) = data.split_first() else { return };
    let limit = LIMITS[usize::from(pick & 0x3)];
    let head_request = pick & 0x4 != 0;
    let (result, rest) = parse(input, limit, head_request);

    let (again, rest_again) = parse(input, limit, head_request);
    assert_eq!(summary(&result), summary(&again));
    assert_eq!(rest, rest_again);

    let head = match &result {
        Ok(Some(head)) => head,
        Ok(None) => {
            assert!(input.len() < limit);
            assert_eq!(&rest[..], input);
            return;
        }
        Err(_) => return,
    };

    // The head is the input's first bytes (its length is what left the buffer).
    let len = input.len() - rest.len();
    assert_eq!(&rest[..], &input[len..]);
    assert!(input[..len].ends_with(b"\r\n\r\n"));
    assert!(!roomgate::h1::lines::bare_lf(&input[..len]));

    let bodiless = head_request
        || head.status.is_informational()
        || head.status == StatusCode::NO_CONTENT
        || head.status == StatusCode::NOT_MODIFIED;
    if bodiless {
        assert_eq!(head.framing, Framing::Length(0), "status {} (HEAD: {head_request})", head.status);
    }
    if head.keep_alive {
        assert_eq!(head.version, Version::HTTP_11);
    }
    if head.framing == Framing::Chunked {
        assert_eq!(head.version, Version::HTTP_11);
    }
    assert!(head.count() <= MAX_HEADERS);
    assert_eq!(head.fields().count(), head.count());

    // End-to-end fields: a subsequence of the fields, none hop-by-hop, every Content-Length kept.
    let all: Vec<_> = head.fields().collect();
    let kept: Vec<_> = head.end_to_end().collect();
    let mut at = all.iter();
    for field in &kept {
        assert!(at.any(|f| f == field), "end_to_end is not a subsequence of the fields");
        assert!(!HOP_BY_HOP.iter().any(|h| field.0.eq_ignore_ascii_case(h)), "hop-by-hop {:?} kept", field.0);
    }
    let lengths =
        |fields: &[(&[u8], &[u8])]| fields.iter().filter(|(n, _)| n.eq_ignore_ascii_case(b"content-length")).count();
    assert_eq!(lengths(&all), lengths(&kept), "a Content-Length dropped");

    let (larger, larger_rest) = parse(input, 64 * 1024, head_request);
    assert_eq!(summary(&result), summary(&larger));
    assert_eq!(rest, larger_rest);

    // Read in two pieces: the first is still incomplete (and a head over the limit is refused
    // whole as it would be in pieces: fuzz/seeds/response_head/crash-over-limit-whole).
    assert!(len <= limit, "a head of {len} bytes under the limit {limit}");
    let cut = (usize::from(pick) * 257 + input.len()) % len;
    let (prefix, _) = parse(&input[..cut], limit, head_request);
    assert!(matches!(prefix, Ok(None)), "a prefix of {cut} bytes of a {len}-byte head: {}", summary(&prefix));
});
