//! One conformance suite for every implementation of [`Storage`]: the files of this crate,
//! [`tenure_core::storage::MemStorage`], the simulator's disk. Each check says what
//! "persisted" means in terms of [`apply_to_image`], so that all of them agree.
//!
//! A check takes two functions: `fresh` makes an empty storage, `reopen` turns a storage into
//! what a restart of the process would find (for files: drop it and open the same directory;
//! for plain memory: the same value). Checks panic on the first difference, naming the step.
//!
//! Run everything at once with [`run_all`], or one test per check with the
//! [`conformance_tests!`](crate::conformance_tests) macro:
//!
//! ```
//! mod mem_storage {
//!     use tenure_core::storage::MemStorage;
//!     tenure_wal::conformance_tests!(MemStorage::new, |s: MemStorage| s);
//! }
//! # tenure_wal::conformance::run_all(tenure_core::storage::MemStorage::new, |s| s);
//! ```
//!
//! Storage that also writes snapshots off the driver's thread ([`BackgroundSnapshots`]: the
//! files of this crate, `MemStorage`) has a second list, [`background_checks`], run with
//! [`run_all_background`] or [`background_conformance_tests!`](crate::background_conformance_tests).
//! It is kept apart so that storage implementing only [`Storage`] still runs the first
//! list:
//!
//! ```
//! mod mem_storage_background {
//!     use tenure_core::storage::MemStorage;
//!     tenure_wal::background_conformance_tests!(MemStorage::new, |s: MemStorage| s);
//! }
//! # tenure_wal::conformance::run_all_background(tenure_core::storage::MemStorage::new, |s| s);
//! ```

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tenure_core::sm::Command;
use tenure_core::storage::{apply_to_image, BackgroundSnapshots, SnapshotWriter, Storage};
use tenure_core::types::{Entry, HardState, Index, Membership, Payload, Recovered, Snapshot, Term};

/// One check of the suite.
pub type Check<S> = fn(&mut dyn FnMut() -> S, &mut dyn FnMut(S) -> S);

/// Every check, by name, in the order [`run_all`] runs them.
pub fn checks<S: Storage>() -> Vec<(&'static str, Check<S>)> {
    vec![
        (
            "empty_storage_recovers_empty",
            empty_storage_recovers_empty::<S>,
        ),
        ("hard_state_round_trips", hard_state_round_trips::<S>),
        (
            "appended_entries_round_trip",
            appended_entries_round_trip::<S>,
        ),
        (
            "conflicting_suffix_is_replaced",
            conflicting_suffix_is_replaced::<S>,
        ),
        (
            "snapshot_discards_covered_prefix_and_keeps_matching_tail",
            snapshot_discards_covered_prefix_and_keeps_matching_tail::<S>,
        ),
        (
            "snapshot_with_other_term_discards_everything",
            snapshot_with_other_term_discards_everything::<S>,
        ),
        (
            "snapshot_beyond_the_log_discards_everything",
            snapshot_beyond_the_log_discards_everything::<S>,
        ),
        (
            "one_persist_applies_snapshot_then_entries_then_hard_state",
            one_persist_applies_snapshot_then_entries_then_hard_state::<S>,
        ),
        (
            "newer_snapshot_replaces_older",
            newer_snapshot_replaces_older::<S>,
        ),
        (
            "empty_persist_changes_nothing",
            empty_persist_changes_nothing::<S>,
        ),
        ("large_batch_round_trips", large_batch_round_trips::<S>),
        (
            "unsynced_commit_index_is_made_durable_by_the_next_persist",
            unsynced_commit_index_is_made_durable_by_the_next_persist::<S>,
        ),
        (
            "written_parts_are_durable_once_synced",
            written_parts_are_durable_once_synced::<S>,
        ),
        (
            "random_persists_match_the_model",
            random_persists_match_the_model::<S>,
        ),
    ]
}

/// Every check of [`BackgroundSnapshots`], by name, in the order
/// [`run_all_background`] runs them.
pub fn background_checks<S: BackgroundSnapshots>() -> Vec<(&'static str, Check<S>)> {
    vec![
        (
            "background_snapshot_written_but_not_recorded_changes_nothing",
            background_snapshot_written_but_not_recorded_changes_nothing::<S>,
        ),
        (
            "background_snapshot_recorded_after_later_persists",
            background_snapshot_recorded_after_later_persists::<S>,
        ),
        (
            "background_snapshot_overtaken_by_a_persisted_one_is_dropped",
            background_snapshot_overtaken_by_a_persisted_one_is_dropped::<S>,
        ),
        (
            "random_background_snapshots_match_the_model",
            random_background_snapshots_match_the_model::<S>,
        ),
    ]
}

