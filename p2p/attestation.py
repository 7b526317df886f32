"""Validator attestations: signed verdicts on whether a block's data follows from its inputs.

A validator replays an ``ExecuteTransform`` block on its own engine (or checks the
objects of a root dataset's ``AddData`` block) and signs what it found with its own
ed25519 key, whose ``did:key`` is its identity. Anyone can check the statement from the
validator's DID alone; only the validator can produce it.

Verdicts (`Verdict`):

- ``reproduced``: the replay gave the recorded event (root data: the objects are intact);
- ``diverged`` with ``field``: the first differing field (``newData.logicalHash``...);
- ``could-not-check`` with ``reason``: e.g. a missing input or another engine identity.

Signed bytes (`Attestation.signing_message`), integers big-endian::

    b"odf-attestation" 0x00 0x01      magic, NUL, format version 1
    validator did binary (34 bytes)   ed 01 || key
    dataset did binary (34 bytes)
    u8 length || block multihash bytes
    u64 block sequence number
    u8 verdict code (1 reproduced, 2 diverged, 3 could-not-check)
    u16 length || detail (UTF-8: the field or the reason; empty for reproduced)
    u16 length || engine identity (UTF-8)
    i64 attestation time (ns since the epoch, UTC)

and `fbs.keys` prefixes its context and the domain `ATTESTATION_DOMAIN`, so an
attestation signature is valid for nothing else (not a head record, not a block).

Wire form (`to_json`): compact JSON, sorted keys, no whitespace, ASCII::

    {"blockHash":"f1620...","datasetId":"did:odf:fed01...","engine":"spark (...)",
     "field":"newData.logicalHash","sequenceNumber":4,"signature":"u...",
     "systemTime":"2024-01-01T00:00:00Z","validator":"did:key:z6Mk...",
     "verdict":"diverged","version":1}

``field`` appears only for ``diverged``, ``reason`` only for ``could-not-check``.
`from_json` accepts only that canonical spelling (one accepted encoding per
attestation, so duplicates are recognised by their bytes) and verifies the signature.
"""

from __future__ import annotations

import enum
import hashlib
import re
import struct
from dataclasses import dataclass
from typing import Any, Final

from fbs.did import DatasetId
from fbs.errors import FbsError
from fbs.keys import KeyPair, signature_from_multibase, signature_to_multibase, verify
from fbs.multiformats import SHA3_256, Multihash, parse_hash
from fbs.timestamp import Timestamp
from p2p.canonical_json import canonical_json, load_json
from p2p.errors import InvalidAttestation

__all__ = [
    "ATTESTATION_DOMAIN",
    "ATTESTATION_VERSION",
    "MAX_ATTESTATION_BYTES",
    "MAX_ENGINE_CHARS",
    "MAX_FIELD_CHARS",
    "MAX_REASON_CHARS",
    "Attestation",
    "Verdict",
    "attestation_message",
    "sign_attestation",
]

#: Signing domain passed to `fbs.keys` (a v2 format gets a new domain).
ATTESTATION_DOMAIN: Final = "attestation/v1"
#: Format version inside the signed bytes and the JSON form.
ATTESTATION_VERSION: Final = 1
#: Largest JSON attestation accepted (a canonical one is about 500 bytes; a long reason
#: with escaped non-ASCII text stays below this).
MAX_ATTESTATION_BYTES: Final = 8 * 1024
#: Longest ``field`` of a ``diverged`` verdict.
MAX_FIELD_CHARS: Final = 128
#: Longest ``reason`` of a ``could-not-check`` verdict.
MAX_REASON_CHARS: Final = 512
#: Longest engine identity.
MAX_ENGINE_CHARS: Final = 256
#: Largest sequence number (i64, so that JSON readers with signed 64-bit ints agree).
MAX_SEQUENCE_NUMBER: Final = 2**63 - 1

