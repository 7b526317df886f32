"""Signed head records: the trust layer ODF blocks lack.

A head record says "the head of dataset D is block H, sequence number N, as of time T",
signed with the ed25519 key behind D's ``did:odf``. Anyone can check it from the DID
alone; only the dataset's owner can produce it.

Signed bytes (`HeadRecord.signing_message`), all integers big-endian::

    b"odf-head-record" 0x00 0x01          magic, NUL, format version 1
    did binary (34 bytes: ed 01 || key)
    u8 length || head multihash bytes
    u64 sequence number
    i64 system time (ns since the epoch, UTC)

and `fbs.keys` adds its own context and the domain `HEAD_RECORD_DOMAIN` in front, so a
head-record signature is never valid for another message kind.

**Version 2** adds the publisher's name for the dataset (so replicas get a
readable default alias, and since the name is signed with the dataset key no peer can
rename someone else's dataset). Its signed bytes are those of version 1 with format
version 2 in the header and ``u8 length || name (UTF-8, a [account/]name alias)``
appended, signed under `HEAD_RECORD_DOMAIN_V2`; its JSON form adds ``"name"`` and has
``"version":2``. A record without a name is version 1, byte for byte as before, so
older nodes keep reading what they can.

Wire form (`to_json`): compact JSON with sorted keys and no whitespace::

    {"datasetId":"did:odf:fed01...","head":"f1620...","sequenceNumber":7,
     "signature":"u...","systemTime":"2024-01-01T00:00:00Z","version":1}

`from_json` accepts only that exact canonical spelling (re-encoding the parsed record
must give back the input byte for byte), so a record has one accepted encoding, and
verifies the signature by default.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from fbs.did import DatasetAlias, DatasetId
from fbs.errors import FbsError
from fbs.keys import KeyPair, signature_from_multibase, signature_to_multibase, verify
from fbs.multiformats import SHA3_256, Multihash, parse_hash
from fbs.timestamp import Timestamp
from p2p.canonical_json import canonical_json, load_json
from p2p.errors import InvalidHeadRecord

__all__ = [
    "HEAD_RECORD_DOMAIN",
    "HEAD_RECORD_DOMAIN_V2",
    "HEAD_RECORD_VERSION",
    "MAX_HEAD_RECORD_BYTES",
    "HeadRecord",
    "sign_head",
    "unsigned_message",
]

#: Signing domain passed to `fbs.keys` (versioned: a v2 format gets a new domain).
HEAD_RECORD_DOMAIN: Final = "head-record/v1"
#: Signing domain of version 2 records (with a name).
HEAD_RECORD_DOMAIN_V2: Final = "head-record/v2"
#: Format version inside the signed bytes and the JSON form (of a record without a name).
HEAD_RECORD_VERSION: Final = 1
#: Format version of a record that carries the publisher's name.
HEAD_RECORD_VERSION_NAMED: Final = 2
#: Largest JSON head record accepted (a canonical record is about 330 bytes).
MAX_HEAD_RECORD_BYTES: Final = 1024
#: Largest sequence number (block sequence numbers are u64 in flatbuffers; we cap at i64
#: so that JSON consumers with signed 64-bit integers read it exactly).
MAX_SEQUENCE_NUMBER: Final = 2**63 - 1

_MAGIC: Final = b"odf-head-record\x00"
_I64: Final = struct.Struct(">q")
_U64: Final = struct.Struct(">Q")
_FIELDS: Final = frozenset(
    {"datasetId", "head", "sequenceNumber", "signature", "systemTime", "version"}
)
_FIELDS_NAMED: Final = _FIELDS | {"name"}
_SIGNATURE_SIZE: Final = 64


@dataclass(frozen=True, slots=True)
class HeadRecord:
    """A signed statement of a dataset's head.

    Attributes:
        dataset_id: the dataset (its key signs the record).
        head: hash of the head block (SHA3-256).
        sequence_number: the head block's sequence number.
        system_time: when the head was set (the head block's system time by convention).
        signature: 64-byte ed25519 signature over `signing_message`.
        name: the publisher's alias of the dataset (``[account/]name``), signed with
            the rest; ``None`` for a version 1 record.

    Raises:
        InvalidHeadRecord: on construction with values of the wrong type or range.
    """

    dataset_id: DatasetId
    head: Multihash
    sequence_number: int
    system_time: Timestamp
    signature: bytes
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.dataset_id, DatasetId):
            raise InvalidHeadRecord("dataset_id must be a DatasetId")
        if not isinstance(self.head, Multihash) or self.head.code != SHA3_256:
            raise InvalidHeadRecord("head must be a SHA3-256 Multihash")
        seq = self.sequence_number
        if type(seq) is not int or not 0 <= seq <= MAX_SEQUENCE_NUMBER:
            raise InvalidHeadRecord(f"sequence number out of range: {seq!r}")
        if not isinstance(self.system_time, Timestamp):
            raise InvalidHeadRecord("system_time must be a Timestamp")
        if not -(2**63) <= self.system_time.nanos < 2**63:
            raise InvalidHeadRecord("system_time out of the i64 nanosecond range")
        if not isinstance(self.signature, bytes) or len(self.signature) != _SIGNATURE_SIZE:
            raise InvalidHeadRecord(f"signature must be {_SIGNATURE_SIZE} bytes")
        if self.name is not None:
            _check_name(self.name)

    @property
    def version(self) -> int:
        """1 without a name, 2 with one."""
        return HEAD_RECORD_VERSION if self.name is None else HEAD_RECORD_VERSION_NAMED

    # -- signing --------------------------------------------------------------------

    def signing_message(self) -> bytes:
        """The canonical bytes the signature covers (see the module docstring)."""
        return unsigned_message(
            self.dataset_id, self.head, self.sequence_number, self.system_time, self.name
        )

    def verify(self) -> None:
        """Check the signature against the record's own DID.

        Raises:
            InvalidHeadRecord: the signature does not verify.
        """
        try:
            verify(self.dataset_id, self.signing_message(), self.signature, _domain(self.name))
        except FbsError as e:
            raise InvalidHeadRecord(f"head record signature does not verify: {e}") from None

    # -- wire form ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the wire form (also used inside other JSON documents)."""
        doc: dict[str, Any] = {
            "datasetId": self.dataset_id.to_did_odf(),
            "head": self.head.to_multibase(),
            "sequenceNumber": self.sequence_number,
            "signature": signature_to_multibase(self.signature),
            "systemTime": self.system_time.to_rfc3339(),
            "version": self.version,
        }
        if self.name is not None:
            doc["name"] = self.name
        return doc

    def to_json(self) -> bytes:
        """Canonical JSON bytes (sorted keys, no whitespace, ASCII)."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, obj: object, *, verify: bool = True) -> HeadRecord:
        """Parse the JSON object form (no canonical-bytes check; see `from_json`).

        Raises:
            InvalidHeadRecord: missing/extra/mistyped fields, bad values, or (with
                ``verify``) a signature that does not verify.
        """
        if not isinstance(obj, dict) or set(obj) not in (_FIELDS, _FIELDS_NAMED):
            raise InvalidHeadRecord(f"a head record is an object with exactly {sorted(_FIELDS)}")
        version = HEAD_RECORD_VERSION if set(obj) == _FIELDS else HEAD_RECORD_VERSION_NAMED
        if type(obj["version"]) is not int or obj["version"] != version:
            raise InvalidHeadRecord(f"unsupported head record version {obj['version']!r}")
        name = obj.get("name")
        if name is not None and not isinstance(name, str):
            raise InvalidHeadRecord("head record field name must be a string")
        for key in ("datasetId", "head", "signature", "systemTime"):
            if not isinstance(obj[key], str):
                raise InvalidHeadRecord(f"head record field {key} must be a string")
        if type(obj["sequenceNumber"]) is not int:
            raise InvalidHeadRecord("head record field sequenceNumber must be an integer")
        try:
            dataset_id = DatasetId.from_did(obj["datasetId"])
            head = parse_hash(obj["head"], code=SHA3_256)
            signature = signature_from_multibase(obj["signature"])
            system_time = Timestamp.parse_rfc3339(obj["systemTime"])
        except FbsError as e:
            raise InvalidHeadRecord(f"malformed head record: {e}") from None
        record = cls(dataset_id, head, obj["sequenceNumber"], system_time, signature, name)
        if verify:
            record.verify()
        return record

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview, *, verify: bool = True) -> HeadRecord:
        """Parse the canonical JSON wire form and (by default) verify the signature.

        Raises:
            InvalidHeadRecord: larger than `MAX_HEAD_RECORD_BYTES`, not canonical JSON of
                a head record, or (with ``verify``) a signature that does not verify.
        """
        obj, raw = load_json(
            data, max_bytes=MAX_HEAD_RECORD_BYTES, what="head record", error=InvalidHeadRecord
        )
        record = cls.from_dict(obj, verify=False)
        if record.to_json() != raw:
            raise InvalidHeadRecord("head record is not in canonical form")
        if verify:
            record.verify()
        return record

    def __repr__(self) -> str:
        return (
            f"HeadRecord({self.dataset_id.to_did_odf()!r}, head={self.head.short()}, "
            f"seq={self.sequence_number})"
        )


def _check_name(name: object) -> None:
    if not isinstance(name, str):
        raise InvalidHeadRecord("head record name must be a string")
    try:
        DatasetAlias.parse(name)
    except FbsError as e:
        raise InvalidHeadRecord(f"head record name: {e}") from None


def _domain(name: str | None) -> str:
    return HEAD_RECORD_DOMAIN if name is None else HEAD_RECORD_DOMAIN_V2


def unsigned_message(
    dataset_id: DatasetId,
    head: Multihash,
    sequence_number: int,
    system_time: Timestamp,
    name: str | None = None,
) -> bytes:
    """The canonical signed bytes for these values (see the module docstring).

    Raises:
        InvalidHeadRecord: values out of range.
    """
    if type(sequence_number) is not int or not 0 <= sequence_number <= MAX_SEQUENCE_NUMBER:
        raise InvalidHeadRecord(f"sequence number out of range: {sequence_number!r}")
    if not -(2**63) <= system_time.nanos < 2**63:
        raise InvalidHeadRecord("system_time out of the i64 nanosecond range")
    head_bytes = head.to_bytes()
    version = HEAD_RECORD_VERSION if name is None else HEAD_RECORD_VERSION_NAMED
    parts = [
        _MAGIC,
        bytes((version,)),
        dataset_id.to_bytes(),
        bytes((len(head_bytes),)),
        head_bytes,
        _U64.pack(sequence_number),
        _I64.pack(system_time.nanos),
    ]
    if name is not None:
        _check_name(name)
        raw = name.encode("utf-8")
        if len(raw) > 255:
            raise InvalidHeadRecord("head record name longer than 255 bytes")
        parts += [bytes((len(raw),)), raw]
    return b"".join(parts)


def sign_head(
    keypair: KeyPair,
    head: Multihash,
    sequence_number: int,
    system_time: Timestamp,
    name: str | None = None,
) -> HeadRecord:
    """Sign a head record for ``keypair``'s dataset (version 2 when ``name`` is given).

    Raises:
        InvalidHeadRecord: ``head`` is not a SHA3-256 hash or a value is out of range.
    """
    if not isinstance(head, Multihash) or head.code != SHA3_256:
        raise InvalidHeadRecord("head must be a SHA3-256 Multihash")
    if not isinstance(system_time, Timestamp):
        raise InvalidHeadRecord("system_time must be a Timestamp")
    dataset_id = keypair.dataset_id
    message = unsigned_message(dataset_id, head, sequence_number, system_time, name)
    signature = keypair.sign(message, _domain(name))
    return HeadRecord(dataset_id, head, sequence_number, system_time, signature, name)
