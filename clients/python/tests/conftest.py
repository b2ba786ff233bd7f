"""Fixtures: one real 3-node TLS cluster for the whole run (tests/cluster.py), clients of
it that are closed after each test, and the node logs attached to every failure."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Iterator, List

# grpc's C core logs every failed TLS handshake at INFO; the typed-error tests make some.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import pytest  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

import tenure  # noqa: E402
from cluster import Cluster  # noqa: E402

_CLUSTER: List[Cluster] = []


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    try:
        c = Cluster()
    except RuntimeError as e:
        pytest.fail(f"cannot start the test cluster: {e}", pytrace=False)
    _CLUSTER.append(c)
    try:
        yield c
    finally:
        _CLUSTER.remove(c)
        c.stop()


@pytest.fixture
def connect(cluster: Cluster) -> Iterator[Callable[..., tenure.Client]]:
    """``connect(url=None)``: a client of the cluster (as the `app` principal unless a URL
    says otherwise), closed when the test ends."""
    made: List[tenure.Client] = []

    def make(url: str = "") -> tenure.Client:
        client = tenure.Client(url or cluster.url("app"))
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and _CLUSTER:
        report.sections.append(("tenure node logs", _CLUSTER[0].log_tails()))
