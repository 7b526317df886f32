"""Replay verification of derivative datasets (``odf verify`` without ``--integrity``).

`verify_replay` first checks integrity (`storage.verify.verify_integrity`: block hashes,
chain rules, object hashes including logical hashes). If that passes, every
``ExecuteTransform`` is run again, oldest first, with the recorded inputs (the same
block and offset intervals, hence the same data files and explicit watermarks), the
recorded previous checkpoint and the block's own ``system_time``, into a temp directory.
The re-computed event, after overwriting the data's physical hash and size and the new
checkpoint with the recorded ones (files may legitimately differ byte-wise, as kamu
allows), must equal the recorded event: logical hash, offset interval, watermark,
previous offset/checkpoint and every input interval. The report names the first block
that does not reproduce and the first differing field.

A dataset pinned to another engine identity (``TransformSql.version``) is still
replayed; the report carries a warning (results of another Spark version may differ
for reasons other than tampering).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias

from fbs.did import DatasetId
from fbs.errors import FbsError
from fbs.model import (
    ExecuteTransform,
    MetadataBlock,
    SetDataSchema,
    SetTransform,
    SetVocab,
    TransformSql,
)
from fbs.multiformats import Multihash
from node.errors import IncompatibleSchema, InputNotReady
from node.transform import (
    InputPlan,
    TransformPlan,
    derivative_order,
    identity_warning,
    input_plan_from_blocks,
    run_transform,
    transform_work_dir,
    vocabulary,
)
from storage.dataset import Dataset
from storage.errors import DatasetNotFound, InvalidAlias
from storage.verified import verified_checkpoint_path
from storage.verify import VerifyReport, verify_integrity

if TYPE_CHECKING:
    from engine.client import EngineClient
    from storage.workspace import Workspace

__all__ = [
    "MAX_COMPARED_TEXT",
    "BlockReplay",
    "InputHistories",
    "ReplayMismatch",
    "ReplayReport",
    "replay_transform_block",
    "verify_replay",
]

log = logging.getLogger("odf.replay")

#: Longest rendering of a compared value kept in a report.
MAX_COMPARED_TEXT: Final = 512


@dataclass(frozen=True, slots=True)
class ReplayMismatch:
    """The first block whose transform does not reproduce.

    Attributes:
        block_hash / sequence_number: the block.
        field: the first differing field (``newData.logicalHash``,
            ``queryInputs[0].newOffset``, ``newWatermark`` ...), or ``engine`` when the
            engine refused to run it.
        recorded / replayed: the two values as text.
    """

    block_hash: Multihash
    sequence_number: int
    field: str
    recorded: str
    replayed: str

    def __str__(self) -> str:
        return (
            f"block #{self.sequence_number} ({self.block_hash}) does not reproduce: "
            f"{self.field} is {self.recorded}, replay gives {self.replayed}"
        )


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """Result of `verify_replay` for one dataset.

    Attributes:
        alias / dataset_id / head: the dataset verified.
        integrity: the integrity report (replay runs only if it is ok).
        transforms_replayed: ExecuteTransform blocks re-run (all reproduced but the last
            when ``mismatch`` is set).
        mismatch: the first block that does not reproduce.
        engine_identity: the identity of the engine that replayed.
        pinned_identities: ``TransformSql.version`` values recorded in the chain.
        warnings: e.g. replaying on an engine identity other than the pinned one.
        upstream: reports of upstream derivatives (``recursive``), inputs first.
    """

    alias: str
    dataset_id: DatasetId
    head: Multihash | None
    integrity: VerifyReport
    transforms_replayed: int = 0
    mismatch: ReplayMismatch | None = None
    engine_identity: str = ""
    pinned_identities: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    upstream: tuple[ReplayReport, ...] = ()

    @property
    def identity_mismatch(self) -> bool:
        """True if some transform was pinned to another engine identity."""
        return any(p != self.engine_identity for p in self.pinned_identities)

    @property
    def ok(self) -> bool:
        """Integrity and replay passed (for upstream datasets too)."""
        return self.integrity.ok and self.mismatch is None and all(u.ok for u in self.upstream)


class _History:
    """One input chain loaded oldest first, with per-block schema and vocabulary."""

    def __init__(self, ds: Dataset) -> None:
        newest_first = [(h, b) for h, _raw, b in ds.iter_blocks()]
        self.blocks: list[tuple[Multihash, MetadataBlock]] = newest_first[::-1]
        self.position = {h: i for i, (h, _b) in enumerate(self.blocks)}
        self.schema_at: list[SetDataSchema | None] = []
        self.vocab_at: list[SetVocab | None] = []
        schema: SetDataSchema | None = None
        vocab: SetVocab | None = None
        for _h, block in self.blocks:
            if isinstance(block.event, SetDataSchema):
                schema = block.event
            elif isinstance(block.event, SetVocab):
                vocab = block.event
            self.schema_at.append(schema)
            self.vocab_at.append(vocab)
        self.data_dir = ds.layout.data.root


def _text(value: object) -> str:
    text = "absent" if value is None else str(value)
    return text if len(text) <= MAX_COMPARED_TEXT else text[:MAX_COMPARED_TEXT] + "..."


def _first_difference(
    recorded: ExecuteTransform, replayed: ExecuteTransform
) -> tuple[str, str, str] | None:
    pairs: list[tuple[str, object, object]] = [
        ("prevCheckpoint", recorded.prev_checkpoint, replayed.prev_checkpoint),
        ("prevOffset", recorded.prev_offset, replayed.prev_offset),
    ]
    if len(recorded.query_inputs) != len(replayed.query_inputs):
        pairs.append(("queryInputs", len(recorded.query_inputs), len(replayed.query_inputs)))
    for i, (a, b) in enumerate(zip(recorded.query_inputs, replayed.query_inputs, strict=False)):
        for name in (
            "dataset_id",
            "prev_block_hash",
            "new_block_hash",
            "prev_offset",
            "new_offset",
        ):
            camel = "".join(p.capitalize() if k else p for k, p in enumerate(name.split("_")))
            pairs.append((f"queryInputs[{i}].{camel}", getattr(a, name), getattr(b, name)))
    rd, pd = recorded.new_data, replayed.new_data
    if rd is None or pd is None:
        pairs.append(("newData", rd, pd))
    else:
        pairs.append(("newData.offsetInterval", rd.offset_interval, pd.offset_interval))
        pairs.append(("newData.logicalHash", rd.logical_hash, pd.logical_hash))
    pairs.append(("newWatermark", recorded.new_watermark, replayed.new_watermark))
    pairs.append(("event", recorded, replayed))  # anything not listed above
    for name, left, right in pairs:
        if left != right:
            return name, _text(left), _text(right)
    return None


def _input_plans(
    ws: Workspace,
    set_transform: SetTransform,
    event: ExecuteTransform,
    histories: dict[DatasetId, _History],
) -> list[InputPlan] | tuple[int, str]:
    """Plans of the recorded inputs; ``(index, problem)`` when one cannot be rebuilt."""
    plans: list[InputPlan] = []
    for i, (tinput, qi) in enumerate(zip(set_transform.inputs, event.query_inputs, strict=True)):
        did = qi.dataset_id
        if did not in histories:
            try:
                entry = ws.resolve(did)
            except (DatasetNotFound, InvalidAlias, FbsError):
                called = f"{tinput.alias} ({did})" if tinput.alias else str(did)
                raise InputNotReady(
                    f"transform input {called} is not in this workspace: a replay needs "
                    "every input (`odf pull` its DID or URL; `odf verify --integrity` checks "
                    "this dataset without replaying it)"
                ) from None
            histories[did] = _History(ws.get(entry.id))
        hist = histories[did]
        alias = ws.resolve(did).alias
        lo = -1 if qi.prev_block_hash is None else hist.position.get(qi.prev_block_hash)
        last = qi.new_block_hash or qi.prev_block_hash
        hi = -1 if last is None else hist.position.get(last)
        if lo is None or hi is None:
            return i, f"block {qi.prev_block_hash if lo is None else last} not in the input chain"
        plans.append(
            input_plan_from_blocks(
                dataset_id=did,
                dataset_alias=alias,
                query_alias=tinput.alias or alias,
                data_dir=hist.data_dir,
                prev_block_hash=qi.prev_block_hash,
                new_block_hash=qi.new_block_hash,
                prev_offset=qi.prev_offset,
                blocks=hist.blocks[lo + 1 : hi + 1],
                vocab=vocabulary(hist.vocab_at[hi] if hi >= 0 else None),
                schema=hist.schema_at[hi] if hi >= 0 else None,
            )
        )
    return plans


@dataclass(frozen=True, slots=True)
class BlockReplay:
    """Result of replaying one ``ExecuteTransform`` block (`replay_transform_block`).

    Attributes:
        mismatch: ``None`` when the block reproduced.
        ran: the engine ran the transform (False when the inputs could not be rebuilt
            or the engine refused the query).
        cause: ``""`` (reproduced), ``"input"`` (a recorded input block is not in the
            local input chain), ``"engine"`` (the engine refused the query),
            ``"schema"`` (output schema differs from the dataset's) or ``"diff"`` (the
            re-computed event differs: ``mismatch.field`` names the first field).
    """

    mismatch: ReplayMismatch | None
    ran: bool
    cause: str = ""


#: Input chains loaded once and shared by the replays of several blocks (start with ``{}``).
InputHistories: TypeAlias = "dict[DatasetId, _History]"


def replay_transform_block(
    ws: Workspace,
    ds: Dataset,
    alias: str,
    h: Multihash,
    block: MetadataBlock,
    *,
    set_transform: SetTransform,
    vocab: SetVocab | None,
    schema: SetDataSchema | None,
    engine: EngineClient,
    histories: InputHistories | None = None,
) -> BlockReplay:
    """Replay one ``ExecuteTransform`` block of ``ds`` and compare it with the record.

    The chain context (the ``SetTransform``, ``SetVocab`` and ``SetDataSchema`` in force
    at the block) is the caller's: blocks before it are not read.

    Args:
        ws: the workspace holding the dataset and its inputs.
        ds / alias: the derivative dataset.
        h / block: the block to replay (its event must be an ``ExecuteTransform``).
        set_transform / vocab / schema: the events in force at the block.
        engine: the engine.
        histories: input chains shared between calls (loaded on demand).

    Raises:
        InputNotReady: an input dataset is not in the workspace.
        storage.errors.MissingObject / DamagedObject: an input slice or the previous
            checkpoint is gone or differs from its metadata (nothing reaches the engine).
        engine.errors.EngineInternalError / EngineUnavailable: the engine failed.
    """
    event = block.event
    assert isinstance(event, ExecuteTransform)
    plans = _input_plans(ws, set_transform, event, {} if histories is None else histories)
    if isinstance(plans, tuple):
        index, problem = plans
        mismatch = ReplayMismatch(
            h, block.sequence_number, f"queryInputs[{index}]", "recorded", problem
        )
        return BlockReplay(mismatch, ran=False, cause="input")
    plan = _transform_plan(
        ds, alias, h, block, set_transform=set_transform, vocab=vocab, schema=schema, inputs=plans
    )
    return _run_and_compare(ws, plan, engine, h, block)


def _transform_plan(
    ds: Dataset,
    alias: str,
    h: Multihash,
    block: MetadataBlock,
    *,
    set_transform: SetTransform,
    vocab: SetVocab | None,
    schema: SetDataSchema | None,
    inputs: list[InputPlan],
) -> TransformPlan:
    """What the engine is asked to run again for ``block``: its recorded inputs and state."""
    event = block.event
    assert isinstance(event, ExecuteTransform)
    assert isinstance(set_transform.transform, TransformSql)
    state = ds.state()
    assert state is not None
    return TransformPlan(
        dataset_id=state.dataset_id,
        dataset_alias=alias,
        head=block.prev_block_hash or h,
        system_time=block.system_time,
        transform=set_transform.transform,
        vocab=vocabulary(vocab),
        inputs=tuple(inputs),
        prev_offset=event.prev_offset,
        prev_checkpoint=event.prev_checkpoint,
        # Checked against its hash before the engine may read it: integrity ran before,
        # but the file can change since, and a damaged checkpoint would replay wrongly.
        prev_checkpoint_file=(
            verified_checkpoint_path(ds.layout.checkpoints.root, event.prev_checkpoint)
            if event.prev_checkpoint is not None
            else None
        ),
        # The recorded schema is checked like on a pull; before the first data the
        # replay derives it again (and does not compare it: the block exists already).
        data_schema=schema,
    )


def _run_and_compare(
    ws: Workspace, plan: TransformPlan, engine: EngineClient, h: Multihash, block: MetadataBlock
) -> BlockReplay:
    """Run ``plan`` in a temporary directory and compare its event with ``block``'s."""
    from engine.errors import InvalidQuery

    event = block.event
    assert isinstance(event, ExecuteTransform)
    work_dir = transform_work_dir(ws)
    try:
        try:
            output = run_transform(plan, engine, work_dir)
        except InvalidQuery as e:
            mismatch = ReplayMismatch(h, block.sequence_number, "engine", "ran", str(e))
            return BlockReplay(mismatch, ran=False, cause="engine")
        except IncompatibleSchema as e:
            mismatch = ReplayMismatch(h, block.sequence_number, "schema", "the dataset's", str(e))
            return BlockReplay(mismatch, ran=False, cause="schema")
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    diff = _first_difference(event, _as_recorded(output.event, event))
    if diff is not None:
        return BlockReplay(ReplayMismatch(h, block.sequence_number, *diff), ran=True, cause="diff")
    return BlockReplay(None, ran=True)


