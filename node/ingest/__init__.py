"""Root-dataset ingest: fetch, prepare, read, (preprocess), merge, write, commit.

Modules: `node.ingest.fetch` (fetch steps → local files + source state),
`node.ingest.prepare` (decompress / pipe), `node.ingest.read` (files → Arrow record
batches under a declared schema), `node.ingest.preprocess` (the source's SQL on the
engine), `node.ingest.conform` (fitting input to the dataset schema),
`node.ingest.merge` (merge strategies), `node.ingest.writer` (slice files),
`node.ingest.compute` / `node.ingest.commit` (one attempt, then one head move),
`node.ingest.input_keys` (exactly-once push inputs), `node.ingest.pipeline` (the entry
points `ingest` and `pull`), `node.ingest.dataset_reads` (a dataset's existing records).
Errors live in `node.ingest.errors`.
"""
