"""The one JSON spelling of signed p2p records (head records, attestations).

Signed records travel as canonical JSON: sorted keys, no whitespace, ASCII only. A
receiver accepts a record only in that spelling (`from_json` re-encodes and compares), so
one record has exactly one byte form to hash, deduplicate and forward.
"""

from __future__ import annotations

import json
from typing import Any

from p2p.peer_json import JsonLimits, PeerJsonError, load_peer_json

__all__ = ["canonical_json", "load_json"]


def canonical_json(obj: dict[str, Any]) -> bytes:
    """``obj`` as canonical JSON bytes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def load_json(
    data: object, *, max_bytes: int, what: str, error: type[Exception]
) -> tuple[Any, bytes]:
    """Decode untrusted ``data`` (bytes-like, at most ``max_bytes``) as ASCII JSON.

    Returns the decoded value and the raw bytes (for the caller's canonical-form check).
    The other limits of `p2p.peer_json.JsonLimits` (nesting, number and string sizes)
    apply at their defaults.

    Raises:
        error: ``data`` is not bytes-like, too large, not ASCII JSON, or breaks a JSON
            limit; ``what`` names the record in the message.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise error(f"{what} must be bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise error(f"{what} larger than {max_bytes} bytes")
    raw = bytes(data)
    if not raw.isascii():
        raise error(f"{what} is not ASCII JSON")
    try:
        return load_peer_json(raw, JsonLimits(max_bytes=max_bytes), what=what), raw
    except PeerJsonError as e:
        raise error(f"{what} is not ASCII JSON ({e})") from None
