//! `tenure::fence::postgres` against a real PostgreSQL: a stale token never commits, a fresh
//! one is never refused.
//!
//! The tests start their own server with `scripts/services.sh start-postgres` (PostgreSQL
//! from the Debian package, installed by `scripts/services.sh install-postgres`), on
//! loopback in a temporary directory, and stop it when the last test using it is done. If
//! PostgreSQL is not installed they fail, saying how to install it: they never pass
//! without a server.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, Weak};
use std::thread;

use postgres::{Client, NoTls};
use tenure::fence::postgres::{self as fence, PgFenceError};

const RESOURCE: &str = "nightly-billing";

/// A PostgreSQL server of our own, stopped (and its directory removed) on drop.
struct Server {
    dir: tempfile::TempDir,
    /// `postgres://postgres@127.0.0.1:PORT`, without the database.
    base: String,
}

fn services_sh() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for tests"),
    )
    .join("../../scripts/services.sh")
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::Builder::new()
            .prefix("tenure-pg")
            .tempdir()
            .unwrap();
        // With our pid, the script's watchdog stops the server even if this process is
        // killed before `Drop` runs.
        let out = Command::new("bash")
            .arg(services_sh())
            .arg("start-postgres")
            .arg(dir.path())
            .arg(std::process::id().to_string())
            .output()
            .expect("running bash scripts/services.sh");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            panic!(
                "could not start PostgreSQL for the test ({}):\n{stderr}\n\
                 PostgreSQL must be installed first: run `scripts/services.sh install-postgres`",
                out.status
            );
        }
        let url = String::from_utf8(out.stdout).unwrap();
        let url = url.trim().lines().last().unwrap_or_default();
        let base = url
            .strip_suffix("/postgres")
            .unwrap_or_else(|| panic!("unexpected URL from start-postgres: {url:?}"))
            .to_string();
        Server { dir, base }
    }

    /// One server per test process while tests use it: started by the first test that
    /// needs it, stopped when the last one holding it is done.
    fn shared() -> Arc<Server> {
        static SLOT: Mutex<Weak<Server>> = Mutex::new(Weak::new());
        let mut slot = SLOT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(server) = slot.upgrade() {
            return server;
        }
        let server = Arc::new(Server::start());
        *slot = Arc::downgrade(&server);
        server
    }

    fn connect(&self, db: &str) -> Client {
        Client::connect(&format!("{}/{db}", self.base), NoTls)
            .unwrap_or_else(|e| panic!("connecting to {}/{db}: {e}", self.base))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let out = Command::new("bash")
            .arg(services_sh())
            .arg("stop-postgres")
            .arg(self.dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            other => eprintln!("stopping PostgreSQL in {:?}: {other:?}", self.dir.path()),
        }
    }
}

/// A fresh database of its own for one test, on the shared server, with the fence and a
/// log of writes installed.
struct Db {
    server: Arc<Server>,
    name: String,
}

impl Db {
    fn new() -> Db {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let server = Server::shared();
        let name = format!("t{}", NEXT.fetch_add(1, Ordering::Relaxed));
        server
            .connect("postgres")
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        let db = Db { server, name };
        let mut c = db.connect();
        fence::install(&mut c).unwrap();
        c.batch_execute(
            "CREATE TABLE log(id BIGSERIAL PRIMARY KEY, token BIGINT NOT NULL, writer BIGINT NOT NULL)",
        )
        .unwrap();
        db
    }

    fn connect(&self) -> Client {
        self.server.connect(&self.name)
    }
}

/// A fenced write of one log row.
fn write(db: &mut Client, token: u64, writer: u64) -> Result<(), PgFenceError> {
    let mut tx = fence::begin(db, RESOURCE, token)?;
    // Widen the window between the guard and the write, where a split guard would let a
    // newer leader in.
    thread::yield_now();
    tx.execute(
        "INSERT INTO log(token, writer) VALUES ($1, $2)",
        &[&(token as i64), &(writer as i64)],
    )?;
    tx.commit()
}

/// The same write without the guard: what the checker must catch.
fn write_unguarded(db: &mut Client, token: u64, writer: u64) -> Result<(), PgFenceError> {
    let mut tx = db.transaction()?;
    thread::yield_now();
    tx.execute(
        "INSERT INTO log(token, writer) VALUES ($1, $2)",
        &[&(token as i64), &(writer as i64)],
    )?;
    tx.commit()?;
    Ok(())
}

