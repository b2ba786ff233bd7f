"""A real tenure cluster for the tests: three ``tenure server`` processes on loopback ports,
each with a temporary data directory, TLS on every port (certificates issued by
``tenure certs``) and client authentication by an auth file with bearer tokens made by
``tenure token``, as the Rust harness (``crates/testkit``, ``crates/procs``) runs them.

The binary is ``$TENURE_BIN``, else ``~/.cache/tenure/target/debug/tenure`` (where
``scripts/test.sh`` builds it). Nodes are killed with SIGKILL, restarted on the same data
directory, and asked for ``/status`` over HTTPS with the admin's client certificate. Every
node also dies with the test process (``setpriv --pdeathsig KILL``, where available).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import socket
import ssl
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from procs import Proc, run, spawn

#: Where ports are drawn from: below the kernel's ephemeral range (32768 and up on Linux), so
#: that an outgoing connection never takes the port of a node that is down for a restart.
PORT_RANGE = (20_000, 32_000)
#: How long a cluster may take to agree on a leader (the election timeout is 150 ms).
LEADER_WAIT_S = 20.0
#: How long one `/status` may take before the node counts as not answering.
STATUS_TIMEOUT_S = 0.5

#: The auth file's principals: the admin (everything), the application (campaign, observe,
#: read and write under every name), an observer (reads only) and a principal that may hold
#: one election at a time (its quota).
AUTH_POLICY = """\
[principals.admin]
roles = ["admin"]

[principals.app]
grants = [{ prefix = "", allow = ["campaign", "observe", "read", "write"] }]

[principals.viewer]
roles = ["observer"]

[principals.tiny]
grants = [{ prefix = "tiny/", allow = ["campaign", "observe", "read", "write"] }]
quotas = { elections = 1 }
"""
#: Principals that get a bearer token (written to DIR/NAME.token).
TOKEN_PRINCIPALS = ("app", "viewer", "tiny")


def tenure_binary() -> Path:
    """The `tenure` binary the tests run."""
    given = os.environ.get("TENURE_BIN")
    path = Path(given) if given else Path.home() / ".cache/tenure/target/debug/tenure"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise RuntimeError(
            f"no tenure binary at {path}: build it (`cargo build -p tenure-cli`) or set "
            "TENURE_BIN to one"
        )
    return path


def free_ports(n: int) -> List[int]:
    """``n`` distinct loopback ports that were free a moment ago."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    held: List[socket.socket] = []
    ports: List[int] = []
    try:
        for _ in range(10_000):
            if len(ports) == n:
                return ports
            port = rng.randrange(*PORT_RANGE)
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            held.append(s)
            ports.append(port)
    finally:
        for s in held:
            s.close()
    raise RuntimeError(f"cannot find {n} free loopback ports in {PORT_RANGE}")


@dataclass(frozen=True)
class NodeAddrs:
    peer: int
    client: int
    http: int

    def flag(self, node_id: int) -> str:
        return f"{node_id}=127.0.0.1:{self.peer},127.0.0.1:{self.client},127.0.0.1:{self.http}"


def issue_certs(binary: Path, out: Path, nodes: str, clients: str) -> Path:
    """`tenure certs` into ``out``: a CA, node and client certificates valid for a day."""
    run(
        [str(binary), "certs", "--out", str(out), "--nodes", nodes, "--clients", clients, "--days", "1"],
        "tenure certs",
    )
    return out


