"""Exactly-once push ingest: the idempotency key of a push input.

A push ingest records a digest of its input as the source state of its ``AddData``
(`PUSH_INPUT_STATE_KIND`). An input identical to the last one committed through the same
source is recognised by that key and not ingested again, so a run killed after its
commit and re-run with the same input commits nothing the second time. The key is
hashed on a thread while the input is read (`InputKeys`), and a duplicate stops the
computation as soon as its key is known.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

from fbs.model import SourceState
from node.ingest.progress import Progress, ProgressUpdate

__all__ = [
    "PUSH_INPUT_KEY_ALGORITHM",
    "PUSH_INPUT_STATE_KIND",
    "DuplicateInput",
    "InputKeys",
    "push_input_key",
]

#: Source-state kind recording a digest of the last push input (our own kind: the
#: ``odf/`` prefix is reserved for the spec). It makes push ingest exactly-once: a run
#: killed after its commit and re-run with the same input commits nothing the second
#: time. The value is ``sha256:<hex>`` over the source name, the input format and the
#: input bytes (an idempotency key, never an address; SHA-256 runs on the CPU's SHA
#: instructions, several times faster than SHA3 or blake2b here). Keys recorded before
#: as ``blake2b-256:<hex>`` are still recognised.
PUSH_INPUT_STATE_KIND: Final = "odf-node/push-input"
#: The algorithm of new push input keys, and the value prefix of each one accepted.
PUSH_INPUT_KEY_ALGORITHM: Final = "sha256"
_KEY_PREFIXES: Final = {"sha256": "sha256:", "blake2b-256": "blake2b-256:"}
_INPUT_KEY_CHUNK: Final = 1 << 20


def push_input_key(
    source_name: str,
    paths: Sequence[Path],
    input_format: str | None,
    *,
    algorithm: str = PUSH_INPUT_KEY_ALGORITHM,
) -> str:
    """The idempotency key of a push ingest (see `PUSH_INPUT_STATE_KIND`).

    Raises:
        KeyError: an ``algorithm`` not in `_KEY_PREFIXES`.
    """
    prefix = _KEY_PREFIXES[algorithm]
    h = hashlib.sha256() if algorithm == "sha256" else hashlib.blake2b(digest_size=32)
    for part in (source_name, input_format or ""):
        data = part.encode()
        h.update(len(data).to_bytes(8, "little") + data)
    # One buffer read into again and again: no new bytes object per chunk.
    buffer = bytearray(_INPUT_KEY_CHUNK)
    view = memoryview(buffer)
    for path in paths:
        h.update(path.stat().st_size.to_bytes(8, "little"))
        with path.open("rb", buffering=0) as f:
            while n := f.readinto(buffer):
                h.update(view[:n])
    return prefix + h.hexdigest()


def _key_algorithm_of(state: SourceState | None) -> str:
    """The algorithm a recorded push input key was computed with (the current one if none)."""
    if state is not None and state.kind == PUSH_INPUT_STATE_KIND:
        for algorithm, prefix in _KEY_PREFIXES.items():
            if state.value.startswith(prefix):
                return algorithm
    return PUSH_INPUT_KEY_ALGORITHM


class DuplicateInput(Exception):
    """The input is the one last committed through the source: stop computing."""


class InputKeys:
    """The push input keys, hashed on a thread while the input is read.

    ``new`` is the key to record; ``previous`` the key in the algorithm of the source
    state last committed (they are one key unless that state was recorded by an older
    algorithm). `watch` wraps a progress callback so that a duplicate input stops the
    computation as soon as its key is known, not after the whole slice is written.
    """

    def __init__(
        self,
        source_name: str,
        paths: Sequence[Path],
        input_format: str | None,
        last: SourceState | None,
    ) -> None:
        self.source_name = source_name
        self._last = last
        self._previous_algorithm = _key_algorithm_of(last)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="input-key")
        self._keys = self._executor.submit(
            self._compute, source_name, list(paths), input_format, self._previous_algorithm
        )
        self._executor.shutdown(wait=False)

    @staticmethod
    def _compute(
        source_name: str, paths: list[Path], input_format: str | None, previous_algorithm: str
    ) -> tuple[str, str]:
        new = push_input_key(source_name, paths, input_format)
        if previous_algorithm == PUSH_INPUT_KEY_ALGORITHM:
            return new, new
        return new, push_input_key(source_name, paths, input_format, algorithm=previous_algorithm)

    def key(self) -> SourceState:
        """The source state recording this input (waits for the hashing)."""
        new, _ = self._keys.result()
        return SourceState(source_name=self.source_name, kind=PUSH_INPUT_STATE_KIND, value=new)

    def is_duplicate_of(self, last: SourceState | None) -> bool:
        """Whether ``last`` (the committed source state) records this very input."""
        if last is None or last.kind != PUSH_INPUT_STATE_KIND:
            return False
        new, previous = self._keys.result()
        value = previous if _key_algorithm_of(last) == self._previous_algorithm else new
        return last == SourceState(
            source_name=self.source_name, kind=PUSH_INPUT_STATE_KIND, value=value
        )

    def watch(self, progress: Progress | None, last: SourceState | None) -> Progress:
        """``progress``, raising `DuplicateInput` once the keys show a duplicate input."""

        def report(update: ProgressUpdate) -> None:
            if self._keys.done() and self.is_duplicate_of(last):
                raise DuplicateInput
            if progress is not None:
                progress(update)

        return report
