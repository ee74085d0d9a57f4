//! The `roomgate` command: parse the CLI, load the config (exit 64 if it is bad, before binding
//! anything), start tracing, bind, run until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use roomgate::config::{Config, LogFormat};
use roomgate::demo::DemoBackend;
use roomgate::{Listeners, run};
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (config_path, workers, demo) = match cli.command {
        Command::Check { config } => {
            return match load(config.as_ref()) {
                Ok(c) => {
                    print!("{}", c.describe());
                    ExitCode::SUCCESS
                }
                Err(code) => code,
            };
        }
        Command::Run { config, workers } => (config, workers, false),
        Command::Demo => (None, None, true),
    };
    let mut config = match load(config_path.as_ref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(w) = workers {
        config.server.workers = w;
    }
    init_tracing(&config);
    match serve(config, demo) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("roomgate: {e:#}");
            ExitCode::FAILURE
        }
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

fn serve(config: Config, demo: bool) -> anyhow::Result<()> {
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
        if demo {
            let addr = config.server.listen[0];
            println!("roomgate demo: open http://{addr}/ (Ctrl-C stops)");
        }
        run(Listeners { http }, config, shutdown_signal()).await
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
}
