//! `tenure run` and the script commands against a real 3-node cluster of `tenure server`
//! children, started by the workspace's test harness (`tenure-testkit`) with TLS and client
//! authentication on.
//!
//! The child commands are `sh` scripts that append `start`, `tick` (every 50 ms) and `stop`
//! lines with `date +%s%N` timestamps to a shared file, so that the test can check from the
//! timestamps that the first holder's command was dead before the second one's started.
//!
//! What is tested is what `tenure run` can honestly guarantee (see src/run.rs):
//! - the runner is cut off from the cluster (a TCP proxy between it and the cluster stops
//!   forwarding): it stops its command on its own clock before the session can expire, and
//!   exits 75 with "lost leadership";
//! - the runner is SIGKILLed: its command dies with it (PR_SET_PDEATHSIG);
//! - the command's exit status is propagated, and its environment carries the token.
//!
//! A frozen host (runner and command both SIGSTOPped) is not tested: nothing on that host can
//! act, which is what fencing tokens are for.

mod common;

use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tenure_testkit::{ms, Proxy};

use common::{leader, next_line, run_sh, stderr, stdout, tenure, Campaign, Cluster, Spawned, BIN};

/// The same, with the ticking done by a grandchild (a background subshell), which only the
/// runner's guard can kill when the runner is SIGKILLed.
const SCRIPT_WITH_GRANDCHILD: &str = r#"
echo "start $1 $(date +%s%N) $$ $TENURE_FENCING_TOKEN $TENURE_ELECTION $TENURE_LEADER_ID" >> "$2"
(while :; do echo "tick $1 $(date +%s%N)" >> "$2"; sleep 0.05; done) &
wait
"#;

/// The child command: records start (with its environment), ticks, and stop on SIGTERM.
const SCRIPT: &str = r#"
echo "start $1 $(date +%s%N) $$ $TENURE_FENCING_TOKEN $TENURE_ELECTION $TENURE_LEADER_ID" >> "$2"
trap 'echo "stop $1 $(date +%s%N)" >> "$2"; exit 0' TERM
while :; do echo "tick $1 $(date +%s%N)" >> "$2"; sleep 0.05; done
"#;

#[test]
fn grace_of_half_the_ttl_or_more_is_rejected() {
    let out = tenure(&[
        "run",
        "--election",
        "e",
        "--backend",
        "memory:",
        "--ttl",
        "2s",
        "--grace",
        "1s",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("--grace") && err.contains("half"), "{err}");
}

/// A password in the backend URL never reaches the output: not in `tenure run`'s error
/// for an unreachable backend, nor in `tenure leader`'s, nor for a malformed URL.
#[test]
fn a_backend_password_never_appears_in_the_output() {
    let secret = "hunter2-do-not-print";
    // Port 1 on loopback: nothing listens, so connecting fails fast with an error that
    // names the backend.
    let unreachable = format!("postgres://app:{secret}@127.0.0.1:1/db?password={secret}");
    let malformed = format!("etcd:app:{secret}");
    for (args, url) in [
        (
            vec!["run", "--election", "e", "--once", "--backend"],
            &unreachable,
        ),
        (vec!["leader", "--election", "e", "--backend"], &unreachable),
        (
            vec!["run", "--election", "e", "--once", "--backend"],
            &malformed,
        ),
    ] {
        let mut argv = args.clone();
        argv.push(url);
        if args[0] == "run" {
            argv.extend(["--", "true"]);
        }
        let out = tenure(&argv);
        let text = format!("{}{}", stdout(&out), stderr(&out));
        assert!(!out.status.success(), "{args:?} {url}: {text}");
        assert!(
            !text.contains(secret),
            "{args:?}: the password was printed:\n{text}"
        );
        assert!(
            text.contains("***") || text.contains("etcd"),
            "{args:?}: {text}"
        );
    }
}

#[test]
fn run_against_a_cluster() {
    let mut cluster = Cluster::start(3);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let _sweep = Sweep(dir.path().to_path_buf());
    let started = Instant::now();

    exit_status_and_environment(&cluster, dir.path());
    eprintln!("exit_status_and_environment ok at {:?}", started.elapsed());
    network_cut_stops_the_command_before_the_next_starts(&cluster, dir.path());
    eprintln!("network cut ok at {:?}", started.elapsed());
    killed_runner_takes_its_command_along(&cluster, dir.path());
    eprintln!("killed runner ok at {:?}", started.elapsed());
    frozen_runner_cannot_outlive_its_lease(&cluster, dir.path());
    eprintln!("frozen runner ok at {:?}", started.elapsed());
    a_stopped_command_gets_its_sigterm(&cluster, dir.path());
    eprintln!("stopped command ok at {:?}", started.elapsed());
    script_commands(&cluster, dir.path());
    eprintln!("script commands ok at {:?}", started.elapsed());
    // Last: it kills a node.
    observe_prints_every_change(&mut cluster, dir.path());
    eprintln!("observe ok at {:?}", started.elapsed());
}

fn exit_status_and_environment(cluster: &Cluster, dir: &Path) {
    let file = dir.join("env");
    let script = format!(
        "echo \"$TENURE_FENCING_TOKEN $TENURE_ELECTION $TENURE_LEADER_ID\" > {}; exit 7",
        file.display()
    );
    let url = cluster.url();
    let out = run_sh(&url, "env-and-status", &script);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(7), "{err}");
    let env = std::fs::read_to_string(&file).expect("the command wrote its environment");
    let fields: Vec<&str> = env.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{env:?}");
    assert!(
        fields[0].parse::<u64>().expect("a numeric token") > 0,
        "{env:?}"
    );
    assert_eq!(fields[1], "env-and-status");
    assert!(fields[2].parse::<u64>().is_ok(), "leader id {env:?}");
    assert!(err.contains("resigned"), "{err}");
}

