//! `h1::ChunkedDecoder` on arbitrary bytes, fed whole and fed in pieces: the first byte says how
//! many cuts (0 to 7), the next two bytes per cut where (each a u16, modulo the body's length).
//! Both feedings must come to the same data, the same end (where the body ended, or the same
//! error), and whatever data a body decodes to decodes back from its re-encoding as one chunk.

#![no_main]

mod cuts;

use libfuzzer_sys::fuzz_target;
use roomgate::h1::chunked::write_size;
use roomgate::h1::{ChunkError, ChunkedDecoder};

/// What decoding a stream came to.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    data: Vec<u8>,
    /// Where the body ended (the offset after its last byte), if it did.
    end: Option<usize>,
    error: Option<ChunkError>,
    /// The decoder says it is done.
    done: bool,
}

/// Decodes `body` in `pieces` (lengths that add up to it), as a connection reads it.
fn decode(body: &[u8], cuts: &[usize]) -> Outcome {
    let mut decoder = ChunkedDecoder::default();
    let mut out = Outcome { data: Vec::new(), end: None, error: None, done: false };
    let mut start = 0;
    'pieces: for &cut in cuts.iter().chain(std::iter::once(&body.len())) {
        let piece = &body[start..cut];
        let mut at = 0;
        while at < piece.len() {
            let step = match decoder.decode(&piece[at..]) {
                Ok(step) => step,
                Err(e) => {
                    out.error = Some(e);
                    break 'pieces;
                }
            };
            assert!(step.consumed <= piece.len() - at, "consumed past the input");
            assert!(
                step.data.start <= step.data.end && step.data.end <= step.consumed,
                "data outside what was consumed"
            );
            out.data.extend_from_slice(&piece[at + step.data.start..at + step.data.end]);
            at += step.consumed;
            if step.done {
                out.end = Some(start + at);
                break 'pieces;
            }
            assert!(step.consumed > 0, "nothing consumed from {} bytes, and not done", piece.len() - at);
        }
        start = cut;
    }
    out.done = decoder.is_done();
    assert_eq!(out.done, out.end.is_some(), "is_done disagrees with the last step");
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else { return };
    let Some((cuts, body)) = cuts::split(n, rest) else { return };

    let whole = decode(body, &[]);
    let split = decode(body, &cuts);
    assert_eq!(whole, split, "whole vs cut at {cuts:?}");
    let bytewise: Vec<usize> = (1..body.len().min(512)).collect();
    if body.len() <= 512 {
        assert_eq!(whole, decode(body, &bytewise), "whole vs byte by byte");
    }
    assert!(whole.data.len() <= body.len());

    // Whatever a body decodes to comes back from its re-encoding.
    if whole.done {
        let mut encoded = Vec::new();
        if !whole.data.is_empty() {
            write_size(&mut encoded, whole.data.len());
            encoded.extend_from_slice(&whole.data);
            encoded.extend_from_slice(b"\r\n");
        }
        encoded.extend_from_slice(b"0\r\n\r\n");
        let again = decode(&encoded, &[]);
        assert_eq!(again.data, whole.data);
        assert_eq!(again.end, Some(encoded.len()));
    }
});
