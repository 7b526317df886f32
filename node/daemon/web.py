"""The daemon's HTTP side (`node.daemon.service`): the API, its own endpoints, the server.

`DaemonWeb.start` serves the node's HTTP API (`node.http.api.create_app`) on
``http_host:http_port``: state-changing requests need the bearer token of
``.odf/p2p/http-token`` (created on first start, mode 0600), foreign ``Origin``/``Host``
are refused (`node.http.auth`). On top come the attestation routes
(`node.http.attestations`) and the daemon's JSON endpoints:

* ``/api/follow``: GET the follow list; POST / DELETE ``{"dataset": REF}`` follows or
  unfollows (`node.daemon.follow.FollowList`); REF is an alias, a DID or ``all`` for
  both (a follow of an alias is stored as its DID, and unfollowing the alias removes it);
* ``/api/network/{ref}``: what the network says about a dataset (DID or multibase id;
  `node.daemon.pulls.PullScheduler.resolve`);
* ``/api/heard/{name}``: the newest heads heard whose publisher signed the alias
  ``name`` (``[account/]name``), one per dataset (``{"name", "matches": [{"record"}]}``);
* ``/api/disputes``: every publisher's record under the node's dispute policy
  (`node.daemon.attest.AttestationService.publisher_records_json`).

Live ``/api/status`` and ``/api/peers`` come from the callables given to `DaemonWeb.start`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from fbs.did import DatasetId
from fbs.errors import FbsError
from node.daemon.attest import AttestationService
from node.daemon.config import NodeConfig
from node.daemon.follow import FollowList
from node.daemon.pulls import PullScheduler
from node.error_contract import http_status_for
from node.errors import UsageError
from node.http.api import HttpApiConfig, create_app
from node.http.attestations import attach_attestations, attestation_routes
from node.http.auth import load_or_create_token
from p2p.attestation_store import AttestationStore
from p2p.head_store import HeadStore
from p2p.http.server import Route
from storage.errors import DatasetNotFound, StorageError
from storage.workspace import Workspace

__all__ = ["DaemonWeb"]


class DaemonWeb:
    """The daemon's HTTP server (see the module docstring).

    Args:
        ws / config / head_store / attestations: the daemon's.
        follows / pulls / attest: the parts its endpoints answer from.

    ``url`` is the server's base URL once started (``""`` before).
    """

    def __init__(
        self,
        ws: Workspace,
        config: NodeConfig,
        head_store: HeadStore,
        attestations: AttestationStore,
        *,
        follows: FollowList,
        pulls: PullScheduler,
        attest: AttestationService,
    ) -> None:
        self._ws = ws
        self._config = config
        self._head_store = head_store
        self._attestations = attestations
        self._follows = follows
        self._pulls = pulls
        self._attest = attest
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(
        self,
        *,
        peers: Callable[[], list[dict[str, Any]]],
        status: Callable[[], dict[str, Any]],
    ) -> str:
        """Bind and serve; the base URL (also in ``url``).

        Raises:
            OSError: the port cannot be bound.
        """
        cfg = self._config
        app = create_app(
            self._ws,
            config=HttpApiConfig(
                allow_ingest=cfg.allow_ingest,
                allow_push=cfg.allow_push,
                # Writes need this bearer token (`node.http.auth`), created on first run.
                token=load_or_create_token(self._ws.root),
                allowed_hosts=(cfg.http_host, *cfg.http_allowed_hosts),
            ),
            head_store=self._head_store,
            peers=peers,
            status=status,
            extra_routes=self._routes(),
            setup=self._attach,
        )
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, cfg.http_host, cfg.http_port)
        await site.start()
        port = self._runner.addresses[0][1]
        host = cfg.http_host
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
        return self.url

    async def stop(self) -> None:
        """Stop serving (requests in flight end first); a no-op when not started."""
        if self._runner is not None:
            await self._runner.cleanup()

    def _routes(self) -> tuple[Route, ...]:
        """The daemon's endpoints (`node.http.api.create_app`'s ``extra_routes``)."""
        return (
            *attestation_routes(),
            Route("*", "/api/follow", self._api_follow),
            Route("*", "/api/network/{ref}", self._api_network),
            Route("GET", "/api/heard/{name}", self._api_heard),
            Route("GET", "/api/heard/{account}/{name}", self._api_heard),
            Route("GET", "/api/disputes", self._api_disputes),
        )

    def _attach(self, app: web.Application) -> None:
        attach_attestations(app, self._attestations, self._ws, on_accepted=self._attest.on_posted)

    async def _api_follow(self, request: web.Request) -> web.StreamResponse:
        follows = self._follows
        if request.method == "GET":
            return web.json_response({"follow": follows.entries, "all": follows.all})
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
            removed = follows.unfollow(ref) or follows.unfollow(self._did_of(ref))
            return web.json_response({"removed": removed, "follow": follows.entries})
        try:
            entry = follows.follow(ref)
        except (UsageError, DatasetNotFound) as e:
            return web.json_response({"error": str(e)}, status=http_status_for(e))
        return web.json_response({"followed": entry, "follow": follows.entries})

    def _did_of(self, ref: str) -> str:
        """The DID a follow of alias ``ref`` stored (``ref`` itself if no dataset has it)."""
        if ref.strip() == "all" or ref.strip().startswith("did:"):
            return ref
        try:
            return self._ws.resolve(ref.strip()).id.to_did_odf()
        except (StorageError, FbsError):
            return ref

    async def _api_disputes(self, _request: web.Request) -> web.StreamResponse:
        return web.json_response(await self._attest.publisher_records_json())

    async def _api_network(self, request: web.Request) -> web.StreamResponse:
        if request.method != "GET":
            return web.json_response({"error": "method not allowed"}, status=405)
        ref = request.match_info["ref"]
        try:
            did = (
                DatasetId.from_did(ref) if ref.startswith("did:") else DatasetId.from_multibase(ref)
            )
        except FbsError as e:
            return web.json_response({"error": f"invalid dataset id: {e}"}, status=400)
        return web.json_response(await self._pulls.resolve(did))

    async def _api_heard(self, request: web.Request) -> web.StreamResponse:
        """The newest heads heard whose publisher signed the alias ``name``, one per dataset."""
        account = request.match_info.get("account")
        name = (
            request.match_info["name"]
            if account is None
            else f"{account}/{request.match_info['name']}"
        )
        known = list(self._pulls.known.values())
        matches = [{"record": k.record.to_dict()} for k in known if k.record.name == name]
        return web.json_response({"name": name, "matches": matches})
