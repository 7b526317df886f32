"""`MemorySource`: an `ObjectSource` served from memory, honest or with chosen faults.

The socket-free twin of `p2p.libp2p.source.Libp2pSource` and `p2p.http.source.HttpSource`
(as dulwich's ``MemoryObjectStore`` is of its disk store): it holds a snapshot of a
dataset (blocks, data slices, checkpoints) and answers the `ObjectSource` calls the
way a remote peer would, so `p2p.sync.pull_dataset` can be tested without hosts or
servers. `Faults` makes it a hostile or broken peer: wrong or truncated object bytes,
tampered or missing blocks, a false head, or no answer at all. The contract every
source keeps is in ``tests/p2p/test_source_contract.py``.

Like a remote peer, it does not verify what it serves: that is `pull_dataset`'s job.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from fbs.codec import decode_block
from fbs.multiformats import Multihash
from p2p.errors import PeerMisbehaved, PeerUnavailable, TransferError
from p2p.sync import ObjectKind
from storage.dataset import Dataset
from storage.fsutil import write_all

__all__ = ["DEFAULT_BATCH_BLOCKS", "NO_FAULTS", "Faults", "MemorySource"]

#: Blocks per `MemorySource.get_blocks` answer by default: small, so that pulls of
#: ordinary test datasets take several batches as they do over the network.
DEFAULT_BATCH_BLOCKS: Final = 4


@dataclass(frozen=True, slots=True)
class Faults:
    """How a `MemorySource` misbehaves (the default: not at all).

    Attributes:
        wrong_bytes: objects served with one bit flipped (same size).
        truncated: objects served without their last byte.
        tampered_blocks: blocks served with one bit flipped.
        missing: blocks and objects the source says it does not have.
        head: the head `get_head` reports instead of the real one.
        down: every call fails as if the peer could not be reached.
    """

    wrong_bytes: frozenset[Multihash] = frozenset()
    truncated: frozenset[Multihash] = frozenset()
    tampered_blocks: frozenset[Multihash] = frozenset()
    missing: frozenset[Multihash] = frozenset()
    head: Multihash | None = None
    down: bool = False


#: The honest source's faults.
NO_FAULTS: Final = Faults()


def _flip(data: bytes) -> bytes:
    """``data`` with the lowest bit of its middle byte flipped."""
    if not data:
        return b"\x00"
    i = len(data) // 2
    return data[:i] + bytes([data[i] ^ 1]) + data[i + 1 :]


@dataclass(slots=True)
class MemorySource:
    """One dataset served from memory (see the module docstring).

    Attributes:
        head: the dataset's head (``None``: the source does not have the dataset).
        blocks: raw blocks by hash.
        data: data slices by physical hash.
        checkpoints: checkpoints by physical hash.
        faults: how it misbehaves.
        batch_blocks: most blocks per `get_blocks` answer.
        label: the `name` suffix.
        calls: requests answered so far, by method name (for tests).
    """

    head: Multihash | None
    blocks: Mapping[Multihash, bytes] = field(default_factory=dict)
    data: Mapping[Multihash, bytes] = field(default_factory=dict)
    checkpoints: Mapping[Multihash, bytes] = field(default_factory=dict)
    faults: Faults = NO_FAULTS
    batch_blocks: int = DEFAULT_BATCH_BLOCKS
    label: str = "peer"
    calls: collections.Counter[str] = field(default_factory=collections.Counter)

    @classmethod
    def of_dataset(
        cls,
        ds: Dataset,
        faults: Faults = NO_FAULTS,
        *,
        batch_blocks: int = DEFAULT_BATCH_BLOCKS,
        label: str = "peer",
    ) -> MemorySource:
        """A snapshot of ``ds``: its blocks from the head back, and every stored object."""
        head = ds.head()
        blocks = {h: raw for h, raw, _block in ds.iter_blocks(head)} if head else {}
        data = {h: ds.layout.data.get(h) for h in ds.layout.data.iter_hashes()}
        cps = {h: ds.layout.checkpoints.get(h) for h in ds.layout.checkpoints.iter_hashes()}
        return cls(head, blocks, data, cps, faults, batch_blocks, label)

    @property
    def name(self) -> str:
        """``memory:<label>``."""
        return f"memory:{self.label}"

    async def _answer(self, call: str) -> None:
        self.calls[call] += 1
        await asyncio.sleep(0)  # a real source yields to the event loop on every call
        if self.faults.down:
            raise TransferError(f"{self.name}: unreachable")

    async def get_head(self) -> Multihash | None:
        """The head (or the false one of `Faults.head`); ``None`` without the dataset.

        Raises:
            TransferError: the source is down.
        """
        await self._answer("get_head")
        if self.head is None:
            return None
        return self.faults.head if self.faults.head is not None else self.head

    async def get_blocks(self, head: Multihash, stop_at: Multihash | None) -> list[bytes]:
        """Up to `batch_blocks` raw blocks from ``head`` back, newest first, ``stop_at`` excluded.

        Raises:
            PeerUnavailable: block ``head`` is not held (or is `Faults.missing`).
            TransferError: the source is down.
        """
        await self._answer("get_blocks")
        out: list[bytes] = []
        h: Multihash | None = head
        while h is not None and h != stop_at and len(out) < self.batch_blocks:
            raw = self.blocks.get(h)
            if raw is None or h in self.faults.missing:
                if out:
                    break  # the caller asks again from here
                raise PeerUnavailable(f"{self.name}: block {h} not found")
            out.append(_flip(raw) if h in self.faults.tampered_blocks else raw)
            # The walk follows the honest bytes: a tampered block is served in the place
            # of the real one, as a peer that alters blocks in flight would.
            h = decode_block(raw).prev_block_hash
        return out

    async def get_object(
        self, kind: ObjectKind, h: Multihash, dest_path: Path, *, expected_size: int | None = None
    ) -> bytes | None:
        """Write object ``h`` into the new file ``dest_path``; the digest of what was written.

        Raises:
            PeerUnavailable: the object is not held (or is `Faults.missing`); no file
                is created.
            PeerMisbehaved: the object has more bytes than ``expected_size`` (a
                declared size no peer should send); no file is created.
            TransferError: the source is down.
        """
        await self._answer("get_object")
        store = self.data if kind == "data" else self.checkpoints
        body = store.get(h)
        if body is None or h in self.faults.missing:
            raise PeerUnavailable(f"{self.name}: {kind} object {h} not found")
        if h in self.faults.wrong_bytes:
            body = _flip(body)
        if h in self.faults.truncated:
            body = body[:-1]
        if expected_size is not None and len(body) > expected_size:
            raise PeerMisbehaved(f"{self.name}: {kind} object {h}: more than {expected_size} bytes")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(dest_path, flags, 0o600)
        try:
            write_all(fd, body)
        finally:
            os.close(fd)
        return hashlib.sha3_256(body).digest()
