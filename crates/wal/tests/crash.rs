//! What recovery does with the files a crash (or a bad disk) leaves: a torn tail is cut and
//! the log goes on from the last complete persist, never inventing data; damage anywhere
//! else is refused with an error naming the file and byte, and nothing is changed.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use tempfile::TempDir;
use tenure_core::sm::Command;
use tenure_core::storage::{apply_to_image, Storage};
use tenure_core::types::{Entry, HardState, Membership, Payload, Recovered, Snapshot};
use tenure_wal::{FileStorage, WalError, WalOptions};

fn entry(index: u64, term: u64, value_bytes: usize) -> Entry {
    Entry {
        term,
        index,
        payload: Payload::Command(Command::Campaign {
            election: "nightly-billing".into(),
            session: index,
            value: vec![(index % 251) as u8; value_bytes],
        }),
    }
}

fn hs(term: u64, commit: u64) -> HardState {
    HardState {
        term,
        vote: Some(1),
        commit,
    }
}

fn snapshot(index: u64, term: u64) -> Snapshot {
    Snapshot {
        index,
        term,
        membership: Membership::new([1, 2, 3]),
        data: format!("state machine at {index}").into_bytes(),
    }
}

/// Segment files of a directory, oldest first.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    files.sort();
    files
}

fn files_with_extension(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_str().unwrap().ends_with(ext))
        .collect();
    files.sort();
    files
}

fn last_segment(dir: &Path) -> PathBuf {
    segments(dir).pop().expect("a log has a segment")
}

fn len(path: &Path) -> u64 {
    fs::metadata(path).unwrap().len()
}

fn copy_dir(from: &Path) -> TempDir {
    let to = tempfile::tempdir().unwrap();
    for item in fs::read_dir(from).unwrap() {
        let path = item.unwrap().path();
        fs::copy(&path, to.path().join(path.file_name().unwrap())).unwrap();
    }
    to
}

fn recover_dir(dir: &Path, options: WalOptions) -> Result<(FileStorage, Recovered), WalError> {
    let mut storage = FileStorage::open(dir, options)?;
    let recovered = storage.recover()?;
    Ok((storage, recovered))
}

fn open_err(dir: &Path, options: WalOptions) -> WalError {
    match FileStorage::open(dir, options) {
        Ok(_) => panic!("open of {} should have failed", dir.display()),
        Err(e) => e,
    }
}

/// A log with persists recorded: the model after each and where each ended on disk.
struct Written {
    dir: TempDir,
    options: WalOptions,
    /// Model state after persist i (index 0: before any).
    states: Vec<Recovered>,
    /// (segment, length) after persist i (index 0: after open).
    ends: Vec<(PathBuf, u64)>,
}

type Persist = (Option<HardState>, Option<Snapshot>, Vec<Entry>);

fn write(options: WalOptions, persists: Vec<Persist>) -> Written {
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), options).unwrap();
    let mut model = Recovered::default();
    let mut states = vec![model.clone()];
    let seg = last_segment(dir.path());
    let mut ends = vec![(seg.clone(), len(&seg))];
    for (h, s, e) in persists {
        storage.persist(h.as_ref(), s.as_ref(), &e).unwrap();
        apply_to_image(&mut model, h.as_ref(), s.as_ref(), &e);
        states.push(model.clone());
        let seg = last_segment(dir.path());
        ends.push((seg.clone(), len(&seg)));
    }
    drop(storage);
    Written {
        dir,
        options,
        states,
        ends,
    }
}

fn five_persists() -> Vec<Persist> {
    vec![
        (
            Some(hs(1, 0)),
            None,
            (1..=3).map(|i| entry(i, 1, 10)).collect(),
        ),
        (
            Some(hs(1, 2)),
            None,
            (4..=6).map(|i| entry(i, 1, 10)).collect(),
        ),
        (None, Some(snapshot(2, 1)), vec![entry(7, 1, 10)]),
        (
            Some(hs(2, 5)),
            None,
            (5..=8).map(|i| entry(i, 2, 10)).collect(),
        ),
        (
            Some(hs(2, 7)),
            None,
            (9..=11).map(|i| entry(i, 2, 20)).collect(),
        ),
    ]
}

