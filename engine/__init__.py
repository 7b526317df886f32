"""The ODF engine: kamu-compatible Spark SQL transforms served over gRPC.

Modules (heavy dependencies such as PySpark load only when a session is created):

- `engine.server`: ``engine.Engine`` gRPC service (`EngineServer`, `run_engine`);
- `engine.client`: `EngineClient` (execute_transform / execute_raw_query) and
  `raise_for_result`;
- `engine.process`: start an engine subprocess on a free port and wait until ready;
- `engine.transform` / `engine.raw_query`: the executors (kamu Spark engine semantics);
- `engine.spark`: the SparkSession factory and settings; `engine.checkpoint`: watermark
  checkpoints; `engine.cli`: ``python -m engine``; `engine.errors`: the error tree;
- `engine.proto`: generated protobuf/gRPC modules (scripts/gen-proto).
"""
