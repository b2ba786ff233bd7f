"""The checked-in gRPC stubs are what the .proto file generates, byte for byte, with the
grpcio-tools version pinned in pyproject.toml (docs/PYTHON.md says why they are checked in).
When this fails, run `python clients/python/tools/stubs.py` and commit the result."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _stubs_module():
    spec = importlib.util.spec_from_file_location("stubs", ROOT / "tools" / "stubs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pinned_generator_is_installed() -> None:
    pinned = re.search(r'"grpcio-tools==([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert pinned, "pyproject.toml pins grpcio-tools in the test extra"
    assert importlib.metadata.version("grpcio-tools") == pinned.group(1)
    generated = (ROOT / "src/tenure/v1/tenure_pb2_grpc.py").read_text()
    assert f"GRPC_GENERATED_VERSION = '{pinned.group(1)}'" in generated


def test_checked_in_stubs_match_the_proto_file(tmp_path: Path) -> None:
    stubs = _stubs_module()
    fresh = stubs.generate(tmp_path)
    for path in fresh:
        checked_in = ROOT / "src" / "tenure" / "v1" / path.name
        assert checked_in.read_bytes() == path.read_bytes(), (
            f"{checked_in} differs from what {stubs.PROTO_ROOT / stubs.PROTO} generates: "
            "run `python clients/python/tools/stubs.py`"
        )
