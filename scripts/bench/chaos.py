"""Hostile-peer benchmark (issue 18): what each attack costs a real node, in one run.

Usage: .venv/bin/python scripts/bench/chaos.py [--only NAME ...]

The setup and the attacks are those of ``tests/node/test_chaos.py``: node A
(``odf node run`` subprocess) owns a dataset, node B (subprocess) follows it, a hostile
host in this process attacks A while A publishes a new head. Printed per attack, with
the no-attack baseline measured in the same run:

- time for B to replicate the head published during the attack, and its ratio to the
  baseline (target: <= 3x + 10 s);
- A's peak RSS growth over its RSS before the attack (target: <= 200 MiB);
- A's CPU seconds during the attack;
- what A's gates counted (gossip messages dropped, streams refused or closed, busy
  answers, aborted downloads) and the peers it banned;
- the attacker's own figures (streams, requests, messages sent).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

# This directory holds ``multihash.py`` (another benchmark), which would shadow the
# ``multihash`` package libp2p imports: drop it from the path, add the repository root.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parents[1]))

from tests.node.test_chaos import ATTACKS, MAX_RSS_GROWTH, Net, chaos_net, hostile_run  # noqa: E402

_COUNTERS = (
    ("libp2p", ("rateLimited", "invalidMessages", "bannedDropped", "refusedConnections")),
    ("libp2p", ("malformedStreams", "handlerFailures")),
    ("exchange", ("streamsRefused", "idleClosed", "busy", "abortedDownloads")),
)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _counters(status: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for section, names in _COUNTERS:
        for name in names:
            out[name] = float(status.get(section, {}).get(name, 0))
    out["bans"] = float(len(status.get("libp2p", {}).get("bans", [])))
    return out


def _run(net: Net, name: str) -> None:
    pid = net.a.proc.pid
    before, cpu0 = _counters(net.a.status()), _cpu_s(pid)
    figures = asyncio.run(hostile_run(net, ATTACKS[name]))
    cpu = _cpu_s(pid) - cpu0
    after = _counters(net.a.status())
    delta = {k: int(after[k] - before[k]) for k in after if after[k] != before[k]}
    took, growth = figures.pop("replicate_s"), figures.pop("peak_growth")
    limit = 3 * net.baseline_s + 10
    ok = took <= limit and growth <= MAX_RSS_GROWTH and net.a.proc.poll() is None
    print(
        f"{name:17s} replicated in {took:6.2f} s ({took / net.baseline_s:5.1f}x baseline, "
        f"limit {limit:.1f} s); peak RSS +{growth / 2**20:6.1f} MiB; CPU {cpu:5.2f} s; "
        f"node counted {delta}; attacker {figures}  {'OK' if ok else 'FAIL'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(ATTACKS), default=list(ATTACKS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="odf-chaos-") as tmp, chaos_net(Path(tmp)) as net:
        print(f"baseline: B replicates a new head of A in {net.baseline_s:.2f} s (median of 3)")
        for name in args.only:
            _run(net, name)
        log = net.a.log_path.read_text(errors="replace")
        print(
            f"A still running: {net.a.proc.poll() is None}; tracebacks in A's log: "
            f"{log.count('Traceback')}"
        )


if __name__ == "__main__":
    main()
