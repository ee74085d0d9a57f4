//! The two calls of the hand-off protocol (`docs/handoff.md`): export a room's state from its old
//! owner, import it on its new one. Each call is bounded by `[handoff] timeout` and the state by
//! `[handoff] max_bytes`; the backends see `Authorization: Bearer` when a token is set.

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use crate::backends::Backend;
use crate::config::Handoff;

/// What a key may keep unencoded in the endpoints' path: letters, digits, `-`, `_` and `~`. A
/// `.` is encoded too, so that no key (`.`, `..`) reads as a dot segment.
const KEY_IN_PATH: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'~');

/// Most bytes of an import's answer roomgate reads. The answer carries nothing roomgate uses
/// (only its status counts), so a few KiB is room enough for an error text; more is the new
/// owner's failure, not memory roomgate spends (an unbounded read of a 256 MiB answer took
/// roomgate to 278 MB).
pub const MAX_IMPORT_ANSWER: usize = 4 * 1024;

static ROOM: HeaderName = HeaderName::from_static("roomgate-room");
static FROM: HeaderName = HeaderName::from_static("roomgate-from");
static TO: HeaderName = HeaderName::from_static("roomgate-to");
static MOVE: HeaderName = HeaderName::from_static("roomgate-move");

/// One move, as both calls name it.
pub struct MoveIds<'a> {
    pub room: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    /// Unique per move.
    pub id: &'a str,
}

/// A room's state as its old owner exported it.
pub struct State {
    pub body: Bytes,
    pub content_type: Option<HeaderValue>,
}

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("{step}: no answer within {timeout:?}")]
    Timeout { step: &'static str, timeout: Duration },
    #[error("{step}: {source}")]
    Failed { step: &'static str, source: Box<dyn std::error::Error + Send + Sync> },
    #[error("{step}: answered {status}")]
    Status { step: &'static str, status: StatusCode },
    #[error("export: the state is larger than [handoff] max_bytes ({max} bytes)")]
    TooLarge { max: usize },
    #[error("the tunnels of the room did not stop within {0:?}")]
    Pause(Duration),
}

impl StepError {
    /// The metric label of the step that failed.
    pub fn step(&self) -> &'static str {
        match self {
            StepError::Timeout { step, .. } | StepError::Failed { step, .. } | StepError::Status { step, .. } => step,
            StepError::TooLarge { .. } => "export",
            StepError::Pause(_) => "pause",
        }
    }
}

/// The HTTP client of the hand-off calls: a pool of its own, apart from the request path's.
#[derive(Clone)]
pub struct HandoffClient {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl HandoffClient {
    /// A client whose idle connections close after `idle` (`[upstream] idle_timeout`, as the
    /// request path's): moves come in bursts, and a connection kept between them would hold a
    /// descriptor on both sides for nothing (hyper's default is 90 s).
    pub fn new(idle: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(4)
            .pool_idle_timeout(idle)
            .pool_timer(TokioTimer::new())
            .build(connector);
        HandoffClient { client }
    }

    /// `POST {path}/{key}/export` to the old owner, answered within `timeout`. `None`: nothing to
    /// hand over (204 or 404).
    pub async fn export(
        &self,
        settings: &Handoff,
        timeout: Duration,
        from: &Backend,
        ids: &MoveIds<'_>,
    ) -> Result<Option<State>, StepError> {
        const STEP: &str = "export";
        let uri = format!("{}/export", endpoint(from, settings, ids.room));
        let call = async {
            let req = request(STEP, Method::POST, &uri, from, settings, ids, Bytes::new(), None)?;
            let resp =
                self.client.request(req).await.map_err(|e| StepError::Failed { step: STEP, source: e.into() })?;
            match resp.status() {
                StatusCode::OK => {}
                StatusCode::NO_CONTENT | StatusCode::NOT_FOUND => return Ok(None),
                status => return Err(StepError::Status { step: STEP, status }),
            }
            let content_type = resp.headers().get(header::CONTENT_TYPE).cloned();
            let max = settings.max_bytes;
            let too_large = resp
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                .is_some_and(|n| n > max as u64);
            if too_large {
                return Err(StepError::TooLarge { max });
            }
            let body = Limited::new(resp.into_body(), max).collect().await.map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    StepError::TooLarge { max }
                } else {
                    StepError::Failed { step: STEP, source: e }
                }
            })?;
            Ok(Some(State { body: body.to_bytes(), content_type }))
        };
        bounded(STEP, timeout, call).await
    }

    /// `PUT {path}/{key}` to the new owner with the state; any 2xx is accepted.
    pub async fn import(
        &self,
        settings: &Handoff,
        to: &Backend,
        ids: &MoveIds<'_>,
        state: &State,
    ) -> Result<(), StepError> {
        const STEP: &str = "import";
        let uri = endpoint(to, settings, ids.room);
        let call = async {
            let req =
                request(STEP, Method::PUT, &uri, to, settings, ids, state.body.clone(), state.content_type.clone())?;
            let resp =
                self.client.request(req).await.map_err(|e| StepError::Failed { step: STEP, source: e.into() })?;
            let status = resp.status();
            // Read to its end, so that the connection goes back to the pool, but no further
            // than the bound: past it the connection is dropped instead.
            let declared =
                resp.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            let oversized = || StepError::Failed {
                step: STEP,
                source: format!("the answer is larger than {MAX_IMPORT_ANSWER} bytes").into(),
            };
            if declared.is_some_and(|n| n > MAX_IMPORT_ANSWER as u64) {
                return Err(oversized());
            }
            if let Err(e) = Limited::new(resp.into_body(), MAX_IMPORT_ANSWER).collect().await {
                return Err(match e.is::<http_body_util::LengthLimitError>() {
                    true => oversized(),
                    false => StepError::Failed { step: STEP, source: e },
                });
            }
            match status.is_success() {
                true => Ok(()),
                false => Err(StepError::Status { step: STEP, status }),
            }
        };
        bounded(STEP, settings.timeout, call).await
    }
}

