"""Byte/hash vectors pinned by kamu-cli (facts from its test suite; see docs §7).

Blocks are constructed with our model; the expected SHA3-256 values are kamu's
(v0.264.0 = block format 2, v0.265.0 = block format 3).
"""

from __future__ import annotations

import base64

import pytest

from fbs.codec import block_hash, decode_block, decode_block_versioned, encode_block
from fbs.did import DatasetId
from fbs.model import (
    AddData,
    CompressionFormat,
    DataField,
    DataSchema,
    DataSlice,
    DataTypeInt32,
    DataTypeList,
    DataTypeOption,
    DataTypeString,
    DataTypeUInt64,
    EventTimeSourceFromMetadata,
    ExecuteTransform,
    ExecuteTransformInput,
    ExtraAttributes,
    FetchStepFilesGlob,
    MergeStrategyLedger,
    MetadataBlock,
    MetadataEvent,
    OffsetInterval,
    PrepStepDecompress,
    ReadStepGeoJson,
    SetDataSchema,
    SetInfo,
    SetPollingSource,
    SetTransform,
    SourceCachingForever,
    SourceOrdering,
    SourceState,
    TransformInput,
    TransformSql,
)
from fbs.multiformats import Multihash
from fbs.timestamp import Timestamp

T_2020 = Timestamp.parse_rfc3339("2020-01-01T12:00:00Z")
INPUT1 = DatasetId.from_did(
    "did:odf:fed01816ef0a9abe93aba816ef0a9abe93aba90e6065747170300c0d3d30c2cd8d7a4"
)
INPUT2 = DatasetId.from_did(
    "did:odf:fed01826ef0a9abea3a3a826ef0a9abea3a3a90e6065747270300c1d3b30a2cd9d724"
)
RAW_ARROW_SCHEMA = base64.b64decode(
    "DAAAAAgACAAAAAQACAAAAAQAAAACAAAAQAAAAAQAAADY////GAAAAAwAAAAAAAAGEAAAAAAAAAAEAAQABAAAAA"
    "EAAABiAAAAEAAUABAAAAAPAAQAAAAIABAAAAAYAAAAIAAAAAAAAAIcAAAACAAMAAQACwAIAAAAQAAAAAAAAAEA"
    "AAAAAQAAAGEAAAA="
)


def sha3(text: str) -> Multihash:
    return Multihash.sha3_256(text.encode())


def _slice(end: int, size: int, logical: str = "logical", physical: str = "physical") -> DataSlice:
    return DataSlice(
        logical_hash=sha3(logical),
        physical_hash=sha3(physical),
        offset_interval=OffsetInterval(start=10, end=end),
        size=size,
    )


def _polling_source(read: ReadStepGeoJson) -> SetPollingSource:
    return SetPollingSource(
        fetch=FetchStepFilesGlob(
            path="./*.csv",
            event_time=EventTimeSourceFromMetadata(),
            cache=SourceCachingForever(),
            order=SourceOrdering.ByName,
        ),
        prepare=(PrepStepDecompress(format=CompressionFormat.Gzip),),
        read=read,
        preprocess=TransformSql(engine="spark", version="1.0.0", query="SELECT * FROM input"),
        merge=MergeStrategyLedger(primary_key=("a",)),
    )


def _field(name: str, type_: object, extra: dict[str, object] | None = None) -> DataField:
    return DataField(
        name=name,
        type=type_,  # type: ignore[arg-type]
        extra=None if extra is None else ExtraAttributes(extra),
    )


SOURCE_STATE = SourceState(
    source_name="push-source-1", kind="kamu/kafka-offset", value="SOME_OFFSET"
)

RFC016_SCHEMA = DataSchema(
    fields=(
        _field(
            "city",
            DataTypeString(),
            {"arrow.apache.org/bufferEncoding": {"kind": "View", "offsetBitWidth": 32}},
        ),
        _field("population", DataTypeUInt64()),
        _field(
            "census",
            DataTypeOption(inner=DataTypeString()),
            {"opendatafabric.org/type": {"kind": "ObjectLink", "linkType": {"kind": "Multihash"}}},
        ),
        _field("links", DataTypeList(item_type=DataTypeString())),
    ),
    extra=ExtraAttributes({"kamu.dev/archetype": "Collection"}),
)

