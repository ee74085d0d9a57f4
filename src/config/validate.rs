//! The checks on a parsed config file: what needs several values at once, or the file system, or
//! a resolver. [`Validator::config`] turns a [`file::File`] into a [`Config`], or names the key
//! that is wrong. The sections with most rules have their own files: `discovery`, `handoff`,
//! `routes`, `tls`.

use std::path::Path;
use std::time::Duration;

use toml::Spanned;

use super::secret::{self, MIN_TOKEN_LEN, read_token_file};
use super::{
    Admin, BackendSource, BackendSpec, Config, ConfigError, Directory, Drain, Health, Limits, Log, PlacementConfig,
    Reload, Rooms, Server, Shutdown, Timeouts, Upstream, file, resolve,
};

/// Checks a parsed file; `at` makes the error of a span of the text (`0..0`: no line known).
pub(super) struct Validator<'a> {
    pub(super) at: &'a dyn Fn(std::ops::Range<usize>, String) -> ConfigError,
}

impl Validator<'_> {
    pub(super) fn err<T>(&self, spanned: &Spanned<T>, message: String) -> ConfigError {
        (self.at)(spanned.span(), message)
    }

    /// The whole file, section by section. The order of the checks is the order errors are
    /// reported in when a file has several.
    pub(super) fn config(&self, f: file::File, origin: &str) -> Result<Config, ConfigError> {
        let limits = self.limits(&f.limits)?;
        let timeouts = self.timeouts(&f.timeouts)?;
        let placement = self.placement(&f.placement)?;
        let log = self.log(&f.log)?;
        let server = self.server(f.server)?;
        let admin = self.admin(&f.admin)?;
        let health = self.health(&f.health)?;
        let reload = self.reload(&f.reload)?;
        let directory = self.directory(&f.directory)?;
        let discovery = self.discovery(&f.discovery)?;
        let backends = self.backends(f.backends, !discovery.is_empty())?;
        let tls = self.tls(f.tls, &server.listen)?;
        let upstream = self.upstream(&f.upstream)?;
        let handoff = self.handoff(f.handoff)?;
        Ok(Config {
            directory,
            tls,
            handoff,
            origin: origin.to_owned(),
            path: None,
            rooms: Rooms { linger: f.rooms.linger.0, linger_unused: f.rooms.linger_unused.0 },
            health,
            drain: Drain { deadline: f.drain.deadline.0, spread: f.drain.spread.0 },
            admin,
            reload,
            server,
            limits,
            timeouts,
            upstream,
            placement,
            backends,
            discovery,
            routes: self.routes(f.routes)?,
            log,
            shutdown: Shutdown { grace: f.shutdown.grace.0 },
        })
    }

    fn placement(&self, p: &file::PlacementSection) -> Result<PlacementConfig, ConfigError> {
        let vnodes = *p.vnodes.get_ref();
        if !(1..=10_000).contains(&vnodes) {
            return Err(self.err(&p.vnodes, format!("placement.vnodes = {vnodes}: expected 1 to 10000")));
        }
        Ok(PlacementConfig { algorithm: p.algorithm, vnodes })
    }

    /// `log.level`: a level, or a filter of `target=level` directives.
    fn log(&self, l: &file::LogSection) -> Result<Log, ConfigError> {
        let level = l.level.get_ref().clone();
        let valid_level = if level.contains(['=', ',']) {
            tracing_subscriber::EnvFilter::try_new(&level).is_ok()
        } else {
            level.parse::<tracing::level_filters::LevelFilter>().is_ok()
        };
        if !valid_level {
            return Err(
                self.err(&l.level, format!("log.level = {level:?}: expected error, warn, info, debug or trace"))
            );
        }
        Ok(Log { format: l.format, level, access: l.access })
    }

    fn server(&self, s: file::ServerSection) -> Result<Server, ConfigError> {
        if s.listen.0.is_empty() {
            return Err((self.at)(0..0, "server.listen: at least one address is needed".into()));
        }
        if *s.workers.get_ref() > 1024 {
            return Err(self.err(&s.workers, "server.workers: at most 1024".into()));
        }
        Ok(Server {
            listen: s.listen.0,
            trusted_proxies: s.trusted_proxies.into_iter().map(|t| t.0).collect(),
            workers: *s.workers.get_ref(),
        })
    }

    fn reload(&self, r: &file::ReloadSection) -> Result<Reload, ConfigError> {
        if r.interval.get_ref().0.is_zero() {
            return Err(self.err(&r.interval, "reload.interval must be more than 0".into()));
        }
        Ok(Reload { watch: r.watch, interval: r.interval.get_ref().0 })
    }

    fn upstream(&self, u: &file::UpstreamSection) -> Result<Upstream, ConfigError> {
        Ok(Upstream {
            max_idle_per_backend: u.max_idle_per_backend,
            idle_timeout: u.idle_timeout.0,
            max_connections_per_backend: self.count(
                &u.max_connections_per_backend,
                "upstream.max_connections_per_backend",
                false,
            )?,
        })
    }

    fn admin(&self, a: &file::AdminSection) -> Result<Admin, ConfigError> {
        let token = self.token("admin", &a.token, &a.token_file)?;
        let listen = *a.listen.get_ref();
        let max_connections = *a.max_connections.get_ref();
        if !(1..=1_000_000).contains(&max_connections) {
            return Err(self.err(&a.max_connections, "admin.max_connections: expected 1 to 1000000".into()));
        }
        if !listen.ip().is_loopback() && token.is_none() {
            return Err(self.err(
                &a.listen,
                format!(
                    "admin.listen = \"{listen}\" is not a loopback address: set admin.token or admin.token_file to expose the admin API"
                ),
            ));
        }
        Ok(Admin { listen, token, max_connections })
    }

    /// `{section}.token` or `{section}.token_file` (not both): the token, `None` when neither is set
    /// or the token is empty. A token in the file's text, or read from `token_file`, has at least
    /// [`MIN_TOKEN_LEN`] characters.
    pub(super) fn token(
        &self,
        section: &str,
        token: &Option<Spanned<String>>,
        token_file: &Option<Spanned<String>>,
    ) -> Result<Option<String>, ConfigError> {
        Ok(match (token, token_file) {
            (Some(_), Some(f)) => {
                return Err(self.err(f, format!("{section}.token and {section}.token_file are both set: keep one")));
            }
            (_, Some(f)) => Some(
                read_token_file(Path::new(f.get_ref()))
                    .map_err(|why| self.err(f, format!("{section}.token_file = {:?}: {why}", f.get_ref())))?,
            ),
            (Some(t), None) if !t.get_ref().is_empty() && t.get_ref().len() < MIN_TOKEN_LEN => {
                return Err(
                    self.err(t, format!("{section}.token is too short: use at least {MIN_TOKEN_LEN} characters"))
                );
            }
            (Some(t), None) => Some(t.get_ref().clone()).filter(|t| !t.is_empty()),
            (None, None) => None,
        })
    }

    fn health(&self, h: &file::HealthSection) -> Result<Health, ConfigError> {
        if let Some(p) = &h.path
            && !p.get_ref().starts_with('/')
        {
            return Err(self.err(p, format!("health.path = {:?} must start with '/'", p.get_ref())));
        }
        for (name, v) in [("rise", &h.rise), ("fall", &h.fall)] {
            if !(1..=100).contains(v.get_ref()) {
                return Err(self.err(v, format!("health.{name} = {}: expected 1 to 100", v.get_ref())));
            }
        }
        for (name, d) in [("interval", &h.interval), ("timeout", &h.timeout), ("cooldown", &h.cooldown)] {
            if d.get_ref().0.is_zero() {
                return Err(self.err(d, format!("health.{name} must be more than 0")));
            }
        }
        Ok(Health {
            path: h.path.as_ref().map(|p| p.get_ref().clone()),
            interval: h.interval.get_ref().0,
            timeout: h.timeout.get_ref().0,
            rise: *h.rise.get_ref(),
            fall: *h.fall.get_ref(),
            cooldown: h.cooldown.get_ref().0,
        })
    }

    fn directory(&self, d: &file::DirectorySection) -> Result<Directory, ConfigError> {
        match d.backend.get_ref().as_str() {
            "memory" => return Ok(Directory::Memory),
            "redis" => {}
            other => {
                return Err(
                    self.err(&d.backend, format!("directory.backend = {other:?}: expected \"memory\" or \"redis\""))
                );
            }
        }
        let url = d
            .url
            .as_ref()
            .ok_or_else(|| self.err(&d.backend, "directory.backend = \"redis\" needs directory.url".into()))?;
        // One Redis, or a cluster's seed nodes (`redis+cluster://host:port,host:port`).
        let seeds = match crate::directory::cluster_seeds(url.get_ref()) {
            None => vec![url.get_ref().clone()],
            Some(Ok(seeds)) => seeds,
            Some(Err(why)) => return Err(self.err(url, format!("directory.url: {why}"))),
        };
        for seed in seeds {
            if let Err(e) = redis::Client::open(seed.as_str()) {
                return Err(self.err(url, format!("directory.url: {e}")));
            }
        }
        if d.prefix.contains(['{', '}']) {
            return Err(
                self.err(&d.backend, "directory.prefix: no '{' or '}' (roomgate adds hash tags of its own)".into())
            );
        }
        let refresh = d.refresh.get_ref().0;
        if refresh < Duration::from_millis(100) {
            return Err(self.err(&d.refresh, "directory.refresh: at least 100ms".into()));
        }
        let timeout = d.timeout.get_ref().0;
        if timeout.is_zero() || timeout >= refresh {
            return Err(
                self.err(&d.timeout, "directory.timeout must be more than 0 and less than directory.refresh".into())
            );
        }
        let replica_id = match &d.replica_id {
            Some(id)
                if !id.get_ref().is_empty()
                    && id.get_ref().bytes().all(|b| b.is_ascii_graphic())
                    && !id.get_ref().starts_with(['=', '!']) =>
            {
                Some(id.get_ref().clone())
            }
            Some(id) => {
                return Err(self.err(
                    id,
                    "directory.replica_id: expected visible ASCII, no spaces, not starting with '=' or '!'".into(),
                ));
            }
            None => None,
        };
        let password = match &d.password_file {
            Some(f) => Some(
                secret::read_secret_file(Path::new(f.get_ref()))
                    .map_err(|why| self.err(f, format!("directory.password_file = {:?}: {why}", f.get_ref())))?,
            ),
            None => None,
        };
        Ok(Directory::Redis {
            url: url.get_ref().clone(),
            prefix: d.prefix.clone(),
            refresh,
            timeout,
            replica_id,
            password,
        })
    }

    fn limits(&self, l: &file::LimitsSection) -> Result<Limits, ConfigError> {
        let head = *l.max_request_head.get_ref();
        if !(1024..=1024 * 1024).contains(&head) {
            return Err(self.err(
                &l.max_request_head,
                format!("limits.max_request_head = {head}: expected 1024 to 1048576 bytes"),
            ));
        }
        let headers = *l.max_headers.get_ref();
        if !(1..=1000).contains(&headers) {
            return Err(self.err(&l.max_headers, format!("limits.max_headers = {headers}: expected 1 to 1000")));
        }
        let first = *l.max_first_message.get_ref();
        if !(1024..=16 * 1024 * 1024).contains(&first) {
            return Err(self.err(
                &l.max_first_message,
                format!("limits.max_first_message = {first}: expected 1024 to 16777216 bytes"),
            ));
        }
        let rooms = *l.max_rooms.get_ref();
        if !(100..=100_000_000).contains(&rooms) {
            return Err(self.err(&l.max_rooms, format!("limits.max_rooms = {rooms}: expected 100 to 100000000")));
        }
        let pending = *l.max_pending_sockets.get_ref();
        if pending == 0 {
            return Err(self.err(&l.max_pending_sockets, "limits.max_pending_sockets: at least 1".into()));
        }
        let pending_bytes = match *l.max_pending_bytes.get_ref() {
            file::AutoSize::Auto => None,
            file::AutoSize::Size(file::ByteSize(n)) if n >= first as u64 => {
                Some(usize::try_from(n).unwrap_or(usize::MAX))
            }
            file::AutoSize::Size(file::ByteSize(n)) => {
                return Err(self.err(
                    &l.max_pending_bytes,
                    format!("limits.max_pending_bytes = {n}: at least limits.max_first_message ({first}), or \"auto\""),
                ));
            }
        };
        Ok(Limits {
            max_request_head: head,
            max_headers: headers,
            max_first_message: first,
            max_rooms: rooms,
            max_connections: self.count(&l.max_connections, "limits.max_connections", true)?,
            max_connections_per_ip: self.count(&l.max_connections_per_ip, "limits.max_connections_per_ip", false)?,
            max_pending_sockets: pending,
            max_pending_bytes: pending_bytes,
        })
    }

    /// A count limit: `Some(n)`, or `None` for "off" (or "auto", where `auto_allowed`).
    fn count(&self, c: &Spanned<file::Count>, name: &str, auto_allowed: bool) -> Result<Option<usize>, ConfigError> {
        match *c.get_ref() {
            file::Count::Max(n) => Ok(Some(n)),
            file::Count::Auto if auto_allowed => Ok(None),
            file::Count::Off if !auto_allowed => Ok(None),
            file::Count::Auto => Err(self.err(c, format!("{name}: expected a number or \"off\""))),
            file::Count::Off => Err(self.err(c, format!("{name}: expected a number or \"auto\""))),
        }
    }

    fn timeouts(&self, t: &file::TimeoutsSection) -> Result<Timeouts, ConfigError> {
        for (name, d) in [
            ("connect", &t.connect),
            ("request_head", &t.request_head),
            ("upstream_response", &t.upstream_response),
            ("websocket_close", &t.websocket_close),
            ("first_message", &t.first_message),
            ("client_write", &t.client_write),
        ] {
            if d.get_ref().0.is_zero() {
                return Err(self.err(d, format!("timeouts.{name} must be more than 0")));
            }
        }
        Ok(Timeouts {
            connect: t.connect.get_ref().0,
            request_head: t.request_head.get_ref().0,
            upstream_response: t.upstream_response.get_ref().0,
            websocket_idle: t.websocket_idle.0,
            websocket_close: t.websocket_close.get_ref().0,
            first_message: t.first_message.get_ref().0,
            request_body: t.request_body.0,
            request_body_idle: t.request_body_idle.0,
            client_write: t.client_write.get_ref().0,
        })
    }

    fn backends(
        &self,
        entries: Vec<Spanned<file::BackendEntry>>,
        discovery: bool,
    ) -> Result<Vec<BackendSpec>, ConfigError> {
        if entries.is_empty() && !discovery {
            return Err((self.at)(
                0..0,
                "no backends: add at least one [[backends]] with an id and an addr, or a [[discovery]]".into(),
            ));
        }
        let mut out: Vec<BackendSpec> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let e = entry.get_ref();
            let id = e.id.get_ref();
            if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(
                    self.err(&e.id, format!("backends[{i}].id = {id:?}: expected 1 to 64 visible ASCII characters"))
                );
            }
            if out.iter().any(|b| &b.id == id) {
                return Err(self.err(&e.id, format!("backends[{i}].id = {id:?} is used twice; ids must be unique")));
            }
            let addr = resolve::resolve(e.addr.get_ref())
                .map_err(|why| self.err(&e.addr, format!("backends[{i}].addr: {why}")))?;
            out.push(BackendSpec {
                id: id.clone(),
                addr_text: e.addr.get_ref().clone(),
                addr,
                source: BackendSource::File,
            });
        }
        Ok(out)
    }
}
