//! `RoomBackend`'s hand-off endpoints: export and import of a room's log as docs/handoff.md
//! describes them, each call recorded on arrival.

#![forbid(unsafe_code)]

use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use percent_encoding::percent_decode_str;

use super::{HANDOFF_PATH, HandoffBehaviour, HandoffCall, Shared, lock};
use crate::common::{Body, full};

fn text_header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

pub(super) async fn handoff(shared: &Shared, req: Request<Incoming>) -> Response<Body> {
    let at = Instant::now();
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let rest = &path[HANDOFF_PATH.len() + 1..];
    let export = parts.method == Method::POST && rest.ends_with("/export");
    let raw_key = if export { &rest[..rest.len() - "/export".len()] } else { rest };
    let key = percent_decode_str(raw_key).decode_utf8_lossy().into_owned();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return full(StatusCode::BAD_REQUEST, &shared.id, "body not read");
    };
    let h = &parts.headers;
    let authorization = text_header(h, "authorization");
    shared.calls.send_modify(|calls| {
        calls.push(HandoffCall {
            method: parts.method.clone(),
            path: path.clone(),
            key: key.clone(),
            room: text_header(h, "roomgate-room"),
            from: text_header(h, "roomgate-from"),
            to: text_header(h, "roomgate-to"),
            move_id: text_header(h, "roomgate-move"),
            authorization: authorization.clone(),
            content_type: text_header(h, "content-type"),
            body_len: body.len(),
            at,
        })
    });
    let behaviour = lock(&shared.behaviour).clone();
    let token_ok = behaviour.token.as_ref().is_none_or(|t| authorization == Some(format!("Bearer {t}")));
    if key.is_empty() {
        return full(StatusCode::NOT_FOUND, &shared.id, "no key");
    }
    if !token_ok {
        return full(StatusCode::UNAUTHORIZED, &shared.id, "bad token");
    }
    if export {
        export_state(shared, &key, &behaviour).await
    } else if parts.method == Method::PUT {
        import_state(shared, &key, &body, &behaviour).await
    } else {
        full(StatusCode::NOT_FOUND, &shared.id, "not a hand-off call")
    }
}

async fn export_state(shared: &Shared, key: &str, behaviour: &HandoffBehaviour) -> Response<Body> {
    if !behaviour.export_delay.is_zero() {
        tokio::time::sleep(behaviour.export_delay).await;
    }
    if let Some(status) = behaviour.export_status {
        return full(status, &shared.id, Bytes::new());
    }
    let body = {
        let rooms = lock(&shared.rooms);
        let Some(room) = rooms.get(key) else { return full(StatusCode::NO_CONTENT, &shared.id, Bytes::new()) };
        match behaviour.state_padding {
            0 => serde_json::to_vec(&room.log),
            n => serde_json::to_vec(&serde_json::json!({"log": room.log, "pad": "x".repeat(n)})),
        }
    };
    shared.exports.send_modify(|n| *n += 1);
    let mut resp = full(StatusCode::OK, &shared.id, body.unwrap_or_default());
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// A state body: a plain log, or a log with padding.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum State {
    Log(Vec<String>),
    Padded(Padded),
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Padded {
    log: Vec<String>,
    #[serde(default, rename = "pad")]
    _pad: String,
}

async fn import_state(shared: &Shared, key: &str, body: &[u8], behaviour: &HandoffBehaviour) -> Response<Body> {
    if !behaviour.import_delay.is_zero() {
        tokio::time::sleep(behaviour.import_delay).await;
    }
    if let Some(status) = behaviour.import_status {
        return full(status, &shared.id, Bytes::new());
    }
    let log = match serde_json::from_slice::<State>(body) {
        Ok(State::Log(log) | State::Padded(Padded { log, .. })) => log,
        Err(_) => return full(StatusCode::BAD_REQUEST, &shared.id, "not a JSON array of strings"),
    };
    lock(&shared.rooms).entry(key.to_owned()).or_default().log = log;
    match behaviour.import_answer_len {
        0 => full(StatusCode::NO_CONTENT, &shared.id, Bytes::new()),
        n => full(StatusCode::OK, &shared.id, vec![b'x'; n]),
    }
}