fn network_cut_stops_the_command_before_the_next_starts(cluster: &Cluster, dir: &Path) {
    let file = dir.join("cut.log");
    let proxy = Proxy::start(&cluster.clients(), &cluster.query());
    let election = "network-cut";
    let mut a = Runner::start(&proxy.url(), election, "A", &file, dir);
    wait_for(&file, "start A", ms(15_000));
    let mut b = Runner::start(&cluster.url(), election, "B", &file, dir);
    std::thread::sleep(ms(1000));
    assert!(
        !read(&file).contains("start B"),
        "B started while A led\n{}",
        read(&file)
    );
    proxy.cut();
    let cut = Instant::now();
    let status = a.wait(ms(10_000));
    assert_eq!(
        status.code(),
        Some(75),
        "A exits 75 on lost leadership\n{}",
        a.stderr()
    );
    assert!(a.stderr().contains("lost leadership"), "{}", a.stderr());
    wait_for(&file, "start B", ms(15_000));
    eprintln!("B started {:?} after the cut", cut.elapsed());
    std::thread::sleep(ms(300));
    let log = read(&file);
    let a_last = last_time(&log, "A");
    let b_start = time_of(&log, "start B");
    assert!(log.contains("stop A"), "A's command got SIGTERM\n{log}");
    assert!(
        a_last < b_start,
        "A's command ran until {a_last}, after B's started at {b_start}\n{log}"
    );
    assert!(token_of(&log, "B") > token_of(&log, "A"), "{log}");
    // SIGTERM on the runner stops its command and resigns.
    b.signal(libc::SIGTERM);
    let status = b.wait(ms(10_000));
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{}", b.stderr());
    wait_for(&file, "stop B", ms(5000));
}

fn killed_runner_takes_its_command_along(cluster: &Cluster, dir: &Path) {
    let file = dir.join("kill.log");
    let election = "killed-runner";
    let (mut a, mut b) = a_ticking_b_waiting(cluster, dir, election, &file);
    a.signal(libc::SIGKILL);
    a.wait(ms(5000));
    let (log, a_last, b_start) = when_b_started(&file);
    assert!(
        a_last < b_start,
        "A's command ran until {a_last}, after B's started at {b_start}\n{log}"
    );
    // And it is really gone (dead or a zombie waiting for its new parent to reap it).
    let pid = pid_of(&log, "A");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z"),
        "A's command {pid} still runs: {stat}"
    );
    b.signal(libc::SIGINT);
    let status = b.wait(ms(10_000));
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{}", b.stderr());
}

/// Runner A (its command ticking from a grandchild) leading `election`, and runner B
/// started after it, waiting.
fn a_ticking_b_waiting(
    cluster: &Cluster,
    dir: &Path,
    election: &str,
    file: &Path,
) -> (Runner, Runner) {
    let a = Runner::start_script(
        &cluster.url(),
        election,
        "A",
        file,
        dir,
        SCRIPT_WITH_GRANDCHILD,
    );
    wait_for(file, "tick A", ms(15_000));
    let b = Runner::start(&cluster.url(), election, "B", file, dir);
    std::thread::sleep(ms(500));
    (a, b)
}

/// Once B's command has started: the log, the latest time A's command wrote, and B's start.
fn when_b_started(file: &Path) -> (String, u128, u128) {
    wait_for(file, "start B", ms(15_000));
    // Give a surviving A several tick periods to show itself.
    std::thread::sleep(ms(300));
    let log = read(file);
    let a_last = last_time(&log, "A");
    let b_start = time_of(&log, "start B");
    (log, a_last, b_start)
}

