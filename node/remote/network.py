"""What the running node (``odf node run`` on this workspace) knows of the network.

The node keeps the newest signed head it heard for every dataset (gossip, probes of its
peers) and knows which peers serve it; a one-shot command asks it over its HTTP API
(``GET /api/network/{did}``, ``GET /api/heard/{name}``) instead of joining the
network itself. Every record answered is verified again here (signature, dataset): the
node's word is not trusted for what a record says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fbs.did import DatasetId
    from p2p.head_record import HeadRecord
    from storage.workspace import Workspace

__all__ = ["NetworkView", "ask_network", "heard_under_name"]

#: Bound on one question to the running node (it probes its peers to answer).
ASK_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class NetworkView:
    """The network's newest signed head of a dataset, as the running node knows it.

    Attributes:
        record: the newest verified head record heard (``None``: none).
        addrs: peer addresses that serve that head now (may be empty).
    """

    record: HeadRecord | None
    addrs: tuple[str, ...]


async def _get_json(ws: Workspace, path: str) -> Any | None:
    """``GET path`` on the running node; ``None`` when no node runs for ``ws``.

    Raises:
        PeerUnavailable: a node is running but does not answer.
    """
    import aiohttp

    from node.runfile import read_run_info
    from p2p.errors import PeerUnavailable

    info = read_run_info(ws)
    if info is None:
        return None
    timeout = aiohttp.ClientTimeout(total=ASK_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        try:
            async with session.get(f"{info.http_url}{path}") as resp:
                if resp.status == 404:
                    return {}
                return await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            raise PeerUnavailable(f"cannot ask the running node: {e}") from None


def _record(doc: object, did: DatasetId | None) -> HeadRecord | None:
    """The verified head record of ``doc`` (of ``did`` when given), else ``None``."""
    from p2p.errors import P2PError
    from p2p.head_record import HeadRecord

    if not isinstance(doc, dict) or doc.get("record") is None:
        return None
    try:
        record = HeadRecord.from_dict(doc["record"])
    except (P2PError, ValueError, TypeError, KeyError):
        return None
    if did is not None and record.dataset_id != did:
        return None
    return record


async def ask_network(ws: Workspace, did: DatasetId) -> NetworkView | None:
    """The newest signed head of ``did`` the running node knows, and who serves it.

    Returns ``None`` when no node runs for ``ws`` (nothing is known of the network).

    Raises:
        PeerUnavailable: a node is running but does not answer.
    """
    doc = await _get_json(ws, f"/api/network/{did.to_did_odf()}")
    if doc is None:
        return None
    record = _record(doc, did)
    providers = doc.get("providers", []) if isinstance(doc, dict) else []
    addrs = tuple(
        a
        for p in providers
        if isinstance(p, dict)
        for a in p.get("addrs", [])[:2]
        if isinstance(a, str)
    )
    return NetworkView(record, addrs if record is not None else ())


async def heard_under_name(ws: Workspace, name: str) -> tuple[HeadRecord, ...] | None:
    """Head records the running node heard whose publisher signed the alias ``name``,
    one per dataset; ``None`` when no node runs for ``ws``.

    Raises:
        PeerUnavailable: a node is running but does not answer.
    """
    from urllib.parse import quote

    doc = await _get_json(ws, f"/api/heard/{quote(name, safe='/')}")
    if doc is None:
        return None
    matches = doc.get("matches", []) if isinstance(doc, dict) else []
    found: dict[DatasetId, HeadRecord] = {}
    for item in matches if isinstance(matches, list) else []:
        record = _record(item, None)
        if record is not None and record.name == name:
            found[record.dataset_id] = record
    return tuple(found.values())
