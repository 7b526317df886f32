"""Decode limits: every untrusted flatbuffer is read within these bounds.

A block is small (typically < 10 KiB); the defaults leave ample room for large
schemas and attachments while keeping the worst case of a hostile input (deep
nesting, shared sub-objects referenced many times, huge vectors) cheap.
"""

from __future__ import annotations

from typing import Final

from fbs.value import Value, set_field

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_BLOCK_BYTES",
    "MAX_DECODED_BYTES",
    "MAX_NESTING_DEPTH",
    "MAX_STRING_LEN",
    "MAX_TOTAL_OBJECTS",
    "MAX_VECTOR_LEN",
    "DecodeLimits",
]

#: Largest manifest / flatbuffer accepted (bytes).
MAX_BLOCK_BYTES: Final = 16 * 1024 * 1024
#: Deepest table nesting (root = 1); DataType nesting is the deepest legit case.
MAX_NESTING_DEPTH: Final = 64
#: Most elements in one vector.
MAX_VECTOR_LEN: Final = 100_000
#: Longest single string or byte vector (bytes).
MAX_STRING_LEN: Final = 8 * 1024 * 1024
#: Most tables + vectors + strings materialized from one buffer (bounds DAG fan-out).
MAX_TOTAL_OBJECTS: Final = 200_000
#: Most string / byte-vector bytes materialized from one buffer (shared data counted
#: once per reference, so a string referenced 1e6 times cannot explode memory).
MAX_DECODED_BYTES: Final = 64 * 1024 * 1024


class DecodeLimits(Value):
    """Bounds applied while decoding untrusted flatbuffers.

    Exceeding any of them raises `fbs.errors.BlockLimitExceeded`.
    """

    __slots__ = (
        "max_block_bytes",
        "max_decoded_bytes",
        "max_nesting_depth",
        "max_string_len",
        "max_total_objects",
        "max_vector_len",
    )

    max_block_bytes: int
    max_nesting_depth: int
    max_vector_len: int
    max_string_len: int
    max_total_objects: int
    max_decoded_bytes: int

    def __init__(
        self,
        max_block_bytes: int = MAX_BLOCK_BYTES,
        max_nesting_depth: int = MAX_NESTING_DEPTH,
        max_vector_len: int = MAX_VECTOR_LEN,
        max_string_len: int = MAX_STRING_LEN,
        max_total_objects: int = MAX_TOTAL_OBJECTS,
        max_decoded_bytes: int = MAX_DECODED_BYTES,
    ) -> None:
        set_field(self, "max_block_bytes", max_block_bytes)
        set_field(self, "max_nesting_depth", max_nesting_depth)
        set_field(self, "max_vector_len", max_vector_len)
        set_field(self, "max_string_len", max_string_len)
        set_field(self, "max_total_objects", max_total_objects)
        set_field(self, "max_decoded_bytes", max_decoded_bytes)


DEFAULT_LIMITS: Final = DecodeLimits()
