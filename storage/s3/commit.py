"""Committing blocks straight into a dataset on S3, by compare-and-swap of ``refs/head``.

`S3Committer` is the write path of a dataset whose chain lives in a bucket: several
processes (on several machines) may commit to one dataset at once, and none loses a
commit. Each attempt reads the head, brings its chain state up to that head (blocks
read since the last attempt are hashed before they are parsed, then checked with the
chain rules, as every append is), builds the next block, checks it on top of that
state, writes it create-only, and moves the head from the value it read with
``If-Match``. A writer that lost the race starts again from the new head, after a
short random pause; an unknown head is never overwritten.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from fbs.codec import block_hash, decode_block, encode_block
from fbs.model import MetadataBlock, MetadataEvent
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp
from storage.chain import ChainState, validate_append
from storage.errors import MissingObject, ObjectNotFound, RefCASFailed
from storage.s3.layout import S3DatasetLayout

#: Attempts before a commit gives up (each lost to another writer).
DEFAULT_MAX_ATTEMPTS: Final = 200
#: Upper bound of the random pause after a lost race, doubled per loss up to 16x.
BACKOFF_S: Final = 0.01


@dataclass(frozen=True, slots=True)
class S3Commit:
    """A commit that won: the new head, its sequence number, attempts it took."""

    head: Multihash
    sequence_number: int
    attempts: int


class S3Committer:
    """Commits to the dataset at ``layout`` (see the module docstring); not thread-safe.

    Args:
        layout: the dataset's stores on S3.
        clock: the system time of new blocks (never earlier than the head's).
        max_attempts: lost races before `RefCASFailed` is raised.
    """

    def __init__(
        self,
        layout: S3DatasetLayout,
        *,
        clock: Callable[[], Timestamp] = Timestamp.now,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        self._layout = layout
        self._clock = clock
        self._max_attempts = max_attempts
        self._state: ChainState | None = None

    def state(self, head: Multihash | None) -> ChainState | None:
        """The chain state at ``head``, from the blocks read since the last call.

        Raises:
            MissingObject: a block of the chain is not in the bucket.
            CorruptObject: a block does not match its hash.
            ChainRuleViolation: the chain breaks a rule.
        """
        known = self._state.head if self._state is not None else None
        new: list[tuple[Multihash, MetadataBlock]] = []
        h = head
        while h is not None and h != known:
            try:
                block = decode_block(self._layout.blocks.get(h))  # hashed before parsed
            except ObjectNotFound:
                raise MissingObject(
                    f"block {h} of {self._layout.location.to_url()} is gone"
                ) from None
            new.append((h, block))
            h = block.prev_block_hash
        state = self._state if h is not None else None  # reached the Seed: replay all
        for bh, block in reversed(new):
            state = validate_append(state, block, bh)
        self._state = state
        return state

    def commit(self, event_for: Callable[[ChainState | None], MetadataEvent]) -> S3Commit:
        """Append one block whose event ``event_for`` makes from the current state.

        ``event_for`` may be called once per attempt (the state differs each time).

        Raises:
            RefCASFailed: lost the race `max_attempts` times.
            ChainRuleViolation: the event is not a valid next block.
        """
        for attempt in range(1, self._max_attempts + 1):
            head = self._layout.refs.get_or_none("head")
            state = self.state(head)
            block = MetadataBlock(
                system_time=max(self._clock(), state.system_time) if state else self._clock(),
                prev_block_hash=head,
                sequence_number=state.sequence_number + 1 if state else 0,
                event=event_for(state),
            )
            raw = encode_block(block)
            h = block_hash(raw)
            new_state = validate_append(state, block, h)
            self._layout.blocks.put(h, raw)
            try:
                self._layout.refs.set_if_equals("head", head, h)
            except RefCASFailed:
                time.sleep(random.uniform(0, BACKOFF_S * 2 ** min(attempt, 4)))
                continue
            self._state = new_state
            return S3Commit(h, block.sequence_number, attempt)
        raise RefCASFailed(f"lost the head race {self._max_attempts} times")
