//! Tests of the config: defaults, and that every mistake is an error naming its line and key path.

use std::time::Duration;

use super::*;
use crate::placement::Algorithm;

mod handoff;

const MINIMAL: &str = r#"
[[backends]]
id = "a"
addr = "127.0.0.1:9001"

[[routes]]
prefix = "/"
mode = "shared"
"#;

fn err(text: &str) -> ConfigError {
    Config::from_toml(text, "test.toml").unwrap_err()
}

#[test]
fn embedded_default_is_valid() {
    let c = Config::embedded().unwrap();
    assert_eq!(c.backends.len(), 3);
    assert_eq!(c.routes.len(), 3);
    assert_eq!(c.timeouts.connect, Duration::from_secs(3));
    assert_eq!(c.timeouts.request_head, Duration::from_secs(10));
    assert_eq!(c.timeouts.websocket_idle, Some(Duration::from_secs(120)));
    assert_eq!(c.route_for("/room/42/").unwrap().0, 0);
    assert_eq!(c.route_for("/ws/live/").unwrap().0, 1);
    assert_eq!(c.route_for("/lobby").unwrap().0, 2);
    assert!(c.describe().contains("key 1: path:^/room/(?P<room>[^/]+)/"));
}

#[test]
fn minimal_config_takes_defaults() {
    let c = Config::from_toml(MINIMAL, "t").unwrap();
    assert_eq!(c.server.listen, vec!["127.0.0.1:8080".parse().unwrap()]);
    assert_eq!(c.limits.max_request_head, 65536);
    assert_eq!(c.placement.algorithm, Algorithm::Rendezvous);
}

#[test]
fn limits_have_defaults_that_bound_every_client() {
    let c = Config::from_toml(MINIMAL, "t").unwrap();
    assert_eq!(c.limits.max_rooms, 200_000);
    assert_eq!(c.limits.max_connections, None, "auto: derived from the descriptor limit");
    assert_eq!(c.limits.max_connections_per_ip, None, "off");
    assert_eq!(c.limits.max_pending_sockets, 10_000);
    assert_eq!(c.upstream.max_connections_per_backend, None, "off");
    assert_eq!(c.admin.max_connections, 64);
    assert_eq!(c.rooms.linger_unused, Duration::from_secs(5));
    assert_eq!(c.timeouts.websocket_idle, Some(Duration::from_secs(120)), "above djust's 30 s pings");
    assert_eq!(c.timeouts.request_body, Some(Duration::from_secs(300)));
    assert_eq!(c.timeouts.request_body_idle, Some(Duration::from_secs(30)));
    assert_eq!(c.timeouts.client_write, Duration::from_secs(60));
    let text = format!(
        "[limits]\nmax_connections = 5000\nmax_connections_per_ip = 50\n[upstream]\nmax_connections_per_backend = 800\n[timeouts]\nrequest_body = \"off\"\n{MINIMAL}"
    );
    let c = Config::from_toml(&text, "t").unwrap();
    assert_eq!(c.limits.max_connections, Some(5000));
    assert_eq!(c.limits.max_connections_per_ip, Some(50));
    assert_eq!(c.upstream.max_connections_per_backend, Some(800));
    assert_eq!(c.timeouts.request_body, None);
    for (bad, needle) in [
        ("[limits]\nmax_connections = \"off\"\n", "limits.max_connections"),
        ("[limits]\nmax_connections_per_ip = \"auto\"\n", "limits.max_connections_per_ip"),
        ("[limits]\nmax_connections_per_ip = 0\n", "at least 1"),
        ("[limits]\nmax_rooms = 10\n", "limits.max_rooms"),
        ("[admin]\nmax_connections = 0\n", "admin.max_connections"),
    ] {
        let e = err(&format!("{bad}{MINIMAL}"));
        assert_eq!(e.line, Some(2), "{bad}: {e}");
        assert!(e.message.contains(needle), "{bad}: {e}");
    }
}

#[test]
fn unknown_key_names_key_and_line() {
    let e = err(&format!("[server]\nlisten = \"127.0.0.1:1\"\nlisten_addr = \"x\"\n{MINIMAL}"));
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.message.contains("listen_addr"), "{e}");
    assert!(e.to_string().starts_with("test.toml:3: "), "{e}");
}