#: (name, event, sha3 of v2 bytes, sha3 of v3 bytes)
EVENT_VECTORS: list[tuple[str, MetadataEvent, str, str]] = [
    (
        "add_data_empty",
        AddData(),
        "73e2977b8beae4aef53670067c1173b9d68e69721908d080b84286ab366d1e14",
        "a93874702479f83ddff1e7a660ca78085def333c86501b0d895fa3aec79c7189",
    ),
    (
        "add_data_prev",
        AddData(prev_checkpoint=sha3("prev"), prev_offset=9),
        "32516689d582e02e77778af75a71b6d131a640d0bebed99b99d96b385cee915f",
        "86aeb7dee0502b4886761de5e45b5111c0bc9e0fbfee02e3685487109305ef56",
    ),
    (
        "add_data_watermark",
        AddData(prev_checkpoint=sha3("prev"), prev_offset=9, new_watermark=T_2020),
        "1ad91cabca81e1f1771f28070980bfdcf409e5f8a877b3976b611401d2998189",
        "d1b412dab2a6af53f3e1b183834557bbf1c4689e2fc9b92fc0d04741ef607ecc",
    ),
    (
        "add_data_slice",
        AddData(
            prev_checkpoint=sha3("prev"),
            prev_offset=9,
            new_data=_slice(99, 100),
            new_watermark=T_2020,
        ),
        "ec1d3f6aa39bb256fcae16d79a95705f614e26d9a86d393b6f9e6b19a60d0df6",
        "1fcf10cb843746c4c44e6c288e216995701aa073426fc4bebe14f1680f8ec6d1",
    ),
    (
        "set_polling_source_ddl",
        _polling_source(ReadStepGeoJson(ddl_schema=("a: INT", "b: INT"))),
        "18cc1680b3d36f63358b59d469d76dcbf71ddac3ea66a693ce4158cfc5dfb28d",
        "eb61498b7362d334131a8486a5ce4cc2638d7c1aa3e4da82a19cf834a77df718",
    ),
    (
        "set_polling_source_schema",
        _polling_source(
            ReadStepGeoJson(
                schema=DataSchema(
                    fields=(_field("a", DataTypeInt32()), _field("b", DataTypeInt32()))
                )
            )
        ),
        "39cfd70254179a7cdea4263f951b8acbdc2b8a20dc0c1c4c572ab6da2dd9b28a",
        "f96c90e9e9700819ba05d87f66b200a18a08404706ac62cde6d68bc350e73861",
    ),
    (
        "add_data_source_state",
        AddData(
            prev_checkpoint=sha3("checkpoint"),
            prev_offset=9,
            new_data=_slice(99, 100),
            new_source_state=SOURCE_STATE,
        ),
        "db5044313bbd596fb54bef9387ad61a18206d1e93e833db4d1159d20cd3cac58",
        "9326dc5daab04877a9f006ff6b1636a8fa9dcec9615b54f741a1a90091eaf694",
    ),
    (
        "add_data_extra",
        AddData(
            prev_checkpoint=sha3("checkpoint"),
            prev_offset=9,
            new_data=_slice(99, 100),
            new_source_state=SOURCE_STATE,
            extra=ExtraAttributes(
                {"opendatafabric.org/linkedObjects": {"numObjectsNaive": 10, "sizeNaive": 100}}
            ),
        ),
        "00b4cf8b3b22ff71931696f13cc5c06f80eb3360b6d7dccdd3a3b4fb1b5d943c",
        "54f64c642cca6f67416ebe2b29e5d9414ece91f819efe97cd437fbe542c61bbb",
    ),
    (
        "set_transform",
        SetTransform(
            inputs=(
                TransformInput(dataset_ref=INPUT1.to_did_odf(), alias="input1"),
                TransformInput(dataset_ref="input2", alias="input2"),
            ),
            transform=TransformSql(
                engine="spark", query="SELECT * FROM input1 UNION ALL SELECT * FROM input2"
            ),
        ),
        "dc2ab3737792021b6794d3969315bb521701780c91548104f149906d98c8da70",
        "bb6aa1f9689b794c75affa709ae2477b209411d9ad092c2318ecd9ea94121bcc",
    ),
    (
        "execute_transform",
        ExecuteTransform(
            query_inputs=(
                ExecuteTransformInput(
                    dataset_id=INPUT1,
                    prev_block_hash=sha3("a"),
                    new_block_hash=sha3("b"),
                    prev_offset=9,
                    new_offset=20,
                ),
                ExecuteTransformInput(
                    dataset_id=INPUT2, prev_block_hash=sha3("a"), new_block_hash=sha3("b")
                ),
            ),
            prev_checkpoint=sha3("checkpoint"),
            prev_offset=9,
            new_data=_slice(19, 10, "foo", "bar"),
            new_watermark=T_2020,
        ),
        "a955281dca303056a88e39291d17e045d88ecdafca3ef9e75b09b83169633b52",
        "21cab7396525e614beeafe21c05a38bf597a39a191cc14147b9c5ec32210cf82",
    ),
    (
        "set_data_schema_rfc016",
        SetDataSchema(schema=RFC016_SCHEMA),
        "33d0a65cfb9853f14830fc84e443767d9acfedd24d13c3c22bdc82f3be1b507f",
        "80865248519d55fa04598e24ba42884728efe70956e640dca4df5ec8043c69ca",
    ),
    (
        "set_data_schema_raw_arrow",
        SetDataSchema(raw_arrow_schema=RAW_ARROW_SCHEMA),
        "44d64d764fb207713407b9a761566409404c907f765993105608299cd6f5bebf",
        "a7e79d088ca7bac689f12d71ae64b93e7bab62a7db2fec83ea89e9bf90dd89ed",
    ),
]


