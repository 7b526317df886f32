"""`p2p.sync._first_head`: which error a pull without a head record reports.

When no source answered at all, the first source's own error is raised (e.g. an
unreachable one: exit 7 at the CLI, a retry may cure it); when some source answered and
none has the dataset, a not-found naming the sources.
"""

from __future__ import annotations

import asyncio

import pytest

from fbs.multiformats import Multihash
from p2p.errors import PeerUnavailable, SourceUnreachable
from p2p.sync import _first_head, _Sources


class _Source:
    """A source whose ``get_head`` answers ``head`` or raises ``error``."""

    def __init__(self, name: str, head: Multihash | None = None, error: Exception | None = None):
        self.name = name
        self._head, self._error = head, error

    async def get_head(self) -> Multihash | None:
        if self._error is not None:
            raise self._error
        return self._head


def _first(*sources: _Source) -> Multihash:
    return asyncio.run(_first_head(_Sources(sources, {})))  # type: ignore[arg-type]


def test_no_source_answered_raises_the_first_error() -> None:
    down = SourceUnreachable("GET a/refs/head: cannot connect to a:1: connection refused")
    with pytest.raises(SourceUnreachable, match="connection refused"):
        _first(_Source("a", error=down), _Source("b", error=SourceUnreachable("b down")))


def test_a_source_without_the_dataset_is_named() -> None:
    down = SourceUnreachable("b down")
    with pytest.raises(PeerUnavailable, match=r"^a, b: no such dataset there \(no head\)$"):
        _first(_Source("a"), _Source("b", error=down))


def test_the_first_head_found_wins() -> None:
    h = Multihash.sha3_256(b"block")
    assert _first(_Source("a", error=SourceUnreachable("down")), _Source("b", head=h)) == h
