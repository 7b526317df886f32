"""S3 compare-and-swap under contention, on a real SeaweedFS server on loopback.

Usage: .venv/bin/python scripts/bench/s3_race.py [--writers 8] [--commits 20]
       [--creators 16] [--rounds 3] [--no-cas-check]

1. **commit race**: ``--writers`` processes x ``--commits`` ``SetInfo`` commits into one
   dataset on S3 (`storage.s3.commit.S3Committer`, retrying lost races). Checked: the
   chain from ``refs/head`` holds exactly writers x commits new blocks in one linear
   chain, every commit present. Printed: attempts per commit, wall time.
2. **create race**: ``--creators`` processes create the same dataset at once,
   ``--rounds`` times; each round must have exactly one winner.
3. **control** (unless ``--no-cas-check``): the same commit race against a store that
   ignores conditional headers (`tests.storage.s3.nocas_server`): the checker must see
   lost commits there, or it proves nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from storage.s3.url import S3Location
from tests.storage.s3.nocas_server import nocas_server
from tests.storage.s3.race import run_commit_race, run_create_race
from tests.storage.s3.seaweed import start_seaweed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--writers", type=int, default=8)
    p.add_argument("--commits", type=int, default=20)
    p.add_argument("--creators", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-cas-check", action="store_true")
    args = p.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="odf-s3-race-") as tmp:
        server = start_seaweed(Path(tmp))
        os.environ.update(server.env())
        try:
            loc = S3Location(server.endpoint, server.bucket, f"race-{uuid.uuid4().hex[:8]}")
            race = run_commit_race(loc.child("commits"), args.writers, args.commits)
            want = args.writers * args.commits
            good = race.new_blocks == want and race.linear and race.lost == 0
            ok &= good
            print(
                f"commit race {args.writers}x{args.commits}: {race.new_blocks} new blocks "
                f"(want {want}), linear={race.linear}, lost={race.lost}, "
                f"{race.attempts / want:.2f} attempts/commit, {race.seconds:.1f} s "
                f"({'OK' if good else 'FAILED'})"
            )
            for r in range(args.rounds):
                winners = run_create_race(loc.child(f"create-{r}"), args.creators)
                ok &= winners == 1
                print(f"create race {r + 1}: {args.creators} creators, {winners} winner(s)")
        finally:
            server.stop()
    if not args.no_cas_check:
        with nocas_server() as (endpoint, _objects, _writes):
            loc = S3Location(endpoint, "bucket", "control")
            race = run_commit_race(loc, args.writers, args.commits)
            print(
                f"control, store without conditional writes: {race.new_blocks} new blocks, "
                f"lost={race.lost} (the checker must see losses here)"
            )
            ok &= race.lost > 0 or race.new_blocks != args.writers * args.commits
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
