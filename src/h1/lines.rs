//! Line endings in a head: every line of a request or response head ends in CRLF, never in a
//! bare LF. httparse accepts a bare LF (RFC 9112 section 2.2 lets a recipient do so), but a proxy
//! that is not the only parser on the path must not: a front proxy that does not split on a bare
//! LF reads `Dummy: x\nContent-Length: 23` as one field, roomgate would read two and a body, and
//! the two would disagree on where the request ends.

use super::head::HeadError;

/// [`bare_lf`] as the parsers use it: a head with a bare LF is malformed (400 for a request,
/// 502 for a response).
pub fn check(head: &[u8]) -> Result<(), HeadError> {
    if bare_lf(head) { Err(HeadError::Malformed("bare LF in the head")) } else { Ok(()) }
}

/// Whether `head` (the bytes of a head, up to and including its final empty line) holds an LF
/// not preceded by CR: in the request or status line, a field line, or the final empty line.
pub fn bare_lf(head: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', head).any(|i| i == 0 || head[i - 1] != b'\r')
}

#[cfg(test)]
mod tests {
    use super::bare_lf;

    #[test]
    fn crlf_heads_pass() {
        assert!(!bare_lf(b""));
        assert!(!bare_lf(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(!bare_lf(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"));
        // A CR alone is not this function's to judge (httparse refuses it).
        assert!(!bare_lf(b"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n"));
    }

    #[test]
    fn every_bare_lf_is_found() {
        let cases: [&[u8]; 7] = [
            b"\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nDummy: x\nContent-Length: 23\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n\n",
            b"GET / HTTP/1.1\r\nHost: a\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\n\n",
            b"GET / HTTP/1.1\r\nHost: a\r\r\n\n",
        ];
        for case in cases {
            assert!(bare_lf(case), "{:?}", String::from_utf8_lossy(case));
        }
    }
}