#[test]
fn bad_values_name_their_line() {
    let cases: &[(&str, usize, &str)] = &[
        ("[timeouts]\nconnect = \"3 seconds\"\n", 2, "invalid duration"),
        ("[placement]\nalgorithm = \"maglev\"\n", 2, "maglev"),
        ("[server]\nlisten = [\"127.0.0.1:80\", \"nope\"]\n", 2, "socket address"),
        ("[server]\ntrusted_proxies = [\"10.0.0.0/33\"]\n", 2, "trusted proxy"),
        ("[placement]\nvnodes = 0\n", 2, "vnodes"),
        ("[log]\nlevel = \"loud\"\n", 2, "log.level"),
        ("[limits]\nmax_first_message = 10\n", 2, "max_first_message"),
        ("[directory]\nbackend = \"etcd\"\n", 2, "directory.backend"),
        ("[directory]\nbackend = \"redis\"\n", 2, "needs directory.url"),
        ("[directory]\nbackend = \"redis\"\nurl = \"http://x\"\n", 3, "directory.url"),
        (
            "[directory]\nbackend = \"redis\"\nurl = \"redis://h\"\nrefresh = \"1s\"\ntimeout = \"2s\"\n",
            5,
            "directory.timeout",
        ),
        ("[timeouts]\nfirst_message = \"0s\"\n", 2, "first_message"),
        ("[directory]\nbackend = \"redis\"\nurl = \"redis+cluster://\"\n", 3, "at least one host"),
        ("[directory]\nbackend = \"redis\"\nurl = \"redis+cluster://a:1/0\"\n", 3, "nothing after them"),
        ("[directory]\nbackend = \"redis\"\nurl = \"redis://h\"\nprefix = \"{rg}\"\n", 2, "directory.prefix"),
        ("[directory]\nbackend = \"redis\"\nurl = \"redis://h\"\nreplica_id = \"=\"\n", 4, "replica_id"),
    ];
    for (prefix, line, needle) in cases {
        let e = err(&format!("{prefix}{MINIMAL}"));
        assert_eq!(e.line, Some(*line), "{prefix}: {e}");
        assert!(e.message.contains(needle), "{prefix}: {e}");
    }
}

#[test]
fn route_rules() {
    let base = "[[backends]]\nid = \"a\"\naddr = \"127.0.0.1:1\"\n";
    let cases: &[(&str, &str)] = &[
        (
            "[[routes]]\nprefix = \"/\"\nmode = \"shared\"\n[[routes]]\nprefix = \"/room/\"\nmode = \"shared\"\n",
            "can never match",
        ),
        ("[[routes]]\nprefix = \"/r/\"\nmode = \"room\"\n", "no keys"),
        ("[[routes]]\nprefix = \"/r/\"\nmode = \"room\"\nkeys = [\"path:^/r/(\\\\d+)\"]\n", "named group `room`"),
        ("[[routes]]\nprefix = \"/r/\"\nmode = \"room\"\nkeys = [\"header:X-Room\", \"cookei:x\"]\n", "unknown kind"),
        ("[[routes]]\nprefix = \"/\"\nmode = \"shared\"\nkeys = [\"header:X\"]\n", "takes no keys"),
        ("[[routes]]\nprefix = \"/\"\nmode = \"shared\"\naffinity_cookie = \"c\"\n", "only applies to room routes"),
        ("[[routes]]\nprefix = \"r/\"\nmode = \"shared\"\n", "must start with '/'"),
        (
            "[[routes]]\nprefix = \"/ws/\"\nmode = \"room\"\nkeys = [\"djust:^/r/(?P<room>\\\\d+)\", \"header:X\"]\n",
            "must come last",
        ),
        ("[[routes]]\nprefix = \"/ws/\"\nmode = \"room\"\nkeys = [\"djust:^/r/(\\\\d+)\"]\n", "named group `room`"),
        (
            "[[routes]]\nprefix = \"/ws/\"\nmode = \"room\"\nkeys = [\"cookie:r\", \"djust:^/r/(?P<room>\\\\d+)\"]\n",
            "cannot also take the room from a cookie",
        ),
        (
            "[[routes]]\nprefix = \"/ws/\"\nmode = \"room\"\nkeys = [\"host:^(?P<room>[a-z]+)\\\\.\", \"djust:^/r/(?P<room>\\\\d+)\"]\n",
            "cannot also take the room from a cookie",
        ),
        ("[[routes]]\nprefix = \"/\"\nmode = \"lobby\"\n", "lobby"),
        ("", "no routes"),
    ];
    for (routes, needle) in cases {
        let e = err(&format!("{base}{routes}"));
        assert!(e.message.contains(needle), "{routes}: {e}");
        if !routes.is_empty() {
            assert!(e.line.is_some(), "{routes}: {e}");
        }
    }
}

