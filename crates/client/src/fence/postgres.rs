//! Fencing for PostgreSQL (through the synchronous [`postgres`] driver).
//!
//! ```no_run
//! use postgres::{Client, NoTls};
//! use tenure::fence::postgres::{self as fence, PgFenceError};
//!
//! # fn main() -> Result<(), PgFenceError> {
//! let mut db = Client::connect("postgres://postgres@127.0.0.1:5432/postgres", NoTls)?;
//! fence::install(&mut db)?;
//! db.batch_execute("CREATE TABLE IF NOT EXISTS ledger(day TEXT PRIMARY KEY, total BIGINT)")?;
//!
//! // The new leader (token 43) closes the books: its writes go in the fenced transaction.
//! let mut tx = fence::begin(&mut db, "nightly-billing", 43)?;
//! tx.execute("INSERT INTO ledger VALUES ('2026-11-29', 1200)", &[])?;
//! tx.commit()?;
//!
//! // The old leader wakes up with token 42: refused, nothing written.
//! let stale = fence::execute_fenced(
//!     &mut db,
//!     "nightly-billing",
//!     42,
//!     "INSERT INTO ledger VALUES ($1, $2) ON CONFLICT (day) DO UPDATE SET total = EXCLUDED.total",
//!     &[&"2026-11-29", &999i64],
//! );
//! assert!(matches!(stale, Err(PgFenceError::StaleToken { current: 43 })));
//! # Ok(())
//! # }
//! ```
//!
//! # The SQL
//!
//! The scheme is the one of the [module docs](super); in PostgreSQL it reads:
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS tenure_fence (
//!     resource TEXT PRIMARY KEY,
//!     token    BIGINT NOT NULL CHECK (token >= 0)
//! );
//!
//! BEGIN;  -- READ COMMITTED (the default) or stricter
//! INSERT INTO tenure_fence(resource, token) VALUES ($1, $2)
//!     ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
//!     WHERE EXCLUDED.token >= tenure_fence.token
//!     RETURNING token;
//! -- One row back: the write may go ahead. No row: the token is stale; read the mark with
//! --   SELECT token FROM tenure_fence WHERE resource = $1;
//! -- and ROLLBACK. Otherwise:
//! -- ... the application's writes ...
//! COMMIT;
//! ```
//!
//! ([`SCHEMA`], [`RAISE`], [`CURRENT`].) Why it holds in PostgreSQL:
//!
//! - **The mark cannot move before `COMMIT`.** `INSERT … ON CONFLICT DO UPDATE` locks the
//!   conflicting row (the latest committed version of it, whatever the statement's snapshot)
//!   for the rest of the transaction, *even when the `WHERE` is false* and nothing is
//!   updated. A fresh row is protected the same way by its uncommitted insert: a concurrent
//!   upsert of the same resource waits on the unique index. So fenced transactions on one
//!   resource run one after the other, each seeing the mark its predecessors committed, and
//!   a newer leader waits for an older one's open transaction to end instead of slipping in
//!   between its check and its write.
//! - **The verdict.** `RETURNING` yields a row exactly when the row was inserted or updated,
//!   i.e. when the token is at least the mark. When it yields none, the `SELECT` of the mark
//!   runs under the row lock we now hold, and in READ COMMITTED with a fresh snapshot, so it
//!   reads the mark that refused us. (Under REPEATABLE READ or SERIALIZABLE, an upsert that
//!   meets a row changed since the snapshot fails with a serialization failure instead,
//!   SQLSTATE `40001`: retry the whole transaction, see [`PgFenceError::is_retryable`].)
//! - **A rolled-back transaction leaves no raised mark.** The raise is an ordinary row write
//!   of the transaction.
//!
//! Tokens are stored as `BIGINT`: tokens above `i64::MAX` are refused with
//! [`PgFenceError::TokenOutOfRange`].
//!
//! Fencing several resources in one transaction takes several row locks: raise them in one
//! order everywhere (say, sorted by name), or PostgreSQL may abort one transaction with a
//! deadlock error (SQLSTATE `40P01`, also retryable).
//!
//! The [`postgres`] driver blocks, running its own small runtime: from async code,
//! call these helpers from [`tokio::task::spawn_blocking`], or run the same SQL through
//! `tokio-postgres`.

use ::postgres::error::SqlState;
use ::postgres::types::ToSql;
use ::postgres::{Client, GenericClient, Transaction};

use super::{to_sql, FenceError, Fenced};

/// Creates the fence table (idempotent).
pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS tenure_fence (
    resource TEXT PRIMARY KEY,
    token    BIGINT NOT NULL CHECK (token >= 0)
)";

/// Raises the resource's mark to the token unless the mark is higher already; returns the
/// token in one row when it did (the write may go ahead), no row when the token is stale.
/// Parameters: `$1` resource (`TEXT`), `$2` token (`BIGINT`).
pub const RAISE: &str = "INSERT INTO tenure_fence(resource, token) VALUES ($1, $2)
    ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
    WHERE EXCLUDED.token >= tenure_fence.token
    RETURNING token";

/// Reads the resource's mark. Parameter: `$1` resource.
pub const CURRENT: &str = "SELECT token FROM tenure_fence WHERE resource = $1";

/// Why a fenced write to PostgreSQL was not done: [`FenceError`] over
/// [`::postgres::Error`]; it converts into [`crate::Error`] the same way.
pub type PgFenceError = FenceError<::postgres::Error>;

impl FenceError<::postgres::Error> {
    /// Whether running the whole transaction again may succeed: PostgreSQL aborted it for a
    /// serialization failure or a deadlock. (A stale token never becomes fresh again.)
    pub fn is_retryable(&self) -> bool {
        match self {
            FenceError::Store(e) => matches!(
                e.code(),
                Some(&SqlState::T_R_SERIALIZATION_FAILURE) | Some(&SqlState::T_R_DEADLOCK_DETECTED)
            ),
            _ => false,
        }
    }
}

/// Create the `tenure_fence` table if it does not exist.
///
/// Safe to call from many processes at once: concurrent `CREATE TABLE IF NOT EXISTS` can
/// fail in PostgreSQL with a unique violation on the catalog, so the creation runs under a
/// transaction-scoped advisory lock.
pub fn install(client: &mut Client) -> Result<(), PgFenceError> {
    let mut tx = client.transaction()?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('tenure_fence'))",
        &[],
    )?;
    tx.batch_execute(SCHEMA)?;
    tx.commit()?;
    Ok(())
}

