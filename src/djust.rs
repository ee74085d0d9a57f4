//! djust's WebSocket protocol, the parts roomgate speaks: the `connect` frame it sends in the
//! backend's place, and what a client message does to the page: which messages mount a page (and
//! so a room), read the way djust itself reads them. Pure functions, unit-tested and fuzzed.
//!
//! djust 1.2.6 decodes a text message with `json.loads` and a binary one with msgpack, then
//! dispatches on its `type`. Four types change what the socket shows:
//! - `mount` and `live_redirect_mount` mount the view of their `url`;
//! - `mount_batch` mounts one view per entry of `views`, each with its `url`;
//! - `url_change` tells the view in place that the page moved to `uri`.
//!
//! The room is in the page: djust validates the URL ([`mount_page`], as its
//! `validate_mount_url` does), decodes it once and resolves it with Django's URL patterns. A
//! `djust:` source's regex is therefore matched on that same decoded text ([`room_of_page`]).

use std::borrow::Cow;
use std::fmt;

use memchr::memmem;
use regex::Regex;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::room_key::{self, KeyProblem, unquote};

/// What a client message does to the page the socket shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing: an event, a ping, an upload chunk.
    None,
    /// It mounts (or moves the socket to) these pages.
    Pages(Vec<Page>),
    /// It may change the page, but roomgate cannot read it exactly as djust would (duplicate keys,
    /// JSON djust accepts and serde does not, msgpack): it is never passed on.
    Unreadable(String),
}

/// A page a message mounts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// The page as djust reads it: validated and percent-decoded once.
    pub path: String,
    /// What the message's `params` name `room`, if anything. djust hands `params` to the view's
    /// `mount()` as keyword arguments, next to the URL's: a view that takes `room` would read it
    /// from there when the URL has none. Non-string values as JSON text.
    pub params_room: Option<String>,
}

impl Page {
    fn of(url: Option<&Value>, params: Option<&Value>) -> Page {
        let params_room = params.and_then(|p| p.get("room")).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        Page { path: mount_page(url), params_room }
    }
}

/// Message types that change the page.
const MOUNT: &str = "mount";
const LIVE_REDIRECT_MOUNT: &str = "live_redirect_mount";
const MOUNT_BATCH: &str = "mount_batch";
const URL_CHANGE: &str = "url_change";

/// True when a text message may change the page: its bytes hold the name of one of the four
/// types (`mount` is in three of them), or a `\u` escape, the only way JSON can spell a letter
/// of them otherwise. Every other message is passed on without being parsed: the fast path of
/// ordinary events.
pub fn may_change_page(payload: &[u8]) -> bool {
    memmem::find(payload, b"mount").is_some()
        || memmem::find(payload, b"url_change").is_some()
        || memmem::find(payload, b"\\u").is_some()
}

/// What a text message does to the page, read as djust reads it.
pub fn text_effect(payload: &[u8]) -> Effect {
    if !may_change_page(payload) {
        return Effect::None;
    }
    let value = match serde_json::from_slice::<Strict>(payload) {
        Ok(Strict(value)) => value,
        Err(e) => return Effect::Unreadable(format!("not JSON roomgate can read exactly: {e}")),
    };
    // djust calls `data.get("type")`: anything but an object fails there, and does nothing.
    let Value::Object(msg) = value else { return Effect::None };
    let Some(Value::String(kind)) = msg.get("type") else { return Effect::None };
    match kind.as_str() {
        MOUNT | LIVE_REDIRECT_MOUNT => Effect::Pages(vec![Page::of(msg.get("url"), msg.get("params"))]),
        MOUNT_BATCH => match msg.get("views") {
            // Entries that are not objects are skipped by djust (reported as failed).
            Some(Value::Array(views)) => Effect::Pages(
                views.iter().filter_map(Value::as_object).map(|v| Page::of(v.get("url"), v.get("params"))).collect(),
            ),
            _ => Effect::None,
        },
        URL_CHANGE => match msg.get("uri") {
            Some(Value::String(uri)) => {
                let page = Page { path: unquote(path_of(uri)), ..Page::of(None, msg.get("params")) };
                Effect::Pages(vec![page])
            }
            _ => Effect::None,
        },
        _ => Effect::None,
    }
}

/// What a binary message does to the page. djust decodes a binary message with msgpack, unless
/// it is an upload chunk (its first byte 1, 2 or 3: those never reach the decoder). Only a
/// msgpack map can carry a `type`; one that holds the name of a page-changing type is not read
/// further (client.js never sends one) and counts as unreadable.
pub fn binary_effect(payload: &[u8]) -> Effect {
    let is_map = matches!(payload.first(), Some(0x80..=0x8f | 0xde | 0xdf));
    if is_map && (memmem::find(payload, b"mount").is_some() || memmem::find(payload, b"url_change").is_some()) {
        return Effect::Unreadable("a msgpack message that may change the page".to_owned());
    }
    Effect::None
}

