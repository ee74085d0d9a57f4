//! The Debian package (`cargo deb`, `[package.metadata.deb]` in Cargo.toml): built around the
//! binary these tests run, installed with `dpkg -i` into a fresh Debian root made by mmdebstrap,
//! and checked there as an operator would: `roomgate check` on the shipped config, the config a
//! conffile, the unit enabled and `systemd-analyze verify`-clean, and how exposed its hardening
//! leaves the service (`systemd-analyze security`). The notify protocol the unit relies on
//! (`Type=notify`) is tests/service.rs.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::require::{Tool, require};

/// Runs `cmd`; what it printed, stdout then stderr (mmdebstrap's hooks print to stderr), or a
/// panic with it.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let printed = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed ({}):\n{printed}", out.status);
    printed
}

/// `cargo deb` around the test binary (the dev profile: `cargo deb` without it builds and packages
/// the release binary, which is what a release ships); the path of the .deb.
fn package(dir: &Path) -> std::path::PathBuf {
    let deb = dir.join("roomgate.deb");
    run(Command::new("cargo")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["deb", "--no-build", "--profile", "dev", "--fast", "--output"])
        .arg(&deb));
    deb
}

#[test]
fn the_package_installs_into_a_fresh_debian_and_its_unit_verifies() {
    if !require(&[Tool::CargoDeb, Tool::Mmdebstrap]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let deb = package(dir.path());
    let info = run(Command::new("dpkg-deb").arg("--info").arg(&deb));
    assert!(info.contains("Package: roomgate") && info.contains("Depends: libc6"), "{info}");
    assert!(info.lines().any(|l| l.starts_with(" Depends: ") && l.contains("procps")), "{info}");
    let root = dir.path().join("root");
    // A minimal bookworm with systemd (for systemd-analyze) and procps (the unit's /bin/kill),
    // then the package installed the way an operator installs it.
    let log = run(Command::new("mmdebstrap")
        .args(["--variant=minbase", "--include=systemd,procps"])
        .arg(format!("--customize-hook=copy-in {} /tmp", deb.display()))
        .arg("--customize-hook=chroot \"$1\" dpkg -i /tmp/roomgate.deb")
        .arg("--customize-hook=chroot \"$1\" roomgate check --config /etc/roomgate/roomgate.toml")
        .arg("--customize-hook=chroot \"$1\" systemd-analyze verify /usr/lib/systemd/system/roomgate.service")
        .arg("--customize-hook=chroot \"$1\" systemd-analyze security --offline=true roomgate.service")
        .args(["bookworm"])
        .arg(&root));
    assert!(log.contains("routes (first matching prefix wins)"), "roomgate check printed no routing table:\n{log}");
    let exposure = log
        .lines()
        .find_map(|l| l.split("Overall exposure level for roomgate.service: ").nth(1))
        .unwrap_or_else(|| panic!("no exposure level:\n{log}"));
    eprintln!("systemd-analyze security: {exposure}");
    let score: f64 = exposure.split_whitespace().next().unwrap().parse().unwrap();
    assert!(score <= 2.0, "the unit leaves the service exposed: {exposure}");

    let root = |p: &str| root.join(p.trim_start_matches('/'));
    // The config is a conffile: an upgrade keeps an operator's edits.
    let status = std::fs::read_to_string(root("/var/lib/dpkg/status")).unwrap();
    let ours = status.split("\n\n").find(|p| p.starts_with("Package: roomgate\n")).unwrap();
    assert!(ours.contains("Conffiles:\n /etc/roomgate/roomgate.toml "), "{ours}");
    // Enabled on install, so it starts at boot.
    assert!(root("/etc/systemd/system/multi-user.target.wants/roomgate.service").is_symlink());
    let unit = std::fs::read_to_string(root("/usr/lib/systemd/system/roomgate.service")).unwrap();
    for line in [
        "Type=notify",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
        "LimitNOFILE=1048576",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit lacks {line}");
    }
}