/// What the WAL accepts as the remains of a segment whose creation a crash cut short: a
/// prefix of its header record (shorter than the length it announces, for a length a header
/// can have), or zeros (blocks never written). Sectors are written whole or not at all.
fn could_be_a_torn_header(bytes: &[u8]) -> bool {
    if bytes.iter().all(|&b| b == 0) || bytes.len() < 8 {
        return true;
    }
    let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
    len + 8 <= 256 && len + 8 > bytes.len()
}

/// Cut the log at every byte of its last persist, with nothing, garbage or zeros after the
/// cut: recovery gives the state before that persist, or after it when the cut leaves it
/// whole; and the log takes new writes afterwards.
/// `stride` > 1 tries every `stride`-th cut (and the end) with fewer tails, to bound the
/// time of large persists.
fn assert_torn_tail_recovers(w: &Written, stride: usize) {
    let n = w.states.len() - 1;
    let (seg, end) = w.ends[n].clone();
    let (prev_seg, prev_end) = w.ends[n - 1].clone();
    let start = if seg == prev_seg { prev_end } else { 0 };
    let header_end = if start == 0 {
        let bytes = fs::read(&seg).unwrap();
        8 + u64::from(u32::from_le_bytes(bytes[..4].try_into().unwrap()))
    } else {
        start
    };
    let all_tails: [&[u8]; 4] = [
        b"",
        b"\x13\x00\x00\x00garbage after a torn write",
        &[0u8; 64],
        &[0xff; 9],
    ];
    let tails = if stride == 1 {
        &all_tails[..]
    } else {
        &all_tails[..2]
    };
    // Every record boundary too: a cut there leaves whole records but maybe not whole
    // persists.
    let bytes = fs::read(&seg).unwrap();
    let mut boundaries = Vec::new();
    let mut at = 0u64;
    while at < end {
        let i = at as usize;
        at += 8 + u64::from(u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap()));
        boundaries.push(at);
    }
    let mut cuts: Vec<u64> = (start..end).step_by(stride).chain(boundaries).collect();
    cuts.retain(|&c| c >= start && c <= end);
    cuts.sort_unstable();
    cuts.dedup();
    for cut in cuts {
        for (t, tail) in tails.iter().enumerate() {
            let copy = copy_dir(w.dir.path());
            let path = copy.path().join(seg.file_name().unwrap());
            let file = OpenOptions::new().write(true).open(&path).unwrap();
            file.set_len(cut).unwrap();
            drop(file);
            OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap()
                .write_all(tail)
                .unwrap();
            let damaged = fs::read(&path).unwrap();
            let h = header_end as usize;
            let header_intact = damaged.len() >= h && damaged[..h] == bytes[..h];
            if cut < header_end && !header_intact && !could_be_a_torn_header(&damaged) {
                // Garbage where a new segment's header should be is not what a crash
                // leaves: refused, and the file is kept as it is.
                match open_err(copy.path(), w.options) {
                    WalError::Corrupt { file, offset, .. } => {
                        assert_eq!(
                            (file, offset),
                            (path.clone(), 0),
                            "cut at {cut} with tail {t}"
                        )
                    }
                    other => panic!("cut at {cut} with tail {t}: {other}"),
                }
                assert_eq!(fs::read(&path).unwrap(), damaged, "the file was changed");
                continue;
            }
            let (mut storage, got) = recover_dir(copy.path(), w.options)
                .unwrap_or_else(|e| panic!("cut at {cut} with tail {t}: {e}"));
            let expected = if cut == end {
                &w.states[n]
            } else {
                &w.states[n - 1]
            };
            assert_eq!(&got, expected, "cut at {cut} with tail {t}");
            // Nothing to repair when the cut falls between records of whole persists.
            let clean = tail.is_empty() && (cut == end || cut == header_end);
            assert_eq!(
                storage.repaired().is_none(),
                clean,
                "cut at {cut} with tail {t}"
            );
            if cut % 7 == 0 && t == 1 {
                // The repaired log goes on: write more and read it back after a restart.
                let more = vec![entry(100, 9, 5)];
                storage.persist(Some(&hs(9, 0)), None, &more).unwrap();
                let mut model = expected.clone();
                apply_to_image(&mut model, Some(&hs(9, 0)), None, &more);
                drop(storage);
                let (_, again) = recover_dir(copy.path(), w.options).unwrap();
                assert_eq!(again, model, "writing after a repair at {cut}");
            }
        }
    }
}