#[test]
fn backend_rules() {
    let routes = "[[routes]]\nprefix = \"/\"\nmode = \"shared\"\n";
    let cases: &[(&str, &str, usize)] = &[
        (
            "[[backends]]\nid = \"a\"\naddr = \"127.0.0.1:1\"\n[[backends]]\nid = \"a\"\naddr = \"127.0.0.1:2\"\n",
            "used twice",
            5,
        ),
        ("[[backends]]\nid = \"a b\"\naddr = \"127.0.0.1:1\"\n", "visible ASCII", 2),
        ("[[backends]]\nid = \"a\"\naddr = \"127.0.0.1\"\n", "backends[0].addr", 3),
        ("[[backends]]\nid = \"a\"\naddr = \"127.0.0.1:1\"\nport = 3\n", "unknown field", 4),
    ];
    for (backends, needle, line) in cases {
        let e = err(&format!("{backends}{routes}"));
        assert!(e.message.contains(needle), "{backends}: {e}");
        assert_eq!(e.line, Some(*line), "{backends}: {e}");
    }
    assert!(err(routes).message.contains("no backends"));
}

#[test]
fn listen_accepts_one_or_many() {
    let c = Config::from_toml(&format!("[server]\nlisten = [\"127.0.0.1:1\", \"[::1]:2\"]\n{MINIMAL}"), "t").unwrap();
    assert_eq!(c.server.listen.len(), 2);
    let c =
        Config::from_toml(&format!("[server]\ntrusted_proxies = [\"10.1.2.3/8\", \"::1\"]\n{MINIMAL}"), "t").unwrap();
    assert_eq!(c.server.trusted_proxies[0].to_string(), "10.0.0.0/8");
}

proptest::proptest! {
    /// Arbitrary text never panics the config loader: it is a config or an error with a message.
    #[test]
    fn arbitrary_text_never_panics(text in "[\\[\\]a-z_=\"\\n .:/0-9{},]{0,300}") {
        if let Err(e) = Config::from_toml(&text, "fuzz") {
            proptest::prop_assert!(!e.message.is_empty());
        }
    }
}

#[test]
fn lifecycle_sections() {
    let c = Config::embedded().unwrap();
    assert_eq!(c.rooms.linger, Duration::from_secs(60));
    assert_eq!(c.drain.deadline, Duration::from_secs(300));
    assert_eq!(c.health.path, None, "active checks are opt-in");
    assert_eq!(c.admin.listen, "127.0.0.1:9901".parse().unwrap());
    assert!(c.reload.watch);
    let cases: &[(&str, &str, usize)] = &[
        ("[admin]\nlisten = \"0.0.0.0:9901\"\n", "not a loopback address", 2),
        ("[admin]\nlisten = \"0.0.0.0:9901\"\ntoken = \"short\"\n", "too short", 3),
        ("[health]\npath = \"healthz\"\n", "must start with '/'", 2),
        ("[health]\nfall = 0\n", "health.fall", 2),
        ("[health]\ninterval = \"0s\"\n", "health.interval", 2),
        ("[reload]\ninterval = \"0s\"\n", "reload.interval", 2),
        ("[rooms]\nlingr = \"1s\"\n", "lingr", 2),
    ];
    for (prefix, needle, line) in cases {
        let e = err(&format!("{prefix}{MINIMAL}"));
        assert!(e.message.contains(needle), "{prefix}: {e}");
        assert_eq!(e.line, Some(*line), "{prefix}: {e}");
    }
    let ok = format!("[admin]\nlisten = \"0.0.0.0:9901\"\ntoken = \"0123456789abcdef\"\n{MINIMAL}");
    assert!(Config::from_toml(&ok, "t").is_ok());
}

