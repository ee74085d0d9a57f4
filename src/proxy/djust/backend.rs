//! The backend's side of a djust socket: the WebSocket handshake roomgate makes to the room's
//! owner with the client's headers, and the backend's own greeting, which the client never sees.

use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{Request, StatusCode, Version};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::Session;
use crate::backends::Backend;
use crate::config::Config;
use crate::djust;
use crate::error::{BackendError, close_code_for};
use crate::proxy::headers;
use crate::proxy::upgrade;
use crate::relay::frame::{Rules, close_frame};
use crate::relay::message::{self, ReadError};

pub(super) type Upgraded = TokioIo<hyper::upgrade::Upgraded>;

impl Session {
    /// Opens the WebSocket to the backend with the client's headers, without extensions
    /// (roomgate reads the frames, so they must not be compressed).
    /// `Ok(Err(status))`: the backend answered, but not with a 101.
    pub(super) async fn open(
        &self,
        config: &Config,
        backend: &Arc<Backend>,
    ) -> Result<Result<Upgraded, StatusCode>, BackendError> {
        let mut parts = self.parts.clone();
        headers::set_websocket_upgrade(&mut parts.headers);
        parts.headers.remove(header::SEC_WEBSOCKET_EXTENSIONS);
        parts.version = Version::HTTP_11;
        if let Some(pq) = parts.uri.path_and_query().cloned() {
            parts.uri = pq.into();
        }
        let key = parts.headers.get(header::SEC_WEBSOCKET_KEY).cloned();
        let t = &config.timeouts;
        let mut resp = upgrade::open(backend, Request::from_parts(parts, ()), t.connect, t.upstream_response).await?;
        if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
            return Ok(Err(resp.status()));
        }
        match upgrade::accepted(resp.headers(), key.as_ref().map(HeaderValue::as_bytes)) {
            Ok(0) => {}
            // It was offered no extension: one it accepts anyway is as wrong as a bad accept key.
            Ok(_) => {
                return Err(BackendError::BadUpgrade {
                    backend: backend.id.to_string(),
                    why: "its 101 accepts an extension never offered",
                });
            }
            Err(why) => return Err(BackendError::BadUpgrade { backend: backend.id.to_string(), why }),
        }
        match hyper::upgrade::on(&mut resp).await {
            Ok(io) => Ok(Ok(TokioIo::new(io))),
            Err(e) => Err(BackendError::Failed { backend: backend.id.to_string(), source: Box::new(e) }),
        }
    }
}

/// Reads the backend's first message and drops it if it is djust's `connect` greeting (the
/// client had roomgate's). Returns the bytes read ahead, which the pump relays first. A close
/// instead (a 101 then 4429) is `Err(code)`.
pub(super) async fn greeting_skipped<B: AsyncRead + AsyncWrite + Unpin>(
    backend_io: &mut B,
    config: &Config,
) -> Result<Vec<u8>, u16> {
    let mut buf = Vec::new();
    let limit = config.limits.max_first_message;
    let mut unbounded = message::Unbounded;
    let read = message::read_message(backend_io, &mut buf, limit, Rules::SERVER, &mut unbounded);
    match tokio::time::timeout(config.timeouts.upstream_response, read).await {
        Ok(Ok(msg)) if djust::is_connect(&msg.payload) => Ok(buf),
        Ok(Ok(msg)) => {
            let mut pre = msg.raw;
            pre.extend_from_slice(&buf);
            Ok(pre)
        }
        // Not a greeting we can read whole: relay it as it is.
        Ok(Err(ReadError::TooLarge(_) | ReadError::Frame(_) | ReadError::Busy)) => Ok(buf),
        Ok(Err(ReadError::Closed(code))) => {
            let code = code.unwrap_or(1011);
            let _ = backend_io.write_all(&close_frame(code, "", Some(crate::relay::mask_key()))).await;
            Err(code)
        }
        Ok(Err(ReadError::Eof | ReadError::Io(_))) => Err(close_code_for(StatusCode::BAD_GATEWAY)),
        Err(_) => Err(close_code_for(StatusCode::GATEWAY_TIMEOUT)),
    }
}
