"""The client's typed errors, and their translation from the cluster's gRPC statuses.

Every failed call raises a subclass of :class:`Error`. Each says whether the request took
effect: only :class:`Indeterminate` and :class:`SessionEnded` mean "may or may not have";
every other error is definite (the request did not take effect and never will).
:class:`NotLeader`, :class:`Unavailable` and :class:`Indeterminate` are retried inside the
client for a bounded time before they surface (``retryable`` is true for them).

The machine-readable reason travels in the gRPC metadata key ``tenure-error``
(:data:`ERROR_KEY`); the list of reasons is :class:`Reason`, the same as the Rust
``tenure_proto::Reason`` and the top of ``tenure.proto``.
"""

from __future__ import annotations

import enum
from typing import Dict, Optional, Sequence, Tuple

import grpc

#: Metadata key carrying the machine-readable error reason.
ERROR_KEY = "tenure-error"
#: Metadata key carrying the leader's node id on ``not-leader``.
LEADER_ID_KEY = "tenure-leader-id"
#: Metadata key carrying the leader's client address on ``not-leader``.
LEADER_ADDR_KEY = "tenure-leader-addr"
#: Metadata key carrying the highest accepted token on ``stale-token``.
CURRENT_TOKEN_KEY = "tenure-current-token"


class Reason(str, enum.Enum):
    """The reason a failed call carries in :data:`ERROR_KEY`, in the ``.proto`` file's order."""

    NOT_LEADER = "not-leader"
    UNAVAILABLE = "unavailable"
    INVALID_ARGUMENT = "invalid-argument"
    INDETERMINATE = "indeterminate"
    UNKNOWN_SESSION = "unknown-session"
    UNKNOWN_ELECTION = "unknown-election"
    NOT_CANDIDATE = "not-candidate"
    STALE_TOKEN = "stale-token"
    TOKEN_SUPERSEDED = "token-superseded"
    TOKEN_NOT_ISSUED = "token-not-issued"
    WRONG_ELECTION = "wrong-election"
    REQUEST_FORGOTTEN = "request-forgotten"
    SESSION_ENDED = "session-ended"
    WRONG_SECRET = "wrong-secret"
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission-denied"
    RESOURCE_EXHAUSTED = "resource-exhausted"
    QUOTA_EXCEEDED = "quota-exceeded"
    ELECTION_IN_USE = "election-in-use"

    @property
    def definite(self) -> bool:
        """Whether a call that failed for this reason certainly did not take effect."""
        return self not in (
            Reason.INDETERMINATE,
            Reason.REQUEST_FORGOTTEN,
            Reason.SESSION_ENDED,
        )

    @classmethod
    def parse(cls, text: Optional[str]) -> Optional["Reason"]:
        """The reason ``text`` names, or ``None`` for none or one this version does not know."""
        if text is None:
            return None
        try:
            return cls(text)
        except ValueError:
            return None


class Error(Exception):
    """What can go wrong when talking to a tenure cluster.

    ``reason`` is the cluster's reason this error stands for (``None`` for the client's own
    errors: URLs, TLS, anything else); ``retryable`` says whether the same request may
    succeed later.
    """

    reason: Optional[Reason] = None
    retryable: bool = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class NotLeader(Error):
    """The node asked is not the cluster's leader, and following its hints did not reach one
    in time. ``leader_hint`` is the client address of the node believed to lead, if known."""

    reason = Reason.NOT_LEADER
    retryable = True

    def __init__(self, leader_hint: Optional[str] = None) -> None:
        where = (
            f"the leader's client address is {leader_hint}"
            if leader_hint
            else "the leader is unknown"
        )
        super().__init__(f"not the cluster leader ({where})")
        self.leader_hint = leader_hint


class Unavailable(Error):
    """No node answered usefully in time (no leader yet, nodes down, overload)."""

    reason = Reason.UNAVAILABLE
    retryable = True

    def __init__(self, message: str) -> None:
        super().__init__(f"backend unavailable: {message}")


class Indeterminate(Error):
    """The request may or may not have taken effect, and retrying it with the same request id
    (across nodes and leader changes) did not learn which within the client's budget.
    Retrying the same call later is safe: the cluster applies a request at most once."""

    reason = Reason.INDETERMINATE
    retryable = True

    def __init__(self, message: str) -> None:
        super().__init__(f"outcome unknown: {message}")


