//! The simulator's disk is the server's write-ahead log over an in-memory file system, and
//! passes the same storage conformance suite, so "persisted" means one thing in both.
//! Reopening is a restart of the process (the power losses are `tenure-wal`'s `memfs` tests'
//! and the simulator's business), followed by the log's own recovery.

use tenure_sim::disk::Disk;

fn reopen(mut disk: Disk) -> Disk {
    disk.restart();
    disk.open().expect("the log recovers after a power loss");
    disk
}

// Every check of the suite but the randomized one: that one also feeds batches no driver of
// the core can produce (gaps after the log, reversed batches), which the simulator's disk
// refuses on purpose so that a simulator bug surfaces as an error instead of an odd log.
mod sim_disk {
    use super::*;
    tenure_wal::conformance_tests!(@raft_shaped Disk::default, reopen);
}

// The background snapshot checks, all of them: the simulator's disk writes the node's own
// snapshots through the log's three steps, files and all, and its driver finishes them with
// the server's function.
mod sim_disk_background {
    use super::*;
    tenure_wal::background_conformance_tests!(Disk::default, reopen);
}
