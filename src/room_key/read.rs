//! Reading one key source: its one carrier of the key, decoded as the backend will decode it, or
//! why the request has no single one (two carriers, or a carrier the backend would not see).

use std::borrow::Cow;

use http::header::HeaderName;
use http::uri::Authority;
use regex::Regex;

use super::{Ambiguity, KeyProblem, KeySource, RequestView, decode};
use crate::fields::{Fields, text as value_text};

/// Why a source gives no key although it carries one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The one key it carries is not a valid key.
    Bad(KeyProblem),
    /// It does not carry exactly one key, as the backend would read it.
    Ambiguous(Ambiguity),
}

type Read<'a> = Result<Option<Cow<'a, str>>, Refusal>;

/// What several sources need to know of the request head, found at most once per request.
#[derive(Default)]
pub(super) struct Head {
    /// Whether there is a `Connection` header, once known.
    connection: Option<bool>,
}

impl Head {
    /// Whether `Connection` names `carrier` (the hop-by-hop rule removes it on the way).
    #[inline]
    fn names_in_connection<F: Fields + ?Sized>(&mut self, headers: &F, carrier: &str) -> bool {
        *self.connection.get_or_insert_with(|| headers.has("connection")) && named_in_connection(headers, carrier)
    }
}

/// The decoded (not yet validated) key `source` finds in the request; `Ok(None)` when it carries
/// none, or only an empty one.
pub(super) fn key<'a, F: Fields + ?Sized>(source: &KeySource, req: &RequestView<'a, F>, head: &mut Head) -> Read<'a> {
    let found = match source {
        KeySource::Header(name) => header(req.headers, name, head)?,
        KeySource::Cookie(name) => cookie(req.headers, name, head)?.map(decode_value).transpose()?,
        KeySource::Query(name) => match req.uri.query() {
            Some(query) => query_param(query, name)?.map(|v| decode::form(v).map_err(Refusal::Bad)).transpose()?,
            None => None,
        },
        KeySource::Path(re) => path(re, req.uri.path())?,
        KeySource::Host(re) => host(req, head)?.and_then(|host| capture_room(re, host)).map(Cow::Borrowed),
        KeySource::Djust(_) => None,
    };
    Ok(found.filter(|key| !key.is_empty()))
}

fn decode_value(raw: &str) -> Result<Cow<'_, str>, Refusal> {
    decode::percent(raw).map_err(Refusal::Bad)
}

/// A key header: exactly one line, no list. RFC 9110 (section 5.3) lets any hop join two lines
/// into one comma-separated value, and Django's servers do, so `a,b` and two lines are the same
/// request; a key with a comma travels percent-encoded (`%2C`).
fn header<'a, F: Fields + ?Sized>(headers: &'a F, name: &HeaderName, head: &mut Head) -> Read<'a> {
    let names = scan_names(headers, name);
    head.connection = Some(names.connection);
    if names.twin {
        return Err(Refusal::Ambiguous(Ambiguity::UnderscoreTwin));
    }
    let mut lines = headers.values(name.as_str());
    let Some(value) = lines.next() else { return Ok(None) };
    if lines.next().is_some() {
        return Err(Refusal::Ambiguous(Ambiguity::TwoHeaders));
    }
    let text = value_text(value).ok_or(Refusal::Bad(KeyProblem::NotVisibleAscii))?;
    // One pass for both, without branches: most values have neither.
    let (comma, percent) = text.bytes().fold((false, false), |(c, p), b| (c | (b == b','), p | (b == b'%')));
    if comma {
        return Err(Refusal::Ambiguous(Ambiguity::TwoHeaders));
    }
    // hyper trims values it parses; one built otherwise may still have spaces around it.
    let text = match text.starts_with([' ', '\t']) || text.ends_with([' ', '\t']) {
        true => text.trim_matches([' ', '\t']),
        false => text,
    };
    if names.connection && named_in_connection(headers, name.as_str()) {
        return Err(Refusal::Ambiguous(Ambiguity::HopByHop));
    }
    match percent {
        true => decode_value(text).map(Some),
        false => Ok(Some(Cow::Borrowed(text))),
    }
}

