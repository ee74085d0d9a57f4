//! `[[routes]]` checked: prefixes that start with '/' and can all match, the rules of each mode,
//! and valid affinity cookie names.

use toml::Spanned;

use super::{ConfigError, Route, RouteMode, Validator, file};
use crate::room_key::SourceKind;

impl Validator<'_> {
    pub(super) fn routes(&self, entries: Vec<Spanned<file::RouteEntry>>) -> Result<Vec<Route>, ConfigError> {
        if entries.is_empty() {
            return Err((self.at)(
                0..0,
                "no routes: add at least one [[routes]], for example prefix = \"/\" with mode = \"shared\"".into(),
            ));
        }
        let mut out: Vec<Route> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.into_iter().enumerate() {
            let r = entry.into_inner();
            let prefix = r.prefix.get_ref().clone();
            if !prefix.starts_with('/') {
                return Err(self.err(&r.prefix, format!("routes[{i}].prefix = {prefix:?} must start with '/'")));
            }
            if let Some((j, earlier)) = out.iter().enumerate().find(|(_, e)| prefix.starts_with(e.prefix.as_str())) {
                return Err(self.err(
                    &r.prefix,
                    format!("routes[{i}].prefix = {prefix:?} can never match: routes[{j}] (prefix {:?}) comes first and matches every path it does; list longer prefixes first", earlier.prefix),
                ));
            }
            self.route_mode_rules(i, &r)?;
            if let Some(cookie) = &r.affinity_cookie {
                let name = cookie.get_ref();
                if !crate::room_key::is_cookie_name(name) {
                    return Err(
                        self.err(cookie, format!("routes[{i}].affinity_cookie = {name:?} is not a valid cookie name"))
                    );
                }
            }
            out.push(Route {
                prefix,
                mode: r.mode,
                keys: r.keys.into_iter().map(|k| k.into_inner().0).collect(),
                on_missing: r.on_missing.map(|o| o.into_inner()).unwrap_or_default(),
                affinity_cookie: r.affinity_cookie.map(|c| c.into_inner()),
            });
        }
        Ok(out)
    }

    fn route_mode_rules(&self, i: usize, r: &file::RouteEntry) -> Result<(), ConfigError> {
        let problem = match r.mode {
            RouteMode::Room if r.keys.is_empty() => {
                Some((r.prefix.span(), "has mode = \"room\" but no keys: list where the room key comes from"))
            }
            RouteMode::Room => {
                let last = r.keys.len().saturating_sub(1);
                let djust = r.keys.last().is_some_and(|k| k.get_ref().0.kind() == SourceKind::Djust);
                let misplaced = r.keys.iter().take(last).find(|k| k.get_ref().0.kind() == SourceKind::Djust).map(|k| {
                    (k.span(), "keys: a djust: source must come last (it reads the first WebSocket message, after every other source was tried)")
                });
                // Every socket of a djust route is watched: a page of another room than the one
                // its source placed it in closes it (1012) to reconnect. A cookie (shared by a
                // browser's tabs in two rooms) or a host name (not in the page's path) would place
                // it by the same key again, and it would reconnect for ever.
                let unsafe_source = || {
                    r.keys.iter().filter(|_| djust).find(|k| matches!(k.get_ref().0.kind(), SourceKind::Cookie | SourceKind::Host)).map(|k| {
                        (k.span(), "keys: a route with a djust: source cannot also take the room from a cookie: or host: source (a socket placed by one for another room than its page would be closed and placed there again on every reconnect); use query:, header: or path:, or a route of its own")
                    })
                };
                misplaced.or_else(unsafe_source)
            }
            RouteMode::Shared => {
                if let Some(key) = r.keys.first() {
                    Some((key.span(), "keys: a shared route takes no keys (use mode = \"room\")"))
                } else if let Some(on_missing) = &r.on_missing {
                    Some((on_missing.span(), "on_missing only applies to room routes"))
                } else {
                    r.affinity_cookie.as_ref().map(|c| (c.span(), "affinity_cookie only applies to room routes"))
                }
            }
        };
        match problem {
            Some((span, why)) => Err((self.at)(span, format!("routes[{i}] {why}"))),
            None => Ok(()),
        }
    }
}
