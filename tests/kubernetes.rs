//! The Kubernetes manifests in deploy/kubernetes: the config in the ConfigMap loads, the
//! manifests agree with it (ports, paths, grace period, Secrets), Redis is bounded and closed
//! (maxmemory sized from the cap, noeviction, a password, a NetworkPolicy), kustomization.yaml
//! lists every manifest, and every manifest passes the Kubernetes schemas (`kubernetes-validate`, which `tools/test`
//! installs; without it the schema test fails under CI and is skipped loudly elsewhere).

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;
use roomgate::Config;
use roomgate::config::Directory;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn dir() -> PathBuf {
    Path::new(REPO).join("deploy/kubernetes")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The text of the block scalar `key: |` in `yaml`, dedented. Enough for the manifests of this
/// repository: the block ends at the first non-blank line indented less than its first line.
fn block_scalar(yaml: &str, key: &str) -> Option<String> {
    let mut lines = yaml.lines().skip_while(|l| l.trim() != format!("{key}: |")).skip(1).peekable();
    let first = lines.peek()?;
    let indent = first.len() - first.trim_start().len();
    let mut out = String::new();
    for line in lines {
        if !line.trim().is_empty() && line.len() - line.trim_start().len() < indent {
            break;
        }
        out.push_str(line.get(indent..).unwrap_or(""));
        out.push('\n');
    }
    Some(out)
}

/// The first capture of `pattern` in `text`, parsed.
fn find<T: std::str::FromStr>(text: &str, pattern: &str) -> T {
    let re = Regex::new(pattern).unwrap();
    let caps = re.captures(text).unwrap_or_else(|| panic!("no match for {pattern}"));
    caps[1].parse().unwrap_or_else(|_| panic!("{pattern}: cannot parse {:?}", &caps[1]))
}

/// The ConfigMap's roomgate.toml, with the files that the pod's Secrets provide put in a
/// temporary directory instead of /etc/roomgate.
fn configmap_config() -> (String, Config, tempfile::TempDir) {
    let toml = block_scalar(&read("roomgate-config.yaml"), "roomgate.toml").expect("roomgate.toml in the ConfigMap");
    let secrets = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(secrets.path().join("admin")).unwrap();
    std::fs::write(secrets.path().join("admin/token"), "0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::create_dir_all(secrets.path().join("redis")).unwrap();
    std::fs::write(secrets.path().join("redis/password"), "fedcba9876543210fedcba9876543210\n").unwrap();
    std::fs::create_dir_all(secrets.path().join("tls")).unwrap();
    for file in ["tls.crt", "tls.key"] {
        std::fs::copy(Path::new(REPO).join("tests/fixtures/k8s-tls").join(file), secrets.path().join("tls").join(file))
            .unwrap();
    }
    let local = toml.replace("/etc/roomgate/", &format!("{}/", secrets.path().display()));
    let config = Config::from_toml(&local, "deploy/kubernetes/roomgate-config.yaml").unwrap_or_else(|e| panic!("{e}"));
    (toml, config, secrets)
}

#[test]
fn the_configmap_holds_a_valid_config_for_two_replicas() {
    let (_, config, _secrets) = configmap_config();
    assert_eq!(config.server.workers, 1, "one core per replica");
    assert!(matches!(config.directory, Directory::Redis { .. }), "two replicas share their directory");
    assert!(!config.admin.listen.ip().is_loopback(), "the kubelet probes the admin port from outside the pod");
    assert!(config.admin.token.is_some());
    let djust = config.route_for("/ws/live/").unwrap().1;
    assert!(djust.djust().is_some(), "the socket route reads djust's mount frame: {djust:?}");
}

#[test]
fn the_manifests_agree_with_the_config() {
    let (toml, config, _secrets) = configmap_config();
    let raw: toml::Value = toml::from_str(&toml).unwrap();
    let roomgate = read("roomgate.yaml");
    let port = |name: &str| find::<u16>(&roomgate, &format!(r"- name: {name}\s*\n\s*containerPort: (\d+)"));
    assert_eq!(port("http"), config.server.listen[0].port());
    assert_eq!(port("admin"), config.admin.listen.port());
    let tls_listen: std::net::SocketAddr = raw["tls"]["listen"].as_str().unwrap().parse().unwrap();
    assert_eq!(port("https"), tls_listen.port());

    // The kubelet waits for the preStop pause and the shutdown grace before it kills.
    let grace: u64 = find(&roomgate, r"terminationGracePeriodSeconds: (\d+)");
    let pause: u64 = find(&roomgate, r"preStop:\s*\n\s*sleep:\s*\n\s*seconds: (\d+)");
    assert!(pause + config.shutdown.grace.as_secs() < grace, "{pause} s + {:?} >= {grace} s", config.shutdown.grace);

    // Probes on the admin port, answered by roomgate itself.
    assert!(
        roomgate
            .contains("livenessProbe:\n            httpGet:\n              path: /healthz\n              port: admin")
    );
    assert!(
        roomgate
            .contains("readinessProbe:\n            httpGet:\n              path: /readyz\n              port: admin")
    );
    assert_eq!(find::<u32>(&roomgate, r"replicas: (\d+)"), 2);

    // Every file the config names is where a volume is mounted.
    let mount = |volume: &str| -> String { find(&roomgate, &format!(r"- name: {volume}\s*\n\s*mountPath: (\S+)")) };
    let config_file: String = find(&roomgate, r#"args: \["run", "--config", "([^"]+)"\]"#);
    assert_eq!(config_file, format!("{}/roomgate.toml", mount("config")));
    let token_file = raw["admin"]["token_file"].as_str().unwrap();
    assert_eq!(token_file, format!("{}/token", mount("admin-token")));
    assert!(roomgate.contains(&format!("name: ROOMGATE_ADMIN_TOKEN_FILE\n              value: {token_file}")));
    for cert in raw["tls"]["certs"].as_array().unwrap() {
        for key in ["cert", "key"] {
            let path = cert[key].as_str().unwrap();
            assert_eq!(Path::new(path).parent().unwrap(), Path::new(&mount("tls")), "{path}");
        }
    }

    // Discovery asks for the SRV records of the headless Service's named port.
    let game = read("game.yaml");
    let srv = raw["discovery"][0]["srv"].as_str().unwrap();
    let srv_re = Regex::new(r"^_([a-z0-9-]+)\._tcp\.([a-z0-9-]+)\.[a-z0-9-]+\.svc\.cluster\.local$").unwrap();
    let caps = srv_re.captures(srv).unwrap_or_else(|| panic!("srv = {srv:?}"));
    assert!(game.contains(&format!("kind: Service\nmetadata:\n  name: {}\n", &caps[2])), "{srv}");
    assert!(game.contains("clusterIP: None") && game.contains("publishNotReadyAddresses: false"));
    assert!(game.contains(&format!("- name: {} ", &caps[1])), "port named {} in game.yaml", &caps[1]);
    assert!(game.contains(&format!("serviceName: {}\n", &caps[2])));

    // The Redis the directory points at is the one deployed next to it.
    let Directory::Redis { url, password, .. } = &config.directory else { unreachable!() };
    let redis_host: String = find(url, r"^redis://([^:/]+)");
    let redis = read("redis.yaml");
    assert!(redis.contains(&format!("kind: Service\nmetadata:\n  name: {redis_host}\n")), "{url}");

    // One Secret holds the Redis password: Redis is started with it, roomgate reads it.
    assert!(password.is_some(), "directory.password_file is set");
    let password_file = raw["directory"]["password_file"].as_str().unwrap();
    let secret: String = find(&roomgate, r"- name: redis-password\s*\n\s*secret:\s*\n\s*secretName: (\S+)");
    let (redis_secret, redis_key): (String, String) = (
        find(&redis, r"secretKeyRef:\s*\n\s*name: (\S+)"),
        find(&redis, r"secretKeyRef:\s*\n\s*name: \S+\s*\n\s*key: (\S+)"),
    );
    assert_eq!(secret, redis_secret, "roomgate and Redis use the same Secret");
    assert_eq!(password_file, format!("{}/{redis_key}", mount("redis-password")), "the Secret's key is the file read");
    let env: String = find(&redis, r"- name: (\S+)\s*\n\s*valueFrom:\s*\n\s*secretKeyRef:");
    assert!(redis.contains(&format!("- \"--requirepass\"\n            - \"$({env})\"")), "--requirepass from ${env}");
}

/// `kind: X` documents of a multi-document manifest.
fn documents<'a>(yaml: &'a str, kind: &str) -> Vec<&'a str> {
    yaml.split("\n---\n").filter(|d| d.contains(&format!("\nkind: {kind}\n"))).collect()
}

/// "200mb", "1gb", "64m"... as Redis reads them, in bytes.
fn redis_bytes(value: &str) -> u64 {
    let caps = Regex::new(r"^(\d+)(b|k|kb|m|mb|g|gb)?$").unwrap().captures(value).unwrap_or_else(|| panic!("{value}"));
    let n: u64 = caps[1].parse().unwrap();
    n * match caps.get(2).map_or("b", |m| m.as_str()) {
        "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1_000_000,
        "mb" => 1024 * 1024,
        "g" => 1_000_000_000,
        _ => 1024 * 1024 * 1024,
    }
}

#[test]
fn redis_is_bounded_and_admits_only_roomgate() {
    let (_, config, _secrets) = configmap_config();
    let redis = read("redis.yaml");
    let roomgate = read("roomgate.yaml");
    let arg = |name: &str| -> String { find(&redis, &format!("- \"--{name}\"\\s*\\n\\s*- \"([^\"]+)\"")) };

    // maxmemory covers every record the replicas may write, at the largest record size
    // (a 128-byte room key), with the surge replica of a rollout.
    let maxmemory = redis_bytes(&arg("maxmemory"));
    let replicas: u64 = find(&roomgate, r"replicas: (\d+)");
    let surge: u64 = find(&roomgate, r"maxSurge: (\d+)");
    let worst = (replicas + surge) * config.limits.max_rooms as u64 * 280;
    assert!(maxmemory >= worst, "maxmemory {maxmemory} B < {worst} B of records");
    assert_eq!(arg("maxmemory-policy"), "noeviction", "evicting a live room's record could split it");
    let limit: u64 = find(&redis, r"limits:\s*\n\s*memory: (\d+)Mi");
    assert!(limit * 1024 * 1024 > maxmemory * 3 / 2, "the container's memory leaves room for fragmentation");

    // The NetworkPolicy isolates the Redis pods and admits roomgate's on the Redis port.
    let policies = documents(&redis, "NetworkPolicy");
    assert_eq!(policies.len(), 1, "one NetworkPolicy in redis.yaml");
    let policy = policies[0];
    let redis_label: String =
        find(&redis, r"template:\s*\n\s*metadata:\s*\n\s*labels:\s*\n\s*app.kubernetes.io/name: (\S+)");
    let roomgate_label: String =
        find(&roomgate, r"template:\s*\n\s*metadata:\s*\n\s*labels:\s*\n\s*app.kubernetes.io/name: (\S+)");
    let selected: String =
        find(policy, r"(?m)^  podSelector:\s*\n\s*matchLabels:\s*\n\s*app.kubernetes.io/name: (\S+)");
    assert_eq!(selected, redis_label, "the policy selects the Redis pods");
    assert!(policy.contains("policyTypes:\n    - Ingress\n"), "{policy}");
    let admitted: String =
        find(policy, r"from:\s*\n\s*- podSelector:\s*\n\s*matchLabels:\s*\n\s*app.kubernetes.io/name: (\S+)");
    assert_eq!(admitted, roomgate_label, "only roomgate's pods are admitted");
    assert_eq!(policy.matches("podSelector:").count(), 2, "no other peer: {policy}");
    assert!(!policy.contains("namespaceSelector") && !policy.contains("ipBlock"), "{policy}");
    let port: u16 = find(policy, r"port: (\d+)");
    assert_eq!(port, find::<u16>(&redis, r"containerPort: (\d+)"));
    assert_eq!(port, 6379);
}

/// The manifests applied by `kubectl apply -f deploy/kubernetes/`, and the examples beside them.
fn manifests() -> (Vec<String>, Vec<String>) {
    let list = |sub: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir().join(sub))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
            .map(|n| if sub.is_empty() { n } else { format!("{sub}/{n}") })
            .collect();
        names.sort();
        names
    };
    (list(""), list("secrets"))
}

