//! Response bodies on the proxy path: streamed through without buffering, counted for the access
//! log, and the log line written when the body ends (or is dropped, if the client goes away).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::access::AccessRecord;
use crate::directory::Presence;

/// A response body on its way to the client: the backend's stream or roomgate's own bytes.
pub struct ResponseBody {
    inner: Inner,
    log: Option<Box<AccessRecord>>,
    /// Keeps the room live while the response streams.
    presence: Option<Presence>,
}

enum Inner {
    Upstream(Incoming),
    Local(Option<Bytes>),
}

// === impl ResponseBody ===

impl ResponseBody {
    pub fn upstream(body: Incoming) -> Self {
        ResponseBody { inner: Inner::Upstream(body), log: None, presence: None }
    }

    pub fn local(bytes: Bytes) -> Self {
        ResponseBody { inner: Inner::Local(Some(bytes)), log: None, presence: None }
    }

    pub fn empty() -> Self {
        ResponseBody { inner: Inner::Local(None), log: None, presence: None }
    }

    /// Attaches the access record written when this body ends.
    pub fn with_log(mut self, log: Option<Box<AccessRecord>>) -> Self {
        self.log = log;
        self
    }

    /// Attaches the room presence released when this body ends.
    pub fn with_presence(mut self, presence: Option<Presence>) -> Self {
        self.presence = presence;
        self
    }

    fn finish(&mut self, complete: bool) {
        self.presence = None;
        if let Some(log) = self.log.take() {
            log.emit(complete);
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let polled = match &mut this.inner {
            Inner::Upstream(body) => Pin::new(body).poll_frame(cx),
            Inner::Local(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
        };
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(log)) = (frame.data_ref(), this.log.as_mut()) {
                    log.bytes_out += data.len() as u64;
                }
            }
            Poll::Ready(None) => this.finish(true),
            Poll::Ready(Some(Err(_))) => this.finish(false),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Upstream(body) => body.is_end_stream(),
            Inner::Local(bytes) => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Upstream(body) => body.size_hint(),
            Inner::Local(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
        }
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        // Still holding the record: the body never reached its end (client gone, or hyper did
        // not need to poll an empty body).
        let complete = self.is_end_stream();
        self.finish(complete);
    }
}
