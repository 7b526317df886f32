"""Chain rules that other tests leave unpinned: each could be deleted unnoticed without these.

Each test is named after the rule it pins: deleting or weakening that check in
`storage.chain` makes it fail. The ``rule N: topic:`` prefix that the module documents for
every violation is asserted in full here, not only the rule number.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from fbs.model import (
    AddData,
    AttachmentEmbedded,
    AttachmentsEmbedded,
    Checkpoint,
    DataField,
    DataSchema,
    DataTypeString,
    DisablePollingSource,
    DisablePushSource,
    ExecuteTransform,
    FetchStepEthereumLogs,
    MetadataEvent,
    ReadStepCsv,
    SetAttachments,
    SetDataSchema,
    SetInfo,
    SetLicense,
    SetTransform,
    SetVocab,
    SourceState,
    SqlQueryStep,
    TransformInput,
    TransformSql,
)
from storage.chain import (
    MAX_PUSH_SOURCES,
    ChainState,
    state_from_json,
    state_to_json,
    validate_append,
)
from storage.errors import ChainRuleViolation
from tests.storage.test_chain import (
    BASE_SCHEMA,
    IN1,
    IN2,
    Chain,
    data_slice,
    derivative,
    phys,
    polling,
    push_source,
    qi,
    root_with_schema,
    schema,
    sql,
    transform,
    ts,
)


def rejects(chain: Chain, event: MetadataEvent, rule: int, topic: str) -> ChainRuleViolation:
    """``event`` is refused by ``rule`` with the documented ``rule N: topic: `` prefix."""
    error = chain.rejects(event, rule)
    assert error.topic == topic
    assert str(error).startswith(f"rule {rule}: {topic}: ")
    # The detail after the prefix says what is wrong: it is never empty or "None".
    detail = str(error).removeprefix(f"rule {rule}: {topic}: ")
    assert detail and detail != "None"
    return error


def with_data(chain: Chain, end: int) -> ChainState:
    """Append AddData of offsets [0, end], without a watermark, to ``chain``."""
    return chain.append(AddData(new_data=data_slice(0, end)))


# -- rule 7: offsets ---------------------------------------------------------------------------


def test_rule7_add_data_interval_end_before_start() -> None:
    """[5, 3] starts right after prev_offset 4 but ends before it starts."""
    c = root_with_schema()
    with_data(c, 4)
    error = rejects(c, AddData(prev_offset=4, new_data=data_slice(5, 3)), 7, "offsets")
    assert "[5, 3]" in str(error)


def test_rule7_execute_transform_interval_end_before_start() -> None:
    c = derivative()
    c.append(
        ExecuteTransform(
            query_inputs=(qi(IN1, new_block_hash=phys("b1"), new_offset=4), qi(IN2)),
            new_data=data_slice(0, 4),
        )
    )
    event = ExecuteTransform(
        query_inputs=(qi(IN1, prev_block_hash=phys("b1"), prev_offset=4), qi(IN2)),
        prev_offset=4,
        new_data=data_slice(5, 4),
    )
    rejects(c, event, 7, "offsets")


def test_rule7_single_offset_interval_is_valid() -> None:
    """``end == start`` is one record, not an empty interval."""
    c = root_with_schema()
    with_data(c, 4)
    s = c.append(AddData(prev_offset=4, new_data=data_slice(5, 5), new_watermark=ts(2)))
    assert (s.last_offset, s.num_records, s.num_data_blocks) == (5, 6, 2)


def test_rule7_prev_offset_and_start() -> None:
    c = root_with_schema()
    rejects(c, AddData(new_data=data_slice(1, 3)), 7, "offsets")
    rejects(c, AddData(prev_offset=0, new_data=data_slice(1, 3)), 7, "offsets")
    with_data(c, 4)
    rejects(c, AddData(new_data=data_slice(5, 6)), 7, "offsets")
    rejects(c, AddData(prev_offset=4, new_data=data_slice(4, 6)), 7, "offsets")
    rejects(c, AddData(prev_offset=4, new_data=data_slice(6, 7)), 7, "offsets")


# -- rule 9: ExecuteTransform ------------------------------------------------------------------


def consumed_b1() -> Chain:
    """A derivative chain whose first ExecuteTransform consumed block b1 (offsets 0-3) of IN1."""
    c = derivative()
    c.append(
        ExecuteTransform(
            query_inputs=(qi(IN1, new_block_hash=phys("b1"), new_offset=3), qi(IN2)),
            new_data=data_slice(0, 3),
            new_watermark=ts(1),
        )
    )
    return c


def test_rule9_input_prev_block_hash_continuity() -> None:
    """An input's prev_block_hash must be the block the previous step consumed last."""
    c = consumed_b1()
    wrong = ExecuteTransform(
        query_inputs=(
            qi(IN1, prev_block_hash=phys("forged"), prev_offset=3, new_block_hash=phys("b2")),
            qi(IN2),
        ),
        prev_offset=3,
        new_watermark=ts(2),
    )
    error = rejects(c, wrong, 9, "ExecuteTransform")
    assert f"input {IN1}: prev_block_hash" in str(error)
    missing = ExecuteTransform(
        query_inputs=(qi(IN1, prev_offset=3, new_block_hash=phys("b2")), qi(IN2)),
        prev_offset=3,
        new_watermark=ts(2),
    )
    rejects(c, missing, 9, "ExecuteTransform")


