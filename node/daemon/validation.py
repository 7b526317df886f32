"""The validator side of the node daemon (`node.daemon.service`, ``validator: true``).

Every followed derivative is replicated together with its inputs, recursively: when a
replica's chain grows (`ValidationFeed.on_new_head`), the inputs of the transform in
force join the follow list (`node.daemon.follow.FollowList`), and the dataset and its
replicated dependents are queued on the `node.validation.worker.ValidatorWorker`. Root blocks
get the object checks, derivative blocks are replayed on the engine (``engine_address``,
an injected client, or `node.engine_manager.get_engine`); a block whose input blocks are
not replicated yet waits for them. Verdicts are signed with ``.odf/p2p/validator.key``
and handed to the attestation service (`node.daemon.attest.AttestationService.publish`).
A followed dataset or input that no connected peer holds is found as every follow is:
through the DHT (`node.daemon.routing`), by its DID alone.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from fbs.did import DatasetId
from fbs.errors import FbsError
from fbs.multiformats import Multihash
from node.daemon.config import NodeConfig
from node.daemon.follow import FollowList
from node.daemon.log import dataset_fields, event
from node.errors import UsageError
from node.validation.validator import Validator, load_or_create_validator_key
from node.validation.worker import ValidatorWorker
from node.worker_threads import WorkerThreads
from p2p.attestation import Attestation
from p2p.attestation_store import AttestationStore
from storage.errors import DatasetNotFound, StorageError
from storage.workspace import Workspace

if TYPE_CHECKING:
    from engine.client import EngineClient

__all__ = ["ValidationFeed"]


class ValidationFeed:
    """Feeds the node's validator worker (see the module docstring).

    Args:
        ws / config: the daemon's.
        store: the attestation store the validator writes to.
        follows: where inputs of followed derivatives are added.
        engine: the engine client for replays (default: ``engine_address`` of the
            config, else `node.engine_manager.get_engine` on first use).
        threads: the daemon's worker threads (blocking calls it waits for at stop).
    """

    def __init__(
        self,
        ws: Workspace,
        config: NodeConfig,
        store: AttestationStore,
        follows: FollowList,
        engine: EngineClient | None = None,
        *,
        threads: WorkerThreads,
    ) -> None:
        self.ws = ws
        self.threads = threads
        self.config = config
        self.store = store
        self.follows = follows
        self._engine = engine
        #: The worker, once `start` ran (``None``: this node does not validate).
        self.worker: ValidatorWorker | None = None
        self._inputs_cache: dict[DatasetId, tuple[Multihash | None, tuple[DatasetId, ...]]] = {}

    def start(self, publish: Callable[[Attestation], Awaitable[None]]) -> ValidatorWorker:
        """Create the worker (key ``.odf/p2p/validator.key``); its verdicts go to ``publish``."""
        key = load_or_create_validator_key(self.ws)
        engine = self._engine
        if engine is None and self.config.engine_address is not None:
            from engine.client import EngineClient

            engine = self._engine = EngineClient(self.config.engine_address, timeout=600.0)
        validator = Validator(self.ws, key, engine=engine, store=self.store)
        self.worker = ValidatorWorker(
            validator,
            publish,
            batch_blocks=self.config.validator_batch_blocks,
            threads=self.threads,
        )
        return self.worker

    def replicas(self) -> list[DatasetId]:
        """Datasets held here that this node does not own."""
        out: list[DatasetId] = []
        with contextlib.suppress(StorageError, OSError):
            for entry in self.ws.list():
                if not self.ws.keys.has(entry.id):
                    out.append(entry.id)
        return out

    def inputs_of(self, did: DatasetId) -> tuple[DatasetId, ...]:
        """Input datasets of the transform in force in ``did``'s chain (cached per head)."""
        from fbs.model import ExecuteTransform, SetTransform

        try:
            ds = self.ws.get(did)
            head = ds.head()
        except (DatasetNotFound, StorageError, FbsError, OSError):
            return ()
        cached = self._inputs_cache.get(did)
        if cached is not None and cached[0] == head:
            return cached[1]
        found: dict[DatasetId, None] = {}
        try:
            for _h, _raw, block in ds.iter_blocks():
                event = block.event
                if isinstance(event, ExecuteTransform):
                    for qi in event.query_inputs:
                        found[qi.dataset_id] = None
                elif isinstance(event, SetTransform):
                    for ti in event.inputs:
                        with contextlib.suppress(FbsError):
                            found[DatasetId.from_did(ti.dataset_ref)] = None
                    break  # the transform in force; older ones are history
        except (StorageError, FbsError, OSError):
            return ()
        inputs = tuple(found)
        self._inputs_cache[did] = (head, inputs)
        return inputs

    def dependents(self, did: DatasetId) -> list[DatasetId]:
        """Replicas whose transform reads ``did``."""
        return [d for d in self.replicas() if d != did and did in self.inputs_of(d)]

    async def on_new_head(self, did: DatasetId) -> None:
        """A replica's chain grew: its inputs join the follow list, checks are queued."""
        if self.worker is None:
            return
        for inp in await self.threads.run(self.inputs_of, did):
            entry = inp.to_did_odf()
            if entry not in self.follows and not self.ws.keys.has(inp):
                with contextlib.suppress(UsageError):
                    self.follows.follow(entry)
                    event(
                        logging.INFO,
                        "following input",
                        **dataset_fields(self.ws, inp),
                        of=dataset_fields(self.ws, did)["alias"] or did.to_did_odf(),
                    )
        self.worker.queue(did)
        for dep in await self.threads.run(self.dependents, did):
            self.worker.queue(dep)  # may have waited for this input