#[test]
fn kustomization_lists_every_manifest() {
    let kustomization = read("kustomization.yaml");
    let mut listed: Vec<String> =
        Regex::new(r"(?m)^  - (\S+\.yaml)$").unwrap().captures_iter(&kustomization).map(|c| c[1].to_owned()).collect();
    listed.sort();
    let (applied, examples) = manifests();
    assert_eq!(listed, applied, "kustomization.yaml and the folder disagree");
    assert!(examples.iter().all(|e| e.contains(".example.")), "secrets/ holds examples only: {examples:?}");

    // kubectl renders it offline, where it is installed.
    match Command::new("kubectl").args(["kustomize"]).arg(dir()).output() {
        Ok(out) if out.status.success() => {
            let rendered = String::from_utf8_lossy(&out.stdout);
            let kinds = rendered.lines().filter(|l| l.starts_with("kind: ")).count();
            let expected: usize = applied.iter().map(|f| read(f).matches("\nkind: ").count()).sum();
            assert_eq!(kinds, expected, "{rendered}");
        }
        Ok(out) => panic!("kubectl kustomize failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => println!("kubectl not available ({e}): rendering not checked"),
    }
}

/// The oldest Kubernetes the manifests are for (the preStop sleep action is on by default from
/// 1.30), and the newest the validator knows.
const VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];

