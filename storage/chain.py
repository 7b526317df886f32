"""Pure, incremental validation of metadata chains (odf-format.md section 6.3).

A `ChainState` summarises everything the append rules need to know about a chain at
one head. `validate_append(state, block, block_hash)` checks one new block against it
and returns the state after the block; `replay` folds a whole chain (oldest first).
Nothing here does I/O: the dataset layer carries the state forward between appends,
so appending to a chain of any length reads no old blocks.

Rules (the message of every `ChainRuleViolation` starts with ``rule N: topic:``):

1. ``seed``: the first block is a `Seed` without ``prev_block_hash``; no later Seed.
2. ``sequence number``: 0 for the first block, then previous + 1.
3. ``prev block hash``: a new block's ``prev_block_hash`` is the current head.
4. ``system time``: never earlier than the previous block's.
5. ``watermark``: once a data block (AddData / ExecuteTransform) carried a
   watermark, every later data block carries one, and it never decreases.
6. ``empty event``: AddData needs one of new data / checkpoint / watermark / source
   state; ExecuteTransform one of new data / checkpoint / watermark.
7. ``offsets``: ``prev_offset`` is the last offset of the chain; new data starts
   right after it (or at 0) and ``end >= start``.
8. ``AddData``: data needs a schema first; ``prev_checkpoint`` is the previous data
   event's ``new_checkpoint``; the event must change something (no-op otherwise).
9. ``ExecuteTransform``: needs a SetTransform; ``query_inputs`` follow its inputs in
   order; per input the prev values continue the previous ExecuteTransform, new
   values differ from (and offsets exceed) the prev ones, new offsets need new
   blocks; data needs a schema; checkpoint continuity; must advance something.
10. ``SetTransform``: at least one input, distinct DIDs, every input has a DID ref
    and an alias; the transform is normalized (no ``query``, non-empty ``queries``,
    only the last step without alias).
11. ``sources``: no ReadStep with both ``ddl_schema`` and ``schema``; normalized
    ``preprocess``; push and polling sources are mutually exclusive; re-adding an
    identical push source is a no-op; EthereumLogs needs ``chain_id`` or ``node_url``;
    at most `MAX_PUSH_SOURCES` push sources.
12. ``schema``: a SetDataSchema must carry a schema; an identical one is a no-op;
    evolution may only change attributes, reorder fields and add optional fields.
13. ``disable source``: our semantics for the events kamu v0.264 does not implement
    (it panics). ``DisablePushSource(name)`` removes the push source of that name
    and is refused if there is none; ``DisablePollingSource`` removes the polling
    source and is refused if there is none. Afterwards the other kind of source may
    be added again (rule 11 sees no conflict).

Documented choices where kamu is silent: an ``AddPushSource`` whose name exists
with a different definition replaces it; schemas given only as deprecated
``raw_arrow_schema`` bytes are compared byte-wise (identical = no-op, otherwise
accepted, as their evolution cannot be checked without parsing Arrow IPC);
system-column checks of rule 12 are not made (kamu only logs them).

`state_to_json` / `state_from_json` give a self-checking JSON form of a state so a
dataset can cache it outside the kamu layout (see `storage.dataset`).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Final, TypeVar

from fbs.codec import decode_table, encode_table
from fbs.did import DatasetId
from fbs.errors import FbsError, InvalidDid
from fbs.model import (
    AddData,
    AddPushSource,
    DatasetKind,
    DataSlice,
    DisablePollingSource,
    DisablePushSource,
    ExecuteTransform,
    FetchStepEthereumLogs,
    MetadataBlock,
    ReadStep,
    Seed,
    SetAttachments,
    SetDataSchema,
    SetInfo,
    SetLicense,
    SetPollingSource,
    SetTransform,
    SetVocab,
    SourceState,
    Transform,
)
from fbs.multiformats import Multihash
from fbs.rules import schema_change_problem
from fbs.timestamp import Timestamp
from storage.errors import ChainRuleViolation

__all__ = [
    "MAX_PUSH_SOURCES",
    "STATE_FORMAT_VERSION",
    "ChainState",
    "InputState",
    "replay",
    "state_from_json",
    "state_to_json",
    "validate_append",
]

#: Most push sources a dataset may declare at once (bounds the state size).
MAX_PUSH_SOURCES: Final = 256
#: Version of the JSON state format written by `state_to_json`.
STATE_FORMAT_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class InputState:
    """What a derivative dataset has consumed of one input (after its last ExecuteTransform).

    Attributes:
        dataset_id: the input dataset.
        last_block_hash: ``new_block_hash ?: prev_block_hash`` of the last ExecuteTransform.
        last_offset: ``new_offset ?: prev_offset`` of the last ExecuteTransform.
    """

    dataset_id: DatasetId
    last_block_hash: Multihash | None
    last_offset: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainState:
    """Summary of a valid chain at ``head``: all that append validation needs.

    Attributes:
        dataset_id: DID from the Seed.
        kind: dataset kind from the Seed.
        head: hash of the newest block.
        sequence_number: sequence number of the newest block.
        system_time: system time of the newest block.
        last_offset: last record offset (``None``: no data yet).
        last_watermark: watermark of the newest data block that has one.
        last_checkpoint: ``new_checkpoint`` hash of the newest data block (or ``None``).
        last_source_state: ``new_source_state`` of the newest AddData.
        num_data_blocks: data blocks with ``new_data``.
        data_size: total size of all ``new_data`` files (bytes).
        data_schema: the current SetDataSchema event.
        transform: the current SetTransform event.
        inputs: per-input consumption after the newest ExecuteTransform (``None``: none yet).
        push_sources: active push sources, in declaration order.
        polling_source: the active polling source.
        vocab / info / license / attachments: the newest such events.
    """

    dataset_id: DatasetId
    kind: DatasetKind
    head: Multihash
    sequence_number: int
    system_time: Timestamp
    last_offset: int | None = None
    last_watermark: Timestamp | None = None
    last_checkpoint: Multihash | None = None
    last_source_state: SourceState | None = None
    num_data_blocks: int = 0
    data_size: int = 0
    data_schema: SetDataSchema | None = None
    transform: SetTransform | None = None
    inputs: tuple[InputState, ...] | None = None
    push_sources: tuple[AddPushSource, ...] = ()
    polling_source: SetPollingSource | None = None
    vocab: SetVocab | None = None
    info: SetInfo | None = None
    license: SetLicense | None = None
    attachments: SetAttachments | None = None

    @property
    def num_blocks(self) -> int:
        """Number of blocks in the chain."""
        return self.sequence_number + 1

    @property
    def num_records(self) -> int:
        """Number of records (offsets are contiguous from 0)."""
        return 0 if self.last_offset is None else self.last_offset + 1


def _fail(rule: int, topic: str, detail: str) -> ChainRuleViolation:
    return ChainRuleViolation(rule, topic, detail)


# -- entry points ---------------------------------------------------------------------------


def validate_append(
    state: ChainState | None, block: MetadataBlock, block_hash: Multihash
) -> ChainState:
    """Check ``block`` (stored under ``block_hash``) as the next block after ``state``.

    Args:
        state: the chain state at the current head, or ``None`` for an empty chain.
        block: the decoded new block.
        block_hash: its hash (the caller computed it from the stored bytes).

    Returns:
        The chain state with ``block`` as the new head.

    Raises:
        ChainRuleViolation: (an `InvalidAppend`) naming the first broken rule.
    """
    if not isinstance(block, MetadataBlock):
        raise _fail(1, "seed", f"expected a MetadataBlock, got {type(block).__name__}")
    if not isinstance(block_hash, Multihash):
        raise _fail(3, "prev block hash", "block hash must be a Multihash")
    event = block.event
    if state is None:
        return _validate_seed(block, block_hash)
    if isinstance(event, Seed):
        raise _fail(1, "seed", "a Seed block can only be the first block of a chain")
    if block.sequence_number != state.sequence_number + 1:
        raise _fail(
            2,
            "sequence number",
            f"expected {state.sequence_number + 1}, got {block.sequence_number}",
        )
    if block.prev_block_hash != state.head:
        raise _fail(
            3, "prev block hash", f"block points to {block.prev_block_hash}, head is {state.head}"
        )
    if block.system_time < state.system_time:
        raise _fail(
            4,
            "system time",
            f"{block.system_time} is earlier than the previous block's {state.system_time}",
        )
    base = replace(
        state, head=block_hash, sequence_number=block.sequence_number, system_time=block.system_time
    )
    return _apply_event(state, base, event)


def replay(blocks: Iterable[tuple[Multihash, MetadataBlock]]) -> ChainState:
    """Validate a whole chain, oldest block first, and return the state at its head.

    Args:
        blocks: ``(hash, block)`` pairs from the Seed to the head.

    Raises:
        ChainRuleViolation: naming the rule and the sequence number of the first bad block
            (an empty chain breaks rule 1).
    """
    state: ChainState | None = None
    for h, block in blocks:
        state = validate_append(state, block, h)
    if state is None:
        raise _fail(1, "seed", "empty chain")
    return state


# -- per event ------------------------------------------------------------------------------


def _validate_seed(block: MetadataBlock, block_hash: Multihash) -> ChainState:
    event = block.event
    if not isinstance(event, Seed):
        raise _fail(1, "seed", f"the first block must be a Seed, got {type(event).__name__}")
    if block.prev_block_hash is not None:
        raise _fail(1, "seed", "the Seed block must not have a prev_block_hash")
    if block.sequence_number != 0:
        raise _fail(2, "sequence number", f"the Seed must be 0, got {block.sequence_number}")
    return ChainState(
        dataset_id=event.dataset_id,
        kind=event.dataset_kind,
        head=block_hash,
        sequence_number=0,
        system_time=block.system_time,
    )


def _apply_event(prev: ChainState, base: ChainState, event: object) -> ChainState:
    """Validate ``event`` against ``prev`` and return ``base`` updated by it."""
    if isinstance(event, AddData):
        return _apply_add_data(prev, base, event)
    if isinstance(event, ExecuteTransform):
        return _apply_execute_transform(prev, base, event)
    if isinstance(event, SetTransform):
        _check_set_transform(event)
        return replace(base, transform=event)
    if isinstance(event, AddPushSource):
        return _apply_push_source(prev, base, event)
    if isinstance(event, SetPollingSource):
        return _apply_polling_source(prev, base, event)
    if isinstance(event, SetDataSchema):
        _check_schema_change(prev.data_schema, event)
        return replace(base, data_schema=event)
    if isinstance(event, DisablePushSource):
        kept = tuple(p for p in prev.push_sources if p.source_name != event.source_name)
        if len(kept) == len(prev.push_sources):
            raise _fail(13, "disable source", f"no push source named {event.source_name!r}")
        return replace(base, push_sources=kept)
    if isinstance(event, DisablePollingSource):
        if prev.polling_source is None:
            raise _fail(13, "disable source", "there is no polling source to disable")
        return replace(base, polling_source=None)
    if isinstance(event, SetVocab):
        return replace(base, vocab=event)
    if isinstance(event, SetInfo):
        return replace(base, info=event)
    if isinstance(event, SetLicense):
        return replace(base, license=event)
    if isinstance(event, SetAttachments):
        return replace(base, attachments=event)
    raise _fail(1, "seed", f"unknown event type {type(event).__name__}")  # pragma: no cover


def _check_watermark(prev: ChainState, new: Timestamp | None) -> None:
    if prev.last_watermark is None:
        return
    if new is None:
        raise _fail(5, "watermark", f"data block drops the watermark (was {prev.last_watermark})")
    if new < prev.last_watermark:
        raise _fail(5, "watermark", f"{new} is earlier than the previous {prev.last_watermark}")


def _check_offsets(
    prev: ChainState, prev_offset: int | None, new_data: DataSlice | None
) -> int | None:
    """Rule 7; returns the chain's last offset after the event."""
    if prev_offset != prev.last_offset:
        raise _fail(
            7,
            "offsets",
            f"prev_offset is {prev_offset}, the chain's last offset is {prev.last_offset}",
        )
    if new_data is None:
        return prev.last_offset
    interval = new_data.offset_interval
    expected = 0 if prev_offset is None else prev_offset + 1
    if interval.start != expected:
        raise _fail(7, "offsets", f"new data starts at {interval.start}, expected {expected}")
    if interval.end < interval.start:
        raise _fail(7, "offsets", f"empty interval [{interval.start}, {interval.end}]")
    end: int = interval.end
    return end


