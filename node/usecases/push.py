"""Push: send a dataset this workspace owns to a node, with the node's bearer token.

To an odf-node over plain ``http(s)://`` a push carries a signed head record; to
``odf+http(s)://HOST[/NAME]`` it speaks the Smart Transfer Protocol as ``kamu push`` does
(the node creates ``NAME`` from the Seed if it is new). The node pushed to becomes the
dataset's push alias, so a later push needs no destination.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from node.errors import UsageError
from node.remote.urls import smart_dataset_url

if TYPE_CHECKING:
    from p2p.http.source import PushResult
    from p2p.smart_transfer.client import SmartPushResult
    from storage.workspace import Workspace

__all__ = ["PushOptions", "push", "remembered_destination"]


@dataclass(frozen=True, slots=True)
class PushOptions:
    """What to push, where, and with which token.

    Attributes:
        dataset: the local dataset (alias or DID).
        to: the node URL (default: the dataset's push alias).
        remote_alias: the dataset's name on the node if the push creates it.
        token: the node's bearer token (none: the push is sent without one).
        remember_alias: remember ``to`` as the dataset's push alias.
    """

    dataset: str
    to: str | None = None
    remote_alias: str | None = None
    token: str | None = None
    remember_alias: bool = True


def push(ws: Workspace, options: PushOptions) -> PushResult | SmartPushResult:
    """Push ``options.dataset`` to its node.

    Raises:
        UsageError: no destination given or remembered; the node refused the token.
        P2PError / StorageError: see `p2p.http.source.push_dataset` and
            `p2p.smart_transfer.client.smart_push`.
    """
    from p2p.http.source import Unauthorized
    from p2p.smart_transfer.client import is_smart_url

    to = options.to or remembered_destination(ws, options.dataset)
    headers = {"Authorization": f"Bearer {options.token}"} if options.token else {}
    # The push alias remembered is what repeats this push: for the smart protocol the
    # dataset's URL on the node (so a later push needs no --as), else the node's URL.
    destination = to
    if is_smart_url(to):
        local = options.remote_alias or ws.resolve(options.dataset).alias
        destination = smart_dataset_url(to, local)
    try:
        result = asyncio.run(_push(ws, options, to, destination, headers))
    except Unauthorized as e:
        hint = "wrong token" if headers else "no token given"
        raise UsageError(
            f"{e} ({hint}: pass --token-file FILE, --token T or set ODF_NODE_TOKEN)"
        ) from e
    if options.remember_alias:
        from node.remote.aliases import remember_remote

        remember_remote(ws, options.dataset, destination, "push")
    return result


def remembered_destination(ws: Workspace, dataset: str) -> str:
    """Where ``dataset`` was pushed before (its push alias).

    Raises:
        UsageError: it has none.
    """
    from node.remote.aliases import remembered_remote

    to = remembered_remote(ws, dataset, "push")
    if to is None:
        raise UsageError(f"{dataset} has no push alias: give the node with --to URL")
    return to


async def _push(
    ws: Workspace, options: PushOptions, to: str, destination: str, headers: dict[str, str]
) -> PushResult | SmartPushResult:
    import aiohttp

    from p2p.http.source import push_dataset
    from p2p.smart_transfer.client import is_smart_url, smart_push

    async with aiohttp.ClientSession() as session:
        if is_smart_url(to):
            return await smart_push(
                ws, options.dataset, destination, session=session, headers=headers
            )
        return await push_dataset(
            ws,
            options.dataset,
            to,
            session=session,
            remote_alias=options.remote_alias,
            headers=headers,
        )
