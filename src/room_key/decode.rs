//! Percent-decoding of what carries a room key, as the backend decodes it: strictly for key
//! values and paths (anything a backend could decode otherwise is refused), and exactly as
//! Python's `parse_qsl` does for query parameter names; and Python's lenient `unquote`, as djust
//! reads the page a mount frame names.

use std::borrow::Cow;

use super::read::Refusal;
use super::{Ambiguity, KeyProblem};

/// Strict percent-decoding: `%` must be followed by two hex digits, and the result must be
/// UTF-8.
pub(super) fn percent(raw: &str) -> Result<Cow<'_, str>, KeyProblem> {
    decode(raw, false, false).map_err(|refusal| match refusal {
        Refusal::Bad(why) => why,
        // Unreachable: slashes are refused only in paths.
        Refusal::Ambiguous(_) => KeyProblem::BadPercentEncoding,
    })
}

/// `application/x-www-form-urlencoded` decoding (`+` is a space), strict like [`percent`].
pub(super) fn form(raw: &str) -> Result<Cow<'_, str>, KeyProblem> {
    decode(raw, true, false).map_err(|refusal| match refusal {
        Refusal::Bad(why) => why,
        Refusal::Ambiguous(_) => KeyProblem::BadPercentEncoding,
    })
}

/// A request path as the backend routes it: percent-decoded once (`+` stays `+`), like a WSGI
/// `PATH_INFO` or an ASGI `path`. An encoded `/` is refused: one backend routes it as a
/// separator and another as a character, so the room it splits cannot be known.
pub(super) fn path(raw: &str) -> Result<Cow<'_, str>, Refusal> {
    decode(raw, false, true)
}

/// Whether a raw query parameter name is `name` as `parse_qsl` decodes it: `+` is a space,
/// then Python's lenient `unquote` (a `%` without two hex digits stays as it is).
pub(super) fn query_name_is(raw: &str, name: &str) -> bool {
    if !raw.as_bytes().iter().any(|&b| b == b'%' || b == b'+') {
        return raw == name;
    }
    // Decoding only shortens a name.
    if raw.len() < name.len() {
        return false;
    }
    unquote(&raw.replace('+', " ")) == name
}

fn decode(raw: &str, plus_is_space: bool, slash_is_ambiguous: bool) -> Result<Cow<'_, str>, Refusal> {
    let needs_work = raw.bytes().any(|b| b == b'%' || (plus_is_space && b == b'+'));
    if !needs_work {
        return Ok(Cow::Borrowed(raw));
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hi = bytes.get(i + 1).and_then(|b| hex(*b));
                let lo = bytes.get(i + 2).and_then(|b| hex(*b));
                let (Some(hi), Some(lo)) = (hi, lo) else {
                    return Err(Refusal::Bad(KeyProblem::BadPercentEncoding));
                };
                let byte = hi << 4 | lo;
                if slash_is_ambiguous && byte == b'/' {
                    return Err(Refusal::Ambiguous(Ambiguity::EncodedSlash));
                }
                out.push(byte);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    // Non-UTF-8 bytes cannot be visible ASCII either; backends replace them (`U+FFFD`) or
    // re-encode them (Django's WSGI handler), so they are refused rather than guessed.
    String::from_utf8(out).map(Cow::Owned).map_err(|_| Refusal::Bad(KeyProblem::NotVisibleAscii))
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Whether the path has a `.` or `..` segment: a hop that normalises the path (a browser, a
/// CDN, another proxy) would route it elsewhere than its bytes say.
pub(super) fn has_dot_segment(path: &str) -> bool {
    if !path.as_bytes().contains(&b'.') {
        return false;
    }
    path.split('/').any(|segment| segment == "." || segment == "..")
}

/// Python's `urllib.parse.unquote`: every `%XX` with two hex digits decoded once, anything else
/// kept, the bytes read as UTF-8 with invalid sequences replaced.
pub fn unquote(text: &str) -> String {
    if !text.contains('%') {
        return text.to_owned();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
        match (bytes[i], hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_decoding_refuses_what_a_backend_could_read_otherwise() {
        assert_eq!(percent("a%41b").unwrap(), "aAb");
        assert_eq!(percent("plain").unwrap(), "plain");
        assert!(matches!(percent("plain").unwrap(), Cow::Borrowed(_)));
        assert_eq!(percent("a+b").unwrap(), "a+b");
        assert_eq!(form("a+b").unwrap(), "a b");
        assert_eq!(form("a%2Bb").unwrap(), "a+b");
        assert_eq!(form("a%20b").unwrap(), "a b");
        for bad in ["a%", "a%4", "a%zz", "%g1"] {
            assert_eq!(percent(bad).unwrap_err(), KeyProblem::BadPercentEncoding, "{bad}");
        }
        assert_eq!(percent("%FF").unwrap_err(), KeyProblem::NotVisibleAscii);
        assert_eq!(percent("%C3%A9").unwrap(), "é");
    }

    #[test]
    fn paths_decode_once_and_refuse_an_encoded_slash() {
        assert_eq!(path("/room/a%2Ab/").unwrap(), "/room/a*b/");
        assert_eq!(path("/room/a+b/").unwrap(), "/room/a+b/");
        assert_eq!(path("/room/a%252F/").unwrap(), "/room/a%2F/");
        for raw in ["/room/a%2Fb/", "/room/a%2fb/", "/x%2F/room/a/"] {
            assert_eq!(path(raw).unwrap_err(), Refusal::Ambiguous(Ambiguity::EncodedSlash), "{raw}");
        }
        assert_eq!(path("/room/%FF/").unwrap_err(), Refusal::Bad(KeyProblem::NotVisibleAscii));
        assert_eq!(path("/room/%zz/").unwrap_err(), Refusal::Bad(KeyProblem::BadPercentEncoding));
    }

    #[test]
    fn dot_segments() {
        for p in ["/room/../x/", "/room/./a/", "/..", "/a/.", "/room/a/.."] {
            assert!(has_dot_segment(p), "{p}");
        }
        for p in ["/room/a.b/", "/room/.a/", "/room/a../", "/room/.../", "/"] {
            assert!(!has_dot_segment(p), "{p}");
        }
    }

    #[test]
    fn query_names_decode_as_parse_qsl() {
        assert!(query_name_is("room", "room"));
        assert!(query_name_is("r%6Fom", "room"));
        assert!(query_name_is("%72%6f%6F%6d", "room"));
        assert!(query_name_is("my+room", "my room"));
        assert!(!query_name_is("rooms", "room"));
        assert!(!query_name_is("r%6", "room"));
        // Python keeps a `%` without two hex digits as it is.
        assert!(query_name_is("a%", "a%"));
        assert!(query_name_is("a%zz", "a%zz"));
        assert!(query_name_is("a%25", "a%"));
    }
}