fn log(db: &mut Client) -> Vec<(u64, u64)> {
    db.query("SELECT token, writer FROM log ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64))
        .collect()
}

/// Fenced writes on one resource are serialized by the fence row's lock, taken before the
/// log row is inserted (and its id drawn) and held until commit: so the log's id order is
/// their commit order, and the mark at a write's commit is the highest token committed
/// before it. A committed token below that mark is a stale write that got through.
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
    let db = Db::new();
    let mut c = db.connect();
    assert_eq!(fence::current(&mut c, RESOURCE).unwrap(), None);
    write(&mut c, 42, 1).unwrap();
    assert_eq!(fence::current(&mut c, RESOURCE).unwrap(), Some(42));
    assert_eq!(log(&mut c), vec![(42, 1)]);
    // Resources are independent.
    assert_eq!(fence::current(&mut c, "other").unwrap(), None);
    let n = fence::execute_fenced(
        &mut c,
        "other",
        1,
        "INSERT INTO log(token, writer) VALUES (1, 9)",
        &[],
    )
    .unwrap();
    assert_eq!(n, 1);
    assert_eq!(fence::current(&mut c, "other").unwrap(), Some(1));
    assert_eq!(fence::current(&mut c, RESOURCE).unwrap(), Some(42));
}

#[test]
fn equal_token_is_accepted_many_times() {
    let db = Db::new();
    let mut c = db.connect();
    for _ in 0..3 {
        write(&mut c, 42, 1).unwrap();
    }
    assert_eq!(log(&mut c), vec![(42, 1); 3]);
    assert_eq!(fence::current(&mut c, RESOURCE).unwrap(), Some(42));
}

#[test]
fn lower_token_is_refused_with_the_current_mark() {
    // The story: leader 42 writes, is replaced by 43, wakes up and writes again.
    let db = Db::new();
    let mut c = db.connect();
    write(&mut c, 42, 1).unwrap();
    write(&mut c, 43, 2).unwrap();
    match write(&mut c, 42, 1) {
        Err(PgFenceError::StaleToken { current: 43 }) => {}
        other => panic!("expected StaleToken {{ current: 43 }}, got {other:?}"),
    }
    let stale = fence::execute_fenced(
        &mut c,
        RESOURCE,
        41,
        "INSERT INTO log(token, writer) VALUES (41, 0)",
        &[],
    );
    assert!(
        matches!(stale, Err(PgFenceError::StaleToken { current: 43 })),
        "{stale:?}"
    );
    assert_eq!(log(&mut c), vec![(42, 1), (43, 2)]);
    assert_eq!(fence::current(&mut c, RESOURCE).unwrap(), Some(43));
    // The refusal left no transaction open: the connection is usable.
    write(&mut c, 44, 3).unwrap();
    assert!(!c.is_closed());
}

#[test]
fn a_rolled_back_fenced_transaction_does_not_raise_the_mark() {
    let db = Db::new();
    let mut c = db.connect();
    write(&mut c, 5, 1).unwrap();
    {
        let mut tx = fence::begin(&mut c, RESOURCE, 9).unwrap();
        assert_eq!(tx.token(), 9);
        // The application's write fails: the transaction is dropped, mark and all.
        assert!(tx
            .execute("INSERT INTO no_such_table VALUES (1)", &[])
            .is_err());
    }
    assert_eq!(fence::current(&mut c, RESOURCE).unwrap(), Some(5));
    fence::begin(&mut c, RESOURCE, 8)
        .unwrap()
        .rollback()
        .unwrap();
    assert_eq!(fence::current(&mut c, RESOURCE).unwrap(), Some(5));
    // A failing single write rolls its guard back too.
    let r = fence::execute_fenced(
        &mut c,
        RESOURCE,
        9,
        "INSERT INTO no_such_table VALUES (1)",
        &[],
    );
    assert!(matches!(r, Err(PgFenceError::Store(_))), "{r:?}");
    assert_eq!(fence::current(&mut c, RESOURCE).unwrap(), Some(5));
    write(&mut c, 6, 1).unwrap();
    assert_eq!(log(&mut c), vec![(5, 1), (6, 1)]);
}

