"""The validator inside the node daemon (``odf node run --validator``).

A `ValidatorWorker` runs a `node.validation.validator.Validator` over the datasets whose
chains grew, a batch of blocks at a time, one dataset after another, in a worker thread,
and hands each signed attestation to the daemon for gossip. It validates with
``wait_for_inputs``: a derivative block whose recorded input blocks are not replicated
yet (`node.validation.validator.missing_input`) is left for later instead of being
attested ``could-not-check``; the worker reports it as waiting, with its backlog.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from fbs.did import DatasetId
from fbs.errors import FbsError, OdfError
from node.validation.validator import Validator
from node.worker_threads import WorkerThreads
from p2p.attestation import Attestation
from storage.errors import DatasetNotFound, InvalidAlias

__all__ = ["DEFAULT_BATCH_BLOCKS", "DatasetProgress", "Publish", "ValidatorWorker"]

#: The validator's logger (the worker's lines are the validator's).
log = logging.getLogger("odf.validator")

#: Blocks one `ValidatorWorker` run checks before the next queued dataset gets a turn.
DEFAULT_BATCH_BLOCKS: Final = 16
#: First delay before a dataset is tried again after an engine failure (doubled per
#: failure, capped at `MAX_RETRY_DELAY_S`).
DEFAULT_RETRY_DELAY_S: Final = 2.0
MAX_RETRY_DELAY_S: Final = 60.0
#: Most datasets a `ValidatorWorker` tracks (queue and progress).
MAX_TRACKED_DATASETS: Final = 10_000


@dataclass(slots=True)
class DatasetProgress:
    """What a `ValidatorWorker` knows about one dataset (for ``odf node status``).

    Attributes:
        alias: the local alias.
        backlog: data blocks not yet attested by this validator (as of ``updated_at``).
        waiting: why checking is paused (an input block not replicated yet), if so.
        last_error: the last engine failure (retried with backoff), if any.
        failures: consecutive failures.
        signed: attestations signed since the worker started, per verdict.
        updated_at: UNIX time of the last update.
    """

    alias: str
    backlog: int = 0
    waiting: str | None = None
    last_error: str | None = None
    failures: int = 0
    signed: dict[str, int] = field(default_factory=dict)
    updated_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "alias": self.alias,
            "backlog": self.backlog,
            "waiting": self.waiting,
            "lastError": self.last_error,
            "signed": dict(self.signed),
            "updatedAt": round(self.updated_at, 3),
        }


Publish = Callable[[Attestation], Awaitable[None]]
"""Awaited with each attestation the worker signed (e.g. to gossip it)."""


class ValidatorWorker:
    """Runs a `Validator` over queued datasets, one at a time, in a worker thread.

    The daemon queues a dataset when its chain grew (or one of its inputs' did). Each
    run checks at most ``batch_blocks`` blocks (``wait_for_inputs``: a derivative block
    whose input blocks are not replicated yet pauses that dataset until it is queued
    again) and hands every signed attestation to ``publish``. A dataset with blocks
    left is queued again behind the others; an engine failure retries it later with
    exponential backoff. Nothing is dropped: what is not checked yet is the `backlog`,
    reported per dataset by `status`.

    Args:
        validator: the validator (its store receives the attestations).
        publish: awaited with each signed attestation.
        batch_blocks: blocks per run.
        retry_delay_s: first retry delay after an engine failure.
        threads: where blocking runs go (the daemon's, so its stop waits for them;
            default: the worker's own).
    """

    def __init__(
        self,
        validator: Validator,
        publish: Publish,
        *,
        batch_blocks: int = DEFAULT_BATCH_BLOCKS,
        retry_delay_s: float = DEFAULT_RETRY_DELAY_S,
        threads: WorkerThreads | None = None,
    ) -> None:
        self.validator = validator
        self.threads = threads or WorkerThreads("odf-validator")
        self._publish = publish
        self.batch_blocks = batch_blocks
        self.retry_delay_s = retry_delay_s
        self._queue: dict[DatasetId, None] = {}
        self._stale: set[DatasetId] = set()
        self._progress: dict[DatasetId, DatasetProgress] = {}
        self._wake = asyncio.Event()
        self.running: DatasetId | None = None
        self.runs = 0

    def queue(self, dataset_id: DatasetId) -> None:
        """Check ``dataset_id`` soon (its chain, or an input's, may have grown)."""
        if dataset_id not in self._queue and len(self._queue) < MAX_TRACKED_DATASETS:
            self._queue[dataset_id] = None
        self._stale.add(dataset_id)
        self._wake.set()

    @property
    def queued(self) -> list[DatasetId]:
        """Datasets waiting for a run, next first."""
        return list(self._queue)

    @property
    def idle(self) -> bool:
        """Nothing queued or running."""
        return not self._queue and self.running is None

    def progress(self, dataset_id: DatasetId) -> DatasetProgress | None:
        """What is known about ``dataset_id`` (``None``: never queued)."""
        return self._progress.get(dataset_id)

    def status(self) -> dict[str, Any]:
        """JSON for ``/api/status``: identity, queue, and backlog per dataset."""
        rows = {did.to_did_odf(): p.to_dict() for did, p in sorted(self._progress.items(), key=str)}
        return {
            "validator": self.validator.validator_id.to_did_key(),
            "engine": self.validator.engine_identity,
            "running": None if self.running is None else self.running.to_did_odf(),
            "queued": [d.to_did_odf() for d in self._queue],
            "backlog": sum(p.backlog for p in self._progress.values()),
            "runs": self.runs,
            "datasets": rows,
        }

    def _track(self, did: DatasetId) -> DatasetProgress | None:
        p = self._progress.get(did)
        if p is None:
            try:
                alias = self.validator.ws.resolve(did).alias
            except (DatasetNotFound, InvalidAlias, FbsError):
                return None
            if len(self._progress) >= MAX_TRACKED_DATASETS:
                return None
            p = self._progress[did] = DatasetProgress(alias)
        return p

    def _refresh(self, dids: list[DatasetId]) -> None:
        # Worker thread: backlog of datasets queued behind the current run.
        for did in dids:
            p = self._track(did)
            if p is None:
                continue
            try:
                p.backlog = self.validator.backlog(did)
            except (OdfError, OSError):
                continue
            p.updated_at = time.time()

    async def run(self) -> None:
        """Work until cancelled (the daemon runs this as a task)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._stale:
                stale, self._stale = list(self._stale), set()
                await self.threads.run(self._refresh, stale)
            while self._queue:
                did = next(iter(self._queue))
                del self._queue[did]
                await self._run_one(did)

    async def _run_one(self, did: DatasetId) -> None:
        self.running = did
        self.runs += 1
        p = self._track(did)
        try:
            run = await self.threads.run(
                self.validator.validate,
                did,
                max_blocks=self.batch_blocks,
                wait_for_inputs=True,
                stop=self.threads.stopping,
            )
        except (DatasetNotFound, InvalidAlias):
            self._progress.pop(did, None)
            return
        except (OdfError, OSError) as e:
            # Engine down or failing, a damaged local chain: nothing was signed for the
            # block; try again later (it stays in the backlog meanwhile).
            if p is not None:
                p.failures += 1
                p.last_error = f"{type(e).__name__}: {e}"
                p.updated_at = time.time()
                delay = min(MAX_RETRY_DELAY_S, self.retry_delay_s * 2 ** (p.failures - 1))
            else:
                delay = MAX_RETRY_DELAY_S
            log.warning("validating %s failed (retry in %.1f s): %s", did, delay, e)
            asyncio.get_running_loop().call_later(delay, self.queue, did)
            return
        finally:
            self.running = None
        if p is not None:
            p.backlog = run.backlog
            p.waiting = run.waiting
            p.last_error = None
            p.failures = 0
            p.updated_at = time.time()
            for a in run.attestations:
                p.signed[str(a.verdict)] = p.signed.get(str(a.verdict), 0) + 1
        for a in run.attestations:
            await self._publish(a)
        if run.backlog and run.waiting is None and run.attestations:
            self.queue(did)  # more to do: behind the others