#[test]
fn torn_tail_at_every_offset_recovers_the_last_complete_persist() {
    let w = write(WalOptions::default(), five_persists());
    assert_torn_tail_recovers(&w, 1);
}

#[test]
fn torn_multi_record_persist_is_dropped_whole() {
    // One persist of 12 entries of ~400 bytes split into records of at most 1 KiB.
    let options = WalOptions {
        record_bytes_max: 1024,
        ..WalOptions::default()
    };
    let mut persists = five_persists();
    persists.push((
        Some(hs(3, 9)),
        None,
        (12..=23).map(|i| entry(i, 3, 400)).collect(),
    ));
    let w = write(options, persists);
    assert_torn_tail_recovers(&w, 11);
}

#[test]
fn parts_of_the_persist_in_flight_may_land_in_any_order() {
    // The disk may write a persist's later records and not its first: still a torn write.
    let options = WalOptions {
        record_bytes_max: 1024,
        ..WalOptions::default()
    };
    let mut persists = five_persists();
    persists.push((None, None, (12..=23).map(|i| entry(i, 3, 400)).collect()));
    let w = write(options, persists);
    let n = w.states.len() - 1;
    let (seg, _) = &w.ends[n];
    let start = w.ends[n - 1].1 as usize;
    for hole in [start, start + 500, start + 1500] {
        let copy = copy_dir(w.dir.path());
        let path = copy.path().join(seg.file_name().unwrap());
        let mut bytes = fs::read(&path).unwrap();
        bytes[hole..hole + 200].fill(0);
        fs::write(&path, &bytes).unwrap();
        let (_, got) = recover_dir(copy.path(), options).unwrap();
        assert_eq!(got, w.states[n - 1], "hole at {hole}");
        assert_eq!(len(&path), start as u64, "cut at the start of the persist");
    }
}

#[test]
fn torn_header_of_a_new_segment_is_removed() {
    // Every persist starts a new segment: the last one holds a header and one persist.
    let options = WalOptions {
        segment_bytes_max: 1,
        ..WalOptions::default()
    };
    let w = write(options, five_persists());
    let n = w.states.len() - 1;
    let (seg, end) = w.ends[n].clone();
    assert_ne!(
        seg,
        w.ends[n - 1].0,
        "the last persist is alone in its segment"
    );
    assert_torn_tail_recovers(&w, 1);
    for cut in 0..20 {
        let copy = copy_dir(w.dir.path());
        let path = copy.path().join(seg.file_name().unwrap());
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut)
            .unwrap();
        let (_, got) = recover_dir(copy.path(), options).unwrap();
        assert_eq!(got, w.states[n - 1], "cut at {cut}");
        assert!(
            !path.exists(),
            "a segment without a whole header is removed"
        );
    }
    assert!(end > 20);
}

