//! Health: active HTTP checks of every backend (`[health] path`). Every transition, whether a
//! check or the request path (passive checks) saw it, is logged and counted by `Metrics`.
//!
//! A down backend takes no traffic; its rooms move, one by one as they are next used, to the next
//! backend in their placement order (`Gateway::owner`). When it comes back, rooms that moved stay
//! where they are while they are live or lingering; only new rooms hash to it again.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::task::JoinSet;

use crate::backends::Backend;
use crate::proxy::Gateway;

/// Checks every backend once per `[health] interval` while `[health] path` is set, reading the
/// settings afresh each round so that reloads apply. Runs until the task is dropped.
pub async fn run_checks(gateway: Arc<Gateway>) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).pool_max_idle_per_host(1).build(connector);
    loop {
        let snap = gateway.snapshot();
        let h = snap.config.health.clone();
        let Some(path) = h.path.clone() else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let mut round = JoinSet::new();
        for backend in snap.backends.iter().chain(snap.retiring.iter()) {
            let (client, path, gateway, backend) = (client.clone(), path.clone(), gateway.clone(), backend.clone());
            round.spawn(async move {
                let ok = check(&client, &backend, &path, h.timeout).await;
                let t = if ok { backend.record_success(h.rise) } else { backend.record_failure(h.fall, h.cooldown) };
                if let Some(t) = t {
                    gateway.metrics().health_transition(&backend, t, "active check");
                }
            });
        }
        let pace = tokio::time::sleep(h.interval);
        while round.join_next().await.is_some() {}
        pace.await;
    }
}

/// One check: a GET of `path` answered with 2xx or 3xx within `timeout`.
async fn check(client: &Client<HttpConnector, Empty<Bytes>>, backend: &Backend, path: &str, timeout: Duration) -> bool {
    let Ok(uri) = Uri::builder().scheme("http").authority(backend.authority.clone()).path_and_query(path).build()
    else {
        return false;
    };
    let Ok(req) = Request::get(uri).header(http::header::USER_AGENT, "roomgate-health").body(Empty::new()) else {
        return false;
    };
    match tokio::time::timeout(timeout, client.request(req)).await {
        Ok(Ok(resp)) => {
            let status = resp.status();
            let ok = status.is_success() || status.is_redirection();
            if !ok {
                tracing::debug!(backend = %backend.id, %status, "health check failed");
            }
            ok
        }
        Ok(Err(e)) => {
            tracing::debug!(backend = %backend.id, error = %e, "health check failed");
            false
        }
        Err(_) => {
            tracing::debug!(backend = %backend.id, "health check timed out");
            false
        }
    }
}
