//! Which `tenure` binary the harness runs, and helpers for processes that are expected to
//! end (a server that refuses to start, a CLI command).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::lock::FileLock;

/// The `tenure` binary to run, found up to date or built, once per test process.
pub fn tenure_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("TENURE_BIN") {
            let bin = PathBuf::from(bin);
            assert!(bin.is_file(), "TENURE_BIN={} is not a file", bin.display());
            return bin;
        }
        // The test binary lives at <target>/<profile>/deps/<name>-<hash>.
        let exe = std::env::current_exe().expect("the test binary knows its path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the test binary lives in <target>/<profile>/deps")
            .to_path_buf();
        let bin = profile_dir.join("tenure");
        // One checker-or-builder at a time, so that parallel test processes do not all build
        // (each build re-links the binary, which another process may be starting).
        let _lock = FileLock::acquire("tenure-server-tests-build.lock");
        let workspace = Path::new(
            &std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for tests"),
        )
        .join("../..");
        if is_newer_than_sources(&bin, &workspace) {
            return bin;
        }
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("profile directory name is UTF-8")
            .to_string();
        let target_dir = profile_dir
            .parent()
            .expect("a profile directory has a parent");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "tenure-cli", "--bin", "tenure"])
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(&workspace);
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        let (code, _, stderr) = outcome(&mut cmd);
        assert_eq!(
            code,
            Some(0),
            "building the tenure binary failed ({cmd:?}); set TENURE_BIN to use a prebuilt one\n{stderr}"
        );
        assert!(
            bin.is_file(),
            "cargo built tenure but {} does not exist",
            bin.display()
        );
        bin
    })
}

/// Whether `bin` exists and was written after every file that goes into it: each crate's
/// `Cargo.toml`, `build.rs`, `src/` and `proto/`, and the workspace's `Cargo.toml` and
/// `Cargo.lock` (tests, benches and examples do not go into the binary). Cargo decides
/// freshness by the same modification times.
fn is_newer_than_sources(bin: &Path, workspace: &Path) -> bool {
    fn newest(path: &Path, newest_seen: &mut std::time::SystemTime) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                newest(&entry.path(), newest_seen);
            }
        } else if let Ok(m) = meta.modified() {
            *newest_seen = (*newest_seen).max(m);
        }
    }
    let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
        return false;
    };
    let mut sources = std::time::UNIX_EPOCH;
    newest(&workspace.join("Cargo.toml"), &mut sources);
    newest(&workspace.join("Cargo.lock"), &mut sources);
    for krate in std::fs::read_dir(workspace.join("crates"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for part in ["Cargo.toml", "build.rs", "src", "proto"] {
            newest(&krate.path().join(part), &mut sources);
        }
    }
    built >= sources
}

/// A finished process's exit code, stdout and stderr (as text).
pub fn outcome(cmd: &mut Command) -> (Option<i32>, String, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `tenure server` as node 1 of a one-node cluster whose addresses nobody can use, with
/// `data_dir` and then `args`, run to its exit: for the tests of what a server refuses at
/// start (it must stop before it binds anything).
pub fn server_refusing_to_start(data_dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    outcome(
        Command::new(tenure_binary())
            .args(["server", "--id", "1", "--node"])
            .arg("1=127.0.0.1:1,127.0.0.1:2,127.0.0.1:3")
            .arg("--data-dir")
            .arg(data_dir)
            .args(args),
    )
}
