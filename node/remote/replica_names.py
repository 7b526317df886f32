"""The local alias of a new replica: the publisher's signed name when free.

A head record of version 2 (`p2p.head_record`) carries the publisher's alias of the
dataset, signed with the dataset key, so the name a replica gets cannot be chosen by
the peer that served it. The rule, in order:

1. an explicit alias (``odf pull --as NAME``) wins, as always;
2. the publisher's name, if no local dataset has it;
3. if another dataset has it: the name with ``-`` and the last 8 hex digits of the DID
   appended (``com.acme.prices-3fa94c1e``), if that is free;
4. otherwise (or when the record has no name): ``None``, and the pull names the clone by
   its DID as before.
"""

from __future__ import annotations

from typing import Final

from fbs.did import DatasetAlias, DatasetId
from fbs.errors import FbsError
from storage.errors import DatasetNotFound
from storage.workspace import Workspace

__all__ = ["SUFFIX_DIGITS", "replica_alias"]

#: Hex digits of the DID appended to a name that is taken locally.
SUFFIX_DIGITS: Final = 8


def replica_alias(ws: Workspace, did: DatasetId, name: str | None) -> str | None:
    """The alias a new replica of ``did`` gets from its publisher's ``name`` (see above)."""
    if name is None:
        return None
    suffix = did.as_multibase()[-SUFFIX_DIGITS:]
    for candidate in (name, f"{name}-{suffix}"):
        try:
            DatasetAlias.parse(candidate)
        except FbsError:
            return None
        owner = _owner(ws, candidate)
        if owner is None or owner == did:
            return candidate
    return None


def _owner(ws: Workspace, alias: str) -> DatasetId | None:
    try:
        return ws.resolve(alias).id
    except DatasetNotFound:
        return None
