//! The external servers of `scripts/services.sh`, started for one test on loopback with
//! temporary data and stopped when dropped (and by the script's watchdog if the test process
//! dies first). Here: PostgreSQL with TLS (its certificate verified, name included) and a
//! password, as the contract suite runs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The role `start-postgres` creates with `SVC_PASSWORD`.
pub const PG_USER: &str = "tenure";

/// A PostgreSQL server of the test's own.
pub struct Postgres {
    dir: tempfile::TempDir,
    /// `postgres://tenure:PASSWORD@127.0.0.1:PORT/tenure?sslmode=verify-full&sslrootcert=…`.
    pub url: String,
}

/// `scripts/services.sh` of this checkout.
pub fn services_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/services.sh")
}

impl Postgres {
    /// Starts PostgreSQL with a server certificate for `127.0.0.1` issued by a CA of its
    /// own (plaintext refused) and the role [`PG_USER`] with `password`. Panics, saying how
    /// to install it, when it cannot start.
    pub fn start_secure(password: &str) -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("tenure-pg-")
            .tempdir()
            .expect("a temporary directory");
        let certs = dir.path().join("certs");
        tenure_transport::certs::issue(
            &certs,
            &tenure_transport::certs::CertsRequest {
                cluster_id: "tenure".into(),
                nodes: vec![1],
                clients: Vec::new(),
                hosts: Vec::new(),
                days: 1,
            },
        )
        .expect("issue certificates");
        use tenure_transport::certs::files;
        let out = Command::new("bash")
            .arg(services_sh())
            .arg("start-postgres")
            .arg(dir.path().join("pg"))
            .arg(std::process::id().to_string())
            .env("SVC_TLS_CA", certs.join(files::CA))
            .env("SVC_TLS_CERT", certs.join(files::node(1)))
            .env("SVC_TLS_KEY", certs.join(files::node_key(1)))
            .env("SVC_PASSWORD", password)
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/services.sh");
        assert!(
            out.status.success(),
            "start-postgres failed (is it installed? run `scripts/services.sh install-postgres`):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed = String::from_utf8_lossy(&out.stdout);
        let url = printed.trim().lines().last().unwrap_or_default();
        let url = url.replacen(
            &format!("postgres://{PG_USER}@"),
            &format!("postgres://{PG_USER}:{password}@"),
            1,
        );
        assert!(
            url.contains("sslmode=verify-full"),
            "start-postgres printed {url:?}"
        );
        Postgres { dir, url }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let out = Command::new("bash")
            .arg(services_sh())
            .arg("stop-postgres")
            .arg(self.dir.path().join("pg"))
            .stdin(Stdio::null())
            .output();
        if !matches!(&out, Ok(o) if o.status.success()) {
            eprintln!("stopping PostgreSQL in {:?}: {out:?}", self.dir.path());
        }
    }
}
