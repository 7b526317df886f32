"""Smart Transfer Protocol v1 messages: model, JSON text, metadata batches (no I/O).

Every message is one WebSocket text frame holding the JSON kamu's serde writes:
snake_case fields in declaration order, no spaces (`dumps`). Replies that can fail are
externally tagged results, ``{"Ok": {...}}`` or ``{"Err": {"<Variant>": {...}}}``
(`ok`, `ErrorReply`). Messages have no type tag: each side knows which one comes next,
so parsing is per message (``Message.from_doc``); unknown fields are ignored, as serde
does, and missing or mistyped ones are `MalformedMessage`.

Pull: ``PullRequest`` -> ``Ok{transfer_plan}``; ``{}`` -> ``PullMetadataResponse``;
then any number of ``PullObjectsRequest`` -> ``PullObjectsResponse`` (HttpDownload URLs).

Push: ``PushRequest`` -> ``Ok{}``; ``PushMetadataRequest`` -> ``Ok{}``; then
``PushObjectsRequest`` -> ``Ok{object_transfer_strategies}`` (SkipUpload / HttpUpload),
the client uploads, answering the server's ``{}`` progress pings with
``UploadProgress`` and ending with ``{"details": "Complete"}``, repeated while
``is_truncated``; finally ``{}`` (push complete) -> ``{}`` (confirmed).

A `BlocksBatch` payload is a gzip-compressed tar whose entries are named by the block
hash (multibase) and hold the raw block bytes, oldest block first (`pack_blocks`,
`unpack_blocks`). The names are claims: the receiver hashes every block before using it.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import tarfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from fbs.errors import InvalidHash
from fbs.multiformats import SHA3_256, Multihash, parse_hash
from p2p.errors import PeerMisbehaved
from p2p.peer_json import JsonLimits, PeerJsonError, load_peer_json

__all__ = [
    "COMPLETE",
    "EMPTY",
    "ENCODING_RAW",
    "MAX_BATCH_BLOCKS",
    "MAX_BATCH_UNPACKED_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_OBJECT_FILES",
    "MEDIA_TAR_GZ",
    "SMTP_VERSION",
    "SMTP_VERSION_HEADER",
    "BlocksBatch",
    "ErrorReply",
    "MalformedMessage",
    "ObjectFile",
    "PullMetadataResponse",
    "PullObjectsRequest",
    "PullObjectsResponse",
    "PullRequest",
    "PullStrategy",
    "PushMetadataRequest",
    "PushObjectsAccepted",
    "PushObjectsRequest",
    "PushRequest",
    "PushStrategy",
    "TransferPlan",
    "TransferUrl",
    "UploadProgress",
    "decode_result",
    "dumps",
    "internal_error",
    "loads",
    "metadata_response_text",
    "ok",
    "pack_blocks",
    "unpack_blocks",
]

#: The version header every smart-protocol request carries (the server refuses others).
SMTP_VERSION_HEADER: Final = "x-odf-smtp-version"
SMTP_VERSION: Final = 1
#: The only batch media type and encoding kamu writes and reads.
MEDIA_TAR_GZ: Final = "application/tar+gzip"
ENCODING_RAW: Final = "raw"
#: Longest JSON text of one message (a batch payload costs up to 4 characters a byte).
MAX_MESSAGE_BYTES: Final = 512 << 20
#: JSON limits of a message besides its size: kamu's messages nest a few levels, carry
#: no long numbers, and list at most `MAX_OBJECT_FILES` objects of a few fields each.
MESSAGE_JSON_LIMITS: Final = JsonLimits(
    max_bytes=MAX_MESSAGE_BYTES,
    max_depth=16,
    max_number_chars=40,
    max_string_chars=MAX_MESSAGE_BYTES,
    max_items=16 << 20,
)
#: Most blocks in one metadata batch.
MAX_BATCH_BLOCKS: Final = 1_000_000
#: Most bytes a batch may decompress to (tar headers included): the gzip-bomb limit.
MAX_BATCH_UNPACKED_BYTES: Final = 1 << 30
#: Most object files named in one objects request.
MAX_OBJECT_FILES: Final = 1_000_000

#: ``{}``: the pull metadata request, the upload progress ping, push complete, confirmed.
EMPTY: Final[Mapping[str, Any]] = {}

ObjectType = Literal["DataSlice", "Checkpoint"]
_OBJECT_TYPES: Final = ("DataSlice", "Checkpoint")


class MalformedMessage(PeerMisbehaved):
    """A message that is not JSON, lacks or mistypes a field, or breaks a named limit."""


# -- JSON text ------------------------------------------------------------------------------


def dumps(doc: Mapping[str, Any]) -> str:
    """The JSON text serde_json writes for ``doc`` (compact, non-ASCII kept)."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def loads(text: str | bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> dict[str, Any]:
    """A message's JSON object.

    Raises:
        MalformedMessage: longer than ``max_bytes``, not JSON, or not an object.
    """
    if len(text) > max_bytes:
        raise MalformedMessage(f"message of {len(text)} bytes exceeds {max_bytes}")
    data = text.encode("utf-8") if isinstance(text, str) else text
    limits = dataclasses.replace(MESSAGE_JSON_LIMITS, max_bytes=max(max_bytes, len(data)))
    try:
        # Bounded like every JSON a peer sends (`p2p.peer_json`): nesting, numbers.
        doc = load_peer_json(data, limits, what="message")
    except PeerJsonError as e:
        raise MalformedMessage(str(e)) from None
    if not isinstance(doc, dict):
        raise MalformedMessage("message is not a JSON object")
    return doc


