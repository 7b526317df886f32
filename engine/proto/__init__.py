"""Generated gRPC/protobuf modules of the engine service (see scripts/gen-proto).

Do not edit the ``engine_pb2*`` files: they are regenerated from ``engine.proto``.
"""
