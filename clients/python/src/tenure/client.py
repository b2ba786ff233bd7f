"""The client: sessions, elections and fenced keys of a tenure cluster, with the same
session, lease and retry rules as the Rust ``tenure`` crate (``lib.rs`` and
``backend/cluster.rs``).

Every request that changes state carries a request id: the next sequence number on its
session, or a random nonce for the grant that creates one. Every attempt of one request
carries the same id, and the cluster applies each id at most once (Raft dissertation §6.3),
so a request is retried across nodes and leader changes until its outcome is known; when
the budget runs out first, the answer is :class:`~tenure.errors.Indeterminate`.
"""

from __future__ import annotations

import contextlib
import enum
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Set, Tuple, Union

import grpc

from . import drift
from .channel import (
    ATTEMPT_TIMEOUT_S,
    REQUEST_BUDGET_S,
    RETRY_PAUSE_S,
    Attempted,
    LeaderChannel,
    Node,
)
from .errors import (
    Error,
    InvalidArgument,
    NotCandidate,
    SessionEnded,
    SessionLost,
    from_rpc_error,
)
from .session import Session
from .url import backend_url
from .v1 import tenure_pb2 as pb

#: How long a join waits on the cluster for its campaign to be answered: the call answers
#: only when the candidate leads, so a candidate still queued looks like a timeout.
QUEUED_WAIT_S = 0.2
#: Longest pause between attempts to reopen a broken observe stream.
REOPEN_PAUSE_MAX_S = 1.0
#: Length of a session secret: 128 bits from the operating system's CSPRNG.
SESSION_SECRET_BYTES = 16
#: The TTL of a session when the caller names none (the Rust ``CampaignOptions`` default).
DEFAULT_TTL_S = 10.0

Bytes = Union[bytes, str]


