//! The on-disk bytes of a small log, pinned. A change here is a change of format: old logs
//! would no longer read (or would read differently), so it needs a new format version and
//! a migration, not a new expectation. This includes changes to `tenure-core`'s `Entry`,
//! `Payload`, `Command`, `HardState` and `Snapshot`, whose bincode encoding the log stores.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use expect_test::expect;
use tenure_core::sm::Command;
use tenure_core::storage::Storage;
use tenure_core::types::{Entry, HardState, Membership, Payload, Snapshot};
use tenure_wal::{FileStorage, WalOptions};

fn hex_dump(path: &Path) -> String {
    let bytes = fs::read(path).unwrap();
    let mut out = String::new();
    for chunk in bytes.chunks(32) {
        for b in chunk {
            write!(out, "{b:02x}").unwrap();
        }
        out.push('\n');
    }
    out
}

#[test]
fn segment_and_snapshot_bytes_are_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let mut storage = FileStorage::open(dir.path(), WalOptions::default()).unwrap();
    let hs = HardState {
        term: 2,
        vote: Some(3),
        commit: 1,
    };
    let entries = vec![
        Entry {
            term: 2,
            index: 1,
            payload: Payload::Noop,
        },
        Entry {
            term: 2,
            index: 2,
            payload: Payload::Command(Command::Campaign {
                election: "e".into(),
                session: 1,
                value: vec![0xab],
            }),
        },
    ];
    storage.persist(Some(&hs), None, &entries).unwrap();
    let snapshot = Snapshot {
        index: 1,
        term: 2,
        membership: Membership::new([1]),
        data: vec![0xcd],
    };
    storage.persist(None, Some(&snapshot), &[]).unwrap();
    drop(storage);

    expect![[r#"
        240000009c80d896010101000000000000000000000000000000000000000000
        00000000000000000000000079000000348033eb010201000000000000000000
        0000010001020000000000000001030000000000000001000000000000000102
        0000000000000002000000000000000100000000000000000000000200000000
        0000000200000000000000010000000400000001000000000000006501000000
        000000000100000000000000ab33000000724147000102020000000000000000
        0000000101010000000000000001000000000000000200000000000000010001
        0000000000000000
    "#]]
    .assert_eq(&hex_dump(&dir.path().join("wal-00000000000000000001.log")));
    expect![[r#"
        43000000cd32f704010301000000000000000100000000000000020000000000
        0000010000000000000001000000000000000000000000000000000000000000
        00000100000000000000cd
    "#]]
    .assert_eq(&hex_dump(
        &dir.path().join("snap-00000000000000000001.snap"),
    ));
}
