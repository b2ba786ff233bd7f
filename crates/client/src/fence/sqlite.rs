//! Fencing for SQLite (through [`rusqlite`], SQLite bundled).
//!
//! ```
//! use rusqlite::{params, Connection};
//! use tenure::fence::{sqlite, FenceError};
//!
//! # fn main() -> Result<(), FenceError> {
//! let mut db = Connection::open_in_memory()?;
//! sqlite::install(&db)?;
//! db.execute("CREATE TABLE ledger(day TEXT PRIMARY KEY, total INTEGER)", [])?;
//!
//! // The new leader (token 43) closes the books: its writes go in the fenced transaction.
//! let tx = sqlite::begin(&mut db, "nightly-billing", 43)?;
//! tx.execute("INSERT INTO ledger VALUES ('2026-11-29', 1200)", [])?;
//! tx.commit()?;
//!
//! // The old leader wakes up with token 42: refused, nothing written.
//! let stale = sqlite::execute_fenced(
//!     &db,
//!     "nightly-billing",
//!     42,
//!     "INSERT OR REPLACE INTO ledger VALUES (?1, ?2)",
//!     params!["2026-11-29", 999],
//! );
//! assert!(matches!(stale, Err(FenceError::StaleToken { current: 43 })));
//! let total: i64 = db.query_row("SELECT total FROM ledger", [], |r| r.get(0))?;
//! assert_eq!(total, 1200);
//! # Ok(())
//! # }
//! ```
//!
//! The SQL is in [`SCHEMA`], [`RAISE`] and [`CURRENT`], and explained in the
//! [module docs](super). Several processes may share one database file: use WAL mode
//! (`PRAGMA journal_mode = WAL`) and a busy timeout (rusqlite sets 5 s by default), since
//! fenced transactions wait for SQLite's write lock.

use rusqlite::{Connection, OptionalExtension as _, Params, Transaction, TransactionBehavior};

use super::{to_sql, FenceError, Fenced};

/// Why a fenced write to SQLite was not done: [`FenceError`] with SQLite's errors.
pub type SqliteFenceError = FenceError<rusqlite::Error>;

/// Creates the fence table (idempotent).
pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS tenure_fence (
    resource TEXT PRIMARY KEY,
    token    INTEGER NOT NULL
)";

/// Raises the resource's mark to the token, unless the mark is higher already.
/// Parameters: `?1` resource, `?2` token.
pub const RAISE: &str = "INSERT INTO tenure_fence(resource, token) VALUES (?1, ?2)
    ON CONFLICT(resource) DO UPDATE SET token = excluded.token
    WHERE excluded.token >= tenure_fence.token";

/// Reads the resource's mark. Parameter: `?1` resource.
pub const CURRENT: &str = "SELECT token FROM tenure_fence WHERE resource = ?1";

/// Create the `tenure_fence` table if it does not exist.
pub fn install(conn: &Connection) -> Result<(), FenceError> {
    conn.execute_batch(SCHEMA)?;
    Ok(())
}

/// The highest token accepted for `resource`, if any write was ever fenced on it.
pub fn current(conn: &Connection, resource: &str) -> Result<Option<u64>, FenceError> {
    let mark: Option<i64> = conn
        .query_row(CURRENT, [resource], |r| r.get(0))
        .optional()?;
    mark.map(to_token).transpose()
}

/// Open an `IMMEDIATE` transaction on `conn` and fence it: raise `resource`'s mark to
/// `token`, or fail with [`FenceError::StaleToken`] (and roll back) if the mark is higher.
///
/// Do the writes that `token` protects in the returned transaction (it derefs to a
/// [`rusqlite::Transaction`]) and [`FencedTx::commit`] it; dropping it rolls back, the
/// raised mark included.
pub fn begin<'c>(
    conn: &'c mut Connection,
    resource: &str,
    token: u64,
) -> Result<FencedTx<'c>, FenceError> {
    let sql_token = to_sql(token)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    raise(&tx, resource, token, sql_token)?;
    Ok(Fenced { tx, token })
}

/// Run one write (`sql` with `params`) fenced by `token` on `resource`, in one `IMMEDIATE`
/// transaction with the guard; returns the number of rows changed.
///
/// `conn` must not be in a transaction already (SQLite would refuse to begin one); inside
/// your own transaction, use [`fence_in`].
pub fn execute_fenced<P: Params>(
    conn: &Connection,
    resource: &str,
    token: u64,
    sql: &str,
    params: P,
) -> Result<usize, FenceError> {
    let sql_token = to_sql(token)?;
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    raise(&tx, resource, token, sql_token)?;
    let changed = tx.execute(sql, params)?;
    tx.commit()?;
    Ok(changed)
}

/// Fence a transaction the application opened itself: raise `resource`'s mark to `token`
/// or fail with [`FenceError::StaleToken`]. On failure, roll the transaction back (dropping
/// it does). Prefer an `IMMEDIATE` transaction: a deferred one may fail with
/// `SQLITE_BUSY` here when it upgrades to writing.
pub fn fence_in(tx: &Transaction<'_>, resource: &str, token: u64) -> Result<(), FenceError> {
    let sql_token = to_sql(token)?;
    raise(tx, resource, token, sql_token)
}

fn raise(conn: &Connection, resource: &str, token: u64, sql_token: i64) -> Result<(), FenceError> {
    conn.execute(RAISE, rusqlite::params![resource, sql_token])?;
    let current: i64 = conn.query_row(CURRENT, [resource], |r| r.get(0))?;
    if current == sql_token {
        Ok(())
    } else {
        // The mark only ever rises past us: `current > token`.
        let current = to_token(current)?;
        debug_assert!(current > token);
        Err(FenceError::StaleToken { current })
    }
}

fn to_token(mark: i64) -> Result<u64, FenceError> {
    u64::try_from(mark)
        .map_err(|_| FenceError::Store(rusqlite::Error::IntegralValueOutOfRange(0, mark)))
}

/// A SQLite transaction fenced by a token (see [`Fenced`]): the resource's mark equals the
/// token until it ends. Derefs to the [`rusqlite::Transaction`] for the application's writes;
/// rolls back when dropped without [`Fenced::commit`].
pub type FencedTx<'c> = Fenced<Transaction<'c>>;

impl Fenced<Transaction<'_>> {
    /// Commit the application's writes together with the raised mark.
    pub fn commit(self) -> Result<(), FenceError> {
        self.tx.commit()?;
        Ok(())
    }

    /// Roll back everything, the raised mark included.
    pub fn rollback(self) -> Result<(), FenceError> {
        self.tx.rollback()?;
        Ok(())
    }
}
