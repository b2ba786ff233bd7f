//! Helpers shared by the CLI's integration tests: running the `tenure` binary, child
//! processes that are stopped when dropped (also when a case fails), `tenure campaign` until
//! it leads, and a blocking wrapper around the workspace's cluster harness.

// Not every test file uses every helper.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_tenure");

/// How long a test waits for a line a child process is expected to print.
pub const LINE_TIMEOUT: Duration = Duration::from_secs(20);

/// `tenure args` with stdin closed, to completion.
pub fn tenure(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run tenure")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tenure run --ttl 2s --grace 500ms -- sh -c script` on `url`, to completion.
pub fn run_sh(url: &str, election: &str, script: &str) -> Output {
    tenure(&[
        "run",
        "--election",
        election,
        "--backend",
        url,
        "--ttl",
        "2s",
        "--grace",
        "500ms",
        "--",
        "sh",
        "-c",
        script,
    ])
}

/// `tenure leader` on `url`: its stdout, trimmed, asserting exit 0.
pub fn leader(url: &str, election: &str) -> String {
    let out = tenure(&["leader", "--election", election, "--backend", url]);
    assert!(
        out.status.success(),
        "tenure leader exited {:?}: {}",
        out.status,
        stderr(&out)
    );
    stdout(&out).trim().to_string()
}

/// The next line from `lines`, within [`LINE_TIMEOUT`].
pub fn next_line(lines: &Receiver<String>, what: &str) -> String {
    lines
        .recv_timeout(LINE_TIMEOUT)
        .unwrap_or_else(|_| panic!("no line for {what} in {LINE_TIMEOUT:?}"))
}

/// The query of a cluster URL (its TLS files, with the `?`), for a URL to other addresses.
pub fn query_of(url: &str) -> String {
    url.split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default()
}

/// Wait for `child` to exit within `within`; SIGKILL it and panic if it does not.
pub fn wait_timeout(child: &mut Child, within: Duration) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process {} did not exit within {within:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ------------------------------------------------------------------------------------------
// Child processes.

/// A child process with stdin closed, SIGTERMed (and waited for, then SIGKILLed if it has
/// not exited within 5 s) when dropped, also when a case fails. One that has already been
/// waited for is left alone.
pub struct Spawned(Child);

impl Spawned {
    pub fn new(cmd: &mut Command) -> Spawned {
        Spawned(cmd.stdin(Stdio::null()).spawn().expect("start tenure"))
    }

    /// Its stdout (which must be piped), line by line.
    pub fn lines(&mut self) -> Receiver<String> {
        let (tx, rx) = std::sync::mpsc::channel();
        let out = self.0.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        rx
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, sig) };
    }

    /// Wait for it to exit within `within` (SIGKILL and panic if it does not).
    pub fn wait(&mut self, within: Duration) -> ExitStatus {
        wait_timeout(&mut self.0, within)
    }

    /// SIGTERM, then wait for it to exit within `within`.
    pub fn stop(&mut self, within: Duration) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait(within)
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // A child already reaped keeps its status here; its pid may belong to another
        // process by now.
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tenure campaign` until it leads. By default with `--ttl 2s`, reading the plain token
/// line.
pub struct Campaign<'a> {
    url: &'a str,
    election: &'a str,
    value: &'a OsStr,
    ttl: &'a str,
    pid_file: Option<&'a Path>,
    json: bool,
    fate_sharing: bool,
}

impl<'a> Campaign<'a> {
    pub fn new(url: &'a str, election: &'a str, value: &'a (impl AsRef<OsStr> + ?Sized)) -> Self {
        Campaign {
            url,
            election,
            value: value.as_ref(),
            ttl: "2s",
            pid_file: None,
            json: false,
            fate_sharing: false,
        }
    }

    /// With `--fate-sharing`.
    pub fn fate_sharing(mut self) -> Self {
        self.fate_sharing = true;
        self
    }

    /// Start it without waiting: the process, and its stdout's lines (the token line comes
    /// once it leads).
    pub fn spawn(self) -> (Spawned, Receiver<String>) {
        let mut cmd = Command::new(BIN);
        cmd.args(["campaign", "--election", self.election])
            .args(["--backend", self.url, "--ttl", self.ttl])
            .arg("--value")
            .arg(self.value)
            .stdout(Stdio::piped());
        if let Some(pid_file) = self.pid_file {
            cmd.arg("--pid-file").arg(pid_file);
        }
        if self.json {
            cmd.arg("--json");
        }
        if self.fate_sharing {
            cmd.arg("--fate-sharing");
        }
        let mut holder = Spawned::new(&mut cmd);
        let lines = holder.lines();
        (holder, lines)
    }

    pub fn ttl(mut self, ttl: &'a str) -> Self {
        self.ttl = ttl;
        self
    }

    pub fn pid_file(mut self, pid_file: &'a Path) -> Self {
        self.pid_file = Some(pid_file);
        self
    }

    /// With `--json`: the token line is read as JSON and checked against the election and
    /// the value, and the session comes from it.
    pub fn json(mut self) -> Self {
        self.json = true;
        self
    }

    /// Start it and wait for its token line: the process (resigns when dropped), its token,
    /// and its session (0 without `--json`, whose plain line holds only the token).
    pub fn start(self) -> (Spawned, u64, u64) {
        let (json, election, value) = (self.json, self.election, self.value);
        let (holder, lines) = self.spawn();
        let line = next_line(&lines, "the token line");
        if !json {
            let token = line
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("tenure campaign printed {line:?}, not a token"));
            return (holder, token, 0);
        }
        let o: Value = serde_json::from_str(&line).expect("a JSON line");
        assert_eq!(o["election"], election);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(o["value_base64"].as_str().expect("base64 text"))
            .expect("base64");
        assert_eq!(bytes, value.as_bytes(), "{line}");
        (
            holder,
            o["token"].as_u64().expect("a token"),
            o["session"].as_u64().expect("a session"),
        )
    }
}

// ------------------------------------------------------------------------------------------
// The cluster: the workspace's one harness (TLS and client authentication on), driven from
// synchronous tests through a small runtime.

pub struct Cluster {
    inner: tenure_testkit::Cluster,
    runtime: tokio::runtime::Runtime,
}

impl Cluster {
    /// `n` nodes, started and answering `tenure leader`.
    pub fn start(n: usize) -> Cluster {
        Cluster::start_with(tenure_testkit::Options::nodes(n))
    }

    /// A cluster started with `options`, answering `tenure leader`.
    pub fn start_with(options: tenure_testkit::Options) -> Cluster {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let inner = tenure_testkit::Cluster::start(options);
        let cluster = Cluster { inner, runtime };
        cluster.wait_ready();
        cluster
    }

    /// The cluster's URL, with its CA and the harness's client certificate.
    pub fn url(&self) -> String {
        self.inner.url()
    }

    /// The URL's query (the TLS files), for a URL to other addresses.
    pub fn query(&self) -> String {
        query_of(&self.url())
    }

    pub fn ids(&self) -> Vec<u64> {
        self.inner.ids()
    }

    pub fn addrs(&self, id: u64) -> tenure_testkit::NodeAddrs {
        self.inner.addrs(id)
    }

    /// Every node's client address.
    pub fn clients(&self) -> Vec<SocketAddr> {
        self.ids()
            .into_iter()
            .map(|id| self.addrs(id).client)
            .collect()
    }

    /// SIGKILL node `id`.
    pub fn kill(&mut self, id: u64) {
        self.inner.kill(id);
    }

    /// The running node that says it leads.
    pub fn leader_among_live(&self) -> Option<u64> {
        self.ids().into_iter().find(|&id| {
            self.inner.is_running(id)
                && self
                    .runtime
                    .block_on(self.inner.status(id))
                    .is_some_and(|s| s.is_leader())
        })
    }

    /// The leading node, waiting up to 20 s for one.
    pub fn leader(&self) -> u64 {
        let ids = self.ids();
        self.runtime
            .block_on(self.inner.wait_for_leader(&ids, Duration::from_secs(20)))
            .0
    }

    /// Wait until `tenure leader` gets an answer.
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = tenure(&["leader", "--election", "warm-up", "--backend", &self.url()]);
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cluster not ready: {}",
                stderr(&out)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The workspace's root directory (the docs and sources the tests read).
pub fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/cli sits two levels below the workspace")
        .to_path_buf()
}
