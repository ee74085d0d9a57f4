//! What a request or a WebSocket holds against the limits while it lasts ([`Holds`]), and the
//! response body that keeps a request's holds until the client has its last byte
//! ([`HeldBody`]), with an HTTP/2 stream's count against its address.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Response;
use http_body::{Body, Frame, SizeHint};

use super::{AddrTicket, ConnTicket, StreamTicket};
use crate::backends::BackendSlot;

/// Counts released when dropped: the client connection (a WebSocket outlives the HTTP
/// connection it came on), the forwarded client's address, the backend slot.
#[derive(Default)]
pub struct Holds {
    pub conn: Option<ConnTicket>,
    pub addr: Option<Box<AddrTicket>>,
    pub backend: Option<BackendSlot>,
}

impl Holds {
    pub fn is_empty(&self) -> bool {
        self.conn.is_none() && self.addr.is_none() && self.backend.is_none()
    }
}

/// A response extension carrying a request's [`Holds`] from the request path to the
/// connection, which keeps them in the response body ([`hold_body`]). Shared only to satisfy
/// the extension map: the connection takes the one copy out.
#[derive(Clone)]
pub struct Held {
    _holds: Arc<Holds>,
}

impl Held {
    /// Attaches `holds` to `resp`, to be released when its body ends.
    pub fn attach<B>(resp: &mut Response<B>, holds: Holds) {
        if !holds.is_empty() {
            resp.extensions_mut().insert(Held { _holds: Arc::new(holds) });
        }
    }
}

/// Moves the holds the request path attached to `resp` into its body.
pub fn hold_body<B>(resp: Response<B>) -> Response<HeldBody<B>> {
    hold_stream(resp, None)
}

/// [`hold_body`], and the HTTP/2 stream's count against its address ([`StreamTicket`]) too.
pub fn hold_stream<B>(mut resp: Response<B>, stream: Option<StreamTicket>) -> Response<HeldBody<B>> {
    let held = resp.extensions_mut().remove::<Held>();
    resp.map(|inner| HeldBody { inner, held, stream })
}

/// A response body that releases its request's holds at its end, or when dropped unfinished
/// (the client went away).
pub struct HeldBody<B> {
    inner: B,
    held: Option<Held>,
    stream: Option<StreamTicket>,
}

impl<B: Body + Unpin> Body for HeldBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None | Some(Err(_))) = polled {
            self.held = None;
            self.stream = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