def _checkpoint_hash(event: AddData | ExecuteTransform) -> Multihash | None:
    return None if event.new_checkpoint is None else event.new_checkpoint.physical_hash


def _with_data(
    base: ChainState, event: AddData | ExecuteTransform, last_offset: int | None
) -> ChainState:
    new_data = event.new_data
    return replace(
        base,
        last_offset=last_offset,
        last_watermark=event.new_watermark
        if event.new_watermark is not None
        else base.last_watermark,
        last_checkpoint=_checkpoint_hash(event),
        num_data_blocks=base.num_data_blocks + (new_data is not None),
        data_size=base.data_size + (0 if new_data is None else new_data.size),
    )


def _apply_add_data(prev: ChainState, base: ChainState, event: AddData) -> ChainState:
    _check_watermark(prev, event.new_watermark)
    if (
        event.new_data is None
        and event.new_checkpoint is None
        and event.new_watermark is None
        and event.new_source_state is None
    ):
        raise _fail(6, "empty event", "AddData adds no data, checkpoint, watermark or source state")
    last_offset = _check_offsets(prev, event.prev_offset, event.new_data)
    if event.new_data is not None and prev.data_schema is None:
        raise _fail(8, "AddData", "data added before any SetDataSchema")
    if event.prev_checkpoint != prev.last_checkpoint:
        raise _fail(
            8,
            "AddData",
            f"prev_checkpoint is {event.prev_checkpoint}, the last checkpoint is "
            f"{prev.last_checkpoint}",
        )
    if (
        event.new_data is None
        and _checkpoint_hash(event) == prev.last_checkpoint
        and (event.new_watermark is None or event.new_watermark == prev.last_watermark)
        and event.new_source_state == prev.last_source_state
    ):
        raise _fail(8, "AddData", "no-op: nothing changes data, checkpoint, watermark or state")
    state = _with_data(base, event, last_offset)
    return replace(state, last_source_state=event.new_source_state)