/// SIGSTOP of the runner alone: its guard kills the command at `valid_until`.
fn frozen_runner_cannot_outlive_its_lease(cluster: &Cluster, dir: &Path) {
    let file = dir.join("frozen.log");
    let election = "frozen-runner";
    let (mut a, mut b) = a_ticking_b_waiting(cluster, dir, election, &file);
    a.signal(libc::SIGSTOP);
    let (log, a_last, b_start) = when_b_started(&file);
    a.signal(libc::SIGCONT);
    assert!(
        a_last < b_start,
        "A's command ran until {a_last}, after B's started at {b_start}\n{log}"
    );
    let status = a.wait(ms(10_000));
    assert_eq!(status.code(), Some(75), "{}", a.stderr());
    assert!(a.stderr().contains("lost leadership"), "{}", a.stderr());
    b.signal(libc::SIGTERM);
    b.wait(ms(10_000));
}

/// A command that is itself stopped (SIGSTOP, job control, a debugger) when the runner stops
/// it still gets the SIGTERM `--grace` promises: the runner wakes it (SIGCONT) so the
/// signal is delivered, and its handler runs before any SIGKILL.
fn a_stopped_command_gets_its_sigterm(cluster: &Cluster, dir: &Path) {
    let file = dir.join("stopped.log");
    let mut a = Runner::start(&cluster.url(), "stopped-command", "A", &file, dir);
    wait_for(&file, "start A", ms(15_000));
    let pgid = pid_of(&read(&file), "A");
    // SAFETY: kill(2) on the command's own process group, which the runner made.
    unsafe {
        libc::kill(-pgid, libc::SIGSTOP);
    }
    std::thread::sleep(ms(200));
    a.signal(libc::SIGTERM);
    let status = a.wait(ms(10_000));
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{}", a.stderr());
    let log = read(&file);
    assert!(
        log.contains("stop A"),
        "the stopped command's SIGTERM handler never ran\n{log}\n{}",
        a.stderr()
    );
    assert!(!a.stderr().contains("outlived its grace"), "{}", a.stderr());
}

fn script_commands(cluster: &Cluster, dir: &Path) {
    let url = cluster.url();
    let election = "scripts";
    assert_eq!(leader(&url, election), "none");
    let pid_file = dir.join("campaign.pid");
    let (mut campaign, token, _) = Campaign::new(&url, election, "holder-1")
        .pid_file(&pid_file)
        .start();
    let now = leader(&url, election);
    assert!(now.starts_with(&format!("token={token} ")), "{now}");
    assert!(now.ends_with("value=holder-1"), "{now}");

    // --once does not queue behind another holder.
    let out = Command::new(BIN)
        .args(["run", "--once", "--election", election, "--backend", &url])
        .args(["--ttl", "2s", "--grace", "500ms", "--", "sh", "-c"])
        .arg(format!("touch {}", dir.join("once-ran").display()))
        .output()
        .expect("run tenure run --once");
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    assert!(!dir.join("once-ran").exists());

    // `tenure resign` makes the holder resign at once and waits for it to exit.
    let out = resign(&pid_file);
    assert!(out.status.success(), "{}", stderr(&out));
    let status = campaign.wait(ms(5000));
    assert!(status.success(), "campaign exits 0 after resigning");
    assert_eq!(leader(&url, election), "none");
    assert!(
        !pid_file.exists(),
        "the pid file is removed with the holder"
    );
    // With nobody holding, resign says so.
    let out = resign(&pid_file);
    assert_eq!(out.status.code(), Some(1));
}

/// `tenure resign --pid-file pid_file`.
fn resign(pid_file: &Path) -> std::process::Output {
    Command::new(BIN)
        .args(["resign", "--pid-file"])
        .arg(pid_file)
        .output()
        .expect("run tenure resign")
}

/// `tenure observe` prints the leader at start (`none`), then each change once, and keeps
/// going when the node serving its stream is killed.
fn observe_prints_every_change(cluster: &mut Cluster, dir: &Path) {
    let url = cluster.url();
    let election = "observed";
    let mut observer = Spawned::new(
        Command::new(BIN)
            .args(["observe", "--election", election, "--backend", &url])
            .stdout(Stdio::piped()),
    );
    let lines = observer.lines();
    let next = |what: &str| next_line(&lines, what);
    assert_eq!(next("the initial leader"), "none");

    let campaign = |value: &str, pid_file: &Path| {
        let (holder, token, _) = Campaign::new(&url, election, value)
            .pid_file(pid_file)
            .start();
        (holder, token)
    };
    let resign = |pid_file: &Path| {
        let out = resign(pid_file);
        assert!(out.status.success(), "{}", stderr(&out));
    };

    let first_pid = dir.join("observed-1.pid");
    let (mut first, t1) = campaign("first", &first_pid);
    let line = next("the first holder");
    assert!(
        line.starts_with(&format!("token={t1} ")) && line.ends_with(" value=first"),
        "{line}"
    );

    // Kill the node that leads the cluster (it serves every observe stream); the observer
    // reopens its stream on a survivor, and the unchanged leader is not printed again.
    let leader = cluster.leader();
    cluster.kill(leader);
    let deadline = Instant::now() + ms(20_000);
    while cluster.leader_among_live().is_none() {
        assert!(Instant::now() < deadline, "no new cluster leader in 20 s");
        std::thread::sleep(ms(100));
    }
    resign(&first_pid);
    first.wait(ms(5000));
    assert_eq!(next("the resignation"), "none");

    let second_pid = dir.join("observed-2.pid");
    let (mut second, t2) = campaign("second", &second_pid);
    assert!(t2 > t1, "token {t2} after {t1}");
    let line = next("the second holder");
    assert!(
        line.starts_with(&format!("token={t2} ")) && line.ends_with(" value=second"),
        "{line}"
    );
    resign(&second_pid);
    second.wait(ms(5000));
    assert_eq!(next("the second resignation"), "none");
    // No line was printed twice.
    assert!(lines.recv_timeout(ms(500)).is_err(), "an extra line");

    // SIGTERM ends it with status 0.
    let status = observer.stop(ms(5000));
    assert!(status.success(), "observe exits 0 on SIGTERM: {status:?}");
}

