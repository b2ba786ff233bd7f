//! The client-library backends without a cluster of their own here ([`System::Postgres`],
//! [`System::Memory`]): what serves them for a run, and the URL the library connects to.
//!
//! PostgreSQL is started with the project's `scripts/services.sh start-postgres` (initdb in a
//! temporary directory, loopback only, a watchdog that stops the server when this process is
//! gone) and stopped with `stop-postgres` when the [`Backend`] is dropped. Where that script
//! is, the caller says (`--services-script` or `$TENURE_SERVICES_SCRIPT`): an installed
//! binary knows no source tree.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _};

use crate::system::{Env, System};

/// What serves a client backend for as long as it lives.
pub struct Backend {
    /// The URL for `tenure::Client::connect`.
    pub url: String,
    /// The PostgreSQL server, stopped on drop (none for `memory:`).
    _service: Option<Service>,
}

impl Backend {
    /// Start what `system` (a [`System::backend_only`] one) needs.
    pub fn start(system: System, env: &Env) -> anyhow::Result<Backend> {
        match system {
            System::Memory => Ok(Backend {
                // One name per process: nothing else shares this in-process backend.
                url: format!("memory:tenure-bench-{}", std::process::id()),
                _service: None,
            }),
            System::Postgres => {
                let script = services_script(env)?;
                let service = Service::start(script, "postgres", &env.work_dir)?;
                Ok(Backend {
                    url: service.url.clone(),
                    _service: Some(service),
                })
            }
            other => bail!("{other} has a cluster of its own, not a client backend"),
        }
    }
}

/// The services script of `env`, checked: given, and a file.
pub fn services_script(env: &Env) -> anyhow::Result<&Path> {
    let Some(script) = env.services_script.as_deref() else {
        bail!(
            "the postgres system runs PostgreSQL with the project's scripts/services.sh \
             (start-postgres): give its path with --services-script or $TENURE_SERVICES_SCRIPT"
        );
    };
    if !script.is_file() {
        bail!(
            "--services-script {}: no such file (the project's scripts/services.sh)",
            script.display()
        );
    }
    Ok(script)
}

/// A server started by the services script, stopped when dropped.
struct Service {
    script: PathBuf,
    kind: &'static str,
    dir: tempfile::TempDir,
    url: String,
}

impl Service {
    fn start(script: &Path, kind: &'static str, work_dir: &Path) -> anyhow::Result<Service> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("tenure-bench-{kind}-"))
            .tempdir_in(work_dir)
            .context("create a temporary directory")?;
        // With this process's id, the script's watchdog stops the server if this process
        // dies without dropping the service.
        let out = Command::new("bash")
            .arg(script)
            .arg(format!("start-{kind}"))
            .arg(dir.path())
            .arg(std::process::id().to_string())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("run {} start-{kind}", script.display()))?;
        if !out.status.success() {
            bail!(
                "{} start-{kind} failed ({}):\n{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim_end()
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let Some(url) = stdout.lines().map(str::trim).rfind(|l| !l.is_empty()) else {
            bail!("{} start-{kind} printed no URL", script.display());
        };
        Ok(Service {
            script: script.to_path_buf(),
            kind,
            url: url.to_string(),
            dir,
        })
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let stopped = Command::new("bash")
            .arg(&self.script)
            .arg(format!("stop-{}", self.kind))
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status();
        if !matches!(stopped, Ok(s) if s.success()) {
            eprintln!(
                "tenure bench: stop-{} in {} did not succeed ({stopped:?}); its watchdog stops it when this process exits",
                self.kind,
                self.dir.path().display()
            );
        }
    }
}