def wrap(event: MetadataEvent) -> MetadataBlock:
    return MetadataBlock(
        system_time=T_2020, prev_block_hash=sha3("prev"), sequence_number=117, event=event
    )


@pytest.mark.parametrize(("name", "event", "v2", "v3"), EVENT_VECTORS, ids=lambda x: "")
def test_kamu_serializer_stability(name: str, event: MetadataEvent, v2: str, v3: str) -> None:
    block = wrap(event)
    for version, expected in ((2, v2), (3, v3)):
        data = encode_block(block, version)
        assert block_hash(data).to_multibase() == "f1620" + expected, (name, version)
        assert decode_block_versioned(data) == (block, version)


SETINFO_V2_HEX = (
    "140000000000000000000a0014000c00080004000a0000001000000002000000000040000000000044000000"
    "1400000000000e001a000a0000000000090004000e0000001c00000000080208000001000000c0a800000000"
    "0000060008000400060000000400000003000000666f6f00"
)
SETINFO_V3_HEX = (
    "140000000000000000000a0018000c00080004000a000000140000000300000000004000000000000000000048"
    "0000001400000000000e001e000c00000000000b0004000e00000020000000000000080208000001000000c0a8"
    "0000000000000000060008000400060000000400000003000000666f6f00"
)
SETINFO_V2_HASH = "f16205603b882241c71351baf996d6dba7e3ddbd571457e93c1cd282bdc61f9fed5f2"
SETINFO_V3_HASH = "f1620e4773ca5765b41781e721cb891182e43a2df35665cd82b378e54b9ea25f4f50f"


def test_block_repository_setinfo_vector() -> None:
    block = MetadataBlock(
        system_time=Timestamp.parse_rfc3339("2050-01-01T12:00:00Z"),
        sequence_number=0,
        event=SetInfo(description="foo"),
    )
    v2 = encode_block(block, 2)
    v3 = encode_block(block, 3)
    assert v2.hex() == SETINFO_V2_HEX and len(v2) == 112
    assert v3.hex() == SETINFO_V3_HEX and len(v3) == 120
    assert (
        str(block_hash(v2))
        == "f16205603b882241c71351baf996d6dba7e3ddbd571457e93c1cd282bdc61f9fed5f2"
    )
    assert (
        str(block_hash(v3))
        == "f1620e4773ca5765b41781e721cb891182e43a2df35665cd82b378e54b9ea25f4f50f"
    )
    assert decode_block(v2) == block == decode_block(v3)


def test_yaml_vector_block_round_trips() -> None:
    # kamu test_serde_yaml.rs `serde_metadata_block` (docs §1.8).
    block = MetadataBlock(
        system_time=T_2020,
        prev_block_hash=sha3("prev"),
        sequence_number=127,
        event=ExecuteTransform(
            query_inputs=(
                ExecuteTransformInput(
                    dataset_id=INPUT1,
                    prev_block_hash=sha3("a"),
                    new_block_hash=sha3("b"),
                    prev_offset=9,
                    new_offset=20,
                ),
                ExecuteTransformInput(
                    dataset_id=INPUT2, prev_block_hash=sha3("a"), new_block_hash=sha3("b")
                ),
            ),
            prev_checkpoint=sha3("checkpoint"),
            prev_offset=9,
            new_data=_slice(19, 10, "foo", "bar"),
            new_watermark=T_2020,
        ),
    )
    assert str(block.prev_block_hash).startswith("f16209eb949bd8ff")
    for version in (2, 3):
        data = encode_block(block, version)
        assert decode_block(data) == block
        assert encode_block(decode_block(data), version) == data