def _field(doc: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = doc.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, (int,))):
        raise MalformedMessage(f"field {name!r} missing or of the wrong type")
    return value


def _obj(doc: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(doc, dict):
        raise MalformedMessage(f"{what} is not a JSON object")
    return doc


def _count(doc: Mapping[str, Any], name: str) -> int:
    value = _field(doc, name, int)
    if isinstance(value, bool) or value < 0:
        raise MalformedMessage(f"field {name!r} is not a count")
    return int(value)


def _hash(text: Any, name: str) -> Multihash:
    if not isinstance(text, str):
        raise MalformedMessage(f"field {name!r} is not a hash")
    try:
        return parse_hash(text, code=SHA3_256)
    except InvalidHash as e:
        raise MalformedMessage(f"field {name!r}: {e}") from None


def _opt_hash(doc: Mapping[str, Any], name: str) -> Multihash | None:
    value = doc.get(name)
    return None if value is None else _hash(value, name)


def _mb(h: Multihash | None) -> str | None:
    return None if h is None else h.to_multibase()


# -- results --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """``{"Err": {variant: fields}}``: a refusal (e.g. ``InvalidHead``, ``Internal``)."""

    variant: str
    fields: Mapping[str, Any] = field(default_factory=dict)

    def to_doc(self) -> dict[str, Any]:
        """The externally tagged JSON object."""
        return {"Err": {self.variant: dict(self.fields)}}

    def describe(self) -> str:
        """One line for an error message."""
        detail = self.fields.get("error_message") if isinstance(self.fields, dict) else None
        return f"{self.variant}: {detail}" if detail else f"{self.variant} {dumps(self.fields)}"


def ok(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``{"Ok": doc}``."""
    return {"Ok": dict(doc)}


def internal_error(direction: Literal["Pull", "Push"], phase: str, message: str) -> ErrorReply:
    """``Internal{phase: {direction: phase}, error_message}`` (kamu's `TransferInternalError`)."""
    return ErrorReply("Internal", {"phase": {direction: phase}, "error_message": message})


def decode_result(doc: Mapping[str, Any]) -> Mapping[str, Any] | ErrorReply:
    """The ``Ok`` body of a result, or its `ErrorReply`.

    Raises:
        MalformedMessage: neither ``{"Ok": {...}}`` nor ``{"Err": {"Variant": ...}}``.
    """
    if len(doc) == 1 and "Ok" in doc:
        return _obj(doc["Ok"], "Ok")
    if len(doc) == 1 and "Err" in doc:
        err = doc["Err"]
        if isinstance(err, str):
            return ErrorReply(err)
        err = _obj(err, "Err")
        if len(err) != 1:
            raise MalformedMessage("Err holds more than one variant")
        ((variant, fields),) = err.items()
        return ErrorReply(str(variant)[:200], fields if isinstance(fields, dict) else {})
    raise MalformedMessage("expected a result ({'Ok': ...} or {'Err': ...})")


# -- shared values ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TransferPlan:
    """Sizes announced before a transfer (kamu's ``TransferPlan``)."""

    num_blocks: int
    num_objects: int
    num_records: int
    bytes_in_raw_blocks: int
    bytes_in_raw_objects: int

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        return {
            "num_blocks": self.num_blocks,
            "num_objects": self.num_objects,
            "num_records": self.num_records,
            "bytes_in_raw_blocks": self.bytes_in_raw_blocks,
            "bytes_in_raw_objects": self.bytes_in_raw_objects,
        }

    @classmethod
    def from_doc(cls, doc: Any) -> TransferPlan:
        """Parse (raises `MalformedMessage`)."""
        d = _obj(doc, "transfer_plan")
        return cls(
            _count(d, "num_blocks"),
            _count(d, "num_objects"),
            _count(d, "num_records"),
            _count(d, "bytes_in_raw_blocks"),
            _count(d, "bytes_in_raw_objects"),
        )


@dataclass(frozen=True, slots=True)
class ObjectFile:
    """An object a block names: ``{object_type, physical_hash, size}``."""

    object_type: ObjectType
    physical_hash: Multihash
    size: int

    @property
    def kind(self) -> Literal["data", "checkpoint"]:
        """The store it lives in (`p2p.receive.ObjectKind`)."""
        return "data" if self.object_type == "DataSlice" else "checkpoint"

    @classmethod
    def of(cls, kind: str, h: Multihash, size: int) -> ObjectFile:
        """From a store kind (``data``/``checkpoint``), hash and size."""
        return cls("DataSlice" if kind == "data" else "Checkpoint", h, size)

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        return {
            "object_type": self.object_type,
            "physical_hash": self.physical_hash.to_multibase(),
            "size": self.size,
        }

    @classmethod
    def from_doc(cls, doc: Any) -> ObjectFile:
        """Parse (raises `MalformedMessage`)."""
        d = _obj(doc, "object_file")
        kind = d.get("object_type")
        if kind not in _OBJECT_TYPES:
            raise MalformedMessage("object_type is neither DataSlice nor Checkpoint")
        return cls(kind, _hash(d.get("physical_hash"), "physical_hash"), _count(d, "size"))


def _object_files(doc: Mapping[str, Any]) -> tuple[ObjectFile, ...]:
    files = _field(doc, "object_files", list)
    if len(files) > MAX_OBJECT_FILES:
        raise MalformedMessage(f"more than {MAX_OBJECT_FILES} object files in one request")
    return tuple(ObjectFile.from_doc(f) for f in files)


@dataclass(frozen=True, slots=True)
class TransferUrl:
    """Where to download or upload an object: URL, headers to send, expiry (RFC 3339)."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()
    expires_at: str | None = None

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        return {
            "url": self.url,
            "headers": [{"name": n, "value": v} for n, v in self.headers],
            "expires_at": self.expires_at,
        }

    @classmethod
    def from_doc(cls, doc: Any) -> TransferUrl:
        """Parse (raises `MalformedMessage`)."""
        d = _obj(doc, "transfer url")
        rows = []
        for row in _field(d, "headers", list):
            r = _obj(row, "header")
            rows.append((str(_field(r, "name", str)), str(_field(r, "value", str))))
        expires = d.get("expires_at")
        if expires is not None and not isinstance(expires, str):
            raise MalformedMessage("expires_at is not a time")
        return cls(str(_field(d, "url", str)), tuple(rows), expires)


@dataclass(frozen=True, slots=True)
class BlocksBatch:
    """``MetadataBlocksBatch``: a gzip tar of raw blocks (see the module docstring)."""

    num_blocks: int
    payload: bytes
    media_type: str = MEDIA_TAR_GZ
    encoding: str = ENCODING_RAW

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object; the payload is an array of byte values, as serde writes bytes."""
        return {
            "num_blocks": self.num_blocks,
            "media_type": self.media_type,
            "encoding": self.encoding,
            "payload": list(self.payload),
        }

    @classmethod
    def from_doc(cls, doc: Any) -> BlocksBatch:
        """Parse (raises `MalformedMessage`)."""
        d = _obj(doc, "blocks batch")
        try:
            payload = bytes(_field(d, "payload", list))
        except (ValueError, TypeError):
            raise MalformedMessage("batch payload is not an array of bytes") from None
        return cls(
            _count(d, "num_blocks"),
            payload,
            str(_field(d, "media_type", str)),
            str(_field(d, "encoding", str)),
        )


# -- pull -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PullRequest:
    """``DatasetPullRequest``: blocks after ``begin_after`` up to ``stop_at`` (``None``: head)."""

    begin_after: Multihash | None = None
    stop_at: Multihash | None = None
    force_update_if_diverged: bool = False

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        return {
            "begin_after": _mb(self.begin_after),
            "stop_at": _mb(self.stop_at),
            "force_update_if_diverged": self.force_update_if_diverged,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PullRequest:
        """Parse (raises `MalformedMessage`)."""
        return cls(
            _opt_hash(doc, "begin_after"),
            _opt_hash(doc, "stop_at"),
            bool(_field(doc, "force_update_if_diverged", bool)),
        )


@dataclass(frozen=True, slots=True)
class PullMetadataResponse:
    """``DatasetMetadataPullResponse``: ``{blocks}``."""

    blocks: BlocksBatch

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        return {"blocks": self.blocks.to_doc()}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PullMetadataResponse:
        """Parse (raises `MalformedMessage`)."""
        return cls(BlocksBatch.from_doc(doc.get("blocks")))


#: The JSON text of every byte value (`metadata_response_text`).
_BYTE_TEXT: Final = tuple(str(i) for i in range(256))


def metadata_response_text(batch: BlocksBatch) -> str:
    """``dumps(PullMetadataResponse(batch).to_doc())``, the same text, made ~5x faster:
    the payload's byte values are looked up, not written by `json` from a list of ints
    (a 2,000-block batch holds ~270,000 of them)."""
    text = dumps(PullMetadataResponse(dataclasses.replace(batch, payload=b"")).to_doc())
    # The payload is the last field of the last object: the text ends with `[]}}`.
    assert text.endswith('"payload":[]}}'), text[-40:]
    return text[:-3] + ",".join(map(_BYTE_TEXT.__getitem__, batch.payload)) + text[-3:]


@dataclass(frozen=True, slots=True)
class PullObjectsRequest:
    """``DatasetPullObjectsTransferRequest``: ``{object_files}``."""

    object_files: tuple[ObjectFile, ...]

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        return {"object_files": [f.to_doc() for f in self.object_files]}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PullObjectsRequest:
        """Parse (raises `MalformedMessage`)."""
        return cls(_object_files(doc))


@dataclass(frozen=True, slots=True)
class PullStrategy:
    """``PullObjectTransferStrategy``: always ``HttpDownload`` from ``download_from``."""

    object_file: ObjectFile
    download_from: TransferUrl

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        return {
            "object_file": self.object_file.to_doc(),
            "pull_strategy": "HttpDownload",
            "download_from": self.download_from.to_doc(),
        }

    @classmethod
    def from_doc(cls, doc: Any) -> PullStrategy:
        """Parse (raises `MalformedMessage`; any strategy but HttpDownload is refused)."""
        d = _obj(doc, "pull strategy")
        if d.get("pull_strategy") != "HttpDownload":
            raise MalformedMessage("unsupported pull strategy")
        return cls(
            ObjectFile.from_doc(d.get("object_file")), TransferUrl.from_doc(d.get("download_from"))
        )


@dataclass(frozen=True, slots=True)
class PullObjectsResponse:
    """``DatasetPullObjectsTransferResponse``: ``{object_transfer_strategies}``."""

    strategies: tuple[PullStrategy, ...]

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        return {"object_transfer_strategies": [s.to_doc() for s in self.strategies]}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PullObjectsResponse:
        """Parse (raises `MalformedMessage`)."""
        items = _field(doc, "object_transfer_strategies", list)
        return cls(tuple(PullStrategy.from_doc(s) for s in items))


# -- push -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PushRequest:
    """``DatasetPushRequest``: what the client believes the server's head is, and sizes."""

    current_head: Multihash | None
    transfer_plan: TransferPlan
    force_update_if_diverged: bool = False
    visibility_for_created_dataset: str = "Private"

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        return {
            "current_head": _mb(self.current_head),
            "transfer_plan": self.transfer_plan.to_doc(),
            "force_update_if_diverged": self.force_update_if_diverged,
            "visibility_for_created_dataset": self.visibility_for_created_dataset,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PushRequest:
        """Parse (raises `MalformedMessage`)."""
        visibility = doc.get("visibility_for_created_dataset", "Private")
        if visibility not in ("Private", "Public"):
            raise MalformedMessage("visibility_for_created_dataset is neither Private nor Public")
        return cls(
            _opt_hash(doc, "current_head"),
            TransferPlan.from_doc(doc.get("transfer_plan")),
            bool(_field(doc, "force_update_if_diverged", bool)),
            visibility,
        )


@dataclass(frozen=True, slots=True)
class PushMetadataRequest:
    """``DatasetPushMetadataRequest``: ``{new_blocks}``."""

    new_blocks: BlocksBatch

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        return {"new_blocks": self.new_blocks.to_doc()}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PushMetadataRequest:
        """Parse (raises `MalformedMessage`)."""
        return cls(BlocksBatch.from_doc(doc.get("new_blocks")))


@dataclass(frozen=True, slots=True)
class PushObjectsRequest:
    """``DatasetPushObjectsTransferRequest``: ``{object_files, is_truncated}``."""

    object_files: tuple[ObjectFile, ...]
    is_truncated: bool = False

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        return {
            "object_files": [f.to_doc() for f in self.object_files],
            "is_truncated": self.is_truncated,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PushObjectsRequest:
        """Parse (raises `MalformedMessage`)."""
        return cls(_object_files(doc), bool(_field(doc, "is_truncated", bool)))


@dataclass(frozen=True, slots=True)
class PushStrategy:
    """``PushObjectTransferStrategy``: ``SkipUpload`` (no URL) or ``HttpUpload`` to a URL."""

    object_file: ObjectFile
    upload_to: TransferUrl | None

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        return {
            "object_file": self.object_file.to_doc(),
            "push_strategy": "SkipUpload" if self.upload_to is None else "HttpUpload",
            "upload_to": None if self.upload_to is None else self.upload_to.to_doc(),
        }

    @classmethod
    def from_doc(cls, doc: Any) -> PushStrategy:
        """Parse (raises `MalformedMessage`)."""
        d = _obj(doc, "push strategy")
        strategy = d.get("push_strategy")
        if strategy == "SkipUpload":
            return cls(ObjectFile.from_doc(d.get("object_file")), None)
        if strategy != "HttpUpload":
            raise MalformedMessage("unsupported push strategy")
        return cls(
            ObjectFile.from_doc(d.get("object_file")), TransferUrl.from_doc(d.get("upload_to"))
        )


@dataclass(frozen=True, slots=True)
class PushObjectsAccepted:
    """``DatasetPushObjectsTransferAccepted``: ``{object_transfer_strategies}``."""

    strategies: tuple[PushStrategy, ...]

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        return {"object_transfer_strategies": [s.to_doc() for s in self.strategies]}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PushObjectsAccepted:
        """Parse (raises `MalformedMessage`)."""
        items = _field(doc, "object_transfer_strategies", list)
        return cls(tuple(PushStrategy.from_doc(s) for s in items))


@dataclass(frozen=True, slots=True)
class UploadProgress:
    """``DatasetPushObjectsUploadProgressResponse``: objects uploaded so far, or complete."""

    uploaded_objects_count: int | None

    @property
    def complete(self) -> bool:
        """Whether the uploads are done (``{"details": "Complete"}``)."""
        return self.uploaded_objects_count is None

    def to_doc(self) -> dict[str, Any]:
        """Its JSON object."""
        if self.uploaded_objects_count is None:
            return {"details": "Complete"}
        return {"details": {"Running": {"uploaded_objects_count": self.uploaded_objects_count}}}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> UploadProgress:
        """Parse (raises `MalformedMessage`)."""
        details = doc.get("details")
        if details == "Complete":
            return cls(None)
        running = _obj(_obj(details, "details").get("Running"), "Running")
        return cls(_count(running, "uploaded_objects_count"))


COMPLETE: Final = UploadProgress(None)


# -- metadata batches -------------------------------------------------------------------------


_BLOCK: Final = 512  # tar block size
_RECORD: Final = 20 * _BLOCK  # tar archives are padded to whole records
_ZERO_BLOCK: Final = bytes(_BLOCK)


def _gnu_header_template() -> bytes:
    info = tarfile.TarInfo("x")
    info.mode = 0o644
    info.mtime = 0
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "strict")


_HEADER: Final = _gnu_header_template()


def _tar_header(name: bytes, size: int) -> bytes:
    """The GNU header `tarfile` writes for a regular file (mode 0644, times and owners
    zero), made without it: `tarfile` costs more than the gzip on a long chain."""
    h = bytearray(_HEADER)
    h[0:100] = name.ljust(100, b"\0")
    h[124:136] = b"%011o\0" % size
    h[148:156] = b" " * 8
    h[148:155] = b"%06o\0" % sum(h)
    return bytes(h)


def pack_blocks(blocks: Sequence[tuple[Multihash, bytes]]) -> BlocksBatch:
    """A batch of ``(hash, raw)`` blocks, oldest first.

    A GNU tar (one entry per block, named by its multibase hash, mode 0644, zero times
    and owners), gzip level 6 without a time: the same blocks give the same bytes (the
    recorded test sequences rely on it), the bytes `tarfile` would write.
    """
    parts: list[bytes] = []
    for h, raw in blocks:
        parts.append(_tar_header(h.to_multibase().encode("ascii"), len(raw)))
        parts.append(raw)
        if len(raw) % _BLOCK:
            parts.append(bytes(_BLOCK - len(raw) % _BLOCK))
    parts.append(_ZERO_BLOCK * 2)
    size = sum(len(p) for p in parts)
    if size % _RECORD:
        parts.append(bytes(_RECORD - size % _RECORD))
    payload = gzip.compress(b"".join(parts), compresslevel=6, mtime=0)
    return BlocksBatch(len(blocks), payload)


def _plain_entries(data: bytes, max_entries: int) -> list[tuple[str, bytes]] | None:
    """The entries of a tar of plain regular files (as kamu and `pack_blocks` write),
    ``None`` for anything else (long names, pax headers, links: `tarfile` reads those).

    Raises:
        MalformedMessage: a header whose checksum is wrong, or data past the end.
    """
    out: list[tuple[str, bytes]] = []
    pos = 0
    while pos + _BLOCK <= len(data) and len(out) <= max_entries:
        hdr = data[pos : pos + _BLOCK]
        if hdr == _ZERO_BLOCK:
            return out
        stored = hdr[148:156].strip(b"\0 ")
        if not stored or int(stored, 8) != sum(hdr[:148]) + 256 + sum(hdr[156:]):
            raise MalformedMessage("batch tar header checksum mismatch")
        if hdr[156:157] not in (b"0", b"\0") or hdr[345:500].strip(b"\0") or hdr[124] & 0x80:
            return None
        size = int(hdr[124:136].strip(b"\0 ") or b"0", 8)
        start = pos + _BLOCK
        if start + size > len(data):
            raise MalformedMessage("batch tar entry runs past the end")
        name = hdr[:100].split(b"\0", 1)[0].decode("ascii", "replace")
        out.append((name, data[start : start + size]))
        pos = start + -(-size // _BLOCK) * _BLOCK
    return out


def _tarfile_entries(data: bytes, max_blocks: int) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                if not member.isfile():
                    raise MalformedMessage("batch entry is not a regular file")
                if len(out) >= max_blocks:
                    break
                f = tar.extractfile(member)
                assert f is not None  # a regular file always has content
                out.append((member.name, f.read()))
    except (tarfile.TarError, EOFError, ValueError):
        raise MalformedMessage("batch payload is not a tar archive") from None
    return out


def _gunzip(payload: bytes, max_bytes: int) -> bytes:
    d = zlib.decompressobj(wbits=31)  # gzip wrapper
    try:
        out = d.decompress(payload, max_bytes + 1)
    except zlib.error:
        raise MalformedMessage("batch payload is not gzip") from None
    if len(out) > max_bytes or d.unconsumed_tail:
        raise MalformedMessage(f"batch decompresses beyond {max_bytes} bytes")
    if not d.eof:
        raise MalformedMessage("batch payload is truncated gzip")
    return out


def unpack_blocks(
    batch: BlocksBatch,
    *,
    max_blocks: int = MAX_BATCH_BLOCKS,
    max_bytes: int = MAX_BATCH_UNPACKED_BYTES,
) -> list[tuple[Multihash, bytes]]:
    """The ``(claimed hash, raw bytes)`` entries of a batch, in batch order (oldest first).

    The hashes are what the sender *claims*: check each with `p2p.receive.receive_block`.

    Raises:
        MalformedMessage: another media type or encoding, a gzip bomb, a broken tar, an
            entry that is not a file named by a hash, more than ``max_blocks`` entries,
            or a ``num_blocks`` that does not match.
    """
    if batch.media_type != MEDIA_TAR_GZ or batch.encoding != ENCODING_RAW:
        raise MalformedMessage(f"unsupported batch {batch.media_type!r}/{batch.encoding!r}")
    if batch.num_blocks > max_blocks:
        raise MalformedMessage(f"batch of {batch.num_blocks} blocks exceeds {max_blocks}")
    data = _gunzip(batch.payload, max_bytes)
    try:
        entries = _plain_entries(data, max_blocks)
    except ValueError:  # an octal field that is not octal
        raise MalformedMessage("batch tar header is malformed") from None
    if entries is None:
        entries = _tarfile_entries(data, max_blocks + 1)
    if len(entries) > max_blocks:
        raise MalformedMessage(f"batch holds more than {max_blocks} blocks")
    out = [(_hash(name, "batch entry name"), raw) for name, raw in entries]
    if len(out) != batch.num_blocks:
        raise MalformedMessage(f"batch says {batch.num_blocks} blocks, holds {len(out)}")
    return out