/// Run every check of [`background_checks`], each on a fresh storage.
pub fn run_all_background<S: BackgroundSnapshots>(
    mut fresh: impl FnMut() -> S,
    mut reopen: impl FnMut(S) -> S,
) {
    for (_name, check) in background_checks::<S>() {
        check(&mut fresh, &mut reopen);
    }
}

/// Run every check, each on a fresh storage.
pub fn run_all<S: Storage>(mut fresh: impl FnMut() -> S, mut reopen: impl FnMut(S) -> S) {
    for (_name, check) in checks::<S>() {
        check(&mut fresh, &mut reopen);
    }
}

/// One test function per check, calling `$fresh` and `$reopen` (expressions evaluating to
/// the two functions; evaluated anew in each test). Use it inside a module of its own.
#[macro_export]
macro_rules! conformance_tests {
    ($fresh:expr, $reopen:expr $(,)?) => {
        $crate::conformance_tests!(@raft_shaped $fresh, $reopen);
        $crate::conformance_tests!(@each $fresh, $reopen; random_persists_match_the_model);
    };
    // Every check but the randomized one, which also feeds batches no driver of the core
    // produces (gaps after the log, reversed batches, entries under the snapshot).
    (@raft_shaped $fresh:expr, $reopen:expr $(,)?) => {
        $crate::conformance_tests!(@each $fresh, $reopen;
            empty_storage_recovers_empty,
            hard_state_round_trips,
            appended_entries_round_trip,
            conflicting_suffix_is_replaced,
            snapshot_discards_covered_prefix_and_keeps_matching_tail,
            snapshot_with_other_term_discards_everything,
            snapshot_beyond_the_log_discards_everything,
            one_persist_applies_snapshot_then_entries_then_hard_state,
            newer_snapshot_replaces_older,
            empty_persist_changes_nothing,
            large_batch_round_trips,
            unsynced_commit_index_is_made_durable_by_the_next_persist,
            written_parts_are_durable_once_synced,
        );
    };
    (@each $fresh:expr, $reopen:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let mut fresh = $fresh;
                let mut reopen = $reopen;
                $crate::conformance::$name(&mut fresh, &mut reopen);
            }
        )*
    };
}

/// One test function per check of [`BackgroundSnapshots`] (see [`background_checks`]), like
/// [`conformance_tests!`](crate::conformance_tests).
#[macro_export]
macro_rules! background_conformance_tests {
    ($fresh:expr, $reopen:expr $(,)?) => {
        $crate::conformance_tests!(@each $fresh, $reopen;
            background_snapshot_written_but_not_recorded_changes_nothing,
            background_snapshot_recorded_after_later_persists,
            background_snapshot_overtaken_by_a_persisted_one_is_dropped,
            random_background_snapshots_match_the_model,
        );
    };
}

