//! roomgate's own HTTP/1.1 codec, pure and free of I/O: request and response heads parsed by
//! httparse (hyper's own parser) and held to RFC 9112's framing rules, the strict chunked decoder,
//! and the writers of the heads roomgate sends. The connections that use it are in
//! `proxy::h1`.
//!
//! Strict where a proxy must be (section 6 of RFC 9112): a message whose body length two
//! readers could disagree on is refused, never guessed at.

pub mod chunked;
pub mod framing;
pub mod head;
pub mod lines;
pub mod target;
pub mod write;

#[cfg(test)]
mod tests;

pub use chunked::{ChunkError, ChunkedDecoder, Decoded};
pub use framing::{Framing, FramingError};
pub use head::{HeadError, RequestHead, ResponseHead, parse_request, parse_response};