def test_rule9_first_step_has_no_input_prev_block_hash() -> None:
    c = derivative()
    event = ExecuteTransform(
        query_inputs=(qi(IN1, prev_block_hash=phys("b0"), new_block_hash=phys("b1")), qi(IN2)),
        new_watermark=ts(1),
    )
    rejects(c, event, 9, "ExecuteTransform")


def test_rule9_input_prev_offset_continuity() -> None:
    c = consumed_b1()
    event = ExecuteTransform(
        query_inputs=(qi(IN1, prev_block_hash=phys("b1"), prev_offset=2), qi(IN2)),
        prev_offset=3,
        new_watermark=ts(2),
    )
    rejects(c, event, 9, "ExecuteTransform")


def test_rule9_advancing_only_an_input_is_valid() -> None:
    """New input blocks alone (no data, same checkpoint and watermark) are progress."""
    c = consumed_b1()
    s = c.append(
        ExecuteTransform(
            query_inputs=(
                qi(IN1, prev_block_hash=phys("b1"), prev_offset=3),
                qi(IN2, new_block_hash=phys("c1")),
            ),
            prev_offset=3,
            new_watermark=ts(1),
        )
    )
    assert s.inputs is not None
    assert [(i.last_block_hash, i.last_offset) for i in s.inputs] == [
        (phys("b1"), 3),
        (phys("c1"), None),
    ]
    assert (s.last_offset, s.num_data_blocks) == (3, 1)


def test_rule9_new_input_offsets_must_exceed_prev() -> None:
    c = consumed_b1()
    for new_offset in (2, 3):
        event = ExecuteTransform(
            query_inputs=(
                qi(
                    IN1,
                    prev_block_hash=phys("b1"),
                    prev_offset=3,
                    new_block_hash=phys("b2"),
                    new_offset=new_offset,
                ),
                qi(IN2),
            ),
            prev_offset=3,
            new_watermark=ts(2),
        )
        rejects(c, event, 9, "ExecuteTransform")
    s = c.append(
        ExecuteTransform(
            query_inputs=(
                qi(
                    IN1,
                    prev_block_hash=phys("b1"),
                    prev_offset=3,
                    new_block_hash=phys("b2"),
                    new_offset=4,
                ),
                qi(IN2),
            ),
            prev_offset=3,
            new_watermark=ts(2),
        )
    )
    assert s.inputs is not None and s.inputs[0].last_offset == 4


def test_rule9_topics() -> None:
    c = derivative()
    rejects(
        c,
        ExecuteTransform(query_inputs=(qi(IN2), qi(IN1)), new_watermark=ts(1)),
        9,
        "ExecuteTransform",
    )
    rejects(
        c,
        ExecuteTransform(query_inputs=(qi(IN1, new_offset=3), qi(IN2)), new_watermark=ts(1)),
        9,
        "ExecuteTransform",
    )
    rejects(
        c,
        ExecuteTransform(
            query_inputs=(qi(IN1), qi(IN2)),
            prev_checkpoint=phys("cp"),
            new_watermark=ts(1),
        ),
        9,
        "ExecuteTransform",
    )
    rejects(c, ExecuteTransform(query_inputs=(qi(IN1), qi(IN2))), 6, "empty event")
    c.append(ExecuteTransform(query_inputs=(qi(IN1), qi(IN2)), new_watermark=ts(1)))
    rejects(
        c,
        ExecuteTransform(query_inputs=(qi(IN1), qi(IN2)), new_watermark=ts(1)),
        9,
        "ExecuteTransform",
    )
    bare = Chain()
    rejects(bare, ExecuteTransform(query_inputs=(), new_watermark=ts(1)), 9, "ExecuteTransform")


# -- data size, attachments, source state ------------------------------------------------------