#[test]
fn damage_in_the_middle_is_refused_at_every_byte() {
    let w = write(WalOptions::default(), five_persists());
    // Persist 2 is followed by three more in the same segment.
    let (seg, start) = w.ends[1].clone();
    let (seg2, end) = w.ends[2].clone();
    assert_eq!(seg, seg2);
    for at in start..end {
        let copy = copy_dir(w.dir.path());
        let path = copy.path().join(seg.file_name().unwrap());
        let mut bytes = fs::read(&path).unwrap();
        bytes[at as usize] ^= 0x5a;
        fs::write(&path, &bytes).unwrap();
        match open_err(copy.path(), w.options) {
            WalError::Corrupt { file, offset, why } => {
                assert_eq!(file, path, "byte {at}");
                assert_eq!(offset, start, "byte {at}: the damaged record's start");
                assert!(why.contains("not a torn write"), "byte {at}: {why}");
            }
            other => panic!("byte {at}: expected Corrupt, got {other}"),
        }
        assert_eq!(
            fs::read(&path).unwrap(),
            bytes,
            "byte {at}: nothing repaired"
        );
    }
}

#[test]
fn corrupt_error_says_what_to_do() {
    let w = write(WalOptions::default(), five_persists());
    let (seg, start) = w.ends[1].clone();
    let path = w.dir.path().join(seg.file_name().unwrap());
    let mut bytes = fs::read(&path).unwrap();
    bytes[start as usize + 12] ^= 1;
    fs::write(&path, &bytes).unwrap();
    let message = open_err(w.dir.path(), w.options).to_string();
    assert!(message.starts_with("corrupt WAL: "), "{message}");
    assert!(message.contains(&format!("at byte {start}")), "{message}");
    assert!(message.contains("checksum mismatch"), "{message}");
    assert!(message.contains("Refusing to start"), "{message}");
}

#[test]
fn damage_in_a_segment_that_is_not_the_last_is_refused() {
    let options = WalOptions {
        segment_bytes_max: 1,
        ..WalOptions::default()
    };
    let w = write(options, five_persists());
    // Persist 3 is the last record of its segment, and not of the log.
    let (seg, end) = w.ends[3].clone();
    let name = seg.file_name().unwrap();

    let flipped = copy_dir(w.dir.path());
    let path = flipped.path().join(name);
    let mut bytes = fs::read(&path).unwrap();
    let last_byte = end as usize - 1;
    bytes[last_byte] ^= 0x01;
    fs::write(&path, &bytes).unwrap();
    let e = open_err(flipped.path(), options);
    assert!(e.is_corruption(), "{e}");
    assert!(e.to_string().contains("not the last one"), "{e}");

    let cut = copy_dir(w.dir.path());
    let path = cut.path().join(name);
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(end - 3)
        .unwrap();
    let e = open_err(cut.path(), options);
    assert!(e.is_corruption(), "{e}");

    let missing = copy_dir(w.dir.path());
    fs::remove_file(missing.path().join(name)).unwrap();
    let e = open_err(missing.path(), options);
    assert!(e.to_string().contains("is missing"), "{e}");

    // A copy of the last segment under the next number: its header names another segment.
    let misplaced = copy_dir(w.dir.path());
    let last = last_segment(misplaced.path());
    let seq: u64 = last.file_name().unwrap().to_str().unwrap()[4..24]
        .parse()
        .unwrap();
    fs::copy(
        &last,
        misplaced.path().join(format!("wal-{:020}.log", seq + 1)),
    )
    .unwrap();
    let e = open_err(misplaced.path(), options);
    assert!(e.to_string().contains("file name says"), "{e}");
}

