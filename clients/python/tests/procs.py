"""Child processes of the tests, started with ``posix_spawn`` rather than ``fork``.

The tests start processes (nodes, a holder, `tenure certs`, scripts/services.sh) while grpc
threads run in this process. ``fork`` runs grpc's at-fork handlers in the child, and there
(seen with Python 3.9, whose subprocess forks where 3.10 and later use vfork) the child can
hang before it ever reaches ``exec``. ``posix_spawn`` runs no at-fork handlers.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple


class Proc:
    """A spawned child: its pid, signals, and its reaping."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"process {self.pid} still runs after {timeout}s")
            time.sleep(0.005)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        """SIGKILL it (if it still runs) and reap it."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.wait(10)


def spawn(
    args: Sequence[str],
    log: Path,
    env: Optional[Dict[str, str]] = None,
    new_session: bool = False,
) -> Proc:
    """Start ``args`` with stdin from /dev/null and stdout and stderr appended to ``log``."""
    program = shutil.which(args[0]) or args[0]
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    pid = os.posix_spawn(
        program,
        list(args),
        dict(os.environ if env is None else env),
        file_actions=actions,
        setsid=new_session,
    )
    return Proc(pid)


def run(
    args: Sequence[str], what: str, env: Optional[Dict[str, str]] = None, timeout: float = 120
) -> Tuple[str, str]:
    """Run a command to its end; its stdout and stderr, or an error that shows them."""
    with tempfile.TemporaryDirectory(prefix="tenure-run-") as d:
        out, err = Path(d) / "out", Path(d) / "err"
        program = shutil.which(args[0]) or args[0]
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(out), os.O_WRONLY | os.O_CREAT, 0o600),
            (os.POSIX_SPAWN_OPEN, 2, str(err), os.O_WRONLY | os.O_CREAT, 0o600),
        ]
        proc = Proc(
            os.posix_spawn(program, list(args), dict(os.environ if env is None else env), file_actions=actions)
        )
        try:
            code = proc.wait(timeout)
        finally:
            proc.kill()
        stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    if code != 0:
        raise RuntimeError(f"{what} failed ({code}): {stderr.strip()}")
    return stdout, stderr


def wait_for_line(path: Path, prefix: str, proc: Proc, timeout: float) -> str:
    """The first line of ``path`` that starts with ``prefix``, once ``proc`` wrote it."""
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_text(errors="replace") if path.exists() else ""
        for line in text.splitlines():
            if line.startswith(prefix):
                return line
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no line {prefix!r} from process {proc.pid}; it wrote:\n{text}")
        time.sleep(0.01)

