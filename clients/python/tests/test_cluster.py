"""The client against a real 3-node TLS cluster (tests/cluster.py): one leader among several
clients, a killed holder replaced within its TTL, a paused holder's late write refused, the
cluster's Raft leader killed under a held leadership, exact outcomes of retried requests."""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest

import tenure
from tenure.v1 import tenure_pb2 as pb
from cluster import Cluster
from procs import Proc, spawn, wait_for_line

Connect = Callable[..., tenure.Client]
HERE = Path(__file__).resolve().parent


def election(name: str) -> str:
    """A name of its own for each test run: tokens never go down, and elections persist."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_one_leader_among_several_clients_in_turn(connect: Connect) -> None:
    e = election("one-leader")
    clients = [connect() for _ in range(3)]
    watcher = connect()
    lock = threading.Lock()
    leading: List[int] = []
    most_at_once = [0]
    order: List[tenure.Leadership] = []
    failures: List[BaseException] = []

    def replica(i: int) -> None:
        try:
            lead = clients[i].campaign(e, f"replica-{i}", ttl=2.0, timeout=20)
            with lead:
                with lock:
                    leading.append(i)
                    most_at_once[0] = max(most_at_once[0], len(leading))
                    order.append(lead)
                # Everyone who asks sees this replica lead, with its token.
                seen = watcher.leader(e)
                assert seen == tenure.LeaderInfo(lead.session, f"replica-{i}".encode(), lead.token)
                assert lead.is_valid()
                time.sleep(0.3)
                with lock:
                    leading.remove(i)
            assert lead.lost.is_set() and lead.lost_reason is tenure.Lost.RESIGNED
            assert not lead.is_valid()
        except BaseException as err:  # reported by the main thread
            failures.append(err)

    threads = [threading.Thread(target=replica, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not failures, failures
    assert len(order) == 3 and most_at_once[0] == 1
    tokens = [lead.token for lead in order]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3, tokens
    # After the last resignation nobody leads, and observing says so.
    assert watcher.leader(e) is None
    with watcher.observe(e) as changes:
        now = next(changes)
    assert now.leader is None and now.election == e


def test_observe_streams_every_change_in_order(connect: Connect) -> None:
    e = election("observe")
    a, b, watcher = connect(), connect(), connect()
    first = a.campaign(e, "a", ttl=2.0)
    events: List[tenure.LeaderEvent] = []
    with watcher.observe(e) as changes:
        events.append(next(changes))
        standby = b.join(e, "b", ttl=2.0)
        first.resign()
        second = standby.leadership(timeout=10)
        events.append(next(changes))
        second.resign()
        events.append(next(changes))
    leaders = [ev.leader.token if ev.leader else None for ev in events]
    assert leaders == [first.token, second.token, None]
    assert [ev.index for ev in events] == sorted({ev.index for ev in events})
    assert second.token > first.token


def start_holder(
    cluster: Cluster, tmp_path: Path, e: str, ttl: float, fate_sharing: bool
) -> Tuple[Proc, str]:
    """A holder of ``e`` in a process of its own (tests/holder.py); it and its line."""
    log = tmp_path / "holder.log"
    args = [sys.executable, str(HERE / "holder.py"), cluster.url("app"), e, str(ttl)]
    holder = spawn(args + ["1" if fate_sharing else "0"], log)
    try:
        return holder, wait_for_line(log, "token ", holder, timeout=20)
    except BaseException:
        holder.kill()
        raise


def test_a_killed_holder_is_replaced_within_its_ttl(
    cluster: Cluster, connect: Connect, tmp_path: Path
) -> None:
    e = election("killed")
    ttl = 2.0
    holder, said = start_holder(cluster, tmp_path, e, ttl, fate_sharing=False)
    try:
        held_token = int(said.split()[1])
        standby = connect().join(e, "standby", ttl=ttl)
        time.sleep(0.5)  # the holder renews meanwhile
        holder.kill()  # SIGKILL: no resign, no revoke, its connections closed by the kernel
        killed_at = time.monotonic()
        lead = standby.leadership(timeout=10)
        took = time.monotonic() - killed_at
    finally:
        holder.kill()
    print(f"killed holder (TTL {ttl}s) replaced after {took:.3f}s")
    assert lead.token > held_token
    # The session was not ended by the closed connection (no fate-sharing), but lived on
    # until its TTL ran out since its last renewal (at most TTL/4 before the kill).
    assert ttl * 0.5 <= took <= ttl + 0.5, took
    lead.resign()


def test_a_killed_fate_sharing_holder_is_replaced_at_once(
    cluster: Cluster, connect: Connect, tmp_path: Path
) -> None:
    e = election("killed-bound")
    ttl = 5.0
    holder, said = start_holder(cluster, tmp_path, e, ttl, fate_sharing=True)
    try:
        held_token = int(said.split()[1])
        standby = connect().join(e, "standby", ttl=ttl)
        time.sleep(0.3)
        holder.kill()
        killed_at = time.monotonic()
        lead = standby.leadership(timeout=10)
        took = time.monotonic() - killed_at
    finally:
        holder.kill()
    print(f"killed fate-sharing holder (TTL {ttl}s) replaced after {took:.3f}s")
    assert lead.token > held_token
    # The kernel closed the bound stream's connection; the cluster ended the session then.
    assert took < 1.0, took
    lead.resign()


def test_a_paused_holder_stops_believing_first_and_its_late_write_is_refused(
    connect: Connect,
) -> None:
    e = election("paused")
    key = f"books/{e}"
    a_client, b_client = connect(), connect()
    a = a_client.campaign(e, "a", ttl=1.0)
    a.fenced_put(key, "closed by a")
    standby = b_client.join(e, "b", ttl=1.0)
    got: Dict[str, object] = {}

    def wait_for_b() -> None:
        try:
            got["lead"] = standby.leadership(timeout=10)
            got["at"] = time.monotonic()
            # Asked of the clock now, not of the thread that sets `lost`.
            got["a_valid_when_b_led"] = a.is_valid()
        except BaseException as err:
            got["error"] = err

    t = threading.Thread(target=wait_for_b)
    t.start()
    a.stop_keepalives()  # as a frozen process: nothing renews the session any more
    stopped_at = time.monotonic()
    assert a.lost.wait(2.0), "the lease never ran out"
    lost_at = time.monotonic()
    assert a.lost_reason is tenure.Lost.EXPIRED
    t.join(10)
    assert "error" not in got, got.get("error")
    b = got["lead"]
    assert isinstance(b, tenure.Leadership) and b.token > a.token
    print(
        f"paused holder: lost its lease {lost_at - stopped_at:.3f}s after its keepalives "
        f"stopped, the standby led {got['at'] - stopped_at:.3f}s after"
    )
    # DESIGN rule 4: the holder stopped believing before anyone else was granted the
    # election, on this one clock: its lease ran out at most TTL - margin after the last
    # acknowledged renewal, the cluster expired it no sooner than TTL after receiving it.
    assert got["a_valid_when_b_led"] is False
    assert a.valid_until <= got["at"], (a.valid_until - stopped_at, got["at"] - stopped_at)
    assert not a.is_valid()
    # Woken late, the old leader writes with its token: the cluster knows a newer leader
    # exists (token-superseded) even before that leader's first write.
    with pytest.raises(tenure.StaleToken) as stale:
        a_client.fenced_put(key, "late write by a", e, a.token)
    assert stale.value.current == b.token
    b.fenced_put(key, "closed by b")
    with pytest.raises(tenure.StaleToken) as stale:
        a_client.fenced_put(key, "late write by a", e, a.token)
    assert stale.value.current == b.token
    # Through its leadership (stamped with its ended session) it is refused as well.
    with pytest.raises(tenure.SessionEnded):
        a.fenced_put(key, "late write by a")
    stored = b_client.get(key)
    assert stored is not None and (stored.value, stored.token) == (b"closed by b", b.token)
    b.resign()


def test_writes_go_on_when_the_raft_leader_is_killed(cluster: Cluster, connect: Connect) -> None:
    e = election("raft-leader-killed")
    key = f"progress/{e}"
    client = connect()
    ttl = 1.5
    lead = client.campaign(e, "writer", ttl=ttl)
    indexes = [lead.fenced_put(key, f"step {i}") for i in range(5)]
    raft_leader = cluster.raft_leader()
    cluster.kill(raft_leader)
    try:
        killed_at = time.monotonic()
        for i in range(5, 30):
            indexes.append(lead.fenced_put(key, f"step {i}"))
            assert lead.is_valid(), f"leadership lost at step {i}: {lead.lost_reason}"
            time.sleep(0.02)
        wrote_for = time.monotonic() - killed_at
        print(f"25 writes in {wrote_for:.3f}s after the Raft leader (node {raft_leader}) was killed")
        survivors = [i for i in cluster.ids() if i != raft_leader]
        new_leader = cluster.wait_for_leader(among=survivors)
        assert new_leader != raft_leader
        assert indexes == sorted(indexes) and len(set(indexes)) == len(indexes)
        stored = client.get(key)
        assert stored is not None and (stored.value, stored.token) == (b"step 29", lead.token)
        assert wrote_for < 5.0, wrote_for
        # Past two TTLs since the kill the leadership still holds: its keepalives moved to
        # the new Raft leader, which acknowledged them (an old lease would have run out).
        time.sleep(max(0.0, killed_at + 2 * ttl - time.monotonic()))
        assert not lead.lost.is_set() and lead.is_valid(), lead.lost_reason
        assert client.leader(e) == tenure.LeaderInfo(lead.session, b"writer", lead.token)
        lead.fenced_put(key, "after two TTLs")
    finally:
        cluster.restart(raft_leader)
    lead.resign()


def test_a_retried_request_is_applied_once(cluster: Cluster, connect: Connect) -> None:
    # What every retry of the client carries: the same (session, sequence number, secret).
    # Sent twice, the write is applied once and both answers are the first one's.
    e = election("exactly-once")
    key = f"once/{e}"
    client = connect()
    lead = client.campaign(e, "w", ttl=2.0)
    session = lead._session
    stamped = pb.PutRequest(
        key=key,
        value=b"first",
        election=e,
        token=lead.token,
        session_id=session.id,
        request_seq=client._seq(),
        session_secret=session.secret,
    )
    nodes = client.channel
    first = nodes.call(lambda n: n.fenced_keys.Put(stamped, **n.opts()))
    again = nodes.call(lambda n: n.fenced_keys.Put(stamped, **n.opts()))
    assert again.index == first.index
    assert client.get(key).index == first.index
    # A new request id is a new write.
    assert lead.fenced_put(key, "second") > first.index
    # A grant retried with its nonce returns the same session (and the secret is ours).
    nonce, secret = 0xC0FFEE ^ os.getpid(), os.urandom(16)
    grant = pb.GrantRequest(ttl_ms=2_000, request_nonce=nonce, session_secret=secret)
    g1 = nodes.call(lambda n: n.sessions.Grant(grant, **n.opts()))
    g2 = nodes.call(lambda n: n.sessions.Grant(grant, **n.opts()))
    assert g1.session_id == g2.session_id
    lead.resign()


def test_the_client_learns_the_members_from_one_address(cluster: Cluster, connect: Connect) -> None:
    follower = next(i for i in cluster.ids() if i != cluster.raft_leader())
    client = connect(cluster.url("app", ids=[follower]))
    lead = client.campaign(election("one-address"), "x", ttl=2.0)
    assert sorted(client.channel.addrs()) == sorted(cluster.client_addr(i) for i in cluster.ids())
    lead.resign()


def test_the_leadership_context_manager_resigns_on_exit(connect: Connect) -> None:
    e = election("with")
    client, other = connect(), connect()
    with client.leadership(e, "ctx", ttl=2.0) as lead:
        assert lead.is_valid() and other.leader(e).token == lead.token
        token = lead.token
    assert lead.lost_reason is tenure.Lost.RESIGNED
    assert other.leader(e) is None
    with pytest.raises(RuntimeError):
        with client.leadership(e, "ctx", ttl=2.0) as again:
            assert again.token > token
            raise RuntimeError("the job failed")
    assert other.leader(e) is None


def test_a_campaign_that_times_out_withdraws_its_candidacy(connect: Connect) -> None:
    e = election("timeout")
    holder, waiter, other = connect(), connect(), connect()
    lead = holder.campaign(e, "h", ttl=2.0)
    with pytest.raises(TimeoutError):
        waiter.campaign(e, "w", ttl=2.0, timeout=0.5)
    lead.resign()
    # The withdrawn candidate does not lead after the holder resigns: nobody does.
    assert other.leader(e) is None


def test_a_leader_hands_over_to_a_named_candidate(connect: Connect) -> None:
    e = election("transfer")
    a_client, b_client = connect(), connect()
    a = a_client.campaign(e, "a", ttl=2.0)
    b_candidate = b_client.join(e, "b", ttl=2.0)
    got: Dict[str, object] = {}
    t = threading.Thread(target=lambda: got.update(lead=b_candidate.leadership(timeout=10)))
    t.start()
    token = a.transfer(b_candidate.session)
    t.join(10)
    b = got["lead"]
    assert isinstance(b, tenure.Leadership) and b.token == token > a.token
    assert a.lost.wait(2.0) and a.lost_reason is tenure.Lost.REPLACED
    assert b_client.leader(e) == tenure.LeaderInfo(b.session, b"b", b.token)
    a.resign()  # leaves the queue it stayed in behind the new leader
    b.resign()
    assert b_client.leader(e) is None


def test_closing_a_client_gives_its_leadership_back_at_once(cluster: Cluster, connect: Connect) -> None:
    e = election("close")
    holder = tenure.Client(cluster.url("app"))
    lead = holder.campaign(e, "h", ttl=5.0)
    standby = connect().join(e, "s", ttl=5.0)
    got: Dict[str, object] = {}
    t = threading.Thread(target=lambda: got.update(lead=standby.leadership(timeout=10)))
    t.start()
    closed_at = time.monotonic()
    holder.close()  # revokes the session: no waiting for its TTL
    t.join(10)
    took = time.monotonic() - closed_at
    assert isinstance(got.get("lead"), tenure.Leadership) and got["lead"].token > lead.token
    assert took < 1.0, took
    assert lead.lost.wait(2.0) and not lead.is_valid()
    assert lead.lost_reason in (tenure.Lost.SESSION_ENDED, tenure.Lost.REPLACED)
    got["lead"].resign()
