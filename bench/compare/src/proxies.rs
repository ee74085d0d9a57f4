//! The proxies under comparison: their configs (one worker each, consistent hashing on the
//! `X-Room` header, upstream keep-alive), starting them pinned to the proxy core, and reading their
//! CPU time and resident memory from /proc.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Roomgate,
    Nginx,
    Haproxy,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Roomgate => "roomgate",
            Kind::Nginx => "nginx",
            Kind::Haproxy => "haproxy",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "roomgate" => Some(Kind::Roomgate),
            "nginx" => Some(Kind::Nginx),
            "haproxy" => Some(Kind::Haproxy),
            _ => None,
        }
    }

    /// The program to run, or `None` when it is not installed.
    pub fn program(self, roomgate: &Path) -> Option<PathBuf> {
        match self {
            Kind::Roomgate => roomgate.exists().then(|| roomgate.to_path_buf()),
            Kind::Nginx => which("nginx"),
            Kind::Haproxy => which("haproxy"),
        }
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A proxy process on `port`, stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Proxy {
    pub port: u16,
    child: Child,
}

impl Proxy {
    pub fn start(
        kind: Kind,
        program: &Path,
        backends: &[(String, SocketAddr)],
        dir: &Path,
        cpu: usize,
    ) -> std::io::Result<Proxy> {
        let port = free_port()?;
        std::fs::create_dir_all(dir.join("tmp"))?;
        let (config, args): (String, Vec<String>) = match kind {
            Kind::Roomgate => {
                let path = dir.join("roomgate.toml");
                (roomgate_config(port, backends), vec!["run".into(), "--config".into(), path.display().to_string()])
            }
            Kind::Nginx => {
                let path = dir.join("nginx.conf");
                (nginx_config(port, backends, dir), vec!["-c".into(), path.display().to_string()])
            }
            Kind::Haproxy => {
                let path = dir.join("haproxy.cfg");
                (haproxy_config(port, backends), vec!["-f".into(), path.display().to_string()])
            }
        };
        let file = match kind {
            Kind::Roomgate => "roomgate.toml",
            Kind::Nginx => "nginx.conf",
            Kind::Haproxy => "haproxy.cfg",
        };
        std::fs::write(dir.join(file), config)?;
        let log = std::fs::File::create(dir.join("proxy.log"))?;
        let child = Command::new("taskset")
            .arg("-c")
            .arg(cpu.to_string())
            .arg(program)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let mut proxy = Proxy { port, child };
        proxy.wait_listening(Duration::from_secs(10))?;
        Ok(proxy)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_listening(&mut self, limit: Duration) -> std::io::Result<()> {
        let start = Instant::now();
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        loop {
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(std::io::Error::other(format!("proxy exited at start: {status}")));
            }
            if start.elapsed() > limit {
                return Err(std::io::Error::other("proxy did not listen within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

// === configs ===

fn roomgate_config(port: u16, backends: &[(String, SocketAddr)]) -> String {
    let mut c = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nworkers = 1\n\n[log]\naccess = false\nlevel = \"warn\"\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\n"
    );
    for (id, addr) in backends {
        c.push_str(&format!("[[backends]]\nid = \"{id}\"\naddr = \"{addr}\"\n\n"));
    }
    c.push_str("[[routes]]\nprefix = \"/\"\nmode = \"room\"\nkeys = [\"header:X-Room\", \"cookie:room\"]\non_missing = \"shared\"\n");
    c
}

fn nginx_config(port: u16, backends: &[(String, SocketAddr)], dir: &Path) -> String {
    let d = dir.display();
    let servers: String = backends.iter().map(|(_, a)| format!("        server {a};\n")).collect();
    format!(
        r#"worker_processes 1;
worker_rlimit_nofile 65535;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 16000; }}
http {{
    access_log off;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    map $http_x_room $room_key {{
        default $http_x_room;
        ""      $cookie_room;
    }}
    upstream backends {{
        hash $room_key consistent;
{servers}        keepalive 128;
        keepalive_requests 1000000;
        keepalive_timeout 60s;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location /ws/live/ {{
            proxy_pass http://backends;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
        }}
        location / {{
            proxy_pass http://backends;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"#
    )
}

fn haproxy_config(port: u16, backends: &[(String, SocketAddr)]) -> String {
    let servers: String = backends.iter().map(|(id, a)| format!("    server {id} {a}\n")).collect();
    format!(
        r#"global
    nbthread 1
    maxconn 9000
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
    timeout tunnel 3600s
    option http-keep-alive
    http-reuse always
frontend fe
    bind 127.0.0.1:{port}
    maxconn 9000
    default_backend rooms
backend rooms
    balance hdr(X-Room)
    hash-type consistent
{servers}"#
    )
}

// === /proc ===

/// `pid` and all its descendants.
fn family(pid: u32) -> Vec<u32> {
    let mut parents = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(p) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            if let Some(ppid) = stat_fields(p).and_then(|f| f.get(1).and_then(|s| s.parse::<u32>().ok())) {
                parents.push((p, ppid));
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    out
}

/// The fields of /proc/PID/stat after the command name (state is field 0, ppid field 1).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 2..];
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// CPU seconds (user + system) used so far by `pid` and its descendants.
pub fn cpu_seconds(pid: u32, ticks_per_second: f64) -> f64 {
    family(pid)
        .into_iter()
        .filter_map(stat_fields)
        .map(|f| {
            let utime: f64 = f.get(11).and_then(|s| s.parse().ok()).unwrap_or(0.0);
            let stime: f64 = f.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
            (utime + stime) / ticks_per_second
        })
        .sum()
}

/// Resident memory of `pid` and its descendants, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    family(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        })
        .sum()
}

pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}