/// What the header names tell about a key header, in one pass over them (a request has a few,
/// and a pass costs less than a second lookup).
struct Names {
    /// Another header is the key header's name with `_` for some `-` (or the reverse): CGI-style
    /// servers (WSGI, Django's ASGI handler) map both to one `HTTP_X_ROOM`.
    twin: bool,
    /// There is a `Connection` header.
    connection: bool,
}

fn scan_names<F: Fields + ?Sized>(headers: &F, name: &HeaderName) -> Names {
    let name = name.as_str().as_bytes();
    let may_have_twin = name.iter().any(|&b| b == b'-' || b == b'_');
    let dash = |b: &u8| *b == b'-' || *b == b'_';
    let mut names = Names { twin: false, connection: false };
    for other in headers.names() {
        if other.eq_ignore_ascii_case(b"connection") {
            names.connection = true;
        } else if may_have_twin
            && other.len() == name.len()
            && !other.eq_ignore_ascii_case(name)
            && other.iter().zip(name).all(|(a, b)| a.eq_ignore_ascii_case(b) || (dash(a) && dash(b)))
        {
            names.twin = true;
        }
    }
    names
}

fn named_in_connection<F: Fields + ?Sized>(headers: &F, carrier: &str) -> bool {
    headers
        .values("connection")
        .any(|line| line.split(|&b| b == b',').any(|token| token.trim_ascii().eq_ignore_ascii_case(carrier.as_bytes())))
}

/// The key cookie, read as Django's `parse_cookie` reads it: pairs split on `;`, name and value
/// trimmed, the last of two with one name wins there, so two are refused here; likewise across
/// several `Cookie` lines.
fn cookie<'a, F: Fields + ?Sized>(headers: &'a F, name: &str, head: &mut Head) -> Result<Option<&'a str>, Refusal> {
    let mut found: Option<&'a [u8]> = None;
    for bytes in headers.values("cookie") {
        let ascii = bytes.is_ascii();
        for pair in bytes.split(|&b| b == b';') {
            let (n, v) = match memchr::memchr(b'=', pair) {
                Some(eq) => (pair[..eq].trim_ascii(), &pair[eq + 1..]),
                None => continue,
            };
            if n != name.as_bytes() {
                // Bytes outside ASCII next to the name may be spaces to the backend: Python's
                // `strip()` removes U+00A0 and its kin.
                if !ascii && trim_non_ascii(n) == name.as_bytes() {
                    return Err(Refusal::Ambiguous(Ambiguity::NonAsciiCookie));
                }
                continue;
            }
            if found.is_some() {
                return Err(Refusal::Ambiguous(Ambiguity::TwoCookies));
            }
            found = Some(v.trim_ascii());
        }
    }
    let Some(value) = found else { return Ok(None) };
    if head.names_in_connection(headers, "cookie") {
        return Err(Refusal::Ambiguous(Ambiguity::HopByHop));
    }
    // Bytes outside ASCII are not a valid key anyway.
    let value = std::str::from_utf8(value).map_err(|_| Refusal::Bad(KeyProblem::NotVisibleAscii))?;
    cookie_value(value).map(Some)
}

fn trim_non_ascii(bytes: &[u8]) -> &[u8] {
    let keep = |b: &u8| b.is_ascii() && !b.is_ascii_whitespace();
    let start = bytes.iter().position(keep).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(keep).map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// A cookie value as the key: quotes removed, as Django does. A comma may be a join of two
/// `Cookie` lines (a WSGI server joins them with `,`); a backslash in quotes is an escape Django
/// decodes and roomgate does not.
fn cookie_value(value: &str) -> Result<&str, Refusal> {
    if value.contains(',') {
        return Err(Refusal::Ambiguous(Ambiguity::CommaInCookie));
    }
    match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(inner) if inner.contains('\\') => Err(Refusal::Ambiguous(Ambiguity::EscapedCookie)),
        Some(inner) => Ok(inner),
        None => Ok(value),
    }
}

