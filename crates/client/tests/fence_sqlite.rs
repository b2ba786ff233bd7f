//! `tenure::fence::sqlite`: a stale token never commits, a fresh one is never refused.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension as _, TransactionBehavior};
use tenure::fence::{sqlite, FenceError};

const RESOURCE: &str = "nightly-billing";

fn memory_db() -> Connection {
    let db = Connection::open_in_memory().unwrap();
    sqlite::install(&db).unwrap();
    db.execute_batch("CREATE TABLE log(id INTEGER PRIMARY KEY AUTOINCREMENT, token INTEGER NOT NULL, writer INTEGER NOT NULL)")
        .unwrap();
    db
}

fn open(path: &Path) -> Connection {
    let db = Connection::open(path).unwrap();
    db.busy_timeout(Duration::from_secs(30)).unwrap();
    let mode: String = db
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    db
}

/// A fenced write of one log row.
fn write(db: &mut Connection, token: u64, writer: u64) -> Result<(), FenceError> {
    let tx = sqlite::begin(db, RESOURCE, token)?;
    // Widen the window between the guard and the write, where a split guard would let a
    // newer leader in.
    thread::yield_now();
    tx.execute(
        "INSERT INTO log(token, writer) VALUES (?1, ?2)",
        params![token as i64, writer as i64],
    )?;
    tx.commit()
}

/// The same write without the guard: what the checker must catch.
fn write_unguarded(db: &mut Connection, token: u64, writer: u64) -> Result<(), FenceError> {
    let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(
        "INSERT INTO log(token, writer) VALUES (?1, ?2)",
        params![token as i64, writer as i64],
    )?;
    tx.commit()?;
    Ok(())
}

