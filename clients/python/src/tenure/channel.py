"""A gRPC channel to a tenure cluster that follows its leader: :class:`LeaderChannel`, a
port of the Rust ``tenure::channel``.

One channel per node; each call goes to the node believed to lead, following
``not-leader`` hints (``tenure-leader-addr``) and moving to the next node when one does not
answer, for a bounded time (:data:`REQUEST_BUDGET_S`). The URL need name only one member:
the set of nodes grows (up to :data:`NODE_ADDRS_MAX`) with every address a hint points at
and every member the cluster lists (the ``Members`` call, made before the first request and
again once a hint names an unknown node or a node stops answering). ``discover=false`` keeps
the channel to the URL's addresses.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

import grpc

from . import url as urls
from .errors import (
    ERROR_KEY,
    LEADER_ADDR_KEY,
    Error,
    Indeterminate,
    InvalidUrl,
    Reason,
    code_of,
    from_rpc_error,
    is_tls_configuration_failure,
    metadata_of,
)
from .v1 import tenure_pb2 as pb
from .v1 import tenure_pb2_grpc as rpc

#: Longest wait for one attempt at one node: a dead node on loopback refuses at once; this
#: bounds a node that accepted the request but cannot answer (one without a quorum).
ATTEMPT_TIMEOUT_S = 2.0
#: Pause between attempts, so that a cluster between leaders is not hammered.
RETRY_PAUSE_S = 0.05
#: How long one call keeps retrying across nodes before its error surfaces.
REQUEST_BUDGET_S = 5.0
#: Most node addresses one channel keeps: the URL's, those hints point at and those member
#: lists name. The cap stops a confused or hostile server from growing the set without end.
NODE_ADDRS_MAX = 64
#: Longest wait for a member list: it is a hint, never worth holding a request up long.
MEMBERS_TIMEOUT_S = 1.0
#: Least time between two attempts to learn the member list that both failed to get one.
MEMBERS_RETRY_PAUSE_S = 1.0
#: How many ``not-leader`` hints in a row a request follows without pausing.
REDIRECTS_AT_ONCE = 3
#: Longest pause grpc takes before it dials a node that refused again (its default grows to
#: two minutes, far too long for a member that restarts in a second).
RECONNECT_BACKOFF_MAX_MS = 1_000

T = TypeVar("T")


class Attempted(enum.Enum):
    """What an attempt's failure says about the request."""

    #: It definitely did not take effect (no leader yet, a transfer, a node that is not the
    #: leader and names none other): try again after a pause.
    RETRY = "retry"
    #: It definitely did not take effect, and the node named another as the leader: try
    #: there at once.
    REDIRECTED = "redirected"
    #: It may have taken effect (a timeout, a broken connection, ``indeterminate``): try
    #: again with the same request id to learn which.
    UNKNOWN = "unknown"
    #: An answer: stop.
    ANSWER = "answer"


# A gRPC code without a tenure reason that is an answer rather than a lost request: the
# server (or a proxy) looked at the request and refused it.
_DEFINITE_CODES = (
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
)


class Node:
    """One node: its address, its channel, the ``tenure.v1`` stubs over it, and the metadata
    every request carries (the bearer token, when the URL has one)."""

    def __init__(self, addr: str, channel: grpc.Channel, metadata: Tuple[Tuple[str, str], ...]):
        self.addr = addr
        self.channel = channel
        self.metadata = metadata
        self.sessions = rpc.SessionsStub(channel)
        self.elections = rpc.ElectionsStub(channel)
        self.fenced_keys = rpc.FencedKeysStub(channel)
        self.cluster = rpc.ClusterStub(channel)

    def opts(self, timeout: Optional[float] = ATTEMPT_TIMEOUT_S) -> Dict[str, Any]:
        """The keyword arguments of one call: its deadline and metadata."""
        return {"timeout": timeout, "metadata": self.metadata}


def _read(what: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"cannot read the {what} file {path!r}: {e.strerror or e}") from None


def _read_pem(what: str, path: str, marker: bytes) -> bytes:
    """Read a PEM file and check that it holds what it should: a file without it is an error
    here rather than a confusing handshake failure later."""
    data = _read(what, path)
    if marker not in data:
        raise ValueError(f"the {what} file {path!r} holds no PEM {marker.decode().lower()}")
    return data


def read_token(path: str) -> str:
    """The bearer token in a token file (what ``tenure token NAME`` printed): its one line,
    trimmed."""
    text = _read("token", path).decode("utf-8", "replace").strip()
    if not text or any(c.isspace() for c in text) or not text.isascii():
        raise ValueError(
            f"the token file {path!r} must hold one token (what `tenure token NAME` printed)"
        )
    return text


