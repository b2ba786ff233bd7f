"""The gRPC API of a tenure cluster (``tenure.v1``), generated from
``crates/proto/proto/tenure/v1/tenure.proto`` by ``tools/stubs.py``: messages in
:mod:`tenure.v1.tenure_pb2`, service stubs in :mod:`tenure.v1.tenure_pb2_grpc`. Do not edit
the generated files; ``tests/test_stubs.py`` fails when they differ from the ``.proto``."""
