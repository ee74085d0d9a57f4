//! The `roomgate` command: parse the CLI, load the config (exit 64 if it is bad, before binding
//! anything), start tracing, raise the descriptor limit, bind, run until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sd_notify::NotifyState;

/// jemalloc instead of glibc's malloc: freed pages go back to the system on a timer, so memory
/// returns after a burst of sockets closes (glibc keeps its arenas fragmented). A default feature,
/// so that what links only the library (the fuzz targets) builds no C allocator.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use clap::{Args, Parser, Subcommand};
use roomgate::admin::{AdminTarget, DrainOptions, drain_command, rebalance_command, undrain_command};
use roomgate::config::{Config, LogFormat, parse_duration, read_token_file};
use roomgate::control::Control;
use roomgate::demo::DemoBackend;
use roomgate::tls::Tls;
use roomgate::{Listeners, Server};
use tokio::net::{TcpListener, TcpSocket};

/// Exit code for a bad config or command line (EX_USAGE).
const EXIT_CONFIG: u8 = 64;

#[derive(Parser)]
#[command(
    name = "roomgate",
    version,
    about = "Edge proxy that pins every room of a live-state WebSocket app to one backend"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve (on the embedded default config when no --config is given).
    Run {
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Runtime worker threads; overrides [server] workers (0 = one per core).
        #[arg(long)]
        workers: Option<usize>,
    },
    /// Validate a config and print its routing table.
    Check {
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// Start three demo backends and serve the embedded default config in front of them.
    Demo,
    /// Drain a backend before a deploy: it gets no new rooms; its live rooms stay until they
    /// empty or the deadline closes them (1012) and moves them. With --wait, exits 0 once it holds
    /// no live room and no socket, 1 with the count left on timeout, 2 if the admin API fails.
    Drain {
        /// Backend id.
        id: String,
        /// Wait until the backend is empty.
        #[arg(long)]
        wait: bool,
        /// Deadline for the rooms still live (default: the server's [drain] deadline).
        #[arg(long, value_parser = parse_duration)]
        deadline: Option<std::time::Duration>,
        /// How long --wait waits (default: the deadline plus 1m, or 10m).
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<std::time::Duration>,
        /// Move every live room now, with its state (needs [handoff]; docs/handoff.md): the
        /// deploy flow is drain --handoff --wait, restart, undrain.
        #[arg(long)]
        handoff: bool,
        #[command(flatten)]
        target: AdminArgs,
    },
    /// Move every live room whose owner is not its placement owner (after a scale-out, or a
    /// backend that came back), with its state. Needs [handoff]. With --wait, exits 0 once the
    /// moves are done, 1 on timeout, 2 if the admin API fails or refuses.
    Rebalance {
        /// Wait until the moves are done.
        #[arg(long)]
        wait: bool,
        /// Move at most this many rooms.
        #[arg(long)]
        max_moves: Option<usize>,
        /// How long --wait waits.
        #[arg(long, value_parser = parse_duration, default_value = "10m")]
        timeout: std::time::Duration,
        #[command(flatten)]
        target: AdminArgs,
    },
    /// End a drain: the backend takes new rooms again. Exits 0 when done, 2 if the admin API
    /// fails or refuses (unknown backend, or one removed from the config).
    Undrain {
        /// Backend id.
        id: String,
        #[command(flatten)]
        target: AdminArgs,
    },
}

/// Where the admin API is and how to authenticate to it (`drain`, `undrain`).
#[derive(Args)]
struct AdminArgs {
    /// Admin API address.
    #[arg(long, default_value = "127.0.0.1:9901")]
    admin: SocketAddr,
    /// Admin token. Without --token or --token-file: ROOMGATE_ADMIN_TOKEN, else the file named
    /// by ROOMGATE_ADMIN_TOKEN_FILE.
    #[arg(long)]
    token: Option<String>,
    /// File holding the admin token, such as a mounted Kubernetes Secret; trailing whitespace is
    /// trimmed.
    #[arg(long, conflicts_with = "token")]
    token_file: Option<PathBuf>,
}

