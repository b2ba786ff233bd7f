//! Fencing helpers: make a real store reject the writes of a leader that was replaced.
//!
//! A [`Leadership`](crate::Leadership) carries a fencing token that rises with every change
//! of leader. Checking [`Leadership::is_valid`](crate::Leadership::is_valid) before a write
//! narrows the window in which a replaced leader acts, but cannot close it: the process may
//! pause between the check and the write. Only the store can close it, by refusing a write
//! whose token is below the highest it has accepted, **in the same atomic step as the
//! write** (DESIGN.md rule 3). The helpers here do that for stores other than the cluster's
//! own fenced keys.
//!
//! The cluster's fenced keys know each election's *current* token, so they refuse a replaced
//! leader's write as soon as a newer leader exists, and refuse writes from any other
//! election. An external store cannot know that: it only learns a higher token when someone
//! writes one. Until the new leader's first fenced write (or an explicit raise of the mark
//! with its token) the store still accepts the old leader's token. So a new leader should
//! raise the fence of every resource it owns before anything else, and resources should not
//! be shared between elections.
//!
//! # The scheme
//!
//! The store keeps one row per protected *resource* (a name the application picks: the
//! election's name, or anything finer such as `books/2026-11-29`) holding the highest token
//! accepted for it, its *high-water mark*:
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS tenure_fence (
//!     resource TEXT PRIMARY KEY,
//!     token    INTEGER NOT NULL
//! );
//! ```
//!
//! Every fenced write runs in one transaction that first raises the mark, then checks it:
//!
//! ```sql
//! BEGIN IMMEDIATE;
//! INSERT INTO tenure_fence(resource, token) VALUES (:resource, :token)
//!     ON CONFLICT(resource) DO UPDATE SET token = excluded.token
//!     WHERE excluded.token >= tenure_fence.token;
//! SELECT token FROM tenure_fence WHERE resource = :resource;
//! -- if the token read is not :token, the write is stale: ROLLBACK, and report the token
//! -- read (the current mark). Otherwise:
//! -- ... the application's writes ...
//! COMMIT;
//! ```
//!
//! - **Why `>=` and not `>`.** A leader writes many times with the same token, and each of
//!   those writes must pass: only a *lower* token is stale. (Two processes never hold the
//!   same token of one election: each token is handed to one leader.) With `>=`, the upsert
//!   changes one row exactly when the write may go ahead (first token, higher token, same
//!   token) and none when it is stale, so its affected-row count is itself the verdict, for
//!   drivers that prefer it to reading the mark back; SQLite 3.35+ and PostgreSQL can also
//!   append `RETURNING token`, which returns a row only then. With `>`, reading back would
//!   still accept an equal token, but the row count would wrongly say 0.
//! - **Why the first write is accepted.** With no row yet, the `INSERT` creates it: a store
//!   that never saw a token has nothing to be stale against.
//! - **Why the check and the write share the transaction.** Checked in one transaction and
//!   written in another, a stale leader could pass the check, pause, let the new leader raise
//!   the mark and write, and then write over it: exactly the story fencing exists to prevent.
//!   Inside one transaction the mark cannot move between the check and the write, and a
//!   rolled-back write does not leave a raised mark behind. `BEGIN IMMEDIATE` takes SQLite's
//!   write lock at once, so the transaction never has to be upgraded from a read (which could
//!   fail with `SQLITE_BUSY` midway) and fenced writers queue up on the lock instead.
//! - **Why raise, not just compare.** The store learns of a new leader only from that
//!   leader's writes: every accepted write records its token, so the first write of leader
//!   43 is what shuts leader 42 out. A guard that only compared against a mark kept
//!   elsewhere would accept 42 until someone remembered to update that mark.
//!
//! Tokens are stored as SQL `INTEGER` (signed 64 bits): tokens above `i64::MAX` are refused
//! with [`FenceError::TokenOutOfRange`].
//!
//! # Stores
//!
//! - SQLite: [`sqlite`].
//! - PostgreSQL: [`postgres`] (the same upsert with `RETURNING`; PostgreSQL locks the
//!   conflicting row for the rest of the transaction even when the `DO UPDATE … WHERE` is
//!   false, so the mark cannot move before `COMMIT`).
//!

#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

/// The store error [`FenceError`] means when none is named: SQLite's (with the `sqlite`
/// feature, as before the stores were features).
#[cfg(feature = "sqlite")]
#[doc(hidden)]
pub type DefaultStoreError = rusqlite::Error;
/// The store error [`FenceError`] means when none is named: none, in a build without SQLite.
#[cfg(not(feature = "sqlite"))]
#[doc(hidden)]
pub type DefaultStoreError = std::convert::Infallible;

/// Why a fenced write was not done. `E` is the store's own error type: `rusqlite::Error`
/// by default (so `FenceError` is SQLite's, also named [`sqlite::SqliteFenceError`]),
/// `postgres::Error` for [`postgres::PgFenceError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError<E = DefaultStoreError> {
    /// The token is below the highest one the store accepted for this resource: the writer
    /// was replaced as leader. Nothing was written.
    #[error("stale token: the highest accepted token is {current}")]
    StaleToken {
        /// The store's high-water mark for the resource.
        current: u64,
    },
    /// The token does not fit the store's integer type (SQL `INTEGER` or `BIGINT`, at most
    /// `i64::MAX`).
    #[error("token {token} is out of the store's range (at most {})", i64::MAX)]
    TokenOutOfRange {
        /// The token given.
        token: u64,
    },
    /// The store failed (locked too long, connection lost, serialization failure, bad SQL in
    /// the application's write, ...). Nothing was committed.
    #[error("store error: {0}")]
    Store(#[from] E),
}

impl<E: std::error::Error> From<FenceError<E>> for crate::Error {
    /// [`FenceError::StaleToken`] becomes [`crate::Error::StaleToken`], the same answer the
    /// cluster's fenced keys give; an out-of-range token is an invalid argument; store
    /// failures become [`crate::Error::Backend`].
    fn from(e: FenceError<E>) -> crate::Error {
        match e {
            FenceError::StaleToken { current } => crate::Error::StaleToken { current },
            FenceError::TokenOutOfRange { .. } => crate::Error::InvalidArgument(e.to_string()),
            FenceError::Store(_) => crate::Error::Backend(e.to_string()),
        }
    }
}

/// A token as the stores keep it (SQL `INTEGER`/`BIGINT`), or
/// [`FenceError::TokenOutOfRange`].
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn to_sql<E>(token: u64) -> Result<i64, FenceError<E>> {
    i64::try_from(token).map_err(|_| FenceError::TokenOutOfRange { token })
}

/// A store's transaction `T` fenced by a token: the resource's mark equals the token, and no
/// other fenced transaction on the resource can proceed, until it ends. Derefs to `T` for
/// the application's writes; rolls back when dropped without `commit` (each store's module
/// has `commit` and `rollback` for its transaction type, and names this type `FencedTx`).
pub struct Fenced<T> {
    tx: T,
    token: u64,
}

impl<T> Fenced<T> {
    /// The token this transaction is fenced by.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The underlying transaction (also reachable through `Deref`/`DerefMut`).
    pub fn transaction(&mut self) -> &mut T {
        &mut self.tx
    }
}

impl<T> std::fmt::Debug for Fenced<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedTx")
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl<T> std::ops::Deref for Fenced<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.tx
    }
}

impl<T> std::ops::DerefMut for Fenced<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.tx
    }
}
