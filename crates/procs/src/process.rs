//! Child processes of a harness: each in its own process group (so that a Ctrl-C at the
//! terminal reaches only the harness, which then cleans up), each killed by the kernel when
//! the harness dies however it dies (`PR_SET_PDEATHSIG` on Linux), each killed and reaped when
//! its [`Proc`] is dropped.

use std::fs::{File, OpenOptions};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};

/// Make the child of `cmd` the leader of a process group of its own, and have the kernel
/// SIGKILL it when the thread that spawns it dies.
pub fn detach(cmd: &mut Command) {
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_PDEATHSIG takes no pointers and is async-signal-safe; it is
    // the only call made between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        });
    }
}

/// Open `path` for appending (created if missing): a child's log across its restarts.
pub fn open_log(path: &Path) -> anyhow::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))
}

/// A child process, SIGKILLed (which also ends a stopped process) and reaped when dropped.
#[derive(Debug)]
pub struct Proc {
    child: Child,
}

impl Proc {
    /// Spawn `cmd` [detached](detach), with stdin closed and stdout and stderr appended to
    /// `log`.
    pub fn spawn(mut cmd: Command, log: &Path) -> anyhow::Result<Proc> {
        let out = open_log(log)?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().context("clone a log handle")?))
            .stderr(Stdio::from(out));
        detach(&mut cmd);
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", cmd.get_program().to_string_lossy()))?;
        Ok(Proc { child })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still there (running or stopped, not exited).
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its exit status, if it has exited (by itself: nothing here ends it without consuming
    /// the [`Proc`]).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Send `sig` to it.
    pub fn signal(&self, sig: libc::c_int) -> anyhow::Result<()> {
        signal(self.pid(), sig)
    }

    /// SIGSTOP it and wait until every one of its threads has stopped. kill(2) only queues
    /// the stop: until each thread runs and takes it, the others go on, and a request that
    /// arrives meanwhile is still served. "Paused" means frozen.
    pub fn pause(&self, within: Duration) -> anyhow::Result<()> {
        self.signal(libc::SIGSTOP)?;
        wait_all_threads_stopped(self.pid(), within)
    }

    /// SIGCONT it.
    pub fn resume(&self) -> anyhow::Result<()> {
        self.signal(libc::SIGCONT)
    }

    /// SIGKILL it and reap it.
    pub fn kill(mut self) {
        self.kill_and_reap();
    }

    fn kill_and_reap(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Wait up to `within` for it to exit by itself; its exit status, or `None` if it still
    /// runs.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stop it gracefully: SIGTERM, then wait up to `grace` for it to exit. Its exit status,
    /// or `Err(self)` if it still runs (the caller decides whether to kill it).
    pub async fn terminate(mut self, grace: Duration) -> Result<ExitStatus, Proc> {
        let _ = self.signal(libc::SIGTERM);
        match self.wait_exit(grace).await {
            Some(status) => Ok(status),
            None => Err(self),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

/// Send `sig` to `pid` (a process this harness started).
pub fn signal(pid: u32, sig: libc::c_int) -> anyhow::Result<()> {
    // SAFETY: kill(2) takes no pointers.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
        bail!("signal {sig} to {pid}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Wait until every thread of process `pid` is stopped (state `T` in
/// `/proc/PID/task/*/stat`).
pub fn wait_all_threads_stopped(pid: u32, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    let stopped = |stat: &str| {
        // `TID (COMM) STATE …`; COMM may hold spaces and parentheses.
        stat.rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|state| state == 'T' || state == 't')
    };
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .with_context(|| format!("read /proc/{pid}/task"))?;
        let all = tasks.filter_map(Result::ok).all(|task| {
            std::fs::read_to_string(task.path().join("stat")).map_or(true, |s| stopped(&s))
        });
        if all {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("process {pid} did not stop within {within:?} of SIGSTOP");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Resident memory of `pid` in bytes (`VmRSS`).
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kb * 1024)
}

/// CPU time (user + system) used so far by `pid` and its threads.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("read /proc/{pid}/stat"))?;
    // Fields after the parenthesized command name; utime and stime are fields 14 and 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("malformed /proc/{pid}/stat"))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f
        .get(11)
        .and_then(|u| u.parse::<u64>().ok())
        .zip(f.get(12).and_then(|s| s.parse::<u64>().ok()))
        .map(|(u, s)| u + s)
        .ok_or_else(|| anyhow!("malformed /proc/{pid}/stat"))?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(Duration::from_micros(ticks * 1_000_000 / hz))
}

/// Find a program on `PATH`.
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
            .find(|p| p.is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_child_pauses_resumes_and_stops_gracefully() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sleep.log");
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo started; trap 'echo bye; exit 3' TERM; while :; do sleep 0.05; done",
        ]);
        let mut p = Proc::spawn(cmd, &log).unwrap();
        assert!(p.running());
        // Its own process group.
        // SAFETY: getpgid takes no pointers.
        assert_eq!(
            unsafe { libc::getpgid(p.pid() as libc::pid_t) },
            p.pid() as i32
        );
        p.pause(Duration::from_secs(5)).unwrap();
        p.resume().unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(cpu_time(p.pid()).is_ok() && rss_bytes(p.pid()).unwrap() > 0);
        let status = p
            .terminate(Duration::from_secs(5))
            .await
            .expect("exits on SIGTERM");
        assert_eq!(status.code(), Some(3));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("started") && text.contains("bye"), "{text}");
    }

    #[test]
    fn dropping_a_proc_kills_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sleep");
        cmd.arg("60");
        let p = Proc::spawn(cmd, &dir.path().join("l")).unwrap();
        let pid = p.pid();
        drop(p);
        assert!(signal(pid, 0).is_err(), "process {pid} outlived its Proc");
    }
}
