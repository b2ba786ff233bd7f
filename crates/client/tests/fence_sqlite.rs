//! `tenure::fence::sqlite` under the fencing contract (tests/fence/contract.rs), on WAL
//! database files of their own, and what only SQLite has: its documented SQL and its errors.

use std::path::PathBuf;
use std::thread;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension as _, TransactionBehavior};
use tenure::fence::{sqlite, FenceError};

#[path = "fence/contract.rs"]
mod contract;

use contract::{Verdict, RESOURCE};

/// One database file per case, in a directory removed with it.
struct Sqlite {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

const LOG_TABLE: &str = "CREATE TABLE log(id INTEGER PRIMARY KEY AUTOINCREMENT, token INTEGER NOT NULL, writer INTEGER NOT NULL)";

fn verdict(e: FenceError) -> Verdict {
    match e {
        FenceError::StaleToken { current } => Verdict::Stale { current },
        FenceError::TokenOutOfRange { token } => Verdict::OutOfRange { token },
        FenceError::Store(e)
            if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) =>
        {
            Verdict::Busy
        }
        other => Verdict::Store(other.to_string()),
    }
}

fn insert_log(tx: &rusqlite::Transaction<'_>, token: u64, writer: u64) -> Result<(), FenceError> {
    tx.execute(
        "INSERT INTO log(token, writer) VALUES (?1, ?2)",
        params![token as i64, writer as i64],
    )?;
    Ok(())
}

impl Sqlite {
    fn open(&self, busy: Duration) -> Connection {
        let db = Connection::open(&self.path).unwrap();
        db.busy_timeout(busy).unwrap();
        let mode: String = db
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        db
    }
}

impl contract::Store for Sqlite {
    type Conn = Connection;

    fn fresh() -> Sqlite {
        let dir = tempfile::tempdir().unwrap();
        let s = Sqlite {
            path: dir.path().join("fence.db"),
            _dir: dir,
        };
        let db = s.connect();
        sqlite::install(&db).unwrap();
        db.execute_batch(LOG_TABLE).unwrap();
        s
    }

    fn connect(&self) -> Connection {
        self.open(Duration::from_secs(30))
    }

    fn connect_impatient(&self) -> Connection {
        self.open(Duration::ZERO)
    }

    fn write(c: &mut Connection, token: u64, writer: u64) -> Result<(), Verdict> {
        let tx = sqlite::begin(c, RESOURCE, token).map_err(verdict)?;
        thread::yield_now();
        insert_log(&tx, token, writer).map_err(verdict)?;
        tx.commit().map_err(verdict)
    }

    fn write_unguarded(c: &mut Connection, token: u64, writer: u64) -> Result<(), Verdict> {
        let mut run = || -> Result<(), FenceError> {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            thread::yield_now();
            insert_log(&tx, token, writer)?;
            tx.commit()?;
            Ok(())
        };
        run().map_err(verdict)
    }

    fn execute_fenced(
        c: &mut Connection,
        resource: &str,
        token: u64,
        writer: u64,
    ) -> Result<(), Verdict> {
        let n = sqlite::execute_fenced(
            c,
            resource,
            token,
            "INSERT INTO log(token, writer) VALUES (?1, ?2)",
            params![token as i64, writer as i64],
        )
        .map_err(verdict)?;
        assert_eq!(n, 1, "rows the fenced statement changed");
        Ok(())
    }

    fn fence_in(c: &mut Connection, token: u64, writer: u64) -> Result<(), Verdict> {
        let mut run = || -> Result<(), FenceError> {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            sqlite::fence_in(&tx, RESOURCE, token)?;
            insert_log(&tx, token, writer)?;
            tx.commit()?;
            Ok(())
        };
        run().map_err(verdict)
    }

    fn begin_then_fail(c: &mut Connection, token: u64) -> u64 {
        let tx = sqlite::begin(c, RESOURCE, token).unwrap();
        assert!(tx
            .execute("INSERT INTO no_such_table VALUES (1)", [])
            .is_err());
        tx.token()
    }

    fn begin_then_roll_back(c: &mut Connection, token: u64) {
        sqlite::begin(c, RESOURCE, token)
            .unwrap()
            .rollback()
            .unwrap();
    }

    fn execute_fenced_failing(c: &mut Connection, token: u64) -> Result<(), Verdict> {
        sqlite::execute_fenced(
            c,
            RESOURCE,
            token,
            "INSERT INTO no_such_table VALUES (1)",
            [],
        )
        .map(|_| ())
        .map_err(verdict)
    }

    fn hold_fenced(c: &mut Connection, token: u64, writer: u64, during: &mut dyn FnMut()) {
        let tx = sqlite::begin(c, RESOURCE, token).unwrap();
        during();
        insert_log(&tx, token, writer).unwrap();
        tx.commit().unwrap();
    }

    fn log(c: &mut Connection) -> Vec<(u64, u64)> {
        let mut st = c
            .prepare("SELECT token, writer FROM log ORDER BY id")
            .unwrap();
        st.query_map([], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    fn current(c: &mut Connection, resource: &str) -> Option<u64> {
        sqlite::current(c, resource).unwrap()
    }

    fn reset(c: &mut Connection) {
        c.execute_batch("DELETE FROM log; DELETE FROM tenure_fence")
            .unwrap();
    }

    fn reset_log_only(c: &mut Connection) {
        c.execute_batch("DELETE FROM log").unwrap();
    }
}

fence_contract!(Sqlite);

#[test]
fn errors_map_into_the_crate_error() {
    let stale: FenceError = FenceError::StaleToken { current: 43 };
    let e: tenure::Error = stale.into();
    assert_eq!(e, tenure::Error::StaleToken { current: 43 });
    let range: FenceError = FenceError::TokenOutOfRange { token: u64::MAX };
    let e: tenure::Error = range.into();
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
