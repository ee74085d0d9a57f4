#![forbid(unsafe_code)]
pub mod config;
pub mod placement;
pub mod relay;
pub mod room_key;