/// `[admin] token_file`: the token of a mounted Secret, read at load with its newline trimmed.
#[test]
fn admin_token_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, content: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path.display().to_string()
    };
    let with_file = |path: &str| format!("[admin]\nlisten = \"0.0.0.0:9901\"\ntoken_file = {path:?}\n{MINIMAL}");

    let good = write("good", "0123456789abcdef-secret\n");
    let c = Config::from_toml(&with_file(&good), "t").unwrap();
    assert_eq!(c.admin.token.as_deref(), Some("0123456789abcdef-secret"), "newline trimmed");
    let crlf = write("crlf", "0123456789abcdef-secret\r\n");
    assert_eq!(
        Config::from_toml(&with_file(&crlf), "t").unwrap().admin.token.as_deref(),
        Some("0123456789abcdef-secret")
    );

    let missing = dir.path().join("missing").display().to_string();
    let cases: Vec<(String, &str)> = vec![
        (with_file(&missing), "cannot read it"),
        (with_file(&write("short", "short\n")), "too short"),
        (with_file(&write("empty", "\n")), "is empty"),
        (with_file(&write("two-lines", "0123456789abcdef\nsecond line\n")), "one line"),
    ];
    for (text, needle) in &cases {
        let e = err(text);
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.message.contains("admin.token_file") && e.message.contains(needle), "{e}");
        assert!(!e.message.contains("0123456789abcdef"), "the error must not quote the token: {e}");
    }

    let both = format!("[admin]\ntoken = \"0123456789abcdef\"\ntoken_file = {good:?}\n{MINIMAL}");
    let e = err(&both);
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.message.contains("both set"), "{e}");
}

const SHARED_ROUTE: &str = "[[routes]]\nprefix = \"/\"\nmode = \"shared\"\n";

#[test]
fn discovery_alone_is_a_valid_backend_source() {
    let text = format!(
        "[[discovery]]\nsrv = \"_http._tcp.game.default.svc.cluster.local\"\nresolver = \"10.96.0.10:53\"\n{SHARED_ROUTE}"
    );
    let c = Config::from_toml(&text, "t").unwrap();
    assert!(c.backends.is_empty());
    assert_eq!(c.discovery.len(), 1);
    let d = &c.discovery[0];
    assert_eq!(d.srv, "_http._tcp.game.default.svc.cluster.local");
    assert_eq!(d.interval, Duration::from_secs(5), "default interval");
    assert_eq!(d.timeout, Duration::from_secs(2), "default timeout");
    assert_eq!(d.resolver, Some("10.96.0.10:53".parse().unwrap()));
    let c = Config::from_toml(&format!("[[discovery]]\nsrv = \"_a._tcp.svc.\"\n{SHARED_ROUTE}"), "t").unwrap();
    assert_eq!(c.discovery[0].resolver, None, "the system resolver");
    assert!(Config::embedded().unwrap().discovery.is_empty(), "the embedded default discovers nothing");
}

#[test]
fn discovery_errors_name_their_line() {
    let cases: &[(&str, usize, &str)] = &[
        ("[[discovery]]\nsrv = \"bad name!\"\n", 2, "not a DNS name"),
        ("[[discovery]]\nsrv = \"a..b\"\n", 2, "not a DNS name"),
        ("[[discovery]]\nsrv = \"_a._tcp.x\"\ninterval = \"50ms\"\n", 3, "at least 100ms"),
        ("[[discovery]]\nsrv = \"_a._tcp.x\"\nresolver = \"10.0.0.1\"\n", 3, "expected ip:port"),
        ("[[discovery]]\nsrv = \"_a._tcp.x\"\ntimeout = \"0s\"\n", 3, "timeout"),
        ("[[discovery]]\nsrv = \"_a._tcp.x\"\nport = 1\n", 3, "unknown field"),
        ("[[discovery]]\nsrv = \"_a._tcp.x\"\n[[discovery]]\nsrv = \"_A._tcp.x.\"\n", 4, "already discovery[0]"),
    ];
    for (section, line, needle) in cases {
        let e = err(&format!("{section}{SHARED_ROUTE}"));
        assert!(e.message.contains(needle), "{section}: {e}");
        assert_eq!(e.line, Some(*line), "{section}: {e}");
    }
}

#[test]
fn tls_section_takes_listeners_and_certificates_in_order() {
    let text = format!(
        "[tls]\nlisten = [\"0.0.0.0:8443\", \"[::]:8443\"]\n[[tls.certs]]\ncert = \"a.pem\"\nkey = \"a.key\"\n\
         [[tls.certs]]\ncert = \"/etc/tls/b.pem\"\nkey = \"/etc/tls/b.key\"\n{MINIMAL}"
    );
    let c = Config::from_toml(&text, "t").unwrap();
    let tls = c.tls.unwrap();
    assert_eq!(tls.listen, vec!["0.0.0.0:8443".parse().unwrap(), "[::]:8443".parse().unwrap()]);
    assert_eq!(tls.certs[0], CertFiles { cert: "a.pem".into(), key: "a.key".into() });
    assert_eq!(tls.certs[1].cert, std::path::PathBuf::from("/etc/tls/b.pem"));
    assert!(Config::from_toml(MINIMAL, "t").unwrap().tls.is_none(), "no [tls]: no TLS");
    assert!(Config::embedded().unwrap().tls.is_none(), "the embedded default serves no TLS");
}