#[test]
fn a_length_beyond_the_limit_is_damage_and_allocates_nothing() {
    let w = write(WalOptions::default(), five_persists());
    let (seg, start) = w.ends[1].clone();
    let path = w.dir.path().join(seg.file_name().unwrap());
    let mut bytes = fs::read(&path).unwrap();
    bytes[start as usize..start as usize + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    fs::write(&path, &bytes).unwrap();
    let e = open_err(w.dir.path(), w.options);
    assert!(e.to_string().contains("exceeds record_bytes_max"), "{e}");
}

#[test]
fn a_record_of_an_unknown_version_is_refused_and_kept() {
    let w = write(WalOptions::default(), five_persists());
    let path = last_segment(w.dir.path());
    // An intact record from a future version, appended at the end of the log.
    let payload = [2u8, 2, 0xde, 0xad, 0xbe, 0xef];
    let mut record = (payload.len() as u32).to_le_bytes().to_vec();
    record.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    record.extend_from_slice(&payload);
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&record)
        .unwrap();
    let before = len(&path);
    match open_err(w.dir.path(), w.options) {
        WalError::UnsupportedVersion {
            version, supported, ..
        } => {
            assert_eq!((version, supported), (2, tenure_wal::FORMAT_VERSION));
        }
        other => panic!("expected UnsupportedVersion, got {other}"),
    }
    assert_eq!(
        len(&path),
        before,
        "a newer version's record is never cut off"
    );
}

#[test]
fn missing_or_damaged_snapshot_is_refused() {
    let w = write(WalOptions::default(), five_persists());
    let snaps = files_with_extension(w.dir.path(), ".snap");
    assert_eq!(snaps.len(), 1);

    let missing = copy_dir(w.dir.path());
    fs::remove_file(missing.path().join(snaps[0].file_name().unwrap())).unwrap();
    let e = open_err(missing.path(), w.options);
    assert!(e.to_string().contains("snapshot file"), "{e}");
    assert!(e.to_string().contains("missing"), "{e}");

    let damaged = copy_dir(w.dir.path());
    let path = damaged.path().join(snaps[0].file_name().unwrap());
    let mut bytes = fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x80;
    fs::write(&path, &bytes).unwrap();
    let e = open_err(damaged.path(), w.options);
    assert!(e.is_corruption(), "{e}");
    assert!(e.to_string().contains("checksum"), "{e}");

    let orphan = tempfile::tempdir().unwrap();
    fs::copy(&snaps[0], orphan.path().join(snaps[0].file_name().unwrap())).unwrap();
    let e = open_err(orphan.path(), w.options);
    assert!(e.to_string().contains("no WAL segment"), "{e}");
}

#[test]
fn a_second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let first = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    match FileStorage::open(dir.path(), WalOptions::default()) {
        Err(e @ WalError::Locked { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains(&format!("pid {}", std::process::id())),
                "{message}"
            );
        }
        Err(other) => panic!("expected Locked, got {other}"),
        Ok(_) => panic!("expected Locked"),
    }
    drop(first);
    FileStorage::open(dir.path(), WalOptions::default()).expect("the lock goes with the storage");
}

#[test]
fn snapshots_compact_old_segments_and_snapshot_files() {
    let options = WalOptions {
        segment_bytes_max: 512,
        ..WalOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), options).unwrap();
    for i in 1..=60 {
        storage
            .persist(Some(&hs(1, i)), None, &[entry(i, 1, 30)])
            .unwrap();
    }
    let before = segments(dir.path()).len();
    assert!(before > 5, "{before} segments");

    // A snapshot at 30 keeps the segments that hold 31..=60.
    storage.persist(None, Some(&snapshot(30, 1)), &[]).unwrap();
    let middle = segments(dir.path()).len();
    assert!(middle < before && middle > 1, "{before} -> {middle}");
    let first_kept = storage.segments().next().unwrap();

    // A snapshot at 60 covers every entry: only the active segment stays.
    storage.persist(None, Some(&snapshot(60, 1)), &[]).unwrap();
    assert_eq!(segments(dir.path()).len(), 1);
    assert_eq!(files_with_extension(dir.path(), ".snap").len(), 1);
    assert!(storage.segments().next().unwrap() > first_kept);

    storage.persist(None, None, &[entry(61, 1, 30)]).unwrap();
    drop(storage);
    let (_, got) = recover_dir(dir.path(), options).unwrap();
    assert_eq!(got.snapshot, Some(snapshot(60, 1)));
    assert_eq!(got.entries, vec![entry(61, 1, 30)]);
    assert_eq!(got.hard_state, hs(1, 60));
}

