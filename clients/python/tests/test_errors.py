"""Typed errors, each provoked on the real cluster (or, for the client's own checks, before
anything is sent): bad TLS files, wrong and missing credentials, refusals of the policy and
of the state machine, and the exact-outcome rule of a write without a request id."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

import pytest

import tenure
from tenure.v1 import tenure_pb2 as pb
from cluster import Cluster, free_ports, issue_certs

Connect = Callable[..., tenure.Client]


def election(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_an_unreadable_ca_file_is_an_invalid_url(cluster: Cluster) -> None:
    with pytest.raises(tenure.InvalidUrl) as e:
        tenure.Client(f"tenure://{cluster.hosts()}?ca=/nonexistent/ca.pem")
    assert "cannot read the ca file" in e.value.why


def test_a_ca_file_without_a_certificate_is_an_invalid_url(cluster: Cluster, tmp_path: Path) -> None:
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("this is not a certificate\n")
    with pytest.raises(tenure.InvalidUrl) as e:
        tenure.Client(f"tenure://{cluster.hosts()}?ca={not_pem}")
    assert "holds no PEM certificate" in e.value.why
    # A key file that is a certificate is caught the same way.
    c = cluster.certs
    with pytest.raises(tenure.InvalidUrl, match="holds no PEM private key"):
        tenure.Client(
            f"tenure://{cluster.hosts()}?ca={c / 'ca.pem'}&cert={c / 'client-app.pem'}"
            f"&key={c / 'client-app.pem'}"
        )


def test_the_ca_of_another_cluster_is_a_tls_failure_at_once(cluster: Cluster, tmp_path: Path) -> None:
    other = issue_certs(cluster.binary, tmp_path / "other", "1", "app")
    url = (
        f"tenure://{cluster.hosts()}?ca={other / 'ca.pem'}"
        f"&cert={other / 'client-app.pem'}&key={other / 'client-app-key.pem'}"
    )
    with tenure.Client(url) as client:
        started = time.monotonic()
        with pytest.raises(tenure.TlsFailed) as e:
            client.leader("anything")
        # A matter of configuration: not retried for the request budget.
        assert time.monotonic() - started < 2.0
    assert "CERTIFICATE_VERIFY_FAILED" in str(e.value)


def test_a_wrong_token_is_refused_as_unauthenticated(cluster: Cluster, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.token"
    wrong.write_text(os.urandom(32).hex() + "\n")
    with tenure.Client(f"tenure://{cluster.hosts()}?ca={cluster.certs / 'ca.pem'}&token_file={wrong}") as client:
        with pytest.raises(tenure.AuthenticationFailed):
            client.campaign(election("wrong-token"), ttl=2.0)


def test_no_credentials_at_all_are_refused_as_unauthenticated(cluster: Cluster) -> None:
    with tenure.Client(f"tenure://{cluster.hosts()}?ca={cluster.certs / 'ca.pem'}") as client:
        with pytest.raises(tenure.AuthenticationFailed):
            client.leader("anything")


def test_a_token_file_that_is_not_one_token_is_an_invalid_url(cluster: Cluster, tmp_path: Path) -> None:
    two = tmp_path / "two.token"
    two.write_text("one two\n")
    with pytest.raises(tenure.InvalidUrl, match="must hold one token"):
        tenure.Client(f"tenure://{cluster.hosts()}?ca={cluster.certs / 'ca.pem'}&token_file={two}")


def test_the_right_token_works_and_the_environment_supplies_it(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENURE_BACKEND", f"tenure://{cluster.hosts()}")
    monkeypatch.setenv("TENURE_CA", str(cluster.certs / "ca.pem"))
    monkeypatch.setenv("TENURE_TOKEN_FILE", str(cluster.tokens["app"]))
    with tenure.Client() as client:
        assert client.url.endswith(f"?ca={cluster.certs / 'ca.pem'}&token_file={cluster.tokens['app']}")
        lead = client.campaign(election("token"), "by token", ttl=2.0)
        assert lead.is_valid()
        lead.resign()


def test_an_observer_may_read_but_not_campaign(cluster: Cluster, connect: Connect) -> None:
    e = election("observer")
    lead = connect().campaign(e, "app", ttl=2.0)
    viewer = connect(cluster.token_url("viewer"))
    assert viewer.leader(e).token == lead.token
    with pytest.raises(tenure.PermissionDenied):
        viewer.campaign(e, "viewer", ttl=2.0)
    lead.resign()


def test_a_principal_over_its_election_quota_is_refused(cluster: Cluster, connect: Connect) -> None:
    # `tiny` may have created one election that still exists.
    tiny = connect(cluster.token_url("tiny"))
    first = tiny.campaign(election("tiny/quota"), ttl=2.0)
    with pytest.raises(tenure.QuotaExceeded, match="elections"):
        tiny.campaign(election("tiny/quota"), ttl=2.0)
    first.resign()
    # Its election gone, it may create another.
    assert tiny.delete_election(first.election) is True
    tiny.campaign(election("tiny/quota"), ttl=2.0).resign()


def test_refusals_of_the_state_machine(connect: Connect) -> None:
    client = connect()
    with pytest.raises(tenure.UnknownElection):
        client.leader(election("never"))
    # Below the cluster's shortest TTL (100 ms): the cluster's refusal...
    with pytest.raises(tenure.InvalidArgument):
        client.campaign(election("short"), ttl=0.05)
    # ...and one the client makes itself: a TTL no longer than its drift margin.
    with pytest.raises(tenure.InvalidArgument, match="drift margin"):
        client.campaign(election("shorter"), ttl=0.01)
    with pytest.raises(tenure.InvalidArgument, match="drift bound"):
        client.campaign(election("drifty"), ttl=2.0, drift_ppm=200_000)

    e1, e2 = election("books"), election("other")
    lead = client.campaign(e1, "a", ttl=2.0)
    other = client.campaign(e2, "b", ttl=2.0)
    key = f"key/{e1}"
    lead.fenced_put(key, "v")
    with pytest.raises(tenure.TokenNotIssued):
        client.fenced_put(key, "v", e1, lead.token + 100)
    with pytest.raises(tenure.WrongElection):
        other.fenced_put(key, "w")
    with pytest.raises(tenure.ElectionInUse):
        client.delete_election(e1)
    # A request for a session that presents another secret changes nothing.
    forged = pb.PutRequest(
        key=key,
        value=b"forged",
        election=e1,
        token=lead.token,
        session_id=lead.session,
        request_seq=10_000_000,
        session_secret=os.urandom(16),
    )
    with pytest.raises(tenure.PermissionDenied):
        client.channel.call(lambda n: n.fenced_keys.Put(forged, **n.opts()))
    assert client.get(key).value == b"v"
    lead.resign()
    other.resign()
    assert client.delete_election(e1) is True


def test_a_write_without_a_request_id_is_never_repeated_once_its_outcome_is_unknown(
    cluster: Cluster,
) -> None:
    # Nothing listens on the port: the attempt breaks without an answer, so the write may
    # (for all the client knows) have been taken. It is not tried again: Indeterminate.
    (dead,) = free_ports(1)
    c = cluster.certs
    url = (
        f"tenure://127.0.0.1:{dead}?ca={c / 'ca.pem'}&cert={c / 'client-app.pem'}"
        f"&key={c / 'client-app-key.pem'}&discover=false"
    )
    with tenure.Client(url) as client:
        started = time.monotonic()
        with pytest.raises(tenure.Indeterminate):
            client.fenced_put("k", "v", "e", 1)
        assert time.monotonic() - started < 1.0


def test_a_restricted_client_that_reaches_no_leader_fails_with_its_hint(cluster: Cluster) -> None:
    leader = cluster.raft_leader()
    follower = next(i for i in cluster.ids() if i != leader)
    # Kept to one follower (discover=false): its hints point outside the set, so every
    # attempt is refused (definitely: nothing was applied) until the budget runs out.
    with tenure.Client(cluster.url("app", ids=[follower], extra="&discover=false")) as client:
        with pytest.raises(tenure.NotLeader) as e:
            client.leader("anything")
    assert e.value.leader_hint == cluster.client_addr(leader)
    assert e.value.retryable


def test_a_candidate_whose_session_ends_gets_session_lost(connect: Connect) -> None:
    e = election("lost")
    holder, waiter = connect(), connect()
    lead = holder.campaign(e, "h", ttl=2.0)
    candidate = waiter.join(e, "w", ttl=2.0)
    got: dict = {}

    def wait() -> None:
        try:
            got["lead"] = candidate.leadership(timeout=10)
        except BaseException as err:
            got["error"] = err

    t = threading.Thread(target=wait)
    t.start()
    # Its session is revoked behind its back (as an operator, or its own other half, may).
    waiter._revoke(candidate._held.session)
    t.join(10)
    assert isinstance(got.get("error"), tenure.SessionLost), got
    # A transfer to a session that is not queued in the election is refused.
    with pytest.raises(tenure.NotCandidate):
        lead.transfer(candidate.session)
    lead.resign()