def _input_ids(transform: SetTransform) -> list[DatasetId]:
    # Rule 10 guarantees every ref of an accepted SetTransform parses.
    return [DatasetId.from_did(i.dataset_ref) for i in transform.inputs]


def _apply_execute_transform(
    prev: ChainState, base: ChainState, event: ExecuteTransform
) -> ChainState:
    _check_watermark(prev, event.new_watermark)
    if event.new_data is None and event.new_checkpoint is None and event.new_watermark is None:
        raise _fail(6, "empty event", "ExecuteTransform adds no data, checkpoint or watermark")
    last_offset = _check_offsets(prev, event.prev_offset, event.new_data)
    if prev.transform is None:
        raise _fail(9, "ExecuteTransform", "no SetTransform precedes it")
    ids = _input_ids(prev.transform)
    got = [qi.dataset_id for qi in event.query_inputs]
    if got != ids:
        raise _fail(
            9,
            "ExecuteTransform",
            f"query_inputs {[str(i) for i in got]} do not match the transform inputs "
            f"{[str(i) for i in ids]}",
        )
    if event.new_data is not None and prev.data_schema is None:
        raise _fail(9, "ExecuteTransform", "data added before any SetDataSchema")
    if event.prev_checkpoint != prev.last_checkpoint:
        raise _fail(
            9,
            "ExecuteTransform",
            f"prev_checkpoint is {event.prev_checkpoint}, the last checkpoint is "
            f"{prev.last_checkpoint}",
        )
    before = {s.dataset_id: s for s in prev.inputs or ()}
    inputs: list[InputState] = []
    advanced = False
    for qi in event.query_inputs:
        last = before.get(qi.dataset_id, InputState(qi.dataset_id, None, None))
        who = f"input {qi.dataset_id}"
        if qi.prev_block_hash != last.last_block_hash:
            raise _fail(
                9,
                "ExecuteTransform",
                f"{who}: prev_block_hash {qi.prev_block_hash}, expected {last.last_block_hash}",
            )
        if qi.prev_offset != last.last_offset:
            raise _fail(
                9,
                "ExecuteTransform",
                f"{who}: prev_offset {qi.prev_offset}, expected {last.last_offset}",
            )
        if qi.new_block_hash is not None and qi.new_block_hash == qi.prev_block_hash:
            raise _fail(9, "ExecuteTransform", f"{who}: new_block_hash equals prev_block_hash")
        if qi.new_offset is not None:
            if qi.new_block_hash is None:
                raise _fail(9, "ExecuteTransform", f"{who}: new offsets without new blocks")
            if qi.prev_offset is not None and qi.new_offset <= qi.prev_offset:
                raise _fail(
                    9,
                    "ExecuteTransform",
                    f"{who}: new_offset {qi.new_offset} does not exceed prev_offset "
                    f"{qi.prev_offset}",
                )
        advanced = advanced or qi.new_block_hash is not None
        inputs.append(
            InputState(
                qi.dataset_id,
                qi.new_block_hash if qi.new_block_hash is not None else qi.prev_block_hash,
                qi.new_offset if qi.new_offset is not None else qi.prev_offset,
            )
        )
    if not (
        advanced
        or event.new_data is not None
        or _checkpoint_hash(event) != prev.last_checkpoint
        or (event.new_watermark is not None and event.new_watermark != prev.last_watermark)
    ):
        raise _fail(
            9, "ExecuteTransform", "no-op: advances no data, input, checkpoint or watermark"
        )
    return replace(_with_data(base, event, last_offset), inputs=tuple(inputs))


