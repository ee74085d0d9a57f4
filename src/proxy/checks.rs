//! What a request head must be before it is routed: within the limits, one Host, not under the
//! hand-off path, and a route its decoding agrees with. (Whether it is a WebSocket handshake is
//! [`crate::handshake`]'s, its room [`crate::room_key`]'s.)

use ::http::Version;

use super::{headers, reserved};
use crate::config::{Config, Route};
use crate::error::ClientError;
use crate::fields::{Fields, Head};

/// Request heads over the configured limits get 431 (hyper itself cuts heads far over it); two
/// Host headers, or none in an HTTP/1.1 request, 400; a path a backend could read as the hand-off
/// endpoints' (`[handoff] path`, or its default when hand-off is off), 404. Every request runs
/// it, on every listener and protocol, WebSocket handshakes and djust sockets included.
pub(super) fn check_head<F: Fields + ?Sized>(req: &Head<'_, F>, config: &Config) -> Result<(), ClientError> {
    let limits = &config.limits;
    let count = req.fields.count();
    if count > limits.max_headers {
        return Err(ClientError::TooManyHeaders { count, limit: limits.max_headers });
    }
    let size = headers::request_head_size(req.method, req.uri, req.fields);
    if size > limits.max_request_head {
        return Err(ClientError::HeadTooLarge { size, limit: limits.max_request_head });
    }
    let mut hosts = req.fields.values("host");
    match (hosts.next(), hosts.next()) {
        (_, Some(_)) => return Err(ClientError::BadHead("two Host headers")),
        (None, None) if req.version == Version::HTTP_11 => return Err(ClientError::BadHead("no Host header")),
        (Some(host), None) => {
            if let Some(authority) = req.uri.authority()
                && !crate::room_key::host_agrees(authority, host, req.uri.scheme_str())
            {
                let why = crate::room_key::Ambiguity::HostMismatch;
                return Err(ClientError::Ambiguous(format!("Host: {why}")));
            }
        }
        _ => {}
    }
    if reserved::is_reserved(req.uri.path(), config.handoff_path()) {
        return Err(ClientError::Reserved);
    }
    Ok(())
}

/// The route for `path`. Routes match the raw path, but the backend routes on the decoded one: a
/// path whose decoding would match another route (`/r%6Fom/a/` for a `/room/` route) is refused,
/// or it could reach a room's page on a backend that does not own the room.
pub(super) fn route<'c>(config: &'c Config, path: &str) -> Result<(usize, &'c Route), ClientError> {
    let found = config.route_for(path).ok_or(ClientError::NoRoute)?;
    if path.contains('%') {
        let decoded = crate::room_key::unquote(path);
        if config.route_for(&decoded).map(|(i, _)| i) != Some(found.0) {
            return Err(ClientError::Ambiguous("the path decodes to another route's prefix".to_owned()));
        }
    }
    Ok(found)
}
