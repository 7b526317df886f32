"""Spark reading a transform's inputs from S3 and writing its output there, from executors
that see nothing of the node's disk, without Hadoop's S3 connector.

- `engine.s3io.executor`: the Python Data Source ``odf_s3`` over pyarrow's S3 filesystem
  (shipped to executors by value);
- `engine.s3io.settings`: when the engine uses it (``spark.odf.s3.staging``) and what the
  executors are given (credentials through ``spark.executorEnv.*``, the Python to run);
- `engine.s3io.objects`: input objects named by URL, checked by hash on the driver before
  their footers are read (cached by digest);
- `engine.s3io.read` / `engine.s3io.write`: an input as a DataFrame in offset order, the
  output as parts under a staging prefix joined into the one output file;
- `engine.s3io.register`: the data source registered with a request's session;
- `engine.s3io.remote`: an engine client that names a request's input slices by their
  keys on S3;
- `engine.s3io.warmup`: the engine's warm-up slice read from the staging location.
"""
