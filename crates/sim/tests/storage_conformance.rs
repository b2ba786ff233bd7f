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

// The background snapshot checks: the simulator's disk takes the node's own snapshots through
// the same three steps as the write-ahead log (`BackgroundSnapshots`), and its driver finishes
// them with the server's function, so the two must mean the same by "written", "recorded" and
// "discarded". The randomized one is left out for the reason above (it also writes entries
// under a recorded snapshot, which no node does and the simulated disk ignores).
mod sim_disk_background {
    use super::*;
    tenure_wal::conformance_tests!(@each || Disk::new(WalLayout::default()), reopen;
        background_snapshot_written_but_not_recorded_changes_nothing,
        background_snapshot_recorded_after_later_persists,
        background_snapshot_overtaken_by_a_persisted_one_is_dropped,
    );
}
