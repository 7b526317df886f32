"""The ODF Smart Transfer Protocol v1 as kamu-cli speaks it (odf-format.md 4.3).

Two WebSocket routes per dataset, ``/{dataset}/pull`` and ``/{dataset}/push``, carrying
serde-style JSON text messages; metadata travels as gzip-compressed tar batches and
objects by plain HTTP (``HttpDownload``/``HttpUpload`` URLs, on this node the simple
protocol's ``data/`` and ``checkpoints/`` routes).

- `p2p.smart_transfer.messages`: the message model, its JSON and the batch codec
  (pure: no I/O);
- `p2p.smart_transfer.server`: the aiohttp WebSocket handlers (`SMART_ROUTES`);
- `p2p.smart_transfer.client`: `SmartSource` (an `ObjectSource` for `p2p.sync.pull_dataset`)
  and `smart_push`.

Everything received goes through `p2p.receive`, the node's one receive path.
"""
