"""tenure.fence.postgres against a real PostgreSQL, started by the project's
scripts/services.sh with TLS (its certificate verified, name included) and a password, and
a real leadership of the test cluster: the story of DESIGN.md, written to a ledger table."""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, Iterator

import pytest

import tenure
from cluster import Cluster, issue_certs
from procs import run, spawn
from tenure.fence import postgres as fence
import psycopg  # the test extra installs it: never skipped

Connect = Callable[..., tenure.Client]
SERVICES_SH = Path(__file__).resolve().parents[3] / "scripts" / "services.sh"


@pytest.fixture(scope="module")
def postgres(cluster: Cluster) -> Iterator[str]:
    """A PostgreSQL of this module's own; its URL, password included."""
    base = Path(tempfile.mkdtemp(prefix="tenure-pg-"))
    # The server runs as the `postgres` user, which must reach its directory.
    base.chmod(0o755)
    certs = issue_certs(cluster.binary, base / "certs", "1", "app")
    password = secrets.token_hex(16)
    env = {
        **os.environ,
        "SVC_PASSWORD": password,
        "SVC_TLS_CA": str(certs / "ca.pem"),
        "SVC_TLS_CERT": str(certs / "node-1.pem"),
        "SVC_TLS_KEY": str(certs / "node-1-key.pem"),
    }
    try:
        printed, _ = run(
            ["bash", str(SERVICES_SH), "start-postgres", str(base / "pg"), str(os.getpid())],
            "scripts/services.sh start-postgres",
            env=env,
        )
        failure = ""
    except (RuntimeError, TimeoutError) as e:
        failure = str(e)
    if failure:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(
            f"PostgreSQL did not start (is it installed? `scripts/services.sh "
            f"install-postgres`): {failure}",
            pytrace=False,
        )
    url = printed.strip().splitlines()[-1]
    assert "sslmode=verify-full" in url, url
    url = url.replace("postgres://tenure@", f"postgres://tenure:{password}@", 1)
    try:
        yield url
    finally:
        try:
            run(["bash", str(SERVICES_SH), "stop-postgres", str(base / "pg")], "stop-postgres")
        finally:
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def db(postgres: str) -> Iterator["psycopg.Connection"]:
    with psycopg.connect(postgres, autocommit=True) as conn:
        yield conn


def test_the_connection_is_tls_with_a_password(postgres: str, db: "psycopg.Connection") -> None:
    assert db.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone() == (True,)
    plaintext = postgres.split("?")[0] + "?sslmode=disable"
    with pytest.raises(psycopg.OperationalError, match="no encryption"):
        psycopg.connect(plaintext, connect_timeout=5)
    wrong = postgres.replace("postgres://tenure:", "postgres://tenure:x", 1)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong, connect_timeout=5)


def test_a_replaced_leaders_late_write_is_refused_by_the_store(
    connect: Connect, db: "psycopg.Connection", postgres: str
) -> None:
    election = f"nightly-billing-{uuid.uuid4().hex[:8]}"
    fence.install(db)
    fence.install(db)  # idempotent
    db.execute(
        "CREATE TABLE IF NOT EXISTS ledger (day TEXT, election TEXT, total BIGINT, "
        "run_id TEXT, token BIGINT, PRIMARY KEY (day, election))"
    )
    a_client, b_client = connect(), connect()
    a = a_client.campaign(election, "a", ttl=1.0)
    with fence.begin(db, election, a.token) as tx:
        assert (tx.token, tx.resource) == (a.token, election)
        db.execute(
            "INSERT INTO ledger VALUES ('2026-11-29', %s, 1200, 'run-a', %s)",
            (election, a.token),
        )
    assert fence.current(db, election) == a.token

    # A freezes: its keepalives stop, its lease runs out, B is elected with a higher token.
    standby = b_client.join(election, "b", ttl=1.0)
    a.stop_keepalives()
    b = standby.leadership(timeout=10)
    assert b.token > a.token and not a.is_valid()

    # Until B writes, the store knows only A's token: the new leader raises the fence first.
    with psycopg.connect(postgres, autocommit=True) as b_db:
        with fence.begin(b_db, election, b.token):
            b_db.execute(
                "UPDATE ledger SET total = 1250, run_id = 'run-b', token = %s "
                "WHERE day = '2026-11-29' AND election = %s",
                (b.token, election),
            )

    # A wakes up and writes with its token: refused, nothing written.
    with pytest.raises(tenure.StaleToken) as stale:
        fence.execute_fenced(
            db,
            election,
            a.token,
            "UPDATE ledger SET total = 999, run_id = 'run-a' WHERE day = '2026-11-29' AND election = %s",
            (election,),
        )
    assert stale.value.current == b.token
    row = db.execute(
        "SELECT total, run_id, token FROM ledger WHERE election = %s", (election,)
    ).fetchone()
    assert row == (1250, "run-b", b.token)
    assert fence.current(db, election) == b.token
    # B writes on with the same token: only a lower one is stale.
    assert fence.execute_fenced(
        db, election, b.token, "UPDATE ledger SET total = 1300 WHERE election = %s", (election,)
    ) == 1
    b.resign()


