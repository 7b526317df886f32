"""The smart-protocol message model and metadata batches (`p2p.smart_transfer.messages`)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from typing import Any

import pytest

from fbs.multiformats import Multihash
from p2p.smart_transfer.messages import (
    COMPLETE,
    BlocksBatch,
    ErrorReply,
    MalformedMessage,
    ObjectFile,
    PullMetadataResponse,
    PullObjectsResponse,
    PullRequest,
    PullStrategy,
    PushObjectsAccepted,
    PushObjectsRequest,
    PushRequest,
    PushStrategy,
    TransferPlan,
    TransferUrl,
    UploadProgress,
    decode_result,
    dumps,
    internal_error,
    loads,
    metadata_response_text,
    ok,
    pack_blocks,
    unpack_blocks,
)
from p2p.smart_transfer.server import MAX_CLOSE_REASON, close_reason

BLOCKS = [(Multihash.sha3_256(bytes([i]) * 7), bytes([i]) * (100 + 300 * i)) for i in range(5)]
H = BLOCKS[0][0]


def _tarfile_archive(entries: list[tuple[str, bytes]], **kw: Any) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, raw in entries:
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            info.mode = 0o644
            for k, v in kw.items():
                setattr(info, k, v)
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def _batch(tar_bytes: bytes, n: int) -> BlocksBatch:
    return BlocksBatch(n, gzip.compress(tar_bytes, mtime=0))


def test_pack_writes_what_tarfile_writes_and_unpacks() -> None:
    batch = pack_blocks(BLOCKS)
    expected = _tarfile_archive([(h.to_multibase(), raw) for h, raw in BLOCKS])
    assert gzip.decompress(batch.payload) == expected
    assert pack_blocks(BLOCKS) == batch  # deterministic
    assert unpack_blocks(batch) == BLOCKS
    assert unpack_blocks(pack_blocks([])) == []


@pytest.mark.parametrize(
    "batch",
    [
        pack_blocks(BLOCKS),
        pack_blocks([]),
        BlocksBatch(3, bytes(range(256)) * 3),  # every byte value
        BlocksBatch(0, b""),
    ],
)
def test_metadata_response_text_is_the_json_text(batch: BlocksBatch) -> None:
    text = metadata_response_text(batch)
    assert text == dumps(PullMetadataResponse(batch).to_doc())
    assert PullMetadataResponse.from_doc(loads(text)).blocks == batch


def test_unpack_reads_other_tar_writers() -> None:
    entries = [(h.to_multibase(), raw) for h, raw in BLOCKS]
    # Another mode/mtime/owner, a ustar archive: still plain files.
    assert unpack_blocks(_batch(_tarfile_archive(entries, mtime=12345, uid=7), 5)) == BLOCKS
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, raw in entries:
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            info.pax_headers = {"comment": "x"}
            tar.addfile(info, io.BytesIO(raw))
    assert unpack_blocks(_batch(buf.getvalue(), 5)) == BLOCKS  # through tarfile


@pytest.mark.parametrize(
    "batch",
    [
        BlocksBatch(5, b"not gzip"),
        BlocksBatch(5, gzip.compress(b"x" * 1000)),  # not a tar
        BlocksBatch(4, pack_blocks(BLOCKS).payload),  # count mismatch
        BlocksBatch(1, pack_blocks(BLOCKS[:1]).payload, media_type="application/tar"),
        BlocksBatch(1, pack_blocks(BLOCKS[:1]).payload, encoding="base64"),
        _batch(_tarfile_archive([("not-a-hash", b"x")]), 1),
        _batch(_tarfile_archive([("f1620" + "ab" * 60, b"x")]), 1),  # long name (GNU L)
    ],
)
def test_unpack_refuses(batch: BlocksBatch) -> None:
    with pytest.raises(MalformedMessage):
        unpack_blocks(batch)


def test_unpack_refuses_links_bad_checksums_and_bombs() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo(H.to_multibase())
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(MalformedMessage):
        unpack_blocks(_batch(buf.getvalue(), 1))
    raw = bytearray(gzip.decompress(pack_blocks(BLOCKS[:1]).payload))
    raw[0] ^= 1  # the name changes, the checksum does not
    with pytest.raises(MalformedMessage, match="checksum"):
        unpack_blocks(_batch(bytes(raw), 1))
    bomb = BlocksBatch(1, gzip.compress(bytes(10_000_000)))
    with pytest.raises(MalformedMessage, match="beyond"):
        unpack_blocks(bomb, max_bytes=1_000_000)
    with pytest.raises(MalformedMessage):
        unpack_blocks(pack_blocks(BLOCKS), max_blocks=3)


def test_json_is_serde_shaped() -> None:
    assert dumps({"a": None, "b": [1, 2], "c": "é"}) == '{"a":null,"b":[1,2],"c":"é"}'
    req = PullRequest(begin_after=H)
    text = dumps(req.to_doc())
    assert text == (
        f'{{"begin_after":"{H.to_multibase()}","stop_at":null,"force_update_if_diverged":false}}'
    )
    assert PullRequest.from_doc(loads(text)) == req
    batch = pack_blocks(BLOCKS[:1])
    doc = json.loads(dumps(batch.to_doc()))
    assert doc["payload"] == list(batch.payload)  # bytes as an array of numbers
    assert BlocksBatch.from_doc(doc) == batch


def test_messages_round_trip() -> None:
    f = ObjectFile.of("data", H, 10)
    url = TransferUrl("http://h/ds/data/x", (("x-odf-smtp-version", "1"),), None)
    plan = TransferPlan(1, 2, 3, 4, 5)
    for msg, cls in (
        (PushRequest(None, plan), PushRequest),
        (PushObjectsRequest((f,), is_truncated=True), PushObjectsRequest),
        (PushObjectsAccepted((PushStrategy(f, None), PushStrategy(f, url))), PushObjectsAccepted),
        (PullObjectsResponse((PullStrategy(f, url),)), PullObjectsResponse),
        (UploadProgress(3), UploadProgress),
        (COMPLETE, UploadProgress),
    ):
        assert cls.from_doc(loads(dumps(msg.to_doc()))) == msg
    assert dumps(COMPLETE.to_doc()) == '{"details":"Complete"}'
    assert dumps(UploadProgress(3).to_doc()) == (
        '{"details":{"Running":{"uploaded_objects_count":3}}}'
    )
    assert PushStrategy(f, None).to_doc()["push_strategy"] == "SkipUpload"


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "nope",
        '{"begin_after":"zzz","stop_at":null,"force_update_if_diverged":false}',
        '{"begin_after":null,"stop_at":null}',
        '{"begin_after":null,"stop_at":null,"force_update_if_diverged":1}',
    ],
)
def test_malformed_pull_requests(text: str) -> None:
    with pytest.raises(MalformedMessage):
        PullRequest.from_doc(loads(text))


def test_results() -> None:
    assert decode_result(ok({})) == {}
    err = ErrorReply("InvalidHead", {"actual_head": None, "expected_head": None})
    assert decode_result(err.to_doc()) == err
    assert decode_result({"Err": "Private"}) == ErrorReply("Private")
    with pytest.raises(MalformedMessage):
        decode_result({"Maybe": {}})
    reply = internal_error("Push", "CompleteRequest", "head moved (conflict): " + "x" * 500)
    reason = close_reason(reply)
    assert len(reason.encode()) <= MAX_CLOSE_REASON
    assert decode_result(json.loads(reason)).variant == "Internal"  # type: ignore[union-attr]
    assert "head moved" in reason
    assert loads(dumps(reply.to_doc())) == {
        "Err": {
            "Internal": {
                "phase": {"Push": "CompleteRequest"},
                "error_message": reply.fields["error_message"],
            }
        }
    }
    with pytest.raises(MalformedMessage):
        loads("x" * 100, max_bytes=10)


@pytest.mark.parametrize(
    "text",
    [
        '{"a":' * 40 + "1" + "}" * 40,  # nesting beyond the message limit
        '{"n":' + "9" * 5000 + "}",  # a 5,000-digit number
        '{"a":1,"a":2}',  # one key, two meanings
        '{"x":NaN}',
    ],
)
def test_hostile_json_is_a_malformed_message(text: str) -> None:
    with pytest.raises(MalformedMessage):
        loads(text)
