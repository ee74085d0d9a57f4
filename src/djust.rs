//! djust's WebSocket protocol, the parts roomgate speaks: the `connect` frame it sends in the
//! backend's place, the page URL in the client's `mount` frame, and the cheap test for a
//! `live_redirect_mount` (live navigation). Pure functions, unit-tested and fuzzed.

use serde::Deserialize;

/// Every live-navigation message starts with these bytes: client.js builds its messages with
/// `JSON.stringify`, which keeps key order (`type` first) and adds no spaces.
pub const LIVE_REDIRECT_PREFIX: &[u8] = br#"{"type":"live_redirect_mount""#;

/// The first client message did not name a page.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MountError {
    #[error("is not JSON text: {0}")]
    NotJson(String),
    #[error("has type {0:?}, expected \"mount\"")]
    NotMount(String),
    #[error("has no \"url\"")]
    NoUrl,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    url: Option<std::borrow::Cow<'a, str>>,
}

/// The page path in a `mount` (or `live_redirect_mount`) message: what client.js sends as
/// `window.location.pathname`. A full URL is cut down to its path; a query or fragment is dropped.
pub fn page_path(payload: &[u8], expected_type: &str) -> Result<String, MountError> {
    let msg: Message<'_> = serde_json::from_slice(payload).map_err(|e| MountError::NotJson(e.to_string()))?;
    if msg.kind != expected_type {
        return Err(MountError::NotMount(msg.kind.into_owned()));
    }
    let url = msg.url.ok_or(MountError::NoUrl)?;
    Ok(path_of(&url).to_owned())
}

/// `https://host/room/1/?x#y` and `/room/1/?x` both give `/room/1/`.
fn path_of(url: &str) -> &str {
    let rest = match url.find("://") {
        Some(i) => {
            let after = &url[i + 3..];
            after.find('/').map_or("/", |j| &after[j..])
        }
        None => url,
    };
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    &rest[..end]
}

/// True when a client text message starting with `start` may be a live navigation (`start` holds
/// the first bytes of its payload, as many as arrived, up to the prefix's length).
pub fn may_be_live_redirect(start: &[u8]) -> bool {
    let n = start.len().min(LIVE_REDIRECT_PREFIX.len());
    start[..n] == LIVE_REDIRECT_PREFIX[..n]
}

/// The text payload of the `connect` frame roomgate sends in the backend's place. client.js only
/// stores and logs the session id; the backend's own id, sent later, is dropped.
pub fn connect_message(session_id: &str) -> String {
    format!(r#"{{"type":"connect","session_id":"{session_id}"}}"#)
}

/// True when a backend message is djust's `connect` greeting (which the client already had from
/// roomgate).
pub fn is_connect(payload: &[u8]) -> bool {
    payload.starts_with(br#"{"type":"connect""#)
        || serde_json::from_slice::<Message<'_>>(payload).is_ok_and(|m| m.kind == "connect")
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MOUNT: &str = r#"{"type":"mount","view":"app.views.RoomView","params":{},"url":"/room/42/","has_prerendered":true,"client_timezone":"UTC"}"#;

    #[test]
    fn mount_url_is_the_page_path() {
        assert_eq!(page_path(MOUNT.as_bytes(), "mount").as_deref(), Ok("/room/42/"));
        let full = r#"{"type":"mount","url":"https://rooms.test/room/7/?tab=2#x"}"#;
        assert_eq!(page_path(full.as_bytes(), "mount").as_deref(), Ok("/room/7/"));
        let escaped = r#"{"type":"mount","url":"\/room\/a%20b\/"}"#;
        assert_eq!(page_path(escaped.as_bytes(), "mount").as_deref(), Ok("/room/a%20b/"));
    }

    #[test]
    fn other_first_messages_are_errors() {
        assert_eq!(page_path(br#"{"type":"event","url":"/x/"}"#, "mount"), Err(MountError::NotMount("event".into())));
        assert_eq!(page_path(br#"{"type":"mount"}"#, "mount"), Err(MountError::NoUrl));
        assert!(matches!(page_path(b"not json", "mount"), Err(MountError::NotJson(_))));
        assert!(matches!(page_path(br#"{"url":"/room/1/"}"#, "mount"), Err(MountError::NotJson(_))));
    }

    #[test]
    fn live_redirect_prefix_is_checked_on_partial_input() {
        let msg = br#"{"type":"live_redirect_mount","view":"v","params":{},"url":"/room/43/"}"#;
        for n in 0..msg.len() {
            assert!(may_be_live_redirect(&msg[..n]));
        }
        assert!(!may_be_live_redirect(br#"{"type":"event","event":"increment"}"#));
        assert!(!may_be_live_redirect(br#"{"type":"ping"}"#));
        assert_eq!(page_path(msg, "live_redirect_mount").as_deref(), Ok("/room/43/"));
    }

    #[test]
    fn connect_greetings() {
        let ours = connect_message(&session_id());
        assert!(is_connect(ours.as_bytes()));
        assert!(is_connect(br#"{"session_id": "x", "type": "connect"}"#));
        assert!(!is_connect(br#"{"type":"mount"}"#));
    }

    #[test]
    fn session_ids_look_like_uuid4_and_differ() {
        let a = session_id();
        let b = session_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!("89ab".contains(&a[19..20]));
    }

    proptest! {
        #[test]
        fn page_path_never_panics(payload in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = page_path(&payload, "mount");
            let _ = is_connect(&payload);
            let _ = may_be_live_redirect(&payload);
        }

        #[test]
        fn page_path_of_any_url_is_a_prefix_free_path(url in "\\PC{0,80}") {
            let msg = serde_json::json!({"type": "mount", "url": url}).to_string();
            let path = page_path(msg.as_bytes(), "mount").unwrap();
            prop_assert!(!path.contains('?') && !path.contains('#'));
        }
    }
}