#[test]
fn tls_relative_files_are_relative_to_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("roomgate.toml");
    let text = format!("[tls]\n[[tls.certs]]\ncert = \"tls/a.pem\"\nkey = \"/abs/a.key\"\n{MINIMAL}");
    std::fs::write(&path, text).unwrap();
    let tls = Config::load(&path).unwrap().tls.unwrap();
    assert_eq!(tls.listen, vec!["127.0.0.1:8443".parse().unwrap()], "default listener");
    assert_eq!(tls.certs[0].cert, dir.path().join("tls/a.pem"));
    assert_eq!(tls.certs[0].key, std::path::PathBuf::from("/abs/a.key"));
}

#[test]
fn tls_mistakes_are_config_errors() {
    let cases: &[(&str, &str)] = &[
        ("[tls]\nlisten = \"127.0.0.1:8443\"\n", "no certificate"),
        ("[tls]\nlisten = []\n[[tls.certs]]\ncert = \"a\"\nkey = \"b\"\n", "at least one address"),
        ("[tls]\nlisten = \"127.0.0.1:8080\"\n[[tls.certs]]\ncert = \"a\"\nkey = \"b\"\n", "also in server.listen"),
        ("[tls]\n[[tls.certs]]\ncert = \"a\"\nkey = \"\"\n", "tls.certs[0].key"),
        ("[tls]\n[[tls.certs]]\ncert = \"a\"\n", "missing field `key`"),
        ("[tls]\ncert = \"a\"\n", "unknown field `cert`"),
    ];
    for (section, expected) in cases {
        let e = err(&format!("{section}{MINIMAL}"));
        assert!(e.message.contains(expected), "{section:?}: {e}");
    }
}

/// Every error names the key it is about, as the file spells it: unknown enum variants, type
/// mismatches, unknown fields and bad values alike.
#[test]
fn every_error_names_its_key_path() {
    let backend = "[[backends]]\nid = \"a\"\naddr = \"127.0.0.1:1\"\n";
    let cases = [
        (format!("{backend}[[routes]]\nprefix = \"/\"\nmode = \"roooom\"\n"), "routes[0].mode: unknown variant"),
        ("[server]\nlisten = 5\n".to_owned(), "server.listen: invalid type: integer"),
        (format!("{backend}[timeouts]\nconnect = \"5 parsecs\"\n"), "timeouts.connect: invalid duration"),
        (
            "[[backends]]\nid = \"a\"\naddr = \"127.0.0.1:1\"\nbogus = 1\n".to_owned(),
            "backends[0].bogus: unknown field",
        ),
        (
            format!("{backend}[[routes]]\nprefix = \"/x\"\nmode = \"room\"\nkeys = [\"query:r\", \"cookie:a b\"]\n"),
            "routes[0].keys[1]: invalid key source",
        ),
        (format!("{backend}[placement]\nalgorithm = 3\n"), "placement.algorithm: invalid type"),
        (format!("{backend}[handoff]\nmax_bytes = \"16 parsecs\"\n"), "handoff.max_bytes: invalid size"),
        (format!("{backend}[handoff]\ntimeout = \"5 parsecs\"\n"), "handoff.timeout: invalid duration"),
        (format!("{backend}[handoff]\nconcurrency = \"many\"\n"), "handoff.concurrency: invalid type"),
        (format!("{backend}[handoff]\nbogus = 1\n"), "handoff.bogus: unknown field"),
        (format!("{backend}[handoff]\npath = \"x\"\n"), "handoff.path = \"x\": must start with '/'"),
        (format!("{backend}[handoff]\non_failure = \"later\"\n"), "handoff.on_failure = \"later\""),
    ];
    for (text, wanted) in cases {
        let e = err(&text);
        assert!(e.message.starts_with(wanted), "{text:?}: {e}");
        assert!(e.line.is_some(), "{text:?}: {e} has no line");
    }
}

#[test]
fn a_redis_cluster_is_given_by_its_seed_nodes() {
    let text = format!(
        "[directory]\nbackend = \"redis\"\nurl = \"redis+cluster://u:p@10.0.0.1:6379,10.0.0.2:6379\"\n{MINIMAL}"
    );
    let c = Config::from_toml(&text, "t").unwrap();
    assert!(matches!(c.directory, Directory::Redis { ref url, .. } if url.starts_with("redis+cluster://")));
}
