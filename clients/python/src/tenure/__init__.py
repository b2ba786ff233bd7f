"""tenure: leader election with fencing tokens, the Python client of a tenure cluster.

A group of replicas uses tenure to pick exactly one of them to do work that must happen
once, to replace it safely when it crashes or freezes, and to give every leader a fencing
token that rises with each change of leader, so that a store can refuse the writes of a
leader that was replaced::

    import tenure

    with tenure.Client("tenure://10.0.0.1:8001?ca=ca.pem&cert=app.pem&key=app-key.pem") as client:
        with client.leadership("nightly-billing", ttl=10) as lead:
            # lead.token rises with every change of leader; lead.lost is set the moment
            # this process can no longer trust that it leads.
            lead.fenced_put("closed-day", "2026-12-01")

docs/PYTHON.md is the guide: the URL and TLS, a whole nightly job, what the client
guarantees (the holder's lease rule and its margin, exact outcomes) and what it does not.
"""

from .client import (
    Candidate,
    Client,
    FencedValue,
    LeaderEvent,
    LeaderInfo,
    Leadership,
    Lost,
    Observer,
)
from .drift import DEFAULT_DRIFT_PPM, MAX_DRIFT_PPM, holder_margin_ms
from .errors import (
    AuthenticationFailed,
    BackendError,
    ElectionInUse,
    Error,
    Indeterminate,
    InvalidArgument,
    InvalidUrl,
    NotCandidate,
    NotLeader,
    PermissionDenied,
    QuotaExceeded,
    Reason,
    SessionEnded,
    SessionLost,
    StaleToken,
    TlsFailed,
    TokenNotIssued,
    Unavailable,
    UnknownElection,
    UnsupportedBackend,
    WrongElection,
)

__version__ = "0.1.0"

__all__ = [
    "AuthenticationFailed",
    "BackendError",
    "Candidate",
    "Client",
    "DEFAULT_DRIFT_PPM",
    "ElectionInUse",
    "Error",
    "FencedValue",
    "Indeterminate",
    "InvalidArgument",
    "InvalidUrl",
    "LeaderEvent",
    "LeaderInfo",
    "Leadership",
    "Lost",
    "MAX_DRIFT_PPM",
    "NotCandidate",
    "NotLeader",
    "Observer",
    "PermissionDenied",
    "QuotaExceeded",
    "Reason",
    "SessionEnded",
    "SessionLost",
    "StaleToken",
    "TlsFailed",
    "TokenNotIssued",
    "Unavailable",
    "UnknownElection",
    "UnsupportedBackend",
    "WrongElection",
    "holder_margin_ms",
]
