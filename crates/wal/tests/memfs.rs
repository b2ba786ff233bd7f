//! The log over the in-memory file system the simulator uses (`MemFs`): the same
//! conformance suite as over real files, and random power losses at every kind of moment —
//! unsynced bytes kept in part or as zeros, a prefix of the directory changes not yet
//! fsynced — after which the log must come back as it was after some persist between the
//! last acknowledged one and the last one written.

use std::path::{Path, PathBuf};

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tenure_core::sm::Command;
use tenure_core::storage::{apply_to_image, BackgroundSnapshots, SnapshotWriter, Storage};
use tenure_core::types::{Entry, HardState, Membership, Payload, Recovered, Snapshot};
use tenure_wal::{CrashChoices, FileStorage, KeepEverything, MemFs, WalOptions};

mod common;
use common::tiny;

fn dir() -> PathBuf {
    PathBuf::from("/node")
}

fn fresh(options: WalOptions) -> impl FnMut() -> FileStorage<MemFs> {
    move || FileStorage::open_in(MemFs::new(), &dir(), options).expect("open a new log")
}

/// What a restarted process finds: the suite's reopen is a process restart (the kernel
/// kept everything); power losses are the business of the last test below.
fn reopen(storage: FileStorage<MemFs>) -> FileStorage<MemFs> {
    let fs = storage.file_system().clone();
    let options = *storage.options();
    drop(storage);
    fs.crash(&mut KeepEverything);
    FileStorage::open_in(fs, &dir(), options).expect("reopen the log")
}

mod mem_fs_default_limits {
    use super::*;
    tenure_wal::conformance_tests!(fresh(WalOptions::default()), reopen);
}

mod mem_fs_tiny_limits {
    use super::*;
    tenure_wal::conformance_tests!(fresh(tiny()), reopen);
}

mod background_snapshots_mem_fs_tiny_limits {
    use super::*;
    tenure_wal::background_conformance_tests!(fresh(tiny()), reopen);
}

/// The segment size the simulator's disks use.
mod background_snapshots_mem_fs_16k_segments {
    use super::*;
    tenure_wal::background_conformance_tests!(
        fresh(WalOptions {
            segment_bytes_max: 16 << 10,
            ..WalOptions::default()
        }),
        reopen
    );
}

/// Random choices for a power loss.
struct RandomLoss<'a>(&'a mut ChaCha8Rng);

impl CrashChoices for RandomLoss<'_> {
    fn unsynced_bytes(&mut self, _: &Path, unsynced: usize) -> (usize, bool) {
        let keep = match self.0.next_u32() % 4 {
            0 => 0,
            1 => unsynced,
            _ => (self.0.next_u64() % (unsynced as u64 + 1)) as usize,
        };
        (keep, self.0.next_u32().is_multiple_of(8))
    }

    fn directory_changes(&mut self, pending: usize) -> usize {
        (self.0.next_u64() % (pending as u64 + 1)) as usize
    }
}

fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    rng.next_u64() % n.max(1)
}

fn entry(index: u64, term: u64, rng: &mut ChaCha8Rng) -> Entry {
    let len = if below(rng, 10) == 0 { 3000 } else { 40 };
    Entry {
        term,
        index,
        payload: Payload::Command(Command::Campaign {
            election: "nightly-close".into(),
            session: index,
            value: (0..below(rng, len)).map(|_| rng.next_u32() as u8).collect(),
        }),
    }
}

