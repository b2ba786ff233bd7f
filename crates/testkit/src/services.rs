//! The external servers of `scripts/services.sh`, started for one test on loopback with
//! temporary data and stopped when dropped (and by the script's watchdog if the test process
//! dies first), with security on as the contract suite runs them: PostgreSQL with TLS (its
//! certificate verified, name included) and a password; etcd with TLS, client certificates
//! and a password; ZooKeeper with digest authentication.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tenure_transport::certs::files;

/// The user (role) `start-postgres` and `start-etcd` create with `SVC_PASSWORD`, and the
/// digest user of ZooKeeper URLs.
pub const PG_USER: &str = "tenure";

/// A server of the test's own, started by `scripts/services.sh start-NAME`.
pub struct Service {
    name: &'static str,
    dir: tempfile::TempDir,
    /// The backend URL, password included: `postgres://tenure:PASSWORD@127.0.0.1:PORT/…`,
    /// `etcds://tenure:PASSWORD@127.0.0.1:PORT?ca=…&cert=…&key=…`,
    /// `zk://tenure:PASSWORD@127.0.0.1:PORT`.
    pub url: String,
}

/// `scripts/services.sh` of this checkout.
pub fn services_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/services.sh")
}

impl Service {
    /// PostgreSQL with a server certificate for `127.0.0.1` issued by a CA of its own
    /// (plaintext refused) and the role [`PG_USER`] with `password`. Panics, saying how to
    /// install it, when it cannot start.
    pub fn postgres_secure(password: &str) -> Service {
        let (dir, certs) = Service::dir_and_certs("pg");
        let mut s = Service::start("postgres", dir, &certs, &[("SVC_PASSWORD", password)]);
        s.url = s.url.replacen(
            &format!("postgres://{PG_USER}@"),
            &format!("postgres://{PG_USER}:{password}@"),
            1,
        );
        assert!(
            s.url.contains("sslmode=verify-full"),
            "start-postgres printed {:?}",
            s.url
        );
        s
    }

    /// PostgreSQL with the role [`PG_USER`] and `password`, without TLS: for a test whose
    /// client speaks plaintext only (the synchronous `postgres` driver of
    /// `tenure::fence::postgres`, used without a TLS connector).
    pub fn postgres_with_password(password: &str) -> Service {
        let (dir, _) = Service::dir_and_certs("pg");
        let mut s = Service::start(
            "postgres",
            dir,
            Path::new(""),
            &[("SVC_PASSWORD", password)],
        );
        s.url = s.url.replacen(
            &format!("postgres://{PG_USER}@"),
            &format!("postgres://{PG_USER}:{password}@"),
            1,
        );
        s
    }

    /// PostgreSQL only: ends every other connection of [`PG_USER`] from the server's side
    /// (`pg_terminate_backend`, as an administrator or a restart would), through `psql`;
    /// returns how many it ended.
    pub fn terminate_clients(&self) -> u64 {
        assert_eq!(self.name, "postgres", "terminate_clients is PostgreSQL's");
        let out = Command::new("psql")
            .arg(&self.url)
            .args([
                "-XAtc",
                &format!(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE usename = '{PG_USER}' AND pid <> pg_backend_pid()"
                ),
            ])
            .stdin(Stdio::null())
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a count")
    }

    /// A single etcd node, TLS only (client certificates required), with authentication on:
    /// the user [`PG_USER`] with `password`.
    pub fn etcd_secure(password: &str) -> Service {
        let (dir, certs) = Service::dir_and_certs("etcd");
        let env = [("SVC_PASSWORD", password), ("SVC_CLIENT_CERT_AUTH", "1")];
        let mut s = Service::start("etcd", dir, &certs, &env);
        s.url = s.url.replacen(
            &format!("etcds://{PG_USER}@"),
            &format!("etcds://{PG_USER}:{password}@"),
            1,
        );
        s.url.push_str(&format!(
            "&cert={}&key={}",
            certs.join(files::client("app")).display(),
            certs.join(files::client_key("app")).display()
        ));
        s
    }

    /// A standalone ZooKeeper server, reached with digest authentication as [`PG_USER`] and
    /// `password` (the ACLs the client sets do the work; the server needs nothing).
    pub fn zookeeper(password: &str) -> Service {
        let (dir, _) = Service::dir_and_certs("zk");
        let mut s = Service::start("zookeeper", dir, Path::new(""), &[]);
        s.url = s
            .url
            .replacen("zk://", &format!("zk://{PG_USER}:{password}@"), 1);
        s
    }

    /// A temporary directory, and certificates in it: a CA, node 1's (for `127.0.0.1` and
    /// `localhost`) and the client `app`'s.
    fn dir_and_certs(prefix: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix(&format!("tenure-{prefix}-"))
            .tempdir()
            .expect("a temporary directory");
        let certs = dir.path().join("certs");
        tenure_transport::certs::issue(
            &certs,
            &tenure_transport::certs::CertsRequest {
                cluster_id: "tenure".into(),
                nodes: vec![1],
                clients: vec!["app".into()],
                hosts: Vec::new(),
                days: 1,
            },
        )
        .expect("issue certificates");
        (dir, certs)
    }

    /// `start-NAME` in `dir/NAME` with the server certificate of `certs` (unless `certs` is
    /// empty) and `env`.
    fn start(
        name: &'static str,
        dir: tempfile::TempDir,
        certs: &Path,
        env: &[(&str, &str)],
    ) -> Service {
        let mut cmd = Command::new("bash");
        cmd.arg(services_sh())
            .arg(format!("start-{name}"))
            .arg(dir.path().join(name))
            .arg(std::process::id().to_string())
            .envs(env.iter().copied())
            .stdin(Stdio::null());
        if !certs.as_os_str().is_empty() {
            cmd.env("SVC_TLS_CA", certs.join(files::CA))
                .env("SVC_TLS_CERT", certs.join(files::node(1)))
                .env("SVC_TLS_KEY", certs.join(files::node_key(1)));
        }
        let out = cmd.output().expect("run scripts/services.sh");
        assert!(
            out.status.success(),
            "start-{name} failed (is it installed? run `scripts/services.sh install-{name}`):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed = String::from_utf8_lossy(&out.stdout);
        let url = printed
            .trim()
            .lines()
            .last()
            .unwrap_or_default()
            .to_string();
        Service { name, dir, url }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let out = Command::new("bash")
            .arg(services_sh())
            .arg(format!("stop-{}", self.name))
            .arg(self.dir.path().join(self.name))
            .stdin(Stdio::null())
            .output();
        if !matches!(&out, Ok(o) if o.status.success()) {
            eprintln!("stopping {} in {:?}: {out:?}", self.name, self.dir.path());
        }
    }
}
