"""Start-up time of the ``odf`` command and exit codes of many real CLI processes.

Usage: .venv/bin/python scripts/bench/cli.py [--repeat 21] [--runs 2000] [--jobs 2]
       [--no-bytecode]

Builds a workspace of 20 root datasets (``odf add``; 3 of them get 3 ingested slices, so
``odf verify --integrity`` reads Parquet), then

1. start time: the median wall time of ``--repeat`` sequential runs of
   ``python -c pass`` (the venv's interpreter: the floor), ``odf --help``, ``odf list``,
   ``odf log DS``, ``odf log -n 1 DS`` and ``odf node status`` (no node running: exit 3),
   ``odf sql "SELECT 1"`` and ``odf sql "SELECT count(*) ..."`` (3 slices, embedded
   engine), each printed with its spread (min..max), its ratio to the floor and its
   target (``--help``/``list`` <= 0.10 s, ``log``/``status``/``sql SELECT 1`` <= 0.15 s
   on an idle machine, where the floor is about 0.024 s: so about 4x and 6x the floor),
   and its median CPU time (user + system of the child: less disturbed by other load)
   with its ratio to the floor's. Python modules run from
   compiled bytecode, as an installed package does (pip compiles at install): the
   children get a private ``PYTHONPYCACHEPREFIX`` even when the caller sets
   ``PYTHONDONTWRITEBYTECODE``; ``--no-bytecode`` measures compiling every module from
   source at each start instead;
2. exits: ``--runs`` processes cycling through ``odf list``, ``odf log DS`` and
   ``odf verify --integrity``, ``--jobs`` at a time; prints the number of non-zero exit
   codes (by code, with the last stderr line of the first few). The failure looked for:
   SIGABRT (134) at interpreter exit.

Exit status 1 when any run exited non-zero. Set PYTHONPATH to a checkout to measure it
with this venv (e.g. a ``git archive`` of an older commit).
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "node" / "examples" / "city-populations.yaml"
DATASETS = 20
INGESTED = 3
SLICES = 3


def odf_command() -> list[str]:
    """The ``odf`` console script next to this interpreter, else ``python -m node.cli``."""
    script = Path(sys.executable).parent / "odf"
    return [str(script)] if script.exists() else [sys.executable, "-m", "node.cli"]


def make_workspace(root: Path, odf: list[str]) -> None:
    env = {**os.environ, "ODF_WORKSPACE": str(root)}
    subprocess.run([*odf, "init"], env=env, check=True, capture_output=True)
    text = EXAMPLE.read_text(encoding="utf-8")
    manifests = []
    for i in range(DATASETS):
        path = root / f"m{i:02}.yaml"
        path.write_text(text.replace("demo.city-populations", f"demo.ds{i:02}"), "utf-8")
        manifests.append(str(path))
    subprocess.run([*odf, "add", *manifests], env=env, check=True, capture_output=True)
    for i in range(INGESTED):
        for s in range(SLICES):
            csv = root / f"d{i}-{s}.csv"
            lines = ["event_time,city,population"]
            lines += [f"202{s}-01-01T00:00:00Z,C{r},{r * 7 + s}" for r in range(1000)]
            csv.write_text("\n".join(lines) + "\n", "utf-8")
            subprocess.run(
                [*odf, "ingest", f"demo.ds{i:02}", str(csv)],
                env=env,
                check=True,
                capture_output=True,
            )


def children_cpu_s() -> float:
    """CPU seconds (user + system) of the waited-for children of this process so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def times_s(
    argv: list[str], env: dict[str, str], repeat: int, ok: tuple[int, ...] = (0,)
) -> tuple[list[float], list[float]]:
    """Wall and CPU times of ``repeat`` sequential runs (each must exit with a code in
    ``ok``). CPU time (user + system of the child) is less disturbed by other load on
    the machine than wall time, though not immune (shared caches, frequency)."""
    walls, cpus = [], []
    for _ in range(repeat):
        c0, t0 = children_cpu_s(), time.perf_counter()
        proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        walls.append(time.perf_counter() - t0)
        cpus.append(children_cpu_s() - c0)
        if proc.returncode not in ok:
            raise SystemExit(f"{argv}: exit {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return walls, cpus


def bytecode_env(env: dict[str, str], cache: Path) -> dict[str, str]:
    """``env`` with compiled bytecode kept in ``cache`` (outside the checkout)."""
    out = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out["PYTHONPYCACHEPREFIX"] = str(cache)
    return out


#: (name, argv after ``odf``, accepted exit codes, target seconds on an idle machine).
START_CASES: list[tuple[str, list[str], tuple[int, ...], float | None]] = [
    ("odf --help", ["--help"], (0,), 0.10),
    ("odf list", ["list"], (0,), 0.10),
    ("odf log demo.ds00", ["log", "demo.ds00"], (0,), 0.15),
    ("odf log -n 1 demo.ds00", ["log", "-n", "1", "demo.ds00"], (0,), 0.15),
    ("odf node status", ["node", "status"], (3,), 0.15),
    ("odf sql SELECT 1", ["sql", "SELECT 1"], (0,), 0.15),
    ("odf sql count(*)", ["sql", "SELECT count(*) AS n FROM `demo.ds00`"], (0,), None),
]


def start_times(odf: list[str], env: dict[str, str], repeat: int) -> None:
    cases: list[tuple[str, list[str], tuple[int, ...], float | None]]
    cases = [("python -c pass", [sys.executable, "-c", "pass"], (0,), None)]
    cases += [(name, [*odf, *argv], ok, target) for name, argv, ok, target in START_CASES]
    for _name, argv, _ok, _t in cases:  # warm the page cache, .pyc files, state caches
        subprocess.run(argv, env=env, capture_output=True)
    floor = cpu_floor = None
    print(
        f"{'command':<24} {'median s':>9} {'min..max s':>13} {'x python':>9} {'target':>7}"
        f" {'cpu s':>6} {'cpu x python':>12}"
    )
    for name, argv, ok, target in cases:
        t, cpu = times_s(argv, env, repeat, ok)
        m, c = statistics.median(t), statistics.median(cpu)
        floor, cpu_floor = floor or m, cpu_floor or c
        goal = f"{target:.2f}" if target else ""
        print(
            f"{name:<24} {m:9.3f} {min(t):6.3f}..{max(t):5.3f} {m / floor:9.1f} {goal:>7}"
            f" {c:6.3f} {c / cpu_floor:12.1f}"
        )
    print("(target: seconds on an idle machine; the floor there is about 0.024 s)")


def exit_codes(odf: list[str], env: dict[str, str], runs: int, jobs: int) -> int:
    commands = [[*odf, "list"], [*odf, "log", "demo.ds00"], [*odf, "verify", "--integrity"]]

    def one(i: int) -> tuple[int, str]:
        argv = commands[i % len(commands)]
        proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        return proc.returncode, f"{' '.join(argv[-2:])}: {lines[-1] if lines else ''}"

    t0 = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(one, range(runs)))
    elapsed = time.perf_counter() - t0
    bad = [(code, why) for code, why in results if code != 0]
    by_code = collections.Counter(code for code, _ in bad)
    print(
        f"{runs} runs ({jobs} at a time, {elapsed:.0f} s): {len(bad)} non-zero exit(s)"
        + (f" {dict(by_code)}" if bad else "")
    )
    for code, why in bad[:5]:
        print(f"  exit {code}: {why}")
    return len(bad)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=21, help="runs per start-time median")
    ap.add_argument("--runs", type=int, default=2000, help="processes for the exit-code count")
    ap.add_argument("--jobs", type=int, default=2, help="processes at a time")
    ap.add_argument("--no-bytecode", action="store_true", help="compile every module at each start")
    args = ap.parse_args()
    odf = odf_command()
    with tempfile.TemporaryDirectory(prefix="odf-bench-cli-") as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        make_workspace(root, odf)
        env = {**os.environ, "ODF_WORKSPACE": str(root)}
        if not args.no_bytecode:
            env = bytecode_env(env, Path(tmp) / "pycache")
        if args.repeat > 0:
            start_times(odf, env, args.repeat)
        failures = exit_codes(odf, env, args.runs, args.jobs) if args.runs > 0 else 0
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
