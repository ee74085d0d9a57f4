//! The codec against RFC 9112's framing rules and the smuggling classics.

use bytes::BytesMut;
use proptest::prelude::*;

use super::*;

fn request(text: &[u8]) -> Result<Option<RequestHead>, HeadError> {
    parse_request(&mut BytesMut::from(text), 64 * 1024)
}

fn framing_of(text: &str) -> Result<Framing, HeadError> {
    request(text.as_bytes()).map(|h| h.map_or(Framing::Close, |h| h.framing))
}

#[test]
fn framing_is_strict() {
    let ok = |h: &str| framing_of(&format!("POST / HTTP/1.1\r\nhost: a\r\n{h}\r\n"));
    assert_eq!(ok("content-length: 5\r\n"), Ok(Framing::Length(5)));
    assert_eq!(ok(""), Ok(Framing::Length(0)));
    assert_eq!(ok("transfer-encoding: chunked\r\n"), Ok(Framing::Chunked));
    assert_eq!(ok("transfer-encoding: Chunked \r\n"), Ok(Framing::Chunked));
    let refused = [
        ("content-length: 5\r\ntransfer-encoding: chunked\r\n", FramingError::LengthAndCoding),
        ("content-length: 5\r\ncontent-length: 5\r\n", FramingError::TwoLengths),
        ("content-length: 5, 5\r\n", FramingError::BadLength),
        ("content-length: +5\r\n", FramingError::BadLength),
        ("content-length: -1\r\n", FramingError::BadLength),
        ("content-length: 5a\r\n", FramingError::BadLength),
        ("content-length: 0x5\r\n", FramingError::BadLength),
        ("content-length: \r\n", FramingError::BadLength),
        ("content-length: 99999999999999999999999\r\n", FramingError::BadLength),
        ("transfer-encoding: chunked, gzip\r\n", FramingError::BadCoding),
        ("transfer-encoding: gzip, chunked\r\n", FramingError::BadCoding),
        ("transfer-encoding: xchunked\r\n", FramingError::BadCoding),
        ("transfer-encoding: chunkedx\r\n", FramingError::BadCoding),
        ("transfer-encoding: chunked, chunked\r\n", FramingError::BadCoding),
        ("transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n", FramingError::BadCoding),
        ("transfer-encoding: identity\r\n", FramingError::BadCoding),
    ];
    for (h, want) in refused {
        assert_eq!(ok(h), Err(HeadError::Framing(want)), "{h:?}");
    }
    let http10 = framing_of("POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n");
    assert_eq!(http10, Err(HeadError::Framing(FramingError::CodingOnHttp10)));
}

#[test]
fn malformed_heads_are_refused() {
    let cases: [&[u8]; 6] = [
        b"GET / HTTP/1.1\r\nhost : a\r\n\r\n",
        b"GET / HTTP/1.1\r\nhost: a\r\n folded\r\n\r\n",
        b"GET / HTTP/1.1\r\nhost: a\rb\r\n\r\n",
        b"GET / HTTP/1.1\r\nhost: a\0b\r\n\r\n",
        b"GET / HTTP/1.1\r\n host: a\r\n\r\n",
        b"GET / HTTP/2.0\r\nhost: a\r\n\r\n",
    ];
    for case in cases {
        assert!(matches!(request(case), Err(HeadError::Malformed(_))), "{:?}", String::from_utf8_lossy(case));
    }
}

/// A target is visible ASCII without a fragment (RFC 9112 section 3.2): http's Uri would take
/// raw UTF-8 and drop a fragment, and the backend would get other bytes than were sent.
#[test]
fn targets_are_visible_ascii_without_a_fragment() {
    for target in ["/a#b", "/#", "/caf\u{e9}", "/a?q=\u{3b4}", "http://h.example/x#y"] {
        let text = format!("GET {target} HTTP/1.1\r\nhost: h.example\r\n\r\n");
        let got = request(text.as_bytes());
        assert!(matches!(got, Err(HeadError::Malformed("invalid request target"))), "{target:?}: {got:?}");
    }
    assert!(request(b"GET /a%23b?q=%CE%B4 HTTP/1.1\r\nhost: h\r\n\r\n").unwrap().is_some());
}

#[test]
fn heads_keep_what_follows() {
    let mut buf = BytesMut::from(&b"POST /a?b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhiGET"[..]);
    let head = parse_request(&mut buf, 1024).unwrap().unwrap();
    assert_eq!(head.uri.path_and_query().unwrap().as_str(), "/a?b");
    assert_eq!(crate::fields::Fields::first(&head, "host"), Some(&b"x"[..]));
    assert!(head.keep_alive && head.kind == crate::handshake::Kind::Plain);
    assert_eq!(&buf[..], b"hiGET");
    assert!(matches!(parse_request(&mut BytesMut::from(&b"GET / HTTP/1.1\r\n"[..]), 1024), Ok(None)));
    let long = BytesMut::from(&b"GET / HTTP/1.1\r\nx: aaaaaaaaaaaaaaaa"[..]);
    assert!(matches!(parse_request(&mut long.clone(), 16), Err(HeadError::TooLarge)));
}

