use super::*;
use proptest::prelude::*;

const MOUNT_MSG: &str = r#"{"type":"mount","view":"app.views.RoomView","params":{},"url":"/room/42/","has_prerendered":true,"client_timezone":"UTC"}"#;

fn room_re() -> Regex {
    Regex::new("^/room/(?P<room>[^/]+)/").unwrap()
}

fn pages(payload: &str) -> Vec<String> {
    found(payload).into_iter().map(|p| p.path).collect()
}

fn found(payload: &str) -> Vec<Page> {
    match text_effect(payload.as_bytes()) {
        Effect::Pages(p) => p,
        other => panic!("{payload}: {other:?}"),
    }
}

#[test]
fn the_four_page_changing_types_and_their_pages() {
    assert_eq!(pages(MOUNT_MSG), ["/room/42/"]);
    assert_eq!(pages(r#"{"type":"live_redirect_mount","view":"v","params":{},"url":"/room/43/"}"#), ["/room/43/"]);
    assert_eq!(
        pages(r#"{"type":"mount_batch","views":[{"view":"a","url":"/room/1/"},7,{"url":"/room/2/"}]}"#),
        ["/room/1/", "/room/2/"]
    );
    assert_eq!(pages(r#"{"type":"url_change","params":{},"uri":"/room/9/?tab=2"}"#), ["/room/9/"]);
}

#[test]
fn spacing_key_order_and_escapes_do_not_hide_a_navigation() {
    for msg in [
        r#"{"type": "live_redirect_mount", "view": "v", "url": "/room/g2/"}"#,
        r#"{ "url" : "/room/g2/" , "type" : "live_redirect_mount" }"#,
        "{\n\t\"type\":\"live_redirect_mount\",\r\n\"url\":\"/room/g2/\"}",
        r#"{"type":"live_redirect_\u006dount","url":"/room/g2/"}"#,
        r#"{"\u0074ype":"live_redirect_mount","url":"\/room\/g2\/"}"#,
        r#"{"type":"\u006C\u0069ve_redirect_mount","url":"/room/\u0067\u0032/"}"#,
    ] {
        assert_eq!(pages(msg), ["/room/g2/"], "{msg}");
    }
}

#[test]
fn ordinary_messages_are_not_parsed() {
    for msg in [
        r#"{"type":"event","event":"increment","params":{}}"#,
        r#"{"type":"ping"}"#,
        "not json at all",
        r#"{"type":"event","event":"chat","params":{"text":"climbing a mount"}}"#,
        r#"{"type":"mountain"}"#,
        r#"["mount","/room/1/"]"#,
        r#"{"type":7,"url":"/room/1/"}"#,
    ] {
        assert_eq!(text_effect(msg.as_bytes()), Effect::None, "{msg}");
    }
    assert!(!may_change_page(br#"{"type":"event","event":"increment","params":{}}"#));
}

#[test]
fn duplicate_keys_and_json_serde_rejects_are_unreadable() {
    for msg in [
        r#"{"type":"event","type":"mount","url":"/room/1/"}"#,
        r#"{"type":"mount","url":"/lobby/","url":"/room/g2/"}"#,
        r#"{"type":"mount_batch","views":[{"url":"/a/","url":"/room/1/"}]}"#,
        r#"{"type":"mount","url":"/room/1/","x":NaN}"#,
        r#"{"type":"mount","url":"/room/\ud800/"}"#,
    ] {
        assert!(matches!(text_effect(msg.as_bytes()), Effect::Unreadable(_)), "{msg}");
    }
}

#[test]
fn urls_djust_would_not_keep_become_the_root_page() {
    for url in
        ["", "room/1/", "//evil.example/room/1/", "/room/../room/1/", "/%2e%2e/room/1/", "/room/1/\\x", "/a/%00/"]
    {
        let msg = serde_json::json!({"type": "mount", "url": url}).to_string();
        assert_eq!(pages(&msg), ["/"], "{url:?}");
    }
    assert_eq!(pages(r#"{"type":"mount"}"#), ["/"], "djust's default url");
    assert_eq!(pages(r#"{"type":"mount","url":null}"#), ["/"]);
    // As `urlparse` splits them: the `;params` of the last segment are not part of the path, a
    // `..` before them is a traversal; a `..` in the query is not; an empty network location is
    // no network location.
    assert_eq!(pages(r#"{"type":"mount","url":"/room/1/..;p"}"#), ["/"]);
    assert_eq!(pages(r#"{"type":"mount","url":"/a;../room/1/"}"#), ["/a;../room/1/"]);
    assert_eq!(pages(r#"{"type":"mount","url":"/room/1/?x=%2e%2e"}"#), ["/room/1/?x=.."]);
    assert_eq!(pages(r#"{"type":"mount","url":"///room/1/"}"#), ["///room/1/"]);
}

#[test]
fn the_room_is_read_from_the_page_django_resolves() {
    let re = room_re();
    let room = |url: &str| {
        let msg = serde_json::json!({"type": "mount", "url": url}).to_string();
        room_of_pages(&re, &found(&msg))
    };
    assert_eq!(room("/room/42/"), Ok(Some("42".into())));
    assert_eq!(room("/%72oom/g2/"), Ok(Some("g2".into())), "Django decodes before it matches");
    assert_eq!(room("/room/%67%32/"), Ok(Some("g2".into())));
    assert_eq!(room("/room/a%2Fb/"), Ok(Some("a".into())), "an encoded slash is a slash to Django");
    assert_eq!(room("/room/%2541/"), Ok(Some("%41".into())), "decoded once, not twice");
    assert_eq!(room("/lobby/"), Ok(None));
    assert!(matches!(room("/room/a%20b/"), Err(PagesError::BadKey(..))));
    let batch = r#"{"type":"mount_batch","views":[{"url":"/room/1/"},{"url":"/room/2/"}]}"#;
    assert_eq!(room_of_pages(&re, &found(batch)), Err(PagesError::TwoRooms));
    let batch = r#"{"type":"mount_batch","views":[{"url":"/room/1/"},{"url":"/room/1/?x"}]}"#;
    assert_eq!(room_of_pages(&re, &found(batch)), Ok(Some("1".into())));
}

#[test]
fn params_may_not_name_another_room_than_the_url() {
    let re = room_re();
    let room = |msg: &str| room_of_pages(&re, &found(msg));
    assert_eq!(room(r#"{"type":"mount","url":"/room/7/","params":{"room":"7"}}"#), Ok(Some("7".into())));
    assert_eq!(room(r#"{"type":"mount","url":"/room/7/","params":{"tab":"2"}}"#), Ok(Some("7".into())));
    for msg in [
        r#"{"type":"mount","url":"/lobby/","params":{"room":"7"}}"#,
        r#"{"type":"mount","url":"/room/8/","params":{"room":"7"}}"#,
        r#"{"type":"mount","url":"/room/7/","params":{"room":8}}"#,
        r#"{"type":"mount_batch","views":[{"url":"/room/7/","params":{"room":"8"}}]}"#,
        r#"{"type":"url_change","uri":"/room/7/","params":{"room":"8"}}"#,
    ] {
        assert!(matches!(room(msg), Err(PagesError::ParamsRoom { .. })), "{msg}");
    }
}

#[test]
fn unquote_is_pythons() {
    assert_eq!(unquote("/a%20b/%zz/%4"), "/a b/%zz/%4");
    assert_eq!(unquote("%C3%A9"), "é");
    assert_eq!(unquote("%FF"), "\u{fffd}");
    assert_eq!(unquote("plain"), "plain");
}

#[test]
fn binary_messages() {
    assert!(binary_is_inert(0x01), "upload chunk");
    assert!(binary_is_inert(0x93), "a msgpack array");
    assert!(!binary_is_inert(0x82), "a msgpack map");
    // msgpack {"type": "mount", "url": "/room/1/"}
    let mut map = vec![0x82, 0xa4];
    map.extend(b"type");
    map.push(0xa5);
    map.extend(b"mount");
    assert!(matches!(binary_effect(&map), Effect::Unreadable(_)));
    assert_eq!(binary_effect(&[0x81, 0xa4, b't', b'y', b'p', b'e', 0xa4, b'p', b'i', b'n', b'g']), Effect::None);
    let mut upload = vec![0x01];
    upload.extend(b"mount mount mount mount");
    assert_eq!(binary_effect(&upload), Effect::None);
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

/// A JSON string literal for `s`, each character written plainly or as a `\u` escape.
fn json_string(s: &str, escape: &[bool]) -> String {
    let mut out = String::from("\"");
    for (i, c) in s.chars().enumerate() {
        if escape.get(i % escape.len().max(1)).copied().unwrap_or(false) || c == '"' || c == '\\' || (c as u32) < 0x20 {
            for unit in c.encode_utf16(&mut [0; 2]) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out.push('"');
    out
}

/// A message with these members, in this order, with this much whitespace, escaping characters
/// where `escape` says.
fn render(members: &[(String, Value)], ws: &str, escape: &[bool]) -> String {
    let body: Vec<String> = members
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => json_string(s, escape),
                other => other.to_string(),
            };
            format!("{ws}{}{ws}:{ws}{v}{ws}", json_string(k, escape))
        })
        .collect();
    format!("{{{}}}", body.join(","))
}

proptest! {
    #[test]
    fn never_panics(payload in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = text_effect(&payload);
        let _ = binary_effect(&payload);
        let _ = mount_page(Some(&Value::String(String::from_utf8_lossy(&payload).into_owned())));
    }

    /// Whatever its spacing, key order and escapes, a page-changing message is found and its page
    /// read as djust reads it; any other type is not a page change.
    #[test]
    fn any_shape_of_a_message_is_read_as_djust_reads_it(
        kind in prop_oneof![Just("mount"), Just("live_redirect_mount"), Just("event"), Just("ping"), Just("mount_batch_x")],
        room in "[a-z0-9]{1,8}",
        extra in proptest::collection::vec(("[a-z_]{1,6}", "[ -~]{0,12}"), 0..4),
        order in any::<proptest::sample::Index>(),
        ws in prop_oneof![Just(""), Just(" "), Just("\n\t "), Just("  ")],
        escape in proptest::collection::vec(any::<bool>(), 1..5),
    ) {
        let url = format!("/room/{room}/");
        let mut members: Vec<(String, Value)> = extra
            .into_iter()
            .filter(|(k, _)| k != "type" && k != "url")
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        members.sort_by(|a, b| a.0.cmp(&b.0));
        members.dedup_by(|a, b| a.0 == b.0);
        let at = order.index(members.len() + 1);
        members.insert(at, ("type".into(), Value::String(kind.into())));
        members.push(("url".into(), Value::String(url.clone())));
        let msg = render(&members, ws, &escape);
        let effect = text_effect(msg.as_bytes());
        if kind == "mount" || kind == "live_redirect_mount" {
            let page = Page { path: url.clone(), params_room: None };
            prop_assert_eq!(&effect, &Effect::Pages(vec![page.clone()]), "{}", msg);
            prop_assert_eq!(room_of_pages(&room_re(), &[page]), Ok(Some(room)));
        } else {
            prop_assert_eq!(&effect, &Effect::None, "{}", msg);
        }
    }

    #[test]
    fn any_url_gives_a_page_djust_would_resolve(url in "\\PC{0,80}") {
        let msg = serde_json::json!({"type": "mount", "url": url}).to_string();
        let Effect::Pages(pages) = text_effect(msg.as_bytes()) else { panic!("{msg}") };
        prop_assert_eq!(pages.len(), 1);
        prop_assert!(pages[0].path.starts_with('/'));
    }
}