def _check_transform_normalized(rule: int, topic: str, transform: Transform) -> None:
    # TransformSql is the only Transform variant of v0.38.
    if transform.query is not None:
        raise _fail(rule, topic, "transform is not normalized: 'query' must move to 'queries'")
    steps = transform.queries or ()
    if not steps:
        raise _fail(rule, topic, "transform has no queries")
    if steps[-1].alias is not None:
        raise _fail(rule, topic, "the last query step (the output) must not have an alias")
    for step in steps[:-1]:
        if step.alias is None:
            raise _fail(rule, topic, "every query step but the last needs an alias")


def _check_set_transform(event: SetTransform) -> None:
    if not event.inputs:
        raise _fail(10, "SetTransform", "a transform needs at least one input")
    seen: set[DatasetId] = set()
    for i in event.inputs:
        try:
            did = DatasetId.from_did(i.dataset_ref)
        except InvalidDid:
            raise _fail(
                10, "SetTransform", f"input {i.dataset_ref!r} is not a DatasetID reference"
            ) from None
        if not i.alias:
            raise _fail(10, "SetTransform", f"input {i.dataset_ref} has no alias")
        if did in seen:
            raise _fail(10, "SetTransform", f"input {did} is listed twice")
        seen.add(did)
    _check_transform_normalized(10, "SetTransform", event.transform)


