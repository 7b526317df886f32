"""The fault campaign at scale: N seeded single faults in a root and a
derivative dataset, and what ``odf verify --integrity`` and every read make of them.

Usage: .venv/bin/python scripts/bench/fault_campaign.py [--faults 1000] [--seed 20261125]
       [--processes 50] [--show 10]

The pristine workspace is the one of ``tests/node/test_fault_campaign.py`` (a root with 3
slices; a derivative with 2 ExecuteTransform blocks, 2 slices and 2 checkpoints, written
consistently with the chain rules without starting Spark), built once. Faults cycle over
every (dataset, file kind, fault) combination -- kinds ``blocks``, ``data``,
``checkpoints``, ``refs``; faults bit flip (size and mtime kept, like bit rot), truncate,
append, delete, swap (two files of one kind) -- with targets drawn from the seed. Each
fault gets its own copy of the workspace; every other one is "warm" (read once before the
fault, so the remembered verified-read stamps name the files it damages). Per fault:

* ``odf verify --integrity`` must fail with exit 5 (verification failed): "detected";
* reads: ``DatasetView.to_arrow()``, ``odf tail``, ``odf export`` (CSV), ``odf log``
  (JSON) and ``odf sql`` (embedded DataFusion, CSV) of both datasets. Each either returns
  exactly the pristine output, or fails typed (an `OdfError`; exit 3/4/5). Anything else
  is counted: exit 1 / an untyped exception, or different output with success (a silent
  wrong read).

No Spark: reads and ``verify --integrity`` treat a derivative's objects alike whatever
engine wrote them (replay of a damaged checkpoint is covered by
``tests/node/test_error_contract.py``).

The first ``--processes`` faults run every command as a real ``odf`` process (the
console script next to this interpreter); the others call `node.cli.main` in this process,
the path the test suite uses.

Exit status 1 unless verify detected 100% and there were 0 silent wrong reads and 0 exit-1.
"""

from __future__ import annotations

import argparse
import collections
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.node.test_fault_campaign import (
    DETECTED,
    PRISTINE,
    SEED,
    TYPED,
    UNTYPED,
    WRONG,
    build_pristine,
    copy_with_fault,
    judge,
    plan_faults,
    read_all,
    run_cli,
    run_exe,
)


def main() -> None:
    """Run the campaign and print the counts."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--faults", type=int, default=1000)
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--processes", type=int, default=50, help="faults run as real processes")
    p.add_argument("--show", type=int, default=10, help="findings printed in full")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="odf-bench-faults-") as tmp:
        base = Path(tmp)
        project = build_pristine(base / "pristine")
        expected = read_all(project, run_cli)
        assert run_cli(project, "verify", "--integrity")[0] == 0
        faults = plan_faults(project, random.Random(args.seed), args.faults)
        outcomes: collections.Counter[str] = collections.Counter()
        verify_exits: collections.Counter[int] = collections.Counter()
        by_combo: collections.Counter[str] = collections.Counter()
        findings: list[str] = []
        exit1 = 0
        t0 = time.perf_counter()
        for i, fault in enumerate(faults):
            warm = i % 2 == 1
            copy = copy_with_fault(project, base / f"f{i}" / "project", fault, warm=warm)
            cli = run_exe if i < args.processes else run_cli
            code, _ = cli(copy, "verify", "--integrity")
            verify_exits[code] += 1
            exit1 += code == 1
            by_combo[f"{fault.kind}/{fault.fault}"] += 1
            if code != DETECTED:
                findings.append(f"{fault}: verify exit {code}")
            for key, got in read_all(copy, cli).items():
                outcome = judge(expected[key], got)
                outcomes[outcome] += 1
                exit1 += got == ("exit", 1)
                if outcome in (UNTYPED, WRONG):
                    shown = got if outcome == UNTYPED else ""
                    findings.append(f"{fault}: {key}: {outcome} {shown}")
            shutil.rmtree(copy.parent)
            if (i + 1) % 100 == 0:
                print(f"  {i + 1} faults, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        elapsed = time.perf_counter() - t0
    detected = verify_exits[DETECTED]
    print(f"faults injected:              {len(faults)} (seed {args.seed}; {elapsed:.0f} s)")
    print(f"  by kind/fault:              {dict(sorted(by_combo.items()))}")
    print(f"  through real odf processes: {min(args.processes, len(faults))}")
    print(
        f"detected by verify:           {detected} ({100 * detected / len(faults):.1f}%); "
        f"exits {dict(sorted(verify_exits.items()))}"
    )
    print(f"reads:                        {sum(outcomes.values())}")
    print(f"  returned pristine records:  {outcomes[PRISTINE]}")
    print(f"  failed typed:               {outcomes[TYPED]}")
    print(f"  failed untyped:             {outcomes[UNTYPED]}")
    print(f"  silent wrong reads:         {outcomes[WRONG]}")
    print(f"exit-1 count (verify+reads):  {exit1}")
    for line in findings[: args.show]:
        print(f"  finding: {line}")
    ok = detected == len(faults) and outcomes[WRONG] == 0 and outcomes[UNTYPED] == 0 and not exit1
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