class _Dialer:
    """Makes the channel to one node address, with the URL's TLS files and bearer token."""

    def __init__(self, target: urls.ClusterUrl):
        self.metadata: Tuple[Tuple[str, str], ...] = ()
        if target.token_file is not None:
            self.metadata = (("authorization", f"Bearer {read_token(target.token_file)}"),)
        self.credentials: Optional[grpc.ChannelCredentials] = None
        if target.ca is not None:
            ca = _read_pem("ca", target.ca, b"CERTIFICATE")
            cert = key = None
            if target.identity is not None:
                cert = _read_pem("cert", target.identity[0], b"CERTIFICATE")
                key = _read_pem("key", target.identity[1], b"PRIVATE KEY")
            self.credentials = grpc.ssl_channel_credentials(ca, key, cert)

    def node(self, addr: str) -> Node:
        options = [
            # Each client has its own connections: closing one client (or the process
            # exiting) never closes another's, which fate-sharing sessions rely on.
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
        ]
        if self.credentials is not None:
            channel = grpc.secure_channel(addr, self.credentials, options=options)
        else:
            channel = grpc.insecure_channel(addr, options=options)
        return Node(addr, channel, self.metadata)


class LeaderChannel:
    """A leader-following set of gRPC channels to one tenure cluster. Thread-safe: one
    channel serves every thread of a client, and one thread's redirect helps the others."""

    def __init__(self, url: str):
        target = urls.parse(url)
        try:
            self._dialer = _Dialer(target)
        except ValueError as e:
            raise InvalidUrl(url, str(e)) from None
        if len(target.addrs) > NODE_ADDRS_MAX:
            raise InvalidUrl(
                url,
                f"{len(target.addrs)} node addresses; at most {NODE_ADDRS_MAX} (one is "
                "enough: the client learns the others from the cluster)",
            )
        self._lock = threading.Lock()
        self._nodes: List[Node] = []
        for addr in target.addrs:
            if all(n.addr != addr for n in self._nodes):
                self._nodes.append(self._dialer.node(addr))
        self._fixed = not target.discover
        # Whether, and when, to ask for the member list: at the start, after a hint named
        # an unknown node, after a node stopped answering; never when kept to the URL's
        # addresses or when the cluster refuses this client the call.
        self._members_stale = not self._fixed
        self._members_unsupported = self._fixed
        self._members_failed_at: Optional[float] = None
        self._guess = 0
        self._closed = False

    # -- the set of nodes -------------------------------------------------------------------

    def addrs(self) -> List[str]:
        """Every node address known, in the order learned."""
        with self._lock:
            return [n.addr for n in self._nodes]

    def guess(self) -> int:
        """The index of the node believed to lead."""
        return self._guess

    def node_at(self, i: int) -> Node:
        """Node ``i`` (indices stay valid: nodes are only ever appended)."""
        with self._lock:
            return self._nodes[i]

    def _index_of(self, addr: str) -> Optional[int]:
        """The index of ``addr``, added if it is new, valid and under the cap."""
        try:
            addr = urls.node_addr(addr)
        except ValueError:
            return None
        with self._lock:
            for i, n in enumerate(self._nodes):
                if n.addr == addr:
                    return i
            if len(self._nodes) >= NODE_ADDRS_MAX or self._fixed or self._closed:
                return None
            self._nodes.append(self._dialer.node(addr))
            return len(self._nodes) - 1

    def learn(self, members: Sequence[pb.Member]) -> None:
        """Add the client addresses of ``members`` (ignored when kept to the URL's)."""
        for m in members:
            if m.client_addr:
                self._index_of(m.client_addr)

    def learn_members(self) -> None:
        """If the member list may name nodes this channel does not know, ask the node
        believed to lead for it (bounded by :data:`MEMBERS_TIMEOUT_S`). A failure changes
        nothing but the time of the next attempt."""
        with self._lock:
            recently_failed = (
                self._members_failed_at is not None
                and time.monotonic() - self._members_failed_at < MEMBERS_RETRY_PAUSE_S
            )
            if not self._members_stale or self._members_unsupported or recently_failed:
                return
        node = self.node_at(self.guess())
        try:
            answer = node.cluster.Members(pb.MembersRequest(), **node.opts(MEMBERS_TIMEOUT_S))
        except grpc.RpcError as e:
            with self._lock:
                if code_of(e) in (
                    grpc.StatusCode.UNIMPLEMENTED,
                    grpc.StatusCode.PERMISSION_DENIED,
                    grpc.StatusCode.UNAUTHENTICATED,
                ):
                    # Refused for this client (or an older server): asking again would be
                    # refused again.
                    self._members_unsupported = True
                else:
                    self._members_failed_at = time.monotonic()
            return
        with self._lock:
            self._members_stale = False
            self._members_failed_at = None
        self.learn(answer.members)

    def _mark_members_stale(self) -> None:
        with self._lock:
            self._members_stale = True

    # -- learning from failures -------------------------------------------------------------

    def note_failure(self, i: int, err: grpc.RpcError) -> Attempted:
        """Learn from a failed attempt at node ``i``: follow a leader hint, or move on to the
        next node when ``i`` did not answer. Returns what the failure says about the request."""
        meta = metadata_of(err)
        reason = Reason.parse(meta.get(ERROR_KEY))
        if reason is Reason.NOT_LEADER:
            known = len(self.addrs())
            hint = meta.get(LEADER_ADDR_KEY)
            hinted = self._index_of(hint) if hint else None
            if hinted is not None and hinted >= known:
                # A leader this channel did not know of: the membership may have more.
                self._mark_members_stale()
            if hinted is not None and hinted != i:
                self._guess = hinted
                return Attempted.REDIRECTED
            self.advance(i)
            return Attempted.RETRY
        if reason is Reason.UNAVAILABLE:
            # No leader yet, a transfer, an overload: the same node will know more soon.
            return Attempted.RETRY
        if reason is Reason.INDETERMINATE:
            # The node lost track of it (it stopped, or caught up past it by a snapshot).
            self.advance(i)
            return Attempted.UNKNOWN
        if reason is not None:
            return Attempted.ANSWER
        if code_of(err) in _DEFINITE_CODES or is_tls_configuration_failure(err):
            # A status without a reason that is this node's answer, not ours to reinterpret.
            return Attempted.ANSWER
        # Transport errors and timeouts carry no reason: the node is gone or stuck, and may
        # have taken the request before it went. Another node may know of more members.
        self.advance(i)
        self._mark_members_stale()
        return Attempted.UNKNOWN

    def advance(self, frm: int) -> None:
        """Move the guess past ``frm``, unless another thread already moved it."""
        with self._lock:
            if self._guess == frm:
                self._guess = (frm + 1) % len(self._nodes)

    # -- calls ------------------------------------------------------------------------------

    def call(self, fn: Callable[[Node], T]) -> T:
        """Call ``fn`` at the node believed to lead until it succeeds, fails with an answer,
        or the budget runs out. Only for requests that are safe to repeat: reads, and writes
        whose every attempt carries the same request id. If the budget runs out after an
        attempt that may have taken effect, the error is :class:`Indeterminate`."""
        return self._attempts(fn, repeatable=True)

    def call_once(self, fn: Callable[[Node], T]) -> T:
        """Like :meth:`call`, for a request that must not be repeated once it may have taken
        effect (no request id): it follows ``not-leader`` hints and waits out
        ``unavailable``, but the first attempt whose outcome is unknown ends the call with
        :class:`Indeterminate`."""
        return self._attempts(fn, repeatable=False)

    def _attempts(self, fn: Callable[[Node], T], repeatable: bool) -> T:
        deadline = time.monotonic() + REQUEST_BUDGET_S
        maybe_applied = False
        redirects = 0
        while True:
            self.check_open()
            self.learn_members()
            i = self.guess()
            node = self.node_at(i)
            try:
                return fn(node)
            except grpc.RpcError as err:
                failure = err
            except ValueError:
                # grpc's answer to a call on a closed channel.
                self.check_open()
                raise
            attempted = self.note_failure(i, failure)
            if attempted is Attempted.ANSWER:
                raise from_rpc_error(failure) from None
            maybe_applied = maybe_applied or attempted is Attempted.UNKNOWN
            if maybe_applied and not repeatable:
                raise Indeterminate(f"{node.addr}: {from_rpc_error(failure)}") from None
            if time.monotonic() + RETRY_PAUSE_S >= deadline:
                error = from_rpc_error(failure)
                if maybe_applied:
                    raise Indeterminate(str(error)) from None
                raise error from None
            # A hint is followed at once, a few times in a row (stale nodes may point along a
            # chain, or at each other during an election); anything else waits a little.
            if attempted is Attempted.REDIRECTED and redirects < REDIRECTS_AT_ONCE:
                redirects += 1
                continue
            redirects = 0
            time.sleep(RETRY_PAUSE_S)

    def check_open(self) -> None:
        """Raise :class:`~tenure.errors.Error` if the channel was closed."""
        if self._closed:
            raise Error("the client is closed")

    def close(self) -> None:
        """Close every node's channel (and with them their connections)."""
        with self._lock:
            self._closed = True
            nodes = list(self._nodes)
        for n in nodes:
            n.channel.close()
