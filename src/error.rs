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
    #[error("no first WebSocket message within {0:?}")]
    FirstMessageTimeout(Duration),
    #[error("first WebSocket message is over {0} bytes")]
    FirstMessageTooLarge(usize),
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
}

impl ProxyError {
    pub fn status(&self) -> StatusCode {
        match self {
            ProxyError::Client(ClientError::NoRoute) => StatusCode::NOT_FOUND,
            ProxyError::Client(
                ClientError::MissingKey { .. } | ClientError::BadKey(_) | ClientError::BadHandshake(_),
            ) => StatusCode::BAD_REQUEST,
            ProxyError::Client(ClientError::FirstMessageTimeout(_)) => StatusCode::REQUEST_TIMEOUT,
            ProxyError::Client(ClientError::FirstMessageTooLarge(_)) => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::Client(ClientError::HeadTooLarge { .. } | ClientError::TooManyHeaders { .. }) => {
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
            }
            ProxyError::Backend(BackendError::NoBackends) => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::Backend(BackendError::Connect { .. } | BackendError::Failed { .. }) => StatusCode::BAD_GATEWAY,
            ProxyError::Backend(BackendError::Timeout { .. }) => StatusCode::GATEWAY_TIMEOUT,
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

/// The response for an error: its status and a one-line plain-text body saying why.
pub fn respond(err: &ProxyError) -> Response<Bytes> {
    let status = err.status();
    let body = format!("{} {}: {}\n", status.as_u16(), status.canonical_reason().unwrap_or(""), err.detail());
    let mut resp = Response::new(Bytes::from(body));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if status == StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}
