"""State a per-key GROUP BY keeps in its checkpoint, pull after pull.

Usage: .venv/bin/python scripts/bench/streaming_state.py [--batches 20] [--rows 20000]
       [--keys 128] [--master local[2]]

Ingests ``--batches`` slices of ``--rows`` rows each (event times increasing, ``k`` among
``--keys`` keys, ``v`` an integer), and after each runs one pull of the derivative::

    SELECT max(event_time) AS event_time, k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k

with the engine in this process (`engine.transform.execute_transform`, the previous
pull's checkpoint carried over as `node.transform` does). Prints per pull: its time, the
state mode its checkpoint records, the newest checkpoint's size, and the output rows.
Then the ratios a bounded state must meet: checkpoint at the last pull vs pull 2 (target
<= 1.2, and under 1 MB for 128 keys) and time of the last pull vs pull 2 (flat: near 1).
Checks that the folded output equals the batch answer (OK / MISMATCH, exit 1 on mismatch).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.engine.streaming_helpers import (
    InputStream,
    StreamRunner,
    fold,
    state_mode,
)

QUERY = "SELECT max(event_time) AS event_time, k, count(*) AS n, sum(v) AS s FROM ev GROUP BY k"
SCHEMA = pa.schema(
    [("event_time", pa.timestamp("ms", tz="UTC")), ("k", pa.string()), ("v", pa.int64())]
)
T0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)


def _batch(rnd: random.Random, start: int, rows: int, keys: int) -> list[dict[str, Any]]:
    """``rows`` rows whose event times follow row ``start``'s (one second apart)."""
    return [
        {
            "event_time": T0 + dt.timedelta(seconds=start + i),
            "k": f"key-{rnd.randrange(keys):04d}",
            "v": rnd.randint(-1000, 1000),
        }
        for i in range(rows)
    ]


def _reference(rows: list[dict[str, Any]]) -> collections.Counter[tuple[Any, ...]]:
    groups: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in rows:
        groups[r["k"]].append(r)
    return collections.Counter(
        (max(x["event_time"] for x in g), k, len(g), sum(x["v"] for x in g))
        for k, g in groups.items()
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=128)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    from engine.spark import SparkSettings, create_session

    session = create_session(SparkSettings(master=args.master, driver_memory="1g"))
    rnd = random.Random(7)
    everything: list[dict[str, Any]] = []
    times: list[float] = []
    sizes: list[int] = []
    with tempfile.TemporaryDirectory(prefix="odf-bench-state-") as tmp:
        ev = InputStream("ev", SCHEMA, Path(tmp) / "in")
        runner = StreamRunner(session, [ev], [(None, QUERY)], Path(tmp) / "out")
        print(f"{'pull':>4} {'seconds':>8} {'mode':>10} {'checkpoint':>12} {'rows out':>9}")
        for i in range(args.batches):
            rows = _batch(rnd, len(everything), args.rows, args.keys)
            everything.extend(rows)
            ev.append(rows)
            started = time.perf_counter()
            out = runner.run()
            times.append(time.perf_counter() - started)
            assert runner.checkpoint is not None
            sizes.append(runner.checkpoint.stat().st_size)
            mode = state_mode(runner.checkpoint)
            print(f"{i + 1:>4} {times[-1]:>8.2f} {mode:>10} {sizes[-1]:>12,} {out.num_rows:>9}")
        ok = fold(runner.outputs) == _reference(everything)
    if len(sizes) >= 2:
        print(f"checkpoint last / pull 2: {sizes[-1] / sizes[1]:.2f} (target <= 1.2)")
        print(f"checkpoint last: {sizes[-1] / 1e6:.2f} MB (target < 1 MB for 128 keys)")
        print(f"time last / pull 2: {times[-1] / times[1]:.2f} (flat: near 1)")
    print("folded output vs batch answer:", "OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