/// The guard and the write share one transaction: while a fenced transaction is open, no
/// one else can move the mark, so a newer leader waits for the older one's write to land
/// (and then supersedes it) instead of slipping in between the check and the write. This
/// holds for a brand-new resource too (the uncommitted insert of its row).
#[test]
fn the_mark_cannot_move_between_the_guard_and_the_write() {
    let db = Db::new();
    for existing in [false, true] {
        let mut old = db.connect();
        let mut new = db.connect();
        new.batch_execute("SET lock_timeout = '200ms'").unwrap();
        old.batch_execute("TRUNCATE log, tenure_fence").unwrap();
        if existing {
            write(&mut old, 41, 1).unwrap();
            old.batch_execute("TRUNCATE log").unwrap();
        }

        let mut tx = fence::begin(&mut old, RESOURCE, 42).unwrap();
        // The old leader pauses here; the new one tries to write meanwhile, and must wait.
        match write(&mut new, 43, 2) {
            Err(PgFenceError::Store(e)) => assert_eq!(
                e.code(),
                Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE),
                "{e}"
            ),
            other => panic!("the new leader got past an open fenced transaction: {other:?}"),
        }
        // A new leader that waits (no timeout) goes ahead as soon as the old one commits.
        new.batch_execute("SET lock_timeout = 0").unwrap();
        let waiter = thread::spawn(move || {
            write(&mut new, 43, 2).unwrap();
            new
        });
        thread::sleep(std::time::Duration::from_millis(200));
        assert!(!waiter.is_finished(), "the new leader did not wait");
        tx.execute("INSERT INTO log(token, writer) VALUES (42, 1)", &[])
            .unwrap();
        tx.commit().unwrap();
        let _new = waiter.join().unwrap();
        assert!(matches!(
            write(&mut old, 42, 1),
            Err(PgFenceError::StaleToken { current: 43 })
        ));
        assert_eq!(log(&mut old), vec![(42, 1), (43, 2)]);
        check_log(&log(&mut old)).unwrap();
    }
}

#[test]
fn fence_in_guards_the_applications_own_transaction() {
    let db = Db::new();
    let mut c = db.connect();
    write(&mut c, 10, 1).unwrap();
    let mut tx = c.transaction().unwrap();
    let r = fence::fence_in(&mut tx, RESOURCE, 9);
    assert!(
        matches!(r, Err(PgFenceError::StaleToken { current: 10 })),
        "{r:?}"
    );
    drop(tx);
    let mut tx = c
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::Serializable)
        .start()
        .unwrap();
    fence::fence_in(&mut tx, RESOURCE, 11).unwrap();
    tx.execute("INSERT INTO log(token, writer) VALUES (11, 2)", &[])
        .unwrap();
    tx.commit().unwrap();
    assert_eq!(log(&mut c), vec![(10, 1), (11, 2)]);
}

#[test]
fn out_of_range_token_is_refused_and_errors_map_into_the_crate_error() {
    let db = Db::new();
    let mut c = db.connect();
    let r = write(&mut c, u64::MAX, 1);
    assert!(
        matches!(r, Err(PgFenceError::TokenOutOfRange { token: u64::MAX })),
        "{r:?}"
    );
    write(&mut c, i64::MAX as u64, 1).unwrap();
    assert_eq!(log(&mut c).len(), 1);
    assert_eq!(
        fence::current(&mut c, RESOURCE).unwrap(),
        Some(i64::MAX as u64)
    );

    let e: tenure::Error = PgFenceError::StaleToken { current: 43 }.into();
    assert_eq!(e, tenure::Error::StaleToken { current: 43 });
    let e: tenure::Error = PgFenceError::TokenOutOfRange { token: u64::MAX }.into();
    assert!(matches!(e, tenure::Error::InvalidArgument(_)), "{e:?}");
    let store = PgFenceError::from(c.batch_execute("SELEKT 1").unwrap_err());
    assert!(!store.is_retryable());
    let e: tenure::Error = store.into();
    assert!(matches!(e, tenure::Error::Backend(_)), "{e:?}");
}

