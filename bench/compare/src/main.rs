//! roomgate-compare: roomgate next to nginx and HAProxy (when installed), each on one pinned core
//! with one worker, in front of the same four in-process backends, with the same load. Prints a
//! markdown table of medians over interleaved rounds. Run it through `bench/compare.sh`.

mod backend;
mod load;
mod proxies;
mod ws;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use proxies::{Kind, Proxy};

const USAGE: &str =
    "usage: roomgate-compare [--targets roomgate,nginx,haproxy] [--modes http,ws-echo,ws-connect,ws-idle]
                        [--seconds 5] [--rounds 3] [--idle 5000] [--roomgate target/release/roomgate]
                        [--proxy-cpu 0] [--out FILE]
       roomgate-compare --serve-backends    (only the four backends: prints `id addr` lines)";

struct Options {
    targets: Vec<Kind>,
    modes: Vec<String>,
    window: Duration,
    rounds: usize,
    idle: usize,
    roomgate: PathBuf,
    proxy_cpu: usize,
    out: Option<PathBuf>,
    serve_backends: bool,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        targets: vec![Kind::Nginx, Kind::Haproxy, Kind::Roomgate],
        modes: ["http", "ws-echo", "ws-connect", "ws-idle"].map(String::from).to_vec(),
        window: Duration::from_secs(5),
        rounds: 3,
        idle: 5000,
        roomgate: PathBuf::from("target/release/roomgate"),
        proxy_cpu: 0,
        out: None,
        serve_backends: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--targets" => {
                o.targets = value()?
                    .split(',')
                    .map(|t| Kind::parse(t).ok_or_else(|| format!("unknown target {t:?}")))
                    .collect::<Result<_, _>>()?
            }
            "--modes" => o.modes = value()?.split(',').map(String::from).collect(),
            "--seconds" => o.window = Duration::from_secs_f64(value()?.parse().map_err(|e| format!("--seconds: {e}"))?),
            "--rounds" => o.rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--idle" => o.idle = value()?.parse().map_err(|e| format!("--idle: {e}"))?,
            "--roomgate" => o.roomgate = value()?.into(),
            "--proxy-cpu" => o.proxy_cpu = value()?.parse().map_err(|e| format!("--proxy-cpu: {e}"))?,
            "--out" => o.out = Some(value()?.into()),
            "--serve-backends" => o.serve_backends = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(o)
}

/// One figure per metric name, for one target in one round.
type Figures = BTreeMap<&'static str, f64>;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let opts = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let ticks = proxies::clock_ticks();
    let backends = match backend::start(4).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cannot start backends: {e}");
            std::process::exit(1);
        }
    };
    if opts.serve_backends {
        // For tools that bring their own proxy and load (bench/callgrind-http.sh): print the
        // backends' addresses, then serve until killed.
        for (id, addr) in &backends {
            println!("{id} {addr}");
        }
        std::future::pending::<()>().await;
    }
    let mut targets = Vec::new();
    for kind in &opts.targets {
        match kind.program(&opts.roomgate) {
            Some(p) => targets.push((*kind, p)),
            None => eprintln!("# {} is not installed: skipped", kind.name()),
        }
    }
    let scratch = std::env::temp_dir().join(format!("roomgate-compare-{}", std::process::id()));
    let mut results: BTreeMap<&'static str, Vec<Figures>> = BTreeMap::new();
    for round in 1..=opts.rounds {
        for (kind, program) in &targets {
            let dir = scratch.join(format!("{}-{round}", kind.name()));
            eprintln!("# round {round}/{}: {}", opts.rounds, kind.name());
            match measure(*kind, program, &backends, &dir, &opts, ticks).await {
                Ok(f) => results.entry(kind.name()).or_default().push(f),
                Err(e) => eprintln!("#   {} failed: {e} (log: {})", kind.name(), dir.join("proxy.log").display()),
            }
        }
    }
    let table = render(&results, &opts);
    println!("{table}");
    if let Some(path) = &opts.out
        && let Err(e) = std::fs::write(path, &table)
    {
        eprintln!("cannot write {}: {e}", path.display());
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

async fn measure(
    kind: Kind,
    program: &std::path::Path,
    backends: &[(String, SocketAddr)],
    dir: &std::path::Path,
    opts: &Options,
    ticks: f64,
) -> std::io::Result<Figures> {
    let proxy = Proxy::start(kind, program, backends, dir, opts.proxy_cpu)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], proxy.port));
    let pid = proxy.pid();
    let mut f = Figures::new();
    let mut seen = Vec::new();
    // Warm up: connections to the backends, caches, allocator.
    load::http(addr, 64, Duration::from_millis(500)).await;
    for mode in &opts.modes {
        let cpu0 = proxies::cpu_seconds(pid, ticks);
        let t0 = Instant::now();
        let mut out = match mode.as_str() {
            "http" => load::http(addr, 64, opts.window).await,
            "ws-echo" => load::ws_echo(addr, 64, opts.window).await,
            "ws-connect" => load::ws_connect(addr, 32, opts.window).await,
            "ws-idle" => {
                idle(addr, pid, opts.idle, &mut f).await;
                continue;
            }
            other => {
                eprintln!("#   unknown mode {other:?}: skipped");
                continue;
            }
        };
        let secs = t0.elapsed().as_secs_f64();
        let cpu = (proxies::cpu_seconds(pid, ticks) - cpu0).max(1e-3);
        eprintln!("#   {mode}: {} ops, {} errors, {:.0}% proxy CPU", out.ops, out.errors, 100.0 * cpu / secs);
        match mode.as_str() {
            "http" => {
                f.insert("http_rps", out.ops as f64 / secs);
                f.insert("http_per_core", out.ops as f64 / cpu);
                f.insert("http_p50", out.percentile_us(0.50) as f64);
                f.insert("http_p99", out.percentile_us(0.99) as f64);
            }
            "ws-echo" => {
                f.insert("echo_per_core", out.ops as f64 / cpu);
            }
            _ => {
                f.insert("upgrades_per_core", out.ops as f64 / cpu);
            }
        }
        *f.entry("errors").or_default() += out.errors as f64;
        seen.append(&mut out.seen);
    }
    f.insert("split_rooms", load::split_rooms(&seen) as f64);
    drop(proxy);
    Ok(f)
}