def _check_read_step(read: ReadStep) -> None:
    if read.ddl_schema is not None and read.schema is not None:
        raise _fail(11, "sources", "read step sets both 'ddlSchema' and 'schema'")


def _apply_push_source(prev: ChainState, base: ChainState, event: AddPushSource) -> ChainState:
    _check_read_step(event.read)
    if event.preprocess is not None:
        _check_transform_normalized(11, "sources", event.preprocess)
    if prev.polling_source is not None:
        raise _fail(11, "sources", "push sources cannot be added while a polling source exists")
    kept: list[AddPushSource] = []
    for existing in prev.push_sources:
        if existing.source_name == event.source_name:
            if existing == event:
                raise _fail(11, "sources", f"no-op: push source {event.source_name!r} unchanged")
            continue  # replaced by the new definition
        kept.append(existing)
    if len(kept) >= MAX_PUSH_SOURCES:
        raise _fail(11, "sources", f"more than {MAX_PUSH_SOURCES} push sources")
    kept.append(event)
    return replace(base, push_sources=tuple(kept))


def _apply_polling_source(
    prev: ChainState, base: ChainState, event: SetPollingSource
) -> ChainState:
    _check_read_step(event.read)
    if event.preprocess is not None:
        _check_transform_normalized(11, "sources", event.preprocess)
    if prev.push_sources:
        raise _fail(11, "sources", "a polling source cannot be set while push sources exist")
    fetch = event.fetch
    if isinstance(fetch, FetchStepEthereumLogs) and fetch.chain_id is None and not fetch.node_url:
        raise _fail(11, "sources", "EthereumLogs fetch needs 'chainId' or 'nodeUrl'")
    return replace(base, polling_source=event)


# -- schema evolution -------------------------------------------------------------------------


def _check_schema_change(current: SetDataSchema | None, new: SetDataSchema) -> None:
    if new.schema is None and new.raw_arrow_schema is None:
        raise _fail(12, "schema", "SetDataSchema carries no schema")
    if current is not None and current == new:
        raise _fail(12, "schema", "no-op: the schema is identical to the current one")
    if new.schema is None or (current is not None and current.schema is None):
        return  # raw Arrow schemas: see module docstring
    problem = schema_change_problem(None if current is None else current.schema, new.schema)
    if problem is not None:
        raise _fail(12, "schema", str(problem))


# -- JSON form (for caches) -------------------------------------------------------------------

