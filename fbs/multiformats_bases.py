"""Fast base58btc and base64url (no padding) codecs for multibase ``z`` and ``u`` texts.

The `multiformats`/`bases` packages validate types at run time and take milliseconds per
DID or signature; these take microseconds. Both decoders accept only the characters of
their alphabet; `fbs.multiformats.decode_multibase` also insists on the canonical form.
The tests check both directions against the packages and against the spec vectors.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Final

from fbs.errors import InvalidMultiformat

#: The Bitcoin base58 alphabet (multibase ``base58btc``).
B58_ALPHABET: Final = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX: Final[dict[str, int]] = {c: i for i, c in enumerate(B58_ALPHABET)}
_B64URL_RE: Final = re.compile(r"[A-Za-z0-9_-]*")


def b58encode(data: bytes) -> str:
    """base58btc text of ``data``: one ``1`` per leading zero byte, then the number in base 58."""
    zeros = len(data) - len(data.lstrip(b"\0"))
    n = int.from_bytes(data, "big")
    digits: list[str] = []
    while n:
        n, r = divmod(n, 58)
        digits.append(B58_ALPHABET[r])
    return "1" * zeros + "".join(reversed(digits))


def b58decode(text: str) -> bytes:
    """Bytes of base58btc ``text``.

    Raises:
        InvalidMultiformat: a character outside the base58btc alphabet.
    """
    zeros = len(text) - len(text.lstrip("1"))
    n = 0
    for c in text:
        i = _B58_INDEX.get(c)
        if i is None:
            raise InvalidMultiformat(f"invalid base58btc character {c!r}")
        n = n * 58 + i
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\0" * zeros + body


def b64url_encode(data: bytes) -> str:
    """base64url text of ``data`` without padding (multibase ``base64url``)."""
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def b64url_decode(text: str) -> bytes:
    """Bytes of unpadded base64url ``text``.

    Raises:
        InvalidMultiformat: a character outside the alphabet, padding, or an impossible length.
    """
    if not _B64URL_RE.fullmatch(text) or len(text) % 4 == 1:
        raise InvalidMultiformat("invalid base64url text")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise InvalidMultiformat("invalid base64url text") from None
