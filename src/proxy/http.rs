//! Plain HTTP to backends: one pooled keep-alive client for all of them, bodies streamed both
//! ways.

use std::time::Duration;

use http::{Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use std::sync::Arc;

use super::upload::{RequestBody, Upload};
use crate::backends::Backend;
use crate::config::Config;
use crate::error::BackendError;

/// The upstream HTTP client: a pool of keep-alive connections per backend address.
pub struct Upstream {
    client: Client<HttpConnector, RequestBody>,
    /// Idle connections of roomgate's own HTTP/1 path.
    pub(super) idle: super::h1::pool::Pool,
}

impl Upstream {
    pub fn new(config: &Config) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.timeouts.connect));
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(config.upstream.idle_timeout)
            .pool_max_idle_per_host(config.upstream.max_idle_per_backend)
            // The client's Host header is forwarded as is; never replace it with the backend's.
            .set_host(false)
            .build(connector);
        let idle = super::h1::pool::Pool::new(config.upstream.max_idle_per_backend, config.upstream.idle_timeout);
        Upstream { client, idle }
    }

    /// Sends `req` (origin-form URI) to `backend`; waits at most `timeout` for the response head
    /// once the body has been sent (`upload` ended), or `body_total` has passed without that: a
    /// slow upload is the client's to finish (its deadlines are the body's own), and a backend
    /// that stops reading the body is still held to `timeout`.
    pub async fn send(
        &self,
        mut req: Request<RequestBody>,
        backend: &Backend,
        timeout: Duration,
        upload: Option<&Arc<Upload>>,
        body_total: Option<Duration>,
    ) -> Result<Response<Incoming>, BackendError> {
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(http::uri::Scheme::HTTP);
        parts.authority = Some(backend.authority.clone());
        parts.path_and_query = req.uri().path_and_query().cloned();
        *req.uri_mut() = Uri::from_parts(parts).map_err(|e| failed(backend, e))?;
        *req.version_mut() = Version::HTTP_11;
        let sent = async {
            if let Some(upload) = upload {
                match body_total {
                    Some(total) => drop(tokio::time::timeout(total, upload.ended()).await),
                    None => upload.ended().await,
                }
            }
        };
        let answered = async {
            sent.await;
            tokio::time::sleep(timeout).await;
        };
        tokio::select! {
            biased;
            result = self.client.request(req) => match result {
                Ok(resp) => Ok(resp),
                Err(e) if e.is_connect() => {
                    Err(BackendError::Connect { backend: backend.id.to_string(), source: Box::new(e) })
                }
                Err(e) => Err(failed(backend, e)),
            },
            () = answered => Err(BackendError::Timeout { backend: backend.id.to_string(), after: timeout }),
        }
    }
}

fn failed(backend: &Backend, e: impl std::error::Error + Send + Sync + 'static) -> BackendError {
    BackendError::Failed { backend: backend.id.to_string(), source: Box::new(e) }
}