_E = TypeVar("_E")


def _blob(value: object | None) -> str | None:
    return None if value is None else base64.b64encode(encode_table(value)).decode("ascii")


def _unblob(cls: type[_E], text: Any) -> _E | None:
    if text is None:
        return None
    return decode_table(cls, base64.b64decode(text, validate=True))


def _opt_hash(h: Multihash | None) -> str | None:
    return None if h is None else h.to_multibase()


def _parse_opt_hash(text: Any) -> Multihash | None:
    return None if text is None else Multihash.from_multibase(text)


def _opt_ts(t: Timestamp | None) -> int | None:
    return None if t is None else t.nanos


def _parse_opt_ts(value: Any) -> Timestamp | None:
    return None if value is None else Timestamp(value)


def state_to_json(state: ChainState) -> bytes:
    """A self-checking JSON encoding of ``state`` (events as base64 flatbuffer tables)."""
    body = {
        "dataset_id": state.dataset_id.to_did_odf(),
        "kind": int(state.kind),
        "head": state.head.to_multibase(),
        "sequence_number": state.sequence_number,
        "system_time": state.system_time.nanos,
        "last_offset": state.last_offset,
        "last_watermark": _opt_ts(state.last_watermark),
        "last_checkpoint": _opt_hash(state.last_checkpoint),
        "last_source_state": None
        if state.last_source_state is None
        else [
            state.last_source_state.source_name,
            state.last_source_state.kind,
            state.last_source_state.value,
        ],
        "num_data_blocks": state.num_data_blocks,
        "data_size": state.data_size,
        "data_schema": _blob(state.data_schema),
        "transform": _blob(state.transform),
        "inputs": None
        if state.inputs is None
        else [
            [i.dataset_id.to_did_odf(), _opt_hash(i.last_block_hash), i.last_offset]
            for i in state.inputs
        ],
        "push_sources": [_blob(p) for p in state.push_sources],
        "polling_source": _blob(state.polling_source),
        "vocab": _blob(state.vocab),
        "info": _blob(state.info),
        "license": _blob(state.license),
        "attachments": _blob(state.attachments),
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha3_256(text.encode("utf-8")).hexdigest()
    return json.dumps(
        {"format": STATE_FORMAT_VERSION, "sha3": digest, "state": text}, sort_keys=True
    ).encode("utf-8")


def state_from_json(data: bytes) -> ChainState | None:
    """Parse `state_to_json` output; ``None`` if it is damaged, foreign or outdated.

    A cache is only an optimisation, so every defect means "recompute", never an error.
    """
    try:
        outer = json.loads(data)
        if not isinstance(outer, dict) or outer.get("format") != STATE_FORMAT_VERSION:
            return None
        text = outer["state"]
        if hashlib.sha3_256(text.encode("utf-8")).hexdigest() != outer["sha3"]:
            return None
        b = json.loads(text)
        sst = b["last_source_state"]
        return ChainState(
            dataset_id=DatasetId.from_did(b["dataset_id"]),
            kind=DatasetKind(b["kind"]),
            head=Multihash.from_multibase(b["head"]),
            sequence_number=int(b["sequence_number"]),
            system_time=Timestamp(b["system_time"]),
            last_offset=b["last_offset"],
            last_watermark=_parse_opt_ts(b["last_watermark"]),
            last_checkpoint=_parse_opt_hash(b["last_checkpoint"]),
            last_source_state=None
            if sst is None
            else SourceState(source_name=sst[0], kind=sst[1], value=sst[2]),
            num_data_blocks=int(b["num_data_blocks"]),
            data_size=int(b["data_size"]),
            data_schema=_unblob(SetDataSchema, b["data_schema"]),
            transform=_unblob(SetTransform, b["transform"]),
            inputs=None
            if b["inputs"] is None
            else tuple(
                InputState(DatasetId.from_did(d), _parse_opt_hash(h), o) for d, h, o in b["inputs"]
            ),
            push_sources=tuple(
                p for p in (_unblob(AddPushSource, x) for x in b["push_sources"]) if p is not None
            ),
            polling_source=_unblob(SetPollingSource, b["polling_source"]),
            vocab=_unblob(SetVocab, b["vocab"]),
            info=_unblob(SetInfo, b["info"]),
            license=_unblob(SetLicense, b["license"]),
            attachments=_unblob(SetAttachments, b["attachments"]),
        )
    except (FbsError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None
