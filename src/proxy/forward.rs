//! A plain (not upgrade) request on its way to its backend and back, and what its outcome says
//! about the backend's health (passive checks) and latency.

use std::sync::Arc;
use std::time::Instant;

use ::http::request::Parts;
use ::http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::upload::Deadlines;
use super::{AccessRecord, Gateway, RequestBody, ResponseBody, Target};
use crate::backends::Backend;
use crate::config::Config;
use crate::directory::Use;
use crate::error::{BackendError, ClientError};
use crate::limits::{Held, Holds};
use crate::snapshot::Snapshot;

impl Gateway {
    /// Forwards a plain (not upgrade) request to the target and relays its answer. `Err`: the
    /// client's body failed, whatever the upstream client made of it; `Ok`: the backend's outcome.
    pub(super) async fn forward(
        &self,
        parts: Parts,
        body: Incoming,
        target: &Target,
        holds: Holds,
        record: &Option<Box<AccessRecord>>,
        config: &Config,
    ) -> Result<Result<Response<ResponseBody>, BackendError>, ClientError> {
        let presence = self.presence(target, Use::Request);
        let counted = record.as_ref().map(|r| r.bytes_in.clone());
        let t = &config.timeouts;
        let deadlines = Deadlines { total: t.request_body, idle: t.request_body_idle };
        let (body, upload) = RequestBody::new(body, counted, deadlines);
        let req = Request::from_parts(parts, body);
        let sent = self.upstream.send(req, &target.backend, t.upstream_response, upload.as_ref(), t.request_body).await;
        if sent.is_err()
            && let Some(problem) = upload.as_ref().and_then(|u| u.problem())
        {
            return Err(ClientError::Body(problem));
        }
        Ok(match sent {
            // A 101 answers only a handshake; on a plain request it would leave the client
            // connection in a state neither side asked for.
            Ok(resp) if resp.status() == StatusCode::SWITCHING_PROTOCOLS => Err(BackendError::BadUpgrade {
                backend: target.backend.id.to_string(),
                why: "101 to a request that asked for no upgrade",
            }),
            sent => sent.map(|mut resp| {
                Held::attach(&mut resp, holds);
                resp.map(|b| ResponseBody::upstream(b).with_presence(presence))
            }),
        })
    }

    /// Passive health and latency: a backend that could not be reached counts a failure.
    pub(super) fn observe_backend(
        &self,
        snap: &Snapshot,
        backend: &Arc<Backend>,
        result: Result<(), &BackendError>,
        started: Instant,
    ) {
        let h = &snap.config.health;
        let transition = match result {
            Ok(_) => {
                self.metrics.upstream_latency(&backend.id, started.elapsed());
                backend.record_success(h.rise)
            }
            Err(BackendError::Connect { .. } | BackendError::Failed { .. } | BackendError::BadUpgrade { .. }) => {
                backend.record_failure(h.fall, h.cooldown)
            }
            Err(_) => None,
        };
        if let Some(t) = transition {
            self.metrics.health_transition(backend, t, "requests");
        }
    }
}
