"""One SeaweedFS per test session, whichever test modules ask for it, and moto per module.

pytest keeps a session fixture per module that defines or imports it, so the S3 tests
outside ``tests/storage/s3`` (which import its fixtures) would each start their own
server. `SharedSeaweed` counts the fixtures that hold the server: the first starts it
(and sets the AWS environment), the last to let go stops it by its PID and restores
the environment.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.storage.s3.seaweed import SeaweedServer, start_seaweed


@dataclass(slots=True)
class SharedSeaweed:
    """The session's server, how many fixtures hold it, the environment it replaced."""

    server: SeaweedServer | None = None
    holders: int = 0
    saved_env: dict[str, str | None] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def hold(self, data_dir: Callable[[], Path]) -> Iterator[SeaweedServer]:
        """The running server (started on first use; ``data_dir`` is called then)."""
        with self.lock:
            if self.server is None:
                self.server = start_seaweed(data_dir())
                self.saved_env = {k: os.environ.get(k) for k in self.server.env()}
                os.environ.update(self.server.env())
            self.holders += 1
            server = self.server
        try:
            yield server
        finally:
            with self.lock:
                self.holders -= 1
                if self.holders == 0:
                    self._stop()

    def _stop(self) -> None:
        assert self.server is not None
        self.server.stop()
        self.server = None
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: The session's server, shared by every module's ``seaweed`` fixture.
SHARED: SharedSeaweed = SharedSeaweed()