def test_data_size_counts_only_new_data() -> None:
    c = root_with_schema()
    c.append(AddData(new_data=data_slice(0, 4, size=100), new_watermark=ts(1)))
    s = c.append(AddData(prev_offset=4, new_watermark=ts(2)))
    assert (s.data_size, s.num_data_blocks) == (100, 1)
    s = c.append(
        AddData(
            prev_offset=4,
            new_checkpoint=Checkpoint(physical_hash=phys("cp"), size=9),
            new_watermark=ts(2),
        )
    )
    assert (s.data_size, s.num_data_blocks, s.last_watermark) == (100, 1, ts(2))
    s = c.append(
        AddData(
            prev_offset=4,
            prev_checkpoint=phys("cp"),
            new_data=data_slice(5, 6, size=23),
            new_watermark=ts(2),
        )
    )
    assert (s.data_size, s.num_data_blocks, s.last_checkpoint) == (123, 2, None)


def test_attachments_tracked_and_cached() -> None:
    c = Chain()
    event = SetAttachments(
        attachments=AttachmentsEmbedded(items=(AttachmentEmbedded(path="README.md", content="x"),))
    )
    s = c.append(event)
    assert s.attachments == event
    back = state_from_json(state_to_json(s))
    assert back is not None and back.attachments == event
    assert back == s


def test_source_state_tracked_and_cached() -> None:
    c = root_with_schema()
    st = SourceState(source_name="src", kind="odf/etag", value="v1")
    s = c.append(AddData(new_source_state=st))
    assert s.last_source_state == st
    rejects(c, AddData(new_source_state=st), 8, "AddData")
    back = state_from_json(state_to_json(s))
    assert back is not None and back.last_source_state == st


# -- rule 8, 11, 12, 13 topics -----------------------------------------------------------------


def test_rule8_topics() -> None:
    c = Chain()
    rejects(c, AddData(new_data=data_slice(0, 1)), 8, "AddData")
    c = root_with_schema()
    rejects(c, AddData(prev_checkpoint=phys("x"), new_watermark=ts(1)), 8, "AddData")
    rejects(c, AddData(), 6, "empty event")


def test_rule11_topics() -> None:
    rejects(Chain(), polling(fetch=FetchStepEthereumLogs()), 11, "sources")
    rejects(
        Chain(),
        push_source(read=ReadStepCsv(ddl_schema=("a INT",), schema=DataSchema(fields=()))),
        11,
        "sources",
    )
    bad_preprocess = push_source(preprocess=sql(SqlQueryStep(query="q", alias="a")))
    rejects(Chain(), bad_preprocess, 11, "sources")
    c = Chain()
    c.append(push_source("p"))
    rejects(c, push_source("p"), 11, "sources")
    rejects(c, polling(), 11, "sources")
    c = Chain()
    c.append(polling())
    rejects(c, push_source("p"), 11, "sources")


def test_rule10_topics() -> None:
    c = Chain()
    rejects(c, SetTransform(inputs=(), transform=sql(SqlQueryStep(query="q"))), 10, "SetTransform")
    no_alias = SetTransform(
        inputs=(TransformInput(dataset_ref=IN1.to_did_odf(), alias=""),),
        transform=sql(SqlQueryStep(query="q")),
    )
    rejects(c, no_alias, 10, "SetTransform")
    not_a_did = SetTransform(
        inputs=(TransformInput(dataset_ref="some-name", alias="a"),),
        transform=sql(SqlQueryStep(query="q")),
    )
    rejects(c, not_a_did, 10, "SetTransform")
    rejects(c, transform(IN1, IN1), 10, "SetTransform")


def test_rule12_and_rule13_topics() -> None:
    c = root_with_schema()
    rejects(c, BASE_SCHEMA, 12, "schema")
    rejects(c, SetDataSchema(), 12, "schema")
    rejects(c, DisablePushSource(source_name="none"), 13, "disable source")
    rejects(c, DisablePollingSource(), 13, "disable source")


# -- module-level limits ------------------------------------------------------------------------


def test_max_push_sources_is_256() -> None:
    """The documented limit itself, not only whatever the constant says."""
    assert MAX_PUSH_SOURCES == 256
    c = Chain()
    for i in range(256):
        c.append(push_source(f"s{i}"))
    assert c.state is not None and len(c.state.push_sources) == 256
    rejects(c, push_source("s256"), 11, "sources")
    # Replacing an existing source at the limit is still allowed.
    s = c.append(push_source("s0", read=ReadStepCsv()))
    assert len(s.push_sources) == 256 and s.push_sources[-1].source_name == "s0"


@pytest.mark.parametrize("version", [0, 2])
def test_state_format_version_is_1(version: int) -> None:
    c = Chain()
    data = state_to_json(c.state)  # type: ignore[arg-type]
    assert b'"format": 1' in data
    other = data.replace(b'"format": 1', f'"format": {version}'.encode())
    assert state_from_json(other) is None
    assert state_from_json(data) == c.state


