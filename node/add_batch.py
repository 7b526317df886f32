"""A batch of snapshots for ``odf add``: account naming and dependency order.

Accounts (kamu's multi-tenant naming, kept minimal): a dataset alias is ``name`` (no
account) or ``account/name``. ``odf add --account ACCOUNT`` acts as that account, as
``kamu --account`` does: a snapshot named ``name`` is added as ``ACCOUNT/name``, one
named ``ACCOUNT/name`` is kept, and one of another account is refused; a transform input
``name`` resolves in the acting account (``ACCOUNT/name``) while ``other/name`` resolves
as written. Without ``--account`` there is no acting account: names and bare inputs have
no account part, an ``account/name`` input resolves as written, and a ``/`` in a
snapshot's name is refused (it would silently invent an account).

Order: a snapshot is added after every other snapshot of the batch that one of its
transform inputs names (compared case-insensitively, after the account is applied), so
manifests may be given in any order; inputs naming the snapshot itself, datasets
already in the workspace and DIDs impose no order. A cycle is refused, naming it.
A name given twice is kept once, as kamu does (`first_of_each_name`: the first given).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fbs.did import AccountName, DatasetAlias
from fbs.errors import InvalidName, ManifestError, ManifestFieldError
from fbs.manifest.refs import parse_local_ref
from fbs.model import DatasetSnapshot, SetTransform, TransformInput
from node.errors import DependencyCycle

__all__ = [
    "BatchItem",
    "alias_key",
    "apply_account",
    "batch_keys",
    "first_of_each_name",
    "order_batch",
]


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One snapshot of a batch and where it came from (``file.yaml``, ``STDIN[2]``)."""

    source: str
    snapshot: DatasetSnapshot


def alias_key(alias: DatasetAlias) -> str:
    """The comparison key of an alias (case-insensitive, account included)."""
    account = "" if alias.account_name is None else alias.account_name.key + "/"
    return account + alias.dataset_name.key


def _qualified_name(name: str, account: AccountName | None) -> str:
    try:
        alias = DatasetAlias.parse(name)
    except InvalidName as e:
        raise ManifestFieldError("content.name", str(e)) from None
    if alias.account_name is None:
        return name if account is None else f"{account}/{name}"
    if account is None:
        raise ManifestFieldError(
            "content.name",
            f"{name!r} names the account {alias.account_name}: a dataset name may not "
            f"contain '/' (add it with --account {alias.account_name})",
        )
    if not alias.account_name.same_as(account):
        raise ManifestFieldError(
            "content.name",
            f"{name!r} belongs to account {alias.account_name}, not to the acting "
            f"account {account}",
        )
    return name


def _qualified_input(item: TransformInput, account: AccountName | None) -> TransformInput:
    ref = parse_local_ref(item.dataset_ref)
    if account is None or not isinstance(ref, DatasetAlias) or ref.account_name is not None:
        return item
    # The alias (the SQL table name) stays the reference as written, as in kamu.
    return item.replace(dataset_ref=f"{account}/{ref}")


def apply_account(snapshot: DatasetSnapshot, account: AccountName | None) -> DatasetSnapshot:
    """Name the snapshot and its bare inputs in ``account`` (see the module docstring).

    The snapshot's inputs must be canonical (`fbs.manifest.refs.canonicalize_snapshot`).

    Raises:
        ManifestFieldError: an invalid name, an account part without ``--account``, or
            another account's name (``content.name``).
    """
    name = _qualified_name(snapshot.name, account)
    events = tuple(
        e.replace(inputs=tuple(_qualified_input(i, account) for i in e.inputs))
        if isinstance(e, SetTransform)
        else e
        for e in snapshot.metadata
    )
    return snapshot.replace(name=name, metadata=events)


def _input_keys(snapshot: DatasetSnapshot) -> set[str]:
    keys: set[str] = set()
    for event in snapshot.metadata:
        if isinstance(event, SetTransform):
            for item in event.inputs:
                ref = parse_local_ref(item.dataset_ref)
                if isinstance(ref, DatasetAlias):
                    keys.add(alias_key(ref))
    return keys


def first_of_each_name(
    items: Sequence[BatchItem],
) -> tuple[tuple[BatchItem, ...], tuple[tuple[BatchItem, BatchItem], ...]]:
    """The batch without repeated names (compared as `order_batch` does), and what was
    dropped: ``(dropped, the item kept)`` pairs.

    kamu adds the first manifest of a name and skips the others as already existing;
    here "first" is the order given.
    """
    kept: dict[str, BatchItem] = {}
    dropped: list[tuple[BatchItem, BatchItem]] = []
    for item in items:
        key = alias_key(DatasetAlias.parse(item.snapshot.name))
        if key in kept:
            dropped.append((item, kept[key]))
        else:
            kept[key] = item
    return tuple(kept.values()), tuple(dropped)


def batch_keys(items: Sequence[BatchItem]) -> set[str]:
    """The names the batch adds, as compared for order and resolution."""
    return {alias_key(DatasetAlias.parse(item.snapshot.name)) for item in items}


def order_batch(items: Sequence[BatchItem]) -> tuple[BatchItem, ...]:
    """The batch in dependency order, otherwise in the given order.

    Raises:
        ManifestError: two snapshots of the batch with the same name.
        DependencyCycle: snapshots whose inputs form a cycle (``a -> b -> a``).
    """
    by_key: dict[str, int] = {}
    for n, item in enumerate(items):
        key = alias_key(DatasetAlias.parse(item.snapshot.name))
        if key in by_key:
            first = items[by_key[key]]
            raise ManifestError(
                f"{item.source}: content.name: dataset {item.snapshot.name!r} is also "
                f"added by {first.source}"
            )
        by_key[key] = n
    deps = [
        {by_key[k] for k in _input_keys(item.snapshot) if k in by_key} - {n}
        for n, item in enumerate(items)
    ]
    done: list[int] = []
    left = list(range(len(items)))
    while left:
        ready = next((n for n in left if deps[n] <= set(done)), None)
        if ready is None:
            raise DependencyCycle(_cycle_text(items, deps, left))
        done.append(ready)
        left.remove(ready)
    return tuple(items[n] for n in done)


def _cycle_text(items: Sequence[BatchItem], deps: list[set[int]], left: list[int]) -> str:
    """Follow unmet inputs from the first blocked snapshot until one repeats."""
    remaining = set(left)
    path = [left[0]]
    while True:
        nxt = min(deps[path[-1]] & remaining)
        if nxt in path:
            cycle = [*path[path.index(nxt) :], nxt]
            names = " -> ".join(items[n].snapshot.name for n in cycle)
            return f"the transform inputs of the manifests form a cycle: {names}"
        path.append(nxt)
