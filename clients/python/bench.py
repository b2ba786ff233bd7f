"""What one Python process gets out of a tenure cluster through this client: session
keepalives and fenced writes, on a real 3-node TLS cluster that the benchmark starts and
stops itself (the tests' own cluster, tests/cluster.py: `tenure certs`, client
certificates, an auth file).

    clients/python/bench.py [--seconds 10] [--out FILE] [--sessions 1000] [--streams 16]
                            [--writers 16] [--binary PATH]

Run it with the interpreter of the environment clients/python/test.sh makes
(~/.cache/tenure/python-venv-X.Y/bin/python), which has the package installed.

The server binary is --binary, else the release build if there is one, else the debug
build (under $CARGO_TARGET_DIR, default ~/.cache/tenure/target); it is copied to a
temporary directory first, so that a build running meanwhile cannot replace it under the
cluster. A debug build's figures say little about the server: the output says which one ran.

Measured, one after the other, each for --seconds after a second of warm-up:

- keepalives, 1 session: one session, one `KeepAlive` stream at the leader, one renewal in
  flight (the next is sent when the last is acknowledged): the latency of a renewal, as the
  client's keepalive thread sends them (a queue handed to grpc, a reader thread);
- keepalives, N sessions: --sessions sessions spread over --streams streams at the leader,
  each session with one renewal in flight, renewed again as soon as it is acknowledged;
- fenced put, 1 writer: one leader's `Leadership.fenced_put` of 64 bytes, back to back;
- fenced put, W threads, 1 leadership: --writers threads sharing that one leader (one
  client, one session, one connection), each writing its own key;
- fenced put, W clients: --writers threads, each with a client and a leadership (an
  election) of its own, as the Rust harness's "16 clients" are.

Latencies are per operation, p50 and p99 by nearest rank; a rate is operations completed in
the window over its length. `--out FILE` writes everything as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

# grpc's C core logs at INFO otherwise (as in tests/conftest.py).
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import grpc  # noqa: E402

import tenure  # noqa: E402
from tenure.v1 import tenure_pb2 as pb  # noqa: E402

HERE = Path(__file__).resolve().parent
# The tests' cluster (tests/cluster.py and tests/procs.py), reused as it is.
sys.path.insert(0, str(HERE / "tests"))

#: Untimed operations before each window.
WARMUP_S = 1.0
#: TTL of the keepalive benchmark's sessions: far longer than the run, so that none expires
#: while the others are granted.
KEEPALIVE_TTL_MS = 120_000
#: Size of each fenced write's value (the Rust harness's write is 64 bytes too).
VALUE = b"v" * 64
#: Threads granting the keepalive benchmark's sessions.
GRANTERS = 16


def target_dir() -> Path:
    given = os.environ.get("CARGO_TARGET_DIR")
    return Path(given) if given else Path.home() / ".cache/tenure/target"


def pick_binary(given: Optional[str]) -> Tuple[Path, str]:
    """The server binary and what build it is ("release", "debug" or "given")."""
    if given:
        return Path(given), "given"
    for profile in ("release", "debug"):
        path = target_dir() / profile / "tenure"
        if path.is_file() and os.access(path, os.X_OK):
            return path, profile
    raise SystemExit(
        f"no tenure binary under {target_dir()}/{{release,debug}}: build one "
        "(`cargo build --release -p tenure-cli`) or pass --binary"
    )


# -- what was measured ---------------------------------------------------------------------


def percentile(sorted_ms: List[float], p: float) -> Optional[float]:
    """Nearest rank."""
    if not sorted_ms:
        return None
    rank = max(1, -(-len(sorted_ms) * p // 100))
    return sorted_ms[int(rank) - 1]


@dataclass
class Result:
    name: str
    ops: int
    seconds: float
    ops_per_s: float
    p50_ms: Optional[float]
    p99_ms: Optional[float]
    max_ms: Optional[float]
    errors: Dict[str, int]
    #: The Raft leader and term when the window started and when it ended.
    raft: Dict[str, object]
    #: CPU over the window, in % of one core: this process, the three nodes, everything else.
    cpu: Dict[str, float]
    notes: List[str] = field(default_factory=list)


class Window:
    """One timed window: operations complete from many threads; those that complete inside
    the window are counted and their latencies kept."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.start = time.monotonic() + WARMUP_S
        self.end = self.start + seconds
        self._lock = threading.Lock()
        self.latencies: List[float] = []
        self.errors: Dict[str, int] = {}

    def over(self) -> bool:
        return time.monotonic() >= self.end

    def done(self, sent: float, acked: float) -> None:
        if self.start <= sent and acked <= self.end:
            with self._lock:
                self.latencies.append((acked - sent) * 1_000)

    def failed(self, what: str) -> None:
        with self._lock:
            self.errors[what] = self.errors.get(what, 0) + 1

    def sleep_until_end(self) -> None:
        while not self.over():
            time.sleep(min(0.05, max(0.0, self.end - time.monotonic())))