class SessionEnded(Error):
    """The request's session has ended (expired or revoked), and with it what the cluster
    remembered of its requests: whether an earlier attempt of this request took effect is
    unknown. Retrying does not help; the session is gone either way."""

    reason = Reason.SESSION_ENDED

    def __init__(self, message: str) -> None:
        super().__init__(f"session ended, outcome unknown: {message}")


class StaleToken(Error):
    """A fenced write carried a token lower than one already accepted, or (on the cluster)
    lower than its election's current token: a newer leader exists. ``current`` is the
    highest token the store accepted, or the election's current token."""

    reason = Reason.STALE_TOKEN

    def __init__(self, current: int) -> None:
        super().__init__(f"stale token: the current token is {current}")
        self.current = current


class WrongElection(Error):
    """A fenced write named another election than the one the key belongs to."""

    reason = Reason.WRONG_ELECTION

    def __init__(self, message: str) -> None:
        super().__init__(f"wrong election: {message}")


class TokenNotIssued(Error):
    """A fenced write carried a token its election never handed out."""

    reason = Reason.TOKEN_NOT_ISSUED

    def __init__(self, message: str) -> None:
        super().__init__(f"token not issued: {message}")


class PermissionDenied(Error):
    """The cluster refused the request as not this client's to make: a session's secret did
    not match, or its policy grants this principal no such right."""

    reason = Reason.PERMISSION_DENIED

    def __init__(self, message: str) -> None:
        super().__init__(f"permission denied: {message}")


class AuthenticationFailed(Error):
    """The cluster refused this client's credentials: a bearer token or client certificate it
    does not know, or none where it requires one. Never retried."""

    reason = Reason.UNAUTHENTICATED

    def __init__(self, message: str) -> None:
        super().__init__(f"authentication failed: {message}")


class TlsFailed(Error):
    """TLS with a node could not be set up: its certificate is not signed by the CA given or
    does not name the host dialed, the node refused the client's certificate, or it does not
    speak TLS. Never retried: it is a matter of configuration."""

    def __init__(self, message: str) -> None:
        super().__init__(f"TLS with the backend failed: {message}")


class SessionLost(Error):
    """The session (lease) behind a candidacy or leadership expired or was revoked."""

    reason = Reason.UNKNOWN_SESSION

    def __init__(self, message: str = "") -> None:
        super().__init__("the session expired or was revoked")
        self.detail = message


class UnknownElection(Error):
    """Nobody ever campaigned in this election."""

    reason = Reason.UNKNOWN_ELECTION

    def __init__(self, message: str) -> None:
        super().__init__(f"unknown election: {message}")


class NotCandidate(Error):
    """The session named is not queued in the election (or does not lead it)."""

    reason = Reason.NOT_CANDIDATE

    def __init__(self, message: str) -> None:
        super().__init__(f"not a candidate: {message}")


class InvalidArgument(Error):
    """The request was malformed or out of range (sizes, TTL)."""

    reason = Reason.INVALID_ARGUMENT

    def __init__(self, message: str) -> None:
        super().__init__(f"invalid argument: {message}")


class QuotaExceeded(Error):
    """The caller's principal holds all it may of something (sessions, elections, keys, key
    bytes, streams, requests per second; the message names which)."""

    reason = Reason.QUOTA_EXCEEDED

    def __init__(self, message: str) -> None:
        super().__init__(f"quota exceeded: {message}")


class ElectionInUse(Error):
    """The election still has candidates, so it cannot be deleted."""

    reason = Reason.ELECTION_IN_USE

    def __init__(self, message: str) -> None:
        super().__init__(f"election in use: {message}")


class UnsupportedBackend(Error):
    """The URL names a backend this client does not speak (it speaks ``tenure://`` only)."""

    def __init__(self, scheme: str, why: str) -> None:
        super().__init__(f"unsupported backend {scheme!r}: {why}")
        self.scheme = scheme


class InvalidUrl(Error):
    """The URL could not be understood, or a file it names could not be read."""

    def __init__(self, url: str, why: str) -> None:
        super().__init__(f"invalid backend URL {url!r}: {why}")
        self.url = url
        self.why = why


class BackendError(Error):
    """Any other error the cluster reported."""

    def __init__(self, message: str) -> None:
        super().__init__(f"backend error: {message}")


Metadata = Dict[str, str]


