"""The node daemon (``odf node run``): one process serving a workspace to the network.

All on one asyncio loop (py-libp2p runs in the host's own trio thread, see `p2p.libp2p.host`).
`NodeDaemon` is the composition root: it builds the parts, each owning its state in a
sibling module, wires their callbacks, and starts and stops them in order. Besides the
libp2p host (identity in ``.odf/p2p/identity.key``), the object exchange server
(`p2p.libp2p.exchange`) and signed-head gossip (`p2p.libp2p.gossip`), the parts are:
`node.daemon.watch.WatchRound` (the periodic round), `node.daemon.heads.HeadWatcher`
(heads signed and announced), `node.daemon.pulls.PullScheduler` (pulls of followed
datasets), `node.daemon.follow.FollowList` (what is replicated),
`node.daemon.attest.AttestationService` (attestations and disputes),
`node.daemon.validation.ValidationFeed` (``validator: true``),
`node.daemon.routing.ContentRouting` (``dht: true``), `node.daemon.web.DaemonWeb`
(the HTTP API) with `node.daemon.status.DaemonStatus`, `node.daemon.liveness` (the listener
as a new peer sees it), `node.runfile` (one node per workspace) and `node.daemon.log`.

A replica whose chain grew, by a pull or seen by the round (a push, ``odf pull``), goes
to the attestation service and the validator (`NodeDaemon._on_new_head`); after a pull
the new head is also announced (one more provider).

Shutdown (SIGTERM/SIGINT): gossip deliveries are ignored, the round stops, pulls are
cancelled and awaited, the HTTP server and the libp2p host stop. Cancelling a pull is
safe at any point: objects are streamed into ``.pending-*`` quarantine files and only
renamed after their hash matched; a new dataset is assembled in ``staging/`` and
renamed into ``datasets/`` whole; a head moves by one compare-and-swap of
``refs/head``. File work already handed to a worker thread finishes before the
process exits (`run_daemon` drains the executor).

Names other modules import from here (`RunInfo`, `read_run_info`, …) are re-exported.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from fbs.did import DatasetId
from node.daemon.attest import AttestationService
from node.daemon.config import NodeConfig
from node.daemon.follow import FollowList
from node.daemon.heads import HeadWatcher
from node.daemon.host import IDENTITY_FILE, make_host
from node.daemon.liveness import ListenerLiveness
from node.daemon.log import event, setup_logging
from node.daemon.pulls import PeerView, PullRecord, PullScheduler
from node.daemon.routing import ContentRouting
from node.daemon.status import DaemonStatus
from node.daemon.validation import ValidationFeed
from node.daemon.watch import WatchRound
from node.daemon.web import DaemonWeb
from node.remote.resolve import parse_remote_ref, resolve_remote
from node.runfile import (
    RUN_FILE,
    NodeAlreadyRunning,
    NodeNotRunning,
    RunFile,
    RunInfo,
    read_run_info,
)
from node.validation.worker import ValidatorWorker
from node.worker_threads import WorkerThreads
from p2p.attestation_store import AttestationStore
from p2p.errors import HostError
from p2p.head_record import HeadRecord
from p2p.head_store import HeadStore
from p2p.libp2p.exchange import ExchangeClient, ExchangeServer
from p2p.libp2p.gossip import HeadGossip
from p2p.peers import PeerScores, ScoringPolicy
from storage.workspace import Workspace

if TYPE_CHECKING:
    from engine.client import EngineClient

__all__ = [
    "IDENTITY_FILE",
    "RUN_FILE",
    "NodeAlreadyRunning",
    "NodeDaemon",
    "NodeNotRunning",
    "PullRecord",
    "RunInfo",
    "parse_remote_ref",
    "read_run_info",
    "resolve_remote",
    "run_daemon",
    "setup_logging",
]

#: How long `NodeDaemon.stop` waits for cancelled pulls (seconds).
STOP_PULLS_TIMEOUT_S: Final = 10.0


class NodeDaemon:
    """A node serving ``workspace`` (see the module docstring).

    Args:
        workspace: the workspace served.
        config: settings (`node.daemon.config.NodeConfig`).
        write_run_file: maintain ``.odf/run/`` (lock and ``node.json``); tests running
            several daemons on one workspace would turn it off.
        engine: the engine client for validator replays (default: ``engine_address``
            of the config, else `node.engine_manager.get_engine` on first use).
    """

    def __init__(
        self,
        workspace: Workspace,
        config: NodeConfig,
        *,
        write_run_file: bool = True,
        engine: EngineClient | None = None,
    ) -> None:
        self.ws = workspace
        self.config = config
        self.head_store = HeadStore.for_workspace(workspace.root)
        self.scores = PeerScores(ScoringPolicy(ban_duration_s=config.ban_duration_s))
        self.host = make_host(workspace, config, self.scores)
        #: Probes our own listener as a new peer would; restarts the host if it is dead.
        self.liveness = ListenerLiveness(self.host)
        #: Blocking calls of the background tasks: `stop` waits for them (they write).
        self.threads = WorkerThreads()
        self.watcher = HeadWatcher(workspace, self.head_store)
        self.server = ExchangeServer(workspace, head_records=self.watcher.record_json)
        self.gossip = HeadGossip(self.host, self._on_record, is_fresh=self.watcher.is_fresh)
        self.watcher.gossip = self.gossip
        self.attestations = AttestationStore.for_workspace(workspace)
        self._run_file = RunFile(workspace) if write_run_file else None
        self._tasks: list[asyncio.Task[None]] = []
        self.peers = PeerView()
        self._stopping = self._started = False
        wake = asyncio.Event()
        self.follows = FollowList(workspace, config.follow, wake.set)
        self.validation = ValidationFeed(
            workspace, config, self.attestations, self.follows, engine, threads=self.threads
        )
        self.attest = AttestationService(
            workspace,
            config,
            self.host,
            self.head_store,
            self.attestations,
            replicas=self.validation.replicas,
            threads=self.threads,
        )
        self.attestation_gossip = self.attest.gossip
        self.pulls = PullScheduler(
            workspace,
            config,
            self.host,
            self.head_store,
            self.scores,
            self.peers,
            self.follows,
            refusal=self.attest.refusal,
            on_pulled=self._on_pulled,
            on_equivocation=self.attest.mark_disputes_dirty,
            on_attestations=self.attest.on_fetched,
            threads=self.threads,
        )
        self._wire(wake)

    def _route(self) -> ContentRouting | None:
        """Content routing over the DHT (``dht: true``), known to the pulls and the watcher."""
        if not self.config.dht:
            return None
        routing = ContentRouting(
            self.ws,
            self.host,
            lookup_interval_s=self.config.dht_lookup_interval_s,
            on_found=self.pulls.on_found,
            is_wanted=self.pulls.is_wanted,
        )
        self.pulls.routing = self.watcher.routing = routing
        return routing

    def _wire(self, wake: asyncio.Event) -> None:
        """The parts that drive the others: the round, the HTTP side and its status."""
        self.routing = self._route()
        self.round = WatchRound(
            self.config,
            self.host,
            self.peers,
            self.threads,
            watcher=self.watcher,
            attest=self.attest,
            pulls=self.pulls,
            wake=wake,
            on_new_head=self._on_new_head,
        )
        self.web = DaemonWeb(
            self.ws,
            self.config,
            self.head_store,
            self.attestations,
            follows=self.follows,
            pulls=self.pulls,
            attest=self.attest,
        )
        self.status = DaemonStatus(
            self.host,
            self.scores,
            self.peers,
            self.follows,
            self.watcher,
            self.gossip,
            self.server,
            self.pulls,
            self.attest,
            self.validation,
            http_url=lambda: self.web.url,
            liveness=self.liveness,
            routing=self.routing,
        )

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the host, gossip, HTTP API and background tasks; write ``node.json``.

        Raises:
            NodeAlreadyRunning: another node serves the workspace.
            HostError / IdentityError: libp2p could not start.
            OSError: the HTTP port cannot be bound.
        """
        if self._run_file is not None:
            self._run_file.acquire()
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        self.follows.load()
        self.server.register(self.host)
        self.attest.serve()
        await self.host.start()
        self.pulls.client = ExchangeClient(self.host)
        await self.gossip.start()
        await self.attestation_gossip.start()
        if self.config.validator:
            worker = self.validation.start(self.attest.publish)
            self.attest.use_validator(worker.validator.validator_id)
        await self.round.dial_bootstrap()
        await self.web.start(peers=self.status.peers_info, status=self.status.status_info)
        self._started = True
        if self._run_file is not None:
            info = RunInfo(
                os.getpid(), self.host.peer_id, tuple(self.host.addrs), self.http_url, time.time()
            )
            self._run_file.publish(info)
        self._tasks.append(asyncio.create_task(self.round.run(), name="head-watcher"))
        self._tasks.append(asyncio.create_task(self.liveness.run(), name="listener-liveness"))
        if self.routing is not None:
            self._tasks.append(asyncio.create_task(self.routing.run(), name="content-routing"))
        if self.worker is not None:
            self._tasks.append(asyncio.create_task(self.worker.run(), name="validator"))
            for did in await self.threads.run(self.validation.replicas):
                self.worker.queue(did)  # catch up: the backlog left by the last run
        event(
            logging.INFO,
            "node started",
            peer_id=self.host.peer_id,
            addrs=self.host.addrs,
            http=self.http_url,
            follow=self.follows.entries,
            workspace=str(self.ws.root),
            validator=None
            if self.worker is None
            else self.worker.validator.validator_id.to_did_key(),
        )

    async def stop(self) -> None:
        """Stop everything (idempotent); in-flight pulls are cancelled safely."""
        if self._stopping:
            return
        self._stopping = True
        pulls = self.pulls.close()
        reannounce = self.attest.close()
        if reannounce is not None:
            self._tasks.append(reannounce)
        for task in [*self._tasks, *pulls]:
            task.cancel()
        pending = [t for t in [*self._tasks, *pulls] if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=STOP_PULLS_TIMEOUT_S)
        await self.web.stop()
        # After the HTTP handlers: they may still hand blocking calls to the threads.
        await self.threads.close()
        with contextlib.suppress(HostError):
            await self.host.stop()
        if self._run_file is not None:
            if self._started:
                self._run_file.remove()
            self._run_file.release()
        if self._started:
            event(logging.INFO, "node stopped", cancelled_pulls=len(pulls))

    async def __aenter__(self) -> NodeDaemon:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- what the parts hand back to each other -------------------------------------------

    async def _on_record(self, record: HeadRecord, origin: str) -> None:
        if self._stopping:
            return
        await self.pulls.offer(record, origin)

    async def _on_pulled(self, did: DatasetId, record: HeadRecord) -> None:
        # After a pull: the watcher must not report the new head as a replica move.
        self.watcher.mark_seen(did)
        await self._on_new_head(did)
        await self.watcher.announce(record)  # one more provider for the others

    async def _on_new_head(self, did: DatasetId) -> None:
        """A replica's chain grew: queued attestations, inputs to follow, checks to run."""
        await self.attest.on_new_head(did)
        await self.validation.on_new_head(did)

    # -- views of the parts (tests, `odf node run`) ----------------------------------------

    @property
    def http_url(self) -> str:
        """Base URL of the HTTP API (``""`` until started)."""
        return self.web.url

    @property
    def follow_all(self) -> bool:
        """Whether every announced dataset is replicated."""
        return self.follows.all

    def follow(self, ref: str) -> str:
        """Follow a dataset (`node.daemon.follow.FollowList.follow`); wakes the round."""
        return self.follows.follow(ref)

    @property
    def history(self) -> list[PullRecord]:
        """Finished pulls, oldest first."""
        return self.pulls.history

    @property
    def _known(self) -> OrderedDict[DatasetId, Any]:
        # Heads heard of, per dataset (tests look here).
        return self.pulls.known

    @property
    def worker(self) -> ValidatorWorker | None:
        """The validator worker (``validator: true``, once started)."""
        return self.validation.worker

    def peers_info(self) -> list[dict[str, Any]]:
        """``/api/peers``: connected peers and every scored one."""
        return self.status.peers_info()

    def status_info(self) -> dict[str, Any]:
        """Live fields of ``/api/status``."""
        return self.status.status_info()


# -- running -----------------------------------------------------------------------------


async def _serve(ws: Workspace, config: NodeConfig, ready: Callable[[NodeDaemon], None]) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    daemon = NodeDaemon(ws, config)
    try:
        await daemon.start()
        ready(daemon)
        await stop.wait()
        event(logging.INFO, "shutting down")
    finally:
        await daemon.stop()
        # File work already in worker threads (appends, renames) completes first.
        await loop.shutdown_default_executor()


def run_daemon(
    ws: Workspace, config: NodeConfig, *, ready: Callable[[NodeDaemon], None] | None = None
) -> None:
    """Run a node until SIGTERM/SIGINT (blocking; sets up logging).

    Raises:
        NodeAlreadyRunning: another node serves the workspace.
        HostError / OSError: startup failed.
    """
    setup_logging(config.log_level, config.log_format)
    asyncio.run(_serve(ws, config, ready or (lambda _d: None)))
