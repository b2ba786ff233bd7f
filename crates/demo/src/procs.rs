//! The demo's child processes: three `tenure server`s and three `tenure demo-worker`s, all
//! started from the current executable, each in its own process group (so that Ctrl-C reaches
//! only the controller, which then cleans up), each killed by the kernel if the controller
//! dies first (`PR_SET_PDEATHSIG` on Linux), and all killed by [`Procs`]'s `Drop`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tenure_procs::process::{detach, open_log};
use tenure_procs::{signal, Certs, NodeAddrs, NodeSpec, Proc};
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::mpsc;

/// One server node, running or not.
pub struct Server {
    /// Node id (1-based).
    pub id: u64,
    /// Its addresses.
    pub addrs: NodeAddrs,
    /// Its write-ahead log, kept across a restart.
    pub data_dir: PathBuf,
    /// Where its stdout and stderr go (appended to across restarts).
    pub log: PathBuf,
    /// The running process, if any.
    pub child: Option<Proc>,
}

/// One worker process.
pub struct Worker {
    /// Worker number (1-based).
    pub id: u64,
    /// Its process id (for signals).
    pub pid: u32,
    /// Where its stderr goes.
    pub log: PathBuf,
    /// The process.
    pub child: tokio::process::Child,
    /// Whether the controller stopped it with SIGSTOP.
    pub frozen: bool,
}

/// A line from a worker's stdout, stamped on arrival; `None` line = the worker's stdout closed.
pub type WorkerLine = (u64, Instant, Option<String>);

/// The demo cluster's id (it names the nodes' certificates).
pub const CLUSTER_ID: &str = "tenure-demo";
/// The client certificate the controller and the workers present.
pub const DEMO_CLIENT: &str = "demo";

/// Every child of the demo. Dropping it kills them all.
pub struct Procs {
    exe: PathBuf,
    /// The cluster's certificates (`tenure certs` layout): TLS is on everywhere.
    pub tls_dir: PathBuf,
    /// The servers, node `i + 1` at index `i`.
    pub servers: Vec<Server>,
    /// The workers, worker `i + 1` at index `i`.
    pub workers: Vec<Worker>,
}

/// The `tenure://` URL of the demo cluster for the client library: the nodes' client
/// addresses, the cluster's CA and the demo client's certificate in `tls_dir`.
pub fn cluster_url(client_addrs: &[String], tls_dir: &Path) -> String {
    let query = Certs::at(tls_dir).url_query(DEMO_CLIENT);
    format!("tenure://{}?{query}", client_addrs.join(","))
}

impl Procs {
    /// Lay out (but do not start) `n` servers under `dir`, run by the `tenure` binary `exe`.
    pub fn new(dir: &Path, n: usize, exe: PathBuf) -> anyhow::Result<Procs> {
        let tls_dir = dir.join("certs");
        Certs::issue(&tls_dir, CLUSTER_ID, 1..=n as u64, &[DEMO_CLIENT])
            .context("cannot issue the demo's certificates")?;
        let servers = NodeAddrs::free(n)?
            .into_iter()
            .enumerate()
            .map(|(i, addrs)| {
                let id = i as u64 + 1;
                Server {
                    id,
                    addrs,
                    data_dir: dir.join(format!("node-{id}")),
                    log: dir.join(format!("node-{id}.log")),
                    child: None,
                }
            })
            .collect();
        Ok(Procs {
            exe,
            tls_dir,
            servers,
            workers: Vec::new(),
        })
    }

    /// The client (gRPC) addresses of all servers, in node order.
    pub fn client_addrs(&self) -> Vec<String> {
        self.servers
            .iter()
            .map(|s| s.addrs.client.to_string())
            .collect()
    }

    /// Start node `id` (again, after a kill: same addresses, same data directory), with the
    /// default timing.
    pub fn start_server(&mut self, id: u64) -> anyhow::Result<u32> {
        let members = self.servers.iter().map(|s| (s.id, s.addrs)).collect();
        let s = &mut self.servers[id as usize - 1];
        let mut node = NodeSpec::new(id, &s.data_dir, members);
        node.cluster_id = Some(CLUSTER_ID.to_string());
        node.tls_dir = Some(self.tls_dir.clone());
        let child = Proc::spawn(node.command(&self.exe), &s.log)
            .with_context(|| format!("cannot start node {id}"))?;
        let pid = child.pid();
        s.child = Some(child);
        Ok(pid)
    }