class CpuMeter:
    """CPU time of this process, of the nodes, and of the whole machine, from /proc."""

    def __init__(self, node_pids: Callable[[], List[int]]):
        self._node_pids = node_pids
        self._tick = os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _machine() -> Tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields[:8]) - idle, sum(fields[:8])

    @staticmethod
    def _process(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            return int(parts[11]) + int(parts[12])  # utime + stime
        except (OSError, IndexError, ValueError):
            return 0

    def sample(self) -> Tuple[float, int, int, int]:
        busy, _ = self._machine()
        nodes = sum(self._process(p) for p in self._node_pids())
        return time.monotonic(), busy, self._process(os.getpid()), nodes

    def since(self, before: Tuple[float, int, int, int]) -> Dict[str, float]:
        now = self.sample()
        wall = now[0] - before[0]
        pct = lambda ticks: round(100.0 * ticks / self._tick / wall, 1)  # noqa: E731
        busy, me, nodes = now[1] - before[1], now[2] - before[2], now[3] - before[3]
        return {
            "bench_process": pct(me),
            "nodes": pct(nodes),
            "everything_else": pct(max(0, busy - me - nodes)),
            "machine_busy": pct(busy),
        }


# -- keepalives ----------------------------------------------------------------------------


class KeepAliveStream:
    """One `KeepAlive` stream carrying several sessions, each with one renewal in flight:
    requests go through a queue that grpc reads (as the client's own keepalive thread does),
    a reader thread records each acknowledgement and renews that session again."""

    def __init__(self, node, sessions: List[Tuple[int, bytes]], window: Window):
        self._node = node
        self._window = window
        self._secrets = dict(sessions)
        self._seq: Dict[int, int] = {s: 0 for s, _ in sessions}
        self._sent: Dict[int, float] = {}
        self._requests: "queue.SimpleQueue[Optional[pb.KeepAliveRequest]]" = queue.SimpleQueue()
        self._call = node.sessions.KeepAlive(
            iter(self._requests.get, None), metadata=node.metadata
        )
        self.acks = 0
        self.failure: Optional[str] = None
        self._thread = threading.Thread(target=self._read, daemon=True)

    def _send(self, session: int) -> None:
        self._seq[session] += 1
        self._sent[session] = time.monotonic()
        self._requests.put(
            pb.KeepAliveRequest(
                session_id=session, seq=self._seq[session], session_secret=self._secrets[session]
            )
        )

    def start(self) -> None:
        for session in self._secrets:
            self._send(session)
        self._thread.start()

    def _read(self) -> None:
        window = self._window
        try:
            for answer in self._call:
                acked = time.monotonic()
                sent = self._sent.pop(answer.session_id, None)
                if sent is None:
                    continue
                self.acks += 1
                window.done(sent, acked)
                if not window.over():
                    self._send(answer.session_id)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                self.failure = f"{e.code().name}: {e.details()}"
                window.failed(type(tenure.errors.from_rpc_error(e)).__name__)

    def stop(self) -> None:
        self._requests.put(None)
        self._call.cancel()
        self._thread.join(5)


def grant_sessions(client: tenure.Client, n: int) -> List[Tuple[int, bytes]]:
    """``n`` sessions of :data:`KEEPALIVE_TTL_MS`, granted from a few threads at once."""
    granted: List[Tuple[int, bytes]] = []
    lock = threading.Lock()
    left = [n]

    def grant() -> None:
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            secret = secrets.token_bytes(16)
            request = pb.GrantRequest(
                ttl_ms=KEEPALIVE_TTL_MS,
                request_nonce=secrets.randbits(63) + 1,
                session_secret=secret,
            )
            answer = client.channel.call(lambda node: node.sessions.Grant(request, **node.opts()))
            with lock:
                granted.append((answer.session_id, secret))

    threads = [threading.Thread(target=grant, daemon=True) for _ in range(min(GRANTERS, n))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(granted) != n:
        raise RuntimeError(f"granted {len(granted)} of {n} sessions")
    return granted


def keepalives(
    client: tenure.Client, sessions: List[Tuple[int, bytes]], streams: int, window: Window
) -> List[str]:
    """Renew ``sessions`` over ``streams`` streams at the leader until the window ends."""
    # The grants followed the cluster's not-leader hints: the channel's guess is the leader.
    node = client.channel.node_at(client.channel.guess())
    shares = [sessions[i::streams] for i in range(streams)]
    open_ = [KeepAliveStream(node, share, window) for share in shares if share]
    for s in open_:
        s.start()
    window.sleep_until_end()
    for s in open_:
        s.stop()
    return [f"stream failed: {s.failure}" for s in open_ if s.failure]


# -- fenced writes -------------------------------------------------------------------------


def fenced_puts(writers: List[Tuple[tenure.Leadership, str]], window: Window) -> List[str]:
    """Each (leadership, key) in a thread of its own, writing back to back until the window
    ends."""

    def write(lead: tenure.Leadership, key: str) -> None:
        while not window.over():
            sent = time.monotonic()
            try:
                lead.fenced_put(key, VALUE)
            except tenure.Error as e:
                window.failed(type(e).__name__)
                continue
            window.done(sent, time.monotonic())

    threads = [threading.Thread(target=write, args=w, daemon=True) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [
        f"leadership {lead.election} lost: {lead.lost_reason}"
        for lead in {lead for lead, _ in writers}
        if lead.lost.is_set()
    ]


# -- the run -------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each window (10)")
    parser.add_argument("--out", help="write the results as JSON to this file")
    parser.add_argument("--sessions", type=int, default=1000, help="sessions renewed at once (1000)")
    parser.add_argument("--streams", type=int, default=16, help="KeepAlive streams they share (16)")
    parser.add_argument("--writers", type=int, default=16, help="concurrent fenced writers (16)")
    parser.add_argument("--binary", help="the tenure binary (default: release, else debug build)")
    args = parser.parse_args()

    source, profile = pick_binary(args.binary)
    print(f"binary: {source} ({profile} build)")
    if profile == "debug":
        print(
            "WARNING: a debug build of the server: its figures are not representative of "
            "tenure (build with --release for those)"
        )

    # SIGTERM ends the run like ^C: through the finally blocks that stop the cluster.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    scratch = Path(tempfile.mkdtemp(prefix="tenure-py-bench-"))
    binary = scratch / "tenure"
    shutil.copy2(source, binary)
    os.environ["TENURE_BIN"] = str(binary)
    from cluster import Cluster  # tests/cluster.py

    meta: Dict[str, object] = {
        "binary": str(source),
        "build": profile,
        "binary_modified": time.strftime(
            "%Y-%m-%dT%H:%M:%S%z", time.localtime(source.stat().st_mtime)
        ),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": args.seconds,
        "warmup_seconds": WARMUP_S,
        "sessions": args.sessions,
        "streams": args.streams,
        "writers": args.writers,
        "value_bytes": len(VALUE),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "cpus": os.cpu_count(),
        "load_average_before": os.getloadavg(),
    }
    results: List[Result] = []
    cluster = None
    clients: List[tenure.Client] = []
    try:
        cluster = Cluster()
        print(f"cluster: 3 nodes with TLS in {cluster.dir}; Raft leader node {cluster.raft_leader()}")
        meter = CpuMeter(lambda: [p.pid for p in cluster.procs.values()])

        def raft() -> Dict[str, object]:
            s = cluster.status(cluster.raft_leader())
            return {"leader": s and s.get("id", s.get("leader")), "term": s and s.get("term")}

        def measure(name: str, run: Callable[[Window], List[str]]) -> None:
            print(f"measuring {name} ...", flush=True)
            before_raft = raft()
            window = Window(args.seconds)
            cpu_at_start: List[Tuple[float, int, int, int]] = []

            def start_cpu() -> None:
                time.sleep(max(0.0, window.start - time.monotonic()))
                cpu_at_start.append(meter.sample())

            threading.Thread(target=start_cpu, daemon=True).start()
            notes = run(window)
            cpu = meter.since(cpu_at_start[0]) if cpu_at_start else {}
            after_raft = raft()
            lat = sorted(window.latencies)
            r = Result(
                name=name,
                ops=len(lat),
                seconds=window.seconds,
                ops_per_s=round(len(lat) / window.seconds, 1),
                p50_ms=percentile(lat, 50),
                p99_ms=percentile(lat, 99),
                max_ms=lat[-1] if lat else None,
                errors=window.errors,
                raft={"before": before_raft, "after": after_raft},
                cpu=cpu,
                notes=notes,
            )
            if before_raft != after_raft:
                r.notes.append(f"Raft leader or term changed: {before_raft} -> {after_raft}")
            results.append(r)

        # Keepalives first, before any leadership's own background threads run.
        ka_client = tenure.Client(cluster.url("app"))
        clients.append(ka_client)
        one = grant_sessions(ka_client, 1)
        measure("keepalive, 1 session, 1 in flight", lambda w: keepalives(ka_client, one, 1, w))
        t0 = time.monotonic()
        many = grant_sessions(ka_client, args.sessions)
        meta["grant_seconds"] = round(time.monotonic() - t0, 2)
        measure(
            f"keepalive, {args.sessions} sessions, {args.streams} streams",
            lambda w: keepalives(ka_client, many, args.streams, w),
        )

        client = tenure.Client(cluster.url("app"))
        clients.append(client)
        lead = client.campaign("bench/write", b"bench", ttl=10)
        measure("fenced put, 1 writer", lambda w: fenced_puts([(lead, "bench/w")], w))
        measure(
            f"fenced put, {args.writers} threads, 1 leadership",
            lambda w: fenced_puts([(lead, f"bench/w{i}") for i in range(args.writers)], w),
        )
        own: List[Tuple[tenure.Leadership, str]] = []
        for i in range(args.writers):
            c = tenure.Client(cluster.url("app"))
            clients.append(c)
            own.append((c.campaign(f"bench/write-{i}", b"bench", ttl=10), f"bench/own{i}"))
        measure(f"fenced put, {args.writers} clients", lambda w: fenced_puts(own, w))
    finally:
        for c in clients:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - the cluster goes next anyway
                pass
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    meta["load_average_after"] = os.getloadavg()

    print()
    print(f"binary: {source} ({profile} build{'; NOT representative' if profile == 'debug' else ''})")
    print(
        f"python {meta['python']}, grpcio {meta['grpcio']}, {meta['cpus']} CPUs, load average "
        f"{meta['load_average_before'][0]:.2f} before, {meta['load_average_after'][0]:.2f} after"  # type: ignore[index]
    )
    print()
    header = "| measurement | ops/s | p50 (ms) | p99 (ms) | max (ms) | ops | errors | CPU: bench / nodes / other (% of a core) |"
    print(header)
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    fmt = lambda v: "–" if v is None else f"{v:.2f}"  # noqa: E731
    for r in results:
        errors = sum(r.errors.values())
        cpu = (
            f"{r.cpu['bench_process']:.0f} / {r.cpu['nodes']:.0f} / {r.cpu['everything_else']:.0f}"
            if r.cpu
            else "–"
        )
        rate = f"{r.ops_per_s:,.0f}".replace(",", " ")
        print(
            f"| {r.name} | {rate} | {fmt(r.p50_ms)} | {fmt(r.p99_ms)} | "
            f"{fmt(r.max_ms)} | {r.ops} | {errors} | {cpu} |"
        )
    for r in results:
        for what, n in r.errors.items():
            print(f"{r.name}: {n} × {what}")
        for note in r.notes:
            print(f"{r.name}: {note}")
    if args.out:
        Path(args.out).write_text(
            json.dumps({"run": meta, "results": [asdict(r) for r in results]}, indent=2) + "\n"
        )
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
