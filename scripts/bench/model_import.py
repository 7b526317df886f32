"""Import time of ``fbs.model`` + ``fbs.codec`` in fresh processes.

Usage: .venv/bin/python scripts/bench/model_import.py [--repeat 21]
       [--baseline-rev REV | --baseline DIR]

Runs, interleaved round by round so that the machine's load hits every variant alike,
``--repeat`` fresh interpreters (this venv's) of

- ``python -c pass``: the floor (interpreter start, site, the editable-install finder);
- ``python -c "import fbs.model, fbs.codec"`` on this tree;
- the same on a baseline tree, when one is given: ``--baseline DIR`` (a checkout) or
  ``--baseline-rev REV`` (a ``git archive`` of that commit into a temporary folder).

Each tree is put first on ``PYTHONPATH``, so the import reads it and not the editable
install. Modules run from compiled bytecode, as an installed package does: the children
get a private ``PYTHONPYCACHEPREFIX`` (warmed by one untimed run of each variant), even
when the caller sets ``PYTHONDONTWRITEBYTECODE``.

Prints each variant's median wall time with its spread (min..max), its import cost
(median minus the floor's median) and the median CPU time of the child (user +
system). Then the package's own import time: a fresh child first imports every
non-``fbs`` module that the import loads in either tree (dataclasses and inspect,
typing, hashlib, json, decimal, datetime ...: what any ``odf`` command loads anyway),
then times ``import fbs.model, fbs.codec`` in-process (median, min..max of
``--repeat`` children per tree, interleaved with the others). With a baseline, the
ratios baseline / this tree of the import cost (wall, CPU) and of the own time. No
target is asserted here; the figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gittree import archive

ROOT = Path(__file__).resolve().parents[2]
IMPORT = "import fbs.model, fbs.codec"


def children_cpu_s() -> float:
    """User + system CPU seconds of the waited-for children so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_once(code: str, env: dict[str, str]) -> tuple[float, float]:
    """(wall s, cpu s) of one fresh interpreter running ``code``."""
    c0, t0 = children_cpu_s(), time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, cwd=env["PYTHONPYCACHEPREFIX"]
    )
    return time.perf_counter() - t0, children_cpu_s() - c0


def child_env(tree: Path | None, cache: Path) -> dict[str, str]:
    """The environment of a child: bytecode on, in ``cache``; ``tree`` first on the path."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return env


def check_origin(tree: Path, env: dict[str, str]) -> None:
    """Fail loudly if ``fbs.model`` would not be read from ``tree``."""
    out = subprocess.run(
        [sys.executable, "-c", "import fbs.model; print(fbs.model.__file__)"],
        env=env,
        cwd=env["PYTHONPYCACHEPREFIX"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(out).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"fbs.model comes from {out}, not from {tree}")


def report(name: str, walls: list[float], cpus: list[float], floor: float) -> float:
    """Print one variant's line; return its median import cost (wall, s)."""
    m = statistics.median(walls)
    cost = m - floor
    print(
        f"{name:<28} {m:9.4f} {min(walls):7.4f}..{max(walls):<7.4f} {cost:9.4f} "
        f"{statistics.median(cpus):9.4f}"
    )
    return cost


def stdlib_of(trees: list[Path], cache: Path) -> list[str]:
    """The modules other than ``fbs.*`` that the import loads, in any of ``trees``."""
    probe = (
        "import sys; before = set(sys.modules); " + IMPORT + "; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    names: set[str] = set()
    for tree in trees:
        env = child_env(tree, cache)
        out = subprocess.run(
            [sys.executable, "-c", probe],
            env=env,
            cwd=cache,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        names.update(n for n in out if n.split(".")[0] != "fbs")
    return sorted(names)


def own_code(preload: list[str]) -> str:
    """A child that loads ``preload`` first, then prints the import's own time (s)."""
    return (
        f"import {', '.join(preload)}\n"
        "import time\n"
        "t = time.perf_counter()\n"
        f"{IMPORT}\n"
        "print(time.perf_counter() - t)\n"
    )


def run_own(code: str, env: dict[str, str]) -> float:
    """The in-process import time printed by one fresh child."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=env["PYTHONPYCACHEPREFIX"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=21, help="fresh processes per variant")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--baseline", type=Path, help="a checkout to compare with")
    group.add_argument("--baseline-rev", help="a commit of this repository to compare with")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="odf-model-import-") as tmp:
        # The children run in the cache folder: ``-c`` puts the working folder first on
        # sys.path, and this one holds no package.
        cache = Path(tmp) / "pycache"
        cache.mkdir()
        trees = {"this tree": ROOT}
        base = archive(args.baseline_rev, Path(tmp)) if args.baseline_rev else args.baseline
        if base is not None:
            trees[f"baseline {args.baseline_rev or base}"[:28]] = base
        envs = {name: child_env(tree, cache) for name, tree in trees.items()}
        for name, tree in trees.items():
            check_origin(tree, envs[name])
        variants = {"python -c pass": ("pass", child_env(None, cache))}
        variants.update({name: (IMPORT, envs[name]) for name in trees})
        preload = stdlib_of(list(trees.values()), cache)
        own = own_code(preload)
        for code, env in variants.values():
            run_once(code, env)  # compile and cache the bytecode
        walls: dict[str, list[float]] = {k: [] for k in variants}
        cpus: dict[str, list[float]] = {k: [] for k in variants}
        owns: dict[str, list[float]] = {k: [] for k in trees}
        for _ in range(args.repeat):
            for name, (code, env) in variants.items():
                w, c = run_once(code, env)
                walls[name].append(w)
                cpus[name].append(c)
            for name in trees:
                owns[name].append(run_own(own, envs[name]))

    floor = statistics.median(walls["python -c pass"])
    floor_cpu = statistics.median(cpus["python -c pass"])
    print(f"{IMPORT!r}, median of {args.repeat} fresh processes, load {os.getloadavg()[0]:.1f}")
    print(f"{'variant':<28} {'median s':>9} {'min..max s':>16} {'import s':>9} {'cpu s':>9}")
    costs = {name: report(name, walls[name], cpus[name], floor) for name in variants}
    print(
        f"own import time (in-process, after the {len(preload)} non-fbs modules it loads: "
        f"{', '.join(n for n in preload if '.' not in n and not n.startswith('_'))})"
    )
    for name in trees:
        o = owns[name]
        print(f"{name:<28} {statistics.median(o):9.4f} {min(o):7.4f}..{max(o):<7.4f}")
    names = list(trees)
    if len(names) == 2:
        ours, theirs = names
        ours_cpu = statistics.median(cpus[ours]) - floor_cpu
        theirs_cpu = statistics.median(cpus[theirs]) - floor_cpu
        print(
            f"baseline / this tree: import cost wall {costs[theirs] / costs[ours]:.2f}x, "
            f"cpu {theirs_cpu / ours_cpu:.2f}x; own import time "
            f"{statistics.median(owns[theirs]) / statistics.median(owns[ours]):.2f}x"
        )


if __name__ == "__main__":
    main()