/// True when a binary message starting with `first` can never change the page (an upload chunk
/// or anything else but a msgpack map), whatever follows: it is relayed as it arrives.
pub fn binary_is_inert(first: u8) -> bool {
    !matches!(first, 0x80..=0x8f | 0xde | 0xdf)
}

/// The page djust mounts for a message's `url`, percent-decoded once as Django resolves it.
/// djust's `validate_mount_url` turns a missing, relative, absolute or traversing URL into `/`;
/// this follows it rule for rule, and may reject less than it does (a URL it keeps and this
/// rejects could put a room where roomgate sees none) but never more.
pub fn mount_page(url: Option<&Value>) -> String {
    match url {
        Some(Value::String(url)) if djust_keeps(url) => unquote(url),
        _ => "/".to_owned(),
    }
}

/// djust's `validate_mount_url` (djust/security/mount.py): `true` when it returns the URL as it
/// is, `false` when it falls back to `/`.
fn djust_keeps(url: &str) -> bool {
    if url.is_empty() || url.contains(['\r', '\n']) || !url.starts_with('/') {
        return false;
    }
    // `urlparse` finds a network location after a leading `//`.
    if let Some(rest) = url.strip_prefix("//") {
        let netloc_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if netloc_end > 0 {
            return false;
        }
    }
    let path = url_path(url);
    let decoded = unquote(path);
    if decoded.contains('\\') || decoded.chars().any(|c| (c as u32) < 0x20) {
        return false;
    }
    !decoded.split('/').any(|segment| segment == "..")
}

/// `urlparse(url).path`: before the query and fragment, and without the `;params` of the last
/// segment.
fn url_path(url: &str) -> &str {
    let path = path_of(url);
    let last = path.rfind('/').map_or(0, |i| i + 1);
    match path[last..].find(';') {
        Some(i) => &path[..last + i],
        None => path,
    }
}

/// The part of a URI before its query or fragment.
fn path_of(uri: &str) -> &str {
    &uri[..uri.find(['?', '#']).unwrap_or(uri.len())]
}

/// The room of a page (already decoded, see [`mount_page`]) by a `djust:` source's regex: the
/// named group `room`, as Django's URL pattern would capture it. `Ok(None)`: the page has no room;
/// `Err`: it has one that is not a valid key (never placed).
pub fn room_of_page(re: &Regex, page: &str) -> Result<Option<String>, KeyProblem> {
    let Some(raw) = re.captures(page).and_then(|c| c.name("room")) else { return Ok(None) };
    room_key::validate(Cow::Borrowed(raw.as_str())).map(|key| Some(key.into_owned()))
}

/// The one room of a set of pages (a `mount_batch` may mount several): `Ok(None)` when none has a
/// room; `Err` when they disagree, a room is invalid, or a page's `params` name another room than
/// its URL.
pub fn room_of_pages(re: &Regex, pages: &[Page]) -> Result<Option<String>, PagesError> {
    let mut room: Option<Option<String>> = None;
    for page in pages {
        let this = room_of_page(re, &page.path).map_err(|why| PagesError::BadKey(page.path.clone(), why))?;
        if let Some(claimed) = &page.params_room
            && this.as_ref() != Some(claimed)
        {
            return Err(PagesError::ParamsRoom { page: page.path.clone(), claimed: claimed.clone() });
        }
        match &room {
            None => room = Some(this),
            Some(seen) if *seen == this => {}
            Some(_) => return Err(PagesError::TwoRooms),
        }
    }
    Ok(room.flatten())
}

/// Why the pages of a message name no single room.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PagesError {
    #[error("page {0:?}: the room {1}")]
    BadKey(String, KeyProblem),
    #[error("the pages belong to different rooms")]
    TwoRooms,
    #[error("page {page:?}: its params name room {claimed:?}, which is not the page's")]
    ParamsRoom { page: String, claimed: String },
}

/// The text payload of the `connect` frame roomgate sends in the backend's place. client.js only
/// stores and logs the session id; the backend's own id, sent later, is dropped.
pub fn connect_message(session_id: &str) -> String {
    format!(r#"{{"type":"connect","session_id":"{session_id}"}}"#)
}

/// True when a backend message is djust's `connect` greeting (which the client already had from
/// roomgate).
pub fn is_connect(payload: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Greeting<'a> {
        #[serde(rename = "type", borrow)]
        kind: Cow<'a, str>,
    }
    payload.starts_with(br#"{"type":"connect""#)
        || serde_json::from_slice::<Greeting<'_>>(payload).is_ok_and(|m| m.kind == "connect")
}

/// A random session id in UUID form (version 4 layout), like the one djust sends.
pub fn session_id() -> String {
    use std::hash::{BuildHasher, RandomState};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let state = RandomState::new();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let a = state.hash_one((n, 1u8));
    let b = state.hash_one((n, 2u8));
    let v = (u128::from(a) << 64) | u128::from(b);
    let v = (v & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let h = format!("{v:032x}");
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// A JSON value read strictly: a key twice in one object is an error (Python keeps the last
/// one, so two `url`s would mean one thing to roomgate and another to djust).
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            let Strict(value) = map.next_value()?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests;
