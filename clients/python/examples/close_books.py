"""close_books.py: run on every replica; exactly one closes the day."""
import datetime
import os
import socket
import sys

import psycopg
import tenure
from tenure.fence import postgres as fence

ELECTION = "nightly-billing"
DAY = datetime.date.today().isoformat()
# The idempotency key of this day's close: whoever runs it, however often, one close per day.
RUN_ID = f"close-books/{DAY}"


def close_books(db: psycopg.Connection, lead: tenure.Leadership) -> str:
    # One transaction: raise the fence to our token (or be refused), check, write, commit.
    # Until it commits, a newer leader's fenced transaction on this resource waits.
    with fence.begin(db, ELECTION, lead.token):
        # (A real service has migrations; here the leader makes its table, under the fence.)
        db.execute(
            "CREATE TABLE IF NOT EXISTS closes (run_id TEXT PRIMARY KEY, day TEXT, "
            "total BIGINT, token BIGINT)"
        )
        if db.execute("SELECT 1 FROM closes WHERE run_id = %s", (RUN_ID,)).fetchone():
            return "already closed"
        total = db.execute(
            "SELECT coalesce(sum(amount), 0) FROM invoices WHERE day = %s", (DAY,)
        ).fetchone()[0]
        db.execute(
            "INSERT INTO closes (run_id, day, total, token) VALUES (%s, %s, %s, %s)",
            (RUN_ID, DAY, total, lead.token),
        )
    return f"closed {DAY}: {total}"


def main() -> int:
    # TENURE_BACKEND, TENURE_CA, TENURE_CERT, TENURE_KEY come from the service's environment.
    with tenure.Client() as client, psycopg.connect(os.environ["BILLING_DB"], autocommit=True) as db:
        fence.install(db)
        try:
            # Waits (at most an hour) for this replica's turn; resigns when the block ends,
            # which hands the election to the next replica at once (it finds the day closed).
            with client.leadership(ELECTION, socket.gethostname(), ttl=10, timeout=3600) as lead:
                if not lead.is_valid():      # check before each step of real work
                    return 75
                print(close_books(db, lead), "with token", lead.token)
        except TimeoutError:
            print("another replica held the election all along")
        except tenure.StaleToken as stale:
            # Replaced while we worked (a pause, a partition): our write was refused, nothing
            # of it is in the database, and the leader with token stale.current goes on.
            print(f"replaced by token {stale.current}; nothing written", file=sys.stderr)
            return 75
    return 0


if __name__ == "__main__":
    sys.exit(main())