fn log(db: &Connection) -> Vec<(u64, u64)> {
    let mut st = db
        .prepare("SELECT token, writer FROM log ORDER BY id")
        .unwrap();
    st.query_map([], |r| {
        Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// Writes are serialized by SQLite's write lock, so the log's id order is commit order, and
/// the high-water mark at a write's commit is the highest token committed before it. A
/// committed token below that mark is a stale write that got through.
fn check_log(log: &[(u64, u64)]) -> Result<(), String> {
    let mut mark = 0;
    for (i, &(token, writer)) in log.iter().enumerate() {
        if token < mark {
            return Err(format!(
                "commit #{i}: writer {writer} committed token {token} below the mark {mark}"
            ));
        }
        mark = token;
    }
    Ok(())
}

#[test]
fn first_write_for_a_resource_is_accepted() {
    let mut db = memory_db();
    assert_eq!(sqlite::current(&db, RESOURCE).unwrap(), None);
    write(&mut db, 7, 1).unwrap();
    assert_eq!(sqlite::current(&db, RESOURCE).unwrap(), Some(7));
    // Resources are independent: a low token is a first write elsewhere.
    sqlite::execute_fenced(
        &db,
        "other",
        1,
        "INSERT INTO log(token, writer) VALUES (1, 2)",
        [],
    )
    .unwrap();
    assert_eq!(sqlite::current(&db, "other").unwrap(), Some(1));
    assert_eq!(log(&db), vec![(7, 1), (1, 2)]);
}

#[test]
fn equal_token_is_accepted_many_times() {
    let mut db = memory_db();
    for _ in 0..3 {
        write(&mut db, 42, 1).unwrap();
    }
    assert_eq!(log(&db), vec![(42, 1); 3]);
    assert_eq!(sqlite::current(&db, RESOURCE).unwrap(), Some(42));
}

#[test]
fn lower_token_is_refused_with_the_current_mark() {
    // The story: leader 42 writes, is replaced by 43, wakes up and writes again.
    let mut db = memory_db();
    write(&mut db, 42, 1).unwrap();
    write(&mut db, 43, 2).unwrap();
    match write(&mut db, 42, 1) {
        Err(FenceError::StaleToken { current: 43 }) => {}
        other => panic!("expected StaleToken {{ current: 43 }}, got {other:?}"),
    }
    let stale = sqlite::execute_fenced(
        &db,
        RESOURCE,
        41,
        "INSERT INTO log(token, writer) VALUES (41, 0)",
        [],
    );
    assert!(
        matches!(stale, Err(FenceError::StaleToken { current: 43 })),
        "{stale:?}"
    );
    assert_eq!(log(&db), vec![(42, 1), (43, 2)]);
    assert_eq!(sqlite::current(&db, RESOURCE).unwrap(), Some(43));
    // The refusal left no transaction open: the connection is usable.
    write(&mut db, 44, 3).unwrap();
}

#[test]
fn a_rolled_back_fenced_transaction_does_not_raise_the_mark() {
    let mut db = memory_db();
    write(&mut db, 5, 1).unwrap();
    {
        let tx = sqlite::begin(&mut db, RESOURCE, 9).unwrap();
        assert_eq!(tx.token(), 9);
        // The application's write fails: the transaction is dropped, mark and all.
        assert!(tx
            .execute("INSERT INTO no_such_table VALUES (1)", [])
            .is_err());
    }
    assert_eq!(sqlite::current(&db, RESOURCE).unwrap(), Some(5));
    sqlite::begin(&mut db, RESOURCE, 8)
        .unwrap()
        .rollback()
        .unwrap();
    assert_eq!(sqlite::current(&db, RESOURCE).unwrap(), Some(5));
    // A failing single write rolls its guard back too.
    let r = sqlite::execute_fenced(&db, RESOURCE, 9, "INSERT INTO no_such_table VALUES (1)", []);
    assert!(matches!(r, Err(FenceError::Store(_))), "{r:?}");
    assert_eq!(sqlite::current(&db, RESOURCE).unwrap(), Some(5));
    write(&mut db, 6, 1).unwrap();
}

/// The guard and the write share one transaction: while a fenced transaction is open, no
/// one else can move the mark, so a newer leader waits for the older one's write to land
/// (and then supersedes it) instead of slipping in between the check and the write.
#[test]
fn the_mark_cannot_move_between_the_guard_and_the_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fence.db");
    let mut old = open(&path);
    sqlite::install(&old).unwrap();
    old.execute_batch("CREATE TABLE log(id INTEGER PRIMARY KEY AUTOINCREMENT, token INTEGER NOT NULL, writer INTEGER NOT NULL)")
        .unwrap();
    let mut new = open(&path);
    new.busy_timeout(Duration::from_millis(50)).unwrap();

    let tx = sqlite::begin(&mut old, RESOURCE, 42).unwrap();
    // The old leader pauses here; the new one tries to write meanwhile, and must wait.
    match write(&mut new, 43, 2) {
        Err(FenceError::Store(e)) => assert_eq!(
            e.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy),
            "{e}"
        ),
        other => panic!("the new leader got past an open fenced transaction: {other:?}"),
    }
    tx.execute("INSERT INTO log(token, writer) VALUES (42, 1)", [])
        .unwrap();
    tx.commit().unwrap();
    write(&mut new, 43, 2).unwrap();
    assert!(matches!(
        write(&mut old, 42, 1),
        Err(FenceError::StaleToken { current: 43 })
    ));
    assert_eq!(log(&old), vec![(42, 1), (43, 2)]);
    check_log(&log(&old)).unwrap();
}

#[test]
fn fence_in_guards_the_applications_own_transaction() {
    let mut db = memory_db();
    write(&mut db, 10, 1).unwrap();
    let tx = db
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let r = sqlite::fence_in(&tx, RESOURCE, 9);
    assert!(
        matches!(r, Err(FenceError::StaleToken { current: 10 })),
        "{r:?}"
    );
    drop(tx);
    let tx = db
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    sqlite::fence_in(&tx, RESOURCE, 11).unwrap();
    tx.execute("INSERT INTO log(token, writer) VALUES (11, 2)", [])
        .unwrap();
    tx.commit().unwrap();
    assert_eq!(log(&db), vec![(10, 1), (11, 2)]);
}

#[test]
fn out_of_range_token_is_refused_and_errors_map_into_the_crate_error() {
    let mut db = memory_db();
    let r = write(&mut db, u64::MAX, 1);
    assert!(
        matches!(r, Err(FenceError::TokenOutOfRange { token: u64::MAX })),
        "{r:?}"
    );
    write(&mut db, i64::MAX as u64, 1).unwrap();
    assert!(log(&db).len() == 1);

    let e: tenure::Error = FenceError::StaleToken { current: 43 }.into();
    assert_eq!(e, tenure::Error::StaleToken { current: 43 });
    let e: tenure::Error = FenceError::TokenOutOfRange { token: u64::MAX }.into();
    assert!(matches!(e, tenure::Error::InvalidArgument(_)), "{e:?}");
    let e: tenure::Error = FenceError::Store(rusqlite::Error::QueryReturnedNoRows).into();
    assert!(matches!(e, tenure::Error::Backend(_)), "{e:?}");
}

/// The SQL of the module docs, run as a program in another language would: statement by
/// statement, parameters by name, the check done by the caller.
#[test]
fn the_documented_sql_works_as_written() {
    let db = Connection::open_in_memory().unwrap();
    db.execute_batch(sqlite::SCHEMA).unwrap();
    db.execute_batch(sqlite::SCHEMA).unwrap(); // idempotent
    db.execute_batch("CREATE TABLE books(day TEXT PRIMARY KEY, total INTEGER)")
        .unwrap();
    let fenced_write = |token: i64, total: i64| -> Result<(), i64> {
        db.execute_batch("BEGIN IMMEDIATE").unwrap();
        db.execute(
            "INSERT INTO tenure_fence(resource, token) VALUES (:resource, :token)
                 ON CONFLICT(resource) DO UPDATE SET token = excluded.token
                 WHERE excluded.token >= tenure_fence.token",
            rusqlite::named_params! {":resource": RESOURCE, ":token": token},
        )
        .unwrap();
        let mark: i64 = db
            .query_row(
                "SELECT token FROM tenure_fence WHERE resource = :resource",
                rusqlite::named_params! {":resource": RESOURCE},
                |r| r.get(0),
            )
            .unwrap();
        if mark != token {
            db.execute_batch("ROLLBACK").unwrap();
            return Err(mark);
        }
        db.execute(
            "INSERT OR REPLACE INTO books VALUES ('2026-11-29', ?1)",
            [total],
        )
        .unwrap();
        db.execute_batch("COMMIT").unwrap();
        Ok(())
    };
    assert_eq!(fenced_write(42, 100), Ok(()));
    assert_eq!(fenced_write(43, 200), Ok(()));
    assert_eq!(fenced_write(43, 300), Ok(()));
    assert_eq!(fenced_write(42, 999), Err(43));
    let total: i64 = db
        .query_row("SELECT total FROM books", [], |r| r.get(0))
        .unwrap();
    assert_eq!(total, 300);

    // The verdict from the upsert itself: its row count, or `RETURNING`.
    let raise = |token: i64| db.execute(sqlite::RAISE, params!["other", token]).unwrap();
    assert_eq!([raise(5), raise(5), raise(6), raise(4)], [1, 1, 1, 0]);
    let returning = |token: i64| -> Option<i64> {
        db.query_row(
            &format!("{} RETURNING token", sqlite::RAISE),
            params!["third", token],
            |r| r.get(0),
        )
        .optional()
        .unwrap()
    };
    assert_eq!(returning(7), Some(7));
    assert_eq!(returning(7), Some(7));
    assert_eq!(returning(6), None);
    assert_eq!(returning(8), Some(8));
}

/// A tiny deterministic generator (xorshift64*), one per writer thread.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

#[derive(Debug, Default)]
struct Outcomes {
    /// (token, writer) of accepted writes.
    accepted: Vec<(u64, u64)>,
    /// (token, the mark reported) of refused writes.
    refused: Vec<(u64, u64)>,
    /// Writes by the newest leader (the highest token issued so far) that were refused.
    fresh_refused: Vec<(u64, String)>,
    fresh: usize,
}

const WRITERS: u64 = 8;
const WRITES_EACH: u64 = 150;

/// Many writers, each with its own connection to one WAL database file, holding stale and
/// fresh tokens in interleaved order. A writer either becomes the newest leader (takes the
/// next token while holding the issuer, and writes with it, sometimes several times, so
/// that it is still the highest token issued while it writes), or writes as a stale leader
/// with any older token, concurrently with everyone.
fn run_writers(dir: &Path, guarded: bool) -> (Outcomes, Vec<(u64, u64)>) {
    let path = dir.join("fence.db");
    {
        let db = open(&path);
        sqlite::install(&db).unwrap();
        db.execute_batch("CREATE TABLE log(id INTEGER PRIMARY KEY AUTOINCREMENT, token INTEGER NOT NULL, writer INTEGER NOT NULL)")
            .unwrap();
    }
    let write: fn(&mut Connection, u64, u64) -> Result<(), FenceError> =
        if guarded { write } else { write_unguarded };
    // The highest token issued so far. Locked by the newest leader while it writes.
    let issuer = Arc::new(Mutex::new(0u64));
    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    let start = Arc::new(Barrier::new(WRITERS as usize));
    let threads: Vec<_> = (1..=WRITERS)
        .map(|writer| {
            let (path, issuer, outcomes, start) = (
                path.clone(),
                issuer.clone(),
                outcomes.clone(),
                start.clone(),
            );
            thread::spawn(move || {
                let mut db = open(&path);
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ writer.wrapping_mul(0x1234_5677));
                start.wait();
                for _ in 0..WRITES_EACH {
                    if rng.below(4) == 0 {
                        let mut issued = issuer.lock().unwrap();
                        *issued += 1;
                        let token = *issued;
                        for _ in 0..=rng.below(3) {
                            let r = write(&mut db, token, writer);
                            let mut o = outcomes.lock().unwrap();
                            o.fresh += 1;
                            match r {
                                Ok(()) => o.accepted.push((token, writer)),
                                Err(e) => o.fresh_refused.push((token, e.to_string())),
                            }
                        }
                    } else {
                        let issued = *issuer.lock().unwrap();
                        if issued == 0 {
                            continue;
                        }
                        let token = 1 + rng.below(issued);
                        let r = write(&mut db, token, writer);
                        let mut o = outcomes.lock().unwrap();
                        match r {
                            Ok(()) => o.accepted.push((token, writer)),
                            Err(FenceError::StaleToken { current }) => {
                                o.refused.push((token, current))
                            }
                            Err(e) => panic!("writer {writer}, token {token}: {e}"),
                        }
                    }
                    if rng.below(8) == 0 {
                        thread::yield_now();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let outcomes = Arc::try_unwrap(outcomes).unwrap().into_inner().unwrap();
    let log = log(&open(&path));
    (outcomes, log)
}

#[test]
fn concurrent_writers_never_commit_a_stale_token_and_never_refuse_a_fresh_one() {
    let dir = tempfile::tempdir().unwrap();
    let (o, log) = run_writers(dir.path(), true);

    // No stale write committed: in commit order, tokens never decrease.
    check_log(&log).unwrap();
    // What committed is exactly what was reported accepted.
    let mut committed = log.clone();
    let mut accepted = o.accepted.clone();
    committed.sort_unstable();
    accepted.sort_unstable();
    assert_eq!(committed, accepted);
    // No fresh write was refused.
    assert!(
        o.fresh_refused.is_empty(),
        "fresh writes refused: {:?}",
        o.fresh_refused
    );
    // Every refusal was right: the mark it reported is above the token and was committed.
    let tokens: BTreeSet<u64> = log.iter().map(|&(t, _)| t).collect();
    for &(token, current) in &o.refused {
        assert!(current > token, "refused {token} with mark {current}");
        assert!(
            tokens.contains(&current),
            "refused {token} with uncommitted mark {current}"
        );
    }
    // The run exercised both paths, and the mark is the newest leader's token.
    assert!(o.fresh >= 10, "only {} fresh writes", o.fresh);
    assert!(o.refused.len() >= 10, "only {} refusals", o.refused.len());
    let mark = sqlite::current(&open(&dir.path().join("fence.db")), RESOURCE).unwrap();
    assert_eq!(mark, tokens.last().copied());
    eprintln!(
        "{} writes: {} committed ({} fresh), {} stale refused, mark {mark:?}",
        o.accepted.len() + o.refused.len(),
        log.len(),
        o.fresh,
        o.refused.len()
    );
}

/// The checker is not vacuous: the same run without the guard commits stale writes, and
/// `check_log` says so.
#[test]
fn without_the_guard_a_stale_write_gets_through_and_the_check_catches_it() {
    // The story, deterministically.
    let mut db = memory_db();
    write_unguarded(&mut db, 43, 2).unwrap();
    write_unguarded(&mut db, 42, 1).unwrap();
    let err = check_log(&log(&db)).unwrap_err();
    assert!(err.contains("token 42 below the mark 43"), "{err}");

    // And under the concurrent run.
    let dir = tempfile::tempdir().unwrap();
    let (o, log) = run_writers(dir.path(), false);
    assert!(o.refused.is_empty());
    assert!(
        check_log(&log).is_err(),
        "an unguarded run of {} writes committed no stale token",
        log.len()
    );
}
