//! `tenure::fence::postgres` against a real PostgreSQL, under the fencing contract
//! (tests/fence/contract.rs), and what only PostgreSQL has: its documented SQL, its errors
//! and its install under a race.
//!
//! The tests start their own server with `scripts/services.sh start-postgres` (PostgreSQL
//! from the Debian package, installed by `scripts/services.sh install-postgres`), on
//! loopback in a temporary directory, and stop it when the last test using it is done. If
//! PostgreSQL is not installed they fail, saying how to install it: they never pass
//! without a server.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, Weak};
use std::thread;

use postgres::{Client, NoTls};
use tenure::fence::postgres::{self as fence, PgFenceError};

#[path = "fence/contract.rs"]
mod contract;

use contract::{Store as _, Verdict, RESOURCE};

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
    fn create() -> Db {
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
}

fn verdict(e: PgFenceError) -> Verdict {
    match e {
        PgFenceError::StaleToken { current } => Verdict::Stale { current },
        PgFenceError::TokenOutOfRange { token } => Verdict::OutOfRange { token },
        PgFenceError::Store(e)
            if e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) =>
        {
            Verdict::Busy
        }
        other => Verdict::Store(other.to_string()),
    }
}

const INSERT_LOG: &str = "INSERT INTO log(token, writer) VALUES ($1, $2)";

impl contract::Store for Db {
    type Conn = Client;

    fn fresh() -> Db {
        Db::create()
    }

    fn connect(&self) -> Client {
        self.server.connect(&self.name)
    }

    fn connect_impatient(&self) -> Client {
        let mut c = self.connect();
        c.batch_execute("SET lock_timeout = '1ms'").unwrap();
        c
    }

    fn write(c: &mut Client, token: u64, writer: u64) -> Result<(), Verdict> {
        let mut tx = fence::begin(c, RESOURCE, token).map_err(verdict)?;
        thread::yield_now();
        tx.execute(INSERT_LOG, &[&(token as i64), &(writer as i64)])
            .map_err(|e| verdict(e.into()))?;
        tx.commit().map_err(verdict)
    }

    fn write_unguarded(c: &mut Client, token: u64, writer: u64) -> Result<(), Verdict> {
        let mut run = || -> Result<(), postgres::Error> {
            let mut tx = c.transaction()?;
            thread::yield_now();
            tx.execute(INSERT_LOG, &[&(token as i64), &(writer as i64)])?;
            tx.commit()
        };
        run().map_err(|e| verdict(e.into()))
    }

    fn execute_fenced(
        c: &mut Client,
        resource: &str,
        token: u64,
        writer: u64,
    ) -> Result<(), Verdict> {
        let n = fence::execute_fenced(
            c,
            resource,
            token,
            INSERT_LOG,
            &[&(token as i64), &(writer as i64)],
        )
        .map_err(verdict)?;
        assert_eq!(n, 1, "rows the fenced statement changed");
        Ok(())
    }

    fn fence_in(c: &mut Client, token: u64, writer: u64) -> Result<(), Verdict> {
        // Any isolation level the application picks: serializable here.
        let mut tx = c
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::Serializable)
            .start()
            .map_err(|e| verdict(e.into()))?;
        fence::fence_in(&mut tx, RESOURCE, token).map_err(verdict)?;
        tx.execute(INSERT_LOG, &[&(token as i64), &(writer as i64)])
            .map_err(|e| verdict(e.into()))?;
        tx.commit().map_err(|e| verdict(e.into()))
    }

    fn begin_then_fail(c: &mut Client, token: u64) -> u64 {
        let mut tx = fence::begin(c, RESOURCE, token).unwrap();
        assert!(tx
            .execute("INSERT INTO no_such_table VALUES (1)", &[])
            .is_err());
        tx.token()
    }

    fn begin_then_roll_back(c: &mut Client, token: u64) {
        fence::begin(c, RESOURCE, token)
            .unwrap()
            .rollback()
            .unwrap();
    }

    fn execute_fenced_failing(c: &mut Client, token: u64) -> Result<(), Verdict> {
        fence::execute_fenced(
            c,
            RESOURCE,
            token,
            "INSERT INTO no_such_table VALUES (1)",
            &[],
        )
        .map(|_| ())
        .map_err(verdict)
    }

    fn hold_fenced(c: &mut Client, token: u64, writer: u64, during: &mut dyn FnMut()) {
        let mut tx = fence::begin(c, RESOURCE, token).unwrap();
        during();
        tx.execute(INSERT_LOG, &[&(token as i64), &(writer as i64)])
            .unwrap();
        tx.commit().unwrap();
    }

    fn log(c: &mut Client) -> Vec<(u64, u64)> {
        c.query("SELECT token, writer FROM log ORDER BY id", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64))
            .collect()
    }

    fn current(c: &mut Client, resource: &str) -> Option<u64> {
        fence::current(c, resource).unwrap()
    }

    fn reset(c: &mut Client) {
        c.batch_execute("TRUNCATE log, tenure_fence").unwrap();
    }

    fn reset_log_only(c: &mut Client) {
        c.batch_execute("TRUNCATE log").unwrap();
    }
}

fence_contract!(Db);

#[test]
fn errors_map_into_the_crate_error() {
    let db = Db::fresh();
    let mut c = db.connect();
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
    let db = Db::fresh();
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

/// Many processes may install the fence at once.
#[test]
fn install_is_idempotent_and_safe_to_race() {
    let db = Db::fresh();
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
    Db::write(&mut c, 1, 1).unwrap();
}
