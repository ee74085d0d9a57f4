//! The hand-off tests' `RoomBackend` on its own, without roomgate: rooms, logs, export and import.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::rooms::{HANDOFF_PATH, RoomBackend};
use common::*;
use futures_util::SinkExt;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::Full;
use tokio_tungstenite::tungstenite::Message;

/// The next text message of `ws`.
async fn text(ws: &mut Ws) -> String {
    match next(ws).await {
        Message::Text(t) => t.as_str().to_owned(),
        other => panic!("expected text, got {other:?}"),
    }
}

/// Joins `room` (as written in the query) on `b`; returns the socket and its hello.
async fn join(b: &RoomBackend, room: &str) -> (Ws, String) {
    let mut ws = ws_connect(&b.ws_url(&format!("/live?room={room}")), &[]).await;
    let hello = text(&mut ws).await;
    (ws, hello)
}

/// Sends `msg` and reads until its own broadcast comes back; returns the line.
async fn say(ws: &mut Ws, msg: &str) -> String {
    ws.send(Message::text(msg)).await.unwrap();
    for _ in 0..1000 {
        let line = text(ws).await;
        if line.split_once(':').is_some_and(|(_, m)| m == msg) {
            return line;
        }
    }
    panic!("{msg} not broadcast back");
}

/// The headers roomgate sends, with a token when given.
fn handoff_headers(key: &str, token: Option<&str>) -> Vec<(String, String)> {
    let mut h = vec![
        ("Roomgate-Room".to_owned(), key.to_owned()),
        ("Roomgate-From".to_owned(), "b1".to_owned()),
        ("Roomgate-To".to_owned(), "b2".to_owned()),
        ("Roomgate-Move".to_owned(), "move-1".to_owned()),
    ];
    if let Some(t) = token {
        h.push(("Authorization".to_owned(), format!("Bearer {t}")));
    }
    h
}

/// `POST {path}/{encoded}/export` on `b`.
async fn export(b: &RoomBackend, encoded: &str, headers: &[(String, String)]) -> (StatusCode, HeaderMap, String) {
    let mut req = Request::post(b.url(&format!("{HANDOFF_PATH}/{encoded}/export")));
    for (k, v) in headers {
        req = req.header(k, v);
    }
    send(&http_client(), req.body(Full::default()).unwrap()).await
}

/// `PUT {path}/{encoded}` on `b` with a JSON body.
async fn import(b: &RoomBackend, encoded: &str, body: &str, headers: &[(String, String)]) -> StatusCode {
    let mut req = Request::put(b.url(&format!("{HANDOFF_PATH}/{encoded}"))).header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(k, v);
    }
    send(&http_client(), req.body(Full::new(Bytes::from(body.to_owned()))).unwrap()).await.0
}

async fn count(b: &RoomBackend, room: &str) -> String {
    let (status, headers, body) = get(&http_client(), &b.url(&format!("/count?room={room}")), &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["x-backend"], b.id.as_str());
    body
}

#[tokio::test]
async fn members_of_a_room_see_each_others_messages_in_order() {
    let b = RoomBackend::start("b1").await;
    let (mut x, hello_x) = join(&b, "r1").await;
    let (mut y, hello_y) = join(&b, "r1").await;
    let (mut other, hello_other) = join(&b, "r2").await;
    assert_eq!((hello_x.as_str(), hello_y.as_str(), hello_other.as_str()), ("hello:b1:0", "hello:b1:0", "hello:b1:0"));
    for m in ["x0", "x1", "x2"] {
        x.send(Message::text(m)).await.unwrap();
    }
    for m in ["y0", "y1"] {
        y.send(Message::text(m)).await.unwrap();
    }
    let mut seen_x = Vec::new();
    let mut seen_y = Vec::new();
    for _ in 0..5 {
        seen_x.push(text(&mut x).await);
        seen_y.push(text(&mut y).await);
    }
    assert_eq!(seen_x, seen_y, "both members see one order");
    let indices: Vec<&str> = seen_x.iter().map(|l| l.split_once(':').unwrap().0).collect();
    assert_eq!(indices, ["0", "1", "2", "3", "4"]);
    let of_x: Vec<&str> = seen_x.iter().map(|l| l.split_once(':').unwrap().1).filter(|m| m.starts_with('x')).collect();
    assert_eq!(of_x, ["x0", "x1", "x2"], "one member's messages keep their order");
    // `log` answers the member alone and is not appended.
    x.send(Message::text("log")).await.unwrap();
    let log: Vec<String> = serde_json::from_str(text(&mut x).await.strip_prefix("log:").unwrap()).unwrap();
    assert_eq!(log, seen_x.iter().map(|l| l.split_once(':').unwrap().1.to_owned()).collect::<Vec<_>>());
    assert_eq!(count(&b, "r1").await, "5");
    // The other room saw nothing and is empty.
    assert_eq!(say(&mut other, "alone").await, "0:alone");
    assert_eq!(count(&b, "r2").await, "1");
    let members = b.memberships();
    assert_eq!(members.iter().filter(|m| m.room == "r1" && m.left.is_none()).count(), 2);
    assert_eq!(members.iter().filter(|m| m.room == "r2").count(), 1);
}

