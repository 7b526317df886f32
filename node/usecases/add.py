"""Add: create datasets from a batch of manifests, the way ``kamu add`` does.

The batch is added in dependency order whatever the order given; everything is checked
before anything is written, so a refused batch changes nothing. A dataset that exists
already is skipped (``replace``: deleted and added again, refused while a dataset outside
the batch reads it); of a name given twice only the first manifest is added.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from fbs.errors import InvalidName, ManifestError

if TYPE_CHECKING:
    from fbs.did import DatasetId
    from fbs.model import DatasetSnapshot
    from node.add_batch import BatchItem
    from storage.catalog import DatasetEntry
    from storage.dataset import Dataset
    from storage.workspace import Workspace

__all__ = ["AddOptions", "AddPlan", "add_planned", "plan_add"]


@dataclass(frozen=True, slots=True)
class AddOptions:
    """How to add a batch.

    Attributes:
        replace: delete datasets the batch names that exist already, then add them again.
        engine: run every transform on this engine (manifests written for another).
    """

    replace: bool = False
    engine: str | None = None


@dataclass(frozen=True, slots=True)
class AddPlan:
    """A checked batch: what is added (in dependency order, as stored) and what is
    deleted first."""

    items: tuple[BatchItem, ...]
    snapshots: tuple[DatasetSnapshot, ...]
    replaced: tuple[DatasetEntry, ...]


def plan_add(
    ws: Workspace,
    items: Sequence[BatchItem],
    options: AddOptions,
    on_skip: Callable[[BatchItem, str], None],
) -> AddPlan:
    """Check a batch against ``ws``; ``on_skip`` hears of each manifest left out and why.

    Raises:
        ManifestError: a manifest that would fail, or a transform input that names nothing.
        DatasetExists: with ``replace``, a dataset outside the batch reads a replaced one.
    """
    from node.add_batch import first_of_each_name, order_batch
    from storage.errors import DatasetNotFound

    kept, repeated = first_of_each_name(items)
    for item, first in repeated:
        on_skip(item, f"the same name comes first in {first.source}")
    existing = _existing(ws, kept)
    if not options.replace:
        for item, _entry in existing:
            on_skip(item, "already exists (--replace replaces it)")
        present = {id(item) for item, _entry in existing}
        kept = tuple(item for item in kept if id(item) not in present)
    ordered = list(order_batch(kept))
    snapshots = _checked(ordered, options.engine)
    replaced = [entry for _item, entry in existing] if options.replace else []
    if replaced:
        try:
            _check_replace(ws, ordered, replaced)
        except DatasetNotFound as e:
            raise ManifestError(f"{_needing(ordered, str(e))}: {e}") from None
    return AddPlan(tuple(ordered), tuple(snapshots), tuple(replaced))


def add_planned(
    ws: Workspace, plan: AddPlan, on_deleted: Callable[[DatasetEntry], None]
) -> tuple[Dataset, ...]:
    """Delete what ``plan`` replaces (``on_deleted`` hears of each), then add its batch.

    Raises:
        ManifestError: a transform input that names nothing (nothing is added).
    """
    from storage.errors import DatasetNotFound

    for entry in plan.replaced:
        ws.delete(entry.id)
        on_deleted(entry)
    try:
        return ws.add_snapshots(list(plan.snapshots))
    except DatasetNotFound as e:
        # Only a transform input is looked up here: a manifest naming a dataset that is
        # not in the workspace is invalid input (4), refused before anything is stored.
        raise ManifestError(f"{_needing(list(plan.items), str(e))}: {e}") from None


def _existing(ws: Workspace, items: Sequence[BatchItem]) -> list[tuple[BatchItem, DatasetEntry]]:
    """The items whose name a dataset of the workspace already has, with that dataset."""
    from fbs.did import DatasetAlias
    from node.add_batch import alias_key

    # One listing, read only (a missed `resolve` would rewrite the alias index, and a
    # refused batch must leave the workspace as it was).
    held: dict[str, DatasetEntry] = {}
    for entry in ws.list():
        with contextlib.suppress(InvalidName):
            held[alias_key(DatasetAlias.parse(entry.alias))] = entry
    out = []
    for item in items:
        found = held.get(alias_key(DatasetAlias.parse(item.snapshot.name)))
        if found is not None:
            out.append((item, found))
    return out


def _check_replace(ws: Workspace, items: list[BatchItem], replaced: list[DatasetEntry]) -> None:
    """Nothing else refuses deleting the datasets the batch replaces.

    Raises:
        DatasetExists: a dataset outside the batch takes one of them as an input
            (deleting it would leave that one dangling, as kamu refuses too).
        DatasetNotFound: a transform input of the batch that will not resolve.
    """
    from node.dependents import uses_from_outside
    from storage.errors import DatasetExists

    gone = {entry.id for entry in replaced}
    uses = uses_from_outside(ws, gone)
    if uses:
        use = uses[0]
        used = next(r for r in replaced if r.id == use.used)
        raise DatasetExists(
            f"cannot replace {used.alias}: {use.consumer.alias} takes it as an input "
            "(replace both in one batch, or delete the dependent dataset first)"
        )
    _check_inputs(ws, items, gone)


def _check_inputs(ws: Workspace, items: list[BatchItem], gone: set[DatasetId]) -> None:
    """Every transform input resolves after the replaced datasets are deleted.

    Raises:
        DatasetNotFound: an input that names nothing, or a replaced dataset by its DID
            (the new dataset gets a new DID).
    """
    from fbs.did import DatasetAlias
    from fbs.manifest.refs import parse_local_ref
    from fbs.model import SetTransform
    from node.add_batch import alias_key, batch_keys
    from storage.errors import DatasetNotFound

    added = batch_keys(items)
    for item in items:
        for event in item.snapshot.metadata:
            for i in event.inputs if isinstance(event, SetTransform) else ():
                ref = parse_local_ref(i.dataset_ref)
                if isinstance(ref, DatasetAlias) and alias_key(ref) in added:
                    continue
                try:
                    entry = ws.resolve(i.dataset_ref)
                except DatasetNotFound as e:
                    raise DatasetNotFound(
                        f"unknown transform input {i.dataset_ref!r}: {e}"
                    ) from None
                if entry.id in gone:
                    raise DatasetNotFound(
                        f"unknown transform input {i.dataset_ref!r}: it names a dataset "
                        "this batch replaces by its DID (a replaced dataset gets a new DID)"
                    )


def _needing(items: list[BatchItem], message: str) -> str:
    """The source of the (first) manifest whose input the workspace refused."""
    from fbs.model import SetTransform

    for item in items:
        for event in item.snapshot.metadata:
            if isinstance(event, SetTransform) and any(
                repr(i.dataset_ref) in message for i in event.inputs
            ):
                return f"{item.source}: {item.snapshot.name}"
    return items[0].source if len(items) == 1 else "manifest"


def _checked(items: list[BatchItem], engine: str | None) -> list[DatasetSnapshot]:
    """Engine choice, then the checks that refuse what would only fail later."""
    from fbs.manifest.validate import validate_snapshot
    from node.transform import (
        check_streaming,
        foreign_engines,
        pin_engine_version,
        retarget_engine,
    )

    out = []
    for item in items:
        snap = item.snapshot if engine is None else retarget_engine(item.snapshot, engine)
        foreign = foreign_engines(snap)
        if foreign:
            raise ManifestError(
                f"{item.source}: {snap.name}: transform engine {foreign[0]!r} is not "
                "available (this node runs spark); add it with --engine spark to run it on Spark"
            )
        check_streaming(snap)
        try:  # complete validation: nothing is stored for a manifest that would fail later
            validate_snapshot(snap)
            check_sql_syntax(snap)
        except ManifestError as e:
            raise ManifestError(f"{item.source}: {e}") from None
        # Derivative datasets record the engine identity their transform was written for.
        out.append(pin_engine_version(snap))
    return out


#: SQL dialects of DataFusion's parser tried in turn: a query none of them parses cannot
#: be valid Spark SQL either (no parser here reads Spark SQL exactly, so a query is
#: refused only when every one of these fails on its syntax).
SQL_DIALECTS: Final = ("databricks", "hive", "generic", "mysql", "postgresql")


def check_sql_syntax(snap: DatasetSnapshot) -> None:
    """Refuse a transform query that is not SQL in any dialect, before anything is stored.

    Only syntax: tables, columns and functions are resolved by the engine at the first
    pull. Parsed with DataFusion's parser (the ``datafusion`` package ``odf sql`` uses),
    which runs nothing: DDL, DML and statements are refused before any would run.

    Raises:
        ManifestError: naming the dataset, the query's alias and the parser's complaint.
    """
    from fbs.model import SetTransform, TransformSql

    for event in snap.metadata:
        if not isinstance(event, SetTransform) or not isinstance(event.transform, TransformSql):
            continue
        sql = event.transform
        steps = [(s.alias, s.query) for s in sql.queries or ()]
        if sql.query is not None:
            steps.append((None, sql.query))
        for alias, query in steps:
            problem = _syntax_problem(query)
            if problem is not None:
                where = f" (query {alias!r})" if alias else ""
                raise ManifestError(f"{snap.name}: SQL syntax error{where}: {problem}")


def _syntax_problem(query: str) -> str | None:
    """The parser's complaint about ``query`` when no dialect parses it, else None."""
    from datafusion import SessionConfig, SessionContext, SQLOptions

    options = SQLOptions().with_allow_ddl(False).with_allow_dml(False)
    options = options.with_allow_statements(False)
    first: str | None = None
    for dialect in SQL_DIALECTS:
        ctx = SessionContext(SessionConfig().set("datafusion.sql_parser.dialect", dialect))
        try:
            ctx.sql_with_options(query, options)
        except Exception as e:
            text = str(e)
            if "ParserError(" not in text:
                return None  # it parsed: planning failed (tables are not registered here)
            first = first or text.split("ParserError(", 1)[1].rstrip(")").strip('"')
            continue
        return None
    return first
