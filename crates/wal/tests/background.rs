//! Snapshots written off the driver's thread ([`BackgroundSnapshots`]) on files: the same
//! bytes as a persisted snapshot, nothing referred to until the record, an unrecorded file
//! removed on open, a failed write that leaves the log usable, the directory's lock shared
//! with the writer. The conformance suite's background checks cover the semantics against
//! the model; these cover what only files have.

use std::fs;
use std::path::{Path, PathBuf};

use tenure_core::sm::Command;
use tenure_core::storage::{BackgroundSnapshots, SnapshotWriter, Storage};
use tenure_core::types::{Entry, HardState, Membership, Payload, Recovered, Snapshot};
use tenure_wal::{FileStorage, WalError, WalOptions};

fn entry(index: u64, term: u64) -> Entry {
    Entry {
        term,
        index,
        payload: Payload::Command(Command::Campaign {
            election: "nightly-billing".into(),
            session: index,
            value: vec![(index % 251) as u8; 40],
        }),
    }
}

fn entries(indexes: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
    indexes.map(|i| entry(i, 1)).collect()
}

fn hs(commit: u64) -> HardState {
    HardState {
        term: 1,
        vote: Some(1),
        commit,
    }
}

fn snapshot(index: u64, data: Vec<u8>) -> Snapshot {
    Snapshot {
        index,
        term: 1,
        membership: Membership::new([1, 2, 3]),
        data,
    }
}

/// Every file of a directory but the lock (no directories), by name, with its bytes.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().unwrap() != tenure_wal::LOCK_FILE)
        .map(|p| {
            let name = p.file_name().unwrap().to_str().unwrap().to_owned();
            (name, fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

fn names_ending(dir: &Path, suffix: &str) -> Vec<String> {
    files(dir)
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name.ends_with(suffix))
        .collect()
}

fn snapshot_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("snap-{seq:020}.snap"))
}

fn reopen(storage: FileStorage) -> (FileStorage, Recovered) {
    let (dir, options) = (storage.dir().to_path_buf(), *storage.options());
    drop(storage);
    let mut storage = FileStorage::open(&dir, options).unwrap();
    let recovered = storage.recover().unwrap();
    (storage, recovered)
}

/// The format is unchanged: a snapshot written by the writer and recorded leaves exactly the
/// files (segment bytes and snapshot file bytes) that persisting it would have left.
#[test]
fn a_recorded_snapshot_leaves_the_same_bytes_as_a_persisted_one() {
    let s = snapshot(6, b"state at 6".to_vec());
    let (persisted, background) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());

    let mut storage = FileStorage::open(persisted.path(), WalOptions::default()).unwrap();
    storage
        .persist(Some(&hs(6)), None, &entries(1..=10))
        .unwrap();
    storage.persist(None, Some(&s), &[]).unwrap();
    drop(storage);

    let mut storage = FileStorage::open(background.path(), WalOptions::default()).unwrap();
    storage
        .persist(Some(&hs(6)), None, &entries(1..=10))
        .unwrap();
    let written = storage.snapshot_writer().write(&s).unwrap();
    assert_eq!((written.index(), written.term()), (6, 1));
    storage.record_snapshot(written).unwrap();
    drop(storage);

    assert_eq!(files(persisted.path()), files(background.path()));
    assert_eq!(names_ending(background.path(), ".snap").len(), 1);
}

/// Written but never recorded: the log does not refer to the file, a restart finds the state
/// from before the writer (every covered entry), and `open` removes the file.
#[test]
fn an_unrecorded_snapshot_file_is_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    storage
        .persist(Some(&hs(8)), None, &entries(1..=10))
        .unwrap();
    let before = storage.recover().unwrap();
    let written = storage
        .snapshot_writer()
        .write(&snapshot(8, vec![7; 1000]))
        .unwrap();
    assert!(
        snapshot_path(dir.path(), 1).exists(),
        "durable before the record"
    );
    storage.persist(None, None, &entries(11..=11)).unwrap();
    let mut expected = before.clone();
    expected.entries.push(entry(11, 1));
    assert_eq!(storage.recover().unwrap(), expected, "not seen while live");

    // A crash before the record: `written` is never recorded.
    let _never_recorded = written;
    let (storage, recovered) = reopen(storage);
    assert_eq!(recovered, expected);
    assert_eq!(names_ending(dir.path(), ".snap"), Vec::<String>::new());
    assert_eq!(names_ending(dir.path(), ".tmp"), Vec::<String>::new());

    // Crashes mid-write leave a temporary file: removed too.
    let tmp = dir.path().join(format!("snap-{:020}.snap.tmp", 5));
    fs::write(&tmp, b"half a snapshot").unwrap();
    let (_, recovered) = reopen(storage);
    assert_eq!(recovered, expected);
    assert!(!tmp.exists());
}