/// One power-loss run: Raft-shaped persists, unsynced writes, commit indexes, snapshots in a
/// persist and in the background, and crashes; after each crash the log must hold the
/// state after some persist it wrote since the last one it acknowledged as durable.
fn power_losses(seed: u64, steps: usize, options: WalOptions) -> (usize, usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let fs = MemFs::new();
    let mut storage = FileStorage::open_in(fs.clone(), &dir(), options).expect("open");
    // The model after each persist written since the last durable one (index 0: durable).
    let mut states = vec![Recovered::default()];
    let (mut crashes, mut torn) = (0, 0);
    let mut term = 1;
    for step in 0..steps {
        let now = states.last().expect("never empty").clone();
        let snap_index = now.snapshot.as_ref().map_or(0, |s| s.index);
        let last = now.entries.last().map_or(snap_index, |e| e.index);
        if below(&mut rng, 10) == 0 {
            term += 1;
        }
        let hs = (below(&mut rng, 2) == 0).then(|| HardState {
            term,
            vote: Some(1),
            commit: below(&mut rng, last + 1),
        });
        let mut entries = Vec::new();
        if below(&mut rng, 10) < 7 {
            let first = (last + 1 - below(&mut rng, (last - snap_index).min(3) + 1)).max(1);
            for index in first..first + below(&mut rng, 6) + 1 {
                entries.push(entry(index, term, &mut rng));
            }
        }
        let covered = |rng: &mut ChaCha8Rng| -> Option<Snapshot> {
            let at = now
                .entries
                .get(below(rng, now.entries.len() as u64) as usize)?;
            Some(Snapshot {
                index: at.index,
                term: at.term,
                membership: Membership::new([1, 2, 3]),
                data: vec![at.index as u8; below(rng, 500) as usize],
            })
        };
        match below(&mut rng, 20) {
            // A snapshot made in the background, written, then recorded (fsynced).
            0 => {
                if let Some(s) = covered(&mut rng) {
                    let writer = storage.snapshot_writer();
                    let written = writer.write(&s).expect("write the snapshot file");
                    storage.record_snapshot(written).expect("record it");
                    let mut next = now.clone();
                    apply_to_image(&mut next, None, Some(&s), &[]);
                    states = vec![next];
                }
            }
            // A persist with a snapshot (a leader's, or the node's own), fsynced.
            1 => {
                let s = covered(&mut rng);
                // As a node writes it: entries after the snapshot only.
                let cut = s.as_ref().map_or(0, |s| s.index);
                entries.retain(|e| e.index > cut);
                storage
                    .persist(hs.as_ref(), s.as_ref(), &entries)
                    .expect("persist");
                let mut next = now.clone();
                apply_to_image(&mut next, hs.as_ref(), s.as_ref(), &entries);
                if hs.is_some() || s.is_some() || !entries.is_empty() {
                    // An empty persist writes and fsyncs nothing.
                    states = vec![next];
                }
            }
            // Written, not fsynced (a leader replicating while its fsync runs) ...
            2..=7 => {
                storage.write(hs.as_ref(), None, &entries).expect("write");
                let mut next = now.clone();
                apply_to_image(&mut next, hs.as_ref(), None, &entries);
                states.push(next);
                // ... and sometimes the fsync (of everything written before it too).
                if below(&mut rng, 2) == 0 {
                    storage.sync().expect("sync");
                    states = vec![states.pop().expect("just pushed")];
                }
            }
            // A commit index alone, not fsynced.
            8..=9 => {
                let hs = HardState {
                    term: now.hard_state.term.max(1),
                    vote: now.hard_state.vote,
                    commit: below(&mut rng, last + 1),
                };
                storage.persist_commit(&hs).expect("persist_commit");
                let mut next = now.clone();
                apply_to_image(&mut next, Some(&hs), None, &[]);
                states.push(next);
            }
            _ => {
                storage
                    .persist(hs.as_ref(), None, &entries)
                    .expect("persist");
                let mut next = now.clone();
                apply_to_image(&mut next, hs.as_ref(), None, &entries);
                if hs.is_some() || !entries.is_empty() {
                    // An empty persist writes and fsyncs nothing.
                    states = vec![next];
                }
            }
        }
        if below(&mut rng, 8) == 0 {
            drop(storage);
            let report = fs.crash(&mut RandomLoss(&mut rng));
            crashes += 1;
            torn += usize::from(report.kept_bytes > 0 && report.kept_bytes < report.unsynced_bytes);
            storage = FileStorage::open_in(fs.clone(), &dir(), options).unwrap_or_else(|e| {
                panic!("seed {seed} step {step}: the log does not reopen after {report:?}: {e}")
            });
            let recovered = storage.recover().expect("recover");
            let Some(k) = states.iter().position(|s| *s == recovered) else {
                panic!(
                    "seed {seed} step {step}: after {report:?} the log holds a state no \
                     persist since the last durable one left (hard state {:?}, {} entries, \
                     snapshot {:?}; durable: {:?}, {} entries)",
                    recovered.hard_state,
                    recovered.entries.len(),
                    recovered.snapshot.as_ref().map(|s| s.index),
                    states[0].hard_state,
                    states[0].entries.len(),
                )
            };
            states = vec![states.swap_remove(k)];
        }
    }
    (crashes, torn)
}

#[test]
fn power_losses_leave_a_state_between_the_last_acknowledged_persist_and_the_last_written() {
    let (mut crashes, mut torn) = (0, 0);
    for seed in 1..=40 {
        let (c, t) = power_losses(seed, 300, tiny());
        crashes += c;
        torn += t;
    }
    // The run must reach what it is for: many crashes, some of them mid-record.
    assert!(crashes > 1000, "only {crashes} crashes");
    assert!(
        torn > 50,
        "only {torn} crashes kept part of an unsynced write"
    );
}

/// The power losses catch the log's own switches that lose durability: a background
/// snapshot recorded before its file is durable (the simulator's `--inject-bug
/// snapshot-recorded-before-written`); and they are needed for it, since every check that
/// reopens without a power loss passes with it on.
#[cfg(feature = "inject-bugs")]
#[test]
fn a_snapshot_file_recorded_before_it_is_durable_is_caught_by_power_losses() {
    let mut options = tiny();
    assert!(options.inject_snapshot_file_not_durable());
    let caught =
        (1..=40).any(|seed| std::panic::catch_unwind(|| power_losses(seed, 300, options)).is_err());
    assert!(caught, "no power loss found the snapshot file missing");
    tenure_wal::conformance::run_all_background(fresh(options), reopen);
}