_MAGIC: Final = b"odf-attestation\x00"
_I64: Final = struct.Struct(">q")
_U64: Final = struct.Struct(">Q")
_U16: Final = struct.Struct(">H")
_SIGNATURE_SIZE: Final = 64
_BASE_FIELDS: Final = frozenset(
    {
        "blockHash",
        "datasetId",
        "engine",
        "sequenceNumber",
        "signature",
        "systemTime",
        "validator",
        "verdict",
        "version",
    }
)
# Field names as `node.validation.replay` spells them:
# ``newData.logicalHash``, ``queryInputs[0].newOffset``.
_FIELD_RE: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.\[\]]*")
# No control characters in free text: it ends up in terminals and logs.
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class Verdict(enum.StrEnum):
    """What a validator found when it checked a block."""

    REPRODUCED = "reproduced"
    DIVERGED = "diverged"
    COULD_NOT_CHECK = "could-not-check"


_CODES: Final = {Verdict.REPRODUCED: 1, Verdict.DIVERGED: 2, Verdict.COULD_NOT_CHECK: 3}
_DETAIL_KEY: Final = {Verdict.DIVERGED: "field", Verdict.COULD_NOT_CHECK: "reason"}


def _check_detail(verdict: Verdict, detail: str) -> None:
    if not isinstance(detail, str):
        raise InvalidAttestation("detail must be a string")
    if verdict is Verdict.REPRODUCED:
        if detail:
            raise InvalidAttestation("a reproduced verdict carries no detail")
    elif verdict is Verdict.DIVERGED:
        if not 0 < len(detail) <= MAX_FIELD_CHARS or not _FIELD_RE.fullmatch(detail):
            raise InvalidAttestation(
                f"a diverged verdict names a field ({_FIELD_RE.pattern}, at most "
                f"{MAX_FIELD_CHARS} characters), got {detail[:40]!r}"
            )
    elif not 0 < len(detail) <= MAX_REASON_CHARS or _CONTROL_RE.search(detail):
        raise InvalidAttestation(
            f"a could-not-check verdict has a reason of 1 to {MAX_REASON_CHARS} characters "
            "without control characters"
        )


def _check_engine(engine: str) -> None:
    if (
        not isinstance(engine, str)
        or not 0 < len(engine) <= MAX_ENGINE_CHARS
        or _CONTROL_RE.search(engine)
    ):
        raise InvalidAttestation(
            f"engine identity must be 1 to {MAX_ENGINE_CHARS} characters without control characters"
        )


