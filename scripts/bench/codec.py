"""Benchmark: encode / decode throughput of a realistic AddData block.

Baseline: raw ``hashlib.sha3_256`` over the same block bytes (the unavoidable cost of
verifying a block), measured in the same run; ratios say how many hashes one
encode/decode costs.

Usage: .venv/bin/python scripts/bench/codec.py [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Callable

from fbs.codec import decode_block, encode_block
from fbs.model import (
    AddData,
    Checkpoint,
    DataSlice,
    ExtraAttributes,
    MetadataBlock,
    OffsetInterval,
    SourceState,
)
from fbs.multiformats import ARROW0_SHA3_256, Multihash
from fbs.timestamp import Timestamp


def realistic_block() -> MetadataBlock:
    """An AddData block like kamu writes on every ingest (all common fields present)."""
    return MetadataBlock(
        system_time=Timestamp.parse_rfc3339("2024-05-01T10:11:12.345Z"),
        prev_block_hash=Multihash.sha3_256(b"prev"),
        sequence_number=1234,
        event=AddData(
            prev_checkpoint=Multihash.sha3_256(b"checkpoint-0"),
            prev_offset=999_999,
            new_data=DataSlice(
                logical_hash=Multihash(ARROW0_SHA3_256, bytes(range(32))),
                physical_hash=Multihash.sha3_256(b"data"),
                offset_interval=OffsetInterval(start=1_000_000, end=1_049_999),
                size=3_456_789,
            ),
            new_checkpoint=Checkpoint(physical_hash=Multihash.sha3_256(b"checkpoint-1"), size=4096),
            new_watermark=Timestamp.parse_rfc3339("2024-05-01T10:00:00Z"),
            new_source_state=SourceState(
                source_name="default", kind="odf/etag", value='"5f2b-61a9c8e7"'
            ),
            extra=ExtraAttributes(
                {"opendatafabric.org/linkedObjects": {"numObjectsNaive": 10, "sizeNaive": 100}}
            ),
        ),
    )


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second of ``fn`` over roughly ``seconds``."""
    n, batch = 0, 16
    start = time.perf_counter()
    while True:
        for _ in range(batch):
            fn()
        n += batch
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed
        batch = min(batch * 2, 4096)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    args = parser.parse_args()

    block = realistic_block()
    data = encode_block(block)
    assert decode_block(data) == block

    sha3 = rate(lambda: hashlib.sha3_256(data).digest(), args.seconds)
    enc = rate(lambda: encode_block(block), args.seconds)
    dec = rate(lambda: decode_block(data), args.seconds)
    enc3 = rate(lambda: encode_block(block, 3), args.seconds)

    print(f"block: AddData, {len(data)} bytes (format 2)")
    print(f"{'operation':<28}{'ops/s':>12}{'sha3 / op':>12}")
    print(f"{'sha3_256 (baseline)':<28}{sha3:>12,.0f}{1.0:>12.1f}")
    for name, r in (("encode_block v2", enc), ("encode_block v3", enc3), ("decode_block", dec)):
        print(f"{name:<28}{r:>12,.0f}{sha3 / r:>12.1f}")


if __name__ == "__main__":
    main()
