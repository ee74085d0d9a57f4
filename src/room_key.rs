//! Room keys: where a request carries its room (header, cookie, query, path, host, or the page URL
//! of djust's first WebSocket message), what a valid key is, and when a request carries its room
//! ambiguously (docs/keys.md). Pure functions over a borrowed view of the request, so they can be
//! unit-tested and fuzzed.

mod decode;

pub use decode::unquote;
mod read;
pub use read::host_agrees;

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use http::{HeaderMap, HeaderName, Uri};

use crate::fields::Fields;
use regex::Regex;

use self::read::Refusal;

/// Longest room key, in bytes, after percent-decoding.
pub const MAX_KEY_LEN: usize = 128;

/// One place a route looks for its room key.
#[derive(Clone, Debug)]
pub enum KeySource {
    Header(HeaderName),
    Cookie(String),
    Query(String),
    Path(Regex),
    Host(Regex),
    /// The `url` of djust's `mount` frame, the first message on the socket: only a WebSocket
    /// handshake answered by roomgate itself can reach it, so a request never carries it.
    Djust(Regex),
}

/// The kind of a key source, without its argument (for logs and metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    Header,
    Cookie,
    Query,
    Path,
    Host,
    Djust,
}

/// A valid room key: 1 to 128 bytes of visible ASCII, borrowed from the request when no decoding
/// was needed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RoomKey<'a>(Cow<'a, str>);

/// Where in the request the key was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found<'a> {
    pub key: RoomKey<'a>,
    /// Index of the source in the route's `keys` list.
    pub source: usize,
}

/// A borrowed view of the parts of a request that can carry a room key.
#[derive(Debug)]
pub struct RequestView<'a, F: ?Sized = HeaderMap> {
    pub uri: &'a Uri,
    pub headers: &'a F,
}

/// A key was present but is not a valid room key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("room key from {source_desc} {why}")]
pub struct KeyError {
    pub source_desc: String,
    pub why: KeyProblem,
}

/// What is wrong with a room key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyProblem {
    #[error("is longer than 128 bytes")]
    TooLong,
    #[error("has a byte outside visible ASCII (0x21-0x7e)")]
    NotVisibleAscii,
    #[error("has malformed percent-encoding")]
    BadPercentEncoding,
    #[error("is empty")]
    Empty,
}

/// How a request carries its room more than once, or in a form the backend may read otherwise:
/// it is refused (400) and never placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Ambiguity {
    #[error("the parameter is given twice")]
    TwoParameters,
    #[error("the header is sent twice, or as a comma-separated list")]
    TwoHeaders,
    #[error("a header spelt with `_` for `-` is the same header to CGI-style backends")]
    UnderscoreTwin,
    #[error("`Connection` names the header that carries the key, so the backend would not see it")]
    HopByHop,
    #[error("the cookie is sent twice")]
    TwoCookies,
    #[error("the cookie's value has a comma, which is how two Cookie lines are joined")]
    CommaInCookie,
    #[error("the cookie's quoted value has a backslash escape")]
    EscapedCookie,
    #[error("the cookie's name has bytes outside ASCII around it, which the backend may strip as spaces")]
    NonAsciiCookie,
    #[error("the request has two Host headers, or a list in one")]
    TwoHosts,
    #[error("the request target's authority is not the Host header")]
    HostMismatch,
    #[error("the path has an encoded `/` (%2F)")]
    EncodedSlash,
    #[error("the path has a `.` or `..` segment")]
    DotSegment,
}

/// Why [`extract`] found no key in a request that carries one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExtractError {
    /// The key is there, once, but it is not a valid key.
    #[error(transparent)]
    Bad(#[from] KeyError),
    /// The request carries its room more than once, or in a form the backend may read otherwise.
    #[error("{source_desc}: {why}")]
    Ambiguous { source_desc: String, why: Ambiguity },
}

/// A key source in the config file did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid key source {text:?}: {why}")]
pub struct SourceParseError {
    text: String,
    why: String,
}

/// Looks for the room key in each source in order; the first source that has one decides.
///
/// `Ok(None)`: no source carried a key. `Err`: the first source that carried something carried an
/// invalid key, or carried it ambiguously (twice, or where the backend would read it otherwise);
/// it is never placed, and later sources are not consulted, so a bad key cannot be silently
/// replaced by another one.
///
/// Every field a `header:` or `host:` source reads must be visible ASCII, all of its lines,
/// whichever source finds the key: a value one reader skips and another reads is how two
/// readers come to two rooms. (A `cookie:` source reads every `Cookie` line byte by byte, pair by
/// pair, and refuses bytes outside ASCII next to its name or in its value; other cookies' bytes
/// are the app's, as browsers send them.)
pub fn extract<'a, F: Fields + ?Sized>(
    sources: &[KeySource],
    req: &RequestView<'a, F>,
) -> Result<Option<Found<'a>>, ExtractError> {
    for source in sources {
        if let Some(name) = source.field()
            && !req.headers.values(name).all(crate::fields::is_visible)
        {
            let why = KeyProblem::NotVisibleAscii;
            return Err(KeyError { source_desc: source.to_string(), why }.into());
        }
    }
    let mut head = read::Head::default();
    for (index, source) in sources.iter().enumerate() {
        let key = match read::key(source, req, &mut head) {
            Ok(Some(key)) => key,
            Ok(None) => continue,
            Err(Refusal::Bad(why)) => return Err(KeyError { source_desc: source.to_string(), why }.into()),
            Err(Refusal::Ambiguous(why)) => {
                return Err(ExtractError::Ambiguous { source_desc: source.to_string(), why });
            }
        };
        let key = match source.kind() {
            // Host names are case-insensitive: `Game-7.example.com` is room `game-7`.
            SourceKind::Host if key.bytes().any(|b| b.is_ascii_uppercase()) => Cow::Owned(key.to_ascii_lowercase()),
            _ => key,
        };
        let key = validate(key).map_err(|why| KeyError { source_desc: source.to_string(), why })?;
        return Ok(Some(Found { key: RoomKey(key), source: index }));
    }
    Ok(None)
}