#[tokio::test]
async fn export_then_import_carries_the_log_to_another_backend() {
    let (b1, b2) = (RoomBackend::start("b1").await, RoomBackend::start("b2").await);
    let (mut ws, _) = join(&b1, "r").await;
    for m in ["m0", "m1", "m2"] {
        say(&mut ws, m).await;
    }
    let headers = handoff_headers("r", None);
    let (status, resp_headers, body) = export(&b1, "r", &headers).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(resp_headers["content-type"], "application/json");
    assert_eq!(body, r#"["m0","m1","m2"]"#);
    assert_eq!(import(&b2, "r", &body, &headers).await, StatusCode::NO_CONTENT);
    // The export kept the state; the import broadcast nothing, and the new owner has it.
    assert_eq!(b1.log("r").unwrap().len(), 3);
    let (mut ws2, hello) = join(&b2, "r").await;
    assert_eq!(hello, "hello:b2:3");
    ws2.send(Message::text("log")).await.unwrap();
    assert_eq!(text(&mut ws2).await, r#"log:["m0","m1","m2"]"#);
    assert_eq!(say(&mut ws2, "m3").await, "3:m3");
    // A room this backend never saw: nothing to hand over.
    let (status, _, body) = export(&b2, "unknown", &headers).await;
    assert_eq!((status, body.as_str()), (StatusCode::NO_CONTENT, ""));
    // Every call is recorded, headers included.
    let calls = b1.calls();
    assert_eq!(calls.len(), 1);
    let c = &calls[0];
    assert_eq!((c.method.as_str(), c.key.as_str(), c.path.as_str()), ("POST", "r", "/.roomgate/rooms/r/export"));
    assert_eq!((c.room.as_deref(), c.from.as_deref(), c.to.as_deref()), (Some("r"), Some("b1"), Some("b2")));
    assert_eq!((c.move_id.as_deref(), c.authorization.as_deref(), c.body_len), (Some("move-1"), None, 0));
    let c = &b2.wait_calls(2).await[0];
    assert_eq!((c.method.as_str(), c.key.as_str(), c.body_len), ("PUT", "r", r#"["m0","m1","m2"]"#.len()));
    assert_eq!(c.content_type.as_deref(), Some("application/json"));
    assert!(c.at <= Instant::now());
}

#[tokio::test]
async fn a_token_is_enforced_on_both_calls() {
    let b = RoomBackend::start("b1").await;
    b.set_log("r", vec!["a".into()]);
    b.set_token(Some("s3cret".into()));
    assert_eq!(export(&b, "r", &handoff_headers("r", None)).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(export(&b, "r", &handoff_headers("r", Some("wrong"))).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(import(&b, "r", r#"["b"]"#, &handoff_headers("r", None)).await, StatusCode::UNAUTHORIZED);
    assert_eq!(b.log("r").unwrap(), ["a"], "a refused import stores nothing");
    let good = handoff_headers("r", Some("s3cret"));
    assert_eq!(export(&b, "r", &good).await.2, r#"["a"]"#);
    assert_eq!(import(&b, "r", r#"["b"]"#, &good).await, StatusCode::NO_CONTENT);
    assert_eq!(b.log("r").unwrap(), ["b"]);
    let auth: Vec<Option<String>> = b.calls().into_iter().map(|c| c.authorization).collect();
    assert_eq!(auth[1].as_deref(), Some("Bearer wrong"));
    assert_eq!(auth[3].as_deref(), Some("Bearer s3cret"));
    b.set_token(None);
    assert_eq!(export(&b, "r", &handoff_headers("r", None)).await.0, StatusCode::OK);
}

#[tokio::test]
async fn an_export_delay_holds_the_answer() {
    let b = RoomBackend::start("b1").await;
    b.set_log("r", vec!["a".into()]);
    let delay = Duration::from_millis(500);
    b.set_export_delay(delay);
    let start = Instant::now();
    let (status, _, body) = export(&b, "r", &handoff_headers("r", None)).await;
    assert!(start.elapsed() >= delay, "answered after {:?}", start.elapsed());
    assert_eq!((status, body.as_str()), (StatusCode::OK, r#"["a"]"#));
    assert!(b.calls()[0].at - start < delay, "recorded on arrival");
}

#[tokio::test]
async fn forced_statuses_replace_the_answers() {
    let b = RoomBackend::start("b1").await;
    b.set_log("r", vec!["a".into()]);
    let h = handoff_headers("r", None);
    b.set_export_status(Some(StatusCode::INTERNAL_SERVER_ERROR));
    assert_eq!(export(&b, "r", &h).await.0, StatusCode::INTERNAL_SERVER_ERROR);
    b.set_export_status(Some(StatusCode::NOT_FOUND));
    let (status, _, body) = export(&b, "r", &h).await;
    assert_eq!((status, body.as_str()), (StatusCode::NOT_FOUND, ""));
    b.set_import_status(Some(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(import(&b, "r", r#"["x"]"#, &h).await, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(count(&b, "r").await, "1", "a failed import stores nothing");
    b.set_export_status(None);
    b.set_import_status(None);
    assert_eq!(import(&b, "r", r#"["x","y"]"#, &h).await, StatusCode::NO_CONTENT);
    assert_eq!(export(&b, "r", &h).await.2, r#"["x","y"]"#);
}

#[tokio::test]
async fn bodies_that_are_not_a_log_are_refused() {
    let b = RoomBackend::start("b1").await;
    b.set_log("r", vec!["a".into()]);
    let h = handoff_headers("r", None);
    for bad in ["not json", "[1,2]", r#"{"x":1}"#, r#"{"log":["a"],"extra":1}"#, "", r#""a""#] {
        assert_eq!(import(&b, "r", bad, &h).await, StatusCode::BAD_REQUEST, "{bad:?}");
    }
    assert_eq!(b.log("r").unwrap(), ["a"]);
    assert_eq!(import(&b, "r", "[]", &h).await, StatusCode::NO_CONTENT);
    assert_eq!(b.log("r").unwrap(), Vec::<String>::new());
}

#[tokio::test]
async fn padded_states_are_exported_and_imported() {
    let (b1, b2) = (RoomBackend::start("b1").await, RoomBackend::start("b2").await);
    b1.set_log("r", vec!["a".into(), "b".into()]);
    let h = handoff_headers("r", None);
    for pad in [1 << 10, 1 << 20] {
        b1.set_state_padding(pad);
        let (status, _, body) = export(&b1, "r", &h).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.len() >= pad && body.len() < pad + 64, "{} bytes", body.len());
        let state: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(state["log"], serde_json::json!(["a", "b"]));
        assert_eq!(import(&b2, "r", &body, &h).await, StatusCode::NO_CONTENT);
        assert_eq!(b2.log("r").unwrap(), ["a", "b"]);
        assert_eq!(b2.calls().last().unwrap().body_len, body.len());
    }
}

#[tokio::test]
async fn keys_are_percent_decoded_once() {
    let (b1, b2) = (RoomBackend::start("b1").await, RoomBackend::start("b2").await);
    let (mut ws, hello) = join(&b1, "a%2Fb").await;
    assert_eq!(hello, "hello:b1:0");
    say(&mut ws, "slash").await;
    assert_eq!(b1.memberships()[0].room, "a/b");
    let (status, _, body) = export(&b1, "a%2Fb", &handoff_headers("a/b", None)).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, r#"["slash"]"#));
    let c = &b1.calls()[0];
    assert_eq!((c.key.as_str(), c.path.as_str()), ("a/b", "/.roomgate/rooms/a%2Fb/export"));
    // `50%41` travels as `50%2541` and is not decoded twice.
    assert_eq!(import(&b2, "50%2541", r#"["p"]"#, &handoff_headers("50%41", None)).await, StatusCode::NO_CONTENT);
    assert_eq!(b2.log("50%41").unwrap(), ["p"]);
    assert!(b2.log("50A").is_none());
    // A key ending in `/export`: its import is a PUT, its export a POST with one more `/export`.
    assert_eq!(import(&b2, "a%2Fexport", r#"["e"]"#, &handoff_headers("a/export", None)).await, StatusCode::NO_CONTENT);
    assert_eq!(b2.log("a/export").unwrap(), ["e"]);
    assert_eq!(export(&b2, "a%2Fexport", &handoff_headers("a/export", None)).await.2, r#"["e"]"#);
    assert_eq!(b2.calls().last().unwrap().key, "a/export");
    assert_eq!(count(&b2, "a%2Fexport").await, "1");
}

#[tokio::test]
async fn hang_holds_calls_and_kill_loses_the_state() {
    let b = RoomBackend::start("b1").await;
    let (mut ws, _) = join(&b, "r").await;
    say(&mut ws, "a").await;
    b.hang();
    let url = b.url("/count?room=r");
    let waiting = tokio::spawn(async move { get(&http_client(), &url, &[]).await.2 });
    b.wait_held(1).await;
    assert_eq!(say(&mut ws, "b").await, "1:b", "open sockets keep working");
    assert!(!waiting.is_finished());
    b.release();
    assert_eq!(waiting.await.unwrap(), "2");
    let members = b.members.clone();
    let addr = b.kill();
    assert!(matches!(recv(&mut ws, LIMIT).await, Err(None)), "the socket dropped");
    let left = tokio::time::timeout(LIMIT, async {
        while members.lock().unwrap()[0].left.is_none() {
            tokio::task::yield_now().await;
        }
    });
    left.await.expect("membership ended");
    let b = RoomBackend::start_at("b1", addr).await;
    assert_eq!(join(&b, "r").await.1, "hello:b1:0", "a restarted process has no state");
}
