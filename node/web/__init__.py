"""The node's web UI: pages for people, served by ``odf node run`` on its HTTP port.

``/ui/`` lists the datasets (search, kind, head, size, freshness), ``/ui/dataset?ds=A``
shows one (schema, metadata chain as sentences, data preview with paging, lineage graph,
signed head and attestations), ``/ui/sql`` runs a query on the embedded engine (table and
chart), ``/ui/network`` shows peers, bans with reasons and followed datasets (and changes
what the node follows, by alias or DID, with the node's token typed in: the one write).
Open pages follow new heads over server-sent events (``/ui/events``) without reloading.

The stack, and why: HTML rendered on the server from small Python functions
(`node.web.html`, `node.web.render`: every value escaped at one place, no template
engine to install or sandbox), the lineage graph and the result chart drawn on the
server as inline SVG (no chart library), and one short vanilla script
(``static/app.js``: EventSource, fetch-and-swap, search) served from this package. No
build step, no framework, nothing fetched from the internet, and a Content-Security-
Policy that allows only the node's own script and stylesheet. Modules:

- `node.web.app`: routes and handlers (`mount`);
- `node.web.rows`: one row per dataset, cached while its head stays the same (the list,
  the live updates, the lineage graphs and the API's ``/api/datasets`` share it);
- `node.web.views`: what the dataset page shows, read from the workspace (blocking; run
  in threads);
- `node.web.graph`: the lineage around a dataset, from the list rows' inputs;
- `node.web.render`, `node.web.lineage`, `node.web.chart`, `node.web.sqlpage`: markup;
- `node.web.live`: the head watcher behind the event stream.
"""

from node.web.app import mount

__all__ = ["mount"]