#[test]
fn manifests_pass_the_kubernetes_schemas() {
    if !common::require(&[common::Tool::K8sValidator]) {
        return;
    }
    let validator = common::require::k8s_validator().unwrap();
    let (applied, examples) = manifests();
    let files: Vec<String> = applied.into_iter().chain(examples).collect();
    let resources: usize = files.iter().map(|f| read(f).matches("\nkind: ").count()).sum();
    for version in VERSIONS {
        let out = Command::new(&validator)
            .args(["--strict", "-k", version])
            .args(&files)
            .current_dir(dir())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", validator.display()));
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "Kubernetes {version}:\n{text}");
        // A kind without a schema is only a warning; every resource must have been checked.
        assert_eq!(text.matches(" passed for resource ").count(), resources, "Kubernetes {version}:\n{text}");
        assert!(!text.contains("WARN"), "Kubernetes {version}:\n{text}");
    }

    // And it does reject a wrong manifest.
    let bad = tempfile::tempdir().unwrap();
    let path = bad.path().join("bad.yaml");
    std::fs::write(&path, read("roomgate.yaml").replace("terminationGracePeriodSeconds:", "terminationGraceSeconds:"))
        .unwrap();
    let out = Command::new(&validator).args(["--strict"]).arg(&path).output().unwrap();
    assert!(!out.status.success(), "an unknown field must fail");
}
