"""The node daemon (``odf node run``): one process serving a workspace to the network.

All on one asyncio loop (py-libp2p runs in the host's own trio thread, see `p2p.libp2p.host`).
`NodeDaemon` composes parts that own their state, each in a sibling module:

* a `p2p.libp2p.host.P2PHost` with a persistent identity (``.odf/p2p/identity.key``), the
  object exchange server (`p2p.libp2p.exchange`) and signed-head gossip (`p2p.libp2p.gossip`);
* `node.daemon.heads.HeadWatcher`: signs new heads of owned datasets, announces held
  heads, notices replicas that moved;
* `node.daemon.pulls.PullScheduler`: heads heard of, pulls of followed datasets (one
  task per dataset, retries, resume), peers probed for interrupted pulls;
* `node.daemon.follow.FollowList`: what is replicated (``.odf/p2p/follow.json``);
* `node.daemon.attest.AttestationService`: attestations received, stored, published
  and re-announced; disputes and the ``refuse_disputed`` policy;
* `node.daemon.validation.ValidationFeed` (``validator: true``): the validator worker
  and what it checks after each pull;
* `node.runfile`: ``.odf/run/`` (``node.lock``: one node per workspace;
  ``node.json``: pid, peer id, addresses, HTTP URL; `read_run_info`);
* `node.daemon.log`: logs, one JSON object per line on stderr (`setup_logging`);
* the HTTP API (`node.http.api`) plus the daemon's own JSON endpoints
  (``/api/follow``, ``/api/network/{did}``, ``/api/disputes``) and live ``/api/status``
  / ``/api/peers``; state-changing requests need the bearer token of
  ``.odf/p2p/http-token`` (created on first start, mode 0600) and foreign
  ``Origin``/``Host`` are refused (`node.http.auth`).

The daemon itself runs the watcher round (`NodeDaemon._watch_loop`): every
``head_poll_interval_s``, or when woken (a new follow), it refreshes the peers, has the
head watcher scan and announce (every held head when peers joined the topic and every
``reannounce_interval_s``, so late joiners learn them), hands replicas that moved to the
attestation service and the validator, runs the attestation round, and has the pull
scheduler probe peers (all of them on start and when woken, new ones otherwise). After
each pull the same hand-over happens and the new head is announced (one more provider).

Shutdown (SIGTERM/SIGINT): gossip deliveries are ignored, the watcher stops, pulls are
cancelled and awaited, the HTTP server and the libp2p host stop. Cancelling a pull is
safe at any point: objects are streamed into ``.pending-*`` quarantine files and only
renamed after their hash matched; a new dataset is assembled in ``staging/`` and
renamed into ``datasets/`` whole; a head moves by one compare-and-swap of
``refs/head``. File work already handed to a worker thread finishes before the
process exits (`run_daemon` drains the executor).

Names of the parts that other modules import from here (`RunInfo`, `read_run_info`,
`NodeNotRunning`, `setup_logging`, `resolve_remote` of `node.remote.resolve`, …) are
re-exported.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from fbs.did import DatasetId
from fbs.errors import FbsError, OdfError
from node.daemon.attest import AttestationService
from node.daemon.config import NodeConfig
from node.daemon.follow import FOLLOW_FILE, FollowList
from node.daemon.heads import HeadWatcher
from node.daemon.log import event, setup_logging
from node.daemon.pulls import PeerView, PullRecord, PullScheduler
from node.daemon.validation import ValidationFeed
from node.errors import UsageError
from node.http.api import HttpApiConfig, create_app
from node.http.attestations import attach_attestations, attestation_routes
from node.http.auth import load_or_create_token
from node.remote.resolve import RemoteRef, ResolvedRemote, parse_remote_ref, resolve_remote
from node.runfile import (
    RUN_FILE,
    NodeAlreadyRunning,
    NodeNotRunning,
    RunFile,
    RunInfo,
    read_run_info,
)
from node.validation.disputes import DisputePolicy
from node.validation.validator import ValidatorWorker
from node.worker_threads import WorkerThreads
from p2p.attestation_store import AttestationStore
from p2p.errors import HostError, P2PError
from p2p.head_record import HeadRecord
from p2p.head_store import HeadStore
from p2p.http.server import Route
from p2p.libp2p.exchange import ExchangeClient, ExchangeServer
from p2p.libp2p.gossip import HEADS_TOPIC, HeadGossip
from p2p.libp2p.host import GossipSettings, HostConfig, P2PHost
from p2p.peers import PeerScores, ScoringPolicy
from storage.workspace import Workspace

if TYPE_CHECKING:
    from engine.client import EngineClient

__all__ = [
    "FOLLOW_FILE",
    "IDENTITY_FILE",
    "RUN_FILE",
    "NodeAlreadyRunning",
    "NodeDaemon",
    "NodeNotRunning",
    "PullRecord",
    "RemoteRef",
    "ResolvedRemote",
    "RunInfo",
    "parse_remote_ref",
    "read_run_info",
    "resolve_remote",
    "run_daemon",
    "setup_logging",
]

#: Identity key file, relative to the workspace root (``.odf/``).
IDENTITY_FILE: Final = "p2p/identity.key"
#: How long `NodeDaemon.stop` waits for cancelled pulls (seconds).
STOP_PULLS_TIMEOUT_S: Final = 10.0
#: Delay before announcing to peers that just joined the topic (their subscription
#: must reach our gossipsub router first).
JOIN_ANNOUNCE_DELAY_S: Final = 0.5


# -- the daemon --------------------------------------------------------------------------


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
        gossip = GossipSettings(
            rate_per_peer=config.gossip_rate_per_peer, burst_per_peer=config.gossip_burst_per_peer
        )
        self.host = P2PHost(
            HostConfig(
                listen_addrs=config.listen,
                gossip=gossip,
                # Dialled by `_dial_bootstrap` once gossipsub runs: py-libp2p 0.8.1 dials
                # `bootstrap` inside host.run, before the pubsub service exists, and the
                # pubsub notifee then fails the whole host.
                identity_path=workspace.root / IDENTITY_FILE,
                enable_mdns=config.mdns,
            ),
            scores=self.scores,
        )
        #: Blocking calls of the background tasks: `stop` waits for them (they write).
        self.threads = WorkerThreads()
        self.watcher = HeadWatcher(workspace, self.head_store)
        self.server = ExchangeServer(workspace, head_records=self.watcher.record_json)
        self.gossip = HeadGossip(self.host, self._on_record, is_fresh=self.watcher.is_fresh)
        self.watcher.gossip = self.gossip
        self.attestations = AttestationStore.for_workspace(workspace)
        self._write_run_file = write_run_file
        self._run_file = RunFile(workspace)
        self._runner: web.AppRunner | None = None
        self.http_url = ""
        self._tasks: list[asyncio.Task[None]] = []
        self.peers = PeerView()
        self._stopping = False
        self._started = False
        self._started_at = 0.0
        self._wake = asyncio.Event()
        self.follows = FollowList(workspace, config.follow, self._wake.set)
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
            threads=self.threads,
        )

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the host, gossip, HTTP API and background tasks; write ``node.json``.

        Raises:
            NodeAlreadyRunning: another node serves the workspace.
            HostError / IdentityError: libp2p could not start.
            OSError: the HTTP port cannot be bound.
        """
        if self._write_run_file:
            self._run_file.acquire()
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        self.follows.load()
        self.server.register(self.host)
        await self.host.start()
        self.pulls.client = ExchangeClient(self.host)
        await self.gossip.start()
        await self.attestation_gossip.start()
        if self.config.validator:
            worker = self.validation.start(self.attest.publish)
            self.attest.use_validator(worker.validator.validator_id)
        await self._dial_bootstrap()
        app = create_app(
            self.ws,
            config=HttpApiConfig(
                allow_ingest=self.config.allow_ingest,
                allow_push=self.config.allow_push,
                # Writes need this bearer token (`node.http.auth`), created on first run.
                token=load_or_create_token(self.ws.root),
                allowed_hosts=(self.config.http_host, *self.config.http_allowed_hosts),
            ),
            head_store=self.head_store,
            peers=self.peers_info,
            status=self.status_info,
            extra_routes=self._routes(),
            setup=self._attach,
        )
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.http_host, self.config.http_port)
        await site.start()
        port = self._runner.addresses[0][1]
        host = self.config.http_host
        self.http_url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        self._started_at = time.time()
        self._started = True
        if self._write_run_file:
            info = RunInfo(
                os.getpid(), self.host.peer_id, tuple(self.host.addrs), self.http_url, time.time()
            )
            self._run_file.publish(info)
        self._tasks.append(asyncio.create_task(self._watch_loop(), name="head-watcher"))
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

    async def _dial_bootstrap(self) -> None:
        """Dial bootstrap peers not connected (in parallel; failures are logged)."""
        connected = set(self.peers.connected)

        async def dial(addr: str) -> None:
            if addr.rsplit("/p2p/", 1)[-1] in connected:
                return
            try:
                await self.host.connect(addr)
            except P2PError as e:
                event(logging.WARNING, "bootstrap dial failed", addr=addr, error=str(e))

        await asyncio.gather(*(dial(a) for a in self.config.bootstrap))

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
        if self._runner is not None:
            await self._runner.cleanup()
        # After the HTTP handlers: they may still hand blocking calls to the threads.
        await self.threads.close()
        with contextlib.suppress(HostError):
            await self.host.stop()
        if self._write_run_file:
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

    @property
    def client(self) -> ExchangeClient | None:
        """The object exchange client (once started)."""
        return self.pulls.client

    # -- follow list (`node.daemon.follow.FollowList`) ------------------------------------

    @property
    def follow_list(self) -> list[str]:
        """Followed datasets (aliases, DIDs, or ``all``)."""
        return self.follows.entries

    @property
    def follow_all(self) -> bool:
        """Whether every announced dataset is replicated."""
        return self.follows.all

    def follow(self, ref: str) -> str:
        """Follow a dataset (`node.daemon.follow.FollowList.follow`); wakes the watcher."""
        return self.follows.follow(ref)

    def unfollow(self, ref: str) -> bool:
        """Stop following ``ref`` (as stored by `follow`); whether it was followed."""
        return self.follows.unfollow(ref)

    def is_followed(self, did: DatasetId) -> bool:
        """Whether announced heads of ``did`` are replicated."""
        return self.follows.is_followed(did)

    # -- head records (`node.daemon.heads.HeadWatcher`) ---------------------------------

    @property
    def announced(self) -> int:
        """Head records gossiped so far."""
        return self.watcher.announced

    async def announce(self, record: HeadRecord) -> None:
        """Gossip ``record`` (errors are logged, never raised)."""
        await self.watcher.announce(record)

    async def _watch_loop(self) -> None:
        cfg = self.config
        last_full = time.monotonic()
        first = True
        while True:
            try:
                peers = await self.threads.run(self.host.peers)
                topic_peers = frozenset(await self.threads.run(self.host.mesh_peers, HEADS_TOPIC))
                self.peers.connected = sorted(peers)
                joined = topic_peers - self.peers.subscribed
                self.peers.subscribed = topic_peers
                full = first or bool(joined)
                if time.monotonic() - last_full >= cfg.reannounce_interval_s:
                    full, last_full = True, time.monotonic()
                    await self._dial_bootstrap()
                if joined:
                    await asyncio.sleep(JOIN_ANNOUNCE_DELAY_S)
                records = await self.threads.run(self.watcher.scan, full)
                for record in records:
                    await self.announce(record)
                for did in self.watcher.take_changed():
                    await self._on_new_head(did)
                await self.attest.round(full)
                woke = self._wake.is_set()
                self._wake.clear()
                if first or woke:
                    await self.pulls.probe_peers(self.peers.connected)
                elif joined:
                    await self.pulls.probe_peers(sorted(joined))
                first = False
            except asyncio.CancelledError:
                raise
            except (OdfError, OSError) as e:
                event(logging.WARNING, "head watcher step failed", error=str(e))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), cfg.head_poll_interval_s)

    # -- receiving and pulling (`node.daemon.pulls.PullScheduler`) ----------------------

    async def _on_record(self, record: HeadRecord, origin: str) -> None:
        if self._stopping:
            return
        await self.offer(record, origin)

    async def offer(self, record: HeadRecord, origin: str) -> bool:
        """Consider a verified ``record`` announced by peer ``origin``; queue a pull.

        Returns:
            Whether a pull was queued (or an already queued one gained a provider).
        """
        return await self.pulls.offer(record, origin)

    def pulls_in_progress(self) -> list[dict[str, Any]]:
        """Queued and running pulls (JSON rows)."""
        return self.pulls.pulls_in_progress()

    @property
    def history(self) -> list[PullRecord]:
        """Finished pulls, oldest first."""
        return self.pulls.history

    @property
    def _known(self) -> OrderedDict[DatasetId, Any]:
        # Heads heard of, per dataset (tests look here).
        return self.pulls.known

    async def sources_for(self, record: HeadRecord, providers: Sequence[str]) -> list[str]:
        """Connected or announcing peers that serve ``record``'s head (or a later one)."""
        return await self.pulls.sources_for(record, providers)

    async def resolve(self, did: DatasetId) -> dict[str, Any]:
        """What the network says about ``did``: best record and peers that serve it."""
        return await self.pulls.resolve(did)

    async def _on_pulled(self, did: DatasetId, record: HeadRecord) -> None:
        # After a pull: the watcher must not report the new head as a replica move.
        self.watcher.mark_seen(did)
        await self._on_new_head(did)
        await self.announce(record)  # one more provider for the others

    # -- attestations (`node.daemon.attest`) and the validator (`node.daemon.validation`) --

    async def _on_new_head(self, did: DatasetId) -> None:
        """A replica's chain grew: queued attestations, inputs to follow, checks to run."""
        await self.attest.on_new_head(did)
        await self.validation.on_new_head(did)

    @property
    def worker(self) -> ValidatorWorker | None:
        """The validator worker (``validator: true``, once started)."""
        return self.validation.worker

    @property
    def policy(self) -> DisputePolicy:
        """What this node does about disputed publishers."""
        return self.attest.policy

    @property
    def attestation_stats(self) -> dict[str, int]:
        """Attestations received, accepted, queued, … (counters)."""
        return self.attest.stats

    # -- status --------------------------------------------------------------------------

    def peers_info(self) -> list[dict[str, Any]]:
        """``/api/peers``: connected peers and every scored one."""
        standings = {s.peer: s for s in self.scores.snapshot()}
        rows = []
        for peer in sorted(set(self.peers.connected) | set(standings)):
            s = standings.get(peer)
            rows.append(
                {
                    "peerId": peer,
                    "connected": peer in self.peers.connected,
                    "subscribed": peer in self.peers.subscribed,
                    "score": s.score if s else 0.0,
                    "banned": bool(s and s.banned_until is not None),
                    "offences": s.offences if s else 0,
                    "lastReason": s.last_reason if s else None,
                }
            )
        return rows

    def status_info(self) -> dict[str, Any]:
        """Live fields of ``/api/status``."""
        running = self.host.running
        return {
            "peerId": self.host.peer_id if running else None,
            "addrs": self.host.addrs if running else [],
            "httpUrl": self.http_url,
            "pid": os.getpid(),
            "peers": len(self.peers.connected),
            "topicPeers": len(self.peers.subscribed),
            "follow": self.follow_list,
            "followAll": self.follow_all,
            "pulls": self.pulls_in_progress(),
            "recentPulls": [r.to_dict() for r in self.pulls.history],
            "networkHeads": len(self.pulls.known),
            "announced": self.announced,
            "gossip": {
                "rejected": self.gossip.rejected,
                "duplicates": self.gossip.duplicates,
                "droppedDeliveries": self.host.dropped_deliveries,
            },
            # Supervised restarts, last unexpected stop, hostile input contained.
            "libp2p": self.host.status(),
            # Per-peer admission of the object exchange (`p2p.libp2p.admission`).
            "exchange": {
                "served": self.server.served_requests,
                "inFlight": self.server.admission.in_flight,
                **self.server.admission.stats.to_dict(),
            },
            "attestations": self.attest.counters(),
            "validator": None if self.worker is None else self.worker.status(),
            "disputes": self.attest.disputes,
            "refused": self.attest.refused_json(),
            "policy": {
                "refuseDisputed": self.policy.refuse_disputed,
                "confirmations": self.policy.confirmations,
            },
        }

    # -- HTTP endpoints of the daemon ----------------------------------------------------

    def _routes(self) -> tuple[Route, ...]:
        """The daemon's endpoints (`node.http.api.create_app`'s ``extra_routes``)."""
        return (
            *attestation_routes(),
            Route("*", "/api/follow", self._api_follow),
            Route("*", "/api/network/{ref}", self._api_network_route),
            Route("GET", "/api/disputes", self.attest.api_disputes),
        )

    def _attach(self, app: web.Application) -> None:
        attach_attestations(app, self.attestations, self.ws, on_accepted=self.attest.on_posted)

    async def _api_network_route(self, request: web.Request) -> web.StreamResponse:
        return await self._api_network(request, request.match_info["ref"])

    async def _api_follow(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            return web.json_response({"follow": self.follow_list, "all": self.follow_all})
        if request.method not in ("POST", "DELETE"):
            return web.json_response({"error": "method not allowed"}, status=405)
        try:
            doc = await request.json()
            ref = doc["dataset"]
            if not isinstance(ref, str) or not ref or len(ref) > 1024:
                raise ValueError("dataset must be a non-empty string")
        except (ValueError, KeyError, TypeError) as e:
            return web.json_response({"error": f"bad request: {e}"}, status=400)
        if request.method == "DELETE":
            return web.json_response({"removed": self.unfollow(ref), "follow": self.follow_list})
        try:
            entry = self.follow(ref)
        except UsageError as e:
            return web.json_response({"error": str(e)}, status=400)
        return web.json_response({"followed": entry, "follow": self.follow_list})

    async def _api_network(self, request: web.Request, ref: str) -> web.StreamResponse:
        if request.method != "GET":
            return web.json_response({"error": "method not allowed"}, status=405)
        try:
            did = (
                DatasetId.from_did(ref) if ref.startswith("did:") else DatasetId.from_multibase(ref)
            )
        except FbsError as e:
            return web.json_response({"error": f"invalid dataset id: {e}"}, status=400)
        return web.json_response(await self.resolve(did))


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