async fn bounded<T>(
    step: &'static str,
    timeout: Duration,
    call: impl Future<Output = Result<T, StepError>>,
) -> Result<T, StepError> {
    tokio::time::timeout(timeout, call).await.unwrap_or(Err(StepError::Timeout { step, timeout }))
}

/// `http://{backend}{path}/{key}`, the key percent-encoded.
fn endpoint(backend: &Backend, settings: &Handoff, room: &str) -> String {
    format!("http://{}{}/{}", backend.authority, settings.path, utf8_percent_encode(room, KEY_IN_PATH))
}

#[allow(clippy::too_many_arguments)]
fn request(
    step: &'static str,
    method: Method,
    uri: &str,
    backend: &Backend,
    settings: &Handoff,
    ids: &MoveIds<'_>,
    body: Bytes,
    content_type: Option<HeaderValue>,
) -> Result<Request<Full<Bytes>>, StepError> {
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = method;
    *req.uri_mut() = uri.parse().map_err(|e: http::uri::InvalidUri| StepError::Failed { step, source: e.into() })?;
    let h = req.headers_mut();
    if let Ok(host) = HeaderValue::from_str(backend.authority.as_str()) {
        h.insert(header::HOST, host);
    }
    h.insert(header::USER_AGENT, HeaderValue::from_static("roomgate-handoff"));
    if let Some(token) = &settings.token
        && let Ok(v) = HeaderValue::try_from(format!("Bearer {token}"))
    {
        h.insert(header::AUTHORIZATION, v);
    }
    if let Some(ct) = content_type {
        h.insert(header::CONTENT_TYPE, ct);
    }
    for (name, value) in [(&ROOM, ids.room), (&FROM, ids.from), (&TO, ids.to), (&MOVE, ids.id)] {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(name, v);
        }
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_encoded_so_that_no_key_is_a_dot_segment_or_a_second_segment() {
        let enc = |k: &str| utf8_percent_encode(k, KEY_IN_PATH).to_string();
        assert_eq!(enc("chess-42_a~b"), "chess-42_a~b");
        assert_eq!(enc("."), "%2E");
        assert_eq!(enc(".."), "%2E%2E");
        assert_eq!(enc("a/b?c#d"), "a%2Fb%3Fc%23d");
        assert_eq!(enc("a&b%7c+d"), "a%26b%257c%2Bd");
    }
}
