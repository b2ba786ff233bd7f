"""Fencing for PostgreSQL, through psycopg 3: the SQL contract of the Rust
``tenure::fence::postgres``, statement for statement.

.. code-block:: python

    import psycopg
    from tenure.fence import postgres as fence

    with psycopg.connect(url, autocommit=True) as db:
        fence.install(db)
        # The new leader (token 43) closes the books: its writes go in the fenced transaction.
        with fence.begin(db, "nightly-billing", 43):
            db.execute("INSERT INTO ledger VALUES ('2026-11-29', 1200)")
        # The old leader wakes up with token 42: refused, nothing written.
        fence.execute_fenced(db, "nightly-billing", 42, "INSERT INTO ledger ...")  # StaleToken(43)

The SQL::

    CREATE TABLE IF NOT EXISTS tenure_fence (
        resource TEXT PRIMARY KEY,
        token    BIGINT NOT NULL CHECK (token >= 0)
    );

    BEGIN;  -- READ COMMITTED (the default) or stricter
    INSERT INTO tenure_fence(resource, token) VALUES ($1, $2)
        ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
        WHERE EXCLUDED.token >= tenure_fence.token
        RETURNING token;
    -- One row back: the write may go ahead. No row: the token is stale; read the mark with
    --   SELECT token FROM tenure_fence WHERE resource = $1;
    -- and ROLLBACK. Otherwise:
    -- ... the application's writes ...
    COMMIT;

Why it holds: ``INSERT ... ON CONFLICT DO UPDATE`` locks the conflicting row for the rest of
the transaction even when the ``WHERE`` is false, so the mark cannot move before ``COMMIT``
(a newer leader's raise waits for an older one's open transaction instead of slipping in
between its check and its write); ``RETURNING`` yields a row exactly when the token is at
least the mark (``>=``: a leader writes many times with one token); when it yields none, the
``SELECT`` runs under the row lock and reads the mark that refused us; and a rolled-back
transaction leaves no raised mark, the raise being an ordinary row write of it. Under
REPEATABLE READ or SERIALIZABLE a conflicting upsert fails with a serialization failure
instead (SQLSTATE 40001): run the whole transaction again (:func:`is_retryable`). Fencing
several resources in one transaction: raise them in one order everywhere, or PostgreSQL may
abort one transaction with a deadlock (40P01, also retryable).

Tokens are stored as ``BIGINT``: a token above 2**63 - 1 is refused with
:class:`TokenOutOfRange`.
"""

from __future__ import annotations

from dataclasses import dataclass
import contextlib
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from ..errors import InvalidArgument, StaleToken

if TYPE_CHECKING:  # psycopg is the `postgres` extra's; imported by the caller.
    import psycopg

#: Creates the fence table (idempotent).
SCHEMA = """CREATE TABLE IF NOT EXISTS tenure_fence (
    resource TEXT PRIMARY KEY,
    token    BIGINT NOT NULL CHECK (token >= 0)
)"""

#: Raises the resource's mark to the token unless the mark is higher already; returns the
#: token in one row when it did (the write may go ahead), no row when the token is stale.
#: Parameters: resource (``TEXT``), token (``BIGINT``).
RAISE = """INSERT INTO tenure_fence(resource, token) VALUES (%s, %s)
    ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
    WHERE EXCLUDED.token >= tenure_fence.token
    RETURNING token"""

#: Reads the resource's mark. Parameter: resource.
CURRENT = "SELECT token FROM tenure_fence WHERE resource = %s"

_BIGINT_MAX = (1 << 63) - 1


class TokenOutOfRange(InvalidArgument):
    """The token does not fit PostgreSQL's ``BIGINT`` (at most 2**63 - 1)."""

    def __init__(self, token: int) -> None:
        super().__init__(f"token {token} is out of the store's range (0 to {_BIGINT_MAX})")
        self.token = token


@dataclass(frozen=True)
class FencedTransaction:
    """A transaction fenced by a token: the resource's mark equals the token, and no other
    fenced transaction on the resource can proceed, until it ends."""

    #: The connection the transaction runs on: do the protected writes through it.
    connection: "psycopg.Connection[Any]"
    #: psycopg's transaction (raise ``psycopg.Rollback`` inside the block to roll back).
    transaction: "psycopg.Transaction"
    #: The resource fenced.
    resource: str
    #: The token it is fenced by.
    token: int