def _bytes(value: Bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _grant_nonce() -> int:
    """A random non-zero nonce for a grant request, so that its retries return the same
    session."""
    while True:
        nonce = secrets.randbits(64)
        if nonce:
            return nonce


@dataclass(frozen=True)
class LeaderInfo:
    """Who leads an election."""

    #: The leader's session id (what :meth:`Leadership.transfer` takes).
    session: int
    #: The value the leader campaigned with (its address, its name, ...).
    value: bytes
    #: The leader's fencing token.
    token: int


@dataclass(frozen=True)
class LeaderEvent:
    """A change of leader, as :meth:`Client.observe` streams it."""

    #: The election that changed.
    election: str
    #: The new leader; ``None`` when nobody leads.
    leader: Optional[LeaderInfo]
    #: Position (log index) of the change; strictly increasing along a stream.
    index: int


@dataclass(frozen=True)
class FencedValue:
    """A fenced key's stored value, as :meth:`Client.get` reads it."""

    #: The value.
    value: bytes
    #: The election whose token guarded the last accepted write; the key belongs to it.
    election: str
    #: The highest token accepted for the key.
    token: int
    #: The position (log index) of the write that stored it.
    index: int


class Lost(enum.Enum):
    """Why a :class:`Leadership` can no longer be trusted."""

    #: The lease ran out on this process's clock: no keepalive was acknowledged in time.
    EXPIRED = "the lease ran out before a keepalive was acknowledged"
    #: The cluster said the session is gone (expired or revoked), or it was given up.
    SESSION_ENDED = "the session expired or was revoked"
    #: Another leader (or none) was observed in the election.
    REPLACED = "another leader was observed"
    #: This process resigned (or handed leadership on).
    RESIGNED = "resigned"


def _info(leader: pb.LeaderInfo) -> LeaderInfo:
    return LeaderInfo(session=leader.session_id, value=leader.value, token=leader.token)


class _NoEvent(grpc.RpcError):
    """An observe stream that ended before its first event: no answer, as a transport error
    is (no reason; the request may be tried at another node)."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "the observe stream ended before its first event"

    def initial_metadata(self) -> Tuple[()]:
        return ()

    def trailing_metadata(self) -> Tuple[()]:
        return ()


class Client:
    """A handle to one tenure cluster. Thread-safe; one per process is enough.

    ``url`` is ``tenure://HOST:PORT[,HOST:PORT...][?ca=FILE&cert=FILE&key=FILE]
    [&token_file=FILE][&discover=false]``; without one, ``$TENURE_BACKEND`` (else
    ``tenure://127.0.0.1:8001``). A URL without a query takes its TLS files and token from
    the keyword arguments, else from ``$TENURE_CA``, ``$TENURE_CERT``, ``$TENURE_KEY`` and
    ``$TENURE_TOKEN_FILE``. Nothing is dialed yet; the files are read now
    (:class:`~tenure.errors.InvalidUrl` if one cannot be).
    """

    def __init__(
        self,
        url: Optional[str] = None,
        *,
        ca: Optional[str] = None,
        cert: Optional[str] = None,
        key: Optional[str] = None,
        token_file: Optional[str] = None,
    ):
        self.url = backend_url(url, ca=ca, cert=cert, key=key, token_file=token_file)
        self._nodes = LeaderChannel(self.url)
        self._lock = threading.Lock()
        # Sequence numbers of this client's requests on its sessions (one counter for all
        # of them, so numbers are unique on each): every attempt of one request carries the
        # same number, and the cluster applies it at most once.
        self._next_seq = 1
        # Sessions granted and not yet given back, revoked by close().
        self._held: Set[_Held] = set()
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Give back every session this client still holds (keepalives stopped, sessions
        revoked: their candidacies end and their leaderships pass on at once), then close
        the connections. A session that cannot be revoked expires after its TTL."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            held = list(self._held)
        for h in held:
            h.release()
        self._nodes.close()

    @property
    def channel(self) -> LeaderChannel:
        """The leader-following channel, for callers that speak ``tenure.v1`` themselves."""
        return self._nodes

    def _seq(self) -> int:
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            return seq

    # -- elections --------------------------------------------------------------------------

    def campaign(
        self,
        election: str,
        value: Bytes = b"",
        *,
        ttl: float = DEFAULT_TTL_S,
        drift_ppm: int = drift.DEFAULT_DRIFT_PPM,
        fate_sharing: bool = False,
        timeout: Optional[float] = None,
    ) -> "Leadership":
        """Campaign in ``election`` with ``value`` and wait until this candidate leads.

        ``ttl`` (seconds, whole milliseconds) is the session's time to live: how long after
        its last renewal a silent holder keeps the election. ``drift_ppm`` bounds how much
        clock rates may differ between this process and the cluster (default 1 %); it sizes
        the lease margin. ``fate_sharing`` ends the session the moment this process's
        connection closes (see :meth:`join`). With ``timeout`` (seconds), a candidate that
        does not lead by then is withdrawn and ``TimeoutError`` is raised.
        """
        candidate = self.join(
            election, value, ttl=ttl, drift_ppm=drift_ppm, fate_sharing=fate_sharing
        )
        return candidate.leadership(timeout=timeout)

    def join(
        self,
        election: str,
        value: Bytes = b"",
        *,
        ttl: float = DEFAULT_TTL_S,
        drift_ppm: int = drift.DEFAULT_DRIFT_PPM,
        fate_sharing: bool = False,
    ) -> "Candidate":
        """Grant a session and join ``election``'s queue without waiting to lead.

        A session is granted with a secret and a nonce drawn here, and a background thread
        keeps it alive over a ``KeepAlive`` stream (a request every TTL/4). With
        ``fate_sharing``, every keepalive binds the session to its stream: when this process
        exits (a crash, ``kill -9``), its kernel closes the connection and the cluster ends
        the session at once, so the next candidate leads within milliseconds instead of a
        TTL later. In return the library never closes that connection while the session may
        be believed in, and gives the session up for good when its keepalives stop or its
        lease runs out. Only over direct connections: a proxy or NAT that closes connections
        on its own would end the session of a live holder.
        """
        if not 0 <= drift_ppm <= drift.MAX_DRIFT_PPM:
            raise InvalidArgument(
                f"drift bound {drift_ppm} ppm is outside 0 to {drift.MAX_DRIFT_PPM} ppm"
            )
        ttl_ms = round(ttl * 1_000)
        if ttl_ms <= 0:
            raise InvalidArgument(f"ttl {ttl}s is not positive")
        margin_ms = drift.holder_margin_ms(ttl_ms, drift_ppm)
        if margin_ms >= ttl_ms:
            raise InvalidArgument(
                f"ttl {ttl_ms} ms is not longer than its drift margin {margin_ms} ms"
            )
        value = _bytes(value)
        if self._closed:
            raise Error("the client is closed")
        sent = time.monotonic()
        session_id, granted_ms, secret = self._grant(ttl_ms)
        session = Session(session_id, granted_ms, margin_ms, sent, fate_sharing, secret)
        held = _Held(self, session)
        with self._lock:
            if self._closed:
                raise Error("the client is closed")
            self._held.add(held)
        session.start_keepalives(self._nodes)
        try:
            # The campaign call answers once the session leads, which is not waited for
            # here: a short first attempt records the candidacy (and says whether it leads
            # already); the wait retries the same call, which keeps the candidate's place.
            token = self._campaign(election, session, value, time.monotonic() + QUEUED_WAIT_S)
        except BaseException:
            held.release()
            raise
        return Candidate(self, held, election, value, token)

    @contextlib.contextmanager
    def leadership(
        self,
        election: str,
        value: Bytes = b"",
        *,
        ttl: float = DEFAULT_TTL_S,
        drift_ppm: int = drift.DEFAULT_DRIFT_PPM,
        fate_sharing: bool = False,
        timeout: Optional[float] = None,
    ) -> Iterator["Leadership"]:
        """``with client.leadership("nightly", ttl=10) as lead:`` campaigns, yields the
        :class:`Leadership` (``lead.token``, ``lead.lost``) and resigns on exit."""
        lead = self.campaign(
            election,
            value,
            ttl=ttl,
            drift_ppm=drift_ppm,
            fate_sharing=fate_sharing,
            timeout=timeout,
        )
        with lead:
            yield lead

    def leader(self, election: str) -> Optional[LeaderInfo]:
        """Who leads ``election`` now; ``None`` when nobody does.
        :class:`~tenure.errors.UnknownElection` if nobody ever campaigned in it."""
        request = pb.LeaderRequest(election=election)
        answer = self._nodes.call(lambda n: n.elections.Leader(request, **n.opts()))
        return _info(answer.leader) if answer.HasField("leader") else None

    def observe(self, election: str) -> "Observer":
        """Every change of ``election``'s leader, starting with the current one, as an
        iterator (close it, or use it as a context manager, to stop). A stream whose node
        fails is reopened at another node; changes that happen while no stream is open are
        summarized by the leader at reopening. :class:`~tenure.errors.UnknownElection` if
        nobody ever campaigned in it."""
        return Observer(self, election)

    def delete_election(self, election: str) -> bool:
        """Remove ``election``, which must have no candidates
        (:class:`~tenure.errors.ElectionInUse` otherwise); whether it existed. Its tokens
        never come back: an election created later under the same name starts above them."""
        request = pb.DeleteElectionRequest(election=election)
        return self._nodes.call(lambda n: n.elections.Delete(request, **n.opts())).existed

    # -- fenced keys ------------------------------------------------------------------------

    def get(self, key: str) -> Optional[FencedValue]:
        """The value stored at the fenced key ``key``, or ``None`` if nothing was ever
        written there (a linearizable read at the leader)."""
        request = pb.GetRequest(key=key)
        answer = self._nodes.call(lambda n: n.fenced_keys.Get(request, **n.opts()))
        if not answer.HasField("value"):
            return None
        v = answer.value
        return FencedValue(value=v.value, election=v.election, token=v.token, index=v.index)

    def fenced_put(self, key: str, value: Bytes, election: str, token: int) -> int:
        """Write ``value`` at ``key`` with ``election``'s fencing ``token``; returns the
        write's position (log index). Refused atomically, changing nothing, with
        :class:`~tenure.errors.StaleToken` when the token is below the highest the key
        accepted or below the election's current token, :class:`~tenure.errors.TokenNotIssued`
        for a token the election never handed out, :class:`~tenure.errors.WrongElection` when
        the key belongs to another election.

        This write carries no request id, so it is retried only while the cluster says it
        did not take effect: a write whose outcome is unknown fails with
        :class:`~tenure.errors.Indeterminate`. :meth:`Leadership.fenced_put` writes with the
        leader's session and is retried safely until its outcome is known."""
        return self._fenced_put(key, _bytes(value), election, token, None)

    def fenced_delete(self, key: str, election: str, token: int) -> bool:
        """Remove ``key``, fenced like :meth:`fenced_put`; whether it existed."""
        return self._fenced_delete(key, election, token, None)

    # -- the requests, stamped --------------------------------------------------------------

    def _grant(self, ttl_ms: int) -> Tuple[int, int, bytes]:
        nonce = _grant_nonce()
        # The secret is drawn here, not by the server, so that every retry of this grant
        # (same nonce) presents the same one and the session it returns is ours.
        secret = secrets.token_bytes(SESSION_SECRET_BYTES)
        request = pb.GrantRequest(ttl_ms=ttl_ms, request_nonce=nonce, session_secret=secret)
        answer = self._nodes.call(lambda n: n.sessions.Grant(request, **n.opts()))
        return answer.session_id, answer.ttl_ms, secret

    def _revoke(self, session: Session) -> None:
        request = pb.RevokeRequest(
            session_id=session.id, request_seq=self._seq(), session_secret=session.secret
        )
        try:
            self._nodes.call(lambda n: n.sessions.Revoke(request, **n.opts()))
        except (SessionLost, SessionEnded):
            # A retry of a revoke that took effect finds the session gone (its results
            # went with it): the same end state.
            pass

    def _resign(self, election: str, session: Session) -> None:
        request = pb.ResignRequest(
            election=election,
            session_id=session.id,
            request_seq=self._seq(),
            session_secret=session.secret,
        )
        try:
            self._nodes.call(lambda n: n.elections.Resign(request, **n.opts()))
        except (NotCandidate, SessionLost, SessionEnded):
            # A retried resign that already took effect, or a session already gone.
            pass

    def _transfer(self, election: str, session: Session, to: int) -> int:
        request = pb.TransferRequest(
            election=election,
            from_session_id=session.id,
            to_session_id=to,
            request_seq=self._seq(),
            from_session_secret=session.secret,
        )
        return self._nodes.call(lambda n: n.elections.Transfer(request, **n.opts())).token

    def _campaign(
        self, election: str, session: Session, value: bytes, deadline: Optional[float]
    ) -> Optional[int]:
        """Join the queue (idempotent: a retried campaign keeps its place) and wait until
        the session leads; its token. ``None`` when ``deadline`` (monotonic) passes first.
        No timeout on the wait itself: a node that dies breaks the call, which is then
        retried at another node."""
        request_seq = self._seq()
        unanswered_since: Optional[float] = None
        wake = threading.Event()
        session.on_end(wake.set)
        while True:
            self._nodes.learn_members()
            i = self._nodes.guess()
            node = self._nodes.node_at(i)
            request = pb.CampaignRequest(
                election=election,
                session_id=session.id,
                value=value,
                request_seq=request_seq,
                session_secret=session.secret,
            )
            try:
                call = node.elections.Campaign.future(request, metadata=node.metadata)
            except ValueError:
                # grpc's answer to a call on a closed channel.
                self._nodes.check_open()
                raise
            call.add_done_callback(lambda _: wake.set())
            try:
                while not call.done() and not session.ended:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        break
                    wake.wait(remaining)
                    wake.clear()
            finally:
                if not call.done():
                    # Cancelling the call does not withdraw the candidacy (the cluster keeps
                    # it queued); only a revoke or resign does.
                    call.cancel()
            if session.ended:
                raise SessionLost()
            if not call.done() or call.cancelled():
                return None
            try:
                return call.result().token
            except grpc.RpcError as err:
                failure = err
            since = unanswered_since = unanswered_since or time.monotonic()
            attempted = self._nodes.note_failure(i, failure)
            if attempted is Attempted.ANSWER or time.monotonic() - since > REQUEST_BUDGET_S * 4:
                error = from_rpc_error(failure)
                if isinstance(error, (SessionLost, SessionEnded)):
                    # The session ended while it waited: whether an earlier attempt queued
                    # it no longer matters, the candidacy went with the session. The answer
                    # is the same whether the cluster or the keepalives said so first.
                    session.end()
                    raise SessionLost(str(error)) from None
                raise error from None
            if deadline is not None and time.monotonic() + RETRY_PAUSE_S >= deadline:
                return None
            time.sleep(RETRY_PAUSE_S)

    def _open_observe(self, election: str) -> Tuple[Any, pb.LeaderEvent]:
        """An observe stream (opened at the node believed to lead, retried across nodes)
        and its first event. The server answers once it has read the current leader
        through the log, so an error (unknown election, not leader) arrives here."""
        request = pb.ObserveRequest(election=election)

        def attempt(node: Node) -> Tuple[Any, pb.LeaderEvent]:
            call = node.elections.Observe(request, metadata=node.metadata)
            # The stream lives on, so it has no deadline; its first event has one.
            timer = threading.Timer(ATTEMPT_TIMEOUT_S, call.cancel)
            timer.daemon = True
            timer.start()
            try:
                first = next(call)
            except StopIteration:
                raise _NoEvent() from None
            finally:
                timer.cancel()
            return call, first

        return self._nodes.call(attempt)

    def _fenced_put(
        self, key: str, value: bytes, election: str, token: int, session: Optional[Session]
    ) -> int:
        request = pb.PutRequest(key=key, value=value, election=election, token=token)
        if session is None:
            return self._nodes.call_once(lambda n: n.fenced_keys.Put(request, **n.opts())).index
        request.session_id = session.id
        request.request_seq = self._seq()
        request.session_secret = session.secret
        return self._nodes.call(lambda n: n.fenced_keys.Put(request, **n.opts())).index

    def _fenced_delete(
        self, key: str, election: str, token: int, session: Optional[Session]
    ) -> bool:
        request = pb.DeleteKeyRequest(key=key, election=election, token=token)
        if session is None:
            return self._nodes.call_once(
                lambda n: n.fenced_keys.Delete(request, **n.opts())
            ).existed
        request.session_id = session.id
        request.request_seq = self._seq()
        request.session_secret = session.secret
        return self._nodes.call(lambda n: n.fenced_keys.Delete(request, **n.opts())).existed


class _Held:
    """A session of a client and its keepalives, given back by :meth:`release`."""

    def __init__(self, client: Client, session: Session):
        self.client = client
        self.session = session

    def release(self) -> None:
        """Stop the keepalives and revoke the session (best effort: a session that cannot
        be revoked expires after its TTL)."""
        with self.client._lock:
            if self not in self.client._held:
                return
            self.client._held.discard(self)
        ended = self.session.ended
        self.session.stop_keepalives()
        if not ended:
            try:
                self.client._revoke(self.session)
            except Error:
                return
        self.session.end()

    def revoke_in_background(self) -> None:
        """Revoke the session from a thread of its own, whatever the holder believes (a
        fate-sharing session given up is ended here, but the cluster still holds it)."""

        def revoke() -> None:
            self.forget()
            try:
                self.client._revoke(self.session)
            except Error:
                pass  # It expires after its TTL.

        threading.Thread(target=revoke, name=f"tenure-revoke-{self.session.id}", daemon=True).start()

    def forget(self) -> None:
        """The session was given back some other way (resigned and revoked)."""
        with self.client._lock:
            self.client._held.discard(self)


class Candidate:
    """A queued candidate: its session is kept alive while it waits for its turn to lead.
    :meth:`withdraw` (or leaving its ``with`` block without leading) revokes the session,
    which takes it out of the queue."""

    def __init__(
        self,
        client: Client,
        held: _Held,
        election: str,
        value: bytes,
        token: Optional[int],
    ):
        self._client = client
        self._held = held
        self.election = election
        self.value = value
        # Set when the queueing call already answered that this candidate leads.
        self._token = token
        self._promoted = False

    @property
    def session(self) -> int:
        """This candidate's session id, which a leader names in :meth:`Leadership.transfer`."""
        return self._held.session.id

    @property
    def valid_until(self) -> float:
        """Until when the session is known alive, on ``time.monotonic()``'s clock."""
        return self._held.session.valid_until

    def leadership(self, timeout: Optional[float] = None) -> "Leadership":
        """Wait until this candidate leads. :class:`~tenure.errors.SessionLost` if its
        session ends first; with ``timeout`` (seconds), ``TimeoutError`` once it passes.
        Either way, and on any other failure, the candidate is withdrawn."""
        session = self._held.session
        token = self._token
        if token is None:
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                token = self._client._campaign(self.election, session, self.value, deadline)
            except BaseException:
                self.withdraw()
                raise
            if token is None:
                self.withdraw()
                raise TimeoutError(
                    f"not the leader of {self.election!r} within {timeout}s; the candidacy "
                    "was withdrawn"
                )
        self._promoted = True
        return Leadership(self._client, self._held, self.election, self.value, token)

    def withdraw(self) -> None:
        """Leave the queue: stop the keepalives and revoke the session."""
        if not self._promoted:
            self._held.release()

    def __enter__(self) -> "Candidate":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.withdraw()


class Leadership:
    """Leadership of one election, with its fencing token.

    Valid until the lease runs out on this process's clock (send time of the last
    acknowledged keepalive + TTL - drift margin), the cluster ends the session, another
    leader is observed, or this process resigns: then ``lost`` (a ``threading.Event``) is
    set and stays set. Check :meth:`is_valid` before each step of work, or watch ``lost``,
    and send the token with every write so that the store can refuse a leader that was
    replaced while it was paused. As a context manager it resigns on exit.
    """

    def __init__(self, client: Client, held: _Held, election: str, value: bytes, token: int):
        self._client = client
        self._held = held
        self._session = held.session
        #: The election led.
        self.election = election
        #: The value this leader campaigned with.
        self.value = value
        self._token = token
        #: Set (for good) once this leadership can no longer be trusted; see ``lost_reason``.
        self.lost = threading.Event()
        self._lost_reason: Optional[Lost] = None
        self._replaced = False
        self._resigned = False
        self._observer: Optional[Observer] = None
        self._observer_closed = False
        self._lock = threading.Lock()
        threading.Thread(
            target=self._watch_lease, name=f"tenure-lease-{self.session}", daemon=True
        ).start()
        threading.Thread(
            target=self._watch_leader, name=f"tenure-observe-{self.session}", daemon=True
        ).start()

    @property
    def token(self) -> int:
        """The fencing token: strictly greater than every earlier leader's of this election."""
        return self._token

    @property
    def session(self) -> int:
        """This leader's session id."""
        return self._session.id

    @property
    def valid_until(self) -> float:
        """Until when this leadership may be trusted, on ``time.monotonic()``'s clock (send
        time of the last acknowledged keepalive + TTL - drift margin). Later renewals move it
        forward; it does not account for a session ended or a leader replaced, which
        :meth:`is_valid` does."""
        return self._session.valid_until

    @property
    def lost_reason(self) -> Optional[Lost]:
        """Why ``lost`` was set, or ``None`` while it is not."""
        return self._lost_reason

    def is_valid(self) -> bool:
        """Whether this process may still act as leader now."""
        return not self.lost.is_set() and self._check() is None

    def _check(self) -> Optional[Lost]:
        s = self._session
        with s.changed:
            if self._resigned:
                return Lost.RESIGNED
            if s.ended:
                return Lost.SESSION_ENDED
            if self._replaced:
                return Lost.REPLACED
            if time.monotonic() >= s.valid_until:
                return Lost.EXPIRED
            return None

    def _watch_lease(self) -> None:
        s = self._session
        with s.changed:
            while True:
                why = self._check()
                if why is not None:
                    break
                s.changed.wait(s.valid_until - time.monotonic())
        self._lose(why)

    def _lose(self, why: Lost) -> None:
        with self._lock:
            if self.lost.is_set():
                return
            self._lost_reason = why
            self.lost.set()
        self._close_observer()

    def _watch_leader(self) -> None:
        """Watch the election; note when someone else (or nobody) is seen to lead."""
        try:
            observer = self._client.observe(self.election)
        except Error:
            return
        with self._lock:
            if self._observer_closed:
                observer.close()
                return
            self._observer = observer
        try:
            for event in observer:
                leader = event.leader
                if leader is None or leader.session != self.session or leader.token != self.token:
                    with self._session.changed:
                        self._replaced = True
                        self._session.changed.notify_all()
                    return
        except Error:
            return

    def _close_observer(self) -> None:
        with self._lock:
            self._observer_closed = True
            observer = self._observer
        if observer is not None:
            observer.close()

    def resign(self) -> None:
        """Give up leadership: the next candidate leads at once. Ends the session too.
        ``lost`` is set (``Lost.RESIGNED``) before the cluster is asked."""
        with self._session.changed:
            already = self._resigned
            self._resigned = True
            self._session.changed.notify_all()
        if already:
            return
        self._lose(Lost.RESIGNED)
        self._session.stop_keepalives()
        self._client._resign(self.election, self._session)
        self._client._revoke(self._session)
        self._session.end()
        self._held.forget()

    def transfer(self, to: int) -> int:
        """Hand leadership to the queued candidate with session ``to`` (see
        :attr:`Candidate.session`); returns its token. This leadership is then lost
        (``Lost.REPLACED``); the session stays queued behind the new leader until resigned."""
        token = self._client._transfer(self.election, self._session, to)
        if to != self.session:
            with self._session.changed:
                self._replaced = True
                self._session.changed.notify_all()
        return token

    def stop_keepalives(self) -> None:
        """Stop renewing the session, as a frozen or crashed holder would: the lease runs out
        at :attr:`valid_until` and the cluster expires the session after its TTL. A
        fate-sharing session is given up instead, as a crashed holder's would end: this
        leadership is lost at once, then the session is revoked in the background. For tests
        and fault drills."""
        give_up = self._session.bound and not self._session.ended
        self._session.stop_keepalives()
        if give_up:
            self._held.revoke_in_background()

    def fenced_put(self, key: str, value: Bytes) -> int:
        """Write ``value`` at the fenced key ``key`` with this leadership's election and
        token, as :meth:`Client.fenced_put` does; returns the write's position (log index).
        The write carries a request id on this leader's session, so it is retried across
        nodes and leader changes until its outcome is known, and applied at most once."""
        return self._client._fenced_put(key, _bytes(value), self.election, self._token, self._session)

    def fenced_delete(self, key: str) -> bool:
        """Remove a fenced key with this leadership's token (retried safely on its session,
        as :meth:`fenced_put`); whether it existed."""
        return self._client._fenced_delete(key, self.election, self._token, self._session)

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.resign()
            return
        # Leaving on an error: resign all the same, without hiding that error.
        try:
            self.resign()
        except Error:
            pass

    def __repr__(self) -> str:
        state = "valid" if self.is_valid() else f"lost: {self._lost_reason or self._check()}"
        return (
            f"Leadership(election={self.election!r}, token={self._token}, "
            f"session={self.session}, {state})"
        )


class Observer:
    """The changes of leader of one election (see :meth:`Client.observe`): an iterator of
    :class:`LeaderEvent`, ended by :meth:`close` (from any thread)."""

    def __init__(self, client: Client, election: str):
        self._client = client
        self.election = election
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._call, first = client._open_observe(election)
        self._pending: Optional[pb.LeaderEvent] = first
        # Events already handed out, by index: a reopened stream starts with the current
        # leader, which may be one already seen.
        self._after = 0

    def __iter__(self) -> "Observer":
        return self

    def __next__(self) -> LeaderEvent:
        while True:
            if self._closed.is_set():
                raise StopIteration
            event, self._pending = self._pending, None
            if event is None:
                try:
                    event = next(self._call)
                except (StopIteration, grpc.RpcError):
                    # The stream broke or the server ended it: reopen it elsewhere.
                    self._reopen()
                    continue
            if event.index <= self._after:
                continue
            self._after = event.index
            return LeaderEvent(
                election=event.election,
                leader=_info(event.leader) if event.HasField("leader") else None,
                index=event.index,
            )

    def _reopen(self) -> None:
        """Reopen the stream at another node, backing off while the cluster stays out of
        reach so that a long outage costs next to nothing."""
        pause = RETRY_PAUSE_S
        while True:
            if self._closed.is_set():
                raise StopIteration
            try:
                call, first = self._client._open_observe(self.election)
            except Error as e:
                if not e.retryable:
                    self.close()
                    raise
                self._closed.wait(pause)
                pause = min(pause * 2, REOPEN_PAUSE_MAX_S)
                continue
            with self._lock:
                if self._closed.is_set():
                    call.cancel()
                    raise StopIteration
                self._call = call
            self._pending = first
            return

    def close(self) -> None:
        """End the stream; iteration stops."""
        with self._lock:
            self._closed.set()
            call = self._call
        call.cancel()

    def __enter__(self) -> "Observer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