/// A check: `pub fn NAME<S: Storage>(fresh, reopen)` whose body works on `p`, a [`Probe`]
/// of a fresh storage named after the check.
macro_rules! check {
    ($(#[$doc:meta])* fn $name:ident($p:ident) $body:block) => {
        check! { Storage; $(#[$doc])* fn $name($p) $body }
    };
    // A check of storages with more than `Storage` (`BackgroundSnapshots`).
    ($bound:path; $(#[$doc:meta])* fn $name:ident($p:ident) $body:block) => {
        $(#[$doc])*
        pub fn $name<S: $bound>(fresh: &mut dyn FnMut() -> S, reopen: &mut dyn FnMut(S) -> S) {
            let mut $p = Probe::new(stringify!($name), fresh, reopen);
            $body
        }
    };
}

/// A storage under test next to the model of what it must hold.
struct Probe<'a, S> {
    storage: Option<S>,
    model: Recovered,
    reopen: &'a mut dyn FnMut(S) -> S,
    check: &'static str,
}

impl<'a, S: Storage> Probe<'a, S> {
    fn new(
        check: &'static str,
        fresh: &mut dyn FnMut() -> S,
        reopen: &'a mut dyn FnMut(S) -> S,
    ) -> Self {
        Probe {
            storage: Some(fresh()),
            model: Recovered::default(),
            reopen,
            check,
        }
    }

    fn storage(&mut self) -> &mut S {
        self.storage.as_mut().expect("present between reopens")
    }

    fn persist(&mut self, hs: Option<HardState>, snapshot: Option<Snapshot>, entries: Vec<Entry>) {
        let check = self.check;
        self.storage()
            .persist(hs.as_ref(), snapshot.as_ref(), &entries)
            .unwrap_or_else(|e| panic!("{check}: persist failed: {e}"));
        apply_to_image(&mut self.model, hs.as_ref(), snapshot.as_ref(), &entries);
    }

    /// [`Storage::write`] then [`Storage::sync`]: durable once both returned.
    fn write_then_sync(
        &mut self,
        hs: Option<HardState>,
        snapshot: Option<Snapshot>,
        entries: Vec<Entry>,
    ) {
        let check = self.check;
        self.storage()
            .write(hs.as_ref(), snapshot.as_ref(), &entries)
            .unwrap_or_else(|e| panic!("{check}: write failed: {e}"));
        apply_to_image(&mut self.model, hs.as_ref(), snapshot.as_ref(), &entries);
        self.sync();
    }

    fn sync(&mut self) {
        let check = self.check;
        self.storage()
            .sync()
            .unwrap_or_else(|e| panic!("{check}: sync failed: {e}"));
    }

    fn persist_commit(&mut self, hs: HardState) {
        let check = self.check;
        self.storage()
            .persist_commit(&hs)
            .unwrap_or_else(|e| panic!("{check}: persist_commit failed: {e}"));
        apply_to_image(&mut self.model, Some(&hs), None, &[]);
    }

    /// `recover` equals the model now, and again after a restart.
    fn verify(&mut self, step: &str) {
        self.verify_live(step);
        self.reopen();
        self.verify_live(&format!("{step}, after reopen"));
    }

    fn verify_live(&mut self, step: &str) {
        let check = self.check;
        let got = self
            .storage()
            .recover()
            .unwrap_or_else(|e| panic!("{check}: {step}: recover failed: {e}"));
        if got != self.model {
            panic!(
                "{check}: {step}: recovered state differs from the model\n  recovered: {}\n  model:     {}",
                summary(&got),
                summary(&self.model)
            );
        }
    }

    fn reopen(&mut self) {
        let storage = self.storage.take().expect("present between reopens");
        self.storage = Some((self.reopen)(storage));
    }
}

impl<S: BackgroundSnapshots> Probe<'_, S> {
    /// Step 2 with a writer from step 1: the snapshot written off the log, not recorded.
    fn write_with(&mut self, writer: S::Writer, snapshot: &Snapshot) -> S::Written {
        let check = self.check;
        writer
            .write(snapshot)
            .unwrap_or_else(|e| panic!("{check}: writing a background snapshot failed: {e}"))
    }

    /// Steps 1 and 2 at once.
    fn write_background(&mut self, snapshot: &Snapshot) -> S::Written {
        let writer = self.storage().snapshot_writer();
        self.write_with(writer, snapshot)
    }

    /// Step 3 as a driver takes it: a snapshot past the stored one (its node adopted it) is
    /// recorded; one at or below it (the node dropped it) is discarded. Returns whether it was
    /// recorded.
    fn record(&mut self, snapshot: &Snapshot, written: S::Written) -> bool {
        let check = self.check;
        let newer = snapshot.index > self.model.snapshot.as_ref().map_or(0, |s| s.index);
        if newer {
            self.storage()
                .record_snapshot(written)
                .unwrap_or_else(|e| panic!("{check}: record_snapshot failed: {e}"));
            apply_to_image(&mut self.model, None, Some(snapshot), &[]);
        } else {
            self.storage()
                .discard_snapshot(written)
                .unwrap_or_else(|e| panic!("{check}: discard_snapshot failed: {e}"));
        }
        newer
    }

    /// Step 3 broken by the caller: recording a snapshot at or below the stored one (which
    /// no node adopts) is refused, and nothing stored changes.
    fn record_stale(&mut self, snapshot: &Snapshot, written: S::Written) {
        let check = self.check;
        let stored = self.model.snapshot.as_ref().map_or(0, |s| s.index);
        assert!(snapshot.index <= stored, "{check}: not a stale snapshot");
        assert!(
            self.storage().record_snapshot(written).is_err(),
            "{check}: recording a snapshot at {} over the stored one at {stored} was accepted",
            snapshot.index
        );
    }
}

check! {
    BackgroundSnapshots;
    /// A snapshot written but never recorded is not what a restart finds: the log still
    /// holds every entry it covers, and the previous snapshot, exactly as before the writer
    /// existed; so does a writer dropped before it wrote. The next snapshot is recorded as
    /// usual.
    fn background_snapshot_written_but_not_recorded_changes_nothing(p) {
        p.persist(Some(hard_state(1, Some(1), 3)), None, entries(1..=10, 1));
        p.persist(None, Some(snapshot(4, 1, b"first")), vec![]);
        p.persist(Some(hard_state(1, Some(1), 10)), None, entries(11..=30, 1));
        drop(p.storage().snapshot_writer());
        p.verify("a writer dropped before writing");
        let written = p.write_background(&snapshot(25, 1, b"never recorded"));
        p.verify_live("written, not recorded");
        // The log goes on meanwhile.
        p.persist_commit(hard_state(1, Some(1), 20));
        p.persist(None, None, entries(31..=32, 1));
        p.verify_live("written, not recorded, then more persists");
        // A crash now: the written snapshot is lost with the process.
        p.reopen();
        drop(written);
        p.verify_live("written, not recorded, after reopen");
        assert_eq!(p.model.entries.first().map(|e| e.index), Some(5));
        let s = snapshot(28, 1, b"recorded");
        let written = p.write_background(&s);
        assert!(p.record(&s, written));
        p.verify("the next one recorded");
    }
}

check! {
    BackgroundSnapshots;
    /// Entries, hard states and a conflicting suffix past its index, persisted while the
    /// snapshot was written (and before, once its writer existed), stay; the snapshot
    /// replaces what it covers only when recorded.
    fn background_snapshot_recorded_after_later_persists(p) {
        p.persist(Some(hard_state(1, Some(1), 5)), None, entries(1..=10, 1));
        let s = snapshot(6, 1, b"taken at 6");
        let writer = p.storage().snapshot_writer();
        p.persist(Some(hard_state(1, Some(1), 8)), None, entries(11..=12, 1));
        let written = p.write_with(writer, &s);
        p.persist(None, None, entries(13..=20, 1));
        p.persist_commit(hard_state(1, Some(1), 12));
        p.write_then_sync(Some(hard_state(2, None, 12)), None, entries(15..=18, 2));
        p.verify_live("before the record");
        assert_eq!(p.model.entries.len(), 18, "every entry is still stored");
        assert!(p.record(&s, written));
        p.verify("recorded");
        p.persist(None, None, entries(19..=21, 2));
        p.verify("appended after the record");
    }
}

check! {
    BackgroundSnapshots;
    /// A snapshot persisted at a later index while the background one was written (a
    /// leader's) wins: the older one is discarded and changes nothing, and recording it
    /// instead is refused with nothing written; also when the leader's came between the
    /// writer's creation and its write, and at an equal index.
    fn background_snapshot_overtaken_by_a_persisted_one_is_dropped(p) {
        p.persist(Some(hard_state(1, Some(1), 5)), None, entries(1..=10, 1));
        let s = snapshot(6, 1, b"own, at 6");
        let written = p.write_background(&s);
        p.persist(Some(hard_state(2, None, 30)), Some(snapshot(30, 2, b"leader's")), vec![]);
        p.persist(None, None, entries(31..=33, 2));
        assert!(!p.record(&s, written));
        p.verify("after the older snapshot was dropped");
        let written = p.write_background(&s);
        p.record_stale(&s, written);
        p.verify_live("after recording an older snapshot was refused");

        let s = snapshot(32, 2, b"own, at 32");
        let writer = p.storage().snapshot_writer();
        p.persist(Some(hard_state(3, None, 40)), Some(snapshot(40, 3, b"leader's, at 40")), vec![]);
        let written = p.write_with(writer, &s);
        p.verify_live("the leader's snapshot, then the own one written");
        assert!(!p.record(&s, written));
        p.verify("after an own snapshot written after a leader's was dropped");

        let same = snapshot(40, 3, b"own, at 40");
        let written = p.write_background(&same);
        p.record_stale(&same, written);
        p.verify_live("after recording an equal one was refused");
        let written = p.write_background(&same);
        assert!(!p.record(&same, written));
        p.verify("after an equal one was dropped");
    }
}

/// Random persists with background snapshots started, written, recorded, overtaken, dropped
/// and lost to restarts, checked against the model after every restart.
pub fn random_background_snapshots_match_the_model<S: BackgroundSnapshots>(
    fresh: &mut dyn FnMut() -> S,
    reopen: &mut dyn FnMut(S) -> S,
) {
    for seed in 1..=3 {
        random_background_snapshots_with(seed, 200, fresh, reopen);
    }
}

/// The background snapshot of [`random_background_snapshots_with`], if one is under way.
enum Pending<S: BackgroundSnapshots> {
    Idle,
    Started(Snapshot, S::Writer),
    Written(Snapshot, S::Written),
}

/// [`random_background_snapshots_match_the_model`] for one seed and number of steps.
pub fn random_background_snapshots_with<S: BackgroundSnapshots>(
    seed: u64,
    steps: usize,
    fresh: &mut dyn FnMut() -> S,
    reopen: &mut dyn FnMut(S) -> S,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut p = Probe::new("random_background_snapshots_match_the_model", fresh, reopen);
    let mut term: Term = 1;
    let mut pending = Pending::<S>::Idle;
    for step in 0..steps {
        let last = p
            .model
            .entries
            .last()
            .map(|e| e.index)
            .or(p.model.snapshot.as_ref().map(|s| s.index))
            .unwrap_or(0);
        if chance(&mut rng, 10) {
            term += 1;
        }
        pending = match (below(&mut rng, 100), pending) {
            // Start one, as a node does: at a stored entry, at most one at a time.
            (0..=11, Pending::Idle) if !p.model.entries.is_empty() => {
                let at = below(&mut rng, p.model.entries.len() as u64) as usize;
                let e = &p.model.entries[at];
                let (index, snap_term) = (e.index, e.term);
                let data_len = if chance(&mut rng, 10) { 20_000 } else { 2_000 };
                let data = (0..below(&mut rng, data_len))
                    .map(|_| rng.next_u32() as u8)
                    .collect::<Vec<u8>>();
                let s = Snapshot {
                    index,
                    term: snap_term,
                    membership: Membership::new(1..=below(&mut rng, 5) + 1),
                    data,
                };
                Pending::Started(s, p.storage().snapshot_writer())
            }
            (0..=11, Pending::Started(s, writer)) => {
                let written = p.write_with(writer, &s);
                Pending::Written(s, written)
            }
            (0..=11, Pending::Written(s, written)) => {
                p.record(&s, written);
                Pending::Idle
            }
            // Given up: the writer (or what it wrote) is dropped unrecorded.
            (12..=13, _) => Pending::Idle,
            // A leader's snapshot, now and then past the pending one.
            (14..=18, pending) => {
                let index = last + 1 + below(&mut rng, 5);
                let s = snapshot(index, term, b"a leader's");
                p.persist(Some(hard_state(term, None, index)), Some(s), vec![]);
                pending
            }
            (19..=23, pending) => {
                let hs = HardState {
                    commit: last,
                    ..p.model.hard_state
                };
                p.persist_commit(hs);
                pending
            }
            (_, pending) => {
                // Appends at the end, or overwriting a few entries of the tail.
                let first = last + 1 - below(&mut rng, last.min(3) + 1);
                let count = below(&mut rng, 12) + 1;
                let batch: Vec<Entry> = (first.max(1)..first.max(1) + count)
                    .map(|index| Entry {
                        term,
                        index,
                        payload: random_payload(&mut rng, index),
                    })
                    .collect();
                let hs = chance(&mut rng, 40).then(|| hard_state(term, None, first));
                if chance(&mut rng, 30) {
                    p.write_then_sync(hs, None, batch);
                } else {
                    p.persist(hs, None, batch);
                }
                pending
            }
        };
        if chance(&mut rng, 8) {
            // A restart loses the snapshot being written (its thread ends with the
            // process), and nothing else.
            pending = Pending::Idle;
            p.reopen();
            p.verify_live(&format!("seed {seed} step {step}, after reopen"));
        } else if chance(&mut rng, 10) {
            p.verify_live(&format!("seed {seed} step {step}"));
        }
    }
    match pending {
        Pending::Idle => {}
        Pending::Started(s, writer) => {
            let written = p.write_with(writer, &s);
            p.record(&s, written);
        }
        Pending::Written(s, written) => {
            p.record(&s, written);
        }
    }
    p.verify(&format!("seed {seed} at the end"));
}

/// A recovered state in one line: hard state, snapshot, entries' (index, term) runs.
fn summary(r: &Recovered) -> String {
    let mut runs: Vec<String> = Vec::new();
    let mut run: Option<(Index, Index, Term)> = None;
    let close = |run: (Index, Index, Term), runs: &mut Vec<String>| {
        runs.push(format!("{}..={}@{}", run.0, run.1, run.2));
    };
    for e in &r.entries {
        run = match run {
            Some((a, b, t)) if e.index == b + 1 && e.term == t => Some((a, e.index, t)),
            Some(done) => {
                close(done, &mut runs);
                Some((e.index, e.index, e.term))
            }
            None => Some((e.index, e.index, e.term)),
        };
    }
    if let Some(done) = run {
        close(done, &mut runs);
    }
    format!(
        "{:?}, snapshot {:?}, entries [{}] ({} payload bytes)",
        r.hard_state,
        r.snapshot.as_ref().map(|s| (s.index, s.term, s.data.len())),
        runs.join(", "),
        r.entries
            .iter()
            .map(|e| format!("{:?}", e.payload).len())
            .sum::<usize>()
    )
}

fn entry(index: Index, term: Term) -> Entry {
    Entry {
        term,
        index,
        payload: Payload::Noop,
    }
}

fn entries(indexes: std::ops::RangeInclusive<Index>, term: Term) -> Vec<Entry> {
    indexes.map(|i| entry(i, term)).collect()
}

fn snapshot(index: Index, term: Term, data: &[u8]) -> Snapshot {
    Snapshot {
        index,
        term,
        membership: Membership::new([1, 2, 3]),
        data: data.to_vec(),
    }
}

fn hard_state(term: Term, vote: Option<u64>, commit: Index) -> HardState {
    HardState { term, vote, commit }
}

check! {
    /// A new storage holds nothing, before and after a restart.
    fn empty_storage_recovers_empty(p) {
        p.verify("fresh");
        p.verify("reopened twice");
    }
}

check! {
    /// Term, vote and commit survive a restart; the latest persisted wins, including a vote
    /// taken back to none in a new term (DESIGN rule 1: durable before the vote is sent).
    fn hard_state_round_trips(p) {
        p.persist(Some(hard_state(1, Some(2), 0)), None, vec![]);
        p.verify("after voting for 2 in term 1");
        p.persist(Some(hard_state(2, None, 0)), None, vec![]);
        p.verify("after moving to term 2 without a vote");
        p.persist(Some(hard_state(2, Some(3), 7)), None, vec![]);
        p.verify("after voting for 3 in term 2");
    }
}

check! {
    /// A commit index stored by `persist_commit` (not necessarily durable yet) is made durable
    /// by the next `persist` along with its own parts, also where that persist starts a new
    /// segment.
    fn unsynced_commit_index_is_made_durable_by_the_next_persist(p) {
        p.persist(Some(hard_state(1, Some(1), 2)), None, entries(1..=5, 1));
        p.persist_commit(hard_state(1, Some(1), 4));
        p.persist(None, None, entries(6..=6, 1));
        p.verify("after the next persist");
        for commit in 5..=6 {
            p.persist_commit(hard_state(1, Some(1), commit));
        }
        p.persist(Some(hard_state(2, None, 6)), None, entries(7..=40, 2));
        p.verify("after commit indexes 5 and 6, then a new term and 34 entries");
        assert_eq!(p.model.hard_state.commit, 6);
    }
}

check! {
    /// `write` then `sync` means what `persist` means (pipelined persistence: a leader
    /// replicates while its fsync runs): entries, a snapshot and a hard state written in
    /// several writes, then synced once, all survive a restart; so does a commit index
    /// stored by `persist_commit` before them; a `sync` with nothing written changes nothing.
    fn written_parts_are_durable_once_synced(p) {
        p.sync();
        p.verify("a sync of nothing");
        p.write_then_sync(Some(hard_state(1, Some(1), 0)), None, entries(1..=3, 1));
        p.verify("after writing and syncing 1..=3");
        p.persist_commit(hard_state(1, Some(1), 2));
        let check = p.check;
        for batch in [entries(4..=6, 1), entries(6..=9, 2)] {
            p.storage()
                .write(None, None, &batch)
                .unwrap_or_else(|e| panic!("{check}: write failed: {e}"));
            apply_to_image(&mut p.model, None, None, &batch);
        }
        p.sync();
        p.verify("after two writes (the second replacing index 6) and one sync");
        p.write_then_sync(
            Some(hard_state(2, None, 8)),
            Some(snapshot(5, 1, b"state")),
            entries(10..=40, 2),
        );
        p.verify("after a snapshot, entries and a hard state in one synced write");
    }
}

check! {
    /// Entries appended over several persists all come back, in order.
    fn appended_entries_round_trip(p) {
        p.persist(None, None, entries(1..=5, 1));
        p.verify("after 1..=5");
        p.persist(Some(hard_state(1, Some(1), 3)), None, entries(6..=8, 1));
        p.verify("after 6..=8");
        assert_eq!(p.model.entries.len(), 8);
    }
}

check! {
    /// Appending at an index already stored discards that entry and everything after it
    /// (Raft §5.3), also across a restart.
    fn conflicting_suffix_is_replaced(p) {
        p.persist(None, None, entries(1..=5, 1));
        p.persist(None, None, entries(3..=4, 2));
        p.verify("after replacing 3..=5 with 3..=4 of term 2");
        assert_eq!(
            p.model
                .entries
                .iter()
                .map(|e| (e.index, e.term))
                .collect::<Vec<_>>(),
            vec![(1, 1), (2, 1), (3, 2), (4, 2)]
        );
        p.persist(None, None, entries(5..=6, 2));
        p.verify("after appending 5..=6 again");
        p.persist(None, None, entries(2..=2, 3));
        p.verify("after replacing all but entry 1");
    }
}

check! {
    /// A snapshot whose (index, term) is in the log discards the entries it covers and keeps
    /// the rest (Raft §7).
    fn snapshot_discards_covered_prefix_and_keeps_matching_tail(p) {
        p.persist(Some(hard_state(1, Some(1), 10)), None, entries(1..=10, 1));
        p.persist(None, Some(snapshot(5, 1, b"state at 5")), vec![]);
        p.verify("after a snapshot at 5");
        assert_eq!(p.model.entries.first().map(|e| e.index), Some(6));
        p.persist(None, None, entries(11..=12, 1));
        p.verify("after appending past the snapshot");
    }
}

check! {
    /// A snapshot whose index holds an entry of another term discards every entry.
    fn snapshot_with_other_term_discards_everything(p) {
        p.persist(None, None, entries(1..=10, 1));
        p.persist(None, Some(snapshot(7, 2, b"leader's state")), vec![]);
        p.verify("after a snapshot at 7 in term 2");
        assert!(p.model.entries.is_empty());
        p.persist(None, None, entries(8..=9, 2));
        p.verify("after appending after the snapshot");
    }
}

check! {
    /// A snapshot past the end of the log discards every entry.
    fn snapshot_beyond_the_log_discards_everything(p) {
        p.persist(None, None, entries(1..=5, 1));
        p.persist(None, Some(snapshot(20, 3, b"far ahead")), vec![]);
        p.verify("after a snapshot at 20");
        p.persist(None, None, entries(21..=23, 3));
        p.verify("after appending 21..=23");
    }
}

check! {
    /// One persist carrying all three parts applies the snapshot, then the entries, then the
    /// hard state.
    fn one_persist_applies_snapshot_then_entries_then_hard_state(p) {
        p.persist(Some(hard_state(1, Some(1), 0)), None, entries(1..=5, 1));
        p.persist(
            Some(hard_state(2, Some(2), 3)),
            Some(snapshot(3, 1, b"at 3")),
            entries(4..=5, 2),
        );
        p.verify("after snapshot 3 + entries 4..=5 of term 2 + hard state");
        assert_eq!(
            p.model
                .entries
                .iter()
                .map(|e| (e.index, e.term))
                .collect::<Vec<_>>(),
            vec![(4, 2), (5, 2)]
        );
    }
}

check! {
    /// A later snapshot replaces the earlier one.
    fn newer_snapshot_replaces_older(p) {
        p.persist(None, None, entries(1..=10, 1));
        p.persist(None, Some(snapshot(4, 1, b"first")), vec![]);
        p.verify("after the first snapshot");
        p.persist(None, Some(snapshot(8, 1, b"second")), vec![]);
        p.verify("after the second snapshot");
        p.persist(None, Some(snapshot(8, 1, b"second, again")), vec![]);
        p.verify("after the same snapshot position with other data");
    }
}

check! {
    /// A persist with nothing in it changes nothing.
    fn empty_persist_changes_nothing(p) {
        p.persist(Some(hard_state(3, Some(1), 2)), None, entries(1..=3, 3));
        p.persist(None, None, vec![]);
        p.verify("after an empty persist");
    }
}

check! {
    /// A batch larger than a typical record (hundreds of entries, some large) survives whole.
    fn large_batch_round_trips(p) {
        let batch = (1..=400)
            .map(|i| Entry {
                term: 1,
                index: i,
                payload: Payload::Command(Command::Campaign {
                    election: format!("election-{i}"),
                    session: i,
                    value: vec![(i % 251) as u8; (i as usize % 7) * 500],
                }),
            })
            .collect();
        p.persist(Some(hard_state(1, Some(1), 0)), None, batch);
        p.verify("after 400 entries in one persist");
    }
}

/// Random sequences of persists (hard states, snapshots that keep or drop the tail,
/// conflicting appends, gaps, large entries) give exactly what [`apply_to_image`] gives,
/// checked now and then live and after every restart.
pub fn random_persists_match_the_model<S: Storage>(
    fresh: &mut dyn FnMut() -> S,
    reopen: &mut dyn FnMut(S) -> S,
) {
    for seed in 1..=3 {
        random_persists_match_the_model_with(seed, 150, fresh, reopen);
    }
}

/// [`random_persists_match_the_model`] for one seed and number of persists.
pub fn random_persists_match_the_model_with<S: Storage>(
    seed: u64,
    steps: usize,
    fresh: &mut dyn FnMut() -> S,
    reopen: &mut dyn FnMut(S) -> S,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut p = Probe::new("random_persists_match_the_model", fresh, reopen);
    let mut term: Term = 1;
    for step in 0..steps {
        let last = p
            .model
            .entries
            .last()
            .map(|e| e.index)
            .or(p.model.snapshot.as_ref().map(|s| s.index))
            .unwrap_or(0);
        if chance(&mut rng, 15) {
            term += 1;
        }

        let hs = chance(&mut rng, 50).then(|| HardState {
            term,
            vote: chance(&mut rng, 50).then(|| below(&mut rng, 5) + 1),
            commit: below(&mut rng, last + 1),
        });

        let snap = chance(&mut rng, 12).then(|| {
            let (index, snap_term) = match below(&mut rng, 10) {
                // An entry in the log: the tail after it stays.
                0..=4 if !p.model.entries.is_empty() => {
                    let at = below(&mut rng, p.model.entries.len() as u64) as usize;
                    (p.model.entries[at].index, p.model.entries[at].term)
                }
                // An entry's index with another term: everything goes.
                5..=6 if !p.model.entries.is_empty() => {
                    let at = below(&mut rng, p.model.entries.len() as u64) as usize;
                    (p.model.entries[at].index, p.model.entries[at].term + 1)
                }
                // Anywhere, including past the end or before the current snapshot.
                _ => (below(&mut rng, last + 10), term),
            };
            let data_len = if chance(&mut rng, 10) { 20_000 } else { 300 };
            let data = (0..below(&mut rng, data_len))
                .map(|_| rng.next_u32() as u8)
                .collect::<Vec<u8>>();
            Snapshot {
                index,
                term: snap_term,
                membership: Membership::new(1..=below(&mut rng, 5) + 1),
                data,
            }
        });

        let mut batch = Vec::new();
        if chance(&mut rng, 70) {
            let first = if chance(&mut rng, 3) {
                // A gap after the last entry.
                last + 2 + below(&mut rng, 3)
            } else {
                // At the end, or overwriting up to five entries.
                last + 1 - below(&mut rng, last.min(5) + 1)
            };
            let count = if chance(&mut rng, 5) {
                below(&mut rng, 200) + 1
            } else {
                below(&mut rng, 8) + 1
            };
            for index in first.max(1)..first.max(1) + count {
                batch.push(Entry {
                    term,
                    index,
                    payload: random_payload(&mut rng, index),
                });
            }
            if chance(&mut rng, 2) {
                // Out of order: not what Raft writes, but `apply_to_image` defines it.
                batch.reverse();
            }
        }

        if chance(&mut rng, 30) {
            p.write_then_sync(hs, snap, batch);
        } else {
            p.persist(hs, snap, batch);
        }
        if chance(&mut rng, 25) {
            p.reopen();
            p.verify_live(&format!("seed {seed} step {step}, after reopen"));
        } else if chance(&mut rng, 15) {
            p.verify_live(&format!("seed {seed} step {step}"));
        }
    }
    p.verify(&format!("seed {seed} at the end"));
}

fn random_payload(rng: &mut ChaCha8Rng, index: Index) -> Payload {
    match below(rng, 10) {
        0..=1 => Payload::Noop,
        2 => Payload::Membership(Membership::new(1..=below(rng, 5) + 1)),
        _ => {
            let len = if chance(rng, 5) {
                below(rng, 9_000)
            } else {
                below(rng, 64)
            };
            Payload::Command(Command::Campaign {
                election: format!("e{}", below(rng, 100)),
                session: index,
                value: (0..len).map(|_| rng.next_u32() as u8).collect(),
            })
        }
    }
}

/// A number in `0..n` (`n > 0`); the modulo bias does not matter for a test generator.
fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    rng.next_u64() % n.max(1)
}

/// True with the given probability in percent.
fn chance(rng: &mut ChaCha8Rng, percent: u64) -> bool {
    below(rng, 100) < percent
}