/// The writer enforces `snapshot_bytes_max` before writing a byte; the storage goes on.
#[test]
fn an_oversize_snapshot_fails_in_the_writer_and_leaves_nothing() {
    let options = WalOptions {
        snapshot_bytes_max: 4096,
        ..WalOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), options).unwrap();
    storage
        .persist(Some(&hs(5)), None, &entries(1..=5))
        .unwrap();
    let before = files(dir.path());
    let e = storage
        .snapshot_writer()
        .write(&snapshot(5, vec![0; 10_000]))
        .unwrap_err();
    assert!(
        matches!(
            e,
            WalError::SnapshotTooLarge {
                index: 5,
                max: 4096,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(files(dir.path()), before, "nothing written");
    storage.persist(None, None, &entries(6..=6)).unwrap();
    let small = snapshot(6, vec![1; 100]);
    let written = storage.snapshot_writer().write(&small).unwrap();
    storage.record_snapshot(written).unwrap();
    let (_, recovered) = reopen(storage);
    assert_eq!(recovered.snapshot, Some(small));
}

/// A write that fails on the way (here the rename, onto a directory in the file's place)
/// leaves no file behind and does not poison the storage: the log goes on, and the next
/// snapshot is written under another name.
#[test]
fn a_failed_write_does_not_poison_the_storage() {
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    storage
        .persist(Some(&hs(5)), None, &entries(1..=5))
        .unwrap();
    let blocker = snapshot_path(dir.path(), 1);
    fs::create_dir(&blocker).unwrap();
    let e = storage
        .snapshot_writer()
        .write(&snapshot(5, vec![3; 100]))
        .unwrap_err();
    assert!(matches!(e, WalError::Io { op: "rename", .. }), "{e}");
    assert_eq!(names_ending(dir.path(), ".tmp"), Vec::<String>::new());
    storage
        .persist(Some(&hs(6)), None, &entries(6..=6))
        .unwrap();
    let s = snapshot(6, vec![4; 100]);
    let written = storage.snapshot_writer().write(&s).unwrap();
    storage.record_snapshot(written).unwrap();
    fs::remove_dir(&blocker).unwrap();
    let (_, recovered) = reopen(storage);
    assert_eq!(recovered.snapshot, Some(s));
    assert_eq!(recovered.hard_state, hs(6));
}

/// The writer on a thread of its own while the driver's thread persists, then the record:
/// what the server does. The file is larger than one write piece (8 MiB), so it is written
/// and fdatasynced in several.
#[test]
fn a_large_snapshot_written_on_another_thread_while_persists_go_on() {
    fn assert_send_static<T: Send + 'static>(_: &T) {}
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    storage
        .persist(Some(&hs(10)), None, &entries(1..=20))
        .unwrap();
    let s = snapshot(10, (0..20 << 20).map(|i| (i % 253) as u8).collect());
    let writer = storage.snapshot_writer();
    assert_send_static(&writer);
    let thread = std::thread::spawn({
        let s = s.clone();
        move || writer.write(&s)
    });
    for i in 21..=60 {
        storage
            .persist(Some(&hs(i - 5)), None, &[entry(i, 1)])
            .unwrap();
    }
    let written = thread.join().unwrap().unwrap();
    assert_send_static(&written);
    assert_eq!(storage.recover().unwrap().entries.len(), 60);
    storage.record_snapshot(written).unwrap();
    let (_, recovered) = reopen(storage);
    assert_eq!(recovered.snapshot, Some(s));
    assert_eq!(recovered.entries, entries(11..=60));
    assert_eq!(recovered.hard_state, hs(55));
}

/// The record compacts as a persist does: the previous snapshot file and the segments the
/// snapshot covers wholly go; segments holding later entries stay.
#[test]
fn the_record_compacts_like_a_persist() {
    let options = WalOptions {
        segment_bytes_max: 512,
        ..WalOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), options).unwrap();
    for i in 1..=60 {
        storage.persist(Some(&hs(i)), None, &[entry(i, 1)]).unwrap();
    }
    storage
        .persist(None, Some(&snapshot(10, b"first".to_vec())), &[])
        .unwrap();
    let first_snapshot = names_ending(dir.path(), ".snap");
    let segments_before = storage.segments().count();

    let written = storage
        .snapshot_writer()
        .write(&snapshot(40, b"second".to_vec()))
        .unwrap();
    assert_eq!(
        storage.segments().count(),
        segments_before,
        "nothing goes before the record"
    );
    storage.record_snapshot(written).unwrap();
    // The dead files go on a thread of their own.
    storage.finish_removals();
    let snaps = names_ending(dir.path(), ".snap");
    assert_eq!(snaps.len(), 1);
    assert_ne!(snaps, first_snapshot);
    let segments_after = storage.segments().count();
    assert!(
        segments_after < segments_before && segments_after > 1,
        "{segments_before} -> {segments_after}"
    );
    let (_, recovered) = reopen(storage);
    assert_eq!(recovered.entries, entries(41..=60));
}

/// A snapshot overtaken by a stored one at or past its index (its node dropped it) is
/// discarded: its file is removed and nothing else changes; the stored snapshot (persisted
/// after the writer reserved its file number, so under another name) stays. Recording it
/// instead is refused and writes nothing.
#[test]
fn a_stale_snapshot_is_discarded_and_recording_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    storage
        .persist(Some(&hs(5)), None, &entries(1..=10))
        .unwrap();
    let writer = storage.snapshot_writer();
    let leaders = snapshot(30, b"a leader's".to_vec());
    storage.persist(None, Some(&leaders), &[]).unwrap();
    let written = writer.write(&snapshot(6, b"own".to_vec())).unwrap();
    assert_eq!(names_ending(dir.path(), ".snap").len(), 2);
    let before = files(dir.path());
    match storage.record_snapshot(written) {
        Err(WalError::SnapshotNotNewer {
            index: 6,
            stored: 30,
        }) => {}
        other => panic!("expected SnapshotNotNewer, got {other:?}"),
    }
    assert_eq!(files(dir.path()), before, "a refused record writes nothing");

    let written = storage
        .snapshot_writer()
        .write(&snapshot(6, b"own".to_vec()))
        .unwrap();
    let before = files(dir.path());
    storage.discard_snapshot(written).unwrap();
    let after = files(dir.path());
    assert_eq!(after.len() + 1, before.len(), "only the written file went");
    assert!(
        after.iter().all(|f| before.contains(f)),
        "nothing else changed"
    );
    let (_, recovered) = reopen(storage);
    assert_eq!(recovered.snapshot, Some(leaders));
}

