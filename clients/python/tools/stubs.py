"""Generate the gRPC stubs of ``tenure.v1`` from the project's ``.proto`` file.

    python tools/stubs.py            # rewrite src/tenure/v1/tenure_pb2{.py,.pyi,_grpc.py}

The stubs are checked in (docs/PYTHON.md says why); ``tests/test_stubs.py`` calls
:func:`generate` into a temporary directory and fails if the result differs from what is
checked in. Needs ``grpcio-tools`` at the version pinned in pyproject.toml's ``test`` extra.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# clients/python/tools -> the repository's root.
REPO = HERE.parents[2]
PROTO_ROOT = REPO / "crates" / "proto" / "proto"
PROTO = "tenure/v1/tenure.proto"
# The package's source root: `tenure/v1/…` under it is where the stubs live.
PACKAGE_ROOT = HERE.parent / "src"
GENERATED = ("tenure_pb2.py", "tenure_pb2.pyi", "tenure_pb2_grpc.py")


def generate(out: Path) -> list[Path]:
    """Run protoc (grpcio-tools') on the .proto file into ``out``; the files written."""
    from grpc_tools import protoc  # the test extra's; imported here so that --help works

    include = Path(protoc.__file__).parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            PROTO,
        ]
    )
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code} on {PROTO_ROOT / PROTO}")
    return [out / "tenure" / "v1" / name for name in GENERATED]


def main() -> int:
    written = generate(PACKAGE_ROOT)
    for path in written:
        print(f"wrote {path.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