/// The SQL of the module docs, run as a program in another language would: statement by
/// statement, the check done by the caller.
#[test]
fn the_documented_sql_works_as_written() {
    let db = Db::new();
    let mut c = db.connect();
    c.batch_execute(fence::SCHEMA).unwrap(); // idempotent
    c.batch_execute("CREATE TABLE books(day TEXT PRIMARY KEY, total BIGINT)")
        .unwrap();
    let mut fenced_write = |token: i64, total: i64| -> Result<(), i64> {
        c.batch_execute("BEGIN").unwrap();
        let raised = c
            .query(
                "INSERT INTO tenure_fence(resource, token) VALUES ($1, $2)
                     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
                     WHERE EXCLUDED.token >= tenure_fence.token
                     RETURNING token",
                &[&RESOURCE, &token],
            )
            .unwrap();
        if raised.is_empty() {
            let mark: i64 = c
                .query_one(
                    "SELECT token FROM tenure_fence WHERE resource = $1",
                    &[&RESOURCE],
                )
                .unwrap()
                .get(0);
            c.batch_execute("ROLLBACK").unwrap();
            return Err(mark);
        }
        c.execute(
            "INSERT INTO books VALUES ('2026-11-29', $1)
                 ON CONFLICT (day) DO UPDATE SET total = EXCLUDED.total",
            &[&total],
        )
        .unwrap();
        c.batch_execute("COMMIT").unwrap();
        Ok(())
    };
    assert_eq!(fenced_write(42, 100), Ok(()));
    assert_eq!(fenced_write(43, 200), Ok(()));
    assert_eq!(fenced_write(43, 300), Ok(()));
    assert_eq!(fenced_write(42, 999), Err(43));
    let total: i64 = c.query_one("SELECT total FROM books", &[]).unwrap().get(0);
    assert_eq!(total, 300);

    // The verdict from the upsert itself: its row count, or `RETURNING`.
    let mut raise = |token: i64| c.execute(fence::RAISE, &[&"other", &token]).unwrap();
    assert_eq!([raise(5), raise(5), raise(6), raise(4)], [1, 1, 1, 0]);
    let mut returning = |token: i64| -> Option<i64> {
        c.query_opt(fence::RAISE, &[&"third", &token])
            .unwrap()
            .map(|r| r.get(0))
    };
    assert_eq!(returning(7), Some(7));
    assert_eq!(returning(7), Some(7));
    assert_eq!(returning(6), None);
    assert_eq!(returning(8), Some(8));
    // The table refuses a negative mark.
    assert!(c
        .execute("INSERT INTO tenure_fence VALUES ('neg', -1)", &[])
        .is_err());
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
const WRITES_EACH: u64 = 100;

/// Many writers, each with its own connection, holding stale and fresh tokens in
/// interleaved order. A writer either becomes the newest leader (takes the next token while
/// holding the issuer, and writes with it, sometimes several times, so that it is still the
/// highest token issued while it writes), or writes as a stale leader with any older token,
/// concurrently with everyone.
fn run_writers(db: &Db, guarded: bool) -> (Outcomes, Vec<(u64, u64)>) {
    let write: fn(&mut Client, u64, u64) -> Result<(), PgFenceError> =
        if guarded { write } else { write_unguarded };
    // The highest token issued so far. Locked by the newest leader while it writes.
    let issuer = Arc::new(Mutex::new(0u64));
    let outcomes = Arc::new(Mutex::new(Outcomes::default()));
    let start = Arc::new(Barrier::new(WRITERS as usize));
    let threads: Vec<_> = (1..=WRITERS)
        .map(|writer| {
            let mut c = db.connect();
            let (issuer, outcomes, start) = (issuer.clone(), outcomes.clone(), start.clone());
            thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ writer.wrapping_mul(0x1234_5677));
                start.wait();
                for _ in 0..WRITES_EACH {
                    if rng.below(4) == 0 {
                        let mut issued = issuer.lock().unwrap();
                        *issued += 1;
                        let token = *issued;
                        for _ in 0..=rng.below(3) {
                            let r = write(&mut c, token, writer);
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
                        let r = write(&mut c, token, writer);
                        let mut o = outcomes.lock().unwrap();
                        match r {
                            Ok(()) => o.accepted.push((token, writer)),
                            Err(PgFenceError::StaleToken { current }) => {
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
    let log = log(&mut db.connect());
    (outcomes, log)
}

#[test]
fn concurrent_writers_never_commit_a_stale_token_and_never_refuse_a_fresh_one() {
    let db = Db::new();
    let (o, log) = run_writers(&db, true);

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
    let mark = fence::current(&mut db.connect(), RESOURCE).unwrap();
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
    let db = Db::new();
    let mut c = db.connect();
    write_unguarded(&mut c, 43, 2).unwrap();
    write_unguarded(&mut c, 42, 1).unwrap();
    let err = check_log(&log(&mut c)).unwrap_err();
    assert!(err.contains("token 42 below the mark 43"), "{err}");

    // And under the concurrent run.
    let db = Db::new();
    let (o, log) = run_writers(&db, false);
    assert!(o.refused.is_empty());
    assert!(
        check_log(&log).is_err(),
        "an unguarded run of {} writes committed no stale token",
        log.len()
    );
}

/// Many processes may install the fence at once.
#[test]
fn install_is_idempotent_and_safe_to_race() {
    let db = Db::new();
    db.connect()
        .batch_execute("DROP TABLE tenure_fence")
        .unwrap();
    let start = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let mut c = db.connect();
            let start = start.clone();
            thread::spawn(move || {
                start.wait();
                fence::install(&mut c).unwrap();
                fence::install(&mut c).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut c = db.connect();
    write(&mut c, 1, 1).unwrap();
}