def metadata_of(err: grpc.RpcError) -> Metadata:
    """A failed call's metadata, trailers and headers merged (a trailers-only answer may
    arrive as either), keys lowercased."""
    merged: Metadata = {}
    for getter in ("initial_metadata", "trailing_metadata"):
        fn = getattr(err, getter, None)
        items: Optional[Sequence[Tuple[str, object]]] = fn() if callable(fn) else None
        for key, value in items or ():
            if isinstance(value, bytes):
                continue  # binary (`-bin`) headers carry nothing of ours
            merged.setdefault(key.lower(), str(value))
    return merged


def code_of(err: grpc.RpcError) -> grpc.StatusCode:
    """A failed call's status code (UNKNOWN when the error carries none)."""
    fn = getattr(err, "code", None)
    code = fn() if callable(fn) else None
    return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def details_of(err: grpc.RpcError) -> str:
    """A failed call's message."""
    fn = getattr(err, "details", None)
    details = fn() if callable(fn) else None
    return details if isinstance(details, str) else str(err)


def reason_of(err: grpc.RpcError) -> Optional[Reason]:
    """The tenure reason a failed call carries, if any."""
    return Reason.parse(metadata_of(err).get(ERROR_KEY))


# Words of a TLS handshake that failed over configuration (a certificate the CA did not sign,
# one that does not name the host, a client certificate the node refused, a plaintext
# server), as grpc reports them. Transient failures (a node dying mid-handshake) say none of
# these and stay "unavailable".
_TLS_CONFIGURATION_FAILURES = (
    "CERTIFICATE_VERIFY_FAILED",
    "certificate verify failed",
    "UNKNOWN_CA",
    "BAD_CERTIFICATE",
    "CERTIFICATE_REQUIRED",
    "WRONG_VERSION_NUMBER",
    "Peer name",
)


def is_tls_configuration_failure(err: grpc.RpcError) -> bool:
    """Whether a call failed because TLS with the node cannot be set up as configured."""
    if code_of(err) != grpc.StatusCode.UNAVAILABLE or reason_of(err) is not None:
        return False
    details = details_of(err)
    return any(word in details for word in _TLS_CONFIGURATION_FAILURES)


def from_rpc_error(err: grpc.RpcError) -> Error:
    """The typed error a failed call stands for (the Rust ``From<tonic::Status>``)."""
    message = details_of(err)
    code = code_of(err)
    meta = metadata_of(err)
    reason = Reason.parse(meta.get(ERROR_KEY))
    if reason is None:
        if is_tls_configuration_failure(err):
            return TlsFailed(message)
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidArgument(message)
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return AuthenticationFailed(message)
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return PermissionDenied(message)
        if code in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.CANCELLED,
            grpc.StatusCode.UNKNOWN,
        ):
            return Unavailable(f"{code.name}: {message}")
        return BackendError(f"{code.name}: {message}")
    if reason is Reason.NOT_LEADER:
        return NotLeader(meta.get(LEADER_ADDR_KEY))
    if reason is Reason.UNKNOWN_SESSION:
        return SessionLost(message)
    if reason is Reason.UNKNOWN_ELECTION:
        return UnknownElection(message)
    if reason is Reason.NOT_CANDIDATE:
        return NotCandidate(message)
    if reason is Reason.WRONG_ELECTION:
        return WrongElection(message)
    if reason is Reason.TOKEN_NOT_ISSUED:
        return TokenNotIssued(message)
    if reason in (Reason.WRONG_SECRET, Reason.PERMISSION_DENIED):
        return PermissionDenied(message)
    if reason is Reason.UNAUTHENTICATED:
        return AuthenticationFailed(message)
    if reason in (Reason.STALE_TOKEN, Reason.TOKEN_SUPERSEDED):
        current = meta.get(CURRENT_TOKEN_KEY, "")
        if current.isdigit():
            return StaleToken(int(current))
        return BackendError(f"{reason.value} without a current token: {message}")
    if reason is Reason.INVALID_ARGUMENT:
        return InvalidArgument(message)
    if reason is Reason.UNAVAILABLE:
        return Unavailable(message)
    if reason is Reason.RESOURCE_EXHAUSTED:
        # Every stream slot is taken: the node's answer, not a retry's business.
        return BackendError(f"{reason.value}: {message}")
    if reason is Reason.QUOTA_EXCEEDED:
        return QuotaExceeded(message)
    if reason is Reason.ELECTION_IN_USE:
        return ElectionInUse(message)
    if reason in (Reason.INDETERMINATE, Reason.REQUEST_FORGOTTEN):
        return Indeterminate(message)
    if reason is Reason.SESSION_ENDED:
        return SessionEnded(message)
    raise AssertionError(f"reason {reason!r} has no error")  # every member is handled above