/// The highest token accepted for `resource`, if any write was ever fenced on it.
pub fn current(
    client: &mut impl GenericClient,
    resource: &str,
) -> Result<Option<u64>, PgFenceError> {
    let row = client.query_opt(CURRENT, &[&resource])?;
    row.map(|r| to_token(r.try_get(0)?)).transpose()
}

/// Open a transaction on `client` and fence it: raise `resource`'s mark to `token`, or fail
/// with [`FenceError::StaleToken`] (and roll back) if the mark is higher.
///
/// Do the writes that `token` protects in the returned transaction (it derefs to a
/// [`postgres::Transaction`]) and [`FencedTx::commit`] it;
/// dropping it rolls back, the raised mark included. Until it ends, other fenced
/// transactions on `resource` wait.
pub fn begin<'c>(
    client: &'c mut Client,
    resource: &str,
    token: u64,
) -> Result<FencedTx<'c>, PgFenceError> {
    let sql_token = to_sql(token)?;
    let mut tx = client.transaction()?;
    raise(&mut tx, resource, sql_token)?;
    Ok(Fenced { tx, token })
}

/// Run one write (`sql` with `params`) fenced by `token` on `resource`, in one transaction
/// with the guard; returns the number of rows changed.
pub fn execute_fenced(
    client: &mut Client,
    resource: &str,
    token: u64,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, PgFenceError> {
    let sql_token = to_sql(token)?;
    let mut tx = client.transaction()?;
    raise(&mut tx, resource, sql_token)?;
    let changed = tx.execute(sql, params)?;
    tx.commit()?;
    Ok(changed)
}

/// Fence a transaction the application opened itself: raise `resource`'s mark to `token`
/// or fail with [`FenceError::StaleToken`]. On failure, roll the transaction back
/// (dropping it does). Raise before the writes it protects.
pub fn fence_in(tx: &mut Transaction<'_>, resource: &str, token: u64) -> Result<(), PgFenceError> {
    let sql_token = to_sql(token)?;
    raise(tx, resource, sql_token)
}

fn raise(tx: &mut Transaction<'_>, resource: &str, sql_token: i64) -> Result<(), PgFenceError> {
    if tx.query_opt(RAISE, &[&resource, &sql_token])?.is_some() {
        return Ok(());
    }
    // Refused: we hold the row's lock now, so this is the mark that refused us, and it is
    // above our token.
    let current: i64 = tx.query_one(CURRENT, &[&resource])?.try_get(0)?;
    debug_assert!(current > sql_token);
    Err(FenceError::StaleToken {
        current: to_token(current)?,
    })
}

fn to_token(mark: i64) -> Result<u64, PgFenceError> {
    // The table's CHECK keeps marks non-negative; unreachable unless someone altered it.
    u64::try_from(mark).map_err(|_| FenceError::TokenOutOfRange { token: mark as u64 })
}

/// A PostgreSQL transaction fenced by a token (see [`Fenced`]). Derefs to the
/// [`postgres::Transaction`] for the application's writes; rolls back when dropped without
/// [`Fenced::commit`].
pub type FencedTx<'c> = Fenced<Transaction<'c>>;

impl Fenced<Transaction<'_>> {
    /// Commit the application's writes together with the raised mark.
    pub fn commit(self) -> Result<(), PgFenceError> {
        self.tx.commit()?;
        Ok(())
    }

    /// Roll back everything, the raised mark included.
    pub fn rollback(self) -> Result<(), PgFenceError> {
        self.tx.rollback()?;
        Ok(())
    }
}
