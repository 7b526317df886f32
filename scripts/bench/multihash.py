"""Throughput of our multihash parse/render paths vs the `multiformats` library.

Usage: .venv/bin/python scripts/bench/multihash.py [--n 5000] [--repeat 3]

Both sides run in the same process on the same random digests; each line prints
operations per second and the ratio ours / library (> 1 means we are faster).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from multiformats import multibase, multihash

from fbs.did import DatasetId
from fbs.multiformats import SHA3_256, Multihash, parse_hash


def best_rate(fn: Callable[[], object], n: int, repeat: int) -> float:
    """Best-of-``repeat`` operations per second for ``fn`` doing ``n`` operations."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return n / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=5_000, help="operations per timed run")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per case (best is kept)")
    args = ap.parse_args()
    n, repeat = args.n, args.repeat

    digests = [os.urandom(32) for _ in range(n)]
    ours_mh = [Multihash(SHA3_256, d) for d in digests]
    hex_texts = [m.to_multibase() for m in ours_mh]
    b58_texts = [m.to_multibase("base58btc") for m in ours_mh[: max(1, n // 10)]]
    dids = [DatasetId(d).to_did_odf() for d in digests]

    # Sanity: both sides agree before we time them.
    assert multibase.encode(multihash.wrap(digests[0], "sha3-256"), "base16") == hex_texts[0]
    assert bytes(multihash.unwrap(multibase.decode(hex_texts[0]))) == digests[0]

    cases: list[tuple[str, int, Callable[[], object], Callable[[], object]]] = [
        (
            "render sha3-256 base16",
            n,
            lambda: [Multihash(SHA3_256, d).to_multibase() for d in digests],
            lambda: [multibase.encode(multihash.wrap(d, "sha3-256"), "base16") for d in digests],
        ),
        (
            "parse sha3-256 base16",
            n,
            lambda: [parse_hash(t) for t in hex_texts],
            lambda: [multihash.unwrap(multibase.decode(t)) for t in hex_texts],
        ),
        (
            "parse sha3-256 base58btc (cold path, canonical re-check)",
            len(b58_texts),
            lambda: [parse_hash(t) for t in b58_texts],
            lambda: [multihash.unwrap(multibase.decode(t)) for t in b58_texts],
        ),
        (
            "parse did:odf base16",
            n,
            lambda: [DatasetId.from_did(t) for t in dids],
            lambda: [multibase.decode(t[len("did:odf:") :]) for t in dids],
        ),
    ]

    print(f"n={n} repeat={repeat} (ops/s, best run)")
    print(f"{'case':58} {'ours':>12} {'library':>12} {'ratio':>8}")
    for name, count, ours, lib in cases:
        r_ours = best_rate(ours, count, repeat)
        r_lib = best_rate(lib, count, repeat)
        print(f"{name:58} {r_ours:12,.0f} {r_lib:12,.0f} {r_ours / r_lib:7.1f}x")


if __name__ == "__main__":
    main()
