"""Where a dataset is pulled from and pushed to: kamu's remote aliases, kept per dataset.

A verified pull from a URL records that URL as the dataset's *pull alias*, and a push
records its destination as a *push alias*, in ``info/config`` (kamu's ``DatasetConfig``,
so a kamu workspace and ours read each other's). Then, as with kamu:

- ``odf pull DS`` of a dataset with a pull alias updates it from there (a replica of a
  derivative cannot run its transform here: its inputs live on the publisher's node),
  and ``odf pull --all`` does so for every replica;
- ``odf push DS`` without ``--to`` pushes to its push alias;
- ``--no-alias`` on pull, fetch and push leaves the aliases as they are.

A dataset with several aliases of a kind is ambiguous: the command names them and asks for
the URL. Only URLs are recorded: peer addresses and DIDs resolved through a running node
are not remote references kamu could read back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from node.errors import AmbiguousRemote

if TYPE_CHECKING:
    from storage.workspace import Workspace

RemoteKind = Literal["pull", "push"]


def remembered_remote(ws: Workspace, ref: str, kind: RemoteKind) -> str | None:
    """The one pull (or push) alias of dataset ``ref``; ``None`` if it has none.

    Raises:
        AmbiguousRemote: the dataset has several aliases of that kind.
        DatasetNotFound / InvalidDatasetConfig: no such dataset, an unreadable config.
    """
    config = ws.get(ref).layout.read_config()
    aliases = config.pull_aliases if kind == "pull" else config.push_aliases
    if len(aliases) > 1:
        raise AmbiguousRemote(
            f"{ref} has {len(aliases)} {kind} aliases ({', '.join(aliases)}): "
            f"name the URL to {kind} {'from' if kind == 'pull' else 'to'}"
        )
    return aliases[0] if aliases else None


def remember_remote(ws: Workspace, ref: str, url: str, kind: RemoteKind) -> None:
    """Record ``url`` as a pull (or push) alias of dataset ``ref`` (no-op if it is one).

    Raises:
        DatasetNotFound / InvalidDatasetConfig: no such dataset, an unreadable config.
    """
    layout = ws.get(ref).layout
    config = layout.read_config()
    updated = config.with_pull_alias(url) if kind == "pull" else config.with_push_alias(url)
    if updated != config:
        layout.write_config(updated)