// ------------------------------------------------------------------------------------------
// Helpers.

/// On drop (also when a case fails), SIGKILL the process group of every command that logged
/// a `start` line in a `*.log` file of the directory, so that no command outlives the test.
struct Sweep(PathBuf);

impl Drop for Sweep {
    fn drop(&mut self) {
        for entry in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "log") {
                continue;
            }
            for l in read(&path).lines().filter(|l| l.starts_with("start ")) {
                if let Some(pgid) = l
                    .split_whitespace()
                    .nth(3)
                    .and_then(|p| p.parse::<i32>().ok())
                {
                    if pgid > 1 {
                        // SAFETY: kill(2); the command is its group's leader (`tenure run`
                        // starts it with a process group of its own).
                        unsafe { libc::kill(-pgid, libc::SIGKILL) };
                    }
                }
            }
        }
    }
}

fn read(file: &Path) -> String {
    std::fs::read_to_string(file).unwrap_or_default()
}

fn wait_for(file: &Path, what: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while !read(file).contains(what) {
        assert!(
            Instant::now() < deadline,
            "no {what:?} within {within:?}\n{}",
            read(file)
        );
        std::thread::sleep(ms(20));
    }
}

/// The line that starts with `prefix`, split.
fn line<'a>(log: &'a str, prefix: &str) -> Vec<&'a str> {
    log.lines()
        .find(|l| l.starts_with(&format!("{prefix} ")))
        .unwrap_or_else(|| panic!("no {prefix:?} line\n{log}"))
        .split_whitespace()
        .collect()
}

fn time_of(log: &str, prefix: &str) -> u128 {
    line(log, prefix)[2].parse().expect("a timestamp")
}

fn pid_of(log: &str, who: &str) -> i32 {
    line(log, &format!("start {who}"))[3]
        .parse()
        .expect("a pid")
}

fn token_of(log: &str, who: &str) -> u64 {
    line(log, &format!("start {who}"))[4]
        .parse()
        .expect("a token")
}

/// The latest timestamp written by `who`'s command.
fn last_time(log: &str, who: &str) -> u128 {
    log.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 3 && f[1] == who)
        .filter_map(|f| f[2].parse().ok())
        .max()
        .unwrap_or_else(|| panic!("no line from {who}\n{log}"))
}

/// A `tenure run` process with the recording script; stderr goes to a file. Dropped, it is
/// SIGTERMed first, so that it stops its command.
struct Runner {
    child: Spawned,
    stderr: PathBuf,
}

impl Runner {
    fn start(url: &str, election: &str, name: &str, file: &Path, dir: &Path) -> Runner {
        Runner::start_script(url, election, name, file, dir, SCRIPT)
    }

    fn start_script(
        url: &str,
        election: &str,
        name: &str,
        file: &Path,
        dir: &Path,
        script: &str,
    ) -> Runner {
        let stderr = dir.join(format!("{election}-{name}.stderr"));
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--election", election, "--backend", url])
            .args(["--ttl", "2s", "--grace", "500ms", "--value", name])
            .args(["--", "sh", "-c", script, "sh", name])
            .arg(file)
            .stdout(Stdio::null())
            .stderr(File::create(&stderr).expect("a stderr file"));
        // SAFETY: prctl is async-signal-safe: runners die with the test.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        Runner {
            child: Spawned::new(&mut cmd),
            stderr,
        }
    }

    fn signal(&self, sig: i32) {
        self.child.signal(sig);
    }

    fn wait(&mut self, within: Duration) -> ExitStatus {
        self.child.wait(within)
    }

    fn stderr(&self) -> String {
        read(&self.stderr)
    }
}
