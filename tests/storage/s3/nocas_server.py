"""A minimal S3-like HTTP server that ignores conditional headers (a no-CAS store).

It stores whatever is PUT (``If-None-Match`` and ``If-Match`` are not looked at),
as some S3-compatible gateways do; the S3 backend must refuse to write to it.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1: answers clients' ``Expect: 100-continue`` (boto3 sends it on PUT) at once.
    protocol_version = "HTTP/1.1"
    objects: dict[str, bytes]
    writes: list[str]

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _etag(self, data: bytes) -> str:
        return f'"{hashlib.md5(data).hexdigest()}"'

    def do_PUT(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.objects[self.path] = data
        self.writes.append(self.path)
        self.send_response(200)
        self.send_header("ETag", self._etag(data))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _read(self, with_body: bool) -> None:
        data = self.objects.get(self.path.split("?")[0])
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("ETag", self._etag(data))
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Last-Modified", "Sun, 29 Nov 2026 08:00:00 GMT")
        self.end_headers()
        if with_body:
            self.wfile.write(data)

    def do_GET(self) -> None:
        self._read(True)

    def do_HEAD(self) -> None:
        self._read(False)

    def do_DELETE(self) -> None:
        self.objects.pop(self.path, None)
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()


@contextmanager
def nocas_server() -> Iterator[tuple[str, dict[str, bytes], list[str]]]:
    """Serve on a free loopback port: ``(endpoint, objects by path, paths written)``."""
    handler = type("Handler", (_Handler,), {"objects": {}, "writes": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", handler.objects, handler.writes
    finally:
        server.shutdown()
        server.server_close()
