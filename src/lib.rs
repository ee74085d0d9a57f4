//! roomgate: an edge reverse proxy that pins every room of a live-state WebSocket app to one
//! backend process, the same one from every roomgate replica.
//!
//! Layout, in the order a request meets it:
//! - [`server`]: accepts connections on the listeners it is given and serves HTTP/1.1 and HTTP/2
//!   on them, through TLS on the TLS listeners ([`tls`]: certificates by SNI, reloaded in place).
//! - [`proxy`]: the request path (route, room key, placement, forward or upgrade); HTTP/1.1 on
//!   roomgate's own codec ([`h1`]: strict framing, pure), HTTP/2 and WebSocket handshakes on hyper.
//! - [`handshake`]: whether a request is a WebSocket handshake, decided once per head (pure).
//! - [`room_key`]: where a request carries its room, and what a valid key is (pure).
//! - [`djust`]: djust's protocol as roomgate speaks it, for sockets routed by their mount frame (pure).
//! - [`placement`]: rendezvous or ring placement over stable backend ids (pure).
//! - [`directory`]: the live-room directory (rooms with connections keep their owner), in memory
//!   or shared by several replicas through Redis.
//! - [`snapshot`]: the immutable view (config, backends, placement) a request works from, and
//!   the one publisher that replaces it.
//! - [`relay`]: WebSocket tunnels after the upgrade, frame-boundary aware.
//! - [`limits`]: connection limits (in all, per client address, per backend) and descriptors.
//! - [`config`], [`backends`], [`error`]: the config file, backends, and error-to-response mapping.
//! - [`control`]: reloads, drains and the background loops (fleet sync, maintenance, health),
//!   one file per loop.
//! - [`discovery`]: backend sets read from DNS SRV records, merged with the file's.
//! - [`demo`]: the built-in demo backends of `roomgate demo`.
//!
//! The entry point is [`run`]: bound listeners, a validated config and a shutdown future in; it
//! returns once every connection has finished or the shutdown grace period has run out.

#![forbid(unsafe_code)]

mod accept;
pub mod admin;
pub mod backends;
mod clock;
pub mod config;
pub mod control;
pub mod demo;
pub mod directory;
pub mod discovery;
pub mod djust;
pub mod error;
pub mod fields;
mod forwarded;
pub mod h1;
pub mod handshake;
pub mod limits;
mod lock;
pub mod metrics;
pub mod placement;
pub mod proxy;
pub mod relay;
pub mod room_key;
pub mod server;
pub mod snapshot;
mod table;
pub mod throttle;
pub mod tls;

pub use config::Config;
pub use server::{Listeners, Server, run};