def _sql_token(token: int) -> int:
    if not isinstance(token, int) or not 0 <= token <= _BIGINT_MAX:
        raise TokenOutOfRange(token)
    return token


def install(conn: "psycopg.Connection[Any]") -> None:
    """Create the ``tenure_fence`` table if it does not exist.

    Safe to call from many processes at once: concurrent ``CREATE TABLE IF NOT EXISTS`` can
    fail in PostgreSQL with a unique violation on the catalog, so the creation runs under a
    transaction-scoped advisory lock."""
    _require_idle(conn)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('tenure_fence'))")
        conn.execute(SCHEMA)


def current(conn: "psycopg.Connection[Any]", resource: str) -> Optional[int]:
    """The highest token accepted for ``resource``, if a write was ever fenced on it."""
    row = conn.execute(CURRENT, (resource,)).fetchone()
    return None if row is None else int(row[0])


@contextlib.contextmanager
def begin(
    conn: "psycopg.Connection[Any]", resource: str, token: int
) -> Iterator[FencedTransaction]:
    """Open a transaction on ``conn`` and fence it: raise ``resource``'s mark to ``token``,
    or raise :class:`~tenure.errors.StaleToken` (with the mark that refused it) and roll
    back if the mark is higher::

        with fence.begin(db, "nightly-billing", lead.token):
            db.execute("INSERT ...")     # the writes the token protects

    The block's writes commit together with the raised mark when it ends; an exception in it
    rolls everything back, the raised mark included. Until it ends, other fenced
    transactions on ``resource`` wait. ``conn`` must not be inside a transaction already
    (use an ``autocommit=True`` connection, or commit first); to fence a transaction of
    your own, call :func:`fence_in` inside it."""
    sql_token = _sql_token(token)
    _require_idle(conn)
    with conn.transaction() as tx:
        _raise(conn, resource, sql_token)
        yield FencedTransaction(conn, tx, resource, token)


def execute_fenced(
    conn: "psycopg.Connection[Any]",
    resource: str,
    token: int,
    sql: str,
    params: Optional[Sequence[Any]] = None,
) -> int:
    """Run one write (``sql`` with ``params``) fenced by ``token`` on ``resource``, in one
    transaction with the guard; returns the number of rows it changed."""
    with begin(conn, resource, token):
        return conn.execute(sql, params).rowcount


def fence_in(conn: "psycopg.Connection[Any]", resource: str, token: int) -> None:
    """Fence the transaction ``conn`` is in (one the application opened itself): raise
    ``resource``'s mark to ``token``, or raise :class:`~tenure.errors.StaleToken`. On that
    error, roll the transaction back. Call it before the writes it protects."""
    import psycopg

    status = conn.info.transaction_status
    # Inside a transaction block, or about to start one implicitly (psycopg's default mode);
    # in autocommit the raise would be a transaction of its own, its lock gone at once.
    in_transaction = status == psycopg.pq.TransactionStatus.INTRANS or (
        status == psycopg.pq.TransactionStatus.IDLE and not conn.autocommit
    )
    if not in_transaction:
        raise InvalidArgument(
            "fence_in needs a transaction to fence: call it inside `with conn.transaction():`"
        )
    _raise(conn, resource, _sql_token(token))


def _raise(conn: "psycopg.Connection[Any]", resource: str, sql_token: int) -> None:
    if conn.execute(RAISE, (resource, sql_token)).fetchone() is not None:
        return
    # Refused: we hold the row's lock now, so this is the mark that refused us, and it is
    # above our token.
    row = conn.execute(CURRENT, (resource,)).fetchone()
    assert row is not None and row[0] > sql_token, "a refused raise leaves a higher mark"
    raise StaleToken(int(row[0]))


def _require_idle(conn: "psycopg.Connection[Any]") -> None:
    import psycopg

    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise InvalidArgument(
            "the connection is inside a transaction: commit or roll it back first, or fence "
            "that transaction itself with fence_in()"
        )


def is_retryable(error: BaseException) -> bool:
    """Whether running the whole transaction again may succeed: PostgreSQL aborted it for a
    serialization failure or a deadlock. (A stale token never becomes fresh again.)"""
    return getattr(error, "sqlstate", None) in ("40001", "40P01")
