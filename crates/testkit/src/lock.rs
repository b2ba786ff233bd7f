//! One cluster at a time: the tests are timing-sensitive and the machine may have two
//! cores, so a cluster holds an exclusive `flock` on a file in the temporary directory for its
//! lifetime, across the threads of `cargo test` and the processes of `cargo nextest` alike.

use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;

/// An exclusive `flock` on a file in the temporary directory, held until dropped; it works
/// across the threads of one test process and across test processes alike.
pub(crate) struct FileLock(#[allow(dead_code)] File); // Held for its lock, never read.

impl FileLock {
    pub(crate) fn acquire(name: &str) -> FileLock {
        let path = std::env::temp_dir().join(name);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
        loop {
            // SAFETY: flock on a descriptor we own; it blocks until the lock is ours and is
            // released when the file is closed.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            assert_eq!(
                e.kind(),
                std::io::ErrorKind::Interrupted,
                "flock {}: {e}",
                path.display()
            );
        }
        FileLock(file)
    }
}

/// The harness's one-cluster-at-a-time lock, for clusters run in the test's own process
/// (embedded nodes): held until dropped, as [`crate::Cluster`] holds it.
pub struct ClusterLock(#[allow(dead_code)] FileLock); // Held for its lock, never read.

impl ClusterLock {
    /// Wait for the lock.
    pub fn acquire() -> ClusterLock {
        ClusterLock(FileLock::acquire("tenure-server-tests-cluster.lock"))
    }
}