#[test]
fn responses_without_bodies() {
    let parse = |t: &[u8], head| parse_response(&mut BytesMut::from(t), 1024, head).unwrap().unwrap().framing;
    assert_eq!(parse(b"HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\n", false), Framing::Length(0));
    assert_eq!(parse(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", true), Framing::Length(0));
    assert_eq!(parse(b"HTTP/1.1 200 OK\r\n\r\n", false), Framing::Close);
    assert_eq!(parse(b"HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n", false), Framing::Length(1));
    let http10 = parse_response(&mut BytesMut::from(&b"HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n"[..]), 99, false);
    assert!(!http10.unwrap().unwrap().keep_alive);
}

/// A response head over the limit is too large when it arrives whole too, as it is when read in
/// pieces (found by the response_head fuzz target: fuzz/seeds/response_head/crash-over-limit-whole).
#[test]
fn response_heads_over_the_limit_whole() {
    let head = &b"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n"[..];
    assert!(matches!(parse_response(&mut BytesMut::from(head), 36, false), Err(HeadError::TooLarge)));
    assert!(matches!(parse_response(&mut BytesMut::from(&head[..36]), 36, false), Err(HeadError::TooLarge)));
    assert!(parse_response(&mut BytesMut::from(head), head.len(), false).unwrap().is_some());
}

/// Decodes `input` fed in pieces of `step` bytes; the data, and what followed the body.
fn decode_in_pieces(input: &[u8], step: usize) -> Result<(Vec<u8>, usize), ChunkError> {
    let mut d = ChunkedDecoder::default();
    let (mut data, mut pos, mut fed) = (Vec::new(), 0, step.min(input.len()));
    loop {
        let out = d.decode(&input[pos..fed])?;
        data.extend_from_slice(&input[pos..fed][out.data.clone()]);
        pos += out.consumed;
        if out.done {
            return Ok((data, pos));
        }
        if pos == fed {
            if fed == input.len() {
                return Err(ChunkError::BadTrailer);
            }
            fed = (fed + step).min(input.len());
        }
    }
}

#[test]
fn chunked_refuses_bad_lines() {
    let bad: [(&[u8], ChunkError); 11] = [
        (b"0\r\nXGET / HTTP/1.1\r\n\r\n", ChunkError::BadTrailer),
        (b"0\r\n: v\r\n\r\n", ChunkError::BadTrailer),
        (b"g\r\n", ChunkError::BadSize),
        (b"\r\n", ChunkError::BadSize),
        (b"0x5\r\n", ChunkError::BadSize),
        (b" 5\r\n", ChunkError::BadSize),
        (b"5\nhello\r\n", ChunkError::BadSize),
        (b"11111111111111111\r\n", ChunkError::SizeOverflow),
        (b"5;a\x01\r\n", ChunkError::BadExtension),
        (b"5;a\nhello\r\n", ChunkError::BadExtension),
        (b"5\r\nhelloXX", ChunkError::BadDataEnd),
    ];
    for (input, want) in bad {
        assert_eq!(decode_in_pieces(input, 1).err(), Some(want), "{:?}", String::from_utf8_lossy(input));
    }
    let ok = b"5;name=value;q=\"a b\"\r\nhello\r\n0\r\nx-t: 1\r\n\r\nNEXT";
    assert_eq!(decode_in_pieces(ok, 3), Ok((b"hello".to_vec(), ok.len() - 4)));
}

proptest! {
    /// Any body, in any chunks, fed in any pieces, decodes to itself and stops at its end.
    #[test]
    fn chunked_round_trip(data in proptest::collection::vec(any::<u8>(), 0..600), cut in 1usize..50, step in 1usize..64) {
        let mut encoded = Vec::new();
        for chunk in data.chunks(cut) {
            chunked::write_size(&mut encoded, chunk.len());
            encoded.extend_from_slice(chunk);
            encoded.extend_from_slice(b"\r\n");
        }
        encoded.extend_from_slice(b"0\r\n\r\nGET");
        let (decoded, end) = decode_in_pieces(&encoded, step).unwrap();
        prop_assert_eq!(decoded, data);
        prop_assert_eq!(end, encoded.len() - 3);
    }

    /// No input makes the decoder panic, or claim more data than it was given.
    #[test]
    fn chunked_never_panics(input in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut d = ChunkedDecoder::default();
        if let Ok(out) = d.decode(&input) {
            prop_assert!(out.data.end <= input.len() && out.consumed <= input.len());
        }
    }
}

/// Issue 32 item 13: what llhttp's strict mode refuses on a chunk-size line, refused here too:
/// an empty extension, whitespace after the size (BWS), and extensions that are not
/// `;name[=token|quoted-string]` with nothing between.
#[test]
fn chunk_size_lines_are_strict() {
    let bad: [(&[u8], ChunkError); 13] = [
        (b"2;\r\nhi\r\n0\r\n\r\n", ChunkError::BadExtension),
        (b"a \r\n0123456789\r\n0\r\n\r\n", ChunkError::BadSize),
        (b"a\t\r\n0123456789\r\n0\r\n\r\n", ChunkError::BadSize),
        (b"5 ;a\r\nhello\r\n0\r\n\r\n", ChunkError::BadSize),
        (b"5; a\r\nhello\r\n0\r\n\r\n", ChunkError::BadExtension),
        (b"5;a =b\r\nhello\r\n0\r\n\r\n", ChunkError::BadExtension),
        (b"5;a= b\r\nhello\r\n0\r\n\r\n", ChunkError::BadExtension),
        (b"5;a=\r\nhello\r\n0\r\n\r\n", ChunkError::BadExtension),
        (b"5;a=b c\r\nhello\r\n0\r\n\r\n", ChunkError::BadExtension),
        (b"5;;a\r\nhello\r\n0\r\n\r\n", ChunkError::BadExtension),
        (b"5;a=\"x\" \r\nhello\r\n0\r\n\r\n", ChunkError::BadExtension),
        (b"5;a=\"x\"y\r\nhello\r\n0\r\n\r\n", ChunkError::BadExtension),
        (b"0;\r\n\r\n", ChunkError::BadExtension),
    ];
    for (input, want) in bad {
        assert_eq!(decode_in_pieces(input, 1).err(), Some(want), "{:?}", String::from_utf8_lossy(input));
    }
    let ok: [&[u8]; 4] = [
        b"5;a\r\nhello\r\n0\r\n\r\n",
        b"5;a=b;c;d=\"e;f\"\r\nhello\r\n0;z\r\n\r\n",
        b"5;ilovew3=\"I \\\"love\\\"; \\\\extensions\\\\\";somuchlove=\"x\";blah;foo=bar\r\nhello\r\n0\r\n\r\n",
        b"5;a=\"\"\r\nhello\r\n0\r\n\r\n",
    ];
    for input in ok {
        assert_eq!(
            decode_in_pieces(input, 2),
            Ok((b"hello".to_vec(), input.len())),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
}

/// Issue 32 item 13: a bare LF anywhere in a head is refused, in requests (400) and in
/// responses (502): httparse alone accepts each of these.
#[test]
fn bare_lf_heads_are_refused() {
    let requests: [&[u8]; 5] = [
        b"GET / HTTP/1.1\nHost: a\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nDummy: x\nContent-Length: 23\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\n\n",
        b"GET / HTTP/1.1\r\nHost: a\n\n",
        b"\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
    ];
    for case in requests {
        let got = request(case);
        assert_eq!(got.err(), Some(HeadError::Malformed("bare LF in the head")), "{:?}", String::from_utf8_lossy(case));
    }
    let responses: [&[u8]; 2] =
        [b"HTTP/1.1 200 OK\r\nDummy: x\nContent-Length: 2\r\n\r\nhi", b"HTTP/1.1 200 OK\ncontent-length: 0\r\n\r\n"];
    for case in responses {
        let got = parse_response(&mut BytesMut::from(case), 1024, false);
        assert_eq!(got.err(), Some(HeadError::Malformed("bare LF in the head")), "{:?}", String::from_utf8_lossy(case));
    }
    // A leading CRLF before the request line is still skipped (RFC 9112 section 2.2).
    assert!(request(b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n").is_ok_and(|h| h.is_some()));
}

/// A chunked body that already goes bad in the bytes read with its head refuses the head, so a
/// backend never sees it; one that is only cut short, or well formed, does not.
#[test]
fn a_bad_chunked_start_refuses_the_head() {
    let head = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    for body in ["2;\r\nhi\r\n0\r\n\r\n", "a \r\n0123456789\r\n0\r\n\r\n", "5\r\nhelloXX"] {
        let got = request(format!("{head}{body}").as_bytes());
        assert_eq!(got.err(), Some(HeadError::BadBody), "{body:?}");
    }
    for body in ["", "5\r\nhel", "5;a=b\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n", "0\r\n\r\nnot a request"] {
        assert!(request(format!("{head}{body}").as_bytes()).is_ok_and(|h| h.is_some()), "{body:?}");
    }
}
