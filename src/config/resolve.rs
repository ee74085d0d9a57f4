//! Name resolution of backend addresses: a `[[backends]]` `addr` (`host:port`) to one socket
//! address, when the config is loaded.

use std::net::{SocketAddr, ToSocketAddrs};

/// `host:port` to one address: IP literals directly, names through the system resolver.
pub(super) fn resolve(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let (host, port) = text.rsplit_once(':').ok_or_else(|| format!("{text:?} has no port; write host:port"))?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("{text:?} is not host:port"));
    }
    let mut addrs = text.to_socket_addrs().map_err(|e| format!("cannot resolve {text:?}: {e}"))?;
    addrs.next().ok_or_else(|| format!("{text:?} resolved to no address"))
}
