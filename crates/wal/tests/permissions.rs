//! The data directory and everything the log writes into it belong to the server's user
//! alone: the directory is 0700 and every file 0600, whatever the process's umask, and an
//! existing directory that others could read is narrowed when the log opens it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tenure_core::storage::Storage;
use tenure_core::types::{Entry, HardState, Membership, Payload, Snapshot};
use tenure_wal::{FileStorage, WalOptions};

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn write_something(storage: &mut FileStorage) {
    let hs = HardState {
        term: 1,
        vote: Some(1),
        commit: 1,
    };
    let entry = Entry {
        term: 1,
        index: 1,
        payload: Payload::Noop,
    };
    storage.persist(Some(&hs), None, &[entry]).unwrap();
    let snapshot = Snapshot {
        index: 1,
        term: 1,
        membership: Membership::new([1]),
        data: vec![1, 2, 3],
    };
    storage.persist(None, Some(&snapshot), &[]).unwrap();
}

#[test]
fn a_new_data_directory_is_0700_and_its_files_0600() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    let mut storage = FileStorage::open(&dir, WalOptions::default()).unwrap();
    write_something(&mut storage);
    assert_eq!(mode(&dir), 0o700, "data directory");
    let mut files = 0;
    for item in fs::read_dir(&dir).unwrap() {
        let path = item.unwrap().path();
        assert_eq!(mode(&path), 0o600, "{}", path.display());
        files += 1;
    }
    assert!(
        files >= 3,
        "a segment, a snapshot and the lock file: {files} files"
    );
}

#[test]
fn an_existing_world_readable_data_directory_is_narrowed() {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let storage = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    assert_eq!(mode(dir.path()), 0o700);
    drop(storage);
}
