//! The simulator's disk passes the same storage conformance suite as the server's
//! write-ahead log (`tenure_wal::conformance`), so "persisted" means one thing in both.
//! Reopening is a crash (losing what is unsynced: a `persist_commit` not yet followed by a
//! `persist`), followed by recovery from the durable part.

use tenure_sim::disk::{Disk, WalLayout};

fn reopen(mut disk: Disk) -> Disk {
    // Every `persist` fsyncs, so a crash here loses at most a `persist_commit`'s commit
    // index (the suite reopens only after a `persist`); recovery reads the durable part.
    disk.crash();
    disk
}

// Every check of the suite but the randomized one: that one also feeds batches no driver
// of the core can produce (gaps after the log, reversed batches, entries under the
// snapshot), which the simulated disk refuses on purpose so that a simulator bug surfaces as
// an error instead of a silently odd disk. The two disks agree on every Raft-shaped input.
mod sim_disk {
    use super::*;
    tenure_wal::conformance_tests!(@raft_shaped || Disk::new(WalLayout::default()), reopen);
}
