"""Root-dataset ingest: fetch, prepare, read, (preprocess), merge, write.

Modules: `node.ingest.fetch` (fetch steps → local files + source state),
`node.ingest.prepare` (decompress / pipe), `node.ingest.read` (files → Arrow record
batches under a declared schema), `node.ingest.merge` and `node.ingest.writer` /
`node.ingest.pipeline` (merge strategies, committing slices). Errors live in
`node.ingest.errors`.
"""