def _as_recorded(again: ExecuteTransform, recorded: ExecuteTransform) -> ExecuteTransform:
    """The re-computed event with the recorded data file hash, size and new checkpoint.

    Files may legitimately differ byte-wise between runs (as kamu allows): what must
    reproduce is everything else, the data's logical hash included.
    """
    if again.new_data is not None and recorded.new_data is not None:
        again = again.replace(
            new_data=again.new_data.replace(
                physical_hash=recorded.new_data.physical_hash,
                size=recorded.new_data.size,
            ),
        )
    return again.replace(new_checkpoint=recorded.new_checkpoint)


def _replay_one(ws: Workspace, did: DatasetId, engine: EngineClient, identity: str) -> ReplayReport:
    entry = ws.resolve(did)
    ds = ws.get(entry.id)
    integrity = verify_integrity(ds)
    report = ReplayReport(
        entry.alias, entry.id, integrity.head, integrity, engine_identity=identity
    )
    if not integrity.ok:
        return report
    chain = [(h, b) for h, _raw, b in ds.iter_blocks()][::-1]
    histories: dict[DatasetId, _History] = {}
    set_transform: SetTransform | None = None
    vocab: SetVocab | None = None
    schema: SetDataSchema | None = None
    pinned: list[str] = []
    warnings: list[str] = []
    replayed = 0
    mismatch: ReplayMismatch | None = None
    for h, block in chain:
        event = block.event
        if isinstance(event, SetTransform):
            set_transform = event
            t = event.transform
            if isinstance(t, TransformSql) and t.version is not None:
                pinned.append(t.version)
                warning = identity_warning(t, identity)
                if warning and warning not in warnings:
                    warnings.append(warning)
                    log.warning("%s: %s", entry.alias, warning)
        elif isinstance(event, SetVocab):
            vocab = event
        elif isinstance(event, SetDataSchema):
            schema = event
        if not isinstance(event, ExecuteTransform):
            continue
        assert set_transform is not None  # integrity checked rule 9
        outcome = replay_transform_block(
            ws,
            ds,
            entry.alias,
            h,
            block,
            set_transform=set_transform,
            vocab=vocab,
            schema=schema,
            engine=engine,
            histories=histories,
        )
        if outcome.ran:
            replayed += 1
        if outcome.mismatch is not None:
            mismatch = outcome.mismatch
            break
    return dataclasses.replace(
        report,
        transforms_replayed=replayed,
        mismatch=mismatch,
        pinned_identities=tuple(dict.fromkeys(pinned)),
        warnings=tuple(warnings),
    )


