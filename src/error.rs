//! Errors of the request path, tagged by the side that failed, and the one place they become
//! responses.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::room_key::KeyError;

/// Why roomgate answered a request itself instead of relaying the backend's answer.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The client's request cannot be served as sent (4xx).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The backend could not be reached or did not answer (5xx).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// roomgate is at one of its limits: 503 with `Retry-After`. Neither side failed.
    #[error(transparent)]
    Limit(#[from] LimitError),
}

/// The config keys of the limits, also the `limit` label of `roomgate_refused_total`.
pub const MAX_CONNECTIONS: &str = "limits.max_connections";
pub const MAX_CONNECTIONS_PER_IP: &str = "limits.max_connections_per_ip";
pub const MAX_CONNECTIONS_PER_BACKEND: &str = "upstream.max_connections_per_backend";

/// A limit that refused a connection or a request, named by its config key.
#[derive(Debug, thiserror::Error)]
#[error("over {limit} ({max})")]
pub struct LimitError {
    /// The config key, e.g. `limits.max_connections_per_ip`; also the metric label.
    pub limit: &'static str,
    pub max: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no route matches the path")]
    NoRoute,
    #[error("no room key in the request (route {prefix:?} looks in: {sources})")]
    MissingKey { prefix: String, sources: String },
    #[error(transparent)]
    BadKey(#[from] KeyError),
    #[error("request head is {size} bytes, over the limit of {limit}")]
    HeadTooLarge { size: usize, limit: usize },
    #[error("request has {count} headers, over the limit of {limit}")]
    TooManyHeaders { count: usize, limit: usize },
    #[error("invalid WebSocket handshake: {0}")]
    BadHandshake(&'static str),
    /// A request head HTTP forbids (RFC 9112 section 3.2: one Host, and one in every HTTP/1.1
    /// request); the backend and roomgate could read it differently.
    #[error("malformed request: {0}")]
    BadHead(&'static str),
    #[error("no first WebSocket message within {0:?}")]
    FirstMessageTimeout(Duration),
    #[error("first WebSocket message is over {0} bytes")]
    FirstMessageTooLarge(usize),
    /// The request body could not be read: malformed framing (chunked), or the client went away
    /// before its end. Never counted against the backend.
    #[error("request body: {0}")]
    Body(BodyProblem),
    /// The request carries its room twice, or in a form the backend may read differently (two
    /// `room` parameters, two key headers, a key header named in `Connection`, a Host that
    /// disagrees with the request target): it is never placed.
    #[error("ambiguous room: {0}")]
    Ambiguous(String),
    /// The path is under the hand-off endpoints' (`[handoff] path`), which only roomgate calls.
    /// The client is told "not found", as for a path nothing serves.
    #[error("the path is under the hand-off endpoints, which clients never reach")]
    Reserved,
    /// `CONNECT`: roomgate is a reverse proxy, never a tunnel to an address the client names.
    #[error("CONNECT is not served: roomgate is not a forward proxy")]
    Connect,
}

/// What went wrong with a request body, on the client's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BodyProblem {
    #[error("malformed (it does not parse)")]
    Malformed,
    #[error("the client went away before its end")]
    Incomplete,
    #[error("no data for {0:?}")]
    Stalled(Duration),
    #[error("not complete within {0:?}")]
    TooSlow(Duration),
}

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("no backend is configured")]
    NoBackends,
    #[error("backend {backend} unreachable")]
    Connect {
        backend: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("backend {backend} sent no response within {after:?}")]
    Timeout { backend: String, after: Duration },
    #[error("backend {backend} failed")]
    Failed {
        backend: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The backend answered a handshake with a 101 that is not a WebSocket's (no `Upgrade:
    /// websocket`, a wrong `Sec-WebSocket-Accept`), or a plain request with a 101.
    #[error("backend {backend} sent an invalid upgrade: {why}")]
    BadUpgrade { backend: String, why: &'static str },
    /// The room is moving and the fleet has not let its new owner take members within the
    /// longest wait (a replica's claim on the old owner neither released nor expired).
    #[error("room {room} still moving after {waited:?}")]
    RoomMoving { room: String, waited: Duration },
}

impl From<crate::handshake::Refused> for ClientError {
    fn from(r: crate::handshake::Refused) -> Self {
        match r {
            crate::handshake::Refused::Bad(why) => ClientError::BadHandshake(why),
            crate::handshake::Refused::Connect => ClientError::Connect,
        }
    }
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::Client(ClientError::NoRoute | ClientError::Reserved) => StatusCode::NOT_FOUND,
            ProxyError::Client(
                ClientError::MissingKey { .. }
                | ClientError::BadKey(_)
                | ClientError::BadHandshake(_)
                | ClientError::BadHead(_)
                | ClientError::Ambiguous(_)
                | ClientError::Body(BodyProblem::Malformed | BodyProblem::Incomplete),
            ) => StatusCode::BAD_REQUEST,
            ProxyError::Client(ClientError::Body(BodyProblem::Stalled(_) | BodyProblem::TooSlow(_))) => {
                StatusCode::REQUEST_TIMEOUT
            }
            ProxyError::Client(ClientError::FirstMessageTimeout(_)) => StatusCode::REQUEST_TIMEOUT,
            ProxyError::Client(ClientError::Connect) => StatusCode::METHOD_NOT_ALLOWED,
            ProxyError::Client(ClientError::FirstMessageTooLarge(_)) => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::Client(ClientError::HeadTooLarge { .. } | ClientError::TooManyHeaders { .. }) => {
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
            }
            ProxyError::Backend(BackendError::NoBackends | BackendError::RoomMoving { .. }) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ProxyError::Backend(
                BackendError::Connect { .. } | BackendError::Failed { .. } | BackendError::BadUpgrade { .. },
            ) => StatusCode::BAD_GATEWAY,
            ProxyError::Backend(BackendError::Timeout { .. }) => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::Limit(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// What the client is told: its own mistake in full, but of a failure on roomgate's side
    /// only what kind it was. Backend ids, addresses and error chains go to the log.
    pub fn public_message(&self) -> String {
        match self {
            ProxyError::Client(ClientError::Reserved) => "not found".to_owned(),
            ProxyError::Client(e) => e.to_string(),
            ProxyError::Backend(BackendError::NoBackends) => "no backend is available".to_owned(),
            ProxyError::Backend(BackendError::RoomMoving { .. }) => "the room is moving; retry shortly".to_owned(),
            ProxyError::Backend(BackendError::Connect { .. }) => "the backend could not be reached".to_owned(),
            ProxyError::Backend(BackendError::Failed { .. } | BackendError::BadUpgrade { .. }) => {
                "the backend failed to answer".to_owned()
            }
            ProxyError::Backend(BackendError::Timeout { .. }) => "the backend did not answer in time".to_owned(),
            ProxyError::Limit(_) => "roomgate is at its capacity; retry later".to_owned(),
        }
    }

    /// The close code for a WebSocket that roomgate already accepted: 4000 plus the HTTP status
    /// it would have answered with (4400, 4502, ...), except 1009 for a first message too big.
    pub fn close_code(&self) -> u16 {
        match self {
            ProxyError::Client(ClientError::FirstMessageTooLarge(_)) => 1009,
            _ => close_code_for(self.status()),
        }
    }

    /// The message with its causes, for the log line and the response body.
    pub fn detail(&self) -> String {
        let mut out = self.to_string();
        let mut source = std::error::Error::source(self);
        // `transparent` variants share their inner error's message: skip the duplicate.
        if let Some(s) = source
            && s.to_string() == out
        {
            source = s.source();
        }
        while let Some(s) = source {
            out.push_str(": ");
            out.push_str(&s.to_string());
            source = s.source();
        }
        out
    }
}

/// The close code that carries an HTTP status to a WebSocket client: 4000 + status (a backend's
/// 403 becomes 4403).
pub fn close_code_for(status: StatusCode) -> u16 {
    4000 + status.as_u16()
}

/// Seconds a client refused by a limit is asked to wait (`Retry-After`).
pub const RETRY_AFTER_SECS: u64 = 1;

/// The response for an error: its status and a one-line plain-text body saying why, in the
/// words of [`ProxyError::public_message`].
pub fn respond(err: &ProxyError) -> Response<Bytes> {
    let status = err.status();
    let body = format!("{} {}: {}\n", status.as_u16(), status.canonical_reason().unwrap_or(""), err.public_message());
    let mut resp = Response::new(Bytes::from(body));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    match err {
        // The rest of the connection cannot be trusted: a head too large was not read whole, a
        // body that failed was not read to its end.
        ProxyError::Client(
            ClientError::HeadTooLarge { .. } | ClientError::TooManyHeaders { .. } | ClientError::Body(_),
        ) => {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        ProxyError::Limit(_) | ProxyError::Backend(BackendError::RoomMoving { .. }) => {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        ProxyError::Client(ClientError::Connect) => {
            headers.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH"));
        }
        _ => {}
    }
    resp
}
