"""The attestation service of the node daemon (`node.daemon.service`); every node runs one.

The node subscribes to `p2p.libp2p.attestation_gossip` and hands each signed attestation to its
`p2p.attestation_store.AttestationStore` (in a worker thread): accepted, queued (block
above the local head; re-examined by ``retry_pending`` after each pull,
`AttestationService.on_new_head`), or kept in memory when the dataset is not held yet
(offered again after its first pull). An accepted ``diverged`` marks the dataset's head
disputed (``/api/status`` → ``disputes``, `node.validation.disputes`). With ``refuse_disputed``, new
heads of a publisher with confirmed divergence or equivocation evidence are not
replicated (`AttestationService.refusal`, `node.validation.disputes.refusal_reason`). This node's
own attestations (when it validates) are published here and gossiped again when peers
join the topic. HTTP: ``GET/POST /{dataset}/attestations`` (`node.http.attestations`) and
``GET /api/disputes`` (`AttestationService.publisher_records_json`, served by
`node.daemon.web`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

from fbs.did import DatasetId
from fbs.errors import FbsError, OdfError
from node.daemon.config import NodeConfig
from node.daemon.log import dataset_fields, event
from node.validation.disputes import (
    DisputePolicy,
    publisher_record,
    publisher_records,
    refusal_reason,
)
from node.worker_threads import WorkerThreads
from p2p.attestation import Attestation, Verdict
from p2p.attestation_store import AcceptResult, AcceptStatus, AttestationStore
from p2p.errors import (
    AttestationRejected,
    DuplicateAttestation,
    InvalidAttestation,
    P2PError,
    UnknownAttestedDataset,
)
from p2p.head_store import HeadStore
from p2p.libp2p.attestation_gossip import ATTESTATIONS_TOPIC, AttestationGossip
from p2p.libp2p.exchange.attestations import AttestationServer
from p2p.libp2p.host import P2PHost
from storage.errors import StorageError
from storage.workspace import Workspace

__all__ = ["AttestationService"]

#: Attestations of datasets not held yet, kept (per dataset, and datasets) until a pull
#: brings the dataset; beyond, the oldest are dropped (they are gossiped again).
MAX_EARLY_ATTESTATIONS: Final = 256
MAX_EARLY_DATASETS: Final = 1_000
#: Own attestations gossiped again per round (new subscribers of the topic, and every
#: ``reannounce_interval_s``), newest blocks first.
MAX_REANNOUNCE_ATTESTATIONS: Final = 256


class AttestationService:
    """Attestations received, stored, published; disputes and the policy about them.

    Args:
        ws / config / host / head_store: the daemon's.
        store: the workspace's attestation store.
        replicas: datasets held here that this node does not own.
        threads: the daemon's worker threads (blocking calls it waits for at stop).
    """

    def __init__(
        self,
        ws: Workspace,
        config: NodeConfig,
        host: P2PHost,
        head_store: HeadStore,
        store: AttestationStore,
        replicas: Callable[[], list[DatasetId]],
        *,
        threads: WorkerThreads,
    ) -> None:
        self.ws = ws
        self.threads = threads
        self.host = host
        self.head_store = head_store
        self.store = store
        self._replicas = replicas
        self.gossip = AttestationGossip(host, self.on_gossip)
        self.policy = DisputePolicy(config.refuse_disputed, config.dispute_confirmations)
        self._config = config
        #: This node's validator identity (`use_validator`; ``None``: not a validator).
        self.validator_id: DatasetId | None = None
        self.stats: dict[str, int] = dict.fromkeys(
            ("received", "accepted", "queued", "early", "duplicates", "rejected", "published"),
            0,
        )
        self._early: OrderedDict[DatasetId, list[Attestation]] = OrderedDict()
        self._refused: dict[DatasetId, str] = {}
        self._disputes: list[dict[str, Any]] = []
        self.disputes_dirty = True
        self._topic_peers: frozenset[str] = frozenset()
        self._reannounce_task: asyncio.Task[None] | None = None
        self.stopping = False

    def serve(self) -> None:
        """Answer peers' requests for the attestations this node holds (before the host starts)."""
        AttestationServer(self.store).register(self.host)

    def use_validator(self, validator_id: DatasetId) -> None:
        """This node validates as ``validator_id``: its own ``diverged`` confirms alone."""
        self.validator_id = validator_id
        self.policy = DisputePolicy(
            self._config.refuse_disputed, self._config.dispute_confirmations, validator_id
        )

    def mark_disputes_dirty(self) -> None:
        """Recompute the dispute summary in the next round (new evidence)."""
        self.disputes_dirty = True

    def close(self) -> asyncio.Task[None] | None:
        """Stop receiving and publishing; the re-announcement task, to cancel and await."""
        self.stopping = True
        return self._reannounce_task

    def counters(self) -> dict[str, int]:
        """``/api/status`` → ``attestations``."""
        return {
            **self.stats,
            "gossipRejected": self.gossip.rejected,
            "gossipDuplicates": self.gossip.duplicates,
            "early": sum(len(v) for v in self._early.values()),
        }

    @property
    def disputes(self) -> list[dict[str, Any]]:
        """``/api/status`` → ``disputes`` (as of the last round)."""
        return list(self._disputes)

    def refused_json(self) -> dict[str, str]:
        """``/api/status`` → ``refused``: datasets whose new heads policy refuses, and why."""
        return {d.to_did_odf(): why for d, why in self._refused.items()}

    async def on_new_head(self, did: DatasetId) -> None:
        """A replica's chain grew: attestations kept for it or queued on it are offered again."""
        await self._offer_early(did)
        accepted = await self.threads.run(self.store.retry_pending, did)
        for result in accepted:
            self.count_accepted(result)
        self.disputes_dirty = True

    async def on_gossip(self, att: Attestation, origin: str) -> None:
        if self.stopping:
            return
        self.stats["received"] += 1
        await self._take(att)

    async def on_fetched(self, attestations: list[Attestation]) -> None:
        """Attestations a pull's sources served with the dataset: taken as gossiped ones."""
        for att in attestations:
            if self.stopping:
                return
            await self._take(att)

    async def _offer_early(self, did: DatasetId) -> None:
        for att in self._early.pop(did, []):
            await self._take(att, recheck=False)

    async def _take(self, att: Attestation, *, recheck: bool = True) -> None:
        """Offer ``att`` to the store; keep it in memory when the dataset is not held yet."""
        try:
            result = await self.threads.run(self.store.accept, att)
        except DuplicateAttestation:
            self.stats["duplicates"] += 1
            return
        except UnknownAttestedDataset:
            self._keep_early(att)
            # The dataset's first pull may have committed, and its `on_new_head` run,
            # while the store said "unknown": offer again now, or the attestation would
            # wait for a next head that may never come (gossip does not deliver it twice).
            if recheck and await self.threads.run(self.store.chains, att.dataset_id) is not None:
                await self._offer_early(att.dataset_id)
            return
        except (AttestationRejected, InvalidAttestation) as e:
            self.stats["rejected"] += 1
            event(logging.INFO, "attestation rejected", error=str(e))
            return
        except (StorageError, OSError) as e:
            self.stats["rejected"] += 1
            event(logging.WARNING, "cannot store attestation", error=str(e))
            return
        self.count_accepted(result)

    def _keep_early(self, att: Attestation) -> None:
        items = self._early.setdefault(att.dataset_id, [])
        self._early.move_to_end(att.dataset_id)
        if att not in items:
            items.append(att)
            del items[:-MAX_EARLY_ATTESTATIONS]
            self.stats["early"] += 1
        while len(self._early) > MAX_EARLY_DATASETS:
            self._early.popitem(last=False)

    def count_accepted(self, result: AcceptResult) -> None:
        att = result.attestation
        if result.status is AcceptStatus.QUEUED:
            self.stats["queued"] += 1
            return
        self.stats["accepted"] += 1
        if att.verdict is Verdict.DIVERGED:
            self.disputes_dirty = True
            event(
                logging.WARNING,
                "dataset disputed",
                **dataset_fields(self.ws, att.dataset_id),
                block=str(att.block_hash),
                seq=att.sequence_number,
                field=att.detail,
                validator=att.validator.to_did_key(),
            )
        if result.conflict:
            event(
                logging.WARNING,
                "validator signed both verdicts",
                validator=att.validator.to_did_key(),
                block=str(att.block_hash),
            )

    async def on_posted(self, result: AcceptResult) -> None:
        # POST /{dataset}/attestations: stored already; pass it on to the network.
        self.count_accepted(result)
        await self.publish(result.attestation)

    async def publish(self, att: Attestation) -> None:
        """Gossip ``att`` (errors are logged, never raised)."""
        if self.stopping:
            return
        try:
            await self.gossip.publish(att)
        except (P2PError, OdfError) as e:
            event(logging.WARNING, "attestation gossip failed", error=str(e))
            return
        self.stats["published"] += 1
        if att.verdict is Verdict.DIVERGED:
            self.disputes_dirty = True

    def _own_attestations(self) -> list[Attestation]:
        """This validator's attestations of the current chains, newest blocks first."""
        me = self.validator_id
        if me is None:
            return []
        out: list[Attestation] = []
        for did in self._replicas():
            with contextlib.suppress(StorageError, FbsError, OSError):
                out.extend(a for a in self.store.status(did).attestations if a.validator == me)
        out.sort(key=lambda a: (a.system_time.nanos, a.sequence_number), reverse=True)
        return out[:MAX_REANNOUNCE_ATTESTATIONS]

    async def _reannounce(self) -> None:
        for att in await self.threads.run(self._own_attestations):
            await self.publish(att)

    async def round(self, full: bool) -> None:
        """Watcher step: dispute summary, and own attestations for new topic peers."""
        if self.disputes_dirty:
            self.disputes_dirty = False
            records = await self.threads.run(
                publisher_records, self.ws, store=self.store, head_store=self.head_store
            )
            self._disputes = [
                {
                    "dataset": r.dataset_id.to_did_odf(),
                    "alias": r.alias,
                    "disputed": r.disputed,
                    "divergentBlocks": len(r.divergence),
                    "equivocations": len(r.equivocation),
                    "confirmed": r.confirmed_divergence(self.policy) is not None,
                    "refused": refusal_reason(r, self.policy),
                }
                for r in records
            ]
        if self.validator_id is None:
            return
        peers = frozenset(await self.threads.run(self.host.mesh_peers, ATTESTATIONS_TOPIC))
        joined = peers - self._topic_peers
        self._topic_peers = peers
        busy = self._reannounce_task is not None and not self._reannounce_task.done()
        if (joined or full) and peers and not busy:
            self._reannounce_task = asyncio.create_task(
                self._reannounce(), name="attestation-reannounce"
            )

    async def refusal(self, did: DatasetId) -> str | None:
        """Why policy refuses new heads of ``did`` (``None``: replicate)."""
        if not self.policy.refuse_disputed:
            return None
        record = await self.threads.run(
            publisher_record, self.ws, did, store=self.store, head_store=self.head_store
        )
        reason = refusal_reason(record, self.policy)
        if reason is not None and self._refused.get(did) != reason:
            self._refused[did] = reason
            event(
                logging.WARNING,
                "refusing new heads",
                **dataset_fields(self.ws, did),
                reason=reason,
            )
        return reason

    async def publisher_records_json(self) -> list[dict[str, Any]]:
        """``GET /api/disputes``: every publisher's record under this node's policy."""
        records = await self.threads.run(
            publisher_records, self.ws, store=self.store, head_store=self.head_store
        )
        return [r.to_dict(self.policy) for r in records]