def verify_replay(
    ws: Workspace,
    ref: str | DatasetId,
    *,
    recursive: bool = False,
    engine: EngineClient | None = None,
) -> ReplayReport:
    """Verify ``ref`` by integrity checks and by replaying its transforms.

    Root datasets (and derivatives without transforms yet) get the integrity checks
    only. With ``recursive`` the upstream derivative datasets are verified first and
    their reports attached as ``upstream``.

    Args:
        ws: the workspace.
        ref: alias or DID.
        recursive: verify the upstream derivative graph too.
        engine: the engine (default: `node.engine_manager.get_engine`).

    Raises:
        DatasetNotFound / InvalidAlias: no such dataset.
        InputNotReady: an input of a recorded transform is not in the workspace.
        engine.errors.EngineInternalError / EngineUnavailable: the engine failed (a
            refused query is reported as a mismatch instead).
    """
    from engine.spark import engine_identity
    from node.engine_manager import lazy_engine

    # Root datasets need no engine: start (or attach to) one only on first use.
    engine = lazy_engine(ws, engine)
    identity = engine_identity()
    target = ws.resolve(ref)
    state = ws.get(target.id).state()
    order: Sequence[DatasetId] = [target.id]
    if recursive and state is not None and state.transform is not None:
        order = derivative_order(ws, target.id)
    reports = [_replay_one(ws, did, engine, identity) for did in order]
    final = reports[-1]
    return dataclasses.replace(final, upstream=tuple(reports[:-1])) if recursive else final