/// Idle sockets: memory per socket, and how much of it comes back once they close.
async fn idle(addr: SocketAddr, pid: u32, n: usize, f: &mut Figures) {
    tokio::time::sleep(Duration::from_secs(1)).await; // let the previous mode's sockets settle
    let before = proxies::rss_kib(pid);
    let (sockets, out) = load::ws_idle_open(addr, n).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let open = proxies::rss_kib(pid);
    let opened = sockets.len().max(1);
    drop(sockets);
    // Allocators return freed memory on their own schedule (jemalloc here: 200 ms decay).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = proxies::rss_kib(pid);
    eprintln!("#   ws-idle: {opened} sockets, {} errors, RSS {before} -> {open} -> {after} KiB", out.errors);
    f.insert("idle_kb_per_conn", (open.saturating_sub(before)) as f64 * 1.024 / opened as f64);
    f.insert("rss_before_mb", before as f64 / 1024.0);
    f.insert("rss_after_mb", after as f64 / 1024.0);
    *f.entry("errors").or_default() += out.errors as f64;
}

// === the table ===

struct Row {
    key: &'static str,
    label: &'static str,
    higher_is_better: bool,
    decimals: usize,
}

const ROWS: &[Row] = &[
    Row { key: "http_rps", label: "HTTP req/s (64 keep-alive conns)", higher_is_better: true, decimals: 0 },
    Row { key: "http_per_core", label: "HTTP req per proxy-core-second", higher_is_better: true, decimals: 0 },
    Row { key: "http_p50", label: "HTTP p50 latency (us)", higher_is_better: false, decimals: 0 },
    Row { key: "http_p99", label: "HTTP p99 latency (us)", higher_is_better: false, decimals: 0 },
    Row {
        key: "echo_per_core",
        label: "WS echo round trips per proxy-core-second",
        higher_is_better: true,
        decimals: 0,
    },
    Row { key: "upgrades_per_core", label: "WS upgrades per proxy-core-second", higher_is_better: true, decimals: 0 },
    Row {
        key: "idle_kb_per_conn",
        label: "idle WebSocket memory per connection (KB)",
        higher_is_better: false,
        decimals: 2,
    },
    Row { key: "rss_before_mb", label: "RSS before idle sockets (MB)", higher_is_better: false, decimals: 1 },
    Row { key: "rss_after_mb", label: "RSS after they close (MB)", higher_is_better: false, decimals: 1 },
    Row { key: "errors", label: "errors", higher_is_better: false, decimals: 0 },
    Row { key: "split_rooms", label: "rooms answered by two backends", higher_is_better: false, decimals: 0 },
];

fn stats(values: &mut [f64]) -> Option<(f64, f64, f64)> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 };
    Some((median, values[0], values[n - 1]))
}

fn render(results: &BTreeMap<&'static str, Vec<Figures>>, opts: &Options) -> String {
    let order: Vec<&str> = opts.targets.iter().map(|k| k.name()).filter(|n| results.contains_key(n)).collect();
    let mut out = format!(
        "Medians of {} interleaved round(s), [min-max]; {} s windows; each proxy on CPU {} with one worker; \
         4 backends and the load on the other core(s).\n\n| metric |",
        opts.rounds,
        opts.window.as_secs_f64(),
        opts.proxy_cpu
    );
    for t in &order {
        out.push_str(&format!(" {t} |"));
    }
    let others: Vec<&str> = order.iter().copied().filter(|t| *t != "roomgate").collect();
    let ratio = order.contains(&"roomgate") && !others.is_empty();
    if ratio {
        out.push_str(" roomgate / best other |");
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(order.len() + usize::from(ratio)));
    out.push('\n');
    for row in ROWS {
        let medians: BTreeMap<&str, f64> = order
            .iter()
            .filter_map(|t| {
                let mut v: Vec<f64> = results[t].iter().filter_map(|f| f.get(row.key).copied()).collect();
                stats(&mut v).map(|(m, _, _)| (*t, m))
            })
            .collect();
        if medians.is_empty() {
            continue;
        }
        out.push_str(&format!("| {} |", row.label));
        for t in &order {
            let mut v: Vec<f64> = results[t].iter().filter_map(|f| f.get(row.key).copied()).collect();
            match stats(&mut v) {
                Some((m, lo, hi)) if v.len() > 1 => {
                    out.push_str(&format!(" {m:.d$} [{lo:.d$}-{hi:.d$}] |", d = row.decimals))
                }
                Some((m, _, _)) => out.push_str(&format!(" {m:.d$} |", d = row.decimals)),
                None => out.push_str(" - |"),
            }
        }
        if ratio {
            let best = others.iter().filter_map(|t| medians.get(t).copied()).fold(None, |acc: Option<f64>, v| {
                Some(match acc {
                    None => v,
                    Some(a) if row.higher_is_better => a.max(v),
                    Some(a) => a.min(v),
                })
            });
            match (medians.get("roomgate"), best) {
                (Some(r), Some(b)) if b > 0.0 && row.key != "errors" && row.key != "split_rooms" => {
                    out.push_str(&format!(" {:.2} |", r / b))
                }
                _ => out.push_str(" |"),
            }
        }
        out.push('\n');
    }
    out
}
