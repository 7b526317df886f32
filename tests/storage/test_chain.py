"""Append validation: every rule of odf-format.md 6.3 (plus our rule 13), replay, JSON state."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fbs.codec import block_hash, encode_block
from fbs.did import DatasetId
from fbs.model import (
    AddData,
    AddPushSource,
    Checkpoint,
    DataField,
    DataSchema,
    DatasetKind,
    DataSlice,
    DataTypeInt64,
    DataTypeOption,
    DataTypeString,
    DisablePollingSource,
    DisablePushSource,
    ExecuteTransform,
    ExecuteTransformInput,
    ExtraAttributes,
    FetchStepEthereumLogs,
    FetchStepUrl,
    MergeStrategyAppend,
    MetadataBlock,
    MetadataEvent,
    OffsetInterval,
    ReadStepCsv,
    ReadStepNdJson,
    Seed,
    SetDataSchema,
    SetInfo,
    SetLicense,
    SetPollingSource,
    SetTransform,
    SetVocab,
    SourceState,
    SqlQueryStep,
    TransformInput,
    TransformSql,
)
from fbs.multiformats import ARROW0_SHA3_256, Multihash
from fbs.timestamp import Timestamp
from storage.chain import (
    MAX_PUSH_SOURCES,
    ChainState,
    replay,
    state_from_json,
    state_to_json,
    validate_append,
)
from storage.errors import ChainRuleViolation, InvalidAppend

T0 = Timestamp.parse_rfc3339("2020-01-01T00:00:00Z")
ROOT_ID = DatasetId.new_seeded(b"root")
IN1 = DatasetId.new_seeded(b"input1")
IN2 = DatasetId.new_seeded(b"input2")


def ts(seconds: int) -> Timestamp:
    """``T0 + seconds``."""
    return Timestamp(T0.nanos + seconds * 10**9)


def phys(tag: str) -> Multihash:
    """A physical-style hash derived from ``tag``."""
    return Multihash.sha3_256(tag.encode())


def logical(tag: str) -> Multihash:
    """A logical-style hash derived from ``tag``."""
    return Multihash(ARROW0_SHA3_256, phys(tag).digest)


def schema(*fields: DataField) -> SetDataSchema:
    return SetDataSchema(schema=DataSchema(fields=fields))


BASE_SCHEMA = schema(
    DataField(name="offset", type=DataTypeInt64()),
    DataField(name="city", type=DataTypeString()),
)


def data_slice(start: int, end: int, tag: str = "d", size: int = 10) -> DataSlice:
    return DataSlice(
        logical_hash=logical(f"{tag}{start}"),
        physical_hash=phys(f"{tag}{start}"),
        offset_interval=OffsetInterval(start=start, end=end),
        size=size,
    )


def sql(*steps: SqlQueryStep) -> TransformSql:
    return TransformSql(engine="datafusion", queries=steps)


def transform(*ids: DatasetId) -> SetTransform:
    return SetTransform(
        inputs=tuple(
            TransformInput(dataset_ref=i.to_did_odf(), alias=f"in{n}") for n, i in enumerate(ids)
        ),
        transform=sql(SqlQueryStep(query="select * from in0")),
    )


def push_source(name: str = "default", **kw: object) -> AddPushSource:
    read = kw.pop("read", ReadStepNdJson())
    return AddPushSource(source_name=name, read=read, merge=MergeStrategyAppend(), **kw)  # type: ignore[arg-type]


class Chain:
    """Builds real blocks (encoded and hashed) and validates each append."""

    def __init__(self, kind: DatasetKind = DatasetKind.Root, did: DatasetId = ROOT_ID) -> None:
        self.state: ChainState | None = None
        self.blocks: list[tuple[Multihash, MetadataBlock]] = []
        self.t = 0
        self.append(Seed(dataset_id=did, dataset_kind=kind))

    def block(self, event: MetadataEvent, **overrides: object) -> MetadataBlock:
        fields: dict[str, object] = {
            "system_time": ts(self.t),
            "prev_block_hash": None if self.state is None else self.state.head,
            "sequence_number": 0 if self.state is None else self.state.sequence_number + 1,
            "event": event,
        }
        fields.update(overrides)
        return MetadataBlock(**fields)  # type: ignore[arg-type]

    def try_append(self, event: MetadataEvent, **overrides: object) -> ChainState:
        block = self.block(event, **overrides)
        h = block_hash(encode_block(block))
        new = validate_append(self.state, block, h)
        self.state = new
        self.blocks.append((h, block))
        self.t += 1
        return new

    def append(self, event: MetadataEvent, **overrides: object) -> ChainState:
        return self.try_append(event, **overrides)

    def rejects(self, event: MetadataEvent, rule: int, **overrides: object) -> ChainRuleViolation:
        before = self.state
        with pytest.raises(ChainRuleViolation) as info:
            self.try_append(event, **overrides)
        assert info.value.rule == rule, str(info.value)
        assert str(info.value).startswith(f"rule {rule}: ")
        assert self.state is before
        return info.value


def root_with_schema() -> Chain:
    c = Chain()
    c.append(BASE_SCHEMA)
    return c


def derivative() -> Chain:
    c = Chain(DatasetKind.Derivative)
    c.append(transform(IN1, IN2))
    c.append(BASE_SCHEMA)
    return c


# -- rules 1-4 ------------------------------------------------------------------------------


def test_first_block_must_be_seed() -> None:
    block = MetadataBlock(system_time=T0, sequence_number=0, event=SetInfo(description="x"))
    with pytest.raises(ChainRuleViolation, match=r"^rule 1: seed:") as info:
        validate_append(None, block, phys("b"))
    assert info.value.rule == 1
    assert isinstance(info.value, InvalidAppend)


def test_seed_without_prev_and_only_first() -> None:
    seed = Seed(dataset_id=ROOT_ID, dataset_kind=DatasetKind.Root)
    block = MetadataBlock(system_time=T0, prev_block_hash=phys("x"), sequence_number=0, event=seed)
    with pytest.raises(ChainRuleViolation, match="rule 1"):
        validate_append(None, block, phys("b"))
    c = Chain()
    c.rejects(seed, 1)


def test_seed_sequence_number_zero() -> None:
    seed = Seed(dataset_id=ROOT_ID, dataset_kind=DatasetKind.Root)
    block = MetadataBlock(system_time=T0, sequence_number=1, event=seed)
    with pytest.raises(ChainRuleViolation, match="rule 2"):
        validate_append(None, block, phys("b"))


def test_seed_state() -> None:
    c = Chain(DatasetKind.Derivative)
    assert c.state is not None
    assert c.state.dataset_id == ROOT_ID
    assert c.state.kind == DatasetKind.Derivative
    assert c.state.num_blocks == 1 and c.state.num_records == 0


def test_sequence_numbers() -> None:
    c = Chain()
    c.rejects(SetInfo(description="a"), 2, sequence_number=2)
    c.rejects(SetInfo(description="a"), 2, sequence_number=0)
    assert c.append(SetInfo(description="a")).sequence_number == 1


def test_prev_block_hash_is_head() -> None:
    c = Chain()
    c.rejects(SetInfo(description="a"), 3, prev_block_hash=phys("elsewhere"))
    c.rejects(SetInfo(description="a"), 3, prev_block_hash=None)


def test_system_time_monotonic() -> None:
    c = Chain()
    c.t = 5
    c.append(SetInfo(description="a"))
    c.rejects(SetInfo(description="b"), 4, system_time=ts(4))
    assert c.append(SetInfo(description="b"), system_time=ts(6)).system_time == ts(6)
    assert c.append(SetInfo(description="c"), system_time=ts(6)).system_time == ts(6)


def test_empty_replay() -> None:
    with pytest.raises(ChainRuleViolation, match="rule 1"):
        replay([])


# -- rules 5-8: AddData ----------------------------------------------------------------------


def test_add_data_happy_path() -> None:
    c = root_with_schema()
    s = c.append(AddData(new_data=data_slice(0, 9), new_watermark=ts(1)))
    assert s.last_offset == 9 and s.num_records == 10 and s.last_watermark == ts(1)
    s = c.append(AddData(prev_offset=9, new_data=data_slice(10, 19), new_watermark=ts(1)))
    assert s.last_offset == 19 and s.num_data_blocks == 2 and s.data_size == 20


def test_watermark_rules() -> None:
    c = root_with_schema()
    c.append(AddData(new_data=data_slice(0, 0), new_watermark=ts(10)))
    c.rejects(AddData(prev_offset=0, new_data=data_slice(1, 1)), 5)
    c.rejects(AddData(prev_offset=0, new_data=data_slice(1, 1), new_watermark=ts(9)), 5)
    assert c.append(AddData(prev_offset=0, new_watermark=ts(11))).last_watermark == ts(11)


def test_empty_add_data() -> None:
    c = root_with_schema()
    c.rejects(AddData(), 6)
    c.rejects(AddData(extra=ExtraAttributes({"a": 1})), 6)


def test_offsets() -> None:
    c = root_with_schema()
    c.rejects(AddData(new_data=data_slice(1, 5)), 7)
    c.rejects(AddData(prev_offset=0, new_data=data_slice(1, 5)), 7)
    backwards = data_slice(0, 0).replace(offset_interval=OffsetInterval(start=0, end=0))
    c.rejects(
        AddData(
            prev_offset=None,
            new_data=backwards.replace(offset_interval=OffsetInterval(start=1, end=0)),
        ),
        7,
    )
    c.append(AddData(new_data=data_slice(0, 4)))
    c.rejects(AddData(new_data=data_slice(5, 6)), 7)  # prev_offset missing
    c.rejects(AddData(prev_offset=3, new_data=data_slice(4, 6)), 7)
    err = c.rejects(AddData(prev_offset=4, new_data=data_slice(6, 7)), 7)
    assert "rule 7: offsets:" in str(err)
    assert c.append(AddData(prev_offset=4, new_data=data_slice(5, 5))).last_offset == 5


def test_data_needs_schema() -> None:
    c = Chain()
    c.rejects(AddData(new_data=data_slice(0, 0)), 8)
    # A watermark alone needs no schema.
    assert c.append(AddData(new_watermark=ts(1))).last_watermark == ts(1)


def test_checkpoint_continuity() -> None:
    c = root_with_schema()
    cp = Checkpoint(physical_hash=phys("cp1"), size=3)
    c.rejects(AddData(prev_checkpoint=phys("cp0"), new_checkpoint=cp), 8)
    s = c.append(AddData(new_checkpoint=cp))
    assert s.last_checkpoint == phys("cp1")
    c.rejects(AddData(new_watermark=ts(1)), 8)  # prev_checkpoint missing
    c.append(AddData(prev_checkpoint=phys("cp1"), new_watermark=ts(1)))
    # The previous data event had no checkpoint: none to continue from.
    assert c.state is not None and c.state.last_checkpoint is None


def test_add_data_no_op() -> None:
    c = root_with_schema()
    cp = Checkpoint(physical_hash=phys("cp1"), size=3)
    state = SourceState(source_name="s", kind="odf/etag", value="1")
    c.append(AddData(new_checkpoint=cp, new_watermark=ts(1), new_source_state=state))
    # Repeating checkpoint, watermark and source state changes nothing.
    c.rejects(
        AddData(
            prev_checkpoint=cp.physical_hash,
            new_checkpoint=cp,
            new_watermark=ts(1),
            new_source_state=state,
        ),
        8,
    )
    new_state = state.replace(value="2")
    s = c.append(
        AddData(
            prev_checkpoint=cp.physical_hash,
            new_checkpoint=cp,
            new_watermark=ts(1),
            new_source_state=new_state,
        )
    )
    assert s.last_source_state == new_state


# -- rule 9: ExecuteTransform ----------------------------------------------------------------


def qi(did: DatasetId, **kw: object) -> ExecuteTransformInput:
    return ExecuteTransformInput(dataset_id=did, **kw)  # type: ignore[arg-type]


def test_execute_transform_needs_set_transform() -> None:
    c = Chain(DatasetKind.Derivative)
    c.rejects(ExecuteTransform(query_inputs=(), new_watermark=ts(1)), 9)


def test_execute_transform_happy_path_carries_inputs() -> None:
    c = derivative()
    b1, b2 = phys("in1-b1"), phys("in2-b1")
    s = c.append(
        ExecuteTransform(
            query_inputs=(qi(IN1, new_block_hash=b1, new_offset=4), qi(IN2, new_block_hash=b2)),
            new_data=data_slice(0, 4),
            new_watermark=ts(1),
        )
    )
    assert s.inputs is not None
    assert [(i.last_block_hash, i.last_offset) for i in s.inputs] == [(b1, 4), (b2, None)]
    # Next step: prev values must continue.
    c.rejects(
        ExecuteTransform(
            query_inputs=(qi(IN1, prev_block_hash=b1), qi(IN2)),
            prev_offset=4,
            new_watermark=ts(2),
        ),
        9,
    )
    c.rejects(
        ExecuteTransform(
            query_inputs=(qi(IN1, prev_block_hash=b1, prev_offset=3), qi(IN2, prev_block_hash=b2)),
            prev_offset=4,
            new_watermark=ts(2),
        ),
        9,
    )
    s = c.append(
        ExecuteTransform(
            query_inputs=(
                qi(IN1, prev_block_hash=b1, prev_offset=4, new_block_hash=phys("b3"), new_offset=9),
                qi(IN2, prev_block_hash=b2),
            ),
            prev_offset=4,
            new_data=data_slice(5, 9),
            new_watermark=ts(2),
        )
    )
    assert s.last_offset == 9


def test_execute_transform_input_order_and_ids() -> None:
    c = derivative()
    c.rejects(ExecuteTransform(query_inputs=(qi(IN2), qi(IN1)), new_watermark=ts(1)), 9)
    c.rejects(ExecuteTransform(query_inputs=(qi(IN1),), new_watermark=ts(1)), 9)


def test_execute_transform_input_intervals() -> None:
    c = derivative()
    b1 = phys("b1")
    c.append(
        ExecuteTransform(
            query_inputs=(qi(IN1, new_block_hash=b1, new_offset=3), qi(IN2)),
            new_watermark=ts(1),
        )
    )
    # new == prev block hash
    c.rejects(
        ExecuteTransform(
            query_inputs=(qi(IN1, prev_block_hash=b1, prev_offset=3, new_block_hash=b1), qi(IN2)),
            new_watermark=ts(2),
        ),
        9,
    )
    # offsets without blocks
    c.rejects(
        ExecuteTransform(
            query_inputs=(qi(IN1, prev_block_hash=b1, prev_offset=3, new_offset=5), qi(IN2)),
            new_watermark=ts(2),
        ),
        9,
    )
    # offsets not advancing
    c.rejects(
        ExecuteTransform(
            query_inputs=(
                qi(IN1, prev_block_hash=b1, prev_offset=3, new_block_hash=phys("b2"), new_offset=3),
                qi(IN2),
            ),
            new_watermark=ts(2),
        ),
        9,
    )


def test_execute_transform_no_op_and_empty() -> None:
    c = derivative()
    c.rejects(ExecuteTransform(query_inputs=(qi(IN1), qi(IN2))), 6)
    c.append(ExecuteTransform(query_inputs=(qi(IN1), qi(IN2)), new_watermark=ts(1)))
    c.rejects(ExecuteTransform(query_inputs=(qi(IN1), qi(IN2)), new_watermark=ts(1)), 9)


def test_execute_transform_data_needs_schema() -> None:
    c = Chain(DatasetKind.Derivative)
    c.append(transform(IN1))
    c.rejects(
        ExecuteTransform(
            query_inputs=(qi(IN1, new_block_hash=phys("b"), new_offset=0),),
            new_data=data_slice(0, 0),
        ),
        9,
    )


def test_execute_transform_checkpoint_continuity() -> None:
    c = derivative()
    cp = Checkpoint(physical_hash=phys("cp"), size=1)
    c.append(ExecuteTransform(query_inputs=(qi(IN1), qi(IN2)), new_checkpoint=cp))
    c.rejects(ExecuteTransform(query_inputs=(qi(IN1), qi(IN2)), new_watermark=ts(1)), 9)
    s = c.append(
        ExecuteTransform(
            query_inputs=(qi(IN1), qi(IN2)), prev_checkpoint=phys("cp"), new_watermark=ts(1)
        )
    )
    assert s.last_checkpoint is None


# -- rule 10: SetTransform -------------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        SetTransform(inputs=(), transform=sql(SqlQueryStep(query="q"))),
        SetTransform(
            inputs=(TransformInput(dataset_ref="some-alias", alias="a"),),
            transform=sql(SqlQueryStep(query="q")),
        ),
        SetTransform(
            inputs=(TransformInput(dataset_ref=IN1.to_did_odf()),),
            transform=sql(SqlQueryStep(query="q")),
        ),
        SetTransform(
            inputs=(
                TransformInput(dataset_ref=IN1.to_did_odf(), alias="a"),
                TransformInput(dataset_ref=IN1.to_did_key(), alias="b"),
            ),
            transform=sql(SqlQueryStep(query="q")),
        ),
        transform(IN1).replace(transform=TransformSql(engine="e", query="select 1")),
        transform(IN1).replace(transform=TransformSql(engine="e", queries=())),
        transform(IN1).replace(transform=TransformSql(engine="e")),
        transform(IN1).replace(transform=sql(SqlQueryStep(alias="out", query="q"))),
        transform(IN1).replace(
            transform=sql(SqlQueryStep(query="a"), SqlQueryStep(query="b")),
        ),
    ],
    ids=[
        "no-inputs",
        "alias-ref",
        "no-alias",
        "duplicate-did",
        "query-not-normalized",
        "empty-queries",
        "no-queries",
        "output-with-alias",
        "step-without-alias",
    ],
)
def test_set_transform_rejections(event: SetTransform) -> None:
    Chain(DatasetKind.Derivative).rejects(event, 10)


def test_set_transform_multi_step_ok() -> None:
    c = Chain(DatasetKind.Derivative)
    event = transform(IN1).replace(
        transform=sql(SqlQueryStep(alias="tmp", query="a"), SqlQueryStep(query="b")),
    )
    assert c.append(event).transform == event


# -- rule 11: sources -------------------------------------------------------------------------


def polling(**kw: object) -> SetPollingSource:
    fetch = kw.pop("fetch", FetchStepUrl(url="https://example.org/x.csv"))
    return SetPollingSource(
        fetch=fetch,  # type: ignore[arg-type]
        read=kw.pop("read", ReadStepCsv()),  # type: ignore[arg-type]
        merge=MergeStrategyAppend(),
        **kw,  # type: ignore[arg-type]
    )


def test_read_step_ddl_and_schema() -> None:
    bad = ReadStepCsv(ddl_schema=("a INT",), schema=DataSchema(fields=()))
    Chain().rejects(push_source(read=bad), 11)
    Chain().rejects(polling(read=bad), 11)


def test_preprocess_must_be_normalized() -> None:
    raw = TransformSql(engine="datafusion", query="select 1")
    Chain().rejects(push_source(preprocess=raw), 11)
    Chain().rejects(polling(preprocess=raw), 11)
    ok = sql(SqlQueryStep(query="select 1"))
    assert Chain().append(push_source(preprocess=ok)).push_sources[0].preprocess == ok


def test_push_and_polling_exclusive() -> None:
    c = Chain()
    c.append(push_source())
    c.rejects(polling(), 11)
    c2 = Chain()
    c2.append(polling())
    c2.rejects(push_source(), 11)


def test_identical_push_source_is_no_op_and_replacement() -> None:
    c = Chain()
    c.append(push_source("a"))
    c.append(push_source("b"))
    c.rejects(push_source("a"), 11)
    changed = push_source("a", read=ReadStepCsv(header=True))
    s = c.append(changed)
    assert [p.source_name for p in s.push_sources] == ["b", "a"]
    assert s.push_sources[1] == changed


def test_ethereum_logs_needs_chain_or_node() -> None:
    Chain().rejects(polling(fetch=FetchStepEthereumLogs()), 11)
    assert Chain().append(polling(fetch=FetchStepEthereumLogs(chain_id=1))).polling_source


def test_push_source_limit() -> None:
    c = Chain()
    for i in range(MAX_PUSH_SOURCES):
        c.append(push_source(f"s{i}"))
    c.rejects(push_source("one-too-many"), 11)


# -- rule 12: schema ---------------------------------------------------------------------------


def test_schema_rules() -> None:
    c = Chain()
    c.rejects(SetDataSchema(), 12)
    c.append(BASE_SCHEMA)
    c.rejects(BASE_SCHEMA, 12)  # identical
    c.rejects(schema(DataField(name="offset", type=DataTypeInt64())), 12)  # removal
    c.rejects(
        schema(
            DataField(name="offset", type=DataTypeInt64()),
            DataField(name="city", type=DataTypeOption(inner=DataTypeString())),
        ),
        12,
    )  # optionality change
    c.rejects(
        schema(*BASE_SCHEMA.schema.fields, DataField(name="pop", type=DataTypeInt64())),  # type: ignore[union-attr]
        12,
    )  # added required
    reordered = schema(
        DataField(name="city", type=DataTypeString(), extra=ExtraAttributes({"a/b": 1})),
        DataField(name="offset", type=DataTypeInt64()),
        DataField(name="pop", type=DataTypeOption(inner=DataTypeInt64())),
    )
    assert c.append(reordered).data_schema == reordered


def test_schema_duplicate_fields() -> None:
    dup = schema(
        DataField(name="a", type=DataTypeInt64()), DataField(name="a", type=DataTypeInt64())
    )
    Chain().rejects(dup, 12)


def test_raw_arrow_schema() -> None:
    c = Chain()
    c.append(SetDataSchema(raw_arrow_schema=b"\x01\x02"))
    c.rejects(SetDataSchema(raw_arrow_schema=b"\x01\x02"), 12)
    assert c.append(SetDataSchema(raw_arrow_schema=b"\x03")).data_schema is not None


# -- rule 13: disable events ------------------------------------------------------------------


def test_disable_push_source() -> None:
    c = Chain()
    c.rejects(DisablePushSource(source_name="x"), 13)
    c.append(push_source("x"))
    s = c.append(DisablePushSource(source_name="x"))
    assert s.push_sources == ()
    assert c.append(polling()).polling_source is not None  # exclusivity lifted


def test_disable_polling_source() -> None:
    c = Chain()
    c.rejects(DisablePollingSource(), 13)
    c.append(polling())
    assert c.append(DisablePollingSource()).polling_source is None
    assert c.append(push_source()).push_sources


# -- other events, replay, JSON ---------------------------------------------------------------


def test_metadata_events_tracked() -> None:
    c = Chain()
    c.append(SetVocab(offset_column="o"))
    c.append(SetInfo(description="d"))
    s = c.append(SetLicense(short_name="MIT", name="MIT", website_url="https://x"))
    assert s.vocab == SetVocab(offset_column="o")
    assert s.info == SetInfo(description="d")
    assert s.license is not None and s.license.short_name == "MIT"


def full_chain() -> Chain:
    c = derivative()
    c.append(SetVocab(event_time_column="t"))
    c.append(SetInfo(description="x", keywords=("a", "b")))
    c.append(
        ExecuteTransform(
            query_inputs=(qi(IN1, new_block_hash=phys("b1"), new_offset=3), qi(IN2)),
            new_data=data_slice(0, 3),
            new_checkpoint=Checkpoint(physical_hash=phys("cp"), size=7),
            new_watermark=ts(1),
        )
    )
    return c


def test_replay_equals_incremental() -> None:
    c = full_chain()
    assert replay(c.blocks) == c.state


def test_replay_names_first_bad_block() -> None:
    c = full_chain()
    blocks = list(c.blocks)
    h, b = blocks[2]
    blocks[2] = (h, b.replace(sequence_number=7))
    with pytest.raises(ChainRuleViolation, match="rule 2"):
        replay(blocks)


def test_state_json_roundtrip() -> None:
    c = full_chain()
    assert c.state is not None
    s = replace(
        c.state,
        push_sources=(push_source("p"),),
        last_source_state=SourceState(source_name="s", kind="k", value="v"),
    )
    assert state_from_json(state_to_json(s)) == s


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-3],
        lambda b: b.replace(b'"format": 1', b'"format": 2'),
        lambda b: b.replace(b"sequence_number", b"sequence_numbxr"),
        lambda b: b"null",
        lambda b: b"\xff\xfe",
    ],
)
def test_state_json_damage_is_none(damage: object) -> None:
    c = full_chain()
    assert c.state is not None
    data = state_to_json(c.state)
    assert state_from_json(damage(data)) is None  # type: ignore[operator]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.booleans(), st.integers(0, 3)), max_size=12))
def test_random_valid_add_data_chains(steps: list[tuple[int, bool, int]]) -> None:
    c = root_with_schema()
    offset: int | None = None
    wm = 0
    for n, with_cp, wm_step in steps:
        start = 0 if offset is None else offset + 1
        wm += wm_step
        cp_prev = c.state.last_checkpoint if c.state else None
        cp = Checkpoint(physical_hash=phys(f"cp{start}"), size=1) if with_cp else None
        c.append(
            AddData(
                prev_checkpoint=cp_prev,
                prev_offset=offset,
                new_data=data_slice(start, start + n - 1),
                new_checkpoint=cp,
                new_watermark=ts(wm),
            )
        )
        offset = start + n - 1
    assert c.state is not None
    assert c.state.last_offset == offset
    assert replay(c.blocks) == c.state
    assert state_from_json(state_to_json(c.state)) == c.state


def test_non_block_input_is_typed() -> None:
    with pytest.raises(InvalidAppend):
        validate_append(None, "not a block", phys("x"))  # type: ignore[arg-type]
    c = Chain()
    with pytest.raises(InvalidAppend):
        validate_append(c.state, c.block(SetInfo(description="x")), "f1620")  # type: ignore[arg-type]