class Cluster:
    """A running 3-node cluster (see the module's docs)."""

    def __init__(self, nodes: int = 3):
        self.binary = tenure_binary()
        self.dir = Path(tempfile.mkdtemp(prefix="tenure-py-"))
        self.certs = issue_certs(
            self.binary, self.dir / "certs", ",".join(str(i) for i in range(1, nodes + 1)),
            "admin,app,viewer,tiny",
        )
        self.tokens: Dict[str, Path] = {}
        policy = AUTH_POLICY + "\n[tokens]\n"
        for principal in TOKEN_PRINCIPALS:
            token, said = run([str(self.binary), "token", principal], f"tenure token {principal}")
            line = next(
                (l for l in said.splitlines() if l.startswith(f"{principal} = ")), None
            )
            if line is None:
                raise RuntimeError(f"tenure token {principal} gave no auth-file line: {said}")
            policy += line + "\n"
            path = self.dir / f"{principal}.token"
            path.write_text(token.strip() + "\n")
            path.chmod(0o600)
            self.tokens[principal] = path
        self.auth_file = self.dir / "auth.toml"
        self.auth_file.write_text(policy)
        ports = free_ports(3 * nodes)
        self.addrs: Dict[int, NodeAddrs] = {
            i: NodeAddrs(*ports[3 * (i - 1) : 3 * i]) for i in range(1, nodes + 1)
        }
        self.procs: Dict[int, Proc] = {}
        self._http_tls = ssl.create_default_context(cafile=str(self.certs / "ca.pem"))
        self._http_tls.load_cert_chain(
            str(self.certs / "client-admin.pem"), str(self.certs / "client-admin-key.pem")
        )
        try:
            for i in self.addrs:
                self.start_node(i)
            self.wait_for_leader()
        except BaseException:
            self.stop()
            raise

    # -- nodes -------------------------------------------------------------------------------

    def ids(self) -> List[int]:
        return list(self.addrs)

    def log(self, node_id: int) -> Path:
        return self.dir / f"node-{node_id}.log"

    def start_node(self, node_id: int) -> None:
        """Start (or restart, on its data directory) node ``node_id``."""
        args = [
            str(self.binary), "server",
            "--id", str(node_id),
            "--data-dir", str(self.dir / f"node-{node_id}"),
            # Each node gets only its bundle (the CA certificate, its own certificate and
            # key), never the CA's private key.
            "--tls-dir", str(self.certs / f"node-{node_id}"),
            "--auth-file", str(self.auth_file),
        ]
        for i, a in self.addrs.items():
            args += ["--node", a.flag(i)]
        if shutil.which("setpriv"):
            # Killed by the kernel when the test process dies, however it dies.
            args = ["setpriv", "--pdeathsig", "KILL", "--"] + args
        self.procs[node_id] = spawn(
            args, self.log(node_id), env={**os.environ, "NO_COLOR": "1"}, new_session=True
        )

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` and reap it."""
        self.procs.pop(node_id).kill()

    def restart(self, node_id: int) -> None:
        """Start a killed node again and wait until every node agrees on a leader."""
        self.start_node(node_id)
        self.wait_for_leader()

    def stop(self) -> None:
        """Kill every node; remove the directory unless TENURE_KEEP_TEST_DIRS=1."""
        for node_id in list(self.procs):
            self.kill(node_id)
        if os.environ.get("TENURE_KEEP_TEST_DIRS") == "1":
            print(f"kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- what the nodes say ------------------------------------------------------------------

    def status(self, node_id: int) -> Optional[dict]:
        """Node ``node_id``'s `/status`, or ``None`` if it does not answer in time."""
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.addrs[node_id].http, context=self._http_tls, timeout=STATUS_TIMEOUT_S
        )
        try:
            conn.request("GET", "/status")
            answer = conn.getresponse()
            if answer.status != 200:
                return None
            return json.loads(answer.read())
        except (OSError, ValueError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    def wait_for_leader(self, among: Optional[List[int]] = None, not_: Optional[int] = None) -> int:
        """Wait until every running node of ``among`` answers, all name one leader in one
        term, and that leader says it leads (and is not ``not_``); its id."""
        among = among if among is not None else sorted(self.procs)
        deadline = time.monotonic() + LEADER_WAIT_S
        while True:
            seen = {i: self.status(i) for i in among}
            named = {(s["leader"], s["term"]) for s in seen.values() if s is not None}
            if all(s is not None for s in seen.values()) and len(named) == 1:
                leader, _ = named.pop()
                says = seen.get(leader)
                if leader != 0 and leader != not_ and says is not None and says["role"] == "leader":
                    return leader
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"nodes {among} agree on no leader within {LEADER_WAIT_S}s: {seen}"
                )
            time.sleep(0.02)

    def raft_leader(self) -> int:
        return self.wait_for_leader()

    def log_tails(self, lines: int = 30) -> str:
        out = []
        for i in self.addrs:
            path = self.log(i)
            text = path.read_text(errors="replace").splitlines() if path.exists() else []
            out.append(f"--- node {i} ({path}), last {lines} lines ---")
            out.extend(text[-lines:])
        return "\n".join(out)

    # -- URLs --------------------------------------------------------------------------------

    def hosts(self, ids: Optional[List[int]] = None) -> str:
        ids = ids if ids is not None else self.ids()
        return ",".join(f"127.0.0.1:{self.addrs[i].client}" for i in ids)

    def client_addr(self, node_id: int) -> str:
        return f"127.0.0.1:{self.addrs[node_id].client}"

    def url(self, client: str = "app", ids: Optional[List[int]] = None, extra: str = "") -> str:
        """A `tenure://` URL that speaks TLS as ``client`` (its certificate)."""
        c = self.certs
        query = f"ca={c / 'ca.pem'}&cert={c / f'client-{client}.pem'}&key={c / f'client-{client}-key.pem'}"
        return f"tenure://{self.hosts(ids)}?{query}{extra}"

    def token_url(self, principal: str, ids: Optional[List[int]] = None) -> str:
        """A `tenure://` URL that speaks TLS without a client certificate and presents
        ``principal``'s bearer token."""
        return f"tenure://{self.hosts(ids)}?ca={self.certs / 'ca.pem'}&token_file={self.tokens[principal]}"
