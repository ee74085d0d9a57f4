//! What some suites need besides Rust, checked in one place. A test that needs an external tool
//! starts with
//!
//! ```ignore
//! if !require(&[Tool::RedisServer]) {
//!     return;
//! }
//! ```
//!
//! With everything present that is a no-op. Otherwise it writes a loud `SKIPPED` line straight to
//! the terminal (past libtest's output capture, so a plain `cargo test` shows it) naming what is
//! missing and how to get it, and the test returns: a machine where installing is impossible still
//! runs the rest. Under `CI` (any value but empty, `0` or `false`) a missing tool fails the test
//! instead, so CI never passes by skipping. `tools/test` installs all of it before `cargo test`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How to get everything at once.
const GET_ALL: &str = "tools/test installs it";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// `redis-server` on the PATH (private stores in the shared-directory, fleet and djust suites).
    RedisServer,
    /// Debian's Chromium at `$CHROMIUM` or `/usr/bin/chromium` (the djust browser tests).
    Chromium,
    /// The pinned djust venv in `target/djust-venv` (`tests/djust/setup.sh`, made on first use:
    /// needs `python3` with venv and PyPI).
    DjustVenv,
    /// `kubernetes-validate`, from `ROOMGATE_K8S_VALIDATOR` or `target/k8s-venv`.
    K8sValidator,
    /// `podman` and `runc`, and root (the image suite: `tools/image` builds and runs with them).
    Podman,
    /// `mmdebstrap`, and root (a fresh Debian root for the image's base and the package suite).
    Mmdebstrap,
    /// `cargo deb` (cargo-deb, the package suite).
    CargoDeb,
}

impl Tool {
    /// `None` when present; else what is missing and how to get it.
    fn missing(self) -> Option<String> {
        match self {
            Tool::RedisServer => on_path("redis-server")
                .is_none()
                .then(|| format!("redis-server is not on the PATH: apt-get install redis-server ({GET_ALL})")),
            Tool::Chromium => {
                let chromium = chromium();
                (!chromium.exists())
                    .then(|| format!("{} is missing: apt-get install chromium ({GET_ALL})", chromium.display()))
            }
            Tool::DjustVenv => djust_venv().as_ref().err().cloned(),
            Tool::Podman => missing_tools(&["podman", "runc"], "podman runc"),
            Tool::Mmdebstrap => missing_tools(&["mmdebstrap"], "mmdebstrap"),
            Tool::CargoDeb => on_path("cargo-deb").is_none().then(|| {
                format!(
                    "cargo-deb is not installed: cargo install cargo-deb --locked --no-default-features ({GET_ALL})"
                )
            }),
            Tool::K8sValidator => k8s_validator().is_none().then(|| {
                format!(
                    "kubernetes-validate is not installed: set ROOMGATE_K8S_VALIDATOR, or make target/k8s-venv \
                     from tools/k8s-validate-requirements.txt ({GET_ALL})"
                )
            }),
        }
    }
}

/// Whether every tool in `tools` is there. If one is not: under CI, panics; else says SKIPPED
/// loudly and returns `false` (the caller returns).
pub fn require(tools: &[Tool]) -> bool {
    let missing: Vec<String> = tools.iter().filter_map(|t| t.missing()).collect();
    if missing.is_empty() {
        return true;
    }
    let current = std::thread::current();
    let test = current.name().unwrap_or("a test");
    if in_ci() {
        panic!("{test} cannot run (CI is set, so it fails instead of skipping): {}", missing.join("; "));
    }
    let line = format!("\n*** SKIPPED {test}: {} ***\n", missing.join("; "));
    // Straight to the terminal: eprintln! would be captured and hidden for a test that returns.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    false
}

/// `CI` set to anything but empty, `0` or `false`.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false"))
}

/// What is missing of `names` (on the PATH) and root, which they need here.
fn missing_tools(names: &[&str], packages: &str) -> Option<String> {
    let absent: Vec<&str> = names.iter().copied().filter(|n| on_path(n).is_none()).collect();
    if !absent.is_empty() {
        return Some(format!("{} not on the PATH: apt-get install {packages} ({GET_ALL})", absent.join(", ")));
    }
    let root = std::process::Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    (!root).then(|| format!("{} need root here", names.join(", ")))
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The Chromium the browser tests drive (`tests/djust/browser*.py` read the same variable).
pub fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// The djust venv's python, the venv made or refreshed on first use (`tests/djust/setup.sh` is
/// idempotent and flock-guarded, so concurrent test binaries are safe); the error says what is
/// missing.
pub fn djust_venv() -> &'static Result<PathBuf, String> {
    static ONCE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ONCE.get_or_init(|| {
        let venv = repo().join("target/djust-venv");
        let out = std::process::Command::new(repo().join("tests/djust/setup.sh"))
            .arg(&venv)
            .output()
            .map_err(|e| format!("cannot run tests/djust/setup.sh ({e})"))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_owned();
            return Err(format!(
                "the djust venv could not be made (tests/djust/setup.sh: {last}): it needs python3 with venv \
                 (apt-get install python3-venv) and PyPI ({GET_ALL})"
            ));
        }
        Ok(venv.join("bin/python"))
    })
}

/// `kubernetes-validate`: from ROOMGATE_K8S_VALIDATOR, else the venv `tools/test` makes.
pub fn k8s_validator() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ROOMGATE_K8S_VALIDATOR") {
        return Some(PathBuf::from(path));
    }
    let venv = repo().join("target/k8s-venv/bin/kubernetes-validate");
    venv.exists().then_some(venv)
}