def test_rule9_new_data_without_new_input_blocks_is_valid() -> None:
    """Output data alone is progress (e.g. windows closed by an unchanged watermark)."""
    c = consumed_b1()
    s = c.append(
        ExecuteTransform(
            query_inputs=(qi(IN1, prev_block_hash=phys("b1"), prev_offset=3), qi(IN2)),
            prev_offset=3,
            new_data=data_slice(4, 5),
            new_watermark=ts(1),
        )
    )
    assert (s.last_offset, s.num_data_blocks) == (5, 2)
    assert s.inputs is not None and s.inputs[0].last_block_hash == phys("b1")


def test_new_head_is_the_appended_block() -> None:
    c = root_with_schema()
    s = c.append(AddData(new_data=data_slice(0, 1)))
    assert s.head == c.blocks[-1][0] != c.blocks[-2][0]
    assert (s.sequence_number, s.num_blocks, s.system_time) == (2, 3, ts(2))


def test_rule1_and_rule3_refuse_untyped_input() -> None:
    with pytest.raises(ChainRuleViolation, match=r"^rule 1: seed: expected a MetadataBlock"):
        validate_append(None, "not a block", phys("x"))  # type: ignore[arg-type]
    c = Chain()
    block = c.block(SetInfo(description="x"))
    with pytest.raises(ChainRuleViolation, match=r"^rule 3: prev block hash: "):
        validate_append(c.state, block, "f1620")  # type: ignore[arg-type]


def test_rule11_read_step_may_set_one_schema_form() -> None:
    ddl = push_source("ddl", read=ReadStepCsv(ddl_schema=("a INT",)))
    typed = push_source("typed", read=ReadStepCsv(schema=DataSchema(fields=())))
    c = Chain()
    c.append(ddl)
    s = c.append(typed)
    assert [p.source_name for p in s.push_sources] == ["ddl", "typed"]
    rejects(
        Chain(),
        polling(read=ReadStepCsv(ddl_schema=("a INT",), schema=DataSchema(fields=()))),
        11,
        "sources",
    )


def test_rule10_and_rule11_transform_normalization_topics() -> None:
    step = SqlQueryStep(query="q", alias="out")
    bad = SetTransform(
        inputs=(TransformInput(dataset_ref=IN1.to_did_odf(), alias="a"),), transform=sql(step)
    )
    rejects(Chain(), bad, 10, "SetTransform")
    old_style = SetTransform(
        inputs=(TransformInput(dataset_ref=IN1.to_did_odf(), alias="a"),),
        transform=TransformSql(engine="spark", query="select * from a"),
    )
    error = rejects(Chain(), old_style, 10, "SetTransform")
    assert "'query' must move to 'queries'" in str(error)
    rejects(Chain(), polling(preprocess=sql(step)), 11, "sources")
    rejects(Chain(), polling(preprocess=sql()), 11, "sources")
    two = sql(SqlQueryStep(query="a"), SqlQueryStep(query="b"))
    rejects(Chain(), polling(preprocess=two), 11, "sources")


def test_rule12_problem_is_named() -> None:
    c = root_with_schema()
    retyped = schema(
        DataField(name="offset", type=DataTypeString()),
        DataField(name="city", type=DataTypeString()),
    )
    error = rejects(c, retyped, 12, "schema")
    assert "offset" in str(error)


def test_state_json_round_trips_every_tracked_event() -> None:
    c = Chain()
    c.append(SetVocab(offset_column="o"))
    c.append(SetInfo(description="d"))
    c.append(SetLicense(short_name="MIT", name="MIT", website_url="https://x"))
    c.append(
        SetAttachments(
            attachments=AttachmentsEmbedded(items=(AttachmentEmbedded(path="a", content="b"),))
        )
    )
    s = c.append(polling())
    assert s.polling_source is not None and s.license is not None
    back = state_from_json(state_to_json(s))
    assert back == s
    assert back is not None and back.polling_source == s.polling_source


def test_state_json_blob_must_be_strict_base64() -> None:
    """A blob with stray characters is damage, even under a matching digest."""
    c = Chain()
    s = c.append(SetInfo(description="d"))
    outer = json.loads(state_to_json(s))
    body = json.loads(outer["state"])
    body["info"] = body["info"][:4] + "!" + body["info"][4:]
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    outer["state"] = text
    outer["sha3"] = hashlib.sha3_256(text.encode()).hexdigest()
    assert state_from_json(json.dumps(outer).encode()) is None