/// Checks an already-decoded key.
pub fn validate(key: Cow<'_, str>) -> Result<Cow<'_, str>, KeyProblem> {
    if key.is_empty() {
        return Err(KeyProblem::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyProblem::TooLong);
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(KeyProblem::NotVisibleAscii);
    }
    Ok(key)
}

// === impl KeySource ===

impl KeySource {
    /// The header field the source reads as one value, if it reads one.
    pub fn field(&self) -> Option<&str> {
        match self {
            KeySource::Header(name) => Some(name.as_str()),
            KeySource::Host(_) => Some("host"),
            KeySource::Cookie(_) | KeySource::Query(_) | KeySource::Path(_) | KeySource::Djust(_) => None,
        }
    }
}

impl KeySource {
    pub fn kind(&self) -> SourceKind {
        match self {
            KeySource::Header(_) => SourceKind::Header,
            KeySource::Cookie(_) => SourceKind::Cookie,
            KeySource::Query(_) => SourceKind::Query,
            KeySource::Path(_) => SourceKind::Path,
            KeySource::Host(_) => SourceKind::Host,
            KeySource::Djust(_) => SourceKind::Djust,
        }
    }
}

impl FromStr for KeySource {
    type Err = SourceParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| SourceParseError { text: text.to_owned(), why: why.to_owned() };
        let (kind, arg) = text
            .split_once(':')
            .ok_or_else(|| err("expected KIND:ARG, KIND one of header, cookie, query, path, host, djust"))?;
        if arg.is_empty() {
            return Err(err("the part after ':' is empty"));
        }
        match kind {
            "header" => HeaderName::from_str(arg).map(KeySource::Header).map_err(|_| err("not a valid header name")),
            "cookie" if is_cookie_name(arg) => Ok(KeySource::Cookie(arg.to_owned())),
            "cookie" => Err(err("not a valid cookie name")),
            "query" => Ok(KeySource::Query(arg.to_owned())),
            "path" => room_regex(arg).map(KeySource::Path).map_err(|why| err(&why)),
            "host" => room_regex(arg).map(KeySource::Host).map_err(|why| err(&why)),
            "djust" => room_regex(arg).map(KeySource::Djust).map_err(|why| err(&why)),
            _ => Err(err("unknown kind, expected header, cookie, query, path, host or djust")),
        }
    }
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Header(name) => write!(f, "header:{name}"),
            KeySource::Cookie(name) => write!(f, "cookie:{name}"),
            KeySource::Query(name) => write!(f, "query:{name}"),
            KeySource::Path(re) => write!(f, "path:{re}"),
            KeySource::Host(re) => write!(f, "host:{re}"),
            KeySource::Djust(re) => write!(f, "djust:{re}"),
        }
    }
}

fn room_regex(pattern: &str) -> Result<Regex, String> {
    let re = Regex::new(pattern).map_err(|e| format!("bad regex: {e}"))?;
    if !re.capture_names().any(|name| name == Some("room")) {
        return Err("the regex has no named group `room`, write (?P<room>...)".to_owned());
    }
    Ok(re)
}

/// A cookie name as RFC 6265 allows it: an RFC 7230 token (visible ASCII without separators).
/// The one check of every cookie name in the config (key sources and `affinity_cookie`).
pub fn is_cookie_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The raw value of cookie `name` in the request's Cookie headers, the first if there are
/// several: for the affinity cookie and the demo. A key is read by [`extract`], which refuses two.
pub fn cookie_value<'a, F: Fields + ?Sized>(headers: &'a F, name: &str) -> Option<&'a str> {
    headers.values("cookie").filter_map(crate::fields::text).flat_map(|line| line.split(';')).find_map(|pair| {
        let (n, v) = pair.split_once('=')?;
        (n.trim() == name).then(|| strip_quotes(v.trim()))
    })
}

fn strip_quotes(v: &str) -> &str {
    v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v)
}

// === impl RoomKey ===

impl RoomKey<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Display for RoomKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Encodes a key for a cookie value: the characters a cookie value may not hold, and `%` itself,
/// are percent-encoded; the cookie key source decodes them back.
pub fn encode_cookie_value(key: &str) -> Cow<'_, str> {
    const SPECIAL: &[u8] = b"%\";,\\";
    if !key.bytes().any(|b| SPECIAL.contains(&b)) {
        return Cow::Borrowed(key);
    }
    let mut out = String::with_capacity(key.len() + 8);
    for b in key.bytes() {
        if SPECIAL.contains(&b) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests;
