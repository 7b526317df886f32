"""Cost of verified reads: a full read / ``odf export`` with every slice
checked against its block, vs the same read unverified, in the same run.

Usage: .venv/bin/python scripts/bench/verified_reads.py [--mb 200] [--slices 20] [--repeat 9]

Builds a workspace with one root dataset of about ``--mb`` MB of Parquet in ``--slices``
AddData slices (random int64/float64 payload, so it does not compress away), then times:

* in-process full read (``DatasetView.to_arrow``): unverified (the same call with the
  check patched out: every slice file opened by path, as before 13.2), verified cold
  (nothing remembered: each slice is read once, hashed, and parsed from those bytes),
  verified warm (second read: one
  ``lstat`` per slice against the remembered stamps);
* ``odf export --output-format parquet`` as whole processes: verified (warm: the stamps
  come from the persistent record ``.odf/cache/verified/<did>.json``) vs the same process
  with the check patched out.

Runs alternate within a round so load hits every side alike; medians are printed with
the ratios verified/unverified (target for the warm read and the export: <= 1.10).
1 GB (``--mb 1024``) works too; the default is 200 MB to keep the run short on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import pyarrow as pa
from benchdata import TS, build_root, system_schema

ALIAS = "bench.verified"
ROW_BYTES = 28  # about what a row costs in the Parquet file below

EXPORT = """
import sys
if sys.argv[1] == "off":
    import storage.verified as v
    v.VerifiedObjects.check = lambda *a, **k: None
from node.cli import main
sys.exit(main(["--workspace", sys.argv[2], "export", sys.argv[3],
               "--output-format", "parquet", "--output-path", sys.argv[4]]))
"""


def build(root: Path, mb: int, slices: int) -> int:
    """The workspace with the dataset; returns the total size of its slices."""
    from storage.workspace import Workspace

    schema = system_schema(pa.field("a", pa.int64()), pa.field("b", pa.float64()))
    rng = np.random.default_rng(13)
    per = mb * 2**20 // ROW_BYTES // slices

    def make(s: int, start: int, clock: int) -> pa.Table:
        return pa.table(
            {
                "offset": pa.array(np.arange(start, start + per, dtype=np.int64)),
                "op": pa.array(np.zeros(per, dtype=np.int32)),
                "system_time": pa.array(np.full(per, clock + s, dtype=np.int64)).cast(TS),
                "event_time": pa.array(np.arange(per, dtype=np.int64) + clock - per).cast(TS),
                "a": pa.array(rng.integers(0, 2**62, per, dtype=np.int64)),
                "b": pa.array(rng.random(per)),
            },
            schema=schema,
        )

    _ds, files = build_root(Workspace.init(root), ALIAS, schema, slices, per, make, root.parent)
    return sum(f.stat().st_size for f in files)


def read_unverified(project: Path) -> pa.Table:
    """The same `to_arrow` with the check patched out (the pre-13.2 read: by path)."""
    import storage.verified as v

    real = v.VerifiedObjects.check
    v.VerifiedObjects.check = lambda *a, **k: None  # type: ignore[method-assign]
    try:
        return read_verified(project)
    finally:
        v.VerifiedObjects.check = real  # type: ignore[method-assign]


def read_verified(project: Path) -> pa.Table:
    from node.api import open_workspace

    return open_workspace(project).dataset(ALIAS).to_arrow()


def forget(project: Path) -> None:
    import storage.verified as v

    v.forget_all()
    for record in (project / ".odf" / "cache" / v.RECORD_DIR).glob("*.json"):
        record.unlink()


def timed(fn: object, *args: object) -> float:
    t0 = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--slices", type=int, default=20)
    p.add_argument("--repeat", type=int, default=9)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="odf-bench-vr-") as tmp:
        project = Path(tmp) / "project"
        t0 = time.perf_counter()
        size = build(project, args.mb, args.slices)
        print(
            f"dataset: {size / 2**20:.0f} MB in {args.slices} slices "
            f"({time.perf_counter() - t0:.0f} s to build)"
        )
        assert read_verified(project).equals(read_unverified(project))
        unv: list[float] = []
        cold: list[float] = []
        warm: list[float] = []
        for i in range(args.repeat):
            forget(project)
            cold.append(timed(read_verified, project))
            # unverified and warm alternate, the order flipping every round (ABBA)
            pair = [(read_unverified, unv), (read_verified, warm)]
            for fn, acc in pair if i % 2 == 0 else pair[::-1]:
                acc.append(timed(fn, project))
        out = Path(tmp) / "out.parquet"
        exe = [sys.executable, "-c", EXPORT]
        exp_on: list[float] = []
        exp_off: list[float] = []
        read_verified(project)  # the persistent record holds every slice
        for i in range(args.repeat):
            modes = [("off", exp_off), ("on", exp_on)]
            for mode, acc in modes if i % 2 == 0 else modes[::-1]:
                t = time.perf_counter()
                subprocess.run(
                    [*exe, mode, str(project), ALIAS, str(out)],
                    check=True,
                    capture_output=True,
                    env={**os.environ},
                )
                acc.append(time.perf_counter() - t)
        m = statistics.median
        print(f"full read, unverified          {m(unv):7.3f} s")
        print(f"full read, verified cold       {m(cold):7.3f} s  ratio {m(cold) / m(unv):.2f}")
        print(
            f"full read, verified warm       {m(warm):7.3f} s  ratio {m(warm) / m(unv):.2f}"
            "  (target <= 1.10)"
        )
        print(f"odf export parquet, unverified {m(exp_off):7.3f} s")
        print(
            f"odf export parquet, verified   {m(exp_on):7.3f} s  ratio {m(exp_on) / m(exp_off):.2f}"
            "  (target <= 1.10)"
        )


if __name__ == "__main__":
    main()