/// A writer shares the directory's lock: no second open (which would remove its temporary
/// file, or reuse its file number) until it is done.
#[test]
fn the_directory_stays_locked_while_a_writer_lives() {
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    storage
        .persist(Some(&hs(1)), None, &entries(1..=3))
        .unwrap();
    let writer = storage.snapshot_writer();
    drop(storage);
    match FileStorage::open(dir.path(), WalOptions::default()) {
        Err(WalError::Locked { .. }) => {}
        Err(e) => panic!("expected Locked, got {e}"),
        Ok(_) => panic!("expected Locked"),
    }
    let _never_recorded = writer.write(&snapshot(2, b"late".to_vec())).unwrap();
    let mut reopened = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    assert_eq!(reopened.recover().unwrap().entries, entries(1..=3));
    assert_eq!(names_ending(dir.path(), ".snap"), Vec::<String>::new());
}

/// A written snapshot belongs to the handle whose writer wrote it: recording it in another
/// (the directory reopened, its file removed as unreferenced) is a caller's mistake.
#[test]
#[should_panic(expected = "a snapshot written for another open")]
fn recording_in_another_handle_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    storage
        .persist(Some(&hs(1)), None, &entries(1..=3))
        .unwrap();
    let written = storage
        .snapshot_writer()
        .write(&snapshot(2, b"s".to_vec()))
        .unwrap();
    let (mut reopened, _) = reopen(storage);
    let _ = reopened.record_snapshot(written);
}