def test_a_rolled_back_fenced_transaction_leaves_no_raised_mark(db: "psycopg.Connection") -> None:
    resource = f"rollback-{uuid.uuid4().hex[:8]}"
    fence.install(db)
    with fence.begin(db, resource, 5):
        pass
    with pytest.raises(RuntimeError):
        with fence.begin(db, resource, 9):
            raise RuntimeError("the job failed midway")
    assert fence.current(db, resource) == 5
    # psycopg's own way to roll back quietly.
    with fence.begin(db, resource, 7):
        raise psycopg.Rollback()
    assert fence.current(db, resource) == 5


def test_a_newer_leader_waits_for_an_older_ones_open_transaction(
    postgres: str, db: "psycopg.Connection"
) -> None:
    # The raise locks the row until the transaction ends: the newer leader's raise cannot
    # slip in between the older one's check and its write.
    resource = f"lock-{uuid.uuid4().hex[:8]}"
    fence.install(db)
    times: Dict[str, float] = {}
    older_in = threading.Event()
    release = threading.Event()

    def older() -> None:
        with psycopg.connect(postgres, autocommit=True) as conn:
            with fence.begin(conn, resource, 10):
                older_in.set()
                release.wait(10)
                times["older_commit"] = time.monotonic()

    t = threading.Thread(target=older)
    t.start()
    assert older_in.wait(10)
    threading.Timer(0.3, release.set).start()
    started = time.monotonic()
    with fence.begin(db, resource, 11):
        times["newer_in"] = time.monotonic()
    t.join(10)
    assert times["newer_in"] >= times["older_commit"], times
    assert times["newer_in"] - started >= 0.25
    assert fence.current(db, resource) == 11


def test_tokens_outside_bigint_and_misuse_are_refused(postgres: str, db: "psycopg.Connection") -> None:
    with pytest.raises(fence.TokenOutOfRange) as e:
        with fence.begin(db, "r", 1 << 63):
            pass
    assert isinstance(e.value, tenure.InvalidArgument)
    with pytest.raises(fence.TokenOutOfRange):
        with fence.begin(db, "r", -1):
            pass
    # A connection inside a transaction of its own would turn the fence into a savepoint
    # that commits with someone else's transaction: refused, with the way out.
    with psycopg.connect(postgres) as conn:  # not autocommit
        conn.execute("SELECT 1")
        with pytest.raises(tenure.InvalidArgument, match="inside a transaction"):
            with fence.begin(conn, "r", 1):
                pass
        # fence_in fences that transaction itself.
        fence.install(db)
        fence.fence_in(conn, f"in-{uuid.uuid4().hex[:8]}", 3)
        conn.rollback()
    with pytest.raises(tenure.InvalidArgument, match="needs a transaction"):
        fence.fence_in(db, "r", 1)  # autocommit: the raise would be a transaction alone
    assert fence.is_retryable(psycopg.errors.SerializationFailure())
    assert not fence.is_retryable(tenure.StaleToken(3))


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "close_books.py"
GUIDE = Path(__file__).resolve().parents[3] / "docs" / "PYTHON.md"


def test_the_guides_nightly_job_is_the_example_file() -> None:
    guide = GUIDE.read_text()
    assert "```python\n" + EXAMPLE.read_text() + "```\n" in guide, (
        "docs/PYTHON.md's nightly job differs from clients/python/examples/close_books.py"
    )


def test_the_nightly_job_closes_the_day_once_among_replicas(
    cluster: Cluster, postgres: str, db: "psycopg.Connection", tmp_path: Path
) -> None:
    # The guide's example, run as it would be: two replicas at once, each a process of its
    # own with its credentials from the environment, against the cluster and PostgreSQL.
    import datetime

    day = datetime.date.today().isoformat()
    db.execute("CREATE TABLE IF NOT EXISTS invoices (day TEXT, amount BIGINT)")
    db.execute("DELETE FROM invoices WHERE day = %s", (day,))
    db.execute("INSERT INTO invoices VALUES (%s, 700), (%s, 500)", (day, day))
    db.execute("DROP TABLE IF EXISTS closes")
    env = {
        **os.environ,
        "TENURE_BACKEND": f"tenure://{cluster.hosts()}",
        "TENURE_CA": str(cluster.certs / "ca.pem"),
        "TENURE_CERT": str(cluster.certs / "client-app.pem"),
        "TENURE_KEY": str(cluster.certs / "client-app-key.pem"),
        "BILLING_DB": postgres,
    }
    logs = [tmp_path / f"replica-{i}.log" for i in range(2)]
    replicas = [spawn([sys.executable, str(EXAMPLE)], log, env=env) for log in logs]
    try:
        codes = [r.wait(60) for r in replicas]
    finally:
        for r in replicas:
            r.kill()
    said = [log.read_text() for log in logs]
    assert codes == [0, 0], said
    closed = [s for s in said if f"closed {day}: 1200 with token" in s]
    again = [s for s in said if "already closed with token" in s]
    assert len(closed) == 1 and len(again) == 1, said
    rows = db.execute("SELECT run_id, total, token FROM closes").fetchall()
    token = int(closed[0].split("with token")[1].split()[0])
    assert rows == [(f"close-books/{day}", 1200, token)]
    # The fence's mark is the later leader's token: it raised it before finding the close.
    later = int(again[0].split("with token")[1].split()[0])
    assert later > token and fence.current(db, "nightly-billing") == later