/// The raw value of query parameter `name`, read as Django's `QueryDict` (`parse_qsl`) reads it:
/// pairs split on `&`, names decoded; a name given twice is refused, since Django takes the last
/// and roomgate would have to guess.
fn query_param<'a>(query: &'a str, name: &str) -> Result<Option<&'a str>, Refusal> {
    let mut found = None;
    for pair in query.split('&') {
        let (n, v) = pair.split_once('=').unwrap_or((pair, ""));
        if pair.is_empty() || !decode::query_name_is(n, name) {
            continue;
        }
        if found.is_some() {
            return Err(Refusal::Ambiguous(Ambiguity::TwoParameters));
        }
        found = Some(v);
    }
    Ok(found)
}

/// The room in the path as the backend routes it: the regex runs on the path decoded once, as
/// Django's URL patterns do.
fn path<'a>(re: &Regex, raw: &'a str) -> Read<'a> {
    // One pass finds what needs a closer look; most paths have neither.
    let (percent, dot) = raw.bytes().fold((false, false), |(p, d), b| (p | (b == b'%'), d | (b == b'.')));
    let decoded = match percent {
        true => decode::path(raw)?,
        false => Cow::Borrowed(raw),
    };
    if (percent || dot) && decode::has_dot_segment(&decoded) {
        return Err(Refusal::Ambiguous(Ambiguity::DotSegment));
    }
    Ok(match decoded {
        Cow::Borrowed(path) => capture_room(re, path).map(Cow::Borrowed),
        Cow::Owned(path) => capture_room(re, &path).map(|room| Cow::Owned(room.to_owned())),
    })
}

/// The host name (no port) the backend will see in `Host`. HTTP/1.1 sends it in `Host`; an
/// absolute-form target (`GET http://a.example/`) or HTTP/2's `:authority` carries it in the URI,
/// and roomgate forwards the `Host` header as is, or the `:authority` when there is none. Two
/// that disagree are refused.
fn host<'a, F: Fields + ?Sized>(req: &RequestView<'a, F>, head: &mut Head) -> Result<Option<&'a str>, Refusal> {
    let mut lines = req.headers.values("host");
    let line = lines.next();
    if lines.next().is_some() {
        return Err(Refusal::Ambiguous(Ambiguity::TwoHosts));
    }
    let found = match (req.uri.authority(), line) {
        (authority, Some(line)) => {
            let text = value_text(line).ok_or(Refusal::Bad(KeyProblem::NotVisibleAscii))?;
            if text.contains(',') {
                return Err(Refusal::Ambiguous(Ambiguity::TwoHosts));
            }
            if let Some(authority) = authority
                && !same_host(authority, text, req.uri.scheme_str())
            {
                return Err(Refusal::Ambiguous(Ambiguity::HostMismatch));
            }
            strip_port(text.trim())
        }
        (Some(authority), None) => authority.host(),
        (None, None) => return Ok(None),
    };
    if head.names_in_connection(req.headers, "host") {
        return Err(Refusal::Ambiguous(Ambiguity::HopByHop));
    }
    Ok(Some(found))
}

/// Whether a request's `Host` line (`host`, as it came) names its absolute-form target's
/// authority. RFC 9112 section 3.2.2: the target's authority wins, so a backend that reads `Host`
/// would see another host than roomgate routed by.
pub fn host_agrees(authority: &Authority, host: &[u8], scheme: Option<&str>) -> bool {
    value_text(host).is_some_and(|text| !text.contains(',') && same_host(authority, text, scheme))
}

/// Whether the `Host` header names the target's host and port (ASCII case aside; a missing port
/// is the scheme's default).
fn same_host(authority: &Authority, host: &str, scheme: Option<&str>) -> bool {
    let Ok(other) = host.trim().parse::<Authority>() else { return false };
    let default = match scheme {
        Some("https" | "wss") => 443,
        _ => 80,
    };
    authority.host().eq_ignore_ascii_case(other.host())
        && authority.port_u16().unwrap_or(default) == other.port_u16().unwrap_or(default)
}

pub(super) fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        // IPv6 literal: keep the brackets, drop what follows `]`.
        return authority.find(']').map_or(authority, |end| &authority[..=end]);
    }
    authority.rsplit_once(':').map_or(authority, |(host, _port)| host)
}

pub(super) fn capture_room<'a>(re: &Regex, haystack: &'a str) -> Option<&'a str> {
    re.captures(haystack).and_then(|caps| caps.name("room")).map(|m| m.as_str())
}
