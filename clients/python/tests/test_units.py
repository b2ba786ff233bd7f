"""The pure parts, against the Rust crate's own cases: the lease margin's formula
(tenure_core::drift), URLs (tenure::url), the environment (tenure::environment), and the
translation of the cluster's reasons into typed errors (tenure::error)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Tuple

import grpc
import pytest

import tenure
from tenure import drift, errors
from tenure.url import backend_url, node_addr, parse

REPO = Path(__file__).resolve().parents[3]


def test_one_percent_of_ten_seconds_twice_plus_the_allowance() -> None:
    # tenure_core::drift's own test: 10 s at 1 % -> 2 x 100 ms + 10 ms.
    assert drift.holder_margin_us(10_000_000, drift.DEFAULT_DRIFT_PPM, 10_000) == 210_000
    assert drift.holder_margin_ms(10_000) == 210.0
    assert tenure.holder_margin_ms(2_000) == 50.0


def test_skew_rounds_up_and_saturates_like_the_rust_one() -> None:
    assert drift.skew_over_us(1, 1) == 1
    assert drift.skew_over_us(100, 10_000) == 1
    assert drift.skew_over_us(0, 10_000) == 0
    assert drift.skew_over_us((1 << 64) - 1, 0) == 0
    assert drift.skew_over_us((1 << 64) - 1, 1_000_000) == (1 << 64) - 1
    assert drift.holder_margin_us((1 << 64) - 1, 1_000_000, 10) == (1 << 64) - 1


def test_the_default_drift_is_the_rust_default() -> None:
    text = (REPO / "crates/core/src/drift.rs").read_text()
    assert "pub const DEFAULT: DriftPpm = DriftPpm(10_000);" in text
    assert "pub const MAX: DriftPpm = DriftPpm(100_000);" in text
    assert "CLIENT_SCHEDULING_ALLOWANCE: Duration = Duration::from_millis(10);" in text
    assert drift.DEFAULT_DRIFT_PPM == 10_000 and drift.MAX_DRIFT_PPM == 100_000
    assert drift.CLIENT_SCHEDULING_ALLOWANCE_US == 10_000


def test_cluster_urls_parse_into_addresses_tls_and_discovery() -> None:
    u = parse("tenure://Node-1:8001,127.0.0.1:8002?ca=%2Fca.pem&cert=c&key=k&discover=false")
    assert u.addrs == ("node-1:8001", "127.0.0.1:8002")
    assert (u.ca, u.identity, u.discover, u.token_file) == ("/ca.pem", ("c", "k"), False, None)
    assert parse("tenure://h:1?ca=a&token_file=t").token_file == "t"
    for rest, why in [
        ("", "no host:port"),
        ("h", "no port"),
        ("h:1?cert=a&key=b", "need ca"),
        ("h:1?ca=a&cert=b", "go together"),
        ("h:1?discover=no", "true or false"),
        ("h:1?bogus=1", 'unknown query parameter "bogus"'),
        ("u:pw@h:1", "no user or password"),
        ("h:1/path", "no path"),
        ("h:1?ca=", "is empty"),
        ("h:1?ca=a&ca=b", "given twice"),
        ("h:1?ca=%zz", "'%' not followed by two hex digits"),
        ("h:1?ca", "has no value"),
    ]:
        with pytest.raises(tenure.InvalidUrl) as e:
            parse("tenure://" + rest)
        assert why in e.value.why, (rest, e.value.why)
    with pytest.raises(tenure.UnsupportedBackend):
        parse("etcd://h:2379")


def test_node_addresses_may_be_names_or_ips_and_must_have_a_port() -> None:
    for addr, dialed in [
        ("127.0.0.1:8001", "127.0.0.1:8001"),
        ("[::1]:8001", "[::1]:8001"),
        ("localhost:8001", "localhost:8001"),
        ("Node-2.Example.com.:8002", "node-2.example.com:8002"),
    ]:
        assert node_addr(addr) == dialed
    for addr, why in [
        ("localhost", "no port"),
        ("localhost:0", "no valid port"),
        ("localhost:+80", "no valid port"),
        ("localhost:99999", "no valid port"),
        ("127.0.0.1:0", "port 0"),
        ("::1:8001", "brackets"),
        (":8001", "the host must be"),
        ("a..b:1", "the host must be"),
        ("a b:1", "the host must be"),
        ("300.1.1.1:1", "not a valid IP address"),
    ]:
        with pytest.raises(ValueError, match=re.escape(why)):
            node_addr(addr)


def test_tls_files_come_from_the_environment_unless_the_url_names_its_own() -> None:
    env = {
        "TENURE_CA": "/c/ca.pem",
        "TENURE_CERT": "/c/client-app.pem",
        "TENURE_KEY": "/c/client-app-key.pem",
    }
    assert (
        backend_url("tenure://h:1,h:2", environ=env)
        == "tenure://h:1,h:2?ca=/c/ca.pem&cert=/c/client-app.pem&key=/c/client-app-key.pem"
    )
    assert (
        backend_url("tenure://h:1", environ={"TENURE_TOKEN_FILE": "/run/token"})
        == "tenure://h:1?token_file=/run/token"
    )
    assert backend_url("tenure://h:1?ca=/x", environ=env) == "tenure://h:1?ca=/x"
    assert backend_url("tenure://h:1", environ={}) == "tenure://h:1"
    assert backend_url(None, environ={}) == "tenure://127.0.0.1:8001"
    assert backend_url(None, environ={"TENURE_BACKEND": "tenure://n:9", "TENURE_CA": ""}) == "tenure://n:9"
    # What the caller gives comes before the environment.
    assert backend_url("tenure://h:1", ca="/mine.pem", environ=env).startswith(
        "tenure://h:1?ca=/mine.pem&cert=/c/client-app.pem"
    )


class Status(grpc.RpcError):
    """A failed call as grpc raises it: a code, a message and trailing metadata."""

    def __init__(self, code: grpc.StatusCode, details: str, **meta: str):
        self._code, self._details = code, details
        self._meta: Tuple[Tuple[str, str], ...] = tuple(
            (k.replace("_", "-"), v) for k, v in meta.items()
        )

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def initial_metadata(self) -> Tuple[()]:
        return ()

    def trailing_metadata(self) -> Tuple[Tuple[str, str], ...]:
        return self._meta


def reason(r: str, code: grpc.StatusCode = grpc.StatusCode.FAILED_PRECONDITION, **meta: str) -> Status:
    return Status(code, "the node's words", tenure_error=r, **meta)


def test_every_reason_of_the_proto_file_is_known_and_translated() -> None:
    proto = (REPO / "crates/proto/proto/tenure/v1/tenure.proto").read_text()
    listed = re.findall(r"^//   ([a-z-]+) ", proto, flags=re.M)
    assert sorted(listed) == sorted(r.value for r in tenure.Reason)
    expected: Dict[str, type] = {
        "not-leader": tenure.NotLeader,
        "unavailable": tenure.Unavailable,
        "invalid-argument": tenure.InvalidArgument,
        "indeterminate": tenure.Indeterminate,
        "unknown-session": tenure.SessionLost,
        "unknown-election": tenure.UnknownElection,
        "not-candidate": tenure.NotCandidate,
        "stale-token": tenure.StaleToken,
        "token-superseded": tenure.StaleToken,
        "token-not-issued": tenure.TokenNotIssued,
        "wrong-election": tenure.WrongElection,
        "request-forgotten": tenure.Indeterminate,
        "session-ended": tenure.SessionEnded,
        "wrong-secret": tenure.PermissionDenied,
        "unauthenticated": tenure.AuthenticationFailed,
        "permission-denied": tenure.PermissionDenied,
        "resource-exhausted": tenure.BackendError,
        "quota-exceeded": tenure.QuotaExceeded,
        "election-in-use": tenure.ElectionInUse,
    }
    for r in tenure.Reason:
        err = errors.from_rpc_error(reason(r.value, tenure_current_token="7"))
        assert type(err) is expected[r.value], r
    indefinite = [r for r in tenure.Reason if not r.definite]
    assert indefinite == [
        tenure.Reason.INDETERMINATE,
        tenure.Reason.REQUEST_FORGOTTEN,
        tenure.Reason.SESSION_ENDED,
    ]


def test_stale_tokens_carry_the_current_token_and_hints_the_leader() -> None:
    e = errors.from_rpc_error(reason("token-superseded", grpc.StatusCode.ABORTED, tenure_current_token="43"))
    assert isinstance(e, tenure.StaleToken) and e.current == 43
    assert isinstance(errors.from_rpc_error(reason("stale-token")), tenure.BackendError)
    hinted = errors.from_rpc_error(reason("not-leader", tenure_leader_addr="127.0.0.1:8002"))
    assert isinstance(hinted, tenure.NotLeader) and hinted.leader_hint == "127.0.0.1:8002"
    assert str(hinted) == "not the cluster leader (the leader's client address is 127.0.0.1:8002)"
    assert str(tenure.NotLeader(None)) == "not the cluster leader (the leader is unknown)"
    assert hinted.retryable and not e.retryable


def test_statuses_without_a_reason_are_typed_by_their_code() -> None:
    def of(code: grpc.StatusCode, details: str = "x") -> tenure.Error:
        return errors.from_rpc_error(Status(code, details))

    assert isinstance(of(grpc.StatusCode.UNAUTHENTICATED), tenure.AuthenticationFailed)
    assert isinstance(of(grpc.StatusCode.PERMISSION_DENIED), tenure.PermissionDenied)
    assert isinstance(of(grpc.StatusCode.INVALID_ARGUMENT), tenure.InvalidArgument)
    assert isinstance(of(grpc.StatusCode.DEADLINE_EXCEEDED), tenure.Unavailable)
    assert isinstance(of(grpc.StatusCode.UNAVAILABLE, "Connection refused"), tenure.Unavailable)
    assert isinstance(of(grpc.StatusCode.INTERNAL), tenure.BackendError)
    verify = "Tls handshake failed (TSI_PROTOCOL_FAILURE): CERTIFICATE_VERIFY_FAILED"
    assert isinstance(of(grpc.StatusCode.UNAVAILABLE, verify), tenure.TlsFailed)
