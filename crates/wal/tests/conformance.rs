//! The storage conformance suite against every implementation in reach: the files of this
//! crate (with default limits, and with tiny ones that force segment rotation, multi-part
//! persists and compaction on almost every step) and the core's `MemStorage`.

use std::path::PathBuf;

use tempfile::TempDir;
use tenure_wal::{FileStorage, WalOptions};

mod common;
use common::tiny;

/// `fresh` for files: each storage in a new temporary directory, removed when the test's
/// closure is dropped.
fn fresh_files(options: WalOptions) -> impl FnMut() -> FileStorage {
    let mut dirs: Vec<TempDir> = Vec::new();
    move || {
        let dir = tempfile::tempdir().expect("temporary directory");
        let storage = FileStorage::open(dir.path(), options).expect("open a new log");
        dirs.push(dir);
        storage
    }
}

/// `reopen` for files: what a restarted process finds.
fn reopen_files(storage: FileStorage) -> FileStorage {
    let dir: PathBuf = storage.dir().to_path_buf();
    let options = *storage.options();
    drop(storage);
    FileStorage::open(&dir, options).expect("reopen the log")
}

mod file_storage_default_limits {
    use super::*;
    tenure_wal::conformance_tests!(fresh_files(WalOptions::default()), reopen_files);
}

mod file_storage_tiny_limits {
    use super::*;
    tenure_wal::conformance_tests!(fresh_files(tiny()), reopen_files);

    #[test]
    fn longer_random_runs() {
        let mut fresh = fresh_files(tiny());
        let mut reopen = reopen_files;
        for seed in 100..104 {
            tenure_wal::conformance::random_persists_match_the_model_with(
                seed,
                300,
                &mut fresh,
                &mut reopen,
            );
        }
    }
}

mod mem_storage {
    use tenure_core::storage::MemStorage;
    tenure_wal::conformance_tests!(MemStorage::new, |s: MemStorage| s);

    #[test]
    fn run_all_covers_every_check() {
        tenure_wal::conformance::run_all(MemStorage::new, |s| s);
        assert_eq!(tenure_wal::conformance::checks::<MemStorage>().len(), 14);
    }
}

mod background_snapshots_file_storage_default_limits {
    use super::*;
    tenure_wal::background_conformance_tests!(fresh_files(WalOptions::default()), reopen_files);
}

mod background_snapshots_file_storage_tiny_limits {
    use super::*;
    tenure_wal::background_conformance_tests!(fresh_files(tiny()), reopen_files);

    #[test]
    fn longer_random_runs() {
        let mut fresh = fresh_files(tiny());
        let mut reopen = reopen_files;
        for seed in 100..104 {
            tenure_wal::conformance::random_background_snapshots_with(
                seed,
                400,
                &mut fresh,
                &mut reopen,
            );
        }
    }
}

mod background_snapshots_mem_storage {
    use tenure_core::storage::MemStorage;
    tenure_wal::background_conformance_tests!(MemStorage::new, |s: MemStorage| s);
}

mod background_snapshots_run_all {
    use super::*;
    use tenure_core::storage::MemStorage;

    #[test]
    fn run_all_background_covers_every_check() {
        tenure_wal::conformance::run_all_background(MemStorage::new, |s| s);
        tenure_wal::conformance::run_all_background(fresh_files(tiny()), reopen_files);
        assert_eq!(
            tenure_wal::conformance::background_checks::<MemStorage>().len(),
            4
        );
    }
}

/// The background checks catch what they exist for: each injected mistake of the background
/// path fails some of them, and the same checks pass with every switch off.
#[cfg(feature = "inject-bugs")]
mod injected_bugs {
    use super::*;

    /// The background checks that fail (panic) on files with `bug` applied to the options.
    fn failing_checks(bug: fn(&mut WalOptions)) -> Vec<&'static str> {
        let mut options = tiny();
        bug(&mut options);
        tenure_wal::conformance::background_checks::<FileStorage>()
            .into_iter()
            .filter(|(_, check)| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    check(&mut fresh_files(options), &mut reopen_files);
                }))
                .is_err()
            })
            .map(|(name, _)| name)
            .collect()
    }

    #[test]
    fn every_background_check_passes_with_no_bug_switched_on() {
        assert_eq!(failing_checks(|_| {}), Vec::<&str>::new());
    }

    /// Entries a snapshot covers discarded before `record_snapshot` (the log refers to the
    /// written file at its next persist): a crash in between would restart from a snapshot
    /// the node never adopted, and the contract says recovery must not see it.
    #[test]
    fn discarding_covered_entries_before_the_record_is_caught() {
        let failing = failing_checks(|o| o.bug_discard_before_record = true);
        assert_eq!(
            failing,
            [
                "background_snapshot_written_but_not_recorded_changes_nothing",
                "background_snapshot_recorded_after_later_persists",
                "random_background_snapshots_match_the_model",
            ]
        );
    }

    /// A background snapshot recorded although a later one (a leader's) was persisted
    /// meanwhile: the stored snapshot would go back, and entries after it would be lost. The
    /// log must refuse it (a driver records only what its node adopted, so the random check,
    /// which drives it as a driver does, never asks).
    #[test]
    fn recording_a_stale_snapshot_is_caught() {
        let failing = failing_checks(|o| o.bug_record_stale_snapshot = true);
        assert_eq!(
            failing,
            ["background_snapshot_overtaken_by_a_persisted_one_is_dropped"]
        );
    }
}