#[test]
fn leftovers_of_interrupted_writes_are_removed_on_open() {
    let w = write(WalOptions::default(), five_persists());
    let dir = w.dir.path();
    let snap = files_with_extension(dir, ".snap").pop().unwrap();
    // A snapshot renamed into place whose persist never became durable, a half-written
    // snapshot, and a file that is none of the log's business.
    let orphan = dir.join("snap-00000000000000000077.snap");
    fs::copy(&snap, &orphan).unwrap();
    let tmp = dir.join("snap-00000000000000000078.snap.tmp");
    fs::write(&tmp, b"half").unwrap();
    let notes = dir.join("notes.txt");
    fs::write(&notes, b"operator's notes").unwrap();
    let (_, got) = recover_dir(dir, w.options).unwrap();
    assert_eq!(&got, w.states.last().unwrap());
    assert!(!orphan.exists() && !tmp.exists());
    assert!(snap.exists() && notes.exists());
}

#[test]
fn an_oversize_entry_or_snapshot_is_refused_and_changes_nothing() {
    let options = WalOptions {
        record_bytes_max: 4096,
        snapshot_bytes_max: 4096,
        ..WalOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), options).unwrap();
    storage
        .persist(Some(&hs(1, 0)), None, &[entry(1, 1, 10)])
        .unwrap();
    let before = storage.recover().unwrap();
    let seg_len = len(&last_segment(dir.path()));

    let e = storage
        .persist(
            Some(&hs(2, 0)),
            None,
            &[entry(2, 1, 10), entry(3, 1, 10_000)],
        )
        .unwrap_err();
    assert!(matches!(e, WalError::EntryTooLarge { index: 3, .. }), "{e}");
    let big = Snapshot {
        data: vec![0; 10_000],
        ..snapshot(1, 1)
    };
    let e = storage.persist(None, Some(&big), &[]).unwrap_err();
    assert!(matches!(e, WalError::SnapshotTooLarge { .. }), "{e}");

    assert_eq!(len(&last_segment(dir.path())), seg_len);
    assert_eq!(storage.recover().unwrap(), before);
    storage.persist(None, None, &[entry(2, 1, 10)]).unwrap();
}

#[test]
fn fsync_stats_count_every_persist() {
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    for i in 1..=5 {
        storage.persist(Some(&hs(1, i)), None, &[]).unwrap();
    }
    storage.persist(None, None, &[]).unwrap();
    let stats = storage.fsync_stats();
    assert_eq!(stats.count, 5, "an empty persist needs no fsync");
    assert!(stats.total >= stats.max && stats.max >= stats.last);
    assert!(stats.bytes_written > 0);
}

/// Pipelined persistence: `write` stores without an fsync and `sync` adds exactly one, only
/// when something is unsynced; a crash between them (a truncation of the unsynced bytes) is
/// a torn tail that recovery cuts, keeping everything synced before.
#[test]
fn write_fsyncs_nothing_and_sync_fsyncs_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    storage
        .persist(Some(&hs(1, 0)), None, &[entry(1, 1, 10)])
        .unwrap();
    let synced = storage.recover().unwrap();
    let synced_len = len(&last_segment(dir.path()));
    storage
        .write(Some(&hs(1, 1)), None, &[entry(2, 1, 10), entry(3, 1, 10)])
        .unwrap();
    assert_eq!(storage.fsync_stats().count, 1, "a write does not fsync");
    storage.sync().unwrap();
    assert_eq!(storage.fsync_stats().count, 2, "the sync does");
    storage.sync().unwrap();
    assert_eq!(storage.fsync_stats().count, 2, "nothing left to sync");
    let written = storage.recover().unwrap();
    assert_eq!(written.entries.len(), 3);
    drop(storage);
    assert_eq!(
        FileStorage::open(dir.path(), WalOptions::default())
            .unwrap()
            .recover()
            .unwrap(),
        written
    );

    // A write the crash cut short: the file ends inside it.
    let mut storage = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    let before_write = len(&last_segment(dir.path()));
    storage.write(None, None, &[entry(4, 1, 100)]).unwrap();
    drop(storage);
    let seg = last_segment(dir.path());
    let cut = before_write + (len(&seg) - before_write) / 2;
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(cut)
        .unwrap();
    let mut reopened = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    assert!(reopened.repaired().is_some(), "the torn write is cut");
    assert_eq!(reopened.recover().unwrap(), written);
    assert!(synced_len < before_write && synced.entries.len() == 1);
}

