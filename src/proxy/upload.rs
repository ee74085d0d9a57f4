//! Request bodies on their way to a backend: counted for the access log, held to the client's
//! deadlines, and any failure on the client's side recorded as the client's, so that it is
//! answered 400 or 408 and never counts against the backend's health.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::error::BodyProblem;

/// How long a client may take over its request body (`timeouts.request_body`, `_idle`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Deadlines {
    pub total: Option<Duration>,
    pub idle: Option<Duration>,
}

/// A request body on its way to a backend.
pub struct RequestBody {
    inner: Incoming,
    counted: Option<Arc<AtomicU64>>,
    /// `None` for a body that was complete from the start (most GETs): nothing to watch.
    upload: Option<Arc<Upload>>,
    deadlines: Deadlines,
    start: Instant,
    /// Made on the first wait for the client's bytes: a body that arrives whole needs none.
    timers: Option<Box<Timers>>,
}

/// What the request path learns of a body while the backend reads it: whether it has ended, and
/// if it failed, why.
#[derive(Debug, Default)]
pub struct Upload {
    problem: OnceLock<BodyProblem>,
    ended: AtomicBool,
    notify: Notify,
}

struct Timers {
    total: Option<(Duration, Pin<Box<Sleep>>)>,
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
}

/// The error a failed body gives the upstream client; the request path reads the problem from
/// [`Upload::problem`] instead.
#[derive(Debug, thiserror::Error)]
#[error("request body: {0}")]
pub struct BodyFailed(pub BodyProblem);

// === impl RequestBody ===

impl RequestBody {
    /// `inner` with its deadlines; the [`Upload`] reports on it (`None`: the body was empty).
    pub fn new(inner: Incoming, counted: Option<Arc<AtomicU64>>, deadlines: Deadlines) -> (Self, Option<Arc<Upload>>) {
        let upload = (!inner.is_end_stream()).then(|| Arc::new(Upload::default()));
        let body =
            RequestBody { inner, counted, upload: upload.clone(), deadlines, start: Instant::now(), timers: None };
        (body, upload)
    }

    fn fail(&mut self, problem: BodyProblem) -> Poll<Option<Result<Frame<Bytes>, BodyFailed>>> {
        if let Some(u) = &self.upload {
            u.finish(Some(problem));
        }
        Poll::Ready(Some(Err(BodyFailed(problem))))
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyFailed;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyFailed>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(counter)) = (frame.data_ref(), &this.counted) {
                    counter.fetch_add(data.len() as u64, Ordering::Relaxed);
                }
                if let Some(timers) = &mut this.timers {
                    timers.progress();
                }
                if this.inner.is_end_stream()
                    && let Some(u) = &this.upload
                {
                    u.finish(None);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                if let Some(u) = &this.upload {
                    u.finish(None);
                }
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                let problem = classify(&e);
                tracing::debug!(error = %e, ?problem, "request body failed");
                this.fail(problem)
            }
            Poll::Pending => {
                let (start, deadlines) = (this.start, this.deadlines);
                let timers = this.timers.get_or_insert_with(|| Box::new(Timers::new(start, deadlines)));
                match timers.poll(cx) {
                    Some(problem) => this.fail(problem),
                    None => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A body that stopped with an error: the client went away (or reset its stream) before the
/// end, or sent framing that does not parse (hyper reports a bad chunk as invalid data).
fn classify(e: &hyper::Error) -> BodyProblem {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput => BodyProblem::Malformed,
                _ => BodyProblem::Incomplete,
            };
        }
        source = s.source();
    }
    if e.is_parse() { BodyProblem::Malformed } else { BodyProblem::Incomplete }
}

// === impl Upload ===

impl Upload {
    /// Why the body failed, if it did. Set before the upstream client sees the failure.
    pub fn problem(&self) -> Option<BodyProblem> {
        self.problem.get().copied()
    }

    /// Resolves once the body has ended, whole or not.
    pub async fn ended(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.ended.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    fn finish(&self, problem: Option<BodyProblem>) {
        if let Some(p) = problem {
            let _ = self.problem.set(p);
        }
        self.ended.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }
}

// === impl Timers ===

impl Timers {
    fn new(start: Instant, d: Deadlines) -> Self {
        Timers {
            total: d.total.map(|t| (t, Box::pin(tokio::time::sleep_until(start + t)))),
            idle: d.idle.map(|t| (t, Box::pin(tokio::time::sleep(t)))),
        }
    }

    /// Bytes came: the idle deadline starts again.
    fn progress(&mut self) {
        if let Some((after, sleep)) = &mut self.idle {
            sleep.as_mut().reset(Instant::now() + *after);
        }
    }

    /// The deadline passed, if one did; otherwise registers `cx` with both.
    fn poll(&mut self, cx: &mut Context<'_>) -> Option<BodyProblem> {
        if let Some((after, total)) = &mut self.total
            && total.as_mut().poll(cx).is_ready()
        {
            return Some(BodyProblem::TooSlow(*after));
        }
        if let Some((after, idle)) = &mut self.idle
            && idle.as_mut().poll(cx).is_ready()
        {
            return Some(BodyProblem::Stalled(*after));
        }
        None
    }
}