impl AdminArgs {
    /// The token: from the command line first, then from the environment. Flags and variables
    /// are not mixed up as conflicts, so that a pod's ROOMGATE_ADMIN_TOKEN_FILE never stands in
    /// the way of an explicit --token.
    fn target(self) -> Result<AdminTarget, ExitCode> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let read = |path: &std::path::Path| {
            read_token_file(path).map_err(|why| {
                eprintln!("roomgate: admin token file {}: {why}", path.display());
                ExitCode::from(EXIT_CONFIG)
            })
        };
        let token = if let Some(token) = self.token {
            Some(token)
        } else if let Some(path) = self.token_file {
            Some(read(&path)?)
        } else if let Some(token) = env("ROOMGATE_ADMIN_TOKEN") {
            Some(token)
        } else if let Some(path) = env("ROOMGATE_ADMIN_TOKEN_FILE") {
            Some(read(path.as_ref())?)
        } else {
            None
        };
        Ok(AdminTarget { admin: self.admin, token })
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (config_path, workers, demo) = match cli.command {
        Command::Check { config } => return check(config.as_ref()),
        Command::Run { config, workers } => (config, workers, false),
        Command::Demo => (None, None, true),
        admin => return admin_command(admin),
    };
    let mut config = match load(config_path.as_ref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(w) = workers {
        config.server.workers = w;
    }
    let tls = match load_tls(&config) {
        Ok(tls) => tls,
        Err(code) => return code,
    };
    init_tracing(&config);
    raise_descriptor_limit();
    match serve(config, tls, demo) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("roomgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `roomgate check`: validates the config and prints its routing table and certificates.
fn check(config: Option<&PathBuf>) -> ExitCode {
    let loaded = load(config).and_then(|c| Ok((load_tls(&c)?, c)));
    match loaded {
        Ok((tls, c)) => {
            print!("{}", c.describe());
            if let Some(tls) = tls {
                print_certificates(&tls);
            }
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `roomgate drain`, `undrain` and `rebalance`: clients of a running roomgate's admin API.
fn admin_command(command: Command) -> ExitCode {
    let with = |args: AdminArgs, call: &dyn Fn(AdminTarget) -> ExitCode| match args.target() {
        Ok(target) => call(target),
        Err(code) => code,
    };
    match command {
        Command::Drain { id, wait, deadline, timeout, handoff, target } => with(target, &|target| {
            let timeout = timeout.unwrap_or(deadline.map_or(Duration::from_secs(600), |d| d + Duration::from_secs(60)));
            let opts = DrainOptions { backend: id.clone(), target, deadline, wait, timeout, handoff };
            admin_call(drain_command(&opts))
        }),
        Command::Rebalance { wait, max_moves, timeout, target } => {
            with(target, &|target| admin_call(rebalance_command(&target, max_moves, wait, timeout)))
        }
        Command::Undrain { id, target } => with(target, &|target| admin_call(undrain_command(&target, &id))),
        Command::Check { .. } | Command::Run { .. } | Command::Demo => ExitCode::FAILURE,
    }
}

/// Runs one admin client command on a small runtime of its own; its result is the exit code.
fn admin_call(command: impl std::future::Future<Output = u8>) -> ExitCode {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => ExitCode::from(rt.block_on(command)),
        Err(_) => ExitCode::from(2),
    }
}

fn load(path: Option<&PathBuf>) -> Result<Config, ExitCode> {
    let loaded = match path {
        Some(p) => Config::load(p),
        None => Config::embedded(),
    };
    loaded.map_err(|e| {
        eprintln!("roomgate: invalid config: {e}");
        ExitCode::from(EXIT_CONFIG)
    })
}

/// Loads the TLS certificates of `config`: one that does not load is a config error.
fn load_tls(config: &Config) -> Result<Option<Arc<Tls>>, ExitCode> {
    let Some(tls) = &config.tls else { return Ok(None) };
    Tls::load(&tls.certs).map(Some).map_err(|e| {
        eprintln!("roomgate: invalid config: {}: tls: {e}", config.origin);
        ExitCode::from(EXIT_CONFIG)
    })
}

fn print_certificates(tls: &Tls) {
    println!("\ntls certificates (the first is the default):");
    for c in tls.status() {
        let expiry = c.not_after.as_deref().unwrap_or("?");
        println!("  {}: {} (expires {expiry})", c.cert, c.names.join(", "));
    }
}

fn init_tracing(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.log.level));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match config.log.format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Raises the soft file-descriptor limit to the hard one before anything is bound: the default
/// soft limit (often 1024) would cap roomgate far below what the machine allows, and
/// `limits.max_connections = "auto"` is derived from it.
fn raise_descriptor_limit() {
    match roomgate::limits::fd::raise_nofile() {
        Ok(r) if r.now > r.before => tracing::info!(from = r.before, to = r.now, "file-descriptor limit raised"),
        Ok(r) => tracing::debug!(limit = r.now, hard = r.hard, "file-descriptor limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the file-descriptor limit; keeping the one in force"),
    }
}

fn serve(config: Config, tls_state: Option<Arc<Tls>>, demo: bool) -> anyhow::Result<()> {
    let runtime = match config.server.workers {
        1 => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        0 => tokio::runtime::Builder::new_multi_thread().enable_all().build()?,
        n => tokio::runtime::Builder::new_multi_thread().worker_threads(n).enable_all().build()?,
    };
    runtime.block_on(async move {
        if demo {
            start_demo_backends(&config).await?;
        }
        let mut http = Vec::new();
        for addr in &config.server.listen {
            http.push(bind(*addr).with_context(|| format!("cannot listen on {addr}"))?);
        }
        let mut tls = Vec::new();
        for addr in config.tls.iter().flat_map(|t| &t.listen) {
            tls.push(bind(*addr).with_context(|| format!("cannot listen on {addr} (TLS)"))?);
        }
        let admin_addr = config.admin.listen;
        let admin = Some(bind(admin_addr).with_context(|| format!("cannot listen on {admin_addr} (admin API)"))?);
        if demo {
            let addr = config.server.listen[0];
            println!(
                "roomgate demo: open http://{addr}/ (admin API on http://{admin_addr}/admin/status; Ctrl-C stops)"
            );
        }
        let server = Server::with_tls(config, tls_state);
        tokio::spawn(reload_on_sighup(server.control()));
        // Every listener is bound and listening: a connection made now waits in its backlog.
        notify(&[NotifyState::Ready, NotifyState::Status("serving")]);
        server.serve(Listeners { http, tls, admin }, shutdown_signal()).await
    })
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

async fn start_demo_backends(config: &Config) -> anyhow::Result<()> {
    for b in &config.backends {
        let listener = bind(b.addr).with_context(|| format!("demo backend {} cannot listen on {}", b.id, b.addr))?;
        tokio::spawn(DemoBackend::new(&b.id).serve(listener));
        tracing::info!(backend = %b.id, addr = %b.addr, "demo backend started");
    }
    Ok(())
}

/// SIGHUP reloads the config file; a failed reload is logged and the config in force stays.
async fn reload_on_sighup(control: Arc<Control>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot install the SIGHUP handler; reload through the admin API");
        return;
    };
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP received: reloading the config");
        notify(&[
            NotifyState::Reloading,
            NotifyState::monotonic_usec_now().unwrap_or(NotifyState::Status("reloading")),
        ]);
        let status = match control.reload().await {
            Ok(_) => "serving",
            Err(e) => {
                tracing::warn!(error = %e, "reload on SIGHUP failed");
                "serving; the last reload failed, the config before it stays in force"
            }
        };
        notify(&[NotifyState::Ready, NotifyState::Status(status)]);
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::warn!("cannot install signal handlers; stop roomgate with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
    notify(&[NotifyState::Stopping, NotifyState::Status("draining connections")]);
}

/// Tells the service manager what roomgate is doing (systemd `Type=notify`: `READY=1` once the
/// listeners are bound, `RELOADING=1` and `READY=1` around a SIGHUP reload, `STOPPING=1` on
/// shutdown). Nothing when `NOTIFY_SOCKET` is not set; a failure is logged, never fatal.
fn notify(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "cannot notify the service manager (NOTIFY_SOCKET)");
    }
}
