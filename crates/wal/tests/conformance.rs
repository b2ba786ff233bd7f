//! The storage conformance suite against every implementation in reach: the files of this
//! crate (with default limits, and with tiny ones that force segment rotation, multi-part
//! persists and compaction on almost every step) and the core's `MemStorage`.

use std::path::PathBuf;

use tempfile::TempDir;
use tenure_wal::{FileStorage, WalOptions};

/// Limits small enough that rotation, compaction and split persists happen constantly.
fn tiny() -> WalOptions {
    WalOptions {
        segment_bytes_max: 2048,
        record_bytes_max: 16 * 1024,
        snapshot_bytes_max: 1 << 20,
    }
}

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