@dataclass(frozen=True, slots=True)
class Attestation:
    """A validator's signed verdict on one block of one dataset.

    Attributes:
        validator: the validator's identity (its ed25519 key; ``did:key`` in JSON).
        dataset_id: the dataset the block belongs to.
        block_hash: the block checked (SHA3-256).
        sequence_number: that block's sequence number.
        verdict: see `Verdict`.
        detail: the first differing field (``diverged``), the reason
            (``could-not-check``), or ``""`` (``reproduced``).
        engine: the identity of the engine the validator used.
        system_time: when the validator checked.
        signature: 64-byte ed25519 signature over `signing_message`.

    Raises:
        InvalidAttestation: on construction with values of the wrong type or range.
    """

    validator: DatasetId
    dataset_id: DatasetId
    block_hash: Multihash
    sequence_number: int
    verdict: Verdict
    detail: str
    engine: str
    system_time: Timestamp
    signature: bytes

    def __post_init__(self) -> None:
        _check_values(
            self.validator,
            self.dataset_id,
            self.block_hash,
            self.sequence_number,
            self.verdict,
            self.detail,
            self.engine,
            self.system_time,
        )
        if not isinstance(self.signature, bytes) or len(self.signature) != _SIGNATURE_SIZE:
            raise InvalidAttestation(f"signature must be {_SIGNATURE_SIZE} bytes")

    # -- signing --------------------------------------------------------------------

    def signing_message(self) -> bytes:
        """The canonical bytes the signature covers (see the module docstring)."""
        return attestation_message(
            self.validator,
            self.dataset_id,
            self.block_hash,
            self.sequence_number,
            self.verdict,
            self.detail,
            self.engine,
            self.system_time,
        )

    def verify(self) -> None:
        """Check the signature against the validator's DID.

        Raises:
            InvalidAttestation: the signature does not verify.
        """
        try:
            verify(self.validator, self.signing_message(), self.signature, ATTESTATION_DOMAIN)
        except FbsError as e:
            raise InvalidAttestation(f"attestation signature does not verify: {e}") from None

    @property
    def digest(self) -> str:
        """Hex SHA3-256 of the canonical JSON: names this exact attestation."""
        return hashlib.sha3_256(self.to_json()).hexdigest()

    # -- wire form ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the wire form."""
        obj: dict[str, Any] = {
            "blockHash": self.block_hash.to_multibase(),
            "datasetId": self.dataset_id.to_did_odf(),
            "engine": self.engine,
            "sequenceNumber": self.sequence_number,
            "signature": signature_to_multibase(self.signature),
            "systemTime": self.system_time.to_rfc3339(),
            "validator": self.validator.to_did_key(),
            "verdict": str(self.verdict),
            "version": ATTESTATION_VERSION,
        }
        key = _DETAIL_KEY.get(self.verdict)
        if key is not None:
            obj[key] = self.detail
        return obj

    def to_json(self) -> bytes:
        """Canonical JSON bytes (sorted keys, no whitespace, ASCII)."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, obj: object, *, verify: bool = True) -> Attestation:
        """Parse the JSON object form (no canonical-bytes check; see `from_json`).

        Raises:
            InvalidAttestation: missing/extra/mistyped fields, bad values, or (with
                ``verify``) a signature that does not verify.
        """
        if not isinstance(obj, dict):
            raise InvalidAttestation("an attestation is a JSON object")
        verdict_text = obj.get("verdict")
        if not isinstance(verdict_text, str):
            raise InvalidAttestation("attestation field verdict must be a string")
        try:
            verdict = Verdict(verdict_text)
        except ValueError:
            raise InvalidAttestation(f"unknown verdict {verdict_text[:40]!r}") from None
        detail_key = _DETAIL_KEY.get(verdict)
        expected = _BASE_FIELDS | {detail_key} if detail_key else _BASE_FIELDS
        if set(obj) != expected:
            raise InvalidAttestation(
                f"a {verdict} attestation is an object with exactly {sorted(expected)}"
            )
        if type(obj["version"]) is not int or obj["version"] != ATTESTATION_VERSION:
            raise InvalidAttestation(f"unsupported attestation version {obj['version']!r}")
        for key in expected - {"sequenceNumber", "version"}:
            if not isinstance(obj[key], str):
                raise InvalidAttestation(f"attestation field {key} must be a string")
        if type(obj["sequenceNumber"]) is not int:
            raise InvalidAttestation("attestation field sequenceNumber must be an integer")
        try:
            validator = DatasetId.from_did(obj["validator"])
            dataset_id = DatasetId.from_did(obj["datasetId"])
            block_hash = parse_hash(obj["blockHash"], code=SHA3_256)
            signature = signature_from_multibase(obj["signature"])
            system_time = Timestamp.parse_rfc3339(obj["systemTime"])
        except FbsError as e:
            raise InvalidAttestation(f"malformed attestation: {e}") from None
        attestation = cls(
            validator,
            dataset_id,
            block_hash,
            obj["sequenceNumber"],
            verdict,
            obj[detail_key] if detail_key else "",
            obj["engine"],
            system_time,
            signature,
        )
        if verify:
            attestation.verify()
        return attestation

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview, *, verify: bool = True) -> Attestation:
        """Parse the canonical JSON wire form and (by default) verify the signature.

        Raises:
            InvalidAttestation: larger than `MAX_ATTESTATION_BYTES`, not the canonical
                JSON of an attestation, or (with ``verify``) a bad signature.
        """
        obj, raw = load_json(
            data, max_bytes=MAX_ATTESTATION_BYTES, what="attestation", error=InvalidAttestation
        )
        attestation = cls.from_dict(obj, verify=False)
        if attestation.to_json() != raw:
            raise InvalidAttestation("attestation is not in canonical form")
        if verify:
            attestation.verify()
        return attestation

    def __repr__(self) -> str:
        detail = f" {self.detail!r}" if self.detail else ""
        return (
            f"Attestation({self.validator.to_did_key()[:20]}..., "
            f"{self.dataset_id.to_did_odf()[:20]}..., #{self.sequence_number} "
            f"{self.block_hash.short()}: {self.verdict}{detail})"
        )


def _check_values(
    validator: object,
    dataset_id: object,
    block_hash: object,
    sequence_number: object,
    verdict: object,
    detail: str,
    engine: str,
    system_time: object,
) -> None:
    if not isinstance(validator, DatasetId) or not isinstance(dataset_id, DatasetId):
        raise InvalidAttestation("validator and dataset_id must be DatasetIds")
    if not isinstance(block_hash, Multihash) or block_hash.code != SHA3_256:
        raise InvalidAttestation("block_hash must be a SHA3-256 Multihash")
    if type(sequence_number) is not int or not 0 <= sequence_number <= MAX_SEQUENCE_NUMBER:
        raise InvalidAttestation(f"sequence number out of range: {sequence_number!r}")
    if not isinstance(verdict, Verdict):
        raise InvalidAttestation("verdict must be a Verdict")
    _check_detail(verdict, detail)
    _check_engine(engine)
    if not isinstance(system_time, Timestamp) or not -(2**63) <= system_time.nanos < 2**63:
        raise InvalidAttestation("system_time must be a Timestamp in the i64 nanosecond range")


def attestation_message(
    validator: DatasetId,
    dataset_id: DatasetId,
    block_hash: Multihash,
    sequence_number: int,
    verdict: Verdict,
    detail: str,
    engine: str,
    system_time: Timestamp,
) -> bytes:
    """The canonical signed bytes for these values (see the module docstring).

    Raises:
        InvalidAttestation: values of the wrong type or out of range.
    """
    _check_values(
        validator, dataset_id, block_hash, sequence_number, verdict, detail, engine, system_time
    )
    block_bytes = block_hash.to_bytes()
    detail_bytes = detail.encode("utf-8")
    engine_bytes = engine.encode("utf-8")
    return b"".join(
        (
            _MAGIC,
            bytes((ATTESTATION_VERSION,)),
            validator.to_bytes(),
            dataset_id.to_bytes(),
            bytes((len(block_bytes),)),
            block_bytes,
            _U64.pack(sequence_number),
            bytes((_CODES[verdict],)),
            _U16.pack(len(detail_bytes)),
            detail_bytes,
            _U16.pack(len(engine_bytes)),
            engine_bytes,
            _I64.pack(system_time.nanos),
        )
    )


def sign_attestation(
    keypair: KeyPair,
    *,
    dataset_id: DatasetId,
    block_hash: Multihash,
    sequence_number: int,
    verdict: Verdict,
    detail: str = "",
    engine: str,
    system_time: Timestamp | None = None,
) -> Attestation:
    """Sign a verdict on a block with the validator key ``keypair``.

    Args:
        keypair: the validator's key (its DID is the validator identity).
        dataset_id / block_hash / sequence_number: the block checked.
        verdict / detail: what was found (see `Attestation`).
        engine: the engine identity used.
        system_time: when (default: now).

    Raises:
        InvalidAttestation: a value of the wrong type or out of range, or a detail that
            does not suit the verdict.
    """
    when = Timestamp.now() if system_time is None else system_time
    validator = keypair.dataset_id
    message = attestation_message(
        validator, dataset_id, block_hash, sequence_number, verdict, detail, engine, when
    )
    signature = keypair.sign(message, ATTESTATION_DOMAIN)
    return Attestation(
        validator,
        dataset_id,
        block_hash,
        sequence_number,
        verdict,
        detail,
        engine,
        when,
        signature,
    )
