//! `[[discovery]]` entries checked: a DNS name, an interval of at least 100ms, a resolver address.

use std::net::SocketAddr;
use std::time::Duration;

use toml::Spanned;

use super::{ConfigError, Discovery, Validator, file};

impl Validator<'_> {
    pub(super) fn discovery(&self, entries: &[Spanned<file::DiscoverySection>]) -> Result<Vec<Discovery>, ConfigError> {
        let mut out: Vec<Discovery> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let d = entry.get_ref();
            let srv = d.srv.get_ref();
            if let Err(why) = check_dns_name(srv) {
                return Err(self.err(&d.srv, format!("discovery[{i}].srv = {srv:?} is not a DNS name: {why}")));
            }
            let key = srv.trim_end_matches('.').to_ascii_lowercase();
            if let Some(j) = out.iter().position(|o| o.srv.trim_end_matches('.').eq_ignore_ascii_case(&key)) {
                return Err(self.err(&d.srv, format!("discovery[{i}].srv = {srv:?} is already discovery[{j}]")));
            }
            let interval = d.interval.get_ref().0;
            if interval < Duration::from_millis(100) {
                return Err(self.err(&d.interval, format!("discovery[{i}].interval: at least 100ms")));
            }
            let timeout = d.timeout.get_ref().0;
            if timeout.is_zero() {
                return Err(self.err(&d.timeout, format!("discovery[{i}].timeout must be more than 0")));
            }
            let resolver = match &d.resolver {
                None => None,
                Some(r) => Some(r.get_ref().parse::<SocketAddr>().map_err(|_| {
                    self.err(r, format!("discovery[{i}].resolver = {:?}: expected ip:port", r.get_ref()))
                })?),
            };
            out.push(Discovery { srv: srv.clone(), interval, resolver, timeout });
        }
        Ok(out)
    }
}

/// A DNS name as an SRV owner: dot-separated labels of 1 to 63 letters, digits, `-` or `_`
/// (SRV names start with `_service._proto`), 253 bytes at most; a trailing dot is allowed.
fn check_dns_name(name: &str) -> Result<(), &'static str> {
    let bare = name.strip_suffix('.').unwrap_or(name);
    if bare.is_empty() || bare.len() > 253 {
        return Err("expected 1 to 253 characters");
    }
    for label in bare.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("each label (between dots) has 1 to 63 characters");
        }
        if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err("labels hold letters, digits, '-' and '_' only");
        }
    }
    Ok(())
}