/// A `write` that carries a snapshot is fsynced before it returns: compaction then removes
/// the previous snapshot file and the covered segments, so a crash before the `sync` must not
/// be able to cut the persist that refers to the new snapshot.
#[test]
fn a_write_with_a_snapshot_is_durable_before_compaction() {
    let options = WalOptions {
        segment_bytes_max: 256,
        ..WalOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), options).unwrap();
    for i in 1..=20 {
        storage
            .persist(Some(&hs(1, i)), None, &[entry(i, 1, 30)])
            .unwrap();
    }
    storage.persist(None, Some(&snapshot(5, 1)), &[]).unwrap();
    let fsyncs = storage.fsync_stats().count;
    storage.write(None, Some(&snapshot(15, 1)), &[]).unwrap();
    assert_eq!(storage.fsync_stats().count, fsyncs + 1, "the write fsynced");
    storage.sync().unwrap();
    assert_eq!(
        storage.fsync_stats().count,
        fsyncs + 1,
        "nothing left to sync"
    );
    assert_eq!(files_with_extension(dir.path(), ".snap").len(), 1);
    drop(storage);
    let (_, got) = recover_dir(dir.path(), options).unwrap();
    assert_eq!(got.snapshot, Some(snapshot(15, 1)));
    assert_eq!(got.entries.first().map(|e| e.index), Some(16));
}

#[test]
fn invalid_options_are_refused_before_touching_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("never-created");
    let options = WalOptions {
        record_bytes_max: 10,
        ..WalOptions::default()
    };
    let e = open_err(&target, options);
    assert!(matches!(e, WalError::Options(_)), "{e}");
    assert!(!target.exists());
}

#[test]
fn storage_and_errors_can_move_to_another_thread() {
    fn assert_send<T: Send + 'static>() {}
    fn assert_error<T: std::error::Error + Send + Sync + 'static>() {}
    assert_send::<FileStorage>();
    assert_error::<WalError>();
}

/// A segment of random bytes (or a header with a bad checksum) is not what a crash leaves:
/// recovery refuses it with the file and offset, and changes no byte, so the evidence is
/// kept. Only a prefix of a header, or zeros, counts as a segment whose creation was cut.
#[test]
fn a_segment_without_a_valid_header_is_refused_and_kept() {
    let options = WalOptions {
        segment_bytes_max: 1,
        ..WalOptions::default()
    };
    let w = write(options, five_persists());
    let n = w.states.len() - 1;
    let (seg, _) = w.ends[n].clone();
    let original = fs::read(&seg).unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let random: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let mut bad_crc = original.clone();
    bad_crc[6] ^= 0xff; // the header's stored checksum
    for (what, bytes) in [
        ("random bytes", random),
        ("a header with a bad checksum", bad_crc),
    ] {
        let copy = copy_dir(w.dir.path());
        let path = copy.path().join(seg.file_name().unwrap());
        fs::write(&path, &bytes).unwrap();
        match open_err(copy.path(), options) {
            WalError::Corrupt { file, offset, why } => {
                assert_eq!((file, offset), (path.clone(), 0), "{what}: {why}");
                assert!(why.contains("left untouched"), "{what}: {why}");
            }
            other => panic!("{what}: {other}"),
        }
        assert_eq!(
            fs::read(&path).unwrap(),
            bytes,
            "{what}: the file was changed"
        );
    }
}