    /// SIGKILL node `id` and reap it. Returns its pid.
    pub fn kill_server(&mut self, id: u64) -> Option<u32> {
        let child = self.servers[id as usize - 1].child.take()?;
        let pid = child.pid();
        child.kill();
        Some(pid)
    }

    /// Whether node `id` has a process (that has not exited).
    pub fn server_running(&mut self, id: u64) -> bool {
        self.servers[id as usize - 1]
            .child
            .as_mut()
            .is_some_and(Proc::running)
    }

    /// If node `id` exited on its own (not killed by [`Procs::kill_server`]), its exit
    /// status; the process is then forgotten.
    pub fn server_exited(&mut self, id: u64) -> Option<std::process::ExitStatus> {
        let s = &mut self.servers[id as usize - 1];
        let status = s.child.as_mut()?.exited()?;
        s.child = None;
        Some(status)
    }

    /// Start worker `id`; its stdout lines go to `lines`.
    pub fn start_worker(
        &mut self,
        dir: &Path,
        id: u64,
        ttl_ms: u64,
        compute_ms: u64,
        lines: mpsc::UnboundedSender<WorkerLine>,
    ) -> anyhow::Result<u32> {
        let log_path = dir.join(format!("worker-{id}.log"));
        let log = open_log(&log_path)?;
        let mut std_cmd = std::process::Command::new(&self.exe);
        std_cmd
            .arg("demo-worker")
            .arg("--id")
            .arg(id.to_string())
            .arg("--nodes")
            .arg(self.client_addrs().join(","))
            .arg("--tls-dir")
            .arg(&self.tls_dir)
            .arg("--ttl-ms")
            .arg(ttl_ms.to_string())
            .arg("--compute-ms")
            .arg(compute_ms.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        detach(&mut std_cmd);
        let mut cmd = tokio::process::Command::from(std_cmd);
        cmd.kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start worker {id}"))?;
        let pid = child.id().context("worker exited at once")?;
        let stdout = child.stdout.take().context("worker stdout is piped")?;
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if lines.send((id, Instant::now(), Some(line))).is_err() {
                    return;
                }
            }
            let _ = lines.send((id, Instant::now(), None));
        });
        self.workers.push(Worker {
            id,
            pid,
            log: log_path,
            child,
            frozen: false,
        });
        Ok(pid)
    }

    /// The worker with number `id`.
    pub fn worker(&mut self, id: u64) -> &mut Worker {
        self.workers
            .iter_mut()
            .find(|w| w.id == id)
            .expect("worker ids come from the workers we started")
    }

    /// SIGSTOP a worker.
    pub fn freeze(&mut self, id: u64) -> u32 {
        let w = self.worker(id);
        let _ = signal(w.pid, libc::SIGSTOP);
        w.frozen = true;
        w.pid
    }

    /// SIGCONT a worker.
    pub fn thaw(&mut self, id: u64) -> u32 {
        let w = self.worker(id);
        let _ = signal(w.pid, libc::SIGCONT);
        w.frozen = false;
        w.pid
    }

    /// Kill every worker (they hold no state worth a graceful stop: their sessions simply
    /// expire).
    pub fn kill_workers(&mut self) {
        for w in &mut self.workers {
            let _ = signal(w.pid, libc::SIGKILL);
            let _ = w.child.try_wait();
        }
    }

    /// Stop the servers gracefully (SIGTERM), and kill what is left after `grace`. Returns
    /// the nodes that had to be killed.
    ///
    /// Async on purpose: a server's graceful stop waits for its clients to close their
    /// HTTP/2 connections, and the controller's own connections are driven by this runtime.
    pub async fn stop_servers(&mut self, grace: Duration) -> Vec<u64> {
        for p in self.servers.iter().filter_map(|s| s.child.as_ref()) {
            let _ = p.signal(libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        let mut killed = Vec::new();
        for s in &mut self.servers {
            if let Some(mut p) = s.child.take() {
                if p.wait_exit(deadline.saturating_duration_since(Instant::now()))
                    .await
                    .is_none()
                {
                    p.kill();
                    killed.push(s.id);
                }
            }
        }
        killed
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        // Workers first, so that nothing writes while the cluster goes away; a frozen worker
        // dies of SIGKILL too.
        self.kill_workers();
        for s in &mut self.servers {
            s.child.take();
        }
    }
}
